"""Sweep an uploaded kernel package and the built-in one on the same points, side by side, in one run.

The path is the product's own: a SQLite home, migrations, the package stored as an upload would be
(service.kernel_store), one sweep per package (race strategy), the embedded worker loop with the arch's
backend, winners, and a ``struct-table`` for the package when the dialect is present. For every point it
prints the winner of each package, its median, the bandwidth at the format's TRUE bytes (GGUF blocks of
the weights + x + y; DESIGN §10) and the ratio of the two packages' medians measured in the same run.

    python bench/package_sweep.py --arch host --package docs/examples/rowsplit-gemv --out result.json
    python bench/package_sweep.py --arch sm_90 --package docs/examples/rowsplit-gemv --profile qwen36-core
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def true_bytes(format_name: str, n: int, k: int, m: int) -> int:
    """What a GEMV must move at least: the format's blocks, fp32 x and fp32 y."""
    from kernels.formats.registry import get_format

    return n * get_format(format_name).row_bytes(k) + 4 * m * k + 4 * m * n


def sweep(factory: Any, backend: Any, arch: str, kernel: str | None, args: argparse.Namespace) -> int:
    from service.sweeps.service import submit_sweep
    from service.sweeps.spec import ShapeSpec, SweepSpec
    from workers.embedded import run_until_idle

    shapes = None
    if args.shapes:
        pairs = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
        shapes = [ShapeSpec(name=f"S{n}x{k}", n=n, k=k) for n, k in pairs]
    spec = SweepSpec(
        arch=arch, phase="decode", kernel=kernel, formats=args.formats.split(","),
        profile=None if shapes else args.profile, shapes=shapes, m=[int(v) for v in args.m.split(",")],
        strategy=args.strategy, min_dispatches=args.dispatches, max_dispatches=args.max_dispatches,
        labels={"bench": "package_sweep"},
    )  # fmt: skip
    with factory.begin() as session:
        created, _ = submit_sweep(session, spec, None, "bench")
        sweep_id = int(created.id)
    run_until_idle(factory, backend, [arch])
    return sweep_id


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--arch", default="host")
    parser.add_argument("--package", type=Path, required=True, help="a decode package folder")
    parser.add_argument("--formats", default="Q8_0,Q4_0")
    parser.add_argument("--profile", default="smoke")
    parser.add_argument("--shapes", default="", help="NxK,... instead of --profile")
    parser.add_argument("--m", default="1,2,4")
    parser.add_argument("--strategy", default="race", choices=["race", "exhaustive"])
    parser.add_argument("--dispatches", type=int, default=20)
    parser.add_argument("--max-dispatches", type=int, default=200)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    from sqlalchemy import select

    from kernels.arches import get_arch
    from kernels.packages.archive import read_folder
    from service.config import Settings
    from service.db.migrate import upgrade
    from service.db.models import Measurement, Task, Winner
    from service.db.session import session_factory
    from service.kernel_store import store_package
    from workers.backends.registry import create_backend

    started = dt.datetime.now(dt.UTC)
    home = Path(tempfile.mkdtemp(prefix="tb-package-sweep-"))
    settings = Settings(home=home, database_url=f"sqlite:///{home / 'tunebase.sqlite3'}")
    upgrade(settings.resolved_database_url)
    factory = session_factory(settings.resolved_database_url)
    backend = create_backend(get_arch(args.arch).backend, settings.resolved_artifact_dir)
    device = backend.detect()
    if device is None:
        raise SystemExit(f"no device for {args.arch}")
    with factory.begin() as session:
        package = store_package(session, read_folder(args.package), "bench").package
    timings = {}
    sweeps = {}
    for kernel in (package.name, "tb-decode"):
        t0 = time.monotonic()
        sweeps[kernel] = sweep(factory, backend, args.arch, kernel, args)
        timings[kernel] = round(time.monotonic() - t0, 1)
    points: dict[tuple[str, int, int, int], dict[str, Any]] = {}
    with factory() as session:
        failed = {
            kernel: [(t.shape, (t.error or "")[:300]) for t in session.scalars(
                select(Task).where(Task.sweep_id == sweep_id, Task.state != "done"))]
            for kernel, sweep_id in sweeps.items()
        }  # fmt: skip
        for winner in session.scalars(select(Winner).where(Winner.arch == args.arch)):
            key = (winner.format, winner.m, winner.n, winner.k)
            row = points.setdefault(
                key, {"format": winner.format, "m": winner.m, "n": winner.n, "k": winner.k,
                      "shape": winner.shape,
                      "true_bytes": true_bytes(winner.format, winner.n, winner.k, winner.m)},
            )  # fmt: skip
            measured = session.scalars(
                select(Measurement).where(Measurement.sweep_id == sweeps[winner.kernel],
                                          Measurement.format == winner.format, Measurement.m == winner.m,
                                          Measurement.n == winner.n, Measurement.k == winner.k)
            ).all()  # fmt: skip
            row[winner.kernel] = {
                "variant": winner.variant, "median_us": winner.median_us, "decided": winner.decided,
                "margin": winner.margin, "margin_ci": [winner.margin_ci_lo, winner.margin_ci_hi],
                "gbs_true_bytes": row["true_bytes"] / (winner.median_us * 1e3),
                "dispatches": sum(m.n_dispatches for m in measured),
                "parity_failing": sorted(m.variant.name for m in measured if not m.parity_pass),
            }  # fmt: skip
    table = sorted(points.values(), key=lambda r: (r["format"], r["n"], r["k"], r["m"]))
    for row in table:
        if package.name in row and "tb-decode" in row:
            row["speedup_vs_builtin"] = row["tb-decode"]["median_us"] / row[package.name]["median_us"]
    result = {
        "bench": "package_sweep",
        "date": started.isoformat(timespec="seconds"),
        "command": " ".join(["python bench/package_sweep.py", *(argv if argv is not None else sys.argv[1:])]),
        "machine": platform.node(),
        "device": {"name": device.name, "arch": device.arch, "units": device.compute_units,
                   "driver": device.driver_version, "runtime": device.runtime_version},
        "package": {"name": package.name, "version": package.version, "weights": package.manifest.weights},
        "baseline": "tb-decode (built-in, tb-packed layout: int8 values + fp16 scales)",
        "seconds": timings,
        "failed_tasks": failed,
        "points": table,
        "note": "gbs_true_bytes counts the GGUF bytes of the weights + fp32 x + fp32 y for BOTH packages",
    }  # fmt: skip
    text = json.dumps(result, indent=1, default=str)
    if args.out:
        args.out.write_text(text)
    for row in table:
        cells = [f"{row['format']} m{row['m']} {row['n']}x{row['k']}"]
        for kernel in (package.name, "tb-decode"):
            if kernel in row:
                w = row[kernel]
                cells.append(f"{kernel} {w['variant']} {w['median_us']:.1f}us {w['gbs_true_bytes']:.1f}GB/s")
        if "speedup_vs_builtin" in row:
            cells.append(f"x{row['speedup_vs_builtin']:.2f}")
        print(" | ".join(cells))
    print(json.dumps({"seconds": timings, "failed": {k: len(v) for k, v in failed.items()}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
