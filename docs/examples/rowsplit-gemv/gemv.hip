/*
 * rowsplit-gemv, GPU source (HIP dialect; hipcc, clang -x hip, nvcc/NVRTC through tb_portability.h):
 *   y[M][N] = x[M][K] . dequant(W)[N][K]^T
 *
 * W is GGUF blocks exactly as stored: row r starts at w + r * (K / 32) * TB_BLOCK_BYTES.
 *   Q8_0 block (34 bytes): fp16 d, int8 q[32]
 *   Q4_0 block (18 bytes): fp16 d, 16 bytes of nibbles (low nibble = weight j, high = weight j+16), (q-8)*d
 * Blocks start at even offsets, so the kernel reads 16-bit words (no unaligned wider loads).
 *
 * Launch (tunebase-kernel.toml [launch]): block = (wave * ROWS, 1, 1), grid = (ceil(N / ROWS), 1, 1).
 * Wave w of workgroup g owns row g * ROWS + w; its lanes walk the row's K blocks, UNROLL blocks in flight
 * per lane per step, then reduce across the wave with lane shuffles. Parameters arrive as -DROWS, -DUNROLL.
 */
#include "tb_portability.h"

#ifndef ROWS
#error "compile with -DROWS=<rows per workgroup>"
#endif
#ifndef UNROLL
#error "compile with -DUNROLL=<K blocks per lane per step>"
#endif
#if defined(TB_FMT_Q8_0)
#define RS_BLOCK_BYTES 34
#elif defined(TB_FMT_Q4_0)
#define RS_BLOCK_BYTES 18
#else
#error "rowsplit-gemv reads Q8_0 or Q4_0 (compile with -DTB_FMT_Q8_0=1 or -DTB_FMT_Q4_0=1)"
#endif
#define RS_QK 32
#define RS_MCHUNK 4 /* activation rows accumulated together */

/* Dot product of one block with 32 activations. */
TB_DEV float rs_block_dot(const tb_u16 *b, const float *__restrict__ xb) {
    const float d = tb_h2f(b[0]);
    float s = 0.0f;
#if defined(TB_FMT_Q8_0)
#pragma unroll
    for (int j = 0; j < RS_QK / 2; ++j) {
        const tb_u16 v = b[1 + j];
        s += (float)(signed char)(v & 0xFF) * xb[2 * j] + (float)(signed char)(v >> 8) * xb[2 * j + 1];
    }
#else
#pragma unroll
    for (int j = 0; j < RS_QK / 4; ++j) {
        const tb_u16 v = b[1 + j];
        const int lo0 = (int)(v & 0x0F) - 8, hi0 = (int)((v >> 4) & 0x0F) - 8;
        const int lo1 = (int)((v >> 8) & 0x0F) - 8, hi1 = (int)(v >> 12) - 8;
        s += (float)lo0 * xb[2 * j] + (float)lo1 * xb[2 * j + 1];
        s += (float)hi0 * xb[2 * j + 16] + (float)hi1 * xb[2 * j + 17];
    }
#endif
    return s * d;
}

extern "C" __global__ TB_LAUNCH_BOUNDS(TB_WAVE * ROWS, 1) void kernel(
    const unsigned char *__restrict__ w, const float *__restrict__ x, float *__restrict__ y, int m, int n, int k) {
    const int lane = TB_TID % TB_WAVE;
    const int row = TB_BID_X * ROWS + TB_TID / TB_WAVE;
    if (row >= n) return; /* whole waves only: the shuffles below never see an inactive lane */
    const int nb = k / RS_QK;
    const tb_u16 *wrow = (const tb_u16 *)(w + (tb_size)row * (tb_size)nb * RS_BLOCK_BYTES);
    for (int m0 = 0; m0 < m; m0 += RS_MCHUNK) {
        const int mc = (m - m0) < RS_MCHUNK ? (m - m0) : RS_MCHUNK;
        float acc[RS_MCHUNK][UNROLL];
#pragma unroll
        for (int i = 0; i < RS_MCHUNK; ++i)
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) acc[i][u] = 0.0f;
        for (int b0 = lane; b0 < nb; b0 += TB_WAVE * UNROLL) {
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const int b = b0 + u * TB_WAVE;
                if (b < nb) {
                    const tb_u16 *blk = wrow + (tb_size)b * (RS_BLOCK_BYTES / 2);
#pragma unroll
                    for (int i = 0; i < RS_MCHUNK; ++i)
                        if (i < mc)
                            acc[i][u] += rs_block_dot(blk, x + (tb_size)(m0 + i) * (tb_size)k + (tb_size)b * RS_QK);
                }
            }
        }
#pragma unroll
        for (int i = 0; i < RS_MCHUNK; ++i) {
            float s = 0.0f;
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) s += acc[i][u];
#pragma unroll
            for (int off = TB_WAVE / 2; off > 0; off >>= 1) s += tb_shfl_xor(s, off);
            if (lane == 0 && i < mc) y[(tb_size)(m0 + i) * (tb_size)n + (tb_size)row] = s;
        }
    }
}
