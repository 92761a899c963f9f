"""Real ansible-playbook runs against the sandbox's hosts, for the live test files: one environment
(the checkout's ansible.cfg, the sandbox's state directory) and one way to run a playbook with an
inventory of the test's own, no benchmark gate and no parser probes, reports in that inventory."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

import yaml

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
STATE_DIR = Path(os.environ.get("LLMOPS_SANDBOX_DIR") or REPO / ".sandbox")
ENV = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1",
           LLMOPS_SANDBOX_DIR=str(STATE_DIR))


def run(argv: Any, timeout: float = 900, **kwargs: Any) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, check=False, **kwargs)


def ssh(host: str, command: str, timeout: float = 60) -> str:
    """Run a shell command on a sandbox host as root; its output (a failure is an assertion naming the command)."""
    proc = run(["ssh", "-F", STATE_DIR / "ssh_config", host, command], timeout=timeout)
    assert proc.returncode == 0, "%s on %s: %s" % (command, host, proc.stderr)
    return proc.stdout


def unit_process(host: str, unit: str) -> Dict[str, str]:
    """MainPID, ExecMainStartTimestampMonotonic and ActiveState of a unit: the first two change whenever it restarts."""
    out = ssh(host, "systemctl show -p MainPID -p ExecMainStartTimestampMonotonic -p ActiveState %s" % unit)
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def playbook(inventory: Path, play: str, *extra: str, timeout: float = 1500) -> Tuple[subprocess.CompletedProcess, float]:
    """playbooks/<play> on the inventory directory; (the process, seconds it took)."""
    started = time.monotonic()
    proc = run([BIN / "ansible-playbook", "-i", inventory, REPO / "playbooks" / play,
                "-e", json.dumps({"rollout_benchmark": False, "rollout_parser_probes": "never",
                                  "rollout_report_dir": str(inventory / "reports")}),
                *extra], timeout=timeout, env=ENV, cwd=REPO)
    return proc, round(time.monotonic() - started, 1)


def sandbox_inventory(root: Path, hosts: Sequence[str], vllm_model: Optional[Dict[str, Any]] = None) -> Dict[str, Dict[str, Any]]:
    """A copy of inventories/sandbox at root, limited to hosts, with vllm_model for the fleet (None: none;
    the test then writes each host's host_vars). Returns each host's shipped host_vars, for the test to extend."""
    source = REPO / "inventories" / "sandbox"
    (root / "group_vars").mkdir(parents=True)
    (root / "host_vars").mkdir()
    (root / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"vllm_servers": {"hosts": dict.fromkeys(hosts)}}}}))
    (root / "group_vars" / "all.yml").write_text((source / "group_vars" / "all.yml").read_text())
    fleet = yaml.safe_load((source / "group_vars" / "vllm_servers.yml").read_text())
    fleet.pop("vllm_model")
    if vllm_model is not None:
        fleet["vllm_model"] = vllm_model
    (root / "group_vars" / "vllm_servers.yml").write_text(yaml.safe_dump(fleet))
    shipped = {host: source / "host_vars" / ("%s.yml" % host) for host in hosts}
    return {host: yaml.safe_load(path.read_text()) if path.exists() else {} for host, path in shipped.items()}


def sandbox_up(count: int = 2) -> Dict[str, str]:
    """sandbox/up with count hosts (a no-op for the hosts that run already); each host's address."""
    up = run([REPO / "sandbox" / "up"], timeout=3600, env=dict(ENV, LLMOPS_SANDBOX_HOSTS=str(count)))
    assert up.returncode == 0, "sandbox/up failed:\n" + up.stdout[-3000:] + up.stderr[-3000:]
    hosts = json.loads((STATE_DIR / "hosts.json").read_text())["all"]["hosts"]
    return {name: host["ansible_host"] for name, host in hosts.items()}
