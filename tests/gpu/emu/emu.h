/* emu.h -- forced-include header that lets the kernels of kernels/ compile as C++ for the CPU emulator
 * (tests/gpu/emu): the CUDA keywords, builtin types and intrinsics the kernels use, with threadIdx/blockIdx,
 * __syncthreads and warp shuffles served by the fiber scheduler of emu_cuda.cc through emu_rt_ptr.
 * Test infrastructure only; the engine never includes it. */
#ifndef CNN_EMU_H
#define CNN_EMU_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <type_traits>

#include "emu_tmap.h"

#define __global__ [[gnu::used]]
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))
#define __grid_constant__

struct emu_dim3 {
    unsigned x, y, z;
};

struct emu_rt {
    emu_dim3 tid, bid, bdim, gdim;
    unsigned dyn_smem; /* the launch's dynamic shared memory in bytes */
    void (*sync)(void);
    void (*shfl_xor)(const void *in, void *out, int bytes, int lane_mask);
    void (*allgather)(const void *in, void *out, int bytes); /* out: the 32 lanes' `bytes`, in lane order */
    void (*yield)(void);      /* a thread spinning on memory (an mbarrier wait) lets the others run */
    unsigned long long events; /* counts mbarrier arrivals: a round of yields without one is a deadlock */
    void (*grid_sync)(void);   /* a cooperative launch's grid-wide barrier (kernels/common.cuh, grid_sync) */
};

extern emu_rt *emu_rt_ptr;

#define threadIdx (emu_rt_ptr->tid)
#define blockIdx (emu_rt_ptr->bid)
#define blockDim (emu_rt_ptr->bdim)
#define gridDim (emu_rt_ptr->gdim)

static inline void __syncthreads(void) { emu_rt_ptr->sync(); }
/* a kernel's broken invariant: the GPU's trap ends the launch with an error; here the test process ends, loudly */
[[noreturn]] static inline void __trap(void) {
    fputs("emu: kernel executed __trap() (a device-side invariant failed)\n", stderr);
    abort();
}

/* the read-only data path: a plain load here (the emulator has no caches) */
template <class T> static inline T __ldg(const T *p) { return *p; }

template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask) {
    (void)mask;
    T out;
    emu_rt_ptr->shfl_xor(&v, &out, (int)sizeof(T), lane_mask);
    return out;
}

/* lane src's v (every lane of the warp takes part, as on the GPU) */
template <class T> static inline T __shfl_sync(unsigned mask, T v, int src) {
    (void)mask;
    T all[32];
    emu_rt_ptr->allgather(&v, all, (int)sizeof(T));
    return all[src & 31];
}

/* every lane of the warp arrives before any goes on (a shuffle with lane mask 0 is such a rendezvous) */
static inline void __syncwarp(unsigned mask = 0xffffffffu) {
    (void)mask;
    int in = 0, out;
    emu_rt_ptr->shfl_xor(&in, &out, (int)sizeof in, 0);
}

static inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
    unsigned long long o = *p;
    *p = o + v;
    return o;
}

static inline float __uint_as_float(unsigned int u) { float f; memcpy(&f, &u, 4); return f; }
static inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
static inline unsigned int __float_as_uint(float f) { unsigned int u; memcpy(&u, &f, 4); return u; }
static inline unsigned int __umulhi(unsigned int a, unsigned int b) {
    return (unsigned int)(((unsigned long long)a * b) >> 32);
}
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }

struct alignas(16) uint4 {
    unsigned int x, y, z, w;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
struct alignas(16) double2 {
    double x, y;
};
struct alignas(8) float2 {
    float x, y;
};
static inline float2 make_float2(float x, float y) { return float2{x, y}; }

/* mma.sync.m16n8k16 (f32 += bf16/f16 x bf16/f16) with the PTX ISA's fragment layout, computed by every lane
 * from the whole warp's fragments */
static inline float emu_half_to_f32(unsigned short h, int bf16) {
    if (bf16) return __uint_as_float((unsigned)h << 16);
    unsigned sign = (unsigned)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        float v = (float)m * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    if (e == 31) return __uint_as_float(sign | 0x7f800000u | (m << 13));
    return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
}
/* every lane's fragments (a[0..3], b[0..1]) into all[lane][0..5]; returns this thread's lane */
static inline int emu_mma_gather(const unsigned *a, const unsigned *b, unsigned all[32][6]) {
    unsigned mine[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
    emu_rt_ptr->allgather(mine, all, (int)sizeof mine);
    unsigned lin = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    return (int)(lin & 31);
}
static inline void emu_mma_m16n8k16(float *d, const unsigned *a, const unsigned *b, int bf16) {
    unsigned all[32][6];
    int lane = emu_mma_gather(a, b, all), g = lane >> 2, t = lane & 3;
    for (int e = 0; e < 4; e++) {
        int row = g + (e >= 2 ? 8 : 0), col = 2 * t + (e & 1);
        float s = d[e];
        for (int k = 0; k < 16; k++) {
            unsigned ar = all[(row % 8) * 4 + (k % 8) / 2][(row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)];
            unsigned br = all[col * 4 + (k % 8) / 2][4 + (k >= 8 ? 1 : 0)];
            float av = emu_half_to_f32((unsigned short)((k & 1) ? ar >> 16 : ar & 0xffffu), bf16);
            float bv = emu_half_to_f32((unsigned short)((k & 1) ? br >> 16 : br & 0xffffu), bf16);
            s += av * bv;
        }
        d[e] = s;
    }
}

/* mma.sync.m16n8k8 .tf32 (f32 += tf32 x tf32): the operands' bit patterns with the low 13 bits cleared (what a
 * TF32 operand holds), the PTX ISA's fragment layout, computed by every lane from the whole warp's fragments */
static inline void emu_mma_m16n8k8_tf32(float *d, const unsigned *a, const unsigned *b) {
    unsigned all[32][6];
    int lane = emu_mma_gather(a, b, all), g = lane >> 2, t = lane & 3;
    for (int e = 0; e < 4; e++) {
        int row = g + (e >= 2 ? 8 : 0), col = 2 * t + (e & 1);
        float s = d[e];
        for (int k = 0; k < 8; k++) {
            unsigned ar = all[(row % 8) * 4 + k % 4][(row >= 8 ? 1 : 0) + (k >= 4 ? 2 : 0)];
            unsigned br = all[col * 4 + k % 4][4 + (k >= 4 ? 1 : 0)];
            s += __uint_as_float(ar & 0xffffe000u) * __uint_as_float(br & 0xffffe000u);
        }
        d[e] = s;
    }
}

/* exporting a kernel: emu_call_<name>(args) and emu_size_<name>() for the fake driver */
template <class A> static void emu_invoke(void (*f)(A), const void *p) {
    typename std::remove_cv<A>::type a; /* the launch's bytes, copied to an object aligned as the struct wants */
    memcpy((void *)&a, p, sizeof a);
    f(a);
}
template <class A> static size_t emu_argsize(void (*)(A)) { return sizeof(typename std::remove_cv<A>::type); }
#define EMU_EXPORT(f)                                                                                          \
    extern "C" void emu_call_##f(const void *p) { emu_invoke(f, p); }                                          \
    extern "C" size_t emu_size_##f(void) { return emu_argsize(f); }
#define EMU_RUNTIME                                                                                            \
    emu_rt *emu_rt_ptr;                                                                                        \
    extern "C" void emu_set_rt(emu_rt *r) { emu_rt_ptr = r; }

#endif
