#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
---
module: gpu_free
short_description: Wait until GPUs hold no compute process and their memory is free
version_added: "0.1.0"
description:
  - Waits until each GPU of O(gpu_indices) has no compute process and less than O(used_below_mib) MiB
    of memory in use, so the next model can load there (the retire step of a rollout).
  - Reads C(nvidia-smi --query-gpu=index,uuid,memory.used --format=csv) and
    C(nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv) every O(poll_interval)
    seconds, and once more at the deadline.
  - Fails after O(timeout) seconds naming each GPU still in use, its used memory and the pids of the
    compute processes still on it.
  - Fails at once, without waiting, when C(nvidia-smi) is missing or fails, or when an index is not
    a GPU of the host; those do not resolve by waiting.
options:
  gpu_indices:
    description:
      - C(nvidia-smi) indices of the GPUs to wait for (a serving plan's C(gpu_indices)).
      - An empty list waits for nothing and runs no command.
    type: list
    elements: int
    required: true
  used_below_mib:
    description:
      - A GPU counts as free when its used memory is below this many MiB (the driver keeps some
        memory for itself on an idle GPU).
      - Where C(nvidia-smi) reports no memory figure (V([N/A])), only the compute processes decide.
    type: int
    default: 1024
  timeout:
    description:
      - Seconds to wait. V(0) reads once and fails when a GPU is busy.
    type: int
    default: 300
  poll_interval:
    description: Seconds between two readings.
    type: int
    default: 3
  nvidia_smi_path:
    description:
      - Path of the C(nvidia-smi) executable; by default it is looked up in E(PATH) and the usual
        system directories.
    type: path
notes:
  - Read-only. The module never reports C(changed).
  - Compute processes are matched to GPUs by UUID; a process in another PID namespace (a container)
    may hold memory without being listed, and then RV(gpus[].processes) is empty while
    RV(gpus[].memory_used_mib) stays high.
requirements:
  - C(nvidia-smi) (it comes with the NVIDIA driver).
attributes:
  check_mode:
    support: full
    description: Reads once and reports RV(free) and RV(busy_gpus) without waiting or failing on a busy GPU.
  diff_mode:
    support: none
    description: Nothing is changed, so there is nothing to diff.
author:
  - llmops.vllm maintainers (@llmops)
seealso:
  - module: llmops.vllm.gpu_topology_info
  - name: nvidia-smi documentation
    description: The tool whose output this module parses.
    link: https://docs.nvidia.com/deploy/nvidia-smi/index.html
'''

EXAMPLES = r'''
---
- name: Wait until the GPUs of the retired model are free
  llmops.vllm.gpu_free:
    gpu_indices: [0, 1, 2, 3]
    used_below_mib: 1024
    timeout: 300

- name: Only look (never waits, never fails on a busy GPU)
  llmops.vllm.gpu_free:
    gpu_indices: "{{ plan.gpu_indices }}"
    timeout: 0
  check_mode: true
  register: gpus_now

- name: Say which GPUs are busy
  ansible.builtin.debug:
    msg: "busy: {{ gpus_now.busy_gpus }}"
  when: not gpus_now.free
'''

RETURN = r'''
free:
  description: Whether every GPU of O(gpu_indices) was free at the last reading.
  returned: always
  type: bool
  sample: true
busy_gpus:
  description: Indices of the GPUs still in use at the last reading.
  returned: always
  type: list
  elements: int
  sample: []
gpus:
  description: The GPUs of O(gpu_indices), sorted by index, as the last reading found them.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: The C(nvidia-smi) index.
      type: int
      returned: always
      sample: 0
    uuid:
      description: The GPU UUID compute processes are reported under; V(null) when unknown.
      type: str
      returned: always
      sample: GPU-54fe2c2a-01cc-f1bd-b4e8-d9217823f268
    memory_used_mib:
      description: Memory in use, in MiB; V(null) when C(nvidia-smi) reports V([N/A]).
      type: int
      returned: always
      sample: 0
    processes:
      description: The compute processes on the GPU.
      type: list
      elements: dict
      returned: always
      contains:
        pid:
          description: Process id (in C(nvidia-smi)'s PID namespace).
          type: int
          sample: 48211
        used_memory_mib:
          description: GPU memory the process holds, in MiB; V(null) when C(nvidia-smi) reports V([N/A]).
          type: int
          sample: 130004
      sample: []
    busy:
      description: Whether a compute process runs on the GPU or its memory in use is not below O(used_below_mib).
      type: bool
      returned: always
      sample: false
  sample:
    - {index: 0, uuid: GPU-54fe2c2a-01cc-f1bd-b4e8-d9217823f268, memory_used_mib: 0, processes: [], busy: false}
    - {index: 1, uuid: GPU-d3d6edd7-a585-6692-6525-ef4f6caa54c9, memory_used_mib: 0, processes: [], busy: false}
polls:
  description: How many times C(nvidia-smi) was read.
  returned: always
  type: int
  sample: 4
seconds:
  description: Seconds from the first reading to the last.
  returned: always
  type: float
  sample: 9.0
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.vllm.plugins.module_utils.gpu_free import GpuFreeError, busy_message, wait_until_free


def main():
    module = AnsibleModule(
        argument_spec=dict(
            gpu_indices=dict(type="list", elements="int", required=True),
            used_below_mib=dict(type="int", default=1024),
            timeout=dict(type="int", default=300),
            poll_interval=dict(type="int", default=3),
            nvidia_smi_path=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    for name, low in (("used_below_mib", 1), ("timeout", 0), ("poll_interval", 1)):
        if params[name] < low:
            module.fail_json(msg="%s must be %d or more, got %d" % (name, low, params[name]))
    if any(index < 0 for index in params["gpu_indices"]):
        module.fail_json(msg="gpu_indices: %s; nvidia-smi indices are 0 or more" % params["gpu_indices"])
    if not params["gpu_indices"]:
        module.exit_json(changed=False, free=True, busy_gpus=[], gpus=[], polls=0, seconds=0.0)

    nvidia_smi = params["nvidia_smi_path"] or module.get_bin_path("nvidia-smi")
    if not nvidia_smi:
        module.fail_json(msg="nvidia-smi not found on this host, so GPUs %s cannot be checked; install the NVIDIA "
                             "driver or set nvidia_smi_path" % params["gpu_indices"])
    try:
        result = wait_until_free(module.run_command, nvidia_smi, params["gpu_indices"], params["used_below_mib"],
                                 params["timeout"], params["poll_interval"], check_mode=module.check_mode)
    except GpuFreeError as exc:
        module.fail_json(msg=str(exc))
    if not result["free"]:
        if not module.check_mode:
            module.fail_json(msg=busy_message(result, params["used_below_mib"]), changed=False, **result)
        module.warn(busy_message(result, params["used_below_mib"], check_mode=True))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
