# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Credentials in URLs (``http://user:password@hub.internal/``), kept out of every result and log.

A hub endpoint may carry its credentials in its userinfo. Modules that take an endpoint call
``protect_endpoints(module, 'endpoint')`` first thing in main(): the password (raw and
percent-decoded; a userinfo without a password is one token and is itself the secret) joins
AnsibleModule's own ``no_log_values``, so the invocation Ansible shows at -vvv, every message and
every result string carry ``********`` in its place - the mechanism Ansible uses for ``no_log``
options, applied to the part of a URL that is secret. HF_ENDPOINT in the module's environment (the
endpoint huggingface_hub falls back to) is covered the same way.

The controller side (the CLI's artifacts, snapshots) uses ``url_secrets`` and ``mask_urls`` on
plain strings. Standard library only: it runs on the target.
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterable, List
from urllib.parse import unquote

MASK = "********"
# scheme://userinfo@ - the userinfo ends at the last @ before the host's first /, ? or #.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#\s@]*(?:@[^/?#\s@]*)*)@")
ENDPOINT_ENVIRONMENT = ("HF_ENDPOINT",)


def url_secrets(text: Any) -> List[str]:
    """The secret parts of every URL in text: each password of a user:password@ (as written and
    percent-decoded), or the whole userinfo when it has no password (a token as the user name)."""
    if not isinstance(text, str):
        return []
    found: List[str] = []
    for match in _USERINFO.finditer(text):
        userinfo = match.group("userinfo")
        secret = userinfo.split(":", 1)[1] if ":" in userinfo else userinfo
        for value in (secret, unquote(secret)):
            if value and value not in found:
                found.append(value)
    return found


def mask_urls(text: str) -> str:
    """text with the secret part of every URL's userinfo replaced by ********."""
    def masked(match: re.Match[str]) -> str:
        userinfo = match.group("userinfo")
        if ":" in userinfo:
            user = userinfo.split(":", 1)[0]
            return "%s%s:%s@" % (match.group("scheme"), user, MASK if userinfo.split(":", 1)[1] else "")
        return "%s%s@" % (match.group("scheme"), MASK if userinfo else "")
    return _USERINFO.sub(masked, text)


def protect_endpoints(module: Any, *names: str, environ: Any = None) -> List[str]:
    """Add the secrets of the URLs in the module's options `names` (and of HF_ENDPOINT in its
    environment) to module.no_log_values; the secrets added."""
    environ = os.environ if environ is None else environ
    values: Iterable[Any] = [module.params.get(name) for name in names] + [environ.get(name) for name in ENDPOINT_ENVIRONMENT]
    added: List[str] = []
    for value in values:
        for secret in url_secrets(value):
            module.no_log_values.add(secret)
            added.append(secret)
    return added
