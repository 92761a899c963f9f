# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Is a vLLM server really serving? The stages of the readiness gate, as plain functions.

/health only says the process is alive; a model is ready when /v1/models lists the served name and
a real completion comes back (and a chat completion when the model has a chat template, and a
request with tools when a tool parser is configured). Each stage is timed. The HTTP client and
the clock are injected so the stage logic is tested without a server; the module passes urllib.

Target side: Python standard library and Ansible's own module_utils (open_url) only.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from ansible.module_utils.six.moves.urllib.error import HTTPError, URLError
from ansible.module_utils.urls import open_url

# A tool any chat template can render; the random sandbox models will not call it, the gate only
# checks that vLLM accepts a tools request (parser configured, template handles `tools`).
# http(url, payload or None, api_key or None) -> (status, parsed JSON body or its text): http_json's shape.
Http = Callable[[str, Optional[Dict[str, Any]], Optional[str]], Tuple[int, Any]]

PROBE_TOOL: Dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current time in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


class NotReady(Exception):
    """A stage did not pass (yet); the message is what the last attempt saw."""


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


def wait_ready(base_url: str, served_model_name: str, stages: Sequence[str], http: Http,
               clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
               timeout: float = 600.0, interval: float = 2.0, api_key: Optional[str] = None, prompt: str = "Hello",
               max_tokens: int = 8, unit_alive: Optional[Callable[[], Any]] = None) -> Tuple[bool, Dict[str, Any]]:
    """Run the stages in order, each retried until it passes or the overall timeout expires.

    ``stages`` is a list of names among health, models, completion, chat, tools. ``unit_alive`` (a
    callable) raises ServerGone when the systemd unit died or restarted, so a model that cannot
    load fails in seconds instead of at the timeout. Returns (passed, result) where result carries
    the seconds to each stage (from the start) and the last error when it did not pass.
    """
    base = base_url.rstrip("/")
    start = clock()
    timings: Dict[str, float] = {}
    details: Dict[str, Any] = {}
    last_error: Optional[str] = None
    checks: Dict[str, Callable[[], Dict[str, Any]]] = {
        "health": lambda: check_health(base, http, api_key),
        "models": lambda: check_models(base, http, api_key, served_model_name),
        "completion": lambda: check_completion(base, http, api_key, served_model_name, prompt, max_tokens),
        "chat": lambda: check_chat(base, http, api_key, served_model_name, prompt, max_tokens),
        "tools": lambda: check_chat(base, http, api_key, served_model_name, prompt, max_tokens, tools=True),
    }
    for stage in stages:
        while True:
            try:
                if unit_alive is not None:
                    unit_alive()
                details.update(checks[stage]())
                timings[stage] = round(clock() - start, 3)
                break
            except ServerGone as exc:
                return False, {"timings": timings, "stage": stage, "error": str(exc), **details}
            except NotReady as exc:
                last_error = str(exc)
                if clock() - start >= timeout:
                    return False, {"timings": timings, "stage": stage, "timed_out": True,
                                   "error": "not ready after %.0f s at stage %s: %s" % (timeout, stage, last_error),
                                   **details}
                sleep(interval)
    return True, {"timings": timings, "seconds": round(clock() - start, 3), **details}
