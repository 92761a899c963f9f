# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A host's snapshot (plugins/plugin_utils/snapshot.py): keys, secrets, reading and writing, the files'
root, and the offline diff's variables and preparation (apply.py)."""
import json
import os
import stat

import pytest

from ansible_collections.llmops.vllm.plugins.plugin_utils import apply, snapshot


def test_a_read_is_keyed_by_module_and_public_arguments_only():
    args = {"repo_id": "org/m", "revision": "c" * 40, "models_root": "/var/lib/llmops-vllm/models", "endpoint": None}
    key = snapshot.read_key("llmops.vllm.hf_model", args)
    # secrets, omitted (None) values and Ansible's own arguments do not change where a read is kept
    assert snapshot.read_key("llmops.vllm.hf_model", dict(args, token="hf_secret", _ansible_check_mode=True)) == key
    assert snapshot.read_key("llmops.vllm.hf_model", dict(reversed(list(args.items())))) == key
    assert snapshot.read_key("llmops.vllm.hf_model", dict(args, revision="d" * 40)) != key
    assert snapshot.read_key("llmops.vllm.vllm_info", args) != key


def test_secrets_never_reach_the_snapshot(tmp_path):
    doc = snapshot.empty("h1", "2026-12-02T00:00:00+00:00", "0.1.0")
    snapshot.record(doc, "llmops.vllm.vllm_ready", {"url": "http://h1:8000", "api_key": "sk-live-123", "hub_token": "hf_x",
                                                    "extra_index_url": "https://u:p@idx/simple"},
                    {"changed": False, "ready": True, "invocation": {"module_args": {"api_key": "sk-live-123"}}})
    path = snapshot.save(str(tmp_path), doc)
    text = open(path).read()
    assert "sk-live-123" not in text and "hf_x" not in text and "u:p@" not in text and "invocation" not in text
    assert snapshot.recorded(snapshot.load(str(tmp_path), "h1"), "llmops.vllm.vllm_ready",
                             {"url": "http://h1:8000", "api_key": "another"}) == {"changed": False, "ready": True}


def test_save_and_load_round_trip_and_refuse_what_is_not_a_snapshot(tmp_path):
    doc = snapshot.empty("h1", "2026-12-02T00:00:00+00:00", "0.1.0")
    snapshot.record(doc, "ansible.builtin.setup", {"gather_subset": ["min"]}, {"ansible_facts": {"default_ipv4": {"address": "10.0.0.5"}}})
    path = snapshot.save(str(tmp_path), doc)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and os.listdir(tmp_path) == ["h1.json"]  # no temporary file left
    assert snapshot.load(str(tmp_path), "h1") == json.loads(json.dumps(doc))
    with pytest.raises(snapshot.SnapshotError, match=r"no snapshot of h2 here - `llmops-vllm apply --snapshot"):
        snapshot.load(str(tmp_path), "h2")
    (tmp_path / "h3.json").write_text('{"format": "something/2"}')
    with pytest.raises(snapshot.SnapshotError, match=r"format 'something/2', expected llmops-vllm-snapshot/1"):
        snapshot.load(str(tmp_path), "h3")
    (tmp_path / "h4.json").write_text("{not json")
    with pytest.raises(snapshot.SnapshotError, match="not a readable snapshot"):
        snapshot.load(str(tmp_path), "h4")
    with pytest.raises(snapshot.SnapshotError, match="cannot name a snapshot file"):
        snapshot.path_of(str(tmp_path), "../etc/passwd")


def test_a_missing_read_names_the_host_the_module_its_arguments_and_what_is_held():
    doc = snapshot.empty("h1", "2026-12-02T00:00:00+00:00", "0.1.0")
    snapshot.record(doc, "llmops.vllm.vllm_info", {"venv": "/opt/a"}, {"version": "0.11.0"})
    text = snapshot.missing(doc, "llmops.vllm.vllm_info", {"venv": "/opt/b"})
    assert "snapshot of h1" in text and "llmops.vllm.vllm_info" in text and '"/opt/b"' in text and '"/opt/a"' in text
    assert "run `llmops-vllm diff` online" in text


def test_the_free_bytes_come_from_a_disk_read_of_the_same_models_root():
    doc = snapshot.empty("h1", "t", "v")
    snapshot.record(doc, "llmops.vllm.hf_model", {"repo_id": "a/b", "models_root": "/srv/models"}, {"free_bytes": 123})
    snapshot.record(doc, "llmops.vllm.hf_model", {"repo_id": "a/b", "models_root": "/var/lib/llmops-vllm/metadata"}, {})
    assert snapshot.free_bytes_for(doc, "/srv/models") == 123
    assert snapshot.free_bytes_for(doc, "/var/lib/llmops-vllm/models") is None


def test_files_are_written_under_the_root_at_their_host_paths(tmp_path):
    doc = snapshot.empty("h1", "t", "v")
    snapshot.add_file(doc, "/etc/systemd/system/vllm-a.service", "[Unit]\n", "0644")
    snapshot.add_file(doc, "/usr/local/libexec/llmops-vllm/wait-ready", "#!/usr/bin/python3\n", "0755")
    written = snapshot.materialize(doc, str(tmp_path / "root"))
    assert written == [str(tmp_path / "root/etc/systemd/system/vllm-a.service"), str(tmp_path / "root/usr/local/libexec/llmops-vllm/wait-ready")]
    assert (tmp_path / "root/etc/systemd/system/vllm-a.service").read_text() == "[Unit]\n"
    assert stat.S_IMODE(os.stat(written[1]).st_mode) == 0o755
    for bad in ("etc/passwd", "/etc/../../escape"):
        evil = snapshot.empty("h1", "t", "v")
        snapshot.add_file(evil, bad, "x", "0644")
        with pytest.raises(snapshot.SnapshotError, match="not a plain absolute path"):
            snapshot.materialize(evil, str(tmp_path / "root"))


def test_prepare_offline_writes_each_hosts_root_and_names_hosts_without_a_snapshot(tmp_path):
    doc = snapshot.empty("h1", "t", "v")
    snapshot.add_file(doc, "/var/lib/llmops-vllm/state.json", "{}\n", "0644")
    snapshot.save(str(tmp_path / "snap"), doc)
    apply.prepare_offline(str(tmp_path / "snap"), ["h1"], str(tmp_path / "roots"))
    assert (tmp_path / "roots/h1/var/lib/llmops-vllm/state.json").read_text() == "{}\n"
    with pytest.raises(ValueError, match="no snapshot of h2"):
        apply.prepare_offline(str(tmp_path / "snap"), ["h1", "h2"], str(tmp_path / "roots2"))


def test_the_offline_variables_keep_every_host_on_the_controller(tmp_path):
    variables = apply.offline_variables("snap", str(tmp_path))
    assert variables["ansible_connection"] == "local" and variables["ansible_become"] is False
    assert variables["rollout_force"] is True  # the fast path would read the host itself
    assert variables[snapshot.REPLAY_VAR] == os.path.abspath("snap")
    assert variables["llmops_vllm_root"] == str(tmp_path) + "/{{ inventory_hostname }}"
