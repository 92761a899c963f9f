# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Predicted serving speed of one layout, from first principles and the host's facts.

One decode step of a replica (a TP group) costs

    max(bytes read / memory bandwidth, FLOPs / tensor throughput) + kernel floors + collectives

- bytes read per GPU: the dense weights' share (dense / TP), the routed experts the step's tokens
  touch (E x (1 - (1 - k/E)^tokens) of the E experts per layer, sliced over TP, or placed whole over
  the expert-parallel group whose tokens are those of every replica), and the KV cache of the batch
  (MLA's latent KV is replicated on every rank, so TP does not shrink it);
- FLOPs per GPU: 2 x active parameters x tokens / TP, plus attention over the context, at the
  weights' precision where the GPU has tensor cores for it (FP8 on 8.9+, FP4 on Blackwell);
- collectives: per layer one all-reduce after attention and one after the MLP (the MoE's is replaced
  by a dispatch and a combine all-to-all under expert parallelism), each a fixed latency plus the
  ring's 2 (n-1)/n x the hidden states over the slowest link of the group.

Prefill of one request is the same step over its input tokens. At a concurrency of c requests per
replica each request costs its prefill once and output_len decode steps shared by the batch, so

    TPOT = step(c) / tokens per step + (c - 1) x prefill / output_len
    output tok/s = replicas x c x output_len / (c x prefill + output_len x step(c) / tokens per step)

with c capped by what the KV cache holds (input + output tokens per request) and max_num_seqs.
Speculative decoding verifies n drafted tokens per step; with acceptance a a step yields
(1 - a^(n+1)) / (1 - a) tokens (the plan states a). The constants below are the only fitted values
(tests/unit/test_perf_published.py refits them on tests/fixtures/perf_published).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Literal, Optional, Tuple

from ansible_collections.llmops.vllm.plugins.plugin_utils.contracts import (
    Candidate, HostFacts, ModelFacts, Performance)
from ansible_collections.llmops.vllm.plugins.plugin_utils.gpu_specs import GpuSpec, LinkFacts, gpu_spec, group_link
from ansible_collections.llmops.vllm.plugins.plugin_utils.planner_rules import (
    compute_capability, kv_bytes_per_token_per_gpu)

# Fitted on the "fit" figures of tests/fixtures/perf_published (at most two thirds of them).
# tools/fit_constants.py performance prints this fit (a minimax fit: the worst figure's relative error).
MEMORY_EFFICIENCY = 0.721         # share of the datasheet memory bandwidth dense weights and KV reads reach
EXPERT_MEMORY_EFFICIENCY = 0.631  # the same for routed experts' grouped GEMMs (a few tokens per expert)
COMPUTE_EFFICIENCY = 0.382        # share of the dense tensor peak a step's GEMMs reach
KERNEL_FLOOR_US = 8.08            # per GEMM-sized kernel and step: launch and tail, on top of its reads
COLLECTIVE_LATENCY_US = {"nvlink": 24.9, "pcie": 40.0}  # per all-reduce or all-to-all phase

DEFAULT_INPUT_LEN, DEFAULT_OUTPUT_LEN = 1024, 128  # `vllm bench serve --dataset-name random` defaults
DEFAULT_SPECULATIVE_ACCEPTANCE = 0.7  # assumed per drafted token; the plan states it
HIDDEN_BYTES = 2  # bf16 activations cross the links
ROPE_DIM_MLA = 64


@dataclass(frozen=True)
class Workload:
    """The load a layout is judged under."""
    concurrency: int = 1
    input_len: int = DEFAULT_INPUT_LEN
    output_len: int = DEFAULT_OUTPUT_LEN
    speculative_acceptance: float = DEFAULT_SPECULATIVE_ACCEPTANCE


@dataclass(frozen=True)
class Constants:
    memory_efficiency: float = MEMORY_EFFICIENCY
    expert_memory_efficiency: float = EXPERT_MEMORY_EFFICIENCY
    compute_efficiency: float = COMPUTE_EFFICIENCY
    kernel_floor_us: float = KERNEL_FLOOR_US
    nvlink_latency_us: float = COLLECTIVE_LATENCY_US["nvlink"]
    pcie_latency_us: float = COLLECTIVE_LATENCY_US["pcie"]


@dataclass(frozen=True)
class Layout:
    """What the step arithmetic needs of one candidate on one host."""
    tp: int
    dp: int
    ep: bool
    spec: GpuSpec
    peak_tflops: float
    precision: str
    tp_link: LinkFacts
    ep_link: LinkFacts
    memory_gb_s: float


def compute_precision(model: ModelFacts, spec: GpuSpec, cc: Optional[Tuple[int, int]]) -> Tuple[str, float]:
    """The tensor-core precision the weights' kernels run at on this GPU, and its dense peak."""
    method = (model.quantization.method if model.quantization else "") or ""
    fmt = (model.quantization.format if model.quantization else "") or ""
    fp4 = method in ("nvfp4", "mxfp4", "modelopt_fp4") or "fp4" in fmt.lower()
    fp8 = method in ("fp8", "modelopt", "fbgemm_fp8") or "fp8" in fmt.lower()
    blackwell = cc is not None and cc[0] >= 10
    if fp4 and spec.fp4_tflops and blackwell:
        return "fp4", spec.fp4_tflops
    if (fp4 or fp8) and spec.fp8_tflops and (cc is None or cc >= (8, 9)):
        return "fp8", spec.fp8_tflops
    return "bf16", spec.bf16_tflops


def layout_of(host: HostFacts, model: ModelFacts, cand: Candidate) -> Tuple[Optional[Layout], Optional[str]]:
    """The step inputs of a candidate, or None and why there is no prediction."""
    gpus = [g for g in host.gpus if g.index in cand.gpu_indices]
    if not gpus:
        return None, "no GPU in the layout"
    specs = [gpu_spec(g.name) for g in gpus]
    if any(s is None for s in specs):
        unknown = sorted({g.name or "unnamed GPU" for g, s in zip(gpus, specs, strict=True) if s is None})
        return None, "no datasheet figures for %s in the GPU table (plugin_utils/gpu_specs.py)" % ", ".join(unknown)
    spec = min((s for s in specs if s is not None), key=lambda s: s.memory_gb_s)
    precision, peak = compute_precision(model, spec, compute_capability(gpus[0].compute_capability))
    replica = cand.replica_gpu_indices[0] if cand.replica_gpu_indices else cand.gpu_indices
    tp_link = group_link(host, replica, spec)
    ep_link = group_link(host, cand.gpu_indices, spec) if cand.enable_expert_parallel else tp_link
    return Layout(cand.tensor_parallel_size, cand.data_parallel_size, cand.enable_expert_parallel, spec, peak,
                  precision, tp_link, ep_link, spec.memory_gb_s), None


def _latency(link: LinkFacts, k: Constants) -> float:
    """One collective's fixed cost (launch, synchronisation, the first bytes' trip), by link kind."""
    return (k.nvlink_latency_us if link.kind == "nvlink" else k.pcie_latency_us) * 1e-6


def step_seconds(model: ModelFacts, weights: int, lay: Layout, sequences: int, context: float, tokens_per_seq: int,
                 kv_dtype_bytes: int, k: Constants) -> Dict[str, float]:
    """One forward step of a replica over ``sequences`` x ``tokens_per_seq`` new tokens whose
    sequences hold ``context`` tokens each: seconds spent on memory, compute, kernel floors, collectives."""
    tokens = sequences * tokens_per_seq
    world = lay.tp * lay.dp
    moe = model.moe
    expert_bytes = weights * model.expert_weights_fraction if moe else 0.0
    dense_bytes = weights - expert_bytes
    params = model.parameters_estimated or weights / 2
    bytes_per_param = weights / params
    touched = 0.0
    active_expert_bytes = 0.0
    if moe and moe.num_experts:
        share = min(1.0, (moe.experts_per_token or 1) / moe.num_experts)
        moe_tokens = tokens * lay.dp if lay.ep else tokens
        touched = 1.0 - (1.0 - share) ** moe_tokens
        active_expert_bytes = expert_bytes * share
    expert_group = world if lay.ep else lay.tp
    kv_per_token = kv_bytes_per_token_per_gpu(model, lay.tp, kv_dtype_bytes)
    read = dense_bytes / lay.tp + sequences * context * kv_per_token
    expert_read = expert_bytes * touched / expert_group
    active_params = (dense_bytes + active_expert_bytes) / bytes_per_param
    head_width = (model.kv_lora_rank + ROPE_DIM_MLA) if model.attention == "mla" and model.kv_lora_rank \
        else model.head_dim
    attention_flops = 4.0 * tokens * context * model.num_attention_heads * head_width * model.num_layers
    flops = (2.0 * active_params * tokens + attention_flops) / lay.tp
    memory = (read / k.memory_efficiency + expert_read / k.expert_memory_efficiency) / (lay.memory_gb_s * 1e9)
    compute = flops / (lay.peak_tflops * 1e12 * k.compute_efficiency)
    hidden = model.hidden_size or model.num_attention_heads * model.head_dim
    moe_layers = (moe.moe_layers or model.num_layers) if moe else 0
    comm = 0.0
    if lay.tp > 1:
        reduces = model.num_layers + (model.num_layers - moe_layers) + (0 if lay.ep else moe_layers)
        volume = 2.0 * (lay.tp - 1) / lay.tp * tokens * hidden * HIDDEN_BYTES
        comm += reduces * (_latency(lay.tp_link, k) + volume / (lay.tp_link.gb_s * 1e9))
    if lay.ep and world > 1 and moe:
        volume = tokens * (moe.experts_per_token or 1) * hidden * HIDDEN_BYTES * (world - 1) / world
        comm += 2 * moe_layers * (_latency(lay.ep_link, k) + volume / (lay.ep_link.gb_s * 1e9))
    floor = kernels_per_step(model) * k.kernel_floor_us * 1e-6
    return {"memory": memory, "compute": compute, "interconnect": comm, "floor": floor,
            "total": max(memory, compute) + floor + comm}


def kernels_per_step(model: ModelFacts) -> int:
    """GEMM-sized kernels a decode step launches: per layer the attention's projections (q/k/v and
    o; MLA: q down/up, kv down, the absorbed k/v up-projections and o) and attention itself, and the
    MLP's (gate-up and down; MoE: router, top-k, the two grouped expert GEMMs, shared experts' two)."""
    attention = 7 if model.attention == "mla" else 3
    moe = model.moe
    moe_layers = (moe.moe_layers or model.num_layers) if moe else 0
    shared = 2 if moe and moe.shared_expert_intermediate_size else 0
    return model.num_layers * attention + (model.num_layers - moe_layers) * 2 + moe_layers * (4 + shared)


def marginal_prefill_seconds(model: ModelFacts, weights: int, lay: Layout, input_len: int, kv_dtype_bytes: int,
                             k: Constants) -> float:
    """What one request's prefill adds to the steps it is chunked into beside running decodes: its
    FLOPs and its collectives' volume (the weights are read by those steps anyway)."""
    step = step_seconds(model, weights, lay, 1, input_len / 2.0, input_len, kv_dtype_bytes, k)
    idle = step_seconds(model, weights, lay, 1, 0.0, 0, kv_dtype_bytes, k)
    return step["compute"] + max(0.0, step["interconnect"] - idle["interconnect"])


def tokens_per_step(speculative: Optional[Dict[str, Any]], acceptance: float) -> Tuple[int, float]:
    """Drafted tokens n and the expected tokens a verify step yields."""
    n = int((speculative or {}).get("num_speculative_tokens") or 0)
    if n <= 0:
        return 0, 1.0
    a = min(max(acceptance, 0.0), 0.999)
    return n, (1.0 - a ** (n + 1)) / (1.0 - a)


def _replica_rate(model: ModelFacts, weights: int, lay: Layout, load: int, cap: int, work: Workload,
                  kv_dtype_bytes: int, speculative: Optional[Dict[str, Any]], k: Constants) -> Dict[str, Any]:
    n, per_step = tokens_per_step(speculative, work.speculative_acceptance)
    prefill = step_seconds(model, weights, lay, 1, work.input_len / 2.0, work.input_len, kv_dtype_bytes, k)["total"]
    marginal = marginal_prefill_seconds(model, weights, lay, work.input_len, kv_dtype_bytes, k)
    running = max(1, min(load, cap))
    context = work.input_len + work.output_len / 2.0
    step = step_seconds(model, weights, lay, running, context, 1 + n, kv_dtype_bytes, k)
    draft = n * step["total"] / model.num_layers if n else 0.0
    decode = (step["total"] + draft) / per_step
    # The others' prefills run chunked into this request's decode steps; its own is its TTFT.
    tpot = decode + (running - 1) * marginal / work.output_len
    # Per request: its prefill (alone at concurrency 1, else chunked beside the others' decodes) and
    # output_len decode steps shared by the batch.
    cycle = decode * work.output_len + (prefill if running == 1 else running * marginal)
    rate = running * work.output_len / cycle
    ttft = prefill + (step["total"] if running > 1 else 0.0)
    if load > running:  # requests wait for a free KV slot
        ttft += (load / running - 1) * cycle
    return {"step": step, "decode": decode, "tpot": tpot, "rate": rate, "ttft": ttft, "running": running}


def predict(model: ModelFacts, weights: int, host: HostFacts, cand: Candidate, work: Workload, kv_dtype_bytes: int,
            max_num_seqs: int, speculative: Optional[Dict[str, Any]] = None,
            constants: Optional[Constants] = None) -> Tuple[Optional[Performance], Optional[str]]:
    """The predicted performance of a fitting candidate under ``work``, or None and why not."""
    k = constants or Constants()
    lay, why = layout_of(host, model, cand)
    if lay is None:
        return None, why
    per_request = work.input_len + work.output_len
    cap = max(1, min(max_num_seqs, cand.kv_cache_tokens // per_request if cand.kv_cache_tokens else max_num_seqs))
    loads = [work.concurrency // lay.dp + (1 if r < work.concurrency % lay.dp else 0) for r in range(lay.dp)]
    rates = [_replica_rate(model, weights, lay, load, cap, work, kv_dtype_bytes, speculative, k)
             for load in loads if load > 0]
    single = _replica_rate(model, weights, lay, 1, cap, work, kv_dtype_bytes, speculative, k)
    full = _replica_rate(model, weights, lay, cap, cap, work, kv_dtype_bytes, speculative, k)
    worst = max(rates, key=lambda r: r["tpot"])
    step = worst["step"]
    bound: Literal["memory", "compute", "interconnect"] = "interconnect" if step["interconnect"] >= max(step["memory"], step["compute"], step["floor"]) else \
        ("compute" if step["compute"] > step["memory"] else "memory")
    n, per_step = tokens_per_step(speculative, work.speculative_acceptance)
    return Performance(
        concurrency=work.concurrency, input_len=work.input_len, output_len=work.output_len,
        single_stream_tok_s=round(1.0 / single["decode"], 1), tpot_ms=round(worst["tpot"] * 1e3, 2),
        ttft_ms=round(worst["ttft"] * 1e3, 1), output_tok_s=round(sum(r["rate"] for r in rates), 1), bound=bound,
        kv_limited=any(load > cap for load in loads), max_concurrency=cap * lay.dp,
        max_output_tok_s=round(full["rate"] * lay.dp, 1),
        step_ms={key: round(value * 1e3, 3) for key, value in step.items()},
        speculative_tokens_per_step=round(per_step, 3) if n else None,
        speculative_acceptance=work.speculative_acceptance if n else None,
        gpu=lay.spec.name, precision=lay.precision, link=lay.tp_link.description if lay.tp > 1 else
        (lay.ep_link.description if lay.ep and lay.dp > 1 else "one GPU per replica, no TP link")), None


def ranking_value(perf: Performance, objective: str, concurrency_given: bool) -> float:
    """Higher is better: aggregate tok/s (at the given concurrency, else at the load the KV cache
    holds) for throughput; 1 / TPOT at concurrency 1 (single-stream tok/s) for latency."""
    if objective == "latency":
        return perf.single_stream_tok_s
    return perf.output_tok_s if concurrency_given else perf.max_output_tok_s


def explain(perf: Performance) -> str:
    """One line of figures for the reasons."""
    return ("%.0f tok/s single-stream; at concurrency %d: TPOT %.1f ms, TTFT %.0f ms, %.0f output tok/s (%s-bound); "
            "up to %.0f tok/s at %d concurrent requests" % (
                perf.single_stream_tok_s, perf.concurrency, perf.tpot_ms, perf.ttft_ms, perf.output_tok_s, perf.bound,
                perf.max_output_tok_s, perf.max_concurrency))
