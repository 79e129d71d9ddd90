#!/usr/bin/env bash
# One call on ONE H200 (kind nvidia-h200): the dense recording that can show the issue-14 LOSO target.
# Q4_0, M 1-4, the qwen36 profile + the log-spaced N x K grid AND its geometric midpoints (110 shapes,
# neighbours 0.6 octave apart instead of 1.3), 50 CUPTI-timed interleaved dispatches per variant,
# variants pruned per M to those that won some Q4_0 point of that M in the 42-shape recording of
# 2026-12-01 (+ the kernels added since, of the smallest mx >= M): 32 / 26 / 25 / 27 at M 1 / 2 / 3 / 4.
# Then, on the lead's machine: python bench/table_regret.py --data <the recording> (LOSO, no GPU).
# Outputs under $OUT (2 files): loso-dense-recording-h200-TAG.json.gz and loso-dense-h200-TAG.log.
# Needs .whl carried (scripts/fetch-device-wheels.sh). Usage (device): bash bench/device_loso_dense.sh TAG
set -u
tag=${1:-$(date -u +%F)}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
source "$(dirname "$0")/device_lib.sh"  # stamp, install_wheels
install_wheels || exit 1
work=/tmp/loso-dense; mkdir -p "$work"  # the .parts folder and kernel cache stay off $OUT
rec="$work/loso-dense-recording-h200-$tag.json.gz"; log="$OUT/loso-dense-h200-$tag.log"
cmd=(python3 bench/racing_gpu.py record --arch sm_90 --gpus 0 --formats Q4_0 --m 1,2,3,4
     --shapes qwen36+grid+mid --dispatches "${DISPATCHES:-50}" --deadline-s "${RECORD_DEADLINE:-215}"
     --builders "${BUILDERS:-12}" --prune-from bench/results/table-dispatch-recording-h200-2026-12-01.json.gz
     --prune-within "${PRUNE_WITHIN:-0.0}" --out "$rec")
stamp "${cmd[*]}" > "$log"
timeout -k 15 "${RECORD_TIMEOUT:-270}" "${cmd[@]}" >> "$log" 2>&1
echo "# record rc=$?" >> "$log"
[ -f "$rec" ] && cp "$rec" "$OUT/" || echo "no recording was written" >> "$log"
tail -20 "$log"
