# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""module_utils/vllm_process.py: which command lines are vLLM servers, their options and secrets, /proc
parsing, and scan / takeover / stop on real processes of this machine (a stand-in `vllm` script that
listens on a port, since a real vLLM start belongs to the sandbox scenario)."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils import host_state
from ansible_collections.llmops.vllm.plugins.module_utils import vllm_process as vp
from ansible_collections.llmops.vllm.plugins.module_utils.systemd_unit import read_environment_file

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
# Stand-in for the vllm CLI: listens on --port, starts a worker child (as vLLM's engine core), ignores
# SIGTERM when --stubborn is given.
import os, signal, socket, subprocess, sys, time
port = int(sys.argv[sys.argv.index('--port') + 1])
if '--stubborn' in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(('127.0.0.1', port))
server.listen(4)
# the worker listens on an ephemeral port, as vLLM's engine core does for its own channels
child = subprocess.Popen([sys.executable, '-c', 'import socket, time; s = socket.socket(); s.bind(("127.0.0.1", 0)); '
                          's.listen(1); time.sleep(600)'])
signal.signal(signal.SIGTERM, signal.SIG_IGN) if '--stubborn' in sys.argv else signal.signal(
    signal.SIGTERM, lambda *_: (child.terminate(), child.wait(), sys.exit(0)))
time.sleep(1)  # the worker is listening by now
print('ready', flush=True)
time.sleep(600)
"""


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def fake_server(tmp_path):
    """Start stand-in servers from a shell-like environment; yields start(extra_args) -> (Popen, port)."""
    bindir = tmp_path / "venv" / "bin"
    bindir.mkdir(parents=True)
    # a venv as uv or python -m venv makes one: bin/python3 links to the base interpreter
    real = os.path.realpath(sys.executable)
    (tmp_path / "venv" / "pyvenv.cfg").write_text("home = %s\n" % os.path.dirname(real))
    (bindir / "python3").symlink_to(real)
    script = bindir / "vllm"
    script.write_text(FAKE_VLLM % (bindir / "python3"))
    script.chmod(0o755)
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    started = []

    def start(*extra):
        port = free_port()
        env = {"PATH": "%s:/usr/bin:/bin" % bindir, "HOME": str(tmp_path), "HF_TOKEN": HF_TOKEN, "MY_SETTING": "a b$c",
               "SHLVL": "2", "TERM": "xterm", "OLDPWD": "/"}
        process = subprocess.Popen(["vllm", "serve", "./models/tiny", "--served-model-name", "Hand_Llama", "--port", str(port),
                                    "--api-key", API_KEY, "--max-model-len", "512"] + list(extra),
                                   cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, text=True)
        assert process.stdout.readline().strip() == "ready"
        started.append(process)
        return process, port

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


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
    assert "ProtectSystem" not in unit and "NoNewPrivileges" not in unit  # hardening is opt-in
    assert "NoNewPrivileges=yes" in vp.takeover(server, "hand-llama", "/u", "/e", hardening=True)["unit_text"]
    assert read_environment_file(result["env_text"]) == {"HF_TOKEN": HF_TOKEN, "VLLM_API_KEY": API_KEY}
    assert result["secrets"] == ["HF_TOKEN", "VLLM_API_KEY"]
    entry = result["entry"]
    assert host_state.entry_problems(dict(entry, since="2026-12-01T00:00:00Z")) == []
    assert entry["path"] == str(tmp_path / "models" / "tiny")  # a relative model path, made absolute
    assert entry["plan"]["max_model_len"] == 512 and entry["plan"]["device"] == "cpu"
    assert entry["port"] == port and entry["bind"] == "127.0.0.1"
    assert entry["venv"] == str(tmp_path / "venv")
    assert entry["takeover"]["pid"] == process.pid and entry["takeover"]["start_time"] == server["start_time"]
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
