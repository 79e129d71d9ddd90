#!/usr/bin/env bash
# One H200 call for issue 13's 12-shape median (k3q): PP9, the PP5 stream kernel with split waits (decode.hip
# tb_decode_stream SPLIT: a batch's last chunk by cp.async, waited for on its own after the other chunks' dots, where
# NVRTC 13.0 put all of a batch's loads on one scoreboard), A/B against its 6 PP5 twins (same rg, rw, u, pg) and call
# 16's other M = 1 Q4_0 winners (decode-roofline-h200-k3m-2026-12-01-d.json: PP6 U8/PG3 at Down, PP1 at the MoE
# GDN QKV / Z), in ONE run of bench/decode_roofline.py at M = 1, Q4_0, the 12 qwen36 shapes, every timed variant
# parity-checked on the GPU; then (if >= 40 s of the 230 s box are left) ncu of PP9 RW2/U5/PG0 on GDN_Z (call 16's
# PP5 twin: 8.38 us). Three files under $OUT (roofline JSON + log, ncu log). Decides: PP9 beats its PP5 twin at Z
# (8.38 us) / Out (8.83) / MoE GDN_QKV (5.82) and the median fraction (call 16: 0.482, target 0.60; Z and Out need
# <= ~6.9 us). The lines printed at the end give each shape's winner, its best PP5 and best PP9.
# Usage (device): bash bench/device_k3q.sh [tag]          carry: [".whl"]        <= 4 min
set -u
tag=${1:-k3q-$(date -u +%F)}
pp9="MX1/KB1/RW1/U4/RG2/PG0/PP9,MX1/KB1/RW1/U5/RG1/PG4/PP9,MX1/KB1/RW1/U6/RG1/PG3/PP9,MX1/KB1/RW1/U6/RG2/PG0/PP9,MX1/KB1/RW2/U5/RG1/PG0/PP9,MX1/KB1/RW2/U5/RG1/PG3/PP9"
pp5="${pp9//PP9/PP5}"
others="MX1/KB1/RW1/U8/RG1/PG3/PP6,MX1/KB1/RW2/U2/RG2/PG0/PP1,MX1/KB1/RW2/U2/RG1/PG3/PP1"
M=1 FORMATS=Q4_0 VARIANTS="$pp9,$pp5,$others" BUDGET_S=${BUDGET_S:-230} ROOFLINE_TIMEOUT=${ROOFLINE_TIMEOUT:-170} \
  NCU_MIN_S=${NCU_MIN_S:-40} NCU_POINTS="Q4_0:Qwen36_GDN_ZProjection:1:MX1/KB1/RW2/U5/RG1/PG0/PP9" \
  bash bench/device_k1n.sh "$tag" roofline,ncu
json="${OUT:-/tmp/out}/decode-roofline-h200-$tag.json"
[ -f "$json" ] && python3 - "$json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("summary:", {k: v for k, v in d.get("summary", {}).items() if "median" in k})
for p in d["points"]:
    if p["m"] == 1 and p["format"] == "Q4_0":
        best = {}
        for pp in ("PP5", "PP9"):
            got = {v: t for v, t in p.get("all_us", {}).items() if v.endswith("/" + pp)}
            best[pp] = min(got.items(), key=lambda t: t[1]) if got else None
        print(f"{p['shape']:32s} best {p['variant']:28s} {p['median_us']:8.2f} us frac {p.get('fraction_of_copy', 0):.3f}"
              f"  PP5 {best['PP5']}  PP9 {best['PP9']}")
PY
