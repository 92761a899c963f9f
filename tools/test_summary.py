#!/usr/bin/env python
"""Print one `N passed, N failed` line over every JUnit XML file in a directory (pytest, molecule
scenarios, ...), so CI sees one total however many runners took part. Exit 1 if any failed or none ran."""
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


def main():
    directory = sys.argv[1] if len(sys.argv) > 1 else "out/junit"
    passed = failed = skipped = 0
    for path in sorted(glob.glob(os.path.join(directory, "*.xml"))):
        p, f, s = count(path)
        passed, failed, skipped = passed + p, failed + f, skipped + s
        print("  %-40s %d passed, %d failed, %d skipped" % (os.path.basename(path), p, f, s))
    print("%d passed, %d failed" % (passed, failed))
    if skipped:
        print("(%d skipped)" % skipped)
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
