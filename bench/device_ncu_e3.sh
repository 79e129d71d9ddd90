#!/usr/bin/env bash
# One H200 call (kind nvidia-h200): Nsight Compute of the E3 prefill winners that call e2 timed
# (bench/results/prefill-roofline-h200-2026-12-01-e2.json) at Q4_0 GateUp M = 2048 and M = 128: the profiler
# evidence of what limits issue 18's two cuBLAS targets. One log per point under $OUT.
# Usage (device): bash bench/device_ncu_e3.sh [tag] [json]      carry: [".whl"]       ~3 min
set -u
tag=${1:-ncu-e3-$(date -u +%F)}; json=${2:-bench/results/prefill-roofline-h200-2026-12-01-e2.json}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
source "$(dirname "$0")/device_lib.sh"  # stamp, install_wheels
install_wheels "$OUT/ncu-e3-pip.log" || exit 1
for point in ${POINTS:-Q4_0,GateUp,2048 Q4_0,GateUp,128}; do
  log="$OUT/ncu-prefill-$(tr 'A-Z,' 'a-z-' <<< "$point")-E3-h200-$tag.log"
  cmd=(ncu --kernel-name regex:tb_prefill_n --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis
       --section SchedulerStats --section WarpStateStats --section InstructionStats --section Occupancy
       --section LaunchStats --section MemoryWorkloadAnalysis
       python3 bench/prefill_ncu.py --json "$json" --point "$point" --engine E3)
  stamp "bash bench/device_ncu_e3.sh $tag: ${cmd[*]}" > "$log"
  TUNEBASE_CUPTI=0 timeout -k 5 "${NCU_TIMEOUT:-200}" "${cmd[@]}" >> "$log" 2>&1
  echo "# ncu rc=$?" >> "$log"
  echo "== $point"
  grep -E "\"variant\"|Duration|Issue Slots Busy|Issued Ipc|Eligible Warps|No Eligible|Registers Per|Achieved Occupancy|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput|L1/TEX Cache Throughput|Block Limit|Warp Cycles Per Issued" "$log" | head -30
done
