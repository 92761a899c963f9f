"""After the A -> B rollout: checked on each real host and from the controller."""
import json
import os
import re
import urllib.request


A, B = "vllm-tiny-llama.service", "vllm-tiny-qwen3.service"
PORT = 8000
PROJECT = os.environ.get("MOLECULE_PROJECT_DIRECTORY", os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def measured(line):
    """Figures the closing notes quote (exposure, timings): out/measurements.txt."""
    os.makedirs(os.path.join(PROJECT, "out"), exist_ok=True)
    with open(os.path.join(PROJECT, "out", "measurements.txt"), "a") as handle:
        handle.write(line + "\n")


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
    user = host.user("vllm")
    assert user.exists and user.home == "/var/lib/llmops-vllm" and user.uid < 1000
    main_pid = show(host, B, "MainPID")["MainPID"]
    assert host.check_output("ps -o user= -p %s" % main_pid).strip() == "vllm"


def test_unit_content(host):
    unit = host.file("/etc/systemd/system/" + B).content_string
    execstart = re.search(r"^ExecStart=(.*)$", unit, re.M).group(1)
    assert execstart.startswith("/opt/llmops-vllm/venv/bin/vllm serve /var/lib/llmops-vllm/models/llmops-test/tiny-qwen3-chat/")
    for word in ("--served-model-name tiny-qwen3", "--host %s" % address(host), "--port 8000",
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
    assert props["User"] == "vllm" and props["ProtectProc"] == "invisible"
    exposure = host.check_output("systemd-analyze security %s --no-pager | tail -1" % B)
    measured("sandbox unit %s: %s" % (B, exposure))
    assert float(re.search(r"exposure level for \S+: ([0-9.]+)", exposure).group(1)) < 3.0


def test_listening_socket(host):
    assert host.socket("tcp://%s:%d" % (address(host), PORT)).is_listening


def test_answers_from_the_controller(host):
    base = "http://%s:%d" % (address(host), PORT)
    models = json.loads(urllib.request.urlopen(base + "/v1/models", timeout=30).read())
    assert [m["id"] for m in models["data"]] == ["tiny-qwen3"]
    request = urllib.request.Request(base + "/v1/completions", headers={"Content-Type": "application/json"},
                                     data=json.dumps({"model": "tiny-qwen3", "prompt": "Hi", "max_tokens": 4}).encode())
    assert json.loads(urllib.request.urlopen(request, timeout=120).read())["usage"]["completion_tokens"] > 0


def test_state_file_records_the_swap(host):
    state_file = host.file("/var/lib/llmops-vllm/state.json")
    assert state_file.mode == 0o644
    state = json.loads(state_file.content_string)
    assert state["current"]["unit"] == B and state["current"]["revision"] == "main"
    assert re.fullmatch(r"[0-9a-f]{40}", state["current"]["commit"])
    assert state["previous"]["unit"] == A and state["previous"]["revision"] == "v1.0"


def test_report_on_the_controller(host):
    name = host.check_output("hostname").strip()
    report = json.load(open(os.path.join(PROJECT, "reports", name, "latest.json")))
    assert report["status"] in ("ok", "unchanged") and report["desired"]["unit"] == B
    rollouts = sorted(f for f in os.listdir(os.path.join(PROJECT, "reports", name)) if f.startswith("rollout-"))
    swaps = [json.load(open(os.path.join(PROJECT, "reports", name, f))) for f in rollouts]
    swap = [r for r in swaps if r["status"] == "ok" and r["before"].get("unit") == A][-1]
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
    assert 'Environment="CUDA_VISIBLE_DEVICES=0,1,2,3"' in unit and 'Environment="CUDA_DEVICE_ORDER=PCI_BUS_ID"' in unit
    assert "--tensor-parallel-size 4 --enable-expert-parallel" in unit and "--numa-bind" in unit
    assert "example-key-not-in-the-unit" not in unit and "EnvironmentFile=/root/gpu-example/minimax-m2-5.env" in unit
    assert host.file("/root/gpu-example/minimax-m2-5.env").mode == 0o600
    assert host.run("systemd-analyze verify --man=no %s" % path).rc == 0
    exposure = host.check_output("systemd-analyze security --offline=yes %s --no-pager | tail -1" % path)
    measured("GPU example unit: %s" % exposure)
    assert float(re.search(r"exposure level for \S+: ([0-9.]+)", exposure).group(1)) < 5.0
