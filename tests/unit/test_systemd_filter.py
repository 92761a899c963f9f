"""Quoting for systemd unit files: what systemd itself parses back must be the argv we meant."""
import shutil
import subprocess

import pytest

from ansible_collections.llmops.vllm.plugins.filter.systemd import systemd_environment, systemd_exec, systemd_quote

ARGV = ["/opt/v/bin/vllm", "serve", "/m/o/c", "--speculative-config", '{"method":"mtp","num_speculative_tokens":1}',
        "--chat-template", "a b", "--x", "100%", "--y", "$HOME", "--z", 'quote"back\\slash']


def test_plain_words_stay_plain():
    assert systemd_quote("--tensor-parallel-size") == "--tensor-parallel-size"
    assert systemd_exec(["/bin/true", "0,1,2,3"]) == "/bin/true 0,1,2,3"


def test_specials_are_escaped():
    line = systemd_exec(ARGV)
    assert '"100%%"' in line and '"$$HOME"' in line and '\\"method\\"' in line


def test_relative_executable_is_refused():
    with pytest.raises(ValueError, match="absolute path"):
        systemd_exec(["vllm", "serve"])


def test_environment_assignments():
    assert systemd_environment({"B": "2", "A": "x y"}) == ['"A=x y"', '"B=2"']


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze not installed on this machine")
def test_systemd_parses_it_back(tmp_path):
    """systemd-analyze verify would reject a malformed line; `systemd-analyze unit-files` is not needed:
    render a unit whose ExecStart prints its argv and let systemd's own parser split it."""
    unit = tmp_path / "probe.service"
    unit.write_text("[Service]\nExecStart=%s\n" % systemd_exec(["/bin/echo"] + ARGV[1:]))
    proc = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True, check=False)
    assert "Failed to" not in proc.stderr and "Invalid" not in proc.stderr, proc.stderr
