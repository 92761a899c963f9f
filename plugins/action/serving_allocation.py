# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of llmops.vllm.serving_allocation: the host's models planned together (planner_multi)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from typing import Any, Dict, Optional

from ansible.plugins.action import ActionBase

from ansible_collections.llmops.vllm.plugins.plugin_utils import planner_multi
from ansible_collections.llmops.vllm.plugins.plugin_utils.contracts import AllocationResult, PlanInputError

ARGUMENT_SPEC = dict(
    topology=dict(type='dict', required=True),
    vllm=dict(type='dict'),
    models=dict(type='list', elements='dict', required=True),
    model_facts=dict(type='dict', required=True),
    current=dict(type='dict', default={}),
    fail_on_no_fit=dict(type='bool', default=True),
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Optional[str] = None, task_vars: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        result: Dict[str, Any] = super().run(tmp, task_vars)
        del tmp
        validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        del validation
        try:
            items = planner_multi.items_from_documents(args['models'], args['model_facts'])
            current = {str(name): [int(i) for i in gpus or []] for name, gpus in (args['current'] or {}).items()}
            allocation = planner_multi.plan_models(args['topology'], items, args['vllm'], current)
        except PlanInputError as exc:
            result.update(failed=True, changed=False, msg="serving allocation: %s" % exc)
            return result
        result.update(AllocationResult(**allocation).model_dump())
        result['changed'] = False
        if not allocation['fits'] and args['fail_on_no_fit']:
            result.update(failed=True, msg="serving allocation: %s" % allocation['error'])
        return result
