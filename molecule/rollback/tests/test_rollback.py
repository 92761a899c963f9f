"""After the failed rollout: model A serves again, the broken unit is stopped, the report says why."""
import json
import os
import urllib.request

PROJECT = os.environ.get("MOLECULE_PROJECT_DIRECTORY", os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def test_old_model_serves_again(host):
    a = host.service("vllm-tiny-llama.service")
    assert a.is_running and a.is_enabled
    base = "http://%s:8000" % host.interface("eth0").addresses[0]
    models = json.loads(urllib.request.urlopen(base + "/v1/models", timeout=30).read())
    assert [m["id"] for m in models["data"]] == ["tiny-llama"]


def test_broken_unit_stopped_and_disabled(host):
    broken = host.service("vllm-tiny-broken.service")
    assert not broken.is_running and not broken.is_enabled


def test_state_file_still_names_the_old_model(host):
    state = json.loads(host.file("/var/lib/llmops-vllm/state.json").content_string)
    assert state["current"]["unit"] == "vllm-tiny-llama.service"


def test_report_explains(host):
    report = json.load(open(os.path.join(PROJECT, "reports", "llmops-1", "latest.json")))
    assert report["status"] == "rolled_back"
    assert "exited while loading" in report["error"]
    assert report["timings"]["rollback_s"] > 0
    print("rollback timings:", report["timings"])
