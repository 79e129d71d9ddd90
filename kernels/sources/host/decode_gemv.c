/*
 * Tunebase host decode GEMV:  y[M][N] = x[M][K] . dequant(W)[N][K]^T
 *
 * W is read directly as GGUF blocks (row-major, K/32 blocks per row).
 * Compile once per format:
 *   cc -O3 -std=c11 -fPIC -shared -DTB_FORMAT_Q8_0 [-DTB_VARIANT_LIST='TB_V(1,4) TB_V(2,8)'] ...
 * Every TB_V(kb, tw) in TB_VARIANT_LIST becomes one exported symbol
 *   void tb_decode_<fmt>_kb<kb>_tw<tw>(const uint8_t *w, const float *x, float *y, int m, int n, int k)
 * kb = independent K-block partial sums per row (split-K / ILP depth),
 * tw = rows per tile sharing one pass over the activations.
 */
#define _DEFAULT_SOURCE
#include <stdint.h>
#include <string.h>
#include <time.h>

#define TB_QK 32   /* weights per block for Q8_0 and Q4_0 */
#define TB_MAXM 4  /* activation rows processed together; larger M is done in groups */

#if defined(TB_FORMAT_Q8_0)
#define TB_FMT q8_0
#define TB_BLOCK_BYTES 34
#elif defined(TB_FORMAT_Q4_0)
#define TB_FMT q4_0
#define TB_BLOCK_BYTES 18
#else
#error "define TB_FORMAT_Q8_0 or TB_FORMAT_Q4_0"
#endif

#ifndef TB_VARIANT_LIST
#define TB_VARIANT_LIST TB_V(1, 4) TB_V(1, 8) TB_V(2, 4) TB_V(2, 8) TB_V(4, 4) TB_V(4, 8) TB_V(8, 4) TB_V(8, 8)
#endif

typedef void (*tb_kernel_fn)(const uint8_t *w, const float *x, float *y, int m, int n, int k);

/* IEEE fp16 -> fp32 by bit manipulation (C11 has no portable half type). */
static inline float tb_h2f(const uint8_t *p) {
    uint16_t h = (uint16_t)(p[0] | (p[1] << 8)); /* GGUF is little-endian */
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t man = h & 0x3FFu;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while ((man & 0x400u) == 0) {
                man <<= 1;
                exp--;
            }
            man &= 0x3FFu;
            bits = sign | (exp << 23) | (man << 13);
        }
    } else if (exp == 0x1F) {
        bits = sign | 0x7F800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Decode one block's quants to floats (scale returned separately, applied after the dot). */
static inline float tb_block_decode(const uint8_t *blk, float *q) {
#if defined(TB_FORMAT_Q8_0)
    const int8_t *qs = (const int8_t *)(blk + 2);
    for (int j = 0; j < TB_QK; ++j) q[j] = (float)qs[j];
#else
    const uint8_t *qs = blk + 2;
    for (int j = 0; j < TB_QK / 2; ++j) {
        q[j] = (float)((int)(qs[j] & 0x0F) - 8);
        q[j + TB_QK / 2] = (float)((int)(qs[j] >> 4) - 8);
    }
#endif
    return tb_h2f(blk);
}

static inline float tb_dot32(const float *a, const float *b) {
    float s = 0.0f;
    for (int j = 0; j < TB_QK; ++j) s += a[j] * b[j];
    return s;
}

/*
 * One tile: rows [r0, r0+tc) x activation rows [m0, m0+mc). KB and TW are compile-time
 * so the accumulator array has a fixed shape; tc <= TW is the live row count.
 */
static inline void tb_tile(const uint8_t *w, const float *x, float *y, int n, int k, int r0, int tc,
                           int m0, int mc, int kb, int tw, float *acc /* [TB_MAXM][tw][kb] */) {
    const int nb = k / TB_QK;
    const size_t row_bytes = (size_t)nb * TB_BLOCK_BYTES;
    float q[TB_QK];
    memset(acc, 0, sizeof(float) * (size_t)TB_MAXM * (size_t)tw * (size_t)kb);
    for (int b0 = 0; b0 < nb; b0 += kb) {
        const int ub = (nb - b0) < kb ? (nb - b0) : kb;
        for (int t = 0; t < tc; ++t) {
            const uint8_t *wrow = w + (size_t)(r0 + t) * row_bytes;
            for (int u = 0; u < ub; ++u) {
                const int b = b0 + u;
                const float d = tb_block_decode(wrow + (size_t)b * TB_BLOCK_BYTES, q);
                for (int i = 0; i < mc; ++i) {
                    const float *xb = x + (size_t)(m0 + i) * (size_t)k + (size_t)b * TB_QK;
                    acc[((size_t)i * tw + t) * kb + u] += d * tb_dot32(q, xb);
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

#define TB_SYM(fmt, kb, tw) tb_decode_##fmt##_kb##kb##_tw##tw
#define TB_SYM_X(fmt, kb, tw) TB_SYM(fmt, kb, tw) /* expands TB_FMT first */

/* Each variant: full tiles with constant tc = TW (constant-folded after inlining), then a tail. */
#define TB_V(KB, TW)                                                                          \
    void TB_SYM_X(TB_FMT, KB, TW)(const uint8_t *w, const float *x, float *y, int m, int n,   \
                                  int k) {                                                    \
        float acc[TB_MAXM * (TW) * (KB)];                                                     \
        for (int m0 = 0; m0 < m; m0 += TB_MAXM) {                                             \
            const int mc = (m - m0) < TB_MAXM ? (m - m0) : TB_MAXM;                           \
            int r0 = 0;                                                                       \
            for (; r0 + (TW) <= n; r0 += (TW))                                                \
                tb_tile(w, x, y, n, k, r0, (TW), m0, mc, (KB), (TW), acc);                    \
            if (r0 < n) tb_tile(w, x, y, n, k, r0, n - r0, m0, mc, (KB), (TW), acc);          \
        }                                                                                     \
    }

TB_VARIANT_LIST

#undef TB_V

/* Time one dispatch inside C so Python call overhead stays out of device_ns. */
int64_t tb_time_dispatch(tb_kernel_fn fn, const uint8_t *w, const float *x, float *y, int m, int n, int k) {
#ifdef CLOCK_MONOTONIC_RAW
    const clockid_t clk = CLOCK_MONOTONIC_RAW;
#else
    const clockid_t clk = CLOCK_MONOTONIC;
#endif
    struct timespec t0, t1;
    clock_gettime(clk, &t0);
    fn(w, x, y, m, n, k);
    clock_gettime(clk, &t1);
    return (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000LL + (int64_t)(t1.tv_nsec - t0.tv_nsec);
}
