/*
 * A CPU EMULATOR of the GPU execution model, for testing kernel sources without a GPU: this file stands in
 * for kernels/library/include/tb_portability.h (it is found first on the include path), so the very
 * source the GPUs compile (kernels/library/tb-prefill/prefill.hip) runs here, thread by thread.
 *
 * Every thread of a workgroup is a ucontext coroutine on one OS thread; barriers (workgroup and
 * warp/wave) switch to the next thread. Warp-level operations follow the vendors' documented operand
 * layouts, independently of the kernels' own index math:
 *   -DTB_EMU_NV   warp 32: ldmatrix .x1/.x2/.x4 (m8n8 b16), mma.sync m16n8k32 / m16n8k16 s8.s8.s32,
 *                 cp.async (a plain copy with zero fill), shuffles; sm_90a: wgmma m64nNk16 f16 run LATE, at
 *                 the wait_group that retires its commit group (so a kernel that reuses a stage before waiting
 *                 reads the new bytes and fails parity), mbarriers with phases (init / arrive / try_wait.parity,
 *                 cp.async.mbarrier.arrive.noinc, expect_tx / complete_tx); thread-block clusters: the
 *                 workgroups of a cluster run together (their threads interleaved), each with its own shared
 *                 memory, mapa'd arrivals on a peer's mbarrier, cp.async.bulk multicast (the bytes land in
 *                 every masked workgroup at once, complete_tx on each one's mbarrier), barrier.cluster;
 *                 setmaxnreg: warpgroup-wide (.sync.aligned), registers moved through the CTA's pool of what
 *                 the launch gave (an .inc the pool cannot serve aborts: on the GPU it spins forever)
 *   -DTB_EMU_AMD  wave 64: v_mfma_i32_16x16x32_i8 (-DTB_EMU_MFMA=32), v_mfma_i32_16x16x16i8 (=16),
 *                 or no MFMA (gfx906: sdot4 only, =0); shuffles (ds_bpermute)
 * Only what the prefill kernels use is here. PTX ISA "Matrix Fragments for mma.m16n8k32" and AMD's
 * "AMD Instinct MI300 ISA, 7.1 matrix fused multiply-add" (operand layouts) are the references.
 */
#pragma once
#include <cmath>
#include <math.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <vector>
#include <ucontext.h>

#define TB_EMU 1
typedef signed char tb_i8;
typedef int tb_i32;
typedef unsigned int tb_u32;
typedef unsigned short tb_u16;
typedef unsigned long long tb_size;

#define __global__
#define __device__
#define __shared__
#define __host__
#define TB_FORCEINLINE inline
#define TB_DEV static inline
#define TB_DEV_MEMBER inline
#define TB_LAUNCH_BOUNDS(threads, second)

#if defined(TB_EMU_AMD)
#define TB_WAVE 64
#else
#define TB_WAVE 32
#endif

typedef unsigned long long tb_u64;

namespace tbemu {
/* one wgmma.mma_async of a warpgroup, as issued: every lane's A registers and accumulator pointer (the
 * accumulators are the threads' own arrays, alive for the whole kernel), B read from shared memory when run */
struct WgOp {
    int n = 0;
    unsigned long long desc = 0;
    tb_u32 a[4][32][4];
    float *d[4][32];
};
struct WgQueue {
    std::vector<WgOp> open;               /* issued since the last commit_group */
    std::deque<std::vector<WgOp>> groups; /* committed, not yet retired by a wait_group */
};
struct MBar {
    int expected = 0, pending = 0;
    long tx = 0;        /* expected minus completed transaction bytes of the current phase */
    unsigned phase = 0; /* completed phases */
};
struct Cluster;
struct Thread {
    ucontext_t ctx;
    std::vector<char> stack;
    bool done = false;
};
struct Block {
    int nthreads = 0;
    std::vector<Thread> th;
    std::vector<unsigned char> smem;
    unsigned bar_count = 0, bar_gen = 0;
    unsigned wcount[32] = {0}, wgen[32] = {0};
    unsigned gcount[8] = {0}, ggen[8] = {0}; /* warpgroups (4 warps) */
    /* setmaxnreg (sm_90a): the CTA's register pool. The launch gives every thread launch_regs (one workgroup
     * per SM: the 64 Ki registers shared out per warp in units of 8 per thread, at most 255); .dec puts a
     * warpgroup's surplus into the pool, .inc takes from it and waits until it holds enough */
    int launch_regs = 0, wg_regs[8] = {0};
    long reg_pool = 0;
    unsigned mcount[8] = {0}, mgen[8] = {0};
    int mreq[8][128];
    WgQueue wgq[8];
    std::map<size_t, MBar> mbar; /* by shared-memory offset */
    /* per-warp exchange scratch: lane -> up to 8 words and one pointer */
    tb_u32 xw[32][64][8];
    const unsigned char *xp[32][64];
    int bx = 0, by = 0, bz = 0, rank = 0; /* rank: inside its cluster */
    Cluster *cluster = nullptr;
};
struct Cluster {
    std::vector<Block *> blocks; /* by rank */
    unsigned count = 0, gen = 0, nthreads = 0;
};
inline Block *block = nullptr;
inline int tid = 0, bx = 0, by = 0, bz = 0, grid_x = 1, grid_y = 1;
inline ucontext_t sched;
inline std::function<void()> body;

inline void yield() { swapcontext(&block->th[tid].ctx, &sched); }
inline void block_sync() {
    Block &b = *block;
    const unsigned gen = b.bar_gen;
    if (++b.bar_count == (unsigned)b.nthreads) {
        b.bar_count = 0;
        ++b.bar_gen;
        return;
    }
    while (b.bar_gen == gen) yield();
}
inline void warp_sync() {
    Block &b = *block;
    const int w = tid / TB_WAVE;
    const unsigned gen = b.wgen[w];
    if (++b.wcount[w] == (unsigned)TB_WAVE) {
        b.wcount[w] = 0;
        ++b.wgen[w];
        return;
    }
    while (b.wgen[w] == gen) yield();
}
inline void group_sync() { /* the 128 threads of a warpgroup (NVIDIA wgmma) */
    Block &b = *block;
    const int w = tid / 128;
    const unsigned gen = b.ggen[w];
    if (++b.gcount[w] == 128u) {
        b.gcount[w] = 0;
        ++b.ggen[w];
        return;
    }
    while (b.ggen[w] == gen) yield();
}
inline void trampoline() {
    body();
    block->th[tid].done = true;
    swapcontext(&block->th[tid].ctx, &sched);
}
/* run `fn` as every thread of every workgroup of the grid: clusters of cx x cy workgroups one after another,
 * the threads of a cluster's workgroups interleaved (1 x 1: workgroups one after another) */
inline void launch(int gx, int gy, int gz, int threads, size_t shared_bytes, std::function<void()> fn, int cx = 1,
                   int cy = 1) {
    if (threads % TB_WAVE) {
        fprintf(stderr, "emu: %d threads is not a whole number of waves\n", threads);
        abort();
    }
    if (gx % cx || gy % cy) {
        fprintf(stderr, "emu: grid (%d, %d) is not a whole number of %d x %d clusters\n", gx, gy, cx, cy);
        abort();
    }
    body = fn;
    grid_x = gx, grid_y = gy;
    for (int z = 0; z < gz; ++z)
        for (int y0 = 0; y0 < gy; y0 += cy)
            for (int x0 = 0; x0 < gx; x0 += cx) {
                Cluster cl;
                for (int r = 0; r < cx * cy; ++r) {
                    Block *b = new Block();
                    b->nthreads = threads;
                    b->launch_regs = (65536 / threads) / 8 * 8 > 255 ? 255 : (65536 / threads) / 8 * 8;
                    for (int &r : b->wg_regs) r = b->launch_regs;
                    b->smem.assign(shared_bytes + 16, 0xA5); /* garbage, like real shared memory */
                    b->th.resize(threads);
                    b->bx = x0 + r % cx, b->by = y0 + r / cx, b->bz = z, b->rank = r;
                    b->cluster = &cl;
                    for (int t = 0; t < threads; ++t) {
                        Thread &th = b->th[t];
                        th.stack.resize(256 * 1024);
                        getcontext(&th.ctx);
                        th.ctx.uc_stack.ss_sp = th.stack.data();
                        th.ctx.uc_stack.ss_size = th.stack.size();
                        th.ctx.uc_link = nullptr;
                        makecontext(&th.ctx, trampoline, 0);
                    }
                    cl.blocks.push_back(b);
                    cl.nthreads += (unsigned)threads;
                }
                /* a cluster's workgroups run at different speeds (one of them every third pass, alternating per
                 * cluster): one racing ahead of its peer meets every missing cross-workgroup wait */
                const int fast = ((x0 / cx) + (y0 / cy)) % 2 % (cx * cy);
                for (long pass = 0;; ++pass) {
                    bool any = false;
                    for (Block *b : cl.blocks)
                        for (int t = 0; t < threads; ++t) {
                            if (b->th[t].done) continue;
                            any = true;
                            if (cx * cy > 1 && b->rank != fast && pass % 3 != 0) continue;
                            block = b, tid = t, bx = b->bx, by = b->by, bz = b->bz;
                            swapcontext(&sched, &b->th[t].ctx);
                        }
                    if (!any) break;
                    if (pass > 100000000L) {
                        fprintf(stderr, "emu: deadlock in cluster at block (%d,%d,%d)\n", x0, y0, z);
                        abort();
                    }
                }
                for (Block *b : cl.blocks) delete b;
                block = nullptr;
            }
}
/* barrier.cluster.arrive + wait: every thread of every workgroup of the cluster */
inline void cluster_sync() {
    Cluster &c = *block->cluster;
    const unsigned gen = c.gen;
    if (++c.count == c.nthreads) {
        c.count = 0;
        ++c.gen;
        return;
    }
    while (c.gen == gen) yield();
}
/* setmaxnreg.{inc,dec}.sync.aligned N: every warp of the warpgroup executes the same one (a warp that skips it
 * or exits first hangs the hardware: aborts here); .dec releases (current - N) x 128 registers to the CTA pool,
 * .inc takes (N - current) x 128 from it, waiting while other warpgroups may still release some (the hardware
 * retries forever: USETMAXREG.TRY_ALLOC.CTAPOOL in a loop) */
inline void setmaxnreg(int n, bool inc) {
    Block &b = *block;
    const int wg = tid / 128;
    if (n % 8 != 0 || n < 24 || n > 256 || b.nthreads % 128 != 0) {
        fprintf(stderr, "emu: setmaxnreg %d in a workgroup of %d threads (24..256, a multiple of 8, whole "
                        "warpgroups)\n", n, b.nthreads);
        abort();
    }
    b.mreq[wg][tid % 128] = inc ? n : -n;
    const unsigned gen = b.mgen[wg];
    if (++b.mcount[wg] < 128u) {
        long turns = 0;
        while (b.mgen[wg] == gen) {
            for (int t = 128 * wg; t < 128 * wg + 128; ++t)
                if (b.th[(size_t)t].done) {
                    fprintf(stderr, "emu: thread %d of warpgroup %d exited without the setmaxnreg its warpgroup "
                                    "executes (.sync.aligned)\n", t, wg);
                    abort();
                }
            if (++turns > 200000L) {
                fprintf(stderr, "emu: warpgroup %d: %u of 128 threads reached setmaxnreg (.sync.aligned: all)\n", wg,
                        b.mcount[wg]);
                abort();
            }
            yield();
        }
        return;
    }
    /* the last thread of the warpgroup: the same instruction everywhere, then the pool */
    for (int t = 0; t < 128; ++t)
        if (b.mreq[wg][t] != b.mreq[wg][0]) {
            fprintf(stderr, "emu: warpgroup %d: threads 0 and %d executed different setmaxnreg (%d, %d)\n", wg, t,
                    b.mreq[wg][0], b.mreq[wg][t]);
            abort();
        }
    const int cur = b.wg_regs[wg];
    if (inc ? n < cur : n > cur) {
        fprintf(stderr, "emu: setmaxnreg.%s %d from %d registers\n", inc ? "inc" : "dec", n, cur);
        abort();
    }
    if (!inc) {
        b.reg_pool += 128L * (cur - n);
    } else {
        long turns = 0; /* every other thread runs once per turn: a .dec to come has had its chance */
        while (b.reg_pool < 128L * (n - cur)) {
            if (++turns > 20000L) {
                fprintf(stderr, "emu: setmaxnreg.inc %d of warpgroup %d waits forever: the CTA pool holds %ld "
                                "registers, it needs %ld (launch: %d per thread x %d threads; now per warpgroup:",
                        n, wg, b.reg_pool, 128L * (n - cur), b.launch_regs, b.nthreads);
                for (int g = 0; g < b.nthreads / 128; ++g) fprintf(stderr, " %d", b.wg_regs[g]);
                fprintf(stderr, ")\n");
                abort();
            }
            yield();
        }
        b.reg_pool -= 128L * (n - cur);
    }
    b.wg_regs[wg] = n;
    b.mcount[wg] = 0;
    ++b.mgen[wg];
}
inline int lane() { return tid % TB_WAVE; }
inline int wave() { return tid / TB_WAVE; }
inline tb_i32 sbyte(tb_u32 w, int i) { return (tb_i32)(tb_i8)(w >> (8 * i)); }
inline tb_u32 ubyte(tb_u32 w, int i) { return (w >> (8 * i)) & 0xFFu; }
} // namespace tbemu

#define TB_TID (tbemu::tid)
#define TB_BID_X (tbemu::bx)
#define TB_BID_Y (tbemu::by)
#define TBP_BID_Z (tbemu::bz)
#define TBP_GRID_Y (tbemu::grid_y)
#define TBP_GRID_X (tbemu::grid_x)

TB_DEV void tb_sync(void) { tbemu::block_sync(); }
TB_DEV int tb_lane(void) { return tbemu::lane(); }
TB_DEV float tb_shfl_xor(float v, int mask) {
    using namespace tbemu;
    tb_u32 bits;
    memcpy(&bits, &v, 4);
    block->xw[wave()][lane()][0] = bits;
    warp_sync();
    bits = block->xw[wave()][lane() ^ mask][0];
    warp_sync();
    float r;
    memcpy(&r, &bits, 4);
    return r;
}
TB_DEV float tb_h2f(tb_u16 h) {
    const tb_u32 sign = (tb_u32)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu;
    tb_u32 man = h & 0x3FFu, bits;
    if (e == 0) {
        if (man == 0) {
            bits = sign;
        } else {
            tb_u32 ex = 127 - 15 + 1;
            while ((man & 0x400u) == 0) {
                man <<= 1;
                ex--;
            }
            bits = sign | (ex << 23) | ((man & 0x3FFu) << 13);
        }
    } else if (e == 0x1F) {
        bits = sign | 0x7F800000u | (man << 13);
    } else {
        bits = sign | ((e + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}
#define tb_fabsf(x) std::fabs(x)
#define tb_fmaxf(a, b) std::fmax(a, b)
#define tb_rintf(x) std::rint(x)

struct float2 {
    float x, y;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(16) int4 {
    int x, y, z, w;
};
struct alignas(8) int2 {
    int x, y;
};
struct alignas(8) uint2 {
    unsigned x, y;
};
inline float2 make_float2(float a, float b) { return {a, b}; }
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }

TB_DEV float tbp_as_float(tb_i32 v) {
    float f;
    memcpy(&f, &v, 4);
    return f;
}
TB_DEV tb_i32 tbp_float_bits(float v) {
    tb_i32 i;
    memcpy(&i, &v, 4);
    return i;
}
TB_DEV void tbp_red_add(float *p, float v) { *p += v; } /* one OS thread: no race */
#define TBP_DYN_SMEM tb_u8 *tbp_smem = (tb_u8 *)tbemu::block->smem.data();
#define TBP_LDS(name, bytes) tb_u8 *name = (tb_u8 *)tbemu::block->smem.data();

/* ---- NVIDIA ------------------------------------------------------------------------------------------ */
template <int CH>
TB_DEV void tbp_cp_async(void *dst, const void *src, int valid) {
    if (valid < 0 || valid > CH) abort();
    memcpy(dst, src, (size_t)valid);
    memset((char *)dst + valid, 0, (size_t)(CH - valid));
}
TB_DEV void tbp_cp_commit(void) {}
template <int N>
TB_DEV void tbp_cp_wait(void) {}

/* ldmatrix .m8n8 .b16: lanes 8j..8j+7 give the row addresses of matrix j; lane l receives, from each
 * matrix, row l/4, bytes 4*(l%4) .. +3 */
inline void tbemu_ldsm(int count, tb_u32 *out, const void *p) {
    using namespace tbemu;
    const int w = wave(), l = lane();
    block->xp[w][l] = (const unsigned char *)p;
    warp_sync();
    for (int j = 0; j < count; ++j) memcpy(&out[j], block->xp[w][8 * j + l / 4] + 4 * (l % 4), 4);
    warp_sync();
}
TB_DEV void tbp_ldsm4(tb_u32 &r0, tb_u32 &r1, tb_u32 &r2, tb_u32 &r3, const void *p) {
    tb_u32 o[4];
    tbemu_ldsm(4, o, p);
    r0 = o[0], r1 = o[1], r2 = o[2], r3 = o[3];
}
TB_DEV void tbp_ldsm2(tb_u32 &r0, tb_u32 &r1, const void *p) {
    tb_u32 o[2];
    tbemu_ldsm(2, o, p);
    r0 = o[0], r1 = o[1];
}
TB_DEV void tbp_ldsm1(tb_u32 &r0, const void *p) { tbemu_ldsm(1, &r0, p); }

/* (C: the constant quad bits(1.5 * 2^23) that prefill.hip's inline asm passes.)
 * mma.m16n8k32 .s8: A a0..a15 in 4 regs: row g for regs 0, 2 and g+8 for regs 1, 3; col 4t + i (+16 for
 * regs 2, 3). B b0..b7 in 2 regs: k = 4t + i (+16 for reg 1), col g. D: d0, d1 row g, d2, d3 row g+8;
 * col 2t + (i & 1).  (g = lane / 4, t = lane % 4) */
#define TBP_EMU_C 0x4B400000 /* the C quad prefill.hip's mma asm passes */
TB_DEV void tbp_mma32(tb_i32 *d, const tb_u32 *a, tb_u32 b0, tb_u32 b1) {
    using namespace tbemu;
    const int w = wave(), l = lane();
    tb_u32 *x = block->xw[w][l];
    x[0] = a[0], x[1] = a[1], x[2] = a[2], x[3] = a[3], x[4] = b0, x[5] = b1;
    warp_sync();
    const int g = l / 4, t = l % 4;
    for (int e = 0; e < 4; ++e) {
        const int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
        tb_i32 s = TBP_EMU_C;
        for (int kk = 0; kk < 32; ++kk) {
            const int al = (row % 8) * 4 + (kk % 16) / 4, areg = (row >= 8 ? 1 : 0) + (kk >= 16 ? 2 : 0);
            const int bl = col * 4 + (kk % 16) / 4, breg = kk >= 16 ? 1 : 0;
            s += sbyte(block->xw[w][al][areg], kk % 4) * sbyte(block->xw[w][bl][4 + breg], kk % 4);
        }
        d[e] = s;
    }
    warp_sync();
}
/* mma.m16n8k16 .s8: A 2 regs (row g, g+8; col 4t + i), B 1 reg (k = 4t + i, col g), D as above */
TB_DEV void tbp_mma16(tb_i32 *d, tb_u32 a0, tb_u32 a1, tb_u32 b0) {
    using namespace tbemu;
    const int w = wave(), l = lane();
    tb_u32 *x = block->xw[w][l];
    x[0] = a0, x[1] = a1, x[2] = b0;
    warp_sync();
    const int g = l / 4, t = l % 4;
    for (int e = 0; e < 4; ++e) {
        const int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
        tb_i32 s = TBP_EMU_C;
        for (int kk = 0; kk < 16; ++kk) {
            const int al = (row % 8) * 4 + kk / 4, areg = row >= 8 ? 1 : 0;
            const int bl = col * 4 + kk / 4;
            s += sbyte(block->xw[w][al][areg], kk % 4) * sbyte(block->xw[w][bl][2], kk % 4);
        }
        d[e] = s;
    }
    warp_sync();
}

/* prefill.hip's split of a float into two tf32 values (low 13 bits cleared), as its CUDA code does it */
TB_DEV void tbp_split_tf32(float v, tb_u32 &hi, tb_u32 &lo) {
    hi = (tb_u32)tbp_float_bits(v) & 0xFFFFE000u;
    lo = (tb_u32)tbp_float_bits(v - tbp_as_float((tb_i32)hi)) & 0xFFFFE000u;
}
/* mma.m16n8k4 .tf32, f32 accumulate: A a0 (row g, col t), a1 (row g+8, col t); B b0 (row t, col g);
 * C/D as m16n8k32's. Operands are tf32 bit patterns (low 13 bits ignored, as the tensor cores do). */
TB_DEV void tbp_mma_tf32(float *acc, const tb_u32 *a, tb_u32 b) {
    using namespace tbemu;
    const int w = wave(), l = lane();
    tb_u32 *x = block->xw[w][l];
    x[0] = a[0], x[1] = a[1], x[2] = b;
    warp_sync();
    const int g = l / 4, t = l % 4;
    for (int e = 0; e < 4; ++e) {
        const int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
        double s = acc[e];
        for (int kk = 0; kk < 4; ++kk) {
            const float av = tbp_as_float((tb_i32)(block->xw[w][(row % 8) * 4 + kk][row >= 8 ? 1 : 0] & 0xFFFFE000u));
            const float bv = tbp_as_float((tb_i32)(block->xw[w][col * 4 + kk][2] & 0xFFFFE000u));
            s += (double)av * (double)bv;
        }
        acc[e] = (float)s;
    }
    warp_sync();
}

/* ---- AMD MFMA (wave 64) -------------------------------------------------------------------------------
 * v_mfma_i32_16x16x32_i8: A[i][k] in lane i + 16 * (k / 8), byte k % 8 of its 64-bit operand (2 regs);
 * B[k][j] in lane j + 16 * (k / 8), byte k % 8; D[i][j] in lane j + 16 * (i / 4), item i % 4.
 * v_mfma_i32_16x16x16i8:  A[i][k] in lane i + 16 * (k / 4), byte k % 4 (1 reg); B alike; D as above. */
typedef tb_i32 tbp_v4i_emu[4];
TB_DEV void tbp_mfma32(tb_i32 *d, const tb_u32 *a, const tb_u32 *b, const tb_i32 *c) {
    using namespace tbemu;
    const int w = wave(), l = lane();
    tb_u32 *x = block->xw[w][l];
    x[0] = a[0], x[1] = a[1], x[2] = b[0], x[3] = b[1];
    warp_sync();
    const int j = l % 16;
    for (int r = 0; r < 4; ++r) {
        const int i = 4 * (l / 16) + r;
        tb_i32 s = c[r];
        for (int kk = 0; kk < 32; ++kk) {
            const int al = i + 16 * (kk / 8), bl = j + 16 * (kk / 8), byte = kk % 8;
            s += sbyte(block->xw[w][al][byte / 4], byte % 4) * sbyte(block->xw[w][bl][2 + byte / 4], byte % 4);
        }
        d[r] = s;
    }
    warp_sync();
}
TB_DEV void tbp_mfma16(tb_i32 *d, tb_u32 a, tb_u32 b, const tb_i32 *c) {
    using namespace tbemu;
    const int w = wave(), l = lane();
    tb_u32 *x = block->xw[w][l];
    x[0] = a, x[1] = b;
    warp_sync();
    const int j = l % 16;
    for (int r = 0; r < 4; ++r) {
        const int i = 4 * (l / 16) + r;
        tb_i32 s = c[r];
        for (int kk = 0; kk < 16; ++kk) {
            const int al = i + 16 * (kk / 4), bl = j + 16 * (kk / 4);
            s += sbyte(block->xw[w][al][0], kk % 4) * sbyte(block->xw[w][bl][1], kk % 4);
        }
        d[r] = s;
    }
    warp_sync();
}

/* ---- NVIDIA sm_90a: wgmma m64nNk16 .f32.f16.f16, A from registers, B K-major in shared memory ---------
 * (prefill_wgmma.h's engine 1.) PTX ISA "Register Fragments and Shared Memory Matrix Layouts" for wgmma:
 * A (64 x 16 per warpgroup): warp w holds rows 16 w .. 16 w + 15, as mma.m16n8k16's A: reg 0 (row g,
 * k 2t, 2t+1), reg 1 (row g+8, same k), reg 2 (row g, k 2t+8, 2t+9), reg 3 (row g+8, same k), lower half =
 * lower k. B (16 x N) K-major without swizzle: 8 x 16-byte core matrices; B[k][n] at start + (n / 8) SBO
 * + (k / 8) LBO + (n % 8) 16 + (k % 8) 2 (descriptor: start, LBO, SBO in 16-byte units at bits 0, 16, 32).
 * D: d[4 i + e] = (row 16 w + g + 8 (e >> 1), col 8 i + 2 t + (e & 1)). fp16 helpers round to nearest even. */
inline float tbemu_h2f(tb_u32 h) { return tb_h2f((tb_u16)(h & 0xFFFFu)); }
inline tb_u32 tbemu_f2h(float f) {
    tb_u32 x;
    memcpy(&x, &f, 4);
    const tb_u32 sign = (x >> 16) & 0x8000u;
    const double a = std::fabs((double)f);
    if (!(a == a)) return sign | 0x7E00u;
    if (a >= 65520.0) return sign | 0x7C00u; /* rounds to infinity */
    int e;
    (void)std::frexp(a, &e);                       /* a = m 2^e, m in [0.5, 1) */
    const int ex = e - 1 < -14 ? -14 : e - 1;        /* subnormals share 2^-14's quantum */
    const double q = std::ldexp(1.0, ex - 10);       /* the half's quantum at this exponent */
    const double r = std::nearbyint(a / q) * q;      /* round half to even (default rounding mode) */
    if (r == 0.0) return sign;
    int e2;
    (void)std::frexp(r, &e2);
    if (e2 - 1 < -14) return sign | (tb_u32)std::lrint(r / std::ldexp(1.0, -24));
    const tb_u32 man = (tb_u32)std::lrint((r / std::ldexp(1.0, e2 - 1) - 1.0) * 1024.0);
    return sign | ((tb_u32)(e2 - 1 + 15) << 10) | man;
}
TB_DEV tb_u32 tbp_h2_pack(float lo, float hi) { return tbemu_f2h(lo) | (tbemu_f2h(hi) << 16); }
TB_DEV tb_u32 tbp_h2_fma(tb_u32 a, tb_u32 b, tb_u32 c) {
    tb_u32 r = 0;
    for (int h = 0; h < 2; ++h) {
        const double v = (double)tbemu_h2f(a >> (16 * h)) * (double)tbemu_h2f(b >> (16 * h)) +
                         (double)tbemu_h2f(c >> (16 * h)); /* exact for halves: one rounding below */
        r |= tbemu_f2h((float)v) << (16 * h);
    }
    return r;
}
TB_DEV tb_u32 tbp_saddr(const void *p) {
    return (tb_u32)((const unsigned char *)p - tbemu::block->smem.data());
}
TB_DEV void tbp_wg_fence(void) {}
TB_DEV void tbp_fence_async_smem(void) {}
TB_DEV void tbp_keep(float &) {}

/* D += A . B of one queued wgmma: the PTX layouts above, B as shared memory holds it NOW */
inline void tbemu_wg_run(const tbemu::WgOp &op) {
    using namespace tbemu;
    const unsigned long long dsc = op.desc;
    const size_t start = (size_t)(dsc & 0x3FFFu) << 4, lbo = (size_t)((dsc >> 16) & 0x3FFFu) << 4,
                 sbo = (size_t)((dsc >> 32) & 0x3FFFu) << 4;
    for (int w = 0; w < 4; ++w)
        for (int l = 0; l < 32; ++l) {
            const int g = l / 4, t = l % 4;
            float *d = op.d[w][l];
            for (int i = 0; i < op.n / 8; ++i)
                for (int e = 0; e < 4; ++e) {
                    const int row = 16 * w + g + 8 * (e >> 1), col = 8 * i + 2 * t + (e & 1);
                    double s = 0.0;
                    for (int kk = 0; kk < 16; ++kk) {
                        const int r16 = row % 16, aw = row / 16;
                        const int al = 4 * (r16 % 8) + (kk % 8) / 2, areg = (r16 >= 8 ? 1 : 0) + (kk >= 8 ? 2 : 0);
                        const float av = tbemu_h2f(op.a[aw][al][areg] >> (16 * (kk & 1)));
                        tb_u16 bh;
                        memcpy(&bh, block->smem.data() + start + (size_t)(col / 8) * sbo + (size_t)(kk / 8) * lbo +
                                        (size_t)(col % 8) * 16 + (size_t)(kk % 8) * 2,
                               2);
                        s += (double)av * (double)tb_h2f(bh);
                    }
                    d[4 * i + e] += (float)s;
                }
        }
}
/* wgmma.mma_async: every thread of the warpgroup leaves its operands; the last one to arrive queues the op */
template <int N>
TB_DEV void tbp_wgmma(float *d, const tb_u32 *a, unsigned long long desc) {
    using namespace tbemu;
    const int w = wave(), l = lane(), wg = tid / 128;
    tb_u32 *x = block->xw[w][l];
    x[0] = a[0], x[1] = a[1], x[2] = a[2], x[3] = a[3];
    x[4] = (tb_u32)desc, x[5] = (tb_u32)(desc >> 32);
    block->xp[w][l] = (const unsigned char *)d;
    group_sync();
    if (tid % 128 == 0) {
        WgOp op;
        op.n = N;
        /* the warpgroup's first warp: its descriptor (all lanes pass the same) */
        op.desc = (unsigned long long)x[4] | ((unsigned long long)x[5] << 32);
        for (int ww = 0; ww < 4; ++ww)
            for (int ll = 0; ll < 32; ++ll) {
                memcpy(op.a[ww][ll], block->xw[4 * wg + ww][ll], 16);
                op.d[ww][ll] = (float *)block->xp[4 * wg + ww][ll];
            }
        block->wgq[wg].open.push_back(op);
    }
    group_sync();
}
TB_DEV void tbp_wg_commit(void) {
    using namespace tbemu;
    const int wg = tid / 128;
    group_sync();
    if (tid % 128 == 0) {
        WgQueue &q = block->wgq[wg];
        q.groups.push_back(std::move(q.open));
        q.open.clear();
    }
    group_sync();
}
/* wgmma.wait_group N: the oldest groups run until at most N remain pending */
template <int N>
TB_DEV void tbp_wg_wait(void) {
    using namespace tbemu;
    const int wg = tid / 128;
    group_sync();
    if (tid % 128 == 0) {
        WgQueue &q = block->wgq[wg];
        if (!q.open.empty()) {
            fprintf(stderr, "emu: wgmma.wait_group with uncommitted wgmma ops\n");
            abort();
        }
        while (q.groups.size() > (size_t)N) {
            for (const WgOp &op : q.groups.front()) tbemu_wg_run(op);
            q.groups.pop_front();
        }
    }
    group_sync();
}

/* ---- NVIDIA sm_90: mbarrier (phase parity) ------------------------------------------------------------ */
/* the mbarrier at bar's shared offset in workgroup `rank` of the cluster (-1: this workgroup) */
inline tbemu::MBar &tbemu_mbar(const void *bar, int rank = -1) {
    using namespace tbemu;
    const size_t off = (size_t)((const unsigned char *)bar - block->smem.data());
    Block *b = rank < 0 ? block : block->cluster->blocks.at((size_t)rank);
    auto it = b->mbar.find(off);
    if (it == b->mbar.end() || it->second.expected == 0) {
        fprintf(stderr, "emu: mbarrier at shared offset %zu (rank %d) used before mbarrier.init\n", off, rank);
        abort();
    }
    return it->second;
}
/* the phase completes once every arrival came and every expected transaction byte landed */
inline void tbemu_mbar_settle(tbemu::MBar &b) {
    if (b.pending == 0 && b.tx == 0) {
        ++b.phase;
        b.pending = b.expected;
    }
}
TB_DEV void tbp_mbar_init(tb_u64 *bar, int count) {
    tbemu::MBar b;
    b.expected = b.pending = count;
    tbemu::block->mbar[(size_t)((unsigned char *)bar - tbemu::block->smem.data())] = b;
}
TB_DEV void tbp_mbar_fence_init(void) {}
TB_DEV void tbp_mbar_arrive(tb_u64 *bar) {
    tbemu::MBar &b = tbemu_mbar(bar);
    if (b.pending <= 0) abort();
    --b.pending;
    tbemu_mbar_settle(b);
}
/* ---- thread-block clusters (sm_90) ---- */
TB_DEV int tbp_cluster_rank(void) { return tbemu::block->rank; }
TB_DEV void tbp_cluster_sync(void) { tbemu::cluster_sync(); }
TB_DEV void tbp_syncwarp(void) { tbemu::warp_sync(); }
TB_DEV void tbp_mbar_arrive_peer(tb_u64 *bar, int rank) {
    tbemu::MBar &b = tbemu_mbar(bar, rank);
    if (b.pending <= 0) abort();
    --b.pending;
    tbemu_mbar_settle(b);
}
TB_DEV void tbp_mbar_arrive_expect_tx(tb_u64 *bar, tb_u32 bytes) {
    tbemu_mbar(bar).tx += (long)bytes;
    tbp_mbar_arrive(bar);
}
/* cp.async.bulk .multicast::cluster: the bytes land at dst's offset in every masked workgroup now, each one's
 * mbarrier at bar's offset completing them (a workgroup whose slot was not released yet loses its bytes: the
 * late wgmma then reads the new ones and fails parity) */
TB_DEV void tbp_bulk_g2s_mc(void *dst, const void *src, tb_u32 bytes, tb_u64 *bar, tb_u16 mask) {
    using namespace tbemu;
    if (bytes % 16 || ((size_t)src) % 16) abort();
    const size_t off = (size_t)((unsigned char *)dst - block->smem.data());
    for (int r = 0; r < (int)block->cluster->blocks.size(); ++r) {
        if (!((mask >> r) & 1)) continue;
        Block *b = block->cluster->blocks[(size_t)r];
        if (off + bytes > b->smem.size()) abort();
        memcpy(b->smem.data() + off, src, bytes);
        MBar &mb = tbemu_mbar(bar, r);
        mb.tx -= (long)bytes;
        tbemu_mbar_settle(mb);
    }
}
/* try_wait.parity P succeeds once the phase of parity P has completed: the current phase's parity is not P */
TB_DEV void tbp_mbar_wait(tb_u64 *bar, tb_u32 parity) {
    long turns = 0; /* every other thread ran once per turn: a phase that never completes is a deadlock */
    while ((tbemu_mbar(bar).phase & 1u) == (parity & 1u)) {
        if (++turns > 1000000L) {
            fprintf(stderr, "emu: thread %d waits forever on the mbarrier at shared offset %zu (parity %u)\n",
                    tbemu::tid, (size_t)((unsigned char *)bar - tbemu::block->smem.data()), parity);
            abort();
        }
        tbemu::yield();
    }
}
TB_DEV void tbp_mbar_wait_cluster(tb_u64 *bar, tb_u32 parity) { tbp_mbar_wait(bar, parity); }
/* cp.async copies land at once here: the arrival is immediate */
TB_DEV void tbp_cp_async_mbar_arrive(tb_u64 *bar) { tbp_mbar_arrive(bar); }
template <int N>
TB_DEV void tbp_setmaxnreg_inc(void) {
    tbemu::setmaxnreg(N, true);
}
template <int N>
TB_DEV void tbp_setmaxnreg_dec(void) {
    tbemu::setmaxnreg(N, false);
}
TB_DEV void tbp_cp_wait_all(void) {}
TB_DEV void tbp_pin(tb_u32 &) {}
/* shfl.sync.idx: lane src's v */
TB_DEV tb_u32 tbp_shfl_idx(tb_u32 v, int src) {
    using namespace tbemu;
    block->xw[wave()][lane()][0] = v;
    warp_sync();
    const tb_u32 r = block->xw[wave()][src & (TB_WAVE - 1)][0];
    warp_sync();
    return r;
}
TB_DEV void tbp_pin(tb_u64 &) {}
