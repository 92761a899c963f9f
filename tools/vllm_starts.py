#!/usr/bin/env python
"""Count the vLLM starts of each stage of `make test` (issue 40): every start of a vllm-*.service unit on
the sandbox hosts is one line "Starting vllm-<name>.service" in the host's journal (systemd writes it when
the start begins: a start that fails and an automatic restart count too; "Started" follows only once the
unit's ExecStartPost saw vLLM ready).

  tools/vllm_starts.py count STAGE SINCE HOSTS     append "STAGE<TAB>HOST<TAB>STARTS" per host to
                                                   out/logs/starts.tsv (HOSTS: comma-separated): the
                                                   starts since SINCE (epoch s)
  tools/vllm_starts.py table [FILE]                print the starts per stage and the total

tools/run_tests.sh counts after each sandbox stage, on the hosts that stage used (each lane has its own
host, so stages running at the same time on different hosts do not mix). A vLLM started from a shell,
not through a unit (the takeover scenario's hand-started server), is not counted."""
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


def count(stage: str, since: int, hosts: list[str]) -> None:
    STARTS.parent.mkdir(parents=True, exist_ok=True)
    with STARTS.open("a", encoding="utf-8") as out:
        for host in hosts:
            out.write("%s\t%s\t%d\n" % (stage, host, starts_since(host, since)))


def table(path: Path) -> list[str]:
    per_stage: dict[str, int] = collections.OrderedDict()
    unknown = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        stage, _host, starts = line.split("\t")
        if int(starts) < 0:
            unknown.add(stage)
            continue
        per_stage[stage] = per_stage.get(stage, 0) + int(starts)
    lines = ["%-60s %7s" % ("vLLM starts (stage, on its hosts)", "starts")]
    lines += ["%-60s %7s" % (stage[:60], "%d%s" % (n, "+?" if stage in unknown else "")) for stage, n in per_stage.items()]
    lines.append("%-60s %7d" % ("total", sum(per_stage.values())))
    return lines


def main(argv: list[str]) -> int:
    if len(argv) >= 4 and argv[0] == "count":
        count(argv[1], int(argv[2]), [h for arg in argv[3:] for h in arg.split(",") if h])
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
