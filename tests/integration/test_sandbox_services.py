"""The sandbox's controller-side services: generated model repos and the olah hub serving them.

Runs the real scripts (sandbox/models.py, sandbox/hub.py) and a real huggingface_hub client
against a real olah on loopback. The hub is started once for the session on a free port and is
always stopped again. vLLM serving is tested with the molecule scenarios, not here.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.sandbox

REPO = Path(__file__).resolve().parents[2]
MODELS_PY = REPO / "sandbox" / "models.py"
HUB_PY = REPO / "sandbox" / "hub.py"
ORG = "llmops-test"
CHAT_MODELS = ("tiny-llama-chat", "tiny-qwen3-chat", "tiny-qwen3-broken")
ADDED_TOKENS = ("<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>")


# ----------------------------------------------------------------------------- helpers


def run_script(*argv, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *map(str, argv)],
        capture_output=True,
        check=False,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def sha256_file(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def repo_fingerprint(repo: Path) -> dict:
    """What must be identical between two builds: refs, and the sha256 of every file."""
    files = {p.name: sha256_file(p) for p in sorted(repo.iterdir()) if p.is_file()}
    return {"head": git(repo, "rev-parse", "HEAD"), "v1.0": git(repo, "rev-parse", "v1.0"), "files": files}


def safetensors_header(path: Path) -> dict:
    with open(path, "rb") as fh:
        (length,) = struct.unpack("<Q", fh.read(8))
        return json.loads(fh.read(length))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def head(url: str) -> dict[str, str]:
    """HEAD without following redirects (the resolve endpoint answers directly here)."""
    req = urllib.request.Request(url, method="HEAD")
    with urllib.request.urlopen(req, timeout=60) as resp:
        return {k.lower(): v for k, v in resp.headers.items()}


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def models_dir() -> Path:
    """The sandbox's model repos (the directory sandbox/up builds), built or found up to date."""
    cache = Path(os.environ.get("LLMOPS_CACHE") or Path.home() / ".cache" / "llmops-vllm")
    out = cache / "hub-repos"
    proc = run_script(MODELS_PY, "build", "--out", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


@pytest.fixture(scope="session")
def hub_env(tmp_path_factory) -> dict:
    """The hub's state (config, pid, log) in a session directory, apart from a running sandbox's."""
    return {"LLMOPS_SANDBOX_DIR": str(tmp_path_factory.mktemp("hub-state"))}


@pytest.fixture(scope="session")
def hub(models_dir: Path, hub_env: dict):
    """olah on 127.0.0.1:<free port> serving models_dir; stopped again whatever happens."""
    port = str(free_port())
    try:
        proc = run_script(
            HUB_PY, "start", "--host", "127.0.0.1", "--port", port, "--models", models_dir, env=hub_env
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        yield f"http://127.0.0.1:{port}"
    finally:
        stop = run_script(HUB_PY, "stop", "--host", "127.0.0.1", "--port", port, env=hub_env)
        assert stop.returncode == 0, stop.stdout + stop.stderr


@pytest.fixture(scope="session")
def hf():
    return pytest.importorskip("huggingface_hub")


def repo_dir(models_dir: Path, name: str) -> Path:
    return models_dir / "models" / ORG / name


# ----------------------------------------------------------------------------- models


def test_models_build_is_deterministic(models_dir, tmp_path):
    """A fresh build elsewhere gives the same commits, tags and bytes as the session's build."""
    args = [arg for name in CHAT_MODELS for arg in ("--model", name)]
    first = run_script(MODELS_PY, "build", "--out", tmp_path / "a", *args)
    second = run_script(MODELS_PY, "build", "--out", tmp_path / "b", *args)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    for name in CHAT_MODELS:
        a = repo_fingerprint(repo_dir(tmp_path / "a", name))
        assert a == repo_fingerprint(repo_dir(tmp_path / "b", name)), name
        assert a == repo_fingerprint(repo_dir(models_dir, name)), name


def test_models_rebuild_is_skipped_when_up_to_date(models_dir):
    before = {name: git(repo_dir(models_dir, name), "rev-parse", "HEAD") for name in CHAT_MODELS}
    started = time.monotonic()
    proc = run_script(MODELS_PY, "build", "--out", models_dir)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("up to date") == 4, proc.stdout
    assert json.loads(proc.stdout[proc.stdout.index("{") : proc.stdout.rindex("}") + 1])["heads"] == {
        **before,
        "large-lfs": git(repo_dir(models_dir, "large-lfs"), "rev-parse", "HEAD"),
    }
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("name", CHAT_MODELS + ("large-lfs",))
def test_repo_history_has_branch_tag_and_two_commits(models_dir, name):
    repo = repo_dir(models_dir, name)
    commits = git(repo, "rev-list", "main").splitlines()
    assert len(commits) == 2
    assert git(repo, "rev-parse", "v1.0^{commit}") == commits[-1]
    assert git(repo, "status", "--porcelain") == ""
    lfs_files = git(repo, "lfs", "ls-files", "--name-only").splitlines()
    assert lfs_files == (["blob.bin"] if name == "large-lfs" else ["model.safetensors"])


@pytest.mark.parametrize(
    "name,arch",
    [
        ("tiny-llama-chat", "LlamaForCausalLM"),
        ("tiny-qwen3-chat", "Qwen3ForCausalLM"),
        ("tiny-qwen3-broken", "Qwen3ForCausalLM"),
    ],
)
def test_chat_model_files(models_dir, name, arch):
    repo = repo_dir(models_dir, name)
    config = json.loads((repo / "config.json").read_text())
    assert config["architectures"] == [arch]
    assert (
        config["hidden_size"],
        config["num_hidden_layers"],
        config["num_attention_heads"],
        config["num_key_value_heads"],
        config["head_dim"],
    ) == (64, 2, 4, 2, 32)
    weights = repo / "model.safetensors"
    assert weights.stat().st_size < 2 * 2**20
    index = json.loads((repo / "model.safetensors.index.json").read_text())
    header = safetensors_header(weights)
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    assert index["metadata"]["total_size"] == sum(
        v["data_offsets"][1] - v["data_offsets"][0] for v in tensors.values()
    )
    assert set(index["weight_map"]) == set(tensors)
    assert all(v["dtype"] == "BF16" for v in tensors.values())
    tokenizer = json.loads((repo / "tokenizer.json").read_text())
    added = {t["content"]: t for t in tokenizer["added_tokens"]}
    assert set(ADDED_TOKENS) <= set(added)
    assert max(t["id"] for t in added.values()) < config["vocab_size"]
    template = json.loads((repo / "tokenizer_config.json").read_text())["chat_template"]
    for needle in (
        "tools",
        "<|im_start|>",
        "'tool'",
        "tool_calls",
        "<tool_call>",
        "<think>",
        "add_generation_prompt",
    ):
        assert needle in template, needle
    norm = tensors["model.norm.weight"]["shape"]
    # The broken model differs only in this tensor's shape, which vLLM's loader refuses.
    assert norm == ([128] if name.endswith("-broken") else [64])


def test_large_lfs_blob_is_at_least_100_mb(models_dir):
    blob = repo_dir(models_dir, "large-lfs") / "blob.bin"
    assert blob.stat().st_size >= 100 * 10**6
    assert (repo_dir(models_dir, "large-lfs") / "config.json").is_file()


# ----------------------------------------------------------------------------- hub


def test_hub_status_and_local_bind_only(hub, hub_env, models_dir, tmp_path):
    port = hub.rsplit(":", 1)[1]
    assert run_script(HUB_PY, "status", "--port", port, env=hub_env).returncode == 0
    again = run_script(HUB_PY, "start", "--port", port, "--models", models_dir, env=hub_env)
    assert again.returncode == 0 and "already running" in again.stdout
    # A running hub with another models directory is someone's (the test hosts'): never replaced.
    (tmp_path / "models" / ORG / "tiny-qwen3-chat").mkdir(parents=True)
    other = run_script(HUB_PY, "start", "--port", port, "--models", tmp_path, env=hub_env)
    assert other.returncode == 1 and "another configuration" in other.stderr
    assert run_script(HUB_PY, "status", "--port", port, env=hub_env).returncode == 0
    for host in ("0.0.0.0", "10.0.0.1"):
        refused = run_script(
            HUB_PY, "start", "--host", host, "--port", port, "--models", models_dir, env=hub_env
        )
        assert refused.returncode == 1 and "binds only loopback" in refused.stderr
    # stop is idempotent: nothing runs on this port.
    unused = str(free_port())
    assert run_script(HUB_PY, "stop", "--port", unused, env=hub_env).returncode == 0
    assert run_script(HUB_PY, "status", "--port", unused, env=hub_env).returncode == 3


@pytest.mark.parametrize("name", CHAT_MODELS)
@pytest.mark.parametrize("kind", ["branch", "tag", "commit"])
def test_hub_serves_branch_tag_and_commit(hf, hub, models_dir, tmp_path, name, kind):
    repo = repo_dir(models_dir, name)
    revision, expected_sha = {
        "branch": ("main", git(repo, "rev-parse", "main")),
        "tag": ("v1.0", git(repo, "rev-parse", "v1.0")),
        "commit": (git(repo, "rev-parse", "v1.0"), git(repo, "rev-parse", "v1.0")),
    }[kind]
    path = Path(hf.snapshot_download(f"{ORG}/{name}", revision=revision, cache_dir=tmp_path, endpoint=hub))
    assert path.name == expected_sha
    for rel in ("config.json", "model.safetensors", "tokenizer_config.json", "README.md"):
        assert (path / rel).read_bytes() == git_show(repo, expected_sha, rel), rel
    # main is one README commit ahead of v1.0
    assert ("main (after v1.0)" in (path / "README.md").read_text()) == (kind == "branch")


def git_show(repo: Path, rev: str, rel: str) -> bytes:
    """A file's content at rev, LFS pointers resolved through the repo's own LFS store."""
    blob = subprocess.run(
        ["git", "-C", str(repo), "show", f"{rev}:{rel}"], capture_output=True, check=True
    ).stdout
    if blob.startswith(b"version https://git-lfs"):
        blob = subprocess.run(
            ["git", "-C", str(repo), "lfs", "smudge"], input=blob, capture_output=True, check=True
        ).stdout
    return blob


@pytest.mark.parametrize(
    "name,rel", [(n, "model.safetensors") for n in CHAT_MODELS] + [("large-lfs", "blob.bin")]
)
def test_lfs_etag_is_sha256_of_the_file(hub, models_dir, name, rel):
    repo = repo_dir(models_dir, name)
    headers = head(f"{hub}/{ORG}/{name}/resolve/main/{rel}")
    assert headers["etag"].strip('"') == sha256_file(repo / rel)
    assert headers["x-repo-commit"] == git(repo, "rev-parse", "main")
    assert int(headers["content-length"]) == (repo / rel).stat().st_size
    if name == "large-lfs":
        assert int(headers["content-length"]) >= 100 * 10**6


def test_non_lfs_etag_is_git_blob_sha(hub, models_dir):
    repo = repo_dir(models_dir, "tiny-qwen3-chat")
    headers = head(f"{hub}/{ORG}/tiny-qwen3-chat/resolve/v1.0/config.json")
    assert headers["etag"].strip('"') == git(repo, "rev-parse", "v1.0:config.json")


def test_api_resolves_revisions(hf, hub, models_dir):
    api = hf.HfApi(endpoint=hub)
    for name in CHAT_MODELS:
        repo = repo_dir(models_dir, name)
        assert api.model_info(f"{ORG}/{name}", revision="main").sha == git(repo, "rev-parse", "main")
        assert api.model_info(f"{ORG}/{name}", revision="v1.0").sha == git(repo, "rev-parse", "v1.0")
