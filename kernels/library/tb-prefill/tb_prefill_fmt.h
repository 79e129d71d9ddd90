/*
 * tb-prefill: the GEMM view of the tb-split layout (kernels/formats/split.py, tb_formats.h).
 *
 * A tensor-core fragment wants, for one weight row and one 32-weight block of K, the int8 values of
 * the k-SET {4q..4q+3} (the "lo" word) and {16+4q..16+4q+3} (the "hi" word), q = 0..3 the lane's
 * quarter: NVIDIA mma.m16n8k32 B fragments (q = lane % 4) and AMD mfma 16x16x32 operands (q = lane / 16,
 * the k order permuted identically in both operands) both take exactly that. In every 4-bit format of
 * the layout, byte 4q..4q+3 of the block's 16 payload bytes holds those weights in its low nibbles
 * (lo word) and high nibbles (hi word), so ONE 32-bit word per lane and block unpacks to both operand
 * registers with a mask (Q4_K: two blocks share two words, low / high nibbles; Q6_K: four blocks share
 * four words plus two high-bit words; Q8_0: two words, no unpack).
 *
 * Per stage (KB blocks of 32 along K, starting at block B0) and weight row, the stage copies:
 *   qs   KB * TBP_QS_BPB bytes (proportional: 32 per block for Q8_0, 16 otherwise)
 *   qh   KB * TBP_QH_BPB bytes (Q5_0/Q5_1 4 per block, Q6_K 8 per block, else none)
 *   sc   the raw scale bytes covering the stage (legacy: KB * TBP_SCB; K-quants: the super-block's)
 * Offsets inside a stage: chunk (16 bytes) indices, see tbp_chunks() below.
 *
 * The same numbers are spelled out in tunebase-kernel.toml ([derived] smem_stage ...): keep in sync
 * (tests/kernels/test_prefill_emulated.py compares them).
 */
#pragma once

#include "tb_i8mma.h" /* the operand macros and unpack shared with tb-decode's tensor-core kernels */

/* decoded weight scale floats per (row, block): dw, -MAGIC*dw [, dw_hi, -MAGIC*dw_hi for Q6_K]; the mins of
 * asymmetric formats in a plane of their own after them ([KB][BN] floats) */
#define TBP_NSC (TBP_G16 ? 4 : 2)
/* activation record words per pair of rows (g, g+8) on NVIDIA: dx, dx', ci, ci' [, sx, sx', 0, 0] */
#define TBP_REC (TBP_ASYM ? 8 : 4)

/* bytes per stage and row of each weight part in shared memory (row strides; 16-byte multiples) */
template <int KB>
struct TbpStage {
    static constexpr int QS = KB * TBP_QS_BPB;   /* payload bytes copied per row */
    static constexpr int QS_STRIDE = QS + 16;    /* 16 * odd: conflict-free 8-row ldmatrix phases */
    static constexpr int QH = KB * TBP_QH_BPB;
#if defined(TB_FMT_Q6_K)
    static constexpr int QH_STRIDE = QH + 16;    /* read with ldmatrix like qs */
#else
    static constexpr int QH_STRIDE = (QH && KB >= 8) ? QH + 16 : QH; /* Q5: one word per row and block */
#endif
#if defined(TB_FMT_Q4_K)
    static constexpr int SC = 16;                /* d, dmin, scales[12] of the super-block */
    static constexpr int SC_CHUNK = 16;
#elif defined(TB_FMT_Q6_K)
    static constexpr int SC = 20;                /* scales[16], d: 18 bytes at a 2-aligned offset, read as */
    static constexpr int SC_CHUNK = 4;           /* a 4-aligned window of five words (tail zero-filled) */
#elif defined(TB_FMT_IQ4_XS)
    static constexpr int SC = 8;                 /* d, scales_h, scales_l[4] */
    static constexpr int SC_CHUNK = 8;
#else
    static constexpr int SC = KB * TBP_SCB;
    static constexpr int SC_CHUNK = SC >= 16 ? 16 : SC;
#endif
    static constexpr int SC_STRIDE = (SC + 15) / 16 * 16;
};

/* bytes of the per-stage activation-scale tile for BM rows and KB blocks (8 or 16 bytes per row) */
#define TBP_AS_BYTES(BM, KB) ((KB) * (BM) * (TBP_ASYM ? 16 : 8))
