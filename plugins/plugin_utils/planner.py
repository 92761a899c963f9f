# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The serving planner: host facts + model facts (+ the installed vLLM's facts) + overrides -> a plan.

Pure functions over the contract models (plugin_utils/contracts.py); nothing here touches a host.
Every automatic choice is explained in ``reasons`` and can be overridden through
:class:`PlanRequest`. A plan that cannot fit comes back with ``fits: false`` and an ``error``
naming what is missing and the nearest option that would fit; input that makes no sense raises
:class:`PlanInputError`. Every flag of the plan's argv, ``extra_args`` included, passes
:func:`contracts.requires` against the installed vLLM's flags.

This module assembles the plan; the rules (memory math, divisibility, hardware, parsers) are in
planner_rules.py, the layouts (candidates, GPU sets, links, NUMA) in planner_layouts.py. The rules
are those of docs/ARCHITECTURE.md ("Planner rules"); the memory model is documented in
docs/planner.md.
"""

from __future__ import annotations

import json
import math
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple, Union, cast

from ansible_collections.llmops.vllm.plugins.plugin_utils.contracts import (
    Candidate, HostFacts, MemoryPerGpu, ModelFacts, Performance, PlanInputError, PlanRequest, ServingPlan, VllmFacts,
    has_flag,
    layout_label, parse_facts, require_argv, requires)
from ansible_collections.llmops.vllm.plugins.plugin_utils.planner_layouts import (
    PlanContext, closest, describe_links, draft_kv_layers, evaluate, invalid_candidate, layouts, numa_of, replica_gpu_sets)
from ansible_collections.llmops.vllm.plugins.plugin_utils.planner_rules import (
    CPU_MEMORY_FRACTION, CPU_QUANTIZATIONS, CPU_RUNTIME_BYTES, DEFAULT_MAX_MODEL_LEN_CAP, FALLBACK_GPU_MEMORY_UTILIZATION,
    GIB, choose_parser, default_parsers, scheduler_defaults,
    profiles_cuda_graphs, divisibility_problems, gib_text, hardware_problems, kv_bytes_per_token_per_gpu,
    vllm_supports)
from ansible_collections.llmops.vllm.plugins.plugin_utils.planner_performance import (
    DEFAULT_INPUT_LEN, DEFAULT_OUTPUT_LEN, DEFAULT_SPECULATIVE_ACCEPTANCE, Workload, explain, predict, ranking_value)
from ansible_collections.llmops.vllm.plugins.plugin_utils.gpu_specs import gpu_spec
from ansible_collections.llmops.vllm.plugins.plugin_utils.vllm_release import RELEASE_FACTS


class Notes:
    """The accumulators of one planning run: ``reasons`` (each decision) and ``warnings``."""

    def __init__(self) -> None:
        self.reasons: List[str] = []
        self.warnings: List[str] = []


def release_vllm_facts() -> VllmFacts:
    """The recorded facts of the current vLLM release (used when the host's install is unknown)."""
    return VllmFacts.model_validate(RELEASE_FACTS)


# --------------------------------------------------------------------------- resolved inputs


def resolve(host: HostFacts, model: ModelFacts, vllm: VllmFacts, request: PlanRequest, notes: Notes) -> PlanContext:
    """The frozen :class:`PlanContext`: weights, context length, KV target, remote code, parsers."""
    reasons, warnings = notes.reasons, notes.warnings
    weights = request.weights_bytes or model.weights_bytes
    if request.weights_bytes:
        reasons.append("weights: %s (override)" % gib_text(weights))
    elif model.weights_bytes_estimated:
        reasons.append("weights: %s, estimated from the config (no safetensors index)" % gib_text(weights))
        warnings.append("weights size is estimated from config.json; pass --weights-bytes or the model's "
                        "model.safetensors.index.json for an exact plan")
    else:
        reasons.append("weights: %s from the checkpoint" % gib_text(weights))
    model_max = model.max_position_embeddings
    if request.max_model_len:
        if model_max and request.max_model_len > model_max:
            warnings.append("max_model_len %d exceeds the model's max_position_embeddings %d"
                            % (request.max_model_len, model_max))
        max_model_len = request.max_model_len
        reasons.append("max_model_len: %d (override)" % max_model_len)
    else:
        max_model_len = min(model_max or DEFAULT_MAX_MODEL_LEN_CAP, DEFAULT_MAX_MODEL_LEN_CAP)
        reasons.append("max_model_len: %d = min(model maximum %s, %d)"
                       % (max_model_len, model_max or "unknown", DEFAULT_MAX_MODEL_LEN_CAP))
    target_tokens = request.min_sequences * max_model_len
    reasons.append("KV target: %d tokens = %d sequences x max_model_len %d"
                   % (target_tokens, request.min_sequences, max_model_len))
    if model.quantization and model.quantization.kv_cache == "fp8" and request.kv_cache_dtype == "auto":
        reasons.append("the checkpoint carries FP8 KV-cache scales: --kv-cache-dtype fp8 would double KV capacity")
    if vllm.source == "recorded":
        warnings.append("no facts from the host's vLLM: parser names and flags are those of the vLLM %s release"
                        % (vllm.version or "?"))
    if vllm.flags is None:
        warnings.append("the vLLM %s facts list no flags: the plan's flags and extra_args were not checked against it"
                        % (vllm.version or "?"))
    trust_remote_code, unsupported = _remote_code(model, vllm, request, notes)
    tool, reasoning, speculative = _parsers_and_speculation(model, vllm, request, notes)
    workload = Workload(concurrency=request.concurrency or 1, input_len=request.input_len or DEFAULT_INPUT_LEN,
                        output_len=request.output_len or DEFAULT_OUTPUT_LEN,
                        speculative_acceptance=DEFAULT_SPECULATIVE_ACCEPTANCE if request.speculative_acceptance is None
                        else request.speculative_acceptance)
    return PlanContext(host=host, model=model, vllm=vllm, request=request, weights=weights,
                       max_model_len=max_model_len, kv_dtype_bytes=1 if request.kv_cache_dtype.startswith("fp8") else 2,
                       target_tokens=target_tokens, trust_remote_code=trust_remote_code, unsupported=unsupported,
                       tool_call_parser=tool, reasoning_parser=reasoning, speculative_config=speculative,
                       workload=workload, concurrency_given=request.concurrency is not None)


def _remote_code(model: ModelFacts, vllm: VllmFacts, request: PlanRequest, notes: Notes) -> Tuple[bool, Optional[str]]:
    """(trust_remote_code, why the plan cannot serve the architecture or None).

    Running a checkpoint's own Python is never switched on by the planner: a model that vLLM has no
    native implementation for, and that ships its code (auto_map), is refused until the desired
    state says ``trust_remote_code: true`` (the refusal names the files that would run).
    """
    archs = set(vllm.architectures or ())
    native = not archs or model.architecture in archs
    files = ", ".join(model.remote_code_files) or "the files auto_map names"
    if request.trust_remote_code:
        if model.remote_code:
            notes.reasons.append("trust_remote_code set: vLLM runs the checkpoint's own code (%s)" % files)
        return True, None
    if not native and model.remote_code:
        if request.trust_remote_code is False:
            return False, ("vLLM %s has no native %s and trust_remote_code is false: the model runs only with its own "
                           "code (%s)" % (vllm.version or "?", model.architecture, files))
        return False, ("vLLM %s has no native %s: it runs only with the checkpoint's own code (%s), which the plan "
                       "never switches on by itself; review those files, then set trust_remote_code: true under the "
                       "desired state's plan (plan --trust-remote-code), or use a vLLM that implements %s"
                       % (vllm.version or "?", model.architecture, files, model.architecture))
    if not native:
        if vllm.source == "installed":
            return False, "vLLM %s does not support architecture %s" % (vllm.version or "?", model.architecture)
        notes.warnings.append("the vLLM %s release does not list architecture %s" % (vllm.version, model.architecture))
    elif model.remote_code and request.trust_remote_code is None:
        notes.reasons.append("%s is native in vLLM: the model's own code (auto_map) is not needed" % model.architecture)
    return False, None


def _parsers_and_speculation(model: ModelFacts, vllm: VllmFacts, request: PlanRequest,
                             notes: Notes) -> Tuple[Optional[str], Optional[str], Optional[Dict[str, Any]]]:
    """(tool-call parser, reasoning parser, speculative config)."""
    tool, reasoning, rule = default_parsers(model, request.model_id)
    if rule:
        notes.reasons.append("parsers from %s: tool-call %s, reasoning %s" % (rule, tool or "none", reasoning or "none"))
    else:
        notes.reasons.append("no tool-call or reasoning parser known for %s" % model.architecture)
    tool = choose_parser("tool", request.tool_call_parser, tool, vllm, notes.reasons, notes.warnings)
    reasoning = choose_parser("reasoning", request.reasoning_parser, reasoning, vllm, notes.reasons, notes.warnings)
    speculative: Optional[Dict[str, Any]] = None
    if isinstance(request.speculative_config, dict):
        requires(vllm, "--speculative-config", "speculative_config")
        speculative = request.speculative_config
        notes.reasons.append("speculative decoding: %s (override)" % json.dumps(request.speculative_config, sort_keys=True))
    elif model.mtp_layers and request.speculative_config == "auto":
        model_types = cast(Set[str], {model.text_model_type, model.model_type} - {None})
        supported = set(vllm.mtp_model_types or ())
        if has_flag(vllm, "--speculative-config") is False:
            notes.reasons.append("the config names %d MTP module(s), but vLLM %s has no --speculative-config flag: "
                                 "speculative decoding off" % (model.mtp_layers, vllm.version or "?"))
        elif vllm_supports(vllm, "--speculative-config", "speculative_config") and model_types & supported:
            speculative = {"method": "mtp", "num_speculative_tokens": model.mtp_layers}
            notes.reasons.append("the model has %d MTP layer(s) and vLLM %s drafts with them: speculative decoding on"
                                 % (model.mtp_layers, vllm.version or "?"))
        else:
            notes.reasons.append("the config names %d MTP module(s), but vLLM %s has no MTP drafter for model type %s: "
                                 "speculative decoding off"
                                 % (model.mtp_layers, vllm.version or "?", "/".join(sorted(model_types)) or "?"))
    return tool, reasoning, speculative


# --------------------------------------------------------------------------- argv


def _base_argv(ctx: PlanContext) -> List[str]:
    request = ctx.request
    model_ref = request.model_path or request.model_id or ctx.model.path
    if not model_ref:
        raise PlanInputError("no model to serve: give model_path or model_id")
    argv = ["serve", model_ref]
    if request.served_model_name:
        argv += ["--served-model-name", request.served_model_name]
    if request.host:
        argv += ["--host", request.host]
    if request.port:
        argv += ["--port", str(request.port)]
    return argv


def _feature_argv(ctx: PlanContext) -> List[str]:
    argv = []
    if ctx.tool_call_parser:
        argv += ["--enable-auto-tool-choice", "--tool-call-parser", ctx.tool_call_parser]
    if ctx.reasoning_parser:
        argv += ["--reasoning-parser", ctx.reasoning_parser]
    if ctx.speculative_config:
        argv += ["--speculative-config", json.dumps(ctx.speculative_config, sort_keys=True, separators=(",", ":"))]
    if ctx.trust_remote_code:
        argv.append("--trust-remote-code")
    if ctx.request.max_num_batched_tokens:
        argv += ["--max-num-batched-tokens", str(ctx.request.max_num_batched_tokens)]
    if ctx.request.max_num_seqs:
        argv += ["--max-num-seqs", str(ctx.request.max_num_seqs)]
    return argv


def _checked_argv(ctx: PlanContext, planned: List[str]) -> List[str]:
    """The planned argv plus extra_args, every flag checked against the installed vLLM."""
    require_argv(ctx.vllm, planned, "the plan")
    require_argv(ctx.vllm, ctx.request.extra_args, "extra_args")
    return planned + list(ctx.request.extra_args)


def _require_pinned_flags(ctx: PlanContext) -> None:
    """Layout pins the installed vLLM cannot run are refused before any layout is tried."""
    request = ctx.request
    if request.enable_expert_parallel:
        requires(ctx.vllm, "--enable-expert-parallel", "enable_expert_parallel")
    if request.data_parallel_size and request.data_parallel_size > 1:
        requires(ctx.vllm, "--data-parallel-size", "data_parallel_size")
    if request.kv_cache_dtype != "auto":
        requires(ctx.vllm, "--kv-cache-dtype", "kv_cache_dtype")


# --------------------------------------------------------------------------- CPU hosts


def _plan_cpu(ctx: PlanContext, notes: Notes) -> ServingPlan:
    model, request, host = ctx.model, ctx.request, ctx.host
    memory = host.host.memory_bytes if host.host else None
    if not memory:
        raise PlanInputError("CPU plan: the host facts carry no host.memory_bytes; probe the host with "
                             "gpu_topology_info (it reports host memory) or pass the facts JSON")
    quant = model.quantization.method if model.quantization else None
    notes.reasons.append("no GPU on this host: vLLM's CPU backend, weights and KV cache in host RAM")
    errors = []
    if quant not in CPU_QUANTIZATIONS:
        errors.append("%s weights cannot run on vLLM's CPU backend; use a BF16 checkpoint on this host" % quant.upper())
    if request.tensor_parallel_size and request.tensor_parallel_size > 1:
        errors.append("tensor_parallel_size %d: a CPU host serves with TP=1" % request.tensor_parallel_size)
    if request.kv_cache_dtype != "auto":
        requires(ctx.vllm, "--kv-cache-dtype", "kv_cache_dtype")
    per_token = model.kv_cache_bytes_per_token * ctx.kv_dtype_bytes // 2
    target = ctx.target_tokens * per_token
    space_gib = request.cpu_kv_cache_space_gib or max(1, int(math.ceil(target / GIB)))
    kv_bytes = space_gib * GIB
    kv_tokens = kv_bytes // per_token
    budget = int(memory * CPU_MEMORY_FRACTION)
    needed = ctx.weights + kv_bytes + CPU_RUNTIME_BYTES
    notes.reasons.append("host RAM %s x %.2f = %s for weights %s + KV %d GiB (VLLM_CPU_KVCACHE_SPACE) + runtime %s"
                         % (gib_text(memory), CPU_MEMORY_FRACTION, gib_text(budget), gib_text(ctx.weights), space_gib,
                            gib_text(CPU_RUNTIME_BYTES)))
    if request.reserved_memory_bytes:
        budget -= request.reserved_memory_bytes
        notes.reasons.append("%s of it reserved for a model that keeps serving: %s left" % (
            gib_text(request.reserved_memory_bytes), gib_text(max(budget, 0))))
    if kv_tokens < ctx.target_tokens:
        errors.append("VLLM_CPU_KVCACHE_SPACE=%d GiB holds %d tokens, below the KV target of %d; raise it to %d GiB"
                      % (space_gib, kv_tokens, ctx.target_tokens, int(math.ceil(target / GIB))))
    if needed > budget:
        room = budget - ctx.weights - CPU_RUNTIME_BYTES
        largest = (room // per_token) // request.min_sequences if room > 0 else 0
        nearest = ("the largest max_model_len that would fit is %d" % largest) if largest >= 16 else (
            "the weights alone need %s more RAM" % gib_text(ctx.weights + CPU_RUNTIME_BYTES - budget))
        errors.append("needs %s of RAM but %s is usable; %s" % (gib_text(needed), gib_text(budget), nearest))
    enforce_eager = True if request.enforce_eager is None else request.enforce_eager
    if request.enforce_eager is None:
        notes.reasons.append("--enforce-eager: on CPU it skips the torch.compile warm-up, which roughly halves the "
                             "time to healthy")
    argv = _base_argv(ctx)
    argv += ["--max-model-len", str(ctx.max_model_len)]
    if request.kv_cache_dtype != "auto":
        argv += ["--kv-cache-dtype", request.kv_cache_dtype]
    if enforce_eager:
        argv.append("--enforce-eager")
    argv += _feature_argv(ctx)
    env = {"VLLM_CPU_KVCACHE_SPACE": str(space_gib)}
    if request.cpu_threads_bind not in (None, "auto"):
        env["VLLM_CPU_OMP_THREADS_BIND"] = request.cpu_threads_bind
        notes.reasons.append("VLLM_CPU_OMP_THREADS_BIND=%s: %s" % (request.cpu_threads_bind, (
            "the OS schedules vLLM's threads on any core" if request.cpu_threads_bind == "nobind"
            else "vLLM's threads on these cores only")))
    env.update(request.env)
    return ServingPlan(
        fits=not errors and not ctx.unsupported, device="cpu", layout=layout_label("cpu", 1),
        attention=model.attention, quantization=quant, weights_bytes=ctx.weights,
        weights_bytes_estimated=model.weights_bytes_estimated and not request.weights_bytes,
        kv_cache_bytes_per_gpu=None, kv_cache_bytes_per_token=per_token, kv_cache_tokens=int(kv_tokens),
        kv_cache_target_tokens=ctx.target_tokens,
        max_concurrent_sequences=int(kv_tokens // ctx.max_model_len), max_model_len=ctx.max_model_len,
        kv_cache_dtype=request.kv_cache_dtype,
        argv=_checked_argv(ctx, argv), env=env,
        error="; ".join(([ctx.unsupported] if ctx.unsupported else []) + errors) or None,
    )


# --------------------------------------------------------------------------- GPU hosts


def _plan_gpu(ctx: PlanContext, notes: Notes) -> ServingPlan:
    host, model, request, vllm = ctx.host, ctx.model, ctx.request, ctx.vllm
    indices = [g.index for g in host.gpus]
    if request.gpus is not None:
        missing = [i for i in request.gpus if i not in indices]
        if missing:
            raise PlanInputError("gpus %s: no such GPU index on this host (it has %s)" % (missing, indices))
        available = list(request.gpus)
        notes.reasons.append("GPUs limited to %s (override)" % available)
    else:
        available = indices
    if request.reserved_gpus:
        absent = [i for i in request.reserved_gpus if i not in indices]
        if absent:
            raise PlanInputError("reserved_gpus %s: no such GPU index on this host (it has %s)" % (absent, indices))
        taken = [i for i in available if i in request.reserved_gpus]
        if request.gpus is not None and taken:
            raise PlanInputError("gpus %s: %s reserved (reserved_gpus) for a model that keeps serving; pin other GPUs"
                                 % (request.gpus, taken))
        available = [i for i in available if i not in request.reserved_gpus]
        notes.reasons.append("GPUs %s reserved for a model that keeps serving: planned on %s" % (
            ",".join(map(str, sorted(request.reserved_gpus))), ",".join(map(str, available)) or "none"))
        if not available:
            raise PlanInputError("reserved_gpus %s: every GPU of the host is reserved; nothing is left to plan on"
                                 % sorted(request.reserved_gpus))
    _require_pinned_flags(ctx)
    selected = [g for g in host.gpus if g.index in available]
    errors, warnings = hardware_problems(model, selected, vllm, host)
    notes.warnings.extend(warnings)
    default_util = vllm.defaults.get("gpu_memory_utilization") or FALLBACK_GPU_MEMORY_UTILIZATION
    util = request.gpu_memory_utilization or default_util
    notes.reasons.append("gpu_memory_utilization: %g (%s)" % (
        util, "override" if request.gpu_memory_utilization else "vLLM %s default" % (vllm.version or "release")))
    enforce_eager = bool(request.enforce_eager)
    if not enforce_eager and profiles_cuda_graphs(vllm.version):
        notes.warnings.append(
            "vLLM %s reserves its CUDA-graph pools before sizing the KV cache (the default since 0.21); the planner's "
            "memory model, calibrated on older logs, does not count them, so the KV cache may be smaller by their size "
            "(0.1-6 GiB per GPU in public logs)" % vllm.version)

    unknown = sorted({g.name or "unnamed GPU" for g in selected if gpu_spec(g.name) is None})
    predictable = not unknown
    candidates, chosen = [], None
    for tp, dp, ep in layouts(ctx, available, explore=predictable):
        world = tp * dp
        if world > len(available):
            candidates.append(invalid_candidate(tp, dp, ep, "needs %d GPUs, %d available" % (world, len(available))))
            continue
        problems = divisibility_problems(model, tp, dp, ep)
        if problems:
            candidates.append(invalid_candidate(tp, dp, ep, "; ".join(problems)))
            continue
        candidate = evaluate(ctx, tp, dp, ep, _flat(replica_gpu_sets(host, available, tp, dp)), util, enforce_eager)
        if candidate.fits and predictable:
            candidate.performance, _why = _predict(ctx, candidate)
        candidates.append(candidate)
        if candidate.fits and chosen is None:
            chosen = candidate
    if chosen is not None and predictable:
        chosen = _choose_by_numbers(ctx, notes, candidates)
    elif chosen is not None:
        chosen = _fill_host_with_replicas(ctx, notes, candidates, chosen, available, util, enforce_eager)
    best = chosen or closest(candidates)
    plan_ = ServingPlan(
        fits=bool(chosen) and not errors and not ctx.unsupported, device="cuda",
        attention=model.attention, quantization=model.quantization.method if model.quantization else None,
        weights_bytes=ctx.weights, weights_bytes_estimated=model.weights_bytes_estimated and not request.weights_bytes,
        max_model_len=ctx.max_model_len, gpu_memory_utilization=util, kv_cache_dtype=request.kv_cache_dtype,
        kv_cache_target_tokens=ctx.target_tokens, candidates=candidates)
    problems = ([ctx.unsupported] if ctx.unsupported else []) + errors
    if best is None:
        invalid = "no parallel layout is valid for this model on %d GPU(s): %s" % (
            len(available), "; ".join(sorted({c.why_not for c in candidates if c.why_not})))
        plan_.error = "; ".join(problems + [_nearest_option(ctx, candidates, available, util, head=invalid)])
        return plan_
    _fill_layout(ctx, notes, plan_, best, enforce_eager)
    plan_.performance = best.performance if chosen else None
    if not chosen:
        plan_.performance_note = "does not fit: no performance"
    elif not predictable:
        plan_.performance_note = ("no datasheet figures for %s in the GPU table (plugin_utils/gpu_specs.py): no "
                                  "performance; layouts chosen by size alone" % ", ".join(unknown))
        notes.warnings.append(plan_.performance_note)
    if not chosen:
        problems.append(_nearest_option(ctx, candidates, available, util))
    if problems:
        plan_.error = "; ".join(problems)
    return plan_


def _predict(ctx: PlanContext, cand: Candidate) -> Tuple[Optional[Performance], Optional[str]]:
    mem = cast(MemoryPerGpu, cand.memory)
    names = [g.name for g in ctx.host.gpus if g.index in cand.gpu_indices]
    seqs = ctx.request.max_num_seqs or scheduler_defaults(mem.gpu_memory_bytes, names[0] if names else None)[1]
    return predict(ctx.model, ctx.weights, ctx.host, cand, ctx.workload, ctx.kv_dtype_bytes, seqs,
                   ctx.speculative_config)


TIE = 0.02  # predictions within 2 % of the best are a tie, and the smaller TP (then world size) wins


def _choose_by_numbers(ctx: PlanContext, notes: Notes, candidates: Sequence[Candidate]) -> Candidate:
    """The fitting layout the performance model ranks first for the objective."""
    objective, given = ctx.request.objective, ctx.concurrency_given
    ranked = [c for c in candidates if c.fits and c.performance]
    value = {id(c): ranking_value(cast(Performance, c.performance), objective, given) for c in ranked}
    top = max(value.values())
    ties = [c for c in ranked if value[id(c)] >= top * (1 - TIE)]
    chosen = min(ties, key=lambda c: (c.tensor_parallel_size, c.tensor_parallel_size * c.data_parallel_size,
                                      not c.enable_expert_parallel))
    perf = cast(Performance, chosen.performance)
    if objective == "latency":
        measure = "single-stream decode tok/s"
    elif given:
        measure = "output tok/s at concurrency %d" % ctx.workload.concurrency
    else:
        measure = "output tok/s at the load its KV cache holds (--concurrency ranks at a given load)"
    others = sorted((c for c in ranked if c is not chosen), key=lambda c: -value[id(c)])[:3]
    versus = "; ".join("%s %.0f" % (c.label, value[id(c)]) for c in others)
    notes.reasons.append("objective %s: %s ranks first by predicted %s: %.0f%s%s" % (
        objective, chosen.label, measure, value[id(chosen)], " (vs %s)" % versus if versus else "",
        "; within %d %% of the best, the smaller TP wins" % int(TIE * 100) if len(ties) > 1 else ""))
    notes.reasons.append("predicted for %s (%s, %s, %s): %s" % (
        chosen.label, perf.gpu, perf.precision, perf.link, explain(perf)))
    return chosen


def _flat(sets: Sequence[Sequence[int]]) -> List[int]:
    return [index for group in sets for index in group]


def _fill_host_with_replicas(ctx: PlanContext, notes: Notes, candidates: List[Candidate], chosen: Candidate,
                             available: Sequence[int], util: float, enforce_eager: bool) -> Candidate:
    """The throughput objective: as many data-parallel replicas of the chosen TP group as the GPUs
    hold (expert parallelism then spans the replicas); the latency objective or a pinned
    data_parallel_size keeps the chosen layout."""
    request = ctx.request
    tp, ep = chosen.tensor_parallel_size, chosen.enable_expert_parallel
    if request.data_parallel_size is not None:
        return chosen
    if request.objective == "latency":
        notes.reasons.append("objective latency: the smallest layout that fits, no data-parallel replicas")
        return chosen
    most = len(available) // tp
    if most <= 1:
        notes.reasons.append("objective throughput: %s already uses the GPUs there are room for (%d of %d)"
                             % (chosen.label, tp, len(available)))
        return chosen
    if has_flag(ctx.vllm, "--data-parallel-size") is False:
        notes.warnings.append("objective throughput: vLLM %s has no --data-parallel-size flag; one replica on %d of "
                              "%d GPUs" % (ctx.vllm.version or "?", tp, len(available)))
        return chosen
    refused = []
    for dp in range(most, 1, -1):
        problems = divisibility_problems(ctx.model, tp, dp, ep)
        if problems:
            refused.append("DP=%d: %s" % (dp, "; ".join(problems)))
            continue
        replica = evaluate(ctx, tp, dp, ep, _flat(replica_gpu_sets(ctx.host, available, tp, dp)), util, enforce_eager)
        if not replica.fits:
            refused.append("DP=%d: %s" % (dp, replica.why_not))
            continue
        candidates.append(replica)
        notes.reasons.append("objective throughput: %d data-parallel replicas of %s fill %d of %d GPUs in one vLLM "
                             "unit (--data-parallel-size %d, one port)%s" % (
                                 dp, layout_label("cuda", tp, 1, ep), tp * dp, len(available), dp,
                                 "; expert parallelism spans the replicas" if ep else ""))
        if refused:
            notes.reasons.append("more replicas ruled out: %s" % "; ".join(refused))
        return replica
    notes.reasons.append("objective throughput: no data-parallel layout fits (%s); one replica" % "; ".join(refused))
    return chosen


def _nearest_option(ctx: PlanContext, candidates: Sequence[Candidate], available: Sequence[int], util: float,
                    head: Optional[str] = None) -> str:
    """What would fit, said in the user's terms."""
    model, request = ctx.model, ctx.request
    valid = [c for c in candidates if c.valid and c.memory]
    parts = []
    with_room = [c for c in valid if cast(MemoryPerGpu, c.memory).kv_cache_bytes > 0]
    if with_room:
        best = max(with_room, key=lambda c: c.kv_cache_tokens)
        largest = min(best.kv_cache_tokens // request.min_sequences, model.max_position_embeddings or 10 ** 9)
        if largest >= 16:
            parts.append("the largest max_model_len that would fit %d sequences is %d (%s on GPUs %s)"
                         % (request.min_sequences, largest, best.label, best.gpu_indices))
        seqs = best.kv_cache_tokens // ctx.max_model_len
        if seqs >= 1:
            parts.append("or %d sequence(s) of %d tokens" % (seqs, ctx.max_model_len))
    if not parts and valid:
        ref = cast(MemoryPerGpu, valid[0].memory)
        per_gpu_room = ref.cap_bytes - ref.overhead_bytes
        if per_gpu_room > 0:
            need = int(math.ceil(ctx.weights / per_gpu_room))
            parts.append("the weights (%s) need at least %d GPUs of %s at gpu_memory_utilization %g (this plan may "
                         "use %d); use more or larger GPUs or a smaller quantization"
                         % (gib_text(ctx.weights), need, gib_text(ref.gpu_memory_bytes), util, len(available)))
    pinned = request.tensor_parallel_size or request.data_parallel_size or request.enable_expert_parallel is not None
    if pinned:
        free = request.model_copy(update={"tensor_parallel_size": None, "data_parallel_size": None,
                                          "enable_expert_parallel": None})
        sub = resolve(ctx.host, model, ctx.vllm, free, Notes())
        for tp, dp, ep in layouts(sub, available):
            if tp * dp > len(available) or divisibility_problems(model, tp, dp, ep):
                continue
            cand = evaluate(sub, tp, dp, ep, _flat(replica_gpu_sets(ctx.host, available, tp, dp)), util,
                            bool(request.enforce_eager))
            if cand.fits:
                parts.insert(0, "without the pinned layout, %s on GPUs %s fits" % (cand.label, cand.gpu_indices))
                break
    if head is None:
        nearest = closest(candidates)
        head = "does not fit: %s" % nearest.why_not if nearest and nearest.why_not else "does not fit"
        if nearest:
            head = "%s %s" % (nearest.label, head)
    return head + (". Nearest option: " + "; ".join(parts) if parts else "")


def _explain_layout(ctx: PlanContext, notes: Notes, plan_: ServingPlan, cand: Candidate) -> None:
    """Why this layout: smaller ones that do not fit or are ruled out, expert parallelism, GPUs, memory."""
    host, model, request = ctx.host, ctx.model, ctx.request
    tp, dp, ep = cand.tensor_parallel_size, cand.data_parallel_size, cand.enable_expert_parallel
    # Replicas (DP) are chosen after the TP group: the group is the smallest layout that fits.
    group = tp if request.data_parallel_size is None else tp * dp
    smaller = [c for c in plan_.candidates if c.valid and c.memory and c.tensor_parallel_size * c.data_parallel_size
               < group]
    why_tp = "%s on %d GPU(s)" % (cand.label, tp * dp)
    what = "the smallest layout that fits" if group == tp * dp else \
        "%s is the smallest layout that fits" % layout_label("cuda", tp, 1, ep)
    too_small = "; ".join("%s: %s" % (c.label, c.why_not) for c in smaller[:3] if c.why_not and not c.fits)
    if request.tensor_parallel_size:
        why_tp += " (override)"
    elif cand.performance is not None:
        why_tp += ": the fastest predicted layout that fits" + (" (smaller ones do not: %s)" % too_small if too_small else "")
    elif smaller:
        why_tp += ": %s (%s)" % (what, "; ".join("%s: %s" % (c.label, c.why_not) for c in smaller[:3] if c.why_not))
    else:
        why_tp += ": %s" % what
    if host.interconnect in ("pcie", "mixed") and not request.tensor_parallel_size and cand.performance is None:
        why_tp += "; on PCIe every extra TP rank adds all-reduce traffic, so fewer is faster"
    notes.reasons.append(why_tp)
    # Layouts smaller than the chosen one that the model's shape rules out explain the choice too.
    ruled_out = [c for c in plan_.candidates if not c.valid and c.tensor_parallel_size * c.data_parallel_size < group]
    for c in ruled_out:
        if "block size" in (c.why_not or ""):
            notes.reasons.append("not %s: %s" % (c.label, c.why_not))
    shape = [c for c in ruled_out if "block size" not in (c.why_not or "")]
    if shape:
        notes.reasons.append("ruled out by head/KV-head/expert counts: %s" % ", ".join(c.label for c in shape))
    if model.moe:
        if ep and request.enable_expert_parallel is None:
            notes.reasons.append("expert parallelism: %d experts placed whole on %d GPUs (%d each) instead of sliced, "
                                 "and all-to-all replaces the experts' all-reduce" % (
                                     model.moe.num_experts, tp * dp, model.moe.num_experts // (tp * dp)))
            without = divisibility_problems(model, tp, dp, False)
            if without:
                notes.reasons.append("%s without expert parallelism is invalid: %s"
                                     % (layout_label("cuda", tp, dp, False), "; ".join(without)))
        elif not ep and tp * dp > 1:
            if request.enable_expert_parallel is None and has_flag(ctx.vllm, "--enable-expert-parallel") is False:
                notes.reasons.append("expert parallelism off: vLLM %s has no --enable-expert-parallel flag, so experts "
                                     "are sliced over the TP ranks" % (ctx.vllm.version or "?"))
            else:
                notes.reasons.append("expert parallelism off%s: experts are sliced over the TP ranks"
                                     % (" (override)" if request.enable_expert_parallel is False else ""))
        elif tp * dp == 1:
            notes.reasons.append("MoE model on one GPU: expert parallelism not needed")
    links = describe_links(host, cand.gpu_indices)
    nodes = {str(numa_of(host, i)) for i in cand.gpu_indices}
    where = "GPUs %s" % cand.gpu_indices
    if cand.numa_node is not None:
        where += " on NUMA node %d" % cand.numa_node
    else:
        where += " across NUMA nodes %s" % ",".join(sorted(nodes))
    if links:
        where += " (%s)" % links
    if not request.gpus and len(cand.gpu_indices) < len(host.gpus):
        where += ": the best-connected set on a single NUMA node" if cand.numa_node is not None else ""
    notes.reasons.append(where)
    if dp > 1:
        notes.reasons.append("replicas: %s" % "; ".join(
            "DP rank %d on GPUs %s (%s)" % (rank, group, "NUMA node %s" % cand.replica_numa_nodes[rank]
                                            if cand.replica_numa_nodes[rank] is not None else "across nodes")
            for rank, group in enumerate(cand.replica_gpu_indices)))
    spanning = [group for rank, group in enumerate(cand.replica_gpu_indices) if cand.replica_numa_nodes[rank] is None]
    # Only a TP group that spans nodes pays for it (its all-reduce); replicas on different nodes do not.
    if spanning and len(host.numa_nodes) > 1 and tp > 1:
        if host.interconnect == "nvlink":
            notes.reasons.append("the TP group spans NUMA nodes; its all-reduce runs over NVLink, so that costs little")
        else:
            notes.warnings.append("the TP group on GPUs %s spans NUMA nodes: its all-reduce crosses the inter-socket "
                                  "link" % spanning[0])
    mem = cast(MemoryPerGpu, cand.memory)
    notes.reasons.append("memory per GPU: cap %s (%g x %s) = weights %s + overhead %s + KV cache %s -> %d tokens, "
                         "%d sequences of %d" % (
                             gib_text(mem.cap_bytes), cast(float, plan_.gpu_memory_utilization), gib_text(mem.gpu_memory_bytes),
                             gib_text(mem.weights_bytes), gib_text(mem.overhead_bytes), gib_text(mem.kv_cache_bytes),
                             cand.kv_cache_tokens, cast(int, plan_.max_concurrent_sequences), ctx.max_model_len))
    notes.reasons.append("attention %s: %d KV bytes per token per GPU%s" % (
        model.attention.upper(), cast(int, plan_.kv_cache_bytes_per_token),
        " (MLA latent KV is replicated on every TP rank)" if model.attention == "mla" else
        " (%d KV heads over %d rank(s))" % (model.num_kv_heads, min(tp, model.num_kv_heads))))
    if draft_kv_layers(ctx):
        notes.reasons.append("speculative decoding: its %d MTP layer(s) keep a KV cache of their own, counted in the "
                             "bytes per token" % draft_kv_layers(ctx))


def _fill_layout(ctx: PlanContext, notes: Notes, plan_: ServingPlan, cand: Candidate, enforce_eager: bool) -> None:
    """Copy the chosen candidate into the plan and write its argv and env."""
    request = ctx.request
    tp, dp, ep = cand.tensor_parallel_size, cand.data_parallel_size, cand.enable_expert_parallel
    plan_.layout = cand.label
    plan_.tensor_parallel_size, plan_.data_parallel_size, plan_.enable_expert_parallel = tp, dp, ep
    plan_.gpu_indices, plan_.numa_node = cand.gpu_indices, cand.numa_node
    plan_.replica_gpu_indices, plan_.replica_numa_nodes = cand.replica_gpu_indices, cand.replica_numa_nodes
    mem = cast(MemoryPerGpu, cand.memory)
    plan_.gpu_memory_bytes = mem.gpu_memory_bytes
    plan_.weights_bytes_per_gpu, plan_.overhead_bytes_per_gpu = mem.weights_bytes, mem.overhead_bytes
    plan_.kv_cache_bytes_per_gpu = mem.kv_cache_bytes
    plan_.kv_cache_bytes_per_token = kv_bytes_per_token_per_gpu(ctx.model, tp, ctx.kv_dtype_bytes, draft_kv_layers(ctx))
    plan_.kv_cache_tokens = cand.kv_cache_tokens
    plan_.max_concurrent_sequences = cand.kv_cache_tokens // ctx.max_model_len
    _explain_layout(ctx, notes, plan_, cand)

    argv = _base_argv(ctx)
    argv += ["--tensor-parallel-size", str(tp)]
    if dp > 1:
        argv += ["--data-parallel-size", str(dp)]
    if ep:
        argv.append("--enable-expert-parallel")
    argv += ["--max-model-len", str(ctx.max_model_len), "--gpu-memory-utilization", "%g" % cast(float, plan_.gpu_memory_utilization)]
    if request.kv_cache_dtype != "auto":
        argv += ["--kv-cache-dtype", request.kv_cache_dtype]
    if enforce_eager:
        argv.append("--enforce-eager")
    argv += _feature_argv(ctx)

    env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in cand.gpu_indices)}
    notes.reasons.append("GPU pinning: CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=%s, so CUDA numbers GPUs as "
                         "nvidia-smi does" % env["CUDA_VISIBLE_DEVICES"])
    _numa_binding(ctx, notes, plan_, argv)
    overridden = sorted(set(request.env) & set(env))
    if overridden:
        notes.warnings.append("env override replaces the planned %s" % ", ".join(overridden))
    env.update(request.env)
    plan_.argv, plan_.env = _checked_argv(ctx, argv), env


def _numa_binding(ctx: PlanContext, notes: Notes, plan_: ServingPlan, argv: List[str]) -> None:
    host, request, vllm = ctx.host, ctx.request, ctx.vllm
    node = plan_.numa_node
    if request.numa_bind == "off":
        notes.reasons.append("NUMA binding: off (override)")
        return
    if plan_.data_parallel_size > 1 and len(host.numa_nodes) > 1:
        _numa_binding_replicas(ctx, notes, plan_, argv)
        return
    if node is None:
        notes.reasons.append("NUMA binding: none (the GPU set spans NUMA nodes or its node is unknown)")
        return
    if len(host.numa_nodes) <= 1 and request.numa_bind == "auto":
        notes.reasons.append("NUMA binding: not needed, the host has one NUMA node")
        return
    has_numa_flag = vllm_supports(vllm, "--numa-bind", "numa_bind")
    if request.numa_bind == "vllm" and not has_numa_flag:
        raise PlanInputError("numa_bind=vllm: vLLM %s has no --numa-bind flag; use numa_bind=numactl"
                             % (vllm.version or "?"))
    if request.numa_bind in ("auto", "vllm") and has_numa_flag:
        argv.append("--numa-bind")
        plan_.numa_binding = "vllm"
        notes.reasons.append("NUMA binding: vLLM's --numa-bind pins each worker to its GPU's node %d CPUs and memory"
                             % node)
        return
    plan_.numa_binding = "numactl"
    plan_.exec_prefix = ["numactl", "--cpunodebind=%d" % node, "--preferred=%d" % node]
    notes.reasons.append("NUMA binding: numactl --cpunodebind=%d --preferred=%d (vLLM %s has no --numa-bind); "
                         "'preferred' keeps memory local without failing when the node fills"
                         % (node, node, vllm.version or "?"))


def _numa_binding_replicas(ctx: PlanContext, notes: Notes, plan_: ServingPlan, argv: List[str]) -> None:
    """Replicas on several nodes: only vLLM's own --numa-bind binds each worker to its GPU's node;
    one numactl prefix would pin every replica to one node."""
    request, vllm = ctx.request, ctx.vllm
    if any(node is None for node in plan_.replica_numa_nodes):
        notes.reasons.append("NUMA binding: none (a replica's TP group spans NUMA nodes or its node is unknown)")
        return
    has_numa_flag = vllm_supports(vllm, "--numa-bind", "numa_bind")
    if request.numa_bind == "numactl" or not has_numa_flag:
        if request.numa_bind == "vllm":
            raise PlanInputError("numa_bind=vllm: vLLM %s has no --numa-bind flag; use numa_bind=off or upgrade vLLM"
                                 % (vllm.version or "?"))
        notes.warnings.append("NUMA binding: none; the %d replicas sit on NUMA nodes %s and one numactl prefix would "
                              "bind them all to one node (vLLM %s has no --numa-bind)" % (
                                  plan_.data_parallel_size, sorted({n for n in plan_.replica_numa_nodes if n is not None}), vllm.version or "?"))
        return
    argv.append("--numa-bind")
    plan_.numa_binding = "vllm"
    notes.reasons.append("NUMA binding: vLLM's --numa-bind pins each replica's workers to their GPUs' node (%s)"
                         % ", ".join("DP rank %d: node %s" % (r, n) for r, n in enumerate(plan_.replica_numa_nodes)))


# --------------------------------------------------------------------------- the entry point


def plan(host: Union[HostFacts, Dict[str, Any]], model: Union[ModelFacts, Dict[str, Any]],
         vllm: Union[VllmFacts, Dict[str, Any], None] = None,
         request: Union[PlanRequest, Dict[str, Any], None] = None) -> ServingPlan:
    """Make a serving plan. All arguments may be dicts (validated here) or the contract models."""
    host = parse_facts(HostFacts, host, "host facts")
    model = parse_facts(ModelFacts, model, "model facts")
    vllm = parse_facts(VllmFacts, vllm, "vLLM facts") if vllm is not None else release_vllm_facts()
    if request is None:
        request = PlanRequest()
    elif not isinstance(request, PlanRequest):
        if not isinstance(request, dict):
            raise PlanInputError("plan request: expected a mapping of overrides")
        request = parse_facts(PlanRequest, request, "plan request")
    if request.nodes and request.nodes > 1:
        raise PlanInputError("nodes %d: a serving group is planned over its hosts - give each host's facts "
                             "(llmops-vllm plan with one --topo-file per host)" % request.nodes)
    notes = Notes()
    ctx = resolve(host, model, vllm, request, notes)
    device = request.device
    if device == "auto":
        device = "cuda" if host.gpus else "cpu"
    if device == "cuda" and not host.gpus:
        raise PlanInputError("device cuda: the host facts list no GPU")
    result = _plan_gpu(ctx, notes) if device == "cuda" else _plan_cpu(ctx, notes)
    if device == "cpu":
        result.performance_note = "device cpu: the performance model covers GPUs only"
    result.objective = request.objective
    result.model_id = request.model_id
    result.model_path = request.model_path or model.path
    result.served_model_name = request.served_model_name
    result.host, result.port = request.host, request.port
    result.tool_call_parser, result.reasoning_parser = ctx.tool_call_parser, ctx.reasoning_parser
    result.speculative_config = ctx.speculative_config
    result.vllm = {"distribution": vllm.distribution, "version": vllm.version, "source": vllm.source}
    result.reasons = notes.reasons
    result.warnings = notes.warnings
    if not result.fits and not result.error:
        result.error = "does not fit"
    return result
