/*
 * Tunebase portability header: one kernel source for three toolchains.
 *
 *   (a) hipcc (HIP headers present, __HIP_PLATFORM_AMD__)      gfx906 / gfx90a   wave 64
 *   (b) clang -x hip -nogpuinc -nogpulib (no headers at all)    gfx942 / gfx950   wave 64
 *       (ziglang's clang 22; only compiler builtins are used)
 *   (c) nvcc / NVRTC (__CUDACC__)                               sm_90             warp 32
 *
 * Everything the kernels need goes through the TB_* names below, so the kernels never
 * include a vendor header themselves.
 */
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define TB_CUDA 1
#elif defined(__HIP__) || defined(__HIPCC__) || defined(__AMDGCN__)
#define TB_AMD 1
#if defined(__HIP_PLATFORM_AMD__) || defined(__HIP_PLATFORM_HCC__)
#define TB_HIP_HEADERS 1
#include <hip/hip_runtime.h>
#endif
#else
#error "tb_portability.h: compile with hipcc, clang -x hip, nvcc or NVRTC"
#endif

typedef signed char tb_i8;
typedef int tb_i32;
typedef unsigned int tb_u32;
typedef unsigned short tb_u16;
typedef unsigned long long tb_size; /* 64-bit index type; size_t needs a header */

/* ---- language keywords ---------------------------------------------------------- */
#if defined(TB_AMD) && !defined(TB_HIP_HEADERS)
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define __host__ __attribute__((host))
#endif
#if defined(TB_AMD)
#define TB_FORCEINLINE inline __attribute__((always_inline))
#else
#define TB_FORCEINLINE __forceinline__
#endif
#define TB_DEV static __device__ TB_FORCEINLINE

/* __launch_bounds__(threads, second): the second argument is what Llaminar's min_blocks sets.
 * HIP's headers map it to amdgpu_waves_per_eu; we spell the same attributes out when headers
 * are absent so (a) and (b) produce the same kernel attributes. CUDA: min blocks per SM. */
#if defined(TB_AMD) && !defined(TB_HIP_HEADERS)
#define TB_LAUNCH_BOUNDS(threads, second) \
    __attribute__((amdgpu_flat_work_group_size(1, threads), amdgpu_waves_per_eu(second)))
#else
#define TB_LAUNCH_BOUNDS(threads, second) __launch_bounds__(threads, second)
#endif

/* ---- geometry ------------------------------------------------------------------- */
#if defined(TB_AMD)
#define TB_WAVE 64 /* every AMD target here is gfx9 (wave64) */
#if defined(TB_HIP_HEADERS)
#define TB_TID ((int)threadIdx.x)
#define TB_BID_X ((int)blockIdx.x)
#define TB_BID_Y ((int)blockIdx.y)
#else
#define TB_TID ((int)__builtin_amdgcn_workitem_id_x())
#define TB_BID_X ((int)__builtin_amdgcn_workgroup_id_x())
#define TB_BID_Y ((int)__builtin_amdgcn_workgroup_id_y())
#endif
#else
#define TB_WAVE 32
#define TB_TID ((int)threadIdx.x)
#define TB_BID_X ((int)blockIdx.x)
#define TB_BID_Y ((int)blockIdx.y)
#endif

/* ---- synchronisation -------------------------------------------------------------- */
#if defined(TB_AMD)
TB_DEV void tb_sync(void) {
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
    __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
/* device-scope release before / acquire after the split-K arrival counter */
TB_DEV void tb_fence_release_device(void) { __builtin_amdgcn_fence(__ATOMIC_RELEASE, "agent"); }
TB_DEV void tb_fence_acquire_device(void) { __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "agent"); }
TB_DEV tb_u32 tb_atomic_inc(tb_u32 *p) { return __atomic_fetch_add(p, 1u, __ATOMIC_ACQ_REL); }
TB_DEV void tb_atomic_store_zero(tb_u32 *p) { __atomic_store_n(p, 0u, __ATOMIC_RELAXED); }
#else
TB_DEV void tb_sync(void) { __syncthreads(); }
TB_DEV void tb_fence_release_device(void) { __threadfence(); }
TB_DEV void tb_fence_acquire_device(void) { __threadfence(); }
TB_DEV tb_u32 tb_atomic_inc(tb_u32 *p) { return atomicAdd(p, 1u); }
TB_DEV void tb_atomic_store_zero(tb_u32 *p) { atomicExch(p, 0u); }
#endif

/* ---- lane exchange ---------------------------------------------------------------- */
#if defined(TB_AMD)
TB_DEV int tb_lane(void) { return (int)__builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u)); }
TB_DEV float tb_shfl_xor(float v, int mask) {
    const int src = (tb_lane() ^ mask) << 2; /* ds_bpermute addresses bytes */
    return __builtin_bit_cast(float, __builtin_amdgcn_ds_bpermute(src, __builtin_bit_cast(int, v)));
}
#else
TB_DEV int tb_lane(void) { return (int)(threadIdx.x & 31u); }
TB_DEV float tb_shfl_xor(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
#endif

/* ---- arithmetic --------------------------------------------------------------------- */
/* 4 x int8 dot product accumulated into int32: v_dot4_i32_i8 on gfx906+ (incl. CDNA3/4), dp4a on sm_61+ */
TB_DEV tb_i32 tb_dot4(tb_i32 a, tb_i32 b, tb_i32 c) {
#if defined(TB_AMD)
    return __builtin_amdgcn_sdot4(a, b, c, false);
#else
    return __dp4a(a, b, c);
#endif
}

/* fp16 bits -> fp32 */
TB_DEV float tb_h2f(tb_u16 h) {
#if defined(TB_AMD)
    return (float)__builtin_bit_cast(_Float16, h);
#elif defined(TB_CUDA_EMULATION) /* the CPU emulator (tests/fixtures/gpu_emu): the compiler's _Float16 */
    _Float16 v;
    __builtin_memcpy(&v, &h, 2);
    return (float)v;
#else
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
#endif
}

#if defined(TB_AMD)
#define tb_fabsf(x) __builtin_fabsf(x)
#define tb_fmaxf(a, b) __builtin_fmaxf(a, b)
#define tb_rintf(x) __builtin_rintf(x)
#else
#define tb_fabsf(x) fabsf(x)
#define tb_fmaxf(a, b) fmaxf(a, b)
#define tb_rintf(x) rintf(x)
#endif

/* ---- activation quantisation (identical to kernels/activations.py) ----------------- */
/* 32 floats -> 8 packed int32 words of int8, returns the block scale, *sum = sum of q.
 * Two passes over x (max, then round) instead of holding 32 floats: x is L1/L2 resident and
 * the registers are worth more (a 32-float array made high-occupancy variants spill). */
TB_DEV float tb_quantize_block(const float *__restrict__ x, tb_i32 *packed, tb_i32 *sum) {
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < 32; ++j) amax = tb_fmaxf(amax, tb_fabsf(x[j]));
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    tb_i32 s = 0;
#pragma unroll
    for (int w = 0; w < 8; ++w) {
        tb_u32 word = 0;
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            const tb_i32 q = (tb_i32)tb_rintf(x[4 * w + b] * inv);
            s += q;
            word |= ((tb_u32)(q & 0xFF)) << (8 * b);
        }
        packed[w] = (tb_i32)word;
    }
    *sum = s;
    return amax / 127.0f;
}
