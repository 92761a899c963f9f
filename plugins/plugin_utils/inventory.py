# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Inventories as ansible-playbook loads them, with every bad one fatal: the CLI's only inventory reader.

``load(request)`` loads the inventory sources with ansible-core's own InventoryManager and DataLoader (the
current directory's ansible.cfg, the collection loader, vars plugins, Vault secrets from
``--vault-password-file`` and the configured vault identities) and answers

    {"hosts": [every host], "targets": [the hosts the play's pattern matches within --limit],
     "hostvars": {host: variables as `ansible-inventory --list` prints them}}

or ``{"error": "..."}`` naming the inventory, what is wrong and what to do, where a source is missing or
unparsable (``INVENTORY_UNPARSED_IS_FAILED`` / ``INVENTORY_ANY_UNPARSED_IS_FAILED``: a directory's first bad
file stops it), the inventories hold no host, or ``--limit`` matches none of them.

It runs in a child process (``python -m ...plugin_utils.inventory``, the request as JSON on stdin, the
answer as JSON on stdout), as ansible-inventory did: loading collection inventory plugins installs
ansible-core's collection finder into the process, which the CLI's own imports must not meet.
Inline Vault values are never decrypted into the answer: they stay ``{"__ansible_vault": ciphertext}``; an
encrypted vars file reads as ansible-inventory reads it (the answer stays in the CLI's memory).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

Failures = Dict[str, List[Tuple[str, BaseException]]]


class _RecordingPlugin:
    """An inventory plugin whose parse failures are kept (source -> [(plugin, exception)]) for the error."""

    def __init__(self, plugin: Any, failures: Failures) -> None:
        self.__dict__.update(plugin=plugin, failures=failures)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["plugin"], name)

    def parse(self, inventory: Any, loader: Any, path: str, cache: bool = False) -> Any:
        plugin = self.__dict__["plugin"]
        try:
            return plugin.parse(inventory, loader, path, cache=cache)
        except Exception as exc:
            name = str(getattr(plugin, "_load_name", "") or type(plugin).__name__).rsplit(".", 1)[-1]
            self.__dict__["failures"].setdefault(str(path), []).append((name, exc))
            raise


class Unparsed(Exception):
    """An inventory source no plugin could parse, and why each plugin gave up."""

    def __init__(self, source: str, failures: List[Tuple[str, BaseException]]) -> None:
        super().__init__(source)
        self.source, self.failures = source, failures


def strict_manager_class() -> Any:
    """ansible-core's InventoryManager with every unparsable source fatal, keeping why it failed."""
    from ansible.inventory.manager import InventoryManager

    class StrictInventoryManager(InventoryManager):
        """INVENTORY_UNPARSED_IS_FAILED and INVENTORY_ANY_UNPARSED_IS_FAILED, whatever ansible.cfg says."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.parse_failures: Failures = {}
            super().__init__(*args, **kwargs)

        def _fetch_inventory_plugins(self) -> List[Any]:
            return [_RecordingPlugin(plugin, self.parse_failures) for plugin in super()._fetch_inventory_plugins()]

        def parse_source(self, source: str, cache: bool = False) -> bool:
            # A directory calls this method again for each of its files: its first bad file stops it.
            if not super().parse_source(source, cache=cache):
                raise Unparsed(source, self.parse_failures.get(source, []))
            return True

    return StrictInventoryManager


def _line_of(exc: BaseException) -> Optional[int]:
    seen: Optional[BaseException] = exc
    while seen is not None:
        mark: Any = getattr(seen, "problem_mark", None) or getattr(seen, "context_mark", None)
        if isinstance(getattr(mark, "line", None), int):
            return int(mark.line) + 1
        line = getattr(getattr(seen, "obj", None), "line_num", None)
        if isinstance(line, int):
            return line
        seen = seen.__cause__ or seen.__context__
    return None


def failure_reason(source: str, failures: Sequence[Tuple[str, BaseException]]) -> str:
    """The parse error of the plugin this kind of file is meant for (yaml for .yml/.yaml/.json, toml for .toml,
    ini for the rest), with its line where a plugin saw one."""
    if not failures:
        if os.path.isdir(source):
            return "no file in it is an inventory (only variables, or nothing)"
        return "no enabled inventory plugin accepts it (ansible.cfg [inventory] enable_plugins)"
    ext = os.path.splitext(source)[1].lower()
    order = ["yaml", "auto", "ini"] if ext in (".yml", ".yaml", ".json") else ["toml"] if ext == ".toml" else ["ini", "yaml"]
    ranked = sorted(failures, key=lambda one: order.index(one[0]) if one[0] in order else len(order))
    plugin, chosen = ranked[0]
    message = " ".join(str(chosen).split())
    lines = [_line_of(exc) for name, exc in ranked if " ".join(str(exc).split()) == message]
    line = next((one for one in lines if one), None)
    return "%s (the %s plugin%s)" % (message[:400], plugin, ", line %d" % line if line else "")


def plain(value: Any) -> Any:
    """A variable as `ansible-inventory --list` prints it: JSON types, Jinja left as text, an inline Vault value
    {"__ansible_vault": ciphertext} (never decrypted)."""
    try:
        from ansible.parsing.vault import VaultHelper  # ansible-core 2.19+ (an encrypted file's values too)
        ciphertext = VaultHelper.get_ciphertext(value, with_tags=False)
    except ImportError:
        ciphertext = getattr(value, "_ciphertext", None)  # AnsibleVaultEncryptedUnicode
    if ciphertext is not None:
        return {"__ansible_vault": ciphertext.decode() if isinstance(ciphertext, bytes) else str(ciphertext)}
    if isinstance(value, dict):
        return dict((str(key), plain(item)) for key, item in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(item) for item in value]
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return str(value)


def _some(names: Sequence[str], count: int = 8) -> str:
    names = list(names)
    return ", ".join(names[:count]) + (" and %d more" % (len(names) - count) if len(names) > count else "")


NOTHING_RAN = " - nothing was run"


def vault_secrets(loader: Any, vault_password_file: Optional[str]) -> None:
    """The Vault secrets ansible-playbook would hold (CLI.setup_vault_secrets without prompts, and without importing
    ansible.cli): ansible.cfg's vault_identity_list, --vault-password-file, ansible.cfg's vault_password_file."""
    from ansible import constants
    from ansible.parsing import vault

    slugs = [str(slug) for slug in constants.DEFAULT_VAULT_IDENTITY_LIST or []]
    for path in ([os.path.abspath(vault_password_file)] if vault_password_file else []) + (
            [str(constants.DEFAULT_VAULT_PASSWORD_FILE)] if constants.DEFAULT_VAULT_PASSWORD_FILE else []):
        slugs.append("%s@%s" % (constants.DEFAULT_VAULT_IDENTITY, path))
    secrets: List[Tuple[str, Any]] = []
    failed: Optional[Exception] = None
    for slug in slugs:
        name, where = slug.split("@", 1) if "@" in slug else (None, slug)
        if where in ("prompt", "prompt_ask_vault_pass"):  # a pipeline has no terminal
            continue
        try:
            secret = vault.get_file_vault_secret(filename=where, vault_id=name, loader=loader)
            secret.load()
        except Exception as exc:  # AnsibleError; as ansible-playbook: fatal only when no secret loads
            failed = exc
            continue
        secrets.append((name or constants.DEFAULT_VAULT_IDENTITY, secret))
        loader.set_vault_secrets(secrets)
    if failed is not None and not secrets:
        raise failed
    context = getattr(vault, "VaultSecretsContext", None)  # ansible-core 2.19: decrypting reads it
    if context is not None and context.current(optional=True) is None:
        context.initialize(context(secrets))


def missing_files(sources: Sequence[str], vault_password_file: Optional[str] = None) -> Optional[str]:
    """The error for an inventory path (not a host list: no comma) or a Vault password file that is not there."""
    for source in sources:
        if "," not in source and not os.path.exists(source):
            return ("inventory %s: no such file or directory (relative to %s); give -i the path of the inventory file "
                    "or directory, as for ansible-playbook -i%s" % (source, os.getcwd(), NOTHING_RAN))
    if vault_password_file and not os.path.isfile(vault_password_file):
        return ("--vault-password-file %s: no such file; give the file that holds the Vault password%s"
                % (vault_password_file, NOTHING_RAN))
    return None


def load(request: Dict[str, Any]) -> Dict[str, Any]:
    """The answer to one request: {"sources": [...], "vault_password_file": path or null, "limit": pattern or null,
    "pattern": the play's hosts (default all), "hostvars": bool}."""
    from ansible import constants
    from ansible.errors import AnsibleError
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import init_plugin_loader

    sources: List[str] = list(request["sources"])
    named = ", ".join(sources)
    vault_password_file = request.get("vault_password_file")
    missing = missing_files(sources, vault_password_file)
    if missing:
        return {"error": missing}
    init_plugin_loader()
    loader = DataLoader()
    try:
        vault_secrets(loader, vault_password_file)
    except AnsibleError as exc:
        return {"error": "the Vault password: %s; check --vault-password-file and ansible.cfg's vault settings%s"
                         % (" ".join(str(exc).split())[:400], NOTHING_RAN)}
    try:
        manager = strict_manager_class()(loader=loader, sources=[
            source if "," in source else os.path.abspath(source) for source in sources])
    except Unparsed as exc:
        return {"error": "inventory %s: Ansible cannot parse it: %s; fix it (or move what is no inventory out of the "
                         "inventory directory), or give -i the right inventory%s"
                         % (exc.source, failure_reason(exc.source, exc.failures), NOTHING_RAN)}
    except AnsibleError as exc:
        return {"error": "inventory %s: Ansible cannot load it: %s%s" % (named, " ".join(str(exc).split())[:600], NOTHING_RAN)}
    hosts = sorted(host.name for host in manager.get_hosts("all"))
    if not hosts:
        return {"error": "inventory %s holds no host (an empty file, or only groups and variables); name the hosts "
                         "(all: hosts: or vllm_servers: hosts:), or give -i the right inventory%s" % (named, NOTHING_RAN)}
    limit = request.get("limit")
    try:
        manager.subset(limit)
        limited = manager.get_hosts("all")
        targets = sorted(host.name for host in manager.get_hosts(request.get("pattern") or "all"))
    except AnsibleError as exc:
        return {"error": "--limit %s: %s%s" % (limit, " ".join(str(exc).split())[:400], NOTHING_RAN)}
    if limit and not limited:
        return {"error": "--limit %s matches no host of inventory %s (it holds %s); give hosts or groups it holds%s"
                         % (limit, named, _some(hosts), NOTHING_RAN)}
    answer: Dict[str, Any] = {"hosts": hosts, "targets": targets}
    if request.get("hostvars", True):
        from ansible.vars.manager import VariableManager

        manager.subset(None)
        variables = VariableManager(loader=loader, inventory=manager)
        internal = set(getattr(constants, "INTERNAL_STATIC_VARS", ())) | {
            "groups", "group_names", "omit", "playbook_dir", "inventory_hostname", "inventory_hostname_short",
            "inventory_dir", "inventory_file", "ansible_playbook_python", "ansible_config_file", "ansible_version"}
        answer["hostvars"] = {}
        for host in manager.get_hosts("all"):
            try:
                found = variables.get_vars(host=host, include_hostvars=False, stage="all")
            except AnsibleError as exc:
                return {"error": "inventory %s: Ansible cannot read the variables of %s: %s; fix the vars file, or give "
                                 "--vault-password-file where it is Vault-encrypted%s"
                                 % (named, host.name, " ".join(str(exc).split())[:400], NOTHING_RAN)}
            answer["hostvars"][host.name] = plain(dict((key, value) for key, value in found.items() if key not in internal))
    return answer


def main() -> None:
    """The child process: one request (JSON) on stdin, one answer (JSON) on stdout; Ansible's own warnings on stderr."""
    import contextlib

    request = json.loads(sys.stdin.read())
    try:
        with contextlib.redirect_stdout(sys.stderr):  # stdout carries the answer only
            answer = load(request)
    except Exception as exc:  # a bug or an inventory plugin's crash: still one answer
        answer = {"error": "inventories %s: cannot load them (%s: %s)%s" % (
            ", ".join(request.get("sources") or []), type(exc).__name__, " ".join(str(exc).split())[:600], NOTHING_RAN)}
    sys.stdout.write(json.dumps(answer, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
