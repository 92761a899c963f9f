# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Quoting for systemd unit files: command lines, Environment= assignments and EnvironmentFile lines.

A plan's argv holds JSON (``--speculative-config {"method":"mtp",...}``), paths and values that
systemd would otherwise split, expand (``$VAR``, ``%n``) or unescape (systemd.service(5) "Command
lines", systemd.syntax(7) "Quoting"). The serve role's template reaches these through the filters of
plugins/filter/systemd.py; vllm_takeover writes units with them on the host.

Target side: Python standard library only.
"""

from __future__ import absolute_import, division, print_function

from typing import Dict, List, Sequence

SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=.,/:@+")


def _escape(word: str, expands_variables: bool = True) -> str:
    # Specifiers (%) are systemd's everywhere, variable expansion ($) only in command lines: double them
    # so they stay literal. Line breaks and tabs become C escapes so the value stays on its line.
    word = word.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    word = word.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return word.replace("$", "$$") if expands_variables else word


def systemd_quote(word: object) -> str:
    """One word, quoted only when it needs to be."""
    word = str(word)
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
    return ['"%s"' % _escape("%s=%s" % (key, value), expands_variables=False) for key, value in sorted(env.items())]


def environment_file_line(key: str, value: object) -> str:
    """One KEY="value" line of an EnvironmentFile= (systemd.exec(5)), in double quotes: systemd reads
    a backslash before \\, ", ` and $ as that character there. A line break cannot be written."""
    text = str(value)
    if "\n" in text or "\r" in text:
        raise ValueError("environment_file_line: the value of %s holds a line break; an EnvironmentFile line cannot" % key)
    for char in ("\\", '"', "`", "$"):
        text = text.replace(char, "\\" + char)
    return '%s="%s"\n' % (key, text)


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
