# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The HAProxy sinks in plain Python (module_utils/haproxy.py; issue 38): names, quoting, addresses and runtime API
commands, with generated inputs. ``split_line`` reads a configuration line the way HAProxy's configuration manual
("Quoting and escaping", "Environment variables") says HAProxy does, strictly: an unescaped ``$`` inside double
quotes (an environment variable) or an unknown escape is an error here, so an output that only happens to survive
cannot pass. tests/integration/test_haproxy_sink.py checks the same functions against the real HAProxy."""

import hashlib
import re

import pytest
from ansible.errors import AnsibleFilterError
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ansible_collections.llmops.vllm.plugins.filter.lb import lb_models_entry, lb_services
from ansible_collections.llmops.vllm.plugins.module_utils.haproxy import (HaproxyValueError, haproxy_address, haproxy_identifier,
                                                                          haproxy_quote, runtime_command)

NAME = re.compile(r"\A[A-Za-z0-9_.:-]+\Z")
# C0 and C1 controls, DEL and the Unicode line and paragraph separators: what the sinks refuse
CONTROLS = [chr(c) for c in list(range(0x00, 0x20)) + list(range(0x7F, 0xA0))] + ["\u2028", "\u2029"]
# Text the sinks accept: anything printable, weighted towards what HAProxy's parser or runtime API reads specially
SPECIAL = list("\"'\\$#; /{}!%_-.:@*") + ["${HOME}", "\\x41", "\\n", " -i", "é", "中", "\U0001F600"]
ACCEPTED = st.lists(st.one_of(st.sampled_from(SPECIAL), st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp"))),
                    min_size=1, max_size=10).map("".join)
ANY_TEXT = st.lists(st.one_of(st.sampled_from(SPECIAL + CONTROLS), st.characters(blacklist_categories=("Cs",))),
                    max_size=10).map("".join)
_ESCAPES = {" ": " ", "#": "#", "\\": "\\", "'": "'", '"': '"', "$": "$", "n": "\n", "r": "\r", "t": "\t"}


class HaproxySyntaxError(ValueError):
    """HAProxy would expand, refuse or split the line differently from what was meant."""


def split_line(line):
    """The words of one HAProxy configuration line (manual section 2.2): a backslash escapes, double quotes keep
    spaces, '#' and "'" (and expand $VAR, an error here), single quotes keep everything, '#' outside them starts a
    comment."""
    words, word, quote, position, in_word = [], [], None, 0, False
    while position < len(line):
        char = line[position]
        if char == "\\" and quote != "'":
            escaped = line[position + 1:position + 2]
            if escaped == "x" and re.match(r"[0-9A-Fa-f]{2}", line[position + 2:position + 4]):
                word.append(chr(int(line[position + 2:position + 4], 16)))
                position += 4
            elif escaped in _ESCAPES and (escaped != "$" or quote == '"'):
                word.append(_ESCAPES[escaped])
                position += 2
            else:
                raise HaproxySyntaxError("unknown escape \\%s in %r" % (escaped, line))
            in_word = True
            continue
        if quote:
            if char == quote:
                quote = None
            elif char == "$" and quote == '"':
                raise HaproxySyntaxError("an environment variable would be expanded in %r" % line)
            else:
                word.append(char)
        elif char in "\"'":
            quote, in_word = char, True
        elif char in " \t":
            if in_word:
                words.append("".join(word))
            word, in_word = [], False
        elif char == "#":
            break
        else:
            word.append(char)
            in_word = True
        position += 1
    if quote:
        raise HaproxySyntaxError("unterminated quote in %r" % line)
    if in_word:
        words.append("".join(word))
    return words


def test_split_line_reads_the_manuals_examples():
    assert split_line('log-format "%{+Q}o %t"\' %s\'\\ %{-Q}r') == ["log-format", "%{+Q}o %t %s %{-Q}r"]
    assert split_line('reqrep "^([^ :]*)\\ /static/(.*)" \'\\1 /\\2\' # comment') == ["reqrep", "^([^ :]*) /static/(.*)", "\\1 /\\2"]
    with pytest.raises(HaproxySyntaxError):
        split_line('bind "fd@${FD_APP1}"')
    with pytest.raises(HaproxySyntaxError):
        split_line('x "\\q"')


def test_identifier_keeps_the_backend_names_of_running_fleets():
    # names that were already safe keep their backend (the running fleet's drain steps find it)
    assert haproxy_identifier("tiny-chat") == "vllm_tiny-chat"
    assert haproxy_identifier("org_chat") == "vllm_org_chat"
    assert haproxy_identifier("seat_8000") == "vllm_seat_8000"
    assert haproxy_identifier("slot_18000", "") == "slot_18000"
    digest = hashlib.sha256(b"org/chat").hexdigest()[:8]
    assert haproxy_identifier("org/chat") == "vllm_org_chat_" + digest
    assert haproxy_identifier("meta-llama/Llama 3").startswith("vllm_meta-llama_Llama_3_")
    assert len(haproxy_identifier("x/" * 200)) == len("vllm_") + 64 + 9
    with pytest.raises(HaproxyValueError, match="empty"):
        haproxy_identifier("")
    with pytest.raises(HaproxyValueError, match="prefix"):
        haproxy_identifier("chat", "a b")


@settings(max_examples=60)
@given(st.lists(ACCEPTED, min_size=1, max_size=6, unique=True))
@example(["org/chat", "org_chat", "org chat", "org\\chat", "org$chat"])
@example(['chat"v2', "chat'v2", "chat v2", "-i", "}", "if", "é", "e"])
def test_identifiers_are_names_and_distinct(names):
    identifiers = [haproxy_identifier(name) for name in names]
    assert all(NAME.match(identifier) and identifier.startswith("vllm_") for identifier in identifiers)
    assert len(set(identifiers)) == len(names), dict(zip(names, identifiers, strict=True))
    for name, identifier in zip(names, identifiers, strict=True):
        assert (identifier == "vllm_" + name) == bool(NAME.match(name))


@settings(max_examples=60)
@given(ACCEPTED, st.sampled_from(CONTROLS), st.data())
def test_control_characters_are_refused_naming_the_value(text, control, data):
    position = data.draw(st.integers(0, len(text)))
    bad = text[:position] + control + text[position:]
    for sink in (haproxy_identifier, haproxy_quote, haproxy_address):
        with pytest.raises(HaproxyValueError, match="control character") as refused:
            sink(bad)
        assert repr(bad[:200]) in str(refused.value)


@settings(max_examples=60)
@given(ACCEPTED)
@example("$HOME")
@example("a\\")
@example('"')
@example("#x")
@example("\\x41")
def test_quote_is_one_word_read_back_as_itself(text):
    quoted = haproxy_quote(text)
    assert split_line("http-request set-header X-T %s if TRUE" % quoted) == ["http-request", "set-header", "X-T", text, "if", "TRUE"]
    assert "\n" not in quoted and "\r" not in quoted


def test_models_entry_is_vllms_json():
    assert lb_models_entry("chat") == '"id":"chat"'
    assert lb_models_entry('chat"v2\\') == '"id":"chat\\"v2\\\\"'
    assert lb_models_entry("é/中") == '"id":"é/中"'


def test_addresses():
    assert haproxy_address("10.0.0.1", 8000) == "10.0.0.1:8000"
    assert haproxy_address("::1", "8000") == "[::1]:8000"
    assert haproxy_address("[::1]", 80) == "[::1]:80"
    assert haproxy_address("gpu-1.example.com", 8000) == "gpu-1.example.com:8000"
    assert haproxy_address("::") == "[::]"
    for bad, message in [("fe80::1%eth0", "zone id"), ("[fe80::1%2]", "zone id"), ("a b", "not an IP address or a host name"),
                         ("a;b", "not an IP address"), ("-x", "not an IP")]:
        with pytest.raises(HaproxyValueError, match=message):
            haproxy_address(bad, 8000)
    with pytest.raises(HaproxyValueError, match="not an IP address"):
        haproxy_address("gpu-1", 8000, hostname=False)
    for port in (0, 65536, "80 x", "x"):
        with pytest.raises(HaproxyValueError, match="TCP port"):
            haproxy_address("10.0.0.1", port)


def test_lb_services_refuses_two_names_with_one_backend():
    crafted = haproxy_identifier("org/chat")[len("vllm_"):]
    hostvars = {"h1": {"vllm_model": {"name": "org/chat"}}, "h2": {"vllm_model": {"name": crafted}}}
    with pytest.raises(AnsibleFilterError, match="both map to HAProxy backend"):
        lb_services(hostvars, ["h1", "h2"])


@settings(max_examples=80)
@given(ANY_TEXT, ANY_TEXT, st.sampled_from(["ready", "drain", "maint", "x;y"]), st.one_of(st.none(), ANY_TEXT))
@example("a;set server a/b state maint", "b", "ready", None)
@example("a", "b\nset server a/c state maint", "ready", None)
@example("a", "b", "ready", "10.0.0.1;shutdown sessions server a/b")
def test_runtime_command_is_one_command(backend, server, state, address):
    try:
        line = runtime_command("set server", backend, server, state=state, addr=address)
    except HaproxyValueError as exc:
        assert any(not NAME.match(value) for value in (backend, server, state, address) if value is not None)
        assert re.match(r"(backend|server|state|address) ", str(exc)) and "Nothing was sent" in str(exc)
        return
    expected = ["set", "server", "%s/%s" % (backend, server), "state", state] + (["addr", address] if address is not None else [])
    assert line.split(" ") == expected
    assert ";" not in line and not any(char in line for char in CONTROLS)


def test_runtime_command_names_the_refused_argument():
    with pytest.raises(HaproxyValueError, match=r"^backend 'a;set server x/y state maint' holds ';' at position 1"):
        runtime_command("show servers state", "a;set server x/y state maint")
    with pytest.raises(HaproxyValueError, match="^server '' is empty"):
        runtime_command("set server", "b", "", state="ready")
    with pytest.raises(HaproxyValueError, match="not one of"):
        runtime_command("shutdown sessions")
    assert runtime_command("show stat") == "show stat"
    assert runtime_command("set server", "vllm_chat", "h1", addr="::1", port=8001) == "set server vllm_chat/h1 addr ::1 port 8001"
