# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""module_utils/memory_soak.py: PSS of a real process tree, the least-squares slope and the leak verdict."""

import os
import random
import subprocess
import sys

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils import memory_soak


def test_pss_of_a_real_tree_counts_the_child():
    child = subprocess.Popen([sys.executable, "-c", "import time; b = bytearray(64 * 1024 * 1024); time.sleep(30)"])
    try:
        for _attempt in range(50):  # until the child has touched its 64 MiB
            size = memory_soak.pss_kib(child.pid)
            if size and size > 60 * 1024:
                break
            subprocess.run(["sleep", "0.1"], check=True)
        assert child.pid in memory_soak.tree(os.getpid())
        alone = memory_soak.pss_kib(os.getpid())
        assert alone and memory_soak.pss_kib(child.pid) > 60 * 1024
        assert sum(memory_soak.pss_kib(pid) or 0 for pid in memory_soak.tree(os.getpid())) > alone + 60 * 1024
    finally:
        child.kill()
        child.wait()
    assert memory_soak.pss_kib(child.pid) is None  # gone


def test_slope_of_a_line_and_of_noise():
    line = [(t, 1000 + 2.0 * t / 60) for t in range(0, 600, 10)]
    assert memory_soak.slope_per_minute(line) == pytest.approx(2.0)
    rng = random.Random(1)
    flat = [(t, 1000 + rng.uniform(-5, 5)) for t in range(0, 600, 10)]
    assert abs(memory_soak.slope_per_minute(flat)) < 0.5
    with pytest.raises(ValueError, match="two samples"):
        memory_soak.slope_per_minute([(0, 1)])
    with pytest.raises(ValueError, match="same time"):
        memory_soak.slope_per_minute([(5, 1), (5, 2)])


def test_the_verdict_fits_only_the_last_window():
    # warm-up growth (caches, CUDA graphs) in the first 5 minutes, flat afterwards: no leak
    samples = [(t, 1000 + (min(t, 300) / 60) * 50) for t in range(0, 601, 10)]
    verdict = memory_soak.leak_verdict(samples, window_s=300, max_mib_per_min=2.0)
    assert verdict["leaking"] is False and verdict["slope_mib_per_min"] == pytest.approx(0, abs=1e-9)
    assert verdict["samples"] == 31 and verdict["first_mib"] == 1250.0
    # 3 MiB/min all along: a leak at a 2 MiB/min limit, not at 4
    growing = [(t, 1000 + 3.0 * t / 60) for t in range(0, 601, 10)]
    assert memory_soak.leak_verdict(growing, 300, 2.0)["leaking"] is True
    assert memory_soak.leak_verdict(growing, 300, 4.0)["leaking"] is False
