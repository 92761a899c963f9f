# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The head of a multi-node group stops waiting when a worker's gate failed (roles/serve/tasks/gate.yml and
progress.yml), decided on localhost: the decision of tests/integration/test_group_live.py step 2 (issue 40).

One real ansible-playbook runs the shipped gate the way roles/rollout/tasks/swap.yml does (include_role
llmops.vllm.serve, tasks_from gate.yml) on three heads at once, each a local-connection host of a temporary
inventory: its own vllm_ready runs in the background against a stand-in vLLM on 127.0.0.1, and its workers
(serve_gate_watch) are local-connection hosts whose progress files are written here by the module's own
writer (readiness.progress_document / write_progress), as a worker's gate leaves them:

- head-of-two: two workers, the second failed (its unit died, as with LimitNOFILE=3) while the head still loads;
- head-ready: its worker still waits (a headless worker waits for the head's API) while the head becomes ready;
- head-alone: a single host, no workers.

The live case's other half - both nodes restarted from their old units and answering again - is the
rollout's rescue on real systemd hosts; nothing here covers it.
"""

import http.server
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from ansible.module_utils.compat.version import LooseVersion
from ansible.release import __version__ as ansible_core_version

from ansible_collections.llmops.vllm.plugins.module_utils import readiness

pytestmark = [pytest.mark.ansible, pytest.mark.skipif(
    LooseVersion(ansible_core_version) < LooseVersion("2.18"),
    reason="the gate reads progress files only on ansible-core >= 2.18 (loop_control.break_when)")]

ROOT = Path(__file__).resolve().parents[2]
NAME = "tiny-group"
STAGES = ["health", "models", "completion"]
FAIL_TASK = "Gate | a worker of the group failed - the head stops waiting for it"
# What a worker's gate writes when its unit could not start (the live case: LimitNOFILE=3 on the worker).
WORKER_FAILED = readiness.progress_document(
    "failed", "health", STAGES, NAME, 12.4, 5, "unit vllm-tiny-group.service is failed (failed, result exit-code)",
    unit_state="failed (failed)")
# A headless worker waits for the head's API like the head itself does.
WORKER_WAITING = readiness.progress_document(
    "waiting", "health", STAGES, NAME, 9.0, 4, "/health answered 503: loading", unit_state="active (running)")


class StandInVllm(http.server.ThreadingHTTPServer):
    """/health, /v1/models and /v1/completions as vLLM answers them; /health says 503 (loading) until ready()."""

    def __init__(self, ready):
        super().__init__(("127.0.0.1", 0), StandInHandler)
        self.ready = ready


class StandInHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802 - the stdlib's name
        if self.path == "/health":
            return self.answer(200, {}) if self.server.ready() else self.answer(503, {"error": "loading"})
        if self.path == "/v1/models":
            return self.answer(200, {"object": "list", "data": [{"id": NAME, "object": "model"}]})
        return self.answer(404, {"error": "not found"})

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/v1/completions":
            return self.answer(200, {"choices": [{"text": " hi", "finish_reason": "length"}],
                                     "usage": {"prompt_tokens": 1, "completion_tokens": 2}})
        return self.answer(404, {"error": "not found"})


def progress_file(directory):
    return str(directory / ("%s.ready-progress.json" % NAME))


@pytest.fixture(scope="module")
def gate(tmp_path_factory):
    """Runs the play once; returns {"outcomes": {head: what its gate did}, "log": the play's output, "tasks": the
    output cut at each task header}."""
    tmp = tmp_path_factory.mktemp("group-gate")
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    # head-ready answers only once its worker's file was read: the worker's Python is a wrapper that leaves a mark,
    # so its progress loop reads the worker's 'waiting' before its own 'ready' ends the wait, however slow the host.
    read_mark, loading = tmp / "worker-of-ready-was-read", threading.Event()
    marking_python = tmp / "marking-python"
    marking_python.write_text('#!/bin/sh\ntouch "%s"\nexec "%s" "$@"\n' % (read_mark, sys.executable))
    marking_python.chmod(0o755)
    # head-of-two loads for as long as the play runs
    servers = {"head-of-two": StandInVllm(loading.is_set), "head-ready": StandInVllm(read_mark.exists),
               "head-alone": StandInVllm(lambda: True)}
    for server in servers.values():
        threading.Thread(target=server.serve_forever, daemon=True).start()
    workers = {"worker-loading": (WORKER_WAITING, local), "worker-failed": (WORKER_FAILED, local),
               "worker-of-ready": (WORKER_WAITING, dict(local, ansible_python_interpreter=str(marking_python)))}
    for worker, (doc, _connection) in workers.items():
        (tmp / worker).mkdir()
        assert readiness.write_progress(progress_file(tmp / worker), dict(doc, updated=round(time.time(), 3)))
    watch = {"head-of-two": ["worker-loading", "worker-failed"], "head-ready": ["worker-of-ready"], "head-alone": []}
    heads = {head: dict(local, gate_port=server.server_port, gate_state_dir=str(tmp / head),
                        gate_watch=[{"host": w, "progress_file": progress_file(tmp / w)} for w in watch[head]])
             for head, server in servers.items()}
    for head in heads:
        (tmp / head).mkdir()
    inventory = {"all": {"children": {"heads": {"hosts": heads},
                                      "workers": {"hosts": {w: connection for w, (_doc, connection) in workers.items()}}}}}
    play = [{
        "hosts": "heads", "gather_facts": False,
        "tasks": [
            {"block": [
                {"ansible.builtin.include_role": {"name": "llmops.vllm.serve", "tasks_from": "gate.yml"},
                 # swap.yml's serve variables, for a stand-in on loopback: nothing in the plan, no model files
                 "vars": {"serve_name": NAME, "serve_served_model_name": NAME, "serve_plan": {"argv": []},
                          "serve_model_path": str(tmp / "no-model"), "serve_bind": "127.0.0.1",
                          "serve_port": "{{ gate_port }}", "serve_state_dir": "{{ gate_state_dir }}",
                          "serve_poll_interval": 1, "serve_gate_watch": "{{ gate_watch }}",
                          # long enough for a slow host; short enough that a gate which did not stop for the failed
                          # worker fails this test in seconds instead of waiting out the play's timeout
                          "serve_ready_timeout": 30}},
                {"ansible.builtin.set_fact": {"gate_outcome": {"ready": "{{ serve_ready }}"}}},
            ], "rescue": [
                {"ansible.builtin.set_fact": {"gate_outcome": {"failed_task": "{{ ansible_failed_task.name }}",
                                                               "msg": "{{ ansible_failed_result.msg }}"}}},
            ]},
            {"name": "Outcome", "ansible.builtin.debug": {"var": "gate_outcome"}},
        ],
    }]
    (tmp / "inventory.yml").write_text(yaml.safe_dump(inventory))
    (tmp / "play.yml").write_text(yaml.safe_dump(play))
    env = {"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "PATH": "%s:/usr/bin:/bin" % Path(sys.executable).parent,
           "HOME": str(tmp), "ANSIBLE_LOCAL_TEMP": str(tmp / "tmp"), "ANSIBLE_NOCOLOR": "1", "LANG": "C.UTF-8",
           # async_status expands ~ from the password database, not $HOME: both sides told one directory
           "ANSIBLE_ASYNC_DIR": str(tmp / "async"), "ANSIBLE_PIPELINING": "1", "ANSIBLE_CALLBACK_RESULT_FORMAT": "json"}
    try:
        done = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp / "inventory.yml"),
                               str(tmp / "play.yml")], cwd=str(ROOT), env=env, capture_output=True, text=True,
                              timeout=120, check=False)
    finally:
        # head-of-two's vllm_ready still waits in the background (the play stopped waiting for it): let it pass
        # now, so that it ends instead of polling until its timeout.
        loading.set()
        own = Path(progress_file(tmp / "head-of-two"))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (own.exists() and json.loads(own.read_text() or "{}").get("phase") == "ready"):
            time.sleep(0.2)
        for server in servers.values():
            server.shutdown()
            server.server_close()
    log = done.stdout + done.stderr
    assert done.returncode == 0, log  # every head's outcome is recorded (the rescue), none is unreachable
    tasks = {chunk.split("]", 1)[0]: chunk for chunk in log.split("TASK [")[1:]}
    decoder = json.JSONDecoder()
    outcomes = {head: decoder.raw_decode(tasks["Outcome"].split("ok: [%s] => " % head, 1)[1])[0]["gate_outcome"]
                for head in heads}
    return {"outcomes": outcomes, "log": log, "tasks": tasks}


def task_output(gate, name):
    [chunk] = [chunk for header, chunk in gate["tasks"].items() if header.endswith(name)]
    return chunk


def test_a_failed_worker_ends_the_heads_wait_naming_that_worker_and_its_summary(gate):
    outcome = gate["outcomes"]["head-of-two"]
    assert outcome.get("failed_task") == FAIL_TASK, outcome
    # the second of two workers: the one whose own document says failed, not the one before it still loading
    assert outcome["msg"] == ("A worker of this multi-node group failed before the group answered - worker-failed - %s."
                              " That host's own gate task shows what its unit logged." % WORKER_FAILED["summary"])
    assert WORKER_FAILED["summary"].startswith("failed after 12 s at stage health, 5 attempts: unit vllm-tiny-group")
    assert "worker-loading" not in outcome["msg"]
    # at once: the worker's file ended the head's wait while the head was still loading, not its own timeout
    lines = [line for line in task_output(gate, "Gate | progress of the wait for " + NAME).splitlines()
             if line.startswith("ok: [head-of-two")]
    assert lines[-1] == "ok: [head-of-two -> worker-failed] => (item=worker-failed: %s)" % WORKER_FAILED["summary"], lines
    assert all("(item=head-of-two: waiting for /health" in line for line in lines if "-> worker-" not in line), lines


def test_a_worker_still_waiting_does_not_fail_a_head_that_becomes_ready(gate):
    outcome = gate["outcomes"]["head-ready"]
    assert "failed_task" not in outcome, outcome
    assert outcome["ready"]["finished"] and not outcome["ready"].get("failed"), outcome
    assert outcome["ready"]["stages"] == STAGES
    progress = task_output(gate, "Gate | progress of the wait for " + NAME)
    assert "ok: [head-ready -> worker-of-ready] => (item=worker-of-ready: %s)" % WORKER_WAITING["summary"] in progress
    assert "skipping: [head-ready]" in task_output(gate, FAIL_TASK)


def test_a_single_host_skips_the_failed_worker_task(gate):
    outcome = gate["outcomes"]["head-alone"]
    assert "failed_task" not in outcome and outcome["ready"]["finished"], outcome
    assert "skipping: [head-alone]" in task_output(gate, FAIL_TASK)
    # no worker to name: its progress lines carry no host prefix
    assert "ok: [head-alone] => (item=head-alone:" not in gate["log"]
