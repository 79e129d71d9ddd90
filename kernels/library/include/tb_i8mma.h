/*
 * Int8 tensor-core operands from the tb-split layout (kernels/formats/split.py, tb_formats.h), shared by
 * tb-prefill (weights = the B operand of mma.sync m16n8k32 / the MFMA operands) and tb-decode's RG16 kernels
 * (weights = the A operand of mma.sync m16n8k32, activations = B).
 *
 * Either way a lane with quarter q = 0..3 wants, for one weight row and one 32-weight block, the int8 values
 * of the k-SET {4q..4q+3} (its "lo" word) and {16+4q..16+4q+3} (its "hi" word): in every 4-bit format of the
 * layout, bytes 4q..4q+3 of the block's 16 payload bytes hold exactly those in their low / high nibbles, so
 * ONE payload word per lane and block unpacks in registers to both operand words (tbp_unpack), and the
 * block's scales decode from its raw scale bytes (tbp_decode_scale). Integer dots are applied per 32-block
 * with no int-to-float convert (TBP_MAGIC below).
 */
#pragma once
#include "tb_formats.h"

#if defined(TB_FMT_Q8_0)
#define TBP_QS_BPB 32
#else
#define TBP_QS_BPB 16
#endif

#if defined(TB_FMT_Q5_0) || defined(TB_FMT_Q5_1)
#define TBP_QH_BPB 4
#elif defined(TB_FMT_Q6_K)
#define TBP_QH_BPB 8
#else
#define TBP_QH_BPB 0
#endif

#if defined(TB_FMT_Q4_1) || defined(TB_FMT_Q5_1) || defined(TB_FMT_Q4_K)
#define TBP_ASYM 1 /* w = s * q + m: a min term times the activation block sum */
#else
#define TBP_ASYM 0
#endif
#if defined(TB_FMT_Q6_K)
#define TBP_G16 1 /* two scales per 32-block (16 weights each): two k16 products */
#else
#define TBP_G16 0
#endif
/* Q4_0 / Q5_0 store q + 8 / q + 16 unsigned: the unpack subtracts per byte (signed operands), so no
 * per-row start value (OFF * activation sum) enters the accumulators; kept 0 for the records' ci field */
#define TBP_OFF 0
/* their unpacked operands carry a power-of-two factor (16 (q - 8), 8 (q - 16)): dw absorbs its inverse */
#if defined(TB_FMT_Q4_0)
#define TBP_OPERAND_SCALE 0.0625f
#elif defined(TB_FMT_Q5_0)
#define TBP_OPERAND_SCALE 0.125f
#else
#define TBP_OPERAND_SCALE 1.0f
#endif
/* blocks whose payload words are shared (unpacked together) */
#if defined(TB_FMT_Q4_K)
#define TBP_G 2
#elif defined(TB_FMT_Q6_K)
#define TBP_G 4
#else
#define TBP_G 1
#endif
#if defined(TB_FMT_Q8_0)
#define TBP_QS_CHUNKS 2 /* 16-byte payload chunks per group of TBP_G blocks */
#elif defined(TB_FMT_Q4_K)
#define TBP_QS_CHUNKS 2
#elif defined(TB_FMT_Q6_K)
#define TBP_QS_CHUNKS 4
#else
#define TBP_QS_CHUNKS 1
#endif
#if defined(TB_FMT_Q6_K)
#define TBP_QH_CHUNKS 2 /* qh chunks per group (Q6_K: 32 bytes per 128 weights) */
#else
#define TBP_QH_CHUNKS 0
#endif
#if defined(TB_FMT_Q4_K) || defined(TB_FMT_Q6_K) || defined(TB_FMT_IQ4_XS)
#define TBP_KQUANT 1
#else
#define TBP_KQUANT 0
#endif
#if defined(TB_FMT_Q4_1) || defined(TB_FMT_Q5_1)
#define TBP_SCB 4 /* legacy scale bytes per block: d, m */
#else
#define TBP_SCB 2
#endif

/* 1.5 * 2^23: int32 accumulators started at this float's bit pattern (minus OFF * xsum) end as the
 * float MAGIC + dot exactly (|dot| < 2^22); fma(acc_as_float, dw, -MAGIC * dw) then rounds dot * dw once
 * (-MAGIC * dw is exact: dw has at most 20 significant bits), with no int-to-float conversion. */
#define TBP_MAGIC_BITS 0x4B400000
#define TBP_MAGIC 12582912.0f

/* ---- formats: one block's lane words -> the two int8 operand words (k-sets 4q.. and 16+4q..) --------- */
/* w: the lane's payload words of the block's group (TBP_QS_CHUNKS), h: its high-bit words (Q5: the block's
 * qh word, Q6_K: 2 words), j: block inside the group, q: lane quarter */
TB_DEV void tbp_unpack(const tb_u32 *w, const tb_u32 *h, int j, int q, tb_u32 &lo, tb_u32 &hi) {
    (void)h;
    (void)j;
    (void)q;
#if defined(TB_FMT_Q8_0)
    lo = w[0];
    hi = w[1];
#elif defined(TB_FMT_Q4_0)
    /* signed operands 16 * (q - 8): (q ^ 8) in a byte's high nibble is q - 8 as a signed nibble, times 16 as
     * an int8; one LOP3 (+ a shift for the low nibbles). The scale decode divides dw by 16 (exact). */
    lo = ((w[0] << 4) ^ 0x80808080u) & 0xF0F0F0F0u;
    hi = (w[0] ^ 0x88888888u) & 0xF0F0F0F0u;
#elif defined(TB_FMT_Q4_1)
    lo = TB_NIB_LO(w[0]);
    hi = TB_NIB_HI(w[0]);
#elif defined(TB_FMT_Q5_0)
    /* signed operands 8 * (q - 16): the 5-bit q with its top bit flipped, shifted to a byte's top (dw / 8) */
    lo = ((TB_NIB_LO(w[0]) | tb_spread4_to_bit4(h[0] >> (4 * q))) ^ 0x10101010u) << 3;
    hi = ((TB_NIB_HI(w[0]) | tb_spread4_to_bit4(h[0] >> (16 + 4 * q))) ^ 0x10101010u) << 3;
#elif defined(TB_FMT_Q5_1)
    lo = TB_NIB_LO(w[0]) | tb_spread4_to_bit4(h[0] >> (4 * q));
    hi = TB_NIB_HI(w[0]) | tb_spread4_to_bit4(h[0] >> (16 + 4 * q));
#elif defined(TB_FMT_IQ4_NL) || defined(TB_FMT_IQ4_XS)
    tb_i32 l, u;
    tb_iq4_lookup(w[0], &l, &u);
    lo = (tb_u32)l;
    hi = (tb_u32)u;
#elif defined(TB_FMT_Q4_K)
    lo = j ? TB_NIB_HI(w[0]) : TB_NIB_LO(w[0]);
    hi = j ? TB_NIB_HI(w[1]) : TB_NIB_LO(w[1]);
#elif defined(TB_FMT_Q6_K)
    const tb_u32 wl = w[2 * (j & 1)], wh = w[2 * (j & 1) + 1];
    const tb_u32 nl = (j & 2) ? TB_NIB_HI(wl) : TB_NIB_LO(wl);
    const tb_u32 nh = (j & 2) ? TB_NIB_HI(wh) : TB_NIB_LO(wh);
    lo = tb_bytes_sub(nl | (((h[0] >> (2 * j)) & 0x03030303u) << 4), 0x20202020u);
    hi = tb_bytes_sub(nh | (((h[1] >> (2 * j)) & 0x03030303u) << 4), 0x20202020u);
#endif
}

/* Q4_K 6-bit (scale, min) of sub-block j from the 12 packed bytes (llama.cpp's get_scale_min_k4) */
TB_DEV void tbp_q4k_scale_min(const tb_u8 *q, int j, tb_u32 *sc, tb_u32 *mn) {
    if (j < 4) {
        *sc = q[j] & 63u;
        *mn = q[j + 4] & 63u;
    } else {
        *sc = (q[j + 4] & 0xFu) | ((tb_u32)(q[j - 4] >> 6) << 4);
        *mn = (tb_u32)(q[j + 4] >> 4) | ((tb_u32)(q[j] >> 6) << 4);
    }
}

/* Decoded scales of one (row, block) from the row's raw sc bytes of the stage: out[0] = dw, out[1] = -MAGIC*dw,
 * and out[2] = mw (asymmetric) or out[2..3] = (dw, -MAGIC*dw) of the block's second 16 weights (Q6_K).
 * kb: block inside the stage, b: absolute block, delta: Q6_K window misalignment. */
TB_DEV void tbp_decode_scale(const tb_u8 *raw, int kb, int b, int delta, float *out) {
    (void)kb;
    (void)b;
    (void)delta;
    float dw, mw = 0.0f;
#if TBP_KQUANT == 0
    dw = tb_half(tb_ld_u16(raw + kb * TBP_SCB)) * TBP_OPERAND_SCALE;
#if TBP_ASYM
    mw = tb_half(tb_ld_u16(raw + kb * TBP_SCB + 2));
#endif
#elif defined(TB_FMT_Q4_K)
    tb_u32 s6, m6;
    tbp_q4k_scale_min(raw + 4, b & 7, &s6, &m6);
    dw = tb_half(tb_ld_u16(raw)) * (float)s6;
    mw = -(tb_half(tb_ld_u16(raw + 2)) * (float)m6);
#elif defined(TB_FMT_Q6_K)
    const int j = b & 7, idx = 8 * (j >> 2) + 2 * (j & 3);
    const float d = tb_half((tb_u32)raw[delta + 16] | ((tb_u32)raw[delta + 17] << 8));
    dw = d * (float)(tb_i8)raw[delta + idx];
    const float dh = d * (float)(tb_i8)raw[delta + idx + 1];
    out[2] = dh;
    out[3] = -TBP_MAGIC * dh;
#elif defined(TB_FMT_IQ4_XS)
    const int j = b & 7;
    const tb_u32 low = ((tb_u32)raw[4 + (j >> 1)] >> (4 * (j & 1))) & 0xFu;
    const tb_u32 high = (tb_ld_u16(raw + 2) >> (2 * j)) & 3u;
    dw = tb_half(tb_ld_u16(raw)) * (float)((tb_i32)(low | (high << 4)) - 32);
#endif
    out[0] = dw;
    out[1] = -TBP_MAGIC * dw;
#if TBP_ASYM
    out[2] = mw; /* stored in the mins plane */
#endif
    (void)mw;
}

/* ---- NVIDIA mma.sync s8 (sm_80+). The CPU emulators supply these names (tests/kernels/emu/tb_portability.h
 * for prefill, tests/fixtures/gpu_emu/emu_decode.cpp for decode). ----------------------------------------- */
#if defined(TB_CUDA) && !defined(TB_CUDA_EMULATION)
/* d = a(16x32 s8) . b(32x8 s8) + bits(1.5 * 2^23): ONE constant C quad for every mma (ptxas keeps it in four
 * registers; per-row start values would cost a copy or an add per accumulator) */
TB_DEV void tbp_mma32(tb_i32 *d, const tb_u32 *a, tb_u32 b0, tb_u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%10, %10, %10, %10};\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(TBP_MAGIC_BITS));
}
/* d = a(16x16 s8: a0 rows g, a1 rows g+8) . b(16x8 s8) + bits(1.5 * 2^23) */
TB_DEV void tbp_mma16(tb_i32 *d, tb_u32 a0, tb_u32 a1, tb_u32 b0) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
                 "{%7, %7, %7, %7};\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a0), "r"(a1), "r"(b0), "r"(TBP_MAGIC_BITS));
}
/* d += a(16x32 s8) . b(32x8 s8): the accumulator chained (decode packs 8 / MX blocks into one C tile) */
TB_DEV void tbp_mma32_acc(tb_i32 *d, const tb_u32 *a, tb_u32 b0, tb_u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* d += a(16x16 s8) . b(16x8 s8) */
TB_DEV void tbp_mma16_acc(tb_i32 *d, tb_u32 a0, tb_u32 a1, tb_u32 b0) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
                 "{%0, %1, %2, %3};\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a0), "r"(a1), "r"(b0));
}
#endif
