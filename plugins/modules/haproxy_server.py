#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function
__metaclass__ = type

DOCUMENTATION = r'''
---
module: haproxy_server
short_description: Drain, enable or disable one server of an HAProxy backend through the runtime API
version_added: "0.1.0"
description:
  - Sets one server of an HAProxy backend to V(ready), V(drain) or V(maint) through HAProxy's runtime API
    (the unix socket of C(stats socket ... level admin)), the load-balancer step of a rollout
    (role C(llmops.vllm.lb), O(state) per step - docs/rollout.md).
  - V(drain) stops new requests to the server and, with O(wait), waits until its current sessions and queue
    reach 0, so that the model behind it can stop without failing a request in flight.
  - V(ready) lets requests in again. With O(wait) it also waits until HAProxy's health checks pass, so that
    the next batch of a fleet rollout drains nothing before this server really serves.
  - Before a drain or maint of a server that is ready, it refuses when no server of the backend outside O(batch)
    takes requests - they are all down, drained or in maintenance, or every server of the backend is in O(batch)
    (a rollout batch of C(serial) 100%) - as the clients would get no answer. Every host of the batch reads the
    same servers outside it, so every one of them refuses, before any sets a state. O(allow_outage) drains anyway,
    with a warning.
options:
  socket:
    description: Path of HAProxy's runtime API socket (C(stats socket <path> mode 600 level admin)).
    type: path
    required: true
  backend:
    description:
      - The backend (one per model served name in the collection's config, C(llmops.vllm.haproxy_identifier) of the
        served name - C(vllm_<served name>) for a name of letters, digits and C(_.:-)).
      - Only HAProxy's name characters (letters, digits and C(_.:-)); any other is refused before HAProxy is
        reached, as the runtime API would read C(;) or a line break as another command.
    type: str
    required: true
  server:
    description:
      - The server in O(backend) (one per host in the collection's config, its inventory name).
      - Only HAProxy's name characters, as O(backend).
    type: str
    required: true
  state:
    description: What HAProxy should do with the server.
    type: str
    choices: [ready, drain, maint]
    required: true
  wait:
    description:
      - V(drain), V(maint) - wait until the server holds no session and no queued request.
      - V(ready) - wait until health checks pass (status UP).
    type: bool
    default: true
  timeout:
    description: Seconds to wait (O(wait)); the module fails after it, saying what it waited for and what it saw.
    type: int
    default: 300
  poll_interval:
    description: Seconds between two readings while waiting.
    type: float
    default: 1.0
  address:
    description:
      - Point the server at this address first (the model moved to another port or address).
      - An IP address; only HAProxy's name characters, as O(backend).
    type: str
  port:
    description: The port with O(address).
    type: int
  batch:
    description:
      - Servers that change with this one (the hosts of this batch of a rollout that drain). Before a drain or
        maint, at least one server outside them must take requests (see the description and O(allow_outage)).
    type: list
    elements: str
    default: []
  allow_outage:
    description:
      - Drain or maint even when no server of the backend outside O(batch) takes requests, with a warning (the
        clients get no answer until a server serves again), instead of refusing. Also in check mode, so that a
        preview says which it would be.
      - The rollout passes C(rollout_allow_outage) (role C(llmops.vllm.rollout)).
    type: bool
    default: false
  missing:
    description:
      - What to do when the backend or the server does not exist in HAProxy's configuration.
      - V(warn) suits a drain before a rollout (nothing is sent to a server that is not there).
    type: str
    choices: [fail, warn]
    default: fail
notes:
  - Check mode reads the server and reports what would change; diff shows the server's state before and after.
  - One runtime API command per connection; the socket needs C(level admin) for C(set server).
author:
  - llmops.vllm maintainers (@llmops)
seealso:
  - module: llmops.vllm.vllm_soak
requirements:
  - HAProxy 2.0 or later with a C(stats socket) at O(socket) on the host the task runs on (delegate it there).
'''

EXAMPLES = r'''
- name: Stop sending requests to this host and wait for its requests in flight
  llmops.vllm.haproxy_server:
    socket: /run/haproxy/admin.sock
    backend: vllm_qwen3
    server: "{{ inventory_hostname }}"
    state: drain
    batch: "{{ ansible_play_batch }}"
    timeout: 120
  delegate_to: lb1

- name: Serve again once the gate passed, and wait until health checks agree
  llmops.vllm.haproxy_server:
    socket: /run/haproxy/admin.sock
    backend: vllm_qwen3
    server: "{{ inventory_hostname }}"
    state: ready
  delegate_to: lb1
'''

RETURN = r'''
before:
  description: The server before the change (V(null) when missing).
  returned: always
  type: dict
  sample: {"state": "ready", "status": "UP", "sessions": 2, "queued": 0, "address": "10.231.0.11", "port": 8000}
  contains:
    state: {description: "V(ready), V(drain) or V(maint) (the admin state).", type: str, returned: always}
    status: {description: "HAProxy's status - UP, DOWN, DRAIN, MAINT, NOLB, C(UP 1/2) while checks change their mind.", type: str, returned: always}
    sessions: {description: Current sessions (requests in flight)., type: int, returned: always}
    queued: {description: Requests queued for the server., type: int, returned: always}
    address: {description: The server's address., type: str, returned: always}
    port: {description: The server's port., type: int, returned: always}
after:
  description: The server at the end (after waiting).
  returned: always
  type: dict
  sample: {"state": "drain", "status": "DRAIN", "sessions": 0, "queued": 0, "address": "10.231.0.11", "port": 8000}
  contains:
    state: {description: "V(ready), V(drain) or V(maint) (the admin state).", type: str, returned: always}
    status: {description: "HAProxy's status - UP, DOWN, DRAIN, MAINT, NOLB, C(UP 1/2) while checks change their mind.", type: str, returned: always}
    sessions: {description: Current sessions (requests in flight)., type: int, returned: always}
    queued: {description: Requests queued for the server., type: int, returned: always}
    address: {description: The server's address., type: str, returned: always}
    port: {description: The server's port., type: int, returned: always}
waited_s:
  description: Seconds spent waiting (O(wait)).
  returned: always
  type: float
  sample: 3.2
serving_elsewhere:
  description: Servers of the backend outside O(batch) that took requests before the change.
  returned: always
  type: list
  elements: str
  sample: ["llmops-2", "llmops-3"]
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.vllm.plugins.module_utils import haproxy


def describe(server):
    if server is None:
        return "missing\n"
    return "state: %s\nstatus: %s\naddress: %s:%s\n" % (server["state"], server["status"], server["address"], server["port"])


def main():
    module = AnsibleModule(
        argument_spec=dict(
            socket=dict(type="path", required=True),
            backend=dict(type="str", required=True),
            server=dict(type="str", required=True),
            state=dict(type="str", required=True, choices=list(haproxy.STATES)),
            wait=dict(type="bool", default=True),
            timeout=dict(type="int", default=300),
            poll_interval=dict(type="float", default=1.0),
            address=dict(type="str"),
            port=dict(type="int"),
            batch=dict(type="list", elements="str", default=[]),
            missing=dict(type="str", default="fail", choices=["fail", "warn"]),
            allow_outage=dict(type="bool", default=False),
        ),
        required_by={"port": "address"},
        supports_check_mode=True,
    )
    p = module.params
    backend, name, state, where = p["backend"], p["server"], p["state"], p["socket"]
    try:
        # the commands this run may send, built before HAProxy is reached: a name the runtime API would split is refused
        haproxy.runtime_command("set server", backend, name, state=state)
        if p["address"]:
            haproxy.runtime_command("set server", backend, name, addr=p["address"], port=p["port"] or None)
    except haproxy.HaproxyError as exc:
        module.fail_json(msg="haproxy_server: %s" % exc, before=None, after=None, waited_s=0.0, serving_elsewhere=[])
    try:
        found = haproxy.servers(where, backend)
    except haproxy.HaproxyError as exc:
        module.fail_json(msg=str(exc))
    before = (found or {}).get(name)
    if before is None:
        what = ("no backend %s" % backend) if found is None else (
            "no server %s in backend %s (it has %s)" % (name, backend, ", ".join(sorted(found)) or "none"))
        msg = ("HAProxy at %s has %s: add it to HAProxy's configuration (playbooks/lb.yml renders one from the inventory)"
               % (where, what))
        if p["missing"] == "fail":
            module.fail_json(msg=msg)
        module.warn(msg + "; nothing to set to %s" % state)
        module.exit_json(changed=False, before=None, after=None, waited_s=0.0, serving_elsewhere=[])

    serving_elsewhere, outside = haproxy.others_serving(found, name, set(p["batch"]))
    outage = haproxy.last_serving(found, name, state, set(p["batch"]))
    if outage and not p["allow_outage"]:
        module.fail_json(msg="Setting %s/%s to %s would leave no server of %s taking requests: %s. Nothing was changed on any "
                             "server of this batch. Roll out in smaller batches (rollout_serial, e.g. 1: the other servers "
                             "serve meanwhile), swap blue/green (vllm_model.swap bluegreen: the host serves on, no drain), or "
                             "accept the outage with rollout_allow_outage: true (allow_outage)." % (backend, name, state, backend, outage),
                         before=before, after=before, waited_s=0.0, serving_elsewhere=[])
    if outage:
        module.warn("%s/%s goes to %s with allow_outage: %s, so its clients get no answer until a server serves again"
                    % (backend, name, state, outage))

    move = bool(p["address"]) and (p["address"] != before["address"] or (p["port"] and p["port"] != before["port"]))
    changed = before["state"] != state or move
    result = dict(changed=changed, before=before, serving_elsewhere=serving_elsewhere,
                  diff=dict(before=describe(before), after=describe(dict(before, state=state, address=p["address"] or before["address"],
                                                                         port=p["port"] or before["port"]))))
    if module.check_mode:
        module.exit_json(after=before, waited_s=0.0, **result)
    try:
        if move:
            haproxy.set_address(where, backend, name, p["address"], p["port"])
        if before["state"] != state:
            haproxy.set_state(where, backend, name, state)
        after, waited, done = haproxy.servers(where, backend)[name], 0.0, True
        if p["wait"]:
            check = haproxy.drained if state != "ready" else haproxy.is_up
            after, waited, done = haproxy.wait_for(where, backend, name, check, p["timeout"], p["poll_interval"])
    except haproxy.HaproxyError as exc:
        module.fail_json(msg=str(exc), **result)
    if not done:
        waited_for = ("its %d sessions and %d queued requests to end" % (after["sessions"], after["queued"])
                      if state != "ready" else "health checks to pass (status %s)" % after["status"])
        module.fail_json(msg="%s/%s is %s, but after %s s HAProxy still waits for %s: raise timeout, or look at the server"
                             % (backend, name, state, waited, waited_for), after=after, waited_s=waited, **result)
    module.exit_json(after=after, waited_s=waited, **result)


if __name__ == "__main__":
    main()
