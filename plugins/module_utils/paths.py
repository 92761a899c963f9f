# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The file system path sink: every path built from a name we did not choose passes ``path_inside``.

A hub answers the commit (a directory level under models_root) and the file names of a version; a
manifest read back names files again; the model's service user may own the version directory and
put a symlink in it. Root writes, chowns, hashes and deletes at those paths, so each one is joined
under its root and refused unless it stays there, symlinks resolved (docs/security.md).

Target side: Python standard library only.
"""

from __future__ import absolute_import, division, print_function

import os
import pwd
import stat
import sys
from typing import Callable, List, Optional, Sequence, Set, Tuple

from ansible_collections.llmops.vllm.plugins.module_utils.systemd_unit import CONTROL_RE


class PathError(ValueError):
    """A path that would leave its root; the message names what it is, the value and the root."""


def path_inside(root: str, *parts: str, what: str = "a path") -> str:
    """``root/part/...``, refused (PathError) unless it lies strictly below ``root``.

    Each part may hold several components (``org/name``, a hub file path ``original/params.json``).
    Refused: a part that is not a non-empty string, an absolute part, an empty, ``.`` or ``..``
    component, a control character (a line break in a path would reach a unit line) or a name the
    file system encoding cannot hold, and any path whose symlinks, resolved, lead out of ``root``'s
    own resolution. Returned is the plain join under ``root`` as given (not the resolved path): the
    rest of the collection recognises its paths by that prefix (a unit names models_root as
    configured, even when models_root is itself a symlink).

    A check, not a lock: whoever can write below ``root`` can still swap a symlink in after it.
    """
    components = []
    for part in parts:
        if not isinstance(part, str) or not part:
            raise PathError("%s %r: expected a non-empty relative name below %s" % (what, part, root))
        found = CONTROL_RE.search(part)
        if found:
            raise PathError("%s %r holds a control character (%r); refusing to use it below %s"
                            % (what, part, found.group(), root))
        try:
            os.fsencode(part)
        except UnicodeError:
            raise PathError("%s %r cannot be a file name on this system (its encoding is %s); refusing to use it "
                            "below %s" % (what, part, sys.getfilesystemencoding(), root))
        if part.startswith("/"):
            raise PathError("%s %r is absolute: expected a name relative to %s" % (what, part, root))
        for component in part.split("/"):
            if component in ("", ".", ".."):
                raise PathError("%s %r has the component %r, which would leave %s or name it twice; expected "
                                "plain names separated by single slashes" % (what, part, component, root))
            components.append(component)
    if not components:
        raise PathError("%s: no name given below %s" % (what, root))
    path = os.path.join(root, *components)
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if real == real_root or os.path.commonpath([real_root, real]) != real_root:
        raise PathError("%s %r resolves to %s, outside %s (a symlink on the way leads out): refusing to use it; "
                        "remove the link, or check who can write below %s" % (what, "/".join(parts), real, root, root))
    return path


# ----------------------------------------------------------------------------- directories root writes in
#
# path_inside is a check, not a lock. Where root creates, writes, chmods or chowns, each step is taken by
# file descriptor: a directory is opened relative to its parent's descriptor with O_NOFOLLOW and checked once
# open - owned by root (or the user this runs as), not writable by its group or others - so a link another
# user planted is never followed, and a checked directory cannot be swapped for another one afterwards.
class UnsafePathError(PathError):
    """A directory another user can write, or a link or hard link where root would follow or change it."""


DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# A regular file opened to chown or chmod it: never through a link, never blocking (a FIFO would).
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
MAX_LINKS = 40  # the kernel's own limit of symlinks in one lookup
FIX_HINT = ("run the rollout's control-plane step (llmops.vllm.host_dirs; playbooks/rollout.yml runs it right after "
            "taking the host's lock), or chown root:root and chmod go-w it yourself")


def trusted_uids() -> Tuple[int, ...]:
    """The owners whose directories root writes in: root and the user this runs as."""
    return tuple(sorted({0, os.geteuid()}))


def owner_name(uid: int) -> str:
    """``name (uid N)``, or ``uid N`` for a user without a name."""
    try:
        return "%s (uid %d)" % (pwd.getpwuid(uid).pw_name, uid)
    except KeyError:
        return "uid %d" % uid


def why_untrusted(st: os.stat_result, uids: Sequence[int], allow_sticky: bool = False) -> Optional[str]:
    """Why another user could add, replace or rename entries in the directory ``st`` describes, else None.

    With ``allow_sticky`` a sticky directory such as /tmp may be crossed: others may add entries there but not
    replace ours, and whatever is taken from it (a directory, a link) must be owned by a trusted user itself.
    """
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid not in uids:
        return "is owned by %s (mode %04o)" % (owner_name(st.st_uid), mode)
    if mode & 0o022 and not (allow_sticky and mode & stat.S_ISVTX):
        return "has mode %04o: its group or others may write in it" % mode
    return None


def refusal(what: str, path: str, reason: str) -> UnsafePathError:
    """The error for a directory another user can write (or a link such a user made): what, value, why, fix."""
    return UnsafePathError("%s: %s %s. Root never writes in, or follows a link inside, a directory another user "
                           "can write: %s" % (what, path, reason, FIX_HINT))


def open_dir(path: str, what: str = "a directory", create_mode: Optional[int] = None,
             uids: Optional[Sequence[int]] = None, check_last: bool = True,
             assume_trusted: Optional[Set[Tuple[int, int]]] = None) -> int:
    """An O_DIRECTORY descriptor of ``path`` (the caller closes it), reached from ``/`` one component at a time.

    Each directory on the way is opened relative to its parent's descriptor with O_NOFOLLOW and must be owned by
    one of ``uids`` (default: root and the user this runs as) and not writable by its group or others (a sticky
    directory such as /tmp may be crossed); ``path`` itself too unless ``check_last`` is false (the migration,
    which fixes it next, by this descriptor). A symlink on the way is followed only where it cannot have been
    planted: in a directory that passed, and owned by one of ``uids`` itself. With ``create_mode`` a missing
    directory is created with exactly that mode. ``assume_trusted``: (st_dev, st_ino) of directories a
    check-mode preview of the migration counts as already fixed. UnsafePathError says which step failed.
    """
    uid_list = tuple(uids) if uids is not None else trusted_uids()
    assumed = assume_trusted or set()
    pending = [part for part in reversed(os.path.abspath(path).split("/")) if part]
    links = 0
    shown = "/"
    fd = os.open("/", DIR_FLAGS)
    try:
        while True:
            st = os.fstat(fd)
            last = not pending
            if (st.st_dev, st.st_ino) not in assumed and (check_last or not last):
                reason = why_untrusted(st, uid_list, allow_sticky=not last)
                if reason:
                    raise refusal(what if last else "%s %s, on the way" % (what, path), shown, reason)
            if last:
                return fd
            name = pending.pop()
            if name == ".":
                continue
            created = False
            try:
                entry = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                if create_mode is None:
                    raise
                try:
                    os.mkdir(name, 0o700, dir_fd=fd)
                    created = True
                except FileExistsError:
                    pass
                entry = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISLNK(entry.st_mode):
                if entry.st_uid not in uid_list:
                    raise refusal(what, os.path.join(shown, name), "is a symlink made by %s" % owner_name(entry.st_uid))
                links += 1
                if links > MAX_LINKS:
                    raise UnsafePathError("%s: %s has more than %d symlinks on the way (a loop?); give the real path"
                                          % (what, path, MAX_LINKS))
                target = os.readlink(name, dir_fd=fd)
                if target.startswith("/"):
                    os.close(fd)
                    fd = -1
                    fd = os.open("/", DIR_FLAGS)
                    shown = "/"
                pending.extend(part for part in reversed(target.split("/")) if part)
                continue
            if not stat.S_ISDIR(entry.st_mode):
                raise UnsafePathError("%s: %s is not a directory (%s); expected a directory there"
                                      % (what, os.path.join(shown, name), path))
            child = os.open(name, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
            shown = os.path.normpath(os.path.join(shown, name))
            if created and create_mode is not None:
                os.fchmod(fd, create_mode)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        raise


def entry_stat(dir_fd: int, name: str) -> Optional[os.stat_result]:
    """lstat of ``name`` in the directory open at ``dir_fd``; None when it does not exist."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def open_entry(dir_fd: int, name: str, expected: os.stat_result) -> int:
    """``name`` in the directory at ``dir_fd``, opened without following a link (a directory or a regular
    file), refused (UnsafePathError) unless it is still the entry ``expected`` describes."""
    flags = DIR_FLAGS if stat.S_ISDIR(expected.st_mode) else FILE_FLAGS
    fd = os.open(name, flags, dir_fd=dir_fd)
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) != (expected.st_dev, expected.st_ino) or stat.S_IFMT(st.st_mode) != stat.S_IFMT(
            expected.st_mode):
        os.close(fd)
        raise UnsafePathError("%s changed while it was being checked (another process replaced it); run again"
                              % name)
    return fd


def set_owner_mode(fd: int, uid: int, gid: int, mode: int, apply: bool = True) -> bool:
    """chown/chmod the file or directory open at ``fd`` where they differ; True when they did (or would)."""
    st = os.fstat(fd)
    owner = (uid if uid >= 0 else st.st_uid, gid if gid >= 0 else st.st_gid)
    changed = False
    if (st.st_uid, st.st_gid) != owner:
        changed = True
        if apply:
            os.fchown(fd, owner[0], owner[1])
    if stat.S_IMODE(st.st_mode) != mode:
        changed = True
        if apply:
            os.fchmod(fd, mode)
    return changed


def set_attributes_at(path: str, uid: int, gid: int, mode: int, apply: bool = True,
                      what: str = "a model file") -> Tuple[bool, Optional[str]]:
    """Owner and mode of ``path`` (-1: keep), never through a link: (changed, warning).

    Its directory is reached with open_dir (root's, no other writer); ``path`` itself is opened with
    O_NOFOLLOW. A symlink there is refused (UnsafePathError); a regular file with more than one link is
    left untouched with a warning - chmod'ing a hard link to /etc/shadow would change /etc/shadow.
    """
    parent, name = os.path.split(os.path.normpath(path))
    dir_fd = open_dir(parent, what="the directory of %s %s" % (what, path))
    try:
        st = entry_stat(dir_fd, name)
        if st is None:
            raise FileNotFoundError(2, "No such file or directory", path)
        if stat.S_ISLNK(st.st_mode):
            raise refusal(what, path, "is a symlink (to %s), which this never writes"
                          % os.readlink(name, dir_fd=dir_fd))
        if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
            raise UnsafePathError("%s %s is neither a file nor a directory; remove it" % (what, path))
        if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            return False, ("%s %s has %d hard links: its owner and mode were left as they are (the other names "
                           "may be files outside it); replace it with a copy" % (what, path, st.st_nlink))
        fd = open_entry(dir_fd, name, st)
        try:
            return set_owner_mode(fd, uid, gid, mode, apply=apply), None
        finally:
            os.close(fd)
    finally:
        os.close(dir_fd)


def walk_fd(dir_fd: int, path: str, visit: Callable[[int, str, str, os.stat_result], Optional[int]]) -> None:
    """Every entry below the directory open at ``dir_fd``, top-down, names sorted, never through a link.

    ``visit(parent_fd, name, path, lstat)`` sees each entry first; for a directory it returns the directory's
    own descriptor (opened with open_entry, so it is the entry it saw) to descend into - after it fixed it,
    when it fixes - or None to skip it. walk_fd closes the descriptors it is given.
    """
    for name in sorted(os.listdir(dir_fd)):
        st = entry_stat(dir_fd, name)
        if st is None:
            continue
        child = visit(dir_fd, name, os.path.join(path, name), st)
        if child is not None:
            try:
                walk_fd(child, os.path.join(path, name), visit)
            finally:
                os.close(child)


def tree_refusal(dir_fd: int, path: str, what: str, uids: Optional[Sequence[int]] = None) -> List[str]:
    """Refuse (UnsafePathError) a tree root is about to write in when a directory in it is not root's (or is
    writable by others) or when it holds a symlink; returns the regular files with more than one link (left
    alone, the caller warns)."""
    uid_list = tuple(uids) if uids is not None else trusted_uids()
    hard_links: List[str] = []

    def visit(parent_fd: int, name: str, entry_path: str, st: os.stat_result) -> Optional[int]:
        if stat.S_ISLNK(st.st_mode):
            raise refusal(what, entry_path, "is a symlink (to %s); nothing here writes links, so another user "
                                            "may have planted it: remove it" % os.readlink(name, dir_fd=parent_fd))
        if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            hard_links.append(entry_path)
        if not stat.S_ISDIR(st.st_mode):
            return None
        reason = why_untrusted(st, uid_list)
        if reason:
            raise refusal(what, entry_path, reason)
        return open_entry(parent_fd, name, st)

    walk_fd(dir_fd, path, visit)
    return hard_links
