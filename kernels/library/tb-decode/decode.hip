/*
 * Tunebase decode GEMV (M = 1..4) at the format's TRUE bytes:  y[M][N] = x[M][K] . W[N][K]^T
 * W in the tb-split layout (kernels/formats/split.py): per-row payload qs, high bits qh, scale bytes sc,
 * exactly the GGUF bytes. One compiled unit per format (-DTB_FMT_<NAME> and the part sizes); the
 * format specifics (nibble unpack, IQ4 codebook by byte permutes, Q5/Q6 high bits, K-quant scales,
 * dp4a / sdot4) live in tb_formats.h, shared with prefill and with the host twin (decode_gemv.c).
 *
 * Exported symbols (one per variant):  tb_decode_mx{MX}_kb{KB}_rw{RW}_u{U}_rg{RG}_pg{PG}_pp{PP}
 *
 * Kernel arguments (ABI; declared in tunebase-kernel.toml [[args]], keep in sync):
 *   0  const uint8_t *qs         [N][K*TB_QBITS/8]     payload
 *   1  const uint8_t *qh         [N][...]              high bits; NULL when the format has none
 *   2  const uint8_t *sc         [N][...]              scale bytes
 *   3  const float   *x          [M][K]                activations
 *   4  float         *y          [M][N]                output, fully overwritten
 *   5  float         *workspace  [KB][M][N]            split-K partials; NULL when KB = 1
 *   6  uint32_t      *counters   [tiles]               zero before the first launch; left zero; NULL when KB = 1
 *   7  int           m           1..4
 *   8  int           n
 *   9  int           k           a multiple of the format's block
 *  10  int           tiles       ceil(N / rows per workgroup)      (tunebase-kernel.toml [derived])
 *  11  int           grid_x      workgroups along x (= tiles, or fewer for a persistent grid)
 * Launch: block = (256,1,1), grid = (grid_x, KB, 1), no dynamic LDS (static LDS per variant, below).
 *
 * Variant meaning (every lane reads 16-byte payload CHUNKS, lane-contiguous, so a row's loads coalesce):
 *   MX  rows of M compiled for (m <= MX): MX = 1 keeps registers and static LDS of M = 1 small, MX = 2
 *       those of M = 2 (the H200, 2026-11-30: MX4 at M = 2 held 106 registers, 2 workgroups per SM)
 *   RG  row groups per wave: a row is read by wave/RG lanes (RG = 2: half-waves, for short K);
 *       RG = 16 (CUDA): the int8 tensor-core kernel, 16 x RW rows per warp as the A operand of
 *       mma.sync m16n8k32 s8, MX = 2 / 4 / 8 rows of M per 8 / MX blocks in the n8 (tb_decode_tc below)
 *   RW  rows per lane group processed together: each x chunk read from LDS serves RW rows
 *   U   chunks per lane per row loaded before any arithmetic: RW*U 16-byte loads in flight per lane
 *   KB  split-K: grid.y cuts each row's blocks into KB slices; the last workgroup to finish a row
 *       tile adds the partials in slice order (no atomics on y, bitwise reproducible)
 *   PG  0: one workgroup per row tile; P > 0: a persistent grid of P workgroups per CU looping over
 *       tiles, so x is quantised into LDS once per workgroup for many tiles instead of once per tile;
 *       on CUDA the variant is compiled for P resident blocks per SM where its registers fit (TB_MINB)
 *   PP  1: software pipeline: a workgroup's (tile, batch) sequence is one stream, and the loads of the
 *       next batch are issued before the arithmetic of this one (two register buffers); 0: batches in turn
 *       (measured on the H200, 2026-11-30: the single-buffered kernel left the GateUp at 62 % of copy
 *       bandwidth, latency-bound with one batch per row and 16-24 warps per SM); 2 / 3 (CUDA): the cp.async
 *       ring (tb_decode_ring); 5 (CUDA, M = 1): the stream kernel (tb_decode_stream: the first batch issued
 *       before x is quantised, x through a cp.async fp32 buffer, rows interleaved over the grid's lane groups);
 *       7 / 8 (CUDA, RG1, KB1): the ring of 2 / 3 stages over units of RW rows interleaved over the grid's
 *       warps (tb_decode_ring_iw: every block the same rows +-1 unit; U5 makes a K = 5120 row one step);
 *       9 (CUDA, M = 1): PP 5 with split waits (tb_decode_stream SPLIT: a batch's last chunk by cp.async, waited
 *       for on its own after the other chunks' dots; those keep one scoreboard)
 *
 * Data flow: (1) x of this workgroup's K slice is loaded (TB_XP passes in flight at once) and quantised
 * per 32-block to int8 into static LDS (kernels/activations.py's rule; each 16-weight half stored at the
 * (chunk, run) slot that reads it, so LDS reads are lane-contiguous 16-byte vectors with no bank
 * conflicts) together with per-block (xs, xs*xsum), (2) the first batch of weight loads is issued before
 * the barrier, (3) chunks are unpacked in registers and dotted against x with dp4a / sdot4, (4) the
 * RW x 4 partial sums of a lane group are reduced with a transposing butterfly (RW*4/2 + ... shuffles
 * instead of RW*4*log2(lanes)).
 * Static LDS: x of the K slice for MX rows, 1.25 bytes per weight per row: TB_XB(KB, MX) bytes, MX x 10 KiB
 * at KB <= 2, MX x 6 KiB at KB = 4, MX x 3 KiB at KB = 8. It sets the occupancy on AMD (gfx906/90a/942:
 * 64 KiB per CU -> 1 workgroup at 40 KiB, 2 at 24, 6 at 10; gfx950: 160 KiB) and the manifest's point
 * rule says when a (m, k, kb) slice fits.
 */
#include "tb_formats.h"
#include "tb_i8mma.h" /* RG16: int8 tensor-core operands, shared with tb-prefill */

/* IQ4 on CUDA: x stored in LDS in the order of the nibble-order codebook lookup (tb_unpack_il): word i of
 * a 32-block's run-0 slot holds x 4i, 16+4i, 4i+1, 17+4i, of its run-1 slot 4i+2, 18+4i, 4i+3, 19+4i; RG16:
 * the B fragment words b0 / b1 of lane quarter t hold the same k order (an mma sums over k, so A and B
 * permuted alike inside each lane's k-set give the same dots), A's words come from tb_iq4_lookup_il_t */
#if (defined(TB_FMT_IQ4_NL) || defined(TB_FMT_IQ4_XS)) && TB_PERM_STYLE == 1
#define TB_X_IL 1
#else
#define TB_X_IL 0
#endif
#if TB_X_IL
/* (a & 0x44444444) | c as one LOP3 (the mask an immediate, c in a register) */
TB_DEV tb_u32 tbt_and44_or(tb_u32 a, tb_u32 c) {
#if !defined(TB_CUDA) || defined(TB_CUDA_EMULATION)
    return (a & 0x44444444u) | c;
#else
    tb_u32 r;
    asm("lop3.b32 %0, %1, 0x44444444, %2, 0xEA;" : "=r"(r) : "r"(a), "r"(c)); /* 0xEA = (0xF0 & 0xCC) | 0xAA */
    return r;
#endif
}
/* tb_iq4_lookup_il_t with the selector from one LOP3 (k3210 = 0x32103210 held in a register): 6 prmt + 6 ALU per
 * payload word */
TB_DEV void tbt_iq4_lookup(tb_u32 w, tb_u32 t0, tb_u32 t2, tb_u32 k3210, tb_u32 *r0, tb_u32 *r1) {
    const tb_u32 wx = w ^ 0x88888888u;
    const tb_u32 sel = tbt_and44_or(w >> 1, k3210);
    *r0 = tb_prmt_raw(tb_prmt_raw(t0, TB_IQ4_T1, w), tb_prmt_raw(t2, TB_IQ4_T3, wx), sel);
    *r1 = tb_prmt_raw(tb_prmt_raw(t0, TB_IQ4_T1, w >> 16), tb_prmt_raw(t2, TB_IQ4_T3, wx >> 16), sel >> 16);
}
#endif

#define TB_THREADS 256
#define TB_WAVES (TB_THREADS / TB_WAVE)
/* static LDS bytes: x of the K slice for MX rows, 1.25 bytes per weight per row */
#define TB_XB(KB, MX) ((MX) * ((KB) <= 2 ? 10240 : ((KB) == 4 ? 6144 : 3072)))

/* 32-bit registers one chunk keeps live between its loads and its arithmetic (payload + meta) */
#if defined(TB_FMT_Q6_K)
#define TB_META_REGS 5
#elif defined(TB_FMT_Q4_K)
#define TB_META_REGS 3
#elif defined(TB_FMT_Q5_0) || defined(TB_FMT_Q5_1) || defined(TB_FMT_IQ4_XS)
#define TB_META_REGS 2
#else
#define TB_META_REGS 1
#endif
/* registers a variant needs, calibrated on sm_90 ptxas -v (Q4_0: 60 at RW=1,U=2; 94 at 1,8; 112 at 2,4):
 * a base, each chunk in flight (payload, meta, its address), each further row's unpacked chunk */
#define TB_EST_REGS(RW, U, MX) (30 + 5 * (MX) + (RW) * (U) * (5 + TB_META_REGS) + (4 + 3 * (MX)) * ((RW) - 1))

#if defined(TB_AMD)
/* waves per EU asked of the compiler: what the static LDS permits (a 256-thread workgroup is one wave
 * per SIMD), capped by what the registers of the variant permit (256 VGPRs per lane per SIMD) */
#if defined(__gfx950__)
#define TB_LDS_PER_CU 163840
#else
#define TB_LDS_PER_CU 65536
#endif
#define TB_LDS_WAVES(KB, MX) (TB_LDS_PER_CU / TB_XB(KB, MX) > 0 ? TB_LDS_PER_CU / TB_XB(KB, MX) : 1)
/* AMD code needs more VGPRs than sm_90 needs registers: about one more per chunk in flight (gfx906 hipcc:
 * 84 VGPRs + 3 spills at MX=1, RW=1, U=8 capped at 3 waves), and half as many again for the formats
 * with two or more meta words (Q4_K / IQ4_XS at MX=1, RW=2, U=4: 128 VGPRs + 28 spills at 2 waves) */
#if TB_META_REGS >= 2
#define TB_EST_VGPRS(RW, U, MX) (TB_EST_REGS(RW, U, MX) * 3 / 2)
#else
#define TB_EST_VGPRS(RW, U, MX) (TB_EST_REGS(RW, U, MX) + (RW) * (U))
#endif
#define TB_REG_WAVES(RW, U, MX) (256 / TB_EST_VGPRS(RW, U, MX) > 0 ? 256 / TB_EST_VGPRS(RW, U, MX) : 1)
#define TB_OCC(RW, U, KB, MX)                                                                           \
    (TB_LDS_WAVES(KB, MX) < TB_REG_WAVES(RW, U, MX) ? TB_LDS_WAVES(KB, MX) : TB_REG_WAVES(RW, U, MX))
#else
/* min blocks per SM: 65536 registers / (256 threads * registers the variant needs) */
#define TB_OCC_R(RW, U, MX) (65536 / (TB_THREADS * TB_EST_REGS(RW, U, MX)))
#define TB_OCC(RW, U, KB, MX) (TB_OCC_R(RW, U, MX) > 4 ? 4 : (TB_OCC_R(RW, U, MX) < 1 ? 1 : TB_OCC_R(RW, U, MX)))
#endif
/* min blocks per SM asked of ptxas: a persistent grid of PG workgroups per SM must have them all resident
 * (the H200, 2026-11-30: PG = 2 launched 2 workgroups per SM where the registers allowed 3, 15 warps per
 * SM, latency-bound), so PG >= 3 caps the registers at 65536 / (256 PG) where the estimate says the
 * variant fits in that (+10: ptxas -v over the 9 formats, sm_90: no spills at or under the line, spills
 * above it for IQ4_XS / Q5_0 / Q4_K / Q6_K); a variant that does not fit keeps its estimate and simply
 * loses to one that does. PG = 2 keeps the estimate (the variants measured on 2026-11-30; Q6_K at MX2
 * would spill). AMD keeps the LDS / VGPR estimate: a 40 KiB-LDS variant cannot be resident PG times. */
/* slack over the cap: +10 where the estimate is calibrated (one meta word: Q4_0, Q4_1, Q8_0, IQ4_NL); none
 * for the formats with two or more meta words, where it under-counts by ~10 (IQ4_XS at MX1/RW1/U8: estimate
 * 91, ptxas 105) and the H200's NVRTC spilled 24 bytes in an IQ4_XS variant squeezed to 80 (2026-12-01) */
#if TB_META_REGS >= 2
#define TB_FIT_SLACK 0
#else
#define TB_FIT_SLACK 10
#endif
#define TB_FITS(RW, U, MX, P) (TB_EST_REGS(RW, U, MX) <= 65536 / (TB_THREADS * (P)) + TB_FIT_SLACK)
#if defined(TB_AMD)
#define TB_MINB(RW, U, KB, MX, PG) TB_OCC(RW, U, KB, MX)
#else
#define TB_MINB(RW, U, KB, MX, PG) \
    ((PG) >= 3 && (PG) > TB_OCC(RW, U, KB, MX) && TB_FITS(RW, U, MX, PG) ? (PG) : TB_OCC(RW, U, KB, MX))
#endif
/* the ring (PP = S >= 2) keeps no payload in registers: a base, the meta words of the S batches in flight (and
 * their addresses), x's row sums (calibrated on NVRTC 13.0 sm_90a ptxas -v, uncapped: Q4_0 61-94, Q4_K 71-123,
 * Q6_K 95-156). Blocks asked of ptxas: the persistent grid's PG, or 4 for the one-shot MX1 grids (their
 * 38-54 KB of shared memory allow 4-5 per SM), where the estimate fits that cap (+TB_FIT_SLACK); else 1 */
#define TB_EST_RING(RW, U, MX, S) (40 + 4 * (MX) + (RW) * (U) * (S) * (TB_META_REGS + 1))
#define TB_RING_WANT(MX, PG) ((PG) >= 2 ? (PG) : ((MX) == 1 ? 4 : 1))
#define TB_MINB_RING(RW, U, MX, PG, S) \
    (TB_EST_RING(RW, U, MX, S) <= 65536 / (TB_THREADS * TB_RING_WANT(MX, PG)) + TB_FIT_SLACK ? TB_RING_WANT(MX, PG) : 1)
#define TB_MINB_V(RW, U, KB, MX, PG, PP) \
    ((PP) >= 2 ? TB_MINB_RING(RW, U, MX, PG, PP) : TB_MINB(RW, U * (1 + (PP)), KB, MX, PG))
/* RG16 (tensor cores): blocks per SM asked of ptxas: the persistent grid's PG, else 3 at RW = 1 (x and a 2-stage
 * ring of a Q4_0 MX4 kernel at K = 5120 take 66.5 KB of shared memory: 3 per SM; NVRTC 13.0 sm_90a fits every format
 * in the 80 registers of 3 blocks without spills, 90-128 registers uncapped), 2 at RW = 2 */
#define TB_MINB_TC(RW, PG) ((PG) >= 2 ? (PG) : ((RW) == 1 ? 3 : 2))
/* PP 5 (the stream kernel, MX1): blocks per SM by the registers of its one batch, TB_STREAM_CW = chunks in flight x
 * twice the registers one chunk costs (payload, meta, their unpack: 10 for one meta word, 11 for IQ4_NL and Q8_0,
 * 13 for two meta words, Q4_K 20 for its 6-bit scale pairs, Q6_K 22): 4 blocks (64 registers) up to 60, 3 (80) up
 * to 100, 2 (128) up to 180, else 1; a persistent grid's PG where it is fewer. NVRTC 13.0 sm_90 (k1u census, x
 * quantised one thread per block, unguarded full batches): Q4_0 RW1/U6 (60) 56 registers at 4 blocks, RW2/U5
 * (100) 78 at 3; at 3 blocks IQ4_NL RW2/U5 and Q6_K RW1/U5 spilled 16 bytes (weighed 10 and 18 then), Q8_0 RW2/U5
 * 8 (weighed 10); IQ4_XS RW1/U5 RG2 (65) spilled 8 bytes at 4; Q4_K RW2/U5 (200) spilled 16 bytes at 2 */
#if defined(TB_FMT_Q4_K)
#define TB_STREAM_W2 20
#elif defined(TB_FMT_Q6_K)
#define TB_STREAM_W2 22
#elif TB_META_REGS >= 2
#define TB_STREAM_W2 13
#elif defined(TB_FMT_IQ4_NL) || defined(TB_FMT_Q8_0)
#define TB_STREAM_W2 11
#else
#define TB_STREAM_W2 10
#endif
#define TB_STREAM_CW(RW, U) ((RW) * (U) * TB_STREAM_W2)
#define TB_STREAM_OCC(RW, U) \
    (TB_STREAM_CW(RW, U) <= 60 ? 4 : TB_STREAM_CW(RW, U) <= 100 ? 3 : TB_STREAM_CW(RW, U) <= 180 ? 2 : 1)
#define TB_MINB_STREAM(RW, U, PG) ((PG) > 0 && (PG) < TB_STREAM_OCC(RW, U) ? (PG) : TB_STREAM_OCC(RW, U))
/* PP 7 / 8: the ring's estimate and blocks per SM at PP - 5 stages */
#define TB_MINB_VG(RG, RW, U, KB, MX, PG, PP)                                                           \
    ((RG) == 16 ? TB_MINB_TC(RW, PG)                                                                    \
                : (PP) == 5 || (PP) == 9 || ((PP) >= 16 && (PP) <= 19) ? TB_MINB_STREAM(RW, U, PG)                                                 \
                : (PP) == 6 ? TB_MINB_FLAT(PG)                                                          \
                : (PP) == 7 || (PP) == 8 ? TB_MINB_RING(RW, U, MX, PG, (PP) - 5) : TB_MINB_V(RW, U, KB, MX, PG, PP))
/* PP 6 (the flat kernel): PG blocks per SM where a chunk's scale is one word through the ring (Q4_0, Q4_1, Q8_0,
 * IQ4_NL: NVRTC 13.0 sm_90 55-63 registers, no spills); the other formats keep U stages of meta in registers (Q6_K
 * U8 at 64 registers spilled 200 bytes, Q4_K 68, IQ4_XS / Q5_0 / Q5_1 8-12; Q6_K U4 20): 2 blocks' 128 registers */
#define TB_FLAT_SMETA (TB_QH_BYTES == 0 && (TB_SC_BYTES == 2 || TB_SC_BYTES == 4))
#define TB_MINB_FLAT(PG) (TB_FLAT_SMETA ? (PG) : 2)
/* passes of x staging loaded before any is reduced (tb_stage_x): 6 x 256 float4 cover K = 6144 at M = 1.
 * AMD: 1, the order measured before (gfx906 hipcc: 2 passes or x first made the 4-wave PP0 variants spill) */
#if defined(TB_AMD)
#define TB_XP(MX) 1
#define TB_X_FIRST 0
#else
#define TB_XP(MX) ((MX) == 1 ? 6 : 8)
#define TB_X_FIRST 1
#endif

/* PP >= 2 (CUDA only): the weights' 16-byte payload chunks go through a shared-memory ring of PP batches with
 * cp.async, so the bytes in flight cost no registers (the register pipeline, PP = 1, keeps 2 x RW x U x 4
 * payload registers: 106-118 registers at MX4 on the H200, 2 blocks per SM, latency-bound at M > 1); the
 * ring and x of the K slice live in dynamic shared memory sized for the launch (tunebase-kernel.toml smem).
 * A lane reads back only the ring slots it filled itself, so cp.async.wait_group orders them: no barrier.
 * The CPU emulator (tests/fixtures/gpu_emu/tb_cuda_emu.h) supplies these four for CI. */
#if defined(TB_CUDA) && !defined(TB_CUDA_EMULATION)
TB_DEV unsigned tb_smem_addr(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
TB_DEV void tb_cp_async16(unsigned dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
TB_DEV void tb_cp_commit(void) { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
/* 4 bytes through L1 (PP6: a chunk's scale word) */
TB_DEV void tb_cp_async4(unsigned dst, const void *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
}
template <int N>
TB_DEV void tb_cp_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
/* RG16: 16 bytes, the bytes past `valid` zero-filled (valid 0: nothing read); ldmatrix x4; a warp barrier */
TB_DEV void tb_cp_async16z(unsigned dst, const void *src, int valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid) : "memory");
}
TB_DEV void tb_ldsm4(unsigned addr, tb_u32 &r0, tb_u32 &r1, tb_u32 &r2, tb_u32 &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr)
                 : "memory");
}
TB_DEV void tb_syncwarp(void) { __syncwarp(); }
/* [prelaunch] overlap (sm_90 programmatic dependent launch): the prelaunch kernel lets the variant start at once;
 * the variant waits for the prelaunch grid's completion and its writes before it reads the workspace. Launched
 * without the attribute (the table consumer, a plain stream) both are no-ops */
TB_DEV void tb_griddep_launch(void) { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }
TB_DEV void tb_griddep_wait(void) { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
extern __shared__ __align__(16) tb_u8 tb_dsmem[];
#define TB_DSMEM tb_dsmem
#elif defined(TB_CUDA_EMULATION)
#define TB_DSMEM tb_smem
#endif

#define TB_DECODE_PARAMS                                                                             \
    const tb_u8 *__restrict__ qs, const tb_u8 *__restrict__ qh, const tb_u8 *__restrict__ sc,        \
        const float *__restrict__ x, float *__restrict__ y, float *__restrict__ workspace,           \
        tb_u32 *__restrict__ counters, int m, int n, int k, int tiles, int grid_x

struct alignas(8) tb_f2 {
    float x, y;
};
struct alignas(16) tb_f4 {
    float x, y, z, w;
};

/* One 32-weight block of x (block b of the nb staged from b0, row of M i) quantised by the 8 lanes that hold its
 * float4s (lane part: x 4 part .. 4 part + 3): int8 into xq, (xs, xs * xsum) into xm[2 (i nb + b)]. Same rule as
 * kernels/activations.py: amax, inv = 127 / amax (0 when amax = 0), q = rint(x * inv), xs = amax / 127. Every lane
 * of the warp calls it (shuffles); `on` false: a padding lane that stores nothing. TC: RG16's layout, the one
 * tb_decode_prep also writes, once per launch, for the whole K */
template <bool TC>
TB_DEV void tb_quant_block(const tb_f4 &w, bool on, int part, int i, int b, int m, int b0, int nb, int c0,
                           int nchunks, tb_u32x4 *xq, float *xm) {
    float amax = tb_fmaxf(tb_fmaxf(tb_fabsf(w.x), tb_fabsf(w.y)), tb_fmaxf(tb_fabsf(w.z), tb_fabsf(w.w)));
    amax = tb_fmaxf(amax, tb_shfl_xor(amax, 4));
    amax = tb_fmaxf(amax, tb_shfl_xor(amax, 2));
    amax = tb_fmaxf(amax, tb_shfl_xor(amax, 1));
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    const tb_i32 q0 = (tb_i32)tb_rintf(w.x * inv), q1 = (tb_i32)tb_rintf(w.y * inv);
    const tb_i32 q2 = (tb_i32)tb_rintf(w.z * inv), q3 = (tb_i32)tb_rintf(w.w * inv);
    float sum = (float)(q0 + q1 + q2 + q3); /* exact: |sum| <= 4064 */
    sum += tb_shfl_xor(sum, 4);
    sum += tb_shfl_xor(sum, 2);
    sum += tb_shfl_xor(sum, 1);
    tb_u32 word = (tb_u32)(q0 & 0xFF) | ((tb_u32)(q1 & 0xFF) << 8) | ((tb_u32)(q2 & 0xFF) << 16) |
                  ((tb_u32)(q3 & 0xFF) << 24);
#if TB_X_IL
    { /* lane part holds x 4i.. of the block (i = part % 4) in run part / 4: pair it with the other run's
       * lane (part ^ 4) byte by byte (RG16: the same k order in the B fragment words as in A's) */
        const tb_u32 other = __float_as_uint(tb_shfl_xor(__uint_as_float(word), 4));
        word = part < 4 ? tb_prmt(word, other, 0x5140u) : tb_prmt(other, word, 0x7362u);
    }
#endif
    if (!on) return;
    if constexpr (TC) {
        /* RG16: [block][row of M][lane quarter q][bytes 4q.., 16+4q..]: one 8-byte read per lane is
         * its B fragment (b0, b1) of mma m16n8k32; the lanes of a fragment read 256 contiguous bytes */
        (void)b0, (void)c0, (void)nchunks;
        ((tb_u32 *)xq)[(b * m + i) * 8 + 2 * (part & 3) + (part >> 2)] = word;
    } else {
        int c, run;
        tb_half_slot(2 * (b0 + b) + (part >> 2), &c, &run);
        tb_u32 *slot = (tb_u32 *)(xq + (i * TB_RUNS + run) * nchunks + (c - c0));
        slot[part & 3] = word;
    }
    if (part == 0) {
        const float xs = amax / 127.0f;
        /* RG16: dw * dx carries the unpacked operands' power-of-two factor (tb_i8mma.h
         * TBP_OPERAND_SCALE) on x's scale, so the weight scales decode without a multiply */
        xm[2 * (i * nb + b)] = TC ? xs * TBP_OPERAND_SCALE : xs;
        xm[2 * (i * nb + b) + 1] = xs * sum;
    }
}

/* Quantise x blocks [b0, b0 + nb) (32-weight blocks) of every row of M into LDS, 8 lanes per block (one
 * float4 each: coalesced loads): xq: [M][TB_RUNS][nchunks] 16-byte slots, xm: [M][nb] (xs, xs * xsum)
 * (tb_quant_block). XP passes of the workgroup load their float4s before any of them is reduced, so the
 * staging costs one global latency per XP * 256 float4s instead of one per 256 (measured on the H200,
 * 2026-11-30: one-shot grids of the 10-20 MB shapes spent 5 serial x latencies before their first dot) */
template <int XP, bool TC = false>
TB_DEV void tb_stage_x(const float *__restrict__ x, int m, int k, int b0, int nb, int c0, int nchunks,
                       tb_u32x4 *xq, float *xm) {
    const int total = 8 * nb * m;
    for (int base = 0; base < total; base += XP * TB_THREADS) { /* uniform trip count: shuffles below */
        tb_f4 v[XP];
#pragma unroll
        for (int p = 0; p < XP; ++p) {
            const int t = base + p * TB_THREADS + TB_TID;
            v[p].x = v[p].y = v[p].z = v[p].w = 0.0f;
            if (t < total) {
                const int blk = t >> 3, part = t & 7;
                const int i = blk / nb;
                const int b = blk - i * nb;
                v[p] = *(const tb_f4 *)(x + (tb_size)i * (tb_size)k + (tb_size)(b0 + b) * 32 + 4 * part);
            }
        }
#pragma unroll
        for (int p = 0; p < XP; ++p) {
            if (base + p * TB_THREADS >= total) break; /* uniform over the workgroup */
            const int t = base + p * TB_THREADS + TB_TID;
            const bool on = t < total;
            const int blk = t >> 3;
            const int i = on ? blk / nb : 0;
            const int b = on ? blk - i * nb : 0;
            tb_quant_block<TC>(v[p], on, t & 7, i, b, m, b0, nb, c0, nchunks, xq, xm);
        }
    }
}

/* Transposing butterfly over a lane group of G lanes: V values per lane in, after it v[0] holds the
 * group sum of value owned(lane) (V and G powers of two); V > G: v[0 .. V/G) hold values owned(lane) + j. */
template <int V, int G>
struct tb_reduce {
    static __device__ TB_FORCEINLINE void run(float *v, int lane) {
        if constexpr (G == 1) {
            return;
        } else if constexpr (V == 1) {
            v[0] += tb_shfl_xor(v[0], G / 2);
            tb_reduce<1, G / 2>::run(v, lane);
        } else {
            const bool up = (lane & (G / 2)) != 0;
#pragma unroll
            for (int i = 0; i < V / 2; ++i) {
                const float send = up ? v[i] : v[i + V / 2];
                const float keep = up ? v[i + V / 2] : v[i];
                v[i] = keep + tb_shfl_xor(send, G / 2);
            }
            tb_reduce<V / 2, G / 2>::run(v, lane);
        }
    }
    static __device__ TB_FORCEINLINE int owned(int lane) {
        if constexpr (V == 1 || G == 1) {
            return 0;
        } else {
            return ((lane & (G / 2)) ? V / 2 : 0) + tb_reduce<V / 2, G / 2>::owned(lane);
        }
    }
};

/* split-K: this workgroup's partials of row tile `tile` are in the workspace (fence, then count); the last of the KB
 * slices to arrive adds the partials in slice order into y and zeroes the counter (no atomics on y) */
template <int KB, int ROWS_WG>
__device__ TB_FORCEINLINE void tb_splitk_tail(int tile, int tid, int m, int n, float *y, float *workspace,
                                              tb_u32 *counters) {
    __shared__ int tb_last;
    tb_fence_release_device(); /* this thread's partials visible device-wide before the count */
    tb_sync();
    if (tid == 0) tb_last = tb_atomic_inc(&counters[tile]) == (tb_u32)(KB - 1);
    tb_sync();
    if (tb_last) {
        tb_fence_acquire_device();
        const int first = tile * ROWS_WG;
        const int left = n - first;
        const int rows = left < ROWS_WG ? left : ROWS_WG;
        const volatile float *ws = workspace;
        for (int t = tid; t < rows * m; t += TB_THREADS) {
            const int ii = t / rows;
            const int rr = first + t % rows;
            float s = 0.0f;
            for (int sl = 0; sl < KB; ++sl)
                s += ws[((tb_size)sl * (tb_size)m + (tb_size)ii) * (tb_size)n + (tb_size)rr];
            y[(tb_size)ii * (tb_size)n + (tb_size)rr] = s;
        }
        if (tid == 0) tb_atomic_store_zero(&counters[tile]);
    }
    tb_sync(); /* tb_last is rewritten by the next tile */
}

/* PP9: a payload chunk by ld.global.nc, as NVRTC makes PP5's (qs handed to cp.async's asm cost the plain loads of
 * the same pointer their read-only form: LDG.E.128, not LDG.E.128.CONSTANT, NVRTC 13.0) */
TB_DEV void tb_ld_nc_u32x4(const tb_u8 *p, tb_u32 *w) {
#if defined(TB_CUDA) && !defined(TB_CUDA_EMULATION)
    asm("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(p));
#else
    tb_ld_u32x4(p, w);
#endif
}

/* the 16-byte payload chunks (and their scale / high-bit words) of one batch: U chunks of RW rows */
template <int RW, int U>
struct tb_batch {
    tb_u32 q[RW][U][4];
    tb_meta mt[RW][U];
};

/* Everything a workgroup knows about its share of the problem: K slice, LDS x, row geometry. */
template <int RG, int RW, int U, int KB, int MX>
struct tb_work {
    static constexpr int RGS = RG, RWS = RW;
    static constexpr int G = TB_WAVE / RG;              /* lanes per row */
    static constexpr int ROWS_WG = TB_WAVES * RG * RW;  /* rows per tile */
    static constexpr int V = RW * MX;                   /* partial sums per lane */
    const tb_u8 *qs, *qh, *sc;
    float *y, *workspace;
    tb_u32 *counters;
    int m, n, tid, lg, rowoff, slice, c0, c1, nchunks, xb0, nxb;
#if TB_X_IL
    tb_u32 iq4t0, iq4t2, iq4k3210; /* tb_iq4_tables, tbt_iq4_lookup's selector base */
#endif
    tb_size qs_row, qh_row, sc_row;
    const tb_u32x4 *xq;
    const float *xm;

    /* issue the loads of batch `base` of tile `tile` (rows past n are clamped: loads stay valid) */
    __device__ TB_FORCEINLINE void load(tb_batch<RW, U> &b, int tile, int base) const {
        load_at(b, tile * ROWS_WG + rowoff, base);
    }
    /* the same for the RW rows from row0 (PP5: rows interleaved over the grid, not tiles); chunks U0 .. U1 - 1 of
     * the batch (PP9 loads a batch in two parts; NC: payload by ld.global.nc) */
    template <int U0 = 0, int U1 = U, bool NC = false>
    __device__ TB_FORCEINLINE void load_at(tb_batch<RW, U> &b, int row0, int base) const {
#pragma unroll
        for (int r = 0; r < RW; ++r) {
            const tb_size row = (tb_size)(row0 + r < n ? row0 + r : n - 1);
            const tb_u8 *qsr = qs + row * qs_row;
            const tb_u8 *qhr = TB_QH_BYTES ? qh + row * qh_row : qh;
            const tb_u8 *scr = sc + row * sc_row;
#pragma unroll
            for (int u = U0; u < U1; ++u) {
                const int c = base + u * G + lg;
                if (c < c1) {
                    if constexpr (NC)
                        tb_ld_nc_u32x4(qsr + 16 * (tb_size)c, b.q[r][u]);
                    else
                        tb_ld_u32x4(qsr + 16 * (tb_size)c, b.q[r][u]);
                    b.mt[r][u] = tb_load_meta(qhr, scr, c);
                }
            }
        }
    }

    /* unpack chunk c of the RW rows (payload q, meta mt) and add its dot products with x (from LDS) into acc */
    /* u: the chunk's slot in its batch; chunk c = base + u * G + lg with base a multiple of 8 */
    /* RING: the cp.async ring's dot (PP >= 2, CUDA): the IQ4 lookup's selector from one LOP3 with its base in a
     * register (tbt_iq4_lookup, -14 instructions per 4 chunks); the register kernels (PP 0, 1, shared with AMD)
     * keep tb_unpack_il (with the extra live register NVRTC gave some one-shot IQ4 kernels a block less per SM) */
    /* M1 (PP9, MX = 1): m = 1 taken as known (the ABI's m >= 1), so no branch per chunk: a branch between a load
     * and its use made ptxas put every load in flight on one scoreboard (k3q, NVRTC 13.0 SASS) */
    template <bool RING = false, bool M1 = false>
    __device__ TB_FORCEINLINE void dot(const tb_u32 (&q)[RW][4], const tb_meta (&mt)[RW], int c, int u,
                                       float *acc) const {
        const int lc = c - c0;
        (void)u;
        const int bl = tb_chunk_p_lo(c) / 32 - xb0, bh = tb_chunk_p_hi(c) / 32 - xb0;
        (void)bh;
        tb_chunk ch[RW];
#pragma unroll
#if TB_X_IL
        for (int r = 0; r < RW; ++r) {
            tb_meta m1 = mt[r];
#if defined(TB_FMT_IQ4_XS)
            /* the sub-block in the super-block, c % 8 = (u G + lg) % 8: loop-invariant per lane, so its scale bit
             * offsets are computed once, not per chunk (batches start at multiples of 8 chunks: c0 = 8 blk0, and
             * the step G U is a multiple of 8 in every IQ4_XS variant; the emulator checks it) */
            static_assert(TB_CHUNKS_PER_BLOCK == 8, "IQ4_XS: 8 chunks per super-block");
            m1.e = (tb_u32)((u * G + lg) & 7);
#endif
            if constexpr (RING) {
                ch[r] = tb_unpack(q[r], m1, c); /* the scale; its lookups are dead code, dropped by the compiler */
#pragma unroll
                for (int i = 0; i < 4; ++i)
                    tbt_iq4_lookup(q[r][i], iq4t0, iq4t2, iq4k3210, (tb_u32 *)&ch[r].lo[i], (tb_u32 *)&ch[r].hi[i]);
            } else {
                ch[r] = tb_unpack_il(q[r], m1, c, iq4t0, iq4t2);
            }
        }
#else
        for (int r = 0; r < RW; ++r) ch[r] = tb_unpack(q[r], mt[r], c);
#endif
#pragma unroll
        for (int i = 0; i < MX; ++i) {
            if ((M1 && MX == 1) || i < m) { /* x of row i read once from LDS, used by all RW rows */
                tb_i32 xl[4], xh[4];
                const tb_u32x4 a = xq[(i * TB_RUNS) * nchunks + lc];
                xl[0] = (tb_i32)a.x, xl[1] = (tb_i32)a.y, xl[2] = (tb_i32)a.z, xl[3] = (tb_i32)a.w;
#if TB_RUNS == 2
                const tb_u32x4 h = xq[(i * TB_RUNS + 1) * nchunks + lc];
                xh[0] = (tb_i32)h.x, xh[1] = (tb_i32)h.y, xh[2] = (tb_i32)h.z, xh[3] = (tb_i32)h.w;
#else
                xh[0] = xh[1] = xh[2] = xh[3] = 0;
#endif
                const tb_f2 ml = *(const tb_f2 *)(xm + 2 * (i * nxb + bl));
#if TB_SAME_BLOCK || TB_RUNS == 1
                const tb_f2 mh = ml; /* both runs in one 32-block of x */
#else
                const tb_f2 mh = *(const tb_f2 *)(xm + 2 * (i * nxb + bh));
#endif
#pragma unroll
                for (int r = 0; r < RW; ++r)
                    acc[r * MX + i] += tb_chunk_dot(&ch[r], c, xl, xh, ml.x, mh.x, ml.y, mh.y);
            }
        }
    }

    /* PP6 (RW = MX = 1, full-wave rows, one chunk a stage): dot()'s ring path with x's slot and scale pointers
     * given (they step by a constant per stage: 32 chunks, TB_CHUNK_WEIGHTS 32-blocks), not made from c */
    __device__ TB_FORCEINLINE void dot_flat(const tb_u32 (&q)[4], const tb_meta &mt, int c, const tb_u32x4 *xa,
                                            const float *pl, const float *ph, float *acc) const {
        tb_chunk ch;
#if TB_X_IL
        tb_meta m1 = mt;
#if defined(TB_FMT_IQ4_XS)
        static_assert(TB_CHUNKS_PER_BLOCK == 8, "IQ4_XS: 8 chunks per super-block");
        m1.e = (tb_u32)(lg & 7); /* c % 8: stages start at multiples of 32 chunks */
#endif
        ch = tb_unpack(q, m1, c);
#pragma unroll
        for (int i = 0; i < 4; ++i)
            tbt_iq4_lookup(q[i], iq4t0, iq4t2, iq4k3210, (tb_u32 *)&ch.lo[i], (tb_u32 *)&ch.hi[i]);
#else
        ch = tb_unpack(q, mt, c);
#endif
        tb_i32 xl[4], xh[4];
        const tb_u32x4 a = xa[0];
        xl[0] = (tb_i32)a.x, xl[1] = (tb_i32)a.y, xl[2] = (tb_i32)a.z, xl[3] = (tb_i32)a.w;
#if TB_RUNS == 2
        const tb_u32x4 h = xa[nchunks];
        xh[0] = (tb_i32)h.x, xh[1] = (tb_i32)h.y, xh[2] = (tb_i32)h.z, xh[3] = (tb_i32)h.w;
#else
        xh[0] = xh[1] = xh[2] = xh[3] = 0;
#endif
        const tb_f2 ml = *(const tb_f2 *)pl;
#if TB_SAME_BLOCK || TB_RUNS == 1
        const tb_f2 mh = ml;
        (void)ph;
#else
        const tb_f2 mh = *(const tb_f2 *)ph;
#endif
        acc[0] += tb_chunk_dot(&ch, c, xl, xh, ml.x, mh.x, ml.y, mh.y);
    }

    /* the batch held in registers (PP <= 1) */
    /* FULL: the caller knows the batch lies inside the slice (base + G U <= c1): no per-chunk guards */
    /* U0, U1, M1 (PP9): chunks U0 .. U1 - 1 of the batch only, m = 1 known (dot) */
    template <bool FULL = false, int U0 = 0, int U1 = U, bool M1 = false>
    __device__ TB_FORCEINLINE void compute(const tb_batch<RW, U> &b, int base, float *acc) const {
#pragma unroll
        for (int u = U0; u < U1; ++u) {
            const int c = base + u * G + lg;
            if (FULL || c < c1) {
                tb_u32 q[RW][4];
                tb_meta mt[RW];
#pragma unroll
                for (int r = 0; r < RW; ++r) {
#pragma unroll
                    for (int j = 0; j < 4; ++j) q[r][j] = b.q[r][u][j];
                    mt[r] = b.mt[r][u];
                }
                dot<false, M1>(q, mt, c, u, acc);
            }
        }
    }

#if defined(TB_DSMEM)
    /* PP >= 2: the payload of batch `base` of tile `tile` goes to ring stage `st` by cp.async (slot
     * [st][r][u][tid]: a warp's 32 slots are 512 contiguous bytes, conflict-free), the meta to registers */
    __device__ TB_FORCEINLINE void issue(tb_u32x4 *ring, int st, tb_meta (&mt)[RW][U], int tile, int base) const {
        issue_at(ring, st, mt, tile * ROWS_WG + rowoff, base);
    }
    /* the same for the RW rows from row0 (PP 7 / 8: units of rows interleaved over the grid's warps) */
    __device__ TB_FORCEINLINE void issue_at(tb_u32x4 *ring, int st, tb_meta (&mt)[RW][U], int row0, int base) const {
#pragma unroll
        for (int r = 0; r < RW; ++r) {
            const tb_size row = (tb_size)(row0 + r < n ? row0 + r : n - 1);
            const tb_u8 *qsr = qs + row * qs_row;
            const tb_u8 *qhr = TB_QH_BYTES ? qh + row * qh_row : qh;
            const tb_u8 *scr = sc + row * sc_row;
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int c = base + u * G + lg;
                if (c < c1) {
                    tb_cp_async16(tb_smem_addr(ring + ((st * RW + r) * U + u) * TB_THREADS + tid), qsr + 16 * (tb_size)c);
                    mt[r][u] = tb_load_meta(qhr, scr, c);
                }
            }
        }
    }

    /* ring stage `st` (landed: the caller waited on its group) dotted with x */
    __device__ TB_FORCEINLINE void compute(const tb_u32x4 *ring, int st, const tb_meta (&mt)[RW][U], int base,
                                           float *acc) const {
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int c = base + u * G + lg;
            if (c < c1) {
                tb_u32 q[RW][4];
                tb_meta m1[RW];
#pragma unroll
                for (int r = 0; r < RW; ++r) {
                    const tb_u32x4 v = ring[((st * RW + r) * U + u) * TB_THREADS + tid];
                    q[r][0] = v.x, q[r][1] = v.y, q[r][2] = v.z, q[r][3] = v.w;
                    m1[r] = mt[r][u];
                }
                dot<true>(q, m1, c, u, acc);
            }
        }
    }
#endif

    /* reduce the lane group's sums, write y (KB = 1) or this slice's partials; with KB > 1 the
     * last slice of the tile to arrive adds the partials in slice order. Zeroes acc. */
    __device__ TB_FORCEINLINE void finish(int tile, float *acc) const {
        store(tile * ROWS_WG + rowoff, acc);
        if (KB > 1) tb_splitk_tail<KB, ROWS_WG>(tile, tid, m, n, y, workspace, counters);
    }
    /* reduce the lane group's sums of rows row0 .. row0 + RW - 1, write them (y, or this slice's partials);
     * zeroes acc. Every lane of the wave takes part (shuffles), rows past n are not written */
    __device__ TB_FORCEINLINE void store(int row0, float *acc) const {
        tb_reduce<V, G>::run(acc, lg);
        /* V <= G: one lane in G / V holds one sum; V > G (RG = 8 at MX >= 2): every lane holds V / G */
        constexpr int VL = V > G ? V / G : 1;
        constexpr int WMASK = V >= G ? 0 : G / V - 1;
        const int j0 = tb_reduce<V, G>::owned(lg);
#pragma unroll
        for (int jj = 0; jj < VL; ++jj) {
            const int j = j0 + jj;
            const int r = j / MX, i = j % MX;
            const int row = row0 + r;
            if ((lg & WMASK) == 0 && i < m && row < n) {
                if (KB == 1)
                    y[(tb_size)i * (tb_size)n + (tb_size)row] = acc[jj];
                else
                    workspace[((tb_size)slice * (tb_size)m + (tb_size)i) * (tb_size)n + (tb_size)row] = acc[jj];
            }
        }
#pragma unroll
        for (int v = 0; v < V; ++v) acc[v] = 0.0f;
    }
};

/* a workgroup's share: lane geometry and K slice (x's LDS is placed by the caller) */
template <class W, int KB>
__device__ TB_FORCEINLINE void tb_setup(W &w, TB_DECODE_PARAMS) {
    (void)x, (void)tiles, (void)grid_x;
    w.qs = qs, w.qh = qh, w.sc = sc, w.y = y, w.workspace = workspace, w.counters = counters;
    w.m = m, w.n = n;
    w.tid = TB_TID;
#if TB_X_IL
    tb_iq4_tables(((tb_u32)k >> 31) & (tb_u32)w.tid, &w.iq4t0, &w.iq4t2); /* 0, per-lane: in registers, not uniform ones */
    w.iq4k3210 = 0x32103210u ^ (((tb_u32)k >> 31) & (tb_u32)w.tid);
#endif
    const int lane = w.tid & (TB_WAVE - 1);
    w.lg = lane & (W::G - 1);                                       /* lane inside its row group */
    w.rowoff = ((w.tid / TB_WAVE) * W::RGS + lane / W::G) * W::RWS; /* first row of this group in a tile */
    /* this workgroup's K slice, in whole format blocks */
    const int nblk = k / TB_BLOCK_WEIGHTS;
    w.slice = KB > 1 ? TB_BID_Y : 0;
    const int per = (nblk + KB - 1) / KB;
    const int blk0 = w.slice * per < nblk ? w.slice * per : nblk;
    const int blk1 = blk0 + per < nblk ? blk0 + per : nblk;
    w.c0 = blk0 * TB_CHUNKS_PER_BLOCK, w.c1 = blk1 * TB_CHUNKS_PER_BLOCK;
    w.nchunks = w.c1 - w.c0;
    w.xb0 = blk0 * (TB_BLOCK_WEIGHTS / 32), w.nxb = (blk1 - blk0) * (TB_BLOCK_WEIGHTS / 32);
    w.qs_row = (tb_size)k * TB_QBITS / 8;
    w.qh_row = (tb_size)(k / TB_BLOCK_WEIGHTS) * TB_QH_BYTES;
    w.sc_row = (tb_size)(k / TB_BLOCK_WEIGHTS) * TB_SC_BYTES;
}

template <int RG, int RW, int U, int KB, int PG, int MX, int PP>
__device__ TB_FORCEINLINE void tb_decode_body(TB_DECODE_PARAMS) {
    typedef tb_work<RG, RW, U, KB, MX> W;
    static_assert(W::V <= W::G, "the butterfly needs RW * MX <= lanes per row");
    __shared__ tb_u32x4 lds[TB_XB(KB, MX) / 16];
    (void)PG;

    W w;
    tb_setup<W, KB>(w, qs, qh, sc, x, y, workspace, counters, m, n, k, tiles, grid_x);
    tb_u32x4 *xq = lds;
    float *xm = (float *)(lds + m * TB_RUNS * w.nchunks);
    w.xq = xq, w.xm = xm;

    float acc[W::V];
#pragma unroll
    for (int v = 0; v < W::V; ++v) acc[v] = 0.0f;
    int tile = TB_BID_X;
    if (tile >= tiles) return; /* uniform over the workgroup */
    constexpr int STEP = W::G * U;
    static_assert(!(TB_X_IL && TB_CHUNKS_PER_BLOCK == 8) || STEP % 8 == 0, "tb_work::dot: batches at multiples of 8");

    /* CUDA: x first, its XP-deep loads alone set the register peak of the staging (the weights' first batch
     * in flight beside them cost 76 -> 100 registers at MX1/RW2/U4 on sm_90); the first weight batch is
     * issued before the barrier, so its latency overlaps the other warps' staging. AMD: the first weight
     * batch first, as measured before (gfx906 hipcc: x first made the 4-wave PP0 variants spill) */
    if (TB_X_FIRST) tb_stage_x<TB_XP(MX)>(x, m, k, w.xb0, w.nxb, w.c0, w.nchunks, xq, xm);
    if (PP == 0) {
        /* batches one after the other: the next loads start after this batch's arithmetic */
        bool synced = false;
        for (; tile < tiles; tile += grid_x) {
            for (int base = w.c0; base < w.c1 || !synced; base += STEP) { /* uniform trip count */
                tb_batch<RW, U> b;
                w.load(b, tile, base);
                if (!synced) {
                    if (!TB_X_FIRST) tb_stage_x<TB_XP(MX)>(x, m, k, w.xb0, w.nxb, w.c0, w.nchunks, xq, xm);
                    tb_sync();
                    synced = true;
                    if (base >= w.c1) break; /* empty slice */
                }
                w.compute(b, base, acc);
            }
            w.finish(tile, acc);
        }
        return;
    }

    /* PP = 1: software pipeline over the flattened (tile, batch) sequence of this workgroup: the loads
     * of the next batch (of this tile or the next) are issued before this batch's arithmetic, so every
     * lane keeps 16-byte loads in flight through the unpack, the dots and the end-of-tile reduction */
    if (w.c1 == w.c0) { /* empty K slice (KB > number of blocks): partials are zero */
        for (; tile < tiles; tile += grid_x) w.finish(tile, acc);
        return;
    }
    tb_batch<RW, U> a, b;
    int base = w.c0;
    w.load(a, tile, base);
    if (!TB_X_FIRST) tb_stage_x<TB_XP(MX)>(x, m, k, w.xb0, w.nxb, w.c0, w.nchunks, xq, xm);
    tb_sync();
    for (;;) {
        int nt = tile, nb = base + STEP;
        if (nb >= w.c1) nt += grid_x, nb = w.c0;
        if (nt < tiles) w.load(b, nt, nb);
        w.compute(a, base, acc);
        if (nb == w.c0) w.finish(tile, acc);
        if (nt >= tiles) return;
        tile = nt, base = nb;
        nt = tile, nb = base + STEP; /* the same step with the buffers' roles swapped */
        if (nb >= w.c1) nt += grid_x, nb = w.c0;
        if (nt < tiles) w.load(a, nt, nb);
        w.compute(b, base, acc);
        if (nb == w.c0) w.finish(tile, acc);
        if (nt >= tiles) return;
        tile = nt, base = nb;
    }
}

#if defined(TB_DSMEM)
/* PP = S >= 2 (CUDA): the flattened (tile, batch) stream of the workgroup through a ring of S batches. The
 * first S - 1 batches are issued before x is staged (weights in flight from the first instruction: the
 * 6-18 MB shapes spent their first microsecond on x alone), then every step issues batch n + S - 1 into
 * the stage batch n - 1 left, waits for batch n's group and computes it. Dynamic shared memory:
 * [ring: S x RW x U x 256 x 16 B][x of the K slice: m x 1.25 bytes per weight] (tunebase-kernel.toml smem) */
template <int RG, int RW, int U, int KB, int PG, int MX, int S>
__device__ TB_FORCEINLINE void tb_decode_ring(TB_DECODE_PARAMS) {
    typedef tb_work<RG, RW, U, KB, MX> W;
    static_assert(S == 2 || S == 3, "a ring of two or three stages");
    (void)PG;

    W w;
    tb_setup<W, KB>(w, qs, qh, sc, x, y, workspace, counters, m, n, k, tiles, grid_x);
    tb_u32x4 *ring = (tb_u32x4 *)TB_DSMEM;
    tb_u32x4 *xq = ring + S * RW * U * TB_THREADS;
    float *xm = (float *)(xq + m * TB_RUNS * w.nchunks);
    w.xq = xq, w.xm = xm;

    float acc[W::V];
#pragma unroll
    for (int v = 0; v < W::V; ++v) acc[v] = 0.0f;
    int tile = TB_BID_X;
    if (tile >= tiles) return; /* uniform over the workgroup */
    constexpr int STEP = W::G * U;
    static_assert(!(TB_X_IL && TB_CHUNKS_PER_BLOCK == 8) || STEP % 8 == 0, "tb_work::dot: batches at multiples of 8");
    if (w.c1 == w.c0) { /* empty K slice (KB > number of blocks): partials are zero */
        for (; tile < tiles; tile += grid_x) w.finish(tile, acc);
        return;
    }
    /* one named meta array per stage (an array of stages went to local memory at MX4 on sm_90) */
    tb_meta m0[RW][U], m1[RW][U], m2[RW][U];
    int itile = tile, ibase = w.c0; /* the next batch to issue */
    auto issue = [&](tb_meta(&mi)[RW][U], int st) {
        if (itile < tiles) w.issue(ring, st, mi, itile, ibase);
        tb_cp_commit(); /* empty groups past the end keep the wait count uniform */
        ibase += STEP;
        if (ibase >= w.c1) itile += grid_x, ibase = w.c0;
    };
    issue(m0, 0);
    if (S == 3) issue(m1, 1);
    tb_stage_x<TB_XP(MX)>(x, m, k, w.xb0, w.nxb, w.c0, w.nchunks, xq, xm);
    tb_sync();
    int base = w.c0;
    /* one step: issue batch n + S - 1 into the stage batch n - 1 left, wait for batch n, compute it */
    auto step = [&](tb_meta(&mi)[RW][U], int si, const tb_meta(&mc)[RW][U], int sc) -> bool {
        issue(mi, si);
        tb_cp_wait<S - 1>();
        w.compute(ring, sc, mc, base, acc);
        base += STEP;
        if (base >= w.c1) {
            w.finish(tile, acc);
            tile += grid_x, base = w.c0;
            if (tile >= tiles) return true;
        }
        return false;
    };
    if constexpr (S == 2) {
        for (;;) {
            if (step(m1, 1, m0, 0) || step(m0, 0, m1, 1)) return;
        }
    } else {
        for (;;) {
            if (step(m2, 2, m0, 0) || step(m0, 0, m1, 1) || step(m1, 1, m2, 2)) return;
        }
    }
}
#endif

#if defined(TB_DSMEM)
/* PP = 7 / 8 (CUDA, KB 1, RG 1): the cp.async ring of tb_decode_ring (PP - 5 = 2 / 3 stages) over units of RW rows
 * interleaved over the grid's warps (unit = warp * grid_x + block, stepping grid_x x 8) instead of 16-row tiles
 * over its blocks. Evidence (the H200, 2026-12-01, call 13): the IQ4_XS GateUp M = 2 winner, the ring MX2/RW2/U4
 * PG2 (27.71 us, 0.98x llama.cpp), runs 1088 tiles of 16 rows on 264 blocks: 32 blocks take a fifth tile while
 * the other 232 are done (ncu, call 8: SM active 50.9k of 58.8k cycles, 1.13 eligible warps, 42% no eligible),
 * and at K = 5120 its U4 batch leaves a row's 5th chunk per lane to a second, quarter-full step (the same wait
 * and loop overhead for a quarter of the work). Here every block gets n / (RW grid_x) units (+-1), every warp
 * its own (no block barrier after x is staged, as in tb_decode_ring: a lane reads only the ring slots it
 * filled), and U 5 makes a K = 5120 row ONE step. A warp with no unit left leaves after x is staged. */
template <int RW, int U, int MX, int S>
__device__ TB_FORCEINLINE void tb_decode_ring_iw(TB_DECODE_PARAMS) {
    typedef tb_work<1, RW, U, 1, MX> W;
    static_assert(S == 2 || S == 3, "a ring of two or three stages");
    static_assert(W::V <= W::G, "the butterfly needs RW * MX <= lanes per row");
    constexpr int STEP = W::G * U;
    static_assert(!(TB_X_IL && TB_CHUNKS_PER_BLOCK == 8) || STEP % 8 == 0, "tb_work::dot: batches at multiples of 8");

    W w;
    tb_setup<W, 1>(w, qs, qh, sc, x, y, workspace, counters, m, n, k, tiles, grid_x);
    tb_u32x4 *ring = (tb_u32x4 *)TB_DSMEM;
    tb_u32x4 *xq = ring + S * RW * U * TB_THREADS;
    float *xm = (float *)(xq + m * TB_RUNS * w.nchunks);
    w.xq = xq, w.xm = xm;

    float acc[W::V];
#pragma unroll
    for (int v = 0; v < W::V; ++v) acc[v] = 0.0f;
    const int units = (n + RW - 1) / RW;
    const int gstride = grid_x * TB_WAVES;
    int unit = (w.tid / TB_WAVE) * grid_x + TB_BID_X; /* this warp's first unit (warp-uniform) */
    if (w.c1 == w.c0) return;                         /* k = 0 (uniform over the grid) */
    /* one named meta array per stage (an array of stages went to local memory at MX4 on sm_90) */
    tb_meta m0[RW][U], m1[RW][U], m2[RW][U];
    int iunit = unit, ibase = w.c0; /* the next batch to issue */
    auto issue = [&](tb_meta(&mi)[RW][U], int st) {
        if (iunit < units) w.issue_at(ring, st, mi, iunit * RW, ibase);
        tb_cp_commit(); /* empty groups past the end keep the wait count uniform */
        ibase += STEP;
        if (ibase >= w.c1) iunit += gstride, ibase = w.c0;
    };
    issue(m0, 0);
    if (S == 3) issue(m1, 1);
    tb_stage_x<TB_XP(MX)>(x, m, k, w.xb0, w.nxb, w.c0, w.nchunks, xq, xm);
    tb_sync();
    if (unit >= units) return; /* nothing issued: iunit started past the end */
    int base = w.c0;
    /* one step: issue batch n + S - 1 into the stage batch n - 1 left, wait for batch n, compute it */
    auto step = [&](tb_meta(&mi)[RW][U], int si, const tb_meta(&mc)[RW][U], int sc) -> bool {
        issue(mi, si);
        tb_cp_wait<S - 1>();
        w.compute(ring, sc, mc, base, acc);
        base += STEP;
        if (base >= w.c1) {
            w.store(unit * RW, acc);
            unit += gstride, base = w.c0;
            if (unit >= units) return true;
        }
        return false;
    };
    if constexpr (S == 2) {
        for (;;) {
            if (step(m1, 1, m0, 0) || step(m0, 0, m1, 1)) break;
        }
    } else {
        for (;;) {
            if (step(m2, 2, m0, 0) || step(m0, 0, m1, 1) || step(m1, 1, m2, 2)) break;
        }
    }
    tb_cp_wait<0>(); /* the empty groups past the end */
}
#endif

#if defined(TB_DSMEM)
/* PP = 5 (CUDA, M = 1): the stream kernel. Evidence (the H200, 2026-12-01, device log c, calls 8-9): on the
 * 5-50 MB shapes the M = 1 kernels took 1.5-2x the time of a plain reader of the same bytes (Z 9.28 vs 5.52 us,
 * Down 25.09 vs 12.66), ncu of the Z winner (RG2 one-shot): DRAM 35.5%, 0.47 eligible warps per scheduler;
 * x staged before the first weight load (a global latency in series), 3 batches of a half-full last one per
 * row (10 chunks per lane in batches of 4), 192 tiles on 132 SMs (60 SMs with two, 72 with one). Here:
 *  - the first weight batch is issued before x is quantised, and x costs no registers and one L2 latency per
 *    TB_STREAM_XF floats: cp.async copies x (fp32) into a shared buffer, then it is quantised from there, one
 *    thread per 32-block (tb_stage_x1: a third of tb_stage_x's instructions, the same bits);
 *    x of the whole K, as int8, sits in dynamic shared memory (no split-K: K = 17408 fits, 21.8 KB);
 *  - work units of RW rows are interleaved over the grid's lane groups (unit = group * grid_x + block), so
 *    every block, and so every SM, gets the same number of rows (+-1 unit per group), one-shot or persistent;
 *  - U chunks per lane per row in a batch, U = 5 / 6 with full-wave rows: a K = 5120 / 6144 row is ONE
 *    batch (160 / 192 chunks), so every lane of a wave has all its bytes in flight from the first instruction;
 *  - blocks per SM asked of ptxas: PG, or 4 (64 registers) / 3 (80) by the chunks in flight (TB_MINB_STREAM);
 *  - batches one after the other (no second register buffer: the occupancy keeps other waves' loads in flight).
 * No block-wide barrier after x is staged: the loop runs while the wave's first group has a unit (wave-uniform,
 * for the shuffles); a group past the last unit loads clamped rows and writes nothing. */
#define TB_STREAM_XF 6144 /* floats of x per cp.async round; with a 16-byte pad per 32-block, 4.5 bytes each */

/* M = 1: quantise the 32-blocks b0 .. b0 + nb - 1 of x, fp32 in shared memory at xf4[9 b + j] (a float4 of padding
 * per block, so the 8 lanes of an LDS.128 phase hit 8 different bank groups), ONE thread per block. The same rule,
 * slots and bits as tb_stage_x (amax by fmaxf, inv = 127 / amax, q = rint(x inv), xs = amax / 127, xs * sum q), with
 * a third of its instructions: tb_stage_x spends 8 lanes, 3 + 3 shuffles and 8 divisions on a block (the H200,
 * 2026-12-01 call 10: one-shot stream grids of 8-row blocks ran 14.8 us on Z, the per-block x staging costing about
 * twice the block's dot products in issue slots). xm: this round's (xs, xs * sum) pairs from block 0 of the round */
TB_DEV void tb_stage_x1(const tb_u32x4 *xf4, int b0, int nb, int c0, int nchunks, tb_u32x4 *xq, float *xm) {
    for (int b = TB_TID; b < nb; b += TB_THREADS) {
        const tb_f4 *v = (const tb_f4 *)(xf4 + 9 * b);
        float amax = 0.0f;
#pragma unroll 2
        for (int j = 0; j < 8; ++j) {
            const tb_f4 f = v[j];
            amax = tb_fmaxf(amax, tb_fmaxf(tb_fmaxf(tb_fabsf(f.x), tb_fabsf(f.y)), tb_fmaxf(tb_fabsf(f.z), tb_fabsf(f.w))));
        }
        const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        /* read the block again rather than keep its 32 floats live (NVRTC kept them: 8-64 bytes of spills at 64-80
         * registers): an offset the compiler cannot see through */
        int off = 9 * b;
        asm volatile("" : "+r"(off));
        const tb_f4 *v2 = (const tb_f4 *)(xf4 + off);
        /* the 16-byte slots of the block's two halves (runs); words stored as made, so at most two are live */
        tb_u32 *slot[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            int c, run;
            tb_half_slot(2 * (b0 + b) + h, &c, &run);
            slot[h] = (tb_u32 *)(xq + run * nchunks + (c - c0));
        }
        tb_i32 sum = 0;
#pragma unroll 1 /* unrolled, ptxas hoisted all 8 loads beside the weights' batch: spills at 64-80 registers */
        for (int j = 0; j < 4; ++j) {
            tb_u32 word[2]; /* x 4j.. of the block's first half, and of its second */
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const tb_f4 f = v2[j + 4 * h];
                const tb_i32 q0 = (tb_i32)tb_rintf(f.x * inv), q1 = (tb_i32)tb_rintf(f.y * inv);
                const tb_i32 q2 = (tb_i32)tb_rintf(f.z * inv), q3 = (tb_i32)tb_rintf(f.w * inv);
                sum += q0 + q1 + q2 + q3;
                word[h] = (tb_u32)(q0 & 0xFF) | ((tb_u32)(q1 & 0xFF) << 8) | ((tb_u32)(q2 & 0xFF) << 16) |
                          ((tb_u32)(q3 & 0xFF) << 24);
            }
#if TB_X_IL
            /* tb_stage_x's pairing of the first half's word j with the second's (its lanes part and part ^ 4) */
            slot[0][j] = tb_prmt(word[0], word[1], 0x5140u);
            slot[1][j] = tb_prmt(word[0], word[1], 0x7362u);
#else
            slot[0][j] = word[0];
            slot[1][j] = word[1];
#endif
        }
        const float xs = amax / 127.0f;
        xm[2 * b] = xs;
        xm[2 * b + 1] = xs * (float)sum;
    }
}
/* x quantised once per launch (pp 13-17, one K slice): the prelaunch kernel's image of x (tb_decode_prep: int8
 * then the (xs, xs * xsum) pairs, 40 bytes per 32-block and row of M) is laid out as the kernel keeps it in shared
 * memory, so it is copied as it is, 16 bytes per copy, as one cp.async group */
TB_DEV void tb_copy_x_image(const float *workspace, tb_u8 *dst, int m, int nb, int tid) {
    const tb_u8 *gx = (const tb_u8 *)workspace;
    for (int o = 16 * tid; o < 40 * m * nb; o += 16 * TB_THREADS) tb_cp_async16(tb_smem_addr(dst + o), gx + o);
    tb_cp_commit();
}

/* SPLIT (PP 9 = PP 5 with split waits, k3q): a batch is loaded in two parts, chunks [0, H) and [H, U). NVRTC 13.0
 * put every load that is in flight across a branch or loop (x's staging, the unit loop's back edge, the per-chunk
 * m check) on ONE scoreboard (SASS of Q4_0 RW2/U5: 20 loads on SB5, the first dot waiting for the last), so a wave
 * of one unit dotted nothing before its last byte. Here the first part goes out as before (before x is staged, or
 * at the end of the previous batch), the second part right before the batch's dots, in the same basic block
 * (no per-chunk branch: m = 1), so ptxas tracks it on scoreboards of its own: the first part's dots run while the
 * second part is in flight. Same bytes, same order of the sums (bit-identical to PP 5). */
/* XG (pp 18 / 19 = pp 16 / 17): x's image is read where the prelaunch kernel wrote it (global memory, through L1)
 * instead of copied into shared memory: after griddepcontrol.wait the first dots need no bulk copy and no barrier
 * (call h2's CUPTI records: wait, then copy, then the first dot was the critical path of GDN Z / Out) */
template <int RG, int RW, int U, int MX, bool SPLIT = false, bool XQ = false, bool XG = false>
__device__ TB_FORCEINLINE void tb_decode_stream(TB_DECODE_PARAMS) {
    typedef tb_work<RG, RW, U, 1, MX> W;
    static_assert(MX == 1 || (XQ && !SPLIT), "the stream kernel serves M = 1; M up to MX with x quantised per launch (PP16)");
    static_assert(XQ || !XG, "x read from global memory is x quantised per launch");
    static_assert(W::V <= W::G, "the butterfly needs RW * MX <= lanes per row");
    constexpr int GPB = TB_WAVES * RG;                  /* lane groups per block */
    constexpr int STEP = W::G * U;
    static_assert(!(TB_X_IL && TB_CHUNKS_PER_BLOCK == 8) || STEP % 8 == 0, "tb_work::dot: batches at multiples of 8");

    W w;
    tb_setup<W, 1>(w, qs, qh, sc, x, y, workspace, counters, m, n, k, tiles, grid_x);
    /* dynamic shared memory: [x fp32: min(K, TB_STREAM_XF) floats, a float4 of padding after every 32][x int8 of the
     * K slice: 1.25 bytes per weight] */
    tb_u32x4 *xf4 = (tb_u32x4 *)TB_DSMEM;
    tb_u32x4 *xq = XG ? (tb_u32x4 *)workspace : xf4 + 9 * (w.nxb < TB_STREAM_XF / 32 ? w.nxb : TB_STREAM_XF / 32);
    float *xm = (float *)(xq + m * TB_RUNS * w.nchunks);
    w.xq = xq, w.xm = xm;

    float acc[W::V];
#pragma unroll
    for (int v = 0; v < W::V; ++v) acc[v] = 0.0f;
    const int units = (n + RW - 1) / RW;
    const int gstride = grid_x * GPB;
    const int wave = w.tid / TB_WAVE;
    int unit = (wave * RG + (w.tid & (TB_WAVE - 1)) / W::G) * grid_x + TB_BID_X; /* this group's */
    int unit0 = wave * RG * grid_x + TB_BID_X;                                    /* the wave's first group's */
    if (w.c1 == w.c0) return; /* k = 0 */

    /* x in rounds of TB_STREAM_XF floats: every float4 of a round in flight at once (cp.async), then quantised
     * from shared memory by tb_stage_x (the same rule and slots as the other kernels: bit-identical x). The first
     * round is issued before the weights (its L2 hits then do not queue behind the batch's DRAM misses; issuing it
     * costs a few instructions and no registers), the weights' first batch next, then x is quantised */
    constexpr int XFB = TB_STREAM_XF / 32; /* 32-blocks of x per round */
    auto issue_x = [&](int r0) {
        const int rb = w.nxb - r0 < XFB ? w.nxb - r0 : XFB;
        const float *src = x + (tb_size)(w.xb0 + r0) * 32;
        for (int t = w.tid; t < 8 * rb; t += TB_THREADS) tb_cp_async16(tb_smem_addr(xf4 + t + (t >> 3)), src + 4 * t);
        tb_cp_commit();
    };
    /* XQ (pp 16 / 17): x quantised once per launch (tb_decode_prep_rg1 / _rg2): its image, int8 slots then the
     * scale pairs (contiguous in shared memory too), copied as it is, before the weights as x's first round */
    if constexpr (!XQ) issue_x(0);
    /* SPLIT: chunks [0, H) of a batch to registers, its last chunk's payload by cp.async to the lane's own slots
     * after x's int8 (RW x 256 x 16 bytes, tunebase-kernel.toml smem), its meta to registers */
    constexpr int H = SPLIT ? U - 1 : U;
    tb_batch<RW, U> a;
    tb_u32x4 *bslot = XG ? xf4 : (tb_u32x4 *)(((unsigned long long)(xm + 2 * m * w.nxb) + 15ull) & ~15ull);
    /* the batch's loads: the last chunk's meta first (the first part's wait covers it: issued early, it is not the
     * last to land), the first part, the last chunk's payload copies */
    auto issue_batch = [&](int row0, int b0) {
        if constexpr (SPLIT) {
#pragma unroll
            for (int r = 0; r < RW; ++r) {
                const tb_size row = (tb_size)(row0 + r < n ? row0 + r : n - 1);
                const int c = b0 + H * W::G + w.lg;
                if (c < w.c1) a.mt[r][H] = tb_load_meta(TB_QH_BYTES ? w.qh + row * w.qh_row : w.qh, w.sc + row * w.sc_row, c);
            }
        }
        w.template load_at<0, H, SPLIT>(a, row0, b0);
    };
    auto issue_copy = [&](int row0, int b0) {
        if constexpr (SPLIT) {
#pragma unroll
            for (int r = 0; r < RW; ++r) {
                const tb_size row = (tb_size)(row0 + r < n ? row0 + r : n - 1);
                const int c = b0 + H * W::G + w.lg;
                if (c < w.c1)
                    tb_cp_async16(tb_smem_addr(bslot + r * TB_THREADS + w.tid), w.qs + row * w.qs_row + 16 * (tb_size)c);
            }
            tb_cp_commit(); /* every lane, every batch: wait_group counts stay uniform */
        }
    };
    (void)bslot;
    int base = w.c0;
    if (unit0 < units) issue_batch(unit * RW, base);
    if constexpr (XQ) {
        /* the first batch is in flight; x's image is the prelaunch kernel's output: wait for it (overlap), copy */
        tb_griddep_wait();
        if constexpr (!XG) {
            tb_copy_x_image(workspace, (tb_u8 *)xq, m, w.nxb, w.tid);
            tb_cp_wait<0>();
            tb_sync(); /* every thread's copies of x have landed */
        }
    }
    for (int r0 = 0; r0 < (XQ ? 0 : w.nxb); r0 += XFB) {
        if (r0 > 0) issue_x(r0);
        const int rb = w.nxb - r0 < XFB ? w.nxb - r0 : XFB;
        tb_cp_wait<0>();
        tb_sync();
        tb_stage_x1(xf4, w.xb0 + r0, rb, w.c0, w.nchunks, xq, xm + 2 * r0);
        tb_sync(); /* x of the round quantised (and xf4 free for the next round) */
    }
    /* SPLIT: the first batch's last chunk copied after x is staged (ptxas hoisted copies issued before it above the
     * first part's loads: the first part would have landed last) */
    if (unit0 < units) issue_copy(unit * RW, base);
    while (unit0 < units) {
        if constexpr (SPLIT) {
            auto last = [&]() {
                tb_cp_wait<0>(); /* the lane's own copies: no barrier */
#pragma unroll
                for (int r = 0; r < RW; ++r) {
                    const tb_u32x4 v = bslot[r * TB_THREADS + w.tid];
                    a.q[r][H][0] = v.x, a.q[r][H][1] = v.y, a.q[r][H][2] = v.z, a.q[r][H][3] = v.w;
                }
            };
            if (base + STEP <= w.c1) {
                w.template compute<true, 0, H, true>(a, base, acc);
                last();
                w.template compute<true, H, U, true>(a, base, acc);
            } else {
                w.template compute<false, 0, H, true>(a, base, acc);
                last();
                w.template compute<false, H, U, true>(a, base, acc);
            }
        } else if (base + STEP <= w.c1) /* a batch wholly inside the row (every one of a K = 5120 row at U5): no guards */
            w.template compute<true>(a, base, acc);
        else
            w.compute(a, base, acc);
        base += STEP;
        if (base >= w.c1) {
            w.store(unit * RW, acc);
            unit += gstride, unit0 += gstride, base = w.c0;
            if (unit0 >= units) break;
        }
        issue_batch(unit * RW, base);
        issue_copy(unit * RW, base);
    }
}
#endif

#if defined(TB_DSMEM)
/* PP = 6 (CUDA, M = 1): the flat kernel (U = S: a cp.async ring of S stages of one 16-byte chunk per lane, full-wave
 * rows, PG blocks per SM: grid_x = min(tiles, PG x SMs), every block resident). Why (issue 13, k3m): the PP5 stream
 * kernel's whole batch (Q4_0 RW2/U5: 10 payload + 10 scale loads per lane) sits on ONE scoreboard in NVRTC 13.0's
 * SASS, so a wave's first dot waits for its last load; with one unit per wave (GDN_Z: 3072 units of 2 rows on 3072
 * waves) the loads of every wave finish with the DRAM stream and all of a SM's dot products (Z: ~7.7k warp
 * instructions, ~1.3k cycles of x reads from shared memory) run after it, a serial tail; with more rows than waves
 * (units interleaved) a wave does 1 or 2 units (tail imbalance up to 2x). Here:
 *  - block b owns rows [b n / grid_x, (b + 1) n / grid_x) (equal to +-1 row), and its 8 waves split the block's
 *    flattened (row, 32-chunk stage) sequence evenly (+-1 stage): every wave streams the same bytes, whatever N;
 *  - each stage's payload goes to the wave's own ring slots by cp.async and is waited for by cp.async.wait_group
 *    (S - 1 stages in flight per lane, consumed in the order they were issued): the dots run while the bytes
 *    arrive, the tail is one stage;
 *  - x is loaded by 4 lanes per 32-block straight into registers (coalesced; its L2 loads issued before the ring's
 *    first stages) and quantised with tb_stage_x's rule and slots (the same bits; rint by a float add, not F2I), no
 *    fp32 buffer in shared memory;
 *  - a row the wave range cuts is reduced by the wave and its partial summed with the other waves' in wave order
 *    through shared memory after the block's last barrier (deterministic; rows inside a range are written direct).
 * Dynamic shared memory: [ring: S x 256 x 16 B][scale words: S x 256 x 4 B][x int8 of K: 1.25 bytes per weight]
 * (tunebase-kernel.toml smem). Formats with one scale word per chunk and no high bits: Q4_0, Q4_1, Q8_0, IQ4_NL. */
/* fp32 bits of x * inv + 1.5 * 2^23: the product rounded to fp32, then to the nearest integer (ties to even, as
 * rintf) in the low mantissa bits (|x * inv| < 2^22); no contraction into an FMA (the product must round first) */
TB_DEV tb_u32 tb_rint_bits(float xv, float inv) {
#if defined(TB_CUDA_EMULATION)
    volatile float p = xv * inv;
    return __float_as_uint(p + 12582912.0f);
#else
    return __float_as_uint(__fadd_rn(__fmul_rn(xv, inv), 12582912.0f));
#endif
}
template <int S>
__device__ TB_FORCEINLINE void tb_decode_flat(TB_DECODE_PARAMS) {
    typedef tb_work<1, 1, 1, 1, 1> W;
    static_assert(S >= 3, "at least two stages in flight");
    /* one scale word per chunk and no high bits (Q4_0, Q4_1, Q8_0, IQ4_NL): the word goes through the ring; the
     * other formats keep their meta in registers (correct, and slower: one scoreboard for all stages' loads) */
    constexpr bool SMETA = TB_FLAT_SMETA;
    __shared__ float tb_part[TB_WAVES][2];
    __shared__ int tb_prow[TB_WAVES][2];
    W w;
    tb_setup<W, 1>(w, qs, qh, sc, x, y, workspace, counters, m, n, k, tiles, grid_x);
    tb_u32x4 *ring = (tb_u32x4 *)TB_DSMEM;
    tb_u32 *mw = (tb_u32 *)(ring + S * TB_THREADS);     /* [S][256] scale words */
    tb_u32x4 *xq = (tb_u32x4 *)(mw + S * TB_THREADS);
    float *xm = (float *)(xq + TB_RUNS * w.nchunks);
    w.xq = xq, w.xm = xm;
    const int lane = w.tid & (TB_WAVE - 1), wave = w.tid / TB_WAVE;
    const int nch = w.nchunks;                          /* chunks per row */
    const int spr = (nch + TB_WAVE - 1) / TB_WAVE;      /* stages per row */
    const int r0 = (int)((tb_size)TB_BID_X * (tb_size)n / (tb_size)grid_x);
    const int r1 = (int)((tb_size)(TB_BID_X + 1) * (tb_size)n / (tb_size)grid_x);
    const int T = (r1 - r0) * spr;                       /* this block's stages */
    const int s0 = wave * T / TB_WAVES, s1 = (wave + 1) * T / TB_WAVES;
    if (lane < 2) tb_prow[wave][lane] = -1;

    /* x: 4 lanes per 32-block (lane p: float4 p and p + 4, i.e. word p of both 16-weight halves), XQ passes of 256
     * lanes in flight: each load instruction reads 8 half-lines of 64 bytes (one lane per block read 32 lines, 8x
     * the L1 wavefronts); the first passes' loads go out before the weights' first stages */
    constexpr int XQ = 3;
    const int nxb = w.nxb, xl = 4 * nxb;
    tb_f4 v[XQ][2];
    auto load_x = [&](int base) {
#pragma unroll
        for (int p = 0; p < XQ; ++p) {
            const int t = base + p * TB_THREADS + w.tid;
            if (t < xl) {
                const tb_f4 *src = (const tb_f4 *)(x + (tb_size)(w.xb0 + (t >> 2)) * 32) + (t & 3);
                v[p][0] = src[0], v[p][1] = src[4];
            }
        }
    };
    load_x(0);
    /* the ring: stage s of the wave's range, its payload and scale word to slot s % S. A row is spr whole stages
     * (the manifest asks K % 1024 == 0: 32 | chunks per row) and a block's rows are contiguous in qs and sc, so the
     * wave's stages are one contiguous run of global chunks g = r0 nch + 32 s + lane: a pointer steps 512 bytes */
    const tb_size g0 = (tb_size)r0 * (tb_size)nch + (tb_size)s0 * TB_WAVE + (tb_size)lane;
    const tb_u8 *qp = qs + 16 * g0;
    /* SMETA: the aligned word holding chunk g's scale bytes (Q4_0 / IQ4_NL / Q8_0: 2 at an even offset, Q4_1: 4),
     * 32 / TB_CHUNKS_PER_BLOCK x TB_SC_BYTES bytes (a multiple of 4) on per stage; its offset in the word is the
     * lane's. A scale loaded to a register shared one scoreboard with every stage's, and NVRTC waited for all of
     * them before each new one (k3m, SASS), so it goes through the ring too */
    constexpr int SC_STEP = TB_WAVE / TB_CHUNKS_PER_BLOCK * TB_SC_BYTES;
    const tb_u8 *sfirst = sc + g0 / TB_CHUNKS_PER_BLOCK * TB_SC_BYTES; /* the lane's first scale byte */
    const int soff = (int)((unsigned long long)sfirst & 3ull);       /* aligned by address, not by offset */
    const tb_u8 *sp = sfirst - soff;
    int iss = s0;
    auto issue = [&](int st) {
        if (iss < s1) {
            tb_cp_async16(tb_smem_addr(ring + st * TB_THREADS + w.tid), qp);
            if constexpr (SMETA) tb_cp_async4(tb_smem_addr(mw + st * TB_THREADS + w.tid), sp);
        }
        tb_cp_commit(); /* empty groups past the end keep the wait count uniform */
        ++iss;
        qp += 16 * TB_WAVE;
        sp += SC_STEP;
    };
#pragma unroll
    for (int st = 0; st < S - 1; ++st) issue(st);
    /* x quantised, tb_stage_x's rule and slots (the same bits): amax over the block's 32 (4 lanes, 2 shuffles),
     * inv = 127 / amax, q = rint(x inv) (the fp32 product rounded to an integer by adding 1.5 * 2^23: its low byte
     * is q as int8, exact for |x inv| <= 127, no F2I: the H200's conversions run at 16 per clock per SM and the
     * 4 blocks per SM each quantise the whole of x), xs = amax / 127, xs * sum q */
    for (int base = 0; base < xl; base += XQ * TB_THREADS) { /* uniform trip count: shuffles below */
        if (base > 0) load_x(base);
#pragma unroll
        for (int p = 0; p < XQ; ++p) {
            if (base + p * TB_THREADS >= xl) break; /* uniform over the block */
            const int t = base + p * TB_THREADS + w.tid;
            const bool on = t < xl;
            const int b = on ? t >> 2 : 0, part = t & 3;
            const tb_f4 a = on ? v[p][0] : tb_f4{0.0f, 0.0f, 0.0f, 0.0f}, c = on ? v[p][1] : tb_f4{0.0f, 0.0f, 0.0f, 0.0f};
            float amax = tb_fmaxf(tb_fmaxf(tb_fmaxf(tb_fabsf(a.x), tb_fabsf(a.y)), tb_fmaxf(tb_fabsf(a.z), tb_fabsf(a.w))),
                                  tb_fmaxf(tb_fmaxf(tb_fabsf(c.x), tb_fabsf(c.y)), tb_fmaxf(tb_fabsf(c.z), tb_fabsf(c.w))));
            amax = tb_fmaxf(amax, tb_shfl_xor(amax, 2));
            amax = tb_fmaxf(amax, tb_shfl_xor(amax, 1));
            const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
            tb_u32 word[2];
            tb_i32 sum = 0;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const tb_f4 f = h ? c : a;
                const tb_u32 r0 = tb_rint_bits(f.x, inv), r1 = tb_rint_bits(f.y, inv);
                const tb_u32 r2 = tb_rint_bits(f.z, inv), r3 = tb_rint_bits(f.w, inv);
                /* bits = 0x4B400000 + q: the low bytes are q's; sum q = sum bits - 4 x 0x4B400000 (mod 2^32) */
                sum += (tb_i32)(r0 + r1 + r2 + r3 - 4u * 0x4B400000u);
                word[h] = tb_prmt(tb_prmt(r0, r1, 0x0040u), tb_prmt(r2, r3, 0x0040u), 0x5410u);
            }
            float fsum = (float)sum; /* exact: |sum| <= 4064 */
            fsum += tb_shfl_xor(fsum, 2);
            fsum += tb_shfl_xor(fsum, 1);
            if (on) {
                tb_u32 *slot[2];
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    int cc, run;
                    tb_half_slot(2 * (w.xb0 + b) + h, &cc, &run);
                    slot[h] = (tb_u32 *)(xq + run * nch + (cc - w.c0));
                }
#if TB_X_IL
                slot[0][part] = tb_prmt(word[0], word[1], 0x5140u);
                slot[1][part] = tb_prmt(word[0], word[1], 0x7362u);
#else
                slot[0][part] = word[0];
                slot[1][part] = word[1];
#endif
                if (part == 0) {
                    const float xs = amax / 127.0f;
                    xm[2 * b] = xs;
                    xm[2 * b + 1] = xs * fsum;
                }
            }
        }
    }
    tb_sync();

    float acc[1] = {0.0f};
    int crow = r0 + s0 / spr, cbase = (s0 % spr) * TB_WAVE;
    int rstart = s0; /* the stage the wave began its current row at */
    const int first_row = crow;
    /* the wave's row ends: reduce; a row whole in the range goes to y, a cut one to the wave's partial slot */
    auto row_end = [&](int s_next) {
        tb_reduce<1, TB_WAVE>::run(acc, lane);
        const bool whole = (rstart - (crow - r0) * spr) == 0 && s_next == (crow - r0 + 1) * spr;
        if (lane == 0) {
            if (whole) {
                y[crow] = acc[0];
            } else {
                const int slot = crow == first_row ? 0 : 1;
                tb_part[wave][slot] = acc[0];
                tb_prow[wave][slot] = crow;
            }
        }
        acc[0] = 0.0f;
    };
    if (s0 < s1) {
        /* the formats whose meta is not one word (high bits, K-quant / IQ4_XS scales) load it from global memory
         * when the stage is computed (correct; a latency per stage: PP6 serves Q4_0 / Q4_1 / Q8_0 / IQ4_NL) */
        tb_size g = g0;
        const tb_u8 *mwl = (const tb_u8 *)(mw + w.tid) + soff; /* the lane's scale bytes in slot 0's word */
        /* x of chunk c = cbase + lane: its slot (run 0; run 1 at + nch) and its 32-blocks' scale pairs; a stage
         * moves them 32 chunks, TB_CHUNK_WEIGHTS 32-blocks on; a new row starts them at c = lane again */
        const float *pl0 = xm + 2 * (tb_chunk_p_lo(w.c0 + lane) / 32 - w.xb0);
        const float *ph0 = xm + 2 * (tb_chunk_p_hi(w.c0 + lane) / 32 - w.xb0);
        const tb_u32x4 *xa = xq + cbase + lane;
        const float *pl = pl0 + 2 * TB_CHUNK_WEIGHTS * (cbase / TB_WAVE);
        const float *ph = ph0 + 2 * TB_CHUNK_WEIGHTS * (cbase / TB_WAVE);
        int s = s0;
        /* one stage: issue stage s + S - 1 into the slot stage s - 1 left, wait for stage s (slot st), dot it */
        auto step = [&](int st) {
            issue(st == 0 ? S - 1 : st - 1);
            tb_cp_wait<S - 1>();
            tb_u32 q[4];
            tb_meta m1;
            const tb_u32x4 pv = ring[st * TB_THREADS + w.tid];
            q[0] = pv.x, q[1] = pv.y, q[2] = pv.z, q[3] = pv.w;
            const int c = cbase + lane;
            if constexpr (SMETA) { /* tb_load_meta's m.e of these formats: the scale bytes, from the word */
                m1.w[0] = m1.w[1] = m1.w[2] = m1.w[3] = 0;
                const tb_u8 *sb = mwl + 4 * TB_THREADS * st;
                m1.e = TB_SC_BYTES == 2 ? (tb_u32)tb_ld_u16(sb) : tb_ld_u32(sb);
            } else {
                m1 = tb_load_meta(qh + (g / TB_CHUNKS_PER_BLOCK - c / TB_CHUNKS_PER_BLOCK) * TB_QH_BYTES,
                                  sc + (g / TB_CHUNKS_PER_BLOCK - c / TB_CHUNKS_PER_BLOCK) * TB_SC_BYTES, c);
            }
            w.dot_flat(q, m1, w.c0 + c, xa, pl, ph, acc);
            g += TB_WAVE;
            cbase += TB_WAVE;
            xa += TB_WAVE, pl += 2 * TB_CHUNK_WEIGHTS, ph += 2 * TB_CHUNK_WEIGHTS;
            ++s;
            if (cbase == nch || s == s1) { /* wave-uniform */
                row_end(s);
                cbase = 0, ++crow, rstart = s;
                xa = xq + lane, pl = pl0, ph = ph0;
            }
        };
        /* whole rounds of S stages with the slots known at compile time (ring and scale offsets as immediates),
         * then the rest; stage s0 + i is in slot i % S */
        while (s + S <= s1) {
#pragma unroll
            for (int j = 0; j < S; ++j) step(j);
        }
        for (int st = 0; s < s1; ++st) step(st);
    }
    tb_sync();
    /* the cut rows: entry (wave, slot) in order is in row order; the first entry of a row sums its run */
    if (w.tid < 2 * TB_WAVES) {
        const int e = w.tid;
        const int row = tb_prow[e >> 1][e & 1];
        int prev = -1;
        for (int p = e - 1; p >= 0; --p) {
            const int r = tb_prow[p >> 1][p & 1];
            if (r >= 0) {
                prev = r;
                break;
            }
        }
        if (row >= 0 && prev != row) {
            float tot = tb_part[e >> 1][e & 1];
            for (int p = e + 1; p < 2 * TB_WAVES; ++p) {
                const int r = tb_prow[p >> 1][p & 1];
                if (r == row) tot += tb_part[p >> 1][p & 1];
                else if (r >= 0) break;
            }
            y[row] = tot;
        }
    }
}
#endif

/* ---- RG = 16 (CUDA): int8 tensor cores, mma.sync m16n8k32 s8 (sm_80+) ---------------------------------------
 * A warp owns 16 weight rows (x RW): they are the A operand (16 rows x 32 k), unpacked in registers from the
 * true-bytes payload with tb_i8mma.h's tbp_unpack (one payload word per lane and block gives both operand words
 * of the lane's k-set, as in tb-prefill); x, quantised once per workgroup to int8 per 32-block, is the B operand.
 * The n8 columns carry MX rows of M for each of P = 8 / MX blocks: block j of a group of P sees x in columns
 * j*MX .. j*MX+MX-1 and zeros elsewhere, the P mmas of a group chain their int32 accumulators, so every C element
 * is one (row, row of M, block) dot: the per-block scales (weight dw x activation dx, as fp32) apply to all four
 * elements of a lane, none wasted on padding, and the inner loop does the same work for every M <= MX. The int32
 * accumulators start at bits(1.5 * 2^23) so fma(acc, dw, -1.5 * 2^23 * dw) is dot * dw without a convert
 * (TBP_MAGIC, as in tb-prefill); Q6_K's 16-weight scales take two m16n8k16 chains. x's staged scale carries the
 * unpacked operands' power-of-two factor (TBP_OPERAND_SCALE), so a weight scale is its fp16 value as stored.
 * Weights stream through a per-warp cp.async ring of PP stages, each stage 16 x RW rows x 128 payload bytes
 * (8 chunks: 256 weights, Q8_0 128) plus the rows' high-bit and raw scale bytes of those blocks; ldmatrix reads
 * the payload words in fragment order. A warp reads only its own ring (warp barriers, no block barrier after x).
 * Dynamic shared memory: [8 warps x PP stages x 16 RW rows x TBT_ROW][x int8: m x K slice][x scales: m x K/32 x 8]
 * (tunebase-kernel.toml smem, rg == 16). Needs K % (256 KB) == 0 (whole stages per K slice). */
#define TBT_U 8 /* payload chunks per row and stage */
#if defined(TB_FMT_Q8_0)
#define TBT_NB 4 /* 32-blocks per stage */
#else
#define TBT_NB 8
#endif
/* per row and stage: payload (+16: 9 x 16 bytes, an odd stride: conflict-free ldmatrix), high bits (Q6_K +16 for
 * its ldmatrix), raw scale bytes in 16-byte pieces copied from the 16-aligned address at or below them (the
 * window of Q8_0 / IQ4_XS / Q6_K may start mid-piece) */
#define TBT_QS_STRIDE (16 * TBT_U + 16)
#if defined(TB_FMT_Q5_0) || defined(TB_FMT_Q5_1)
#define TBT_QHP 2
#define TBT_QH_STRIDE 32
#elif defined(TB_FMT_Q6_K)
#define TBT_QHP 4
#define TBT_QH_STRIDE 80
#else
#define TBT_QHP 0
#define TBT_QH_STRIDE 0
#endif
#if defined(TB_FMT_Q4_1) || defined(TB_FMT_Q5_1) || defined(TB_FMT_Q6_K)
#define TBT_SCP 2
#else
#define TBT_SCP 1
#endif
#define TBT_SC_STRIDE (16 * TBT_SCP)
#define TBT_ROW (TBT_QS_STRIDE + TBT_QH_STRIDE + TBT_SC_STRIDE)
#define TBT_MAGIC_INIT(d) ((d)[0] = (d)[1] = (d)[2] = (d)[3] = TBP_MAGIC_BITS)

#if defined(TB_DSMEM)
TB_DEV float tb_bits_float(tb_i32 v) { return __int_as_float(v); }
/* IQ4_XS: the 6-bit scales of sub-blocks 2 i + jt (i = 0..3) as the bytes of a word, from the super-block's
 * sw[0] = d | scales_h << 16 (2 bits per sub-block), sw[1] = scales_l (a nibble per sub-block): scales_h's 2-bit
 * pieces 4 i to bits 4, 5 of byte i (nibbles to bytes by prmt, the even ones shifted up) */
TB_DEV tb_u32 tbt_iq4xs_ls(const tb_u32 *sw, int jt) {
    const tb_u32 sl = sw[1] >> (4 * jt), sh = sw[0] >> (16 + 2 * jt);
    const tb_u32 sp = tb_prmt(sh, sh, 0x1100u);
    return (sl & 0x0F0F0F0Fu) | ((((sp << 4) & 0x00FF00FFu) | (sp & 0xFF00FF00u)) & 0x30303030u);
}
/* (a & 0xF0F0F0F0) ^ c as one LOP3, the mask an immediate and c in a register (NVVM splits it into two LOP3s
 * with immediates otherwise) */
TB_DEV tb_u32 tbt_andf0_xor(tb_u32 a, tb_u32 c) {
#if defined(TB_CUDA_EMULATION)
    return (a & 0xF0F0F0F0u) ^ c;
#else
    tb_u32 r;
    asm("lop3.b32 %0, %1, 0xF0F0F0F0, %2, 0x6A;" : "=r"(r) : "r"(a), "r"(c)); /* 0x6A = (0xF0 & 0xCC) ^ 0xAA */
    return r;
#endif
}

/* J (PP 10 / 11 / 12: 2 / 4 / 2): J warps share a 16 RW-row group, warp phase p taking stages p, p + J, ... of the K slice,
 * so a block's copies read 128 J contiguous bytes of a row at a time (a pure reader in RG16's order, H200
 * 2026-12-02 call f1: 158.8 us on the LM head at J1, 147.4 at J2, 146.4 at J4, 3 blocks per SM); a row tile's
 * J partial sums are added in shared memory in phase order before the store */
template <int RW, int KB, int PG, int MX, int S, int J = 1, bool XQ = false>
__device__ TB_FORCEINLINE void tb_decode_tc(TB_DECODE_PARAMS) {
    static_assert(MX == 2 || MX == 4 || MX == 8, "8 / MX blocks per C tile");
    static_assert(J == 1 || (KB == 1 && (J == 2 || J == 4)), "K phases: 2 or 4, one K slice");
    static_assert(!XQ || KB == 1, "x quantised per launch: the workspace holds it, not split-K partials");
    static_assert(TBT_NB % (8 / MX) == 0 && TBT_NB % TBP_G == 0, "whole groups per stage");
    typedef tb_work<16, RW, TBT_U, KB, MX> W;
    constexpr int P = 8 / MX;                   /* blocks per C tile */
    constexpr int ROWS = 16 * RW;               /* rows per warp */
    constexpr int STAGE = ROWS * TBT_ROW;       /* bytes per warp and stage */
    constexpr int OFF_QH = ROWS * TBT_QS_STRIDE, OFF_SC = OFF_QH + ROWS * TBT_QH_STRIDE;
    constexpr int ROWS_WG = TB_WAVES / J * ROWS; /* rows per tile (W::ROWS_WG at J = 1) */
    (void)PG;

    W w;
    tb_setup<W, KB>(w, qs, qh, sc, x, y, workspace, counters, m, n, k, tiles, grid_x);
    const int lane = w.tid & 31, warp = w.tid >> 5, g = lane >> 2, t = lane & 3;
    const int rgrp = warp / J, phase = warp % J, c_first = w.c0 + phase * TBT_U; /* row group, first stage */
    tb_u8 *ring = TB_DSMEM + warp * S * STAGE;
    tb_u32x4 *xq = (tb_u32x4 *)(TB_DSMEM + 8 * S * STAGE);
    float *xm = (float *)(TB_DSMEM + 8 * S * STAGE + m * w.nxb * 32);
    const tb_u32 *xw = (const tb_u32 *)xq;
    const tb_u8 *sc_end = sc + (tb_size)n * w.sc_row;

    float acc[RW][4];
#pragma unroll
    for (int r = 0; r < RW; ++r) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = 0.0f;
    int tile = TB_BID_X;
    if (tile >= tiles) return; /* uniform over the workgroup */

    /* copy stage (tile itile, chunks ibase .. ibase + 7 of the row) into ring slot st; rows past n read row n - 1.
     * Lane l copies chunk l & 7 of rows 16 rr + 4 j + (l >> 3) (j < 4): each copy instruction of a warp reads 4
     * whole 128-byte rows (H200, 2026-12-01 call 10: with 16 rows x 32 bytes per instruction instead, every Q4_0
     * RG16 kernel ran at ~2.6 TB/s, 1.05-1.37x slower, whatever its instruction count). Each kind of bytes keeps
     * ONE pointer per lane (its first piece), set once per tile (aim) and advanced with the stage; its other
     * pieces are whole rows below: in a row tile inside n by a constant times the row's bytes (one IMAD.WIDE),
     * in the last one by row deltas clamped at row n - 1 (pointers per piece took 16 registers at Q6_K RW2 and
     * spilled under NVRTC 13.0) */
    int itile = tile, ibase = c_first;
    const tb_u8 *gq;                /* the lane's payload bytes of stage ibase, row (lane >> 3), chunk lane & 7 */
    int rq = 0;                     /* that row (unclamped) */
    bool t_fast = false; /* warp-uniform: the warp's rows of this tile are below n, its scale pieces inside sc */
    tb_u8 *dq = ring + (lane >> 3) * TBT_QS_STRIDE + 16 * (lane & 7); /* its ring bytes (slot 0) */
    constexpr int SCJ = (ROWS * TBT_SCP + 31) / 32;        /* scale pieces per lane */
    constexpr int SCSTAGE = TBT_U / TB_CHUNKS_PER_BLOCK * TB_SC_BYTES; /* scale bytes of a row per stage */
    /* the lane's scale piece 0 of stage ibase: its row's window start, or (whole 16-byte scale steps per stage:
     * the misalignment stays) the 16-aligned address at or below it; piece j is dsr[j] rows below */
    const tb_u8 *gs;
    int dsr[SCJ];
#if TBT_QHP
    constexpr int QHJ = ROWS * TBT_QHP / 32;
    const tb_u8 *gh;                /* the lane's high-bit piece 0 of stage ibase; piece j dhr[j] rows below */
    int dhr[QHJ];
#endif
    /* rows from row `from` to row `from + add`, both clamped at n - 1 */
    auto rows_below = [&](int from, int add) {
        return (from + add < n ? from + add : n - 1) - (from < n ? from : n - 1);
    };
    auto aim = [&]() {
        const int row0 = itile * ROWS_WG + rgrp * ROWS;
        rq = row0 + (lane >> 3);
        gq = qs + (tb_size)(rq < n ? rq : n - 1) * w.qs_row + 16 * (tb_size)(ibase + (lane & 7));

        const int rs = row0 + lane / TBT_SCP;
        const tb_u8 *a = sc + (tb_size)(rs < n ? rs : n - 1) * w.sc_row + (tb_size)(ibase / TB_CHUNKS_PER_BLOCK * TB_SC_BYTES);
        gs = SCSTAGE % 16 == 0 ? (const tb_u8 *)((unsigned long long)a & ~15ull) : a;
#pragma unroll
        for (int j = 0; j < SCJ; ++j) dsr[j] = rows_below(rs, 32 * j / TBT_SCP);
        /* a piece ends before its window's start + 16 TBT_SCP: inside sc while 16 TBT_SCP bytes of rows follow */
        const int rowmax = row0 + ROWS - 1 < n - 1 ? row0 + ROWS - 1 : n - 1;
        t_fast = row0 + ROWS <= n && (long long)(n - 1 - rowmax) * (long long)w.sc_row >= 16 * TBT_SCP;
#if TBT_QHP
        const int rh = row0 + lane / TBT_QHP;
        gh = qh + (tb_size)(rh < n ? rh : n - 1) * w.qh_row + (tb_size)(ibase / TB_CHUNKS_PER_BLOCK) * TB_QH_BYTES +
             16 * (lane % TBT_QHP);
#pragma unroll
        for (int j = 0; j < QHJ; ++j) dhr[j] = rows_below(rh, 32 * j / TBT_QHP);
#endif
    };
    /* piece pointers: base + delta rows (delta >= 0, delta x row bytes < 2^32) */
    auto below = [](const tb_u8 *base, int delta, tb_size row_bytes) {
        return base + (tb_size)(unsigned)delta * (tb_size)(unsigned)row_bytes;
    };
    if (itile < tiles) aim();
    auto issue = [&](int st) {
        if (itile < tiles) {
            tb_u8 *dst = ring + st * STAGE;
#if TBT_QHP
#pragma unroll
            for (int j = 0; j < QHJ; ++j) {
                const int i = lane + 32 * j, r = i / TBT_QHP, pc = i % TBT_QHP;
                tb_cp_async16(tb_smem_addr(dst + OFF_QH + r * TBT_QH_STRIDE + 16 * pc), j == 0 ? gh : below(gh, dhr[j], w.qh_row));
            }
            gh += 16 * TBT_QHP * J;
#endif
            /* raw scale bytes: 16-byte pieces from the 16-aligned address at or below the row's window, the bytes
             * past the end of sc zero-filled (they are never used) */
            const tb_u8 *sa = SCSTAGE % 16 == 0 ? gs : (const tb_u8 *)((unsigned long long)gs & ~15ull);
            if (t_fast) { /* a branch of its own (if-converted, the last tile's path cost ~20 issue slots a stage) */
                /* row 4 i + (lane >> 3): RW1 one IMAD.WIDE per copy; RW2 a pointer stepped by 4 rows (with 7
                 * addresses live NVRTC 13.0 spilled Q5_0 MX8/KB1/RW2/U8/RG16/PG2/PP2) */
                const tb_u8 *from = gq;
#pragma unroll
                for (int i = 0; i < 4 * RW; ++i) {
                    tb_cp_async16(tb_smem_addr(dq + st * STAGE + 4 * i * TBT_QS_STRIDE),
                                  RW == 1 ? (i == 0 ? gq : below(gq, 4 * i, w.qs_row)) : from);
                    from += 4 * w.qs_row;
                }
#pragma unroll
                for (int j = 0; j < SCJ; ++j) {
                    const int i = lane + 32 * j, r = i / TBT_SCP, pc = i % TBT_SCP;
                    if (i < ROWS * TBT_SCP)
                        tb_cp_async16(tb_smem_addr(dst + OFF_SC + r * TBT_SC_STRIDE + 16 * pc),
                                      (j == 0 ? sa : below(sa, dsr[j], w.sc_row)) + 16 * pc);
                }
            } else { /* the last row tile: rows past n read row n - 1, scale bytes past sc zero-filled */
#pragma unroll
                for (int i = 0; i < 4 * RW; ++i)
                    tb_cp_async16(tb_smem_addr(dq + st * STAGE + 4 * i * TBT_QS_STRIDE),
                                  below(gq, rows_below(rq, 4 * i), w.qs_row));
#pragma unroll
                for (int j = 0; j < SCJ; ++j) {
                    const int i = lane + 32 * j, r = i / TBT_SCP, pc = i % TBT_SCP;
                    if (i < ROWS * TBT_SCP) {
                        const tb_u8 *src = below(sa, dsr[j], w.sc_row) + 16 * pc;
                        const long long left = sc_end - src;
                        const int valid = left >= 16 ? 16 : (left > 0 ? (int)left : 0);
                        tb_cp_async16z(tb_smem_addr(dst + OFF_SC + r * TBT_SC_STRIDE + 16 * pc), valid ? src : sc, valid);
                    }
                }
            }
            gq += 16 * TBT_U * J;
            gs += SCSTAGE * J;
        }
        tb_cp_commit(); /* empty groups past the end keep the wait count uniform */
        ibase += TBT_U * J;
        if (ibase >= w.c1) {
            itile += grid_x, ibase = c_first;
            if (itile < tiles) aim();
        }
    };

    /* the stage in slot st (landed) of chunks base .. base + 7: unpack, mma, scale */
    /* per row tile of the compute side: the low bits of the scale rows g, g + 8 (+ 16 r) of this lane (the ring
     * holds each row's scale window from the 16-aligned address at or below it); with whole 16-byte scale steps
     * per stage (Q4_0, Q4_1, Q5_*, IQ4_NL) the misalignment is the tile's, else it moves with the stage */
    unsigned sdl[RW][2];
    int soff[RW][2]; /* non-K-quants: ring offset of the lane's scale of row 16 r + 8 h + g, block 2t / MX of a C tile */
    (void)P;
    const bool x_on = g % MX < m;
    const int x_tok = x_on ? g % MX : m - 1, s_tok = (2 * t) % MX < m ? (2 * t) % MX : m - 1;
    const bool s_on1 = (2 * t) % MX + 1 < m;
#if defined(TB_FMT_Q4_0)
    /* 0x80808080 from a per-lane zero ptxas cannot fold (as tb_iq4_tables): kept in a register */
    const tb_u32 q4_sign = 0x80808080u ^ (((tb_u32)k >> 31) & (tb_u32)w.tid);
#endif
    auto aim_c = [&](int ctile) {
        const int row0 = ctile * ROWS_WG + rgrp * ROWS;
#pragma unroll
        for (int r = 0; r < RW; ++r)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int rr = row0 + 16 * r + 8 * h + g, rowg = rr < n ? rr : n - 1;
                const unsigned lo = (unsigned)(unsigned long long)(sc + (tb_size)rowg * w.sc_row);
                sdl[r][h] = SCSTAGE % 16 == 0 ? (lo + (unsigned)(w.c0 / TB_CHUNKS_PER_BLOCK * TB_SC_BYTES)) & 15u : lo;
                soff[r][h] = OFF_SC + (16 * r + 8 * h + g) * TBT_SC_STRIDE + (2 * t) / MX * TBP_SCB +
                             (SCSTAGE % 16 == 0 ? (int)sdl[r][h] : 0);
            }
    };
    auto compute = [&](int st, int base) {
        const tb_u8 *src = ring + st * STAGE;
        const int fb = base / TB_CHUNKS_PER_BLOCK;
        const int b32 = fb * (TB_BLOCK_WEIGHTS / 32); /* first 32-block of the stage in the row */
#pragma unroll
        for (int r = 0; r < RW; ++r) {
            /* payload words: q[h][c] = word t of chunk c of row 16 r + 8 h + g */
            tb_u32 q[2][TBT_U];
#pragma unroll
            for (int pc = 0; pc < TBT_U; pc += 2) {
                const int mi = lane >> 3;
                tb_ldsm4(tb_smem_addr(src + (16 * r + 8 * (mi & 1) + (lane & 7)) * TBT_QS_STRIDE + 16 * (pc + (mi >> 1))),
                         q[0][pc], q[1][pc], q[0][pc + 1], q[1][pc + 1]);
            }
#if defined(TB_FMT_Q6_K)
            tb_u32 hq[2][TBT_QHP];
#pragma unroll
            for (int pc = 0; pc < TBT_QHP; pc += 2) {
                const int mi = lane >> 3;
                tb_ldsm4(tb_smem_addr(src + OFF_QH + (16 * r + 8 * (mi & 1) + (lane & 7)) * TBT_QH_STRIDE +
                                      16 * (pc + (mi >> 1))),
                         hq[0][pc], hq[1][pc], hq[0][pc + 1], hq[1][pc + 1]);
            }
#endif
#if defined(TB_FMT_IQ4_XS)
            /* each row's super-block scales once per stage (not per C tile): d, -32 d, and the 6-bit sub-block scales
             * of the lane's blocks as bytes (tbt_iq4xs_ls): MX4 block 2 i + t / 2 of C tile i in byte i; MX2 block
             * 4 i + t in byte 2 i; MX8 block i in byte i / 2 of word i % 2 */
            float iq_d[2], iq_m[2];
            tb_u32 iq_ls[2][MX == 8 ? 2 : 1];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int delta = (int)((sdl[r][h] + (unsigned)(fb * TB_SC_BYTES)) & 15u);
                tb_u32 sw[2]; /* d | scales_h << 16, scales_l (8 nibbles) */
                tb_ld_u32x2(src + OFF_SC + (16 * r + 8 * h + g) * TBT_SC_STRIDE + delta, sw);
                iq_d[h] = tb_half(sw[0] & 0xFFFFu);
                iq_m[h] = -32.0f * iq_d[h];
                if constexpr (MX == 4) {
                    iq_ls[h][0] = tbt_iq4xs_ls(sw, t >> 1);
                } else if constexpr (MX == 2) {
                    iq_ls[h][0] = tbt_iq4xs_ls(sw, t & 1) >> (8 * (t >> 1));
                } else {
                    iq_ls[h][0] = tbt_iq4xs_ls(sw, 0);
                    iq_ls[h][MX == 8 ? 1 : 0] = tbt_iq4xs_ls(sw, 1);
                }
            }
#endif
            tb_i32 d[4], dh[4];
            tb_u32 bx0 = 0, bx1 = 0;
            /* this lane's x words: row of M g % MX of block kb + g / MX (zero past m), one C tile after another;
             * its x scales: rows of M (2t) % MX + e of block kb + 2t / MX ([row of M][block]: immediates) */
            const tb_u32 *xp = xw + ((b32 - w.xb0 + g / MX) * m + x_tok) * 8 + 2 * t;
            const float *xmp = xm + 2 * (s_tok * w.nxb + b32 - w.xb0 + (2 * t) / MX);
#pragma unroll
            for (int kb = 0; kb < TBT_NB; ++kb) {
                const int jc = kb % P, grp = kb / TBP_G, jg = kb % TBP_G;
                if (jc == 0) {
                    TBT_MAGIC_INIT(d);
                    TBT_MAGIC_INIT(dh);
                    const tb_u32x2 v = *(const tb_u32x2 *)xp;
                    bx0 = v.x, bx1 = v.y;
                    xp += P * 8 * m;
                }
                tb_u32 a[4];
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    tb_u32 hw[2] = {0u, 0u};
#if defined(TB_FMT_Q5_0) || defined(TB_FMT_Q5_1)
                    hw[0] = *(const tb_u32 *)(src + OFF_QH + (16 * r + 8 * h + g) * TBT_QH_STRIDE + 4 * kb);
#elif defined(TB_FMT_Q6_K)
                    hw[0] = hq[h][2 * grp], hw[1] = hq[h][2 * grp + 1];
#endif
                    tb_u32 lo, hi;
#if TB_X_IL
                    (void)jg;
                    tbt_iq4_lookup(q[h][grp], w.iq4t0, w.iq4t2, w.iq4k3210, &lo, &hi);
#elif defined(TB_FMT_Q4_0)
                    /* tbp_unpack's 16 (q - 8) operands by one LOP3 per operand word (+ the shift of the low
                     * nibbles) instead of two: the mask an immediate, the sign flip in a register */
                    (void)jg;
                    lo = tbt_andf0_xor(q[h][grp] << 4, q4_sign);
                    hi = tbt_andf0_xor(q[h][grp], q4_sign);
#else
                    tbp_unpack(&q[h][grp * TBP_QS_CHUNKS], hw, jg, t, lo, hi);
#endif
                    a[h] = lo, a[2 + h] = hi;
                }
                const bool mine = g / MX == jc && x_on; /* columns jc * MX .. : x of this block (rows of M < m) */
                const tb_u32 b0 = mine ? bx0 : 0u, b1 = mine ? bx1 : 0u;
#if TBP_G16
                tbp_mma16_acc(d, a[0], a[1], b0);
                tbp_mma16_acc(dh, a[2], a[3], b1);
#else
                tbp_mma32_acc(d, a, b0, b1);
#endif
                if (jc == P - 1) {
                    /* elements: rows g, g + 8 (e >> 1) x columns 2t, 2t + 1: rows of M (2t) % MX + (e & 1) of
                     * block kb0 + 2t / MX */
                    const int ke = kb - (P - 1) + (2 * t) / MX;
                    /* a column of an absent row of M (its dots are 0: B's column is zero) takes row m - 1's scales */
                    float dx[2], sx[2];
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const tb_f2 v = *(const tb_f2 *)(xmp + (e && s_on1) * 2 * w.nxb + 2 * (kb - (P - 1)));
                        dx[e] = v.x, sx[e] = v.y;
                    }
                    (void)sx;
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int rr = 16 * r + 8 * h + g;
                        const tb_u8 *raw = src + OFF_SC + rr * TBT_SC_STRIDE;
                        (void)raw;
                        /* the misalignment of the row's scale window, as the copy saw it (set per tile: aim_c) */
                        const int delta = SCSTAGE % 16 == 0 ? (int)sdl[r][h] : (int)((sdl[r][h] + (unsigned)(fb * TB_SC_BYTES)) & 15u);
                        float o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#if defined(TB_FMT_Q6_K)
                        tbp_decode_scale(raw, ke, b32 + ke, delta, o);
#elif defined(TB_FMT_IQ4_XS)
                        (void)delta;
                        /* the C tile's byte of the lane's scale word(s): MX4 kb / 2, MX2 2 (kb / 4), MX8 kb / 2 of word kb % 2 */
                        const tb_u32 lsw = iq_ls[h][MX == 8 ? kb % 2 : 0] >> (8 * (MX == 2 ? 2 * (kb / 4) : kb / 2));
                        o[0] = fmaf((float)(lsw & 0xFFu), iq_d[h], iq_m[h]); /* d (ls - 32) */
                        o[1] = -TBP_MAGIC * o[0];
#elif TBP_KQUANT
                        tbp_decode_scale(raw + delta, ke, b32 + ke, 0, o);
#else
                        /* x's scale has the operand factor; the lane's block (2t / MX) is in its offset */
                        (void)delta;
                        const tb_u8 *sp = src + (SCSTAGE % 16 == 0 ? soff[r][h] : soff[r][h] + delta) + (kb - (P - 1)) * TBP_SCB;
                        o[0] = tb_half(tb_ld_u16(sp));
                        o[1] = -TBP_MAGIC * o[0];
#if TBP_ASYM
                        o[2] = tb_half(tb_ld_u16(sp + 2));
#endif
#endif
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            const int el = 2 * h + e;
                            float tv = fmaf(tb_bits_float(d[el]), o[0], o[1]);
#if TBP_G16
                            tv += fmaf(tb_bits_float(dh[el]), o[2], o[3]);
#endif
                            acc[r][el] = fmaf(tv, dx[e], acc[r][el]);
#if TBP_ASYM
                            acc[r][el] = fmaf(o[2], sx[e], acc[r][el]);
#endif
                        }
                    }
                }
            }
            (void)dh;
        }
    };

    /* J > 1: the partial sums of phases 1 .. J - 1, [writer][r][el][lane], after x's scales (16-aligned) */
    float *red = (float *)(((unsigned long long)(xm + 2 * m * w.nxb) + 15ull) & ~15ull);
    const int writer = rgrp * (J - 1) + phase - 1; /* phase 0 keeps its sums in registers */
    (void)red, (void)writer; /* J = 1: unused */
    /* the row tile is done: add the columns of one row of M (lanes t ^ 1, t ^ 2 hold its other blocks), write */
    auto finish = [&](int ftile) {
        const int row0 = ftile * ROWS_WG + rgrp * ROWS;
        if constexpr (J > 1) {
#pragma unroll
            for (int r = 0; r < RW; ++r)
#pragma unroll
                for (int el = 0; el < 4; ++el)
                    if (phase > 0) red[((writer * RW + r) * 4 + el) * 32 + lane] = acc[r][el];
            tb_sync();
            if (phase == 0) { /* the group's phases in order: the same sum whatever the timing */
#pragma unroll
                for (int r = 0; r < RW; ++r)
#pragma unroll
                    for (int el = 0; el < 4; ++el)
                        for (int j = 0; j < J - 1; ++j) acc[r][el] += red[(((writer + 1 + j) * RW + r) * 4 + el) * 32 + lane];
            }
            tb_sync(); /* red is free for the next tile */
        }
#pragma unroll
        for (int r = 0; r < RW; ++r) {
#pragma unroll
            for (int el = 0; el < 4; ++el) {
                float v = acc[r][el];
                if (MX <= 2) v += tb_shfl_xor(v, 1);
                if (MX <= 4) v += tb_shfl_xor(v, 2);
                const int tok = 2 * t + (el & 1), row = row0 + 16 * r + g + 8 * (el >> 1);
                if (phase == 0 && 2 * t < MX && tok < m && row < n) {
                    if (KB == 1)
                        y[(tb_size)tok * (tb_size)n + (tb_size)row] = v;
                    else
                        workspace[((tb_size)w.slice * (tb_size)m + (tb_size)tok) * (tb_size)n + (tb_size)row] = v;
                }
                acc[r][el] = 0.0f;
            }
        }
        if (KB > 1) tb_splitk_tail<KB, W::ROWS_WG>(ftile, w.tid, m, n, y, workspace, counters);
    };

    /* the first S - 1 stages in flight before x is staged, then one stream of (tile, stage) per warp */
#pragma unroll
    for (int s = 0; s < S - 1; ++s) issue(s);
    if constexpr (XQ) {
        /* x quantised once per launch (tb_decode_prep_rg16): [block][row of M][32 bytes], then each row of M's
         * (xs, xs * xsum) pairs, as xq and xm lie here; the prelaunch grid's writes waited for first (overlap) */
        tb_griddep_wait();
        tb_copy_x_image(workspace, (tb_u8 *)xq, m, w.nxb, w.tid);
        tb_cp_wait<0>();
    } else {
        tb_stage_x<TB_XP(MX), true>(x, m, k, w.xb0, w.nxb, w.c0, w.nchunks, xq, xm);
    }
    tb_sync();
    aim_c(tile);
    int base = c_first, slot = 0;
    for (;;) {
        tb_syncwarp(); /* every lane is done with the slot the next issue refills */
        issue(slot == 0 ? S - 1 : slot - 1);
        tb_cp_wait<S - 1>();
        tb_syncwarp(); /* every lane's copies of this stage have landed */
        compute(slot, base);
        slot = slot == S - 1 ? 0 : slot + 1;
        base += TBT_U * J;
        if (base >= w.c1) {
            finish(tile);
            tile += grid_x, base = c_first;
            if (tile >= tiles) break;
            aim_c(tile);
        }
    }
    tb_cp_wait<0>();
}

/* The [prelaunch] kernels (tunebase-kernel.toml): x quantised once per launch (issue 13: "not per block") into the
 * workspace as the variant's shared-memory image of the whole K: tb_stage_x's rule and bits, one thread per float4
 * of x. RG16 (pp 13 / 14 / 15, tb_decode_prep_rg16): [K / 32][m][32 bytes] then [m][K / 32] (xs, xs * xsum); the
 * stream kernel (pp 16 / 17, tb_decode_prep_rg1 / _rg2): [m][TB_RUNS][K chunks] 16-byte slots then the same pairs.
 * The variant copies its image by cp.async (a third of fp32 x's bytes, no arithmetic) where pp 10 / 11 / 2 / 5 / 9
 * quantise x in every workgroup (the H200, 2026-12-02 call f7: 7.6 us for the first row of M, 1.7-2.6 per further
 * row, at the LM head) */
template <bool TC>
__device__ TB_FORCEINLINE void tb_decode_prep(TB_DECODE_PARAMS) {
    (void)qs, (void)qh, (void)sc, (void)y, (void)counters, (void)n, (void)tiles, (void)grid_x;
    tb_griddep_launch(); /* the variant may start now: it waits for this grid before it reads the workspace */
    const int nb = k / 32, total = 8 * nb * m;
    const int nchunks = k / TB_BLOCK_WEIGHTS * TB_CHUNKS_PER_BLOCK;
    const int t = (int)TB_BID_X * TB_THREADS + (int)TB_TID;
    const bool on = t < total;
    tb_f4 v;
    v.x = v.y = v.z = v.w = 0.0f;
    int i = 0, b = 0;
    if (on) {
        i = (t >> 3) / nb, b = (t >> 3) - i * nb;
        v = *(const tb_f4 *)(x + (tb_size)i * (tb_size)k + (tb_size)b * 32 + 4 * (t & 7));
    }
    tb_u8 *ws = (tb_u8 *)workspace;
    tb_quant_block<TC>(v, on, t & 7, i, b, m, 0, nb, 0, nchunks, (tb_u32x4 *)ws, (float *)(ws + (tb_size)m * nb * 32));
}
extern "C" __global__ TB_LAUNCH_BOUNDS(TB_THREADS, 1) void tb_decode_prep_rg16(TB_DECODE_PARAMS) {
    tb_decode_prep<true>(qs, qh, sc, x, y, workspace, counters, m, n, k, tiles, grid_x);
}
extern "C" __global__ TB_LAUNCH_BOUNDS(TB_THREADS, 1) void tb_decode_prep_rg1(TB_DECODE_PARAMS) {
    tb_decode_prep<false>(qs, qh, sc, x, y, workspace, counters, m, n, k, tiles, grid_x);
}
extern "C" __global__ TB_LAUNCH_BOUNDS(TB_THREADS, 1) void tb_decode_prep_rg2(TB_DECODE_PARAMS) {
    tb_decode_prep<false>(qs, qh, sc, x, y, workspace, counters, m, n, k, tiles, grid_x);
}
#endif

/* PP 0 / 1: registers (every backend); PP >= 2: the cp.async ring (CUDA; the manifest keeps it off AMD) ; RG16: int8 tensor cores (CUDA) */
template <int RG, int RW, int U, int KB, int PG, int MX, int PP>
__device__ TB_FORCEINLINE void tb_decode_pick(TB_DECODE_PARAMS) {
#if defined(TB_DSMEM)
    if constexpr (RG == 16) {
        static_assert(U == TBT_U && (PP == 2 || PP == 3 || PP == 4 || (PP >= 10 && PP <= 15)),
                      "RG16: 8 chunks per stage, a ring of PP stages (PP 10 / 11 / 12: 2 / 2 / 3 stages, 2 / 4 / 2 K "
                      "phases; 13 / 14 / 15: 10 / 11 / 2 with x quantised once per launch)");
        if constexpr (PP >= 13)
            tb_decode_tc<RW, KB, PG, MX, 2, PP == 13 ? 2 : PP == 14 ? 4 : 1, true>(qs, qh, sc, x, y, workspace, counters, m, n, k, tiles, grid_x);
        else if constexpr (PP >= 10)
            tb_decode_tc<RW, KB, PG, MX, PP == 12 ? 3 : 2, PP == 11 ? 4 : 2>(qs, qh, sc, x, y, workspace, counters, m, n, k, tiles, grid_x);
        else
            tb_decode_tc<RW, KB, PG, MX, PP>(qs, qh, sc, x, y, workspace, counters, m, n, k, tiles, grid_x);
        return;
    } else if constexpr (PP == 7 || PP == 8) {
        static_assert(RG == 1 && KB == 1, "PP 7 / 8: full-wave rows, one K slice");
        tb_decode_ring_iw<RW, U, MX, PP - 5>(qs, qh, sc, x, y, workspace, counters, m, n, k, tiles, grid_x);
        return;
    } else if constexpr (PP == 5 || PP == 9 || (PP >= 16 && PP <= 19)) {
        tb_decode_stream<RG, RW, U, MX, PP == 9 || PP == 17 || PP == 19, PP >= 16, PP >= 18>(qs, qh, sc, x, y, workspace, counters, m, n, k, tiles, grid_x);
        return;
    } else if constexpr (PP == 6) {
        static_assert(RG == 1 && RW == 1 && KB == 1 && MX == 1, "the flat kernel: M = 1, full-wave rows, one chunk a stage");
        tb_decode_flat<U>(qs, qh, sc, x, y, workspace, counters, m, n, k, tiles, grid_x);
        return;
    } else if constexpr (PP >= 2) {
        tb_decode_ring<RG, RW, U, KB, PG, MX, PP>(qs, qh, sc, x, y, workspace, counters, m, n, k, tiles, grid_x);
        return;
    } else
#else
    static_assert(PP < 2 && RG != 16, "PP >= 2 (cp.async ring) and RG16 (tensor cores) are CUDA only");
#endif
    {
        tb_decode_body<RG, RW, U, KB, PG, MX, PP>(qs, qh, sc, x, y, workspace, counters, m, n, k, tiles, grid_x);
    }
}

#define TB_DECODE_VARIANT(MX, KB, RW, U, RG, PG, PP)                                                   \
    extern "C" __global__ TB_LAUNCH_BOUNDS(TB_THREADS, TB_MINB_VG(RG, RW, U, KB, MX, PG, PP)) void     \
        tb_decode_mx##MX##_kb##KB##_rw##RW##_u##U##_rg##RG##_pg##PG##_pp##PP(TB_DECODE_PARAMS) {     \
        tb_decode_pick<RG, RW, U, KB, PG, MX, PP>(qs, qh, sc, x, y, workspace, counters, m, n, k, tiles, grid_x); \
    }

/* -DTB_DECODE_VARIANTS='TB_DECODE_VARIANT(1,1,1,4,1,0,1) ...' builds a subset; default: the whole GPU space
 * (tests/packages/test_builtin_packages.py checks that these lists equal the manifest's rocm / cuda spaces) */
#ifndef TB_DECODE_VARIANTS
#define TB_DECODE_DEFAULT_LIST 1
#define TB_DECODE_VARIANTS \
    TB_DECODE_VARIANT(1, 1, 1, 2, 1, 0, 1) TB_DECODE_VARIANT(1, 1, 1, 2, 1, 2, 1) TB_DECODE_VARIANT(1, 1, 1, 2, 1, 3, 1) \
    TB_DECODE_VARIANT(1, 1, 1, 2, 1, 4, 1) TB_DECODE_VARIANT(1, 1, 1, 2, 2, 0, 1) TB_DECODE_VARIANT(1, 1, 1, 4, 1, 0, 0) \
    TB_DECODE_VARIANT(1, 1, 1, 4, 1, 0, 1) TB_DECODE_VARIANT(1, 1, 1, 4, 1, 2, 0) TB_DECODE_VARIANT(1, 1, 1, 4, 1, 2, 1) \
    TB_DECODE_VARIANT(1, 1, 1, 4, 1, 3, 0) TB_DECODE_VARIANT(1, 1, 1, 4, 1, 3, 1) TB_DECODE_VARIANT(1, 1, 1, 4, 1, 4, 0) \
    TB_DECODE_VARIANT(1, 1, 1, 4, 1, 4, 1) TB_DECODE_VARIANT(1, 1, 1, 4, 2, 0, 0) TB_DECODE_VARIANT(1, 1, 1, 4, 2, 0, 1) \
    TB_DECODE_VARIANT(1, 1, 1, 8, 1, 0, 0) TB_DECODE_VARIANT(1, 1, 1, 8, 1, 2, 0) TB_DECODE_VARIANT(1, 1, 1, 8, 1, 3, 0) \
    TB_DECODE_VARIANT(1, 1, 1, 8, 1, 4, 0) TB_DECODE_VARIANT(1, 1, 1, 8, 2, 0, 0) TB_DECODE_VARIANT(1, 1, 2, 2, 1, 0, 1) \
    TB_DECODE_VARIANT(1, 1, 2, 2, 1, 2, 1) TB_DECODE_VARIANT(1, 1, 2, 2, 1, 3, 1) TB_DECODE_VARIANT(1, 1, 2, 2, 2, 0, 1) \
    TB_DECODE_VARIANT(1, 1, 2, 4, 1, 0, 0) TB_DECODE_VARIANT(1, 1, 2, 4, 1, 2, 0) TB_DECODE_VARIANT(1, 1, 2, 4, 1, 3, 0) \
    TB_DECODE_VARIANT(1, 1, 2, 4, 2, 0, 0) TB_DECODE_VARIANT(1, 4, 1, 2, 1, 0, 1) TB_DECODE_VARIANT(1, 4, 1, 4, 1, 0, 1) \
    TB_DECODE_VARIANT(1, 4, 2, 2, 1, 0, 1) TB_DECODE_VARIANT(2, 1, 1, 2, 1, 2, 1) TB_DECODE_VARIANT(2, 1, 1, 2, 1, 3, 1) \
    TB_DECODE_VARIANT(2, 1, 1, 4, 1, 2, 0) TB_DECODE_VARIANT(2, 1, 1, 4, 1, 2, 1) TB_DECODE_VARIANT(2, 1, 1, 4, 1, 3, 0) \
    TB_DECODE_VARIANT(2, 1, 1, 4, 1, 3, 1) TB_DECODE_VARIANT(2, 1, 2, 2, 1, 2, 1) TB_DECODE_VARIANT(2, 1, 2, 2, 1, 3, 1) \
    TB_DECODE_VARIANT(2, 1, 2, 4, 1, 2, 0) TB_DECODE_VARIANT(2, 1, 2, 4, 1, 3, 0) TB_DECODE_VARIANT(4, 1, 1, 2, 1, 0, 1) \
    TB_DECODE_VARIANT(4, 1, 1, 2, 1, 2, 1) TB_DECODE_VARIANT(4, 1, 1, 2, 1, 3, 1) TB_DECODE_VARIANT(4, 1, 1, 2, 2, 0, 1) \
    TB_DECODE_VARIANT(4, 1, 1, 4, 1, 0, 0) TB_DECODE_VARIANT(4, 1, 1, 4, 1, 0, 1) TB_DECODE_VARIANT(4, 1, 1, 4, 1, 2, 0) \
    TB_DECODE_VARIANT(4, 1, 1, 4, 1, 2, 1) TB_DECODE_VARIANT(4, 1, 1, 4, 1, 3, 0) TB_DECODE_VARIANT(4, 1, 1, 4, 1, 3, 1) \
    TB_DECODE_VARIANT(4, 1, 1, 4, 2, 0, 0) TB_DECODE_VARIANT(4, 1, 1, 4, 2, 0, 1) TB_DECODE_VARIANT(4, 1, 2, 2, 1, 0, 0) \
    TB_DECODE_VARIANT(4, 1, 2, 2, 1, 0, 1) TB_DECODE_VARIANT(4, 1, 2, 2, 1, 2, 0) TB_DECODE_VARIANT(4, 1, 2, 2, 1, 2, 1) \
    TB_DECODE_VARIANT(4, 1, 2, 2, 1, 3, 0) TB_DECODE_VARIANT(4, 1, 2, 2, 1, 3, 1) TB_DECODE_VARIANT(4, 1, 2, 2, 2, 0, 0) \
    TB_DECODE_VARIANT(4, 1, 2, 2, 2, 0, 1) TB_DECODE_VARIANT(4, 1, 2, 4, 1, 0, 0) TB_DECODE_VARIANT(4, 1, 2, 4, 1, 2, 0) \
    TB_DECODE_VARIANT(4, 1, 2, 4, 1, 3, 0) TB_DECODE_VARIANT(4, 1, 2, 4, 2, 0, 0) TB_DECODE_VARIANT(4, 4, 1, 2, 1, 0, 1) \
    TB_DECODE_VARIANT(4, 4, 1, 4, 1, 0, 1) TB_DECODE_VARIANT(4, 4, 2, 2, 1, 0, 1)
#endif
/* the cp.async ring variants (PP 2, 3: the CUDA space only) join a plain CUDA build's default list */
#if defined(TB_DECODE_DEFAULT_LIST) && defined(TB_DSMEM)
/* the interleaved ring (PP 7 / 8: the CUDA space only) */
#define TB_DECODE_IW_VARIANTS \
    TB_DECODE_VARIANT(2, 1, 1, 5, 1, 2, 8) TB_DECODE_VARIANT(2, 1, 1, 5, 1, 3, 7) TB_DECODE_VARIANT(2, 1, 2, 4, 1, 2, 7) \
    TB_DECODE_VARIANT(2, 1, 2, 5, 1, 2, 7) TB_DECODE_VARIANT(4, 1, 1, 5, 1, 3, 7) TB_DECODE_VARIANT(4, 1, 2, 2, 1, 2, 8) \
    TB_DECODE_VARIANT(4, 1, 2, 5, 1, 2, 7)
#define TB_DECODE_RING_VARIANTS \
    TB_DECODE_VARIANT(1, 1, 1, 4, 1, 0, 2) TB_DECODE_VARIANT(1, 1, 1, 4, 1, 0, 3) TB_DECODE_VARIANT(1, 1, 1, 4, 1, 3, 2) \
    TB_DECODE_VARIANT(1, 1, 1, 4, 1, 3, 3) TB_DECODE_VARIANT(1, 1, 1, 4, 1, 4, 2) TB_DECODE_VARIANT(1, 1, 1, 4, 1, 4, 3) \
    TB_DECODE_VARIANT(1, 1, 2, 2, 1, 0, 2) TB_DECODE_VARIANT(1, 1, 2, 2, 1, 0, 3) TB_DECODE_VARIANT(1, 1, 2, 2, 1, 3, 2) \
    TB_DECODE_VARIANT(1, 1, 2, 2, 1, 3, 3) TB_DECODE_VARIANT(1, 1, 2, 4, 1, 0, 2) TB_DECODE_VARIANT(1, 1, 2, 4, 1, 3, 2) \
    TB_DECODE_VARIANT(2, 1, 2, 2, 1, 2, 2) TB_DECODE_VARIANT(2, 1, 2, 2, 1, 2, 3) TB_DECODE_VARIANT(2, 1, 2, 2, 1, 3, 2) \
    TB_DECODE_VARIANT(2, 1, 2, 2, 1, 3, 3) TB_DECODE_VARIANT(2, 1, 2, 2, 8, 3, 2) TB_DECODE_VARIANT(2, 1, 2, 4, 1, 2, 2) \
    TB_DECODE_VARIANT(2, 1, 2, 4, 1, 3, 2) TB_DECODE_VARIANT(4, 1, 1, 4, 1, 0, 2) TB_DECODE_VARIANT(4, 1, 1, 4, 1, 2, 2) \
    TB_DECODE_VARIANT(4, 1, 1, 4, 1, 3, 2) TB_DECODE_VARIANT(4, 1, 1, 4, 8, 0, 2) TB_DECODE_VARIANT(4, 1, 1, 4, 8, 3, 2) \
    TB_DECODE_VARIANT(4, 1, 2, 2, 1, 0, 2) TB_DECODE_VARIANT(4, 1, 2, 2, 1, 0, 3) TB_DECODE_VARIANT(4, 1, 2, 2, 1, 2, 2) \
    TB_DECODE_VARIANT(4, 1, 2, 2, 1, 2, 3) TB_DECODE_VARIANT(4, 1, 2, 2, 1, 3, 2) TB_DECODE_VARIANT(4, 1, 2, 2, 1, 3, 3) \
    TB_DECODE_VARIANT(4, 1, 2, 2, 8, 0, 2) TB_DECODE_VARIANT(4, 1, 2, 2, 8, 3, 2) TB_DECODE_VARIANT(4, 1, 2, 2, 8, 3, 3) \
    TB_DECODE_VARIANT(4, 1, 2, 4, 1, 0, 2) TB_DECODE_VARIANT(4, 1, 2, 4, 1, 2, 2) TB_DECODE_VARIANT(4, 1, 2, 4, 1, 3, 2)
/* the int8 tensor-core variants (RG16: the CUDA space only; KB5 and split-K RW2: MX4 only, k3j; PP 13 / 14 / 15: x
 * quantised once per launch, tb_decode_prep first) */
#define TB_DECODE_TC_VARIANTS \
    TB_DECODE_VARIANT(2, 1, 1, 8, 16, 0, 2) TB_DECODE_VARIANT(2, 1, 1, 8, 16, 2, 2) TB_DECODE_VARIANT(2, 1, 1, 8, 16, 2, 3) \
    TB_DECODE_VARIANT(2, 1, 1, 8, 16, 2, 4) TB_DECODE_VARIANT(2, 1, 1, 8, 16, 2, 10) TB_DECODE_VARIANT(2, 1, 1, 8, 16, 2, 11) \
    TB_DECODE_VARIANT(2, 1, 1, 8, 16, 2, 12) TB_DECODE_VARIANT(2, 1, 1, 8, 16, 2, 13) TB_DECODE_VARIANT(2, 1, 1, 8, 16, 2, 14) \
    TB_DECODE_VARIANT(2, 1, 1, 8, 16, 2, 15) TB_DECODE_VARIANT(2, 1, 1, 8, 16, 3, 2) TB_DECODE_VARIANT(2, 1, 1, 8, 16, 3, 10) \
    TB_DECODE_VARIANT(2, 1, 1, 8, 16, 3, 11) TB_DECODE_VARIANT(2, 1, 1, 8, 16, 3, 13) TB_DECODE_VARIANT(2, 1, 2, 8, 16, 2, 2) \
    TB_DECODE_VARIANT(2, 1, 2, 8, 16, 2, 10) TB_DECODE_VARIANT(2, 1, 2, 8, 16, 2, 13) TB_DECODE_VARIANT(2, 1, 2, 8, 16, 2, 15) \
    TB_DECODE_VARIANT(2, 4, 1, 8, 16, 0, 2) TB_DECODE_VARIANT(2, 4, 1, 8, 16, 0, 3) TB_DECODE_VARIANT(4, 1, 1, 8, 16, 0, 2) \
    TB_DECODE_VARIANT(4, 1, 1, 8, 16, 2, 2) TB_DECODE_VARIANT(4, 1, 1, 8, 16, 2, 3) TB_DECODE_VARIANT(4, 1, 1, 8, 16, 2, 4) \
    TB_DECODE_VARIANT(4, 1, 1, 8, 16, 2, 10) TB_DECODE_VARIANT(4, 1, 1, 8, 16, 2, 11) TB_DECODE_VARIANT(4, 1, 1, 8, 16, 2, 12) \
    TB_DECODE_VARIANT(4, 1, 1, 8, 16, 2, 13) TB_DECODE_VARIANT(4, 1, 1, 8, 16, 2, 14) TB_DECODE_VARIANT(4, 1, 1, 8, 16, 2, 15) \
    TB_DECODE_VARIANT(4, 1, 1, 8, 16, 3, 2) TB_DECODE_VARIANT(4, 1, 1, 8, 16, 3, 10) TB_DECODE_VARIANT(4, 1, 1, 8, 16, 3, 11) \
    TB_DECODE_VARIANT(4, 1, 1, 8, 16, 3, 13) TB_DECODE_VARIANT(4, 1, 2, 8, 16, 2, 2) TB_DECODE_VARIANT(4, 1, 2, 8, 16, 2, 10) \
    TB_DECODE_VARIANT(4, 1, 2, 8, 16, 2, 13) TB_DECODE_VARIANT(4, 1, 2, 8, 16, 2, 15) TB_DECODE_VARIANT(4, 4, 1, 8, 16, 0, 2) \
    TB_DECODE_VARIANT(4, 4, 1, 8, 16, 0, 3) TB_DECODE_VARIANT(4, 4, 2, 8, 16, 0, 2) TB_DECODE_VARIANT(4, 5, 1, 8, 16, 0, 2) \
    TB_DECODE_VARIANT(4, 5, 1, 8, 16, 0, 3) TB_DECODE_VARIANT(4, 5, 2, 8, 16, 0, 2) TB_DECODE_VARIANT(8, 1, 1, 8, 16, 0, 2) \
    TB_DECODE_VARIANT(8, 1, 1, 8, 16, 2, 2) TB_DECODE_VARIANT(8, 1, 1, 8, 16, 2, 3) TB_DECODE_VARIANT(8, 1, 1, 8, 16, 2, 4) \
    TB_DECODE_VARIANT(8, 1, 1, 8, 16, 2, 10) TB_DECODE_VARIANT(8, 1, 1, 8, 16, 2, 11) TB_DECODE_VARIANT(8, 1, 1, 8, 16, 2, 12) \
    TB_DECODE_VARIANT(8, 1, 1, 8, 16, 2, 13) TB_DECODE_VARIANT(8, 1, 1, 8, 16, 2, 14) TB_DECODE_VARIANT(8, 1, 1, 8, 16, 2, 15) \
    TB_DECODE_VARIANT(8, 1, 1, 8, 16, 3, 2) TB_DECODE_VARIANT(8, 1, 1, 8, 16, 3, 10) TB_DECODE_VARIANT(8, 1, 1, 8, 16, 3, 11) \
    TB_DECODE_VARIANT(8, 1, 1, 8, 16, 3, 13) TB_DECODE_VARIANT(8, 1, 2, 8, 16, 2, 2) TB_DECODE_VARIANT(8, 4, 1, 8, 16, 0, 2) \
    TB_DECODE_VARIANT(8, 4, 1, 8, 16, 0, 3)
/* the stream kernel (PP5: M = 1, the CUDA space only; PP16: x quantised once per launch, M up to MX) */
#define TB_DECODE_STREAM_VARIANTS \
    TB_DECODE_VARIANT(1, 1, 1, 4, 2, 0, 5) TB_DECODE_VARIANT(1, 1, 1, 4, 2, 0, 16) TB_DECODE_VARIANT(1, 1, 1, 5, 1, 4, 5) \
    TB_DECODE_VARIANT(1, 1, 1, 5, 1, 4, 16) TB_DECODE_VARIANT(1, 1, 1, 5, 2, 0, 5) TB_DECODE_VARIANT(1, 1, 1, 5, 2, 0, 16) \
    TB_DECODE_VARIANT(1, 1, 1, 5, 2, 0, 18) TB_DECODE_VARIANT(1, 1, 1, 6, 1, 3, 5) TB_DECODE_VARIANT(1, 1, 1, 6, 1, 3, 16) \
    TB_DECODE_VARIANT(1, 1, 1, 6, 1, 3, 18) TB_DECODE_VARIANT(1, 1, 1, 6, 1, 4, 5) TB_DECODE_VARIANT(1, 1, 1, 6, 1, 4, 16) \
    TB_DECODE_VARIANT(1, 1, 1, 6, 2, 0, 5) TB_DECODE_VARIANT(1, 1, 1, 6, 2, 0, 16) TB_DECODE_VARIANT(1, 1, 2, 5, 1, 0, 5) \
    TB_DECODE_VARIANT(1, 1, 2, 5, 1, 0, 16) TB_DECODE_VARIANT(1, 1, 2, 5, 1, 0, 18) TB_DECODE_VARIANT(1, 1, 2, 5, 1, 3, 5) \
    TB_DECODE_VARIANT(1, 1, 2, 5, 1, 3, 16) TB_DECODE_VARIANT(1, 1, 2, 5, 1, 3, 18) TB_DECODE_VARIANT(2, 1, 1, 5, 1, 3, 16) \
    TB_DECODE_VARIANT(2, 1, 1, 6, 1, 3, 16) TB_DECODE_VARIANT(2, 1, 2, 5, 1, 3, 16) TB_DECODE_VARIANT(4, 1, 1, 5, 1, 3, 16) \
    TB_DECODE_VARIANT(4, 1, 1, 6, 1, 3, 16) TB_DECODE_VARIANT(4, 1, 2, 5, 1, 2, 16)
/* the flat kernel (PP6: M = 1, the CUDA space only) */
#define TB_DECODE_FLAT_VARIANTS \
    TB_DECODE_VARIANT(1, 1, 1, 4, 1, 4, 6) TB_DECODE_VARIANT(1, 1, 1, 6, 1, 3, 6) TB_DECODE_VARIANT(1, 1, 1, 8, 1, 3, 6) \
    TB_DECODE_VARIANT(1, 1, 1, 8, 1, 4, 6)
/* PP 5 with split waits (PP9: M = 1, the CUDA space only; PP17: x quantised once per launch) */
#define TB_DECODE_SPLIT_VARIANTS \
    TB_DECODE_VARIANT(1, 1, 1, 4, 2, 0, 9) TB_DECODE_VARIANT(1, 1, 1, 4, 2, 0, 17) TB_DECODE_VARIANT(1, 1, 1, 5, 1, 4, 9) \
    TB_DECODE_VARIANT(1, 1, 1, 5, 1, 4, 17) TB_DECODE_VARIANT(1, 1, 1, 6, 1, 3, 9) TB_DECODE_VARIANT(1, 1, 1, 6, 1, 3, 17) \
    TB_DECODE_VARIANT(1, 1, 1, 6, 1, 3, 19) TB_DECODE_VARIANT(1, 1, 1, 6, 2, 0, 9) TB_DECODE_VARIANT(1, 1, 1, 6, 2, 0, 17) \
    TB_DECODE_VARIANT(1, 1, 2, 5, 1, 0, 9) TB_DECODE_VARIANT(1, 1, 2, 5, 1, 0, 17) TB_DECODE_VARIANT(1, 1, 2, 5, 1, 0, 19) \
    TB_DECODE_VARIANT(1, 1, 2, 5, 1, 3, 9) TB_DECODE_VARIANT(1, 1, 2, 5, 1, 3, 17) TB_DECODE_VARIANT(1, 1, 2, 5, 1, 3, 19)
#else
#define TB_DECODE_IW_VARIANTS
#define TB_DECODE_RING_VARIANTS
#define TB_DECODE_TC_VARIANTS
#define TB_DECODE_STREAM_VARIANTS
#define TB_DECODE_SPLIT_VARIANTS
#define TB_DECODE_FLAT_VARIANTS
#endif
TB_DECODE_VARIANTS TB_DECODE_RING_VARIANTS TB_DECODE_TC_VARIANTS TB_DECODE_STREAM_VARIANTS TB_DECODE_FLAT_VARIANTS \
    TB_DECODE_IW_VARIANTS TB_DECODE_SPLIT_VARIANTS
