# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Parser of ``numactl -H`` (``numactl --hardware``): the host's NUMA nodes, their CPUs and memory.

Target side: Python standard library only.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, cast

from ansible_collections.llmops.vllm.plugins.module_utils.topology_common import (
    TopologyError,
    content_lines,
    cpulist,
    require_text,
)

__all__ = [
    "parse_numactl",
]


_NUMACTL_EXPECTED = "`numactl -H` (`numactl --hardware`) output"


def parse_numactl(text: Optional[str], source: str = "numactl file") -> Dict[str, Any]:
    """Parse ``numactl -H`` / ``numactl --hardware``.

    Returns ``{"nodes": {id: {...}}, "distances": {id: {id: distance}}}``. Per node: ``cpus``
    (compressed to a cpulist, "0-63,128-191", so it compares with nvidia-smi's CPU affinity),
    ``cpu_count``, ``size_mb``/``free_mb`` (numactl's MB are MiB) and ``cpuless``: true for a
    memory-only node (CXL memory, HBM, a GH200's GPU memory) that has no CPUs to bind to.
    "No NUMA available on this system" gives no nodes.
    """
    require_text(text, source, _NUMACTL_EXPECTED)
    nodes: Dict[int, Dict[str, Any]] = {}
    distances: Dict[int, Dict[int, int]] = {}
    distance_columns: Optional[List[int]] = None
    available = False
    for number, line in enumerate(content_lines(cast(str, text)), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("No NUMA available"):
            return {"nodes": {}, "distances": {}}
        if re.match(r"^available:\s*\d+\s+nodes?\b", stripped):
            available = True
            continue
        match = re.match(r"^node\s+(\d+)\s+cpus:\s*(.*)$", stripped)
        if match:
            try:
                cpus = [int(cpu) for cpu in match.group(2).split()]
            except ValueError:
                raise TopologyError("%s line %d: node %s cpus %r are not CPU numbers"
                                    % (source, number, match.group(1), match.group(2)))
            node = nodes.setdefault(int(match.group(1)), {})
            node.update({"cpus": cpulist(cpus), "cpu_count": len(cpus), "cpuless": not cpus})
            continue
        match = re.match(r"^node\s+(\d+)\s+(size|free):\s*(\d+)\s*MB$", stripped)
        if match:
            nodes.setdefault(int(match.group(1)), {})["%s_mb" % match.group(2)] = int(match.group(3))
            continue
        match = re.match(r"^node((?:\s+\d+)+)$", stripped)
        if match:
            distance_columns = [int(node) for node in match.group(1).split()]
            continue
        match = re.match(r"^(\d+):((?:\s+\d+)+)$", stripped)
        if match and distance_columns:
            distances[int(match.group(1))] = dict(zip(distance_columns,
                                                      (int(d) for d in match.group(2).split())))
    if not nodes:
        what = "an `available:` line but" if available else "no `available:` line and"
        raise TopologyError("%s: %s no `node N cpus:` lines; expected %s" % (source, what, _NUMACTL_EXPECTED))
    for node in nodes.values():
        node.setdefault("cpus", "")
        node.setdefault("cpu_count", 0)
        node.setdefault("cpuless", True)
        node.setdefault("size_mb", None)
        node.setdefault("free_mb", None)
    return {"nodes": dict(sorted(nodes.items())), "distances": distances}
