"""Decode GEMV roofline on the H200: the tuned winner per point against the measured copy bandwidth.

For formats Q4_0, Q8_0, Q4_K, IQ4_XS, every qwen36 shape and M = 1..4 it runs a
sweep through the service (SQLite database, migrations, sweep submission, the
embedded worker's task loop with the cuda backend, winner selection), then for
each winner reports

    achieved bandwidth = bytes the kernel must read / median device time (CUPTI)

against a device-to-device copy measured in the same run (cuMemcpyDtoD of a large
buffer; bytes read + written / time), and against fp16 weights through cuBLAS
(torch.matmul) on the same shapes. Prints JSON (and writes it with --out).

    python bench/decode_roofline.py [--formats Q4_0,...] [--m 1,2,3,4] [--dispatches 8] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

FORMATS = ("Q4_0", "Q8_0", "Q4_K", "IQ4_XS")
COPY_BYTES = 4 << 30
LM_HEAD = "Qwen36_LM_Head"


def kernel_bytes(format_name: str, n: int, k: int, m: int) -> int:
    """Bytes the decode kernel must move: packed weights (qs + scales [+ mins]), x read, y written."""
    from kernels.formats.packing import format_kind

    kind = format_kind(format_name)
    groups = k // kind.group
    weights = n * k + 2 * n * groups * (2 if kind.asymmetric else 1)
    return weights + 4 * m * k + 4 * m * n


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


def cublas_fp16(shapes: list[dict[str, Any]], ms: list[int], l2_bytes: int) -> list[dict[str, Any]]:
    """torch.matmul(x fp16 [M,K], W^T fp16 [K,N]) per shape and M, weights rotated beyond 2x L2."""
    import torch

    out = []
    for shape in shapes:
        n, k = shape["n"], shape["k"]
        wbytes = 2 * n * k
        copies = max(1, min(64, 2 * l2_bytes // wbytes + 1))
        ws = [torch.randn(n, k, device="cuda", dtype=torch.float16) for _ in range(copies)]
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.float16)
            times = []
            for i in range(23):
                start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                w = ws[i % copies]
                start.record()
                torch.matmul(x, w.t())
                stop.record()
                stop.synchronize()
                if i >= 3:
                    times.append(start.elapsed_time(stop) * 1e6)
            med = statistics.median(times)
            moved = wbytes + 2 * m * k + 2 * m * n
            out.append(
                {"shape": shape["name"], "n": n, "k": k, "m": m, "median_us": med / 1e3, "bytes": moved,
                 "bandwidth_gbs": moved / med}
            )  # fmt: skip
        del ws
        torch.cuda.empty_cache()
    return out


def cublas_in_child(shapes: list[dict[str, Any]], ms: list[int], l2_bytes: int) -> list[dict[str, Any]]:
    """Run ``cublas_fp16`` in a child process with a clean PYTHONPATH.

    Why: on the device machine the project's own pinned wheels sit on PYTHONPATH, and torch fails
    to import beside some of them; the child needs nothing but torch.
    """
    import os
    import subprocess

    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    payload = json.dumps({"shapes": shapes, "ms": ms, "l2": l2_bytes})
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--cublas-child", payload],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        return [{"error": proc.stderr[-2000:]}]
    return list(json.loads(proc.stdout.strip().splitlines()[-1]))


def run_sweep(
    home: Path, formats: list[str], ms: list[int], dispatches: int, warmup: int, package: Path | None = None
) -> dict[str, Any]:
    """The service path: migrate SQLite, (store the package,) submit the sweep, run it embedded."""
    from sqlalchemy import select

    from service.config import Settings
    from service.db.migrate import upgrade
    from service.db.models import Measurement, Task, Winner
    from service.db.session import session_factory
    from service.sweeps.service import submit_sweep
    from service.sweeps.spec import SweepSpec
    from workers.backends.registry import create_backend
    from workers.embedded import run_until_idle

    settings = Settings(home=home, database_url=f"sqlite:///{home / 'tunebase.sqlite3'}")
    upgrade(settings.resolved_database_url)
    factory = session_factory(settings.resolved_database_url)
    backend = create_backend("cuda", settings.resolved_artifact_dir)
    device = backend.detect()
    if device is None:
        raise SystemExit("no sm_90 GPU detected (cuda backend)")
    kernel = None
    if package is not None:
        from kernels.packages.archive import read_folder
        from service.kernel_store import store_package

        with factory.begin() as session:
            kernel = store_package(session, read_folder(package), "bench").package.name
    spec = SweepSpec(
        arch="sm_90", phase="decode", kernel=kernel, formats=formats, profile="qwen36", m=ms,
        min_dispatches=dispatches, max_dispatches=dispatches, warmup=warmup,
        labels={"bench": "decode_roofline"},
    )  # fmt: skip
    with factory.begin() as session:
        sweep, _ = submit_sweep(session, spec, None, "bench")
        sweep_id = sweep.id
    t0 = time.monotonic()
    ran = run_until_idle(factory, backend, ["sm_90"])
    elapsed = time.monotonic() - t0
    rows = []
    with factory() as session:
        failed = session.scalars(select(Task).where(Task.sweep_id == sweep_id, Task.state != "done")).all()
        for winner in session.scalars(select(Winner).where(Winner.arch == "sm_90")).all():
            meas = session.get(Measurement, winner.measurement_id)
            assert meas is not None
            point = session.scalars(
                select(Measurement).where(
                    Measurement.sweep_id == sweep_id, Measurement.format == winner.format,
                    Measurement.m == winner.m, Measurement.n == winner.n, Measurement.k == winner.k,
                )
            ).all()  # fmt: skip
            rows.append(
                {
                    "format": winner.format, "shape": winner.shape, "n": winner.n, "k": winner.k,
                    "m": winner.m, "variant": winner.variant, "median_us": winner.median_us,
                    "decided": winner.decided,
                    "runner_up": winner.runner_up, "margin": winner.margin,
                    "wall_median_us": meas.wall_median_us, "cv": meas.cv, "n_dispatches": meas.n_dispatches,
                    "parity_pass": meas.parity_pass, "rel_l2": meas.rel_l2,
                    "variants_failing_parity": sorted(p.variant.name for p in point if not p.parity_pass),
                }
            )  # fmt: skip
        resources = _winner_resources(session, rows)
        errors = [
            {"task": t.id, "format": t.format, "shape": t.shape, "m": t.m, "error": (t.error or "")[:500]}
            for t in failed
        ]
    return {
        "sweep_id": sweep_id, "tasks_run": ran, "seconds": round(elapsed, 1), "winners": rows,
        "failed_tasks": errors, "resources": resources,
        "device": {"name": device.name, "sms": device.compute_units, "driver": device.driver_version,
                   "runtime": device.runtime_version, "uuid": device.uuid},
    }  # fmt: skip


def _winner_resources(session: Any, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Resource figures (registers, occupancy, SASS census) of every winning symbol, once per symbol."""
    from sqlalchemy import select

    from service.db.models import Artifact

    wanted = {
        f"tb_decode_kb{r['variant'].split('/')[0][2:]}_tw{r['variant'].split('/')[1][2:]}" for r in rows
    }
    out: dict[str, Any] = {}
    for artifact in session.scalars(select(Artifact).where(Artifact.arch == "sm_90")).all():
        for symbol, res in (artifact.resources or {}).items():
            if symbol in wanted:
                out[f"{artifact.format}:{symbol}"] = res
    return out


def summarize(sweep: dict[str, Any], copy: dict[str, Any]) -> dict[str, Any]:
    copy_bw = copy["bandwidth_gbs"]
    for row in sweep["winners"]:
        moved = kernel_bytes(row["format"], row["n"], row["k"], row["m"])
        row["bytes"] = moved
        row["bandwidth_gbs"] = moved / (row["median_us"] * 1e3)
        row["fraction_of_copy"] = row["bandwidth_gbs"] / copy_bw
    by_m1: dict[str, list[float]] = {}
    for row in sweep["winners"]:
        if row["m"] == 1:
            by_m1.setdefault(row["format"], []).append(row["fraction_of_copy"])
    lm = [r for r in sweep["winners"] if r["format"] == "Q4_0" and r["shape"] == LM_HEAD and r["m"] == 1]
    return {
        "q4_0_lm_head_m1_fraction": lm[0]["fraction_of_copy"] if lm else None,
        "q4_0_lm_head_m1_target": 0.85,
        "median_fraction_m1": {f: statistics.median(v) for f, v in by_m1.items()},
        "median_fraction_m1_target": 0.75,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--m", default="1,2,3,4")
    parser.add_argument("--dispatches", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--no-cublas", action="store_true")
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--package", type=Path, help="a decode kernel package folder to sweep (default: built-in tb-decode)"
    )
    parser.add_argument("--cublas-child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.cublas_child:
        job = json.loads(args.cublas_child)
        print(json.dumps(cublas_fp16(job["shapes"], job["ms"], job["l2"])))
        return 0
    formats = [f for f in args.formats.split(",") if f]
    ms = [int(v) for v in args.m.split(",") if v]

    started = dt.datetime.now(dt.UTC)
    with tempfile.TemporaryDirectory(prefix="tunebase-bench-") as tmp:
        sweep = run_sweep(Path(tmp), formats, ms, args.dispatches, args.warmup, args.package)
    if args.out:  # keep the sweep even if a later stage fails
        args.out.with_suffix(".sweep.json").write_text(json.dumps(sweep, indent=1, default=str))
    from workers.harness import cuda_driver as cd

    ctx = cd.Context.open(0)
    copy = copy_bandwidth()
    l2 = ctx.attribute("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE")
    shapes = _qwen36_shapes()
    cublas = [] if args.no_cublas else cublas_in_child(shapes, ms, l2)
    for row in cublas:
        if "bandwidth_gbs" in row:
            row["fraction_of_copy"] = row["bandwidth_gbs"] / copy["bandwidth_gbs"]
    result = {
        "bench": "decode_roofline",
        "date": started.isoformat(timespec="seconds"),
        "command": "python "
        + " ".join(["bench/decode_roofline.py", *(argv if argv is not None else sys.argv[1:])]),
        "device": sweep["device"],
        "kernel_source": str(args.source or "kernels/sources/hip/decode.hip"),
        "l2_bytes": l2,
        "copy": copy,
        "summary": summarize(sweep, copy),
        "sweep": {k: v for k, v in sweep.items() if k != "device"},
        "cublas_fp16": cublas,
        "seconds_total": round((dt.datetime.now(dt.UTC) - started).total_seconds(), 1),
    }
    text = json.dumps(result, indent=1, default=str)
    if args.out:
        args.out.write_text(text)
    else:
        print(text)
    _print_table(result)
    return 0


def _print_table(result: dict[str, Any]) -> None:
    """A short table last (the device reply keeps only the end of the output)."""
    print(f"copy {result['copy']['bandwidth_gbs']:.0f} GB/s; summary {json.dumps(result['summary'])}")
    print(f"failed tasks: {len(result['sweep']['failed_tasks'])}; sweep {result['sweep']['seconds']} s")
    for row in sorted(result["sweep"]["winners"], key=lambda r: (r["m"], r["format"], r["shape"])):
        if row["m"] == 1:
            print(
                f"{row['format']:7} {row['shape']:30} M{row['m']} {row['variant']:9} "
                f"{row['median_us']:9.2f} us {row['bandwidth_gbs']:7.0f} GB/s "
                f"{100 * row['fraction_of_copy']:5.1f}%"
            )


def _qwen36_shapes() -> list[dict[str, Any]]:
    from service.sweeps.spec import SweepSpec

    spec = SweepSpec(arch="sm_90", phase="decode", formats=["Q4_0"], profile="qwen36")
    return [{"name": s.name, "n": s.n, "k": s.k} for s in spec.resolved_shapes()]


if __name__ == "__main__":
    raise SystemExit(main())
