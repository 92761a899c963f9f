# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a fleet load balancer serves, from the inventory (role llmops.vllm.lb): one backend per served model
name, one server per host that serves it. The rollout's drain and enable steps and the rendered HAProxy
configuration take their names from here, so they always agree.

The HAProxy sink filters (module_utils/haproxy.py): every expression of the role's *.cfg.j2 templates ends in
one of haproxy_identifier (names HAProxy declares), haproxy_quote (any other argument) and haproxy_address
(host:port)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json
from typing import Any, Callable, Dict, List, Mapping, Sequence

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.vllm.plugins.module_utils.haproxy import haproxy_address, haproxy_identifier, haproxy_quote


def lb_models_entry(served_model_name: str) -> str:
    """What vLLM's GET /v1/models answer holds for a served model name: ``"id":`` and the name as JSON the way
    Starlette writes it (UTF-8, not \\u-escaped, no space after the colon) - the health check's expected string."""
    return '"id":' + json.dumps(str(served_model_name), ensure_ascii=False)


def host_models(hostvars: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """The models a host's inventory desires (vllm_models, else vllm_model)."""
    models = hostvars.get("vllm_models")
    if models is None:
        models = [hostvars["vllm_model"]] if hostvars.get("vllm_model") else []
    return list(models)


def lb_address(hostvars: Mapping[str, Any], host: str) -> str:
    """Where the load balancer (and a soak's baseline) reaches a host: its lb_address, else ansible_host, else its
    inventory name; ``hostvars`` are that host's own variables."""
    return str(hostvars.get("lb_address") or hostvars.get("ansible_host") or host)


def lb_services(hostvars: Mapping[str, Mapping[str, Any]], hosts: Sequence[str]) -> List[Dict[str, Any]]:
    """[{name (served model name), backend, servers: [{name (host), address, port}]}], sorted by name.

    A host's address: its lb_address, else ansible_host, else its inventory name. A worker of a multi-node
    group serves no API and is left out (only the group's head, group[0], is a server)."""
    services: Dict[str, List[Dict[str, Any]]] = {}
    for host in hosts:
        hv = hostvars[host]
        address = lb_address(hv, host)
        for model in host_models(hv):
            group = model.get("group") or []
            if group and group[0] != host:
                continue
            served = model.get("served_model_name") or model["name"]
            services.setdefault(served, []).append({"name": host, "address": address, "port": int(model.get("port") or 8000)})
    backends: Dict[str, str] = {}
    for name in services:
        backend = haproxy_identifier(name)
        other = backends.setdefault(backend, name)
        if other != name:
            # only a name spelled like another's identifier gets here (org_chat_<its hash> beside org/chat)
            raise AnsibleFilterError("lb_services: the served model names %r and %r both map to HAProxy backend %s; "
                                     "rename one of them" % (other, name, backend))
    return [{"name": name, "backend": haproxy_identifier(name), "servers": servers} for name, servers in sorted(services.items())]


def proxy_seats(models: Mapping[str, Mapping[str, Any]], without: Sequence[str] = (), seat: Any = None) -> List[Dict[str, Any]]:
    """The host proxy's stable ports (role llmops.vllm.lb, tasks/host_proxy.yml), sorted by port: one per model of
    the host state (``models``: name -> entry) that serves behind it (has ``stable_port``), except those named in
    ``without``, then ``seat`` ({port, bind, slots, active}; None: none), which takes its port's place."""
    seats: Dict[int, Dict[str, Any]] = {}
    for name, entry in sorted((models or {}).items()):
        if name in without or not entry.get("stable_port"):
            continue
        port = int(entry["stable_port"])
        seats[port] = {"port": port, "bind": entry["bind"], "slots": [int(p) for p in entry.get("slot_ports") or []],
                       "active": int(entry["port"])}
    if seat:
        if not seat.get("port") or len(seat.get("slots") or []) != 2 or int(seat.get("active") or 0) not in [int(p) for p in seat["slots"]]:
            raise AnsibleFilterError("proxy_seats: a seat needs port, bind, two slots and the active one among them, got %r" % (seat,))
        seats[int(seat["port"])] = {"port": int(seat["port"]), "bind": seat["bind"], "slots": [int(p) for p in seat["slots"]],
                                    "active": int(seat["active"])}
    return [seats[port] for port in sorted(seats)]


class FilterModule(object):
    def filters(self) -> Dict[str, Callable[..., Any]]:
        return {"lb_address": lb_address, "lb_services": lb_services, "lb_models_entry": lb_models_entry,
                "proxy_seats": proxy_seats, "haproxy_identifier": haproxy_identifier, "haproxy_quote": haproxy_quote,
                "haproxy_address": haproxy_address}
