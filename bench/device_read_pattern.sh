#!/usr/bin/env bash
# One H200 call (kind nvidia-h200): bench/read_pattern.py, pure readers in the decode kernels' orders (RG16's
# 16 rows x 128 bytes per stage with J warps per row group; full-wave rows with and without x staged per block).
# Usage (device): bash bench/device_read_pattern.sh [tag]      carry: [".whl"]       ~2 min
set -u
tag=${1:-$(date -u +%F)}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
source "$(dirname "$0")/device_lib.sh"  # stamp, install_wheels
install_wheels "$OUT/read-pattern-pip.log" || exit 1
log="$OUT/read-pattern-h200-$tag.log"
cmd=(python3 bench/read_pattern.py --out "$OUT/read-pattern-h200-$tag.json"
     --decode bench/results/decode-roofline-h200-final-2026-12-01-d.json)
stamp "${cmd[*]}" > "$log"
timeout -k 5 "${READ_TIMEOUT:-240}" "${cmd[@]}" >> "$log" 2>&1
echo "# rc=$?" >> "$log"
cat "$log"
