"""A steady, low-rate load on one OpenAI-compatible endpoint, counting every failed request.

A request fails when it cannot connect, answers with a non-2xx status, or gives no answer within
`timeout` seconds (60: the fleet issue's definition). Requests start on a fixed schedule, each in
its own thread, so a slow answer never lowers the rate: what the clients of a real service would see.

    load = SteadyLoad("http://10.231.0.11:8011", "mm-llama", rate=2.0)
    load.start(); ...; load.stop()
    load.summary()  # {"sent": .., "failed": .., "errors": [...], "p50_s": .., "p99_s": ..}
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
                 prompt: str = "Hello") -> None:
        super().__init__(daemon=True)
        self.url, self.model, self.interval, self.timeout = url.rstrip("/"), model, 1.0 / rate, timeout
        self.body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}).encode()
        self.halt = threading.Event()
        self.lock = threading.Lock()
        # (started at, seconds, error or None), one per request
        self.results: List[Tuple[float, float, Optional[str]]] = []
        self.workers: List[threading.Thread] = []

    def one(self) -> None:
        started = time.monotonic()
        error = None
        try:
            request = urllib.request.Request(self.url + "/v1/completions", data=self.body,
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                answer = json.loads(response.read())
                if not answer.get("choices"):
                    error = "no choices in the answer"
        except urllib.error.HTTPError as exc:
            error = "HTTP %d" % exc.code
        except Exception as exc:  # noqa: BLE001 - every way a request can fail is a failed request
            error = "%s: %s" % (type(exc).__name__, exc)
        with self.lock:
            self.results.append((started, time.monotonic() - started, error))

    def run(self) -> None:
        next_at = time.monotonic()
        while not self.halt.is_set():
            worker = threading.Thread(target=self.one, daemon=True)
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
        latencies = sorted(seconds for _start, seconds, error in results if error is None)

        def quantile(q: float) -> Optional[float]:
            return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))], 3) if latencies else None

        errors = [error for _start, _seconds, error in results if error is not None]
        return {"sent": len(results), "failed": len(errors), "errors": errors[:10],
                "p50_s": quantile(0.5), "p99_s": quantile(0.99)}
