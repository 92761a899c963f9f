#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
---
module: hf_model
short_description: Fetch a model version from a Hugging Face hub, pinned to a commit and verified
version_added: 0.2.0
description:
  - Downloads one version of a model repository from a Hugging Face hub (the public hub, a mirror,
    or an air-gapped hub such as olah) into a directory of its own, C(<models_root>/<org>/<name>/<commit>)
    by default, so versions coexist and a revert needs no download.
  - The revision (branch, tag or commit) is always resolved to the commit and reported as RV(commit).
  - Before downloading it lists the files and sizes at that commit, the bytes already present, the bytes
    still needed and the free space of the target filesystem, and refuses with all four numbers when the
    download would not leave O(disk_margin_bytes) free.
  - Every file is verified before it is put in place - LFS files against the sha256 the hub's tree lists
    for the commit, other files against their size and git blob sha1 - independently of huggingface_hub's
    own checks. A file that fails is deleted and fetched once more; failing twice fails the task naming the
    file. The manifest C(dest/.llmops-manifest.json) (repo, commit, files, sizes, sha256, time) is written
    only when every file verified, so a partial or corrupt download is never reported complete.
  - The hub's answers are not trusted. The commit it resolves a revision to must be exactly 40 lower-case
    hex characters, and every path built from its answers - the version directory, each file it lists, a
    manifest read back - must stay inside its root once symlinks are resolved. A listing with a file the hub
    gives neither a sha256 nor a git blob id for (which only its size could check) is refused. Each refusal
    names the repository and the value and comes before anything is written.
  - Root never follows a link another user could have planted. O(models_root), O(dest) and the directories
    between them are created and reached one component at a time by file descriptor (C(O_NOFOLLOW)); each must
    be owned by root (or the user the module runs as) and not writable by its group or others, every directory
    in O(dest) too, and O(dest) must hold no symlink - else the module refuses before writing anything, naming
    the directory, its owner and mode (the rollout's C(llmops.vllm.host_dirs) step makes an older host's
    directories root's). Owner and mode are set through a descriptor opened with C(O_NOFOLLOW); a file with
    more than one hard link is left as it is, with a warning.
  - An interrupted fetch resumes. Files already verified are kept (and not re-hashed), partial files are
    continued with an HTTP Range request where the hub honours it (the public hub does; a hub that ignores
    Range makes that one file start over). Files stored in Xet go through hf_xet when it is installed.
  - Idempotent. A complete version returns C(changed=false) after checking the manifest and file sizes; with
    a commit sha as O(revision) that needs no network at all. O(verify=sha256) re-hashes every file and
    re-fetches those that no longer match.
  - While fetching, the module rewrites a small 0600 JSON progress file next to dest every second
    (bytes done, total, rate, files) - the C(llmops.vllm.model) role runs this module with C(async) and
    prints that file while it polls (see the role's README for preflight, fetch and prune).
  - O(keep) prunes older complete versions of the same repository under O(models_root), never the one a
    systemd unit uses.
author:
  - llmops.vllm maintainers (@llmops)
options:
  repo_id:
    description:
      - The repository, C(ORG/NAME) as on the hub.
    type: str
    required: true
  revision:
    description:
      - Branch, tag or full commit sha. Resolved to the commit, reported as RV(commit).
      - A full 40-character commit sha with a complete version already in dest needs no network.
    type: str
    default: main
  models_root:
    description:
      - Directory holding every version as C(<org>/<name>/<commit>); the default O(dest) and the pruning
        scope.
    type: path
    default: /var/lib/llmops-vllm/models
  dest:
    description:
      - Directory of this version. Default C(<models_root>/<org>/<name>/<commit>).
    type: path
  allow_patterns:
    description:
      - Only fetch files whose repository path matches one of these fnmatch patterns (as huggingface_hub's
        C(snapshot_download)); a pattern ending in C(/) matches everything below that folder.
    type: list
    elements: str
  ignore_patterns:
    description:
      - Do not fetch files whose path matches one of these patterns, e.g. C(*.pth) or C(original/).
    type: list
    elements: str
  endpoint:
    description:
      - The hub to fetch from, e.g. an air-gapped mirror C(http://hub.internal:8090).
      - Default the target's E(HF_ENDPOINT), else C(https://huggingface.co).
    type: str
  token:
    description:
      - Hugging Face access token for private or gated repositories.
      - Passed to huggingface_hub inside the module process only (never in argv, the environment of
        another process, logs or written files). Prefer O(token_file) with C(async), where Ansible writes the
        module's arguments to a file.
      - Without O(token) and O(token_file), huggingface_hub's own lookup applies (E(HF_TOKEN), its token file).
    type: str
  token_file:
    description:
      - A file on the target holding the token (first line), readable only by its owner (mode C(0600) or
        stricter; a wider mode is refused).
    type: path
  state:
    description:
      - C(present) fetches the version; C(absent) deletes it (never one a systemd unit uses, and only a
        directory this module wrote).
    type: str
    choices: [present, absent]
    default: present
  verify:
    description:
      - How a version that is already complete is checked on each run.
      - C(size) checks the manifest and every file's size (fast).
      - C(sha256) re-hashes every file against the manifest and re-fetches those that changed (slow, it reads
        every byte).
      - Freshly downloaded files are always fully verified, whatever this says.
    type: str
    choices: [size, sha256]
    default: size
  keep:
    description:
      - After a successful fetch, keep this many complete versions of the repository under O(models_root)
        and delete older ones. Kept first - this version, then versions a unit uses or O(protect) names,
        then the newest others by manifest time. Protected versions are kept even beyond O(keep).
      - The default 2 keeps the previous version so a revert needs no download; C(0) prunes nothing.
    type: int
    default: 2
  protect:
    description:
      - Paths never pruned or removed. A version is protected when a path equals it, lies inside it or
        contains it.
    type: list
    elements: path
    default: []
  protect_units:
    description:
      - Glob patterns of systemd unit files whose paths under O(models_root) are protected like O(protect).
    type: list
    elements: str
    default: ['/etc/systemd/system/vllm-*.service']
  describe_revision:
    description:
      - Also say what O(revision) is (RV(revision_kind)) - a commit, a tag or a branch - from the hub's refs
        (one more request). The rollout's preflight uses it for the desired state's C(revision_policy).
    type: bool
    default: false
  owner:
    description:
      - Owner of the model files. Default (and the rollout's choice) the user the module runs as (root); the
        service user only reads the files, which the mode must allow.
      - Directories stay owned by the user the module runs as, whatever this says - root never writes in a
        directory another user could plant a link in.
    type: str
  group:
    description:
      - Group of the model files and directories.
    type: str
  mode:
    description:
      - Mode of the model files, octal (quote it in YAML). Directories get it plus C(x) wherever it has C(r).
      - A mode that lets the group or others write is refused (a directory they could write is one root
        refuses to write in).
    type: raw
    default: '0644'
  disk_margin_bytes:
    description:
      - Bytes that must stay free on the target filesystem after the download.
      - Default max(1 GiB, 1% of the bytes still needed) - room for logs, caches and the old model's writes.
    type: int
  free_bytes:
    description:
      - Plan the disk check against this many free bytes instead of asking the target filesystem.
      - C(llmops-vllm diff --offline) passes what the host's snapshot recorded, so a preview on the
        controller refuses what the host would refuse.
    type: int
  max_workers:
    description:
      - Files downloaded (and verified) in parallel.
    type: int
    default: 8
  progress_file:
    description:
      - Where the progress JSON is written while fetching. Default C(<dest>.llmops-progress.json).
    type: path
  preview_fetch:
    description:
      - In check mode, a version that O(dest) does not hold complete is still fetched and verified - into a new
        temporary directory (RV(preview_dir), mode 0700), not into O(dest) - so that a preview can read its
        files. RV(path) is then the version's directory inside it. The caller removes RV(preview_dir) when it
        has read them. Nothing else is written; a failed preview fetch removes its directory itself.
      - For a few small files (O(allow_patterns) such as C(*.json)); the rollout's preflight reads the model's
        JSON files this way, so that C(playbooks/plan.yml) writes nothing on the host.
      - Ignored outside check mode, and when O(dest) holds the version complete (RV(path) is O(dest)).
    type: bool
    default: false
attributes:
  check_mode:
    description: Reports what would be fetched (files, bytes), the disk check and what would be pruned, and
      changes nothing.
    support: full
    details:
      - Resolving the revision and listing the files still need the hub, as in a real run.
      - With O(preview_fetch), the files are fetched into a temporary directory the caller removes.
  diff_mode:
    description: Shows the version in dest before and after (C(absent) -> C(org/name@commit)).
    support: full
notes:
  - Needs C(huggingface_hub) on the target interpreter, except for the no-network path (commit sha + complete
    version). Run it with the vLLM venv's interpreter (C(ansible_python_interpreter)), which has it.
  - The progress file holds no secret; it is 0600 anyway, as it lives next to the models.
  - Partial downloads live in C(dest/.llmops-partial/) (0700) and are removed once the version is complete.
seealso:
  - module: llmops.vllm.model_info
'''

EXAMPLES = r'''
# The module needs huggingface_hub: run it with the vLLM venv's interpreter.
- name: Fetch MiniMax-M2.5 at the commit main points to now
  llmops.vllm.hf_model:
    repo_id: MiniMaxAI/MiniMax-M2.5
    revision: main
    owner: vllm
    group: vllm
  vars:
    ansible_python_interpreter: /opt/llmops-vllm/venv/bin/python3
  register: model

- name: Show where it is
  ansible.builtin.debug:
    msg: "{{ model.path }} ({{ model.commit }}): {{ model.bytes }} bytes, {{ model.downloaded_bytes }} downloaded"

- name: Pinned to a commit, from an air-gapped mirror, with a token from Ansible Vault
  llmops.vllm.hf_model:
    repo_id: MiniMaxAI/MiniMax-M2.5
    revision: 5bd8b0e1c0fd0b8b4ab8f52d6e1c2a9e4e2b6c1d
    endpoint: http://hub.internal:8090
    token: "{{ vault_hf_token }}"
    allow_patterns: ["*.json", "*.safetensors", "tokenizer*"]
  vars:
    ansible_python_interpreter: /opt/llmops-vllm/venv/bin/python3
  no_log: true

- name: Preview (check mode) - what would be fetched, and does it fit?
  llmops.vllm.hf_model:
    repo_id: MiniMaxAI/MiniMax-M2.5
  vars:
    ansible_python_interpreter: /opt/llmops-vllm/venv/bin/python3
  check_mode: true
  register: preview

- name: Re-hash everything (bit rot, a suspicious copy)
  llmops.vllm.hf_model:
    repo_id: MiniMaxAI/MiniMax-M2.5
    revision: 5bd8b0e1c0fd0b8b4ab8f52d6e1c2a9e4e2b6c1d
    verify: sha256
  vars:
    ansible_python_interpreter: /opt/llmops-vllm/venv/bin/python3

- name: Remove one old version
  llmops.vllm.hf_model:
    repo_id: moonshotai/Kimi-K2.5
    revision: 0123456789abcdef0123456789abcdef01234567
    state: absent
'''

RETURN = r'''
path:
  description: The version's directory (dest).
  returned: always
  type: str
  sample: /var/lib/llmops-vllm/models/MiniMaxAI/MiniMax-M2.5/5bd8b0e1c0fd0b8b4ab8f52d6e1c2a9e4e2b6c1d
commit:
  description: The commit sha the revision resolved to.
  returned: always
  type: str
  sample: 5bd8b0e1c0fd0b8b4ab8f52d6e1c2a9e4e2b6c1d
revision_kind:
  description:
    - With O(describe_revision), what O(revision) is - V(commit) (a full sha), V(tag), V(branch), or V(unknown)
      when the hub does not list its refs.
  returned: when O(describe_revision=true)
  type: str
  sample: branch
repo_id:
  description: The repository.
  returned: always
  type: str
  sample: MiniMaxAI/MiniMax-M2.5
revision:
  description: The revision as given.
  returned: always
  type: str
  sample: main
endpoint:
  description: The hub used (without credentials).
  returned: always
  type: str
  sample: https://huggingface.co
bytes:
  description: Bytes of the version's files (after allow/ignore patterns).
  returned: when state=present
  type: int
  sample: 230100000000
files:
  description: Repository paths of the version's files.
  returned: when state=present
  type: list
  elements: str
  sample: [config.json, model-00001-of-00126.safetensors]
fetched:
  description: Files fetched in this run (in check mode - that would be fetched).
  returned: when state=present
  type: list
  elements: str
  sample: [model-00126-of-00126.safetensors]
bytes_present:
  description: Bytes already on disk before this run (verified files and resumable partial bytes).
  returned: when state=present and the version was not complete
  type: int
  sample: 120000000000
bytes_needed:
  description: Bytes still to download before this run.
  returned: when state=present and the version was not complete
  type: int
  sample: 110100000000
free_bytes:
  description: Free bytes on the target filesystem before this run (O(free_bytes) when given).
  returned: when state=present
  type: int
  sample: 1800000000000
disk_margin_bytes:
  description: Bytes that had to stay free after the download.
  returned: when state=present and the version was not complete
  type: int
  sample: 1101000000
downloaded_bytes:
  description: Bytes that came over the network in this run.
  returned: when state=present
  type: int
  sample: 110100000000
seconds:
  description: Wall time of the module run.
  returned: always
  type: float
  sample: 812.4
throughput_bytes_per_s:
  description: downloaded_bytes divided by the time spent downloading and verifying; 0 when nothing was
    downloaded.
  returned: when state=present
  type: int
  sample: 135500000
pruned:
  description: Version directories deleted by O(keep) (in check mode - that would be deleted).
  returned: when state=present
  type: list
  elements: str
  sample: [/var/lib/llmops-vllm/models/MiniMaxAI/MiniMax-M2.5/0123456789abcdef0123456789abcdef01234567]
protected:
  description: Version directories that O(protect) or systemd units protect, with the reasons.
  returned: success
  type: dict
  sample: {/var/lib/llmops-vllm/models/moonshotai/Kimi-K2.5/0123456789abcdef0123456789abcdef01234567:
           [/etc/systemd/system/vllm-kimi.service]}
repaired:
  description: Files that failed verification (corrupt, truncated) and were deleted and fetched again.
  returned: when state=present
  type: list
  elements: str
  sample: [model-00007-of-00126.safetensors]
restarted:
  description: Partial files the hub would not resume (it ignored the Range request), so they started over.
  returned: when state=present
  type: list
  elements: str
  sample: []
manifest:
  description: Path of the manifest.
  returned: when state=present
  type: str
  sample: /var/lib/llmops-vllm/models/MiniMaxAI/MiniMax-M2.5/5bd8b0e1c0fd0b8b4ab8f52d6e1c2a9e4e2b6c1d/.llmops-manifest.json
progress_file:
  description: Path of the progress JSON (0600) - C(phase), C(bytes_done), C(bytes_total), C(rate_bytes_per_s),
    C(files_done), C(files_total), C(current_files), C(updated), C(pid), C(error).
  returned: when state=present
  type: str
  sample: /var/lib/llmops-vllm/models/MiniMaxAI/MiniMax-M2.5/5bd8b0e1c0fd0b8b4ab8f52d6e1c2a9e4e2b6c1d.llmops-progress.json
transfers:
  description: Files fetched per transfer method - C(http) (huggingface_hub's HTTP download with Range resume)
    or C(xet) (hf_xet); attempts are counted, so a re-fetched file counts twice.
  returned: when files were fetched
  type: dict
  sample: {http: 126, xet: 0}
network:
  description: Whether the hub was contacted.
  returned: always
  type: bool
  sample: false
preview_dir:
  description: With O(preview_fetch) in check mode, the temporary directory the version was fetched into (RV(path)
    is inside it); remove it when done.
  returned: in check mode with O(preview_fetch) when O(dest) did not hold the version complete
  type: str
  sample: /tmp/llmops-vllm-preview.k2j4x9
actions:
  description: What the run did (or would do, in check mode), in words.
  returned: always
  type: list
  elements: str
  sample: ["fetch 126 files (110.1 GB)", "prune 1 older version"]
'''

import os
import shutil
import stat
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.vllm.plugins.module_utils import hub, paths
from ansible_collections.llmops.vllm.plugins.module_utils.redact import protect_endpoints


class HfModel(object):
    """Reads the state of dest, decides, and mutates only outside check mode."""

    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.started = time.monotonic()
        self.repo_id = hub.validate_repo_id(self.params['repo_id'])
        self.revision = self.params['revision']
        self.models_root = self.params['models_root']
        self.endpoint = hub.resolve_endpoint(self.params['endpoint'])
        self.allow = self.params['allow_patterns'] or []
        self.ignore = self.params['ignore_patterns'] or []
        self.uid = hub.resolve_uid(self.params['owner'])
        self.gid = hub.resolve_gid(self.params['group'])
        self.file_mode = hub.parse_mode(self.params['mode'])
        self.client = None
        self.actions = []
        self.result = dict(changed=False, repo_id=self.repo_id, revision=self.revision,
                           endpoint=hub.sanitize_endpoint(self.endpoint), network=False)

    # -- the hub, only when needed

    def token(self):
        """The token from the option or from token_file (which must not be readable by others)."""
        if self.params['token']:
            return self.params['token']
        path = self.params['token_file']
        if not path:
            return None
        try:
            st = os.stat(path)
            with open(path) as handle:
                token = handle.readline().strip()
        except OSError as exc:
            raise hub.HubError("token_file %s: cannot read it (%s); write the token there with mode 0600"
                               % (path, exc.strerror))
        if st.st_mode & 0o077:
            raise hub.HubError("token_file %s: mode %04o lets other users read the token; chmod 0600 it"
                               % (path, st.st_mode & 0o7777))
        if not token:
            raise hub.HubError("token_file %s is empty: write the token on its first line" % path)
        self.module.no_log_values.add(token)
        return token

    def hub(self):
        if self.client is None:
            self.client = hub.Hub(self.endpoint, token=self.token())
            self.result['network'] = True
        return self.client

    def resolve_commit(self):
        """A full commit sha needs no network; a branch or tag asks the hub. With describe_revision, also
        says which it is (revision_kind)."""
        if self.params.get('describe_revision'):
            self.result['revision_kind'] = ('commit' if hub.is_commit(self.revision)
                                            else self.hub().revision_kind(self.repo_id, self.revision))
        if hub.is_commit(self.revision):
            return self.revision
        return self.hub().resolve(self.repo_id, self.revision)

    # -- protection

    def protected(self):
        """{version dir: [reasons]} from `protect` and the systemd units that name paths under models_root."""
        found = {}
        for path in self.params['protect']:
            found.setdefault(os.path.normpath(path), []).append('protect')
        units = hub.read_units(self.params['protect_units'])
        for version, unit_paths in hub.paths_in_units(units, self.models_root).items():
            found.setdefault(version, []).extend(unit_paths)
        return found

    def guard(self, protected, path):
        """The reasons path is protected, or []."""
        return sorted(set(reason for p, reasons in protected.items() if hub.covers(p, path) for reason in reasons))

    # -- state: absent

    def absent(self):
        if self.params['dest']:
            dest = self.params['dest']
            commit = self.revision if hub.is_commit(self.revision) else None
        else:
            commit = self.resolve_commit()
            dest = hub.default_dest(self.models_root, self.repo_id, commit)
        self.result.update(path=dest, commit=commit)
        protected = self.protected()
        self.result['protected'] = protected
        if not os.path.exists(dest):
            self.diff(dest, None, None)
            return
        reasons = self.guard(protected, dest)
        if reasons:
            raise hub.HubError("dest %s is in use (%s): it is never removed; retire the service first or take it out "
                               "of protect" % (dest, ", ".join(reasons)))
        manifest = hub.read_manifest(dest)
        if manifest is None and not os.path.isdir(hub.partial_dir(dest)):
            raise hub.HubError("dest %s has no %s and no %s: it was not written by hf_model, so it is not removed; "
                               "remove it yourself if you mean it" % (dest, hub.MANIFEST_NAME, hub.PARTIAL_DIR))
        self.diff(dest, manifest or {'incomplete': True}, None)
        self.actions.append('remove %s' % dest)
        self.result['changed'] = True
        if not self.module.check_mode:
            hub.remove_version(dest)

    # -- state: present

    def present(self):
        commit = self.resolve_commit()
        dest = self.params['dest'] or hub.default_dest(self.models_root, self.repo_id, commit)
        progress_file = self.params['progress_file'] or hub.progress_path(dest)
        self.result.update(commit=commit, path=dest, manifest=hub.manifest_path(dest), progress_file=progress_file,
                           fetched=[], repaired=[], restarted=[], downloaded_bytes=0, throughput_bytes_per_s=0,
                           pruned=[])
        manifest = hub.read_manifest(dest)
        problems = hub.manifest_problems(manifest, dest, self.repo_id, commit, self.allow, self.ignore)
        corrupt = {}
        if not problems and self.params['verify'] == 'sha256':
            corrupt = hub.manifest_rehash(manifest, dest, workers=self.params['max_workers'])
            problems = ['%s: %s' % item for item in sorted(corrupt.items())]
        if not problems:
            self.result.update(bytes=manifest['bytes'], files=[f['path'] for f in manifest['files']], free_bytes=self.free(dest))
            self.diff(dest, manifest, manifest)
            self.fix_attributes(dest, [f['path'] for f in manifest['files']])
        else:
            self.fetch(commit, dest, manifest, corrupt, progress_file)
        self.prune(dest)

    def fetch(self, commit, dest, manifest, corrupt, progress_file):
        client = self.hub()
        listed = hub.checked_remote_files(client.list_files(self.repo_id, commit), self.repo_id, commit, dest,
                                          self.endpoint)
        wanted = hub.filter_paths([f['path'] for f in listed], self.allow, self.ignore)
        if not wanted:
            raise hub.HubError("allow_patterns %s / ignore_patterns %s match none of the %d files of %s@%s (%s); "
                               "fix the patterns" % (self.allow, self.ignore, len(listed), self.repo_id, commit,
                                                     ", ".join(f['path'] for f in listed[:10])))
        remote = [f for f in listed if f['path'] in set(wanted)]
        verified = (hub.read_json(os.path.join(hub.partial_dir(dest), hub.VERIFIED_NAME)) or {})
        if manifest is not None and not verified:
            verified = records_from_manifest(manifest, dest)
        # A file the manifest vouched for but that no longer hashes right is checked again, not kept.
        for path in corrupt:
            verified.pop(path, None)
        plan = hub.plan_fetch(remote, hub.scan_local(dest, remote), verified)
        free = self.free(dest)
        margin = hub.disk_margin(plan['bytes_needed'], self.params['disk_margin_bytes'])
        self.result.update(bytes=plan['bytes_total'], files=[f['path'] for f in remote], fetched=plan['fetch'],
                           bytes_present=plan['bytes_present'], bytes_needed=plan['bytes_needed'], free_bytes=free,
                           disk_margin_bytes=margin, repaired=sorted(corrupt))
        refusal = hub.disk_refusal(self.repo_id, commit, dest, plan['bytes_total'], plan['bytes_present'],
                                   plan['bytes_needed'], free, margin)
        if refusal:
            raise hub.HubError(refusal, bytes_total=plan['bytes_total'], bytes_present=plan['bytes_present'],
                               bytes_needed=plan['bytes_needed'], free_bytes=free, disk_margin_bytes=margin)
        stale = self.stale_files(manifest, remote)
        self.actions.append('fetch %d of %d files (%s of %s)' % (len(plan['fetch']), len(remote),
                                                                 hub.human_bytes(plan['bytes_needed']),
                                                                 hub.human_bytes(plan['bytes_total'])))
        if stale:
            self.actions.append('remove %d files no longer selected: %s' % (len(stale), ', '.join(stale)))
        after = {'repo_id': self.repo_id, 'commit': commit, 'files': remote, 'bytes': plan['bytes_total']}
        before = manifest if manifest is not None or not os.path.isdir(dest) else {'incomplete': True}
        self.diff(dest, before, after)
        self.result['changed'] = True
        if self.module.check_mode:
            if self.params['preview_fetch']:
                self.preview(commit, remote)
            return
        self.download(commit, dest, remote, plan, stale, verified, progress_file)

    def preview(self, commit, remote):
        """preview_fetch in check mode: the version fetched and verified into a new temporary directory for
        the caller to read and remove, as a real fetch would into dest; removed again when it fails."""
        scratch = tempfile.mkdtemp(prefix='llmops-vllm-preview.')
        try:
            dest = os.path.join(scratch, 'version')
            progress_file = os.path.join(scratch, 'progress.json')
            plan = hub.plan_fetch(remote, hub.scan_local(dest, remote), {})
            self.download(commit, dest, remote, plan, [], {}, progress_file)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        self.actions.append('fetched into %s for the preview (remove it when read)' % scratch)
        self.result.update(path=dest, manifest=hub.manifest_path(dest), progress_file=progress_file, preview_dir=scratch)

    def free(self, dest):
        """Free bytes for dest: O(free_bytes) when given (an offline preview), else its filesystem's."""
        return self.params['free_bytes'] if self.params['free_bytes'] is not None else hub.free_bytes(dest)

    def stale_files(self, manifest, remote):
        """Files an earlier manifest of dest listed that the current patterns no longer select."""
        if manifest is None or manifest.get('repo_id') != self.repo_id:
            return []
        wanted = set(f['path'] for f in remote)
        return sorted(f['path'] for f in manifest.get('files', []) if f['path'] not in wanted)

    def download(self, commit, dest, remote, plan, stale, verified, progress_file):
        """Download, verify, place; the manifest last. Any failure leaves no manifest behind."""
        self.trusted_dest(dest)
        # From here on the version is not complete: the manifest goes before anything is touched.
        try:
            os.unlink(hub.manifest_path(dest))
        except OSError:
            pass
        lock = hub.lock_fetch(dest)
        # dest's own owner/group/mode first, here in the main thread: a chown the module may not do
        # fails now, cleanly, rather than in a download thread.
        self.set_attributes(dest, hub.dir_mode(self.file_mode))
        progress = hub.Progress(progress_file, self.repo_id, commit, dest, plan['bytes_total'], plan['bytes_present'],
                                len(remote))
        progress.start()
        progress.phase('downloading')
        t0 = time.monotonic()
        try:
            for path in stale:
                try:
                    os.unlink(hub.dest_path(dest, path, what='a file path the manifest lists'))
                except OSError:
                    pass
            fetch = hub.Fetch(client_or_fail(self.client), self.repo_id, commit, dest, remote, progress, self.file_mode,
                              self.params['max_workers'], verified=verified, set_attributes=self.set_attributes)
            digests = fetch.run(plan['actions'])
            progress.phase('writing manifest')
            files = hub.manifest_files(remote, digests)
            manifest = hub.manifest_document(self.repo_id, commit, self.revision, self.endpoint, self.allow,
                                             self.ignore, files)
            hub.write_json_atomic(hub.manifest_path(dest), manifest, mode=self.file_mode, uid=self.uid, gid=self.gid)
            for path, mode in hub.attribute_targets(dest, [f['path'] for f in remote], self.file_mode):
                self.set_attributes(path, mode)
            shutil.rmtree(hub.partial_dir(dest), ignore_errors=True)
        except BaseException as exc:
            progress.finish('failed', error=str(exc) if isinstance(exc, hub.HubError) else type(exc).__name__)
            self.result['downloaded_bytes'] = progress.doc['downloaded_bytes']
            raise
        finally:
            lock.close()
        seconds = time.monotonic() - t0
        progress.finish('done')
        downloaded = progress.doc['downloaded_bytes']
        self.result.update(downloaded_bytes=downloaded, repaired=sorted(set(self.result['repaired']) | set(fetch.repaired)),
                           restarted=sorted(fetch.restarted), transfers=fetch.transfers,
                           throughput_bytes_per_s=int(downloaded / seconds) if downloaded and seconds > 0 else 0)

    def trusted_dest(self, dest):
        """dest and the directories above it, created where missing, each reached by file descriptor and
        refused unless root's (or this user's) and not writable by anyone else; then every directory in dest
        must be too, and dest must hold no symlink. From here on nobody else can plant a link where this run
        writes (paths.open_dir, paths.tree_refusal)."""
        what = 'dest %s (the version directory of %s)' % (dest, self.repo_id)
        fd = paths.open_dir(dest, what=what, create_mode=hub.dir_mode(self.file_mode))
        try:
            hard_links = paths.tree_refusal(fd, dest, what=what)
        finally:
            os.close(fd)
        for path in hard_links:
            self.module.warn('%s has more than one hard link: its owner and mode are left as they are (the other '
                             'names may be files outside dest); replace it with a copy' % path)

    def set_attributes(self, path, mode):
        """Owner (files only: a directory stays the module user's, as root never writes in a directory another
        user owns), group and mode on path where they differ; True when they did. Never through a link: a
        symlink is refused, a hard-linked file left alone with a warning (paths.set_attributes_at). In check
        mode nothing is changed or opened, and True still says that something would be."""
        st = os.lstat(path)
        is_dir = stat.S_ISDIR(st.st_mode)
        uid = os.geteuid() if is_dir else (self.uid if self.uid is not None else os.geteuid())
        gid = self.gid if self.gid is not None else -1
        if self.module.check_mode:
            return (stat.S_ISLNK(st.st_mode) or st.st_uid != uid or (gid >= 0 and st.st_gid != gid)
                    or stat.S_IMODE(st.st_mode) != mode)
        changed, warning = paths.set_attributes_at(path, uid, gid, mode,
                                                   what='a directory of the model' if is_dir else 'a model file')
        if warning:
            self.module.warn(warning)
        return changed

    def fix_attributes(self, dest, relpaths):
        """A complete version whose owner/group/mode drifted is fixed (changed), never re-downloaded."""
        differ = [path for path, mode in hub.attribute_targets(dest, relpaths, self.file_mode)
                  if os.path.lexists(path) and self.set_attributes(path, mode)]
        if not differ:
            return
        self.actions.append('set owner/group/mode on %d paths' % len(differ))
        self.result['changed'] = True

    def prune(self, dest):
        protected = self.protected()
        self.result['protected'] = protected
        versions = hub.list_versions(self.models_root, self.repo_id)
        doomed = hub.select_prune(versions, self.params['keep'], dest, list(protected))
        self.result['pruned'] = doomed
        if not doomed:
            return
        self.actions.append('prune %d older version%s' % (len(doomed), '' if len(doomed) == 1 else 's'))
        self.result['changed'] = True
        if not self.module.check_mode:
            for path in doomed:
                hub.remove_version(path)

    # -- reporting

    def diff(self, dest, before, after):
        if not self.module._diff:
            return
        self.result['diff'] = dict(before_header=dest, after_header=dest, before=describe(before),
                                   after=describe(after))

    def run(self):
        try:
            if self.params['state'] == 'absent':
                self.absent()
            else:
                self.present()
        except hub.HubError as exc:
            self.finish()
            self.module.fail_json(msg=str(exc), **dict(self.result, **exc.details))
        except paths.PathError as exc:
            self.finish()
            self.module.fail_json(msg=str(exc), **self.result)
        except OSError as exc:
            self.finish()
            self.module.fail_json(msg='%s: %s; check that the models directory is writable and has room (the '
                                      'verified files are kept, run again to resume)'
                                      % (self.result.get('path', self.models_root), exc), **self.result)
        self.finish()
        self.module.exit_json(**self.result)

    def finish(self):
        self.result['actions'] = self.actions
        self.result['seconds'] = round(time.monotonic() - self.started, 3)


def records_from_manifest(manifest, dest):
    """Verified records for files an earlier manifest of dest vouched for and that were not modified
    since (same size, mtime not after the manifest): changing the patterns of a complete version, or
    repairing one file, must not re-hash the files it keeps."""
    written_ns = int(float(manifest.get('fetched_at_epoch') or 0) * 1e9) + 1000000
    records = {}
    for entry in manifest.get('files', []):
        try:
            st = os.stat(hub.dest_path(dest, entry['path'], what='a file path the manifest lists'))
        except OSError:
            continue
        if st.st_size == entry['size'] and st.st_mtime_ns <= written_ns:
            records[entry['path']] = {'size': st.st_size, 'mtime_ns': st.st_mtime_ns, 'sha256': entry['sha256'],
                                      'git_blob_sha1': entry.get('git_blob_sha1')}
    return records


def client_or_fail(client):
    """The hub client that planned the fetch (the fetch never starts without one)."""
    if client is None:
        raise hub.HubError('internal error: fetching without a hub client')
    return client


def describe(version):
    """One line for the diff: absent, or org/name@commit with its size."""
    if not version:
        return 'absent\n'
    if version.get('incomplete'):
        return 'incomplete download (no manifest)\n'
    files = version.get('files') or []
    size = version.get('bytes', 0)
    return '%s@%s: %d files, %d bytes (%s)\n' % (version.get('repo_id'), version.get('commit'), len(files), size,
                                                 hub.human_bytes(size))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            repo_id=dict(type='str', required=True),
            revision=dict(type='str', default='main'),
            models_root=dict(type='path', default=hub.DEFAULT_MODELS_ROOT),
            dest=dict(type='path'),
            allow_patterns=dict(type='list', elements='str'),
            ignore_patterns=dict(type='list', elements='str'),
            endpoint=dict(type='str'),
            token=dict(type='str', no_log=True),
            token_file=dict(type='path'),
            state=dict(type='str', choices=['present', 'absent'], default='present'),
            verify=dict(type='str', choices=['size', 'sha256'], default='size'),
            keep=dict(type='int', default=2),
            protect=dict(type='list', elements='path', default=[]),
            protect_units=dict(type='list', elements='str', default=list(hub.DEFAULT_UNIT_GLOBS)),
            describe_revision=dict(type='bool', default=False),
            owner=dict(type='str'),
            group=dict(type='str'),
            mode=dict(type='raw', default='0644'),
            disk_margin_bytes=dict(type='int'),
            free_bytes=dict(type='int'),
            max_workers=dict(type='int', default=8),
            progress_file=dict(type='path'),
            preview_fetch=dict(type='bool', default=False),
        ),
        mutually_exclusive=[('token', 'token_file')],
        supports_check_mode=True,
    )
    protect_endpoints(module, 'endpoint')  # its user:password@ never shows in results or at -vvv (module_utils/redact.py)
    if module.params['keep'] < 0:
        module.fail_json(msg='keep %d: give 0 (prune nothing) or the number of versions to keep' % module.params['keep'])
    try:
        if hub.parse_mode(module.params['mode']) & 0o022:
            module.fail_json(msg="mode %r lets the group or others write the model files and directories: root "
                                 "writes only in directories no other user can write; give e.g. '0644'"
                                 % (module.params['mode'],))
    except hub.HubError as exc:
        module.fail_json(msg=str(exc))
    if module.params['max_workers'] < 1:
        module.fail_json(msg='max_workers %d: give at least 1' % module.params['max_workers'])
    try:
        runner = HfModel(module)
    except hub.HubError as exc:
        module.fail_json(msg=str(exc))
    runner.run()


if __name__ == '__main__':
    main()
