"""A fleet of three sandbox hosts behind a real HAProxy on the controller (role llmops.vllm.lb), for the live
fleet test (test_fleet_live.py) and bench/zero_downtime.py: the inventory, HAProxy started from the configuration
playbooks/lb.yml renders, rollouts through real ansible-playbook, and what HAProxy and the hosts say.

Every model of the fleet is served as "chat" on one port, so the clients of the load balancer ask for the
same name before, during and after "retire A, roll out B"."""
from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import yaml

from sandbox_play import playbook, sandbox_inventory, sandbox_up, ssh

HOSTS = ("llmops-1", "llmops-2", "llmops-3")
# The three hosts share the controller's two cores. vLLM's CPU default binds each server's threads to core 0
# (reserving core 1): measured, a canary loading there got 1.2 % of a core while the other two hosts' workers
# served on it, and its engine had not started after 8 minutes. nobind lets the OS spread them.
PLAN = {"cpu_threads_bind": "nobind"}
PORT = 8031  # a port no other scenario uses
SERVED = "chat"
MODELS = {
    "a": {"name": "fleet-a", "repo_id": "llmops-test/tiny-llama-chat", "revision": "v1.0", "served_model_name": SERVED, "port": PORT,
          "plan": PLAN},
    "b": {"name": "fleet-b", "repo_id": "llmops-test/tiny-qwen3-chat", "revision": "main", "served_model_name": SERVED, "port": PORT,
          "plan": PLAN},
    # downloads and passes every check before the swap, fails when vLLM loads it (examples/sandbox-broken.yml)
    "broken": {"name": "fleet-c", "repo_id": "llmops-test/tiny-qwen3-broken", "revision": "main", "served_model_name": SERVED,
               "port": PORT, "plan": PLAN},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Fleet:
    """The inventory (root/inventory), HAProxy on 127.0.0.1:<lb_port>, its runtime socket under root."""

    def __init__(self, root: Path) -> None:
        self.addresses = sandbox_up(len(HOSTS))
        self.root, self.inventory = root, root / "inventory"
        self.lb_port, self.socket, self.config = free_port(), root / "haproxy.sock", root / "haproxy.cfg"
        self.host_vars = sandbox_inventory(self.inventory, HOSTS, MODELS["a"])
        for host in HOSTS:
            self.set_host(host)
        # group_vars/all: the load balancer's host (localhost, playbooks/lb.yml) and the servers read them
        everyone = yaml.safe_load((self.inventory / "group_vars" / "all.yml").read_text())
        everyone.update({"lb_backend": "haproxy", "lb_host": "localhost", "lb_haproxy_config": str(self.config),
                         "lb_haproxy_socket": str(self.socket), "lb_haproxy_bind": "127.0.0.1:%d" % self.lb_port,
                         "lb_haproxy_reload": False, "lb_haproxy_check_inter": "1s", "lb_haproxy_check_rise": 2,
                         "lb_haproxy_check_fall": 3, "lb_ready_timeout": 60, "lb_drain_timeout": 120,
                         # Two shared cores swing latency widely: a canary that had just loaded showed a TTFT p99
                         # 3.3 times its warm baseline's. The sandbox's soak is wide (like its benchmark gate's ratio).
                         "rollout_soak_max_ttft_p99_ratio": 20})
        (self.inventory / "group_vars" / "all.yml").write_text(yaml.safe_dump(everyone))
        self.haproxy: Any = None
        self.url = "http://127.0.0.1:%d" % self.lb_port

    def set_host(self, host: str, **extra: Any) -> None:
        values = dict(self.host_vars[host], lb_address=self.addresses[host], **extra)
        (self.inventory / "host_vars" / ("%s.yml" % host)).write_text(yaml.safe_dump(values))

    def set_model(self, key: str, **extra: Any) -> None:
        path = self.inventory / "group_vars" / "vllm_servers.yml"
        fleet = yaml.safe_load(path.read_text())
        fleet["vllm_model"] = dict(MODELS[key], **extra)
        path.write_text(yaml.safe_dump(fleet))

    def playbook(self, play: str, *extra: str, timeout: float = 1800) -> Tuple[subprocess.CompletedProcess, float]:
        return playbook(self.inventory, play, *extra, timeout=timeout)

    def start_haproxy(self) -> None:
        """playbooks/lb.yml renders (and haproxy -c validates) the configuration; HAProxy runs it in the foreground."""
        proc, _seconds = self.playbook("lb.yml")
        assert proc.returncode == 0, "playbooks/lb.yml failed:\n" + proc.stdout[-3000:] + proc.stderr[-2000:]
        self.haproxy = subprocess.Popen(["haproxy", "-db", "-f", str(self.config)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while not self.socket.exists():
            assert self.haproxy.poll() is None, "HAProxy exited with %s" % self.haproxy.returncode
            assert time.monotonic() < deadline, "HAProxy made no runtime socket in 20 s"
            time.sleep(0.1)

    def stop_haproxy(self) -> None:
        if self.haproxy is not None and self.haproxy.poll() is None:
            self.haproxy.terminate()
            self.haproxy.wait(10)

    def servers(self) -> Dict[str, Dict[str, str]]:
        """HAProxy's view of the chat backend: {host: {status, admin}} (show stat)."""
        from ansible_collections.llmops.vllm.plugins.module_utils import haproxy
        return {name: {"status": server["status"], "state": server["state"]}
                for name, server in (haproxy.servers(str(self.socket), "vllm_" + SERVED) or {}).items()}

    def wait_all_up(self, timeout: float = 60) -> Dict[str, Dict[str, str]]:
        deadline = time.monotonic() + timeout
        while True:
            seen = self.servers()
            if all(s["status"] == "UP" and s["state"] == "ready" for s in seen.values()) and len(seen) == len(HOSTS):
                return seen
            assert time.monotonic() < deadline, "not every server is up and ready in HAProxy: %s" % seen
            time.sleep(1)

    def serving(self, host: str) -> Optional[str]:
        """The name of the model the host's state file says it serves (None: nothing)."""
        state_dir = self.host_vars[host].get("rollout_state_dir", "/var/lib/llmops-vllm")
        models = sorted(json.loads(ssh(host, "cat %s/state.json 2>/dev/null || echo {}" % state_dir)).get("models") or {})
        return models[0] if models else None

    def retire_all(self) -> None:
        """playbooks/retire.yml for what each host serves (what the scenario started stops)."""
        by_model: Dict[str, List[str]] = {}
        for host in HOSTS:
            name = self.serving(host)
            if name:
                by_model.setdefault(name, []).append(host)
        for name, hosts in by_model.items():
            proc, _seconds = self.playbook("retire.yml", "-e", "retire_model=%s" % name, "--limit", ",".join(hosts))
            assert proc.returncode == 0, "retire of %s failed:\n%s" % (name, proc.stdout[-3000:])

    def started(self, host: str, name: str) -> str:
        return ssh(host, "systemctl show -p ExecMainStartTimestampMonotonic --value vllm-%s.service" % name).strip()

    def report(self, host: str) -> Dict[str, Any]:
        return json.loads((self.inventory / "reports" / host / "latest.json").read_text())

    def timings(self) -> List[Tuple[str, Dict[str, Any]]]:
        return [(host, self.report(host).get("timings", {})) for host in HOSTS]
