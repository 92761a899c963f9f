"""GPU health (module_utils/gpu_health.py) on real `nvidia-smi -q` captures (tests/fixtures/gpu_health/SOURCES.md).

Each check is tested on a capture that shows its condition and on one that does not; the captures
whose name has `.edited.` differ from a real one in the lines SOURCES.md names.
"""
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils import gpu_health
from ansible_collections.llmops.vllm.plugins.module_utils.gpu_health import (
    CHECKS,
    GpuHealthError,
    add_process_origins,
    check_waivers,
    health_problems,
    nvml_health,
    preflight_health,
)
from ansible_collections.llmops.vllm.plugins.module_utils.topology import build_topology, probe
from ansible_collections.llmops.vllm.plugins.module_utils.vllm_process import parse_cgroup
from replay_data import FIXTURES, read

ROOT = os.path.dirname(os.path.dirname(FIXTURES))
HEALTH = os.path.join(FIXTURES, "gpu_health")
H200_Q = os.path.join(FIXTURES, "gpu", "2x-h200-2026-11-30", "raw", "nvidia-smi-q.txt")
LENT = "h200-lent-2026-12-01"


def capture(name):
    return read(H200_Q if name == "h200" else os.path.join(HEALTH, name))


def gpus(name):
    return build_topology(query_text=capture(name))["gpus"]


def checks(gpu, **context):
    return [problem["check"] for problem in health_problems(gpu, **context)]


# (capture, GPU index, check): the condition as the capture shows it.
PRESENT = [
    ("2x-h200-580.ecc-uncorrected.edited.txt", 1, "ecc_uncorrected"),
    ("titanv-560.double-bit-ecc.edited.txt", 0, "ecc_uncorrected"),
    ("titanv-560.retired-pages-pending.edited.txt", 0, "retired_pages_pending"),
    ("a10-535-row-remap-pending.txt", 0, "row_remap_pending"),
    ("4x-a100-sxm-555.txt", 1, "row_remap_pending"),
    ("2x-h200-580.row-remap-failure.edited.txt", 0, "row_remap_failure"),
    ("4x-a100-sxm-555.mig-enabled.edited.txt", 0, "mig_mode"),
    ("l4-550-x8-of-x16.txt", 0, "link_width"),
    ("2x-rtx4060ti-550-x4-of-x8-persistence-off.txt", 0, "link_width"),
    ("8x-h100-535-process-sw-thermal.txt", 2, "foreign_process"),
    ("titanv-560-persistence-off.txt", 0, "persistence_mode"),
    ("2x-rtx4060ti-550-x4-of-x8-persistence-off.txt", 1, "persistence_mode"),
    ("8x-h100-535-hw-slowdown.txt", 0, "clocks_throttle"),
    ("8x-h100-535-process-sw-thermal.txt", 2, "clocks_throttle"),
]
# (capture, GPU index, check): the same checks where the capture shows the condition absent.
ABSENT = [
    ("h200", 1, "ecc_uncorrected"),
    ("titanv-560-persistence-off.txt", 0, "ecc_uncorrected"),
    ("titanv-560-persistence-off.txt", 0, "retired_pages_pending"),
    ("a10-535-row-remap-pending.txt", 0, "row_remap_failure"),
    ("4x-a100-sxm-555.txt", 0, "row_remap_pending"),
    ("h200", 0, "row_remap_failure"),
    ("4x-a100-sxm-555.txt", 0, "mig_mode"),
    ("h200", 0, "link_width"),
    ("8x-h100-535-process-sw-thermal.txt", 0, "foreign_process"),
    ("titanv-560-persistence-off.txt", 0, "foreign_process"),
    ("h200", 0, "persistence_mode"),
    ("h200", 0, "clocks_throttle"),
    ("8x-h100-535-process-sw-thermal.txt", 0, "clocks_throttle"),
]


def test_every_check_is_tested_present_and_absent():
    assert {check for _name, _index, check in PRESENT} == set(CHECKS)
    assert {check for _name, _index, check in ABSENT} == set(CHECKS)


@pytest.mark.parametrize("name, index, check", PRESENT)
def test_check_finds_the_condition_the_capture_shows(name, index, check):
    gpu = gpus(name)[index]
    found = [problem for problem in gpu["health"]["problems"] if problem["check"] == check]
    assert len(found) == 1, gpu["health"]
    problem = found[0]
    assert problem["severity"] == ("refuse" if check in gpu_health.REFUSE else "warn")
    assert problem["waived"] is False
    # The message names the GPU, the check and how to waive it.
    assert problem["message"].startswith("GPU %d: %s - " % (index, check))
    assert problem["message"].endswith("waive with preflight_gpu_health_waive: [%s]" % check)


@pytest.mark.parametrize("name, index, check", ABSENT)
def test_check_is_quiet_where_the_capture_shows_no_condition(name, index, check):
    assert check not in checks(gpus(name)[index])


def test_a_healthy_h200_has_no_problem_and_every_field_read():
    for gpu in gpus("h200"):
        health = gpu["health"]
        assert health["problems"] == []
        assert health["persistence_mode"] is True and health["mig_mode"] is False and health["ecc_mode"] is True
        assert (health["ecc_uncorrected_volatile"], health["ecc_uncorrected_aggregate"]) == (0, 0)
        assert (health["remapped_rows_pending"], health["remapped_rows_failure"]) == (False, False)
        assert health["retired_pages_pending"] is None  # Hopper remaps rows, it retires no pages: N/A
        assert health["throttle_reasons"] == ["idle"] and health["processes"] == []


def test_measured_values_are_in_the_messages():
    [ecc] = health_problems(gpus("2x-h200-580.ecc-uncorrected.edited.txt")[1])
    assert "2 uncorrected ECC error(s)" in ecc["message"] and "aggregate 0" in ecc["message"]
    width = [p for p in health_problems(gpus("l4-550-x8-of-x16.txt")[0]) if p["check"] == "link_width"][0]
    assert "x8 is below its maximum x16 (generation 1 of 4)" in width["message"]
    process = [p for p in health_problems(gpus("8x-h100-535-process-sw-thermal.txt")[2]) if p["check"] == "foreign_process"][0]
    assert "pid 1002127 /usr/bin/python 9212 MiB" in process["message"]
    throttle = [p for p in health_problems(gpus("8x-h100-535-hw-slowdown.txt")[0]) if p["check"] == "clocks_throttle"][0]
    assert "hw_power_brake_slowdown, hw_slowdown" in throttle["message"]


# --- both spellings of each block -----------------------------------------------------------


def test_clocks_throttle_reasons_and_clocks_event_reasons_both_read():
    old = capture("8x-h100-535-hw-slowdown.throttle-spelling.edited.txt")
    assert "    Clocks Throttle Reasons\n" in old and "Clocks Event Reasons" not in old
    assert "    Clocks Event Reasons\n" in capture("8x-h100-535-hw-slowdown.txt")
    for name in ("8x-h100-535-hw-slowdown.txt", "8x-h100-535-hw-slowdown.throttle-spelling.edited.txt"):
        assert [gpu["health"]["throttle_reasons"] for gpu in gpus(name)] == [["hw_power_brake_slowdown", "hw_slowdown"]] * 8
        assert all("clocks_throttle" in checks(gpu) for gpu in gpus(name))
    assert gpus("h200")[0]["health"]["throttle_reasons"] == ["idle"]


def test_ecc_in_sram_dram_lines_and_in_double_bit_blocks():
    assert "DRAM Uncorrectable" in capture("h200") and "Double Bit\n" not in capture("h200")
    assert "            Double Bit\n" in capture("titanv-560-persistence-off.txt")
    assert gpus("2x-h200-580.ecc-uncorrected.edited.txt")[1]["health"]["ecc_uncorrected_volatile"] == 2
    titan = gpus("titanv-560.double-bit-ecc.edited.txt")[0]["health"]
    assert (titan["ecc_uncorrected_volatile"], titan["ecc_uncorrected_aggregate"]) == (1, None)
    # GeForce: every ECC value N/A -> unknown, not zero, and not refused.
    assert gpus("titanv-560-persistence-off.txt")[0]["health"]["ecc_uncorrected_volatile"] is None


def test_retired_pages_and_remapped_rows_both_read():
    titan = gpus("titanv-560.retired-pages-pending.edited.txt")[0]["health"]
    assert titan["retired_pages_pending"] is True and titan["remapped_rows_pending"] is None  # "Remapped Rows : N/A"
    a10 = gpus("a10-535-row-remap-pending.txt")[0]["health"]
    assert (a10["remapped_rows_uncorrectable"], a10["remapped_rows_pending"], a10["remapped_rows_failure"]) == (4, True, False)
    assert a10["retired_pages_pending"] is None


def test_idle_generation_drop_is_not_a_link_problem():
    """An idle GPU trains its link down to a lower generation (power saving); only the width counts."""
    dropped = [(name, gpu) for name in sorted(os.listdir(HEALTH)) if name.endswith(".txt") and not name.endswith("-env.txt")
               for gpu in gpus(name)
               if gpu["pcie"]["gen_current"] is not None and gpu["pcie"]["gen_current"] < gpu["pcie"]["gen_max"]
               and gpu["pcie"]["width_current"] == gpu["pcie"]["width_max"]]
    assert dropped, "no capture with a generation drop at full width"
    for name, gpu in dropped:
        assert "link_width" not in checks(gpu), name


# --- processes: whose they are ----------------------------------------------------------------


def test_graphics_processes_are_read_but_not_foreign():
    health = gpus("titanv-560-persistence-off.txt")[0]["health"]
    assert [(p["pid"], p["type"], p["used_memory_mib"]) for p in health["processes"]] == \
        [(100607, "G", 142), (100838, "G", 33), (101815, "G", 111)]
    assert "foreign_process" not in checks(gpus("titanv-560-persistence-off.txt")[0])


def test_processes_of_the_unit_being_retired_or_the_takeover_are_allowed():
    gpu = gpus("8x-h100-535-process-sw-thermal.txt")[2]
    [process] = gpu["health"]["processes"]
    assert "foreign_process" in checks(gpu, allowed_units=["vllm-llama.service"])
    process["unit"] = "vllm-llama.service"
    assert "foreign_process" not in checks(gpu, allowed_units=["vllm-llama.service"])
    assert "foreign_process" in checks(gpu, allowed_units=["vllm-other.service"])
    process["unit"] = "session-3.scope"
    assert "foreign_process" not in checks(gpu, allowed_pids=[1002127])
    # A worker of the server taken over: its parent is the takeover's pid.
    process["ancestors"] = [1002000, 4200, 1]
    assert "foreign_process" not in checks(gpu, allowed_pids=[1002000])
    assert "foreign_process" in checks(gpu, allowed_pids=[999])


def test_process_origins_read_from_proc(tmp_path):
    proc = tmp_path / "proc"
    for pid, ppid, cgroup in ((1002127, 1002000, "0::/system.slice/vllm-llama.service\n"),
                              (1002000, 1, "0::/system.slice/vllm-llama.service\n")):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cgroup").write_text(cgroup)
        (proc / str(pid) / "stat").write_text("%d (python3) S %d %d 0 -1 4194560\n" % (pid, ppid, ppid))
    health = {"processes": [{"pid": 1002127}, {"pid": 4242}]}
    add_process_origins(health, parse_cgroup, str(proc))
    assert health["processes"][0] == {"pid": 1002127, "unit": "vllm-llama.service", "ancestors": [1002000, 1]}
    assert health["processes"][1] == {"pid": 4242, "unit": None, "ancestors": []}  # gone meanwhile


def test_process_origins_of_this_process_on_the_real_proc():
    health = {"processes": [{"pid": os.getpid()}]}
    add_process_origins(health, parse_cgroup)
    assert health["processes"][0]["ancestors"][0] == os.getppid()


# --- waivers ------------------------------------------------------------------------------------


def test_waived_checks_stay_listed_as_waived():
    gpu = gpus("2x-rtx4060ti-550-x4-of-x8-persistence-off.txt")[0]
    problems = health_problems(gpu, waive=["link_width"], variable="rollout_gpu_health_waive")
    assert [(p["check"], p["waived"]) for p in problems] == [("link_width", True), ("persistence_mode", False)]
    assert problems[0]["message"].endswith("waive with rollout_gpu_health_waive: [link_width]")


@pytest.mark.parametrize("waive, error", [
    ("link_width", "is not a list"),
    (["link_width", "pcie_gen"], "unknown check name(s) 'pcie_gen'"),
    ({"link_width": True}, "is not a list"),
])
def test_bad_waivers_are_refused_naming_the_variable(waive, error):
    with pytest.raises(GpuHealthError) as caught:
        check_waivers(waive, "rollout_gpu_health_waive")
    assert str(caught.value).startswith("rollout_gpu_health_waive: ") and error in str(caught.value)
    assert "link_width" in str(caught.value)  # lists the known names


def test_waivers_accept_known_names():
    assert check_waivers(None) == [] and check_waivers(list(CHECKS)) == list(CHECKS)


# --- NVML, the lent H200, a host without GPUs ---------------------------------------------------


class FakeProcess:
    def __init__(self, pid, used):
        self.pid, self.usedGpuMemory = pid, used


class FakeNvml:
    """NVML's answers in the shapes pynvml returns them; unsupported calls raise as pynvml does."""
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC = 1, 0, 1

    def nvmlDeviceGetPersistenceMode(self, handle):
        return 0

    def nvmlDeviceGetMigMode(self, handle):
        return [1, 1]

    def nvmlDeviceGetEccMode(self, handle):
        return [1, 1]

    def nvmlDeviceGetTotalEccErrors(self, handle, kind, counter):
        return {0: 3, 1: 7}[counter]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle):
        raise RuntimeError("Not Supported")

    def nvmlDeviceGetRemappedRows(self, handle):
        return (0, 2, 1, 0)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return 0x1 | 0x8 | 0x40

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return [FakeProcess(4242, 70112 << 20)]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle):
        return []


def test_nvml_health_maps_the_answers():
    nvml = FakeNvml()

    def call(label, name, *args, **options):
        try:
            return getattr(nvml, name)(*args)
        except RuntimeError:
            return None

    health = nvml_health(call, nvml, "handle", "GPU 0")
    assert health["persistence_mode"] is False and (health["mig_mode"], health["mig_mode_pending"]) == (True, True)
    assert (health["ecc_uncorrected_volatile"], health["ecc_uncorrected_aggregate"]) == (3, 7)
    assert health["retired_pages_pending"] is None
    assert (health["remapped_rows_uncorrectable"], health["remapped_rows_pending"], health["remapped_rows_failure"]) == (2, True, False)
    assert health["throttle_reasons"] == ["hw_slowdown", "hw_thermal_slowdown", "idle"]
    assert health["processes"] == [{"pid": 4242, "type": "C", "name": None, "used_memory_mib": 70112,
                                    "unit": None, "ancestors": None}]


def test_lent_h200_health_as_the_module_read_it_there():
    """gpu_topology_info on the lent H200 (tests/gpu/run.sh, 2026-12-01): both module paths read every
    field, and replaying the raw `nvidia-smi -q` captured in the same run gives the same health."""
    raw = read(os.path.join(HEALTH, LENT + "-nvidia-smi-q.txt"))
    assert "Persistence Mode                                   : Enabled" in raw
    replayed = build_topology(query_text=raw)["gpus"]
    for path in ("smi", "nvml"):
        live = json.loads(read(os.path.join(HEALTH, "%s-%s.json" % (LENT, path))))
        assert live["changed"] is False and live["gpu_count"] == len(replayed) == 1
        assert [gpu["health"] for gpu in live["gpus"]] == [gpu["health"] for gpu in replayed], path
        health = live["gpus"][0]["health"]
        assert (health["persistence_mode"], health["mig_mode"], health["ecc_mode"]) == (True, False, True)
        assert (health["ecc_uncorrected_volatile"], health["remapped_rows_pending"], health["remapped_rows_failure"]) == (0, False, False)
        assert health["throttle_reasons"] == ["idle"] and health["processes"] == [] and health["problems"] == []
        assert live["gpus"][0]["pcie"] == {"gen_current": 5, "gen_max": 5, "width_current": 16, "width_max": 16, "degraded": False}
    assert "nvml" in json.loads(read(os.path.join(HEALTH, LENT + "-nvml.json")))["sources"]


def test_host_without_gpus_has_no_health_to_check(tmp_path):
    """The sandbox hosts: no nvidia-smi, no NVML - no GPUs, no command run, nothing to refuse."""
    def run(argv):
        raise AssertionError("no command may run on a host without nvidia-smi: %r" % (argv,))

    result = probe(run, use_nvml="never", sysfs_root=str(tmp_path), nvidia_smi_path="", numactl_path="")
    assert result["gpus"] == [] and result["gpu_count"] == 0


# --- the preflight: plan's GPUs, the unit being retired, waivers -------------------------------

def test_preflight_checks_only_the_planned_gpus():
    topology = build_topology(query_text=capture("8x-h100-535-process-sw-thermal.txt"))
    assert preflight_health(topology, [0, 1]) == {"refuse": [], "warn": [], "waived": [], "checked": [0, 1]}
    verdict = preflight_health(topology, [2, 3])
    assert verdict["checked"] == [2, 3] and len(verdict["refuse"]) == 1 and len(verdict["warn"]) == 1
    assert verdict["refuse"][0].startswith("GPU 2: foreign_process - GPU memory is held by pid 1002127")


def test_preflight_allows_the_unit_being_retired_and_the_takeover():
    topology = build_topology(query_text=capture("8x-h100-535-process-sw-thermal.txt"))
    topology["gpus"][2]["health"]["processes"][0].update(unit="vllm-llama.service", ancestors=[1002000, 1])
    assert preflight_health(topology, [2], current_unit="vllm-llama.service")["refuse"] == []
    assert preflight_health(topology, [2], allowed_pids=["1002000"])["refuse"] == []
    assert len(preflight_health(topology, [2], current_unit="vllm-qwen.service")["refuse"]) == 1


def test_preflight_waivers_move_problems_to_waived():
    topology = build_topology(query_text=capture("l4-550-x8-of-x16.txt"))
    verdict = preflight_health(topology, [0], waive=["link_width"], variable="rollout_gpu_health_waive")
    assert verdict["refuse"] == [] and len(verdict["waived"]) == 1
    assert "x8 is below its maximum x16" in verdict["waived"][0]


def test_preflight_on_a_host_without_gpus_is_a_no_op():
    empty = {"gpus": [], "gpu_count": 0}
    assert preflight_health(empty, []) == {"refuse": [], "warn": [], "waived": [], "checked": []}
    assert preflight_health(None, []) == {"refuse": [], "warn": [], "waived": [], "checked": []}


@pytest.mark.parametrize("args, error", [
    (({"gpus": []}, [0]), "gpu_indices: GPUs [0] are planned but gpu_topology_info lists only []"),
    (({"gpus": []}, "0,1"), "gpu_indices: '0,1' is not a list"),
    (("facts", [0]), "topology: expected gpu_topology_info's result"),
    (({"gpus": [{"index": 0}]}, [0], None, ["me"]), "allowed_pids: ['me'] is not a list of process ids"),
])
def test_preflight_bad_input_says_what_to_pass(args, error):
    with pytest.raises(GpuHealthError) as caught:
        preflight_health(*args)
    assert str(caught.value).startswith(error)


PLAY_VARS = {"preflight_model": {"repo_id": "meta-llama/Llama-3.1-8B-Instruct"}, "preflight_current": {},
             "preflight_takeover": {}, "preflight_gpu_health_waive": [], "preflight_foreign_vllm": "refuse",
             "preflight_processes": {"conflicts": []}}


def run_health_tasks(tmp_path, topology, plan, **extra):
    """roles/preflight/tasks/health.yml in a play on localhost; returns (rc, output)."""
    play = [{"hosts": "localhost", "gather_facts": False,
             "vars": dict(PLAY_VARS, preflight_topology=topology, preflight_plan=plan, **extra),
             "tasks": [{"ansible.builtin.import_tasks": os.path.join(ROOT, "roles", "preflight", "tasks", "health.yml")}]}]
    (tmp_path / "play.yml").write_text(json.dumps(play))
    env = {"ANSIBLE_CONFIG": os.path.join(ROOT, "ansible.cfg"), "PATH": "%s:/usr/bin:/bin" % os.path.dirname(sys.executable),
           "HOME": str(tmp_path), "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"), "ANSIBLE_NOCOLOR": "1", "LANG": "C.UTF-8"}
    done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           "-e", "ansible_python_interpreter=%s" % sys.executable, str(tmp_path / "play.yml")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    # one line per message: the YAML callback wraps long strings at a width that differs between ansible-core releases
    return done.returncode, " ".join((done.stdout + done.stderr).split())


@pytest.mark.ansible
def test_role_tasks_refuse_warn_waive_and_skip(tmp_path):
    """The preflight's health tasks: a refusal names the GPU, check, values and waiver; a waiver lets it
    pass with a 'waived:' line; a CPU-only plan (no GPUs) skips all three tasks."""
    l4 = build_topology(query_text=capture("l4-550-x8-of-x16.txt"))
    rc, out = run_health_tasks(tmp_path, l4, {"gpu_indices": [0]})
    assert rc == 2, out
    assert "nothing was touched" in out and "GPU 0: link_width - PCIe link width x8 is below its maximum x16" in out
    assert "waive with preflight_gpu_health_waive (rollout_gpu_health_waive in a rollout): [link_width]" in out
    rc, out = run_health_tasks(tmp_path, l4, {"gpu_indices": [0]}, preflight_gpu_health_waive=["link_width"])
    assert rc == 0 and "waived: GPU 0: link_width" in out, out
    rc, out = run_health_tasks(tmp_path, {"gpus": [], "gpu_count": 0}, {"gpu_indices": []})
    assert rc == 0 and "skipped=3" in out, out


@pytest.mark.ansible
def test_role_tasks_allow_the_takeover_and_in_a_stage_the_foreign_vllm(tmp_path):
    h100 = build_topology(query_text=capture("8x-h100-535-process-sw-thermal.txt"))
    rc, out = run_health_tasks(tmp_path, h100, {"gpu_indices": [2]}, preflight_takeover={"pid": 1002127})
    assert rc == 0 and "warning: GPU 2: clocks_throttle" in out and "foreign_process" not in out, out
    rc, out = run_health_tasks(tmp_path, h100, {"gpu_indices": [2]}, preflight_foreign_vllm="warn",
                               preflight_processes={"conflicts": [{"pid": 1002127}]})
    assert rc == 0 and "foreign_process" not in out, out


@pytest.mark.ansible
def test_module_reads_the_unit_and_parents_of_a_process_on_a_gpu(tmp_path):
    """gpu_topology_info on this host with an nvidia-smi stand-in that prints the 8x H100 capture with a
    live process (a sleep started here) in place of pid 1002127: the module reads that process's cgroup
    unit and parents from the real /proc."""
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        with open("/proc/%d/cgroup" % sleeper.pid) as handle:
            unit = parse_cgroup(handle.read())[1]
        q = capture("8x-h100-535-process-sw-thermal.txt").replace("1002127", str(sleeper.pid))
        (tmp_path / "q.txt").write_text(q)
        (tmp_path / "topo.txt").write_text(read(os.path.join(FIXTURES, "topology", "8x-h100-sxm-nv18-2numa-8mlx5.txt")))
        smi = tmp_path / "nvidia-smi"
        smi.write_text("#!/bin/sh\ncase \"$1\" in\n  topo) cat %s ;;\n  -q) cat %s ;;\n  *) exit 2 ;;\nesac\n"
                       % (tmp_path / "topo.txt", tmp_path / "q.txt"))
        smi.chmod(0o755)
        play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
            {"llmops.vllm.gpu_topology_info": {"use_nvml": "never", "nvidia_smi_path": str(smi)}, "register": "found"},
            {"ansible.builtin.copy": {"content": "{{ found | to_json }}", "dest": str(tmp_path / "out.json")}}]}]
        (tmp_path / "play.yml").write_text(json.dumps(play))
        env = {"ANSIBLE_CONFIG": os.path.join(ROOT, "ansible.cfg"), "PATH": "%s:/usr/bin:/bin" % os.path.dirname(sys.executable),
               "HOME": str(tmp_path), "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"), "ANSIBLE_NOCOLOR": "1", "LANG": "C.UTF-8"}
        done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", "-c", "local",
                               "-e", "ansible_python_interpreter=%s" % sys.executable, str(tmp_path / "play.yml")],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        result = json.loads((tmp_path / "out.json").read_text())
    finally:
        sleeper.kill()
        sleeper.wait()
    assert "nvidia-smi-q" in result["sources"] and result["gpu_count"] == 8
    [process] = result["gpus"][2]["health"]["processes"]
    assert process["pid"] == sleeper.pid and process["unit"] == unit and process["ancestors"][0] == os.getpid()
    assert [p["check"] for p in result["gpus"][2]["health"]["problems"]] == ["foreign_process", "clocks_throttle"]
    assert all(gpu["health"]["problems"] == [] for gpu in result["gpus"] if gpu["index"] != 2)
