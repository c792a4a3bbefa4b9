/* common.cuh -- the one header every kernel includes. NVRTC-clean: no host headers, no cuda_fp16.h or
 * cuda_bf16.h (NVRTC does not find them without include paths), only builtins and inline PTX.
 *
 * Activation storage type, chosen by -DACT (src/cuda/registry.c writes it):
 *     ACT=0  float32   act_t = float
 *     ACT=1  float16   act_t = unsigned short (IEEE binary16 bits)
 *     ACT=2  bfloat16  act_t = unsigned short (the top half of a float32)
 * Kernels load act_t into float, compute in float (fp32 accumulation always) and round once on the store
 * (round to nearest even, like cnn_f32_to_bf16 / cnn_f32_to_f16 on the host). Programs that do not touch
 * activations are compiled without ACT.
 *
 * Also here: Philox-4x32-10 bit-identical to src/core/rng.c (dropout masks agree with the CPU backend), and
 * fixed-order warp/block reductions (deterministic: the same inputs give the same bits on every run).
 */
#ifndef CNN_KERNELS_COMMON_CUH
#define CNN_KERNELS_COMMON_CUH

#define ACT_F32 0
#define ACT_F16 1
#define ACT_BF16 2

#define CNN_INF __int_as_float(0x7f800000)

/* ---- half-precision conversions (bit exact, round to nearest even) ------------------------------------ */

__device__ __forceinline__ float bf16_to_f32(unsigned short h) { return __uint_as_float((unsigned int)h << 16); }

__device__ __forceinline__ unsigned short f32_to_bf16(float f) {
#if __CUDA_ARCH__ >= 800
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#else
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
#endif
}

#ifdef __CUDA_ARCH__
__device__ __forceinline__ float f16_to_f32(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ unsigned short f32_to_f16(float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
#else
/* Bit-exact C for builds without PTX: the CPU emulator of tests/gpu/emu compiles these kernels as C++. */
__device__ __forceinline__ float f16_to_f32(unsigned short h) {
    unsigned int sign = (unsigned int)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        float v = (float)m * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    if (e == 31) return __uint_as_float(sign | 0x7f800000u | (m << 13));
    return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
}

__device__ __forceinline__ unsigned short f32_to_f16(float f) {
    unsigned int u = __float_as_uint(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00u);
    if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* subnormal: round a * 2^24 to nearest even */
        float v = __uint_as_float(a) * 16777216.0f;
        unsigned int k = (unsigned int)v;
        float frac = v - (float)k;
        if (frac > 0.5f || (frac == 0.5f && (k & 1u))) k++;
        return (unsigned short)(sign | k);
    }
    unsigned int r = a + 0xfffu + ((a >> 13) & 1u);
    return (unsigned short)(sign | (((r >> 23) - 112u) << 10) | ((r >> 13) & 0x3ffu));
}
#endif

/* ---- the activation type -------------------------------------------------------------------------------- */

#ifdef ACT
#if ACT == ACT_F32
typedef float act_t;
#define ACT_VEC 4 /* elements per 16-byte vector */
__device__ __forceinline__ float act_to_f32(act_t v) { return v; }
__device__ __forceinline__ act_t f32_to_act(float v) { return v; }
#elif ACT == ACT_F16
typedef unsigned short act_t;
#define ACT_VEC 8
__device__ __forceinline__ float act_to_f32(act_t v) { return f16_to_f32(v); }
__device__ __forceinline__ act_t f32_to_act(float v) { return f32_to_f16(v); }
#elif ACT == ACT_BF16
typedef unsigned short act_t;
#define ACT_VEC 8
__device__ __forceinline__ float act_to_f32(act_t v) { return bf16_to_f32(v); }
__device__ __forceinline__ act_t f32_to_act(float v) { return f32_to_bf16(v); }
#else
#error "ACT must be 0 (f32), 1 (f16) or 2 (bf16)"
#endif
__device__ __forceinline__ float act_load(const act_t *p, long long i) { return act_to_f32(p[i]); }
__device__ __forceinline__ void act_store(act_t *p, long long i, float v) { p[i] = f32_to_act(v); }

/* Conversions of one 16-byte vector (ACT_VEC elements) between act_t and float, p 16-byte aligned. */
__device__ __forceinline__ void act_unpack_vec(uint4 u, float *v) {
#if ACT == ACT_F32
    v[0] = __uint_as_float(u.x); v[1] = __uint_as_float(u.y); v[2] = __uint_as_float(u.z); v[3] = __uint_as_float(u.w);
#else
    unsigned int w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
#if ACT == ACT_F16
        v[2 * k] = f16_to_f32((unsigned short)(w[k] & 0xffffu));
        v[2 * k + 1] = f16_to_f32((unsigned short)(w[k] >> 16));
#else
        v[2 * k] = bf16_to_f32((unsigned short)(w[k] & 0xffffu));
        v[2 * k + 1] = bf16_to_f32((unsigned short)(w[k] >> 16));
#endif
    }
#endif
}

__device__ __forceinline__ void act_load_vec(const act_t *p, float *v) { act_unpack_vec(*(const uint4 *)p, v); }
__device__ __forceinline__ uint4 act_pack_vec(const float *v) {
    uint4 u;
#if ACT == ACT_F32
    u.x = __float_as_uint(v[0]); u.y = __float_as_uint(v[1]); u.z = __float_as_uint(v[2]); u.w = __float_as_uint(v[3]);
#else
    unsigned int w[4];
#pragma unroll
    for (int k = 0; k < 4; k++) {
#if ACT == ACT_F16
        w[k] = (unsigned int)f32_to_f16(v[2 * k]) | ((unsigned int)f32_to_f16(v[2 * k + 1]) << 16);
#else
        w[k] = (unsigned int)f32_to_bf16(v[2 * k]) | ((unsigned int)f32_to_bf16(v[2 * k + 1]) << 16);
#endif
    }
    u.x = w[0]; u.y = w[1]; u.z = w[2]; u.w = w[3];
#endif
    return u;
}
__device__ __forceinline__ void act_store_vec(act_t *p, const float *v) { *(uint4 *)p = act_pack_vec(v); }

/* Eight consecutive channels (32 bytes of f32, 16 of f16/bf16) between act_t and float, p 16-byte aligned: the
 * unit each lane of the tensor-core epilogue loads and stores. */
#define ACT_V8 (8 / ACT_VEC) /* 16-byte vectors per 8 channels */
struct act8 {
    uint4 u[ACT_V8];
};
__device__ __forceinline__ act8 act8_load(const act_t *p) {
    act8 r;
#pragma unroll
    for (int i = 0; i < ACT_V8; i++) r.u[i] = ((const uint4 *)p)[i];
    return r;
}
__device__ __forceinline__ act8 act8_zero(void) {
    act8 r;
#pragma unroll
    for (int i = 0; i < ACT_V8; i++) r.u[i] = uint4{0u, 0u, 0u, 0u};
    return r;
}
__device__ __forceinline__ void act8_unpack(const act8 &r, float *v) {
#pragma unroll
    for (int i = 0; i < ACT_V8; i++) act_unpack_vec(r.u[i], v + i * ACT_VEC);
}
__device__ __forceinline__ act8 act8_pack(const float *v) {
    act8 r;
#pragma unroll
    for (int i = 0; i < ACT_V8; i++) r.u[i] = act_pack_vec(v + i * ACT_VEC);
    return r;
}
__device__ __forceinline__ void act8_store_packed(act_t *p, const act8 &r) {
#pragma unroll
    for (int i = 0; i < ACT_V8; i++) ((uint4 *)p)[i] = r.u[i];
}
__device__ __forceinline__ void act8_store(act_t *p, const float *v) { act8_store_packed(p, act8_pack(v)); }
/* bit e set where element e of r is positive as stored: sign clear, some other bit set (NaN too, which a ReLU's
 * output never holds). Written on the words themselves, not through a local array indexed in a loop: g++ 12 at -O1
 * with -fsanitize=bounds (the emulator's EMU_SAN build) miscompiled that loop's index and the bits came out wrong. */
__device__ __forceinline__ unsigned positive_bit(unsigned w) { return !(w >> 31) && w != 0u ? 1u : 0u; }
__device__ __forceinline__ unsigned positive_bits2(unsigned w) { /* the low half to bit 0, the high to bit 1 */
    return (!(w & 0x8000u) && (w & 0xffffu) != 0u ? 1u : 0u) | (!(w >> 31) && (w >> 16) != 0u ? 2u : 0u);
}
__device__ __forceinline__ unsigned act8_positive_bits(const act8 &r) {
#if ACT == ACT_F32
    unsigned bits = 0;
#pragma unroll
    for (int i = 0; i < ACT_V8; i++)
        bits |= (positive_bit(r.u[i].x) | positive_bit(r.u[i].y) << 1 | positive_bit(r.u[i].z) << 2 |
                 positive_bit(r.u[i].w) << 3) << (4 * i);
    return bits;
#else
    const uint4 q = r.u[0];
    return positive_bits2(q.x) | positive_bits2(q.y) << 2 | positive_bits2(q.z) << 4 | positive_bits2(q.w) << 6;
#endif
}

/* The 3x3/2 pad-1 max-pool's 2x2 blocks of inputs (rows 2k, 2k + 1, columns 2j, 2j + 1), which only windows
 * (k + wdw / 2, j + wdw % 2), wdw < 4, cover: row 2k lies in window row k alone (r = 1), row 2k + 1 in k (r = 2) and
 * k + 1 (r = 0); columns likewise. The position r * 3 + s of input `in` (2k + in / 2, 2j + in % 2) in window wdw, as
 * the argmax bytes hold it, or -1 where that window does not cover it (pool.cu's pool_backward_quad and
 * batchnorm.cu's bn_bwd_pool_* kernels). */
__device__ __forceinline__ int quad_window_pos(int in, int wdw) {
    const int dh = in / 2, dw = in % 2, dp = wdw / 2, dq = wdw % 2;
    return (dp && !dh) || (dq && !dw) ? -1 : (dh + 1 - 2 * dp) * 3 + dw + 1 - 2 * dq;
}

#if ACT == ACT_F32
/* tf32_rna: the fp32 bit pattern rounded to TF32 (10 mantissa bits), to nearest with ties away from zero, as
 * cvt.rna.tf32.f32 does; the low 13 bits come back zero, so the tensor cores see the rounded value whatever
 * they do with bits they ignore. Two integer instructions instead of a conversion. (Inf becomes NaN; NaN
 * stays NaN.) */
__device__ __forceinline__ unsigned tf32_rna(unsigned bits) { return (bits + 0x1000u) & 0xffffe000u; }

/* d += A (16x8, row-major) * B (8x8, column-major) in TF32 on the tensor cores, fp32 accumulation (sm_80+).
 * Fragments as the PTX ISA lays them out for mma.m16n8k8 .tf32 (g = lane/4, t = lane%4; one element per
 * register): a[0] A[g][t]  a[1] A[g+8][t]  a[2] A[g][t+4]  a[3] A[g+8][t+4];  b[0] B[t][g]  b[1] B[t+4][g];
 * d as for m16n8k16. With rows of 4-byte elements, ldmatrix.x4 (b16) delivers exactly these fragments: a
 * 16-byte row of a matrix is 4 elements, and lane l receives element l%4 of row l/4. */
__device__ __forceinline__ void mma_m16n8k8_tf32(float *d, const unsigned *a, const unsigned *b) {
#ifdef __CUDA_ARCH__
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    emu_mma_m16n8k8_tf32(d, a, b); /* the CPU emulator of tests/gpu/emu */
#endif
}
#endif

#if ACT != ACT_F32
/* d += A (16x16, row-major) * B (16x8, column-major) on the tensor cores, fp32 accumulation (sm_80+). Fragments
 * as the PTX ISA lays them out for mma.m16n8k16 (g = lane/4, t = lane%4; each register holds 2 elements, the
 * lower k in the low half):  a[0] A[g][2t..2t+1]  a[1] A[g+8][2t..]  a[2] A[g][2t+8..]  a[3] A[g+8][2t+8..];
 * b[0] B[2t..2t+1][g]  b[1] B[2t+8..][g];  d[0..1] D[g][2t..2t+1]  d[2..3] D[g+8][2t..2t+1]. */
__device__ __forceinline__ void mma_m16n8k16(float *d, const unsigned *a, const unsigned *b) {
#ifdef __CUDA_ARCH__
#if ACT == ACT_BF16
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
#else
    emu_mma_m16n8k16(d, a, b, ACT == ACT_BF16); /* the CPU emulator of tests/gpu/emu */
#endif
}

/* Two floats rounded (to nearest even) into one register of two act_t, a in the low half: one cvt.rn.bf16x2 /
 * f16x2 on sm_80+ (its first operand goes to the high half). */
__device__ __forceinline__ unsigned act2_pack(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    unsigned d;
#if ACT == ACT_BF16
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(b), "f"(a));
#else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(b), "f"(a));
#endif
    return d;
#else
    return (unsigned)f32_to_act(a) | ((unsigned)f32_to_act(b) << 16);
#endif
}

/* Lane-wise max of two registers of two act_t, NaN if either is NaN (PyTorch's max-pool propagates NaN). */
__device__ __forceinline__ unsigned act2_max_nan(unsigned a, unsigned b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    unsigned d;
#if ACT == ACT_BF16
    asm("max.NaN.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
#else
    asm("max.NaN.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
#endif
    return d;
#else
    unsigned d = 0;
    for (int h = 0; h < 2; h++) {
        const unsigned short ua = (unsigned short)(a >> (16 * h)), ub = (unsigned short)(b >> (16 * h));
        const float fa = act_to_f32(ua), fb = act_to_f32(ub);
        const unsigned short r = fa != fa ? ua : fb != fb ? ub : fb > fa ? ub : ua;
        d |= (unsigned)r << (16 * h);
    }
    return d;
#endif
}
#endif
#endif /* ACT */

/* ---- asynchronous copies and ldmatrix (sm_80+) --------------------------------------------------------- */
/* cp_async16: 16 bytes global -> shared without a register round trip; when !pred the destination is zero-filled
 * and src is not read (it must still be a valid address). Groups: cp_async_commit() closes the copies issued so
 * far into a group; cp_async_wait<N>() waits until at most N groups are still in flight (then __syncthreads()
 * before other threads read the data). The emulator copies synchronously. */
__device__ __forceinline__ unsigned smem_u32(const void *p) {
#ifdef __CUDA_ARCH__
    unsigned s;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(s) : "l"(p));
    return s;
#else
    (void)p;
    return 0;
#endif
}
/* the dynamic shared memory this launch was given, in bytes (a kernel checks its stage count fits) */
__device__ __forceinline__ unsigned dynamic_smem_bytes(void) {
#ifdef __CUDA_ARCH__
    unsigned s;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(s));
    return s;
#else
    return emu_rt_ptr->dyn_smem;
#endif
}
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool pred) {
#ifdef __CUDA_ARCH__
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_u32(dst)), "l"(src), "r"(pred ? 16 : 0));
#else
    if (pred) memcpy(dst, src, 16);
    else memset(dst, 0, 16);
#endif
}
/* blockIdx.x read again where it is needed: a fresh read the compiler cannot merge with the first, so a value
 * derived from it is recomputed after a long loop instead of held in a register (or spilled) across it */
__device__ __forceinline__ unsigned ctaid_x(void) {
#ifdef __CUDA_ARCH__
    unsigned v;
    asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(v));
    return v;
#else
    return blockIdx.x;
#endif
}
/* smem_addr: where a copy lands in shared memory, as the copy instruction takes it: a 32-bit .shared address on
 * the GPU (so a loader adds byte offsets to one per-thread base instead of converting a generic pointer per
 * copy), the pointer itself in the emulator. cp_async16_to is cp_async16 to such an address. */
#ifdef __CUDA_ARCH__
typedef unsigned smem_addr;
__device__ __forceinline__ smem_addr smem_addr_of(const void *p) { return smem_u32(p); }
__device__ __forceinline__ void cp_async16_to(smem_addr dst, const void *src, bool pred) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(pred ? 16 : 0));
}
#else
typedef unsigned char *smem_addr;
__device__ __forceinline__ smem_addr smem_addr_of(const void *p) { return (unsigned char *)p; }
__device__ __forceinline__ void cp_async16_to(smem_addr dst, const void *src, bool pred) { cp_async16(dst, src, pred); }
#endif
/* div_by: x / d for 0 <= x < 2^31 and d >= 1, from the host's (mul, shr) for d (src/cuda/launch.c,
 * cuda_fast_divisor): the high word of x * mul shifted right, a multiply instead of the ~20 instructions of an
 * integer division (round-up multiplier, as CUTLASS's FastDivmod) */
__device__ __forceinline__ int div_by(int x, int d, int mul, int shr) {
    return d == 1 ? x : (int)(__umulhi((unsigned)x, (unsigned)mul) >> shr);
}
/* prefetch_l2: ask for the 128-byte line holding p to be brought into L2 (a hint: no register, no wait). */
__device__ __forceinline__ void prefetch_l2(const void *p) {
#ifdef __CUDA_ARCH__
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#else
    (void)p;
#endif
}
/* pdl_enter(): the first statement of every kernel (tests/unit/test_nvrtc.c checks). On sm_90+ the backend launches
 * kernels with programmatic stream serialization (src/cuda/launch.c; drivers with cuLaunchKernelEx), so a kernel's
 * launch and the placing of its CTAs may start while the kernel before it in the stream finishes its last CTAs;
 * griddepcontrol.wait holds every thread until that kernel has completed and its writes are visible, so nothing
 * of this kernel's own work overlaps it. No kernel calls griddepcontrol.launch_dependents: the next kernel is
 * released as this one's CTAs exit (triggering at entry was slower: perf-log
 * step 35). Elsewhere (an older GPU, a launch without the attribute, the emulator) it does nothing. */
__device__ __forceinline__ void pdl_enter(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
/* grid_sync(bar): every thread of the grid waits here until all have arrived, and then sees every write made before
 * the barrier. Only in a cooperative launch (src/cuda/launch.c, cuda_launch_cooperative: all CTAs resident at once)
 * with every CTA arriving. bar: a device word shared by the launch, zero when the backend starts; each barrier adds
 * 2^31 in all (CTA 0 adds 2^31 - (CTAs - 1), the others 1), so the word's top bit flips when the last CTA arrives
 * and the low bits come back to where they were, for the next barrier or launch. The emulator parks the thread
 * while its scheduler runs the other blocks. */
__device__ __forceinline__ void grid_sync(unsigned *bar) {
#ifdef __CUDA_ARCH__
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
        const unsigned ctas = gridDim.x * gridDim.y * gridDim.z;
        const unsigned add = blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 ? 0x80000000u - (ctas - 1u) : 1u;
        unsigned old, now;
        __threadfence();
        asm volatile("atom.add.release.gpu.u32 %0, [%1], %2;" : "=r"(old) : "l"(bar), "r"(add) : "memory");
        do {
            asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(now) : "l"(bar) : "memory");
        } while (((old ^ now) & 0x80000000u) == 0u);
        __threadfence();
    }
    __syncthreads();
#else
    (void)bar;
    emu_rt_ptr->grid_sync();
#endif
}
__device__ __forceinline__ void cp_async_commit(void) {
#ifdef __CUDA_ARCH__
    asm volatile("cp.async.commit_group;");
#endif
}
template <int N> __device__ __forceinline__ void cp_async_wait(void) {
#ifdef __CUDA_ARCH__
    asm volatile("cp.async.wait_group %0;" ::"n"(N));
#endif
}
/* ---- shared-memory barriers (mbarrier, sm_80+) between warps that play different roles ------------------------
 * A barrier counts arrivals toward its expected count; the last one completes the current phase and starts the
 * next. mbar_wait(bar, parity) returns once the phase of that parity has completed: waiting for the n-th
 * completion (n = 0, 1, ...) passes parity n & 1, and is only unambiguous while completion n - 1 is known to
 * have happened (the caller's protocol must ensure it). The emulator keeps
 * {expected, pending, phase} in the barrier's 8 bytes and yields to the other fibers while it waits. */
#ifndef __CUDA_ARCH__
/* the emulator's barrier: v[0] = expected | pending arrivals << 16, v[1] = completed phases (low 11 bits) |
 * transaction bytes still expected << 11. A phase completes when both its arrivals and its bytes are in (as on
 * the GPU); more bytes completed than were announced is a broken kernel. */
static inline void emu_mbar_update(unsigned long long *bar, unsigned arrivals, unsigned tx_add, unsigned tx_done) {
    unsigned v[2];
    memcpy(v, bar, 8);
    unsigned expected = v[0] & 0xffffu, pending = (v[0] >> 16) - arrivals, phase = v[1] & 0x7ffu, tx = v[1] >> 11;
    tx += tx_add;
    if (tx < tx_done) __trap();
    tx -= tx_done;
    if (pending == 0 && tx == 0) pending = expected, phase = (phase + 1u) & 0x7ffu;
    v[0] = expected | (pending << 16);
    v[1] = phase | (tx << 11);
    memcpy(bar, v, 8);
    emu_rt_ptr->events++;
}
#endif
__device__ __forceinline__ void mbar_init(unsigned long long *bar, unsigned count) {
#ifdef __CUDA_ARCH__
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
#else
    unsigned v[2] = {count | (count << 16), 0u};
    memcpy(bar, v, 8);
#endif
}
__device__ __forceinline__ void mbar_arrive(unsigned long long *bar) {
#ifdef __CUDA_ARCH__
    asm volatile("{ .reg .b64 st; mbarrier.arrive.shared::cta.b64 st, [%0]; }" ::"r"(smem_u32(bar)) : "memory");
#else
    emu_mbar_update(bar, 1u, 0u, 0u);
#endif
}
__device__ __forceinline__ void mbar_wait(unsigned long long *bar, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 /* try_wait: the hardware suspends the thread a while */
    asm volatile("{ .reg .pred done;\n"
                 "MBAR_WAIT: mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra MBAR_WAIT; }" ::"r"(smem_u32(bar)), "r"(parity) : "memory");
#elif defined(__CUDA_ARCH__)
    asm volatile("{ .reg .pred done;\n"
                 "MBAR_WAIT: mbarrier.test_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra MBAR_WAIT; }" ::"r"(smem_u32(bar)), "r"(parity) : "memory");
#else
    for (;;) {
        unsigned v[2];
        memcpy(v, bar, 8);
        if ((v[1] & 1u) != (parity & 1u)) return; /* the phase of that parity has completed */
        emu_rt_ptr->yield();
    }
#endif
}

/* ---- the tensor memory accelerator (TMA, sm_90): bulk copies global -> shared that complete on an mbarrier ----
 * mbar_arrive_expect_tx(bar, bytes): one arrival that also announces `bytes` more to land on bar's phase, which
 * then completes only when the copies carrying them have. tma_load_tile_2d copies the box of a tiled tensor map
 * whose inner coordinate is c0, outer c1 (tma_load_tile_3d, _4d: of a rank-3, rank-4 map); tma_load_im2col_4d copies
 * Pixels-per-Column rows of Channels-per-Pixel
 * channels from an NHWC tensor map in im2col mode: from pixel (w, h) of image n, the filter base, walking the
 * map's bounding box, each row at filter tap (w + off_w, h + off_h), channels c .. (kernels/conv2d_warpspec.cu).
 * Elements outside the tensor land as zeros, and the box's full byte count completes on the barrier either way.
 * `map` is the address of a conv_tma_map in the kernel's parameter space (__grid_constant__). The emulator
 * (tests/gpu/emu) copies synchronously from its own encoding of the map (emu_tmap.h), swizzling by box row. */
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned long long *bar, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
#elif defined(__CUDA_ARCH__)
    (void)bar, (void)bytes;
    __trap();
#else
    emu_mbar_update(bar, 1u, bytes, 0u);
#endif
}
__device__ __forceinline__ void tma_load_tile_2d(const void *map, void *dst, unsigned long long *bar, int c0, int c1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 ::"r"(smem_u32(dst)), "l"(map), "r"(c0), "r"(c1), "r"(smem_u32(bar)) : "memory");
#elif defined(__CUDA_ARCH__)
    (void)map, (void)dst, (void)bar, (void)c0, (void)c1;
    __trap();
#else
    const int coord[4] = {c0, c1, 0, 0};
    emu_mbar_update(bar, 0u, 0u, emu_tma_load((const emu_tensor_map *)map, (unsigned char *)dst, coord, 0, 0));
#endif
}
/* the box of a rank-3 tiled map at coordinates (c0, c1, c2), innermost first (dgrad's filter read transposed,
 * kernels/conv2d_warpspec.cu's FILT_T) */
__device__ __forceinline__ void tma_load_tile_3d(const void *map, void *dst, unsigned long long *bar, int c0, int c1,
                                                 int c2) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4}], [%5];"
                 ::"r"(smem_u32(dst)), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(smem_u32(bar)) : "memory");
#elif defined(__CUDA_ARCH__)
    (void)map, (void)dst, (void)bar, (void)c0, (void)c1, (void)c2;
    __trap();
#else
    const int coord[4] = {c0, c1, c2, 0};
    emu_mbar_update(bar, 0u, 0u, emu_tma_load((const emu_tensor_map *)map, (unsigned char *)dst, coord, 0, 0));
#endif
}
/* the box of a rank-4 tiled map at coordinates (c0, c1, c2, c3), innermost first: an NHWC tensor's box of channels x
 * pixels x rows of one image (the halo wgrad, kernels/conv2d_wgrad_wgmma.cu) */
__device__ __forceinline__ void tma_load_tile_4d(const void *map, void *dst, unsigned long long *bar, int c0, int c1,
                                                 int c2, int c3) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6];"
                 ::"r"(smem_u32(dst)), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_u32(bar)) : "memory");
#elif defined(__CUDA_ARCH__)
    (void)map, (void)dst, (void)bar, (void)c0, (void)c1, (void)c2, (void)c3;
    __trap();
#else
    const int coord[4] = {c0, c1, c2, c3};
    emu_mbar_update(bar, 0u, 0u, emu_tma_load((const emu_tensor_map *)map, (unsigned char *)dst, coord, 0, 0));
#endif
}
__device__ __forceinline__ void tma_load_im2col_4d(const void *map, void *dst, unsigned long long *bar, int c, int w,
                                                   int h, int n, unsigned short off_w, unsigned short off_h) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6], {%7, %8};"
                 ::"r"(smem_u32(dst)), "l"(map), "r"(c), "r"(w), "r"(h), "r"(n), "r"(smem_u32(bar)), "h"(off_w), "h"(off_h)
                 : "memory");
#elif defined(__CUDA_ARCH__)
    (void)map, (void)dst, (void)bar, (void)c, (void)w, (void)h, (void)n, (void)off_w, (void)off_h;
    __trap();
#else
    const int coord[4] = {c, w, h, n};
    emu_mbar_update(bar, 0u, 0u, emu_tma_load((const emu_tensor_map *)map, (unsigned char *)dst, coord, off_w, off_h));
#endif
}
/* bring a tensor map into the copy engine's cache ahead of its first use (a hint) */
__device__ __forceinline__ void tma_prefetch_map(const void *map) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory");
#else
    (void)map;
#endif
}

/* writes of the generic proxy to shared memory (st.shared, cp.async), made visible to the async proxy that reads
 * them next (wgmma's operand reads, a TMA store's source) */
__device__ __forceinline__ void fence_proxy_async(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

/* ---- TMA stores (sm_90): shared -> global, asynchronous, tracked per thread in bulk groups ----
 * tma_store_tile_2d copies a box of shared memory (laid out as the tiled map's box: rows of box[0] elements, no
 * swizzle where the map has none) to the tensor at inner coordinate c0, outer c1; elements outside the tensor are
 * not written. The issuing thread groups its stores with bulk_commit(); bulk_wait_read<N>() returns once at most
 * N of its groups still read shared memory (the source may then be overwritten), bulk_wait_all() once every one
 * has completed. Writes of the generic proxy to the source must be made visible to the copy engine first
 * (fence_proxy_async, above). The emulator copies synchronously (emu_tmap.h's emu_tma_store). */
__device__ __forceinline__ void tma_store_tile_2d(const void *map, const void *src, int c0, int c1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
                 ::"l"(map), "r"(c0), "r"(c1), "r"(smem_u32(src)) : "memory");
#elif defined(__CUDA_ARCH__)
    (void)map, (void)src, (void)c0, (void)c1;
    __trap();
#else
    const int coord[4] = {c0, c1, 0, 0};
    emu_tma_store((const emu_tensor_map *)map, (const unsigned char *)src, coord);
#endif
}
__device__ __forceinline__ void bulk_commit(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
#endif
}
template <int N> __device__ __forceinline__ void bulk_wait_read(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
#endif
}
__device__ __forceinline__ void bulk_wait_all(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#endif
}

/* stmatrix.x4.trans (sm_90): the inverse of a transposing ldmatrix. r[j] holds, for matrix j, the two 16-bit
 * elements 2*(l%4), 2*(l%4)+1 of row l/4 (the accumulator layout, low half first); lane l gives the address of
 * memory row l%8 of matrix l/8 (16 contiguous bytes in shared memory), which receives column l%8 of that matrix:
 * its 8 elements, row 0 first. */
__device__ __forceinline__ void stmatrix_x4_trans(void *p, const unsigned *r) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};"
                 ::"r"(smem_u32(p)), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
#elif defined(__CUDA_ARCH__)
    (void)p, (void)r;
    __trap();
#else
    unsigned char *all[32];
    emu_rt_ptr->allgather(&p, all, (int)sizeof p);
    unsigned lin = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    int lane = (int)(lin & 31);
    /* this lane's elements: row lane/4, columns 2*(lane%4) + b, of each matrix j -> memory row (column) 2*(lane%4)
     * + b of matrix j, element lane/4 */
    for (int j = 0; j < 4; j++)
        for (int b = 0; b < 2; b++) memcpy(all[j * 8 + 2 * (lane % 4) + b] + 2 * (lane / 4), (const char *)&r[j] + 2 * b, 2);
    __syncwarp();
#endif
}

/* ldmatrix.x4: lane l gives the address of row l%8 of matrix l/8 (16 contiguous bytes in shared memory); r[j]
 * receives, from matrix j, the two 16-bit elements 2*(l%4), 2*(l%4)+1 of row l/4 -- the mma.m16n8k16 fragment
 * layout. TRANS (ldmatrix_x4_trans): the elements of rows 2*(l%4) and 2*(l%4)+1 in column l/4 instead, the fragment
 * of the matrix transposed. */
template <bool TRANS> __device__ __forceinline__ void ldmatrix_x4_of(unsigned *r, const void *p) {
#ifdef __CUDA_ARCH__
    if (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(smem_u32(p)));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(smem_u32(p)));
#else
    const unsigned char *all[32];
    emu_rt_ptr->allgather(&p, all, (int)sizeof p);
    unsigned lin = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    int lane = (int)(lin & 31);
    for (int j = 0; j < 4; j++)
        if (TRANS)
            for (int b = 0; b < 2; b++) memcpy((char *)&r[j] + 2 * b, all[j * 8 + 2 * (lane % 4) + b] + 2 * (lane / 4), 2);
        else
            memcpy(&r[j], all[j * 8 + lane / 4] + 4 * (lane % 4), 4);
#endif
}
__device__ __forceinline__ void ldmatrix_x4(unsigned *r, const void *p) { ldmatrix_x4_of<false>(r, p); }
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned *r, const void *p) { ldmatrix_x4_of<true>(r, p); }


/* ---- Philox-4x32-10, identical to cnn_philox (src/core/rng.c) ----------------------------------------- */

__device__ __forceinline__ void philox4x32_10(unsigned long long key, unsigned long long counter_hi,
                                              unsigned long long counter_lo, unsigned int out[4]) {
    unsigned int c0 = (unsigned int)counter_lo, c1 = (unsigned int)(counter_lo >> 32);
    unsigned int c2 = (unsigned int)counter_hi, c3 = (unsigned int)(counter_hi >> 32);
    unsigned int k0 = (unsigned int)key, k1 = (unsigned int)(key >> 32);
#pragma unroll
    for (int round = 0; round < 10; round++) {
        unsigned int hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        unsigned int hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        unsigned int n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

/* cnn_u01: uniform in [0, 1) from the top 24 bits. */
__device__ __forceinline__ float u01(unsigned int r) { return (float)(r >> 8) * (1.0f / 16777216.0f); }

/* ---- deterministic reductions ---------------------------------------------------------------------------- */

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result. `sh` holds at
 * least 32 floats. Must be reached by all threads of the block. */
__device__ __forceinline__ float block_sum(float v, float *sh) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); /* sh may still be read by a previous call */
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    float t = lane < nw ? sh[lane] : 0.0f;
    return warp_sum(t);
}

__device__ __forceinline__ double block_sum_d(double v, double *sh) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum_d(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    double t = lane < nw ? sh[lane] : 0.0;
    return warp_sum_d(t);
}

__device__ __forceinline__ float block_max(float v, float *sh) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    float t = lane < nw ? sh[lane] : -CNN_INF;
    return warp_max(t);
}

/* Grid-stride loop bounds in 64 bits. */
#define GRID_TID ((long long)blockIdx.x * blockDim.x + threadIdx.x)
#define GRID_STRIDE ((long long)gridDim.x * blockDim.x)

#endif
