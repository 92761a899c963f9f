# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Several models on one host (plugin_utils/planner_multi.py), on the real captures of the story's
8x RTX PRO 6000 (two NUMA nodes) and a 2x H200: disjoint sets, each model's own rules inside its set,
models in service kept where they still fit, a clear refusal naming the model that does not fit."""
import json
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.llmops.vllm.plugins.module_utils import model_config
from ansible_collections.llmops.vllm.plugins.plugin_utils import planner_multi, planner_rules
from ansible_collections.llmops.vllm.plugins.plugin_utils.contracts import ModelFacts, PlanInputError
from replay_data import CONFIGS, RTX_NUMACTL, RTX_QUERY, RTX_TOPO, make_model_dir

# Models that fit on part of the story's host, from tests/fixtures/configs (real configs).
SMALL = ["Qwen__Qwen3-30B-A3B-FP8", "Qwen__Qwen3-30B-A3B", "meta-llama__Meta-Llama-3.1-8B", "meta-llama__Meta-Llama-3.1-70B",
         "nvidia__Llama-3.1-70B-Instruct-FP8", "MiniMaxAI__MiniMax-M2.5.partial", "nvidia__MiniMax-M2.5-NVFP4"]


@pytest.fixture(scope="module")
def facts(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("multi")
    return dict((name, model_config.model_facts(make_model_dir(tmp, name))) for name in SMALL + ["nvidia__Kimi-K2.5-NVFP4"])


def item(facts, config, name=None, **request):
    return planner_multi.ModelItem(name or config.lower().replace("_", "-").replace(".", "-")[:40], facts[config], request)


def test_the_story_host_serves_minimax_on_node_0_and_a_second_model_on_node_1(rtx_host, facts):
    report = planner_multi.plan_models(rtx_host, [item(facts, "MiniMaxAI__MiniMax-M2.5.partial", "minimax"),
                                                  item(facts, "Qwen__Qwen3-30B-A3B-FP8", "qwen3", port=8001)])
    assert report["fits"] and report["error"] is None and report["free_gpus"] == []
    minimax, qwen = report["models"]
    assert minimax["gpus"] == [0, 1, 2, 3] and minimax["numa_node"] == 0 and minimax["layout"] == "TP=4"
    assert qwen["gpus"] == [4, 5, 6, 7] and qwen["numa_node"] == 1
    assert qwen["performance"]["max_output_tok_s"] > 0 and minimax["performance"]["max_output_tok_s"] > 0
    assert any("rest of NUMA node 1" in reason for reason in report["reasons"])  # it grew because that is faster


def test_a_model_that_cannot_fit_is_named_with_what_it_needs(rtx_host, facts):
    report = planner_multi.plan_models(rtx_host, [item(facts, "MiniMaxAI__MiniMax-M2.5.partial", "minimax"),
                                                  item(facts, "nvidia__Kimi-K2.5-NVFP4", "kimi")])
    # the largest first: Kimi-K2.5 NVFP4 needs all eight GPUs, and then MiniMax has none left
    assert report["fits"] is False
    minimax = next(doc for doc in report["models"] if doc["name"] == "minimax")
    assert minimax["fits"] is False and minimax["gpus"] == []
    assert report["error"] == ("minimax: no GPU is left for it; it needs 4 GPU(s) - free them from another model "
                               "(pin smaller sets with gpus)")
    assert next(doc for doc in report["models"] if doc["name"] == "kimi")["gpus"] == list(range(8))


def test_pins_are_kept_and_overlapping_pins_names_and_ports_refused(rtx_host, facts):
    report = planner_multi.plan_models(rtx_host, [item(facts, "Qwen__Qwen3-30B-A3B-FP8", "a", gpus=[6, 7]),
                                                  item(facts, "meta-llama__Meta-Llama-3.1-8B", "b")])
    assert report["models"][0]["gpus"] == [6, 7] and set(report["models"][1]["gpus"]).isdisjoint({6, 7})
    with pytest.raises(PlanInputError, match="b pins GPUs \\[3\\], which a pins too"):
        planner_multi.plan_models(rtx_host, [item(facts, "Qwen__Qwen3-30B-A3B-FP8", "a", gpus=[2, 3]),
                                             item(facts, "meta-llama__Meta-Llama-3.1-8B", "b", gpus=[3, 4])])
    with pytest.raises(PlanInputError, match="a named more than once"):
        planner_multi.plan_models(rtx_host, [item(facts, "Qwen__Qwen3-30B-A3B-FP8", "a"), item(facts, "Qwen__Qwen3-30B-A3B", "a")])
    with pytest.raises(PlanInputError, match="port \\[8000\\] given to more than one model"):
        planner_multi.plan_models(rtx_host, [item(facts, "Qwen__Qwen3-30B-A3B-FP8", "a", port=8000),
                                             item(facts, "Qwen__Qwen3-30B-A3B", "b", port=8000)])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chosen=st.lists(st.sampled_from(SMALL), min_size=2, max_size=4),
       objectives=st.lists(st.sampled_from(["throughput", "latency"]), min_size=4, max_size=4))
def test_allocations_are_disjoint_and_each_set_satisfies_its_model(rtx_host, facts, chosen, objectives):
    items = [item(facts, config, "m%d" % n, objective=objectives[n]) for n, config in enumerate(chosen)]
    report = planner_multi.plan_models(rtx_host, items)
    used = [gpu for doc in report["models"] for gpu in doc["gpus"]]
    assert len(used) == len(set(used)) and set(used) | set(report["free_gpus"]) == set(range(8))
    assert set(used).isdisjoint(report["free_gpus"])
    for doc, one in zip(report["models"], items, strict=True):
        if not doc["fits"]:
            assert doc["error"] and doc["name"] in report["error"]
            continue
        # the plan inside the set is the single-model planner's: its GPUs are the set, its layout divides the model
        assert sorted(doc["gpu_indices"]) == sorted(doc["gpus"]) or set(doc["gpu_indices"]) <= set(doc["gpus"])
        tp, dp = doc["tensor_parallel_size"], doc["data_parallel_size"]
        assert tp * dp <= len(doc["gpus"])
        model = ModelFacts.model_validate(one.model.model_dump())
        assert planner_rules.divisibility_problems(model, tp, dp, doc["enable_expert_parallel"]) == []
        cap = int(doc["gpu_memory_bytes"] * doc["gpu_memory_utilization"])
        assert doc["weights_bytes_per_gpu"] + doc["overhead_bytes_per_gpu"] + doc["kv_cache_bytes_per_gpu"] <= cap
        assert doc["kv_cache_tokens"] >= doc["kv_cache_target_tokens"]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.lists(st.sampled_from(SMALL), min_size=1, max_size=3), added=st.sampled_from(SMALL))
def test_adding_a_model_never_moves_one_that_still_fits_where_it_is(rtx_host, facts, first, added):
    items = [item(facts, config, "m%d" % n) for n, config in enumerate(first)]
    before = planner_multi.plan_models(rtx_host, items)
    current = dict((doc["name"], doc["gpus"]) for doc in before["models"] if doc["fits"])
    after = planner_multi.plan_models(rtx_host, items + [item(facts, added, "new")], current=current)
    for doc in after["models"]:
        if doc["name"] in current:
            assert doc["gpus"] == current[doc["name"]] and doc["fits"], (doc["name"], doc["gpus"], current)


def test_cpu_host_shares_ram_and_cores_and_refuses_the_model_beyond_it(facts):
    host = {"gpus": [], "host": {"memory_bytes": 48 * 2 ** 30, "cpu_count": 16}}
    small = "meta-llama__Meta-Llama-3.1-8B"
    report = planner_multi.plan_models(host, [item(facts, small, "a", device="cpu", max_model_len=4096),
                                              item(facts, small, "b", device="cpu", max_model_len=4096),
                                              item(facts, small, "c", device="cpu", max_model_len=4096)])
    a, b, c = report["models"]
    assert a["fits"] and b["fits"] and not c["fits"]  # 8B in BF16: 15 GiB + KV 2 + runtime 2; two fit in 43.2 GiB
    assert "needs " in c["error"] and "beside the models before it" in c["error"]
    assert report["ram_used_bytes"] == a["ram_bytes"] + b["ram_bytes"] <= report["ram_budget_bytes"]
    assert any("share the host's 16 cores" in reason for reason in report["reasons"])
    # vLLM's own binding would put every server's threads on the same first cores: unbound, unless pinned
    assert a["env"]["VLLM_CPU_OMP_THREADS_BIND"] == "nobind" and a["cpu_threads_bind"] == "nobind"
    pinned = planner_multi.plan_models(host, [item(facts, small, "a", device="cpu", max_model_len=4096, cpu_threads_bind="0-7"),
                                              item(facts, small, "b", device="cpu", max_model_len=4096, cpu_threads_bind="8-15")])
    assert [d["env"]["VLLM_CPU_OMP_THREADS_BIND"] for d in pinned["models"]] == ["0-7", "8-15"]
    alone = planner_multi.planner.plan(host, facts[small], None, {"device": "cpu", "max_model_len": 4096})
    assert "VLLM_CPU_OMP_THREADS_BIND" not in alone.env  # one model: vLLM's own binding
    with pytest.raises(Exception, match="cpu_threads_bind must be auto, nobind or core lists"):
        planner_multi.planner.plan(host, facts[small], None, {"device": "cpu", "cpu_threads_bind": "cores 0-7"})


def test_cli_plans_several_models_with_options_after_each_model(tmp_path):
    cli = os.path.join(os.path.dirname(sys.executable), "llmops-vllm")
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"schema": 1, "models": {"qwen3": {"plan": {"gpu_indices": [6, 7]}}}}))
    argv = [cli, "plan", "--topo-file", RTX_TOPO, "--query-file", RTX_QUERY, "--numactl-file", RTX_NUMACTL,
            "--current", str(state),
            "--model", os.path.join(CONFIGS, "MiniMaxAI__MiniMax-M2.5.partial.json"), "--model-id", "MiniMaxAI/MiniMax-M2.5",
            "--objective", "latency",
            "--model", os.path.join(CONFIGS, "Qwen__Qwen3-30B-A3B-FP8.json"), "--model-id", "Qwen/Qwen3-30B-A3B-FP8",
            "--name", "qwen3", "--port", "8001", "--json"]
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    minimax, qwen = report["models"]
    assert minimax["name"] == "minimax-m2-5" and minimax["objective"] == "latency" and minimax["numa_node"] == 0
    assert qwen["name"] == "qwen3" and qwen["gpus"] == [6, 7] and qwen["port"] == 8001 and qwen["objective"] == "throughput"
    assert report["free_gpus"] == [4, 5]  # qwen3 keeps the GPUs it serves on; nobody else needs 4 and 5


def test_the_rollout_plans_each_model_of_vllm_models_on_its_share(rtx_host, facts):
    """What roles/preflight/tasks/allocation.yml does: the desired state's documents allocated together
    (serving_allocation), then each model planned alone with gpus pinned to its share - the same plan."""
    documents = [{"name": "minimax", "repo_id": "MiniMaxAI/MiniMax-M2.5", "port": 8000, "plan": {"objective": "latency"}},
                 {"name": "qwen3", "repo_id": "Qwen/Qwen3-30B-A3B-FP8", "port": 8001, "plan": {}}]
    by_name = {"minimax": facts["MiniMaxAI__MiniMax-M2.5.partial"], "qwen3": facts["Qwen__Qwen3-30B-A3B-FP8"]}
    items = planner_multi.items_from_documents(documents, by_name)
    assert [i.request.model_id for i in items] == ["MiniMaxAI/MiniMax-M2.5", "Qwen/Qwen3-30B-A3B-FP8"]
    assert items[0].request.objective == "latency" and items[1].request.port == 8001
    report = planner_multi.plan_models(rtx_host, items, current={"qwen3": [6, 7]})
    assert report["fits"]
    for doc, item_ in zip(report["models"], items, strict=True):
        alone = planner_multi.planner.plan(rtx_host, item_.model, None, item_.request.model_copy(update={"gpus": doc["gpus"]}))
        assert alone.gpu_indices == doc["gpu_indices"] and alone.layout == doc["layout"] and alone.argv == doc["argv"]
    assert report["models"][1]["gpus"] == [6, 7]  # in service there, and it still fits


def test_a_document_without_model_facts_is_named(facts):
    with pytest.raises(PlanInputError, match=r"models\[1\] \(b\): no model_facts"):
        planner_multi.items_from_documents([{"name": "a"}, {"name": "b"}], {"a": facts["Qwen__Qwen3-30B-A3B-FP8"]})


def test_cli_plans_a_models_file_as_the_rollout_of_the_set_would(tmp_path):
    """plan --models-file: a host_vars file with vllm_models, configs from --config-dir, the command line's
    options for every model and each model's plan: pins on top; the same allocation as several --model."""
    cli = os.path.join(os.path.dirname(sys.executable), "llmops-vllm")
    host_vars = tmp_path / "gpu-1.yml"
    host_vars.write_text(
        "vllm_models:\n"
        "  - {name: minimax, repo_id: MiniMaxAI/MiniMax-M2.5.partial, port: 8000, plan: {objective: latency}}\n"
        "  - {name: qwen3, repo_id: Qwen/Qwen3-30B-A3B-FP8, port: 8001}\n")
    host = ["--topo-file", RTX_TOPO, "--query-file", RTX_QUERY, "--numactl-file", RTX_NUMACTL]
    argv = [cli, "plan", *host, "--models-file", str(host_vars), "--config-dir", CONFIGS, "--max-model-len", "8192", "--json"]
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    minimax, qwen = report["models"]
    assert (minimax["name"], minimax["objective"], minimax["gpus"], minimax["max_model_len"]) == ("minimax", "latency", [0, 1, 2, 3], 8192)
    assert (qwen["name"], qwen["port"], qwen["gpus"], qwen["max_model_len"]) == ("qwen3", 8001, [4, 5, 6, 7], 8192)
    several = [cli, "plan", *host, "--max-model-len", "8192",
               "--model", os.path.join(CONFIGS, "MiniMaxAI__MiniMax-M2.5.partial.json"), "--model-id", "MiniMaxAI/MiniMax-M2.5.partial",
               "--name", "minimax", "--served-model-name", "minimax", "--port", "8000", "--objective", "latency",
               "--model", os.path.join(CONFIGS, "Qwen__Qwen3-30B-A3B-FP8.json"), "--model-id", "Qwen/Qwen3-30B-A3B-FP8",
               "--name", "qwen3", "--served-model-name", "qwen3", "--port", "8001", "--json"]
    same = json.loads(subprocess.run([str(a) for a in several], capture_output=True, text=True, timeout=120, check=True).stdout)
    assert [(d["gpus"], d["layout"], d["argv"][2:]) for d in same["models"]] == \
        [(d["gpus"], d["layout"], d["argv"][2:]) for d in report["models"]]
    # bad input: a config that is not there, a document the desired state refuses
    host_vars.write_text("vllm_models:\n  - {name: a, repo_id: o/missing, port: 8000}\n")
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1 and "no config for o/missing" in json.loads(proc.stdout)["error"]
    host_vars.write_text("vllm_models:\n  - {name: a, repo_id: o/a}\n  - {name: b, repo_id: o/b}\n")
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1 and "vllm_models[1].port: 8000 is model 0's too" in json.loads(proc.stdout)["error"]
