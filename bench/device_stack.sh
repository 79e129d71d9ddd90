#!/usr/bin/env bash
# One call on the two-GPU H200 machine (kind nvidia-h200-x2); everything it keeps goes to $OUT.
#   stack:  bench/stack_run.py: Postgres (pgserver wheel) + Redis (Debian .debs, dpkg -x) started from .srv,
#           the API, Celery beat, a maintenance worker and two `tunebase worker --gpu N`; a qwen36 decode sweep
#           (4 formats, M 1-4, racing) over HTTP; one GPU worker SIGKILLed mid-sweep; nightly tables.
#   record: bench/racing_gpu.py record: exhaustive 200-dispatch recordings of every tb-decode variant on both
#           GPUs (qwen36 + a log-spaced N x K grid, M 1-4, format by format until the deadline).
# Needs carry [".whl", ".srv"] (scripts/fetch-device-wheels.sh, scripts/fetch-device-servers.sh): nothing
# can be downloaded there. Each stage is time-boxed; the stack's processes are ended by id if it overruns.
# Budget: on 2026-11-30 a GPU task took 2.8-14 s (median 3.6 s) under the watchdog (a fresh process, CUDA
# context and CUPTI session per backend call), so the 64-task sweep needs ~4 min once one worker is killed:
# give the stack stage its own call (`... <tag> stack`, ~6 device-minutes with the start) or raise the limits.
# Compile queue (2026-12-01): a `tunebase worker --compile` (COMPILE_PROCS processes, default nproc) NVRTC-compiles
# each format's tb-decode unit (~70 s each on the H200 host, all four at once on 16 cores) into the artifact
# dir the GPU workers share, while they take their first tasks (a GPU task that reaches a unit being compiled
# waits on its lock instead of compiling it again). PRECOMPILE=off: the old behaviour, for an A/B.
# TUNEBASE_ARTIFACT_DIR=$PWD/.cubins with carry .cubins: a cache compiled elsewhere (same NVRTC 13.0) is reused.
# Usage (device): bash bench/device_stack.sh <date-tag> [stack|record|all]
# Dry run here:   ARCH=host PROFILE=smoke GPUS=0,1 FORMATS=Q4_0 SHAPES=smoke LOCAL=1 bash bench/device_stack.sh t
# Compile side only, no GPU (sm_90 cubins with NVRTC; TUNEBASE_ARTIFACT_DIR=$PWD/.cubins keeps them to carry):
#   ARCH=sm_90 COMPILE_ONLY=1 LOCAL=1 PY=.venv/bin/python bash bench/device_stack.sh t stack
set -u
tag=${1:-$(date -u +%F)}; what=${2:-all}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ARCH=${ARCH:-sm_90}; PROFILE=${PROFILE:-qwen36-moe}; GPUS=${GPUS:-0,1}
FORMATS=${FORMATS:-Q4_0,Q4_K,Q8_0}; SHAPES=${SHAPES:-qwen36+grid}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TUNEBASE_ARTIFACT_DIR=${TUNEBASE_ARTIFACT_DIR:-/tmp/tb-artifacts}  # stack and recording share cubins
py=python3
log="$OUT/device-stack-$tag.log"
source "$(dirname "$0")/device_lib.sh"  # stamp, install_wheels
stamp "bash bench/device_stack.sh $tag $what" > "$log"
if [ -z "${LOCAL:-}" ]; then
  t=$(date +%s)
  wheels=$(ls .whl/*.whl .srv/wheels/*.whl | grep -v /pgserver-)  # pgserver: stack_servers unpacks it
  # shellcheck disable=SC2086  # one wheel path per word
  PY=$py install_wheels "$log" $wheels || exit 1
  echo "# wheels installed in $(( $(date +%s) - t )) s" >> "$log"
else
  py=${PY:-python3}; export PYTHONPATH=$PWD
fi

if [ "$what" = stack ] || [ "$what" = all ]; then
  t=$(date +%s)
  echo "== stack $(date -u +%T)" >> "$log"
  extra=(--compile-concurrency "${COMPILE_PROCS:-$(nproc)}")
  [ -n "${PRECOMPILE:-}" ] && extra+=(--precompile "$PRECOMPILE")
  [ -n "${COMPILE_ONLY:-}" ] && extra+=(--compile-only)
  # one GPU (GPUS=0): KILL_GPU=0 RESTART_KILLED=5 kills the only GPU worker and starts a new one, as a restart policy does
  [ -n "${KILL_GPU:-}" ] && extra+=(--kill-gpu "$KILL_GPU")
  [ -n "${RESTART_KILLED:-}" ] && extra+=(--restart-killed "$RESTART_KILLED")
  timeout -k 15 "${STACK_TIMEOUT:-345}" $py bench/stack_run.py --servers .srv --arch "$ARCH" --gpus "$GPUS" \
    --profile "$PROFILE" --timeout "${SWEEP_TIMEOUT:-300}" --kill-after "${KILL_AFTER:-10}" \
    "${extra[@]}" --out /tmp/stack-out >> "$log" 2>&1
  echo "# stack rc=$? in $(( $(date +%s) - t )) s" >> "$log"
  for pid in $(cat /tmp/stack-out/stack-pids 2>/dev/null); do  # only what stack_run started, by id
    kill -9 "$pid" 2>/dev/null && echo "# ended leftover pid $pid" >> "$log"
  done
  ngpu=$(tr ',' '\n' <<<"$GPUS" | grep -c .)  # the files say how many GPUs ran (h200x1 / h200x2)
  cp /tmp/stack-out/stack-summary.json "$OUT/stack-h200x$ngpu-$tag.json" 2>/dev/null
  tar czf "$OUT/stack-logs-h200x$ngpu-$tag.tar.gz" -C /tmp/stack-out stack-logs 2>/dev/null
fi

if [ "$what" = record ] || [ "$what" = all ]; then
  t=$(date +%s)
  echo "== record $(date -u +%T)" >> "$log"
  mkdir -p /tmp/rec
  timeout -k 15 "${RECORD_TIMEOUT:-180}" $py bench/racing_gpu.py record --arch "$ARCH" --gpus "$GPUS" \
    --formats "$FORMATS" --shapes "$SHAPES" --deadline-s "${RECORD_DEADLINE:-135}" \
    --builders "${BUILDERS:-5}" --artifacts "$TUNEBASE_ARTIFACT_DIR" \
    --out "/tmp/rec/racing-gpu-h200x2-$tag.json.gz" >> "$log" 2>&1
  echo "# record rc=$? in $(( $(date +%s) - t )) s" >> "$log"
  cp "/tmp/rec/racing-gpu-h200x2-$tag.json.gz" "$OUT/" 2>/dev/null
fi
tail -45 "$log"
