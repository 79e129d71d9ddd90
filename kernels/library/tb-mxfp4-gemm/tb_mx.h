/*
 * tb_mx.h: OCP microscaling (MX) helpers shared by the three sources of tb-mxfp4-gemm
 * (host C11, CUDA / NVRTC, HIP through clang 22), so the rules the host checks are the rules
 * the GPUs run:
 *   - E8M0 scale byte e -> 2^(e - 127); E2M1 code (sign in bit 3) -> its value;
 *   - the activation rule of the gfx950 and host paths: 32 floats -> E4M3 (OCP "FN") codes with one
 *     E8M0 scale, shared exponent floor(log2 amax) - 8 (OCP MX v1.0 section 6.3), round to nearest
 *     even, saturating at 448; kernels/formats/fp4.py mxfp8_activations is the numpy twin;
 *   - the repack of one GGUF MXFP4 block (e, qs[16]: weight j low nibble, j + 16 high) into the
 *     planar layout the kernels read: codes with weight 2i in the low nibble of byte i (the OCP and
 *     MFMA operand order), scales transposed to [K/32][N] (kernels/formats/fp4.py planar_mxfp4).
 * Device sources include tb_portability.h first.
 */
#ifndef TB_MX_H
#define TB_MX_H

#if defined(TB_CUDA) || defined(TB_AMD)
#define TB_MX_FN static __device__ TB_FORCEINLINE
#define tb_mx_rintf(x) tb_rintf(x)
#else
#include <math.h>
#include <string.h>
#define TB_MX_FN static inline
#define tb_mx_rintf(x) rintf(x)
#endif

typedef unsigned char tb_mx_u8;

TB_MX_FN float tb_mx_u2f(unsigned u) {
#if defined(TB_CUDA)
    return __uint_as_float(u);
#elif defined(TB_AMD)
    return __builtin_bit_cast(float, u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

TB_MX_FN unsigned tb_mx_f2u(float f) {
#if defined(TB_CUDA)
    return __float_as_uint(f);
#elif defined(TB_AMD)
    return __builtin_bit_cast(unsigned, f);
#else
    unsigned u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

/* E8M0 -> 2^(e - 127); e = 0 is 2^-127, a float subnormal. */
TB_MX_FN float tb_mx_e8m0(unsigned e) { return e ? tb_mx_u2f(e << 23) : tb_mx_u2f(0x00400000u); }

/* E2M1 code -> value. The magnitude bits placed at float bits 22..24 read as 2^-126 * value, also for
 * the one subnormal (0.5); the multiply by 2^126 is exact. */
TB_MX_FN float tb_mx_e2m1(unsigned c) {
    return tb_mx_u2f(((c & 8u) << 28) | ((c & 7u) << 22)) * 0x1p126f;
}

/* E4M3 code (sign in bit 7) -> value. */
TB_MX_FN float tb_mx_e4m3(unsigned c) {
    const unsigned e = (c >> 3) & 15u, m = c & 7u;
    const float mag = e ? tb_mx_u2f(((e + 120u) << 23) | (m << 20)) : (float)m * 0x1p-9f;
    return (c & 0x80u) ? -mag : mag;
}

/* E8M0 byte of a 32-block whose largest magnitude is amax (amax = 0 gives the smallest scale). */
TB_MX_FN unsigned tb_mx_e4m3_scale(float amax) {
    int s = (int)((tb_mx_f2u(amax) >> 23) & 0xFFu) - 127 - 8; /* subnormal or zero amax: below -127 */
    if (s < -127) s = -127;
    return (unsigned)(s + 127);
}

/* 2^-(e - 127): maps the block onto the E4M3 grid (e <= 246 here, so the power is a normal float). */
TB_MX_FN float tb_mx_inv_scale(unsigned e) { return tb_mx_u2f((254u - e) << 23); }

/* |v| (< 512 after scaling) -> E4M3 magnitude code, nearest even, saturating at 448 (0x7E). The
 * mantissa carry into the exponent falls out of the addition. */
TB_MX_FN unsigned tb_mx_e4m3_mag(float a) {
    if (!(a < 448.0f)) return 0x7Eu;
    const int e = (int)((tb_mx_f2u(a) >> 23) & 0xFFu) - 127;
    if (e < -6) return (unsigned)tb_mx_rintf(a * 512.0f); /* subnormal step 2^-9; 8 is 2^-6 = code 8 */
    const unsigned q = (unsigned)tb_mx_rintf(a * tb_mx_u2f((unsigned)(130 - e) << 23)); /* 8 .. 16 */
    const unsigned code = ((unsigned)(e + 7) << 3) + q - 8u;
    return code > 0x7Eu ? 0x7Eu : code;
}

TB_MX_FN unsigned tb_mx_e4m3_code(float v, float inv) {
    return tb_mx_e4m3_mag((v < 0.0f ? -v : v) * inv) | (v < 0.0f ? 0x80u : 0u);
}

/* Weight j of a GGUF MXFP4 block (17 bytes: e, then qs[16]). */
TB_MX_FN unsigned tb_mx_gguf_code(const tb_mx_u8 *block, int j) {
    return j < 16 ? (block[1 + j] & 15u) : (block[1 + j - 16] >> 4);
}

/* One GGUF block -> 16 planar code bytes (weight 2i low nibble of byte i) and its scale byte. */
TB_MX_FN void tb_mx_repack(const tb_mx_u8 *block, tb_mx_u8 *codes, tb_mx_u8 *scale) {
    for (int i = 0; i < 16; ++i)
        codes[i] = (tb_mx_u8)(tb_mx_gguf_code(block, 2 * i) | (tb_mx_gguf_code(block, 2 * i + 1) << 4));
    *scale = block[0];
}

#endif
