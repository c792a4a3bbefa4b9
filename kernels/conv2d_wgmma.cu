/* conv2d_wgmma.cu -- forward convolution on Hopper's warpgroup MMA (wgmma.mma_async, sm_90a): the implicit GEMM,
 * operands and fused epilogue of conv2d_pipelined.cu, but each warpgroup (4 warps, 128 threads) issues m64 x BN x k16
 * products that read both operands straight from shared memory through matrix descriptors -- no ldmatrix, no
 * operand registers, 4x the work per instruction of mma.sync:
 *   - BK = 64: a slice row is 128 bytes, written by cp.async in the 128-byte swizzle (16-byte chunk c of row r
 *     stored at chunk c ^ (r % 8)), which is what a descriptor with swizzle mode 1 reads; stage bases are
 *     1024-byte aligned, so the hardware's address-based swizzle and ours agree; the k16 step inside a row is a
 *     32-byte advance of the descriptor's start address;
 *   - loads as in conv2d_pipelined.cu (C % 8 == 0, taps stepped incrementally, zero fill outside the image);
 *   - per slice: wait for its cp.async group, fence.proxy.async (the tensor cores read shared memory through the
 *     async proxy), a barrier, 4 k16 steps x MB m64 blocks of wgmma, commit, wait only for the previous slice's
 *     batch, a barrier, then the loads STAGES-1 slices ahead into the stage that batch read: the tensor cores
 *     run through the copy issue (ptxas would warn if it had to serialise them; test_nvrtc fails on that);
 *   - WGS warpgroups split the BM rows: each owns MB = BM / 64 / WGS blocks of 64 rows and all BN columns;
 *   - epilogue: conv2d_epilogue.cuh's tile_epilogue_smem (per warp; wgmma's accumulators have mma.sync's m16n8
 *     layout), its transpose through the warp's own rows of the stage the tile's last slice came from.
 * No split-K: the launcher sends it only outputs of at least one tile per SM. Without __CUDA_ARCH__ (the CPU
 * emulator of tests/gpu/emu) each thread computes its own accumulators from the same swizzled shared memory, so
 * the emulator checks the loader, the layout and the epilogue; the descriptors are checked on the GPU.
 * Specialisation (-D, src/cuda/conv2d.c): BM (64 x WGS x m64 blocks), BN (64, 128, 256), WGS, STAGES (>= 2),
 * MINB (CTAs per SM the registers must allow), ACT; OUT_PHASE (conv2d_epilogue.cuh).
 */
#include "common.cuh"
#include "params.cuh"
#include "conv2d_epilogue.cuh"
#include "conv2d_loader.cuh"
#include "wgmma.cuh"

#if !defined(BM) || !defined(BN) || !defined(WGS) || !defined(STAGES)
#error "conv2d_wgmma.cu needs -DBM -DBN -DWGS -DSTAGES"
#endif
#if ACT == ACT_F32
#error "conv2d_wgmma.cu takes F16 or BF16 activations"
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

#ifndef MINB
#define MINB 1 /* CTAs per SM the register allocation must leave room for */
#endif

extern "C" __global__ void __launch_bounds__(NT, MINB) conv2d_fprop_wgmma(const conv_args a) {
    pdl_enter();
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
        wg_multiply_slice<MB, BN>(acc, &As[stage][wrow0 * BK], &Bs[stage][0], warp & 3, lane);
        wg_commit_and_wait_prev();
        acc_fence_all(acc);
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
            /* the scratch of the epilogue: this warp's own 16 rows of the stage just multiplied (its 1 KB), which
             * the next iteration refills only after its first barrier (the emulator's per-thread multiply reads
             * just those rows of A, so the epilogue's first __syncwarp also covers it) */
            float *scr = (float *)((unsigned char *)&As[g % STAGES][0] + (size_t)(wrow0 + (warp & 3) * 16) * BK * 2);
#pragma unroll
            for (int b = 0; b < MB; b++) tile_epilogue_smem<NT8>(a, acc[b], m0 + wrow0 + b * 64 + (warp & 3) * 16, n0, lane, scr);
            acc_zero(acc);
            c_kt = 0, c_tile++;
        }
    }
    cp_async_wait<0>();
}
