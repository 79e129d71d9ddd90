"""Profile ONE tb-prefill GEMM under Nsight Compute: the winner of a point of a prefill_roofline JSON.

    ncu --kernel-name regex:tb_prefill_n --launch-count 1 --section ... \\
        python bench/prefill_ncu.py --json RESULTS.json --point Q4_0,GateUp,2048

Runs the point's task through the runner with only the winner variant and one dispatch (CUPTI off: ncu owns
the profiling interface); the first GEMM launch (the parity run) is the profiled one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--point", required=True, help="FORMAT,SHAPE,M e.g. Q4_0,GateUp,2048")
    parser.add_argument("--artifacts", type=Path)
    parser.add_argument(
        "--engine", choices=("E0", "E1", "E2", "E3"), help="this engine's fastest passing variant"
    )
    args = parser.parse_args()
    os.environ["TUNEBASE_CUPTI"] = "0"
    fmt, short, m = args.point.split(",")
    doc = json.loads(args.json.read_text())
    point = next(p for p in doc["points"] if (p["format"], p["short"], p["m"]) == (fmt, short, int(m)))
    winner = point.get("winner") or point["variants"][0]["variant"]
    if args.engine:  # e.g. the wgmma engine's best, whichever engine won the point
        timed = [
            r for r in point["variants"]
            if r["variant"].endswith("/" + args.engine) and r.get("median_us")
            and (r["parity"] or {}).get("passed")
        ]  # fmt: skip
        if timed:
            winner = min(timed, key=lambda r: r["median_us"])["variant"]
    from workers.backends.base import TaskSpec
    from workers.backends.cuda import CudaBackend

    artifacts = args.artifacts or Path(tempfile.mkdtemp(prefix="tb-prefill-ncu-"))
    spec = TaskSpec(
        arch="sm_90", phase="prefill", format=fmt, shape=point["shape"], n=point["n"], k=point["k"], m=int(m),
        variants=(winner,), min_dispatches=1, max_dispatches=1, warmup=0, kernel="tb-prefill",
    )  # fmt: skip
    result = CudaBackend(artifacts).run_task(spec)
    r = result.results[0]
    print(json.dumps({"point": args.point, "variant": winner, "error": r.error,
                      "parity": None if r.parity is None else r.parity.passed}))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
