# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a host serves: its state file, the names of its units and where its servers answer, defined once.

Schema 1 of /var/lib/llmops-vllm/state.json::

    {"schema": 1,
     "models":   {"<name>": entry},      # served now, one entry per model
     "previous": {"<name>": entry},      # the last entry retired or replaced under that name (rollback, revert)
     "history":  [entry without plan],   # newest first, at most HISTORY_LIMIT
     "lock":     null | {"holder": str, "controller": str, "started": iso8601, "lease_s": int,
                         "renewed": iso8601,         # optional: the lease counts from it (wall clock, shown)
                         "boot_id": str, "boottime_s": float}}   # optional: the host's boot clock then

The lock serialises runs against one host (acquire_lock / renew_lock / release_lock): the run that
holds it renews its lease as it goes; a lock whose lease ran out is taken over with a warning. The
lease is measured on the host's boot clock (CLOCK_BOOTTIME, which no clock step moves and which
counts suspended time): a lock keeps the boot id and the boot-time seconds of its last renewal; another
boot id (the host rebooted) ends the lease. A lock without them (written before) is judged by the wall
clock. Every write of a run names its holder (record/retire `holder`): refused, nothing written, when
another run holds the lock (fencing).

The file is read only when it can be trusted (read()): a regular file with one link, opened without
following a link, owned by root (or by the reader itself when it is not root), not writable by group
or others. An empty file, ``{}`` or ``null`` is an error, never "serves nothing"; a missing file is
the empty state of a host's first rollout. Writes leave no temporary file behind (write_atomic).

An entry: name, unit (vllm-<name>.service), repo_id, revision, commit, path, served_model_name, bind,
port, since (ISO 8601) and plan (PLAN_KEYS); optionally venv, fingerprint and unit_sha1 (ENTRY_OPTIONAL).

The rollout's first format (call it schema 0, although its files say ``"schema": 1``) had one
``current`` entry (or null), one ``previous`` entry (or null) and the history; migrate() turns it
into schema 1. It was rendered by Jinja, so with ansible-core < 2.19 its numbers are strings
(``"port": "8000"``) and a null NUMA node is ``""``; normalize_entry() reads both spellings.

Target side and controller side: Python standard library only, plain data in and out.
"""

from __future__ import absolute_import, division, print_function

import copy
import datetime
import errno
import json
import math
import os
import re
import stat
import tempfile
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union, cast

SCHEMA_VERSION = 1
# The legacy single-model format, as messages call it.
LEGACY_SCHEMA = 0
DEFAULT_STATE_DIR = '/var/lib/llmops-vllm'
STATE_FILE = 'state.json'
DEFAULT_UNIT_DIR = '/etc/systemd/system'
UNIT_PREFIX = 'vllm-'
UNIT_SUFFIX = '.service'
HISTORY_LIMIT = 20
# The same rule as the desired state's `name`: it names the unit.
NAME_RE = re.compile(r'^[a-z0-9][a-z0-9-]{0,62}$')

# Entry key -> kind, checked by entry_problems(); `plan` is left out of history entries.
ENTRY_KEYS = {
    'name': 'name', 'unit': 'str', 'repo_id': 'str', 'revision': 'str', 'commit': 'str', 'path': 'str',
    'served_model_name': 'str', 'bind': 'str', 'port': 'port', 'since': 'time', 'plan': 'plan',
    'venv': 'str', 'fingerprint': 'str', 'unit_sha1': 'str', 'takeover': 'mapping',
    'stable_port': 'port', 'slot_ports': 'indices',
}
# Added after the first schema-1 files: the vLLM venv the unit runs, the rollout's fingerprint of its
# inputs and the sha1 of the unit file it wrote (a no-op rollout compares them, no re-planning).
# `takeover`: the entry came from a vLLM this collection did not start (vllm_takeover): its pid, start
# time, user and command, so that a retire stops that process while it still runs outside the unit.
# `stable_port`, `slot_ports`: the model serves behind the host proxy (swap auto / bluegreen) - the proxy holds
# stable_port, vLLM listens on `port`, one of the two slot_ports.
ENTRY_OPTIONAL = ('venv', 'fingerprint', 'unit_sha1', 'takeover', 'stable_port', 'slot_ports')
PLAN_KEYS = {
    'device': 'str', 'tensor_parallel_size': 'size', 'data_parallel_size': 'size', 'enable_expert_parallel': 'bool',
    'gpu_indices': 'indices', 'numa_node': 'int_or_null', 'max_model_len': 'size', 'layout': 'str_or_null',
    'argv': 'strings',
}
# Older entries have no layout (the label came with planner v2).
PLAN_OPTIONAL = ('layout',)
LOCK_KEYS = {'holder': 'str', 'controller': 'str', 'started': 'time', 'lease_s': 'count', 'renewed': 'time',
             'boot_id': 'str', 'boottime_s': 'seconds'}
# renewed: once renewed; boot_id, boottime_s: written since issue 39 (a lock without them is judged by the wall clock).
LOCK_OPTIONAL = ('renewed', 'boot_id', 'boottime_s')
BOOT_ID_PATH = '/proc/sys/kernel/random/boot_id'
# The serve role's start timeout, `auto`: 10 min plus 10 s per GiB of weights (roles/serve/vars/main.yml).
START_TIMEOUT_BASE_S = 600
START_TIMEOUT_PER_GIB_S = 10
# The readiness gate may overrun its timeout by its last attempt and the journal read (roles/serve/tasks/gate.yml).
GATE_OVERRUN_S = 120
STATE_KEYS = ('schema', 'models', 'previous', 'history', 'lock')

# A state document (schema 1 once validated) and one of its entries: parsed JSON, checked by
# state_problems() / entry_problems() rather than by the type.
State = Dict[str, Any]
Entry = Dict[str, Any]

_INT_RE = re.compile(r'^-?[0-9]+$')
_EXPECTED = {
    'name': "1-63 lower-case letters, digits or '-', starting with a letter or digit",
    'str': 'a non-empty string',
    'str_or_null': 'a string or null',
    'port': 'an integer 1-65535',
    'size': 'an integer >= 1',
    'count': 'an integer >= 0',
    'int_or_null': 'an integer >= 0 or null',
    'bool': 'true or false',
    'indices': 'a list of GPU indices (integers >= 0)',
    'strings': 'a list of strings',
    'time': 'an ISO 8601 time',
    'mapping': 'a mapping',
    'seconds': 'a number of seconds >= 0',
}


class StateError(ValueError):
    """The state (or an input to an operation) is not what schema 1 allows; .problems lists each one."""

    def __init__(self, problems: Union[str, List[str], Tuple[str, ...]], source: Optional[str] = None) -> None:
        self.problems: List[str] = list(problems) if isinstance(problems, (list, tuple)) else [problems]
        prefix = '%s: ' % source if source else ''
        super().__init__(prefix + '; '.join(self.problems))


# ----------------------------------------------------------------------------- names and addresses

def unit_name(name: str) -> str:
    """The systemd unit that serves model `name`: vllm-<name>.service."""
    return '%s%s%s' % (UNIT_PREFIX, name, UNIT_SUFFIX)


def unit_path(name: str, unit_dir: str = DEFAULT_UNIT_DIR) -> str:
    return os.path.join(unit_dir, unit_name(name))


def unit_glob(unit_dir: str = DEFAULT_UNIT_DIR) -> str:
    """The units this collection manages, as a glob pattern."""
    return os.path.join(unit_dir, '%s*%s' % (UNIT_PREFIX, UNIT_SUFFIX))


def connect_host(bind: str) -> str:
    """Where a server bound to `bind` is reached from its own host: loopback for a wildcard bind."""
    if bind == '0.0.0.0':
        return '127.0.0.1'
    if bind == '::':
        return '::1'
    return bind


def connect_url(bind: str, port: Union[int, str], scheme: str = 'http') -> str:
    """Base URL of a server bound to `bind`:`port`, IPv6 literals in brackets (http://[::1]:8000)."""
    host = connect_host(bind)
    if ':' in host and not host.startswith('['):
        host = '[%s]' % host
    return '%s://%s:%d' % (scheme, host, int(port))


def state_path(state_dir: str = DEFAULT_STATE_DIR) -> str:
    return os.path.join(state_dir, STATE_FILE)


def now_iso() -> str:
    """Now in UTC, to the second, with its offset (2026-03-01T10:00:00+00:00)."""
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


# ----------------------------------------------------------------------------- schema

def empty_state() -> State:
    return {'schema': SCHEMA_VERSION, 'models': {}, 'previous': {}, 'history': [], 'lock': None}


def _to_int(value: Any) -> Any:
    if isinstance(value, str) and _INT_RE.match(value.strip()):
        return int(value.strip())
    return value


def _coerce(kind: str, value: Any) -> Any:
    """Read the spellings a Jinja-rendered file has (numbers as strings, null as '' or 'None')."""
    if kind in ('port', 'size', 'count'):
        return _to_int(value)
    if kind == 'int_or_null':
        if isinstance(value, str) and value.strip() in ('', 'None', 'null'):
            return None
        return _to_int(value)
    if kind == 'bool' and isinstance(value, str) and value.strip().lower() in ('true', 'false'):
        return value.strip().lower() == 'true'
    if kind == 'indices' and isinstance(value, list):
        return [_to_int(item) for item in value]
    if kind == 'str_or_null' and value == '':
        return None
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_time(value: Any) -> bool:
    if not isinstance(value, str) or not value:
        return False
    try:
        # fromisoformat() reads 'Z' only from Python 3.11 on.
        datetime.datetime.fromisoformat(value[:-1] + '+00:00' if value.endswith('Z') else value)
    except ValueError:
        return False
    return True


def _valid(kind: str, value: Any) -> bool:
    checks: Dict[str, Callable[[Any], bool]] = {
        'name': lambda v: isinstance(v, str) and NAME_RE.match(v) is not None,
        'str': lambda v: isinstance(v, str) and v != '',
        'str_or_null': lambda v: v is None or isinstance(v, str),
        'port': lambda v: _is_int(v) and 1 <= v <= 65535,
        'size': lambda v: _is_int(v) and v >= 1,
        'count': lambda v: _is_int(v) and v >= 0,
        'int_or_null': lambda v: v is None or (_is_int(v) and v >= 0),
        'bool': lambda v: isinstance(v, bool),
        'indices': lambda v: isinstance(v, list) and all(_is_int(i) and i >= 0 for i in v),
        'strings': lambda v: isinstance(v, list) and all(isinstance(i, str) for i in v),
        'time': _is_time,
        'mapping': lambda v: isinstance(v, dict),
        'seconds': lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0,
    }
    return checks[kind](value)


def _problem(where: str, kind: str, value: Any) -> str:
    return '%s: expected %s, got %r (%s)' % (where, _EXPECTED[kind], value, type(value).__name__)


def _keys_problems(where: str, document: Mapping[Any, Any], spec: Mapping[str, str], optional: Sequence[str] = ()) -> List[str]:
    problems: List[str] = []
    for key in sorted(spec):
        if key not in document:
            if key not in optional:
                problems.append('%s.%s: missing' % (where, key))
        elif spec[key] != 'plan' and not _valid(spec[key], document[key]):
            problems.append(_problem('%s.%s' % (where, key), spec[key], document[key]))
    for key in sorted(set(document) - set(spec), key=str):
        problems.append('%s.%s: unknown key (known: %s)' % (where, key, ', '.join(sorted(spec))))
    return problems


def normalize_entry(entry: Any, history: bool = False) -> Any:
    """A copy of `entry` with the Jinja spellings of its values read (see _coerce); plan dropped for history."""
    if not isinstance(entry, dict):
        return entry
    out = copy.deepcopy(entry)
    for key, kind in ENTRY_KEYS.items():
        if key in out and kind != 'plan':
            out[key] = _coerce(kind, out[key])
    if history:
        out.pop('plan', None)
    elif isinstance(out.get('plan'), dict):
        for key, kind in PLAN_KEYS.items():
            if key in out['plan']:
                out['plan'][key] = _coerce(kind, out['plan'][key])
    return out


def entry_problems(entry: Any, where: str = 'entry', history: bool = False) -> List[str]:
    """Readable problems of one entry, each naming its key (empty list: none)."""
    if not isinstance(entry, dict):
        return ['%s: expected an entry (a mapping), got %r' % (where, entry)]
    spec = dict(ENTRY_KEYS)
    if history:
        del spec['plan']
    problems = _keys_problems(where, entry, spec, ENTRY_OPTIONAL)
    name = entry.get('name')
    if isinstance(name, str) and 'unit' in entry and entry['unit'] != unit_name(name):
        problems.append('%s.unit: expected %s (vllm-<name>.service), got %r' % (where, unit_name(name), entry['unit']))
    if not history and 'plan' in entry:
        if isinstance(entry['plan'], dict):
            problems.extend(_keys_problems(where + '.plan', entry['plan'], PLAN_KEYS, PLAN_OPTIONAL))
        else:
            problems.append('%s.plan: expected a mapping of %s, got %r' % (where, ', '.join(sorted(PLAN_KEYS)), entry['plan']))
    return problems


def state_problems(state: Any) -> List[str]:
    """Readable problems of a schema-1 document, each naming its key (empty list: none)."""
    if not isinstance(state, dict):
        return ['expected a mapping with %s, got %r' % (', '.join(STATE_KEYS), state)]
    problems: List[str] = []
    if state.get('schema') != SCHEMA_VERSION:
        problems.append('schema: expected %d, got %r' % (SCHEMA_VERSION, state.get('schema')))
    for key in ('models', 'previous'):
        entries = state.get(key)
        if not isinstance(entries, dict):
            problems.append('%s: expected a mapping of model name to entry, got %r' % (key, entries))
            continue
        for name in sorted(entries, key=str):
            where = '%s[%r]' % (key, name)
            problems.extend(entry_problems(entries[name], where))
            if isinstance(entries[name], dict) and entries[name].get('name') != name:
                problems.append('%s.name: %r differs from its key %r' % (where, entries[name].get('name'), name))
    history = state.get('history')
    if not isinstance(history, list):
        problems.append('history: expected a list of entries, got %r' % (history,))
    else:
        if len(history) > HISTORY_LIMIT:
            problems.append('history: %d entries, at most %d are kept' % (len(history), HISTORY_LIMIT))
        for index, entry in enumerate(history):
            problems.extend(entry_problems(entry, 'history[%d]' % index, history=True))
    lock = state.get('lock')
    if lock is not None:
        if isinstance(lock, dict):
            problems.extend(_keys_problems('lock', lock, LOCK_KEYS, LOCK_OPTIONAL))
        else:
            problems.append('lock: expected null or a mapping of %s, got %r' % (', '.join(sorted(LOCK_KEYS)), lock))
    for key in sorted(set(state) - set(STATE_KEYS), key=str):
        problems.append('%s: unknown key (known: %s)' % (key, ', '.join(STATE_KEYS)))
    return problems


def validate(state: Any, source: Optional[str] = None) -> State:
    """`state` itself when it is a valid schema-1 document; StateError listing every problem otherwise."""
    problems = state_problems(state)
    if problems:
        raise StateError(problems, source)
    return cast(State, state)


# ----------------------------------------------------------------------------- migration

EMPTY_HELP = ('the rollout never writes it so (a missing file is the empty state of a first rollout): '
              'something emptied it. Nothing was changed. Restore it from a backup or the last report '
              '(reports/<host>/latest.json); if the host really serves nothing, remove the file')


def schema_of(document: Any, source: Optional[str] = None) -> int:
    """The schema of a parsed state file: SCHEMA_VERSION or LEGACY_SCHEMA. ``{}`` and ``null`` are
    refused (a state file is never written so): StateError saying what to do."""
    if document is None or document == {}:
        raise StateError('%s, not a state: %s' % ('null' if document is None else 'an empty JSON object {}', EMPTY_HELP),
                         source)
    if not isinstance(document, dict):
        raise StateError('expected a JSON object, got %s' % type(document).__name__, source)
    schema: Any = document.get('schema')
    if _is_int(schema) and schema > SCHEMA_VERSION:
        raise StateError('schema %d is newer than the %d this llmops.vllm reads: it was written by a newer release; '
                         'upgrade the collection on the controller' % (schema, SCHEMA_VERSION), source)
    if 'models' in document:
        if schema != SCHEMA_VERSION:
            raise StateError('schema: expected %d with "models", got %r' % (SCHEMA_VERSION, schema), source)
        return SCHEMA_VERSION
    if 'current' in document:
        return LEGACY_SCHEMA
    raise StateError('neither "models" (schema %d) nor "current" (schema %d) in it: not a state file of llmops.vllm; '
                     'move it aside' % (SCHEMA_VERSION, LEGACY_SCHEMA), source)


def migrate(document: Any, source: Optional[str] = None) -> State:
    """Schema 1 from any state file this collection wrote. Idempotent. None or {} is refused (schema_of)."""
    schema = schema_of(document, source)
    if schema == SCHEMA_VERSION:
        state = copy.deepcopy(document)
        for key in ('models', 'previous'):
            if isinstance(state.get(key), dict):
                state[key] = dict((name, normalize_entry(entry)) for name, entry in state[key].items())
        if isinstance(state.get('history'), list):
            state['history'] = [normalize_entry(entry, history=True) for entry in state['history']]
        return validate(state, source)
    state = empty_state()
    for key, target in (('current', 'models'), ('previous', 'previous')):
        entry = document.get(key)
        # null is '' in a file rendered by ansible-core < 2.19 (`previous` of the first rollout).
        if entry in (None, {}, ''):
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get('name'), str):
            raise StateError('%s (schema %d): expected an entry with a name or null, got %r' % (key, LEGACY_SCHEMA, entry), source)
        state[target][entry['name']] = normalize_entry(entry)
    history = document.get('history') or []
    if not isinstance(history, list):
        raise StateError('history (schema %d): expected a list, got %r' % (LEGACY_SCHEMA, history), source)
    state['history'] = [normalize_entry(entry, history=True) for entry in history][:HISTORY_LIMIT]
    return validate(state, source)


def loads(text: str, source: Optional[str] = None) -> Tuple[State, bool]:
    """(schema-1 state, whether it was migrated from schema 0) from a state file's text. An empty text
    (or only white space), ``{}`` and ``null`` are refused: StateError naming the file and what to do."""
    if not text.strip():
        raise StateError('the file is empty (%d bytes), not a state: %s' % (len(text), EMPTY_HELP), source)
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise StateError('not JSON (%s); fix it or move it aside' % exc, source)
    return migrate(document, source), schema_of(document, source) == LEGACY_SCHEMA


# The owners whose state file a reader trusts: root's; a reader that is not root (a test, a user reading
# without become) also its own. Root never reads a file another user could have written.
def _trusted_owners(euid: int) -> Tuple[int, ...]:
    return (0,) if euid == 0 else (0, euid)


def _owner_name(uid: int) -> str:
    try:
        import pwd
        return '%d (%s)' % (uid, pwd.getpwuid(uid).pw_name)
    except (ImportError, KeyError):
        return str(uid)


def trust_problem(st: os.stat_result, euid: Optional[int] = None) -> Optional[str]:
    """Why a reader with `euid` must not trust a state file with this fstat (None: it may).

    The file decides, not its directory: a directory an older release gave the service user is moved to
    root by the rollout's migration, and until then the file root wrote there is still root's own."""
    euid = os.geteuid() if euid is None else euid
    mode = stat.S_IMODE(st.st_mode)
    if not stat.S_ISREG(st.st_mode):
        return 'not a regular file (mode %s)' % oct(st.st_mode)
    if st.st_uid not in _trusted_owners(euid):
        return 'owned by uid %s, mode %04o: not root\'s' % (_owner_name(st.st_uid), mode)
    if mode & 0o022:
        return 'mode %04o, owner uid %s: writable by %s' % (
            mode, _owner_name(st.st_uid), ' and '.join(w for w, bit in (('its group', 0o020), ('others', 0o002)) if mode & bit))
    if st.st_nlink != 1:
        return '%d hard links (a link planted to another file?), owner uid %s, mode %04o' % (
            st.st_nlink, _owner_name(st.st_uid), mode)
    return None


TRUST_HELP = ('another user could have written it, and root acts on what it says. Nothing was changed. Check its '
              'content; if it is yours, make it root\'s and plain: `chown root:root F && chmod 0644 F` (no link); '
              'the rollout\'s migration makes its directory root:root 0755')


def read(path: str, euid: Optional[int] = None) -> Tuple[State, bool, str]:
    """(state, migrated, text) of the state file at `path`; a missing file (or directory) is an empty
    state and text ''. The file is opened without following a link (O_NOFOLLOW) and judged on what was
    opened (fstat, trust_problem()): a link, another owner, a group/other-writable mode or a second hard
    link is a StateError naming the owner and mode and what to do; so is an empty or unreadable file."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, 'O_CLOEXEC', 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return empty_state(), False, ''
        if exc.errno == errno.ELOOP:
            raise StateError('a symbolic link (to %r): root does not follow a link to its state file; %s'
                             % (_readlink(path), TRUST_HELP.replace(' F', ' ' + path)), path)
        raise StateError('cannot read it: %s; run with become (root owns the state file)' % (exc.strerror or exc), path)
    try:
        problem = trust_problem(os.fstat(fd), euid)
        if problem:
            raise StateError('%s - %s' % (problem, TRUST_HELP.replace(' F', ' ' + path)), path)
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    except OSError as exc:
        raise StateError('cannot read it: %s' % (exc.strerror or exc), path)
    finally:
        os.close(fd)
    try:
        text = b''.join(chunks).decode('utf-8')
    except UnicodeDecodeError as exc:
        raise StateError('not UTF-8 text (%s); fix it or move it aside' % exc, path)
    state, migrated = loads(text, path)
    return state, migrated, text


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return '?'


# ----------------------------------------------------------------------------- operations

def record(state: State, entry: Any, replaces: Optional[str] = None, now: Optional[str] = None,
           holder: Optional[str] = None) -> State:
    """A new state in which `entry` is served: models[name] = entry.

    With `holder` (the run's lock id): LockLost, nothing changed, unless `holder` holds the host's lock.

    The entry it replaces (the same name's, and the model named by `replaces`, when served) moves to
    previous[<its name>]; the entry, without plan, is prepended to the history (at most HISTORY_LIMIT).
    `unit` defaults to vllm-<name>.service and `since` to `now` (ISO 8601; default: now in UTC).
    Recording what is already served (all keys but `since` equal) returns the state unchanged.
    """
    state = copy.deepcopy(validate(state))
    check_holder(state, holder, 'record %s' % (entry.get('name') if isinstance(entry, dict) else 'an entry'))
    if not isinstance(entry, dict):
        raise StateError('entry: expected a mapping, got %r' % (entry,))
    entry = normalize_entry(entry)
    if isinstance(entry.get('name'), str) and not entry.get('unit'):
        entry['unit'] = unit_name(entry['name'])
    if not entry.get('since'):
        entry['since'] = now or now_iso()
    problems = entry_problems(entry)
    if replaces is not None and not (isinstance(replaces, str) and NAME_RE.match(replaces)):
        problems.append(_problem('replaces', 'name', replaces))
    if problems:
        raise StateError(problems)
    name = entry['name']
    if replaces != name and replaces in state['models']:
        state['previous'][replaces] = state['models'].pop(replaces)
    served = state['models'].get(name)
    if served is not None and _without_since(served) == _without_since(entry):
        return state
    if served is not None:
        state['previous'][name] = served
    state['models'][name] = entry
    state['history'] = ([normalize_entry(entry, history=True)] + state['history'])[:HISTORY_LIMIT]
    return state


def _without_since(entry: Entry) -> Entry:
    return dict((key, value) for key, value in entry.items() if key != 'since')


def retire(state: State, name: str, holder: Optional[str] = None) -> State:
    """A new state in which `name` is no longer served; its entry is kept as previous[name].

    Retiring a model the host does not serve returns the state unchanged. With `holder`: as record().
    """
    state = copy.deepcopy(validate(state))
    check_holder(state, holder, 'retire %s' % name)
    if name in state['models']:
        state['previous'][name] = state['models'].pop(name)
    return state


def models(state: State) -> List[Entry]:
    """The served entries, ordered by name."""
    return [state['models'][name] for name in sorted(state['models'])]


def current(state: State) -> Optional[Entry]:
    """The one entry served, or None; StateError when several are (name the one you mean)."""
    served = models(state)
    if len(served) > 1:
        raise StateError('the host serves %d models (%s); name the one you mean'
                         % (len(served), ', '.join(entry['name'] for entry in served)))
    return served[0] if served else None


def file_sha1(path: str) -> Optional[str]:
    """The sha1 of a file (what Ansible's copy and template report as checksum), None when unreadable."""
    import hashlib
    digest = hashlib.sha1()  # noqa: S324 - compared with Ansible's checksum, not a security boundary
    try:
        with open(path, 'rb') as handle:
            for chunk in iter(lambda: handle.read(1 << 16), b''):
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()


def layout_problem(directory: str) -> Optional[str]:
    """Why `directory` (the state directory or a model directory) is not in this release's layout, where
    root owns it and no other user can write it (None: it is). An older release gave both to the service
    user; the rollout's control-plane step (llmops.vllm.host_dirs) migrates them, so a host in the old
    layout is not up to date even when nothing else changed. Only root's view counts: a reader that is not
    root (an offline preview on a CI runner) has no link to fear and no migration to run."""
    if os.geteuid() != 0:
        return None
    try:
        st = os.lstat(directory)
    except OSError:
        return None
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode) or st.st_uid != 0 or mode & 0o022:
        return ('%s is in an older release\'s layout (owner uid %d, mode %04o%s): the rollout makes it root\'s'
                % (directory, st.st_uid, mode, ', a link' if stat.S_ISLNK(st.st_mode) else ''))
    return None


def up_to_date_problem(state: State, name: str, fingerprint: str, unit_dir: str = DEFAULT_UNIT_DIR,
                       unit_active: Optional[Callable[[str], bool]] = None,
                       commit_now: Optional[Callable[[Entry], str]] = None,
                       alone: bool = True, state_dir: Optional[str] = None) -> Optional[str]:
    """Why the host is not provably serving what a rollout with `fingerprint` would make of `name`
    (None: it is - the rollout may stop here). Cheap probes first, nothing re-hashed but the unit file:
    the recorded entry and its fingerprint, the only model served (unless not `alone`: several models,
    each checked on its own), the unit file's sha1, its venv and
    model directory, the state directory and the model directory root's (layout_problem()), the unit active,
    and a branch or tag still naming the recorded commit
    (`commit_now`, one hub request, asked last)."""
    entry = state['models'].get(name)
    if entry is None:
        return 'the host does not serve %s' % name
    others = sorted(set(state['models']) - {name})
    if others and alone:
        return 'the host also serves %s' % ', '.join(others)
    if not entry.get('fingerprint'):
        return 'its record has no fingerprint (recorded by an older release)'
    if entry['fingerprint'] != fingerprint:
        return 'the desired state, the variables or the collection changed since it was recorded'
    unit_file = unit_path(name, unit_dir)
    if not entry.get('unit_sha1') or entry['unit_sha1'] != file_sha1(unit_file):
        return '%s is not the unit file the rollout wrote' % unit_file
    if not entry.get('venv') or not os.path.isfile(os.path.join(entry['venv'], 'bin', 'vllm')):
        return 'its vLLM venv %s is missing' % entry.get('venv')
    if not os.path.isdir(entry['path']):
        return 'its model directory %s is missing' % entry['path']
    for directory in ([state_dir] if state_dir else []) + [entry['path']]:
        problem = layout_problem(directory)
        if problem:
            return problem
    if unit_active is not None and not unit_active(entry['unit']):
        return '%s is not active' % entry['unit']
    if commit_now is not None:
        try:
            commit = commit_now(entry)
        except Exception as exc:  # noqa: BLE001 - any failure means: let the full rollout decide
            return 'cannot tell what %s@%s names now (%s)' % (entry['repo_id'], entry['revision'], exc)
        if commit != entry['commit']:
            return '%s@%s now names %s, not the served %s' % (
                entry['repo_id'], entry['revision'], commit[:12], entry['commit'][:12])
    return None


# ----------------------------------------------------------------------------- the host's lock

class LockHeld(StateError):
    """Another run holds the host's lock and its lease has not run out; .lock is that lock."""

    def __init__(self, lock: Mapping[str, Any], now: Optional[str] = None, boot_id: Optional[str] = None,
                 boottime: Optional[float] = None) -> None:
        self.lock = dict(lock)
        super().__init__(describe_lock(lock, now, boot_id, boottime))


class LockLost(StateError):
    """A write (or a fence) of a run that does not hold the host's lock: another run took it over after
    this run's lease ran out, or it was never taken. Nothing was written; .lock is the lock now (or None)."""

    def __init__(self, holder: str, lock: Optional[Mapping[str, Any]], what: str) -> None:
        self.lock = dict(lock) if lock else None
        super().__init__('lock: %s does not hold it (%s) - refused to %s, nothing written: another run may be '
                         'changing this host; this run stops here and leaves the host to the run that holds the lock'
                         % (holder, describe_lock(lock) if lock else 'nobody does', what))


def boot_clock() -> Tuple[Optional[str], Optional[float]]:
    """(boot id, seconds since boot on CLOCK_BOOTTIME) of this host; (None, None) where there is none."""
    try:
        with open(BOOT_ID_PATH) as handle:
            boot_id = handle.read().strip()
        boottime = time.clock_gettime(time.CLOCK_BOOTTIME)
    except (OSError, AttributeError, ValueError):
        return None, None
    return (boot_id, round(boottime, 3)) if boot_id else (None, None)


def _clock(now: Optional[str], boot_id: Optional[str], boottime: Optional[float]) -> Tuple[str, Optional[str], Optional[float]]:
    """The time of a lock operation: the host's own clocks when the caller gives none; a caller that gives
    `now` alone works on the wall clock only (a lock it writes has no boot fields)."""
    if now is None and boot_id is None and boottime is None:
        boot_id, boottime = boot_clock()
    if boot_id is None or boottime is None:
        boot_id, boottime = None, None
    return now or now_iso(), boot_id, boottime


def _time(value: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(value[:-1] + '+00:00' if value.endswith('Z') else value)


def lock_expires(lock: Mapping[str, Any]) -> str:
    """When the lease of `lock` runs out on the wall clock (ISO 8601): lease_s after it was last renewed
    (or taken). Shown to people; the lease itself is judged by lease_left()."""
    since = _time(lock.get('renewed') or lock['started'])
    return (since + datetime.timedelta(seconds=int(lock['lease_s']))).isoformat()


def lease_left(lock: Mapping[str, Any], now: Optional[str] = None, boot_id: Optional[str] = None,
               boottime: Optional[float] = None) -> Tuple[float, str]:
    """(seconds of the lease left - 0 or less: it ran out, the clock that judged it). On the boot clock
    when the lock has boot fields and the host's boot clock is known: another boot id ends the lease (the
    host rebooted, every run on it died), else boot-time seconds count. Otherwise the wall clock."""
    now, boot_id, boottime = _clock(now, boot_id, boottime)
    held_boot, held_s = lock.get('boot_id'), lock.get('boottime_s')
    if held_boot and _valid('seconds', held_s) and boot_id is not None and boottime is not None:
        if held_boot != boot_id:
            return -math.inf, 'the host rebooted since (boot id %s, now %s)' % (held_boot[:8], boot_id[:8])
        return float(cast(float, held_s)) + int(lock['lease_s']) - boottime, 'boot clock'
    return (_time(lock_expires(lock)) - _time(now)).total_seconds(), 'wall clock'


def lock_expired(lock: Mapping[str, Any], now: Optional[str] = None, boot_id: Optional[str] = None,
                 boottime: Optional[float] = None) -> bool:
    return lease_left(lock, now, boot_id, boottime)[0] <= 0


def describe_lock(lock: Mapping[str, Any], now: Optional[str] = None, boot_id: Optional[str] = None,
                  boottime: Optional[float] = None) -> str:
    """'held by <holder> on <controller> since <started>, lease until <expires> (<n> s left)'; the time
    shown is the wall clock's, the seconds left the boot clock's when the lock has one."""
    now, boot_id, boottime = _clock(now, boot_id, boottime)
    left, judged = lease_left(lock, now, boot_id, boottime)
    if math.isinf(left):
        return 'held by %s on %s since %s, lease ended: %s' % (lock['holder'], lock['controller'], lock['started'], judged)
    until = (_time(now) + datetime.timedelta(seconds=left)).replace(microsecond=0).isoformat()
    return 'held by %s on %s since %s, lease until %s (%s)' % (
        lock['holder'], lock['controller'], lock['started'], until,
        '%d s left' % math.ceil(left) if left > 0 else 'expired %d s ago' % math.floor(-left))


def check_holder(state: State, holder: Optional[str], what: str) -> None:
    """Fencing: LockLost unless `holder` holds the lock of `state` (no `holder`: no check - a write
    outside a locked run, e.g. by hand). Its lease may have run out as long as no other run took it."""
    if holder is None:
        return
    held = state.get('lock')
    if held is None or held.get('holder') != holder:
        raise LockLost(holder, held, what)


def _lock_problems(holder: Any, controller: Any, lease_s: Any) -> List[str]:
    problems = []
    if not _valid('str', holder):
        problems.append(_problem('holder', 'str', holder))
    if not _valid('str', controller):
        problems.append(_problem('controller', 'str', controller))
    if not (_is_int(lease_s) and lease_s >= 1):
        problems.append(_problem('lease_s', 'size', lease_s))
    return problems


def _with_clock(lock: Dict[str, Any], boot_id: Optional[str], boottime: Optional[float]) -> Dict[str, Any]:
    lock = dict(lock)
    lock.pop('boot_id', None)
    lock.pop('boottime_s', None)
    if boot_id is not None and boottime is not None:
        lock.update(boot_id=boot_id, boottime_s=boottime)
    return lock


def acquire_lock(state: State, holder: str, controller: str, lease_s: int, now: Optional[str] = None,
                 boot_id: Optional[str] = None, boottime: Optional[float] = None) -> Tuple[State, Optional[Dict[str, Any]]]:
    """(new state, the expired lock taken over or None) with `holder` holding the lock for lease_s.

    Free, or held by `holder` itself (a renewal): taken. Held by another whose lease ran out: taken
    over, and that lock is returned for the warning. Held by another within its lease: LockHeld.
    The clock: see _clock() (the host's wall and boot clocks unless the caller gives them).
    """
    problems = _lock_problems(holder, controller, lease_s)
    if problems:
        raise StateError(problems)
    state = copy.deepcopy(validate(state))
    now, boot_id, boottime = _clock(now, boot_id, boottime)
    held, taken_over = state['lock'], None
    if held is not None and held['holder'] != holder:
        if not lock_expired(held, now, boot_id, boottime):
            raise LockHeld(held, now, boot_id, boottime)
        taken_over = dict(held)
    if held is not None and held['holder'] == holder:
        state['lock'] = _with_clock(dict(held, renewed=now, lease_s=lease_s, controller=controller), boot_id, boottime)
    else:
        state['lock'] = _with_clock({'holder': holder, 'controller': controller, 'started': now, 'lease_s': lease_s},
                                    boot_id, boottime)
    return state, taken_over


def renew_lock(state: State, holder: str, lease_s: int, now: Optional[str] = None, boot_id: Optional[str] = None,
               boottime: Optional[float] = None) -> State:
    """A new state with `holder`'s lease renewed from now for lease_s; LockLost when it does not hold
    the lock (another run took it over after the lease ran out, or it was never taken). This is the
    fence a run passes right before it stops or starts a unit or changes the load balancer."""
    state = copy.deepcopy(validate(state))
    check_holder(state, holder, 'renew its lease')
    held = state['lock']
    problems = _lock_problems(holder, held['controller'], lease_s)
    if problems:
        raise StateError(problems)
    now, boot_id, boottime = _clock(now, boot_id, boottime)
    state['lock'] = _with_clock(dict(held, renewed=now, lease_s=lease_s), boot_id, boottime)
    return state


def release_lock(state: State, holder: str) -> State:
    """A new state without `holder`'s lock; a lock someone else holds (or none) is left as it is."""
    state = copy.deepcopy(validate(state))
    if state['lock'] is not None and state['lock']['holder'] == holder:
        state['lock'] = None
    return state


def _seconds(setting: Any, what: str) -> Optional[int]:
    """`auto` (None) or a number of seconds (an int, or its string spelling from -e)."""
    if setting in (None, '', 'auto'):
        return None
    value = _to_int(setting)
    if not (_is_int(value) and value >= 0):
        raise StateError(_problem(what, 'count', setting) + " or 'auto'")
    return int(value)


def start_timeout_s(weights_bytes: Any, setting: Any = 'auto') -> int:
    """The serve role's start timeout (roles/serve/vars/main.yml serve_start_timeout_seconds): `auto` is
    10 min plus 10 s per GiB of weights, rounded up (MiniMax-M2.5, 215 GiB: 2750 s)."""
    fixed = _seconds(setting, 'start_timeout')
    if fixed is not None:
        return fixed
    size = _to_int(weights_bytes)
    if not (_is_int(size) and size >= 0):
        raise StateError(_problem('weights_bytes', 'count', weights_bytes))
    return START_TIMEOUT_BASE_S + START_TIMEOUT_PER_GIB_S * int(math.ceil(size / float(1 << 30)))


def swap_lease_s(weights_bytes: Any, start_timeout: Any = 'auto', ready_timeout: Any = 'auto', soak_s: Any = 0,
                 benchmark_s: Any = 0, floor_s: Any = 1800) -> int:
    """The lease a rollout renews before the swap and at every fence after it: longer than the start
    and its readiness gate (the longer of the start timeout and the gate's own timeout plus its overrun),
    the benchmark and the soak of the canary, plus `floor_s` (rollout_lock_lease_s) for the rest - the
    drain, the stop, warm-up and record. A run that is mid-start cannot lose the lock to another run;
    one that died holds the host at most this long."""
    start = start_timeout_s(weights_bytes, start_timeout)
    ready = _seconds(ready_timeout, 'ready_timeout')
    gate = (start if ready is None else ready) + GATE_OVERRUN_S
    phases = ((soak_s, 'soak_s'), (benchmark_s, 'benchmark_s'), (floor_s, 'floor_s'))
    extra = [_seconds(value, what) or 0 for value, what in phases]
    return max(start, gate) + sum(extra)


def serialize(state: State) -> str:
    """The file's text: stable JSON (sorted keys, indent 2) with a trailing newline."""
    return json.dumps(state, indent=2, sort_keys=True, separators=(',', ': ')) + '\n'


# ----------------------------------------------------------------------------- files

# O_TMPFILE (Linux >= 3.11, most local filesystems): the new text is written to a file without a name, which
# gets one only for the rename; a writer killed mid-write leaves nothing. Elsewhere a named temporary file.
_O_TMPFILE = getattr(os, 'O_TMPFILE', 0)
# Directories where O_TMPFILE cannot be given a name (no O_TMPFILE there, no /proc, a bind mount: EXDEV).
_NO_TMPFILE: set = set()


def _tmp_name(path: str) -> str:
    """A temporary name beside `path` that says which process wrote it: .<name>.<pid>.<random>.tmp."""
    return '.%s.%d.%s.tmp' % (os.path.basename(path), os.getpid(), os.urandom(6).hex())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it runs, as another user
        return True
    return True


def sweep_temporary(path: str, older_than_s: float = 60.0) -> List[str]:
    """Remove the temporary files of `path`'s writers that died (a crash, SIGKILL): those whose writer
    process is gone, and any older than `older_than_s` (a write takes milliseconds; the names of older
    releases carry no pid). Returns the names removed. Never follows a link (unlink removes the name)."""
    directory = os.path.dirname(os.path.abspath(path))
    pattern = re.compile(r'^\.%s\.(?:(\d+)\.)?[A-Za-z0-9_]+\.tmp$' % re.escape(os.path.basename(path)))
    removed = []
    now = time.time()
    for name in os.listdir(directory):
        match = pattern.match(name)
        if not match:
            continue
        pid = int(match.group(1)) if match.group(1) else None
        if pid == os.getpid():
            continue
        try:
            age = now - os.lstat(os.path.join(directory, name)).st_mtime
            if (pid is not None and not _alive(pid)) or age > older_than_s:
                os.unlink(os.path.join(directory, name))
                removed.append(name)
        except FileNotFoundError:  # its writer renamed it in the meantime
            continue
    return removed


def _write_fd(fd: int, text: str, mode: int) -> None:
    data = text.encode('utf-8')
    os.fchmod(fd, mode)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.fsync(fd)


def _write_tmpfile(path: str, directory: str, text: str, mode: int) -> Optional[str]:
    """Write through O_TMPFILE and link it under a temporary name; None where O_TMPFILE is not supported."""
    if not _O_TMPFILE or directory in _NO_TMPFILE:
        return None
    try:
        fd = os.open(directory, _O_TMPFILE | os.O_WRONLY | getattr(os, 'O_CLOEXEC', 0), mode)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
            _NO_TMPFILE.add(directory)
            return None
        raise
    try:
        _write_fd(fd, text, mode)
        while True:
            tmp = os.path.join(directory, _tmp_name(path))
            try:
                os.link('/proc/self/fd/%d' % fd, tmp)
                return tmp
            except FileExistsError:
                continue
            except OSError as exc:
                if exc.errno in (errno.ENOENT, errno.EPERM, errno.EACCES, errno.EXDEV):  # no /proc link: a named file
                    _NO_TMPFILE.add(directory)
                    return None
                raise
    finally:
        os.close(fd)


def _write_named(path: str, directory: str, text: str, mode: int) -> str:
    fd, tmp = tempfile.mkstemp(prefix='.%s.%d.' % (os.path.basename(path), os.getpid()), suffix='.tmp', dir=directory)
    try:
        _write_fd(fd, text, mode)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    return tmp


def write_atomic(path: str, text: str, mode: int = 0o644) -> None:
    """Replace `path` by `text` (UTF-8): a file without a name (O_TMPFILE; else a named temporary file)
    in the same directory, fsync, linked and renamed over `path`, fsync the directory. A failure at any
    step leaves the old file as it was and no temporary file behind; so does a writer killed at any step
    - the next write removes what a dead writer's name left (sweep_temporary)."""
    directory = os.path.dirname(os.path.abspath(path))
    text.encode('utf-8')  # fails before any file exists
    tmp = _write_tmpfile(path, directory, text, mode) or _write_named(path, directory, text, mode)
    try:
        os.rename(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    sweep_temporary(path)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def save(path: str, state: State) -> str:
    """Validate, serialize and write `state` atomically (0644); returns the text written."""
    text = serialize(validate(state, path))
    write_atomic(path, text)
    return text
