#!/usr/bin/env python
"""Count the vLLM starts of each stage of `make test` (issue 40): every start of a vllm-*.service unit on
the sandbox hosts is one line "Starting vllm-<name>.service" in the host's journal (systemd writes it when
the start begins: a start that fails and an automatic restart count too; "Started" follows only once the
unit's ExecStartPost saw vLLM ready).

  tools/vllm_starts.py cpu HOSTS                  print the CPU time each host's machine has used so far
                                                   (its cgroup's usage_usec), as "HOST=USEC,..."
  tools/vllm_starts.py count STAGE SINCE HOSTS [SNAPSHOT [TIMES]]
                                                   append "STAGE<TAB>HOST<TAB>STARTS<TAB>HOST_CPU_S<TAB>
                                                   CONTROLLER_CPU_S" per host to out/logs/starts.tsv (HOSTS:
                                                   comma-separated): the starts since SINCE (epoch s), the
                                                   host's CPU seconds since SNAPSHOT (`cpu`'s output) and the
                                                   controller's CPU seconds of the stage (TIMES: a file with
                                                   bash's `times` of the subshell that ran it; first host only)
  tools/vllm_starts.py table [FILE]                print the starts and CPU seconds per stage, and the totals

tools/run_tests.sh counts after each sandbox stage, on the hosts that stage used (each lane has its own
host, so stages running at the same time on different hosts do not mix). A vLLM started from a shell,
not through a unit (the takeover scenario's hand-started server), is not counted.

The CPU seconds say where the run's time goes: it is CPU-bound (docs/contributing.md), so a stage costs the
run about half the CPU seconds it uses - the hosts' (vLLM, the modules Ansible runs there) and the
controller's (ansible-playbook, ssh, pytest; not what a stage leaves running in the background)."""
from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STARTS = REPO / "out" / "logs" / "starts.tsv"
STARTING = re.compile(r"^Starting (vllm-[^ ]+\.service)")
MACHINES = Path("/sys/fs/cgroup/unified/machine")
TIMES = re.compile(r"(\d+)m([0-9.]+)s")


def ssh_config() -> Path:
    return Path(os.environ.get("LLMOPS_SANDBOX_DIR") or REPO / ".sandbox").resolve() / "ssh_config"


def starts_since(host: str, since: int) -> int:
    """Starts of vllm-* units on HOST since the epoch second SINCE (-1: the host could not be asked)."""
    proc = subprocess.run(["ssh", "-F", str(ssh_config()), "-o", "ConnectTimeout=10", host,
                           "journalctl --no-pager -o cat -t systemd --since @%d" % since],
                          capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        return -1
    return sum(1 for line in proc.stdout.splitlines() if STARTING.match(line))


def host_cpu_usec(host: str) -> int:
    """CPU microseconds the host's machine (systemd-nspawn's cgroup) has used; -1 when unknown."""
    for path in (MACHINES / host / "cpu.stat", MACHINES / ("%s.scope" % host) / "cpu.stat"):
        try:
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.startswith("usage_usec "):
                    return int(line.split()[1])
        except OSError:
            continue
    return -1


def snapshot(hosts: list[str]) -> str:
    return ",".join("%s=%d" % (host, host_cpu_usec(host)) for host in hosts)


def controller_cpu(times_file: str) -> float:
    """The children's user + system seconds from bash's `times` (its second line); -1 when unknown."""
    try:
        lines = Path(times_file).read_text(encoding="utf-8").strip().splitlines()
    except OSError:
        return -1.0
    found = TIMES.findall(lines[-1]) if lines else []
    return sum(int(m) * 60 + float(s) for m, s in found) if len(found) == 2 else -1.0


def count(stage: str, since: int, hosts: list[str], before: str = "", times_file: str = "") -> None:
    start = {k: int(v) for k, _sep, v in (item.partition("=") for item in before.split(",") if item)}
    controller = controller_cpu(times_file) if times_file else -1.0
    STARTS.parent.mkdir(parents=True, exist_ok=True)
    with STARTS.open("a", encoding="utf-8") as out:
        for i, host in enumerate(hosts):
            now = host_cpu_usec(host)
            used = (now - start[host]) / 1e6 if now >= 0 and start.get(host, -1) >= 0 else -1.0
            fields = (stage, host, starts_since(host, since), used, controller if i == 0 else 0.0)
            out.write("%s\t%s\t%d\t%.1f\t%.1f\n" % fields)


def table(path: Path) -> list[str]:
    """Starts, hosts' and controller's CPU seconds per stage (a line of an older file has no CPU columns)."""
    per_stage: dict[str, list[float]] = collections.OrderedDict()
    unknown: dict[str, set[int]] = collections.defaultdict(set)
    for line in path.read_text(encoding="utf-8").splitlines():
        fields = line.split("\t")
        stage, values = fields[0], [float(v) for v in fields[2:5]] + [-1.0] * (5 - len(fields))
        row = per_stage.setdefault(stage, [0.0, 0.0, 0.0])
        for column, value in enumerate(values):
            if value < 0:
                unknown[stage].add(column)
            else:
                row[column] += value

    def cell(stage: str, column: int, value: float) -> str:
        return "%d%s" % (round(value), "+?" if column in unknown[stage] else "")

    lines = ["%-48s %7s %10s %10s" % ("vLLM starts and CPU s (stage, on its hosts)", "starts", "hosts cpu", "ctrl cpu")]
    lines += ["%-48s %7s %10s %10s" % ((stage[:48],) + tuple(cell(stage, c, v) for c, v in enumerate(row)))
              for stage, row in per_stage.items()]
    lines.append("%-48s %7d %10d %10d" % (("total",) + tuple(round(sum(r[c] for r in per_stage.values())) for c in range(3))))
    return lines


def main(argv: list[str]) -> int:
    if len(argv) >= 4 and argv[0] == "count":
        count(argv[1], int(argv[2]), [h for h in argv[3].split(",") if h], *argv[4:6])
        return 0
    if len(argv) == 2 and argv[0] == "cpu":
        print(snapshot([h for h in argv[1].split(",") if h]))
        return 0
    if argv and argv[0] == "table":
        path = Path(argv[1]) if len(argv) > 1 else STARTS
        if path.exists():
            print("\n".join(table(path)))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
