# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fetch one Hugging Face model version onto a host: pinned to a commit, verified, resumable,
disk-aware and idempotent.

A rollout downloads the new weights (hundreds of GB) while the old model keeps serving, so a
half-downloaded or silently corrupted checkpoint must never look complete. One version lives in
``dest`` (by default ``<models_root>/<org>/<name>/<commit>``, so versions coexist):

    dest/<file>                  only files that passed verification are ever put here
    dest/.llmops-manifest.json   written last, only when every file verified: "this version is complete"
    dest/.llmops-partial/        work area of an unfinished fetch (0700): <file>.part (bytes to resume),
                                 verified.json (files already verified, so a resume does not re-hash
                                 them) and the lock of the running fetch
    <dest>.llmops-progress.json  0600, rewritten every second while fetching (the model role polls it)

Verification does not trust huggingface_hub's own checks (it has reported success on a bad blob,
huggingface_hub#3643, and resumes unreliably, #4196): LFS files are hashed against the sha256 the
hub's tree lists for the commit, other files against their size and git blob sha1 (a file listed
with neither is refused before anything is written).

The hub is not trusted (docs/security.md): the commit it answers passes ``checked_commit`` before any
use, every path built from its answers (the commit, each listed file, a manifest read back) passes
``paths.path_inside`` under its root (``default_dest``, ``dest_path``), and a listing with a file it
gives no checksum for is refused (``checked_remote_files``).

Everything but the network part is plain functions on plain data, standard library only, so unit
tests need neither Ansible nor huggingface_hub. The network part (``Hub``) imports huggingface_hub
lazily: this is the only module_utils that needs it, and the module runs with the vLLM venv's
interpreter, which has it.
"""

from __future__ import annotations

import collections
import datetime
import errno
import fnmatch
import glob
import grp
import hashlib
import json
import os
import pwd
import re
import shutil
import sys
import tempfile
import threading
import time
from typing import (Any, BinaryIO, Callable, Deque, Dict, Iterable, List, Mapping, Optional, Sequence, Set, TextIO, Tuple,
                    TypedDict, TypeVar, Union, cast)

from ansible_collections.llmops.vllm.plugins.module_utils import host_state, paths

MANIFEST_NAME = ".llmops-manifest.json"
PARTIAL_DIR = ".llmops-partial"
VERIFIED_NAME = "verified.json"
LOCK_NAME = "lock"
PROGRESS_SUFFIX = ".llmops-progress.json"
MANIFEST_FORMAT = 1
DEFAULT_MODELS_ROOT = "/var/lib/llmops-vllm/models"
PUBLIC_ENDPOINT = "https://huggingface.co"
DEFAULT_UNIT_GLOBS = (host_state.unit_glob(),)  # the units this collection writes
DEFAULT_FILE_MODE = 0o644
# Kept free on the target filesystem after the download: logs, vLLM's compile caches and the old
# model's own writes must still fit while the new weights land. 1 GiB or 1% of what is fetched.
MIN_DISK_MARGIN = 1 << 30
DISK_MARGIN_FRACTION = 0.01
HASH_CHUNK = 8 << 20
PROGRESS_INTERVAL = 1.0
RATE_WINDOW = 10.0

# A commit, a git blob id (sha1) and an LFS sha256, exactly (fullmatch: "$" would allow a trailing newline).
COMMIT_RE = re.compile(r"[0-9a-f]{40}")
BLOB_ID_RE = COMMIT_RE
SHA256_RE = re.compile(r"[0-9a-f]{64}")
_T = TypeVar("_T")
_R = TypeVar("_R")

# A manifest or verified.json as read back from disk, or a progress document: JSON.
Json = Dict[str, Any]


class RemoteFile(TypedDict):
    """One file of a commit as Hub.list_files() reports it."""
    path: str
    size: int
    blob_id: Optional[str]
    lfs_sha256: Optional[str]
    xet: bool


class Digests(TypedDict):
    """file_digests(): sha256 always, git blob sha1 when asked for."""
    sha256: str
    git_blob_sha1: Optional[str]


class LocalFile(TypedDict):
    """scan_local(): what dest holds for one remote file."""
    final_size: Optional[int]
    final_mtime_ns: Optional[int]
    part_size: int


class _ActionExtra(TypedDict, total=False):
    replace_final: bool  # fetch actions only


class Action(_ActionExtra):
    """One file of plan_fetch(): keep, check or fetch (resuming from resume_from bytes)."""
    path: str
    action: str
    resume_from: int


class FetchPlan(TypedDict):
    """plan_fetch()'s result."""
    actions: List[Action]
    bytes_total: int
    bytes_present: int
    bytes_needed: int
    fetch: List[str]


class Version(TypedDict):
    """One version directory of list_versions()."""
    path: str
    commit: Optional[str]
    fetched_at_epoch: float
    bytes: int
    complete: bool


class ManifestFile(TypedDict):
    """One entry of the manifest's files."""
    path: str
    size: int
    lfs: bool
    sha256: str
    git_blob_sha1: Optional[str]


REPO_PART_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class HubError(Exception):
    """A fetch cannot proceed; the message names the input, the value and what to do.

    ``details`` carries numbers the caller returns next to the message (e.g. the disk check's).
    """

    def __init__(self, msg: str, **details: Any) -> None:
        super().__init__(msg)
        self.details = details


# ----------------------------------------------------------------------------- names and paths

def validate_repo_id(repo_id: str) -> str:
    """``org/name`` only: the id becomes two directory levels under models_root, so anything that
    could climb out of it (``..``, absolute paths, extra slashes) is refused."""
    parts = (repo_id or "").split("/")
    if len(parts) != 2 or not all(REPO_PART_RE.match(p) and ".." not in p for p in parts):
        raise HubError("repo_id %r: expected ORG/NAME (letters, digits, '.', '_', '-'), e.g. "
                       "MiniMaxAI/MiniMax-M2.5" % (repo_id,))
    return repo_id


def is_commit(revision: Any) -> bool:
    """A full commit sha (exactly 40 lower-case hex characters) pins the version by itself: no network
    is needed to know which one it is."""
    return isinstance(revision, str) and COMMIT_RE.fullmatch(revision) is not None


def checked_commit(value: Any, what: str) -> str:
    """``value`` when it is a commit (exactly 40 lower-case hex characters), else HubError.

    Every commit a hub answers passes here before any use: it becomes a directory level under
    models_root, the manifest's and the result's ``commit`` and, through the rollout, a line of the
    unit. ``what`` says whose answer it is, e.g. "the commit the hub at URL answered for ORG/NAME@main".
    """
    if is_commit(value):
        return cast(str, value)
    raise HubError("%s is %r, not a commit (exactly 40 lower-case hexadecimal characters): it was not used, nothing "
                   "was written. Check that the endpoint is a Hugging Face compatible hub you trust, or pin "
                   "revision to the full commit sha" % (what, value))


def _inside(root: str, *parts: str, what: str) -> str:
    """paths.path_inside with its refusal as a HubError (what the module reports)."""
    try:
        return paths.path_inside(root, *parts, what=what)
    except paths.PathError as exc:
        raise HubError(str(exc))


def default_dest(models_root: str, repo_id: str, commit: str) -> str:
    """<models_root>/<org>/<name>/<commit>: one directory per version, so a revert needs no download."""
    org, name = validate_repo_id(repo_id).split("/")
    return _inside(models_root, org, name, checked_commit(commit, "the commit of %s" % repo_id),
                   what="the version directory of %s" % repo_id)


def progress_path(dest: str) -> str:
    """Next to dest (not inside it), so it never becomes part of the model directory vLLM reads."""
    return dest.rstrip("/") + PROGRESS_SUFFIX


def manifest_path(dest: str) -> str:
    return _inside(dest, MANIFEST_NAME, what="the manifest")


def partial_dir(dest: str) -> str:
    return _inside(dest, PARTIAL_DIR, what="the work area of the fetch")


def dest_path(dest: str, relpath: Any, what: str = "the hub's file path") -> str:
    """Where one file of the version lives: dest/relpath, refused (HubError) when it would leave dest
    (``..``, an absolute path, a symlink out: paths.path_inside) or land on the bookkeeping files.

    For every file name that comes from the hub's listing or from a manifest read back: a hostile or
    broken hub listing ``../x`` or ``/etc/x`` must not write outside the model directory.
    """
    if isinstance(relpath, str) and relpath.split("/")[0] in (MANIFEST_NAME, PARTIAL_DIR):
        raise HubError("%s %r would land on the bookkeeping files of %s; refusing to fetch this repository"
                       % (what, relpath, dest))
    return _inside(dest, relpath, what=what)


def part_path(dest: str, relpath: str) -> str:
    """The partial download of one file, inside dest's work area."""
    dest_path(dest, relpath)
    return _inside(partial_dir(dest), relpath + ".part", what="the partial download of the hub's file path")


def sanitize_endpoint(endpoint: Optional[str]) -> str:
    """The endpoint as it may be reported: without any user:password@ part."""
    return re.sub(r"^(\w+://)[^/@]*@", r"\1", endpoint or "")


def resolve_endpoint(endpoint: Optional[str], environ: Optional[Mapping[str, str]] = None) -> str:
    """The given endpoint, else HF_ENDPOINT of the target, else the public hub, without a trailing /."""
    environ = os.environ if environ is None else environ
    return (endpoint or environ.get("HF_ENDPOINT") or PUBLIC_ENDPOINT).rstrip("/")


def resolve_commit_http(endpoint: Optional[str], repo_id: str, revision: str, token: Optional[str] = None,
                        timeout: float = 10.0) -> str:
    """The commit a branch or tag names now, with one plain HTTP request (no huggingface_hub import).

    GET {endpoint}/api/models/{repo_id}/revision/{revision} (the request huggingface_hub's model_info
    makes); the token travels in the Authorization header only. HubError names what failed.
    """
    import urllib.error
    import urllib.parse
    if is_commit(revision):
        return revision
    import base64
    import http.client
    parts = urllib.parse.urlsplit(resolve_endpoint(endpoint))
    headers = {"Authorization": "Bearer " + token} if token else {}
    netloc = parts.netloc
    if "@" in netloc:  # user:password@host - sent as basic auth (unless a token is given), never in the URL
        userinfo, netloc = netloc.rsplit("@", 1)
        if not token:
            headers["Authorization"] = "Basic " + base64.b64encode(
                urllib.parse.unquote(userinfo).encode("utf-8")).decode("ascii")
    base = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", "")).rstrip("/")
    url = "%s/api/models/%s/revision/%s" % (base, validate_repo_id(repo_id), urllib.parse.quote(revision, safe=""))
    shown = "%s/api/models/%s/revision/%s" % (base, repo_id, revision)
    try:
        from ansible.module_utils.urls import open_url
        response = open_url(url, headers=headers, timeout=timeout, follow_redirects="safe")
        document = json.loads(response.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:
        raise HubError("%s answered %d" % (shown, exc.code))
    except http.client.InvalidURL:
        raise HubError("%s is not a valid URL" % shown)
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
        raise HubError("%s: %s" % (shown, getattr(exc, "reason", exc)))
    if not isinstance(document, dict) or not document.get("sha"):
        raise HubError("%s gave no commit sha" % shown)
    return checked_commit(document["sha"], "the commit %s answered" % shown)


def filter_paths(paths: Iterable[str], allow_patterns: Optional[Sequence[str]] = None,
                 ignore_patterns: Optional[Sequence[str]] = None) -> List[str]:
    """The paths huggingface_hub's snapshot_download would fetch for these patterns (fnmatch on the
    whole path; a pattern ending in '/' means everything below that folder)."""
    def norm(patterns: Optional[Sequence[str]]) -> Optional[List[str]]:
        if not patterns:
            return None
        return [p + "*" if p.endswith("/") else p for p in patterns]
    allow, ignore = norm(allow_patterns), norm(ignore_patterns)
    kept: List[str] = []
    for path in paths:
        if allow is not None and not any(fnmatch.fnmatch(path, p) for p in allow):
            continue
        if ignore is not None and any(fnmatch.fnmatch(path, p) for p in ignore):
            continue
        kept.append(path)
    return kept


# ----------------------------------------------------------------------------- digests

def file_digests(path: str, git_blob: bool = False) -> Digests:
    """sha256 of the file and, for files the hub does not store in LFS, the git blob sha1 (the
    hub's only checksum for them). One read serves both."""
    sha256 = hashlib.sha256()
    sha1 = None
    if git_blob:
        sha1 = hashlib.sha1()
        sha1.update(b"blob %d\0" % os.path.getsize(path))
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(HASH_CHUNK)
            if not chunk:
                break
            sha256.update(chunk)
            if sha1 is not None:
                sha1.update(chunk)
    return {"sha256": sha256.hexdigest(), "git_blob_sha1": sha1.hexdigest() if sha1 else None}


def git_blob_sha1_bytes(data: bytes) -> str:
    """git's object id of a blob: sha1 over "blob <size>\\0" + content (what the tree API lists)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def verification_problem(path: str, remote: RemoteFile) -> Tuple[Optional[str], Optional[Digests]]:
    """None when the file at path is the hub's file, else what is wrong (and the digests either way).

    Size first: it is free and catches truncation; then the hub's own checksum - the sha256 of an LFS
    file, the git blob sha1 of any other. A file the hub gives neither for is never good: its size
    alone would pass a corrupt file (checked_remote_files refuses such a listing before any download).
    """
    if not remote.get("lfs_sha256") and not remote.get("blob_id"):
        return ("%s: the hub lists neither a sha256 nor a git blob id for it, so it cannot be verified"
                % remote["path"], None)
    try:
        size = os.path.getsize(path)
    except OSError as exc:
        return "cannot read %s: %s" % (path, exc.strerror), None
    if size != remote["size"]:
        return "%s has %d bytes, the hub lists %d" % (remote["path"], size, remote["size"]), None
    digests = file_digests(path, git_blob=remote.get("lfs_sha256") is None)
    if remote.get("lfs_sha256"):
        if digests["sha256"] != remote["lfs_sha256"]:
            return ("%s: sha256 %s, the hub lists %s for this commit" % (remote["path"], digests["sha256"],
                                                                         remote["lfs_sha256"]), digests)
    elif digests["git_blob_sha1"] != remote["blob_id"]:
        problem = "%s: git blob sha1 %s, the hub lists %s for this commit" % (
            remote["path"], digests["git_blob_sha1"], remote["blob_id"])
        return problem, digests
    return None, digests


def checked_remote_files(files: Iterable[RemoteFile], repo_id: str, commit: str, dest: str,
                         endpoint: Optional[str] = None) -> List[RemoteFile]:
    """The hub's listing of a commit, refused as a whole (HubError naming the file and the value) unless
    every file is one we can place and verify: its path inside dest (dest_path), its size a byte count,
    its checksums well-formed, and a checksum at all - the sha256 of an LFS file or the git blob id of
    any other. Called on the listing before anything is planned or written."""
    where = "%s@%s%s" % (repo_id, commit, " at %s" % sanitize_endpoint(endpoint) if endpoint else "")
    checked: List[RemoteFile] = []
    for remote in files:
        dest_path(dest, remote.get("path"), what="the hub's file path in %s" % where)
        size = remote.get("size")
        problem = None
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            problem = "a size of %r bytes" % (size,)
        elif remote.get("lfs_sha256") is not None and not SHA256_RE.fullmatch(str(remote["lfs_sha256"])):
            problem = "the LFS sha256 %r (expected 64 lower-case hex characters)" % (remote["lfs_sha256"],)
        elif remote.get("blob_id") is not None and not BLOB_ID_RE.fullmatch(str(remote["blob_id"])):
            problem = "the git blob id %r (expected 40 lower-case hex characters)" % (remote["blob_id"],)
        elif remote.get("lfs_sha256") is None and remote.get("blob_id") is None:
            problem = ("neither a sha256 nor a git blob id, so the file could not be verified (its size alone "
                       "would pass a corrupt file)")
        if problem:
            raise HubError("the hub lists %s of %s with %s; refusing to fetch this version: nothing was written. "
                           "Check that the endpoint is a Hugging Face compatible hub you trust"
                           % (remote["path"], where, problem), file=remote["path"])
        checked.append(remote)
    return checked


# ----------------------------------------------------------------------------- JSON files

def write_json_atomic(path: str, document: Any, mode: int = 0o644, uid: Optional[int] = None, gid: Optional[int] = None) -> None:
    """Write-then-rename, so a reader (or a crash) never sees half a manifest or progress file.

    The temporary file gets its final mode before any byte is written: a 0600 file never exists
    with a wider mode, not even for a moment.
    """
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        os.fchmod(fd, mode)
        if uid is not None or gid is not None:
            os.fchown(fd, -1 if uid is None else uid, -1 if gid is None else gid)
        with os.fdopen(fd, "w") as handle:
            json.dump(document, handle, indent=1, sort_keys=True)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_json(path: str) -> Any:
    """The JSON document at path, or None when it is missing or unreadable (then it does not count)."""
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


# ----------------------------------------------------------------------------- manifest

def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def read_manifest(dest: str) -> Optional[Json]:
    """The manifest of dest, or None when there is none or it is not one of ours - including one that
    lists a file outside dest (the service user may own dest, and root chowns and hashes what a
    manifest lists)."""
    manifest = read_json(manifest_path(dest))
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT \
            or not isinstance(manifest.get("files"), list):
        return None
    for entry in manifest["files"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("size"), int):
            return None
        try:
            dest_path(dest, entry.get("path"), what="a file path the manifest lists")
        except HubError:
            return None
    return manifest


def manifest_document(repo_id: str, commit: str, revision: Optional[str], endpoint: Optional[str],
                      allow_patterns: Optional[Sequence[str]], ignore_patterns: Optional[Sequence[str]],
                      files: Iterable[ManifestFile], now: Optional[str] = None, epoch: Optional[float] = None) -> Json:
    """What a complete version records: where it came from and what every file must be.

    ``files``: dicts with path, size, lfs (bool), sha256 (the hub's for LFS files, computed after the
    git blob check for the others) and git_blob_sha1 (non-LFS files).
    """
    files = sorted(files, key=lambda f: f["path"])
    return {
        "format": MANIFEST_FORMAT,
        "repo_id": repo_id,
        "commit": commit,
        "revision": revision,
        "endpoint": sanitize_endpoint(endpoint),
        "allow_patterns": list(allow_patterns or []),
        "ignore_patterns": list(ignore_patterns or []),
        "files": files,
        "bytes": sum(f["size"] for f in files),
        "fetched_at": now or utc_now(),
        "fetched_at_epoch": time.time() if epoch is None else epoch,
        "verified": "sha256 of LFS files against the hub's tree; git blob sha1 and size of the others",
        "written_by": "llmops.vllm.hf_model",
    }


def manifest_problems(manifest: Optional[Json], dest: str, repo_id: str, commit: str, allow_patterns: Optional[Sequence[str]],
                      ignore_patterns: Optional[Sequence[str]]) -> List[str]:
    """Why dest is not (or no longer) the complete requested version; [] when it is.

    The quick check: identity, patterns and, for every file, that it exists with its recorded size.
    Reads no file content (a full re-hash is ``verify: sha256``).
    """
    if manifest is None:
        if os.path.lexists(manifest_path(dest)):
            return ["the manifest %s is not one hf_model wrote (unreadable, another format, or a file path outside "
                    "%s): the version is fetched and verified again" % (manifest_path(dest), dest)]
        return ["no manifest (%s): the version is absent or its fetch did not finish" % manifest_path(dest)]
    problems: List[str] = []
    if manifest.get("repo_id") != repo_id or manifest.get("commit") != commit:
        problems.append("the manifest is for %s@%s, not %s@%s" % (
            manifest.get("repo_id"), manifest.get("commit"), repo_id, commit))
    if list(manifest.get("allow_patterns") or []) != list(allow_patterns or []) \
            or list(manifest.get("ignore_patterns") or []) != list(ignore_patterns or []):
        problems.append("the manifest was written for other allow/ignore patterns")
    for entry in manifest.get("files", []):
        path = dest_path(dest, entry["path"], what="a file path the manifest lists")
        try:
            size = os.path.getsize(path)
        except OSError:
            problems.append("%s is missing" % entry["path"])
            continue
        if size != entry["size"]:
            problems.append("%s has %d bytes, the manifest says %d" % (entry["path"], size, entry["size"]))
    return problems


def manifest_rehash(manifest: Json, dest: str, workers: int = 4) -> Dict[str, str]:
    """Files of a complete version whose content no longer matches its manifest (``verify: sha256``).

    Hashing is I/O and C code that releases the GIL, so a few threads use several disks/cores.
    """
    entries = manifest.get("files", [])

    def check(entry: Json) -> Tuple[str, Optional[str]]:
        path = dest_path(dest, entry["path"], what="a file path the manifest lists")
        try:
            digest = file_digests(path)["sha256"]
        except OSError as exc:
            return entry["path"], "cannot read: %s" % exc.strerror
        if digest != entry.get("sha256"):
            return entry["path"], "sha256 %s, the manifest says %s" % (digest, entry.get("sha256"))
        return entry["path"], None

    results = parallel_map(check, entries, workers)
    return dict((path, problem) for path, problem in results if problem)


def parallel_map(function: Callable[[_T], _R], items: Iterable[_T], workers: int) -> List[_R]:
    """function over items in up to ``workers`` threads, results in input order."""
    import concurrent.futures
    items = list(items)
    if not items:
        return []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(workers, len(items)))) as pool:
        return list(pool.map(function, items))


# ----------------------------------------------------------------------------- plan

def scan_local(dest: str, remote_files: Iterable[RemoteFile]) -> Dict[str, LocalFile]:
    """What is on disk for each remote file: final file size/mtime and resumable partial bytes."""
    local: Dict[str, LocalFile] = {}
    for remote in remote_files:
        final = dest_path(dest, remote["path"])
        entry: LocalFile = {"final_size": None, "final_mtime_ns": None, "part_size": 0}
        try:
            st = os.stat(final)
            entry["final_size"], entry["final_mtime_ns"] = st.st_size, st.st_mtime_ns
        except OSError:
            pass
        try:
            entry["part_size"] = os.path.getsize(part_path(dest, remote["path"]))
        except OSError:
            pass
        local[remote["path"]] = entry
    return local


def plan_fetch(remote_files: Iterable[RemoteFile], local: Mapping[str, LocalFile], verified: Mapping[str, Json]) -> FetchPlan:
    """Decide, per file, what the fetch must do, and count the bytes for the disk check.

    - ``keep``: the final file is there, with a verified record of this very size and mtime;
    - ``check``: the final file is there with the right size but unverified (hash it; fetch if bad);
    - ``fetch``: anything else; ``resume_from`` > 0 when a partial download can be continued.

    bytes_present counts kept and to-be-checked files plus resumable partial bytes; bytes_needed is
    what still has to come over the network if everything present turns out good.
    """
    actions: List[Action] = []
    total = present = 0
    for remote in remote_files:
        size = remote["size"]
        total += size
        entry = local.get(remote["path"], cast(LocalFile, {}))
        record = verified.get(remote["path"])
        if entry.get("final_size") == size:
            if record and record.get("size") == size and record.get("mtime_ns") == entry.get("final_mtime_ns"):
                action: Action = {"path": remote["path"], "action": "keep", "resume_from": 0}
            else:
                action = {"path": remote["path"], "action": "check", "resume_from": 0}
            present += size
        else:
            resume = entry.get("part_size") or 0
            resume = resume if 0 < resume <= size else 0
            action = {"path": remote["path"], "action": "fetch", "resume_from": resume,
                      "replace_final": entry.get("final_size") is not None}
            present += resume
        actions.append(action)
    return {"actions": actions, "bytes_total": total, "bytes_present": present, "bytes_needed": total - present,
            "fetch": [a["path"] for a in actions if a["action"] == "fetch"]}


# ----------------------------------------------------------------------------- disk

def free_bytes(path: str) -> int:
    """Bytes an unprivileged writer can still use on the filesystem that will hold path (the nearest
    existing ancestor is asked, since dest usually does not exist yet)."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    st = os.statvfs(probe)
    return st.f_bavail * st.f_frsize


def disk_margin(bytes_needed: int, margin: Optional[Union[int, str]] = None) -> int:
    """The bytes kept free after the download: the given margin, else max(1 GiB, 1% of the fetch)."""
    if margin is not None:
        return int(margin)
    return max(MIN_DISK_MARGIN, int(bytes_needed * DISK_MARGIN_FRACTION))


def human_bytes(value: Union[int, float]) -> str:
    """Binary units, as df -h prints them, for messages next to the exact byte counts."""
    value = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return ("%d %s" % (value, unit)) if unit == "B" else ("%.1f %s" % (value, unit))
        value /= 1024.0
    return "%.1f TiB" % value


def disk_refusal(repo_id: str, commit: str, dest: str, bytes_total: int, bytes_present: int, bytes_needed: int, free: int,
                 margin: int) -> Optional[str]:
    """The refusal message when the download does not fit (with all four numbers), else None."""
    if bytes_needed + margin <= free:
        return None
    return ("not enough disk space for %s@%s in %s: the model is %d bytes (%s), %d bytes (%s) are already "
            "present, %d bytes (%s) are still needed, and the filesystem has %d bytes (%s) free, of which "
            "%d bytes (%s) must stay free as a margin. Free %d bytes, or choose another models_root/dest "
            "(state: absent removes an old version; keep prunes old versions)" % (
                repo_id, commit, dest, bytes_total, human_bytes(bytes_total), bytes_present,
                human_bytes(bytes_present), bytes_needed, human_bytes(bytes_needed), free, human_bytes(free),
                margin, human_bytes(margin), bytes_needed + margin - free))


# ----------------------------------------------------------------------------- versions and pruning

def version_dir(path: str, models_root: str) -> Optional[str]:
    """The version directory (<models_root>/<org>/<name>/<commit>) that path is in, else None."""
    root = os.path.normpath(models_root)
    path = os.path.normpath(path)
    if not path.startswith(root + os.sep):
        return None
    parts = path[len(root) + 1:].split(os.sep)
    if len(parts) < 3:
        return None
    return os.path.join(root, *parts[:3])


def paths_in_units(unit_texts: Mapping[str, Optional[str]], models_root: str) -> Dict[str, List[str]]:
    """Version directories under models_root that systemd units name (ExecStart, Environment, ...).

    ``unit_texts``: {unit path: text}. Returns {version dir: [unit paths]}.
    """
    root = os.path.normpath(models_root)
    pattern = re.compile(re.escape(root) + r"/[^\s\"';]+")
    found: Dict[str, List[str]] = {}
    for unit, text in sorted(unit_texts.items()):
        for match in pattern.finditer(text or ""):
            version = version_dir(match.group(0).rstrip(","), root)
            if version:
                found.setdefault(version, [])
                if unit not in found[version]:
                    found[version].append(unit)
    return found


def read_units(globs: Iterable[str]) -> Dict[str, str]:
    """{unit path: text} for the unit files matching globs; unreadable ones are skipped."""
    texts: Dict[str, str] = {}
    for pattern in globs:
        for unit in sorted(glob.glob(pattern)):
            try:
                with open(unit, errors="replace") as handle:
                    texts[unit] = handle.read()
            except OSError:
                continue
    return texts


def covers(protected: str, version: str) -> bool:
    """True when protecting ``protected`` keeps ``version``: the same directory, a path inside it, or a
    directory that contains it. Symlinks are resolved (units often name a 'current' link)."""
    protected = os.path.realpath(protected)
    version = os.path.realpath(version)
    return protected == version or protected.startswith(version + os.sep) or version.startswith(protected + os.sep)


def list_versions(models_root: str, repo_id: str) -> List[Version]:
    """Versions of repo_id under models_root: {path, commit, fetched_at_epoch, bytes, complete}.

    Only directories with this repo's manifest are complete; others (an unfinished fetch, a foreign
    directory) are listed as incomplete and never pruned.
    """
    org, name = validate_repo_id(repo_id).split("/")
    base = os.path.join(models_root, org, name)
    versions: List[Version] = []
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return versions
    for entry in names:
        path = os.path.join(base, entry)
        if not os.path.isdir(path) or os.path.islink(path):
            continue
        manifest = read_manifest(path)
        complete = manifest is not None and manifest.get("repo_id") == repo_id
        versions.append({"path": path, "commit": cast(Json, manifest).get("commit") if complete else None,
                         "fetched_at_epoch": float(cast(Json, manifest).get("fetched_at_epoch") or 0) if complete else 0.0,
                         "bytes": int(cast(Json, manifest).get("bytes") or 0) if complete else 0, "complete": complete})
    return versions


def select_prune(versions: Iterable[Version], keep: int, current: str, protected: Iterable[str]) -> List[str]:
    """Which versions to delete so that ``keep`` remain, never the current one or a protected one.

    Kept first: the current version, then protected ones (a unit serves them: that is the revert
    target), then the newest others by manifest time, until ``keep`` versions are kept. Protected
    versions are kept even beyond ``keep``. keep 0 prunes nothing. Incomplete versions are ignored.
    """
    if not keep:
        return []
    complete = [v for v in versions if v["complete"]]
    current_real = os.path.realpath(current)
    kept = set(v["path"] for v in complete if os.path.realpath(v["path"]) == current_real)
    count = 1
    guarded = set(v["path"] for v in complete if any(covers(p, v["path"]) for p in protected))
    for path in sorted(guarded - kept):
        kept.add(path)
        count += 1
    for version in sorted(complete, key=lambda v: v["fetched_at_epoch"], reverse=True):
        if version["path"] in kept:
            continue
        if count < keep:
            kept.add(version["path"])
            count += 1
    return [v["path"] for v in sorted(complete, key=lambda v: v["fetched_at_epoch"]) if v["path"] not in kept]


def remove_version(path: str) -> None:
    """Delete one version directory and its progress file.

    Its directory must be root's, reached without a link another user planted (paths.open_dir); rmtree
    itself removes by file descriptor and never follows a link inside the version.
    """
    os.close(paths.open_dir(os.path.dirname(os.path.normpath(path)), what="the directory of the version %s" % path))
    shutil.rmtree(path)
    try:
        os.unlink(progress_path(path))
    except OSError:
        pass


# ----------------------------------------------------------------------------- ownership

def resolve_uid(owner: Optional[Union[int, str]]) -> Optional[int]:
    """A user name or number as a uid; None keeps the fetching user.

    Ansible looks the name up again when it sets the owner, but only with a generic "failed to look
    up user" and only once files are being written: this refuses before anything is fetched.
    """
    if owner in (None, ""):
        return None
    try:
        return int(owner)
    except ValueError:
        pass
    try:
        return pwd.getpwnam(cast(str, owner)).pw_uid
    except KeyError:
        raise HubError("owner %r: no such user on the target; create the service user first "
                       "(or leave owner unset)" % (owner,))


def resolve_gid(group: Optional[Union[int, str]]) -> Optional[int]:
    """A group name or number as a gid; None keeps the fetching user's group (checked early, as
    resolve_uid is)."""
    if group in (None, ""):
        return None
    try:
        return int(group)
    except ValueError:
        pass
    try:
        return grp.getgrnam(cast(str, group)).gr_gid
    except KeyError:
        raise HubError("group %r: no such group on the target; create it first (or leave group unset)" % (group,))


def parse_mode(mode: Optional[Union[int, str]]) -> int:
    """An octal mode for the model files: '0644', '644' or an int (YAML 0644 arrives as 420).

    An int, not the string Ansible would also take: directories get a mode derived from it
    (dir_mode), and symbolic modes, which Ansible resolves per path, have no such derivation.
    """
    if mode in (None, ""):
        return DEFAULT_FILE_MODE
    if isinstance(mode, int):
        value = mode
    else:
        try:
            value = int(str(mode), 8)
        except ValueError:
            raise HubError("mode %r: give an octal mode such as '0644' (quoted in YAML); symbolic modes "
                           "are not supported" % (mode,))
    if not 0 <= value <= 0o7777:
        raise HubError("mode %r: out of range; give an octal mode such as '0644'" % (mode,))
    if not value & 0o400:
        raise HubError("mode %r: the owner could not read the model files; give e.g. '0644' or '0640'" % (mode,))
    return value


def dir_mode(file_mode: int) -> int:
    """Directories get the file mode plus x wherever it has r, so whoever may read the files may
    also reach them."""
    return file_mode | ((file_mode & 0o444) >> 2)


def attribute_targets(dest: str, relpaths: Iterable[str], file_mode: int) -> List[Tuple[str, int]]:
    """(path, mode) for dest, the directories below it that hold model files, every file and the
    manifest: everything the service user must be able to read. The module sets owner, group and
    these modes by file descriptor, never through a link (paths.set_attributes_at; every path is checked to
    stay inside dest, see dest_path)."""
    directories = {dest}
    for rel in relpaths:
        parent = os.path.dirname(rel)
        while parent:
            directories.add(dest_path(dest, parent))
            parent = os.path.dirname(parent)
    targets = [(d, dir_mode(file_mode)) for d in sorted(directories)]
    targets += [(dest_path(dest, rel), file_mode) for rel in sorted(relpaths)]
    targets.append((manifest_path(dest), file_mode))
    return targets


# ----------------------------------------------------------------------------- progress

class Progress:
    """Byte counters of one fetch and the 0600 JSON file a polling task reads.

    A thread rewrites the file every second (write-then-rename), so a reader never sees half a
    document; ``updated`` tells a poller whether the fetch is still alive.
    """

    def __init__(self, path: str, repo_id: str, commit: str, dest: str, bytes_total: int, bytes_present: int,
                 files_total: int) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.doc: Json = {"repo_id": repo_id, "commit": commit, "dest": dest, "pid": os.getpid(), "phase": "planning",
                          "started": time.time(), "updated": time.time(), "bytes_total": bytes_total,
                          "bytes_present_at_start": bytes_present, "bytes_done": bytes_present, "downloaded_bytes": 0,
                          "rate_bytes_per_s": 0, "files_total": files_total, "files_done": 0, "current_files": [],
                          "error": None}
        self.in_flight: Dict[str, int] = {}
        self.samples: Deque[Tuple[float, int]] = collections.deque()
        self.stop_event = threading.Event()
        self.thread: Optional[threading.Thread] = None

    def start(self) -> None:
        self.write()
        self.thread = threading.Thread(target=self._loop, name="llmops-progress")
        self.thread.daemon = True
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop_event.wait(PROGRESS_INTERVAL):
            self.write()

    def phase(self, phase: str) -> None:
        with self.lock:
            self.doc["phase"] = phase

    def add(self, relpath: str, count: int) -> None:
        """count bytes arrived over the network for relpath (negative: a restart threw bytes away)."""
        with self.lock:
            if count > 0:
                self.doc["downloaded_bytes"] += count
            self.doc["bytes_done"] += count
            self.in_flight[relpath] = self.in_flight.get(relpath, 0) + count

    def begin(self, relpath: str) -> None:
        with self.lock:
            self.in_flight.setdefault(relpath, 0)

    def end(self, relpath: str, done: bool) -> None:
        """relpath left the download; done: it is verified and in place."""
        with self.lock:
            self.in_flight.pop(relpath, None)
            if done:
                self.doc["files_done"] += 1

    def wasted(self, count: int) -> None:
        """Bytes that came over the network and were thrown away at once."""
        with self.lock:
            self.doc["downloaded_bytes"] += count

    def discard(self, count: int) -> None:
        """Bytes counted as done that turned out bad (deleted for a re-fetch)."""
        with self.lock:
            self.doc["bytes_done"] -= count

    def count_done(self, files: int = 1) -> None:
        with self.lock:
            self.doc["files_done"] += files

    def snapshot(self) -> Json:
        with self.lock:
            now = time.time()
            self.samples.append((now, self.doc["downloaded_bytes"]))
            while len(self.samples) > 2 and now - self.samples[0][0] > RATE_WINDOW:
                self.samples.popleft()
            first_t, first_b = self.samples[0]
            rate = (self.doc["downloaded_bytes"] - first_b) / (now - first_t) if now > first_t else 0
            self.doc["rate_bytes_per_s"] = int(rate)
            self.doc["updated"] = now
            self.doc["current_files"] = sorted(self.in_flight)[:8]
            return dict(self.doc)

    def write(self) -> None:
        """Best effort: a full disk or a removed directory must not break the fetch itself."""
        try:
            write_json_atomic(self.path, self.snapshot(), mode=0o600)
        except OSError:
            pass

    def finish(self, phase: str, error: Optional[str] = None) -> None:
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(5)
        with self.lock:
            self.doc["phase"] = phase
            self.doc["error"] = error
            self.doc["current_files"] = []
        self.write()


class RangeIgnored(Exception):
    """The server answered a Range request with the whole file from byte 0."""


def resume_head(part: str, resume: int, limit: int = 1 << 16) -> bytes:
    """The first bytes of a partial file, to recognise a server that answers a Range request with the
    whole file; empty (no check) when there is nothing to resume or the bytes are all alike (zero
    padding would match any offset)."""
    if resume <= 0:
        return b""
    with open(part, "rb") as handle:
        head = handle.read(min(resume, limit))
    return head if len(set(head)) > 1 else b""


class CountingWriter:
    """The file object handed to huggingface_hub's http_get: counts bytes for the progress file and
    notices when the server ignored our Range request.

    Recent huggingface_hub releases see the 200 answer and truncate the file first (``restarted``);
    older ones would append the whole file to the partial one. ``head`` (the partial file's first
    bytes) catches that on the first write: when the body starts with them, RangeIgnored stops the
    transfer after one chunk instead of a whole wasted file.
    """

    def __init__(self, handle: BinaryIO, progress: Progress, relpath: str, head: bytes = b"") -> None:
        self.handle = handle
        self.progress = progress
        self.relpath = relpath
        self.head = head
        self.restarted = False

    def write(self, data: bytes) -> int:
        if self.head:
            head, self.head = self.head, b""
            size = min(len(head), len(data))
            if size and data[:size] == head[:size]:
                self.progress.wasted(len(data))
                raise RangeIgnored()
        written = self.handle.write(data)
        self.progress.add(self.relpath, len(data))
        return written

    def tell(self) -> int:
        return self.handle.tell()

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.handle.seek(offset, whence)

    def truncate(self, size: Optional[int] = None) -> int:
        self.head = b""
        before = os.fstat(self.handle.fileno()).st_size
        result = self.handle.truncate(size)
        after = os.fstat(self.handle.fileno()).st_size
        if after < before:
            self.restarted = True
            self.progress.add(self.relpath, after - before)
        return result

    def flush(self) -> None:
        return self.handle.flush()

    def fileno(self) -> int:
        return self.handle.fileno()


# ----------------------------------------------------------------------------- locking

def lock_fetch(dest: str) -> TextIO:
    """An exclusive lock on dest's fetch, so two runs never write the same partial files.

    Returns the open lock file (keep it open while fetching); refuses when another run holds it.
    """
    import fcntl
    directory = partial_dir(dest)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    os.chmod(directory, 0o700)
    handle = open(os.path.join(directory, LOCK_NAME), "a+")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        handle.close()
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            raise HubError("dest %s: another hf_model run is fetching this version right now (lock %s); wait "
                           "for it to finish (see %s)" % (dest, os.path.join(directory, LOCK_NAME),
                                                          progress_path(dest)))
        raise
    return handle


# ----------------------------------------------------------------------------- the hub (huggingface_hub)

def import_huggingface_hub() -> Any:
    """huggingface_hub, imported only when the network is needed, with progress bars and telemetry off
    (a module's stderr is no terminal, and nothing but the hub itself should be contacted)."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    try:
        import huggingface_hub
    except ImportError as exc:
        raise HubError("huggingface_hub cannot be imported by %s (%s): run this module with the vLLM venv's "
                       "interpreter, which has it (set ansible_python_interpreter, e.g. "
                       "/opt/llmops-vllm/venv/bin/python3), or install huggingface_hub into this one"
                       % (sys.executable, exc))
    return huggingface_hub


def error_kinds(exc: BaseException) -> Set[str]:
    """The class names in exc's MRO: huggingface_hub moved its exceptions between modules across
    releases, the names stayed."""
    return set(cls.__name__ for cls in type(exc).__mro__)


def xet_available(hf: Any) -> bool:
    """hf_xet is used for Xet-stored files when it is installed and not disabled (HF_HUB_DISABLE_XET)."""
    try:
        from huggingface_hub.utils import is_xet_available
    except ImportError:
        return False
    try:
        return bool(is_xet_available())
    except Exception:
        return False


def transfer_for(remote: RemoteFile, use_xet: bool) -> str:
    """How a file travels: hf_xet (parallel chunks, no byte-resume) for Xet-stored files when it is
    installed, else huggingface_hub's HTTP download with a Range resume."""
    return "xet" if use_xet and remote.get("xet") else "http"


class Hub:
    """The network side, through huggingface_hub, in this process only: the token goes to the
    library as an argument, never into the environment or argv of another process."""

    def __init__(self, endpoint: str, token: Optional[str] = None) -> None:
        self.hf: Any = import_huggingface_hub()
        self.endpoint = endpoint
        self.token = token or None
        self.api: Any = self.hf.HfApi(endpoint=endpoint, token=self.token, library_name="llmops.vllm")
        self.use_xet = xet_available(self.hf)

    def describe(self, exc: BaseException, repo_id: str, revision: Optional[str]) -> str:
        """A readable message for a hub error: which repo/revision, and what to do."""
        kinds = error_kinds(exc)
        where = "%s at %s" % (repo_id, sanitize_endpoint(self.endpoint))
        if "GatedRepoError" in kinds:
            return ("repository %s is gated: accept its terms on the hub with the account of `token`, and pass "
                    "that token" % where)
        if "RevisionNotFoundError" in kinds:
            return self._revision_missing(repo_id, revision)
        if "RepositoryNotFoundError" in kinds:
            refs = self._refs(repo_id)
            if refs is not None:
                return self._revision_missing(repo_id, revision, refs)
            return ("repository %s not found: check repo_id %r (ORG/NAME as on the hub) and endpoint; a private "
                    "repository also needs `token`" % (where, repo_id))
        if "EntryNotFoundError" in kinds:
            # The tree of a commit sha the hub does not have (no resolve call is made for a sha).
            refs = self._refs(repo_id)
            if refs is not None:
                return self._revision_missing(repo_id, revision, refs)
            return ("repository %s not found (or it has no commit %s): check repo_id %r and endpoint; a private "
                    "repository also needs `token`" % (where, revision, repo_id))
        if "OfflineModeIsEnabled" in kinds:
            return "HF_HUB_OFFLINE is set on the target, so %s cannot be reached: unset it to fetch" % where
        if "HfHubHTTPError" in kinds:
            status = getattr(getattr(exc, "response", None), "status_code", None)
            if status in (401, 403):
                return "the hub refused access to %s (HTTP %s): check `token`" % (where, status)
            return "the hub answered HTTP %s for %s: %s" % (status, where, str(exc).splitlines()[0])
        return ("cannot reach the hub for %s (%s: %s): check `endpoint` (or HF_ENDPOINT) and the network"
                % (where, type(exc).__name__, str(exc).splitlines()[0] if str(exc) else ""))

    def revision_kind(self, repo_id: str, revision: str) -> str:
        """'commit' (a full sha), 'tag' or 'branch' as the hub's refs list it, else 'unknown'."""
        if is_commit(revision):
            return "commit"
        refs = self._refs(repo_id)
        if refs is None:
            return "unknown"
        if revision in refs["tags"]:
            return "tag"
        return "branch" if revision in refs["branches"] else "unknown"

    def _refs(self, repo_id: str) -> Optional[Dict[str, List[str]]]:
        try:
            refs = self.api.list_repo_refs(repo_id)
        except Exception:
            return None
        return {"branches": sorted(b.name for b in refs.branches), "tags": sorted(t.name for t in refs.tags)}

    def _revision_missing(self, repo_id: str, revision: Optional[str], refs: Optional[Dict[str, List[str]]] = None) -> str:
        refs = refs if refs is not None else self._refs(repo_id)
        known = ""
        if refs is not None:
            known = " (branches: %s; tags: %s)" % (
                ", ".join(refs["branches"]) or "none", ", ".join(refs["tags"]) or "none")
        return ("revision %r not found in %s at %s%s: give an existing branch, tag or full commit sha"
                % (revision, repo_id, sanitize_endpoint(self.endpoint), known))

    def resolve(self, repo_id: str, revision: str) -> str:
        """The commit sha that revision (branch, tag or commit) names right now."""
        try:
            info = self.api.model_info(repo_id, revision=revision)
        except Exception as exc:
            raise HubError(self.describe(exc, repo_id, revision))
        if not info.sha:
            raise HubError("the hub at %s returned no commit for %s@%s; it is not a Hugging Face compatible hub"
                           % (sanitize_endpoint(self.endpoint), repo_id, revision))
        return checked_commit(info.sha, "the commit the hub at %s answered for %s@%s"
                              % (sanitize_endpoint(self.endpoint), repo_id, revision))

    def list_files(self, repo_id: str, commit: str) -> List[RemoteFile]:
        """Every file of the commit with its size and checksums, from the hub's tree API, as the hub
        answered them: checked_remote_files checks them before any use."""
        try:
            entries = list(self.api.list_repo_tree(repo_id, revision=commit, recursive=True))
        except Exception as exc:
            raise HubError(self.describe(exc, repo_id, commit))
        files: List[RemoteFile] = []
        for entry in entries:
            if type(entry).__name__ == "RepoFolder":
                continue
            lfs = getattr(entry, "lfs", None)
            lfs_sha256 = getattr(lfs, "sha256", None) if lfs is not None else None
            if lfs_sha256 is None and isinstance(lfs, dict):
                lfs_sha256 = lfs.get("sha256") or lfs.get("oid")
            size = getattr(lfs, "size", None) if lfs is not None else None
            files.append({"path": entry.path, "size": size if size is not None else entry.size,
                          "blob_id": getattr(entry, "blob_id", None), "lfs_sha256": lfs_sha256,
                          "xet": bool(getattr(entry, "xet_hash", None))})
        return sorted(files, key=lambda f: str(f["path"]))

    def headers(self) -> Dict[str, str]:
        from huggingface_hub.utils import build_hf_headers
        return build_hf_headers(token=self.token, library_name="llmops.vllm")

    def download_http(self, repo_id: str, commit: str, remote: RemoteFile, part: str, progress: Progress) -> bool:
        """Append the rest of remote's bytes to part (a Range request from its current size).

        Returns True when bytes already there were thrown away because the server ignored the Range
        request and the file started over from byte 0 (see CountingWriter). As a last resort, an
        older huggingface_hub that appended a whole file and then failed on the size is retried once
        from byte 0 too.
        """
        from huggingface_hub.file_download import http_get
        url = self.hf.hf_hub_url(repo_id, remote["path"], revision=commit, endpoint=self.endpoint)
        restarted = False
        for attempt in (1, 2):
            resume = os.path.getsize(part) if os.path.exists(part) else 0
            if resume > remote["size"]:
                os.unlink(part)
                progress.add(remote["path"], -resume)
                resume, restarted = 0, True
            try:
                with open(part, "ab") as handle:
                    writer = CountingWriter(handle, progress, remote["path"], resume_head(part, resume))
                    http_get(url, cast(BinaryIO, writer), resume_size=resume, headers=self.headers(), expected_size=remote["size"],
                             displayed_filename=remote["path"])
                    handle.flush()
                    os.fsync(handle.fileno())
            except RangeIgnored:
                self._start_over(part, remote, progress)
                restarted = True
                continue
            except Exception:
                if attempt == 1 and resume > 0 and os.path.getsize(part) > remote["size"]:
                    self._start_over(part, remote, progress)
                    restarted = True
                    continue
                raise
            return restarted or writer.restarted
        return restarted

    @staticmethod
    def _start_over(part: str, remote: RemoteFile, progress: Progress) -> None:
        """Drop the partial file: its bytes no longer count as done."""
        size = os.path.getsize(part)
        os.unlink(part)
        progress.add(remote["path"], -size)

    def download_xet(self, repo_id: str, commit: str, remote: RemoteFile, part: str, progress: Progress, work_dir: str) -> bool:
        """hf_hub_download (hf_xet) into work_dir, then moved to part like an HTTP download.

        hf_xet keeps no partial file we could append to: an interrupted Xet file starts over.
        """
        path = self.hf.hf_hub_download(repo_id, remote["path"], revision=commit, local_dir=work_dir,
                                       endpoint=self.endpoint, token=self.token)
        previous = os.path.getsize(part) if os.path.exists(part) else 0
        os.replace(path, part)
        progress.add(remote["path"], os.path.getsize(part) - previous)
        return previous > 0

    def download(self, repo_id: str, commit: str, remote: RemoteFile, part: str, progress: Progress, work_dir: str) -> bool:
        """Bring remote's bytes into part; True when bytes already there had to be thrown away."""
        if transfer_for(remote, self.use_xet) == "xet":
            return self.download_xet(repo_id, commit, remote, part, progress, work_dir)
        return self.download_http(repo_id, commit, remote, part, progress)


# ----------------------------------------------------------------------------- the fetch

class Fetch:
    """One fetch of the planned files into dest: download, verify, put in place, record.

    Files are independent: each is downloaded to its part file, verified against the hub's checksum
    and only then renamed into dest (with its owner/group/mode). A file that fails verification is
    deleted and fetched once more from byte 0; failing again stops the fetch naming the file. The
    manifest is not this class's job: the caller writes it only when every file is in place.

    ``set_attributes(path, mode)`` gives a verified file its owner, group and ``file_mode`` before
    it is renamed into dest (the module passes its own, which never goes through a link); None leaves
    the files as they were written.
    """

    def __init__(self, hub: Hub, repo_id: str, commit: str, dest: str, remote_files: Iterable[RemoteFile], progress: Progress,
                 file_mode: int, workers: int, verified: Optional[Mapping[str, Json]] = None,
                 set_attributes: Optional[Callable[[str, int], Any]] = None) -> None:
        self.hub = hub
        self.repo_id, self.commit, self.dest = repo_id, commit, dest
        self.remote = dict((r["path"], r) for r in remote_files)
        self.progress = progress
        self.file_mode = file_mode
        self.set_attributes = set_attributes
        self.workers = workers
        self.verified_path = os.path.join(partial_dir(dest), VERIFIED_NAME)
        # Records the caller trusts (this fetch's earlier runs, or the manifest being repaired), saved
        # at once: the manifest is gone while fetching, and a crash must not cost a re-hash of them.
        self.verified: Dict[str, Json] = dict(verified if verified is not None else (read_json(self.verified_path) or {}))
        write_json_atomic(self.verified_path, self.verified, mode=0o600)
        self.record_lock = threading.Lock()
        self.digests: Dict[str, Digests] = {}
        self.repaired: List[str] = []
        self.restarted: List[str] = []
        self.transfers = {"http": 0, "xet": 0}

    def record(self, relpath: str, digests: Digests) -> None:
        """Remember a verified file (size, mtime, digests) so a resumed fetch need not re-hash it."""
        final = dest_path(self.dest, relpath)
        st = os.stat(final)
        with self.record_lock:
            self.digests[relpath] = digests
            self.verified[relpath] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digests["sha256"],
                                      "git_blob_sha1": digests.get("git_blob_sha1")}
            write_json_atomic(self.verified_path, self.verified, mode=0o600)

    def place(self, relpath: str, source: str) -> None:
        """Give the verified file its attributes, then rename it into dest (atomic on one filesystem)."""
        final = dest_path(self.dest, relpath)
        parent = os.path.dirname(final)
        if not os.path.isdir(parent):
            os.makedirs(parent, exist_ok=True)
        if self.set_attributes is not None:
            self.set_attributes(source, self.file_mode)
        os.replace(source, final)

    def keep(self, relpath: str) -> None:
        """A final file with a matching verified record: reuse its digests, nothing is read."""
        record = self.verified[relpath]
        self.digests[relpath] = {"sha256": record["sha256"], "git_blob_sha1": record.get("git_blob_sha1")}
        self.progress.count_done()

    def check(self, relpath: str) -> None:
        """A final file without a record (e.g. left by a run that died right after renaming it):
        hash it; keep it if good, else delete it and fetch it."""
        remote = self.remote[relpath]
        final = dest_path(self.dest, relpath)
        problem, digests = verification_problem(final, remote)
        if problem is None:
            self.record(relpath, cast(Digests, digests))
            self.progress.count_done()
            return None
        os.unlink(final)
        self.progress.discard(remote["size"])
        self.repaired.append(relpath)
        return self.fetch(relpath)

    def fetch(self, relpath: str) -> None:
        remote = self.remote[relpath]
        part = part_path(self.dest, relpath)
        os.makedirs(os.path.dirname(part), mode=0o700, exist_ok=True)
        final = dest_path(self.dest, relpath)
        if os.path.exists(final):
            os.unlink(final)  # a wrong-sized leftover: it never stays next to verified files
        self.progress.begin(relpath)
        problem: Optional[str] = None
        try:
            for _attempt in (1, 2):
                self.transfers[transfer_for(remote, self.hub.use_xet)] += 1
                if self.hub.download(self.repo_id, self.commit, remote, part, self.progress,
                                     os.path.join(partial_dir(self.dest), "xet")):
                    self.restarted.append(relpath)
                problem, digests = verification_problem(part, remote)
                if problem is None:
                    self.place(relpath, part)
                    self.record(relpath, cast(Digests, digests))
                    self.progress.end(relpath, done=True)
                    return None
                # Bad bytes are never kept: delete them and fetch the whole file once more.
                self.progress.add(relpath, -os.path.getsize(part))
                os.unlink(part)
                if relpath not in self.repaired:
                    self.repaired.append(relpath)
        except BaseException:
            self.progress.end(relpath, done=False)
            raise
        self.progress.end(relpath, done=False)
        raise HubError("%s of %s@%s failed verification twice and was deleted: %s. The hub serves a corrupt "
                       "or inconsistent file; the version is not marked complete" % (
                           relpath, self.repo_id, self.commit, problem), file=relpath)

    def run(self, actions: Iterable[Action]) -> Dict[str, Digests]:
        """Carry out a plan_fetch plan with ``workers`` threads; the first error stops new work and is
        raised (files already verified stay, so the next run resumes from them)."""
        import concurrent.futures
        jobs: List[Tuple[Callable[[str], None], Tuple[str]]] = []
        for action in actions:
            if action["action"] == "keep" and action["path"] in self.verified:
                self.keep(action["path"])
            elif action["action"] in ("keep", "check"):
                jobs.append((self.check, (action["path"],)))
            else:
                jobs.append((self.fetch, (action["path"],)))
        # Small files first: a crash then leaves many complete files and one partial large one.
        jobs.sort(key=lambda job: self.remote[job[1][0]]["size"])
        errors: List[BaseException] = []
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, self.workers)) as pool:
            futures = [pool.submit(function, *args) for function, args in jobs]
            for future in concurrent.futures.as_completed(futures):
                exc = future.exception()
                if exc is not None:
                    errors.append(exc)
                    for other in futures:
                        other.cancel()
        if errors:
            first = next((e for e in errors if isinstance(e, HubError)), errors[0])
            if isinstance(first, HubError):
                raise first
            raise HubError("fetching %s@%s into %s stopped: %s: %s. Files verified so far are kept; run again to "
                           "resume" % (self.repo_id, self.commit, self.dest, type(first).__name__, first))
        return self.digests


def manifest_files(remote_files: Iterable[RemoteFile], digests: Mapping[str, Digests]) -> List[ManifestFile]:
    """The manifest's file entries: the hub's identity of each file plus what we computed."""
    files: List[ManifestFile] = []
    for remote in remote_files:
        digest = digests[remote["path"]]
        lfs = remote.get("lfs_sha256") is not None
        files.append({"path": remote["path"], "size": remote["size"], "lfs": lfs,
                      "sha256": cast(str, remote["lfs_sha256"]) if lfs else digest["sha256"],
                      "git_blob_sha1": None if lfs else (remote.get("blob_id") or digest.get("git_blob_sha1"))})
    return files
