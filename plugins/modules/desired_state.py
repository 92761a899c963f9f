#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
---
module: desired_state
short_description: Validate the models a host should serve (its C(vllm_model) document, or its C(vllm_models) list)
version_added: 0.1.0
description:
  - Checks the whole desired-state document of a host against the schema in
    C(plugins/plugin_utils/desired_state.py) and fails with every problem in one readable message,
    before any task touches the host.
  - Returns the document with its defaults filled in (C(served_model_name), C(unit)), or the list of them.
  - Runs on the controller as an action plugin; never reports a change.
  - The same check runs without hosts as C(llmops-vllm validate --inventory DIR).
author:
  - llmops.vllm maintainers (@llmops)
options:
  model:
    description:
      - The document, usually C("{{ vllm_model }}"). Keys - C(name) (required; the unit is
        C(vllm-<name>.service)), C(repo_id) (required, ORG/NAME), C(revision) (branch, tag or commit;
        default C(main)), C(served_model_name) (default C(name)), C(port) (default 8000), C(bind)
        (default the host's primary address), C(plan) (overrides of planner choices, see
        M(llmops.vllm.serving_plan) O(llmops.vllm.serving_plan#module:request)), C(extra_args) (list),
        C(env) (dict; secrets are refused here, they go through the roles' no_log variables).
      - Give O(model) or O(models).
    type: raw
  models:
    description:
      - Several models on one host, usually C("{{ vllm_models }}") - a list of documents shaped like O(model),
        each validated as one, then across them - no two with one C(name), one C(port), or a GPU in both
        C(plan.gpus) pins.
    type: raw
  variable:
    description: Name of the variable, used in error messages (default C(vllm_model), or C(vllm_models) with O(models)).
    type: str
attributes:
  check_mode:
    description: Can run in check mode and return the same result.
    support: full
  diff_mode:
    description: Will return details on what has changed in diff mode.
    support: none
  action:
    description: Indicates this has a corresponding action plugin so some parts of the options can be executed on the controller.
    support: full
'''

EXAMPLES = r'''
- name: Validate before anything runs
  llmops.vllm.desired_state:
    model: "{{ vllm_model }}"
  register: desired

- name: Several models on one host
  llmops.vllm.desired_state:
    models: "{{ vllm_models }}"
  register: desired_set
'''

RETURN = r'''
model:
  description: The validated document with defaults filled in.
  returned: success, with O(model)
  type: dict
  sample: {"name": "minimax-m2-5", "repo_id": "MiniMaxAI/MiniMax-M2.5", "revision": "main",
           "served_model_name": "minimax-m2-5", "port": 8000, "bind": null, "plan": {}, "extra_args": [],
           "env": {}, "unit": "vllm-minimax-m2-5.service"}
models:
  description: With O(models), each validated document with its defaults filled in, in the order given.
  returned: success, with O(models)
  type: list
  elements: dict
  sample: [{"name": "tiny-llama", "repo_id": "llmops-test/tiny-llama-chat", "port": 8000, "unit": "vllm-tiny-llama.service"}]
check_mode:
  description: The effective check mode of the task (C(--check), or a play with C(check_mode)), for the roles to read.
  returned: always
  type: bool
  sample: false
'''
