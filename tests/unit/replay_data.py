"""The real captures and configs in tests/fixtures, by name, for the unit tests.

A plain module, not conftest.py: tests/integration has a conftest of its own, and both would be
imported as the module `conftest` in one pytest run, so test files cannot import from either.
"""
import os
import shutil

from ansible_collections.llmops.vllm.plugins.module_utils import topology

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
