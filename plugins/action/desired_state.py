# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of llmops.vllm.desired_state: validate a host's vllm_model document, or its vllm_models list."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from typing import Any, Dict, Optional

from ansible.plugins.action import ActionBase

from ansible_collections.llmops.vllm.plugins.plugin_utils import desired_state
from ansible_collections.llmops.vllm.plugins.plugin_utils.contracts import PlanInputError


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Optional[str] = None, task_vars: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        result: Dict[str, Any] = super().run(tmp, task_vars)
        del tmp
        validation, args = self.validate_argument_spec(argument_spec=dict(
            model=dict(type='raw'),
            models=dict(type='raw'),
            variable=dict(type='str'),
        ), mutually_exclusive=[('model', 'models')], required_one_of=[('model', 'models')])
        del validation
        try:
            if args['models'] is not None:
                result['models'] = desired_state.validate_models(args['models'], args['variable'] or 'vllm_models')
            else:
                result['model'] = desired_state.validate_model(args['model'], args['variable'] or 'vllm_model')
        except PlanInputError as exc:
            result.update(failed=True, msg="desired state: %s" % exc)
        # The effective check mode of this task: --check, or a play with check_mode (playbooks/plan.yml).
        # ansible_check_mode only reflects the command line, so the roles read it from here.
        result['check_mode'] = bool(self._play_context.check_mode)
        result['changed'] = False
        return result
