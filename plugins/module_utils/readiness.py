# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Is a vLLM server really serving? The stages of the readiness gate, as plain functions.

/health only says the process is alive; a model is ready when /v1/models lists the served name and
a real completion comes back (and a chat completion when the model has a chat template, and a
request with tools when a tool parser is configured). Each stage is timed. The HTTP client and
the clock are injected so the stage logic is tested without a server; the module passes urllib.

While it waits, the gate can describe itself after every attempt (progress_document, written 0600
by write_progress): what it waits for, seconds, attempts, the last answer and the unit's state,
with a one-line summary the serve role prints on each poll.

Target side: Python standard library and Ansible's own module_utils (open_url) only.
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, cast

from ansible.module_utils.six.moves.urllib.error import HTTPError, URLError
from ansible.module_utils.urls import open_url

from ansible_collections.llmops.vllm.plugins.module_utils import host_state

# A tool any chat template can render; the random sandbox models will not call it, the gate only
# checks that vLLM accepts a tools request (parser configured, template handles `tools`).
# http(url, payload or None, api_key or None) -> (status, parsed JSON body or its text): http_json's shape.
Http = Callable[[str, Optional[Dict[str, Any]], Optional[str]], Tuple[int, Any]]
# report(phase, stage, attempts, elapsed seconds, last answer or error): wait_ready's progress hook.
Report = Callable[[str, str, int, float, Optional[str]], None]

PROGRESS_PHASES = ("waiting", "ready", "failed")
PROGRESS_FILE_MODE = 0o600
# The summary is one line of a play's output: the last answer is cut to this many characters.
SUMMARY_LAST_CHARS = 200

PROBE_TOOL: Dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current time in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


# Probes that prove the configured parsers run (stages tool_parser and reasoning_parser). A tools
# request that is merely accepted proves nothing, and a named or `required` tool_choice is answered
# without the parser. So the probe asks with tool_choice auto and forces the output, with a
# structured-output regex, into the format the MODEL writes (read from its chat template): even a
# random-weight model then "calls" the tool, and only a parser that reads that format turns the text
# into tool_calls - a valid but wrong parser (pythonic for a hermes-format model) fails.
# chat_template_kwargs enable_thinking=false closes the think block in the prompt (templates without
# it ignore the key), so a reasoning parser does not hold the grammar back.
PROBE_CALL: Dict[str, Any] = {"name": "get_time", "arguments": {"city": "Paris"}}
PROBE_ARGUMENTS_JSON = json.dumps(PROBE_CALL["arguments"])
# Tool-call format -> the exact text a model of that format writes for PROBE_CALL.
TOOL_CALL_FORMATS: Dict[str, str] = {
    "hermes": '<tool_call>\n{"name": "get_time", "arguments": %s}\n</tool_call>' % PROBE_ARGUMENTS_JSON,
    "llama3_json": '{"name": "get_time", "parameters": %s}' % PROBE_ARGUMENTS_JSON,
    "pythonic": '[get_time(city="Paris")]',
}
# Parsers whose own format is one of those (for a model whose template names no format).
PARSER_TOOL_FORMATS: Dict[str, str] = {"hermes": "hermes", "llama3_json": "llama3_json", "pythonic": "pythonic"}
# What in a chat template tells the format its model was trained to write, checked in this order.
TEMPLATE_TOOL_MARKERS = (("<tool_call>", "hermes"), ("<|python_tag|>", "llama3_json"), ('"parameters"', "llama3_json"))
# Reasoning: the model's answer must come back with the think block split off into reasoning. While
# a reasoning parser is active, vLLM applies structured outputs only after the think block ends, so
# that output cannot be forced: the probe reads what the model writes on its own (the sandbox's
# tiny-qwen3-chat is built to answer <think>Greeting</think>Hello.; sandbox/models.py).
THINK_PARSERS = ("qwen3", "deepseek_r1")


def read_chat_template(model_path: Optional[str]) -> Optional[str]:
    """The model's chat template text (chat_template.jinja, else tokenizer_config.json), or None."""
    if not model_path or not os.path.isdir(model_path):
        return None
    try:
        with open(os.path.join(model_path, "chat_template.jinja")) as handle:
            return handle.read()
    except OSError:
        pass
    try:
        with open(os.path.join(model_path, "tokenizer_config.json")) as handle:
            template = json.load(handle).get("chat_template")
    except (OSError, ValueError):
        return None
    if isinstance(template, list):  # [{"name": "default", "template": "..."}, ...]
        template = next((t.get("template") for t in template if isinstance(t, dict)), None)
    return template if isinstance(template, str) else None


def template_tool_format(template: Optional[str]) -> Optional[str]:
    """The tool-call format a chat template writes (a key of TOOL_CALL_FORMATS), or None."""
    for marker, name in TEMPLATE_TOOL_MARKERS:
        if template and marker in template:
            return name
    return None


class NotReady(Exception):
    """A stage did not pass (yet); the message is what the last attempt saw."""


class ProbeFailed(Exception):
    """The server answered a parser probe, and the answer proves the parser wrong: retrying will
    not change a deterministic answer, so the gate fails at once."""


class ServerGone(Exception):
    """The unit stopped or restarted while we waited: waiting longer will not help."""


def http_json(url: str, payload: Optional[Dict[str, Any]] = None, api_key: Optional[str] = None,
              timeout: float = 30.0) -> Tuple[int, Any]:
    """GET (payload None) or POST JSON; returns (status, parsed body or text)."""
    data = json.dumps(payload).encode("utf-8") if payload is not None else None
    headers: Dict[str, str] = {"Content-Type": "application/json"} if data is not None else {}
    if api_key:
        headers["Authorization"] = "Bearer %s" % api_key
    try:
        response = open_url(url, data=data, headers=headers, method="POST" if data is not None else "GET",
                            timeout=timeout, use_proxy=False)
        status, body = response.status, response.read()
    except HTTPError as exc:
        status, body = exc.code, exc.read()
    except (URLError, OSError) as exc:
        raise NotReady("%s: %s" % (url, getattr(exc, "reason", exc)))
    text = body.decode("utf-8", "replace")
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def has_chat_template(model_path: Optional[str]) -> Optional[bool]:
    """Whether the model directory ships a chat template (tokenizer_config.json or a .jinja file)."""
    if not model_path or not os.path.isdir(model_path):
        return None
    for name in ("chat_template.jinja", "chat_template.json"):
        if os.path.exists(os.path.join(model_path, name)):
            return True
    try:
        with open(os.path.join(model_path, "tokenizer_config.json")) as handle:
            return bool(json.load(handle).get("chat_template"))
    except (OSError, ValueError):
        return False


def _error_text(body: Any) -> str:
    if isinstance(body, dict):
        error = body.get("error") or body.get("message") or body
        if isinstance(error, dict):
            error = error.get("message") or error
        return str(error)[:500]
    return str(body)[:500]


def check_health(base: str, http: Http, api_key: Optional[str]) -> Dict[str, Any]:
    status, body = http(base + "/health", None, api_key)
    if status != 200:
        raise NotReady("/health answered %s: %s" % (status, _error_text(body)))
    return {}


def check_models(base: str, http: Http, api_key: Optional[str], served_model_name: str) -> Dict[str, Any]:
    status, body = http(base + "/v1/models", None, api_key)
    if status != 200 or not isinstance(body, dict):
        raise NotReady("/v1/models answered %s: %s" % (status, _error_text(body)))
    names = [m.get("id") for m in body.get("data") or []]
    if served_model_name not in names:
        raise NotReady("/v1/models lists %s, not %r" % (names, served_model_name))
    return {"models": names}


def check_completion(base: str, http: Http, api_key: Optional[str], served_model_name: str, prompt: str,
                     max_tokens: int) -> Dict[str, Any]:
    payload = {"model": served_model_name, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    status, body = http(base + "/v1/completions", payload, api_key)
    if status != 200 or not isinstance(body, dict) or not body.get("choices"):
        raise NotReady("/v1/completions answered %s: %s" % (status, _error_text(body)))
    usage = body.get("usage") or {}
    if not usage.get("completion_tokens"):
        raise NotReady("/v1/completions produced no tokens: %s" % _error_text(body))
    return {"completion_text": body["choices"][0].get("text"), "completion_tokens": usage.get("completion_tokens")}


def check_chat(base: str, http: Http, api_key: Optional[str], served_model_name: str, prompt: str, max_tokens: int,
               tools: bool = False) -> Dict[str, Any]:
    payload: Dict[str, Any] = {"model": served_model_name, "messages": [{"role": "user", "content": prompt}],
                               "max_tokens": max_tokens, "temperature": 0}
    if tools:
        payload["tools"] = [PROBE_TOOL]
        payload["tool_choice"] = "auto"
    path = "/v1/chat/completions"
    status, body = http(base + path, payload, api_key)
    what = "chat completion with tools" if tools else "chat completion"
    if status != 200 or not isinstance(body, dict) or not body.get("choices"):
        raise NotReady("%s answered %s: %s" % (what, status, _error_text(body)))
    message = body["choices"][0].get("message") or {}
    if message.get("role") != "assistant":
        raise NotReady("%s returned no assistant message: %s" % (what, _error_text(body)))
    return {"finish_reason": body["choices"][0].get("finish_reason")}


def probe_regex(text: str) -> str:
    """A regular expression that matches exactly ``text`` (what structured outputs force).

    Only the metacharacters are escaped, and a newline is written ``\\n``: the grammar backends
    (xgrammar, guidance, outlines) do not all accept Python's escaped spaces and newlines."""
    return "".join("\\" + char if char in "\\.^$*+?()[]{}|/" else "\\n" if char == "\n" else char
                   for char in text)


def _probe_payload(served_model_name: str, prompt: str) -> Dict[str, Any]:
    return {"model": served_model_name, "messages": [{"role": "user", "content": prompt}],
            "max_tokens": 64, "temperature": 0}


def _probe_message(base: str, http: Http, api_key: Optional[str], payload: Dict[str, Any], what: str) -> Dict[str, Any]:
    status, body = http(base + "/v1/chat/completions", payload, api_key)
    if 400 <= status < 500:
        raise ProbeFailed("%s: the server refused the probe (%s): %s" % (what, status, _error_text(body)))
    if status != 200 or not isinstance(body, dict) or not body.get("choices"):
        raise NotReady("%s answered %s: %s" % (what, status, _error_text(body)))
    return body["choices"][0].get("message") or {}


def check_tool_parser(base: str, http: Http, api_key: Optional[str], served_model_name: str, prompt: str,
                      parser: str, tool_format: str) -> Dict[str, Any]:
    """Output forced into ``tool_format`` (the model's) must come back as the parsed call, with valid JSON arguments."""
    text = TOOL_CALL_FORMATS[tool_format]
    payload = _probe_payload(served_model_name, prompt)
    payload.update({"tools": [PROBE_TOOL], "tool_choice": "auto", "structured_outputs": {"regex": probe_regex(text)},
                    "chat_template_kwargs": {"enable_thinking": False}})
    what = "tool-call parser %s" % parser
    message = _probe_message(base, http, api_key, payload, what)
    calls = message.get("tool_calls") or []
    if not calls:
        raise ProbeFailed("%s: output in the model's %s format came back without tool_calls (content %r): the "
                          "server's --tool-call-parser does not read this model's format"
                          % (what, tool_format, message.get("content")))
    function = calls[0].get("function") or {}
    try:
        arguments = json.loads(function.get("arguments") or "")
    except ValueError:
        raise ProbeFailed("%s: tool_calls[0].function.arguments is not JSON: %r" % (what, function.get("arguments")))
    if function.get("name") != PROBE_CALL["name"] or arguments != PROBE_CALL["arguments"]:
        raise ProbeFailed("%s: parsed %s(%s), expected %s(%s)" % (what, function.get("name"), json.dumps(arguments),
                                                                  PROBE_CALL["name"], PROBE_ARGUMENTS_JSON))
    return {"tool_parser_probe": {"parser": parser, "format": tool_format, "output": text, "tool_calls": len(calls)}}


def check_reasoning_parser(base: str, http: Http, api_key: Optional[str], served_model_name: str, prompt: str,
                           parser: str) -> Dict[str, Any]:
    """What the model writes in the think-tag format must come back with the reasoning split from the content."""
    what = "reasoning parser %s" % parser
    message = _probe_message(base, http, api_key, _probe_payload(served_model_name, prompt), what)
    # vLLM names the field reasoning_content, and reasoning in newer releases.
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    content = message.get("content")
    if not (reasoning or "").strip() or "</think>" in (content or "") or "<think>" in (reasoning or ""):
        raise ProbeFailed("%s: the model's answer came back as reasoning %r and content %r: the think block was not "
                          "split off; the server's --reasoning-parser does not read this model's format"
                          % (what, reasoning, content))
    return {"reasoning_parser_probe": {"parser": parser, "reasoning": reasoning, "content": content}}


def parser_probes(tool_call_parser: Optional[str], reasoning_parser: Optional[str],
                  template: Optional[str]) -> Tuple[List[str], Optional[str], List[str]]:
    """(stages to add, the tool-call format to force, notes on what is not probed and why).

    The tool-call format is the model's (its chat template), else the parser's own. The reasoning
    probe runs for a think-tag parser when the template writes <think>: the model's own output is
    what the parser must split (it cannot be forced, see above)."""
    stages: List[str] = []
    notes: List[str] = []
    tool_format: Optional[str] = None
    if tool_call_parser:
        tool_format = template_tool_format(template) or PARSER_TOOL_FORMATS.get(tool_call_parser)
        if tool_format:
            stages.append("tool_parser")
            if not template_tool_format(template):
                notes.append("the chat template names no tool-call format: the probe forces the %s parser's own" %
                             tool_call_parser)
        else:
            notes.append("no probe format for the tool-call parser %s: only the tools request is checked"
                         % tool_call_parser)
    if reasoning_parser:
        if reasoning_parser in THINK_PARSERS and template and "<think>" in template:
            stages.append("reasoning_parser")
        else:
            notes.append("no probe for the reasoning parser %s (the probe needs a think-tag parser and a template "
                         "that writes <think>): only the chat completion is checked" % reasoning_parser)
    return stages, tool_format, notes


def waiting_for(stage: str, served_model_name: str) -> str:
    """What a stage waits for, in words."""
    goals = {
        "health": "/health to answer 200",
        "models": "/v1/models to list %r" % served_model_name,
        "completion": "a completion from /v1/completions",
        "chat": "a chat completion from /v1/chat/completions",
        "tools": "a chat completion with tools from /v1/chat/completions",
        "tool_parser": "tool_calls parsed from output in the tool-call parser's format",
        "reasoning_parser": "reasoning split from output in the reasoning parser's format",
    }
    return goals[stage]


def progress_summary(doc: Mapping[str, Any]) -> str:
    """One line for a play's output, e.g. ``waiting for /health to answer 200 (stage 1 of 3): 21 s,
    10 attempts, last: /health answered 503: loading; unit activating (start)``."""
    last = re.sub(r"\s+", " ", str(doc.get("last") or "")).strip()
    if len(last) > SUMMARY_LAST_CHARS:
        last = last[:SUMMARY_LAST_CHARS - 3] + "..."
    unit = "; unit %s" % doc["unit_state"] if doc.get("unit_state") else ""
    attempts = "%d attempt%s" % (doc["attempts"], "" if doc["attempts"] == 1 else "s")
    if doc["phase"] == "ready":
        return "ready after %.1f s, %s: %s passed%s" % (doc["elapsed"], attempts, ", ".join(doc["stages"]), unit)
    if doc["phase"] == "failed":
        return "failed after %.0f s at stage %s, %s: %s%s" % (doc["elapsed"], doc["stage"], attempts, last, unit)
    return "waiting for %s (stage %d of %d): %.0f s, %s%s%s" % (
        doc["waiting_for"], doc["stages"].index(doc["stage"]) + 1, len(doc["stages"]), doc["elapsed"], attempts,
        ", last: %s" % last if last else "", unit)


def progress_document(phase: str, stage: str, stages: Sequence[str], served_model_name: str, elapsed: float,
                      attempts: int, last: Optional[str], unit_state: Optional[str] = None,
                      updated: Optional[float] = None) -> Dict[str, Any]:
    """The progress file's content after an attempt: phase (waiting, ready, failed), the stage and what
    it waits for (None once ready), seconds since the start, attempts so far, the last answer or
    error, the unit's state when it is watched, the epoch time of the update and the summary line."""
    if phase not in PROGRESS_PHASES:
        raise ValueError("phase %r is not one of %s" % (phase, ", ".join(PROGRESS_PHASES)))
    doc: Dict[str, Any] = {
        "phase": phase, "stage": stage, "stages": list(stages),
        "waiting_for": None if phase == "ready" else waiting_for(stage, served_model_name),
        "elapsed": round(elapsed, 1), "attempts": attempts, "last": last,
        "updated": round(time.time() if updated is None else updated, 3),
    }
    if unit_state is not None:
        doc["unit_state"] = unit_state
    doc["summary"] = progress_summary(doc)
    return doc


def write_progress(path: str, doc: Mapping[str, Any]) -> bool:
    """Replace the progress file (0600, write-then-rename, so a poller never reads half a document).
    Best effort: a full disk or a missing directory must not fail the gate itself; False then."""
    try:
        host_state.write_atomic(path, json.dumps(doc, sort_keys=True) + "\n", mode=PROGRESS_FILE_MODE)
    except OSError:
        return False
    return True


def wait_ready(base_url: str, served_model_name: str, stages: Sequence[str], http: Http,
               clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
               timeout: float = 600.0, interval: float = 2.0, api_key: Optional[str] = None, prompt: str = "Hello",
               max_tokens: int = 8, unit_alive: Optional[Callable[[], Any]] = None,
               report: Optional[Report] = None, tool_call_parser: Optional[str] = None,
               tool_format: Optional[str] = None,
               reasoning_parser: Optional[str] = None) -> Tuple[bool, Dict[str, Any]]:
    """Run the stages in order, each retried until it passes or the overall timeout expires.

    ``stages`` is a list of names among health, models, completion, chat, tools, tool_parser (needs
    ``tool_call_parser`` and the ``tool_format`` to force) and reasoning_parser (needs
    ``reasoning_parser``); parser_probes() picks them. A parser probe whose answer
    proves the parser wrong (ProbeFailed) ends the wait at once. ``unit_alive`` (a
    callable) raises ServerGone when the systemd unit died or restarted, so a model that cannot
    load fails in seconds instead of at the timeout. ``report`` is called once before the first
    attempt and after every attempt with (phase, stage, attempts, elapsed, last): phase waiting while
    a stage waits (last: its error, or "<stage> passed" when the one before it just passed), then
    ready or failed (last: the error). Returns (passed, result) where result carries the seconds to
    each stage (from the start) and the last error when it did not pass.
    """
    base = base_url.rstrip("/")
    start = clock()
    timings: Dict[str, float] = {}
    details: Dict[str, Any] = {}
    last_error: Optional[str] = None
    attempts = 0
    checks: Dict[str, Callable[[], Dict[str, Any]]] = {
        "health": lambda: check_health(base, http, api_key),
        "models": lambda: check_models(base, http, api_key, served_model_name),
        "completion": lambda: check_completion(base, http, api_key, served_model_name, prompt, max_tokens),
        "chat": lambda: check_chat(base, http, api_key, served_model_name, prompt, max_tokens),
        "tools": lambda: check_chat(base, http, api_key, served_model_name, prompt, max_tokens, tools=True),
        "tool_parser": lambda: check_tool_parser(base, http, api_key, served_model_name, prompt,
                                                 cast(str, tool_call_parser), cast(str, tool_format)),
        "reasoning_parser": lambda: check_reasoning_parser(base, http, api_key, served_model_name, prompt,
                                                           cast(str, reasoning_parser)),
    }

    def tell(phase: str, stage: str, last: Optional[str]) -> None:
        if report is not None:
            report(phase, stage, attempts, clock() - start, last)

    if stages:
        tell("waiting", stages[0], None)
    for number, stage in enumerate(stages):
        while True:
            attempts += 1
            try:
                if unit_alive is not None:
                    unit_alive()
                details.update(checks[stage]())
                timings[stage] = round(clock() - start, 3)
                break
            except (ServerGone, ProbeFailed) as exc:
                tell("failed", stage, str(exc))
                return False, {"timings": timings, "stage": stage, "error": str(exc), **details}
            except NotReady as exc:
                last_error = str(exc)
                if clock() - start >= timeout:
                    error = "not ready after %.0f s at stage %s: %s" % (timeout, stage, last_error)
                    tell("failed", stage, error)
                    return False, {"timings": timings, "stage": stage, "timed_out": True, "error": error, **details}
                tell("waiting", stage, last_error)
                sleep(interval)
        if number + 1 < len(stages):
            tell("waiting", stages[number + 1], "%s passed" % stage)
    if stages:
        tell("ready", stages[-1], None)
    return True, {"timings": timings, "seconds": round(clock() - start, 3), **details}
