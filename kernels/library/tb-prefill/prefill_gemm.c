/*
 * Tunebase host prefill GEMM:  y[M][N] = x[M][K] . W[N][K]^T  (same packed layout and int8
 * activation rule as decode_gemv.c; see tb_host.h).
 * Compile once per format kind:
 *   cc -O3 -std=c11 -fPIC -shared -DTB_ASYMMETRIC=0|1 -DTB_GROUP=32|16 [-DTB_PREFILL_VARIANTS='TB_PREFILL_VARIANT(64,16,1,0)'] ... -lm
 * Every TB_PREFILL_VARIANT(n_tile, m_tile, min_blocks, unroll) becomes one exported symbol
 *   void tb_prefill_n<n>_mt<m>_mb<mb>_u<u>(const int8_t *qs, const uint16_t *scales,
 *        const uint16_t *mins, const float *x, float *y, int m, int n, int k)
 * n_tile x m_tile = the output tile kept in an accumulator array (cache blocking: one weight
 * row block is reused m_tile times from L1); unroll = unroll of the K-block loop (0 = compiler's
 * choice); min_blocks has no CPU meaning and is accepted as 1 only.
 */
#include "tb_host.h"

#ifndef TB_PREFILL_VARIANTS
#define TB_PREFILL_VARIANTS                                                                           \
    TB_PREFILL_VARIANT(64, 16, 1, 0) TB_PREFILL_VARIANT(64, 16, 1, 2) TB_PREFILL_VARIANT(64, 32, 1, 0) TB_PREFILL_VARIANT(64, 32, 1, 2) TB_PREFILL_VARIANT(128, 16, 1, 0) \
    TB_PREFILL_VARIANT(128, 16, 1, 2) TB_PREFILL_VARIANT(128, 32, 1, 0) TB_PREFILL_VARIANT(128, 32, 1, 2)
#endif

#define TB_PRAGMA(x) _Pragma(#x)
#define TB_UNROLL_0
#define TB_UNROLL_1 TB_PRAGMA(GCC unroll 1)
#define TB_UNROLL_2 TB_PRAGMA(GCC unroll 2)
#define TB_UNROLL_4 TB_PRAGMA(GCC unroll 4)

/* One (NT x MT) output tile; `acc` is [MT][NT]. */
#define TB_TILE_BODY(NT, MT, U)                                                                   \
    for (int i = 0; i < mc; ++i)                                                                  \
        for (int t = 0; t < nc; ++t) acc[i][t] = 0.0f;                                            \
    TB_UNROLL_##U for (int b = 0; b < nb; ++b) {                                                  \
        for (int t = 0; t < nc; ++t) {                                                            \
            const size_t row = (size_t)(n0 + t);                                                  \
            float ws[TB_SPG], wmin;                                                               \
            tb_block_scales(scales, mins, row, (size_t)nb, (size_t)b, ws, &wmin);                 \
            const int8_t *w = qs + row * (size_t)k + (size_t)b * TB_QK;                           \
            for (int i = 0; i < mc; ++i) {                                                        \
                const size_t xi = (size_t)(m0 + i) * (size_t)nb + (size_t)b;                      \
                const int8_t *xq = xa.q + (size_t)(m0 + i) * (size_t)k + (size_t)b * TB_QK;       \
                acc[i][t] += xa.s[xi] * tb_block(w, ws, wmin, xq, xa.sum[xi]);                    \
            }                                                                                     \
        }                                                                                         \
    }                                                                                             \
    for (int i = 0; i < mc; ++i)                                                                  \
        for (int t = 0; t < nc; ++t) y[(size_t)(m0 + i) * (size_t)n + (size_t)(n0 + t)] = acc[i][t];

#define TB_PREFILL_VARIANT(NT, MT, MB, U)                                                                       \
    void tb_prefill_n##NT##_mt##MT##_mb##MB##_u##U(const int8_t *qs, const uint16_t *scales,      \
                                                   const uint16_t *mins, const float *x, float *y, \
                                                   int m, int n, int k) {                         \
        float acc[MT][NT]; /* at most 32 x 128 floats = 16 KiB of stack */                      \
        const int nb = k / TB_QK;                                                                 \
        tb_qact xa;                                                                               \
        if (!tb_quantize(x, m, k, &xa)) {                                                         \
            tb_fill_nan(y, m, n);                                                                 \
            return;                                                                               \
        }                                                                                         \
        for (int m0 = 0; m0 < m; m0 += (MT)) {                                                    \
            const int mc = (m - m0) < (MT) ? (m - m0) : (MT);                                     \
            for (int n0 = 0; n0 < n; n0 += (NT)) {                                                \
                const int nc = (n - n0) < (NT) ? (n - n0) : (NT);                                 \
                TB_TILE_BODY(NT, MT, U)                                                           \
            }                                                                                     \
        }                                                                                         \
        tb_qact_free(&xa);                                                                        \
    }

TB_PREFILL_VARIANTS

#undef TB_PREFILL_VARIANT
