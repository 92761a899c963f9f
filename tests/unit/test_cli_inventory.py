"""Inventories through the real CLI (`cli.run`, in this process; the inventory loads in its own child process
through ansible-core's InventoryManager): a missing, unparsable or empty inventory, a directory with one bad
file, a --limit that matches nothing, exits 1 for every verb that takes -i, naming the inventory and what to do,
before anything runs. A good inventory still works for each verb.

Each load costs a child process (~0.4 s): every case runs on validate and diff, and apply and diff --offline
(the same run_rollout path) take the missing, empty and mixed-directory cases. A good inventory's diff --offline
runs a stand-in play through ansible-runner; its apply and diff stop at the runner (run_playbook records the
call): tests/integration/test_apply_cli.py runs apply through ansible-runner."""
import json
import re
import sys

import pytest

# apply at collection time: run_playbook binds sys.stderr as its progress stream when it is imported
from ansible_collections.llmops.vllm.plugins.plugin_utils import apply, cli, snapshot

pytestmark = pytest.mark.ansible

GOOD_HOSTS = """all:
  children:
    vllm_servers:
      hosts:
        h1:
          ansible_connection: local
          ansible_python_interpreter: %s
""" % sys.executable
GOOD_VARS = """vllm_model:
  name: tiny
  repo_id: org/tiny
  revision: main
  port: 8000
"""
STAND_IN = """---
- name: A stand-in for the rollout (no model here)
  hosts: vllm_servers
  gather_facts: false
  tasks:
    - name: Fast path | nothing to do
      ansible.builtin.debug:
        msg: "{{ inventory_hostname }} serves {{ vllm_model.name }}"
"""
VERBS = ["validate", "diff", "apply", "diff --offline"]
SOME_VERBS = ["validate", "diff"]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("inventories")
    good = root / "good"
    (good / "group_vars" / "all").mkdir(parents=True)
    (good / "hosts.yml").write_text(GOOD_HOSTS)
    (good / "group_vars" / "all" / "model.yml").write_text(GOOD_VARS)
    (root / "broken.yml").write_text("all:\n  hosts:\n    h1: [unclosed\n    h2:\n")
    (root / "broken.ini").write_text("[vllm_servers\nh1 ansible_host=10.0.0.1\n")
    (root / "empty.yml").write_text("")
    mixed = root / "mixed"
    (mixed / "group_vars" / "all").mkdir(parents=True)
    (mixed / "10-good.yml").write_text(GOOD_HOSTS)
    (mixed / "20-typo.yml").write_text("all:\n  children:\n    vllm_servers:\n      hosts:\n        h2: {ansible_host: [1\n")
    (mixed / "group_vars" / "all" / "model.yml").write_text(GOOD_VARS)
    (root / "play.yml").write_text(STAND_IN)
    snapshot.save(str(root / "snapshot"), snapshot.empty("h1", "20261206T000000Z", "test"))
    return root


def run_verb(capsys, verb, inventory, tree, *more):
    argv = verb.split()[:1] + ["-i", str(inventory)]
    if verb != "validate":
        argv += ["--artifacts", str(tree / "runs"), "--playbook", str(tree / "play.yml")]
    if verb == "diff --offline":
        argv += ["--offline", str(tree / "snapshot")]
    capsys.readouterr()
    code = cli.run(argv + list(more) + ["--json"])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, json.loads(out), err


def refused(capsys, tree, verb, inventory, *more):
    """Exit 1 with one JSON error and one stderr line, and nothing run (no runner artifacts)."""
    runs_before = sorted((tree / "runs").rglob("*")) if (tree / "runs").exists() else []
    code, doc, err = run_verb(capsys, verb, inventory, tree, *more)
    assert code == 1, doc
    assert set(doc) == {"error"} and err.count("\n") == 1 and err.startswith("llmops-vllm: error: ")
    assert "nothing was run" in doc["error"]
    assert (sorted((tree / "runs").rglob("*")) if (tree / "runs").exists() else []) == runs_before
    return doc["error"]


@pytest.mark.parametrize("verb", VERBS)
def test_issue39_missing_inventory(capsys, tree, verb):
    error = refused(capsys, tree, verb, tree / "no-such-inventory.yml")
    assert "inventory %s: no such file or directory" % (tree / "no-such-inventory.yml") in error
    assert "give -i the path" in error


@pytest.mark.parametrize("verb", SOME_VERBS)
def test_issue39_unparsable_yaml_inventory(capsys, tree, verb):
    error = refused(capsys, tree, verb, tree / "broken.yml")
    # ansible-core's own words differ between releases (2.16: "We were unable to read either as JSON nor YAML")
    assert "inventory %s: Ansible cannot parse it: " % (tree / "broken.yml") in error and "YAML" in error
    assert re.search(r"\(the yaml plugin, line [34]\); fix it", error), error


@pytest.mark.parametrize("verb", SOME_VERBS)
def test_issue39_unparsable_ini_inventory(capsys, tree, verb):
    error = refused(capsys, tree, verb, tree / "broken.ini")
    assert "inventory %s: Ansible cannot parse it" % (tree / "broken.ini") in error and "the ini plugin" in error


@pytest.mark.parametrize("verb", SOME_VERBS)
def test_issue39_empty_inventory(capsys, tree, verb):
    error = refused(capsys, tree, verb, tree / "empty.yml")
    assert "inventory %s holds no host" % (tree / "empty.yml") in error and "name the hosts" in error


@pytest.mark.parametrize("verb", VERBS)
def test_issue39_directory_with_one_bad_file(capsys, tree, verb):
    # 10-good.yml alone would load: the directory's bad file is named, not skipped with a warning
    error = refused(capsys, tree, verb, tree / "mixed")
    assert "inventory %s: Ansible cannot parse it" % (tree / "mixed" / "20-typo.yml") in error
    assert re.search(r"\(the yaml plugin, line [456]\)", error), error


@pytest.mark.parametrize("verb", ["diff", "apply"])
def test_issue39_limit_matching_no_host(capsys, tree, verb):
    error = refused(capsys, tree, verb, tree / "good", "--limit", "h9")
    assert "--limit h9 matches no host of inventory %s (it holds h1)" % (tree / "good") in error


def test_issue39_no_host_in_the_rollout_group(capsys, tree):
    # the rollout's play targets vllm_servers (rollout_hosts): a host only in another group would be skipped, exit 0
    inventory = tree / "ungrouped.yml"
    inventory.write_text("all:\n  hosts:\n    h1:\n      ansible_connection: local\n")
    code = cli.run(["diff", "-i", str(inventory), "--artifacts", str(tree / "runs"), "--json"])
    error = json.loads(capsys.readouterr().out)["error"]
    assert code == 1 and "no host of inventory %s is in vllm_servers" % inventory in error
    assert "-e rollout_hosts=GROUP" in error


@pytest.mark.parametrize("verb", VERBS)
def test_a_good_inventory_still_works(capsys, tree, verb, monkeypatch):
    calls = []
    if verb in ("diff", "apply"):
        def run_playbook(command, inventories, extra, limit, *args, **kwargs):
            calls.append((command, inventories, limit))
            return {"command": command, "exit_code": 0, "hosts": {"h1": {"outcome": "unchanged"}}, "summary_file": ""}
        monkeypatch.setattr(apply, "run_playbook", run_playbook)
    code, doc, err = run_verb(capsys, verb, tree / "good", tree)
    assert code == 0, (doc, err)
    if verb == "validate":
        assert doc["hosts"] == ["h1"] and doc["valid"]["h1"]["repo_id"] == "org/tiny"
        return
    assert doc["hosts"]["h1"]["outcome"] == "unchanged" and doc["exit_code"] == 0
    if verb == "diff --offline":  # the stand-in play ran on the controller, h1's snapshot and group_vars read
        assert doc["offline"] == str(tree / "snapshot") and doc["ansible_rc"] == 0
    else:
        assert calls == [(verb, [str(tree / "good")], None)]


def test_inline_vault_values_stay_encrypted_and_a_vault_file_needs_its_password(tmp_path, capsys):
    """The loader reads Vault secrets as ansible-playbook does (--vault-password-file), never prints a value."""
    from ansible.parsing.vault import VaultLib, VaultSecret

    password = tmp_path / "vault-password"
    password.write_text("correct horse\n")
    vault = VaultLib([("default", VaultSecret(b"correct horse"))])
    (tmp_path / "inv" / "group_vars" / "all").mkdir(parents=True)
    (tmp_path / "inv" / "hosts.yml").write_text(GOOD_HOSTS)
    (tmp_path / "inv" / "group_vars" / "all" / "model.yml").write_text(GOOD_VARS)
    (tmp_path / "inv" / "group_vars" / "all" / "secret.yml").write_bytes(vault.encrypt("hub_token: canary-4711\n"))
    error = refused(capsys, tmp_path, "validate", tmp_path / "inv")
    assert "Ansible cannot read the variables of h1" in error and "--vault-password-file" in error
    code = cli.run(["validate", "-i", str(tmp_path / "inv"), "--vault-password-file", str(password), "--json"])
    out, err = capsys.readouterr()
    assert code == 0 and json.loads(out)["valid"]["h1"]["name"] == "tiny" and "canary-4711" not in out + err
