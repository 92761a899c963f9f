"""Shared fixtures: the real captures in tests/fixtures, turned into facts the planner reads."""
import os
import shutil

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils import model_config, topology

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures")
CONFIGS = os.path.join(FIXTURES, "configs")
TOPOLOGIES = os.path.join(FIXTURES, "topology")
GPUINFO = os.path.join(FIXTURES, "gpuinfo")

RTX_TOPO = os.path.join(TOPOLOGIES, "8x-rtxpro6000-bw-server-pcie-2numa-asus-esc8000a-e13p.txt")
RTX_QUERY = os.path.join(GPUINFO, "nvidia-smi-q__8x-rtxpro6000-asus-esc8000a-e13p.txt")
RTX_NUMACTL = os.path.join(GPUINFO, "numactl-H__8x-rtxpro6000-asus-esc8000a-e13p.txt")
H200_TOPO = os.path.join(TOPOLOGIES, "2x-h200-sxm-nv18-1numa-vm.txt")
H200_QUERY = os.path.join(GPUINFO, "query-gpu-csv__2x-h200.txt")
L40S_TOPO = os.path.join(TOPOLOGIES, "8x-l40s-pcie-2numa-pix-pairs.normalized.txt")
L40S_QUERY = os.path.join(GPUINFO, "query-gpu-csv__8x-l40s.txt")
H100_TOPO = os.path.join(TOPOLOGIES, "8x-h100-sxm-nv18-2numa-8mlx5.txt")

CONFIG_NAMES = sorted(f[:-5] for f in os.listdir(CONFIGS) if f.endswith(".json") and ".hf_quant_config" not in f)


def read(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def make_model_dir(tmp_path, name):
    """A model directory as a host would have it: config.json (+ hf_quant_config.json)."""
    directory = tmp_path / name
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copy(os.path.join(CONFIGS, name + ".json"), directory / "config.json")
    quant = os.path.join(CONFIGS, name + ".hf_quant_config.json")
    if os.path.exists(quant):
        shutil.copy(quant, directory / "hf_quant_config.json")
    return str(directory)


def host_facts(topo, query=None, numactl=None):
    return topology.build_topology(topo_text=read(topo), query_text=read(query) if query else None,
                                   numactl_text=read(numactl) if numactl else None)


@pytest.fixture(scope="session")
def rtx_host():
    """The 8x RTX PRO 6000 Blackwell box of the story: PCIe, GPUs 0-3 on node 0 and 4-7 on node 1."""
    return host_facts(RTX_TOPO, RTX_QUERY, RTX_NUMACTL)


@pytest.fixture(scope="session")
def h200_host():
    return host_facts(H200_TOPO, H200_QUERY)


@pytest.fixture
def model_facts(tmp_path):
    def load(name):
        return model_config.model_facts(make_model_dir(tmp_path, name))
    return load
