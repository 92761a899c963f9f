# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llmops-vllm apply on localhost, through real ansible-runner runs: the summary, its artifacts,
the webhook (its URL from Ansible Vault, posted to a local HTTP server, never logged) and the exit
code of input the controller refuses. The rollouts themselves run on the sandbox (molecule)."""
import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytestmark = pytest.mark.ansible

ROOT = Path(__file__).resolve().parents[2]
CLI = Path(sys.executable).parent / "llmops-vllm"
TOKEN = "s3cr3t-hook-token-4711"


class Hook(http.server.BaseHTTPRequestHandler):
    received: list = []

    def do_POST(self):  # noqa: N802 - the stdlib's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Hook.received.append({"path": self.path, "headers": dict(self.headers), "body": json.loads(body)})
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture()
def hook():
    Hook.received = []
    server = http.server.HTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d/hooks/%s" % (server.server_port, TOKEN)
    server.shutdown()


def env(tmp_path):
    return {"PATH": "%s:/usr/bin:/bin" % Path(sys.executable).parent, "HOME": str(tmp_path), "LANG": "C.UTF-8",
            "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp")}


def vault_string(tmp_path, password_file, value, name):
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-vault"), "encrypt_string", "--vault-password-file",
                           str(password_file), "--name", name, "--", value],  # the value in argv is this test's fake secret
                          capture_output=True, text=True, env=env(tmp_path), check=True, timeout=120)
    return proc.stdout


def inventory(tmp_path, url):
    inv = tmp_path / "inventory"
    (inv / "group_vars" / "all").mkdir(parents=True)
    (inv / "hosts.yml").write_text(yaml_hosts())
    password = tmp_path / "vault-password"
    password.write_text("correct horse battery staple\n")
    password.chmod(0o600)
    (inv / "group_vars" / "all" / "webhook.yml").write_text(
        vault_string(tmp_path, password, url, "llmops_vllm_webhook_url")
        + "llmops_vllm_webhook_headers:\n  X-Pipeline: gitops-test\n")
    return inv, password


def yaml_hosts():
    return ("all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
            "      ansible_python_interpreter: %s\n" % sys.executable)


PLAY = """---
- name: A stand-in for the rollout on localhost (no model on this machine)
  hosts: all
  gather_facts: false
  tasks:
    - name: Fast path | nothing to do
      ansible.builtin.debug:
        msg: localhost serves what it should
"""


def test_apply_posts_its_summary_to_the_vault_webhook_and_never_logs_the_url(tmp_path, hook):
    inv, password = inventory(tmp_path, hook)
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    artifacts = tmp_path / "runs"
    proc = subprocess.run([str(CLI), "apply", "-i", str(inv), "--playbook", str(play), "--vault-password-file", str(password),
                           "--artifacts", str(artifacts), "--json"],
                          capture_output=True, text=True, env=env(tmp_path), cwd=str(tmp_path), timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["exit_code"] == 0 and summary["hosts"]["localhost"]["outcome"] == "unchanged"
    assert summary["webhook"] == {"posted": True, "error": None}
    assert len(Hook.received) == 1
    posted = Hook.received[0]
    assert posted["path"] == "/hooks/" + TOKEN and posted["headers"]["X-Pipeline"] == "gitops-test"
    assert posted["body"]["run_id"] == summary["run_id"] and posted["body"]["hosts"]["localhost"]["exit_code"] == 0
    # the runner's artifacts and the progress keep the run; the URL's token is in none of them
    assert (Path(summary["artifacts"]) / "summary.json").stat().st_mode & 0o777 == 0o600
    assert "localhost" in proc.stderr and TOKEN not in proc.stderr + proc.stdout
    for path in artifacts.rglob("*"):
        if path.is_file():
            assert TOKEN not in path.read_text(errors="replace"), path


def test_a_webhook_that_fails_is_a_warning_not_a_changed_outcome(tmp_path):
    inv, password = inventory(tmp_path, "http://127.0.0.1:9/hooks/" + TOKEN)  # nothing listens on the discard port
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    proc = subprocess.run([str(CLI), "apply", "-i", str(inv), "--playbook", str(play), "--vault-password-file", str(password),
                           "--artifacts", str(tmp_path / "runs"), "--json"],
                          capture_output=True, text=True, env=env(tmp_path), cwd=str(tmp_path), timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["webhook"]["posted"] is False
    assert "the webhook was not notified" in proc.stderr and TOKEN not in proc.stderr


@pytest.mark.parametrize("extra, message", [
    (['{"vllm_model": {"name": "Bad Name", "repo_id": "o/m", "revision": "main"}}'], "vllm_model.name"),
    (["@/nonexistent/model.yml"], "cannot read it"),
    (["justaword"], "expected key=value"),
])
def test_bad_input_exits_1_before_anything_runs(tmp_path, extra, message):
    (tmp_path / "inventory").mkdir()
    (tmp_path / "inventory" / "hosts.yml").write_text(yaml_hosts())
    argv = [str(CLI), "apply", "-i", str(tmp_path / "inventory"), "--artifacts", str(tmp_path / "runs"), "--json"]
    for value in extra:
        argv += ["-e", value]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env(tmp_path), cwd=str(tmp_path), timeout=300, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert message in json.loads(proc.stdout)["error"] and not (tmp_path / "runs").exists()  # nothing ran


def test_a_playbook_that_cannot_run_is_bad_input(tmp_path):
    (tmp_path / "inventory").mkdir()
    (tmp_path / "inventory" / "hosts.yml").write_text(yaml_hosts())
    proc = subprocess.run([str(CLI), "diff", "-i", str(tmp_path / "inventory"), "--playbook", "llmops.vllm.no_such_playbook",
                           "--artifacts", str(tmp_path / "runs"), "--json"],
                          capture_output=True, text=True, env=env(tmp_path), cwd=str(tmp_path), timeout=300, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["hosts"] == {} and "no_such_playbook" in summary["error"]
    assert os.path.isdir(summary["artifacts"])
