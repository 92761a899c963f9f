# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What every topology source parser shares: the error type, nvidia-smi's "no answer" values,
PCI bus ids, cpulists, the ``pcie`` fact and compute capability by product name.

Target side: Python standard library only.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple, Union

__all__ = [
    "TopologyError",
    "ANSI_RE",
    "NVLINK_RE",
    "MIB",
    "is_missing",
    "int_or_none",
    "parse_cpulist",
    "cpulist",
    "bus_key",
    "nvidia_bus_id",
    "pcie_fact",
    "infer_compute_capability",
    "content_lines",
    "require_text",
    "read_text",
    "as_text",
    "RunCommand",
]

# run_command(argv) -> (rc, stdout, stderr), as AnsibleModule.run_command (bytes on some runners).
RunCommand = Callable[[List[str]], Tuple[int, Union[str, bytes, None], Union[str, bytes, None]]]


class TopologyError(ValueError):
    """An input cannot be read as the tool output it claims to be, or a probe cannot run."""


# nvidia-smi underlines the header row when stdout is a terminal (ESC[4m ... ESC[0m); captures
# made from a terminal keep those bytes.
ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")

NVLINK_RE = re.compile(r"^NV\d+$")

# Values nvidia-smi prints when it has no answer.
_MISSING = {"", "n/a", "[n/a]", "not supported", "[not supported]", "unknown", "[unknown error]",
            "unknown error", "requested functionality has been deprecated"}

MIB = 1 << 20


def is_missing(value: Optional[str]) -> bool:
    return value is None or value.strip().lower() in _MISSING


def int_or_none(value: Any) -> Optional[int]:
    """An int from '16', '16x', ' 5 '; None for N/A, '[Not Supported]' and other non-numbers."""
    if value is None:
        return None
    match = re.match(r"^\s*(-?\d+)\s*x?\s*$", str(value))
    return int(match.group(1)) if match else None


def parse_cpulist(text: Optional[str]) -> Set[int]:
    """The set of CPU ids in a Linux cpulist such as '0-63,128-191' (the kernel's format).

    Raises ValueError (not TopologyError: callers name the input) when it is not a cpulist.
    """
    cpus: Set[int] = set()
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


def cpulist(cpus: Iterable[int]) -> str:
    """Compress CPU ids into the kernel's cpulist form: [0, 1, 2, 3, 8] -> '0-3,8'.

    numactl prints one id per CPU ("0 1 2 ... 63 128 ..."); nvidia-smi, sysfs and taskset use
    the compressed form, so facts compare and read the same whichever source they came from.
    """
    ranges: List[List[int]] = []
    for cpu in sorted(set(cpus)):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join("%d" % a if a == b else "%d-%d" % (a, b) for a, b in ranges)


def bus_key(bus_id: Optional[str]) -> Optional[Tuple[int, int, int, int]]:
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


def nvidia_bus_id(bus_id: Optional[str]) -> Optional[str]:
    """A PCI address written the way nvidia-smi writes it: '00000000:06:00.0'."""
    key = bus_key(bus_id)
    if key is None:
        return bus_id
    return "%08X:%02X:%02X.%X" % key


def pcie_fact(gen_current: Optional[int] = None, gen_max: Optional[int] = None, width_current: Optional[int] = None,
              width_max: Optional[int] = None) -> Dict[str, Any]:
    """The pcie fact: generation and width, current and max, and whether the width is degraded.

    Only the width counts as degraded: GPUs drop the link generation at idle to save power (Gen1
    on an idle L40S is normal) and train back up under load, but a narrower link stays narrow
    (a x16 card in an x8 slot or on a bad riser).
    """
    degraded: Optional[bool] = None
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


def infer_compute_capability(name: Optional[str], architecture: Optional[str] = None) -> Optional[str]:
    """Compute capability ('9.0') from a GPU's product name (or architecture), None if unknown."""
    for pattern, capability in _COMPUTE_CAPABILITY_BY_NAME:
        if name and re.search(pattern, name):
            return capability
    if architecture:
        return _COMPUTE_CAPABILITY_BY_ARCHITECTURE.get(architecture.strip().lower())
    return None


def content_lines(text: str) -> List[str]:
    """Lines without ANSI escapes and carriage returns."""
    return [ANSI_RE.sub("", line).rstrip("\r") for line in text.splitlines()]


def require_text(text: Any, source: str, expected: str) -> None:
    """Refuse a missing or blank input, naming it and what was expected."""
    if text is None or not isinstance(text, str):
        raise TopologyError("%s: no text given; expected %s" % (source, expected))
    if not text.strip():
        raise TopologyError("%s: empty; expected %s" % (source, expected))


def read_text(path: str) -> Optional[str]:
    """A small file's stripped text (sysfs, procfs), None when it cannot be read."""
    try:
        with open(path) as handle:
            return handle.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def as_text(value: Union[str, bytes, None]) -> Optional[str]:
    """str from what a command runner or pynvml returns (bytes on some versions)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
