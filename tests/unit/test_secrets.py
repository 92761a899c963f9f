# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Secrets out of every artifact (issue 39): a URL's password through AnsibleModule's no_log machinery
(module_utils/redact.py) in every module that takes an endpoint, -e values in 0600 files instead of the
runner's command line, the runner's `command` file without the environment's values, the safety net over
the artifacts, the snapshot without the host's environment and written 0600, the keyed fingerprint.
The canary over the whole CLI is tests/integration/test_canary_secrets.py."""
import ast
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.llmops.vllm.plugins.filter import host_state as host_state_filter
from ansible_collections.llmops.vllm.plugins.module_utils import redact
from ansible_collections.llmops.vllm.plugins.plugin_utils import apply, snapshot

ROOT = Path(__file__).resolve().parents[2]
MODULES = ROOT / "plugins" / "modules"
# What a URL's password can be made of, written as is (no '/', '?', '#', whitespace: those end the
# authority) - '@' and ':' included, which a careless parser splits on.
PASSWORD = st.text(st.characters(codec="ascii", categories=("L", "N", "P", "S"), exclude_characters="/?#%"),
                   min_size=6, max_size=24)
USER = st.text(st.characters(codec="ascii", categories=("L", "N"), exclude_characters=":@"), min_size=1, max_size=10)


# ----------------------------------------------------------------------------- a URL's password

@settings(max_examples=60, deadline=None)
@given(user=USER, password=PASSWORD)
def test_issue39_a_urls_password_is_found_and_masked_whatever_it_holds(user, password):
    for written in (password, quote(password, safe="")):
        url = "http://%s:%s@hub.internal:8090/api/models" % (user, written)
        text = "cannot reach %s (refused)" % url
        assert password in redact.url_secrets(text)
        masked = redact.mask_urls(text)
        assert masked == "cannot reach http://%s:********@hub.internal:8090/api/models (refused)" % user
        assert written not in masked.replace("http://%s:" % user, "")


def test_a_url_without_credentials_is_left_alone_and_a_lone_token_is_the_secret():
    assert redact.url_secrets("http://hub.internal:8090/x?a=b@c") == []
    assert redact.mask_urls("https://hub.internal/") == "https://hub.internal/"
    assert redact.url_secrets("https://ghp_abcdef123@github.com/o/r") == ["ghp_abcdef123"]
    assert redact.mask_urls("https://ghp_abcdef123@github.com/o/r") == "https://********@github.com/o/r"


def module_result(module, args, environ=None):
    """A module of this collection run as Ansible runs it (its arguments in a file), its JSON result."""
    path = Path(os.environ.get("TMPDIR", "/tmp")) / ("args-%s-%d.json" % (module, os.getpid()))
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": dict(args, _ansible_check_mode=True)}))
    try:
        proc = subprocess.run([sys.executable, str(MODULES / (module + ".py")), str(path)], capture_output=True, text=True,
                              timeout=60, check=False, env=dict(os.environ, **(environ or {})))
    finally:
        path.unlink()
    return proc.stdout + proc.stderr


def test_issue39_module_arguments_at_vvv_show_no_endpoint_password(tmp_path):
    """The invocation (what -vvv and the runner's events show) and the messages of the modules that take an
    endpoint carry ******** for its password - also HF_ENDPOINT's, the endpoint the hub client falls back to."""
    endpoint = "http://mirror:Sup3r-S3cret@127.0.0.1:9"
    out = module_result("vllm_state", {"action": "verify", "name": "m", "fingerprint": "f", "state_dir": str(tmp_path),
                                       "unit_dir": str(tmp_path), "hub_endpoint": endpoint})
    assert '"hub_endpoint": "http://mirror:********@127.0.0.1:9"' in out and "Sup3r-S3cret" not in out
    out = module_result("hf_model", {"repo_id": "o/m", "revision": "main", "models_root": str(tmp_path), "endpoint": endpoint},
                        environ={"HF_ENDPOINT": "http://env:Env-S3cret@127.0.0.1:9"})
    assert "mirror:********@" in out and "Sup3r-S3cret" not in out and "Env-S3cret" not in out


def endpoint_options(module):
    """The options of a module's argument_spec whose name says they take an endpoint (a URL)."""
    tree = ast.parse((MODULES / (module + ".py")).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "argument_spec" and isinstance(node.value, ast.Call):
            return sorted(keyword.arg for keyword in node.value.keywords if keyword.arg and "endpoint" in keyword.arg)
    return []


def test_issue39_every_module_that_takes_an_endpoint_protects_it():
    takes = dict((path.stem, endpoint_options(path.stem)) for path in sorted(MODULES.glob("*.py")))
    takes = dict((module, options) for module, options in takes.items() if options)
    assert {"hf_model", "vllm_state"} <= set(takes)
    for module, options in takes.items():
        source = (MODULES / (module + ".py")).read_text()
        for option in options:
            assert "protect_endpoints(module, '%s')" % option in source, (
                "%s: option %s takes an endpoint - call protect_endpoints(module, '%s') right after AnsibleModule()"
                % (module, option, option))


# ----------------------------------------------------------------------------- -e values and the runner's files

KEY_VALUE = st.text(st.characters(codec="ascii", categories=("L", "N"), include_characters="-_.:+@%"), min_size=1, max_size=20)


@settings(max_examples=40, deadline=None)
@given(values=st.lists(KEY_VALUE, min_size=1, max_size=3))
def test_issue39_extra_vars_reach_ansible_as_0600_files_that_are_gone_after(values):
    """Each inline -e value becomes a file that ansible-playbook reads into the same variables; the command
    line names only the files; they are 0600 in a 0700 directory and removed on exit; @files stay."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.parsing.splitter import parse_kv

    loader = DataLoader()
    inline = ["v%d=%s" % (i, value) for i, value in enumerate(values)] + [json.dumps({"nested": {"k": values}})]
    with apply.ExtraVars(inline + ["@vars/given.yml"]) as files:
        args = files.cmdline()
        assert args[0::2] == ["-e"] * (len(inline) + 1) and args[-1] == "@vars/given.yml"
        assert stat.S_IMODE(os.stat(files.directory).st_mode) == 0o700
        for value, arg in zip(inline, args[1::2][:len(inline)], strict=True):
            assert os.path.dirname(arg[1:]) == files.directory  # the command line holds a path, not the value
            assert stat.S_IMODE(os.stat(arg[1:]).st_mode) == 0o600
            expected = loader.load(value) if value.startswith("{") else parse_kv(value)
            assert loader.load_from_file(arg[1:]) == expected
    assert not os.path.exists(files.directory)


def test_issue39_the_runners_command_file_keeps_no_value_of_the_environment(tmp_path):
    path = tmp_path / "command"
    path.write_text(json.dumps({"command": ["ansible-playbook", "-e", "@/tmp/x/01.yml"], "cwd": "/srv",
                                "env": {"PATH": "/usr/bin", "HOME": "/root", "VAULT_PASSWORD": "hunter2-vault",
                                        "HF_TOKEN": "hf_abcdef", "CI_JOB_NAME": "apply", "HTTPS_PROXY": "http://u:pw123456@proxy:3128"}}))
    path.chmod(0o600)
    apply.scrub_command(str(path))
    doc = json.loads(path.read_text())
    assert doc["env"] == {"PATH": "/usr/bin", "HOME": "/root", "VAULT_PASSWORD": "********", "HF_TOKEN": "********",
                          "CI_JOB_NAME": "********", "HTTPS_PROXY": "********"}
    assert doc["command"] == ["ansible-playbook", "-e", "@/tmp/x/01.yml"] and stat.S_IMODE(path.stat().st_mode) == 0o600


def test_issue39_the_safety_net_masks_what_the_cli_knows_in_every_artifact(tmp_path):
    environ = {"HF_TOKEN": "hf_envtoken42", "PATH": "/usr/bin", "HTTP_PROXY": "http://proxy-user:Pr0xyPass@p:3128",
               "SHORT_TOKEN": "abc", "LANG": "C"}
    secrets = apply.known_secrets(["rollout_hub_token=hf_etoken99 rollout_serial=1",
                                   json.dumps({"rollout_api_key": 'sk-"quoted"-key', "vllm_model": {"name": "tiny"},
                                               "rollout_hub_endpoint": "http://m:Mirr0rPw@hub/"})], environ)
    assert set(secrets) == {"hf_envtoken42", "Pr0xyPass", "hf_etoken99", 'sk-"quoted"-key', "Mirr0rPw"}
    run = tmp_path / "artifacts" / "run1"
    (run / "job_events").mkdir(parents=True)
    event = run / "job_events" / "1-x.json"
    event.write_text(json.dumps({"res": {"msg": "token hf_etoken99 and key sk-\"quoted\"-key, via http://m:Mirr0rPw@hub/",
                                         "rollout_serial": "1", "name": "tiny"}}))
    event.chmod(0o600)
    (run / "stdout").write_text("HF_TOKEN=hf_envtoken42 proxy Pr0xyPass\n")
    apply.scrub_artifacts(str(run), secrets)
    assert json.loads(event.read_text())["res"] == {"msg": "token ******** and key ********, via http://m:********@hub/",
                                                    "rollout_serial": "1", "name": "tiny"}
    assert (run / "stdout").read_text() == "HF_TOKEN=******** proxy ********\n" and stat.S_IMODE(event.stat().st_mode) == 0o600
    assert apply.redacted({"a": ["x hf_etoken99"]}, secrets) == {"a": ["x ********"]}


# ----------------------------------------------------------------------------- snapshots

@settings(max_examples=30, deadline=None)
@given(password=PASSWORD)
def test_issue39_a_snapshot_holds_no_environment_and_no_endpoint_password_and_is_0600(tmp_path_factory, password):
    directory = tmp_path_factory.mktemp("snap")
    endpoint = "http://mirror:%s@hub.internal:8090" % quote(password, safe="")
    doc = snapshot.empty("h1", "2026-12-06T00:00:00+00:00", "0.1.0")
    setup_args = {"gather_subset": ["min", "network", "!env"]}
    snapshot.record(doc, "ansible.builtin.setup", setup_args,
                    {"ansible_facts": {"ansible_env": {"HF_TOKEN": password}, "env": {"X": password},
                                       "default_ipv4": {"address": "10.0.0.5"}}, "changed": False})
    read_args = {"repo_id": "o/m", "revision": "a" * 40, "models_root": "/srv/models", "endpoint": endpoint, "token": password}
    snapshot.record(doc, "llmops.vllm.hf_model", read_args,
                    {"free_bytes": 5, "msg": "fetching from %s" % endpoint, "invocation": {"module_args": read_args}})
    path = snapshot.save(str(directory), doc)
    text = Path(path).read_text()
    assert password not in text and quote(password, safe="") not in text and json.dumps(password)[1:-1] not in text
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    loaded = snapshot.load(str(directory), "h1")
    assert snapshot.recorded(loaded, "ansible.builtin.setup", setup_args)["ansible_facts"] == {"default_ipv4": {"address": "10.0.0.5"}}
    # the offline preview asks with the real arguments and finds the read recorded under the masked ones
    assert snapshot.recorded(loaded, "llmops.vllm.hf_model", read_args)["free_bytes"] == 5
    assert snapshot.free_bytes_for(loaded, "/srv/models") == 5


def test_issue39_the_rollout_gathers_no_environment():
    """The facts of the rollout (and the stage) leave ansible_env out: the host's HF_TOKEN never reaches
    the controller, its events or its snapshot."""
    import yaml
    for name in ("rollout.yml", "stage.yml"):
        text = (ROOT / "playbooks" / name).read_text()
        subsets = [task["gather_subset"] for task in _walk(yaml.safe_load(text)) if isinstance(task, dict) and "gather_subset" in task]
        assert subsets and all("!env" in subset for subset in subsets), (name, subsets)


def _walk(node):
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


# ----------------------------------------------------------------------------- the fingerprint

INPUTS = {"vllm_model": {"name": "tiny", "repo_id": "o/m", "revision": "main"},
          "rollout": ["", 2, "vllm", "vllm", "/var/lib/llmops-vllm", "/etc/systemd/system", "/var/lib/llmops-vllm/models",
                      "http://mirror:pw@hub/", "hf_token", "sk-api-key-1", 2]}


def test_issue39_the_fingerprint_is_keyed_and_still_notices_a_new_api_key():
    import hashlib
    key, other_key = "k" * 64, "q" * 64
    first = host_state_filter.fingerprint(INPUTS, key)
    assert first == host_state_filter.fingerprint(json.loads(json.dumps(INPUTS)), key)
    rotated = json.loads(json.dumps(INPUTS))
    rotated["rollout"][9] = "sk-api-key-2"
    assert host_state_filter.fingerprint(rotated, key) != first  # a new API key runs the full rollout
    assert host_state_filter.fingerprint(INPUTS, other_key) != first  # another host's key, another fingerprint
    # without the key, the inputs (a guessed API key among them) do not give the fingerprint
    plain = json.dumps({"inputs": INPUTS, "code": host_state_filter.code_digest()}, sort_keys=True, separators=(",", ":"))
    assert hashlib.sha256(plain.encode()).hexdigest() != first
    for missing in ("", "  ", None):
        with pytest.raises(Exception, match="no key"):
            host_state_filter.fingerprint(INPUTS, missing)
