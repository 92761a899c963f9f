# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
---
name: benchmark_baseline
author:
  - llmops.vllm maintainers (@llmops)
version_added: "0.2.0"
short_description: The stored benchmark run of a model that a rollout's gate can compare with
description:
  - For each model name, the newest run the C(llmops.vllm.benchmark) role stored on the controller under
    O(results_dir)/O(host) with the same workload (input and output lengths, prompts, extra arguments),
    when it finished at most O(max_age) seconds ago - the baseline M(llmops.vllm.benchmark_report) will use.
  - The role's C(baseline.yml) entry point asks this before a rollout retires a model, and benchmarks that
    model first when there is none.
options:
  _terms:
    description: Names the runs are stored under (the role's C(benchmark_name)).
    required: true
    type: list
    elements: str
  results_dir:
    description: The role's C(benchmark_results_dir).
    type: path
    required: true
  host:
    description: The host whose runs count (a subdirectory of O(results_dir)).
    type: str
    required: true
  workload:
    description: C(input_len), C(output_len), C(num_prompts), C(extra_args) of the run to come; omitted - any workload.
    type: dict
  max_age:
    description: Seconds; an older run is no baseline. Omitted - any age.
    type: float
'''

EXAMPLES = r'''
- name: Is there a fresh baseline of kimi-k2-5 on this host
  ansible.builtin.debug:
    msg: "{{ lookup('llmops.vllm.benchmark_baseline', 'kimi-k2-5', results_dir='reports/benchmarks',
             host=inventory_hostname, max_age=86400) }}"
'''

RETURN = r'''
_raw:
  description:
    - One mapping per name - C(path) of the run (V(null) when none can be the baseline), C(finished), C(age_s)
      and C(why) (why there is none, else V(null)).
  type: list
  elements: dict
'''

import datetime

from ansible.errors import AnsibleError
from ansible.plugins.lookup import LookupBase

from ansible_collections.llmops.vllm.plugins.plugin_utils import benchmark


class LookupModule(LookupBase):

    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        now = datetime.datetime.now(datetime.UTC)
        out = []
        for name in terms:
            try:
                path, document, why, _skipped = benchmark.find_baseline(
                    self.get_option('results_dir'), self.get_option('host'), name, workload=self.get_option('workload'),
                    max_age_s=self.get_option('max_age'), now=now)
            except (OSError, benchmark.BenchmarkInputError) as exc:
                raise AnsibleError('benchmark_baseline: %s' % exc)
            when = benchmark.run_time(document) if document else None
            out.append({'path': path, 'finished': document.get('finished') if document else None,
                        'age_s': round((now - when).total_seconds(), 1) if when else None, 'why': why})
        return out
