#!/usr/bin/env bash
# Device call f3 of 2026-12-02 (bench/results/device-log-2026-12-02-f.md): issue 13's run on one H200 — all 31
# llama.cpp points and the 12 qwen36 shapes at M = 1 in ONE bench/decode_roofline.py run, over call 21's (2026-12-01-d)
# 42 candidates plus the RG16 K-phase kernels (pp 10 / 11 / 12, RW2 pp 10) that call f2 measured on the LM head;
# every timed variant is GPU-parity-checked. The candidates: bench/candidates/decode-issue13-2026-12-02.txt.
# Usage (device): bash bench/device_call_f3.sh [TAG]      carry: [".whl"]      (2 files under $OUT)
set -u
tag=${1:-final-2026-12-02-f3}
V=$(tr -d '\n' < "$(dirname "$0")/candidates/decode-issue13-2026-12-02.txt")
BUDGET_S=${BUDGET_S:-520} ROOFLINE_TIMEOUT=${ROOFLINE_TIMEOUT:-480} \
  FORMATS=Q4_0,IQ4_XS,Q4_K,Q8_0 VARIANTS=$V bash "$(dirname "$0")/device_k1n.sh" "$tag" roofline | tail -60
