#!/usr/bin/env bash
# K2 (tb-prefill at true bytes, int8 tensor cores): ONE self-contained device run, <= ~120 s, all output
# under $OUT. Run from the repository root on the H200 machine with .whl carried, one GPU selected by
# CUDA_VISIBLE_DEVICES:
#   bash bench/device_k2.sh [date-tag]
# Stages (each time-boxed; a later one still runs when an earlier one fails):
#   1. NVRTC cache warmed in parallel: the 9 formats x the GPU-test variants, Q4_0/Q8_0/Q4_K x bench candidates
#   2. GPU parity of tb-prefill for all 9 first-wave formats (tests/cuda, prefill only)
#   3. bench/prefill_roofline.py: 18 points (Q4_0/Q8_0/Q4_K x GateUp/QKV x M 128/512/2048) + cuBLAS fp16
#   4. ncu of the Q4_0 GateUp M=2048 winner (speed of light, scheduler / warp state, instruction mix)
set -u
tag=${1:-$(date -u +%F)}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
t0=$(date +%s)
source "$(dirname "$0")/device_lib.sh"  # stamp, install_wheels
install_wheels "$OUT/k2-pip.log"
export PYTHONPATH=/tmp/site:$PWD  # the compile-only and DRY stages import the repository too
ART=/tmp/tb-prefill-artifacts
export TUNEBASE_CUDA_ARTIFACTS=$ART
log="$OUT/k2-prefill-h200-$tag.log"
stamp "bash bench/device_k2.sh $tag" > "$log"
el() { echo "# t=$(( $(date +%s) - t0 ))s $*" | tee -a "$log"; }

el "stage 1: warm the NVRTC cache"
timeout 30 python3 - >> "$log" 2>&1 <<'EOF'
import os
from pathlib import Path
import bench.prefill_roofline as b
from tests.cuda.test_cuda_gpu import PREFILL, PREFILL_VARIANTS
jobs = [(f, sorted(set(PREFILL_VARIANTS) | (set(b.CANDIDATES) if f in b.FORMATS else set())))
        for f in PREFILL.manifest.formats]
for r in b.warm_cache(Path(os.environ["TUNEBASE_CUDA_ARTIFACTS"]), jobs, os.cpu_count() or 8):
    print("compile", r["format"], r["ok"], r["seconds"], "s", r["log"][-1500:])
EOF
echo "# rc=$?" >> "$log"

el "stage 2: GPU parity, 9 formats (3 processes: parity runs only, nothing timed against each other)"
for sel in "Q8_0 or Q4_0 or Q4_1" "Q5_0 or Q5_1 or IQ4_NL" "Q4_K or Q6_K or IQ4_XS"; do
  timeout 28 python3 -m pytest -m gpu tests/cuda/test_cuda_gpu.py -k "every_prefill and ($sel)" -q -rs \
    -p no:cacheprovider > "$OUT/k2-gpu-tests-${sel// /_}.log" 2>&1 &
done
wait
for f in "$OUT"/k2-gpu-tests-*.log; do echo "## $f" >> "$log"; cat "$f" >> "$log"; done
grep -hE "passed|failed|error" "$OUT"/k2-gpu-tests-*.log | tail -6

el "stage 3: roofline"
json="$OUT/prefill-roofline-h200-$tag.json"
timeout 60 python3 bench/prefill_roofline.py --artifacts "$ART" --dispatches 5 --warmup 2 --out "$json" \
  > "$OUT/prefill-roofline-h200-$tag.log" 2>&1
echo "# rc=$?" >> "$log"
tail -25 "$OUT/prefill-roofline-h200-$tag.log"

el "stage 4: ncu"
if [ -f "$json" ]; then
  TUNEBASE_CUPTI=0 timeout 20 ncu --kernel-name regex:tb_prefill_n --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats \
    --section InstructionStats --section Occupancy --section LaunchStats \
    python3 bench/prefill_ncu.py --json "$json" --point Q4_0,GateUp,2048 --artifacts "$ART" \
    > "$OUT/ncu-prefill-q4_0-gateup-m2048-h200-$tag.log" 2>&1
  echo "# ncu rc=$?" >> "$log"
  grep -E "Duration|Issue Slots|Issued Ipc|Eligible|No Eligible|Registers|Achieved Occupancy|Compute \(SM\)|Stall" \
    "$OUT/ncu-prefill-q4_0-gateup-m2048-h200-$tag.log" | head -25
fi
el "done"
