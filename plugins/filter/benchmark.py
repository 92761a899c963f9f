# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark runs for roles: ``benchmark_run`` turns the sweep's level files (the ``slurp`` loop results)
into the run document the llmops.vllm.benchmark role keeps (plugin_utils/benchmark.py build_run)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from typing import Any, Callable, Dict, List, Optional

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm.plugins.plugin_utils.benchmark import (
    BenchmarkInputError,
    build_run,
    decode_level_files,
    run_path,
)


def benchmark_run(level_files: List[Dict[str, Any]], host: str, name: str, served_model_name: str, url: str,
                  started: str, finished: str, vllm_info: Optional[Dict[str, Any]], meta: Optional[Dict[str, Any]],
                  workload: Dict[str, Any], host_results_dir: str, started_stamp: str, file_name: str) -> Dict[str, Any]:
    try:
        return build_run(meta, decode_level_files(level_files), workload, host=host, name=name,
                         served_model_name=served_model_name, url=url, started=started, finished=finished,
                         vllm_info=vllm_info, path=run_path(host_results_dir, started_stamp, file_name))
    except BenchmarkInputError as exc:
        raise AnsibleFilterError("benchmark_run: %s" % exc)


class FilterModule(object):
    def filters(self) -> Dict[str, Callable[..., Any]]:
        return {"benchmark_run": benchmark_run}
