# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The memory a vLLM unit really holds, and whether it grows: the soak's leak check.

:func:`unit_pss_kib` sums the proportional set size (PSS, /proc/PID/smaps_rollup) over a unit's main
process and every process below it - shared pages counted once across them, which the RSS sum would
count for each worker. It reads /proc only: cgroup memory counters are not available everywhere (not
inside the sandbox's nspawn hosts). :func:`leak_verdict` fits a least-squares line through the samples
of the last window and calls a slope above the limit a leak.

bench/soak.py runs this on a sandbox host under load; a canary soak in a fleet rollout can use the same
two functions. Target side: Python standard library only, and no import from this collection (the
bench sends this file to the host as it is).
"""

from __future__ import annotations

import os
import subprocess
from typing import Dict, List, Optional, Sequence, Tuple

PROC = '/proc'


def pss_kib(pid: int, proc: str = PROC) -> Optional[int]:
    """PSS of one process in KiB (smaps_rollup, else the sum over smaps); None when it is gone or unreadable."""
    for name, rollup in (('smaps_rollup', True), ('smaps', False)):
        try:
            with open(os.path.join(proc, str(pid), name)) as handle:
                total = 0
                for line in handle:
                    if line.startswith('Pss:'):
                        total += int(line.split()[1])
                        if rollup:
                            break
                return total
        except (OSError, ValueError, IndexError):
            continue
    return None


def tree(pid: int, proc: str = PROC) -> List[int]:
    """``pid`` and every process below it."""
    children: Dict[int, List[int]] = {}
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        try:
            with open(os.path.join(proc, name, 'stat')) as handle:
                stat = handle.read()
            parent = int(stat[stat.rindex(')') + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(name))
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(children.get(current, []))
    return sorted(out)


def main_pid(unit: str) -> int:
    """systemd's MainPID of a unit (0 when it does not run)."""
    out = subprocess.run(['systemctl', 'show', '-p', 'MainPID', '--value', unit], capture_output=True, text=True,
                         check=False).stdout.strip()
    return int(out) if out.isdigit() else 0


def unit_pss_kib(unit: str, proc: str = PROC) -> Dict[str, object]:
    """{pid, pids, pss_kib} of a running unit: PSS summed over its main process's tree."""
    pid = main_pid(unit)
    if not pid:
        raise ValueError('%s does not run (MainPID 0); start it before the soak' % unit)
    pids = tree(pid, proc)
    sizes = [pss_kib(member, proc) for member in pids]
    return {'pid': pid, 'pids': pids, 'pss_kib': sum(size for size in sizes if size is not None)}


def slope_per_minute(samples: Sequence[Tuple[float, float]]) -> float:
    """The least-squares slope of (seconds, MiB) samples, in MiB per minute."""
    count = len(samples)
    if count < 2:
        raise ValueError('a slope needs two samples or more, got %d' % count)
    mean_t = sum(sample[0] for sample in samples) / count
    mean_y = sum(sample[1] for sample in samples) / count
    spread = sum((sample[0] - mean_t) ** 2 for sample in samples)
    if spread == 0:
        raise ValueError('the samples were all taken at the same time')
    return 60.0 * sum((t - mean_t) * (y - mean_y) for t, y in samples) / spread


def leak_verdict(samples: Sequence[Tuple[float, float]], window_s: float = 300.0,
                 max_mib_per_min: float = 2.0) -> Dict[str, object]:
    """Whether memory grows: the slope over the samples of the last ``window_s`` seconds against the limit.

    ``samples``: (seconds since start, MiB) in time order. Returns {slope_mib_per_min, window_s, samples,
    first_mib, last_mib, max_mib_per_min, leaking}."""
    if not samples:
        raise ValueError('no samples')
    end = samples[-1][0]
    window = [sample for sample in samples if sample[0] >= end - window_s]
    slope = slope_per_minute(window)
    return {'slope_mib_per_min': round(slope, 3), 'window_s': window_s, 'samples': len(window),
            'first_mib': round(window[0][1], 1), 'last_mib': round(window[-1][1], 1),
            'max_mib_per_min': max_mib_per_min, 'leaking': slope > max_mib_per_min}
