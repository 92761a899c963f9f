"""Real ansible-playbook runs against the sandbox's hosts, for the live test files: one environment
(the checkout's ansible.cfg, the sandbox's state directory) and one way to run a playbook with an
inventory of the test's own, no benchmark gate and no parser probes, reports in that inventory."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Tuple

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
STATE_DIR = Path(os.environ.get("LLMOPS_SANDBOX_DIR") or REPO / ".sandbox")
ENV = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1",
           LLMOPS_SANDBOX_DIR=str(STATE_DIR))


def run(argv: Any, timeout: float = 900, **kwargs: Any) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, check=False, **kwargs)


def playbook(inventory: Path, play: str, *extra: str, timeout: float = 1500) -> Tuple[subprocess.CompletedProcess, float]:
    """playbooks/<play> on the inventory directory; (the process, seconds it took)."""
    started = time.monotonic()
    proc = run([BIN / "ansible-playbook", "-i", inventory, REPO / "playbooks" / play,
                "-e", json.dumps({"rollout_benchmark": False, "rollout_parser_probes": "never",
                                  "rollout_report_dir": str(inventory / "reports")}),
                *extra], timeout=timeout, env=ENV, cwd=REPO)
    return proc, round(time.monotonic() - started, 1)
