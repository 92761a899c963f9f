# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of llmops.vllm.serving_plan: runs the planner on facts the probes returned."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from typing import Any, Dict, Optional

from ansible.plugins.action import ActionBase

from ansible_collections.llmops.vllm.plugins.plugin_utils import planner
from ansible_collections.llmops.vllm.plugins.plugin_utils.contracts import PlanInputError, ServingPlanResult

ARGUMENT_SPEC = dict(
    topology=dict(type='dict', required=True),
    model=dict(type='dict', required=True),
    vllm=dict(type='dict'),
    request=dict(type='dict', default={}),
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
        request = {k: v for k, v in (args['request'] or {}).items() if v is not None}
        try:
            plan = planner.plan(args['topology'], args['model'], args['vllm'], request)
        except PlanInputError as exc:
            result.update(failed=True, changed=False, msg="serving plan: %s" % exc)
            return result
        # The result is the contract (contracts.ServingPlanResult): the plan, and its warnings again as
        # plan_warnings, because Ansible consumes a result's `warnings` (it shows them).
        if not plan.fits and args['fail_on_no_fit']:
            # A refusal is read by a person: the reason with the nearest option, not the whole plan.
            result.update(failed=True, changed=False, fits=False, layout=plan.layout, error=plan.error,
                          msg="serving plan: %s" % plan.error)
            return result
        result.update(ServingPlanResult(plan_warnings=list(plan.warnings), **plan.model_dump()).model_dump())
        result['changed'] = False
        return result
