#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
---
module: unit_memory
short_description: The host RAM a systemd unit's processes use
version_added: "0.1.0"
description:
  - Reads how much RAM a running unit uses - systemd's C(MemoryCurrent) (its cgroup's counter) where the
    memory controller is there, else the proportional set size (PSS, C(/proc/PID/smaps_rollup)) summed over
    the unit's main process and every process below it.
  - The rollout measures the model serving now with it, so that the planner can tell whether the next model
    fits beside it on a CPU host (blue/green, docs/rollout.md).
  - A unit that does not run uses nothing - RV(bytes=0), RV(source=none).
options:
  unit:
    description: The unit, e.g. C(vllm-qwen3.service).
    type: str
    required: true
notes:
  - Read-only. The module never reports C(changed).
attributes:
  check_mode:
    support: full
    description: Reads the same in check mode.
  diff_mode:
    support: none
    description: Nothing is changed, so there is nothing to diff.
author:
  - llmops.vllm maintainers (@llmops)
seealso:
  - module: llmops.vllm.vllm_process_info
'''

EXAMPLES = r'''
- name: The RAM the model serving now uses
  llmops.vllm.unit_memory:
    unit: vllm-qwen3.service
  register: serving_memory
'''

RETURN = r'''
bytes:
  description: The RAM the unit uses, in bytes (0 when it does not run).
  returned: always
  type: int
  sample: 2684354560
source:
  description: C(cgroup) (systemd's MemoryCurrent), C(pss) (summed over the unit's process tree) or C(none) (not running).
  returned: always
  type: str
  sample: pss
pids:
  description: The processes counted with C(pss) (empty otherwise).
  returned: always
  type: list
  elements: int
  sample: [4242, 4250]
'''

import subprocess

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.vllm.plugins.module_utils.memory_soak import unit_pss_kib


def memory_current(unit):
    """systemd's MemoryCurrent of the unit in bytes, or None where the cgroup has no memory counter."""
    out = subprocess.run(['systemctl', 'show', '-p', 'MemoryCurrent', '--value', unit], capture_output=True,
                         text=True, check=False).stdout.strip()
    return int(out) if out.isdigit() and int(out) < 2 ** 63 else None


def main():
    module = AnsibleModule(argument_spec=dict(unit=dict(type='str', required=True)), supports_check_mode=True)
    unit = module.params['unit']
    counted = memory_current(unit)
    if counted:
        module.exit_json(changed=False, bytes=counted, source='cgroup', pids=[])
    try:
        tree = unit_pss_kib(unit)
    except ValueError:
        module.exit_json(changed=False, bytes=0, source='none', pids=[])
    module.exit_json(changed=False, bytes=int(tree['pss_kib']) * 1024, source='pss', pids=list(tree['pids']))


if __name__ == '__main__':
    main()
