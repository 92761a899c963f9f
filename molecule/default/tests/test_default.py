"""The sandbox end to end, checked from the controller against each real host."""
import json
import time
import urllib.request

PORT = 8000


def address(host):
    return host.interface("eth0").addresses[0]


def post(url, payload, timeout=120):
    request = urllib.request.Request(url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def test_systemd_is_pid_1(host):
    assert host.process.get(pid=1).comm == "systemd"


def test_unit_runs_and_listens(host):
    service = host.service("vllm-smoke.service")
    if not service.is_running:
        print(host.run("journalctl -u vllm-smoke.service --no-pager -n 60").stdout)
    assert service.is_running and service.is_enabled
    assert host.socket("tcp://%s:%d" % (address(host), PORT)).is_listening


def test_real_completion_from_the_controller(host):
    base = "http://%s:%d" % (address(host), PORT)
    deadline = time.time() + 180
    while True:  # the port opens before the engine answers
        try:
            models = json.loads(urllib.request.urlopen(base + "/v1/models", timeout=10).read())
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(2)
    assert [m["id"] for m in models["data"]] == ["tiny"]
    completion = post(base + "/v1/completions", {"model": "tiny", "prompt": "Hello", "max_tokens": 8, "temperature": 0})
    assert completion["usage"]["completion_tokens"] > 0
    assert isinstance(completion["choices"][0]["text"], str)
    chat = post(base + "/v1/chat/completions", {"model": "tiny", "max_tokens": 8,
                                                "messages": [{"role": "user", "content": "Hi"}]})
    assert chat["choices"][0]["message"]["role"] == "assistant"
