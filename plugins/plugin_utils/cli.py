# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""``llmops-vllm``: the planner without hardware, for reviewers and GitOps pipelines.

    llmops-vllm topology --topo-file F [--query-file F] [--numactl-file F] [--sysfs-root DIR] [--json]
    llmops-vllm model --model PATH [--json]
    llmops-vllm plan (--topo-file F [--query-file F] | --facts F) --model PATH [overrides] [--json]
    llmops-vllm compare <host inputs> --model A [--model-id ID] --model B ... [overrides] [--json]
    llmops-vllm validate --inventory PATH [--vault-password-file F] [--json]   the desired state (vllm_model) of every host
    llmops-vllm apply -i INVENTORY [-l LIMIT] [-e VARS] [--lock-timeout S] [--json]   roll out (ansible-runner)
    llmops-vllm diff  -i INVENTORY [-l LIMIT] [-e VARS] [--json]                      what apply would change

Exit codes: 0 success; 2 valid input but the model does not fit (plan; compare: none fits); 1 bad
input or usage. apply: 0 applied or nothing to change, 1 bad input, 2 refused before anything was
touched, 3 failed and the old model serves, 4 failed and a host may not serve; diff: 0 with or
without changes, 2 when the preflight would refuse (plugin_utils/apply.py).
With --json stdout is exactly one JSON object ({"error": "..."} on exit 1) and stderr one
readable line; never a traceback. The same functions back the Ansible modules, so the keys are
the same (docs/ARCHITECTURE.md, "Contracts").
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Dict, List, NoReturn, Optional, Sequence, Tuple

from ansible_collections.llmops.vllm.plugins.module_utils import model_config, topology
from ansible_collections.llmops.vllm.plugins.plugin_utils import (
    contracts, desired_state, planner, planner_nodes, planner_performance, planner_rules)
from ansible_collections.llmops.vllm.plugins.plugin_utils.planner_performance import (
    DEFAULT_INPUT_LEN, DEFAULT_OUTPUT_LEN, DEFAULT_SPECULATIVE_ACCEPTANCE)

EXIT_OK, EXIT_BAD_INPUT, EXIT_DOES_NOT_FIT = 0, 1, 2
GIB = planner_rules.GIB


class UsageError(Exception):
    """Bad command line (argparse's own exit 2 becomes our exit 1)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError("%s: %s" % (self.prog, message))


def _read_text(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError as exc:
        raise UsageError("%s %s: cannot read it (%s)" % (what, path, exc.strerror or exc))


def _read_json(path: str, what: str) -> Dict[str, Any]:
    text = _read_text(path, what)
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise UsageError("%s %s: not valid JSON (%s)" % (what, path, exc))
    if not isinstance(data, dict):
        raise UsageError("%s %s: expected a JSON object" % (what, path))
    return data


def host_facts_from_args(args: argparse.Namespace) -> Dict[str, Any]:
    """Topology facts from captured command outputs, or a facts JSON (gpu_topology_info output)."""
    return hosts_facts_from_args(args)[0]


def _nth(values: Any, n: int) -> Optional[str]:
    """The n-th of an appended option (plan: one per host), or the single value."""
    if isinstance(values, list):
        return values[n] if n < len(values) else None
    return values if n == 0 else None


def hosts_facts_from_args(args: argparse.Namespace) -> List[Dict[str, Any]]:
    """One host's facts per --topo-file (the n-th --query-file / --numactl-file belongs to the n-th)."""
    if getattr(args, "facts", None):
        return [_read_json(path, "facts file") for path in (args.facts if isinstance(args.facts, list) else [args.facts])]
    topo_files = args.topo_file if isinstance(args.topo_file, list) else ([args.topo_file] if args.topo_file else [])
    if not topo_files:
        raise UsageError("give --topo-file (nvidia-smi topo -m output)%s" % (
            " or --facts (a gpu_topology_info JSON)" if hasattr(args, "facts") else ""))
    for option in ("query_file", "numactl_file"):
        given = getattr(args, option)
        if isinstance(given, list) and len(given) > len(topo_files):
            raise UsageError("--%s given %d times for %d --topo-file" % (option.replace("_", "-"), len(given),
                                                                         len(topo_files)))
    hosts = []
    for n, topo_file in enumerate(topo_files):
        query, numactl = _nth(args.query_file, n), _nth(args.numactl_file, n)
        hosts.append(topology.build_topology(
            topo_text=_read_text(topo_file, "topo file"),
            query_text=_read_text(query, "query file") if query else None,
            numactl_text=_read_text(numactl, "numactl file") if numactl else None,
            sysfs_root=args.sysfs_root if n == 0 else None))
    return hosts


def _add_topology_inputs(parser: argparse.ArgumentParser, facts_option: bool, hosts: bool = False) -> None:
    """The captured outputs of a host; with ``hosts`` each may be repeated, one per host of a group."""
    action = "append" if hosts else "store"
    each = " (repeat per host: the n-th belongs to the n-th --topo-file)" if hosts else ""
    parser.add_argument("--topo-file", action=action, help="`nvidia-smi topo -m` output" + each)
    parser.add_argument("--query-file", action=action,
                        help="`nvidia-smi --query-gpu=... --format=csv` or `nvidia-smi -q` output" + each)
    parser.add_argument("--numactl-file", action=action, help="`numactl -H` output" + each)
    parser.add_argument("--sysfs-root", help="a directory holding sys/bus/pci/devices and sys/devices/system/node")
    if facts_option:
        parser.add_argument("--facts", action=action, help="host facts JSON (the output of gpu_topology_info or "
                                                           "`topology --json`) instead of the captured outputs" + each)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="llmops-vllm", description="Plan how vLLM should serve a model on a host, from captured facts.")
    sub = parser.add_subparsers(dest="command", metavar="{topology,model,plan,compare,validate,apply,diff}", parser_class=_Parser)
    sub.required = True

    p_topo = sub.add_parser("topology", help="GPU topology facts from captured nvidia-smi/numactl/sysfs outputs")
    _add_topology_inputs(p_topo, facts_option=False)
    p_topo.add_argument("--json", action="store_true", help="one JSON object on stdout")

    p_model = sub.add_parser("model", help="facts about a model from its config.json")
    p_model.add_argument("--model", required=True, help="a model directory (config.json, ...) or a config.json file")
    p_model.add_argument("--json", action="store_true")

    p_plan = sub.add_parser("plan", help="a serving plan for a model on a host")
    _add_plan_options(p_plan)
    p_plan.add_argument("--model", help="a model directory (config.json, ...) or a config.json file")
    p_plan.add_argument("--models-file", help="several models on one host: a YAML list shaped like vllm_models, or a "
                                              "host_vars file holding vllm_models; the options given here apply to "
                                              "every model, each model's plan: pins on top")
    p_plan.add_argument("--config-dir", help="with --models-file: where each model's config is - DIR/ORG/NAME/config.json, "
                                             "DIR/ORG/NAME.json or DIR/ORG__NAME.json (default: the file's directory)")
    p_plan.add_argument("--model-id", help="ORG/NAME on the hub (picks parsers between generations, names the model)")
    p_plan.add_argument("--node-host", action="append", default=[],
                        help="with several --topo-file: the address the n-th host is reached at (the head's is vLLM's "
                             "--master-addr; default node-0, node-1, ...)")
    p_plan.add_argument("--name", help="with several --model: this model's name (its unit's; default from the model id)")
    p_plan.add_argument("--port", type=int, help="with several --model: this model's port (each its own)")
    p_plan.add_argument("--current", help="with several --model: the host's state file (vllm_state), whose models keep "
                                          "the GPUs they hold where they still fit")
    p_plan.add_argument("--network-gbps", type=float,
                        help="with several --topo-file: the link between the hosts in Gb/s (default %g)"
                             % planner_nodes.DEFAULT_NETWORK_GBPS)
    p_plan.add_argument("--json", action="store_true")

    p_compare = sub.add_parser("compare", help="rank models on one host by predicted speed and memory headroom")
    _add_plan_options(p_compare)
    p_compare.add_argument("--model", action="append", required=True,
                           help="a model directory or config.json; repeat for each model to compare")
    p_compare.add_argument("--model-id", action="append", default=[],
                           help="ORG/NAME of the n-th --model (repeat in the same order)")
    p_compare.add_argument("--json", action="store_true")

    p_valid = sub.add_parser("validate", help="check the desired state (vllm_model) of every host of an inventory")
    p_valid.add_argument("--inventory", "-i", required=True, help="inventory path, as for ansible-playbook -i")
    p_valid.add_argument("--variable", default="vllm_model")
    p_valid.add_argument("--vault-password-file", help="for the inventory's Vault-encrypted vars files")
    p_valid.add_argument("--json", action="store_true")

    for name, what in (("apply", "roll the inventory's desired state out (playbook llmops.vllm.rollout, through ansible-runner)"),
                       ("diff", "what apply would change: the same play in check mode with --diff (changes nothing)")):
        p_run = sub.add_parser(name, help=what)
        p_run.add_argument("--inventory", "-i", action="append", required=True, help="inventory path (repeat for several)")
        p_run.add_argument("--limit", "-l", help="hosts or groups, as for ansible-playbook --limit")
        p_run.add_argument("--extra-vars", "-e", action="append", default=[],
                           help="variables, as for ansible-playbook -e (key=value, JSON/YAML, @file)")
        p_run.add_argument("--vault-password-file", help="for the inventory's and -e files' Vault secrets")
        p_run.add_argument("--lock-timeout", type=int,
                           help="seconds to wait for another run's lock on a host (default: rollout_lock_timeout, 300)")
        p_run.add_argument("--artifacts", default=os.environ.get("LLMOPS_VLLM_ARTIFACTS", ".llmops-vllm"),
                           help="where ansible-runner's artifacts and the summary go (default .llmops-vllm; "
                                "LLMOPS_VLLM_ARTIFACTS)")
        p_run.add_argument("--playbook", default="llmops.vllm.rollout", help="the rollout playbook (a path or an FQCN)")
        p_run.add_argument("--live", action=argparse.BooleanOptionalAction, default=None,
                           help="one live progress line (default: when stderr is a terminal)")
        p_run.add_argument("--verbose", "-v", action="count", default=0)
        p_run.add_argument("--json", action="store_true", help="the summary as one JSON object on stdout")
        if name == "apply":
            p_run.add_argument("--snapshot", metavar="DIR",
                               help="then record what each host now serves and what its preview reads (DIR/<host>.json), "
                                    "for diff --offline DIR (an extra preview run)")
        else:
            p_run.add_argument("--offline", metavar="DIR",
                               help="preview on the controller from the hosts' snapshots in DIR (apply --snapshot DIR): "
                                    "no connection to any host")
    return parser


def _add_plan_options(p_plan: argparse.ArgumentParser) -> None:
    """The host inputs and the overrides `plan` and `compare` share."""
    _add_topology_inputs(p_plan, facts_option=True, hosts=True)
    p_plan.add_argument("--gpu-memory-gib", type=float, help="memory per GPU in GiB (2^30 bytes); overrides the query file")
    p_plan.add_argument("--model-path", help="the path vLLM will load from on the host (default: --model-id, else --model)")
    p_plan.add_argument("--served-model-name")
    p_plan.add_argument("--weights-bytes", type=int, help="checkpoint size in bytes when no safetensors index is at hand")
    p_plan.add_argument("--vllm-facts", help="vllm_info JSON of the host's vLLM (default: the recorded current release)")
    p_plan.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p_plan.add_argument("--max-model-len", type=int)
    p_plan.add_argument("--min-sequences", type=int, help="KV target: sequences of max_model_len that must fit (default 4)")
    p_plan.add_argument("--tensor-parallel-size", type=int)
    p_plan.add_argument("--nodes", type=int, help="with several --topo-file: the group's size (default: as few hosts "
                                                  "as hold the model)")
    p_plan.add_argument("--data-parallel-size", type=int)
    p_plan.add_argument("--enable-expert-parallel", action=argparse.BooleanOptionalAction, default=None,
                        help="force expert parallelism on (or off with --no-enable-expert-parallel); default: on for "
                             "MoE models on more than one GPU")
    p_plan.add_argument("--gpu-memory-utilization", type=float)
    p_plan.add_argument("--kv-cache-dtype", default="auto")
    p_plan.add_argument("--gpus", help="comma-separated nvidia-smi indices the plan may use, e.g. 0,1,2,3")
    p_plan.add_argument("--reserved-gpus", help="comma-separated indices a model that keeps serving holds (a blue/green "
                        "swap plans the new model beside it), e.g. 0,1,2,3")
    p_plan.add_argument("--reserved-memory-gib", type=float,
                        help="CPU hosts: RAM in GiB a model that keeps serving uses (a blue/green swap)")
    p_plan.add_argument("--tool-call-parser", help="a parser name, or none")
    p_plan.add_argument("--reasoning-parser", help="a parser name, or none")
    p_plan.add_argument("--numa-bind", choices=("auto", "vllm", "numactl", "off"), default="auto")
    p_plan.add_argument("--objective", choices=("throughput", "latency"), default="throughput",
                        help="throughput (default): the layout with the most predicted output tok/s (at --concurrency "
                             "when given, else at the load its KV cache holds); latency: the most single-stream tok/s")
    p_plan.add_argument("--concurrency", type=int, help="requests in flight for the predicted figures (default 1)")
    p_plan.add_argument("--input-len", type=int, help="prompt tokens per request (default %d)" % DEFAULT_INPUT_LEN)
    p_plan.add_argument("--output-len", type=int, help="output tokens per request (default %d)" % DEFAULT_OUTPUT_LEN)
    p_plan.add_argument("--speculative-acceptance", type=float,
                        help="assumed acceptance per drafted token when the plan speculates (default %g)"
                             % DEFAULT_SPECULATIVE_ACCEPTANCE)
    p_plan.add_argument("--enforce-eager", action=argparse.BooleanOptionalAction, default=None)
    p_plan.add_argument("--trust-remote-code", action=argparse.BooleanOptionalAction, default=None,
                        help="run the checkpoint's own code (auto_map) when vLLM has no native implementation; "
                             "never switched on by the planner itself")


def load_inventory(sources: Sequence[str], vault_password_file: Optional[str] = None, limit: Optional[str] = None,
                   pattern: str = "all") -> Dict[str, Any]:
    """The inventories as ansible-playbook loads them (plugin_utils/inventory.py, in a child process):
    {"hosts", "targets" (pattern within --limit), "hostvars"}. A missing or unparsable source, no host at
    all, or a --limit that matches none is a UsageError naming the inventory, what is wrong and what to do."""
    import subprocess

    from ansible_collections.llmops.vllm.plugins.plugin_utils import inventory

    missing = inventory.missing_files(sources, vault_password_file)  # without starting the child
    if missing:
        raise UsageError(missing)
    request = {"sources": list(sources), "vault_password_file": vault_password_file, "limit": limit, "pattern": pattern}
    # The child imports this same copy of the collection (the directory holding ansible_collections/ first) and,
    # with -P, no module from the current directory (an inventory repository).
    top = os.path.abspath(os.path.join(os.path.dirname(inventory.__file__), *[os.pardir] * 5))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(part for part in (top, os.environ.get("PYTHONPATH")) if part))
    try:
        proc = subprocess.run([sys.executable] + (["-P"] if sys.version_info >= (3, 11) else [])
                              + ["-m", "ansible_collections.llmops.vllm.plugins.plugin_utils.inventory"],
                              input=json.dumps(request), capture_output=True, text=True, timeout=300, check=False, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError("inventory %s: cannot load it (%s)" % (", ".join(sources), exc))
    try:
        answer = json.loads(proc.stdout)
    except ValueError:
        raise UsageError("inventory %s: cannot load it (status %d: %s)" % (
            ", ".join(sources), proc.returncode, " ".join(proc.stderr.split())[-400:]))
    if answer.get("error"):
        raise UsageError(answer["error"])
    for line in proc.stderr.splitlines():  # Ansible's own warnings about an inventory that loaded
        if line.startswith(("[WARNING]", "[DEPRECATION WARNING]")):
            sys.stderr.write("llmops-vllm: %s\n" % line)
    return dict(answer)


def validate_inventory(args: argparse.Namespace) -> Dict[str, Any]:
    hostvars = load_inventory([args.inventory], args.vault_password_file)["hostvars"]
    valid, problems = desired_state.validate_inventory(hostvars, args.variable)
    several: Dict[str, List[Dict[str, Any]]] = {}
    if args.variable == "vllm_model":  # and the list of several models, vllm_models
        for host in sorted(hostvars):
            if "vllm_models" in hostvars[host]:
                try:
                    several[host] = desired_state.host_models(hostvars[host], host) or []
                except contracts.PlanInputError as exc:
                    problems[host] = str(exc)
                    valid.pop(host, None)
    several = dict((host, docs) for host, docs in several.items() if host not in problems)
    return {"hosts": sorted(hostvars), "valid": valid, "several": several, "problems": problems,
            "without_model": sorted(set(hostvars) - set(valid) - set(several) - set(problems))}


def run_rollout(args: argparse.Namespace) -> Tuple[Dict[str, Any], int]:
    """apply / diff: validate the desired state on the controller, run the play, notify; (summary, exit code)."""
    from ansible_collections.llmops.vllm.plugins.plugin_utils import apply

    if args.lock_timeout is not None and args.lock_timeout < 0:
        raise UsageError("--lock-timeout %d: expected seconds >= 0" % args.lock_timeout)
    try:
        overrides = apply.extra_vars_documents(args.extra_vars)
    except ValueError as exc:
        raise UsageError(str(exc))
    pattern = str(overrides.get("rollout_hosts") or "vllm_servers")
    if "{{" in pattern:  # templated: the play resolves it
        pattern = "all"
    inventory = load_inventory(args.inventory, args.vault_password_file, args.limit, pattern)
    hosts = inventory["targets"]
    hostvars: Dict[str, Dict[str, Any]] = inventory["hostvars"]
    for variables in hostvars.values():
        variables.update(overrides)
    # What the controller can read as plain data; templated or Vault-encrypted values are for the
    # play's own validation (llmops.vllm.desired_state), which names them the same way.
    plain = dict((host, variables) for host, variables in hostvars.items()
                 if "{{" not in json.dumps(variables.get("vllm_model")) and "__ansible_vault" not in json.dumps(variables.get("vllm_model")))
    _valid, problems = desired_state.validate_inventory(plain, "vllm_model")
    for host in sorted(host for host, variables in plain.items() if "vllm_models" in variables):
        if "{{" in json.dumps(plain[host]["vllm_models"]) or "__ansible_vault" in json.dumps(plain[host]["vllm_models"]):
            continue
        try:
            desired_state.host_models(plain[host], host)
        except contracts.PlanInputError as exc:
            problems.setdefault(host, str(exc))
    if problems:
        raise UsageError("the desired state is not valid, nothing was run: %s" % "; ".join(
            problems[host] for host in sorted(problems)))
    if args.playbook in (apply.DEFAULT_PLAYBOOK, "llmops.vllm.plan") and not hosts:
        raise UsageError("no host of inventory %s%s is in %s, the hosts the rollout targets (rollout_hosts); put the "
                         "hosts in group vllm_servers, or pass -e rollout_hosts=GROUP - nothing was run" % (
                             ", ".join(args.inventory), " within --limit %s" % args.limit if args.limit else "", pattern))
    common = dict(playbook=args.playbook, vault_password_file=args.vault_password_file, verbosity=args.verbose, live=args.live)
    if getattr(args, "offline", None):
        summary = run_offline(args, hosts, common)
    else:
        summary = apply.run_playbook(args.command, args.inventory, args.extra_vars, args.limit, args.lock_timeout,
                                     args.artifacts, **common)
    if getattr(args, "snapshot", None) and any(doc["outcome"] != "unreachable" for doc in summary["hosts"].values()):
        summary["snapshot"] = apply.take_snapshot(args.snapshot, args.inventory, args.extra_vars, args.limit, args.artifacts,
                                                  **common)
        for host, why in sorted(summary["snapshot"]["failed"].items()):
            sys.stderr.write("llmops-vllm: warning: no snapshot of %s was taken (%s)\n" % (host, why))
    if any("llmops_vllm_webhook_url" in variables for variables in hostvars.values()) or "llmops_vllm_webhook_url" in overrides:
        summary["webhook"] = apply.notify(summary["summary_file"], args.inventory, args.extra_vars, args.vault_password_file)
        if not summary["webhook"]["posted"]:
            sys.stderr.write("llmops-vllm: warning: the webhook was not notified (%s)\n" % summary["webhook"]["error"])
    return summary, summary["exit_code"]


def run_offline(args: argparse.Namespace, hosts: List[str], common: Dict[str, Any]) -> Dict[str, Any]:
    """diff --offline DIR: the preview on the controller, each host's files and reads from its snapshot; ``hosts``:
    those the play targets (load_inventory)."""
    import shutil
    import tempfile

    from ansible_collections.llmops.vllm.plugins.plugin_utils import apply

    if not hosts:
        raise UsageError("--offline %s: the inventory names no host for the rollout (group vllm_servers, --limit)" % args.offline)
    root = tempfile.mkdtemp(prefix="llmops-vllm-offline-")
    try:
        try:
            apply.prepare_offline(args.offline, hosts, root)
        except ValueError as exc:
            raise UsageError("--offline: %s" % exc)
        summary = apply.run_playbook("diff", args.inventory, args.extra_vars, args.limit, None, args.artifacts,
                                     variables=apply.offline_variables(args.offline, root), offline=(args.offline, root), **common)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return summary


def _gpu_list(text: str, option: str = "--gpus") -> List[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip() != ""]
    except ValueError:
        raise UsageError("%s %r: expected comma-separated GPU indices such as 0,1,2,3" % (option, text))


def plan_inputs(args: argparse.Namespace, model_path: Optional[str] = None, model_id: Optional[str] = None
                ) -> Tuple[List[Dict[str, Any]], Dict[str, Any], Optional[Dict[str, Any]], Dict[str, Any]]:
    """(hosts' facts, model facts, vLLM facts, plan request) from one `plan` command line."""
    model_path = model_path or args.model
    model_id = model_id if model_path != args.model else args.model_id
    hosts = hosts_facts_from_args(args)
    if len(hosts) > 1 and getattr(args, "command", "plan") != "plan":
        raise UsageError("%s takes one host: give --topo-file once" % args.command)
    model = model_config.model_facts(model_path)
    vllm = _read_json(args.vllm_facts, "vLLM facts file") if args.vllm_facts else None
    if vllm is not None:
        vllm.setdefault("source", "installed")
    request: Dict[str, Any] = {
        "model_id": model_id, "model_path": args.model_path, "served_model_name": args.served_model_name,
        "weights_bytes": args.weights_bytes, "device": args.device, "max_model_len": args.max_model_len,
        "tensor_parallel_size": args.tensor_parallel_size, "data_parallel_size": args.data_parallel_size,
        "nodes": getattr(args, "nodes", None),
        "enable_expert_parallel": args.enable_expert_parallel,
        "gpu_memory_utilization": args.gpu_memory_utilization, "kv_cache_dtype": args.kv_cache_dtype,
        "gpus": _gpu_list(args.gpus) if args.gpus else None,
        "reserved_gpus": _gpu_list(args.reserved_gpus, "--reserved-gpus") if getattr(args, "reserved_gpus", None) else [],
        "reserved_memory_bytes": int(args.reserved_memory_gib * GIB) if getattr(args, "reserved_memory_gib", None) else 0,
        "tool_call_parser": args.tool_call_parser, "reasoning_parser": args.reasoning_parser,
        "numa_bind": args.numa_bind, "objective": args.objective, "enforce_eager": args.enforce_eager,
        "trust_remote_code": args.trust_remote_code, "concurrency": args.concurrency, "input_len": args.input_len,
        "output_len": args.output_len, "speculative_acceptance": args.speculative_acceptance,
    }
    if getattr(args, "port", None) is not None:
        request["port"] = args.port
    if args.min_sequences is not None:
        request["min_sequences"] = args.min_sequences
    if args.gpu_memory_gib is not None:
        if args.gpu_memory_gib <= 0:
            raise UsageError("--gpu-memory-gib must be > 0, got %g" % args.gpu_memory_gib)
        request["gpu_memory_bytes"] = int(args.gpu_memory_gib * GIB)
    if not model_id and not args.model_path:
        request["model_path"] = model_path
    return hosts, model, vllm, request


def make_plan(args: argparse.Namespace, model_path: Optional[str] = None,
              model_id: Optional[str] = None) -> Tuple[contracts.ServingPlan, Dict[str, Any]]:
    hosts, model, vllm, request = plan_inputs(args, model_path, model_id)
    if len(hosts) > 1:
        names = list(args.node_host) or None
        return planner_nodes.plan_group(hosts, model, vllm, request, names, args.network_gbps), hosts[0]
    return planner.plan(hosts[0], model, vllm, request), hosts[0]


def _model_segments(argv: Sequence[str]) -> Optional[Tuple[List[str], List[List[str]]]]:
    """`plan ... --model A [options of A] --model B [options of B]`: (the options before the first
    --model, each model's own); None for a plan of one model."""
    starts = [n for n, arg in enumerate(argv) if arg == "--model" or arg.startswith("--model=")]
    if len(starts) < 2:
        return None
    return list(argv[:starts[0]]), [list(argv[a:b]) for a, b in zip(starts, starts[1:] + [len(argv)], strict=True)]


def _default_name(args: argparse.Namespace) -> str:
    import re
    base = args.name or args.served_model_name or (args.model_id or "").rsplit("/", 1)[-1] or \
        os.path.basename(os.path.normpath(args.model)).rsplit(".json", 1)[0].rsplit("__", 1)[-1]
    return re.sub(r"[^a-z0-9-]+", "-", base.lower()).strip("-")[:63] or "model"


def _current_gpus(path: str) -> Dict[str, List[int]]:
    """--current STATE: the GPUs each model in service holds (the host state file, vllm_state)."""
    state = _read_json(path, "host state file")
    return dict((name, list((entry.get("plan") or {}).get("gpu_indices") or [])) for name, entry in (state.get("models") or {}).items())


def plan_several(argv: Sequence[str]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """Several models on one host (planner_multi): each --model with the options after it."""
    from ansible_collections.llmops.vllm.plugins.plugin_utils import planner_multi
    segments = _model_segments(argv[1:])
    if segments is None:
        raise UsageError("plan: several models need --model twice or more")
    common, per_model = segments
    items, host, vllm, current = [], {}, None, None
    for segment in per_model:
        args = build_parser().parse_args(["plan"] + common + segment)
        hosts, model, vllm, request = plan_inputs(args)
        if len(hosts) > 1:
            raise UsageError("plan: several models go on one host; give its captures once")
        host = hosts[0]
        items.append(planner_multi.ModelItem(_default_name(args), model, request))
        if args.current:
            current = _current_gpus(args.current)
    return planner_multi.plan_models(host, items, vllm, current), host


def _config_of(root: str, repo_id: str) -> str:
    candidates = [os.path.join(root, repo_id, "config.json"), os.path.join(root, repo_id + ".json"),
                  os.path.join(root, repo_id.replace("/", "__") + ".json")]
    for path in candidates:
        if os.path.isfile(path):
            return path
    raise UsageError("--config-dir %s: no config for %s (looked for %s); fetch its config.json there" % (
        root, repo_id, ", ".join(candidates)))


def plan_models_file(args: argparse.Namespace) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """`plan --models-file F`: the models of a vllm_models list planned together, as the rollout of the set does."""
    import yaml
    from ansible_collections.llmops.vllm.plugins.plugin_utils import planner_multi
    if args.model:
        raise UsageError("plan: give --model (one or several) or --models-file, not both")
    try:
        with open(args.models_file) as handle:
            data = yaml.safe_load(handle)
    except (OSError, yaml.YAMLError) as exc:
        raise UsageError("--models-file %s: %s" % (args.models_file, exc))
    documents = data.get("vllm_models") if isinstance(data, dict) else data
    models = desired_state.validate_models(documents, "%s: vllm_models" % args.models_file)
    root = args.config_dir or os.path.dirname(os.path.abspath(args.models_file))
    facts, requests, host, vllm = {}, {}, {}, None
    for doc in models:
        hosts, facts[doc["name"]], vllm, requests[doc["name"]] = plan_inputs(args, _config_of(root, doc["repo_id"]), doc["repo_id"])
        if len(hosts) > 1:
            raise UsageError("plan: several models go on one host; give its captures once")
        host = hosts[0]
        requests[doc["name"]]["served_model_name"] = doc["served_model_name"]
    current = _current_gpus(args.current) if args.current else None
    return planner_multi.plan_models(host, planner_multi.items_from_documents(models, facts, requests), vllm, current), host


def render_several(report: Dict[str, Any], host: Dict[str, Any]) -> str:
    lines = ["%d models on one host: %s" % (len(report["models"]), "fit" if report["fits"] else "DO NOT FIT")]
    width = max(len(doc["name"]) for doc in report["models"])
    for doc in report["models"]:
        perf = doc.get("performance") or {}
        figures = (" - %.0f tok/s single-stream, %.0f tok/s at full load" % (perf["single_stream_tok_s"], perf["max_output_tok_s"])
                   if perf else "")
        lines.append("  %-*s GPUs %-10s %s%s%s" % (
            width, doc["name"], ",".join(map(str, doc.get("gpus") or [])) or "-", doc.get("layout") or "",
            " on NUMA node %s" % doc["numa_node"] if doc.get("numa_node") is not None else "", figures))
        if not doc["fits"]:
            lines.append("    does not fit: %s" % doc.get("error"))
    lines.append("why:")
    lines.extend("  " + reason for reason in report["reasons"])
    if report.get("error"):
        lines.append("error: %s" % report["error"])
    return "\n".join(lines)


def compare_models(args: argparse.Namespace) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """Every --model planned on the same host with the same overrides, ranked for the objective:
    fitting models first, then by predicted aggregate tok/s (throughput) or single-stream tok/s
    (latency), then by KV headroom; each entry says why in numbers."""
    if len(args.model_id) > len(args.model):
        raise UsageError("--model-id given %d times for %d --model" % (len(args.model_id), len(args.model)))
    if args.model_path or args.served_model_name:
        raise UsageError("compare: --model-path and --served-model-name name one model; leave them out")
    entries: List[Tuple[contracts.ServingPlan, str]] = []
    host: Dict[str, Any] = {}
    for n, path in enumerate(args.model):
        model_id = args.model_id[n] if n < len(args.model_id) else None
        plan, host = make_plan(args, path, model_id or None)
        entries.append((plan, model_id or path))
    given = args.concurrency is not None

    def value(plan: contracts.ServingPlan) -> float:
        perf = plan.performance
        if not plan.fits or perf is None:
            return -1.0
        return planner_performance.ranking_value(perf, plan.objective, given)

    ranked = sorted(entries, key=lambda e: (e[0].fits, value(e[0]), e[0].kv_cache_tokens or 0), reverse=True)
    ranking: List[Dict[str, Any]] = []
    reasons: List[str] = []
    for plan, name in ranked:
        perf = plan.performance
        why = []
        if not plan.fits:
            why.append("does not fit: %s" % (plan.error or "?"))
        elif perf is None:
            why.append(plan.performance_note or "no performance prediction")
        else:
            why.append("%s: %s" % (plan.layout, planner_performance.explain(perf)))
            why.append("one decode step at concurrency %d: %s" % (perf.concurrency, ", ".join(
                "%s %.2f ms" % (k, v) for k, v in sorted(perf.step_ms.items()) if k != "total")))
            why.append(_attention_why(plan, perf))
        ranking.append({"model": name, "fits": plan.fits, "layout": plan.layout,
                        "performance": perf.model_dump() if perf else None, "kv_cache_tokens": plan.kv_cache_tokens,
                        "max_concurrent_sequences": plan.max_concurrent_sequences, "why": why})
    measure = "single-stream tok/s" if args.objective == "latency" else (
        "output tok/s at concurrency %d" % args.concurrency if given else "output tok/s at the load the KV cache holds")
    reasons.append("ranked for objective %s by predicted %s, then KV headroom" % (args.objective, measure))
    fitting = [r for r in ranking if r["fits"] and r["performance"]]
    if len(fitting) >= 2:
        first, second = fitting[0], fitting[1]
        key = "single_stream_tok_s" if args.objective == "latency" else ("output_tok_s" if given else "max_output_tok_s")
        a, b = float(first["performance"][key]), float(second["performance"][key])
        reasons.append("%s is predicted %.1fx faster than %s (%.0f vs %.0f tok/s)" % (
            first["model"], a / b if b else float("inf"), second["model"], a, b))
    return {"ranking": ranking, "objective": args.objective, "reasons": reasons}, host


def _attention_why(plan: contracts.ServingPlan, perf: contracts.Performance) -> str:
    """The model-shape part of the difference: what a step reads and exchanges, in the user's terms."""
    tp = plan.tensor_parallel_size
    if plan.attention == "mla":
        kv = "MLA latent KV (%d bytes per token) replicated on every one of the %d TP ranks" % (
            plan.kv_cache_bytes_per_token or 0, tp)
    else:
        kv = "%s with %d KV bytes per token per GPU split over %d rank(s)" % (
            plan.attention.upper(), plan.kv_cache_bytes_per_token or 0, tp)
    ep = "expert parallel (all-to-all instead of the experts' all-reduce)" if plan.enable_expert_parallel else \
        "no expert parallelism"
    return "%s; %s; %s, %s weights per GPU %.1f GiB; the slowest link: %s" % (
        kv, ep, perf.gpu, perf.precision, (plan.weights_bytes_per_gpu or 0) / GIB, perf.link)


# --------------------------------------------------------------------------- readable output


def _table(rows: Sequence[Sequence[Any]], header: Sequence[str] = ("", "")) -> str:
    lines = ["| %s |" % " | ".join(header), "|%s|" % "|".join("---" for _ignored in header)]
    for row in rows:
        lines.append("| %s |" % " | ".join(str(cell).replace("|", "\\|") for cell in row))
    return "\n".join(lines)


def _shell_quote(word: str) -> str:
    if word and all(ch.isalnum() or ch in "-_=.,/:@%+" for ch in word):
        return word
    return "'%s'" % word.replace("'", "'\"'\"'")


def render_topology(facts: Dict[str, Any]) -> str:
    gpus = facts.get("gpus") or []
    out = ["GPU topology: %d GPU(s), interconnect %s" % (len(gpus), facts.get("interconnect"))]
    if gpus:
        rows: List[Tuple[Any, ...]] = []
        for g in gpus:
            pcie = g.get("pcie") or {}
            link = ""
            if pcie.get("gen_current") or pcie.get("width_current"):
                link = "Gen%s x%s" % (pcie.get("gen_current", "?"), pcie.get("width_current", "?"))
                if pcie.get("degraded"):
                    link += " (below max x%s)" % pcie.get("width_max")
            mem = g.get("memory_bytes")
            rows.append((g["index"], g.get("name") or "", "%.1f GiB" % (mem / GIB) if mem else "?",
                         g.get("numa_node") if g.get("numa_node") is not None else "?",
                         g.get("cpu_affinity") or "", g.get("compute_capability") or "?", link))
        out.append(_table(rows, ("GPU", "name", "memory", "NUMA", "CPU affinity", "CC", "PCIe")))
        links = facts.get("links") or []
        if links:
            out.append("")
            out.append(_table([["GPU%d" % g["index"]] + row for g, row in zip(gpus, links, strict=False)],
                              ["links"] + ["GPU%d" % g["index"] for g in gpus]))
    for w in facts.get("warnings") or []:
        out.append("warning: %s" % w)
    return "\n".join(out)


def render_model(facts: Dict[str, Any]) -> str:
    moe = facts.get("moe")
    quant = facts.get("quantization")
    rows = [
        ("architecture", facts["architecture"]), ("model_type", facts.get("model_type")),
        ("attention", facts["attention"]),
        ("layers / heads / KV heads / head_dim", "%s / %s / %s / %s" % (
            facts["num_layers"], facts["num_attention_heads"], facts["num_kv_heads"], facts["head_dim"])),
        ("KV cache per token (bf16, whole model)", "%d bytes" % facts["kv_cache_bytes_per_token"]),
        ("MoE", "%d experts, %s per token, %s wide" % (moe["num_experts"], moe.get("experts_per_token"),
                                                       moe.get("intermediate_size")) if moe else "no"),
        ("quantization", "%s%s%s" % (quant["method"], " (%s)" % quant["format"] if quant.get("format") else "",
                                     ", block %d" % quant["block_size"] if quant.get("block_size") else "")
         if quant else "none"),
        ("MTP layers", facts.get("mtp_layers")),
        ("remote code (auto_map)", "yes" if facts.get("remote_code") else "no"),
        ("max_position_embeddings", facts.get("max_position_embeddings")),
        ("weights", "%.1f GiB (%s)" % (facts["weights_bytes"] / GIB,
                                       "estimated from config" if facts["weights_bytes_estimated"] else facts.get("weights_source"))),
    ]
    return "Model %s\n\n%s" % (facts.get("path") or "", _table(rows, ("field", "value")))


def render_plan(plan: Dict[str, Any], host: Dict[str, Any]) -> str:
    gpus = host.get("gpus") or []
    name = plan.get("model_id") or plan.get("model_path")
    where = ("%d x %s (%.1f GiB, %s)" % (len(gpus), gpus[0].get("name") or "GPU", (plan.get("gpu_memory_bytes") or 0) / GIB,
                                         host.get("interconnect")) if gpus else "a CPU-only host")
    out = ["## Serving plan: %s on %s" % (name, where), ""]
    verdict = "yes" if plan["fits"] else "**no**"
    rows: List[Tuple[str, Any]] = [("fits", verdict), ("device", plan["device"])]
    if plan["device"] == "cuda":
        replicas = plan.get("replica_gpu_indices") or []
        if len(replicas) > 1:
            nodes = plan.get("replica_numa_nodes") or [None] * len(replicas)
            placed = "; ".join("DP rank %d: %s (NUMA node %s)" % (
                rank, ",".join(str(i) for i in group), nodes[rank] if nodes[rank] is not None else "-")
                for rank, group in enumerate(replicas))
        else:
            placed = "%s (NUMA node %s)" % (",".join(str(i) for i in plan["gpu_indices"]),
                                            plan["numa_node"] if plan["numa_node"] is not None else "-")
        rows += [("objective", plan.get("objective") or "throughput"),
                 ("layout", plan["layout"] or "none valid"),
                 ("GPUs", placed),
                 ("weights per GPU", "%.1f GiB" % ((plan["weights_bytes_per_gpu"] or 0) / GIB)),
                 ("overhead per GPU", "%.1f GiB" % ((plan["overhead_bytes_per_gpu"] or 0) / GIB)),
                 ("KV cache per GPU", "%.1f GiB" % ((plan["kv_cache_bytes_per_gpu"] or 0) / GIB)),
                 ("gpu_memory_utilization", "%g" % plan["gpu_memory_utilization"])]
    rows += [("attention / quantization", "%s / %s" % (plan["attention"], plan["quantization"] or "none")),
             ("weights", "%.1f GiB%s" % (plan["weights_bytes"] / GIB, " (estimated)" if plan["weights_bytes_estimated"] else "")),
             ("max_model_len", plan["max_model_len"]),
             ("KV cache", "%s tokens (%s sequences of max_model_len; target %s)" % (
                 plan["kv_cache_tokens"], plan["max_concurrent_sequences"], plan["kv_cache_target_tokens"])),
             ("tool-call parser", plan["tool_call_parser"] or "none"),
             ("reasoning parser", plan["reasoning_parser"] or "none"),
             ("speculative decoding", json.dumps(plan["speculative_config"]) if plan["speculative_config"] else "off"),
             ("NUMA binding", plan["numa_binding"] or "none"),
             ("vLLM facts", "%s %s (%s)" % (plan["vllm"].get("distribution") or "vllm",
                                            plan["vllm"].get("version") or "?", plan["vllm"].get("source")))]
    perf = plan.get("performance")
    if perf:
        rows2 = [("predicted (%s, %s)" % (perf["gpu"], perf["precision"]), "%.0f tok/s single-stream; TPOT %.1f ms, TTFT %.0f ms, "
                  "%.0f output tok/s at concurrency %d (%d in / %d out, %s-bound); up to %.0f tok/s at %d requests" % (
                      perf["single_stream_tok_s"], perf["tpot_ms"], perf["ttft_ms"], perf["output_tok_s"], perf["concurrency"],
                      perf["input_len"], perf["output_len"], perf["bound"], perf["max_output_tok_s"], perf["max_concurrency"]))]
        rows += rows2
    elif plan.get("performance_note"):
        rows.append(("predicted", plan["performance_note"]))
    out.append(_table(rows, ("", "")))
    if plan["error"]:
        out += ["", "**Error:** %s" % plan["error"]]
    out += ["", "Why:"] + ["- %s" % r for r in plan["reasons"]]
    if plan["warnings"]:
        out += ["", "Warnings:"] + ["- %s" % w for w in plan["warnings"]]
    cands = [c for c in plan.get("candidates") or [] if c["valid"]]
    if plan["device"] == "cuda" and cands:
        def figures(c: Dict[str, Any]) -> Tuple[str, str, str]:
            p = c.get("performance")
            if not p:
                return ("", "", "")
            return ("%.0f" % p["single_stream_tok_s"], "%.0f" % p["output_tok_s"], "%.0f" % p["max_output_tok_s"])
        out += ["", "Layouts considered:", "", _table(
            [(c["label"], ",".join(str(i) for i in c["gpu_indices"]), "yes" if c["fits"] else "no", c["kv_cache_tokens"])
             + figures(c) + (c["why_not"] or "",) for c in cands],
            ("layout", "GPUs", "fits", "KV tokens", "tok/s single", "tok/s at concurrency", "tok/s full load", "why not"))]
    if plan["argv"]:
        env = " ".join("%s=%s" % (k, _shell_quote(v)) for k, v in sorted(plan["env"].items()))
        cmd = " ".join(_shell_quote(w) for w in plan["exec_prefix"] + ["vllm"] + plan["argv"])
        out += ["", "Command:", "", "```", (env + " " if env else "") + cmd, "```"]
    return "\n".join(out)


def render_compare(report: Dict[str, Any], host: Dict[str, Any]) -> str:
    gpus = host.get("gpus") or []
    where = "%d x %s (%s)" % (len(gpus), gpus[0].get("name") or "GPU", host.get("interconnect")) if gpus else "a CPU host"
    out = ["## Models compared on %s (objective %s)" % (where, report["objective"]), ""]
    rows = []
    for rank, entry in enumerate(report["ranking"], 1):
        perf = entry["performance"] or {}
        rows.append((rank, entry["model"], "yes" if entry["fits"] else "no", entry["layout"] or "-",
                     "%.0f" % perf["single_stream_tok_s"] if perf else "-",
                     "%.0f @ %d" % (perf["output_tok_s"], perf["concurrency"]) if perf else "-",
                     "%.0f @ %d" % (perf["max_output_tok_s"], perf["max_concurrency"]) if perf else "-",
                     entry["kv_cache_tokens"] if entry["kv_cache_tokens"] is not None else "-"))
    out.append(_table(rows, ("#", "model", "fits", "layout", "tok/s single", "tok/s at concurrency", "tok/s full load",
                             "KV tokens")))
    out += ["", "Why:"] + ["- %s" % r for r in report["reasons"]]
    for entry in report["ranking"]:
        out += ["", "%s:" % entry["model"]] + ["- %s" % w for w in entry["why"]]
    return "\n".join(out)


# --------------------------------------------------------------------------- main


def _fail(message: object, as_json: bool, code: int = EXIT_BAD_INPUT) -> int:
    message = " ".join(str(message).split())
    if as_json:
        sys.stdout.write(json.dumps({"error": message}) + "\n")
    sys.stderr.write("llmops-vllm: error: %s\n" % message)
    return code


def run(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in argv
    try:
        args = build_parser().parse_args(argv)
        if args.command == "topology":
            facts = host_facts_from_args(args)
            sys.stdout.write((json.dumps(facts, indent=2, sort_keys=True) if as_json else render_topology(facts)) + "\n")
            return EXIT_OK
        if args.command == "model":
            facts = model_config.model_facts(args.model)
            sys.stdout.write((json.dumps(facts, indent=2, sort_keys=True) if as_json else render_model(facts)) + "\n")
            return EXIT_OK
        if args.command == "validate":
            report = validate_inventory(args)
            if as_json:
                sys.stdout.write(json.dumps(report, indent=2, sort_keys=True) + "\n")
            else:
                for host, doc in sorted(report["valid"].items()):
                    sys.stdout.write("ok   %s: %s@%s as %s on port %s\n" % (
                        host, doc["repo_id"], doc["revision"], doc["unit"], doc["port"]))
                for host, docs in sorted(report["several"].items()):
                    for doc in docs:
                        sys.stdout.write("ok   %s: %s@%s as %s on port %s (one of its vllm_models)\n" % (
                            host, doc["repo_id"], doc["revision"], doc["unit"], doc["port"]))
                for host in report["without_model"]:
                    sys.stdout.write("--   %s: no %s\n" % (host, args.variable))
                for _host, message in sorted(report["problems"].items()):
                    sys.stdout.write("FAIL %s\n" % message)
            if report["problems"]:
                sys.stderr.write("llmops-vllm: %d host(s) with an invalid %s\n" % (len(report["problems"]), args.variable))
                return EXIT_BAD_INPUT
            return EXIT_OK
        if args.command in ("apply", "diff"):
            from ansible_collections.llmops.vllm.plugins.plugin_utils import apply
            summary, code = run_rollout(args)
            sys.stdout.write((json.dumps(summary, indent=2, sort_keys=True) if as_json else apply.render_summary(summary)) + "\n")
            return code
        if args.command == "compare":
            report, host = compare_models(args)
            sys.stdout.write((json.dumps(report, indent=2, sort_keys=True) if as_json else render_compare(report, host)) + "\n")
            return EXIT_OK if any(r["fits"] for r in report["ranking"]) else EXIT_DOES_NOT_FIT
        if args.command == "plan" and not args.model and not args.models_file:
            raise UsageError("plan: give --model (a model directory or config.json), or --models-file")
        if args.command == "plan" and (args.models_file or _model_segments(argv[1:]) is not None):
            several, host = plan_models_file(args) if args.models_file else plan_several(argv)
            sys.stdout.write((json.dumps(several, indent=2, sort_keys=True) if as_json else render_several(several, host)) + "\n")
            if not several["fits"]:
                sys.stderr.write("llmops-vllm: %s\n" % " ".join(str(several["error"]).split()))
                return EXIT_DOES_NOT_FIT
            return EXIT_OK
        result, host = make_plan(args)
        data = result.model_dump()
        sys.stdout.write((json.dumps(data, indent=2, sort_keys=True) if as_json else render_plan(data, host)) + "\n")
        if not result.fits:
            sys.stderr.write("llmops-vllm: %s\n" % " ".join((result.error or "does not fit").split()))
            return EXIT_DOES_NOT_FIT
        return EXIT_OK
    except SystemExit as exc:  # argparse's --help
        return EXIT_OK if not exc.code else _fail("usage error", as_json)
    except (UsageError, topology.TopologyError, model_config.ModelConfigError, contracts.PlanInputError) as exc:
        return _fail(exc, as_json)
    except Exception as exc:  # a bug: still one readable line, never a traceback
        if os.environ.get("LLMOPS_VLLM_DEBUG"):
            raise
        return _fail("internal error (%s: %s); rerun with LLMOPS_VLLM_DEBUG=1 for the traceback"
                     % (type(exc).__name__, exc), as_json)


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
