"""The fleet's promise, from the controller: zero failed requests through HAProxy while A -> B rolled over both hosts
with a canary and a soak, and while a failing canary was rolled back (molecule/default: prepare started the load,
the side effect stopped it and kept its summary). These tests take no `host`: testinfra runs each once."""
import json
import os

PROJECT = os.environ.get("MOLECULE_PROJECT_DIRECTORY", os.path.join(os.path.dirname(__file__), "..", "..", ".."))
FLEET = os.path.join(PROJECT, ".sandbox", "fleet")
CANARY, OTHER = "llmops-1", "llmops-2"
A, B = "vllm-tiny-llama.service", "vllm-tiny-qwen3.service"


def reports(name):
    """The rollout reports of host `name`, oldest first."""
    directory = os.path.join(PROJECT, "reports", name)
    return [json.load(open(os.path.join(directory, f))) for f in sorted(os.listdir(directory)) if f.startswith("rollout-")]


def swap(name):
    """The report of the A -> B swap on host `name`."""
    return [r for r in reports(name) if r["status"] == "ok" and r["before"].get("unit") == A][-1]


def measured(line):
    with open(os.path.join(PROJECT, "out", "measurements.txt"), "a") as handle:
        handle.write(line + "\n")


def test_every_request_through_haproxy_succeeded_streams_included():
    summary = json.load(open(os.path.join(FLEET, "summary.json")))
    measured("fleet load (A -> B with a canary, then a failing canary rolled back): %s" % json.dumps(summary))
    assert summary["sent"] >= 300, summary
    assert summary["streamed"] >= summary["sent"] // 3 - 1, summary
    assert summary["failed"] == 0 and summary["truncated"] == 0 and summary["errors"] == [], summary


def test_the_canary_was_soaked_against_the_host_still_on_a():
    canary, other = swap(CANARY), swap(OTHER)
    soak = canary["soak"]
    assert soak["problems"] == [] and soak["canary"]["requests"] >= 1 and soak["baseline"]["requests"] >= 1, soak
    assert other["soak"] == {}, "only the canary soaks"
    # each host left HAProxy for its swap and came back
    assert canary["timings"]["out_of_lb_s"] > 0 and other["timings"]["out_of_lb_s"] > 0
    measured("fleet A -> B: canary %s, other %s" % (json.dumps(canary["timings"]), json.dumps(other["timings"])))


def test_the_failing_canary_was_rolled_back_and_the_other_host_never_tried():
    last = reports(CANARY)[-1]
    assert last["status"] == "rolled_back" and last["desired"]["unit"] == "vllm-tiny-wrong-parser.service", last["status"]
    assert "tool-call parser pythonic" in last["error"] and last["timings"]["rollback_s"] > 0
    measured("fleet canary rolled back after a wrong tool-call parser: %s" % json.dumps(last["timings"]))
    assert all(r["desired"].get("unit") != "vllm-tiny-wrong-parser.service" for r in reports(OTHER))
    text = " ".join(open(os.path.join(FLEET, "failed-canary.log")).read().split())
    # drained before its swap, enabled again once B served again; the run's summary says so at its end
    assert text.index("HAProxy - drain vllm_chat/%s" % CANARY) < text.index("HAProxy - ready vllm_chat/%s" % CANARY)
    assert "Rolled back - %s serves" % B in text
