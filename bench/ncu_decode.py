"""One tb-decode variant at one point, launched for Nsight Compute (issue 13: profiler evidence).

Reads the roofline JSON for the winning variant of (format, shape, M) unless --variant names one, builds
the point through the runner (parity launch, then one timed dispatch) with CUPTI tracing off so ncu owns
the counters. Profile the second launch:

    ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \\
        --section LaunchStats --section WarpStateStats -k regex:tb_decode --launch-skip 1 --launch-count 1 \\
        python bench/ncu_decode.py --roofline FILE --format Q4_0 --shape Qwen36_LM_Head --m 1
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--roofline", type=Path)
    parser.add_argument("--format", default="Q4_0")
    parser.add_argument("--shape", default="Qwen36_LM_Head")
    parser.add_argument("--m", type=int, default=1)
    parser.add_argument("--variant")
    args = parser.parse_args()

    from decode_roofline import GATE_UP, LM_HEAD, install_tiled_weights

    from kernels.profiles import load_profiles
    from workers.backends.base import TaskSpec
    from workers.backends.cuda import CudaBackend
    from workers.profilers import cupti

    shapes = {s.name: (s.n, s.k) for s in load_profiles()["qwen36"]}
    shapes.update({LM_HEAD[0]: LM_HEAD[1:], GATE_UP[0]: GATE_UP[1:]})
    n, k = shapes[args.shape]
    variant = args.variant
    if variant is None:
        assert args.roofline is not None, "--roofline or --variant"
        rows = json.loads(args.roofline.read_text())["points"]
        row = next(r for r in rows if (r["format"], r["shape"], r["m"]) == (args.format, args.shape, args.m))
        variant = row["variant"]
    cupti.available = lambda: False  # type: ignore[assignment]  # ncu holds the counters
    install_tiled_weights()
    with tempfile.TemporaryDirectory() as tmp:
        spec = TaskSpec(
            arch="sm_90", phase="decode", format=args.format, shape=args.shape, n=n, k=k, m=args.m,
            variants=(variant,), min_dispatches=1, max_dispatches=1, warmup=0, warm_cache=True,
        )  # fmt: skip
        result = CudaBackend(Path(tmp)).run_task(spec)
        r = result.results[0]
        print(f"ncu_decode {args.format} {args.shape} M{args.m} {variant}: parity {r.parity} error {r.error}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
