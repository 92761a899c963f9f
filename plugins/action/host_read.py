# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of llmops.vllm.host_read: a read of the host, recorded into or answered from a
snapshot (plugins/plugin_utils/snapshot.py says what a snapshot is)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import base64
import datetime
import os
from typing import Any, Dict, List, Optional

from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase

from ansible_collections.llmops.vllm.plugins.module_utils.vllm_process import conflicts
from ansible_collections.llmops.vllm.plugins.plugin_utils import snapshot


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp: Optional[str] = None, task_vars: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        result: Dict[str, Any] = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        _validation, params = self.validate_argument_spec(
            argument_spec=dict(
                module=dict(type="str"),
                args=dict(type="dict", default={}),
                files=dict(type="list", elements="str", default=[]),
            ),
            mutually_exclusive=[("module", "files")],
            required_one_of=[("module", "files")],
        )
        # omit in the nested args dict: ansible-core before 2.19 leaves its placeholder there
        omitted = task_vars.get("omit")
        params["args"] = dict((k, v) for k, v in params["args"].items() if not (omitted and v == omitted))
        host = str(task_vars.get("inventory_hostname"))
        record_dir = self._templar.template(task_vars.get(snapshot.RECORD_VAR) or "")
        replay_dir = self._templar.template(task_vars.get(snapshot.REPLAY_VAR) or "")
        try:
            if replay_dir:
                doc = snapshot.load(str(replay_dir), host)
                if params["files"]:  # the CLI wrote them under the preview's root before the play
                    result.update(changed=False, files=sorted(doc.get("files", {})))
                    return result
                result.update(self._replay(doc, params["module"], params["args"], task_vars))
                return result
            if params["files"]:
                if not record_dir:
                    result.update(changed=False, files=[])
                    return result
                doc = self._snapshot(str(record_dir), host, task_vars)
                result.update(changed=False, files=self._record_files(doc, params["files"], task_vars))
                snapshot.save(str(record_dir), doc)
                return result
            # a copy: _execute_module adds Ansible's own _ansible_* arguments to what it is given
            read = self._execute_module(module_name=params["module"], module_args=dict(params["args"]), task_vars=task_vars)
            if record_dir:
                doc = self._snapshot(str(record_dir), host, task_vars)
                snapshot.record(doc, params["module"], params["args"], read)
                snapshot.save(str(record_dir), doc)
            result.update(read)
        except snapshot.SnapshotError as exc:
            result.update(failed=True, msg="host_read: %s" % exc)
        return result

    @staticmethod
    def _snapshot(directory: str, host: str, task_vars: Dict[str, Any]) -> Dict[str, Any]:
        """This run's snapshot of host so far (the CLI gives each recording run a fresh directory)."""
        if os.path.exists(snapshot.path_of(directory, host)):
            return snapshot.load(directory, host)
        taken = datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat()
        collection = str(task_vars.get("llmops_vllm_snapshot_collection") or "")
        return snapshot.empty(host, taken, collection)

    def _replay(self, doc: Dict[str, Any], module: str, args: Dict[str, Any], task_vars: Dict[str, Any]) -> Dict[str, Any]:
        hit = snapshot.recorded(doc, module, args)
        if hit is not None:
            return hit
        how = snapshot.REPLAY.get(module)
        if how == "servers":
            held = snapshot.recorded_of(doc, module)
            if held:
                servers = held[0]["result"].get("servers") or []
                return {"changed": False, "servers": servers, "foreign": [s for s in servers if not s.get("managed_by")],
                        "conflicts": conflicts(servers, args.get("port"), args.get("gpu_indices") or [])}
        elif how == "new_venv":
            listed = snapshot.listed_dirs(doc, os.path.dirname(str(args.get("path") or "").rstrip("/")))
            if listed is not None and str(args.get("path")) not in listed:
                return snapshot.new_venv(args)
        elif how == "local":
            local = dict(args)
            if module == "llmops.vllm.hf_model":
                free = snapshot.free_bytes_for(doc, str(args.get("models_root") or ""))
                if free is None:
                    raise snapshot.SnapshotError(snapshot.missing(doc, module, args))
                local["free_bytes"] = free
            ran: Dict[str, Any] = self._execute_module(module_name=module, module_args=local, task_vars=task_vars)
            return ran
        raise snapshot.SnapshotError(snapshot.missing(doc, module, args))

    def _record_files(self, doc: Dict[str, Any], patterns: List[str], task_vars: Dict[str, Any]) -> List[str]:
        """Read every file a pattern names (a path; a * in the last part is a glob) into the snapshot."""
        found: List[str] = []
        for pattern in patterns:
            directory, name = os.path.split(pattern)
            listing = self._execute_module(module_name="ansible.builtin.find", task_vars=task_vars,
                                           module_args={"paths": [directory], "patterns": [name], "file_type": "file"})
            if listing.get("failed"):
                raise snapshot.SnapshotError("reading %s for the snapshot: %s" % (pattern, listing.get("msg")))
            for item in listing.get("files") or []:
                read = self._execute_module(module_name="ansible.builtin.slurp", module_args={"src": item["path"]},
                                            task_vars=task_vars)
                if read.get("failed"):
                    raise snapshot.SnapshotError("reading %s for the snapshot: %s" % (item["path"], read.get("msg")))
                snapshot.add_file(doc, item["path"], to_text(base64.b64decode(read["content"]), errors="surrogate_or_strict"),
                                  str(item.get("mode") or "0644"))
                found.append(item["path"])
        return sorted(found)
