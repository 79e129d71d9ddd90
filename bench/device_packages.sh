#!/usr/bin/env bash
# One call on the H200 device machine (kind nvidia-h200), everything under $OUT. Needs .whl carried:
# fetch it first with scripts/fetch-device-wheels.sh (exact pinned wheels; nothing can be downloaded there).
#   tests:  the GPU tests through the one runner (decode + prefill parity of every built-in variant and
#           first-wave format, CUPTI clocks, the fixture package, the example package, a sweep via `tunebase serve`)
#   sweep:  bench/package_sweep.py: the example package beside the built-in tb-decode on the same points
# Usage (device): bash bench/device_packages.sh <date-tag> [tests|sweep|all] [package_sweep args...]
set -u
tag=${1:-$(date -u +%F)}; what=${2:-all}; shift 2 || true
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
source "$(dirname "$0")/device_lib.sh"  # stamp, install_wheels
install_wheels || exit 1

if [ "$what" = tests ] || [ "$what" = all ]; then
  log="$OUT/gpu-tests-packages-h200-$tag.log"
  stamp "python3 -m pytest -m gpu tests/cuda -q -rs --durations=15" > "$log"
  timeout ${TESTS_TIMEOUT:-420} python3 -m pytest -m gpu tests/cuda -q -rs -p no:cacheprovider --durations=15 >> "$log" 2>&1
  echo "# rc=$?" >> "$log"; grep -E "passed|failed|error|rc=" "$log" | tail -6
fi
if [ "$what" = sweep ] || [ "$what" = all ]; then
  json="$OUT/package-sweep-h200-$tag.json"; slog="$OUT/package-sweep-h200-$tag.log"
  stamp "python3 bench/package_sweep.py --arch sm_90 --package docs/examples/rowsplit-gemv --out $json $*" > "$slog"
  timeout ${SWEEP_TIMEOUT:-300} python3 bench/package_sweep.py --arch sm_90 --package docs/examples/rowsplit-gemv \
    --out "$json" "$@" >> "$slog" 2>&1
  echo "# rc=$?" >> "$slog"; tail -30 "$slog"
fi
