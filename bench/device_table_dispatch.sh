#!/usr/bin/env bash
# One call on the H200 device machine (kind nvidia-h200): dispatch by the table, measured.
# Builds the consumer programs there (nvcc, the device's SM count and L2 read from the GPU), runs them,
# writes the JSON (and a log) under $OUT. Needs .whl carried (scripts/fetch-device-wheels.sh).
# Usage (device): bash bench/device_table_dispatch.sh <recording or database> [date-tag] [table_dispatch args...]
set -u
data=${1:?usage: bench/device_table_dispatch.sh <recording or database> [date-tag] [args...]}
tag=${2:-$(date -u +%F)}; shift 2 || shift $#
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
json="$OUT/table-dispatch-h200-$tag.json"; log="$OUT/table-dispatch-h200-$tag.log"
{
  echo "# device: $(nvidia-smi --query-gpu=index,name,uuid,driver_version --format=csv,noheader | tr '\n' ';')"
  echo "# date: $(date -u +%FT%TZ)"
  echo "# command: python3 bench/table_dispatch.py all --data $data --build-dir /tmp/table-dispatch --out $json $*"
} > "$log"
timeout "${DISPATCH_TIMEOUT:-580}" python3 bench/table_dispatch.py all --data "$data" --build-dir /tmp/table-dispatch \
  --out "$json" --total-s "${TOTAL_S:-540}" "$@" >> "$log" 2>&1
echo "# rc=$?" >> "$log"
cp /tmp/table-dispatch/manifest.json "$OUT/table-dispatch-h200-$tag.manifest.json" 2>/dev/null
for f in /tmp/table-dispatch/stdout_*.txt; do [ -f "$f" ] && cp "$f" "$OUT/table-dispatch-h200-$tag.$(basename "$f")"; done
tail -40 "$log"
