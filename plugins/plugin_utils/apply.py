# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``llmops-vllm apply`` and ``llmops-vllm diff``: the rollout playbook through ansible-runner's Python API.

One run of ``llmops.vllm.rollout`` (``diff``: the same play in check mode with --diff, as playbooks/plan.yml),
its events turned into

- progress per host and phase (probe, plan, install, fetch, retire, serve, gate, benchmark, ...) on
  stderr: one line per phase and per progress report in a CI log, one live line on a terminal;
- a summary (``--json`` on stdout) with a ``hosts`` map - old and new model, commit, plan label,
  timings per phase, gate result, rollback reason - written next to the runner's artifacts;
- an exit code: 0 applied or nothing to change; 1 bad input; 2 refused before anything was touched
  (preflight, "does not fit", the host's lock held by another run); 3 failed, the old model serves
  (rolled back, or nothing was stopped); 4 failed and the host may not serve (named). A fleet
  exits with its worst host (4 > 3 > 2 > 0). ``diff`` exits 0 with or without changes, 2 when the
  preflight would refuse.

The classification reads what the roles report (the ``rollout_report`` fact of
roles/rollout/tasks/report.yml, the fast path) and where a task failed (the file it comes from), never
the wording of messages.
"""

from __future__ import annotations

import datetime
import getpass
import json
import os
import re
import socket
import sys
import time
import uuid
from typing import Any, Callable, Dict, List, Optional, TextIO, Tuple

EXIT_OK, EXIT_BAD_INPUT, EXIT_REFUSED, EXIT_ROLLED_BACK, EXIT_MAY_NOT_SERVE = 0, 1, 2, 3, 4
# A fleet's exit code is its worst host's.
SEVERITY = {EXIT_OK: 0, EXIT_REFUSED: 1, EXIT_ROLLED_BACK: 2, EXIT_MAY_NOT_SERVE: 3}
OUTCOME_EXIT = {"ok": EXIT_OK, "unchanged": EXIT_OK, "would_change": EXIT_OK, "refused": EXIT_REFUSED, "rolled_back": EXIT_ROLLED_BACK,
                "failed": EXIT_MAY_NOT_SERVE, "unreachable": EXIT_MAY_NOT_SERVE}
DEFAULT_PLAYBOOK = "llmops.vllm.rollout"

# (role, tasks file) -> phase; "*" is any file of the role; None: the phase of the step around it
# (a lease renewal, an include of the next role).
PHASES: Dict[Tuple[str, str], Optional[str]] = {
    ("rollout", "fastpath"): "probe", ("rollout", "desired"): "probe", ("rollout", "lock"): "lock",
    ("rollout", "lease"): None, ("rollout", "unlock"): "lock", ("rollout", "preflight"): None,
    ("preflight", "probe"): "probe", ("preflight", "*"): "plan",
    ("vllm_install", "*"): "install", ("model", "*"): "fetch", ("rollout", "fetch"): "fetch",
    ("rollout", "takeover"): "retire", ("retire", "*"): "retire",
    ("serve", "gate"): "gate", ("serve", "progress"): "gate", ("serve", "*"): "serve", ("rollout", "swap"): "serve",
    ("benchmark", "*"): "benchmark", ("rollout", "benchmark"): "benchmark", ("rollout", "baseline"): "benchmark",
    ("rollout", "record"): "record", ("rollout", "report"): "report", ("rollout", "rescue"): "rollback",
    ("rollout", "prune"): "prune",
}
# Phases in which a failure has touched nothing yet: the run was refused.
REFUSING_PHASES = ("lock", "probe", "plan")
_TASK_FILE = re.compile(r"/roles/([^/]+)/tasks/([^/:]+)\.ya?ml:\d+$")


def phase_of(task_path: str, task_name: str = "", role: str = "") -> Optional[str]:
    """The phase a task belongs to, from the file it comes from (roles/<role>/tasks/<file>.yml:<line>);
    None: the phase it is part of goes on."""
    match = _TASK_FILE.search(task_path or "")
    if not match:
        role = (role or "").rsplit(".", 1)[-1]
        if role and role != "rollout":  # a role's argument validation: the role's phase
            return PHASES.get((role, "*")) or role
        if role == "rollout":
            return None
        # a task of the playbook itself: the facts (probe) or the lock's include
        return "lock" if "lock" in task_name.lower() else "probe"
    role, name = match.groups()
    if (role, name) in PHASES:
        return PHASES[(role, name)]
    return PHASES.get((role, "*")) or role


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat()


def new_run_id() -> str:
    return "%s-%s" % (datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ"), uuid.uuid4().hex[:8])


def lock_holder(run_id: str) -> str:
    """Who holds the hosts' locks during this run: <user>@<controller>/<run id>."""
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name in a container: still a readable holder
        user = "uid%d" % os.getuid()
    return "%s@%s/%s" % (user, socket.gethostname(), run_id)


def _short(text: Any, limit: int = 600) -> str:
    return " ".join(str(text).split())[:limit]


class HostRun:
    """What one host did in this run, built from its events."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.phase: Optional[str] = None
        self.phase_started = 0.0
        self.phases: Dict[str, float] = {}
        self.report: Optional[Dict[str, Any]] = None
        # Several models on one host (vllm_models): each model's report, by name, in the order they ran.
        self.reports: Dict[str, Dict[str, Any]] = {}
        self.fast_path = False
        self.failed: Optional[Dict[str, Any]] = None
        self.unreachable: Optional[str] = None
        self.changed = False
        self.diffs: List[Dict[str, str]] = []
        self.held_by: Optional[Dict[str, Any]] = None
        self.warnings: List[str] = []

    def enter(self, phase: str, now: float) -> Optional[str]:
        """Switch to `phase`; returns the phase left (None when it is the same)."""
        if phase == self.phase:
            return None
        left = self.phase
        if left is not None:
            self.phases[left] = round(self.phases.get(left, 0.0) + now - self.phase_started, 1)
        self.phase, self.phase_started = phase, now
        return left

    def close(self, now: float) -> None:
        if self.phase is not None:
            self.phases[self.phase] = round(self.phases.get(self.phase, 0.0) + now - self.phase_started, 1)
            self.phase = None

    def outcome(self, check: bool) -> str:
        if self.unreachable is not None:
            return "unreachable"
        status = (self.report or {}).get("status")
        if self.failed is None:
            if self.fast_path:
                return "unchanged"
            if check:  # a preview: what the rollout would do
                return "would_change" if status == "ok" or self.diffs else "unchanged"
            if status in ("ok", "unchanged"):
                return str(status)
            return "ok" if self.changed else "unchanged"
        if check:
            return "refused"
        if status == "rolled_back":
            return "rolled_back"
        if status == "failed":
            return "failed"
        if self.failed["phase"] in REFUSING_PHASES:
            return "refused"
        if self.failed["phase"] == "install":  # before the preflight: nothing of the old model was stopped
            return "rolled_back"
        return "failed"

    def summary(self, check: bool) -> Dict[str, Any]:
        outcome = self.outcome(check)
        report = self.report or {}
        before = report.get("before") or {}
        desired = report.get("desired") or {}
        plan = report.get("plan") or {}
        benchmark = report.get("benchmark") or {}
        ready = report.get("ready") or {}
        doc: Dict[str, Any] = {
            "outcome": outcome,
            "exit_code": OUTCOME_EXIT[outcome],
            "changed": outcome in ("ok", "would_change"),
            "fast_path": self.fast_path,
            "old_model": ({"name": before.get("name"), "repo_id": before.get("repo_id"), "commit": before.get("commit")}
                          if before else None),
            "new_model": ({"name": desired.get("name"), "repo_id": desired.get("repo_id"), "revision": desired.get("revision"),
                           "commit": report.get("commit")} if desired else None),
            "plan": plan.get("layout"),
            "timings": report.get("timings") or {},
            "phases": self.phases,
            "gate": ({"stages": ready.get("stages"), "benchmark_passed": benchmark.get("passed"),
                      "benchmark_ratio": benchmark.get("ratio")} if ready or benchmark else None),
            "rollback_reason": report.get("error") if outcome == "rolled_back" else None,
            "error": None,
        }
        if len(self.reports) > 1:
            doc["models"] = dict((name, {"status": one.get("status"), "commit": one.get("commit"),
                                         "plan": (one.get("plan") or {}).get("layout"), "error": one.get("error")})
                                 for name, one in self.reports.items())
        if self.failed is not None:
            doc["error"] = self.failed["msg"]
            doc["failed_task"] = self.failed["task"]
            doc["failed_phase"] = self.failed["phase"]
            if outcome == "rolled_back" and not doc["rollback_reason"]:
                doc["rollback_reason"] = self.failed["msg"]
        if self.unreachable is not None:
            doc["error"] = self.unreachable
        if self.held_by is not None:
            doc["lock_held_by"] = self.held_by
        if self.diffs:
            doc["diff"] = self.diffs
        if self.warnings:
            doc["warnings"] = self.warnings
        return doc


class Progress:
    """Progress on a stream: a line per phase and per progress report (CI logs), or one live line
    that is rewritten (a terminal)."""

    def __init__(self, stream: TextIO, live: Optional[bool] = None, min_interval: float = 10.0,
                 secrets: Optional[List[str]] = None) -> None:
        self.stream = stream
        self.secrets = secrets or []
        self.live = stream.isatty() if live is None else live
        self.min_interval = min_interval
        self.last_item: Dict[str, float] = {}
        self._live_shown = False

    def line(self, text: str) -> None:
        if self._live_shown:
            self.stream.write("\r\033[K")
            self._live_shown = False
        self.stream.write(redacted(text, self.secrets) + "\n")
        self.stream.flush()

    def status(self, host: str, text: str) -> None:
        """A progress report (download bytes and time left, readiness): rewritten live, else rate-limited."""
        text = redacted("%-12s %s" % (host, text), self.secrets)
        if self.live:
            width = 160
            self.stream.write("\r\033[K" + text[:width])
            self.stream.flush()
            self._live_shown = True
            return
        now = time.monotonic()
        if now - self.last_item.get(host, -1e9) >= self.min_interval:
            self.last_item[host] = now
            self.line(text)


class Collector:
    """The event handler: per-host state, progress output."""

    def __init__(self, progress: Progress, clock: Callable[[], float] = time.monotonic) -> None:
        self.hosts: Dict[str, HostRun] = {}
        self.progress = progress
        self.clock = clock
        self.started = clock()

    def host(self, name: str) -> HostRun:
        if name not in self.hosts:
            self.hosts[name] = HostRun(name)
        return self.hosts[name]

    def _elapsed(self) -> str:
        return "%5.0fs" % (self.clock() - self.started)

    def __call__(self, event: Dict[str, Any]) -> bool:
        try:
            self.handle(event)
        except Exception as exc:  # noqa: BLE001 - progress must never break the run it reports on
            self.progress.line("llmops-vllm: progress: %s: %s" % (type(exc).__name__, exc))
        return True  # keep the event in the artifacts

    def handle(self, event: Dict[str, Any]) -> None:
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        name = data.get("host")
        if not name or not kind.startswith("runner_"):
            return
        run = self.host(name)
        task = data.get("task") or ""
        phase = phase_of(data.get("task_path") or "", task, data.get("role") or "") or run.phase or "probe"
        res = data.get("res") or {}
        now = self.clock()
        if kind in ("runner_on_start", "runner_on_ok", "runner_on_failed", "runner_item_on_ok"):
            if phase != run.phase:
                left = run.enter(phase, now)
                if left is not None:
                    self.progress.line("%s %-12s %-9s done in %.0f s" % (self._elapsed(), name, left, run.phases.get(left, 0)))
                self.progress.line("%s %-12s %-9s ..." % (self._elapsed(), name, phase))
        if kind == "runner_on_ok":
            if res.get("changed") and phase not in ("lock", "report"):
                run.changed = True
            facts = res.get("ansible_facts") or {}
            if isinstance(facts.get("rollout_report"), dict):
                run.report = facts["rollout_report"]
                run.reports[str((run.report.get("desired") or {}).get("name"))] = run.report
            if task.startswith("Fast path | nothing to do"):
                run.fast_path = True
                self.progress.line("%s %-12s %s" % (self._elapsed(), name, _short(res.get("msg", "nothing to do"), 200)))
            diff = res.get("diff")
            invoked = ((res.get("invocation") or {}).get("module_args") or {}) if isinstance(res.get("invocation"), dict) else {}
            for one in (diff if isinstance(diff, list) else [diff] if isinstance(diff, dict) else []):
                # file contents (a unit, the state file); not the attribute changes of file tasks
                if isinstance(one, dict) and isinstance(one.get("after"), str) and isinstance(one.get("before", ""), str) \
                        and one.get("before", "") != one.get("after"):
                    # the file's path: a new file's template names only its temporary source (after_header)
                    path = one.get("before_header") or invoked.get("dest") or invoked.get("path") or one.get("after_header")
                    run.diffs.append({"task": task, "path": str(path or ""),
                                      "before": str(one.get("before") or ""), "after": str(one.get("after") or "")})
            for warning in res.get("warnings") or []:
                run.warnings.append(_short(warning))
        elif kind == "runner_item_on_ok":
            label = (res.get("_ansible_item_label") if isinstance(res.get("_ansible_item_label"), str) else None)
            if label and phase in ("fetch", "serve", "gate", "install", "benchmark", "retire"):
                self.progress.status(name, "%-9s %s" % (phase, _short(label, 140)))
        elif kind == "runner_on_failed":
            if data.get("ignore_errors"):
                return
            msg = _short(res.get("msg") or res.get("stderr") or "failed")
            if run.failed is None or phase == "rollback" or run.failed["phase"] == "rollback":
                # the first failure is the cause; the rescue's own readable failure replaces its message
                if run.failed is None:
                    run.failed = {"task": task, "phase": phase, "msg": msg}
                else:
                    run.failed["msg"] = msg
            if isinstance(res.get("held_by"), dict):
                run.held_by = res["held_by"]
            self.progress.line("%s %-12s %-9s FAILED: %s: %s" % (self._elapsed(), name, phase, task, _short(msg, 400)))
        elif kind == "runner_on_unreachable":
            run.unreachable = _short(res.get("msg") or "unreachable")
            self.progress.line("%s %-12s UNREACHABLE: %s" % (self._elapsed(), name, run.unreachable))

    def finish(self) -> None:
        now = self.clock()
        for run in self.hosts.values():
            phase = run.phase
            run.close(now)
            if phase is not None:
                self.progress.line("%s %-12s %-9s done in %.0f s" % (self._elapsed(), run.name, phase, run.phases.get(phase, 0)))


def host_paths(collector: Collector, root: str) -> None:
    """An offline preview's diffs name the files' host paths, not where under root/<host> it kept them."""
    for name, run in collector.hosts.items():
        prefix = os.path.join(root, name)
        for one in run.diffs:
            if one["path"].startswith(prefix + "/"):
                one["path"] = one["path"][len(prefix):]


def fleet_exit(codes: List[int]) -> int:
    """The worst host's exit code (4 > 3 > 2 > 0)."""
    return max(codes, key=lambda code: SEVERITY.get(code, 0)) if codes else EXIT_OK


def summarize(collector: Collector, command: str, run_id: str, started: str, artifacts: str, rc: int,
              runner_status: str, stdout_tail: str) -> Dict[str, Any]:
    check = command == "diff"
    hosts = dict((name, run.summary(check)) for name, run in sorted(collector.hosts.items()))
    codes = [doc["exit_code"] for doc in hosts.values()]
    exit_code = fleet_exit(codes)
    error = None
    if not hosts and rc != 0:  # ansible-playbook stopped before any host: the inventory, the playbook, a variable
        exit_code, error = EXIT_BAD_INPUT, _short(stdout_tail, 1500) or "ansible-playbook failed (status %d)" % rc
    elif rc != 0 and exit_code == EXIT_OK:
        exit_code, error = EXIT_MAY_NOT_SERVE, "ansible-playbook failed (status %d, %s) without a failed host" % (rc, runner_status)
    if check and exit_code == EXIT_ROLLED_BACK:
        exit_code = EXIT_REFUSED
    return {
        "command": command, "run_id": run_id, "started": started, "finished": now_iso(),
        "seconds": round(time.monotonic() - collector.started, 1), "exit_code": exit_code, "error": error,
        "changed": any(doc["changed"] for doc in hosts.values()),
        "artifacts": artifacts, "ansible_rc": rc, "hosts": hosts,
    }


def render_summary(summary: Dict[str, Any]) -> str:
    lines = []
    for name, doc in summary["hosts"].items():
        new, old = doc.get("new_model") or {}, doc.get("old_model") or {}
        what = "%s@%s" % (new.get("repo_id"), (new.get("commit") or new.get("revision") or "")[:12]) if new else ""
        line = "%-12s %-11s %s" % (name, doc["outcome"].upper(), what)
        if doc.get("plan"):
            line += " (%s)" % doc["plan"]
        if old and old.get("name") and old.get("name") != new.get("name"):
            line += ", replacing %s" % old.get("name")
        if doc.get("rollback_reason") or doc.get("error"):
            line += " - " + _short(doc.get("rollback_reason") or doc.get("error"), 500)
        lines.append(line)
        for one in doc.get("diff") or []:
            lines.append("  --- %s (%s)" % (one["path"] or "before", one["task"]))
            lines.extend("  " + row for row in unified(one["before"], one["after"], one["path"]))
    if summary.get("error"):
        lines.append("error: %s" % summary["error"])
    lines.append("%s: exit %d in %.0f s; artifacts %s" % (
        summary["command"], summary["exit_code"], summary["seconds"], summary["artifacts"]))
    return "\n".join(lines)


def unified(before: str, after: str, path: str) -> List[str]:
    import difflib
    return [row.rstrip("\n") for row in difflib.unified_diff(before.splitlines(True), after.splitlines(True),
                                                             "a" + path if path.startswith("/") else path or "before",
                                                             "b" + path if path.startswith("/") else path or "after")][2:]


def _env() -> Dict[str, str]:
    """The play's environment: ansible-playbook of this Python's venv first (a wheel installed in a venv
    that is not on PATH), plain output for the logs."""
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", os.defpath)
    # An inventory source ansible-playbook cannot parse stops the run, as it stopped the CLI's own check.
    return {"PATH": path, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
            "ANSIBLE_INVENTORY_UNPARSED_FAILED": "1", "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "1"}


def run_playbook(command: str, inventories: List[str], extra: List[str], limit: Optional[str], lock_timeout: Optional[int],
                 artifacts_root: str, playbook: str = DEFAULT_PLAYBOOK, vault_password_file: Optional[str] = None,
                 verbosity: int = 0, progress_stream: TextIO = sys.stderr, live: Optional[bool] = None,
                 run_id: Optional[str] = None, variables: Optional[Dict[str, Any]] = None,
                 offline: Optional[Tuple[str, str]] = None) -> Dict[str, Any]:
    """Run the rollout (``diff``: its preview) through ansible-runner; the summary. ``variables`` go last
    (they win over every -e); ``offline``: (snapshot directory, the hosts' roots) of ``diff --offline``."""
    import ansible_runner  # the controller's dependency; imported here so that `plan` works without it

    run_id = run_id or new_run_id()
    started = now_iso()
    os.makedirs(artifacts_root, exist_ok=True)
    private = os.path.abspath(artifacts_root)
    # Ours go after the user's -e values, so they win: the holder is this run's, --lock-timeout is
    # what the command line says (without it, an inventory's or -e's rollout_lock_timeout holds).
    ours: Dict[str, Any] = {"rollout_lock_holder": lock_holder(run_id)}
    if lock_timeout is not None:
        ours["rollout_lock_timeout"] = lock_timeout
    if command == "diff":
        ours["rollout_preview"] = True
    ours.update(variables or {})
    secrets = known_secrets(extra)
    progress = Progress(progress_stream, live=live, secrets=secrets)
    collector = Collector(progress)
    progress.line("llmops-vllm %s: %s on %s (run %s)" % (command, playbook, ", ".join(inventories), run_id))
    artifacts = os.path.join(private, "artifacts", run_id)
    with ExtraVars(extra + [json.dumps(ours, sort_keys=True)]) as files:
        cmdline = files.cmdline() + (["--diff"] if command == "diff" else [])
        if limit:
            cmdline += ["--limit", limit]
        if vault_password_file:
            cmdline += ["--vault-password-file", os.path.abspath(vault_password_file)]
        # cwd = the caller's (project_dir): its ansible.cfg, collections path and relative -e @files hold.
        # The facts stay in memory: ansible-runner's default fact cache is a directory of the artifacts.
        try:
            runner = ansible_runner.run(
                private_data_dir=private, ident=run_id, playbook=playbook, project_dir=os.getcwd(),
                inventory=[os.path.abspath(path) for path in inventories],
                cmdline=" ".join(_quote(part) for part in cmdline), event_handler=collector, quiet=True,
                verbosity=verbosity or None, envvars=_env(), fact_cache_type="memory",
                status_handler=scrub_on_start)
        finally:
            scrub_artifacts(artifacts, secrets)
    collector.finish()
    tail = ""
    try:
        with open(os.path.join(artifacts, "stdout"), encoding="utf-8", errors="replace") as handle:
            tail = handle.read()[-3000:]
    except OSError:
        pass
    if offline:
        host_paths(collector, offline[1])
    summary = summarize(collector, command, run_id, started, artifacts, runner.rc if runner.rc is not None else 1,
                        runner.status, tail)
    if offline:
        summary["offline"] = os.path.abspath(offline[0])
    summary = dict(redacted(summary, secrets))
    path = os.path.join(artifacts, "summary.json")
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as handle:
        json.dump(summary, handle, indent=2, sort_keys=True)
        handle.write("\n")
    summary["summary_file"] = path
    return summary


def take_snapshot(directory: str, inventories: List[str], extra: List[str], limit: Optional[str], artifacts_root: str,
                  playbook: str = DEFAULT_PLAYBOOK, vault_password_file: Optional[str] = None, verbosity: int = 0,
                  progress_stream: TextIO = sys.stderr, live: Optional[bool] = None) -> Dict[str, Any]:
    """``apply --snapshot DIR``: after the rollout, a preview of what the hosts now serve (past the fast
    path) records what it reads on each host (llmops.vllm.host_read) into DIR/<host>.json, for
    ``diff --offline DIR``. A host's earlier snapshot is replaced only by a complete new one."""
    import shutil
    import tempfile

    from ansible_collections.llmops.vllm.plugins.plugin_utils import snapshot

    os.makedirs(directory, mode=0o700, exist_ok=True)  # each snapshot file is 0600 (snapshot.save)
    staging = tempfile.mkdtemp(prefix=".snapshot-", dir=directory)
    try:
        preview = run_playbook("diff", inventories, extra, limit, None, artifacts_root, playbook=playbook,
                               vault_password_file=vault_password_file, verbosity=verbosity,
                               progress_stream=progress_stream, live=live,
                               variables={"rollout_force": True, snapshot.RECORD_VAR: os.path.abspath(staging),
                                          "llmops_vllm_snapshot_collection": collection_version()})
        taken, failed = [], {}
        for name, doc in preview["hosts"].items():
            path = os.path.join(staging, name + ".json")
            if doc["outcome"] in ("would_change", "unchanged") and os.path.exists(path):
                os.replace(path, snapshot.path_of(directory, name))
                taken.append(name)
            else:
                failed[name] = doc.get("error") or doc["outcome"]
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {"dir": directory, "hosts": sorted(taken), "failed": failed, "run_id": preview["run_id"]}


def offline_variables(directory: str, root: str) -> Dict[str, Any]:
    """The variables of ``diff --offline``: every host on the controller, its reads from the snapshot, its
    files under root/<host>, the full preview (the fast path reads the host itself)."""
    from ansible_collections.llmops.vllm.plugins.plugin_utils import snapshot

    return {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, "ansible_become": False,
            "rollout_force": True, snapshot.REPLAY_VAR: os.path.abspath(directory),
            "llmops_vllm_root": os.path.join(os.path.abspath(root), "{{ inventory_hostname }}")}


def prepare_offline(directory: str, hosts: List[str], root: str) -> None:
    """Each host's recorded files under root/<host>; a host without a snapshot is bad input."""
    from ansible_collections.llmops.vllm.plugins.plugin_utils import snapshot

    problems = []
    for host in hosts:
        try:
            snapshot.materialize(snapshot.load(directory, host), os.path.join(root, host))
        except snapshot.SnapshotError as exc:
            problems.append(str(exc))
    if problems:
        raise ValueError("; ".join(problems))


def collection_version() -> str:
    """This collection's version: galaxy.yml in a checkout, MANIFEST.json in a built one."""
    import yaml
    top = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    try:
        with open(os.path.join(top, "galaxy.yml"), encoding="utf-8") as handle:
            return str(yaml.safe_load(handle).get("version"))
    except OSError:
        pass
    try:
        with open(os.path.join(top, "MANIFEST.json"), encoding="utf-8") as handle:
            return str(json.load(handle)["collection_info"]["version"])
    except (OSError, ValueError, KeyError):
        return "unknown"


def notify(summary_file: str, inventories: List[str], extra: List[str], vault_password_file: Optional[str] = None,
           playbook: str = "llmops.vllm.notify") -> Dict[str, Any]:
    """Post the summary to the webhook the inventory names (playbooks/notify.yml, the URL from Vault)."""
    import ansible_runner

    failures: List[str] = []

    def handler(event: Dict[str, Any]) -> bool:
        if event.get("event") in ("runner_on_failed", "runner_on_unreachable"):
            # no_log hides the message (it would name the URL): say what kind of failure it was
            res = (event.get("event_data") or {}).get("res") or {}
            failures.append("status %s" % res.get("status", "unknown") if "status" in res else "the request failed")
        return True

    private = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(summary_file))))
    ident = os.path.basename(os.path.dirname(summary_file)) + "-notify"
    with ExtraVars(extra + [json.dumps({"llmops_vllm_summary_file": os.path.abspath(summary_file)})]) as files:
        cmdline = files.cmdline()
        if vault_password_file:
            cmdline += ["--vault-password-file", os.path.abspath(vault_password_file)]
        try:
            runner = ansible_runner.run(
                private_data_dir=private, ident=ident, playbook=playbook,
                project_dir=os.getcwd(), inventory=[os.path.abspath(path) for path in inventories],
                cmdline=" ".join(_quote(part) for part in cmdline), event_handler=handler, quiet=True,
                envvars=_env(), fact_cache_type="memory", status_handler=scrub_on_start)
        finally:
            scrub_artifacts(os.path.join(private, "artifacts", ident), known_secrets(extra))
    return {"posted": runner.rc == 0 and not failures, "error": "; ".join(failures) or (
        None if runner.rc == 0 else "the notify play failed (status %s)" % runner.rc)}


# ---------------------------------------------------------------------------- secrets out of the artifacts
#
# ansible-runner keeps the command line (its `command` file, with the controller's whole environment),
# every event (job_events/: module arguments at -vvv, results, facts) and the stdout of a run. So:
# - every -e value other than an @file goes to ansible-playbook as a 0600 file of its own, in a 0700
#   directory outside the artifacts that is removed after the run (ExtraVars): the command line names
#   only paths;
# - the `command` file keeps the values of ENV_KEPT only, every other variable's value is masked
#   (scrub_command: as soon as the run starts, and again after it);
# - the facts stay in memory (ansible-runner's default fact cache is a directory of the artifacts);
# - the modules mask a URL's password themselves (module_utils/redact.py), the roles no_log what carries
#   a secret, and the rollout gathers no ansible_env;
# - a last pass replaces the secrets the CLI knows - the values of secret-named -e variables and
#   environment variables, URLs' passwords in either - in every file of the artifacts, the summary and the
#   progress lines (known_secrets, scrub_artifacts, redacted): a safety net, not the mechanism.

MASK = "********"
# Names of variables whose values are secrets: a token, a password, an API key, a webhook URL (its path is one).
SECRET_NAME = re.compile(r"token|passw|secret|api_?key|credential|private_key|webhook_url|auth|cookie|session",
                         re.IGNORECASE)
# The environment variables whose values the runner's `command` file keeps (what explains a run).
ENV_KEPT = frozenset(("PATH", "HOME", "PWD", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "TERM", "TZ",
                      "VIRTUAL_ENV", "PYTHONPATH", "ANSIBLE_CONFIG", "ANSIBLE_NOCOLOR", "ANSIBLE_FORCE_COLOR",
                      "ANSIBLE_STDOUT_CALLBACK", "ANSIBLE_CALLBACK_PLUGINS", "ANSIBLE_CACHE_PLUGIN",
                      "ANSIBLE_INVENTORY_UNPARSED_FAILED", "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED",
                      "ANSIBLE_RETRY_FILES_ENABLED", "ANSIBLE_HOST_KEY_CHECKING", "ANSIBLE_LOCAL_TEMP",
                      "ANSIBLE_COLLECTIONS_PATH", "ANSIBLE_ROLES_PATH", "AWX_ISOLATED_DATA_DIR",
                      "PYTHONUNBUFFERED", "LLMOPS_VLLM_ARTIFACTS"))
# Shorter values are not masked everywhere (they would mask ordinary words); no real secret is this short.
MIN_SECRET = 6


class ExtraVars:
    """-e values as ansible-playbook reads them, each inline one (key=value, JSON/YAML) in a 0600 file of
    its own (`-e @file`: the same variables, trusted as the inline value was) in a 0700 directory outside
    the artifacts, removed on exit; an -e @file stays as given."""

    def __init__(self, extra: List[str]) -> None:
        self.extra = list(extra)
        self.directory = ""
        self.args: List[str] = []

    def __enter__(self) -> ExtraVars:
        import tempfile
        self.directory = tempfile.mkdtemp(prefix="llmops-vllm-vars-")
        for value in self.extra:
            if not value:
                continue
            self.args += ["-e", value if value.startswith("@") else "@" + self.write(_as_document(value))]
        return self

    def write(self, text: str) -> str:
        path = os.path.join(self.directory, "%02d.yml" % (len(os.listdir(self.directory)) + 1))
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as handle:
            handle.write(text)
        return path

    def cmdline(self) -> List[str]:
        return list(self.args)

    def __exit__(self, *exc: Any) -> None:
        import shutil
        shutil.rmtree(self.directory, ignore_errors=True)


def _as_document(value: str) -> str:
    """An inline -e value as the text of a vars file: JSON/YAML as it is (ansible-playbook reads both
    with the same YAML loader), key=value through ansible's own parser as JSON."""
    if value[:1] in ("{", "["):
        return value
    from ansible.parsing.splitter import parse_kv
    return json.dumps(dict((str(k), str(v)) for k, v in parse_kv(value).items()), sort_keys=True)


def _secrets_of(name: str, value: Any, found: List[str]) -> None:
    from ansible_collections.llmops.vllm.plugins.module_utils.redact import url_secrets

    if isinstance(value, dict):
        for key, item in value.items():
            _secrets_of(str(key), item, found)
    elif isinstance(value, list):
        for item in value:
            _secrets_of(name, item, found)
    elif isinstance(value, str):
        candidates = url_secrets(value) + ([value] if SECRET_NAME.search(name) else [])
        for one in candidates:
            if len(one) >= MIN_SECRET and not one.isdigit() and one not in found:
                found.append(one)


def known_secrets(extra: List[str], environ: Optional[Dict[str, str]] = None) -> List[str]:
    """The secrets this CLI can name: values of secret-named -e variables (inline or @file, not a Vault
    file's) and environment variables, and the password of every URL in either; longest first."""
    found: List[str] = []
    try:
        documents = extra_vars_documents(extra)
    except ValueError:
        documents = {}
    _secrets_of("", documents, found)
    environment = dict(os.environ if environ is None else environ)
    for name in sorted(environment):
        if name not in ENV_KEPT:
            _secrets_of(name, environment[name], found)
    return sorted(found, key=lambda one: (-len(one), one))


def redacted(value: Any, secrets: List[str]) -> Any:
    """value (a string, or JSON-like data) with every secret replaced by ********."""
    if isinstance(value, str):
        for secret in secrets:
            if secret in value:
                value = value.replace(secret, MASK)
        return value
    if isinstance(value, dict):
        return dict((key, redacted(item, secrets)) for key, item in value.items())
    if isinstance(value, list):
        return [redacted(item, secrets) for item in value]
    return value


def scrub_command(path: str) -> None:
    """The runner's `command` file without the values of the environment (ENV_KEPT's aside)."""
    from ansible_collections.llmops.vllm.plugins.module_utils.redact import mask_urls
    try:
        with open(path, encoding="utf-8") as handle:
            doc = json.load(handle)
    except (OSError, ValueError):
        return
    env = doc.get("env") if isinstance(doc, dict) else None
    if not isinstance(env, dict):
        return
    doc["env"] = dict((name, mask_urls(str(value)) if name in ENV_KEPT and not SECRET_NAME.search(name) else MASK)
                      for name, value in env.items())
    temp = path + ".scrub"
    with os.fdopen(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as handle:
        json.dump(doc, handle, ensure_ascii=False)
    os.replace(temp, path)


def scrub_on_start(status: Dict[str, Any], runner_config: Any = None) -> None:
    """ansible-runner's status handler: once the run is started its `command` file is written - scrub it."""
    if status.get("status") == "running" and runner_config is not None:
        scrub_command(os.path.join(str(runner_config.artifact_dir), "command"))


def scrub_artifacts(artifacts: str, secrets: List[str]) -> None:
    """After a run: the `command` file scrubbed, and every secret the CLI knows replaced in every file
    of the run's artifacts (JSON-escaped too) - a safety net behind the mechanisms above."""
    scrub_command(os.path.join(artifacts, "command"))
    if not secrets:
        return
    forms = []
    for secret in secrets:
        forms += [secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]]
    forms = sorted(set(form for form in forms if form), key=lambda one: (-len(one), one))
    for directory, _dirs, files in os.walk(artifacts):
        for name in files:
            path = os.path.join(directory, name)
            try:
                with open(path, encoding="utf-8", errors="surrogateescape") as handle:
                    text = handle.read()
            except OSError:
                continue
            clean = redacted(text, forms)
            if clean != text:
                mode = os.stat(path).st_mode & 0o777
                temp = path + ".scrub"
                with os.fdopen(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "w", encoding="utf-8",
                               errors="surrogateescape") as handle:
                    handle.write(clean)
                os.replace(temp, path)


def _quote(part: str) -> str:
    import shlex
    return shlex.quote(part)


def extra_vars_documents(extra: List[str]) -> Dict[str, Any]:
    """The variables of -e values (@file YAML/JSON, inline YAML/JSON, key=value), merged in order;
    a vault-encrypted file is skipped (ansible-playbook reads it). For validating vllm_model before the run."""
    import yaml
    merged: Dict[str, Any] = {}
    for value in extra:
        document: Any = None
        if value.startswith("@"):
            path = value[1:]
            try:
                with open(path, encoding="utf-8") as handle:
                    text = handle.read()
            except OSError as exc:
                raise ValueError("-e %s: cannot read it (%s)" % (value, exc.strerror or exc))
            if text.startswith("$ANSIBLE_VAULT"):
                continue
            try:
                document = yaml.safe_load(text)
            except yaml.YAMLError as exc:
                raise ValueError("-e %s: not YAML or JSON (%s)" % (value, _short(exc, 200)))
        elif value.lstrip().startswith(("{", "[")):
            try:
                document = yaml.safe_load(value)
            except yaml.YAMLError as exc:
                raise ValueError("-e %r: not YAML or JSON (%s)" % (value, _short(exc, 200)))
        else:
            document = {}
            for pair in value.split():
                key, sep, val = pair.partition("=")
                if not sep:
                    raise ValueError("-e %r: expected key=value, @file or a JSON/YAML mapping" % value)
                document[key] = val
        if document is None:
            continue
        if not isinstance(document, dict):
            raise ValueError("-e %s: expected a mapping of variables, got %s" % (value, type(document).__name__))
        merged.update(document)
    return merged
