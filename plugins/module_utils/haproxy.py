# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The HAProxy sinks: its configuration and its runtime API (docs/rollout.md "Load balancer", docs/security.md).

Configuration (role llmops.vllm.lb's templates, through the filters of plugins/filter/lb.py): every value
passes one of ``haproxy_identifier`` (a name HAProxy declares: backend, frontend, server, ACL),
``haproxy_quote`` (any other argument) or ``haproxy_address`` (a server's or a bind's host:port). Each refuses
control characters: HAProxy reads a line break as the end of a configuration line, so a served model name
holding one could add lines or sections of its own (issue 38).

Runtime API (the stats socket, ``stats socket ... level admin``), for the load-balancer steps of a rollout:
read a server's state and sessions, set it ready, drain or maint, wait until it is drained or up. Every
command is built by ``runtime_command``, which takes only HAProxy's name characters in a backend, server or
argument: the API reads ``;`` and a line break as the start of another command. One command per connection
(the socket's non-interactive mode answers and closes). The module haproxy_server is the only caller.

Target side: Python standard library only.
"""
from __future__ import absolute_import, division, print_function

import hashlib
import ipaddress
import re
import socket
import time
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from ansible_collections.llmops.vllm.plugins.module_utils.systemd_unit import CONTROL_RE

Server = Dict[str, Any]

# srv_admin_state bits of `show servers state` (HAProxy's include/haproxy/server-t.h, SRV_ADMF_*)
ADMIN_FORCED_MAINT, ADMIN_INHERITED_MAINT, ADMIN_CONFIG_MAINT, ADMIN_FORCED_DRAIN = 0x01, 0x02, 0x04, 0x08
ADMIN_INHERITED_DRAIN, ADMIN_RESOLVER_MAINT, ADMIN_HOSTNAME_MAINT = 0x10, 0x20, 0x40
STATES = ("ready", "drain", "maint")


class HaproxyError(Exception):
    pass


class HaproxyValueError(HaproxyError, ValueError):
    """A value the configuration or the runtime API cannot carry; raised before anything is written or sent."""


# ----------------------------------------------------------------------------- configuration

# The characters HAProxy takes in a name (a proxy, a server, an ACL: its invalid_char() - letters, digits, _ . : -);
# the runtime API's words are held to the same set.
NAME_CHARS = "letters, digits and _ . : -"
NAME_RE = re.compile(r"\A[A-Za-z0-9_.:-]+\Z")
NOT_NAME_RE = re.compile(r"[^A-Za-z0-9_.:-]")
# A word HAProxy reads as itself unquoted (no space, quote, backslash, '#' or '$'); any other is double-quoted.
BARE_RE = re.compile(r"\A[A-Za-z0-9_.:/@+,=*-]+\Z")
# How much of a sanitized name stays readable in its identifier (a hash of the exact name follows).
READABLE_MAX = 64
HOSTNAME_RE = re.compile(r"\A(?=.{1,253}\Z)[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
                         r"(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?\Z")


def config_text(value: object, what: str) -> str:
    """``value`` as one line of HAProxy configuration text, or HaproxyValueError naming ``what`` and the value."""
    text = str(value)
    found = CONTROL_RE.search(text)
    if found:
        raise HaproxyValueError(
            "%s %r holds a control character (%r at position %d): HAProxy reads a line break as the end of a "
            "configuration line, so what follows would become configuration of its own. Remove it (nothing was written)"
            % (what, text[:200], found.group(), found.start()))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise HaproxyValueError("%s %r is not valid Unicode text (%s); give it as UTF-8 text" % (what, text[:200], exc.reason))
    if not text:
        raise HaproxyValueError("%s is empty: HAProxy reads an empty argument as the end of the line; give a value" % what)
    return text


def haproxy_identifier(name: object, prefix: str = "vllm_", what: str = "the name") -> str:
    """The HAProxy name (backend, frontend, server, ACL) of ``name``: ``prefix`` + the name itself when it holds
    only HAProxy's name characters (``chat`` -> ``vllm_chat``, as before issue 38); otherwise ``prefix`` + the name
    with every other character as ``_`` (its first 64) + ``_`` + 8 hex digits of the SHA-256 of the exact name
    (``org/chat`` -> ``vllm_org_chat_1c3e...``), so that ``org/chat`` and ``org_chat`` get two backends."""
    text = config_text(name, what)
    if prefix and not NAME_RE.match(prefix):
        raise HaproxyValueError("haproxy_identifier: the prefix %r holds characters HAProxy takes in no name (only %s)"
                                % (prefix, NAME_CHARS))
    readable = NOT_NAME_RE.sub("_", text)
    if readable == text:
        return prefix + text
    return "%s%s_%s" % (prefix, readable[:READABLE_MAX], hashlib.sha256(text.encode("utf-8")).hexdigest()[:8])


def haproxy_quote(value: object, what: str = "the value") -> str:
    """``value`` as exactly one argument of an HAProxy configuration line, which HAProxy reads back as ``value``:
    bare when it holds only [A-Za-z0-9_.:/@+,=*-], else in double quotes, with a backslash before each backslash,
    double quote and dollar (HAProxy's configuration manual, "Quoting and escaping": inside double quotes a backslash
    escapes, "$" expands an environment variable, and a space, "#" or "'" are plain characters). Control characters
    and the empty string are refused."""
    text = config_text(value, what)
    if BARE_RE.match(text):
        return text
    return '"%s"' % text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")


def haproxy_address(host: object, port: object = None, hostname: bool = True) -> str:
    """``host:port`` for a server or a bind line (``[v6]:port`` for IPv6), ``host`` alone without ``port``. The host is
    an IP address or, with ``hostname``, a DNS host name (HAProxy resolves it when it starts). An IPv6 zone id
    (``fe80::1%eth0``) is refused: HAProxy takes none (measured with 2.6: ``invalid address`` on a bind, ``could not
    resolve address`` on a server)."""
    text = config_text(host, "the address")
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if "%" in text:
        raise HaproxyValueError("the address %r carries an IPv6 zone id (%s): HAProxy cannot bind or connect to it; give "
                                "a global or unique-local address of the host" % (text, text.split("%", 1)[1]))
    version = 0  # a host name
    try:
        version = ipaddress.ip_address(text).version
    except ValueError:
        if not hostname or not HOSTNAME_RE.match(text):
            raise HaproxyValueError("the address %r is not an IP address%s" % (text, " or a host name" if hostname else ""))
    rendered = "[%s]" % text if version == 6 else text
    if port is None:
        return rendered
    try:
        number = int(str(port))
    except ValueError:
        number = 0
    if not 1 <= number <= 65535:
        raise HaproxyValueError("the port %r of %s is not a TCP port number 1-65535" % (port, text))
    return "%s:%d" % (rendered, number)


# ----------------------------------------------------------------------------- runtime API

RUNTIME_VERBS = ("show stat", "show servers state", "set server")
RUNTIME_OPTIONS = {"state": "state", "addr": "address", "port": "port"}


def runtime_word(value: object, what: str) -> str:
    """A backend, server or argument of a runtime API command: one word of HAProxy's name characters."""
    text = str(value)
    if not NAME_RE.match(text):
        bad = NOT_NAME_RE.search(text)
        problem = "is empty" if not text else "holds %r at position %d" % (bad.group() if bad else "", bad.start() if bad else 0)
        raise HaproxyValueError(
            "%s %r %s: HAProxy's runtime API reads ';' and a line break as the start of another command and a space as "
            "the next word, so a %s takes only %s (HAProxy's name characters). Nothing was sent to HAProxy; give the "
            "name as its configuration spells it (llmops.vllm.haproxy_identifier maps a served model name to its backend)"
            % (what, text[:200], problem, what, NAME_CHARS))
    return text


def runtime_command(verb: str, backend: Optional[object] = None, server: Optional[object] = None, **options: object) -> str:
    """One runtime API command line: ``verb [backend[/server]] [state S] [addr A] [port P]`` (options in the order
    given, None left out). Every word is checked by runtime_word, so the line is one command."""
    if verb not in RUNTIME_VERBS:
        raise HaproxyValueError("runtime_command: %r is not one of %s" % (verb, ", ".join(RUNTIME_VERBS)))
    words = [verb]
    if backend is not None:
        target = runtime_word(backend, "backend")
        if server is not None:
            target += "/" + runtime_word(server, "server")
        words.append(target)
    for key, value in options.items():
        if key not in RUNTIME_OPTIONS:
            raise HaproxyValueError("runtime_command: unknown option %r (known: %s)" % (key, ", ".join(RUNTIME_OPTIONS)))
        if value is not None:
            words += [key, runtime_word(value, RUNTIME_OPTIONS[key])]
    return " ".join(words)


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
    state_text = command(path, runtime_command("show servers state", backend), timeout)
    if "Can't find backend" in state_text or "No such backend" in state_text:
        return None
    rows = parse_servers_state(state_text)
    stats = {row["svname"]: row for row in parse_stat(command(path, runtime_command("show stat"), timeout)) if row.get("pxname") == backend}
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
    line = runtime_command("set server", backend, name, state=state)
    answer = command(path, line, timeout).strip()
    if answer:
        raise HaproxyError("HAProxy refused `%s`: %s" % (line, answer))


def set_address(path: str, backend: str, name: str, address: str, port: Optional[int], timeout: float = 10.0) -> None:
    line = runtime_command("set server", backend, name, addr=address, port=port or None)
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


def last_serving(found: Dict[str, Server], name: str, state: str, batch: Set[str]) -> Optional[str]:
    """Why setting ``name`` to ``state`` (drain, maint) would leave its backend with no server taking requests - it is
    ready and no server outside ``batch`` (the servers that change with it) serves; None when another serves, for
    ``ready``, or when ``name`` takes no requests already. The answer reads only the servers outside the batch and
    ``name`` itself, so every host of one batch reaches the same answer whichever of them drains first."""
    if state == "ready" or found[name]["state"] != "ready":
        return None
    serving_elsewhere, outside = others_serving(found, name, batch)
    if serving_elsewhere:
        return None
    in_batch = sorted(other for other in found if other in batch or other == name)
    if not outside:
        return "every server of it is in this batch (%s)" % ", ".join(in_batch)
    return "the servers outside this batch (%s) are down, drained or in maintenance, and those in it (%s) change together" % (
        ", ".join("%s %s/%s" % (other, found[other]["state"], found[other]["status"]) for other in outside), ", ".join(in_batch))
