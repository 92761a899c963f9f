# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""module_utils/vllm_process.py: which command lines are vLLM servers, their options and secrets, /proc
parsing, and scan / takeover / stop on real processes of this machine (a stand-in `vllm` script that
listens on a port, since a real vLLM start belongs to the sandbox scenario)."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.llmops.vllm.plugins.module_utils import host_state
from ansible_collections.llmops.vllm.plugins.module_utils import vllm_process as vp
from ansible_collections.llmops.vllm.plugins.module_utils.systemd_unit import read_environment_file

# systemd's reading of a unit file and of its values (the strict splitter), and the serve role's template as its role renders it
from test_sinks import TEMPLATE as SERVE_TEMPLATE, _plain, parse_unit, serve_vars
from test_systemd_filter import split_assignments, split_exec

API_KEY = "sk-takeover-test-7f3a"
HF_TOKEN = "hf_takeovertestsecret"


@pytest.mark.parametrize("argv, args", [
    (["vllm", "serve", "/m", "--port", "8000"], ["/m", "--port", "8000"]),
    (["/opt/v/bin/python3", "/opt/v/bin/vllm", "serve", "moonshotai/Kimi-K2.5"], ["moonshotai/Kimi-K2.5"]),
    (["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m"], ["--model", "/m"]),
    (["python", "-m", "vllm.entrypoints.cli.main", "serve", "/m", "-tp", "8"], ["/m", "-tp", "8"]),
    (["VLLM::EngineCore"], None),
    (["vllm", "--version"], None),
    (["vllm", "bench", "serve", "--model", "x"], None),
    (["grep", "vllm serve"], None),
    (["bash", "-c", "vllm serve /m"], None),
    (["python3", "-m", "vllm.entrypoints.cli.main", "bench"], None),
    (["python3", "-m", "http.server", "8000"], None),
    ([], None),
])
def test_server_args(argv, args):
    assert vp.server_args(argv) == args


def test_options_flags_and_model():
    args = ["/srv/m", "--served-model-name", "Kimi K2.5", "--max_model_len=262144", "-tp", "8",
            "--enable-expert-parallel", "--port", "8001", "--port", "8002"]
    assert vp.option(args, "--served-model-name") == "Kimi K2.5"
    assert vp.option(args, "--max-model-len") == "262144"  # vLLM reads --max_model_len as --max-model-len
    assert vp.option(args, "--tensor-parallel-size", "-tp") == "8"
    assert vp.option(args, "--port") == "8002"  # the last one wins, as in argparse
    assert vp.option(args, "--host") is None
    assert vp.has_flag(args, "--enable-expert-parallel")
    assert not vp.has_flag(args + ["--no-enable-expert-parallel"], "--enable-expert-parallel")
    assert not vp.has_flag(["--enable-expert-parallel=false"], "--enable-expert-parallel")
    assert vp.model_arg(args) == "/srv/m"
    assert vp.model_arg(["--model", "org/name", "--port", "1"]) == "org/name"
    assert vp.model_arg(["--port", "1"]) is None


def test_secrets_leave_argv_and_are_redacted():
    argv = ["/v/bin/vllm", "serve", "/m", "--api-key", API_KEY, "--hf-token=" + HF_TOKEN, "--port", "8000"]
    kept, secrets = vp.split_secrets(argv)
    assert kept == ["/v/bin/vllm", "serve", "/m", "--port", "8000"]
    assert secrets == {"VLLM_API_KEY": API_KEY, "HF_TOKEN": HF_TOKEN}
    redacted = vp.redact_argv(argv)
    assert redacted == ["/v/bin/vllm", "serve", "/m", "--api-key", vp.REDACTED, "--hf-token=" + vp.REDACTED, "--port", "8000"]
    # --hf-token without a value (use the stored login) is a flag, not a secret
    assert vp.split_secrets(["vllm", "serve", "/m", "--hf-token", "--port", "1"]) == (
        ["vllm", "serve", "/m", "--hf-token", "--port", "1"], {})
    assert vp.redact_argv(["--hf-token", "--port", "1"]) == ["--hf-token", "--port", "1"]


@pytest.mark.parametrize("name, secret", [
    ("HF_TOKEN", True), ("HUGGING_FACE_HUB_TOKEN", True), ("VLLM_API_KEY", True), ("OPENAI_API_KEY", True),
    ("AWS_SECRET_ACCESS_KEY", True), ("DB_PASSWORD", True), ("KEY", True),
    ("PATH", False), ("HOME", False), ("VLLM_USE_V1", False), ("TOKENIZERS_PARALLELISM", False), ("MONKEY", False),
    ("CUDA_VISIBLE_DEVICES", False),
])
def test_secret_environment_names(name, secret):
    assert vp.is_secret_env(name) is secret


@pytest.mark.parametrize("args, model, name", [
    (["--served-model-name", "Kimi-K2.5"], "/m", "kimi-k2-5"),
    ([], "/srv/models/MiniMax-M2.5/", "minimax-m2-5"),
    ([], "moonshotai/Kimi_K2.5", "kimi-k2-5"),
    (["--served-model-name", "!!!"], "/srv/x", "x"),
    ([], None, None),
])
def test_takeover_name(args, model, name):
    assert vp.takeover_name(args, model) == name


def test_parse_listening_ipv4_and_ipv6():
    tcp = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
           "   0: 00000000:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 51234 1\n"
           "   1: 0B00E70A:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1\n"
           "   2: 0100007F:1F40 0100007F:D2A4 01 00000000:00000000 00:00000000 00000000     0        0 999 1\n")
    assert vp.parse_listening(tcp) == {"51234": "0.0.0.0:8000", "4242": "10.231.0.11:22"}
    tcp6 = ("  sl  local_address                         remote_address                        st\n"
            "   0: 00000000000000000000000000000000:1F41 00000000000000000000000000000000:0000 0A 00000000:00000000 "
            "00:00000000 00000000     0        0 777 1\n"
            "   1: 00000000000000000000000001000000:1F42 00000000000000000000000000000000:0000 0A 00000000:00000000 "
            "00:00000000 00000000     0        0 778 1\n"
            "   2: 0000000000000000FFFF00000B00E70A:1F43 00000000000000000000000000000000:0000 0A 00000000:00000000 "
            "00:00000000 00000000     0        0 779 1\n")
    assert vp.parse_listening(tcp6) == {"777": "[::]:8001", "778": "[::1]:8002", "779": "10.231.0.11:8003"}


def test_parse_cgroup_and_stat():
    assert vp.parse_cgroup("0::/system.slice/vllm-kimi.service\n") == ("/system.slice/vllm-kimi.service", "vllm-kimi.service")
    assert vp.parse_cgroup("0::/user.slice/user-0.slice/session-3.scope\n")[1] == "session-3.scope"
    assert vp.parse_cgroup("12:cpu:/x\n1:name=systemd:/system.slice/sshd.service\n")[1] == "sshd.service"
    assert vp.parse_cgroup("0::/\n") == ("/", None)
    stat = "4242 (vllm serve) x) S 4200 4242 4200 0 -1 4194560 " + " ".join(["0"] * 12) + " 987654 0"
    assert vp.parse_stat(stat) == (4200, "987654")


FAKE_VLLM = """#!%s
# Stand-in for the vllm CLI: listens on --port, starts a worker child (as vLLM's engine core) unless
# --lone is given, ignores SIGTERM when --stubborn is given.
import os, signal, socket, subprocess, sys, time
port = int(sys.argv[sys.argv.index('--port') + 1])
if '--stubborn' in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(('127.0.0.1', port))
server.listen(4)
# the worker listens on an ephemeral port, as vLLM's engine core does for its own channels
child = None if '--lone' in sys.argv else subprocess.Popen(
    [sys.executable, '-c', 'import socket, time; s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1); time.sleep(600)'])
signal.signal(signal.SIGTERM, signal.SIG_IGN) if '--stubborn' in sys.argv else signal.signal(
    signal.SIGTERM, lambda *_: (child and (child.terminate(), child.wait()), sys.exit(0)))
if child:
    time.sleep(1)  # the worker is listening by now
print('ready', flush=True)
time.sleep(600)
"""


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def stand_ins(root):
    """(start(extra_args, cwd=, environ=) -> (Popen, port), stop_all()) for stand-in servers started from a
    shell-like environment in a venv under ``root``."""
    bindir = root / "venv" / "bin"
    bindir.mkdir(parents=True)
    # a venv as uv or python -m venv makes one: bin/python3 links to the base interpreter
    real = os.path.realpath(sys.executable)
    (root / "venv" / "pyvenv.cfg").write_text("home = %s\n" % os.path.dirname(real))
    (bindir / "python3").symlink_to(real)
    script = bindir / "vllm"
    script.write_text(FAKE_VLLM % (bindir / "python3"))
    script.chmod(0o755)
    (root / "models" / "tiny").mkdir(parents=True)
    started = []

    def start(*extra, cwd=None, environ=None):
        port = free_port()
        env = {"PATH": "%s:/usr/bin:/bin" % bindir, "HOME": str(root), "HF_TOKEN": HF_TOKEN, "MY_SETTING": "a b$c",
               "SHLVL": "2", "TERM": "xterm", "OLDPWD": "/"}
        env.update(environ or {})
        process = subprocess.Popen(["vllm", "serve", "./models/tiny", "--served-model-name", "Hand_Llama", "--port", str(port),
                                    "--api-key", API_KEY, "--max-model-len", "512"] + list(extra),
                                   cwd=str(cwd or root), env=env, stdout=subprocess.PIPE, text=True)
        assert process.stdout.readline().strip() == "ready"
        started.append(process)
        return process, port

    def stop_all():
        for process in started:
            if process.poll() is None:
                process.kill()
                process.wait()

    return start, stop_all


@pytest.fixture
def fake_server(tmp_path):
    """Start stand-in servers; yields start(extra_args, cwd=, environ=) -> (Popen, port)."""
    start, stop_all = stand_ins(tmp_path)
    yield start
    stop_all()


@pytest.fixture(scope="module")
def lone_server(tmp_path_factory):
    """One stand-in server without a worker, for the tests that only read it: (Popen, its facts from scan())."""
    start, stop_all = stand_ins(tmp_path_factory.mktemp("lone"))
    process, _port = start("--lone")
    [server] = [s for s in vp.scan() if s["pid"] == process.pid]
    yield process, server
    stop_all()


def test_scan_finds_the_server_with_its_tree_port_and_origin(fake_server, tmp_path):
    process, port = fake_server()
    servers = [server for server in vp.scan() if server["pid"] == process.pid]
    assert len(servers) == 1, "the server is listed once; its worker child is part of it"
    server = servers[0]
    # the worker's ephemeral listening port is not listed; the served one is, though it is ephemeral too
    assert server["ports"] == [port] and server["listen"] == ["127.0.0.1:%d" % port]
    assert len(server["children"]) == 1
    assert server["cwd"] == str(tmp_path)
    # started through its shebang: argv[0] is the interpreter, argv[1] the script found on PATH
    assert server["program"] == str(tmp_path / "venv" / "bin" / "python3")
    assert server["venv"] == str(tmp_path / "venv")
    assert server["args"][:1] == ["./models/tiny"]
    assert server["model"] == "./models/tiny" and server["served_model_name"] == "Hand_Llama" and server["name"] == "hand-llama"
    public = vp.public_process(server)
    text = json.dumps(public)
    assert API_KEY not in text and HF_TOKEN not in text
    assert "--api-key ********" in public["command"]
    assert public["secrets"] == ["HF_TOKEN", "VLLM_API_KEY"]
    assert "HF_TOKEN" in public["environment"] and "PATH" in public["environment"]
    assert public["managed_by"] is None
    assert vp.conflicts([public], port, []) == [public]
    assert vp.conflicts([public], port + 1, []) == []
    line = vp.describe_foreign(public)
    assert "pid %d" % process.pid in line and "127.0.0.1:%d" % port in line and API_KEY not in line


def test_managed_by_unit_or_recorded_takeover():
    server = {"pid": 10, "start_time": "123", "unit": "vllm-a.service"}
    assert vp.managed_by(server, ["vllm-a.service"], []) == "vllm-a.service"
    assert vp.managed_by(server, ["vllm-b.service"], []) is None
    hand = {"pid": 10, "start_time": "123", "unit": "session-3.scope"}
    assert vp.managed_by(hand, [], [{"pid": 10, "start_time": 123, "unit": "vllm-hand.service"}]) == "vllm-hand.service"
    # the same pid with another start time is another process
    assert vp.managed_by(hand, [], [{"pid": 10, "start_time": "999", "unit": "vllm-hand.service"}]) is None
    public = [{"managed_by": "vllm-a.service", "ports": [8000], "gpus": [0]}, {"managed_by": None, "ports": [9000], "gpus": [4, 5]}]
    assert vp.conflicts(public, 8000, [0]) == []
    assert vp.conflicts(public, 8000, [5, 6]) == [public[1]]


def test_takeover_unit_env_file_and_entry(fake_server, tmp_path):
    process, port = fake_server()
    server = [s for s in vp.scan() if s["pid"] == process.pid][0]
    result = vp.takeover(server, "hand-llama", "/etc/systemd/system", "/etc/llmops-vllm/takeover")
    unit = result["unit_text"]
    assert result["unit"] == "vllm-hand-llama.service" and result["unit_path"] == "/etc/systemd/system/vllm-hand-llama.service"
    assert API_KEY not in unit and HF_TOKEN not in unit
    exec_start = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    assert exec_start == ["ExecStart=%s %s serve ./models/tiny --served-model-name Hand_Llama --port %d --max-model-len 512"
                          % (tmp_path / "venv" / "bin" / "python3", tmp_path / "venv" / "bin" / "vllm", port)]
    assert "WorkingDirectory=%s" % tmp_path in unit.splitlines()
    assert "EnvironmentFile=/etc/llmops-vllm/takeover/hand-llama.env" in unit.splitlines()
    assert 'Environment="MY_SETTING=a b$c"' in unit.splitlines()
    assert not any(line.startswith(('Environment="SHLVL', 'Environment="TERM', 'Environment="OLDPWD')) for line in unit.splitlines())
    assert "ProtectSystem=strict" in unit.splitlines() and "ReadWritePaths=-%s" % tmp_path in unit.splitlines()
    assert "PrivateTmp=yes" not in unit.splitlines()  # it runs from under /tmp: the host's /tmp stays
    plain = vp.takeover(server, "hand-llama", "/u", "/e", hardening=False)["unit_text"]
    assert "ProtectSystem" not in plain and "NoNewPrivileges" not in plain  # hardening=false: as it ran
    assert read_environment_file(result["env_text"]) == {"HF_TOKEN": HF_TOKEN, "VLLM_API_KEY": API_KEY}
    assert result["secrets"] == ["HF_TOKEN", "VLLM_API_KEY"]
    entry = result["entry"]
    assert host_state.entry_problems(dict(entry, since="2026-12-01T00:00:00Z")) == []
    assert entry["path"] == str(tmp_path / "models" / "tiny")  # a relative model path, made absolute
    assert entry["plan"]["max_model_len"] == 512 and entry["plan"]["device"] == "cpu"
    assert entry["port"] == port and entry["bind"] == "127.0.0.1"
    assert entry["venv"] == str(tmp_path / "venv")
    assert entry["takeover"]["pid"] == process.pid and entry["takeover"]["start_time"] == server["start_time"]
    assert entry["takeover"]["exe"] == os.path.realpath(sys.executable)
    assert API_KEY not in json.dumps(entry) and HF_TOKEN not in json.dumps(entry)


def test_takeover_refuses_what_it_cannot_reproduce(fake_server):
    process, _port = fake_server()
    server = [s for s in vp.scan() if s["pid"] == process.pid][0]
    with pytest.raises(vp.ProcessError, match="vllm_takeover_name"):
        vp.takeover(server, "Bad Name", "/u", "/e")
    with pytest.raises(vp.ProcessError, match="run the takeover as root"):
        vp.takeover(dict(server, environ_readable=False), "x", "/u", "/e")
    unknown_length = dict(server, args=[a for a in server["args"] if a not in ("--max-model-len", "512")])
    with pytest.raises(vp.ProcessError, match="vllm_takeover_max_model_len"):
        vp.takeover(unknown_length, "x", "/u", "/e")
    assert vp.takeover(unknown_length, "x", "/u", "/e", max_model_len=4096)["entry"]["plan"]["max_model_len"] == 4096


def _gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_stop_ends_the_server_and_its_tree(fake_server):
    process, _port = fake_server()
    server = [s for s in vp.scan() if s["pid"] == process.pid][0]
    child = server["children"][0]
    assert vp.stop(process.pid, "1", timeout=5) == {"stopped": False, "signal": None, "seconds": 0.0}, "another start time: left alone"
    assert process.poll() is None
    result = vp.stop(process.pid, server["start_time"], timeout=20, sleep=lambda s: (process.poll(), time.sleep(s)))
    assert result["stopped"] and result["signal"] == "TERM"
    assert process.wait(timeout=5) == 0
    deadline = time.time() + 5
    while not _gone(child) and time.time() < deadline:
        time.sleep(0.1)
    assert _gone(child)
    assert vp.stop(process.pid, server["start_time"], timeout=5)["stopped"] is False


def test_stop_kills_what_ignores_sigterm(fake_server):
    process, _port = fake_server("--stubborn")
    server = [s for s in vp.scan() if s["pid"] == process.pid][0]
    result = vp.stop(process.pid, server["start_time"], timeout=1, sleep=lambda s: (process.poll(), time.sleep(s)))
    assert result["signal"] == "KILL"
    assert process.wait(timeout=5) == -signal.SIGKILL


# ----------------------------------------------------------------------------- the modules, through ansible-playbook

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")


def run_tasks(tmp_path, tasks, check=False, diff=True):
    """Tasks in a play on localhost, each result registered as r0, r1, ...; returns (results, output)."""
    work = tmp_path / ("play-%d" % len(list(tmp_path.glob("play-*"))))
    work.mkdir()
    out = work / "results.json"
    play_tasks = [dict(task, register="r%d" % i) for i, task in enumerate(tasks)]
    play_tasks.append({"name": "Write the results", "ansible.builtin.copy": {
        "content": "{{ [%s] | to_nice_json }}" % ", ".join("r%d" % i for i in range(len(tasks))), "dest": str(out)},
        "check_mode": False, "diff": False})
    (work / "play.yml").write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": play_tasks}]))
    argv = [ANSIBLE_PLAYBOOK, "-i", "localhost,", "-c", "local", "-e", "ansible_python_interpreter=%s" % sys.executable,
            str(work / "play.yml")] + (["--check"] if check else []) + (["--diff"] if diff else [])
    env = {"ANSIBLE_CONFIG": os.path.join(ROOT, "ansible.cfg"), "PATH": "%s:/usr/bin:/bin" % os.path.dirname(sys.executable),
           "HOME": str(tmp_path), "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"), "ANSIBLE_NOCOLOR": "1", "LANG": "C.UTF-8"}
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(out.read_text()), done.stdout + done.stderr


@pytest.mark.ansible
def test_modules_find_take_over_and_stop_a_server(fake_server, tmp_path):
    """vllm_process_info names the foreign server and its conflict; vllm_takeover in check mode writes
    nothing, then writes the unit (0644) and the EnvironmentFile (0600), changes nothing the second time,
    and stops the process; once recorded, the process counts as managed. No secret in any output."""
    from ansible_collections.llmops.vllm.plugins.plugin_utils import contracts

    process, port = fake_server()
    state_dir, unit_dir, env_dir = tmp_path / "state", tmp_path / "units", tmp_path / "takeover"
    state_dir.mkdir()
    unit_dir.mkdir()
    info = {"llmops.vllm.vllm_process_info": {"state_dir": str(state_dir), "port": port}}
    takeover = {"llmops.vllm.vllm_takeover": {"pid": process.pid, "unit_dir": str(unit_dir), "env_dir": str(env_dir)}}
    (found, _take_check), out_check = run_tasks(tmp_path, [info, takeover], check=True)
    assert not (unit_dir / "vllm-hand-llama.service").exists() and not env_dir.exists()
    [server] = [s for s in found["servers"] if s["pid"] == process.pid]
    assert found["conflicts"] == [server] and server["managed_by"] is None and server["ports"] == [port]
    assert _take_check["changed"] and "would take pid %d over" % process.pid in _take_check["msg"]

    takeover["llmops.vllm.vllm_takeover"]["start_time"] = server["start_time"]
    (taken, again), out = run_tasks(tmp_path, [takeover, takeover])
    assert taken["changed"] and not again["changed"]
    unit_file, env_file = unit_dir / "vllm-hand-llama.service", env_dir / "hand-llama.env"
    assert taken["unit_path"] == str(unit_file) and taken["env_file"] == str(env_file)
    assert oct(env_file.stat().st_mode & 0o777) == "0o600" and oct(env_dir.stat().st_mode & 0o777) == "0o700"
    assert oct(unit_file.stat().st_mode & 0o777) == "0o644"
    assert read_environment_file(env_file.read_text()) == {"HF_TOKEN": HF_TOKEN, "VLLM_API_KEY": API_KEY}
    for text in (unit_file.read_text(), out_check, out, json.dumps(found), json.dumps(taken)):
        assert API_KEY not in text and HF_TOKEN not in text
    assert "+ExecStart=" in out  # the diff of the unit
    for name, result in (("vllm_process_info", found), ("vllm_takeover", taken)):
        contracts.MODULE_CONTRACTS[name].model_validate(
            {k: v for k, v in result.items() if k not in ("changed", "failed", "invocation", "warnings", "diff", "msg")})

    # recorded, the process is the collection's (no conflict, no warning)
    entry = dict(taken["entry"], since="2026-12-01T00:00:00Z")
    host_state.save(host_state.state_path(str(state_dir)), host_state.record(host_state.empty_state(), entry))
    (found,), out = run_tasks(tmp_path, [info])
    [server] = [s for s in found["servers"] if s["pid"] == process.pid]
    assert server["managed_by"] == "vllm-hand-llama.service" and found["conflicts"] == []
    assert "did not start runs here: pid %d " % process.pid not in out

    stop = {"llmops.vllm.vllm_takeover": {"pid": process.pid, "start_time": server["start_time"], "state": "stopped"}}
    (would,), _out = run_tasks(tmp_path, [stop], check=True)
    assert would["changed"] and process.poll() is None
    (stopped, gone), _out = run_tasks(tmp_path, [stop, stop])
    assert stopped["changed"] and stopped["signal"] == "TERM" and not gone["changed"] and gone["stopped"] is False
    assert process.wait(timeout=5) == 0


# ----------------------------------------------------------------------------- issue 38: takeover of a foreign vLLM

# An unprivileged user's `vllm serve` whose served name opens a root ExecStartPre= in the unit a takeover writes.
INJECTION = "x\n[Service]\nExecStartPre=+/bin/sh -c 'id > /tmp/pwned'\n[Unit]\nX-Y="
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
needs_systemd_analyze = pytest.mark.skipif(not SYSTEMD_ANALYZE, reason="systemd-analyze is not installed")


def _server_of(process):
    [server] = [s for s in vp.scan() if s["pid"] == process.pid]
    return server


def test_issue38_newline_in_served_model_name_writes_no_unit(fake_server):
    process, _port = fake_server("--lone", "--served-model-name", INJECTION)
    server = _server_of(process)
    assert server["served_model_name"] == INJECTION
    with pytest.raises(vp.ProcessError) as err:
        vp.takeover(server, "hand-llama", "/etc/systemd/system", "/etc/llmops-vllm/takeover")
    message = str(err.value)
    assert "process %d" % process.pid in message and "command line word" in message and "control character" in message
    assert "wrote or stopped nothing" in message


def test_issue38_newline_in_working_directory_writes_no_unit(fake_server, tmp_path):
    evil = tmp_path / "hand\n[Service]\nExecStartPre=+/usr/bin/touch /tmp/pwned\n[Unit]\nX-Y=."
    evil.mkdir(parents=True)
    process, _port = fake_server("--lone", cwd=evil)
    server = _server_of(process)
    assert server["cwd"] == str(evil)
    with pytest.raises(vp.ProcessError, match=r"process %d: its working directory .* control character" % process.pid):
        vp.takeover(server, "hand-llama", "/u", "/e")


@pytest.mark.parametrize("environ, field", [
    ({"VLLM_LOGGING_PREFIX": "ok\n[Service]\nExecStartPre=+/bin/id"}, "environment variable VLLM_LOGGING_PREFIX"),
    ({"EVIL\nExecStartPre": "1"}, "the name of an environment variable"),
    ({"MY_SECRET_TOKEN": "hidden\rvalue"}, "environment variable MY_SECRET_TOKEN"),
])
def test_issue38_control_character_in_environment_writes_no_unit(fake_server, environ, field):
    process, _port = fake_server("--lone", environ=environ)
    server = _server_of(process)
    with pytest.raises(vp.ProcessError) as err:
        vp.takeover(server, "hand-llama", "/u", "/e")
    message = str(err.value)
    assert "process %d: %s" % (process.pid, field) in message
    assert "hidden" not in message  # a secret's value is never shown


@pytest.mark.parametrize("change, what", [
    ({"user": "llmops\nExecStartPre=+/bin/id"}, "its user"),
    ({"user": None}, "its user"),
    ({"group": "a b"}, "its group"),
    ({"parent": {"pid": 1, "name": "ba\nsh"}}, "its parent's name"),
    ({"exe": "/opt/v/bin/python3\n"}, "its executable"),
])
def test_issue38_what_the_unit_gets_besides_argv_is_checked(lone_server, change, what):
    process, server = lone_server
    with pytest.raises(vp.ProcessError, match="process %d: %s" % (process.pid, what)):
        vp.takeover(dict(server, **change), "hand-llama", "/u", "/e")


def test_a_trailing_backslash_is_refused_where_systemd_would_join_lines(lone_server):
    process, server = lone_server
    server = dict(server, served_model_name="chat\\")
    assert "Description=vLLM serving chat\\ (taken over" in vp.takeover(server, "hand-llama", "/u", "/e")["unit_text"]
    with pytest.raises(vp.ProcessError, match="process %d: WorkingDirectory ends in a backslash" % process.pid):
        vp.takeover(dict(server, cwd="/srv/hand\\"), "hand-llama", "/u", "/e")


def test_issue38_stop_leaves_a_sleep_process_alone():
    """The pid and start time of a process that is not a vLLM (as vllm_takeover state=stopped was handed one)."""
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        start_time = vp.Proc(sleeper.pid).start_time
        with pytest.raises(vp.ProcessError, match="pid %d .* is not a vLLM API server.*Nothing was stopped" % sleeper.pid):
            vp.stop(sleeper.pid, start_time, timeout=1)
        time.sleep(0.2)
        assert sleeper.poll() is None, "the sleep process was signalled"
    finally:
        sleeper.kill()
        sleeper.wait()


def test_issue38_stop_checks_command_and_executable_right_before_the_signal(fake_server):
    process, _port = fake_server("--lone")
    server = _server_of(process)
    entry = vp.takeover(server, "hand-llama", "/u", "/e")["entry"]["takeover"]
    other_command = entry["command"].replace("--port", "--port-other")
    with pytest.raises(vp.ProcessError, match="not .* as when it was taken over"):
        vp.stop(process.pid, server["start_time"], timeout=1, command=other_command, exe=entry["exe"])
    with pytest.raises(vp.ProcessError, match="executable .* as when it was taken over"):
        vp.stop(process.pid, server["start_time"], timeout=1, command=entry["command"], exe="/usr/bin/sleep")
    assert process.poll() is None
    # between the first reading and the signal the process is read again: here it turned into another program
    readings = []

    def swapped_before_the_signal(proc_dir):
        readings.append(proc_dir)
        if len(readings) == 2:
            raise vp.ProcessError("pid %d is not a vLLM API server" % process.pid)
        return real(process.pid, server["start_time"], entry["command"], entry["exe"], proc_dir)

    real = vp.verified_server
    sent = []
    vp.verified_server, saved = (lambda pid, start, command=None, exe=None, proc=vp.PROC: swapped_before_the_signal(proc)), real
    try:
        with pytest.raises(vp.ProcessError):
            vp.stop(process.pid, server["start_time"], timeout=1, kill=lambda pid, number: sent.append(number),
                    command=entry["command"], exe=entry["exe"])
    finally:
        vp.verified_server = saved
    assert sent == [] and len(readings) == 2
    result = vp.stop(process.pid, server["start_time"], timeout=20, sleep=lambda s: (process.poll(), time.sleep(s)),
                     command=entry["command"], exe=entry["exe"])
    assert result["stopped"] and result["signal"] == "TERM"


# ----------------------------------------------------------------------------- issue 38: the serve role's hardening

def _service_directives(text):
    return [(key, value) for section, key, value in parse_unit(text) if section == "Service"]


def _serve_hardening(device):
    """The hardening block of roles/serve/templates/vllm.service.j2 rendered for ``device``, as (key, value) pairs."""
    plan = dict(serve_vars()["serve_plan"], device=device)
    service = _service_directives(SERVE_TEMPLATE.render(**serve_vars(serve_plan=plan)))
    keys = [key for key, _value in service]
    return service[keys.index("NoNewPrivileges"):]


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_issue38_takeover_hardening_is_the_serve_roles(device):
    """One list of directives: the template's block and vllm_process's, in the same order with the same values
    (ReadWritePaths= names other directories)."""
    ours = vp.hardening_directives(device, ["/srv/hand"])
    assert [item for item in ours if item[0] != "ReadWritePaths"] == \
        [item for item in _serve_hardening(device) if item[0] != "ReadWritePaths"]
    assert ours.index(("ReadWritePaths", "-/srv/hand")) == 2


def _exposure(paths):
    """systemd-analyze security's overall exposure of each unit file (one call for all)."""
    done = subprocess.run([SYSTEMD_ANALYZE, "security", "--offline=true", "--no-pager"] + [str(p) for p in paths],
                          capture_output=True, text=True, check=False, timeout=60)
    found = dict(re.findall(r"Overall exposure level for (\S+): ([0-9.]+)", done.stdout))
    assert len(found) == len(paths), done.stdout + done.stderr
    return [float(found[os.path.basename(str(p))]) for p in paths]


@needs_systemd_analyze
def test_issue38_taken_over_unit_is_hardened_by_default(lone_server, tmp_path):
    """The unit of a server taken over scores like the serve role's (2.5 or less) - on a CPU host, on a GPU host,
    with its paths under /tmp and a home directory - and hardening=false is what ran (over 9)."""
    _process, server = lone_server
    assert server["cwd"].startswith("/tmp/")
    gpu = dict(server, gpus=[0], devices=["/dev/nvidia0", "/dev/nvidiactl"], cwd="/srv/hand",
               argv=["/opt/v/bin/python3", "/opt/v/bin/vllm"] + server["argv"][2:], program="/opt/v/bin/python3",
               exe="/usr/bin/python3.11", venv="/opt/v", environ=dict(server["environ"], HOME="/home/hand",
                                                                      HF_HOME="/data/hf", PATH="/opt/v/bin:/usr/bin"))
    units = tmp_path / "units"
    units.mkdir()
    paths = []
    for label, candidate, hardening in (("cpu", server, True), ("gpu", gpu, True), ("plain", server, False)):
        path = units / ("vllm-%s.service" % label)
        path.write_text(vp.takeover(candidate, label, str(units), "/e", hardening=hardening)["unit_text"])
        paths.append(path)
    cpu, gpu_score, plain = _exposure(paths)
    assert cpu <= 2.5 and gpu_score <= 2.5 and plain > 9.0, (cpu, gpu_score, plain)
    gpu_unit = _service_directives(paths[1].read_text())
    assert ("DevicePolicy", "closed") in gpu_unit and ("ProtectHome", "read-only") in gpu_unit
    assert [value for key, value in gpu_unit if key == "ReadWritePaths"] == ["-/data/hf", "-/home/hand", "-/srv/hand"]
    assert ("PrivateTmp", "yes") in gpu_unit and ("PrivateTmp", "yes") not in _service_directives(paths[0].read_text())


def test_hardening_fits_the_server_or_refuses_it(lone_server):
    server = dict(lone_server[1], cwd="/", environ={"HOME": "/var/lib/svc", "VLLM_CACHE_ROOT": "/var/lib/svc/vllm"})
    directives = _service_directives(vp.takeover(server, "x", "/u", "/e")["unit_text"])
    # "/" stays read-only; a cache below HOME is HOME's
    assert [value for key, value in directives if key == "ReadWritePaths"] == ["-/var/lib/svc"]
    with pytest.raises(vp.ProcessError, match="uses /dev/kfd.*hardening=false"):
        vp.takeover(dict(server, devices=["/dev/kfd"]), "x", "/u", "/e")
    with pytest.raises(vp.ProcessError, match=r"ReadWritePaths= cannot name.*hardening=false"):
        vp.takeover(dict(server, cwd="/srv/$x"), "x", "/u", "/e")
    assert "ProtectSystem" not in vp.takeover(dict(server, devices=["/dev/kfd"]), "x", "/u", "/e", hardening=False)["unit_text"]


# ----------------------------------------------------------------------------- issue 38: properties of the unit

# Text a process may hold that is no control character (Cc: C0 and C1, Zl/Zp: the Unicode line breaks), and
# values chosen to break a unit: specifiers, variables, quotes, backslashes, section headers, directives.
PLAIN = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), max_size=12)
TRICKY = st.sampled_from(["100%n", "%i%%%", "$HOME", "${X}", "a$$b", 'chat"v2', "it's", "a\\b", "\\\\", "; rm -rf /",
                          "[Service]", "ExecStartPre=+/bin/id", "#", "=", "a=b=c", " lead", "caf\u00e9 \u4e2d\U0001f600",
                          "--x=%n", "--y=$HOME", '{"k": "v\\\\n"}'])
WORD = st.one_of(PLAIN, TRICKY)
SEGMENT = st.one_of(PLAIN, TRICKY).map(lambda text: text.replace("/", "_").replace("$", "S")).filter(
    lambda text: text.strip() not in ("", ".", "..") and text == text.strip() and not text.endswith("\\"))
CONTROLS = ["\n", "\r", "\x00", "\t", "\x0b", "\x1b", "\x7f", "\x85", "\x9b", "\u2028", "\u2029"]
ENV_NAME = st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,10}\Z").filter(
    lambda name: name not in vp.SESSION_ENV and name not in vp.CACHE_ENV and name != "HOME")


@st.composite
def processes(draw):
    """A foreign vLLM's facts as scan() returns them: hostile words, directory and environment; no control character."""
    served = draw(WORD)
    words = draw(st.lists(WORD.filter(lambda text: not text.startswith("-")), max_size=4))
    cwd = "/srv/hand/" + "/".join(draw(st.lists(SEGMENT, min_size=1, max_size=3)))
    environ = draw(st.dictionaries(ENV_NAME, WORD, max_size=4))
    if draw(st.booleans()):
        environ["HOME"] = "/home/" + draw(SEGMENT)
    if draw(st.booleans()):
        environ["HF_HOME"] = "/data/" + draw(SEGMENT)
    if draw(st.booleans()):
        environ["HF_TOKEN"] = draw(WORD)
    argv = ["/usr/bin/true", "serve", "/models/m", "--served-model-name", served, "--port", "8000",
            "--max-model-len", "512"] + [item for word in words for item in ("--x", word)] + [
                "--api-key", draw(WORD.filter(lambda text: not text.startswith("-")))]
    return {"pid": 4242, "start_time": "77", "user": "llmops-serve", "group": "llmops-serve", "uid": None,
            "argv": argv, "args": argv[2:], "program": argv[0], "exe": argv[0], "venv": None, "cwd": cwd,
            "environ": environ, "environ_readable": True, "gpus": [], "devices": [], "model": "/models/m",
            "served_model_name": served, "listen": ["0.0.0.0:8000"], "ports": [8000], "unit": "session-1.scope",
            "parent": {"pid": 1, "name": "bash"}}


def _under_tmp(path):
    path = os.path.normpath(path)
    return any(path == root or path.startswith(root + "/") for root in ("/tmp", "/var/tmp"))


def check_takeover_unit(server, text):
    """The unit parsed back as systemd reads it holds exactly the directives meant, each with its value."""
    environ = {key: value for key, value in server["environ"].items() if key not in vp.SESSION_ENV}
    plain_env = {key: value for key, value in environ.items() if not vp.is_secret_env(key)}
    argv = list(server["argv"][:-2])  # --api-key K goes to the EnvironmentFile
    uses_tmp = any(_under_tmp(part) for value in [server["cwd"]] + argv + list(environ.values())
                   for part in value.split(":") if part.startswith("/"))
    writable = sorted(set([server["cwd"]] + [environ[key] for key in ("HOME", "HF_HOME") if key in environ]))
    hardening = [key for key, _value in _serve_hardening("cpu") if key != "ReadWritePaths"]
    hardening[2:2] = ["ReadWritePaths"] * len(writable)
    if uses_tmp:
        hardening.remove("PrivateTmp")
    meant = ([("Unit", key) for key in ("Description", "After", "Wants")]
             + [("Service", key) for key in ["Type", "User", "Group", "WorkingDirectory"] + ["Environment"] * len(plain_env)
                + ["EnvironmentFile", "ExecStart", "KillMode", "Restart", "RestartSec"] + hardening]
             + [("Install", "WantedBy")])
    directives = parse_unit(text)
    assert [(section, key) for section, key, _value in directives] == meant
    values = {}
    for _section, key, value in directives:
        values.setdefault(key, []).append(value)
    assert _plain(values["Description"][0]) == "vLLM serving %s (taken over from pid 4242)" % (server["served_model_name"] or "hand")
    assert values["User"] == values["Group"] == ["llmops-serve"]
    assert _plain(values["WorkingDirectory"][0]) == server["cwd"]
    assert split_exec(values["ExecStart"][0]) == argv
    assert [word for value in values.get("Environment", []) for word in split_assignments(value)] == \
        ["%s=%s" % item for item in sorted(plain_env.items())]
    assert sorted(word for value in values["ReadWritePaths"] for word in split_assignments(value)) == \
        sorted("-" + path for path in writable)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(server=processes())
def test_issue38_property_a_taken_over_unit_holds_exactly_its_directives(server):
    result = vp.takeover(server, "hand", "/etc/systemd/system", "/etc/llmops-vllm/takeover")
    check_takeover_unit(server, result["unit_text"])
    secrets = {"VLLM_API_KEY": server["argv"][-1]}
    secrets.update((key, value) for key, value in server["environ"].items() if vp.is_secret_env(key))
    assert read_environment_file(result["env_text"]) == secrets


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(server=processes(), field=st.sampled_from(["served", "word", "cwd", "env_name", "env_value", "secret"]),
       control=st.sampled_from(CONTROLS), before=PLAIN, after=PLAIN)
def test_issue38_property_a_control_character_anywhere_is_refused(server, field, control, before, after):
    evil = before + control + after
    server = dict(server, argv=list(server["argv"]), environ=dict(server["environ"]))
    if field == "served":
        server["argv"][4] = server["served_model_name"] = evil
    elif field == "word":
        server["argv"].extend(["--x", evil])
    elif field == "cwd":
        server["cwd"] = "/srv/" + evil.replace("/", "_")
    elif field == "env_name":
        server["environ"]["A" + evil] = "1"
    elif field == "env_value":
        server["environ"]["VLLM_X"] = evil
    else:
        server["environ"]["HF_TOKEN"] = "sekrit" + evil
    with pytest.raises(vp.ProcessError) as err:
        vp.takeover(server, "hand", "/etc/systemd/system", "/etc/llmops-vllm/takeover")
    assert str(err.value).startswith("process 4242: ") and "control character" in str(err.value)
    if field == "secret":
        assert "HF_TOKEN" in str(err.value) and "sekrit" not in str(err.value)


@needs_systemd_analyze
def test_issue38_property_systemd_reads_taken_over_units(tmp_path):
    """`systemd-analyze verify` (systemd's own parser) reads a sample of units for hostile processes without a
    warning, and `systemd-analyze security` rates each 2.5 or less; one call each for the whole sample."""
    units = []

    @settings(max_examples=15, deadline=None, database=None)
    @given(server=processes())
    def collect(server):
        text = vp.takeover(server, "hand", str(tmp_path), "/etc/llmops-vllm/takeover")["unit_text"]
        check_takeover_unit(server, text)
        path = tmp_path / ("vllm-hand%d.service" % len(units))
        path.write_text(text)
        units.append(path)

    collect()
    assert len(units) >= 10
    done = subprocess.run([SYSTEMD_ANALYZE, "verify", "--man=no"] + [str(p) for p in units],
                          capture_output=True, text=True, check=False, timeout=60)
    noise = [line for line in done.stderr.splitlines() if "vllm-hand" in line]
    assert noise == [], done.stderr
    assert max(_exposure(units)) <= 2.5


@pytest.mark.ansible
def test_issue38_modules_refuse_before_writing_or_stopping(fake_server, tmp_path):
    """Through the module as a rollout runs it: the injecting server is refused with its pid and the field, and no unit
    or EnvironmentFile is written; state=stopped handed a `sleep` refuses and the sleep runs on."""
    process, _port = fake_server("--lone", "--served-model-name", INJECTION)
    server = _server_of(process)
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        unit_dir, env_dir = tmp_path / "units", tmp_path / "takeover"
        unit_dir.mkdir()
        take = {"llmops.vllm.vllm_takeover": {"pid": process.pid, "start_time": server["start_time"], "name": "hand",
                                              "unit_dir": str(unit_dir), "env_dir": str(env_dir)}, "ignore_errors": True}
        stop = {"llmops.vllm.vllm_takeover": {"pid": sleeper.pid, "start_time": vp.Proc(sleeper.pid).start_time,
                                              "state": "stopped", "stop_timeout": 1}, "ignore_errors": True}
        (taken, stopped), _out = run_tasks(tmp_path, [take, stop])
        assert taken["failed"] and "process %d: its command line word" % process.pid in taken["msg"]
        assert list(unit_dir.iterdir()) == [] and not env_dir.exists()
        assert stopped["failed"] and "is not a vLLM API server" in stopped["msg"] and "Nothing was stopped" in stopped["msg"]
        assert sleeper.poll() is None and process.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()
