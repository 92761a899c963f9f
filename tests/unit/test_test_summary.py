"""tools/test_summary.py: the one `N passed, N failed` line and the table of where CI's time went."""
import importlib.util
import os

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
spec = importlib.util.spec_from_file_location("test_summary_tool", os.path.join(ROOT, "tools", "test_summary.py"))
summary = importlib.util.module_from_spec(spec)
spec.loader.exec_module(summary)

PYTEST = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" failures="1" skipped="1" tests="4">
<testcase classname="tests.unit.test_planner" name="a" time="1.5"/>
<testcase classname="tests.unit.test_planner.TestX" name="b" time="2.0"><failure/></testcase>
<testcase classname="tests.unit.test_cli" name="s" time="0.5"><skipped/></testcase>
<testcase classname="tests.integration.test_hf_model" name="c" time="30"/></testsuite></testsuites>"""
SCENARIOS = """<?xml version="1.0" encoding="utf-8"?>
<testsuite name="molecule-scenarios" tests="1" failures="0" errors="0" skipped="0">
<testcase classname="molecule-scenarios" name="default" time="600"/></testsuite>"""


def test_time_is_summed_per_test_file_and_per_scenario(tmp_path, capsys):
    (tmp_path / "pytest.xml").write_text(PYTEST)
    (tmp_path / "molecule-scenarios.xml").write_text(SCENARIOS)
    seconds = summary.stage_seconds(sorted(str(p) for p in tmp_path.glob("*.xml")))
    assert seconds == {"pytest tests/unit/test_planner.py": 3.5, "pytest tests/unit/test_cli.py": 0.5,
                       "pytest tests/integration/test_hf_model.py": 30.0, "molecule-scenarios: default": 600.0}
    table = summary.timing_table(seconds, top=2)
    assert table[1].startswith("molecule-scenarios: default") and "(the other 2 stages)" in table[3]
    assert table[-1].split() == ["total", "634.0"]


def test_the_closing_line_counts_every_runner(tmp_path, monkeypatch, capsys):
    (tmp_path / "pytest.xml").write_text(PYTEST)
    (tmp_path / "molecule-scenarios.xml").write_text(SCENARIOS)
    monkeypatch.setattr("sys.argv", ["test_summary.py", str(tmp_path)])
    assert summary.main() == 1
    out = capsys.readouterr().out.splitlines()
    assert "3 passed, 1 failed" in out and "(1 skipped)" in out
