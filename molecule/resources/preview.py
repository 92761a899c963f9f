#!/usr/bin/env python
"""Run a playbook the way a pipeline would, through ansible-runner, and keep every task's result per
host as JSON (the shape of ansible.posix's json callback: plays -> tasks -> hosts -> result, plus stats).

    molecule/resources/preview.py OUT.json PLAYBOOK INVENTORY[:INVENTORY...] [ansible-playbook options ...]

Several inventories (':'-separated) are passed in that order, as ansible-playbook -i A -i B would take them (the
first names inventory_dir; ansible-runner puts its own -i after the options, so they cannot go there).

The default scenario runs playbooks/plan.yml --diff and rollout.yml --check --diff with it before the
rollout, and its verify step compares the previewed unit with the one the rollout wrote.
"""
import json
import os
import sys
import tempfile
import time

import ansible_runner

RESULT_EVENTS = {"runner_on_ok", "runner_on_changed", "runner_on_failed", "runner_on_skipped", "runner_on_unreachable"}


def collect(events):
    """plays -> tasks -> {host: result} from ansible-runner's event stream, in the order tasks ran."""
    plays, tasks = [], {}
    for event in events:
        data = event.get("event_data") or {}
        if event.get("event") == "playbook_on_play_start":
            plays.append({"play": {"name": data.get("play")}, "tasks": []})
        elif event.get("event") in RESULT_EVENTS and plays:
            key = (len(plays), data.get("task_uuid"))
            if key not in tasks:
                tasks[key] = {"task": {"name": data.get("task")}, "hosts": {}}
                plays[-1]["tasks"].append(tasks[key])
            result = dict(data.get("res") or {})
            if event["event"] == "runner_on_skipped":
                result["skipped"] = True
            tasks[key]["hosts"][data.get("host")] = result
    return plays


def main():
    out, playbook, inventory, options = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    with tempfile.TemporaryDirectory(prefix="llmops-preview-") as private:
        started = time.monotonic()
        inventories = [os.path.abspath(path) for path in inventory.split(os.pathsep)]
        runner = ansible_runner.run(private_data_dir=private, playbook=os.path.abspath(playbook),
                                    inventory=inventories if len(inventories) > 1 else inventories[0],
                                    cmdline=" ".join(options), quiet=True)
        seconds = round(time.monotonic() - started, 1)
        document = {"rc": runner.rc, "status": runner.status, "seconds": seconds, "stats": stats(runner.stats),
                    "plays": collect(runner.events)}
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)  # out/ exists under make test, not always alone
    with open(out, "w") as handle:
        json.dump(document, handle, indent=1, default=str)
    print("%s: %s (rc %s) in %.1f s" % (os.path.basename(playbook), runner.status, runner.rc, seconds))
    return 0 if runner.rc == 0 else 1


def stats(raw):
    """{host: {ok, changed, failures, skipped, unreachable}} from ansible-runner's per-counter stats."""
    hosts = {}
    for counter, name in (("ok", "ok"), ("changed", "changed"), ("failures", "failures"), ("skipped", "skipped"),
                          ("dark", "unreachable")):
        for host, value in ((raw or {}).get(counter) or {}).items():
            hosts.setdefault(host, {"ok": 0, "changed": 0, "failures": 0, "skipped": 0, "unreachable": 0})[name] = value
    for host in (raw or {}).get("processed") or {}:
        hosts.setdefault(host, {"ok": 0, "changed": 0, "failures": 0, "skipped": 0, "unreachable": 0})
    return hosts


if __name__ == "__main__":
    sys.exit(main())
