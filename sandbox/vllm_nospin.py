# llmops sandbox (sandbox/hosts.py appends this file to every host's sitecustomize.py; it runs in every Python
# process there, vLLM's venvs included, and imports nothing until vLLM itself loads the module below).
#
# vLLM's shared-memory message queues busy-wait after every read: a reader (the engine core, its worker) spins on
# sched_yield() for SpinCondition.busy_loop_s = 1 s before it sleeps on the queue's socket - not configurable in
# vLLM 0.31 or 0.32. On a GPU host that buys microseconds per step; on the sandbox's two shared cores it is about a
# core-second of spinning per request, taken from the other host, Ansible and the tests (measured: 30 requests
# at 1.5/s cost the host 21 CPU seconds, 11 with this hook; under three CPU hogs 29 and 12). Here the readers
# sleep on the socket at once, the path vLLM itself takes after a second without reads: every request still goes
# through the same queues, the writer notifies every write. Nothing else of vLLM changes.
import sys as _llmops_sys


class _LlmopsVllmNoSpin:
    """Meta-path finder: when vllm's shm_broadcast module is loaded, its SpinCondition readers do not spin."""

    module = "vllm.distributed.device_communicators.shm_broadcast"

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.module:
            return None
        import importlib.machinery
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            condition = getattr(module, "SpinCondition", None)
            init = getattr(condition, "__init__", None)
            if getattr(init, "__defaults__", None) == (1,):  # busy_loop_s: float = 1, its only default
                init.__defaults__ = (0,)

        spec.loader.exec_module = exec_module
        return spec


if not any(type(finder).__name__ == "_LlmopsVllmNoSpin" for finder in _llmops_sys.meta_path):
    _llmops_sys.meta_path.insert(0, _LlmopsVllmNoSpin())
