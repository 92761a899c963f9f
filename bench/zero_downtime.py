#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What clients see during "retire A, roll out B": a fleet behind HAProxy against one host without a load balancer.

    .venv/bin/python bench/zero_downtime.py [--case all|fleet|stop-start|bluegreen] [--rate 1] [--max-tokens 8] [--settle 20] [--json FILE]

1. Fleet: three sandbox hosts serve A behind a real HAProxy on the controller (tests/integration/fleet_scenario.py,
   the same as the live fleet test); a steady load of --rate completions/s (--max-tokens) goes through HAProxy for
   --settle seconds, then during the rollout A -> B with a canary batch of one host (15 s soak), then --settle
   seconds more. Printed: requests sent and failed, p50/p99 latency before, during and after; each host's time out
   of the load balancer (drained -> enabled, from its report); the rollout's total time.
2. Stop-start: llmops-3 alone, no load balancer, the same load sent to the host itself, B -> A. The clients'
   downtime gap (the last answer before the first failure to the first answer after the last failure) against
   the model's load time (the gate's time to ready in the report) and the report's own gap; the goal is
   gap <= load + 5 s (what is not load time is cut).
3. Blue/green: llmops-3 alone with vllm_model.swap auto behind its host proxy, A -> B, the load on the stable
   port. Printed: requests, failures and latency before, during and after; the plan's strategy and why; the
   time from "apply" to "B serves" (the switch) and B's load time. Then B -> A with a soak A cannot pass: the
   failure comes after the switch, and the rescue switches back to B, which still runs (the failures clients saw).
Needs root and the sandbox's caches (sandbox/up makes them); brings up three hosts, stops what it started.
A benchmark (`make bench`), not a test.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))

from fleet_scenario import HOSTS, MODELS, PORT, SERVED, Fleet  # noqa: E402
from sandbox_play import ssh  # noqa: E402
from steady_load import SteadyLoad  # noqa: E402


def line(label, summary):
    return "%-8s sent %4d  failed %3d  p50 %6s s  p99 %6s s" % (label, summary["sent"], summary["failed"], summary["p50_s"], summary["p99_s"])


def downtime_gap(results):
    """Seconds from the last answer before the first failure to the first answer after the last failure (0: none failed)."""
    results = sorted(results)
    failed = [start for start, _seconds, error in results if error is not None]
    if not failed:
        return 0.0
    before = [start + seconds for start, seconds, error in results if error is None and start < failed[0]]
    after = [start + seconds for start, seconds, error in results if error is None and start > failed[-1]]
    if not before or not after:
        return None
    return round(min(after) - max(before), 1)


def fleet_case(fleet, args):
    """Three hosts behind HAProxy serve A; A -> B with a canary under the steady load."""
    fleet.start_haproxy()
    proc, _seconds = fleet.playbook("rollout.yml")
    assert proc.returncode == 0, proc.stdout[-3000:]
    fleet.wait_all_up()

    print("== fleet: %s behind HAProxy, A -> B with a canary, %.1f requests/s" % (", ".join(HOSTS), args.rate), flush=True)
    load = SteadyLoad(fleet.url, SERVED, rate=args.rate, max_tokens=args.max_tokens, timeout=60.0)
    load.start()
    time.sleep(args.settle)
    fleet.set_model("b")
    begin = time.monotonic()
    proc, rollout_s = fleet.playbook("rollout.yml", "-e", json.dumps({"rollout_canary": 1, "rollout_soak_seconds": 15}))
    end = time.monotonic()
    time.sleep(args.settle)
    load.stop()
    assert proc.returncode == 0, proc.stdout[-3000:]
    windows = {"before": load.summary(None, begin), "during": load.summary(begin, end), "after": load.summary(end, None)}
    total = load.summary()
    for label, summary in windows.items():
        print(line(label, summary))
    print(line("all", total))
    out_of_lb = {host: timings.get("out_of_lb_s") for host, timings in fleet.timings()}
    print("out of the load balancer: " + ", ".join("%s %s s" % item for item in out_of_lb.items()))
    print("rollout A -> B in all: %s s" % rollout_s)
    fleet.stop_haproxy()
    return {"windows": windows, "all": total, "out_of_lb_s": out_of_lb, "rollout_s": rollout_s}


def stop_start_case(fleet, args):
    """llmops-3 alone, no load balancer: what it serves -> the other model, the load sent to the host itself."""
    host = HOSTS[2]
    if fleet.serving(host) is None:  # the stop-start case alone: the host serves A first
        fleet.set_model("a")
        proc, _seconds = fleet.playbook("rollout.yml", "--limit", host, "-e", "lb_backend=none")
        assert proc.returncode == 0, proc.stdout[-3000:]
    key = "a" if fleet.serving(host) == MODELS["b"]["name"] else "b"
    print("== stop-start: %s alone, no load balancer, -> %s" % (host, MODELS[key]["name"]), flush=True)
    direct = SteadyLoad("http://%s:%d" % (fleet.addresses[host], PORT), SERVED, rate=args.rate, max_tokens=args.max_tokens,
                        timeout=60.0)
    direct.start()
    time.sleep(5)
    fleet.set_model(key)
    proc, swap_s = fleet.playbook("rollout.yml", "--limit", host, "-e", "lb_backend=none")
    time.sleep(5)
    direct.stop()
    assert proc.returncode == 0, proc.stdout[-3000:]
    with direct.lock:
        gap = downtime_gap(direct.results)
    timings = fleet.report(host).get("timings", {})
    load_s = timings.get("time_to_ready_s")
    print(line("direct", direct.summary()))
    print("clients' downtime gap %s s, the report's %s s, load time %s s, retire %s s: gap - load = %s s (goal <= 5 s: %s)"
          % (gap, timings.get("downtime_gap_s"), load_s, timings.get("retire_s"),
             round(gap - load_s, 1) if gap is not None and load_s else None,
             "met" if gap is not None and load_s and gap - load_s <= 5 else "NOT met"))
    return {"client_gap_s": gap, "report": timings, "swap_s": swap_s, "load": direct.summary()}


def bluegreen_case(fleet, args):
    """llmops-3 alone, swap auto behind its host proxy: A -> B blue/green, the load on the stable port."""
    host = HOSTS[2]
    fleet.set_model("a", swap="auto")
    proc, _seconds = fleet.playbook("rollout.yml", "--limit", host, "-e", "lb_backend=none")
    assert proc.returncode == 0, proc.stdout[-3000:]
    print("== blue/green: %s alone behind its host proxy, A -> B, %.1f requests/s on the stable port" % (host, args.rate), flush=True)
    load = SteadyLoad("http://%s:%d" % (fleet.addresses[host], PORT), SERVED, rate=args.rate, max_tokens=args.max_tokens,
                      timeout=60.0)
    load.start()
    time.sleep(args.settle)
    fleet.set_model("b", swap="auto")
    begin = time.monotonic()
    proc, rollout_s = fleet.playbook("rollout.yml", "--limit", host, "-e", "lb_backend=none")
    end = time.monotonic()
    time.sleep(args.settle)
    load.stop()
    assert proc.returncode == 0, proc.stdout[-3000:]
    report = fleet.report(host)
    windows = {"before": load.summary(None, begin), "during": load.summary(begin, end), "after": load.summary(end, None)}
    for label, summary in windows.items():
        print(line(label, summary))
    timings = report.get("timings", {})
    print("swap: %s (%s)" % ((report.get("swap") or {}).get("strategy"), (report.get("swap") or {}).get("why")))
    print("apply -> B serves (switched) %s s; B's load %s s; rollout in all %s s"
          % (timings.get("switch_s"), timings.get("time_to_ready_s"), rollout_s))

    # B -> A with a soak A cannot pass (TTFT p99 <= 0.1 ms): the failure comes after the switch, while B still runs;
    # the rescue switches back to B. Clients must see no failure either way.
    print("== blue/green: B -> A with a soak it cannot pass (a failure after the switch)", flush=True)
    back = SteadyLoad("http://%s:%d" % (fleet.addresses[host], PORT), SERVED, rate=args.rate, max_tokens=args.max_tokens,
                      timeout=60.0)
    back.start()
    time.sleep(5)
    fleet.set_model("a", swap="auto")
    proc, back_s = fleet.playbook("rollout.yml", "--limit", host, "-e", json.dumps(
        {"lb_backend": "none", "rollout_canary": 1, "rollout_soak_seconds": 15, "rollout_soak_max_ttft_p99_s": 0.0001}))
    time.sleep(5)
    back.stop()
    failed_after_switch = fleet.report(host)
    print(line("back", back.summary()))
    print("rollout exit %d, status %s, switched %s, now serving %s (%s s)" % (
        proc.returncode, failed_after_switch.get("status"), (failed_after_switch.get("swap") or {}).get("switched"),
        fleet.serving(host), back_s))
    ssh(host, "systemctl disable --now llmops-vllm-proxy.service")
    return {"windows": windows, "swap": report.get("swap"), "timings": timings, "rollout_s": rollout_s,
            "switch_back": {"load": back.summary(), "returncode": proc.returncode, "status": failed_after_switch.get("status"),
                            "serving": fleet.serving(host), "seconds": back_s}}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--rate", type=float, default=1.0)
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--settle", type=float, default=20.0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--case", choices=("all", "fleet", "stop-start", "bluegreen"), default="all",
                        help="fleet: the three hosts behind HAProxy; stop-start: one host alone; bluegreen: one host "
                             "behind its own proxy (default: all three)")
    args = parser.parse_args()
    out = {}
    fleet = Fleet(Path(tempfile.mkdtemp(prefix="zero-downtime-")))
    try:
        if args.case in ("all", "fleet"):
            out["fleet"] = fleet_case(fleet, args)
        if args.case in ("all", "stop-start"):
            out["stop_start"] = stop_start_case(fleet, args)
        if args.case in ("all", "bluegreen"):
            if fleet.serving(HOSTS[2]):  # what the cases before left there: blue/green starts from A
                proc, _seconds = fleet.playbook("retire.yml", "-e", "retire_model=%s" % fleet.serving(HOSTS[2]),
                                                "--limit", HOSTS[2])
                assert proc.returncode == 0, proc.stdout[-3000:]
            out["bluegreen"] = bluegreen_case(fleet, args)
    finally:
        fleet.stop_haproxy()
        fleet.retire_all()
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
