/*
 * Tunebase host decode GEMV:  y[M][N] = x[M][K] . W[N][K]^T, W in the tb-split layout.
 *
 * The twin of decode.hip on the CPU: it reads the same three arrays through the same tb_formats.h
 * code (tb_load_meta, tb_unpack, tb_chunk_dot, compiled as C11 by tb_host.h), with x quantised per
 * 32-block to int8 exactly as the GPU kernels do, so parity runs the GPU's unpack and dot code on
 * every machine. Compile once per format:
 *   cc -O3 -std=c11 -fPIC -shared -DTB_FMT_<NAME>=1 -DTB_QBITS=.. -DTB_QS_BYTES=.. -DTB_QH_BYTES=..
 *      -DTB_SC_BYTES=.. -DTB_BLOCK_WEIGHTS=.. [-DTB_DECODE_VARIANTS='TB_DECODE_VARIANT(4,1,1,4,1,0,0)'] ... -lm
 * Every TB_DECODE_VARIANT(mx, kb, rw, u, rg, pg, pp) becomes one exported symbol
 *   void tb_decode_mx<mx>_kb<kb>_rw<rw>_u<u>_rg<rg>_pg<pg>_pp<pp>(const uint8_t *qs, const uint8_t *qh,
 *        const uint8_t *sc, const float *x, float *y, int m, int n, int k)
 * CPU meaning: rw rows share one pass over x, the K blocks are cut into kb slices whose partial sums
 * are added in slice order (the GPU's order), u chunks are unrolled; mx, rg, pg, pp have no CPU meaning
 * (any M runs).
 */
#include "tb_host.h"

#define TB_MAXRW 4

static void tb_decode_host(const uint8_t *qs, const uint8_t *qh, const uint8_t *sc, const float *x, float *y,
                           int m, int n, int k, int rw, int u, int kb) {
    tb_qact xa;
    const int nxb = k / 32;
    float *xd = (float *)malloc(sizeof(float) * (size_t)(m > 0 ? m : 1) * (size_t)(nxb > 0 ? nxb : 1));
    if (!xd || !tb_quantize(x, m, k, &xa)) {
        free(xd);
        tb_fill_nan(y, m, n);
        return;
    }
    for (size_t j = 0; j < (size_t)m * (size_t)nxb; ++j) xd[j] = xa.s[j] * (float)xa.sum[j];
    const size_t qs_row = (size_t)k * TB_QBITS / 8;
    const size_t qh_row = (size_t)(k / TB_BLOCK_WEIGHTS) * TB_QH_BYTES;
    const size_t sc_row = (size_t)(k / TB_BLOCK_WEIGHTS) * TB_SC_BYTES;
    const int nblk = k / TB_BLOCK_WEIGHTS;
    const int per = (nblk + kb - 1) / kb;
    for (int r0 = 0; r0 < n; r0 += rw) {
        const int rc = n - r0 < rw ? n - r0 : rw;
        for (int i = 0; i < m; ++i) {
            const int8_t *xq = xa.q + (size_t)i * (size_t)k;
            const float *xs = xa.s + (size_t)i * (size_t)nxb;
            const float *xdi = xd + (size_t)i * (size_t)nxb;
            float total[TB_MAXRW] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (int s = 0; s < kb; ++s) {
                const int b0 = s * per < nblk ? s * per : nblk;
                const int b1 = b0 + per < nblk ? b0 + per : nblk;
                float part[TB_MAXRW] = {0.0f, 0.0f, 0.0f, 0.0f};
                for (int c0 = b0 * TB_CHUNKS_PER_BLOCK; c0 < b1 * TB_CHUNKS_PER_BLOCK; c0 += u) {
                    for (int c = c0; c < c0 + u && c < b1 * TB_CHUNKS_PER_BLOCK; ++c) {
                        const int pl = tb_chunk_p_lo(c), ph = TB_RUNS == 2 ? tb_chunk_p_hi(c) : pl;
                        tb_i32 xl[4], xh[4];
                        memcpy(xl, xq + pl, 16);
                        memcpy(xh, xq + ph, 16);
                        for (int r = 0; r < rc; ++r) {
                            const size_t row = (size_t)(r0 + r);
                            tb_u32 q[4];
                            memcpy(q, qs + row * qs_row + 16 * (size_t)c, 16);
                            const tb_meta mt = tb_load_meta(qh ? qh + row * qh_row : qh, sc + row * sc_row, c);
                            const tb_chunk ch = tb_unpack(q, mt, c);
                            part[r] += tb_chunk_dot(&ch, c, xl, xh, xs[pl / 32], xs[ph / 32], xdi[pl / 32],
                                                    xdi[ph / 32]);
                        }
                    }
                }
                for (int r = 0; r < rc; ++r) total[r] += part[r];
            }
            for (int r = 0; r < rc; ++r) y[(size_t)i * (size_t)n + (size_t)(r0 + r)] = total[r];
        }
    }
    tb_qact_free(&xa);
    free(xd);
}

#define TB_SYM(mx, kb, rw, u, rg, pg, pp) tb_decode_mx##mx##_kb##kb##_rw##rw##_u##u##_rg##rg##_pg##pg##_pp##pp

#define TB_DECODE_VARIANT(MX, KB, RW, U, RG, PG, PP)                                                   \
    void TB_SYM(MX, KB, RW, U, RG, PG, PP)(const uint8_t *qs, const uint8_t *qh, const uint8_t *sc,      \
                                           const float *x, float *y, int m, int n, int k) {              \
        tb_decode_host(qs, qh, sc, x, y, m, n, k, (RW), (U), (KB));                                      \
    }

#ifndef TB_DECODE_VARIANTS
#define TB_DECODE_VARIANTS TB_DECODE_VARIANT(4, 1, 1, 4, 1, 0, 0) TB_DECODE_VARIANT(4, 1, 2, 4, 1, 0, 0)
#endif

TB_DECODE_VARIANTS

#undef TB_DECODE_VARIANT
