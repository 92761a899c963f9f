# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The systemd sink: every value written into a unit file or an EnvironmentFile passes one of these.

One function per kind of line (docs/security.md): ``systemd_value`` for a directive's value or a
comment's text, ``systemd_exec`` / ``systemd_quote`` for command lines, ``systemd_environment`` for
Environment= assignments, ``environment_file_line`` for EnvironmentFile lines. Each refuses control
characters (a line break would open a new directive or section: a value from the hub, a running
process or a served name could otherwise inject ``ExecStartPre=+...``, which root runs) and escapes
what systemd would expand or unescape.

A plan's argv holds JSON (``--speculative-config {"method":"mtp",...}``), paths and values that
systemd would otherwise split, expand (``$VAR``, ``%n``) or unescape (systemd.service(5) "Command
lines", systemd.syntax(7) "Quoting"). The serve role's template reaches these through the filters of
plugins/filter/systemd.py; vllm_takeover writes units with them on the host.

Target side: Python standard library only.
"""

from __future__ import absolute_import, division, print_function

import re
from typing import Dict, List, Sequence

# C0 and C1 controls, DEL, and the Unicode line and paragraph separators.
CONTROL_RE = re.compile('[\x00-\x1f\x7f-\x9f\u2028\u2029]')
ENV_NAME_RE = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*$')


def refuse_control(text: object, what: str) -> str:
    """``text`` as a string, or ValueError naming ``what`` when it holds a control character."""
    text = str(text)
    found = CONTROL_RE.search(text)
    if found:
        raise ValueError("%s holds a control character (%r at position %d): a unit or environment file cannot carry "
                         "it on one line; remove it from %r" % (what, found.group(), found.start(), text[:80]))
    return text


def systemd_value(value: object, what: str = "a unit file value") -> str:
    """A directive's value or a comment's text (Description=, WorkingDirectory=, User=, ``# ...``):
    one line, specifiers (%) kept literal, no trailing backslash (systemd would join the next line)."""
    text = refuse_control(value, what)
    if text.rstrip().endswith("\\"):
        raise ValueError("%s ends in a backslash, which systemd reads as a line continuation: %r" % (what, text[:80]))
    return text.replace("%", "%%")


SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=.,/:@+")


def _escape(word: str, expands_variables: bool = True) -> str:
    # Specifiers (%) are systemd's everywhere, variable expansion ($) only in command lines: double them
    # so they stay literal. Control characters never get here (refuse_control).
    word = word.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return word.replace("$", "$$") if expands_variables else word


def systemd_quote(word: object) -> str:
    """One word, quoted only when it needs to be."""
    word = refuse_control(word, "a command line word")
    if word and all(ch in SAFE for ch in word):
        return word
    return '"%s"' % _escape(word)


def systemd_exec(argv: Sequence[object]) -> str:
    """An argv list as the value of ExecStart=; the first word must be an absolute path."""
    if not argv:
        raise ValueError("systemd_exec: empty argv")
    words = [str(w) for w in argv]
    if not words[0].startswith("/"):
        raise ValueError("systemd_exec: %r is not an absolute path; systemd needs one for ExecStart" % words[0])
    return " ".join(systemd_quote(w) for w in words)


def systemd_environment(env: Dict[str, object]) -> List[str]:
    """A dict as Environment= assignments, one quoted KEY=value per item, sorted."""
    # Environment= performs no variable expansion (systemd.exec(5)): a "$" is kept as it is.
    out = []
    for key, value in sorted(env.items()):
        if not ENV_NAME_RE.match(str(key)):
            raise ValueError("environment variable name %r is not valid (letters, digits and _, not first a digit)" % (key,))
        text = refuse_control(value, "the value of environment variable %s" % key)
        out.append('"%s"' % _escape("%s=%s" % (key, text), expands_variables=False))
    return out


def environment_file_line(key: str, value: object) -> str:
    """One KEY="value" line of an EnvironmentFile= (systemd.exec(5)), in double quotes: systemd reads
    a backslash before \\, ", ` and $ as that character there. A control character cannot be written."""
    if not ENV_NAME_RE.match(str(key)):
        raise ValueError("environment_file_line: %r is not a valid environment variable name" % (key,))
    text = refuse_control(value, "environment_file_line: the value of %s" % key)
    for char in ("\\", '"', "`", "$"):
        text = text.replace(char, "\\" + char)
    return '%s="%s"\n' % (key, text)


def environment_file_text(env: Dict[str, object]) -> str:
    """A whole EnvironmentFile: one environment_file_line per item, sorted."""
    return "".join(environment_file_line(key, value) for key, value in sorted(env.items()))


def read_environment_file(text: str) -> Dict[str, str]:
    """The assignments of an EnvironmentFile (what environment_file_line writes, and plain KEY=value
    lines); comments and blank lines are skipped."""
    out: Dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(('#', ';')) or '=' not in line:
            continue
        key, value = line.split('=', 1)
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            chars, index, body = [], 0, value[1:-1]
            while index < len(body):
                if body[index] == '\\' and index + 1 < len(body):
                    index += 1
                chars.append(body[index])
                index += 1
            value = ''.join(chars)
        elif len(value) >= 2 and value[0] == value[-1] == "'":
            value = value[1:-1]
        out[key.strip()] = value
    return out
