#!/usr/bin/env python
"""Print where the time went (a table of stages: pytest by test file, each static check, each molecule
scenario) and one `N passed, N failed` line over every JUnit XML file in a directory (pytest, molecule
scenarios, ...), so CI sees one total however many runners took part. Exit 1 if any failed or none ran."""
import collections
import glob
import os
import sys
import xml.etree.ElementTree as ET


def count(path):
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    tests = failed = skipped = 0
    for suite in suites:
        tests += int(suite.get("tests", 0))
        failed += int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        skipped += int(suite.get("skipped", 0))
    return tests - failed - skipped, failed, skipped


def stage_of(path, case):
    """The stage a test case's time counts to: its test file for pytest, the case itself for the other runners."""
    classname = case.get("classname", "")
    if os.path.basename(path).startswith("pytest"):
        parts = classname.split(".")
        module = next((i for i, part in enumerate(parts) if part.startswith("test_")), len(parts) - 1)
        return "pytest " + "/".join(parts[:module + 1]) + ".py"
    return "%s: %s" % (classname or os.path.basename(path)[:-4], case.get("name", "?"))


def stage_seconds(paths):
    """{stage: seconds} summed over the test cases of JUnit files."""
    seconds = collections.Counter()
    for path in paths:
        for case in ET.parse(path).getroot().iter("testcase"):
            seconds[stage_of(path, case)] += float(case.get("time") or 0)
    return seconds


def timing_table(seconds, top=25):
    total = sum(seconds.values())
    lines = ["%-70s %8s %6s" % ("where the time went (stage)", "seconds", "share")]
    for stage, value in seconds.most_common(top):
        lines.append("%-70s %8.1f %5.1f%%" % (stage[:70], value, 100.0 * value / total if total else 0))
    rest = sum(value for _stage, value in seconds.most_common()[top:])
    if rest:
        lines.append("%-70s %8.1f" % ("(the other %d stages)" % (len(seconds) - top), rest))
    lines.append("%-70s %8.1f" % ("total", total))
    return lines


def main():
    directory = sys.argv[1] if len(sys.argv) > 1 else "out/junit"
    passed = failed = skipped = 0
    paths = sorted(glob.glob(os.path.join(directory, "*.xml")))
    print("\n".join(timing_table(stage_seconds(paths))))
    for path in paths:
        p, f, s = count(path)
        passed, failed, skipped = passed + p, failed + f, skipped + s
        print("  %-40s %d passed, %d failed, %d skipped" % (os.path.basename(path), p, f, s))
    print("%d passed, %d failed" % (passed, failed))
    if skipped:
        print("(%d skipped)" % skipped)
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
