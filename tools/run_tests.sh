#!/usr/bin/env bash
# The TEST command's body (make test): every runner, one summary line, the sandbox always torn down.
#   1. static checks: ansible-lint, mypy, ruff and ansible-test sanity
#   2. each molecule scenario on the sandbox's real systemd hosts (kept up between scenarios)
#   3. pytest: unit tests, module tests through ansible-playbook, sandbox integration tests (on the
#      hosts the scenarios leave up)
# Every runner writes JUnit XML under out/junit; tools/test_summary.py prints `N passed, N failed`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export PATH=$PWD/.venv/bin:$PATH ANSIBLE_CONFIG=$PWD/ansible.cfg ANSIBLE_NOCOLOR=1
JUNIT=out/junit
rm -rf "$JUNIT" && mkdir -p "$JUNIT"
status=0
trap 'sandbox/down >/dev/null 2>&1 || true' EXIT

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

# In this order, each starting from what the one before leaves (a host that already serves what a
# prepare wants stops at the rollout's fast path): default leaves B on both hosts; rollback puts A on
# the older vLLM on llmops-1 and fails twice back to it; upgrade lifts A to the newer vLLM; preflight
# refuses six bad rollouts while A serves. Every scenario also runs on its own (its prepare gets there).
SCENARIOS="default rollback upgrade preflight"
for scenario in $SCENARIOS; do
  run_case molecule-scenarios "$scenario" env LLMOPS_SANDBOX_KEEP=1 molecule test -s "$scenario"
done
for config in molecule/*/molecule.yml; do
  scenario=$(basename "$(dirname "$config")")
  [[ " $SCENARIOS resources " == *" $scenario "* ]] || { echo "molecule/$scenario is not in SCENARIOS" >&2; status=1; }
done
write_suite molecule-scenarios
[ "${counts[molecule-scenarios]:-0}" -gt 0 ] || { echo "no molecule scenarios found" >&2; status=1; }

# Last, with the sandbox the scenarios leave up: the live tests reuse its hosts and served models
# (tests/integration/test_benchmark_live.py sweeps llmops-1, test_vllm_install_live.py checks llmops-2).
echo "== pytest"
pytest --junitxml="$JUNIT/pytest.xml" "$@" || status=$?

python3 tools/test_summary.py "$JUNIT" || { [ "$status" -ne 0 ] || status=1; }
exit "$status"
