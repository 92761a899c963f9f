#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark: a rollout that has nothing to do (its fast path) against a one-task play, on the sandbox.

    .venv/bin/python bench/rollout_noop.py [--repeat 5] [--force] [--json FILE]

Needs the sandbox up (`make sandbox-up`) and serving the inventory's model (`make main`, or
`ansible-playbook playbooks/rollout.yml` once): it checks that ${LLMOPS_SANDBOX_DIR:-<repo>/.sandbox}/ssh_config
exists and that every host of vllm_servers (inventories/sandbox) answers a ping, else exits 2.

Then, after one untimed warm-up of each, it runs --repeat rounds of

  A  ansible-playbook playbooks/rollout.yml - the inventory's desired state, which the hosts already
     serve, so every host stops at the fast path (roles/rollout/tasks/fastpath.yml: one fingerprint,
     one read-only llmops.vllm.vllm_state verify, end_host). Every run of A is checked: each host
     printed the fast path's "nothing to do" message and the PLAY RECAP shows changed=0; otherwise
     the benchmark aborts, since it would be timing something else.
  B  ansible-playbook bench/one_task.yml - hosts: vllm_servers, no facts, one ansible.builtin.ping:
     the floor any play against these hosts pays (start-up, inventory, SSH, one module per host).
  F  (with --force) A with -e rollout_force=true: the full rollout of the state already served.

in that order every round (A B [F] A B [F] ...), each the wall-clock seconds of the whole
ansible-playbook process (ANSIBLE_CONFIG=<repo>/ansible.cfg, the .venv's ansible-playbook), and
prints min / median / max of each and the median of the round-by-round ratios A/B (and F/B): how
far the fast path is from the cheapest play there is.

A benchmark, not a test: it asserts nothing but that A really took the fast path.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = REPO / ".venv" / "bin"
INVENTORY = REPO / "inventories" / "sandbox"
ROLLOUT = REPO / "playbooks" / "rollout.yml"
ONE_TASK = REPO / "bench" / "one_task.yml"
GROUP = "vllm_servers"
# A hung SSH connection should end the benchmark, not stall it.
PLAYBOOK_TIMEOUT = 1800
PING_TIMEOUT = 120
ANSI = re.compile(r"\x1b\[[0-9;]*m")
RECAP_LINE = re.compile(r"^(\S+)\s+:\s+((?:\w+=\d+\s*)+)$")
NOT_READY = ("run `make sandbox-up`, then roll out the inventory's model first (`make main`, or "
             "`.venv/bin/ansible-playbook playbooks/rollout.yml`)")


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def sandbox_dir() -> Path:
    return Path(os.environ.get("LLMOPS_SANDBOX_DIR") or REPO / ".sandbox")


def ansible_env() -> dict[str, str]:
    return {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}


def run(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, cwd=str(REPO), env=ansible_env(),
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"`{' '.join(argv)}` did not finish in {timeout:.0f} s") from None


def group_hosts() -> list[str]:
    """The hosts of vllm_servers, from the inventory alone (no connection)."""
    out = run([str(BIN / "ansible"), GROUP, "-i", str(INVENTORY), "--list-hosts"], PING_TIMEOUT)
    if out.returncode != 0:
        raise SystemExit(f"ansible --list-hosts failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    lines = [line.strip() for line in ANSI.sub("", out.stdout).splitlines()]
    return [line for line in lines if line and not line.startswith("hosts (")]


def unanswered(hosts: list[str]) -> dict[str, str]:
    """host -> why, for every host of the group that does not answer the ping of bench/one_task.yml."""
    out = run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), str(ONE_TASK), "-T", "15"], PING_TIMEOUT)
    counts = recap(ANSI.sub("", out.stdout))
    why = {}
    for host in hosts:
        host_counts = counts.get(host)
        if host_counts is None:
            why[host] = "not in the PLAY RECAP"
        elif host_counts.get("unreachable", 0) or host_counts.get("failed", 0):
            why[host] = "unreachable" if host_counts.get("unreachable", 0) else "ping failed"
    return why


def precondition() -> tuple[list[str], str | None]:
    """The group's hosts, or why the benchmark cannot run (the sandbox is not up)."""
    if not (BIN / "ansible-playbook").is_file():
        return [], f"{BIN / 'ansible-playbook'} is missing: run `make setup`"
    ssh_config = sandbox_dir() / "ssh_config"
    if not ssh_config.is_file():
        return [], f"{ssh_config} is missing, so the sandbox is not up: {NOT_READY}"
    hosts = group_hosts()
    if not hosts:
        return [], f"the inventory {INVENTORY} has no host in {GROUP}"
    silent = unanswered(hosts)
    if silent:
        why = ", ".join(f"{host} ({state})" for host, state in silent.items())
        return hosts, f"not every host of {GROUP} answers: {why}: {NOT_READY}"
    return hosts, None


def recap(output: str) -> dict[str, dict[str, int]]:
    """The PLAY RECAP: host -> {ok, changed, unreachable, failed, ...}."""
    counts: dict[str, dict[str, int]] = {}
    _head, found, tail = output.rpartition("PLAY RECAP")
    if not found:
        return counts
    for line in tail.splitlines():
        match = RECAP_LINE.match(line.strip())
        if match:
            counts[match.group(1)] = {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", match.group(2))}
    return counts


def fast_path_problems(output: str, hosts: list[str]) -> list[str]:
    """Why this rollout output is not every host stopping at the fast path (empty: it is)."""
    # The default callback prints the debug message as YAML, folded at 80 columns: join the lines again.
    flat = " ".join(output.split())
    counts = recap(output)
    problems = []
    for host in hosts:
        if not re.search(re.escape(host) + r" serves \S+ as this rollout would leave it: nothing to do", flat):
            problems.append(f"{host} did not print the fast path's 'nothing to do'")
        host_counts = counts.get(host)
        if host_counts is None:
            problems.append(f"{host} is not in the PLAY RECAP")
        elif host_counts.get("changed", 0) or host_counts.get("failed", 0) or host_counts.get("unreachable", 0):
            problems.append(f"{host}: " + " ".join(f"{key}={host_counts.get(key, 0)}" for key in ("changed", "failed", "unreachable")))
    return problems


def playbook(playbook_path: Path, extra: list[str]) -> tuple[float, str]:
    """Wall seconds of one ansible-playbook run, and its output; exits on failure."""
    argv = [str(BIN / "ansible-playbook"), "-i", str(INVENTORY), str(playbook_path), *extra]
    started = time.perf_counter()
    out = run(argv, PLAYBOOK_TIMEOUT)
    seconds = time.perf_counter() - started
    output = ANSI.sub("", out.stdout + out.stderr)
    if out.returncode != 0:
        raise SystemExit(f"`{' '.join(argv)}` failed (rc {out.returncode}):\n{output[-4000:]}")
    return seconds, output


def spread(times: list[float]) -> dict[str, float]:
    return {"min": round(min(times), 3), "median": round(statistics.median(times), 3), "max": round(max(times), 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="timed rounds (A B [F] each), after one warm-up of each")
    parser.add_argument("--force", action="store_true", help="also time the full no-op rollout (-e rollout_force=true)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    hosts, why_not = precondition()
    if why_not:
        print(f"rollout_noop: {why_not}", file=sys.stderr)
        return 2

    runs = {"A": (ROLLOUT, []), "B": (ONE_TASK, [])}
    if args.force:
        runs["F"] = (ROLLOUT, ["-e", "rollout_force=true"])
    times: dict[str, list[float]] = {name: [] for name in runs}
    force_changed: dict[str, int] = {}
    for round_index in range(args.repeat + 1):
        label = "warm-up" if round_index == 0 else f"round {round_index}/{args.repeat}"
        for name, (path, extra) in runs.items():
            seconds, output = playbook(path, extra)
            if name == "A":
                problems = fast_path_problems(output, hosts)
                if problems:
                    raise SystemExit("rollout_noop: the hosts do not serve the desired state (%s): run "
                                     "`ansible-playbook playbooks/rollout.yml` once, then this again.\n%s"
                                     % ("; ".join(problems), output[-3000:]))
            elif name == "F":
                force_changed = {host: counts.get("changed", 0) for host, counts in recap(output).items()}
            if round_index:
                times[name].append(seconds)
            log(f"{label}: {name} {seconds:.2f} s")

    pairs_ab = [a / b for a, b in zip(times["A"], times["B"], strict=True)]
    report = {
        "hosts": hosts,
        "inventory": str(INVENTORY.relative_to(REPO)),
        "repeat": args.repeat,
        "fast_path_s": [round(t, 3) for t in times["A"]],
        "one_task_s": [round(t, 3) for t in times["B"]],
        "fast_path": spread(times["A"]),
        "one_task": spread(times["B"]),
        "ratio_fast_path_to_one_task": round(statistics.median(pairs_ab), 2),
    }
    if args.force:
        pairs_fb = [f / b for f, b in zip(times["F"], times["B"], strict=True)]
        report.update({"forced_s": [round(t, 3) for t in times["F"]], "forced": spread(times["F"]),
                       "ratio_forced_to_one_task": round(statistics.median(pairs_fb), 2),
                       "forced_changed_last_run": force_changed})

    print(f"hosts:      {', '.join(hosts)} ({report['inventory']}; {args.repeat} rounds after one warm-up each)")
    print(f"{'':44}{'min':>8}{'median':>8}{'max':>8}  (wall s)")
    rows = [("A", "rollout.yml, fast path (nothing to do)", "fast_path"), ("B", "one_task.yml, one ping per host", "one_task")]
    if args.force:
        rows.append(("F", "rollout.yml -e rollout_force=true", "forced"))
    for name, what, key in rows:
        figures = report[key]
        print(f"{name}  {what:<41}{figures['min']:8.2f}{figures['median']:8.2f}{figures['max']:8.2f}")
    print(f"ratio A/B   {report['ratio_fast_path_to_one_task']:.2f}  (median of the {args.repeat} round-by-round ratios)")
    if args.force:
        print(f"ratio F/B   {report['ratio_forced_to_one_task']:.2f}  (last forced run: changed="
              + ", ".join(f"{host}:{n}" for host, n in force_changed.items()) + ")")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
