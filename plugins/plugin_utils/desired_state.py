# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The desired state a GitOps pipeline edits: which model each host serves, and how.

One document per host, the inventory variable ``vllm_model``::

    vllm_model:
      name: minimax-m2-5              # the unit is vllm-<name>.service
      repo_id: MiniMaxAI/MiniMax-M2.5
      revision: main                  # branch, tag or commit; the rollout pins the commit
      # revision_policy: commit       # commit | tag | any; unset: any revision, a branch with a warning
      served_model_name: minimax-m2.5 # default: name
      port: 8000
      bind: 10.0.0.5                  # default: the host's primary IPv4 address
      plan: {objective: latency}      # overrides of any planner choice (PlanRequest); objective:
                                      # throughput (default) or latency
      extra_args: [--seed, "1"]
      env: {NCCL_DEBUG: WARN}
      # group: [gpu-a, gpu-b]         # a multi-node serving group: these inventory hosts serve the model
                                      # together (the first is the head), each with this same document

Several models on one host: ``vllm_models``, a list of such documents (``vllm_model`` is a list of one;
give one of the two). Their names, ports and GPU pins (``plan: {gpus: [...]}``) must differ;
``llmops-vllm plan --model A --model B`` allocates the GPUs of the ones without a pin, and so does the
rollout of the set (roles/rollout/tasks/set.yml), which touches only the models that differ.

Validated before any task runs, with every problem of the document in one readable message.
Values still holding Jinja (``{{ ... }}``, as `ansible-inventory --list` prints them) are accepted
here and checked again once Ansible has templated them.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Dict, List, Optional, Tuple

from ansible_collections.llmops.vllm.plugins.module_utils import host_state
from ansible_collections.llmops.vllm.plugins.module_utils.systemd_unit import CONTROL_RE
# pydantic, or the contract's stand-ins when it is missing (the planner then says what to install).
from ansible_collections.llmops.vllm.plugins.plugin_utils.contracts import (
    PYDANTIC_IMPORT_ERROR, BaseModel, ConfigDict, Field, PlanInputError, PlanRequest, ValidationError,
    field_validator, flag_name, model_validator)

NAME_RE = host_state.NAME_RE
REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
REVISION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,254}$")
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
REVISION_POLICIES = ("commit", "tag", "any")
# vLLM options the plan and the rollout set themselves: in extra_args (appended after the plan's argv, so argparse
# would let them win) they would silently override the bind address, the port, the served name, the layout or a
# secret. Each names what owns it. Spellings are normalized first (contracts.flag_name: ``--x_y=v`` is ``--x-y``),
# and an abbreviation argparse would expand (a prefix of an owned option) is refused too.
OWNED_OPTIONS = {
    "--host": "vllm_model.bind", "--uds": "vllm_model.bind and port", "--port": "vllm_model.port",
    "--served-model-name": "vllm_model.served_model_name", "--model": "vllm_model.repo_id",
    "--tensor-parallel-size": "vllm_model.plan.tensor_parallel_size",
    "--data-parallel-size": "vllm_model.plan.data_parallel_size",
    "--pipeline-parallel-size": "vllm_model.group (the planner's pipeline stages)",
    "--enable-expert-parallel": "vllm_model.plan.enable_expert_parallel",
    "--no-enable-expert-parallel": "vllm_model.plan.enable_expert_parallel",
    "--data-parallel-size-local": "vllm_model.group", "--data-parallel-address": "vllm_model.group",
    "--data-parallel-rpc-port": "vllm_model.group", "--data-parallel-start-rank": "vllm_model.group",
    "--data-parallel-rank": "vllm_model.group", "--headless": "vllm_model.group", "--nnodes": "vllm_model.group",
    "--node-rank": "vllm_model.group", "--master-addr": "vllm_model.group", "--master-port": "vllm_model.group",
    "--api-key": "rollout_api_key (no_log; a 0600 environment file, never the command line)",
    "--hf-token": "rollout_hub_token (no_log, never the command line)",
    "--trust-remote-code": "plan: {trust_remote_code: true} in vllm_model (so the planner knows the checkpoint's own code runs)",
    "--no-trust-remote-code": "vllm_model.plan.trust_remote_code",
}
# vLLM's short aliases of owned options (-tp 4, -tp=4, -tp4).
OWNED_SHORT_OPTIONS = {"-tp": "--tensor-parallel-size", "-dp": "--data-parallel-size",
                       "-pp": "--pipeline-parallel-size", "-ep": "--enable-expert-parallel",
                       "-dpl": "--data-parallel-size-local", "-dpa": "--data-parallel-address",
                       "-dpr": "--data-parallel-rank", "-dpp": "--data-parallel-rpc-port"}
SERVED_NAME_MAX = 256


def owned_option(arg: str) -> Optional[str]:
    """The owned option ``arg`` would set (in any spelling vLLM's parser accepts), else None."""
    flag = flag_name(arg)
    if flag is None:
        if arg.startswith("-") and not arg.startswith("--"):
            return next((long for short, long in sorted(OWNED_SHORT_OPTIONS.items(), key=lambda kv: -len(kv[0]))
                         if arg.startswith(short)), None)
        return None
    if flag in OWNED_OPTIONS:
        return flag
    # argparse expands an unambiguous prefix (allow_abbrev): --served-model is --served-model-name.
    return next((owned for owned in sorted(OWNED_OPTIONS) if len(flag) > 3 and owned.startswith(flag)), None)


def control_characters(value: Any, path: str) -> List[str]:
    """Where a document holds a control character, in any key or string value (``path[key]...``)."""
    found: List[str] = []
    if isinstance(value, str):
        match = CONTROL_RE.search(value)
        if match:
            found.append("%s: holds a control character (%r); a value cannot span lines or carry control characters"
                         % (path, match.group()))
    elif isinstance(value, dict):
        for key, item in value.items():
            found += control_characters(key, "%s (a key)" % path) if isinstance(key, str) else []
            found += control_characters(item, "%s.%s" % (path, key))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            found += control_characters(item, "%s[%d]" % (path, index))
    return found


# Planner choices a host may pin; the rest of PlanRequest is filled in by the rollout itself.
SWAPS = ("stop-start", "auto", "bluegreen")
PLAN_OWNED_BY_ROLLOUT = ("model_id", "model_path", "served_model_name", "host", "port", "extra_args", "env")


def _templated(value: Any) -> bool:
    return isinstance(value, str) and "{{" in value


class DesiredModel(BaseModel):
    """``vllm_model`` of one host."""
    model_config = ConfigDict(extra="forbid")

    name: str
    repo_id: str
    revision: str = "main"
    served_model_name: Optional[str] = None
    port: Any = 8000
    bind: Optional[str] = None
    plan: Dict[str, Any] = Field(default_factory=dict)
    extra_args: List[str] = Field(default_factory=list)
    env: Dict[str, str] = Field(default_factory=dict)
    # What `revision` may be: commit (a full sha), tag (a tag or a commit), any; unset - any, with a
    # warning for a branch. Checked here where it can be (commit) and by the preflight against the hub.
    revision_policy: Optional[str] = None
    # A multi-node serving group: the inventory hosts that serve this model together with vLLM's own
    # multi-node runtime, the head first (docs/rollout.md, "Multi-node serving groups").
    group: List[str] = Field(default_factory=list)
    # How a new model takes this port over on its host (docs/rollout.md "Blue/green"): stop-start - the old
    # unit stops, the new one starts on `port`; auto - a host-local HAProxy holds `port` and the planner starts
    # the new model beside the old one when it fits (blue/green), else stop-start behind it; bluegreen - forced,
    # refused before anything stops when it does not fit.
    swap: str = "stop-start"
    # Behind the host proxy (swap auto or bluegreen) vLLM listens on one of two ports (same address), alternating
    # between rollouts; default port + 10000 and port + 20000.
    slot_ports: List[int] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _one_line_values(cls, data: Any) -> Any:
        # Every string of the document ends up in a unit, a command line or a proxy's configuration on the host:
        # none may carry a line break or another control character (docs/security.md).
        problems = control_characters(data, "value") if isinstance(data, dict) else []
        if problems:
            raise ValueError("; ".join(problems))
        return data

    @field_validator("served_model_name")
    @classmethod
    def _served_model_name(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not _templated(value) and (
                not value.strip() or len(value) > SERVED_NAME_MAX or value != value.strip()):
            raise ValueError("must be 1-%d characters without leading or trailing spaces (clients send it as "
                             "\"model\"), got %r" % (SERVED_NAME_MAX, value[:80]))
        return value

    @field_validator("swap")
    @classmethod
    def _swap(cls, value: str) -> str:
        if not _templated(value) and value not in SWAPS:
            raise ValueError("must be one of %s, got %r" % (", ".join(SWAPS), value))
        return value

    @field_validator("slot_ports")
    @classmethod
    def _slot_ports(cls, value: List[int]) -> List[int]:
        if value and (len(value) != 2 or len(set(value)) != 2 or not all(1 <= int(v) <= 65535 for v in value)):
            raise ValueError("must be two different TCP ports (1-65535), got %r" % (value,))
        return [int(v) for v in value]

    @field_validator("group")
    @classmethod
    def _group(cls, value: List[str]) -> List[str]:
        doubles = sorted({h for h in value if value.count(h) > 1})
        if doubles:
            raise ValueError("lists %s more than once; each host is one node of the group" % ", ".join(doubles))
        return value

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME_RE.match(value):
            raise ValueError("must be 1-63 lower-case letters, digits or '-', starting with a letter or digit "
                             "(it names the unit vllm-<name>.service), got %r" % value)
        return value

    @field_validator("repo_id")
    @classmethod
    def _repo(cls, value: str) -> str:
        if not _templated(value) and not REPO_RE.match(value):
            raise ValueError("must be ORG/NAME as on the hub, got %r" % value)
        return value

    @field_validator("revision")
    @classmethod
    def _revision(cls, value: str) -> str:
        if not _templated(value) and not REVISION_RE.match(value):
            raise ValueError("must be a branch, tag or commit sha, got %r" % value)
        return value

    @field_validator("port")
    @classmethod
    def _port(cls, value: Any) -> Any:
        if _templated(value):
            return value
        try:
            port = int(value)
        except (TypeError, ValueError):
            raise ValueError("must be a TCP port number, got %r" % (value,))
        if not 1 <= port <= 65535 or str(port) != str(value).strip():
            raise ValueError("must be a TCP port number 1-65535, got %r" % (value,))
        return port

    @field_validator("bind")
    @classmethod
    def _bind(cls, value: Optional[str]) -> Optional[str]:
        if value is None or _templated(value):
            return value
        try:
            address = ipaddress.ip_address(value)
        except ValueError:
            raise ValueError("must be an IP address the server listens on, got %r" % value)
        zone = getattr(address, "scope_id", None)
        if zone:
            raise ValueError("%r carries an IPv6 zone id (%%%s): vLLM and the host proxy cannot bind to it; give a "
                             "global or unique-local address of the host" % (value, zone))
        return value

    @field_validator("plan")
    @classmethod
    def _plan(cls, value: Dict[str, Any]) -> Dict[str, Any]:
        owned = sorted(set(value) & set(PLAN_OWNED_BY_ROLLOUT))
        if owned:
            raise ValueError("%s: set these at the top of vllm_model, not under plan" % ", ".join(owned))
        concrete = {k: v for k, v in value.items() if not _templated(v)}
        PlanRequest.model_validate(concrete)  # unknown keys and bad values are errors here already
        return value

    @field_validator("extra_args")
    @classmethod
    def _extra_args(cls, value: List[str]) -> List[str]:
        for arg in value:
            owned = owned_option(arg)
            if owned is None:
                continue
            shown = arg.split("=", 1)[0]
            if owned in ("--api-key", "--hf-token"):
                raise ValueError("%s would put a secret in the unit's command line; set %s instead" % (shown, OWNED_OPTIONS[owned]))
            raise ValueError("%s sets %s, which the rollout owns: set %s instead (in extra_args it would silently "
                             "override the plan)" % (shown, owned, OWNED_OPTIONS[owned]))
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: Dict[str, str]) -> Dict[str, str]:
        for key in value:
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
                raise ValueError("environment variable name %r is not valid" % key)
            if key in ("VLLM_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
                raise ValueError("%s is a secret: set it through rollout_api_key / rollout_hub_token (no_log, 0600 "
                                 "environment file), not in plain env" % key)
        return value

    @field_validator("revision_policy")
    @classmethod
    def _revision_policy(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not _templated(value) and value not in REVISION_POLICIES:
            raise ValueError("must be one of %s (unset: any revision, a branch with a warning), got %r"
                             % (", ".join(REVISION_POLICIES), value))
        return value

    @model_validator(mode="after")
    def _defaults(self) -> DesiredModel:
        if not self.served_model_name:
            self.served_model_name = self.name
        if self.swap not in ("stop-start",) and not _templated(self.swap) and not _templated(self.port):
            if self.group:
                raise ValueError("swap %s: a multi-node group restarts as one; use swap stop-start" % self.swap)
            if not self.slot_ports:
                if int(self.port) + 20000 > 65535:
                    raise ValueError("swap %s: port %s leaves no room for the default slot ports (port + 10000, port + "
                                     "20000); set slot_ports: [A, B]" % (self.swap, self.port))
                self.slot_ports = [int(self.port) + 10000, int(self.port) + 20000]
            if int(self.port) in self.slot_ports:
                raise ValueError("slot_ports %s: the host proxy holds port %s itself; give two other ports"
                                 % (self.slot_ports, self.port))
        if self.revision_policy == "commit" and not _templated(self.revision) and not COMMIT_RE.match(self.revision):
            raise ValueError("revision %r is not a commit sha, and revision_policy is commit: pin the 40-character "
                             "commit (the rollout's report and the host state name the one it resolved), or set "
                             "revision_policy to tag or any" % self.revision)
        return self

    @property
    def unit(self) -> str:
        return host_state.unit_name(self.name)


def _messages(exc: ValidationError, root: str) -> List[str]:
    out: List[str] = []
    for err in exc.errors():
        loc = ".".join([root] + [str(p) for p in err.get("loc", ())])
        message = str(err.get("msg", "")).replace("Value error, ", "")
        if err.get("type") == "extra_forbidden":
            message = "unknown key (a typo?)"
        elif err.get("type") == "missing":
            message = "required"
        out.append("%s: %s" % (loc, message))
    return out


def validate_model(document: Any, root: str = "vllm_model") -> Dict[str, Any]:
    """Validate one host's ``vllm_model``; returns the normalised dict or raises PlanInputError
    listing every problem."""
    if PYDANTIC_IMPORT_ERROR is not None:
        raise PlanInputError("desired state: pydantic >= 2 is needed on the controller (%s)" % PYDANTIC_IMPORT_ERROR)
    if not isinstance(document, dict):
        raise PlanInputError("%s: expected a mapping with at least name and repo_id, got %s"
                             % (root, type(document).__name__))
    try:
        model = DesiredModel.model_validate(document)
    except ValidationError as exc:
        raise PlanInputError("; ".join(_messages(exc, root)))
    out = model.model_dump()
    out["unit"] = model.unit
    return out


def validate_models(documents: Any, root: str = "vllm_models") -> List[Dict[str, Any]]:
    """Validate a host's ``vllm_models`` list: each document as ``vllm_model``, then across them -
    no two with one name, one port, or a GPU in both pins. PlanInputError lists every problem."""
    if not isinstance(documents, list) or not documents:
        raise PlanInputError("%s: expected a list of one or more models, each shaped like vllm_model, got %r"
                             % (root, documents if not isinstance(documents, list) else "[]"))
    models, problems = [], []
    for index, document in enumerate(documents):
        try:
            models.append((index, validate_model(document, "%s[%d]" % (root, index))))
        except PlanInputError as exc:
            problems.append(str(exc))
    for index, model in models:
        if model.get("group"):
            problems.append("%s[%d].group: a multi-node serving group is the only model of its hosts; give it as "
                            "vllm_model" % (root, index))
    for key in ("name", "port"):
        seen: Dict[Any, int] = {}
        for index, model in models:
            if _templated(model.get(key)):
                continue
            if model.get(key) in seen:
                problems.append("%s[%d].%s: %r is model %d's too; each model needs its own" % (
                    root, index, key, model.get(key), seen[model[key]]))
            else:
                seen[model[key]] = index
    held: Dict[int, int] = {}
    for index, model in models:  # the slot ports of a model behind the host proxy are its ports too
        for port in model.get("slot_ports") or []:
            owner = next((i for i, m in models if i != index and port in [m.get("port")] + list(m.get("slot_ports") or [])), None)
            if owner is not None and held.get(port) is None:
                problems.append("%s[%d].slot_ports: %s is a port of model %d too; each model needs its own" % (
                    root, index, port, owner))
                held[port] = index
    pinned: Dict[int, int] = {}
    for index, model in models:
        gpus = (model.get("plan") or {}).get("gpus")
        if not isinstance(gpus, list):
            continue
        overlap = sorted(gpu for gpu in gpus if gpu in pinned)
        if overlap:
            problems.append("%s[%d].plan.gpus: GPUs %s are pinned by model %d too; pins must not overlap" % (
                root, index, overlap, pinned[overlap[0]]))
        for gpu in gpus:
            pinned.setdefault(gpu, index)
    if problems:
        raise PlanInputError("; ".join(problems))
    return [model for _index, model in models]


def host_models(variables: Dict[str, Any], where: str = "") -> Optional[List[Dict[str, Any]]]:
    """The models one host's variables desire, validated: ``vllm_models``, or ``vllm_model`` as a list of
    one; None when neither is set. Both set is refused (one way to say it)."""
    prefix = "%s: " % where if where else ""
    if "vllm_models" in variables and "vllm_model" in variables:
        raise PlanInputError("%sgive vllm_models (several models) or vllm_model (one), not both" % prefix)
    if "vllm_models" in variables:
        return validate_models(variables["vllm_models"], prefix + "vllm_models")
    if "vllm_model" in variables:
        return [validate_model(variables["vllm_model"], prefix + "vllm_model")]
    return None


def validate_inventory(hostvars: Dict[str, Dict[str, Any]], variable: str = "vllm_model"
                       ) -> Tuple[Dict[str, Dict[str, Any]], Dict[str, str]]:
    """Validate ``variable`` of every host of an `ansible-inventory --list` dump.

    Returns (valid, problems): valid maps host -> normalised document (hosts without the variable
    are skipped), problems maps host -> message. Two hosts may share a unit name, but one host
    cannot serve two documents.
    """
    valid: Dict[str, Dict[str, Any]] = {}
    problems: Dict[str, str] = {}
    for host in sorted(hostvars):
        if variable not in hostvars[host]:
            continue
        try:
            valid[host] = validate_model(hostvars[host][variable], "%s: %s" % (host, variable))
        except PlanInputError as exc:
            problems[host] = str(exc)
    for host, problem in group_problems(valid).items():
        problems[host] = problem
        valid.pop(host, None)
    return valid, problems


def group_problems(valid: Dict[str, Dict[str, Any]]) -> Dict[str, str]:
    """Multi-node serving groups across an inventory's valid documents: each host is in its own
    ``group``, and every host of a group desires the same model (all but ``bind``)."""
    def same(document: Dict[str, Any]) -> Dict[str, Any]:
        return {k: v for k, v in document.items() if k != "bind"}
    problems: Dict[str, str] = {}
    for host, document in valid.items():
        group = document.get("group") or []
        if not group or any(_templated(h) for h in group):
            continue
        if host not in group:
            problems[host] = "%s: vllm_model.group %s does not list the host itself" % (host, group)
            continue
        missing = [h for h in group if h not in valid]
        differ = [h for h in group if h in valid and same(valid[h]) != same(document)]
        if missing or differ:
            problems[host] = "%s: vllm_model.group %s: %s" % (host, group, "; ".join(
                (["%s has no valid vllm_model" % ", ".join(missing)] if missing else [])
                + (["%s desire(s) another model; every host of a group needs the same vllm_model (all but bind)"
                    % ", ".join(differ)] if differ else [])))
    return problems
