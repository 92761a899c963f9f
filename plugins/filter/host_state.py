# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit names, unit paths, connect URLs and the plan as the host state records it, for roles and
playbooks, from module_utils/host_state.py: the one place they are defined (the modules on the host
use the same functions)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from typing import Any, Callable, Dict, Optional

from ansible_collections.llmops.vllm.plugins.module_utils import host_state


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
        }
