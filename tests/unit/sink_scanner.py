# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Finds a value written into a sink without that sink's function (docs/security.md, "Sinks").

Root reads what the roles write: systemd units and environment files, HAProxy configurations, command lines.
Each sink has one validating and escaping function, exposed as filters; this scanner reads every template and
task file and reports each place where a Jinja expression reaches a sink without ending in one of them:

- a template is a unit (``*.service.j2``) or an HAProxy configuration (``*.cfg.j2``); any other template is
  reported until it is given a sink here. Every ``{{ expression }}`` in it must end in a filter of its sink
  (a constant, a loop variable over such a filter's output and a ``set`` of such a filter count too);
- a task that writes such a file with ``copy: content:`` is held to the same rule; ``lineinfile``,
  ``blockinfile`` and ``ini_file`` may not write one at all;
- ``command`` / ``shell`` / ``raw`` given as one string may not hold an expression (``argv:`` runs no shell
  and splits nothing).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Set, Tuple

import yaml
from jinja2 import Environment, nodes

SINK_FILTERS: Dict[str, Tuple[str, ...]] = {
    "systemd unit": ("llmops.vllm.systemd_value", "llmops.vllm.systemd_quote", "llmops.vllm.systemd_exec",
                     "llmops.vllm.systemd_environment"),
    "environment file": ("llmops.vllm.environment_file_text",),
    "HAProxy configuration": ("llmops.vllm.haproxy_",),
}
TEMPLATE_SINKS = {".service.j2": "systemd unit", ".cfg.j2": "HAProxy configuration"}
# Where a task's destination names one of the sinks.
DEST_SINKS = ((re.compile(r"\.service\b|unit_path|unit_dir"), "systemd unit"),
              (re.compile(r"\.env\b|env_file"), "environment file"),
              (re.compile(r"\.cfg\b|haproxy|proxy_config"), "HAProxy configuration"))
COMMAND_MODULES = ("ansible.builtin.command", "ansible.builtin.shell", "ansible.builtin.raw", "command", "shell", "raw")
LINE_EDITORS = ("ansible.builtin.lineinfile", "ansible.builtin.blockinfile", "community.general.ini_file",
                "lineinfile", "blockinfile", "ini_file")
_ENV = Environment()


def _is_sink_filter(name: str, sink: str) -> bool:
    return any(name == allowed or (allowed.endswith("_") and name.startswith(allowed)) for allowed in SINK_FILTERS[sink])


def _safe(node: nodes.Node, sink: str, safe_names: Set[str]) -> bool:
    if isinstance(node, nodes.TemplateData):
        return True
    if isinstance(node, nodes.Const):
        return True
    if isinstance(node, nodes.Filter):
        return _is_sink_filter(node.name, sink)
    if isinstance(node, nodes.Name):
        return node.name in safe_names
    if isinstance(node, nodes.CondExpr):
        return _safe(node.expr1, sink, safe_names) and (node.expr2 is None or _safe(node.expr2, sink, safe_names))
    return False


def _target_names(target: nodes.Node) -> List[str]:
    return [n.name for n in target.find_all(nodes.Name)] if not isinstance(target, nodes.Name) else [target.name]


def expression_problems(source: str, sink: str, where: str) -> List[str]:
    """Each ``{{ }}`` of a template (or a templated string) that writes into ``sink`` without its function."""
    tree = _ENV.parse(source)
    safe_names: Set[str] = {"loop"}
    for loop in tree.find_all(nodes.For):
        if _safe(loop.iter, sink, set()):
            safe_names.update(_target_names(loop.target))
    for assign in tree.find_all(nodes.Assign):
        if _safe(assign.node, sink, set()):
            safe_names.update(_target_names(assign.target))
    problems = []
    for output in tree.find_all(nodes.Output):
        for child in output.nodes:
            if not _safe(child, sink, safe_names):
                problems.append("%s:%s: an expression reaches the %s without its sink filter (%s): %s"
                                % (where, child.lineno, sink, ", ".join(SINK_FILTERS[sink]),
                                   _excerpt(source, child.lineno)))
    return problems


def _excerpt(source: str, lineno: int) -> str:
    lines = source.splitlines()
    return lines[lineno - 1].strip()[:120] if 0 < lineno <= len(lines) else "?"


def template_problems(path: Path, root: Path) -> List[str]:
    where = str(path.relative_to(root))
    sink = next((s for suffix, s in TEMPLATE_SINKS.items() if path.name.endswith(suffix)), None)
    if sink is None:
        return ["%s: a template of no known sink; name its sink in tests/unit/sink_scanner.py TEMPLATE_SINKS" % where]
    return expression_problems(path.read_text(), sink, where)


def _tasks(document: object) -> Iterator[dict]:
    if isinstance(document, list):
        for item in document:
            yield from _tasks(item)
    elif isinstance(document, dict):
        yield document
        for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
            if isinstance(document.get(key), list):
                yield from _tasks(document[key])


def _dest_sink(args: dict) -> Optional[str]:
    dest = str(args.get("dest") or args.get("path") or "")
    return next((sink for pattern, sink in DEST_SINKS if pattern.search(dest)), None)


def task_problems(document: object, where: str) -> List[str]:
    problems: List[str] = []
    for task in _tasks(document):
        name = task.get("name", "?")
        for module in COMMAND_MODULES:
            if module not in task:
                continue
            args = task[module]
            line = args if isinstance(args, str) else (args or {}).get("cmd") if isinstance(args, dict) else None
            if isinstance(line, str) and "{{" in line:
                problems.append("%s: task %r runs a command line with an expression in it; give argv: (no shell, "
                                "nothing split) instead" % (where, name))
        for module in LINE_EDITORS:
            if module in task and isinstance(task[module], dict) and _dest_sink(task[module]):
                problems.append("%s: task %r edits a %s line by line; render it whole through its sink filter"
                                % (where, name, _dest_sink(task[module])))
        for module in ("ansible.builtin.copy", "copy"):
            args = task.get(module)
            if isinstance(args, dict) and isinstance(args.get("content"), str) and _dest_sink(args):
                problems += expression_problems(args["content"], _dest_sink(args) or "", "%s: task %r" % (where, name))
    return problems


def scan(root: Path, template_globs: Sequence[str] = ("roles/*/templates/**/*.j2",),
         task_globs: Sequence[str] = ("roles/*/tasks/**/*.yml", "roles/*/handlers/**/*.yml", "playbooks/*.yml")
         ) -> List[str]:
    """Every problem in the tree under ``root``."""
    problems: List[str] = []
    for pattern in template_globs:
        for path in sorted(root.glob(pattern)):
            problems += template_problems(path, root)
    for pattern in task_globs:
        for path in sorted(root.glob(pattern)):
            problems += task_problems(yaml.safe_load(path.read_text()), str(path.relative_to(root)))
    return problems
