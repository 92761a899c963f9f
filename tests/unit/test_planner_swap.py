# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Blue/green or stop-start (plugin_utils/planner_swap.py), on the real captures of the story's 8x RTX PRO 6000
and real model configs: B planned with what A holds reserved, stop-start when B needs it, either forced."""
import json

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils import model_config
from ansible_collections.llmops.vllm.plugins.plugin_utils import planner
from ansible_collections.llmops.vllm.plugins.plugin_utils.contracts import PlanInputError
from ansible_collections.llmops.vllm.plugins.plugin_utils.planner_swap import decide_swap
from replay_data import make_model_dir

GIB = 2 ** 30
QWEN = "Qwen__Qwen3-30B-A3B-FP8"  # fits on one node's four GPUs
KIMI = "nvidia__Kimi-K2.5-NVFP4"  # needs all eight
LLAMA8B = "meta-llama__Meta-Llama-3.1-8B"


@pytest.fixture(scope="module")
def facts(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("swap")
    return {name: model_config.model_facts(make_model_dir(tmp, name)) for name in (QWEN, KIMI, LLAMA8B)}


def test_b_beside_a_on_the_free_gpus_is_blue_green(rtx_host, facts):
    decision = decide_swap(rtx_host, facts[QWEN], None, {}, {"name": "a", "gpu_indices": [0, 1, 2, 3]}, name="b")
    assert decision["swap"] == "bluegreen", decision["why"]
    assert set(decision["plan"]["gpu_indices"]).isdisjoint({0, 1, 2, 3}) and decision["plan"]["fits"]
    assert "fits beside a (which holds GPUs 0,1,2,3)" in decision["why"]
    assert any("reserved for a model that keeps serving" in reason for reason in decision["plan"]["reasons"])


def test_b_that_needs_a_s_gpus_is_stop_start_and_says_why(rtx_host, facts):
    decision = decide_swap(rtx_host, facts[KIMI], None, {}, {"name": "a", "gpu_indices": [0, 1, 2, 3]}, name="b")
    assert decision["swap"] == "stop-start"
    assert decision["why"].startswith("does not fit beside a, which holds GPUs 0,1,2,3 (")
    assert decision["plan"]["fits"] and decision["plan"]["gpu_indices"] == list(range(8))  # planned on the whole host
    # A holding every GPU: nothing to plan beside it
    full = decide_swap(rtx_host, facts[QWEN], None, {}, {"name": "a", "gpu_indices": list(range(8))}, name="b")
    assert full["swap"] == "stop-start" and "a holds every GPU" in full["why"]
    with pytest.raises(PlanInputError, match="swap bluegreen: the new model does not fit beside a"):
        decide_swap(rtx_host, facts[KIMI], None, {}, {"name": "a", "gpu_indices": [0, 1, 2, 3]}, swap="bluegreen", name="b")


def test_forced_stop_start_nothing_serving_and_the_same_name(rtx_host, facts):
    current = {"name": "a", "gpu_indices": [0, 1, 2, 3]}
    forced = decide_swap(rtx_host, facts[QWEN], None, {}, current, swap="stop-start", name="b")
    assert forced["swap"] == "stop-start" and forced["why"] == "forced (swap: stop-start)"
    assert decide_swap(rtx_host, facts[QWEN], None, {}, None, name="b")["why"] == "nothing serves now: B starts alone"
    same = decide_swap(rtx_host, facts[QWEN], None, {}, current, name="a")
    assert same["swap"] == "stop-start" and "one name is one unit" in same["why"]
    with pytest.raises(PlanInputError, match="one name is one unit"):
        decide_swap(rtx_host, facts[QWEN], None, {}, current, swap="bluegreen", name="a")
    with pytest.raises(PlanInputError, match="swap 'rolling'"):
        decide_swap(rtx_host, facts[QWEN], None, {}, current, swap="rolling", name="b")


def test_cpu_host_counts_the_ram_a_uses(facts):
    host = {"gpus": [], "host": {"memory_bytes": 48 * GIB, "cpu_count": 16}}
    request = {"device": "cpu", "max_model_len": 4096}
    # 8B in BF16: weights 15 GiB + KV + runtime ~19 GiB of the 43.2 GiB usable
    beside = decide_swap(host, facts[LLAMA8B], None, request, {"name": "a", "memory_bytes": 20 * GIB}, name="b")
    assert beside["swap"] == "bluegreen" and "20.0 GiB of RAM" in beside["why"]
    tight = decide_swap(host, facts[LLAMA8B], None, request, {"name": "a", "memory_bytes": 30 * GIB}, name="b")
    assert tight["swap"] == "stop-start" and "needs" in tight["why"] and tight["plan"]["fits"]
    unknown = decide_swap(host, facts[LLAMA8B], None, request, {"name": "a"}, name="b")
    assert unknown["swap"] == "stop-start" and "the RAM a uses is unknown" in unknown["why"]
    with pytest.raises(PlanInputError, match="the RAM a uses is unknown"):
        decide_swap(host, facts[LLAMA8B], None, request, {"name": "a"}, swap="bluegreen", name="b")


def test_reserved_gpus_in_the_single_model_planner(rtx_host, facts):
    plan = planner.plan(rtx_host, facts[QWEN], None, {"reserved_gpus": [4, 5, 6, 7]})
    assert plan.fits and set(plan.gpu_indices) <= {0, 1, 2, 3}
    with pytest.raises(PlanInputError, match=r"gpus \[4, 5\]: \[4, 5\] reserved"):
        planner.plan(rtx_host, facts[QWEN], None, {"gpus": [4, 5], "reserved_gpus": [4, 5, 6, 7]})
    with pytest.raises(PlanInputError, match=r"reserved_gpus \[9\]: no such GPU"):
        planner.plan(rtx_host, facts[QWEN], None, {"reserved_gpus": [9]})


def test_cli_plans_beside_reserved_gpus(tmp_path, capsys):
    from ansible_collections.llmops.vllm.plugins.plugin_utils import cli
    from replay_data import RTX_NUMACTL, RTX_QUERY, RTX_TOPO
    model = str(make_model_dir(tmp_path, QWEN))
    base = ["plan", "--topo-file", RTX_TOPO, "--query-file", RTX_QUERY, "--numactl-file", RTX_NUMACTL, "--model", model]
    assert cli.run(base + ["--reserved-gpus", "0,1,2,3", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["fits"] and set(plan["gpu_indices"]) <= {4, 5, 6, 7}
    assert cli.run(base + ["--reserved-gpus", "0,x"]) != 0
    assert "--reserved-gpus '0,x': expected comma-separated GPU indices" in capsys.readouterr().err
