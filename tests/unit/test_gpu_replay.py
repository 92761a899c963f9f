"""Replay of what real GPU machines showed (tests/gpu/run.sh; captures in tests/fixtures/gpu/).

The expectations come from the raw outputs themselves, read here with plain string handling, never
through the module under test; both module paths (NVML and nvidia-smi parsing) must agree with them.
"""
import csv
import io
import json
import os
import re

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils import topology
from replay_data import FIXTURES, read

GPU_RUNS = sorted(os.listdir(os.path.join(FIXTURES, "gpu")))
H200 = os.path.join(FIXTURES, "gpu", "2x-h200-2026-11-30")
MIB = 1 << 20


def load(run, *parts):
    path = os.path.join(FIXTURES, "gpu", run, *parts)
    return json.loads(read(path)) if path.endswith(".json") else read(path)


def raw_truth(run):
    """GPU count, names, memory, links and NUMA nodes as the machine printed them."""
    rows = list(csv.reader(io.StringIO(load(run, "raw", "query-gpu.csv")), skipinitialspace=True))
    header, body = rows[0], [r for r in rows[1:] if r]
    col = {name.split(" [")[0]: i for i, name in enumerate(header)}
    gpus = [{"index": int(r[col["index"]]), "name": r[col["name"]], "uuid": r[col["uuid"]],
             "memory_mib": int(r[col["memory.total"]].split()[0]), "compute_cap": r[col["compute_cap"]]}
            for r in body]
    topo_lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in load(run, "raw", "topo-m.txt").splitlines()]
    matrix = {}
    for line in topo_lines:
        cells = line.split("\t")
        if re.fullmatch(r"GPU\d+", cells[0].strip()):
            matrix[int(cells[0][3:])] = [c.strip() for c in cells[1:1 + len(gpus)]]
    numactl = load(run, "raw", "numactl-H.txt")
    nodes = int(re.search(r"available: (\d+) nodes", numactl).group(1))
    sysfs_numa = {}
    for line in load(run, "raw", "sysfs.txt").splitlines():
        fields = dict(p.split("=", 1) for p in line.split()[1:] if "=" in p)
        if fields.get("vendor") == "0x10de" and fields.get("class", "").startswith("0x03"):
            sysfs_numa[line.split()[0].lower()] = int(fields["numa"])
    return {"gpus": gpus, "matrix": matrix, "numa_nodes": nodes, "sysfs_numa": sysfs_numa}


@pytest.mark.parametrize("run", GPU_RUNS)
@pytest.mark.parametrize("path", ["nvml", "smi", "check"])
def test_module_paths_report_what_the_machine_printed(run, path):
    truth = raw_truth(run)
    result = load(run, "module", path + ".json")
    assert result["changed"] is False
    assert result["gpu_count"] == len(truth["gpus"]) == len(result["gpus"])
    for gpu, raw in zip(result["gpus"], truth["gpus"], strict=True):
        assert gpu["index"] == raw["index"] and gpu["name"] == raw["name"] and gpu["uuid"] == raw["uuid"]
        assert gpu["memory_bytes"] == raw["memory_mib"] * MIB
        assert gpu["compute_capability"] == raw["compute_cap"]
    for i, row in truth["matrix"].items():
        assert result["links"][i] == row
    assert len(result["numa_nodes"]) == truth["numa_nodes"]
    if path != "smi":
        assert "nvml" in result["sources"]


def test_h200_facts_as_stated_in_the_issue():
    truth = raw_truth("2x-h200-2026-11-30")
    assert [g["name"] for g in truth["gpus"]] == ["NVIDIA H200"] * 2
    assert {g["memory_mib"] for g in truth["gpus"]} == {143771}
    assert truth["matrix"] == {0: ["X", "NV18"], 1: ["NV18", "X"]}
    assert truth["numa_nodes"] == 1
    # sysfs does not know the node (-1) and NVML says "Not Supported" ...
    assert set(truth["sysfs_numa"].values()) == {-1}
    snapshot = load("2x-h200-2026-11-30", "raw", "nvml-snapshot.json")
    assert all(g["numa_node"] is None for g in snapshot["gpus"])
    assert any("NumaNodeId: Not Supported" in e for e in snapshot["errors"])
    # ... so both module paths take NUMA node 0 from topo -m, and say so.
    for path in ("nvml", "smi"):
        result = load("2x-h200-2026-11-30", "module", path + ".json")
        assert [(g["numa_node"], g["numa_source"]) for g in result["gpus"]] == [(0, "topo"), (0, "topo")]
        assert result["interconnect"] == "nvlink"


def sysfs_tree(root, capture):
    """Rebuild the captured sysfs values as a directory tree read_sysfs can walk."""
    for line in capture.splitlines():
        name, fields = line.split()[0], dict(p.split("=", 1) for p in line.split()[1:] if "=" in p)
        if name.startswith("node"):
            node = root / "sys" / "devices" / "system" / "node" / name
            node.mkdir(parents=True)
            (node / "cpulist").write_text(fields["cpulist"] + "\n")
            continue
        device = root / "sys" / "bus" / "pci" / "devices" / name
        device.mkdir(parents=True)
        for key, filename in (("class", "class"), ("vendor", "vendor"), ("device", "device"), ("numa", "numa_node"),
                              ("lw", "current_link_width"), ("ls", "current_link_speed"),
                              ("mlw", "max_link_width"), ("mls", "max_link_speed")):
            if fields.get(key):
                (device / filename).write_text(fields[key].replace("_", " ") + "\n")
    return str(root)


@pytest.mark.parametrize("run", GPU_RUNS)
def test_replaying_the_captures_gives_what_the_module_returned_there(tmp_path, run):
    raw = dict(topo_text=load(run, "raw", "topo-m.txt"), query_text=load(run, "raw", "query-gpu.csv"),
               numactl_text=load(run, "raw", "numactl-H.txt"), sysfs_root=sysfs_tree(tmp_path, load(run, "raw", "sysfs.txt")))
    keys = ("gpus", "links", "interconnect", "numa_nodes", "gpu_count", "driver_version")
    smi = topology.build_topology(**raw)
    live_smi = load(run, "module", "smi.json")
    for key in keys:
        assert without_health(smi, live_smi)[key] == live_smi[key], key
    nvml = topology.build_topology(nvml=load(run, "raw", "nvml-snapshot.json"), **raw)
    live_nvml = load(run, "module", "nvml.json")
    for key in keys:
        assert without_health(nvml, live_nvml)[key] == live_nvml[key], key


def without_health(replayed, live):
    """Runs recorded before gpus[].health existed: compare the rest (test_gpu_health.py replays health)."""
    if all("health" in gpu for gpu in live["gpus"]):
        return replayed
    return dict(replayed, gpus=[{k: v for k, v in gpu.items() if k != "health"} for gpu in replayed["gpus"]])


@pytest.mark.parametrize("run", GPU_RUNS)
def test_plans_made_there_still_come_out_the_same(tmp_path, run):
    """The planner, replayed on the live facts of both module paths, plans alike from either, and
    keeps the layout the GPU machine produced wherever it still fits. (The recorded plans predate the
    objective - latency is what the planner did then - and the calibrated memory model, which reserves more per GPU: a plan that fitted there may not now, e.g.
    MiniMax-M2.5 at TP=2 on 2 x H200 with 4 x 32k tokens of KV.)"""
    from ansible_collections.llmops.vllm.plugins.module_utils import model_config
    from ansible_collections.llmops.vllm.plugins.plugin_utils import planner
    plans_dir = os.path.join(FIXTURES, "gpu", run, "plans")
    by_config = {}
    for name in sorted(os.listdir(plans_dir)):
        if not name.endswith(".json"):
            continue
        config, path = name[:-len(".json")].rsplit(".", 1)
        recorded = load(run, "plans", name)
        facts = model_config.model_facts(os.path.join(FIXTURES, "configs", config + ".json"))
        request = {"model_id": recorded["model_id"], "objective": "latency"}
        result = planner.plan(load(run, "module", path + ".json"), facts, None, request)
        if result.fits:
            assert recorded["fits"], name
            expected = (recorded["tensor_parallel_size"], recorded["gpu_indices"])
            if (result.tensor_parallel_size, result.gpu_indices) != expected:
                # Layouts are chosen by predicted speed now: a different one must be predicted faster.
                old = next(c for c in result.candidates if c.fits and c.data_parallel_size == 1
                           and c.tensor_parallel_size == recorded["tensor_parallel_size"])
                assert result.performance.single_stream_tok_s > old.performance.single_stream_tok_s, name
        by_config.setdefault(config, []).append((result.fits, result.layout, result.gpu_indices, result.error))
    assert len(by_config) >= 4
    for config, plans in by_config.items():
        assert len(plans) == 2 and plans[0] == plans[1], config


def test_h200_plans():
    plans = {name: load("2x-h200-2026-11-30", "plans", name + ".nvml.json") for name in (
        "nvidia__Kimi-K2.5-NVFP4", "meta-llama__Meta-Llama-3.1-70B", "MiniMaxAI__MiniMax-M2.5.partial")}
    kimi = plans["nvidia__Kimi-K2.5-NVFP4"]
    assert kimi["fits"] is False and "NVFP4" in kimi["error"] and "Blackwell" in kimi["error"]
    llama = plans["meta-llama__Meta-Llama-3.1-70B"]
    assert llama["fits"] and llama["tensor_parallel_size"] == 2 and llama["env"]["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert "NUMA binding: not needed" in " ".join(llama["reasons"])
    rc = load("2x-h200-2026-11-30", "plans", "rc.txt")
    assert "nvidia__Kimi-K2.5-NVFP4 nvml rc=2" in rc and "meta-llama__Meta-Llama-3.1-70B nvml rc=0" in rc
