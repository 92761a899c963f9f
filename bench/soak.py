#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Soak: one sandbox vLLM under a steady, bounded load; its memory and latency sampled; a leak named.

    .venv/bin/python bench/soak.py [--host llmops-1] [--minutes 10] [--concurrency 2] [--interval 10]
                                   [--max-mib-per-min 2] [--window 300] [--json FILE]

Needs the sandbox up and serving (`make main`): the host's state file names the unit, address and
served model. For --minutes, --concurrency client threads on the controller each send one completion
after the other (--max-tokens tokens, greedy): a steady load that never queues more than that. Every
--interval seconds the unit's memory is read on the host - PSS summed over its main process and every
process below it (plugins/module_utils/memory_soak.py, sent to the host as it is; cgroup memory counters
are not available inside the sandbox's hosts) - and the latency of the requests finished since the last
sample (p50, p95, errors). At the end, leak_verdict fits a line through the memory samples of the last
--window seconds: a slope above --max-mib-per-min MiB per minute is a leak (exit 3).

A benchmark, not a test (`make bench`): it prints the samples and the verdict.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SANDBOX = Path(os.environ.get("LLMOPS_SANDBOX_DIR") or REPO / ".sandbox")
SOAK_CODE = (REPO / "plugins" / "module_utils" / "memory_soak.py").read_text()
sys.path.insert(0, str(REPO / "plugins" / "module_utils"))
import memory_soak  # noqa: E402  (stdlib only, like on the host)


def log(msg: str) -> None:
    print(f"[soak] {msg}", file=sys.stderr, flush=True)


def ssh(host: str, argv: list, stdin: str | None = None, timeout: int = 60) -> str:
    done = subprocess.run(["ssh", "-F", str(SANDBOX / "ssh_config"), host] + argv, input=stdin, capture_output=True,
                          text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise SystemExit(f"ssh {host} {' '.join(argv)} failed: {done.stderr.strip()}")
    return done.stdout


def served(host: str) -> dict:
    """The one model the host's state file says it serves."""
    overrides = REPO / "inventories" / "sandbox" / "host_vars" / f"{host}.yml"
    state_dir = "/var/lib/llmops-vllm"
    if overrides.exists():
        for line in overrides.read_text().splitlines():
            if line.startswith("rollout_state_dir:"):
                state_dir = line.split(":", 1)[1].strip()
    state = json.loads(ssh(host, ["cat", f"{state_dir}/state.json"]))
    models = list(state["models"].values())
    if len(models) != 1:
        raise SystemExit(f"{host} serves {len(models)} models; the soak needs exactly one (make main)")
    return models[0]


def memory_mib(host: str, unit: str) -> float:
    script = SOAK_CODE + "\nimport json\nprint(json.dumps(unit_pss_kib(%r)))\n" % unit
    return json.loads(ssh(host, ["python3", "-"], stdin=script))["pss_kib"] / 1024.0


class Load:
    """--concurrency threads, each sending one completion after the other until stopped."""

    def __init__(self, url: str, model: str, concurrency: int, max_tokens: int) -> None:
        self.url, self.model, self.max_tokens = url + "/v1/completions", model, max_tokens
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.latencies: list = []
        self.errors = 0
        self.threads = [threading.Thread(target=self.worker, args=(i,), daemon=True) for i in range(concurrency)]

    def worker(self, index: int) -> None:
        body = json.dumps({"model": self.model, "prompt": "Soak request %d: tell me about the sea." % index,
                           "max_tokens": self.max_tokens, "temperature": 0}).encode()
        while not self.stop.is_set():
            begin = time.monotonic()
            try:
                request = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"})
                ok = json.loads(urllib.request.urlopen(request, timeout=120).read()).get("choices") is not None
            except (urllib.error.URLError, OSError, ValueError):
                ok = False
            with self.lock:
                if ok:
                    self.latencies.append(time.monotonic() - begin)
                else:
                    self.errors += 1
            if not ok:
                time.sleep(1)

    def take(self) -> tuple:
        with self.lock:
            latencies, errors = self.latencies, self.errors
            self.latencies, self.errors = [], 0
        return latencies, errors


def percentile(values: list, share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(share * (len(ordered) - 1))))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="llmops-1")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--interval", type=float, default=10.0)
    parser.add_argument("--window", type=float, default=300.0, help="seconds at the end the leak verdict fits")
    parser.add_argument("--max-mib-per-min", type=float, default=2.0, help="a slope above this is a leak")
    parser.add_argument("--json", help="write the samples and the verdict here")
    args = parser.parse_args()
    if not (SANDBOX / "ssh_config").exists():
        log(f"no sandbox at {SANDBOX}: run `make main` first")
        return 2
    entry = served(args.host)
    url = "http://%s:%s" % (entry["bind"], entry["port"])
    log(f"{args.host}: {entry['unit']} serves {entry['served_model_name']} at {url}; "
        f"{args.concurrency} clients for {args.minutes:g} min, a sample every {args.interval:g} s")
    load = Load(url, entry["served_model_name"], args.concurrency, args.max_tokens)
    begin = time.monotonic()
    samples, rows = [], []
    for thread in load.threads:
        thread.start()
    try:
        while time.monotonic() - begin < args.minutes * 60:
            time.sleep(args.interval)
            elapsed = time.monotonic() - begin
            mib = memory_mib(args.host, entry["unit"])
            latencies, errors = load.take()
            samples.append((elapsed, mib))
            row = {"t_s": round(elapsed, 1), "pss_mib": round(mib, 1), "requests": len(latencies), "errors": errors,
                   "p50_s": round(statistics.median(latencies), 3) if latencies else None,
                   "p95_s": round(percentile(latencies, 0.95), 3) if latencies else None}
            rows.append(row)
            print("t %6.0f s  PSS %8.1f MiB  %4d requests  p50 %s s  p95 %s s  errors %d"
                  % (elapsed, mib, row["requests"], row["p50_s"], row["p95_s"], errors), flush=True)
    finally:
        load.stop.set()
    verdict = memory_soak.leak_verdict(samples, args.window, args.max_mib_per_min)
    done = sum(row["requests"] for row in rows)
    print("memory over the last %d s: %.1f -> %.1f MiB, slope %.3f MiB/min (limit %.1f): %s; %d requests, %d errors"
          % (args.window, verdict["first_mib"], verdict["last_mib"], verdict["slope_mib_per_min"], args.max_mib_per_min,
             "LEAK" if verdict["leaking"] else "no leak", done, sum(row["errors"] for row in rows)))
    if args.json:
        Path(args.json).write_text(json.dumps({"host": args.host, "unit": entry["unit"], "rows": rows, "verdict": verdict}, indent=1))
    return 3 if verdict["leaking"] else 0


if __name__ == "__main__":
    sys.exit(main())
