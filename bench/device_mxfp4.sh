#!/usr/bin/env bash
# One call on the H200 (kind nvidia-h200), everything under $OUT; needs .whl carried (pinned wheels).
#   (a) GPU parity of every tb-mxfp4-gemm CUDA variant through the runner (tests/cuda/test_mxfp4_gemm_gpu.py)
#   (b) bench/mxfp4_gemm.py: tuned variant per point vs torch bf16 matmul, 8192^3 + qwen36 x M buckets
# Both share one NVRTC cache, so the bench does not compile again.
# Usage (device): bash bench/device_mxfp4.sh <date-tag>
set -u
tag=${1:-$(date -u +%F)}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TB_MXFP4_ARTIFACTS=/tmp/mxfp4-artifacts
source "$(dirname "$0")/device_lib.sh"  # stamp, install_wheels
install_wheels || exit 1

log="$OUT/gpu-tests-mxfp4-h200-$tag.log"
stamp "python3 -m pytest -m gpu tests/cuda/test_mxfp4_gemm_gpu.py -q -rs --durations=5" > "$log"
timeout ${TESTS_TIMEOUT:-80} python3 -m pytest -m gpu tests/cuda/test_mxfp4_gemm_gpu.py -q -rs -p no:cacheprovider \
  --durations=5 >> "$log" 2>&1
echo "# rc=$?" >> "$log"; tail -8 "$log"

json="$OUT/mxfp4-gemm-h200-$tag.json"; blog="$OUT/mxfp4-gemm-h200-$tag.log"
stamp "python3 bench/mxfp4_gemm.py --artifacts $TB_MXFP4_ARTIFACTS --out mxfp4-gemm-h200-$tag.json" > "$blog"
timeout ${BENCH_TIMEOUT:-140} python3 bench/mxfp4_gemm.py --artifacts "$TB_MXFP4_ARTIFACTS" --out "$json" \
  > /dev/null 2>> "$blog"
echo "# rc=$?" >> "$blog"; tail -20 "$blog"
ls -la "$OUT"
