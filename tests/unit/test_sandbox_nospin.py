# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""sandbox/vllm_nospin.py, the sitecustomize hook of the sandbox hosts (sandbox/hosts.py install_vllm_nospin): in a
fresh Python with a stand-in of vLLM's shm_broadcast module laid out as vLLM's is, the module's SpinCondition readers
get busy_loop_s 0, nothing else changes, and nothing of vLLM is imported before something imports it. The hosts
themselves: tests/integration/test_sandbox_hosts.py."""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

SANDBOX = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "sandbox")
HOOK = os.path.join(SANDBOX, "vllm_nospin.py")

SHM_BROADCAST = '''
class SpinCondition:
    def __init__(self, is_reader, context, notify_address, busy_loop_s: float = 1):
        self.busy_loop_s = busy_loop_s


class MessageQueue:
    def __init__(self, n_reader, n_local_reader, max_chunk_bytes=10, max_chunks=10):
        self.max_chunks = max_chunks
'''

PROBE = '''
import json, sys
exec(compile(open(sys.argv[1]).read(), "sitecustomize.py", "exec"))
before = sorted(m for m in sys.modules if m.split(".")[0] == "vllm")
exec(compile(open(sys.argv[1]).read(), "sitecustomize.py", "exec"))  # twice, as a re-run would: one finder
from vllm.distributed.device_communicators import shm_broadcast as m
print(json.dumps({"before": before,
                  "finders": sum(type(f).__name__ == "_LlmopsVllmNoSpin" for f in sys.meta_path),
                  "reader": m.SpinCondition(True, None, "ipc://x").busy_loop_s,
                  "explicit": m.SpinCondition(True, None, "ipc://x", busy_loop_s=2).busy_loop_s,
                  "other": m.MessageQueue(1, 1).max_chunks}))
'''


def load_hosts():
    spec = importlib.util.spec_from_file_location("sandbox_hosts_unit", os.path.join(SANDBOX, "hosts.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_vllm(root, source):
    package = os.path.join(str(root), "vllm", "distributed", "device_communicators")
    os.makedirs(package)
    for directory in (os.path.join(str(root), "vllm"), os.path.join(str(root), "vllm", "distributed"), package):
        open(os.path.join(directory, "__init__.py"), "w").close()
    with open(os.path.join(package, "shm_broadcast.py"), "w") as handle:
        handle.write(source)


def probe(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    proc = subprocess.run([sys.executable, "-S", str(script), HOOK], cwd=str(tmp_path), capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=str(tmp_path)), check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_readers_do_not_spin_and_nothing_else_changes(tmp_path):
    fake_vllm(tmp_path, SHM_BROADCAST)
    assert probe(tmp_path) == {"before": [], "finders": 1, "reader": 0, "explicit": 2, "other": 10}


def test_a_vllm_whose_default_differs_is_left_as_it_is(tmp_path):
    fake_vllm(tmp_path, SHM_BROADCAST.replace("busy_loop_s: float = 1", "busy_loop_s: float = 0.5"))
    assert probe(tmp_path)["reader"] == 0.5


def test_install_appends_the_hook_once_to_each_sitecustomize(tmp_path):
    hosts = load_hosts()
    debian = "# install the apport exception handler if available\ntry:\n    import apport_python_hook\nexcept ImportError:\n    pass\n"
    site = tmp_path / "etc" / "python3.11" / "sitecustomize.py"
    site.parent.mkdir(parents=True)
    site.write_text(debian)
    assert hosts.install_vllm_nospin(tmp_path) == [site]
    assert hosts.install_vllm_nospin(tmp_path) == []
    text = site.read_text()
    assert text.startswith(debian) and text.count("class _LlmopsVllmNoSpin") == 1
    compile(text, str(site), "exec")
    assert textwrap.dedent(open(HOOK).read()) in text
