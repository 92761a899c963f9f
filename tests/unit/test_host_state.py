# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host's state file (module_utils/host_state.py): names, URLs, schema 1, migration, operations, atomic writes."""
import copy
import json
import os

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils import host_state

COMMIT_A = "0000000000000000000000000000000000000000"
COMMIT_B = "5bd8b0e1c2f0a8d5e6f7a8b9c0d1e2f3a4b5c6d7"
PATH_A = "/var/lib/llmops-vllm/models/MiniMaxAI/MiniMax-M2.5/" + COMMIT_A
PATH_B = "/var/lib/llmops-vllm/models/nvidia/Kimi-K2.5-NVFP4/" + COMMIT_B

# roles/rollout/tasks/record.yml rendered by ansible-core 2.18 (to_nice_json of "{{ }}" values):
# every number is a string ("{{ port | int }}" too), numa_node null is "", the first rollout's
# `previous` (none) is "", booleans and lists keep their type. Two rollouts: minimax, then kimi.
LEGACY_2_18 = """{
    "current": {
        "bind": "::",
        "commit": "%(b)s",
        "name": "kimi-k2-5",
        "path": "%(pb)s",
        "plan": {
            "argv": [
                "vllm",
                "serve",
                "%(pb)s",
                "--tensor-parallel-size",
                "8"
            ],
            "data_parallel_size": "1",
            "device": "cuda",
            "enable_expert_parallel": true,
            "gpu_indices": [
                0,
                1,
                2,
                3,
                4,
                5,
                6,
                7
            ],
            "max_model_len": "262144",
            "numa_node": "0",
            "tensor_parallel_size": "8"
        },
        "port": "8001",
        "repo_id": "nvidia/Kimi-K2.5-NVFP4",
        "revision": "v1.0",
        "served_model_name": "kimi-k2.5",
        "since": "2026-12-01T01:14:24.125283",
        "unit": "vllm-kimi-k2-5.service"
    },
    "history": [
        {
            "bind": "::",
            "commit": "%(b)s",
            "name": "kimi-k2-5",
            "path": "%(pb)s",
            "port": "8001",
            "repo_id": "nvidia/Kimi-K2.5-NVFP4",
            "revision": "v1.0",
            "served_model_name": "kimi-k2.5",
            "since": "2026-12-01T01:14:24.423135",
            "unit": "vllm-kimi-k2-5.service"
        },
        {
            "bind": "0.0.0.0",
            "commit": "%(a)s",
            "name": "minimax-m2-5",
            "path": "%(pa)s",
            "port": "8000",
            "repo_id": "MiniMaxAI/MiniMax-M2.5",
            "revision": "main",
            "served_model_name": "minimax-m2.5",
            "since": "2026-12-01T01:14:15.647462",
            "unit": "vllm-minimax-m2-5.service"
        }
    ],
    "previous": {
        "bind": "0.0.0.0",
        "commit": "%(a)s",
        "name": "minimax-m2-5",
        "path": "%(pa)s",
        "plan": {
            "argv": [
                "vllm",
                "serve",
                "%(pa)s",
                "--tensor-parallel-size",
                "4",
                "--port",
                "8000"
            ],
            "data_parallel_size": "1",
            "device": "cuda",
            "enable_expert_parallel": false,
            "gpu_indices": [
                0,
                1,
                2,
                3
            ],
            "max_model_len": "196608",
            "numa_node": "",
            "tensor_parallel_size": "4"
        },
        "port": "8000",
        "repo_id": "MiniMaxAI/MiniMax-M2.5",
        "revision": "main",
        "served_model_name": "minimax-m2.5",
        "since": "2026-12-01T01:14:15.591638",
        "unit": "vllm-minimax-m2-5.service"
    },
    "schema": 1
}
""" % {"a": COMMIT_A, "b": COMMIT_B, "pa": PATH_A, "pb": PATH_B}

# The first rollout's file, ansible-core 2.19 (types kept: "{{ port | int }}" is 8000, tensor_parallel_size
# is whatever the plan had, numa_node null), then the same host after playbooks/retire.yml.
LEGACY_2_19_FIRST = {
    "schema": 1,
    "current": {
        "name": "minimax-m2-5", "unit": "vllm-minimax-m2-5.service", "repo_id": "MiniMaxAI/MiniMax-M2.5",
        "revision": "main", "commit": COMMIT_A, "path": PATH_A, "served_model_name": "minimax-m2.5",
        "bind": "0.0.0.0", "port": 8000, "since": "2026-12-01T01:13:43.252938",
        "plan": {"device": "cuda", "tensor_parallel_size": 4, "data_parallel_size": 1, "enable_expert_parallel": False,
                 "gpu_indices": [0, 1, 2, 3], "numa_node": None, "max_model_len": 196608,
                 "argv": ["serve", PATH_A, "--tensor-parallel-size", "4"]},
    },
    "previous": None,
    "history": [{
        "name": "minimax-m2-5", "unit": "vllm-minimax-m2-5.service", "repo_id": "MiniMaxAI/MiniMax-M2.5",
        "revision": "main", "commit": COMMIT_A, "path": PATH_A, "served_model_name": "minimax-m2.5",
        "bind": "0.0.0.0", "port": 8000, "since": "2026-12-01T01:13:43.192816"}],
}


def retired_by_playbook(document):
    """What playbooks/retire.yml writes: combine({'current': none, 'previous': current})."""
    return dict(document, current=None, previous=document["current"])


def entry(name="minimax-m2-5", commit=COMMIT_A, port=8000, **plan):
    doc = {
        "name": name, "repo_id": "MiniMaxAI/MiniMax-M2.5", "revision": "main", "commit": commit,
        "path": "/var/lib/llmops-vllm/models/%s/%s" % (name, commit), "served_model_name": name, "bind": "0.0.0.0",
        "port": port,
        "plan": {"device": "cuda", "tensor_parallel_size": 4, "data_parallel_size": 1, "enable_expert_parallel": True,
                 "gpu_indices": [0, 1, 2, 3], "numa_node": 0, "max_model_len": 196608, "layout": "TP=4+EP",
                 "argv": ["serve", "x", "--tensor-parallel-size", "4"]},
    }
    doc["plan"].update(plan)
    return doc


# ----------------------------------------------------------------------------- names and addresses

def test_unit_names_and_paths():
    assert host_state.unit_name("kimi-k2-5") == "vllm-kimi-k2-5.service"
    assert host_state.unit_path("kimi-k2-5") == "/etc/systemd/system/vllm-kimi-k2-5.service"
    assert host_state.unit_path("a", unit_dir="/run/systemd/system") == "/run/systemd/system/vllm-a.service"
    assert host_state.unit_glob("/etc/systemd/system") == "/etc/systemd/system/vllm-*.service"
    assert host_state.state_path() == "/var/lib/llmops-vllm/state.json"
    assert host_state.state_path("/tmp/x") == "/tmp/x/state.json"


@pytest.mark.parametrize("bind, port, url", [
    ("0.0.0.0", 8000, "http://127.0.0.1:8000"),
    ("::", 8000, "http://[::1]:8000"),
    ("::1", "8001", "http://[::1]:8001"),
    ("fd00::5", 8000, "http://[fd00::5]:8000"),
    ("10.0.0.5", 8000, "http://10.0.0.5:8000"),
    ("127.0.0.1", 9000, "http://127.0.0.1:9000"),
    ("gpu-01.example", 8000, "http://gpu-01.example:8000"),
])
def test_connect_url(bind, port, url):
    assert host_state.connect_url(bind, port) == url


def test_connect_host_and_scheme():
    assert host_state.connect_host("0.0.0.0") == "127.0.0.1"
    assert host_state.connect_host("::") == "::1"
    assert host_state.connect_host("10.1.2.3") == "10.1.2.3"
    assert host_state.connect_url("::", 443, scheme="https") == "https://[::1]:443"


# ----------------------------------------------------------------------------- migration

def test_migrates_the_file_ansible_core_2_18_rendered():
    state, migrated = host_state.loads(LEGACY_2_18)
    assert migrated is True
    assert host_state.state_problems(state) == []
    assert sorted(state) == ["history", "lock", "models", "previous", "schema"]
    assert state["schema"] == 1 and state["lock"] is None
    kimi = state["models"]["kimi-k2-5"]
    assert kimi["port"] == 8001
    assert kimi["plan"]["tensor_parallel_size"] == 8 and kimi["plan"]["data_parallel_size"] == 1
    assert kimi["plan"]["max_model_len"] == 262144 and kimi["plan"]["numa_node"] == 0
    assert kimi["plan"]["enable_expert_parallel"] is True
    # argv stays strings, the all-zero commit stays a string
    assert kimi["plan"]["argv"][-1] == "8"
    minimax = state["previous"]["minimax-m2-5"]
    assert minimax["commit"] == COMMIT_A and minimax["port"] == 8000
    assert minimax["plan"]["numa_node"] is None and minimax["plan"]["tensor_parallel_size"] == 4
    assert [h["name"] for h in state["history"]] == ["kimi-k2-5", "minimax-m2-5"]
    assert all("plan" not in h and isinstance(h["port"], int) for h in state["history"])
    assert host_state.current(state)["name"] == "kimi-k2-5"
    assert host_state.connect_url(kimi["bind"], kimi["port"]) == "http://[::1]:8001"


def test_migrates_the_first_rollout_and_a_retired_host():
    state = host_state.migrate(LEGACY_2_19_FIRST)
    assert list(state["models"]) == ["minimax-m2-5"] and state["previous"] == {}
    assert state["models"]["minimax-m2-5"] == LEGACY_2_19_FIRST["current"]
    retired = host_state.migrate(retired_by_playbook(LEGACY_2_19_FIRST))
    assert retired["models"] == {} and host_state.current(retired) is None
    assert retired["previous"]["minimax-m2-5"]["plan"]["gpu_indices"] == [0, 1, 2, 3]


def test_first_rollout_previous_rendered_as_empty_string():
    document = json.loads(LEGACY_2_18)
    document["previous"] = ""
    assert host_state.migrate(document)["previous"] == {}


def test_migrate_is_idempotent_and_does_not_touch_its_input():
    document = json.loads(LEGACY_2_18)
    before = copy.deepcopy(document)
    once = host_state.migrate(document)
    assert document == before
    assert host_state.migrate(once) == once
    assert host_state.serialize(host_state.migrate(json.loads(host_state.serialize(once)))) == host_state.serialize(once)
    state, migrated = host_state.loads(host_state.serialize(once))
    assert state == once and migrated is False


@pytest.mark.parametrize("text", ["", "\n", "  "])
def test_empty_text_and_documents_are_refused(text):
    """Never "serves nothing" (issue 39; tests/unit/test_host_lock.py reads real files)."""
    with pytest.raises(host_state.StateError, match="^/x/state.json: the file is empty .* not a state"):
        host_state.loads(text, "/x/state.json")
    with pytest.raises(host_state.StateError, match="an empty JSON object"):
        host_state.migrate({})
    with pytest.raises(host_state.StateError, match="^null, not a state"):
        host_state.migrate(None)


def test_missing_file_is_an_empty_state(tmp_path):
    assert host_state.read(str(tmp_path / "state.json")) == (host_state.empty_state(), False, "")


def test_future_schema_is_refused_clearly():
    with pytest.raises(host_state.StateError, match="schema 2 is newer than the 1 this llmops.vllm reads.*upgrade"):
        host_state.migrate({"schema": 2, "models": {}, "hosts": {}})
    with pytest.raises(host_state.StateError, match="schema 3 is newer"):
        host_state.migrate({"schema": 3, "current": None})


@pytest.mark.parametrize("document, message", [
    ([], "expected a JSON object, got list"),
    ({"schema": 1, "hosts": {}}, 'neither "models" \\(schema 1\\) nor "current" \\(schema 0\\)'),
    ({"models": {}}, 'schema: expected 1 with "models", got None'),
    ({"schema": 1, "current": "kimi"}, r"current \(schema 0\): expected an entry with a name or null"),
])
def test_unreadable_documents(document, message):
    with pytest.raises(host_state.StateError, match=message):
        host_state.migrate(document)


def test_not_json_names_the_file():
    with pytest.raises(host_state.StateError, match="^/x/state.json: not JSON"):
        host_state.loads("{", "/x/state.json")


def test_problems_name_the_key():
    document = json.loads(LEGACY_2_18)
    document["current"]["port"] = "80x0"
    document["current"]["plan"]["gpu_indices"] = [0, "one"]
    document["current"]["unit"] = "kimi.service"
    del document["current"]["plan"]["argv"]
    document["history"][1]["colour"] = "blue"
    with pytest.raises(host_state.StateError) as raised:
        host_state.migrate(document)
    problems = raised.value.problems
    assert "models['kimi-k2-5'].port: expected an integer 1-65535, got '80x0' (str)" in problems
    assert "models['kimi-k2-5'].plan.gpu_indices: expected a list of GPU indices (integers >= 0), got [0, 'one'] (list)" in problems
    assert "models['kimi-k2-5'].plan.argv: missing" in problems
    assert "models['kimi-k2-5'].unit: expected vllm-kimi-k2-5.service (vllm-<name>.service), got 'kimi.service'" in problems
    assert any(p.startswith("history[1].colour: unknown key") for p in problems)
    assert len(problems) == 5


def test_schema_1_problems():
    state = host_state.record(host_state.empty_state(), entry(), now="2026-03-01T10:00:00+00:00")
    state["previous"]["other"] = state["models"]["minimax-m2-5"]
    state["lock"] = {"holder": "rollout", "controller": "ctl", "started": "yesterday", "lease_s": -1}
    state["history"] = state["history"] * 21
    problems = host_state.state_problems(state)
    assert "previous['other'].name: 'minimax-m2-5' differs from its key 'other'" in problems
    assert "lock.started: expected an ISO 8601 time, got 'yesterday' (str)" in problems
    assert "lock.lease_s: expected an integer >= 0, got -1 (int)" in problems
    assert "history: 21 entries, at most 20 are kept" in problems


# ----------------------------------------------------------------------------- operations

def test_record_into_an_empty_state():
    empty = host_state.empty_state()
    state = host_state.record(empty, entry(port="8000", tensor_parallel_size="4"), now="2026-03-01T10:00:00+00:00")
    assert empty == host_state.empty_state()
    served = state["models"]["minimax-m2-5"]
    assert served["unit"] == "vllm-minimax-m2-5.service" and served["since"] == "2026-03-01T10:00:00+00:00"
    assert served["port"] == 8000 and served["plan"]["tensor_parallel_size"] == 4
    assert state["previous"] == {}
    assert state["history"] == [dict((k, v) for k, v in served.items() if k != "plan")]


def test_record_the_same_again_changes_nothing():
    state = host_state.record(host_state.empty_state(), entry(), now="2026-03-01T10:00:00+00:00")
    again = host_state.record(state, entry(), now="2026-03-02T10:00:00+00:00")
    assert host_state.serialize(again) == host_state.serialize(state)


def test_record_a_new_revision_keeps_the_old_one_as_previous():
    state = host_state.record(host_state.empty_state(), entry(), now="2026-03-01T10:00:00+00:00")
    state = host_state.record(state, entry(commit=COMMIT_B), now="2026-03-02T10:00:00+00:00")
    assert state["models"]["minimax-m2-5"]["commit"] == COMMIT_B
    assert state["previous"]["minimax-m2-5"]["commit"] == COMMIT_A
    assert [h["commit"] for h in state["history"]] == [COMMIT_B, COMMIT_A]


def test_record_replacing_another_model():
    state = host_state.record(host_state.empty_state(), entry(), now="2026-03-01T10:00:00+00:00")
    state = host_state.record(state, entry("kimi-k2-5", commit=COMMIT_B), replaces="minimax-m2-5", now="2026-03-02T10:00:00+00:00")
    assert list(state["models"]) == ["kimi-k2-5"]
    assert state["previous"]["minimax-m2-5"]["since"] == "2026-03-01T10:00:00+00:00"
    assert host_state.current(state)["name"] == "kimi-k2-5"
    # replacing a model already retired: nothing more to move
    again = host_state.record(state, entry("kimi-k2-5", commit=COMMIT_B), replaces="minimax-m2-5")
    assert again == state


def test_several_models_and_current():
    state = host_state.record(host_state.empty_state(), entry(), now="2026-03-01T10:00:00+00:00")
    state = host_state.record(state, entry("kimi-k2-5", port=8001, gpu_indices=[4, 5, 6, 7]), now="2026-03-01T11:00:00+00:00")
    assert [m["name"] for m in host_state.models(state)] == ["kimi-k2-5", "minimax-m2-5"]
    with pytest.raises(host_state.StateError, match=r"serves 2 models \(kimi-k2-5, minimax-m2-5\)"):
        host_state.current(state)


def test_history_is_capped_newest_first():
    state = host_state.empty_state()
    for day in range(1, 26):
        state = host_state.record(state, entry(port=8000 + day), now="2026-03-%02dT10:00:00+00:00" % day)
    assert len(state["history"]) == host_state.HISTORY_LIMIT
    assert [h["port"] for h in state["history"]] == list(range(8025, 8005, -1))
    assert state["previous"]["minimax-m2-5"]["port"] == 8024


def test_record_refuses_a_bad_entry_naming_the_key():
    bad = entry(name="Kimi K2", tensor_parallel_size=0)
    bad["unit"] = "vllm-other.service"
    del bad["commit"]
    with pytest.raises(host_state.StateError) as raised:
        host_state.record(host_state.empty_state(), bad, replaces="Old Model")
    problems = raised.value.problems
    assert "entry.commit: missing" in problems
    assert any(p.startswith("entry.name: expected 1-63 lower-case letters") for p in problems)
    assert "entry.plan.tensor_parallel_size: expected an integer >= 1, got 0 (int)" in problems
    assert "entry.unit: expected vllm-Kimi K2.service (vllm-<name>.service), got 'vllm-other.service'" in problems
    assert any(p.startswith("replaces: expected 1-63") for p in problems)


def test_since_defaults_to_now_utc():
    state = host_state.record(host_state.empty_state(), entry())
    assert state["models"]["minimax-m2-5"]["since"].endswith("+00:00")


def test_retire():
    state = host_state.record(host_state.empty_state(), entry(), now="2026-03-01T10:00:00+00:00")
    retired = host_state.retire(state, "minimax-m2-5")
    assert retired["models"] == {} and retired["previous"]["minimax-m2-5"] == state["models"]["minimax-m2-5"]
    assert retired["history"] == state["history"]
    assert "minimax-m2-5" in state["models"]
    assert host_state.retire(retired, "minimax-m2-5") == retired
    assert host_state.retire(retired, "never-served") == retired


def test_serialize_is_stable():
    state = host_state.record(host_state.empty_state(), entry(), now="2026-03-01T10:00:00+00:00")
    text = host_state.serialize(state)
    assert text.endswith("}\n") and not text.endswith("\n\n")
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"
    assert text.splitlines()[1] == '  "history": ['


# ----------------------------------------------------------------------------- files

def test_write_atomic_and_save(tmp_path):
    path = tmp_path / "state.json"
    state = host_state.record(host_state.empty_state(), entry(), now="2026-03-01T10:00:00+00:00")
    text = host_state.save(str(path), state)
    assert path.read_text() == text == host_state.serialize(state)
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"
    assert os.listdir(tmp_path) == ["state.json"]
    assert host_state.read(str(path)) == (state, False, text)


def test_failed_serialization_keeps_the_old_file(tmp_path):
    path = tmp_path / "state.json"
    path.write_text(LEGACY_2_18)
    state = host_state.migrate(json.loads(LEGACY_2_18))
    state["models"]["kimi-k2-5"]["plan"]["argv"] = {"not", "json"}
    with pytest.raises(host_state.StateError, match="plan.argv: expected a list of strings"):
        host_state.save(str(path), state)
    state["models"]["kimi-k2-5"]["plan"]["argv"] = ["serve"]
    state["models"]["kimi-k2-5"]["plan"]["layout"] = "TP=8"
    with pytest.raises(TypeError):
        host_state.write_atomic(str(path), host_state.serialize(dict(state, lock=object())))
    assert path.read_text() == LEGACY_2_18
    assert os.listdir(tmp_path) == ["state.json"]


def test_failed_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "state.json"
    path.write_text(LEGACY_2_18)
    with pytest.raises(UnicodeEncodeError):
        # a lone surrogate cannot be encoded: the write fails after the temporary file exists
        host_state.write_atomic(str(path), '{"schema": 1, "x": "\udcff"}\n')
    assert path.read_text() == LEGACY_2_18 and os.listdir(tmp_path) == ["state.json"]

    def no_rename(src, dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "rename", no_rename)
    with pytest.raises(OSError, match="No space left"):
        host_state.write_atomic(str(path), "{}\n")
    assert path.read_text() == LEGACY_2_18 and os.listdir(tmp_path) == ["state.json"]


# ----------------------------------------------------------------------------- the host's lock

T0 = "2026-12-02T04:00:00+00:00"


def _at(seconds):
    import datetime
    return (datetime.datetime.fromisoformat(T0) + datetime.timedelta(seconds=seconds)).isoformat()


def test_lock_is_taken_renewed_by_its_holder_and_refused_to_another():
    state, taken_over = host_state.acquire_lock(host_state.empty_state(), "ci@ctl-1/run-1", "ctl-1", 600, now=T0)
    assert taken_over is None
    assert state["lock"] == {"holder": "ci@ctl-1/run-1", "controller": "ctl-1", "started": T0, "lease_s": 600}
    assert host_state.validate(state) is state

    with pytest.raises(host_state.LockHeld) as held:
        host_state.acquire_lock(state, "ci@ctl-2/run-2", "ctl-2", 600, now=_at(599))
    assert held.value.lock["holder"] == "ci@ctl-1/run-1"
    assert str(held.value) == ("held by ci@ctl-1/run-1 on ctl-1 since %s, lease until %s (1 s left)" % (T0, _at(600)))

    renewed = host_state.renew_lock(state, "ci@ctl-1/run-1", 900, now=_at(500))
    assert renewed["lock"]["renewed"] == _at(500) and renewed["lock"]["started"] == T0
    assert host_state.lock_expires(renewed["lock"]) == _at(1400)
    with pytest.raises(host_state.LockHeld):  # the renewal keeps it: at 1000 s the first lease would have run out
        host_state.acquire_lock(renewed, "ci@ctl-2/run-2", "ctl-2", 600, now=_at(1000))

    # the holder taking it again is a renewal, not a second lock
    again, taken_over = host_state.acquire_lock(renewed, "ci@ctl-1/run-1", "ctl-1", 600, now=_at(510))
    assert taken_over is None and again["lock"]["started"] == T0 and again["lock"]["renewed"] == _at(510)


def test_an_expired_lock_is_taken_over_and_the_old_holder_cannot_renew():
    state = host_state.acquire_lock(host_state.empty_state(), "ci@ctl-1/run-1", "ctl-1", 600, now=T0)[0]
    state, taken_over = host_state.acquire_lock(state, "ci@ctl-2/run-2", "ctl-2", 300, now=_at(600))
    assert taken_over["holder"] == "ci@ctl-1/run-1"
    assert state["lock"]["holder"] == "ci@ctl-2/run-2" and state["lock"]["started"] == _at(600)
    assert "expired 100 s ago" in host_state.describe_lock(taken_over, now=_at(700))
    with pytest.raises(host_state.StateError, match="ci@ctl-1/run-1 does not hold it .held by ci@ctl-2/run-2"):
        host_state.renew_lock(state, "ci@ctl-1/run-1", 600, now=_at(700))


def test_release_only_frees_the_holders_own_lock_and_keeps_the_rest():
    served = host_state.record(host_state.empty_state(), {
        "name": "tiny", "repo_id": "llmops-test/tiny", "revision": "main", "commit": COMMIT_A, "path": PATH_A,
        "served_model_name": "tiny", "bind": "::", "port": 8000, "since": T0,
        "plan": {"device": "cpu", "tensor_parallel_size": 1, "data_parallel_size": 1, "enable_expert_parallel": False,
                 "gpu_indices": [], "numa_node": None, "max_model_len": 2048, "argv": ["serve", PATH_A]}})
    locked = host_state.acquire_lock(served, "a", "ctl", 60, now=T0)[0]
    assert host_state.release_lock(locked, "b") == locked  # someone else's lock stays
    released = host_state.release_lock(locked, "a")
    assert released["lock"] is None and released["models"] == served["models"]
    assert host_state.release_lock(released, "a") == released  # releasing twice changes nothing
    # record and retire keep the lock (the rollout records while it holds it)
    assert host_state.retire(locked, "tiny")["lock"] == locked["lock"]


@pytest.mark.parametrize("holder, controller, lease_s, problem", [
    ("", "ctl", 60, "holder: expected a non-empty string"),
    ("a", None, 60, "controller: expected a non-empty string"),
    ("a", "ctl", 0, "lease_s: expected an integer >= 1"),
])
def test_lock_refuses_bad_input(holder, controller, lease_s, problem):
    with pytest.raises(host_state.StateError, match=problem):
        host_state.acquire_lock(host_state.empty_state(), holder, controller, lease_s, now=T0)
