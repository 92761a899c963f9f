# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of llmops.vllm.serving_plan: runs the planner on facts the probes returned."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from typing import Any, Dict, Optional

from ansible.plugins.action import ActionBase

from ansible_collections.llmops.vllm.plugins.plugin_utils import planner, planner_nodes
from ansible_collections.llmops.vllm.plugins.plugin_utils.planner_swap import SWAPS, decide_swap
from ansible_collections.llmops.vllm.plugins.plugin_utils.contracts import PlanInputError, ServingPlan, ServingPlanResult

ARGUMENT_SPEC = dict(
    topology=dict(type='dict', required=True),
    model=dict(type='dict', required=True),
    vllm=dict(type='dict'),
    request=dict(type='dict', default={}),
    fail_on_no_fit=dict(type='bool', default=True),
    swap=dict(type='str', choices=list(SWAPS)),
    name=dict(type='str', default=''),
    current=dict(type='dict', default={}),
    group=dict(type='dict', options=dict(
        topologies=dict(type='list', elements='dict', required=True),
        names=dict(type='list', elements='str', required=True),
        rank=dict(type='int', required=True),
        network_gbps=dict(type='float'),
    )),
)


def node_view(plan: Any, rank: int, names: list) -> Any:
    """The group's plan as one node runs it: its argv, env and GPUs at the top (``nodes`` keeps the group)."""
    if not plan.fits:
        return plan
    if rank >= len(plan.nodes):
        plan.fits = False
        plan.error = ("%s is not needed: the group's plan (%s) runs on %s; list only those hosts in vllm_model.group, "
                      "or pin plan: {nodes: N}" % (names[rank], plan.layout, ", ".join(n.host for n in plan.nodes)))
        return plan
    node = plan.nodes[rank]
    plan.argv, plan.env, plan.gpu_indices = list(node.argv), dict(node.env), list(node.gpu_indices)
    return plan


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Optional[str] = None, task_vars: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        result: Dict[str, Any] = super().run(tmp, task_vars)
        del tmp
        validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        del validation
        request = {k: v for k, v in (args['request'] or {}).items() if v is not None}
        decision: Dict[str, Any] = {}
        try:
            group = args['group']
            if group:
                if not 0 <= group['rank'] < len(group['topologies']) or len(group['names']) != len(group['topologies']):
                    raise PlanInputError("group: rank %d of %d hosts (%d names)" % (
                        group['rank'], len(group['topologies']), len(group['names'])))
                plan = node_view(planner_nodes.plan_group(group['topologies'], args['model'], args['vllm'], request,
                                                          names=group['names'], network_gbps=group['network_gbps']),
                                 group['rank'], group['names'])
            elif args['swap']:
                if args['group']:
                    raise PlanInputError("swap: a multi-node group restarts as one; it takes no swap")
                decision = decide_swap(args['topology'], args['model'], args['vllm'], request, args['current'],
                                       swap=args['swap'], name=args['name'])
                plan = ServingPlan(**decision["plan"])
            else:
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
        swap = {'swap': decision['swap'], 'swap_why': decision['why']} if args['swap'] and not args['group'] else {}
        result.update(ServingPlanResult(plan_warnings=list(plan.warnings), **plan.model_dump(), **swap).model_dump())
        result['changed'] = False
        return result
