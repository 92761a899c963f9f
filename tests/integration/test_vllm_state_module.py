# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llmops.vllm.vllm_state through real ansible-playbook on localhost, against a state dir in tmp:
a schema-0 file is read (migrated, untouched), recorded in check mode (diff, no write), recorded
(schema 1 on disk), recorded again (no change), and retired."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils import host_state
from ansible_collections.llmops.vllm.plugins.plugin_utils.contracts import VllmStateResult

pytestmark = pytest.mark.ansible

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
COMMIT_A = "0000000000000000000000000000000000000000"
COMMIT_B = "5bd8b0e1c2f0a8d5e6f7a8b9c0d1e2f3a4b5c6d7"
ENTRY_A = {
    "name": "minimax-m2-5", "unit": "vllm-minimax-m2-5.service", "repo_id": "MiniMaxAI/MiniMax-M2.5", "revision": "main",
    "commit": COMMIT_A, "path": "/var/lib/llmops-vllm/models/MiniMaxAI/MiniMax-M2.5/" + COMMIT_A,
    "served_model_name": "minimax-m2.5", "bind": "0.0.0.0", "port": "8000", "since": "2026-12-01T01:14:15.591638",
    "plan": {"device": "cuda", "tensor_parallel_size": "4", "data_parallel_size": "1", "enable_expert_parallel": False,
             "gpu_indices": [0, 1, 2, 3], "numa_node": "", "max_model_len": "196608",
             "argv": ["vllm", "serve", "/var/lib/llmops-vllm/models/MiniMaxAI/MiniMax-M2.5/" + COMMIT_A]},
}
# A first-format file as roles/rollout/tasks/record.yml wrote it with ansible-core 2.18 (numbers as
# strings, numa_node null as "", the first rollout's previous as "").
LEGACY = json.dumps({"schema": 1, "current": ENTRY_A, "previous": "",
                     "history": [{k: v for k, v in ENTRY_A.items() if k != "plan"}]}, indent=4, sort_keys=True) + "\n"
ENTRY_B = {
    "name": "kimi-k2-5", "repo_id": "nvidia/Kimi-K2.5-NVFP4", "revision": "main", "commit": COMMIT_B,
    "path": "/var/lib/llmops-vllm/models/nvidia/Kimi-K2.5-NVFP4/" + COMMIT_B, "served_model_name": "kimi-k2.5",
    "bind": "::", "port": 8001,
    "plan": {"device": "cuda", "tensor_parallel_size": 8, "data_parallel_size": 1, "enable_expert_parallel": True,
             "gpu_indices": [0, 1, 2, 3, 4, 5, 6, 7], "numa_node": None, "max_model_len": 262144, "layout": "TP=8+EP",
             "argv": ["serve", "/var/lib/llmops-vllm/models/nvidia/Kimi-K2.5-NVFP4/" + COMMIT_B]},
}


def run_module(tmp_path, name, module_args, check=False, diff=False):
    """One vllm_state task in a play on localhost; returns its registered result (ansible-playbook must succeed)."""
    work = tmp_path / name
    work.mkdir()
    out = work / "result.json"
    playbook = work / "play.yml"
    playbook.write_text(json.dumps([{
        "hosts": "localhost", "gather_facts": False,
        "tasks": [
            {"name": "State", "llmops.vllm.vllm_state": module_args, "register": "host_state", "ignore_errors": True},
            {"name": "Write the result", "ansible.builtin.copy": {"content": "{{ host_state | to_nice_json }}", "dest": str(out)},
             "check_mode": False, "diff": False},
        ]}]))
    argv = [str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local",
            "-e", "ansible_python_interpreter=%s" % sys.executable, str(playbook)]
    if check:
        argv.append("--check")
    if diff:
        argv.append("--diff")
    env = {
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "PATH": "%s:/usr/bin:/bin" % Path(sys.executable).parent,
        "HOME": str(tmp_path),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"),
        "ANSIBLE_NOCOLOR": "1",
        "LANG": "C.UTF-8",
    }
    completed = subprocess.run(argv, cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=300, check=False)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    result = json.loads(out.read_text())
    if not result.get("failed"):  # what the module really returns is its contract (plus Ansible's own keys)
        VllmStateResult.model_validate({k: v for k, v in result.items() if k not in ("changed", "failed", "invocation", "warnings")})
    result["_stdout"] = completed.stdout + completed.stderr  # warnings go to stderr
    return result


def test_legacy_file_read_record_retire(tmp_path):
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    state_file = state_dir / "state.json"
    state_file.write_text(LEGACY)
    os.chmod(state_file, 0o600)
    mtime = state_file.stat().st_mtime_ns

    read = run_module(tmp_path, "read", {"state_dir": str(state_dir)}, diff=True)
    assert not read.get("failed"), read
    assert read["changed"] is False and read["migrated"] is True and "diff" not in read
    assert read["state_file"] == str(state_file) and "owner" not in read
    assert read["state"]["schema"] == 1 and list(read["state"]["models"]) == ["minimax-m2-5"]
    assert read["current"]["port"] == 8000 and read["current"]["plan"]["numa_node"] is None
    assert read["current"]["plan"]["tensor_parallel_size"] == 4
    assert read["models"] == [read["current"]]
    assert state_file.read_text() == LEGACY and state_file.stat().st_mtime_ns == mtime

    record_args = {"action": "record", "path": str(state_file), "entry": ENTRY_B, "replaces": "minimax-m2-5"}
    checked = run_module(tmp_path, "record-check", record_args, check=True, diff=True)
    assert not checked.get("failed"), checked
    assert checked["changed"] is True and checked["migrated"] is True
    assert checked["diff"]["before"] == LEGACY
    assert json.loads(checked["diff"]["after"])["models"]["kimi-k2-5"]["port"] == 8001
    assert '-    "current": {' in checked["_stdout"] and '+  "models": {' in checked["_stdout"]
    assert checked["current"]["name"] == "kimi-k2-5"
    assert state_file.read_text() == LEGACY and state_file.stat().st_mtime_ns == mtime

    recorded = run_module(tmp_path, "record", record_args)
    assert not recorded.get("failed"), recorded
    assert recorded["changed"] is True and "diff" not in recorded
    on_disk = state_file.read_text()
    state = json.loads(on_disk)
    assert on_disk == host_state.serialize(state)
    assert sorted(state) == ["history", "lock", "models", "previous", "schema"]
    assert list(state["models"]) == ["kimi-k2-5"] and list(state["previous"]) == ["minimax-m2-5"]
    assert state["models"]["kimi-k2-5"]["unit"] == "vllm-kimi-k2-5.service"
    assert state["previous"]["minimax-m2-5"]["port"] == 8000
    assert [h["name"] for h in state["history"]] == ["kimi-k2-5", "minimax-m2-5"]
    assert recorded["state"] == state and recorded["current"] == state["models"]["kimi-k2-5"]
    assert oct(state_file.stat().st_mode & 0o777) == "0o644"
    assert sorted(os.listdir(state_dir)) == ["state.json"]

    again = run_module(tmp_path, "record-again", record_args, diff=True)
    assert not again.get("failed"), again
    assert again["changed"] is False and again["migrated"] is False
    assert again["diff"]["before"] == again["diff"]["after"] == on_disk
    assert state_file.read_text() == on_disk

    retired = run_module(tmp_path, "retire", {"action": "retire", "state_dir": str(state_dir), "name": "kimi-k2-5"})
    assert not retired.get("failed"), retired
    assert retired["changed"] is True and retired["current"] is None and retired["models"] == []
    state = json.loads(state_file.read_text())
    assert state["models"] == {} and sorted(state["previous"]) == ["kimi-k2-5", "minimax-m2-5"]
    assert state["previous"]["kimi-k2-5"] == recorded["state"]["models"]["kimi-k2-5"]

    retired_again = run_module(tmp_path, "retire-again", {"action": "retire", "state_dir": str(state_dir), "name": "kimi-k2-5"})
    assert retired_again["changed"] is False


def test_missing_state_dir_and_refusals(tmp_path):
    state_dir = tmp_path / "new" / "state"
    read = run_module(tmp_path, "read-missing", {"state_dir": str(state_dir)})
    assert read["changed"] is False and read["current"] is None and read["migrated"] is False
    assert not state_dir.exists()

    checked = run_module(tmp_path, "record-check", {"action": "record", "state_dir": str(state_dir), "entry": ENTRY_B}, check=True)
    assert checked["changed"] is True and not state_dir.exists()

    recorded = run_module(tmp_path, "record", {"action": "record", "state_dir": str(state_dir), "entry": ENTRY_B})
    assert recorded["changed"] is True
    assert json.loads((state_dir / "state.json").read_text())["models"]["kimi-k2-5"]["bind"] == "::"

    bad = dict(ENTRY_B, port="eighty", colour="blue")
    refused = run_module(tmp_path, "record-bad", {"action": "record", "state_dir": str(state_dir), "entry": bad})
    assert refused["failed"] is True
    assert "entry.port: expected an integer 1-65535, got 'eighty' (str)" in refused["problems"]
    assert any(p.startswith("entry.colour: unknown key") for p in refused["problems"])
    assert refused["msg"].startswith(str(state_dir / "state.json") + ": ")

    misplaced = run_module(tmp_path, "retire-with-entry", {"action": "retire", "state_dir": str(state_dir), "name": "kimi-k2-5",
                                                           "entry": ENTRY_B})
    assert misplaced["failed"] is True and misplaced["msg"] == "entry only goes with action=record (action is retire)"

    (state_dir / "state.json").write_text(json.dumps({"schema": 2, "models": {}}))
    future = run_module(tmp_path, "read-future", {"state_dir": str(state_dir)})
    assert future["failed"] is True and "schema 2 is newer" in future["msg"] and "upgrade the collection" in future["msg"]


def test_lock_serialises_two_runs_and_takes_over_an_expired_lease(tmp_path):
    state_dir = tmp_path / "state"
    first = run_module(tmp_path, "lock-first", {"action": "lock", "state_dir": str(state_dir), "holder": "ci@ctl-1/run-1",
                                                "controller": "ctl-1", "lease_s": 600})
    assert first["changed"] is True and first["lock"]["holder"] == "ci@ctl-1/run-1" and first["taken_over"] is None
    on_disk = json.loads((state_dir / "state.json").read_text())
    assert on_disk["lock"]["controller"] == "ctl-1"

    second = run_module(tmp_path, "lock-second", {"action": "lock", "state_dir": str(state_dir), "holder": "ci@ctl-2/run-2",
                                                  "controller": "ctl-2", "wait_s": 3})
    assert second["failed"] is True and second["held_by"]["holder"] == "ci@ctl-1/run-1"
    assert "held by ci@ctl-1/run-1 on ctl-1 since " in second["msg"] and "waited 3 s" in second["msg"]
    assert json.loads((state_dir / "state.json").read_text()) == on_disk  # the refused run wrote nothing

    renewed = run_module(tmp_path, "renew", {"action": "renew", "state_dir": str(state_dir), "holder": "ci@ctl-1/run-1", "lease_s": 900})
    assert renewed["changed"] is True and renewed["lock"]["lease_s"] == 900 and "renewed" in renewed["lock"]
    not_mine = run_module(tmp_path, "renew-other", {"action": "renew", "state_dir": str(state_dir), "holder": "ci@ctl-2/run-2"})
    assert not_mine["failed"] is True and "ci@ctl-2/run-2 does not hold it" in not_mine["msg"]

    # a lease that ran out (its run died): the next run takes it over, with a warning
    on_disk = json.loads((state_dir / "state.json").read_text())
    on_disk["lock"].update(started="2026-01-01T00:00:00+00:00", renewed="2026-01-01T00:10:00+00:00")
    for key in ("boot_id", "boottime_s"):  # a lock of an older release: judged by the wall clock
        del on_disk["lock"][key]
    (state_dir / "state.json").write_text(json.dumps(on_disk))
    taken = run_module(tmp_path, "take-over", {"action": "lock", "state_dir": str(state_dir), "holder": "ci@ctl-2/run-2",
                                               "controller": "ctl-2"})
    assert taken["changed"] is True and taken["taken_over"]["holder"] == "ci@ctl-1/run-1"
    assert "took over the lock of ci@ctl-1/run-1: its lease had run out" in taken["_stdout"]

    released = run_module(tmp_path, "unlock", {"action": "unlock", "state_dir": str(state_dir), "holder": "ci@ctl-2/run-2"})
    assert released["changed"] is True and released["lock"] is None
    assert json.loads((state_dir / "state.json").read_text())["lock"] is None


def test_a_waiting_lock_is_taken_once_the_holder_releases_it(tmp_path):
    """Two real runs at once: the second waits (wait_s) and gets the lock the first releases."""
    import threading
    import time
    state_dir = tmp_path / "state"
    run_module(tmp_path, "hold", {"action": "lock", "state_dir": str(state_dir), "holder": "first", "controller": "ctl"})
    waited = {}

    def second():
        waited["result"] = run_module(tmp_path, "wait", {"action": "lock", "state_dir": str(state_dir), "holder": "second",
                                                         "controller": "ctl", "wait_s": 120})
    thread = threading.Thread(target=second)
    thread.start()
    time.sleep(6)  # the second run is polling by now (ansible-playbook starts in ~2 s)
    run_module(tmp_path, "release", {"action": "unlock", "state_dir": str(state_dir), "holder": "first"})
    thread.join(timeout=180)
    result = waited["result"]
    assert result["changed"] is True and result["lock"]["holder"] == "second" and result["waited_s"] > 1


def run_play(tmp_path, name, tasks):
    """Several vllm_state tasks in one play on localhost (ignore_errors each); returns {register: result}."""
    work = tmp_path / name
    work.mkdir()
    out = work / "results.json"
    names = [task["register"] for task in tasks if "register" in task]
    play = [{"hosts": "localhost", "gather_facts": False,
             "tasks": [dict(task, ignore_errors=True) for task in tasks] + [
                 {"name": "Write the results", "ansible.builtin.copy": {
                     "content": "{{ {%s} | to_nice_json }}" % ", ".join("'%s': %s" % (n, n) for n in names), "dest": str(out)}}]}]
    (work / "play.yml").write_text(json.dumps(play))
    env = {"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "PATH": "%s:/usr/bin:/bin" % Path(sys.executable).parent,
           "HOME": str(tmp_path), "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"), "ANSIBLE_NOCOLOR": "1", "LANG": "C.UTF-8"}
    completed = subprocess.run([str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local", "-e",
                                "ansible_python_interpreter=%s" % sys.executable, str(work / "play.yml")],
                               cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=300, check=False)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return json.loads(out.read_text())


def test_issue39_race_a_run_that_lost_the_lock_writes_nothing(tmp_path):
    """Through the real module: run A takes the lock (its boot clock from the host's own), its lease runs out,
    run B takes it over; A's record and retire (with holder) are refused and write nothing, A cannot renew;
    B's record goes through. On 9da4382 record/retire took no holder and the lock had no boot clock.
    In the same play: an empty state file fails the read naming the file (9da4382: "serves nothing"), and a
    file another user owns is refused before the lock is written."""
    import time
    state_dir = tmp_path / "state"
    state_file = state_dir / "state.json"
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    base = {"state_dir": str(state_dir)}
    empty_dir, forged_dir = tmp_path / "empty", tmp_path / "forged"
    for directory in (empty_dir, forged_dir):
        directory.mkdir()
    (empty_dir / "state.json").write_text("")
    (forged_dir / "state.json").write_text(host_state.serialize(host_state.empty_state()))
    if os.geteuid() == 0:
        os.chown(forged_dir / "state.json", 65534, 65534)
    before_s = time.clock_gettime(time.CLOCK_BOOTTIME)
    results = run_play(tmp_path, "race", [
        {"llmops.vllm.vllm_state": {"state_dir": str(empty_dir)}, "register": "empty"},
        {"llmops.vllm.vllm_state": {"state_dir": str(forged_dir), "action": "lock", "holder": "run-a", "controller": "ctl"},
         "register": "forged"},
        {"llmops.vllm.vllm_state": dict(base, action="lock", holder="run-a", controller="ctl-1", lease_s=1), "register": "a"},
        {"ansible.builtin.wait_for": {"timeout": 1}},
        {"llmops.vllm.vllm_state": dict(base, action="lock", holder="run-b", controller="ctl-2", lease_s=600), "register": "b"},
        {"llmops.vllm.vllm_state": dict(base, action="record", entry=ENTRY_B, holder="run-a"), "register": "record_a"},
        {"llmops.vllm.vllm_state": dict(base, action="retire", name="kimi-k2-5", holder="run-a"), "register": "retire_a"},
        {"llmops.vllm.vllm_state": dict(base, action="renew", holder="run-a"), "register": "renew_a"},
        {"ansible.builtin.slurp": {"src": str(state_file)}, "register": "after_a"},
        {"llmops.vllm.vllm_state": dict(base, action="record", entry=ENTRY_B, holder="run-b"), "register": "record_b"},
    ])
    after_s = time.clock_gettime(time.CLOCK_BOOTTIME)
    lock_a = results["a"]["lock"]
    assert lock_a["boot_id"] == boot_id and before_s <= lock_a["boottime_s"] <= after_s  # the host's real clocks
    assert results["b"]["taken_over"]["holder"] == "run-a" and results["b"]["lock"]["holder"] == "run-b"
    for refused in ("record_a", "retire_a", "renew_a"):
        result = results[refused]
        assert result["failed"] is True, result
        assert "lock: run-a does not hold it (held by run-b on ctl-2" in result["msg"] and "nothing written" in result["msg"]
        assert result["held_by"]["holder"] == "run-b"
    import base64
    assert base64.b64decode(results["after_a"]["content"]).decode() == host_state.serialize(results["b"]["state"])
    assert results["record_b"]["changed"] is True and list(results["record_b"]["state"]["models"]) == ["kimi-k2-5"]
    on_disk = json.loads(state_file.read_text())
    assert on_disk["lock"]["holder"] == "run-b" and list(on_disk["models"]) == ["kimi-k2-5"]
    assert sorted(os.listdir(state_dir)) == ["state.json"]

    empty = results["empty"]
    assert empty["failed"] is True and empty["msg"].startswith(str(empty_dir / "state.json") + ": the file is empty")
    assert "remove the file" in empty["msg"] and (empty_dir / "state.json").read_text() == ""
    if os.geteuid() == 0:
        assert results["forged"]["failed"] is True and "owned by uid 65534" in results["forged"]["msg"]
        assert json.loads((forged_dir / "state.json").read_text())["lock"] is None
