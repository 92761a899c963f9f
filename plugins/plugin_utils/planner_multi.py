# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Several models on one host: disjoint GPU sets, each model planned inside its own (issue 20, the planner).

The rules, in order:

1. A model with a ``gpus`` pin gets exactly those GPUs; pins must not overlap.
2. A model in service (``current``: name -> the GPUs it holds) keeps its GPUs when they are free and
   its plan fits there - adding a model never moves one that still fits where it is.
3. The others, largest first (the fewest GPUs their plan fits on): the smallest power-of-two set
   that fits, on one NUMA node where one has room - the node with the least room that still holds
   it (best fit, so that a larger model finds a whole node later); across nodes only when no node
   has room, and then said.
4. A model alone on its NUMA node takes that node's GPUs left free when its predicted figure (the
   objective's: aggregate tok/s or single-stream tok/s) improves by more than the planner's tie
   margin - a 4-GPU model does not leave half a node idle.

Each model's own plan (memory, divisibility, objective, parsers) is the single-model planner's, run
with ``gpus`` set to its set. On a CPU host the models share the RAM (the sum of their weights, KV
space and runtime must fit the usable RAM) and the cores (stated). When they cannot all fit, the
plan says which model does not and what would: its nearest option on the GPUs left, or the set
size it needs.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from ansible_collections.llmops.vllm.plugins.plugin_utils import planner
from ansible_collections.llmops.vllm.plugins.plugin_utils.contracts import (
    HostFacts, ModelFacts, PlanInputError, PlanRequest, ServingPlan, VllmFacts, parse_facts)
from ansible_collections.llmops.vllm.plugins.plugin_utils.planner_performance import ranking_value
from ansible_collections.llmops.vllm.plugins.plugin_utils.planner_rules import (
    CPU_MEMORY_FRACTION, CPU_RUNTIME_BYTES, GIB, gib_text)

TIE = planner.TIE


class ModelItem:
    """One model of the host: its name, facts and plan request (the desired state's pins)."""

    def __init__(self, name: str, model: Union[ModelFacts, Dict[str, Any]], request: Union[PlanRequest, Dict[str, Any], None]) -> None:
        self.name = name
        self.model = parse_facts(ModelFacts, model, "model facts of %s" % name)
        if request is None:
            request = PlanRequest()
        elif not isinstance(request, PlanRequest):
            request = parse_facts(PlanRequest, request, "plan request of %s" % name)
        self.request = request


def items_from_documents(models: Sequence[Dict[str, Any]], model_facts: Dict[str, Any],
                         base_requests: Optional[Dict[str, Dict[str, Any]]] = None) -> List[ModelItem]:
    """Desired-state documents (``vllm_models``) as the planner's items: each one's plan pins with its hub id and
    port; ``model_facts`` maps each name to its model facts, ``base_requests`` (optional) each name to the
    request the pins go onto (the CLI's own options)."""
    items = []
    for index, doc in enumerate(models):
        name = doc.get("name")
        if not name or name not in model_facts:
            raise PlanInputError("models[%d] (%s): no model_facts for it; give model_info's result under its name"
                                 % (index, name or "no name"))
        request = dict((base_requests or {}).get(name) or {})
        request.update({k: v for k, v in (doc.get("plan") or {}).items() if v is not None})
        request.update({k: v for k, v in (("model_id", doc.get("repo_id")), ("port", doc.get("port"))) if v is not None})
        items.append(ModelItem(str(name), model_facts[name], request))
    return items


def _plan_on(host: HostFacts, item: ModelItem, vllm: Optional[VllmFacts], gpus: Optional[List[int]]) -> ServingPlan:
    request = item.request.model_copy(update={"gpus": gpus}) if gpus is not None else item.request
    return planner.plan(host, item.model, vllm, request)


def _value(plan: ServingPlan, item: ModelItem) -> Optional[float]:
    if not plan.fits or plan.performance is None:
        return None
    return ranking_value(plan.performance, item.request.objective, item.request.concurrency is not None)


def _nodes(host: HostFacts) -> Dict[Optional[int], List[int]]:
    nodes: Dict[Optional[int], List[int]] = {}
    for gpu in sorted(host.gpus, key=lambda g: g.index):
        nodes.setdefault(gpu.numa_node, []).append(gpu.index)
    return nodes


def _sizes(limit: int) -> List[int]:
    sizes, size = [], 1
    while size <= limit:
        sizes.append(size)
        size *= 2
    if limit and limit not in sizes:
        sizes.append(limit)
    return sizes


def _candidate_sets(nodes: Dict[Optional[int], List[int]], free: Sequence[int], size: int) -> List[Tuple[List[int], bool]]:
    """(GPU set, spans NUMA nodes) to try for a model of `size` GPUs: one node's first, best fit first."""
    sets: List[Tuple[List[int], bool]] = []
    room = [(len([i for i in gpus if i in free]), node, [i for i in gpus if i in free]) for node, gpus in nodes.items()]
    for _count, _node, gpus in sorted((r for r in room if r[0] >= size), key=lambda r: (r[0], -1 if r[1] is None else r[1])):
        sets.append((gpus[:size], False))
    if not sets and len(free) >= size:
        sets.append((sorted(free)[:size], len(nodes) > 1))
    return sets


def plan_models(host: Union[HostFacts, Dict[str, Any]], items: Sequence[ModelItem],
                vllm: Union[VllmFacts, Dict[str, Any], None] = None,
                current: Optional[Dict[str, List[int]]] = None) -> Dict[str, Any]:
    """{"models": [plan + name + gpus], "fits", "error", "free_gpus", "reasons"} for all models of one host."""
    host = parse_facts(HostFacts, host, "host facts")
    vllm_facts = parse_facts(VllmFacts, vllm, "vLLM facts") if vllm is not None else None
    names = [item.name for item in items]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise PlanInputError("models: %s named more than once" % ", ".join(duplicates))
    ports = [item.request.port for item in items if item.request.port is not None]
    if len(ports) != len(set(ports)):
        raise PlanInputError("models: port %s given to more than one model" % sorted({p for p in ports if ports.count(p) > 1}))
    if not items:
        raise PlanInputError("models: give at least one model")
    if not host.gpus:
        return _plan_cpu_models(host, items, vllm_facts)
    return _plan_gpu_models(host, items, vllm_facts, current or {})


def _plan_gpu_models(host: HostFacts, items: Sequence[ModelItem], vllm: Optional[VllmFacts],
                     current: Dict[str, List[int]]) -> Dict[str, Any]:
    nodes = _nodes(host)
    all_gpus = [g.index for g in sorted(host.gpus, key=lambda g: g.index)]
    free = list(all_gpus)
    reasons: List[str] = []
    placed: Dict[str, Tuple[List[int], ServingPlan]] = {}
    failures: Dict[str, str] = {}

    def take(item: ModelItem, gpus: List[int], plan: ServingPlan, why: str) -> None:
        placed[item.name] = (gpus, plan)
        for index in gpus:
            free.remove(index)
        reasons.append("%s: GPUs %s (%s)" % (item.name, ",".join(map(str, gpus)), why))

    # 1. pins
    pinned = [item for item in items if item.request.gpus is not None]
    seen: Dict[int, str] = {}
    for item in pinned:
        overlap = sorted(i for i in item.request.gpus or [] if i in seen)
        if overlap:
            raise PlanInputError("models: %s pins GPUs %s, which %s pins too" % (item.name, overlap, seen[overlap[0]]))
        for index in item.request.gpus or []:
            seen[index] = item.name
    for item in pinned:
        gpus = list(item.request.gpus or [])
        take(item, gpus, _plan_on(host, item, vllm, gpus), "pinned")
    # 2. models in service keep their GPUs where their plan still fits
    for item in items:
        if item.name in placed or item.name not in current:
            continue
        gpus = sorted(current[item.name])
        if gpus and all(i in free for i in gpus):
            plan = _plan_on(host, item, vllm, gpus)
            if plan.fits:
                take(item, gpus, plan, "serves there now, and still fits")
                continue
            reasons.append("%s: no longer fits on the GPUs it holds (%s): placed again" % (item.name, plan.error))
    # 3. the rest, largest first
    rest = [item for item in items if item.name not in placed]
    need: Dict[str, int] = {}
    for item in rest:
        need[item.name] = next((size for size in _sizes(len(all_gpus)) if _plan_on(host, item, vllm, all_gpus[:size]).fits),
                               len(all_gpus) + 1)
    for item in sorted(rest, key=lambda i: (-need[i.name], names_index(items, i.name))):
        done = False
        for size in [s for s in _sizes(len(free)) if s >= need[item.name]]:
            for gpus, spans in _candidate_sets(nodes, free, size):
                plan = _plan_on(host, item, vllm, gpus)
                if plan.fits:
                    node = _node_of(host, gpus)
                    take(item, gpus, plan, "the smallest set its plan fits on, %s" % (
                        "across NUMA nodes: no node has %d GPUs free" % size if spans
                        else "NUMA node %s" % node if node is not None else "no NUMA node reported"))
                    done = True
                    break
            if done:
                break
        if not done:
            failures[item.name] = _why_not(host, item, vllm, free, need[item.name], len(all_gpus))
    # 4. a model alone on its node takes the node's free GPUs when that helps its objective
    for item in items:
        if item.name not in placed or item.request.gpus is not None:
            continue
        gpus, plan = placed[item.name]
        node = _node_of(host, gpus)
        if node is None and len(nodes) > 1:
            continue
        others = [n for n, (g, _p) in placed.items() if n != item.name and _node_of(host, g) == node]
        spare = [i for i in nodes.get(node, []) if i in free]
        if others or not spare or item.name in current:
            continue
        wider = sorted(gpus + spare)
        bigger = _plan_on(host, item, vllm, wider)
        before, after = _value(plan, item), _value(bigger, item)
        if bigger.fits and before is not None and after is not None and after > before * (1 + TIE):
            for index in spare:
                free.remove(index)
            placed[item.name] = (wider, bigger)
            reasons.append("%s: also GPUs %s, the rest of NUMA node %s (predicted %.0f -> %.0f, objective %s)" % (
                item.name, ",".join(map(str, spare)), node, before, after, item.request.objective))
    models: List[Dict[str, Any]] = []
    for item in items:
        if item.name in placed:
            gpus, plan = placed[item.name]
            doc = plan.model_dump()
            doc.update(name=item.name, gpus=gpus)
        else:
            doc = {"name": item.name, "gpus": [], "fits": False, "error": failures[item.name]}
        models.append(doc)
    fits = not failures and all(doc["fits"] for doc in models)
    error = None
    if not fits:
        error = "; ".join("%s: %s" % (doc["name"], failures.get(doc["name"]) or doc.get("error") or "does not fit")
                          for doc in models if not doc["fits"])
    if free:
        reasons.append("GPUs %s left free" % ",".join(map(str, sorted(free))))
    return {"models": models, "fits": fits, "error": error, "free_gpus": sorted(free), "reasons": reasons,
            "device": "cuda"}


def names_index(items: Sequence[ModelItem], name: str) -> int:
    return [item.name for item in items].index(name)


def _node_of(host: HostFacts, gpus: Sequence[int]) -> Optional[int]:
    numa = {g.numa_node for g in host.gpus if g.index in gpus}
    return numa.pop() if len(numa) == 1 else None


def _why_not(host: HostFacts, item: ModelItem, vllm: Optional[VllmFacts], free: Sequence[int], need: int, total: int) -> str:
    if need > total:
        alone = _plan_on(host, item, vllm, None)
        return "does not fit on this host even alone (%s)" % (alone.error or "does not fit")
    if not free:
        return "no GPU is left for it; it needs %d GPU(s) - free them from another model (pin smaller sets with gpus)" % need
    plan = _plan_on(host, item, vllm, sorted(free))
    left = ",".join(map(str, sorted(free)))
    return "needs %d GPU(s), %d left (%s): %s" % (need, len(free), left, plan.error or "does not fit there")


def _plan_cpu_models(host: HostFacts, items: Sequence[ModelItem], vllm: Optional[VllmFacts]) -> Dict[str, Any]:
    memory = host.host.memory_bytes if host.host else None
    if not memory:
        raise PlanInputError("CPU plan: the host facts carry no host.memory_bytes")
    budget = int(memory * CPU_MEMORY_FRACTION)
    models, used, reasons, failures = [], 0, [], []
    for item in items:
        # vLLM's own binding puts every server's threads on the first cores of the node: a loaded server
        # there starves the next one's load (measured on the sandbox: no CPU time at all for minutes).
        bind = item.request.cpu_threads_bind or "nobind"
        plan = planner.plan(host, item.model, vllm, item.request.model_copy(update={"cpu_threads_bind": bind}))
        space = int(plan.env.get("VLLM_CPU_KVCACHE_SPACE", "0")) * GIB
        need = plan.weights_bytes + space + CPU_RUNTIME_BYTES
        doc = plan.model_dump()
        doc.update(name=item.name, gpus=[], ram_bytes=need, cpu_threads_bind=bind)
        if plan.fits and used + need > budget:
            doc["fits"] = False
            doc["error"] = "needs %s of RAM beside the models before it (%s of %s usable in use)" % (
                gib_text(need), gib_text(used), gib_text(budget))
        if doc["fits"]:
            used += need
        else:
            failures.append("%s: %s" % (item.name, doc.get("error") or "does not fit"))
        reasons.append("%s: %s of RAM (weights %s + KV %s + runtime %s)" % (
            item.name, gib_text(need), gib_text(plan.weights_bytes), gib_text(space), gib_text(CPU_RUNTIME_BYTES)))
        models.append(doc)
    cores = host.host.cpu_count if host.host else None
    reasons.append("RAM: %s of %s usable (%s x %.2f); the models share the host's %s cores, their threads unbound "
                   "(VLLM_CPU_OMP_THREADS_BIND=nobind unless pinned): vLLM's own binding would put every server on the "
                   "same first cores" % (gib_text(used), gib_text(budget), gib_text(memory), CPU_MEMORY_FRACTION,
                                         cores or "unknown number of"))
    return {"models": models, "fits": not failures, "error": "; ".join(failures) or None, "free_gpus": [],
            "reasons": reasons, "device": "cpu", "ram_used_bytes": used, "ram_budget_bytes": budget}
