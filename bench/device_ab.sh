#!/usr/bin/env bash
# One call on the 1x H200 device machine (kind nvidia-h200): A/B of decode kernel sources.
#   (1) exhaustive service sweeps (SQLite, embedded worker, 50 dispatches) of Q4_0 M=1 on the LM head
#       and three mid-size qwen36 shapes: current, candidates, current again (drift), copy BW same run,
#   (2) the current kernel's sweep DB (per-dispatch rows) gzipped for racing replay,
#   (3) then, in a second process, parity of every variant, Q4_0 + Q4_K, two shapes.
# The sweeps run first and in their own process: on 2026-11-30 the first SQLAlchemy query of a
# process that had run the parity stage first died inside SQLAlchemy's Cython anon-map
# (IndexError in prefix_anon_map.__missing__; bench/results/decode-ab-h200-2026-11-30.log), while
# bench/decode_roofline.py (sweep first) never has.
#   (4) the GPU parity tests with the first candidate as TUNEBASE_CUDA_DECODE_SOURCE.
# Everything lands in $OUT; each step has a timeout, the whole run stays under ~3.5 minutes.
# Needs .whl carried. Usage (device): bash bench/device_ab.sh <date-tag>
set -u
tag=${1:-$(date -u +%F)}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
source "$(dirname "$0")/device_lib.sh"  # stamp, install_wheels
install_wheels || exit 1

json="$OUT/decode-ab-h200-$tag.json"; log="$OUT/decode-ab-h200-$tag.log"
rm -rf /tmp/ab && mkdir -p /tmp/ab
cmd="python3 tests/fixtures/cuda/decode_ab.py --homes /tmp/ab --out $json --dispatches 50 \
 --source current=kernels/sources/hip/decode.hip --source v3=tests/fixtures/cuda/decode_v3.hip \
 --source v3b=tests/fixtures/cuda/decode_v3b.hip --source current2=kernels/sources/hip/decode.hip"
stamp "$cmd" > "$log"
timeout 110 $cmd --skip-parity >> "$log" 2>&1
echo "# rc=$?" >> "$log"
[ -f /tmp/ab/current/tunebase.sqlite3 ] && gzip -c /tmp/ab/current/tunebase.sqlite3 > "$OUT/h200-sweep-dispatches-$tag.sqlite3.gz"
timeout 60 $cmd --skip-sweeps --out "$OUT/decode-ab-parity-h200-$tag.json" >> "$log" 2>&1
echo "# rc=$?" >> "$log"; grep -av "^#" "$log" | tail -20

tlog="$OUT/gpu-tests-v3-h200-$tag.log"
stamp "TUNEBASE_CUDA_DECODE_SOURCE=tests/fixtures/cuda/decode_v3.hip python3 -m pytest -m gpu tests/cuda/test_cuda_gpu.py -q" > "$tlog"
TUNEBASE_CUDA_DECODE_SOURCE=tests/fixtures/cuda/decode_v3.hip timeout 40 python3 -m pytest -m gpu \
  tests/cuda/test_cuda_gpu.py -q -p no:cacheprovider -rs >> "$tlog" 2>&1
echo "# rc=$?" >> "$tlog"; tail -3 "$tlog"
ls -la "$OUT"
