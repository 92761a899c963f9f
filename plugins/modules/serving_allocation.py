#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
---
module: serving_allocation
short_description: Share one host among several models - disjoint GPU sets, or the RAM of a CPU host (controller side)
version_added: 0.2.0
description:
  - Plans every model of one host together, as C(llmops-vllm plan --model A --model B) does, with the
    same keys - pinned GPUs kept, models in service kept where they still fit (RV(models) says so), the
    others largest first on one NUMA node each, a model alone on its node grown to the node when its
    objective gains. Each set is then planned by the single-model planner (M(llmops.vllm.serving_plan)).
  - On a CPU host the models share the RAM; the sum of their weights, KV space and runtime must fit.
  - The rollout of C(vllm_models) runs it before each model's own plan, and pins that model's plan to
    the GPUs it allocates.
  - Runs on the controller as an action plugin; it touches no host and never reports a change.
author:
  - llmops.vllm maintainers (@llmops)
options:
  topology:
    description:
      - Host facts as M(llmops.vllm.gpu_topology_info) returns them.
    type: dict
    required: true
  vllm:
    description:
      - Facts of the host's installed vLLM, as for M(llmops.vllm.serving_plan).
    type: dict
  models:
    description:
      - The host's models as the desired state lists them (C(vllm_models) documents, validated by
        M(llmops.vllm.desired_state)), in that order - each one's C(plan) pins (a C(gpus) pin is kept),
        with its C(repo_id) and C(port). Other keys are ignored.
    type: list
    elements: dict
    required: true
  model_facts:
    description:
      - Each model's facts as M(llmops.vllm.model_info) returns them, by the model's C(name).
    type: dict
    required: true
  current:
    description:
      - The models in service - name to the GPU indices they hold (the host state's C(plan.gpu_indices)).
        They keep those GPUs while their plan still fits there.
    type: dict
    default: {}
  fail_on_no_fit:
    description:
      - Fail the task when the models do not all fit; the result still holds the whole allocation.
    type: bool
    default: true
attributes:
  check_mode:
    description: Can run in check mode and return the same allocation.
    support: full
    details: Pure computation on the controller.
  diff_mode:
    description: Will return details on what has changed in diff mode.
    support: none
  action:
    description: Indicates this has a corresponding action plugin so some parts of the options can be executed on the controller.
    support: full
seealso:
  - module: llmops.vllm.serving_plan
'''

EXAMPLES = r'''
- name: Share the host between MiniMax-M2.5 and Qwen3-30B-A3B
  llmops.vllm.serving_allocation:
    topology: "{{ topology }}"
    models:
      - {name: minimax-m2-5, repo_id: MiniMaxAI/MiniMax-M2.5, port: 8000, plan: {objective: latency}}
      - {name: qwen3-30b, repo_id: Qwen/Qwen3-30B-A3B-FP8, port: 8001}
    model_facts: {minimax-m2-5: "{{ minimax_facts }}", qwen3-30b: "{{ qwen_facts }}"}
    current: {minimax-m2-5: [0, 1, 2, 3]}
  register: allocation

- name: Plan one of them on its share
  llmops.vllm.serving_plan:
    topology: "{{ topology }}"
    model: "{{ qwen_facts }}"
    request:
      model_id: Qwen/Qwen3-30B-A3B-FP8
      gpus: "{{ (allocation.models | selectattr('name', 'eq', 'qwen3-30b') | first).gpus }}"
'''

RETURN = r'''
models:
  description:
    - One entry per model, in the order given - the single-model plan (C(fits),
      C(layout), C(argv) and the rest) plus C(name) and C(gpus) (the GPU indices allocated; empty on a CPU
      host), and C(ram_bytes) on a CPU host. A model that found no room has only C(name), C(gpus), C(fits)
      false and C(error).
  returned: always
  type: list
  elements: dict
  sample: [{"name": "minimax-m2-5", "gpus": [0, 1, 2, 3], "fits": true, "layout": "TP=4"}]
fits:
  description: Whether every model fits.
  returned: always
  type: bool
  sample: true
error:
  description: Which models do not fit and what they would need, or null.
  returned: always
  type: str
device:
  description: C(cuda) or C(cpu).
  returned: always
  type: str
  sample: cuda
free_gpus:
  description: GPU indices no model was given.
  returned: always
  type: list
  elements: int
  sample: []
reasons:
  description: One line per decision - which model went where and why.
  returned: always
  type: list
  elements: str
ram_used_bytes:
  description: On a CPU host, the RAM the models together need.
  returned: when the host has no GPU
  type: int
ram_budget_bytes:
  description: On a CPU host, the RAM they may use (a fraction of the host's).
  returned: when the host has no GPU
  type: int
'''
