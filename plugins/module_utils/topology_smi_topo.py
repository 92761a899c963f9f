# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Parser of ``nvidia-smi topo -m``: the GPU x GPU link matrix, CPU and NUMA affinity, NICs.

Target side: Python standard library only.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Sequence, Tuple, cast

from ansible_collections.llmops.vllm.plugins.module_utils.topology_common import (
    TopologyError,
    content_lines,
    int_or_none,
    is_missing,
    require_text,
)

__all__ = [
    "parse_topo_matrix",
]


# The link vocabulary of `nvidia-smi topo -m` (its Legend). SOC is the pre-2017 name of SYS.
_LINK_RE = re.compile(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)$")

_TOPO_EXPECTED = "`nvidia-smi topo -m` output"
# Header columns after the device columns; several words each, so whitespace alone cannot split
# them (the author of a capture may have turned tabs into spaces).
_TOPO_ATTRIBUTE_COLUMNS = (("GPU", "NUMA", "ID"), ("CPU", "Affinity"), ("NUMA", "Affinity"))
_DEVICE_COLUMN_RE = re.compile(r"^(GPU\d+|NIC\d+|[a-z][\w.-]*)$")
_GPU_COLUMN_RE = re.compile(r"^GPU(\d+)$")


def _topo_header_columns(tokens: Sequence[str]) -> Tuple[List[str], List[str]]:
    """Split the header row into device columns and attribute columns."""
    devices: List[str] = []
    position = 0
    while position < len(tokens) and _DEVICE_COLUMN_RE.match(tokens[position]):
        devices.append(tokens[position])
        position += 1
    attributes: List[str] = []
    while position < len(tokens):
        for words in _TOPO_ATTRIBUTE_COLUMNS:
            if tuple(tokens[position:position + len(words)]) == words:
                attributes.append(" ".join(words))
                position += len(words)
                break
        else:
            # A column this parser does not know yet: keep it, one word, so the known ones
            # after it still line up.
            attributes.append(tokens[position])
            position += 1
    return devices, attributes


def _topo_numa(value: Optional[str]) -> Optional[int]:
    """The NUMA Affinity cell: an int, or None for N/A (VMs, single-node hosts on old drivers)."""
    if is_missing(value):
        return None
    return int_or_none(value)


def parse_topo_matrix(text: Optional[str], source: str = "topo file") -> Dict[str, Any]:
    """Parse ``nvidia-smi topo -m`` as it really comes.

    Accepts tab- or space-separated columns, ANSI underline escapes on the header, the empty cell
    some drivers print after "NUMA Affinity" (which is why cells are read as whitespace-separated
    words, not tab-separated fields), with or without the "GPU NUMA ID" column and the Legend,
    NIC rows and columns, and anything before the matrix (``#`` comments, a shell prompt, a
    "NVIDIA Topology:" title).

    Returns ``{"gpus": [...], "links": [[...]], "nics": [...]}``: per GPU (sorted by index)
    ``index``, ``cpu_affinity`` (string as printed, None for N/A), ``numa_node`` (int or None)
    and ``gpu_numa_id`` (the GPU memory's own NUMA node on coherent systems such as GH200, else
    None); ``links`` is the GPU x GPU matrix with the cells exactly as printed ("X", "NV18",
    "PIX", ...); each NIC has ``name``, ``device`` (from the NIC Legend, e.g. "mlx5_0", or None)
    and ``gpu_links`` (its link to each GPU, in GPU order). NICs are never GPUs.

    Raises TopologyError naming ``source`` when the text is not ``topo -m`` output.
    """
    require_text(text, source, _TOPO_EXPECTED)
    lines = content_lines(cast(str, text))

    header_at: Optional[int] = None
    for number, line in enumerate(lines):
        tokens = line.split()
        # The header is the first row that starts with GPU0 and is not GPU0's own row ("GPU0 X").
        if tokens and tokens[0] == "GPU0" and (len(tokens) == 1 or tokens[1] != "X"):
            header_at = number
            break
    if header_at is None:
        raise TopologyError("%s: no GPU header row found; expected %s (a header row starting with "
                            "GPU0, then one row per GPU)" % (source, _TOPO_EXPECTED))

    devices, attributes = _topo_header_columns(lines[header_at].split())
    gpu_columns = [name for name in devices if _GPU_COLUMN_RE.match(name)]

    rows: Dict[str, Tuple[Dict[str, str], List[str]]] = {}
    end = len(lines)
    for number in range(header_at + 1, len(lines)):
        tokens = lines[number].split()
        if not tokens:
            if rows:
                end = number
                break
            continue
        label = tokens[0]
        if label not in devices:
            if rows:
                end = number
                break
            raise TopologyError("%s line %d: expected the row of %s after the header, found %r"
                                % (source, number + 1, devices[0], lines[number].strip()))
        if label in rows:
            raise TopologyError("%s line %d: a second row for %s" % (source, number + 1, label))
        cells = tokens[1:1 + len(devices)]
        if len(cells) < len(devices):
            raise TopologyError("%s line %d: row %s has %d link cells, expected %d (one per device "
                                "column of the header: %s)" % (source, number + 1, label, len(cells),
                                                               len(devices), " ".join(devices)))
        for column, cell in zip(devices, cells):
            if not _LINK_RE.match(cell):
                hint = " (is this `nvidia-smi topo -p2p` output?)" if cell in ("OK", "NS", "CNS") else ""
                raise TopologyError("%s line %d: %s/%s is %r, expected one of X, NV<n>, PIX, PXB, "
                                    "PHB, NODE, SYS%s" % (source, number + 1, label, column, cell, hint))
        if cells[devices.index(label)] != "X":
            raise TopologyError("%s line %d: %s/%s is %r, expected X (self)"
                                % (source, number + 1, label, label, cells[devices.index(label)]))
        rows[label] = (dict(zip(devices, cells)), tokens[1 + len(devices):])

    missing = [name for name in gpu_columns if name not in rows]
    if missing:
        raise TopologyError("%s: the header lists %s but there is no row for %s"
                            % (source, " ".join(gpu_columns), " ".join(missing)))

    # "NIC0: mlx5_0" lines of the NIC Legend name the NICs.
    nic_devices: Dict[str, str] = {}
    for line in lines[end:]:
        match = re.match(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$", line)
        if match:
            nic_devices[match.group(1)] = match.group(2)

    gpu_columns.sort(key=lambda name: int(cast("re.Match[str]", _GPU_COLUMN_RE.match(name)).group(1)))
    gpus: List[Dict[str, Any]] = []
    for name in gpu_columns:
        values = dict(zip(attributes, rows[name][1]))
        affinity = values.get("CPU Affinity")
        gpus.append({
            "index": int(cast("re.Match[str]", _GPU_COLUMN_RE.match(name)).group(1)),
            "cpu_affinity": None if is_missing(affinity) else affinity,
            "numa_node": _topo_numa(values.get("NUMA Affinity")),
            "gpu_numa_id": _topo_numa(values.get("GPU NUMA ID")),
        })
    links = [[rows[row][0][column] for column in gpu_columns] for row in gpu_columns]
    nics = [{"name": name, "device": nic_devices.get(name, None if name.startswith("NIC") else name),
             "gpu_links": [rows[gpu][0][name] for gpu in gpu_columns]}
            for name in devices if name not in gpu_columns]
    return {"gpus": gpus, "links": links, "nics": nics}
