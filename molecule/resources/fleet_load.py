#!/usr/bin/env python
"""The default scenario's clients: a steady load through the fleet's HAProxy from the prepare step to the
side effect's end, every request checked (tests/integration/steady_load.py: a failed request is no connection,
a non-2xx answer, no answer within 60 s, or a stream cut before `data: [DONE]`).

    fleet_load.py start URL MODEL DIR [--rate R] [--stream-every N]   in the background; its pid in DIR/load.pid
    fleet_load.py stop DIR [--min-requests N] [--wait S]               waits until N requests were sent (at most S
                                                                       seconds more), stops the load, prints and keeps
                                                                       its summary (DIR/summary.json)
    fleet_load.py wait-up SOCKET BACKEND COUNT [--timeout S]           waits until HAProxy has COUNT servers of BACKEND
                                                                       up and ready (runtime socket SOCKET); prints them

A started load that nobody stops ends by itself after --max-seconds (1800 by default), and `sandbox/down`
stops it (DIR is under the sandbox's directory)."""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "tests" / "integration"), str(REPO / ".collections")]
from steady_load import SteadyLoad  # noqa: E402 - the path above first


def run(args: argparse.Namespace) -> int:
    directory = Path(args.dir)
    load = SteadyLoad(args.url, args.model, rate=args.rate, max_tokens=args.max_tokens, timeout=60.0,
                      stream_every=args.stream_every)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    load.start()
    begun = time.monotonic()
    while not stop.wait(1.0):
        with load.lock:
            sent = len(load.results)
        (directory / "progress.json").write_text(json.dumps({"sent": sent, "seconds": round(time.monotonic() - begun)}))
        if time.monotonic() - begun > args.max_seconds:
            break
    summary = dict(load.stop(), seconds=round(time.monotonic() - begun, 1), rate=args.rate, stream_every=args.stream_every)
    (directory / "summary.json.tmp").write_text(json.dumps(summary, indent=1))
    os.replace(directory / "summary.json.tmp", directory / "summary.json")
    return 0


def start(args: argparse.Namespace) -> int:
    directory = Path(args.dir)
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("summary.json", "progress.json"):
        (directory / name).unlink(missing_ok=True)
    with open(directory / "load.log", "ab") as log:
        proc = subprocess.Popen([sys.executable, __file__, "run", args.url, args.model, args.dir, "--rate", str(args.rate),
                                 "--stream-every", str(args.stream_every), "--max-tokens", str(args.max_tokens),
                                 "--max-seconds", str(args.max_seconds)],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    (directory / "load.pid").write_text("%d\n" % proc.pid)
    print("steady load on %s (%s), %s requests/s, every %sth streamed: pid %d" % (args.url, args.model, args.rate,
                                                                                  args.stream_every, proc.pid))
    return 0


def sent(directory: Path) -> int:
    try:
        return int(json.loads((directory / "progress.json").read_text())["sent"])
    except (OSError, ValueError, KeyError):
        return 0


def stop(args: argparse.Namespace) -> int:
    directory = Path(args.dir)
    pid = int((directory / "load.pid").read_text())
    deadline = time.monotonic() + args.wait
    while sent(directory) < args.min_requests and time.monotonic() < deadline:
        time.sleep(1)
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + 90  # the requests in flight end within their 60 s timeout
    while not (directory / "summary.json").exists():
        if time.monotonic() > deadline:
            print("the load (pid %d) wrote no summary in 90 s; see %s" % (pid, directory / "load.log"), file=sys.stderr)
            return 1
        time.sleep(0.5)
    (directory / "load.pid").unlink(missing_ok=True)
    print((directory / "summary.json").read_text())
    return 0


def wait_up(args: argparse.Namespace) -> int:
    from ansible_collections.llmops.vllm.plugins.module_utils import haproxy
    deadline = time.monotonic() + args.timeout
    while True:
        seen = {name: {"status": server["status"], "state": server["state"]}
                for name, server in (haproxy.servers(args.socket, args.backend) or {}).items()}
        up = [name for name, server in seen.items() if server["status"] == "UP" and server["state"] == "ready"]
        if len(up) >= args.count:
            print(json.dumps(seen))
            return 0
        if time.monotonic() > deadline:
            print("HAProxy has %d of %d servers of %s up and ready after %s s: %s"
                  % (len(up), args.count, args.backend, args.timeout, json.dumps(seen)), file=sys.stderr)
            return 1
        time.sleep(1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("start", "run"):
        command = sub.add_parser(name)
        command.add_argument("url")
        command.add_argument("model")
        command.add_argument("dir")
        command.add_argument("--rate", type=float, default=1.0)
        command.add_argument("--stream-every", type=int, default=3)
        command.add_argument("--max-tokens", type=int, default=8)
        command.add_argument("--max-seconds", type=float, default=1800)
    command = sub.add_parser("stop")
    command.add_argument("dir")
    command.add_argument("--min-requests", type=int, default=0)
    command.add_argument("--wait", type=float, default=300)
    command = sub.add_parser("wait-up")
    command.add_argument("socket")
    command.add_argument("backend")
    command.add_argument("count", type=int)
    command.add_argument("--timeout", type=float, default=60)
    args = parser.parse_args()
    return {"start": start, "run": run, "stop": stop, "wait-up": wait_up}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
