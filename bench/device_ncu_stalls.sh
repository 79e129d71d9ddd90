#!/usr/bin/env bash
# One H200 call (kind nvidia-h200): where the warps of one tb-decode variant wait, at several points — Nsight
# Compute's stall reasons per issued instruction (smsp__average_warps_issue_stalled_*) beside SpeedOfLight.
# Issue 13's LM head M4/M1 miss: the K-phase winner at M = 3 and M = 4 (the same mma work; M = 4 costs ~4 us more).
# Only the variants' kernels (tb_decode_mx*) are profiled, not a prelaunch kernel before them (pp 13-17).
# Usage (device): bash bench/device_ncu_stalls.sh [tag] [json]      carry: [".whl"]       ~4 min
set -u
tag=${1:-ncu-stalls-$(date -u +%F)}; json=${2:-bench/results/decode-roofline-h200-final-2026-12-02-f3.json}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
source "$(dirname "$0")/device_lib.sh"  # stamp, install_wheels
install_wheels "$OUT/ncu-stalls-pip.log" || exit 1
log="$OUT/ncu-decode-stalls-h200-$tag.log"
: > "$log"
for point in ${POINTS:-Q4_0:Qwen36_LM_Head:4:MX4/KB1/RW1/U8/RG16/PG2/PP10 Q4_0:Qwen36_LM_Head:3:MX4/KB1/RW1/U8/RG16/PG2/PP10}; do
  IFS=: read -r fmt shape m variant <<< "$point"
  cmd=(ncu --clock-control none --section SpeedOfLight --section WarpStateStats
       --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
       -k regex:tb_decode_mx --launch-skip 1 --launch-count 1
       python3 bench/ncu_decode.py --roofline "$json" --format "$fmt" --shape "$shape" --m "$m" --variant "$variant")
  stamp "${cmd[*]}" >> "$log"
  TUNEBASE_CUPTI=0 timeout -k 5 "${NCU_TIMEOUT:-110}" "${cmd[@]}" >> "$log" 2>&1
  echo "# rc=$?" >> "$log"
done
grep -aE "ncu_decode|Duration|DRAM Throughput|issue_stalled|Warp Cycles Per Issued|rc=" "$log" | awk '$NF+0 > 0.05 || /ncu_decode|Duration|DRAM|Cycles|rc=/' | head -80
