# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""haproxy_server's verdict on a drain (module_utils/haproxy.py last_serving, issue 39), for any backend and batch:
the hosts of one batch drain at once, each reading HAProxy whenever its fork gets there, so the verdict must be the
same for all of them whatever the others did already, and the drains it lets through never leave a backend that
served with no server serving. tests/integration/test_haproxy_last_server.py runs the module against a real HAProxy."""
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.llmops.vllm.plugins.module_utils import haproxy

SERVER = st.fixed_dictionaries({"state": st.sampled_from(haproxy.STATES),
                                "status": st.sampled_from(["UP", "UP 1/2", "DOWN", "DOWN 1/2", "DRAIN", "MAINT", "no check", "unknown"])})
BACKEND = st.dictionaries(st.sampled_from(["a", "b", "c", "d", "e"]), SERVER, min_size=1)


@settings(max_examples=60)
@given(BACKEND, st.data())
def test_issue39_no_batch_drains_the_last_serving_server(found, data):
    names = sorted(found)
    batch = set(data.draw(st.lists(st.sampled_from(names), min_size=1, unique=True)))
    state = data.draw(st.sampled_from(["drain", "maint"]))
    served = any(haproxy.serving(server) for server in found.values())
    backend = dict((name, dict(server, sessions=0, queued=0)) for name, server in found.items())
    # the batch's hosts in any order, each deciding on what HAProxy shows when it gets there
    order = data.draw(st.permutations(sorted(batch)))
    verdicts = {}
    for name in order:
        verdicts[name] = haproxy.last_serving(backend, name, state, batch)
        if verdicts[name] is None:
            backend[name] = dict(backend[name], state=state, status="DRAIN" if state == "drain" else "MAINT")
    outside_serves = any(haproxy.serving(found[name]) for name in names if name not in batch)
    for name in batch:  # a ready server is refused exactly when nothing outside the batch serves, whatever the order
        assert (verdicts[name] is not None) == (found[name]["state"] == "ready" and not outside_serves), (name, verdicts)
    if served:  # what served before still has a server serving: a refused drain changed nothing
        assert any(haproxy.serving(server) for server in backend.values()), (found, batch, verdicts)
    for name, why in verdicts.items():
        if why is not None:
            assert ("every server of it is in this batch" in why) == all(other in batch for other in names), why
            assert name in why


def test_ready_is_never_refused_and_a_server_already_out_is_not_the_last():
    found = {"a": {"state": "ready", "status": "UP"}, "b": {"state": "drain", "status": "DRAIN"}}
    assert haproxy.last_serving(found, "a", "ready", {"a", "b"}) is None
    assert haproxy.last_serving(found, "b", "maint", {"a", "b"}) is None  # b takes no requests already
    assert haproxy.last_serving(found, "a", "drain", {"a"}) == (
        "the servers outside this batch (b drain/DRAIN) are down, drained or in maintenance, and those in it (a) change together")
