# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Reader of sysfs: NVIDIA GPUs under ``sys/bus/pci/devices`` and NUMA nodes under
``sys/devices/system/node``, from a live root or a captured tree.

Target side: Python standard library only.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Optional

from ansible_collections.llmops.vllm.plugins.module_utils.topology_common import (
    bus_key,
    cpulist,
    int_or_none,
    parse_cpulist,
    pcie_fact,
    read_text,
)

__all__ = [
    "read_sysfs",
]


# PCIe transfer rate per lane (GT/s, as sysfs writes it) -> generation.
_PCIE_GEN_BY_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6, 128.0: 7}


def _pcie_gen_from_speed(speed: Optional[str]) -> Optional[int]:
    """PCIe generation from a sysfs link speed such as '32.0 GT/s PCIe' (None if unknown)."""
    match = re.match(r"^\s*(\d+(?:\.\d+)?)\s*GT/s", speed or "")
    return _PCIE_GEN_BY_GTS.get(float(match.group(1))) if match else None


def _positive(value: Optional[str]) -> Optional[int]:
    number = int_or_none(value)
    return number if number is not None and number > 0 else None


def _entries(directory: str) -> List[str]:
    """The names in ``directory``; none when it is missing (containers, non-Linux)."""
    try:
        return os.listdir(directory)
    except OSError:
        return []


def read_sysfs(root: str = "/") -> Dict[str, Any]:
    """NVIDIA GPUs and NUMA nodes as the kernel sees them under ``root`` (a real or a fake tree).

    GPUs: every PCI device under ``sys/bus/pci/devices`` with vendor 0x10de and a display class
    (0x03xxxx; NVSwitches and audio functions are other classes). Per GPU: ``bus_id`` (sysfs
    spelling), ``device_id``, ``numa_node`` (None when the kernel says -1: VMs and single-node
    firmware do not tell) and ``pcie`` from current/max link width and speed.

    NUMA nodes from ``sys/devices/system/node/node*``: ``cpus`` (cpulist; empty for a memory-only
    node, then ``cpuless`` is true) and ``memory_bytes`` (MemTotal of the node's meminfo).

    Returns ``{"gpus": [...sorted by bus id], "numa_nodes": {id: {...}}}``; a missing tree gives
    empty results (containers, non-Linux).
    """
    gpus: List[Dict[str, Any]] = []
    pci_dir = os.path.join(root, "sys", "bus", "pci", "devices")
    for address in _entries(pci_dir):
        device_dir = os.path.join(pci_dir, address)
        vendor = (read_text(os.path.join(device_dir, "vendor")) or "").lower()
        device_class = (read_text(os.path.join(device_dir, "class")) or "").lower()
        if vendor != "0x10de" or not device_class.startswith("0x03"):
            continue
        numa_node = int_or_none(read_text(os.path.join(device_dir, "numa_node")))
        speed_current = read_text(os.path.join(device_dir, "current_link_speed"))
        speed_max = read_text(os.path.join(device_dir, "max_link_speed"))
        pcie = pcie_fact(_pcie_gen_from_speed(speed_current), _pcie_gen_from_speed(speed_max),
                         _positive(read_text(os.path.join(device_dir, "current_link_width"))),
                         _positive(read_text(os.path.join(device_dir, "max_link_width"))))
        pcie["speed_current"] = speed_current or None
        pcie["speed_max"] = speed_max or None
        gpus.append({
            "bus_id": address,
            "device_id": read_text(os.path.join(device_dir, "device")),
            "numa_node": numa_node if numa_node is not None and numa_node >= 0 else None,
            "pcie": pcie,
        })
    gpus.sort(key=lambda gpu: bus_key(gpu["bus_id"]) or (1 << 32,))

    numa_nodes: Dict[int, Dict[str, Any]] = {}
    node_dir = os.path.join(root, "sys", "devices", "system", "node")
    for entry in _entries(node_dir):
        match = re.match(r"^node(\d+)$", entry)
        if not match:
            continue
        cpus_text = read_text(os.path.join(node_dir, entry, "cpulist"))
        if cpus_text is None:
            continue
        try:
            cpus = parse_cpulist(cpus_text)
        except ValueError:
            continue
        memory: Optional[int] = None
        meminfo = read_text(os.path.join(node_dir, entry, "meminfo")) or ""
        found = re.search(r"MemTotal:\s*(\d+)\s*kB", meminfo)
        if found:
            memory = int(found.group(1)) * 1024
        numa_nodes[int(match.group(1))] = {"cpus": cpulist(cpus), "cpu_count": len(cpus),
                                           "cpuless": not cpus, "memory_bytes": memory}
    return {"gpus": gpus, "numa_nodes": dict(sorted(numa_nodes.items()))}
