#!/usr/bin/env bash
# One call on the H200 (kind nvidia-h200) for issue 13's decode work, everything under $OUT:
#   tests:    GPU parity of every tb-decode variant x format at true bytes (3 pytest processes in parallel)
#   roofline: bench/decode_roofline.py (issue points + the qwen36 shapes at M = 1)
#   ncu:      Nsight Compute sections of the winners on the Q4_0 LM head and FFN_GateUp at M = 1
# Usage (device): bash bench/device_decode_k1.sh <tag> [tests,roofline,ncu] [roofline args...]
set -u
tag=${1:-$(date -u +%F)}; what=${2:-tests,roofline,ncu}; shift 2 || true
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
source "$(dirname "$0")/device_lib.sh"  # stamp, install_wheels
install_wheels || exit 1
json="$OUT/decode-roofline-h200-$tag.json"

if [[ $what == *tests* ]]; then
  log="$OUT/gpu-tests-decode-h200-$tag.log"
  stamp "python3 -m pytest -m gpu tests/cuda/test_cuda_gpu.py -k decode (3 processes by format)" > "$log"
  i=0
  for sel in "Q8_0 or Q4_0 or Q4_1" "Q5_0 or Q5_1 or IQ4_NL" "Q4_K or Q6_K or IQ4_XS"; do
    timeout ${TESTS_TIMEOUT:-150} python3 -m pytest -m gpu tests/cuda/test_cuda_gpu.py -q -rs -p no:cacheprovider \
      -k "(${TESTS_K:-decode or cupti or large or cubin}) and ($sel)" > "$OUT/t$i.log" 2>&1 &
    i=$((i + 1))
  done
  wait
  for j in 0 1 2; do cat "$OUT/t$j.log" >> "$log"; rm -f "$OUT/t$j.log"; done
  grep -E "passed|failed|Error|error" "$log" | tail -8
fi
if [[ $what == *roofline* ]]; then
  blog="$OUT/decode-roofline-h200-$tag.log"
  stamp "python3 bench/decode_roofline.py --out $json $*" > "$blog"
  timeout ${ROOFLINE_TIMEOUT:-240} python3 bench/decode_roofline.py --out "$json" "$@" >> "$blog" 2>&1
  echo "# rc=$?" >> "$blog"; tail -60 "$blog"
fi
if [[ $what == *ncu* ]] && [ -f "$json" ]; then
  nlog="$OUT/ncu-decode-true-bytes-h200-$tag.log"
  : > "$nlog"
  for point in ${NCU_POINTS:-Qwen36_LM_Head:1 Qwen36_FFN_GateUp:1}; do
    shape=${point%%:*}; m=${point##*:}
    cmd="ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats -k regex:tb_decode --launch-skip 1 --launch-count 1 python3 bench/ncu_decode.py --roofline $json --format Q4_0 --shape $shape --m $m"
    stamp "$cmd" >> "$nlog"
    timeout ${NCU_TIMEOUT:-90} $cmd >> "$nlog" 2>&1
    echo "# rc=$?" >> "$nlog"
  done
  grep -aE "ncu_decode|Duration|DRAM Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Theoretical Occ|Block Limit|Stall|rc=" "$nlog" | head -40
fi
ls -la "$OUT"
