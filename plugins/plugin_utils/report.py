# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a rollout tells a person: a few summary lines per host and one table for the fleet.

The report itself (reports/<host>/latest.json, written by the rollout role) keeps everything; these
functions only choose what to show. Phases that did not run are left out rather than shown as null,
and the benchmark's Markdown stays in its file: the terminal gets its verdict and its path.
"""

from __future__ import annotations

import time
from typing import Any, Dict, Iterable, List, Optional, Tuple

from ansible_collections.llmops.vllm.plugins.plugin_utils.contracts import plan_layout

# Report timing keys in the order they happen, with the words a person reads.
PHASES: Tuple[Tuple[str, str], ...] = (
    ("download_s", "download"),
    ("retire_s", "retire"),
    ("time_to_ready_s", "load to ready"),
    ("downtime_gap_s", "downtime gap"),
    ("rollback_s", "rollback"),
    ("out_of_lb_s", "out of the load balancer"),
    ("switch_s", "apply -> new model serves (host proxy)"),
    ("total_s", "total"),
)


def phase_timings(marks: Optional[Dict[str, Any]], changed: bool = False, retired: bool = False,
                  ready_seconds: Optional[Any] = None, now: Optional[float] = None) -> Dict[str, float]:
    """Seconds of each phase of a rollout from the times its tasks noted (epoch seconds; a phase not
    reached has no time and no entry): download (started -> fetched), retire (retire started -> old
    model gone), downtime gap (retire started -> new model ready), time to ready (the gate's own
    seconds), rollback (retire started -> old model back) and total (started -> now). Download, gap
    and time to ready count only when the run changed what the host serves; retire and gap only when
    the old model was retired. Out of the load balancer: drained -> enabled again (the new model, or the old
    one after a rollback), when a load balancer drained the host. Switch: started -> the host proxy's stable port sends
    clients to the new model (swap auto or bluegreen; "apply" to "B serves")."""
    marks = marks or {}

    def mark(name: str) -> Optional[float]:
        value = marks.get(name)
        return None if value is None or value == "" else float(value)

    started, fetched, retire = mark("started"), mark("fetched"), mark("retire_started")
    retired_at, ready, restored = mark("retired"), mark("ready"), mark("restored_ready")
    drained, enabled, switched = mark("drained"), mark("enabled"), mark("switched")
    spans: Dict[str, Optional[float]] = {
        "download_s": fetched - started if changed and fetched is not None and started is not None else None,
        "downtime_gap_s": ready - retire if changed and retired and ready is not None and retire is not None else None,
        "retire_s": retired_at - retire if retired and retired_at is not None and retire is not None else None,
        "time_to_ready_s": float(ready_seconds) if changed and ready_seconds not in (None, "") else None,
        "rollback_s": restored - retire if restored is not None and retire is not None else None,
        "out_of_lb_s": enabled - drained if drained is not None and enabled is not None else None,
        "switch_s": switched - started if switched is not None and started is not None else None,
        "total_s": (time.time() if now is None else now) - started if started is not None else None,
    }
    return {key: round(value, 2) for key, value in spans.items() if value is not None}


def report_plan(plan: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """The plan as a report keeps it: every key of the contract but the candidates table (the CLI shows that)."""
    return {key: value for key, value in (plan or {}).items() if key not in ("candidates", "changed", "failed", "msg")}


def phases(timings: Optional[Dict[str, Any]]) -> List[Tuple[str, float]]:
    """(words, seconds) of the phases that ran, in order."""
    timings = timings or {}
    shown = []
    for key, words in PHASES:
        value = timings.get(key)
        if value is None or value == "":
            continue
        try:
            shown.append((words, float(value)))
        except (TypeError, ValueError):
            continue
    return shown


def _serves(report: Dict[str, Any]) -> str:
    desired = report.get("desired") or {}
    commit = report.get("commit") or ""
    return "%s@%s" % (desired.get("repo_id", "?"), commit[:12] or "?")


def summary_lines(report: Dict[str, Any], report_path: Optional[str] = None) -> List[str]:
    """A handful of lines for the end of a rollout: status, plan, what was retired, phases, benchmark, files."""
    desired = report.get("desired") or {}
    plan = report.get("plan") or {}
    before = report.get("before") or {}
    lines = ["%s: %s as %s" % (report.get("status", "?"), _serves(report), desired.get("unit", "?"))]
    if report.get("error"):
        lines.append("error: %s" % " ".join(str(report["error"]).split()))
    if plan:
        gpus = ",".join(str(i) for i in plan.get("gpu_indices") or [])
        lines.append("plan: %s%s, max_model_len %s, KV cache %s tokens"
                     % (plan_layout(plan), " on GPUs " + gpus if gpus else "", plan.get("max_model_len", "?"),
                        plan.get("kv_cache_tokens", "?")))
    takeover = before.get("takeover") or {}
    if takeover:
        lines.append("taken over: pid %s of %s (%s) as %s; secrets in %s" % (
            takeover.get("pid", "?"), takeover.get("user") or "?", takeover.get("started_from") or "?",
            before.get("unit", "?"), takeover.get("env_file") or "no EnvironmentFile (none found)"))
    if before.get("unit") and before.get("unit") != desired.get("unit"):
        lines.append("retired: %s (%s)" % (before["unit"], before.get("repo_id", "?")))
    shown = phases(report.get("timings"))
    if shown:
        lines.append("phases: " + ", ".join("%s %.1f s" % (words, seconds) for words, seconds in shown))
    benchmark = report.get("benchmark") or {}
    if benchmark.get("summary"):
        lines.append("benchmark: %s" % benchmark["summary"])
        if benchmark.get("markdown"):
            lines.append("benchmark report: %s" % benchmark["markdown"])
    if report_path:
        lines.append("report: %s" % report_path)
    return lines


def fleet_table(reports: Iterable[Tuple[str, Dict[str, Any]]]) -> List[str]:
    """One Markdown row per host: status, what it retired and serves now, the layout, the phases that ran."""
    rows = ["| host | status | retired | serves now | layout | downtime gap s | load to ready s | download s |",
            "|---|---|---|---|---|---|---|---|"]
    for host, report in reports:
        timings = report.get("timings") or {}
        before = report.get("before") or {}

        def seconds(key: str, timings: Dict[str, Any] = timings) -> str:
            value = timings.get(key)
            return "-" if value is None or value == "" else "%.1f" % float(value)

        rows.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            host, report.get("status", "?"), before.get("unit") or "-", _serves(report), plan_layout(report.get("plan")),
            seconds("downtime_gap_s"), seconds("time_to_ready_s"), seconds("download_s")))
    return rows
