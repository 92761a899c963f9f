"""Issue 39, ownership: root never follows a link inside a directory another user can write.

Real files, real owners (the tests run as root; the service user is played by ``nobody``), real modules run in
process through Ansible's own argument handling: hf_model (with a hub that serves bytes from memory) and
host_dirs, the migration of a host of the older layout. No network, no Ansible controller.
"""
import contextlib
import io
import json
import os
import pwd
import stat
import sys
from pathlib import Path
from unittest import mock

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible.module_utils import basic
from ansible_collections.llmops.vllm.plugins.module_utils import hub, paths
from ansible_collections.llmops.vllm.plugins.modules import hf_model

ROOT = Path(__file__).resolve().parents[2]
COMMIT = "c" * 40
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="owners and links of another user need root")

try:
    from ansible.module_utils.testing import patch_module_args
except ImportError:  # ansible-core < 2.19 (the oldest-ansible-core run)
    @contextlib.contextmanager
    def patch_module_args(args):
        with mock.patch.object(basic, "_ANSIBLE_ARGS", json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode()):
            yield


def nobody():
    entry = pwd.getpwnam("nobody")
    return entry.pw_uid, entry.pw_gid


def run_module(main, args):
    """The module's main() in this process: its result as Ansible would read it."""
    out = io.StringIO()
    # Warnings are collected process-wide (one module run per process in real life): start each run empty.
    from ansible.module_utils.common import warnings
    warnings._global_warnings.clear()  # pylint: disable=protected-access
    with patch_module_args(args), contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        main()
    return json.loads(out.getvalue())


def remote_file(path, data):
    return {"path": path, "size": len(data), "blob_id": hub.git_blob_sha1_bytes(data), "lfs_sha256": None, "xet": False}


FILES = {"config.json": b'{"model_type": "llama"}', "original/params.json": b'{"dim": 8}'}


class MemoryHub:
    """hub.Hub's part hf_model uses, serving FILES from memory (no network)."""

    use_xet = False

    def __init__(self, endpoint, token=None):
        self.endpoint = endpoint

    def list_files(self, repo_id, commit):
        return [remote_file(path, data) for path, data in FILES.items()]

    def download(self, repo_id, commit, remote, part, progress, work_dir):
        with open(part, "wb") as handle:
            handle.write(FILES[remote["path"]])
        progress.add(remote["path"], remote["size"])
        return False


def fetch(monkeypatch, models_root, **args):
    monkeypatch.setattr(hub, "Hub", MemoryHub)
    return run_module(hf_model.main, dict({"repo_id": "org/chat", "revision": COMMIT, "models_root": str(models_root),
                                           "endpoint": "http://hub.invalid", "keep": 0, "protect_units": []}, **args))


def tree(path):
    """{relative path: (uid, mode)} of everything below path, links not followed."""
    found = {}
    for parent, subdirs, files in os.walk(path):
        for name in subdirs + files:
            full = os.path.join(parent, name)
            st_ = os.lstat(full)
            found[os.path.relpath(full, path)] = (st_.st_uid, stat.S_IMODE(st_.st_mode))
    return found


# ----------------------------------------------------------------------------- hf_model: the models root and dest

def test_issue39_hf_model_does_not_follow_a_link_the_service_user_planted_as_the_models_root(tmp_path, monkeypatch):
    """The old layout: the state directory was the service user's, so it could replace models/ with a link; root
    then wrote the version into the link's target."""
    uid, gid = nobody()
    state, outside = tmp_path / "state", tmp_path / "outside"
    state.mkdir(mode=0o750)
    outside.mkdir()
    os.chown(state, uid, gid)
    os.symlink(outside, state / "models")
    os.lchown(state / "models", uid, gid)
    result = fetch(monkeypatch, state / "models")
    assert result.get("failed") is True
    assert "%s" % state in result["msg"] and "nobody (uid %d)" % uid in result["msg"] and "host_dirs" in result["msg"]
    assert list(outside.iterdir()) == []  # nothing written through the link


def test_issue39_hf_model_refuses_a_version_directory_the_service_user_owns(tmp_path, monkeypatch):
    """The service user owned the version directory (the rollout passed model_owner): it could plant a link in it
    at any moment, so root writes nothing there until the migration made it root's."""
    uid, gid = nobody()
    dest = tmp_path / "models" / "org" / "chat" / COMMIT
    dest.mkdir(parents=True)
    os.chown(dest, uid, gid)
    result = fetch(monkeypatch, tmp_path / "models")
    assert result.get("failed") is True
    assert "dest %s" % dest in result["msg"] and "is owned by nobody (uid %d)" % uid in result["msg"]
    assert list(dest.iterdir()) == []
    # Made root's (what host_dirs does), the same fetch works, and the files are root's 0644.
    os.chown(dest, 0, 0)
    done = fetch(monkeypatch, tmp_path / "models")
    assert done["changed"] is True and sorted(done["files"]) == sorted(FILES), done
    assert {rel: owner_mode for rel, owner_mode in tree(dest).items() if not rel.startswith(".llmops")} == {
        "config.json": (0, 0o644), "original": (0, 0o755), "original/params.json": (0, 0o644)}


def test_issue39_hf_model_directories_stay_roots_whatever_owner_says(tmp_path, monkeypatch):
    """owner= names the files' owner only: a directory owned by the service user is one it could plant links in."""
    uid, _gid = nobody()
    done = fetch(monkeypatch, tmp_path / "models", owner="nobody")
    dest = Path(done["path"])
    assert os.stat(dest).st_uid == 0 and os.stat(dest / "original").st_uid == 0
    assert os.stat(dest / "config.json").st_uid == uid
    again = fetch(monkeypatch, tmp_path / "models", owner="nobody")
    assert again["changed"] is False and "failed" not in again


def test_issue39_hf_model_does_not_chmod_a_hard_link(tmp_path, monkeypatch):
    """A file of a complete version replaced by a hard link to a root-only file: fixing the version's modes must
    not make /etc/shadow (here: secret) world-readable."""
    done = fetch(monkeypatch, tmp_path / "models")
    dest = Path(done["path"])
    secret = tmp_path / "secret"
    secret.write_bytes(FILES["config.json"])  # same size: the manifest's size check passes
    os.chmod(secret, 0o600)
    os.unlink(dest / "config.json")
    os.link(secret, dest / "config.json")
    result = fetch(monkeypatch, tmp_path / "models")
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600 and os.stat(secret).st_uid == 0
    assert "failed" not in result, result["msg"]


def test_hf_model_refuses_a_symlink_in_dest(tmp_path, monkeypatch):
    """A link inside the version directory (planted before it became root's) is refused before anything is
    written: the fetch never writes through it and never chmods what it points to. (A guard: path_inside
    refused this one before issue 39 too.)"""
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o755)
    dest = tmp_path / "models" / "org" / "chat" / COMMIT
    dest.mkdir(parents=True)
    os.symlink(outside, dest / ".llmops-partial")
    result = fetch(monkeypatch, tmp_path / "models")
    assert result.get("failed") is True and ".llmops-partial" in result["msg"] and str(outside) in result["msg"]
    assert stat.S_IMODE(os.stat(outside).st_mode) == 0o755 and list(outside.iterdir()) == []


# ----------------------------------------------------------------------------- host_dirs: the migration

def old_layout(tmp_path):
    """A host as 9da4382's roles left it: the state directory, the cache directory and the version directory are
    the service user's; root's own files (state.json, a 0600 progress file) sit beside them."""
    uid, gid = nobody()
    state, cache = tmp_path / "var-lib", tmp_path / "var-cache"
    version = state / "models" / "org" / "chat" / COMMIT
    version.mkdir(parents=True)
    (version / "config.json").write_text("{}")
    (version / "original").mkdir()
    (version / "original" / "params.json").write_text("{}")
    (state / "models" / "org" / "chat" / (COMMIT + ".llmops-progress.json")).write_text("{}")
    os.chmod(state / "models" / "org" / "chat" / (COMMIT + ".llmops-progress.json"), 0o600)
    (state / "state.json").write_text("{}")
    (state / ".cache").mkdir()  # vLLM's HOME was the state directory
    (state / ".cache" / "private").write_text("x")
    os.chmod(state / ".cache" / "private", 0o600)
    (cache / "chat" / "vllm").mkdir(parents=True)
    for path in [state, cache, cache / "chat", cache / "chat" / "vllm", state / ".cache", state / ".cache" / "private"]:
        os.chown(path, uid, gid)
    for parent, _subdirs, files in os.walk(version):
        for name in [parent] + [os.path.join(parent, f) for f in files]:
            os.chown(name, uid, gid)
    os.chmod(state, 0o750)
    os.chmod(cache, 0o750)
    return state, cache


def host_dirs_args(state, cache, **more):
    return dict({"state_dir": str(state), "models_root": str(state / "models"), "cache_dir": str(cache),
                 "cache_names": ["chat", "next"], "cache_from_units": [], "user": "nobody"}, **more)


def run_host_dirs(args, check=False):
    from ansible_collections.llmops.vllm.plugins.modules import host_dirs
    return run_module(host_dirs.main, dict(args, _ansible_check_mode=check, _ansible_diff=True))


def test_issue39_migration_makes_the_old_layout_roots_in_check_mode_first_and_is_idempotent(tmp_path):
    uid, gid = nobody()
    state, cache = old_layout(tmp_path)
    before = tree(tmp_path)
    preview = run_host_dirs(host_dirs_args(state, cache), check=True)
    assert preview["changed"] is True and tree(tmp_path) == before  # check mode changes nothing
    assert {"path": str(state), "before": "nobody:nogroup 0750", "after": "root:root 0755"} in preview["changes"]
    assert "%s nobody:nogroup 0750\n" % state in preview["diff"]["before"]
    done = run_host_dirs(host_dirs_args(state, cache))
    assert done["changes"] == preview["changes"] and done["counts"]["changed"] == preview["counts"]["changed"]
    after = tree(state)
    assert after.pop(".cache/private") == (0, 0o600)  # nobody but its owner could read it: it stays so
    assert after.pop("models/org/chat/%s.llmops-progress.json" % COMMIT) == (0, 0o600)  # root's own, unchanged
    assert all(owner_mode == (0, 0o755 if os.path.isdir(state / rel) else 0o644) for rel, owner_mode in after.items())
    assert (os.stat(state).st_uid, stat.S_IMODE(os.stat(state).st_mode)) == (0, 0o755)
    assert (os.stat(cache).st_uid, stat.S_IMODE(os.stat(cache).st_mode)) == (0, 0o755)
    for name in ("chat", "next"):  # each model's own cache directory: the service user's, vLLM's HOME
        entry = os.stat(cache / name)
        assert (entry.st_uid, entry.st_gid, stat.S_IMODE(entry.st_mode)) == (uid, gid, 0o750)
    assert os.stat(cache / "chat" / "vllm").st_uid == uid  # what is in it stays the service user's
    assert done["cache_dirs"] == [str(cache / "chat"), str(cache / "next")]
    again = run_host_dirs(host_dirs_args(state, cache))
    assert again["changed"] is False and again["changes"] == [] and "diff" not in again


def test_a_models_root_whose_parents_are_missing_is_made_like_mkdir_p(tmp_path):
    """A state directory moved elsewhere (the sandbox's llmops-2: rollout_state_dir /srv/llmops-vllm) leaves the
    default models root /var/lib/llmops-vllm/models without its parent on a fresh host: the parents are made
    root's 0755 (check mode only says so)."""
    state, cache = tmp_path / "srv" / "state", tmp_path / "cache"
    models = tmp_path / "var" / "lib" / "llmops-vllm" / "models"
    args = host_dirs_args(state, cache, models_root=str(models), cache_names=[])
    preview = run_host_dirs(args, check=True)
    assert "failed" not in preview, preview.get("msg")
    assert preview["changed"] is True and not (tmp_path / "var").exists() and not (tmp_path / "srv").exists()
    assert {"path": str(models), "before": "absent", "after": "root:root 0755"} in preview["changes"]
    done = run_host_dirs(args)
    assert "failed" not in done, done.get("msg")
    for path in (models, models.parent, models.parent.parent, state, state.parent):
        assert (os.stat(path).st_uid, stat.S_IMODE(os.stat(path).st_mode)) == (0, 0o755), path
    assert run_host_dirs(args)["changed"] is False


def test_issue39_migration_follows_no_link_and_chmods_no_hard_link(tmp_path):
    uid, gid = nobody()
    state, cache = old_layout(tmp_path)
    foreign = tmp_path / "foreign"  # someone else's directory the service user points at
    foreign.mkdir()
    os.chown(foreign, 1234, 1234)
    os.chmod(foreign, 0o775)
    shadow = tmp_path / "shadow"
    shadow.write_text("root:x:...")
    os.chmod(shadow, 0o640)
    version = state / "models" / "org" / "chat" / COMMIT
    os.symlink(foreign, version / "weights")
    os.lchown(version / "weights", uid, gid)
    os.link(shadow, version / "tokenizer.json")
    os.chown(shadow, uid, gid)  # the link shares it: the service user's file, as a planted link would look
    done = run_host_dirs(host_dirs_args(state, cache))
    assert done["changed"] is True
    assert (os.stat(foreign).st_uid, stat.S_IMODE(os.stat(foreign).st_mode)) == (1234, 0o775)
    assert (os.stat(shadow).st_uid, stat.S_IMODE(os.stat(shadow).st_mode)) == (uid, 0o640)
    assert os.lstat(version / "weights").st_uid == uid  # the link itself is not made root's either
    skipped = {entry["path"]: entry["reason"] for entry in done["skipped"]}
    assert "not followed" in skipped[str(version / "weights")] and "2 hard links" in skipped[str(version / "tokenizer.json")]
    # With the links left alone, hf_model refuses to write in that version until someone removes them.
    assert os.stat(version).st_uid == 0


def test_issue39_migration_refuses_a_linked_cache_directory_before_changing_anything(tmp_path):
    uid, gid = nobody()
    state, cache = old_layout(tmp_path)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    os.symlink(foreign, cache / "next")
    os.lchown(cache / "next", uid, gid)
    before = tree(tmp_path)
    result = run_host_dirs(host_dirs_args(state, cache))
    assert result["failed"] is True and "%s is a symlink (to %s)" % (cache / "next", foreign) in result["msg"]
    assert tree(tmp_path) == before  # refused before the first chown: the state directory is still as it was


def test_issue39_migration_refuses_a_parent_another_user_can_write(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    result = run_host_dirs(host_dirs_args(shared / "state", shared / "cache"))
    assert result["failed"] is True and "has mode 0777" in result["msg"] and not (shared / "state").exists()


# ----------------------------------------------------------------------------- paths.open_dir, generated trees

# One component of a path: a directory of root or of nobody, writable by others or not, or a link to a root
# directory made by root or by nobody.
KINDS = ["root_dir", "root_dir_group_writable", "nobody_dir", "root_link", "nobody_link", "root_dir_sticky_777"]


def build(base, kinds):
    uid, gid = nobody()
    path = base
    for index, kind in enumerate(kinds):
        entry = path / ("c%d" % index)
        if kind.endswith("link"):
            target = base.parent / ("%s-t%d" % (base.name, index))
            target.mkdir()
            os.symlink(target, entry)
            if kind == "nobody_link":
                os.lchown(entry, uid, gid)
        else:
            entry.mkdir()
            os.chmod(entry, {"root_dir": 0o755, "root_dir_group_writable": 0o775, "nobody_dir": 0o755,
                             "root_dir_sticky_777": 0o1777}[kind])
            if kind == "nobody_dir":
                os.chown(entry, uid, gid)
        path = entry
    return path


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=4))
def test_issue39_open_dir_crosses_only_what_no_other_user_can_change(tmp_path_factory, kinds):
    """open_dir succeeds exactly when every directory on the way is root's and not writable by others (a sticky
    one may be crossed, not ended in) and every link was made by root; a refusal names the step."""
    base = tmp_path_factory.mktemp("walk")
    path = build(base, kinds)
    safe = all(kind in ("root_dir", "root_link") or (kind == "root_dir_sticky_777" and index < len(kinds) - 1)
               for index, kind in enumerate(kinds))
    if safe:
        fd = paths.open_dir(str(path))
        try:
            assert os.path.samestat(os.fstat(fd), os.stat(path))
        finally:
            os.close(fd)
    else:
        with pytest.raises(paths.UnsafePathError, match="host_dirs"):
            os.close(paths.open_dir(str(path)))


# ----------------------------------------------------------------------------- the roles

def test_issue39_vllm_home_is_the_models_own_cache_directory_and_its_only_writable_path():
    variables = yaml.safe_load((ROOT / "roles" / "serve" / "vars" / "main.yml").read_text())
    assert variables["serve_home"] == "{{ serve_cache_dir }}/{{ serve_name }}"
    assert variables["serve_base_environment"]["HOME"] == "{{ serve_home }}"
    template = (ROOT / "roles" / "serve" / "templates" / "vllm.service.j2").read_text()
    assert "WorkingDirectory={{ serve_home |" in template
    writable = [line for line in template.splitlines() if line.startswith("ReadWritePaths=")]
    assert writable == ["ReadWritePaths={{ serve_home | llmops.vllm.systemd_quote }}"]


def test_issue39_the_rollout_writes_models_as_root_and_migrates_right_after_the_lock():
    fetch_task = yaml.safe_load((ROOT / "roles" / "rollout" / "tasks" / "fetch.yml").read_text())[0]
    assert "model_owner" not in fetch_task["vars"] and "model_group" not in fetch_task["vars"]
    for name in ("rollout", "retire"):
        play = yaml.safe_load((ROOT / "playbooks" / ("%s.yml" % name)).read_text())[0]
        names = [task.get("ansible.builtin.include_role", {}).get("tasks_from") for task in play["tasks"]]
        block = play["tasks"][names.index("lock.yml") + 1]["block"]
        assert block[0]["ansible.builtin.include_role"]["tasks_from"] == "control_plane.yml", name
    user_tasks = yaml.safe_load((ROOT / "roles" / "vllm_install" / "tasks" / "user.yml").read_text())
    home = next(task for task in user_tasks if task.get("ansible.builtin.file", {}).get("path") == "{{ vllm_install_home }}")
    assert (home["ansible.builtin.file"]["owner"], home["ansible.builtin.file"]["mode"]) == ("root", "0755")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
