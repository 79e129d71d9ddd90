#!/usr/bin/env bash
# Device call 21 of 2026-12-01 (bench/results/device-log-2026-12-01-d.md): issue 13's final run on one H200 —
# all 31 llama.cpp points and the 12 qwen36 shapes at M = 1 in ONE bench/decode_roofline.py run, over call 13's 24
# candidates plus what this session added (k3m's flat winner at FFN_Down, k3i's interleaved ring 'iw', k3j's RG16
# split-K KB5 / RW2 points, k3q's split-wait stream kernel PP9); every timed variant is GPU-parity-checked; then
# ncu of the GDN_ZProjection M = 1 winner if the box has room.
# Usage (device): bash bench/device_call21.sh [TAG]      carry: [".whl"]      (3 files under $OUT)
set -u
tag=${1:-final-2026-12-01-d}
# call 13's candidates that won or came second at some point of calls 13-14 (bench/results/decode-roofline-h200-k1t
# and -k1w-2026-12-01.json), then this session's
V=MX4/KB1/RW1/U8/RG16/PG2/PP3,MX4/KB1/RW1/U8/RG16/PG2/PP4,MX4/KB1/RW1/U8/RG16/PG3/PP2,MX4/KB1/RW2/U8/RG16/PG2/PP2
V=$V,MX4/KB4/RW1/U8/RG16/PG0/PP2,MX4/KB4/RW1/U8/RG16/PG0/PP3,MX2/KB1/RW1/U8/RG16/PG3/PP2,MX2/KB4/RW1/U8/RG16/PG0/PP2
V=$V,MX2/KB4/RW1/U8/RG16/PG0/PP3,MX1/KB1/RW2/U2/RG1/PG3/PP2,MX2/KB1/RW2/U4/RG1/PG2/PP2,MX2/KB1/RW2/U2/RG1/PG2/PP2
V=$V,MX2/KB1/RW2/U2/RG1/PG3/PP2,MX4/KB1/RW2/U4/RG1/PG2/PP2,MX4/KB1/RW2/U2/RG1/PG2/PP3,MX4/KB1/RW2/U2/RG1/PG3/PP2
V=$V,MX4/KB1/RW2/U2/RG1/PG3/PP3,MX1/KB1/RW2/U4/RG2/PG0/PP0,MX1/KB1/RW2/U4/RG1/PG3/PP2,MX1/KB1/RW2/U2/RG1/PG3/PP1
V=$V,MX1/KB1/RW2/U2/RG2/PG0/PP1
V=$V,MX1/KB1/RW1/U4/RG2/PG0/PP5,MX1/KB1/RW1/U6/RG2/PG0/PP5,MX1/KB1/RW2/U5/RG1/PG0/PP5,MX1/KB1/RW2/U5/RG1/PG3/PP5
V=$V,MX1/KB1/RW1/U5/RG1/PG4/PP5,MX1/KB1/RW1/U6/RG1/PG3/PP5
V=$V,MX1/KB1/RW1/U8/RG1/PG3/PP6
V=$V,MX2/KB1/RW2/U5/RG1/PG2/PP7,MX2/KB1/RW1/U5/RG1/PG3/PP7,MX4/KB1/RW2/U5/RG1/PG2/PP7,MX4/KB1/RW2/U2/RG1/PG2/PP8
V=$V,MX4/KB5/RW2/U8/RG16/PG0/PP2,MX4/KB4/RW2/U8/RG16/PG0/PP2,MX4/KB5/RW1/U8/RG16/PG0/PP2,MX4/KB5/RW1/U8/RG16/PG0/PP3
V=$V,MX1/KB1/RW2/U5/RG1/PG0/PP9,MX1/KB1/RW2/U5/RG1/PG3/PP9,MX1/KB1/RW1/U4/RG2/PG0/PP9,MX1/KB1/RW1/U6/RG2/PG0/PP9
V=$V,MX1/KB1/RW1/U6/RG1/PG3/PP9,MX1/KB1/RW1/U5/RG1/PG4/PP9
BUDGET_S=${BUDGET_S:-500} ROOFLINE_TIMEOUT=${ROOFLINE_TIMEOUT:-420} NCU_MIN_S=${NCU_MIN_S:-50} \
  FORMATS=Q4_0,IQ4_XS,Q4_K,Q8_0 VARIANTS=$V NCU_POINTS="Q4_0:Qwen36_GDN_ZProjection:1" \
  bash bench/device_k1n.sh "$tag" roofline,ncu | tail -45
