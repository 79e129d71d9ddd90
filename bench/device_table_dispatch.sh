#!/usr/bin/env bash
# One call on the H200 device machine (kind nvidia-h200): dispatch by the table, measured.
#   1. record: every variant of the CURRENT tb-decode space at the qwen36 + N x K grid points, through the
#      product's runner (bench/racing_gpu.py record; time-boxed, whole points only). Skipped when a recording
#      of this package version is given.
#   2. bench/table_dispatch.py all: table trained without every 4th shape, consumer programs built with nvcc
#      from the package (SM count and L2 read from the GPU), run, judged.
# Everything lands under $OUT (JSON, log, manifest, raw program output, the recording). Needs .whl carried
# (scripts/fetch-device-wheels.sh).
# Usage (device): bash bench/device_table_dispatch.sh [date-tag] [recording-of-this-version] [table_dispatch args...]
set -u
tag=${1:-$(date -u +%F)}; data=${2:-}; shift 2 || shift $#
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
source "$(dirname "$0")/device_lib.sh"  # stamp, install_wheels
install_wheels || exit 1
json="$OUT/table-dispatch-h200-$tag.json"; log="$OUT/table-dispatch-h200-$tag.log"
stamp "bash bench/device_table_dispatch.sh $*" > "$log"
if [ -z "$data" ]; then
  data="$OUT/table-dispatch-recording-h200-$tag.json.gz"
  cmd=(python3 bench/racing_gpu.py record --arch sm_90 --gpus 0 --formats "${FORMATS:-Q4_0,Q4_K}"
       --shapes qwen36+grid --dispatches "${DISPATCHES:-50}" --deadline-s "${RECORD_DEADLINE:-165}"
       --builders "${BUILDERS:-8}" --out "$data")
  echo "# command: ${cmd[*]}" >> "$log"
  timeout -k 15 "${RECORD_TIMEOUT:-215}" "${cmd[@]}" >> "$log" 2>&1
  echo "# record rc=$?" >> "$log"
  [ -f "$data" ] || { echo "no recording was written" >> "$log"; tail -30 "$log"; exit 1; }
fi
echo "# command: python3 bench/table_dispatch.py all --data $data --build-dir /tmp/table-dispatch --out $json $*" >> "$log"
timeout -k 15 "${DISPATCH_TIMEOUT:-320}" python3 bench/table_dispatch.py all --data "$data" \
  --build-dir /tmp/table-dispatch --out "$json" --total-s "${TOTAL_S:-300}" "$@" >> "$log" 2>&1
echo "# rc=$?" >> "$log"
cp /tmp/table-dispatch/manifest.json "$OUT/table-dispatch-h200-$tag.manifest.json" 2>/dev/null
for f in /tmp/table-dispatch/stdout_*.txt; do [ -f "$f" ] && cp "$f" "$OUT/table-dispatch-h200-$tag.$(basename "$f")"; done
tail -40 "$log"
