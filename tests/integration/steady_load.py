"""A steady, low-rate load on one OpenAI-compatible endpoint, counting every failed request.

A request fails when it cannot connect, answers with a non-2xx status, or gives no answer within
`timeout` seconds (60: the fleet issue's definition). With stream_every=N every Nth request streams
(`"stream": true`, server-sent events); a stream also fails when it ends before vLLM's `data: [DONE]`
or carries no token (a truncated stream). Requests start on a fixed schedule, each in its own thread,
so a slow answer never lowers the rate: what the clients of a real service would see.

    load = SteadyLoad("http://10.231.0.11:8011", "mm-llama", rate=2.0, stream_every=3)
    load.start(); ...; load.stop()
    load.summary()  # {"sent": .., "failed": .., "streamed": .., "truncated": .., "errors": [...], "p50_s": .., "p99_s": ..}
"""
from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Dict, List, Optional, Tuple


class SteadyLoad(threading.Thread):
    def __init__(self, url: str, model: str, rate: float = 2.0, max_tokens: int = 4, timeout: float = 60.0,
                 prompt: str = "Hello", stream_every: int = 0) -> None:
        super().__init__(daemon=True)
        self.url, self.model, self.interval, self.timeout = url.rstrip("/"), model, 1.0 / rate, timeout
        self.stream_every = stream_every
        request = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
        self.body = json.dumps(request).encode()
        self.stream_body = json.dumps(dict(request, stream=True)).encode()
        self.halt = threading.Event()
        self.lock = threading.Lock()
        # (started at, seconds, error or None, streamed), one per request
        self.results: List[Tuple[float, float, Optional[str], bool]] = []
        self.workers: List[threading.Thread] = []

    @staticmethod
    def read_stream(response: Any) -> Optional[str]:
        """None when the server-sent events carried a token and ended with `data: [DONE]`, else what was wrong."""
        tokens = 0
        for raw in response:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                return None if tokens else "truncated stream: [DONE] without a token"
            event = json.loads(data)
            if "error" in event:
                return "error event in the stream: %s" % str(event["error"])[:200]
            tokens += sum(1 for choice in event.get("choices") or [] if choice.get("text"))
        return "truncated stream: it ended after %d token(s) without [DONE]" % tokens

    def one(self, stream: bool = False) -> None:
        started = time.monotonic()
        error = None
        try:
            request = urllib.request.Request(self.url + "/v1/completions", data=self.stream_body if stream else self.body,
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                if stream:
                    error = self.read_stream(response)
                elif not json.loads(response.read()).get("choices"):
                    error = "no choices in the answer"
        except urllib.error.HTTPError as exc:
            error = "HTTP %d" % exc.code
        except Exception as exc:  # noqa: BLE001 - every way a request can fail is a failed request
            error = "%s: %s" % (type(exc).__name__, exc)
        with self.lock:
            self.results.append((started, time.monotonic() - started, error, stream))

    def run(self) -> None:
        next_at = time.monotonic()
        count = 0
        while not self.halt.is_set():
            count += 1
            stream = self.stream_every > 0 and count % self.stream_every == 0
            worker = threading.Thread(target=self.one, args=(stream,), daemon=True)
            worker.start()
            self.workers.append(worker)
            next_at += self.interval
            self.halt.wait(max(0.0, next_at - time.monotonic()))

    def stop(self) -> Dict[str, Any]:
        self.halt.set()
        self.join()
        for worker in self.workers:
            worker.join(self.timeout + 5)
        return self.summary()

    def summary(self, since: Optional[float] = None, until: Optional[float] = None) -> Dict[str, Any]:
        """Of the requests started in [since, until) (time.monotonic(); None - no bound)."""
        with self.lock:
            results = [r for r in self.results if (since is None or r[0] >= since) and (until is None or r[0] < until)]
        latencies = sorted(seconds for _start, seconds, error, _streamed in results if error is None)

        def quantile(q: float) -> Optional[float]:
            return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))], 3) if latencies else None

        errors = [error for _start, _seconds, error, _streamed in results if error is not None]
        return {"sent": len(results), "failed": len(errors), "streamed": sum(1 for r in results if r[3]),
                "truncated": sum(1 for error in errors if error.startswith("truncated stream")), "errors": errors[:10],
                "p50_s": quantile(0.5), "p99_s": quantile(0.99)}
