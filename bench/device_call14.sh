#!/usr/bin/env bash
# Device call 14 of 2026-12-01 (bench/results/device-log-2026-12-01-c.md), kept so it can be rerun as it ran:
#   1. prefill: the WIDE E2 / E3 variants that hung in call 12, each in its own boxed process (k2z's setmaxnreg fix);
#   2. decode: all 31 llama.cpp points in one run with k1w's IQ4 lookup (shifts on the FMA pipe);
#   3. prefill: the 18 issue-18 points, E0/E1/E2/E3 beside cuBLAS fp16 (bench/device_k2w.sh), ncu of one E2 point.
# Usage (device): bash bench/device_call14.sh     carry: [".whl", ".cubins"] (.cubins warmed locally with
#   `STAGES=compile ART=.cubins PY=.venv/bin/python bash bench/device_k2w.sh`)
set -u
OUT=${OUT:-/tmp/out}; export OUT
ART=.cubins FORMAT=Q4_0 BOX=40 TAG=k2z-2026-12-01 bash bench/prefill_smoke_each.sh \
  N256/M64/W4x2/K4/S4/SK1/MB1/E2 N256/M128/W4x4/K4/S4/SK1/MB1/E2 N256/M128/W4x4/K4/S4/SK0/MB1/E2 \
  N256/M128/W4x4/K4/S4/SK1/MB1/E3 | tail -6
V=MX1/KB1/RW2/U4/RG1/PG3/PP2,MX4/KB1/RW1/U8/RG16/PG3/PP2,MX4/KB1/RW1/U8/RG16/PG2/PP4,MX1/KB1/RW2/U5/RG1/PG3/PP5
V=$V,MX1/KB1/RW1/U6/RG1/PG3/PP5,MX4/KB1/RW2/U8/RG16/PG2/PP2,MX2/KB1/RW1/U8/RG16/PG3/PP2,MX2/KB1/RW2/U4/RG1/PG2/PP2
V=$V,MX2/KB1/RW2/U2/RG1/PG2/PP2,MX2/KB1/RW2/U2/RG1/PG2/PP3,MX4/KB1/RW2/U2/RG1/PG2/PP3,MX4/KB1/RW2/U2/RG1/PG3/PP3
V=$V,MX4/KB4/RW1/U8/RG16/PG0/PP2,MX4/KB4/RW1/U8/RG16/PG0/PP3,MX2/KB4/RW1/U8/RG16/PG0/PP2,MX2/KB4/RW1/U8/RG16/PG0/PP3
V=$V,MX4/KB1/RW2/U4/RG1/PG2/PP2,MX2/KB1/RW2/U2/RG1/PG3/PP2,MX4/KB1/RW2/U2/RG1/PG3/PP2
BUDGET_S=${DECODE_S:-230} ROOFLINE_TIMEOUT=${DECODE_S:-230} NCU_MIN_S=999 FORMATS=IQ4_XS,Q4_0,Q4_K,Q8_0 \
  SHAPES=Qwen36_LM_Head,Qwen36_FFN_GateUp VARIANTS=$V bash bench/device_k1n.sh k1w-2026-12-01 roofline | tail -40
ART=.cubins GPU=0 SMOKE_BOX=${SMOKE_BOX:-90} SMOKE_E3_BOX=40 NCU_POINT=Q8_0,GateUp,2048 NCU_ENGINE=${NCU_ENGINE:-E2} \
  bash bench/device_k2w.sh 2026-12-01-k2z | tail -40
