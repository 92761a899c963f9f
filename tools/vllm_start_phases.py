#!/usr/bin/env python
"""Where a vLLM start on a sandbox host goes (issue 40), from the host's journal: the last start of each
vllm-*.service unit, split at the lines vLLM and systemd write on the way.

  tools/vllm_start_phases.py HOST [UNIT...]   (no UNIT: every vllm-*.service the host's journal saw start)

Phases (seconds from systemd's "Starting"): the API server's Python and torch imported (its first line), its
config resolved, the engine core's process up (its imports), the worker's process up and loading the model,
weights loaded, KV cache profiled and warmed up, the API listening, and systemd's "Started" - which the unit's
ExecStartPost (llmops-vllm wait-ready: ours) holds back until vLLM answers."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import List, Optional, Tuple

REPO = Path(__file__).resolve().parent.parent
MARKS = (
    ("api server imported", re.compile(r"\(APIServer pid=\d+\) INFO .*(api_utils|non-default args)")),
    ("config resolved", re.compile(r"Resolved architecture")),
    ("engine core up", re.compile(r"Initializing a V1 LLM engine")),
    ("worker up, loading", re.compile(r"Starting to load model")),
    ("weights loaded", re.compile(r"Loading weights took")),
    ("kv cache profiled, warmed up", re.compile(r"init engine \(profile, create kv cache, warmup model\) took")),
    ("api listening", re.compile(r"Starting vLLM (API )?server on")),
    ("started (ExecStartPost done)", re.compile(r"systemd\[1\]: Started vllm-")),
)


def journal(host: str, unit: str) -> List[Tuple[float, str]]:
    config = Path(os.environ.get("LLMOPS_SANDBOX_DIR") or REPO / ".sandbox").resolve() / "ssh_config"
    out = subprocess.run(["ssh", "-F", str(config), host, "journalctl --no-pager -o short-unix -u %s" % unit],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    lines = []
    for line in out.splitlines():
        stamp, _sep, rest = line.partition(" ")
        try:
            lines.append((float(stamp), rest))
        except ValueError:
            continue
    return lines


def phases(lines: List[Tuple[float, str]]) -> Optional[List[Tuple[str, float]]]:
    """[(phase, seconds since "Starting")] of the last start in the lines; None without one."""
    starts = [i for i, (_t, text) in enumerate(lines) if "systemd[1]: Starting vllm-" in text]
    if not starts:
        return None
    begin = lines[starts[-1]][0]
    found: List[Tuple[str, float]] = []
    for name, pattern in MARKS:
        hit = next((t for t, text in lines[starts[-1]:] if pattern.search(text)), None)
        if hit is not None:
            found.append((name, round(hit - begin, 1)))
    return found


def units(host: str) -> List[str]:
    config = Path(os.environ.get("LLMOPS_SANDBOX_DIR") or REPO / ".sandbox").resolve() / "ssh_config"
    out = subprocess.run(["ssh", "-F", str(config), host, "journalctl --no-pager -o cat -t systemd"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    return sorted(set(re.findall(r"^Starting (vllm-[^ ]+\.service)", out, re.M)))


def main(argv: List[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    host = argv[0]
    for unit in argv[1:] or units(host):
        found = phases(journal(host, unit))
        if not found:
            continue
        print("%s %s, last start:" % (host, unit))
        previous = 0.0
        for name, seconds in found:
            print("  %-32s %6.1f s  (+%.1f)" % (name, seconds, seconds - previous))
            previous = seconds
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
