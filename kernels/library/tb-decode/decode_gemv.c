/*
 * Tunebase host decode GEMV:  y[M][N] = x[M][K] . W[N][K]^T
 *
 * W in the packed kernel layout (kernels/formats/packed.py): int8 qs [N][K], fp16 scales
 * [N][K/TB_GROUP], fp16 mins (asymmetric kinds). x is quantised per 32-block to int8 (exactly
 * as the GPU kernels do), so the inner product is integer and parity uses the same tolerance.
 * Compile once per format kind:
 *   cc -O3 -std=c11 -fPIC -shared -DTB_ASYMMETRIC=0|1 -DTB_GROUP=32|16 [-DTB_DECODE_VARIANTS='TB_DECODE_VARIANT(1,4)'] ... -lm
 * Every TB_DECODE_VARIANT(kb, tw) in TB_DECODE_VARIANTS becomes one exported symbol
 *   void tb_decode_kb<kb>_tw<tw>(const int8_t *qs, const uint16_t *scales, const uint16_t *mins,
 *                                const float *x, float *y, int m, int n, int k)
 * kb = independent K-block partial sums per row (split-K / ILP depth),
 * tw = rows per tile sharing one pass over the activations.
 */
#include "tb_host.h"

#define TB_MAXM 4 /* activation rows processed together; larger M is done in groups */

#ifndef TB_DECODE_VARIANTS
#define TB_DECODE_VARIANTS TB_DECODE_VARIANT(1, 4) TB_DECODE_VARIANT(1, 8) TB_DECODE_VARIANT(2, 4) TB_DECODE_VARIANT(2, 8) TB_DECODE_VARIANT(4, 4) TB_DECODE_VARIANT(4, 8) TB_DECODE_VARIANT(8, 4) TB_DECODE_VARIANT(8, 8)
#endif

/*
 * One tile: rows [r0, r0+tc) x activation rows [m0, m0+mc). KB and TW are compile-time
 * so the accumulator array has a fixed shape; tc <= TW is the live row count.
 */
static inline void tb_tile(const int8_t *qs, const uint16_t *scales, const uint16_t *mins, const tb_qact *xa,
                           float *y, int n, int k, int r0, int tc, int m0, int mc, int kb, int tw,
                           float *acc /* [TB_MAXM][tw][kb] */) {
    const int nb = k / TB_QK;
    memset(acc, 0, sizeof(float) * (size_t)TB_MAXM * (size_t)tw * (size_t)kb);
    for (int b0 = 0; b0 < nb; b0 += kb) {
        const int ub = (nb - b0) < kb ? (nb - b0) : kb;
        for (int t = 0; t < tc; ++t) {
            const size_t row = (size_t)(r0 + t);
            for (int u = 0; u < ub; ++u) {
                const int b = b0 + u;
                float ws[TB_SPG], wmin;
                tb_block_scales(scales, mins, row, (size_t)nb, (size_t)b, ws, &wmin);
                const int8_t *w = qs + row * (size_t)k + (size_t)b * TB_QK;
                for (int i = 0; i < mc; ++i) {
                    const size_t xi = (size_t)(m0 + i) * (size_t)nb + (size_t)b;
                    const int8_t *xq = xa->q + (size_t)(m0 + i) * (size_t)k + (size_t)b * TB_QK;
                    acc[((size_t)i * tw + t) * kb + u] += xa->s[xi] * tb_block(w, ws, wmin, xq, xa->sum[xi]);
                }
            }
        }
    }
    for (int i = 0; i < mc; ++i) {
        for (int t = 0; t < tc; ++t) {
            const float *a = acc + ((size_t)i * tw + t) * kb;
            float s = 0.0f;
            for (int u = 0; u < kb; ++u) s += a[u];
            y[(size_t)(m0 + i) * (size_t)n + (size_t)(r0 + t)] = s;
        }
    }
}

#define TB_SYM(kb, tw) tb_decode_kb##kb##_tw##tw

/* Each variant: full tiles with constant tc = TW (constant-folded after inlining), then a tail. */
#define TB_DECODE_VARIANT(KB, TW)                                                                              \
    void TB_SYM(KB, TW)(const int8_t *qs, const uint16_t *scales, const uint16_t *mins,           \
                        const float *x, float *y, int m, int n, int k) {                          \
        float acc[TB_MAXM * (TW) * (KB)];                                                         \
        tb_qact xa;                                                                               \
        if (!tb_quantize(x, m, k, &xa)) {                                                         \
            tb_fill_nan(y, m, n);                                                                 \
            return;                                                                               \
        }                                                                                         \
        for (int m0 = 0; m0 < m; m0 += TB_MAXM) {                                                 \
            const int mc = (m - m0) < TB_MAXM ? (m - m0) : TB_MAXM;                               \
            int r0 = 0;                                                                           \
            for (; r0 + (TW) <= n; r0 += (TW))                                                    \
                tb_tile(qs, scales, mins, &xa, y, n, k, r0, (TW), m0, mc, (KB), (TW), acc);       \
            if (r0 < n) tb_tile(qs, scales, mins, &xa, y, n, k, r0, n - r0, m0, mc, (KB), (TW), acc); \
        }                                                                                         \
        tb_qact_free(&xa);                                                                        \
    }

TB_DECODE_VARIANTS

#undef TB_DECODE_VARIANT
