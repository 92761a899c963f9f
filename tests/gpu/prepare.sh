#!/usr/bin/env bash
# Controller side of the GPU check: the wheels tests/gpu/run.sh installs on the GPU machine
# (CPython 3.12, manylinux x86_64; it has no network). Carried there as .gpu-wheels.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .gpu-wheels
pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  "ansible-core>=2.19,<2.20" "pydantic>=2.6,<3" nvidia-ml-py -d .gpu-wheels
du -sh .gpu-wheels
