# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The serving planner: host facts + model facts (+ the installed vLLM's facts) + overrides -> a plan.

Pure functions over pydantic models; nothing here touches a host. Every automatic choice is
explained in ``reasons`` and can be overridden through :class:`PlanRequest`. A plan that cannot fit
comes back with ``fits: false`` and an ``error`` naming what is missing and the nearest option that
would fit; input that makes no sense raises :class:`PlanInputError`.

The rules are those of docs/ARCHITECTURE.md ("Planner rules"); the memory model is documented in
docs/planner.md and in :func:`runtime_overhead_bytes`.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from typing import Any, Dict, List, Literal, Optional, Union

try:
    from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
    from pydantic import model_validator  # pylint: disable=unused-import  # for desired_state
    PYDANTIC_IMPORT_ERROR = None
except ImportError as _exc:  # keep Ansible able to load the plugin; plan() says what to install
    PYDANTIC_IMPORT_ERROR = _exc
    BaseModel, ValidationError = object, ValueError

    def ConfigDict(**kwargs):
        return kwargs

    def Field(default=None, **kwargs):
        return default

    def field_validator(*args, **kwargs):
        return lambda function: function

    model_validator = field_validator

from ansible_collections.llmops.vllm.plugins.plugin_utils.vllm_release import RELEASE_FACTS

GIB = 1 << 30
DEFAULT_MAX_MODEL_LEN_CAP = 32768
DEFAULT_MIN_SEQUENCES = 4
# vLLM's own default when the installed version is unknown (0.9 before the 0.92 releases).
FALLBACK_GPU_MEMORY_UTILIZATION = 0.92

# Runtime overhead per GPU (see runtime_overhead_bytes): what vLLM needs besides weights and KV.
CUDA_CONTEXT_BYTES = 1 * GIB          # CUDA context, cuBLAS/cuDNN workspaces, allocator slack
COMMUNICATION_BYTES = GIB // 2        # NCCL + custom all-reduce buffers, only when world size > 1
CUDA_GRAPH_BYTES = GIB // 2           # CUDA graph pools, unless --enforce-eager
ACTIVATION_BYTES_PER_TOKEN_PER_HIDDEN = 24  # ~12 bf16 hidden-sized tensors alive at the peak
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
DEFAULT_MAX_NUM_SEQS = 256
LOGIT_BYTES = 4                       # the sampler works on fp32 logits

# CPU-only hosts (vLLM's CPU backend): weights and KV live in host RAM.
CPU_RUNTIME_BYTES = 2 * GIB           # torch, oneDNN, the API server (measured ~2.4 GiB PSS in total)
CPU_MEMORY_FRACTION = 0.9             # leave the rest of the host's RAM to the OS

# Links between two GPUs from best to worst, as nvidia-smi names them.
LINK_ORDER = ("NV", "PIX", "PXB", "PHB", "NODE", "SYS")

# Quantization methods and the compute capability they need natively.
FP8_NATIVE_CC = (8, 9)
NVFP4_CC_MAJORS = (10, 12)
CPU_QUANTIZATIONS = (None, "awq", "gptq", "compressed-tensors")


class PlanInputError(ValueError):
    """The facts or the overrides given to the planner are not usable (bad input, exit code 1)."""


class _Facts(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Gpu(_Facts):
    index: int
    name: Optional[str] = None
    uuid: Optional[str] = None
    bus_id: Optional[str] = None
    memory_bytes: Optional[int] = None
    numa_node: Optional[int] = None
    compute_capability: Optional[str] = None


class HostResources(_Facts):
    memory_bytes: Optional[int] = None
    cpu_count: Optional[int] = None


class HostFacts(_Facts):
    """What gpu_topology_info / `llmops-vllm topology` report (the contract's `topology` keys)."""
    gpus: List[Gpu] = Field(default_factory=list)
    links: List[List[str]] = Field(default_factory=list)
    interconnect: str = "none"
    numa_nodes: Dict[str, Dict[str, Any]] = Field(default_factory=dict)
    driver_version: Optional[str] = None
    cuda_version: Optional[str] = None  # the newest CUDA the driver supports (nvidia-smi)
    host: Optional[HostResources] = None


class Moe(_Facts):
    num_experts: int
    experts_per_token: Optional[int] = None
    intermediate_size: Optional[int] = None


class Quantization(_Facts):
    method: str
    format: Optional[str] = None
    block_size: Optional[int] = None
    weight_bits: Optional[float] = None
    kv_cache: Optional[str] = None


class ModelFacts(_Facts):
    """The `model` contract (model_info / `llmops-vllm model`)."""
    architecture: str
    model_type: Optional[str] = None
    text_model_type: Optional[str] = None
    attention: Literal["mla", "gqa", "mqa", "mha"]
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    kv_cache_bytes_per_token: int
    hidden_size: Optional[int] = None
    vocab_size: Optional[int] = None
    moe: Optional[Moe] = None
    quantization: Optional[Quantization] = None
    dtype: Optional[str] = None
    mtp_layers: int = 0
    remote_code: bool = False
    max_position_embeddings: Optional[int] = None
    weights_bytes: int
    weights_bytes_estimated: bool = False
    expert_weights_fraction: float = 0.0
    path: Optional[str] = None


class VllmFacts(_Facts):
    """What the installed vLLM can do (vllm_info), or the recorded release (vllm_release.py)."""
    distribution: Optional[str] = None
    version: Optional[str] = None
    source: str = "installed"
    tool_parsers: Optional[List[str]] = None
    reasoning_parsers: Optional[List[str]] = None
    architectures: Optional[List[str]] = None
    quantization_methods: Optional[List[str]] = None
    mtp_model_types: Optional[List[str]] = None
    capabilities: Dict[str, Optional[bool]] = Field(default_factory=dict)
    defaults: Dict[str, Any] = Field(default_factory=dict)
    cuda_version: Optional[str] = None


class PlanRequest(BaseModel):
    """Everything a user may pin; None means "let the planner choose"."""
    model_config = ConfigDict(extra="forbid")

    model_id: Optional[str] = None
    model_path: Optional[str] = None
    served_model_name: Optional[str] = None
    host: Optional[str] = None
    port: Optional[int] = Field(default=None, ge=1, le=65535)
    device: Literal["auto", "cuda", "cpu"] = "auto"
    max_model_len: Optional[int] = Field(default=None, ge=16)
    tensor_parallel_size: Optional[int] = Field(default=None, ge=1)
    data_parallel_size: Optional[int] = Field(default=None, ge=1)
    enable_expert_parallel: Optional[bool] = None
    gpu_memory_utilization: Optional[float] = Field(default=None, gt=0, le=1)
    kv_cache_dtype: str = "auto"
    gpus: Optional[List[int]] = None
    gpu_memory_bytes: Optional[int] = Field(default=None, gt=0)
    min_sequences: int = Field(default=DEFAULT_MIN_SEQUENCES, ge=1)
    weights_bytes: Optional[int] = Field(default=None, gt=0)
    tool_call_parser: Optional[str] = None
    reasoning_parser: Optional[str] = None
    speculative_config: Union[Literal["auto", "off"], Dict[str, Any]] = "auto"
    numa_bind: Literal["auto", "vllm", "numactl", "off"] = "auto"
    enforce_eager: Optional[bool] = None
    trust_remote_code: Optional[bool] = None
    max_num_batched_tokens: Optional[int] = Field(default=None, ge=1)
    max_num_seqs: Optional[int] = Field(default=None, ge=1)
    cpu_kv_cache_space_gib: Optional[int] = Field(default=None, ge=1)
    extra_args: List[str] = Field(default_factory=list)
    env: Dict[str, str] = Field(default_factory=dict)

    @field_validator("kv_cache_dtype")
    @classmethod
    def _kv_dtype(cls, value):
        if value not in ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla", "fp8_inc"):
            raise ValueError("kv_cache_dtype must be auto, bfloat16, float16 or an fp8 variant (fp8, fp8_e4m3, fp8_e5m2)")
        return value

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, value):
        if value is not None and (not value or len(set(value)) != len(value)):
            raise ValueError("gpus must be a non-empty list of distinct GPU indices")
        return value


class MemoryPerGpu(BaseModel):
    gpu_memory_bytes: int
    cap_bytes: int
    weights_bytes: int
    overhead_bytes: int
    kv_cache_bytes: int


class Candidate(BaseModel):
    """One parallel layout the planner considered, for the reviewer's table."""
    tensor_parallel_size: int
    data_parallel_size: int
    enable_expert_parallel: bool
    gpu_indices: List[int] = Field(default_factory=list)
    numa_node: Optional[int] = None
    valid: bool = True
    fits: bool = False
    kv_cache_tokens: int = 0
    memory: Optional[MemoryPerGpu] = None
    why_not: Optional[str] = None


class ServingPlan(BaseModel):
    """The plan contract (docs/ARCHITECTURE.md, `llmops-vllm plan --json`)."""
    fits: bool
    device: Literal["cuda", "cpu"]
    model_id: Optional[str] = None
    model_path: Optional[str] = None
    served_model_name: Optional[str] = None
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    enable_expert_parallel: bool = False
    gpu_indices: List[int] = Field(default_factory=list)
    numa_node: Optional[int] = None
    attention: str
    quantization: Optional[str] = None
    weights_bytes: int
    weights_bytes_estimated: bool = False
    weights_bytes_per_gpu: Optional[int] = None
    overhead_bytes_per_gpu: Optional[int] = None
    kv_cache_bytes_per_gpu: Optional[int] = None
    kv_cache_bytes_per_token: Optional[int] = None
    kv_cache_tokens: Optional[int] = None
    kv_cache_target_tokens: Optional[int] = None
    max_concurrent_sequences: Optional[int] = None
    max_model_len: int
    gpu_memory_utilization: Optional[float] = None
    gpu_memory_bytes: Optional[int] = None
    kv_cache_dtype: str = "auto"
    tool_call_parser: Optional[str] = None
    reasoning_parser: Optional[str] = None
    speculative_config: Optional[Dict[str, Any]] = None
    numa_binding: Optional[str] = None
    exec_prefix: List[str] = Field(default_factory=list)
    argv: List[str] = Field(default_factory=list)
    env: Dict[str, str] = Field(default_factory=dict)
    vllm: Dict[str, Optional[str]] = Field(default_factory=dict)
    candidates: List[Candidate] = Field(default_factory=list)
    reasons: List[str] = Field(default_factory=list)
    warnings: List[str] = Field(default_factory=list)
    error: Optional[str] = None


# --------------------------------------------------------------------------- helpers


def _gib(n):
    if abs(n) < GIB:
        return "%.1f MiB" % (n / (1 << 20))
    return "%.1f GiB" % (n / GIB)


def _validation_message(exc, what):
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ())) or what
        parts.append("%s: %s" % (loc, err.get("msg")))
    return "%s: %s" % (what, "; ".join(parts))


def _require_pydantic():
    if PYDANTIC_IMPORT_ERROR is not None:
        raise PlanInputError("the planner needs pydantic >= 2 on the controller (pip install 'pydantic>=2'): %s"
                             % PYDANTIC_IMPORT_ERROR)


def parse_facts(model_cls, data, what):
    """Validate a facts document, turning pydantic's errors into one readable PlanInputError."""
    _require_pydantic()
    if isinstance(data, model_cls):
        return data
    if not isinstance(data, dict):
        raise PlanInputError("%s: expected a JSON object, got %s" % (what, type(data).__name__))
    try:
        return model_cls.model_validate(data)
    except ValidationError as exc:
        raise PlanInputError(_validation_message(exc, what))


def release_vllm_facts():
    """The recorded facts of the current vLLM release (used when the host's install is unknown)."""
    return VllmFacts.model_validate(RELEASE_FACTS)


def _cc(value):
    if not value:
        return None
    match = re.match(r"^(\d+)\.(\d+)", str(value))
    return (int(match.group(1)), int(match.group(2))) if match else None


def link_rank(link):
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


def kv_bytes_per_token_per_gpu(model, tensor_parallel_size, kv_dtype_bytes):
    """KV-cache bytes one token costs on each GPU of a tensor-parallel group.

    GQA/MHA KV heads are split over min(TP, kv_heads) ranks (they replicate when TP > kv_heads);
    MLA's latent KV is replicated on every rank.
    """
    whole = model.kv_cache_bytes_per_token * kv_dtype_bytes // 2  # the contract's figure is bf16
    if model.attention == "mla":
        return whole
    split = min(tensor_parallel_size, model.num_kv_heads)
    return -(-whole // split)


def runtime_overhead_bytes(model, world_size, enforce_eager, max_num_batched_tokens, max_num_seqs):
    """What vLLM needs per GPU besides weights and KV cache (documented in docs/planner.md).

    CUDA context and workspaces (1 GiB), communication buffers when GPUs talk (0.5 GiB), CUDA
    graph pools unless eager (0.5 GiB), the activation peak of one batch
    (max_num_batched_tokens x hidden_size x 24 bytes), and the sampler's fp32 logits
    (max_num_seqs x vocab_size x 4 bytes).
    """
    hidden = model.hidden_size or 4096
    vocab = model.vocab_size or 32000
    overhead = CUDA_CONTEXT_BYTES
    if world_size > 1:
        overhead += COMMUNICATION_BYTES
    if not enforce_eager:
        overhead += CUDA_GRAPH_BYTES
    overhead += max_num_batched_tokens * hidden * ACTIVATION_BYTES_PER_TOKEN_PER_HIDDEN
    overhead += max_num_seqs * vocab * LOGIT_BYTES
    return int(overhead)


def divisibility_problems(model, tensor_parallel_size, data_parallel_size, expert_parallel):
    """Why this parallel layout cannot load the model (empty list: it can)."""
    tp = tensor_parallel_size
    problems = []
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


def hardware_problems(model, gpus, vllm, host):
    """(errors, warnings) about running this checkpoint on these GPUs with this vLLM."""
    errors, warnings = [], []
    quant = model.quantization.method if model.quantization else None
    capabilities = [(g, _cc(g.compute_capability)) for g in gpus]
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
    driver_cuda, build_cuda = _cc(host.cuda_version), _cc(vllm.cuda_version)
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


def emittable_parsers():
    """Every (tool, reasoning) parser name the planner can choose on its own."""
    tools = {row[2] for row in PARSER_RULES if row[2]}
    reasoning = {row[3] for row in PARSER_RULES if row[3]}
    return tools, reasoning


def default_parsers(model, model_id):
    """(tool_call_parser, reasoning_parser, rule) for a model, before checking the install."""
    keys = (model.architecture, model.text_model_type, model.model_type)
    for arch, pattern, tool, reasoning in PARSER_RULES:
        if arch in keys and (pattern is None or (model_id and re.search(pattern, model_id))):
            rule = arch + (" + id ~ /%s/" % pattern if pattern else "")
            return tool, reasoning, rule
    return None, None, None


def _choose_parser(kind, requested, automatic, installed, vllm, reasons, warnings):
    label = "tool-call parser" if kind == "tool" else "reasoning parser"
    if requested is not None:
        if requested.lower() in ("none", "off", ""):
            reasons.append("%s: disabled by override" % label)
            return None
        if installed is not None and requested not in installed:
            raise PlanInputError("%s %r is not one of vLLM %s's: %s" % (
                label, requested, vllm.version or "?", ", ".join(sorted(installed))))
        reasons.append("%s: %s (override)" % (label, requested))
        return requested
    if automatic is None:
        return None
    if installed is not None and automatic not in installed:
        warnings.append("%s %s suits this model but vLLM %s does not have it: not enabled"
                        % (label, automatic, vllm.version or "?"))
        return None
    return automatic


# --------------------------------------------------------------------------- GPU sets


def _numa_of(host, index):
    for gpu in host.gpus:
        if gpu.index == index:
            return gpu.numa_node
    return None


def _pair_links(host, indices):
    order = [g.index for g in host.gpus]
    links = []
    if not host.links:
        return links
    for a, b in itertools.combinations(indices, 2):
        try:
            links.append(host.links[order.index(a)][order.index(b)])
        except (ValueError, IndexError):
            links.append(None)
    return links


def choose_gpu_set(host, available, count):
    """The best `count` GPUs: on one NUMA node when possible, then the best worst-case link, then
    the best links overall, then the lowest indices."""
    def score(combo):
        nodes = {_numa_of(host, i) for i in combo}
        node_count = len(nodes) + (1 if None in nodes and len(nodes) > 1 else 0)
        ranks = [link_rank(link) for link in _pair_links(host, combo)]
        worst = max(ranks) if ranks else (0, 0)
        total = (sum(r[0] for r in ranks), sum(r[1] for r in ranks)) if ranks else (0, 0)
        return (node_count, worst, total, combo)
    if count >= len(available):
        return sorted(available)
    return list(min(itertools.combinations(sorted(available), count), key=score))


def _describe_links(host, indices):
    links = [link for link in _pair_links(host, indices) if link]
    if not links:
        return ""
    worst = max(links, key=link_rank)
    best = min(links, key=link_rank)
    return "links %s..%s" % (best, worst) if best != worst else "links %s" % best


# --------------------------------------------------------------------------- the plan


class _Context(object):
    """Inputs resolved once: defaults applied, every choice explained."""

    def __init__(self, host, model, vllm, request):
        self.host, self.model, self.vllm, self.request = host, model, vllm, request
        self.reasons, self.warnings = [], []


def _resolve_common(ctx):
    model, request, vllm = ctx.model, ctx.request, ctx.vllm
    ctx.weights = request.weights_bytes or model.weights_bytes
    if request.weights_bytes:
        ctx.reasons.append("weights: %s (override)" % _gib(ctx.weights))
    elif model.weights_bytes_estimated:
        ctx.reasons.append("weights: %s, estimated from the config (no safetensors index)" % _gib(ctx.weights))
        ctx.warnings.append("weights size is estimated from config.json; pass --weights-bytes or the model's "
                            "model.safetensors.index.json for an exact plan")
    else:
        ctx.reasons.append("weights: %s from the checkpoint" % _gib(ctx.weights))
    model_max = model.max_position_embeddings
    if request.max_model_len:
        if model_max and request.max_model_len > model_max:
            ctx.warnings.append("max_model_len %d exceeds the model's max_position_embeddings %d"
                                % (request.max_model_len, model_max))
        ctx.max_model_len = request.max_model_len
        ctx.reasons.append("max_model_len: %d (override)" % ctx.max_model_len)
    else:
        ctx.max_model_len = min(model_max or DEFAULT_MAX_MODEL_LEN_CAP, DEFAULT_MAX_MODEL_LEN_CAP)
        ctx.reasons.append("max_model_len: %d = min(model maximum %s, %d)"
                           % (ctx.max_model_len, model_max or "unknown", DEFAULT_MAX_MODEL_LEN_CAP))
    ctx.kv_dtype_bytes = 1 if request.kv_cache_dtype.startswith("fp8") else 2
    ctx.target_tokens = request.min_sequences * ctx.max_model_len
    ctx.reasons.append("KV target: %d tokens = %d sequences x max_model_len %d"
                       % (ctx.target_tokens, request.min_sequences, ctx.max_model_len))
    if model.quantization and model.quantization.kv_cache == "fp8" and request.kv_cache_dtype == "auto":
        ctx.reasons.append("the checkpoint carries FP8 KV-cache scales: --kv-cache-dtype fp8 would double KV capacity")
    if vllm.source == "recorded":
        ctx.warnings.append("no facts from the host's vLLM: parser names and flags are those of the vLLM %s release"
                            % (vllm.version or "?"))
    archs = set(vllm.architectures or ())
    ctx.trust_remote_code = False
    if request.trust_remote_code is not None:
        ctx.trust_remote_code = request.trust_remote_code
    elif archs and model.architecture not in archs:
        if model.remote_code:
            ctx.trust_remote_code = True
            ctx.warnings.append("vLLM %s has no native %s: the plan runs the model's own code (--trust-remote-code)"
                                % (vllm.version or "?", model.architecture))
        elif vllm.source == "installed":
            ctx.unsupported = "vLLM %s does not support architecture %s" % (vllm.version or "?", model.architecture)
        else:
            ctx.warnings.append("the vLLM %s release does not list architecture %s" % (vllm.version, model.architecture))
    elif model.remote_code:
        ctx.reasons.append("%s is native in vLLM: the model's own code (auto_map) is not needed" % model.architecture)


def _parsers_and_speculation(ctx):
    model, request, vllm = ctx.model, ctx.request, ctx.vllm
    tool, reasoning, rule = default_parsers(model, request.model_id)
    if rule:
        ctx.reasons.append("parsers from %s: tool-call %s, reasoning %s" % (rule, tool or "none", reasoning or "none"))
    else:
        ctx.reasons.append("no tool-call or reasoning parser known for %s" % model.architecture)
    ctx.tool_call_parser = _choose_parser("tool", request.tool_call_parser, tool, vllm.tool_parsers,
                                          vllm, ctx.reasons, ctx.warnings)
    ctx.reasoning_parser = _choose_parser("reasoning", request.reasoning_parser, reasoning, vllm.reasoning_parsers,
                                          vllm, ctx.reasons, ctx.warnings)
    ctx.speculative_config = None
    if isinstance(request.speculative_config, dict):
        ctx.speculative_config = request.speculative_config
        ctx.reasons.append("speculative decoding: %s (override)" % json.dumps(request.speculative_config, sort_keys=True))
    elif model.mtp_layers and request.speculative_config == "auto":
        model_types = {model.text_model_type, model.model_type} - {None}
        supported = set(vllm.mtp_model_types or ())
        if vllm.capabilities.get("speculative_config") and model_types & supported:
            ctx.speculative_config = {"method": "mtp", "num_speculative_tokens": model.mtp_layers}
            ctx.reasons.append("the model has %d MTP layer(s) and vLLM %s drafts with them: speculative decoding on"
                               % (model.mtp_layers, vllm.version or "?"))
        else:
            ctx.reasons.append("the config names %d MTP module(s), but vLLM %s has no MTP drafter for model type %s: "
                               "speculative decoding off"
                               % (model.mtp_layers, vllm.version or "?", "/".join(sorted(model_types)) or "?"))


def _plan_cpu(ctx):
    model, request, host = ctx.model, ctx.request, ctx.host
    memory = host.host.memory_bytes if host.host else None
    if not memory:
        raise PlanInputError("CPU plan: the host facts carry no host.memory_bytes; probe the host with "
                             "gpu_topology_info (it reports host memory) or pass the facts JSON")
    quant = model.quantization.method if model.quantization else None
    ctx.reasons.append("no GPU on this host: vLLM's CPU backend, weights and KV cache in host RAM")
    errors = []
    if quant not in CPU_QUANTIZATIONS:
        errors.append("%s weights cannot run on vLLM's CPU backend; use a BF16 checkpoint on this host" % quant.upper())
    if request.tensor_parallel_size and request.tensor_parallel_size > 1:
        errors.append("tensor_parallel_size %d: a CPU host serves with TP=1" % request.tensor_parallel_size)
    per_token = model.kv_cache_bytes_per_token * ctx.kv_dtype_bytes // 2
    target = ctx.target_tokens * per_token
    space_gib = request.cpu_kv_cache_space_gib or max(1, int(math.ceil(target / GIB)))
    kv_bytes = space_gib * GIB
    kv_tokens = kv_bytes // per_token
    budget = int(memory * CPU_MEMORY_FRACTION)
    needed = ctx.weights + kv_bytes + CPU_RUNTIME_BYTES
    ctx.reasons.append("host RAM %s x %.2f = %s for weights %s + KV %d GiB (VLLM_CPU_KVCACHE_SPACE) + runtime %s"
                       % (_gib(memory), CPU_MEMORY_FRACTION, _gib(budget), _gib(ctx.weights), space_gib,
                          _gib(CPU_RUNTIME_BYTES)))
    if kv_tokens < ctx.target_tokens:
        errors.append("VLLM_CPU_KVCACHE_SPACE=%d GiB holds %d tokens, below the KV target of %d; raise it to %d GiB"
                      % (space_gib, kv_tokens, ctx.target_tokens, int(math.ceil(target / GIB))))
    if needed > budget:
        room = budget - ctx.weights - CPU_RUNTIME_BYTES
        largest = (room // per_token) // request.min_sequences if room > 0 else 0
        nearest = ("the largest max_model_len that would fit is %d" % largest) if largest >= 16 else (
            "the weights alone need %s more RAM" % _gib(ctx.weights + CPU_RUNTIME_BYTES - budget))
        errors.append("needs %s of RAM but %s is usable; %s" % (_gib(needed), _gib(budget), nearest))
    enforce_eager = True if request.enforce_eager is None else request.enforce_eager
    if request.enforce_eager is None:
        ctx.reasons.append("--enforce-eager: on CPU it skips the torch.compile warm-up, which roughly halves the time to healthy")
    argv = _base_argv(ctx)
    argv += ["--max-model-len", str(ctx.max_model_len)]
    if request.kv_cache_dtype != "auto":
        argv += ["--kv-cache-dtype", request.kv_cache_dtype]
    if enforce_eager:
        argv.append("--enforce-eager")
    argv += _feature_argv(ctx)
    env = {"VLLM_CPU_KVCACHE_SPACE": str(space_gib)}
    env.update(request.env)
    return ServingPlan(
        fits=not errors and not getattr(ctx, "unsupported", None), device="cpu",
        attention=model.attention, quantization=quant, weights_bytes=ctx.weights,
        weights_bytes_estimated=model.weights_bytes_estimated and not request.weights_bytes,
        kv_cache_bytes_per_gpu=None, kv_cache_bytes_per_token=per_token, kv_cache_tokens=int(kv_tokens),
        kv_cache_target_tokens=ctx.target_tokens,
        max_concurrent_sequences=int(kv_tokens // ctx.max_model_len), max_model_len=ctx.max_model_len,
        kv_cache_dtype=request.kv_cache_dtype,
        argv=argv + list(request.extra_args), env=env,
        error="; ".join(([ctx.unsupported] if getattr(ctx, "unsupported", None) else []) + errors) or None,
    )


def _base_argv(ctx):
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


def _feature_argv(ctx):
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


def _evaluate(ctx, tp, dp, ep, gpu_indices, util, enforce_eager):
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
    overhead = runtime_overhead_bytes(
        model, world, enforce_eager,
        ctx.request.max_num_batched_tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS,
        ctx.request.max_num_seqs or DEFAULT_MAX_NUM_SEQS)
    kv = cap - weights_per_gpu - overhead
    per_token = kv_bytes_per_token_per_gpu(model, tp, ctx.kv_dtype_bytes)
    tokens = max(kv, 0) // per_token
    nodes = {_numa_of(host, i) for i in gpu_indices}
    candidate = Candidate(
        tensor_parallel_size=tp, data_parallel_size=dp, enable_expert_parallel=ep,
        gpu_indices=list(gpu_indices), numa_node=nodes.pop() if len(nodes) == 1 else None,
        fits=kv > 0 and tokens >= ctx.target_tokens, kv_cache_tokens=int(tokens),
        memory=MemoryPerGpu(gpu_memory_bytes=gpu_memory, cap_bytes=cap, weights_bytes=weights_per_gpu,
                            overhead_bytes=overhead, kv_cache_bytes=max(kv, 0)))
    if kv <= 0:
        candidate.why_not = "weights %s + overhead %s exceed the %s cap per GPU" % (
            _gib(weights_per_gpu), _gib(overhead), _gib(cap))
    elif not candidate.fits:
        candidate.why_not = "KV room for %d tokens, below the target %d" % (tokens, ctx.target_tokens)
    return candidate


def _layouts(ctx, available):
    """Parallel layouts to try, in order of preference: the smallest world size first (least
    all-reduce traffic, which dominates on PCIe), then the smallest TP."""
    request, model = ctx.request, ctx.model
    n = len(available)
    tps = [request.tensor_parallel_size] if request.tensor_parallel_size else list(range(1, n + 1))
    dps = [request.data_parallel_size] if request.data_parallel_size else [1]
    layouts = []
    for tp in tps:
        for dp in dps:
            if request.enable_expert_parallel is not None:
                ep = request.enable_expert_parallel
            else:
                ep = bool(model.moe) and tp * dp > 1
            layouts.append((tp * dp, tp, dp, ep))
    return [(tp, dp, ep) for _ignored, tp, dp, ep in sorted(layouts)]


def _plan_gpu(ctx):
    host, model, request, vllm = ctx.host, ctx.model, ctx.request, ctx.vllm
    indices = [g.index for g in host.gpus]
    if request.gpus is not None:
        missing = [i for i in request.gpus if i not in indices]
        if missing:
            raise PlanInputError("gpus %s: no such GPU index on this host (it has %s)" % (missing, indices))
        available = list(request.gpus)
        ctx.reasons.append("GPUs limited to %s (override)" % available)
    else:
        available = indices
    selected = [g for g in host.gpus if g.index in available]
    errors, warnings = hardware_problems(model, selected, vllm, host)
    ctx.warnings.extend(warnings)
    default_util = vllm.defaults.get("gpu_memory_utilization") or FALLBACK_GPU_MEMORY_UTILIZATION
    util = request.gpu_memory_utilization or default_util
    ctx.reasons.append("gpu_memory_utilization: %g (%s)" % (
        util, "override" if request.gpu_memory_utilization else "vLLM %s default" % (vllm.version or "release")))
    enforce_eager = bool(request.enforce_eager)

    candidates, chosen = [], None
    for tp, dp, ep in _layouts(ctx, available):
        world = tp * dp
        if world > len(available):
            candidates.append(Candidate(tensor_parallel_size=tp, data_parallel_size=dp, enable_expert_parallel=ep,
                                        valid=False, why_not="needs %d GPUs, %d available" % (world, len(available))))
            continue
        problems = divisibility_problems(model, tp, dp, ep)
        if problems:
            candidates.append(Candidate(tensor_parallel_size=tp, data_parallel_size=dp, enable_expert_parallel=ep,
                                        valid=False, why_not="; ".join(problems)))
            continue
        gpu_set = choose_gpu_set(host, available, world)
        candidate = _evaluate(ctx, tp, dp, ep, gpu_set, util, enforce_eager)
        candidates.append(candidate)
        if candidate.fits and chosen is None:
            chosen = candidate
    best = chosen or _closest(candidates)
    plan = ServingPlan(
        fits=bool(chosen) and not errors and not getattr(ctx, "unsupported", None), device="cuda",
        attention=model.attention, quantization=model.quantization.method if model.quantization else None,
        weights_bytes=ctx.weights, weights_bytes_estimated=model.weights_bytes_estimated and not request.weights_bytes,
        max_model_len=ctx.max_model_len, gpu_memory_utilization=util, kv_cache_dtype=request.kv_cache_dtype,
        kv_cache_target_tokens=ctx.target_tokens, candidates=candidates)
    problems = ([ctx.unsupported] if getattr(ctx, "unsupported", None) else []) + errors
    if best is None:
        invalid = "no parallel layout is valid for this model on %d GPU(s): %s" % (
            len(available), "; ".join(sorted({c.why_not for c in candidates if c.why_not})))
        plan.error = "; ".join(problems + [_nearest_option(ctx, candidates, available, util, head=invalid)])
        return plan
    _fill_layout(ctx, plan, best, enforce_eager)
    if not chosen:
        problems.append(_nearest_option(ctx, candidates, available, util))
    if problems:
        plan.error = "; ".join(problems)
    return plan


def _closest(candidates):
    valid = [c for c in candidates if c.valid and c.memory]
    if not valid:
        return None
    # Most KV room first; among layouts with none, the one whose weights come closest to fitting.
    return max(valid, key=lambda c: (c.kv_cache_tokens,
                                     c.memory.cap_bytes - c.memory.weights_bytes - c.memory.overhead_bytes))


def _nearest_option(ctx, candidates, available, util, head=None):
    """What would fit, said in the user's terms."""
    model, request = ctx.model, ctx.request
    valid = [c for c in candidates if c.valid and c.memory]
    parts = []
    with_room = [c for c in valid if c.memory.kv_cache_bytes > 0]
    if with_room:
        best = max(with_room, key=lambda c: c.kv_cache_tokens)
        largest = min(best.kv_cache_tokens // request.min_sequences, model.max_position_embeddings or 10 ** 9)
        if largest >= 16:
            parts.append("the largest max_model_len that would fit %d sequences is %d (TP=%d%s on GPUs %s)"
                         % (request.min_sequences, largest, best.tensor_parallel_size,
                            "+EP" if best.enable_expert_parallel else "", best.gpu_indices))
        seqs = best.kv_cache_tokens // ctx.max_model_len
        if seqs >= 1:
            parts.append("or %d sequence(s) of %d tokens" % (seqs, ctx.max_model_len))
    if not parts and valid:
        ref = valid[0].memory
        per_gpu_room = ref.cap_bytes - ref.overhead_bytes
        if per_gpu_room > 0:
            need = int(math.ceil(ctx.weights / per_gpu_room))
            parts.append("the weights (%s) need at least %d GPUs of %s at gpu_memory_utilization %g (this plan may "
                         "use %d); use more or larger GPUs or a smaller quantization"
                         % (_gib(ctx.weights), need, _gib(ref.gpu_memory_bytes), util, len(available)))
    pinned = request.tensor_parallel_size or request.data_parallel_size or request.enable_expert_parallel is not None
    if pinned:
        free = request.model_copy(update={"tensor_parallel_size": None, "data_parallel_size": None,
                                          "enable_expert_parallel": None})
        sub = _Context(ctx.host, model, ctx.vllm, free)
        _resolve_common(sub)
        sub.reasons, sub.warnings = [], []
        for tp, dp, ep in _layouts(sub, available):
            if tp * dp > len(available) or divisibility_problems(model, tp, dp, ep):
                continue
            cand = _evaluate(sub, tp, dp, ep, choose_gpu_set(ctx.host, available, tp * dp), util,
                             bool(request.enforce_eager))
            if cand.fits:
                parts.insert(0, "without the pinned layout, TP=%d%s%s on GPUs %s fits" % (
                    tp, " DP=%d" % dp if dp > 1 else "", "+EP" if ep else "", cand.gpu_indices))
                break
    if head is None:
        closest = _closest(candidates)
        head = "does not fit: %s" % closest.why_not if closest and closest.why_not else "does not fit"
        if closest:
            head = "TP=%d%s %s" % (closest.tensor_parallel_size, "+EP" if closest.enable_expert_parallel else "", head)
    return head + (". Nearest option: " + "; ".join(parts) if parts else "")


def _fill_layout(ctx, plan, cand, enforce_eager):
    host, model, request, vllm = ctx.host, ctx.model, ctx.request, ctx.vllm
    tp, dp, ep = cand.tensor_parallel_size, cand.data_parallel_size, cand.enable_expert_parallel
    plan.tensor_parallel_size, plan.data_parallel_size, plan.enable_expert_parallel = tp, dp, ep
    plan.gpu_indices, plan.numa_node = cand.gpu_indices, cand.numa_node
    mem = cand.memory
    plan.gpu_memory_bytes = mem.gpu_memory_bytes
    plan.weights_bytes_per_gpu, plan.overhead_bytes_per_gpu = mem.weights_bytes, mem.overhead_bytes
    plan.kv_cache_bytes_per_gpu = mem.kv_cache_bytes
    plan.kv_cache_bytes_per_token = kv_bytes_per_token_per_gpu(model, tp, ctx.kv_dtype_bytes)
    plan.kv_cache_tokens = cand.kv_cache_tokens
    plan.max_concurrent_sequences = cand.kv_cache_tokens // ctx.max_model_len

    pcie = host.interconnect in ("pcie", "mixed")
    smaller = [c for c in plan.candidates if c.valid and c.memory and c.tensor_parallel_size * c.data_parallel_size
               < tp * dp]
    why_tp = "TP=%d%s%s on %d GPU(s)" % (tp, " x DP=%d" % dp if dp > 1 else "", " + EP" if ep else "", tp * dp)
    if request.tensor_parallel_size:
        why_tp += " (override)"
    elif smaller:
        why_tp += ": the smallest layout that fits (%s)" % "; ".join(
            "TP=%d: %s" % (c.tensor_parallel_size, c.why_not) for c in smaller[:3] if c.why_not)
    else:
        why_tp += ": the smallest layout that fits"
    if pcie and not request.tensor_parallel_size:
        why_tp += "; on PCIe every extra TP rank adds all-reduce traffic, so fewer is faster"
    ctx.reasons.append(why_tp)
    # Layouts smaller than the chosen one that the model's shape rules out explain the choice too.
    ruled_out = [c for c in plan.candidates if not c.valid and c.tensor_parallel_size * c.data_parallel_size < tp * dp]
    for c in ruled_out:
        if "block size" in (c.why_not or ""):
            ctx.reasons.append("not TP=%d%s: %s"
                               % (c.tensor_parallel_size, "+EP" if c.enable_expert_parallel else "", c.why_not))
    shape = [c for c in ruled_out if "block size" not in (c.why_not or "")]
    if shape:
        ctx.reasons.append("ruled out by head/KV-head/expert counts: %s" % ", ".join(
            "TP=%d" % c.tensor_parallel_size for c in shape))
    if model.moe:
        if ep and request.enable_expert_parallel is None:
            ctx.reasons.append("expert parallelism: %d experts placed whole on %d GPUs (%d each) instead of sliced, "
                               "and all-to-all replaces the experts' all-reduce" % (
                                   model.moe.num_experts, tp * dp, model.moe.num_experts // (tp * dp)))
            without = divisibility_problems(model, tp, dp, False)
            if without:
                ctx.reasons.append("TP=%d without expert parallelism is invalid: %s" % (tp, "; ".join(without)))
        elif not ep and tp * dp > 1:
            ctx.reasons.append("expert parallelism off%s: experts are sliced over the TP ranks"
                               % (" (override)" if request.enable_expert_parallel is False else ""))
        elif tp * dp == 1:
            ctx.reasons.append("MoE model on one GPU: expert parallelism not needed")
    links = _describe_links(host, cand.gpu_indices)
    nodes = {str(_numa_of(host, i)) for i in cand.gpu_indices}
    where = "GPUs %s" % cand.gpu_indices
    if cand.numa_node is not None:
        where += " on NUMA node %d" % cand.numa_node
    else:
        where += " across NUMA nodes %s" % ",".join(sorted(nodes))
    if links:
        where += " (%s)" % links
    if not request.gpus and len(cand.gpu_indices) < len(host.gpus):
        where += ": the best-connected set on a single NUMA node" if cand.numa_node is not None else ""
    ctx.reasons.append(where)
    if cand.numa_node is None and len(host.numa_nodes) > 1 and tp > 1:
        if host.interconnect == "nvlink":
            ctx.reasons.append("the TP group spans NUMA nodes; its all-reduce runs over NVLink, so that costs little")
        else:
            ctx.warnings.append("the TP group spans NUMA nodes: its all-reduce crosses the inter-socket link")
    ctx.reasons.append("memory per GPU: cap %s (%g x %s) = weights %s + overhead %s + KV cache %s -> %d tokens, "
                       "%d sequences of %d" % (
                           _gib(mem.cap_bytes), plan.gpu_memory_utilization, _gib(mem.gpu_memory_bytes),
                           _gib(mem.weights_bytes), _gib(mem.overhead_bytes), _gib(mem.kv_cache_bytes),
                           cand.kv_cache_tokens, plan.max_concurrent_sequences, ctx.max_model_len))
    ctx.reasons.append("attention %s: %d KV bytes per token per GPU%s" % (
        model.attention.upper(), plan.kv_cache_bytes_per_token,
        " (MLA latent KV is replicated on every TP rank)" if model.attention == "mla" else
        " (%d KV heads over %d rank(s))" % (model.num_kv_heads, min(tp, model.num_kv_heads))))

    argv = _base_argv(ctx)
    argv += ["--tensor-parallel-size", str(tp)]
    if dp > 1:
        argv += ["--data-parallel-size", str(dp)]
    if ep:
        argv.append("--enable-expert-parallel")
    argv += ["--max-model-len", str(ctx.max_model_len), "--gpu-memory-utilization", "%g" % plan.gpu_memory_utilization]
    if request.kv_cache_dtype != "auto":
        argv += ["--kv-cache-dtype", request.kv_cache_dtype]
    if enforce_eager:
        argv.append("--enforce-eager")
    argv += _feature_argv(ctx)

    env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in cand.gpu_indices)}
    ctx.reasons.append("GPU pinning: CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=%s, so CUDA numbers GPUs as "
                       "nvidia-smi does" % env["CUDA_VISIBLE_DEVICES"])
    _numa_binding(ctx, plan, argv)
    overridden = sorted(set(request.env) & set(env))
    if overridden:
        ctx.warnings.append("env override replaces the planned %s" % ", ".join(overridden))
    env.update(request.env)
    plan.argv, plan.env = argv + list(request.extra_args), env


def _numa_binding(ctx, plan, argv):
    host, request, vllm = ctx.host, ctx.request, ctx.vllm
    node = plan.numa_node
    if request.numa_bind == "off":
        ctx.reasons.append("NUMA binding: off (override)")
        return
    if node is None:
        ctx.reasons.append("NUMA binding: none (the GPU set spans NUMA nodes or its node is unknown)")
        return
    if len(host.numa_nodes) <= 1 and request.numa_bind == "auto":
        ctx.reasons.append("NUMA binding: not needed, the host has one NUMA node")
        return
    has_flag = vllm.capabilities.get("numa_bind")
    if request.numa_bind == "vllm" and not has_flag:
        raise PlanInputError("numa_bind=vllm: vLLM %s has no --numa-bind flag; use numa_bind=numactl"
                             % (vllm.version or "?"))
    if request.numa_bind in ("auto", "vllm") and has_flag:
        argv.append("--numa-bind")
        plan.numa_binding = "vllm"
        ctx.reasons.append("NUMA binding: vLLM's --numa-bind pins each worker to its GPU's node %d CPUs and memory"
                           % node)
        return
    plan.numa_binding = "numactl"
    plan.exec_prefix = ["numactl", "--cpunodebind=%d" % node, "--preferred=%d" % node]
    ctx.reasons.append("NUMA binding: numactl --cpunodebind=%d --preferred=%d (vLLM %s has no --numa-bind); "
                       "'preferred' keeps memory local without failing when the node fills"
                       % (node, node, vllm.version or "?"))


def plan(host, model, vllm=None, request=None):
    """Make a serving plan. All arguments may be dicts (validated here) or the pydantic models."""
    host = parse_facts(HostFacts, host, "host facts")
    model = parse_facts(ModelFacts, model, "model facts")
    vllm = parse_facts(VllmFacts, vllm, "vLLM facts") if vllm is not None else release_vllm_facts()
    if request is None:
        request = PlanRequest()
    elif not isinstance(request, PlanRequest):
        if not isinstance(request, dict):
            raise PlanInputError("plan request: expected a mapping of overrides")
        try:
            request = PlanRequest.model_validate(request)
        except ValidationError as exc:
            raise PlanInputError(_validation_message(exc, "plan request"))
    ctx = _Context(host, model, vllm, request)
    _resolve_common(ctx)
    _parsers_and_speculation(ctx)
    device = request.device
    if device == "auto":
        device = "cuda" if host.gpus else "cpu"
    if device == "cuda" and not host.gpus:
        raise PlanInputError("device cuda: the host facts list no GPU")
    result = _plan_gpu(ctx) if device == "cuda" else _plan_cpu(ctx)
    result.model_id = request.model_id
    result.model_path = request.model_path or model.path
    result.served_model_name = request.served_model_name
    result.tool_call_parser, result.reasoning_parser = ctx.tool_call_parser, ctx.reasoning_parser
    result.speculative_config = ctx.speculative_config
    result.vllm = {"distribution": vllm.distribution, "version": vllm.version, "source": vllm.source}
    result.reasons = ctx.reasons
    result.warnings = ctx.warnings
    if not result.fits and not result.error:
        result.error = "does not fit"
    return result
