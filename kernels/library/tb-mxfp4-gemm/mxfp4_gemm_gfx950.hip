/*
 * tb-mxfp4-gemm, AMD gfx950 (MI355X; clang 22 from ziglang, device only):  y[M][N] = x[M][K] . W[N][K]^T
 *
 * W: the planar MXFP4 layout tb_mxfp4_prepare writes (tb_mx.h): E2M1 codes [N][K/2] (weight 2i in the low
 * nibble of byte i), then E8M0 scales [K/32][N].  x: fp32 [M][K].  y: fp32 [M][N].
 *
 * The scaled MFMA does the whole MX arithmetic: v_mfma_scale_f32_16x16x128_f8f6f4 (mfma = 16) or
 * v_mfma_scale_f32_32x32x64_f8f6f4 (mfma = 32) with A = x as E4M3 codes (cbsz 0) and B = W as E2M1 codes
 * (blgp 4); every lane brings 32 K-consecutive values of one row (A) or column (B), the lane's row is
 * lane % mfma and its 32-block lane / mfma, plus that block's E8M0 scale in byte 0 of its scale operand.
 * Output lane layout: 16x16 -> D[4 (lane / 16) + e][lane % 16]; 32x32 -> D[8 (e / 4) + 4 (lane / 32) + e % 4]
 * [lane % 32].
 *
 * x reaches the MFMA as MXFP8: each thread quantises whole 32-blocks (tb_mx.h, the rule the host
 * version emulates) while it writes its staged registers to LDS, so no lane exchange is needed.
 * `waves` waves (64 lanes) per workgroup, 2 x waves/2 over the tile; each wave owns
 * (tile_m / 2) x (tile_n / (waves / 2)) of fp32 accumulators. Pipeline over K steps of tile_k:
 *   stages = 2: the global loads of step k+1 are in flight (registers) while step k's MFMAs run, then
 *               written to the other LDS buffer; one barrier per step;
 *   stages = 3: three LDS buffers; the registers hold step k+3 while the MFMAs of step k run, and the
 *               LDS write of step k+2 comes before them, overlapping the matrix cores.
 *   lds = 1: one LDS array per stage holding A codes | A scales | B codes | B scales at constant offsets
 *            (one base register); lds = 0: four separate arrays.
 * Exported: tb_mxfp4_gemm_m<tile_m>_n<tile_n>_k<tile_k>_w<waves>_s<stages>_l<lds>_i<mfma> per
 * TB_MX_VARIANT(...) in TB_MX_VARIANTS, and tb_mxfp4_prepare. Static LDS only. n % tile_n == 0,
 * k % tile_k == 0 (manifest rules); any m.
 */
#include "tb_portability.h"
#include "tb_mx.h"

#if !defined(__gfx950__) && !defined(TB_AMD_EMULATION)
#error "tb-mxfp4-gemm's HIP source needs gfx950 (v_mfma_scale_f32_*_f8f6f4)"
#endif

#if defined(TB_AMD_EMULATION) /* tests/fixtures/gpu_emu: GCC spells vectors differently */
#define TB_VEC(T, N) __attribute__((vector_size((N) * sizeof(T))))
#else
#define TB_VEC(T, N) __attribute__((ext_vector_type(N)))
#endif
typedef int tb_v8i TB_VEC(int, 8);
typedef unsigned tb_v4u TB_VEC(unsigned, 4);
typedef float tb_v4f TB_VEC(float, 4);
typedef float tb_v16f TB_VEC(float, 16);
typedef unsigned char tb_u8;

extern "C" __global__ void tb_mxfp4_prepare(const tb_u8 *__restrict__ gguf, tb_u8 *__restrict__ out, int n,
                                            int k) {
    const tb_size nb = (tb_size)k / 32;
    const tb_size b = (tb_size)TB_BID_X * 256 + (tb_size)TB_TID;
    if (b >= (tb_size)n * nb) return;
    const tb_size row = b / nb, kb = b % nb;
    tb_mx_repack(gguf + b * 17, out + row * ((tb_size)k / 2) + kb * 16,
                 out + (tb_size)n * ((tb_size)k / 2) + kb * (tb_size)n + row);
}

/* ---- the two scaled MFMA shapes -------------------------------------------------------------------- */
template <int I>
struct TbMfma;
template <>
struct TbMfma<16> {
    typedef tb_v4f acc_t;
    static constexpr int KI = 128, NACC = 4; /* K per instruction, accumulators per lane */
    static __device__ TB_FORCEINLINE acc_t run(tb_v8i a, tb_v8i b, acc_t c, int sa, int sb) {
        return __builtin_amdgcn_mfma_scale_f32_16x16x128_f8f6f4(a, b, c, 0, 4, 0, sa, 0, sb);
    }
    static __device__ TB_FORCEINLINE int row(int lane, int e) { return 4 * (lane >> 4) + e; }
};
template <>
struct TbMfma<32> {
    typedef tb_v16f acc_t;
    static constexpr int KI = 64, NACC = 16;
    static __device__ TB_FORCEINLINE acc_t run(tb_v8i a, tb_v8i b, acc_t c, int sa, int sb) {
        return __builtin_amdgcn_mfma_scale_f32_32x32x64_f8f6f4(a, b, c, 0, 4, 0, sa, 0, sb);
    }
    static __device__ TB_FORCEINLINE int row(int lane, int e) { return 8 * (e >> 2) + 4 * (lane >> 5) + (e & 3); }
};

/* ---- LDS: one stage = A codes [BM][BK+16] | A scales [BK/32][BM] | B codes [BN][BK/2+16] | B scales
 * [BK/32][BN]; the 16-byte row pads spread the ds_read_b128 of 16 rows over the banks ---------------- */
template <int BM, int BN, int BK>
struct TbStage {
    static constexpr int A_STRIDE = BK + 16, B_STRIDE = BK / 2 + 16;
    static constexpr int A_CODES = BM * A_STRIDE, A_SCALES = BM * BK / 32;
    static constexpr int B_CODES = BN * B_STRIDE, B_SCALES = BN * BK / 32;
    static constexpr int A_SCALES_AT = A_CODES, B_CODES_AT = A_CODES + A_SCALES;
    static constexpr int B_SCALES_AT = B_CODES_AT + B_CODES, BYTES = B_SCALES_AT + B_SCALES;
    static_assert(A_SCALES % 16 == 0 && B_SCALES % 16 == 0, "16-byte aligned parts");
};
template <class L, int S, int MERGED>
struct TbLds;
template <class L, int S>
struct TbLds<L, S, 1> { /* one array, constant offsets from one base */
    static __device__ TB_FORCEINLINE tb_u8 *base(int s) {
        __shared__ __attribute__((aligned(16))) tb_u8 lds[S * L::BYTES];
        return lds + s * L::BYTES;
    }
    static __device__ TB_FORCEINLINE tb_u8 *a_codes(int s) { return base(s); }
    static __device__ TB_FORCEINLINE tb_u8 *a_scales(int s) { return base(s) + L::A_SCALES_AT; }
    static __device__ TB_FORCEINLINE tb_u8 *b_codes(int s) { return base(s) + L::B_CODES_AT; }
    static __device__ TB_FORCEINLINE tb_u8 *b_scales(int s) { return base(s) + L::B_SCALES_AT; }
};
template <class L, int S>
struct TbLds<L, S, 0> { /* four arrays */
    static __device__ TB_FORCEINLINE tb_u8 *a_codes(int s) {
        __shared__ __attribute__((aligned(16))) tb_u8 v[S][L::A_CODES];
        return v[s];
    }
    static __device__ TB_FORCEINLINE tb_u8 *a_scales(int s) {
        __shared__ __attribute__((aligned(16))) tb_u8 v[S][L::A_SCALES];
        return v[s];
    }
    static __device__ TB_FORCEINLINE tb_u8 *b_codes(int s) {
        __shared__ __attribute__((aligned(16))) tb_u8 v[S][L::B_CODES];
        return v[s];
    }
    static __device__ TB_FORCEINLINE tb_u8 *b_scales(int s) {
        __shared__ __attribute__((aligned(16))) tb_u8 v[S][L::B_SCALES];
        return v[s];
    }
};

template <int BM, int BN, int BK, int WAVES, int S, int MERGED, int I>
TB_DEV void tb_mx_gemm(const tb_u8 *__restrict__ w, const float *__restrict__ x, float *__restrict__ y, int m,
                       int n, int k) {
    typedef TbStage<BM, BN, BK> L;
    typedef TbLds<L, S, MERGED> Lds;
    typedef TbMfma<I> F;
    constexpr int THREADS = WAVES * 64, WN = WAVES / 2, WTM = BM / 2, WTN = BN / WN;
    constexpr int MT = WTM / I, NT = WTN / I, KI = F::KI;
    constexpr int A_ITEMS = BM * BK / 32, B_ITEMS = BN * BK / 32, BS_ITEMS = BN * BK / 512;
    constexpr int A_PER = (A_ITEMS + THREADS - 1) / THREADS, B_PER = (B_ITEMS + THREADS - 1) / THREADS;
    constexpr int BS_PER = (BS_ITEMS + THREADS - 1) / THREADS;
    static_assert(MT >= 1 && NT >= 1 && BK % KI == 0 && (S == 2 || S == 3), "tile shape");

    const int tid = TB_TID, lane = tid & 63, wave = tid >> 6;
    const int wm = wave / WN, wn = wave % WN;
    const int n0 = TB_BID_X * BN, m0 = TB_BID_Y * BM;
    const int kt_count = k / BK;
    const tb_u8 *const codes = w;
    const tb_u8 *const scales = w + (tb_size)n * (tb_size)(k / 2);

    /* staged global data of one K step */
    tb_v4f xa[A_PER][8];
    tb_v4u bq[B_PER], bs[BS_PER];
    auto load = [&](int kt) {
#pragma unroll
        for (int j = 0; j < A_PER; ++j) {
            const int i = tid + j * THREADS, row = i / (BK / 32), kb = i % (BK / 32);
            const bool live = i < A_ITEMS && m0 + row < m;
            const tb_v4f *src = (const tb_v4f *)(x + (tb_size)(m0 + row) * (tb_size)k + (tb_size)kt * BK + kb * 32);
#pragma unroll
            for (int q = 0; q < 8; ++q) xa[j][q] = live ? src[q] : (tb_v4f){0.f, 0.f, 0.f, 0.f};
        }
#pragma unroll
        for (int j = 0; j < B_PER; ++j) {
            const int i = tid + j * THREADS, row = i / (BK / 32), piece = i % (BK / 32);
            if (i < B_ITEMS)
                bq[j] = *(const tb_v4u *)(codes + (tb_size)(n0 + row) * (tb_size)(k / 2) + (tb_size)kt * (BK / 2) +
                                          piece * 16);
        }
#pragma unroll
        for (int j = 0; j < BS_PER; ++j) {
            const int i = tid + j * THREADS, kb = i / (BN / 16), piece = i % (BN / 16);
            if (i < BS_ITEMS)
                bs[j] = *(const tb_v4u *)(scales + (tb_size)(kt * (BK / 32) + kb) * (tb_size)n + n0 + piece * 16);
        }
    };
    /* registers -> LDS stage s; x becomes E4M3 codes + one E8M0 scale per 32-block here */
    auto store = [&](int s) {
#pragma unroll
        for (int j = 0; j < A_PER; ++j) {
            const int i = tid + j * THREADS, row = i / (BK / 32), kb = i % (BK / 32);
            if (i >= A_ITEMS) continue;
            float amax = 0.0f;
#pragma unroll
            for (int q = 0; q < 8; ++q)
#pragma unroll
                for (int e = 0; e < 4; ++e) amax = tb_fmaxf(amax, tb_fabsf(xa[j][q][e]));
            const unsigned scale = tb_mx_e4m3_scale(amax);
            const float inv = tb_mx_inv_scale(scale);
            tb_v4u packed[2];
#pragma unroll
            for (int q = 0; q < 8; ++q) {
                unsigned word = 0;
#pragma unroll
                for (int e = 0; e < 4; ++e) word |= tb_mx_e4m3_code(xa[j][q][e], inv) << (8 * e);
                packed[q / 4][q % 4] = word;
            }
            tb_v4u *dst = (tb_v4u *)(Lds::a_codes(s) + row * L::A_STRIDE + kb * 32);
            dst[0] = packed[0];
            dst[1] = packed[1];
            Lds::a_scales(s)[kb * BM + row] = (tb_u8)scale;
        }
#pragma unroll
        for (int j = 0; j < B_PER; ++j) {
            const int i = tid + j * THREADS, row = i / (BK / 32), piece = i % (BK / 32);
            if (i < B_ITEMS) *(tb_v4u *)(Lds::b_codes(s) + row * L::B_STRIDE + piece * 16) = bq[j];
        }
#pragma unroll
        for (int j = 0; j < BS_PER; ++j) {
            const int i = tid + j * THREADS, kb = i / (BN / 16), piece = i % (BN / 16);
            if (i < BS_ITEMS) *(tb_v4u *)(Lds::b_scales(s) + kb * BN + piece * 16) = bs[j];
        }
    };

    typename F::acc_t acc[MT][NT];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < F::NACC; ++e) acc[i][j][e] = 0.0f;

    const int lr = lane % I, kg = lane / I; /* the lane's row / column in a tile, and its 32-block */
    auto compute = [&](int s) {
        const tb_u8 *ac = Lds::a_codes(s), *as = Lds::a_scales(s), *bc = Lds::b_codes(s), *bsc = Lds::b_scales(s);
#pragma unroll
        for (int kk = 0; kk < BK / KI; ++kk) {
            tb_v8i a[MT], b[NT];
            int sa[MT], sb[NT];
            const int kb = kk * (KI / 32) + kg;
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                const int row = wm * WTM + i * I + lr;
                const tb_v4u *p = (const tb_v4u *)(ac + row * L::A_STRIDE + kb * 32);
                const tb_v4u lo = p[0], hi = p[1];
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    a[i][e] = (int)lo[e];
                    a[i][4 + e] = (int)hi[e];
                }
                sa[i] = as[kb * BM + row];
            }
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                const int col = wn * WTN + j * I + lr;
                const tb_v4u q = *(const tb_v4u *)(bc + col * L::B_STRIDE + kb * 16);
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    b[j][e] = (int)q[e];
                    b[j][4 + e] = 0; /* E2M1 uses the low 128 bits */
                }
                sb[j] = bsc[kb * BN + col];
            }
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int j = 0; j < NT; ++j) acc[i][j] = F::run(a[i], b[j], acc[i][j], sa[i], sb[j]);
        }
    };

    if (S == 2) {
        load(0);
        store(0);
        tb_sync();
        for (int kt = 0; kt < kt_count; ++kt) {
            if (kt + 1 < kt_count) load(kt + 1);
            compute(kt & 1);
            if (kt + 1 < kt_count) store((kt + 1) & 1); /* read by step kt-1, which ended at a barrier */
            tb_sync();
        }
    } else {
        load(0);
        store(0);
        if (kt_count > 1) {
            load(1);
            store(1);
        }
        if (kt_count > 2) load(2);
        tb_sync();
        for (int kt = 0; kt < kt_count; ++kt) {
            if (kt + 2 < kt_count) store((kt + 2) % 3); /* buffer of step kt-1: free since its barrier */
            if (kt + 3 < kt_count) load(kt + 3);
            compute(kt % 3);
            tb_sync();
        }
    }

#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const int col = n0 + wn * WTN + j * I + lr;
#pragma unroll
            for (int e = 0; e < F::NACC; ++e) {
                const int row = m0 + wm * WTM + i * I + F::row(lane, e);
                if (row < m) y[(tb_size)row * (tb_size)n + col] = acc[i][j][e];
            }
        }
}

#define TB_MX_VARIANT(TM, TN, TK, W, S, L, I)                                                              \
    extern "C" __global__ void TB_LAUNCH_BOUNDS((W) * 64, 1)                                              \
        tb_mxfp4_gemm_m##TM##_n##TN##_k##TK##_w##W##_s##S##_l##L##_i##I(                                  \
            const tb_u8 *__restrict__ w, const float *__restrict__ x, float *__restrict__ y, int m, int n, \
            int k) {                                                                                       \
        tb_mx_gemm<TM, TN, TK, W, S, L, I>(w, x, y, m, n, k);                                              \
    }

#ifndef TB_MX_VARIANTS
#define TB_MX_VARIANTS TB_MX_VARIANT(128, 128, 128, 4, 2, 1, 16)
#endif
TB_MX_VARIANTS
