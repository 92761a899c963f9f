# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""NVML through the optional ``pynvml`` module (nvidia-ml-py): a JSON-ready snapshot of every GPU
and the GPU x GPU links in ``nvidia-smi topo -m`` words, recorded on a GPU host and replayed in
tests.

Target side: Python standard library only; ``pynvml`` is imported lazily and is optional.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Set, Tuple

from ansible_collections.llmops.vllm.plugins.module_utils.gpu_health import nvml_health
from ansible_collections.llmops.vllm.plugins.module_utils.topology_common import (
    TopologyError,
    as_text,
    cpulist,
    nvidia_bus_id,
    pcie_fact,
)

__all__ = [
    "load_nvml",
    "nvml_collect",
    "nvml_snapshot",
    "check_nvml_snapshot",
]


# nvmlDeviceGetTopologyCommonAncestor levels -> the `topo -m` words. INTERNAL (two GPUs on one
# board, e.g. K80/M60) sits behind the board's own PCIe switch, which topo -m shows as PIX.
_NVML_TOPOLOGY_WORDS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
# nvmlDeviceGetNvLinkRemoteDeviceType answers.
_NVLINK_REMOTE_TYPES = {0: "gpu", 1: "ibmnpu", 2: "switch"}


def load_nvml(nvml_module: Any = None) -> Tuple[Any, Optional[str]]:
    """(pynvml module initialised, None) or (None, why NVML cannot be used)."""
    nvml: Any = nvml_module
    if nvml is None:
        try:
            import pynvml as nvml  # type: ignore[no-redef]  # optional: nvidia-ml-py in the interpreter that runs this
        except ImportError as exc:
            return None, "the pynvml module (package nvidia-ml-py) is not installed (%s)" % exc
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ... all mean "no NVML"
        return None, "nvmlInit failed: %s" % (str(exc) or type(exc).__name__)
    return nvml, None


def nvml_collect(nvml: Any, errors: List[str]) -> Dict[str, Any]:
    """Everything the snapshot holds, each NVML call on its own so one unsupported call costs
    only its own fact (VMs answer "Not Supported" for NUMA, some drivers lack NVLink queries)."""
    nvml_error = getattr(nvml, "NVMLError", Exception)

    def call(label: str, function_name: str, *args: Any, **options: Any) -> Any:
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

    snapshot: Dict[str, Any] = {"driver_version": as_text(call("system", "nvmlSystemGetDriverVersion")),
                                "cuda_version": None, "gpus": [], "links": [], "errors": errors}
    cuda = call("system", "nvmlSystemGetCudaDriverVersion")
    if isinstance(cuda, int) and cuda > 0:
        snapshot["cuda_version"] = "%d.%d" % (cuda // 1000, (cuda % 1000) // 10)

    count = call("system", "nvmlDeviceGetCount") or 0
    handles: List[Any] = []
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
        cpus: Set[int] = set()
        for word_index, word in enumerate(affinity or []):
            word = int(word)
            cpus.update(word_index * 64 + bit for bit in range(64) if word >> bit & 1)

        nvlinks: List[Dict[str, Any]] = []
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
            remote_bus_id = nvidia_bus_id(as_text(remote.busId)) if remote is not None else None
            nvlinks.append({"link": link, "remote_bus_id": remote_bus_id,
                            "remote_type": _NVLINK_REMOTE_TYPES.get(remote_type)})

        handles.append(handle)
        snapshot["gpus"].append({
            "index": index if index is not None else position,
            "name": as_text(call(label, "nvmlDeviceGetName", handle)),
            "uuid": as_text(call(label, "nvmlDeviceGetUUID", handle)),
            "bus_id": nvidia_bus_id(as_text(pci.busId)) if pci is not None else None,
            "memory_bytes": int(memory.total) if memory is not None else None,
            "compute_capability": "%d.%d" % tuple(capability) if capability else None,
            "pcie": pcie_fact(call(label, "nvmlDeviceGetCurrPcieLinkGeneration", handle),
                              call(label, "nvmlDeviceGetMaxPcieLinkGeneration", handle),
                              call(label, "nvmlDeviceGetCurrPcieLinkWidth", handle),
                              call(label, "nvmlDeviceGetMaxPcieLinkWidth", handle)),
            "numa_node": numa_node if isinstance(numa_node, int) and numa_node >= 0 else None,
            "cpu_affinity": cpulist(cpus) if cpus else None,
            "nvlinks": nvlinks,
            # Quiet: "Not Supported" (ECC on GeForce, retired pages on Hopper) is an answer, not an error.
            "health": nvml_health(call, nvml, handle, label),
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
        cells: List[Optional[str]] = []
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


def _nvlink_count(first: Dict[str, Any], second: Dict[str, Any]) -> int:
    """Active NVLinks between two GPUs: direct links to the peer, or, through NVSwitches, the
    smaller of the two GPUs' switch link counts (that is how `topo -m` reports NV18 on HGX)."""
    direct = sum(1 for link in first["nvlinks"]
                 if link["remote_bus_id"] and link["remote_bus_id"] == second["bus_id"])
    if direct:
        return direct
    return min(sum(1 for link in gpu["nvlinks"] if link["remote_type"] == "switch")
               for gpu in (first, second))


def _switch_only(first: Dict[str, Any], second: Dict[str, Any]) -> bool:
    return all(link["remote_type"] == "switch" for gpu in (first, second) for link in gpu["nvlinks"])


def nvml_snapshot(nvml_module: Any = None) -> Optional[Dict[str, Any]]:
    """What NVML says about every GPU, as a JSON-serialisable dict; None when NVML is unavailable.

    Record it on a GPU host (``json.dump(nvml_snapshot(), ...)``) and pass it to
    ``build_topology(nvml=...)`` in tests. Keys: ``driver_version``, ``cuda_version``, ``gpus``
    (per device: ``index``, ``name``, ``uuid``, ``bus_id``, ``memory_bytes``,
    ``compute_capability``, ``pcie``, ``numa_node`` (None when "Not Supported", as in VMs),
    ``cpu_affinity`` (cpulist), ``nvlinks`` (active links with the remote's bus id and type),
    ``health`` (gpu_health.nvml_health)),
    ``links`` (GPU x GPU in ``gpus`` order, in `topo -m` words: "NV<n>" for active NVLinks, else
    PIX/PXB/PHB/NODE/SYS from the common PCIe ancestor) and ``errors`` (the NVML calls that
    failed and why). ``nvml_module`` replaces ``pynvml`` (tests).
    """
    nvml, _reason = load_nvml(nvml_module)
    if nvml is None:
        return None
    try:
        return nvml_collect(nvml, [])
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # shutting down is best effort; the facts are already collected
            pass


def check_nvml_snapshot(nvml: Any) -> None:
    """Refuse a recorded snapshot that is not what nvml_snapshot() writes, before it is merged."""
    if not isinstance(nvml, dict) or not isinstance(nvml.get("gpus"), list):
        raise TopologyError("nvml snapshot: expected a dict with a `gpus` list, as nvml_snapshot() returns")
    for gpu in nvml["gpus"]:
        if not isinstance(gpu, dict) or not isinstance(gpu.get("index"), int):
            raise TopologyError("nvml snapshot: every entry of `gpus` needs an integer `index`")
    links = nvml.get("links") or []
    if links and (len(links) != len(nvml["gpus"]) or any(len(row) != len(links) for row in links)):
        raise TopologyError("nvml snapshot: `links` must be a %dx%d matrix (one row per GPU)"
                            % (len(nvml["gpus"]), len(nvml["gpus"])))
