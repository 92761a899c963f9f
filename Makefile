# Two commands matter (README): `make main` and `make test`. Everything else is a step of those.
SHELL := /bin/bash
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
UV := $(BIN)/uv
export PATH := $(abspath $(BIN)):$(PATH)
export ANSIBLE_CONFIG := $(abspath ansible.cfg)

.PHONY: setup main test test-fleet unit lint typecheck ruff sanity clean sandbox-up sandbox-down preview bench

setup: $(VENV)/.installed .collections/ansible_collections/llmops/vllm

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(BIN)/pip install -q uv
	$(UV) pip install -q --python $(PY) -e '.[test]'
	touch $@

# The checkout itself is the collection: link it where Ansible and Python look for llmops.vllm.
.collections/ansible_collections/llmops/vllm:
	mkdir -p .collections/ansible_collections/llmops
	ln -sfn ../../.. $@

# The main job on the embedded sandbox: bring it up from nothing (packages, rootfs, venvs, models,
# hub, two systemd hosts; caches make the second run fast), serve model A on every host, then roll
# out the inventory's model B (retire A, serve B, gate, rollback on failure) and print the report.
# The sandbox stays up for a look around; `make sandbox-down` removes it.
ANSIBLE_PLAYBOOK := $(BIN)/ansible-playbook
main: setup
	sandbox/up
	$(ANSIBLE_PLAYBOOK) playbooks/rollout.yml -e @examples/sandbox-model-a.yml
	$(ANSIBLE_PLAYBOOK) playbooks/rollout.yml
	$(PY) tools/show_report.py reports

sandbox-up:
	sandbox/up

sandbox-down:
	sandbox/down

# The story's host from real captures (8x RTX PRO 6000, PCIe, two NUMA nodes): the plans of the
# model it retires (with the FP8 KV cache its checkpoint is scaled for, which doubles its KV room)
# and the model it rolls out (throughput: the layout predicted fastest at full load),
# then the two compared on that host for both objectives (the story's pivot, by the numbers), then
# the host serving two models at once: MiniMax-M2.5 on NUMA node 0, Qwen3-30B-A3B FP8 on node 1.
# No GPU needed.
RTX := --topo-file tests/fixtures/topology/8x-rtxpro6000-bw-server-pcie-2numa-asus-esc8000a-e13p.txt \
  --query-file tests/fixtures/gpuinfo/nvidia-smi-q__8x-rtxpro6000-asus-esc8000a-e13p.txt \
  --numactl-file tests/fixtures/gpuinfo/numactl-H__8x-rtxpro6000-asus-esc8000a-e13p.txt
preview: setup
	$(BIN)/llmops-vllm plan $(RTX) --model tests/fixtures/configs/nvidia__Kimi-K2.5-NVFP4.json --model-id nvidia/Kimi-K2.5-NVFP4 --kv-cache-dtype fp8
	@echo
	$(BIN)/llmops-vllm plan $(RTX) --model tests/fixtures/configs/MiniMaxAI__MiniMax-M2.5.partial.json --model-id MiniMaxAI/MiniMax-M2.5
	@echo
	$(BIN)/llmops-vllm compare $(RTX) --kv-cache-dtype fp8 \
	  --model tests/fixtures/configs/nvidia__Kimi-K2.5-NVFP4.json --model-id nvidia/Kimi-K2.5-NVFP4 \
	  --model tests/fixtures/configs/MiniMaxAI__MiniMax-M2.5.partial.json --model-id MiniMaxAI/MiniMax-M2.5
	@echo
	$(BIN)/llmops-vllm compare $(RTX) --kv-cache-dtype fp8 --objective latency \
	  --model tests/fixtures/configs/nvidia__Kimi-K2.5-NVFP4.json --model-id nvidia/Kimi-K2.5-NVFP4 \
	  --model tests/fixtures/configs/MiniMaxAI__MiniMax-M2.5.partial.json --model-id MiniMaxAI/MiniMax-M2.5
	@echo
	$(BIN)/llmops-vllm plan $(RTX) \
	  --model tests/fixtures/configs/MiniMaxAI__MiniMax-M2.5.partial.json --model-id MiniMaxAI/MiniMax-M2.5 --port 8000 \
	  --model tests/fixtures/configs/Qwen__Qwen3-30B-A3B-FP8.json --model-id Qwen/Qwen3-30B-A3B-FP8 --port 8001

# Every runner (pytest, each molecule scenario) writes JUnit XML under out/junit; one
# `N passed, N failed` line sums them up. The sandbox is torn down at the end, always.
test: setup
	tools/run_tests.sh

# Zero failed requests during fleet rollouts (issue 18): three sandbox hosts behind a real HAProxy, a steady load,
# A -> B with a canary and a soak, a load failure and a failed soak rolled back. Not in `make test`: 30 minutes
# and more on two cores (docs/rollout.md). Brings up llmops-3 and HAProxy, stops what it started.
test-fleet: setup
	python3 sandbox/hosts.py tools
	$(BIN)/pytest -s tests/integration/test_fleet_live.py

unit: setup
	$(BIN)/pytest tests/unit

lint: setup typecheck ruff
	$(BIN)/ansible-lint --offline

# mypy and ruff read their settings from pyproject.toml (what they check, and why).
typecheck: setup
	$(BIN)/mypy

ruff: setup
	$(BIN)/ruff check

# ansible-test must run from an ansible_collections/<namespace>/<name> path: test a copy of the tree.
SANITY_DIR := $(abspath out/sanity/ansible_collections/llmops/vllm)
ANSIBLE_TEST_CACHE := $(HOME)/.ansible/test/cache
sanity: setup
	mkdir -p $(ANSIBLE_TEST_CACHE)
	for v in 24.2 25.0.1 25.2; do cp tools/ansible_test_get_pip.py $(ANSIBLE_TEST_CACHE)/get_pip_$$(echo $$v | tr . _).py; done
	rm -rf out/sanity && mkdir -p $(SANITY_DIR)
	git ls-files -co --exclude-standard | grep -v '^out/' | tar -cf - -T - | tar -xf - -C $(SANITY_DIR)
	cd $(SANITY_DIR) && git init -q && git add -A && \
	  $(abspath $(BIN))/ansible-test sanity --python 3.11 --color no

bench: setup
	$(PY) bench/vllm_info_fastpath.py
	$(PY) bench/hf_fetch.py
	$(PY) bench/vllm_venv_install.py
# rollout_noop and soak need the sandbox up and serving the inventory's model (e.g. after `make main`).
	$(PY) bench/rollout_noop.py
	$(PY) bench/soak.py --minutes 10
# zero_downtime brings up a third sandbox host and HAProxy itself, and stops what it started.
	$(PY) bench/zero_downtime.py

clean:
	rm -rf $(VENV) .collections .pytest_cache
