#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
---
module: gpu_topology_info
short_description: Gather the GPU topology of a host (GPUs, links, NUMA nodes)
version_added: "0.1.0"
description:
  - Gathers what the serving planner needs to know about a host's NVIDIA GPUs, read-only.
  - How many GPUs there are, their name, UUID, PCI bus id, memory, compute capability and PCIe
    link (generation and width, current and maximum).
  - How every pair of GPUs is linked, in the words of C(nvidia-smi topo -m) (V(NV18), V(PIX),
    V(PXB), V(PHB), V(NODE), V(SYS)), and which NUMA node and CPUs each GPU belongs to.
  - It runs C(nvidia-smi topo -m), C(nvidia-smi --query-gpu=... --format=csv), C(nvidia-smi -q) (GPU health)
    and C(numactl -H) (when installed), reads C(/sys/bus/pci/devices) and C(/sys/devices/system/node), and asks NVML
    through the C(pynvml) Python module (package C(nvidia-ml-py)) when it is importable.
  - The sources are merged with a fixed order of trust for each GPU's NUMA node (NVML, then sysfs
    unless it says -1, then C(nvidia-smi topo -m)); RV(gpus[].numa_source) says which one was used
    and RV(topology_warnings) says where the sources disagree.
  - A host without C(nvidia-smi) is a CPU-only host; the module then returns no GPUs, not an error.
  - Each GPU's RV(gpus[].health) holds ECC error counts, retired pages and remapped rows, MIG and
    persistence mode, clock throttle reasons and the processes on it (with the systemd unit of each,
    read from C(/proc/<pid>/cgroup)), and the problems found (docs/gpu-health.md).
  - Instead of probing, the module can parse captured outputs (O(topo_text), O(query_text),
    O(numactl_text), O(sysfs_root)); when any of them is given, it runs no command and does not
    use NVML.
  - The same facts, with the same keys, come from C(llmops-vllm topology --json) on a controller.
options:
  use_nvml:
    description:
      - Whether to ask NVML through the C(pynvml) module of the Python that runs the module.
      - V(auto) uses NVML when C(pynvml) imports and NVML initialises, and goes on without it otherwise.
      - V(always) fails when NVML cannot be used.
      - V(never) does not try.
      - V(always) cannot be combined with captured inputs.
    type: str
    choices: [auto, always, never]
    default: auto
  nvidia_smi_path:
    description:
      - Path of the C(nvidia-smi) executable.
      - By default it is looked up in E(PATH) and the usual system directories; when it is not
        found, the host is treated as having no GPU.
      - When given, the file must exist.
    type: path
  topo_text:
    description:
      - Captured output of C(nvidia-smi topo -m) to parse instead of running it.
      - Tabs or spaces, ANSI escape codes, NIC rows and the Legend are all accepted, as are comment
        lines before the matrix.
    type: str
  query_text:
    description:
      - Captured output of C(nvidia-smi --query-gpu=index,... --format=csv), with any subset of
        fields that includes C(index), or of C(nvidia-smi -q).
    type: str
  numactl_text:
    description:
      - Captured output of C(numactl -H) (C(numactl --hardware)).
    type: str
  sysfs_root:
    description:
      - A directory that holds a copy of C(sys/bus/pci/devices) and C(sys/devices/system/node)
        (and optionally C(proc/meminfo)) to read instead of the live C(/sys).
    type: path
notes:
  - Read-only. The module never reports C(changed).
  - Ansible reserves the C(warnings) key of a module result, so the topology's warnings are returned
    as RV(topology_warnings) and also shown as Ansible warnings.
requirements:
  - C(nvidia-smi) on GPU hosts (it comes with the NVIDIA driver).
  - Optional, C(numactl) and the C(nvidia-ml-py) Python package.
attributes:
  check_mode:
    support: full
    description: Only reads; the result is the same in check mode.
  diff_mode:
    support: none
    description: Nothing is changed, so there is nothing to diff.
author:
  - llmops.vllm maintainers (@llmops)
seealso:
  - name: nvidia-smi documentation
    description: The tool whose output this module parses.
    link: https://docs.nvidia.com/deploy/nvidia-smi/index.html
'''

EXAMPLES = r'''
---
- name: Probe the GPUs of the host
  llmops.vllm.gpu_topology_info:
  register: topology

- name: Show GPU count, interconnect and NUMA placement
  ansible.builtin.debug:
    msg: >-
      {{ topology.gpu_count }} GPUs over {{ topology.interconnect }};
      NUMA nodes {{ topology.numa_nodes | dict2items | map(attribute='key') | join(', ') }}

- name: Fail early when NVML is required (for example to record a snapshot for tests)
  llmops.vllm.gpu_topology_info:
    use_nvml: always

- name: Parse outputs captured on another machine, without running anything
  llmops.vllm.gpu_topology_info:
    topo_text: "{{ lookup('ansible.builtin.file', 'captures/nvidia-smi-topo-m.txt') }}"
    query_text: "{{ lookup('ansible.builtin.file', 'captures/query-gpu.csv') }}"
    numactl_text: "{{ lookup('ansible.builtin.file', 'captures/numactl-H.txt') }}"
  register: captured
'''

RETURN = r'''
gpus:
  description:
    - The GPUs, sorted by C(nvidia-smi) index.
    - Empty on a host without GPUs.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: The C(nvidia-smi) index (PCI bus order; set C(CUDA_DEVICE_ORDER=PCI_BUS_ID) so CUDA uses the same).
      type: int
      returned: always
      sample: 4
    name:
      description: Product name; V(null) when no source gives it (topology output alone).
      type: str
      returned: always
      sample: NVIDIA RTX PRO 6000 Blackwell Server Edition
    uuid:
      description: GPU UUID, usable in C(CUDA_VISIBLE_DEVICES); V(null) when unknown.
      type: str
      returned: always
      sample: GPU-82383b2b-58e3-1ca5-d958-f53d1752f4f6
    bus_id:
      description: PCI address as C(nvidia-smi) writes it; V(null) when unknown.
      type: str
      returned: always
      sample: "00000000:84:00.0"
    memory_bytes:
      description: Total GPU memory in bytes; V(null) when unknown.
      type: int
      returned: always
      sample: 102641958912
    numa_node:
      description: NUMA node of the GPU; V(null) when every source says N/A, -1 or nothing.
      type: int
      returned: always
      sample: 1
    numa_source:
      description:
        - Which source gave RV(gpus[].numa_node); V(null) when none did.
        - V(cpu_affinity) means no source named the node and it was found as the node whose CPUs
          contain the GPU's CPU affinity.
      type: str
      returned: always
      choices: [nvml, sysfs, topo, cpu_affinity]
      sample: topo
    cpu_affinity:
      description: CPUs close to the GPU, as C(nvidia-smi topo -m) prints them (a cpulist); V(null) when unknown.
      type: str
      returned: always
      sample: 64-127,192-238
    compute_capability:
      description:
        - CUDA compute capability as reported, or inferred from the product name when the driver
          does not report it; V(null) when unknown.
      type: str
      returned: always
      sample: "12.0"
    pcie:
      description: The GPU's PCIe link.
      type: dict
      returned: always
      contains:
        gen_current:
          description: Current generation; idle GPUs train down (Gen1), which is normal.
          type: int
          sample: 1
        gen_max:
          description: Highest generation of the GPU and slot.
          type: int
          sample: 5
        width_current:
          description: Current number of lanes.
          type: int
          sample: 16
        width_max:
          description: Maximum number of lanes.
          type: int
          sample: 16
        degraded:
          description: V(true) only when the width is below its maximum; V(null) when a width is unknown.
          type: bool
          sample: false
    health:
      description:
        - The GPU's health, from C(nvidia-smi -q) and NVML (C(nvidia-smi -q) first, NVML fills what it lacks).
        - Each field is V(null) where no source can tell (ECC on a GeForce card, retired pages on Hopper, a VM).
        - The preflight refuses or warns on RV(gpus[].health.problems) of the GPUs it plans to use (docs/gpu-health.md).
        - V(null) for a GPU no source with health facts lists (for example a C(--query-gpu) CSV capture).
      type: dict
      returned: always
      contains:
        persistence_mode:
          description: Persistence mode is on.
          type: bool
          sample: true
        mig_mode:
          description: MIG mode is on now.
          type: bool
          sample: false
        mig_mode_pending:
          description: MIG mode after the next GPU reset.
          type: bool
          sample: false
        ecc_mode:
          description: ECC is on.
          type: bool
          sample: true
        ecc_uncorrected_volatile:
          description: Uncorrected ECC errors since the driver loaded (SRAM and DRAM, or the Double Bit total on older GPUs).
          type: int
          sample: 0
        ecc_uncorrected_aggregate:
          description: Uncorrected ECC errors over the GPU's life (informational; a remapped past error is no fault).
          type: int
          sample: 0
        retired_pages:
          description: Memory pages retired (single and double bit), on GPUs that retire pages (Volta and older).
          type: int
          sample: 0
        retired_pages_pending:
          description: A page waits for retirement, which happens at the next GPU reset.
          type: bool
          sample: false
        remapped_rows_uncorrectable:
          description: Rows remapped for uncorrectable errors (A100 and later).
          type: int
          sample: 0
        remapped_rows_pending:
          description: A row remap waits for the next GPU reset.
          type: bool
          sample: false
        remapped_rows_failure:
          description: Row remapping has failed; the GPU cannot hide bad memory any more.
          type: bool
          sample: false
        throttle_reasons:
          description:
            - The clock throttle (event) reasons active now, in snake case (C(Clocks Event Reasons) or
              C(Clocks Throttle Reasons) of C(nvidia-smi -q), or NVML's bit mask).
          type: list
          elements: str
          sample: [idle]
        processes:
          description: The processes on the GPU (compute and graphics); V([]) for none.
          type: list
          elements: dict
          contains:
            pid:
              description: Process id (on the host).
              type: int
              sample: 4242
            type:
              description: V(C) compute, V(G) graphics, V(C+G) both (as C(nvidia-smi) prints it).
              type: str
              sample: C
            name:
              description: Process name; V(null) from NVML.
              type: str
              sample: /opt/venv/bin/python3
            used_memory_mib:
              description: GPU memory it holds, MiB; V(null) when not reported.
              type: int
              sample: 70112
            unit:
              description: The systemd unit of its cgroup (live probe only).
              type: str
              sample: vllm-llama.service
            ancestors:
              description: Its parent pids up to init (live probe only), so a worker counts as its server's.
              type: list
              elements: int
              sample: [4200, 1]
        problems:
          description:
            - What the checks find with nothing allowed and nothing waived (the preflight re-checks with the
              unit being retired allowed and the waivers applied).
          type: list
          elements: dict
          contains:
            check:
              description: The check's name, the one a waiver lists.
              type: str
              choices: [ecc_uncorrected, retired_pages_pending, row_remap_pending, row_remap_failure, mig_mode,
                        link_width, foreign_process, persistence_mode, clocks_throttle]
              sample: link_width
            severity:
              description: V(refuse) stops a rollout before anything is stopped, V(warn) only says it.
              type: str
              choices: [refuse, warn]
              sample: refuse
            waived:
              description: Waived by name (always V(false) here).
              type: bool
              sample: false
            message:
              description: GPU index, check, measured values, what to do and how to waive it.
              type: str
              sample: "GPU 0: link_width - PCIe link width x8 is below its maximum x16 (generation 1 of 5): check the slot,
                riser or bifurcation setting; waive with preflight_gpu_health_waive: [link_width]"
  sample:
    - index: 0
      name: NVIDIA H200
      uuid: GPU-54fe2c2a-01cc-f1bd-b4e8-d9217823f268
      bus_id: "00000000:00:06.0"
      memory_bytes: 150754820096
      numa_node: 0
      numa_source: topo
      cpu_affinity: 0-31
      compute_capability: "9.0"
      pcie: {gen_current: 5, gen_max: 5, width_current: 16, width_max: 16, degraded: false}
    - index: 1
      name: NVIDIA H200
      uuid: GPU-d3d6edd7-a585-6692-6525-ef4f6caa54c9
      bus_id: "00000000:00:07.0"
      memory_bytes: 150754820096
      numa_node: 0
      numa_source: topo
      cpu_affinity: 0-31
      compute_capability: "9.0"
      pcie: {gen_current: 5, gen_max: 5, width_current: 16, width_max: 16, degraded: false}
links:
  description:
    - GPU x GPU matrix in the order of RV(gpus), with the words of C(nvidia-smi topo -m).
    - V(X) on the diagonal; V(NV<n>) for n bonded NVLinks; V(PIX), V(PXB), V(PHB), V(NODE), V(SYS)
      for PCIe paths from the closest to the farthest; V(null) where no source knows.
  returned: always
  type: list
  elements: list
  sample: [["X", "NV18"], ["NV18", "X"]]
interconnect:
  description:
    - V(nvlink) when every GPU pair is linked by NVLink, V(pcie) when none is, V(mixed) otherwise,
      V(none) for zero or one GPU, V(unknown) when the link of some pair is unknown.
  returned: always
  type: str
  sample: nvlink
numa_nodes:
  description:
    - NUMA nodes keyed by node id (a string).
    - From C(numactl -H) and sysfs when available (all nodes of the host), else the nodes the GPUs name.
  returned: always
  type: dict
  contains:
    gpus:
      description: Indices of the GPUs on the node.
      type: list
      elements: int
      sample: [4, 5, 6, 7]
    cpus:
      description: The node's CPUs as a cpulist; empty for a memory-only node.
      type: str
      sample: 64-127,192-238,240-255
    cpuless:
      description: V(true) for a memory-only node (CXL, HBM, GPU memory); V(null) when unknown.
      type: bool
      sample: false
    memory_bytes:
      description: Memory of the node in bytes; V(null) when unknown.
      type: int
      sample: 811629281280
  sample:
    "0": {gpus: [0, 1, 2, 3], cpus: 0-63,128-191, cpuless: false, memory_bytes: 811258085376}
    "1": {gpus: [4, 5, 6, 7], cpus: 64-127,192-238,240-255, cpuless: false, memory_bytes: 811629281280}
nics:
  description: Network devices in the C(nvidia-smi topo -m) matrix; never counted as GPUs.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Column name in the matrix.
      type: str
      sample: NIC0
    device:
      description: Device name from the NIC Legend; V(null) when the capture has none.
      type: str
      sample: mlx5_0
    gpu_links:
      description: Link from the NIC to each GPU, in the order of RV(gpus).
      type: list
      elements: str
      sample: [PIX, NODE, NODE, NODE, SYS, SYS, SYS, SYS]
  sample: [{name: NIC0, device: mlx5_0, gpu_links: [PIX, NODE, NODE, NODE, SYS, SYS, SYS, SYS]}]
gpu_count:
  description: Number of GPUs.
  returned: always
  type: int
  sample: 8
driver_version:
  description: NVIDIA driver version; V(null) when unknown.
  returned: always
  type: str
  sample: 580.159.04
cuda_version:
  description: Highest CUDA version the driver supports; V(null) when unknown.
  returned: always
  type: str
  sample: "13.0"
sources:
  description: The sources that were used.
  returned: always
  type: list
  elements: str
  sample: [topo, query-csv, numactl, sysfs, nvml, nvidia-smi-q]
topology_warnings:
  description:
    - The topology's own warnings (the C(warnings) key of C(llmops-vllm topology --json)), for
      example sources that disagree or a PCIe link below its width.
  returned: always
  type: list
  elements: str
  sample:
    - "GPU 1: PCIe link width x8 is below its maximum x16 (degraded: check the slot, riser or bifurcation setting)"
host:
  description: The host itself.
  returned: always
  type: dict
  contains:
    memory_bytes:
      description: Total memory (MemTotal); V(null) with captured inputs but no O(sysfs_root) with a C(proc/meminfo).
      type: int
      sample: 1622887366656
    cpu_count:
      description: Online CPUs; V(null) when unknown.
      type: int
      sample: 255
'''

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.vllm.plugins.module_utils.topology import (
    TopologyError,
    USE_NVML_CHOICES,
    build_topology,
    probe,
    read_host,
)

CAPTURED_INPUTS = ("topo_text", "query_text", "numactl_text", "sysfs_root")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            use_nvml=dict(type="str", default="auto", choices=list(USE_NVML_CHOICES)),
            nvidia_smi_path=dict(type="path"),
            topo_text=dict(type="str"),
            query_text=dict(type="str"),
            numactl_text=dict(type="str"),
            sysfs_root=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    captured = [name for name in CAPTURED_INPUTS if params[name] is not None]

    try:
        if captured:
            if params["use_nvml"] == "always":
                module.fail_json(msg="use_nvml=always probes the live host; it cannot be combined with "
                                     "captured inputs (%s)" % ", ".join(captured))
            result = build_topology(topo_text=params["topo_text"], query_text=params["query_text"],
                                    numactl_text=params["numactl_text"], sysfs_root=params["sysfs_root"])
            if params["sysfs_root"] is not None:
                result["host"] = read_host(params["sysfs_root"])
            else:
                result["host"] = {"memory_bytes": None, "cpu_count": None}
        else:
            nvidia_smi = params["nvidia_smi_path"]
            if nvidia_smi is not None and not os.access(nvidia_smi, os.X_OK):
                module.fail_json(msg="nvidia_smi_path %s: not an executable file" % nvidia_smi)
            result = probe(
                module.run_command,
                use_nvml=params["use_nvml"],
                sysfs_root="/",
                # "" = not installed: probe() then skips the command (a host without nvidia-smi
                # is CPU-only).
                nvidia_smi_path=nvidia_smi or module.get_bin_path("nvidia-smi") or "",
                numactl_path=module.get_bin_path("numactl") or "",
            )
    except TopologyError as exc:
        module.fail_json(msg=str(exc))

    topology_warnings = result.pop("warnings")
    for warning in topology_warnings:
        module.warn(warning)
    module.exit_json(changed=False, topology_warnings=topology_warnings, **result)


if __name__ == "__main__":
    main()
