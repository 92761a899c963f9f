#!/usr/bin/env bash
# The TEST command's body (make test): every runner, one summary line, the sandbox always torn down.
#   1. pytest: unit tests, module tests through ansible-playbook, sandbox integration tests
#   2. each molecule scenario on the sandbox's real systemd hosts (kept up between scenarios)
# Every runner writes JUnit XML under out/junit; tools/test_summary.py prints `N passed, N failed`.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH=$PWD/.venv/bin:$PATH ANSIBLE_CONFIG=$PWD/ansible.cfg ANSIBLE_NOCOLOR=1
JUNIT=out/junit
rm -rf "$JUNIT" && mkdir -p "$JUNIT"
status=0
trap 'sandbox/down >/dev/null 2>&1 || true' EXIT

echo "== pytest"
pytest --junitxml="$JUNIT/pytest.xml" "$@" || status=$?

scenarios=$(ls molecule/*/molecule.yml 2>/dev/null | cut -d/ -f2 | sort)
{
  echo '<?xml version="1.0" encoding="utf-8"?>'
  cases="" failures=0 count=0
  for scenario in $scenarios; do
    echo "== molecule scenario $scenario" >&2
    begin=$(date +%s)
    if LLMOPS_SANDBOX_KEEP=1 molecule test -s "$scenario" >&2; then
      cases+="<testcase classname=\"molecule\" name=\"$scenario\" time=\"$(( $(date +%s) - begin ))\"/>"
    else
      failures=$((failures + 1)) status=1
      cases+="<testcase classname=\"molecule\" name=\"$scenario\" time=\"$(( $(date +%s) - begin ))\"><failure message=\"molecule test -s $scenario failed\"/></testcase>"
    fi
    count=$((count + 1))
  done
  echo "<testsuite name=\"molecule\" tests=\"$count\" failures=\"$failures\" errors=\"0\" skipped=\"0\">$cases</testsuite>"
} > "$JUNIT/molecule-scenarios.xml"
[ -s "$JUNIT/molecule-scenarios.xml" ] || status=1

python3 tools/test_summary.py "$JUNIT" || { [ "$status" -ne 0 ] || status=1; }
exit "$status"
