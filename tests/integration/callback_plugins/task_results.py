# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A test helper of tests/integration/test_hf_model.py, not part of the collection: the result of every task that
registers one, as the registered variable holds it, under the task's name in a JSON file, rewritten after each task so
that a test reads the results of a run that is paused or still going. It replaces a task that would copy the results
out (a module run, about a second of CPU per ansible-playbook run; issue 40)."""

import json
import os

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: task_results
type: aggregate
short_description: each registered task result, by task name, in a JSON file (tests only)
description:
  - Writes C({task name: result}) of the tasks that register a result to the file LLMOPS_TEST_RESULTS names, after each.
  - A failed task's result says C(failed: true), as the registered variable does.
requirements:
  - enabled with ANSIBLE_CALLBACKS_ENABLED=task_results, found through ANSIBLE_CALLBACK_PLUGINS
options: {}
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "task_results"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.path = os.environ["LLMOPS_TEST_RESULTS"]
        self.results = {}

    def record(self, result, failed):
        if not result.task.register:
            return
        # As the registered variable: no invocation; the status the callback API strips, put back.
        registered = {key: value for key, value in result.result.items() if key != "invocation"}
        registered["failed"] = failed
        self.results[result.task.get_name()] = registered
        scratch = self.path + ".tmp"
        with open(scratch, "w") as handle:
            json.dump(self.results, handle, indent=2, sort_keys=True)
        os.replace(scratch, self.path)

    def v2_runner_on_ok(self, result):
        self.record(result, False)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self.record(result, True)
