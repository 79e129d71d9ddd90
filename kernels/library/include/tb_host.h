/*
 * Shared pieces of the host (C11) kernels: fp16 decode, per-32-block int8 activation
 * quantisation (the same rule as kernels/activations.py and tb_portability.h), one block's
 * integer dot product in the packed kernel layout, and the per-dispatch timer.
 *
 * Build switches: -DTB_ASYMMETRIC=0|1 (min term), -DTB_GROUP=32|16 (weights per scale) for the
 * tb-packed layout; with the tb-split layout's defines (TB_FMT_<NAME>, TB_QBITS, ...) it also brings
 * the host twins of tb_formats.h (chunk unpack, codebook lookups, K-quant scales, dp4a).
 */
#ifndef TB_HOST_H
#define TB_HOST_H

#define _DEFAULT_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

#define TB_QK 32
#define TB_SPG (TB_QK / TB_GROUP) /* scales per 32-block */

/* IEEE fp16 bits -> fp32 by bit manipulation (C11 has no portable half type). */
static inline float tb_h2f(uint16_t h) {
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

/* Quantised activations of one call: int8 values, fp32 block scales, int32 block sums. */
typedef struct {
    int8_t *q;    /* [m][k] */
    float *s;     /* [m][k/32] */
    int32_t *sum; /* [m][k/32] */
} tb_qact;

/* Quantise x[m][k] per 32-block; returns 0 on allocation failure (caller writes NaN). */
static int tb_quantize(const float *x, int m, int k, tb_qact *out) {
    const size_t nb = (size_t)k / TB_QK;
    out->q = (int8_t *)malloc((size_t)m * (size_t)k);
    out->s = (float *)malloc(sizeof(float) * (size_t)m * nb);
    out->sum = (int32_t *)malloc(sizeof(int32_t) * (size_t)m * nb);
    if (!out->q || !out->s || !out->sum) {
        free(out->q);
        free(out->s);
        free(out->sum);
        return 0;
    }
    for (size_t r = 0; r < (size_t)m; ++r) {
        for (size_t b = 0; b < nb; ++b) {
            const float *xb = x + r * (size_t)k + b * TB_QK;
            float amax = 0.0f;
            for (int j = 0; j < TB_QK; ++j) amax = fmaxf(amax, fabsf(xb[j]));
            const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
            int8_t *qb = out->q + r * (size_t)k + b * TB_QK;
            int32_t s = 0;
            for (int j = 0; j < TB_QK; ++j) {
                const int32_t q = (int32_t)rintf(xb[j] * inv);
                qb[j] = (int8_t)q;
                s += q;
            }
            out->s[r * nb + b] = amax / 127.0f;
            out->sum[r * nb + b] = s;
        }
    }
    return 1;
}

static void tb_qact_free(tb_qact *a) {
    free(a->q);
    free(a->s);
    free(a->sum);
}

/* One 32-block of a weight row against one quantised activation block, before the x scale. */
static inline float tb_block(const int8_t *w, const float *ws, float wmin, const int8_t *xq, int32_t xsum) {
#if TB_GROUP == 32
    int32_t d = 0;
    for (int j = 0; j < TB_QK; ++j) d += (int32_t)w[j] * (int32_t)xq[j];
    float r = ws[0] * (float)d;
#if TB_ASYMMETRIC
    r += wmin * (float)xsum;
#else
    (void)wmin;
    (void)xsum;
#endif
    return r;
#else
    int32_t d0 = 0, d1 = 0;
    for (int j = 0; j < 16; ++j) d0 += (int32_t)w[j] * (int32_t)xq[j];
    for (int j = 16; j < 32; ++j) d1 += (int32_t)w[j] * (int32_t)xq[j];
    (void)wmin;
    (void)xsum;
    return ws[0] * (float)d0 + ws[1] * (float)d1;
#endif
}

/* Scales (and min) of block b of row `row`, decoded to float. */
static inline void tb_block_scales(const uint16_t *scales, const uint16_t *mins, size_t row, size_t nb,
                                   size_t b, float *ws, float *wmin) {
    for (int c = 0; c < TB_SPG; ++c) ws[c] = tb_h2f(scales[row * nb * TB_SPG + b * TB_SPG + (size_t)c]);
#if TB_ASYMMETRIC
    *wmin = tb_h2f(mins[row * nb + b]);
#else
    (void)mins;
    *wmin = 0.0f;
#endif
}

typedef void (*tb_kernel_fn)(const int8_t *qs, const uint16_t *scales, const uint16_t *mins, const float *x,
                             float *y, int m, int n, int k);

/* Time one dispatch inside C so Python call overhead stays out of device_ns. */
int64_t tb_time_dispatch(tb_kernel_fn fn, const int8_t *qs, const uint16_t *scales, const uint16_t *mins,
                         const float *x, float *y, int m, int n, int k) {
#ifdef CLOCK_MONOTONIC_RAW
    const clockid_t clk = CLOCK_MONOTONIC_RAW;
#else
    const clockid_t clk = CLOCK_MONOTONIC;
#endif
    struct timespec t0, t1;
    clock_gettime(clk, &t0);
    fn(qs, scales, mins, x, y, m, n, k);
    clock_gettime(clk, &t1);
    return (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000LL + (int64_t)(t1.tv_nsec - t0.tv_nsec);
}

static void tb_fill_nan(float *y, int m, int n) {
    for (size_t i = 0; i < (size_t)m * (size_t)n; ++i) y[i] = NAN;
}

/* tb-split layout (TB_QBITS comes with it): the device format helpers of tb_formats.h, compiled as C11
 * on emulated byte permutes / dot products, so host parity exercises the GPU unpack code itself. */
#ifdef TB_QBITS
#define TB_HOST_TWIN 1
#include "tb_formats.h"
#endif

#endif
