# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of llmops.vllm.benchmark_report: compare a benchmark run with the previous model's
last run on the same host and write the report. A low ratio is a result (passed=false), not a task
failure: the caller decides, so a rollout's rescue can roll back."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from typing import Any, Dict, Optional, cast

from ansible.plugins.action import ActionBase

from ansible_collections.llmops.vllm.plugins.plugin_utils import benchmark

ARGUMENT_SPEC = dict(
    results_dir=dict(type='path', required=True),
    run=dict(type='raw', required=True),
    host=dict(type='str'),
    previous=dict(type='str'),
    at_concurrency=dict(type='int'),
    min_ratio=dict(type='float'),
    plan=dict(type='dict'),
    rollout_report=dict(type='dict'),
    report_dir=dict(type='path'),
    plot=dict(type='bool', default=True),
    max_baseline_age=dict(type='float'),
    baseline_required=dict(type='bool', default=False),
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Optional[str] = None, task_vars: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        result: Dict[str, Any] = super().run(tmp, task_vars)
        del tmp
        validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        del validation
        # Ansible always sets inventory_hostname in task_vars.
        host = cast(str, args['host'] or (task_vars or {}).get('inventory_hostname'))
        result['changed'] = False  # a report is output on the controller, not state of the host
        try:
            new = self._new_run(args['run'])
            report = benchmark.write_report(
                args['results_dir'], host, new, previous=args['previous'], at_concurrency=args['at_concurrency'],
                min_ratio=args['min_ratio'], plan=args['plan'], rollout_report=args['rollout_report'],
                report_dir=args['report_dir'], plot=args['plot'], max_baseline_age=args['max_baseline_age'],
                baseline_required=args['baseline_required'])
        except benchmark.BenchmarkInputError as exc:
            result.update(failed=True, msg="benchmark_report: %s" % exc)
            return result
        except OSError as exc:
            result.update(failed=True, msg="benchmark_report: cannot write the report under %s: %s; check that "
                                           "the directory is writable" % (args['report_dir'] or args['results_dir'], exc))
            return result
        result.update(report)
        return result

    @staticmethod
    def _new_run(run: object) -> Dict[str, Any]:
        """The run being judged: the role's benchmark_result (a dict) or the path of a stored run."""
        if isinstance(run, str):
            document = benchmark.load_run(run)
            document.setdefault('path', run)
            return document
        if isinstance(run, dict):
            return benchmark.check_run(dict(run), "the run given")
        raise benchmark.BenchmarkInputError("run must be the benchmark_result fact of the llmops.vllm.benchmark role "
                                            "or the path of a stored run, got %s" % type(run).__name__)
