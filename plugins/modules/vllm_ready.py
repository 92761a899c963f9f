#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
---
module: vllm_ready
short_description: Wait until a vLLM server really serves a model (the rollout's readiness gate)
version_added: 0.1.0
description:
  - Waits, stage after stage, until C(/health) answers, C(/v1/models) lists the served model name,
    a real completion comes back, a chat completion comes back when the model has a chat template,
    and a request with tools is accepted when a tool-call parser is configured.
  - Then, with O(parser_probes=auto), it proves the configured parsers run (stages C(tool_parser) and
    C(reasoning_parser)). Tools - a chat request with C(tool_choice=auto) whose output a structured-output
    regex forces into the format the model writes (from its chat template in O(model_path), e.g.
    C(<tool_call>{...}</tool_call>); else the parser's own) must come back as parsed C(tool_calls) with valid
    JSON arguments. A named or C(required) tool_choice would be answered without the parser, so it proves
    nothing. Reasoning - for a think-tag parser (C(qwen3), C(deepseek_r1)) and a template that writes
    C(<think>), the model's own answer must come back with a non-empty reasoning and no think tags in the
    content (vLLM does not apply structured outputs inside the think block, so this output is not forced).
    A valid but wrong parser fails here at once (no waiting for the timeout). What is not probed, and why,
    is in RV(parser_probe_notes).
  - Returns the seconds from the start to each stage that passed.
  - When O(unit) is given, a unit that fails or restarts while waiting ends the wait at once (a
    model vLLM cannot load does not wait for the timeout), and a failure carries the unit's recent
    journal lines.
  - With O(progress_file), it describes itself after every attempt, so a task that polls the file can
    show what it waits for while the module runs with C(async) (the serve role prints one line per poll).
  - Read-only; never reports a change. Runs on the host that serves (it talks to O(url) from there).
author:
  - llmops.vllm maintainers (@llmops)
options:
  url:
    description: Base URL of the server, e.g. C(http://10.0.0.5:8000).
    type: str
    required: true
  served_model_name:
    description: The name the server must list in C(/v1/models) and answer to.
    type: str
    required: true
  api_key:
    description: Bearer token when the server was started with an API key.
    type: str
  api_key_file:
    description:
      - An EnvironmentFile on the host whose C(VLLM_API_KEY) is the bearer token, when O(api_key) is not given
        (a unit M(llmops.vllm.vllm_takeover) wrote keeps the key of the server it took over there).
      - A missing file, or one without C(VLLM_API_KEY), means no token.
    type: path
  timeout:
    description: Seconds to wait for all stages together. Size it for the model's load time.
    type: float
    default: 600
  interval:
    description: Seconds between attempts.
    type: float
    default: 2
  chat:
    description:
      - Check a chat completion. V(auto) does when O(model_path) has a chat template.
    type: str
    choices: [auto, always, never]
    default: auto
  tools:
    description:
      - Check that a chat request with tools is accepted. V(auto) does when O(tool_call_parser) is set.
    type: str
    choices: [auto, always, never]
    default: auto
  tool_call_parser:
    description: The tool-call parser the server was started with (for O(tools=auto) and the C(tool_parser) probe).
    type: str
  reasoning_parser:
    description: The reasoning parser the server was started with (for the C(reasoning_parser) probe).
    type: str
  parser_probes:
    description:
      - V(auto) adds the C(tool_parser) probe when O(tool_call_parser) is given and the model's format
        (C(hermes), C(llama3_json) or C(pythonic), from the chat template, else the parser's) is known, and the
        C(reasoning_parser) probe for C(qwen3) or C(deepseek_r1) when the template writes C(<think>).
        V(never) skips them (e.g. for a vLLM without structured outputs).
      - The probes send C(structured_outputs) and C(chat_template_kwargs) (vLLM 0.11 and later).
    type: str
    choices: [auto, never]
    default: auto
  model_path:
    description: The model directory on this host (for O(chat=auto)).
    type: path
  unit:
    description: The systemd unit serving the model; watched while waiting and quoted on failure.
    type: str
  journal_lines:
    description: Journal lines of O(unit) to return on failure.
    type: int
    default: 40
  prompt:
    description: Prompt of the probe requests.
    type: str
    default: Hello
  max_tokens:
    description: Tokens to generate in each probe request.
    type: int
    default: 8
  progress_file:
    description:
      - A JSON file the module rewrites (mode 0600, write-then-rename, so a reader never sees half of it)
        once before the first attempt and after every attempt, and leaves behind; its directory must exist.
      - 'Keys: C(phase) (V(waiting), then V(ready) or V(failed)), C(stage), C(stages), C(waiting_for)
        (what the stage waits for, null once ready), C(elapsed) (seconds since the start), C(attempts),
        C(last) (the last answer or error, e.g. C(/health answered 503: ...)), C(unit_state) (its
        ActiveState and SubState, e.g. "activating (start)", when O(unit) is given), C(updated) (epoch seconds) and C(summary) (all
        of it as one line).'
      - A file that cannot be written is skipped silently; it never fails the gate.
    type: path
attributes:
  check_mode:
    description: Can run in check mode; it only reads (O(progress_file), when given, is written in check mode too).
    support: full
  diff_mode:
    description: Will return details on what has changed in diff mode.
    support: none
seealso:
  - module: llmops.vllm.serving_plan
'''

EXAMPLES = r'''
- name: Gate the new model
  llmops.vllm.vllm_ready:
    url: http://10.0.0.5:8000
    served_model_name: minimax-m2.5
    unit: vllm-minimax-m2-5.service
    model_path: /var/lib/llmops-vllm/models/MiniMaxAI/MiniMax-M2.5/5bd8b0e1
    tool_call_parser: minimax_m2
    timeout: 1800
  register: ready

- name: Gate in the background and watch its progress file meanwhile (see roles/serve/tasks/gate.yml)
  llmops.vllm.vllm_ready:
    url: http://10.0.0.5:8000
    served_model_name: minimax-m2.5
    unit: vllm-minimax-m2-5.service
    timeout: 1800
    progress_file: /var/lib/llmops-vllm/minimax-m2-5.ready-progress.json
  async: 1920
  poll: 0
  register: ready_job
'''

RETURN = r'''
stages:
  description: The stages checked, in order.
  returned: always
  type: list
  elements: str
  sample: [health, models, completion, chat, tools]
timings:
  description: Seconds from the start of the wait to the moment each stage passed.
  returned: always
  type: dict
  sample: {"health": 24.1, "models": 24.1, "completion": 24.4, "chat": 24.6, "tools": 24.9}
seconds:
  description: Seconds until every stage passed.
  returned: success
  type: float
  sample: 24.9
completion_text:
  description: What the probe completion generated.
  returned: success
  type: str
stage:
  description: The stage that did not pass.
  returned: failure
  type: str
  sample: health
error:
  description: The last error seen.
  returned: failure
  type: str
journal:
  description: The unit's recent journal lines.
  returned: failure and O(unit) given
  type: list
  elements: str
models:
  description: Model names C(/v1/models) listed (from the C(models) stage).
  returned: when the models stage ran
  type: list
  elements: str
  sample: [minimax-m2-5]
completion_tokens:
  description: Tokens the probe completion generated.
  returned: when the completion stage passed
  type: int
  sample: 8
tool_parser_probe:
  description: What the C(tool_parser) probe forced (the model's format and text) and how many tool calls came back.
  returned: when the tool_parser stage passed
  type: dict
  sample: {"parser": "hermes", "format": "hermes", "output": "<tool_call>...</tool_call>", "tool_calls": 1}
reasoning_parser_probe:
  description: The reasoning and the content the C(reasoning_parser) probe got back.
  returned: when the reasoning_parser stage passed
  type: dict
  sample: {"parser": "qwen3", "reasoning": "Greeting", "content": "Hello."}
parser_probe_notes:
  description: What of the parsers given is not probed, and why.
  returned: always
  type: list
  elements: str
  sample: []
finish_reason:
  description: Finish reason of the probe chat (C(tool_calls) when the tools stage made a call).
  returned: when the chat or tools stage passed
  type: str
  sample: stop
timed_out:
  description: True when the stage did not pass before O(timeout).
  returned: failure by timeout
  type: bool
  sample: true
'''

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.vllm.plugins.module_utils.readiness import (
    ServerGone, has_chat_template, http_json, parser_probes, progress_document, read_chat_template, wait_ready,
    write_progress)
from ansible_collections.llmops.vllm.plugins.module_utils.systemd_unit import read_environment_file


class UnitWatch(object):
    """Raises ServerGone once the unit is failed/inactive or has restarted since the watch began."""

    def __init__(self, module, unit):
        self.module, self.unit = module, unit
        self.systemctl = module.get_bin_path('systemctl', required=True)
        self.first = self.last = self.show()

    def state(self):
        """The unit's state as of the last look, e.g. 'activating (start)'; None when systemctl said nothing."""
        if not self.last.get('ActiveState'):
            return None
        return '%s (%s)' % (self.last['ActiveState'], self.last.get('SubState'))

    def show(self):
        rc, out, err = self.module.run_command(
            [self.systemctl, 'show', '-p', 'ActiveState', '-p', 'SubState', '-p', 'NRestarts', '-p', 'Result',
             '-p', 'MainPID', '-p', 'ExecMainStatus', self.unit])
        props = dict(line.split('=', 1) for line in out.splitlines() if '=' in line)
        return props

    def __call__(self):
        now = self.last = self.show()
        state = now.get('ActiveState')
        # A start queued with --no-block may still read "inactive": only a unit that has been
        # activating or active since the watch began and is inactive again has stopped.
        self.seen_running = getattr(self, 'seen_running', False) or state in ('activating', 'active', 'reloading')
        if state == 'failed' or (state == 'inactive' and self.seen_running):
            raise ServerGone('unit %s is %s (%s, result %s)' % (
                self.unit, now.get('ActiveState'), now.get('SubState'), now.get('Result')))
        if state == 'activating' and now.get('SubState') == 'start-post' and now.get('MainPID') == '0':
            raise ServerGone('unit %s: the server exited while loading (status %s)' % (self.unit, now.get('ExecMainStatus')))
        if int(now.get('NRestarts') or 0) > int(self.first.get('NRestarts') or 0):
            raise ServerGone('unit %s restarted (%s restarts) while loading: the server exited'
                             % (self.unit, now.get('NRestarts')))


def journal(module, unit, lines):
    journalctl = module.get_bin_path('journalctl')
    if not journalctl:
        return []
    rc, out, err = module.run_command([journalctl, '-u', unit, '-n', str(lines), '--no-pager', '-o', 'cat'])
    return out.splitlines()[-lines:]


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type='str', required=True),
            served_model_name=dict(type='str', required=True),
            api_key=dict(type='str', no_log=True),
            api_key_file=dict(type='path'),
            timeout=dict(type='float', default=600),
            interval=dict(type='float', default=2),
            chat=dict(type='str', choices=['auto', 'always', 'never'], default='auto'),
            tools=dict(type='str', choices=['auto', 'always', 'never'], default='auto'),
            tool_call_parser=dict(type='str'),
            reasoning_parser=dict(type='str'),
            parser_probes=dict(type='str', choices=['auto', 'never'], default='auto'),
            model_path=dict(type='path'),
            unit=dict(type='str'),
            journal_lines=dict(type='int', default=40),
            prompt=dict(type='str', default='Hello'),
            max_tokens=dict(type='int', default=8, no_log=False),
            progress_file=dict(type='path'),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not p['api_key'] and p['api_key_file'] and os.path.isfile(p['api_key_file']):
        with open(p['api_key_file']) as handle:
            p['api_key'] = read_environment_file(handle.read()).get('VLLM_API_KEY') or None
    stages = ['health', 'models', 'completion']
    chat = p['chat'] == 'always' or (p['chat'] == 'auto' and has_chat_template(p['model_path']))
    if chat:
        stages.append('chat')
    if p['tools'] == 'always' or (p['tools'] == 'auto' and p['tool_call_parser']):
        stages.append('tools')
    probe_notes, tool_format = [], None
    if p['parser_probes'] == 'auto':
        probe_stages, tool_format, probe_notes = parser_probes(p['tool_call_parser'], p['reasoning_parser'],
                                                               read_chat_template(p['model_path']))
        stages += probe_stages
    watch = UnitWatch(module, p['unit']) if p['unit'] else None

    def http(url, payload, api_key):
        return http_json(url, payload, api_key, timeout=max(30.0, p['interval']))

    def report(phase, stage, attempts, elapsed, last):
        write_progress(p['progress_file'], progress_document(
            phase, stage, stages, p['served_model_name'], elapsed, attempts, last,
            unit_state=watch.state() if watch else None))

    passed, result = wait_ready(p['url'], p['served_model_name'], stages, http, timeout=p['timeout'],
                                interval=p['interval'], api_key=p['api_key'], prompt=p['prompt'],
                                max_tokens=p['max_tokens'], unit_alive=watch,
                                report=report if p['progress_file'] else None,
                                tool_call_parser=p['tool_call_parser'], tool_format=tool_format,
                                reasoning_parser=p['reasoning_parser'])
    result['stages'] = stages
    result['parser_probe_notes'] = probe_notes
    if passed:
        module.exit_json(changed=False, **result)
    if p['unit']:
        result['journal'] = journal(module, p['unit'], p['journal_lines'])
    module.fail_json(msg='%s is not ready: %s' % (p['url'], result['error']), changed=False, **result)


if __name__ == '__main__':
    main()
