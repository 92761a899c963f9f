#!/usr/bin/env python
"""Fit the performance model's constants on the "fit" figures of tests/fixtures/perf_published.

    .venv/bin/python tools/fit_performance.py

Coordinate descent on a log grid (each constant in turn, until none moves), minimising the sum of
squared log ratios predicted/measured; prints the constants and every figure's residual, fitted
and held back apart (docs/planner.md shows that table). tests/unit/test_perf_published.py checks
that planner_performance carries a fit, not hand-tuned values.
"""
import dataclasses
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "unit"))
sys.path.insert(0, os.path.join(HERE, "..", ".collections"))

import perf_replay  # noqa: E402
from ansible_collections.llmops.vllm.plugins.plugin_utils import planner_performance  # noqa: E402

STEPS = (1.25, 1.1, 1.03, 1.01)


def fit(names, start):
    best = start
    best_score = perf_replay.score(names, best)
    for step in STEPS:
        moved = True
        while moved:
            moved = False
            for field in dataclasses.fields(best):
                for factor in (step, 1 / step):
                    value = getattr(best, field.name) * factor
                    if field.name.endswith("efficiency") and value > 1:
                        continue
                    trial = dataclasses.replace(best, **{field.name: value})
                    trial_score = perf_replay.score(names, trial)
                    if trial_score < best_score - 1e-9:
                        best, best_score, moved = trial, trial_score, True
    return best, best_score


def main():
    constants, score = fit(perf_replay.split("fit"), planner_performance.Constants())
    print("fitted constants (score %.4f):" % score)
    for field in dataclasses.fields(constants):
        print("  %s = %.3g" % (field.name, getattr(constants, field.name)))
    for kind in ("fit", "held_back"):
        print("\n%s:" % kind)
        for name in perf_replay.split(kind):
            figure = perf_replay.FIGURES[name][0]
            print("  %-40s %-18s measured %8.1f predicted %8.1f  %+5.1f%%" % (
                name, figure["metric"], figure["value"], perf_replay.predicted(name, constants),
                100 * perf_replay.residual(name, constants)))


if __name__ == "__main__":
    main()
