"""Prefill GEMM roofline on the H200: tb-prefill's tuned winner per point beside llama.cpp MMQ and torch fp16
(issue 18's constants, with provenance) and beside cuBLAS fp16 measured in the same run.

For every (format, qwen36 shape, M) point it runs one task through the runner (workers/runner.py via the
cuda backend: weights at the format's true bytes in the tb-split layout, the FP32 gguf reference, NaN-filled
outputs, weights rotated past twice the L2, per-dispatch CUPTI time of BOTH kernels of a dispatch: the
activation-quantising prelaunch and the GEMM), over a candidate variant list; the winner is the fastest
variant by median device time among those that pass parity. cuBLAS fp16 is torch.matmul on fp16 weights of
the same shapes in a child process (torch beside the project's pinned wheels does not import), weights
rotated the same way, timed the same way as ours (CUPTI kernel durations through torch.profiler; CUDA events
around each call and around back-to-back calls recorded beside it). TFLOPS count 2*M*N*K; ratios are
reference time / tb-prefill time (> 1: faster).

    python bench/prefill_roofline.py [--formats Q4_0,Q8_0,Q4_K] [--shapes GateUp,QKV] [--m 128,512,2048]
        [--variants V1,V2,...] [--dispatches 8] [--warmup 2] [--jobs 16] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from torch_timing import cupti_per_dispatch, events_back_to_back, events_per_call  # noqa: E402  (imports torch only when called)

SHAPES = {"GateUp": ("Qwen36_FFN_GateUp", 17408, 5120), "QKV": ("Qwen36_Attn_QKVProjection", 12288, 5120)}
FORMATS = ("Q4_0", "Q8_0", "Q4_K")
MS = (128, 512, 2048)

# Issue 18 (filed 2026-11-30): one call on an NVIDIA H200, µs, M = 128 / 512 / 2048.
PROVENANCE = (
    "issue 18: llama.cpp MMQ (ggml d99724f, int8 mma.sync) and torch fp16 matmul (cuBLAS) on dequantised "
    "weights, measured in one call on an NVIDIA H200, 2026-11-30"
)
MMQ_US: dict[tuple[str, str], dict[int, float]] = {
    ("Q4_0", "GateUp"): {128: 135.3, 512: 470.6, 2048: 1760.7},
    ("Q4_0", "QKV"): {128: 102.0, 512: 329.3, 2048: 1258.2},
    ("Q8_0", "GateUp"): {128: 138.5, 512: 466.4, 2048: 1786.0},
    ("Q8_0", "QKV"): {128: 106.0, 512: 329.0, 2048: 1274.3},
    ("Q4_K", "GateUp"): {128: 153.6, 512: 522.4, 2048: 1956.4},
    ("Q4_K", "QKV"): {128: 128.1, 512: 362.4, 2048: 1394.2},
}
TORCH_FP16_US: dict[str, dict[int, float]] = {
    "GateUp": {128: 63.8, 512: 133.6, 2048: 504.2},
    "QKV": {128: 49.0, 512: 101.5, 2048: 346.7},
}

# Candidates chosen from the ptxas report (no local memory, registers) and the wave count of the qwen36
# shapes on 132 SMs (GateUp: 17408 = 17 * 2^10 rows, so power-of-two tiles give 136 * 2^j workgroups, one
# wave plus a sliver unless split deeper): 32x32 / 32x64 / 64x32 warp tiles, split-K 2 / 4 below M = 1024.
CANDIDATES = (
    "N128/M64/W4x2/K4/S3/SK1/MB1/E0",
    "N128/M64/W4x2/K4/S3/SK1/MB2/E0",
    "N128/M128/W4x2/K4/S3/SK1/MB1/E0",
    "N128/M128/W2x4/K4/S3/SK1/MB1/E0",
    "N256/M64/W4x2/K4/S3/SK1/MB1/E0",
    "N64/M128/W2x4/K4/S3/SK1/MB2/E0",
    "N128/M64/W4x2/K4/S3/SK2/MB1/E0",
    "N128/M64/W4x2/K4/S3/SK4/MB1/E0",
    "N128/M64/W4x2/K4/S3/SK2/MB2/E0",
    "N128/M128/W4x2/K4/S3/SK2/MB1/E0",
    "N128/M128/W4x2/K4/S3/SK4/MB1/E0",
    "N64/M64/W2x2/K8/S3/SK2/MB1/E0",
    "N128/M32/W4x1/K4/S4/SK2/MB1/E0",
    # engine 1 (wgmma fp16, weights dequantised once per tile into the A registers): 1 / 2 / 4 warpgroups of
    # 64 weight rows, 64 or 128 tokens; ptxas (sm_90a): 114-180 registers, no local memory
    "N64/M64/W4x1/K4/S3/SK1/MB1/E1",
    "N64/M64/W4x1/K4/S4/SK2/MB1/E1",
    "N64/M128/W4x1/K4/S3/SK1/MB1/E1",
    "N64/M128/W4x1/K4/S4/SK1/MB1/E1",
    "N128/M64/W4x2/K4/S3/SK1/MB1/E1",
    "N128/M128/W4x2/K4/S3/SK1/MB1/E1",
    "N128/M128/W4x2/K4/S4/SK2/MB1/E1",
    "N256/M64/W4x4/K4/S3/SK1/MB1/E1",
    # engine 2 (warp-specialised wgmma: producer warpgroup + mbarrier ring, 1 / 2 / 4 consumer warpgroups of
    # 1 / 2 m64 tiles); NVRTC 13.0.88: 74-240 registers, no local memory, no serialised wgmma
    # (bench/results/nvrtc-census-tb-prefill-E2-2026-12-01.json); all 20 E2: bench/device_k2w.sh
    "N256/M64/W4x4/K4/S3/SK1/MB1/E2",
    "N256/M64/W4x2/K4/S4/SK2/MB1/E2",
    "N128/M128/W4x2/K4/S4/SK1/MB1/E2",
    "N128/M128/W4x1/K4/S4/SK2/MB1/E2",
    # the WIDE tile (4 consumers of m64 x 128 tokens, setmaxnreg 32 / 112): N256/M64's weight bytes per MAC
    # halved (bench/results/nvrtc-census-tb-prefill-WIDE-E3-k2z-2026-12-01.json, the 32 / 112 split: 96
    # registers, no local memory but Q6_K's, which the manifest holds out)
    "N256/M128/W4x4/K4/S3/SK0/MB1/E2",
)


def _reuse_weights_across_m() -> None:
    """The M points of one (format, shape) read the same seeded weights: quantise them once (bench-local).

    gguf's numpy quantiser takes seconds for 89 M weights; the runner rebuilds the problem per task. The
    cached array is only read (uploaded, split into the layout), never written."""
    import functools

    from kernels import reference

    if not hasattr(reference.quantize_random, "cache_info"):
        reference.quantize_random = functools.lru_cache(maxsize=2)(reference.quantize_random)  # type: ignore[method-assign]


def compile_job(job: tuple[str, str, list[str]]) -> dict[str, Any]:
    """NVRTC one format's unit into the shared cache (a child process: no GPU context needed)."""
    artifacts, fmt, names = job
    from kernels.packages.loader import builtin_packages
    from workers.backends.cuda import CudaBackend

    package = builtin_packages()["tb-prefill"]
    t0 = time.monotonic()
    results = CudaBackend(Path(artifacts)).compile(package, fmt, [package.parse(n, "cuda") for n in names])
    return {
        "format": fmt,
        "ok": all(r.ok for _, r in results),
        "seconds": round(time.monotonic() - t0, 1),
        "log": "\n".join(r.log[-2000:] for _, r in results if not r.ok),
    }


def warm_cache(artifacts: Path, jobs: list[tuple[str, list[str]]], workers: int) -> list[dict[str, Any]]:
    with ProcessPoolExecutor(max_workers=max(1, min(workers, len(jobs)))) as pool:
        return list(pool.map(compile_job, [(str(artifacts), fmt, names) for fmt, names in jobs]))


def run_point(
    backend: Any, fmt: str, shape: str, m: int, variants: list[str], dispatches: int, warmup: int
) -> dict:
    from workers.backends.base import TaskSpec

    name, n, k = SHAPES[shape]
    spec = TaskSpec(
        arch="sm_90", phase="prefill", format=fmt, shape=name, n=n, k=k, m=m, variants=tuple(variants),
        min_dispatches=dispatches, max_dispatches=dispatches, warmup=warmup, kernel="tb-prefill",
    )  # fmt: skip
    t0 = time.monotonic()
    result = backend.run_task(spec)
    rows = []
    for r in result.results:
        res = result.artifact.resources.get(r.symbol, {})
        row: dict[str, Any] = {
            "variant": r.variant, "error": (r.error or "")[:300] or None,
            "parity": None if r.parity is None else {
                "passed": r.parity.passed, "cosine": r.parity.cosine, "rel_l2": r.parity.rel_l2,
                "sampled_rows": r.parity.sampled_rows,
            },
            "n": len(r.dispatches), "clock": res.get("device_clock"),
            "registers": res.get("registers"), "local_bytes": res.get("local_bytes"),
            "blocks_per_sm": res.get("blocks_per_sm"), "shared_bytes": res.get("shared_dynamic_bytes"),
        }  # fmt: skip
        if r.dispatches:
            device = [d.device_ns / 1e3 for d in r.dispatches]
            row["median_us"] = statistics.median(device)
            row["min_us"] = min(device)
            row["event_median_us"] = statistics.median([(d.event_ns or 0) / 1e3 for d in r.dispatches])
        rows.append(row)
    passing = [r for r in rows if r.get("median_us") and r["parity"] and r["parity"]["passed"]]
    passing.sort(key=lambda r: r["median_us"])
    flops = 2.0 * m * n * k
    point: dict[str, Any] = {
        "format": fmt, "shape": name, "short": shape, "n": n, "k": k, "m": m,
        "weight_copies": result.weight_copies, "seconds": round(time.monotonic() - t0, 1), "variants": rows,
    }  # fmt: skip
    if passing:
        win = passing[0]
        point["winner"] = win["variant"]
        point["median_us"] = win["median_us"]
        point["tflops"] = flops / (win["median_us"] * 1e-6) / 1e12
        point["runner_up"] = passing[1]["variant"] if len(passing) > 1 else None
        # the fastest passing variant of each engine (E0 mma.sync int8, E1 wgmma fp16, E2 warp-specialised
        # wgmma fp16, E3 E2 in 2-CTA clusters): what each path reaches
        best: dict[str, float] = {}
        for r in passing:  # sorted: the first of each engine is its fastest
            best.setdefault(r["variant"].rsplit("/", 1)[-1], r["median_us"])
        point["best_by_engine"] = best
    return point


def cublas_fp16(
    points: list[tuple[str, int, int, int]], l2_bytes: int, dispatches: int
) -> list[dict[str, Any]]:
    """torch.matmul(x fp16 [M,K], W^T fp16 [K,N]), weights rotated past twice the L2, timed three ways.

    ``median_us`` is what tb-prefill's times are: the CUPTI device time of each dispatch's kernels (through
    torch.profiler, which records CUPTI kernel activity), the median over dispatches. Beside it, for the
    record: ``events_us``, CUDA events around each host call, which also counts the GPU idling while the host
    enqueues the matmul (this bench's method until 2026-12-01: at M = 128 it read 20-40% slower than the
    kernels ran), and ``stream_us``, events around ``dispatches`` back-to-back calls / dispatches.
    """
    import torch

    out = []
    by_shape: dict[tuple[str, int, int], list[int]] = {}
    for shape, n, k, m in points:
        by_shape.setdefault((shape, n, k), []).append(m)
    for (shape, n, k), ms in by_shape.items():
        copies = max(1, min(16, 2 * l2_bytes // (2 * n * k) + 1))
        ws = [torch.randn(n, k, device="cuda", dtype=torch.float16) for _ in range(copies)]
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.float16)
            for i in range(5):  # warm-up: cuBLAS heuristics, workspace, clocks
                torch.matmul(x, ws[i % copies].t())
            torch.cuda.synchronize()
            call = functools.partial(_matmul_rotated, torch, x, ws)
            row: dict[str, Any] = {
                "shape": shape, "n": n, "k": k, "m": m, "copies": copies,
                "events_us": statistics.median(events_per_call(call, dispatches)),
                "stream_us": events_back_to_back(call, dispatches),
            }  # fmt: skip
            try:
                row.update(cupti_per_dispatch(call, dispatches))
                row["median_us"], row["method"] = row["cupti_us"], "CUPTI kernel activity (torch.profiler)"
            except Exception as error:  # the profiler missing on an image: say so, compare on events
                row["cupti_error"] = f"{type(error).__name__}: {error}"
                row["median_us"], row["method"] = row["events_us"], "CUDA events around each call"
            row["tflops"] = 2.0 * m * n * k / (row["median_us"] * 1e-6) / 1e12
            out.append(row)
        del ws
        torch.cuda.empty_cache()
    return out


def _matmul_rotated(torch: Any, x: Any, ws: list[Any], i: int) -> Any:
    return torch.matmul(x, ws[i % len(ws)].t())


def cublas_in_child(points: list[tuple[str, int, int, int]], l2_bytes: int, dispatches: int) -> list[dict]:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    payload = json.dumps({"points": points, "l2": l2_bytes, "dispatches": dispatches})
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--cublas-child", payload],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        return [{"error": proc.stderr[-2000:]}]
    return list(json.loads(proc.stdout.strip().splitlines()[-1]))


def compare(points: list[dict[str, Any]], cublas: list[dict[str, Any]]) -> dict[str, Any]:
    """Ratios per point (reference time / ours) and the issue-18 targets."""
    by_key = {(c["shape"], c["m"]): c for c in cublas if "median_us" in c}
    mmq_ok, cublas128, cublas2048 = [], [], []
    for p in points:
        if "median_us" not in p:
            continue
        ours = p["median_us"]
        mmq = MMQ_US.get((p["format"], p["short"]), {}).get(p["m"])
        torch_c = TORCH_FP16_US.get(p["short"], {}).get(p["m"])
        cub = by_key.get((p["shape"], p["m"]))
        p["mmq_us"], p["torch_fp16_issue18_us"] = mmq, torch_c
        p["vs_mmq"] = mmq / ours if mmq else None
        p["vs_torch_fp16_issue18"] = torch_c / ours if torch_c else None
        p["cublas_fp16_us"] = cub["median_us"] if cub else None
        p["cublas_tflops"] = cub["tflops"] if cub else None
        p["vs_cublas"] = cub["median_us"] / ours if cub else None
        if mmq:
            mmq_ok.append(p["vs_mmq"] >= 1.5)
        if cub and p["m"] == 128:
            cublas128.append(p["vs_cublas"] > 1.0)
        if cub and p["m"] == 2048:
            cublas2048.append(ours <= 1.25 * cub["median_us"])
    return {
        "mmq_points": len(mmq_ok), "mmq_1p5x_met": sum(mmq_ok),
        "cublas_m128_points": len(cublas128), "cublas_m128_faster": sum(cublas128),
        "cublas_m2048_points": len(cublas2048), "cublas_m2048_within_1p25x": sum(cublas2048),
        "targets": "issue 18: >= 1.5x llama.cpp MMQ on all 18 points; vs cuBLAS fp16 (same run) faster at "
        "M=128 and within 1.25x at M=2048",
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--m", default=",".join(map(str, MS)))
    parser.add_argument("--variants", default=",".join(CANDIDATES))
    parser.add_argument("--dispatches", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 4)
    parser.add_argument("--no-cublas", action="store_true")
    parser.add_argument("--artifacts", type=Path, help="NVRTC cache folder (default: a temporary one)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--cublas-child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.cublas_child:
        job = json.loads(args.cublas_child)
        print(json.dumps(cublas_fp16([tuple(p) for p in job["points"]], job["l2"], job["dispatches"])))
        return 0
    formats = [f for f in args.formats.split(",") if f]
    shapes = [s for s in args.shapes.split(",") if s]
    ms = [int(v) for v in args.m.split(",") if v]
    variants = [v for v in args.variants.split(",") if v]
    started = dt.datetime.now(dt.UTC)

    from kernels.packages.loader import builtin_packages
    from workers.backends.cuda import CudaBackend
    from workers.harness import cuda_driver as cd

    package = builtin_packages()["tb-prefill"]
    for name in variants:
        package.parse(name, "cuda")  # a typo fails here, not after the compiles
    _reuse_weights_across_m()
    tmp = tempfile.TemporaryDirectory(prefix="tb-prefill-bench-")
    artifacts = args.artifacts or Path(tmp.name)
    compiles = warm_cache(artifacts, [(f, variants) for f in formats], args.jobs)
    backend = CudaBackend(artifacts)
    device = backend.detect()
    if device is None:
        raise SystemExit("no sm_90 GPU detected (cuda backend)")
    points = []
    for fmt in formats:
        for shape in shapes:
            for m in ms:
                # split-K exists for the waves of small M; at M >= 1024 the grid is already many waves deep
                # (E2's stream-K, SK0, is not a split: it evens out the last wave at any M, so it stays)
                deep = [v for v in variants if "/SK1/" in v or "/SK0/" in v]
                names = variants if m < 1024 else deep or variants
                point = run_point(backend, fmt, shape, m, names, args.dispatches, args.warmup)
                points.append(point)
                if args.out:  # what a time-boxed run had measured survives its timeout
                    partial = {"partial": True, "candidates": variants, "points": points}
                    args.out.write_text(json.dumps(partial, indent=1, default=str))
                us, tf = point.get("median_us", float("nan")), point.get("tflops", float("nan"))
                winner = point.get("winner", "-")
                secs = point["seconds"]
                print(
                    f"{fmt:5} {shape:7} M{m:<5} {winner:26} {us:9.1f} us {tf:6.1f} TFLOPS ({secs} s)",
                    flush=True,
                )
    ctx = cd.Context.open(0)
    l2 = ctx.attribute("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE")
    wanted = sorted({(p["shape"], p["n"], p["k"], p["m"]) for p in points})
    cublas = [] if args.no_cublas else cublas_in_child(wanted, l2, args.dispatches)
    summary = compare(points, cublas)
    result = {
        "bench": "prefill_roofline",
        "date": started.isoformat(timespec="seconds"),
        "command": "python "
        + " ".join(["bench/prefill_roofline.py", *(argv if argv is not None else sys.argv[1:])]),
        "device": {
            "name": device.name,
            "sms": device.compute_units,
            "driver": device.driver_version,
            "runtime": device.runtime_version,
            "uuid": device.uuid,
            "l2_bytes": l2,
        },
        "kernel": {"package": package.name, "version": package.version, "layout": package.manifest.weights},
        "references": {
            "provenance": PROVENANCE,
            "mmq_us": {f"{f}/{s}": v for (f, s), v in MMQ_US.items()},
            "torch_fp16_us": TORCH_FP16_US,
        },
        "compiles": compiles,
        "candidates": variants,
        "summary": summary,
        "points": points,
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
    print(json.dumps(result["summary"]))
    head = f"{'point':28} {'winner':29} {'us':>8} {'TFLOPS':>7} {'xMMQ':>6} {'xcuBLAS':>7}"
    print(f"{head} {'E0us':>7} {'E1us':>7} {'E2us':>7} {'E3us':>7}")
    for p in result["points"]:
        label = f"{p['format']} {p['short']} M{p['m']}"
        vs_mmq = f"{p['vs_mmq']:.2f}" if p.get("vs_mmq") else "-"
        vs_cub = f"{p['vs_cublas']:.2f}" if p.get("vs_cublas") else "-"
        us = f"{p['median_us']:.1f}" if "median_us" in p else "fail"
        tf = f"{p['tflops']:.0f}" if "tflops" in p else "-"
        best = {e: f"{v:.1f}" for e, v in p.get("best_by_engine", {}).items()}
        print(
            f"{label:28} {p.get('winner', '-'):29} {us:>8} {tf:>7} {vs_mmq:>6} {vs_cub:>7}"
            + "".join(f" {best.get(e, '-'):>7}" for e in ("E0", "E1", "E2", "E3"))
        )
    for c in result["cublas_fp16"]:  # the three timings of cuBLAS, side by side
        if "median_us" in c:
            cupti = f"{c['cupti_us']:.1f}" if "cupti_us" in c else c.get("cupti_error", "-")[:40]
            print(
                f"cuBLAS {c['shape'][:20]:20} M{c['m']:<5} cupti {cupti:>7} events {c['events_us']:.1f}"
                f" stream {c['stream_us']:.1f} kernels/call {c.get('kernels_per_dispatch', '-')}"
            )


if __name__ == "__main__":
    raise SystemExit(main())
