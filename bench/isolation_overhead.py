"""What the watchdog costs per call: the resident child against a fresh child per call (workers/isolation.py).

Per mode, N calls of a trivial backend op (`supports`, no device work) and N small real host tasks
(`run_task`: one tb-decode variant, Q8_0 64x256, 3 timed dispatches; the compile cache is warmed
first, so no call compiles), each through IsolatedBackend exactly as a Celery worker makes them. The
resident figures include its first call (child start-up) in `total_s` and report it apart. On a GPU
host the per-call mode also pays CUDA context creation and module loads per call; this bench does not
show that part (the host backend has neither).
Prints JSON (ms per call per mode and op, the ms the resident child saves per call, with machine, load
average, date and command).
Usage: .venv/bin/python bench/isolation_overhead.py [--calls N] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kernels.packages.loader import builtin_packages  # noqa: E402
from workers.backends.base import TaskSpec  # noqa: E402
from workers.backends.host import HostBackend  # noqa: E402
from workers.isolation import BackendRef, IsolatedBackend, IsolationMode  # noqa: E402

MODES: tuple[IsolationMode, ...] = ("per-call", "resident")


def task_spec() -> TaskSpec:
    variant = next(v.name for v in builtin_packages()["tb-decode"].space("host"))
    return TaskSpec(
        arch="host", phase="decode", format="Q8_0", shape="Bench", n=64, k=256, m=1,
        variants=(variant,), min_dispatches=3, max_dispatches=3, warmup=1,
    )  # fmt: skip


def time_calls(backend: IsolatedBackend, op: str, calls: int, spec: TaskSpec) -> dict[str, Any]:
    times: list[float] = []
    for _ in range(calls):
        started = time.perf_counter()
        if op == "supports":
            assert backend.supports("host", "decode", "Q8_0") is None
        else:
            result = backend.run_task(spec)
            assert result.results[0].error is None, result.results[0].error
        times.append(time.perf_counter() - started)
    steady = times[1:] if backend.mode == "resident" and len(times) > 1 else times
    return {
        "calls": calls,
        "total_s": round(sum(times), 3),
        "first_call_ms": round(times[0] * 1e3, 2),
        "ms_per_call": round(statistics.mean(steady) * 1e3, 2),
        "median_ms": round(statistics.median(steady) * 1e3, 2),
        "max_ms": round(max(steady) * 1e3, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=50, help="calls per mode and op")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args()
    if args.calls < 2:
        parser.error("--calls must be at least 2")
    spec = task_spec()
    report: dict[str, Any] = {
        "bench": "isolation_overhead",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        },
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "backend": "host",
        "ops": {
            "supports": "no work in the child",
            "run_task": f"{spec.format} {spec.n}x{spec.k}, 3 dispatches",
        },
        "modes": {},
    }
    with tempfile.TemporaryDirectory(prefix="tunebase-isolation-bench-") as artifacts:
        HostBackend(Path(artifacts)).run_task(spec)  # warm the compile cache
        for mode in MODES:
            backend = IsolatedBackend(BackendRef("host", artifacts), timeout_s=120, mode=mode)
            try:
                report["modes"][mode] = {
                    op: time_calls(backend, op, args.calls, spec) for op in report["ops"]
                }
            finally:
                backend.close()
    modes = report["modes"]
    report["saved_ms_per_call"] = {
        op: round(modes["per-call"][op]["ms_per_call"] - modes["resident"][op]["ms_per_call"], 2)
        for op in report["ops"]
    }
    report["speedup"] = {
        op: round(modes["per-call"][op]["ms_per_call"] / modes["resident"][op]["ms_per_call"], 1)
        for op in report["ops"]
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
