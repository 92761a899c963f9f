# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""vLLM servers running on a host, read from /proc, and the takeover of one into a systemd unit
(llmops.vllm.vllm_process_info, llmops.vllm.vllm_takeover).

A host set up by hand serves from a ``vllm serve`` started in a shell, or from a unit of another
name. :func:`scan` finds every vLLM API server (``vllm serve ...``, ``python -m
vllm.entrypoints.openai.api_server``) with its user, working directory, command line, listening
ports, GPUs (through the compute processes of its process tree) and where it runs from (its cgroup's
unit and its parent). :func:`takeover` turns one into the text of a ``vllm-<name>.service`` unit that
starts it again as it ran, under the serve role's hardening, with the secrets of its argv and
environment moved to an EnvironmentFile, and the host state entry that records it. :func:`stop` ends
it (the retire step), once :func:`verified_server` read it again as the vLLM that was found.

The process belongs to a local user, who is not trusted (docs/security.md): every string the unit
gets from it goes through the systemd sink (module_utils/systemd_unit.py), and a process whose
strings hold a control character is refused (:func:`refuse_unfit`) before anything is written.

Secrets never leave this module in clear: :func:`public_process` redacts the command line and
returns the names of the environment, not its values.

Target side: Python standard library only.
"""

from __future__ import absolute_import, division, print_function

import grp
import ipaddress
import os
import pwd
import re
import signal
import time
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from ansible_collections.llmops.vllm.plugins.module_utils.host_state import NAME_RE, unit_name
from ansible_collections.llmops.vllm.plugins.module_utils.systemd_unit import (
    CONTROL_RE,
    environment_file_line,
    systemd_environment,
    systemd_exec,
    systemd_quote,
    systemd_value,
)

PROC = '/proc'
REDACTED = '********'
# Options of `vllm serve` whose value is a secret, and the environment variable vLLM reads instead.
SECRET_OPTIONS = {'--api-key': 'VLLM_API_KEY', '--hf-token': 'HF_TOKEN'}
# Environment variables whose value is a secret (HF_TOKEN, VLLM_API_KEY, OPENAI_API_KEY, AWS_SECRET_ACCESS_KEY, ...).
SECRET_ENV_RE = re.compile(r'(^|_)(TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIALS?)(_|$)', re.IGNORECASE)
# What a login shell or terminal adds to the environment; systemd sets its own (USER, LOGNAME, SHELL
# come from User=) and none of these change what vLLM does.
SESSION_ENV = frozenset((
    '_', 'PWD', 'OLDPWD', 'SHLVL', 'TERM', 'COLORTERM', 'TERM_PROGRAM', 'TERM_PROGRAM_VERSION', 'LS_COLORS',
    'MAIL', 'MOTD_SHOWN', 'USER', 'LOGNAME', 'SHELL', 'PS1', 'PS2', 'PROMPT_COMMAND', 'HISTFILE', 'HISTSIZE',
    'HISTCONTROL', 'LESSOPEN', 'LESSCLOSE', 'SSH_CLIENT', 'SSH_CONNECTION', 'SSH_TTY', 'SSH_AUTH_SOCK',
    'XDG_SESSION_ID', 'XDG_SESSION_TYPE', 'XDG_SESSION_CLASS', 'XDG_RUNTIME_DIR', 'DBUS_SESSION_BUS_ADDRESS',
    'TMUX', 'TMUX_PANE', 'STY', 'WINDOW', 'DISPLAY', 'INVOCATION_ID', 'JOURNAL_STREAM', 'SYSTEMD_EXEC_PID',
    'MANAGERPID', 'NOTIFY_SOCKET', 'LISTEN_PID', 'LISTEN_FDS',
))
# Device nodes of accelerators a server's tree holds open: NVIDIA's (the serve role's hardening allows
# them), AMD's (it does not).
NVIDIA_DEVICES = '/dev/nvidia'
ACCELERATOR_DEVICES = (NVIDIA_DEVICES, '/dev/kfd', '/dev/dri/')
# The units systemd puts a login session's processes in; a process there was started from a shell.
SESSION_UNIT_RE = re.compile(r'^(session-.+\.scope|user@\d+\.service|sshd\.service|ssh\.service|init\.scope)$')


class ProcessError(ValueError):
    """A process cannot be read or taken over; the message names it and what to do."""


# ----------------------------------------------------------------------------- the command line

def _basename(word: str) -> str:
    return word.rstrip('/').rsplit('/', 1)[-1]


def server_args(argv: Sequence[str]) -> Optional[List[str]]:
    """The arguments of a vLLM API server command line (after ``serve`` or the entrypoint module),
    or None when ``argv`` is not one.

    ``vllm serve M ...``, ``python3 /venv/bin/vllm serve M ...`` (a script started through its
    shebang), ``python -m vllm.entrypoints.openai.api_server --model M ...`` and ``python -m
    vllm.entrypoints.cli.main serve M ...``. vLLM's own worker processes (``VLLM::EngineCore``) do not match.
    """
    argv = list(argv)
    for index, word in enumerate(argv[:3]):
        if _basename(word) == 'vllm' and index + 1 < len(argv) and argv[index + 1] == 'serve':
            return argv[index + 2:]
    for index, word in enumerate(argv[:-1]):
        if word != '-m':
            continue
        module = argv[index + 1]
        if module == 'vllm.entrypoints.openai.api_server':
            return argv[index + 2:]
        if module == 'vllm.entrypoints.cli.main' and argv[index + 2:index + 3] == ['serve']:
            return argv[index + 3:]
        return None
    return None


def _option_name(word: str) -> str:
    # vLLM's parser takes --max_model_len for --max-model-len.
    name = word.split('=', 1)[0]
    return '--' + name[2:].replace('_', '-') if name.startswith('--') else name


def option(args: Sequence[str], *names: str) -> Optional[str]:
    """The value of the last ``--name value`` or ``--name=value`` among ``args`` (None: not given)."""
    value = None
    for index, word in enumerate(args):
        name = _option_name(word)
        if name not in names:
            continue
        if '=' in word and word.startswith('--'):
            value = word.split('=', 1)[1]
        elif index + 1 < len(args) and not args[index + 1].startswith('-'):
            value = args[index + 1]
    return value


def has_flag(args: Sequence[str], name: str) -> bool:
    """Whether a boolean flag is on (``--flag``, ``--flag=true``; ``--no-flag`` and ``--flag=false`` are off)."""
    on = False
    for word in args:
        option_name = _option_name(word)
        if option_name == name:
            on = not (word.startswith('--') and '=' in word and word.split('=', 1)[1].lower() in ('false', '0', 'no'))
        elif option_name == '--no-' + name[2:]:
            on = False
    return on


def model_arg(args: Sequence[str]) -> Optional[str]:
    """The model a server serves: ``vllm serve MODEL`` (the first word) or ``--model MODEL``."""
    explicit = option(args, '--model')
    if explicit:
        return explicit
    return args[0] if args and not args[0].startswith('-') else None


def split_secrets(argv: Sequence[str]) -> Tuple[List[str], Dict[str, str]]:
    """``argv`` without the secret options of SECRET_OPTIONS, and those secrets as the environment
    variables vLLM reads instead (``--api-key K`` -> VLLM_API_KEY=K). ``--hf-token`` without a
    value (use the stored login) is kept."""
    kept: List[str] = []
    secrets: Dict[str, str] = {}
    words = list(argv)
    index = 0
    while index < len(words):
        word = words[index]
        name = _option_name(word)
        if name in SECRET_OPTIONS and word.startswith('--'):
            if '=' in word:
                secrets[SECRET_OPTIONS[name]] = word.split('=', 1)[1]
                index += 1
                continue
            if index + 1 < len(words) and not words[index + 1].startswith('-'):
                secrets[SECRET_OPTIONS[name]] = words[index + 1]
                index += 2
                continue
        kept.append(word)
        index += 1
    return kept, secrets


def redact_argv(argv: Sequence[str]) -> List[str]:
    """``argv`` with the value of every secret option replaced by ********."""
    out: List[str] = []
    hide_next = False
    for word in argv:
        if hide_next and not word.startswith('-'):
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = False
        name = _option_name(word)
        if name in SECRET_OPTIONS and word.startswith('--'):
            if '=' in word:
                out.append(word.split('=', 1)[0] + '=' + REDACTED)
                continue
            hide_next = True
        out.append(word)
    return out


def command_line(argv: Sequence[str]) -> str:
    """A readable one-line command (words with spaces in single quotes); redact first."""
    return ' '.join("'%s'" % word if (not word or any(c.isspace() for c in word)) else word for word in argv)


def is_secret_env(name: str) -> bool:
    return bool(SECRET_ENV_RE.search(name))


def takeover_name(args: Sequence[str], model: Optional[str]) -> Optional[str]:
    """The unit name a taken-over server gets: from --served-model-name (its first name), else the
    model's last path component, lower-cased, runs of other characters as '-'. None when nothing is left."""
    served = option(args, '--served-model-name')
    for candidate in (served, _basename(model) if model else None):
        if not candidate:
            continue
        name = re.sub(r'[^a-z0-9]+', '-', candidate.lower()).strip('-')[:63].rstrip('-')
        if name and NAME_RE.match(name):
            return name
    return None


# ----------------------------------------------------------------------------- /proc

def _read(path: str, binary: bool = False) -> Optional[Any]:
    try:
        with open(path, 'rb' if binary else 'r') as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return None


def _readlink(path: str) -> Optional[str]:
    try:
        return os.readlink(path)
    except OSError:
        return None


def _split_nul(data: Optional[bytes]) -> List[str]:
    if not data:
        return []
    return [word.decode('utf-8', 'surrogateescape') for word in data.split(b'\0')[:-1 if data.endswith(b'\0') else None]]


def parse_stat(text: str) -> Tuple[int, str]:
    """(ppid, start time in clock ticks since boot) from /proc/PID/stat; the name may hold spaces and ')'."""
    fields = text[text.rindex(')') + 2:].split()
    return int(fields[1]), fields[19]


def parse_cgroup(text: str) -> Tuple[Optional[str], Optional[str]]:
    """(cgroup path, its systemd unit) from /proc/PID/cgroup (the v2 line, else name=systemd)."""
    path = None
    for line in (text or '').splitlines():
        parts = line.split(':', 2)
        if len(parts) == 3 and (parts[0] == '0' and parts[1] == '' or parts[1] == 'name=systemd'):
            path = parts[2]
            if parts[0] == '0':
                break
    if not path:
        return None, None
    units = [part for part in path.split('/') if part.endswith(('.service', '.scope'))]
    return path, (units[-1] if units else None)


def parse_listening(text: str) -> Dict[str, str]:
    """Socket inode -> 'address:port' of the LISTEN sockets of /proc/PID/net/tcp or tcp6."""
    out: Dict[str, str] = {}
    for line in (text or '').splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != '0A':
            continue
        address, port = fields[1].rsplit(':', 1)
        out[fields[9]] = '%s:%d' % (_address(address), int(port, 16))
    return out


def _address(hexed: str) -> str:
    raw = bytes.fromhex(hexed)
    if len(raw) == 4:
        return str(ipaddress.IPv4Address(raw[::-1]))
    # IPv6: four 32-bit words, each in host (little-endian) order.
    address = ipaddress.IPv6Address(b''.join(raw[i:i + 4][::-1] for i in range(0, 16, 4)))
    return str(address.ipv4_mapped) if address.ipv4_mapped else '[%s]' % address


def _user(uid: Optional[int]) -> Tuple[Optional[str], Optional[str]]:
    if uid is None:
        return None, None
    try:
        entry = pwd.getpwuid(uid)
    except KeyError:
        return str(uid), None
    try:
        group = grp.getgrgid(entry.pw_gid).gr_name
    except KeyError:
        group = str(entry.pw_gid)
    return entry.pw_name, group


class Proc:
    """What /proc says of one process (raw: argv and environment in clear; see public_process)."""

    def __init__(self, pid: int, proc: str = PROC) -> None:
        base = os.path.join(proc, str(pid))
        stat = _read(os.path.join(base, 'stat'))
        if stat is None:
            raise ProcessError('process %d is gone' % pid)
        self.pid = pid
        self.proc = proc
        self.ppid, self.start_time = parse_stat(stat)
        self.argv = _split_nul(_read(os.path.join(base, 'cmdline'), binary=True))
        self.comm = (_read(os.path.join(base, 'comm')) or '').strip()
        self.uid: Optional[int] = None
        for line in (_read(os.path.join(base, 'status')) or '').splitlines():
            if line.startswith('Uid:'):
                self.uid = int(line.split()[1])
        self.user, self.group = _user(self.uid)
        self.cwd = _readlink(os.path.join(base, 'cwd'))
        self.exe = _readlink(os.path.join(base, 'exe'))
        environ = _read(os.path.join(base, 'environ'), binary=True)
        self.environ_readable = environ is not None
        self.environ: Dict[str, str] = {}
        for item in _split_nul(environ):
            if '=' in item:
                key, value = item.split('=', 1)
                self.environ[key] = value
        self.cgroup, self.unit = parse_cgroup(_read(os.path.join(base, 'cgroup')) or '')

    def alive(self) -> bool:
        stat = _read(os.path.join(self.proc, str(self.pid), 'stat'))
        if stat is None:
            return False
        try:
            return parse_stat(stat)[1] == self.start_time and not _zombie(stat)
        except (ValueError, IndexError):
            return False

    def open_files(self) -> List[str]:
        """What its file descriptors point to (``socket:[inode]``, paths)."""
        fd_dir = os.path.join(self.proc, str(self.pid), 'fd')
        try:
            names = os.listdir(fd_dir)
        except OSError:
            return []
        return [target for target in (_readlink(os.path.join(fd_dir, name)) for name in names) if target]

    def socket_inodes(self) -> List[str]:
        return [target[8:-1] for target in self.open_files() if target.startswith('socket:[')]


def _zombie(stat: str) -> bool:
    return stat[stat.rindex(')') + 2:].split()[0] in ('Z', 'X')


def pids(proc: str = PROC) -> List[int]:
    return sorted(int(name) for name in os.listdir(proc) if name.isdigit())


def parents(proc: str = PROC) -> Dict[int, int]:
    """pid -> ppid of every process."""
    out: Dict[int, int] = {}
    for pid in pids(proc):
        stat = _read(os.path.join(proc, str(pid), 'stat'))
        if stat:
            try:
                out[pid] = parse_stat(stat)[0]
            except (ValueError, IndexError):
                continue
    return out


def descendants(pid: int, parent_of: Mapping[int, int]) -> List[int]:
    """The pids below ``pid`` in the process tree."""
    children: Dict[int, List[int]] = {}
    for child, parent in parent_of.items():
        children.setdefault(parent, []).append(child)
    out: List[int] = []
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop()
        out.append(child)
        todo.extend(children.get(child, []))
    return sorted(out)


def _resolve_program(word: str, cwd: Optional[str], environ: Mapping[str, str], exe: Optional[str]) -> Optional[str]:
    """argv[0] as an absolute path: as it is, against the working directory, or through its PATH."""
    if word.startswith('/'):
        return word
    if '/' in word and cwd:
        return os.path.normpath(os.path.join(cwd, word))
    for directory in environ.get('PATH', '').split(':'):
        candidate = os.path.join(directory, word)
        if directory.startswith('/') and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return exe


def venv_of(program: Optional[str]) -> Optional[str]:
    """The virtual environment a program runs from (bin/<program> under a directory with pyvenv.cfg)."""
    if not program:
        return None
    root = os.path.dirname(os.path.dirname(program))
    return root if os.path.isfile(os.path.join(root, 'pyvenv.cfg')) else None


def scan(proc: str = PROC, gpu_pids: Optional[Mapping[int, Sequence[int]]] = None) -> List[Dict[str, Any]]:
    """Every vLLM API server on the host (raw: see public_process), sorted by pid.

    ``gpu_pids``: pid -> GPU indices of the compute processes (nvidia-smi); a server's GPUs are those
    of its process tree. A server started by another server (a test harness) is listed once, at the top.
    """
    parent_of = parents(proc)
    found: Dict[int, Proc] = {}
    for pid in sorted(parent_of):
        argv = _split_nul(_read(os.path.join(proc, str(pid), 'cmdline'), binary=True))
        if server_args(argv) is None:
            continue
        try:
            found[pid] = Proc(pid, proc)
        except (ProcessError, ValueError, IndexError):
            continue
    servers = []
    for pid, process in sorted(found.items()):
        ancestor, seen = parent_of.get(pid), set()
        nested = False
        while ancestor and ancestor not in seen:
            if ancestor in found:
                nested = True
                break
            seen.add(ancestor)
            ancestor = parent_of.get(ancestor)
        if not nested:
            servers.append(describe(process, parent_of, gpu_pids or {}))
    return servers


def ephemeral_ports(proc: str = PROC) -> Tuple[int, int]:
    """The kernel's range for ephemeral ports (net.ipv4.ip_local_port_range; Linux's default when unreadable)."""
    text = _read(os.path.join(proc, 'sys', 'net', 'ipv4', 'ip_local_port_range')) or ''
    parts = text.split()
    if len(parts) == 2 and all(part.isdigit() for part in parts):
        return int(parts[0]), int(parts[1])
    return 32768, 60999


def describe(process: Proc, parent_of: Mapping[int, int], gpu_pids: Mapping[int, Sequence[int]]) -> Dict[str, Any]:
    """The raw facts of one server process (argv and environment in clear)."""
    tree = [process.pid] + descendants(process.pid, parent_of)
    listening: List[str] = []
    devices: Set[str] = set()
    net: Dict[str, str] = {}
    for name in ('tcp', 'tcp6'):
        net.update(parse_listening(_read(os.path.join(process.proc, str(process.pid), 'net', name)) or ''))
    for pid in tree:
        try:
            member = process if pid == process.pid else Proc(pid, process.proc)
        except (ProcessError, ValueError, IndexError):
            continue
        files = member.open_files()
        listening.extend(net[target[8:-1]] for target in files if target.startswith('socket:[') and target[8:-1] in net)
        devices.update(target for target in files if target.startswith(ACCELERATOR_DEVICES))
    # vLLM's workers talk over sockets on ephemeral ports; what clients reach is the rest (its --port).
    low, high = ephemeral_ports(process.proc)
    served_port = _int(option(server_args(process.argv) or [], '--port'))
    listening = sorted(set(item for item in listening
                           if not low <= int(item.rsplit(':', 1)[1]) <= high or int(item.rsplit(':', 1)[1]) == served_port))
    gpus = sorted(set(index for pid in tree for index in gpu_pids.get(pid, ())))
    args = server_args(process.argv) or []
    program = _resolve_program(process.argv[0], process.cwd, process.environ, process.exe) if process.argv else process.exe
    parent = None
    if process.ppid:
        parent = {'pid': process.ppid, 'name': (_read(os.path.join(process.proc, str(process.ppid), 'comm')) or '?').strip()}
    model = model_arg(args)
    return {
        'pid': process.pid,
        'start_time': process.start_time,
        'user': process.user,
        'uid': process.uid,
        'group': process.group,
        'argv': list(process.argv),
        'args': args,
        'program': program,
        'exe': process.exe,
        'venv': venv_of(program) or venv_of(process.exe),
        'cwd': process.cwd,
        'environ': dict(process.environ),
        'environ_readable': process.environ_readable,
        'cgroup': process.cgroup,
        'unit': process.unit,
        'parent': parent,
        'children': tree[1:],
        'listen': listening,
        'ports': sorted(set(int(item.rsplit(':', 1)[1]) for item in listening)),
        'gpus': gpus,
        'devices': sorted(devices),
        'model': model,
        'served_model_name': (option(args, '--served-model-name') or model),
        'name': takeover_name(args, model),
    }


def unit_main_pid(run_command: Callable[[List[str]], Tuple[int, str, str]], systemctl: Optional[str],
                  unit: Optional[str]) -> Optional[int]:
    """The MainPID systemd reports for a service unit; None for a session's unit, a scope or without systemctl."""
    if not unit or not systemctl or SESSION_UNIT_RE.match(unit) or not unit.endswith('.service'):
        return None
    rc, out, _err = run_command([systemctl, 'show', '-p', 'MainPID', '--value', unit])
    return int(out.strip()) if rc == 0 and out.strip().isdigit() else None


def started_from(server: Mapping[str, Any], main_pid_of_unit: Optional[int] = None) -> str:
    """Where a server runs from, in words: its own unit, or a shell/session (its parent and cgroup unit)."""
    unit = server.get('unit')
    if unit and main_pid_of_unit == server['pid']:
        return 'unit %s' % unit
    parent = server.get('parent') or {}
    where = 'started by %s (pid %s)' % (parent.get('name', '?'), parent.get('pid', '?'))
    return where + (' in %s' % unit if unit else '')


def public_process(server: Mapping[str, Any], managed_by: Optional[str] = None,
                   origin: Optional[str] = None) -> Dict[str, Any]:
    """What may be shown or returned of a server: the command line redacted, environment names only."""
    environ = server.get('environ') or {}
    _kept, argv_secrets = split_secrets(server.get('args') or [])
    return {
        'pid': server['pid'],
        'start_time': server['start_time'],
        'user': server.get('user'),
        'group': server.get('group'),
        'command': command_line(redact_argv(server.get('argv') or [])),
        'program': server.get('program'),
        'venv': server.get('venv'),
        'cwd': server.get('cwd'),
        'environment': sorted(environ),
        'secrets': sorted(set(name for name in environ if is_secret_env(name)) | set(argv_secrets)),
        'unit': server.get('unit'),
        'started_from': origin or started_from(server),
        'parent': server.get('parent'),
        'listen': list(server.get('listen') or []),
        'ports': list(server.get('ports') or []),
        'gpus': list(server.get('gpus') or []),
        'model': server.get('model'),
        'served_model_name': server.get('served_model_name'),
        'name': server.get('name'),
        'managed_by': managed_by,
    }


def managed_by(server: Mapping[str, Any], units: Iterable[str], takeovers: Iterable[Mapping[str, Any]]) -> Optional[str]:
    """The unit of this collection a server belongs to: it runs in one of ``units``, or it is a process
    a recorded takeover names (same pid and start time) that still runs outside its unit. None: foreign."""
    unit = server.get('unit')
    if isinstance(unit, str) and unit in set(units):
        return unit
    for takeover in takeovers:
        if str(takeover.get('pid')) == str(server['pid']) and str(takeover.get('start_time')) == str(server['start_time']):
            return str(takeover.get('unit') or 'takeover')
    return None


def conflicts(servers: Sequence[Mapping[str, Any]], port: Optional[int], gpu_indices: Sequence[int]) -> List[Mapping[str, Any]]:
    """The foreign servers (managed_by None) that hold ``port`` or one of ``gpu_indices``."""
    out = []
    for server in servers:
        if server.get('managed_by'):
            continue
        if (port is not None and port in server.get('ports', [])) or set(server.get('gpus', [])) & set(gpu_indices):
            out.append(server)
    return out


def describe_foreign(server: Mapping[str, Any]) -> str:
    """One readable line about a (public) server: pid, user, command, port, GPUs, where it runs from."""
    return ('pid %s (user %s, %s): %s; listens on %s; GPUs %s; working directory %s'
            % (server['pid'], server.get('user') or '?', server.get('started_from') or '?', server.get('command'),
               ', '.join(server.get('listen') or []) or 'nothing yet',
               ','.join(str(i) for i in server.get('gpus') or []) or 'none', server.get('cwd') or '?'))


# ----------------------------------------------------------------------------- takeover

# The serve role's hardening (roles/serve/templates/vllm.service.j2, serve_hardening), directive by
# directive and in its order; tests/unit/test_vllm_process.py renders that block of the template and
# holds the two equal. ReadWritePaths= comes after ProtectSystem=; the device block depends on whether
# the server uses NVIDIA GPUs.
HARDENING_PROTECT = (('NoNewPrivileges', 'yes'), ('ProtectSystem', 'strict'))
HARDENING_FILES = (('PrivateTmp', 'yes'), ('ProtectHome', 'yes'))
HARDENING_CUDA = (
    ('DevicePolicy', 'closed'),
    ('DeviceAllow', 'char-nvidia-frontend rw'),
    ('DeviceAllow', 'char-nvidia-uvm rw'),
    ('DeviceAllow', 'char-nvidia-caps r'),
    ('DeviceAllow', '/dev/nvidiactl rw'),
    ('DeviceAllow', '/dev/nvidia-uvm rw'),
    ('DeviceAllow', '/dev/nvidia-uvm-tools rw'),
    ('DeviceAllow', '/dev/nvidia-modeset rw'),
)
HARDENING_CPU = (('PrivateDevices', 'yes'), ('PrivateUsers', 'yes'))
HARDENING_KERNEL = (
    ('PrivateIPC', 'yes'),
    ('ProtectKernelTunables', 'yes'),
    ('ProtectKernelModules', 'yes'),
    ('ProtectKernelLogs', 'yes'),
    ('ProtectControlGroups', 'yes'),
    ('ProtectClock', 'yes'),
    ('ProtectHostname', 'yes'),
    ('ProtectProc', 'invisible'),
    ('RestrictNamespaces', 'yes'),
    ('RestrictRealtime', 'yes'),
    ('RestrictSUIDSGID', 'yes'),
    ('RestrictAddressFamilies', 'AF_UNIX AF_INET AF_INET6 AF_NETLINK'),
    ('LockPersonality', 'yes'),
    ('RemoveIPC', 'yes'),
    ('SystemCallArchitectures', 'native'),
    ('SystemCallFilter', '@system-service'),
    ('SystemCallFilter', '~@privileged'),
    ('CapabilityBoundingSet', ''),
    ('UMask', '0077'),
)
# Where ProtectHome= and PrivateTmp= would hide what a server uses.
HOME_DIRS = ('/home', '/root', '/run/user')
TMP_DIRS = ('/tmp', '/var/tmp')
# Environment variables naming where vLLM and its libraries (Hugging Face, PyTorch, Triton, CUDA, ...) write
# caches and settings; without them, under HOME.
CACHE_ENV = ('HF_HOME', 'HF_HUB_CACHE', 'HUGGINGFACE_HUB_CACHE', 'TRANSFORMERS_CACHE', 'HF_DATASETS_CACHE',
             'XDG_CACHE_HOME', 'XDG_CONFIG_HOME', 'VLLM_CACHE_ROOT', 'VLLM_CONFIG_ROOT', 'VLLM_ASSETS_CACHE',
             'TRITON_CACHE_DIR', 'TORCHINDUCTOR_CACHE_DIR', 'TORCH_HOME', 'TORCH_EXTENSIONS_DIR', 'CUDA_CACHE_PATH',
             'NUMBA_CACHE_DIR', 'OUTLINES_CACHE_DIR', 'PROMETHEUS_MULTIPROC_DIR')
# Never made writable, even when a server's directory or HOME is one of them (ProtectSystem=strict keeps them read-only).
SYSTEM_DIRS = frozenset(('/', '/bin', '/boot', '/dev', '/efi', '/etc', '/home', '/lib', '/lib32', '/lib64', '/media',
                         '/mnt', '/opt', '/proc', '/run', '/sbin', '/srv', '/sys', '/usr', '/usr/local', '/var',
                         '/var/lib', '/var/cache', '/var/log'))
# User= and Group=: a name (systemd's relaxed rule, without its rarer characters) or a numeric id.
ACCOUNT_RE = re.compile(r'^([A-Za-z_][A-Za-z0-9_.-]{0,31}|[0-9]{1,10})$')


def _unfit(text: str) -> Optional[str]:
    """Why ``text`` cannot go on a unit line (a control character, bytes that are not UTF-8), or None."""
    found = CONTROL_RE.search(text)
    if found:
        return 'a control character (%r at position %d)' % (found.group(), found.start())
    try:
        text.encode('utf-8')
    except UnicodeEncodeError as exc:
        return 'bytes that are not UTF-8 (at position %d)' % exc.start
    return None


def refuse_unfit(server: Mapping[str, Any]) -> None:
    """ProcessError naming the pid and the field when a string the unit would get from the process - a
    word of its command line, its working directory, program or executable, an environment variable's
    name or value, its parent's name, its unit - holds a control character or bytes that are not UTF-8.

    A line break there would open a new directive or section in a unit that root starts (an
    unprivileged ``vllm serve --served-model-name $'x\\n[Service]\\nExecStartPre=+...'`` became one).
    Secret values are never shown. The variables a login shell adds are dropped from the unit, so only
    their names are checked."""
    pid = server['pid']
    fields: List[Tuple[str, str, bool]] = []
    argv = [str(word) for word in server.get('argv') or []]
    redacted = redact_argv(argv)
    fields.extend(('its command line word %d' % index, word, redacted[index] != word) for index, word in enumerate(argv))
    for key in ('cwd', 'program', 'exe'):
        if server.get(key):
            fields.append(({'cwd': 'its working directory', 'program': 'its program', 'exe': 'its executable'}[key],
                           str(server[key]), False))
    for name, value in sorted((server.get('environ') or {}).items()):
        fields.append(('the name of an environment variable', str(name), False))
        if name not in SESSION_ENV:
            fields.append(('environment variable %s' % name, str(value), is_secret_env(str(name))))
    if (server.get('parent') or {}).get('name'):
        fields.append(("its parent's name", str(server['parent']['name']), False))
    if server.get('unit'):
        fields.append(('its unit', str(server['unit']), False))
    for what, text, secret in fields:
        problem = _unfit(text)
        if problem:
            raise ProcessError(
                'process %d: %s%s holds %s. A unit file line cannot carry it: a line break there would start a '
                'directive that root runs. The takeover refuses this process and wrote or stopped nothing; restart '
                'it without that character (or stop it yourself) and run the rollout again'
                % (pid, what, '' if secret else ' (%r)' % text[:120], problem))


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip('/') + '/') for root in roots)


def _home(server: Mapping[str, Any], environ: Mapping[str, str]) -> Optional[str]:
    """The server's HOME: its environment's, else its user's (what systemd gives User=)."""
    if environ.get('HOME'):
        return environ['HOME']
    try:
        return pwd.getpwuid(int(server['uid'])).pw_dir if server.get('uid') is not None else None
    except KeyError:
        return None


def paths_used(server: Mapping[str, Any], environ: Mapping[str, str]) -> List[str]:
    """The absolute paths a server uses, as far as its process tells: its program, executable, venv,
    working directory, HOME, its model (made absolute), every absolute path among its arguments
    (``--opt=/path`` too) and environment values (lists such as PATH or PYTHONPATH split at ':')."""
    found = [server.get('program'), server.get('exe'), server.get('venv'), server.get('cwd'), _home(server, environ)]
    model = server.get('model')
    if model and server.get('cwd'):
        found.append(os.path.normpath(os.path.join(server['cwd'], model)))
    for word in server.get('argv') or []:
        found.append(word.split('=', 1)[1] if word.startswith('--') and '=' in word else word)
    for value in environ.values():
        found.extend(value.split(':'))
    return sorted(set(os.path.normpath(path) for path in found if path and path.startswith('/')))


def writable_paths(server: Mapping[str, Any], environ: Mapping[str, str]) -> List[str]:
    """What the taken-over unit may write under ProtectSystem=strict: the server's working directory,
    its HOME (where vLLM, Hugging Face, Triton and PyTorch keep caches by default) and the cache
    directories its environment names (CACHE_ENV). Not the model: vLLM only reads it. A system
    directory (SYSTEM_DIRS) stays read-only; a path below another one is left out."""
    candidates = [server.get('cwd'), _home(server, environ)] + [environ.get(name) for name in CACHE_ENV]
    paths = sorted(set(os.path.normpath(path) for path in candidates
                       if path and path.startswith('/') and os.path.normpath(path) not in SYSTEM_DIRS))
    return [path for path in paths if not any(other != path and _under(path, [other]) for other in paths)]


def hardening_directives(device: str, writable: Sequence[str], private_tmp: bool = True,
                         protect_home: str = 'yes') -> List[Tuple[str, str]]:
    """The serve role's hardening as (directive, value) pairs, for a server on ``device`` ('cuda': the
    NVIDIA device nodes stay; else none) that may write ``writable`` (ReadWritePaths=, each allowed to
    be missing). ``private_tmp`` False keeps the host's /tmp (a server that uses a path there), and
    ``protect_home`` 'read-only' keeps home directories readable (one that uses a path there)."""
    out = list(HARDENING_PROTECT)
    out.extend(('ReadWritePaths', systemd_quote('-' + path)) for path in writable)
    out.extend(item for item in HARDENING_FILES if item[0] != 'PrivateTmp' or private_tmp)
    out = [(key, protect_home) if key == 'ProtectHome' else (key, value) for key, value in out]
    out.extend(HARDENING_CUDA if device == 'cuda' else HARDENING_CPU)
    out.extend(HARDENING_KERNEL)
    return out


def takeover_hardening(server: Mapping[str, Any], environ: Mapping[str, str]) -> Tuple[List[str], List[Tuple[str, str]]]:
    """(comment lines, directives) of the serve role's hardening fitted to a server: its own directories
    writable, /tmp and home directories kept where it uses them, NVIDIA devices where it uses them.
    ProcessError when it cannot run under it (AMD GPUs; a directory ReadWritePaths= cannot name)."""
    pid = server['pid']
    devices = list(server.get('devices') or [])
    others = [device for device in devices if not device.startswith(NVIDIA_DEVICES)]
    if others:
        raise ProcessError('process %d uses %s, which the serve role\'s hardening hides (PrivateDevices=); take it over '
                           'with hardening=false (vllm_takeover_hardening: false)' % (pid, ', '.join(others)))
    device = 'cuda' if server.get('gpus') or devices else 'cpu'
    writable = writable_paths(server, environ)
    for path in writable:
        if '$' in path:
            raise ProcessError('process %d writes to %r, which ReadWritePaths= cannot name (a "$"); take it over with '
                               'hardening=false (vllm_takeover_hardening: false)' % (pid, path))
    used = paths_used(server, environ)
    in_tmp = [path for path in used if _under(path, TMP_DIRS)]
    in_home = [path for path in used if _under(path, HOME_DIRS)]
    comments = ["# The serve role's hardening (hardening=false runs it exactly as it ran); it may write "
                "its own directories only."]
    if in_tmp:
        comments.append('# No PrivateTmp=: it uses %s.' % ', '.join(in_tmp))
    if in_home:
        comments.append('# ProtectHome=read-only: it uses %s.' % ', '.join(in_home))
    directives = hardening_directives(device, writable, private_tmp=not in_tmp, protect_home='read-only' if in_home else 'yes')
    return comments, directives


def takeover(server: Mapping[str, Any], name: str, unit_dir: str, env_dir: str, hardening: bool = True,
             max_model_len: Optional[int] = None) -> Dict[str, Any]:
    """The unit text, the EnvironmentFile text (None when there is no secret) and the state entry
    that take ``server`` (raw, from scan) over as vllm-<name>.service, under the serve role's hardening
    unless ``hardening`` is False. Raises ProcessError, before anything is written, when it cannot be
    reproduced (no command line, no environment to read, no absolute program, no user) or must not be
    (a control character in what the unit would get from the process: refuse_unfit)."""
    if not NAME_RE.match(name or ''):
        raise ProcessError('name %r: a takeover names the unit vllm-<name>.service; use 1-63 lower-case letters, '
                           'digits or "-" (vllm_takeover_name)' % (name,))
    pid = server['pid']
    if not server.get('argv'):
        raise ProcessError('process %d has no command line to read (a kernel thread or gone)' % pid)
    if not server.get('environ_readable'):
        raise ProcessError('the environment of process %d cannot be read; run the takeover as root' % pid)
    refuse_unfit(server)
    program = server.get('program')
    if not program or not program.startswith('/'):
        raise ProcessError('process %d: cannot tell which program %r is (no absolute path, not on its PATH)'
                           % (pid, server['argv'][0]))
    if not server.get('cwd'):
        raise ProcessError('process %d: its working directory cannot be read; run the takeover as root' % pid)
    if server['cwd'] != server['cwd'].strip() or not server['cwd'].startswith('/'):
        raise ProcessError('process %d: its working directory %r is not an absolute path without whitespace at its ends, '
                           'which WorkingDirectory= needs; restart it from another directory' % (pid, server['cwd']))
    user, group = server.get('user'), server.get('group') or server.get('user')
    for what, account in (('user', user), ('group', group)):
        if not ACCOUNT_RE.match(str(account or '')):
            raise ProcessError('process %d: its %s %r is not a name or id that User=/Group= can carry; run the '
                               'takeover as root, or stop the process yourself' % (pid, what, account))
    argv, secrets = split_secrets(server['argv'])
    argv[0] = program
    environ = dict((key, value) for key, value in (server.get('environ') or {}).items() if key not in SESSION_ENV)
    for key in sorted(environ):
        if is_secret_env(key):
            secrets.setdefault(key, environ.pop(key))
    env_file = os.path.join(env_dir, name + '.env') if secrets else None
    redacted = command_line(redact_argv(server['argv']))
    try:
        lines = [
            '# ' + systemd_value('Taken over by llmops.vllm (vllm_takeover) from a vLLM it did not start: pid %d, user %s, %s.'
                                 % (pid, user, started_from(server)), 'a comment'),
            '# It runs as it ran: command, user, working directory, environment.',
            '# ' + systemd_value('Was: %s (secrets redacted).' % redacted, 'a comment'),
            '[Unit]',
            'Description=%s' % systemd_value('vLLM serving %s (taken over from pid %d)'
                                             % (server.get('served_model_name') or name, pid), 'Description'),
            'After=network-online.target',
            'Wants=network-online.target',
            '',
            '[Service]',
            'Type=exec',
            'User=%s' % systemd_value(user, 'User'),
            'Group=%s' % systemd_value(group, 'Group'),
            'WorkingDirectory=%s' % systemd_value(server['cwd'], 'WorkingDirectory'),
        ]
        lines.extend('Environment=%s' % assignment for assignment in systemd_environment(environ))
        if env_file:
            lines.append('EnvironmentFile=%s' % systemd_value(env_file, 'EnvironmentFile'))
        lines.extend([
            'ExecStart=%s' % systemd_exec(argv),
            'KillMode=control-group',
            '# vLLM exits with status 0 when its engine dies, so restart on any exit.',
            'Restart=always',
            'RestartSec=5',
        ])
        if hardening:
            comments, directives = takeover_hardening(server, environ)
            lines.extend(comments)
            lines.extend('%s=%s' % directive for directive in directives)
        lines.extend(['', '[Install]', 'WantedBy=multi-user.target', ''])
        env_text = ''.join(environment_file_line(key, value) for key, value in sorted(secrets.items())) if secrets else None
    except ValueError as exc:
        if isinstance(exc, ProcessError):
            raise
        raise ProcessError('process %d: %s; the takeover refuses it and wrote or stopped nothing' % (pid, exc))
    return {
        'unit': unit_name(name),
        'unit_path': os.path.join(unit_dir, unit_name(name)),
        'unit_text': '\n'.join(lines),
        'env_file': env_file,
        'env_text': env_text,
        'secrets': sorted(secrets),
        'entry': state_entry(server, name, max_model_len),
    }


def state_entry(server: Mapping[str, Any], name: str, max_model_len: Optional[int] = None) -> Dict[str, Any]:
    """The host state entry of a taken-over server (module_utils/host_state.py ENTRY_KEYS)."""
    args = server.get('args') or []
    model = server.get('model') or 'unknown'
    path = model
    if server.get('cwd') and (model.startswith(('/', './', '../', '~')) or os.path.exists(os.path.join(server['cwd'], model))):
        path = os.path.normpath(os.path.join(server['cwd'], os.path.expanduser(model)))
    # Otherwise a hub repo id vLLM resolved itself (in its cache), not a directory.
    snapshot = re.search(r'/snapshots/([0-9a-f]{40})(/|$)', path)
    ports = server.get('ports') or []
    port = option(args, '--port')
    port_number = int(port) if port and port.isdigit() else (ports[0] if ports else 8000)
    listening = [item.rsplit(':', 1)[0].strip('[]') for item in server.get('listen') or []
                 if item.rsplit(':', 1)[1] == str(port_number)]
    host = option(args, '--host') or (listening[0] if listening else '0.0.0.0')
    tensor = option(args, '--tensor-parallel-size', '-tp')
    data = option(args, '--data-parallel-size', '-dp')
    gpus = list(server.get('gpus') or [])
    length = max_model_len or _int(option(args, '--max-model-len'))
    if not length:
        raise ProcessError('process %d: its context length is not on its command line and its server did not say; '
                           'set vllm_takeover_max_model_len' % server['pid'])
    plan = {
        'device': 'cuda' if gpus else 'cpu',
        'tensor_parallel_size': _int(tensor) or 1,
        'data_parallel_size': _int(data) or 1,
        'enable_expert_parallel': has_flag(args, '--enable-expert-parallel'),
        'gpu_indices': gpus,
        'numa_node': None,
        'max_model_len': length,
        'layout': None,
        'argv': redact_argv(args),
    }
    entry = {
        'name': name,
        'unit': unit_name(name),
        'repo_id': model,
        'revision': option(args, '--revision') or 'unknown',
        'commit': snapshot.group(1) if snapshot else 'unknown',
        'path': path,
        'served_model_name': server.get('served_model_name') or model,
        'bind': host,
        'port': port_number,
        'plan': plan,
        'takeover': {
            'pid': server['pid'],
            'start_time': server['start_time'],
            'user': server.get('user'),
            'command': command_line(redact_argv(server.get('argv') or [])),
            'cwd': server.get('cwd'),
            'exe': server.get('exe'),
            'started_from': started_from(server),
        },
    }
    if server.get('venv'):
        entry['venv'] = server['venv']
    return entry


def _int(value: Optional[str]) -> Optional[int]:
    return int(value) if value is not None and value.isdigit() else None


def _exe_path(exe: Optional[str]) -> Optional[str]:
    # /proc/PID/exe of a program replaced on disk since it started (a venv upgraded in place).
    return exe[:-len(' (deleted)')] if exe and exe.endswith(' (deleted)') else exe


def verified_server(pid: int, start_time: str, command: Optional[str] = None, exe: Optional[str] = None,
                    proc: str = PROC) -> Optional[Proc]:
    """The process ``pid``, read again from /proc, when it still is the vLLM a takeover found; None when
    it has gone (no such pid, or another start time: another process got the pid).

    ProcessError, naming what differs, when the pid with that start time is not a vLLM API server by the
    rule scan() finds them with (server_args), or its command line (redacted, as the takeover recorded
    it: ``command``) or its executable (``exe``) is another. Nothing may be signalled then."""
    try:
        process = Proc(pid, proc)
    except (ProcessError, ValueError, IndexError):
        return None
    if str(process.start_time) != str(start_time) or not process.alive():
        return None
    running = command_line(redact_argv(process.argv))
    what = 'pid %d (start time %s, %s)' % (pid, start_time, process.comm or '?')
    advice = ('Nothing was stopped. Check the pid and start time (the takeover block of the host state entry); '
              'stop that process yourself if it must go')
    if server_args(process.argv) is None:
        raise ProcessError('%s is not a vLLM API server (`vllm serve ...` or vLLM\'s api_server module): it runs %r. %s'
                           % (what, running[:200], advice))
    if command is not None and running != command:
        raise ProcessError('%s runs %r, not %r as when it was taken over. %s' % (what, running[:200], command[:200], advice))
    if exe is not None and _exe_path(process.exe) != _exe_path(exe):
        raise ProcessError('%s runs the executable %r, not %r as when it was taken over. %s' % (what, process.exe, exe, advice))
    return process


def stop(pid: int, start_time: str, timeout: float, proc: str = PROC, kill: Callable[[int, int], None] = os.kill,
         clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
         command: Optional[str] = None, exe: Optional[str] = None) -> Dict[str, Any]:
    """End a server started outside systemd: SIGTERM (vLLM shuts its engine down), then SIGKILL to
    whatever of its tree is left after ``timeout`` seconds. Returns {stopped, signal, seconds}.

    A pid whose start time differs is another process now: it is left alone (stopped False). Right
    before the SIGTERM the process is verified again as the vLLM the takeover found (verified_server:
    a vLLM API server, and ``command`` / ``exe`` when given); ProcessError otherwise, nothing signalled."""
    if verified_server(pid, start_time, command, exe, proc) is None:
        return {'stopped': False, 'signal': None, 'seconds': 0.0}
    tree = [pid] + descendants(pid, parents(proc))
    members: List[Proc] = []
    for member_pid in tree:
        try:
            members.append(Proc(member_pid, proc))
        except (ProcessError, ValueError, IndexError):
            continue
    process = verified_server(pid, start_time, command, exe, proc)
    if process is None:
        return {'stopped': False, 'signal': None, 'seconds': 0.0}
    members = [process] + [member for member in members if member.pid != pid]
    begin = clock()
    _signal(kill, pid, signal.SIGTERM)
    used = 'TERM'
    while any(member.alive() for member in members):
        if clock() - begin >= timeout:
            for member in members:
                if member.alive():
                    _signal(kill, member.pid, signal.SIGKILL)
            used = 'KILL'
            deadline = clock() + 10
            while any(member.alive() for member in members) and clock() < deadline:
                sleep(0.2)
            break
        sleep(0.5)
    return {'stopped': True, 'signal': used, 'seconds': round(clock() - begin, 1)}


def _signal(kill: Callable[[int, int], None], pid: int, number: int) -> None:
    try:
        kill(pid, number)
    except ProcessLookupError:
        pass
