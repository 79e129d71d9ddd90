/*
 * Tunebase prefill GEMM at the formats' true bytes:  y[M][N] = x[M][K] . W[N][K]^T   (M = 2 .. 4096)
 *
 * Weights: the tb-split layout (kernels/formats/split.py: per-row qs / qh / sc arrays, the GGUF bytes at the
 * same size). Activations: quantised ONCE per launch by the prelaunch kernel tb_prefill_prep_sk{SK} into the
 * workspace (int8 per 32-block, the rule of kernels/activations.py), which also zeroes y for split-K.
 *
 * Tensor cores with int8 operands:
 *   NVIDIA sm_90   mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 (m16n8k16 for Q6_K's 16-weight scales);
 *                  A = activations (ldmatrix.x4), B = weights unpacked in registers from ldmatrix'ed words;
 *                  cp.async multi-stage pipeline (STAGES), split-K over grid.z.
 *   AMD gfx90a     v_mfma_i32_16x16x16i8 (two per 32-block), gfx942/gfx950 v_mfma_i32_16x16x32_i8;
 *   AMD gfx906     v_dot4_i32_i8 (sdot4) register tiles;  AMD: register-staged double buffer in LDS.
 * Per 32-block scales apply to each k32 partial (as llama.cpp's MMQ does), with no int-to-float convert:
 * the int32 accumulator starts at the bit pattern of 1.5 * 2^23 (minus OFF * xsum for Q4_0 / Q5_0), so it
 * ends as that float plus the exact dot; fma(acc, dw, -1.5*2^23*dw) is then round(dot * dw) and a second
 * fma applies the activation scale (asymmetric formats add min * x-block-sum).
 *
 * Kernel arguments (the manifest's [[args]], in order; the prelaunch kernel takes the same):
 *   0 const tb_u8 *qs   1 const tb_u8 *qh (null without high bits)   2 const tb_u8 *sc
 *   3 const float *x [M][K]   4 float *y [M][N]   5 tb_u8 *ws (workspace)   6 int m   7 int n   8 int k
 * Workspace: xq int8 [Ms][K] (Ms = M rounded up to 16), then per 32-block activation records
 *   NVIDIA [K/32][Ms/16][8][TBP_REC] words (rows g, g+8 of each 16-row group together: dx, ci [, sx]),
 *   AMD    [K/32][4][Ms] words (dx, ci, sx planes).
 *   dx = amax / 127, ci = bits(1.5*2^23) - OFF * xsum, sx = dx * xsum.
 * Launch: block = (32|64) * warps_n * warps_m threads (engines 2, 3: + 128, the producer warpgroup), grid =
 * (ceil(N/BN), ceil(M/BM), SK) (engines 1-3: x and y swapped; stream-K: the SMs), dynamic shared memory (NVIDIA)
 * / static LDS (AMD) sized as the manifest's [derived] smem; engine 3 is a 2-CTA cluster kernel (its cluster
 * shape compiled in: the plain launch runs it).
 * Exported symbols: tb_prefill_n{BN}_m{BM}_wn{WN}_wm{WM}_kb{KB}_s{ST}_sk{SK}_mb{MB}_e{ENG}, tb_prefill_prep_sk{0,1,2,4}
 * (engines 1, 2: prelaunch grid.y = 2, fp16 activations; prefill_wgmma.h, prefill_ws.h).
 */
#include "tb_portability.h"
#include "tb_formats.h"
#include "tb_prefill_fmt.h"

#define TBP_STR(x) #x
#define TBP_UNROLL(n) _Pragma(TBP_STR(unroll n))
#ifndef TBP_KG_UNROLL
#define TBP_KG_UNROLL 1 /* block groups of a stage unrolled: more ILP, but a full stage's operands spill */
#endif

#if !defined(TB_DEV_MEMBER)
#define TB_DEV_MEMBER __device__ TB_FORCEINLINE
#endif

#define TB_PREFILL_PARAMS                                                                                    \
    const tb_u8 *__restrict__ qs, const tb_u8 *__restrict__ qh, const tb_u8 *__restrict__ sc,               \
        const float *__restrict__ x, float *__restrict__ y, tb_u8 *__restrict__ ws, int m, int n, int k

#define TB_PREFILL_ARGS qs, qh, sc, x, y, ws, m, n, k

/* ---- vendor primitives -------------------------------------------------------------------------------- */
#if defined(TB_CUDA)
TB_DEV tb_u32 tbp_saddr(const void *p) { return (tb_u32)__cvta_generic_to_shared(p); }
/* cp.async of CH bytes, the bytes past `valid` zero-filled (valid = 0: nothing read) */
template <int CH>
TB_DEV void tbp_cp_async(void *dst, const void *src, int valid) {
    if constexpr (CH == 16) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(tbp_saddr(dst)), "l"(src), "r"(valid));
    } else {
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(tbp_saddr(dst)), "l"(src), "n"(CH),
                     "r"(valid));
    }
}
TB_DEV void tbp_cp_commit(void) { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
TB_DEV void tbp_cp_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
TB_DEV void tbp_ldsm4(tb_u32 &r0, tb_u32 &r1, tb_u32 &r2, tb_u32 &r3, const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(tbp_saddr(p)));
}
TB_DEV void tbp_ldsm2(tb_u32 &r0, tb_u32 &r1, const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(tbp_saddr(p)));
}
TB_DEV void tbp_ldsm1(tb_u32 &r0, const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r0) : "r"(tbp_saddr(p)));
}
/* acc (16x8 f32, C layout of the int8 mma) += a (16x4 tf32: a0 row g, a1 row g+8, col t) . b (4x8: row t, col g) */
TB_DEV void tbp_mma_tf32(float *acc, const tb_u32 *a, tb_u32 b) {
    asm volatile("mma.sync.aligned.m16n8k4.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                 : "r"(a[0]), "r"(a[1]), "r"(b));
}
/* v ~ hi + lo, both exact tf32 values (low 13 bits cleared): hi*b + lo*b + hi*b_lo is an fp32-grade product
 * (the dropped lo*b_lo and lo's truncation are below 2^-20 relative); masks instead of cvt.rna: 3 plain ops */
TB_DEV void tbp_split_tf32(float v, tb_u32 &hi, tb_u32 &lo) {
    hi = (tb_u32)__float_as_int(v) & 0xFFFFE000u;
    lo = (tb_u32)__float_as_int(v - __int_as_float((int)hi)) & 0xFFFFE000u;
}
TB_DEV float tbp_as_float(tb_i32 v) { return __int_as_float(v); }
TB_DEV tb_i32 tbp_float_bits(float v) { return __float_as_int(v); }
TB_DEV void tbp_red_add(float *p, float v) { atomicAdd(p, v); }
#define TBP_BID_Z ((int)blockIdx.z)
#define TBP_GRID_X ((int)gridDim.x) /* E2's stream-K schedule (SK0): the persistent workgroups' count */
#define TBP_DYN_SMEM extern __shared__ __align__(16) tb_u8 tbp_smem[];
#elif defined(TB_AMD)
TB_DEV float tbp_as_float(tb_i32 v) { return __builtin_bit_cast(float, v); }
TB_DEV tb_i32 tbp_float_bits(float v) { return __builtin_bit_cast(tb_i32, v); }
#if defined(TB_HIP_HEADERS)
#define TBP_BID_Z ((int)blockIdx.z)
#else
#define TBP_BID_Z ((int)__builtin_amdgcn_workgroup_id_z())
#endif
TB_DEV void tbp_red_add(float *p, float v) { __hip_atomic_fetch_add(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT); }
typedef int tbp_v4i __attribute__((ext_vector_type(4)));
#endif
/* (TB_EMU: tb_portability.h of tests/kernels/emu supplies the same names, emulated on the host) */

TB_DEV float tbp_fma(float a, float b, float c) {
#if defined(TB_AMD)
    return __builtin_fmaf(a, b, c);
#else
    return fmaf(a, b, c);
#endif
}

TB_DEV float tbp_rint(float v) {
#if defined(TB_AMD)
    return __builtin_rintf(v);
#else
    return rintf(v);
#endif
}

/* ---- prelaunch: quantise x once per launch, zero y for split-K ----------------------------------------
 * One thread per 4 values of x (8 lanes per 32-block, shuffles reduce amax and the sum) and per 4 cells
 * of y; grid = ceil(max(M*K/4, SK > 1 ? M*N/4 : 0) / 256) blocks of 256 (the manifest's [prelaunch]). */
template <int SK>
__device__ TB_FORCEINLINE void tbp_prep_body(TB_PREFILL_PARAMS) {
    (void)qs;
    (void)qh;
    (void)sc;
    const int nbk = k >> 5;
    const int ms = (m + 15) & ~15;
    tb_i8 *xq = (tb_i8 *)ws;
    tb_i32 *rec = (tb_i32 *)(ws + (tb_size)ms * (tb_size)k);
    const tb_size gt = (tb_size)TB_BID_X * 256u + (tb_size)TB_TID;
    const tb_size blk = gt >> 3; /* the 8 lanes of a group share blk: shuffles stay inside live groups */
    const int l8 = TB_TID & 7;
    const bool live = blk < (tb_size)m * (tb_size)nbk;
    const tb_size row = live ? blk / (tb_size)nbk : 0, b = live ? blk % (tb_size)nbk : 0;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (live) {
        const float *xp = x + row * (tb_size)k + b * 32u + 4u * (tb_size)l8;
        for (int i = 0; i < 4; ++i) v[i] = xp[i];
    }
    float amax = tb_fmaxf(tb_fmaxf(tb_fabsf(v[0]), tb_fabsf(v[1])), tb_fmaxf(tb_fabsf(v[2]), tb_fabsf(v[3])));
    amax = tb_fmaxf(amax, tb_shfl_xor(amax, 1));
    amax = tb_fmaxf(amax, tb_shfl_xor(amax, 2));
    amax = tb_fmaxf(amax, tb_shfl_xor(amax, 4));
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    tb_u32 word = 0;
    tb_i32 s = 0;
    for (int i = 0; i < 4; ++i) {
        const tb_i32 qv = (tb_i32)tbp_rint(v[i] * inv);
        s += qv;
        word |= ((tb_u32)(qv & 0xFF)) << (8 * i);
    }
    float sf = (float)s; /* exact: |sum| <= 32 * 127 */
    sf += tb_shfl_xor(sf, 1);
    sf += tb_shfl_xor(sf, 2);
    sf += tb_shfl_xor(sf, 4);
    if (live) {
        *(tb_u32 *)(xq + row * (tb_size)k + b * 32u + 4u * (tb_size)l8) = word;
        if (l8 == 0) {
            const tb_i32 xsum = (tb_i32)sf;
            const float dx = amax / 127.0f;
            const tb_i32 ci = TBP_MAGIC_BITS - TBP_OFF * xsum;
#if defined(TB_AMD) || defined(TB_EMU_AMD)
            const tb_size plane = (tb_size)nbk * (tb_size)ms;
            const tb_size at = b * (tb_size)ms + row;
            rec[at] = tbp_float_bits(dx);
            rec[plane + at] = ci;
            rec[2 * plane + at] = tbp_float_bits(dx * sf);
#else
            const tb_size grp = (b * (tb_size)(ms >> 4) + (row >> 4)) * 8u + (row & 7u);
            tb_i32 *r = rec + grp * TBP_REC + ((row >> 3) & 1u);
            r[0] = tbp_float_bits(dx);
            r[2] = ci;
#if TBP_ASYM
            r[4] = tbp_float_bits(dx * sf);
#endif
#endif
        }
    }
    if (SK != 1) { /* split-K, or stream-K (SK 0): partial tiles add into y */
        const tb_size cells = (tb_size)m * (tb_size)n;
        for (tb_size i = 4u * gt; i < 4u * gt + 4u && i < cells; ++i) y[i] = 0.0f;
    }
}

/* grid.y = 1 + engine (the manifest's [prelaunch] grid): 2 = the wgmma engine's fp16 activations */
#if defined(TB_CUDA) || defined(TB_EMU_NV)
#if defined(TB_CUDA)
#define TBP_GRID_Y ((int)gridDim.y)
#endif
#define TBP_PREP_ENGINE(SK)                                                                                \
    if (TBP_GRID_Y >= 2) { /* the other rows of blocks have nothing to do; 3: the tiled layout (E3) */       \
        if (TB_BID_Y == 0) tbp_prep_f16_body<SK>(TB_PREFILL_ARGS, TBP_GRID_Y == 3);                       \
        return;                                                                                            \
    }
#else
#define TBP_PREP_ENGINE(SK)
#endif
#define TB_PREFILL_PREP(SK)                                                                                \
    extern "C" __global__ TB_LAUNCH_BOUNDS(256, 1) void tb_prefill_prep_sk##SK(TB_PREFILL_PARAMS) {        \
        TBP_PREP_ENGINE(SK)                                                                                \
        tbp_prep_body<SK>(TB_PREFILL_ARGS);                                                              \
    }

/* ---- stage copy geometry shared by both vendors ------------------------------------------------------ */
template <int BN, int BM, int KB>
struct TbpLayout {
    using S = TbpStage<KB>;
    static constexpr int A_STRIDE = KB * 32 + 16;
    static constexpr int A_BYTES = BM * A_STRIDE;
    static constexpr int AS_BYTES = TBP_AS_BYTES(BM, KB);
    static constexpr int QS_BYTES = BN * S::QS_STRIDE;
    static constexpr int QH_BYTES = BN * S::QH_STRIDE;
    static constexpr int SC_BYTES = BN * S::SC_STRIDE;
    static constexpr int OFF_AS = A_BYTES;
    static constexpr int OFF_QS = OFF_AS + AS_BYTES;
    static constexpr int OFF_QH = OFF_QS + QS_BYTES;
    static constexpr int OFF_SC = OFF_QH + QH_BYTES;
    static constexpr int STAGE = OFF_SC + SC_BYTES;
    static constexpr int WS_BYTES = KB * BN * (TBP_NSC + TBP_ASYM) * 4; /* decoded scales [+ mins] of a stage */
    static constexpr int MW_OFF = KB * BN * TBP_NSC; /* floats: the mins plane inside the decoded scales */
    static constexpr int smem(int stages) { return stages * STAGE + WS_BYTES; }
};

/* byte offset (inside the part's row) and length of a weight part for stage block B0, row bytes per part */
struct TbpRows {
    tb_size qs_row, qh_row, sc_row;
};
TB_DEV TbpRows tbp_rows(int k) {
    TbpRows r;
    r.qs_row = (tb_size)k * TBP_QS_BPB / 32u;
    r.qh_row = (tb_size)k * TBP_QH_BPB / 32u;
    r.sc_row = (tb_size)(k / TB_BLOCK_WEIGHTS) * (tb_size)TB_SC_BYTES;
    return r;
}
/* global offset of the stage's raw scale window inside row `row` (K-quants: the super-block's bytes) */
TB_DEV tb_size tbp_sc_offset(const TbpRows &r, tb_size row, int b0) {
#if TBP_KQUANT
    return row * r.sc_row + (tb_size)(b0 >> 3) * (tb_size)TB_SC_BYTES;
#else
    return row * r.sc_row + (tb_size)b0 * (tb_size)TBP_SCB;
#endif
}

/* ============================================ NVIDIA ================================================= */
#if defined(TB_CUDA) || defined(TB_EMU_NV)
#if defined(TB_FMT_Q6_K)
/* Q6_K's 18 scale bytes sit at a 2-aligned offset: copy a 4-aligned window of five words per row into
   dst (row stride `stride`), the tail past the 18 bytes zero-filled; threads t, t + T, ... of the caller */
template <int BN>
TB_DEV void tbp_q6k_sc_cp_async(tb_u8 *dst, int stride, const tb_u8 *sc, const TbpRows &rows, int n0, int n, int b0,
                                int t, int T) {
    for (int i = t; i < BN * 5; i += T) {
        const int r = i / 5, c = i % 5, row = n0 + r;
        int valid = 0;
        const tb_u8 *src = sc;
        if (row < n) {
            const tb_size off = tbp_sc_offset(rows, (tb_size)row, b0);
            const tb_size from = (off & ~(tb_size)3) + 4u * (tb_size)c, end = off + 18u;
            valid = from >= end ? 0 : (end - from >= 4u ? 4 : (int)(end - from));
            src = valid ? sc + from : sc;
        }
        tbp_cp_async<4>(dst + r * stride + 4 * c, src, valid);
    }
}
#endif

/* A thread's share of one part's stage copy: ROWS rows of CPR chunks of CH bytes, THREADS threads, every
 * thread a fixed chunk column (tid % CPR) and rows tid / CPR + j * THREADS / CPR: source pointers are
 * computed once, a stage only adds its offset. */
template <int ROWS, int CPR, int CH, int THREADS>
struct TbpCopy {
    static_assert(THREADS % CPR == 0, "chunks per row divide the threads");
    static constexpr int STEP = THREADS / CPR;
    static constexpr int ITEMS = (ROWS + STEP - 1) / STEP;
    const tb_u8 *src[ITEMS];
    int dst[ITEMS];
    bool ok[ITEMS], live[ITEMS];
    TB_DEV_MEMBER void init(const tb_u8 *base, int row0, int limit, tb_size row_bytes, int dst_off, int dst_stride) {
        init_t(TB_TID, base, row0, limit, row_bytes, dst_off, dst_stride);
    }
    /* tid: the thread's index among the THREADS copying threads (E2: inside the producer warpgroup) */
    TB_DEV_MEMBER void init_t(int tid, const tb_u8 *base, int row0, int limit, tb_size row_bytes, int dst_off,
                              int dst_stride) {
        const int c = tid % CPR, r0 = tid / CPR;
#pragma unroll
        for (int j = 0; j < ITEMS; ++j) {
            const int r = r0 + j * STEP;
            live[j] = (ROWS % STEP == 0) || r < ROWS;
            ok[j] = live[j] && row0 + r < limit;
            src[j] = ok[j] ? base + (tb_size)(row0 + r) * row_bytes + (tb_size)(c * CH) : base;
            dst[j] = dst_off + r * dst_stride + c * CH;
        }
    }
    /* stage_off: bytes of the stage start inside a row (applied to live rows only) */
    TB_DEV_MEMBER void copy(tb_u8 *stage, tb_size stage_off) const {
#pragma unroll
        for (int j = 0; j < ITEMS; ++j)
            if (live[j]) tbp_cp_async<CH>(stage + dst[j], ok[j] ? src[j] + stage_off : src[j], ok[j] ? CH : 0);
    }
};

/* raw scale bytes of the stage -> decoded floats [KB][BN][TBP_NSC] */
template <class L, int BN, int KB, int THREADS>
TB_DEV void tbp_decode_stage_l(const tb_u8 *stage, float *wsc, int s, int n0, int k) {
    using S = TbpStage<KB>;
    const int b0 = s * KB;
    const TbpRows rows = tbp_rows(k);
    (void)rows;
    (void)n0;
#pragma unroll
    for (int i0 = 0; i0 < KB * BN; i0 += THREADS) {
        const int i = i0 + TB_TID;
        if ((KB * BN) % THREADS != 0 && i >= KB * BN) break;
        const int kb = i / BN, r = i % BN;
        int delta = 0;
#if defined(TB_FMT_Q6_K)
        delta = (int)(tbp_sc_offset(rows, (tb_size)(n0 + r), b0) & 3u);
#endif
        float out[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        tbp_decode_scale(stage + L::OFF_SC + r * S::SC_STRIDE, kb, b0 + kb, delta, out);
        float *o = wsc + (kb * BN + r) * TBP_NSC;
        if (TBP_NSC == 4)
            *(float4 *)o = make_float4(out[0], out[1], out[2], out[3]);
        else
            *(float2 *)o = make_float2(out[0], out[1]);
        if (TBP_ASYM) wsc[L::MW_OFF + kb * BN + r] = out[2];
    }
}
template <int BN, int BM, int KB, int THREADS>
TB_DEV void tbp_decode_stage(const tb_u8 *stage, float *wsc, int s, int n0, int k) {
    tbp_decode_stage_l<TbpLayout<BN, BM, KB>, BN, KB, THREADS>(stage, wsc, s, n0, k);
}

#if defined(TB_CUDA) || defined(TB_EMU_NV)
#include "prefill_wgmma.h"
#include "prefill_ws.h"
#endif

template <int BN, int BM, int WN_, int WM_, int KB, int ST, int SK>
TB_DEV void tbp_nv_body(TB_PREFILL_PARAMS) {
    using L = TbpLayout<BN, BM, KB>;
    using S = TbpStage<KB>;
    constexpr int THREADS = 32 * WN_ * WM_;
    constexpr int WTN = BN / WN_, WTM = BM / WM_;
    constexpr int NI = WTN / 8, MI = WTM / 16;
    static_assert(WTN % 8 == 0 && WTM % 16 == 0, "warp tile");
    static_assert(NI % 4 == 0, "weights are read 4 fragments per ldmatrix.x4");
    static_assert(KB % TBP_G == 0 && (KB & (KB - 1)) == 0 && KB <= 8, "stage blocks");
    TBP_DYN_SMEM
    tb_u8 *smem = tbp_smem;
    float *wsc = (float *)(smem + ST * L::STAGE);

    const int tid = TB_TID, lane = tid & 31, warp = tid >> 5;
    const int wm = warp % WM_, wn = warp / WM_;
    const int g = lane >> 2, t = lane & 3;
    const int n0 = TB_BID_X * BN, m0 = TB_BID_Y * BM;
    const int nst_all = (k >> 5) / KB;
    const int per = (nst_all + SK - 1) / SK;
    const int s_begin = TBP_BID_Z * per;
    const int nst = (nst_all - s_begin) < per ? (nst_all - s_begin) : per;
    const int ms = (m + 15) & ~15;
    const TbpRows rows = tbp_rows(k);

    /* the stage copies */
    TbpCopy<BM, KB * 2, 16, THREADS> cp_a;
    cp_a.init(ws, m0, m, (tb_size)k, 0, L::A_STRIDE);
    constexpr int RB = (BM / 16) * 8 * TBP_REC * 4; /* activation-record bytes per block (contiguous) */
    const tb_size rec_block = (tb_size)(ms >> 4) * (8u * TBP_REC * 4u);
    TbpCopy<KB, RB / 16, 16, THREADS> cp_r; /* rows = blocks; a chunk past the records is zero-filled */
    cp_r.init(ws + (tb_size)ms * (tb_size)k + (tb_size)(m0 >> 4) * (8u * TBP_REC * 4u), 0, KB, rec_block, L::OFF_AS,
              RB);
    {
        const int c = tid % (RB / 16);
        const bool in = (m0 >> 4) + (c * 16) / (8 * TBP_REC * 4) < (ms >> 4);
#pragma unroll
        for (int j = 0; j < cp_r.ITEMS; ++j) cp_r.ok[j] = cp_r.ok[j] && in;
    }
    TbpCopy<BN, S::QS / 16, 16, THREADS> cp_q;
    cp_q.init(qs, n0, n, rows.qs_row, L::OFF_QS, S::QS_STRIDE);
#if TBP_QH_BPB
    constexpr int HCH = S::QH >= 16 ? 16 : S::QH;
    TbpCopy<BN, S::QH / HCH, HCH, THREADS> cp_h;
    cp_h.init(qh, n0, n, rows.qh_row, L::OFF_QH, S::QH_STRIDE);
#endif
#if !defined(TB_FMT_Q6_K)
    TbpCopy<BN, S::SC / S::SC_CHUNK, S::SC_CHUNK, THREADS> cp_s;
    cp_s.init(sc, n0, n, rows.sc_row, L::OFF_SC, S::SC_STRIDE);
#endif

    auto load = [&](int s, int buf) {
        tb_u8 *stage = smem + buf * L::STAGE;
        const int b0 = s * KB;
        cp_a.copy(stage, (tb_size)b0 * 32u);
        cp_r.copy(stage, (tb_size)b0 * rec_block);
        cp_q.copy(stage, (tb_size)b0 * TBP_QS_BPB);
#if TBP_QH_BPB
        cp_h.copy(stage, (tb_size)b0 * TBP_QH_BPB);
#endif
#if defined(TB_FMT_Q6_K)
        tbp_q6k_sc_cp_async<BN>(stage + L::OFF_SC, S::SC_STRIDE, sc, rows, n0, n, b0, tid, THREADS);
#else
        cp_s.copy(stage, tbp_sc_offset(rows, 0, b0));
#endif
    };

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

#pragma unroll
    for (int s = 0; s < ST - 1; ++s) {
        if (s < nst) load(s_begin + s, s);
        tbp_cp_commit();
    }

    /* per-lane ldmatrix row addresses: A (x4: rows 0-7 / 8-15, bytes 0-15 / 16-31), B (x4: 4 fragments) */
    const int a_off = (wm * WTM + ((lane >> 3) & 1) * 8 + (lane & 7)) * L::A_STRIDE + (lane >> 4) * 16;
    const int b_row = wn * WTN + 8 * (lane >> 3) + (lane & 7);
    const int r_off = L::OFF_AS + ((wm * MI) * 8 + g) * (TBP_REC * 4);
    const int w_off = (wn * WTN + 2 * t) * TBP_NSC * 4;

    for (int it = 0; it < nst; ++it) {
        tbp_cp_wait<ST - 2>();
        tb_sync();
        if (it + ST - 1 < nst) load(s_begin + it + ST - 1, (it + ST - 1) % ST);
        tbp_cp_commit();
        const tb_u8 *stage = smem + (it % ST) * L::STAGE;
        tbp_decode_stage<BN, BM, KB, THREADS>(stage, wsc, s_begin + it, n0, k);
        tb_sync();

        const tb_u8 *sa = stage + a_off;
        const tb_u8 *sq = stage + L::OFF_QS + b_row * S::QS_STRIDE;
        TBP_UNROLL(TBP_KG_UNROLL)
        for (int kg = 0; kg < KB; kg += TBP_G) {
            /* payload (and Q6_K high-bit) words of 4 fragments per ldmatrix.x4 */
            tb_u32 w[NI][TBP_QS_CHUNKS];
#if TBP_QS_CHUNKS == 2 && TBP_G == 1
            /* Q8_0: the block's two chunks of fragments f, f + 1 -> consecutive registers (the B pair) */
            const int lsel = (lane >> 3) & 1, fsel = lane >> 4; /* matrix j: chunk j & 1 of fragment f + j / 2 */
            const tb_u8 *sq8 = stage + L::OFF_QS + (wn * WTN + 8 * fsel + (lane & 7)) * S::QS_STRIDE + 16 * lsel;
#pragma unroll
            for (int f = 0; f < NI; f += 2)
                tbp_ldsm4(w[f][0], w[f][1], w[f + 1][0], w[f + 1][1], sq8 + 8 * f * S::QS_STRIDE + 32 * kg);
#else
#pragma unroll
            for (int c = 0; c < TBP_QS_CHUNKS; ++c)
#pragma unroll
                for (int f = 0; f < NI; f += 4)
                    tbp_ldsm4(w[f][c], w[f + 1][c], w[f + 2][c], w[f + 3][c],
                              sq + 32 * (f / 4) * S::QS_STRIDE + 16 * (kg * TBP_QS_CHUNKS / TBP_G + c));
#endif
#if TBP_QH_CHUNKS
            tb_u32 h[NI][2];
            const tb_u8 *sh = stage + L::OFF_QH + b_row * S::QH_STRIDE;
#pragma unroll
            for (int c = 0; c < 2; ++c)
#pragma unroll
                for (int f = 0; f < NI; f += 4)
                    tbp_ldsm4(h[f][c], h[f + 1][c], h[f + 2][c], h[f + 3][c],
                              sh + 32 * (f / 4) * S::QH_STRIDE + 16 * (kg / 2 + c));
#endif
#pragma unroll
            for (int j = 0; j < TBP_G; ++j) {
                const int kb = kg + j;
                tb_u32 a[MI][4];
                float dx[MI][2];
#pragma unroll
                for (int i = 0; i < MI; ++i) {
                    tbp_ldsm4(a[i][0], a[i][1], a[i][2], a[i][3], sa + i * 16 * L::A_STRIDE + kb * 32);
                    const tb_u8 *rp = stage + r_off + (kb * (BM / 16) + i) * 8 * (TBP_REC * 4);
                    const int2 r4 = *(const int2 *)rp;
                    dx[i][0] = tbp_as_float(r4.x);
                    dx[i][1] = tbp_as_float(r4.y);
                }
#pragma unroll
                for (int f = 0; f < NI; ++f) {
                    tb_u32 hw[2] = {0u, 0u};
#if defined(TB_FMT_Q5_0) || defined(TB_FMT_Q5_1)
                    hw[0] = *(const tb_u32 *)(stage + L::OFF_QH + (wn * WTN + 8 * f + g) * S::QH_STRIDE + 4 * kb);
#elif TBP_QH_CHUNKS
                    hw[0] = h[f][0];
                    hw[1] = h[f][1];
#endif
                    tb_u32 b0, b1;
                    tbp_unpack(w[f], hw, j, t, b0, b1);
                    /* scales of columns 2t, 2t+1: sw[col][0..NSC) */
                    const float *wp = (const float *)((const tb_u8 *)wsc + w_off) + (kb * BN + 8 * f) * TBP_NSC;
                    float sw[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
                    {
                        const float4 v0 = *(const float4 *)wp;
                        if (TBP_NSC == 2) {
                            sw[0][0] = v0.x, sw[0][1] = v0.y, sw[1][0] = v0.z, sw[1][1] = v0.w;
                        } else {
                            const float4 v1 = *(const float4 *)(wp + 4);
                            sw[0][0] = v0.x, sw[0][1] = v0.y, sw[0][2] = v0.z, sw[0][3] = v0.w;
                            sw[1][0] = v1.x, sw[1][1] = v1.y, sw[1][2] = v1.z, sw[1][3] = v1.w;
                        }
                    }
#pragma unroll
                    for (int i = 0; i < MI; ++i) {
#if TBP_G16
                        tb_i32 dl[4], dh[4];
                        tbp_mma16(dl, a[i][0], a[i][1], b0);
                        tbp_mma16(dh, a[i][2], a[i][3], b1);
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const float *s2 = sw[e & 1];
                            const float tl = tbp_fma(tbp_as_float(dl[e]), s2[0], s2[1]);
                            const float th = tbp_fma(tbp_as_float(dh[e]), s2[2], s2[3]);
                            acc[i][f][e] = tbp_fma(tl + th, dx[i][e >> 1], acc[i][f][e]);
                        }
#else
                        tb_i32 d[4];
                        tbp_mma32(d, a[i], b0, b1);
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const float *s2 = sw[e & 1];
                            const float tv = tbp_fma(tbp_as_float(d[e]), s2[0], s2[1]);
                            acc[i][f][e] = tbp_fma(tv, dx[i][e >> 1], acc[i][f][e]);
                        }
#endif
                    }
                }
            }
        }
#if TBP_ASYM
        /* min terms, sum over blocks of mw[n][b] * sx[m][b] (sx = x scale * x block sum): a GEMM of depth K/32 on
         * the tensor cores, m16n8k4 tf32 accumulating into acc itself, operands split hi + lo (3 products:
         * fp32-grade sums), instead of one more FFMA per accumulator and block */
#pragma unroll
        for (int kq = 0; kq < KB; kq += 4) {
            tb_u32 ah[MI][2], al[MI][2];
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                const float2 s2 =
                    *(const float2 *)(stage + r_off + ((kq + t) * (BM / 16) + i) * 8 * (TBP_REC * 4) + 16);
                tbp_split_tf32(s2.x, ah[i][0], al[i][0]);
                tbp_split_tf32(s2.y, ah[i][1], al[i][1]);
            }
#pragma unroll
            for (int f = 0; f < NI; ++f) {
                tb_u32 bh, bl;
                tbp_split_tf32(wsc[L::MW_OFF + (kq + t) * BN + wn * WTN + 8 * f + g], bh, bl);
#pragma unroll
                for (int i = 0; i < MI; ++i) {
                    tbp_mma_tf32(acc[i][f], al[i], bh);
                    tbp_mma_tf32(acc[i][f], ah[i], bl);
                    tbp_mma_tf32(acc[i][f], ah[i], bh);
                }
            }
        }
#endif
    }
    tbp_cp_wait<0>();

    const bool pairs = (n & 1) == 0;
#pragma unroll
    for (int i = 0; i < MI; ++i) {
#pragma unroll
        for (int f = 0; f < NI; ++f) {
            const int col = n0 + wn * WTN + 8 * f + 2 * t;
#pragma unroll
            for (int hrow = 0; hrow < 2; ++hrow) {
                const int row = m0 + wm * WTM + 16 * i + g + 8 * hrow;
                if (row >= m) continue;
                float *yp = y + (tb_size)row * (tb_size)n + (tb_size)col;
                const float v0 = acc[i][f][2 * hrow], v1 = acc[i][f][2 * hrow + 1];
                if (SK > 1) {
                    if (col < n) tbp_red_add(yp, v0);
                    if (col + 1 < n) tbp_red_add(yp + 1, v1);
                } else if (pairs && col + 1 < n) {
                    *(float2 *)yp = make_float2(v0, v1);
                } else {
                    if (col < n) yp[0] = v0;
                    if (col + 1 < n) yp[1] = v1;
                }
            }
        }
    }
}

/* MB = the second __launch_bounds__ argument (minimum resident workgroups per SM): 2 caps registers at 128
 * for 8 warps, so two workgroups (16 warps) hide latency and halve the wave-quantisation loss, at the
 * price of a few spilled registers for the bigger formats; the tuner measures both */
/* ENG = 0: mma.sync (tbp_nv_body); 1: wgmma (prefill_wgmma.h: warps_m warpgroups, BN = 64 * WM, BT = BM);
 * 2: warp-specialised wgmma (prefill_ws.h: warps_m consumer warpgroups + 1 producer warpgroup, BN = 64 * WM * R) */
template <int BN, int BM, int WN, int WM, int KB, int ST, int SK, int ENG>
TB_DEV void tbp_nv_variant(TB_PREFILL_PARAMS) {
#if defined(TB_CUDA) || defined(TB_EMU_NV)
    if constexpr (ENG == 1) {
        tbp_wg_body<BN, BM, WM, KB, ST, SK>(TB_PREFILL_ARGS);
        return;
    } else if constexpr (ENG == 2) {
        tbp_ws_body<BN, BM, WM, KB, ST, SK>(TB_PREFILL_ARGS);
        return;
    } else if constexpr (ENG == 3) {
        tbp_ws_body<BN, BM, WM, KB, ST, SK, 2>(TB_PREFILL_ARGS);
        return;
    } else
#endif
    {
        static_assert(ENG == 0, "the wgmma engines are CUDA-only");
        tbp_nv_body<BN, BM, WN, WM, KB, ST, SK>(TB_PREFILL_ARGS);
    }
}
/* engine 3: 2-CTA thread-block clusters (prefill_ws.h), along x for stream-K (its persistent grid), else along y
 * (neighbouring weight tiles of the same token tile); the launch needs no change (compile-time cluster shape) */
#define TBP_CLUSTER_0_0
#define TBP_CLUSTER_0_1
#define TBP_CLUSTER_0_2
#define TBP_CLUSTER_0_4
#define TBP_CLUSTER_1_0
#define TBP_CLUSTER_1_1
#define TBP_CLUSTER_1_2
#define TBP_CLUSTER_1_4
#define TBP_CLUSTER_2_0
#define TBP_CLUSTER_2_1
#define TBP_CLUSTER_2_2
#define TBP_CLUSTER_2_4
#define TBP_CLUSTER_3_0 __cluster_dims__(2, 1, 1)
#define TBP_CLUSTER_3_1 __cluster_dims__(1, 2, 1)
#define TBP_CLUSTER_3_2 __cluster_dims__(1, 2, 1)
#define TBP_CLUSTER_3_4 __cluster_dims__(1, 2, 1)
#if defined(TB_CUDA)
#define TBP_CLUSTER(ENG, SK) TBP_CLUSTER_##ENG##_##SK
#else
#define TBP_CLUSTER(ENG, SK)
#endif
#define TB_PREFILL_VARIANT(BN, BM, WN, WM, KB, ST, SK, MB, ENG)                                            \
    extern "C" __global__ TBP_CLUSTER(ENG, SK) TB_LAUNCH_BOUNDS(32 * WN * WM + (ENG >= 2 ? 128 : 0), MB) void \
        tb_prefill_n##BN##_m##BM##_wn##WN##_wm##WM##_kb##KB##_s##ST##_sk##SK##_mb##MB##_e##ENG(              \
            TB_PREFILL_PARAMS) {                                                                           \
        tbp_nv_variant<BN, BM, WN, WM, KB, ST, SK, ENG>(TB_PREFILL_ARGS);                                  \
    }

#endif /* NVIDIA */

#include "prefill_amd.h"

TB_PREFILL_PREP(0)
TB_PREFILL_PREP(1)
TB_PREFILL_PREP(2)
TB_PREFILL_PREP(4)

/* -DTB_PREFILL_VARIANTS='TB_PREFILL_VARIANT(128,128,4,2,4,3,1,1,0) ...' builds a subset; default: one */
#ifndef TB_PREFILL_VARIANTS
#define TB_PREFILL_VARIANTS TB_PREFILL_VARIANT(128, 64, 4, 2, 4, 2, 1, 1, 0)
#endif
TB_PREFILL_VARIANTS
