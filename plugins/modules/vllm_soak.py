#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
---
module: vllm_soak
short_description: Soak a canary vLLM server under real traffic and judge it against a baseline server
version_added: 0.1.0
description:
  - The canary check of a fleet rollout. Scrapes C(/metrics) of the canary (O(url)) and of a baseline
    server still serving the old model (O(baseline_url)), waits O(seconds), scrapes both again, and
    judges what each served in between.
  - Counted are the inference requests (C(http_requests_total) of the handlers C(/v1/completions),
    C(/v1/chat/completions), C(/v1/responses) and C(/v1/embeddings); an error is a status other than
    C(2xx)) and the window's time-to-first-token p99, interpolated from the buckets of the
    C(vllm:time_to_first_token_seconds) histogram the way Prometheus' C(histogram_quantile) does it.
  - Fails, naming each problem and both URLs, when the canary served fewer than O(min_requests) requests,
    its error rate is above O(max_error_rate), its TTFT p99 is above O(max_ttft_p99_s), or above
    O(max_ttft_p99_ratio) times the baseline's (judged only when both windows have a p99).
  - A baseline that cannot be scraped, or a server that restarted during the window (a counter went
    down, or its process start time changed), is a problem too, never a crash.
  - The traffic comes from the clients behind the load balancer; this module sends none.
  - Read-only; never reports a change. Runs anywhere both servers' C(/metrics) can be reached from.
author:
  - llmops.vllm maintainers (@llmops)
options:
  url:
    description: Base URL of the canary server, e.g. C(http://10.0.0.5:8000); C(/metrics) is appended.
    type: str
    required: true
  baseline_url:
    description:
      - Base URL of a server that still serves the old model, e.g. C(http://10.0.0.6:8000).
      - Without it, the canary is judged on its own (no TTFT ratio).
    type: str
  seconds:
    description: Length of the window, in seconds, between the two scrapes.
    type: float
    default: 60
  min_requests:
    description: Inference requests the canary must serve in the window; fewer means too little traffic to judge it.
    type: int
    default: 1
  max_error_rate:
    description: Highest share of the canary's inference requests that may answer other than C(2xx), from 0 to 1.
    type: float
    default: 0.01
  max_ttft_p99_ratio:
    description: Highest canary TTFT p99 as a multiple of the baseline's over the same window.
    type: float
    default: 2.0
  max_ttft_p99_s:
    description: Highest canary TTFT p99 in seconds; not judged when not given.
    type: float
  timeout:
    description: Seconds each scrape may take.
    type: float
    default: 10
attributes:
  check_mode:
    description: In check mode the soak is not run (no scrapes, no waiting); the result is skipped.
    support: full
  diff_mode:
    description: Will return details on what has changed in diff mode.
    support: none
seealso:
  - module: llmops.vllm.vllm_ready
'''

EXAMPLES = r'''
- name: Soak the canary for 5 minutes against a host that still serves the old model
  llmops.vllm.vllm_soak:
    url: http://10.0.0.5:8000
    baseline_url: http://10.0.0.6:8000
    seconds: 300
    min_requests: 50
    max_error_rate: 0.005
    max_ttft_p99_ratio: 1.5
    max_ttft_p99_s: 2.0
  register: soak

- name: Show the canary's window
  ansible.builtin.debug:
    msg: "{{ soak.canary.requests }} requests, TTFT p99 {{ soak.canary.ttft_p99_s }} s"
'''

RETURN = r'''
seconds:
  description: Seconds between the first and the second scrape of the canary (the window actually measured); null when
    the canary could not be scraped at the end.
  returned: when the soak ran
  type: float
  sample: 60.02
canary:
  description: What the canary served in the window; null when it could not be scraped at the end or restarted (see RV(problems)).
  returned: when the soak ran
  type: dict
  contains:
    requests:
      description: Inference requests answered in the window.
      type: int
      sample: 412
    errors:
      description: Of those, the answers other than C(2xx).
      type: int
      sample: 1
    error_rate:
      description: RV(canary.errors) / RV(canary.requests); null without requests.
      type: float
      sample: 0.0024
    ttft_p99_s:
      description: Time-to-first-token p99 of the window in seconds; null without TTFT observations.
      type: float
      sample: 0.84
    ttft_count:
      description: Time-to-first-token observations in the window.
      type: int
      sample: 411
baseline:
  description:
    - What the baseline served in the same window, with the keys of RV(canary).
    - Null without O(baseline_url), or when it could not be scraped or restarted (see RV(problems)).
  returned: when the soak ran
  type: dict
  contains:
    requests:
      description: Inference requests answered in the window.
      type: int
      sample: 398
    errors:
      description: Of those, the answers other than C(2xx).
      type: int
      sample: 0
    error_rate:
      description: RV(baseline.errors) / RV(baseline.requests); null without requests.
      type: float
      sample: 0.0
    ttft_p99_s:
      description: Time-to-first-token p99 of the window in seconds; null without TTFT observations.
      type: float
      sample: 0.27
    ttft_count:
      description: Time-to-first-token observations in the window.
      type: int
      sample: 398
problems:
  description: Why the canary failed the soak, each with what was measured and the threshold; empty when it passed.
  returned: when the soak ran
  type: list
  elements: str
  sample: ["canary TTFT p99 0.84 s is 3.1 times the baseline's 0.27 s (max 2.0)"]
'''

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.vllm.plugins.module_utils.readiness import NotReady, http_json
from ansible_collections.llmops.vllm.plugins.module_utils.vllm_metrics import parse, verdict, window


class ScrapeFailed(Exception):
    """A server's /metrics could not be read or parsed."""


def scrape(base_url, timeout):
    url = base_url.rstrip('/') + '/metrics'
    try:
        status, body = http_json(url, timeout=timeout)
    except NotReady as exc:
        raise ScrapeFailed(str(exc))
    if status != 200 or not isinstance(body, str):
        raise ScrapeFailed('%s answered %s: %s' % (url, status, str(body)[:300]))
    try:
        return parse(body)
    except ValueError as exc:
        raise ScrapeFailed('%s: %s' % (url, exc))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type='str', required=True),
            baseline_url=dict(type='str'),
            seconds=dict(type='float', default=60),
            min_requests=dict(type='int', default=1),
            max_error_rate=dict(type='float', default=0.01),
            max_ttft_p99_ratio=dict(type='float', default=2.0),
            max_ttft_p99_s=dict(type='float'),
            timeout=dict(type='float', default=10),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p['seconds'] < 0:
        module.fail_json(msg='seconds is %s: the soak window must be 0 or more seconds' % p['seconds'])
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, msg='soak not run in check mode')
    servers = 'canary %s, baseline %s' % (p['url'], p['baseline_url'] or '(none)')

    problems = []
    baseline_before = None
    try:
        canary_before = scrape(p['url'], p['timeout'])
    except ScrapeFailed as exc:
        module.fail_json(msg='soak not started: the canary /metrics could not be scraped: %s (%s)' % (exc, servers),
                         changed=False)
    started = time.time()
    seconds = None
    if p['baseline_url']:
        try:
            baseline_before = scrape(p['baseline_url'], p['timeout'])
        except ScrapeFailed as exc:
            problems.append('baseline /metrics could not be scraped at the start: %s' % exc)
    time.sleep(p['seconds'])

    canary = baseline = None
    try:
        canary_after = scrape(p['url'], p['timeout'])
        seconds = round(time.time() - started, 3)
        canary = window(canary_before, canary_after)
    except ScrapeFailed as exc:
        problems.append('canary /metrics could not be scraped at the end: %s' % exc)
    except ValueError as exc:
        problems.append('canary: %s' % exc)
    if baseline_before is not None:
        try:
            baseline = window(baseline_before, scrape(p['baseline_url'], p['timeout']))
        except ScrapeFailed as exc:
            problems.append('baseline /metrics could not be scraped at the end: %s' % exc)
        except ValueError as exc:
            problems.append('baseline: %s' % exc)
    if canary is not None:
        problems += verdict(canary, baseline, p['max_error_rate'], p['max_ttft_p99_ratio'], p['max_ttft_p99_s'],
                            p['min_requests'])

    result = dict(changed=False, seconds=seconds, canary=canary, baseline=baseline, problems=problems)
    if problems:
        module.fail_json(msg='canary failed the %g s soak (%s): %s' % (p['seconds'], servers, '; '.join(problems)),
                         **result)
    module.exit_json(msg='canary passed the %g s soak (%s)' % (p['seconds'], servers), **result)


if __name__ == '__main__':
    main()
