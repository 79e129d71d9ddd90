#!/usr/bin/env bash
# Device call h2 of 2026-12-02 (bench/results/device-log-2026-12-02-h.md): (1) does [prelaunch] overlap overlap? The
# decode roofline on Q4_0 GDN Z / Out (M = 1) and the LM head (M = 1, 4) over x-per-launch variants and their twins,
# with TUNEBASE_CUPTI_RECORDS dumping every kernel record, summarised by bench/overlap_records.py; (2) GPU parity of
# every x-per-launch variant, 9 formats, launched as timed (graph + programmatic dependent launch).
# Usage (device): bash bench/device_call_h2.sh [TAG]       carry: [".whl"]
set -u
tag=${1:-2026-12-02-h2}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
source "$(dirname "$0")/device_lib.sh"  # stamp, install_wheels
install_wheels || exit 1
records="$OUT/cupti-records-h200-$tag.jsonl"
V=MX1/KB1/RW2/U5/RG1/PG0/PP16,MX1/KB1/RW2/U5/RG1/PG0/PP5,MX1/KB1/RW2/U5/RG1/PG0/PP17,MX1/KB1/RW2/U5/RG1/PG0/PP9
V=$V,MX1/KB1/RW1/U6/RG1/PG3/PP17,MX1/KB1/RW1/U6/RG1/PG3/PP9,MX4/KB1/RW1/U8/RG16/PG2/PP13,MX4/KB1/RW1/U8/RG16/PG2/PP10
log="$OUT/decode-roofline-h200-overlap-$tag.log"
cmd=(python3 bench/decode_roofline.py --m 1,4 --dispatches 20 --formats Q4_0 --variants "$V"
     --shapes Qwen36_LM_Head,Qwen36_GDN_ZProjection,Qwen36_GDN_OutputProjection
     --out "$OUT/decode-roofline-h200-overlap-$tag.json")
stamp "TUNEBASE_CUPTI_RECORDS=$records ${cmd[*]}" > "$log"
TUNEBASE_CUPTI_RECORDS=$records timeout 200 "${cmd[@]}" >> "$log" 2>&1; echo "# rc=$?" >> "$log"
tail -12 "$log"
python3 bench/overlap_records.py "$records" --out "$OUT/overlap-records-h200-$tag.json" | head -60
gzip -f "$records"
TESTS_BOX=${TESTS_BOX:-150} TESTS_K=per_launch BUDGET_S=200 bash "$(dirname "$0")/device_k1n.sh" "$tag" tests | tail -25
