/*
 * rowsplit-gemv, host (CPU) source:  y[M][N] = x[M][K] . dequant(W)[N][K]^T
 *
 * W is GGUF blocks exactly as stored: row r starts at w + r * (K / 32) * TB_BLOCK_BYTES.
 *   Q8_0 block (34 bytes): fp16 d, int8 q[32];            weight j = q[j] * d
 *   Q4_0 block (18 bytes): fp16 d, uint8 nibbles[16];     weight j = ((nibbles[j] & 15) - 8) * d,
 *                                                         weight j+16 = ((nibbles[j] >> 4) - 8) * d
 * Build: cc -O3 -std=c11 -fPIC -shared -DTB_FMT_Q8_0=1 -DTB_BLOCK_BYTES=34 -DROWS=4 -DUNROLL=2 gemv.c
 * Parameters (tunebase-kernel.toml [params]):
 *   ROWS   rows per tile: the tile's rows share every read of x
 *   UNROLL K blocks per row in flight: independent partial sums (instruction-level parallelism)
 */
#include <stdint.h>
#include <string.h>

#ifndef ROWS
#error "compile with -DROWS=<rows per tile>"
#endif
#ifndef UNROLL
#error "compile with -DUNROLL=<K blocks per step>"
#endif
#if defined(TB_FMT_Q8_0)
#define QK 32
#define BLOCK_BYTES 34
#elif defined(TB_FMT_Q4_0)
#define QK 32
#define BLOCK_BYTES 18
#else
#error "rowsplit-gemv reads Q8_0 or Q4_0 (compile with -DTB_FMT_Q8_0=1 or -DTB_FMT_Q4_0=1)"
#endif
#if defined(TB_BLOCK_BYTES) && TB_BLOCK_BYTES != BLOCK_BYTES
#error "TB_BLOCK_BYTES does not match the format"
#endif
#define MCHUNK 4 /* activation rows accumulated together */

/* IEEE fp16 bits -> fp32 (C11 has no portable half type). */
static inline float h2f(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t man = h & 0x3FFu;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while (!(man & 0x400u)) {
                man <<= 1;
                --exp;
            }
            bits = sign | (exp << 23) | ((man & 0x3FFu) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7F800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* One block's 32 weights as floats. */
static inline void dequant_block(const uint8_t *b, float *out) {
    const float d = h2f((uint16_t)(b[0] | (b[1] << 8)));
#if defined(TB_FMT_Q8_0)
    for (int j = 0; j < QK; ++j) out[j] = (float)(int8_t)b[2 + j] * d;
#else
    for (int j = 0; j < QK / 2; ++j) {
        out[j] = (float)((int)(b[2 + j] & 0x0F) - 8) * d;
        out[j + QK / 2] = (float)((int)(b[2 + j] >> 4) - 8) * d;
    }
#endif
}

/* Rows [r0, r0+rc) x activation rows [m0, m0+mc). */
static void tile(const uint8_t *w, const float *x, float *y, int n, int k, int r0, int rc, int m0, int mc) {
    const int nb = k / QK;
    const size_t row_bytes = (size_t)nb * BLOCK_BYTES;
    float acc[MCHUNK][ROWS][UNROLL];
    float wf[ROWS][UNROLL][QK];
    memset(acc, 0, sizeof acc);
    for (int b0 = 0; b0 < nb; b0 += UNROLL) {
        const int ub = (nb - b0) < UNROLL ? (nb - b0) : UNROLL;
        for (int r = 0; r < rc; ++r)
            for (int u = 0; u < ub; ++u)
                dequant_block(w + (size_t)(r0 + r) * row_bytes + (size_t)(b0 + u) * BLOCK_BYTES, wf[r][u]);
        for (int i = 0; i < mc; ++i) {
            for (int u = 0; u < ub; ++u) {
                const float *xb = x + (size_t)(m0 + i) * (size_t)k + (size_t)(b0 + u) * QK;
                for (int r = 0; r < rc; ++r) {
                    float s = 0.0f;
                    for (int j = 0; j < QK; ++j) s += wf[r][u][j] * xb[j];
                    acc[i][r][u] += s;
                }
            }
        }
    }
    for (int i = 0; i < mc; ++i) {
        for (int r = 0; r < rc; ++r) {
            float s = 0.0f;
            for (int u = 0; u < UNROLL; ++u) s += acc[i][r][u];
            y[(size_t)(m0 + i) * (size_t)n + (size_t)(r0 + r)] = s;
        }
    }
}

void kernel(const uint8_t *w, const float *x, float *y, int m, int n, int k) {
    for (int m0 = 0; m0 < m; m0 += MCHUNK) {
        const int mc = (m - m0) < MCHUNK ? (m - m0) : MCHUNK;
        for (int r0 = 0; r0 < n; r0 += ROWS) {
            const int rc = (n - r0) < ROWS ? (n - r0) : ROWS;
            tile(w, x, y, n, k, r0, rc, m0, mc);
        }
    }
}
