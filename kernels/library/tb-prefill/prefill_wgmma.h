/*
 * tb-prefill's wgmma engine (sm_90a, variants E1): fp16 warpgroup MMA with the weights dequantised ONCE per
 * workgroup tile straight into wgmma's A registers, the activations (fp16, written once per launch by the
 * prelaunch kernel) as the B operand in shared memory.
 *
 * Why not int8 wgmma: a 32-block's scales must be applied to each k32 partial of an int8 product (two FMAs
 * and an accumulator reset per accumulator and block): that is ~3 issue slots per accumulator per k32, while
 * m64nNk32 s8 delivers an accumulator's k32 in under one slot, so an int8 wgmma GEMM with per-32 scales is
 * issue-bound at about a third of its peak (the mma.sync kernel's ncu: 15-19 SASS per IMMA). Folding the
 * scales (and mins) into fp16 weights costs ~17 instructions per 8 weights once per tile, independent of M,
 * and the accumulators then never leave the tensor cores until the epilogue.
 *
 * Roles: the wgmma M (64 per warpgroup) is the WEIGHT rows, its N (BT = m_tile) the TOKENS, so D is y^T:
 *   warpgroup wg owns weight rows n0 + 64 wg + [0, 64); warp w of it rows 16 w + g, 16 w + g + 8.
 * A registers (m64k16, as mma.m16n8k16's A per warp): a0 = (row g, k 2t, 2t+1), a1 = (row g+8, same k),
 *   a2 = (row g, k 2t+8, 2t+9), a3 = (row g+8, same k). A lane's unpacked words hold logical k 4t..4t+3
 *   (lo) and 16+4t..16+4t+3 (hi) of a 32-block (tbp_unpack): so physical k p of each 16-half is logical
 *   4 ((p & 7) >> 1) + (p & 1) + 2 (p >> 3); the prelaunch stores the activations in that order (the sum over
 *   k is the same), the weights need no shuffle.
 * B (activations) in shared memory, K-major, no swizzle: 8 x 16-byte core matrices (8 tokens x 8 halves,
 *   token rows 16 bytes apart); core matrix (token group r8, k chunk c) at r8 * SBO + c * 128: LBO = 128
 *   (next 8 halves of K), SBO = KB * 512 (next 8 tokens). A wgmma k16 reads chunks 2h, 2h+1 from its start.
 * D (m64nBT f32): d[4 i + e] = (weight row 16 w + g + 8 (e >> 1), token 8 i + 2 t + (e & 1)).
 */
#pragma once

#if (defined(TB_CUDA) && defined(__CUDA_ARCH_FEAT_SM90_ALL)) || defined(TB_EMU_NV)
#define TBP_HAVE_WGMMA 1 /* TB_EMU_NV: tests/kernels/emu/tb_portability.h emulates the primitives below */
#else
#define TBP_HAVE_WGMMA 0
#endif

typedef unsigned long long tb_u64;

#if defined(TB_CUDA)
TB_DEV tb_u32 tbp_h2_fma(tb_u32 a, tb_u32 b, tb_u32 c) {
    tb_u32 d;
    asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
/* (lo, hi) -> f16x2 with lo in the low half */
TB_DEV tb_u32 tbp_h2_pack(float lo, float hi) {
    tb_u32 d;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}
#endif
/* bytes (sel 0: 0, 1; sel 1: 2, 3) of an int8x4 word -> f16x2 of the exact integers times `os` (a power of
 * two): the byte + 128 under exponent 2^10 is the half 1152 + b, then (1152 + b) os - 1152 os in one fma */
TB_DEV tb_u32 tbp_i8x2_to_h2(tb_u32 w, int sel, tb_u32 os2, tb_u32 neg2) {
    const tb_u32 raw = tb_prmt(w ^ 0x80808080u, 0x64646464u, sel ? 0x4342u : 0x4140u);
    return tbp_h2_fma(raw, os2, neg2);
}

#if TBP_HAVE_WGMMA && defined(TB_CUDA)
TB_DEV void tbp_wg_fence(void) { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
TB_DEV void tbp_wg_commit(void) { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
TB_DEV void tbp_wg_wait(void) {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* generic-proxy shared-memory writes (cp.async) made visible to wgmma's async proxy */
TB_DEV void tbp_fence_async_smem(void) { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
TB_DEV void tbp_keep(float &v) { asm volatile("" : "+f"(v)::"memory"); }
/* d[16] += A (64x16 f16: registers a[4]) . B (16x32 f16: K-major shared memory, descriptor b) */
TB_DEV void tbp_wgmma_n32(float *d, const tb_u32 *a, tb_u64 b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
        "}, {%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}
/* d[32] += A (64x16 f16: registers a[4]) . B (16x64 f16: K-major shared memory, descriptor b) */
TB_DEV void tbp_wgmma_n64(float *d, const tb_u32 *a, tb_u64 b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}
/* d[64] += A (64x16 f16: registers a[4]) . B (16x128 f16: K-major shared memory, descriptor b) */
TB_DEV void tbp_wgmma_n128(float *d, const tb_u32 *a, tb_u64 b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}
/* d[128] += A (64x16 f16: registers a[4]) . B (16x256 f16: K-major shared memory, descriptor b) */
TB_DEV void tbp_wgmma_n256(float *d, const tb_u32 *a, tb_u64 b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
        "}, {%128, %129, %130, %131}, %132, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}
template <int N>
TB_DEV void tbp_wgmma(float *d, const tb_u32 *a, tb_u64 b) {
    if constexpr (N == 32) tbp_wgmma_n32(d, a, b);
    else if constexpr (N == 64) tbp_wgmma_n64(d, a, b);
    else if constexpr (N == 128) tbp_wgmma_n128(d, a, b);
    else tbp_wgmma_n256(d, a, b);
}
#endif /* TBP_HAVE_WGMMA && TB_CUDA */

/* shared-memory matrix descriptor: start, LBO, SBO (16-byte units), no swizzle */
TB_DEV tb_u64 tbp_wg_desc(tb_u32 saddr, tb_u32 lbo, tb_u32 sbo) {
    return (tb_u64)((saddr & 0x3FFFFu) >> 4) | ((tb_u64)(lbo >> 4) << 16) | ((tb_u64)(sbo >> 4) << 32);
}

/* stage layout: the fp16 activation tile, then the weight parts as TbpLayout has them */
template <int BN, int BT, int KB>
struct TbpWgLayout {
    using S = TbpStage<KB>;
    static constexpr int X_BYTES = BT * KB * 64; /* BT tokens x 32 KB halves */
    static constexpr int SBO = KB * 512;
    static constexpr int QS_BYTES = BN * S::QS_STRIDE;
    static constexpr int QH_BYTES = BN * S::QH_STRIDE;
    static constexpr int SC_BYTES = BN * S::SC_STRIDE;
    static constexpr int OFF_QS = X_BYTES;
    static constexpr int OFF_QH = OFF_QS + QS_BYTES;
    static constexpr int OFF_SC = OFF_QH + QH_BYTES;
    static constexpr int STAGE = OFF_SC + SC_BYTES;
    static constexpr int WS_BYTES = KB * BN * (TBP_NSC + TBP_ASYM) * 4;
    static constexpr int MW_OFF = KB * BN * TBP_NSC;
    static constexpr int smem(int stages) { return stages * STAGE + WS_BYTES; }
};

/* prelaunch, E1: x (f32) -> fp16 in the permuted k order above, [Ms][K] halves at ws; one thread per 4.
 * tiled (E3, grid.y = 3): the same halves in the wgmma B tile's own order, so a stage's tile is one run per
 * 8-token group: slab (128 k) s, 8-token group g, 8-half chunk c of the slab, token r of the group at halves
 * ((s * Ms / 8 + g) * 16 + c) * 64 + 8 r (a stage of KB 4 holds one slab: groups SBO = 2 KiB apart, as in
 * shared memory) */
template <int SK>
__device__ TB_FORCEINLINE void tbp_prep_f16_body(TB_PREFILL_PARAMS, bool tiled) {
    (void)qs;
    (void)qh;
    (void)sc;
    const tb_size gt = (tb_size)TB_BID_X * 256u + (tb_size)TB_TID;
    const tb_size e0 = 4u * gt;
    if (e0 < (tb_size)m * (tb_size)k) {
        const tb_size row = e0 / (tb_size)k, col = e0 % (tb_size)k;
        const int p = (int)(col & 15u); /* physical positions p .. p+3 of a 16-half */
        const tb_size base = row * (tb_size)k + (col & ~(tb_size)15);
        /* logical = 4 ((p & 7) >> 1) + (p & 1) + 2 (p >> 3): pairs (L, L+1) at p and p+2 */
        const int l0 = 4 * ((p & 7) >> 1) + 2 * (p >> 3);
        const float2 v0 = *(const float2 *)(x + base + l0);
        const float2 v1 = *(const float2 *)(x + base + l0 + 4);
        uint2 o;
        o.x = tbp_h2_pack(v0.x, v0.y);
        o.y = tbp_h2_pack(v1.x, v1.y);
        tb_size at = e0;
        if (tiled) {
            const tb_size ms8 = (tb_size)((m + 15) & ~15) / 8u;
            at = (((col >> 7) * ms8 + (row >> 3)) * 16u + ((col & 127u) >> 3)) * 64u + (row & 7u) * 8u + (col & 7u);
        }
        *(uint2 *)((tb_u16 *)ws + at) = o; /* 8-byte aligned: e0 and at are multiples of 4 halves */
    }
    if (SK != 1) { /* split-K, or E2 stream-K (SK 0) */
        const tb_size cells = (tb_size)m * (tb_size)n;
        for (tb_size i = 4u * gt; i < 4u * gt + 4u && i < cells; ++i) y[i] = 0.0f;
    }
}

/* BN = 64 * WG weight rows, BT tokens (the wgmma N), KB blocks per stage, ST stages, SK split-K */
template <int BN, int BT, int WG, int KB, int ST, int SK>
TB_DEV void tbp_wg_body(TB_PREFILL_PARAMS) {
#if TBP_HAVE_WGMMA
    using L = TbpWgLayout<BN, BT, KB>;
    using S = TbpStage<KB>;
    constexpr int THREADS = 128 * WG;
    static_assert(BN == 64 * WG, "one m64 weight tile per warpgroup");
    static_assert(BT % 32 == 0 && BT <= 256, "wgmma N");
    static_assert(KB % TBP_G == 0 && (KB & (KB - 1)) == 0 && KB <= 8, "stage blocks");
    TBP_DYN_SMEM
    tb_u8 *smem = tbp_smem;
    float *wsc = (float *)(smem + ST * L::STAGE);

    const int tid = TB_TID, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int n0 = TB_BID_Y * BN, m0 = TB_BID_X * BT; /* token tiles along x: see the manifest's grid */
    const int nst_all = (k >> 5) / KB;
    const int per = (nst_all + SK - 1) / SK;
    const int s_begin = TBP_BID_Z * per;
    const int nst = (nst_all - s_begin) < per ? (nst_all - s_begin) : per;
    const TbpRows rows = tbp_rows(k);

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
    /* activation chunks: 8 consecutive items = the 8 token rows of one core matrix (conflict-free stores) */
    constexpr int XCH = BT * KB * 4, XIT = (XCH + THREADS - 1) / THREADS;
    const tb_u16 *xh = (const tb_u16 *)ws;

    auto load = [&](int s, int buf) {
        tb_u8 *stage = smem + buf * L::STAGE;
        const int b0 = s * KB;
#pragma unroll
        for (int j = 0; j < XIT; ++j) {
            const int i = tid + j * THREADS;
            if (XCH % THREADS != 0 && i >= XCH) break;
            const int r8 = i & 7, c = (i >> 3) % (KB * 4), rg = (i >> 3) / (KB * 4);
            const int tok = m0 + rg * 8 + r8;
            const bool ok = tok < m;
            const tb_u16 *src = ok ? xh + (tb_size)tok * (tb_size)k + (tb_size)b0 * 32u + 8u * (tb_size)c : xh;
            tbp_cp_async<16>(stage + rg * L::SBO + c * 128 + r8 * 16, src, ok ? 16 : 0);
        }
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

    float acc[BT / 2];
#pragma unroll
    for (int i = 0; i < BT / 2; ++i) acc[i] = 0.0f;

#pragma unroll
    for (int s = 0; s < ST - 1; ++s) {
        if (s < nst) load(s_begin + s, s);
        tbp_cp_commit();
    }

    const int wrow = 16 * warp + (lane & 15); /* ldmatrix.x2 row address: lanes 0-7 rows g, 8-15 rows g + 8 */
    const int r_g = 16 * warp + g;            /* this lane's weight rows r_g, r_g + 8 of the tile (64 wg + ...) */
    /* operand-scale fold: int8 operand o = q / os exactly; (1152 + o) os - 1152 os = q in one fma */
    const tb_u32 os2 = tbp_h2_pack(TBP_OPERAND_SCALE, TBP_OPERAND_SCALE);
    const tb_u32 neg2 = tbp_h2_pack(-1152.0f * TBP_OPERAND_SCALE, -1152.0f * TBP_OPERAND_SCALE);

    for (int it = 0; it < nst; ++it) {
        tbp_cp_wait<ST - 2>();
        tbp_fence_async_smem();
        tb_sync();
        if (it + ST - 1 < nst) load(s_begin + it + ST - 1, (it + ST - 1) % ST);
        tbp_cp_commit();
        const tb_u8 *stage = smem + (it % ST) * L::STAGE;
        tbp_decode_stage_l<L, BN, KB, THREADS>(stage, wsc, s_begin + it, n0, k);
        tb_sync();
        const tb_u32 xs = tbp_saddr(stage);
        const tb_u8 *sq = stage + L::OFF_QS + wrow * S::QS_STRIDE;

#pragma unroll
        for (int kg = 0; kg < KB; kg += TBP_G) {
            tb_u32 w[2][TBP_QS_CHUNKS];
#pragma unroll
            for (int c = 0; c < TBP_QS_CHUNKS; ++c)
                tbp_ldsm2(w[0][c], w[1][c], sq + 16 * (kg * TBP_QS_CHUNKS / TBP_G + c));
#if TBP_QH_CHUNKS
            tb_u32 h[2][2];
            const tb_u8 *sh = stage + L::OFF_QH + wrow * S::QH_STRIDE;
#pragma unroll
            for (int c = 0; c < 2; ++c) tbp_ldsm2(h[0][c], h[1][c], sh + 16 * (kg / 2 + c));
#endif
#pragma unroll
            for (int j = 0; j < TBP_G; ++j) {
                const int kb = kg + j;
                tb_u32 a[2][4]; /* k16 halves 0 (lo words) and 1 (hi words) of the block */
#pragma unroll
                for (int f = 0; f < 2; ++f) {
                    const int r = r_g + 8 * f;
                    tb_u32 hw[2] = {0u, 0u};
#if defined(TB_FMT_Q5_0) || defined(TB_FMT_Q5_1)
                    hw[0] = *(const tb_u32 *)(stage + L::OFF_QH + r * S::QH_STRIDE + 4 * kb);
#elif TBP_QH_CHUNKS
                    hw[0] = h[f][0];
                    hw[1] = h[f][1];
#endif
                    tb_u32 lo, hi;
                    tbp_unpack(w[f], hw, j, t, lo, hi);
                    const float *wp = wsc + (kb * BN + r) * TBP_NSC;
                    const float dlo = wp[0] * (1.0f / TBP_OPERAND_SCALE); /* exact: a power of two */
                    const float dhi = (TBP_NSC == 4 ? wp[2] : wp[0]) * (1.0f / TBP_OPERAND_SCALE);
                    const float mw = TBP_ASYM ? wsc[L::MW_OFF + kb * BN + r] : 0.0f;
                    const tb_u32 dl2 = tbp_h2_pack(dlo, dlo), dh2 = tbp_h2_pack(dhi, dhi), m2 = tbp_h2_pack(mw, mw);
                    a[0][f] = tbp_h2_fma(tbp_i8x2_to_h2(lo, 0, os2, neg2), dl2, m2);
                    a[0][2 + f] = tbp_h2_fma(tbp_i8x2_to_h2(lo, 1, os2, neg2), dl2, m2);
                    a[1][f] = tbp_h2_fma(tbp_i8x2_to_h2(hi, 0, os2, neg2), dh2, m2);
                    a[1][2 + f] = tbp_h2_fma(tbp_i8x2_to_h2(hi, 1, os2, neg2), dh2, m2);
                }
                tbp_wg_fence();
#pragma unroll
                for (int hf = 0; hf < 2; ++hf)
                    tbp_wgmma<BT>(acc, a[hf], tbp_wg_desc(xs + (tb_u32)((4 * kb + 2 * hf) * 128), 128u, L::SBO));
                tbp_wg_commit();
                tbp_wg_wait<1>();
            }
        }
        tbp_wg_wait<0>();
    }
    tbp_cp_wait<0>();
#pragma unroll
    for (int i = 0; i < BT / 2; ++i) tbp_keep(acc[i]);

#pragma unroll
    for (int i = 0; i < BT / 8; ++i) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int row = n0 + 64 * (warp >> 2) + 16 * (warp & 3) + g + 8 * (e >> 1);
            const int tok = m0 + 8 * i + 2 * t + (e & 1);
            if (row >= n || tok >= m) continue;
            float *yp = y + (tb_size)tok * (tb_size)n + (tb_size)row;
            if (SK > 1)
                tbp_red_add(yp, acc[4 * i + e]);
            else
                *yp = acc[4 * i + e];
        }
    }
#else
    (void)qs, (void)qh, (void)sc, (void)x, (void)y, (void)ws, (void)m, (void)n, (void)k;
#if defined(TB_CUDA)
    __trap(); /* built without sm_90a: the E1 variants need wgmma */
#endif
#endif
}
