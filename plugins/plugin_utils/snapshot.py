# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A host's snapshot: what the rollout's preview read on it, for `llmops-vllm diff --offline`.

`llmops-vllm apply --snapshot DIR` ends with a preview of the applied state that records, per host,
every read the preview makes through llmops.vllm.host_read (probes: facts, GPUs, the vLLM, the
processes, the listeners, the disk, the current model's health) and the files it compares against
(the state file, the vllm-*.service units, the helper scripts) in DIR/<host>.json.
`llmops-vllm diff --offline DIR` runs the same play on the controller (connection local): the files
are written under a per-host root the roles' host paths are prefixed with (llmops_vllm_root), and
each host_read returns what was recorded for the same module and arguments. A read the snapshot
does not hold is answered from what it does hold where the module's own logic allows it (see
REPLAY), otherwise the preview fails and names the read.

Plain functions here; the action plugin (plugins/action/host_read.py) and the CLI (apply.py) use them.
Secrets never enter a snapshot: arguments named in SECRET_ARGS are dropped and the password of every
URL (a hub endpoint's user:password@) is masked before keys are made and before anything is written;
the host's environment (ansible_env and the other ENV_FACTS) is dropped from every recorded result;
the secret environment file is not among the recorded files; the file is written 0600."""


import hashlib
import json
import os
from typing import Any, Dict, List, Mapping, Optional

FORMAT = "llmops-vllm-snapshot/1"
# The variables that switch host_read: record into this directory / answer from it.
RECORD_VAR = "llmops_vllm_snapshot_record"
REPLAY_VAR = "llmops_vllm_snapshot_replay"
SECRET_ARGS = frozenset(("token", "api_key", "hub_token", "extra_index_url", "password"))
# What a recorded result loses before it is stored: Ansible's own bookkeeping.
DROPPED_RESULT_KEYS = frozenset(("invocation", "_ansible_no_log", "_ansible_verbose_always", "_ansible_delegated_vars"))
# Facts that hold the host's environment (an HF_TOKEN, a proxy's password): never recorded.
ENV_FACTS = frozenset(("ansible_env", "env", "ansible_environ", "environ"))
MODE = 0o600

# Reads a snapshot can answer for arguments it did not record, and how (host_read.py carries them out):
#   servers  - vllm_process_info: the recorded servers, conflicts recomputed for the new port and GPUs;
#   local    - hf_model: run on the controller (the preview's connection is local) with the free bytes
#              the host's filesystem had; a model version the host has is a recorded read already;
#   new_venv - vllm_venv: a venv the recorded listing of the venvs' directory does not hold is one the
#              rollout would create (vllm_venv's own decide()); the host's wheels are not checked offline.
REPLAY = {
    "llmops.vllm.vllm_process_info": "servers",
    "llmops.vllm.hf_model": "local",
    "llmops.vllm.vllm_venv": "new_venv",
}


class SnapshotError(Exception):
    """A snapshot that is missing, unreadable, of another format or without the read asked for."""


def masked(value: Any) -> Any:
    """value with the password of every URL in its strings masked (module_utils/redact.py)."""
    from ansible_collections.llmops.vllm.plugins.module_utils.redact import mask_urls

    if isinstance(value, str):
        return mask_urls(value)
    if isinstance(value, Mapping):
        return dict((k, masked(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [masked(v) for v in value]
    return value


def public_args(args: Mapping[str, Any]) -> Dict[str, Any]:
    """The arguments a read is recorded under: secrets, None values (omitted) and Ansible's own _ansible_* dropped,
    URLs' passwords masked."""
    return dict((k, masked(v)) for k, v in sorted(args.items())
                if k not in SECRET_ARGS and v is not None and not k.startswith("_ansible"))


def read_key(module: str, args: Mapping[str, Any]) -> str:
    """Where a read is recorded: the module and its public arguments, canonical JSON, hashed."""
    text = json.dumps([module, public_args(args)], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:20]


def public_result(result: Mapping[str, Any]) -> Dict[str, Any]:
    """What a read's result is recorded as: without Ansible's bookkeeping and the host's environment, URLs'
    passwords masked."""
    doc = dict((k, masked(v)) for k, v in result.items() if k not in DROPPED_RESULT_KEYS and k not in ENV_FACTS)
    if isinstance(doc.get("ansible_facts"), dict):
        doc["ansible_facts"] = dict((k, v) for k, v in doc["ansible_facts"].items() if k not in ENV_FACTS)
    return doc


def empty(host: str, taken_at: str, collection: str) -> Dict[str, Any]:
    return {"format": FORMAT, "host": host, "taken_at": taken_at, "collection": collection, "reads": {}, "files": {}}


def path_of(directory: str, host: str) -> str:
    if not host or "/" in host or host.startswith("."):
        raise SnapshotError("host name %r cannot name a snapshot file" % host)
    return os.path.join(directory, host + ".json")


def load(directory: str, host: str) -> Dict[str, Any]:
    path = path_of(directory, host)
    try:
        with open(path, encoding="utf-8") as handle:
            doc = json.load(handle)
    except FileNotFoundError:
        raise SnapshotError("%s: no snapshot of %s here - `llmops-vllm apply --snapshot %s` writes one per host"
                            % (path, host, directory))
    except (OSError, ValueError) as exc:
        raise SnapshotError("%s: not a readable snapshot (%s)" % (path, exc))
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise SnapshotError("%s: format %r, expected %s - take the snapshot again with this release's "
                            "`llmops-vllm apply --snapshot`" % (path, doc.get("format") if isinstance(doc, dict) else None, FORMAT))
    return doc


def save(directory: str, doc: Mapping[str, Any]) -> str:
    """Write atomically, 0600 (a partial snapshot is never left under the final name)."""
    from ansible_collections.llmops.vllm.plugins.module_utils.vllm_venv import write_file

    path = path_of(directory, str(doc["host"]))
    write_file(path, json.dumps(doc, indent=1, sort_keys=True, default=str) + "\n", MODE)
    return path


def record(doc: Dict[str, Any], module: str, args: Mapping[str, Any], result: Mapping[str, Any]) -> None:
    doc["reads"][read_key(module, args)] = {"module": module, "args": public_args(args), "result": public_result(result)}


def recorded(doc: Mapping[str, Any], module: str, args: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    entry = doc.get("reads", {}).get(read_key(module, args))
    return dict(entry["result"]) if entry else None


def recorded_of(doc: Mapping[str, Any], module: str) -> List[Dict[str, Any]]:
    """Every read of module the snapshot holds, in the order of their keys: [{args, result}]."""
    return [entry for _key, entry in sorted(doc.get("reads", {}).items()) if entry.get("module") == module]


def missing(doc: Mapping[str, Any], module: str, args: Mapping[str, Any]) -> str:
    held = ["%s" % json.dumps(entry["args"], sort_keys=True, default=str) for entry in recorded_of(doc, module)]
    return ("the snapshot of %s (taken %s) holds no %s read with arguments %s%s: this preview needs the host - run "
            "`llmops-vllm diff` online, or take the snapshot again after the change is applied"
            % (doc.get("host"), doc.get("taken_at"), module, json.dumps(public_args(args), sort_keys=True, default=str),
               " (it holds %s)" % "; ".join(held) if held else ""))


def free_bytes_for(doc: Mapping[str, Any], models_root: str) -> Optional[int]:
    """The free bytes the host's filesystem under models_root had, from any hf_model read there."""
    for entry in recorded_of(doc, "llmops.vllm.hf_model"):
        if entry["args"].get("models_root") == models_root and isinstance(entry["result"].get("free_bytes"), int):
            return int(entry["result"]["free_bytes"])
    return None


def listed_dirs(doc: Mapping[str, Any], parent: str) -> Optional[List[str]]:
    """The directories a recorded ansible.builtin.find of parent found, or None when none was recorded."""
    for entry in recorded_of(doc, "ansible.builtin.find"):
        if parent in (entry["args"].get("paths") or []):
            return [str(item.get("path")) for item in entry["result"].get("files") or []]
    return None


def new_venv(args: Mapping[str, Any]) -> Dict[str, Any]:
    """What vllm_venv returns in check mode for a venv path that does not exist (its decide(), its keys)."""
    from ansible_collections.llmops.vllm.plugins.module_utils.vllm_install import integrity_not_checked
    from ansible_collections.llmops.vllm.plugins.module_utils.vllm_venv import decide

    path, package, version = str(args["path"]), args.get("package"), args.get("version")
    state = {"path": path, "exists": False, "is_venv": False, "runs": None, "run_error": "", "distribution": None,
             "version": None, "site_packages": None, "dist_info": None, "managed": None, "integrity": integrity_not_checked()}
    action, reason = decide(state, str(package), str(version), str(args.get("on_drift") or "warn"))  # type: ignore[arg-type]
    return {"changed": True, "action": action, "reason": reason, "venv": path, "distribution": None, "version": None,
            "installer": args.get("installer") or "pip", "integrity": dict(integrity_not_checked()), "drift": False,
            "drift_before": {}, "cli_version": None, "steps": [], "seconds": 0.0, "removed": [], "kept": [],
            "diff": {"before": {"path": path, "distribution": None, "version": None},
                     "after": {"path": path, "distribution": package, "version": version}}}


def add_file(doc: Dict[str, Any], path: str, content: str, mode: str) -> None:
    doc["files"][path] = {"content": content, "mode": mode}


def materialize(doc: Mapping[str, Any], root: str) -> List[str]:
    """Write the recorded files under root at their host paths (root + path); returns the paths written."""
    written = []
    for path, entry in sorted(doc.get("files", {}).items()):
        if not os.path.isabs(path) or ".." in path.split("/"):
            raise SnapshotError("snapshot of %s: file path %r is not a plain absolute path" % (doc.get("host"), path))
        target = root + path
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w", encoding="utf-8") as out:
            out.write(entry["content"])
        os.chmod(target, int(str(entry.get("mode") or "0644"), 8))
        written.append(target)
    return written
