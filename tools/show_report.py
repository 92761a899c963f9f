#!/usr/bin/env python
"""Print the latest rollout report of every host under a reports directory as a Markdown summary.

    tools/show_report.py [reports]
"""
import json
import os
import sys


def line(host, report):
    before = report.get("before") or {}
    timings = report.get("timings") or {}
    plan = report.get("plan") or {}
    layout = "%s TP=%s" % (plan.get("device", "?"), plan.get("tensor_parallel_size", "?"))
    return "| %s | %s | %s | %s@%s | %s | %s | %s | %s |" % (
        host, report.get("status"), before.get("unit", "-"),
        (report.get("desired") or {}).get("repo_id", "?"), (report.get("commit") or "?")[:12], layout,
        timings.get("downtime_gap_s"), timings.get("time_to_ready_s"), timings.get("download_s"))


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "reports"
    rows, benchmarks = [], []
    for host in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        path = os.path.join(root, host, "latest.json")
        if os.path.exists(path):
            with open(path) as handle:
                report = json.load(handle)
            rows.append(line(host, report))
            markdown = (report.get("benchmark") or {}).get("markdown")
            if markdown and os.path.exists(markdown):
                benchmarks.append(open(markdown).read())
    if not rows:
        print("no rollout reports under %s" % root)
        return 1
    print("| host | status | retired | serves now | plan | downtime gap s | new model ready s | download s |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    for markdown in benchmarks:
        print()
        print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
