"""The planner's memory model replayed on real vLLM startup logs (tests/fixtures/vllm_logs).

Each fixture names its source, the settings (with those a log omits marked assumed) and the logged
figures. The runtime-overhead constants of planner_rules (MemoryConstants) are a minimax fit on the
logs marked "fit" (at most two thirds; tools/fit_constants.py memory); every log, held-back ones
included, must be predicted within 10 % of the KV-cache tokens vLLM logged (of the available KV
memory where the token count is not memory / bytes per token, as with sliding-window layers).
Logs in pending/ are collected but not yet predicted within 10 % (pending/README.md says why).
docs/planner.md lists the residuals this test prints.
"""
import dataclasses
import os

import pytest

from ansible_collections.llmops.vllm.plugins.plugin_utils import planner_rules
from memory_replay import GIB, LOG_NAMES, LOGS, PENDING_DIR, PENDING_NAMES, residual, score, split

TOLERANCE = 0.10


def test_every_log_names_its_source_and_settings():
    assert len(LOG_NAMES) >= 6
    for name in LOG_NAMES:
        log, model = LOGS[name]
        assert log["source"] and log["quote"] and log["split"] in ("fit", "held_back"), name
        assert model.num_layers > 0 and (log["logged"]["kv_cache_tokens"] or log["logged"]["kv_cache_gib"]), name
        for key in ("gpu", "gpu_memory_gib", "tensor_parallel_size", "gpu_memory_utilization", "max_model_len",
                    "max_num_batched_tokens", "max_num_seqs", "vllm_version"):
            assert log[key] not in (None, ""), (name, key)


@pytest.mark.parametrize("name", PENDING_NAMES)
def test_pending_logs_name_their_source_and_settings(name):
    """Logs collected but not yet predicted within 10 %: their data must be as complete as the
    replayed ones; the residual is printed for docs/planner.md."""
    log, model = LOGS[name]
    assert log["split"] == "pending" and log["source"] and log["quote"], name
    assert log["logged"]["weights_gib"] > 0 and (log["logged"]["kv_cache_tokens"] or log["logged"]["kv_cache_gib"])
    for key in ("gpu", "gpu_memory_gib", "tensor_parallel_size", "gpu_memory_utilization", "max_model_len",
                "max_num_batched_tokens", "max_num_seqs", "vllm_version", "assumed"):
        assert log[key] not in (None, ""), (name, key)
    assert model.num_layers > 0
    with open(os.path.join(PENDING_DIR, "README.md"), encoding="utf-8") as handle:
        assert name in handle.read()
    print("pending %s %+.1f%%" % (name, 100 * residual(name)))


def test_fit_uses_at_most_two_thirds_of_the_logs():
    assert split("held_back") and 3 * len(split("fit")) <= 2 * len(LOG_NAMES)


@pytest.mark.parametrize("name", LOG_NAMES)
def test_log_replays_within_ten_percent(name):
    error = residual(name)
    print("%s %s %+.1f%%" % (LOGS[name][0]["split"], name, 100 * error))
    assert abs(error) <= TOLERANCE, "%s: predicted %+.1f %% off the logged KV tokens" % (name, 100 * error)


def test_the_constants_are_the_fit_of_the_fit_logs():
    """planner_rules carries a (local) optimum of the fit's objective: moving any constant by 3 %
    either way does not improve it - the values are fitted, not hand-tuned."""
    fitted = planner_rules.MemoryConstants()
    base = score(split("fit"), fitted)
    for field in dataclasses.fields(fitted):
        for factor in (1.03, 1 / 1.03):
            trial = dataclasses.replace(fitted, **{field.name: getattr(fitted, field.name) * factor})
            assert score(split("fit"), trial) >= base - 0.002, (field.name, factor)


def test_v1_engine_counts_less_non_torch_memory():
    """The V1 engine (vLLM 0.8+) sizes the KV cache from what grew after its start; V0 counted the
    CUDA context too: the fitted V1 fraction is the smaller one."""
    assert planner_rules.v1_engine("0.10.1.1") and planner_rules.v1_engine(None)
    assert not planner_rules.v1_engine("0.6.5") and not planner_rules.v1_engine("0.7.3")
    assert planner_rules.NON_TORCH_FRACTION_V1 < planner_rules.NON_TORCH_FRACTION


def test_the_story_log_is_pending_with_its_residual_stated():
    """The issue's own log (MiniMax-M2.5 FP8, TP=4, 4 x RTX PRO 6000; not public, its version and
    scheduler limits not logged) leaves ~5 GiB more than the 15 public logs' fit explains; it stays
    in pending/ until its engine-config line settles the settings. The old fixed 2-3 GiB guess was
    still worse on it."""
    log, model = LOGS["minimax-m25-fp8-rtxpro6000-tp4"]
    assert log["split"] == "pending" and log["logged"]["kv_cache_tokens"]
    per_token = planner_rules.kv_bytes_per_token_per_gpu(model, 4, 2)
    guess = (0.9 * log["gpu_memory_gib"] - log["logged"]["weights_gib"] - 2.8) * GIB / per_token
    assert guess / log["logged"]["kv_cache_tokens"] - 1 > residual("minimax-m25-fp8-rtxpro6000-tp4") > 0.10
