#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
---
module: benchmark_report
short_description: Compare a benchmark run with the previous model's last run and write the rollout's report
version_added: 0.1.0
description:
  - Takes a run of the C(llmops.vllm.benchmark) role (its C(benchmark_result) fact, or the path of a stored
    run), finds the last run of the model named O(previous) on the same host in
    C(<results_dir>/<host>/), and computes RV(ratio) - new / previous output tokens per second at
    O(at_concurrency), by default the highest concurrency level both runs have.
  - Writes the report into O(report_dir) as C(<UTC timestamp>-<previous>-to-<new>) C(.md) (verdict, the
    plan with its reasons when O(plan) is given, the rollout timings when O(rollout_report) is given, and
    the before/after table per concurrency level - output tok/s, requests/s, TTFT and TPOT p50/p99 and the
    ratio), C(.png) (output tok/s against concurrency, log scale, previous and new) and C(.json).
  - RV(passed) is RV(ratio) >= O(min_ratio) when O(min_ratio) is given, else true. Without a previous run
    (a first rollout) or a level both runs share there is nothing to compare - passed, with a note in
    RV(notes); with O(baseline_required), a missing baseline of O(previous) fails instead.
  - A low ratio never fails the task - the caller decides (a rollout fails inside its block on
    RV(passed=false), so its rescue rolls back). Bad input (a run that is not one, an O(at_concurrency) a
    run lacks) does fail it.
  - Runs on the controller as an action plugin and reads and writes only controller files; the plot needs
    matplotlib on the controller (without it RV(png) is null and RV(notes) says so).
author:
  - llmops.vllm maintainers (@llmops)
options:
  results_dir:
    description: Directory of the stored runs, one subdirectory per host (the role's C(benchmark_results_dir)).
    type: path
    required: true
  run:
    description:
      - The run being judged - the C(benchmark_result) fact the C(llmops.vllm.benchmark) role sets, or the
        path of a stored run.
      - That run itself is never taken as the previous run, also when O(previous) names the same model (a
        new revision rolled out under the same name).
    type: raw
    required: true
  host:
    description: The host whose runs are compared (the subdirectory of O(results_dir)).
    type: str
    default: the task's C(inventory_hostname)
  previous:
    description:
      - Name of the model served before (the caller knows it, e.g. the C(current) of the host's state file);
        the newest run stored under that name on O(host) is the baseline.
      - Omitted or empty - a report of the new run only, passed.
    type: str
  at_concurrency:
    description:
      - Concurrency level the ratio is taken at; both runs must have it.
      - Omitted - the highest level both runs have.
    type: int
  min_ratio:
    description:
      - Smallest acceptable RV(ratio), e.g. V(0.9) allows 10% less throughput than the previous model,
        V(1.0) asks for at least as much. Omitted - report only, RV(passed) is true.
    type: float
  plan:
    description:
      - The serving plan of the new model (the result of M(llmops.vllm.serving_plan)); its layout, parsers
        and C(reasons) go into the report. Omitted - the run's own C(plan), if any.
    type: dict
  rollout_report:
    description: The rollout's report (C(rollout_report) of the rollout role); its status and C(timings) go into the report.
    type: dict
  report_dir:
    description: Where the report files go. Default C(<results_dir>/<host>/reports).
    type: path
  plot:
    description: Draw the PNG plot (matplotlib, Agg backend).
    type: bool
    default: true
  max_baseline_age:
    description:
      - Seconds. The newest run of O(previous) is the baseline only when it finished at most this long ago (and
        ran the new run's workload - input and output lengths, prompts, extra arguments - which is always
        required). Omitted - any age.
    type: float
  baseline_required:
    description:
      - Without a baseline of O(previous) (none stored, too old, another workload) RV(passed) is false instead
        of true, and RV(notes) says why. The rollout sets it unless C(rollout_benchmark_allow_no_baseline).
    type: bool
    default: false
attributes:
  check_mode:
    description: Runs in check mode too and writes the report; it only reads stored runs and writes report files on the controller.
    support: full
  diff_mode:
    description: Will return details on what has changed in diff mode.
    support: none
  action:
    description: Indicates this has a corresponding action plugin so some parts of the options can be executed on the controller.
    support: full
seealso:
  - module: llmops.vllm.vllm_ready
'''

EXAMPLES = r'''
- name: Measure the new model
  ansible.builtin.include_role:
    name: llmops.vllm.benchmark
  vars:
    benchmark_url: http://10.0.0.5:8000
    benchmark_served_model_name: minimax-m2.5
    benchmark_model_path: /var/lib/llmops-vllm/models/MiniMaxAI/MiniMax-M2.5/5bd8b0e1
    benchmark_meta: {name: minimax-m2-5, repo_id: MiniMaxAI/MiniMax-M2.5, commit: 5bd8b0e1}

- name: Compare with the model it replaced and write the report
  llmops.vllm.benchmark_report:
    results_dir: "{{ playbook_dir }}/reports/benchmarks"
    run: "{{ benchmark_result }}"
    previous: kimi-k2-5
    min_ratio: 1.5
    plan: "{{ preflight_plan }}"
  register: benchmark_report

- name: Gate the rollout (inside its block, so the rescue rolls back)
  ansible.builtin.assert:
    that: benchmark_report.passed
    fail_msg: "{{ benchmark_report.summary }} - see {{ benchmark_report.markdown }}"

- name: Report of a run stored earlier, at a chosen level
  llmops.vllm.benchmark_report:
    results_dir: reports/benchmarks
    host: gpu-1
    run: reports/benchmarks/gpu-1/20260301T101500Z-minimax-m2-5.json
    previous: kimi-k2-5
    at_concurrency: 32
'''

RETURN = r'''
ratio:
  description: New / previous output tokens per second at RV(at_concurrency); null when nothing could be compared.
  returned: always
  type: float
  sample: 3.23
passed:
  description: RV(ratio) >= O(min_ratio) when both are known, else true.
  returned: always
  type: bool
  sample: true
at_concurrency:
  description: The level the ratio was taken at; null when nothing could be compared.
  returned: always
  type: int
  sample: 128
min_ratio:
  description: The O(min_ratio) applied, or null.
  returned: always
  type: float
  sample: 1.5
summary:
  description: One line with both throughputs, the ratio and the verdict.
  returned: always
  type: str
  sample: "minimax-m2-5 vs kimi-k2-5 on gpu-1: 4,003.2 vs 1,239.0 output tok/s at concurrency 128, ratio 3.231 >= 1.5: passed"
notes:
  description: Why there is no ratio, failed requests of the new run, a missing plot.
  returned: always
  type: list
  elements: str
  sample: ["no previous run of kimi-k2-5 on gpu-1 in reports/benchmarks/gpu-1: passed without a ratio"]
markdown:
  description: Path of the Markdown report.
  returned: always
  type: str
  sample: reports/benchmarks/gpu-1/reports/20260301T101900Z-kimi-k2-5-to-minimax-m2-5.md
png:
  description: Path of the PNG plot; null when O(plot=false) or matplotlib is missing.
  returned: always
  type: str
  sample: reports/benchmarks/gpu-1/reports/20260301T101900Z-kimi-k2-5-to-minimax-m2-5.png
json:
  description: Path of the JSON report (this result plus both runs, the plan and the rollout report).
  returned: always
  type: str
  sample: reports/benchmarks/gpu-1/reports/20260301T101900Z-kimi-k2-5-to-minimax-m2-5.json
new_run:
  description: Path of the run judged (null when it was given as a document without one).
  returned: always
  type: str
previous_run:
  description: Path of the previous model's run used as the baseline; null when none was found.
  returned: always
  type: str
  sample: reports/benchmarks/gpu-1/20260214T080000Z-kimi-k2-5.json
rows:
  description: Per concurrency level of either run, the previous and new level (null where a run lacks it) and their ratio.
  returned: always
  type: list
  elements: dict
  contains:
    concurrency:
      description: Concurrent requests.
      type: int
    ratio:
      description: New / previous output tok/s at this level.
      type: float
    new:
      description:
        - The new run's level under the keys of C(vllm bench serve) - C(output_throughput) (tok/s),
          C(request_throughput), C(p50_ttft_ms), C(p99_ttft_ms), C(p50_tpot_ms), C(p99_tpot_ms), C(completed),
          C(failed), C(total_output_tokens), ...
      type: dict
    old:
      description: The previous run's level, same keys.
      type: dict
skipped_files:
  description: JSON files in the host's results directory that are not runs, with the reason.
  returned: always
  type: list
  elements: str
kind:
  description: C(llmops.vllm.benchmark_report), the kind of the JSON document.
  returned: always
  type: str
  sample: llmops.vllm.benchmark_report
schema:
  description: Version of the report's JSON schema.
  returned: always
  type: int
  sample: 1
host:
  description: The host the runs belong to (O(host), default the inventory hostname).
  returned: always
  type: str
  sample: gpu-1
generated:
  description: When the report was written (UTC, ISO 8601).
  returned: always
  type: str
  sample: "2026-03-01T10:19:00+00:00"
new_name:
  description: Name of the model of the new run.
  returned: always
  type: str
  sample: minimax-m2-5
previous_name:
  description: The O(previous) model name, or null.
  returned: always
  type: str
  sample: kimi-k2-5
'''
