/*
 * tb-mxfp4-gemm, NVIDIA sm_90 (H100 / H200; NVRTC or nvcc):  y[M][N] = x[M][K] . W[N][K]^T
 *
 * W: the planar MXFP4 layout tb_mxfp4_prepare writes (tb_mx.h): codes uint8 [N][K/2] (weight 2i in the
 * low nibble of byte i), then E8M0 scales uint8 [K/32][N].  x: fp32 [M][K].  y: fp32 [M][N].
 *
 * One workgroup computes a tile_m x tile_n tile of y with `waves` warps arranged 2 x waves/2; each warp
 * owns a (tile_m/2) x (tile_n/(waves/2)) tile of m16n8k16 bf16 MMAs with fp32 accumulators. Per K
 * step of tile_k:
 *   - the raw weight tile (codes + scales, 17/32 byte per weight) streams in through a cp.async ring of
 *     `stages` buffers, issued stages - 1 steps ahead of its use;
 *   - x is loaded to registers one step ahead (fp32, 2 x 16 bytes per thread and chunk);
 *   - after the barrier, every thread converts its x chunks to bf16 and dequantises its weight blocks
 *     (32 E2M1 codes x their E8M0 scale -> bf16, exact) into the other half of a double-buffered,
 *     XOR-swizzled bf16 tile, while ldmatrix + mma.sync consume this step's half: one barrier per step.
 * Exported: tb_mxfp4_gemm_m<tile_m>_n<tile_n>_k<tile_k>_w<waves>_s<stages>_l0_i16 per
 * TB_MX_VARIANT(...) in TB_MX_VARIANTS, and tb_mxfp4_prepare. Dynamic shared memory (launch
 * shared_bytes): 4 * (tile_m + tile_n) * tile_k + stages * tile_n * tile_k * 17 / 32 bytes.
 * Needs n % tile_n == 0 and k % tile_k == 0 (manifest rules); any m.
 */
#include "tb_portability.h"
#include "tb_mx.h"

typedef unsigned char tb_u8;
/* own vector types: no dependence on which built-ins NVRTC or nvcc provide */
struct alignas(16) tb_f4 {
    float x, y, z, w;
};
struct alignas(16) tb_u4 {
    unsigned x, y, z, w;
};
struct alignas(8) tb_f2 {
    float x, y;
};

extern "C" __global__ void tb_mxfp4_prepare(const tb_u8 *__restrict__ gguf, tb_u8 *__restrict__ out, int n,
                                            int k) {
    const tb_size nb = (tb_size)k / 32;
    const tb_size b = (tb_size)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= (tb_size)n * nb) return;
    const tb_size row = b / nb, kb = b % nb;
    tb_mx_repack(gguf + b * 17, out + row * ((tb_size)k / 2) + kb * 16,
                 out + (tb_size)n * ((tb_size)k / 2) + kb * (tb_size)n + row);
}

/* ---- PTX wrappers (tests/fixtures/gpu_emu/tb_cuda_emu.h provides CPU versions for CI) ------------- */
#if !defined(TB_CUDA_EMULATION)
TB_DEV unsigned tb_smem_addr(const void *p) {
    unsigned r;
    asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
    return r;
}
TB_DEV void tb_cp_async16(unsigned dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
TB_DEV void tb_cp_commit(void) { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
TB_DEV void tb_cp_wait(void) {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
TB_DEV void tb_ldmatrix_x4(unsigned addr, unsigned &r0, unsigned &r1, unsigned &r2, unsigned &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr)
                 : "memory");
}
TB_DEV void tb_mma_bf16(float *c, const unsigned *a, unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* two floats -> bf16x2 (round to nearest even); lo lands in the low half */
TB_DEV unsigned tb_bf16x2(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
#endif

/* Byte offset of 16-byte chunk `chunk` of row `row` in a bf16 tile with `row_bytes` per row: chunks are
 * XOR-swizzled with the row's low 3 bits, so ldmatrix (8 rows, one chunk column) and the 16-byte
 * stores of a quarter warp hit 8 different bank groups. */
TB_DEV unsigned tb_swz(int row, int chunk, int row_bytes) {
    return (unsigned)(row * row_bytes + ((chunk ^ (row & 7)) << 4));
}

/* Eight E2M1 codes of one word (code j in bits 4j..4j+3) times `scale` -> four bf16x2 words. */
TB_DEV tb_u4 tb_dequant8(unsigned q, float scale) {
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = tb_mx_e2m1((q >> (4 * j)) & 15u) * scale;
    tb_u4 r;
    r.x = tb_bf16x2(v[0], v[1]);
    r.y = tb_bf16x2(v[2], v[3]);
    r.z = tb_bf16x2(v[4], v[5]);
    r.w = tb_bf16x2(v[6], v[7]);
    return r;
}

template <int BM, int BN, int BK, int WARPS, int STAGES>
struct TbMxCfg {
    static constexpr int THREADS = WARPS * 32;
    static constexpr int WN = WARPS / 2;                 /* warps along N (2 along M) */
    static constexpr int WTM = BM / 2, WTN = BN / WN;    /* warp tile */
    static constexpr int MT = WTM / 16, NT = WTN / 8;    /* m16 and n8 MMA tiles per warp */
    static constexpr int ROW_BYTES = BK * 2;             /* one bf16 row of a tile */
    static constexpr int A_TILE = BM * ROW_BYTES, B_TILE = BN * ROW_BYTES;
    static constexpr int RAW_CODES = BN * BK / 2, RAW_SCALES = BN * BK / 32;
    static constexpr int RAW = RAW_CODES + RAW_SCALES;   /* one ring slot */
    static constexpr int A_CHUNKS = BM * BK / 8;         /* 8 floats -> one 16-byte bf16 chunk */
    static constexpr int A_PER_THREAD = A_CHUNKS / THREADS;
    static constexpr int BLOCKS = BN * BK / 32;          /* (weight row, 32-block) pairs per tile */
    static_assert(BK % 64 == 0 && BM % 32 == 0 && WARPS % 2 == 0, "tile shape");
    static_assert(MT >= 1 && NT % 2 == 0, "warp tile must hold m16 x n16 pieces");
    static_assert(A_CHUNKS % THREADS == 0, "x chunks per thread");
    static_assert(RAW_CODES % 16 == 0 && RAW_SCALES % 16 == 0, "16-byte cp.async pieces");
};

template <int BM, int BN, int BK, int WARPS, int STAGES>
TB_DEV void tb_mx_gemm(const tb_u8 *__restrict__ w, const float *__restrict__ x, float *__restrict__ y, int m,
                       int n, int k) {
    using C = TbMxCfg<BM, BN, BK, WARPS, STAGES>;
    extern __shared__ __align__(128) tb_u8 tb_smem[];
    tb_u8 *const a_tile = tb_smem;                     /* [2][BM][BK] bf16, swizzled */
    tb_u8 *const b_tile = tb_smem + 2 * C::A_TILE;     /* [2][BN][BK] bf16, swizzled */
    tb_u8 *const ring = b_tile + 2 * C::B_TILE;        /* [STAGES][codes BN x BK/2 | scales BK/32 x BN] */
    const unsigned a_base = tb_smem_addr(a_tile), b_base = tb_smem_addr(b_tile), ring_base = tb_smem_addr(ring);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / C::WN, wn = warp % C::WN;
    const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM;
    const int kt_count = k / BK;
    const tb_u8 *const codes = w;
    const tb_u8 *const scales = w + (tb_size)n * (tb_size)(k / 2);

    /* raw weight tile `kt` -> ring slot `slot` (cp.async, one commit group per call site) */
    auto issue_raw = [&](int kt, int slot) {
        const unsigned dst = ring_base + slot * C::RAW;
        for (int i = tid; i < C::RAW_CODES / 16; i += C::THREADS) {
            const int row = i / (BK / 32), piece = i % (BK / 32);
            tb_cp_async16(dst + row * (BK / 2) + piece * 16,
                          codes + (tb_size)(n0 + row) * (tb_size)(k / 2) + (tb_size)kt * (BK / 2) + piece * 16);
        }
        for (int i = tid; i < C::RAW_SCALES / 16; i += C::THREADS) {
            const int kb = i / (BN / 16), piece = i % (BN / 16);
            tb_cp_async16(dst + C::RAW_CODES + kb * BN + piece * 16,
                          scales + (tb_size)(kt * (BK / 32) + kb) * (tb_size)n + n0 + piece * 16);
        }
    };
    tb_f4 a_regs[C::A_PER_THREAD][2];
    auto load_a = [&](int kt) {
#pragma unroll
        for (int j = 0; j < C::A_PER_THREAD; ++j) {
            const int i = tid + j * C::THREADS, row = i / (BK / 8), chunk = i % (BK / 8);
            if (m0 + row < m) {
                const tb_f4 *src = (const tb_f4 *)(x + (tb_size)(m0 + row) * (tb_size)k + (tb_size)kt * BK + chunk * 8);
                a_regs[j][0] = src[0];
                a_regs[j][1] = src[1];
            } else {
                a_regs[j][0] = tb_f4{0.f, 0.f, 0.f, 0.f};
                a_regs[j][1] = a_regs[j][0];
            }
        }
    };
    auto store_a = [&](int buf) {
#pragma unroll
        for (int j = 0; j < C::A_PER_THREAD; ++j) {
            const int i = tid + j * C::THREADS, row = i / (BK / 8), chunk = i % (BK / 8);
            tb_u4 v;
            v.x = tb_bf16x2(a_regs[j][0].x, a_regs[j][0].y);
            v.y = tb_bf16x2(a_regs[j][0].z, a_regs[j][0].w);
            v.z = tb_bf16x2(a_regs[j][1].x, a_regs[j][1].y);
            v.w = tb_bf16x2(a_regs[j][1].z, a_regs[j][1].w);
            *(tb_u4 *)(a_tile + buf * C::A_TILE + tb_swz(row, chunk, C::ROW_BYTES)) = v;
        }
    };
    /* ring slot -> bf16 B tile: each (row, 32-block) is 16 code bytes = four 8-weight chunks */
    auto dequant_b = [&](int slot, int buf) {
        const tb_u8 *raw = ring + slot * C::RAW;
        for (int i = tid; i < C::BLOCKS; i += C::THREADS) {
            const int row = i / (BK / 32), kb = i % (BK / 32);
            const tb_u4 q = *(const tb_u4 *)(raw + row * (BK / 2) + kb * 16);
            const float scale = tb_mx_e8m0(raw[C::RAW_CODES + kb * BN + row]);
            tb_u8 *dst = b_tile + buf * C::B_TILE;
            *(tb_u4 *)(dst + tb_swz(row, kb * 4 + 0, C::ROW_BYTES)) = tb_dequant8(q.x, scale);
            *(tb_u4 *)(dst + tb_swz(row, kb * 4 + 1, C::ROW_BYTES)) = tb_dequant8(q.y, scale);
            *(tb_u4 *)(dst + tb_swz(row, kb * 4 + 2, C::ROW_BYTES)) = tb_dequant8(q.z, scale);
            *(tb_u4 *)(dst + tb_swz(row, kb * 4 + 3, C::ROW_BYTES)) = tb_dequant8(q.w, scale);
        }
    };

    float acc[C::MT][C::NT][4];
#pragma unroll
    for (int i = 0; i < C::MT; ++i)
#pragma unroll
        for (int j = 0; j < C::NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

    /* prologue: ring slots 0..STAGES-1, tile 0 converted, x of tile 1 in registers */
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
        if (s < kt_count) issue_raw(s, s);
        tb_cp_commit();
    }
    load_a(0);
    tb_cp_wait<STAGES - 1>();
    __syncthreads();
    store_a(0);
    dequant_b(0, 0);
    if (kt_count > 1) load_a(1);
    tb_cp_wait<STAGES - 2>();
    __syncthreads();

    for (int kt = 0; kt < kt_count; ++kt) {
        const int cur = kt & 1;
        if (kt + 1 < kt_count) { /* the other half: read by step kt-1, which ended at a barrier */
            store_a(cur ^ 1);
            dequant_b((kt + 1) % STAGES, cur ^ 1);
        }
        if (kt + STAGES < kt_count) issue_raw(kt + STAGES, kt % STAGES); /* slot of tile kt: done */
        tb_cp_commit();
        if (kt + 2 < kt_count) load_a(kt + 2);

        const unsigned a_buf = a_base + cur * C::A_TILE, b_buf = b_base + cur * C::B_TILE;
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            unsigned a[C::MT][4], b[C::NT][2];
#pragma unroll
            for (int i = 0; i < C::MT; ++i) {
                const int row = wm * C::WTM + i * 16 + (lane & 15);
                tb_ldmatrix_x4(a_buf + tb_swz(row, kk * 2 + (lane >> 4), C::ROW_BYTES), a[i][0], a[i][1], a[i][2],
                               a[i][3]);
            }
#pragma unroll
            for (int j = 0; j < C::NT / 2; ++j) {
                const int row = wn * C::WTN + j * 16 + (lane & 7) + ((lane >> 4) << 3);
                tb_ldmatrix_x4(b_buf + tb_swz(row, kk * 2 + ((lane >> 3) & 1), C::ROW_BYTES), b[2 * j][0],
                               b[2 * j][1], b[2 * j + 1][0], b[2 * j + 1][1]);
            }
#pragma unroll
            for (int i = 0; i < C::MT; ++i)
#pragma unroll
                for (int j = 0; j < C::NT; ++j) tb_mma_bf16(acc[i][j], a[i], b[j][0], b[j][1]);
        }
        tb_cp_wait<STAGES - 2>(); /* tile kt+2 landed (this thread's copies) */
        __syncthreads();
    }

    /* epilogue: c0,c1 at (row g, cols 2t, 2t+1), c2,c3 at row g + 8 */
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int i = 0; i < C::MT; ++i) {
        const int row = m0 + wm * C::WTM + i * 16 + g;
#pragma unroll
        for (int j = 0; j < C::NT; ++j) {
            const int col = n0 + wn * C::WTN + j * 8 + 2 * t;
            if (row < m) *(tb_f2 *)(y + (tb_size)row * (tb_size)n + col) = tb_f2{acc[i][j][0], acc[i][j][1]};
            if (row + 8 < m)
                *(tb_f2 *)(y + (tb_size)(row + 8) * (tb_size)n + col) = tb_f2{acc[i][j][2], acc[i][j][3]};
        }
    }
}

#define TB_MX_VARIANT(TM, TN, TK, W, S, L, I)                                                              \
    extern "C" __global__ void __launch_bounds__((W) * 32, 1)                                             \
        tb_mxfp4_gemm_m##TM##_n##TN##_k##TK##_w##W##_s##S##_l##L##_i##I(                                  \
            const tb_u8 *__restrict__ w, const float *__restrict__ x, float *__restrict__ y, int m, int n, \
            int k) {                                                                                       \
        tb_mx_gemm<TM, TN, TK, W, S>(w, x, y, m, n, k);                                                    \
    }

#ifndef TB_MX_VARIANTS
#define TB_MX_VARIANTS TB_MX_VARIANT(128, 128, 64, 8, 3, 0, 16)
#endif
TB_MX_VARIANTS
