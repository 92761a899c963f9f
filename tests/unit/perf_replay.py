"""Published serving benchmarks (tests/fixtures/perf_published) replayed through the planner.

Each figure pins the layout it was measured with; the planner plans it on a host built from the
figure (the real 8x RTX PRO 6000 capture where the figure names that host, else GPUs of the named
product linked as stated) and predicts the figure's metric. A plain module: the replay test and
tools/fit_constants.py performance both use it.
"""
import json
import math
import os

from ansible_collections.llmops.vllm.plugins.module_utils import model_config, topology
from ansible_collections.llmops.vllm.plugins.plugin_utils import contracts, planner, planner_performance, planner_rules
from replay_data import CONFIGS, FIXTURES, RTX_NUMACTL, RTX_QUERY, RTX_TOPO, read

GIB = 1 << 30
FIGURES_DIR = os.path.join(FIXTURES, "perf_published")
FIGURE_NAMES = sorted(f[:-5] for f in os.listdir(FIGURES_DIR) if f.endswith(".json"))
METRICS = ("single_stream_tok_s", "output_tok_s", "tpot_ms")
PCIE = {"8.0": (4, 16)}  # A100: PCIe Gen4; the rest of the figures' GPUs are Gen5 x16


def _model(config_name):
    path = os.path.normpath(os.path.join(CONFIGS, config_name))
    with open(path, encoding="utf-8") as handle:
        config = json.load(handle)
    quant_path = path[:-5] + ".hf_quant_config.json"
    quant = None
    if os.path.exists(quant_path):
        with open(quant_path, encoding="utf-8") as handle:
            quant = json.load(handle)
    facts = model_config.analyze(config, hf_quant_config=quant)
    return contracts.ModelFacts.model_validate(facts)


def _host(figure):
    if figure.get("topology") == "rtxpro6000":
        return topology.build_topology(topo_text=read(RTX_TOPO), query_text=read(RTX_QUERY),
                                       numactl_text=read(RTX_NUMACTL))
    n = figure["gpu_count"]
    gen, width = PCIE.get(figure["compute_capability"], (5, 16))
    gpus = [{"index": i, "name": figure["gpu"], "memory_bytes": int(figure["gpu_memory_gib"] * GIB), "numa_node": 0,
             "compute_capability": figure["compute_capability"],
             "pcie": {"gen_max": gen, "width_max": width}} for i in range(n)]
    links = [["X" if i == j else figure["link"] for j in range(n)] for i in range(n)]
    return {"gpus": gpus, "links": links, "interconnect": "nvlink" if figure["link"].startswith("NV") else "pcie",
            "numa_nodes": {"0": {}}}


def load(name):
    with open(os.path.join(FIGURES_DIR, name + ".json"), encoding="utf-8") as handle:
        figure = json.load(handle)
    model = _model(figure["config"])
    host = contracts.HostFacts.model_validate(_host(figure))
    request = {
        "tensor_parallel_size": figure["tensor_parallel_size"], "data_parallel_size": figure["data_parallel_size"],
        "enable_expert_parallel": figure["enable_expert_parallel"], "gpus": list(range(figure["gpu_count"])),
        "concurrency": figure["concurrency"], "input_len": figure["input_len"], "output_len": figure["output_len"],
        "max_model_len": max(4096, 1 << math.ceil(math.log2(figure["input_len"] + figure["output_len"]))),
        "min_sequences": 1, "kv_cache_dtype": figure.get("kv_cache_dtype") or "auto", "speculative_config": "off",
        "objective": "latency" if figure["concurrency"] == 1 else "throughput", "model_id": figure["model"]}
    plan = planner.plan(host, model, None, request)
    return figure, model, host, plan


FIGURES = {name: load(name) for name in FIGURE_NAMES}


def split(kind):
    return [name for name in FIGURE_NAMES if FIGURES[name][0]["split"] == kind]


def predicted(name, constants=None):
    """The figure's metric as the planner predicts it (with other constants when given)."""
    figure, model, host, plan = FIGURES[name]
    if constants is None:
        perf = plan.performance
    else:
        cand = next(c for c in plan.candidates if c.label == plan.layout and c.fits)
        work = planner_performance.Workload(concurrency=figure["concurrency"], input_len=figure["input_len"],
                                            output_len=figure["output_len"])
        seqs = planner_rules.scheduler_defaults(plan.gpu_memory_bytes or 0, figure["gpu"])[1]
        perf, _why = planner_performance.predict(model, plan.weights_bytes, host, cand, work,
                                                 1 if plan.kv_cache_dtype.startswith("fp8") else 2, seqs, None,
                                                 constants)
    assert perf is not None, (name, plan.error, plan.performance_note)
    return getattr(perf, figure["metric"])


def residual(name, constants=None):
    """Predicted speed over measured speed, minus one (TPOT is inverted: positive = predicted faster)."""
    figure = FIGURES[name][0]
    value = predicted(name, constants)
    if figure["metric"] == "tpot_ms":
        return figure["value"] / value - 1
    return value / figure["value"] - 1


def score(names, constants=None):
    """The worst relative error (a minimax fit: the replay test bounds the worst figure), then the
    mean square of the log ratios as the tie-break."""
    errors = [residual(n, constants) for n in names]
    return max(abs(x) for x in errors) + 1e-3 * sum(math.log(1 + x) ** 2 for x in errors) / len(errors)
