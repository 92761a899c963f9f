#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
---
module: serving_plan
short_description: Plan how vLLM should serve a model on a host (controller side)
version_added: 0.1.0
description:
  - Turns the facts of M(llmops.vllm.gpu_topology_info), M(llmops.vllm.model_info) and (optionally)
    the installed vLLM into a serving plan - tensor/data/expert parallel sizes, which GPUs, which NUMA
    node, context length, KV-cache room, tool-call and reasoning parsers, and the exact C(vllm serve)
    argv and environment.
  - Every decision is explained in RV(reasons); every automatic choice can be pinned through O(request).
  - Runs on the controller as an action plugin; it touches no host and never reports a change.
  - The same planner backs the C(llmops-vllm plan) command, with the same keys.
author:
  - llmops.vllm maintainers (@llmops)
options:
  topology:
    description:
      - Host facts as M(llmops.vllm.gpu_topology_info) returns them (the registered result can be passed as is).
    type: dict
    required: true
  model:
    description:
      - Model facts as M(llmops.vllm.model_info) returns them.
    type: dict
    required: true
  vllm:
    description:
      - Facts of the host's installed vLLM (parsers, architectures, flags, defaults).
      - When omitted, the recorded facts of the current vLLM release are used and RV(plan_warnings) says so.
    type: dict
  request:
    description:
      - Overrides of the planner's choices. Keys (all optional) - C(model_id), C(model_path),
        C(served_model_name), C(host), C(port), C(device) (auto, cuda, cpu), C(max_model_len),
        C(tensor_parallel_size), C(nodes) (the size of a multi-node serving group, with O(group)), C(data_parallel_size), C(enable_expert_parallel),
        C(gpu_memory_utilization), C(kv_cache_dtype), C(gpus) (list of nvidia-smi indices),
        C(gpu_memory_bytes), C(min_sequences) (KV target, default 4), C(weights_bytes),
        C(tool_call_parser), C(reasoning_parser) (a name, or C(none)), C(speculative_config)
        (auto, off, or a dict), C(numa_bind) (auto, vllm, numactl, off), C(objective) (throughput, the
        default, takes the layout with the most predicted output tok/s; latency the most single-stream
        tok/s), C(concurrency), C(input_len), C(output_len) and C(speculative_acceptance) (the load the
        predicted figures are for; see RV(performance)), C(enforce_eager),
        C(trust_remote_code), C(max_num_batched_tokens), C(max_num_seqs), C(cpu_kv_cache_space_gib),
        C(cpu_threads_bind) (CPU hosts - V(auto), vLLM's own binding; V(nobind); or core lists such as C(0-31)),
        C(extra_args) (list), C(env) (dict).
      - Unknown keys are an error, so a typo cannot silently drop an override.
    type: dict
    default: {}
  fail_on_no_fit:
    description:
      - Fail the task when the model does not fit; the failed result then holds only RV(fits), RV(layout)
        and RV(error) (what is missing and the nearest option that would fit), not the whole plan.
      - With C(false) the whole plan is returned with RV(fits=false) and RV(error).
    type: bool
    default: true
  swap:
    description:
      - Also decide how the model replaces the one serving now (plugin_utils/planner_swap.py, docs/rollout.md
        "Blue/green") - C(bluegreen) (it starts beside O(current), which keeps serving until it passed) or
        C(stop-start) - in RV(swap), with RV(swap_why).
      - C(auto) lets the planner decide - blue/green when the model fits beside O(current) (its GPUs
        reserved; on a CPU host, the RAM its unit uses), stop-start otherwise or when the two share a name.
      - C(bluegreen) forces it - the task fails, before anything stops, when the model does not fit beside
        O(current). C(stop-start) forces stop-start.
      - The plan returned is the chosen strategy's - beside O(current) for blue/green, on the whole host otherwise.
      - Omitted - no decision, the plan on the whole host.
    type: str
    choices: [auto, bluegreen, stop-start]
  name:
    description: With O(swap) - the model's name (its unit's); the same name as O(current) is a restart of one unit.
    type: str
    default: ''
  current:
    description:
      - With O(swap) - what serves now - C(name), C(gpu_indices) (the GPUs it holds) and, on a CPU host,
        C(memory_bytes) (the RAM its unit uses, e.g. systemd's MemoryCurrent). Empty - nothing serves.
    type: dict
    default: {}
  group:
    description:
      - A multi-node serving group (plugin_utils/planner_nodes.py, docs/planner.md) - the plan of the whole
        group, seen from one of its hosts - its node's C(argv), C(env) and C(gpu_indices) at the top,
        RV(nodes) listing every node (rank, role head or worker).
      - O(topology) is then ignored; the head's facts are the first of O(group.topologies).
      - A host the group's plan does not need (the model fits on fewer hosts) gets RV(fits=false) with
        the hosts it needs.
    type: dict
    suboptions:
      topologies:
        description: The facts of each host of the group, in group order (the first is the head).
        type: list
        elements: dict
        required: true
      names:
        description: The address each host is reached at by the others, in the same order (the head's is vLLM's C(--master-addr)).
        type: list
        elements: str
        required: true
      rank:
        description: This host's place in O(group.names) (0 is the head).
        type: int
        required: true
      network_gbps:
        description: The link between the hosts in Gb/s (default 100).
        type: float
attributes:
  check_mode:
    description: Can run in check mode and return the same plan.
    support: full
    details: Pure computation on the controller.
  diff_mode:
    description: Will return details on what has changed in diff mode.
    support: none
  action:
    description: Indicates this has a corresponding action plugin so some parts of the options can be executed on the controller.
    support: full
seealso:
  - module: llmops.vllm.gpu_topology_info
  - module: llmops.vllm.model_info
'''

EXAMPLES = r'''
- name: Probe the host
  llmops.vllm.gpu_topology_info:
  register: topology

- name: Read the model's config
  llmops.vllm.model_info:
    path: /srv/models/MiniMaxAI/MiniMax-M2.5/main
  register: model

- name: Plan (fails with the nearest option that would fit when it cannot)
  llmops.vllm.serving_plan:
    topology: "{{ topology }}"
    model: "{{ model }}"
    request:
      model_id: MiniMaxAI/MiniMax-M2.5
      served_model_name: minimax-m2.5
      max_model_len: 65536
  register: plan

- name: Show the command
  ansible.builtin.debug:
    msg: "{{ plan.env }} vllm {{ plan.argv | join(' ') }}"
'''

RETURN = r'''
fits:
  description: Whether the model fits with the KV target.
  returned: always
  type: bool
  sample: true
device:
  description: C(cuda) or C(cpu).
  returned: always
  type: str
  sample: cuda
layout:
  description:
    - The chosen layout in its one spelling (C(cpu), C(TP=4), C(TP=4+EP), C(TP=4 x DP=2), C(TP=4+EP x DP=2));
      roles and reports print this instead of formatting one.
    - Null when no parallel layout is valid for the model on this host.
  returned: always
  type: str
  sample: TP=4+EP
model_id:
  description: The hub id of the model (C(request.model_id)), or null.
  returned: always
  type: str
  sample: MiniMaxAI/MiniMax-M2.5
model_path:
  description: The path vLLM loads from (C(request.model_path), else the path model_info read), or null.
  returned: always
  type: str
  sample: /var/lib/llmops-vllm/models/MiniMaxAI/MiniMax-M2.5/5bd8b0e1c0fd0b8b4ab8f52d6e1c2a9e4e2b6c1d
served_model_name:
  description: The name the API serves the model under (C(request.served_model_name)), or null.
  returned: always
  type: str
  sample: minimax-m2-5
host:
  description: The address the server binds (C(request.host), also in RV(argv) as C(--host)); null when not given.
  returned: always
  type: str
  sample: 10.0.0.5
port:
  description: The port the server listens on (C(request.port), also in RV(argv) as C(--port)); null when not given.
  returned: always
  type: int
  sample: 8000
tensor_parallel_size:
  description: Tensor-parallel size.
  returned: always
  type: int
  sample: 4
data_parallel_size:
  description: Data-parallel size.
  returned: always
  type: int
  sample: 1
pipeline_parallel_size:
  description: Pipeline-parallel size (always 1 on one host).
  returned: always
  type: int
  sample: 1
enable_expert_parallel:
  description: Whether experts are placed whole on GPUs (C(--enable-expert-parallel)).
  returned: always
  type: bool
  sample: true
gpu_indices:
  description: nvidia-smi indices of the GPUs the plan uses (C(CUDA_DEVICE_ORDER=PCI_BUS_ID) makes CUDA agree).
  returned: always
  type: list
  elements: int
  sample: [0, 1, 2, 3]
numa_node:
  description: NUMA node of all planned GPUs, or null when they span nodes.
  returned: always
  type: int
  sample: 0
replica_gpu_indices:
  description:
    - The GPUs of each data-parallel replica (one TP group each), in DP-rank order; their concatenation is RV(gpu_indices).
    - Empty on C(cpu).
  returned: always
  type: list
  elements: list
  sample: [[0, 1, 2, 3], [4, 5, 6, 7]]
replica_numa_nodes:
  description: NUMA node of each replica's GPUs (null where a replica spans nodes).
  returned: always
  type: list
  elements: int
  sample: [0, 1]
objective:
  description: C(throughput) (the most predicted output tok/s) or C(latency) (the most single-stream tok/s).
  returned: always
  type: str
  sample: throughput
performance:
  description:
    - The chosen layout's predicted speed (docs/planner.md, "Performance model"); null when it does not fit,
      on C(device=cpu) and for GPUs the table does not know (RV(performance_note) says why).
  returned: always
  type: dict
  contains:
    concurrency:
      description: Requests in flight the figures are for (the request's C(concurrency), default 1).
      type: int
    input_len:
      description: Prompt tokens per request.
      type: int
    output_len:
      description: Output tokens per request.
      type: int
    single_stream_tok_s:
      description: One request's decode tok/s.
      type: float
    tpot_ms:
      description: Time per output token at RV(performance.concurrency).
      type: float
    ttft_ms:
      description: Time to the first token at RV(performance.concurrency).
      type: float
    output_tok_s:
      description: Aggregate output tok/s over all replicas at RV(performance.concurrency).
      type: float
    bound:
      description: What one decode step waits on most (C(memory), C(compute), C(interconnect)).
      type: str
    kv_limited:
      description: The concurrency exceeds what the KV cache (or max_num_seqs) holds, so requests queue.
      type: bool
    max_concurrency:
      description: Requests of input_len + output_len the KV caches hold, all replicas.
      type: int
    max_output_tok_s:
      description: Aggregate output tok/s at RV(performance.max_concurrency).
      type: float
    step_ms:
      description: One decode step's parts (memory, compute, floor, interconnect, total) in ms.
      type: dict
    speculative_tokens_per_step:
      description: Tokens a verify step yields when the plan speculates, else null.
      type: float
    speculative_acceptance:
      description: The acceptance per drafted token assumed for it, else null.
      type: float
    gpu:
      description: The GPU table entry used.
      type: str
    precision:
      description: Tensor-core precision of the weights' kernels (C(bf16), C(fp8), C(fp4)).
      type: str
    link:
      description: The slowest link of the TP group (or of the EP group), in words.
      type: str
performance_note:
  description: Why RV(performance) is null, else null.
  returned: always
  type: str
nodes:
  description:
    - A multi-node serving group's hosts (the CLI's C(plan) with several C(--topo-file)); empty for a one-host plan.
  returned: always
  type: list
  elements: dict
  contains:
    host:
      description: The address the node is reached at (the head's is vLLM's C(--master-addr)).
      type: str
    rank:
      description: vLLM's C(--node-rank).
      type: int
    role:
      description: C(head) (serves the API) or C(worker) (C(--headless)).
      type: str
    gpu_indices:
      description: The node's GPUs.
      type: list
      elements: int
    argv:
      description: Everything after the C(vllm) executable on that node.
      type: list
      elements: str
    env:
      description: The node's environment.
      type: dict
attention:
  description: Attention kind of the model (C(mla), C(gqa), C(mqa), C(mha)).
  returned: always
  type: str
  sample: gqa
quantization:
  description: Quantization method of the checkpoint, or null.
  returned: always
  type: str
  sample: fp8
weights_bytes:
  description: Size of the weights the plan counts (C(request.weights_bytes), else the model's).
  returned: always
  type: int
  sample: 230100000000
weights_bytes_estimated:
  description: True when RV(weights_bytes) is estimated from the config.
  returned: always
  type: bool
  sample: false
weights_bytes_per_gpu:
  description: Weight bytes on each GPU; null on C(cpu).
  returned: always
  type: int
  sample: 57525000000
overhead_bytes_per_gpu:
  description: Runtime overhead per GPU (CUDA context, communication, CUDA graphs, activations, logits); null on C(cpu).
  returned: always
  type: int
  sample: 3221225472
kv_cache_bytes_per_gpu:
  description: Bytes left for the KV cache on each GPU; null on C(cpu).
  returned: always
  type: int
  sample: 32212254720
kv_cache_bytes_per_token:
  description: KV-cache bytes one token costs on each GPU (after the tensor-parallel split).
  returned: always
  type: int
  sample: 63488
kv_cache_tokens:
  description: KV-cache capacity in tokens per replica.
  returned: always
  type: int
  sample: 535259
kv_cache_target_tokens:
  description: The KV target (C(request.min_sequences) x RV(max_model_len)).
  returned: always
  type: int
  sample: 131072
max_concurrent_sequences:
  description: Sequences of RV(max_model_len) that fit in the KV cache.
  returned: always
  type: int
  sample: 16
max_model_len:
  description: Context length the plan serves.
  returned: always
  type: int
  sample: 32768
gpu_memory_utilization:
  description: The fraction of GPU memory vLLM may use; null on C(cpu).
  returned: always
  type: float
  sample: 0.92
gpu_memory_bytes:
  description: Memory of the smallest planned GPU (or C(request.gpu_memory_bytes)); null on C(cpu).
  returned: always
  type: int
  sample: 102641958912
kv_cache_dtype:
  description: C(--kv-cache-dtype) (C(auto) unless pinned).
  returned: always
  type: str
  sample: auto
tool_call_parser:
  description: Tool-call parser, or null.
  returned: always
  type: str
  sample: minimax_m2
reasoning_parser:
  description: Reasoning parser, or null.
  returned: always
  type: str
  sample: minimax_m2_append_think
speculative_config:
  description: The C(--speculative-config) document (MTP drafting), or null.
  returned: always
  type: dict
  sample: {"method": "mtp", "num_speculative_tokens": 1}
numa_binding:
  description: C(vllm) (C(--numa-bind)), C(numactl) (RV(exec_prefix)) or null (none).
  returned: always
  type: str
  sample: vllm
exec_prefix:
  description: Command to put before C(vllm) (C(numactl ...) when vLLM has no NUMA binding flag of its own).
  returned: always
  type: list
  elements: str
  sample: []
argv:
  description:
    - Everything after the C(vllm) executable; every flag in it (C(request.extra_args) included) exists in the
      installed vLLM when its facts list flags.
  returned: always
  type: list
  elements: str
  sample: ["serve", "MiniMaxAI/MiniMax-M2.5", "--tensor-parallel-size", "4", "--enable-expert-parallel"]
env:
  description: Environment for the server (GPU pinning, CPU KV space).
  returned: always
  type: dict
  sample: {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
vllm:
  description: The vLLM the plan was made for - C(distribution), C(version), C(source) (C(installed) or C(recorded)).
  returned: always
  type: dict
  sample: {"distribution": "vllm", "version": "0.33.0", "source": "installed"}
candidates:
  description: Every parallel layout the planner considered, for the reviewer's table.
  returned: always
  type: list
  elements: dict
  contains:
    label:
      description: The layout in its one spelling, as RV(layout).
      type: str
      sample: TP=4+EP
    tensor_parallel_size:
      description: Tensor-parallel size.
      type: int
      sample: 4
    data_parallel_size:
      description: Data-parallel size.
      type: int
      sample: 1
    enable_expert_parallel:
      description: Expert parallelism.
      type: bool
      sample: true
    gpu_indices:
      description: The GPU set it was evaluated on (empty when invalid).
      type: list
      elements: int
      sample: [0, 1, 2, 3]
    numa_node:
      description: NUMA node of the set, or null.
      type: int
      sample: 0
    replica_gpu_indices:
      description: The GPUs of each data-parallel replica.
      type: list
      elements: list
      sample: [[0, 1, 2, 3]]
    replica_numa_nodes:
      description: NUMA node of each replica (null where it spans nodes).
      type: list
      elements: int
      sample: [0]
    valid:
      description: False when the model's shape or the GPU count rules the layout out.
      type: bool
      sample: true
    fits:
      description: Whether the KV target fits.
      type: bool
      sample: true
    kv_cache_tokens:
      description: KV capacity in tokens per replica.
      type: int
      sample: 535259
    memory:
      description: Memory per GPU; null when invalid.
      type: dict
      contains:
        gpu_memory_bytes:
          description: GPU memory.
          type: int
        cap_bytes:
          description: RV(gpu_memory_utilization) x GPU memory.
          type: int
        weights_bytes:
          description: Weights per GPU.
          type: int
        overhead_bytes:
          description: Runtime overhead per GPU.
          type: int
        kv_cache_bytes:
          description: What is left for the KV cache.
          type: int
    why_not:
      description: Why it was not chosen (invalid, or does not fit), or null.
      type: str
      sample: TP=8 splits each expert's 1536-wide intermediate into 192 per GPU, not a multiple of the FP8 block size 128
    performance:
      description: Its predicted speed, as RV(performance); null when it does not fit.
      type: dict
      contains:
        concurrency:
          description: Requests in flight the figures are for (the request's C(concurrency), default 1).
          type: int
        input_len:
          description: Prompt tokens per request.
          type: int
        output_len:
          description: Output tokens per request.
          type: int
        single_stream_tok_s:
          description: One request's decode tok/s.
          type: float
        tpot_ms:
          description: Time per output token at RV(performance.concurrency).
          type: float
        ttft_ms:
          description: Time to the first token at RV(performance.concurrency).
          type: float
        output_tok_s:
          description: Aggregate output tok/s over all replicas at RV(performance.concurrency).
          type: float
        bound:
          description: What one decode step waits on most (C(memory), C(compute), C(interconnect)).
          type: str
        kv_limited:
          description: The concurrency exceeds what the KV cache (or max_num_seqs) holds, so requests queue.
          type: bool
        max_concurrency:
          description: Requests of input_len + output_len the KV caches hold, all replicas.
          type: int
        max_output_tok_s:
          description: Aggregate output tok/s at RV(performance.max_concurrency).
          type: float
        step_ms:
          description: One decode step's parts (memory, compute, floor, interconnect, total) in ms.
          type: dict
        speculative_tokens_per_step:
          description: Tokens a verify step yields when the plan speculates, else null.
          type: float
        speculative_acceptance:
          description: The acceptance per drafted token assumed for it, else null.
          type: float
        gpu:
          description: The GPU table entry used.
          type: str
        precision:
          description: Tensor-core precision of the weights' kernels (C(bf16), C(fp8), C(fp4)).
          type: str
        link:
          description: The slowest link of the TP group (or of the EP group), in words.
          type: str
reasons:
  description: One line per decision.
  returned: always
  type: list
  elements: str
swap:
  description: With O(swap) - C(bluegreen) or C(stop-start); otherwise null.
  returned: always
  type: str
  sample: bluegreen
swap_why:
  description: With O(swap) - why that strategy, in words; otherwise null.
  returned: always
  type: str
  sample: "fits beside a (which holds GPUs 0,1,2,3): starts on GPUs 4,5,6,7, takes over the stable port, then a stops"
plan_warnings:
  description: Things a reviewer should know (the CLI's C(warnings); Ansible also shows each as a warning).
  returned: always
  type: list
  elements: str
error:
  description: Why the model does not fit and the nearest option that would, or null.
  returned: always
  type: str
'''
