"""The desired-state document GitOps edits: every problem named, in one message."""
import json
import os
import re
import subprocess
import sys

import pytest

from ansible_collections.llmops.vllm.plugins.plugin_utils.desired_state import validate_inventory, validate_model
from ansible_collections.llmops.vllm.plugins.plugin_utils.contracts import PlanInputError

GOOD = {"name": "minimax-m2-5", "repo_id": "MiniMaxAI/MiniMax-M2.5", "revision": "main", "port": 8000}


def test_defaults_are_filled_in():
    doc = validate_model(GOOD)
    assert doc["served_model_name"] == "minimax-m2-5" and doc["unit"] == "vllm-minimax-m2-5.service"
    assert doc["plan"] == {} and doc["bind"] is None


@pytest.mark.parametrize("change,needle", [
    ({"name": "MiniMax M2"}, "vllm_model.name"),
    ({"repo_id": "minimax"}, "vllm_model.repo_id"),
    ({"port": 70000}, "vllm_model.port"),
    ({"port": "eighty"}, "vllm_model.port"),
    ({"bind": "localhost:8000"}, "vllm_model.bind"),
    ({"plan": {"tensor_paralel_size": 4}}, "tensor_paralel_size"),
    ({"plan": {"tensor_parallel_size": 0}}, "tensor_parallel_size"),
    ({"plan": {"port": 9}}, "not under plan"),
    ({"extra_args": ["--api-key=abc"]}, "rollout_api_key"),
    ({"extra_args": ["--trust-remote-code"]}, "plan: {trust_remote_code: true}"),
    ({"env": {"HF_TOKEN": "x"}}, "secret"),
    ({"modle": "x"}, "unknown key"),
])
def test_each_problem_is_named(change, needle):
    with pytest.raises(PlanInputError) as err:
        validate_model(dict(GOOD, **change))
    assert needle in str(err.value)


def test_all_problems_at_once():
    with pytest.raises(PlanInputError) as err:
        validate_model({"name": "Bad Name", "port": 0})
    message = str(err.value)
    assert "vllm_model.name" in message and "vllm_model.port" in message and "vllm_model.repo_id: required" in message


def test_templated_values_wait_for_ansible():
    doc = validate_model(dict(GOOD, bind="{{ ansible_default_ipv4.address }}", port="{{ my_port }}"))
    assert doc["bind"].startswith("{{")


def test_inventory_validation_by_host():
    valid, problems = validate_inventory({"a": {"vllm_model": GOOD}, "b": {"vllm_model": dict(GOOD, port=-1)}, "c": {}})
    assert list(valid) == ["a"] and list(problems) == ["b"] and "b: vllm_model.port" in problems["b"]


def test_cli_validate_the_shipped_inventories(tmp_path):
    cli = os.path.join(os.path.dirname(sys.executable), "llmops-vllm")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for inventory in ("inventories/sandbox", "inventories/example"):
        proc = subprocess.run([cli, "validate", "-i", os.path.join(root, inventory), "--json"],
                              capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr
        report = json.loads(proc.stdout)
        assert report["valid"] and not report["problems"]
    bad = tmp_path / "hosts.yml"
    bad.write_text("all:\n  hosts:\n    gpu-1:\n      vllm_model: {name: x, repo_id: a/b, port: 99999}\n")
    proc = subprocess.run([cli, "validate", "-i", str(bad)], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1 and "gpu-1: vllm_model.port" in proc.stdout


SHA = "5bd8b0e1c0fd0b8b4ab8f52d6e1c2a9e4e2b6c1d"


@pytest.mark.parametrize("policy, revision, problem", [
    (None, "main", None),                      # unset: any revision (the preflight warns on a branch)
    ("any", "main", None),
    ("tag", "v1.0", None),                     # a tag or a branch cannot be told apart offline: the preflight asks the hub
    ("tag", "main", None),
    ("commit", SHA, None),
    ("commit", "main", "revision 'main' is not a commit sha, and revision_policy is commit"),
    ("commit", SHA[:12], "is not a commit sha"),
    ("commit", "{{ pinned }}", None),          # templated: checked again once Ansible has templated it
    ("branch", "main", "vllm_model.revision_policy: must be one of commit, tag, any"),
])
def test_revision_policy(policy, revision, problem):
    document = dict(GOOD, revision=revision, **({"revision_policy": policy} if policy else {}))
    if problem is None:
        assert validate_model(document)["revision_policy"] == policy
    else:
        with pytest.raises(PlanInputError, match=problem.replace("(", r"\(")):
            validate_model(document)


# ----------------------------------------------------------------------------- several models: vllm_models

def test_vllm_models_each_validated_and_names_ports_and_pins_distinct():
    from ansible_collections.llmops.vllm.plugins.plugin_utils.desired_state import host_models, validate_models
    minimax = {"name": "minimax-m2-5", "repo_id": "MiniMaxAI/MiniMax-M2.5", "port": 8000, "plan": {"gpus": [0, 1, 2, 3]}}
    qwen = {"name": "qwen3", "repo_id": "Qwen/Qwen3-30B-A3B-FP8", "port": 8001, "plan": {"objective": "latency"}}
    models = validate_models([minimax, qwen])
    assert [m["unit"] for m in models] == ["vllm-minimax-m2-5.service", "vllm-qwen3.service"]
    assert host_models({"vllm_models": [minimax, qwen]}) == models
    assert host_models({"vllm_model": GOOD}) == [validate_model(GOOD)]  # vllm_model: a list of one
    assert host_models({}) is None
    with pytest.raises(PlanInputError) as refused:
        validate_models([minimax, dict(qwen, name="minimax-m2-5", port=8000, plan={"gpus": [3, 4]}),
                         dict(qwen, name="Bad Name", port=8002)])
    message = str(refused.value)
    assert "vllm_models[1].name: 'minimax-m2-5' is model 0's too" in message
    assert "vllm_models[1].port: 8000 is model 0's too" in message
    assert "vllm_models[1].plan.gpus: GPUs [3] are pinned by model 0 too" in message
    assert "vllm_models[2].name" in message  # each document's own problems, all at once
    with pytest.raises(PlanInputError, match="expected a list of one or more models"):
        validate_models({"name": "x"})
    with pytest.raises(PlanInputError, match="each model needs its own"):  # both default to port 8000
        validate_models([{"name": "a", "repo_id": "o/a"}, {"name": "b", "repo_id": "o/b"}])
    with pytest.raises(PlanInputError, match="gpu-1: give vllm_models .several models. or vllm_model .one., not both"):
        host_models({"vllm_models": [minimax], "vllm_model": GOOD}, "gpu-1")


def test_cli_validates_vllm_models_and_apply_refuses_an_invalid_set_before_running(tmp_path):
    cli = os.path.join(os.path.dirname(sys.executable), "llmops-vllm")
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  hosts:\n    gpu-1:\n      vllm_models:\n"
        "        - {name: minimax-m2-5, repo_id: MiniMaxAI/MiniMax-M2.5, port: 8000}\n"
        "        - {name: qwen3, repo_id: Qwen/Qwen3-30B-A3B-FP8, port: 8001}\n"
        "    gpu-2:\n      vllm_models:\n"
        "        - {name: a, repo_id: o/a}\n        - {name: b, repo_id: o/b}\n")
    proc = subprocess.run([cli, "validate", "-i", str(inventory), "--json"], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    assert [m["name"] for m in report["several"]["gpu-1"]] == ["minimax-m2-5", "qwen3"]
    assert "gpu-2: vllm_models[1].port: 8000 is model 0's too" in report["problems"]["gpu-2"]
    proc = subprocess.run([cli, "apply", "-i", str(inventory), "--limit", "gpu-1", "--artifacts", str(tmp_path / "runs"), "--json"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1 and "gpu-2: vllm_models[1].port: 8000 is model 0's too" in json.loads(proc.stdout)["error"]
    assert not (tmp_path / "runs").exists()


def test_multi_node_group_is_checked_across_the_inventory():
    from ansible_collections.llmops.vllm.plugins.plugin_utils.desired_state import validate_models
    group = dict(GOOD, group=["a", "b"])
    assert validate_model(group)["group"] == ["a", "b"] and validate_model(GOOD)["group"] == []
    with pytest.raises(PlanInputError, match=r"vllm_model.group: lists a more than once"):
        validate_model(dict(GOOD, group=["a", "b", "a"]))
    with pytest.raises(PlanInputError, match=r"vllm_models\[0\].group: a multi-node serving group is the only model"):
        validate_models([group])
    # every host of a group desires the same model (its own bind aside) and lists itself
    valid, problems = validate_inventory({"a": {"vllm_model": dict(group, bind="10.0.0.1")},
                                          "b": {"vllm_model": dict(group, bind="10.0.0.2")}})
    assert sorted(valid) == ["a", "b"] and problems == {}
    valid, problems = validate_inventory({"a": {"vllm_model": group}, "b": {"vllm_model": dict(group, port=9000)},
                                          "c": {"vllm_model": group}})
    assert sorted(problems) == ["a", "b", "c"] and valid == {}
    assert "b desire(s) another model" in problems["a"] and "a desire(s) another model" in problems["b"]
    assert "does not list the host itself" in problems["c"]
    valid, problems = validate_inventory({"a": {"vllm_model": group}})
    assert "b has no valid vllm_model" in problems["a"]


def test_swap_and_slot_ports():
    from ansible_collections.llmops.vllm.plugins.plugin_utils import desired_state
    base = {"name": "a", "repo_id": "org/a", "port": 8031}
    assert desired_state.validate_model(base)["swap"] == "stop-start"
    assert desired_state.validate_model(base)["slot_ports"] == []  # stop-start: vLLM holds the port itself
    auto = desired_state.validate_model(dict(base, swap="auto"))
    assert auto["slot_ports"] == [18031, 28031]
    assert desired_state.validate_model(dict(base, swap="bluegreen", slot_ports=[9001, 9002]))["slot_ports"] == [9001, 9002]
    for bad, message in ((dict(base, swap="rolling"), "swap: must be one of stop-start, auto, bluegreen"),
                         (dict(base, swap="auto", slot_ports=[9001]), "slot_ports: must be two different TCP ports"),
                         (dict(base, swap="auto", slot_ports=[8031, 9002]), "the host proxy holds port 8031 itself"),
                         (dict(base, swap="auto", port=50000), "set slot_ports: [A, B]"),
                         (dict(base, swap="auto", group=["h1", "h2"]), "a multi-node group restarts as one")):
        with pytest.raises(desired_state.PlanInputError, match=re.escape(message)):
            desired_state.validate_model(bad)
    with pytest.raises(desired_state.PlanInputError, match=re.escape("vllm_models[0].slot_ports: 18031 is a port of model 1 too")):
        desired_state.validate_models([dict(base, swap="auto"), {"name": "b", "repo_id": "org/b", "port": 8040,
                                                                 "swap": "auto", "slot_ports": [18031, 9000]}])
