"""Registers and spills of every CUDA variant of a package, from the device's own compiler (NVRTC).

    python bench/nvrtc_census.py --package tb-prefill --out bench/results/nvrtc-census-tb-prefill.json

Needs cuda-bindings and the pinned nvidia-cuda-nvrtc wheel (no GPU). Prints a JSON summary (the full
table goes to --out): which (format, variant) pairs use local memory or have their wgmma serialised by ptxas,
and the register range.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def format_census(job: tuple[str, str, list[str], str]) -> tuple[str, dict[str, Any], float]:
    package_name, format_name, names, artifacts = job
    from kernels.packages.loader import builtin_packages
    from workers.harness.nvrtc_census import census

    t0 = time.monotonic()
    table = census(builtin_packages()[package_name], format_name, names, Path(artifacts))
    return format_name, table, time.monotonic() - t0


def wheel_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nvidia-cuda-nvrtc")
    except PackageNotFoundError:
        return "not a wheel"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--package", required=True, help="a built-in package name (tb-decode, tb-prefill, ...)"
    )
    parser.add_argument("--formats", default="", help="comma list; default: the package's formats")
    parser.add_argument("--variants", default="", help="comma list of variant names; default: the CUDA space")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    from kernels.packages.loader import builtin_packages
    from workers.harness import cuda_driver as cd
    from workers.harness.cuda_compile import nvrtc_version

    packages = builtin_packages()
    if args.package not in packages:
        parser.error(f"--package: unknown package {args.package!r} (built in: {', '.join(sorted(packages))})")
    if cd.nvrtc is None:
        print(f"NVRTC is not importable here: {cd.IMPORT_ERROR}", file=sys.stderr)
        return 2
    package = packages[args.package]
    formats = [f for f in args.formats.split(",") if f] or list(package.manifest.formats)
    unknown = [f for f in formats if f not in package.manifest.formats]
    if unknown:
        parser.error(f"--formats: {', '.join(unknown)} not in {args.package}'s formats")
    space = [v.name for v in package.space("cuda")]
    names = [v for v in args.variants.split(",") if v] or space
    t0 = time.monotonic()
    tables: dict[str, dict[str, Any]] = {}
    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="nvrtc-census-") as tmp:
        jobs = [(args.package, f, names, tmp) for f in formats]
        with ProcessPoolExecutor(max_workers=max(1, min(args.jobs, len(jobs)))) as pool:
            for fmt, table, secs in pool.map(format_census, jobs):
                tables[fmt], seconds[fmt] = table, round(secs, 1)
                print(f"{fmt}: {len(table)} variants in {secs:.0f} s", file=sys.stderr, flush=True)
    spilling = sorted(
        (fmt, name, row["registers"], row["stack_frame"], row["spill_stores"])
        for fmt, table in tables.items()
        for name, row in table.items()
        if row["spills"]
    )
    serialized = sorted(
        f"{fmt} {name}"
        for fmt, table in tables.items()
        for name, row in table.items()
        if row["wgmma_serialized"]
    )
    registers = [row["registers"] for table in tables.values() for row in table.values()]
    summary_rows = [
        {"format": f, "variant": v, "registers": r, "stack_frame": s, "spill_stores": st}
        for f, v, r, s, st in spilling
    ]
    summary: dict[str, Any] = {
        "bench": "nvrtc_census",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "compiler": f"{nvrtc_version()} (nvidia-cuda-nvrtc {wheel_version()})",
        "package": f"{package.name} {package.version}",
        "variants": len(names),
        "whole_space": names == space,
        "formats": formats,
        "pairs": sum(len(t) for t in tables.values()),
        "spilling_pairs": len(spilling),
        "spilling": summary_rows,
        "wgmma_serialized_pairs": len(serialized),
        "wgmma_serialized": serialized,
        "registers_min_max": [min(registers), max(registers)] if registers else None,
        "seconds": round(time.monotonic() - t0, 1),
        "seconds_per_format": seconds,
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({**summary, "table": tables}, indent=1, sort_keys=True) + "\n")
    print(
        json.dumps(
            {k: v for k, v in summary.items() if k not in ("spilling", "wgmma_serialized")}
            | {"spilling": summary["spilling"][:40], "wgmma_serialized": serialized[:40]},
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
