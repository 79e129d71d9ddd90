/*
 * Tunebase decode GEMV (M = 1..4):  y[M][N] = x[M][K] . W[N][K]^T
 * W in the packed kernel layout (kernels/formats/packed.py); x quantised per 32-block to int8
 * inside the kernel (same rule as kernels/activations.py); integer inner product via tb_dot4.
 *
 * Build switches: -DTB_ASYMMETRIC=0|1 (min term), -DTB_GROUP=32|16 (weights per scale).
 * Exported symbols (one per variant):  tb_decode_kb{KB}_tw{TW}
 *
 * Kernel arguments (ABI; mirrored in kernels/families/abi.py DECODE_ARGS, keep in sync):
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
 *  10  int            rows_per_wave  from the launch geometry (kernels/families/abi.py decode_launch)
 * Launch: block = (256,1,1), grid = (ceil(N / (rows_per_wave * 256/wave)), KB, 1), no dynamic LDS.
 *
 * Variant meaning:
 *   KB = split-K depth: each row's K blocks are cut into KB contiguous slices, one per grid.y
 *        index; inside a slice the lanes of one wave stride over the 32-weight blocks.
 *   TW = target waves per CU: the launch geometry spreads the rows so that about TW * CUs waves
 *        exist, and the kernel is compiled for that occupancy (__launch_bounds__ second argument:
 *        waves per EU = TW/4 on AMD's 4-SIMD CUs, min blocks per SM = TW*32/256 on NVIDIA).
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

#if defined(TB_AMD)
#define TB_DECODE_OCCUPANCY(TW) ((TW) / 4 > 0 ? (TW) / 4 : 1)
#else
#define TB_DECODE_OCCUPANCY(TW) ((TW) * 32 / TB_THREADS > 0 ? (TW) * 32 / TB_THREADS : 1)
#endif

#define TB_DECODE_PARAMS                                                                          \
    const tb_i8 *__restrict__ qs, const tb_u16 *__restrict__ scales,                              \
        const tb_u16 *__restrict__ mins, const float *__restrict__ x, float *__restrict__ y,      \
        float *__restrict__ workspace, tb_u32 *__restrict__ counters, int m, int n, int k,         \
        int rows_per_wave

/* one 32-weight block of one row against one quantised activation block */
TB_DEV float tb_block_dot(const tb_i32 *w, const tb_i32 *xq, tb_i32 xsum, float s0, float s1, float mn) {
#if TB_GROUP == 32
    tb_i32 d = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) d = tb_dot4(w[j], xq[j], d);
    float r = s0 * (float)d;
#if TB_ASYMMETRIC
    r += mn * (float)xsum;
#else
    (void)mn;
    (void)xsum;
#endif
    (void)s1;
    return r;
#else
    tb_i32 d0 = 0, d1 = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) d0 = tb_dot4(w[j], xq[j], d0);
#pragma unroll
    for (int j = 4; j < 8; ++j) d1 = tb_dot4(w[j], xq[j], d1);
    (void)mn;
    (void)xsum;
    return s0 * (float)d0 + s1 * (float)d1;
#endif
}

template <int KB>
__device__ TB_FORCEINLINE void tb_decode_body(TB_DECODE_PARAMS) {
    const int tid = TB_TID;
    const int lane = tid & (TB_WAVE - 1);
    const int wave = tid / TB_WAVE;
    const int nb = k >> 5;
    const int ng = k / TB_GROUP;
    const int slice = KB > 1 ? TB_BID_Y : 0;
    const int per = (nb + KB - 1) / KB;
    const int b_begin = slice * per;
    const int b_end = b_begin + per < nb ? b_begin + per : nb;
    const int wg_row0 = TB_BID_X * TB_WAVES * rows_per_wave;
    const int row0 = wg_row0 + wave * rows_per_wave;

    for (int r = 0; r < rows_per_wave; ++r) {
        const int row = row0 + r;
        if (row >= n) break; /* wave-uniform */
        float acc[TB_MAXM];
#pragma unroll
        for (int i = 0; i < TB_MAXM; ++i) acc[i] = 0.0f;
        const tb_size row_off = (tb_size)row * (tb_size)k;
        for (int b = b_begin + lane; b < b_end; b += TB_WAVE) {
            const tb_i32 *wp = (const tb_i32 *)(qs + row_off + (tb_size)b * 32);
            tb_i32 w[8];
#pragma unroll
            for (int j = 0; j < 8; ++j) w[j] = wp[j];
#if TB_GROUP == 32
            const tb_size g = (tb_size)row * (tb_size)ng + (tb_size)b;
            const float s0 = tb_h2f(scales[g]);
            const float s1 = 0.0f;
#else
            const tb_size g = (tb_size)row * (tb_size)ng + 2 * (tb_size)b;
            const float s0 = tb_h2f(scales[g]);
            const float s1 = tb_h2f(scales[g + 1]);
#endif
#if TB_ASYMMETRIC
            const float mn = tb_h2f(mins[g]);
#else
            const float mn = 0.0f;
#endif
#pragma unroll
            for (int i = 0; i < TB_MAXM; ++i) {
                if (i < m) {
                    tb_i32 xq[8], xsum;
                    const float xs = tb_quantize_block(x + (tb_size)i * (tb_size)k + (tb_size)b * 32, xq, &xsum);
                    acc[i] += xs * tb_block_dot(w, xq, xsum, s0, s1, mn);
                }
            }
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
        tb_decode_body<KB>(qs, scales, mins, x, y, workspace, counters, m, n, k, rows_per_wave);  \
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
