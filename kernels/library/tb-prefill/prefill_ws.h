/*
 * tb-prefill's warp-specialised wgmma engine (sm_90a, variants E2).
 *
 * Why: E1 (prefill_wgmma.h) is latency-bound on the H200 (ncu, Q4_0 GateUp M=2048: tensor pipe 26 %, 66 % of
 * cycles with no eligible warp): every warp copies, decodes the stage's scales, meets two block barriers per
 * stage and drains its wgmma groups (wait_group 0) before the next stage. Here the roles are split:
 *   - one PRODUCER warpgroup (the last one) copies raw true-bytes weight tiles and fp16 activation tiles into an ST-stage shared-memory ring with
 *     cp.async, and signals each stage with cp.async.mbarrier.arrive.noinc on the stage's FULL mbarrier;
 *   - WG CONSUMER warpgroups wait on FULL, dequantise their weight rows straight into
 *     wgmma's A registers (scales and mins folded in, decoded in-lane from the raw scale bytes: no decoded-scale
 *     pass, no block barrier) and issue wgmma m64nBTk16 from them, one commit group per 32-block, keeping the
 *     previous block's group in flight while the next block dequantises (wait_group 1, never 0 in the loop);
 *     when the first group of stage s has been committed and waited to 1, every group of stage s - 1 is done
 *     and each consumer thread arrives on that stage's EMPTY mbarrier, which the producer waits on before
 *     refilling it. The only block barrier is the one after the mbarrier init.
 * Tile: a consumer warpgroup owns R = BN / (64 WG) m64 weight tiles (R = 2: two wgmma per k16 sharing the
 * activation descriptor), so BN = 256 with two consumers: the fp16 activations, the bulk of the L2 traffic
 * (BT * 64 bytes per 32-block against BN * ~18 for 4-bit weights), are re-read N / BN times.
 * Registers: no setmaxnreg but on the WIDE tile. Two consumers (384 threads) get 168 registers, one consumer (256
 * threads) 255. With setmaxnreg.inc NVRTC 13.0.88 serialises every wgmma of the kernel (ptxas C7513: "non wgmma
 * instructions defining input registers of a wgmma between start and end of the pipeline stage") as long as a
 * consumer writes the next block's A registers with a group in flight (wait_group 1): .dec alone, or .inc with
 * the group drained per block (wait_group 0), compiles clean (2026-12-01, k2y). So two consumers hold at most 64
 * accumulators each (n_tile 128 x 128 tokens, or 256 x 64), the 128-accumulator tiles run with one consumer, and
 * the WIDE tile N256/M128/W4x4 (four consumers of 64) raises its consumers to 112 registers and drains per block:
 * there the other three consumers' groups keep the tensor pipe busy while one dequantises, and a stage is
 * released right after its last block.
 * SASS (ptxas 13.0.88, nvdisasm): per 32-block a consumer warp issues WARPGROUP.ARRIVE, its HGMMA pair(s) on
 * double-buffered A registers and WARPGROUP.DEPBAR.LE gsb0 1; one DEPBAR 0 after the loop. The scales: each lane
 * of a quad decodes block t's for its rows once per stage, the others fetch them with shfl.idx (decoded per
 * lane and block, Q4_K's 6-bit scales had been ~40 % of its instructions): a stage's loop body is ~264 SASS
 * instructions for Q4_0, ~357 for Q4_K (538 before), N256/M64/W4x4: ~66 / ~89 per block and warp. There the
 * 16 consumer warps issue 16 x 89 / 4 = 356 cycles per scheduler against 256 tensor cycles per block (m64n64
 * tiles): Q4_K is issue-bound at 64 tokens; 128-token tiles (W4x2, W4x1) halve the issue per tensor cycle.
 * Operand layouts, the k permutation of the fp16 activations and D's layout are E1's (prefill_wgmma.h).
 */
#pragma once

/* registers per thread of a workgroup of THREADS threads at launch under __launch_bounds__(THREADS, 1): the SM's
 * 64 Ki shared out per warp in units of 8 per thread, at most 255 (ptxas: 96 for 640 threads, 168 for 384):
 * the whole pool that setmaxnreg redistributes */
/* the WIDE tile's split (tbp_ws_body): producer / consumer registers per thread (-D only to test the guard) */
#ifndef TBP_WIDE_PREG
#define TBP_WIDE_PREG 32
#endif
#ifndef TBP_WIDE_CREG
#define TBP_WIDE_CREG 112
#endif
template <int THREADS>
struct TbpLaunchRegs {
    static constexpr int value = (65536 / THREADS) / 8 * 8 > 255 ? 255 : (65536 / THREADS) / 8 * 8;
};

#if defined(TB_CUDA)
TB_DEV void tbp_mbar_init(tb_u64 *bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(tbp_saddr(bar)), "r"(count) : "memory");
}
/* the inits visible to the other threads' mbarrier operations (then one block barrier) */
TB_DEV void tbp_mbar_fence_init(void) { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
TB_DEV void tbp_mbar_arrive(tb_u64 *bar) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(tbp_saddr(bar)) : "memory");
}
/* wait until the phase of parity `parity` has completed (try_wait suspends for a while before it fails) */
TB_DEV void tbp_mbar_wait(tb_u64 *bar, tb_u32 parity) {
    tb_u32 done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(tbp_saddr(bar)), "r"(parity)
                     : "memory");
    } while (!done);
}
/* one arrival on `bar` once every cp.async this thread issued so far has landed (the init count has it) */
TB_DEV void tbp_cp_async_mbar_arrive(tb_u64 *bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(tbp_saddr(bar)) : "memory");
}
TB_DEV void tbp_cp_wait_all(void) { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
/* ---- 2-CTA clusters (E3): the two workgroups of a cluster share the activation tile ---- */
TB_DEV int tbp_cluster_rank(void) {
    tb_u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return (int)r;
}
/* every thread of every workgroup of the cluster (release / acquire: remote arrivals and copies before it) */
TB_DEV void tbp_cluster_sync(void) {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
TB_DEV void tbp_syncwarp(void) { __syncwarp(); }
/* one arrival on the mbarrier at the same shared offset in cluster workgroup `rank` (mapa) */
TB_DEV void tbp_mbar_arrive_peer(tb_u64 *bar, int rank) {
    asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
                 "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [ra];\n}\n" ::"r"(tbp_saddr(bar)),
                 "r"(rank)
                 : "memory");
}
/* one arrival that also expects `bytes` of asynchronous copies (complete_tx) in the current phase */
TB_DEV void tbp_mbar_arrive_expect_tx(tb_u64 *bar, tb_u32 bytes) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(tbp_saddr(bar)),
                 "r"(bytes)
                 : "memory");
}
/* the producer's wait for slots that the peer workgroup's consumers release too (their remote arrivals) */
TB_DEV void tbp_mbar_wait_cluster(tb_u64 *bar, tb_u32 parity) {
    tb_u32 done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(tbp_saddr(bar)), "r"(parity)
                     : "memory");
    } while (!done);
}
/* `bytes` (a multiple of 16) from global src into shared dst of every workgroup in `mask`, each one's mbarrier
 * at bar's offset counting them (complete_tx): one TMA bulk copy, the L2 read once for the cluster */
TB_DEV void tbp_bulk_g2s_mc(void *dst, const void *src, tb_u32 bytes, tb_u64 *bar, tb_u16 mask) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, "
                 "[%3], %4;\n" ::"r"(tbp_saddr(dst)),
                 "l"(src), "r"(bytes), "r"(tbp_saddr(bar)), "h"(mask)
                 : "memory");
}
/* the warpgroup's register budget raised / lowered to N (a multiple of 8, 24..256), inside the CTA's pool: the
 * registers the launch gave (TbpLaunchRegs per thread); .inc waits until other warpgroups' .dec freed them */
template <int N>
TB_DEV void tbp_setmaxnreg_inc(void) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
TB_DEV void tbp_setmaxnreg_dec(void) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
/* lane src's v (src inside the warp) */
TB_DEV tb_u32 tbp_shfl_idx(tb_u32 v, int src) { return __shfl_sync(0xffffffffu, v, src); }
/* the value is computed here, in program order with the volatile asm around it (no code motion past it) */
TB_DEV void tbp_pin(tb_u32 &v) { asm volatile("" : "+r"(v)); }
TB_DEV void tbp_pin(tb_u64 &v) { asm volatile("" : "+l"(v)); }
#endif /* (TB_EMU_NV: tests/kernels/emu/tb_portability.h emulates these, the mbarrier phases included) */

/* E2 shared memory: ST stages laid out as E1's (TbpWgLayout: fp16 activations, then qs / qh / raw sc), then
 * the FULL and EMPTY mbarriers of every stage (8 bytes each); no decoded-scale area */
template <int BN, int BT, int KB>
struct TbpWsLayout {
    using W = TbpWgLayout<BN, BT, KB>;
    static constexpr int STAGE = W::STAGE;
    static constexpr int smem(int stages) { return stages * STAGE + 16 * stages; }
};

/* the producer's share of one part's stage copy: ROWS rows of CPR chunks of CH bytes over PT threads, the
 * addresses recomputed per stage (TbpCopy keeps one 64-bit pointer per item, live across the whole loop) */
template <int ROWS, int CPR, int CH, int PT, int UNR = 2>
TB_DEV void tbp_ws_copy(tb_u8 *dst, int dst_stride, const tb_u8 *base, int row0, int limit, tb_size row_bytes,
                        tb_size off, int pt) {
    static_assert(PT % CPR == 0, "chunks per row divide the producer threads");
    constexpr int STEP = PT / CPR, ITEMS = (ROWS + STEP - 1) / STEP;
    const int c = pt % CPR, r0 = pt / CPR;
    const tb_u8 *src = base + (tb_size)(row0 + r0) * row_bytes + off + (tb_size)(c * CH);
    dst += r0 * dst_stride + c * CH;
#pragma unroll UNR
    for (int j = 0; j < ITEMS; ++j) {
        const int r = r0 + j * STEP;
        if (ROWS % STEP != 0 && r >= ROWS) break;
        const bool ok = row0 + r < limit;
        tbp_cp_async<CH>(dst + j * STEP * dst_stride, ok ? src + (tb_size)(j * STEP) * row_bytes : base, ok ? CH : 0);
    }
}

/* one weight row's two unpacked words (logical k 4t.. and 16+4t..) -> fp16 A registers of row half f:
 * a[0] = k16 half 0 (lo word), a[1] = half 1 (hi word), as E1 builds them; dl2 / dh2 the scales of the two
 * halves, m2 the min (f16x2, both halves alike) */
TB_DEV void tbp_ws_dequant(tb_u32 lo, tb_u32 hi, tb_u32 dl2, tb_u32 dh2, tb_u32 m2, tb_u32 os2, tb_u32 neg2, int f,
                           tb_u32 (*a)[4]) {
    a[0][f] = tbp_h2_fma(tbp_i8x2_to_h2(lo, 0, os2, neg2), dl2, m2);
    a[0][2 + f] = tbp_h2_fma(tbp_i8x2_to_h2(lo, 1, os2, neg2), dl2, m2);
    a[1][f] = tbp_h2_fma(tbp_i8x2_to_h2(hi, 0, os2, neg2), dh2, m2);
    a[1][2 + f] = tbp_h2_fma(tbp_i8x2_to_h2(hi, 1, os2, neg2), dh2, m2);
}

/* BN = 64 * WG * R weight rows, BT tokens (the wgmma N), WG consumer warpgroups (+ 1 producer), KB blocks per
 * stage, ST stages, SK split-K; SK = 0: stream-K. Why: one workgroup per SM (registers, shared memory), so a
 * grid of T tiles runs in ceil(T / #SMs) waves (Q4_0 GateUp M=128, N256/M64: 136 tiles on 132 SMs = 2 waves,
 * the second 3 % full). With SK 0 the grid is the SMs (G, the manifest's launch: cus), persistent: the first
 * T / G - 1 whole waves (all T / G when G divides T) run tile by tile in the plain grid's order (token tiles
 * fastest), then the work units (tile, stage), S = K / (32 KB) stages per tile, of the last G + T % G tiles are
 * cut into one contiguous, even share per workgroup (+-1 unit; "data-parallel + stream-K"); a share crosses
 * tile boundaries mid-K: each piece of a tile (a segment) is accumulated from zero and added into y (zeroed by
 * the prelaunch kernel), a whole tile stored.
 * Producer and consumers walk the same segments; the ring index runs on across them, so a segment's first
 * stage releases the previous segment's last (its groups retired by the wait_group 0 before its epilogue). */
template <int BN, int BT, int WG, int KB, int ST, int SK, int CL = 1>
TB_DEV void tbp_ws_body(TB_PREFILL_PARAMS) {
#if TBP_HAVE_WGMMA
    using L = TbpWgLayout<BN, BT, KB>;
    using S = TbpStage<KB>;
    constexpr int R = BN / (64 * WG);
    constexpr int PT = 128; /* producer threads */
    static_assert(BN == 64 * WG * R && (R == 1 || R == 2), "one or two m64 weight tiles per consumer warpgroup");
    static_assert(BT % 32 == 0 && BT <= 256 && R * BT <= 256, "wgmma N; R * BT / 2 accumulators per thread");
    static_assert(KB == 4, "the 4 lanes of a quad decode the stage's 4 blocks' scales, one each");
    static_assert(SK >= 0 && SK <= 2, "every split has a stage: ceil(s / 2) and s - ceil(s / 2) >= 1 for s >= 2 stages");
    /* WIDE: four consumers of m64 x 128 tokens (N256/M128/W4x4: 64 accumulators each), the L2 bytes per MAC of
     * N256/M64 less the weights' half (Q8_0 0.0161 against 0.0244 B, Q4_0 0.0122 against 0.0166). 640 threads
     * get 96 registers (NVRTC 13.0.88: spills 64 bytes, wgmma serialised for want of registers, C7512), so the
     * producer gives back to 32 and the consumers take 112. setmaxnreg moves registers inside the CTA's own pool
     * (PTX ISA: "a pool of available registers is maintained per-CTA"; .inc blocks until the pool has them; SASS
     * USETMAXREG.TRY_ALLOC.CTAPOOL in a retry loop): the pool is what the launch gave, 96 x 640 = 480 per
     * thread of a warpgroup, so WG * CREG + PREG <= (WG + 1) * 96. k2y's 56 / 112 asked for 504: the producer's
     * .dec freed 4 x 128 x 40 registers, two consumers' .inc took them, the other two spun in .inc forever and
     * every WIDE E2 / E3 variant hung on the H200 (2026-12-01). 104 for the consumers serialises Q4_K's wgmma
     * (C7512), so the producer takes 32: its copy loops not unrolled (XUNR 1: 0-52 bytes of spills at 2 and 4).
     * Under setmaxnreg.inc ptxas serialises every wgmma (C7513) when the next block's A registers are written
     * while a group is in flight (wait_group 1); the same source drained per block (wait_group 0) compiles clean,
     * so a WIDE consumer has no group in flight while it dequantises: the other three consumers' groups keep the
     * tensor pipe fed (each block is 2 x m64n128k16 = 128 tensor cycles per consumer, 512 for the four). */
    constexpr bool WIDE = WG == 4 && R * BT == 128;
    constexpr int PREG = TBP_WIDE_PREG, CREG = TBP_WIDE_CREG, WAITN = WIDE ? 0 : 1, XUNR = WIDE ? 1 : 2;
    static_assert(!WIDE || WG * CREG + PREG <= (WG + 1) * TbpLaunchRegs<128 * (WG + 1)>::value,
                  "setmaxnreg redistributes the CTA's launch registers: .inc past them waits forever");
    /* CL = 2 (E3): a cluster of two workgroups on neighbouring weight tiles (n0, n0 + BN) and the same tokens and
     * stages; each producer copies half of the stage's activation tile with ONE TMA bulk copy multicast into both
     * workgroups' shared memory (the prelaunch kernel writes the fp16 activations in the tile's own core-matrix
     * order, grid.y = 3: a stage's 8-token groups are consecutive 2 KiB runs), so the activations are read from
     * L2 once per pair: WIDE + CL 2, Q4_0 34 KiB per stage against WIDE's 50 (Q8_0 50 against 66). A slot is
     * refilled once BOTH workgroups' consumers released it: every consumer warp arrives on its own and on the
     * peer's EMPTY mbarrier (mapa); FULL counts the producer's cp.async arrivals, one arrive.expect_tx of the
     * whole tile's bytes and the two copies' complete_tx. Cluster barriers after the mbarrier init (the peer's
     * barriers exist before a copy or an arrival reaches them) and before exit (none reaches a finished one). */
    static_assert(CL == 1 || (CL == 2 && WIDE && KB == 4), "clusters: the WIDE tile, 128-k stages (2 KiB groups)");
    const int rank = CL > 1 ? tbp_cluster_rank() : 0; /* SK 0: clusters along x (the persistent grid), else y */
    TBP_DYN_SMEM
    tb_u8 *smem = tbp_smem;
    tb_u64 *full = (tb_u64 *)(smem + ST * L::STAGE), *empty = full + ST;

    const int tid = TB_TID, warp = tid >> 5, wg = warp >> 2;
    const int nst_all = (k >> 5) / KB;
    const TbpRows rows = tbp_rows(k);
    /* seg(n0, m0, s_begin, nst, it0): this workgroup's segments, nst >= 1 stages each; it0 the ring index of
     * the first */
    auto walk = [&](auto &&seg) {
        if constexpr (SK == 0) {
            /* CL 2: the cluster walks pair tiles (2 BN rows), its workgroups the two halves */
            const int tiles_m = (m + BT - 1) / BT, tiles = tiles_m * (((n + BN - 1) / BN) / CL), g = TBP_GRID_X / CL;
            const int bid = TB_BID_X / CL;
            /* whole waves but the last full one run as the plain grid (tile w * g + x: the same L2 locality,
             * whole tiles stored); the last full wave and the part-full one are shared out in units */
            const int dp = tiles % g == 0 ? tiles : (tiles / g > 0 ? tiles / g - 1 : 0) * g;
            int it0 = 0;
            for (int tile = bid; tile < dp; tile += g) {
                seg((tile / tiles_m) * (CL * BN) + rank * BN, (tile % tiles_m) * BT, 0, nst_all, it0);
                it0 += nst_all;
            }
            /* (two call sites: one loop over both phases costs registers, N256/M64/W4x2 spilling at 168) */
            const long long units = (long long)(tiles - dp) * (long long)nst_all;
            int u = dp * nst_all + (int)(units * bid / g);
            const int u_end = dp * nst_all + (int)(units * (bid + 1) / g);
            while (u < u_end) {
                const int tile = u / nst_all, s0 = u - tile * nst_all;
                const int cnt = (nst_all - s0) < (u_end - u) ? (nst_all - s0) : (u_end - u);
                seg((tile / tiles_m) * (CL * BN) + rank * BN, (tile % tiles_m) * BT, s0, cnt, it0);
                u += cnt;
                it0 += cnt;
            }
        } else {
            const int per = (nst_all + SK - 1) / SK;
            const int s_begin = TBP_BID_Z * per;
            const int nst = (nst_all - s_begin) < per ? (nst_all - s_begin) : per;
            seg(TB_BID_Y * BN, TB_BID_X * BT, s_begin, nst, 0); /* token tiles along x, as E1 (CL 2: pairs in y) */
        }
    };

    if (tid == 0) {
        for (int s = 0; s < ST; ++s) {
            /* one noinc cp.async arrival per producer thread (CL 2: + the arrive.expect_tx) */
            tbp_mbar_init(full + s, PT + (CL > 1 ? 1 : 0));
            /* one arrival per consumer thread (CL 2: per consumer warp of both workgroups) */
            tbp_mbar_init(empty + s, CL > 1 ? CL * 4 * WG : 128 * WG);
        }
        tbp_mbar_fence_init();
    }
    if constexpr (CL > 1)
        tbp_cluster_sync();
    else
        tb_sync();

    if (wg == WG) { /* ---------------------------------------- producer ------------------------------------ */
        if constexpr (WIDE) tbp_setmaxnreg_dec<PREG>(); /* (TB_EMU_NV: the CTA pool emulated) */
        const int pt = tid - 128 * WG;
        /* activation chunks: thread pt copies chunk c of token r8 of 8-token groups rg0, rg0 + XG, ... (8
         * consecutive threads = the 8 token rows of one core matrix: conflict-free stores) */
        constexpr int CPT = KB * 4, XG = PT / 8 / CPT, XIT = BT / 8 / XG;
        static_assert((PT / 8) % CPT == 0 && (BT / 8) % XG == 0, "activation chunks per producer thread");
        const int r8 = pt & 7, c = (pt >> 3) % CPT, rg0 = (pt >> 3) / CPT;
        const tb_u16 *xh = (const tb_u16 *)ws;
        walk([&](const int n0, const int m0, const int s_begin, const int nst, const int it0) {
        for (int it = it0; it < it0 + nst; ++it) {
            const int buf = it % ST;
            if constexpr (CL > 1)
                tbp_mbar_wait_cluster(empty + buf, ((tb_u32)(it / ST) & 1u) ^ 1u);
            else
                tbp_mbar_wait(empty + buf, ((tb_u32)(it / ST) & 1u) ^ 1u); /* the first round passes at once */
            tb_u8 *stage = smem + buf * L::STAGE;
            const int b0 = (s_begin + it - it0) * KB;
            if constexpr (CL > 1) {
                /* the tile's 8-token groups that exist in the workspace (round_up(m, 16) tokens): this
                 * workgroup's half of them, from the tiled layout's run of slab b0 / KB */
                const int ms = (m + 15) & ~15;
                const int groups = (ms - m0) / 8 < BT / 8 ? (ms - m0) / 8 : BT / 8, half = (groups + 1) / 2;
                const int first = rank ? half : 0, cnt = rank ? groups - half : half;
                if (pt == 0) {
                    tbp_mbar_arrive_expect_tx(full + buf, (tb_u32)(groups * L::SBO));
                    const tb_size run = ((tb_size)(b0 / KB) * (tb_size)(ms / 8) + (tb_size)(m0 / 8 + first)) * L::SBO;
                    if (cnt > 0)
                        tbp_bulk_g2s_mc(stage + first * L::SBO, ws + run, (tb_u32)(cnt * L::SBO), full + buf,
                                        (tb_u16)((1u << CL) - 1u));
                }
            } else {
                tb_u8 *xd = stage + rg0 * L::SBO + c * 128 + r8 * 16;
                if constexpr (WIDE) {
                    /* 32 registers: one pointer stepped by 8 XG tokens, not unrolled (unrolled, ptxas hoists a
                     * 64-bit offset per item out of the stage loop and the producer spills 8-52 bytes) */
                    const int row = m0 + 8 * rg0 + r8;
                    const tb_u16 *xs = xh + (tb_size)row * (tb_size)k + (tb_size)b0 * 32u + 8u * (tb_size)c;
#pragma unroll 1
                    for (int j = 0; j < XIT; ++j) {
                        const bool ok = row + 8 * j * XG < m;
                        tbp_cp_async<16>(xd + j * XG * L::SBO, ok ? xs : xh, ok ? 16 : 0);
                        xs += (tb_size)(8 * XG) * (tb_size)k;
                    }
                } else {
                    const tb_u16 *xs0 = xh + (tb_size)(m0 + 8 * rg0 + r8) * (tb_size)k + (tb_size)b0 * 32u + 8u * (tb_size)c;
#pragma unroll 4
                    for (int j = 0; j < XIT; ++j) {
                        const bool ok = m0 + 8 * (rg0 + j * XG) + r8 < m;
                        tbp_cp_async<16>(xd + j * XG * L::SBO, ok ? xs0 + (tb_size)(8 * j * XG) * (tb_size)k : xh,
                                         ok ? 16 : 0);
                    }
                }
            }
            tbp_ws_copy<BN, S::QS / 16, 16, PT, XUNR>(stage + L::OFF_QS, S::QS_STRIDE, qs, n0, n, rows.qs_row,
                                                (tb_size)b0 * TBP_QS_BPB, pt);
#if TBP_QH_BPB
            constexpr int HCH = S::QH >= 16 ? 16 : S::QH;
            tbp_ws_copy<BN, S::QH / HCH, HCH, PT, XUNR>(stage + L::OFF_QH, S::QH_STRIDE, qh, n0, n, rows.qh_row,
                                                  (tb_size)b0 * TBP_QH_BPB, pt);
#endif
#if defined(TB_FMT_Q6_K)
            tbp_q6k_sc_cp_async<BN>(stage + L::OFF_SC, S::SC_STRIDE, sc, rows, n0, n, b0, pt, PT);
#else
            tbp_ws_copy<BN, S::SC / S::SC_CHUNK, S::SC_CHUNK, PT, XUNR>(stage + L::OFF_SC, S::SC_STRIDE, sc, n0, n, rows.sc_row,
                                                                  tbp_sc_offset(rows, 0, b0), pt);
#endif
            tbp_cp_async_mbar_arrive(full + buf);
        }
        });
        tbp_cp_wait_all();
        if constexpr (CL > 1) tbp_cluster_sync();
        return;
    }

    /* ------------------------------------------------ consumers ------------------------------------------ */
    if constexpr (WIDE) tbp_setmaxnreg_inc<CREG>();
    const int lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int wrow = 16 * (warp & 3) + (lane & 15); /* ldmatrix.x2 row address inside an m64 tile */
    const int r_g = 16 * (warp & 3) + g;            /* this lane's rows r_g, r_g + 8 of an m64 tile */
    const tb_u32 os2 = tbp_h2_pack(TBP_OPERAND_SCALE, TBP_OPERAND_SCALE);
    const tb_u32 neg2 = tbp_h2_pack(-1152.0f * TBP_OPERAND_SCALE, -1152.0f * TBP_OPERAND_SCALE);

    walk([&](const int n0, const int m0, const int s_begin, const int nst, const int it0) {
    float acc[R][BT / 2];
#pragma unroll
    for (int rr = 0; rr < R; ++rr)
#pragma unroll
        for (int i = 0; i < BT / 2; ++i) acc[rr][i] = 0.0f;

    /* at least one stage per split (split_k <= 2 and k / (32 kb) >= split_k: the manifest's rules): a do-while,
     * so no path skips the wgmma loop; ptxas serialises every wgmma (C7515, C7518) where the zeroed
     * accumulators of such a path meet the loop's at the final wait */
    int it = it0;
    do {
        const int buf = it % ST;
        tbp_mbar_wait(full + buf, (tb_u32)(it / ST) & 1u);
        tbp_fence_async_smem(); /* the cp.async (generic proxy) bytes, seen by wgmma's async proxy */
        const tb_u8 *stage = smem + buf * L::STAGE;
        const tb_u32 xs = tbp_saddr(stage);
        const int b0 = (s_begin + it - it0) * KB;
        /* the scales of this lane's rows in block t of the stage, as f16x2 (scale of the lo / hi 16-half, min);
         * block kb's are lane kb's of the quad: each (row, block) decoded once, not by all 4 lanes per block
         * (the K-quants' 6-bit scale decode was ~40 % of a block's instructions) */
        tb_u32 qd[R][2][3];
#pragma unroll
        for (int rr = 0; rr < R; ++rr)
#pragma unroll
            for (int f = 0; f < 2; ++f) {
                const int r = 64 * (R * wg + rr) + r_g + 8 * f;
                int delta = 0;
#if defined(TB_FMT_Q6_K)
                delta = (int)(tbp_sc_offset(rows, (tb_size)(n0 + r), b0) & 3u);
#endif
                float sv[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                tbp_decode_scale(stage + L::OFF_SC + r * S::SC_STRIDE, t, b0 + t, delta, sv);
                const float dlo = sv[0] * (1.0f / TBP_OPERAND_SCALE); /* exact: a power of two */
                const float dhi = (TBP_NSC == 4 ? sv[2] : sv[0]) * (1.0f / TBP_OPERAND_SCALE);
                const float mw = TBP_ASYM ? sv[2] : 0.0f;
                qd[rr][f][0] = tbp_h2_pack(dlo, dlo);
                qd[rr][f][1] = tbp_h2_pack(dhi, dhi);
                qd[rr][f][2] = tbp_h2_pack(mw, mw);
            }

#pragma unroll
        for (int kg = 0; kg < KB; kg += TBP_G) {
            tb_u32 w[R][2][TBP_QS_CHUNKS];
#if TBP_QH_CHUNKS
            tb_u32 h[R][2][2];
#endif
#pragma unroll
            for (int rr = 0; rr < R; ++rr) {
                const int tr = 64 * (R * wg + rr);
                const tb_u8 *sq = stage + L::OFF_QS + (tr + wrow) * S::QS_STRIDE;
#pragma unroll
                for (int c = 0; c < TBP_QS_CHUNKS; ++c)
                    tbp_ldsm2(w[rr][0][c], w[rr][1][c], sq + 16 * (kg * TBP_QS_CHUNKS / TBP_G + c));
#if TBP_QH_CHUNKS
                const tb_u8 *sh = stage + L::OFF_QH + (tr + wrow) * S::QH_STRIDE;
#pragma unroll
                for (int c = 0; c < 2; ++c) tbp_ldsm2(h[rr][0][c], h[rr][1][c], sh + 16 * (kg / 2 + c));
#endif
            }
#pragma unroll
            for (int j = 0; j < TBP_G; ++j) {
                const int kb = kg + j;
                tb_u32 a[R][2][4]; /* per m64 tile: k16 halves 0 (lo words) and 1 (hi words) of the block */
#pragma unroll
                for (int rr = 0; rr < R; ++rr) {
#pragma unroll
                    for (int f = 0; f < 2; ++f) {
                        const int r = 64 * (R * wg + rr) + r_g + 8 * f;
                        tb_u32 hw[2] = {0u, 0u};
#if defined(TB_FMT_Q5_0) || defined(TB_FMT_Q5_1)
                        hw[0] = *(const tb_u32 *)(stage + L::OFF_QH + r * S::QH_STRIDE + 4 * kb);
#elif TBP_QH_CHUNKS
                        hw[0] = h[rr][f][0];
                        hw[1] = h[rr][f][1];
#endif
                        tb_u32 lo, hi;
                        tbp_unpack(w[rr][f], hw, j, t, lo, hi);
                        const int src = (lane & ~3) | kb; /* the quad lane holding block kb's scales */
                        const tb_u32 dl2 = tbp_shfl_idx(qd[rr][f][0], src);
                        const tb_u32 dh2 = TBP_NSC == 4 ? tbp_shfl_idx(qd[rr][f][1], src) : dl2;
                        const tb_u32 m2 = TBP_ASYM ? tbp_shfl_idx(qd[rr][f][2], src) : 0u;
                        tbp_ws_dequant(lo, hi, dl2, dh2, m2, os2, neg2, f, a[rr]);
                    }
                }
                /* descriptors and A registers complete BEFORE the fence: ptxas serialises every wgmma (C7513) when a
                 * non-wgmma instruction defines one of their inputs between the fence and the wgmma */
                tb_u64 desc[2];
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    desc[hf] = tbp_wg_desc(xs + (tb_u32)((4 * kb + 2 * hf) * 128), 128u, L::SBO);
                    tbp_pin(desc[hf]);
                }
#pragma unroll
                for (int rr = 0; rr < R; ++rr)
#pragma unroll
                    for (int hf = 0; hf < 2; ++hf)
#pragma unroll
                        for (int q = 0; q < 4; ++q) tbp_pin(a[rr][hf][q]);
                tbp_wg_fence();
#pragma unroll
                for (int rr = 0; rr < R; ++rr)
#pragma unroll
                    for (int hf = 0; hf < 2; ++hf) tbp_wgmma<BT>(acc[rr], a[rr][hf], desc[hf]);
                tbp_wg_commit();
                tbp_wg_wait<WAITN>(); /* the previous block's group is done; this one runs on (WIDE: done too) */
                if constexpr (CL > 1) {
                    if (kb == KB - 1) { /* this warp's reads of stage it are done: release it in both */
                        tbp_syncwarp();
                        if (lane == 0) {
                            tbp_mbar_arrive(empty + it % ST);
                            tbp_mbar_arrive_peer(empty + it % ST, rank ^ 1);
                        }
                    }
                } else if constexpr (WAITN == 0) {
                    if (kb == KB - 1) tbp_mbar_arrive(empty + it % ST); /* every group of stage it retired */
                } else {
                    if (kb == 0 && it > 0) tbp_mbar_arrive(empty + (it - 1) % ST); /* stage it - 1 fully read */
                }
            }
        }
    } while (++it < it0 + nst);
    tbp_wg_wait<0>();
#pragma unroll
    for (int rr = 0; rr < R; ++rr)
#pragma unroll
        for (int i = 0; i < BT / 2; ++i) tbp_keep(acc[rr][i]);

#pragma unroll
    for (int rr = 0; rr < R; ++rr) {
#pragma unroll
        for (int i = 0; i < BT / 8; ++i) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int row = n0 + 64 * (R * wg + rr) + r_g + 8 * (e >> 1);
                const int tok = m0 + 8 * i + 2 * t + (e & 1);
                if (row >= n || tok >= m) continue;
                float *yp = y + (tb_size)tok * (tb_size)n + (tb_size)row;
                if (SK > 1 || (SK == 0 && nst < nst_all)) /* SK 0: a piece of the tile */
                    tbp_red_add(yp, acc[rr][4 * i + e]);
                else
                    *yp = acc[rr][4 * i + e];
            }
        }
    }
    });
    if constexpr (CL > 1) tbp_cluster_sync();
#else
    (void)qs, (void)qh, (void)sc, (void)x, (void)y, (void)ws, (void)m, (void)n, (void)k;
#if defined(TB_CUDA)
    __trap(); /* built without sm_90a: the E2 / E3 variants need wgmma, mbarrier, setmaxnreg and clusters */
#endif
#endif
}
