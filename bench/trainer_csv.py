"""Write a Llaminar decode trainer CSV from measured per-dispatch data, as the trainer would have.

Llaminar's ROCm decode trainer (Perf__NativeVNNI_Throughput.cpp, TrainerCsv_CodebookTagged) times
each variant for 5 warm-up and 20 timed runs, writes min/mean/population-stddev of the 20, and marks
``is_best`` on the parity-passing row with the lowest ``min_us`` of each (format, shape, M), the first
in its variant order on an exact tie; ``AUTO`` (the engine's own heuristic, ``kb=0,target_waves=0``)
competes for it like any variant. This script applies exactly that to real recorded dispatches:

* each variant's row summarises its first ``--runs`` recorded dispatches (recorded after Tunebase's
  own warm-up, interleaved across variants where the trainer runs them one after the other);
* an ``AUTO`` row is a second window of runs (the next ``--runs`` dispatches) of ``--auto-variant``,
  standing in for the engine's built-in choice being timed again; importers skip AUTO rows;
* rows fail parity where the measurement did, plus ``--parity-fail FORMAT:VARIANT`` injections (the
  timings stay the measured ones: a trainer times a wrong kernel too, it just cannot be best);
* ``weight_bytes`` is the format's true bytes (DESIGN §10), ``eff_bw_gbs`` at ``min_us``;
  ``speedup_vs_int8`` and ``kernel_efficiency`` are 0 (no INT8 reference was timed).

Usage: python bench/trainer_csv.py --data bench/results/<recording or db> --out trainer.csv
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from measured_data import DataError, RecordedPoint, open_measured  # noqa: E402

from kernels.formats.registry import FORMATS  # noqa: E402
from kernels.packages.loader import builtin_packages  # noqa: E402
from service.imports.llaminar_csv import DECODE_HEADER  # noqa: E402
from service.tables.codecs import get_codec  # noqa: E402

TRAINER_RUNS = 20


def _row(
    p: RecordedPoint, backend: str, variant: str, kb: int, tw: int, runs: list[int], parity: bool, cosine: str
) -> dict[str, object]:
    us = np.asarray(runs, dtype=np.float64) / 1000.0
    min_us, mean_us, std_us = (
        float(us.min()),
        float(us.mean()),
        float(us.std()),
    )  # population, like the trainer
    fmt = FORMATS[p.format]
    weight_bytes = p.n * p.k * fmt.bits_per_weight / 8
    bw = weight_bytes / (min_us * 1e-6) / 1e9
    return {
        "backend": backend, "phase": "decode", "format": p.format, "codebook": fmt.codebook, "shape": p.shape,
        "m": p.m, "n": p.n, "k": p.k, "variant": variant, "kb": kb, "target_waves": tw,
        "weight_bytes": f"{weight_bytes:.0f}", "min_us": f"{min_us:.3f}", "mean_us": f"{mean_us:.3f}",
        "stddev_us": f"{std_us:.3f}", "eff_bw_gbs": f"{bw:.3f}", "bw_efficiency": "0.000",
        "speedup_vs_int8": "0.000000", "theoretical_speedup": f"{8.0 / fmt.bits_per_weight:.6f}",
        "kernel_efficiency": "0.000", "cosine": cosine, "correctness_pass": int(parity), "is_best": 0,
    }  # fmt: skip


def trainer_rows(
    points: Sequence[RecordedPoint],
    runs: int = TRAINER_RUNS,
    auto_variant: str | None = "KB4/TW8",
    parity_fail: frozenset[tuple[str, str]] = frozenset(),
    backend: str | None = None,
) -> list[dict[str, object]]:
    """The CSV rows, is_best set by the trainer's rule."""
    current = {v.name: v.order for v in builtin_packages()["tb-decode"].space("cuda")}
    rows: list[dict[str, object]] = []
    for p in sorted(points, key=lambda p: (p.format, p.shape, p.m, p.n, p.k)):
        if p.phase != "decode":
            continue
        group: list[dict[str, object]] = []
        auto_times = p.times_ns.get(auto_variant or "", [])
        if auto_variant is not None and len(auto_times) >= 2 * runs:
            group.append(_row(p, backend or p.arch, "AUTO", 0, 0, auto_times[runs : 2 * runs], True, ""))
        order = p.order or current
        for name in sorted(p.times_ns, key=lambda v: (order.get(v, 1 << 20), v)):
            times = p.times_ns[name]
            if not times:  # not run at this point (a restriction or an error): the trainer has no row
                continue
            if len(times) < runs:
                raise DataError(f"{p.key} {name}: {len(times)} dispatches, fewer than --runs {runs}")
            try:
                kb, tw = get_codec("decode").parse_variant(name)
            except ValueError:
                raise DataError(
                    f"{name}: Llaminar's trainer schema names KB/TW variants only (kb, target_waves columns)"
                ) from None
            parity = name in p.eligible and (p.format, name) not in parity_fail
            cosine = f"{p.cosine[name]:.6f}" if name in p.cosine else ""
            group.append(_row(p, backend or p.arch, name, kb, tw, times[:runs], parity, cosine))
        best: dict[str, object] | None = None
        for row in group:  # trainer: strict <, first in variant order wins an exact tie
            if row["correctness_pass"] and (
                best is None or float(str(row["min_us"])) < float(str(best["min_us"]))
            ):
                best = row
        if best is not None:
            best["is_best"] = 1
        rows += group
    return rows


def write_csv(rows: Sequence[dict[str, object]], path: Path) -> None:
    lines = [",".join(DECODE_HEADER)] + [",".join(str(r[c]) for c in DECODE_HEADER) for r in rows]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data", type=Path, required=True, help="Tunebase database (.sqlite3[.gz]) or recording"
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=TRAINER_RUNS, help="timed runs per row (trainer: 20)")
    parser.add_argument("--auto-variant", default="KB4/TW8", help="variant whose second window is AUTO")
    parser.add_argument("--no-auto", action="store_true", help="write no AUTO rows")
    parser.add_argument(
        "--parity-fail", action="append", default=[], metavar="FORMAT:VARIANT", help="mark as failing parity"
    )
    parser.add_argument("--backend", default=None, help="backend column (default: the data's arch)")
    args = parser.parse_args(argv)
    fails = set()
    for item in args.parity_fail:
        fmt, _, variant = item.partition(":")
        if fmt not in FORMATS or not variant:
            print(f"error: --parity-fail {item!r} is not FORMAT:VARIANT", file=sys.stderr)
            return 2
        fails.add((fmt, variant))
    if args.runs < 2:
        print("error: --runs must be >= 2", file=sys.stderr)
        return 2
    try:
        with tempfile.TemporaryDirectory(prefix="trainer-csv-") as tmp:
            _, points, provenance = open_measured(args.data, Path(tmp))
        rows = trainer_rows(points, args.runs, None if args.no_auto else args.auto_variant, frozenset(fails),
                            args.backend)  # fmt: skip
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    write_csv(rows, args.out)
    print(f"wrote {len(rows)} rows from {provenance['points']} points ({provenance['kind']}) to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
