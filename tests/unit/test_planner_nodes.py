"""Multi-node serving groups (plugin_utils/planner_nodes.py) on real 8-GPU captures: a model no
host holds alone is split into pipeline stages, one per host, tensor parallel inside each host,
launched with vLLM's native multi-node runtime; a model one host holds stays on that host."""
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils import model_config, topology
from ansible_collections.llmops.vllm.plugins.plugin_utils import contracts, planner, planner_nodes
from replay_data import CONFIGS, H100_TOPO, RTX_NUMACTL, RTX_QUERY, RTX_TOPO, make_model_dir, read

GIB = 1 << 30
CLI = os.path.join(os.path.dirname(sys.executable), "llmops-vllm")


@pytest.fixture(scope="module")
def rtx_host():
    return topology.build_topology(topo_text=read(RTX_TOPO), query_text=read(RTX_QUERY), numactl_text=read(RTX_NUMACTL))


@pytest.fixture(scope="module")
def h100_host():
    facts = topology.build_topology(topo_text=read(H100_TOPO))
    for gpu in facts["gpus"]:  # the capture is topo -m only: name and memory of an H100 SXM 80GB
        gpu.update(name="NVIDIA H100 80GB HBM3", memory_bytes=81559 << 20, compute_capability="9.0")
    return facts


def facts(name):
    return model_config.model_facts(os.path.join(CONFIGS, name + ".json"))


@pytest.mark.parametrize("host_fixture", ["h100_host", "rtx_host"])
def test_deepseek_v3_needs_two_hosts_as_pipeline_stages(request, host_fixture):
    host = request.getfixturevalue(host_fixture)
    model = facts("deepseek-ai__DeepSeek-V3")
    alone = planner.plan(host, model, None, {"model_id": "deepseek-ai/DeepSeek-V3"})
    assert not alone.fits
    group = planner_nodes.plan_group([host, host], model, None, {"model_id": "deepseek-ai/DeepSeek-V3"},
                                     ["10.0.0.1", "10.0.0.2"])
    assert group.fits, group.error
    assert (group.tensor_parallel_size, group.pipeline_parallel_size, group.data_parallel_size) == (8, 2, 1)
    assert [n.role for n in group.nodes] == ["head", "worker"] and [n.rank for n in group.nodes] == [0, 1]
    for node in group.nodes:
        argv = node.argv
        assert argv[:2] == ["serve", "deepseek-ai/DeepSeek-V3"]
        assert argv[argv.index("--pipeline-parallel-size") + 1] == "2" and argv[argv.index("--nnodes") + 1] == "2"
        assert argv[argv.index("--master-addr") + 1] == "10.0.0.1"
        assert argv[argv.index("--node-rank") + 1] == str(node.rank)
        assert ("--headless" in argv) == (node.role == "worker")
        assert node.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7" and node.gpu_indices == list(range(8))
    # Each GPU holds half the layers' weights of a TP=8 group, and the KV target fits.
    assert group.weights_bytes_per_gpu * 16 <= group.weights_bytes * 1.01
    assert group.kv_cache_tokens >= group.kv_cache_target_tokens
    assert group.weights_bytes_per_gpu + group.overhead_bytes_per_gpu + group.kv_cache_bytes_per_gpu <= \
        group.gpu_memory_bytes * group.gpu_memory_utilization
    assert any("network between the hosts: 100 Gb/s (default" in r for r in group.reasons)
    assert group.argv == group.nodes[0].argv


@pytest.mark.parametrize("host_fixture", ["h100_host", "rtx_host"])
def test_a_model_one_host_holds_stays_on_that_host(request, host_fixture):
    host = request.getfixturevalue(host_fixture)
    model = facts("meta-llama__Meta-Llama-3.1-70B")
    group = planner_nodes.plan_group([host, host], model, None, {"model_id": "meta-llama/Llama-3.1-70B"})
    alone = planner.plan(host, model, None, {"model_id": "meta-llama/Llama-3.1-70B"})
    assert group.fits and group.pipeline_parallel_size == 1 and group.layout == alone.layout
    assert len(group.nodes) == 1 and group.nodes[0].role == "head" and group.nodes[0].argv == alone.argv
    assert "--nnodes" not in group.argv


def test_network_speed_is_an_input_and_stated(rtx_host):
    model = facts("deepseek-ai__DeepSeek-V3")
    group = planner_nodes.plan_group([rtx_host, rtx_host], model, None, {"model_id": "x/y"}, network_gbps=400)
    assert any("400 Gb/s" in r and "default" not in r for r in group.reasons)
    with pytest.raises(contracts.PlanInputError, match="network_gbps"):
        planner_nodes.plan_group([rtx_host, rtx_host], model, None, {"model_id": "x/y"}, network_gbps=0)


def test_hosts_that_differ_are_refused(rtx_host, h100_host):
    with pytest.raises(contracts.PlanInputError, match="the hosts differ"):
        planner_nodes.plan_group([rtx_host, h100_host], facts("deepseek-ai__DeepSeek-V3"), None, {"model_id": "x/y"})


def test_too_few_hosts_say_so(h100_host):
    small = dict(h100_host, gpus=h100_host["gpus"][:2], links=[row[:2] for row in h100_host["links"][:2]])
    group = planner_nodes.plan_group([small, small], facts("deepseek-ai__DeepSeek-V3"), None, {"model_id": "x/y"})
    assert not group.fits and "2 host(s)" in group.error and not group.nodes


def test_cli_takes_one_topo_file_per_host(tmp_path):
    model = make_model_dir(tmp_path, "deepseek-ai__DeepSeek-V3")
    host = ["--topo-file", RTX_TOPO, "--query-file", RTX_QUERY, "--numactl-file", RTX_NUMACTL]
    proc = subprocess.run([CLI, "plan"] + host + host + ["--model", model, "--model-id", "deepseek-ai/DeepSeek-V3",
                                                         "--node-host", "gpu-a", "--node-host", "gpu-b",
                                                         "--network-gbps", "200", "--json"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["pipeline_parallel_size"] == 2 and [n["host"] for n in data["nodes"]] == ["gpu-a", "gpu-b"]
    assert data["nodes"][1]["argv"][data["nodes"][1]["argv"].index("--master-addr") + 1] == "gpu-a"
    bad = subprocess.run([CLI, "plan", "--topo-file", RTX_TOPO, "--query-file", RTX_QUERY, "--query-file", RTX_QUERY,
                          "--model", model, "--json"], capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 1 and "--query-file given 2 times for 1 --topo-file" in bad.stderr


# CPU hosts: tensor parallelism across the hosts, one rank per host (docs/planner.md: pipeline
# parallelism fails its first request on vLLM's CPU backend).
CPU_HOST = {"gpus": [], "host": {"memory_bytes": 24 * GIB, "cpu_count": 2}}


def test_cpu_group_pinned_to_two_nodes_is_tensor_parallel_across_them():
    model = facts("meta-llama__Meta-Llama-3.1-8B")
    request = {"model_id": "meta-llama/Llama-3.1-8B", "max_model_len": 2048, "nodes": 2}
    group = planner_nodes.plan_group([CPU_HOST, CPU_HOST], model, None, request, ["10.231.0.11", "10.231.0.12"])
    assert group.fits, group.error
    assert group.device == "cpu" and group.layout == "TP=2 (one rank per host)"
    assert (group.tensor_parallel_size, group.pipeline_parallel_size) == (2, 1)
    assert [(n.host, n.rank, n.role) for n in group.nodes] == [("10.231.0.11", 0, "head"), ("10.231.0.12", 1, "worker")]
    for node in group.nodes:
        argv = node.argv
        assert argv[argv.index("--tensor-parallel-size") + 1] == "2" and argv[argv.index("--nnodes") + 1] == "2"
        assert "--pipeline-parallel-size" not in argv
        assert argv[argv.index("--master-addr") + 1] == "10.231.0.11"
        assert argv[argv.index("--node-rank") + 1] == str(node.rank)
        assert ("--headless" in argv) == (node.role == "worker")
        assert "--enforce-eager" in argv and node.env["VLLM_CPU_KVCACHE_SPACE"] == group.env["VLLM_CPU_KVCACHE_SPACE"]
    assert group.argv == group.nodes[0].argv
    assert any("nodes 2 pinned" in r for r in group.reasons)


def test_cpu_group_unpinned_stays_one_node_when_one_host_holds_it():
    model = facts("meta-llama__Meta-Llama-3.1-8B")
    group = planner_nodes.plan_group([CPU_HOST, CPU_HOST], model, None, {"max_model_len": 2048}, ["a", "b"])
    assert group.fits and [n.host for n in group.nodes] == ["a"] and "--nnodes" not in group.argv


def test_cpu_group_splits_a_model_one_hosts_ram_cannot_hold():
    model = facts("meta-llama__Meta-Llama-3.1-8B")  # ~15 GiB of BF16 weights
    small = {"gpus": [], "host": {"memory_bytes": 16 * GIB, "cpu_count": 8}}
    alone = planner.plan(small, model, None, {"max_model_len": 2048})
    assert not alone.fits
    group = planner_nodes.plan_group([small, small], model, None, {"max_model_len": 2048}, ["a", "b"])
    assert group.fits, group.error
    assert group.tensor_parallel_size == 2 and [n.role for n in group.nodes] == ["head", "worker"]
    assert any("a alone does not hold it" in r for r in group.reasons)
    assert group.error is None


def test_nodes_pins_are_checked():
    model = facts("meta-llama__Meta-Llama-3.1-8B")
    with pytest.raises(contracts.PlanInputError, match="nodes 3: the group lists only 2"):
        planner_nodes.plan_group([CPU_HOST, CPU_HOST], model, None, {"nodes": 3}, ["a", "b"])
    with pytest.raises(contracts.PlanInputError, match="nodes 2: a serving group is planned over its hosts"):
        planner.plan(CPU_HOST, model, None, {"nodes": 2})


def test_gpu_group_pinned_to_two_nodes_though_one_holds_it(h100_host):
    model = facts("meta-llama__Meta-Llama-3.1-70B")
    group = planner_nodes.plan_group([h100_host, h100_host], model, None, {"model_id": "meta-llama/Llama-3.1-70B",
                                                                           "nodes": 2}, ["h0", "h1"])
    assert group.fits, group.error
    assert group.pipeline_parallel_size == 2 and len(group.nodes) == 2
    assert any("2 nodes (pinned: nodes)" in r for r in group.reasons)
    one = planner_nodes.plan_group([h100_host, h100_host], model, None, {"nodes": 1}, ["h0", "h1"])
    assert [n.host for n in one.nodes] == ["h0"]


def test_cli_nodes_pins_the_group_size(tmp_path):
    model = make_model_dir(tmp_path, "meta-llama__Meta-Llama-3.1-70B")
    host = ["--topo-file", H100_TOPO]
    common = [CLI, "plan"] + host + host + ["--model", model, "--model-id", "meta-llama/Llama-3.1-70B",
                                            "--gpu-memory-gib", "80", "--json"]
    one = subprocess.run(common, capture_output=True, text=True, timeout=60, check=False)
    two = subprocess.run(common + ["--nodes", "2"], capture_output=True, text=True, timeout=60, check=False)
    assert one.returncode == 0 and two.returncode == 0, one.stderr + two.stderr
    assert len(json.loads(one.stdout)["nodes"]) == 1
    data = json.loads(two.stdout)
    assert data["pipeline_parallel_size"] == 2 and [n["role"] for n in data["nodes"]] == ["head", "worker"]


def test_cpu_group_warns_about_the_compiler_unless_compilation_is_off():
    model = facts("meta-llama__Meta-Llama-3.1-8B")
    request = {"model_id": "m", "max_model_len": 2048, "nodes": 2}
    group = planner_nodes.plan_group([CPU_HOST, CPU_HOST], model, None, request, ["a", "b"])
    assert any("TORCH_COMPILE_DISABLE=1" in w and "g++" in w for w in group.warnings)
    off = planner_nodes.plan_group([CPU_HOST, CPU_HOST], model, None, dict(request, env={"TORCH_COMPILE_DISABLE": "1"}),
                                   ["a", "b"])
    assert not any("TORCH_COMPILE_DISABLE" in w for w in off.warnings)
    assert all(node.env["TORCH_COMPILE_DISABLE"] == "1" for node in off.nodes)


def _serving_plan_action(args):
    """The serving_plan action as the rollout calls it, without a connection."""
    from unittest import mock
    from ansible_collections.llmops.vllm.plugins.action import serving_plan
    action = serving_plan.ActionModule(mock.MagicMock(args=args, async_val=0, check_mode=False), mock.MagicMock(),
                                       mock.MagicMock(), loader=None, templar=None, shared_loader_obj=None)
    return action.run(task_vars={})


def test_serving_plan_action_gives_each_node_of_a_group_its_own_command():
    model = facts("meta-llama__Meta-Llama-3.1-8B")
    base = {"topology": {}, "model": model, "request": {"model_id": "m", "max_model_len": 2048, "nodes": 2}}
    group = {"topologies": [CPU_HOST, CPU_HOST], "names": ["10.0.0.1", "10.0.0.2"]}
    head = _serving_plan_action(dict(base, group=dict(group, rank=0)))
    worker = _serving_plan_action(dict(base, group=dict(group, rank=1)))
    assert not head.get("failed") and not worker.get("failed"), (head.get("msg"), worker.get("msg"))
    assert head["nodes"] == worker["nodes"] and len(head["nodes"]) == 2
    assert "--headless" not in head["argv"] and head["argv"][head["argv"].index("--node-rank") + 1] == "0"
    assert "--headless" in worker["argv"] and worker["argv"][worker["argv"].index("--node-rank") + 1] == "1"
    assert worker["argv"] == head["nodes"][1]["argv"]


def test_serving_plan_action_refuses_a_host_the_group_does_not_need():
    model = facts("meta-llama__Meta-Llama-3.1-8B")
    result = _serving_plan_action({"topology": {}, "model": model, "request": {"model_id": "m", "max_model_len": 2048},
                                   "group": {"topologies": [CPU_HOST, CPU_HOST], "names": ["a", "b"], "rank": 1}})
    assert result["failed"] and "b is not needed" in result["msg"] and "runs on a" in result["msg"]
    bad = _serving_plan_action({"topology": {}, "model": model, "request": {},
                                "group": {"topologies": [CPU_HOST], "names": ["a", "b"], "rank": 0}})
    assert bad["failed"] and "group: rank 0 of 1 hosts (2 names)" in bad["msg"]
