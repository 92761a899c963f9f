#!/usr/bin/env python
"""The retire step's wait for free GPUs (module_utils/gpu_free.py) against a real GPU, in one call:
capture nvidia-smi's memory and compute-process queries idle, hold GPU 0 with a real CUDA allocation
(the driver's libcuda through ctypes: a context and 4 GiB, no torch needed), capture them busy, check
that the wait reports GPU 0 busy naming the holder's pid, release it and time how long until the
wait says free. Writes captures and a JSON summary under $OUT/gpu-free/.

    OUT=/tmp/out PYTHONPATH=.collections python3 tests/gpu/gpu_free_check.py
"""
import ctypes
import json
import os
import subprocess
import sys
import time

from ansible_collections.llmops.vllm.plugins.module_utils import gpu_free

HOLD_BYTES = 4 << 30


def hold_gpu():
    """Child process: a CUDA context on device 0 with HOLD_BYTES allocated, until stdin closes."""
    cuda = ctypes.CDLL("libcuda.so.1")
    device, context, pointer = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    for call, args in (("cuInit", (0,)), ("cuDeviceGet", (ctypes.byref(device), 0)),
                       ("cuCtxCreate_v2", (ctypes.byref(context), 0, device)),
                       ("cuMemAlloc_v2", (ctypes.byref(pointer), ctypes.c_size_t(HOLD_BYTES)))):
        status = getattr(cuda, call)(*args)
        if status != 0:
            print("%s failed: %d" % (call, status), flush=True)
            return 1
    print("holding", flush=True)
    sys.stdin.read()
    return 0


def run_command(argv):
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    return done.returncode, done.stdout, done.stderr


def capture(out, name):
    for args, suffix in ((gpu_free.MEMORY_USED_ARGS, "memory-used"), (gpu_free.COMPUTE_APPS_ARGS, "compute-apps")):
        with open(os.path.join(out, "%s.%s.csv" % (name, suffix)), "w") as handle:
            handle.write(run_command(["nvidia-smi"] + list(args))[1])


def main():
    if sys.argv[1:] == ["--hold"]:
        return hold_gpu()
    out = os.path.join(os.environ["OUT"], "gpu-free")
    os.makedirs(out, exist_ok=True)
    summary = {}
    capture(out, "idle")
    summary["idle"] = gpu_free.wait_until_free(run_command, "nvidia-smi", [0], 1024, timeout=0, poll_interval=1)
    holder = subprocess.Popen([sys.executable, __file__, "--hold"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    summary["holder"] = {"pid": holder.pid, "said": holder.stdout.readline().strip()}
    time.sleep(2)
    capture(out, "busy")
    busy = gpu_free.wait_until_free(run_command, "nvidia-smi", [0], 1024, timeout=6, poll_interval=2)
    summary["busy"] = busy
    summary["busy_message"] = gpu_free.busy_message(busy, 1024)
    summary["check_mode"] = gpu_free.wait_until_free(run_command, "nvidia-smi", [0], 1024, timeout=60,
                                                     poll_interval=2, check_mode=True)
    released = time.monotonic()
    holder.stdin.close()
    freed = gpu_free.wait_until_free(run_command, "nvidia-smi", [0], 1024, timeout=60, poll_interval=1)
    summary["after_release"] = dict(freed, seconds_since_release=round(time.monotonic() - released, 1))
    holder.wait(timeout=30)
    capture(out, "released")
    with open(os.path.join(out, "summary.json"), "w") as handle:
        json.dump(summary, handle, indent=1, default=str)
    print(json.dumps({"holder": summary["holder"], "busy_gpus": busy["busy_gpus"], "message": summary["busy_message"],
                      "free_after_release": freed["free"], "seconds": summary["after_release"]["seconds_since_release"]}))
    return 0 if busy["busy_gpus"] == [0] and freed["free"] and str(holder.pid) in summary["busy_message"] else 1


if __name__ == "__main__":
    sys.exit(main())
