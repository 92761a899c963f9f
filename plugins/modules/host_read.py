#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
---
module: host_read
short_description: A read of the host that a snapshot can record and an offline preview can answer
version_added: 0.1.0
description:
  - Runs O(module) with O(args) on the host and returns its result unchanged - the rollout's probes
    (facts, GPUs, the vLLM, its processes, the listeners, the disk, the current model's health) go
    through it.
  - With C(llmops_vllm_snapshot_record) set to a directory (C(llmops-vllm apply --snapshot DIR)), the
    result is also recorded in C(DIR/<inventory_hostname>.json), keyed by the module and its arguments
    (secrets such as C(token) or C(api_key) are dropped first, never written).
  - With C(llmops_vllm_snapshot_replay) set (C(llmops-vllm diff --offline DIR)), nothing runs on the host -
    the recorded result for the same module and arguments is returned. A read the snapshot does not
    hold is answered from what it holds where the module's own logic allows it
    (M(llmops.vllm.vllm_process_info) for another port or other GPUs; M(llmops.vllm.hf_model) runs on
    the controller with the free bytes the host had; M(llmops.vllm.vllm_venv) for a venv the recorded
    listing of its directory lacks says it would create it), otherwise the task fails and names the read.
  - With O(files), it records the files the preview compares against (the state file, the units, the
    helper scripts) into the snapshot; the CLI writes them under the offline preview's root before the play.
  - Runs on the controller as an action plugin.
author:
  - llmops.vllm maintainers (@llmops)
options:
  module:
    description: The module that reads the host, by FQCN (C(ansible.builtin.setup), C(llmops.vllm.vllm_info)).
    type: str
  args:
    description: Its arguments.
    type: dict
    default: {}
  files:
    description:
      - Paths of files to record into the snapshot while recording (a C(*) in the last part is a glob);
        nothing otherwise. Mutually exclusive with O(module).
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    description: Runs O(module) with the task's check mode; the result is what the module returns.
    support: full
  diff_mode:
    description: What O(module) returns.
    support: none
  action:
    description: Indicates this has a corresponding action plugin so some parts of the options can be executed on the controller.
    support: full
notes:
  - C(playbooks/rollout.yml) and its roles use it; C(docs/gitops.md) explains snapshots and the offline diff.
'''

EXAMPLES = r'''
- name: Probe GPUs, NUMA nodes and links
  llmops.vllm.host_read:
    module: llmops.vllm.gpu_topology_info
  register: preflight_topology

- name: Gather the facts the rollout needs
  llmops.vllm.host_read:
    module: ansible.builtin.setup
    args:
      gather_subset: [min, network]
'''

RETURN = r'''
files:
  description: With O(files), the paths recorded (while recording) or held by the snapshot (offline).
  returned: with O(files)
  type: list
  elements: str
  sample: [/etc/systemd/system/vllm-tiny-llama.service, /var/lib/llmops-vllm/state.json]
'''
