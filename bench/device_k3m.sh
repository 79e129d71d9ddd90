#!/usr/bin/env bash
# One H200 call for issue 13's 12-shape median (k3m): the PP6 'flat' decode kernel (decode.hip tb_decode_flat) against
# the current M = 1 Q4_0 winners (device call 13, decode-roofline-h200-k1t-2026-12-01.json) and the whole PP5 stream
# space, in ONE run of bench/decode_roofline.py at M = 1, Q4_0, the 12 qwen36 shapes (LM head, GateUp and the ten
# others), every timed variant parity-checked on the GPU, then (if >= 40 s of the 230 s box are left) ncu of the
# PP6 U8/PG4 kernel on GDN_Z (DRAM throughput, eligible warps, stall reasons: did the tail go?). Three files under
# $OUT (roofline JSON + log, ncu log); the JSON's summary holds the 12-shape median fraction of copy bandwidth
# (target 0.60; call 13: 0.474), and the lines printed at the end give each shape's winner and best PP6 time.
# Usage (device): bash bench/device_k3m.sh [tag]          carry: [".whl"]        <= 4 min
set -u
tag=${1:-k3m-$(date -u +%F)}
winners="MX1/KB1/RW2/U4/RG1/PG3/PP2,MX1/KB1/RW2/U2/RG2/PG0/PP1,MX2/KB1/RW2/U2/RG1/PG2/PP2,MX1/KB1/RW2/U2/RG1/PG3/PP1"
M=1 FORMATS=Q4_0 VARIANTS="stream,flat,$winners" BUDGET_S=${BUDGET_S:-230} ROOFLINE_TIMEOUT=${ROOFLINE_TIMEOUT:-170} \
  NCU_MIN_S=${NCU_MIN_S:-40} NCU_POINTS="Q4_0:Qwen36_GDN_ZProjection:1:MX1/KB1/RW1/U8/RG1/PG4/PP6" \
  bash bench/device_k1n.sh "$tag" roofline,ncu
json="${OUT:-/tmp/out}/decode-roofline-h200-$tag.json"
[ -f "$json" ] && python3 - "$json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("summary:", {k: v for k, v in d.get("summary", {}).items() if "median" in k})
for p in d["points"]:
    if p["m"] == 1 and p["format"] == "Q4_0":
        flat = {v: t for v, t in p.get("all_us", {}).items() if v.endswith("/PP6")}
        best_flat = min(flat.items(), key=lambda t: t[1]) if flat else None
        print(f"{p['shape']:32s} best {p['variant']:28s} {p['median_us']:8.2f} us frac {p.get('fraction_of_copy', 0):.3f}"
              f"  best PP6 {best_flat}")
PY
