"""llmops.vllm.gpu_free without a GPU: nvidia-smi's memory and compute-process CSV (real H200 captures
in tests/fixtures, and the formats nvidia-smi prints: units in values or in the header, [N/A], the
header alone for no process), the busy/free decision, the failure message, and the wait loop driven by a
fake nvidia-smi and a fake clock."""

import os

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils import gpu_free
from ansible_collections.llmops.vllm.plugins.module_utils.gpu_free import GpuFreeError
from ansible_collections.llmops.vllm.plugins.module_utils.topology_common import TopologyError
from ansible_collections.llmops.vllm.plugins.module_utils.topology_smi_query import (
    parse_compute_apps_csv,
    parse_memory_used_csv,
)
from ansible_collections.llmops.vllm.plugins.plugin_utils import contracts
from replay_data import FIXTURES, GPUINFO, read

H200_CSV = os.path.join(GPUINFO, "query-gpu-csv__2x-h200.txt")
H200_RAW_CSV = os.path.join(FIXTURES, "gpu", "2x-h200-2026-11-30", "raw", "query-gpu.csv")
L40S_CSV = os.path.join(GPUINFO, "query-gpu-csv__8x-l40s.txt")
H200_UUIDS = ("GPU-54fe2c2a-01cc-f1bd-b4e8-d9217823f268", "GPU-d3d6edd7-a585-6692-6525-ef4f6caa54c9")

# What the module asks for, as nvidia-smi prints it (units in the values, header first).
MEMORY_IDLE = ("index, uuid, memory.used [MiB]\n"
               "0, %s, 0 MiB\n"
               "1, %s, 0 MiB\n" % H200_UUIDS)
MEMORY_LOADED = ("index, uuid, memory.used [MiB]\n"
                 "0, %s, 130588 MiB\n"
                 "1, %s, 130620 MiB\n" % H200_UUIDS)
MEMORY_DRAINING = ("index, uuid, memory.used [MiB]\n"
                   "0, %s, 0 MiB\n"
                   "1, %s, 2310 MiB\n" % H200_UUIDS)
APPS_NONE = "gpu_uuid, pid, used_gpu_memory [MiB]\n"
APPS_LOADED = ("gpu_uuid, pid, used_gpu_memory [MiB]\n"
               "%s, 48211, 130004 MiB\n"
               "%s, 48212, 130044 MiB\n" % H200_UUIDS)


# --------------------------------------------------------------------------- parsing


@pytest.mark.parametrize("path", [H200_CSV, H200_RAW_CSV], ids=os.path.basename)
def test_memory_used_of_real_h200_captures(path):
    gpus = parse_memory_used_csv(read(path))
    assert [gpu["index"] for gpu in gpus] == [0, 1]
    assert [gpu["memory_used_mib"] for gpu in gpus] == [0, 0]
    assert all(gpu["uuid"].startswith("GPU-") for gpu in gpus)


def test_memory_used_with_units_in_the_header_or_missing():
    text = ("index, uuid, memory.used [MiB]\n"  # --format=csv,nounits
            "1, GPU-b, 70112\n"
            "0, GPU-a, [N/A]\n")
    assert parse_memory_used_csv(text) == [{"index": 0, "uuid": "GPU-a", "memory_used_mib": None},
                                           {"index": 1, "uuid": "GPU-b", "memory_used_mib": 70112}]
    assert parse_memory_used_csv("index, memory.used [MiB]\n0, 12 MiB\n") == [
        {"index": 0, "uuid": None, "memory_used_mib": 12}]
    assert parse_memory_used_csv("index, gpu_uuid, memory.used [MiB]\n0, GPU-a, 1 GiB\n")[0]["memory_used_mib"] == 1024


def test_memory_used_refuses_what_is_not_its_output():
    with pytest.raises(TopologyError, match=r"^m line 2: no `memory\.used` column in the header 'index, name, "):
        parse_memory_used_csv(read(L40S_CSV), source="m")  # a real capture without memory.used
    with pytest.raises(TopologyError, match=r"^m line 2: index 'x' is not a number"):
        parse_memory_used_csv("index, memory.used [MiB]\nx, 0 MiB\n", source="m")
    with pytest.raises(TopologyError, match=r"^m: the same index appears twice"):
        parse_memory_used_csv("index, memory.used [MiB]\n0, 0 MiB\n0, 0 MiB\n", source="m")
    with pytest.raises(TopologyError, match=r"^m line 2: 1 values, the header has 2 columns"):
        parse_memory_used_csv("index, memory.used [MiB]\n0\n", source="m")
    with pytest.raises(TopologyError, match=r"^m: empty; expected `nvidia-smi --query-gpu=index,uuid,memory.used"):
        parse_memory_used_csv("", source="m")


def test_compute_apps_as_nvidia_smi_prints_them():
    assert parse_compute_apps_csv(APPS_LOADED) == [
        {"gpu_uuid": H200_UUIDS[0], "pid": 48211, "used_memory_mib": 130004},
        {"gpu_uuid": H200_UUIDS[1], "pid": 48212, "used_memory_mib": 130044}]
    # in a container the driver may not say how much a process holds
    assert parse_compute_apps_csv("gpu_uuid, pid, used_gpu_memory [MiB]\nGPU-a, 7, [N/A]\n") == [
        {"gpu_uuid": "GPU-a", "pid": 7, "used_memory_mib": None}]
    # the names given on the command line are accepted in a hand-made header too
    assert parse_compute_apps_csv("gpu_uuid, pid, used_memory [MiB]\nGPU-a, 7, 5\n")[0]["used_memory_mib"] == 5


@pytest.mark.parametrize("text", [APPS_NONE, "", "\n", "No running processes found\n"])
def test_no_compute_process(text):
    assert parse_compute_apps_csv(text) == []


def test_compute_apps_refuses_what_is_not_its_output():
    with pytest.raises(TopologyError, match=r"^c line 1: no `gpu_uuid` column in the header 'pid, used_gpu_memory"):
        parse_compute_apps_csv("pid, used_gpu_memory [MiB]\n7, 5 MiB\n", source="c")
    with pytest.raises(TopologyError, match=r"^c line 2: pid 'python' is not a number"):
        parse_compute_apps_csv("gpu_uuid, pid, used_gpu_memory [MiB]\nGPU-a, python, 5 MiB\n", source="c")


# --------------------------------------------------------------------------- the decision


def usage(memory_text, apps_text, indices=(0, 1), used_below_mib=1024):
    return gpu_free.gpu_usage(parse_memory_used_csv(memory_text), parse_compute_apps_csv(apps_text), list(indices),
                              used_below_mib)


def test_idle_gpus_are_free():
    gpus = usage(MEMORY_IDLE, APPS_NONE)
    assert [gpu["busy"] for gpu in gpus] == [False, False]
    assert gpus[0] == {"index": 0, "uuid": H200_UUIDS[0], "memory_used_mib": 0, "processes": [], "busy": False}


def test_a_process_or_memory_at_the_limit_makes_a_gpu_busy():
    gpus = usage(MEMORY_LOADED, APPS_LOADED)
    assert [gpu["busy"] for gpu in gpus] == [True, True]
    assert gpus[1]["processes"] == [{"pid": 48212, "used_memory_mib": 130044}]
    draining = usage(MEMORY_DRAINING, APPS_NONE)
    assert [gpu["busy"] for gpu in draining] == [False, True]
    assert [gpu["busy"] for gpu in usage(MEMORY_DRAINING, APPS_NONE, used_below_mib=2310)] == [False, True]
    assert [gpu["busy"] for gpu in usage(MEMORY_DRAINING, APPS_NONE, used_below_mib=2311)] == [False, False]


def test_a_process_keeps_a_gpu_busy_whatever_its_memory():
    apps = "gpu_uuid, pid, used_gpu_memory [MiB]\n%s, 9, [N/A]\n" % H200_UUIDS[0]
    gpus = usage(MEMORY_IDLE, apps)
    assert gpus[0]["busy"] and gpus[0]["processes"] == [{"pid": 9, "used_memory_mib": None}]
    assert not gpus[1]["busy"]


def test_without_a_memory_figure_the_processes_decide():
    memory = "index, uuid, memory.used [MiB]\n0, GPU-a, [N/A]\n"
    assert not usage(memory, APPS_NONE, indices=[0])[0]["busy"]
    assert usage(memory, "gpu_uuid, pid, used_gpu_memory [MiB]\nGPU-a, 3, [N/A]\n", indices=[0])[0]["busy"]


def test_only_the_asked_gpus_sorted_once():
    gpus = usage(MEMORY_LOADED, APPS_LOADED, indices=[1, 1])
    assert [gpu["index"] for gpu in gpus] == [1]


def test_an_index_the_host_lacks_is_refused():
    with pytest.raises(GpuFreeError, match=r"^gpu_indices: GPU 2, 5 not on this host \(nvidia-smi lists 0, 1\)"):
        usage(MEMORY_IDLE, APPS_NONE, indices=[0, 5, 2])


def test_the_message_names_each_busy_gpu_its_memory_and_pids():
    result = {"free": False, "gpus": usage(MEMORY_LOADED, APPS_LOADED, indices=[0, 1]), "busy_gpus": [0, 1],
              "polls": 101, "seconds": 300.0}
    assert gpu_free.busy_message(result, 1024) == (
        "GPU 0, 1 still in use after 300 s (free: no compute process and less than 1024 MiB used): "
        "GPU 0: 130588 MiB used, compute process pid 48211 (130004 MiB); "
        "GPU 1: 130620 MiB used, compute process pid 48212 (130044 MiB). "
        "Stop what holds them (nvidia-smi lists it), or raise timeout")
    draining = {"free": False, "gpus": usage(MEMORY_DRAINING, APPS_NONE), "busy_gpus": [1], "polls": 1, "seconds": 0.0}
    assert gpu_free.busy_message(draining, 1024, check_mode=True) == (
        "GPU 1 in use (check mode reads once and does not wait; free: no compute process and less than 1024 MiB "
        "used): GPU 1: 2310 MiB used, no compute process nvidia-smi can see (another container's, or memory not "
        "released yet)")


# --------------------------------------------------------------------------- the wait loop


class FakeHost:
    """nvidia-smi and the clock: each reading returns the next (memory, apps) state; sleeping advances
    the clock. The last state stays once the list is used up."""

    def __init__(self, states, command_seconds=0.0):
        self.states = list(states)
        self.now = 1000.0
        self.command_seconds = command_seconds
        self.commands = []
        self.sleeps = []

    def run_command(self, argv):
        self.commands.append(argv)
        self.now += self.command_seconds
        memory, apps = self.states[0]
        if any(arg.startswith("--query-compute-apps=") for arg in argv):
            if len(self.states) > 1:
                self.states.pop(0)
            return 0, apps, ""
        return 0, memory, ""

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds

    def wait(self, indices=(0, 1), used_below_mib=1024, timeout=300, poll_interval=3, check_mode=False):
        return gpu_free.wait_until_free(self.run_command, "/usr/bin/nvidia-smi", list(indices), used_below_mib,
                                        timeout, poll_interval, check_mode=check_mode, clock=self.clock,
                                        sleep=self.sleep)


def test_the_commands_it_runs():
    host = FakeHost([(MEMORY_IDLE, APPS_NONE)])
    host.wait()
    assert host.commands == [
        ["/usr/bin/nvidia-smi", "--query-gpu=index,uuid,memory.used", "--format=csv"],
        ["/usr/bin/nvidia-smi", "--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv"]]


def test_free_gpus_need_one_reading_and_no_sleep():
    host = FakeHost([(MEMORY_IDLE, APPS_NONE)])
    result = host.wait()
    assert result == {"free": True, "gpus": result["gpus"], "busy_gpus": [], "polls": 1, "seconds": 0.0}
    assert host.sleeps == []
    contracts.GpuFreeResult.model_validate(result)


def test_it_waits_until_the_processes_exit_and_the_memory_is_released():
    host = FakeHost([(MEMORY_LOADED, APPS_LOADED), (MEMORY_LOADED, APPS_LOADED), (MEMORY_DRAINING, APPS_NONE),
                     (MEMORY_IDLE, APPS_NONE)])
    result = host.wait()
    assert result["free"] and result["polls"] == 4 and result["busy_gpus"] == []
    assert host.sleeps == [3, 3, 3] and result["seconds"] == 9.0


def test_it_gives_up_at_the_timeout_with_a_last_reading_at_the_deadline():
    host = FakeHost([(MEMORY_DRAINING, APPS_NONE)])
    result = host.wait(timeout=10, poll_interval=4)
    assert not result["free"] and result["busy_gpus"] == [1]
    # readings at 0, 4 and 8 s; the last sleep is cut so that the last reading is at the deadline
    assert host.sleeps == [4, 4, 2] and result["polls"] == 4 and result["seconds"] == 10.0
    assert "GPU 1 still in use after 10 s" in gpu_free.busy_message(result, 1024)
    contracts.GpuFreeResult.model_validate(result)


def test_slow_readings_count_against_the_timeout():
    host = FakeHost([(MEMORY_DRAINING, APPS_NONE)], command_seconds=0.5)  # one reading takes 1 s
    result = host.wait(timeout=10, poll_interval=4)
    # readings end at 1, 6 and 11 s: the third is past the deadline, so there is no fourth
    assert host.sleeps == [4, 4] and result["polls"] == 3 and result["seconds"] == 11.0
    assert "GPU 1 still in use after 11 s" in gpu_free.busy_message(result, 1024)


def test_timeout_zero_reads_once():
    host = FakeHost([(MEMORY_LOADED, APPS_LOADED), (MEMORY_IDLE, APPS_NONE)])
    result = host.wait(timeout=0)
    assert not result["free"] and result["polls"] == 1 and host.sleeps == []


def test_check_mode_reads_once_and_never_waits():
    host = FakeHost([(MEMORY_LOADED, APPS_LOADED), (MEMORY_IDLE, APPS_NONE)])
    result = host.wait(check_mode=True)
    assert not result["free"] and result["busy_gpus"] == [0, 1] and result["polls"] == 1 and host.sleeps == []


def test_a_failing_nvidia_smi_is_not_waited_out():
    def broken(argv):
        return 9, "", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"

    with pytest.raises(GpuFreeError, match=r"^`/usr/bin/nvidia-smi --query-gpu=index,uuid,memory.used --format=csv` "
                                           r"failed \(rc=9\): NVIDIA-SMI has failed .*; is the NVIDIA driver loaded\?$"):
        gpu_free.wait_until_free(broken, "/usr/bin/nvidia-smi", [0], 1024, 300, 3, clock=lambda: 0.0,
                                 sleep=pytest.fail)

    def no_gpu(argv):
        return 6, "No devices were found\n", ""

    with pytest.raises(GpuFreeError, match=r"failed \(rc=6\): No devices were found; this host has no GPU$"):
        gpu_free.read_usage(no_gpu, "nvidia-smi")

    def missing(argv):
        raise OSError(2, "No such file or directory")

    with pytest.raises(GpuFreeError, match=r"failed \(rc=127\): \[Errno 2\] No such file or directory"):
        gpu_free.read_usage(missing, "/opt/nvidia-smi")


def test_output_that_is_not_nvidia_smi_csv_fails_with_the_command():
    def garbage(argv):
        return 0, b"Segmentation fault\n", b""

    with pytest.raises(GpuFreeError, match=r"^`nvidia-smi --query-gpu=index,uuid,memory.used --format=csv` output "
                                           r"line 1: no `index` column"):
        gpu_free.read_usage(garbage, "nvidia-smi")


def test_bytes_from_the_runner_are_read():
    def runner(argv):
        return 0, (APPS_NONE if "--query-compute-apps" in argv[1] else MEMORY_IDLE).encode(), b""

    memory, apps = gpu_free.read_usage(runner, "nvidia-smi")
    assert [gpu["memory_used_mib"] for gpu in memory] == [0, 0] and apps == []


# ----------------------------------------------------------------------------- a real H200, replayed

H200_HELD = os.path.join(FIXTURES, "gpu-free", "1x-h200-2026-12-01")


def h200_usage(phase):
    with open(os.path.join(H200_HELD, phase + ".memory-used.csv")) as memory, open(os.path.join(H200_HELD, phase + ".compute-apps.csv")) as apps:
        return parse_memory_used_csv(memory.read()), parse_compute_apps_csv(apps.read())


def test_a_real_h200_held_by_a_cuda_allocation_is_busy_and_names_the_pid():
    """tests/gpu/gpu_free_check.py held GPU 0 with a 4 GiB cuMemAlloc (pid 437) and captured nvidia-smi."""
    memory, apps = h200_usage("busy")
    gpus = gpu_free.gpu_usage(memory, apps, [0], 1024)
    assert [gpu["index"] for gpu in gpus if gpu["busy"]] == [0]
    assert gpus[0]["memory_used_mib"] == 4623 and gpus[0]["processes"] == [{"pid": 437, "used_memory_mib": 4614}]
    assert "pid 437 (4614 MiB)" in gpu_free.busy_message({"gpus": gpus, "busy_gpus": [0], "seconds": 6}, 1024)


@pytest.mark.parametrize("phase", ["idle", "released"])
def test_a_real_idle_h200_is_free(phase):
    memory, apps = h200_usage(phase)
    assert apps == [] and not any(gpu["busy"] for gpu in gpu_free.gpu_usage(memory, apps, [0], 1024))
