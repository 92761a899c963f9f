# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The contracts of llmops.vllm, controller side: one pydantic model per module/action result.

The planner's inputs (:class:`HostFacts`, :class:`ModelFacts`, :class:`VllmFacts`,
:class:`PlanRequest`) and output (:class:`ServingPlan`) live here, with the result models of the
other modules (:data:`MODULE_CONTRACTS`). tests/unit/test_contracts.py ties every model to its
module's RETURN documentation, so a key is added in one place and documented in the other.

Also here, because every consumer needs the same answer: :func:`layout_label` (the one spelling of
a parallel layout) and :func:`requires` (the one gate that checks a ``vllm serve`` flag against the
installed vLLM).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, List, Literal, Optional, Type, TypeVar, Union

try:
    from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
    from pydantic import model_validator  # pylint: disable=unused-import  # re-exported for desired_state
    PYDANTIC_IMPORT_ERROR = None
except ImportError as _exc:  # keep Ansible able to load the plugin; parse_facts() says what to install
    PYDANTIC_IMPORT_ERROR = _exc
    BaseModel, ValidationError = object, ValueError  # type: ignore[misc,assignment]

    def ConfigDict(**kwargs: Any) -> Dict[str, Any]:  # type: ignore[no-redef]  # pylint: disable=invalid-name
        return kwargs

    def Field(default: Any = None, **kwargs: Any) -> Any:  # type: ignore[no-redef]  # pylint: disable=invalid-name,unused-argument
        return default

    def field_validator(*args: Any, **kwargs: Any) -> Callable[[Any], Any]:  # type: ignore[no-redef]  # pylint: disable=unused-argument
        return lambda function: function

    model_validator = field_validator  # type: ignore[assignment]

DEFAULT_MIN_SEQUENCES = 4
KV_CACHE_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla", "fp8_inc")


_ModelT = TypeVar("_ModelT", bound=BaseModel)


class PlanInputError(ValueError):
    """The facts or the overrides given to the planner are not usable (bad input, exit code 1)."""


# --------------------------------------------------------------------------- one spelling


def layout_label(device: Optional[str], tensor_parallel_size: Union[int, str], data_parallel_size: Union[int, str, None] = 1,
                 enable_expert_parallel: bool = False) -> str:
    """The one spelling of a layout: ``cpu``, ``TP=4``, ``TP=4+EP``, ``TP=4 x DP=2``, ``TP=4+EP x DP=2``."""
    if device == "cpu":
        return "cpu"
    label = "TP=%d" % int(tensor_parallel_size)
    if enable_expert_parallel:
        label += "+EP"
    if data_parallel_size and int(data_parallel_size) > 1:
        label += " x DP=%d" % int(data_parallel_size)
    return label


def plan_layout(plan: Optional[Dict[str, Any]]) -> str:
    """The layout label of a plan document: its own ``layout``, or (for a plan stored before plans carried
    one, e.g. in an older state file or benchmark run) the label of its sizes; ``-`` for no plan."""
    plan = plan or {}
    if plan.get("layout"):
        return str(plan["layout"])
    if not plan.get("device"):
        return "-"

    def number(key: str) -> int:
        try:
            return int(plan.get(key) or 1)
        except (TypeError, ValueError):
            return 1

    return layout_label(plan["device"], number("tensor_parallel_size"), number("data_parallel_size"),
                        str(plan.get("enable_expert_parallel")).lower() == "true")


# --------------------------------------------------------------------------- the flag gate


def flag_name(arg: object) -> Optional[str]:
    """``--x-y`` of ``--x-y=value``, ``--x-y`` and ``--x_y`` (vLLM's parser reads an underscore in a long option
    as a dash, so every check compares this spelling); None for a value that is not a long option."""
    if not isinstance(arg, str) or not arg.startswith("--") or len(arg) < 3:
        return None
    return arg.split("=", 1)[0].replace("_", "-")


def has_flag(vllm: object, flag: str) -> Optional[bool]:
    """True/False when the vLLM facts list their flags, None when they do not (unknown).

    ``--no-x`` counts as present when ``--x`` is (argparse's BooleanOptionalAction adds it).
    """
    flags = getattr(vllm, "flags", None)
    if flags is None:
        return None
    name = flag_name(flag) or flag
    known = set(flags)
    return name in known or (name.startswith("--no-") and "--" + name[5:] in known)


def requires(vllm: object, flag: str, what: str = "the plan") -> bool:
    """Refuse ``flag`` when the installed vLLM is known not to have it.

    Returns True when checked, False when the facts list no flags (nothing refused; the planner
    warns once that flags were not checked). Raises PlanInputError naming the flag and the version.
    """
    present = has_flag(vllm, flag)
    if present is None:
        return False
    if not present:
        raise PlanInputError("%s: vLLM %s (%s) has no flag %s; remove it or upgrade vLLM"
                             % (what, getattr(vllm, "version", None) or "?", getattr(vllm, "source", None) or "?",
                                flag_name(flag) or flag))
    return True


def require_argv(vllm: object, argv: List[str], what: str = "the plan") -> None:
    """:func:`requires` for every long option of an argv list."""
    for arg in argv:
        if flag_name(arg):
            requires(vllm, arg, what)


# --------------------------------------------------------------------------- parsing


def _validation_message(exc: ValidationError, what: str) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ())) or what
        parts.append("%s: %s" % (loc, err.get("msg")))
    return "%s: %s" % (what, "; ".join(parts))


def require_pydantic() -> None:
    """Raise PlanInputError saying what to install when pydantic is missing."""
    if PYDANTIC_IMPORT_ERROR is not None:
        raise PlanInputError("the planner needs pydantic >= 2 on the controller (pip install 'pydantic>=2'): %s"
                             % PYDANTIC_IMPORT_ERROR)


def parse_facts(model_cls: Type[_ModelT], data: object, what: str) -> _ModelT:
    """Validate a facts document, turning pydantic's errors into one readable PlanInputError."""
    require_pydantic()
    if isinstance(data, model_cls):
        return data
    if not isinstance(data, dict):
        raise PlanInputError("%s: expected a JSON object, got %s" % (what, type(data).__name__))
    try:
        return model_cls.model_validate(data)
    except ValidationError as exc:
        raise PlanInputError(_validation_message(exc, what)) from None


# --------------------------------------------------------------------------- planner inputs


class _Facts(BaseModel):
    model_config = ConfigDict(extra="ignore")


class PcieLink(_Facts):
    gen_current: Optional[int] = None
    gen_max: Optional[int] = None
    width_current: Optional[int] = None
    width_max: Optional[int] = None


class Gpu(_Facts):
    index: int
    name: Optional[str] = None
    uuid: Optional[str] = None
    bus_id: Optional[str] = None
    memory_bytes: Optional[int] = None
    numa_node: Optional[int] = None
    compute_capability: Optional[str] = None
    pcie: Optional[PcieLink] = None  # gen/width current and max (topology's pcie fact)


class HostResources(_Facts):
    memory_bytes: Optional[int] = None
    cpu_count: Optional[int] = None


class HostFacts(_Facts):
    """The topology keys the planner reads (gpu_topology_info / `llmops-vllm topology`)."""
    gpus: List[Gpu] = Field(default_factory=list)
    links: List[List[Optional[str]]] = Field(default_factory=list)
    interconnect: str = "none"
    numa_nodes: Dict[str, Dict[str, Any]] = Field(default_factory=dict)
    driver_version: Optional[str] = None
    cuda_version: Optional[str] = None  # the newest CUDA the driver supports (nvidia-smi)
    host: Optional[HostResources] = None


class Moe(_Facts):
    num_experts: int
    experts_per_token: Optional[int] = None
    intermediate_size: Optional[int] = None
    shared_expert_intermediate_size: Optional[int] = None
    moe_layers: Optional[int] = None


class Quantization(_Facts):
    method: str
    format: Optional[str] = None
    block_size: Optional[int] = None
    weight_bits: Optional[int] = None
    group_size: Optional[int] = None
    kv_cache: Optional[str] = None
    unquantized_groups: Optional[List[str]] = None
    source: Optional[str] = None


class ModelFacts(_Facts):
    """The `model` contract (model_info / `llmops-vllm model`)."""
    architecture: str
    architectures: Optional[List[str]] = None
    model_type: Optional[str] = None
    text_model_type: Optional[str] = None
    attention: Literal["mla", "gqa", "mqa", "mha"]
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    kv_lora_rank: Optional[int] = None
    kv_cache_bytes_per_token: int
    hidden_size: Optional[int] = None
    vocab_size: Optional[int] = None
    moe: Optional[Moe] = None
    quantization: Optional[Quantization] = None
    dtype: Optional[str] = None
    mtp_layers: int = 0
    remote_code: bool = False
    remote_code_files: List[str] = Field(default_factory=list)
    max_position_embeddings: Optional[int] = None
    parameters_estimated: Optional[int] = None
    weights_bytes: int
    weights_bytes_estimated: bool = False
    weights_source: Optional[str] = None
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
    flags: Optional[List[str]] = None  # `vllm serve` flags; None: unknown, nothing is refused
    capabilities: Dict[str, Optional[bool]] = Field(default_factory=dict)
    defaults: Dict[str, Any] = Field(default_factory=dict)
    cuda_version: Optional[str] = None


# VLLM_CPU_OMP_THREADS_BIND core lists: "0-31", "0,2,4-7", one list per rank separated by "|".
_CORE_LIST = r"[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*"
CORE_LISTS_RE = re.compile(r"^%s(\|%s)*$" % (_CORE_LIST, _CORE_LIST))


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
    nodes: Optional[int] = Field(default=None, ge=1)  # hosts of a serving group (planner_nodes); None: as few as hold it
    data_parallel_size: Optional[int] = Field(default=None, ge=1)
    enable_expert_parallel: Optional[bool] = None
    gpu_memory_utilization: Optional[float] = Field(default=None, gt=0, le=1)
    kv_cache_dtype: str = "auto"
    gpus: Optional[List[int]] = None
    # What a model that keeps serving holds while this one starts beside it (a blue/green swap, planner_swap):
    # GPUs this plan must not use; on a CPU host, RAM it must leave.
    reserved_gpus: List[int] = Field(default_factory=list)
    reserved_memory_bytes: int = Field(default=0, ge=0)
    gpu_memory_bytes: Optional[int] = Field(default=None, gt=0)
    min_sequences: int = Field(default=DEFAULT_MIN_SEQUENCES, ge=1)
    weights_bytes: Optional[int] = Field(default=None, gt=0)
    tool_call_parser: Optional[str] = None
    reasoning_parser: Optional[str] = None
    speculative_config: Union[Literal["auto", "off"], Dict[str, Any]] = "auto"
    numa_bind: Literal["auto", "vllm", "numactl", "off"] = "auto"
    objective: Literal["throughput", "latency"] = "throughput"
    concurrency: Optional[int] = Field(default=None, ge=1)  # None: 1 for the figures, full load for the ranking
    input_len: Optional[int] = Field(default=None, ge=1)
    output_len: Optional[int] = Field(default=None, ge=1)
    speculative_acceptance: Optional[float] = Field(default=None, ge=0, lt=1)
    enforce_eager: Optional[bool] = None
    trust_remote_code: Optional[bool] = None
    max_num_batched_tokens: Optional[int] = Field(default=None, ge=1)
    max_num_seqs: Optional[int] = Field(default=None, ge=1)
    cpu_kv_cache_space_gib: Optional[int] = Field(default=None, ge=1)
    # CPU hosts: vLLM's VLLM_CPU_OMP_THREADS_BIND - None/auto its own binding (the first cores of a NUMA node),
    # nobind (the OS schedules the threads), or core lists such as "0-31" ("0-31|32-63" per TP rank).
    cpu_threads_bind: Optional[str] = None
    extra_args: List[str] = Field(default_factory=list)
    env: Dict[str, str] = Field(default_factory=dict)

    @field_validator("kv_cache_dtype")
    @classmethod
    def _kv_dtype(cls, value: str) -> str:
        if value not in KV_CACHE_DTYPES:
            raise ValueError("kv_cache_dtype must be auto, bfloat16, float16 or an fp8 variant (fp8, fp8_e4m3, fp8_e5m2)")
        return value

    @field_validator("cpu_threads_bind")
    @classmethod
    def _cpu_threads_bind(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and value not in ("auto", "nobind") and not CORE_LISTS_RE.match(value):
            raise ValueError("cpu_threads_bind must be auto, nobind or core lists such as 0-31 (0-31|32-63 per rank), got %r" % value)
        return value

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, value: Optional[List[int]]) -> Optional[List[int]]:
        if value is not None and (not value or len(set(value)) != len(value)):
            raise ValueError("gpus must be a non-empty list of distinct GPU indices")
        return value


# --------------------------------------------------------------------------- the plan


class MemoryPerGpu(BaseModel):
    gpu_memory_bytes: int
    cap_bytes: int
    weights_bytes: int
    overhead_bytes: int
    kv_cache_bytes: int


class Performance(BaseModel):
    """Predicted speed of one layout (plugin_utils/planner_performance.py; docs/planner.md)."""
    concurrency: int
    input_len: int
    output_len: int
    single_stream_tok_s: float  # one request's decode tok/s
    tpot_ms: float  # at `concurrency`
    ttft_ms: float  # at `concurrency`
    output_tok_s: float  # aggregate over all replicas at `concurrency`
    bound: Literal["memory", "compute", "interconnect"]
    kv_limited: bool = False  # `concurrency` exceeds what the KV cache (or max_num_seqs) holds: requests queue
    max_concurrency: int = 0  # requests of input_len + output_len the KV cache holds, all replicas
    max_output_tok_s: float = 0.0  # aggregate at max_concurrency
    step_ms: Dict[str, float] = Field(default_factory=dict)  # one decode step: memory, compute, interconnect, overhead
    speculative_tokens_per_step: Optional[float] = None
    speculative_acceptance: Optional[float] = None
    gpu: Optional[str] = None  # the GPU table entry used
    precision: Optional[str] = None  # tensor-core precision of the weights' kernels
    link: Optional[str] = None  # the slowest link of the TP group (or EP group)


class Candidate(BaseModel):
    """One parallel layout the planner considered, for the reviewer's table."""
    label: str = ""
    tensor_parallel_size: int
    data_parallel_size: int
    enable_expert_parallel: bool
    gpu_indices: List[int] = Field(default_factory=list)
    numa_node: Optional[int] = None
    replica_gpu_indices: List[List[int]] = Field(default_factory=list)  # one TP group per data-parallel replica
    replica_numa_nodes: List[Optional[int]] = Field(default_factory=list)
    valid: bool = True
    fits: bool = False
    kv_cache_tokens: int = 0
    memory: Optional[MemoryPerGpu] = None
    why_not: Optional[str] = None
    performance: Optional[Performance] = None  # None when it does not fit, on CPU, or for an unknown GPU


class NodePlan(BaseModel):
    """One host of a multi-node serving group (plugin_utils/planner_nodes.py)."""
    host: str
    rank: int
    role: Literal["head", "worker"]
    gpu_indices: List[int] = Field(default_factory=list)
    argv: List[str] = Field(default_factory=list)
    env: Dict[str, str] = Field(default_factory=dict)


class ServingPlan(BaseModel):
    """The plan contract (docs/ARCHITECTURE.md, `llmops-vllm plan --json`)."""
    fits: bool
    device: Literal["cuda", "cpu"]
    layout: Optional[str] = None  # layout_label() of the chosen layout; None when no layout is valid
    model_id: Optional[str] = None
    model_path: Optional[str] = None
    served_model_name: Optional[str] = None
    host: Optional[str] = None
    port: Optional[int] = None
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    enable_expert_parallel: bool = False
    gpu_indices: List[int] = Field(default_factory=list)
    numa_node: Optional[int] = None
    replica_gpu_indices: List[List[int]] = Field(default_factory=list)
    replica_numa_nodes: List[Optional[int]] = Field(default_factory=list)
    objective: str = "throughput"
    performance: Optional[Performance] = None
    performance_note: Optional[str] = None  # why performance is null
    nodes: List[NodePlan] = Field(default_factory=list)  # multi-host plans only (plan with several --topo-file)
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


# --------------------------------------------------------------------------- module results


class _Result(BaseModel):
    """A module's result: extra keys are refused, so the model is the whole contract."""
    model_config = ConfigDict(extra="forbid")


class Pcie(_Result):
    gen_current: Optional[int] = None
    gen_max: Optional[int] = None
    width_current: Optional[int] = None
    width_max: Optional[int] = None
    degraded: Optional[bool] = None


class GpuHealthProcess(_Result):
    """A process on a GPU (module_utils/gpu_health.py); unit and ancestors only from a live probe."""
    pid: int
    type: Optional[str] = None
    name: Optional[str] = None
    used_memory_mib: Optional[int] = None
    unit: Optional[str] = None
    ancestors: Optional[List[int]] = None


class GpuHealthProblem(_Result):
    check: str
    severity: Literal["refuse", "warn"]
    waived: bool = False
    message: str


class GpuHealth(_Result):
    """gpus[].health of gpu_topology_info (module_utils/gpu_health.py); None where the source cannot tell."""
    persistence_mode: Optional[bool] = None
    mig_mode: Optional[bool] = None
    mig_mode_pending: Optional[bool] = None
    ecc_mode: Optional[bool] = None
    ecc_uncorrected_volatile: Optional[int] = None
    ecc_uncorrected_aggregate: Optional[int] = None
    retired_pages: Optional[int] = None
    retired_pages_pending: Optional[bool] = None
    remapped_rows_uncorrectable: Optional[int] = None
    remapped_rows_pending: Optional[bool] = None
    remapped_rows_failure: Optional[bool] = None
    throttle_reasons: Optional[List[str]] = None
    processes: Optional[List[GpuHealthProcess]] = None
    problems: List[GpuHealthProblem] = Field(default_factory=list)


class GpuInfo(Gpu):
    """A GPU as gpu_topology_info returns it: the keys the planner reads (:class:`Gpu`) and the rest."""
    model_config = ConfigDict(extra="forbid")

    numa_source: Optional[str] = None
    cpu_affinity: Optional[str] = None
    pcie: Pcie  # type: ignore[assignment]  # the result's stricter shape (extra keys forbidden)
    health: Optional[GpuHealth] = None


class NumaNode(_Result):
    gpus: List[int] = Field(default_factory=list)
    cpus: Optional[str] = None
    cpuless: Optional[bool] = None
    memory_bytes: Optional[int] = None


class Nic(_Result):
    name: str
    device: Optional[str] = None
    gpu_links: List[Optional[str]] = Field(default_factory=list)


class TopologyResult(_Result):
    """gpu_topology_info: everything :class:`HostFacts` reads, and the rest of the probe."""
    gpus: List[GpuInfo]
    links: List[List[Optional[str]]]
    interconnect: str
    numa_nodes: Dict[str, NumaNode]
    nics: List[Nic]
    gpu_count: int
    driver_version: Optional[str] = None
    cuda_version: Optional[str] = None
    sources: List[str]
    topology_warnings: List[str]
    host: HostResources


class VllmCapabilities(_Result):
    max_model_len_auto: Optional[bool] = None
    numa_bind: Optional[bool] = None
    speculative_config: Optional[bool] = None
    enable_expert_parallel: Optional[bool] = None
    data_parallel_size: Optional[bool] = None
    reasoning_parser: Optional[bool] = None
    tool_call_parser: Optional[bool] = None
    enable_auto_tool_choice: Optional[bool] = None
    kv_cache_dtype: Optional[bool] = None
    device_ids: Optional[bool] = None


class VllmDefaults(_Result):
    gpu_memory_utilization: Optional[float] = None


class VllmPlugin(_Result):
    group: str
    name: str
    value: str
    distribution: Optional[str] = None


class VllmIntegrity(_Result):
    checked: bool
    files: int
    modified: List[str]
    missing: List[str]
    unexpected: List[str]
    allowed: List[str]
    clean: Optional[bool] = None
    seconds: float


class VllmInfoResult(VllmFacts):
    """vllm_info: :class:`VllmFacts` (what the planner reads) plus where the install is."""
    model_config = ConfigDict(extra="forbid")

    # The result's own, stricter shapes of what VllmFacts keeps as plain dicts.
    capabilities: VllmCapabilities = Field(default_factory=VllmCapabilities)  # type: ignore[assignment]
    defaults: VllmDefaults = Field(default_factory=VllmDefaults)  # type: ignore[assignment]
    method: str
    install_path: str
    interpreter: str
    python_version: Optional[str] = None
    venv: str
    site_packages: str
    dist_info: str
    found_by: str
    torch_version: Optional[str] = None
    plugins: List[VllmPlugin] = Field(default_factory=list)
    plugin_parsers: Union[str, Dict[str, List[str]]] = "not seen"
    sources: Dict[str, Any] = Field(default_factory=dict)
    timings: Dict[str, float] = Field(default_factory=dict)
    install_warnings: List[str] = Field(default_factory=list)
    integrity: VllmIntegrity


class ServingPlanResult(ServingPlan):
    """serving_plan (the action): the plan, and its warnings again as ``plan_warnings`` (Ansible takes
    a result's ``warnings`` for itself)."""
    model_config = ConfigDict(extra="forbid")

    plan_warnings: List[str] = Field(default_factory=list)
    # With the action's swap option (planner_swap.decide_swap): bluegreen or stop-start, and why.
    swap: Optional[str] = None
    swap_why: Optional[str] = None


class AllocationResult(_Result):
    """serving_allocation (the action): the host's models planned together (planner_multi.plan_models),
    the same keys as ``llmops-vllm plan --model A --model B``."""
    models: List[Dict[str, Any]]
    fits: bool
    error: Optional[str] = None
    free_gpus: List[int] = Field(default_factory=list)
    reasons: List[str] = Field(default_factory=list)
    device: str
    ram_used_bytes: Optional[int] = None
    ram_budget_bytes: Optional[int] = None


class DesiredStateResult(_Result):
    """desired_state (the action): the validated document (plugin_utils/desired_state.py defines it)."""
    model: Optional[Dict[str, Any]] = None
    models: Optional[List[Dict[str, Any]]] = None
    check_mode: bool = False


class HostReadResult(_Result):
    """host_read (the action): the result of the module it runs (that module's contract), plus ``files``
    when it records files."""
    files: Optional[List[str]] = None


class StateEntry(_Result):
    """One model a host serves, as its state file records it (module_utils/host_state.py ENTRY_KEYS)."""
    name: str
    unit: str
    repo_id: str
    revision: str
    commit: str
    path: str
    served_model_name: str
    bind: str
    port: int
    since: str
    plan: Dict[str, Any]
    venv: Optional[str] = None
    fingerprint: Optional[str] = None
    unit_sha1: Optional[str] = None
    takeover: Optional[Dict[str, Any]] = None
    stable_port: Optional[int] = None
    slot_ports: Optional[List[int]] = None


class HostStateDocument(_Result):
    """The host's state file, schema 1 (module_utils/host_state.py)."""
    schema_version: int = Field(alias="schema")
    models: Dict[str, Dict[str, Any]] = Field(default_factory=dict)
    previous: Dict[str, Dict[str, Any]] = Field(default_factory=dict)
    history: List[Dict[str, Any]] = Field(default_factory=list)
    lock: Optional[Dict[str, Any]] = None


class TextDiff(_Result):
    before: str
    after: str
    before_header: Optional[str] = None
    after_header: Optional[str] = None


class VllmStateResult(_Result):
    """vllm_state: the host's state, the entries it serves and, for a change, the file's diff."""
    state: Optional[HostStateDocument] = None
    models: List[StateEntry] = Field(default_factory=list)
    current: Optional[Dict[str, Any]] = None
    migrated: bool = False
    state_file: str
    up_to_date: Optional[bool] = None
    why: Optional[str] = None
    diff: Optional[TextDiff] = None
    problems: Optional[List[str]] = None
    lock: Optional[Dict[str, Any]] = None
    taken_over: Optional[Dict[str, Any]] = None
    waited_s: Optional[float] = None
    held_by: Optional[Dict[str, Any]] = None


class HfModelResult(_Result):
    """hf_model: one pinned, verified version of a hub repository."""
    path: Optional[str] = None
    commit: Optional[str] = None
    revision_kind: Optional[Literal["commit", "tag", "branch", "unknown"]] = None
    repo_id: str
    revision: str
    endpoint: str
    bytes: Optional[int] = None
    files: List[str] = Field(default_factory=list)
    fetched: List[str] = Field(default_factory=list)
    bytes_present: Optional[int] = None
    bytes_needed: Optional[int] = None
    free_bytes: Optional[int] = None
    disk_margin_bytes: Optional[int] = None
    downloaded_bytes: int = 0
    seconds: float = 0.0
    throughput_bytes_per_s: int = 0
    pruned: List[str] = Field(default_factory=list)
    protected: Dict[str, List[str]] = Field(default_factory=dict)
    repaired: List[str] = Field(default_factory=list)
    restarted: List[str] = Field(default_factory=list)
    manifest: Optional[str] = None
    progress_file: Optional[str] = None
    transfers: Dict[str, int] = Field(default_factory=dict)
    network: bool = False
    preview_dir: Optional[str] = None
    actions: List[str] = Field(default_factory=list)


class VllmReadyResult(_Result):
    """vllm_ready: the readiness gate's stages, on success and on failure."""
    stages: List[str]
    timings: Dict[str, float]
    seconds: Optional[float] = None
    models: Optional[List[str]] = None
    completion_text: Optional[str] = None
    completion_tokens: Optional[int] = None
    finish_reason: Optional[str] = None
    tool_parser_probe: Optional[Dict[str, Any]] = None
    reasoning_parser_probe: Optional[Dict[str, Any]] = None
    parser_probe_notes: List[str] = Field(default_factory=list)
    stage: Optional[str] = None
    timed_out: Optional[bool] = None
    error: Optional[str] = None
    journal: Optional[List[str]] = None


class BenchmarkRow(_Result):
    concurrency: int
    ratio: Optional[float] = None
    new: Optional[Dict[str, Any]] = None
    old: Optional[Dict[str, Any]] = None


class BenchmarkReportResult(_Result):
    """benchmark_report (the action): the before/after verdict and where the report was written."""
    kind: str
    schema_version: int = Field(alias="schema")
    host: Optional[str] = None
    generated: str
    new_run: Optional[str] = None
    new_name: Optional[str] = None
    previous_name: Optional[str] = None
    previous_run: Optional[str] = None
    at_concurrency: Optional[int] = None
    ratio: Optional[float] = None
    min_ratio: Optional[float] = None
    passed: bool
    notes: List[str]
    skipped_files: List[str]
    summary: str
    rows: List[BenchmarkRow]
    markdown: str
    png: Optional[str] = None
    json_path: str = Field(alias="json")


class GpuProcess(_Result):
    pid: int
    used_memory_mib: Optional[int] = None


class GpuUsage(_Result):
    """One GPU as gpu_free found it at its last reading."""
    index: int
    uuid: Optional[str] = None
    memory_used_mib: Optional[int] = None
    processes: List[GpuProcess]
    busy: bool


class GpuFreeResult(_Result):
    """gpu_free: whether the GPUs are free, and what holds the busy ones."""
    free: bool
    busy_gpus: List[int]
    gpus: List[GpuUsage]
    polls: int
    seconds: float


class VenvStep(_Result):
    step: str
    seconds: float
    rc: int


class VenvKept(_Result):
    path: str
    why: str


class VllmVenvResult(_Result):
    """vllm_venv: what the venv holds after the run, what was done and why."""
    action: Literal["create", "rebuild", "install", "reinstall", "none", "remove", "prune"]
    reason: str
    venv: str
    distribution: Optional[str] = None
    version: Optional[str] = None
    installer: Literal["pip", "uv"]
    integrity: VllmIntegrity
    drift: bool
    drift_before: Dict[str, Any]
    cli_version: Optional[str] = None
    steps: List[VenvStep]
    seconds: float
    removed: List[str]
    kept: List[VenvKept]


# Module (and action) name -> the model of its result. tests/unit/test_contracts.py fails for a
# module that is missing here.
class VllmServer(_Result):
    """One vLLM API server on a host, as vllm_process_info finds it (module_utils/vllm_process.py), redacted."""
    pid: int
    start_time: str
    user: Optional[str] = None
    group: Optional[str] = None
    command: str
    program: Optional[str] = None
    venv: Optional[str] = None
    cwd: Optional[str] = None
    environment: List[str]
    secrets: List[str]
    unit: Optional[str] = None
    started_from: str
    parent: Optional[Dict[str, Any]] = None
    listen: List[str]
    ports: List[int]
    gpus: List[int]
    model: Optional[str] = None
    served_model_name: Optional[str] = None
    name: Optional[str] = None
    managed_by: Optional[str] = None


class UnitMemoryResult(_Result):
    """unit_memory: the RAM a unit's processes use, and how it was counted."""
    bytes: int
    source: Literal["cgroup", "pss", "none"]
    pids: List[int]


class VllmProcessInfoResult(_Result):
    """vllm_process_info: every vLLM server, the foreign ones, and those in the next model's way."""
    servers: List[VllmServer]
    foreign: List[Dict[str, Any]]
    conflicts: List[Dict[str, Any]]


class VllmTakeoverResult(_Result):
    """vllm_takeover: the unit written for a server (state=present), or how its process ended (state=stopped)."""
    unit: Optional[str] = None
    unit_path: Optional[str] = None
    env_file: Optional[str] = None
    secrets: Optional[List[str]] = None
    process: Optional[Dict[str, Any]] = None
    entry: Optional[Dict[str, Any]] = None
    stopped: Optional[bool] = None
    signal: Optional[str] = None
    seconds: Optional[float] = None


class HaproxyServer(_Result):
    """One server of an HAProxy backend as haproxy_server reads it."""
    state: str
    status: str
    sessions: int
    queued: int
    address: Optional[str] = None
    port: Optional[int] = None


class HaproxyServerResult(_Result):
    """haproxy_server: the server before and after its change, and who served meanwhile."""
    before: Optional[HaproxyServer] = None
    after: Optional[HaproxyServer] = None
    waited_s: float
    serving_elsewhere: List[str]


class HostDirsChange(_Result):
    """host_dirs: one owner/mode change."""
    path: str
    before: str
    after: str


class HostDirsSkipped(_Result):
    """host_dirs: one path left as it is."""
    path: str
    reason: str


class HostDirsCounts(_Result):
    """host_dirs: how many paths were changed and skipped in all."""
    changed: int
    skipped: int


class HostDirsResult(_Result):
    """host_dirs: the control-plane directories made root's, each model's cache the service user's."""
    changes: List[HostDirsChange]
    skipped: List[HostDirsSkipped]
    counts: HostDirsCounts
    cache_dirs: List[str]
    actions: List[str]


class SoakWindow(_Result):
    """What one server answered during a soak (vllm_soak)."""
    requests: int
    errors: int
    error_rate: Optional[float] = None
    ttft_p99_s: Optional[float] = None
    ttft_count: int


class VllmSoakResult(_Result):
    """vllm_soak: the canary's and the baseline's windows, and what missed its threshold."""
    seconds: Optional[float] = None
    canary: Optional[SoakWindow] = None
    baseline: Optional[SoakWindow] = None
    problems: List[str] = Field(default_factory=list)


MODULE_CONTRACTS = {
    "gpu_topology_info": TopologyResult,
    "model_info": ModelFacts,
    "vllm_info": VllmInfoResult,
    "serving_plan": ServingPlanResult,
    "serving_allocation": AllocationResult,
    "desired_state": DesiredStateResult,
    "host_read": HostReadResult,
    "hf_model": HfModelResult,
    "vllm_ready": VllmReadyResult,
    "benchmark_report": BenchmarkReportResult,
    "vllm_state": VllmStateResult,
    "gpu_free": GpuFreeResult,
    "unit_memory": UnitMemoryResult,
    "vllm_venv": VllmVenvResult,
    "vllm_process_info": VllmProcessInfoResult,
    "vllm_takeover": VllmTakeoverResult,
    "haproxy_server": HaproxyServerResult,
    "host_dirs": HostDirsResult,
    "vllm_soak": VllmSoakResult,
}
