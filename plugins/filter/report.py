# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Rollout reports for roles: ``rollout_summary`` (a few readable lines: status, layout, what was retired,
the phases that ran, the benchmark verdict and the report paths; what tools/show_report.py prints) and
``report_plan`` (the plan as the report keeps it) and ``phase_timings`` (the seconds of each phase)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from typing import Any, Callable, Dict, List, Optional

from ansible_collections.llmops.vllm.plugins.plugin_utils.report import phase_timings, report_plan, summary_lines


def rollout_summary(report: Optional[Dict[str, Any]], report_path: Optional[str] = None) -> List[str]:
    return summary_lines(report or {}, report_path)


class FilterModule(object):
    def filters(self) -> Dict[str, Callable[..., Any]]:
        return {"rollout_summary": rollout_summary, "report_plan": report_plan, "phase_timings": phase_timings}
