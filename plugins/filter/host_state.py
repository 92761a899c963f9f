# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit names, unit paths, connect URLs and the plan as the host state records it, for roles and
playbooks, from module_utils/host_state.py: the one place they are defined (the modules on the host
use the same functions)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import functools
import hashlib
import hmac
import json
import os
from typing import Any, Callable, Dict, Optional

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm.plugins.module_utils import host_state
from ansible_collections.llmops.vllm.plugins.module_utils.vllm_process import describe_foreign

# The collection's own code, part of every fingerprint: a new release (or a local edit) re-runs the
# full rollout once, which records the new fingerprint.
COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CODE_DIRS = ("roles", "plugins", "playbooks")
# Every file there counts (the helper scripts a host gets have no suffix), except bytecode and prose.
SKIPPED_SUFFIXES = (".pyc", ".pyo", ".md")


@functools.lru_cache(maxsize=1)
def code_digest(root: str = COLLECTION_ROOT) -> str:
    """sha256 over the paths and contents of the collection's roles, plugins and playbooks."""
    digest = hashlib.sha256()
    for top in CODE_DIRS:
        for directory, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if not name.endswith(SKIPPED_SUFFIXES):
                    path = os.path.join(directory, name)
                    digest.update(os.path.relpath(path, root).encode("utf-8") + b"\0")
                    with open(path, "rb") as handle:
                        digest.update(handle.read() + b"\0")
    return digest.hexdigest()


def fingerprint(inputs: Any, key: str = "") -> str:
    """HMAC-SHA256, keyed with the host's fingerprint key, of everything that decides what a rollout leaves on
    a host: `inputs` (the desired model and the variables of the roles, as canonical JSON - secrets such as the
    API key among them, so that a new key is a new fingerprint) and the collection's code. The state records it;
    the next rollout with the same fingerprint may stop after cheap probes (vllm_state action=verify).

    The key (roles/rollout/tasks/fastpath.yml: /etc/llmops-vllm/fingerprint.key, 0600 root, made on the host's
    first rollout, never shown) is what keeps the secrets in: without it, a fingerprint in the state file (0644)
    or in a run's artifacts cannot be tried against guessed API keys."""
    if not isinstance(key, str) or not key.strip():
        raise AnsibleFilterError("llmops.vllm.fingerprint: no key - pass the host's fingerprint key (the content "
                                 "roles/rollout/tasks/fastpath.yml reads); an unkeyed hash would let anyone who "
                                 "reads the state file try guesses of the secrets among the inputs")
    document = json.dumps({"inputs": inputs, "code": code_digest()}, sort_keys=True, separators=(",", ":"),
                          default=str)
    return hmac.new(key.strip().encode("utf-8"), document.encode("utf-8"), hashlib.sha256).hexdigest()


def plan_record(plan: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """The keys of a serving plan that the host state records (host_state.PLAN_KEYS and PLAN_OPTIONAL)."""
    plan = plan or {}
    keys = list(host_state.PLAN_KEYS) + [key for key in host_state.PLAN_OPTIONAL if key in plan]
    return dict((key, plan.get(key)) for key in keys)


class FilterModule(object):
    def filters(self) -> Dict[str, Callable[..., Any]]:
        return {
            "unit_name": host_state.unit_name,
            "unit_path": host_state.unit_path,
            "unit_glob": host_state.unit_glob,
            "connect_host": host_state.connect_host,
            "connect_url": host_state.connect_url,
            "plan_record": plan_record,
            "fingerprint": fingerprint,
            "foreign_vllm": describe_foreign,
        }
