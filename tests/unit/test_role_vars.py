"""Role options typed int/float/bool survive key=value extra vars (`-e model_keep=3` is the string "3").

Ansible validates such a value against the role's argument_specs but hands the role the string, so
every comparison, arithmetic or bare condition on it must go through `| int`, `| float` or `| bool`.
This scans the roles' tasks, vars and templates for uses that do not.
"""
import glob
import os
import re

import pytest
import yaml

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
EXPRESSION_LINE = re.compile(r"^\s*(-\s|when:|that:|until:|failed_when:|changed_when:|loop:|retries:|delay:)")
FILTERED = re.compile(r"\s*\|\s*(int|float|bool)\b")
OPERATOR_AFTER = re.compile(r"\s*(>=|<=|==|!=|>|<|\+|-(?!-)|\*|/|%|and\b|or\b|\)\s*(and|or)\b)")
OPERATOR_BEFORE = re.compile(r"(>=|<=|==|!=|>|<|\+|-|\*|/|%|\bnot|\band|\bor|\bif|\belse|when:|that:|until:)\s*$")


def typed_options(spec_path):
    spec = yaml.safe_load(open(spec_path))
    options = {}
    for entry_point in spec["argument_specs"].values():
        for name, option in (entry_point.get("options") or {}).items():
            if option.get("type") in ("int", "float", "bool"):
                options[name] = option["type"]
    return options


def in_expression(line, start, end):
    """Inside {{ }} / {% %} on this line, or on a line Ansible templates as a whole (when:, that: items)."""
    opened = max(line.rfind("{{", 0, start), line.rfind("{%", 0, start))
    if opened >= 0 and max(line.rfind("}}", 0, start), line.rfind("%}", 0, start)) < opened:
        return True
    return bool(EXPRESSION_LINE.match(line)) and "{{" not in line


def unfiltered_uses(role_dir):
    options = typed_options(os.path.join(role_dir, "meta", "argument_specs.yml"))
    paths = [p for p in glob.glob(os.path.join(role_dir, "**", "*"), recursive=True)
             if p.endswith((".yml", ".j2")) and os.sep + "meta" + os.sep not in p and os.sep + "defaults" + os.sep not in p]
    found = []
    for path in sorted(paths):
        for number, line in enumerate(open(path).read().splitlines(), 1):
            for name, kind in options.items():
                for match in re.finditer(r"(?<![\w.])%s\b" % re.escape(name), line):
                    if FILTERED.match(line[match.end():]) or not in_expression(line, match.start(), match.end()):
                        continue
                    after, before = line[match.end():], line[:match.start()]
                    bare = kind == "bool" and re.match(r"^\s*(-\s*|when:\s*|that:\s*)$", before) and not after.strip()
                    if OPERATOR_AFTER.match(after) or OPERATOR_BEFORE.search(before) or bare:
                        found.append("%s:%d: %s (%s) used without | %s: %s"
                                     % (os.path.relpath(path, ROOT), number, name, kind, kind, line.strip()))
    return found


ROLES = sorted(os.path.dirname(os.path.dirname(p)) for p in glob.glob(os.path.join(ROOT, "roles", "*", "meta", "argument_specs.yml")))


def test_every_role_is_scanned():
    assert len(ROLES) >= 7


@pytest.mark.parametrize("role_dir", ROLES, ids=[os.path.basename(r) for r in ROLES])
def test_typed_options_are_filtered_where_compared(role_dir):
    assert unfiltered_uses(role_dir) == []


def test_the_scan_finds_an_unfiltered_comparison(tmp_path):
    role = tmp_path / "role"
    (role / "meta").mkdir(parents=True)
    (role / "tasks").mkdir()
    (role / "meta" / "argument_specs.yml").write_text(
        "argument_specs:\n  main:\n    options:\n      x_keep: {type: int}\n      x_start: {type: bool}\n")
    (role / "tasks" / "main.yml").write_text(
        "- name: a\n  when: x_keep > 0\n- name: b\n  when: x_start\n- name: c\n  debug: {msg: \"{{ x_keep | int + 1 }}\"}\n")
    found = unfiltered_uses(str(role))
    assert len(found) == 2 and "x_keep" in found[0] and "x_start" in found[1]
