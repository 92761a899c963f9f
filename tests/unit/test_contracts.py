"""RETURN = contract: every module's documented result keys are its contract model's keys, with the same
types, recursively; real outputs validate against the contracts; the flag gate and the layout label."""
import ast
import copy
import importlib
import json
import os
import sys
import tempfile
import typing

import pytest
import yaml

from ansible_collections.llmops.vllm.plugins.module_utils import model_config
from ansible_collections.llmops.vllm.plugins.plugin_utils import contracts, planner
from ansible_collections.llmops.vllm.plugins.plugin_utils.contracts import PlanInputError, layout_label, requires
from replay_data import (CONFIG_NAMES, FIXTURES, H100_TOPO, H200_QUERY, H200_TOPO, L40S_QUERY, L40S_TOPO,
                         RTX_NUMACTL, RTX_QUERY, RTX_TOPO, host_facts, make_model_dir, read)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULES_DIR = os.path.join(ROOT, "plugins", "modules")
MODULES = sorted(f[:-3] for f in os.listdir(MODULES_DIR) if f.endswith(".py") and not f.startswith("_"))
# Keys Ansible owns in every result; a contract does not define them.
ANSIBLE_KEYS = {"changed", "failed", "msg", "diff", "warnings", "invocation", "skipped"}
# Modules being written while their contract is not in contracts.MODULE_CONTRACTS yet: name -> who fills it.
# Remove the entry when the model is added (test_pending_contracts_are_really_pending fails until then).
PENDING_CONTRACTS = {}
RECORDED = [os.path.join(FIXTURES, "vllm", name) for name in sorted(os.listdir(os.path.join(FIXTURES, "vllm")))
            if name.endswith(".release.json")]


def return_doc(module):
    """The RETURN YAML of a module file, parsed without importing the module."""
    tree = ast.parse(read(os.path.join(MODULES_DIR, module + ".py")))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "RETURN" for t in node.targets):
            return yaml.safe_load(node.value.value) or {}
    raise AssertionError("%s has no RETURN" % module)


def describe(annotation):
    """(ansible type, list element type, nested model) of a pydantic field annotation."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Union:
        rest = [a for a in args if a is not type(None)]
        return describe(rest[0]) if len(rest) == 1 else ("raw", None, None)
    if origin is typing.Literal:
        return describe(type(args[0]))
    if isinstance(annotation, type) and issubclass(annotation, contracts.BaseModel):
        return "dict", None, annotation
    if origin is list:
        element, _ignored, nested = describe(args[0]) if args else ("raw", None, None)
        return "list", element, nested
    if origin is dict:
        value = describe(args[1]) if args else ("raw", None, None)
        return "dict", None, value[2]  # Dict[str, Model]: `contains` documents the values
    names = {int: "int", float: "float", bool: "bool", str: "str", dict: "dict", list: "list"}
    return names.get(annotation, "raw"), None, None


def compare(model, documented, where):
    """Problems between a contract model and a RETURN mapping (or a `contains` mapping)."""
    fields = {(field.alias or name): field for name, field in model.model_fields.items()}
    keys, doc_keys = set(fields) - ANSIBLE_KEYS, set(documented) - ANSIBLE_KEYS
    problems = ["%s%s: in the contract %s, not documented" % (where, key, model.__name__) for key in sorted(keys - doc_keys)]
    problems += ["%s%s: documented, not in the contract %s" % (where, key, model.__name__) for key in sorted(doc_keys - keys)]
    for key in sorted(keys & doc_keys):
        doc = documented[key] or {}
        kind, element, nested = describe(fields[key].annotation)
        if doc.get("type") != kind:
            problems.append("%s%s: documented type %s, contract %s" % (where, key, doc.get("type"), kind))
        if kind == "list" and doc.get("elements") != element:
            problems.append("%s%s: documented elements %s, contract %s" % (where, key, doc.get("elements"), element))
        if nested is not None:
            if not isinstance(doc.get("contains"), dict):
                problems.append("%s%s: contract %s has keys, the doc has no `contains`" % (where, key, nested.__name__))
            else:
                problems += compare(nested, doc["contains"], "%s%s." % (where, key))
        elif doc.get("contains"):
            problems.append("%s%s: the doc lists `contains`, the contract has no model for it" % (where, key))
    return problems


@pytest.mark.parametrize("module", [m for m in MODULES if m not in PENDING_CONTRACTS])
def test_return_documents_exactly_the_contract(module):
    assert module in contracts.MODULE_CONTRACTS, \
        "%s has no contract model: add one to contracts.MODULE_CONTRACTS" % module
    problems = compare(contracts.MODULE_CONTRACTS[module], return_doc(module), "")
    assert not problems, "%s RETURN vs contract:\n  %s" % (module, "\n  ".join(problems))


def test_pending_contracts_are_really_pending():
    for module, owner in PENDING_CONTRACTS.items():
        assert module in MODULES, "%s: no such module any more; drop it from PENDING_CONTRACTS" % module
        assert module not in contracts.MODULE_CONTRACTS, \
            "%s has a contract now: drop it from PENDING_CONTRACTS so the RETURN test covers it (%s)" % (module, owner)


def test_describe_maps_annotations():
    assert describe(typing.Optional[int]) == ("int", None, None)
    assert describe(typing.List[contracts.Gpu]) == ("list", "dict", contracts.Gpu)
    assert describe(typing.Dict[str, contracts.NumaNode]) == ("dict", None, contracts.NumaNode)
    assert describe(typing.Union[str, typing.Dict[str, typing.List[str]]]) == ("raw", None, None)
    assert describe(typing.List[typing.List[typing.Optional[str]]]) == ("list", "list", None)


# --------------------------------------------------------------------------- real outputs


HOSTS = [(RTX_TOPO, RTX_QUERY, RTX_NUMACTL), (H200_TOPO, H200_QUERY, None), (L40S_TOPO, L40S_QUERY, None),
         (H100_TOPO, None, None)]


@pytest.fixture(scope="module")
def fixture_models():
    tmp = tempfile.mkdtemp(prefix="contracts-")
    import pathlib
    return {name: model_config.model_facts(make_model_dir(pathlib.Path(tmp), name)) for name in CONFIG_NAMES}


@pytest.mark.parametrize("name", CONFIG_NAMES)
def test_model_info_of_every_fixture_is_model_facts(fixture_models, name):
    facts = fixture_models[name]
    contracts.ModelFacts.model_validate(facts)
    undocumented = set(facts) - set(contracts.ModelFacts.model_fields)
    assert not undocumented, "model_info returns keys its contract lacks: %s" % sorted(undocumented)
    for key, model in (("moe", contracts.Moe), ("quantization", contracts.Quantization)):
        if facts[key]:
            assert not set(facts[key]) - set(model.model_fields), (key, set(facts[key]) - set(model.model_fields))


@pytest.mark.parametrize("paths", HOSTS, ids=lambda p: os.path.basename(p[0]))
def test_plans_from_real_captures_are_serving_plans(fixture_models, paths):
    host = host_facts(*paths)
    module_result = dict(host, topology_warnings=host.pop("warnings"), host={"memory_bytes": None, "cpu_count": None})
    contracts.TopologyResult.model_validate(module_result)
    for name, model in fixture_models.items():
        result = planner.plan(host, model, None, {"gpu_memory_bytes": 96 << 30, "host": "127.0.0.1", "port": 8001})
        dumped = json.loads(json.dumps(result.model_dump()))
        plan = contracts.ServingPlanResult.model_validate(dict(dumped, plan_warnings=dumped["warnings"]))
        assert (plan.host, plan.port) == ("127.0.0.1", 8001)
        if plan.layout:
            assert plan.layout == layout_label(plan.device, plan.tensor_parallel_size, plan.data_parallel_size,
                                               plan.enable_expert_parallel), name
        for candidate in plan.candidates:
            assert candidate.label == layout_label("cuda", candidate.tensor_parallel_size,
                                                   candidate.data_parallel_size, candidate.enable_expert_parallel)


@pytest.mark.parametrize("path", RECORDED, ids=os.path.basename)
def test_recorded_vllm_facts_are_vllm_facts(path):
    facts = contracts.VllmFacts.model_validate(json.loads(read(path)))
    assert facts.version


# --------------------------------------------------------------------------- the layout label


@pytest.mark.parametrize("args,label", [
    (("cpu", 1, 1, False), "cpu"), (("cuda", 1, 1, False), "TP=1"), (("cuda", 4, 1, False), "TP=4"),
    (("cuda", 4, 1, True), "TP=4+EP"), (("cuda", 4, 2, False), "TP=4 x DP=2"), (("cuda", 4, 2, True), "TP=4+EP x DP=2"),
])
def test_layout_label_has_one_spelling(args, label):
    assert layout_label(*args) == label


# --------------------------------------------------------------------------- the flag gate


def recorded_facts(path, without=(), source="installed"):
    """A recorded release as an installed vLLM, its flag list minus ``without``.

    When the fixture has no `flags` list (older recordings), one is built the way
    vllm_install.read_flags reads them: every flag the planner may emit, plus --seed.
    """
    facts = copy.deepcopy(json.loads(read(path)))
    flags = facts.get("flags") or ["--served-model-name", "--host", "--port", "--tensor-parallel-size",
                                   "--data-parallel-size", "--enable-expert-parallel", "--max-model-len",
                                   "--gpu-memory-utilization", "--kv-cache-dtype", "--enforce-eager",
                                   "--enable-auto-tool-choice", "--tool-call-parser", "--reasoning-parser",
                                   "--speculative-config", "--trust-remote-code", "--max-num-batched-tokens",
                                   "--max-num-seqs", "--numa-bind", "--seed"]
    facts["flags"] = [flag for flag in flags if flag not in without]
    facts["source"] = source
    return facts


@pytest.fixture(scope="module")
def minimax(fixture_models):
    return fixture_models["MiniMaxAI__MiniMax-M2.5.partial"]


@pytest.fixture(scope="module")
def rtx():
    return host_facts(RTX_TOPO, RTX_QUERY, RTX_NUMACTL)


@pytest.mark.parametrize("path", RECORDED, ids=os.path.basename)
def test_every_planned_flag_exists_in_the_recorded_vllm(rtx, fixture_models, path):
    facts = recorded_facts(path)
    for model in fixture_models.values():
        result = planner.plan(rtx, model, facts, {"max_model_len": 4096, "host": "0.0.0.0", "port": 8000})
        assert not any("not checked" in w for w in result.warnings)


def test_requires_matching_rules():
    vllm = contracts.VllmFacts(version="0.32.0", source="installed", flags=["--seed", "--enable-prefix-caching"])
    assert requires(vllm, "--seed=1") and requires(vllm, "--seed")
    assert requires(vllm, "--no-enable-prefix-caching")  # argparse BooleanOptionalAction
    with pytest.raises(PlanInputError, match=r"^extra_args: vLLM 0\.32\.0 \(installed\) has no flag --foo-bar; "
                                             r"remove it or upgrade vLLM$"):
        requires(vllm, "--foo-bar=2", "extra_args")
    with pytest.raises(PlanInputError, match="--no-seed-x"):
        requires(vllm, "--no-seed-x")
    assert requires(contracts.VllmFacts(version="0.32.0"), "--anything") is False  # unknown flags: not refused


def test_extra_args_flag_missing_from_the_installed_vllm_is_refused(rtx, minimax):
    path = RECORDED[0]
    facts = recorded_facts(path)
    with pytest.raises(PlanInputError) as err:
        planner.plan(rtx, minimax, facts, {"extra_args": ["--foo-bar", "1"]})
    message = str(err.value)
    assert message.startswith("extra_args: vLLM %s (installed) has no flag --foo-bar" % facts["version"]), message
    ok = planner.plan(rtx, minimax, facts, {"extra_args": ["--seed=1"]})
    assert ok.argv[-1] == "--seed=1"


def test_unknown_flags_are_not_refused_but_said(rtx, minimax):
    facts = recorded_facts(RECORDED[0])
    facts["flags"] = None
    result = planner.plan(rtx, minimax, facts, {"extra_args": ["--foo-bar"]})
    assert result.argv[-1] == "--foo-bar"
    assert any("not checked" in w for w in result.warnings)


def test_automatic_expert_parallel_is_not_chosen_without_the_flag(rtx, minimax):
    facts = recorded_facts(RECORDED[0], without=("--enable-expert-parallel",))
    result = planner.plan(rtx, minimax, facts, {"model_id": "MiniMaxAI/MiniMax-M2.5", "objective": "latency"})
    assert result.fits and not result.enable_expert_parallel and "--enable-expert-parallel" not in result.argv
    assert result.layout == "TP=4"
    assert any("no --enable-expert-parallel flag" in r for r in result.reasons)
    with pytest.raises(PlanInputError, match="enable_expert_parallel: vLLM .* has no flag --enable-expert-parallel"):
        planner.plan(rtx, minimax, facts, {"enable_expert_parallel": True})


@pytest.mark.parametrize("flag,request_,option", [
    ("--data-parallel-size", {"tensor_parallel_size": 4, "data_parallel_size": 2}, "data_parallel_size"),
    ("--kv-cache-dtype", {"kv_cache_dtype": "fp8"}, "kv_cache_dtype"),
    ("--tool-call-parser", {"tool_call_parser": "hermes"}, "tool_call_parser"),
    ("--reasoning-parser", {"reasoning_parser": "qwen3"}, "reasoning_parser"),
    ("--speculative-config", {"speculative_config": {"method": "ngram"}}, "speculative_config"),
])
def test_pinned_features_the_installed_vllm_lacks_are_refused(rtx, minimax, flag, request_, option):
    facts = recorded_facts(RECORDED[0], without=(flag,))
    with pytest.raises(PlanInputError, match="^%s: vLLM .* has no flag %s" % (option, flag)):
        planner.plan(rtx, minimax, facts, request_)


def test_automatic_parsers_and_numa_bind_are_dropped_without_their_flags(rtx, minimax):
    facts = recorded_facts(RECORDED[0], without=("--tool-call-parser", "--reasoning-parser", "--numa-bind"))
    # latency: one TP group on one node, which numactl can bind (replicas on two nodes it cannot)
    result = planner.plan(rtx, minimax, facts, {"model_id": "MiniMaxAI/MiniMax-M2.5", "objective": "latency"})
    assert result.fits and result.tool_call_parser is None and result.reasoning_parser is None
    assert any("--tool-call-parser" in w for w in result.warnings)
    assert result.numa_binding == "numactl" and "--numa-bind" not in result.argv
    with pytest.raises(PlanInputError, match="numa_bind=vllm"):
        planner.plan(rtx, minimax, facts, {"numa_bind": "vllm"})


def test_automatic_speculative_config_is_dropped_without_its_flag(rtx, fixture_models):
    facts = recorded_facts(RECORDED[-1], without=("--speculative-config",))
    result = planner.plan(rtx, fixture_models["deepseek-ai__DeepSeek-V3"], facts, {"max_model_len": 8192})
    assert result.speculative_config is None
    assert any("no --speculative-config flag" in r for r in result.reasons)


def test_cli_plan_shows_the_new_keys(tmp_path):
    import subprocess
    cli = os.path.join(os.path.dirname(sys.executable), "llmops-vllm")
    proc = subprocess.run([cli, "plan", "--topo-file", RTX_TOPO, "--query-file", RTX_QUERY, "--numactl-file", RTX_NUMACTL,
                           "--model", make_model_dir(tmp_path, "MiniMaxAI__MiniMax-M2.5.partial"),
                           "--model-id", "MiniMaxAI/MiniMax-M2.5", "--json"], capture_output=True, text=True, timeout=60,
                          check=False)
    data = json.loads(proc.stdout)
    assert proc.returncode == 0 and data["layout"] == "TP=1+EP x DP=8" and data["host"] is None and data["port"] is None
    assert all(c["label"] for c in data["candidates"])
    for key in ("concurrency", "single_stream_tok_s", "tpot_ms", "ttft_ms", "output_tok_s", "bound"):
        assert key in data["performance"], key


# Target-side modules stay stdlib-only, so their results are declared as TypedDicts there too; these
# pairs must name the same keys as the contract (the one the RETURN docs are tied to).
TARGET_SHAPES = [
    ("vllm_install.Integrity", "VllmIntegrity"),
    ("gpu_free.WaitResult", "GpuFreeResult"),
    ("gpu_free.GpuUsage", "GpuUsage"),
    ("gpu_free.GpuProcess", "GpuProcess"),
]


@pytest.mark.parametrize("typed_dict, model", TARGET_SHAPES, ids=[pair[0] for pair in TARGET_SHAPES])
def test_target_side_result_shapes_match_the_contract(typed_dict, model):
    module_name, class_name = typed_dict.split(".")
    module = importlib.import_module("ansible_collections.llmops.vllm.plugins.module_utils." + module_name)
    keys = set(typing.get_type_hints(getattr(module, class_name)))
    fields = {(field.alias or name) for name, field in getattr(contracts, model).model_fields.items()}
    assert keys == fields, "%s vs contracts.%s: only in the TypedDict %s, only in the contract %s" % (
        typed_dict, model, sorted(keys - fields), sorted(fields - keys))
