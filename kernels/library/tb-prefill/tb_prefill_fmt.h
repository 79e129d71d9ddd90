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

/* decoded weight scale floats per (row, block): dw, -MAGIC*dw [, dw_hi, -MAGIC*dw_hi for Q6_K]; the mins of
 * asymmetric formats in a plane of their own after them ([KB][BN] floats) */
#define TBP_NSC (TBP_G16 ? 4 : 2)
/* activation record words per pair of rows (g, g+8) on NVIDIA: dx, dx', ci, ci' [, sx, sx', 0, 0] */
#define TBP_REC (TBP_ASYM ? 8 : 4)

/* 1.5 * 2^23: int32 accumulators started at this float's bit pattern (minus OFF * xsum) end as the
 * float MAGIC + dot exactly (|dot| < 2^22); fma(acc_as_float, dw, -MAGIC * dw) then rounds dot * dw once
 * (-MAGIC * dw is exact: dw has at most 20 significant bits), with no int-to-float conversion. */
#define TBP_MAGIC_BITS 0x4B400000
#define TBP_MAGIC 12582912.0f

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
