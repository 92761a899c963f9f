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
import sys

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
