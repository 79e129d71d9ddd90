/*
 * tb-mxfp4-gemm, host C11 version:  y[M][N] = x[M][K] . W[N][K]^T  with W in MXFP4.
 *
 * The arithmetic of the gfx950 path, emulated so it is checked on every machine: x is quantised per
 * 32-block to E4M3 codes with one E8M0 scale (tb_mx.h), each 32-block product of codes is summed in
 * fp32 and scaled by both blocks' E8M0 scales, as one scaled MFMA lane does. W is the planar layout
 * tb_mxfp4_prepare writes (codes [N][K/2], scales [K/32][N]).
 *
 *   void tb_mxfp4_prepare(const uint8_t *gguf, uint8_t *out, int n, int k)
 *   void tb_mxfp4_gemm_m<tile_m>_n<tile_n>_k<tile_k>_w<w>_s<s>_l<l>_i<i>(const uint8_t *w,
 *        const float *x, float *y, int m, int n, int k)
 * tile_m x tile_n is the output tile kept in accumulators, tile_k the K chunk decoded at a time (cache
 * blocking); the GPU-only parameters (waves, stages, lds, mfma) have one accepted value here.
 */
#include <stdint.h>
#include <stdlib.h>

#include "tb_mx.h"

void tb_mxfp4_prepare(const uint8_t *gguf, uint8_t *out, int n, int k) {
    const size_t nb = (size_t)k / 32;
    uint8_t *codes = out, *scales = out + (size_t)n * (size_t)k / 2;
    for (size_t row = 0; row < (size_t)n; ++row)
        for (size_t b = 0; b < nb; ++b)
            tb_mx_repack(gguf + (row * nb + b) * 17, codes + row * (size_t)k / 2 + b * 16,
                         scales + b * (size_t)n + row);
}

/* x -> E4M3 values (unscaled) and E8M0 block scales as floats; 0 on allocation failure. */
static int tb_mx_quantize_x(const float *x, int m, int k, float **values, float **scales) {
    const size_t nb = (size_t)k / 32;
    *values = (float *)malloc(sizeof(float) * (size_t)m * (size_t)k);
    *scales = (float *)malloc(sizeof(float) * (size_t)m * nb);
    if (!*values || !*scales) {
        free(*values);
        free(*scales);
        return 0;
    }
    for (size_t r = 0; r < (size_t)m; ++r)
        for (size_t b = 0; b < nb; ++b) {
            const float *xb = x + r * (size_t)k + b * 32;
            float amax = 0.0f;
            for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(xb[j]));
            const unsigned e = tb_mx_e4m3_scale(amax);
            const float inv = tb_mx_inv_scale(e);
            for (int j = 0; j < 32; ++j) (*values)[r * (size_t)k + b * 32 + (size_t)j] = tb_mx_e4m3(tb_mx_e4m3_code(xb[j], inv));
            (*scales)[r * nb + b] = tb_mx_e8m0(e);
        }
    return 1;
}

#define TB_MX_VARIANT(TM, TN, TK, W, S, L, I)                                                        \
    void tb_mxfp4_gemm_m##TM##_n##TN##_k##TK##_w##W##_s##S##_l##L##_i##I(                           \
        const uint8_t *w, const float *x, float *y, int m, int n, int k) {                           \
        const size_t nb = (size_t)k / 32;                                                             \
        const uint8_t *codes = w, *wscale = w + (size_t)n * (size_t)k / 2;                            \
        float *xv, *xs;                                                                               \
        float(*wt)[TK] = malloc(sizeof(float) * (TN) * (TK)); /* decoded weight tile, unscaled */     \
        float(*acc)[TN] = malloc(sizeof(float) * (TM) * (TN));                                        \
        if (!wt || !acc || !tb_mx_quantize_x(x, m, k, &xv, &xs)) {                                    \
            for (size_t i = 0; i < (size_t)m * (size_t)n; ++i) y[i] = NAN;                            \
            free(wt);                                                                                 \
            free(acc);                                                                                \
            return;                                                                                   \
        }                                                                                             \
        for (int n0 = 0; n0 < n; n0 += (TN)) {                                                        \
            const int nc = n - n0 < (TN) ? n - n0 : (TN);                                             \
            for (int m0 = 0; m0 < m; m0 += (TM)) {                                                    \
                const int mc = m - m0 < (TM) ? m - m0 : (TM);                                         \
                for (int i = 0; i < mc; ++i)                                                          \
                    for (int t = 0; t < nc; ++t) acc[i][t] = 0.0f;                                    \
                for (int k0 = 0; k0 < k; k0 += (TK)) {                                                \
                    for (int t = 0; t < nc; ++t) {                                                    \
                        const uint8_t *c = codes + (size_t)(n0 + t) * (size_t)k / 2 + (size_t)k0 / 2; \
                        for (int j = 0; j < (TK); j += 2) {                                           \
                            wt[t][j] = tb_mx_e2m1(c[j / 2] & 15u);                                    \
                            wt[t][j + 1] = tb_mx_e2m1(c[j / 2] >> 4);                                 \
                        }                                                                             \
                    }                                                                                 \
                    for (int i = 0; i < mc; ++i) {                                                    \
                        const size_t r = (size_t)(m0 + i);                                            \
                        for (int t = 0; t < nc; ++t) {                                                \
                            float sum = acc[i][t];                                                    \
                            for (int b = 0; b < (TK) / 32; ++b) {                                     \
                                const size_t kb = (size_t)k0 / 32 + (size_t)b;                        \
                                const float *xa = xv + r * (size_t)k + kb * 32;                       \
                                float block = 0.0f;                                                   \
                                for (int j = 0; j < 32; ++j) block += xa[j] * wt[t][b * 32 + j];      \
                                sum += block * xs[r * nb + kb] *                                      \
                                       tb_mx_e8m0(wscale[kb * (size_t)n + (size_t)(n0 + t)]);         \
                            }                                                                         \
                            acc[i][t] = sum;                                                          \
                        }                                                                             \
                    }                                                                                 \
                }                                                                                     \
                for (int i = 0; i < mc; ++i)                                                          \
                    for (int t = 0; t < nc; ++t) y[(size_t)(m0 + i) * (size_t)n + (size_t)(n0 + t)] = acc[i][t]; \
            }                                                                                         \
        }                                                                                             \
        free(xv);                                                                                     \
        free(xs);                                                                                     \
        free(wt);                                                                                     \
        free(acc);                                                                                    \
    }

#ifndef TB_MX_VARIANTS
#define TB_MX_VARIANTS TB_MX_VARIANT(64, 64, 64, 4, 2, 0, 16)
#endif

TB_MX_VARIANTS
