# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""GPU health: the fields read from ``nvidia-smi -q`` and NVML, and the checks a rollout runs on the
GPUs it plans to use before it stops anything (docs/gpu-health.md).

Fields of ``gpus[].health`` (None where the source has no answer, e.g. ECC on a GeForce card):
persistence mode, MIG mode (current, pending), ECC mode and uncorrected error counts (volatile:
since the driver loaded; aggregate: the GPU's lifetime), retired pages and whether a retirement is
pending, remapped rows (pending, failure), the active clock throttle / event reasons and the compute
and graphics processes with the memory they hold. The PCIe link is ``gpus[].pcie``.

Checks, one name each (the name is what a waiver lists):

- refuse: ``ecc_uncorrected`` (volatile uncorrected ECC errors), ``retired_pages_pending`` (a page
  waits for retirement: needs a GPU reset), ``row_remap_pending`` (same on A100 and later),
  ``row_remap_failure``, ``mig_mode`` (MIG on: vLLM gets a slice, not the GPU), ``link_width`` (PCIe
  width below its maximum; a lower *generation* at idle is power saving, not a fault),
  ``foreign_process`` (a compute process holds memory and is not one of the unit being retired).
- warn: ``persistence_mode`` (off: the driver unloads between clients, startup is slower and
  settings are lost), ``clocks_throttle`` (an active reason other than idle or application clocks).

Target side: Python standard library only.
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

__all__ = [
    "CHECKS",
    "REFUSE",
    "WARN",
    "WAIVE_VARIABLE",
    "GpuHealthError",
    "empty_health",
    "smi_q_health",
    "nvml_health",
    "merge_health",
    "add_process_origins",
    "health_problems",
    "check_waivers",
    "preflight_health",
]

REFUSE = ("ecc_uncorrected", "retired_pages_pending", "row_remap_pending", "row_remap_failure", "mig_mode",
          "link_width", "foreign_process")
WARN = ("persistence_mode", "clocks_throttle")
CHECKS = REFUSE + WARN
# The role variable that waives checks by name (rollout_gpu_health_waive passes into it).
WAIVE_VARIABLE = "preflight_gpu_health_waive"
# Throttle reasons that are no fault: an idle GPU clocks down, application clocks are an operator's setting.
BENIGN_THROTTLE = ("idle", "applications_clocks_setting")
# nvmlClocksEventReason* / nvmlClocksThrottleReason* bits -> the names nvidia-smi -q prints (snake case).
NVML_THROTTLE_BITS = ((0x1, "idle"), (0x2, "applications_clocks_setting"), (0x4, "sw_power_cap"),
                      (0x8, "hw_slowdown"), (0x10, "sync_boost"), (0x20, "sw_thermal_slowdown"),
                      (0x40, "hw_thermal_slowdown"), (0x80, "hw_power_brake_slowdown"),
                      (0x100, "display_clock_setting"))
_COMPUTE_TYPES = ("C", "C+G", "M", "M+C")

# One `nvidia-smi -q` GPU section: {path: value} and the same entries in their order.
Section = Mapping[Tuple[str, ...], str]
Entries = Sequence[Tuple[Tuple[str, ...], str]]
Reader = Callable[..., Optional[str]]


class GpuHealthError(ValueError):
    """A waiver or a health input cannot be used."""


def empty_health() -> Dict[str, Any]:
    """Every health field, unknown."""
    return {"persistence_mode": None, "mig_mode": None, "mig_mode_pending": None, "ecc_mode": None,
            "ecc_uncorrected_volatile": None, "ecc_uncorrected_aggregate": None, "retired_pages": None,
            "retired_pages_pending": None, "remapped_rows_uncorrectable": None, "remapped_rows_pending": None,
            "remapped_rows_failure": None, "throttle_reasons": None, "processes": None, "problems": []}


def _switch(value: Optional[str]) -> Optional[bool]:
    """Enabled/Disabled, Yes/No, Active/Not Active -> bool; None for N/A and anything else."""
    text = (value or "").strip().lower()
    if text in ("enabled", "yes", "active", "on"):
        return True
    if text in ("disabled", "no", "not active", "off"):
        return False
    return None


def _count(value: Optional[str]) -> Optional[int]:
    match = re.match(r"^\s*(\d+)", value or "")
    return int(match.group(1)) if match else None


def _snake(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.strip().lower()).strip("_")


def _sum(values: Iterable[Optional[int]]) -> Optional[int]:
    known = [value for value in values if value is not None]
    return sum(known) if known else None


def _ecc_uncorrected(entries: Entries, timescale: str) -> Optional[int]:
    """Uncorrected ECC errors of one timescale ("Volatile" or "Aggregate").

    Hopper and later (and Ampere since R470) print ``SRAM Uncorrectable ...`` / ``DRAM Uncorrectable``
    right under the timescale; Volta and older print a ``Double Bit`` block (uncorrectable) with a
    ``Total`` line, beside ``Single Bit`` (corrected).
    """
    flat: List[Optional[int]] = []
    double_bit: Dict[str, Optional[int]] = {}
    for path, value in entries:
        if path[:2] != ("ECC Errors", timescale):
            continue
        if len(path) == 3 and "uncorrectable" in path[2].lower():
            flat.append(_count(value))
        elif len(path) == 4 and path[2] == "Double Bit":
            double_bit[path[3]] = _count(value)
    if double_bit:
        return double_bit["Total"] if "Total" in double_bit else _sum(double_bit.values())
    return _sum(flat)


def _processes(entries: Entries) -> Optional[List[Dict[str, Any]]]:
    """The processes of the ``Processes`` section; [] for ``Processes : None``, None without one."""
    seen = False
    processes: List[Dict[str, Any]] = []
    for path, value in entries:
        if not path or path[0] != "Processes":
            continue
        seen = True
        if len(path) == 1 or len(path) < 2:
            continue
        key = path[-1]
        if key == "Process ID":
            processes.append({"pid": _count(value), "type": None, "name": None, "used_memory_mib": None,
                              "unit": None, "ancestors": None})
        elif processes and key == "Type":
            processes[-1]["type"] = value.strip() or None
        elif processes and key == "Name":
            processes[-1]["name"] = value.strip() or None
        elif processes and key == "Used GPU Memory":
            processes[-1]["used_memory_mib"] = _count(value)
    if not seen:
        return None
    return [process for process in processes if process["pid"] is not None]


def smi_q_health(value: Reader, entries: Entries) -> Dict[str, Any]:
    """The health fields of one GPU section of ``nvidia-smi -q``.

    ``value(*path)`` reads one value (None when missing or N/A), ``entries`` are the section's
    (path, value) pairs in order. Both spellings of each block are read: "Clocks Event Reasons"
    (R535 and later) and "Clocks Throttle Reasons"; "Retired Pages" with "Pending Page Blacklist"
    or "Pending"; "Remapped Rows" (A100 and later); volatile/aggregate ECC in SRAM/DRAM lines or
    in Single/Double Bit blocks.
    """
    health = empty_health()
    health["persistence_mode"] = _switch(value("Persistence Mode"))
    health["mig_mode"] = _switch(value("MIG Mode", "Current"))
    health["mig_mode_pending"] = _switch(value("MIG Mode", "Pending"))
    health["ecc_mode"] = _switch(value("ECC Mode", "Current"))
    health["ecc_uncorrected_volatile"] = _ecc_uncorrected(entries, "Volatile")
    health["ecc_uncorrected_aggregate"] = _ecc_uncorrected(entries, "Aggregate")
    health["retired_pages"] = _sum([_count(value("Retired Pages", "Single Bit ECC")),
                                    _count(value("Retired Pages", "Double Bit ECC"))])
    health["retired_pages_pending"] = _switch(value("Retired Pages", "Pending Page Blacklist")
                                              or value("Retired Pages", "Pending"))
    health["remapped_rows_uncorrectable"] = _count(value("Remapped Rows", "Uncorrectable Error"))
    health["remapped_rows_pending"] = _switch(value("Remapped Rows", "Pending"))
    health["remapped_rows_failure"] = _switch(value("Remapped Rows", "Remapping Failure Occurred"))
    for section in ("Clocks Event Reasons", "Clocks Throttle Reasons"):
        reasons = [(path[1], found) for path, found in entries if len(path) == 2 and path[0] == section]
        if reasons:
            health["throttle_reasons"] = sorted(_snake(name) for name, found in reasons if _switch(found))
            break
    health["processes"] = _processes(entries)
    return health


def nvml_health(call: Callable[..., Any], nvml: Any, handle: Any, label: str) -> Dict[str, Any]:
    """The health fields of one GPU from NVML; ``call(label, function_name, *args, quiet=True)``
    returns None where the call fails ("Not Supported" on GeForce cards, VMs, older drivers)."""
    health = empty_health()
    persistence = call(label, "nvmlDeviceGetPersistenceMode", handle, quiet=True)
    health["persistence_mode"] = None if persistence is None else bool(persistence)
    mig = call(label, "nvmlDeviceGetMigMode", handle, quiet=True)
    if isinstance(mig, (list, tuple)) and len(mig) == 2:
        health["mig_mode"], health["mig_mode_pending"] = bool(mig[0]), bool(mig[1])
    ecc = call(label, "nvmlDeviceGetEccMode", handle, quiet=True)
    if isinstance(ecc, (list, tuple)) and ecc:
        health["ecc_mode"] = bool(ecc[0])
    uncorrected = getattr(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
    for key, counter in (("ecc_uncorrected_volatile", getattr(nvml, "NVML_VOLATILE_ECC", 0)),
                         ("ecc_uncorrected_aggregate", getattr(nvml, "NVML_AGGREGATE_ECC", 1))):
        count = call(label, "nvmlDeviceGetTotalEccErrors", handle, uncorrected, counter, quiet=True)
        health[key] = int(count) if isinstance(count, int) else None
    pending = call(label, "nvmlDeviceGetRetiredPagesPendingStatus", handle, quiet=True)
    health["retired_pages_pending"] = None if pending is None else bool(pending)
    remapped = call(label, "nvmlDeviceGetRemappedRows", handle, quiet=True)
    if isinstance(remapped, (list, tuple)) and len(remapped) == 4:
        health["remapped_rows_uncorrectable"] = int(remapped[1])
        health["remapped_rows_pending"], health["remapped_rows_failure"] = bool(remapped[2]), bool(remapped[3])
    reasons = call(label, "nvmlDeviceGetCurrentClocksEventReasons", handle, quiet=True)
    if reasons is None:
        reasons = call(label, "nvmlDeviceGetCurrentClocksThrottleReasons", handle, quiet=True)
    if isinstance(reasons, int):
        health["throttle_reasons"] = sorted(name for bit, name in NVML_THROTTLE_BITS if reasons & bit)
    processes: Optional[List[Dict[str, Any]]] = None
    for kind, function_name in (("C", "nvmlDeviceGetComputeRunningProcesses"),
                                ("G", "nvmlDeviceGetGraphicsRunningProcesses")):
        found = call(label, function_name, handle, quiet=True)
        if found is None:
            continue
        processes = processes or []
        for process in found:
            used = getattr(process, "usedGpuMemory", None)
            processes.append({"pid": int(process.pid), "type": kind, "name": None,
                              "used_memory_mib": int(used) >> 20 if isinstance(used, int) else None,
                              "unit": None, "ancestors": None})
    health["processes"] = processes
    return health


def merge_health(*sources: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """Field by field, the first source that knows (nvidia-smi -q first, then NVML)."""
    health = empty_health()
    for key in health:
        if key == "problems":
            continue
        for source in sources:
            if source and source.get(key) is not None:
                health[key] = source[key]
                break
    return health


def _ancestors(pid: int, proc: str) -> List[int]:
    """The parent pids of ``pid`` up to init (so a worker counts as its server's)."""
    out: List[int] = []
    current = pid
    for _depth in range(64):
        try:
            with open(os.path.join(proc, str(current), "stat")) as handle:
                stat = handle.read()
        except OSError:
            break
        try:
            parent = int(stat.rsplit(")", 1)[1].split()[1])
        except (IndexError, ValueError):
            break
        if parent <= 0 or parent in out:
            break
        out.append(parent)
        current = parent
    return out


def add_process_origins(health: Dict[str, Any], parse_cgroup: Callable[[str], Tuple[Optional[str], Optional[str]]],
                        proc: str = "/proc") -> None:
    """Give each process of a live probe the systemd unit of its cgroup and its parent pids
    (read from ``proc``), which the foreign_process check allows by."""
    for process in health.get("processes") or []:
        try:
            with open(os.path.join(proc, str(process["pid"]), "cgroup")) as handle:
                process["unit"] = parse_cgroup(handle.read())[1]
        except OSError:
            process["unit"] = None
        process["ancestors"] = _ancestors(process["pid"], proc)


def _known(value: Any) -> str:
    return "unknown" if value is None else str(value)


def _hint(check: str, variable: str) -> str:
    return "waive with %s: [%s]" % (variable, check)


def _process_text(process: Mapping[str, Any]) -> str:
    memory = process.get("used_memory_mib")
    parts = ["pid %s" % process.get("pid")]
    if process.get("name"):
        parts.append(str(process["name"]))
    parts.append("%s MiB" % memory if memory is not None else "memory unknown")
    if process.get("unit"):
        parts.append("in %s" % process["unit"])
    return " ".join(parts)


def health_problems(gpu: Mapping[str, Any], allowed_units: Iterable[str] = (), allowed_pids: Iterable[int] = (),
                    waive: Iterable[str] = (), variable: str = WAIVE_VARIABLE) -> List[Dict[str, Any]]:
    """The health problems of one GPU of gpu_topology_info: [{check, severity, waived, message}].

    ``allowed_units``/``allowed_pids``: compute processes of these systemd units, these pids or their
    children are not foreign (the unit being retired, the process being taken over). ``waive``: check
    names that still appear, with ``waived: true``. ``variable`` names the waiver in the messages.
    Unknown fields (None) raise nothing: a host or driver that cannot tell is not refused.
    """
    health = gpu.get("health") or {}
    pcie = gpu.get("pcie") or {}
    index = gpu.get("index")
    waived = set(waive)
    units = set(unit for unit in allowed_units if unit)
    pids = set(int(pid) for pid in allowed_pids if pid is not None)
    found: List[Tuple[str, str]] = []
    if health.get("ecc_uncorrected_volatile"):
        found.append(("ecc_uncorrected", "%d uncorrected ECC error(s) since the driver loaded (aggregate %s); "
                      "the memory returns wrong data - reset the GPU, and if they come back, replace it"
                      % (health["ecc_uncorrected_volatile"], _known(health.get("ecc_uncorrected_aggregate")))))
    if health.get("retired_pages_pending"):
        found.append(("retired_pages_pending", "a memory page is pending retirement (retired so far: %s); it "
                      "is retired only at the next GPU reset or reboot" % _known(health.get("retired_pages"))))
    if health.get("remapped_rows_pending"):
        found.append(("row_remap_pending", "a row remap is pending (uncorrectable remapped rows: %s); it takes "
                      "effect only at the next GPU reset or reboot" % _known(health.get("remapped_rows_uncorrectable"))))
    if health.get("remapped_rows_failure"):
        found.append(("row_remap_failure", "row remapping failed (uncorrectable remapped rows: %s): the GPU "
                      "cannot hide its bad memory any more - replace it" % _known(health.get("remapped_rows_uncorrectable"))))
    if health.get("mig_mode"):
        found.append(("mig_mode", "MIG mode is enabled (pending: %s): vLLM would get one MIG slice, not the "
                      "GPU - disable it (nvidia-smi -i %s -mig 0, then reset the GPU)"
                      % ("enabled" if health.get("mig_mode_pending") else "disabled", index)))
    width, width_max = pcie.get("width_current"), pcie.get("width_max")
    if width is not None and width_max is not None and width < width_max:
        generation = (_known(pcie.get("gen_current")), _known(pcie.get("gen_max")))
        found.append(("link_width", "PCIe link width x%d is below its maximum x%d (generation %s of %s): "
                      "check the slot, riser or bifurcation setting" % ((width, width_max) + generation)))
    processes = health.get("processes") or []
    foreign = [process for process in processes
               if (process.get("type") or "C") in _COMPUTE_TYPES and process.get("pid") not in pids
               and not (process.get("unit") in units and process.get("unit"))
               and not pids.intersection(process.get("ancestors") or [])]
    if foreign:
        found.append(("foreign_process", "GPU memory is held by %s, not by the unit being retired%s - stop it"
                      % ("; ".join(_process_text(process) for process in foreign),
                         " (%s)" % ", ".join(sorted(units)) if units else "")))
    if health.get("persistence_mode") is False:
        found.append(("persistence_mode", "persistence mode is off: the driver tears the GPU down between "
                      "clients (slower start, settings lost) - enable nvidia-persistenced"))
    throttling = [reason for reason in health.get("throttle_reasons") or [] if reason not in BENIGN_THROTTLE]
    if throttling:
        found.append(("clocks_throttle", "clocks are held down by %s: check cooling, power limits and the "
                      "power supply" % ", ".join(throttling)))
    return [{"check": check, "severity": "refuse" if check in REFUSE else "warn", "waived": check in waived,
             "message": "GPU %s: %s - %s; %s" % (index, check, text, _hint(check, variable))}
            for check, text in found]


def check_waivers(waive: Any, variable: str = WAIVE_VARIABLE) -> List[str]:
    """The waived check names; refuses anything but a list of known names."""
    if waive is None:
        return []
    if isinstance(waive, str) or not isinstance(waive, (list, tuple)):
        raise GpuHealthError("%s: %r is not a list; give a list of check names, e.g. [persistence_mode]; "
                             "known: %s" % (variable, waive, ", ".join(CHECKS)))
    unknown = [name for name in waive if name not in CHECKS]
    if unknown:
        raise GpuHealthError("%s: unknown check name(s) %s; known: %s"
                             % (variable, ", ".join(repr(name) for name in unknown), ", ".join(CHECKS)))
    return [str(name) for name in waive]


def preflight_health(topology: Any, gpu_indices: Any, current_unit: Optional[str] = None, allowed_pids: Any = None,
                     waive: Any = None, variable: str = WAIVE_VARIABLE) -> Dict[str, List[str]]:
    """The health verdict on the GPUs a plan uses, for the preflight: {refuse, warn, waived, checked}.

    ``topology`` is gpu_topology_info's result, ``gpu_indices`` the plan's GPUs (none on a CPU-only
    host: nothing to check). Compute processes of ``current_unit`` (the unit this rollout retires)
    and ``allowed_pids`` or their children (the server taken over; in a stage, the foreign vLLM the
    stage only warns about) are not foreign. ``waive``:
    check names whose problems are only listed under ``waived``. Raises GpuHealthError on bad input.
    """
    waived = check_waivers(waive, variable)
    if not isinstance(gpu_indices, (list, tuple)) or not all(isinstance(index, int) for index in gpu_indices):
        raise GpuHealthError("gpu_indices: %r is not a list of GPU indices; pass the plan's gpu_indices" % (gpu_indices,))
    verdict: Dict[str, List[Any]] = {"refuse": [], "warn": [], "waived": [], "checked": []}
    if not gpu_indices:
        return verdict
    if not isinstance(topology, Mapping) or not isinstance(topology.get("gpus"), list):
        raise GpuHealthError("topology: expected gpu_topology_info's result (a dict with `gpus`), got %s; "
                             "register the gpu_topology_info task and pass that" % type(topology).__name__)
    by_index = {gpu.get("index"): gpu for gpu in topology["gpus"] if isinstance(gpu, Mapping)}
    missing = [index for index in gpu_indices if index not in by_index]
    if missing:
        raise GpuHealthError("gpu_indices: GPUs %s are planned but gpu_topology_info lists only %s; re-plan on "
                             "this host's facts" % (missing, sorted(index for index in by_index if isinstance(index, int))))
    try:
        pids = [int(pid) for pid in (allowed_pids or []) if pid not in (None, "")]
    except (TypeError, ValueError):
        raise GpuHealthError("allowed_pids: %r is not a list of process ids" % (allowed_pids,))
    for index in gpu_indices:
        for problem in health_problems(by_index[index], allowed_units=[current_unit] if current_unit else [],
                                       allowed_pids=pids, waive=waived, variable=variable):
            key = "waived" if problem["waived"] else problem["severity"]
            verdict[key].append(problem["message"])
        verdict["checked"].append(index)
    return verdict
