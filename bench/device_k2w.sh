#!/usr/bin/env bash
# K2W (issue 18: tb-prefill's warp-specialised wgmma engine E2 beside the E0 / E1 winners of 2026-12-01-c): ONE
# self-contained device run on ONE GPU, <= 300 s, all output under $OUT. From the repository root, .whl carried:
#   GPU=0 bash bench/device_k2w.sh [date-tag]        (CUDA_VISIBLE_DEVICES=${GPU:-0})
#   DRY=1 bash bench/device_k2w.sh                   (no GPU: prints the stage commands only)
#   E2=V1,V2 ... narrows the E2 list (default: the whole E2 + E3 space: 24 variants since k2x (+ 4 stream-K SK0),
#   32 since k2y (+ 4 WIDE N256/M128/W4x4 E2, + 4 E3: that tile in 2-CTA clusters));
#   NCU_POINT=Q8_0,GateUp,2048 NCU_ENGINE=E3 pick stage 4's point and engine (default Q4_0,GateUp,2048, E2);
#   FORMATS=Q4_0 narrows stages 1-3. K2X (the stream-K schedule, SK0) runs this same script:
#   ART=.cubins GPU=0 bash bench/device_k2w.sh 2026-12-01-k2x
# Device time is saved by compiling HERE first (the same NVRTC 13.0.88 wheel; the cache is content-addressed:
# source, headers, options, names, toolchain), then carrying the cache:
#   STAGES=compile ART=.cubins PY=.venv/bin/python bash bench/device_k2w.sh      (no GPU, ~4 min on 2 cores)
#   ART=.cubins GPU=0 bash bench/device_k2w.sh                                  (device; carry .whl .cubins)
# Stages (each time-boxed, the boxes add up to 300 s; a later one still runs when an earlier one fails):
#   1. NVRTC (sm_90a) cache warmed in parallel: Q4_0 / Q8_0 / Q4_K x (the list each format's rules keep, its SK1
#      subset, the smoke list): the exact units of stages 2 and 3
#   2. smoke, two processes (E3's cluster kernels in the second, 30 s): each format's list on a small point (n
#      1000, k 1024, m 200) from the cache of stage 1: parity per variant; a crash or a hang (an mbarrier wait
#      that never ends) in the first drops E2 / E3 from stage 3, in the second E3 only; a variant failing
#      parity is dropped from it
#   3. bench/prefill_roofline.py: 18 points, E0 / E1 winners + E2, cuBLAS fp16 in the same run; per engine best
#      (the JSON is rewritten after every point: a timeout keeps what was measured)
#   4. ncu of the best E2 at Q4_0 GateUp M=2048 (the E1 best when E2 did not run), in the time that is left;
#      alone, on a roofline JSON brought back into the tree (<= 90 s):
#      STAGES=ncu JSON=bench/results/prefill-roofline-h200-TAG.json ART=.cubins GPU=0 bash bench/device_k2w.sh TAG
set -u
PY=${PY:-python3}
STAGES=${STAGES:-compile,smoke,roofline,ncu}
want() { [[ ",$STAGES," == *",$1,"* ]]; }
tag=${1:-$(date -u +%F)-k2w}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export CUDA_VISIBLE_DEVICES=${GPU:-0}
run() { if [ -n "${DRY:-}" ]; then echo "DRY: $*"; else "$@"; fi; }
t0=$(date +%s)
left() { echo $(( 300 - ($(date +%s) - t0) )); }
source "$(dirname "$0")/device_lib.sh"  # stamp, install_wheels
[ "$STAGES" = compile ] || run install_wheels "$OUT/k2w-pip.log"
export PYTHONPATH=/tmp/site:$PWD  # the compile-only and DRY stages import the repository too
ART=$(realpath -m "${ART:-/tmp/tb-prefill-k2w-artifacts}")
mkdir -p "$ART"
export TUNEBASE_CUDA_ARTIFACTS=$ART
log="$OUT/k2w-prefill-h200-$tag.log"
stamp "STAGES=$STAGES ART=${ART:-} E2=${E2:-} FORMATS=${FORMATS:-} NCU_POINT=${NCU_POINT:-} NCU_ENGINE=${NCU_ENGINE:-} GPU=${GPU:-0} bash bench/device_k2w.sh $tag" > "$log"
el() { echo "# t=$(( $(date +%s) - t0 ))s $*" | tee -a "$log"; }

# E0 / E1: the engines' fastest variants on some point of bench/results/prefill-roofline-h200-2026-12-01-c.json
e0="N64/M64/W2x2/K8/S3/SK2/MB1/E0,N128/M64/W4x2/K4/S3/SK2/MB2/E0,N64/M128/W2x4/K4/S3/SK1/MB2/E0"
e0="$e0,N128/M128/W4x2/K4/S3/SK1/MB1/E0,N128/M128/W4x2/K4/S3/SK4/MB1/E0"
e1="N256/M64/W4x4/K4/S3/SK1/MB1/E1,N128/M128/W4x2/K4/S4/SK2/MB1/E1"
e2=${E2:-$($PY -c "
from kernels.packages.loader import builtin_packages
print(','.join(v.name for v in builtin_packages()['tb-prefill'].space('cuda') if v.params['engine'] >= 2))")}
formats=${FORMATS:-Q4_0,Q8_0,Q4_K}
export K2W_BENCH="$e0,$e1,$e2" K2W_FORMATS="$formats"
echo "# E2 variants: $e2" >> "$log"

lists="$OUT/k2w-lists.json"
if want compile; then
el "stage 1: warm the NVRTC cache (sm_90a) in $ART"
# the exact units stages 2 and 3 build (one NVRTC unit per format and variant list, in list order): the runner
# drops the variants a point's rules reject (e.g. MB2 for the K-quants, E2 S4 where its stages overflow shared
# memory), so each format's list is what its rules keep at the bench shapes, the SK1 subset (M >= 1024) and the
# smoke shape
run timeout "${COMPILE_TIMEOUT:-90}" $PY - "$lists" >> "$log" 2>&1 <<'EOF'
import json, os, sys
from pathlib import Path
import bench.prefill_roofline as b
from kernels.formats.registry import FORMATS
from kernels.packages.loader import builtin_packages
from kernels.packages.package import DeviceFacts
package = builtin_packages()["tb-prefill"]
h200 = DeviceFacts("cuda", "sm_90", 132, 32)
space = {v.name: v for v in package.space("cuda")}
bench = os.environ["K2W_BENCH"].split(",")
def kept(fmt, names, n, k, m):
    return [v for v in names if not package.point_problems(package.bindings(space[v], n, k, m, FORMATS[fmt], h200))]
lists = {}
for f in os.environ["K2W_FORMATS"].split(","):
    full = kept(f, bench, 17408, 5120, 128)
    # "raw": bench/prefill_roofline.py warms the list it is given, before the runner filters it
    # "sk1": what bench/prefill_roofline.py keeps at M >= 1024 (SK1 and E2's stream-K SK0)
    lists[f] = {"bench": full, "sk1": [v for v in full if "/SK1/" in v or "/SK0/" in v],
                "smoke": kept(f, bench, 1000, 1024, 200),
                "raw": bench}
    # stage 2's two processes (E3, the cluster kernels, apart: a hang there costs E3 only)
    lists[f]["smoke_rest"] = [v for v in lists[f]["smoke"] if not v.endswith("/E3")]
    lists[f]["smoke_E3"] = [v for v in lists[f]["smoke"] if v.endswith("/E3")]
    assert full == kept(f, bench, 12288, 5120, 2048), f"{f}: the shapes keep different variants"
Path(sys.argv[1]).write_text(json.dumps(lists, indent=1))
jobs = [(f, names) for f, by in lists.items() for names in {tuple(v): v for v in by.values() if v}.values()]
for f, by in lists.items():
    print("kept", f, {key: len(v) for key, v in by.items()})
for r in b.warm_cache(Path(os.environ["TUNEBASE_CUDA_ARTIFACTS"]), jobs, os.cpu_count() or 8):
    print("compile", r["format"], r["ok"], r["seconds"], "s", r["log"][-1500:])
EOF
echo "# rc=$?" >> "$log"
grep -E "^(kept|compile)" "$log"
fi

variants="$e0,$e1,$e2"
if want smoke; then
el "stage 2: smoke (each format's kept list, n 1000 k 1024 m 200, parity only; E3 in a process of its own)"
# smoke PART BOX: PART "rest" (every engine but E3) or "E3" (the cluster kernels: a hang there drops E3 only)
smoke() {
run timeout -k 10 "$2" $PY - "$lists" "$1" > "$OUT/k2w-smoke-$1.log" 2>&1 <<'EOF'
import json, os, sys
from pathlib import Path
from workers.backends.base import TaskSpec
from workers.backends.cuda import CudaBackend
lists = json.loads(Path(sys.argv[1]).read_text())
part = sys.argv[2]
backend = CudaBackend(Path(os.environ["TUNEBASE_CUDA_ARTIFACTS"]))
for fmt, by in lists.items():
    names = tuple(by["smoke_" + part])
    if not names:
        continue
    spec = TaskSpec(arch="sm_90", phase="prefill", format=fmt, shape="smoke", n=1000, k=1024, m=200,
                    variants=names, min_dispatches=1, max_dispatches=1, warmup=0, kernel="tb-prefill")
    for r in backend.run_task(spec).results:
        ok = r.error is None and r.parity is not None and r.parity.passed
        print("smoke", fmt, r.variant, "PASS" if ok else "FAIL", json.dumps({"error": (r.error or "")[:200],
              "rel_l2": None if r.parity is None else r.parity.rel_l2}), flush=True)
print("smoke done")
EOF
}
smoke rest "${SMOKE_BOX:-45}"; rc=$?
smoke E3 "${SMOKE_E3_BOX:-30}"; rc3=$?
cat "$OUT/k2w-smoke-rest.log" "$OUT/k2w-smoke-E3.log" > "$OUT/k2w-smoke.log" 2>/dev/null
echo "## smoke rc=$rc (E3: $rc3)" >> "$log"; cat "$OUT/k2w-smoke.log" >> "$log"
grep -c " PASS " "$OUT/k2w-smoke.log" | sed 's/^/smoke passes: /'; grep " FAIL " "$OUT/k2w-smoke.log" | head -8
if [ -z "${DRY:-}" ]; then
  if [ $rc -ne 0 ] || ! grep -q "^smoke done" "$OUT/k2w-smoke-rest.log"; then
    variants="$e0,$e1"; el "smoke crashed or hung (rc=$rc): stage 3 runs E0 + E1 only"
  else
    if [ $rc3 -ne 0 ] || ! grep -q "^smoke done" "$OUT/k2w-smoke-E3.log"; then
      variants=$(tr ',' '\n' <<< "$variants" | grep -v "/E3$" | paste -sd,)
      el "E3 smoke crashed or hung (rc=$rc3): E3 dropped"
    fi
    bad=$(grep " FAIL " "$OUT/k2w-smoke.log" | awk '{print $3}' | sort -u | tr '\n' ' ')
    for v in $bad; do variants=$(tr ',' '\n' <<< "$variants" | grep -vxF "$v" | paste -sd,); done
    [ -n "$bad" ] && el "dropped after failing parity: $bad"
  fi
fi
fi

json=${JSON:-$OUT/prefill-roofline-h200-$tag.json}
if want roofline; then
el "stage 3: roofline"
box=$(( $(left) - 40 ))
run timeout -k 10 $(( box > 60 ? box : 60 )) $PY bench/prefill_roofline.py --artifacts "$ART" --dispatches 5 --warmup 2 \
  --jobs 16 --formats "$formats" --variants "$variants" --out "$json" > "$OUT/prefill-roofline-h200-$tag.log" 2>&1
echo "# rc=$?" >> "$log"
tail -25 "$OUT/prefill-roofline-h200-$tag.log"
fi

if want ncu; then
el "stage 4: ncu"
eng=${NCU_ENGINE:-$(grep -q "/E2" <<< "$variants" && echo E2 || echo E1)}
npoint=${NCU_POINT:-Q4_0,GateUp,2048}
nlog="$OUT/ncu-prefill-$(tr 'A-Z,' 'a-z-' <<< "$npoint")-$eng-h200-$tag.log"
box=$(( $(left) ))
[ "$STAGES" = ncu ] && box=${NCU_TIMEOUT:-90}
if [ -f "$json" ] && [ "$box" -gt 20 ]; then
  run env TUNEBASE_CUPTI=0 timeout -k 5 "$box" ncu --kernel-name regex:tb_prefill_n --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats \
    --section InstructionStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
    $PY bench/prefill_ncu.py --json "$json" --point "$npoint" --artifacts "$ART" --engine "$eng" \
    > "$nlog" 2>&1
  echo "# ncu rc=$?" >> "$log"
  grep -E "\"variant\"|Duration|Issue Slots|Issued Ipc|Eligible|No Eligible|Registers|Achieved Occupancy|Compute \(SM\)|Memory Throughput|L2 Cache Throughput|DRAM Throughput|Stall" \
    "$nlog" | head -25
fi
fi
el "done"
