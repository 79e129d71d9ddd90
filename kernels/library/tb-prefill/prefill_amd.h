/*
 * AMD twins of the prefill GEMM (included by prefill.hip; same arguments, workspace and variant names).
 *
 * Wave 64. A wave owns an (m_tile / warps_m) x (n_tile / warps_n) tile made of 16 x 16 MFMA tiles:
 * lane l holds D rows 4*(l/16) .. +3 (activations) of column l%16 (weights), the documented i32 MFMA
 * output layout. Operands per lane: activation row l%16 / weight row l%16, the k-set {4q..4q+3} ("lo"
 * word) and {16+4q..16+4q+3} ("hi"), q = l/16 (both operands permuted alike, so the dot is unchanged):
 *   gfx942 / gfx950   v_mfma_i32_16x16x32_i8: {lo, hi} as its 64-bit operands, one per 32-block
 *   gfx90a            v_mfma_i32_16x16x16i8: lo words, then hi words, chained through C
 *   gfx906            no MFMA: the same tile by v_dot4_i32_i8 (sdot4), 8 per output and block
 * The int32 accumulator starts at the activation rows' records (ci = bits of 1.5*2^23 - OFF*xsum), the
 * epilogue is prefill.hip's. Pipeline: global -> registers for stage s+1 while stage s is multiplied out
 * of LDS, then registers -> the other LDS buffer (two stages, static LDS sized as the manifest's smem).
 */
#pragma once

#if defined(TB_AMD) || defined(TB_EMU_AMD)

#if defined(TB_EMU_AMD)
#define TBP_MFMA TB_EMU_MFMA
#elif defined(__gfx942__) || defined(__gfx950__)
#define TBP_MFMA 32
#elif defined(__gfx90a__)
#define TBP_MFMA 16
#else
#define TBP_MFMA 0 /* gfx906: sdot4 */
#endif

#if defined(TB_AMD)
#define TBP_LDS(name, bytes) __shared__ __attribute__((aligned(16))) tb_u8 name[bytes];
#if TBP_MFMA == 32
TB_DEV void tbp_mfma32(tb_i32 *d, const tb_u32 *a, const tb_u32 *b, const tb_i32 *c) {
    const long av = (long)(((unsigned long)a[1] << 32) | a[0]), bv = (long)(((unsigned long)b[1] << 32) | b[0]);
    tbp_v4i cv = {c[0], c[1], c[2], c[3]};
    const tbp_v4i r = __builtin_amdgcn_mfma_i32_16x16x32_i8(av, bv, cv, 0, 0, 0);
    d[0] = r[0], d[1] = r[1], d[2] = r[2], d[3] = r[3];
}
#elif TBP_MFMA == 16
TB_DEV void tbp_mfma16(tb_i32 *d, tb_u32 a, tb_u32 b, const tb_i32 *c) {
    tbp_v4i cv = {c[0], c[1], c[2], c[3]};
    const tbp_v4i r = __builtin_amdgcn_mfma_i32_16x16x16i8((int)a, (int)b, cv, 0, 0, 0);
    d[0] = r[0], d[1] = r[1], d[2] = r[2], d[3] = r[3];
}
#endif
#endif

/* one 16 x 16 tile of int32 dots for one 32-block (or its two 16-halves: dh != nullptr, Q6_K) */
TB_DEV void tbp_amd_tile(tb_i32 *d, tb_i32 *dh, const tb_u32 *a, const tb_u32 *b, const tb_i32 *c, const tb_u32 *ax,
                         const tb_u32 *bx) {
    (void)ax;
    (void)bx;
#if TBP_MFMA == 32
    if (dh) {
        const tb_u32 al[2] = {a[0], 0u}, ah[2] = {0u, a[1]}, bl[2] = {b[0], 0u}, bh[2] = {0u, b[1]};
        tbp_mfma32(d, al, bl, c);
        tbp_mfma32(dh, ah, bh, c);
    } else {
        tbp_mfma32(d, a, b, c);
    }
#elif TBP_MFMA == 16
    if (dh) {
        tbp_mfma16(d, a[0], b[0], c);
        tbp_mfma16(dh, a[1], b[1], c);
    } else {
        tb_i32 t[4];
        tbp_mfma16(t, a[0], b[0], c);
        tbp_mfma16(d, a[1], b[1], t);
    }
#else
    /* sdot4: ax = this lane's 4 activation rows x 8 words (k order 0..31), bx = its weight column's 8 words */
    for (int r = 0; r < 4; ++r) {
        tb_i32 lo = c[r], hi = c[r];
        for (int w = 0; w < 4; ++w) lo = tb_dp4a((tb_i32)ax[8 * r + w], (tb_i32)bx[w], lo);
        for (int w = 4; w < 8; ++w) (dh ? hi : lo) = tb_dp4a((tb_i32)ax[8 * r + w], (tb_i32)bx[w], dh ? hi : lo);
        d[r] = lo;
        if (dh) dh[r] = hi;
    }
#endif
}

/* a thread's share of one part's stage copy through registers: item j is chunk i = tid + j * THREADS,
 * row i / CPR, column i % CPR (rows past ROWS are idle) */
template <int ROWS, int CPR, int CH, int THREADS>
struct TbpStageRegs {
    static constexpr int ITEMS = (ROWS * CPR + THREADS - 1) / THREADS;
    const tb_u8 *src[ITEMS];
    int dst[ITEMS], row[ITEMS], col[ITEMS];
    bool ok[ITEMS], live[ITEMS];
    tb_u32 v[ITEMS][CH / 4];
    TB_DEV_MEMBER void init(const tb_u8 *base, int row0, int limit, tb_size row_bytes, int dst_off, int dst_stride) {
        for (int j = 0; j < ITEMS; ++j) {
            const int i = TB_TID + j * THREADS, r = i / CPR, c = i % CPR;
            row[j] = r;
            col[j] = c;
            live[j] = r < ROWS;
            ok[j] = live[j] && row0 + r < limit;
            src[j] = ok[j] ? base + (tb_size)(row0 + r) * row_bytes + (tb_size)(c * CH) : base;
            dst[j] = dst_off + r * dst_stride + c * CH;
        }
    }
    TB_DEV_MEMBER void fetch(tb_size stage_off) {
        for (int j = 0; j < ITEMS; ++j)
            for (int w = 0; w < CH / 4; ++w) v[j][w] = ok[j] ? ((const tb_u32 *)(src[j] + stage_off))[w] : 0u;
    }
    TB_DEV_MEMBER void store(tb_u8 *stage) const {
        for (int j = 0; j < ITEMS; ++j)
            if (live[j])
                for (int w = 0; w < CH / 4; ++w) ((tb_u32 *)(stage + dst[j]))[w] = v[j][w];
    }
};

#if defined(TB_EMU_AMD)
#define TBP_LDS_LIMIT (1 << 30)
#define TBP_TRAP() abort()
#else
#if defined(__gfx950__)
#define TBP_LDS_LIMIT 163840
#else
#define TBP_LDS_LIMIT 65536
#endif
#define TBP_TRAP() __builtin_trap()
#endif

template <int BN, int BM, int WN_, int WM_, int KB, int SK>
TB_DEV void tbp_amd_tiles(TB_PREFILL_PARAMS);

template <int BN, int BM, int WN_, int WM_, int KB, int SK>
TB_DEV void tbp_amd_body(TB_PREFILL_PARAMS) {
    using L = TbpLayout<BN, BM, KB>;
    constexpr int WTN = BN / WN_, WTM = BM / WM_;
    constexpr int NPL = TBP_ASYM ? 3 : 2; /* activation planes: dx, ci [, sx] */
    static_assert(WTN % 16 == 0 && WTM % 16 == 0, "wave tile");
    static_assert(NPL * 4 * BM * KB <= L::AS_BYTES, "activation planes fit the stage's record area");
    if constexpr (L::smem(2) > TBP_LDS_LIMIT) {
        /* more LDS than the arch has: the manifest's smem rule keeps this variant from running here */
        (void)qs, (void)qh, (void)sc, (void)x, (void)y, (void)ws, (void)m, (void)n, (void)k;
        TBP_TRAP();
    } else {
        tbp_amd_tiles<BN, BM, WN_, WM_, KB, SK>(TB_PREFILL_ARGS);
    }
}

template <int BN, int BM, int WN_, int WM_, int KB, int SK>
TB_DEV void tbp_amd_tiles(TB_PREFILL_PARAMS) {
    using L = TbpLayout<BN, BM, KB>;
    using S = TbpStage<KB>;
    constexpr int THREADS = 64 * WN_ * WM_;
    constexpr int WTN = BN / WN_, WTM = BM / WM_;
    constexpr int NI = WTN / 16, MI = WTM / 16;
    constexpr int NPL = TBP_ASYM ? 3 : 2;
    TBP_LDS(lds, L::smem(2))
    float *wsc = (float *)(lds + 2 * L::STAGE);

    const int tid = TB_TID, lane = tid & 63, wave = tid >> 6;
    const int wm = wave % WM_, wn = wave / WM_;
    const int r16 = lane & 15, q = lane >> 4;
    const int n0 = TB_BID_X * BN, m0 = TB_BID_Y * BM;
    const int nbk = k >> 5;
    const int per = (nbk / KB + SK - 1) / SK; /* split-K: this z slice's stages */
    const int s_begin = TBP_BID_Z * per;
    const int nst = (nbk / KB - s_begin) < per ? (nbk / KB - s_begin) : per;
    const int ms = (m + 15) & ~15;
    const TbpRows rows = tbp_rows(k);
    const tb_size plane = (tb_size)nbk * (tb_size)ms * 4u;
    (void)y;
    (void)x;

    TbpStageRegs<BM, KB * 2, 16, THREADS> st_a;
    st_a.init(ws, m0, m, (tb_size)k, 0, L::A_STRIDE);
    /* activation planes: rows = (plane, block) pairs of BM words; a 16-byte chunk past ms is zero */
    TbpStageRegs<NPL * KB, BM / 4, 16, THREADS> st_r;
    st_r.init(ws + (tb_size)ms * (tb_size)k + (tb_size)m0 * 4u, 0, NPL * KB, 0, L::OFF_AS, BM * 4);
    {
        for (int j = 0; j < st_r.ITEMS; ++j) {
            const int r = st_r.row[j], c = st_r.col[j]; /* r = plane * KB + kb */
            st_r.ok[j] = st_r.ok[j] && m0 + 4 * c < ms;
            st_r.src[j] = st_r.ok[j] ? ws + (tb_size)ms * (tb_size)k + (tb_size)(r / KB) * plane +
                                           (tb_size)(r % KB) * (tb_size)ms * 4u + (tb_size)(m0 + 4 * c) * 4u
                                     : ws;
        }
    }
    TbpStageRegs<BN, S::QS / 16, 16, THREADS> st_q;
    st_q.init(qs, n0, n, rows.qs_row, L::OFF_QS, S::QS_STRIDE);
#if TBP_QH_BPB
    constexpr int HCH = S::QH >= 16 ? 16 : S::QH;
    TbpStageRegs<BN, S::QH / HCH, HCH, THREADS> st_h;
    st_h.init(qh, n0, n, rows.qh_row, L::OFF_QH, S::QH_STRIDE);
#endif
#if defined(TB_FMT_Q6_K)
    TbpStageRegs<BN, 5, 4, THREADS> st_s; /* the 4-aligned window of the 18 scale bytes */
    st_s.init(sc, n0, n, 0, L::OFF_SC, S::SC_STRIDE);
#else
    TbpStageRegs<BN, S::SC / S::SC_CHUNK, S::SC_CHUNK, THREADS> st_s;
    st_s.init(sc, n0, n, rows.sc_row, L::OFF_SC, S::SC_STRIDE);
#endif

    auto fetch = [&](int s) {
        const int b0 = s * KB;
        st_a.fetch((tb_size)b0 * 32u);
        st_r.fetch((tb_size)b0 * 4u * (tb_size)ms);
        st_q.fetch((tb_size)b0 * TBP_QS_BPB);
#if TBP_QH_BPB
        st_h.fetch((tb_size)b0 * TBP_QH_BPB);
#endif
#if defined(TB_FMT_Q6_K)
        for (int j = 0; j < st_s.ITEMS; ++j) {
            const int row = n0 + st_s.row[j], c = st_s.col[j];
            st_s.v[j][0] = 0u;
            if (!st_s.ok[j]) continue;
            const tb_size off = tbp_sc_offset(rows, (tb_size)row, b0);
            const tb_size from = (off & ~(tb_size)3) + 4u * (tb_size)c, end = off + 18u;
            if (from + 4u <= end) {
                st_s.v[j][0] = *(const tb_u32 *)(sc + from);
            } else {
                for (tb_size i = from; i < end; ++i) st_s.v[j][0] |= (tb_u32)sc[i] << (8 * (int)(i - from));
            }
        }
#else
        st_s.fetch(tbp_sc_offset(rows, 0, b0));
#endif
    };
    auto store = [&](int buf) {
        tb_u8 *stage = lds + buf * L::STAGE;
        st_a.store(stage);
        st_r.store(stage);
        st_q.store(stage);
#if TBP_QH_BPB
        st_h.store(stage);
#endif
        st_s.store(stage);
    };

    float acc[MI][NI][4];
    for (int i = 0; i < MI; ++i)
        for (int f = 0; f < NI; ++f)
            for (int e = 0; e < 4; ++e) acc[i][f][e] = 0.0f;

    if (nst > 0) {
        fetch(s_begin);
        store(0);
    }
    tb_sync();
    for (int it = 0; it < nst; ++it) {
        const int buf = it & 1;
        const tb_u8 *stage = lds + buf * L::STAGE;
        if (it + 1 < nst) fetch(s_begin + it + 1);
        const int b0 = (s_begin + it) * KB;
        /* decoded weight scales of this stage */
        for (int i0 = 0; i0 < KB * BN; i0 += THREADS) {
            const int i = i0 + tid;
            if (i >= KB * BN) break;
            const int kb = i / BN, r = i % BN;
            int delta = 0;
#if defined(TB_FMT_Q6_K)
            delta = (int)(tbp_sc_offset(rows, (tb_size)(n0 + r), b0) & 3u);
#endif
            float out[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            tbp_decode_scale(stage + L::OFF_SC + r * S::SC_STRIDE, kb, b0 + kb, delta, out);
            for (int e = 0; e < TBP_NSC; ++e) wsc[(kb * BN + r) * TBP_NSC + e] = out[e];
            if (TBP_ASYM) wsc[L::MW_OFF + kb * BN + r] = out[2];
        }
        tb_sync();

#pragma unroll 1 /* one block group at a time: the operands of a fully unrolled stage spill */
        for (int kg = 0; kg < KB; kg += TBP_G) {
            for (int j = 0; j < TBP_G; ++j) {
                const int kb = kg + j;
                /* weight operands of the wave's NI column tiles (sdot4: the columns' whole blocks) */
                tb_u32 b[NI][2];
                tb_u32 bx[NI][TBP_MFMA ? 1 : 8];
                float sw[NI][4];
                for (int f = 0; f < NI; ++f) {
                    const int wrow = wn * WTN + 16 * f + r16;
                    const tb_u8 *wq = stage + L::OFF_QS + wrow * S::QS_STRIDE + 16 * (kg * TBP_QS_CHUNKS / TBP_G);
                    const tb_u8 *wh = stage + L::OFF_QH + wrow * S::QH_STRIDE;
                    for (int qq = 0; qq < (TBP_MFMA ? 1 : 4); ++qq) {
                        const int qx = TBP_MFMA ? q : qq; /* the lane's quarter, or every quarter for sdot4 */
                        tb_u32 w[TBP_QS_CHUNKS], hw[2] = {0u, 0u};
                        for (int c = 0; c < TBP_QS_CHUNKS; ++c) w[c] = *(const tb_u32 *)(wq + 16 * c + 4 * qx);
#if defined(TB_FMT_Q5_0) || defined(TB_FMT_Q5_1)
                        hw[0] = *(const tb_u32 *)(wh + 4 * kb);
#elif TBP_QH_CHUNKS
                        for (int c = 0; c < 2; ++c) hw[c] = *(const tb_u32 *)(wh + 16 * (kg / 2 + c) + 4 * qx);
#endif
                        (void)wh;
                        tb_u32 lo, hi;
                        tbp_unpack(w, hw, j, qx, lo, hi);
#if TBP_MFMA
                        b[f][0] = lo;
                        b[f][1] = hi;
#else
                        bx[f][qq] = lo;
                        bx[f][4 + qq] = hi;
                        b[f][0] = b[f][1] = 0u;
#endif
                    }
                    const float *ws4 = wsc + (kb * BN + wrow) * TBP_NSC;
                    for (int e = 0; e < 4; ++e) sw[f][e] = e < TBP_NSC ? ws4[e] : 0.0f;
                    if (TBP_ASYM) sw[f][2] = wsc[L::MW_OFF + kb * BN + wrow]; /* the min */
                }
                for (int i = 0; i < MI; ++i) {
                    /* activation operand and records of row tile i: lane rows 4q..4q+3 of the tile */
                    const int arow = wm * WTM + 16 * i;
                    const tb_u8 *ar = stage + (arow + r16) * L::A_STRIDE + kb * 32;
                    const tb_u32 a[2] = {*(const tb_u32 *)(ar + 4 * q), *(const tb_u32 *)(ar + 16 + 4 * q)};
                    tb_u32 ax[TBP_MFMA ? 1 : 32];
#if TBP_MFMA == 0
                    for (int r = 0; r < 4; ++r)
                        for (int w = 0; w < 8; ++w)
                            ax[8 * r + w] = *(const tb_u32 *)(stage + (arow + 4 * q + r) * L::A_STRIDE + kb * 32 + 4 * w);
#endif
                    const tb_u8 *rp = stage + L::OFF_AS + kb * BM * 4 + (arow + 4 * q) * 4;
                    float dx[4], sx[4];
                    tb_i32 ci[4];
                    for (int r = 0; r < 4; ++r) {
                        dx[r] = tbp_as_float(((const tb_i32 *)rp)[r]);
                        ci[r] = ((const tb_i32 *)(rp + KB * BM * 4))[r];
                        sx[r] = TBP_ASYM ? tbp_as_float(((const tb_i32 *)(rp + 2 * KB * BM * 4))[r]) : 0.0f;
                    }
                    for (int f = 0; f < NI; ++f) {
                        tb_i32 d[4], dh[4];
#if TBP_G16
                        const tb_i32 c0[4] = {TBP_MAGIC_BITS, TBP_MAGIC_BITS, TBP_MAGIC_BITS, TBP_MAGIC_BITS};
                        tbp_amd_tile(d, dh, a, b[f], c0, ax, bx[f]);
                        for (int r = 0; r < 4; ++r) {
                            const float tl = tbp_fma(tbp_as_float(d[r]), sw[f][0], sw[f][1]);
                            const float th = tbp_fma(tbp_as_float(dh[r]), sw[f][2], sw[f][3]);
                            acc[i][f][r] = tbp_fma(tl + th, dx[r], acc[i][f][r]);
                        }
#else
                        (void)dh;
                        tbp_amd_tile(d, nullptr, a, b[f], ci, ax, bx[f]);
                        for (int r = 0; r < 4; ++r) {
                            const float tv = tbp_fma(tbp_as_float(d[r]), sw[f][0], sw[f][1]);
                            acc[i][f][r] = tbp_fma(tv, dx[r], acc[i][f][r]);
                            if (TBP_ASYM) acc[i][f][r] = tbp_fma(sw[f][2], sx[r], acc[i][f][r]);
                        }
#endif
                    }
                }
            }
        }
        tb_sync();
        if (it + 1 < nst) store(buf ^ 1);
        tb_sync();
    }

    for (int i = 0; i < MI; ++i)
        for (int f = 0; f < NI; ++f) {
            const int col = n0 + wn * WTN + 16 * f + r16;
            if (col >= n) continue;
            for (int r = 0; r < 4; ++r) {
                const int row = m0 + wm * WTM + 16 * i + 4 * q + r;
                if (row >= m) continue;
                if (SK > 1)
                    tbp_red_add(y + (tb_size)row * (tb_size)n + (tb_size)col, acc[i][f][r]);
                else
                    y[(tb_size)row * (tb_size)n + (tb_size)col] = acc[i][f][r];
            }
        }
}

/* ENG: the engine axis; AMD has engine 0 only (the manifest's rules) */
#define TB_PREFILL_VARIANT(BN, BM, WN, WM, KB, ST, SK, MB, ENG)                                            \
    extern "C" __global__ TB_LAUNCH_BOUNDS(64 * WN * WM, MB) void                                          \
        tb_prefill_n##BN##_m##BM##_wn##WN##_wm##WM##_kb##KB##_s##ST##_sk##SK##_mb##MB##_e##ENG(              \
            TB_PREFILL_PARAMS) {                                                                           \
        static_assert(ENG == 0, "AMD: engine 0 (MFMA / sdot4) only");                                      \
        tbp_amd_body<BN, BM, WN, WM, KB, SK>(TB_PREFILL_ARGS);                                            \
    }

#endif /* AMD */
