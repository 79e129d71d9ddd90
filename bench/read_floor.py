"""What one kernel launch can reach at a decode shape's true bytes: the ceiling for issue 13's median target.

The median target counts the launch floor ("launch floor counted"): a 17.7 MB weight matrix cannot reach 60%
of copy bandwidth if a kernel that merely reads those bytes cannot. This bench times, with CUPTI (the
product's profiler, per-dispatch GPU start/end), on the GPU it finds:
  - an empty kernel (one or two blocks per SM, 256 threads): the floor of a dispatch;
  - a plain streaming reader (16-byte loads, grid-stride, no arithmetic but an XOR) over exactly the true
    Q4_0 bytes of each qwen36 shape at M = 1, rotated over copies beyond twice the L2 as the runner rotates
    the decode's weights, best of a small launch grid (blocks per SM x threads x loads in flight);
and prints beside each the tuned decode time of the roofline JSON(s) given, as a fraction of the reader.
The reader is a ceiling for one launch, not for the decode kernel (which must also stage x and reduce):
when the reader's own median is under 60% of copy, the target asks for more than one launch can do.

    python bench/read_floor.py --out bench/results/read-floor-h200-DATE.json \\
        --decode bench/results/decode-roofline-h200-k1s-2026-12-01.json --decode ...k1r-2026-12-01.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

SOURCE = r"""
extern "C" __global__ void tb_floor_empty(int *out) {
    if (out != nullptr && threadIdx.x == 1023) out[0] = 0;  /* never true at 256 threads: nothing runs */
}
template <int U>
__device__ void tb_floor_read_u(const uint4 *__restrict__ src, long long n16, int *out) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    unsigned acc = 0;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + (U - 1) * stride < n16; i += U * stride) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) v[u] = __ldcs(src + i + u * stride);  /* streaming: no L2 reuse wanted */
#pragma unroll
        for (int u = 0; u < U; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < n16; i += stride) {
        const uint4 v = __ldcs(src + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9E3779B9u) out[0] = (int)acc;  /* keeps the loads; (almost) never stores */
}
extern "C" __global__ void tb_floor_read4(const uint4 *src, long long n16, int *out) {
    tb_floor_read_u<4>(src, n16, out);
}
extern "C" __global__ void tb_floor_read8(const uint4 *src, long long n16, int *out) {
    tb_floor_read_u<8>(src, n16, out);
}
"""

# blocks per SM, threads per block, loads in flight per thread (kernel)
GRIDS = [(b, t, u) for b in (1, 2, 4, 8) for t in (256, 512, 1024) for u in (4, 8) if b * t <= 2048]


def q4_0_bytes(n: int, k: int) -> int:
    return n * (k // 32) * 18  # 16 payload bytes + an fp16 scale per 32 weights


def shapes() -> list[tuple[str, int, int]]:
    from decode_roofline import GATE_UP, LM_HEAD

    from kernels.profiles import load_profiles

    out = [LM_HEAD, GATE_UP]
    for s in load_profiles()["qwen36"]:
        if s.name not in (LM_HEAD[0], GATE_UP[0]):
            out.append((s.name, s.n, s.k))
    return out


def decode_times(paths: list[Path]) -> dict[str, float]:
    """Best M = 1 Q4_0 time per shape over the given roofline JSONs (later files do not hide faster ones)."""
    best: dict[str, float] = {}
    for path in paths:
        for row in json.loads(path.read_text()).get("points", []):
            if row.get("format") == "Q4_0" and row.get("m") == 1 and "median_us" in row:
                us = float(row["median_us"])
                best[row["shape"]] = min(us, best.get(row["shape"], us))
    return best


def open_device() -> tuple[Any, int, int]:
    """GPU 0's context (made current), its SM count and L2 bytes; CUPTI required (the product's profiler)."""
    from workers.harness import cuda_driver as cd
    from workers.profilers import cupti

    if not cupti.available():
        raise SystemExit("cupti-python is needed: the readers are timed with the product's profiler")
    ctx = cd.Context.open(0)
    ctx.make_current()
    sms = ctx.attribute("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT")
    return ctx, sms, ctx.attribute("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE")


def load_kernels(source: str, names: tuple[str, ...]) -> dict[str, Any]:
    """NVRTC-compile ``source`` for sm_90 and load it into the current context: its functions by name."""
    import numpy as np

    from workers.harness import cuda_driver as cd
    from workers.harness.cuda_compile import compile_cubin

    with tempfile.TemporaryDirectory(prefix="tb-bench-") as tmp:
        src = Path(tmp) / "bench.cu"
        src.write_text(source)
        result = compile_cubin(src, Path(tmp), "bench", ["--gpu-architecture=sm_90", "-std=c++17"], [])
        if not result.ok:
            raise SystemExit(f"NVRTC failed:\n{result.log}")
        data = np.frombuffer(Path(result.path).read_bytes(), dtype=np.uint8).copy()
    module = cd.check(cd.driver.cuModuleLoadData(data.ctypes.data), "cuModuleLoadData")
    return {name: cd.check(cd.driver.cuModuleGetFunction(module, name.encode()), name) for name in names}


def rotating_launch(kernel: Any, grid: int, threads: int, args: list[Any], shared_bytes: int = 0) -> Any:
    """A launcher that takes the next copy's arguments on every call."""
    from workers.harness import cuda_driver as cd

    turn = [0]

    def launch() -> None:
        cd.launch(kernel, (grid, 1, 1), (threads, 1, 1), args[turn[0] % len(args)], shared_bytes=shared_bytes)
        turn[0] += 1

    return launch


def time_kernel(launch: Any, dispatches: int) -> float:
    """Median CUPTI duration (us) of ``dispatches`` launches after 3 warm-ups."""
    from workers.harness import cuda_driver as cd
    from workers.profilers.cupti import KernelTrace

    for _ in range(3):
        launch()
    cd.synchronize()
    trace = KernelTrace()
    trace.start()
    try:
        for _ in range(dispatches):
            launch()
        cd.synchronize()
    finally:
        records = trace.stop()
    if len(records) != dispatches:
        raise RuntimeError(f"CUPTI returned {len(records)} kernel records for {dispatches} launches")
    return statistics.median(r.duration_ns for r in records) / 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--decode", type=Path, action="append", default=[], help="roofline JSON(s) to compare"
    )
    parser.add_argument("--dispatches", type=int, default=20)
    args = parser.parse_args(argv)

    from decode_roofline import copy_bandwidth

    from workers.harness import cuda_driver as cd
    from workers.runner import weight_copies

    ctx, sms, l2_bytes = open_device()
    started = dt.datetime.now(dt.UTC)
    fn = load_kernels(SOURCE, ("tb_floor_empty", "tb_floor_read4", "tb_floor_read8"))
    copy = copy_bandwidth()
    out_buf = cd.mem_alloc(4)
    empty_args = cd.KernelArgs([("ptr", out_buf)])
    floor = {
        f"{blocks}x256": time_kernel(
            lambda b=blocks: cd.launch(fn["tb_floor_empty"], (b * sms, 1, 1), (256, 1, 1), empty_args),
            args.dispatches,
        )
        for blocks in (1, 2)
    }
    print(f"copy {copy['bandwidth_gbs']:.0f} GB/s; empty kernel {floor}", flush=True)
    decode = decode_times(args.decode)
    rows = []
    for name, n, k in shapes():
        nbytes = q4_0_bytes(n, k)
        # rotated over copies beyond twice the L2 as the runner rotates the decode's weights: DRAM, not L2
        copies = weight_copies(nbytes, l2_bytes, warm_cache=False)
        bufs = [cd.mem_alloc(nbytes) for _ in range(copies)]
        for buf in bufs:
            cd.check(cd.driver.cuMemsetD32(buf, 0x01020304, nbytes // 4), "cuMemsetD32")
        n16 = nbytes // 16
        timings = {}
        for blocks, threads, unroll in GRIDS:
            kargs = [cd.KernelArgs([("ptr", buf), ("i64", n16), ("ptr", out_buf)]) for buf in bufs]
            launch = rotating_launch(fn[f"tb_floor_read{unroll}"], blocks * sms, threads, kargs)
            timings[f"B{blocks}/T{threads}/U{unroll}"] = time_kernel(launch, args.dispatches)
        for buf in bufs:
            cd.mem_free(buf)
        best = min(timings, key=timings.__getitem__)
        read_us = timings[best]
        ideal_us = nbytes / copy["bandwidth_gbs"] / 1e3
        row: dict[str, Any] = {
            "shape": name, "n": n, "k": k, "bytes": nbytes, "copies": copies, "read_us": read_us,
            "read_config": best, "read_fraction_of_copy": ideal_us / read_us, "copy_ideal_us": ideal_us,
        }  # fmt: skip
        if name in decode:
            row["decode_us"] = decode[name]
            row["decode_fraction_of_copy"] = ideal_us / decode[name]
            row["decode_over_read"] = decode[name] / read_us
        rows.append(row)
        print(
            f"{name:30} {nbytes / 1e6:9.2f} MB  read {read_us:8.2f} us "
            f"({row['read_fraction_of_copy']:6.1%}) {best:12}  "
            f"decode {row.get('decode_us', float('nan')):8.2f} us",
            flush=True,
        )
    cd.mem_free(out_buf)
    read_median = statistics.median(r["read_fraction_of_copy"] for r in rows)
    with_decode = [r for r in rows if "decode_us" in r]
    summary = {
        "shapes": len(rows),
        "median_read_fraction_of_copy": read_median,
        "median_decode_fraction_of_copy": (
            statistics.median(r["decode_fraction_of_copy"] for r in with_decode)
            if len(with_decode) == len(rows)
            else None
        ),
        "empty_kernel_us": floor,
        "target_median_fraction": 0.6,
    }
    device = {"name": ctx.name(), "uuid": ctx.uuid(), "sms": sms, "driver": ctx.driver_version()}
    result_json = {
        "bench": "read_floor", "date": started.isoformat(timespec="seconds"),
        "command": "python bench/read_floor.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "device": device, "copy": copy,
        "method": "CUPTI kernel activity, median of --dispatches after 3 warm-ups",
        "summary": summary, "points": rows,
    }  # fmt: skip
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result_json, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
