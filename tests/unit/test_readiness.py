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
