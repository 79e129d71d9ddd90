#!/usr/bin/env bash
# K2N (issue 18: tb-prefill's wgmma engine E1 on sm_90a beside the mma.sync engine E0): ONE self-contained
# device run on ONE GPU, <= ~7 minutes, all output under $OUT. From the repository root, .whl carried:
#   GPU=1 bash bench/device_k2n.sh [date-tag]        (CUDA_VISIBLE_DEVICES=${GPU:-1})
#   DRY=1 bash bench/device_k2n.sh                   (no GPU: prints the stage commands only)
# Stages (each time-boxed; a later one still runs when an earlier one fails):
#   1. NVRTC (sm_90a) cache warmed in parallel: 9 formats x the GPU-test variants (E0 + E1), Q4_0/Q8_0/Q4_K x
#      the bench candidates; a failed E1 compile switches stage 3 to the E0 candidates
#   2. GPU parity of tb-prefill, 9 formats, E0 + E1 variants (3 processes, parity only); E1 failing parity
#      (or crashing its process) also switches stage 3 to E0 only, so a faulting wgmma cannot cost the bench
#   3. bench/prefill_roofline.py: 18 points, every candidate, cuBLAS fp16 in the same run; per engine best
#   4. ncu of the Q4_0 GateUp M=2048 E1 best (E0 winner when E1 did not run)
set -u
tag=${1:-$(date -u +%F)}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export CUDA_VISIBLE_DEVICES=${GPU:-1}
run() { if [ -n "${DRY:-}" ]; then echo "DRY: $*"; else "$@"; fi; }
t0=$(date +%s)
source "$(dirname "$0")/device_lib.sh"  # stamp, install_wheels
run install_wheels "$OUT/k2n-pip.log"
export PYTHONPATH=/tmp/site:$PWD  # the compile-only and DRY stages import the repository too
ART=/tmp/tb-prefill-k2n-artifacts
export TUNEBASE_CUDA_ARTIFACTS=$ART
log="$OUT/k2n-prefill-h200-$tag.log"
stamp "GPU=${GPU:-1} bash bench/device_k2n.sh $tag" > "$log"
el() { echo "# t=$(( $(date +%s) - t0 ))s $*" | tee -a "$log"; }
engines=E0E1

# E0: the candidates that won or came second on some point of the 2026-11-30 run (time: ~15 variants x 18
# points fit the stage's box); E1: every wgmma candidate of bench/prefill_roofline.py
e0="N64/M64/W2x2/K8/S3/SK2/MB1/E0,N128/M64/W4x2/K4/S3/SK2/MB2/E0,N64/M128/W2x4/K4/S3/SK1/MB2/E0"
e0="$e0,N128/M128/W4x2/K4/S3/SK1/MB1/E0,N128/M64/W4x2/K4/S3/SK1/MB2/E0,N128/M128/W4x2/K4/S3/SK4/MB1/E0"
e0="$e0,N128/M128/W2x4/K4/S3/SK1/MB1/E0"
e1=$(python3 -c "import bench.prefill_roofline as b; print(','.join(v for v in b.CANDIDATES if v.endswith('/E1')))")
export K2N_BENCH_VARIANTS="$e0,$e1"

el "stage 1: warm the NVRTC cache (sm_90a)"
run timeout 75 python3 - >> "$log" 2>&1 <<'EOF'
# the exact units stages 2 and 3 build (one NVRTC unit per format and variant list, in list order): each
# format's test variants that its point rules keep, and the bench list (all, and SK1 only for M >= 1024)
import os
from pathlib import Path
import bench.prefill_roofline as b
from kernels.formats.registry import FORMATS
from kernels.packages.package import DeviceFacts
from tests.cuda.test_cuda_gpu import PREFILL, PREFILL_VARIANTS
h200 = DeviceFacts("cuda", "sm_90", 132, 32)
def kept(f):
    return [v for v in PREFILL_VARIANTS if not PREFILL.point_problems(
        PREFILL.bindings(PREFILL.parse(v, "cuda"), 1000, 1024, 200, FORMATS[f], h200))]
bench = os.environ["K2N_BENCH_VARIANTS"].split(",")
jobs = [(f, kept(f)) for f in PREFILL.manifest.formats]
jobs += [(f, names) for f in b.FORMATS for names in (bench, [v for v in bench if "/SK1/" in v])]
for r in b.warm_cache(Path(os.environ["TUNEBASE_CUDA_ARTIFACTS"]), jobs, os.cpu_count() or 8):
    print("compile", r["format"], r["ok"], r["seconds"], "s", r["log"][-1500:])
EOF
echo "# rc=$?" >> "$log"
if grep -q "^compile .* False" "$log"; then engines=E0; el "a compile failed: stage 3 runs E0 only"; fi

el "stage 2: GPU parity, 9 formats x (E0 + E1) (3 processes: parity runs only, nothing timed against each other)"
for sel in "Q8_0 or Q4_0 or Q4_1" "Q5_0 or Q5_1 or IQ4_NL" "Q4_K or Q6_K or IQ4_XS"; do
  run timeout 100 python3 -m pytest -m gpu tests/cuda/test_cuda_gpu.py -k "every_prefill and ($sel)" -q -rfEs \
    -p no:cacheprovider > "$OUT/k2n-gpu-tests-${sel// /_}.log" 2>&1 &
done
wait
for f in "$OUT"/k2n-gpu-tests-*.log; do echo "## $f" >> "$log"; cat "$f" >> "$log"; done
grep -hE "passed|failed|error" "$OUT"/k2n-gpu-tests-*.log | tail -6
# E1 stays in the bench unless a failure of a bench format (Q4_0, Q8_0, Q4_K) names an E1 variant or names
# none (a compile failure, a crash); E1 failures of the other six formats are reported, not acted on
bad=$(grep -hE "^(FAILED|ERROR)" "$OUT"/k2n-gpu-tests-*.log | tee -a "$log")
bench_bad=$(grep -E -- "-(Q4_0|Q8_0|Q4_K)\]" <<< "$bad")
if [ -n "$bench_bad" ] && { grep -q "/E1'" <<< "$bench_bad" || ! grep -q "/E0'" <<< "$bench_bad"; }; then
  engines=E0; el "E1 failed parity or a run crashed: stage 3 runs E0 only"
fi
if [ -z "${DRY:-}" ] && ! grep -qhE "[0-9]+ passed" "$OUT"/k2n-gpu-tests-*.log; then
  engines=E0; el "no parity test passed: stage 3 runs E0 only"
fi

el "stage 3: roofline ($engines)"
json="$OUT/prefill-roofline-h200-$tag.json"
variants=$([ "$engines" = E0E1 ] && echo "$e0,$e1" || echo "$e0")
run timeout 230 python3 bench/prefill_roofline.py --artifacts "$ART" --dispatches 5 --warmup 2 --jobs 16 \
  --variants "$variants" --out "$json" > "$OUT/prefill-roofline-h200-$tag.log" 2>&1
echo "# rc=$?" >> "$log"
tail -25 "$OUT/prefill-roofline-h200-$tag.log"

el "stage 4: ncu"
left=$(( 415 - ($(date +%s) - t0) ))
if [ -f "$json" ] && [ "$left" -gt 25 ]; then
  eng=$([ "$engines" = E0E1 ] && echo E1 || echo E0)
  run env TUNEBASE_CUPTI=0 timeout $(( left < 60 ? left : 60 )) ncu --kernel-name regex:tb_prefill_n --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats \
    --section InstructionStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
    python3 bench/prefill_ncu.py --json "$json" --point Q4_0,GateUp,2048 --artifacts "$ART" --engine "$eng" \
    > "$OUT/ncu-prefill-q4_0-gateup-m2048-$eng-h200-$tag.log" 2>&1
  echo "# ncu rc=$?" >> "$log"
  grep -E "\"variant\"|Duration|Issue Slots|Issued Ipc|Eligible|No Eligible|Registers|Achieved Occupancy|Compute \(SM\)|Memory Throughput|L2 Cache Throughput|DRAM Throughput|Stall" \
    "$OUT/ncu-prefill-q4_0-gateup-m2048-$eng-h200-$tag.log" | head -25
fi
el "done"
