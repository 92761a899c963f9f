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

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils import hub

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
def test_safe_relpath_refuses_paths_leaving_dest_or_hitting_bookkeeping(path):
    with pytest.raises(hub.HubError) as err:
        hub.safe_relpath(path)
    assert repr(path) in str(err.value)


def test_safe_relpath_keeps_nested_paths():
    assert hub.safe_relpath("original/config.json") == os.path.join("original", "config.json")


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
