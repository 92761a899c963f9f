#!/usr/bin/env python
"""Print the latest rollout report of every host (of every model, on a host with several) under a reports
directory: one table for the fleet,
then each host's summary lines (the benchmark's full Markdown stays in its file; its path is shown).

    tools/show_report.py [reports]
"""
import json
import os
import sys

from ansible_collections.llmops.vllm.plugins.plugin_utils.report import fleet_table, summary_lines


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "reports"
    reports = []
    for host in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        # one model: <host>/latest.json; several (vllm_models): <host>/<model>/latest.json each
        for label, path in [(host, os.path.join(root, host, "latest.json"))] + [
                ("%s/%s" % (host, name), os.path.join(root, host, name, "latest.json"))
                for name in sorted(os.listdir(os.path.join(root, host))) if os.path.isdir(os.path.join(root, host, name))]:
            if os.path.exists(path):
                with open(path) as handle:
                    reports.append((label, json.load(handle), path))
    if not reports:
        print("no rollout reports under %s" % root)
        return 1
    print("\n".join(fleet_table((host, report) for host, report, _path in reports)))
    for host, report, path in reports:
        print()
        print("%s:" % host)
        print("\n".join("  " + line for line in summary_lines(report, path)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
