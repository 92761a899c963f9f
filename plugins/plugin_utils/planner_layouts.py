# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Planner layouts: the resolved inputs (:class:`PlanContext`), candidate layouts, GPU sets, links, NUMA."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ansible_collections.llmops.vllm.plugins.plugin_utils.contracts import (
    Candidate, HostFacts, MemoryPerGpu, ModelFacts, PlanInputError, PlanRequest, VllmFacts, has_flag, layout_label)
from ansible_collections.llmops.vllm.plugins.plugin_utils.gpu_specs import pair_links
from ansible_collections.llmops.vllm.plugins.plugin_utils.planner_performance import Workload
from ansible_collections.llmops.vllm.plugins.plugin_utils.planner_rules import (
    gib_text, kv_bytes_per_token_per_gpu, link_rank, runtime_overhead_bytes, scheduler_defaults)


@dataclass(frozen=True)
class PlanContext:
    """The planner's inputs with every default resolved, decided once and never changed."""
    host: HostFacts
    model: ModelFacts
    vllm: VllmFacts
    request: PlanRequest
    weights: int
    max_model_len: int
    kv_dtype_bytes: int
    target_tokens: int
    trust_remote_code: bool = False
    unsupported: Optional[str] = None
    tool_call_parser: Optional[str] = None
    reasoning_parser: Optional[str] = None
    speculative_config: Optional[Dict[str, Any]] = None
    workload: Workload = Workload()
    concurrency_given: bool = False


def draft_kv_layers(ctx: PlanContext) -> int:
    """Layers of the speculative drafter that hold KV-cache: the model's own MTP layers when the plan
    speculates with them (a separate draft model's are not known here)."""
    spec = ctx.speculative_config or {}
    if spec.get("method") == "mtp":
        return max(1, min(ctx.model.mtp_layers or 1, int(spec.get("num_speculative_tokens") or 1)))
    return 0


def numa_of(host: HostFacts, index: int) -> Optional[int]:
    """NUMA node of GPU ``index``, None when unknown."""
    for gpu in host.gpus:
        if gpu.index == index:
            return gpu.numa_node
    return None


def choose_gpu_set(host: HostFacts, available: Sequence[int], count: int) -> List[int]:
    """The best `count` GPUs: on one NUMA node when possible, then the best worst-case link, then
    the best links overall, then the lowest indices."""
    def score(combo: Tuple[int, ...]) -> Tuple[Any, ...]:
        nodes = {numa_of(host, i) for i in combo}
        node_count = len(nodes) + (1 if None in nodes and len(nodes) > 1 else 0)
        ranks = [link_rank(link) for link in pair_links(host, combo)]
        worst = max(ranks) if ranks else (0, 0)
        total = (sum(r[0] for r in ranks), sum(r[1] for r in ranks)) if ranks else (0, 0)
        return (node_count, worst, total, combo)
    if count >= len(available):
        return sorted(available)
    return list(min(itertools.combinations(sorted(available), count), key=score))  # type: ignore[arg-type]


def replica_gpu_sets(host: HostFacts, available: Sequence[int], tensor_parallel_size: int,
                     data_parallel_size: int) -> List[List[int]]:
    """One GPU set per data-parallel replica, chosen one after the other from what is left, each by
    :func:`choose_gpu_set` (one NUMA node when possible, then the best links). vLLM gives DP rank r
    the r-th block of tensor_parallel_size devices of CUDA_VISIBLE_DEVICES, so the order matters."""
    left = sorted(available)
    sets: List[List[int]] = []
    for _replica in range(data_parallel_size):
        chosen = choose_gpu_set(host, left, tensor_parallel_size)
        sets.append(chosen)
        left = [i for i in left if i not in chosen]
    return sets


def node_of_set(host: HostFacts, indices: Sequence[int]) -> Optional[int]:
    """The NUMA node all of ``indices`` are on, None when they span nodes or one is unknown."""
    nodes = {numa_of(host, i) for i in indices}
    return nodes.pop() if len(nodes) == 1 else None


def describe_links(host: HostFacts, indices: Sequence[int]) -> str:
    """``links PIX..SYS`` (best..worst) of a GPU set, or "" when unknown."""
    links = [link for link in pair_links(host, indices) if link]
    if not links:
        return ""
    worst = max(links, key=link_rank)
    best = min(links, key=link_rank)
    return "links %s..%s" % (best, worst) if best != worst else "links %s" % best


def auto_expert_parallel(ctx: PlanContext, world_size: int) -> bool:
    """Expert parallelism when the planner chooses: MoE on more than one GPU, if vLLM has the flag."""
    return bool(ctx.model.moe) and world_size > 1 and has_flag(ctx.vllm, "--enable-expert-parallel") is not False


def layouts(ctx: PlanContext, available: Sequence[int], explore: bool = False) -> List[Tuple[int, int, bool]]:
    """Parallel layouts to try, in order of preference: the smallest world size first (least
    all-reduce traffic, which dominates on PCIe), then the smallest TP. With ``explore`` (the
    performance model ranks them) also every number of data-parallel replicas the GPUs hold
    (throughput objective) and, for MoE, each layout with and without expert parallelism."""
    request = ctx.request
    n = len(available)
    tps = [request.tensor_parallel_size] if request.tensor_parallel_size else list(range(1, n + 1))
    found: List[Tuple[int, int, int, bool]] = []
    for tp in tps:
        if request.data_parallel_size:
            dps = [request.data_parallel_size]
        elif explore and request.objective == "throughput" and n // tp > 1:
            dps = list(range(1, n // tp + 1))
        else:
            dps = [1]
        for dp in dps:
            if request.enable_expert_parallel is not None:
                eps = [request.enable_expert_parallel]
            elif explore and dp == 1 and auto_expert_parallel(ctx, tp * dp):
                eps = [True, False]
            else:
                eps = [auto_expert_parallel(ctx, tp * dp)]
            found.extend((tp * dp, tp, dp, ep) for ep in eps)
    return [(tp, dp, ep) for _ignored, tp, dp, ep in sorted(found, key=lambda f: (f[0], f[1], f[2], not f[3]))]


def invalid_candidate(tp: int, dp: int, ep: bool, why_not: str) -> Candidate:
    """A layout ruled out before any memory math."""
    return Candidate(label=layout_label("cuda", tp, dp, ep), tensor_parallel_size=tp, data_parallel_size=dp,
                     enable_expert_parallel=ep, valid=False, why_not=why_not)


def evaluate(ctx: PlanContext, tp: int, dp: int, ep: bool, gpu_indices: Sequence[int], util: float,
             enforce_eager: bool) -> Candidate:
    """The memory of one layout on one GPU set, and whether the KV target fits."""
    model, host = ctx.model, ctx.host
    world = tp * dp
    expert = int(ctx.weights * model.expert_weights_fraction) if model.moe else 0
    dense = ctx.weights - expert
    weights_per_gpu = dense // tp + expert // (world if ep else tp)
    memories = [g.memory_bytes for g in host.gpus if g.index in gpu_indices]
    gpu_memory = ctx.request.gpu_memory_bytes or (min(m for m in memories if m) if any(memories) else None)
    if not gpu_memory:
        raise PlanInputError("GPU memory size unknown: give a --query-file (nvidia-smi --query-gpu CSV or "
                             "nvidia-smi -q) or --gpu-memory-gib")
    cap = int(gpu_memory * util)
    names = [g.name for g in host.gpus if g.index in gpu_indices]
    batched, seqs = scheduler_defaults(gpu_memory, names[0] if names else None)
    # Expert parallelism makes the whole TP x DP group all-to-all peers; otherwise a GPU exchanges
    # with its TP group only.
    overhead = runtime_overhead_bytes(
        model, tp, world if ep else tp, gpu_memory, ctx.request.max_num_batched_tokens or batched,
        ctx.request.max_num_seqs or seqs, expert_parallel=ep, vllm_version=ctx.vllm.version)
    kv = cap - weights_per_gpu - overhead
    per_token = kv_bytes_per_token_per_gpu(model, tp, ctx.kv_dtype_bytes, draft_kv_layers(ctx))
    tokens = max(kv, 0) // per_token
    replicas = [list(gpu_indices[r * tp:(r + 1) * tp]) for r in range(dp)]
    fits = kv > 0 and tokens >= ctx.target_tokens
    why_not = None
    if kv <= 0:
        why_not = "weights %s + overhead %s exceed the %s cap per GPU" % (
            gib_text(weights_per_gpu), gib_text(overhead), gib_text(cap))
    elif not fits:
        why_not = "KV room for %d tokens, below the target %d" % (tokens, ctx.target_tokens)
    return Candidate(
        label=layout_label("cuda", tp, dp, ep), tensor_parallel_size=tp, data_parallel_size=dp,
        enable_expert_parallel=ep, gpu_indices=list(gpu_indices), numa_node=node_of_set(host, gpu_indices),
        replica_gpu_indices=replicas, replica_numa_nodes=[node_of_set(host, r) for r in replicas],
        fits=fits, kv_cache_tokens=int(tokens), why_not=why_not,
        memory=MemoryPerGpu(gpu_memory_bytes=gpu_memory, cap_bytes=cap, weights_bytes=weights_per_gpu,
                            overhead_bytes=overhead, kv_cache_bytes=max(kv, 0)))


def closest(candidates: Sequence[Candidate]) -> Optional[Candidate]:
    """The valid candidate nearest to fitting, or None."""
    valid = [c for c in candidates if c.valid and c.memory]
    if not valid:
        return None
    # Most KV room first; among layouts with none, the one whose weights come closest to fitting.
    # `valid` holds only candidates with memory.
    return max(valid, key=lambda c: (c.kv_cache_tokens,
                                     c.memory.cap_bytes - c.memory.weights_bytes - c.memory.overhead_bytes))  # type: ignore[union-attr]
