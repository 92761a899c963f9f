# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark runs of ``vllm bench serve``: a level of its results, the stored run, the before/after
comparison and the rollout's benchmark report.

Model pivots are decided on measured throughput (the story's host: ~61 tok/s single-stream and
~1,239 tok/s at concurrency 128 for the retired model, ~4,000 tok/s for the new one). The
``llmops.vllm.benchmark`` role runs vLLM's own load generator on the host, one process per
concurrency level, and keeps one JSON document per run on the controller; the
``llmops.vllm.benchmark_report`` action compares a run with the last run of the previous model on the
same host and writes the report (Markdown, PNG plot, JSON).

Plain functions over plain data (standard library only; matplotlib is imported lazily, only to draw
the plot), so the tests need neither Ansible nor a server. Documented in docs/benchmark.md.
"""

from __future__ import annotations

import base64
import datetime
import json
import math
import os
import re
from typing import Any, Callable, Dict, List, Optional, Tuple, cast

from ansible_collections.llmops.vllm.plugins.plugin_utils.contracts import plan_layout

SCHEMA = 1
RUN_KIND = "llmops.vllm.benchmark"
REPORT_KIND = "llmops.vllm.benchmark_report"

# What a stored level keeps of a `vllm bench serve --save-result` file (vllm/benchmarks/serve.py), under
# the tool's own names, so a stored level is itself a valid input of parse_level (build_run keeps these
# keys for the role). Percentiles come from --metric-percentiles 50,99; throughputs are per second of
# the level's duration.
REQUIRED_RESULT_KEYS = ("completed", "total_output_tokens", "output_throughput", "request_throughput", "duration")
LEVEL_KEYS = ("completed", "failed", "total_input_tokens", "total_output_tokens", "duration",
              "request_throughput", "output_throughput", "total_token_throughput", "max_output_tokens_per_s",
              "mean_ttft_ms", "p50_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p50_tpot_ms", "p99_tpot_ms",
              "mean_itl_ms", "p50_itl_ms", "p99_itl_ms", "mean_e2el_ms", "p50_e2el_ms", "p99_e2el_ms")
COUNT_KEYS = ("completed", "failed", "total_input_tokens", "total_output_tokens")
# Without 50 in --metric-percentiles the tool still writes the median, which is the same number.
MEDIAN_FALLBACK = {"p50_ttft_ms": "median_ttft_ms", "p50_tpot_ms": "median_tpot_ms",
                   "p50_itl_ms": "median_itl_ms", "p50_e2el_ms": "median_e2el_ms"}


class BenchmarkInputError(ValueError):
    """Input that cannot be a benchmark run, result file or comparison; the message says what to do."""


# ----------------------------------------------------------------------------- the stored run

TOOL = "vllm bench serve"
# The workload every level runs with: what benchmark_level_argv (roles/benchmark/vars/main.yml) passes
# to the tool besides the lengths, the request count and the extra arguments.
FIXED_WORKLOAD = {"dataset": "random", "request_rate": "inf", "ignore_eos": True, "temperature": 0, "seed": 0}


def decode_level_files(results: List[Dict[str, Any]]) -> List[Tuple[Any, Dict[str, Any]]]:
    """(concurrency, result document) per level from the role's ``slurp`` loop results (``item`` is the
    concurrency, ``content`` the base64 of the tool's --save-result file), in the loop's order."""
    levels = []
    for index, result in enumerate(results or []):
        if not isinstance(result, dict) or "item" not in result or "content" not in result:
            raise BenchmarkInputError("level file %d: not a slurp result of a level (no item/content); pass "
                                      "benchmark_level_files.results" % (index + 1))
        source = "the result file of concurrency %s" % result["item"]
        try:
            raw = json.loads(base64.b64decode(result["content"]).decode("utf-8"))
        except (ValueError, TypeError) as exc:
            raise BenchmarkInputError("%s is not JSON (%s); run the sweep again" % (source, exc))
        if not isinstance(raw, dict):
            raise BenchmarkInputError("%s: not a vllm bench serve result (a JSON object was expected, got %s)"
                                      % (source, type(raw).__name__))
        levels.append((result["item"], raw))
    return levels


def stored_level(concurrency: Any, raw: Dict[str, Any]) -> Dict[str, Any]:
    """A level as the role stores it: ``concurrency``, the tool's ``num_prompts`` and those of
    :data:`LEVEL_KEYS` the tool wrote, values unchanged (a key it did not write stays absent)."""
    level = {"concurrency": concurrency, "num_prompts": raw.get("num_prompts")}
    level.update((key, value) for key, value in raw.items() if key in LEVEL_KEYS)
    return level


def run_path(host_results_dir: str, started_stamp: str, file_name: str) -> str:
    """Where a run is kept on the controller: ``<results_dir>/<host>/<UTC start>-<name>.json``."""
    return "%s/%s-%s.json" % (host_results_dir, started_stamp, file_name)


def build_run(meta: Optional[Dict[str, Any]], levels_raw: List[Tuple[Any, Dict[str, Any]]], workload: Dict[str, Any],
              host: str, name: str, served_model_name: str, url: str, started: str, finished: str,
              vllm_info: Optional[Dict[str, Any]], path: str) -> Dict[str, Any]:
    """The run document the llmops.vllm.benchmark role keeps (schema :data:`SCHEMA`; :func:`check_run`
    reads it back).

    ``levels_raw``: (concurrency, the tool's result document) per level, in sweep order
    (:func:`decode_level_files`); ``workload``: ``input_len``, ``output_len``, ``num_prompts`` (as the
    role got it: ``auto`` or a count) and ``extra_args``; ``vllm_info``: the vllm_info result (its
    distribution and version are kept); ``meta``: what produced the numbers, its ``plan`` also lifted to
    the top level. Values are kept as given: the document is what the role always wrote.
    """
    meta = meta if meta is not None else {}
    vllm_info = vllm_info or {}
    return {
        "kind": RUN_KIND,
        "schema": SCHEMA,
        "host": host,
        "name": name,
        "served_model_name": served_model_name,
        "url": url,
        "started": started,
        "finished": finished,
        "tool": TOOL,
        "vllm": {"distribution": vllm_info.get("distribution"), "version": vllm_info.get("version")},
        "plan": meta.get("plan"),
        "meta": meta,
        "workload": dict(FIXED_WORKLOAD, input_len=workload.get("input_len"), output_len=workload.get("output_len"),
                         num_prompts=workload.get("num_prompts"), extra_args=workload.get("extra_args", [])),
        "levels": [stored_level(concurrency, raw) for concurrency, raw in levels_raw],
        "path": path,
    }


# ----------------------------------------------------------------------------- one run

def parse_level(raw: Dict[str, Any], concurrency: Optional[int] = None, source: str = "result") -> Dict[str, Any]:
    """One level of a sweep from a ``vllm bench serve --save-result`` JSON document (or a level as the
    role stored it: the same keys, so parsing a stored level gives it back unchanged).

    Keeps ``concurrency`` (``concurrency`` given, else the file's ``max_concurrency``), ``num_prompts``
    and :data:`LEVEL_KEYS` under the tool's own names; a key the tool did not write (a percentile not
    selected) is null. The counts and throughputs it always writes are required, so a truncated or
    foreign file is refused instead of read as zeros.
    """
    if not isinstance(raw, dict):
        raise BenchmarkInputError("%s: not a vllm bench serve result (a JSON object was expected, got %s)"
                                  % (source, type(raw).__name__))
    missing = [key for key in REQUIRED_RESULT_KEYS if raw.get(key) is None]
    if missing:
        raise BenchmarkInputError("%s: not a vllm bench serve --save-result result (no %s); run the sweep again"
                                  % (source, ", ".join(missing)))
    level: Any = concurrency if concurrency is not None else raw.get("concurrency", raw.get("max_concurrency"))
    if _int_or_none(level) is None or int(level) < 1:
        raise BenchmarkInputError("%s: no concurrency level (max_concurrency is %r); the sweep passes "
                                  "--max-concurrency at every level" % (source, level))
    row: Dict[str, Any] = {"concurrency": int(level), "num_prompts": _int_or_none(raw.get("num_prompts"))}
    for key in LEVEL_KEYS:
        value = raw.get(key)
        if value is None and key in MEDIAN_FALLBACK:
            value = raw.get(MEDIAN_FALLBACK[key])
        row[key] = _number(value)
    for key in COUNT_KEYS:
        if row[key] is not None:
            row[key] = int(row[key])
    return row


def _number(value: Any) -> Optional[float]:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def safe_name(name: object) -> str:
    """A model name as a file-name part (served names may hold '/' or ':')."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", str(name)).strip("-.")
    return cleaned or "model"


def load_run(path: str) -> Dict[str, Any]:
    """A stored run from its file, refused with the reason when it is not one."""
    try:
        with open(path, encoding="utf-8") as handle:
            document = json.load(handle)
    except OSError as exc:
        raise BenchmarkInputError("cannot read the benchmark run %s: %s" % (path, exc.strerror or exc))
    except ValueError as exc:
        raise BenchmarkInputError("%s is not JSON (%s); remove or repair it" % (path, exc))
    return check_run(document, path)


def check_run(document: Any, source: str = "run") -> Dict[str, Any]:
    """The run with its levels parsed and sorted; anything else (a report, foreign JSON) is refused, so a
    stray file in a results directory can never become a baseline."""
    if not isinstance(document, dict) or document.get("kind") != RUN_KIND:
        raise BenchmarkInputError("%s is not a benchmark run of the llmops.vllm.benchmark role (kind %r)"
                                  % (source, document.get("kind") if isinstance(document, dict) else None))
    if not document.get("levels"):
        raise BenchmarkInputError("%s has no levels; run the sweep again" % source)
    levels = [parse_level(row, source="%s, level %d" % (source, index + 1))
              for index, row in enumerate(document["levels"])]
    return dict(document, levels=sorted(levels, key=lambda row: row["concurrency"]))


def find_last_run(results_dir: str, host: str, name: str, exclude: Optional[Dict[str, Any]] = None,
                  accept: Optional[Callable[[Dict[str, Any]], bool]] = None) -> Tuple[Optional[str], Optional[Dict[str, Any]], List[str]]:
    """The newest run of model ``name`` on ``host`` in ``<results_dir>/<host>/`` (that ``accept`` takes, when given).

    Returns (path, document, skipped), ``(None, None, skipped)`` when there is none. ``exclude`` is
    the run being judged (by its ``path``, or its start time): when a model is rolled out again
    under the same name (a new revision), the previous run of that name is the one before it.
    Files that are not runs (reports, foreign JSON) are skipped and listed, never fatal.
    """
    directory = os.path.join(results_dir, host)
    if not os.path.isdir(directory):
        return None, None, []
    exclude = exclude or {}
    exclude_path = os.path.realpath(exclude["path"]) if exclude.get("path") else None
    best: Tuple[Tuple[str, str], Optional[str], Optional[Dict[str, Any]]] = (("", ""), None, None)
    skipped = []
    for entry in sorted(os.listdir(directory)):
        path = os.path.join(directory, entry)
        if not entry.endswith(".json") or not os.path.isfile(path):
            continue
        if exclude_path and os.path.realpath(path) == exclude_path:
            continue
        try:
            document = load_run(path)
        except BenchmarkInputError as exc:
            skipped.append(str(exc))
            continue
        if document.get("name") != name:
            continue
        if exclude.get("started") and document.get("started") == exclude["started"]:
            continue
        if accept is not None and not accept(document):
            continue
        key = (str(document.get("finished") or document.get("started") or ""), entry)
        if key > best[0]:
            best = (key, path, document)
    return best[1], best[2], skipped


# ----------------------------------------------------------------------------- baselines

# What makes two runs comparable, besides FIXED_WORKLOAD (the same in every run this role makes).
WORKLOAD_KEYS = ("input_len", "output_len", "num_prompts", "extra_args")


def run_time(document: Dict[str, Any]) -> Optional[datetime.datetime]:
    text = str(document.get("finished") or document.get("started") or "")
    try:
        return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    except ValueError:
        try:
            when = datetime.datetime.fromisoformat(text)
        except ValueError:
            return None
        return when if when.tzinfo else when.replace(tzinfo=datetime.UTC)


def age_text(seconds: float) -> str:
    """3 s, 12 min, 5.2 h, 3.0 d."""
    if seconds < 120:
        return "%d s" % seconds
    if seconds < 7200:
        return "%d min" % (seconds // 60)
    if seconds < 172800:
        return "%.1f h" % (seconds / 3600)
    return "%.1f d" % (seconds / 86400)


def baseline_problem(document: Dict[str, Any], workload: Optional[Dict[str, Any]] = None,
                     max_age_s: Optional[float] = None, now: Optional[datetime.datetime] = None) -> Optional[str]:
    """Why a stored run cannot be the baseline of a gate: another workload, or older than ``max_age_s``
    seconds (None: it can)."""
    if workload is not None:
        theirs = document.get("workload") or {}
        differs = ["%s %r, not %r" % (key, theirs.get(key), workload.get(key)) for key in WORKLOAD_KEYS
                   if key in workload and theirs.get(key) != workload.get(key)]
        if differs:
            return "its workload differs (%s)" % ", ".join(differs)
    if max_age_s is not None:
        when = run_time(document)
        if when is None:
            return "it says not when it ran"
        age = ((now or datetime.datetime.now(datetime.UTC)) - when).total_seconds()
        if age > float(max_age_s):
            return "it is %s old (the limit is %s)" % (age_text(age), age_text(float(max_age_s)))
    return None


def find_baseline(results_dir: str, host: str, name: str, workload: Optional[Dict[str, Any]] = None,
                  max_age_s: Optional[float] = None, exclude: Optional[Dict[str, Any]] = None,
                  now: Optional[datetime.datetime] = None) -> Tuple[Optional[str], Optional[Dict[str, Any]], Optional[str], List[str]]:
    """The newest run of ``name`` on ``host`` with ``workload``, if it is recent enough to be the baseline:
    (path, document, None, skipped), else (None, None, why, skipped)."""
    path, document, skipped = find_last_run(results_dir, host, name, exclude=exclude,
                                            accept=lambda run: baseline_problem(run, workload) is None)
    if document is None:
        newest, other, _skipped = find_last_run(results_dir, host, name, exclude=exclude)
        if other is not None:
            return None, None, "no run of %s on %s with this workload; the newest (%s) cannot be the baseline: %s" % (
                name, host, newest, baseline_problem(other, workload)), skipped
        return None, None, "no previous run of %s on %s in %s" % (name, host, os.path.join(results_dir, host)), skipped
    problem = baseline_problem(document, None, max_age_s, now)
    if problem:
        return None, None, "the newest run of %s on %s with this workload (%s) cannot be the baseline: %s" % (
            name, host, path, problem), skipped
    return path, document, None, skipped


# ----------------------------------------------------------------------------- comparison

def levels_by_concurrency(document: Dict[str, Any]) -> Dict[int, Dict[str, Any]]:
    """{concurrency: level}: runs are compared level by level, whatever order they were stored in."""
    return {int(row["concurrency"]): row for row in document.get("levels", [])}


def choose_concurrency(new: Dict[str, Any], old: Dict[str, Any], at_concurrency: Optional[int] = None) -> Optional[int]:
    """The level the ratio is taken at: the one asked for (both runs must have it), else the highest
    level both runs have (the throughput a loaded server delivers), None when they share none."""
    new_levels, old_levels = set(levels_by_concurrency(new)), set(levels_by_concurrency(old))
    if at_concurrency is not None:
        at = int(at_concurrency)
        if at not in new_levels or at not in old_levels:
            raise BenchmarkInputError(
                "at_concurrency %d: the new run has levels %s and the previous run %s; choose a level both have "
                "(or leave at_concurrency out for the highest common one)" % (at, sorted(new_levels), sorted(old_levels)))
        return at
    common = new_levels & old_levels
    return max(common) if common else None


def compare(new: Dict[str, Any], old: Optional[Dict[str, Any]], at_concurrency: Optional[int] = None,
            min_ratio: Optional[float] = None,
            no_previous_note: str = "no previous run to compare with") -> Dict[str, Any]:
    """Before/after per level, the ratio new/old output tok/s at one level and the verdict.

    ``passed`` is ``ratio >= min_ratio`` when ``min_ratio`` is given, else true. Without a previous
    run, or with no level both runs share, there is nothing to compare: passed, with a note (a first
    rollout must not be rolled back for lack of history).
    """
    if min_ratio is not None and (_number(min_ratio) is None or float(min_ratio) < 0):
        raise BenchmarkInputError("min_ratio must be a number >= 0 (e.g. 0.9 allows 10 %% less throughput), got %r"
                                  % (min_ratio,))
    notes = []
    new_rows = levels_by_concurrency(new)
    old_rows = levels_by_concurrency(old) if old else {}
    rows = []
    for level in sorted(set(new_rows) | set(old_rows)):
        rows.append({"concurrency": level, "new": new_rows.get(level), "old": old_rows.get(level),
                     "ratio": _ratio(new_rows.get(level), old_rows.get(level))})
    for level, row in sorted(new_rows.items()):
        if row.get("failed"):
            notes.append("the new run had %d failed requests at concurrency %d" % (row["failed"], level))
    at = None
    ratio = None
    if old is None:
        notes.append("%s: passed without a ratio" % no_previous_note)
    else:
        at = choose_concurrency(new, old, at_concurrency)
        if at is None:
            notes.append("the runs share no concurrency level (new %s, previous %s): passed without a ratio"
                         % (sorted(new_rows), sorted(old_rows)))
        else:
            ratio = _ratio(new_rows[at], old_rows[at])
            if ratio is None:
                notes.append("the previous run delivered no output tokens at concurrency %d: passed without a ratio" % at)
    passed = True
    if ratio is not None and min_ratio is not None:
        passed = ratio >= float(min_ratio)
    return {"at_concurrency": at, "ratio": ratio, "min_ratio": None if min_ratio is None else float(min_ratio),
            "passed": passed, "rows": rows, "notes": notes}


def _ratio(new_row: Optional[Dict[str, Any]], old_row: Optional[Dict[str, Any]]) -> Optional[float]:
    """new / old output tok/s; None when a side is missing or the old one delivered nothing (no infinity in JSON)."""
    if not new_row or not old_row:
        return None
    new_value, old_value = new_row.get("output_throughput"), old_row.get("output_throughput")
    if new_value is None or not old_value:
        return None
    return round(float(new_value) / float(old_value), 4)


def summary_line(new: Dict[str, Any], old: Optional[Dict[str, Any]], comparison: Dict[str, Any]) -> str:
    """One line for the play output and the rollout report."""
    verdict = "passed" if comparison["passed"] else "FAILED"
    host, name = new.get("host"), new.get("name")
    if comparison["ratio"] is None:
        return "%s on %s: %s (%s)" % (name, host, verdict, "; ".join(comparison["notes"]) or "no ratio")
    at = comparison["at_concurrency"]
    old = cast(Dict[str, Any], old)  # a ratio was computed, so there is an old run
    new_value = levels_by_concurrency(new)[at]["output_throughput"]
    old_value = levels_by_concurrency(old)[at]["output_throughput"]
    gate = ""
    if comparison["min_ratio"] is not None:
        gate = " %s %g" % (">=" if comparison["passed"] else "<", comparison["min_ratio"])
    return "%s vs %s on %s: %s vs %s output tok/s at concurrency %d, ratio %s%s: %s" % (
        name, old.get("name"), host, _fmt(new_value, 1), _fmt(old_value, 1), at, _fmt(comparison["ratio"], 3),
        gate, verdict)


# ----------------------------------------------------------------------------- report

def plan_summary(plan: Optional[Dict[str, Any]]) -> str:
    """``cuda TP=4+EP, GPUs 0,1,2,3 (NUMA node 0)`` / ``cpu``: the layout behind a number."""
    if not plan:
        return "-"
    text = plan_layout(plan) if plan.get("device") == "cpu" else "%s %s" % (plan.get("device", "?"), plan_layout(plan))
    gpus = plan.get("gpu_indices")
    if gpus:
        text += ", GPUs %s" % ",".join(str(g) for g in gpus)
    if plan.get("numa_node") not in (None, "", "None"):
        text += " (NUMA node %s)" % plan["numa_node"]
    return text


def _int_or_none(value: Any) -> Optional[int]:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _fmt(value: Any, digits: int) -> str:
    number = _number(value)
    if number is None:
        return "-"
    return "{:,.{d}f}".format(number, d=digits)


def _pair(row: Dict[str, Any], key: str, digits: int) -> Tuple[str, str]:
    return (_fmt(row["old"][key], digits) if row["old"] else "-", _fmt(row["new"][key], digits) if row["new"] else "-")


def markdown_report(new: Dict[str, Any], old: Optional[Dict[str, Any]], comparison: Dict[str, Any],
                    plan: Optional[Dict[str, Any]] = None, rollout_report: Optional[Dict[str, Any]] = None,
                    png_name: Optional[str] = None, paths: Optional[Dict[str, Optional[str]]] = None) -> str:
    """The report a reviewer reads: verdict, plan and reasons, rollout timings, before/after per level."""
    paths = paths or {}
    title = "%s -> %s" % (old.get("name"), new.get("name")) if old else new.get("name")
    lines = ["# Benchmark report: %s on %s" % (title, new.get("host")), "",
             "**%s** - %s" % ("PASSED" if comparison["passed"] else "FAILED", summary_line(new, old, comparison)), ""]
    lines += ["- ratio: %s (new / previous output tok/s at concurrency %s)" % (
        _fmt(comparison["ratio"], 3), comparison["at_concurrency"] if comparison["at_concurrency"] is not None else "-"),
        "- minimum ratio: %s" % ("%s" % comparison["min_ratio"] if comparison["min_ratio"] is not None else "none (report only)")]
    lines += ["- note: %s" % note for note in comparison["notes"]]
    lines.append("")

    plan = plan or new.get("plan")
    if plan:
        lines += _plan_section(plan)
    if rollout_report:
        lines += _rollout_section(rollout_report)

    lines += ["## Throughput and latency, previous -> new", "",
              "| concurrency | output tok/s | ratio | req/s | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms |",
              "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in comparison["rows"]:
        cells = ["%s -> %s" % _pair(row, "output_throughput", 1), _fmt(row["ratio"], 2),
                 "%s -> %s" % _pair(row, "request_throughput", 2)]
        cells += ["%s -> %s" % _pair(row, key, 1) for key in ("p50_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "p99_tpot_ms")]
        gate = " (gate)" if row["concurrency"] == comparison["at_concurrency"] else ""
        lines.append("| %d%s | %s |" % (row["concurrency"], gate, " | ".join(cells)))
    lines.append("")
    if png_name:
        lines += ["![output tok/s against concurrency](%s)" % png_name, ""]

    lines += ["## Runs", "", "| | previous | new |", "|---|---|---|"]
    for label, key in (("model", "name"), ("served as", "served_model_name"), ("started", "started"),
                       ("finished", "finished")):
        lines.append("| %s | %s | %s |" % (label, old.get(key, "-") if old else "-", new.get(key, "-")))
    lines.append("| vLLM | %s | %s |" % (_vllm(old), _vllm(new)))
    lines.append("| plan | %s | %s |" % (plan_summary(old.get("plan")) if old else "-", plan_summary(new.get("plan"))))
    lines.append("| repository | %s | %s |" % (_repo(old), _repo(new)))
    lines.append("| workload | %s | %s |" % (_workload(old), _workload(new)))
    lines.append("| file | %s | %s |" % (paths.get("previous") or "-", paths.get("new") or new.get("path") or "-"))
    lines.append("")
    return "\n".join(lines)


def _vllm(document: Optional[Dict[str, Any]]) -> str:
    if not document:
        return "-"
    vllm = document.get("vllm") or {}
    return "%s %s" % (vllm.get("distribution", "vllm"), vllm.get("version", "?")) if vllm else "-"


def _repo(document: Optional[Dict[str, Any]]) -> str:
    if not document:
        return "-"
    meta = document.get("meta") or {}
    repo, commit = meta.get("repo_id"), meta.get("commit")
    if not repo:
        return "-"
    return "%s@%s" % (repo, str(commit)[:12]) if commit else repo


def _workload(document: Optional[Dict[str, Any]]) -> str:
    if not document:
        return "-"
    work = document.get("workload") or {}
    return "%s, %s in / %s out tokens" % (work.get("dataset", "?"), work.get("input_len", "?"), work.get("output_len", "?"))


PLAN_ROWS = (("device", "device"), ("tensor_parallel_size", "tensor parallel"), ("data_parallel_size", "data parallel"),
             ("enable_expert_parallel", "expert parallel"), ("gpu_indices", "GPUs"), ("numa_node", "NUMA node"),
             ("max_model_len", "max_model_len"), ("kv_cache_tokens", "KV cache tokens"),
             ("gpu_memory_utilization", "gpu_memory_utilization"), ("tool_call_parser", "tool-call parser"),
             ("reasoning_parser", "reasoning parser"))


def _plan_section(plan: Dict[str, Any]) -> List[str]:
    lines = ["## Plan", "", "| | |", "|---|---|"]
    for key, label in PLAN_ROWS:
        if plan.get(key) not in (None, "", []):
            value = plan[key]
            if isinstance(value, list):
                value = ",".join(str(v) for v in value)
            lines.append("| %s | %s |" % (label, value))
    lines.append("")
    reasons = plan.get("reasons") or []
    if reasons:
        lines += ["Reasons:", ""] + ["- %s" % reason for reason in reasons] + [""]
    warnings = plan.get("plan_warnings") or plan.get("warnings") or []
    if warnings:
        lines += ["Warnings:", ""] + ["- %s" % warning for warning in warnings] + [""]
    return lines


def _rollout_section(report: Dict[str, Any]) -> List[str]:
    lines = ["## Rollout", ""]
    desired = report.get("desired") or {}
    before = report.get("before") or {}
    if report.get("status"):
        lines.append("- status: %s" % report["status"])
    if desired:
        lines.append("- rolled out: %s@%s as %s" % (
            desired.get("repo_id", "?"), str(report.get("commit") or "?")[:12], desired.get("unit", "?")))
    if before:
        lines.append("- replaced: %s@%s (%s)" % (
            before.get("repo_id", "?"), str(before.get("commit") or "?")[:12], before.get("unit", "?")))
    lines.append("")
    timings = report.get("timings") or {}
    if timings:
        lines += ["| timing | seconds |", "|---|---:|"]
        lines += ["| %s | %s |" % (key, _fmt(value, 1)) for key, value in timings.items()]
        lines.append("")
    return lines


def plot_png(new: Dict[str, Any], old: Optional[Dict[str, Any]], path: str) -> Optional[str]:
    """Output tok/s against concurrency (log-x) for the previous and the new run.

    Returns None when matplotlib is not installed (the report says so); it is imported here only,
    with the Agg backend, so the controller needs no display and the rest works without it.
    """
    try:
        import matplotlib
        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError:
        return None
    figure, axes = pyplot.subplots(figsize=(7, 4.5), dpi=100)
    try:
        for document, style, label in ((old, "o--", "previous"), (new, "s-", "new")):
            if not document:
                continue
            rows = [row for row in document["levels"] if row.get("output_throughput") is not None]
            axes.plot([row["concurrency"] for row in rows], [row["output_throughput"] for row in rows], style,
                      label="%s: %s" % (label, document.get("name")), linewidth=2, markersize=6)
        axes.set_xscale("log", base=2)
        levels = sorted({row["concurrency"] for doc in (old, new) if doc for row in doc["levels"]})
        axes.set_xticks(levels)
        axes.set_xticklabels([str(level) for level in levels])
        axes.set_xlabel("concurrent requests")
        axes.set_ylabel("output tokens / s")
        axes.set_ylim(bottom=0)
        axes.grid(True, which="both", alpha=0.3)
        axes.legend()
        title = "%s -> %s" % (old.get("name"), new.get("name")) if old else new.get("name")
        axes.set_title("Output throughput on %s: %s" % (new.get("host"), title))
        figure.tight_layout()
        figure.savefig(path, format="png")
    finally:
        pyplot.close(figure)
    return path


def report_basename(new: Dict[str, Any], old: Optional[Dict[str, Any]], when: datetime.datetime) -> str:
    stamp = when.astimezone(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    if old:
        return "%s-%s-to-%s" % (stamp, safe_name(old.get("name")), safe_name(new.get("name")))
    return "%s-%s" % (stamp, safe_name(new.get("name")))


def write_report(results_dir: str, host: str, new: Dict[str, Any], previous: Optional[str] = None,
                 at_concurrency: Optional[int] = None, min_ratio: Optional[float] = None,
                 plan: Optional[Dict[str, Any]] = None, rollout_report: Optional[Dict[str, Any]] = None,
                 report_dir: Optional[str] = None, plot: bool = True,
                 now: Optional[datetime.datetime] = None, max_baseline_age: Optional[float] = None,
                 baseline_required: bool = False) -> Dict[str, Any]:
    """Compare ``new`` with the last run of model ``previous`` on ``host`` and write the report.

    The baseline is the newest run of ``previous`` with the new run's workload, at most
    ``max_baseline_age`` seconds old (None: any age). Without one there is no ratio: passed, unless
    ``baseline_required`` (then failed, saying why). Writes ``<report_dir>/<UTC timestamp>-<previous>-to-<new>.{md,png,json}``
    (``report_dir`` defaults to ``<results_dir>/<host>/reports``) and returns what the action returns.
    Never fails on a low ratio: ``passed`` carries the verdict, the caller decides (a rollout rolls back).
    """
    check_run(new, "the new run")
    now = now or datetime.datetime.now(datetime.UTC)
    old_path: Optional[str] = None
    old: Optional[Dict[str, Any]] = None
    skipped: List[str] = []
    no_previous_note = "no previous model given (report of the new run only)"
    if previous:
        old_path, old, why, skipped = find_baseline(results_dir, host, previous, workload=new.get("workload"),
                                                    max_age_s=max_baseline_age, exclude=new, now=now)
        no_previous_note = why or no_previous_note
    comparison = compare(new, old, at_concurrency, min_ratio, no_previous_note=no_previous_note)
    if previous and old is None and baseline_required:
        comparison["passed"] = False
        comparison["notes"] = [note.replace(": passed without a ratio", "") for note in comparison["notes"]]
        comparison["notes"].append("no baseline of %s to compare with, and one is required "
                                   "(rollout_benchmark_allow_no_baseline is false): failed" % previous)
    report_dir = report_dir or os.path.join(results_dir, host, "reports")
    os.makedirs(report_dir, exist_ok=True)
    base = os.path.join(report_dir, report_basename(new, old, now))
    png = None
    if plot:
        png = plot_png(new, old, base + ".png")
        if png is None:
            comparison["notes"].append("no plot: matplotlib is not installed on the controller (pip install matplotlib)")
    summary = summary_line(new, old, comparison)
    markdown = markdown_report(new, old, comparison, plan=plan, rollout_report=rollout_report,
                               png_name=os.path.basename(png) if png else None,
                               paths={"previous": old_path, "new": new.get("path")})
    result = {
        "kind": REPORT_KIND, "schema": SCHEMA, "host": host, "generated": now.isoformat(),
        "new_run": new.get("path"), "new_name": new.get("name"), "previous_name": previous or None,
        "previous_run": old_path, "at_concurrency": comparison["at_concurrency"], "ratio": comparison["ratio"],
        "min_ratio": comparison["min_ratio"], "passed": comparison["passed"], "notes": comparison["notes"],
        "skipped_files": skipped, "summary": summary, "rows": comparison["rows"],
        "markdown": base + ".md", "png": png, "json": base + ".json",
    }
    with open(base + ".md", "w", encoding="utf-8") as handle:
        handle.write(markdown)
    with open(base + ".json", "w", encoding="utf-8") as handle:
        json.dump(dict(result, new=new, previous=old, plan=plan, rollout_report=rollout_report), handle,
                  indent=2, sort_keys=True)
        handle.write("\n")
    return result
