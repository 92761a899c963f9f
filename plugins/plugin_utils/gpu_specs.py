# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a GPU can move and compute, from its vendor's datasheet, and what links a set of GPUs.

The performance model (planner_performance.py) reads three things per GPU: memory bandwidth, dense
tensor throughput at the weights' precision, and NVLink bandwidth; and per GPU set the slowest link
between two of its GPUs (NVLink, or the PCIe generation x width of the slots). Figures are the
datasheets' dense (not 2:4 sparse) peaks; where a datasheet states only the sparse figure the dense
one is half of it (marked "sparse/2"). GB/s are 10^9 bytes per second, per direction.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from ansible_collections.llmops.vllm.plugins.plugin_utils.contracts import HostFacts
from ansible_collections.llmops.vllm.plugins.plugin_utils.planner_rules import link_rank


@dataclass(frozen=True)
class GpuSpec:
    """One product. ``pattern`` is matched (regex, case-insensitive) against nvidia-smi's name."""
    name: str
    pattern: str
    memory_gb_s: float
    bf16_tflops: float
    fp8_tflops: Optional[float]
    fp4_tflops: Optional[float]
    nvlink_gb_s: Optional[float]  # all links together, per direction
    nvlink_links: Optional[int]
    source: str


DS_H100 = "https://www.nvidia.com/en-us/data-center/h100/ (datasheet table; sparse/2)"
DS_H200 = "https://www.nvidia.com/en-us/data-center/h200/ (datasheet table; sparse/2)"
DS_B200 = "https://www.nvidia.com/en-us/data-center/dgx-b200/ and the HGX B200 spec table (per GPU; sparse/2)"
DS_A100 = "https://www.nvidia.com/en-us/data-center/a100/ (datasheet table; dense figures)"
DS_L40S = "https://www.nvidia.com/en-us/data-center/l40s/ (datasheet; sparse/2)"
DS_ADA = "NVIDIA Ada Lovelace GPU architecture whitepaper v2.1, appendix tables (dense, FP32 accumulate)"
DS_BW_RTX = "NVIDIA RTX Blackwell GPU architecture whitepaper v1.0, appendix tables (dense)"

# Most specific patterns first: the first match wins.
GPU_SPECS: Tuple[GpuSpec, ...] = (
    GpuSpec("B200", r"\bB200\b", 8000, 2250, 4500, 9000, 900, 18, DS_B200),
    GpuSpec("H200 NVL", r"H200 NVL", 4800, 835, 1671, None, 450, 18, DS_H200),
    GpuSpec("H200 SXM", r"\bH200\b", 4800, 989, 1979, None, 450, 18, DS_H200),
    GpuSpec("H100 NVL", r"H100 NVL", 3900, 835, 1671, None, 300, 12, DS_H100),
    GpuSpec("H100 PCIe", r"H100 PCIe", 2000, 756, 1513, None, 300, 12, DS_H100),
    GpuSpec("H100 SXM", r"\bH100\b", 3350, 989, 1979, None, 450, 18, DS_H100),
    GpuSpec("H800 SXM", r"\bH800\b", 3350, 989, 1979, None, 200, 8,
            "NVIDIA H800 product brief (H100 silicon, 8 NVLink links)"),
    GpuSpec("H20", r"\bH20\b", 4000, 148, 296, None, 450, 18, "NVIDIA H20 product brief (dense)"),
    GpuSpec("A100 SXM 80GB", r"A100.*SXM.*80GB|A100-SXM4-80GB", 2039, 312, None, None, 300, 12, DS_A100),
    GpuSpec("A100 PCIe 80GB", r"A100 80GB PCIe|A100-PCIE-80GB", 1935, 312, None, None, 300, 12, DS_A100),
    GpuSpec("A100 40GB", r"A100", 1555, 312, None, None, 300, 12, DS_A100),
    GpuSpec("RTX PRO 6000 Blackwell", r"RTX PRO 6000", 1792, 500, 1000, 2000, None, None,
            "NVIDIA RTX PRO 6000 Blackwell datasheet (1792 GB/s GDDR7; ~4 PFLOPS FP4 sparse: 2000 dense, FP8 and "
            "BF16 at 1/2 and 1/4 of it as in " + DS_BW_RTX + ")"),
    GpuSpec("RTX 6000 Ada", r"RTX 6000 Ada", 960, 364, 728, None, None, None,
            "NVIDIA RTX 6000 Ada datasheet (960 GB/s; 1457 FP8 TFLOPS sparse) and " + DS_ADA),
    GpuSpec("RTX A6000", r"RTX A6000", 768, 155, None, None, 56, 4,
            "NVIDIA RTX A6000 datasheet (768 GB/s; 309.7 TF16 tensor sparse; NVLink bridge 112.5 GB/s both ways)"),
    GpuSpec("L40S", r"\bL40S\b", 864, 362, 733, None, None, None, DS_L40S),
    GpuSpec("L40", r"\bL40\b", 864, 181, 362, None, None, None, "https://www.nvidia.com/en-us/data-center/l40/ (sparse/2)"),
    GpuSpec("L4", r"\bL4\b", 300, 121, 242, None, None, None, "https://www.nvidia.com/en-us/data-center/l4/ (sparse/2)"),
    GpuSpec("A10", r"\bA10\b", 600, 125, None, None, None, None, "https://www.nvidia.com/en-us/data-center/products/a10-gpu/ (dense)"),
    GpuSpec("RTX 5090", r"RTX 5090", 1792, 209.5, 419, 838, None, None, DS_BW_RTX),
    GpuSpec("RTX 4090", r"RTX 4090", 1008, 165.2, 330.3, None, None, None, DS_ADA),
    GpuSpec("RTX 3090", r"RTX 3090", 936, 71, None, None, 56, 4,
            "NVIDIA Ampere GA102 GPU architecture whitepaper, appendix (dense, FP32 accumulate)"),
    GpuSpec("TITAN V", r"TITAN V", 653, 110, None, None, None, None,
            "NVIDIA TITAN V product page (653 GB/s HBM2, 110 deep-learning TFLOPS; FP16, no BF16)"),
)

# PCIe: usable data rate per lane per direction, GB/s, after line coding (PCI-SIG base specifications).
PCIE_LANE_GB_S = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
DEFAULT_PCIE = (4, 16)  # what a GPU slot is assumed to be when the facts do not say: Gen4 x16
NVLINK_LINK_GB_S = 25.0  # per link per direction (NVLink 3 and 4) when the product table has no figure


def gpu_spec(name: Optional[str]) -> Optional[GpuSpec]:
    """The table entry for nvidia-smi's product name, None when it is not in the table."""
    if not name:
        return None
    for spec in GPU_SPECS:
        if re.search(spec.pattern, name, re.IGNORECASE):
            return spec
    return None


@dataclass(frozen=True)
class LinkFacts:
    """The slowest link of a GPU set: what one all-reduce or all-to-all step crosses."""
    kind: str  # "nvlink" | "pcie" | "none"
    word: Optional[str]  # nvidia-smi's word for the worst pair (NV18, PIX, SYS, ...)
    gb_s: float  # per direction
    description: str


def _pcie_gb_s(host: HostFacts, indices: Sequence[int], assumed: List[str]) -> float:
    rates = []
    for gpu in host.gpus:
        if gpu.index not in indices:
            continue
        gen, width = (gpu.pcie.gen_max, gpu.pcie.width_max) if gpu.pcie else (None, None)
        if not gen or not width or gen not in PCIE_LANE_GB_S:
            gen, width = DEFAULT_PCIE
            if not assumed:
                assumed.append("PCIe Gen%d x%d assumed (no pcie facts)" % DEFAULT_PCIE)
        rates.append((PCIE_LANE_GB_S[gen] * width, gen, width))
    worst = min(rates) if rates else (PCIE_LANE_GB_S[DEFAULT_PCIE[0]] * DEFAULT_PCIE[1],) + DEFAULT_PCIE
    return worst[0]


def pair_links(host: HostFacts, indices: Sequence[int]) -> List[Optional[str]]:
    """The nvidia-smi link word of every pair of ``indices`` (None where unknown)."""
    order = [g.index for g in host.gpus]
    links: List[Optional[str]] = []
    if not host.links:
        return links
    for a, b in itertools.combinations(indices, 2):
        try:
            links.append(host.links[order.index(a)][order.index(b)])
        except (ValueError, IndexError):
            links.append(None)
    return links


def group_link(host: HostFacts, indices: Sequence[int], spec: Optional[GpuSpec]) -> LinkFacts:
    """The slowest link between two GPUs of ``indices`` (one GPU: no link)."""
    if len(indices) < 2:
        return LinkFacts("none", None, 0.0, "one GPU, no link")
    words = [w for w in pair_links(host, indices) if w]
    worst = max(words, key=link_rank) if words else None
    if worst and worst.upper().startswith("NV"):
        count = int(worst[2:]) if worst[2:].isdigit() else 0
        per_link = (spec.nvlink_gb_s / spec.nvlink_links) if spec and spec.nvlink_gb_s and spec.nvlink_links \
            else NVLINK_LINK_GB_S
        gb_s = per_link * count if count else (spec.nvlink_gb_s if spec and spec.nvlink_gb_s else NVLINK_LINK_GB_S)
        return LinkFacts("nvlink", worst, gb_s, "%s (NVLink, %.0f GB/s per direction)" % (worst, gb_s))
    assumed: List[str] = []
    gb_s = _pcie_gb_s(host, indices, assumed)
    path = {"PIX": "through one PCIe switch", "PXB": "through PCIe switches", "PHB": "through the CPU's host bridge",
            "NODE": "between host bridges of one NUMA node", "SYS": "across the CPU sockets' interconnect"}
    where = path.get((worst or "").upper(), "path unknown")
    return LinkFacts("pcie", worst, gb_s, "%s (PCIe %s, %.0f GB/s per direction%s)" % (
        worst or "?", where, gb_s, "; " + assumed[0] if assumed else ""))
