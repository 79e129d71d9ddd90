"""MXFP4 GEMM on the H200: tb-mxfp4-gemm tuned per point (through the runner) against torch bf16 matmul on
the dequantised weights, measured side by side in one run.

Points: M = N = K = 8192 and qwen36 shapes x M buckets. Per point the runner (workers/runner.py) runs every
CUDA variant of the package on gguf-quantized MXFP4 weights: prepare kernel, parity against the gguf
reference, interleaved dispatches timed by CUPTI, weights rotated past twice the L2. The fastest variant
that passes parity is the tuned one. Then a child process with nothing but torch (the project's pinned
wheels break torch's import there) dequantises the same GGUF blocks on the GPU, checks them against gguf's
own dequantisation, and times torch.matmul(x_bf16, W_bf16^T) with CUDA events, and the same after the
fp32 -> bf16 conversion of x (the package reads fp32 x, as the runner hands it). TFLOPS = 2 M N K / median
time; ratio = ours / torch. Prints JSON, writes it with --out after every point.

    python bench/mxfp4_gemm.py [--shapes square,Qwen36_FFN_GateUp,...] [--m 128,512,2048]
                               [--dispatches 5] [--warmup 2] [--artifacts DIR] [--out FILE] [--dry-run]
"""

from __future__ import annotations

import argparse
import datetime as dt
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

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from torch_timing import cupti_per_dispatch  # noqa: E402  (imports torch only when called)

PACKAGE_NAME = "tb-mxfp4-gemm"
SQUARE = {"name": "square", "n": 8192, "k": 8192}
DEFAULT_SHAPES = ("square", "Qwen36_Attn_QKVProjection", "Qwen36_FFN_GateUp", "Qwen36_FFN_DownProjection",
                  "Qwen36_GDN_OutputProjection")  # fmt: skip
DEFAULT_M = (128, 512, 2048)
SEED = 0


def shape_table() -> dict[str, dict[str, Any]]:
    from kernels.profiles import profile_shapes

    table = {s.name: {"name": s.name, "n": s.n, "k": s.k} for s in profile_shapes("qwen36")}
    return {"square": dict(SQUARE), **table}


def points(shapes: list[str], ms: list[int]) -> list[dict[str, Any]]:
    """(shape, M) points; the square shape runs at M = 8192 only."""
    table = shape_table()
    out = []
    for name in shapes:
        shape = table[name]
        for m in [shape["k"]] if name == "square" else ms:
            out.append({"shape": name, "n": shape["n"], "k": shape["k"], "m": m})
    return out


def _quantize(job: tuple[int, int]) -> tuple[tuple[int, int], np.ndarray]:
    from kernels.formats.registry import get_format
    from kernels.reference import quantize_random

    n, k = job
    return job, quantize_random(get_format("MXFP4"), n, k, SEED)


def quantize_all(shapes: set[tuple[int, int]]) -> dict[tuple[int, int], np.ndarray]:
    """gguf-quantized weights of every shape, one process per shape (the runner would redo it per M)."""
    workers = max(1, min(len(shapes), os.cpu_count() or 1))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return dict(pool.map(_quantize, sorted(shapes)))


def install_weight_cache(cache: dict[tuple[int, int], np.ndarray]) -> None:
    """build_problem takes its weights from ``cache``: the same bytes quantize_random returns for the
    shape and seed, computed once instead of once per M bucket."""
    import kernels.reference as ref

    original = ref.quantize_random

    def cached(fmt: Any, n: int, k: int, seed: int) -> np.ndarray:
        if fmt.name == "MXFP4" and seed == SEED and (n, k) in cache:
            return cache[(n, k)]
        return original(fmt, n, k, seed)

    ref.quantize_random = cached  # type: ignore[assignment]


def run_point(
    backend: Any, package: Any, point: dict[str, Any], dispatches: int, warmup: int, arch: str = "sm_90"
) -> dict[str, Any]:
    """Every variant of the package at one point through the runner; the fastest passing one is tuned."""
    from kernels.arches import get_arch
    from workers.backends.base import TaskSpec

    variants = tuple(v.name for v in package.space(get_arch(arch).backend))
    spec = TaskSpec(
        arch=arch, phase="prefill", format="MXFP4", shape=point["shape"], n=point["n"], k=point["k"],
        m=point["m"], variants=variants, min_dispatches=dispatches, max_dispatches=dispatches, warmup=warmup,
        seed=SEED, kernel=PACKAGE_NAME,
    )  # fmt: skip
    t0 = time.monotonic()
    result = backend.run_task(spec)
    rows: dict[str, dict[str, Any]] = {}
    for r in result.results:
        times = [d.device_ns for d in r.dispatches]
        rows[r.variant] = {
            "median_us": statistics.median(times) / 1e3 if times else None,
            "parity_pass": bool(r.parity and r.parity.passed),
            "rel_l2": r.parity.rel_l2 if r.parity else None,
            "error": (r.error or "")[:300] or None,
        }
    passing = {v: row for v, row in rows.items() if row["parity_pass"] and row["median_us"]}
    flops = 2.0 * point["m"] * point["n"] * point["k"]
    # the format's true bytes (DESIGN §10): 4.25-bit weights, fp32 x read, fp32 y written
    true_bytes = (
        point["n"] * point["k"] * 17 // 32 + 4 * point["m"] * point["k"] + 4 * point["m"] * point["n"]
    )
    out: dict[str, Any] = {
        **point,
        "seconds": round(time.monotonic() - t0, 1),
        "weight_copies": result.weight_copies,
        "variants": rows,
        "variants_passing": len(passing),
        "variants_total": len(rows),
    }
    if passing:
        best = min(passing, key=lambda v: passing[v]["median_us"])
        us = passing[best]["median_us"]
        symbol = next(r.symbol for r in result.results if r.variant == best)
        res = result.artifact.resources.get(symbol, {})
        keep = ("registers", "shared_dynamic_bytes", "occupancy", "limiter", "local_bytes", "device_clock")
        out.update(
            tuned_variant=best,
            tuned_us=us,
            tuned_tflops=flops / (us * 1e6),
            tuned_rel_l2=passing[best]["rel_l2"],
            tuned_gbs=true_bytes / (us * 1e3),
            true_bytes=true_bytes,
            tuned_resources={key: res.get(key) for key in keep},
        )
    return out


# ---- torch, in a child process with a clean PYTHONPATH ---------------------------------------------


def torch_child(job: dict[str, Any]) -> list[dict[str, Any]]:
    """Dequantise each shape's GGUF blocks on the GPU, check against gguf's rows, time bf16 matmuls."""
    import torch

    grid = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    lut = torch.tensor(grid + [-v for v in grid], device="cuda")  # E2M1 code -> value
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    folder = Path(job["folder"])
    results = []
    weights: dict[tuple[int, int], list[Any]] = {}
    checked_rows = 0
    for point in job["points"]:
        n, k, m = point["n"], point["k"], point["m"]
        if (n, k) not in weights:
            weights.clear()
            torch.cuda.empty_cache()
            blocks = torch.from_numpy(np.load(folder / f"{n}x{k}.npy")).cuda().view(n, k // 32, 17)
            e = blocks[..., 0].to(torch.int32)
            qs = blocks[..., 1:]
            codes = torch.cat([qs & 0x0F, qs >> 4], dim=-1).long()  # weight j, then j + 16
            bits = torch.where(e > 0, e << 23, torch.full_like(e, 0x00400000))  # E8M0 -> float bits
            w32 = lut[codes] * bits.view(torch.float32)[..., None]
            w32 = w32.reshape(n, k)
            gguf_rows = torch.from_numpy(np.load(folder / f"{n}x{k}.rows.npy")).cuda()
            checked_rows = int(gguf_rows.shape[0])
            if not torch.equal(w32[:checked_rows], gguf_rows):
                raise SystemExit(f"{n}x{k}: torch dequantisation differs from gguf's")
            w = w32.to(torch.bfloat16)
            del w32, codes, qs, e, bits, blocks
            copies = max(1, min(16, 2 * l2 // (2 * n * k) + 1))  # rotate past twice the L2, like the runner
            weights[(n, k)] = [w] + [w.clone() for _ in range(copies - 1)]
        ws = weights[(n, k)]
        x32 = torch.randn(m, k, device="cuda", dtype=torch.float32)
        xb = x32.to(torch.bfloat16)

        matmul_us = _timed(torch, ws, lambda w_i, xb=xb: torch.matmul(xb, w_i.t()))
        cast_us = _timed(torch, ws, lambda w_i, x32=x32: torch.matmul(x32.to(torch.bfloat16), w_i.t()))
        flops = 2.0 * m * n * k
        results.append(
            {
                **point,
                "torch_bf16_us": matmul_us,
                "torch_bf16_tflops": flops / (matmul_us * 1e6),
                "torch_cast_matmul_us": cast_us,
                "torch_cast_matmul_tflops": flops / (cast_us * 1e6),
                "weight_copies": len(ws),
                "dequant_checked_rows": checked_rows,
            }
        )
    results.append(
        {"torch": torch.__version__, "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(0)}
    )
    return results


def _timed(torch: Any, ws: list[Any], fn: Any, reps: int = 10, warm: int = 3) -> float:
    """Median CUPTI kernel time (us) of fn(weight copy), the copies taken in turn (bench/torch_timing.py: CUDA
    events around each call, this bench's method until 2026-12-01, also counted the host's enqueue time)."""
    for i in range(warm):
        fn(ws[i % len(ws)])
    torch.cuda.synchronize()
    return float(cupti_per_dispatch(lambda i: fn(ws[i % len(ws)]), reps)["cupti_us"])


def run_torch(points_: list[dict[str, Any]], folder: Path, timeout: float) -> list[dict[str, Any]]:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    payload = json.dumps({"points": points_, "folder": str(folder)})
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--torch-child", payload],
        capture_output=True, text=True, timeout=timeout, env=env, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        return [{"error": proc.stderr[-3000:]}]
    return list(json.loads(proc.stdout.strip().splitlines()[-1]))


# ---- main -------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shapes", default=",".join(DEFAULT_SHAPES))
    parser.add_argument("--m", default=",".join(map(str, DEFAULT_M)))
    parser.add_argument("--dispatches", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--artifacts", type=Path, help="NVRTC cache folder (share it with the GPU tests)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--torch-timeout", type=float, default=240.0)
    parser.add_argument("--dry-run", action="store_true", help="list the points and exit")
    parser.add_argument("--torch-child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.torch_child:
        return args
    table = shape_table()
    unknown = [s for s in args.shapes.split(",") if s not in table]
    if unknown:
        parser.exit(
            2, f"mxfp4_gemm: --shapes: unknown shape(s) {', '.join(unknown)}; known: {', '.join(table)}\n"
        )
    try:
        args.m_list = [int(v) for v in args.m.split(",")]
    except ValueError:
        parser.exit(2, f"mxfp4_gemm: --m: not a comma-separated list of integers: {args.m!r}\n")
    if any(m < 1 for m in args.m_list) or args.dispatches < 1 or args.warmup < 0:
        parser.exit(2, "mxfp4_gemm: --m values and --dispatches must be positive, --warmup >= 0\n")
    args.shape_list = args.shapes.split(",")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.torch_child:
        print(json.dumps(torch_child(json.loads(args.torch_child))))
        return 0
    todo = points(args.shape_list, args.m_list)
    if args.dry_run:
        print(json.dumps(todo))
        return 0

    from gguf import GGMLQuantizationType, quants

    from kernels.packages.loader import builtin_packages
    from workers.backends.cuda import CudaBackend

    package = builtin_packages()[PACKAGE_NAME]
    t0 = time.monotonic()
    cache = quantize_all({(p["n"], p["k"]) for p in todo})  # before any CUDA context: the pool forks
    quantize_seconds = round(time.monotonic() - t0, 1)
    artifacts = args.artifacts or Path(tempfile.mkdtemp(prefix="mxfp4-artifacts-"))
    backend = CudaBackend(artifacts)
    device = backend.detect()
    if device is None:
        raise SystemExit("no sm_90 GPU detected (cuda backend)")
    report: dict[str, Any] = {
        "bench": "mxfp4_gemm",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": "python bench/mxfp4_gemm.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "device": {
            "name": device.name,
            "sms": device.compute_units,
            "driver": device.driver_version,
            "runtime": device.runtime_version,
            "uuid": device.uuid,
        },
        "package": {
            "name": package.name,
            "version": package.version,
            "cuda_variants": len(package.space("cuda")),
        },
        "method": {
            "ours": "runner: every cuda variant interleaved, CUPTI device time, median of --dispatches after "
            "--warmup, weights rotated past 2x L2, parity vs the gguf reference; the fastest passing variant",
            "torch": "torch.matmul(x bf16, W bf16^T), W = the same GGUF blocks dequantised on the GPU (rows "
            "checked equal to gguf's), CUPTI kernel durations per call (torch.profiler, "
            "bench/torch_timing.py), median of 10 after 3 warm-up",
            "tflops": "2 M N K / median time",
        },
        "points": [],
    }

    def save() -> None:
        text = json.dumps(report, indent=1)
        if args.out:
            args.out.write_text(text)

    install_weight_cache(cache)
    folder = Path(tempfile.mkdtemp(prefix="mxfp4-blocks-"))
    for (n, k), blocks in cache.items():
        np.save(folder / f"{n}x{k}.npy", blocks)
        np.save(folder / f"{n}x{k}.rows.npy", quants.dequantize(blocks[:8], GGMLQuantizationType.MXFP4))
    report["quantize_seconds"] = quantize_seconds

    torch_rows = run_torch(todo, folder, args.torch_timeout)
    report["torch"] = torch_rows[-1] if torch_rows and "torch" in torch_rows[-1] else torch_rows
    by_point = {(r["shape"], r["m"]): r for r in torch_rows if "shape" in r}
    save()
    for point in todo:
        try:
            row = run_point(backend, package, point, args.dispatches, args.warmup)
        except Exception as error:  # one broken point must not lose the others
            message = f"{type(error).__name__}: {error}"[:1000]
            row = {**point, "error": message, "variants_passing": 0, "variants_total": 0}
        theirs = by_point.get((point["shape"], point["m"]))
        if theirs is not None:
            for key in (
                "torch_bf16_us",
                "torch_bf16_tflops",
                "torch_cast_matmul_us",
                "torch_cast_matmul_tflops",
            ):
                row[key] = theirs[key]
            if "tuned_tflops" in row:
                row["ratio_vs_torch_bf16"] = row["tuned_tflops"] / row["torch_bf16_tflops"]
                row["ratio_vs_torch_cast_matmul"] = row["tuned_tflops"] / row["torch_cast_matmul_tflops"]
        report["points"].append(row)
        save()
        brief = ("shape", "m", "tuned_variant", "tuned_tflops", "torch_bf16_tflops", "ratio_vs_torch_bf16")
        print(
            json.dumps({key: row.get(key) for key in (*brief, "variants_passing", "seconds")}),
            file=sys.stderr,
        )
    ratios = [p["ratio_vs_torch_bf16"] for p in report["points"] if "ratio_vs_torch_bf16" in p]
    square = [p for p in report["points"] if p["shape"] == "square"]
    summary_keys = ("tuned_variant", "tuned_tflops", "torch_bf16_tflops", "ratio_vs_torch_bf16")
    report["summary"] = {
        "square_8192": {key: square[0].get(key) for key in summary_keys} if square else None,
        "median_ratio_vs_torch_bf16": statistics.median(ratios) if ratios else None,
        "points_where_every_variant_passes_parity": sum(
            p["variants_passing"] == p["variants_total"] > 0 for p in report["points"]
        ),
        "points": len(report["points"]),
        "seconds": round(time.monotonic() - t0, 1),
    }
    save()
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
