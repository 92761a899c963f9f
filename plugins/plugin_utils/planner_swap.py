# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How "retire A, roll out B" swaps on one host: blue/green or stop-start (issue 21).

Blue/green starts B beside A, gates it, moves the model's stable port over to it and only then stops A:
no downtime, and a B that fails leaves A serving. It needs room for both at once. The rules, in order:

1. ``swap: stop-start`` in the desired state forces stop-start.
2. Nothing serves: there is nothing to keep serving, B starts alone (stop-start, nothing stops).
3. A and B share a name: one name is one unit (vllm-<name>.service), so the unit is restarted (stop-start).
4. B is planned with what A holds reserved (``reserved_gpus``: A's GPUs; on a CPU host ``reserved_memory_bytes``:
   the RAM A's unit uses, measured). It fits: blue/green. It does not: stop-start, and the plan says what B
   needs that A holds.
5. ``swap: bluegreen`` forces blue/green: a B that does not fit beside A is an error before anything stops.

B's plan is the one of the chosen strategy: beside A for blue/green (it keeps those GPUs after A stops), on
the whole host for stop-start.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Union

from ansible_collections.llmops.vllm.plugins.plugin_utils import planner
from ansible_collections.llmops.vllm.plugins.plugin_utils.contracts import (
    HostFacts, ModelFacts, PlanInputError, PlanRequest, ServingPlan, VllmFacts, parse_facts)
from ansible_collections.llmops.vllm.plugins.plugin_utils.planner_rules import gib_text

SWAPS = ("auto", "bluegreen", "stop-start")


def decide_swap(host: Union[HostFacts, Dict[str, Any]], model: Union[ModelFacts, Dict[str, Any]],
                vllm: Union[VllmFacts, Dict[str, Any], None] = None,
                request: Union[PlanRequest, Dict[str, Any], None] = None,
                current: Optional[Dict[str, Any]] = None, swap: str = "auto", name: str = "") -> Dict[str, Any]:
    """{"swap": "bluegreen" | "stop-start", "why": text, "plan": B's plan (ServingPlan as a dict)}.

    ``current`` describes what serves now (None or {}: nothing): ``name``, ``gpu_indices`` (the GPUs it holds) and
    ``memory_bytes`` (what its unit uses; CPU hosts). ``name`` is B's name. Raises PlanInputError for a forced
    blue/green that cannot be."""
    if swap not in SWAPS:
        raise PlanInputError("swap %r: give one of %s" % (swap, ", ".join(SWAPS)))
    host = parse_facts(HostFacts, host, "host facts")
    if request is None:
        request = PlanRequest()
    elif not isinstance(request, PlanRequest):
        request = parse_facts(PlanRequest, request, "plan request")
    current = current or {}

    def decided(kind: str, why: str, plan: ServingPlan) -> Dict[str, Any]:
        return {"swap": kind, "why": why, "plan": plan.model_dump()}

    def alone() -> ServingPlan:
        return planner.plan(host, model, vllm, request)

    if not current:
        return decided("stop-start", "nothing serves now: B starts alone", alone())
    if current.get("name") == name and name:
        if swap == "bluegreen":
            raise PlanInputError("swap bluegreen: %s replaces a model of the same name, and one name is one unit "
                                 "(vllm-%s.service); give the new model another name, or use swap stop-start" % (name, name))
        return decided("stop-start", "%s replaces itself (a new revision or plan): one name is one unit, restarted" % name,
                       alone())
    if swap == "stop-start":
        return decided("stop-start", "forced (swap: stop-start)", alone())
    held_gpus = sorted(int(i) for i in current.get("gpu_indices") or [])
    held_memory = int(current.get("memory_bytes") or 0)
    others = current.get("name") or "the model serving now"
    if host.gpus:
        free = [g.index for g in host.gpus if g.index not in held_gpus]
        if not free:
            beside_error = "%s holds every GPU (%s)" % (others, ",".join(map(str, held_gpus)))
            beside = None
        else:
            beside = planner.plan(host, model, vllm, request.model_copy(update={"reserved_gpus": held_gpus}))
            beside_error = beside.error or "does not fit"
        held = "GPUs %s" % ",".join(map(str, held_gpus))
    else:
        if not held_memory:
            unknown = "the RAM %s uses is unknown (current.memory_bytes, its unit's MemoryCurrent)" % others
            if swap == "bluegreen":
                raise PlanInputError("swap bluegreen: %s; turn on the unit's memory accounting or use swap stop-start" % unknown)
            return decided("stop-start", "%s: %s stops first" % (unknown, others), alone())
        beside = planner.plan(host, model, vllm, request.model_copy(update={"reserved_memory_bytes": held_memory}))
        beside_error = beside.error or "does not fit"
        held = "%s of RAM" % gib_text(held_memory)
    if beside is not None and beside.fits:
        where = "GPUs %s" % ",".join(map(str, beside.gpu_indices)) if host.gpus else "the RAM left"
        return decided("bluegreen", "fits beside %s (which holds %s): starts on %s, takes over the stable port, then %s stops"
                       % (others, held, where, others), beside)
    if swap == "bluegreen":
        raise PlanInputError("swap bluegreen: the new model does not fit beside %s, which holds %s (%s); free room "
                             "or use swap stop-start" % (others, held, beside_error))
    return decided("stop-start", "does not fit beside %s, which holds %s (%s): %s stops first"
                   % (others, held, beside_error, others), alone())
