# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The HAProxy sinks against the real HAProxy (issue 38): role lb's templates rendered as the template module
renders them (Jinja, trim_blocks, the collection's filters), checked with ``haproxy -c`` and run on loopback.

Every served name a fleet may carry (quotes, backslashes, dollars, spaces, slashes, Unicode, names that sanitize
alike) gets a configuration HAProxy accepts, and a running HAProxy routes a request naming it to its own backend
only, whose health check (the served name in GET /v1/models) passes; a name or address that cannot be written is
refused before anything is. The backends are small HTTP servers that answer like vLLM (JSON as Starlette writes
it); tests/unit/test_haproxy_quoting.py holds the pure-Python side."""

import http.client
import importlib
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import jinja2
import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ansible_collections.llmops.vllm.plugins.module_utils import haproxy
from test_haproxy_lb import FakeVllm, free_port

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "roles" / "lb" / "templates"
# What vLLM accepts as a served name and broke lb.yml's configuration before issue 38
VLLM_NAMES = ['chat"v2', "a name with spaces", "org/chat", "org_chat"]
INJECTED = "x\n    http-request return status 200 content-type text/plain string pwned\n"
PIECES = list("\"'\\$#;/ {}!%_-.:@*aAz0") + ["${HOME}", "\\x41", "-i", "--", "é", "中", "\U0001F600", "org/chat", "org_chat"]
# Served names the sinks accept: no control character, not empty
NAMES = st.lists(st.one_of(st.sampled_from(PIECES), st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp"))),
                 min_size=1, max_size=6).map("".join)

pytestmark = pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy is not installed (apt-get install haproxy)")


def environment():
    """Jinja as the template module sets it up (trim_blocks), with ansible-core's filters and the collection's."""
    from ansible.plugins.filter.core import FilterModule as Core
    env = jinja2.Environment(trim_blocks=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    for name, function in Core().filters().items():
        env.filters[name] = env.filters["ansible.builtin." + name] = function
    for plugin in ("lb", "host_state"):
        module = importlib.import_module("ansible_collections.llmops.vllm.plugins.filter." + plugin)
        for name, function in module.FilterModule().filters().items():
            env.filters["llmops.vllm." + name] = function
    return env


ENV = environment()
DEFAULTS = yaml.safe_load((ROOT / "roles" / "lb" / "defaults" / "main.yml").read_text())


def render(template, **variables):
    return ENV.from_string((TEMPLATES / template).read_text()).render(dict(DEFAULTS, ansible_managed="Ansible managed", **variables))


@pytest.fixture(scope="module")
def pool():
    servers = [FakeVllm("") for _server in range(6)]
    for server in servers:
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield servers
    for server in servers:
        server.shutdown()
        server.server_close()


class Haproxy:
    """A configuration checked with haproxy -c, then HAProxy running it in the foreground."""

    def __init__(self, text):
        self.dir = Path(tempfile.mkdtemp(prefix="hx"))  # short: a unix socket's path has a limit
        self.config = self.dir / "haproxy.cfg"
        self.config.write_text(text)
        self.process = None

    def check(self):
        return subprocess.run(["haproxy", "-c", "-q", "-f", str(self.config)], capture_output=True, text=True, check=False)

    def __enter__(self):
        checked = self.check()
        if checked.returncode != 0:
            text = self.config.read_text()
            shutil.rmtree(self.dir, ignore_errors=True)
            raise AssertionError("haproxy -c refused the configuration: %s\n%s" % (checked.stdout + checked.stderr, text))
        self.process = subprocess.Popen(["haproxy", "-db", "-f", str(self.config)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        return self

    def __exit__(self, *exc):
        if self.process:
            self.process.kill()
            self.process.wait()
            self.process.stdout.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def wait(self, ready, what):
        deadline = time.monotonic() + 10
        while True:
            assert self.process.poll() is None, self.process.stdout.read().decode()
            try:
                if ready():
                    return
            except (OSError, haproxy.HaproxyError):  # not listening yet
                pass
            assert time.monotonic() < deadline, "HAProxy: %s within 10 s" % what
            time.sleep(0.02)


def fleet_config(names, servers, port, sock, check_uri="/v1/models"):
    services = [{"name": name, "servers": [{"name": "gpu-%d" % index, "address": "127.0.0.1", "port": servers[index].server_address[1]}]}
                for index, name in sorted(enumerate(names), key=lambda item: item[1])]
    return render("haproxy.cfg.j2", __lb_services=services, lb_haproxy_bind="127.0.0.1:%d" % port, lb_haproxy_socket=sock,
                  lb_haproxy_check_uri=check_uri, lb_haproxy_check_inter="100ms", lb_haproxy_check_rise=1, lb_haproxy_check_fall=1)


def post(port, model):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("POST", "/v1/completions", json.dumps({"model": model, "prompt": "hi"}, ensure_ascii=False).encode(),
                           {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def assert_routed(pool, names):
    """The fleet configuration of ``names`` (name i served by pool[i]) passes haproxy -c; HAProxy marks every server up
    by its health check (its served name found in GET /v1/models) and routes each name to its own server only."""
    servers = pool[:len(names)]
    for server, name in zip(servers, names, strict=True):
        server.served = name
    port = free_port()
    lb = Haproxy("")
    sock = str(lb.dir / "admin.sock")
    lb.config.write_text(fleet_config(names, servers, port, sock))
    with lb:
        def checked():
            rows = [row for row in haproxy.parse_stat(haproxy.command(sock, "show stat"))
                    if row["svname"] not in ("FRONTEND", "BACKEND")]
            return len(rows) == len(names) and all(row["check_status"] == "L7OK" for row in rows)
        lb.wait(checked, "every server's health check passes (the served name in GET /v1/models)")
        for index, name in enumerate(names):
            before = [server.hits for server in servers]
            status, body = post(port, name)
            assert (status, json.loads(body)["choices"][0]["text"]) == (200, "port %d" % servers[index].server_address[1]), (name, status, body)
            assert [server.hits - hits for server, hits in zip(servers, before, strict=True)] == [int(i == index) for i in range(len(names))]


# ----------------------------------------------------------------------------- the cases of issue 38

@pytest.mark.parametrize("check_uri", ["/v1/models", "/health"])
def test_issue38_served_name_cannot_inject_haproxy_configuration(check_uri):
    """A served name holding a line break wrote configuration of its own (with /health, a running HAProxy answered
    the injected body for every model): it is refused, naming the name, and nothing is rendered."""
    services = [{"name": INJECTED, "servers": [{"name": "gpu-1", "address": "127.0.0.1", "port": 8000}]}]
    with pytest.raises(ValueError, match="control character") as refused:
        render("haproxy.cfg.j2", __lb_services=services, lb_haproxy_check_uri=check_uri)
    assert repr(INJECTED) in str(refused.value)


def test_issue38_served_names_vllm_accepts_get_their_own_backend(pool):
    """chat"v2 and a name with spaces broke the configuration; org/chat and org_chat shared one backend."""
    assert_routed(pool, VLLM_NAMES)


def test_issue38_ipv6_zone_id_is_refused():
    """A bind with an IPv6 zone id rendered a host proxy HAProxy refuses (it takes no zone id): refused, saying so."""
    seat = {"port": 8000, "bind": "fe80::1%eth0", "slots": [18000, 28000], "active": 18000}
    with pytest.raises(ValueError, match="zone id"):
        render("host-proxy.cfg.j2", lb_proxy_seats=[seat])
    services = [{"name": "chat", "servers": [{"name": "gpu-1", "address": "fe80::1%eth0", "port": 8000}]}]
    with pytest.raises(ValueError, match="zone id"):
        render("haproxy.cfg.j2", __lb_services=services)


def run_module(args):
    """haproxy_server through Ansible's own argument handling (python -m with ANSIBLE_MODULE_ARGS)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as args_file:
        json.dump({"ANSIBLE_MODULE_ARGS": args}, args_file)
        args_file.flush()
        proc = subprocess.run([sys.executable, "-m", "ansible_collections.llmops.vllm.plugins.modules.haproxy_server", args_file.name],
                              capture_output=True, text=True, timeout=60, check=False)
    try:
        return json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(proc.stdout + proc.stderr)


def test_issue38_haproxy_server_sends_no_second_command(pool):
    """backend="a;set server ..." sent a second runtime API command: every name is refused, naming the argument,
    before HAProxy is reached; the server stays as it was."""
    pool[0].served = "chat"
    lb = Haproxy("")
    sock = str(lb.dir / "admin.sock")
    lb.config.write_text(fleet_config(["chat"], pool, free_port(), sock))
    with lb:
        lb.wait(lambda: haproxy.servers(sock, "vllm_chat") is not None, "its runtime socket answers")
        for argument, value in [("backend", "vllm_chat;set server vllm_chat/gpu-0 state maint"),
                                ("server", "gpu-0\nset server vllm_chat/gpu-0 state maint"),
                                ("address", "127.0.0.2;set server vllm_chat/gpu-0 state maint")]:
            # check mode: the module itself changes nothing, so what changes was sent by the value
            result = run_module({"socket": sock, "backend": "vllm_chat", "server": "gpu-0", "state": "ready", "wait": False,
                                 argument: value, "_ansible_check_mode": True})
            assert haproxy.servers(sock, "vllm_chat")["gpu-0"]["state"] == "ready", (argument, result)
            assert result.get("failed") and result["msg"].startswith("haproxy_server: %s %r" % (argument, value)), result
            assert "Nothing was sent to HAProxy" in result["msg"], result


# ----------------------------------------------------------------------------- properties

@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(NAMES, min_size=1, max_size=4, unique=True))
@example(["-i", "}", "if", "$HOME"])
@example(["é", "e", "中/文", "\\"])
def test_every_served_name_routes_to_its_own_backend(pool, names):
    assert_routed(pool, names)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(NAMES, min_size=1, max_size=6))
@example(["${HOME}", "a\\", '"', "#x", "'", "\\x41 \\n"])
def test_quoted_values_read_back_by_haproxy(values):
    """haproxy_quote's output is one argument that HAProxy reads back as the value: returned as a response body."""
    port = free_port()
    lines = ["defaults", "    mode http", "    timeout connect 1s", "    timeout client 5s", "    timeout server 5s",
             "frontend echo", "    bind 127.0.0.1:%d" % port]
    lines += ["    http-request return status 200 content-type text/plain string %s if { path /%d }" % (haproxy.haproxy_quote(value), index)
              for index, value in enumerate(values)]
    with Haproxy("\n".join(lines) + "\n") as lb:
        lb.wait(lambda: socket.create_connection(("127.0.0.1", port), timeout=1).close() is None, "it listens")
        for index, value in enumerate(values):
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            connection.request("GET", "/%d" % index)
            assert connection.getresponse().read().decode() == value
            connection.close()


def test_host_proxy_passes_haproxy_check():
    """The host proxy's configuration, IPv4 and IPv6 seats, as the rollout writes it: haproxy -c accepts it."""
    seats = [{"port": 8000, "bind": "127.0.0.1", "slots": [18000, 28000], "active": 28000},
             {"port": 8001, "bind": "::", "slots": [18001, 28001], "active": 18001}]
    text = render("host-proxy.cfg.j2", lb_proxy_seats=seats, lb_proxy_socket="/tmp/none.sock")
    assert "    bind [::]:8001\n" in text and "    server slot_28000 127.0.0.1:28000\n" in text
    assert "    server slot_18000 127.0.0.1:18000 disabled\n" in text and "    server slot_18001 [::1]:18001\n" in text
    lb = Haproxy(text.replace("    user haproxy\n    group haproxy\n", ""))
    checked = lb.check()
    shutil.rmtree(lb.dir, ignore_errors=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
