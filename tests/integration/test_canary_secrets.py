# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Canary secrets (issue 39, "Secrets in artifacts"): one secret seeded at every way a secret enters a run -
a Vault-encrypted variable, -e variables (key=value and JSON), a hub endpoint's user:password@, the
host's environment (HF_TOKEN, HF_ENDPOINT with credentials; the host is localhost, so it is the CLI's
own environment) and the Vault password - then the real CLI, at -vvv, on localhost with a local
connection: `llmops-vllm apply --snapshot` (the run and its snapshot preview) and `llmops-vllm diff
--offline` from that snapshot. Every file they left (the runner's artifacts: job_events, stdout,
command, summary.json; the snapshot; the host's files under the temporary root) and everything they
printed is searched for every canary; the snapshot is 0600.

The play is a stand-in for the rollout that runs the rollout's real parts that take these secrets
on a host without vLLM: the fast path (the fingerprint key, the keyed fingerprint over inputs with the
API key, vllm_state verify with the hub's endpoint and token), the rollout's own facts task (copied
from playbooks/rollout.yml) and the hub read of the preflight (hf_model through host_read, endpoint
with credentials, against a stand-in hub that knows no model)."""
import http.server
import json
import os
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import quote

import pytest
import yaml

pytestmark = pytest.mark.ansible

ROOT = Path(__file__).resolve().parents[2]
CLI = Path(sys.executable).parent / "llmops-vllm"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
CANARIES = {
    "vault": "CanaryVaultApiKey-7c1e",
    "vault_password": "CanaryVaultPassword-1f0b",
    "e_kv": "CanaryDashEToken-93ad",
    "e_json": "CanaryDashEJson-4be2",
    "e_plain": "CanaryDashEPlain-d310",  # a name no safety net takes for a secret
    "endpoint": "CanaryEndpointPw-5d7a/+=",  # '/', '+' and '=' percent-encoded in the URL
    "host_env": "CanaryHostEnvToken-0a9c",
    "host_env_endpoint": "CanaryHostEnvEndpointPw-6e31",
    "host_env_plain": "CanaryHostEnvPlain-8c44",  # likewise
}


class NoModels(http.server.BaseHTTPRequestHandler):
    """A hub that answers every request at once: no such repository."""

    def do_GET(self):  # noqa: N802 - the stdlib's name
        body = b'{"error": "Repository not found"}'
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_HEAD = do_GET  # noqa: N815

    def log_message(self, *args):
        pass


@pytest.fixture()
def hub_port():
    server = http.server.HTTPServer(("127.0.0.1", 0), NoModels)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_port
    server.shutdown()


def closed_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again: nothing listens there


def vault_value(password, value):
    from ansible.parsing.vault import VaultLib, VaultSecret
    text = VaultLib([("default", VaultSecret(password.encode()))]).encrypt(value).decode()
    return "!vault |\n" + "".join("            %s\n" % line for line in text.splitlines())


def gather_task():
    """The rollout's own facts task (playbooks/rollout.yml), as the stand-in play runs it."""
    play = yaml.safe_load((ROOT / "playbooks" / "rollout.yml").read_text())[0]
    block = next(task for task in play["tasks"] if "block" in task)["block"]
    return next(task for task in block if task.get("name") == "Gather the facts the full rollout needs")


def stand_in(tmp_path):
    play = [{
        "name": "A stand-in for the rollout on localhost: its parts that take secrets",
        "hosts": "vllm_servers",
        "gather_facts": False,
        "check_mode": "{{ rollout_preview | default(ansible_check_mode) | bool }}",
        "tasks": [
            {"name": "The rollout's fast path", "ansible.builtin.include_role": {"name": "llmops.vllm.rollout", "tasks_from": "fastpath.yml"}},
            gather_task(),
            {"name": "The preflight's hub read (the weights fit on disk)",
             "llmops.vllm.host_read": {"module": "llmops.vllm.hf_model", "args": {
                 "repo_id": "llmops-test/tiny", "revision": COMMIT, "models_root": str(tmp_path / "models"),
                 "endpoint": "{{ rollout_hub_endpoint }}", "token": "{{ rollout_hub_token }}"}},
             "check_mode": True, "ignore_errors": True},
        ],
    }]
    path = tmp_path / "stand-in.yml"
    path.write_text(yaml.safe_dump(play, sort_keys=False))
    return path


def inventory(tmp_path, endpoint):
    password = tmp_path / "vault-password"
    password.write_text(CANARIES["vault_password"] + "\n")
    password.chmod(0o600)
    root = tmp_path / "host"
    hosts = tmp_path / "inventory" / "hosts.yml"
    hosts.parent.mkdir()
    hosts.write_text("""all:
  children:
    vllm_servers:
      hosts:
        canaryhost:
          ansible_connection: local
          ansible_python_interpreter: {python}
          llmops_vllm_root: {root}
          rollout_state_dir: {root}/var/lib/llmops-vllm
          rollout_unit_dir: {root}/etc/systemd/system
          rollout_hub_endpoint: {endpoint}
          rollout_api_key: {vault}
          vllm_model:
            name: tiny
            repo_id: llmops-test/tiny
            revision: {commit}
""".format(python=sys.executable, root=root, endpoint=endpoint, commit=COMMIT,
           vault=vault_value(CANARIES["vault_password"], CANARIES["vault"])))
    return hosts.parent, password, root


def cli(tmp_path, *argv):
    port = closed_port()
    env = {"PATH": "%s:/usr/bin:/bin" % Path(sys.executable).parent, "HOME": str(tmp_path), "LANG": "C.UTF-8",
           "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"),
           # the host's environment: the host is localhost
           "HF_TOKEN": CANARIES["host_env"],
           "HF_ENDPOINT": "http://env-user:%s@127.0.0.1:%d" % (CANARIES["host_env_endpoint"], port),
           "MODEL_NOTES": CANARIES["host_env_plain"]}
    return subprocess.run([str(CLI), *map(str, argv)], capture_output=True, text=True, env=env, cwd=str(ROOT),
                          timeout=300, check=False)


def leaks(paths, printed):
    """(where, canary) for every canary found in a file under paths or in the printed output, as written,
    percent-encoded or JSON-escaped."""
    forms = dict((name, {value, quote(value, safe=""), json.dumps(value)[1:-1]}) for name, value in CANARIES.items())
    found = []
    texts = [("output of %s" % what, text) for what, text in printed]
    for top in paths:
        for path in sorted(Path(top).rglob("*")):
            if path.is_file():
                texts.append((str(path), path.read_bytes().decode("utf-8", "replace")))
    for where, text in texts:
        for name, variants in forms.items():
            if any(variant in text for variant in variants):
                found.append((where, name))
    return found


def test_issue39_canary_secrets_reach_no_artifact_snapshot_or_output(tmp_path, hub_port):
    endpoint = "http://hub-user:%s@127.0.0.1:%d/" % (quote(CANARIES["endpoint"], safe=""), hub_port)
    inv, password, root = inventory(tmp_path, endpoint)
    play, artifacts, snap = stand_in(tmp_path), tmp_path / "runs", tmp_path / "snapshot"
    common = ["-i", inv, "--playbook", play, "--vault-password-file", password, "--artifacts", artifacts, "--json", "-vvv",
              "-e", "rollout_hub_token=" + CANARIES["e_kv"], "-e", json.dumps({"canary_private_key": CANARIES["e_json"]}),
              "-e", "canary_note=" + CANARIES["e_plain"]]
    applied = cli(tmp_path, "apply", "--snapshot", snap, *common)
    assert applied.returncode == 0, applied.stdout[-3000:] + applied.stderr[-3000:]
    summary = json.loads(applied.stdout)
    assert summary["snapshot"]["hosts"] == ["canaryhost"], summary["snapshot"]
    offline = cli(tmp_path, "diff", "--offline", snap, *common)
    assert offline.returncode == 0, offline.stdout[-3000:] + offline.stderr[-3000:]
    assert json.loads(offline.stdout)["offline"]

    assert leaks([artifacts, snap, root], [("apply", applied.stdout + applied.stderr),
                                           ("diff --offline", offline.stdout + offline.stderr)]) == []
    # the secrets did reach the run: the hub read went to the endpoint (which knows no model) ...
    events = "".join(path.read_text() for path in artifacts.rglob("job_events/*.json"))
    assert "hub-user:********@127.0.0.1" in events
    # ... and the fingerprint is keyed with the host's key, a 0600 file, outside what a run keeps
    key = root / "etc" / "llmops-vllm" / "fingerprint.key"
    assert key.stat().st_mode & 0o777 == 0o600 and key.read_text().strip() not in events
    # the snapshot: 0600, without the host's environment, the endpoint's password masked where it is kept
    taken = snap / "canaryhost.json"
    assert taken.stat().st_mode & 0o777 == 0o600
    doc = json.loads(taken.read_text())
    setup = [read["result"] for read in doc["reads"].values() if read["module"] == "ansible.builtin.setup"]
    assert setup and all("ansible_env" not in result.get("ansible_facts", {}) for result in setup)
    assert any(read["args"].get("endpoint", "").startswith("http://hub-user:********@") for read in doc["reads"].values())
    # every summary.json is 0600 and the runner's command line names no -e value, only files that are gone
    for path in artifacts.rglob("summary.json"):
        assert path.stat().st_mode & 0o777 == 0o600
    for path in artifacts.rglob("command"):
        command = json.loads(path.read_text())["command"]
        values = [command[i + 1] for i, part in enumerate(command) if part == "-e"]
        assert values and all(re.match(r"^@/", value) and not os.path.exists(value[1:]) for value in values), command


FASTPATH_PLAY = """
- name: The rollout's fast path alone, on hosts that are all localhost
  hosts: all
  gather_facts: false
  tasks:
    - name: The fast path
      ansible.builtin.include_role:
        name: llmops.vllm.rollout
        tasks_from: fastpath.yml
    - name: The fingerprint it computed
      ansible.builtin.debug:
        var: rollout_fingerprint
"""


def test_issue39_the_fast_path_keys_the_fingerprint_with_a_root_only_key(tmp_path):
    """The real fast path (one ansible-playbook run, four inventory hosts that are all localhost): h1-h3 share a
    host root, so one key - made once, 0600, by whichever run came first; h2 differs from h1 only in its API
    key, h3 not at all; h4's root holds a key others may read, which is refused before anything is done."""
    shared, other = tmp_path / "shared", tmp_path / "other"
    (other / "etc" / "llmops-vllm").mkdir(parents=True)
    planted = other / "etc" / "llmops-vllm" / "fingerprint.key"
    planted.write_text("a key another user could read\n")
    planted.chmod(0o644)
    hosts = {"h1": (shared, "sk-first-api-key"), "h2": (shared, "sk-second-api-key"), "h3": (shared, "sk-first-api-key"),
             "h4": (other, "sk-first-api-key")}
    inv = {"all": {"vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                            "vllm_model": {"name": "tiny", "repo_id": "llmops-test/tiny", "revision": COMMIT}},
                   "hosts": dict((name, {"llmops_vllm_root": str(root), "rollout_state_dir": "%s/var/lib/llmops-vllm" % root,
                                         "rollout_unit_dir": "%s/etc/systemd/system" % root, "rollout_api_key": key})
                                 for name, (root, key) in hosts.items())}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inv))
    (tmp_path / "play.yml").write_text(FASTPATH_PLAY)
    env = {"PATH": "%s:/usr/bin:/bin" % Path(sys.executable).parent, "HOME": str(tmp_path), "LANG": "C.UTF-8",
           "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"), "ANSIBLE_NOCOLOR": "1"}
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"),
                           str(tmp_path / "play.yml")], capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=300, check=False)
    fingerprints = dict(re.findall(r"ok: \[(h\d)\] =>\s*\n\s*rollout_fingerprint: (\S+)", proc.stdout))
    key = shared / "etc" / "llmops-vllm" / "fingerprint.key"
    assert key.stat().st_mode & 0o777 == 0o600 and (shared / "etc" / "llmops-vllm").stat().st_mode & 0o777 == 0o700
    assert sorted(fingerprints) == ["h1", "h2", "h3"], proc.stdout[-3000:]
    assert all(re.match(r"^[0-9a-f]{64}$", value) for value in fingerprints.values())
    assert fingerprints["h1"] == fingerprints["h3"] != fingerprints["h2"]  # a new API key: the full rollout runs
    assert key.read_text().strip() not in proc.stdout
    assert "h4: %s is mode 0644, owner" % planted in proc.stdout and "expected a regular file, mode 0600" in proc.stdout
    assert planted.read_text() == "a key another user could read\n"
