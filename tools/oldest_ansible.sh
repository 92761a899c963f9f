#!/usr/bin/env bash
# The unit tests and the localhost Ansible tests under the OLDEST ansible-core that meta/runtime.yml's
# requires_ansible admits (make test runs the newest on Python 3.11 - .venv's, pyproject's upper bound),
# in a venv of their own: .venv-oldest-ansible (uv; reused while the pin is the same).
#   tools/oldest_ansible.sh [pytest args]
# tests/unit holds localhost Ansible runs of its own (roles' task files, modules, the fast path); with them
# the vllm_state module's runs (the lock). Left out here, and run under the newest only, for CI's
# minutes: the other integration files (test_hf_model.py alone is ~4.5 min) and the sandbox's live files.
set -euo pipefail
cd "$(dirname "$0")/.."
oldest=$(sed -n 's/^requires_ansible: *">=\([0-9.]*\)".*/\1/p' meta/runtime.yml)
series=${oldest%.*}   # 2.16.0 -> 2.16: its newest patch release
venv=.venv-oldest-ansible
want="ansible-core==$series.*"
if [ ! -x "$venv/bin/pytest" ] || [ "$(cat "$venv/.pin" 2>/dev/null)" != "$want" ]; then
  rm -rf "$venv"
  .venv/bin/uv venv -q --python "$(command -v python3)" "$venv"
  .venv/bin/uv pip install -q --python "$venv/bin/python" "$want" 'pytest>=8' 'hypothesis>=6.100' 'pydantic>=2.6,<3' \
    'pyyaml>=6' 'jinja2>=3.1' 'ansible-runner>=2.4' 'huggingface_hub>=0.30' 'nvidia-ml-py>=12' 'matplotlib>=3.8'
  # the checkout itself, as make setup links it (.collections), without its pinned dependencies
  .venv/bin/uv pip install -q --python "$venv/bin/python" --no-deps -e .
  echo "$want" > "$venv/.pin"
fi
echo "== $("$venv/bin/ansible" --version | head -n 1) (the oldest requires_ansible admits, >=$oldest)"
# Not again: the unit tests of plain logic (planner, topology, contracts, parsers...), which neither import
# ansible-core nor run its commands - measured (a pytest plugin listing sys.modules at the session's end, per
# file): ansible-core is not loaded once. Under another ansible-core they run the same code.
pure=(gpu_free gpu_replay haproxy_drain_verdict memory_soak model_config planner planner_swap planner_multi
      planner_objective role_vars sandbox_wheels systemd_filter test_summary topology vllm_install vllm_logs
      vllm_release contracts perf_published)
ignore=()
for name in "${pure[@]}"; do ignore+=("--ignore=tests/unit/test_$name.py"); done
PATH=$PWD/$venv/bin:/usr/bin:/bin exec "$venv/bin/pytest" -p no:cacheprovider tests/unit "${ignore[@]}" \
  tests/integration/test_vllm_state_module.py "$@"
