"""After four bad rollouts: model A serves as before."""
import json


def test_old_model_untouched(host):
    assert host.service("vllm-tiny-llama.service").is_running
    assert not host.file("/etc/systemd/system/vllm-tiny-qwen3.service").exists
    state = json.loads(host.file("/var/lib/llmops-vllm/state.json").content_string)
    assert state["current"]["unit"] == "vllm-tiny-llama.service"
