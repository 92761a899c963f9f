"""The sandbox host launcher (sandbox/hosts.py) brings up real systemd hosts and takes them all down.

Runs the launcher for real: 2 systemd-nspawn hosts on the llmops0 bridge, in a state dir of their own
and named llmopst-N, so that a developer's sandbox (llmops-N in .sandbox/) stays untouched. Needs root;
the first run also builds the cached rootfs (~30 s) and installs the controller packages if missing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.sandbox

REPO_ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = REPO_ROOT / "sandbox" / "hosts.py"
PREFIX = "llmopst"
NAMES = [f"{PREFIX}-1", f"{PREFIX}-2"]
BRIDGE_ADDRESS = "10.231.0.1"


def launcher(state_dir: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, LLMOPS_SANDBOX_DIR=str(state_dir))
    return subprocess.run([sys.executable, str(LAUNCHER), *args], capture_output=True, text=True, env=env,
                          timeout=timeout, check=False)


def ssh(state_dir: Path, host: str, command: str) -> subprocess.CompletedProcess[str]:
    """ssh exactly as users and testinfra do: through the launcher's ssh_config."""
    return subprocess.run(["ssh", "-F", str(state_dir / "ssh_config"), host, command], capture_output=True,
                          text=True, timeout=60, check=False)


@pytest.fixture(scope="session")
def sandbox_hosts(nspawn_ok, tmp_path_factory):
    """Two sandbox hosts for the whole session; always torn down, even when a test fails."""
    state_dir = tmp_path_factory.mktemp("sandbox-hosts")
    try:
        up = launcher(state_dir, "up", "--count", "2", "--name-prefix", PREFIX)
        assert up.returncode == 0, f"hosts.py up failed:\n{up.stderr}"
        hosts = {h["name"]: h for h in json.loads(launcher(state_dir, "list", "--json").stdout)["hosts"]}
        yield state_dir, hosts
    finally:
        down = launcher(state_dir, "down", "--name-prefix", PREFIX, timeout=120)
        assert down.returncode == 0, f"hosts.py down failed:\n{down.stderr}"


def test_systemd_is_pid_1_and_running(sandbox_hosts):
    state_dir, hosts = sandbox_hosts
    assert sorted(hosts) == NAMES
    for name in NAMES:
        result = ssh(state_dir, name, "cat /proc/1/comm; systemctl is-system-running")
        comm, system_state = result.stdout.split()
        assert comm == "systemd", result
        assert system_state in ("running", "degraded"), result
        inside = launcher(state_dir, "exec", name, "--", "readlink", "/proc/1/exe")
        assert inside.returncode == 0 and inside.stdout.strip().endswith("/systemd"), inside


def test_sshd_answers_with_the_sandbox_key(sandbox_hosts):
    state_dir, hosts = sandbox_hosts
    key = state_dir / "ssh" / "id_ed25519"
    assert key.stat().st_mode & 0o777 == 0o600
    for name in NAMES:
        by_name = ssh(state_dir, name, "hostname")
        assert by_name.returncode == 0 and by_name.stdout.strip() == name, by_name
        by_address = ssh(state_dir, hosts[name]["address"], "cat /etc/hostname")
        assert by_address.stdout.strip() == name, by_address


def test_hosts_reach_each_other_and_the_controller_only(sandbox_hosts):
    state_dir, hosts = sandbox_hosts
    with socket.create_server((BRIDGE_ADDRESS, 0)) as listener:
        port = listener.getsockname()[1]
        listener.settimeout(10)
        for name, other in ((NAMES[0], NAMES[1]), (NAMES[1], NAMES[0])):
            probe = (
                "import socket\n"
                f"banner = socket.create_connection(({hosts[other]['address']!r}, 22), 5).recv(7)\n"
                f"socket.create_connection(({BRIDGE_ADDRESS!r}, {port}), 5).close()\n"
                "print(banner.decode())\n"
            )
            result = ssh(state_dir, name, f"python3 -c {shlex.quote(probe)}; ip route")
            assert result.returncode == 0, result
            assert result.stdout.startswith("SSH-2.0"), result
            listener.accept()[0].close()
            assert "default" not in result.stdout, f"{name} has a route out of the sandbox: {result.stdout}"


def test_dev_shm_is_large_enough_for_vllm(sandbox_hosts):
    state_dir, _ignored = sandbox_hosts
    result = ssh(state_dir, NAMES[0], "stat -f -c '%b %S' /dev/shm")
    blocks, block_size = map(int, result.stdout.split())
    assert blocks * block_size >= 256 * 2**20


def test_list_shows_both_hosts_on_the_bridge(sandbox_hosts):
    state_dir, _ignored = sandbox_hosts
    listing = json.loads(launcher(state_dir, "list", "--json").stdout)
    rows = {row["name"]: row for row in listing["hosts"]}
    assert sorted(rows) == NAMES
    for row in rows.values():
        assert row["running"] and row["system_state"] in ("running", "degraded")
        assert row["address"].startswith("10.231.0.") and row["address"] != BRIDGE_ADDRESS
        assert row["pss_bytes"] > 0
    assert len({row["address"] for row in rows.values()}) == 2


def test_second_up_keeps_the_hosts(sandbox_hosts):
    state_dir, hosts = sandbox_hosts
    started = time.monotonic()
    again = launcher(state_dir, "up", "--count", "2", "--name-prefix", PREFIX)
    assert again.returncode == 0, again.stderr
    assert time.monotonic() - started < 15
    after = {h["name"]: h for h in json.loads(launcher(state_dir, "list", "--json").stdout)["hosts"]}
    assert {n: h["init_pid"] for n, h in after.items()} == {n: h["init_pid"] for n, h in hosts.items()}


def test_ansible_reaches_both_hosts_through_hosts_json(sandbox_hosts):
    state_dir, _ignored = sandbox_hosts
    ansible = Path(sys.executable).parent / "ansible"
    if not ansible.exists():
        pytest.skip(f"no ansible next to {sys.executable}")
    inventory = state_dir / "hosts.json"
    result = subprocess.run([str(ansible), "all", "-i", str(inventory), "-m", "ansible.builtin.ping"],
                            capture_output=True, text=True, timeout=120, cwd=REPO_ROOT, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("pong") == 2


def test_down_leaves_nothing_of_ours(sandbox_hosts):
    """Last in this file: it takes the hosts down (the fixture's own teardown then has nothing to do)."""
    state_dir, hosts = sandbox_hosts
    assert all(Path(f"/proc/{h['nspawn_pid']}").exists() for h in hosts.values())
    down = launcher(state_dir, "down", "--name-prefix", PREFIX, timeout=120)
    assert down.returncode == 0, down.stderr
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=False).stdout
    for name in hosts:
        assert name not in netns
        assert f"llv-{name}" not in links
        # A cgroup can only be removed once no process is left in it.
        assert not list(Path("/sys/fs/cgroup").glob(f"*/machine/{name}"))
    assert str(state_dir) not in Path("/proc/self/mountinfo").read_text()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                assert str(state_dir) not in (entry / "cmdline").read_bytes().decode(errors="replace")
    assert not (state_dir / "state.json").exists() and not (state_dir / "ssh_config").exists()
    assert json.loads(launcher(state_dir, "list", "--json").stdout)["hosts"] == []
