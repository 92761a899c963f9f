#!/usr/bin/env bash
# Check the probes and the planner on a real GPU host, in one call (tests/gpu/README.md):
#   captures raw nvidia-smi / numactl / sysfs / NVML outputs, runs llmops.vllm.gpu_topology_info
#   through ansible-playbook on localhost (NVML path and nvidia-smi path, normal and check mode, and
#   health_busy.yml while one CUDA process holds 1 GiB on the last GPU: gpus[].health must name it),
#   plans fixture models against the live facts, and packs it all into $OUT/gpu-check.tar.gz.
# Needs: the carried wheel directory .gpu-wheels (tests/gpu/prepare.sh: ansible-core, pydantic and
# nvidia-ml-py for CPython 3.12; the machine's own python3 may lack pynvml), python3, nvidia-smi.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
: "${OUT:?set OUT to the directory results go to}"
WORK=$(mktemp -d)
RAW=$WORK/raw
mkdir -p "$RAW" "$WORK/module" "$WORK/plans"
log() { echo "[$(date +%T)] $*"; }

log "raw captures"
nvidia-smi topo -m > "$RAW/topo-m.txt" 2>&1
nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total,memory.used,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,compute_cap,driver_version --format=csv > "$RAW/query-gpu.csv" 2>&1
nvidia-smi -q > "$RAW/nvidia-smi-q.txt" 2>&1
nvidia-smi nvlink -s > "$RAW/nvlink-s.txt" 2>&1
numactl -H > "$RAW/numactl-H.txt" 2>&1 || echo "numactl missing" > "$RAW/numactl-H.txt"
{
  for d in /sys/bus/pci/devices/*; do
    r() { tr ' ' '_' 2>/dev/null < "$d/$1"; }
    echo "$(basename "$d") class=$(r class) vendor=$(r vendor) device=$(r device) numa=$(r numa_node) lw=$(r current_link_width) ls=$(r current_link_speed) mlw=$(r max_link_width) mls=$(r max_link_speed)"
  done
  for n in /sys/devices/system/node/node*; do echo "$(basename "$n") cpulist=$(cat "$n/cpulist")"; done
} > "$RAW/sysfs.txt"
{ uname -r; nproc; command -v python3; python3 -c "import pynvml; print(pynvml.__file__)"; grep MemTotal /proc/meminfo; nvidia-smi --version; python3 --version; date -u +%FT%TZ; } > "$RAW/env.txt" 2>&1

log "venv with the carried wheels (system site-packages: nvidia-ml-py is installed there)"
python3 -m venv --system-site-packages "$WORK/venv"
"$WORK/venv/bin/pip" install -q --no-index --find-links .gpu-wheels ansible-core pydantic nvidia-ml-py || exit 1
mkdir -p .collections/ansible_collections/llmops && ln -sfn ../../.. .collections/ansible_collections/llmops/vllm
export ANSIBLE_CONFIG=$PWD/ansible.cfg PYTHONPATH=$PWD/.collections ANSIBLE_NOCOLOR=1
PY=$WORK/venv/bin/python

log "NVML snapshot"
"$PY" - > "$RAW/nvml-snapshot.json" <<'PYEOF'
import json
from ansible_collections.llmops.vllm.plugins.module_utils.topology_nvml import nvml_snapshot
print(json.dumps(nvml_snapshot(), indent=1, sort_keys=True))
PYEOF

log "gpu_topology_info through ansible-playbook"
"$WORK/venv/bin/ansible-playbook" -i localhost, -c local tests/gpu/probe.yml \
  -e "out_dir=$WORK/module ansible_python_interpreter=$PY" > "$WORK/module/ansible-playbook.log" 2>&1
echo "ansible-playbook rc=$?" >> "$WORK/module/ansible-playbook.log"
tail -5 "$WORK/module/ansible-playbook.log"

log "health: one CUDA process holds 1 GiB on the last GPU (memory only; no GPU setting is changed)"
HOLDER_READY=$WORK/holder-ready
# The machine's own python3 (torch is in its venv, not in the one made here).
python3 -c '
import sys, time, torch
gpu = torch.cuda.device_count() - 1
block = torch.empty(1 << 28, dtype=torch.float32, device="cuda:%d" % gpu)
open(sys.argv[1], "w").write("%d\n" % gpu)
time.sleep(120)
' "$HOLDER_READY" > "$WORK/module/holder.log" 2>&1 &
HOLDER=$!
for _ in $(seq 60); do [ -s "$HOLDER_READY" ] && break; sleep 1; done
echo "holder pid $HOLDER on GPU $(cat "$HOLDER_READY" 2>/dev/null)" | tee -a "$WORK/module/holder.log"
nvidia-smi -q > "$RAW/nvidia-smi-q-busy.txt" 2>&1
cat "/proc/$HOLDER/cgroup" > "$RAW/holder-cgroup.txt" 2>&1
"$WORK/venv/bin/ansible-playbook" -i localhost, -c local tests/gpu/health_busy.yml \
  -e "out_dir=$WORK/module ansible_python_interpreter=$PY" > "$WORK/module/health-busy.log" 2>&1
echo "ansible-playbook rc=$?" >> "$WORK/module/health-busy.log"
tail -3 "$WORK/module/health-busy.log"
kill "$HOLDER" 2>/dev/null; wait "$HOLDER" 2>/dev/null

log "plans against the live facts"
for spec in meta-llama__Meta-Llama-3.1-8B:meta-llama/Llama-3.1-8B-Instruct \
            meta-llama__Meta-Llama-3.1-70B:meta-llama/Llama-3.1-70B-Instruct \
            MiniMaxAI__MiniMax-M2.5.partial:MiniMaxAI/MiniMax-M2.5 \
            nvidia__Kimi-K2.5-NVFP4:nvidia/Kimi-K2.5-NVFP4 \
            deepseek-ai__DeepSeek-V3:deepseek-ai/DeepSeek-V3; do
  name=${spec%%:*}; id=${spec#*:}
  for path in nvml smi; do
    "$PY" -m ansible_collections.llmops.vllm.plugins.plugin_utils.cli plan --facts "$WORK/module/$path.json" \
      --model "tests/fixtures/configs/$name.json" --model-id "$id" --json > "$WORK/plans/$name.$path.json" 2> "$WORK/plans/$name.$path.err"
    echo "$name $path rc=$?" | tee -a "$WORK/plans/rc.txt"
  done
done

tar -czf "$OUT/gpu-check.tar.gz" -C "$WORK" raw module plans
log "done: $(du -h "$OUT/gpu-check.tar.gz" | cut -f1)"
