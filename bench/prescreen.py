"""ISA pre-screen cost and findings: the built-in tb-decode package's whole rocm space, per arch, no GPU.

For each arch it compiles every valid variant (one translation unit per format: the template-instantiation
convention) with the arch's compiler and reads each variant's resources, then reports wall time, variants
per second, how many spill and which resource limits occupancy. Prints JSON (and writes it with --out).

    python bench/prescreen.py [--arches gfx906,gfx950] [--formats Q8_0,Q4_K] [--out FILE]
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def run(arch: str, formats: list[str]) -> dict[str, Any]:
    from kernels.packages.loader import builtin_packages
    from workers.prescreen import analyse_package

    package = builtin_packages()["tb-decode"]
    start = time.perf_counter()
    result = analyse_package(package, arch, formats)
    seconds = time.perf_counter() - start
    ok = [item for item in result.items if item.ok]
    return {
        "arch": arch,
        "toolchain": result.toolchain,
        "formats": formats,
        "variants": len(result.items),
        "analysed": len(ok),
        "failed": len(result.items) - len(ok),
        "spilling": sorted(f"{i.format} {i.variant}" for i in ok if i.spills),
        "seconds": round(seconds, 2),
        "variants_per_second": round(len(result.items) / seconds, 2),
        "limiters": dict(collections.Counter(str(i.resources.get("limiter")) for i in ok)),
        "waves_per_simd": dict(collections.Counter(i.resources.get("waves_per_simd") for i in ok)),
        "vgpr_range": [min(i.resources["vgpr"] for i in ok), max(i.resources["vgpr"] for i in ok)]
        if ok
        else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arches", default="gfx906,gfx950")
    parser.add_argument("--formats", default="Q8_0,Q4_K")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    formats = args.formats.split(",")
    report = {
        "bench": "prescreen",
        "date": dt.date.today().isoformat(),
        "machine": f"{platform.node()} ({os.cpu_count()} CPUs, shared), no GPU",
        "command": "python " + " ".join(sys.argv),
        "package": "tb-decode",
        "results": [run(arch, formats) for arch in args.arches.split(",")],
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
