/*
 * Tunebase format helpers for the tb-split layout (kernels/formats/split.py), for decode AND prefill.
 *
 * One header, three compilers: device code through tb_portability.h (hipcc, clang -x hip, nvcc/NVRTC)
 * and, with -DTB_HOST_TWIN (tb_host.h defines it), plain C11 on the host, where the same unpack code
 * runs on emulated byte permutes / dot products. Host parity therefore checks the very algorithms
 * the GPUs run (per permute style: -DTB_PERM_STYLE=0 portable, 1 NVIDIA prmt, 2 AMD v_perm).
 *
 * Layout (per row, parts stored row-contiguously, each GGUF block contributes TB_*_BYTES to each):
 *   qs [N][K*TB_QBITS/8]  payload, GGUF order inside each block      16-byte aligned per 16 bytes
 *   qh [N][K/TB_BLOCK_WEIGHTS*TB_QH_BYTES]   high bits (Q5_0/Q5_1/Q6_K)
 *   sc [N][K/TB_BLOCK_WEIGHTS*TB_SC_BYTES]   d / d,m / K-quant scale bytes, GGUF order
 *
 * The unit of work is a CHUNK: 16 payload bytes (one 16-byte vector load). A chunk holds one run of
 * 16 weights (Q8_0) or two runs of 16 (every 4-bit format): the low nibbles of its 16 bytes are the
 * weights p_lo .. p_lo+15, the high nibbles p_hi .. p_hi+15:
 *   Q4_0 Q4_1 Q5_0 Q5_1 IQ4_NL IQ4_XS  chunk c = 32-weight (sub-)block c:  p_lo = 32c,  p_hi = p_lo + 16
 *   Q4_K    (s, j) = (c/8, c%8), g = j/2, h = j%2:       p_lo = 256s + 64g + 16h,  p_hi = p_lo + 32
 *   Q6_K    (s, j) = (c/8, c%8), H = j/4, q = j%4:       p_lo = 256s + 128H + 16q, p_hi = p_lo + 64
 *   Q8_0    p_lo = 16c (one run)
 * Weight value of run r, byte j:   w = s_r * v_j + m_r   (v_j the unpacked int8, exact in int8;
 * for Q4_0 / Q5_0, m_r = TB_Q_OFFSET * s_r, see tb_chunk_weight for the bit-exact float form).
 * For the dot product with int8 activations quantised per 32-block (xs scale, xsum sum of q):
 *   sum_j w_j x_j = xs * (s_r * dot_r) + [owner] m_r * (xs * xsum)   per run's 32-block,
 * where the min term counts a whole 32-block once: TB_MIN_OWNER(c) says which chunk adds it.
 *
 * Build switches: -DTB_FMT_<NAME>=1 (exactly one), TB_QBITS/TB_QS_BYTES/TB_QH_BYTES/TB_SC_BYTES
 * (kernels/packages/layouts.py passes them), optional -DTB_PERM_STYLE.
 */
#ifndef TB_FORMATS_H
#define TB_FORMATS_H

#if defined(TB_HOST_TWIN)
#include <stdint.h>
#include <string.h>
typedef int8_t tb_i8;
typedef int32_t tb_i32;
typedef uint32_t tb_u32;
typedef uint16_t tb_u16;
typedef uint8_t tb_u8;
#define TB_FN static inline
#else
#include "tb_portability.h"
typedef unsigned char tb_u8;
#define TB_FN TB_DEV
#endif

/* ---- format switches ----------------------------------------------------------------- */
#if defined(TB_FMT_Q8_0)
#define TB_RUNS 1
#elif defined(TB_FMT_Q4_0) || defined(TB_FMT_Q4_1) || defined(TB_FMT_Q5_0) || defined(TB_FMT_Q5_1) || \
    defined(TB_FMT_IQ4_NL) || defined(TB_FMT_IQ4_XS) || defined(TB_FMT_Q4_K) || defined(TB_FMT_Q6_K)
#define TB_RUNS 2
#else
#error "tb_formats.h: define one of TB_FMT_Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/IQ4_NL/Q4_K/Q6_K/IQ4_XS"
#endif
/* both runs of a chunk inside one 32-block of x with one scale: their int dots add before scaling */
#if defined(TB_FMT_Q4_K) || defined(TB_FMT_Q6_K) || defined(TB_FMT_Q8_0)
#define TB_SAME_BLOCK 0
#else
#define TB_SAME_BLOCK 1
#endif
/* a min / offset term multiplying the activation block sum */
#if defined(TB_FMT_Q4_0) || defined(TB_FMT_Q4_1) || defined(TB_FMT_Q5_0) || defined(TB_FMT_Q5_1) || \
    defined(TB_FMT_Q4_K)
#define TB_HAS_MIN 1
#else
#define TB_HAS_MIN 0
#endif
/* integer offset of symmetric formats stored unsigned (w = d * (v + offset)); a true min otherwise */
#if defined(TB_FMT_Q4_0)
#define TB_Q_OFFSET (-8)
#elif defined(TB_FMT_Q5_0)
#define TB_Q_OFFSET (-16)
#else
#define TB_Q_OFFSET 0
#endif
#if defined(TB_FMT_Q4_1) || defined(TB_FMT_Q5_1) || defined(TB_FMT_Q4_K)
#define TB_TRUE_MIN 1
#else
#define TB_TRUE_MIN 0
#endif
#define TB_CHUNK_WEIGHTS (16 * TB_RUNS)          /* weights per 16-byte payload chunk */
#define TB_CHUNKS_PER_BLOCK (TB_BLOCK_WEIGHTS / TB_CHUNK_WEIGHTS)
/* Q4_K: the chunk with h == 0 adds the min terms of both 32-blocks its pair covers */
#if defined(TB_FMT_Q4_K)
#define TB_MIN_OWNER(c) (((c) & 1) == 0)
#else
#define TB_MIN_OWNER(c) 1
#endif

#ifndef TB_PERM_STYLE
#if defined(TB_HOST_TWIN)
#define TB_PERM_STYLE 0
#elif defined(TB_CUDA)
#define TB_PERM_STYLE 1
#else
#define TB_PERM_STYLE 2
#endif
#endif

/* ---- primitives: device intrinsics, or their exact emulation on the host ---------------- */
/* __byte_perm(x, y, s): byte n of the result = byte (s >> 4n) & 7 of {y:x}  (PTX prmt, 3-bit selectors) */
TB_FN tb_u32 tb_prmt(tb_u32 x, tb_u32 y, tb_u32 s) {
#if defined(TB_CUDA) && !defined(TB_HOST_TWIN)
    return __byte_perm(x, y, s);
#else
    const unsigned long long v = ((unsigned long long)y << 32) | x;
    tb_u32 r = 0;
    for (int n = 0; n < 4; ++n) r |= (tb_u32)((v >> (8 * ((s >> (4 * n)) & 7))) & 0xFF) << (8 * n);
    return r;
#endif
}

/* v_perm_b32(s0, s1, sel): selector byte b in 0..7 picks byte b of {s0:s1} (0-3 from s1, 4-7 from s0);
 * 0x0C gives 0x00 (only these selector values are used here) */
TB_FN tb_u32 tb_vperm(tb_u32 s0, tb_u32 s1, tb_u32 sel) {
#if defined(TB_AMD) && !defined(TB_HOST_TWIN)
    return __builtin_amdgcn_perm(s0, s1, sel);
#else
    const unsigned long long v = ((unsigned long long)s0 << 32) | s1;
    tb_u32 r = 0;
    for (int n = 0; n < 4; ++n) {
        const tb_u32 b = (sel >> (8 * n)) & 0xFF;
        const tb_u32 byte = b < 8 ? (tb_u32)((v >> (8 * b)) & 0xFF) : 0u;
        r |= byte << (8 * n);
    }
    return r;
#endif
}

/* PTX prmt in its default mode, without __byte_perm's masking of the selector to 3 bits per nibble (the
 * masks cost a LOP3 per lookup in the IQ4 decode): only s[15:0] select, and a selector nibble with bit 3 set
 * yields its byte's sign replicated; the callers discard those bytes, so only bit 3 = 0 must be exact */
TB_FN tb_u32 tb_prmt_raw(tb_u32 x, tb_u32 y, tb_u32 s) {
#if defined(TB_CUDA) && !defined(TB_HOST_TWIN) && !defined(TB_CUDA_EMULATION)
    tb_u32 r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(y), "r"(s));
    return r;
#else
    const unsigned long long v = ((unsigned long long)y << 32) | x;
    tb_u32 r = 0;
    for (int n = 0; n < 4; ++n) {
        const tb_u32 sel = (s >> (4 * n)) & 0xFu;
        tb_u32 b = (tb_u32)((v >> (8 * (sel & 7u))) & 0xFFu);
        if (sel & 8u) b = (b & 0x80u) ? 0xFFu : 0u;
        r |= b << (8 * n);
    }
    return r;
#endif
}

/* sum of 4 int8 x int8 products + c: dp4a on sm_61+, v_dot4_i32_i8 (sdot4) on gfx906/90a/942/950 */
TB_FN tb_i32 tb_dp4a(tb_i32 a, tb_i32 b, tb_i32 c) {
#if !defined(TB_HOST_TWIN) && defined(TB_CUDA) && (!defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 610)
    return __dp4a(a, b, c);
#elif !defined(TB_HOST_TWIN) && defined(TB_AMD)
    return __builtin_amdgcn_sdot4(a, b, c, false);
#else
    for (int n = 0; n < 4; ++n) c += (tb_i32)(tb_i8)(a >> (8 * n)) * (tb_i32)(tb_i8)(b >> (8 * n));
    return c;
#endif
}

/* fp16 bits -> float */
TB_FN float tb_half(tb_u32 bits) {
#if defined(TB_HOST_TWIN)
    return tb_h2f((uint16_t)bits);
#else
    return tb_h2f((tb_u16)bits);
#endif
}

/* aligned little loads; on the host through memcpy (no aliasing assumptions) */
#if defined(TB_HOST_TWIN)
TB_FN tb_u32 tb_ld_u16(const tb_u8 *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}
TB_FN tb_u32 tb_ld_u32(const tb_u8 *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
TB_FN void tb_ld_u32x4(const tb_u8 *p, tb_u32 *w) { memcpy(w, p, 16); }
TB_FN void tb_ld_u32x2(const tb_u8 *p, tb_u32 *w) { memcpy(w, p, 8); }
#else
struct alignas(16) tb_u32x4 {
    tb_u32 x, y, z, w;
};
struct alignas(8) tb_u32x2 {
    tb_u32 x, y;
};
TB_FN tb_u32 tb_ld_u16(const tb_u8 *p) { return *(const tb_u16 *)p; }
TB_FN tb_u32 tb_ld_u32(const tb_u8 *p) { return *(const tb_u32 *)p; }
TB_FN void tb_ld_u32x4(const tb_u8 *p, tb_u32 *w) {
    const tb_u32x4 v = *(const tb_u32x4 *)p;
    w[0] = v.x;
    w[1] = v.y;
    w[2] = v.z;
    w[3] = v.w;
}
TB_FN void tb_ld_u32x2(const tb_u8 *p, tb_u32 *w) {
    const tb_u32x2 v = *(const tb_u32x2 *)p;
    w[0] = v.x;
    w[1] = v.y;
}
#endif

/* ---- bit tricks shared by the unpackers --------------------------------------------------- */
#define TB_NIB_LO(w) ((w) & 0x0F0F0F0Fu)
#define TB_NIB_HI(w) (((w) >> 4) & 0x0F0F0F0Fu)

/* bits 0..3 of b -> bit 4 of bytes 0..3 (Q5 high bits); the multiply shifts cannot carry */
TB_FN tb_u32 tb_spread4_to_bit4(tb_u32 b) { return (((b & 0xFu) * 0x00204081u) & 0x01010101u) << 4; }

/* per-byte v - c for bytes v >= 0 with v - c in [-128, 127]: no borrow crosses a byte */
TB_FN tb_u32 tb_bytes_sub(tb_u32 v, tb_u32 c) { return ((v | 0x80808080u) - c) ^ 0x80808080u; }

/* IQ4_NL / IQ4_XS codebook, 4 values per word: kvalues[0..3], [4..7], [8..11], [12..15] */
#define TB_IQ4_T0 0xBFAD9881u /* -127 -104  -83  -65 */
#define TB_IQ4_T1 0xF6EADDCFu /*  -49  -35  -22  -10 */
#define TB_IQ4_T2 0x26190D01u /*    1   13   25   38 */
#define TB_IQ4_T3 0x71594535u /*   53   69   89  113 */

/* codebook values of the 8 nibbles of w in nibble order: *r0 = nibbles 0..3 (bytes: lo w0, hi w0, lo w1, hi w1),
 * *r1 = nibbles 4..7. prmt reads 4 selector nibbles: w's own nibbles index the lower half-table (bytes of
 * nibbles with bit 3 set: the sign mode, discarded), w ^ 0x8888.. the upper one (the other way round), and a
 * third prmt picks the upper half-table's byte where bit 3 is set: 6 prmt + 7 ALU per word, t0 / t2 in registers
 * (tb_iq4_tables). tb_iq4_lookup's form (sm_90a, NVRTC 13.0): 8 prmt, 9 ALU (__byte_perm's selector masks,
 * per-half selectors) and ~3.5 moves re-materialising the tables. A caller stores x in the same nibble order. */
TB_FN void tb_iq4_lookup_il_t(tb_u32 w, tb_u32 t0, tb_u32 t2, tb_u32 *r0, tb_u32 *r1) {
    const tb_u32 wx = w ^ 0x88888888u;
    const tb_u32 sel = ((w >> 1) & 0x44444444u) | 0x32103210u;
    *r0 = tb_prmt_raw(tb_prmt_raw(t0, TB_IQ4_T1, w), tb_prmt_raw(t2, TB_IQ4_T3, wx), sel);
    *r1 = tb_prmt_raw(tb_prmt_raw(t0, TB_IQ4_T1, w >> 16), tb_prmt_raw(t2, TB_IQ4_T3, wx >> 16), sel >> 16);
}
/* TB_IQ4_T0 and TB_IQ4_T2 (the prmt operands that must sit in registers) as values ptxas cannot fold (zero: 0 at
 * run time and per lane, e.g. (k >> 31) & tid: ptxas folds %laneid >> 5 and keeps a warp-uniform value in a
 * uniform register, moved again before every use): given the constants it re-materialised them before every
 * lookup (sm_90a NVRTC 13.0: ~3.5 moves per payload word) */
TB_FN void tb_iq4_tables(tb_u32 zero, tb_u32 *t0, tb_u32 *t2) {
    *t0 = TB_IQ4_T0 ^ zero;
    *t2 = TB_IQ4_T2 ^ zero;
}

/* codebook values of the 4 low nibbles (-> *lo, byte order) and 4 high nibbles (-> *hi) of w */
TB_FN void tb_iq4_lookup(tb_u32 w, tb_i32 *lo, tb_i32 *hi) {
#if TB_PERM_STYLE == 1
    /* prmt reads 4 selector nibbles with 3 bits each: w's own nibbles index the half-tables directly
     * (lo w0, hi w0, lo w1, hi w1), a third prmt picks the upper half-table where a nibble's bit 3 is set.
     * (tb-decode's CUDA kernels use tb_iq4_lookup_il_t; this form is kept for tb-prefill, whose
     * N64/M128/W2x4/K8 MB2 variants spilled 16-24 bytes with it under NVRTC 13.0) */
    const tb_u32 a0 = tb_prmt(TB_IQ4_T0, TB_IQ4_T1, w), b0 = tb_prmt(TB_IQ4_T2, TB_IQ4_T3, w);
    const tb_u32 r0 = tb_prmt(a0, b0, 0x3210u | ((w & 0x8888u) >> 1));
    const tb_u32 w1 = w >> 16;
    const tb_u32 a1 = tb_prmt(TB_IQ4_T0, TB_IQ4_T1, w1), b1 = tb_prmt(TB_IQ4_T2, TB_IQ4_T3, w1);
    const tb_u32 r1 = tb_prmt(a1, b1, 0x3210u | ((w1 & 0x8888u) >> 1));
    *lo = (tb_i32)tb_prmt(r0, r1, 0x6420u);
    *hi = (tb_i32)tb_prmt(r0, r1, 0x7531u);
#elif TB_PERM_STYLE == 2
    /* v_perm selects with byte selectors 0..7 from {s0:s1}; bit 3 of the index picks the half-table
     * through a byte mask (0xFF where set: (b << 5) - (b >> 3) per byte, no carries) and v_bfi */
    const tb_u32 il = TB_NIB_LO(w), ih = TB_NIB_HI(w);
    const tb_u32 ml = ((il & 0x08080808u) << 5) - ((il & 0x08080808u) >> 3);
    const tb_u32 mh = ((ih & 0x08080808u) << 5) - ((ih & 0x08080808u) >> 3);
    const tb_u32 sl = il & 0x07070707u, sh = ih & 0x07070707u;
    const tb_u32 ll = tb_vperm(TB_IQ4_T1, TB_IQ4_T0, sl), lh = tb_vperm(TB_IQ4_T3, TB_IQ4_T2, sl);
    const tb_u32 hl = tb_vperm(TB_IQ4_T1, TB_IQ4_T0, sh), hh = tb_vperm(TB_IQ4_T3, TB_IQ4_T2, sh);
    *lo = (tb_i32)((lh & ml) | (ll & ~ml));
    *hi = (tb_i32)((hh & mh) | (hl & ~mh));
#else
    const tb_u32 table[4] = {TB_IQ4_T0, TB_IQ4_T1, TB_IQ4_T2, TB_IQ4_T3};
    tb_u32 l = 0, h = 0;
    for (int n = 0; n < 4; ++n) {
        const tb_u32 a = (w >> (8 * n)) & 0xF, b = (w >> (8 * n + 4)) & 0xF;
        l |= ((table[a >> 2] >> (8 * (a & 3))) & 0xFF) << (8 * n);
        h |= ((table[b >> 2] >> (8 * (b & 3))) & 0xFF) << (8 * n);
    }
    *lo = (tb_i32)l;
    *hi = (tb_i32)h;
#endif
}

/* ---- the chunk API ------------------------------------------------------------------------- */

/* start weight (inside the row) of each run of chunk c */
TB_FN int tb_chunk_p_lo(int c) {
#if defined(TB_FMT_Q8_0)
    return 16 * c;
#elif defined(TB_FMT_Q4_K)
    return 256 * (c >> 3) + 64 * ((c & 7) >> 1) + 16 * (c & 1);
#elif defined(TB_FMT_Q6_K)
    return 256 * (c >> 3) + 128 * ((c & 7) >> 2) + 16 * (c & 3);
#else
    return 32 * c;
#endif
}
TB_FN int tb_chunk_p_hi(int c) {
#if defined(TB_FMT_Q4_K)
    return tb_chunk_p_lo(c) + 32;
#elif defined(TB_FMT_Q6_K)
    return tb_chunk_p_lo(c) + 64;
#else
    return tb_chunk_p_lo(c) + 16;
#endif
}

/* which (chunk, run) reads the 16 weights 16*hb .. 16*hb+15 of a row: the inverse of tb_chunk_p_lo / p_hi
 * (a kernel stages x so that the x a chunk's run needs sits at that chunk's slot) */
TB_FN void tb_half_slot(int hb, int *c, int *run) {
#if defined(TB_FMT_Q8_0)
    *c = hb;
    *run = 0;
#elif defined(TB_FMT_Q4_K)
    const int s = hb >> 4, lh = hb & 15;
    *c = 8 * s + 2 * (lh >> 2) + (lh & 1);
    *run = (lh >> 1) & 1;
#elif defined(TB_FMT_Q6_K)
    const int s = hb >> 4, lh = hb & 15;
    *c = 8 * s + 4 * (lh >> 3) + (lh & 3);
    *run = (lh >> 2) & 1;
#else
    *c = hb >> 1;
    *run = hb & 1;
#endif
}

/* raw scale / high-bit words of one chunk, loaded before any arithmetic (so loads overlap) */
typedef struct {
    tb_u32 w[4];
    tb_u32 e;
} tb_meta;

/* One chunk unpacked: int8 words of each run, its scale and additive min (w = s * v + m) */
typedef struct {
    tb_i32 lo[4];
    tb_i32 hi[4];
    float s_lo, s_hi;
    float m_lo, m_hi;
} tb_chunk;

/* qh_row / sc_row: this row's parts (qh may be null for formats without high bits) */
TB_FN tb_meta tb_load_meta(const tb_u8 *qh_row, const tb_u8 *sc_row, int c) {
    tb_meta m;
    m.w[0] = m.w[1] = m.w[2] = m.w[3] = 0;
    m.e = 0;
    (void)qh_row;
#if defined(TB_FMT_Q8_0)
    m.e = tb_ld_u16(sc_row + 2 * (c >> 1));
#elif defined(TB_FMT_Q4_0) || defined(TB_FMT_IQ4_NL)
    m.e = tb_ld_u16(sc_row + 2 * c);
#elif defined(TB_FMT_Q4_1)
    m.e = tb_ld_u32(sc_row + 4 * c);
#elif defined(TB_FMT_Q5_0)
    m.e = tb_ld_u16(sc_row + 2 * c);
    m.w[0] = tb_ld_u32(qh_row + 4 * c);
#elif defined(TB_FMT_Q5_1)
    m.e = tb_ld_u32(sc_row + 4 * c);
    m.w[0] = tb_ld_u32(qh_row + 4 * c);
#elif defined(TB_FMT_Q4_K)
    { /* d|dmin, and the 2-byte pieces of scales[12] that the pair (2g, 2g+1) of sub-blocks reads:
       * A = scales[2(g&1)..], B = scales[4+2(g&1)..], C = scales[8+2(g&1)..] (C only for g >= 2) */
        const tb_u8 *s = sc_row + 16 * (c >> 3);
        const int o = 2 * (((c & 7) >> 1) & 1);
        m.w[0] = tb_ld_u32(s);
        m.e = tb_ld_u16(s + 4 + o) | (tb_ld_u16(s + 8 + o) << 16);
        m.w[1] = tb_ld_u16(s + 12 + o);
    }
#elif defined(TB_FMT_Q6_K)
    {
        const int s = c >> 3, j = c & 7, hh = j >> 2, q = j & 3;
        tb_ld_u32x4(qh_row + 64 * s + 32 * hh + 16 * (q & 1), m.w);
        const tb_u8 *scs = sc_row + 18 * s;
        m.e = tb_ld_u16(scs + 16) | ((tb_u32)scs[8 * hh + q] << 16) | ((tb_u32)scs[8 * hh + 4 + q] << 24);
    }
#elif defined(TB_FMT_IQ4_XS)
    tb_ld_u32x2(sc_row + 8 * (c >> 3), m.w); /* d, scales_h, scales_l[4] of the super-block */
    m.e = (tb_u32)(c & 7);
#endif
    return m;
}

/* q: the chunk's 16 payload bytes as 4 words (one 16-byte load), c: chunk index in the row */
TB_FN tb_chunk tb_unpack(const tb_u32 *q, tb_meta m, int c) {
    tb_chunk r;
    r.m_lo = r.m_hi = 0.0f;
#if defined(TB_FMT_Q8_0)
    (void)c;
    for (int i = 0; i < 4; ++i) {
        r.lo[i] = (tb_i32)q[i];
        r.hi[i] = 0;
    }
    r.s_lo = r.s_hi = tb_half(m.e);
#elif defined(TB_FMT_Q4_0) || defined(TB_FMT_Q4_1) || defined(TB_FMT_Q5_0) || defined(TB_FMT_Q5_1)
    (void)c;
    for (int i = 0; i < 4; ++i) {
        tb_u32 l = TB_NIB_LO(q[i]), h = TB_NIB_HI(q[i]);
#if defined(TB_FMT_Q5_0) || defined(TB_FMT_Q5_1)
        l |= tb_spread4_to_bit4(m.w[0] >> (4 * i));
        h |= tb_spread4_to_bit4(m.w[0] >> (16 + 4 * i));
#endif
        r.lo[i] = (tb_i32)l;
        r.hi[i] = (tb_i32)h;
    }
    const float d = tb_half(m.e & 0xFFFFu);
    r.s_lo = r.s_hi = d;
#if defined(TB_FMT_Q4_0)
    r.m_lo = r.m_hi = -8.0f * d;
#elif defined(TB_FMT_Q5_0)
    r.m_lo = r.m_hi = -16.0f * d;
#else
    r.m_lo = r.m_hi = tb_half(m.e >> 16);
#endif
#elif defined(TB_FMT_IQ4_NL) || defined(TB_FMT_IQ4_XS)
    for (int i = 0; i < 4; ++i) tb_iq4_lookup(q[i], &r.lo[i], &r.hi[i]);
#if defined(TB_FMT_IQ4_NL)
    (void)c;
    r.s_lo = r.s_hi = tb_half(m.e);
#else
    {
        const int j = (int)m.e; /* sub-block of the super-block */
        const tb_u32 low = (m.w[1] >> (4 * j)) & 0xFu; /* scales_l nibble j: byte j / 2, nibble j % 2 */
        const tb_u32 high = (m.w[0] >> (16 + 2 * j)) & 3u;
        const float ls = (float)((tb_i32)(low | (high << 4)) - 32);
        r.s_lo = r.s_hi = tb_half(m.w[0] & 0xFFFFu) * ls;
        (void)c;
    }
#endif
#elif defined(TB_FMT_Q4_K)
    for (int i = 0; i < 4; ++i) {
        r.lo[i] = (tb_i32)TB_NIB_LO(q[i]);
        r.hi[i] = (tb_i32)TB_NIB_HI(q[i]);
    }
    { /* get_scale_min_k4 for j = 2g, 2g+1 from A (bytes j-4 or j), B (j+4 or j), C (j+4) */
        const tb_u32 A = m.e & 0xFFFFu, B = m.e >> 16, C = m.w[1];
        const int lowg = ((c & 7) >> 1) < 2;
        const tb_u32 sc0 = lowg ? (A & 63u) : ((C & 15u) | (((A >> 6) & 3u) << 4));
        const tb_u32 sc1 = lowg ? ((A >> 8) & 63u) : (((C >> 8) & 15u) | (((A >> 14) & 3u) << 4));
        const tb_u32 mn0 = lowg ? (B & 63u) : (((C >> 4) & 15u) | (((B >> 6) & 3u) << 4));
        const tb_u32 mn1 = lowg ? ((B >> 8) & 63u) : (((C >> 12) & 15u) | (((B >> 14) & 3u) << 4));
        const float d = tb_half(m.w[0] & 0xFFFFu), dmin = tb_half(m.w[0] >> 16);
        r.s_lo = d * (float)sc0;
        r.s_hi = d * (float)sc1;
        r.m_lo = -(dmin * (float)mn0);
        r.m_hi = -(dmin * (float)mn1);
    }
#elif defined(TB_FMT_Q6_K)
    {
        const int sh = ((c & 3) >= 2) ? 2 : 0;
        for (int i = 0; i < 4; ++i) {
            const tb_u32 l = TB_NIB_LO(q[i]) | (((m.w[i] >> sh) & 0x03030303u) << 4);
            const tb_u32 h = TB_NIB_HI(q[i]) | (((m.w[i] >> (sh + 4)) & 0x03030303u) << 4);
            r.lo[i] = (tb_i32)tb_bytes_sub(l, 0x20202020u);
            r.hi[i] = (tb_i32)tb_bytes_sub(h, 0x20202020u);
        }
        const float d = tb_half(m.e & 0xFFFFu);
        r.s_lo = d * (float)(tb_i8)(m.e >> 16);
        r.s_hi = d * (float)(tb_i8)(m.e >> 24);
    }
#endif
    return r;
}

#if (defined(TB_FMT_IQ4_NL) || defined(TB_FMT_IQ4_XS)) && TB_PERM_STYLE == 1
/* tb_unpack with the codebook values left in nibble order (tb_iq4_lookup_il_t, 2 prmt per word fewer):
 * lo[i] = weights 4i, 16+4i, 4i+1, 17+4i, hi[i] = 4i+2, 18+4i, 4i+3, 19+4i of the chunk's 32-block. For a caller
 * that stores x in the same order (decode.hip's dp4a kernels on CUDA); both runs share one scale, so
 * tb_chunk_dot's sums are unchanged. tb_chunk_weight does not apply to it. */
TB_FN tb_chunk tb_unpack_il(const tb_u32 *q, tb_meta m, int c, tb_u32 t0, tb_u32 t2) {
    tb_chunk r = tb_unpack(q, m, c); /* the scale; its lookups are dead code, dropped by the compiler */
    for (int i = 0; i < 4; ++i) tb_iq4_lookup_il_t(q[i], t0, t2, (tb_u32 *)&r.lo[i], (tb_u32 *)&r.hi[i]);
    return r;
}
#endif

/* One chunk against int8 activations of one x row:
 *   xl / xh   the 16 int8 x values at p_lo / p_hi (4 words each),
 *   xs_l/xs_h the x scale of the 32-block holding p_lo / p_hi, xd_l/xd_h that block's xs * xsum.
 * Returns sum_j w_j x_j over the chunk's weights (min terms of whole 32-blocks counted once). */
TB_FN float tb_chunk_dot(const tb_chunk *ch, int c, const tb_i32 *xl, const tb_i32 *xh, float xs_l, float xs_h,
                         float xd_l, float xd_h) {
    (void)c;
    (void)xd_l;
    (void)xd_h;
#if TB_RUNS == 1
    (void)xh;
    (void)xs_h;
    tb_i32 d = tb_dp4a(ch->lo[0], xl[0], 0);
    d = tb_dp4a(ch->lo[1], xl[1], d);
    d = tb_dp4a(ch->lo[2], xl[2], d);
    d = tb_dp4a(ch->lo[3], xl[3], d);
    return xs_l * (ch->s_lo * (float)d);
#else
    tb_i32 dl = tb_dp4a(ch->lo[0], xl[0], 0);
    dl = tb_dp4a(ch->lo[1], xl[1], dl);
    dl = tb_dp4a(ch->lo[2], xl[2], dl);
    dl = tb_dp4a(ch->lo[3], xl[3], dl);
#if TB_SAME_BLOCK
    (void)xs_h;
    tb_i32 d = tb_dp4a(ch->hi[0], xh[0], dl);
    d = tb_dp4a(ch->hi[1], xh[1], d);
    d = tb_dp4a(ch->hi[2], xh[2], d);
    d = tb_dp4a(ch->hi[3], xh[3], d);
    float r = xs_l * (ch->s_lo * (float)d);
#if TB_HAS_MIN
    r += ch->m_lo * xd_l;
#endif
    return r;
#else
    tb_i32 dh = tb_dp4a(ch->hi[0], xh[0], 0);
    dh = tb_dp4a(ch->hi[1], xh[1], dh);
    dh = tb_dp4a(ch->hi[2], xh[2], dh);
    dh = tb_dp4a(ch->hi[3], xh[3], dh);
    float r = xs_l * (ch->s_lo * (float)dl) + xs_h * (ch->s_hi * (float)dh);
#if TB_HAS_MIN
    if (TB_MIN_OWNER(c)) r += ch->m_lo * xd_l + ch->m_hi * xd_h;
#endif
    return r;
#endif
#endif
}

/* Weight j (0..15) of run `hi` (0/1) as float, computed like gguf's dequantize (bit-exact):
 * d * (v + offset), or scale * v + min for formats with a true min. For host parity tests and for
 * kernels that want float weights. */
TB_FN float tb_chunk_weight(const tb_chunk *ch, int hi, int j) {
    const tb_i32 word = hi ? ch->hi[j >> 2] : ch->lo[j >> 2];
    const tb_i32 v = (tb_i32)(tb_i8)(word >> (8 * (j & 3)));
    const float s = hi ? ch->s_hi : ch->s_lo;
#if TB_TRUE_MIN
    return s * (float)v + (hi ? ch->m_hi : ch->m_lo);
#else
    return s * (float)(v + TB_Q_OFFSET);
#endif
}

#endif /* TB_FORMATS_H */
