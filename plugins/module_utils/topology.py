# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""GPU topology facts of a host: which GPUs, how they are linked, which NUMA node each sits on.

The serving planner needs four things from the hardware: how many GPUs and how much memory each
has, how every pair of GPUs is linked (NVLink or which kind of PCIe path), which NUMA node (and so
which CPUs) each GPU belongs to, and whether a link is trained below its width. No single tool is
reliable for all of it: virtual machines answer -1 in sysfs and "Not Supported" in NVML for the
NUMA node while ``nvidia-smi topo -m`` knows it, old drivers lack ``compute_cap``, and people
paste captures with their whitespace rewritten. So each source has its own small parser here, and
``build_topology`` merges them with a fixed order of trust and says, in ``warnings``, where they
disagree.

Sources and their parsers (plain text or a directory in, plain data out):

- ``parse_topo_matrix``: ``nvidia-smi topo -m``
- ``parse_query_csv``: ``nvidia-smi --query-gpu=... --format=csv`` or ``nvidia-smi -q``
- ``parse_numactl``: ``numactl -H`` / ``numactl --hardware``
- ``read_sysfs``: ``/sys/bus/pci/devices`` and ``/sys/devices/system/node``
- ``nvml_snapshot``: NVML through the optional ``pynvml`` module (nvidia-ml-py), as a JSON-ready
  dict that can be recorded on a GPU host and replayed in tests

``probe`` runs the commands on the live host (the ``gpu_topology_info`` module) and
``build_topology`` merges captured outputs (the ``llmops-vllm topology`` CLI); both return the same
keys.

Target side: Python standard library only; ``pynvml`` is imported lazily and is optional.
"""

from __future__ import annotations

import csv
import os
import re
import shutil

__all__ = [
    "TopologyError",
    "parse_topo_matrix",
    "parse_query_csv",
    "parse_numactl",
    "read_sysfs",
    "read_host",
    "nvml_snapshot",
    "build_topology",
    "probe",
    "infer_compute_capability",
    "cpulist",
    "parse_cpulist",
    "QUERY_FIELDS",
    "USE_NVML_CHOICES",
]


class TopologyError(ValueError):
    """An input cannot be read as the tool output it claims to be, or a probe cannot run."""


# --------------------------------------------------------------------------------------------
# Small shared helpers
# --------------------------------------------------------------------------------------------

# nvidia-smi underlines the header row when stdout is a terminal (ESC[4m ... ESC[0m); captures
# made from a terminal keep those bytes.
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")

# The link vocabulary of `nvidia-smi topo -m` (its Legend). SOC is the pre-2017 name of SYS.
_LINK_RE = re.compile(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)$")
_NVLINK_RE = re.compile(r"^NV\d+$")

# Values nvidia-smi prints when it has no answer.
_MISSING = {"", "n/a", "[n/a]", "not supported", "[not supported]", "unknown", "[unknown error]",
            "unknown error", "requested functionality has been deprecated"}

_MIB = 1 << 20
_UNIT_BYTES = {"b": 1, "kib": 1 << 10, "mib": _MIB, "gib": 1 << 30, "tib": 1 << 40,
               "kb": 1 << 10, "mb": _MIB, "gb": 1 << 30}

# PCIe transfer rate per lane (GT/s, as sysfs writes it) -> generation.
_PCIE_GEN_BY_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6, 128.0: 7}


def _missing(value):
    return value is None or value.strip().lower() in _MISSING


def _int_or_none(value):
    """An int from '16', '16x', ' 5 '; None for N/A, '[Not Supported]' and other non-numbers."""
    if value is None:
        return None
    match = re.match(r"^\s*(-?\d+)\s*x?\s*$", str(value))
    return int(match.group(1)) if match else None


def parse_cpulist(text):
    """The set of CPU ids in a Linux cpulist such as '0-63,128-191' (the kernel's format).

    Raises ValueError (not TopologyError: callers name the input) when it is not a cpulist.
    """
    cpus = set()
    text = (text or "").strip()
    if not text:
        return cpus
    for part in text.split(","):
        part = part.strip()
        match = re.match(r"^(\d+)(?:-(\d+))?$", part)
        if not match:
            raise ValueError("not a cpulist: %r" % text)
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if last < first:
            raise ValueError("not a cpulist: %r" % text)
        cpus.update(range(first, last + 1))
    return cpus


def cpulist(cpus):
    """Compress CPU ids into the kernel's cpulist form: [0, 1, 2, 3, 8] -> '0-3,8'.

    numactl prints one id per CPU ("0 1 2 ... 63 128 ..."); nvidia-smi, sysfs and taskset use
    the compressed form, so facts compare and read the same whichever source they came from.
    """
    ranges = []
    for cpu in sorted(set(cpus)):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join("%d" % a if a == b else "%d-%d" % (a, b) for a, b in ranges)


def _bus_key(bus_id):
    """A comparable key for a PCI address in any spelling.

    nvidia-smi and NVML write a 32-bit domain in upper case ('00000000:06:00.0'), sysfs a 16-bit
    one in lower case ('0000:06:00.0'); the domain may also be missing ('06:00.0').
    """
    if not bus_id:
        return None
    match = re.match(r"^\s*(?:([0-9A-Fa-f]{1,8}):)?([0-9A-Fa-f]{1,2}):([0-9A-Fa-f]{1,2})\.([0-7])\s*$",
                     str(bus_id))
    if not match:
        return None
    domain = int(match.group(1), 16) if match.group(1) else 0
    return (domain, int(match.group(2), 16), int(match.group(3), 16), int(match.group(4)))


def _nvidia_bus_id(bus_id):
    """A PCI address written the way nvidia-smi writes it: '00000000:06:00.0'."""
    key = _bus_key(bus_id)
    if key is None:
        return bus_id
    return "%08X:%02X:%02X.%X" % key


def _size_bytes(value, default_unit=None):
    """Bytes from '143771 MiB', '97887 MiB', or a bare number in the header's unit."""
    if _missing(value):
        return None
    match = re.match(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$", value)
    if not match:
        return None
    unit = (match.group(2) or default_unit or "").lower()
    if unit not in _UNIT_BYTES:
        return None
    return int(float(match.group(1)) * _UNIT_BYTES[unit])


def _pcie(gen_current=None, gen_max=None, width_current=None, width_max=None):
    """The pcie fact: generation and width, current and max, and whether the width is degraded.

    Only the width counts as degraded: GPUs drop the link generation at idle to save power (Gen1
    on an idle L40S is normal) and train back up under load, but a narrower link stays narrow
    (a x16 card in an x8 slot or on a bad riser).
    """
    degraded = None
    if width_current is not None and width_max is not None:
        degraded = width_current < width_max
    return {"gen_current": gen_current, "gen_max": gen_max, "width_current": width_current,
            "width_max": width_max, "degraded": degraded}


# Compute capability from the product name when the source does not report it (nvidia-smi
# before the compute_cap field, `nvidia-smi -q`). First match wins, so specific names come
# before the families that contain them. Names are NVIDIA's marketing names as nvidia-smi
# prints them; anything unknown is None rather than a guess.
_COMPUTE_CAPABILITY_BY_NAME = (
    (r"\bRTX PRO \d+\b.*\bBlackwell\b", "12.0"),   # RTX PRO 6000 Blackwell Server/Workstation
    (r"\bRTX 50\d\d\b", "12.0"),                      # GeForce RTX 5060 Ti ... 5090
    (r"\bG?B300\b", "10.3"),
    (r"\bG?B200\b", "10.0"),
    (r"\bG?H(100|200|800|20)\b", "9.0"),              # H100, H200, H800, H20, GH200
    (r"\bRTX \d+ Ada\b", "8.9"),                      # RTX 6000 Ada Generation
    (r"\bRTX 40\d\d\b", "8.9"),
    (r"\bL(4|20|40|40S)\b", "8.9"),
    (r"\bRTX A\d+\b", "8.6"),                         # RTX A6000, A5000, ...
    (r"\bRTX 30\d\d\b", "8.6"),
    (r"\bA(100|800|30)\b", "8.0"),
    (r"\bA(10G?|16|2|40)\b", "8.6"),
    (r"\bT4\b", "7.5"),
    (r"\bV100", "7.0"),
)
# `nvidia-smi -q` "Product Architecture" when the name is unknown; only architectures with a
# single compute capability (Ampere is 8.0 or 8.6, Blackwell 10.x or 12.x).
_COMPUTE_CAPABILITY_BY_ARCHITECTURE = {"hopper": "9.0", "ada lovelace": "8.9", "turing": "7.5",
                                       "volta": "7.0"}


def infer_compute_capability(name, architecture=None):
    """Compute capability ('9.0') from a GPU's product name (or architecture), None if unknown."""
    for pattern, capability in _COMPUTE_CAPABILITY_BY_NAME:
        if name and re.search(pattern, name):
            return capability
    if architecture:
        return _COMPUTE_CAPABILITY_BY_ARCHITECTURE.get(architecture.strip().lower())
    return None


def _compute_capability(value):
    """'9.0' from nvidia-smi's compute_cap ('9.0', '12.0'); None when missing."""
    if _missing(value):
        return None
    match = re.match(r"^\s*(\d+)\.(\d+)\s*$", value)
    return "%d.%d" % (int(match.group(1)), int(match.group(2))) if match else None


def _content_lines(text):
    """Lines without ANSI escapes and carriage returns."""
    return [_ANSI_RE.sub("", line).rstrip("\r") for line in text.splitlines()]


def _require_text(text, source, expected):
    if text is None or not isinstance(text, str):
        raise TopologyError("%s: no text given; expected %s" % (source, expected))
    if not text.strip():
        raise TopologyError("%s: empty; expected %s" % (source, expected))


# --------------------------------------------------------------------------------------------
# nvidia-smi topo -m
# --------------------------------------------------------------------------------------------

_TOPO_EXPECTED = "`nvidia-smi topo -m` output"
# Header columns after the device columns; several words each, so whitespace alone cannot split
# them (the author of a capture may have turned tabs into spaces).
_TOPO_ATTRIBUTE_COLUMNS = (("GPU", "NUMA", "ID"), ("CPU", "Affinity"), ("NUMA", "Affinity"))
_DEVICE_COLUMN_RE = re.compile(r"^(GPU\d+|NIC\d+|[a-z][\w.-]*)$")
_GPU_COLUMN_RE = re.compile(r"^GPU(\d+)$")


def _topo_header_columns(tokens):
    """Split the header row into device columns and attribute columns."""
    devices = []
    position = 0
    while position < len(tokens) and _DEVICE_COLUMN_RE.match(tokens[position]):
        devices.append(tokens[position])
        position += 1
    attributes = []
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


def _topo_numa(value):
    """The NUMA Affinity cell: an int, or None for N/A (VMs, single-node hosts on old drivers)."""
    if _missing(value):
        return None
    return _int_or_none(value)


def parse_topo_matrix(text, source="topo file"):
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
    _require_text(text, source, _TOPO_EXPECTED)
    lines = _content_lines(text)

    header_at = None
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

    rows = {}
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
    nic_devices = {}
    for line in lines[end:]:
        match = re.match(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$", line)
        if match:
            nic_devices[match.group(1)] = match.group(2)

    gpu_columns.sort(key=lambda name: int(_GPU_COLUMN_RE.match(name).group(1)))
    gpus = []
    for name in gpu_columns:
        values = dict(zip(attributes, rows[name][1]))
        affinity = values.get("CPU Affinity")
        gpus.append({
            "index": int(_GPU_COLUMN_RE.match(name).group(1)),
            "cpu_affinity": None if _missing(affinity) else affinity,
            "numa_node": _topo_numa(values.get("NUMA Affinity")),
            "gpu_numa_id": _topo_numa(values.get("GPU NUMA ID")),
        })
    links = [[rows[row][0][column] for column in gpu_columns] for row in gpu_columns]
    nics = [{"name": name, "device": nic_devices.get(name, None if name.startswith("NIC") else name),
             "gpu_links": [rows[gpu][0][name] for gpu in gpu_columns]}
            for name in devices if name not in gpu_columns]
    return {"gpus": gpus, "links": links, "nics": nics}


# --------------------------------------------------------------------------------------------
# nvidia-smi --query-gpu=... --format=csv   and   nvidia-smi -q
# --------------------------------------------------------------------------------------------

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
_SMI_Q_GPU_RE = re.compile(r"^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")


def _empty_query_gpu(index):
    return {"index": index, "name": None, "uuid": None, "bus_id": None, "memory_bytes": None,
            "compute_capability": None, "pcie": _pcie(), "driver_version": None}


def parse_query_csv(text, source="query file"):
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
    _require_text(text, source, _QUERY_EXPECTED)
    lines = _content_lines(text)
    if any(_SMI_Q_GPU_RE.match(line) for line in lines) or any("NVSMI LOG" in line for line in lines):
        return _parse_nvidia_smi_q(lines, source)
    return _parse_query_csv_lines(lines, source)


def _parse_query_csv_lines(lines, source):
    numbered = [(number + 1, line) for number, line in enumerate(lines)
                if line.strip() and not line.lstrip().startswith("#")]
    if not numbered:
        raise TopologyError("%s: only comments; expected %s" % (source, _QUERY_EXPECTED))
    header_line, header_text = numbered[0]
    header = next(csv.reader([header_text], skipinitialspace=True))
    fields = []
    for column in header:
        match = re.match(r"^\s*(.*?)\s*(?:\[(.*)\])?\s*$", column)
        fields.append((match.group(1).lower(), (match.group(2) or "").strip() or None))
    names = [name for name, _unit in fields]
    if "index" not in names:
        raise TopologyError("%s line %d: no `index` column in the header %r; expected %s"
                            % (source, header_line, header_text.strip()[:120], _QUERY_EXPECTED))

    gpus = []
    driver_version = None
    for number, line in numbered[1:]:
        values = next(csv.reader([line], skipinitialspace=True))
        if len(values) != len(fields):
            raise TopologyError("%s line %d: %d values, the header has %d columns (%s)"
                                % (source, number, len(values), len(fields), ", ".join(names)))
        row = {}
        for (name, unit), value in zip(fields, values):
            key = _QUERY_FIELDS.get(name)
            if key is not None:
                row[key] = (value.strip(), unit)
        index = _int_or_none(row["index"][0])
        if index is None:
            raise TopologyError("%s line %d: index %r is not a number" % (source, number, row["index"][0]))
        gpu = _empty_query_gpu(index)
        for key in ("name", "uuid", "bus_id", "driver_version"):
            if key in row and not _missing(row[key][0]):
                gpu[key] = row[key][0]
        if "memory_bytes" in row:
            value, unit = row["memory_bytes"]
            gpu["memory_bytes"] = _size_bytes(value, unit)
        if "compute_capability" in row:
            gpu["compute_capability"] = _compute_capability(row["compute_capability"][0])
        if gpu["compute_capability"] is None:
            gpu["compute_capability"] = infer_compute_capability(gpu["name"])
        gpu["pcie"] = _pcie(*(_int_or_none(row[key][0]) if key in row else None
                              for key in ("gen_current", "gen_max", "width_current", "width_max")))
        driver_version = driver_version or gpu["driver_version"]
        gpus.append(gpu)

    indices = [gpu["index"] for gpu in gpus]
    if len(set(indices)) != len(indices):
        raise TopologyError("%s: the same index appears twice (%s)" % (source, indices))
    gpus.sort(key=lambda gpu: gpu["index"])
    return {"format": "query-csv", "gpus": gpus, "driver_version": driver_version, "cuda_version": None}


def _smi_q_sections(lines):
    """``nvidia-smi -q`` as (top-level values, [(bus id, {path tuple: value})]) by indentation."""
    top = {}
    gpus = []
    stack = []  # (indent, section name)
    current = top
    for line in lines:
        if not line.strip() or line.startswith("="):
            continue
        match = _SMI_Q_GPU_RE.match(line)
        if match:
            current = {}
            gpus.append((match.group(1), current))
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
        else:
            stack.append((indent, body))
    return top, gpus


def _section_reader(values):
    """value(*path) -> the value at that path of one GPU's section, None when missing or N/A."""
    def value(*path):
        found = values.get(path)
        return None if _missing(found) else found
    return value


def _parse_nvidia_smi_q(lines, source):
    top, sections = _smi_q_sections(lines)
    if not sections:
        raise TopologyError("%s: `nvidia-smi -q` banner but no `GPU <bus id>` section" % source)
    gpus = []
    # nvidia-smi's index is its enumeration order, which is PCI bus order: the order of the
    # sections. ("Minor Number" is the /dev/nvidiaN number, not the index.)
    for index, (bus_id, values) in enumerate(sections):
        value = _section_reader(values)
        gpu = _empty_query_gpu(index)
        gpu["name"] = value("Product Name")
        gpu["uuid"] = value("GPU UUID")
        gpu["bus_id"] = value("PCI", "Bus Id") or bus_id
        gpu["memory_bytes"] = _size_bytes(value("FB Memory Usage", "Total"))
        gpu["compute_capability"] = infer_compute_capability(gpu["name"], value("Product Architecture"))
        link = ("PCI", "GPU Link Info")
        gpu["pcie"] = _pcie(_int_or_none(value(*link + ("PCIe Generation", "Current"))),
                            _int_or_none(value(*link + ("PCIe Generation", "Max"))),
                            _int_or_none(value(*link + ("Link Width", "Current"))),
                            _int_or_none(value(*link + ("Link Width", "Max"))))
        gpu["driver_version"] = None if _missing(top.get(("Driver Version",))) else top[("Driver Version",)]
        gpus.append(gpu)
    cuda = top.get(("CUDA Version",))
    return {"format": "nvidia-smi-q", "gpus": gpus,
            "driver_version": gpus[0]["driver_version"],
            "cuda_version": None if _missing(cuda) else cuda}


# --------------------------------------------------------------------------------------------
# numactl -H
# --------------------------------------------------------------------------------------------

_NUMACTL_EXPECTED = "`numactl -H` (`numactl --hardware`) output"


def parse_numactl(text, source="numactl file"):
    """Parse ``numactl -H`` / ``numactl --hardware``.

    Returns ``{"nodes": {id: {...}}, "distances": {id: {id: distance}}}``. Per node: ``cpus``
    (compressed to a cpulist, "0-63,128-191", so it compares with nvidia-smi's CPU affinity),
    ``cpu_count``, ``size_mb``/``free_mb`` (numactl's MB are MiB) and ``cpuless``: true for a
    memory-only node (CXL memory, HBM, a GH200's GPU memory) that has no CPUs to bind to.
    "No NUMA available on this system" gives no nodes.
    """
    _require_text(text, source, _NUMACTL_EXPECTED)
    nodes = {}
    distances = {}
    distance_columns = None
    available = False
    for number, line in enumerate(_content_lines(text), 1):
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


# --------------------------------------------------------------------------------------------
# sysfs
# --------------------------------------------------------------------------------------------

def _read_text(path):
    try:
        with open(path) as handle:
            return handle.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _pcie_gen_from_speed(speed):
    """PCIe generation from a sysfs link speed such as '32.0 GT/s PCIe' (None if unknown)."""
    match = re.match(r"^\s*(\d+(?:\.\d+)?)\s*GT/s", speed or "")
    return _PCIE_GEN_BY_GTS.get(float(match.group(1))) if match else None


def _positive(value):
    number = _int_or_none(value)
    return number if number is not None and number > 0 else None


def read_sysfs(root="/"):
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
    gpus = []
    pci_dir = os.path.join(root, "sys", "bus", "pci", "devices")
    try:
        addresses = os.listdir(pci_dir)
    except OSError:
        addresses = []
    for address in addresses:
        device_dir = os.path.join(pci_dir, address)
        vendor = (_read_text(os.path.join(device_dir, "vendor")) or "").lower()
        device_class = (_read_text(os.path.join(device_dir, "class")) or "").lower()
        if vendor != "0x10de" or not device_class.startswith("0x03"):
            continue
        numa_node = _int_or_none(_read_text(os.path.join(device_dir, "numa_node")))
        speed_current = _read_text(os.path.join(device_dir, "current_link_speed"))
        speed_max = _read_text(os.path.join(device_dir, "max_link_speed"))
        pcie = _pcie(_pcie_gen_from_speed(speed_current), _pcie_gen_from_speed(speed_max),
                     _positive(_read_text(os.path.join(device_dir, "current_link_width"))),
                     _positive(_read_text(os.path.join(device_dir, "max_link_width"))))
        pcie["speed_current"] = speed_current or None
        pcie["speed_max"] = speed_max or None
        gpus.append({
            "bus_id": address,
            "device_id": _read_text(os.path.join(device_dir, "device")),
            "numa_node": numa_node if numa_node is not None and numa_node >= 0 else None,
            "pcie": pcie,
        })
    gpus.sort(key=lambda gpu: _bus_key(gpu["bus_id"]) or (1 << 32,))

    numa_nodes = {}
    node_dir = os.path.join(root, "sys", "devices", "system", "node")
    try:
        entries = os.listdir(node_dir)
    except OSError:
        entries = []
    for entry in entries:
        match = re.match(r"^node(\d+)$", entry)
        if not match:
            continue
        cpus_text = _read_text(os.path.join(node_dir, entry, "cpulist"))
        if cpus_text is None:
            continue
        try:
            cpus = parse_cpulist(cpus_text)
        except ValueError:
            continue
        memory = None
        meminfo = _read_text(os.path.join(node_dir, entry, "meminfo")) or ""
        found = re.search(r"MemTotal:\s*(\d+)\s*kB", meminfo)
        if found:
            memory = int(found.group(1)) * 1024
        numa_nodes[int(match.group(1))] = {"cpus": cpulist(cpus), "cpu_count": len(cpus),
                                           "cpuless": not cpus, "memory_bytes": memory}
    return {"gpus": gpus, "numa_nodes": dict(sorted(numa_nodes.items()))}


def read_host(root="/"):
    """Host memory (MemTotal of ``root/proc/meminfo``) and online CPU count, None when unknown."""
    memory = None
    found = re.search(r"^MemTotal:\s*(\d+)\s*kB", _read_text(os.path.join(root, "proc", "meminfo")) or "",
                      re.M)
    if found:
        memory = int(found.group(1)) * 1024
    cpu_count = None
    online = _read_text(os.path.join(root, "sys", "devices", "system", "cpu", "online"))
    if online:
        try:
            cpu_count = len(parse_cpulist(online)) or None
        except ValueError:
            cpu_count = None
    if cpu_count is None and os.path.abspath(root) == "/":
        cpu_count = os.cpu_count()
    return {"memory_bytes": memory, "cpu_count": cpu_count}


# --------------------------------------------------------------------------------------------
# NVML
# --------------------------------------------------------------------------------------------

# nvmlDeviceGetTopologyCommonAncestor levels -> the `topo -m` words. INTERNAL (two GPUs on one
# board, e.g. K80/M60) sits behind the board's own PCIe switch, which topo -m shows as PIX.
_NVML_TOPOLOGY_WORDS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
# nvmlDeviceGetNvLinkRemoteDeviceType answers.
_NVLINK_REMOTE_TYPES = {0: "gpu", 1: "ibmnpu", 2: "switch"}


def _load_nvml(nvml_module=None):
    """(pynvml module initialised, None) or (None, why NVML cannot be used)."""
    nvml = nvml_module
    if nvml is None:
        try:
            import pynvml as nvml  # optional: nvidia-ml-py in the interpreter that runs this
        except ImportError as exc:
            return None, "the pynvml module (package nvidia-ml-py) is not installed (%s)" % exc
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ... all mean "no NVML"
        return None, "nvmlInit failed: %s" % (str(exc) or type(exc).__name__)
    return nvml, None


def _text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _nvml_collect(nvml, errors):
    """Everything the snapshot holds, each NVML call on its own so one unsupported call costs
    only its own fact (VMs answer "Not Supported" for NUMA, some drivers lack NVLink queries)."""
    nvml_error = getattr(nvml, "NVMLError", Exception)

    def call(label, function_name, *args, **options):
        function = getattr(nvml, function_name, None)
        try:
            if function is None:
                raise AttributeError("not in this pynvml")
            return function(*args)
        except (nvml_error, AttributeError) as exc:
            message = "%s %s: %s" % (label, function_name, str(exc) or type(exc).__name__)
            # Once per GPU and call: an unsupported per-link call would otherwise repeat 18 times.
            if not options.get("quiet") and message not in errors:
                errors.append(message)
            return None

    snapshot = {"driver_version": _text(call("system", "nvmlSystemGetDriverVersion")),
                "cuda_version": None, "gpus": [], "links": [], "errors": errors}
    cuda = call("system", "nvmlSystemGetCudaDriverVersion")
    if isinstance(cuda, int) and cuda > 0:
        snapshot["cuda_version"] = "%d.%d" % (cuda // 1000, (cuda % 1000) // 10)

    count = call("system", "nvmlDeviceGetCount") or 0
    handles = []
    words = max(1, ((os.cpu_count() or 1) + 63) // 64)
    max_links = getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)
    for position in range(count):
        label = "GPU %d" % position
        handle = call(label, "nvmlDeviceGetHandleByIndex", position)
        if handle is None:
            continue
        index = call(label, "nvmlDeviceGetIndex", handle)
        pci = call(label, "nvmlDeviceGetPciInfo", handle)
        memory = call(label, "nvmlDeviceGetMemoryInfo", handle)
        capability = call(label, "nvmlDeviceGetCudaComputeCapability", handle)
        numa_node = call(label, "nvmlDeviceGetNumaNodeId", handle)
        affinity = call(label, "nvmlDeviceGetCpuAffinity", handle, words)
        cpus = set()
        for word_index, word in enumerate(affinity or []):
            word = int(word)
            cpus.update(word_index * 64 + bit for bit in range(64) if word >> bit & 1)

        nvlinks = []
        for link in range(max_links):
            # PCIe-only GPUs, and link numbers past the GPU's last, answer an error here: the
            # end of the list, not a failure worth recording.
            state = call(label, "nvmlDeviceGetNvLinkState", handle, link, quiet=True)
            if state is None:
                break
            if not state:
                continue
            remote = call(label, "nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
            remote_type = call(label, "nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
            remote_bus_id = _nvidia_bus_id(_text(remote.busId)) if remote is not None else None
            nvlinks.append({"link": link, "remote_bus_id": remote_bus_id,
                            "remote_type": _NVLINK_REMOTE_TYPES.get(remote_type)})

        handles.append(handle)
        snapshot["gpus"].append({
            "index": index if index is not None else position,
            "name": _text(call(label, "nvmlDeviceGetName", handle)),
            "uuid": _text(call(label, "nvmlDeviceGetUUID", handle)),
            "bus_id": _nvidia_bus_id(_text(pci.busId)) if pci is not None else None,
            "memory_bytes": int(memory.total) if memory is not None else None,
            "compute_capability": "%d.%d" % tuple(capability) if capability else None,
            "pcie": _pcie(call(label, "nvmlDeviceGetCurrPcieLinkGeneration", handle),
                          call(label, "nvmlDeviceGetMaxPcieLinkGeneration", handle),
                          call(label, "nvmlDeviceGetCurrPcieLinkWidth", handle),
                          call(label, "nvmlDeviceGetMaxPcieLinkWidth", handle)),
            "numa_node": numa_node if isinstance(numa_node, int) and numa_node >= 0 else None,
            "cpu_affinity": cpulist(cpus) if cpus else None,
            "nvlinks": nvlinks,
        })

    gpus = snapshot["gpus"]
    # Drivers without nvmlDeviceGetNvLinkRemoteDeviceType: a remote that is one of our GPUs is a
    # GPU, anything else an NVSwitch.
    gpu_bus_ids = set(gpu["bus_id"] for gpu in gpus)
    for gpu in gpus:
        for link in gpu["nvlinks"]:
            if link["remote_type"] is None and link["remote_bus_id"]:
                link["remote_type"] = "gpu" if link["remote_bus_id"] in gpu_bus_ids else "switch"

    p2p_nvlink = getattr(nvml, "NVML_P2P_CAPS_INDEX_NVLINK", 2)
    for row, (first, first_handle) in enumerate(zip(gpus, handles)):
        cells = []
        for column, (second, second_handle) in enumerate(zip(gpus, handles)):
            if row == column:
                cells.append("X")
                continue
            pair = "GPU %s/%s" % (first["index"], second["index"])
            count = _nvlink_count(first, second)
            if count and _switch_only(first, second):
                # Through NVSwitches every GPU reaches every other; ask NVML whether these two
                # may talk over NVLink (a VM's fabric partition may not hold both).
                status = call(pair, "nvmlDeviceGetP2PStatus", first_handle, second_handle, p2p_nvlink)
                if status not in (None, 0):
                    count = 0
            if count:
                cells.append("NV%d" % count)
                continue
            level = call(pair, "nvmlDeviceGetTopologyCommonAncestor", first_handle, second_handle)
            cells.append(_NVML_TOPOLOGY_WORDS.get(level))
        snapshot["links"].append(cells)
    return snapshot


def _nvlink_count(first, second):
    """Active NVLinks between two GPUs: direct links to the peer, or, through NVSwitches, the
    smaller of the two GPUs' switch link counts (that is how `topo -m` reports NV18 on HGX)."""
    direct = sum(1 for link in first["nvlinks"]
                 if link["remote_bus_id"] and link["remote_bus_id"] == second["bus_id"])
    if direct:
        return direct
    return min(sum(1 for link in gpu["nvlinks"] if link["remote_type"] == "switch")
               for gpu in (first, second))


def _switch_only(first, second):
    return all(link["remote_type"] == "switch" for gpu in (first, second) for link in gpu["nvlinks"])


def nvml_snapshot(nvml_module=None):
    """What NVML says about every GPU, as a JSON-serialisable dict; None when NVML is unavailable.

    Record it on a GPU host (``json.dump(nvml_snapshot(), ...)``) and pass it to
    ``build_topology(nvml=...)`` in tests. Keys: ``driver_version``, ``cuda_version``, ``gpus``
    (per device: ``index``, ``name``, ``uuid``, ``bus_id``, ``memory_bytes``,
    ``compute_capability``, ``pcie``, ``numa_node`` (None when "Not Supported", as in VMs),
    ``cpu_affinity`` (cpulist), ``nvlinks`` (active links with the remote's bus id and type)),
    ``links`` (GPU x GPU in ``gpus`` order, in `topo -m` words: "NV<n>" for active NVLinks, else
    PIX/PXB/PHB/NODE/SYS from the common PCIe ancestor) and ``errors`` (the NVML calls that
    failed and why). ``nvml_module`` replaces ``pynvml`` (tests).
    """
    nvml, _reason = _load_nvml(nvml_module)
    if nvml is None:
        return None
    try:
        return _nvml_collect(nvml, [])
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # shutting down is best effort; the facts are already collected
            pass


# --------------------------------------------------------------------------------------------
# Merging the sources
# --------------------------------------------------------------------------------------------

def build_topology(topo_text=None, query_text=None, numactl_text=None, sysfs_root=None, nvml=None):
    """The topology facts (the ``llmops-vllm topology --json`` contract) from captured outputs.

    Each argument is optional: ``topo_text`` (``nvidia-smi topo -m``), ``query_text`` (the
    ``--query-gpu`` CSV or ``nvidia-smi -q``), ``numactl_text`` (``numactl -H``), ``sysfs_root``
    (a directory holding ``sys/...``) and ``nvml`` (an ``nvml_snapshot()`` dict).

    Returns a dict with ``gpus`` (sorted by nvidia-smi index: index, name, uuid, bus_id,
    memory_bytes, numa_node, numa_source, cpu_affinity, compute_capability, pcie), ``links``
    (GPU x GPU, "X" on the diagonal, None where no source knows), ``interconnect`` ("nvlink" when
    every pair is NV<n>, "pcie" when none is, "mixed", "none" for 0 or 1 GPU, "unknown" when
    some pair's link is unknown), ``numa_nodes`` ({"<id>": {"gpus", "cpus", ...}}), ``nics``,
    ``gpu_count``, ``driver_version``, ``cuda_version``, ``sources`` and ``warnings``.

    Raises TopologyError when an input cannot be parsed.
    """
    topo = parse_topo_matrix(topo_text) if topo_text is not None else None
    query = parse_query_csv(query_text) if query_text is not None else None
    numactl = parse_numactl(numactl_text) if numactl_text is not None else None
    sysfs = None
    if sysfs_root is not None:
        if not os.path.isdir(sysfs_root):
            raise TopologyError("sysfs root %s: not a directory; expected a directory that holds "
                                "sys/bus/pci/devices and sys/devices/system/node" % sysfs_root)
        sysfs = read_sysfs(sysfs_root)
    if nvml is not None:
        _check_nvml_snapshot(nvml)
    return _assemble(topo=topo, query=query, numactl=numactl, sysfs=sysfs, nvml=nvml)


def _check_nvml_snapshot(nvml):
    if not isinstance(nvml, dict) or not isinstance(nvml.get("gpus"), list):
        raise TopologyError("nvml snapshot: expected a dict with a `gpus` list, as nvml_snapshot() returns")
    for gpu in nvml["gpus"]:
        if not isinstance(gpu, dict) or not isinstance(gpu.get("index"), int):
            raise TopologyError("nvml snapshot: every entry of `gpus` needs an integer `index`")
    links = nvml.get("links") or []
    if links and (len(links) != len(nvml["gpus"]) or any(len(row) != len(links) for row in links)):
        raise TopologyError("nvml snapshot: `links` must be a %dx%d matrix (one row per GPU)"
                            % (len(nvml["gpus"]), len(nvml["gpus"])))


def _first(*candidates):
    for candidate in candidates:
        if candidate is not None:
            return candidate
    return None


def _match_gpus(query, nvml, topo, warnings):
    """Records {index: {"query": gpu, "nvml": gpu, "topo": gpu}} matched by bus id, else index."""
    records = {}
    for gpu in (query or {}).get("gpus", []):
        records[gpu["index"]] = {"query": gpu}
    by_bus = {_bus_key(record["query"]["bus_id"]): index for index, record in records.items()
              if _bus_key(record["query"]["bus_id"])}
    for gpu in (nvml or {}).get("gpus", []):
        key = _bus_key(gpu.get("bus_id"))
        if key in by_bus:
            records[by_bus[key]]["nvml"] = gpu
            continue
        record = records.get(gpu["index"])
        if record is None:
            records[gpu["index"]] = {"nvml": gpu}
        elif key is None or _bus_key((record.get("query") or {}).get("bus_id")) is None:
            record["nvml"] = gpu
        else:
            warnings.append("NVML GPU %d (%s) matches no nvidia-smi GPU by bus id; its NVML facts are "
                            "not used" % (gpu["index"], gpu.get("bus_id")))
    for gpu in (topo or {}).get("gpus", []):
        records.setdefault(gpu["index"], {})["topo"] = gpu

    listed = (("topo -m", topo), ("query", query), ("NVML", nvml))
    counts = [(label, len(data["gpus"])) for label, data in listed if data is not None]
    if len(set(count for _label, count in counts)) > 1:
        warnings.append("the sources list different numbers of GPUs (%s); each GPU is reported with "
                        "what the sources that list it know"
                        % ", ".join("%s %d" % count for count in counts))
    return records


def _attach_sysfs(records, sysfs, warnings):
    """Give each record its sysfs GPU: by bus id, or by position when nothing has a bus id
    (nvidia-smi enumerates GPUs in PCI bus order, which is how read_sysfs sorts them)."""
    sysfs_gpus = list(sysfs["gpus"])
    by_bus = {_bus_key(gpu["bus_id"]): gpu for gpu in sysfs_gpus}
    bus_ids = {index: _bus_of(record) for index, record in records.items()}
    if any(bus_ids.values()):
        used = set()
        for index, record in records.items():
            key = _bus_key(bus_ids[index])
            if key in by_bus:
                record["sysfs"] = by_bus[key]
                used.add(key)
        unused = [gpu["bus_id"] for gpu in sysfs_gpus if _bus_key(gpu["bus_id"]) not in used]
        if unused:
            warnings.append("sysfs lists NVIDIA GPUs that nvidia-smi/NVML do not (%s): bound to another "
                            "driver (vfio) or not initialised" % ", ".join(unused))
    elif records and len(sysfs_gpus) == len(records):
        for index, gpu in zip(sorted(records), sysfs_gpus):
            records[index]["sysfs"] = gpu
    elif sysfs_gpus and records:
        warnings.append("sysfs lists %d NVIDIA GPUs, the other sources %d, and no source gives bus ids "
                        "to match them: sysfs GPU facts not used" % (len(sysfs_gpus), len(records)))
    elif sysfs_gpus:
        warnings.append("sysfs lists %d NVIDIA GPUs (%s) but no nvidia-smi or NVML output describes them: "
                        "is the NVIDIA driver loaded?" % (len(sysfs_gpus),
                                                          ", ".join(gpu["bus_id"] for gpu in sysfs_gpus)))


def _bus_of(record):
    return _first((record.get("query") or {}).get("bus_id"), (record.get("nvml") or {}).get("bus_id"))


_SOURCE_LABELS = {"nvml": "NVML", "sysfs": "sysfs", "topo": "topo -m", "cpu_affinity": "CPU affinity"}


def _numa_for(index, record, node_cpus, warnings):
    """(numa_node, numa_source) by the order of trust NVML, sysfs (when not -1), topo -m, and
    last the one node whose CPUs contain the GPU's CPU affinity (nvidia-smi before the NUMA
    Affinity column). Disagreements become warnings."""
    candidates = []
    for source in ("nvml", "sysfs", "topo"):
        node = (record.get(source) or {}).get("numa_node")
        if node is not None:
            candidates.append((source, node))
    affinity = _first((record.get("topo") or {}).get("cpu_affinity"),
                      (record.get("nvml") or {}).get("cpu_affinity"))
    if not candidates and affinity and node_cpus:
        try:
            cpus = parse_cpulist(affinity)
        except ValueError:
            cpus = set()
        matches = [node for node, node_set in node_cpus.items() if cpus and cpus <= node_set]
        if len(matches) == 1:
            candidates.append(("cpu_affinity", matches[0]))
    if not candidates:
        return None, None
    chosen_source, chosen = candidates[0]
    others = ["%s says %d" % (_SOURCE_LABELS[source], node)
              for source, node in candidates[1:] if node != chosen]
    if others:
        warnings.append("GPU %d: NUMA node %d from %s, but %s; using %s (order of trust: NVML, sysfs, "
                        "topo -m)" % (index, chosen, _SOURCE_LABELS[chosen_source], ", ".join(others),
                                      _SOURCE_LABELS[chosen_source]))
    return chosen, chosen_source


def _merged_pcie(record):
    fields = ("gen_current", "gen_max", "width_current", "width_max")
    values = []
    for field in fields:
        values.append(_first(*((record.get(source) or {}).get("pcie", {}).get(field)
                               for source in ("query", "nvml", "sysfs"))))
    return _pcie(*values)


def _node_cpu_sets(numa_source_nodes):
    sets = {}
    for node, facts in numa_source_nodes.items():
        try:
            sets[node] = parse_cpulist(facts.get("cpus") or "")
        except ValueError:
            continue
    return sets


def _assemble(topo=None, query=None, numactl=None, sysfs=None, nvml=None, warnings=None):
    warnings = list(warnings or [])
    sources = []
    if topo is not None:
        sources.append("topo")
    if query is not None:
        sources.append(query.get("format", "query-csv"))
    if numactl is not None:
        sources.append("numactl")
    if sysfs is not None:
        sources.append("sysfs")
    if nvml is not None:
        sources.append("nvml")

    # NUMA nodes of the host: numactl first (what the operator captured), sysfs fills the rest.
    host_nodes = {}
    for node, facts in ((numactl or {}).get("nodes") or {}).items():
        memory = facts.get("size_mb")
        host_nodes[node] = {"cpus": facts["cpus"], "cpuless": facts["cpuless"],
                            "memory_bytes": memory * _MIB if memory is not None else None}
    for node, facts in ((sysfs or {}).get("numa_nodes") or {}).items():
        host_nodes.setdefault(node, {"cpus": facts["cpus"], "cpuless": facts["cpuless"],
                                     "memory_bytes": facts["memory_bytes"]})
    node_cpus = _node_cpu_sets(host_nodes)

    records = _match_gpus(query, nvml, topo, warnings)
    if sysfs is not None:
        _attach_sysfs(records, sysfs, warnings)

    gpus = []
    for index in sorted(records):
        record = records[index]
        q, n, t, s = (record.get(name) or {} for name in ("query", "nvml", "topo", "sysfs"))
        name = _first(q.get("name"), n.get("name"))
        numa_node, numa_source = _numa_for(index, record, node_cpus, warnings)
        bus_id = _first(q.get("bus_id"), n.get("bus_id"), s.get("bus_id"))
        gpus.append({
            "index": index,
            "name": name,
            "uuid": _first(q.get("uuid"), n.get("uuid")),
            "bus_id": _nvidia_bus_id(bus_id) if bus_id else None,
            # NVML counts bytes; nvidia-smi rounds to MiB.
            "memory_bytes": _first(n.get("memory_bytes"), q.get("memory_bytes")),
            "numa_node": numa_node,
            "numa_source": numa_source,
            "cpu_affinity": _first(t.get("cpu_affinity"), n.get("cpu_affinity")),
            "compute_capability": _first(q.get("compute_capability"), n.get("compute_capability"),
                                         infer_compute_capability(name)),
            "pcie": _merged_pcie(record),
        })

    for gpu in gpus:
        pcie = gpu["pcie"]
        if pcie["degraded"]:
            warnings.append("GPU %d%s: PCIe link width x%d is below its maximum x%d (degraded: check the "
                            "slot, riser or bifurcation setting)"
                            % (gpu["index"], " (%s)" % gpu["bus_id"] if gpu["bus_id"] else "",
                               pcie["width_current"], pcie["width_max"]))

    links = _merged_links(gpus, topo, nvml, warnings)
    numa_nodes = _numa_nodes(gpus, host_nodes, warnings)
    if len(numa_nodes) > 1:
        unknown = [gpu["index"] for gpu in gpus if gpu["numa_node"] is None]
        if unknown:
            warnings.append("NUMA node unknown for GPUs %s on a host with %d NUMA nodes"
                            % (", ".join(map(str, unknown)), len(numa_nodes)))

    return {
        "gpus": gpus,
        "links": links,
        "interconnect": _interconnect(links),
        "numa_nodes": numa_nodes,
        "nics": (topo or {}).get("nics", []),
        "gpu_count": len(gpus),
        "driver_version": _first((query or {}).get("driver_version"), (nvml or {}).get("driver_version")),
        "cuda_version": _first((query or {}).get("cuda_version"), (nvml or {}).get("cuda_version")),
        "sources": sources,
        "warnings": warnings,
    }


def _merged_links(gpus, topo, nvml, warnings):
    """GPU x GPU matrix in ``gpus`` order: topo -m's words when it lists both GPUs (it is
    nvidia-smi's own answer), else NVML's, else None."""
    topo_position = {gpu["index"]: position for position, gpu in enumerate((topo or {}).get("gpus", []))}
    nvml_gpus = (nvml or {}).get("gpus", [])
    nvml_links = (nvml or {}).get("links") or []
    nvml_position = {gpu["index"]: position for position, gpu in enumerate(nvml_gpus)} if nvml_links else {}
    disagreements = []
    links = []
    for first in gpus:
        row = []
        for second in gpus:
            a, b = first["index"], second["index"]
            from_topo = from_nvml = None
            if a in topo_position and b in topo_position:
                from_topo = topo["links"][topo_position[a]][topo_position[b]]
            if a in nvml_position and b in nvml_position:
                from_nvml = nvml_links[nvml_position[a]][nvml_position[b]]
            if from_topo and from_nvml and from_topo != from_nvml and a < b:
                disagreements.append("GPU%d/GPU%d topo -m %s, NVML %s" % (a, b, from_topo, from_nvml))
            row.append("X" if a == b else _first(from_topo, from_nvml))
        links.append(row)
    if disagreements:
        warnings.append("links differ between topo -m and NVML (%s); using topo -m"
                        % "; ".join(disagreements[:8]))
    if len(gpus) > 1 and any(cell is None for row in links for cell in row):
        warnings.append("the link between some GPUs is unknown: give `nvidia-smi topo -m` output")
    return links


def _interconnect(links):
    pairs = [links[i][j] for i in range(len(links)) for j in range(i + 1, len(links))]
    if not pairs:
        return "none"
    if any(cell is None for cell in pairs):
        return "unknown"
    nvlink = sum(1 for cell in pairs if _NVLINK_RE.match(cell))
    if nvlink == len(pairs):
        return "nvlink"
    return "pcie" if nvlink == 0 else "mixed"


def _numa_nodes(gpus, host_nodes, warnings):
    """{"<id>": {"gpus": [...], "cpus": "..."}}: the host's nodes when numactl/sysfs describe them
    (with ``cpuless`` and ``memory_bytes``), else the nodes the GPUs name, with the union of their
    CPU affinities."""
    nodes = {}
    if host_nodes:
        for node, facts in sorted(host_nodes.items()):
            nodes[node] = {"gpus": [], "cpus": facts["cpus"], "cpuless": facts["cpuless"],
                           "memory_bytes": facts["memory_bytes"]}
        node_cpus = _node_cpu_sets(host_nodes)
        mismatched = {}
        for gpu in gpus:
            node = gpu["numa_node"]
            if node is None:
                continue
            if node not in nodes:
                warnings.append("GPU %d is on NUMA node %d, which numactl/sysfs do not list"
                                % (gpu["index"], node))
                nodes[node] = {"gpus": [], "cpus": gpu["cpu_affinity"] or "", "cpuless": None,
                               "memory_bytes": None}
            nodes[node]["gpus"].append(gpu["index"])
            affinity = gpu["cpu_affinity"]
            if affinity and node in node_cpus:
                try:
                    same = parse_cpulist(affinity) == node_cpus[node]
                except ValueError:
                    same = True
                if not same:
                    mismatched.setdefault((node, affinity), []).append(gpu["index"])
        for (node, affinity), indices in sorted(mismatched.items()):
            warnings.append("GPUs %s: CPU affinity %s (nvidia-smi) is not NUMA node %d's CPU list %s; "
                            "bind to the node, not to the affinity list"
                            % (", ".join(map(str, indices)), affinity, node, nodes[node]["cpus"]))
    else:
        cpu_sets = {}
        for gpu in gpus:
            node = gpu["numa_node"]
            if node is None:
                continue
            nodes.setdefault(node, {"gpus": [], "cpus": "", "cpuless": None,
                                    "memory_bytes": None})["gpus"].append(gpu["index"])
            try:
                cpu_sets.setdefault(node, set()).update(parse_cpulist(gpu["cpu_affinity"] or ""))
            except ValueError:
                continue
        for node, cpus in cpu_sets.items():
            nodes[node]["cpus"] = cpulist(cpus)
    return {str(node): nodes[node] for node in sorted(nodes)}


# --------------------------------------------------------------------------------------------
# Live probe
# --------------------------------------------------------------------------------------------

QUERY_FIELDS = ("index", "name", "uuid", "pci.bus_id", "memory.total", "pcie.link.gen.current",
                "pcie.link.gen.max", "pcie.link.width.current", "pcie.link.width.max", "compute_cap",
                "driver_version")
USE_NVML_CHOICES = ("auto", "always", "never")


def _run(run_command, argv):
    """run_command(argv) -> (rc, stdout, stderr); a binary that cannot start is rc 127."""
    try:
        rc, stdout, stderr = run_command(argv)
    except OSError as exc:
        return 127, "", str(exc)
    return rc, _text(stdout) or "", _text(stderr) or ""


def _first_line(*texts):
    for text in texts:
        for line in (text or "").splitlines():
            if line.strip():
                return line.strip()
    return "no output"


def _no_devices(stdout, stderr):
    return "No devices were found" in (stdout or "") + (stderr or "")


def probe(run_command, use_nvml="auto", sysfs_root="/", nvidia_smi_path=None, numactl_path=None):
    """Probe the live host: ``nvidia-smi topo -m``, the ``--query-gpu`` CSV, ``numactl -H``, sysfs
    and NVML, merged as ``build_topology`` does, plus ``host`` (memory_bytes, cpu_count).

    ``run_command(argv) -> (rc, stdout, stderr)`` runs a command (the module passes
    ``AnsibleModule.run_command``). ``nvidia_smi_path``/``numactl_path``: None looks the command
    up in PATH, "" skips it; without nvidia-smi the host is CPU-only: no GPUs, not an error.
    ``use_nvml``: "auto" uses NVML when pynvml imports and initialises, "always" fails when it
    does not, "never" skips it. Raises TopologyError when nvidia-smi is there but fails (driver not loaded).
    """
    if use_nvml not in USE_NVML_CHOICES:
        raise TopologyError("use_nvml: %r is not one of %s" % (use_nvml, ", ".join(USE_NVML_CHOICES)))
    warnings = []
    smi = shutil.which("nvidia-smi") if nvidia_smi_path is None else nvidia_smi_path
    topo = query = None
    if smi:
        rc, stdout, stderr = _run(run_command, [smi, "topo", "-m"])
        if _no_devices(stdout, stderr):
            warnings.append("nvidia-smi found no GPU (No devices were found)")
        elif rc != 0:
            raise TopologyError("`%s topo -m` failed (rc=%d): %s; is the NVIDIA driver loaded?"
                                % (smi, rc, _first_line(stderr, stdout)))
        else:
            topo = parse_topo_matrix(stdout, source="`nvidia-smi topo -m` output")
            query = _probe_query(run_command, smi, warnings)

    numactl = None
    numactl_bin = shutil.which("numactl") if numactl_path is None else numactl_path
    if numactl_bin:
        rc, stdout, stderr = _run(run_command, [numactl_bin, "-H"])
        if rc == 0 and stdout.strip():
            try:
                numactl = parse_numactl(stdout, source="`numactl -H` output")
            except TopologyError as exc:
                warnings.append(str(exc))

    sysfs = read_sysfs(sysfs_root)

    nvml = None
    if use_nvml != "never":
        module, reason = _load_nvml()
        if module is None:
            if use_nvml == "always":
                raise TopologyError("use_nvml=always, but NVML is not available: %s; install nvidia-ml-py "
                                    "for the Python that runs this, or use use_nvml=auto" % reason)
        else:
            try:
                nvml = _nvml_collect(module, [])
            finally:
                try:
                    module.nvmlShutdown()
                except Exception:  # best effort, the facts are collected
                    pass

    result = _assemble(topo=topo, query=query, numactl=numactl, sysfs=sysfs, nvml=nvml, warnings=warnings)
    result["host"] = read_host(sysfs_root)
    return result


def _probe_query(run_command, smi, warnings):
    """The --query-gpu CSV. Drivers older than the compute_cap field (R510) refuse the whole
    query, so ask once more without it; the capability is then inferred from the name."""
    fields = list(QUERY_FIELDS)
    rc, stdout, stderr = _run(run_command, [smi, "--query-gpu=" + ",".join(fields), "--format=csv"])
    if rc != 0:
        fields.remove("compute_cap")
        rc, stdout, stderr = _run(run_command, [smi, "--query-gpu=" + ",".join(fields), "--format=csv"])
        if rc == 0:
            warnings.append("this nvidia-smi does not know the compute_cap field; compute capability is "
                            "inferred from the GPU name")
    if rc != 0:
        warnings.append("`nvidia-smi --query-gpu` failed (rc=%d): %s; GPU names, memory and PCIe facts "
                        "come from NVML and sysfs only" % (rc, _first_line(stderr, stdout)))
        return None
    try:
        return parse_query_csv(stdout, source="`nvidia-smi --query-gpu` output")
    except TopologyError as exc:
        warnings.append(str(exc))
        return None
