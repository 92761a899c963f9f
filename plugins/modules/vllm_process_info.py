#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
---
module: vllm_process_info
short_description: Find the vLLM servers running on a host, and those this collection did not start
version_added: "0.2.0"
description:
  - Reads C(/proc) for every vLLM API server (C(vllm serve ...), C(python -m vllm.entrypoints.openai.api_server),
    C(python -m vllm.entrypoints.cli.main serve)) - its pid, user, redacted command line, program and venv,
    working directory, the names of its environment, the addresses it listens on, the GPUs its process
    tree holds and where it runs from (its own unit, or a shell and the session unit around it).
  - A server is managed by this collection when it runs in the unit of a model the host state at
    O(state_dir) records, or when it is a process such an entry took over (same pid and start time) that
    still runs outside its unit. Every other server is foreign; each foreign one is also a warning.
  - With O(port) or O(gpu_indices) (the plan of the next model), RV(conflicts) lists the foreign servers
    that hold that port or one of those GPUs - what a rollout must refuse, or take over
    (M(llmops.vllm.vllm_takeover)).
options:
  state_dir:
    description: Directory of the host state file (M(llmops.vllm.vllm_state)); a missing file means no managed unit.
    type: path
    default: /var/lib/llmops-vllm
  port:
    description: The port the next model listens on; a foreign server listening there is a conflict.
    type: int
  gpu_indices:
    description: The GPUs the next model uses; a foreign server whose processes hold one is a conflict.
    type: list
    elements: int
    default: []
  nvidia_smi_path:
    description:
      - Path of C(nvidia-smi), which maps compute processes to GPUs. Looked up on E(PATH) by default; without
        it (a host without GPUs) RV(servers[].gpus) are empty.
    type: path
notes:
  - Read-only; never reports C(changed). Run it as root to read other users' environments and sockets.
  - Secrets never appear in the result - values of C(--api-key) and C(--hf-token) are C(********), and of
    the environment only the names are returned (RV(servers[].secrets) names those that hold secrets).
attributes:
  check_mode:
    support: full
    description: The same reading as without check mode.
  diff_mode:
    support: none
    description: Nothing is changed, so there is nothing to diff.
author:
  - llmops.vllm maintainers (@llmops)
seealso:
  - module: llmops.vllm.vllm_takeover
  - module: llmops.vllm.vllm_state
'''

EXAMPLES = r'''
---
- name: Which vLLM servers hold the port or the GPUs the new model needs
  llmops.vllm.vllm_process_info:
    state_dir: /var/lib/llmops-vllm
    port: 8000
    gpu_indices: [0, 1, 2, 3]
  register: found

- name: Refuse, naming them
  ansible.builtin.fail:
    msg: "{{ found.conflicts | map(attribute='command') | join('; ') }}"
  when: found.conflicts | length > 0
'''

RETURN = r'''
servers:
  description: Every vLLM API server on the host, sorted by pid (worker processes are part of their server).
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: The server's process id.
      type: int
      sample: 4242
    start_time:
      description: Its start time in clock ticks since boot (C(/proc/PID/stat)); with the pid it names the process.
      type: str
      sample: "1234567"
    user:
      description: The user it runs as.
      type: str
      sample: llmops-serve
    group:
      description: That user's primary group.
      type: str
      sample: llmops-serve
    command:
      description: Its command line, secrets replaced by C(********).
      type: str
      sample: /opt/venv/bin/python3 /opt/venv/bin/vllm serve /srv/models/m --port 8000 --api-key ********
    program:
      description: The absolute path of its first word (resolved against its working directory or E(PATH)).
      type: str
      sample: /opt/venv/bin/python3
    venv:
      description: The virtual environment the program belongs to, when it is one.
      type: str
      sample: /opt/venv
    cwd:
      description: Its working directory.
      type: str
      sample: /srv/handmade
    environment:
      description: The names of its environment variables (never the values).
      type: list
      elements: str
      sample: [HF_TOKEN, HOME, PATH]
    secrets:
      description: The names of what holds a secret - environment variables and C(VLLM_API_KEY)/C(HF_TOKEN) for the options.
      type: list
      elements: str
      sample: [HF_TOKEN, VLLM_API_KEY]
    unit:
      description: The systemd unit of its cgroup (a service, or the session scope of a shell); V(null) when none.
      type: str
      sample: session-3.scope
    started_from:
      description: Where it runs from, in words - its own unit, or the parent that started it and the unit around it.
      type: str
      sample: started by bash (pid 4200) in session-3.scope
    parent:
      description: Its parent process, C(pid) and C(name).
      type: dict
      sample: {pid: 4200, name: bash}
    listen:
      description: The addresses its process tree listens on (TCP).
      type: list
      elements: str
      sample: ["0.0.0.0:8000"]
    ports:
      description: The ports of RV(servers[].listen).
      type: list
      elements: int
      sample: [8000]
    gpus:
      description: The GPU indices its processes hold (compute processes, C(nvidia-smi)).
      type: list
      elements: int
      sample: [0, 1, 2, 3]
    model:
      description: The model it serves, as its command line names it (a path or a hub repo id).
      type: str
      sample: /srv/models/m
    served_model_name:
      description: The name it answers to (C(--served-model-name), else the model).
      type: str
      sample: hand-llama
    name:
      description: The unit name a takeover would give it (vllm-<name>.service); V(null) when none can be derived.
      type: str
      sample: hand-llama
    managed_by:
      description: The unit of this collection it belongs to; V(null) for a foreign server.
      type: str
      sample: null
foreign:
  description: The servers of RV(servers) this collection did not start.
  returned: always
  type: list
  elements: dict
  sample: []
conflicts:
  description: The foreign servers that hold O(port) or one of O(gpu_indices).
  returned: always
  type: list
  elements: dict
  sample: []
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.vllm.plugins.module_utils.gpu_free import GpuFreeError, read_usage
from ansible_collections.llmops.vllm.plugins.module_utils.host_state import StateError, read, state_path
from ansible_collections.llmops.vllm.plugins.module_utils.vllm_process import (
    conflicts,
    describe_foreign,
    managed_by,
    public_process,
    scan,
    started_from,
    unit_main_pid,
)


def gpu_pids(module, nvidia_smi):
    """pid -> GPU indices of every compute process ({} without nvidia-smi or GPUs)."""
    if not nvidia_smi:
        return {}
    try:
        memory, apps = read_usage(module.run_command, nvidia_smi)
    except GpuFreeError:
        return {}
    index_of = dict((gpu['uuid'], gpu['index']) for gpu in memory if gpu['uuid'])
    out = {}
    for app in apps:
        if app['gpu_uuid'] in index_of:
            out.setdefault(app['pid'], []).append(index_of[app['gpu_uuid']])
    return out


def managed_sets(state_dir):
    """(units, takeovers) of the host state: every recorded entry's unit, and its takeover with that unit."""
    state, _migrated, _text = read(state_path(state_dir))
    entries = list(state['models'].values()) + list(state['previous'].values())
    takeovers = [dict(entry['takeover'], unit=entry['unit']) for entry in entries if isinstance(entry.get('takeover'), dict)]
    return [entry['unit'] for entry in entries], takeovers


def find(module, state_dir, port, gpu_indices):
    """(servers, foreign, conflicts), public (redacted)."""
    try:
        units, takeovers = managed_sets(state_dir)
    except StateError as exc:
        module.fail_json(msg=str(exc))
    nvidia_smi = module.params.get('nvidia_smi_path') or module.get_bin_path('nvidia-smi')
    servers = []
    for server in scan(gpu_pids=gpu_pids(module, nvidia_smi)):
        origin = started_from(server, unit_main_pid(module.run_command, module.get_bin_path('systemctl'), server.get('unit')))
        servers.append(public_process(server, managed_by(server, units, takeovers), origin))
    foreign = [server for server in servers if not server['managed_by']]
    return servers, foreign, conflicts(servers, port, gpu_indices)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state_dir=dict(type='path', default='/var/lib/llmops-vllm'),
            port=dict(type='int'),
            gpu_indices=dict(type='list', elements='int', default=[]),
            nvidia_smi_path=dict(type='path'),
        ),
        supports_check_mode=True,
    )
    p = module.params
    servers, foreign, conflicting = find(module, p['state_dir'], p['port'], p['gpu_indices'])
    for server in foreign:
        if server not in conflicting:
            module.warn('a vLLM this collection did not start runs here: %s' % describe_foreign(server))
    module.exit_json(changed=False, servers=servers, foreign=foreign, conflicts=conflicting)


if __name__ == '__main__':
    main()
