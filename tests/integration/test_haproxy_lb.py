# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The load-balancer steps against a real HAProxy (Debian's package) on loopback: playbooks/lb.yml renders and
validates its configuration from an inventory, and llmops.vllm.haproxy_server drains and enables servers through
the runtime API, through real ansible-playbook runs. The servers behind it are small HTTP servers that answer
like vLLM's API (GET /v1/models, POST /v1/completions with a configurable delay): what is tested is HAProxy's
routing, health checks, drain and enable; the live fleet test (test_fleet_live.py) puts real vLLM behind it."""

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
import yaml

from ansible_collections.llmops.vllm.plugins.filter.lb import haproxy_identifier, lb_address, lb_services, proxy_seats
from ansible_collections.llmops.vllm.plugins.module_utils import haproxy

pytestmark = pytest.mark.ansible

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
# host c's served name: one that vLLM accepts and that broke the configuration before issue 38
OTHER = 'org/other "v2"'


class FakeVllm(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, served, delay=0.0):
        super().__init__(("127.0.0.1", 0), Handler)
        self.served, self.delay, self.hits = served, delay, 0


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, body, status=200):
        # as vLLM's answers (Starlette's JSONResponse): UTF-8, no spaces
        data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.answer({"object": "list", "data": [{"id": self.server.served, "object": "model"}]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.hits += 1
        time.sleep(self.server.delay)
        if body.get("model") != self.server.served:
            return self.answer({"error": "model %s does not exist" % body.get("model")}, 404)
        return self.answer({"choices": [{"text": "port %d" % self.server.server_address[1]}]})


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ansible(tmp_path, argv, check=False):
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    proc = subprocess.run([str(BIN / "ansible-playbook"), *argv] + (["--check", "--diff"] if check else []), cwd=str(ROOT), env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    return proc


def server_task(tmp_path, lb, name, args, check=False):
    """One haproxy_server task on localhost; its registered result."""
    out = tmp_path / ("%s.json" % name)
    play = tmp_path / ("%s.yml" % name)
    play.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "Server", "llmops.vllm.haproxy_server": dict({"socket": str(lb.socket), "poll_interval": 0.2}, **args),
         "register": "r", "ignore_errors": True},
        {"name": "Write", "ansible.builtin.copy": {"content": "{{ r | to_nice_json }}", "dest": str(out)}, "check_mode": False, "diff": False},
    ]}]))
    proc = ansible(tmp_path, ["-i", "localhost,", "-c", "local", "-e", "ansible_python_interpreter=%s" % sys.executable, str(play)], check)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    result["_out"] = " ".join((proc.stdout + proc.stderr).split())
    return result


class Balancer:
    def __init__(self, tmp_path):
        if shutil.which("haproxy") is None:
            pytest.fail("haproxy is not installed: apt-get install haproxy (tools/run_tests.sh installs it)")
        self.tmp, self.port, self.socket = tmp_path, free_port(), tmp_path / "admin.sock"
        self.backends = {"a": FakeVllm("chat", delay=0.0), "b": FakeVllm("chat", delay=0.0), "c": FakeVllm(OTHER)}
        for server in self.backends.values():
            threading.Thread(target=server.serve_forever, daemon=True).start()
        inventory = tmp_path / "inventory"
        (inventory / "host_vars").mkdir(parents=True)
        hosts = {"a": "chat", "b": "chat", "c": OTHER}
        (inventory / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"vllm_servers": {"hosts": dict.fromkeys(hosts)}}}}))
        for host, served in hosts.items():
            (inventory / "host_vars" / ("%s.yml" % host)).write_text(yaml.safe_dump({
                "lb_address": "127.0.0.1", "vllm_model": {"name": "m-" + host, "served_model_name": served,
                                                          "port": self.backends[host].server_address[1]}}))
        self.config = tmp_path / "haproxy.cfg"
        self.extra = ["-e", json.dumps({"lb_backend": "haproxy", "lb_haproxy_config": str(self.config), "lb_haproxy_reload": False,
                                        "lb_haproxy_socket": str(self.socket), "lb_haproxy_bind": "127.0.0.1:%d" % self.port,
                                        "lb_haproxy_check_inter": "500ms", "lb_haproxy_check_rise": 1, "lb_haproxy_check_fall": 5,
                                        "ansible_python_interpreter": sys.executable})]
        self.inventory = inventory
        self.process = None

    def render(self, check=False):
        return ansible(self.tmp, ["-i", str(self.inventory), "-c", "local", str(ROOT / "playbooks" / "lb.yml")] + self.extra, check)

    def start(self):
        self.process = subprocess.Popen(["haproxy", "-db", "-f", str(self.config)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while not self.socket.exists():
            assert self.process.poll() is None, self.process.stdout.read().decode()
            assert time.monotonic() < deadline, "HAProxy made no runtime socket in 20 s"
            time.sleep(0.1)

    def complete(self, model="chat", timeout=30):
        request = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % self.port,
                                         data=json.dumps({"model": model, "prompt": "hi"}).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())["choices"][0]["text"]

    def stop(self):
        if self.process:
            self.process.kill()
            self.process.wait()
        for server in self.backends.values():
            server.shutdown()


@pytest.fixture
def lb(tmp_path):
    balancer = Balancer(tmp_path)
    yield balancer
    balancer.stop()


def test_services_from_the_inventory():
    hostvars = {
        "h1": {"vllm_model": {"name": "a", "served_model_name": "chat", "port": 8000}, "ansible_host": "10.0.0.1"},
        "h2": {"vllm_model": {"name": "a", "port": 8001}, "lb_address": "10.0.0.2"},
        "h3": {"vllm_models": [{"name": "b", "port": 8002}, {"name": "c", "served_model_name": "chat"}]},
        # a multi-node group: only its head serves the API
        "h4": {"vllm_model": {"name": "g", "group": ["h5", "h4"], "port": 9000}},
        "h5": {"vllm_model": {"name": "g", "group": ["h5", "h4"], "port": 9000}},
    }
    assert lb_services(hostvars, ["h1", "h2", "h3", "h4", "h5"]) == [
        {"name": "a", "backend": "vllm_a", "servers": [{"name": "h2", "address": "10.0.0.2", "port": 8001}]},
        {"name": "b", "backend": "vllm_b", "servers": [{"name": "h3", "address": "h3", "port": 8002}]},
        {"name": "chat", "backend": "vllm_chat", "servers": [
            {"name": "h1", "address": "10.0.0.1", "port": 8000}, {"name": "h3", "address": "h3", "port": 8000}]},
        {"name": "g", "backend": "vllm_g", "servers": [{"name": "h5", "address": "h5", "port": 9000}]},
    ]
    # a served name outside HAProxy's name characters: its sanitized name and a hash of the exact name (issue 38)
    assert haproxy_identifier("meta-llama/Llama 3").startswith("vllm_meta-llama_Llama_3_")
    # the soak's baseline and the rollout's own address come from the same rule as the servers above
    assert [lb_address(hostvars[h], h) for h in ("h1", "h2", "h3")] == ["10.0.0.1", "10.0.0.2", "h3"]
    assert lb_address({"lb_address": "10.0.0.9", "ansible_host": "10.0.0.1"}, "h9") == "10.0.0.9"


def test_admin_state_of_a_server_the_configuration_disabled():
    from ansible_collections.llmops.vllm.plugins.module_utils.haproxy import admin_state
    # `disabled` in the configuration: forced + config maintenance (5); set ready, the config bit stays (4) and it serves
    assert (admin_state(5), admin_state(4), admin_state(0), admin_state(8), admin_state(4 | 8)) == (
        "maint", "ready", "ready", "drain", "drain")


def test_host_proxy_seats_from_the_host_state():
    models = {
        "a": {"bind": "10.0.0.1", "port": 18000, "stable_port": 8000, "slot_ports": [18000, 28000]},
        "b": {"bind": "0.0.0.0", "port": 8001},  # served directly (swap stop-start): no seat
        "c": {"bind": "10.0.0.1", "port": 28002, "stable_port": 8002, "slot_ports": [18002, 28002]},
    }
    assert proxy_seats(models) == [{"port": 8000, "bind": "10.0.0.1", "slots": [18000, 28000], "active": 18000},
                                   {"port": 8002, "bind": "10.0.0.1", "slots": [18002, 28002], "active": 28002}]
    # the model a rollout replaces leaves; the new one's seat takes its port
    seat = {"port": 8000, "bind": "10.0.0.1", "slots": ["18000", "28000"], "active": "28000"}
    assert proxy_seats(models, ["a"], seat)[0] == {"port": 8000, "bind": "10.0.0.1", "slots": [18000, 28000], "active": 28000}
    assert [s["port"] for s in proxy_seats(models, ["a", "c"])] == []
    with pytest.raises(AnsibleFilterError, match="the active one among them"):
        proxy_seats(models, [], dict(seat, active=9999))


def test_config_routing_drain_and_enable(lb, tmp_path):
    preview = lb.render(check=True)
    assert preview.returncode == 0, preview.stdout + preview.stderr
    assert not lb.config.exists(), "check mode wrote the configuration"
    rendered = lb.render()
    assert rendered.returncode == 0, rendered.stdout + rendered.stderr
    text = lb.config.read_text()
    assert "backend vllm_chat" in text and "backend %s" % haproxy_identifier(OTHER) in text
    assert 'http-check expect string "\\"id\\":\\"chat\\""' in text
    again = lb.render()
    assert "changed=0" in again.stdout, again.stdout
    lb.start()

    # health checks: every server up; requests routed by their "model"
    up = server_task(tmp_path, lb, "up", {"backend": "vllm_chat", "server": "a", "state": "ready", "timeout": 20})
    assert up["after"]["status"] == "UP" and not up["changed"], up
    server_task(tmp_path, lb, "up-b", {"backend": "vllm_chat", "server": "b", "state": "ready", "timeout": 20})
    assert lb.complete(OTHER) == "port %d" % lb.backends["c"].server_address[1]
    chat_ports = {lb.complete() for _request in range(10)}
    assert chat_ports == {"port %d" % lb.backends[h].server_address[1] for h in ("a", "b")}

    # check mode: says what would change, changes nothing
    preview = server_task(tmp_path, lb, "drain-check", {"backend": "vllm_chat", "server": "a", "state": "drain"}, check=True)
    assert preview["changed"] and preview["after"]["state"] == "ready", preview
    assert "-state: ready" in preview["_out"] and "+state: drain" in preview["_out"]

    # a drain waits for the request in flight, which still gets its answer; then nothing new reaches a
    # long enough for ansible-playbook to start and read the server while they are in flight, on a loaded machine too
    lb.backends["a"].delay = lb.backends["b"].delay = 20.0
    answers = []
    in_flight = [threading.Thread(target=lambda: answers.append(lb.complete())) for _request in range(2)]
    for thread in in_flight:
        thread.start()
    time.sleep(0.5)
    drain = server_task(tmp_path, lb, "drain", {"backend": "vllm_chat", "server": "a", "state": "drain", "batch": ["a"]})
    for thread in in_flight:
        thread.join()
    assert drain["changed"] and drain["before"]["sessions"] >= 1 and drain["after"]["sessions"] == 0, drain
    assert drain["waited_s"] >= 0.5 and drain["serving_elsewhere"] == ["b"], drain
    assert len(answers) == 2
    lb.backends["a"].delay = lb.backends["b"].delay = 0.0
    hits = lb.backends["a"].hits
    assert {lb.complete() for _request in range(4)} == {"port %d" % lb.backends["b"].server_address[1]}
    assert lb.backends["a"].hits == hits

    # draining the last server that takes requests is refused, and changes nothing
    refused = server_task(tmp_path, lb, "refused", {"backend": "vllm_chat", "server": "b", "state": "drain", "batch": ["b"]})
    assert refused["failed"] and "would leave no server of vllm_chat taking requests" in refused["msg"], refused
    assert lb.complete() == "port %d" % lb.backends["b"].server_address[1]

    # enable waits for health checks; a server that is down times out with a clear message
    enable = server_task(tmp_path, lb, "enable", {"backend": "vllm_chat", "server": "a", "state": "ready"})
    assert enable["changed"] and enable["after"]["state"] == "ready" and enable["after"]["status"] == "UP", enable
    lb.backends["a"].shutdown()
    lb.backends["a"].server_close()
    down = server_task(tmp_path, lb, "down", {"backend": "vllm_chat", "server": "a", "state": "drain", "timeout": 1})
    assert not down.get("failed"), down
    deadline = time.monotonic() + 30
    while not haproxy.servers(str(lb.socket), "vllm_chat")["a"]["status"].startswith("DOWN"):
        assert time.monotonic() < deadline, "HAProxy did not mark the stopped server down in 30 s"
        time.sleep(0.2)
    late = server_task(tmp_path, lb, "late", {"backend": "vllm_chat", "server": "a", "state": "ready", "timeout": 2})
    assert late["failed"] and "still waits for health checks to pass" in late["msg"], late

    # a server or backend the configuration lacks: a drain warns, an enable fails naming what exists
    missing = server_task(tmp_path, lb, "missing", {"backend": "vllm_chat", "server": "x", "state": "drain", "missing": "warn"})
    assert not missing.get("failed") and "no server x in backend vllm_chat (it has a, b)" in missing["_out"], missing
    absent = server_task(tmp_path, lb, "absent", {"backend": "vllm_nope", "server": "a", "state": "ready"})
    assert absent["failed"] and "no backend vllm_nope" in absent["msg"], absent


def test_unreachable_socket_is_a_clear_error(tmp_path):
    class Nowhere:
        socket = tmp_path / "none.sock"
    result = server_task(tmp_path, Nowhere, "nowhere", {"backend": "vllm_chat", "server": "a", "state": "drain"})
    assert result["failed"] and "cannot reach HAProxy's runtime API at %s" % Nowhere.socket in result["msg"]


def test_health_checks_on_another_path(lb):
    """Servers behind an API key: /health, which wants status 200 (a configuration haproxy -c accepts)."""
    lb.extra += ["-e", "lb_haproxy_check_uri=/health"]
    rendered = lb.render()
    assert rendered.returncode == 0, rendered.stdout + rendered.stderr
    text = lb.config.read_text()
    assert "http-check send meth GET uri /health" in text and "http-check expect status 200" in text
    assert '"id"' not in text
