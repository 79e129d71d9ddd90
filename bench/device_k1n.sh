#!/usr/bin/env bash
# One call on the H200 for issue 13 (k1n: PG 3/4 resident persistent grids, MX2, x staging in one latency),
# on ONE GPU (CUDA_VISIBLE_DEVICES=${GPU:-0}: the other GPU may run a prefill job meanwhile). Under $OUT:
#   roofline: bench/decode_roofline.py --m 1,2,3,4 --dispatches 5 (the 31 issue points + 12 qwen36 shapes;
#             every variant's parity against the gguf reference decides which can win)  -> JSON + log
#   tests:    GPU parity of every tb-decode variant x format (`-m gpu -k decode`, 5 pytest processes)
#   ncu:      Nsight Compute sections of the Q4_0 FFN_GateUp M = 1 winner, if the time box has room
# The stages share one time box (BUDGET_S, default 410 s of the 7 minutes; pip install is seconds): the
# roofline gets up to 300 s (2026-11-30: 169 s for 42 variants, now 68) and writes its JSON after every point,
# the tests what is left (at most 130 s, 5 processes), ncu only with NCU_MIN_S left.
# Usage (device):  bash bench/device_k1n.sh <tag> [roofline,tests,ncu]       carry: [".whl"]
# Env: GPU, FORMATS (--formats), VARIANTS (--variants: names, 'ring', 'registers', 'tc', 'stream'), SHAPES (--shapes),
#      M (--m, default 1,2,3,4), ROOFLINE_TIMEOUT, BUDGET_S, NCU_POINTS (FORMAT:SHAPE:M[:VARIANT] ...),
#      TESTS_BOX (the tests stage's box; default what is left, at most 130 s: the whole space wants ~300)
# Dry run here:    DRY=1 OUT=/tmp/k1n-out bash bench/device_k1n.sh t        (prints the commands it would run)
set -u
tag=${1:-k1n-$(date -u +%F)}; what=${2:-roofline,tests,ncu}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export CUDA_VISIBLE_DEVICES=${GPU:-0} PYTHONUNBUFFERED=1
BUDGET_S=${BUDGET_S:-410}; NCU_MIN_S=${NCU_MIN_S:-60}
t0=$(date +%s)
left() { echo $((BUDGET_S - ($(date +%s) - t0))); }
run() { if [ -n "${DRY:-}" ]; then echo "DRY: $*"; else "$@"; fi; }
source "$(dirname "$0")/device_lib.sh"  # stamp, install_wheels
if [ -z "${DRY:-}" ]; then
  install_wheels || exit 1
fi
json="$OUT/decode-roofline-h200-$tag.json"

if [[ $what == *roofline* ]]; then
  blog="$OUT/decode-roofline-h200-$tag.log"
  cmd=(python3 bench/decode_roofline.py --m "${M:-1,2,3,4}" --dispatches 5 --out "$json")
  [ -n "${FORMATS:-}" ] && cmd+=(--formats "$FORMATS")  # split across GPUs; merge with --merge
  [ -n "${VARIANTS:-}" ] && cmd+=(--variants "$VARIANTS")  # a subset of the space, e.g. ring,<old winners>
  [ -n "${SHAPES:-}" ] && cmd+=(--shapes "$SHAPES")  # e.g. Qwen36_LM_Head,Qwen36_FFN_GateUp (no qwen36 M = 1 sweep)
  stamp "${cmd[*]}" > "$blog"
  run timeout ${ROOFLINE_TIMEOUT:-300} "${cmd[@]}" >> "$blog" 2>&1
  echo "# rc=$? seconds=$(( $(date +%s) - t0 ))" >> "$blog"; tail -50 "$blog"
fi
if [[ $what == *tests* ]]; then
  log="$OUT/gpu-tests-decode-h200-$tag.log"
  # one process per format (their NVRTC units compile in parallel on the device's cores), -v so that a box that
  # cuts a process still leaves the name and outcome of every test it finished (call 13 lost two failures' names)
  box=${TESTS_BOX:-$(left)}; [ -z "${TESTS_BOX:-}" ] && [ "$box" -gt 130 ] && box=130; [ "$box" -lt 30 ] && box=30
  fmts=(Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 IQ4_NL Q4_K Q6_K IQ4_XS)
  stamp "python3 -m pytest -m gpu tests/cuda/test_cuda_gpu.py -k decode -v (${#fmts[@]} processes by format, ${box}s box)" > "$log"
  for i in "${!fmts[@]}"; do
    run timeout "$box" python3 -m pytest -m gpu tests/cuda/test_cuda_gpu.py -v -rs -p no:cacheprovider \
      -k "(${TESTS_K:-decode}) and ${fmts[$i]}" > "$OUT/t$i.log" 2>&1 &
  done
  wait
  for i in "${!fmts[@]}"; do cat "$OUT/t$i.log" >> "$log"; rm -f "$OUT/t$i.log"; done
  grep -E "PASSED|FAILED|ERROR|passed|failed" "$log" | tail -40
fi
if [[ $what == *ncu* ]] && { [ -f "$json" ] || [ -n "${DRY:-}" ]; } && [ "$(left)" -ge "$NCU_MIN_S" ]; then
  nlog="$OUT/ncu-decode-h200-$tag.log"
  : > "$nlog"
  for point in ${NCU_POINTS:-Q4_0:Qwen36_FFN_GateUp:1}; do  # FORMAT:SHAPE:M[:VARIANT] (default: the winner)
    IFS=: read -r fmt shape m variant <<< "$point"
    cmd=(ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy
         --section LaunchStats --section WarpStateStats --section SchedulerStats -k regex:tb_decode
         --launch-skip 1 --launch-count 1 python3 bench/ncu_decode.py --roofline "$json" --format "$fmt"
         --shape "$shape" --m "$m")
    [ -n "$variant" ] && cmd+=(--variant "$variant")
    stamp "${cmd[*]}" >> "$nlog"
    run timeout "$(left)" "${cmd[@]}" >> "$nlog" 2>&1
    echo "# rc=$?" >> "$nlog"
  done
  grep -aE "ncu_decode|Duration|DRAM Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Theoretical Occ|Block Limit|Stall|rc=" "$nlog" | head -30
elif [[ $what == *ncu* ]]; then
  echo "ncu skipped: $(left) s left of ${BUDGET_S} s (NCU_MIN_S=$NCU_MIN_S) or no roofline JSON"
fi
echo "# total seconds: $(( $(date +%s) - t0 ))"
ls -la "$OUT"
