"""Real vLLM startup logs (tests/fixtures/vllm_logs) replayed through the planner's memory model.

A plain module: test_vllm_logs.py and tools/fit_constants.py both use it. Each log's settings go
through planner_rules.runtime_overhead_bytes with the logged weights; the residual is the predicted
KV-cache tokens over the logged ones (the logged KV memory where a log has no token count, or the
token count is not memory / bytes per token, as with sliding-window layers).
"""
import json
import math
import os

from ansible_collections.llmops.vllm.plugins.module_utils import model_config
from ansible_collections.llmops.vllm.plugins.plugin_utils import contracts, planner_rules
from replay_data import CONFIGS, FIXTURES

GIB = 1 << 30
LOGS_DIR = os.path.join(FIXTURES, "vllm_logs")
PENDING_DIR = os.path.join(LOGS_DIR, "pending")
LOG_NAMES = sorted(f[:-5] for f in os.listdir(LOGS_DIR) if f.endswith(".json"))
PENDING_NAMES = sorted(f[:-5] for f in os.listdir(PENDING_DIR) if f.endswith(".json"))


def load(name):
    with open(os.path.join(LOGS_DIR, name + ".json"), encoding="utf-8") as handle:
        log = json.load(handle)
    with open(os.path.normpath(os.path.join(CONFIGS, log["config"])), encoding="utf-8") as handle:
        facts = model_config.analyze(json.load(handle))
    return log, contracts.ModelFacts.model_validate(dict(facts, weights_bytes=facts["weights_bytes"] or 1))


LOGS = {name: load(name) for name in LOG_NAMES}
LOGS.update({name: load(os.path.join("pending", name)) for name in PENDING_NAMES})


def version(log):
    """The version the log names (its leading x.y.z), None when unknown (current: V1)."""
    text = log["vllm_version"].split()[0] if log["vllm_version"] else ""
    return text if text[:1].isdigit() else None


def predicted_kv_bytes(log, model, constants=None):
    """KV-cache bytes per GPU the memory model predicts for the logged settings and weights."""
    tp, ep = log["tensor_parallel_size"], log["enable_expert_parallel"]
    group = tp * log["data_parallel_size"] if ep else tp
    memory = log["gpu_memory_gib"] * GIB
    overhead = planner_rules.runtime_overhead_bytes(model, tp, group, int(memory), log["max_num_batched_tokens"],
                                                    log["max_num_seqs"], expert_parallel=ep,
                                                    vllm_version=version(log), constants=constants)
    return log["gpu_memory_utilization"] * memory - log["logged"]["weights_gib"] * GIB - overhead


def residual(name, constants=None):
    """Relative error of the prediction against the logged tokens (else the logged KV memory)."""
    log, model = LOGS[name]
    kv = predicted_kv_bytes(log, model, constants)
    if log["logged"]["kv_cache_tokens"]:
        kv_dtype_bytes = 1 if log["kv_cache_dtype"].startswith("fp8") else 2
        per_token = planner_rules.kv_bytes_per_token_per_gpu(model, log["tensor_parallel_size"], kv_dtype_bytes)
        return kv / per_token / log["logged"]["kv_cache_tokens"] - 1
    return kv / (log["logged"]["kv_cache_gib"] * GIB) - 1


def split(kind):
    return [name for name in LOGS if LOGS[name][0]["split"] == kind]


def score(names, constants=None):
    """The worst relative error (a minimax fit: the replay test bounds the worst log), then the mean
    square of the log ratios as the tie-break."""
    errors = [residual(n, constants) for n in names]
    return max(abs(x) for x in errors) + 1e-3 * sum(math.log(max(1 + x, 1e-6)) ** 2 for x in errors) / len(errors)
