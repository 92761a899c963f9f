# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rollout's fast path (roles/rollout/tasks/fastpath.yml): a host that provably serves the desired
state stops early.

- host_state.up_to_date_problem() against a real recorded state, real files in tmp (unit file, venv,
  model directory): None when everything matches, each reason otherwise, cheap checks first;
- hub.resolve_commit_http() against a real HTTP server on 127.0.0.1;
- the fingerprint filter and code_digest() over a real tree in tmp;
- every option of the rollout and vllm_install roles is in __rollout_fingerprint_inputs or
  deliberately left out;
- vllm_state action=verify through real ansible-playbook on localhost.
"""

import hashlib
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from ansible_collections.llmops.vllm.plugins.filter import host_state as host_state_filter
from ansible_collections.llmops.vllm.plugins.module_utils import host_state, hub
from ansible_collections.llmops.vllm.plugins.plugin_utils.contracts import VllmStateResult

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"

NAME = "minimax-m2-5"
UNIT = "vllm-minimax-m2-5.service"
REPO_ID = "MiniMaxAI/MiniMax-M2.5"
COMMIT = "5bd8b0e1c2f0a8d5e6f7a8b9c0d1e2f3a4b5c6d7"
OTHER_COMMIT = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b"
FINGERPRINT = hashlib.sha256(b"the inputs of this rollout").hexdigest()
UNIT_TEXT = """[Unit]
Description=vLLM serving minimax-m2-5 (llmops.vllm)

[Service]
ExecStart=/opt/llmops-vllm/venvs/vllm-0.33.0/bin/vllm serve /models/x --tensor-parallel-size 4
"""


# ----------------------------------------------------------------------------- a host in tmp_path

class Host:
    """A host as a finished rollout leaves it: model directory, venv with bin/vllm, the unit file, and
    a schema-1 state recording them (host_state.record())."""

    def __init__(self, root, fingerprint=FINGERPRINT, with_unit_sha1=True, with_fingerprint=True):
        self.root = root
        self.model_dir = root / "models" / "MiniMaxAI" / "MiniMax-M2.5" / COMMIT
        self.model_dir.mkdir(parents=True)
        (self.model_dir / "config.json").write_text('{"model_type": "minimax_m2"}\n')
        self.venv = root / "venvs" / "vllm-0.33.0"
        (self.venv / "bin").mkdir(parents=True)
        (self.venv / "bin" / "vllm").write_text("#!/bin/sh\n")
        self.unit_dir = root / "systemd"
        self.unit_dir.mkdir()
        self.unit_file = self.unit_dir / UNIT
        self.unit_file.write_text(UNIT_TEXT)
        self.entry = entry(self.model_dir, self.venv)
        if with_fingerprint:
            self.entry["fingerprint"] = fingerprint
        if with_unit_sha1:
            self.entry["unit_sha1"] = host_state.file_sha1(str(self.unit_file))
        self.state = host_state.record(host_state.empty_state(), self.entry, now="2026-12-01T10:00:00+00:00")

    def problem(self, name=NAME, fingerprint=FINGERPRINT, active=True, commit=COMMIT, calls=None):
        """up_to_date_problem() with probes that answer `active` and `commit` (an exception is raised),
        noting each call in `calls`."""
        calls = [] if calls is None else calls

        def unit_active(unit):
            calls.append(("unit_active", unit))
            return active

        def commit_now(recorded):
            calls.append(("commit_now", recorded["repo_id"], recorded["revision"]))
            if isinstance(commit, Exception):
                raise commit
            return commit

        return host_state.up_to_date_problem(self.state, name, fingerprint, str(self.unit_dir),
                                             unit_active=unit_active, commit_now=commit_now)


def entry(model_dir, venv, name=NAME, repo_id=REPO_ID, commit=COMMIT, port=8000):
    return {
        "name": name, "repo_id": repo_id, "revision": "main", "commit": commit, "path": str(model_dir),
        "served_model_name": "minimax-m2.5", "bind": "0.0.0.0", "port": port, "venv": str(venv),
        "plan": {"device": "cuda", "tensor_parallel_size": 4, "data_parallel_size": 1, "enable_expert_parallel": False,
                 "gpu_indices": [0, 1, 2, 3], "numa_node": 0, "max_model_len": 196608, "layout": "TP=4",
                 "argv": ["serve", str(model_dir), "--tensor-parallel-size", "4"]},
    }


@pytest.fixture
def host(tmp_path):
    return Host(tmp_path)


def test_the_recorded_entry_is_realistic(host):
    served = host.state["models"][NAME]
    assert sorted(served["plan"]) == sorted(host_state.PLAN_KEYS)
    # takeover: only an entry taken over has it; stable_port and slot_ports: only one behind the host proxy (swap auto)
    assert set(host_state.ENTRY_OPTIONAL) - {"takeover", "stable_port", "slot_ports"} <= set(served)
    assert served["unit"] == UNIT and served["unit_sha1"] == hashlib.sha1(UNIT_TEXT.encode()).hexdigest()
    assert host_state.state_problems(host.state) == []


# ----------------------------------------------------------------------------- up_to_date_problem

def test_up_to_date_when_everything_matches(host):
    calls = []
    assert host.problem(calls=calls) is None
    assert calls == [("unit_active", UNIT), ("commit_now", REPO_ID, "main")]


def test_up_to_date_without_probes(host):
    assert host_state.up_to_date_problem(host.state, NAME, FINGERPRINT, str(host.unit_dir)) is None


def test_issue39_a_host_in_the_old_layout_is_not_up_to_date(host, tmp_path):
    """An older release gave the state and model directories to the service user: the fast path must not stop
    there, so that the full rollout's control-plane step migrates them (the directories are root's here)."""
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    assert host_state.up_to_date_problem(host.state, NAME, FINGERPRINT, str(host.unit_dir), state_dir=str(state_dir)) is None
    for directory in (state_dir, host.model_dir):
        os.chown(directory, 65534, 65534)
        why = host_state.up_to_date_problem(host.state, NAME, FINGERPRINT, str(host.unit_dir), state_dir=str(state_dir))
        assert why is not None and str(directory) in why and "older release's layout (owner uid 65534" in why, why
        os.chown(directory, 0, 0)
    os.chmod(host.model_dir, 0o775)
    assert "mode 0775" in host_state.up_to_date_problem(host.state, NAME, FINGERPRINT, str(host.unit_dir))
    os.chmod(host.model_dir, 0o755)
    assert host_state.up_to_date_problem(host.state, NAME, FINGERPRINT, str(host.unit_dir), state_dir=str(state_dir)) is None


def test_name_not_served(host):
    assert host.problem(name="kimi-k2-5") == "the host does not serve kimi-k2-5"


def test_empty_state_serves_nothing(tmp_path):
    assert host_state.up_to_date_problem(host_state.empty_state(), NAME, FINGERPRINT, str(tmp_path)) \
        == "the host does not serve %s" % NAME


def test_another_model_also_served(host, tmp_path):
    other_dir = tmp_path / "kimi"
    other_dir.mkdir()
    host.state = host_state.record(host.state, entry(other_dir, host.venv, name="kimi-k2-5", repo_id="nvidia/Kimi-K2.5",
                                                     port=8001))
    calls = []
    assert host.problem(calls=calls) == "the host also serves kimi-k2-5"
    assert calls == []
    # Several models (vllm_models): each is checked on its own, the others beside it do not matter.
    assert host_state.up_to_date_problem(host.state, NAME, FINGERPRINT, str(host.unit_dir), alone=False) is None
    assert host_state.up_to_date_problem(host.state, "kimi-k2-5", FINGERPRINT, str(host.unit_dir), alone=False) \
        == "its record has no fingerprint (recorded by an older release)"


def test_no_fingerprint_recorded(tmp_path):
    old = Host(tmp_path, with_fingerprint=False)
    assert "fingerprint" not in old.state["models"][NAME]
    assert old.problem() == "its record has no fingerprint (recorded by an older release)"


def test_another_fingerprint(host):
    assert host.problem(fingerprint="0" * 64) == \
        "the desired state, the variables or the collection changed since it was recorded"


@pytest.mark.parametrize("how", ["edited", "deleted", "appended to"])
def test_unit_file_changed(host, how):
    if how == "edited":
        host.unit_file.write_text(UNIT_TEXT.replace("--tensor-parallel-size 4", "--tensor-parallel-size 8"))
    elif how == "deleted":
        host.unit_file.unlink()
    else:
        host.unit_file.write_text(UNIT_TEXT + "Environment=X=1\n")
    calls = []
    assert host.problem(calls=calls) == "%s is not the unit file the rollout wrote" % host.unit_file
    assert calls == []


def test_venv_vllm_missing(host):
    (host.venv / "bin" / "vllm").unlink()
    assert host.problem() == "its vLLM venv %s is missing" % host.venv


def test_venv_missing_altogether(host):
    shutil.rmtree(str(host.venv))
    assert host.problem() == "its vLLM venv %s is missing" % host.venv


def test_model_dir_missing(host):
    shutil.rmtree(str(host.model_dir))
    calls = []
    assert host.problem(calls=calls) == "its model directory %s is missing" % host.model_dir
    assert calls == []


def test_unit_not_active(host):
    calls = []
    assert host.problem(active=False, calls=calls) == "%s is not active" % UNIT
    assert calls == [("unit_active", UNIT)]  # the hub is not asked


def test_revision_names_another_commit(host):
    why = host.problem(commit=OTHER_COMMIT)
    assert why == "%s@main now names %s, not the served %s" % (REPO_ID, OTHER_COMMIT[:12], COMMIT[:12])


def test_commit_cannot_be_told(host):
    why = host.problem(commit=hub.HubError("http://127.0.0.1:1/api/models/x answered 503"))
    assert why == "cannot tell what %s@main names now (http://127.0.0.1:1/api/models/x answered 503)" % REPO_ID


def test_any_failure_of_commit_now_means_cannot_tell(host):
    assert host.problem(commit=OSError("network unreachable")).startswith("cannot tell what %s@main names now" % REPO_ID)


@pytest.mark.parametrize("case", ["fingerprint", "unit file", "venv", "model dir", "inactive"])
def test_cheap_checks_come_first(host, case):
    """Each earlier check that fails stops there: no unit probe or hub request after it."""
    fingerprint, active = FINGERPRINT, True
    if case == "fingerprint":
        fingerprint = "1" * 64
    elif case == "unit file":
        host.unit_file.write_text("edited\n")
    elif case == "venv":
        (host.venv / "bin" / "vllm").unlink()
    elif case == "model dir":
        shutil.rmtree(str(host.model_dir))
    else:
        active = False
    calls = []
    assert host.problem(fingerprint=fingerprint, active=active, commit=OTHER_COMMIT, calls=calls) is not None
    assert [call for call in calls if call[0] == "commit_now"] == []
    if case != "inactive":
        assert calls == []


def test_missing_unit_file_is_noticed_without_recorded_sha1(tmp_path):
    old = Host(tmp_path, with_unit_sha1=False)
    old.unit_file.unlink()
    assert old.problem() is not None


# ----------------------------------------------------------------------------- resolve_commit_http

class FakeHub:
    """A real HTTP server on 127.0.0.1 answering GET /api/models/<repo>/revision/<rev> from `routes`
    (path -> (status, body)); it notes every request's path and headers."""

    def __init__(self):
        self.routes = {}
        self.requests = []
        hub_ = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                hub_.requests.append({"path": self.path, "headers": dict(self.headers)})
                status, body = hub_.routes.get(self.path, (404, {"error": "Repository not found"}))
                data = json.dumps(body).encode() if not isinstance(body, bytes) else body
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.endpoint = "http://127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def route(self, repo_id, revision, status, body):
        self.routes["/api/models/%s/revision/%s" % (repo_id, revision)] = (status, body)

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def fake_hub():
    server = FakeHub()
    server.route(REPO_ID, "main", 200, {"id": REPO_ID, "sha": COMMIT, "siblings": []})
    server.route(REPO_ID, "v1.0", 200, {"id": REPO_ID, "sha": OTHER_COMMIT})
    server.route(REPO_ID, "refs%2Fpr%2F1", 200, {"sha": OTHER_COMMIT})
    server.route(REPO_ID, "nosha", 200, {"id": REPO_ID})
    server.route(REPO_ID, "badsha", 200, {"sha": "main"})
    server.route(REPO_ID, "notjson", 200, b"<html>hi</html>")
    server.route(REPO_ID, "boom", 500, {"error": "internal"})
    yield server
    server.close()


def test_branch_resolves_to_the_sha(fake_hub):
    assert hub.resolve_commit_http(fake_hub.endpoint, REPO_ID, "main") == COMMIT
    assert hub.resolve_commit_http(fake_hub.endpoint + "/", REPO_ID, "v1.0") == OTHER_COMMIT
    expected = ["/api/models/%s/revision/main" % REPO_ID, "/api/models/%s/revision/v1.0" % REPO_ID]
    assert [r["path"] for r in fake_hub.requests] == expected
    assert all("Authorization" not in r["headers"] for r in fake_hub.requests)


def test_revision_with_a_slash_is_quoted(fake_hub):
    assert hub.resolve_commit_http(fake_hub.endpoint, REPO_ID, "refs/pr/1") == OTHER_COMMIT
    assert fake_hub.requests[0]["path"] == "/api/models/%s/revision/refs%%2Fpr%%2F1" % REPO_ID


def test_a_commit_needs_no_request(fake_hub):
    assert hub.resolve_commit_http(fake_hub.endpoint, REPO_ID, OTHER_COMMIT, token="hf_x") == OTHER_COMMIT
    assert fake_hub.requests == []


def test_token_goes_in_the_header_only(fake_hub):
    token = "hf_SeCrEtToKeN123"
    assert hub.resolve_commit_http(fake_hub.endpoint, REPO_ID, "main", token=token) == COMMIT
    (request,) = fake_hub.requests
    assert request["headers"].get("Authorization") == "Bearer " + token
    assert token not in request["path"]


def test_404_is_a_hub_error(fake_hub):
    with pytest.raises(hub.HubError) as raised:
        hub.resolve_commit_http(fake_hub.endpoint, REPO_ID, "no-such-branch", token="hf_tok404")
    message = str(raised.value)
    assert "answered 404" in message
    assert "%s/api/models/%s/revision/no-such-branch" % (fake_hub.endpoint, REPO_ID) in message
    assert "hf_tok404" not in message


def test_500_is_a_hub_error(fake_hub):
    with pytest.raises(hub.HubError, match="answered 500"):
        hub.resolve_commit_http(fake_hub.endpoint, REPO_ID, "boom")


@pytest.mark.parametrize("revision", ["nosha", "badsha", "notjson"])
def test_an_answer_without_a_commit_sha_is_a_hub_error(fake_hub, revision):
    with pytest.raises(hub.HubError) as raised:
        hub.resolve_commit_http(fake_hub.endpoint, REPO_ID, revision)
    assert "/revision/%s" % revision in str(raised.value)


def test_a_closed_port_is_a_hub_error(fake_hub):
    endpoint = fake_hub.endpoint
    fake_hub.close()
    with pytest.raises(hub.HubError) as raised:
        hub.resolve_commit_http(endpoint, REPO_ID, "main", timeout=5)
    assert str(raised.value).startswith("%s/api/models/%s/revision/main: " % (endpoint, REPO_ID))


def test_a_bad_repo_id_is_refused_before_any_request(fake_hub):
    with pytest.raises(hub.HubError, match="ORG/NAME"):
        hub.resolve_commit_http(fake_hub.endpoint, "../etc", "main")
    assert fake_hub.requests == []


def test_the_password_of_an_endpoint_with_a_port_is_never_shown(fake_hub):
    endpoint = "http://mirror-user:S3cretPw@127.0.0.1:%d" % fake_hub.port
    try:
        hub.resolve_commit_http(endpoint, REPO_ID, "no-such-branch", timeout=5)
    except hub.HubError as exc:
        assert "S3cretPw" not in str(exc) and "mirror-user" not in str(exc)
    else:
        pytest.fail("the branch does not exist on this hub")


def test_the_password_of_an_endpoint_without_a_port_is_never_shown():
    with pytest.raises(hub.HubError) as raised:
        hub.resolve_commit_http("http://mirror-user:S3cretPw@127.0.0.1", REPO_ID, "main", timeout=5)
    assert "S3cretPw" not in str(raised.value)


# ----------------------------------------------------------------------------- fingerprint, code_digest

INPUTS = {
    "vllm_model": {"name": NAME, "repo_id": REPO_ID, "revision": "main", "served_model_name": "minimax-m2.5",
                   "port": 8000, "max_model_len": None, "extra_args": ["--enable-prefix-caching"]},
    "rollout_manage_vllm": True,
    "vllm_install": ["vllm", "0.33.0", None, None, None, "uv"],
    "rollout": ["", 2, "vllm", "vllm", "/var/lib/llmops-vllm", "/etc/systemd/system", "/var/lib/llmops-vllm/models",
                "", "hf_token", "", 2, 1800, 65536],
}
KEY = "a-hosts-fingerprint-key"  # the content of /etc/llmops-vllm/fingerprint.key (roles/rollout/tasks/fastpath.yml)


def reordered(value):
    """The same document with every mapping's keys in reverse order."""
    if isinstance(value, dict):
        return dict((key, reordered(value[key])) for key in reversed(list(value)))
    if isinstance(value, list):
        return [reordered(item) for item in value]
    return value


def test_fingerprint_is_stable_whatever_the_key_order():
    again = reordered(json.loads(json.dumps(INPUTS)))
    assert list(again) != list(INPUTS) and list(again["vllm_model"]) != list(INPUTS["vllm_model"])
    first = host_state_filter.fingerprint(INPUTS, KEY)
    assert re.match(r"^[0-9a-f]{64}$", first)
    assert host_state_filter.fingerprint(again, KEY) == first
    assert host_state_filter.fingerprint(json.loads(json.dumps(INPUTS)), KEY) == first


def _changed(path, value):
    inputs = json.loads(json.dumps(INPUTS))
    target = inputs
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return inputs


CHANGES = {
    "revision": (("vllm_model", "revision"), "v1.0"),
    "port as a string": (("vllm_model", "port"), "8000"),
    "null to empty": (("vllm_model", "max_model_len"), ""),
    "extra arg": (("vllm_model", "extra_args"), ["--enable-prefix-caching", "--enforce-eager"]),
    "model key dropped": (("vllm_model", "extra_args"), KeyError),
    "manage vllm": (("rollout_manage_vllm",), False),
    "vllm version": (("vllm_install", 1), "0.33.1"),
    "null in install list": (("vllm_install", 2), "/opt/venvs"),
    "hub token": (("rollout", 8), "hf_other"),
    "ready timeout": (("rollout", 11), 1801),
    "new input": (("serve_extra",), None),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_fingerprint_differs_when_any_input_differs(change):
    path, value = CHANGES[change]
    assert host_state_filter.fingerprint(_changed(path, value), KEY) != host_state_filter.fingerprint(INPUTS, KEY)


def test_fingerprint_is_a_filter():
    assert host_state_filter.FilterModule().filters()["fingerprint"] is host_state_filter.fingerprint


def code_digest(root):
    """code_digest() of `root` as it is on disk now (it caches one answer per process: drop it first)."""
    host_state_filter.code_digest.cache_clear()
    try:
        return host_state_filter.code_digest(str(root))
    finally:
        host_state_filter.code_digest.cache_clear()


@pytest.fixture
def tree(tmp_path):
    """A copy of the collection's layout with a few files of each kind."""
    root = tmp_path / "collection"
    files = {
        "roles/rollout/tasks/main.yml": "- name: a\n  ansible.builtin.debug: {msg: hi}\n",
        "roles/serve/templates/vllm.service.j2": "[Service]\nExecStart={{ x }}\n",
        "roles/serve/files/wait-ready": "#!/usr/bin/env python3\nprint('ready')\n",
        "roles/serve/README.md": "# serve\n",
        "plugins/filter/host_state.py": "X = 1\n",
        "plugins/module_utils/hub.py": "Y = 2\n",
        "plugins/filter/__pycache__/host_state.cpython-311.pyc": "\x00compiled",
        "plugins/filter/__pycache__/stray.py": "Z = 3\n",
        "playbooks/rollout.yml": "- hosts: all\n",
        "tests/unit/test_x.py": "def test(): pass\n",
        "README.md": "# collection\n",
        "galaxy.yml": "namespace: llmops\n",
    }
    for relpath, text in files.items():
        (root / relpath).parent.mkdir(parents=True, exist_ok=True)
        (root / relpath).write_text(text)
    return root


def test_code_digest_is_stable(tree, tmp_path):
    first = code_digest(tree)
    assert re.match(r"^[0-9a-f]{64}$", first)
    assert code_digest(tree) == first
    copy = tmp_path / "copy"
    shutil.copytree(str(tree), str(copy))
    assert code_digest(copy) == first  # paths are relative to the root


@pytest.mark.parametrize("relpath", ["roles/rollout/tasks/main.yml", "roles/serve/templates/vllm.service.j2",
                                     "plugins/filter/host_state.py", "plugins/module_utils/hub.py",
                                     "playbooks/rollout.yml"])
def test_code_digest_changes_with_code(tree, relpath):
    before = code_digest(tree)
    with open(str(tree / relpath), "a") as handle:
        handle.write("# edited\n")
    assert code_digest(tree) != before


@pytest.mark.parametrize("relpath", ["roles/rollout/tasks/extra.yml", "plugins/modules/new_module.py",
                                     "playbooks/other.yaml"])
def test_code_digest_changes_with_a_new_code_file(tree, relpath):
    before = code_digest(tree)
    (tree / relpath).parent.mkdir(parents=True, exist_ok=True)
    (tree / relpath).write_text("# new\n")
    assert code_digest(tree) != before


def test_code_digest_changes_when_a_file_moves(tree):
    before = code_digest(tree)
    (tree / "roles/rollout/tasks/main.yml").rename(tree / "roles/rollout/tasks/other.yml")
    assert code_digest(tree) != before


@pytest.mark.parametrize("relpath", ["README.md", "galaxy.yml", "tests/unit/test_x.py", "tests/unit/new.yml",
                                     "roles/serve/README.md", "plugins/filter/__pycache__/host_state.cpython-311.pyc",
                                     "plugins/filter/__pycache__/stray.py", "roles/rollout/__pycache__/x.py"])
def test_code_digest_ignores_what_is_not_code(tree, relpath):
    before = code_digest(tree)
    (tree / relpath).parent.mkdir(parents=True, exist_ok=True)
    with open(str(tree / relpath), "a") as handle:
        handle.write("# edited\n")
    assert code_digest(tree) == before


def test_code_digest_changes_with_a_role_file_the_host_gets(tree):
    before = code_digest(tree)
    with open(str(tree / "roles/serve/files/wait-ready"), "a") as handle:
        handle.write("print('changed')\n")
    assert code_digest(tree) != before


def test_the_collection_has_helpers_without_a_code_suffix():
    """Why the test above matters: the real serve role ships such files to the host."""
    helpers = sorted(p.name for p in (ROOT / "roles" / "serve" / "files").iterdir())
    assert "wait-ready" in helpers
    assert not any(name.endswith((".py", ".yml", ".yaml", ".j2")) for name in helpers)


# ----------------------------------------------------------------------------- every role option decided

# Options deliberately not part of the fingerprint, and why.
NOT_FINGERPRINTED = {
    "rollout_report_dir": "where reports go on the controller, not host state",
    "rollout_benchmark": "the benchmark gate runs only when something changes",
    "rollout_benchmark_min_ratio": "the benchmark gate runs only when something changes",
    "rollout_benchmark_at_concurrency": "the benchmark gate runs only when something changes",
    "rollout_force": "decides whether to check, not what results",
    "rollout_lock": "serialises runs; the lock is released at the end and leaves nothing on the host",
    "rollout_lock_holder": "who holds the lock during a run (each run its own), not what the run leaves",
    "rollout_lock_lease_s": "how long the lock holds without a renewal, not what the run leaves",
    "rollout_lock_timeout": "how long a run waits for another run's lock, not what it leaves",
    "rollout_allow_outage": "whether a drain may take the last serving server; only a change drains",
    "rollout_benchmark_baseline_max_age": "the benchmark gate runs only when something changes",
    "rollout_benchmark_allow_no_baseline": "the benchmark gate runs only when something changes",
    "rollout_takeover": "a server taken over is never the desired state itself; only a change takes one over",
    "rollout_takeover_name": "a server taken over is never the desired state itself; only a change takes one over",
    "rollout_takeover_hardening": "a server taken over is never the desired state itself; only a change takes one over",
    "rollout_takeover_env_dir": "a server taken over is never the desired state itself; only a change takes one over",
    "rollout_parser_probes": "the readiness gate's probes run only when something changes; they change nothing",
    "rollout_set": "the rest of vllm_models: each model's fingerprint is its own, so a change to one never restarts another",
    "rollout_gpu_health_waive": "the preflight runs only when something changes; the fast path restarts nothing",
    "rollout_prometheus_sd_dir": "the monitoring hand-off writes on the Prometheus host, not on this one",
    "rollout_prometheus_host": "the monitoring hand-off writes on the Prometheus host, not on this one",
    "rollout_prometheus_rules_dir": "the monitoring hand-off writes on the Prometheus host, not on this one",
    "rollout_prometheus_promtool": "the monitoring hand-off writes on the Prometheus host, not on this one",
    "rollout_canary": "the canary soak runs only when something changes; it changes nothing",
    "rollout_soak_seconds": "the canary soak runs only when something changes; it changes nothing",
    "rollout_soak_min_requests": "the canary soak runs only when something changes; it changes nothing",
    "rollout_soak_max_error_rate": "the canary soak runs only when something changes; it changes nothing",
    "rollout_soak_max_ttft_p99_ratio": "the canary soak runs only when something changes; it changes nothing",
    "rollout_soak_max_ttft_p99_s": "the canary soak runs only when something changes; it changes nothing",
    "rollout_soak_baseline_url": "the canary soak runs only when something changes; it changes nothing",
    "vllm_install_timeout": "how long an install may take, not what it installs",
    "vllm_install_poll_interval": "how often progress is printed",
}
SPECS = [ROOT / "roles" / "rollout" / "meta" / "argument_specs.yml",
         ROOT / "roles" / "vllm_install" / "meta" / "argument_specs.yml"]


def role_options(spec_path):
    spec = yaml.safe_load(Path(spec_path).read_text())
    return sorted(spec["argument_specs"]["main"]["options"])


def fingerprint_inputs_text(vars_path):
    """The YAML text of __rollout_fingerprint_inputs (keys and values), as the role's vars define it."""
    document = yaml.safe_load(Path(vars_path).read_text())
    return yaml.safe_dump(document["__rollout_fingerprint_inputs"], default_flow_style=False)


def undecided(spec_paths, vars_path, left_out):
    text = fingerprint_inputs_text(vars_path)
    return ["%s (%s)" % (option, os.path.relpath(str(spec), str(ROOT)))
            for spec in spec_paths for option in role_options(spec)
            if option not in left_out and not re.search(r"(?<![\w.])%s\b" % re.escape(option), text)]


def test_every_role_option_is_fingerprinted_or_left_out_on_purpose():
    assert undecided(SPECS, ROOT / "roles" / "rollout" / "vars" / "main.yml", NOT_FINGERPRINTED) == []


def test_the_options_left_out_exist_and_are_really_left_out():
    options = set(role_options(SPECS[0])) | set(role_options(SPECS[1]))
    text = fingerprint_inputs_text(ROOT / "roles" / "rollout" / "vars" / "main.yml")
    assert sorted(set(NOT_FINGERPRINTED) - options) == []
    assert [o for o in NOT_FINGERPRINTED if re.search(r"(?<![\w.])%s\b" % re.escape(o), text)] == []
    assert re.search(r"(?<![\w.])vllm_model\b", text)
    assert len(options) >= 30


def test_the_completeness_check_notices_a_new_option(tmp_path):
    spec = tmp_path / "argument_specs.yml"
    spec.write_text(yaml.safe_dump({"argument_specs": {"main": {"options": {
        "rollout_venv": {"type": "str"}, "rollout_benchmark": {"type": "bool"},
        "rollout_new_knob": {"type": "int"}, "rollout_keep": {"type": "int"}}}}}))
    variables = tmp_path / "main.yml"
    variables.write_text(yaml.safe_dump({"other": "{{ rollout_keep }}", "__rollout_fingerprint_inputs": {
        "rollout": ["{{ rollout_venv }}", "{{ rollout_keep_versions }}"]}}))
    names = [u.split(" ")[0] for u in undecided([spec], variables, NOT_FINGERPRINTED)]
    assert names == ["rollout_keep", "rollout_new_knob"]


# ----------------------------------------------------------------------------- vllm_state action=verify

def write_fake_systemctl(bin_dir, active_units, log):
    """systemd stand-in on PATH: `systemctl is-active --quiet UNIT` succeeds for `active_units` only."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "systemctl"
    script.write_text("#!/bin/sh\necho \"$*\" >> %s\n[ \"$1\" = is-active ] || exit 3\nfor unit in %s; do\n"
                      "  [ \"$3\" = \"$unit\" ] && exit 0\ndone\nexit 3\n" % (log, " ".join(active_units)))
    script.chmod(0o755)


def run_verify(tmp_path, label, module_args, active_units=(UNIT,)):
    """One vllm_state action=verify task in a play on localhost; returns its registered result."""
    work = tmp_path / label
    work.mkdir()
    out = work / "result.json"
    playbook = work / "play.yml"
    playbook.write_text(json.dumps([{
        "hosts": "localhost", "gather_facts": False,
        "tasks": [
            {"name": "Verify", "llmops.vllm.vllm_state": dict(module_args, action="verify"), "register": "verified",
             "ignore_errors": True},
            {"name": "Write the result",
             "ansible.builtin.copy": {"content": "{{ verified | to_nice_json }}", "dest": str(out)}},
        ]}]))
    systemctl_log = work / "systemctl.log"
    write_fake_systemctl(work / "bin", active_units, systemctl_log)
    env = {
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "PATH": "%s:%s:/usr/bin:/bin" % (work / "bin", Path(sys.executable).parent),
        "HOME": str(tmp_path),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"),
        "ANSIBLE_NOCOLOR": "1",
        "LANG": "C.UTF-8",
    }
    argv = [str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local",
            "-e", "ansible_python_interpreter=%s" % sys.executable, str(playbook)]
    completed = subprocess.run(argv, cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=300, check=False)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    result = json.loads(out.read_text())
    assert not result.get("failed"), result
    ignored = ("changed", "failed", "invocation", "warnings")
    VllmStateResult.model_validate({k: v for k, v in result.items() if k not in ignored})
    result["_stdout"] = completed.stdout + completed.stderr
    result["_systemctl"] = systemctl_log.read_text() if systemctl_log.exists() else ""
    return result


@pytest.fixture
def served(tmp_path, fake_hub):
    """A host in tmp_path whose state file records it, and the module arguments that verify it."""
    host = Host(tmp_path / "host")
    state_dir = tmp_path / "host" / "state"
    state_dir.mkdir()
    host_state.save(host_state.state_path(str(state_dir)), host.state)
    args = {"state_dir": str(state_dir), "name": NAME, "fingerprint": FINGERPRINT, "unit_dir": str(host.unit_dir),
            "hub_endpoint": fake_hub.endpoint, "hub_token": "hf_PlayToken42"}
    return host, args


@pytest.mark.ansible
def test_verify_up_to_date(tmp_path, served, fake_hub):
    host, args = served
    state_text = (Path(args["state_dir"]) / "state.json").read_text()
    result = run_verify(tmp_path, "ok", args)
    assert result["up_to_date"] is True and result["why"] == "", result
    assert result["changed"] is False
    assert result["current"]["name"] == NAME
    assert "is-active --quiet %s" % UNIT in result["_systemctl"]
    (request,) = fake_hub.requests  # the branch was resolved once, with the token in its header
    assert request["path"] == "/api/models/%s/revision/main" % REPO_ID
    assert request["headers"]["Authorization"] == "Bearer hf_PlayToken42"
    assert "hf_PlayToken42" not in result["_stdout"] and "hf_PlayToken42" not in json.dumps(result)
    assert (Path(args["state_dir"]) / "state.json").read_text() == state_text  # read-only


@pytest.mark.ansible
def test_verify_unit_file_edited(tmp_path, served, fake_hub):
    host, args = served
    host.unit_file.write_text(UNIT_TEXT + "Environment=VLLM_LOGGING_LEVEL=DEBUG\n")
    result = run_verify(tmp_path, "edited", args)
    assert result["up_to_date"] is False
    assert result["why"] == "%s is not the unit file the rollout wrote" % host.unit_file
    assert fake_hub.requests == [] and result["_systemctl"] == ""


@pytest.mark.ansible
def test_verify_revision_moved_and_unit_inactive(tmp_path, served, fake_hub):
    host, args = served
    fake_hub.route(REPO_ID, "main", 200, {"sha": OTHER_COMMIT})
    moved = run_verify(tmp_path, "moved", args)
    assert moved["up_to_date"] is False
    assert moved["why"] == "%s@main now names %s, not the served %s" % (REPO_ID, OTHER_COMMIT[:12], COMMIT[:12])
    inactive = run_verify(tmp_path, "inactive", args, active_units=())
    assert inactive["up_to_date"] is False and inactive["why"] == "%s is not active" % UNIT
    assert len(fake_hub.requests) == 1  # only the first run got that far


@pytest.mark.ansible
def test_verify_missing_state_file(tmp_path, fake_hub):
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    result = run_verify(tmp_path, "missing", {"state_dir": str(state_dir), "name": NAME, "fingerprint": FINGERPRINT,
                                              "unit_dir": str(tmp_path), "hub_endpoint": fake_hub.endpoint})
    assert result["up_to_date"] is False
    assert result["why"] == "the host does not serve %s" % NAME and "does not serve" in result["why"]
    assert result["models"] == [] and result["current"] is None
    assert fake_hub.requests == [] and result["_systemctl"] == ""


VERIFY_WRITES = ("BUG: action=verify is documented read-only, but StateFile.run() treats every action but read as a "
                 "write: it takes the lock (lock() creates a missing state_dir, mode 0755), serializes the state and "
                 "writes state.json whenever its text differs - a missing file becomes an empty schema-1 state "
                 "(changed=true), a schema-0 file is rewritten as schema 1")


@pytest.mark.ansible
def test_verify_writes_no_state_file(tmp_path):
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    result = run_verify(tmp_path, "nowrite", {"state_dir": str(state_dir), "name": NAME, "fingerprint": FINGERPRINT,
                                              "unit_dir": str(tmp_path)})
    assert "does not serve" in result["why"]
    assert sorted(os.listdir(str(state_dir))) == [] and result["changed"] is False


@pytest.mark.ansible
def test_verify_creates_no_state_dir(tmp_path):
    state_dir = tmp_path / "no-such-dir"
    result = run_verify(tmp_path, "fresh", {"state_dir": str(state_dir), "name": NAME, "fingerprint": FINGERPRINT,
                                            "unit_dir": str(tmp_path)})
    assert result["up_to_date"] is False and "does not serve" in result["why"]
    assert not state_dir.exists()


@pytest.mark.ansible
def test_verify_leaves_a_schema0_file_alone(tmp_path, served):
    host, args = served
    legacy = dict(host.state["models"][NAME])
    legacy.pop("fingerprint")
    text = json.dumps({"schema": 1, "current": legacy, "previous": None, "history": []}, indent=4, sort_keys=True) + "\n"
    state_file = Path(args["state_dir"]) / "state.json"
    state_file.write_text(text)
    result = run_verify(tmp_path, "legacy", dict(args, hub_endpoint="http://127.0.0.1:1"))
    assert result["migrated"] is True and result["why"].startswith("its record has no fingerprint")
    assert state_file.read_text() == text and result["changed"] is False
