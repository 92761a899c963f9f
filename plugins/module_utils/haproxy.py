# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""HAProxy's runtime API (the stats socket, `stats socket ... level admin`), for the load-balancer steps of
a rollout: read a server's state and sessions, set it ready, drain or maint, wait until it is drained or up.

One command per connection (the socket's non-interactive mode answers and closes). Plain functions; the
module haproxy_server is their only caller. docs/rollout.md "Load balancer" tells the story.
"""
from __future__ import absolute_import, division, print_function

import socket
import time
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

Server = Dict[str, Any]

# srv_admin_state bits of `show servers state` (HAProxy's include/haproxy/server-t.h, SRV_ADMF_*)
ADMIN_FORCED_MAINT, ADMIN_INHERITED_MAINT, ADMIN_CONFIG_MAINT, ADMIN_FORCED_DRAIN = 0x01, 0x02, 0x04, 0x08
ADMIN_INHERITED_DRAIN, ADMIN_RESOLVER_MAINT, ADMIN_HOSTNAME_MAINT = 0x10, 0x20, 0x40
STATES = ("ready", "drain", "maint")


class HaproxyError(Exception):
    pass


def command(path: str, line: str, timeout: float = 10.0) -> str:
    """One runtime API command on the unix socket at path; its answer."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        try:
            sock.connect(path)
        except OSError as exc:
            raise HaproxyError("cannot reach HAProxy's runtime API at %s (%s): is HAProxy running with "
                               "`stats socket %s mode 600 level admin` in its global section?" % (path, exc, path))
        sock.sendall(line.encode() + b"\n")
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        sock.close()
    return b"".join(chunks).decode(errors="replace")


def parse_stat(text: str) -> List[Dict[str, str]]:
    """`show stat` (CSV, header `# pxname,svname,...`) as a list of dicts."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("# "):
        raise HaproxyError("unexpected answer to `show stat`: %r" % text[:200])
    header = lines[0][2:].split(",")
    return [dict(zip(header, line.split(","))) for line in lines[1:]]


def parse_servers_state(text: str) -> List[Dict[str, str]]:
    """`show servers state <backend>` (a version line, a `# be_id be_name ...` header, rows) as dicts."""
    lines = [line for line in text.splitlines() if line.strip()]
    header = next((line[2:].split() for line in lines if line.startswith("# ")), None)
    if header is None:
        raise HaproxyError("unexpected answer to `show servers state`: %r" % text[:200])
    return [dict(zip(header, line.split())) for line in lines if not line.startswith("#") and len(line.split()) >= len(header) // 2]


def admin_state(bits: int) -> str:
    """ready, drain or maint from srv_admin_state. ADMIN_CONFIG_MAINT only remembers that the configuration said
    `disabled` (HAProxy's SRV_ADMF_MAINT leaves it out): such a server set ready keeps that bit and takes requests
    (measured: srv_admin_state 4, status UP, serving)."""
    if bits & (ADMIN_FORCED_MAINT | ADMIN_INHERITED_MAINT | ADMIN_RESOLVER_MAINT | ADMIN_HOSTNAME_MAINT):
        return "maint"
    if bits & (ADMIN_FORCED_DRAIN | ADMIN_INHERITED_DRAIN):
        return "drain"
    return "ready"


def servers(path: str, backend: str, timeout: float = 10.0) -> Optional[Dict[str, Server]]:
    """Every server of backend: {name: {state, status, sessions, queued, address, port}}; None without such a backend."""
    state_text = command(path, "show servers state %s" % backend, timeout)
    if "Can't find backend" in state_text or "No such backend" in state_text:
        return None
    rows = parse_servers_state(state_text)
    stats = {row["svname"]: row for row in parse_stat(command(path, "show stat", timeout)) if row.get("pxname") == backend}
    found: Dict[str, Server] = {}
    for row in rows:
        name = row["srv_name"]
        stat = stats.get(name, {})
        found[name] = {
            "state": admin_state(int(row.get("srv_admin_state", "0"))),
            # UP, DOWN, DRAIN, MAINT, NOLB, "UP 1/2" while a check changes its mind, "no check"
            "status": stat.get("status", "unknown"),
            "sessions": int(stat.get("scur") or 0),
            "queued": int(stat.get("qcur") or 0),
            "address": row.get("srv_addr"),
            "port": int(row["srv_port"]) if row.get("srv_port", "").isdigit() else None,
        }
    return found


def is_up(server: Server) -> bool:
    """Health checks pass (the status reads UP, or DRAIN: up but taking no new requests)."""
    return server["status"].split(" ")[0] in ("UP", "DRAIN", "no")


def serving(server: Server) -> bool:
    """Takes new requests: ready and up."""
    return server["state"] == "ready" and server["status"].split(" ")[0] in ("UP", "no")


def set_state(path: str, backend: str, name: str, state: str, timeout: float = 10.0) -> None:
    if state not in STATES:
        raise HaproxyError("state must be one of %s, got %r" % (", ".join(STATES), state))
    answer = command(path, "set server %s/%s state %s" % (backend, name, state), timeout).strip()
    if answer:
        raise HaproxyError("HAProxy refused `set server %s/%s state %s`: %s" % (backend, name, state, answer))


def set_address(path: str, backend: str, name: str, address: str, port: Optional[int], timeout: float = 10.0) -> None:
    line = "set server %s/%s addr %s" % (backend, name, address) + (" port %d" % port if port else "")
    answer = command(path, line, timeout).strip()
    if answer and "changed" not in answer and "no need to change" not in answer:
        raise HaproxyError("HAProxy refused `%s`: %s" % (line, answer))


def wait_for(path: str, backend: str, name: str, done: Callable[[Server], bool], timeout: float, poll_interval: float,
             sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> Tuple[Server, float, bool]:
    """Poll the server until done(server) or timeout seconds; (the last reading, seconds waited, done)."""
    started = clock()
    while True:
        found = servers(path, backend)
        server = (found or {}).get(name)
        if server is None:
            raise HaproxyError("server %s/%s disappeared from HAProxy while waiting" % (backend, name))
        if done(server):
            return server, round(clock() - started, 1), True
        if clock() - started >= timeout:
            return server, round(clock() - started, 1), False
        sleep(poll_interval)


def drained(server: Server) -> bool:
    return bool(server["sessions"] == 0 and server["queued"] == 0)


def others_serving(found: Dict[str, Server], name: str, batch: Set[str]) -> Tuple[List[str], List[str]]:
    """Servers of the backend outside this batch that take new requests; (serving, outside)."""
    outside = sorted(other for other in found if other != name and other not in batch)
    return [other for other in outside if serving(found[other])], outside
