"""Where one GPU task's wall time goes (issue 14: a stack sweep task took ~12 s on the H200 with a resident
worker child, far more than its dispatches). Runs one decode task through the cuda backend twice in one
process (the second is what a resident child pays) under cProfile and prints the top entries as JSON.

    python bench/task_profile.py --format Q4_0 --n 17408 --k 5120 --m 1 --out task-profile.json
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--format", default="Q4_0")
    parser.add_argument("--n", type=int, default=17408)
    parser.add_argument("--k", type=int, default=5120)
    parser.add_argument("--m", type=int, default=1)
    parser.add_argument("--strategy", default="race", choices=("race", "exhaustive"))
    parser.add_argument("--max-dispatches", type=int, default=200)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--artifacts", type=Path, help="an NVRTC cache (compiled beforehand, carried)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    from kernels.packages.loader import builtin_packages
    from workers.backends.base import TaskSpec
    from workers.backends.cuda import CudaBackend

    package = builtin_packages()["tb-decode"]
    variants = tuple(v.name for v in package.space("cuda"))
    spec = TaskSpec(
        arch="sm_90", phase="decode", format=args.format, shape="profile", n=args.n, k=args.k, m=args.m,
        variants=variants, min_dispatches=20, max_dispatches=args.max_dispatches, strategy=args.strategy,
    )  # fmt: skip
    backend = CudaBackend(args.artifacts or Path(tempfile.mkdtemp(prefix="tb-profile-")))
    if backend.detect() is None:
        print("no sm_90 GPU", file=sys.stderr)
        return 2
    runs = []
    for label in ("first (compile + module load)", "second (resident: cubins cached, modules loaded)"):
        profiler = cProfile.Profile()
        t0 = time.monotonic()
        profiler.enable()
        result = backend.run_task(spec)
        profiler.disable()
        wall = time.monotonic() - t0
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(args.top)
        dispatches = sum(len(r.dispatches) for r in result.results)
        device_s = sum(d.device_ns for r in result.results for d in r.dispatches) / 1e9
        runs.append({
            "run": label, "wall_s": round(wall, 2), "dispatches": dispatches, "device_s": round(device_s, 3),
            "variants": len(result.results), "profile": text.getvalue().splitlines()[:args.top + 12],
        })  # fmt: skip
        print(json.dumps({k: v for k, v in runs[-1].items() if k != "profile"}), flush=True)
        print(text.getvalue()[:6000], flush=True)
    info = backend.detect()
    doc = {
        "bench": "task_profile",
        "command": " ".join(sys.argv),
        "device": str(info),
        "spec": str(spec),
        "runs": runs,
    }
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
