# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Jinja filters that write values into systemd unit files safely.

A plan's argv holds JSON (``--speculative-config {"method":"mtp",...}``), paths and values that
systemd would otherwise split, expand (``$VAR``, ``%n``) or unescape. These filters quote for
systemd's own command-line and assignment syntax (systemd.service(5) "Command lines",
systemd.syntax(7) "Quoting").
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

from typing import Any, Callable, Dict, List

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


def systemd_exec(argv: List[object]) -> str:
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


class FilterModule(object):
    def filters(self) -> Dict[str, Callable[..., Any]]:
        return {"systemd_exec": systemd_exec, "systemd_quote": systemd_quote,
                "systemd_environment": systemd_environment}
