/*
 * Tunebase decode GEMV (M = 1..4):  y[M][N] = x[M][K] . W[N][K]^T
 * W in the packed kernel layout (kernels/formats/packed.py); x quantised per 32-block to int8
 * inside the kernel (same rule as kernels/activations.py); integer inner product via tb_dot4.
 *
 * Build switches: -DTB_ASYMMETRIC=0|1 (min term), -DTB_GROUP=32|16 (weights per scale).
 * Exported symbols (one per variant):  tb_decode_kb{KB}_tw{TW}
 *
 * Kernel arguments (ABI; declared in tunebase-kernel.toml [[args]], keep in sync):
 *   0  const int8_t   *qs          [N][K]             packed weight values
 *   1  const uint16_t *scales      [N][K/TB_GROUP]    fp16 bits
 *   2  const uint16_t *mins        [N][K/TB_GROUP]    fp16 bits; may be NULL when TB_ASYMMETRIC=0
 *   3  const float    *x           [M][K]             activations
 *   4  float          *y           [M][N]             output, fully overwritten
 *   5  float          *workspace   [KB][M][N]         split-K partials; may be NULL when KB=1
 *   6  uint32_t       *counters    [grid.x]           zero before the first launch; left zero; NULL when KB=1
 *   7  int            m            1..4
 *   8  int            n
 *   9  int            k            multiple of 32 (of 256 for K-quant / IQ4_XS sources)
 *  10  int            rows_per_wave  from the launch geometry (tunebase-kernel.toml [derived])
 * Launch: block = (256,1,1), grid = (ceil(N / (rows_per_wave * 256/wave)), KB, 1), no dynamic LDS.
 *
 * Variant meaning:
 *   KB = split-K depth: each row's K blocks are cut into KB contiguous slices, one per grid.y
 *        index; inside a slice the lanes of one wave read the row's weights as contiguous
 *        16-byte pieces (lane l reads bytes 16*l..16*l+15 of each 16*wave-byte run).
 *   TW = target waves per CU: the launch geometry spreads the rows so that about TW * CUs waves
 *        exist, and the kernel is compiled for that occupancy (__launch_bounds__ second argument:
 *        waves per EU = TW/4 on AMD's 4-SIMD CUs, capped by what the static LDS allows;
 *        min blocks per SM = TW*32/256 on NVIDIA).
 *
 * Data flow (v2; v1 reached ~6% of copy bandwidth on the H200, this one ~80% on the Q4_0 LM head):
 *  1. x is quantised ONCE per workgroup into static LDS / shared memory (tb_quantize_block, the
 *     same rule as kernels/activations.py), not once per row per block as v1 did.
 *  2. Weights are read with 16-byte vector loads (tb_int4 is alignas(16), so nvcc emits
 *     LDG.E.128 and AMD global_load_dwordx4), lane-contiguous: every load is fully coalesced.
 *     A lane's 16 weights are half of a 32-block (one whole group when TB_GROUP == 16).
 *  3. TB_UNROLL independent 16-byte loads per lane are issued before any arithmetic
 *     (8; 4 at TW = 24 where NVIDIA's 3 blocks/SM cap registers at 85).
 *  Static LDS: x of up to TB_CHUNK weights per row of M as int8 + per-32-block scale and sum,
 *  i.e. 40 KB at TB_CHUNK = 8192 (fits gfx9's 64 KB and sm_90's 48 KB static limit; on gfx906/gfx90a
 *  it allows one workgroup, 4 waves, per CU). A K-slice longer than TB_CHUNK is processed in
 *  chunks with x re-staged per row (correct, slower; KB > 1 variants keep slices short).
 *
 * KB > 1 reduction: a "last workgroup reduces" pass inside the same launch, not atomicAdd.
 *   Every slice writes its partial sums to workspace, then bumps a per-row-group counter; the
 *   workgroup that arrives last adds the KB partials in slice order and writes y, and resets the
 *   counter. Why: (1) y is NaN-filled before a parity run and must be fully overwritten, and a
 *   float atomicAdd would need y zeroed by a separate launch (two dispatches per timing, so the
 *   profiler would time the memset too); (2) the sum order is fixed, so results are bitwise
 *   reproducible run to run (atomics are not), which keeps parity and A/B comparisons honest;
 *   (3) the extra traffic is KB*M*N floats, tiny next to N*K weight bytes.
 */
#include "tb_portability.h"

#ifndef TB_ASYMMETRIC
#define TB_ASYMMETRIC 0
#endif
#ifndef TB_GROUP
#define TB_GROUP 32
#endif
#if TB_GROUP != 32 && TB_GROUP != 16
#error "TB_GROUP must be 32 or 16"
#endif
#if TB_GROUP == 16 && TB_ASYMMETRIC
#error "asymmetric formats use 32-weight groups"
#endif

#define TB_THREADS 256
#define TB_WAVES (TB_THREADS / TB_WAVE)
#define TB_MAXM 4
#ifndef TB_CHUNK
#define TB_CHUNK 8192 /* weights of x per row held in LDS / shared memory */
#endif
#define TB_CHUNK_BLOCKS (TB_CHUNK / 32)
#define TB_CHUNK_VEC (TB_CHUNK / 16) /* 16-byte pieces of one staged x row */
/* 16-byte loads in flight per lane: 8 where registers allow, 4 at TW = 24 (3 blocks/SM cap
 * registers at 85 on sm_90; 8 would spill there: measured with ptxas -v) */
#define TB_UNROLL_FOR(TW) ((TW) >= 24 ? 4 : 8)

#if defined(TB_AMD)
/* Waves per EU asked of the compiler: TW/4, but no more than the static LDS allows. A 256-thread
 * workgroup is one wave per SIMD, so waves per EU = workgroups per CU = LDS per CU / LDS per
 * workgroup (64 KB on gfx906/gfx90a/gfx942: 1; 160 KB on gfx950: 3). Asking for more only caps
 * VGPRs (6 waves/EU -> 40 VGPRs: spills) for an occupancy the LDS never permits. */
#if defined(__gfx950__)
#define TB_LDS_PER_CU 163840
#else
#define TB_LDS_PER_CU 65536
#endif
#define TB_LDS_BYTES (TB_MAXM * TB_CHUNK + 2 * 4 * TB_MAXM * TB_CHUNK_BLOCKS + 4)
#define TB_LDS_WAVES (TB_LDS_PER_CU / TB_LDS_BYTES > 0 ? TB_LDS_PER_CU / TB_LDS_BYTES : 1)
#define TB_DECODE_WANT(TW) ((TW) / 4 > 0 ? (TW) / 4 : 1)
#define TB_DECODE_OCCUPANCY(TW) (TB_DECODE_WANT(TW) < TB_LDS_WAVES ? TB_DECODE_WANT(TW) : TB_LDS_WAVES)
#else
#define TB_DECODE_OCCUPANCY(TW) ((TW) * 32 / TB_THREADS > 0 ? (TW) * 32 / TB_THREADS : 1)
#endif

#define TB_DECODE_PARAMS                                                                          \
    const tb_i8 *__restrict__ qs, const tb_u16 *__restrict__ scales,                              \
        const tb_u16 *__restrict__ mins, const float *__restrict__ x, float *__restrict__ y,      \
        float *__restrict__ workspace, tb_u32 *__restrict__ counters, int m, int n, int k,         \
        int rows_per_wave

/* 16-byte aligned so one vector load is emitted per 16 weights (LDG.E.128 / global_load_dwordx4,
 * LDS.128 / ds_read_b128); a plain 4-int struct is 4-byte aligned and compiles to four loads.
 * Every address read through it is 16-byte aligned: rows start at row*k bytes (k % 32 == 0) and
 * the LDS arrays are declared as tb_int4. */
struct alignas(16) tb_int4 {
    tb_i32 x, y, z, w;
};

/* quantise blocks [c0, c1) of every x row into LDS (all threads of the workgroup) */
TB_DEV void tb_stage_x(const float *__restrict__ x, int m, int k, int c0, int c1, tb_int4 *xq_s, float *xs_s,
                       tb_i32 *xsum_s) {
    const int nblk = c1 - c0;
    for (int t = TB_TID; t < nblk * m; t += TB_THREADS) {
        const int i = t / nblk;
        const int b = t - i * nblk;
        tb_i32 packed[8], sum;
        const float xs = tb_quantize_block(x + (tb_size)i * (tb_size)k + (tb_size)(c0 + b) * 32, packed, &sum);
        tb_int4 *dst = xq_s + i * TB_CHUNK_VEC + 2 * b;
        dst[0] = tb_int4{packed[0], packed[1], packed[2], packed[3]};
        dst[1] = tb_int4{packed[4], packed[5], packed[6], packed[7]};
        xs_s[i * TB_CHUNK_BLOCKS + b] = xs;
        xsum_s[i * TB_CHUNK_BLOCKS + b] = sum;
    }
}

/* one row over blocks [c0, c1) with x staged in LDS; adds into acc[0..m) */
template <int TB_UNROLL>
__device__ TB_FORCEINLINE void tb_row_chunk(const tb_i8 *__restrict__ qs, const tb_u16 *__restrict__ scales,
                                            const tb_u16 *__restrict__ mins, int row, int k, int m, int c0,
                                            int c1, const tb_int4 *xq_s, const float *xs_s,
                                            const tb_i32 *xsum_s, float *acc) {
    const int lane = tb_lane();
    const int ng = k / TB_GROUP;
    const int h0 = 2 * c0, h1 = 2 * c1; /* 16-weight halves */
    const tb_int4 *wrow = (const tb_int4 *)(qs + (tb_size)row * (tb_size)k);
    const tb_u16 *srow = scales + (tb_size)row * (tb_size)ng;
#if TB_ASYMMETRIC
    const tb_u16 *mrow = mins + (tb_size)row * (tb_size)ng;
#else
    (void)mins;
    (void)xsum_s;
#endif
    for (int base = h0; base < h1; base += TB_WAVE * TB_UNROLL) {
        tb_int4 w[TB_UNROLL];
#pragma unroll
        for (int u = 0; u < TB_UNROLL; ++u) {
            const int h = base + u * TB_WAVE + lane;
            if (h < h1) w[u] = wrow[h];
        }
#pragma unroll
        for (int u = 0; u < TB_UNROLL; ++u) {
            const int h = base + u * TB_WAVE + lane;
            if (h < h1) {
                const int lh = h - h0; /* half inside the staged chunk */
                const int lb = lh >> 1; /* block inside the staged chunk */
#if TB_GROUP == 32
                const float s = tb_h2f(srow[h >> 1]);
#else
                const float s = tb_h2f(srow[h]);
#endif
#if TB_ASYMMETRIC
                const float mn = (h & 1) == 0 ? tb_h2f(mrow[h >> 1]) : 0.0f;
#endif
#pragma unroll
                for (int i = 0; i < TB_MAXM; ++i) {
                    if (i < m) {
                        const tb_int4 xv = xq_s[i * TB_CHUNK_VEC + lh];
                        tb_i32 d = tb_dot4(w[u].x, xv.x, 0);
                        d = tb_dot4(w[u].y, xv.y, d);
                        d = tb_dot4(w[u].z, xv.z, d);
                        d = tb_dot4(w[u].w, xv.w, d);
                        float r = s * (float)d;
#if TB_ASYMMETRIC
                        r += mn * (float)xsum_s[i * TB_CHUNK_BLOCKS + lb];
#endif
                        acc[i] += xs_s[i * TB_CHUNK_BLOCKS + lb] * r;
                    }
                }
            }
        }
    }
}

template <int KB, int TW>
__device__ TB_FORCEINLINE void tb_decode_body(TB_DECODE_PARAMS) {
    constexpr int U = TB_UNROLL_FOR(TW);
    __shared__ tb_int4 xq_s[TB_MAXM * TB_CHUNK_VEC];
    __shared__ float xs_s[TB_MAXM * TB_CHUNK_BLOCKS];
    __shared__ tb_i32 xsum_s[TB_MAXM * TB_CHUNK_BLOCKS];
    const int tid = TB_TID;
    const int lane = tid & (TB_WAVE - 1);
    const int wave = tid / TB_WAVE;
    const int nb = k >> 5;
    const int slice = KB > 1 ? TB_BID_Y : 0;
    const int per = (nb + KB - 1) / KB;
    const int b_begin = slice * per < nb ? slice * per : nb;
    const int b_end = b_begin + per < nb ? b_begin + per : nb;
    const int wg_row0 = TB_BID_X * TB_WAVES * rows_per_wave;
    const int row0 = wg_row0 + wave * rows_per_wave;
    const bool one_chunk = b_end - b_begin <= TB_CHUNK_BLOCKS;

    if (one_chunk) {
        tb_stage_x(x, m, k, b_begin, b_end, xq_s, xs_s, xsum_s);
        tb_sync();
    }
    for (int r = 0; r < rows_per_wave; ++r) {
        const int row = row0 + r;
        if (one_chunk && row >= n) break; /* wave-uniform; no barrier follows in this path */
        float acc[TB_MAXM];
#pragma unroll
        for (int i = 0; i < TB_MAXM; ++i) acc[i] = 0.0f;
        if (one_chunk) {
            tb_row_chunk<U>(qs, scales, mins, row, k, m, b_begin, b_end, xq_s, xs_s, xsum_s, acc);
        } else {
            /* every wave of the workgroup runs the same trip count here: barriers stay matched */
            for (int c0 = b_begin; c0 < b_end; c0 += TB_CHUNK_BLOCKS) {
                const int c1 = c0 + TB_CHUNK_BLOCKS < b_end ? c0 + TB_CHUNK_BLOCKS : b_end;
                tb_sync();
                tb_stage_x(x, m, k, c0, c1, xq_s, xs_s, xsum_s);
                tb_sync();
                if (row < n) tb_row_chunk<U>(qs, scales, mins, row, k, m, c0, c1, xq_s, xs_s, xsum_s, acc);
            }
            if (row >= n) continue;
        }
#pragma unroll
        for (int i = 0; i < TB_MAXM; ++i) {
#pragma unroll
            for (int off = TB_WAVE / 2; off > 0; off >>= 1) acc[i] += tb_shfl_xor(acc[i], off);
        }
        if (lane == 0) {
#pragma unroll
            for (int i = 0; i < TB_MAXM; ++i) {
                if (i < m) {
                    if (KB == 1)
                        y[(tb_size)i * (tb_size)n + (tb_size)row] = acc[i];
                    else
                        workspace[((tb_size)slice * (tb_size)m + (tb_size)i) * (tb_size)n + (tb_size)row] = acc[i];
                }
            }
        }
    }

    if (KB > 1) {
        __shared__ int tb_last;
        tb_fence_release_device(); /* this thread's partials visible device-wide before the count */
        tb_sync();
        if (tid == 0) tb_last = tb_atomic_inc(&counters[TB_BID_X]) == (tb_u32)(KB - 1);
        tb_sync();
        if (tb_last) {
            tb_fence_acquire_device();
            const int left = n - wg_row0;
            const int rows = left < TB_WAVES * rows_per_wave ? left : TB_WAVES * rows_per_wave;
            const volatile float *ws = workspace;
            for (int t = tid; t < rows * m; t += TB_THREADS) {
                const int i = t / rows;
                const int row = wg_row0 + t % rows;
                float s = 0.0f;
                for (int sl = 0; sl < KB; ++sl) s += ws[((tb_size)sl * (tb_size)m + (tb_size)i) * (tb_size)n + (tb_size)row];
                y[(tb_size)i * (tb_size)n + (tb_size)row] = s;
            }
            if (tid == 0) tb_atomic_store_zero(&counters[TB_BID_X]);
        }
    }
}

#define TB_DECODE_VARIANT(KB, TW)                                                                 \
    extern "C" __global__ TB_LAUNCH_BOUNDS(TB_THREADS, TB_DECODE_OCCUPANCY(TW)) void              \
        tb_decode_kb##KB##_tw##TW(TB_DECODE_PARAMS) {                                             \
        tb_decode_body<KB, TW>(qs, scales, mins, x, y, workspace, counters, m, n, k, rows_per_wave); \
    }

/* -DTB_DECODE_VARIANTS='TB_DECODE_VARIANT(1,4) ...' builds a subset; default: the whole GPU space */
#ifndef TB_DECODE_VARIANTS
#define TB_DECODE_VARIANTS                                                                        \
    TB_DECODE_VARIANT(1, 4) TB_DECODE_VARIANT(1, 8) TB_DECODE_VARIANT(1, 12) TB_DECODE_VARIANT(1, 24) \
    TB_DECODE_VARIANT(2, 4) TB_DECODE_VARIANT(2, 8) TB_DECODE_VARIANT(2, 12) TB_DECODE_VARIANT(2, 24) \
    TB_DECODE_VARIANT(4, 4) TB_DECODE_VARIANT(4, 8) TB_DECODE_VARIANT(4, 12) TB_DECODE_VARIANT(4, 24) \
    TB_DECODE_VARIANT(8, 4) TB_DECODE_VARIANT(8, 8) TB_DECODE_VARIANT(8, 12) TB_DECODE_VARIANT(8, 24) \
    TB_DECODE_VARIANT(16, 4) TB_DECODE_VARIANT(16, 8) TB_DECODE_VARIANT(16, 12) TB_DECODE_VARIANT(16, 24)
#endif
TB_DECODE_VARIANTS
