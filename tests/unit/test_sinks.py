# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The sinks root reads (docs/security.md): every value reaches a unit, an environment file, a proxy's configuration
or a command line through that sink's one function.

- the scanner (tests/unit/sink_scanner.py) over the whole tree, and a self-test that it catches each kind of hole;
- the serve role's unit rendered from hostile values (hypothesis): refused, or parsed back (systemd's own rules, the
  strict splitter of test_systemd_filter.py, and `systemd-analyze verify`) to exactly the directives meant;
- the desired state's refusals of issue 38 (named regression tests ``test_issue38_*``).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jinja2 import Environment, StrictUndefined

from ansible.plugins.filter.core import FilterModule as CoreFilters
from ansible_collections.llmops.vllm.plugins.filter.systemd import FilterModule as SystemdFilters
from ansible_collections.llmops.vllm.plugins.module_utils.systemd_unit import CONTROL_RE, read_environment_file
from ansible_collections.llmops.vllm.plugins.plugin_utils.contracts import PlanInputError, flag_name
from ansible_collections.llmops.vllm.plugins.plugin_utils.desired_state import validate_model

import sink_scanner
from test_systemd_filter import split_assignments, split_exec

ROOT = Path(__file__).resolve().parents[2]
SERVE_TEMPLATE = ROOT / "roles" / "serve" / "templates" / "vllm.service.j2"
GOOD = {"name": "chat", "repo_id": "org/chat", "served_model_name": "chat", "port": 8000}


# ----------------------------------------------------------------------------- the scanner

def test_no_value_reaches_a_sink_without_its_function():
    problems = sink_scanner.scan(ROOT)
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize("name, text", [
    ("vllm.service.j2", "[Unit]\nDescription=vLLM serving {{ served_name }}\n"),
    ("vllm.service.j2", "[Unit]\nDescription={{ served_name | llmops.vllm.systemd_value | upper }}\n"),
    ("vllm.service.j2", "{% for a in env | dict2items %}Environment={{ a }}\n{% endfor %}"),
    ("vllm.service.j2", "{% set d = served_name %}Description={{ d }}\n"),
    ("vllm.service.j2", "Description={{ served_name if x else other }}\n"),
    ("haproxy.cfg.j2", "backend b\n    http-check expect string {{ served_name }}\n"),
    ("haproxy.cfg.j2", "backend {{ served_name | llmops.vllm.systemd_value }}\n"),
    ("notes.txt.j2", "plain {{ value | llmops.vllm.systemd_value }}\n"),
])
def test_the_scanner_catches_a_template_hole(tmp_path, name, text):
    path = tmp_path / "roles" / "x" / "templates" / name
    path.parent.mkdir(parents=True)
    path.write_text(text)
    assert len(sink_scanner.scan(tmp_path)) == 1


@pytest.mark.parametrize("name, text", [
    ("vllm.service.j2", "[Unit]\nDescription={{ served_name | llmops.vllm.systemd_value('Description') }}\n"),
    ("vllm.service.j2", "{% for a in env | llmops.vllm.systemd_environment %}Environment={{ a }}\n{% endfor %}"),
    ("vllm.service.j2", "X={{ 'constant' }}{{ a | llmops.vllm.systemd_quote if x else 'b' }}\n"),
    ("haproxy.cfg.j2", "{% set n = s | llmops.vllm.haproxy_identifier %}backend {{ n }}\n"),
])
def test_the_scanner_passes_what_goes_through_the_sink(tmp_path, name, text):
    path = tmp_path / "roles" / "x" / "templates" / name
    path.parent.mkdir(parents=True)
    path.write_text(text)
    assert sink_scanner.scan(tmp_path) == []


@pytest.mark.parametrize("task, caught", [
    ({"ansible.builtin.command": "systemctl kill {{ unit }}"}, True),
    ({"ansible.builtin.shell": {"cmd": "echo {{ x }} > /tmp/y"}}, True),
    ({"ansible.builtin.command": {"argv": ["systemctl", "kill", "{{ unit }}"]}}, False),
    ({"ansible.builtin.copy": {"dest": "{{ serve_env_file }}", "content": "KEY={{ key }}\n"}}, True),
    ({"ansible.builtin.copy": {"dest": "/etc/x/{{ n }}.env",
                               "content": "{{ {'KEY': key} | llmops.vllm.environment_file_text }}"}}, False),
    ({"ansible.builtin.copy": {"dest": "/etc/systemd/system/x.service", "content": "ExecStart={{ cmd }}\n"}}, True),
    ({"ansible.builtin.copy": {"dest": "/tmp/report.json", "content": "{{ report | to_nice_json }}"}}, False),
    ({"ansible.builtin.lineinfile": {"path": "{{ unit_path }}", "line": "X=1"}}, True),
    ({"block": [{"ansible.builtin.command": "rm {{ path }}"}]}, True),
])
def test_the_scanner_catches_a_task_hole(tmp_path, task, caught):
    path = tmp_path / "roles" / "x" / "tasks" / "main.yml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump([dict(name="t", **task)]))
    assert bool(sink_scanner.scan(tmp_path)) is caught


# ----------------------------------------------------------------------------- the serve role's unit

def _environment() -> Environment:
    env = Environment(undefined=StrictUndefined, keep_trailing_newline=True)
    env.filters.update(CoreFilters().filters())
    env.filters.update({"llmops.vllm." + name: function for name, function in SystemdFilters().filters().items()})
    return env


TEMPLATE = _environment().from_string(SERVE_TEMPLATE.read_text())


def serve_vars(venv: str = "/opt/llmops-vllm/venvs/vllm-0.32.0", **change) -> Dict[str, object]:
    """What the serve role hands its template (roles/serve/defaults, vars and the rollout's facts)."""
    values: Dict[str, object] = dict(
        ansible_managed="Ansible managed", serve_repo_id="org/chat", serve_commit="a" * 40,
        serve_served_model_name="chat", serve_user="vllm", serve_group="vllm",
        serve_state_dir="/var/lib/llmops-vllm", serve_cache_dir="/var/cache/llmops-vllm",
        serve_home="/var/cache/llmops-vllm/chat",
        serve_environment={"HOME": "/var/lib/llmops-vllm", "HF_HUB_OFFLINE": "1"}, serve_api_key="k",
        serve_env_file="/etc/llmops-vllm/chat.env", serve_venv=venv, serve_python="/usr/bin/python3",
        serve_libexec_dir="/usr/local/libexec/llmops-vllm", serve_health_url="http://127.0.0.1:8000/health",
        serve_headless=False, serve_start_limit_interval_sec=600, serve_start_limit_burst=10,
        serve_start_timeout_seconds=610, serve_stop_timeout_sec=120, serve_restart_sec=10, serve_limit_nofile=65536,
        serve_hardening=True,
        serve_plan={"device": "cuda", "layout": "TP=4", "gpu_indices": [0, 1, 2, 3], "numa_node": 0,
                    "max_model_len": 32768, "nodes": [], "env": {"CUDA_VISIBLE_DEVICES": "0,1,2,3"},
                    "exec_prefix": [], "argv": ["serve", "/models/org/chat/" + "a" * 40, "--served-model-name", "chat"]})
    values.update(change)
    return values


def parse_unit(text: str) -> List[Tuple[str, str, str]]:
    """(section, key, raw value) of every directive, read as systemd reads a unit file (systemd.syntax(7)): lines
    ending in a backslash continue, '#' and ';' lines are comments, '[X]' opens a section."""
    directives: List[Tuple[str, str, str]] = []
    section, pending = "", ""
    for raw in text.split("\n"):
        line = (pending + raw) if pending else raw
        pending = ""
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        if stripped.endswith("\\"):
            pending = stripped[:-1] + " "
            continue
        if stripped.startswith("["):
            assert stripped.endswith("]"), "a broken section header: %r" % stripped
            section = stripped[1:-1]
            continue
        assert "=" in stripped, "a line that is neither directive, comment nor section: %r" % stripped
        key, value = stripped.split("=", 1)
        directives.append((section, key.strip(), value.strip()))
    return directives


def _plain(value: str) -> str:
    """A non-command value with its specifiers resolved: only '%%' may appear, and it means '%'."""
    assert "%" not in value.replace("%%", ""), "a live specifier in %r" % value
    return value.replace("%%", "%")


BASELINE = [(section, key) for section, key, _value in parse_unit(TEMPLATE.render(**serve_vars()))]


def check_unit(text: str, values: Dict[str, object]) -> None:
    """The unit holds exactly the template's directives, each with the value meant."""
    directives = parse_unit(text)
    assert [(section, key) for section, key, _value in directives] == BASELINE
    found = {key: value for _section, key, value in directives if key not in ("Environment", "ReadWritePaths")}
    plan = values["serve_plan"]
    assert _plain(found["Description"]) == "vLLM serving %s (%s@%s)" % (
        values["serve_served_model_name"], values["serve_repo_id"], str(values["serve_commit"])[:12])
    assert split_exec(found["ExecStart"]) == [values["serve_venv"] + "/bin/vllm"] + plan["argv"]  # type: ignore
    environment = [word for _s, key, value in directives if key == "Environment" for word in split_assignments(value)]
    expected_env = dict(values["serve_environment"], **plan["env"])  # type: ignore
    assert environment == ["%s=%s" % item for item in sorted(expected_env.items())]


TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=24)
HOSTILE = st.one_of(TEXT, st.sampled_from([
    "x\n[Service]\nExecStartPre=+/bin/sh -c 'id > /tmp/pwned'\n[Unit]\nX-Y=", "100%n", "%i%%%", "$HOME ${X}",
    'chat"v2', "org/chat", "a\\", "a\\\\b", "tab\there", "\r", "nel\x85", "ls\u2028", "[Service]", "ExecStartPre=+/bin/id",
    "; rm -rf /", "\\", "caf\u00e9 \u4e2d\U0001f600", " lead", "trail ", '"', "'", "#", "=", "a=b=c"]))


def _render(values: Dict[str, object]) -> Optional[str]:
    """The unit, or None when a sink refused a value (with a message naming a control character or backslash)."""
    try:
        return TEMPLATE.render(**values)
    except ValueError as err:
        assert "control character" in str(err) or "backslash" in str(err), err
        return None


def _hostile_values(name: str, repo: str, commit: str, env_value: str, arg: str, state_dir: str) -> Dict[str, object]:
    plan = dict(serve_vars()["serve_plan"], argv=["serve", "/models/" + repo, "--served-model-name", name, "--x", arg],  # type: ignore
                env={"CUDA_VISIBLE_DEVICES": env_value})
    return serve_vars(serve_served_model_name=name, serve_repo_id=repo, serve_commit=commit, serve_plan=plan,
                      serve_state_dir="/var/lib/" + state_dir,
                      serve_environment={"HOME": "/var/lib/" + state_dir, "HF_HUB_OFFLINE": "1"})


def _must_refuse(*values: str) -> bool:
    return any(CONTROL_RE.search(v) for v in values)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=HOSTILE, repo=HOSTILE, commit=HOSTILE, env_value=HOSTILE, arg=HOSTILE, state_dir=HOSTILE)
def test_a_unit_from_any_values_holds_exactly_its_directives(name, repo, commit, env_value, arg, state_dir):
    values = _hostile_values(name, repo, commit, env_value, arg, state_dir)
    text = _render(values)
    if _must_refuse(name, repo, commit, env_value, arg, state_dir):
        assert text is None, "a control character was written into the unit"
        return
    if text is None:  # only a value ending in a backslash on a line of its own may be refused otherwise
        assert any(v.rstrip().endswith("\\") for v in (name, repo, commit, commit[:12])), values
        return
    check_unit(text, values)


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze is not installed")
def test_systemd_reads_units_of_hostile_values(tmp_path):
    """`systemd-analyze verify` (systemd's own parser) reads units rendered from accepted hostile values without a
    warning; all in one call."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "vllm").symlink_to(shutil.which("true"))
    units: List[Path] = []

    accepted = HOSTILE.filter(lambda value: not CONTROL_RE.search(value) and not value.rstrip().endswith("\\"))

    @settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.filter_too_much])
    @given(name=accepted, repo=accepted, env_value=accepted, arg=accepted)
    def collect(name, repo, env_value, arg):
        values = _hostile_values(name, repo, "b" * 40, env_value, arg, "llmops-vllm")
        values["serve_venv"] = str(venv)
        text = _render(values)
        if text is not None:
            check_unit(text, values)
            path = tmp_path / ("vllm-h%d.service" % len(units))
            path.write_text(text)
            units.append(path)

    collect()
    assert len(units) >= 10
    proc = subprocess.run(["systemd-analyze", "verify", "--man=no"] + [str(p) for p in units],
                          capture_output=True, text=True, check=False)
    noise = [line for line in proc.stderr.splitlines()
             if "vllm-h" in line and ("Unknown" in line or "Invalid" in line or "Ignoring" in line
                                      or "Failed to" in line or "specifier" in line or "unbalanced" in line.lower())]
    assert noise == [], proc.stderr


@settings(max_examples=100, deadline=None)
@given(env=st.dictionaries(st.sampled_from(["VLLM_API_KEY", "HF_TOKEN", "A", "_x1"]), HOSTILE, max_size=4))
def test_an_environment_file_of_any_values_reads_back_or_is_refused(env):
    """systemd.exec(5)'s EnvironmentFile rules (read_environment_file): one line per key, each value read back."""
    try:
        text = SystemdFilters().filters()["environment_file_text"](env)
    except ValueError as err:
        assert "control character" in str(err) and any(CONTROL_RE.search(v) for v in env.values())
        return
    assert not any(CONTROL_RE.search(v) for v in env.values())
    assert text.count("\n") == len(env) and read_environment_file(text) == env


def test_the_api_key_file_is_quoted_and_reads_back():
    """The serve role's EnvironmentFile (roles/serve/tasks/unit.yml): any key but a control character reads back."""
    filters = SystemdFilters().filters()
    for key in ("plain", 'q"uote', "back\\slash", "$HOME", "`cmd`", "a b", "#x", "'"):
        text = filters["environment_file_text"]({"VLLM_API_KEY": key})
        assert text.count("\n") == 1 and read_environment_file(text) == {"VLLM_API_KEY": key}
    with pytest.raises(ValueError, match="control character"):
        filters["environment_file_text"]({"VLLM_API_KEY": "k\nX=1"})


# ----------------------------------------------------------------------------- issue 38, case 1: served names

INJECTION = "x\n[Service]\nExecStartPre=+/bin/sh -c 'id > /tmp/pwned'\n[Unit]\nX-Y="


def test_issue38_served_name_injection_refused_by_validate():
    with pytest.raises(PlanInputError, match="served_model_name.*control character"):
        validate_model(dict(GOOD, served_model_name=INJECTION))


def test_issue38_served_name_injection_never_reaches_the_unit():
    """Even past validation (a value templated later), the template's sink refuses it: no ExecStartPre=+ is written."""
    with pytest.raises(ValueError, match="control character"):
        TEMPLATE.render(**serve_vars(serve_served_model_name=INJECTION))


def test_issue38_percent_stays_literal_in_the_description():
    text = TEMPLATE.render(**serve_vars(serve_served_model_name="100%n"))
    description = dict((key, value) for _s, key, value in parse_unit(text))["Description"]
    assert _plain(description).startswith("vLLM serving 100%n (")


@pytest.mark.parametrize("field", ["env", "extra_args", "plan"])
def test_issue38_no_control_character_in_any_field(field):
    value: object = {"bind": "127.0.0.1\n", "env": {"A": "1\n[Service]"}, "extra_args": ["--seed", "1\r"],
                     "plan": {"tool_call_parser": "hermes\n"}}.get(field, "org/chat\nx")
    with pytest.raises(PlanInputError, match="control character|must be"):
        validate_model(dict(GOOD, **{field: value}))


@pytest.mark.parametrize("field", ["repo_id", "revision", "bind"])
def test_fields_with_a_pattern_refuse_a_control_character_too(field):
    with pytest.raises(PlanInputError, match="control character|must be"):
        validate_model(dict(GOOD, **{field: "127.0.0.1\n" if field == "bind" else "org/chat\nx"}))


# ----------------------------------------------------------------------------- issue 38, case 4: extra_args

@pytest.mark.parametrize("args, owner", [
    (["--host", "0.0.0.0"], "vllm_model.bind"),
    (["--host=0.0.0.0"], "vllm_model.bind"),
    (["--port", "9000"], "vllm_model.port"),
    (["--served-model-name", "other"], "vllm_model.served_model_name"),
    (["--served_model_name=other"], "vllm_model.served_model_name"),
    (["--served-model", "other"], "vllm_model.served_model_name"),
    (["--tensor-parallel-size", "8"], "plan.tensor_parallel_size"),
    (["-tp", "8"], "plan.tensor_parallel_size"),
    (["-tp=8"], "plan.tensor_parallel_size"),
    (["--data_parallel_size", "2"], "plan.data_parallel_size"),
    (["--enable-expert-parallel"], "plan.enable_expert_parallel"),
    (["--pipeline-parallel-size", "2"], "vllm_model.group"),
    (["--trust_remote_code"], "trust_remote_code: true"),
    (["--api_key=abc"], "rollout_api_key"),
    (["--hf_token", "t"], "rollout_hub_token"),
])
def test_issue38_extra_args_cannot_set_what_the_plan_owns(args, owner):
    with pytest.raises(PlanInputError) as err:
        validate_model(dict(GOOD, extra_args=["--seed", "1"] + args))
    assert owner in str(err.value) and args[0].split("=")[0] in str(err.value)


@pytest.mark.parametrize("args, owner", [(["--trust-remote-code"], "trust_remote_code: true"),
                                         (["--api-key", "abc"], "rollout_api_key")])
def test_the_dashed_spellings_stay_refused(args, owner):
    with pytest.raises(PlanInputError, match=owner.replace("{", "\\{")):
        validate_model(dict(GOOD, extra_args=args))


@pytest.mark.parametrize("args", [["--seed", "1"], ["--max-num-seqs=8"], ["--max_num_seqs", "8"],
                                  ["--hostname-is-not-a-flag-prefix"], ["-O", "3"], ["--enable-prefix-caching"]])
def test_extra_args_that_the_plan_does_not_own_pass(args):
    assert validate_model(dict(GOOD, extra_args=args))["extra_args"] == args


def test_issue38_flag_spellings_are_normalized_before_the_check():
    assert flag_name("--trust_remote_code") == "--trust-remote-code"
    assert flag_name("--max_model_len=4096") == "--max-model-len"
    assert flag_name("value_with_underscore") is None


# ----------------------------------------------------------------------------- issue 38, case 4: bind

@pytest.mark.parametrize("bind", ["fe80::1%eth0", "fe80::1%1"])
def test_issue38_an_ipv6_zone_id_is_refused(bind):
    with pytest.raises(PlanInputError, match="zone id"):
        validate_model(dict(GOOD, bind=bind))


@pytest.mark.parametrize("bind", ["10.0.0.5", "::1", "fd00::5", "0.0.0.0"])
def test_plain_addresses_bind(bind):
    assert validate_model(dict(GOOD, bind=bind))["bind"] == bind
