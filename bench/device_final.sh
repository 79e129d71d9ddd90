#!/usr/bin/env bash
# One call on the 2x H200 device machine (kind nvidia-h200-x2), everything under $OUT:
#   (a) GPU parity tests of the library decode kernel, (b) decode roofline bench on GPU 0,
#   (c) two pinned workers (one per GPU) sharing one SQLite database, device UUID per task.
# Per-step timeouts keep the whole run under ~7.5 minutes. Needs .whl carried (pinned wheels).
# Usage (device): bash bench/device_final.sh <date-tag>
set -u
tag=${1:-$(date -u +%F)}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
source "$(dirname "$0")/device_lib.sh"  # stamp, install_wheels
install_wheels || exit 1

log="$OUT/gpu-tests-h200x2-$tag.log"
{ stamp "python3 -m pytest -m gpu tests/cuda -x -q -rs"; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv; } > "$log" 2>&1
CUDA_VISIBLE_DEVICES=0 timeout 110 python3 -m pytest -m gpu tests/cuda -x -q -rs -p no:cacheprovider >> "$log" 2>&1
echo "# rc=$?" >> "$log"; tail -4 "$log"

json="$OUT/decode-roofline-h200-$tag-v3.json"
blog="$OUT/decode-roofline-h200-$tag-v3.log"
stamp "CUDA_VISIBLE_DEVICES=0 python3 bench/decode_roofline.py --out $json --m 1,2,3,4 --dispatches 6 --no-cublas" > "$blog"
CUDA_VISIBLE_DEVICES=0 timeout 230 python3 bench/decode_roofline.py --out "$json" --m 1,2,3,4 --dispatches 6 \
  --no-cublas >> "$blog" 2>&1
echo "# rc=$?" >> "$blog"; grep -E "copy|failed|LM_Head|rc=" "$blog" | head -12

two="$OUT/two-gpu-workers-h200x2-$tag.json"
tlog="$OUT/two-gpu-workers-h200x2-$tag.log"
rm -rf /tmp/two && mkdir -p /tmp/two
cmd="python3 bench/two_gpu_workers.py --arch sm_90 --database-url sqlite:////tmp/two/db.sqlite3 --log-dir /tmp/two/logs --formats Q8_0,Q4_0 --m 1,2 --dispatches 4 --timeout 80"
stamp "$cmd" > "$tlog"
timeout 100 $cmd > "$two" 2>> "$tlog"
echo "# rc=$?" >> "$tlog"
for f in /tmp/two/logs/worker-gpu*.log; do echo "== $f" >> "$tlog"; tail -30 "$f" >> "$tlog"; done
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print({k: d[k] for k in ('mode','tasks','tasks_per_device_uuid','distinct_devices','worker_exit_codes')})" "$two" || tail -20 "$tlog"
ls -la "$OUT"
