#!/usr/bin/env python
"""Record what a released vLLM wheel can do, for plans made without live `vllm_info` facts.

    tools/record_vllm_release.py WHEEL [--python-module plugins/plugin_utils/vllm_release.py] [--json F]

Reads the wheel's sources with the same fast path `vllm_info` uses on hosts
(plugins/module_utils/vllm_install.read_source_facts) and writes them as a Python module (what the
planner imports) and/or JSON (a test fixture). Nothing is imported from the wheel.
"""
import argparse
import json
import os
import sys
import tempfile
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plugins", "module_utils"))
import vllm_install  # noqa: E402  (stdlib-only module, imported by path so no setup is needed)

# "flags": every `vllm serve` flag read_flags finds (sorted "--x" strings), so plans made offline can
# check the flags they emit. BooleanOptionalAction's "--no-x" forms are not in it: read_flags lists
# only "--x", and a flag gate accepts "--no-x" when "--x" is there.
KEEP = ("tool_parsers", "reasoning_parsers", "architectures", "quantization_methods",
        "mtp_model_types", "flags", "capabilities", "defaults")


def to_python(value, indent=0):
    """A pep8-clean Python literal: hanging indents of 4, lists of names wrapped at 100 columns."""
    pad, inner = " " * indent, " " * (indent + 4)
    if isinstance(value, dict):
        if not value:
            return "{}"
        lines = ["%s%r: %s," % (inner, key, to_python(value[key], indent + 4)) for key in sorted(value)]
        return "{\n" + "\n".join(lines) + "\n" + pad + "}"
    if isinstance(value, list):
        if not value:
            return "[]"
        rows, row = [], inner
        for item in value:
            word = "%r, " % (item,)
            if len(row) + len(word) > 100 and row.strip():
                rows.append(row.rstrip())
                row = inner
            row += word
        rows.append(row.rstrip())
        return "[\n" + "\n".join(rows) + "\n" + pad + "]"
    return repr(value)


def record(wheel):
    with zipfile.ZipFile(wheel) as archive, tempfile.TemporaryDirectory() as tmp:
        meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        fields = dict(line.split(": ", 1) for line in archive.read(meta).decode().splitlines()
                      if ": " in line and not line.startswith(" "))
        archive.extractall(tmp, [n for n in archive.namelist() if n.startswith("vllm/") and n.endswith(".py")])
        facts = vllm_install.read_source_facts(os.path.join(tmp, "vllm"))
    out = {"distribution": fields["Name"], "version": fields["Version"], "source": "recorded",
           "recorded_from": os.path.basename(wheel)}
    out.update({k: facts[k] for k in KEEP})
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheel")
    parser.add_argument("--python-module")
    parser.add_argument("--json")
    args = parser.parse_args()
    facts = record(args.wheel)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(facts, handle, indent=1, sort_keys=True)
            handle.write("\n")
    if args.python_module:
        with open(args.python_module, "w") as handle:
            handle.write('# -*- coding: utf-8 -*-\n# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)\n')
            handle.write('"""What the current vLLM release can do: its parser names, architectures, MTP model types and\n')
            handle.write('flags, as recorded from %s by tools/record_vllm_release.py.\n\n' % facts["recorded_from"])
            handle.write('The planner uses this only when no live `vllm_info` facts of the host\'s own install are given,\n')
            handle.write('and says so in its warnings. Regenerate it for a new release; do not edit by hand.\n"""\n\n')
            handle.write("RELEASE_FACTS = " + to_python(facts) + "\n")
    if not (args.json or args.python_module):
        json.dump(facts, sys.stdout, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
