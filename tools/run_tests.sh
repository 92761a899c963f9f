#!/usr/bin/env bash
# The TEST command's body (make test): every runner, one summary line, the sandbox always torn down.
# Three lanes run side by side, because the slow work - vLLM starting, loading, serving - leaves the
# second core idle most of the time, and the lanes share nothing but the sandbox's bridge and hub:
#   lane 1 (from the start): the static checks (ansible-lint, mypy, ruff, ansible-test sanity), then
#          pytest without the two live files: unit tests, module tests through ansible-playbook on
#          localhost, and the integration tests with hosts and hubs of their own;
#   lane 2 (the main one): the molecule scenarios on the sandbox's two hosts, in a fixed order in which
#          each starts from what the one before leaves - default on both hosts, then rollback, upgrade
#          and preflight on llmops-1;
#   lane 3 (once default has left llmops-2 serving): the live pytest files on llmops-2
#          (test_benchmark_live.py, test_vllm_install_live.py), beside lane 2 on llmops-1.
# Every runner writes JUnit XML under out/junit; tools/test_summary.py prints the time table and
# `N passed, N failed`. Each lane's output is printed when it ends; out/logs keeps it.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export PATH=$PWD/.venv/bin:$PATH ANSIBLE_CONFIG=$PWD/ansible.cfg ANSIBLE_NOCOLOR=1
JUNIT=out/junit LOGS=out/logs
rm -rf "$JUNIT" "$LOGS" && mkdir -p "$JUNIT" "$LOGS"
status=0
lanes=()
cleanup() {
  for pid in "${lanes[@]}"; do kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true; done
  sandbox/down >/dev/null 2>&1 || true
}
trap cleanup EXIT

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

LIVE=(tests/integration/test_benchmark_live.py tests/integration/test_vllm_install_live.py)

# start_lane NAME COMMAND...: run in the background, in its own process group, output to out/logs/NAME.log.
start_lane() {
  local name=$1; shift
  echo "== lane $name started" >&2
  setsid "$@" > "$LOGS/$name.log" 2>&1 &
  lanes+=("$!")
  eval "lane_$name=$!"
}
# end_lane NAME: wait for it, print its output, fold its exit status into ours.
end_lane() {
  local name=$1 pid rc
  eval "pid=\$lane_$name"
  wait "$pid"; rc=$?
  echo "== lane $name ended with status $rc; its output:" >&2
  cat "$LOGS/$name.log" >&2
  [ "$rc" -eq 0 ] || status=1
}

lane_static_and_pytest() {
  # Static checks: ansible-lint (production profile), mypy and ruff (settings in pyproject.toml) and
  # ansible-test sanity (pylint, validate-modules, ...).
  run_case static ansible-lint ansible-lint --offline
  run_case static mypy mypy
  run_case static ruff ruff check
  run_case static ansible-test-sanity make --no-print-directory sanity
  write_suite static
  echo "== pytest (all but the live files)"
  pytest --junitxml="$JUNIT/pytest.xml" $(printf -- '--ignore=%s ' "${LIVE[@]}") "$@" || status=1
  return "$status"
}

# SCENARIOS in this order; every scenario also runs on its own (its prepare gets there).
SCENARIOS="default rollback upgrade preflight"
for config in molecule/*/molecule.yml; do
  scenario=$(basename "$(dirname "$config")")
  [[ " $SCENARIOS " == *" $scenario "* ]] || { echo "molecule/$scenario is not in SCENARIOS" >&2; status=1; }
done

export -f run_case write_suite lane_static_and_pytest
export JUNIT
declare -p LIVE > "$LOGS/.live"
start_lane static_and_pytest bash -c 'source out/logs/.live; declare -A cases=() counts=() failures=(); status=0; lane_static_and_pytest "$@"' _ "$@"

run_case molecule-scenarios default env LLMOPS_SANDBOX_KEEP=1 molecule test -s default
start_lane live_pytest pytest --junitxml="$JUNIT/pytest-live.xml" "${LIVE[@]}" "$@"
for scenario in ${SCENARIOS#default }; do
  run_case molecule-scenarios "$scenario" env LLMOPS_SANDBOX_KEEP=1 molecule test -s "$scenario"
done
write_suite molecule-scenarios

end_lane live_pytest
end_lane static_and_pytest
lanes=()

python3 tools/test_summary.py "$JUNIT" || { [ "$status" -ne 0 ] || status=1; }
exit "$status"
