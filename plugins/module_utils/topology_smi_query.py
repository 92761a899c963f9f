# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Parser of ``nvidia-smi --query-gpu=... --format=csv`` and of ``nvidia-smi -q``: names, UUIDs,
bus ids, memory, PCIe link and compute capability per GPU; and of the memory in use and the compute
processes per GPU (``--query-gpu=index,uuid,memory.used``, ``--query-compute-apps``).

Target side: Python standard library only.
"""

from __future__ import annotations

import csv
import re
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, TypedDict, cast

from ansible_collections.llmops.vllm.plugins.module_utils.gpu_health import smi_q_health
from ansible_collections.llmops.vllm.plugins.module_utils.topology_common import (
    MIB,
    TopologyError,
    content_lines,
    infer_compute_capability,
    int_or_none,
    is_missing,
    pcie_fact,
    require_text,
)

__all__ = [
    "QUERY_FIELDS",
    "MEMORY_USED_FIELDS",
    "COMPUTE_APPS_FIELDS",
    "parse_query_csv",
    "parse_memory_used_csv",
    "parse_compute_apps_csv",
]


# The fields the live probe asks for (``--query-gpu=<these>``); the parser reads any subset.
QUERY_FIELDS = ("index", "name", "uuid", "pci.bus_id", "memory.total", "pcie.link.gen.current",
                "pcie.link.gen.max", "pcie.link.width.current", "pcie.link.width.max", "compute_cap",
                "driver_version")

# What is in use on each GPU: the index GPUs are named by, the UUID compute processes are reported
# under, the memory in use (``--query-gpu=<these>``); and the compute processes
# (``--query-compute-apps=<these>``; process_name is left out: a name may hold commas).
MEMORY_USED_FIELDS = ("index", "uuid", "memory.used")
COMPUTE_APPS_FIELDS = ("gpu_uuid", "pid", "used_memory")

_UNIT_BYTES = {"b": 1, "kib": 1 << 10, "mib": MIB, "gib": 1 << 30, "tib": 1 << 40,
               "kb": 1 << 10, "mb": MIB, "gb": 1 << 30}

_QUERY_EXPECTED = ("`nvidia-smi --query-gpu=index,... --format=csv` output (with its header row) "
                   "or `nvidia-smi -q` output")
# Query field -> our key. nvidia-smi prints the canonical name in the header; the aliases it
# also accepts on the command line are listed for hand-made files.
_QUERY_FIELDS = {
    "index": "index",
    "name": "name", "gpu_name": "name",
    "uuid": "uuid", "gpu_uuid": "uuid",
    "pci.bus_id": "bus_id", "gpu_bus_id": "bus_id",
    "memory.total": "memory_bytes",
    "pcie.link.gen.current": "gen_current", "pcie.link.gen.gpucurrent": "gen_current",
    "pcie.link.gen.max": "gen_max", "pcie.link.gen.gpumax": "gen_max",
    "pcie.link.width.current": "width_current",
    "pcie.link.width.max": "width_max",
    "compute_cap": "compute_capability",
    "driver_version": "driver_version",
}


class MemoryUsed(TypedDict):
    """One GPU of parse_memory_used_csv()."""
    index: int
    uuid: Optional[str]
    memory_used_mib: Optional[int]


class ComputeApp(TypedDict):
    """One process of parse_compute_apps_csv()."""
    gpu_uuid: str
    pid: int
    used_memory_mib: Optional[int]


# One CSV row: column name -> (value, unit from the header or None).
_Columns = Dict[str, Tuple[str, Optional[str]]]
# One `nvidia-smi -q` section: path of names -> value (the first of repeated paths), and all its
# (path, value) entries in order (the Processes section repeats its keys once per process).
_Section = Dict[Tuple[str, ...], str]
_Entries = List[Tuple[Tuple[str, ...], str]]
_SMI_Q_GPU_RE = re.compile(r"^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")


def _size_bytes(value: Optional[str], default_unit: Optional[str] = None) -> Optional[int]:
    """Bytes from '143771 MiB', '97887 MiB', or a bare number in the header's unit."""
    if is_missing(value):
        return None
    match = re.match(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$", cast(str, value))
    if not match:
        return None
    unit = (match.group(2) or default_unit or "").lower()
    if unit not in _UNIT_BYTES:
        return None
    return int(float(match.group(1)) * _UNIT_BYTES[unit])


def _compute_capability(value: Optional[str]) -> Optional[str]:
    """'9.0' from nvidia-smi's compute_cap ('9.0', '12.0'); None when missing."""
    if is_missing(value):
        return None
    match = re.match(r"^\s*(\d+)\.(\d+)\s*$", cast(str, value))
    return "%d.%d" % (int(match.group(1)), int(match.group(2))) if match else None


def _empty_query_gpu(index: int) -> Dict[str, Any]:
    return {"index": index, "name": None, "uuid": None, "bus_id": None, "memory_bytes": None,
            "compute_capability": None, "pcie": pcie_fact(), "driver_version": None}


def parse_query_csv(text: Optional[str], source: str = "query file") -> Dict[str, Any]:
    """Parse ``nvidia-smi --query-gpu=... --format=csv`` (any subset of fields) or ``nvidia-smi -q``.

    The format is detected: ``-q`` output has the "==NVSMI LOG==" banner or "GPU 00000000:06:00.0"
    section lines; everything else must be CSV with nvidia-smi's header row (``index`` is
    required: it is what every other source is matched by). Units come from the value ("143771
    MiB") or, with ``--format=csv,nounits``, from the header ("memory.total [MiB]").

    Returns ``{"format": "query-csv"|"nvidia-smi-q", "gpus": [...], "driver_version",
    "cuda_version"}``; per GPU (sorted by index): ``index``, ``name``, ``uuid``, ``bus_id``,
    ``memory_bytes`` (MiB x 2^20), ``compute_capability`` (reported, else inferred from the name,
    else None), ``pcie`` {gen_current, gen_max, width_current, width_max, degraded} and
    ``driver_version``. Missing fields are None.
    """
    require_text(text, source, _QUERY_EXPECTED)
    lines = content_lines(cast(str, text))
    if any(_SMI_Q_GPU_RE.match(line) for line in lines) or any("NVSMI LOG" in line for line in lines):
        return _parse_nvidia_smi_q(lines, source)
    return _parse_query_csv_lines(lines, source)


def _csv_rows(lines: Sequence[str], source: str, expected: str, required: Sequence[str],
              aliases: Optional[Mapping[str, str]] = None) -> List[Tuple[int, _Columns]]:
    """The rows of nvidia-smi CSV (header row first) as [(line number, {column: (value, unit)})].

    Column names are lower case without their unit, ``aliases`` (name -> name) applied; the unit comes
    from the header (``memory.used [MiB]``), None when it has none. Comment lines (``# ...``) are
    skipped. Raises TopologyError naming a ``required`` column the header lacks.
    """
    numbered = [(number + 1, line) for number, line in enumerate(lines)
                if line.strip() and not line.lstrip().startswith("#")]
    if not numbered:
        raise TopologyError("%s: only comments; expected %s" % (source, expected))
    header_line, header_text = numbered[0]
    header = next(csv.reader([header_text], skipinitialspace=True))
    fields: List[Tuple[str, Optional[str]]] = []
    for column in header:
        match = cast("re.Match[str]", re.match(r"^\s*(.*?)\s*(?:\[(.*)\])?\s*$", column))
        name = match.group(1).lower()
        fields.append(((aliases or {}).get(name, name), (match.group(2) or "").strip() or None))
    names = [name for name, _unit in fields]
    for name in required:
        if name not in names:
            raise TopologyError("%s line %d: no `%s` column in the header %r; expected %s"
                                % (source, header_line, name, header_text.strip()[:120], expected))
    rows: List[Tuple[int, _Columns]] = []
    for number, line in numbered[1:]:
        values = next(csv.reader([line], skipinitialspace=True))
        if len(values) != len(fields):
            raise TopologyError("%s line %d: %d values, the header has %d columns (%s)"
                                % (source, number, len(values), len(fields), ", ".join(names)))
        rows.append((number, {name: (value.strip(), unit) for (name, unit), value in zip(fields, values)}))
    return rows


def _parse_query_csv_lines(lines: Sequence[str], source: str) -> Dict[str, Any]:
    gpus: List[Dict[str, Any]] = []
    driver_version: Optional[str] = None
    for number, columns in _csv_rows(lines, source, _QUERY_EXPECTED, ("index",)):
        row: _Columns = {}
        for name, cell in columns.items():
            key = _QUERY_FIELDS.get(name)
            if key is not None:
                row[key] = cell
        index = int_or_none(row["index"][0])
        if index is None:
            raise TopologyError("%s line %d: index %r is not a number" % (source, number, row["index"][0]))
        gpu = _empty_query_gpu(index)
        for key in ("name", "uuid", "bus_id", "driver_version"):
            if key in row and not is_missing(row[key][0]):
                gpu[key] = row[key][0]
        if "memory_bytes" in row:
            value, unit = row["memory_bytes"]
            gpu["memory_bytes"] = _size_bytes(value, unit)
        if "compute_capability" in row:
            gpu["compute_capability"] = _compute_capability(row["compute_capability"][0])
        if gpu["compute_capability"] is None:
            gpu["compute_capability"] = infer_compute_capability(gpu["name"])
        gpu["pcie"] = pcie_fact(*(int_or_none(row[key][0]) if key in row else None
                                  for key in ("gen_current", "gen_max", "width_current", "width_max")))
        driver_version = driver_version or gpu["driver_version"]
        gpus.append(gpu)

    indices = [gpu["index"] for gpu in gpus]
    if len(set(indices)) != len(indices):
        raise TopologyError("%s: the same index appears twice (%s)" % (source, indices))
    gpus.sort(key=lambda gpu: gpu["index"])
    return {"format": "query-csv", "gpus": gpus, "driver_version": driver_version, "cuda_version": None}


_MEMORY_USED_EXPECTED = "`nvidia-smi --query-gpu=index,uuid,memory.used --format=csv` output (with its header row)"
_COMPUTE_APPS_EXPECTED = "`nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv` output (with its header row)"
# nvidia-smi prints the canonical names in the header; the aliases are what it accepts on the command line.
_MEMORY_USED_ALIASES = {"gpu_uuid": "uuid"}
_COMPUTE_APPS_ALIASES = {"uuid": "gpu_uuid", "used_gpu_memory": "used_memory"}


def _mib(value: Optional[str], unit: Optional[str]) -> Optional[int]:
    """MiB from '70112 MiB' or a bare number in the header's unit; None for [N/A] and the like."""
    size = _size_bytes(value, unit)
    return None if size is None else size // MIB


def parse_memory_used_csv(text: Optional[str], source: str = "memory query") -> List[MemoryUsed]:
    """The memory in use per GPU from ``nvidia-smi --query-gpu=index,uuid,memory.used --format=csv``
    (any columns, with or without ``nounits``, as long as ``index`` and ``memory.used`` are there).

    Returns ``[{"index", "uuid", "memory_used_mib"}]`` sorted by index; ``uuid`` is None without that
    column, ``memory_used_mib`` None where nvidia-smi has no answer ([N/A]).
    """
    require_text(text, source, _MEMORY_USED_EXPECTED)
    gpus: List[MemoryUsed] = []
    for number, columns in _csv_rows(content_lines(cast(str, text)), source, _MEMORY_USED_EXPECTED, ("index", "memory.used"),
                                     _MEMORY_USED_ALIASES):
        index = int_or_none(columns["index"][0])
        if index is None:
            raise TopologyError("%s line %d: index %r is not a number" % (source, number, columns["index"][0]))
        uuid = columns.get("uuid", (None, None))[0]
        gpus.append({"index": index, "uuid": None if is_missing(uuid) else uuid,
                     "memory_used_mib": _mib(*columns["memory.used"])})
    indices = [gpu["index"] for gpu in gpus]
    if len(set(indices)) != len(indices):
        raise TopologyError("%s: the same index appears twice (%s)" % (source, indices))
    return sorted(gpus, key=lambda gpu: gpu["index"])


def parse_compute_apps_csv(text: Optional[str], source: str = "compute process query") -> List[ComputeApp]:
    """The compute processes from ``nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv``.

    Returns ``[{"gpu_uuid", "pid", "used_memory_mib"}]`` in nvidia-smi's order; empty for the header
    alone (no process), for no output at all (``noheader``) and for "No running processes found".
    ``used_memory_mib`` is None where nvidia-smi has no answer ([N/A], e.g. in a container).
    """
    lines = [line for line in content_lines(text or "")
             if line.strip() and "no running processes found" not in line.lower()]
    if not lines:
        return []
    apps: List[ComputeApp] = []
    for number, columns in _csv_rows(lines, source, _COMPUTE_APPS_EXPECTED, COMPUTE_APPS_FIELDS, _COMPUTE_APPS_ALIASES):
        pid = int_or_none(columns["pid"][0])
        if pid is None:
            raise TopologyError("%s line %d: pid %r is not a number" % (source, number, columns["pid"][0]))
        apps.append({"gpu_uuid": columns["gpu_uuid"][0], "pid": pid, "used_memory_mib": _mib(*columns["used_memory"])})
    return apps


def _smi_q_sections(lines: Sequence[str]) -> Tuple[_Section, List[Tuple[str, _Section, _Entries]]]:
    """``nvidia-smi -q`` as (top-level values, [(bus id, {path tuple: value}, [(path, value)])]) by indentation."""
    top: _Section = {}
    gpus: List[Tuple[str, _Section, _Entries]] = []
    stack: List[Tuple[int, str]] = []  # (indent, section name)
    current = top
    entries: _Entries = []
    for line in lines:
        if not line.strip() or line.startswith("="):
            continue
        match = _SMI_Q_GPU_RE.match(line)
        if match:
            current, entries = {}, []
            gpus.append((match.group(1), current, entries))
            stack = []
            continue
        indent = len(line) - len(line.lstrip())
        while stack and stack[-1][0] >= indent:
            stack.pop()
        body = line.strip()
        if ":" in body:
            key, value = body.split(":", 1)
            path = tuple(name for _indent, name in stack) + (key.strip(),)
            current.setdefault(path, value.strip())
            entries.append((path, value.strip()))
        else:
            stack.append((indent, body))
    return top, gpus


def _section_reader(values: _Section) -> Callable[..., Optional[str]]:
    """value(*path) -> the value at that path of one GPU's section, None when missing or N/A."""
    def value(*path: str) -> Optional[str]:
        found = values.get(path)
        return None if is_missing(found) else found
    return value


def _parse_nvidia_smi_q(lines: Sequence[str], source: str) -> Dict[str, Any]:
    top, sections = _smi_q_sections(lines)
    if not sections:
        raise TopologyError("%s: `nvidia-smi -q` banner but no `GPU <bus id>` section" % source)
    gpus: List[Dict[str, Any]] = []
    # nvidia-smi's index is its enumeration order, which is PCI bus order: the order of the
    # sections. ("Minor Number" is the /dev/nvidiaN number, not the index.)
    for index, (bus_id, values, entries) in enumerate(sections):
        value = _section_reader(values)
        gpu = _empty_query_gpu(index)
        gpu["name"] = value("Product Name")
        gpu["uuid"] = value("GPU UUID")
        gpu["bus_id"] = value("PCI", "Bus Id") or bus_id
        gpu["memory_bytes"] = _size_bytes(value("FB Memory Usage", "Total"))
        gpu["compute_capability"] = infer_compute_capability(gpu["name"], value("Product Architecture"))
        link = ("PCI", "GPU Link Info")
        gpu["pcie"] = pcie_fact(int_or_none(value(*link + ("PCIe Generation", "Current"))),
                                int_or_none(value(*link + ("PCIe Generation", "Max"))),
                                int_or_none(value(*link + ("Link Width", "Current"))),
                                int_or_none(value(*link + ("Link Width", "Max"))))
        gpu["driver_version"] = None if is_missing(top.get(("Driver Version",))) else top[("Driver Version",)]
        gpu["health"] = smi_q_health(value, entries)
        gpus.append(gpu)
    cuda = top.get(("CUDA Version",))
    return {"format": "nvidia-smi-q", "gpus": gpus,
            "driver_version": gpus[0]["driver_version"],
            "cuda_version": None if is_missing(cuda) else cuda}
