#!/usr/bin/env bash
# Device call g1 of 2026-12-02 (bench/results/device-log-2026-12-02-g.md): issue 13's run on one H200 — all 31
# llama.cpp points and the 12 qwen36 shapes at M = 1 in ONE bench/decode_roofline.py run, over call f3's 54
# candidates plus the 16 RG16 variants with x quantised once per launch (pp 13 / 14 / 15: the [prelaunch] kernel
# tb_decode_prep, then pp 10 / 11 / 2's kernel copying x's int8 image; the dispatch's time is both kernels); every
# timed variant is GPU-parity-checked; then GPU parity of the whole space at K = 5120 (the model-K test: 4 formats).
# The candidates: bench/candidates/decode-issue13-2026-12-02-g.txt (call g1); call g2: CANDIDATES=...-g2.txt (+ the
# stream kernel with x quantised once per launch, pp 16 / 17) and STAGES=roofline.
# Usage (device): [CANDIDATES=FILE] [STAGES=roofline,tests] bash bench/device_call_g1.sh [TAG]      carry: [".whl"]
set -u
tag=${1:-final-2026-12-02-g1}
V=$(tr -d '\n' < "${CANDIDATES:-$(dirname "$0")/candidates/decode-issue13-2026-12-02-g.txt}")
BUDGET_S=${BUDGET_S:-570} ROOFLINE_TIMEOUT=${ROOFLINE_TIMEOUT:-480} TESTS_BOX=${TESTS_BOX:-80} TESTS_K=${TESTS_K:-model_k} \
  FORMATS=Q4_0,IQ4_XS,Q4_K,Q8_0 VARIANTS=$V bash "$(dirname "$0")/device_k1n.sh" "$tag" "${STAGES:-roofline,tests}" | tail -70
