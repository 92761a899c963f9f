"""Shared by the integration tests that boot sandbox hosts of their own."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def nspawn_unavailable() -> str | None:
    """Why systemd-nspawn hosts cannot run here, or None when they can."""
    if not sys.platform.startswith("linux"):
        return "systemd-nspawn hosts need Linux"
    if os.geteuid() != 0:
        return "needs root (systemd-nspawn, network namespaces, overlayfs): run pytest as root"
    if "overlay" not in Path("/proc/filesystems").read_text():
        return "the kernel has no overlayfs"
    if shutil.which("systemd-nspawn") is None and shutil.which("apt-get") is None:
        return "systemd-nspawn is not installed and there is no apt-get to install it"
    probe = subprocess.run(["unshare", "--mount", "--uts", "--ipc", "--net", "--pid", "--fork", "true"],
                           capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"cannot create namespaces here, so systemd-nspawn cannot run: {probe.stderr.strip()}"
    return None


@pytest.fixture(scope="session")
def nspawn_ok():
    """Skip the requesting test (and its fixture) when sandbox hosts cannot boot here, saying why."""
    reason = nspawn_unavailable()
    if reason:
        pytest.skip(reason)
