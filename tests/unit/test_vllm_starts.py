# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tools/vllm_starts.py's bookkeeping (make test's starts and CPU table): bash's `times` parsed, a stage's host CPU
taken from the snapshot at its begin, unknown values marked, and files of the older three-column format read.
The journal and the cgroup are the hosts' (stood in for here by fixed values); the live run prints the table."""

import importlib.util
import os

TOOL = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tools", "vllm_starts.py")


def load():
    spec = importlib.util.spec_from_file_location("vllm_starts_unit", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_controller_cpu_is_the_childrens_user_and_system_time(tmp_path):
    tool = load()
    times = tmp_path / "stage.times"
    times.write_text("0m0.010s 0m0.020s\n1m2.500s 0m3.250s\n")  # bash's `times`: the shell, then its children
    assert tool.controller_cpu(str(times)) == 65.75
    times.write_text("garbage\n")
    assert tool.controller_cpu(str(times)) == -1.0
    assert tool.controller_cpu(str(tmp_path / "missing")) == -1.0


def test_count_and_table(tmp_path, monkeypatch):
    tool = load()
    monkeypatch.setattr(tool, "STARTS", tmp_path / "starts.tsv")
    usage = {"llmops-1": 50_000_000, "llmops-2": -1}
    monkeypatch.setattr(tool, "host_cpu_usec", lambda host: usage[host])
    monkeypatch.setattr(tool, "starts_since", lambda host, since: {"llmops-1": 2, "llmops-2": 1}[host])
    times = tmp_path / "stage.times"
    times.write_text("0m0.000s 0m0.000s\n0m40.000s 0m2.000s\n")

    tool.count("rollback", 0, ["llmops-1", "llmops-2"], "llmops-1=20000000,llmops-2=-1", str(times))
    assert (tmp_path / "starts.tsv").read_text().splitlines() == [
        "rollback\tllmops-1\t2\t30.0\t42.0", "rollback\tllmops-2\t1\t-1.0\t0.0"]

    with open(tmp_path / "starts.tsv", "a") as older:  # a line of the format before the CPU columns
        older.write("takeover\tllmops-2\t2\n")
    lines = tool.table(tmp_path / "starts.tsv")
    assert lines[1].split() == ["rollback", "3", "30+?", "42"]  # llmops-2's CPU was unknown
    assert lines[2].split() == ["takeover", "2", "0+?", "0+?"]
    assert lines[-1].split() == ["total", "5", "30", "42"]
