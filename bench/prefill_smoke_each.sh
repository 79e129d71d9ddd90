#!/usr/bin/env bash
# Device diagnosis: each prefill variant's GPU parity in a process of its own with a short box, so a variant that
# hangs (rc 124) is named instead of taking the whole smoke down with it (bench/device_k2w.sh stage 2).
# Usage (device): ART=.cubins FORMAT=Q4_0 BOX=25 bash bench/prefill_smoke_each.sh VARIANT...   carry .whl .cubins
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export CUDA_VISIBLE_DEVICES=${GPU:-0} PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD TUNEBASE_CUDA_ARTIFACTS=$(realpath -m "${ART:-.cubins}")
log="$OUT/prefill-smoke-each-${TAG:-h200}.log"
echo "# date: $(date -u +%FT%TZ) device: $(nvidia-smi --query-gpu=name,uuid --format=csv,noheader) format: ${FORMAT:-Q4_0}" > "$log"
for v in "$@"; do
  t=$(date +%s)
  timeout -k 5 "${BOX:-25}" python3 - "$v" "${FORMAT:-Q4_0}" >> "$log" 2>&1 <<'PY'
import os, sys
from pathlib import Path
from workers.backends.base import TaskSpec
from workers.backends.cuda import CudaBackend
variant, fmt = sys.argv[1], sys.argv[2]
spec = TaskSpec(arch="sm_90", phase="prefill", format=fmt, shape="smoke", n=1024, k=1024, m=256,
                variants=(variant,), min_dispatches=1, max_dispatches=1, warmup=0, kernel="tb-prefill")
for r in CudaBackend(Path(os.environ["TUNEBASE_CUDA_ARTIFACTS"])).run_task(spec).results:
    print("smoke", fmt, r.variant, "PASS" if r.error is None and r.parity and r.parity.passed else "FAIL",
          (r.error or "")[:300], None if r.parity is None else round(r.parity.rel_l2, 5), flush=True)
PY
  echo "# $v rc=$? $(( $(date +%s) - t )) s" >> "$log"
done
cat "$log"
