# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pure parts of module_utils/hub.py: names, digests, manifest, plan, disk math, pruning,
ownership, progress and the per-file fetch loop (with a fake hub). No network, no Ansible."""

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import time

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ansible_collections.llmops.vllm.plugins.module_utils import hub, paths

COMMIT_A = "a" * 40
COMMIT_B = "b" * 40
COMMIT_C = "c" * 40


def remote_file(path, data, lfs=False):
    """A tree entry as Hub.list_files returns it, for bytes we know."""
    return {"path": path, "size": len(data), "blob_id": None if lfs else hub.git_blob_sha1_bytes(data),
            "lfs_sha256": hashlib.sha256(data).hexdigest() if lfs else None, "xet": False}


# ----------------------------------------------------------------------------- names and paths

@pytest.mark.parametrize("repo_id", ["MiniMaxAI/MiniMax-M2.5", "llmops-test/tiny-qwen3-chat", "a/b", "Org_1/x.y-z"])
def test_repo_id_accepted(repo_id):
    assert hub.validate_repo_id(repo_id) == repo_id


@pytest.mark.parametrize("repo_id", ["", "noslash", "a/b/c", "../x", "a/..", "/abs", "a/", "a/b c", "a/.hidden"])
def test_repo_id_refused_with_the_value_and_the_expected_form(repo_id):
    with pytest.raises(hub.HubError) as err:
        hub.validate_repo_id(repo_id)
    assert repr(repo_id) in str(err.value) and "ORG/NAME" in str(err.value)


def test_default_dest_and_progress_file_next_to_it():
    dest = hub.default_dest("/var/lib/llmops-vllm/models", "MiniMaxAI/MiniMax-M2.5", COMMIT_A)
    assert dest == "/var/lib/llmops-vllm/models/MiniMaxAI/MiniMax-M2.5/" + COMMIT_A
    assert hub.progress_path(dest) == dest + ".llmops-progress.json"
    assert hub.progress_path(dest + "/") == dest + ".llmops-progress.json"


@pytest.mark.parametrize("revision,expected", [(COMMIT_A, True), ("main", False), ("v1.0", False),
                                               ("A" * 40, False), ("a" * 39, False), ("", False), (None, False)])
def test_only_a_full_lowercase_sha_is_a_commit(revision, expected):
    assert hub.is_commit(revision) is expected


@pytest.mark.parametrize("path", ["../etc/passwd", "/etc/passwd", "a/../../b", "a//b", "./a", "",
                                  ".llmops-manifest.json", ".llmops-partial/x"])
def test_dest_path_refuses_paths_leaving_dest_or_hitting_bookkeeping(path, tmp_path):
    with pytest.raises(hub.HubError) as err:
        hub.dest_path(str(tmp_path), path)
    assert repr(path) in str(err.value)


def test_dest_path_keeps_nested_paths(tmp_path):
    assert hub.dest_path(str(tmp_path), "original/config.json") == os.path.join(str(tmp_path), "original", "config.json")


def test_endpoint_resolution_and_sanitizing():
    assert hub.resolve_endpoint(None, {}) == "https://huggingface.co"
    assert hub.resolve_endpoint(None, {"HF_ENDPOINT": "http://hub.internal:8090/"}) == "http://hub.internal:8090"
    assert hub.resolve_endpoint("http://m:1", {"HF_ENDPOINT": "http://other"}) == "http://m:1"
    assert hub.sanitize_endpoint("https://user:secret@hub.internal/x") == "https://hub.internal/x"
    assert hub.sanitize_endpoint("http://127.0.0.1:8090") == "http://127.0.0.1:8090"


def test_filter_paths_like_snapshot_download():
    paths = ["config.json", "model-00001.safetensors", "original/consolidated.pth", "original/params.json",
             "tokenizer.json", "README.md"]
    assert hub.filter_paths(paths) == paths
    assert hub.filter_paths(paths, ignore_patterns=["original/"]) == [
        "config.json", "model-00001.safetensors", "tokenizer.json", "README.md"]
    assert hub.filter_paths(paths, allow_patterns=["*.json"]) == [
        "config.json", "original/params.json", "tokenizer.json"]
    assert hub.filter_paths(paths, allow_patterns=["*.json"], ignore_patterns=["original/*"]) == [
        "config.json", "tokenizer.json"]


# ----------------------------------------------------------------------------- digests

def test_git_blob_sha1_is_gits_object_id(tmp_path):
    assert hub.git_blob_sha1_bytes(b"") == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
    data = b'{"architectures": ["Qwen3ForCausalLM"]}\n'
    path = tmp_path / "config.json"
    path.write_bytes(data)
    digests = hub.file_digests(str(path), git_blob=True)
    assert digests["git_blob_sha1"] == hub.git_blob_sha1_bytes(data)
    assert digests["sha256"] == hashlib.sha256(data).hexdigest()
    if shutil.which("git"):
        out = subprocess.run(["git", "hash-object", str(path)], capture_output=True, text=True, check=True)
        assert out.stdout.strip() == digests["git_blob_sha1"]


def test_file_digests_over_several_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(hub, "HASH_CHUNK", 7)
    data = bytes(range(256)) * 3
    path = tmp_path / "blob.bin"
    path.write_bytes(data)
    assert hub.file_digests(str(path)) == {"sha256": hashlib.sha256(data).hexdigest(), "git_blob_sha1": None}


def test_verification_problem_names_the_file_and_both_checksums(tmp_path):
    good = b"weights" * 100
    path = tmp_path / "model.safetensors"
    path.write_bytes(good)
    problem, digests = hub.verification_problem(str(path), remote_file("model.safetensors", good, lfs=True))
    assert problem is None and digests["sha256"] == hashlib.sha256(good).hexdigest()

    bad = bytearray(good)
    bad[10] ^= 0xFF
    path.write_bytes(bytes(bad))
    problem, _ignored = hub.verification_problem(str(path), remote_file("model.safetensors", good, lfs=True))
    assert "model.safetensors: sha256 %s" % hashlib.sha256(bytes(bad)).hexdigest() in problem
    assert hashlib.sha256(good).hexdigest() in problem

    path.write_bytes(good[:-1])
    problem, _ignored = hub.verification_problem(str(path), remote_file("model.safetensors", good, lfs=True))
    assert problem == "model.safetensors has %d bytes, the hub lists %d" % (len(good) - 1, len(good))


def test_non_lfs_files_are_checked_by_git_blob_sha1(tmp_path):
    good = b'{"a": 1}\n'
    path = tmp_path / "config.json"
    path.write_bytes(b'{"a": 2}\n')
    problem, _ignored = hub.verification_problem(str(path), remote_file("config.json", good))
    assert problem.startswith("config.json: git blob sha1 ")
    path.write_bytes(good)
    assert hub.verification_problem(str(path), remote_file("config.json", good))[0] is None


# ----------------------------------------------------------------------------- JSON files and manifest

def test_write_json_atomic_creates_the_file_with_its_final_mode(tmp_path):
    path = tmp_path / "progress.json"
    hub.write_json_atomic(str(path), {"a": 1}, mode=0o600)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {"a": 1}
    assert os.listdir(tmp_path) == ["progress.json"]


def write_version(dest, files, repo_id="llmops-test/m", commit=COMMIT_A, epoch=1000.0, allow=None):
    """A complete version on disk: the files and their manifest."""
    os.makedirs(dest, exist_ok=True)
    entries = []
    for path, data in files.items():
        full = os.path.join(dest, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as handle:
            handle.write(data)
        entries.append({"path": path, "size": len(data), "lfs": False, "sha256": hashlib.sha256(data).hexdigest(),
                        "git_blob_sha1": hub.git_blob_sha1_bytes(data)})
    doc = hub.manifest_document(repo_id, commit, "main", "http://u:p@hub", allow, None, entries, epoch=epoch)
    hub.write_json_atomic(hub.manifest_path(dest), doc)
    return doc


def test_manifest_roundtrip_and_quick_check(tmp_path):
    dest = str(tmp_path / "v")
    doc = write_version(dest, {"config.json": b"{}", "sub/model.bin": b"x" * 10})
    manifest = hub.read_manifest(dest)
    assert manifest == doc
    assert manifest["bytes"] == 12 and manifest["endpoint"] == "http://hub"
    assert [f["path"] for f in manifest["files"]] == ["config.json", "sub/model.bin"]
    assert hub.manifest_problems(manifest, dest, "llmops-test/m", COMMIT_A, None, None) == []

    assert hub.manifest_problems(manifest, dest, "llmops-test/m", COMMIT_B, None, None) == [
        "the manifest is for llmops-test/m@%s, not llmops-test/m@%s" % (COMMIT_A, COMMIT_B)]
    assert hub.manifest_problems(manifest, dest, "llmops-test/m", COMMIT_A, ["*.json"], None) == [
        "the manifest was written for other allow/ignore patterns"]
    with open(os.path.join(dest, "sub/model.bin"), "ab") as handle:
        handle.write(b"more")
    os.unlink(os.path.join(dest, "config.json"))
    assert hub.manifest_problems(manifest, dest, "llmops-test/m", COMMIT_A, None, None) == [
        "config.json is missing", "sub/model.bin has 14 bytes, the manifest says 10"]


def test_missing_or_foreign_manifest_is_no_manifest(tmp_path):
    dest = str(tmp_path / "v")
    os.makedirs(dest)
    assert hub.read_manifest(dest) is None
    problems = hub.manifest_problems(None, dest, "o/n", COMMIT_A, None, None)
    assert problems[0].startswith("no manifest (%s)" % hub.manifest_path(dest))
    for content in ("{not json", json.dumps({"format": 99, "files": []}), json.dumps([1])):
        with open(hub.manifest_path(dest), "w") as handle:
            handle.write(content)
        assert hub.read_manifest(dest) is None


def test_manifest_rehash_finds_silent_corruption(tmp_path):
    dest = str(tmp_path / "v")
    write_version(dest, {"a.json": b"{}", "model.bin": b"w" * 1000})
    manifest = hub.read_manifest(dest)
    assert hub.manifest_rehash(manifest, dest) == {}
    with open(os.path.join(dest, "model.bin"), "r+b") as handle:  # same size: only a re-hash sees it
        handle.seek(500)
        handle.write(b"X")
    corrupt = hub.manifest_rehash(manifest, dest)
    assert list(corrupt) == ["model.bin"] and "the manifest says" in corrupt["model.bin"]


# ----------------------------------------------------------------------------- plan

def test_plan_keeps_checks_resumes_and_fetches():
    remote = [remote_file(name, b"x" * size) for name, size in
              [("kept", 10), ("unverified", 20), ("partial", 100), ("missing", 50), ("wrong-size", 30),
               ("oversized-part", 5)]]
    local = {"kept": {"final_size": 10, "final_mtime_ns": 7, "part_size": 0},
             "unverified": {"final_size": 20, "final_mtime_ns": 8, "part_size": 0},
             "partial": {"final_size": None, "final_mtime_ns": None, "part_size": 40},
             "missing": {"final_size": None, "final_mtime_ns": None, "part_size": 0},
             "wrong-size": {"final_size": 29, "final_mtime_ns": 9, "part_size": 0},
             "oversized-part": {"final_size": None, "final_mtime_ns": None, "part_size": 6}}
    verified = {"kept": {"size": 10, "mtime_ns": 7}, "unverified": {"size": 20, "mtime_ns": 1}}
    plan = hub.plan_fetch(remote, local, verified)
    actions = {a["path"]: (a["action"], a["resume_from"]) for a in plan["actions"]}
    assert actions == {"kept": ("keep", 0), "unverified": ("check", 0), "partial": ("fetch", 40),
                       "missing": ("fetch", 0), "wrong-size": ("fetch", 0), "oversized-part": ("fetch", 0)}
    assert plan["bytes_total"] == 215
    assert plan["bytes_present"] == 10 + 20 + 40
    assert plan["bytes_needed"] == 215 - 70
    assert plan["fetch"] == ["partial", "missing", "wrong-size", "oversized-part"]


def test_scan_local_reads_final_and_partial_sizes(tmp_path):
    dest = str(tmp_path / "v")
    os.makedirs(os.path.join(dest, hub.PARTIAL_DIR, "sub"))
    with open(os.path.join(dest, "a.json"), "wb") as handle:
        handle.write(b"123")
    with open(hub.part_path(dest, "sub/b.bin"), "wb") as handle:
        handle.write(b"12345")
    local = hub.scan_local(dest, [remote_file("a.json", b"123"), remote_file("sub/b.bin", b"1234567")])
    assert local["a.json"]["final_size"] == 3 and local["a.json"]["part_size"] == 0
    assert local["sub/b.bin"] == {"final_size": None, "final_mtime_ns": None, "part_size": 5}


# ----------------------------------------------------------------------------- disk

def test_disk_margin_default_and_override():
    assert hub.disk_margin(0) == 1 << 30
    assert hub.disk_margin(230 * 10**9) == int(230 * 10**9 * 0.01)
    assert hub.disk_margin(230 * 10**9, margin=0) == 0
    assert hub.disk_margin(5, margin=123) == 123


def test_disk_refusal_states_all_four_numbers_and_what_to_do():
    msg = hub.disk_refusal("MiniMaxAI/MiniMax-M2.5", COMMIT_A, "/models/x", 230_000_000_000, 30_000_000_000,
                           200_000_000_000, 150_000_000_000, 2_000_000_000)
    for number in ("230000000000", "30000000000", "200000000000", "150000000000", "2000000000"):
        assert number in msg
    assert "MiniMaxAI/MiniMax-M2.5@" + COMMIT_A in msg and "/models/x" in msg
    assert "Free 52000000000 bytes" in msg
    assert hub.disk_refusal("o/n", COMMIT_A, "/d", 10, 0, 10, 20, 10) is None
    assert hub.disk_refusal("o/n", COMMIT_A, "/d", 10, 0, 10, 19, 10) is not None


def test_free_bytes_asks_the_nearest_existing_ancestor(tmp_path):
    assert hub.free_bytes(str(tmp_path / "not" / "yet" / "there")) == hub.free_bytes(str(tmp_path))
    assert hub.free_bytes(str(tmp_path)) > 0


def test_human_bytes():
    assert hub.human_bytes(512) == "512 B"
    assert hub.human_bytes(1536) == "1.5 KiB"
    assert hub.human_bytes(230 * 10**9) == "214.2 GiB"


# ----------------------------------------------------------------------------- versions and pruning

def version(path, epoch, complete=True):
    return {"path": path, "commit": os.path.basename(path), "fetched_at_epoch": epoch, "bytes": 1,
            "complete": complete}


def test_prune_default_keeps_current_and_previous():
    versions = [version("/m/o/n/v1", 1), version("/m/o/n/v2", 2), version("/m/o/n/v3", 3), version("/m/o/n/v4", 4)]
    assert hub.select_prune(versions, 2, "/m/o/n/v4", []) == ["/m/o/n/v1", "/m/o/n/v2"]
    # Reverting to an older version keeps it and the newest other one.
    assert hub.select_prune(versions, 2, "/m/o/n/v2", []) == ["/m/o/n/v1", "/m/o/n/v3"]
    assert hub.select_prune(versions, 1, "/m/o/n/v4", []) == ["/m/o/n/v1", "/m/o/n/v2", "/m/o/n/v3"]
    assert hub.select_prune(versions, 0, "/m/o/n/v4", []) == []
    assert hub.select_prune(versions, 9, "/m/o/n/v4", []) == []


def test_prune_never_touches_protected_or_incomplete_versions():
    versions = [version("/m/o/n/v1", 1), version("/m/o/n/v2", 2), version("/m/o/n/v3", 3),
                version("/m/o/n/partial", 0, complete=False), version("/m/o/n/v4", 4)]
    # v1 is what a unit serves: it is the revert target, kept before newer unserved versions.
    assert hub.select_prune(versions, 2, "/m/o/n/v4", ["/m/o/n/v1/config.json"]) == ["/m/o/n/v2", "/m/o/n/v3"]
    # Protected versions are kept even beyond keep.
    assert hub.select_prune(versions, 1, "/m/o/n/v4", ["/m/o/n/v1", "/m/o/n/v2"]) == ["/m/o/n/v3"]
    # Protecting a parent protects every version below it.
    assert hub.select_prune(versions, 1, "/m/o/n/v4", ["/m/o"]) == []


def test_units_protect_the_versions_they_name(tmp_path):
    root = str(tmp_path / "models")
    v1 = os.path.join(root, "o", "n", COMMIT_A)
    units = {
        "/etc/systemd/system/vllm-a.service": "[Service]\nExecStart=/opt/venv/bin/vllm serve %s --port 8000\n" % v1,
        "/etc/systemd/system/vllm-b.service": 'Environment="MODEL=%s/o/n2/%s/sub"\n' % (root, COMMIT_B),
        "/etc/systemd/system/vllm-c.service": "ExecStart=/opt/venv/bin/vllm serve /elsewhere/x\n",
        "/etc/systemd/system/vllm-d.service": "WorkingDirectory=%s/o\n" % root,
    }
    assert hub.paths_in_units(units, root) == {
        v1: ["/etc/systemd/system/vllm-a.service"],
        os.path.join(root, "o", "n2", COMMIT_B): ["/etc/systemd/system/vllm-b.service"]}
    unit_dir = tmp_path / "units"
    unit_dir.mkdir()
    (unit_dir / "vllm-a.service").write_text(units["/etc/systemd/system/vllm-a.service"])
    (unit_dir / "other.service").write_text(units["/etc/systemd/system/vllm-a.service"])
    texts = hub.read_units([str(unit_dir / "vllm-*.service")])
    assert list(texts) == [str(unit_dir / "vllm-a.service")]


def test_covers_resolves_symlinks(tmp_path):
    real = tmp_path / "models" / "o" / "n" / COMMIT_A
    real.mkdir(parents=True)
    link = tmp_path / "current"
    link.symlink_to(real)
    assert hub.covers(str(link), str(real))
    assert hub.covers(str(real / "config.json"), str(real))
    assert hub.covers(str(tmp_path / "models"), str(real))
    assert not hub.covers(str(tmp_path / "models" / "o" / "n" / COMMIT_B), str(real))


def test_list_versions_reads_manifests(tmp_path):
    root = str(tmp_path)
    write_version(os.path.join(root, "o", "n", COMMIT_A), {"a": b"1"}, repo_id="o/n", commit=COMMIT_A, epoch=5)
    write_version(os.path.join(root, "o", "n", COMMIT_B), {"a": b"22"}, repo_id="o/n", commit=COMMIT_B, epoch=9)
    os.makedirs(os.path.join(root, "o", "n", COMMIT_C, hub.PARTIAL_DIR))
    with open(os.path.join(root, "o", "n", COMMIT_A + hub.PROGRESS_SUFFIX), "w") as handle:
        handle.write("{}")
    versions = hub.list_versions(root, "o/n")
    assert [(os.path.basename(v["path"]), v["complete"], v["fetched_at_epoch"], v["bytes"]) for v in versions] == [
        (COMMIT_A, True, 5.0, 1), (COMMIT_B, True, 9.0, 2), (COMMIT_C, False, 0.0, 0)]
    assert hub.list_versions(root, "o/absent") == []
    hub.remove_version(os.path.join(root, "o", "n", COMMIT_A))
    assert sorted(os.listdir(os.path.join(root, "o", "n"))) == [COMMIT_B, COMMIT_C]


# ----------------------------------------------------------------------------- ownership

@pytest.mark.parametrize("mode,expected", [("0644", 0o644), ("640", 0o640), (0o600, 0o600), (420, 0o644),
                                           (None, 0o644)])
def test_parse_mode(mode, expected):
    assert hub.parse_mode(mode) == expected


@pytest.mark.parametrize("mode", ["u=rw,g=r", "0999", "0044", 0o17777])
def test_parse_mode_refuses_with_the_value(mode):
    with pytest.raises(hub.HubError) as err:
        hub.parse_mode(mode)
    assert repr(mode) in str(err.value)


def test_dir_mode_adds_x_where_r():
    assert hub.dir_mode(0o644) == 0o755
    assert hub.dir_mode(0o640) == 0o750
    assert hub.dir_mode(0o600) == 0o700


def test_owner_and_group_resolution():
    assert hub.resolve_uid(None) is None and hub.resolve_gid("") is None
    assert hub.resolve_uid("root") == 0 and hub.resolve_gid("0") == 0
    with pytest.raises(hub.HubError) as err:
        hub.resolve_uid("no-such-user-llmops")
    assert "'no-such-user-llmops'" in str(err.value)


def test_attribute_targets_cover_dest_its_directories_files_and_manifest(tmp_path):
    dest = str(tmp_path / "v")
    targets = hub.attribute_targets(dest, ["config.json", "sub/deeper/m.bin"], 0o640)
    assert targets == [(dest, 0o750), (os.path.join(dest, "sub"), 0o750), (os.path.join(dest, "sub", "deeper"), 0o750),
                       (os.path.join(dest, "config.json"), 0o640), (os.path.join(dest, "sub", "deeper", "m.bin"), 0o640),
                       (hub.manifest_path(dest), 0o640)]


# ----------------------------------------------------------------------------- progress

def test_progress_file_is_0600_and_counts(tmp_path):
    path = str(tmp_path / "v.llmops-progress.json")
    progress = hub.Progress(path, "o/n", COMMIT_A, str(tmp_path / "v"), 1000, 100, 3)
    progress.start()
    progress.phase("downloading")
    progress.begin("b.bin")
    progress.add("b.bin", 400)
    progress.add("b.bin", -50)  # the server ignored the Range: bytes thrown away
    progress.write()
    doc = json.loads(open(path).read())
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert doc["phase"] == "downloading" and doc["current_files"] == ["b.bin"]
    assert (doc["bytes_done"], doc["downloaded_bytes"], doc["bytes_total"]) == (450, 400, 1000)
    progress.end("b.bin", done=True)
    progress.finish("done")
    doc = json.loads(open(path).read())
    assert doc["phase"] == "done" and doc["files_done"] == 1 and doc["current_files"] == []
    assert doc["pid"] == os.getpid() and doc["error"] is None


def test_counting_writer_notices_a_restart(tmp_path):
    progress = hub.Progress(str(tmp_path / "p.json"), "o/n", COMMIT_A, "/d", 10, 4, 1)
    part = tmp_path / "x.part"
    part.write_bytes(b"1234")
    with open(part, "ab") as handle:
        writer = hub.CountingWriter(handle, progress, "x")
        # What huggingface_hub's http_get does when a Range request is answered with 200.
        writer.seek(max(writer.tell() - 4, 0))
        writer.truncate()
        writer.write(b"0123456789")
    assert writer.restarted
    assert part.read_bytes() == b"0123456789"
    assert progress.doc["bytes_done"] == 10 and progress.doc["downloaded_bytes"] == 10


def test_counting_writer_stops_a_whole_file_appended_to_a_partial_one(tmp_path):
    """Older huggingface_hub releases append a 200 answer to the partial file: the first chunk gives
    it away (it starts with the partial file's own first bytes) and the transfer stops there."""
    data = os.urandom(4096)
    part = tmp_path / "x.part"
    part.write_bytes(data[:1000])
    progress = hub.Progress(str(tmp_path / "p.json"), "o/n", COMMIT_A, "/d", 4096, 1000, 1)
    head = hub.resume_head(str(part), 1000)
    assert head == data[:1000]
    with open(part, "ab") as handle:
        writer = hub.CountingWriter(handle, progress, "x", head)
        with pytest.raises(hub.RangeIgnored):
            writer.write(data[:2048])  # the whole file again, from byte 0
    assert part.read_bytes() == data[:1000]  # nothing appended
    assert progress.doc["downloaded_bytes"] == 2048 and progress.doc["bytes_done"] == 1000
    with open(part, "ab") as handle:
        writer = hub.CountingWriter(handle, progress, "x", head)
        writer.write(data[1000:3000])  # a real 206 continues where the file stopped
    assert part.read_bytes() == data[:3000]


def test_resume_head_skips_uniform_bytes(tmp_path):
    part = tmp_path / "zeros.part"
    part.write_bytes(b"\0" * 5000)
    assert hub.resume_head(str(part), 5000) == b""
    assert hub.resume_head(str(part), 0) == b""


# ----------------------------------------------------------------------------- the fetch loop (fake hub)

class FakeHub:
    """Serves bytes per path; a list of payloads serves them one per download (corrupt, then good)."""

    use_xet = False

    def __init__(self, payloads):
        self.payloads = {path: list(data) if isinstance(data, list) else [data] for path, data in payloads.items()}
        self.calls = []

    def download(self, repo_id, commit, remote, part, progress, work_dir):
        self.calls.append(remote["path"])
        queue = self.payloads[remote["path"]]
        data = queue.pop(0) if len(queue) > 1 else queue[0]
        have = os.path.getsize(part) if os.path.exists(part) else 0
        with open(part, "ab") as handle:
            handle.write(data[have:])
        progress.add(remote["path"], len(data) - have)
        return False


def run_fetch(dest, remote, fake, verified=None, set_attributes=None):
    os.makedirs(dest, exist_ok=True)
    lock = hub.lock_fetch(dest)
    progress = hub.Progress(hub.progress_path(dest), "o/n", COMMIT_A, dest, sum(r["size"] for r in remote), 0,
                            len(remote))
    try:
        fetch = hub.Fetch(fake, "o/n", COMMIT_A, dest, remote, progress, 0o644, 2, verified=verified,
                          set_attributes=set_attributes)
        plan = hub.plan_fetch(remote, hub.scan_local(dest, remote), fetch.verified)
        return fetch, fetch.run(plan["actions"])
    finally:
        lock.close()


def test_fetch_places_only_verified_files_and_resumes_a_partial(tmp_path):
    dest = str(tmp_path / "v")
    weights = os.urandom(4096)
    remote = [remote_file("config.json", b"{}"), remote_file("model.safetensors", weights, lfs=True)]
    os.makedirs(os.path.join(dest, hub.PARTIAL_DIR))
    with open(hub.part_path(dest, "model.safetensors"), "wb") as handle:
        handle.write(weights[:1000])  # left by an interrupted run
    fake = FakeHub({"config.json": b"{}", "model.safetensors": weights})
    fetch, digests = run_fetch(dest, remote, fake)
    assert open(os.path.join(dest, "model.safetensors"), "rb").read() == weights
    assert fetch.progress.doc["downloaded_bytes"] == 2 + 4096 - 1000
    assert digests["model.safetensors"]["sha256"] == hashlib.sha256(weights).hexdigest()
    files = hub.manifest_files(remote, digests)
    assert files[1] == {"path": "model.safetensors", "size": 4096, "lfs": True, "git_blob_sha1": None,
                        "sha256": hashlib.sha256(weights).hexdigest()}
    assert files[0]["git_blob_sha1"] == hub.git_blob_sha1_bytes(b"{}")
    assert not os.path.exists(hub.part_path(dest, "model.safetensors"))
    # A second run over the same dest trusts the verified records: nothing downloaded, nothing re-hashed.
    again = FakeHub({"config.json": b"{}", "model.safetensors": weights})
    fetch2, _ignored = run_fetch(dest, remote, again)
    assert again.calls == [] and fetch2.progress.doc["downloaded_bytes"] == 0


def test_fetch_sets_attributes_before_a_file_enters_dest(tmp_path):
    """The module's attribute setter (AnsibleModule.set_fs_attributes_if_different) sees each verified
    file while it is still in the 0700 work area: no file is ever in dest with other attributes."""
    dest = str(tmp_path / "v")
    seen = []

    def set_attributes(path, mode):
        assert path.startswith(os.path.join(dest, hub.PARTIAL_DIR) + os.sep), path
        seen.append((os.path.basename(path), mode))
        os.chmod(path, 0o600)

    remote = [remote_file("config.json", b"{}"), remote_file("sub/m.bin", b"1" * 100, lfs=True)]
    run_fetch(dest, remote, FakeHub({"config.json": b"{}", "sub/m.bin": b"1" * 100}), set_attributes=set_attributes)
    assert sorted(seen) == [("config.json.part", 0o644), ("m.bin.part", 0o644)]
    for rel in ("config.json", "sub/m.bin"):
        assert stat.S_IMODE(os.stat(os.path.join(dest, rel)).st_mode) == 0o600


def test_fetch_refetches_a_corrupt_download_once(tmp_path):
    dest = str(tmp_path / "v")
    weights = b"w" * 3000
    corrupt = b"w" * 1500 + b"X" + b"w" * 1499
    fake = FakeHub({"model.safetensors": [corrupt, weights]})
    fetch, _ignored = run_fetch(dest, [remote_file("model.safetensors", weights, lfs=True)], fake)
    assert fake.calls == ["model.safetensors", "model.safetensors"]
    assert fetch.repaired == ["model.safetensors"]
    assert open(os.path.join(dest, "model.safetensors"), "rb").read() == weights


def test_fetch_fails_naming_a_file_that_stays_corrupt_and_deletes_its_bytes(tmp_path):
    dest = str(tmp_path / "v")
    weights = b"w" * 3000
    fake = FakeHub({"config.json": b"{}", "model.safetensors": b"v" * 3000})
    with pytest.raises(hub.HubError) as err:
        run_fetch(dest, [remote_file("config.json", b"{}"), remote_file("model.safetensors", weights, lfs=True)],
                  fake)
    msg = str(err.value)
    assert msg.startswith("model.safetensors of o/n@%s failed verification twice and was deleted" % COMMIT_A)
    assert hashlib.sha256(weights).hexdigest() in msg and "not marked complete" in msg
    assert err.value.details == {"file": "model.safetensors"}
    assert not os.path.exists(os.path.join(dest, "model.safetensors"))
    assert not os.path.exists(hub.part_path(dest, "model.safetensors"))
    assert os.path.exists(os.path.join(dest, "config.json"))  # good files stay for the next run
    assert not os.path.exists(hub.manifest_path(dest))


def test_fetch_hashes_unrecorded_files_before_trusting_them(tmp_path):
    dest = str(tmp_path / "v")
    os.makedirs(dest)
    with open(os.path.join(dest, "config.json"), "wb") as handle:
        handle.write(b"{!")  # right size, wrong content, no record
    fake = FakeHub({"config.json": b"{}"})
    fetch, _ignored = run_fetch(dest, [remote_file("config.json", b"{}")], fake)
    assert fake.calls == ["config.json"] and fetch.repaired == ["config.json"]
    assert open(os.path.join(dest, "config.json"), "rb").read() == b"{}"


def test_a_second_fetch_of_the_same_dest_is_refused_while_one_runs(tmp_path):
    dest = str(tmp_path / "v")
    os.makedirs(dest)
    first = hub.lock_fetch(dest)
    try:
        with pytest.raises(hub.HubError) as err:
            hub.lock_fetch(dest)
        assert "another hf_model run is fetching" in str(err.value)
    finally:
        first.close()
    hub.lock_fetch(dest).close()


def test_transfer_choice():
    assert hub.transfer_for({"xet": True}, True) == "xet"
    assert hub.transfer_for({"xet": True}, False) == "http"
    assert hub.transfer_for({"xet": False}, True) == "http"


def test_missing_huggingface_hub_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(hub.HubError) as err:
        hub.import_huggingface_hub()
    assert sys.executable in str(err.value) and "ansible_python_interpreter" in str(err.value)


# ----------------------------------------------------------------------------- issue 38: the hub is not trusted
#
# What a hostile (or broken) hub answers never reaches a path outside its root, the unit or a manifest:
# the commit passes hub.checked_commit, every path paths.path_inside, a file without a checksum is
# refused, and the preflight's metadata fetch writes nothing in a preview. The HTTP hub below is a real
# server on 127.0.0.1 that huggingface_hub talks to as to the public one.

CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "configs")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INJECTED = COMMIT_A + "\n[Service]\nExecStartPre=+/usr/bin/id"


class HttpHub:
    """A Hugging Face hub on 127.0.0.1 as huggingface_hub talks to it - revision, refs and tree APIs and
    file downloads - answering per repository what a test (or an attacker) sets in ``repos``:
    {repo_id: {"sha": the commit answered, "files": {path: bytes}, "tree": entries (default: the honest
    ones of files), "serve": {path: bytes} (default: files)}}. Unknown repositories answer 404."""

    def __init__(self):
        import http.server
        import threading
        import urllib.parse
        self.repos = {}
        self.requests = []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def answer(self, status, body, head=False, headers=None):
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/octet-stream" if isinstance(body, bytes)
                                 else "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                if not head:
                    self.wfile.write(data)

            def route(self, head=False):
                path = urllib.parse.urlsplit(self.path).path
                owner.requests.append(path)
                parts = path.strip("/").split("/")
                if parts[:2] == ["api", "models"] and len(parts) >= 5:
                    repo = owner.repos.get("/".join(parts[2:4]))
                    if repo is None:
                        return self.answer(404, {"error": "Repository not found"}, head)
                    if parts[4] == "revision":
                        return self.answer(200, {"id": "/".join(parts[2:4]), "sha": repo["sha"],
                                                 "siblings": [{"rfilename": p} for p in repo["files"]]}, head)
                    if parts[4] == "refs":
                        return self.answer(200, {"branches": [{"name": "main", "ref": "refs/heads/main",
                                                               "targetCommit": repo["sha"]}],
                                                 "tags": [], "converts": []}, head)
                    if parts[4] == "tree":
                        return self.answer(200, owner.tree(repo), head)
                if len(parts) >= 5 and parts[2] == "resolve":
                    repo = owner.repos.get("/".join(parts[:2]))
                    rel = urllib.parse.unquote("/".join(parts[4:]))
                    if repo is not None and rel in repo.get("serve", repo["files"]):
                        data = repo.get("serve", repo["files"])[rel]
                        return self.answer(200, data, head, {"X-Repo-Commit": str(repo["sha"]),
                                                             "ETag": '"%s"' % hub.git_blob_sha1_bytes(data)})
                return self.answer(404, {"error": "Entry not found"}, head)

            def do_GET(self):  # noqa: N802 - http.server's name
                self.route()

            def do_HEAD(self):  # noqa: N802
                self.route(head=True)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @staticmethod
    def tree(repo):
        if "tree" in repo:
            return repo["tree"]
        return [{"type": "file", "path": p, "size": len(d), "oid": hub.git_blob_sha1_bytes(d)}
                for p, d in sorted(repo["files"].items())]

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture(scope="module")
def http_hub():
    server = HttpHub()
    yield server
    server.close()


def config_json(name):
    with open(os.path.join(CONFIGS, name + ".json"), "rb") as handle:
        return handle.read()


# -- the commit


def test_issue38_hub_commit_with_a_newline_is_refused_by_resolve(http_hub):
    """The commit is what a unit's comment and Description= carry (preflight_commit): a hub answering
    one with a line break must not get past the resolve."""
    pytest.importorskip("huggingface_hub")
    http_hub.repos["evil/resolve-newline"] = {"sha": INJECTED, "files": {}}
    http_hub.repos["evil/resolve-climb"] = {"sha": "../../../escape", "files": {}}
    client = hub.Hub(http_hub.endpoint)
    for repo_id, sha in (("evil/resolve-newline", INJECTED), ("evil/resolve-climb", "../../../escape")):
        with pytest.raises(hub.HubError) as err:
            client.resolve(repo_id, "main")
        assert repo_id in str(err.value) and repr(sha) in str(err.value), str(err.value)
        with pytest.raises(hub.HubError) as err:
            hub.resolve_commit_http(http_hub.endpoint, repo_id, "main")
        assert repo_id in str(err.value) and repr(sha) in str(err.value), str(err.value)


@pytest.mark.parametrize("value", [COMMIT_A + "\n", COMMIT_A.upper(), COMMIT_A[:39], "../" + COMMIT_A[3:], None, 40])
def test_checked_commit_refuses_with_the_value_and_whose_answer_it_is(value):
    with pytest.raises(hub.HubError) as err:
        hub.checked_commit(value, "the commit the hub at http://h answered for o/n@main")
    assert repr(value) in str(err.value) and "o/n@main" in str(err.value)
    assert not hub.is_commit(value)


def test_default_dest_takes_only_a_commit():
    with pytest.raises(hub.HubError):
        hub.default_dest("/var/lib/llmops-vllm/models", "o/n", "../../../etc")
    assert hub.default_dest("/m", "o/n", COMMIT_B) == "/m/o/n/" + COMMIT_B


# -- the listing: paths and checksums


def test_issue38_symlink_in_the_version_dir_leads_no_write_out(tmp_path):
    """A listed file whose directory in dest is a symlink out (the service user may own dest): the
    fetch writes nothing through it."""
    dest = str(tmp_path / "models" / "o" / "n" / COMMIT_A)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.makedirs(dest)
    os.symlink(str(outside), os.path.join(dest, "sub"))
    remote = [remote_file("sub/config.json", b"{}")]
    with pytest.raises(hub.HubError) as err:
        run_fetch(dest, remote, FakeHub({"sub/config.json": b"{}"}))
    assert "sub/config.json" in str(err.value) and str(outside) in str(err.value)
    assert os.listdir(str(outside)) == []


@pytest.mark.parametrize("path", ["../../etc/x", "/etc/x", "a/../../x", "x\ny", ".llmops-manifest.json"])
def test_a_listing_with_a_path_outside_dest_is_refused_before_anything_is_written(tmp_path, path):
    dest = str(tmp_path / "v")
    listing = [remote_file("config.json", b"{}"), remote_file(path, b"x")]
    with pytest.raises(hub.HubError) as err:
        hub.checked_remote_files(listing, "o/n", COMMIT_A, dest)
    assert repr(path) in str(err.value) and "o/n@" + COMMIT_A in str(err.value)
    assert not os.path.exists(dest)


@pytest.mark.parametrize("change,named", [
    ({"blob_id": None}, "neither a sha256 nor a git blob id"),
    ({"blob_id": "A" * 40}, "'%s'" % ("A" * 40)),
    ({"size": -1}, "-1"),
    ({"size": "3"}, "'3'"),
    ({"lfs_sha256": "f" * 63}, "'%s'" % ("f" * 63)),
])
def test_a_listing_with_a_file_we_cannot_verify_is_refused(tmp_path, change, named):
    remote = dict(remote_file("config.json", b"{}"), **change)
    with pytest.raises(hub.HubError) as err:
        hub.checked_remote_files([remote], "o/n", COMMIT_A, str(tmp_path))
    assert "config.json" in str(err.value) and named in str(err.value), str(err.value)
    assert err.value.details == {"file": "config.json"}


def test_issue38_non_lfs_file_without_blob_id_is_not_verified_by_size(tmp_path):
    """The hub listed config.json with no blob id and served other bytes of the same size: size alone
    passed it, and the version was marked complete."""
    good, corrupt = b'{"a": 1}', b'{"a": 2}'
    path = tmp_path / "config.json"
    path.write_bytes(corrupt)
    problem, _digests = hub.verification_problem(str(path), dict(remote_file("config.json", good), blob_id=None))
    assert problem is not None and "cannot be verified" in problem


def test_a_manifest_listing_a_file_outside_dest_is_not_ours(tmp_path):
    dest = str(tmp_path / "v")
    write_version(dest, {"config.json": b"{}"})
    assert hub.read_manifest(dest) is not None
    manifest = json.loads((tmp_path / "v" / hub.MANIFEST_NAME).read_text())
    manifest["files"].append({"path": "../outside", "size": 0, "lfs": False, "sha256": "", "git_blob_sha1": None})
    (tmp_path / "v" / hub.MANIFEST_NAME).write_text(json.dumps(manifest))
    assert hub.read_manifest(dest) is None
    (problem,) = hub.manifest_problems(None, dest, "llmops-test/m", COMMIT_A, None, None)
    assert "not one hf_model wrote" in problem
    with pytest.raises(hub.HubError):
        hub.attribute_targets(dest, ["../outside"], 0o644)


# -- property tests: the commit checker, the path function, the blob-hash verifier

HEX = "0123456789abcdef"


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.from_regex(r"[0-9a-f]{40}", fullmatch=True),
                 st.text(alphabet=HEX + "ABCDEFg./\n\x00 ", min_size=38, max_size=42),
                 st.text(max_size=60)))
@example(COMMIT_A + "\n")
@example("../../" + COMMIT_A[6:])
def test_the_commit_checker_accepts_exactly_40_lower_case_hex(value):
    expected = len(value) == 40 and set(value) <= set(HEX)
    assert hub.is_commit(value) is expected
    if expected:
        assert hub.checked_commit(value, "c") == value
    else:
        with pytest.raises(hub.HubError):
            hub.checked_commit(value, "c")


@pytest.fixture(scope="module")
def link_tree(tmp_path_factory):
    """A root reached through a symlink, holding a directory, a link inside, a link out and a loop."""
    base = tmp_path_factory.mktemp("paths")
    (base / "real" / "a").mkdir(parents=True)
    (base / "outside").mkdir()
    os.symlink(str(base / "real"), str(base / "root"))
    os.symlink(str(base / "outside"), str(base / "real" / "out"))
    os.symlink("../..", str(base / "real" / "a" / "up"))
    os.symlink(str(base / "real" / "a"), str(base / "real" / "in"))
    os.symlink("loop", str(base / "real" / "loop"))
    os.symlink("/etc", str(base / "real" / "etc"))
    return str(base / "root")


PART = st.one_of(
    st.sampled_from(["..", ".", "", "/", "/etc", "a", "a/b", "a//b", "a/./b", "out", "out/x", "in/x", "a/up",
                     "a/up/x", "loop", "loop/x", "etc/passwd", "x/../..", "\u00e9t\u00e9", "a\nb", "\u2028",
                     "a\x00b", "\ud800", "\udcff"]),
    st.text(max_size=12))


@settings(max_examples=60, deadline=None)
@given(st.lists(PART, max_size=4))
def test_the_path_function_refuses_or_stays_inside_root(link_tree, parts):
    root = link_tree
    try:
        path = paths.path_inside(root, *parts, what="p")
    except paths.PathError as exc:
        assert "p " in str(exc) or str(exc).startswith("p:")
        return
    real_root, real = os.path.realpath(root), os.path.realpath(path)
    assert real != real_root and real.startswith(real_root + os.sep)
    assert path == os.path.join(root, *"/".join(parts).split("/"))  # the join under root as given


@settings(max_examples=40, deadline=None)
@given(st.lists(st.from_regex(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,15}", fullmatch=True)
                .filter(lambda n: n not in ("out", "in", "loop", "etc") and not n.startswith("..")), min_size=1, max_size=4))
def test_the_path_function_keeps_plain_names(link_tree, names):
    assert paths.path_inside(link_tree, *names) == os.path.join(link_tree, *names)


@pytest.fixture(scope="module")
def blob_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("blobs")


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=3000), st.data())
def test_the_blob_hash_verifier_accepts_a_file_iff_its_content_matches(blob_dir, original, data):
    if original and data.draw(st.booleans()):
        index = data.draw(st.integers(0, len(original) - 1))
        flip = data.draw(st.integers(1, 255))
        on_disk = original[:index] + bytes([original[index] ^ flip]) + original[index + 1:]
    else:
        on_disk = data.draw(st.one_of(st.just(original), st.binary(min_size=len(original), max_size=len(original))))
    path = blob_dir / "config.json"
    path.write_bytes(on_disk)
    remote = {"path": "config.json", "size": len(original), "lfs_sha256": None, "xet": False,
              "blob_id": hashlib.sha1(b"blob %d\0" % len(original) + original).hexdigest()}
    problem, _digests = hub.verification_problem(str(path), remote)
    assert (problem is None) is (on_disk == original), problem


# -- hf_model and the preflight's metadata fetch through real ansible-playbook, against the HTTP hub
#
# One ansible-playbook run for all of them (about 9 s): a play of hf_model tasks against hostile
# answers; then the preflight's own metadata tasks (taken from roles/preflight/tasks/plan.yml and
# allocation.yml, up to the plan) - in a real run for one model, which fills the metadata cache, then
# in a check-mode play (a preview) for three: one the cache lacks (plan.yml), and for the allocation
# the cached one and another it lacks.

COMMIT_D = "d" * 40
COMMIT_E = "e" * 40
COMMIT_F = "f" * 40
PLAN_TASKS_UNTIL = ("roles/preflight/tasks/plan.yml", "Share the host with its other models (vllm_models)")
ALLOCATION_TASKS_UNTIL = ("roles/preflight/tasks/allocation.yml", "Allocation | share the host among its models")


def tasks_until(relpath, name):
    """The tasks of a role's task file before the one named ``name``, as they are in the tree."""
    import yaml
    with open(os.path.join(ROOT, relpath)) as handle:
        tasks = yaml.safe_load(handle)
    names = [t.get("name") for t in tasks]
    assert name in names, (relpath, names)
    return tasks[:names.index(name)]


def fetch_task(name, repo_id, models_root, endpoint, **args):
    return {"name": name, "llmops.vllm.hf_model": dict({"repo_id": repo_id, "models_root": models_root,
                                                        "endpoint": endpoint, "protect_units": []}, **args),
            "register": name, "ignore_errors": True}


def keep_task(key, names):
    """Registered results kept under one fact (a later play registers the same names again)."""
    return {"name": "Keep the results", "ansible.builtin.set_fact": {
        key: "{{ {%s} }}" % ", ".join("'%s': %s | default(none)" % (n, n) for n in names)}}


def preflight_vars(model, others, metadata, endpoint):
    def entry(name):
        return {"name": name, "repo_id": "llmops-test/" + name, "revision": "main", "revision_policy": None}
    return {"preflight_model": entry(model), "preflight_set": [entry(n) for n in [model] + others],
            "preflight_metadata_root": str(metadata), "preflight_venv": os.path.dirname(os.path.dirname(sys.executable)),
            "preflight_hub_endpoint": endpoint, "preflight_hub_token": ""}


@pytest.fixture(scope="module")
def played(http_hub, tmp_path_factory):
    """Runs the playbook once; returns (tmp, results per play, ansible-playbook's output)."""
    tmp = tmp_path_factory.mktemp("played")
    models, metadata, host_tmp = tmp / "models", tmp / "metadata", tmp / "host-tmp"
    host_tmp.mkdir()
    ep = http_hub.endpoint
    config = b'{"model_type": "llama"}\n'
    http_hub.repos.update({
        "evil/climb": {"sha": "../../../escape", "files": {"config.json": config}},
        "evil/newline": {"sha": INJECTED, "files": {"config.json": config}},
        # config.json listed without a blob id, and served corrupt at the listed size
        "evil/noblob": {"sha": COMMIT_B, "files": {"config.json": config},
                        "tree": [{"type": "file", "path": "config.json", "size": len(config), "oid": None}],
                        "serve": {"config.json": config.replace(b"llama", b"LLAMA")}},
        "evil/tampered": {"sha": COMMIT_C, "files": {"config.json": config}},
        "llmops-test/tiny": {"sha": COMMIT_D, "files": {"config.json": config_json("Qwen__Qwen3-30B-A3B"),
                                                        "chat_template.jinja": b"{{ messages }}"}},
        "llmops-test/cached": {"sha": COMMIT_E, "files": {"config.json": config_json("meta-llama__Meta-Llama-3.1-8B")}},
        "llmops-test/other": {"sha": COMMIT_F, "files": {"config.json": config_json("Qwen__Qwen3-30B-A3B-FP8")}},
    })
    # A complete-looking version whose manifest (the service user may own it) also lists a file outside.
    outside = tmp / "outside.txt"
    outside.write_bytes(b"root's file\n")
    os.chmod(str(outside), 0o644)
    tampered = models / "evil" / "tampered" / COMMIT_C
    tampered.mkdir(parents=True)
    (tampered / "config.json").write_bytes(config)
    entries = [{"path": "config.json", "size": len(config), "lfs": False, "sha256": hashlib.sha256(config).hexdigest(),
                "git_blob_sha1": hub.git_blob_sha1_bytes(config)},
               {"path": "../../../../outside.txt", "size": outside.stat().st_size, "lfs": False, "sha256": "",
                "git_blob_sha1": None}]
    doc = hub.manifest_document("evil/tampered", COMMIT_C, COMMIT_C, ep, None, None, entries, epoch=time.time() + 60)
    (tampered / hub.MANIFEST_NAME).write_text(json.dumps(doc))

    plan_tasks, allocation_tasks = tasks_until(*PLAN_TASKS_UNTIL), tasks_until(*ALLOCATION_TASKS_UNTIL)
    registered = ["preflight_metadata", "preflight_model_facts", "preflight_set_metadata", "preflight_set_facts"]
    plays = [
        {"name": "hostile hub", "hosts": "localhost", "gather_facts": False, "tasks": [
            fetch_task("climb", "evil/climb", str(models), ep),
            fetch_task("newline", "evil/newline", str(models), ep),
            fetch_task("noblob", "evil/noblob", str(models), ep),
            fetch_task("tampered", "evil/tampered", str(models), ep, revision=COMMIT_C, mode="0600"),
            keep_task("hostile", ["climb", "newline", "noblob", "tampered"])]},
        {"name": "rollout", "hosts": "localhost", "gather_facts": False,
         "vars": preflight_vars("cached", [], metadata, ep),
         "tasks": plan_tasks + [keep_task("rollout", registered[:2])]},
        {"name": "preview", "hosts": "localhost", "gather_facts": False, "check_mode": True,
         "vars": preflight_vars("tiny", ["cached", "other"], metadata, ep),
         "tasks": plan_tasks + allocation_tasks + [keep_task("preview", registered)]},
        {"name": "results", "hosts": "localhost", "gather_facts": False, "tasks": [
            {"name": "Write the results", "check_mode": False, "ansible.builtin.copy": {
                "dest": str(tmp / "results.json"),
                "content": "{{ {'hostile': hostile | default(none), 'rollout': rollout | default(none), "
                           "'preview': preview | default(none)} | to_nice_json }}"}}]},
    ]
    (tmp / "play.yml").write_text(json.dumps(plays))
    (tmp / "inventory").write_text("localhost ansible_connection=local ansible_python_interpreter=%s\n" % sys.executable)
    (tmp / "home").mkdir()
    env = {"ANSIBLE_CONFIG": os.path.join(ROOT, "ansible.cfg"), "PATH": "%s:/usr/bin:/bin" % os.path.dirname(sys.executable),
           "HOME": str(tmp / "home"), "ANSIBLE_LOCAL_TEMP": str(tmp / "home" / "tmp"), "TMPDIR": str(host_tmp),
           "ANSIBLE_NOCOLOR": "1", "LANG": "C.UTF-8", "ANSIBLE_PIPELINING": "1"}
    done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(tmp / "inventory"),
                           str(tmp / "play.yml")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    output = done.stdout + done.stderr
    results = json.loads((tmp / "results.json").read_text()) if (tmp / "results.json").exists() else {}
    return tmp, results, output


def play_result(played, play, name):
    _tmp, results, output = played
    assert (results.get(play) or {}).get(name) is not None, output
    return results[play][name]


@pytest.mark.ansible
def test_issue38_hub_commit_climbing_out_of_models_root_writes_nothing(played):
    """The hub answered the commit ../../../escape: the weights and the manifest landed in tmp/escape,
    outside models_root."""
    tmp = played[0]
    result = play_result(played, "hostile", "climb")
    assert result["failed"] and "evil/climb" in result["msg"] and "'../../../escape'" in result["msg"], result
    assert not (tmp / "escape").exists()
    assert not (tmp / "models" / "evil" / "climb").exists()


@pytest.mark.ansible
def test_issue38_hub_commit_with_a_newline_reaches_no_result(played):
    """The hub answered a commit holding a line break: it came back as the result's commit, which the
    rollout renders into the unit's comment and Description=."""
    tmp = played[0]
    result = play_result(played, "hostile", "newline")
    assert result["failed"] and "evil/newline" in result["msg"] and repr(INJECTED) in result["msg"], result
    assert "\n" not in str(result.get("commit") or "") and "\n" not in str(result.get("path") or "")
    assert not (tmp / "models" / "evil" / "newline").exists()


@pytest.mark.ansible
def test_issue38_file_without_blob_id_is_not_marked_complete(played):
    """config.json listed without a blob id and served corrupt at its listed size was verified by size
    alone and the version was marked complete."""
    tmp = played[0]
    result = play_result(played, "hostile", "noblob")
    assert result["failed"] and "config.json" in result["msg"] and "neither a sha256 nor a git blob id" in result["msg"]
    assert not (tmp / "models" / "evil" / "noblob").exists()


@pytest.mark.ansible
def test_issue38_manifest_listing_a_file_outside_is_not_trusted(played):
    """A manifest in the version directory (which the service user may own) listing ../../../../outside.txt:
    root set the version's mode on that file."""
    tmp = played[0]
    result = play_result(played, "hostile", "tampered")
    assert stat.S_IMODE((tmp / "outside.txt").stat().st_mode) == 0o644
    # The version is checked against the hub again and gets a manifest of our own.
    assert not result.get("failed"), result
    manifest = hub.read_manifest(str(tmp / "models" / "evil" / "tampered" / COMMIT_C))
    assert [f["path"] for f in manifest["files"]] == ["config.json"]


@pytest.mark.ansible
def test_issue38_preview_metadata_fetch_writes_nothing(played):
    """The preflight's metadata fetch (the model's JSON files) ran with check_mode: false, so a preview
    (playbooks/plan.yml, a check-mode play) wrote the metadata cache. Now it writes nothing, yet plans
    with the real files."""
    tmp = played[0]
    metadata = play_result(played, "preview", "preflight_metadata")
    facts = play_result(played, "preview", "preflight_model_facts")
    set_metadata = play_result(played, "preview", "preflight_set_metadata")["results"]
    set_facts = play_result(played, "preview", "preflight_set_facts")["results"]
    # Only what the real run (the rollout play) cached is in the cache; the preview's copies are gone.
    assert sorted(os.listdir(str(tmp / "metadata" / "llmops-test"))) == ["cached"]
    assert os.listdir(str(tmp / "host-tmp")) == []
    # The plan's inputs are the hub's files: the commit pinned, both other models' configs read.
    assert metadata["commit"] == COMMIT_D and facts["architecture"] == "Qwen3MoeForCausalLM"
    assert [r["architecture"] for r in set_facts] == ["LlamaForCausalLM", "Qwen3MoeForCausalLM"]
    assert metadata["preview_dir"].startswith(str(tmp / "host-tmp") + os.sep)
    # The cached model is read where it is; the other one came through a temporary directory.
    cached, other = set_metadata
    assert cached["path"] == str(tmp / "metadata" / "llmops-test" / "cached" / COMMIT_E) and "preview_dir" not in cached
    assert other["preview_dir"].startswith(str(tmp / "host-tmp") + os.sep)


@pytest.mark.ansible
def test_preflight_metadata_fills_the_cache_in_a_rollout(played):
    tmp = played[0]
    metadata = play_result(played, "rollout", "preflight_metadata")
    cached = tmp / "metadata" / "llmops-test" / "cached" / COMMIT_E
    assert metadata["path"] == str(cached) and "preview_dir" not in metadata
    assert hub.read_manifest(str(cached)) is not None and (cached / "config.json").exists()
    assert play_result(played, "rollout", "preflight_model_facts")["architecture"] == "LlamaForCausalLM"
