# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Facts about a model from its Hugging Face files, without loading any weights.

Reads ``config.json`` (through multimodal wrappers such as ``text_config``), ModelOpt's
``hf_quant_config.json`` and ``model.safetensors.index.json`` and answers what the serving planner
needs: attention kind, KV-cache bytes per token, MoE shape, quantization, MTP layers and the
weights' size (measured when the checkpoint says it, estimated from the config otherwise).

Target side: Python standard library only, so the ``model_info`` module can run it on a GPU host.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from typing import Any, Dict, List, Literal, Optional, Set, Tuple, TypedDict, overload

CONFIG_FILE = "config.json"
QUANT_CONFIG_FILE = "hf_quant_config.json"
INDEX_FILE = "model.safetensors.index.json"

# Wrappers that keep the language model's numbers under a sub-config (Kimi-K2.5, Llava-style
# VLMs, InternVL, DeepSeek-VL2).
TEXT_CONFIG_KEYS = ("text_config", "llm_config", "language_config")

DTYPE_BYTES = {
    "float32": 4, "fp32": 4, "float": 4,
    "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2,
    "float8_e4m3fn": 1, "fp8": 1,
}

# Bytes per parameter of a quantized linear layer, scales included:
# FP8 block scales (fp32 per 128x128) are negligible; NVFP4 packs two 4-bit values per byte plus an
# FP8 scale per 16 values; MXFP4 the same with an 8-bit scale per 32; INT4 group quantization a
# bf16 scale per group.
# A parsed JSON file of the checkpoint (config.json, hf_quant_config.json, the safetensors index)
# or a dict of facts derived from it: arbitrary JSON, checked field by field below.
Json = Dict[str, Any]

NVFP4_BYTES = 0.5 + 1 / 16
MXFP4_BYTES = 0.5 + 1 / 32


class ModelConfigError(ValueError):
    """A model's files cannot be read or do not describe a decoder model."""


class ModelFiles(TypedDict):
    """What load_model_files() read; the optional files are None when absent."""
    config: Json
    hf_quant_config: Optional[Json]
    index: Optional[Json]
    file_sizes: Dict[str, int]
    path: str


def _read_json(path: str, what: str) -> Json:
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        raise ModelConfigError("%s %s: cannot read it (%s)" % (what, path, exc.strerror or exc))
    if not raw.strip():
        raise ModelConfigError("%s %s: the file is empty; expected a JSON object" % (what, path))
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ModelConfigError("%s %s: not valid JSON (%s)" % (what, path, exc))
    if not isinstance(data, dict):
        raise ModelConfigError("%s %s: expected a JSON object, found %s" % (what, path, type(data).__name__))
    return data


def load_model_files(path: str) -> ModelFiles:
    """Read what a model directory (or a bare config.json) holds.

    Returns ``{"config", "hf_quant_config", "index", "file_sizes", "path"}``; the optional parts are
    None when absent. ``file_sizes`` maps each ``*.safetensors`` file in the directory to its size.
    """
    if not path:
        raise ModelConfigError("model path is empty; pass a directory with config.json or a config.json file")
    if os.path.isdir(path):
        directory = path
        config_path = os.path.join(path, CONFIG_FILE)
        if not os.path.exists(config_path):
            raise ModelConfigError("model directory %s has no %s" % (path, CONFIG_FILE))
    elif os.path.isfile(path):
        directory = os.path.dirname(os.path.abspath(path))
        config_path = path
    elif os.path.exists(path):
        raise ModelConfigError("model path %s is neither a directory nor a regular file; pass a directory with "
                               "config.json or a config.json file" % path)
    else:
        raise ModelConfigError("model path %s does not exist; pass a directory with config.json or a config.json file" % path)

    config = _read_json(config_path, "model config")
    hf_quant_config: Optional[Json] = None
    index: Optional[Json] = None
    file_sizes: Dict[str, int] = {}
    # Companion files are only trusted next to a file really named config.json: a fixture such as
    # "org__name.json" sits beside other models' files.
    if os.path.basename(config_path) == CONFIG_FILE:
        quant_path = os.path.join(directory, QUANT_CONFIG_FILE)
        if os.path.exists(quant_path):
            hf_quant_config = _read_json(quant_path, "ModelOpt quantization config")
        index_path = os.path.join(directory, INDEX_FILE)
        if os.path.exists(index_path):
            index = _read_json(index_path, "safetensors index")
        for name in sorted(os.listdir(directory)):
            if name.endswith(".safetensors"):
                file_sizes[name] = os.path.getsize(os.path.join(directory, name))
    return {"config": config, "hf_quant_config": hf_quant_config, "index": index,
            "file_sizes": file_sizes, "path": path}


def text_config(config: Json) -> Json:
    """The sub-config that describes the language model (the config itself for plain LLMs)."""
    for key in TEXT_CONFIG_KEYS:
        sub = config.get(key)
        if isinstance(sub, dict) and sub.get("num_hidden_layers"):
            return sub
    return config


def _first(cfg: Json, *keys: str, default: Any = None) -> Any:
    for key in keys:
        value = cfg.get(key)
        if value is not None:
            return value
    return default


@overload
def _int_field(cfg: Json, name: str, *keys: str, required: Literal[True] = ...) -> int: ...


@overload
def _int_field(cfg: Json, name: str, *keys: str, required: Literal[False]) -> Optional[int]: ...


def _int_field(cfg: Json, name: str, *keys: str, required: bool = True) -> Optional[int]:
    value = _first(cfg, *keys)
    if value is None:
        if required:
            raise ModelConfigError("model config: %s is missing (looked for %s)" % (name, ", ".join(keys)))
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value < 0:
        raise ModelConfigError("model config: %s must be a non-negative integer, found %r" % (name, value))
    return int(value)


def attention_shape(cfg: Json) -> Json:
    """Attention kind and the numbers KV-cache sizing needs."""
    layers = _int_field(cfg, "num_hidden_layers", "num_hidden_layers", "n_layer", "num_layers")
    heads = _int_field(cfg, "num_attention_heads", "num_attention_heads", "n_head", "num_heads")
    if layers == 0 or heads == 0:
        raise ModelConfigError("model config: num_hidden_layers and num_attention_heads must be > 0")
    hidden = _int_field(cfg, "hidden_size", "hidden_size", "n_embd", "d_model", required=False)
    if cfg.get("kv_lora_rank") is not None:
        rank = _int_field(cfg, "kv_lora_rank", "kv_lora_rank")
        rope = _int_field(cfg, "qk_rope_head_dim", "qk_rope_head_dim")
        nope = _int_field(cfg, "qk_nope_head_dim", "qk_nope_head_dim", required=False) or 0
        return {
            "attention": "mla", "num_layers": layers, "num_attention_heads": heads,
            "num_kv_heads": _int_field(cfg, "num_key_value_heads", "num_key_value_heads", required=False) or heads,
            "head_dim": nope + rope, "kv_lora_rank": rank, "qk_rope_head_dim": rope,
            # MLA caches one latent vector (+ the shared rope key) per token and layer.
            "kv_elements_per_token": layers * (rank + rope),
        }
    kv_heads = _int_field(cfg, "num_key_value_heads", "num_key_value_heads", "num_kv_heads", required=False)
    if kv_heads is None:
        kv_heads = 1 if cfg.get("multi_query") else heads
    head_dim = _int_field(cfg, "head_dim", "head_dim", required=False)
    if not head_dim:
        if not hidden:
            raise ModelConfigError("model config: neither head_dim nor hidden_size is given")
        head_dim = hidden // heads
    if kv_heads == 1:
        kind = "mqa"
    elif kv_heads < heads:
        kind = "gqa"
    else:
        kind = "mha"
    return {
        "attention": kind, "num_layers": layers, "num_attention_heads": heads, "num_kv_heads": kv_heads,
        "head_dim": head_dim, "kv_elements_per_token": 2 * layers * kv_heads * head_dim,
    }


def moe_shape(cfg: Json) -> Optional[Json]:
    """``{num_experts, experts_per_token, intermediate_size (per expert), ...}`` or None."""
    experts = _first(cfg, "n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts")
    if not experts:
        return None
    per_token = _first(cfg, "num_experts_per_tok", "moe_topk", "num_experts_per_token", "top_k", default=None)
    # Mixtral/MiniMax name experts num_local_experts and keep the per-expert size in
    # intermediate_size; DeepSeek/Qwen-MoE have a separate moe_intermediate_size.
    size = cfg.get("moe_intermediate_size")
    if size is None and cfg.get("num_local_experts"):
        size = cfg.get("intermediate_size")
    shared_experts = int(cfg.get("n_shared_experts") or 0)
    shared_size = cfg.get("shared_expert_intermediate_size") or cfg.get("shared_intermediate_size") or 0
    if shared_experts and not shared_size and size:
        shared_size = shared_experts * size
    layers = cfg.get("num_hidden_layers") or 0
    dense_layers = int(cfg.get("first_k_dense_replace") or 0)
    dense_layers += len([i for i in (cfg.get("mlp_only_layers") or []) if i >= dense_layers])
    step = int(cfg.get("decoder_sparse_step") or 1)
    moe_layers = len([i for i in range(dense_layers, layers) if (i + 1) % step == 0]) if step > 1 else layers - dense_layers
    return {
        "num_experts": int(experts),
        "experts_per_token": int(per_token) if per_token else None,
        "intermediate_size": int(size) if size else None,
        "shared_expert_intermediate_size": int(shared_size),
        "moe_layers": moe_layers,
        "dense_layers": layers - moe_layers,
    }


def _weight_scheme(group: Optional[Json]) -> Tuple[Optional[str], Any, Any]:
    weights = (group or {}).get("weights") or {}
    bits, kind = weights.get("num_bits"), weights.get("type")
    if bits == 4 and kind == "float" and weights.get("group_size") == 16:
        return "nvfp4", 4, 16
    if bits == 8 and kind == "float":
        return "fp8", 8, weights.get("group_size")
    if bits:
        return "%s%s" % (kind or "int", bits), bits, weights.get("group_size")
    return None, None, None


def quantization(config: Json, cfg: Json, hf_quant_config: Optional[Json] = None) -> Optional[Json]:
    """Normalised quantization facts, or None for an unquantized checkpoint.

    ``method`` is the lower-case ``quant_method`` except for ModelOpt checkpoints, where the
    algorithm (``nvfp4``, ``fp8``) is what decides hardware support and size.
    """
    qc = config.get("quantization_config") or cfg.get("quantization_config")
    if hf_quant_config and not qc:
        quant = hf_quant_config.get("quantization") or {}
        algo = quant.get("quant_algo")
        if not algo:
            raise ModelConfigError("ModelOpt quantization config: quantization.quant_algo is missing")
        return {
            "method": str(algo).lower(), "format": "modelopt", "block_size": None,
            "weight_bits": 4 if "FP4" in str(algo).upper() else 8,
            "group_size": quant.get("group_size"),
            "kv_cache": (quant.get("kv_cache_quant_algo") or "").lower() or None,
            "ignored": list(quant.get("exclude_modules") or []),
            "source": QUANT_CONFIG_FILE,
        }
    if not qc:
        return None
    if not isinstance(qc, dict) or not qc.get("quant_method"):
        raise ModelConfigError("model config: quantization_config has no quant_method")
    method = str(qc["quant_method"]).lower()
    result: Json = {"method": method, "format": None, "block_size": None, "weight_bits": None,
                    "group_size": None, "kv_cache": None, "ignored": [], "source": CONFIG_FILE}
    if method == "fp8":
        block = qc.get("weight_block_size")
        result.update(format=qc.get("fmt") or "e4m3", weight_bits=8,
                      block_size=int(block[0]) if block else None,
                      ignored=list(qc.get("modules_to_not_convert") or qc.get("ignored_layers") or []))
    elif method == "modelopt":
        algo = str(qc.get("quant_algo") or "").lower()
        if not algo:
            raise ModelConfigError("model config: modelopt quantization_config has no quant_algo")
        result.update(method=algo, format="modelopt", weight_bits=4 if "fp4" in algo else 8,
                      ignored=list(qc.get("ignore") or qc.get("exclude_modules") or []))
        scheme = qc.get("kv_cache_scheme") or {}
        if scheme.get("type") == "float" and scheme.get("num_bits") == 8:
            result["kv_cache"] = "fp8"
        groups = list((qc.get("config_groups") or {}).values())
        if groups:
            result["group_size"] = (groups[0].get("weights") or {}).get("group_size")
    elif method == "compressed-tensors":
        groups = list((qc.get("config_groups") or {}).values())
        scheme, bits, group_size = _weight_scheme(groups[0] if groups else None)
        result.update(format=qc.get("format"), weight_bits=bits, group_size=group_size, scheme=scheme,
                      ignored=list(qc.get("ignore") or []))
        block = ((groups[0] if groups else {}).get("weights") or {}).get("block_structure")
        if block:
            result["block_size"] = int(block[0])
        kv = qc.get("kv_cache_scheme") or {}
        if kv.get("type") == "float" and kv.get("num_bits") == 8:
            result["kv_cache"] = "fp8"
    elif method in ("awq", "gptq", "awq_marlin", "gptq_marlin", "bitsandbytes", "mxfp4", "fbgemm_fp8"):
        bits = qc.get("bits") or qc.get("w_bit") or (4 if method == "mxfp4" else None)
        result.update(format=qc.get("version") or qc.get("format"), weight_bits=bits,
                      group_size=qc.get("group_size") or qc.get("q_group_size"),
                      ignored=list(qc.get("modules_to_not_convert") or []))
    return result


# Representative module names per weight group, used to decide whether a quantization config's
# ignore/exclude patterns keep that group in 16 bits. Layer 1 stands for "any layer".
_GROUP_MODULES = {
    "attention": ("model.layers.1.self_attn.q_proj", "model.layers.1.self_attn.o_proj",
                  "model.layers.1.self_attn.kv_a_proj_with_mqa"),
    "dense_mlp": ("model.layers.1.mlp.gate_proj", "model.layers.1.mlp.down_proj"),
    "experts": ("model.layers.1.mlp.experts.1.gate_proj", "model.layers.1.block_sparse_moe.experts.1.w1"),
    "shared_experts": ("model.layers.1.mlp.shared_experts.gate_proj", "model.layers.1.mlp.shared_expert.gate_proj"),
    "lm_head": ("lm_head",),
}
_PREFIXES = ("", "language_model.", "model.language_model.")


def _pattern_matches(pattern: str, name: str) -> bool:
    if pattern.startswith("re:"):
        return re.fullmatch(pattern[3:], name) is not None
    if any(ch in pattern for ch in "*?["):
        return fnmatch.fnmatchcase(name, pattern)
    # Plain names (fp8 modules_to_not_convert) match whole dotted components at the end.
    return name == pattern or name.endswith("." + pattern) or ("." + pattern + ".") in ("." + name + ".")


def excluded_groups(ignored: Optional[List[str]]) -> Set[str]:
    """Weight groups that a quantization config leaves unquantized."""
    out: Set[str] = set()
    for group, names in _GROUP_MODULES.items():
        for pattern in ignored or ():
            if any(_pattern_matches(pattern, prefix + name) for name in names for prefix in _PREFIXES):
                out.add(group)
                break
    return out


def _quantized_bytes(quant: Json) -> Optional[float]:
    method = quant["method"]
    if method in ("fp8", "fbgemm_fp8") or (method == "compressed-tensors" and quant.get("weight_bits") == 8):
        return 1.0
    if method == "nvfp4" or quant.get("scheme") == "nvfp4":
        return NVFP4_BYTES
    if method == "mxfp4":
        return MXFP4_BYTES
    bits: Optional[int] = quant.get("weight_bits")
    if bits:
        group: int = quant.get("group_size") or 128
        return bits / 8 + 2 / group
    return None


def estimate_parameters(cfg: Json, attention: Json, moe: Optional[Json], mtp_layers: int = 0) -> Dict[str, int]:
    """Parameter counts per weight group from the config's shapes (norms and biases left out)."""
    hidden = _int_field(cfg, "hidden_size", "hidden_size", "n_embd", "d_model")
    vocab = _int_field(cfg, "vocab_size", "vocab_size", "padded_vocab_size")
    layers, heads = attention["num_layers"], attention["num_attention_heads"]
    if attention["attention"] == "mla":
        nope = int(cfg.get("qk_nope_head_dim") or 0)
        rope = attention["qk_rope_head_dim"]
        v_dim = int(cfg.get("v_head_dim") or nope)
        q_rank = cfg.get("q_lora_rank")
        q = hidden * q_rank + q_rank * heads * (nope + rope) if q_rank else hidden * heads * (nope + rope)
        per_layer_attn = (q + hidden * (attention["kv_lora_rank"] + rope)
                          + attention["kv_lora_rank"] * heads * (nope + v_dim) + heads * v_dim * hidden)
    else:
        head_dim, kv_heads = attention["head_dim"], attention["num_kv_heads"]
        per_layer_attn = hidden * head_dim * (2 * heads + 2 * kv_heads)
    dense_size = int(cfg.get("intermediate_size") or 4 * hidden)
    counts: Dict[str, float] = {"embedding": vocab * hidden,
                                "lm_head": 0 if cfg.get("tie_word_embeddings") else vocab * hidden,
                                "attention": per_layer_attn * layers, "dense_mlp": 0, "experts": 0,
                                "shared_experts": 0, "router": 0}
    if moe and moe.get("intermediate_size"):
        counts["experts"] = moe["moe_layers"] * moe["num_experts"] * 3 * hidden * moe["intermediate_size"]
        counts["shared_experts"] = moe["moe_layers"] * 3 * hidden * moe["shared_expert_intermediate_size"]
        counts["router"] = moe["moe_layers"] * hidden * moe["num_experts"]
        counts["dense_mlp"] = moe["dense_layers"] * 3 * hidden * dense_size
    else:
        counts["dense_mlp"] = layers * 3 * hidden * dense_size
    if mtp_layers:
        # Each MTP module is one more decoder layer (MoE where the model is) plus its projection.
        per_layer = {k: counts[k] / max(layers, 1) for k in ("attention",)}
        counts["attention"] += per_layer["attention"] * mtp_layers
        if moe and moe.get("intermediate_size") and moe["moe_layers"]:
            counts["experts"] += counts["experts"] / moe["moe_layers"] * mtp_layers
            counts["shared_experts"] += counts["shared_experts"] / moe["moe_layers"] * mtp_layers
        elif layers:
            counts["dense_mlp"] += counts["dense_mlp"] / layers * mtp_layers
        counts["attention"] += 2 * hidden * hidden * mtp_layers
    return {k: int(v) for k, v in counts.items()}


def estimate_weight_bytes(cfg: Json, params: Dict[str, int], quant: Optional[Json]) -> Dict[str, int]:
    """Bytes per weight group: quantized groups at the quantized size, the rest at the dtype."""
    dtype = str(_first(cfg, "torch_dtype", "dtype", default="bfloat16")).replace("torch.", "")
    base = DTYPE_BYTES.get(dtype, 2)
    if base < 2:
        base = 2  # a config saying float8 for the whole model still keeps embeddings in 16 bits
    quantized = _quantized_bytes(quant) if quant else None
    skip = excluded_groups(quant.get("ignored")) if quant else set()
    out: Dict[str, float] = {}
    for group, count in params.items():
        if quantized and group in ("attention", "dense_mlp", "experts", "shared_experts", "lm_head") and group not in skip:
            out[group] = count * quantized
        else:
            out[group] = count * base
    return {k: int(v) for k, v in out.items()}


def analyze(config: Any, hf_quant_config: Optional[Json] = None, index: Optional[Json] = None,
            file_sizes: Optional[Dict[str, int]] = None) -> Json:
    """The ``model`` contract (see ARCHITECTURE.md) from already-parsed files."""
    if not isinstance(config, dict):
        raise ModelConfigError("model config: expected a JSON object")
    architectures = config.get("architectures")
    if not architectures or not isinstance(architectures, list) or not all(isinstance(a, str) for a in architectures):
        raise ModelConfigError(
            "model config: 'architectures' is missing or empty; a Hugging Face config.json names the model "
            "class there (e.g. [\"LlamaForCausalLM\"])")
    cfg = text_config(config)
    attention = attention_shape(cfg)
    moe = moe_shape(cfg)
    quant = quantization(config, cfg, hf_quant_config)
    mtp = int(_first(cfg, "num_nextn_predict_layers", "num_mtp_modules", default=0) or 0)
    max_pos = _first(cfg, "max_position_embeddings", "max_sequence_length", "seq_length", "n_positions")

    # DeepSeek-style checkpoints ship their MTP layers (DeepSeek-V3: 671B + 14B); MiniMax's
    # num_mtp_modules are not in the released weights (228.7B parameters = the 62 main layers).
    params = estimate_parameters(cfg, attention, moe, int(cfg.get("num_nextn_predict_layers") or 0))
    estimated = estimate_weight_bytes(cfg, params, quant)
    estimated_total = sum(estimated.values())
    total: Optional[int] = None
    source = "estimate"
    if index and isinstance(index.get("metadata"), dict) and index["metadata"].get("total_size"):
        total, source = int(index["metadata"]["total_size"]), "index"
    elif file_sizes:
        total, source = int(sum(file_sizes.values())), "files"
    expert_bytes = estimated["experts"]
    expert_fraction = expert_bytes / estimated_total if estimated_total else 0.0
    weights = total if total is not None else estimated_total

    quant_out: Optional[Json] = None
    if quant:
        quant_out = {k: quant[k] for k in ("method", "format", "block_size", "weight_bits", "group_size", "kv_cache")}
        quant_out["unquantized_groups"] = sorted(excluded_groups(quant.get("ignored")))
        quant_out["source"] = quant["source"]
    return {
        "architecture": architectures[0],
        "architectures": list(architectures),
        "model_type": config.get("model_type"),
        "text_model_type": cfg.get("model_type") if cfg is not config else config.get("model_type"),
        "attention": attention["attention"],
        "num_layers": attention["num_layers"],
        "num_attention_heads": attention["num_attention_heads"],
        "num_kv_heads": attention["num_kv_heads"],
        "head_dim": attention["head_dim"],
        "kv_lora_rank": attention.get("kv_lora_rank"),
        "kv_cache_bytes_per_token": attention["kv_elements_per_token"] * 2,
        "hidden_size": _first(cfg, "hidden_size", "n_embd", "d_model"),
        "vocab_size": cfg.get("vocab_size"),
        "moe": ({k: moe[k] for k in ("num_experts", "experts_per_token", "intermediate_size",
                                     "shared_expert_intermediate_size", "moe_layers")} if moe else None),
        "quantization": quant_out,
        "dtype": str(_first(cfg, "torch_dtype", "dtype", default=_first(config, "torch_dtype", "dtype", default="bfloat16"))),
        "mtp_layers": mtp,
        "remote_code": bool(config.get("auto_map")),
        "remote_code_files": remote_code_files(config),
        "max_position_embeddings": int(max_pos) if max_pos else None,
        "parameters_estimated": sum(params.values()),
        "weights_bytes": int(weights),
        "weights_bytes_estimated": total is None,
        "weights_source": source,
        "expert_weights_fraction": round(expert_fraction, 6),
    }


def remote_code_files(config: Json) -> List[str]:
    """The Python files of the checkpoint that ``--trust-remote-code`` would run, from ``auto_map``.

    Values are ``module.Class`` (a file in the checkpoint), ``org/repo--module.Class`` (a file of
    another repository) or a list of those (tokenizers: slow and fast class).
    """
    auto_map = config.get("auto_map")
    files = set()
    for value in (auto_map.values() if isinstance(auto_map, dict) else ()):
        for reference in (value if isinstance(value, list) else [value]):
            if not isinstance(reference, str) or "." not in reference:
                continue
            repo, separator, module = reference.rpartition("--")
            path = module.rsplit(".", 1)[0].replace(".", "/") + ".py"
            files.add("%s:%s" % (repo, path) if separator else path)
    return sorted(files)


def model_facts(path: str) -> Json:
    """The ``model`` contract for a model directory or a bare config.json."""
    files = load_model_files(path)
    facts = analyze(files["config"], files["hf_quant_config"], files["index"], files["file_sizes"])
    facts["path"] = path
    return facts
