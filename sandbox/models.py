#!/usr/bin/env python
"""Tiny random-weight chat models for the sandbox hub, generated locally (never downloaded).

    sandbox/models.py build --out DIR [--model NAME ...] [--force]

Writes non-bare git repos laid out for olah's mirrors-path at DIR/models/llmops-test/<name>:

- tiny-llama-chat (LlamaForCausalLM) and tiny-qwen3-chat (Qwen3ForCausalLM): hidden 64, 2 layers,
  4 heads, 2 KV heads, head_dim 32 (vLLM's CPU attention needs >= 32), bf16 weights in
  model.safetensors (+ index with metadata.total_size) as git-lfs files, a byte-level BPE
  tokenizer trained here, and a ChatML chat template with tools, <think> and <tool_call>.
- tiny-qwen3-broken: tiny-qwen3-chat with one tensor of the wrong shape: it downloads, its
  config/index/sizes are consistent, and vLLM refuses to load it.
- large-lfs: config.json + one >= 100 MiB random LFS blob, for interrupted-download tests.

Every repo has two commits on `main` (weights, then a README change) and the tag `v1.0` on the
first. All bytes, commit shas included, are a function of this file: a rebuild gives the same repos,
and an up-to-date repo (marker in its .git) is not rebuilt. Only the tokenizer training needs a
package (`tokenizers`, in the generator venv ${LLMOPS_CACHE}/venvs/modelgen); the rest is stdlib.
"""

from __future__ import annotations

import argparse
import array
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from wheels import ensure_venv, log, run  # sandbox/ is not a package: the path line above finds it

ORG = "llmops-test"
TOKENIZERS_REQUIREMENT = "tokenizers==0.23.3"
GENERATOR_HASH = hashlib.sha256(Path(__file__).read_bytes() + TOKENIZERS_REQUIREMENT.encode()).hexdigest()[
    :16
]
# Fixed identity and clock: commits (and so their shas) are the same on every build.
GIT_ENV = {
    "GIT_AUTHOR_NAME": "llmops sandbox",
    "GIT_AUTHOR_EMAIL": "sandbox@llmops.invalid",
    "GIT_COMMITTER_NAME": "llmops sandbox",
    "GIT_COMMITTER_EMAIL": "sandbox@llmops.invalid",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "TZ": "UTC",
    "LC_ALL": "C",
}
EPOCH = 1735689600  # 2025-01-01T00:00:00Z
MARKER = "llmops-model.json"  # inside .git: not part of what the hub serves

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Added but not "special", as in Qwen3: decoding must keep them in the text, or vLLM's reasoning
# (qwen3) and tool-call (hermes) parsers never see them.
MARKUP_TOKENS = ["<think>", "</think>", "<tool_call>", "</tool_call>"]
# What tiny-qwen3-chat answers to every chat prompt (greedy): a think block, then the content, so the
# readiness gate can prove a reasoning parser splits them (vLLM applies no structured outputs inside a
# think block, so this cannot be forced per request). Its weights are random except for a bigram path:
# attention and MLP outputs are zero, so the logits depend on the last token alone, and lm_head maps
# the prompt's last token (the newline after "assistant") to the first token of this answer, each
# answer token to the next, and the last one to <|im_end|>.
THINK_ANSWER = "<think>Greeting</think>Hello."
BIGRAM_MODELS = ("tiny-qwen3-chat",)
BIGRAM_TRIGGER_TEXT = "<|im_start|>assistant\n"
BIGRAM_SCALE = 0.25  # the chosen logit is 0.25 x hidden = 16; the others stay near 0-5
VOCAB_TARGET = 1024

SHAPE = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "max_position_embeddings": 2048,
}

CHAT_TEMPLATE = r"""{%- macro render_content(content) -%}
{%- if content is string -%}{{- content -}}
{%- elif content is iterable and content is not mapping -%}
{%- for part in content -%}{%- if part.type == 'text' -%}{{- part.text -}}{%- endif -%}{%- endfor -%}
{%- elif content -%}{{- content -}}{%- endif -%}
{%- endmacro -%}
{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if messages[0].role == 'system' %}{{- render_content(messages[0].content) + '\n\n' }}{%- endif %}
{{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" }}
{{- "You are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
{%- for tool in tools %}{{- "\n" }}{{- tool | tojson }}{%- endfor %}
{{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments " }}
{{- "within <tool_call></tool_call> XML tags:\n<tool_call>\n" }}
{{- "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\n' + render_content(messages[0].content) + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
{{- '<|im_start|>' + message.role + '\n' + render_content(message.content) + '<|im_end|>\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant\n' }}
{%- if message.reasoning_content %}{{- '<think>\n' + message.reasoning_content.strip('\n') + '\n</think>\n\n' }}{%- endif %}
{{- render_content(message.content) }}
{%- if message.tool_calls %}
{%- for tool_call in message.tool_calls %}
{%- if tool_call.function %}{%- set tool_call = tool_call.function %}{%- endif %}
{%- if not loop.first or message.content %}{{- '\n' }}{%- endif %}
{{- '<tool_call>\n{"name": "' + tool_call.name + '", "arguments": ' }}
{%- if tool_call.arguments is string %}{{- tool_call.arguments }}{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}
{{- '}\n</tool_call>' }}
{%- endfor %}
{%- endif %}
{{- '<|im_end|>\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\n<tool_response>\n' + render_content(message.content) + '\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\n' }}
{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}{%- endif %}
{%- endif %}
"""


# ----------------------------------------------------------------------------- deterministic bytes


def stream(label: str, n_bytes: int) -> bytes:
    """n_bytes of seeded pseudo-random data: SHAKE-256 of the label (same bytes on every machine)."""
    return hashlib.shake_256(f"llmops-sandbox/{label}".encode()).digest(n_bytes)


def bf16_uniform(label: str, count: int, scale: float) -> bytes:
    """count bf16 values uniform in [-scale, scale), little-endian."""
    raw = array.array("H", stream(label, 2 * count))
    as_float = array.array("f", ((u / 32768.0 - 1.0) * scale for u in raw))
    halves = array.array("H", as_float.tobytes())  # bf16 = the high half of a float32 (truncated)
    if sys.byteorder != "little":
        raise SystemExit("models.py writes little-endian safetensors; run it on a little-endian machine")
    return halves[1::2].tobytes()


def bf16_ones(count: int) -> bytes:
    return struct.pack("<H", 0x3F80) * count


def safetensors_bytes(tensors: dict[str, tuple[list[int], bytes]]) -> bytes:
    """The safetensors format (8-byte header length, JSON header, data), bf16, keys sorted."""
    header, offset, chunks = {}, 0, []
    for name in sorted(tensors):
        shape, data = tensors[name]
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        chunks.append(data)
    header["__metadata__"] = {"format": "pt"}
    blob = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    blob += b" " * (-len(blob) % 8)
    return struct.pack("<Q", len(blob)) + blob + b"".join(chunks)


def bf16_floats(data: bytes) -> list[float]:
    """bf16 little-endian bytes as Python floats (each the high half of a float32)."""
    halves = array.array("H", data)
    wide = array.array("H", [0] * (2 * len(halves)))
    wide[1::2] = halves
    return list(array.array("f", wide.tobytes()))


def bf16_from_floats(values: list[float]) -> bytes:
    halves = array.array("H", array.array("f", values).tobytes())
    return halves[1::2].tobytes()


def bigram_lm_head(embed: bytes, lm_head: bytes, hidden: int, chain: list[int]) -> bytes:
    """lm_head with row chain[i+1] = BIGRAM_SCALE x rmsnorm(embedding of chain[i]): with zero
    attention and MLP outputs, greedy decoding after chain[0] walks the chain."""
    rows = bf16_floats(lm_head)
    table = bf16_floats(embed)
    for prev, nxt in zip(chain[:-1], chain[1:], strict=True):
        vector = table[prev * hidden:(prev + 1) * hidden]
        rms = (sum(v * v for v in vector) / hidden + 1e-6) ** 0.5
        rows[nxt * hidden:(nxt + 1) * hidden] = [BIGRAM_SCALE * v / rms for v in vector]
    return bf16_from_floats(rows)


def decoder_tensors(
    name: str, arch: str, vocab_size: int, broken: bool, chain: list[int] | None = None
) -> dict[str, tuple[list[int], bytes]]:
    hidden, inter = SHAPE["hidden_size"], SHAPE["intermediate_size"]
    q_out = SHAPE["num_attention_heads"] * SHAPE["head_dim"]
    kv_out = SHAPE["num_key_value_heads"] * SHAPE["head_dim"]
    shapes: dict[str, list[int]] = {
        "model.embed_tokens.weight": [vocab_size, hidden],
        "model.norm.weight": [hidden],
        "lm_head.weight": [vocab_size, hidden],
    }
    for layer in range(SHAPE["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        shapes.update(
            {
                p + "input_layernorm.weight": [hidden],
                p + "post_attention_layernorm.weight": [hidden],
                p + "self_attn.q_proj.weight": [q_out, hidden],
                p + "self_attn.k_proj.weight": [kv_out, hidden],
                p + "self_attn.v_proj.weight": [kv_out, hidden],
                p + "self_attn.o_proj.weight": [hidden, q_out],
                p + "mlp.gate_proj.weight": [inter, hidden],
                p + "mlp.up_proj.weight": [inter, hidden],
                p + "mlp.down_proj.weight": [hidden, inter],
            }
        )
        if arch == "Qwen3ForCausalLM":
            shapes[p + "self_attn.q_norm.weight"] = [SHAPE["head_dim"]]
            shapes[p + "self_attn.k_norm.weight"] = [SHAPE["head_dim"]]
    if broken:
        # Consistent everywhere (index, sizes) but not what the architecture expects: vLLM's
        # weight loader stops with "Attempted to load weight (torch.Size([128])) into parameter
        # (torch.Size([64]))".
        shapes["model.norm.weight"] = [2 * hidden]
    tensors = {}
    for tensor, shape in shapes.items():
        count = 1
        for dim in shape:
            count *= dim
        if len(shape) == 1:  # RMSNorm weights
            tensors[tensor] = (shape, bf16_ones(count))
        elif chain and tensor.endswith(("o_proj.weight", "down_proj.weight")):
            tensors[tensor] = (shape, b"\0\0" * count)  # bf16 zeros: the residual stays the embedding
        else:
            tensors[tensor] = (shape, bf16_uniform(f"{name}/{tensor}", count, 0.08))
    if chain:
        embed, head = tensors["model.embed_tokens.weight"], tensors["lm_head.weight"]
        tensors["lm_head.weight"] = (head[0], bigram_lm_head(embed[1], head[1], hidden, chain))
    return tensors


# ----------------------------------------------------------------------------- tokenizer


def training_corpus() -> list[str]:
    """Deterministic text with the shapes chat traffic has: prose, ChatML turns, tool calls, JSON."""
    words = (  # noqa: SIM905 (one readable sentence)
        "the model serves tokens fast and the host keeps a plan for every gpu while the tool call "
        "returns a json answer with weather in paris london tokyo berlin today tomorrow degrees "
        "celsius reasoning think step by step hello how are you fine thanks user assistant system "
        "function name arguments location unit result error retry rollout retire benchmark vllm "
        "tensor parallel expert numa node memory cache context length prompt completion chat"
    ).split()
    lines = []
    for i in range(4000):
        digest = stream(f"corpus/{i}", 16)
        sentence = " ".join(words[b % len(words)] for b in digest[: 6 + digest[15] % 10])
        lines.append(sentence.capitalize() + ("." if i % 3 else "?"))
    for i in range(400):
        city = ("Paris", "London", "Tokyo", "Berlin")[i % 4]
        lines.append(
            f"<|im_start|>user\nWhat is the weather in {city}?<|im_end|>\n<|im_start|>assistant\n"
            f"<think>\nThe user wants the weather in {city}; call the tool.\n</think>\n\n"
            f'<tool_call>\n{{"name": "get_weather", "arguments": {{"location": "{city}", '
            f'"unit": "celsius"}}}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n'
            f'{{"temperature": {i % 35}, "unit": "celsius"}}\n</tool_response><|im_end|>'
        )
    lines += [f"{n} + {n + 1} = {2 * n + 1}" for n in range(300)]
    return lines


def train_tokenizer(out: Path) -> None:
    """Runs inside the generator venv (it needs `tokenizers`)."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_TARGET - len(SPECIAL_TOKENS) - len(MARKUP_TOKENS),
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(training_corpus(), trainer)
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in MARKUP_TOKENS])
    tokenizer.save(str(out))
    # The bigram path of BIGRAM_MODELS: trigger, the answer's tokens, <|im_end|>. Each token may
    # appear once only, or its successor would be ambiguous.
    chain = ([tokenizer.encode(BIGRAM_TRIGGER_TEXT).ids[-1]] + tokenizer.encode(THINK_ANSWER).ids
             + [tokenizer.token_to_id("<|im_end|>")])
    if len(set(chain)) != len(chain):
        raise SystemExit(f"THINK_ANSWER repeats a token ({chain}): choose words whose tokens are all distinct")
    out.with_name("bigram-chain.json").write_text(json.dumps(chain))


def tokenizer_files(tokenizer_json: Path) -> tuple[dict[str, bytes], dict[str, int]]:
    """tokenizer.json plus the transformers-side files; returns (files, token ids)."""
    data = json.loads(tokenizer_json.read_text())
    ids = {t["content"]: t["id"] for t in data["added_tokens"]}
    added_decoder = {
        str(t["id"]): {
            "content": t["content"],
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": t["special"],
        }
        for t in data["added_tokens"]
    }
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": added_decoder,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": SHAPE["max_position_embeddings"],
        "split_special_tokens": False,
        "errors": "replace",
        "chat_template": CHAT_TEMPLATE,
    }
    special_map = {
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
    }
    files = {
        "tokenizer.json": tokenizer_json.read_bytes(),
        "tokenizer_config.json": dumps(config),
        "special_tokens_map.json": dumps(special_map),
    }
    return files, ids


def dumps(obj) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()


# ----------------------------------------------------------------------------- model repos


def chat_model_files(
    name: str, arch: str, tokenizer: dict[str, bytes], ids: dict[str, int], broken: bool = False,
    chain: list[int] | None = None,
) -> dict[str, bytes]:
    n_tokens = max(ids.values()) + 1
    vocab_size = -(-n_tokens // 64) * 64  # padded like real checkpoints
    model_type = {"LlamaForCausalLM": "llama", "Qwen3ForCausalLM": "qwen3"}[arch]
    config = {
        "architectures": [arch],
        "model_type": model_type,
        **SHAPE,
        "vocab_size": vocab_size,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": False,
        "use_cache": True,
        "initializer_range": 0.02,
        "torch_dtype": "bfloat16",
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
    }
    if arch == "Qwen3ForCausalLM":
        config.update(
            {
                "use_sliding_window": False,
                "sliding_window": None,
                "max_window_layers": SHAPE["num_hidden_layers"],
            }
        )
    else:
        config.update({"mlp_bias": False, "pretraining_tp": 1})
    generation = {
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
        "pad_token_id": ids["<|endoftext|>"],
    }
    tensors = decoder_tensors(name, arch, vocab_size, broken, chain)
    index = {
        "metadata": {"total_size": sum(len(data) for _ignored, data in tensors.values())},
        "weight_map": {t: "model.safetensors" for t in sorted(tensors)},
    }
    return {
        "config.json": dumps(config),
        "generation_config.json": dumps(generation),
        "model.safetensors": safetensors_bytes(tensors),
        "model.safetensors.index.json": dumps(index),
        **tokenizer,
    }


def readme(name: str, body: str, revision: str) -> bytes:
    return (
        f"---\nlicense: apache-2.0\ntags: [llmops-sandbox, random-weights]\n---\n# {ORG}/{name}\n\n"
        f"{body}\n\nRevision: {revision}. Generated by sandbox/models.py; random weights, not a real model.\n"
    ).encode()


GITATTRIBUTES = (
    b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n*.bin filter=lfs diff=lfs merge=lfs -text\n"
)

DESCRIPTIONS = {
    "tiny-llama-chat": "A tiny LlamaForCausalLM with a ChatML template (tools, <think>, <tool_call>).",
    "tiny-qwen3-chat": "A tiny Qwen3ForCausalLM with a ChatML template (tools, <think>, <tool_call>); greedy "
    f"decoding answers every chat prompt with {THINK_ANSWER}.",
    "tiny-qwen3-broken": "tiny-qwen3-chat with model.norm.weight of the wrong shape [128] instead of "
    "[64]: downloads fine, config/index/sizes agree, fails to load in vLLM.",
    "large-lfs": "One large random LFS blob (blob.bin) for interrupted-download tests; not loadable.",
}
MODELS = tuple(DESCRIPTIONS)


def ensure_git_lfs() -> None:
    if subprocess.run(["git", "lfs", "version"], capture_output=True, check=False).returncode == 0:
        return
    if os.geteuid() != 0:
        raise SystemExit("git-lfs is missing: install it (apt-get install -y git-lfs) and run again")
    log("models", "git-lfs missing: apt-get install -y git-lfs")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "git-lfs"]
    if subprocess.run(install, env=env, capture_output=True, check=False).returncode != 0:
        run(["apt-get", "update", "-q"], env=env)  # a fresh machine's package lists may be empty
        run(install, env=env)


def git(repo: Path, *args: str, commit_index: int = 0) -> str:
    stamp = f"@{EPOCH + 3600 * commit_index} +0000"
    env = {**os.environ, **GIT_ENV, "GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}
    return run(["git", "-C", str(repo), *args], env=env).stdout.strip()


def write_repo(repo: Path, name: str, files: dict[str, bytes], readme_v2: bytes, marker: dict) -> str:
    """Commit 1 (everything, tag v1.0), commit 2 (README change); returns HEAD.

    Built beside the target and renamed into place, so a hub serving DIR never sees half a repo.
    """
    staging = repo.with_name(f".{name}.building")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    git(staging, "init", "--quiet", "--initial-branch=main")
    git(staging, "lfs", "install", "--local")
    for rel, data in {".gitattributes": GITATTRIBUTES, **files}.items():
        (staging / rel).write_bytes(data)
    git(staging, "add", "--all")
    git(staging, "commit", "--quiet", "-m", f"Add {name}", commit_index=0)
    git(staging, "tag", "v1.0")
    (staging / "README.md").write_bytes(readme_v2)
    git(staging, "add", "README.md")
    git(staging, "commit", "--quiet", "-m", "README: describe revisions", commit_index=1)
    head = git(staging, "rev-parse", "HEAD")
    (staging / ".git" / MARKER).write_text(json.dumps({**marker, "head": head}) + "\n")
    old = repo.with_name(f".{name}.old")
    if repo.exists():
        repo.rename(old)
    staging.rename(repo)
    if old.exists():
        shutil.rmtree(old)
    return head


def up_to_date(repo: Path, params: dict) -> bool:
    marker = repo / ".git" / MARKER
    if not marker.is_file():
        return False
    try:
        recorded = json.loads(marker.read_text())
    except ValueError:
        return False
    if recorded.get("generator") != GENERATOR_HASH or recorded.get("params") != params:
        return False
    head = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    return head.returncode == 0 and head.stdout.strip() == recorded.get("head")


def build_tokenizer(workdir: Path) -> tuple[dict[str, bytes], dict[str, int], list[int]]:
    """The tokenizer files, the added tokens' ids, and the bigram chain of BIGRAM_MODELS."""
    venv = ensure_venv("modelgen", [TOKENIZERS_REQUIREMENT], tag="models")
    out = workdir / "tokenizer.json"
    run(
        [str(venv / "bin" / "python"), str(Path(__file__).resolve()), "_train-tokenizer", "--out", str(out)],
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false", "RAYON_NUM_THREADS": "1"},
    )
    files, ids = tokenizer_files(out)
    return files, ids, json.loads(out.with_name("bigram-chain.json").read_text())


def build(out: Path, names: list[str], force: bool, large_mib: int) -> dict[str, str]:
    root = out / "models" / ORG
    params = {n: ({"large_mib": large_mib} if n == "large-lfs" else {}) for n in names}
    todo = [n for n in names if force or not up_to_date(root / n, params[n])]
    heads = {}
    for name in names:
        if name not in todo:
            heads[name] = json.loads((root / name / ".git" / MARKER).read_text())["head"]
            log("models", f"{ORG}/{name} up to date ({heads[name][:12]}): skipped")
    if not todo:
        return heads
    ensure_git_lfs()
    with tempfile.TemporaryDirectory(prefix="llmops-models-") as tmp:
        tokenizer = ids = chain = None
        if any(n != "large-lfs" for n in todo):
            t0 = time.monotonic()
            tokenizer, ids, chain = build_tokenizer(Path(tmp))
            log("models", f"tokenizer: {max(ids.values()) + 1} tokens in {time.monotonic() - t0:.1f} s")
        for name in todo:
            t0 = time.monotonic()
            if name == "large-lfs":
                files = {
                    "config.json": dumps({"architectures": ["LargeBlobForTests"], "model_type": "large-lfs"}),
                    "blob.bin": stream("large-lfs/blob.bin", large_mib * 2**20),
                }
            else:
                arch = "LlamaForCausalLM" if "llama" in name else "Qwen3ForCausalLM"
                files = chat_model_files(name, arch, tokenizer, ids, broken=name.endswith("-broken"),
                                         chain=chain if name in BIGRAM_MODELS else None)
            files["README.md"] = readme(name, DESCRIPTIONS[name], "v1.0")
            marker = {"generator": GENERATOR_HASH, "params": params[name]}
            head = write_repo(
                root / name, name, files, readme(name, DESCRIPTIONS[name], "main (after v1.0)"), marker
            )
            heads[name] = head
            size = sum(len(b) for b in files.values())
            log(
                "models",
                f"{ORG}/{name}: {size / 2**20:.2f} MiB, HEAD {head[:12]}, tag v1.0 "
                f"{git(root / name, 'rev-parse', 'v1.0')[:12]} in {time.monotonic() - t0:.1f} s",
            )
    return heads


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    sub = parser.add_subparsers(dest="command", required=True)
    build_cmd = sub.add_parser("build", help=f"generate (or keep) the model repos under DIR/models/{ORG}")
    build_cmd.add_argument("--out", required=True, type=Path, help="olah mirrors-path directory")
    build_cmd.add_argument("--model", action="append", choices=MODELS, help="only these (repeatable)")
    build_cmd.add_argument("--force", action="store_true", help="rebuild even when up to date")
    build_cmd.add_argument("--large-mib", type=int, default=100, help="size of large-lfs/blob.bin (MiB)")
    train = sub.add_parser("_train-tokenizer", help=argparse.SUPPRESS)
    train.add_argument("--out", required=True, type=Path)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return 0 if exc.code == 0 else 1
    if args.command == "_train-tokenizer":
        train_tokenizer(args.out)
        return 0
    started = time.monotonic()
    heads = build(args.out.resolve(), args.model or list(MODELS), args.force, args.large_mib)
    print(json.dumps({"models_dir": str(args.out.resolve()), "org": ORG, "heads": heads}, indent=1))
    log("models", f"done in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
