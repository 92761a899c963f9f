#!/usr/bin/env bash
# A consumer repository of this collection, set up as a user sets one up, for the sandbox:
#   tools/consumer.sh OUT
# OUT/llmops-vllm-*.tar.gz  `ansible-galaxy collection build` of this checkout
# OUT/dist/*.whl            the CLI's wheel (it holds the collection too)
# OUT/venv                  a fresh venv with that wheel installed (not editable), pip included
# OUT/repo                  examples/consumer, its collections/ installed from requirements.yml (the
#                           tarball), its inventory the sandbox's llmops-1 (the sandbox's variables,
#                           the checkout's reports, so that a gate finds the runs recorded before)
# A second call with the same checkout reuses what is there (the collection's file checksums decide).
# Used by molecule/upgrade (its converge is the consumer's `llmops-vllm apply`) and
# tests/integration/test_gitops_live.py (the pipelines in examples/gitops).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: tools/consumer.sh OUT}
mkdir -p "$out" && out=$(cd "$out" && pwd)
bin=$root/.venv/bin
build=$out/build && rm -rf "$build" && mkdir -p "$build"
# A clean ansible environment: not this checkout's ansible.cfg or collections path.
(cd "$build" && ANSIBLE_CONFIG=$build/none.cfg "$bin/ansible-galaxy" collection build "$root" --output-path "$build" >/dev/null)
tarball=$(ls "$build"/llmops-vllm-*.tar.gz)
# The tarball's bytes change with every build (times); FILES.json's checksum is its content's.
digest=$(tar -xOzf "$tarball" MANIFEST.json | python3 -c 'import json, sys; print(json.load(sys.stdin)["file_manifest_file"]["chksum_sha256"])')
if [ -f "$out/.digest" ] && [ "$(cat "$out/.digest")" = "$digest" ] && [ -x "$out/venv/bin/llmops-vllm" ] && [ -d "$out/repo/collections" ]; then
  echo "consumer: $out is up to date (collection $digest)"; rm -rf "$build"; exit 0
fi
rm -rf "$out/dist" "$out/venv" "$out/repo" "$out"/llmops-vllm-*.tar.gz
mv "$tarball" "$out/" && rm -rf "$build"
tarball=$out/$(basename "$tarball")
(cd "$root" && "$bin/uv" build --wheel --quiet --out-dir "$out/dist" >/dev/null)
"$bin/uv" venv --quiet --seed --python "$(command -v python3)" "$out/venv"
"$bin/uv" pip install --quiet --python "$out/venv/bin/python" "$out"/dist/*.whl
cp -r "$root/examples/consumer" "$out/repo"
cp "$tarball" "$out/repo/"
(cd "$out/repo" && ANSIBLE_CONFIG=$out/repo/ansible.cfg "$out/venv/bin/ansible-galaxy" collection install \
  -r requirements.yml -p ./collections >/dev/null)
# The sandbox's inventory, for llmops-1 only (llmops-2 belongs to the other CI lane).
inventory=$out/repo/inventory && rm -rf "$inventory" && mkdir -p "$inventory"
cp -r "$root/inventories/sandbox/group_vars" "$inventory/"
cat > "$inventory/hosts.yml" <<YAML
---
# The sandbox's llmops-1 (tools/consumer.sh): the variables of inventories/sandbox.
all:
  children:
    vllm_servers:
      children:
        sandbox_cpu:
          hosts:
            llmops-1:
YAML
cat >> "$inventory/group_vars/all.yml" <<YAML
# tools/consumer.sh: the sandbox of $root; reports and benchmark runs shared with that checkout.
llmops_sandbox_dir: ${LLMOPS_SANDBOX_DIR:-$root/.sandbox}
rollout_report_dir: $root/reports
benchmark_results_dir: $root/reports/benchmarks
YAML
echo "$digest" > "$out/.digest"
echo "consumer: $out (collection $digest, $(basename "$out"/dist/*.whl))"
