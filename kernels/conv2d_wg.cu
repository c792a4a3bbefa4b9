/* conv2d_wg.cu -- forward convolution on Hopper's warpgroup MMA (wgmma.mma_async, sm_90a): the implicit GEMM,
 * operands and fused epilogue of conv2d_tc.cu, but each warpgroup (4 warps, 128 threads) issues m64 x BN x k16
 * products that read both operands straight from shared memory through matrix descriptors -- no ldmatrix, no
 * operand registers, 4x the work per instruction of mma.sync:
 *   - BK = 64: a slice row is 128 bytes, written by cp.async in the 128-byte swizzle (16-byte chunk c of row r
 *     stored at chunk c ^ (r % 8)), which is what a descriptor with swizzle mode 1 reads; stage bases are
 *     1024-byte aligned, so the hardware's address-based swizzle and ours agree; the k16 step inside a row is a
 *     32-byte advance of the descriptor's start address;
 *   - loads as in conv2d_tc.cu (C % 8 == 0, taps stepped incrementally, zero fill outside the image);
 *   - per slice: wait for its cp.async group, fence.proxy.async (the tensor cores read shared memory through the
 *     async proxy), a barrier, 4 k16 steps x MB m64 blocks of wgmma, commit, wait only for the previous slice's
 *     batch, a barrier, then the loads STAGES-1 slices ahead into the stage that batch read: the tensor cores
 *     run through the copy issue (ptxas would warn if it had to serialise them; test_nvrtc fails on that);
 *   - WGS warpgroups split the BM rows: each owns MB = BM / 64 / WGS blocks of 64 rows and all BN columns;
 *   - epilogue: conv2d_epilogue.cuh (per warp, wgmma's accumulators have mma.sync's m16n8 layout).
 * No split-K: the launcher sends it only outputs of at least one tile per SM. Without __CUDA_ARCH__ (the CPU
 * emulator of tests/gpu/emu) each thread computes its own accumulators from the same swizzled shared memory, so
 * the emulator checks the loader, the layout and the epilogue; the descriptors are checked on the GPU.
 * Specialisation (-D, src/cuda/conv2d.c): BM (64 x WGS x m64 blocks), BN (64, 128, 256), WGS, STAGES (>= 2),
 * MINB (CTAs per SM the registers must allow), ACT.
 */
#include "common.cuh"
#include "params.cuh"
#include "conv2d_epilogue.cuh"
#include "conv2d_loader.cuh"

#if !defined(BM) || !defined(BN) || !defined(WGS) || !defined(STAGES)
#error "conv2d_wg.cu needs -DBM -DBN -DWGS -DSTAGES"
#endif
#if ACT == ACT_F32
#error "conv2d_wg.cu takes F16 or BF16 activations"
#endif

#define BK 64
#define NT (128 * WGS)
#define MB (BM / 64 / WGS)      /* m64 blocks per warpgroup */
#define NT8 (BN / 8)
#define SMEM_BYTES ((BM + BN) * BK * 2 * STAGES + 1024) /* + slack to align the stages to 1024 bytes */
static_assert(MB >= 1 && BM == 64 * MB * WGS, "BM: whole m64 blocks per warpgroup");
static_assert(BN == 64 || BN == 128 || BN == 256, "wgmma n64, n128 or n256");
static_assert(STAGES >= 2, "at least double buffering");
static_assert(SMEM_BYTES <= 227 * 1024, "shared memory of one CTA");

#if ACT == ACT_BF16
#define WG_AB "bf16"
#else
#define WG_AB "f16"
#endif

__device__ __forceinline__ int swz(int row, int ch) { return conv_swz<BK>(row, ch); } /* the 128-byte swizzle */

/* Matrix descriptor of a K-major operand in the 128-byte swizzle: start address / 16 (bits 0-13), leading byte
 * offset (bits 16-29; unused for this layout, 1 by convention), stride byte offset 1024 / 16 (bits 32-45: the
 * distance between groups of 8 rows), swizzle mode 1 = 128 bytes (bits 62-63). */
__device__ __forceinline__ unsigned long long wg_desc(const void *p) {
    return (unsigned long long)((smem_u32(p) & 0x3FFFFu) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}

__device__ __forceinline__ void wg_fence(void) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
/* closes the batch just issued and waits until at most that one is still running (the previous one retired) */
__device__ __forceinline__ void wg_commit_and_wait_prev(void) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wg_wait_all(void) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#endif
}
/* cp.async wrote the stage through the generic proxy; the tensor cores read it through the async proxy */
__device__ __forceinline__ void fence_proxy_async(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
/* keeps the compiler from moving accumulator reads or writes across the asynchronous MMA */
__device__ __forceinline__ void acc_fence(float &x) {
#if defined(__CUDA_ARCH__)
    asm volatile("" : "+f"(x)::"memory");
#else
    (void)x;
#endif
}

/* every accumulator of a thread, in its register: zeroed; or fenced against the asynchronous MMA writing it */
__device__ __forceinline__ void acc_zero(float (&acc)[MB][NT8][4]) {
#pragma unroll
    for (int b = 0; b < MB; b++)
#pragma unroll
        for (int j = 0; j < NT8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[b][j][e] = 0.0f;
}
__device__ __forceinline__ void acc_fence_all(float (&acc)[MB][NT8][4]) {
#pragma unroll
    for (int b = 0; b < MB; b++)
#pragma unroll
        for (int j = 0; j < NT8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc_fence(acc[b][j][e]);
}

#if BN == 64
__device__ __forceinline__ void wgmma_n64(float *d, unsigned long long da, unsigned long long db, int accumulate) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." WG_AB "." WG_AB " "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
                 "%32, %33, p, 1, 1, 0, 0; }\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "r"(accumulate));
#elif defined(__CUDA_ARCH__) /* sm_80 .. sm_90 without the a: never launched (src/cuda/conv2d.c, tc_usable) */
    (void)d, (void)da, (void)db, (void)accumulate;
    __trap();
#else
    (void)d, (void)da, (void)db, (void)accumulate;
#endif
}
#define WGMMA wgmma_n64
#elif BN == 128
__device__ __forceinline__ void wgmma_n128(float *d, unsigned long long da, unsigned long long db, int accumulate) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." WG_AB "." WG_AB " "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
                 "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
                 "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
                 "%64, %65, p, 1, 1, 0, 0; }\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(accumulate));
#elif defined(__CUDA_ARCH__) /* sm_80 .. sm_90 without the a: never launched (src/cuda/conv2d.c, tc_usable) */
    (void)d, (void)da, (void)db, (void)accumulate;
    __trap();
#else
    (void)d, (void)da, (void)db, (void)accumulate;
#endif
}
#define WGMMA wgmma_n128
#else
__device__ __forceinline__ void wgmma_n256(float *d, unsigned long long da, unsigned long long db, int accumulate) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32." WG_AB "." WG_AB " "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
                 "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
                 "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"
                 "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"
                 "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"
                 "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,"
                 "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, "
                 "%128, %129, p, 1, 1, 0, 0; }\n"
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
                 : "l"(da), "l"(db), "r"(accumulate));
#elif defined(__CUDA_ARCH__) /* sm_80 .. sm_90 without the a: never launched (src/cuda/conv2d.c, tc_usable) */
    (void)d, (void)da, (void)db, (void)accumulate;
    __trap();
#else
    (void)d, (void)da, (void)db, (void)accumulate;
#endif
}
#define WGMMA wgmma_n256
#endif

#ifndef MINB
#define MINB 1 /* CTAs per SM the register allocation must leave room for */
#endif

extern "C" __global__ void __launch_bounds__(NT, MINB) conv2d_fprop_wg(const conv_args a) {
#ifdef __CUDA_ARCH__
    extern __shared__ __align__(128) unsigned char smem_raw[];
#else
    __shared__ __align__(128) unsigned char smem_raw[SMEM_BYTES]; /* the emulator: static is per block */
#endif
    unsigned char *smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
    /* stage s = its A tile then its B tile, so a launch with fewer slices than STAGES may pass less shared memory:
     * As[s] and Bs[s] step by a whole stage */
    act_t(*As)[(BM + BN) * BK] = reinterpret_cast<act_t(*)[(BM + BN) * BK]>(smem);
    act_t(*Bs)[(BM + BN) * BK] = reinterpret_cast<act_t(*)[(BM + BN) * BK]>(smem + (size_t)BM * BK * 2);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
    /* tile order: the N tiles of one row block are consecutive, so they run together and its A rows come from
     * DRAM once (then L2) instead of once per N tile. CTA b takes tiles b, b + gridDim.x, ... (one when the grid
     * has a CTA per tile; a persistent grid of a few CTAs per SM takes several, src/cuda/conv2d.c) */
    const int n_tiles = (a.gn + BN - 1) / BN;
    const int tiles = ((a.gm + BM - 1) / BM) * n_tiles;
    const int ktiles = (a.gk + BK - 1) / BK;
    const int my_tiles = (int)blockIdx.x < tiles ? (tiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
    const int total = my_tiles * ktiles; /* slices this CTA multiplies, over all its tiles (host: < 2^31) */
    const int wrow0 = wg * MB * 64;      /* this warpgroup's first row in a tile */
    /* slice g goes to stage g % STAGES: the launch must have room for every stage this CTA reaches (the host
     * sizes a CTA-per-tile launch of a short reduction to its slices, a persistent one to all STAGES) */
    if (total > 0 && dynamic_smem_bytes() < (unsigned)((total < STAGES ? total : STAGES) * (BM + BN) * BK * 2 + 1024)) __trap();
    auto tile_origin = [&](int i, int &m0, int &n0) { /* of this CTA's i-th tile */
        const int t = (int)blockIdx.x + i * (int)gridDim.x;
        m0 = (t / n_tiles) * BM, n0 = (t % n_tiles) * BN;
    };

    /* the producer side: slices are loaded in order over all this CTA's tiles; at a tile's first slice the
     * loader moves to that tile and the residual its epilogue will add is prefetched into L2 */
    conv_tile_loader<BM, BN, BK, NT> ld;
    int p_tile = 0, p_kt = 0;
    auto load_slice = [&](int stage) {
        if (p_kt == 0) {
            int m0, n0;
            tile_origin(p_tile, m0, n0);
            ld.init(a, m0, n0, tid, 0);
#pragma unroll
            for (int b = 0; b < MB; b++) tile_prefetch_residual<NT8>(a, m0 + wrow0 + b * 64 + (warp & 3) * 16, n0, lane);
        }
        ld.load(a, As[stage], Bs[stage]);
        if (++p_kt == ktiles) p_kt = 0, p_tile++;
    };

    float acc[MB][NT8][4];
    acc_zero(acc);

    auto compute_slice = [&](int stage) {
#if defined(__CUDA_ARCH__)
        wg_fence();
#pragma unroll
        for (int k16 = 0; k16 < BK / 16; k16++) {
            const unsigned long long db = wg_desc(&Bs[stage][0]) + (unsigned long long)(k16 * 2); /* +32 bytes */
#pragma unroll
            for (int b = 0; b < MB; b++)
                WGMMA(&acc[b][0][0], wg_desc(&As[stage][(wrow0 + b * 64) * BK]) + (unsigned long long)(k16 * 2), db, 1);
        }
        wg_commit_and_wait_prev();
        acc_fence_all(acc);
#else /* the emulator: this thread's accumulators, each a 64-term dot product over the swizzled slice */
        const int g = lane >> 2, t4 = lane & 3;
        for (int b = 0; b < MB; b++)
            for (int j = 0; j < NT8; j++)
                for (int e = 0; e < 4; e++) {
                    const int r = wrow0 + b * 64 + (warp & 3) * 16 + g + (e >> 1) * 8, c = j * 8 + 2 * t4 + (e & 1);
                    float s = 0.0f;
                    for (int k = 0; k < BK; k++)
                        s += act_to_f32(As[stage][swz(r, k >> 3) + (k & 7)]) * act_to_f32(Bs[stage][swz(c, k >> 3) + (k & 7)]);
                    acc[b][j][e] += s;
                }
#endif
    };

    /* ---- the pipeline: STAGES-1 slices loading, one wgmma batch left running while the next is issued ----
     * Iteration g (the g-th slice of this CTA, over all its tiles): wait for slice g's copies, make them visible
     * to the async proxy, barrier; issue slice g's batch and wait only for slice g-1's, then a second barrier:
     * every warpgroup has retired slice g-1's batch, so its stage, (g-1) % STAGES, receives slice g+STAGES-1
     * while the tensor cores work on slice g. After a tile's last slice: wait for everything, the epilogue
     * (registers to global memory; the next tile's first slices are loading meanwhile), accumulators to zero. */
#pragma unroll
    for (int st = 0; st < STAGES - 1; st++) {
        if (st < total) load_slice(st);
        cp_async_commit();
    }
    int c_tile = 0, c_kt = 0;
    for (int g = 0; g < total; g++) {
        cp_async_wait<STAGES - 2>();
        fence_proxy_async();
        __syncthreads();
        compute_slice(g % STAGES);
        __syncthreads();
        const int pf = g + STAGES - 1;
        if (pf < total) load_slice(pf % STAGES);
        cp_async_commit();
        if (++c_kt == ktiles) {
            wg_wait_all();
            acc_fence_all(acc);
            int m0, n0;
            tile_origin(c_tile, m0, n0);
#pragma unroll
            for (int b = 0; b < MB; b++) tile_epilogue<NT8>(a, acc[b], m0 + wrow0 + b * 64 + (warp & 3) * 16, n0, lane);
            acc_zero(acc);
            c_kt = 0, c_tile++;
        }
    }
    cp_async_wait<0>();
}
