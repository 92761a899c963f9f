#!/usr/bin/env bash
# The TEST command's body (make test): every runner, one summary line, the sandbox always torn down.
# Three lanes run side by side: the slow work (vLLM starting, loading, serving on one host) leaves
# the second core idle much of the time, and the lanes share nothing but the sandbox's bridge and hub.
#   lane "static_and_pytest" (from the start): ansible-lint, mypy, ruff and ansible-test sanity, then
#       pytest without the live files - unit tests, module tests through ansible-playbook on
#       localhost, integration tests with hosts and hubs of their own; then the unit and localhost
#       Ansible tests again under the oldest ansible-core requires_ansible admits (tools/oldest_ansible.sh);
#   lane "llmops1" (the main one): the molecule scenario default on both sandbox hosts (the fleet: both behind a
#       real HAProxy on the controller, A -> B with a canary and a soak, a failing canary rolled back, every
#       request of a steady load through HAProxy checked), then, on
#       llmops-1, rollback and upgrade - each starting from what the one before leaves - and the
#       live pytest files of the GitOps pipelines (test_gitops_live.py, on what upgrade leaves) and of
#       several models on one host (test_multimodel_live.py: up to three servers on llmops-1, once the
#       llmops2 lane has mostly ended);
#   lane "llmops2" (once default has left llmops-2 serving): on llmops-2, in this order (each starting from
#       what the one before leaves, LLMOPS2_ORDER): test_benchmark_live.py, test_vllm_install_live.py, the
#       molecule scenario preflight, test_bluegreen_live.py, the molecule scenario takeover.
# Once both sandbox lanes ended, the live file that needs both hosts at once: a multi-node serving
# group over llmops-1 and llmops-2 (test_group_live.py). The fleet of three hosts behind HAProxy
# (test_fleet_live.py, with a failing soak too) is `make test-fleet`, a bench outside this run.
# After each sandbox stage, tools/vllm_starts.py counts the vLLM starts it made (the hosts' journals) into
# out/logs/starts.tsv; the table is printed at the end, with where the last starts went (tools/vllm_start_phases.py).
# Every runner writes JUnit XML under out/junit; tools/test_summary.py prints the time table and
# `N passed, N failed`. A lane's output is printed when it ends; out/logs keeps it.
# shellcheck disable=SC2317  # the lane functions run in other shells, through start_lane
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export PATH=$PWD/.venv/bin:$PATH ANSIBLE_CONFIG=$PWD/ansible.cfg ANSIBLE_NOCOLOR=1
export JUNIT=out/junit LOGS=out/logs
rm -rf "$JUNIT" "$LOGS" && mkdir -p "$JUNIT" "$LOGS"
LIVE="tests/integration/test_benchmark_live.py tests/integration/test_vllm_install_live.py tests/integration/test_bluegreen_live.py"
LIVE1="tests/integration/test_gitops_live.py tests/integration/test_multimodel_live.py"
LIVE_BOTH="tests/integration/test_group_live.py"
# Not always-on: the fleet of three hosts behind HAProxy takes 30 minutes and more here (make test-fleet).
LIVE_FLEET="tests/integration/test_fleet_live.py"
# Every scenario also runs on its own (its prepare gets there); here each lane runs its own in order.
LLMOPS1_SCENARIOS="rollback upgrade" LLMOPS2_SCENARIOS="preflight takeover"
# The llmops2 lane's order: live files (*.py) and scenarios. The benchmark file leaves model A serving, which the
# preflight scenario keeps; the takeover scenario reuses A's weights and venv.
LLMOPS2_ORDER="tests/integration/test_benchmark_live.py tests/integration/test_vllm_install_live.py preflight tests/integration/test_bluegreen_live.py takeover"

# run_case SUITE NAME COMMAND...: one command as one JUnit test case of SUITE, appended to
# out/junit/.SUITE.cases (write_suite turns them into out/junit/SUITE.xml). Returns its status.
run_case() {
  local suite=$1 name=$2 begin rc; shift 2
  echo "== $suite: $name" >&2
  begin=$(date +%s)
  "$@" >&2; rc=$?
  if [ "$rc" -eq 0 ]; then
    echo "<testcase classname=\"$suite\" name=\"$name\" time=\"$(( $(date +%s) - begin ))\"/>" >> "$JUNIT/.$suite.cases"
  else
    echo "<testcase classname=\"$suite\" name=\"$name\" time=\"$(( $(date +%s) - begin ))\"><failure message=\"$* failed\"/></testcase>" >> "$JUNIT/.$suite.cases"
  fi
  return "$rc"
}
write_suite() {
  local cases tests failures
  cases=$(cat "$JUNIT/.$1.cases" 2>/dev/null)
  tests=$(grep -c '<testcase' <<< "$cases")
  failures=$(grep -c '<failure' <<< "$cases")
  { echo '<?xml version="1.0" encoding="utf-8"?>'
    echo "<testsuite name=\"$1\" tests=\"$tests\" failures=\"$failures\" errors=\"0\" skipped=\"0\">$cases</testsuite>"
  } > "$JUNIT/$1.xml"
}
# counted STAGE HOSTS BEGIN SNAPSHOT: the vLLM starts of a sandbox stage on the hosts it used and the CPU
# seconds it took there and on the controller (tools/vllm_starts.py; SNAPSHOT: the hosts' CPU at its begin,
# $LOGS/.STAGE.times: bash's `times` of the subshell that ran it).
counted() {
  python3 tools/vllm_starts.py count "$1" "$3" "$2" "$4" "$LOGS/.$1.times" || true
}
# scenario LANE NAME HOSTS: a molecule scenario on the sandbox hosts HOSTS (comma-separated).
scenario() {
  local begin rc snap; begin=$(date +%s); snap=$(python3 tools/vllm_starts.py cpu "$3")
  (run_case "molecule-$1" "$2" env LLMOPS_SANDBOX_KEEP=1 molecule test -s "$2"; rc=$?; times > "$LOGS/.$2.times"; exit "$rc")
  rc=$?
  counted "$2" "$3" "$begin" "$snap"
  return "$rc"
}
# live HOSTS FILE PYTEST-ARGS...: one live pytest file (its own JUnit file) on the sandbox hosts HOSTS.
live() {
  local hosts=$1 file=$2 begin rc snap stage; shift 2; begin=$(date +%s); stage=$(basename "$file")
  snap=$(python3 tools/vllm_starts.py cpu "$hosts")
  echo "== pytest $file" >&2
  (pytest --junitxml="$JUNIT/pytest-live-$(basename "$file" .py).xml" "$file" "$@" >&2; rc=$?; times > "$LOGS/.$stage.times"; exit "$rc")
  rc=$?
  counted "$stage" "$hosts" "$begin" "$snap"
  return "$rc"
}

lane_static_and_pytest() {
  local rc=0 ignore=() file
  run_case static ansible-lint ansible-lint --offline || rc=1
  run_case static mypy mypy || rc=1
  run_case static ruff ruff check || rc=1
  run_case static ansible-test-sanity make --no-print-directory sanity || rc=1
  write_suite static
  for file in $LIVE $LIVE1 $LIVE_BOTH $LIVE_FLEET; do ignore+=("--ignore=$file"); done
  echo "== pytest (all but the live files)"
  pytest --junitxml="$JUNIT/pytest.xml" "${ignore[@]}" "$@" || rc=1
  echo "== pytest (the unit and localhost Ansible tests under the oldest ansible-core admitted)"
  # nice 19 in all: it has minutes of slack, and its CPU would slow the sandbox lanes' vLLM starts
  nice -n 9 tools/oldest_ansible.sh --junitxml="$JUNIT/pytest-oldest-ansible.xml" -q "$@" || rc=1
  times > "$LOGS/.static_and_pytest.times"  # in this shell: its children's CPU (a pipe would run it in a subshell)
  echo "== the lane's CPU time (user, system): $(tail -n 1 "$LOGS/.static_and_pytest.times")"
  return "$rc"
}
lane_llmops2() {
  local rc=0 item
  for item in $LLMOPS2_ORDER; do
    if [[ "$item" == *.py ]]; then live llmops-2 "$item" "$@" || rc=1; else scenario llmops2 "$item" llmops-2 || rc=1; fi
  done
  write_suite molecule-llmops2
  return "$rc"
}

pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill -- "-$pid" 2>/dev/null || true; done
  sandbox/down >/dev/null 2>&1 || true
}
trap cleanup EXIT
# start_lane NAME FUNCTION ARGS...: the function in the background, in its own process group, at the
# CPU priority LANE_NICE (0 unless set for the call).
start_lane() {
  local name=$1; shift
  echo "== lane $name started" >&2
  nice -n "${LANE_NICE:-0}" setsid bash -c "$(declare -f run_case write_suite counted scenario live "$1")"'; "$@"' _ "$@" \
    > "$LOGS/$name.log" 2>&1 &
  pids+=("$!")
}
status=0
end_lanes() {
  local i rc
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}"; rc=$?
    echo "== lane ${lane_names[$i]} ended with status $rc; its output:" >&2
    cat "$LOGS/${lane_names[$i]}.log" >&2
    [ "$rc" -eq 0 ] || status=1
  done
  pids=()
}
export LIVE LIVE1 LIVE_BOTH LIVE_FLEET LLMOPS2_ORDER

# The controller's tools the tests use beside Python (HAProxy, promtool; sandbox/up installs the same ones).
python3 sandbox/hosts.py tools >&2 || status=1

for config in molecule/*/molecule.yml; do
  name=$(basename "$(dirname "$config")")
  [[ " default $LLMOPS1_SCENARIOS $LLMOPS2_SCENARIOS " == *" $name "* ]] || { echo "molecule/$name is in no lane" >&2; status=1; }
done
for item in $LIVE $LLMOPS2_SCENARIOS; do
  [[ " $LLMOPS2_ORDER " == *" $item "* ]] || { echo "$item is not in LLMOPS2_ORDER" >&2; status=1; }
done

# molecule keeps each scenario's state (created, prepared, ...) in ~/.ansible/tmp/molecule.<checksum of the
# checkout's directory name>.<scenario>: a killed earlier run of a checkout of the same name would make this
# run skip a prepare on hosts made from nothing. Every scenario starts from nothing here.
python3 - "$(basename "$PWD")" molecule/*/molecule.yml <<'PY'
import shutil, sys
from pathlib import Path
from molecule.text import checksum
for config in sys.argv[2:]:
    shutil.rmtree(Path.home() / ".ansible" / "tmp" / ("molecule.%s.%s" % (checksum(sys.argv[1], 4), Path(config).parent.name)),
                  ignore_errors=True)
PY

lane_names=(static_and_pytest llmops2)
# The static and pytest lane is not on the critical path (the sandbox lanes are: default, then
# rollback/upgrade and the live files/preflight/takeover); at a lower CPU priority it takes the cores
# when the sandbox lanes wait, instead of slowing their vLLM starts.
LANE_NICE=10 start_lane static_and_pytest lane_static_and_pytest "$@"
scenario llmops1 default llmops-1,llmops-2 || status=1
start_lane llmops2 lane_llmops2 "$@"
for name in $LLMOPS1_SCENARIOS; do scenario llmops1 "$name" llmops-1 || status=1; done
write_suite molecule-llmops1
for file in $LIVE1; do live llmops-1 "$file" "$@" || status=1; done
end_lanes
for file in $LIVE_BOTH; do live llmops-1,llmops-2 "$file" "$@" || status=1; done

python3 tools/vllm_starts.py table
# Where the last start of each model went on each host (tools/vllm_start_phases.py), kept in out/logs.
for host in llmops-1 llmops-2; do python3 tools/vllm_start_phases.py "$host"; done > "$LOGS/start-phases.txt" 2>&1
head -n 40 "$LOGS/start-phases.txt"
python3 tools/test_summary.py "$JUNIT" || { [ "$status" -ne 0 ] || status=1; }
exit "$status"
