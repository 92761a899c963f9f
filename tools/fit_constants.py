#!/usr/bin/env python
"""Fit the planner's constants on their replay fixtures, and print every residual.

    .venv/bin/python tools/fit_constants.py memory       # planner_rules.MemoryConstants on tests/fixtures/vllm_logs
    .venv/bin/python tools/fit_constants.py performance  # planner_performance.Constants on tests/fixtures/perf_published

Coordinate descent on a multiplicative grid (each constant in turn, until none moves) minimising the
worst relative error on the "fit" entries (a minimax fit: the replay tests bound the worst entry),
mean squared log ratio as the tie-break. Prints the constants and every residual, fitted, held back
and pending apart (docs/planner.md shows those tables). The unit tests check the modules carry a
local optimum of this fit, not hand-tuned values.
"""
import dataclasses
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "unit"))
sys.path.insert(0, os.path.join(HERE, "..", ".collections"))

STEPS = (1.25, 1.1, 1.03, 1.01)


def fit(score, names, start, floor=1e-4):
    best, best_score = start, score(names, start)
    for step in STEPS:
        moved = True
        while moved:
            moved = False
            for field in dataclasses.fields(best):
                for factor in (step, 1 / step):
                    value = max(getattr(best, field.name) * factor, floor)
                    if field.name.endswith(("efficiency", "fraction")) and value > 1:
                        continue
                    trial = dataclasses.replace(best, **{field.name: value})
                    trial_score = score(names, trial)
                    if trial_score < best_score - 1e-9:
                        best, best_score, moved = trial, trial_score, True
    return best, best_score


def target(kind):
    if kind == "memory":
        import memory_replay as replay
        from ansible_collections.llmops.vllm.plugins.plugin_utils.planner_rules import MemoryConstants as Constants
    elif kind == "performance":
        import perf_replay as replay
        from ansible_collections.llmops.vllm.plugins.plugin_utils.planner_performance import Constants
    else:
        raise SystemExit("usage: fit_constants.py memory|performance")
    return replay, Constants


def main(argv):
    replay, constants_class = target(argv[1] if len(argv) > 1 else "")
    constants, score = fit(replay.score, replay.split("fit"), constants_class())
    print("fitted constants (worst fit residual %.1f %%):" % (100 * score))
    for field in dataclasses.fields(constants):
        print("  %s = %.3g" % (field.name, getattr(constants, field.name)))
    for kind in ("fit", "held_back", "pending"):
        names = replay.split(kind)
        if names:
            print("\n%s:" % kind)
        for name in names:
            print("  %-48s %+6.1f %%" % (name, 100 * replay.residual(name, constants)))


if __name__ == "__main__":
    main(sys.argv)
