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
paste captures with their whitespace rewritten. So each source has its own small parser, in its
own module_utils file, and ``build_topology`` here merges them with a fixed order of trust and
says, in ``warnings``, where they disagree.

Sources and their parsers (plain text or a directory in, plain data out):

- ``topology_smi_topo.parse_topo_matrix``: ``nvidia-smi topo -m``
- ``topology_smi_query.parse_query_csv``: ``nvidia-smi --query-gpu=... --format=csv`` or ``nvidia-smi -q``
- ``topology_numactl.parse_numactl``: ``numactl -H`` / ``numactl --hardware``
- ``topology_sysfs.read_sysfs``: ``/sys/bus/pci/devices`` and ``/sys/devices/system/node``
- ``topology_nvml.nvml_snapshot``: NVML through the optional ``pynvml`` module (nvidia-ml-py), as
  a JSON-ready dict that can be recorded on a GPU host and replayed in tests

``topology_common`` holds what they share (``TopologyError``, cpulists, PCI bus ids, ...).

``probe`` runs the commands on the live host (the ``gpu_topology_info`` module) and
``build_topology`` merges captured outputs (the ``llmops-vllm topology`` CLI); both return the same
keys. ``read_host`` adds the host's memory and CPU count.

Target side: Python standard library only; ``pynvml`` is imported lazily and is optional.
"""

from __future__ import annotations

import os
import re
import shutil
from typing import Any, Dict, List, Optional, Set, Tuple, cast

from ansible_collections.llmops.vllm.plugins.module_utils.gpu_health import add_process_origins, health_problems, merge_health
from ansible_collections.llmops.vllm.plugins.module_utils.topology_common import (
    MIB,
    NVLINK_RE,
    RunCommand,
    TopologyError,
    as_text,
    bus_key,
    cpulist,
    infer_compute_capability,
    nvidia_bus_id,
    parse_cpulist,
    pcie_fact,
    read_text,
)
from ansible_collections.llmops.vllm.plugins.module_utils.topology_numactl import parse_numactl
from ansible_collections.llmops.vllm.plugins.module_utils.topology_nvml import (
    check_nvml_snapshot,
    load_nvml,
    nvml_collect,
)
from ansible_collections.llmops.vllm.plugins.module_utils.topology_smi_query import QUERY_FIELDS, parse_query_csv
from ansible_collections.llmops.vllm.plugins.module_utils.topology_smi_topo import parse_topo_matrix
from ansible_collections.llmops.vllm.plugins.module_utils.topology_sysfs import read_sysfs
from ansible_collections.llmops.vllm.plugins.module_utils.vllm_process import parse_cgroup

__all__ = [
    "TopologyError",
    "build_topology",
    "probe",
    "read_host",
    "USE_NVML_CHOICES",
]

USE_NVML_CHOICES = ("auto", "always", "never")

# A parsed source or the merged facts: plain JSON-ready data.
Facts = Dict[str, Any]


def read_host(root: str = "/") -> Dict[str, Optional[int]]:
    """Host memory (MemTotal of ``root/proc/meminfo``) and online CPU count, None when unknown."""
    memory: Optional[int] = None
    found = re.search(r"^MemTotal:\s*(\d+)\s*kB", read_text(os.path.join(root, "proc", "meminfo")) or "",
                      re.M)
    if found:
        memory = int(found.group(1)) * 1024
    cpu_count: Optional[int] = None
    online = read_text(os.path.join(root, "sys", "devices", "system", "cpu", "online"))
    if online:
        try:
            cpu_count = len(parse_cpulist(online)) or None
        except ValueError:
            cpu_count = None
    if cpu_count is None and os.path.abspath(root) == "/":
        cpu_count = os.cpu_count()
    return {"memory_bytes": memory, "cpu_count": cpu_count}


# --------------------------------------------------------------------------------------------
# Merging the sources
# --------------------------------------------------------------------------------------------


def build_topology(topo_text: Optional[str] = None, query_text: Optional[str] = None, numactl_text: Optional[str] = None,
                   sysfs_root: Optional[str] = None, nvml: Optional[Facts] = None) -> Facts:
    """The topology facts (the ``llmops-vllm topology --json`` contract) from captured outputs.

    Each argument is optional: ``topo_text`` (``nvidia-smi topo -m``), ``query_text`` (the
    ``--query-gpu`` CSV or ``nvidia-smi -q``), ``numactl_text`` (``numactl -H``), ``sysfs_root``
    (a directory holding ``sys/...``) and ``nvml`` (an ``nvml_snapshot()`` dict).

    Returns a dict with ``gpus`` (sorted by nvidia-smi index: index, name, uuid, bus_id,
    memory_bytes, numa_node, numa_source, cpu_affinity, compute_capability, pcie, health), ``links``
    (GPU x GPU, "X" on the diagonal, None where no source knows), ``interconnect`` ("nvlink" when
    every pair is NV<n>, "pcie" when none is, "mixed", "none" for 0 or 1 GPU, "unknown" when
    some pair's link is unknown), ``numa_nodes`` ({"<id>": {"gpus", "cpus", ...}}), ``nics``,
    ``gpu_count``, ``driver_version``, ``cuda_version``, ``sources`` and ``warnings``.

    Raises TopologyError when an input cannot be parsed.
    """
    topo = parse_topo_matrix(topo_text) if topo_text is not None else None
    query = parse_query_csv(query_text) if query_text is not None else None
    numactl = parse_numactl(numactl_text) if numactl_text is not None else None
    sysfs: Optional[Facts] = None
    if sysfs_root is not None:
        if not os.path.isdir(sysfs_root):
            raise TopologyError("sysfs root %s: not a directory; expected a directory that holds "
                                "sys/bus/pci/devices and sys/devices/system/node" % sysfs_root)
        sysfs = read_sysfs(sysfs_root)
    if nvml is not None:
        check_nvml_snapshot(nvml)
    return _assemble(topo=topo, query=query, numactl=numactl, sysfs=sysfs, nvml=nvml)


def _first(*candidates: Any) -> Any:
    for candidate in candidates:
        if candidate is not None:
            return candidate
    return None


def _match_gpus(query: Optional[Facts], nvml: Optional[Facts], topo: Optional[Facts], warnings: List[str]
                ) -> Dict[int, Dict[str, Facts]]:
    """Records {index: {"query": gpu, "nvml": gpu, "topo": gpu}} matched by bus id, else index."""
    records: Dict[int, Dict[str, Facts]] = {}
    for gpu in (query or {}).get("gpus", []):
        records[gpu["index"]] = {"query": gpu}
    by_bus = {bus_key(record["query"]["bus_id"]): index for index, record in records.items()
              if bus_key(record["query"]["bus_id"])}
    for gpu in (nvml or {}).get("gpus", []):
        key = bus_key(gpu.get("bus_id"))
        if key in by_bus:
            records[by_bus[key]]["nvml"] = gpu
            continue
        record = records.get(gpu["index"])
        if record is None:
            records[gpu["index"]] = {"nvml": gpu}
        elif key is None or bus_key((record.get("query") or {}).get("bus_id")) is None:
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


def _attach_sysfs(records: Dict[int, Dict[str, Facts]], sysfs: Facts, warnings: List[str]) -> None:
    """Give each record its sysfs GPU: by bus id, or by position when nothing has a bus id
    (nvidia-smi enumerates GPUs in PCI bus order, which is how read_sysfs sorts them)."""
    sysfs_gpus = list(sysfs["gpus"])
    by_bus = {bus_key(gpu["bus_id"]): gpu for gpu in sysfs_gpus}
    bus_ids = {index: _bus_of(record) for index, record in records.items()}
    if any(bus_ids.values()):
        used: Set[Optional[Tuple[int, int, int, int]]] = set()
        for index, record in records.items():
            key = bus_key(bus_ids[index])
            if key in by_bus:
                record["sysfs"] = by_bus[key]
                used.add(key)
        unused = [gpu["bus_id"] for gpu in sysfs_gpus if bus_key(gpu["bus_id"]) not in used]
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


def _bus_of(record: Dict[str, Facts]) -> Optional[str]:
    return cast(Optional[str], _first((record.get("query") or {}).get("bus_id"), (record.get("nvml") or {}).get("bus_id")))


_SOURCE_LABELS = {"nvml": "NVML", "sysfs": "sysfs", "topo": "topo -m", "cpu_affinity": "CPU affinity"}


def _numa_for(index: int, record: Dict[str, Facts], node_cpus: Dict[int, Set[int]], warnings: List[str]
              ) -> Tuple[Optional[int], Optional[str]]:
    """(numa_node, numa_source) by the order of trust NVML, sysfs (when not -1), topo -m, and
    last the one node whose CPUs contain the GPU's CPU affinity (nvidia-smi before the NUMA
    Affinity column). Disagreements become warnings."""
    candidates: List[Tuple[str, int]] = []
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


def _merged_pcie(record: Dict[str, Facts]) -> Facts:
    fields = ("gen_current", "gen_max", "width_current", "width_max")
    values: List[Optional[int]] = []
    for field in fields:
        values.append(_first(*((record.get(source) or {}).get("pcie", {}).get(field)
                               for source in ("query", "nvml", "sysfs"))))
    return pcie_fact(*values)


def _node_cpu_sets(numa_source_nodes: Dict[int, Facts]) -> Dict[int, Set[int]]:
    sets: Dict[int, Set[int]] = {}
    for node, facts in numa_source_nodes.items():
        try:
            sets[node] = parse_cpulist(facts.get("cpus") or "")
        except ValueError:
            continue
    return sets


def _attach_smi_q(records: Dict[int, Dict[str, Facts]], smi_q: Facts) -> None:
    """Give each record its `nvidia-smi -q` GPU (health facts of a live probe), by bus id, else index."""
    by_bus = {bus_key(_bus_of(record)): index for index, record in records.items() if _bus_of(record)}
    for gpu in smi_q.get("gpus", []):
        index = by_bus.get(bus_key(gpu.get("bus_id")), gpu["index"])
        if index in records:
            records[index]["smi_q"] = gpu


def _assemble(topo: Optional[Facts] = None, query: Optional[Facts] = None, numactl: Optional[Facts] = None,
              sysfs: Optional[Facts] = None, nvml: Optional[Facts] = None, warnings: Optional[List[str]] = None,
              smi_q: Optional[Facts] = None) -> Facts:
    warnings = list(warnings or [])
    sources: List[str] = []
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
    if smi_q is not None:
        sources.append("nvidia-smi-q")

    # NUMA nodes of the host: numactl first (what the operator captured), sysfs fills the rest.
    host_nodes: Dict[int, Facts] = {}
    for node, facts in ((numactl or {}).get("nodes") or {}).items():
        memory = facts.get("size_mb")
        host_nodes[node] = {"cpus": facts["cpus"], "cpuless": facts["cpuless"],
                            "memory_bytes": memory * MIB if memory is not None else None}
    for node, facts in ((sysfs or {}).get("numa_nodes") or {}).items():
        host_nodes.setdefault(node, {"cpus": facts["cpus"], "cpuless": facts["cpuless"],
                                     "memory_bytes": facts["memory_bytes"]})
    node_cpus = _node_cpu_sets(host_nodes)

    records = _match_gpus(query, nvml, topo, warnings)
    if smi_q is not None:
        _attach_smi_q(records, smi_q)
    if sysfs is not None:
        _attach_sysfs(records, sysfs, warnings)

    gpus: List[Facts] = []
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
            "bus_id": nvidia_bus_id(bus_id) if bus_id else None,
            # NVML counts bytes; nvidia-smi rounds to MiB.
            "memory_bytes": _first(n.get("memory_bytes"), q.get("memory_bytes")),
            "numa_node": numa_node,
            "numa_source": numa_source,
            "cpu_affinity": _first(t.get("cpu_affinity"), n.get("cpu_affinity")),
            "compute_capability": _first(q.get("compute_capability"), n.get("compute_capability"),
                                         infer_compute_capability(name)),
            "pcie": _merged_pcie(record),
            # nvidia-smi -q first (the captures the checks are tested on), NVML fills what it lacks.
            "health": merge_health(q.get("health"), (record.get("smi_q") or {}).get("health"), n.get("health")),
        })

    for gpu in gpus:
        gpu["health"]["problems"] = health_problems(gpu)
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


def _merged_links(gpus: List[Facts], topo: Optional[Facts], nvml: Optional[Facts], warnings: List[str]
                  ) -> List[List[Optional[str]]]:
    """GPU x GPU matrix in ``gpus`` order: topo -m's words when it lists both GPUs (it is
    nvidia-smi's own answer), else NVML's, else None."""
    topo_position = {gpu["index"]: position for position, gpu in enumerate((topo or {}).get("gpus", []))}
    nvml_gpus = (nvml or {}).get("gpus", [])
    nvml_links = (nvml or {}).get("links") or []
    nvml_position = {gpu["index"]: position for position, gpu in enumerate(nvml_gpus)} if nvml_links else {}
    disagreements: List[str] = []
    links: List[List[Optional[str]]] = []
    for first in gpus:
        row: List[Optional[str]] = []
        for second in gpus:
            a, b = first["index"], second["index"]
            from_topo: Optional[str] = None
            from_nvml: Optional[str] = None
            if a in topo_position and b in topo_position:
                from_topo = cast(Facts, topo)["links"][topo_position[a]][topo_position[b]]
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


def _interconnect(links: List[List[Optional[str]]]) -> str:
    pairs = [links[i][j] for i in range(len(links)) for j in range(i + 1, len(links))]
    if not pairs:
        return "none"
    if any(cell is None for cell in pairs):
        return "unknown"
    nvlink = sum(1 for cell in pairs if NVLINK_RE.match(cast(str, cell)))
    if nvlink == len(pairs):
        return "nvlink"
    return "pcie" if nvlink == 0 else "mixed"


def _numa_nodes(gpus: List[Facts], host_nodes: Dict[int, Facts], warnings: List[str]) -> Dict[str, Facts]:
    """{"<id>": {"gpus": [...], "cpus": "..."}}: the host's nodes when numactl/sysfs describe them
    (with ``cpuless`` and ``memory_bytes``), else the nodes the GPUs name, with the union of their
    CPU affinities."""
    nodes: Dict[int, Facts] = {}
    if host_nodes:
        for node, facts in sorted(host_nodes.items()):
            nodes[node] = {"gpus": [], "cpus": facts["cpus"], "cpuless": facts["cpuless"],
                           "memory_bytes": facts["memory_bytes"]}
        node_cpus = _node_cpu_sets(host_nodes)
        mismatched: Dict[Tuple[int, str], List[int]] = {}
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
        cpu_sets: Dict[int, Set[int]] = {}
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


def _run(run_command: RunCommand, argv: List[str]) -> Tuple[int, str, str]:
    """run_command(argv) -> (rc, stdout, stderr); a binary that cannot start is rc 127."""
    try:
        rc, stdout, stderr = run_command(argv)
    except OSError as exc:
        return 127, "", str(exc)
    return rc, as_text(stdout) or "", as_text(stderr) or ""


def _first_line(*texts: Optional[str]) -> str:
    for text in texts:
        for line in (text or "").splitlines():
            if line.strip():
                return line.strip()
    return "no output"


def _no_devices(stdout: Optional[str], stderr: Optional[str]) -> bool:
    return "No devices were found" in (stdout or "") + (stderr or "")


def probe(run_command: RunCommand, use_nvml: str = "auto", sysfs_root: str = "/", nvidia_smi_path: Optional[str] = None,
          numactl_path: Optional[str] = None) -> Facts:
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
    warnings: List[str] = []
    smi = shutil.which("nvidia-smi") if nvidia_smi_path is None else nvidia_smi_path
    topo: Optional[Facts] = None
    query: Optional[Facts] = None
    smi_q: Optional[Facts] = None
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
            smi_q = _probe_smi_q(run_command, smi, warnings)

    numactl: Optional[Facts] = None
    numactl_bin = shutil.which("numactl") if numactl_path is None else numactl_path
    if numactl_bin:
        rc, stdout, stderr = _run(run_command, [numactl_bin, "-H"])
        if rc == 0 and stdout.strip():
            try:
                numactl = parse_numactl(stdout, source="`numactl -H` output")
            except TopologyError as exc:
                warnings.append(str(exc))

    sysfs = read_sysfs(sysfs_root)

    nvml: Optional[Facts] = None
    if use_nvml != "never":
        module, reason = load_nvml()
        if module is None:
            if use_nvml == "always":
                raise TopologyError("use_nvml=always, but NVML is not available: %s; install nvidia-ml-py "
                                    "for the Python that runs this, or use use_nvml=auto" % reason)
        else:
            try:
                nvml = nvml_collect(module, [])
            finally:
                try:
                    module.nvmlShutdown()
                except Exception:  # best effort, the facts are collected
                    pass

    result = _assemble(topo=topo, query=query, numactl=numactl, sysfs=sysfs, nvml=nvml, warnings=warnings, smi_q=smi_q)
    for gpu in result["gpus"]:
        # Which unit (and parent) each process on a GPU belongs to: the preflight allows the unit it retires.
        add_process_origins(gpu["health"], parse_cgroup, os.path.join(sysfs_root, "proc"))
        gpu["health"]["problems"] = health_problems(gpu)
    result["host"] = read_host(sysfs_root)
    return result


def _probe_smi_q(run_command: RunCommand, smi: str, warnings: List[str]) -> Optional[Facts]:
    """`nvidia-smi -q`, for the health fields (ECC, retired pages, remapped rows, MIG, persistence,
    throttle reasons, processes); a failure costs only those, which NVML may still give."""
    rc, stdout, stderr = _run(run_command, [smi, "-q"])
    if rc != 0:
        warnings.append("`nvidia-smi -q` failed (rc=%d): %s; GPU health comes from NVML only"
                        % (rc, _first_line(stderr, stdout)))
        return None
    try:
        return parse_query_csv(stdout, source="`nvidia-smi -q` output")
    except TopologyError as exc:
        warnings.append(str(exc))
        return None


def _probe_query(run_command: RunCommand, smi: str, warnings: List[str]) -> Optional[Facts]:
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
