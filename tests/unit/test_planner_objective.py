"""The objective (throughput | latency) through every door: the CLI, the action's request and the
desired state's plan block, with the same default (throughput) everywhere."""
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.llmops.vllm.plugins.plugin_utils import contracts, desired_state
from replay_data import RTX_NUMACTL, RTX_QUERY, RTX_TOPO, make_model_dir

CLI = os.path.join(os.path.dirname(sys.executable), "llmops-vllm")


def plan_json(tmp_path, *extra):
    proc = subprocess.run([CLI, "plan", "--topo-file", RTX_TOPO, "--query-file", RTX_QUERY, "--numactl-file", RTX_NUMACTL,
                           "--model", make_model_dir(tmp_path, "MiniMaxAI__MiniMax-M2.5.partial"),
                           "--model-id", "MiniMaxAI/MiniMax-M2.5", "--json"] + list(extra),
                          capture_output=True, text=True, timeout=60, check=False)
    assert "Traceback" not in proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_cli_default_is_throughput_and_fills_the_story_host(tmp_path):
    code, data = plan_json(tmp_path)
    assert code == 0 and data["objective"] == "throughput"
    assert data["layout"] == "TP=1+EP x DP=8" and sorted(data["gpu_indices"]) == list(range(8))
    assert sorted(data["replica_numa_nodes"]) == [0] * 4 + [1] * 4
    assert [len(group) for group in data["replica_gpu_indices"]] == [1] * 8


def test_cli_latency_gives_the_single_tp_group(tmp_path):
    code, data = plan_json(tmp_path, "--objective", "latency")
    assert code == 0 and data["objective"] == "latency"
    # The most single-stream tok/s: TP=4 on one NUMA node (predicted faster than TP=8+EP across the sockets).
    assert data["layout"] == "TP=4" and data["data_parallel_size"] == 1 and data["numa_node"] is not None
    assert data["replica_gpu_indices"] == [data["gpu_indices"]]


def test_cli_refuses_an_unknown_objective(tmp_path):
    proc = subprocess.run([CLI, "plan", "--topo-file", RTX_TOPO, "--model",
                           make_model_dir(tmp_path, "MiniMaxAI__MiniMax-M2.5.partial"), "--objective", "fastest", "--json"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1 and "objective" in proc.stderr and "Traceback" not in proc.stderr


def test_request_and_desired_state_share_the_default():
    assert contracts.PlanRequest().objective == "throughput"
    document = {"name": "minimax", "repo_id": "MiniMaxAI/MiniMax-M2.5", "plan": {"objective": "latency"}}
    assert desired_state.validate_model(document)["plan"]["objective"] == "latency"
    with pytest.raises(contracts.PlanInputError, match="objective"):
        desired_state.validate_model(dict(document, plan={"objective": "fastest"}))
