# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host lock's lease for roles and playbooks, from module_utils/host_state.py (the one place it is
defined): how long a rollout's swap may hold the host before its next renewal (issue 39)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from typing import Any, Callable, Dict, Optional

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm.plugins.module_utils import host_state


def start_timeout_s(plan: Optional[Dict[str, Any]], setting: Any = "auto") -> int:
    """The serve role's start timeout for a serving plan (its weights_bytes): 600 s + 10 s per GiB, or `setting`."""
    try:
        return host_state.start_timeout_s((plan or {}).get("weights_bytes", 0), setting)
    except host_state.StateError as exc:
        raise AnsibleFilterError("llmops.vllm.start_timeout_s: %s" % exc)


def swap_lease_s(plan: Optional[Dict[str, Any]], start_timeout: Any = "auto", ready_timeout: Any = "auto",
                 soak_s: Any = 0, benchmark_s: Any = 0, floor_s: Any = 1800) -> int:
    """The lease the rollout renews before the swap and at each fence after it (host_state.swap_lease_s)."""
    try:
        return host_state.swap_lease_s((plan or {}).get("weights_bytes", 0), start_timeout, ready_timeout, soak_s,
                                       benchmark_s, floor_s)
    except host_state.StateError as exc:
        raise AnsibleFilterError("llmops.vllm.swap_lease_s: %s" % exc)


class FilterModule(object):
    def filters(self) -> Dict[str, Callable[..., Any]]:
        return {
            "start_timeout_s": start_timeout_s,
            "swap_lease_s": swap_lease_s,
        }
