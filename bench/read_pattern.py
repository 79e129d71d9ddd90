"""Does the ORDER in which a decode kernel reads its bytes cost bandwidth? Two hypotheses, one call.

Why: issue 13 misses two targets by 10-25 % and the profiles do not name one limiter.
  1. The RG16 tensor-core kernel (LM head, M = 4) holds 78 % of copy bandwidth on every 4.5-bit format
     while the M = 1 stream kernel reaches 99 % of the same bytes. RG16's warps each read 16 rows x 128
     bytes per ring stage (a row is 2560 bytes at K = 5120): the DRAM sees 128-byte pieces 2560 bytes
     apart, each row's page opened once per stage. If that is the limit, a pure READER with the same order
     is as slow, and one whose J warps share 16 rows and take every J-th stage (128 J contiguous bytes
     per row at a time) is faster.
  1b. The RG16 kernel costs ~4 us more per row of M at the same mma work (call f3: Q4_0 M = 3 -> 4 190.3 ->
     194.3 us): the J = 2 reader with M rows of K fp32 x staged per block first, M = 1..4 (2 blocks per SM),
     shows whether staging x's bytes (264 blocks x 20 KB per row of M) is that cost.
  2. The M = 1 kernels lose a near-constant ~3 us to a plain reader on the 17-50 MB shapes at K = 5120
     (6 us at K = 17408, ~1.8 at K = 2048): every workgroup stages x (K fp32 from L2, 20 KB at K = 5120)
     before its dots (396 workgroups: 8 MB of L2 reads beside 17.7 MB of weights on GDN_Z; ncu's L2 hit
     rate 30.8 % is exactly that share). A reader that also stages x per workgroup, issued before or
     after its first weight loads, shows what the staging alone costs.
Pure readers (16-byte loads, XOR, no arithmetic) over the true Q4_0 payload of the shapes, timed by
CUPTI like the product's kernels, rotated over copies beyond twice the L2; the decode times of the
roofline JSON given are printed beside them.

    python bench/read_pattern.py --out bench/results/read-pattern-h200-DATE.json \\
        --decode bench/results/decode-roofline-h200-final-2026-12-01-d.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

SOURCE = r"""
/* RG16 order: 8 warps a block; J warps share 16 rows, warp phase p reads stages p, p + J, ... of them; a
 * stage is 8 16-byte chunks (128 bytes) of each of the 16 rows, lane l chunk l & 7 of rows 4 i + (l >> 3)
 * (the RG16 kernel's copy mapping); two stages in flight per lane (its 2-stage ring) */
template <int J, int XM = 0>
__device__ void rg16_order(const uint4 *__restrict__ qs, int n, int chunks, int *out,
                           const float4 *__restrict__ x = nullptr) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, group = warp / J, phase = warp % J;
    constexpr int ROWS_BLOCK = 16 * (8 / J);
    const int tiles = (n + ROWS_BLOCK - 1) / ROWS_BLOCK, stages = chunks / 8;
    unsigned acc = 0;
    if constexpr (XM > 0) { /* XM rows of x (K fp32) staged by every block first, as the RG16 kernel does */
        extern __shared__ float4 xs[];
        const int k4 = XM * chunks * 8; /* float4s of XM rows of K = 32 chunks floats */
        for (int i = threadIdx.x; i < k4; i += blockDim.x) xs[i] = __ldcg(x + i);
        __syncthreads();
        acc ^= __float_as_uint(xs[(lane * 37) % k4].x);
    }
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const int row0 = tile * ROWS_BLOCK + group * 16 + (lane >> 3);
        int s = phase;
        for (; s + J < stages; s += 2 * J) {
            uint4 v[8];
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const int row = min(row0 + 4 * (i & 3), n - 1), st = s + J * (i >> 2);
                v[i] = __ldcg(qs + (long long)row * chunks + 8 * st + (lane & 7));
            }
#pragma unroll
            for (int i = 0; i < 8; ++i) acc ^= v[i].x ^ v[i].y ^ v[i].z ^ v[i].w;
        }
        for (; s < stages; s += J) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int row = min(row0 + 4 * i, n - 1);
                const uint4 v = __ldcg(qs + (long long)row * chunks + 8 * s + (lane & 7));
                acc ^= v.x ^ v.y ^ v.z ^ v.w;
            }
        }
    }
    if (acc == 0x9E3779B9u) out[0] = (int)acc;
}
#define TB_RG16(J)                                                                            \
    extern "C" __global__ void __launch_bounds__(256)                                         \
        tb_order_rg16_j##J(const uint4 *qs, int n, int chunks, int *out) {                    \
        rg16_order<J>(qs, n, chunks, out);                                                    \
    }
TB_RG16(1)
TB_RG16(2)
TB_RG16(4)
TB_RG16(8)
/* J2 with XM rows of x staged per block first (the RG16 kernel at M = XM) */
#define TB_RG16_X(XM)                                                                         \
    extern "C" __global__ void __launch_bounds__(256)                                         \
        tb_order_rg16_j2_x##XM(const uint4 *qs, int n, int chunks, int *out, const float4 *x) { \
        rg16_order<2, XM>(qs, n, chunks, out, x);                                             \
    }
TB_RG16_X(1)
TB_RG16_X(2)
TB_RG16_X(3)
TB_RG16_X(4)

/* full-wave rows (the M = 1 stream kernel's order): a warp reads whole rows, chunk lane + 32 i, units of
 * RW rows interleaved over every warp of the grid; optionally x (k fp32) staged into shared memory by
 * every block first (XS 1: before the weights' loads; 2: after the first unit's loads are in flight) */
template <int RW, int XS>
__device__ void rows_order(const uint4 *__restrict__ qs, int n, int chunks,
                           const float4 *__restrict__ x, int k, int *out) {
    extern __shared__ float4 xs[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int gw = blockIdx.x * 8 + warp, nw = gridDim.x * 8;
    unsigned acc = 0;
    auto stage_x = [&]() {
        for (int i = threadIdx.x; i < k / 4; i += blockDim.x) xs[i] = __ldcg(x + i);
        __syncthreads();
        acc ^= __float_as_uint(xs[(lane * 37) % (k / 4)].x);
    };
    if (XS == 1) stage_x();
    bool first = true;
    for (int r0 = gw * RW; r0 < n; r0 += nw * RW) {
        /* 5 chunks per lane at a time: a K = 5120 row in one batch */
        for (int c0 = 0; c0 < chunks; c0 += 160) {
            uint4 v[RW][5];
#pragma unroll
            for (int r = 0; r < RW; ++r)
#pragma unroll
                for (int i = 0; i < 5; ++i)
                    v[r][i] = c0 + lane + 32 * i < chunks
                                  ? __ldcs(qs + (long long)min(r0 + r, n - 1) * chunks + c0 + lane + 32 * i)
                                  : make_uint4(0, 0, 0, 0);
            if (XS == 2 && first) stage_x();
            first = false;
#pragma unroll
            for (int r = 0; r < RW; ++r)
#pragma unroll
                for (int i = 0; i < 5; ++i) acc ^= v[r][i].x ^ v[r][i].y ^ v[r][i].z ^ v[r][i].w;
        }
    }
    if (XS == 2 && first) stage_x(); /* every block's barrier count the same */
    if (acc == 0x9E3779B9u) out[0] = (int)acc;
}
#define TB_ROWS(NAME, XS)                                                                     \
    extern "C" __global__ void __launch_bounds__(256)                                         \
        NAME(const uint4 *qs, int n, int chunks, const float4 *x, int k, int *out) {          \
        rows_order<2, XS>(qs, n, chunks, x, k, out);                                          \
    }
TB_ROWS(tb_order_rows, 0)
TB_ROWS(tb_order_rows_x_first, 1)
TB_ROWS(tb_order_rows_x_after, 2)
"""

RG16_KERNELS = ("tb_order_rg16_j1", "tb_order_rg16_j2", "tb_order_rg16_j4", "tb_order_rg16_j8")
RG16_X_KERNELS = tuple(f"tb_order_rg16_j2_x{m}" for m in (1, 2, 3, 4))  # + M rows of x staged per block
ROWS_KERNELS = ("tb_order_rows", "tb_order_rows_x_first", "tb_order_rows_x_after")
# (shape, n, k): the LM head for the RG16 order (M = 4 runs there), the K = 5120 / 6144 / 17408 shapes for x
LM_HEAD = ("Qwen36_LM_Head", 248320, 5120)
X_SHAPES = [
    ("Qwen36_GDN_ZProjection", 6144, 5120),
    ("Qwen36_GDN_OutputProjection", 5120, 6144),
    ("Qwen36_Attn_QKVProjection", 12288, 5120),
    ("Qwen36_FFN_DownProjection", 5120, 17408),
]


def allow_shared(kernel: Any, shared_bytes: int) -> None:
    """Dynamic shared memory beyond the default 48 KB needs the function's opt-in."""
    from workers.harness import cuda_driver as cd

    if shared_bytes > 48 * 1024:
        attribute = cd.driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        cd.check(cd.driver.cuFuncSetAttribute(kernel, attribute, shared_bytes), "cuFuncSetAttribute")


def decode_m_times(paths: list[Path]) -> dict[tuple[str, int], float]:
    """Best Q4_0 time per (shape, M) over the roofline JSONs given."""
    best: dict[tuple[str, int], float] = {}
    for path in paths:
        for row in json.loads(path.read_text()).get("points", []):
            if row.get("format") == "Q4_0" and "median_us" in row:
                key = (row["shape"], int(row["m"]))
                best[key] = min(float(row["median_us"]), best.get(key, float("inf")))
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path)
    parser.add_argument("--decode", type=Path, action="append", default=[])
    parser.add_argument("--dispatches", type=int, default=20)
    args = parser.parse_args(argv)

    from decode_roofline import copy_bandwidth
    from read_floor import load_kernels, open_device, rotating_launch, time_kernel

    from workers.harness import cuda_driver as cd
    from workers.runner import weight_copies

    ctx, sms, l2_bytes = open_device()
    started = dt.datetime.now(dt.UTC)
    decode = decode_m_times(args.decode)
    rows: list[dict[str, Any]] = []
    fn = load_kernels(SOURCE, (*RG16_KERNELS, *RG16_X_KERNELS, *ROWS_KERNELS))
    copy = copy_bandwidth()
    print(f"copy {copy['bandwidth_gbs']:.0f} GB/s", flush=True)
    out_buf = cd.mem_alloc(4)
    for shape, n, k in [LM_HEAD, *X_SHAPES]:
        payload = n * (k // 32) * 16  # Q4_0's payload; the scales' 2 bytes per 32 are left out of both
        chunks = k // 32  # 16-byte chunks per row
        copies = weight_copies(payload, l2_bytes, warm_cache=False)
        bufs = [cd.mem_alloc(payload) for _ in range(copies)]
        for buf in bufs:
            cd.check(cd.driver.cuMemsetD32(buf, 0x01020304, payload // 4), "cuMemsetD32")
        x_buf = cd.mem_alloc(4 * 4 * k)  # 4 rows of M (the RG16 order's x staging); the rows order reads 1
        cd.check(cd.driver.cuMemsetD32(x_buf, 0x3F800000, 4 * k), "cuMemsetD32")
        ideal_us = payload / copy["bandwidth_gbs"] / 1e3
        times: dict[str, float] = {}
        for pg in (2, 3):
            grid = pg * sms
            if shape == LM_HEAD[0]:
                for name in RG16_KERNELS:
                    kargs = [
                        cd.KernelArgs([("ptr", b), ("i32", n), ("i32", chunks), ("ptr", out_buf)])
                        for b in bufs
                    ]
                    launch = rotating_launch(fn[name], grid, 256, kargs)
                    times[f"{name}/PG{pg}"] = time_kernel(launch, args.dispatches)
                for xm, name in enumerate(RG16_X_KERNELS if pg == 2 else (), start=1):  # 80 KB at M = 4
                    xargs = [
                        cd.KernelArgs(
                            [("ptr", b), ("i32", n), ("i32", chunks), ("ptr", out_buf), ("ptr", x_buf)]
                        )
                        for b in bufs
                    ]
                    allow_shared(fn[name], 4 * xm * k)
                    launch = rotating_launch(fn[name], grid, 256, xargs, 4 * xm * k)
                    times[f"{name}/PG{pg}"] = time_kernel(launch, args.dispatches)
            for name in ROWS_KERNELS:
                ptrs = [("ptr", x_buf), ("i32", k), ("ptr", out_buf)]
                kargs = [cd.KernelArgs([("ptr", b), ("i32", n), ("i32", chunks), *ptrs]) for b in bufs]
                smem = 4 * k if name != "tb_order_rows" else 0
                allow_shared(fn[name], smem)
                launch_rows = rotating_launch(fn[name], grid, 256, kargs, smem)
                times[f"{name}/PG{pg}"] = time_kernel(launch_rows, args.dispatches)
        for buf in bufs:
            cd.mem_free(buf)
        cd.mem_free(x_buf)
        row: dict[str, Any] = {
            "shape": shape, "n": n, "k": k, "payload_bytes": payload, "copies": copies,
            "copy_ideal_us": ideal_us, "us": times,
            "fraction_of_copy": {name: ideal_us / us for name, us in times.items()},
            "decode_q4_0_us": {m: decode[(shape, m)] for m in (1, 2, 3, 4) if (shape, m) in decode},
        }  # fmt: skip
        rows.append(row)
        for name, us in times.items():
            print(f"{shape:30} {name:32} {us:9.2f} us  {ideal_us / us:6.1%} of copy", flush=True)
    cd.mem_free(out_buf)
    device = {"name": ctx.name(), "uuid": ctx.uuid(), "sms": sms, "driver": ctx.driver_version()}
    doc = {
        "bench": "read_pattern", "date": started.isoformat(timespec="seconds"),
        "command": "python bench/read_pattern.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "device": device, "copy": copy,
        "method": "CUPTI kernel activity, median of --dispatches after 3 warm-ups; Q4_0 payload bytes only",
        "points": rows,
    }  # fmt: skip
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
