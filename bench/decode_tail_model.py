"""Where the M = 1 decode kernels lose to a plain reader of the same bytes: a per-shape model, no GPU.

Issue 13's median target (Q4_0, M = 1, 12 qwen36 shapes) misses on the 5-50 MB shapes, where the tuned kernels
take 1.5-2x the time of a reader (bench/read_floor.py). NVRTC 13.0's SASS of the PP5 stream kernel (Q4_0
MX1/KB1/RW2/U5/RG1/PG0/PP5, k3m) puts all 20 loads of a unit (10 x 16-byte payload, 10 scales) on ONE
scoreboard, and its first dot waits for it: a wave computes nothing until its last byte is in. With one or two
units per wave (Z: 3072 units of 2 rows on 3072 waves), every wave's last load lands with the end of the DRAM
stream, so the SM's whole dot-product work runs after it. The model:

    PP5:  time = reader + tail,  tail = SM's dot instructions / (4 schedulers x issue efficiency x clock)
    PP6:  time = reader + one stage per wave at the end + the cut-row sum (the dots run while bytes arrive)

with the dot instructions from the SASS (PP5 RW2/U5: 65 per two row-chunks; PP6: ~50 per stage of one
chunk per lane, issue and ring bookkeeping included) and the wave imbalance of each grid (PP5: units
interleaved over the lane groups, a wave does ceil or floor of units / groups; PP6: stages split evenly per
block). Prints, per shape, the measured decode time and reader time, the model's PP5 tail beside the measured
gap, and the model's PP6 time and fraction of copy.

    python bench/decode_tail_model.py [--decode bench/results/decode-roofline-h200-k1t-2026-12-01.json]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SMS = 132
CLOCK_GHZ = 1.755  # H200 SM clock under load (assumed; the boost clock is 1.98)
ISSUE_EFF = 0.5  # warp-instructions per scheduler cycle in the tail (dependent dp4a chains, LDS latency)
PP5_PER_ROW_CHUNK = 65 / 2  # SASS, Q4_0 RW2/U5: one chunk of two rows
PP6_PER_STAGE = 50  # SASS, Q4_0 U8/PG4 (rounds of S stages unrolled): a stage with its copy issue and wait
PP6_END = 0.2  # us: the block barrier and the cut-row sum after the last stage


def chunks(k: int) -> int:
    return k // 32  # Q4_0: 16 payload bytes per 32 weights


def pp5_units(variant: str, n: int, grid: int) -> float:
    """Units (RW rows) per lane group of a PP5 grid: the mean over the groups."""
    params = {m.group(1): int(m.group(2)) for m in re.finditer(r"([A-Z]+)(\d+)", variant)}
    return math.ceil(n / params["RW"]) / (grid * 8 * params["RG"])


def pp5_tail_us(n: int, k: int, units: float) -> float:
    """The dot products of every wave's last unit, after the DRAM stream (a unit's batch is waited for as a
    whole; one unit per wave: all of the SM's dots)."""
    per_sm = n * chunks(k) / SMS / 32 * PP5_PER_ROW_CHUNK
    return per_sm / max(1.0, units) / 4 / ISSUE_EFF / CLOCK_GHZ / 1e3


def pp6(n: int, k: int, pg: int) -> tuple[float, float]:
    """(stages per wave: max over the grid / mean, tail in us) of the flat kernel at pg blocks per SM."""
    grid = min(math.ceil(n / 8), pg * SMS)
    spr = chunks(k) // 32
    if spr == 0:
        return float("nan"), float("nan")
    rows_max = math.ceil(n / grid)
    stages_max = math.ceil(rows_max * spr / 8)
    mean = n * spr / (grid * 8)
    tail = 8 * pg / 4 * PP6_PER_STAGE / ISSUE_EFF / CLOCK_GHZ / 1e3  # the last stage of every wave on the SM
    return stages_max / mean, tail + PP6_END


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--decode", type=Path, default=REPO / "bench/results/decode-roofline-h200-k1t-2026-12-01.json"
    )
    parser.add_argument("--floor", type=Path, default=REPO / "bench/results/read-floor-h200-2026-12-01.json")
    args = parser.parse_args()
    decode = json.loads(args.decode.read_text())
    floor = {p["shape"]: p for p in json.loads(args.floor.read_text())["points"]}
    copy_gbs = decode["copy"]["bandwidth_gbs"]
    print(f"copy {copy_gbs:.0f} GB/s; clock {CLOCK_GHZ} GHz, issue efficiency {ISSUE_EFF} in the tail")
    print("shape                          n     k  decode  reader   gap  winner PP5? units  PP5tail", end="")
    print("  PP6(pg4)  frac  imb")
    now, model = [], []
    for p in decode["points"]:
        if p["m"] != 1 or p["format"] != "Q4_0" or p["shape"] not in floor:
            continue
        n, k = p["n"], p["k"]
        read = floor[p["shape"]]["read_us"]
        ideal = n * k // 32 * 18 / copy_gbs / 1e3
        imb, tail6 = pp6(n, k, 4)
        t6 = read + tail6 if k % 1024 == 0 else float("nan")
        best = min(p["median_us"], t6) if t6 == t6 else p["median_us"]
        now.append(ideal / p["median_us"])
        model.append(ideal / best)
        stream = p["variant"].endswith("/PP5")
        units = pp5_units(p["variant"], n, p["resources"]["grid"][0]) if stream else float("nan")
        tail5 = pp5_tail_us(n, k, units) if stream else float("nan")
        us = p["median_us"]
        print(
            f"{p['shape'][:28]:28s} {n:6d} {k:5d} {us:7.2f} {read:7.2f} {us - read:5.2f}  "
            f"{'yes' if stream else 'no ':3s} {units:10.2f} {tail5:7.2f} {t6:9.2f} "
            f"{ideal / best:6.3f} {imb:4.2f}"
        )
    print(
        f"median fraction of copy: measured {statistics.median(now):.3f}, "
        f"model with PP6 {statistics.median(model):.3f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
