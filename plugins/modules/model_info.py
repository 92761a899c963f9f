#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
---
module: model_info
short_description: Facts about a Hugging Face model from its config, without loading weights
version_added: 0.1.0
description:
  - Reads C(config.json) (through multimodal wrappers such as C(text_config)), ModelOpt's
    C(hf_quant_config.json) and C(model.safetensors.index.json) of a model directory on the target
    and returns what the serving planner needs - attention kind, KV-cache bytes per token, MoE shape,
    quantization, MTP layers and the size of the weights.
  - When no safetensors index or weight files are present the size is estimated from the config and
    RV(weights_bytes_estimated) is true.
  - Read-only. It never reports a change.
author:
  - llmops.vllm maintainers (@llmops)
options:
  path:
    description:
      - A model directory holding C(config.json), or the path of a C(config.json) file.
      - Only a file really named C(config.json) is read together with its neighbours
        (C(hf_quant_config.json), C(model.safetensors.index.json), C(*.safetensors)).
    type: path
    required: true
attributes:
  check_mode:
    description: Can run in check mode and return the same facts.
    support: full
    details: The module only reads files.
  diff_mode:
    description: Will return details on what has changed in diff mode.
    support: none
notes:
  - Python standard library only; runs with any target interpreter.
seealso:
  - module: llmops.vllm.gpu_topology_info
  - module: llmops.vllm.serving_plan
'''

EXAMPLES = r'''
- name: Read the new model's config once its files are on the host
  llmops.vllm.model_info:
    path: /srv/models/MiniMaxAI/MiniMax-M2.5/5bd8b0e1c0fd0b8b4ab8f52d6e1c2a9e4e2b6c1d
  register: model

- name: Show the KV-cache cost per token
  ansible.builtin.debug:
    msg: "{{ model.attention }}: {{ model.kv_cache_bytes_per_token }} bytes per token"
'''

RETURN = r'''
architecture:
  description: The first entry of C(architectures).
  returned: success
  type: str
  sample: MiniMaxM2ForCausalLM
architectures:
  description: C(architectures) of the config, all of them.
  returned: success
  type: list
  elements: str
  sample: [MiniMaxM2ForCausalLM]
model_type:
  description: C(model_type) of the top-level config.
  returned: success
  type: str
  sample: minimax_m2
text_model_type:
  description: C(model_type) of the text model (the C(text_config) of a multimodal wrapper, else the same as RV(model_type)).
  returned: success
  type: str
  sample: minimax_m2
attention:
  description: C(mla) when C(kv_lora_rank) is present, else C(mqa) (one KV head), C(gqa) (fewer KV heads than
    attention heads) or C(mha).
  returned: success
  type: str
  sample: gqa
num_layers:
  description: Decoder layers.
  returned: success
  type: int
  sample: 62
num_attention_heads:
  description: Attention heads.
  returned: success
  type: int
  sample: 48
num_kv_heads:
  description: KV heads.
  returned: success
  type: int
  sample: 8
head_dim:
  description: Head dimension (for MLA, the query/key head dimension nope + rope).
  returned: success
  type: int
  sample: 128
kv_lora_rank:
  description: MLA latent rank (C(kv_lora_rank)); null for other attention kinds.
  returned: success
  type: int
  sample: 512
kv_cache_bytes_per_token:
  description: KV-cache bytes per token for the whole model in bf16, without any tensor-parallel split.
  returned: success
  type: int
  sample: 253952
hidden_size:
  description: Hidden size (used for the activation estimate); null when the config has none.
  returned: success
  type: int
  sample: 3072
vocab_size:
  description: Vocabulary size (used for the logits estimate); null when the config has none.
  returned: success
  type: int
  sample: 200064
moe:
  description: Mixture-of-experts shape, or null for a dense model.
  returned: success
  type: dict
  contains:
    num_experts:
      description: Routed experts per MoE layer.
      type: int
      sample: 256
    experts_per_token:
      description: Experts each token is routed to.
      type: int
      sample: 8
    intermediate_size:
      description: Intermediate size of one expert.
      type: int
      sample: 1536
    shared_expert_intermediate_size:
      description: Intermediate size of the shared expert(s), 0 when there is none.
      type: int
      sample: 0
    moe_layers:
      description: Layers with experts (the rest are dense).
      type: int
      sample: 62
quantization:
  description: Quantization of the checkpoint, or null when it is not quantized.
  returned: success
  type: dict
  contains:
    method:
      description: Lower-case C(quant_method), or the ModelOpt algorithm (C(nvfp4), C(fp8)).
      type: str
      sample: fp8
    format:
      description: Storage format as the config names it.
      type: str
      sample: float8_e4m3fn
    block_size:
      description: First dimension of the weight block, when block-quantized.
      type: int
      sample: 128
    weight_bits:
      description: Bits per quantized weight; null when the config does not say.
      type: int
      sample: 8
    group_size:
      description: Quantization group size; null when not group-quantized.
      type: int
      sample: 16
    kv_cache:
      description: C(fp8) when the checkpoint carries FP8 KV-cache scales, else null.
      type: str
      sample: fp8
    unquantized_groups:
      description: Weight groups the quantization config keeps in 16 bits (C(attention), C(experts), ...).
      type: list
      elements: str
      sample: [attention]
    source:
      description: The file the quantization was read from (C(config.json) or C(hf_quant_config.json)).
      type: str
      sample: config.json
dtype:
  description: C(torch_dtype) of the config (the unquantized parts), C(bfloat16) when absent.
  returned: success
  type: str
  sample: bfloat16
mtp_layers:
  description: Multi-token-prediction layers the config states (C(num_nextn_predict_layers) or C(num_mtp_modules)).
  returned: success
  type: int
  sample: 3
remote_code:
  description: Whether the config has an C(auto_map) (model code shipped with the checkpoint).
  returned: success
  type: bool
  sample: true
remote_code_files:
  description:
    - The checkpoint's Python files that C(--trust-remote-code) would run, from C(auto_map)
      (C(org/repo:path) for a file of another repository). Empty without C(auto_map).
  returned: success
  type: list
  elements: str
  sample: [modeling_deepseek.py, configuration_deepseek.py]
max_position_embeddings:
  description: The model's maximum context.
  returned: success
  type: int
  sample: 196608
parameters_estimated:
  description: Parameter count estimated from the config.
  returned: success
  type: int
  sample: 228700000000
weights_bytes:
  description: Size of the weights in bytes.
  returned: success
  type: int
  sample: 230100000000
weights_bytes_estimated:
  description: True when RV(weights_bytes) is estimated from the config.
  returned: success
  type: bool
  sample: false
weights_source:
  description: Where RV(weights_bytes) came from - C(index) (safetensors index), C(files) (file sizes) or C(estimate).
  returned: success
  type: str
  sample: index
expert_weights_fraction:
  description: Share of the weights in routed experts (estimated from the config); expert parallelism spreads that share.
  returned: success
  type: float
  sample: 0.96
path:
  description: The path that was read (O(path)).
  returned: success
  type: str
  sample: /srv/models/MiniMaxAI/MiniMax-M2.5/main
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.vllm.plugins.module_utils.model_config import ModelConfigError, model_facts


def main():
    module = AnsibleModule(argument_spec=dict(path=dict(type='path', required=True)), supports_check_mode=True)
    try:
        facts = model_facts(module.params['path'])
    except ModelConfigError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **facts)


if __name__ == '__main__':
    main()
