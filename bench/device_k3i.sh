#!/usr/bin/env bash
# One call on ONE H200 for issue 13's last two points (IQ4_XS FFN_GateUp M = 2 / 3: call 13 ran 27.71 / 32.54 us,
# llama.cpp 27.2 / 32.5): the interleaved cp.async ring (PP 7 / 8, decode.hip tb_decode_ring_iw) beside the call-13
# winners and runners-up of IQ4_XS and Q4_0 GateUp M = 1..4, in one process, TWICE (pass a, pass b: the run-to-run
# spread of the same binaries decides whether a ~2% lead is real). Under $OUT (4 files):
#   decode-roofline-h200-k3i-<tag>-{a,b}.json / .log   (bench/decode_roofline.py, --dispatches 10)
# Usage (device):  bash bench/device_k3i.sh <tag>        carry: [".whl"]
# Env: GPU (default 0), PASSES (default "a b"), BOX_S (per pass, default 110 s)
# Dry run here:    DRY=1 OUT=/tmp/k3i-out bash bench/device_k3i.sh t
set -u
tag=${1:-$(date -u +%F)}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export CUDA_VISIBLE_DEVICES=${GPU:-0} PYTHONUNBUFFERED=1
run() { if [ -n "${DRY:-}" ]; then echo "DRY: $*"; else "$@"; fi; }
source "$(dirname "$0")/device_lib.sh"  # stamp, install_wheels
if [ -z "${DRY:-}" ]; then
  install_wheels || exit 1
fi
# call 13's (decode-roofline-h200-k1t-2026-12-01.json) GateUp winners / runners-up: IQ4_XS M1 stream PP5 x2, M2 ring
# MX2 U4 / U2, M3 / M4 RG16 KB4 PP2 and ring MX4 PP3; Q4_0 M2 ring MX2 U2 PG2 and MX4 U4, M3 RG16 KB4 PP3
old="MX1/KB1/RW1/U6/RG1/PG3/PP5,MX1/KB1/RW2/U5/RG1/PG3/PP5,MX2/KB1/RW2/U4/RG1/PG2/PP2,MX2/KB1/RW2/U2/RG1/PG2/PP2"
old+=",MX4/KB4/RW1/U8/RG16/PG0/PP2,MX4/KB4/RW1/U8/RG16/PG0/PP3,MX4/KB1/RW2/U2/RG1/PG2/PP3,MX4/KB1/RW2/U4/RG1/PG2/PP2"
for pass in ${PASSES:-a b}; do
  json="$OUT/decode-roofline-h200-k3i-$tag-$pass.json"; log="${json%.json}.log"
  cmd=(python3 bench/decode_roofline.py --m 1,2,3,4 --dispatches 10 --formats IQ4_XS,Q4_0
       --shapes Qwen36_FFN_GateUp --variants "iw,$old" --out "$json")
  stamp "${cmd[*]}" > "$log"
  t0=$(date +%s)
  run timeout "${BOX_S:-110}" "${cmd[@]}" >> "$log" 2>&1
  echo "# rc=$? seconds=$(( $(date +%s) - t0 ))" >> "$log"
  tail -12 "$log"
done
# the per-point table of both passes: winner, and every PP 7 / 8 time beside the call-13 winner's
python3 - "$OUT" "$tag" <<'PY' || true
import json, pathlib, sys
out, tag = pathlib.Path(sys.argv[1]), sys.argv[2]
for path in sorted(out.glob(f"decode-roofline-h200-k3i-{tag}-*.json")):
    d = json.loads(path.read_text())
    print(f"== {path.name}  copy {d.get('copy', {}).get('bandwidth_gbs', 0):.0f} GB/s")
    for p in d.get("points", []):
        times = p.get("all_us", {})
        iw = {k: v for k, v in times.items() if k.endswith(("/PP7", "/PP8"))}
        best_iw = min(iw.items(), key=lambda kv: kv[1], default=("-", float("nan")))
        best_old = min(((k, v) for k, v in times.items() if k not in iw), key=lambda kv: kv[1], default=("-", float("nan")))
        print(f"{p['format']:7} M{p['m']} win {p.get('variant', '-'):28} {p.get('median_us', float('nan')):7.2f} us"
              f" llama {p.get('llama_us', '-')}  best PP7/8 {best_iw[0]} {best_iw[1]:.2f}  best old {best_old[0]} {best_old[1]:.2f}"
              f"  res {p.get('resources', {}).get('registers')}r/{p.get('resources', {}).get('blocks_per_sm')}b")
PY
ls -la "$OUT"
