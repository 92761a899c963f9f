# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The host's control-plane directories: root's state directory and models root, the service user's cache.

The layout (docs/rollout.md, "Ownership"): the state directory and the models root are root:root 0755 and
so is everything root writes in them (files 0644, directories 0755); the cache directory's top is root:root
0755 and each model has its own ``<cache>/<name>``, the service user's (0750): vLLM's HOME, working
directory and only writable path. ``fix_layout`` walks an older host (the service user owned the state
directory and the models) top-down by file descriptor and makes it so, never following a link: each
directory is fixed before anything in it is looked at, so the service user can no longer swap an entry
under the walk. Target side: Python standard library only.
"""

from __future__ import absolute_import, division, print_function

import grp
import os
import pwd
import stat
from typing import Dict, List, Optional, Set, Tuple

from ansible_collections.llmops.vllm.plugins.module_utils import paths
from ansible_collections.llmops.vllm.plugins.module_utils.systemd_unit import CONTROL_RE

ROOT_DIR_MODE = 0o755
CACHE_DIR_MODE = 0o750
REPORT_LIMIT = 200  # entries listed in the result; the counts cover them all


class Layout:
    """What the walk found to change (or changed) and what it left alone, in walk order."""

    def __init__(self) -> None:
        self.changes: List[Dict[str, str]] = []
        self.skipped: List[Dict[str, str]] = []
        self.cache_dirs: List[str] = []
        self.counts = {"changed": 0, "skipped": 0}
        # Directories this run fixes (st_dev, st_ino): a check-mode walk crosses them as if fixed.
        self.fixed: Set[Tuple[int, int]] = set()

    def change(self, path: str, before: str, after: str) -> None:
        self.counts["changed"] += 1
        if len(self.changes) < REPORT_LIMIT:
            self.changes.append({"path": path, "before": before, "after": after})

    def skip(self, path: str, reason: str) -> None:
        self.counts["skipped"] += 1
        if len(self.skipped) < REPORT_LIMIT:
            self.skipped.append({"path": path, "reason": reason})


def describe(uid: int, gid: int, mode: int) -> str:
    """``user:group 0755`` (numbers where a name is missing)."""
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    try:
        group = grp.getgrgid(gid).gr_name
    except KeyError:
        group = str(gid)
    return "%s:%s %04o" % (user, group, mode)


def root_target(st: os.stat_result, exact: Optional[int] = None) -> Tuple[int, int, int]:
    """(uid, gid, mode) an entry of the state directory or the models root gets.

    Root's own entries keep their mode less group/other write and set-id bits (a 0600 progress file stays
    0600); what another user or group owned becomes root:root 0644 (directories 0755), or 0600 (0700) when
    nobody but its owner could read it, which stays so. ``exact``: the mode of a top directory.
    """
    is_dir = stat.S_ISDIR(st.st_mode)
    if exact is not None:
        return 0, 0, exact
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid == 0 and st.st_gid == 0:
        return 0, 0, mode & ~0o6022
    private = not mode & 0o044
    if is_dir:
        return 0, 0, 0o700 if private else 0o755
    return 0, 0, 0o600 if private else 0o644


def _fix(fd: int, path: str, want: Tuple[int, int, int], layout: Layout, apply: bool) -> None:
    st = os.fstat(fd)
    before = describe(st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode))
    if paths.set_owner_mode(fd, want[0], want[1], want[2], apply=apply):
        layout.change(path, before, describe(*want))


def _fix_tree(fd: int, path: str, tops: Dict[str, int], layout: Layout, apply: bool) -> None:
    """Everything below the (already fixed) directory at fd, top-down, by file descriptor."""

    def visit(parent_fd: int, name: str, entry_path: str, st: os.stat_result) -> Optional[int]:
        if stat.S_ISLNK(st.st_mode):
            if entry_path not in tops:
                layout.skip(entry_path, "a symlink (to %s): not followed and left as it is; nothing here makes "
                                        "links, remove it unless you did" % os.readlink(name, dir_fd=parent_fd))
            return None
        if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            layout.skip(entry_path, "%d hard links: owner and mode left as they are (another name may be a file "
                                    "outside, e.g. /etc/shadow); replace it with a copy" % st.st_nlink)
            return None
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            layout.skip(entry_path, "neither a file nor a directory: left as it is")
            return None
        want = root_target(st, tops.get(entry_path))
        if not stat.S_ISDIR(st.st_mode):
            if (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) != want:
                file_fd = paths.open_entry(parent_fd, name, st)
                try:
                    _fix(file_fd, entry_path, want, layout, apply)
                finally:
                    os.close(file_fd)
            return None
        child = paths.open_entry(parent_fd, name, st)
        try:
            _fix(child, entry_path, want, layout, apply)
        except BaseException:
            os.close(child)
            raise
        layout.fixed.add((st.st_dev, st.st_ino))
        return child

    paths.walk_fd(fd, path, visit)


def _open_top(path: str, what: str, mode: int, layout: Layout, apply: bool) -> Optional[int]:
    """A top directory's descriptor (created root:root ``mode`` where missing), or None in check mode when it
    would be created. Its parents must be root's already (or fixed by this run); a symlink to it only counts
    when root made it (paths.open_dir)."""
    try:
        return paths.open_dir(path, what=what, check_last=False, assume_trusted=layout.fixed)
    except FileNotFoundError:
        pass
    parent, name = os.path.split(os.path.normpath(path))
    try:
        # Missing parents are made root's 0755, as `mkdir -p` would (a models root beside a state directory
        # moved elsewhere: /var/lib/llmops-vllm/models with rollout_state_dir /srv/llmops-vllm).
        parent_fd = paths.open_dir(parent, what="the directory above %s" % what, assume_trusted=layout.fixed,
                                   create_mode=0o755 if apply else None)
    except FileNotFoundError:
        if apply:
            raise
        layout.change(path, "absent", describe(0, 0, mode))
        return None
    try:
        layout.change(path, "absent", describe(0, 0, mode))
        if not apply:
            return None
        os.mkdir(name, 0o700, dir_fd=parent_fd)
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        fd = paths.open_entry(parent_fd, name, st)
        os.fchown(fd, 0, 0)
        os.fchmod(fd, mode)
        return fd
    finally:
        os.close(parent_fd)


def cache_name_problem(name: object) -> Optional[str]:
    """Why ``name`` cannot be one directory below the cache directory, else None."""
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name:
        return "expected one plain directory name (a model's name: no slash, not . or ..)"
    if CONTROL_RE.search(name):
        return "it holds a control character"
    return None


def fix_layout(state_dir: Optional[str], models_root: Optional[str], cache_dir: Optional[str],
               cache_names: List[str], user: str, group: Optional[str], apply: bool) -> Layout:
    """Walk (and with ``apply`` fix) the layout; paths.PathError before anything changes when it cannot be
    done safely (call it once without ``apply`` first: the refusals come from that walk)."""
    layout = Layout()
    tops: Dict[str, int] = {}
    for top in (state_dir, models_root):
        if top:
            tops[os.path.normpath(top)] = ROOT_DIR_MODE
    for top, label in ((state_dir, "the state directory"), (models_root, "the models root")):
        if not top:
            continue
        fd = _open_top(top, "%s %s" % (label, top), ROOT_DIR_MODE, layout, apply)
        if fd is None:
            continue
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) in layout.fixed:
                continue  # inside a tree walked already
            _fix(fd, os.path.normpath(top), (0, 0, ROOT_DIR_MODE), layout, apply)
            layout.fixed.add((st.st_dev, st.st_ino))
            _fix_tree(fd, os.path.normpath(top), tops, layout, apply)
        finally:
            os.close(fd)
    if cache_dir:
        _cache(cache_dir, cache_names, user, group, layout, apply)
    return layout


def _cache(cache_dir: str, names: List[str], user: str, group: Optional[str], layout: Layout, apply: bool) -> None:
    for name in names:
        problem = cache_name_problem(name)
        if problem:
            raise paths.PathError("cache name %r: %s" % (name, problem))
    cache_dir = os.path.normpath(cache_dir)
    fd = _open_top(cache_dir, "the cache directory %s" % cache_dir, ROOT_DIR_MODE, layout, apply)
    if fd is None and apply:
        return
    try:
        if fd is not None:
            top = os.fstat(fd)
            _fix(fd, cache_dir, (0, 0, ROOT_DIR_MODE), layout, apply)
            layout.fixed.add((top.st_dev, top.st_ino))
        if not names:
            return
        try:
            uid = pwd.getpwnam(user).pw_uid
            gid = grp.getgrnam(group).gr_gid if group else pwd.getpwnam(user).pw_gid
        except KeyError:
            for name in names:
                layout.skip(os.path.join(cache_dir, name), "user %s or group %s does not exist yet: made by a later "
                                                           "run, once the service user exists" % (user, group or user))
            return
        for name in sorted(set(names)):
            path = os.path.join(cache_dir, name)
            layout.cache_dirs.append(path)
            st = paths.entry_stat(fd, name) if fd is not None else None
            if st is None or fd is None:
                layout.change(path, "absent", describe(uid, gid, CACHE_DIR_MODE))
                if apply and fd is not None:
                    os.mkdir(name, 0o700, dir_fd=fd)
                    created = paths.open_entry(fd, name, os.stat(name, dir_fd=fd, follow_symlinks=False))
                    try:
                        os.fchown(created, uid, gid)
                        os.fchmod(created, CACHE_DIR_MODE)
                    finally:
                        os.close(created)
                continue
            if not stat.S_ISDIR(st.st_mode):
                kind = ("a symlink (to %s)" % os.readlink(name, dir_fd=fd) if stat.S_ISLNK(st.st_mode)
                        else "not a directory")
                raise paths.UnsafePathError(
                    "the cache directory of %s: %s is %s, expected a directory. Root never follows a link the "
                    "service user could have planted there, and makes nothing in its place: remove it (the run "
                    "makes the directory), or set serve_cache_dir to the disk you meant" % (name, path, kind))
            entry_fd = paths.open_entry(fd, name, st)
            try:
                _fix(entry_fd, path, (uid, gid, CACHE_DIR_MODE), layout, apply)
            finally:
                os.close(entry_fd)
    finally:
        if fd is not None:
            os.close(fd)
