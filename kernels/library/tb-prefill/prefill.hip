/*
 * Tunebase prefill GEMM:  y[M][N] = x[M][K] . W[N][K]^T   (M = a prefill bucket, 2 .. 4096)
 * W in the packed kernel layout (kernels/formats/packed.py); x quantised per 32-block to int8 while
 * it is staged into LDS (same rule as kernels/activations.py); integer inner product via tb_dot4.
 *
 * Build switches: -DTB_ASYMMETRIC=0|1 (min term), -DTB_GROUP=32|16 (weights per scale).
 * Exported symbols (one per variant):  tb_prefill_n{NT}_mt{MT}_mb{MB}_u{U}
 *
 * Kernel arguments (ABI; mirrored in kernels/families/abi.py PREFILL_ARGS, keep in sync):
 *   0  const int8_t   *qs      [N][K]            packed weight values
 *   1  const uint16_t *scales  [N][K/TB_GROUP]   fp16 bits
 *   2  const uint16_t *mins    [N][K/TB_GROUP]   fp16 bits; may be NULL when TB_ASYMMETRIC=0
 *   3  const float    *x       [M][K]            activations
 *   4  float          *y       [M][N]            output, fully overwritten
 *   5  int            m
 *   6  int            n
 *   7  int            k        multiple of 32 (of 256 for K-quant / IQ4_XS sources)
 * Launch: block = (256,1,1), grid = (ceil(N/NT), ceil(M/MT), 1), static LDS only (no dynamic LDS).
 *
 * Variant meaning:
 *   NT = weight rows per workgroup tile (64 | 128), MT = activation rows per tile (16 | 32 | 64);
 *   each thread owns an (NT/64) x (MT/4) register tile, so N128/MT64 (32 accumulators plus
 *   staging registers) is excluded by the family constraints.
 *   MB = second argument of __launch_bounds__ (waves per EU on AMD, min blocks per SM on NVIDIA).
 *   U  = unroll of the K-block loop inside one LDS stage (4 blocks at NT=64, 2 at NT=128):
 *        0 = compiler's choice, 1 = none, 2, 4 (at NT=128, U2 and U4 both unroll fully).
 * Pipeline: K is consumed in stages of TB_TKB(NT) 32-blocks; two LDS buffers: while stage s is
 * multiplied out of one buffer, stage s+1 is fetched from global memory into registers and
 * then written to the other buffer, one barrier per stage.
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
/* 32-blocks per LDS stage: 8 KiB of weights per buffer, so every thread fetches exactly one
 * weight block per stage and the double-buffered tiles stay under CUDA's 48 KiB static LDS
 * (NT=64: 4 blocks = 128 K values, NT=128: 2 blocks = 64 K values per stage). */
#define TB_TKB(NT) (TB_THREADS / (NT) * 1)
#define TB_SPG (32 / TB_GROUP)             /* scales per 32-block */
#define TB_WSTRIDE(NT) (TB_TKB(NT) * 8 + 1) /* int32 words per LDS row, +1 avoids bank conflicts */

#define TB_PREFILL_PARAMS                                                                         \
    const tb_i8 *__restrict__ qs, const tb_u16 *__restrict__ scales,                              \
        const tb_u16 *__restrict__ mins, const float *__restrict__ x, float *__restrict__ y, int m, \
        int n, int k

template <int NT, int MT>
struct TbPrefillSmem {
    tb_i32 w[2][NT][TB_WSTRIDE(NT)];
    float ws[2][NT][TB_TKB(NT) * TB_SPG];
#if TB_ASYMMETRIC
    float wm[2][NT][TB_TKB(NT)];
#endif
    tb_i32 xq[2][MT][TB_WSTRIDE(NT)];
    float xs[2][MT][TB_TKB(NT)];
    tb_i32 xsum[2][MT][TB_TKB(NT)];
};

template <int NT, int MT>
struct TbPrefillStage {
    static constexpr int WB = NT * TB_TKB(NT) / TB_THREADS; /* weight blocks per thread: 1 */
    tb_i32 w[WB][8];
    float ws[WB][TB_SPG];
    float wm[WB];
    tb_i32 xq[8];
    float xs;
    tb_i32 xsum;
};

template <int NT, int MT>
__device__ TB_FORCEINLINE void tb_prefill_fetch(TbPrefillStage<NT, MT> &st, TB_PREFILL_PARAMS, int n0, int m0, int kb0) {
    const int tid = TB_TID;
    const int nb = k >> 5;
    const int ng = k / TB_GROUP;
#pragma unroll
    for (int j = 0; j < TbPrefillStage<NT, MT>::WB; ++j) {
        const int bi = tid + TB_THREADS * j;
        const int row = n0 + bi / TB_TKB(NT);
        const int b = kb0 + bi % TB_TKB(NT);
        const bool ok = row < n && b < nb;
        if (ok) {
            const tb_i32 *wp = (const tb_i32 *)(qs + (tb_size)row * (tb_size)k + (tb_size)b * 32);
#pragma unroll
            for (int q = 0; q < 8; ++q) st.w[j][q] = wp[q];
#pragma unroll
            for (int s = 0; s < TB_SPG; ++s) st.ws[j][s] = tb_h2f(scales[(tb_size)row * (tb_size)ng + (tb_size)b * TB_SPG + s]);
#if TB_ASYMMETRIC
            st.wm[j] = tb_h2f(mins[(tb_size)row * (tb_size)ng + (tb_size)b]);
#else
            st.wm[j] = 0.0f;
#endif
        } else {
#pragma unroll
            for (int q = 0; q < 8; ++q) st.w[j][q] = 0;
#pragma unroll
            for (int s = 0; s < TB_SPG; ++s) st.ws[j][s] = 0.0f;
            st.wm[j] = 0.0f;
        }
    }
    st.xs = 0.0f;
    st.xsum = 0;
#pragma unroll
    for (int q = 0; q < 8; ++q) st.xq[q] = 0;
    if (tid < MT * TB_TKB(NT)) {
        const int row = m0 + tid / TB_TKB(NT);
        const int b = kb0 + tid % TB_TKB(NT);
        if (row < m && b < nb) st.xs = tb_quantize_block(x + (tb_size)row * (tb_size)k + (tb_size)b * 32, st.xq, &st.xsum);
    }
    (void)mins;
    (void)y;
}

template <int NT, int MT>
__device__ TB_FORCEINLINE void tb_prefill_store(TbPrefillSmem<NT, MT> &sm, const TbPrefillStage<NT, MT> &st, int buf) {
    const int tid = TB_TID;
#pragma unroll
    for (int j = 0; j < TbPrefillStage<NT, MT>::WB; ++j) {
        const int bi = tid + TB_THREADS * j;
        const int row = bi / TB_TKB(NT), b = bi % TB_TKB(NT);
#pragma unroll
        for (int q = 0; q < 8; ++q) sm.w[buf][row][b * 8 + q] = st.w[j][q];
#pragma unroll
        for (int s = 0; s < TB_SPG; ++s) sm.ws[buf][row][b * TB_SPG + s] = st.ws[j][s];
#if TB_ASYMMETRIC
        sm.wm[buf][row][b] = st.wm[j];
#endif
    }
    if (tid < MT * TB_TKB(NT)) {
        const int row = tid / TB_TKB(NT), b = tid % TB_TKB(NT);
#pragma unroll
        for (int q = 0; q < 8; ++q) sm.xq[buf][row][b * 8 + q] = st.xq[q];
        sm.xs[buf][row][b] = st.xs;
        sm.xsum[buf][row][b] = st.xsum;
    }
}

template <int NT, int MT, int U>
__device__ TB_FORCEINLINE void tb_prefill_body(TB_PREFILL_PARAMS) {
    constexpr int RN = NT / 64; /* weight rows per thread */
    constexpr int RM = MT / 4;  /* activation rows per thread */
    static_assert(RN * RM <= 16, "register tile too large (N128/MT64 is excluded)");
    __shared__ TbPrefillSmem<NT, MT> sm;
    const int tid = TB_TID;
    const int tn = tid % 64, tm = tid / 64;
    const int n0 = TB_BID_X * NT, m0 = TB_BID_Y * MT;
    const int nb = k >> 5;
    const int stages = (nb + TB_TKB(NT) - 1) / TB_TKB(NT);

    float acc[RN][RM];
#pragma unroll
    for (int i = 0; i < RN; ++i)
#pragma unroll
        for (int j = 0; j < RM; ++j) acc[i][j] = 0.0f;

    TbPrefillStage<NT, MT> st;
    tb_prefill_fetch<NT, MT>(st, qs, scales, mins, x, y, m, n, k, n0, m0, 0);
    tb_prefill_store<NT, MT>(sm, st, 0);
    tb_sync();

    for (int s = 0; s < stages; ++s) {
        const int buf = s & 1;
        if (s + 1 < stages) tb_prefill_fetch<NT, MT>(st, qs, scales, mins, x, y, m, n, k, n0, m0, (s + 1) * TB_TKB(NT));

        auto block = [&](int b) {
            tb_i32 w[RN][8];
            float ws[RN][TB_SPG];
            float wm[RN];
#pragma unroll
            for (int i = 0; i < RN; ++i) {
#pragma unroll
                for (int q = 0; q < 8; ++q) w[i][q] = sm.w[buf][tn + 64 * i][b * 8 + q];
#pragma unroll
                for (int c = 0; c < TB_SPG; ++c) ws[i][c] = sm.ws[buf][tn + 64 * i][b * TB_SPG + c];
#if TB_ASYMMETRIC
                wm[i] = sm.wm[buf][tn + 64 * i][b];
#else
                wm[i] = 0.0f;
#endif
            }
#pragma unroll
            for (int j = 0; j < RM; ++j) {
                const int mr = tm + 4 * j;
                tb_i32 xq[8];
#pragma unroll
                for (int q = 0; q < 8; ++q) xq[q] = sm.xq[buf][mr][b * 8 + q];
                const float xs = sm.xs[buf][mr][b];
                const float xsum = (float)sm.xsum[buf][mr][b];
#pragma unroll
                for (int i = 0; i < RN; ++i) {
#if TB_GROUP == 32
                    tb_i32 d = 0;
#pragma unroll
                    for (int q = 0; q < 8; ++q) d = tb_dot4(w[i][q], xq[q], d);
                    float r = ws[i][0] * (float)d;
#if TB_ASYMMETRIC
                    r += wm[i] * xsum;
#endif
#else
                    tb_i32 d0 = 0, d1 = 0;
#pragma unroll
                    for (int q = 0; q < 4; ++q) d0 = tb_dot4(w[i][q], xq[q], d0);
#pragma unroll
                    for (int q = 4; q < 8; ++q) d1 = tb_dot4(w[i][q], xq[q], d1);
                    float r = ws[i][0] * (float)d0 + ws[i][1] * (float)d1;
#endif
                    acc[i][j] += xs * r;
                }
                (void)xsum;
            }
            (void)wm;
        };
        if constexpr (U == 1) {
#pragma unroll 1
            for (int b = 0; b < TB_TKB(NT); ++b) block(b);
        } else if constexpr (U == 2) {
#pragma unroll 2
            for (int b = 0; b < TB_TKB(NT); ++b) block(b);
        } else if constexpr (U == 4) {
#pragma unroll 4
            for (int b = 0; b < TB_TKB(NT); ++b) block(b);
        } else {
            for (int b = 0; b < TB_TKB(NT); ++b) block(b);
        }

        if (s + 1 < stages) tb_prefill_store<NT, MT>(sm, st, buf ^ 1);
        tb_sync();
    }

#pragma unroll
    for (int j = 0; j < RM; ++j) {
        const int row_m = m0 + tm + 4 * j;
#pragma unroll
        for (int i = 0; i < RN; ++i) {
            const int row_n = n0 + tn + 64 * i;
            if (row_m < m && row_n < n) y[(tb_size)row_m * (tb_size)n + (tb_size)row_n] = acc[i][j];
        }
    }
}

#define TB_PREFILL_VARIANT(NT, MT, MB, U)                                                         \
    extern "C" __global__ TB_LAUNCH_BOUNDS(TB_THREADS, MB) void                                   \
        tb_prefill_n##NT##_mt##MT##_mb##MB##_u##U(TB_PREFILL_PARAMS) {                            \
        tb_prefill_body<NT, MT, U>(qs, scales, mins, x, y, m, n, k);                              \
    }

#define TB_PREFILL_U(NT, MT, MB)                                                                  \
    TB_PREFILL_VARIANT(NT, MT, MB, 0)                                                             \
    TB_PREFILL_VARIANT(NT, MT, MB, 1) TB_PREFILL_VARIANT(NT, MT, MB, 2) TB_PREFILL_VARIANT(NT, MT, MB, 4)
#define TB_PREFILL_MB(NT, MT) TB_PREFILL_U(NT, MT, 1) TB_PREFILL_U(NT, MT, 2)

/* -DTB_PREFILL_VARIANTS='TB_PREFILL_VARIANT(64,16,1,0) ...' builds a subset; default: the whole space */
#ifndef TB_PREFILL_VARIANTS
#define TB_PREFILL_VARIANTS                                                                       \
    TB_PREFILL_MB(64, 16) TB_PREFILL_MB(64, 32) TB_PREFILL_MB(64, 64) TB_PREFILL_MB(128, 16)       \
    TB_PREFILL_MB(128, 32)
#endif
TB_PREFILL_VARIANTS
