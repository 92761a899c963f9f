# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whether GPUs are free for the next model, and the wait until they are (llmops.vllm.gpu_free).

A GPU is free when no compute process runs on it and its used memory is below a limit (the driver
keeps a few hundred MiB for itself). Both come from nvidia-smi, read by topology_smi_query.

Target side: Python standard library only.
"""

from __future__ import annotations

import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple, TypedDict

from ansible_collections.llmops.vllm.plugins.module_utils.topology_common import RunCommand, TopologyError, as_text
from ansible_collections.llmops.vllm.plugins.module_utils.topology_smi_query import (
    COMPUTE_APPS_FIELDS,
    ComputeApp,
    MemoryUsed,
    MEMORY_USED_FIELDS,
    parse_compute_apps_csv,
    parse_memory_used_csv,
)

__all__ = [
    "GpuFreeError",
    "MEMORY_USED_ARGS",
    "COMPUTE_APPS_ARGS",
    "read_usage",
    "gpu_usage",
    "busy_message",
    "wait_until_free",
]

MEMORY_USED_ARGS = ("--query-gpu=" + ",".join(MEMORY_USED_FIELDS), "--format=csv")
COMPUTE_APPS_ARGS = ("--query-compute-apps=" + ",".join(COMPUTE_APPS_FIELDS), "--format=csv")


class GpuFreeError(ValueError):
    """The GPUs cannot be checked (nvidia-smi fails, a GPU is not on the host); waiting would not help."""


class GpuProcess(TypedDict):
    """A compute process on a GPU."""
    pid: int
    used_memory_mib: Optional[int]


class GpuUsage(TypedDict):
    """One GPU of gpu_usage()."""
    index: int
    uuid: Optional[str]
    memory_used_mib: Optional[int]
    processes: List[GpuProcess]
    busy: bool


class WaitResult(TypedDict):
    """What wait_until_free() returns (the module's GpuFreeResult without changed/msg)."""
    free: bool
    gpus: List[GpuUsage]
    busy_gpus: List[int]
    polls: int
    seconds: float


def read_usage(run_command: RunCommand, nvidia_smi: str) -> Tuple[List[MemoryUsed], List[ComputeApp]]:
    """(memory per GPU, compute processes) from one reading of nvidia-smi.

    ``run_command(argv) -> (rc, stdout, stderr)``. Raises GpuFreeError when nvidia-smi fails: it
    does not fail because a process is exiting, so a failure is not waited out.
    """
    outputs: List[str] = []
    for args in (MEMORY_USED_ARGS, COMPUTE_APPS_ARGS):
        argv = [nvidia_smi] + list(args)
        try:
            rc, stdout, stderr = run_command(argv)
        except OSError as exc:
            rc, stdout, stderr = 127, "", str(exc)
        stdout, stderr = as_text(stdout) or "", as_text(stderr) or ""
        if rc != 0:
            detail = next((line.strip() for line in (stderr + "\n" + stdout).splitlines() if line.strip()), "no output")
            hint = "this host has no GPU" if "No devices were found" in stdout + stderr else "is the NVIDIA driver loaded?"
            raise GpuFreeError("`%s` failed (rc=%d): %s; %s" % (" ".join(argv), rc, detail, hint))
        outputs.append(stdout)
    try:
        return (parse_memory_used_csv(outputs[0], source="`nvidia-smi %s` output" % " ".join(MEMORY_USED_ARGS)),
                parse_compute_apps_csv(outputs[1], source="`nvidia-smi %s` output" % " ".join(COMPUTE_APPS_ARGS)))
    except TopologyError as exc:
        raise GpuFreeError(str(exc))


def gpu_usage(memory: Sequence[MemoryUsed], apps: Sequence[ComputeApp], gpu_indices: Sequence[int],
              used_below_mib: int) -> List[GpuUsage]:
    """Each asked GPU (sorted, once) with its compute processes and whether it is busy.

    ``memory``/``apps``: :func:`read_usage`. A GPU is busy when a compute process runs on it or its
    used memory is ``used_below_mib`` or more; when nvidia-smi has no memory figure ([N/A]) the
    processes alone decide. Raises GpuFreeError for an index the host does not have.
    """
    by_index: Dict[int, MemoryUsed] = {gpu["index"]: gpu for gpu in memory}
    unknown = sorted(set(gpu_indices) - set(by_index))
    if unknown:
        raise GpuFreeError("gpu_indices: GPU %s not on this host (nvidia-smi lists %s); pass the indices of the "
                           "model's plan (gpu_indices)" % (", ".join(str(i) for i in unknown),
                                                           ", ".join(str(i) for i in sorted(by_index)) or "none"))
    gpus: List[GpuUsage] = []
    for index in sorted(set(gpu_indices)):
        gpu = by_index[index]
        processes: List[GpuProcess] = [{"pid": app["pid"], "used_memory_mib": app["used_memory_mib"]}
                                       for app in apps if gpu["uuid"] is not None and app["gpu_uuid"] == gpu["uuid"]]
        used = gpu["memory_used_mib"]
        gpus.append({"index": index, "uuid": gpu["uuid"], "memory_used_mib": used, "processes": processes,
                     "busy": bool(processes) or (used is not None and used >= used_below_mib)})
    return gpus


def _mib_text(value: Optional[int]) -> str:
    return "? MiB" if value is None else "%d MiB" % value


def busy_message(result: WaitResult, used_below_mib: int, check_mode: bool = False) -> str:
    """Why the GPUs are not free: each busy GPU, its used memory and the processes still on it."""
    parts: List[str] = []
    for gpu in result["gpus"]:
        if not gpu["busy"]:
            continue
        if gpu["processes"]:
            holders = "compute process%s %s" % ("es" if len(gpu["processes"]) > 1 else "", ", ".join(
                "pid %d (%s)" % (process["pid"], _mib_text(process["used_memory_mib"])) for process in gpu["processes"]))
        else:
            holders = "no compute process nvidia-smi can see (another container's, or memory not released yet)"
        parts.append("GPU %d: %s used, %s" % (gpu["index"], _mib_text(gpu["memory_used_mib"]), holders))
    busy = ", ".join(str(index) for index in result["busy_gpus"])
    rule = "free: no compute process and less than %d MiB used" % used_below_mib
    if check_mode:
        return "GPU %s in use (check mode reads once and does not wait; %s): %s" % (busy, rule, "; ".join(parts))
    return ("GPU %s still in use after %s s (%s): %s. Stop what holds them (nvidia-smi lists it), or raise timeout"
            % (busy, _seconds_text(result["seconds"]), rule, "; ".join(parts)))


def _seconds_text(seconds: float) -> str:
    return ("%.1f" % seconds).rstrip("0").rstrip(".")


def wait_until_free(run_command: RunCommand, nvidia_smi: str, gpu_indices: Sequence[int], used_below_mib: int,
                    timeout: float, poll_interval: float, check_mode: bool = False,
                    clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> WaitResult:
    """Read nvidia-smi every ``poll_interval`` seconds until the GPUs are free or ``timeout`` seconds
    have passed (a last reading is taken at the deadline); in check mode, read once.

    Returns ``{"free", "gpus", "busy_gpus", "polls", "seconds"}`` (``gpus``: :func:`gpu_usage`); never
    raises for GPUs that stay busy (the caller fails with :func:`busy_message`). Raises GpuFreeError
    when nvidia-smi cannot answer.
    """
    start = clock()
    polls = 0
    while True:
        memory, apps = read_usage(run_command, nvidia_smi)
        polls += 1
        gpus = gpu_usage(memory, apps, gpu_indices, used_below_mib)
        busy = [gpu["index"] for gpu in gpus if gpu["busy"]]
        elapsed = clock() - start
        if not busy or check_mode or elapsed >= timeout:
            return {"free": not busy, "gpus": gpus, "busy_gpus": busy, "polls": polls, "seconds": round(elapsed, 1)}
        sleep(min(poll_interval, timeout - elapsed))
