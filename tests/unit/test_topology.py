# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of module_utils/topology.py and its per-source parsers (topology_*.py) against the
real captures in tests/fixtures (no Ansible)."""

import json
import os
import re
import sys
import types
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.llmops.vllm.plugins.module_utils import topology
from ansible_collections.llmops.vllm.plugins.module_utils.topology import build_topology, probe, read_host
from ansible_collections.llmops.vllm.plugins.module_utils.topology_common import (
    ANSI_RE,
    TopologyError,
    cpulist,
    infer_compute_capability,
    parse_cpulist,
)
from ansible_collections.llmops.vllm.plugins.module_utils.topology_numactl import parse_numactl
from ansible_collections.llmops.vllm.plugins.module_utils.topology_nvml import nvml_snapshot
from ansible_collections.llmops.vllm.plugins.module_utils.topology_smi_query import QUERY_FIELDS, parse_query_csv
from ansible_collections.llmops.vllm.plugins.module_utils.topology_smi_topo import parse_topo_matrix
from ansible_collections.llmops.vllm.plugins.module_utils.topology_sysfs import read_sysfs

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TOPOLOGY = FIXTURES / "topology"
GPUINFO = FIXTURES / "gpuinfo"
MIB = 1 << 20

RTXPRO_TOPO = "8x-rtxpro6000-bw-server-pcie-2numa-asus-esc8000a-e13p.txt"
H100_TOPO = "8x-h100-sxm-nv18-2numa-8mlx5.txt"
H200_TOPO = "2x-h200-sxm-nv18-1numa-vm.txt"
H200_SMI_Q = FIXTURES / "gpu" / "2x-h200-2026-11-30" / "raw" / "nvidia-smi-q.txt"


def fixture(path):
    # newline="" keeps the captured bytes as they are (no newline translation).
    with open(path, encoding="utf-8", newline="") as handle:
        return handle.read()


def topo(name):
    return fixture(TOPOLOGY / name)


def gpuinfo(name):
    return fixture(GPUINFO / name)


def pairs_with(links, word):
    return sorted(
        (i, j) for i, row in enumerate(links) for j, cell in enumerate(row) if i < j and cell == word
    )


# ----------------------------------------------------------------------------------------------
# nvidia-smi topo -m: every capture
# ----------------------------------------------------------------------------------------------

PIX_PAIRS = [(0, 1), (2, 3), (4, 5), (6, 7)]

TOPOLOGY_EXPECTED = {
    H200_TOPO: dict(count=2, numa=[0, 0], interconnect="nvlink", nics=[], affinity=["0-31"] * 2),
    "4x-l40s-pcie-2numa-mlx5.txt": dict(
        count=4,
        numa=[0, 0, 1, 1],
        interconnect="pcie",
        nics=["mlx5_0", "mlx5_1"],
        affinity=["0-95,192-287"] * 2 + ["96-191,288-383"] * 2,
    ),
    "4x-rtx6000ada-pcie-2numa-4mlx5.txt": dict(
        count=4,
        numa=[0, 0, 1, 1],
        interconnect="pcie",
        nics=["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"],
        affinity=["0-31"] * 2 + ["32-63"] * 2,
    ),
    H100_TOPO: dict(
        count=8,
        numa=[0] * 4 + [1] * 4,
        interconnect="nvlink",
        nics=["mlx5_%d" % n for n in range(8)],
        affinity=["0-47,96-143"] * 4 + ["48-95,144-191"] * 4,
    ),
    "8x-l40s-pcie-2numa-pix-pairs.normalized.txt": dict(
        # Its NIC is named only in the author's comment line, not in a NIC Legend.
        count=8,
        numa=[0] * 4 + [1] * 4,
        interconnect="pcie",
        nics=[None],
        affinity=["0-31,64-95"] * 4 + ["32-63,96-127"] * 4,
    ),
    RTXPRO_TOPO: dict(
        count=8,
        numa=[0] * 4 + [1] * 4,
        interconnect="pcie",
        nics=[],
        affinity=["0-63,128-191"] * 4 + ["64-127,192-238"] * 4,
    ),
}


def test_every_topology_fixture_has_expectations():
    assert sorted(os.listdir(TOPOLOGY)) == sorted(TOPOLOGY_EXPECTED)


@pytest.mark.parametrize("name", sorted(TOPOLOGY_EXPECTED))
def test_topology_fixture(name):
    expected = TOPOLOGY_EXPECTED[name]
    parsed = parse_topo_matrix(topo(name))
    assert [gpu["index"] for gpu in parsed["gpus"]] == list(range(expected["count"]))
    assert [gpu["numa_node"] for gpu in parsed["gpus"]] == expected["numa"]
    assert [gpu["cpu_affinity"] for gpu in parsed["gpus"]] == expected["affinity"]
    assert [nic["device"] for nic in parsed["nics"]] == expected["nics"]
    links = parsed["links"]
    assert len(links) == expected["count"] and all(len(row) == expected["count"] for row in links)
    for i, row in enumerate(links):
        assert row[i] == "X"
        for j, cell in enumerate(row):
            assert cell == links[j][i], "matrix not symmetric at %d,%d" % (i, j)
            assert re.match(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS)$", cell)

    result = build_topology(topo_text=topo(name))
    assert result["gpu_count"] == expected["count"]
    assert result["interconnect"] == expected["interconnect"]
    assert [gpu["numa_node"] for gpu in result["gpus"]] == expected["numa"]
    assert all(gpu["numa_source"] == "topo" for gpu in result["gpus"])
    assert result["links"] == links
    json.dumps(result)


def test_rtxpro6000_pcie_two_sockets():
    result = build_topology(topo_text=topo(RTXPRO_TOPO))
    links = result["links"]
    assert pairs_with(links, "PIX") == PIX_PAIRS
    for i in range(8):
        for j in range(8):
            if i != j and (i, j) not in PIX_PAIRS and (j, i) not in PIX_PAIRS:
                assert links[i][j] == ("NODE" if i // 4 == j // 4 else "SYS")
    assert result["interconnect"] == "pcie"
    assert result["numa_nodes"] == {
        "0": {"gpus": [0, 1, 2, 3], "cpus": "0-63,128-191", "cpuless": None, "memory_bytes": None},
        "1": {"gpus": [4, 5, 6, 7], "cpus": "64-127,192-238", "cpuless": None, "memory_bytes": None},
    }
    # The capture's header has ANSI underline escapes and an empty cell after NUMA Affinity.
    raw = topo(RTXPRO_TOPO)
    assert "\x1b[4m" in raw and "\t0\t\tN/A" in raw
    assert all(gpu["gpu_numa_id"] is None for gpu in parse_topo_matrix(raw)["gpus"])


def test_h100_nvlink_and_nics_are_not_gpus():
    parsed = parse_topo_matrix(topo(H100_TOPO))
    assert len(parsed["gpus"]) == 8
    assert all(
        cell == "NV18" for i, row in enumerate(parsed["links"]) for j, cell in enumerate(row) if i != j
    )
    assert [nic["name"] for nic in parsed["nics"]] == ["NIC%d" % n for n in range(8)]
    assert parsed["nics"][0]["gpu_links"] == ["PIX", "NODE", "NODE", "NODE", "SYS", "SYS", "SYS", "SYS"]
    assert parsed["nics"][7]["gpu_links"][7] == "PIX"
    result = build_topology(topo_text=topo(H100_TOPO))
    assert result["interconnect"] == "nvlink" and result["gpu_count"] == 8
    assert len(result["nics"]) == 8


def test_h200_vm():
    result = build_topology(
        topo_text=topo(H200_TOPO),
        query_text=gpuinfo("query-gpu-csv__2x-h200.txt"),
        numactl_text=gpuinfo("numactl-H__2x-h200-vm.txt"),
    )
    assert result["links"] == [["X", "NV18"], ["NV18", "X"]]
    assert result["interconnect"] == "nvlink"
    assert [gpu["numa_node"] for gpu in result["gpus"]] == [0, 0]
    assert result["numa_nodes"] == {
        "0": {"gpus": [0, 1], "cpus": "0-31", "cpuless": False, "memory_bytes": 4699 * MIB}
    }
    assert result["driver_version"] == "580.159.04"
    assert result["sources"] == ["topo", "query-csv", "numactl"]
    assert result["warnings"] == []
    first = result["gpus"][0]
    # A --query-gpu CSV says nothing about health: every field unknown, nothing refused.
    health = first.pop("health")
    assert set(value for key, value in health.items() if key != "problems") == {None}
    assert health["problems"] == []
    assert first == {
        "index": 0,
        "name": "NVIDIA H200",
        "uuid": "GPU-54fe2c2a-01cc-f1bd-b4e8-d9217823f268",
        "bus_id": "00000000:00:06.0",
        "memory_bytes": 143771 * MIB,
        "numa_node": 0,
        "numa_source": "topo",
        "cpu_affinity": "0-31",
        "compute_capability": "9.0",
        "pcie": {"gen_current": 5, "gen_max": 5, "width_current": 16, "width_max": 16, "degraded": False},
    }


def test_rtxpro_full_merge_warns_about_affinity_without_cpu_239():
    result = build_topology(
        topo_text=topo(RTXPRO_TOPO),
        query_text=gpuinfo("nvidia-smi-q__8x-rtxpro6000-asus-esc8000a-e13p.txt"),
        numactl_text=gpuinfo("numactl-H__8x-rtxpro6000-asus-esc8000a-e13p.txt"),
    )
    assert result["gpu_count"] == 8
    assert result["numa_nodes"]["1"]["cpus"] == "64-127,192-238,240-255"
    assert result["numa_nodes"]["1"]["gpus"] == [4, 5, 6, 7]
    # nvidia-smi's affinity for node 1 stops at 238 (CPU 239 is offline); numactl lists 240-255.
    assert len(result["warnings"]) == 1 and "GPUs 4, 5, 6, 7" in result["warnings"][0]
    assert result["gpus"][4]["bus_id"] == "00000000:84:00.0"
    assert result["cuda_version"] == "13.2"


def test_topo_with_prompt_and_title_lines_before_the_matrix():
    text = "$ nvidia-smi topo -m\nNVIDIA Topology:\n" + topo(H200_TOPO)
    assert parse_topo_matrix(text) == parse_topo_matrix(topo(H200_TOPO))


def test_topo_single_gpu_and_old_nic_column_names():
    single = "\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-15\tN/A\n"
    parsed = parse_topo_matrix(single)
    assert parsed["gpus"] == [{"index": 0, "cpu_affinity": "0-15", "numa_node": None, "gpu_numa_id": None}]
    assert build_topology(topo_text=single)["interconnect"] == "none"
    old = (
        "\tGPU0\tGPU1\tmlx5_0\tCPU Affinity\n"
        "GPU0\t X \tSOC\tPHB\t0-11\n"
        "GPU1\tSOC\t X \tSOC\t12-23\n"
        "mlx5_0\tPHB\tSOC\t X \t\n"
    )
    parsed = parse_topo_matrix(old)
    assert parsed["links"] == [["X", "SOC"], ["SOC", "X"]]
    assert parsed["nics"] == [{"name": "mlx5_0", "device": "mlx5_0", "gpu_links": ["PHB", "SOC"]}]
    assert build_topology(topo_text=old)["interconnect"] == "pcie"


def test_mixed_interconnect():
    text = (
        "\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\n"
        "GPU0\t X \tNV4\tPHB\t0-7\t0\n"
        "GPU1\tNV4\t X \tPHB\t0-7\t0\n"
        "GPU2\tPHB\tPHB\t X \t0-7\t0\n"
    )
    assert build_topology(topo_text=text)["interconnect"] == "mixed"


# ----------------------------------------------------------------------------------------------
# Robustness: whitespace and ANSI escapes do not change the result
# ----------------------------------------------------------------------------------------------

_WHITESPACE_RUN = re.compile(r"[ \t]+")
_SEPARATORS = st.sampled_from(["\t", " ", "  ", "   ", "\t\t", " \t", "        "])
_ESCAPES = st.sampled_from(["\x1b[4m", "\x1b[0m", "\x1b[1m", "\x1b[1;32m", ""])


def respace(text, data):
    """Replace every run of tabs/spaces by another run, and sprinkle ANSI escapes next to them."""
    out_lines = []
    for line in text.split("\n"):
        pieces = _WHITESPACE_RUN.split(line)
        runs = _WHITESPACE_RUN.findall(line)
        rebuilt = pieces[0]
        for _run, piece in zip(runs, pieces[1:], strict=True):
            separator = data.draw(_SEPARATORS)
            escape = data.draw(_ESCAPES) if not line.lstrip().startswith("#") else ""
            rebuilt += escape + separator + piece
        out_lines.append(rebuilt)
    return "\n".join(out_lines)


@pytest.mark.parametrize("name", sorted(TOPOLOGY_EXPECTED))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_topology_survives_respacing_and_ansi(name, data):
    original = topo(name)
    expected = parse_topo_matrix(original)
    assert parse_topo_matrix(respace(original, data)) == expected
    assert parse_topo_matrix(ANSI_RE.sub("", original)) == expected
    assert parse_topo_matrix(original.replace("\n", "\r\n")) == expected


@pytest.mark.parametrize("name", sorted(TOPOLOGY_EXPECTED))
def test_topology_tabs_to_spaces_and_back(name):
    original = topo(name)
    expected = parse_topo_matrix(original)
    spaced = original.expandtabs(8)
    assert parse_topo_matrix(spaced) == expected
    tabbed = "\n".join(re.sub(r" {2,}", "\t", line) for line in spaced.split("\n"))
    assert parse_topo_matrix(tabbed) == expected


# ----------------------------------------------------------------------------------------------
# --query-gpu CSV and nvidia-smi -q
# ----------------------------------------------------------------------------------------------


def test_query_csv_h200():
    parsed = parse_query_csv(gpuinfo("query-gpu-csv__2x-h200.txt"))
    assert parsed["format"] == "query-csv"
    assert [gpu["memory_bytes"] for gpu in parsed["gpus"]] == [143771 * MIB] * 2
    assert [gpu["bus_id"] for gpu in parsed["gpus"]] == ["00000000:00:06.0", "00000000:00:07.0"]
    assert [gpu["compute_capability"] for gpu in parsed["gpus"]] == ["9.0", "9.0"]
    assert parsed["driver_version"] == "580.159.04"


def test_query_csv_l40s_infers_compute_capability():
    parsed = parse_query_csv(gpuinfo("query-gpu-csv__8x-l40s.txt"))
    assert len(parsed["gpus"]) == 8
    assert {gpu["memory_bytes"] for gpu in parsed["gpus"]} == {46068 * MIB}
    assert {gpu["compute_capability"] for gpu in parsed["gpus"]} == {"8.9"}
    assert parsed["gpus"][7]["bus_id"] == "00000000:E4:00.0"
    assert all(gpu["uuid"] is None for gpu in parsed["gpus"])


def test_query_csv_degraded_only_when_width_below_max():
    rtx5060 = parse_query_csv(gpuinfo("query-gpu-pcie-csv__2x-rtx5060ti-gen3-x8.txt"))["gpus"]
    assert [gpu["pcie"]["degraded"] for gpu in rtx5060] == [False, True]
    assert rtx5060[1]["pcie"] == {
        "gen_current": 3,
        "gen_max": 3,
        "width_current": 8,
        "width_max": 16,
        "degraded": True,
    }
    assert rtx5060[0]["compute_capability"] == "12.0"
    idle = parse_query_csv(gpuinfo("query-gpu-pcie-csv__8x-l40s-idle-gen1.txt"))["gpus"]
    assert len(idle) == 8
    assert all(gpu["pcie"]["gen_current"] == 1 and gpu["pcie"]["gen_max"] == 4 for gpu in idle)
    assert not any(gpu["pcie"]["degraded"] for gpu in idle)
    result = build_topology(query_text=gpuinfo("query-gpu-pcie-csv__2x-rtx5060ti-gen3-x8.txt"))
    assert [w for w in result["warnings"] if "x8 is below its maximum x16" in w and w.startswith("GPU 1")]
    assert result["interconnect"] == "unknown"  # no topo -m: the link between the two is not known
    assert build_topology(query_text=gpuinfo("query-gpu-pcie-csv__8x-l40s-idle-gen1.txt"))["warnings"] == [
        "the link between some GPUs is unknown: give `nvidia-smi topo -m` output"
    ]


def test_query_csv_nounits_and_missing_values():
    text = (
        "index, name, memory.total [MiB], compute_cap, pcie.link.width.current, pcie.link.width.max\n"
        "0, NVIDIA A100-SXM4-80GB, 81920, [N/A], 16, [N/A]\n"
        "1, NVIDIA A10, [N/A], 8.6, [Not Supported], 16\n"
    )
    gpus = parse_query_csv(text)["gpus"]
    assert gpus[0]["memory_bytes"] == 81920 * MIB
    assert gpus[0]["compute_capability"] == "8.0"  # inferred from the name
    assert gpus[0]["pcie"]["degraded"] is None
    assert gpus[1]["memory_bytes"] is None
    assert gpus[1]["compute_capability"] == "8.6"
    assert gpus[1]["pcie"]["width_current"] is None


def test_nvidia_smi_q_rtxpro6000():
    parsed = parse_query_csv(gpuinfo("nvidia-smi-q__8x-rtxpro6000-asus-esc8000a-e13p.txt"))
    assert parsed["format"] == "nvidia-smi-q"
    gpus = parsed["gpus"]
    assert [gpu["index"] for gpu in gpus] == list(range(8))
    assert [gpu["bus_id"] for gpu in gpus] == [
        "00000000:%s:00.0" % bus for bus in ("06", "07", "75", "76", "84", "85", "F4", "F5")
    ]
    assert {gpu["memory_bytes"] for gpu in gpus} == {97887 * MIB}
    assert {gpu["compute_capability"] for gpu in gpus} == {"12.0"}
    assert {gpu["name"] for gpu in gpus} == {"NVIDIA RTX PRO 6000 Blackwell Server Edition"}
    assert gpus[0]["uuid"] == "GPU-e588912b-1368-6b4f-0e2a-0d08f8afb39b"
    assert gpus[0]["pcie"] == {
        "gen_current": 1,
        "gen_max": 5,
        "width_current": 16,
        "width_max": 16,
        "degraded": False,
    }
    assert parsed["driver_version"] == "595.58.03"
    assert parsed["cuda_version"] == "13.2"


@pytest.mark.parametrize(
    "name, architecture, expected",
    [
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "Blackwell", "12.0"),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", None, "12.0"),
        ("NVIDIA GeForce RTX 5090", None, "12.0"),
        ("NVIDIA B200", "Blackwell", "10.0"),
        ("NVIDIA GB200", None, "10.0"),
        ("NVIDIA H100 80GB HBM3", "Hopper", "9.0"),
        ("NVIDIA H200", None, "9.0"),
        ("NVIDIA H800", None, "9.0"),
        ("NVIDIA GH200 480GB", None, "9.0"),
        ("NVIDIA L40S", None, "8.9"),
        ("NVIDIA L40", None, "8.9"),
        ("NVIDIA L4", None, "8.9"),
        ("NVIDIA RTX 6000 Ada Generation", None, "8.9"),
        ("NVIDIA GeForce RTX 4090", None, "8.9"),
        ("NVIDIA A100-SXM4-80GB", None, "8.0"),
        ("NVIDIA A800 80GB PCIe", None, "8.0"),
        ("NVIDIA A30", None, "8.0"),
        ("NVIDIA A10", None, "8.6"),
        ("NVIDIA A40", None, "8.6"),
        ("NVIDIA RTX A6000", None, "8.6"),
        ("NVIDIA GeForce RTX 3090", None, "8.6"),
        ("Some Future GPU", "Blackwell", None),  # Blackwell is 10.x or 12.x: no guess
        ("Some Future GPU", "Hopper", "9.0"),
        (None, None, None),
    ],
)
def test_infer_compute_capability(name, architecture, expected):
    assert infer_compute_capability(name, architecture) == expected


# ----------------------------------------------------------------------------------------------
# numactl -H
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, expected",
    [
        ("numactl-H__2x-h200-vm.txt", {0: ("0-31", 32, 4699)}),
        (
            "numactl-H__8x-rtxpro6000-asus-esc8000a-e13p.txt",
            {0: ("0-63,128-191", 128, 773676), 1: ("64-127,192-238,240-255", 127, 774030)},
        ),
        (
            "numactl-hardware__2socket-96cpu-yarn-doc.txt",
            {0: ("0-23,48-71", 48, 191297), 1: ("24-47,72-95", 48, 191383)},
        ),
    ],
)
def test_numactl_fixture(name, expected):
    parsed = parse_numactl(gpuinfo(name))
    assert {
        node: (facts["cpus"], facts["cpu_count"], facts["size_mb"]) for node, facts in parsed["nodes"].items()
    } == expected
    assert not any(facts["cpuless"] for facts in parsed["nodes"].values())
    assert all(parsed["distances"][node][node] == 10 for node in expected)


def test_every_numactl_fixture_is_tested():
    tested = {
        "numactl-H__2x-h200-vm.txt",
        "numactl-H__8x-rtxpro6000-asus-esc8000a-e13p.txt",
        "numactl-hardware__2socket-96cpu-yarn-doc.txt",
    }
    assert {name for name in os.listdir(GPUINFO) if name.startswith("numactl")} == tested


def test_numactl_cpuless_memory_node():
    text = (
        "available: 3 nodes (0-2)\n"
        "node 0 cpus: 0 1 2 3\nnode 0 size: 1000 MB\nnode 0 free: 900 MB\n"
        "node 1 cpus: 4 5 6 7\nnode 1 size: 1000 MB\nnode 1 free: 900 MB\n"
        "node 2 cpus:\nnode 2 size: 65536 MB\nnode 2 free: 65536 MB\n"
        "node distances:\nnode   0   1   2\n  0:  10  21  14\n  1:  21  10  24\n  2:  14  24  10\n"
    )
    parsed = parse_numactl(text)
    assert parsed["nodes"][2] == {
        "cpus": "",
        "cpu_count": 0,
        "cpuless": True,
        "size_mb": 65536,
        "free_mb": 65536,
    }
    assert parsed["distances"][2] == {0: 14, 1: 24, 2: 10}
    result = build_topology(topo_text=topo("4x-l40s-pcie-2numa-mlx5.txt"), numactl_text=text)
    assert result["numa_nodes"]["2"] == {"gpus": [], "cpus": "", "cpuless": True, "memory_bytes": 65536 * MIB}


def test_numa_from_cpu_affinity_when_topo_has_no_numa_column():
    old_driver = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tSYS\t0-23,48-71\nGPU1\tSYS\t X \t24-47,72-95\n"
    result = build_topology(
        topo_text=old_driver, numactl_text=gpuinfo("numactl-hardware__2socket-96cpu-yarn-doc.txt")
    )
    assert [(gpu["numa_node"], gpu["numa_source"]) for gpu in result["gpus"]] == [
        (0, "cpu_affinity"),
        (1, "cpu_affinity"),
    ]
    assert result["warnings"] == []


def test_numactl_without_numa():
    assert parse_numactl("No NUMA available on this system\n") == {"nodes": {}, "distances": {}}


@pytest.mark.parametrize(
    "cpus, expected",
    [
        ([], ""),
        ([0], "0"),
        ([0, 1, 2, 3], "0-3"),
        ([3, 1, 2, 0, 8], "0-3,8"),
        (list(range(64)) + list(range(128, 192)), "0-63,128-191"),
        ([1, 3, 5], "1,3,5"),
    ],
)
def test_cpulist_roundtrip(cpus, expected):
    assert cpulist(cpus) == expected
    assert parse_cpulist(expected) == set(cpus)


# ----------------------------------------------------------------------------------------------
# sysfs
# ----------------------------------------------------------------------------------------------


def make_sysfs(root, numa_overrides=None, nodes=None, meminfo_kb=None):
    """A fake /sys from the values captured on the 2x H200 VM (sysfs-pci__2x-h200-vm.txt)."""
    numa_overrides = numa_overrides or {}
    for line in gpuinfo("sysfs-pci__2x-h200-vm.txt").splitlines():
        if line.startswith("#") or not line.strip():
            continue
        address, *pairs = line.split()
        values = dict(pair.split("=", 1) for pair in pairs)
        device = root / "sys" / "bus" / "pci" / "devices" / address
        device.mkdir(parents=True)
        files = {
            "class": values["class"],
            "vendor": values["vendor"],
            "device": values["device"],
            "numa_node": str(numa_overrides.get(address, values["numa"])),
            "current_link_width": values["lw"],
            "max_link_width": values["mlw"],
            # The capture wrote spaces as underscores: "32.0_GT/s_PCIe".
            "current_link_speed": values["ls"].replace("_", " "),
            "max_link_speed": values["mls"].replace("_", " "),
        }
        for name, value in files.items():
            if value:
                (device / name).write_text(value + "\n")
    for node, cpus in (nodes or {0: "0-31"}).items():
        node_dir = root / "sys" / "devices" / "system" / "node" / ("node%d" % node)
        node_dir.mkdir(parents=True)
        (node_dir / "cpulist").write_text(cpus + "\n")
        (node_dir / "meminfo").write_text(
            "Node %d MemTotal:        4811556 kB\nNode %d MemFree: 1 kB\n" % (node, node)
        )
    if meminfo_kb:
        (root / "proc").mkdir()
        (root / "proc" / "meminfo").write_text("MemTotal:       %d kB\nMemFree:  1 kB\n" % meminfo_kb)
    (root / "sys" / "devices" / "system" / "cpu").mkdir(parents=True, exist_ok=True)
    (root / "sys" / "devices" / "system" / "cpu" / "online").write_text("0-31\n")
    return root


def test_read_sysfs_h200_vm(tmp_path):
    facts = read_sysfs(make_sysfs(tmp_path))
    assert [gpu["bus_id"] for gpu in facts["gpus"]] == ["0000:00:06.0", "0000:00:07.0"]
    gpu = facts["gpus"][0]
    assert gpu["numa_node"] is None  # -1: the VM does not say
    assert gpu["device_id"] == "0x2335"
    assert gpu["pcie"] == {
        "gen_current": 5,
        "gen_max": 5,
        "width_current": 16,
        "width_max": 16,
        "degraded": False,
        "speed_current": "32.0 GT/s PCIe",
        "speed_max": "32.0 GT/s PCIe",
    }
    assert facts["numa_nodes"] == {
        0: {"cpus": "0-31", "cpu_count": 32, "cpuless": False, "memory_bytes": 4811556 * 1024}
    }


def test_sysfs_numa_minus_one_lets_topo_win(tmp_path):
    result = build_topology(topo_text=topo(H200_TOPO), sysfs_root=str(make_sysfs(tmp_path)))
    assert [(gpu["numa_node"], gpu["numa_source"]) for gpu in result["gpus"]] == [(0, "topo"), (0, "topo")]
    # No bus id in topo -m: sysfs GPUs are matched by PCI order and give theirs.
    assert [gpu["bus_id"] for gpu in result["gpus"]] == ["00000000:00:06.0", "00000000:00:07.0"]
    assert result["gpus"][0]["pcie"]["width_max"] == 16
    assert result["sources"] == ["topo", "sysfs"]
    assert result["warnings"] == []


def test_sysfs_real_node_ids_win_over_topo(tmp_path):
    root = make_sysfs(
        tmp_path, numa_overrides={"0000:00:06.0": 1, "0000:00:07.0": 0}, nodes={0: "0-15", 1: "16-31"}
    )
    # The query CSV writes bus ids as 00000000:00:06.0, sysfs as 0000:00:06.0: matched all the same.
    result = build_topology(
        topo_text=topo(H200_TOPO), query_text=gpuinfo("query-gpu-csv__2x-h200.txt"), sysfs_root=str(root)
    )
    assert [(gpu["numa_node"], gpu["numa_source"]) for gpu in result["gpus"]] == [(1, "sysfs"), (0, "sysfs")]
    assert any(w.startswith("GPU 0: NUMA node 1 from sysfs, but topo -m says 0") for w in result["warnings"])
    assert result["numa_nodes"]["1"]["gpus"] == [0]
    assert result["numa_nodes"]["0"]["gpus"] == [1]
    assert result["numa_nodes"]["1"]["cpus"] == "16-31"


def test_sysfs_gpus_without_driver(tmp_path):
    result = build_topology(sysfs_root=str(make_sysfs(tmp_path)))
    assert result["gpu_count"] == 0 and result["interconnect"] == "none"
    assert any("is the NVIDIA driver loaded" in w for w in result["warnings"])
    assert result["numa_nodes"]["0"]["cpus"] == "0-31"


def test_sources_that_disagree_on_the_gpus(tmp_path):
    root = make_sysfs(tmp_path)
    extra = root / "sys" / "bus" / "pci" / "devices" / "0000:00:08.0"
    extra.mkdir()
    (extra / "vendor").write_text("0x10de\n")
    (extra / "class").write_text("0x030200\n")
    result = build_topology(
        topo_text=topo(RTXPRO_TOPO), query_text=gpuinfo("query-gpu-csv__2x-h200.txt"), sysfs_root=str(root)
    )
    assert result["gpu_count"] == 8
    assert any("different numbers of GPUs (topo -m 8, query 2)" in w for w in result["warnings"])
    assert any(
        "sysfs lists NVIDIA GPUs that nvidia-smi/NVML do not (0000:00:08.0)" in w for w in result["warnings"]
    )
    assert result["gpus"][2]["name"] is None and result["gpus"][2]["numa_node"] == 0


def test_sysfs_ignores_nvswitch_and_missing_tree(tmp_path):
    root = make_sysfs(tmp_path / "a")
    switch = root / "sys" / "bus" / "pci" / "devices" / "0000:05:00.0"
    switch.mkdir()
    (switch / "vendor").write_text("0x10de\n")
    (switch / "class").write_text("0x068000\n")
    assert len(read_sysfs(root)["gpus"]) == 2
    assert read_sysfs(tmp_path / "nothing") == {"gpus": [], "numa_nodes": {}}


def test_read_host(tmp_path):
    assert read_host(make_sysfs(tmp_path, meminfo_kb=4811556)) == {
        "memory_bytes": 4811556 * 1024,
        "cpu_count": 32,
    }


# ----------------------------------------------------------------------------------------------
# NVML: a recorded snapshot, and a fake pynvml
# ----------------------------------------------------------------------------------------------


def h200_snapshot(numa_node=None):
    """What nvml_snapshot() records on the 2x H200 VM (written by hand in the shape it returns; a run
    there gave the same links, NUMA errors and NVLink remotes: 18 links per GPU to an NVSwitch that the
    VM shows as bus FFFFFFFF:FF:FF.0)."""

    def gpu(index, bus, uuid):
        return {
            "index": index,
            "name": "NVIDIA H200",
            "uuid": uuid,
            "bus_id": bus,
            "memory_bytes": 150754820096,
            "compute_capability": "9.0",
            "pcie": {"gen_current": 5, "gen_max": 5, "width_current": 16, "width_max": 16, "degraded": False},
            "numa_node": numa_node,
            "cpu_affinity": "0-31",
            "nvlinks": [
                {"link": n, "remote_bus_id": "FFFFFFFF:FF:FF.0", "remote_type": "switch"} for n in range(18)
            ],
        }

    return {
        "driver_version": "580.159.04",
        "cuda_version": "13.0",
        "gpus": [
            gpu(0, "00000000:00:06.0", "GPU-54fe2c2a-01cc-f1bd-b4e8-d9217823f268"),
            gpu(1, "00000000:00:07.0", "GPU-d3d6edd7-a585-6692-6525-ef4f6caa54c9"),
        ],
        "links": [["X", "NV18"], ["NV18", "X"]],
        "errors": [
            "GPU 0 nvmlDeviceGetNumaNodeId: Not Supported",
            "GPU 1 nvmlDeviceGetNumaNodeId: Not Supported",
        ],
    }


def test_recorded_nvml_snapshot_without_numa_topo_fills_in(tmp_path):
    snapshot = json.loads(json.dumps(h200_snapshot()))  # as if replayed from a file
    result = build_topology(topo_text=topo(H200_TOPO), sysfs_root=str(make_sysfs(tmp_path)), nvml=snapshot)
    assert [(gpu["numa_node"], gpu["numa_source"]) for gpu in result["gpus"]] == [(0, "topo"), (0, "topo")]
    assert result["links"] == [["X", "NV18"], ["NV18", "X"]]
    assert result["gpus"][1]["uuid"] == "GPU-d3d6edd7-a585-6692-6525-ef4f6caa54c9"
    assert result["gpus"][0]["memory_bytes"] == 150754820096
    assert result["driver_version"] == "580.159.04" and result["cuda_version"] == "13.0"
    assert result["sources"] == ["topo", "sysfs", "nvml"]
    assert result["warnings"] == []


def test_nvml_numa_wins_and_nvml_alone_gives_links():
    result = build_topology(topo_text=topo(H200_TOPO), nvml=h200_snapshot(numa_node=1))
    assert [(gpu["numa_node"], gpu["numa_source"]) for gpu in result["gpus"]] == [(1, "nvml"), (1, "nvml")]
    assert any("from NVML, but topo -m says 0" in w for w in result["warnings"])
    alone = build_topology(nvml=h200_snapshot())
    assert alone["interconnect"] == "nvlink"
    assert [(gpu["numa_node"], gpu["numa_source"]) for gpu in alone["gpus"]] == [(None, None), (None, None)]


def test_nvml_and_topo_links_disagree():
    snapshot = h200_snapshot()
    snapshot["links"] = [["X", "SYS"], ["SYS", "X"]]
    result = build_topology(topo_text=topo(H200_TOPO), nvml=snapshot)
    assert result["links"] == [["X", "NV18"], ["NV18", "X"]]
    assert any("links differ between topo -m and NVML" in w for w in result["warnings"])


class FakeNVMLError(Exception):
    def __str__(self):
        return self.args[0] if self.args else "Unknown Error"


def fake_pynvml(links="nvswitch", numa_supported=False, init_error=None, remote_type_supported=True):
    """A pynvml stand-in for 2 GPUs linked by `links`: "nvswitch" (18 links each to an NVSwitch, as
    on the H200 VM), "bridge" (4 links straight to the peer, an NVLink bridge) or "pcie" (none)."""
    nvml = types.SimpleNamespace()
    nvml.NVMLError = FakeNVMLError
    nvml.NVML_NVLINK_MAX_LINKS = 36
    nvml.NVML_P2P_CAPS_INDEX_NVLINK = 2
    buses = ["00000000:00:06.0", "00000000:00:07.0"]
    link_count = {"nvswitch": 18, "bridge": 4, "pcie": 0}[links]
    calls = []

    def init():
        calls.append("init")
        if init_error:
            raise FakeNVMLError(init_error)

    def not_supported(*_args):
        raise FakeNVMLError("Not Supported")

    def nvlink_state(handle, link):
        if link_count == 0:
            raise FakeNVMLError("Not Supported")
        if link >= link_count:
            raise FakeNVMLError("Invalid Argument")
        return 1

    def remote_pci(handle, link):
        bus = "FFFFFFFF:FF:FF.0" if links == "nvswitch" else buses[1 - handle]
        return types.SimpleNamespace(busId=bus.encode())

    nvml.nvmlInit = init
    nvml.nvmlShutdown = lambda: calls.append("shutdown")
    nvml.nvmlSystemGetDriverVersion = lambda: "580.159.04"
    nvml.nvmlSystemGetCudaDriverVersion = lambda: 13000
    nvml.nvmlDeviceGetCount = lambda: 2
    nvml.nvmlDeviceGetHandleByIndex = lambda index: index
    nvml.nvmlDeviceGetIndex = lambda handle: handle
    nvml.nvmlDeviceGetPciInfo = lambda handle: types.SimpleNamespace(busId=buses[handle].encode())
    nvml.nvmlDeviceGetMemoryInfo = lambda handle: types.SimpleNamespace(total=150754820096)
    nvml.nvmlDeviceGetCudaComputeCapability = lambda handle: (9, 0)
    nvml.nvmlDeviceGetNumaNodeId = (lambda handle: 0) if numa_supported else not_supported
    nvml.nvmlDeviceGetCpuAffinity = lambda handle, words: [0xFFFFFFFF] + [0] * (words - 1)
    nvml.nvmlDeviceGetNvLinkState = nvlink_state
    nvml.nvmlDeviceGetNvLinkRemotePciInfo = remote_pci
    nvml.nvmlDeviceGetNvLinkRemoteDeviceType = (
        (lambda handle, link: 2 if links == "nvswitch" else 0) if remote_type_supported else not_supported
    )
    nvml.nvmlDeviceGetP2PStatus = lambda first, second, index: 0
    nvml.nvmlDeviceGetTopologyCommonAncestor = lambda first, second: 40
    nvml.nvmlDeviceGetName = lambda handle: "NVIDIA H200"
    nvml.nvmlDeviceGetUUID = lambda handle: "GPU-%d" % handle
    nvml.nvmlDeviceGetCurrPcieLinkGeneration = lambda handle: 5
    nvml.nvmlDeviceGetMaxPcieLinkGeneration = lambda handle: 5
    nvml.nvmlDeviceGetCurrPcieLinkWidth = lambda handle: 16
    nvml.nvmlDeviceGetMaxPcieLinkWidth = lambda handle: 16
    nvml.calls = calls
    return nvml


def test_nvml_snapshot_with_fake_pynvml_nvswitch():
    nvml = fake_pynvml()
    snapshot = nvml_snapshot(nvml_module=nvml)
    assert nvml.calls == ["init", "shutdown"]
    json.dumps(snapshot)
    assert snapshot["links"] == [["X", "NV18"], ["NV18", "X"]]
    assert snapshot["cuda_version"] == "13.0"
    gpu = snapshot["gpus"][0]
    assert gpu["bus_id"] == "00000000:00:06.0" and gpu["numa_node"] is None and gpu["cpu_affinity"] == "0-31"
    assert gpu["compute_capability"] == "9.0" and len(gpu["nvlinks"]) == 18
    assert snapshot["errors"] == [
        "GPU 0 nvmlDeviceGetNumaNodeId: Not Supported",
        "GPU 1 nvmlDeviceGetNumaNodeId: Not Supported",
    ]
    result = build_topology(topo_text=topo(H200_TOPO), nvml=snapshot)
    assert [(g["numa_node"], g["numa_source"]) for g in result["gpus"]] == [(0, "topo"), (0, "topo")]
    assert result["warnings"] == []


@pytest.mark.parametrize(
    "links, remote_type_supported, expected",
    [
        ("nvswitch", False, "NV18"),  # old driver: a remote that is none of our GPUs is a switch
        ("bridge", True, "NV4"),
        ("bridge", False, "NV4"),
    ],
)
def test_nvml_snapshot_link_counting(links, remote_type_supported, expected):
    snapshot = nvml_snapshot(
        nvml_module=fake_pynvml(links=links, remote_type_supported=remote_type_supported)
    )
    assert snapshot["links"] == [["X", expected], [expected, "X"]]


def test_nvml_snapshot_pcie_only_uses_common_ancestor():
    snapshot = nvml_snapshot(nvml_module=fake_pynvml(links="pcie", numa_supported=True))
    assert snapshot["links"] == [["X", "NODE"], ["NODE", "X"]]
    assert snapshot["errors"] == []  # no NVLink on a PCIe GPU is not an error
    assert [gpu["numa_node"] for gpu in snapshot["gpus"]] == [0, 0]


def test_nvml_snapshot_unavailable(monkeypatch):
    assert nvml_snapshot(nvml_module=fake_pynvml(init_error="NVML Shared Library Not Found")) is None
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    assert nvml_snapshot() is None


def test_bad_nvml_snapshot():
    with pytest.raises(TopologyError, match="nvml snapshot: expected a dict with a `gpus` list"):
        build_topology(nvml={"devices": []})


# ----------------------------------------------------------------------------------------------
# No GPU at all; bad input
# ----------------------------------------------------------------------------------------------


def test_no_gpu_at_all():
    result = build_topology()
    assert result == {
        "gpus": [],
        "links": [],
        "interconnect": "none",
        "numa_nodes": {},
        "nics": [],
        "gpu_count": 0,
        "driver_version": None,
        "cuda_version": None,
        "sources": [],
        "warnings": [],
    }


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: parse_topo_matrix(""), r"^topo file: empty; expected `nvidia-smi topo -m` output"),
        (lambda: parse_topo_matrix("   \n\t\n"), r"^topo file: empty"),
        (
            lambda: parse_topo_matrix("hello\nworld 1 2 3\n"),
            r"^topo file: no GPU header row found; expected `nvidia-smi topo -m` output",
        ),
        (lambda: parse_topo_matrix(gpuinfo("query-gpu-csv__2x-h200.txt")), r"no GPU header row found"),
        (lambda: parse_topo_matrix(gpuinfo("topo-p2p-rw__8x-l40s.txt")), r"GPU0/GPU1 is 'OK'.*topo -p2p"),
        (lambda: parse_topo_matrix("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV4\t0-7\n"), r"no row for GPU1"),
        (
            lambda: parse_topo_matrix("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \nGPU1\tNV4\t X \t0-7\n"),
            r"row GPU0 has 1 link cells, expected 2",
        ),
        (lambda: parse_query_csv(""), r"^query file: empty; expected `nvidia-smi --query-gpu"),
        (lambda: parse_query_csv("garbage\n"), r"^query file line 1: no `index` column"),
        (
            lambda: parse_query_csv("name, memory.total [MiB]\nNVIDIA H200, 143771 MiB\n"),
            r"^query file line 1: no `index` column in the header 'name, memory.total \[MiB\]'",
        ),
        (
            lambda: parse_query_csv("index, name\n0, A, B\n"),
            r"^query file line 2: 3 values, the header has 2",
        ),
        (lambda: parse_query_csv("index, name\nzero, A\n"), r"index 'zero' is not a number"),
        (lambda: parse_numactl(""), r"^numactl file: empty; expected `numactl -H`"),
        (
            lambda: parse_numactl("garbage\n"),
            r"^numactl file: no `available:` line and no `node N cpus:` lines",
        ),
        (
            lambda: build_topology(sysfs_root="/nonexistent/llmops"),
            r"^sysfs root /nonexistent/llmops: not a directory",
        ),
    ],
)
def test_bad_input_raises_readable_topology_error(call, message):
    with pytest.raises(TopologyError, match=message) as caught:
        call()
    assert isinstance(caught.value, ValueError)
    assert "Traceback" not in str(caught.value)


# ----------------------------------------------------------------------------------------------
# probe() with an injected run_command
# ----------------------------------------------------------------------------------------------


def fake_runner(responses):
    """run_command that answers from {argv tuple or its first words: (rc, out, err)}, recording argv."""
    seen = []

    def run(argv):
        assert isinstance(argv, list), "commands are argv lists, never shell strings"
        seen.append(argv)
        for length in (len(argv), 2, 1):
            key = tuple(argv[:length])
            if key in responses:
                answer = responses[key]
                return answer(argv) if callable(answer) else answer
        raise AssertionError("unexpected command %r" % (argv,))

    run.seen = seen
    return run


@pytest.fixture
def no_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)


def test_probe_h200(tmp_path, no_nvml):
    run = fake_runner(
        {
            ("/usr/bin/nvidia-smi", "topo"): (0, topo(H200_TOPO), ""),
            ("/usr/bin/nvidia-smi",): (0, gpuinfo("query-gpu-csv__2x-h200.txt"), ""),
            ("/usr/bin/nvidia-smi", "-q"): (0, fixture(H200_SMI_Q), ""),
            ("/usr/bin/numactl", "-H"): (0, gpuinfo("numactl-H__2x-h200-vm.txt"), ""),
        }
    )
    result = probe(
        run,
        use_nvml="auto",
        sysfs_root=str(make_sysfs(tmp_path, meminfo_kb=4811556)),
        nvidia_smi_path="/usr/bin/nvidia-smi",
        numactl_path="/usr/bin/numactl",
    )
    assert run.seen[0] == ["/usr/bin/nvidia-smi", "topo", "-m"]
    assert run.seen[1] == [
        "/usr/bin/nvidia-smi",
        "--query-gpu=" + ",".join(QUERY_FIELDS),
        "--format=csv",
    ]
    assert run.seen[2] == ["/usr/bin/nvidia-smi", "-q"]
    assert run.seen[3] == ["/usr/bin/numactl", "-H"]
    assert result["gpu_count"] == 2 and result["interconnect"] == "nvlink"
    # Health from `nvidia-smi -q` of the same VM kind, matched by bus id: all well, nothing refused.
    for gpu in result["gpus"]:
        assert gpu["health"]["persistence_mode"] is True and gpu["health"]["mig_mode"] is False
        assert gpu["health"]["ecc_uncorrected_volatile"] == 0 and gpu["health"]["throttle_reasons"] == ["idle"]
        assert gpu["health"]["processes"] == [] and gpu["health"]["problems"] == []
    assert result["sources"] == ["topo", "query-csv", "numactl", "sysfs", "nvidia-smi-q"]
    assert [(gpu["numa_node"], gpu["numa_source"]) for gpu in result["gpus"]] == [(0, "topo"), (0, "topo")]
    assert result["host"] == {"memory_bytes": 4811556 * 1024, "cpu_count": 32}
    assert result["warnings"] == []


def test_probe_retries_query_without_compute_cap(tmp_path, no_nvml):
    without = "\n".join(
        line.rsplit(", ", 2)[0] + ", " + line.rsplit(", ", 1)[1]
        for line in gpuinfo("query-gpu-csv__2x-h200.txt").splitlines()[1:]
    )

    def query(argv):
        if "compute_cap" in argv[1]:
            return 2, 'Field "compute_cap" is not a valid field to query.\n', ""
        return 0, without, ""

    run = fake_runner({("nvidia-smi", "topo"): (0, topo(H200_TOPO), ""), ("nvidia-smi",): query})
    result = probe(
        run, use_nvml="never", sysfs_root=str(tmp_path), nvidia_smi_path="nvidia-smi", numactl_path=""
    )
    assert "compute_cap" not in run.seen[2][1]
    assert [gpu["compute_capability"] for gpu in result["gpus"]] == ["9.0", "9.0"]  # inferred from the name
    assert any("does not know the compute_cap field" in w for w in result["warnings"])


def test_probe_cpu_only_host(tmp_path, monkeypatch, no_nvml):
    monkeypatch.setattr(topology.shutil, "which", lambda name: None)
    run = fake_runner({})
    result = probe(run, sysfs_root=str(make_sysfs(tmp_path, meminfo_kb=1024)))
    assert run.seen == []
    assert result["gpu_count"] == 0 and result["interconnect"] == "none" and result["gpus"] == []
    assert result["host"]["memory_bytes"] == 1024 * 1024


def test_probe_no_devices_and_driver_failure(tmp_path, no_nvml):
    run = fake_runner({("nvidia-smi", "topo"): (6, "No devices were found\n", "")})
    result = probe(
        run, use_nvml="never", sysfs_root=str(tmp_path), nvidia_smi_path="nvidia-smi", numactl_path=""
    )
    assert result["gpu_count"] == 0 and "nvidia-smi found no GPU" in result["warnings"][0]
    failing = fake_runner(
        {
            ("nvidia-smi", "topo"): (
                9,
                "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
                "",
            )
        }
    )
    with pytest.raises(TopologyError, match=r"`nvidia-smi topo -m` failed \(rc=9\): NVIDIA-SMI has failed"):
        probe(
            failing, use_nvml="never", sysfs_root=str(tmp_path), nvidia_smi_path="nvidia-smi", numactl_path=""
        )


def test_probe_use_nvml(tmp_path, monkeypatch, no_nvml):
    monkeypatch.setattr(topology.shutil, "which", lambda name: None)
    with pytest.raises(TopologyError, match=r"use_nvml=always, but NVML is not available: the pynvml module"):
        probe(fake_runner({}), use_nvml="always", sysfs_root=str(tmp_path))
    with pytest.raises(TopologyError, match=r"use_nvml: 'sometimes' is not one of auto, always, never"):
        probe(fake_runner({}), use_nvml="sometimes", sysfs_root=str(tmp_path))
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    result = probe(fake_runner({}), use_nvml="always", sysfs_root=str(make_sysfs(tmp_path)))
    assert result["sources"] == ["sysfs", "nvml"]
    assert result["gpu_count"] == 2 and result["interconnect"] == "nvlink"
    assert [gpu["pcie"]["width_current"] for gpu in result["gpus"]] == [16, 16]
