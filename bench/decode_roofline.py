"""Decode GEMV roofline on the H200 at the format's TRUE bytes, against llama.cpp's MMVQ (issue 13).

For every point it runs the built-in tb-decode package's whole valid variant space (or --variants) through the
one runner (workers/runner.py: parity against the gguf FP32 reference, weights rotated beyond twice the L2,
interleaved CUPTI-timed dispatches) and keeps the fastest variant that passes parity. It reports

    time                 median device time of that variant (CUPTI)
    bytes                what the GEMV must move at the format's true size: N * row_bytes (GGUF bytes,
                         = the tb-split arrays) + x read (4 M K) + y written (4 M N)
    fraction_of_copy     bytes / time against a device-to-device copy measured in the same run
    llama_us, ratio      llama.cpp's MMVQ time for the point (table below) and llama_us / time

Points: the 31 points of the issue (LM head 248320x5120 and FFN_GateUp 17408x5120 for Q4_0, Q8_0, Q4_K,
IQ4_XS at the requested M) and the 12 qwen36 shapes at M = 1 in Q4_0 (the median-of-copy-bandwidth target).

    python bench/decode_roofline.py [--m 1,2,3,4] [--dispatches 5] [--formats Q4_0,...] [--out FILE]
                                    [--variants ring,tc,MX4/KB1/RW2/U4/RG1/PG2/PP0,...]
                                    [--shapes Qwen36_LM_Head,Qwen36_FFN_GateUp]

Large weights: the first 32768 rows are quantized (by gguf where it can, else random valid blocks) and
tiled to N rows. A GEMV's time does not depend on the values, and the reference is computed from exactly
those tiled blocks, so parity is as strict as elsewhere; it keeps the LM head's set-up to seconds.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import statistics
import sys
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

FORMATS = ("Q4_0", "Q8_0", "Q4_K", "IQ4_XS")
LM_HEAD = ("Qwen36_LM_Head", 248320, 5120)
GATE_UP = ("Qwen36_FFN_GateUp", 17408, 5120)
COPY_BYTES = 4 << 30
TILE_ROWS = 32768

# llama.cpp's untuned MMVQ, microseconds for M = 1, 2, 3, 4. Provenance: the text of issue 13 ("Kernel
# library at the format's real bytes, faster than llama.cpp on the H200"): ggml d99724f, CUDA graphs,
# NVIDIA H200, measured 2026-11-30. IQ4_XS GateUp has no M = 4 number there (31 points in all).
LLAMA_CPP_MMVQ_US: dict[tuple[str, str], tuple[float, ...]] = {
    ("Q4_0", LM_HEAD[0]): (319.4, 292.4, 344.1, 407.2),
    ("Q8_0", LM_HEAD[0]): (481.3, 444.8, 500.1, 569.3),
    ("Q4_K", LM_HEAD[0]): (361.5, 451.8, 585.8, 753.9),
    ("IQ4_XS", LM_HEAD[0]): (342.6, 345.3, 418.1, 509.6),
    ("Q4_0", GATE_UP[0]): (25.4, 22.9, 26.6, 31.2),
    ("Q8_0", GATE_UP[0]): (36.4, 34.5, 37.9, 43.0),
    ("Q4_K", GATE_UP[0]): (27.8, 35.0, 44.9, 57.2),
    ("IQ4_XS", GATE_UP[0]): (26.4, 27.2, 32.5),
}
LLAMA_PROVENANCE = "issue 13 text: llama.cpp MMVQ, ggml d99724f, CUDA graphs, NVIDIA H200, 2026-11-30"
TARGETS = {
    "geomean_ratio_min": 1.5,
    "q4_0_lm_head_m1_us_max": 196.0,
    "q4_0_gateup_m1_us_max": 16.0,
    "median_fraction_m1_q4_0_min": 0.60,
    "lm_head_m4_over_m1_max": 1.15,
}


def true_bytes(format_name: str, n: int, k: int, m: int) -> int:
    from kernels.formats.registry import get_format

    return n * get_format(format_name).row_bytes(k) + 4 * m * k + 4 * m * n


def install_tiled_weights() -> None:
    """Memoised, row-tiled quantize_random for the bench's big shapes (see the module docstring)."""
    import numpy as np

    from kernels import reference

    original = reference.quantize_random

    @lru_cache(maxsize=4)
    def cached(fmt: Any, n: int, k: int, seed: int) -> Any:
        if n <= TILE_ROWS:
            return original(fmt, n, k, seed)
        base = original(fmt, TILE_ROWS, k, seed)
        out = np.empty((n, base.shape[1]), dtype=np.uint8)
        for r0 in range(0, n, TILE_ROWS):
            out[r0 : r0 + TILE_ROWS] = base[: n - r0]
        return out

    reference.quantize_random = cached


def copy_bandwidth(repeats: int = 20) -> dict[str, Any]:
    """cuMemcpyDtoD of COPY_BYTES, timed with events; bandwidth counts bytes read + written."""
    from workers.harness import cuda_driver as cd
    from workers.profilers.cuda_events import EventTimer

    src, dst = cd.mem_alloc(COPY_BYTES), cd.mem_alloc(COPY_BYTES)
    timer = EventTimer()
    try:
        cd.check(cd.driver.cuMemsetD32(src, 0x3F800000, COPY_BYTES // 4), "cuMemsetD32")
        times = []
        for i in range(repeats + 3):
            timer.start()
            cd.dtod(dst, src, COPY_BYTES)
            ns = timer.stop_ns()
            if i >= 3:
                times.append(ns)
    finally:
        timer.close()
        cd.mem_free(src)
        cd.mem_free(dst)
    med = statistics.median(times)
    return {
        "bytes": COPY_BYTES,
        "median_us": med / 1e3,
        "bandwidth_gbs": 2 * COPY_BYTES / med,  # bytes/ns == GB/s
        "method": "cuMemcpyDtoD, CUDA events, read + write bytes",
    }


def points(
    formats: list[str], ms: list[int], shapes: frozenset[str] = frozenset()
) -> list[tuple[str, str, int, int, int]]:
    """(format, shape, n, k, m): the issue's points, then the qwen36 shapes at M = 1 in Q4_0; ``shapes``
    (names) keeps only those, e.g. the LM head and the GateUp alone for a short A/B of variants."""
    from kernels.profiles import load_profiles

    out = []
    for fmt in formats:
        for name, n, k in (LM_HEAD, GATE_UP):
            for m in ms:
                out.append((fmt, name, n, k, m))
    for shape in load_profiles()["qwen36"]:
        key = ("Q4_0", shape.name, shape.n, shape.k, 1)
        if key not in out:
            out.append(key)
    return [p for p in out if not shapes or p[1] in shapes]


def select_variants(spec: str) -> tuple[str, ...]:
    """The CUDA variants to time ('' = the whole space; a subset saves device time): comma-separated names
    and the keywords 'ring' (every cp.async ring variant of the dp4a kernel, PP 2 / 3), 'registers'
    (PP 0 / 1), 'tc' (the int8 tensor-core kernels, RG16), 'stream' (the M = 1 stream kernel, PP 5), 'flat'
    (the M = 1 flat kernel, PP 6) and 'iw' (the ring over units of rows interleaved over the grid's warps,
    PP 7 / 8). Unknown names raise ValueError."""
    from kernels.packages.loader import builtin_packages

    space = builtin_packages()["tb-decode"].space("cuda")
    if not spec:
        return tuple(v.name for v in space)
    wanted: set[str] = set()
    names = {v.name for v in space}
    for item in (s.strip() for s in spec.split(",")):
        if item == "ring":
            wanted |= {v.name for v in space if v.params["pp"] in (2, 3) and v.params["rg"] != 16}
        elif item == "stream":
            wanted |= {v.name for v in space if v.params["pp"] == 5}
        elif item == "flat":
            wanted |= {v.name for v in space if v.params["pp"] == 6}
        elif item == "iw":
            wanted |= {v.name for v in space if v.params["pp"] in (7, 8)}
        elif item == "tc":
            wanted |= {v.name for v in space if v.params["rg"] == 16}
        elif item == "registers":
            wanted |= {v.name for v in space if v.params["pp"] < 2}
        elif item in names:
            wanted.add(item)
        elif item:
            raise ValueError(
                f"--variants: {item!r} is not a CUDA tb-decode variant, "
                "'ring', 'registers', 'tc', 'stream', 'flat' or 'iw'"
            )
    return tuple(v.name for v in space if v.name in wanted)


def run_point(
    backend: Any, fmt: str, shape: str, n: int, k: int, m: int, dispatches: int, chosen: tuple[str, ...]
) -> dict[str, Any]:
    from kernels.packages.loader import builtin_packages
    from workers.backends.base import TaskSpec

    package = builtin_packages()["tb-decode"]
    variants = tuple(v.name for v in package.space("cuda") if m <= v.params["mx"] and v.name in chosen)
    spec = TaskSpec(
        arch="sm_90", phase="decode", format=fmt, shape=shape, n=n, k=k, m=m, variants=variants,
        min_dispatches=dispatches, max_dispatches=dispatches, warmup=2,
    )  # fmt: skip
    t0 = time.monotonic()
    result = backend.run_task(spec)
    medians: dict[str, float] = {}
    failures: dict[str, str] = {}
    for r in result.results:
        if r.error and r.error.startswith("restriction fails"):
            continue
        if r.error or r.parity is None or not r.parity.passed or not r.dispatches:
            failures[r.variant] = r.error or f"parity {r.parity}"
            continue
        medians[r.variant] = statistics.median(d.device_ns for d in r.dispatches) / 1e3
    ranked = sorted(medians, key=lambda v: medians[v])
    row: dict[str, Any] = {
        "format": fmt, "shape": shape, "n": n, "k": k, "m": m, "variants_timed": len(medians),
        "variants_failing": failures, "weight_copies": result.weight_copies,
        "seconds": round(time.monotonic() - t0, 1),
    }  # fmt: skip
    if not ranked:
        return row
    best = ranked[0]
    symbol = next(r.symbol for r in result.results if r.variant == best)
    res = result.artifact.resources.get(symbol, {})
    row.update(
        {
            "variant": best, "median_us": medians[best],
            "runner_up": ranked[1] if len(ranked) > 1 else None,
            "runner_up_us": medians[ranked[1]] if len(ranked) > 1 else None,
            "all_us": {v: round(medians[v], 2) for v in ranked},
            "resources": {key: res.get(key) for key in ("registers", "blocks_per_sm", "occupancy", "limiter",
                                                       "local_bytes", "shared_static_bytes", "grid")},
        }
    )  # fmt: skip
    return row


def summarize(rows: list[dict[str, Any]], copy: dict[str, Any]) -> dict[str, Any]:
    from kernels.formats.registry import get_format

    copy_bw = copy["bandwidth_gbs"]
    for row in rows:
        row["bits_per_weight"] = get_format(row["format"]).bits_per_weight
        row["bytes"] = true_bytes(row["format"], row["n"], row["k"], row["m"])
        if "median_us" not in row:
            continue
        row["bandwidth_gbs"] = row["bytes"] / (row["median_us"] * 1e3)
        row["fraction_of_copy"] = row["bandwidth_gbs"] / copy_bw
        llama = LLAMA_CPP_MMVQ_US.get((row["format"], row["shape"]))
        if llama is not None and row["m"] <= len(llama):
            row["llama_us"] = llama[row["m"] - 1]
            row["ratio"] = row["llama_us"] / row["median_us"]

    def find(fmt: str, shape: str, m: int) -> dict[str, Any] | None:
        return next((r for r in rows if (r["format"], r["shape"], r["m"]) == (fmt, shape, m)), None)

    compared = [r for r in rows if "ratio" in r]
    ratios = [r["ratio"] for r in compared]
    m1 = [
        r["fraction_of_copy"]
        for r in rows
        if r["format"] == "Q4_0" and r["m"] == 1 and "fraction_of_copy" in r
    ]
    lm1, gu1 = find("Q4_0", LM_HEAD[0], 1), find("Q4_0", GATE_UP[0], 1)
    growth = {}
    for fmt in FORMATS:
        a, b = find(fmt, LM_HEAD[0], 1), find(fmt, LM_HEAD[0], 4)
        if a and b and "median_us" in a and "median_us" in b:
            growth[fmt] = b["median_us"] / a["median_us"]
    return {
        "points_compared": len(compared),
        "faster_than_llama_cpp": sum(1 for x in ratios if x > 1.0),
        "slower_than_llama_cpp": [
            {k: r[k] for k in ("format", "shape", "m", "median_us", "llama_us", "ratio")}
            for r in compared
            if r["ratio"] <= 1.0
        ],
        "geomean_ratio": math.exp(sum(math.log(x) for x in ratios) / len(ratios)) if ratios else None,
        "worst": min(compared, key=lambda r: r["ratio"], default=None)
        and {
            k: min(compared, key=lambda r: r["ratio"])[k]
            for k in ("format", "shape", "m", "median_us", "ratio")
        },
        "q4_0_lm_head_m1_us": lm1.get("median_us") if lm1 else None,
        "q4_0_gateup_m1_us": gu1.get("median_us") if gu1 else None,
        "median_fraction_m1_q4_0": statistics.median(m1) if m1 else None,
        "shapes_in_median": len(m1),
        "lm_head_m4_over_m1": growth,
        "targets": TARGETS,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--m", default="1,2,3,4")
    parser.add_argument("--dispatches", type=int, default=5)
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--shapes", default="", help="comma list of shape names to keep (default: every point)"
    )
    parser.add_argument(
        "--variants",
        default="",
        help="names, 'ring' (PP 2/3, dp4a), 'registers' (PP 0/1), 'tc' (RG16), 'stream' (PP5), 'flat' (PP6), "
        "'iw' (PP7/8); empty: all",
    )
    args = parser.parse_args(argv)
    try:
        chosen = select_variants(args.variants)
    except ValueError as exc:
        parser.error(str(exc))
    formats = [f for f in args.formats.split(",") if f]
    ms = [int(v) for v in args.m.split(",") if v]
    shapes = frozenset(s for s in args.shapes.split(",") if s)
    if not points(formats, ms, shapes):
        parser.error(f"--shapes {args.shapes!r}: no point left (names: {LM_HEAD[0]}, {GATE_UP[0]}, qwen36's)")

    from workers.backends.cuda import CudaBackend

    started = dt.datetime.now(dt.UTC)
    install_tiled_weights()
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tb-roofline-") as tmp:
        backend = CudaBackend(Path(tmp))
        device = backend.detect()
        if device is None:
            raise SystemExit("no sm_90 GPU detected (cuda backend)")
        copy_before = copy_bandwidth()
        partial = {**copy_before, "note": "partial run: the copy before the points only"}
        rows: list[dict[str, Any]] = []
        for fmt, shape, n, k, m in points(formats, ms, shapes):
            rows.append(run_point(backend, fmt, shape, n, k, m, args.dispatches, chosen))
            r = rows[-1]
            took = f"{r.get('median_us', float('nan')):9.2f} us ({r['seconds']} s)"
            print(f"{fmt:7} {shape:30} M{m} {r.get('variant', '-'):24} {took}", flush=True)
            if args.out:  # a run cut short by its time box still leaves every point it finished
                _write(args.out, _result(argv, started, device, partial, rows, complete=False))
        copy_after = copy_bandwidth()
    copy = {**copy_before, "bandwidth_gbs": max(copy_before["bandwidth_gbs"], copy_after["bandwidth_gbs"]),
            "before_gbs": copy_before["bandwidth_gbs"], "after_gbs": copy_after["bandwidth_gbs"],
            "note": "the higher of two copies, one before and one after the points"}  # fmt: skip
    result = _result(argv, started, device, copy, rows, complete=True)
    if args.out:
        _write(args.out, result)
    _print_table(result)
    return 0


def _result(
    argv: list[str] | None,
    started: dt.datetime,
    device: Any,
    copy: dict[str, Any],
    rows: list[dict[str, Any]],
    complete: bool,
) -> dict[str, Any]:
    """The JSON document: device, date, command, copy bandwidth, every point and the summary."""
    result = {
        "bench": "decode_roofline",
        "date": started.isoformat(timespec="seconds"),
        "command": "python "
        + " ".join(["bench/decode_roofline.py", *(argv if argv is not None else sys.argv[1:])]),
        "complete": complete,
        "device": {
            "name": device.name,
            "sms": device.compute_units,
            "driver": device.driver_version,
            "runtime": device.runtime_version,
            "uuid": device.uuid,
        },
        "kernel": "kernels/library/tb-decode (layout tb-split, true bytes)",
        "bytes": "N * row_bytes (GGUF bytes) + 4 M K (x) + 4 M N (y)",
        "weights": f"first {TILE_ROWS} rows quantized, tiled to N rows when N > {TILE_ROWS}",
        "llama_cpp": LLAMA_PROVENANCE,
        "copy": copy,
        "summary": summarize(rows, copy),
        "points": rows,
        "seconds_total": round((dt.datetime.now(dt.UTC) - started).total_seconds(), 1),
    }
    return result


def _write(path: Path, result: dict[str, Any]) -> None:
    """Through a temporary file and a rename: a kill mid-write leaves the previous complete document."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=1, default=str))
    tmp.replace(path)


def _print_table(result: dict[str, Any]) -> None:
    """A short table last (the device reply keeps only the end of the output)."""
    print(f"copy {result['copy']['bandwidth_gbs']:.0f} GB/s")
    for r in result["points"]:
        if "median_us" not in r:
            print(f"{r['format']:7} {r['shape']:30} M{r['m']} no passing variant: {r['variants_failing']}")
            continue
        llama = f"{r['llama_us']:7.1f} {r['ratio']:5.2f}x" if "ratio" in r else " " * 14
        print(
            f"{r['format']:7} {r['shape']:28} M{r['m']} {r['variant']:24} {r['median_us']:8.2f} us "
            f"{100 * r['fraction_of_copy']:5.1f}% {llama}"
        )
    print(json.dumps(result["summary"], default=str))


if __name__ == "__main__":
    raise SystemExit(main())
