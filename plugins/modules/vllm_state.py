#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
---
module: vllm_state
short_description: Read and update what a host serves (its C(state.json))
version_added: 0.2.0
description:
  - Reads, and with O(action=record) or O(action=retire) updates, the state file in which a host records
    the models it serves (C(/var/lib/llmops-vllm/state.json)). Schema 1 of the file, its migration and
    the operations are defined once in C(plugins/module_utils/host_state.py).
  - >-
    Schema 1 is C({"schema": 1, "models": {NAME: ENTRY}, "previous": {NAME: ENTRY}, "history": [ENTRY without plan],
    "lock": null}). C(models) holds one entry per model served, C(previous) the last entry retired or
    replaced under each name (what a rollback or revert starts again), C(history) the last 20 entries
    recorded, newest first, and C(lock) who holds the host for a change (null when nobody does).
  - The first format of the file (schema 0; one C(current) entry, numbers possibly written as strings)
    is read as schema 1 with RV(migrated=true); the first O(action=record) or O(action=retire) writes it
    as schema 1. A file of a newer schema is refused with a message saying to upgrade the collection.
  - O(action=read) never reports a change and writes nothing; a missing file is an empty state (a host's first
    rollout). An empty file, C({}) or C(null) is an error naming the file and what to do - never read as a host
    that serves nothing.
  - Root reads the file only when it can trust it - opened without following a link, a regular file with one
    link, owned by root and not writable by its group or others (a reader that is not root also trusts its own
    files; reading a root-owned file needs no C(become)). Otherwise it fails naming the owner and the mode, before
    anything is written. The directory is not judged (an older release gave it to the service user; the rollout
    migrates it to C(root:root 0755)).
  - O(action=record) and O(action=retire) report a change only when the file's text changes, and write
    it atomically (a file without a name - C(O_TMPFILE) - or a temporary file, fsync, rename) with mode C(0644),
    holding a lock on the state directory while they read and write it; temporary files that a killed writer
    left are removed by the next write. Run them as root (C(become)), which owns the file.
  - O(action=lock), O(action=renew) and O(action=unlock) manage the host's lock (C(lock) in the file), which
    serialises rollouts against one host - C(playbooks/rollout.yml) and C(llmops-vllm apply) take it after the
    fast path and release it at the end, renewing its lease before the download and the swap. A second run waits up to O(wait_s)
    for it, then fails naming who holds it and since when; a lock whose lease ran out is taken over with a
    warning (its holder died without releasing it).
  - The lease is measured on the host's boot clock - the lock keeps C(boot_id) (C(/proc/sys/kernel/random/boot_id))
    and C(boottime_s) (C(CLOCK_BOOTTIME)) of its last renewal - so a step of the wall clock changes nothing, and a
    reboot (another boot id) ends it. A lock written without them is judged by the wall clock. C(started) and
    C(renewed) stay, in wall time, for people.
  - Fencing - with O(holder), O(action=record) and O(action=retire) write only while O(holder) holds the lock, and
    O(action=renew) renews only then; otherwise they fail, writing nothing (another run took the host after this
    run's lease ran out). The rollout renews right before it stops or starts a unit or changes a load balancer.
author:
  - llmops.vllm maintainers (@llmops)
options:
  action:
    description:
      - V(read) returns the state.
      - V(record) records that the host serves O(entry) (C(models[name])); the entry it replaces under the
        same name, and the model named by O(replaces), move to C(previous); the entry is prepended to the
        history. Recording what is already served (every key but C(since) equal) changes nothing. With
        O(holder), refused (nothing written) unless O(holder) holds the host's lock.
      - V(retire) records that the host no longer serves O(name); its entry moves to C(previous).
        Retiring a model the host does not serve changes nothing. With O(holder), as V(record).
      - V(verify) answers whether the host provably serves O(name) as a rollout with O(fingerprint) would leave
        it (RV(up_to_date), else RV(why)), with cheap probes only - the recorded entry and its fingerprint, the
        only model served, the unit file's sha1, its venv and model directory, the state and model directories
        root's and no other user's to write (a host in an older release's layout is migrated by a full rollout),
        the unit active, and, for a branch or tag, one request to O(hub_endpoint) for the commit it names now. Nothing is re-hashed or re-planned;
        a rollout uses it to stop early. Read-only.
      - V(lock) takes the host's lock for O(holder) with a lease of O(lease_s) seconds, waiting up to O(wait_s)
        while another holder's lease runs; taking a lock O(holder) already holds renews it. An expired lock is
        taken over (RV(taken_over), and a warning).
      - V(renew) renews O(holder)'s lease from now for O(lease_s) seconds; fails when O(holder) no longer holds
        the lock (its lease ran out and another run took it) - the fence a run passes before each stop, start
        and load-balancer change.
      - V(unlock) releases O(holder)'s lock; a lock another holder holds, or none, is left as it is.
    type: str
    choices: [read, record, retire, verify, lock, renew, unlock]
    default: read
  state_dir:
    description: Directory of the state file C(state.json). Created (mode C(0755)) when a write needs it.
    type: path
    default: /var/lib/llmops-vllm
  path:
    description: The state file itself, instead of C(<state_dir>/state.json).
    type: path
  entry:
    description:
      - With O(action=record), what the host serves now. Keys C(name), C(repo_id), C(revision), C(commit) (the
        resolved commit sha), C(path) (the model directory), C(served_model_name), C(bind), C(port) and
        C(plan) are required; C(unit) defaults to C(vllm-<name>.service) (another value is refused) and
        C(since) to now (UTC, ISO 8601).
      - C(plan) has C(device), C(tensor_parallel_size), C(data_parallel_size), C(enable_expert_parallel),
        C(gpu_indices), C(numa_node) (null when the GPUs span nodes), C(max_model_len), C(argv) and
        optionally C(layout) (the planner's label, e.g. C(TP=4+EP)).
      - Numbers written as strings (C("8000")) are read as numbers. Unknown keys are refused.
    type: dict
  replaces:
    description:
      - With O(action=record), the name of the model the new one replaces on this host (its GPUs or port).
        Its entry moves from C(models) to C(previous). A name the host no longer serves changes nothing.
    type: str
  name:
    description: With O(action=retire), the model the host no longer serves; with O(action=verify), the model to check.
    type: str
  fingerprint:
    description: With O(action=verify), the fingerprint the rollout computed (the filter C(llmops.vllm.fingerprint)).
    type: str
  alone:
    description:
      - With O(action=verify), whether O(name) must be the only model the host serves (one model per host,
        C(vllm_model)). V(false) - other models beside it do not matter (C(vllm_models) - each model is checked
        on its own, and the rollout retires the models its list drops).
    type: bool
    default: true
  unit_dir:
    description: With O(action=verify), where the unit files are.
    type: path
    default: /etc/systemd/system
  hub_endpoint:
    description: With O(action=verify), the hub that resolves a branch or tag (default C(HF_ENDPOINT), else the public hub).
    type: str
  hub_token:
    description: With O(action=verify), the hub token for a private repository (sent in a header, never logged).
    type: str
  holder:
    description:
      - With O(action=lock), O(action=renew) and O(action=unlock), who holds the lock - one id per run and host
        (C(llmops-vllm apply) passes C(<user>@<controller>/<run id>)).
      - With O(action=record) and O(action=retire), the run's lock id - the write is refused, nothing written,
        unless it holds the lock (fencing). Left out, no check (a write by hand).
    type: str
  controller:
    description: With O(action=lock), the controller the run comes from (shown to a run that finds the host locked).
    type: str
  lease_s:
    description:
      - With O(action=lock) and O(action=renew), how long the lock holds without a renewal, in seconds. A phase
        that may last longer (a large download) renews with its own timeout.
    type: int
    default: 1800
  wait_s:
    description: With O(action=lock), how long to wait for another holder's lock, in seconds (V(0) - fail at once).
    type: int
    default: 0
attributes:
  check_mode:
    description:
      - Computes the new state, the change and the diff, and writes nothing. O(action=lock) in check mode says
        whether the lock could be taken (it fails while another holder's lease runs) and waits for nothing.
    support: full
  diff_mode:
    description: The file's text before and after (O(action=record) and O(action=retire)).
    support: full
seealso:
  - module: llmops.vllm.desired_state
'''

EXAMPLES = r'''
- name: What the host serves
  llmops.vllm.vllm_state:
    state_dir: /var/lib/llmops-vllm
  register: host_state

- name: The old model, for a one-model rollout
  ansible.builtin.set_fact:
    rollout_current: "{{ host_state.current | default({}, true) }}"

- name: Record the model now served, in place of the old one
  llmops.vllm.vllm_state:
    action: record
    entry:
      name: kimi-k2-5
      repo_id: nvidia/Kimi-K2.5-NVFP4
      revision: main
      commit: 5bd8b0e1c2f0a8d5e6f7a8b9c0d1e2f3a4b5c6d7
      path: /var/lib/llmops-vllm/models/nvidia/Kimi-K2.5-NVFP4/5bd8b0e1c2f0a8d5e6f7a8b9c0d1e2f3a4b5c6d7
      served_model_name: kimi-k2.5
      bind: 0.0.0.0
      port: 8000
      plan:
        device: cuda
        tensor_parallel_size: 8
        data_parallel_size: 1
        enable_expert_parallel: true
        gpu_indices: [0, 1, 2, 3, 4, 5, 6, 7]
        numa_node: null
        max_model_len: 262144
        argv: [serve, /var/lib/llmops-vllm/models/nvidia/Kimi-K2.5-NVFP4/5bd8b0e1c2f0a8d5e6f7a8b9c0d1e2f3a4b5c6d7]
    replaces: minimax-m2-5
  become: true

- name: Record that the host no longer serves a model
  llmops.vllm.vllm_state:
    action: retire
    name: minimax-m2-5
  become: true

- name: Hold the host for this run (wait up to 10 minutes for another run)
  llmops.vllm.vllm_state:
    action: lock
    holder: "ci@controller-1/run-4711"
    controller: controller-1
    lease_s: 1800
    wait_s: 600
  become: true

- name: Record only while this run still holds the host (fencing)
  llmops.vllm.vllm_state:
    action: retire
    name: minimax-m2-5
    holder: "ci@controller-1/run-4711"
  become: true

- name: Release it
  llmops.vllm.vllm_state:
    action: unlock
    holder: "ci@controller-1/run-4711"
  become: true
'''

RETURN = r'''
state:
  description: The whole state, schema 1 (migrated when the file was schema 0); after the change for O(action=record) and O(action=retire).
  returned: success
  type: dict
  contains:
    schema:
      description: Always 1.
      type: int
      sample: 1
    models:
      description: Model name -> entry, one per model the host serves.
      type: dict
    previous:
      description: Model name -> the last entry retired or replaced under that name.
      type: dict
    history:
      description: The last 20 entries recorded, newest first, without C(plan).
      type: list
      elements: dict
    lock:
      description: Who holds the host for a rollout, or null.
      type: dict
  sample: {"schema": 1, "models": {}, "previous": {}, "history": [], "lock": null}
models:
  description: The entries served, ordered by name.
  returned: success
  type: list
  elements: dict
  contains:
    name:
      description: The model's name; the unit is C(vllm-<name>.service).
      type: str
      sample: minimax-m2-5
    unit:
      description: The systemd unit serving it.
      type: str
      sample: vllm-minimax-m2-5.service
    repo_id:
      description: The model on the hub.
      type: str
      sample: MiniMaxAI/MiniMax-M2.5
    revision:
      description: The revision asked for.
      type: str
      sample: main
    commit:
      description: The commit it resolved to.
      type: str
      sample: 5bd8b0e1c2f0a8d5e6f7a8b9c0d1e2f3a4b5c6d7
    path:
      description: The model directory on the host.
      type: str
      sample: /var/lib/llmops-vllm/models/MiniMaxAI/MiniMax-M2.5/5bd8b0e1c2f0a8d5e6f7a8b9c0d1e2f3a4b5c6d7
    served_model_name:
      description: The name the server answers to.
      type: str
      sample: minimax-m2.5
    bind:
      description: The address the server binds.
      type: str
      sample: 0.0.0.0
    port:
      description: Its port.
      type: int
      sample: 8000
    since:
      description: When it was recorded (ISO 8601).
      type: str
      sample: "2026-03-01T10:00:00+00:00"
    plan:
      description: The serving plan it runs with.
      type: dict
      sample: {"device": "cuda", "tensor_parallel_size": 4, "data_parallel_size": 1, "enable_expert_parallel": true,
               "gpu_indices": [0, 1, 2, 3], "numa_node": 0, "max_model_len": 196608, "argv": ["serve", "..."]}
    venv:
      description: The vLLM venv its unit runs (entries recorded before versioned venvs have none).
      type: str
      sample: /opt/llmops-vllm/venvs/vllm-0.33.0
    fingerprint:
      description: The rollout's fingerprint of everything that decided this entry (a rerun with the same one may stop early).
      type: str
      sample: 9f2c...
    unit_sha1:
      description: The sha1 of the unit file the rollout wrote (a changed unit file is noticed without re-planning).
      type: str
      sample: 3b1d...
    takeover:
      description:
        - Set when the entry came from a vLLM this collection did not start (M(llmops.vllm.vllm_takeover)) -
          its pid, start time, user and redacted command, so a retire also stops that process while it
          still runs outside the unit.
      type: dict
      sample: {pid: 4242, start_time: 1234567, user: llmops-serve, command: "vllm serve /srv/m --api-key ********"}
    stable_port:
      description:
        - Set when the model serves behind the host proxy (vllm_model.swap auto or bluegreen) - the port the proxy
          holds for clients; vLLM itself listens on the entry's C(port), one of its C(slot_ports).
      type: int
      sample: 8000
    slot_ports:
      description: With C(stable_port), the two ports vLLM alternates between from one rollout to the next.
      type: list
      elements: int
      sample: [18000, 28000]
lock:
  description: With O(action=lock), O(action=renew) and O(action=unlock), the host's lock after the action (null when free).
  returned: O(action=lock), O(action=renew) or O(action=unlock)
  type: dict
  sample: {holder: "ci@controller-1/run-4711", controller: controller-1, started: "2026-12-02T04:00:00+00:00", lease_s: 1800,
           boot_id: 0f3c2b1a-9d8e-4f70-a6b5-c4d3e2f1a0b9, boottime_s: 86412.337}
taken_over:
  description: With O(action=lock), the expired lock this run took over (null when there was none).
  returned: O(action=lock)
  type: dict
  sample: {holder: "ci@controller-2/run-17", controller: controller-2, started: "2026-12-01T22:00:00+00:00", lease_s: 1800}
waited_s:
  description: With O(action=lock), how long it waited for another holder, in seconds.
  returned: O(action=lock)
  type: float
  sample: 0.0
held_by:
  description:
    - With O(action=lock), when it failed, the lock another run holds.
    - With O(holder) and O(action=record), O(action=retire) or O(action=renew), when it failed because O(holder) does
      not hold the lock, the lock now (null when nobody holds it).
  returned: failure
  type: dict
  sample: {holder: "ci@controller-2/run-17", controller: controller-2, started: "2026-12-02T03:58:00+00:00", lease_s: 1800}
up_to_date:
  description: With O(action=verify), whether the host provably serves O(name) as the rollout would leave it.
  returned: O(action=verify)
  type: bool
  sample: true
why:
  description: With O(action=verify), why it is not up to date (empty when it is).
  returned: O(action=verify)
  type: str
  sample: the desired state, the variables or the collection changed since it was recorded
current:
  description: The one entry served, or null when the host serves none or several (see RV(models)).
  returned: success
  type: dict
  sample: {"name": "minimax-m2-5", "unit": "vllm-minimax-m2-5.service", "port": 8000}
migrated:
  description: Whether the file read was schema 0 (read as schema 1; written as schema 1 by a change).
  returned: success
  type: bool
  sample: false
state_file:
  description:
    - The state file read (and written). Not called C(path), which would make Ansible add the file's
      attributes to the result and overwrite RV(state) with C(file).
  returned: always
  type: str
  sample: /var/lib/llmops-vllm/state.json
diff:
  description: The file's text before and after.
  returned: O(action=record) or O(action=retire), in diff mode
  type: dict
  contains:
    before:
      description: The text before (empty when there was no file).
      type: str
    after:
      description: The text after.
      type: str
    before_header:
      description: The state file's path.
      type: str
    after_header:
      description: The state file's path.
      type: str
problems:
  description: Everything wrong with the file or the input, each naming its key.
  returned: failure
  type: list
  elements: str
  sample: ["models['a'].port: expected an integer 1-65535, got '80x0' (str)"]
'''

import errno
import fcntl
import os
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.vllm.plugins.module_utils import host_state, hub
from ansible_collections.llmops.vllm.plugins.module_utils.redact import protect_endpoints


def unit_active(unit):
    try:
        return subprocess.run(['systemctl', 'is-active', '--quiet', unit], check=False, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


class StateFile(object):
    """One read -> decide -> write pass over the state file."""

    def __init__(self, module, path):
        self.module, self.path = module, path
        self.directory = os.path.dirname(os.path.abspath(path))

    def lock(self):
        """Hold the state directory while it is read and rewritten (two runs against one host)."""
        if not os.path.isdir(self.directory):
            if self.module.check_mode:
                return None
            os.makedirs(self.directory, 0o755)
        dir_fd = os.open(self.directory, os.O_RDONLY)
        fcntl.flock(dir_fd, fcntl.LOCK_EX)
        return dir_fd

    def run(self, action, params):
        if action == 'lock':
            return self.take_lock(params)
        result = dict(state_file=self.path, changed=False)
        dir_fd = self.lock() if action not in ('read', 'verify') else None
        try:
            before, migrated, before_text = host_state.read(self.path)
            after = before
            if action == 'record':
                after = host_state.record(before, params['entry'], replaces=params['replaces'], holder=params['holder'])
            elif action == 'retire':
                after = host_state.retire(before, params['name'], holder=params['holder'])
            elif action == 'renew':
                after = host_state.renew_lock(before, params['holder'], params['lease_s'])
            elif action == 'unlock':
                after = host_state.release_lock(before, params['holder'])
            if action not in ('read', 'verify'):
                after_text = host_state.serialize(after)
                result['changed'] = after_text != before_text
                if result['changed'] and not self.module.check_mode:
                    host_state.write_atomic(self.path, after_text)
                if self.module._diff:
                    result['diff'] = dict(before=before_text, after=after_text,
                                          before_header=self.path, after_header=self.path)
        finally:
            if dir_fd is not None:
                os.close(dir_fd)
        if action in ('renew', 'unlock'):
            result['lock'] = after['lock']
        served = host_state.models(after)
        # Several models: no single `current` (host_state.current() would refuse); `models` has them all.
        result.update(state=after, models=served, current=served[0] if len(served) == 1 else None, migrated=migrated)
        if action == 'verify':
            why = host_state.up_to_date_problem(
                after, params['name'], params['fingerprint'], params['unit_dir'], unit_active=unit_active,
                alone=params['alone'], state_dir=os.path.dirname(os.path.abspath(self.path)),
                commit_now=lambda entry: hub.resolve_commit_http(params['hub_endpoint'] or None, entry['repo_id'],
                                                                 entry['revision'], params['hub_token'] or None))
            result.update(up_to_date=why is None, why=why or '')
        return result

    def take_lock(self, params):
        """Take the lock, polling (the state directory unlocked between polls) while another holds it."""
        started = time.monotonic()
        while True:
            try:
                result = self.run_locked_acquire(params)
            except host_state.LockHeld:
                if time.monotonic() - started >= params['wait_s']:
                    raise
                time.sleep(min(2.0, max(0.1, params['wait_s'] - (time.monotonic() - started))))
                continue
            result['waited_s'] = round(time.monotonic() - started, 1)
            return result

    def run_locked_acquire(self, params):
        result = dict(state_file=self.path, changed=False)
        dir_fd = self.lock()
        try:
            before, migrated, before_text = host_state.read(self.path)
            after, taken_over = host_state.acquire_lock(before, params['holder'], params['controller'], params['lease_s'])
            after_text = host_state.serialize(after)
            result['changed'] = after_text != before_text
            if result['changed'] and not self.module.check_mode:
                host_state.write_atomic(self.path, after_text)
        finally:
            if dir_fd is not None:
                os.close(dir_fd)
        if taken_over:
            self.module.warn('took over the lock of %s: its lease had run out (%s)' % (
                taken_over['holder'], host_state.describe_lock(taken_over)))
        served = host_state.models(after)
        result.update(state=after, models=served, current=served[0] if len(served) == 1 else None, migrated=migrated,
                      lock=after['lock'], taken_over=taken_over)
        return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            action=dict(type='str', choices=['read', 'record', 'retire', 'verify', 'lock', 'renew', 'unlock'], default='read'),
            state_dir=dict(type='path', default=host_state.DEFAULT_STATE_DIR),
            path=dict(type='path'),
            entry=dict(type='dict'),
            replaces=dict(type='str'),
            name=dict(type='str'),
            fingerprint=dict(type='str'),
            alone=dict(type='bool', default=True),
            unit_dir=dict(type='path', default=host_state.DEFAULT_UNIT_DIR),
            hub_endpoint=dict(type='str'),
            hub_token=dict(type='str', no_log=True),
            holder=dict(type='str'),
            controller=dict(type='str'),
            lease_s=dict(type='int', default=1800),
            wait_s=dict(type='int', default=0),
        ),
        required_if=[('action', 'record', ['entry']), ('action', 'retire', ['name']),
                     ('action', 'verify', ['name', 'fingerprint']), ('action', 'lock', ['holder', 'controller']),
                     ('action', 'renew', ['holder']), ('action', 'unlock', ['holder'])],
        supports_check_mode=True,
    )
    protect_endpoints(module, 'hub_endpoint')  # its user:password@ never shows in results or at -vvv (module_utils/redact.py)
    p = module.params
    path = p['path'] or host_state.state_path(p['state_dir'])
    misplaced = ['%s only goes with action=%s' % (option, action)
                 for option, action in (('entry', 'record'), ('replaces', 'record'), ('fingerprint', 'verify'),
                                        ('hub_endpoint', 'verify'), ('hub_token', 'verify'))
                 if p[option] is not None and p['action'] != action]
    if p['holder'] is not None and p['action'] not in ('lock', 'renew', 'unlock', 'record', 'retire'):
        misplaced.append('holder only goes with action=lock, renew, unlock, record or retire')
    misplaced += ['controller only goes with action=lock'] if p['controller'] is not None and p['action'] != 'lock' else []
    if p['wait_s'] < 0 or p['lease_s'] < 1:
        misplaced.append('wait_s must be >= 0 and lease_s >= 1 (got wait_s=%d, lease_s=%d)' % (p['wait_s'], p['lease_s']))
    if misplaced:
        module.fail_json(msg='%s (action is %s)' % ('; '.join(misplaced), p['action']), state_file=path)
    try:
        result = StateFile(module, path).run(p['action'], p)
    except host_state.LockHeld as exc:
        module.fail_json(msg='%s is locked: %s; waited %d s (wait_s). Wait for that run, or let its lease run out.'
                         % (path, '; '.join(exc.problems), p['wait_s']), held_by=exc.lock, problems=exc.problems, state_file=path)
    except host_state.LockLost as exc:
        module.fail_json(msg='%s: %s' % (path, '; '.join(exc.problems)), held_by=exc.lock, problems=exc.problems, state_file=path)
    except host_state.StateError as exc:
        module.fail_json(msg='%s: %s' % (path, '; '.join(exc.problems)), problems=exc.problems, state_file=path)
    except OSError as exc:
        module.fail_json(msg='%s: %s (%s)' % (path, exc.strerror or exc, errno.errorcode.get(exc.errno, 'error')), state_file=path)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
