# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Planner rules: memory and overhead math, divisibility, hardware support, parsers.

Plain functions over the contract models (plugin_utils/contracts.py); docs/ARCHITECTURE.md
("Planner rules") says why each rule holds, docs/planner.md documents the memory model.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import List, Optional, Sequence, Set, Tuple

from ansible_collections.llmops.vllm.plugins.plugin_utils.contracts import (
    Gpu, HostFacts, ModelFacts, PlanInputError, VllmFacts, has_flag, requires)

GIB = 1 << 30
DEFAULT_MAX_MODEL_LEN_CAP = 32768
# vLLM's own default when the installed version is unknown (0.9 before the 0.92 releases).
FALLBACK_GPU_MEMORY_UTILIZATION = 0.92

# Runtime overhead per GPU (see runtime_overhead_bytes): what vLLM's memory profile reserves besides
# weights and KV cache. The five fitted constants come from real vLLM startup logs
# (tests/fixtures/vllm_logs; a minimax fit by tools/fit_constants.py memory on at most two thirds of them);
# docs/planner.md lists the logs, the fit and the residuals. None is keyed to a model, GPU or log.
NON_TORCH_FRACTION = 0.0176          # fitted: V0 engine: CUDA context, cuBLAS workspaces, allocator slack, per byte of GPU memory
NON_TORCH_FRACTION_V1 = 0.00323       # fitted: the V1 engine (0.8+) counts only the non-torch memory that grew after its start
COMMUNICATION_BYTES = int(0.41 * GIB)  # fitted: NCCL / custom all-reduce / all-to-all buffers per doubling of the group
ACTIVATION_FACTOR = 0.90              # fitted: share of the physical activation estimate alive at the peak
LOGIT_BYTES = 10.24                   # fitted: sampler bytes per (request x vocabulary entry) in its dummy run
DENSE_INTERMEDIATE_RATIO = 3.5        # assumed MLP width / hidden when the facts carry no intermediate size
V1_ENGINE_SINCE = (0, 8)              # vLLM's V1 engine is the default from 0.8


@dataclass(frozen=True)
class MemoryConstants:
    """The fitted constants of :func:`runtime_overhead_bytes` (tools/fit_constants.py refits them)."""
    non_torch_fraction: float = NON_TORCH_FRACTION
    non_torch_fraction_v1: float = NON_TORCH_FRACTION_V1
    communication_gib: float = COMMUNICATION_BYTES / GIB
    activation_factor: float = ACTIVATION_FACTOR
    logit_bytes: float = LOGIT_BYTES


# vLLM's scheduler defaults for `vllm serve` (arg_utils, 0.10 and later): GPUs of 70 GiB or more
# (A100 excepted) get 8192 batched tokens and 1024 sequences, smaller ones 2048 and 256.
LARGE_GPU_BYTES = 70 * GIB
SCHEDULER_DEFAULTS_LARGE = (8192, 1024)
SCHEDULER_DEFAULTS_SMALL = (2048, 256)
DEFAULT_MAX_NUM_BATCHED_TOKENS, DEFAULT_MAX_NUM_SEQS = SCHEDULER_DEFAULTS_LARGE

# CPU-only hosts (vLLM's CPU backend): weights and KV live in host RAM.
CPU_RUNTIME_BYTES = 2 * GIB           # torch, oneDNN, the API server (measured ~2.4 GiB PSS in total)
CPU_MEMORY_FRACTION = 0.9             # leave the rest of the host's RAM to the OS

# Links between two GPUs from best to worst, as nvidia-smi names them.
LINK_ORDER = ("NV", "PIX", "PXB", "PHB", "NODE", "SYS")

# Quantization methods and the compute capability they need natively.
FP8_NATIVE_CC = (8, 9)
NVFP4_CC_MAJORS = (10, 12)
CPU_QUANTIZATIONS = (None, "awq", "gptq", "compressed-tensors")


def gib_text(n: float) -> str:
    """Bytes as ``1.5 GiB`` (or MiB below one GiB) for reasons and errors."""
    if abs(n) < GIB:
        return "%.1f MiB" % (n / (1 << 20))
    return "%.1f GiB" % (n / GIB)


def compute_capability(value: object) -> Optional[Tuple[int, int]]:
    """(major, minor) of a compute capability string such as "12.0"; None when unknown."""
    if not value:
        return None
    match = re.match(r"^(\d+)\.(\d+)", str(value))
    return (int(match.group(1)), int(match.group(2))) if match else None


def link_rank(link: Optional[str]) -> Tuple[int, int]:
    """Lower is better: NV# (more links first) < PIX < PXB < PHB < NODE < SYS < unknown."""
    if link is None:
        return (len(LINK_ORDER), 0)
    link = link.strip().upper()
    if link.startswith("NV") and link[2:].isdigit():
        return (0, -int(link[2:]))
    for rank, name in enumerate(LINK_ORDER):
        if link == name:
            return (rank, 0)
    return (len(LINK_ORDER), 0)


def kv_bytes_per_token_per_gpu(model: ModelFacts, tensor_parallel_size: int, kv_dtype_bytes: int,
                               draft_layers: int = 0) -> int:
    """KV-cache bytes one token costs on each GPU of a tensor-parallel group.

    GQA/MHA KV heads are split over min(TP, kv_heads) ranks (they replicate when TP > kv_heads);
    MLA's latent KV is replicated on every rank. ``draft_layers``: the MTP layers speculative
    decoding runs, which keep a KV cache of their own, shaped like the model's layers.
    """
    whole = model.kv_cache_bytes_per_token * kv_dtype_bytes // 2  # the contract's figure is bf16
    if draft_layers and model.num_layers:
        whole = whole * (model.num_layers + draft_layers) // model.num_layers
    if model.attention == "mla":
        return whole
    split = min(tensor_parallel_size, model.num_kv_heads)
    return -(-whole // split)


# vLLM counts CUDA-graph memory in its profile (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS) by default from 0.21 on.
CUDA_GRAPH_PROFILING_SINCE = (0, 21)


def profiles_cuda_graphs(version: Optional[str]) -> bool:
    """Whether this vLLM version reserves CUDA-graph memory before sizing the KV cache (False when unknown)."""
    match = re.match(r"^(\d+)\.(\d+)", version or "")
    if not match:
        return False
    return (int(match.group(1)), int(match.group(2))) >= CUDA_GRAPH_PROFILING_SINCE


def scheduler_defaults(gpu_memory_bytes: int, gpu_name: Optional[str]) -> Tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) that `vllm serve` picks for this GPU when not given."""
    if gpu_memory_bytes >= LARGE_GPU_BYTES and "A100" not in (gpu_name or "").upper():
        return SCHEDULER_DEFAULTS_LARGE
    return SCHEDULER_DEFAULTS_SMALL


def v1_engine(version: Optional[str]) -> bool:
    """Whether this vLLM version runs the V1 engine by default (True when unknown: current releases)."""
    match = re.match(r"^(\d+)\.(\d+)", version or "")
    if not match:
        return True
    return (int(match.group(1)), int(match.group(2))) >= V1_ENGINE_SINCE


def activation_bytes(model: ModelFacts, tensor_parallel_size: int, expert_parallel: bool,
                     max_num_batched_tokens: int) -> int:
    """The physical estimate of the profile run's activation peak, before the activation factor.

    Per batched token, in bf16: three hidden-sized tensors (residual, normed input, attention output)
    and the MLP's gate/up output plus its activation (3 x intermediate per GPU); for MoE layers the
    fused-MoE caches of every routed expert (top-k x (3 x expert intermediate per GPU + hidden)) plus
    the shared expert.
    """
    hidden = model.hidden_size or 4096
    tp = max(tensor_parallel_size, 1)
    moe = model.moe
    if moe and moe.intermediate_size:
        per_expert = moe.intermediate_size if expert_parallel else moe.intermediate_size / tp
        width = 3 * hidden + (moe.experts_per_token or 1) * (3 * per_expert + hidden)
        width += 3 * (moe.shared_expert_intermediate_size or 0) / tp
    else:
        width = 3 * hidden + 3 * DENSE_INTERMEDIATE_RATIO * hidden / tp
    return int(max_num_batched_tokens * width * 2)


def runtime_overhead_bytes(model: ModelFacts, tensor_parallel_size: int, group_size: int, gpu_memory_bytes: int,
                           max_num_batched_tokens: int, max_num_seqs: int, expert_parallel: bool = False,
                           vllm_version: Optional[str] = None, constants: Optional[MemoryConstants] = None) -> int:
    """What vLLM reserves per GPU besides weights and KV cache (calibrated; docs/planner.md).

    non-torch fraction x GPU memory (its V1 value from vLLM 0.8: the V1 engine counts only the
    non-torch memory that grew after its start, not the CUDA context) + communication bytes x log2
    of the group this GPU exchanges with (its TP group; with expert parallelism the whole TP x DP
    group: NCCL's rings and trees grow by channels per doubling, not per peer) + activation factor x
    :func:`activation_bytes` + logit bytes x max_num_seqs x vocabulary (the sampler's dummy run).
    CUDA graphs are captured after the KV cache is sized in the logged versions, so their pools come
    out of the (1 - gpu_memory_utilization) headroom, not from here.
    """
    k = constants or MemoryConstants()
    fraction = k.non_torch_fraction_v1 if v1_engine(vllm_version) else k.non_torch_fraction
    overhead = fraction * gpu_memory_bytes + k.communication_gib * GIB * math.log2(max(group_size, 1))
    overhead += k.activation_factor * activation_bytes(model, tensor_parallel_size, expert_parallel,
                                                       max_num_batched_tokens)
    overhead += k.logit_bytes * max_num_seqs * (model.vocab_size or 32000)
    return int(overhead)


def divisibility_problems(model: ModelFacts, tensor_parallel_size: int, data_parallel_size: int, expert_parallel: bool) -> List[str]:
    """Why this parallel layout cannot load the model (empty list: it can)."""
    tp = tensor_parallel_size
    problems: List[str] = []
    if model.num_attention_heads % tp:
        problems.append("TP=%d does not divide the %d attention heads" % (tp, model.num_attention_heads))
    if model.attention != "mla":
        kv = model.num_kv_heads
        if (kv >= tp and kv % tp) or (kv < tp and tp % kv):
            problems.append("TP=%d and the %d KV heads do not divide each other" % (tp, kv))
    quant = model.quantization
    if expert_parallel:
        if not model.moe:
            problems.append("expert parallelism needs a mixture-of-experts model")
        elif model.moe.num_experts % (tp * data_parallel_size):
            problems.append("%d experts do not spread evenly over %d expert-parallel ranks"
                            % (model.moe.num_experts, tp * data_parallel_size))
    if quant and quant.block_size and model.moe and model.moe.intermediate_size and not expert_parallel:
        per_gpu = model.moe.intermediate_size / tp
        if per_gpu != int(per_gpu) or int(per_gpu) % quant.block_size:
            problems.append(
                "TP=%d splits each expert's %d-wide intermediate into %s per GPU, not a multiple of the "
                "%s block size %d (expert parallelism keeps experts whole)"
                % (tp, model.moe.intermediate_size, ("%g" % per_gpu), quant.method.upper(), quant.block_size))
    return problems


def hardware_problems(model: ModelFacts, gpus: Sequence[Gpu], vllm: VllmFacts, host: HostFacts) -> Tuple[List[str], List[str]]:
    """(errors, warnings) about running this checkpoint on these GPUs with this vLLM."""
    errors: List[str] = []
    warnings: List[str] = []
    quant = model.quantization.method if model.quantization else None
    capabilities = [(g, compute_capability(g.compute_capability)) for g in gpus]
    unknown = [g.index for g, cc in capabilities if cc is None]
    if unknown and quant in ("fp8", "nvfp4", "mxfp4"):
        warnings.append("compute capability of GPU(s) %s unknown: cannot check %s support" % (unknown, quant.upper()))
    for gpu, cc in capabilities:
        if cc is None:
            continue
        label = "GPU %d (%s, compute capability %d.%d)" % (gpu.index, gpu.name or "?", cc[0], cc[1])
        if quant == "nvfp4" and cc[0] not in NVFP4_CC_MAJORS:
            errors.append("NVFP4 weights need Blackwell GPUs (compute capability 10.x or 12.x); %s cannot run them. "
                          "Use an FP8 or BF16 checkpoint of this model on this host" % label)
            break
        if quant == "fp8" and cc < FP8_NATIVE_CC:
            if cc < (8, 0):
                errors.append("FP8 weights need compute capability 8.0 or newer; %s is older" % label)
                break
            warnings.append("%s has no native FP8: vLLM falls back to slower weight-only FP8 (Marlin) kernels" % label)
            break
    if vllm.quantization_methods and quant and quant not in ("nvfp4",):
        known = set(vllm.quantization_methods)
        if quant not in known and quant.replace("-", "_") not in known:
            errors.append("vLLM %s does not list quantization method %r" % (vllm.version or "?", quant))
    driver_cuda, build_cuda = compute_capability(host.cuda_version), compute_capability(vllm.cuda_version)
    if driver_cuda and build_cuda:
        if driver_cuda[0] < build_cuda[0]:
            errors.append("the NVIDIA driver supports CUDA %s but vLLM %s is built for CUDA %s: upgrade the driver "
                          "or install a vLLM build for CUDA %d" % (host.cuda_version, vllm.version,
                                                                   vllm.cuda_version, driver_cuda[0]))
        elif driver_cuda < build_cuda:
            warnings.append("the NVIDIA driver supports CUDA %s, older than vLLM's CUDA %s: minor-version "
                            "compatibility applies; a newer driver is safer" % (host.cuda_version, vllm.cuda_version))
    return errors, warnings


# --------------------------------------------------------------------------- parsers


# (architecture or model_type, model id pattern or None, tool-call parser, reasoning parser); the
# first matching row wins. Model ids decide between generations that share an architecture.
PARSER_RULES = (
    ("MiniMaxM2ForCausalLM", None, "minimax_m2", "minimax_m2_append_think"),
    ("KimiK25ForConditionalGeneration", None, "kimi_k2", "kimi_k2"),
    ("kimi_k2", r"(?i)instruct", "kimi_k2", None),
    ("kimi_k2", None, "kimi_k2", "kimi_k2"),
    ("DeepseekV3ForCausalLM", r"(?i)kimi-k2.*instruct", "kimi_k2", None),
    ("DeepseekV3ForCausalLM", r"(?i)kimi-k2", "kimi_k2", "kimi_k2"),
    ("DeepseekV3ForCausalLM", r"(?i)r1", "deepseek_v3", "deepseek_r1"),
    ("DeepseekV3ForCausalLM", r"(?i)v3\.1", "deepseek_v31", "deepseek_v3"),
    ("DeepseekV3ForCausalLM", None, "deepseek_v3", None),
    ("DeepseekV32ForCausalLM", None, "deepseek_v32", "deepseek_v3"),
    ("Qwen3MoeForCausalLM", r"(?i)coder", "qwen3_coder", None),
    ("Qwen3ForCausalLM", r"(?i)coder", "qwen3_coder", None),
    ("Qwen3MoeForCausalLM", r"(?i)instruct-2507", "hermes", None),
    ("Qwen3ForCausalLM", r"(?i)instruct-2507", "hermes", None),
    ("Qwen3MoeForCausalLM", None, "hermes", "qwen3"),
    ("Qwen3ForCausalLM", None, "hermes", "qwen3"),
    ("Qwen2ForCausalLM", r"(?i)qwq", "hermes", "deepseek_r1"),
    ("Qwen2ForCausalLM", None, "hermes", None),
    ("Qwen2MoeForCausalLM", None, "hermes", None),
    ("LlamaForCausalLM", r"(?i)llama-?3", "llama3_json", None),
    ("Llama4ForConditionalGeneration", None, "llama4_pythonic", None),
    ("MistralForCausalLM", None, "mistral", None),
    ("Mistral3ForConditionalGeneration", r"(?i)magistral", "mistral", "mistral"),
    ("Mistral3ForConditionalGeneration", None, "mistral", None),
    ("Glm4MoeForCausalLM", r"(?i)glm-?4\.7", "glm47", "glm47"),
    ("Glm4MoeForCausalLM", None, "glm45", "glm45"),
    ("GptOssForCausalLM", None, "openai", "openai_gptoss"),
)


def emittable_parsers() -> Tuple[Set[str], Set[str]]:
    """Every (tool, reasoning) parser name the planner can choose on its own."""
    tools = {row[2] for row in PARSER_RULES if row[2]}
    reasoning = {row[3] for row in PARSER_RULES if row[3]}
    return tools, reasoning


def default_parsers(model: ModelFacts, model_id: Optional[str]) -> Tuple[Optional[str], Optional[str], Optional[str]]:
    """(tool_call_parser, reasoning_parser, rule) for a model, before checking the install."""
    keys = (model.architecture, model.text_model_type, model.model_type)
    for arch, pattern, tool, reasoning in PARSER_RULES:
        if arch in keys and (pattern is None or (model_id and re.search(pattern, model_id))):
            rule = arch + (" + id ~ /%s/" % pattern if pattern else "")
            return tool, reasoning, rule
    return None, None, None


# The flags each parser kind needs in argv.
PARSER_FLAGS = {"tool": ("--enable-auto-tool-choice", "--tool-call-parser"), "reasoning": ("--reasoning-parser",)}


def choose_parser(kind: str, requested: Optional[str], automatic: Optional[str], vllm: VllmFacts, reasons: List[str],
                  warnings: List[str]) -> Optional[str]:
    """The parser of ``kind`` ("tool" or "reasoning") to serve with, or None; explained in reasons.

    A pinned parser the installed vLLM lacks (name or flag) is refused; an automatic one is dropped
    with a warning.
    """
    label = "tool-call parser" if kind == "tool" else "reasoning parser"
    option = "tool_call_parser" if kind == "tool" else "reasoning_parser"
    installed = vllm.tool_parsers if kind == "tool" else vllm.reasoning_parsers
    if requested is not None:
        if requested.lower() in ("none", "off", ""):
            reasons.append("%s: disabled by override" % label)
            return None
        if installed is not None and requested not in installed:
            raise PlanInputError("%s %r is not one of vLLM %s's: %s" % (
                label, requested, vllm.version or "?", ", ".join(sorted(installed))))
        for flag in PARSER_FLAGS[kind]:
            requires(vllm, flag, option)
        reasons.append("%s: %s (override)" % (label, requested))
        return requested
    if automatic is None:
        return None
    if installed is not None and automatic not in installed:
        warnings.append("%s %s suits this model but vLLM %s does not have it: not enabled"
                        % (label, automatic, vllm.version or "?"))
        return None
    missing = [flag for flag in PARSER_FLAGS[kind] if has_flag(vllm, flag) is False]
    if missing:
        warnings.append("%s %s suits this model but vLLM %s has no %s flag: not enabled"
                        % (label, automatic, vllm.version or "?", " / ".join(missing)))
        return None
    return automatic


def vllm_supports(vllm: VllmFacts, flag: str, capability: str) -> bool:
    """Whether the installed vLLM has ``flag``: every source that knows (its flags, the capability
    vllm_info derived) must say yes; False when none knows."""
    known = [value for value in (has_flag(vllm, flag), vllm.capabilities.get(capability)) if value is not None]
    return bool(known) and all(known)
