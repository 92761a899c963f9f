"""After seven bad rollouts: model A serves as before."""
import json
import os

PROJECT = os.environ.get("MOLECULE_PROJECT_DIRECTORY", os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def test_every_bad_rollout_ran_and_failed():
    runs = json.load(open(os.path.join(PROJECT, "out", "preflight-runs.json")))
    assert sorted(case["what"] for case, rc in runs) == sorted([
        "unknown tool-call parser", "a model that cannot fit (llmops-vllm apply, exit 2)", "a flag the installed vLLM does not have",
        "a port in use (llmops-vllm diff, exit 2)", "a missing revision",
        "an invalid document (llmops-vllm apply, exit 1 - refused on the controller)",
        "a branch where the revision policy asks for a tag"])
    # ansible-playbook's failed play, llmops-vllm's "refused, nothing touched" (2) and "bad input" (1)
    assert all(rc == case.get("rc", 2) for case, rc in runs)
    assert sorted(case.get("via", "playbook") for case, rc in runs).count("apply") == 2


def test_old_model_untouched(host):
    assert host.service("vllm-tiny-llama.service").is_running
    # The desired model's unit may exist, retired by an earlier scenario; no bad rollout started it
    # (converge.yml checks its file is byte for byte what it was before them).
    out = host.check_output("systemctl show -p ActiveState -p UnitFileState vllm-tiny-qwen3.service")
    props = dict(line.split("=", 1) for line in out.splitlines())
    assert props["ActiveState"] in ("inactive", "failed") and props["UnitFileState"] in ("", "disabled"), props
    # llmops-2 keeps its state in /srv/llmops-vllm (inventories/sandbox/host_vars/llmops-2.yml).
    state = json.loads(host.file("/srv/llmops-vllm/state.json").content_string)
    assert state["schema"] == 1 and list(state["models"]) == ["tiny-llama"]
    assert state["models"]["tiny-llama"]["unit"] == "vllm-tiny-llama.service"
