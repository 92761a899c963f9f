# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llmops.vllm.gpu_topology_info through real ansible-playbook on localhost."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.ansible

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
RTXPRO_TOPO = FIXTURES / "topology" / "8x-rtxpro6000-bw-server-pcie-2numa-asus-esc8000a-e13p.txt"
RTXPRO_Q = FIXTURES / "gpuinfo" / "nvidia-smi-q__8x-rtxpro6000-asus-esc8000a-e13p.txt"
RTXPRO_NUMACTL = FIXTURES / "gpuinfo" / "numactl-H__8x-rtxpro6000-asus-esc8000a-e13p.txt"


def run_module(tmp_path, module_args, check=False):
    """Run the module in a one-task play; return (its registered result, ansible-playbook's rc).

    The result is written by a copy task that runs even in check mode (check_mode: false).
    """
    out = tmp_path / "result.json"
    playbook = tmp_path / "play.yml"
    playbook.write_text(
        json.dumps(
            [
                {
                    "hosts": "localhost",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "name": "Probe",
                            "llmops.vllm.gpu_topology_info": module_args,
                            "register": "topology",
                            "ignore_errors": True,
                        },
                        {
                            "name": "Write the result",
                            "ansible.builtin.copy": {
                                "content": "{{ topology | to_nice_json }}",
                                "dest": str(out),
                            },
                            "check_mode": False,
                        },
                    ],
                }
            ]
        )
    )
    argv = [
        str(ANSIBLE_PLAYBOOK),
        "-i",
        "localhost,",
        "-c",
        "local",
        # The interpreter of this test run: it has what the module needs, discovery may not.
        "-e",
        "ansible_python_interpreter=%s" % sys.executable,
        str(playbook),
    ]
    if check:
        argv.append("--check")
    env = {
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "PATH": "%s:/usr/bin:/bin" % Path(sys.executable).parent,
        "HOME": str(tmp_path),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"),
        "LANG": "C.UTF-8",
    }
    completed = subprocess.run(argv, cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=300, check=False)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return json.loads(out.read_text())


@pytest.mark.parametrize("check", [False, True], ids=["run", "check_mode"])
def test_captured_rtxpro6000(tmp_path, check):
    result = run_module(
        tmp_path,
        {
            "topo_text": "{{ lookup('ansible.builtin.file', '%s') }}" % RTXPRO_TOPO,
            "query_text": "{{ lookup('ansible.builtin.file', '%s') }}" % RTXPRO_Q,
            "numactl_text": "{{ lookup('ansible.builtin.file', '%s') }}" % RTXPRO_NUMACTL,
        },
        check=check,
    )
    assert result.get("failed") is not True, result
    assert result["changed"] is False
    assert result["gpu_count"] == 8
    assert [gpu["numa_node"] for gpu in result["gpus"]] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert {gpu["numa_source"] for gpu in result["gpus"]} == {"topo"}
    assert result["links"][0] == ["X", "PIX", "NODE", "NODE", "SYS", "SYS", "SYS", "SYS"]
    assert result["links"][6][7] == "PIX"
    assert result["interconnect"] == "pcie"
    assert result["numa_nodes"]["0"]["gpus"] == [0, 1, 2, 3]
    assert result["numa_nodes"]["1"]["cpus"] == "64-127,192-238,240-255"
    assert {gpu["memory_bytes"] for gpu in result["gpus"]} == {97887 << 20}
    assert {gpu["compute_capability"] for gpu in result["gpus"]} == {"12.0"}
    assert result["sources"] == ["topo", "nvidia-smi-q", "numactl"]
    assert result["host"] == {"memory_bytes": None, "cpu_count": None}
    # The affinity/numactl difference on node 1 is a topology warning, also shown by Ansible.
    assert len(result["topology_warnings"]) == 1
    assert any("64-127,192-238" in str(warning) for warning in result.get("warnings", []))


def test_captured_h200_topo_only(tmp_path):
    result = run_module(
        tmp_path,
        {
            "topo_text": "{{ lookup('ansible.builtin.file', '%s') }}"
            % (FIXTURES / "topology" / "2x-h200-sxm-nv18-1numa-vm.txt"),
        },
    )
    assert result["changed"] is False
    assert result["gpu_count"] == 2
    assert result["links"] == [["X", "NV18"], ["NV18", "X"]]
    assert result["interconnect"] == "nvlink"
    assert result["numa_nodes"] == {
        "0": {"gpus": [0, 1], "cpus": "0-31", "cpuless": None, "memory_bytes": None}
    }


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this host has nvidia-smi")
@pytest.mark.parametrize("check", [False, True], ids=["run", "check_mode"])
def test_live_probe_on_cpu_only_host(tmp_path, check):
    result = run_module(tmp_path, {}, check=check)
    assert result.get("failed") is not True, result
    assert result["changed"] is False
    assert result["gpu_count"] == 0
    assert result["gpus"] == [] and result["links"] == []
    assert result["interconnect"] == "none"
    assert result["host"]["memory_bytes"] > 0
    assert result["host"]["cpu_count"] >= 1
    assert "sysfs" in result["sources"]


def test_bad_captured_input_fails_readably(tmp_path):
    result = run_module(tmp_path, {"topo_text": "this is not nvidia-smi output"})
    assert result["failed"] is True
    assert result["msg"].startswith(
        "topo file: no GPU header row found; expected `nvidia-smi topo -m` output"
    )
    assert "Traceback" not in json.dumps(result)


def test_use_nvml_always_with_captured_input_fails(tmp_path):
    result = run_module(tmp_path, {"use_nvml": "always", "topo_text": "x"})
    assert result["failed"] is True
    assert "cannot be combined with captured inputs (topo_text)" in result["msg"]
