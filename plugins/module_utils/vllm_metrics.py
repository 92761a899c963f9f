# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A canary's soak, from two scrapes of vLLM's /metrics: what it served in between, and whether that is good enough.

vLLM's /metrics (Prometheus text exposition format) counts every HTTP request by handler and grouped
status (``http_requests_total{handler,method,status="2xx"}``, from prometheus-fastapi-instrumentator)
and observes each request's time to first token in the histogram ``vllm:time_to_first_token_seconds``.
Counters only grow while the server runs, so the difference between a scrape before and one after a
window is what the server did in that window; the canary's window is then judged on its own
(traffic, error rate, TTFT p99) and against a baseline server's window of the same time.

Plain data in and out; the module (vllm_soak) does the HTTP and the waiting.
Target side: Python standard library only.
"""

from __future__ import annotations

import math
import re
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

REQUESTS_METRIC = "http_requests_total"
TTFT_BUCKET_METRIC = "vllm:time_to_first_token_seconds_bucket"
# The inference endpoints: /health, /v1/models and /metrics scrapes are not the traffic a canary is judged on.
INFERENCE_HANDLERS = ("/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/embeddings")
TTFT_QUANTILE = 0.99
# A new start time is a restart even when the counters have already grown past their old values again.
START_TIME_METRIC = "process_start_time_seconds"

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,?)')
_UNESCAPE = re.compile(r"\\(.)")


class Sample(NamedTuple):
    name: str
    labels: Dict[str, str]
    value: float


def _unescape(value: str) -> str:
    return _UNESCAPE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def parse(text: str) -> List[Sample]:
    """The samples of a Prometheus text exposition (``name{label="value",...} value [timestamp]``); comments skipped."""
    samples: List[Sample] = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _NAME.match(line)
        if not match:
            raise ValueError("/metrics line %d: expected a metric name, got %r" % (number, line[:200]))
        name, position = match.group(0), match.end()
        labels: Dict[str, str] = {}
        if line.startswith("{", position):
            position += 1
            while not line.startswith("}", position):
                label = _LABEL.match(line, position)
                if not label:
                    raise ValueError("/metrics line %d: expected label=\"value\" at column %d, got %r"
                                     % (number, position + 1, line[:200]))
                labels[label.group(1)] = _unescape(label.group(2))
                position = label.end()
                if not label.group(3) and not line.startswith("}", position):
                    raise ValueError("/metrics line %d: expected ',' or '}' at column %d, got %r"
                                     % (number, position + 1, line[:200]))
            position += 1
        fields = line[position:].split()
        if not fields or len(fields) > 2:
            raise ValueError("/metrics line %d: expected a value (and an optional timestamp) after %s, got %r"
                             % (number, name, line[:200]))
        try:
            value = float(fields[0])  # float() reads Prometheus' NaN, +Inf and -Inf too
        except ValueError:
            raise ValueError("/metrics line %d: %s has the value %r, not a number" % (number, name, fields[0]))
        samples.append(Sample(name, labels, value))
    return samples


def _series_key(sample: Sample) -> Tuple[str, Tuple[Tuple[str, str], ...]]:
    return sample.name, tuple(sorted(sample.labels.items()))


def _counters(samples: Sequence[Sample]) -> Dict[Tuple[str, Tuple[Tuple[str, str], ...]], float]:
    """The series a soak counts: inference requests by status, and the TTFT histogram's buckets."""
    return {_series_key(s): s.value for s in samples
            if (s.name == REQUESTS_METRIC and s.labels.get("handler") in INFERENCE_HANDLERS)
            or (s.name == TTFT_BUCKET_METRIC and "le" in s.labels)}


def _describe(key: Tuple[str, Tuple[Tuple[str, str], ...]]) -> str:
    name, labels = key
    return "%s{%s}" % (name, ",".join('%s="%s"' % item for item in labels))


def histogram_quantile(quantile: float, buckets: Dict[float, float]) -> Optional[float]:
    """The quantile of cumulative bucket counts {upper bound: count}, as Prometheus' histogram_quantile computes it:
    linear interpolation inside the bucket the rank falls in (the first bucket starts at 0), and the highest finite
    bound when the rank falls in the +Inf bucket. None without observations (or without a +Inf bucket)."""
    bounds = sorted(buckets)
    if not bounds or not math.isinf(bounds[-1]) or buckets[bounds[-1]] <= 0:
        return None
    rank = quantile * buckets[bounds[-1]]
    lower, below = 0.0, 0.0
    for upper in bounds:
        count = buckets[upper]
        if count >= rank:
            if math.isinf(upper):
                return lower
            return lower + (upper - lower) * (rank - below) / (count - below)
        lower, below = upper, count
    return lower


def window(before: Sequence[Sample], after: Sequence[Sample]) -> Dict[str, Optional[float]]:
    """What a server did between two scrapes: inference requests, non-2xx answers, and the TTFT p99 of the window.

    Raises ValueError when a counter went down: the server restarted in between, and the difference
    would count only part of the window."""
    started = [[s.value for s in scrape if s.name == START_TIME_METRIC and not s.labels] for scrape in (before, after)]
    if started[0] and started[1] and started[0] != started[1]:
        raise ValueError("the server restarted during the soak: %s changed from %.0f to %.0f between the scrapes; "
                         "its counters started again from 0, so this window cannot be judged - run the soak again"
                         % (START_TIME_METRIC, started[0][0], started[1][0]))
    start, end = _counters(before), _counters(after)
    for key, value in start.items():
        if end.get(key, 0.0) < value:
            raise ValueError("the server restarted during the soak: %s went down from %g to %g between the scrapes; "
                             "its counters started again from 0, so this window cannot be judged - run the soak again"
                             % (_describe(key), value, end.get(key, 0.0)))
    requests = errors = 0
    buckets: Dict[float, float] = {}
    for key, value in end.items():
        name, labels = key[0], dict(key[1])
        delta = value - start.get(key, 0.0)
        if name == REQUESTS_METRIC:
            requests += int(delta)
            if not labels.get("status", "").startswith("2"):
                errors += int(delta)
        else:
            bound = float(labels["le"])
            buckets[bound] = buckets.get(bound, 0.0) + delta  # summed over model_name, engine, ...
    return {
        "requests": requests,
        "errors": errors,
        "error_rate": float(errors) / requests if requests else None,
        "ttft_p99_s": histogram_quantile(TTFT_QUANTILE, buckets),
        "ttft_count": int(buckets.get(math.inf, 0.0)),
    }


def _percent(rate: float) -> str:
    return "%.2f%%" % (rate * 100)


def verdict(canary: Dict[str, Optional[float]], baseline: Optional[Dict[str, Optional[float]]], max_error_rate: float,
            max_ttft_p99_ratio: float, max_ttft_p99_s: Optional[float], min_requests: int) -> List[str]:
    """The problems of a canary's window, in words that give what was measured and the threshold; [] = pass.

    baseline is the old model's window over the same time (None: no baseline); the TTFT ratio is
    judged only when both windows have a p99."""
    problems: List[str] = []
    requests = int(canary.get("requests") or 0)
    if requests < min_requests:
        problems.append("canary served %d inference requests in the window (min %d): too little traffic reached it to judge it"
                        % (requests, min_requests))
    error_rate = canary.get("error_rate")
    if error_rate is not None and error_rate > max_error_rate:
        problems.append("canary error rate %s (%d of %d requests not 2xx) is above the max %s"
                        % (_percent(error_rate), int(canary.get("errors") or 0), requests, _percent(max_error_rate)))
    ttft = canary.get("ttft_p99_s")
    if ttft is not None and max_ttft_p99_s is not None and ttft > max_ttft_p99_s:
        problems.append("canary TTFT p99 %.3g s is above the max %s s" % (ttft, max_ttft_p99_s))
    baseline_ttft = baseline.get("ttft_p99_s") if baseline else None
    if ttft is not None and baseline_ttft:
        ratio = ttft / baseline_ttft
        if ratio > max_ttft_p99_ratio:
            problems.append("canary TTFT p99 %.3g s is %.1f times the baseline's %.3g s (max %s)"
                            % (ttft, ratio, baseline_ttft, max_ttft_p99_ratio))
    return problems
