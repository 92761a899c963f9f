"""The clients of the fleet and blue/green scenarios (steady_load.SteadyLoad) count what a real client would see as
a failure: a non-2xx answer, and a stream cut before vLLM's `data: [DONE]` (a truncated stream). Against a local
HTTP server that answers the way vLLM's /v1/completions does, then cuts or refuses on demand."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from steady_load import SteadyLoad


class Completions(BaseHTTPRequestHandler):
    mode = "whole"  # whole | cut | refuse

    def log_message(self, *args):  # quiet
        pass

    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.mode == "refuse":
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if not body.get("stream"):
            answer = json.dumps({"choices": [{"text": " hi", "finish_reason": "length"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for token in (" h", "i"):
            self.wfile.write(b"data: " + json.dumps({"choices": [{"text": token}]}).encode() + b"\n\n")
            self.wfile.flush()
        if self.mode == "whole":
            self.wfile.write(b"data: [DONE]\n\n")
        self.close_connection = True


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Completions)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    Completions.mode = "whole"


def run(server, mode, seconds=1.2):
    Completions.mode = mode
    load = SteadyLoad("http://127.0.0.1:%d" % server.server_address[1], "chat", rate=10.0, timeout=5.0, stream_every=2)
    load.start()
    time.sleep(seconds)
    return load.stop()


def test_whole_streams_and_answers_count_as_served(server):
    summary = run(server, "whole")
    assert summary["sent"] >= 8 and summary["streamed"] == summary["sent"] // 2
    assert summary["failed"] == 0 and summary["truncated"] == 0, summary


def test_a_stream_cut_before_done_is_a_failed_request(server):
    summary = run(server, "cut")
    assert summary["streamed"] >= 4 and summary["truncated"] == summary["streamed"] == summary["failed"], summary
    assert summary["errors"][0].startswith("truncated stream: it ended after 2 token(s) without [DONE]")


def test_a_refused_request_is_a_failed_request(server):
    summary = run(server, "refuse")
    assert summary["failed"] == summary["sent"] >= 8 and summary["truncated"] == 0 and summary["errors"][0] == "HTTP 503"
