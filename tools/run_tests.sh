#!/usr/bin/env bash
# The TEST command's body (make test): every runner, one summary line, the sandbox always torn down.
#   1. pytest: unit tests, module tests through ansible-playbook, sandbox integration tests
#   2. static checks: ansible-lint, mypy, ruff and ansible-test sanity
#   3. each molecule scenario on the sandbox's real systemd hosts (kept up between scenarios)
# Every runner writes JUnit XML under out/junit; tools/test_summary.py prints `N passed, N failed`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export PATH=$PWD/.venv/bin:$PATH ANSIBLE_CONFIG=$PWD/ansible.cfg ANSIBLE_NOCOLOR=1
JUNIT=out/junit
rm -rf "$JUNIT" && mkdir -p "$JUNIT"
status=0
trap 'sandbox/down >/dev/null 2>&1 || true' EXIT

echo "== pytest"
pytest --junitxml="$JUNIT/pytest.xml" "$@" || status=$?

# run_case SUITE NAME COMMAND...: run one command as one JUnit test case of SUITE (out/junit/SUITE.xml).
declare -A cases=() counts=() failures=()
run_case() {
  local suite=$1 name=$2 begin; shift 2
  echo "== $suite: $name" >&2
  begin=$(date +%s)
  if "$@" >&2; then
    cases[$suite]+="<testcase classname=\"$suite\" name=\"$name\" time=\"$(( $(date +%s) - begin ))\"/>"
  else
    failures[$suite]=$(( ${failures[$suite]:-0} + 1 )) status=1
    cases[$suite]+="<testcase classname=\"$suite\" name=\"$name\" time=\"$(( $(date +%s) - begin ))\"><failure message=\"$* failed\"/></testcase>"
  fi
  counts[$suite]=$(( ${counts[$suite]:-0} + 1 ))
}
write_suite() {
  { echo '<?xml version="1.0" encoding="utf-8"?>'
    echo "<testsuite name=\"$1\" tests=\"${counts[$1]:-0}\" failures=\"${failures[$1]:-0}\" errors=\"0\" skipped=\"0\">${cases[$1]:-}</testsuite>"
  } > "$JUNIT/$1.xml"
}

# Static checks: ansible-lint (production profile), mypy and ruff (settings in pyproject.toml) and
# ansible-test sanity (pylint, validate-modules, ...).
run_case static ansible-lint ansible-lint --offline
run_case static mypy mypy
run_case static ruff ruff check
run_case static ansible-test-sanity make --no-print-directory sanity
write_suite static

for config in molecule/*/molecule.yml; do
  [ -e "$config" ] || continue
  scenario=$(basename "$(dirname "$config")")
  run_case molecule-scenarios "$scenario" env LLMOPS_SANDBOX_KEEP=1 molecule test -s "$scenario"
done
write_suite molecule-scenarios
[ "${counts[molecule-scenarios]:-0}" -gt 0 ] || { echo "no molecule scenarios found" >&2; status=1; }

python3 tools/test_summary.py "$JUNIT" || { [ "$status" -ne 0 ] || status=1; }
exit "$status"
