/*
 * Tunebase host prefill GEMM:  y[M][N] = x[M][K] . W[N][K]^T  at the format's true bytes (tb-split layout).
 * The host twin of prefill.hip for parity on every machine: x is quantised once per call to int8 per
 * 32-block (tb_host.h, the rule of kernels/activations.py), weights are unpacked chunk by chunk with the
 * GPU unpack code itself (tb_formats.h compiled as C11: tb_load_meta / tb_unpack / tb_chunk_dot).
 * Compile once per format:
 *   cc -O3 -std=c11 -fPIC -shared <tb-split defines> [-DTB_PREFILL_VARIANTS='TB_PREFILL_VARIANT(64,32,2,2,4,2,1,1,0)']
 * Every TB_PREFILL_VARIANT(n_tile, m_tile, warps_n, warps_m, kb, stages, split_k, min_blocks, engine) is one symbol
 *   void tb_prefill_n<n>_m<m>_wn<wn>_wm<wm>_kb<kb>_s<st>_sk<sk>_mb<mb>(const uint8_t *qs, const uint8_t *qh,
 *        const uint8_t *sc, const float *x, float *y, int m, int n, int k)
 * n_tile x m_tile = the output tile kept in an accumulator array (each unpacked weight chunk is reused
 * m_tile times); the GPU-only axes take one value on the host (the manifest's restriction).
 */
#include "tb_host.h"

#ifndef TB_PREFILL_VARIANTS
#define TB_PREFILL_VARIANTS TB_PREFILL_VARIANT(64, 32, 2, 2, 4, 2, 1, 1, 0)
#endif

static void tb_prefill_host(const uint8_t *qs, const uint8_t *qh, const uint8_t *sc, const float *x, float *y,
                            int m, int n, int k, int nt, int mt, float *acc) {
    tb_qact xa;
    if (!tb_quantize(x, m, k, &xa)) {
        tb_fill_nan(y, m, n);
        return;
    }
    const size_t nb = (size_t)k / 32;
    float *xd = (float *)malloc(sizeof(float) * (size_t)m * nb); /* x scale * x block sum */
    if (!xd) {
        tb_qact_free(&xa);
        tb_fill_nan(y, m, n);
        return;
    }
    for (size_t i = 0; i < (size_t)m * nb; ++i) xd[i] = xa.s[i] * (float)xa.sum[i];
    const size_t qs_row = (size_t)k * TB_QBITS / 8;
    const size_t qh_row = (size_t)k / TB_BLOCK_WEIGHTS * TB_QH_BYTES;
    const size_t sc_row = (size_t)k / TB_BLOCK_WEIGHTS * TB_SC_BYTES;
    const int chunks = k / TB_CHUNK_WEIGHTS;
    for (int m0 = 0; m0 < m; m0 += mt) {
        const int mc = (m - m0) < mt ? (m - m0) : mt;
        for (int n0 = 0; n0 < n; n0 += nt) {
            const int nc = (n - n0) < nt ? (n - n0) : nt;
            for (int i = 0; i < mc * nc; ++i) acc[i] = 0.0f;
            for (int r = 0; r < nc; ++r) {
                const size_t row = (size_t)(n0 + r);
                for (int c = 0; c < chunks; ++c) {
                    tb_u32 q[4];
                    memcpy(q, qs + row * qs_row + 16 * (size_t)c, 16);
                    const tb_meta meta = tb_load_meta(qh ? qh + row * qh_row : NULL, sc + row * sc_row, c);
                    const tb_chunk ch = tb_unpack(q, meta, c);
                    const int pl = tb_chunk_p_lo(c), ph = TB_RUNS == 2 ? tb_chunk_p_hi(c) : pl;
                    for (int i = 0; i < mc; ++i) {
                        const size_t xr = (size_t)(m0 + i);
                        tb_i32 xl[4], xh[4];
                        memcpy(xl, xa.q + xr * (size_t)k + (size_t)pl, 16);
                        memcpy(xh, xa.q + xr * (size_t)k + (size_t)ph, 16);
                        const float *s = xa.s + xr * nb, *d = xd + xr * nb;
                        acc[i * nc + r] += tb_chunk_dot(&ch, c, xl, xh, s[pl / 32], s[ph / 32], d[pl / 32], d[ph / 32]);
                    }
                }
            }
            for (int i = 0; i < mc; ++i)
                for (int r = 0; r < nc; ++r) y[(size_t)(m0 + i) * (size_t)n + (size_t)(n0 + r)] = acc[i * nc + r];
        }
    }
    free(xd);
    tb_qact_free(&xa);
}

#define TB_PREFILL_VARIANT(NT, MT, WN, WM, KB, ST, SK, MB, ENG)                                                  \
    void tb_prefill_n##NT##_m##MT##_wn##WN##_wm##WM##_kb##KB##_s##ST##_sk##SK##_mb##MB##_e##ENG(                 \
        const uint8_t *qs, const uint8_t *qh, const uint8_t *sc, const float *x, float *y, int m, int n, int k) { \
        float acc[(MT) * (NT)]; /* at most 64 x 128 floats = 32 KiB of stack */                                  \
        tb_prefill_host(qs, qh, sc, x, y, m, n, k, NT, MT, acc);                                                  \
    }

TB_PREFILL_VARIANTS

#undef TB_PREFILL_VARIANT
