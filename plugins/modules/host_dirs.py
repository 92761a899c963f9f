#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
---
module: host_dirs
short_description: The host's control-plane directories - root's state and models, each model's own cache
version_added: 0.9.0
description:
  - Makes the layout the collection's roles rely on, and migrates a host from the older one (where the service
    user owned the state directory and the models, and vLLM's HOME was the state directory).
  - O(state_dir) and O(models_root) become C(root:root 0755), and so does everything in them - what another
    user or group owned becomes C(root:root) C(0644) (directories C(0755)), or C(0600) (C(0700)) when only its
    owner could read it; root's own entries lose only group/other write and set-id bits (a C(0600) progress
    file stays C(0600)).
  - O(cache_dir) itself becomes C(root:root 0755) (nothing below it is walked), and each of O(cache_names) gets
    its own C(<cache_dir>/<name>), owned by O(user) and O(group), mode C(0750) - vLLM's HOME, working directory
    and only writable path. What is already in such a directory is the service user's and is not touched.
  - Everything is done by file descriptor, top-down, never following a link. Each directory is opened relative
    to its parent with C(O_NOFOLLOW) and fixed before anything in it is looked at, so the service user can no
    longer swap an entry under the walk. The parents of the three directories must be root's already; a
    symlink on the way counts only when root made it.
  - Left as they are and listed in RV(skipped) (with a warning) - symlinks (never followed; nothing here makes
    links), files with more than one hard link (chmod'ing one would change every name of it, such as a planted
    link to C(/etc/shadow)) and anything that is neither a file nor a directory.
  - Refused before anything changes, naming the path, what it is and what to do - a parent that another user
    can write, a top directory that is not a directory, or a C(<cache_dir>/<name>) that is a symlink or a file.
  - Idempotent - a second run reports C(changed=false).
  - Units of models still in the older layout keep working. Their HOME (the state directory) becomes read-only
    for them; their C(XDG_CACHE_HOME) and C(HF_HOME) were already C(<cache_dir>/<name>), which stays theirs
    (give their names in O(cache_names), or let O(cache_from_units) find them).
author:
  - llmops.vllm maintainers (@llmops)
options:
  state_dir:
    description:
      - The collection's state directory (C(state.json), the metadata cache, the default models root).
    type: path
    default: /var/lib/llmops-vllm
  models_root:
    description:
      - Where the model versions live. Walked once when it lies inside O(state_dir).
    type: path
    default: /var/lib/llmops-vllm/models
  cache_dir:
    description:
      - The cache directory. Its top becomes root's; below it, one directory per model (O(cache_names)).
    type: path
    default: /var/cache/llmops-vllm
  cache_names:
    description:
      - Models that get their own C(<cache_dir>/<name>) (one plain directory name each).
    type: list
    elements: str
    default: []
  cache_from_units:
    description:
      - Glob patterns of systemd unit files; a unit whose C(XDG_CACHE_HOME) is C(<cache_dir>/<name>) adds
        C(<name>) to O(cache_names), so that a model still running in the older layout keeps a cache directory
        it can write once O(cache_dir) is root's.
    type: list
    elements: str
    default: ['/etc/systemd/system/vllm-*.service']
  user:
    description:
      - The service user that owns each C(<cache_dir>/<name>). When it does not exist yet (a fresh host, before
        C(llmops.vllm.vllm_install) made it), those directories are listed in RV(skipped) and left to a later run.
    type: str
    default: vllm
  group:
    description:
      - Their group. Default the user's primary group.
    type: str
attributes:
  check_mode:
    description: Walks the same way and reports every change it would make in RV(changes), changing nothing.
    support: full
  diff_mode:
    description: One line per path whose owner or mode changes (before - after), at most 200.
    support: full
notes:
  - Runs as root. The rollout runs it right after taking the host's lock (C(roles/rollout/tasks/control_plane.yml)),
    before anything else writes on the host; the serve role runs it for the model it serves.
  - Python standard library only, on the target.
seealso:
  - module: llmops.vllm.hf_model
'''

EXAMPLES = r'''
- name: The control-plane directories are root's; tiny-llama gets its own cache (vLLM's HOME)
  llmops.vllm.host_dirs:
    cache_names: [tiny-llama]
    user: vllm

- name: What the migration of an older host would change
  llmops.vllm.host_dirs:
  check_mode: true
  diff: true
  register: layout
'''

RETURN = r'''
changes:
  description: Owner and mode changes made (in check mode - that would be made), in walk order, at most 200
    (RV(counts) has them all). C(before) is C(absent) for a directory created.
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: The path.
      type: str
      sample: /var/lib/llmops-vllm/models/llmops-test/tiny-llama-chat/de2607b66f5aae641d7b7daff4b5fcf110dcc5df
    before:
      description: C(user:group mode) before, or C(absent).
      type: str
      sample: vllm:vllm 0755
    after:
      description: C(user:group mode) after.
      type: str
      sample: root:root 0755
  sample: [{path: /var/lib/llmops-vllm, before: vllm:vllm 0750, after: root:root 0755}]
skipped:
  description: Paths left as they are, with the reason (symlinks, hard-linked files, special files; cache
    directories of a user that does not exist yet), at most 200.
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: The path.
      type: str
      sample: /var/lib/llmops-vllm/models/evil
    reason:
      description: Why it was left alone.
      type: str
      sample: "a symlink (to /etc): not followed and left as it is; nothing here makes links, remove it unless you did"
  sample: []
counts:
  description: How many paths were changed (or would be) and skipped in all.
  returned: always
  type: dict
  contains:
    changed:
      description: Paths changed.
      type: int
      sample: 12
    skipped:
      description: Paths skipped.
      type: int
      sample: 0
  sample: {changed: 12, skipped: 0}
cache_dirs:
  description: The per-model cache directories (O(cache_names) and those found in units), each the service user's.
  returned: always
  type: list
  elements: str
  sample: [/var/cache/llmops-vllm/tiny-llama]
actions:
  description: What the run did (or would do), in words.
  returned: always
  type: list
  elements: str
  sample: ["owner or mode of 12 paths", "left 1 path as it is"]
'''

import glob
import os
import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.vllm.plugins.module_utils import host_dirs, paths

XDG_CACHE_RE = re.compile(r'^Environment="?XDG_CACHE_HOME=([^"\s]+)"?\s*$', re.M)


def names_from_units(globs, cache_dir):
    """Model names whose unit's XDG_CACHE_HOME is <cache_dir>/<name> (a unit root wrote: read only)."""
    names = set()
    prefix = os.path.normpath(cache_dir) + '/'
    for pattern in globs:
        for unit in sorted(glob.glob(pattern)):
            try:
                with open(unit, errors='replace') as handle:
                    text = handle.read()
            except OSError:
                continue
            for value in XDG_CACHE_RE.findall(text):
                value = os.path.normpath(value)
                if value.startswith(prefix) and host_dirs.cache_name_problem(value[len(prefix):]) is None:
                    names.add(value[len(prefix):])
    return sorted(names)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state_dir=dict(type='path', default='/var/lib/llmops-vllm'),
            models_root=dict(type='path', default='/var/lib/llmops-vllm/models'),
            cache_dir=dict(type='path', default='/var/cache/llmops-vllm'),
            cache_names=dict(type='list', elements='str', default=[]),
            cache_from_units=dict(type='list', elements='str', default=['/etc/systemd/system/vllm-*.service']),
            user=dict(type='str', default='vllm'),
            group=dict(type='str'),
        ),
        supports_check_mode=True,
    )
    p = module.params
    names = sorted(set(p['cache_names']) | set(names_from_units(p['cache_from_units'], p['cache_dir'])))
    args = (p['state_dir'], p['models_root'], p['cache_dir'], names, p['user'], p['group'])
    try:
        # The refusals come from a walk that changes nothing: a run that would stop half-way never starts.
        layout = host_dirs.fix_layout(*args, apply=False)
        if layout.counts['changed'] and not module.check_mode:
            layout = host_dirs.fix_layout(*args, apply=True)
    except paths.PathError as exc:
        module.fail_json(msg=str(exc), changed=False)
    except OSError as exc:
        # exc.filename is one component (the walk goes by descriptor): name the directories it was making too
        module.fail_json(msg='%s: %s (making state_dir %s, models_root %s, cache_dir %s); the directories are left as '
                             'they were found up to there, run again when fixed'
                             % (exc.filename or p['state_dir'], exc.strerror or exc, p['state_dir'], p['models_root'],
                                p['cache_dir']), changed=False)
    actions = []
    if layout.counts['changed']:
        actions.append('owner or mode of %d path%s' % (layout.counts['changed'], '' if layout.counts['changed'] == 1 else 's'))
    if layout.counts['skipped']:
        actions.append('left %d path%s as %s' % (layout.counts['skipped'], '' if layout.counts['skipped'] == 1 else 's',
                                                 'it is' if layout.counts['skipped'] == 1 else 'they are'))
    for entry in layout.skipped:
        if not entry['reason'].startswith('user '):  # a fresh host: normal, the serve role asks again
            module.warn('%s: %s' % (entry['path'], entry['reason']))
    result = dict(changed=bool(layout.counts['changed']), changes=layout.changes, skipped=layout.skipped,
                  counts=layout.counts, cache_dirs=layout.cache_dirs, actions=actions)
    if module._diff and layout.changes:
        result['diff'] = dict(before=''.join('%s %s\n' % (c['path'], c['before']) for c in layout.changes),
                              after=''.join('%s %s\n' % (c['path'], c['after']) for c in layout.changes))
    module.exit_json(**result)


if __name__ == '__main__':
    main()
