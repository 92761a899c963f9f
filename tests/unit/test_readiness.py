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
