"""The rollout summary and fleet table (plugin_utils/report.py) and the host-state filters."""
from ansible_collections.llmops.vllm.plugins.filter.host_state import FilterModule, plan_record
from ansible_collections.llmops.vllm.plugins.module_utils import host_state
from ansible_collections.llmops.vllm.plugins.plugin_utils import report

SWAP = {
    "status": "ok", "error": None, "commit": "3cb238d8aff3" + "0" * 28,
    "desired": {"repo_id": "llmops-test/tiny-qwen3-chat", "unit": "vllm-tiny-qwen3.service"},
    "before": {"unit": "vllm-tiny-llama.service", "repo_id": "llmops-test/tiny-llama-chat"},
    "plan": {"device": "cpu", "layout": "cpu", "gpu_indices": [], "max_model_len": 4096, "kv_cache_tokens": 87381,
             "candidates": [{"label": "cpu"}]},
    "timings": {"download_s": 30.48, "retire_s": 5.7, "time_to_ready_s": 72.334, "downtime_gap_s": 87.4, "total_s": 140.0},
    "benchmark": {"summary": "PASSED - ratio 0.550 >= 0.1", "markdown": "reports/benchmarks/llmops-1/x.md"},
}
UNCHANGED = {"status": "unchanged", "commit": SWAP["commit"], "desired": SWAP["desired"],
             "before": {"unit": "vllm-tiny-qwen3.service", "repo_id": "llmops-test/tiny-qwen3-chat"},
             "plan": SWAP["plan"], "timings": {"total_s": 3.1}, "benchmark": {}}


def test_a_swap_shows_every_phase_in_order_and_the_benchmark_path():
    lines = report.summary_lines(SWAP, "reports/llmops-1/rollout-1.json")
    assert lines[0] == "ok: llmops-test/tiny-qwen3-chat@3cb238d8aff3 as vllm-tiny-qwen3.service"
    assert "plan: cpu, max_model_len 4096, KV cache 87381 tokens" in lines
    gpu = report.summary_lines(dict(SWAP, plan={"layout": "TP=4+EP", "gpu_indices": [0, 1, 2, 3], "max_model_len": 8}))
    assert "plan: TP=4+EP on GPUs 0,1,2,3, max_model_len 8, KV cache ? tokens" in gpu
    assert "retired: vllm-tiny-llama.service (llmops-test/tiny-llama-chat)" in lines
    assert ("phases: download 30.5 s, retire 5.7 s, load to ready 72.3 s, downtime gap 87.4 s, total 140.0 s"
            in lines)
    assert lines[-3:] == ["benchmark: PASSED - ratio 0.550 >= 0.1", "benchmark report: reports/benchmarks/llmops-1/x.md",
                          "report: reports/llmops-1/rollout-1.json"]
    assert not any("{" in line or "None" in line for line in lines)


def test_an_unchanged_run_shows_no_retire_and_no_load():
    text = "\n".join(report.summary_lines(UNCHANGED))
    assert "retired" not in text and "load to ready" not in text and "downtime" not in text
    assert "phases: total 3.1 s" in text and "benchmark" not in text


def test_an_error_is_one_line():
    failed = dict(SWAP, status="rolled_back", error="Gate:\n  the server exited   (status 1)")
    assert "error: Gate: the server exited (status 1)" in report.summary_lines(failed)


def test_fleet_table_has_a_row_per_host_and_dashes_for_phases_not_run():
    rows = report.fleet_table([("llmops-1", SWAP), ("llmops-2", UNCHANGED)])
    assert rows[0].startswith("| host | status |") and len(rows) == 4
    assert rows[2] == ("| llmops-1 | ok | vllm-tiny-llama.service | llmops-test/tiny-qwen3-chat@3cb238d8aff3 | cpu "
                       "| 87.4 | 72.3 | 30.5 |")
    assert rows[3].endswith("| cpu | - | - | - |")


def test_report_plan_drops_the_candidates_table_only():
    kept = report.report_plan(SWAP["plan"])
    assert "candidates" not in kept and kept["kv_cache_tokens"] == 87381 and kept["layout"] == "cpu"


def test_plan_record_is_the_host_states_plan_keys():
    plan = {"device": "cuda", "tensor_parallel_size": 4, "data_parallel_size": 1, "enable_expert_parallel": True,
            "gpu_indices": [0, 1, 2, 3], "numa_node": 0, "max_model_len": 196608, "argv": ["serve", "/m"],
            "layout": "TP=4+EP", "reasons": ["..."], "env": {"A": "1"}}
    recorded = plan_record(plan)
    assert set(recorded) == set(host_state.PLAN_KEYS) | {"layout"}
    assert recorded["layout"] == "TP=4+EP" and "reasons" not in recorded
    entry = {"name": "m", "unit": "vllm-m.service", "since": "2026-12-01T00:00:00+00:00", "repo_id": "o/m",
             "revision": "main", "commit": "a" * 40, "path": "/m",
             "served_model_name": "m", "bind": "::", "port": 8000, "plan": recorded}
    assert host_state.entry_problems(host_state.normalize_entry(entry)) == []


def test_unit_and_url_filters_come_from_host_state():
    filters = FilterModule().filters()
    assert filters["unit_name"]("kimi") == "vllm-kimi.service"
    assert filters["unit_path"]("kimi", "/run/systemd/system") == "/run/systemd/system/vllm-kimi.service"
    assert filters["unit_glob"]("/etc/systemd/system") == "/etc/systemd/system/vllm-*.service"
    assert filters["connect_url"]("::", "8000") == "http://[::1]:8000"
    assert filters["connect_url"]("0.0.0.0", 8000) == "http://127.0.0.1:8000"
    assert filters["connect_url"]("fd00::5", 8001) == "http://[fd00::5]:8001"


MARKS = {"started": 1000.0, "fetched": "1012.5", "retire_started": 1020.0, "retired": 1021.25, "ready": 1055.0}


def test_phase_timings_of_a_swap():
    timings = report.phase_timings(MARKS, changed=True, retired=True, ready_seconds=33.3, now=1070.0)
    assert timings == {"download_s": 12.5, "downtime_gap_s": 35.0, "retire_s": 1.25, "time_to_ready_s": 33.3,
                       "total_s": 70.0}


def test_phase_timings_of_an_unchanged_run_count_only_the_total():
    assert report.phase_timings(MARKS, changed=False, retired=False, ready_seconds=None, now=1003.0) == {"total_s": 3.0}


def test_phase_timings_of_a_rollback_and_of_marks_not_reached():
    marks = dict(MARKS, ready=None, restored_ready=1110.0)
    timings = report.phase_timings(marks, changed=True, retired=True, ready_seconds="", now=1120.0)
    assert timings == {"download_s": 12.5, "retire_s": 1.25, "rollback_s": 90.0, "total_s": 120.0}
    assert report.phase_timings({}, changed=True, retired=True) == {}


def test_phase_timings_out_of_the_load_balancer():
    marks = dict(MARKS, drained="1019.5", enabled=1060.0)
    timings = report.phase_timings(marks, changed=True, retired=True, ready_seconds=33.3, now=1070.0)
    assert timings["out_of_lb_s"] == 40.5
    assert "out_of_lb_s" not in report.phase_timings(dict(MARKS, drained=1019.5), changed=True, retired=True)
    assert ("out of the load balancer", 40.5) in report.phases(timings)


def test_phase_timings_switch_behind_the_host_proxy():
    timings = report.phase_timings(dict(MARKS, switched="1090.0"), changed=True, retired=False, now=1100.0)
    assert timings["switch_s"] == 1090.0 - float(MARKS["started"])
    assert "switch_s" not in report.phase_timings(MARKS, changed=True, retired=True)
    assert ("apply -> new model serves (host proxy)", timings["switch_s"]) in report.phases(timings)
