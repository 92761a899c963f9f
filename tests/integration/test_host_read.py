# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llmops.vllm.host_read through real ansible-playbook on localhost: a read recorded into a snapshot
(with the files asked for), then answered from it without running (a clock read comes back as it was),
vllm_process_info's conflicts recomputed for another port, a new vLLM's venv previewed as vllm_venv
would (created) when the recorded listing of the venvs lacks it, and a read the snapshot lacks refused by name."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.llmops.vllm.plugins.plugin_utils import snapshot

pytestmark = pytest.mark.ansible

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
CLOCK = {"module": "ansible.builtin.command", "args": {"argv": [sys.executable, "-c", "import time; print(time.time_ns())"]}}


def play(tmp_path, name, tasks, **variables):
    """The tasks in a play on localhost (host name h1); the registered results of the tasks named r0, r1, ..."""
    work = tmp_path / name
    work.mkdir()
    out = work / "results.json"
    registered = []
    body = []
    for index, task in enumerate(tasks):
        body.append(dict(task, name="task %d" % index, register="r%d" % index, ignore_errors=True))
        registered.append("r%d" % index)
    body.append({"name": "Write the results", "ansible.builtin.copy": {
        "content": "{{ [%s] | to_nice_json }}" % ", ".join(registered), "dest": str(out)}, "check_mode": False})
    playbook = work / "play.yml"
    playbook.write_text(json.dumps([{"hosts": "h1", "gather_facts": False, "tasks": body}]))
    argv = [str(ANSIBLE_PLAYBOOK), "-i", "h1,", "-c", "local", "-e", "ansible_python_interpreter=%s" % sys.executable,
            "-e", json.dumps(variables), str(playbook)]
    env = {"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "PATH": "%s:/usr/bin:/bin" % Path(sys.executable).parent,
           "HOME": str(tmp_path), "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"), "ANSIBLE_NOCOLOR": "1", "LANG": "C.UTF-8"}
    completed = subprocess.run(argv, cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=300, check=False)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return json.loads(out.read_text())


def test_a_recorded_read_is_answered_from_the_snapshot_without_running(tmp_path):
    (tmp_path / "units").mkdir()
    (tmp_path / "units" / "vllm-a.service").write_text("[Unit]\nDescription=a\n")
    (tmp_path / "units" / "other.service").write_text("[Unit]\n")
    snap = tmp_path / "snap"
    recorded = play(tmp_path, "record", [
        {"llmops.vllm.host_read": CLOCK},
        {"llmops.vllm.host_read": {"files": [str(tmp_path / "units" / "vllm-*.service"), str(tmp_path / "absent.txt")]}},
    ], **{snapshot.RECORD_VAR: str(snap)})
    assert recorded[0]["rc"] == 0 and recorded[1]["files"] == [str(tmp_path / "units" / "vllm-a.service")]
    doc = snapshot.load(str(snap), "h1")
    assert doc["files"] == {str(tmp_path / "units" / "vllm-a.service"): {"content": "[Unit]\nDescription=a\n", "mode": "0644"}}
    assert [read["module"] for read in doc["reads"].values()] == ["ansible.builtin.command"]

    replayed = play(tmp_path, "replay", [{"llmops.vllm.host_read": CLOCK}, {"llmops.vllm.host_read": CLOCK}],
                    **{snapshot.REPLAY_VAR: str(snap)})
    # the clock was not read again: both answers are the recorded one
    assert replayed[0]["stdout"] == replayed[1]["stdout"] == recorded[0]["stdout"]
    again = play(tmp_path, "plain", [{"llmops.vllm.host_read": CLOCK}])  # neither variable: just the read
    assert int(again[0]["stdout"]) > int(recorded[0]["stdout"])


def test_offline_conflicts_are_recomputed_and_a_missing_read_is_named(tmp_path):
    snap = tmp_path / "snap"
    doc = snapshot.empty("h1", "2026-12-02T00:00:00+00:00", "0.1.0")
    hand = {"pid": 4242, "ports": [9000], "gpus": [2], "managed_by": None, "command": "vllm serve x"}
    ours = {"pid": 77, "ports": [8000], "gpus": [0], "managed_by": "vllm-a.service"}
    snapshot.record(doc, "llmops.vllm.vllm_process_info", {"state_dir": "/var/lib/llmops-vllm", "port": 8000, "gpu_indices": [0]},
                    {"changed": False, "servers": [hand, ours], "foreign": [hand], "conflicts": []})
    snapshot.record(doc, "ansible.builtin.find", {"paths": ["/opt/llmops-vllm/venvs"], "file_type": "directory"},
                    {"files": [{"path": "/opt/llmops-vllm/venvs/vllm-0.11.0"}], "matched": 1})
    snapshot.save(str(snap), doc)
    venv = {"package": "vllm", "installer": "uv", "extra_index_url": "https://user:secret@index/simple"}
    results = play(tmp_path, "replay", [
        {"llmops.vllm.host_read": {"module": "llmops.vllm.vllm_process_info",
                                   "args": {"state_dir": "/var/lib/llmops-vllm", "port": 9000, "gpu_indices": [0]}}},
        {"llmops.vllm.host_read": {"module": "llmops.vllm.vllm_process_info",
                                   "args": {"state_dir": "/var/lib/llmops-vllm", "port": 8000, "gpu_indices": [1, 2]}}},
        {"llmops.vllm.host_read": {"module": "llmops.vllm.vllm_process_info",
                                   "args": {"state_dir": "/var/lib/llmops-vllm", "port": 8000, "gpu_indices": [1]}}},
        {"llmops.vllm.host_read": {"module": "llmops.vllm.vllm_info", "args": {"venv": "/opt/nowhere"}}},
        {"llmops.vllm.host_read": {"module": "llmops.vllm.vllm_venv",
                                   "args": dict(venv, path="/opt/llmops-vllm/venvs/vllm-0.12.0", version="0.12.0")}},
        {"llmops.vllm.host_read": {"module": "llmops.vllm.vllm_venv",
                                   "args": dict(venv, path="/opt/llmops-vllm/venvs/vllm-0.11.0", version="0.11.0")}},
    ], **{snapshot.REPLAY_VAR: str(snap)})
    assert [r["conflicts"] for r in results[:3]] == [[hand], [hand], []]
    assert results[0]["foreign"] == [hand] and results[0]["servers"] == [hand, ours]
    assert results[3]["failed"] and "holds no llmops.vllm.vllm_info read" in results[3]["msg"] and "/opt/nowhere" in results[3]["msg"]
    created = results[4]
    assert created["changed"] and created["action"] == "create" and created["version"] is None
    assert created["reason"] == "no venv at /opt/llmops-vllm/venvs/vllm-0.12.0" and created["venv"] == "/opt/llmops-vllm/venvs/vllm-0.12.0"
    # the host has that venv, but the snapshot holds no check of it: only the host can say
    assert results[5]["failed"] and "holds no llmops.vllm.vllm_venv read" in results[5]["msg"] and "secret" not in results[5]["msg"]
    # a host without a snapshot file
    missing = play(tmp_path, "missing", [{"llmops.vllm.host_read": CLOCK}], **{snapshot.REPLAY_VAR: str(tmp_path / "none")})
    assert missing[0]["failed"] and "no snapshot of h1 here" in missing[0]["msg"]
