# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llmops-vllm apply / diff (plugin_utils/apply.py): phases from task files, outcomes and exit codes,
the fleet's worst host, -e values read for the controller's validation. The runs themselves are
tested on the sandbox (molecule preflight: exits 1 and 2; rollback: 3 and the lock; upgrade: 0)."""
import io

import pytest

from ansible_collections.llmops.vllm.plugins.plugin_utils import apply

COLLECTION = "/srv/ci/collections/ansible_collections/llmops/vllm"


@pytest.mark.parametrize("path, role, phase", [
    (COLLECTION + "/roles/rollout/tasks/fastpath.yml:11", "rollout", "probe"),
    (COLLECTION + "/roles/rollout/tasks/lock.yml:14", "rollout", "lock"),
    (COLLECTION + "/roles/preflight/tasks/probe.yml:2", "preflight", "probe"),
    (COLLECTION + "/roles/preflight/tasks/plan.yml:48", "preflight", "plan"),
    (COLLECTION + "/roles/preflight/tasks/checks.yml:2", "preflight", "plan"),
    (COLLECTION + "/roles/vllm_install/tasks/venv.yml:5", "vllm_install", "install"),
    (COLLECTION + "/roles/model/tasks/progress.yml:5", "model", "fetch"),
    (COLLECTION + "/roles/retire/tasks/stop.yml:3", "retire", "retire"),
    (COLLECTION + "/roles/serve/tasks/unit.yml:3", "serve", "serve"),
    (COLLECTION + "/roles/serve/tasks/gate.yml:3", "serve", "gate"),
    (COLLECTION + "/roles/benchmark/tasks/sweep.yml:3", "benchmark", "benchmark"),
    (COLLECTION + "/roles/rollout/tasks/rescue.yml:2", "rollout", "rollback"),
    ("/home/me/checkout/roles/rollout/tasks/record.yml:2", "rollout", "record"),
    # the playbook's own tasks, and a role's argument validation (reported at the playbook's line)
    (COLLECTION + "/playbooks/rollout.yml:30", None, "probe"),
    (COLLECTION + "/playbooks/rollout.yml:9", "vllm_install", "install"),
    (COLLECTION + "/playbooks/rollout.yml:9", "llmops.vllm.preflight", "plan"),
    # a lease renewal or the include of the preflight role: the phase around it goes on
    (COLLECTION + "/roles/rollout/tasks/lease.yml:4", "rollout", None),
    (COLLECTION + "/roles/rollout/tasks/preflight.yml:2", "rollout", None),
    (COLLECTION + "/playbooks/rollout.yml:9", "rollout", None),
])
def test_phase_of_a_task_comes_from_its_file(path, role, phase):
    assert apply.phase_of(path, "Gather the facts", role or "") == phase


def run_of(events):
    collector = apply.Collector(apply.Progress(io.StringIO(), live=False), clock=iter(range(1000)).__next__)
    for event in events:
        collector(event)
    collector.finish()
    return collector


def ev(kind, host, file, task="a task", **res):
    return {"event": kind, "event_data": {"host": host, "task": task, "res": res,
                                          "task_path": "%s/roles/%s:3" % (COLLECTION, file)}}


def test_outcomes_and_exit_codes_of_one_host_each():
    report_ok = {"status": "ok", "desired": {"name": "b", "repo_id": "o/b", "revision": "main"}, "commit": "c" * 40,
                 "before": {"name": "a", "repo_id": "o/a", "commit": "d" * 40}, "plan": {"layout": "TP=4"},
                 "timings": {"total_s": 90.0}, "benchmark": {"passed": True, "ratio": 1.2}, "ready": {"stages": ["health"]}}
    collector = run_of([
        ev("runner_on_ok", "fast", "rollout/tasks/fastpath.yml", task="Fast path | nothing to do", msg="serves b"),
        ev("runner_on_ok", "ok", "rollout/tasks/report.yml", ansible_facts={"rollout_report": report_ok}),
        ev("runner_on_failed", "refused", "preflight/tasks/plan.yml", msg="does not fit: 100 GiB of RAM but 8"),
        ev("runner_on_failed", "locked", "rollout/tasks/lock.yml", msg="is locked: held by x",
           held_by={"holder": "x", "controller": "c", "started": "2026-12-02T04:00:00+00:00", "lease_s": 60}),
        ev("runner_on_failed", "back", "serve/tasks/gate.yml", msg="the server exited while loading"),
        ev("runner_on_ok", "back", "rollout/tasks/report.yml",
           ansible_facts={"rollout_report": dict(report_ok, status="rolled_back", error="gate: the server exited")}),
        ev("runner_on_failed", "back", "rollout/tasks/rescue.yml", msg="Rollout of o/b failed - ... Rolled back"),
        ev("runner_on_failed", "lost", "serve/tasks/gate.yml", msg="not ready"),
        ev("runner_on_ok", "lost", "rollout/tasks/report.yml",
           ansible_facts={"rollout_report": dict(report_ok, status="failed", error="not ready")}),
        {"event": "runner_on_unreachable", "event_data": {"host": "gone", "task": "Gather", "res": {"msg": "ssh: no route"}}},
    ])
    summary = {name: run.summary(check=False) for name, run in collector.hosts.items()}
    assert {name: (doc["outcome"], doc["exit_code"]) for name, doc in summary.items()} == {
        "fast": ("unchanged", 0), "ok": ("ok", 0), "refused": ("refused", 2), "locked": ("refused", 2),
        "back": ("rolled_back", 3), "lost": ("failed", 4), "gone": ("unreachable", 4)}
    ok = summary["ok"]
    assert ok["changed"] is True and ok["plan"] == "TP=4" and ok["new_model"]["commit"] == "c" * 40
    assert ok["old_model"]["name"] == "a" and ok["gate"]["benchmark_passed"] is True
    assert summary["fast"]["changed"] is False and summary["fast"]["fast_path"] is True
    assert summary["locked"]["lock_held_by"]["holder"] == "x"
    assert summary["back"]["rollback_reason"] == "gate: the server exited"
    assert summary["back"]["failed_phase"] == "gate"  # the cause, not the rescue's own failure
    assert summary["refused"]["error"].startswith("does not fit")


def test_a_host_with_several_models_lists_each_and_its_last_failure_decides():
    first = {"status": "ok", "desired": {"name": "a", "repo_id": "o/a"}, "commit": "c" * 40, "plan": {"layout": "cpu"}}
    second = {"status": "rolled_back", "desired": {"name": "b", "repo_id": "o/b"}, "commit": "d" * 40,
              "plan": {"layout": "cpu"}, "error": "gate: the server exited"}
    collector = run_of([
        ev("runner_on_ok", "gpu-1", "rollout/tasks/report.yml", ansible_facts={"rollout_report": first}),
        ev("runner_on_failed", "gpu-1", "serve/tasks/gate.yml", msg="the server exited while loading"),
        ev("runner_on_ok", "gpu-1", "rollout/tasks/report.yml", ansible_facts={"rollout_report": second}),
        ev("runner_on_failed", "gpu-1", "rollout/tasks/rescue.yml", msg="Rollout of o/b failed - ... Rolled back"),
        ev("runner_on_ok", "gpu-2", "rollout/tasks/report.yml", ansible_facts={"rollout_report": first}),
    ])
    summary = {name: run.summary(check=False) for name, run in collector.hosts.items()}
    assert (summary["gpu-1"]["outcome"], summary["gpu-1"]["exit_code"]) == ("rolled_back", 3)
    assert summary["gpu-1"]["models"] == {
        "a": {"status": "ok", "commit": "c" * 40, "plan": "cpu", "error": None},
        "b": {"status": "rolled_back", "commit": "d" * 40, "plan": "cpu", "error": "gate: the server exited"}}
    assert "models" not in summary["gpu-2"]  # one model: the host's own keys say it all


def test_a_fleet_exits_with_its_worst_host():
    assert apply.fleet_exit([]) == 0
    assert apply.fleet_exit([0, 2, 0]) == 2
    assert apply.fleet_exit([2, 3, 0]) == 3
    assert apply.fleet_exit([3, 4, 2]) == 4
    assert apply.fleet_exit([0, 0]) == 0


def test_diff_reports_changes_and_refusals_but_never_a_rollback():
    collector = run_of([
        {"event": "runner_on_ok", "event_data": {
            "host": "a", "task": "Write the unit", "task_path": COLLECTION + "/roles/serve/tasks/unit.yml:3",
            "res": {"changed": True, "diff": [{"before": "", "after": "[Unit]\n", "after_header": "/etc/systemd/system/vllm-b.service"},
                                              {"before": {"state": "absent"}, "after": {"state": "directory"}}]}}},
        ev("runner_on_failed", "b", "serve/tasks/gate.yml", msg="odd"),
    ])
    summary = apply.summarize(collector, "diff", "run-1", "2026-12-02T04:00:00+00:00", "/tmp/a", 2, "failed", "")
    assert summary["hosts"]["a"]["changed"] is True and summary["hosts"]["a"]["outcome"] == "would_change"
    assert [d["path"] for d in summary["hosts"]["a"]["diff"]] == ["/etc/systemd/system/vllm-b.service"]  # no attribute diffs
    assert summary["hosts"]["b"]["outcome"] == "refused" and summary["exit_code"] == 2
    assert "+[Unit]" in apply.render_summary(summary)


def test_a_play_that_stops_before_any_host_is_bad_input():
    collector = run_of([])
    summary = apply.summarize(collector, "apply", "run-1", "2026-12-02T04:00:00+00:00", "/tmp/a", 4, "failed",
                              "ERROR! the playbook: nope could not be found")
    assert summary["exit_code"] == 1 and "could not be found" in summary["error"]


def test_progress_prints_phases_and_rate_limits_progress_reports():
    out = io.StringIO()
    collector = apply.Collector(apply.Progress(out, live=False, min_interval=3600), clock=iter(range(1000)).__next__)
    for event in [
        {"event": "runner_on_start", "event_data": {"host": "h", "task": "t", "task_path": COLLECTION + "/roles/preflight/tasks/probe.yml:2"}},
        {"event": "runner_on_start", "event_data": {"host": "h", "task": "t", "task_path": COLLECTION + "/roles/model/tasks/fetch.yml:2"}},
        {"event": "runner_item_on_ok", "event_data": {"host": "h", "task": "p", "task_path": COLLECTION + "/roles/model/tasks/progress.yml:5",
                                                      "res": {"_ansible_item_label": "1.0 GiB of 4.0 GiB (25%), 80 MiB/s, 13 s left"}}},
        {"event": "runner_item_on_ok", "event_data": {"host": "h", "task": "p", "task_path": COLLECTION + "/roles/model/tasks/progress.yml:5",
                                                      "res": {"_ansible_item_label": "2.0 GiB of 4.0 GiB (50%)"}}},
    ]:
        collector(event)
    collector.finish()
    text = out.getvalue()
    assert "h            probe     ..." in text and "probe     done in" in text and "fetch     ..." in text
    assert "25%), 80 MiB/s, 13 s left" in text and "(50%)" not in text  # one report per interval in a log


def test_extra_vars_are_read_like_ansible_playbook_reads_them(tmp_path):
    f = tmp_path / "model.yml"
    f.write_text("vllm_model: {name: b, repo_id: o/b}\nrollout_serial: 1\n")
    vault = tmp_path / "secrets.yml"
    vault.write_text("$ANSIBLE_VAULT;1.1;AES256\n6162\n")
    merged = apply.extra_vars_documents(["@%s" % f, "rollout_serial=2 a=b", '{"c": [1]}', "@%s" % vault])
    assert merged == {"vllm_model": {"name": "b", "repo_id": "o/b"}, "rollout_serial": "2", "a": "b", "c": [1]}
    with pytest.raises(ValueError, match="cannot read it"):
        apply.extra_vars_documents(["@%s" % (tmp_path / "missing.yml")])
    with pytest.raises(ValueError, match="expected key=value"):
        apply.extra_vars_documents(["justaword"])
    with pytest.raises(ValueError, match="expected a mapping"):
        apply.extra_vars_documents(["[1, 2]"])


def test_a_new_files_diff_is_named_by_its_destination_and_an_offline_root_is_left_out():
    collector = run_of([
        {"event": "runner_on_ok", "event_data": {
            "host": "a", "task": "The unit", "task_path": COLLECTION + "/roles/serve/tasks/unit.yml:40",
            "res": {"changed": True, "invocation": {"module_args": {"dest": "/tmp/offline/a/etc/systemd/system/vllm-b.service"}},
                    "diff": [{"before": "", "after": "[Unit]\n", "after_header": "/root/.ansible/tmp/x/vllm.service.j2"}]}}},
    ])
    assert [d["path"] for d in collector.hosts["a"].diffs] == ["/tmp/offline/a/etc/systemd/system/vllm-b.service"]
    apply.host_paths(collector, "/tmp/offline")
    assert [d["path"] for d in collector.hosts["a"].diffs] == ["/etc/systemd/system/vllm-b.service"]
