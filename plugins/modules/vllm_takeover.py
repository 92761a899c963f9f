#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
---
module: vllm_takeover
short_description: Take a vLLM this collection did not start over into a vllm-<name>.service unit
version_added: "0.2.0"
description:
  - The first rollout on a host set up by hand meets a vLLM started from a shell, or from a unit of
    another name. This module makes it the collection's own, so that the usual retire, rollout, gate and
    rollback apply to it.
  - O(state=present) writes C(vllm-<name>.service) that starts the running server again as it ran - its
    command line (first word made absolute), user and group, working directory and environment (minus
    what a login shell adds) - and moves every secret to a C(0600) EnvironmentFile in O(env_dir) - the
    values of C(--api-key) (as C(VLLM_API_KEY)) and C(--hf-token) (as C(HF_TOKEN)), and environment
    variables named like C(*_TOKEN), C(*_KEY), C(*SECRET*), C(*PASSWORD*). The unit is written, not
    started; the process keeps serving. RV(entry) is the host state entry that records it
    (M(llmops.vllm.vllm_state) O(llmops.vllm.vllm_state#module:action=record)).
  - A process whose command line, working directory or environment (names and values) holds a control
    character or bytes that are not UTF-8 is refused, naming its pid and the field, before anything is
    written - a line break there would start a directive in a unit that root runs. So are a user or group
    that C(User=)/C(Group=) cannot carry, and an environment variable name C(Environment=) cannot carry.
  - O(state=stopped) ends the process the takeover named, when it still runs with that start time - the
    retire step. Right before the signal (or the C(systemctl stop)) the process is read again from
    C(/proc) and must be a vLLM API server by the rule M(llmops.vllm.vllm_process_info) finds them with,
    and run the O(command) and O(exe) the takeover recorded when they are given; otherwise the module
    fails and stops nothing. A process that is the main process of a unit of another name is stopped and
    disabled through that unit, so systemd does not start it again; any other gets C(SIGTERM), and
    C(SIGKILL) for what of its process tree is left after O(stop_timeout) seconds.
  - The unit runs under the serve role's hardening (O(hardening)), fitted to the server - its working
    directory, HOME and the cache directories its environment names writable, C(/tmp) and home
    directories kept where it uses paths there, the NVIDIA device nodes where it uses them.
options:
  pid:
    description: The server's process id (M(llmops.vllm.vllm_process_info) RV(llmops.vllm.vllm_process_info#module:servers[].pid)).
    type: int
    required: true
  start_time:
    description:
      - Its start time (RV(llmops.vllm.vllm_process_info#module:servers[].start_time)); a process with this
        pid and another start time is another process, and is left alone.
      - Required with O(state=stopped).
    type: str
  name:
    description:
      - The unit is C(vllm-<name>.service). By default the server's own
        RV(llmops.vllm.vllm_process_info#module:servers[].name) (from C(--served-model-name) or the model).
    type: str
  state:
    description: V(present) writes the unit and EnvironmentFile; V(stopped) ends the process.
    type: str
    choices: [present, stopped]
    default: present
  unit_dir:
    description: Where unit files go.
    type: path
    default: /etc/systemd/system
  env_dir:
    description: Where the EnvironmentFile with the secrets goes (created C(0700)); the file is C(<name>.env), C(0600).
    type: path
    default: /etc/llmops-vllm/takeover
  hardening:
    description:
      - Run the unit under the serve role's hardening (C(roles/serve/templates/vllm.service.j2)) -
        C(ProtectSystem=strict) with C(ReadWritePaths=) for the server's working directory, HOME and cache
        directories, C(PrivateTmp), C(ProtectHome), no capabilities, a system call filter, the device nodes
        limited to NVIDIA's or none. C(systemd-analyze security) rates it 2.5 or less.
      - V(false) runs it exactly as it ran, for a server that needs more (it writes elsewhere, uses AMD GPUs).
    type: bool
    default: true
  max_model_len:
    description:
      - The context length to record when neither the command line (C(--max-model-len)) nor the server's
        C(/v1/models) says it.
    type: int
  stop_timeout:
    description: With O(state=stopped), seconds between C(SIGTERM) and C(SIGKILL).
    type: int
    default: 120
  command:
    description:
      - With O(state=stopped), the process's command line as the takeover recorded it (redacted; RV(entry)'s
        C(takeover.command)). The process is stopped only when it still runs exactly this.
    type: str
  exe:
    description:
      - With O(state=stopped), the process's executable as the takeover recorded it (RV(entry)'s C(takeover.exe)).
        The process is stopped only when it still runs this program.
    type: str
notes:
  - Run it as root; the environment and working directory of another user's process are not readable otherwise.
  - Secrets never appear in the result, the diff or the unit file.
attributes:
  check_mode:
    support: full
    description: Reports what would be written (and the diff of the unit) or which process would be stopped.
  diff_mode:
    support: full
    description: The unit file before and after; the EnvironmentFile is named, never shown.
author:
  - llmops.vllm maintainers (@llmops)
seealso:
  - module: llmops.vllm.vllm_process_info
  - module: llmops.vllm.vllm_state
'''

EXAMPLES = r'''
---
- name: Find the hand-started vLLM on the port
  llmops.vllm.vllm_process_info:
    port: 8000
  register: found

- name: Take it over as vllm-kimi-k2-5.service
  llmops.vllm.vllm_takeover:
    pid: "{{ found.conflicts[0].pid }}"
    start_time: "{{ found.conflicts[0].start_time }}"
    name: kimi-k2-5
  register: taken

- name: Record it
  llmops.vllm.vllm_state:
    action: record
    entry: "{{ taken.entry }}"

- name: Retire it (the process still runs outside its unit)
  llmops.vllm.vllm_takeover:
    pid: "{{ taken.entry.takeover.pid }}"
    start_time: "{{ taken.entry.takeover.start_time }}"
    state: stopped
'''

RETURN = r'''
unit:
  description: The unit's name.
  returned: O(state=present)
  type: str
  sample: vllm-hand-llama.service
unit_path:
  description: The unit file.
  returned: O(state=present)
  type: str
  sample: /etc/systemd/system/vllm-hand-llama.service
env_file:
  description: The EnvironmentFile with the secrets; V(null) when the server had none.
  returned: O(state=present)
  type: str
  sample: /etc/llmops-vllm/takeover/hand-llama.env
secrets:
  description: The names of the variables in RV(env_file).
  returned: O(state=present)
  type: list
  elements: str
  sample: [HF_TOKEN, VLLM_API_KEY]
process:
  description: The server, as M(llmops.vllm.vllm_process_info) returns it (redacted).
  returned: O(state=present)
  type: dict
  sample: {pid: 4242, user: llmops-serve, command: "vllm serve /srv/m --api-key ********"}
entry:
  description: The host state entry that records the taken-over server, with its C(takeover) facts.
  returned: O(state=present)
  type: dict
  sample: {name: hand-llama, unit: vllm-hand-llama.service, repo_id: /srv/m, port: 8000}
stopped:
  description: With O(state=stopped), whether a process was stopped (V(false) - it had already gone).
  returned: O(state=stopped)
  type: bool
  sample: true
signal:
  description: How it ended - V(TERM), V(KILL) (after O(stop_timeout)), V(unit) (through its own unit), or V(null).
  returned: O(state=stopped)
  type: str
  sample: TERM
seconds:
  description: Seconds the stop took.
  returned: O(state=stopped)
  type: float
  sample: 4.5
'''

import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.vllm.plugins.module_utils.host_state import write_atomic
from ansible_collections.llmops.vllm.plugins.module_utils.readiness import NotReady, http_json
from ansible_collections.llmops.vllm.plugins.module_utils.vllm_process import (
    ProcessError,
    option,
    public_process,
    refuse_unfit,
    scan,
    split_secrets,
    started_from,
    stop,
    takeover,
    unit_main_pid,
    verified_server,
)


def _read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return None


def served_max_model_len(server, api_key):
    """max_model_len from the server's own /v1/models (None when it does not answer)."""
    for address in server.get('listen') or []:
        host, port = address.rsplit(':', 1)
        host = {'0.0.0.0': '127.0.0.1', '[::]': '[::1]'}.get(host, host)
        try:
            status, body = http_json('http://%s:%s/v1/models' % (host, port), api_key=api_key, timeout=10)
        except NotReady:
            continue
        if status == 200 and isinstance(body, dict):
            for card in body.get('data') or []:
                if isinstance(card, dict) and isinstance(card.get('max_model_len'), int):
                    return card['max_model_len']
    return None


def present(module):
    p = module.params
    servers = [server for server in scan() if server['pid'] == p['pid']]
    if not servers or (p['start_time'] and str(servers[0]['start_time']) != str(p['start_time'])):
        module.fail_json(msg='no vLLM server runs as pid %d%s now; it may have exited or been restarted - find it again '
                             'with vllm_process_info' % (p['pid'], ' (start time %s)' % p['start_time'] if p['start_time'] else ''))
    server = servers[0]
    name = p['name'] or server.get('name')
    if not name:
        module.fail_json(msg='pid %d (%s) has no --served-model-name or model name to name its unit by; set name '
                             '(vllm_takeover_name)' % (server['pid'], public_process(server)['command']))
    try:
        refuse_unfit(server)  # before anything, even the question to the server below
    except ProcessError as exc:
        module.fail_json(msg=str(exc))
    origin = started_from(server, unit_main_pid(module.run_command, module.get_bin_path('systemctl'), server.get('unit')))
    try:
        length = p['max_model_len']
        if not length:
            if not option(server.get('args') or [], '--max-model-len'):
                _argv, argv_secrets = split_secrets(server['argv'])
                api_key = argv_secrets.get('VLLM_API_KEY') or (server.get('environ') or {}).get('VLLM_API_KEY')
                length = served_max_model_len(server, api_key)
        result = takeover(server, name, p['unit_dir'], p['env_dir'], p['hardening'], length)
    except ProcessError as exc:
        module.fail_json(msg=str(exc))
    result['entry']['takeover']['started_from'] = origin
    result['entry']['takeover']['env_file'] = result['env_file']
    before = _read(result['unit_path'])
    env_before = _read(result['env_file']) if result['env_file'] else None
    changed = before != result['unit_text'] or (result['env_file'] is not None and (
        env_before != result['env_text'] or (os.stat(result['env_file']).st_mode & 0o777) != 0o600))
    if changed and not module.check_mode:
        if result['env_file']:
            if not os.path.isdir(p['env_dir']):
                os.makedirs(p['env_dir'], 0o700)
            write_atomic(result['env_file'], result['env_text'], mode=0o600)
        if not os.path.isdir(p['unit_dir']):
            module.fail_json(msg='unit_dir %s does not exist; is this a systemd host?' % p['unit_dir'])
        write_atomic(result['unit_path'], result['unit_text'], mode=0o644)
    process = public_process(server, None, origin)
    diff = {'before': before or '', 'after': result['unit_text'],
            'before_header': result['unit_path'] if before is not None else '/dev/null', 'after_header': result['unit_path']}
    verb = 'would take' if module.check_mode else 'took'
    module.exit_json(
        changed=changed, diff=diff, unit=result['unit'], unit_path=result['unit_path'], env_file=result['env_file'],
        secrets=result['secrets'], process=process, entry=result['entry'],
        msg='%s pid %d over as %s (%s; secrets %s)' % (
            verb if changed else 'already took', server['pid'], result['unit'], process['started_from'],
            ', '.join(result['secrets']) or 'none'))


def stopped(module):
    p = module.params
    if not p['start_time']:
        module.fail_json(msg='state=stopped needs start_time (the takeover entry has it), so that another process '
                             'that got pid %d is never stopped' % p['pid'])
    expected = dict(start_time=p['start_time'], command=p['command'], exe=p['exe'])
    try:
        process = verified_server(p['pid'], **expected)
    except ProcessError as exc:
        module.fail_json(msg=str(exc))
    if process is None:
        module.exit_json(changed=False, stopped=False, signal=None, seconds=0.0,
                         msg='pid %d (start time %s) no longer runs' % (p['pid'], p['start_time']))
    unit = process.unit
    own_unit = unit_main_pid(module.run_command, module.get_bin_path('systemctl'), unit) == p['pid']
    if module.check_mode:
        module.exit_json(changed=True, stopped=True, signal='unit' if own_unit else 'TERM', seconds=0.0,
                         msg='would stop pid %d%s' % (p['pid'], ' through %s' % unit if own_unit else ''))
    if own_unit:
        begin = time.monotonic()
        systemctl = module.get_bin_path('systemctl', required=True)
        rc, enabled, _err = module.run_command([systemctl, 'is-enabled', unit])
        # Read again right before the stop: it must still be the vLLM the takeover found.
        try:
            if verified_server(p['pid'], **expected) is None:
                module.exit_json(changed=False, stopped=False, signal=None, seconds=0.0,
                                 msg='pid %d (start time %s) no longer runs' % (p['pid'], p['start_time']))
        except ProcessError as exc:
            module.fail_json(msg=str(exc))
        # A transient unit (systemd-run) has no file to disable; an enabled one would come back at boot.
        for action in ('stop', 'disable') if enabled.strip() == 'enabled' else ('stop',):
            rc, _out, err = module.run_command([systemctl, action, unit])
            if rc != 0:
                module.fail_json(msg='systemctl %s %s failed: %s' % (action, unit, err.strip()))
        module.exit_json(changed=True, stopped=True, signal='unit', seconds=round(time.monotonic() - begin, 1),
                         msg='stopped and disabled %s (pid %d)' % (unit, p['pid']))
    try:
        result = stop(p['pid'], p['start_time'], p['stop_timeout'], command=p['command'], exe=p['exe'])
    except ProcessError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=result['stopped'], msg='stopped pid %d with SIG%s in %s s' % (p['pid'], result['signal'], result['seconds'])
                     if result['stopped'] else 'pid %d had already gone' % p['pid'], **result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            pid=dict(type='int', required=True),
            start_time=dict(type='str'),
            name=dict(type='str'),
            state=dict(type='str', choices=['present', 'stopped'], default='present'),
            unit_dir=dict(type='path', default='/etc/systemd/system'),
            env_dir=dict(type='path', default='/etc/llmops-vllm/takeover'),
            hardening=dict(type='bool', default=True),
            max_model_len=dict(type='int'),
            stop_timeout=dict(type='int', default=120),
            command=dict(type='str'),
            exe=dict(type='str'),
        ),
        supports_check_mode=True,
    )
    if module.params['state'] == 'stopped':
        stopped(module)
    present(module)


if __name__ == '__main__':
    main()
