# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The last serving server of a backend is never drained by default (issue 39): a real HAProxy on loopback with
one backend of two servers (small HTTP servers that answer like vLLM), llmops.vllm.haproxy_server run as Ansible
runs it (python -m with its arguments; both hosts of a batch at once, as Ansible's forks do), and the rollout's own
drain task (roles/rollout/tasks/swap.yml, read from the file) through a real ansible-playbook run on two hosts."""
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
import yaml

from ansible_collections.llmops.vllm.plugins.module_utils import haproxy
from test_haproxy_lb import FakeVllm, free_port
from test_haproxy_sink import Haproxy, post, render

pytestmark = pytest.mark.ansible

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
BACKEND = "vllm_chat"


@pytest.fixture(scope="module")
def lb():
    servers = {name: FakeVllm("chat") for name in ("a", "b")}
    for server in servers.values():
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    balancer = Haproxy("")
    balancer.sock, balancer.port, balancer.servers = str(balancer.dir / "admin.sock"), free_port(), servers
    services = [{"name": "chat", "servers": [{"name": name, "address": "127.0.0.1", "port": server.server_address[1]}
                                             for name, server in sorted(servers.items())]}]
    balancer.config.write_text(render("haproxy.cfg.j2", __lb_services=services, lb_haproxy_bind="127.0.0.1:%d" % balancer.port,
                                      lb_haproxy_socket=balancer.sock, lb_haproxy_check_inter="100ms",
                                      lb_haproxy_check_rise=1, lb_haproxy_check_fall=1))
    with balancer:
        yield balancer
    for server in servers.values():
        server.shutdown()
        server.server_close()


@pytest.fixture()
def serving(lb):
    """Both servers ready and up (each test starts from a backend that serves)."""
    def both_serve():
        found = haproxy.servers(lb.sock, BACKEND)
        return found is not None and all(haproxy.serving(found[name]) for name in ("a", "b"))
    for name in ("a", "b"):
        try:
            haproxy.set_state(lb.sock, BACKEND, name, "ready")
        except (OSError, haproxy.HaproxyError):  # the runtime socket is not there yet
            pass
    lb.wait(both_serve, "both servers ready and up")
    return lb


def states(lb):
    return dict((name, server["state"]) for name, server in haproxy.servers(lb.sock, BACKEND).items())


def run_batch(lb, batch, check=False, **args):
    """haproxy_server for every host of the batch at once (Ansible's forks), through Ansible's argument handling."""
    procs = {}
    for name in batch:
        handle = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
        json.dump({"ANSIBLE_MODULE_ARGS": dict({"socket": lb.sock, "backend": BACKEND, "server": name, "state": "drain",
                                                "batch": list(batch), "timeout": 5, "poll_interval": 0.1,
                                                "_ansible_check_mode": check}, **args)}, handle)
        handle.close()
        procs[name] = (handle.name, subprocess.Popen(
            [sys.executable, "-m", "ansible_collections.llmops.vllm.plugins.modules.haproxy_server", handle.name],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = {}
    for name, (path, proc) in procs.items():
        out, err = proc.communicate(timeout=60)
        os.unlink(path)
        try:
            results[name] = json.loads(out)
        except ValueError:
            raise AssertionError(out + err)
    return results


def test_issue39_a_batch_holding_every_server_is_refused(serving):
    """serial 100%: both servers of the backend drain in one batch - every host refuses, nothing is drained, and
    the backend still answers; a preview (check mode) says the same."""
    for check in (True, False):
        results = run_batch(serving, ["a", "b"], check=check)
        for name, result in results.items():
            assert result.get("failed") and not result.get("changed"), (name, result)
            message = result["msg"]
            assert message.startswith("Setting %s/%s to drain would leave no server of %s taking requests" % (BACKEND, name, BACKEND))
            assert "every server of it is in this batch (a, b)" in message and "Nothing was changed" in message
            assert "rollout_serial" in message and "blue/green" in message and "rollout_allow_outage: true" in message
        assert states(serving) == {"a": "ready", "b": "ready"}
    assert post(serving.port, "chat")[0] == 200


def test_issue39_allow_outage_drains_the_whole_batch_with_a_warning(serving):
    preview = run_batch(serving, ["a", "b"], check=True, allow_outage=True)
    assert all(result["changed"] and not result.get("failed") for result in preview.values()), preview
    # (ansible-core 2.19 returns a warning as a structure holding its text)
    assert "goes to drain with allow_outage: every server of it is in this batch (a, b)" in json.dumps(preview["a"]["warnings"])
    assert states(serving) == {"a": "ready", "b": "ready"}
    results = run_batch(serving, ["a", "b"], allow_outage=True)
    for name, result in results.items():
        assert result["changed"] and result["after"]["state"] == "drain", (name, result)
        assert "its clients get no answer until a server serves again" in json.dumps(result["warnings"])
    assert states(serving) == {"a": "drain", "b": "drain"}


def test_a_batch_that_leaves_a_serving_server_drains(serving):
    result = run_batch(serving, ["a"])["a"]
    assert result["changed"] and result["after"]["state"] == "drain" and result["serving_elsewhere"] == ["b"], result
    assert not result.get("warnings"), result
    assert states(serving) == {"a": "drain", "b": "ready"} and post(serving.port, "chat")[0] == 200


def swap_drain_task():
    """The rollout's drain task as roles/rollout/tasks/swap.yml has it (its vars and conditions)."""
    tasks = yaml.safe_load((ROOT / "roles" / "rollout" / "tasks" / "swap.yml").read_text())
    (task,) = [task for task in tasks if task.get("name", "").startswith("Drain this host at the fleet's load balancer")]
    return {key: task[key] for key in ("name", "ansible.builtin.include_role", "vars", "when")}


def test_issue39_the_rollout_refuses_the_batch_before_any_drain_and_a_blue_green_host_serves_on(serving, tmp_path):
    """Two hosts of one batch run swap.yml's drain task at once: both refuse, before either sets a state. Then the
    host that swaps blue/green drains nothing and counts as serving: the other one drains."""
    def phase(name, bluegreen):
        return {"name": name, "hosts": "a,b", "gather_facts": False, "tasks": [
            {"ansible.builtin.set_fact": {"rollout_bluegreen": bluegreen, "refused": ""}},
            {"ansible.builtin.set_fact": {"rollout_lb_draining": "{{ not rollout_bluegreen }}"}},  # as swap.yml sets it
            {"block": [swap_drain_task()], "rescue": [{"ansible.builtin.set_fact": {"refused": "{{ ansible_failed_result.msg }}"}}]},
            {"ansible.builtin.debug": {"msg": "RESULT {{ [inventory_hostname, '%s', refused] | to_json }}" % name}}]}

    (tmp_path / "play.yml").write_text(json.dumps([phase("serial100", False), phase("bluegreen", "{{ inventory_hostname == 'a' }}")]))
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {"a": None, "b": None}, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable, "lb_backend": "haproxy", "lb_host": "localhost",
        "lb_haproxy_socket": serving.sock, "lb_drain_timeout": 10, "rollout_current": {"name": "m", "served_model_name": "chat"},
        "rollout_changed": True, "rollout_node_rank": 0, "rollout_allow_outage": False}}}))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default", ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")],
                          cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = {}
    for line in proc.stdout.splitlines():
        if '"msg": "RESULT ' in line:
            host, name, refused = json.loads(json.loads("{%s}" % line.strip().rstrip(","))["msg"][len("RESULT "):])
            seen[(host, name)] = refused
    assert len(seen) == 4, proc.stdout
    for host in ("a", "b"):  # every host of the batch refused (the module fails before it sets a state)
        assert "would leave no server of %s taking requests: every server of it is in this batch (a, b)" % BACKEND \
            in seen[(host, "serial100")], seen
    assert seen[("a", "bluegreen")] == seen[("b", "bluegreen")] == "", seen  # a drains nothing, so b may
    assert states(serving) == {"a": "ready", "b": "drain"}  # a was never drained: it serves on
    assert post(serving.port, "chat")[0] == 200
