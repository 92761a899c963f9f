# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``gpu_health``: the preflight's verdict on the health of the GPUs a plan uses, from
gpu_topology_info's result (module_utils/gpu_health.py preflight_health; docs/gpu-health.md)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from typing import Any, Callable, Dict, List, Optional

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm.plugins.module_utils.gpu_health import (
    WAIVE_VARIABLE,
    GpuHealthError,
    preflight_health,
)


def gpu_health(topology: Any, gpu_indices: Any, current_unit: Optional[str] = None, allowed_pids: Any = None,
               waive: Any = None, variable: str = WAIVE_VARIABLE) -> Dict[str, List[Any]]:
    try:
        return preflight_health(topology, gpu_indices, current_unit=current_unit or None,
                                allowed_pids=allowed_pids, waive=waive, variable=variable)
    except GpuHealthError as exc:
        raise AnsibleFilterError("gpu_health: %s" % exc)


class FilterModule(object):
    def filters(self) -> Dict[str, Callable[..., Any]]:
        return {"gpu_health": gpu_health}
