#!/usr/bin/env bash
# One H200 call (kind nvidia-h200) for issue 18's cuBLAS comparison, timed the same way on both sides: the E3
# winners of call 17 (device-log-2026-12-01-d.md) at the 18 points (Q4_0 / Q8_0 / Q4_K x GateUp / QKV x M 128 / 512 /
# 2048) by CUPTI through the runner, and cuBLAS fp16 (torch.matmul) by CUPTI kernel activity through torch.profiler,
# with the earlier method (CUDA events around each host call, which counts the host's enqueue time as GPU time) and
# back-to-back events recorded beside it. JSON + log under $OUT.
# Usage (device): bash bench/device_prefill_cupti.sh [tag]      carry: [".whl"] (".cubins" optional)   ~2 min
set -u
tag=${1:-cupti-$(date -u +%F)}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
source "$(dirname "$0")/device_lib.sh"  # stamp, install_wheels
log="$OUT/prefill-roofline-h200-$tag.log"
variants=N256/M128/W4x4/K4/S3/SK0/MB1/E3,N256/M128/W4x4/K4/S3/SK1/MB1/E3,N256/M128/W4x4/K4/S4/SK0/MB1/E3,N256/M128/W4x4/K4/S4/SK1/MB1/E3
cmd=(python3 bench/prefill_roofline.py --artifacts "${ART:-/tmp/tb-cubins}" --dispatches "${DISPATCHES:-20}"
     --warmup 3 --jobs 16 --formats Q4_0,Q8_0,Q4_K --variants "$variants" --out "$OUT/prefill-roofline-h200-$tag.json")
stamp "bash bench/device_prefill_cupti.sh $tag: ${cmd[*]}" > "$log"
install_wheels "$log" || exit 1
timeout -k 10 "${ROOFLINE_TIMEOUT:-400}" "${cmd[@]}" >> "$log" 2>&1
echo "# rc=$?" >> "$log"
tail -45 "$log"
