/* conv2d_first.cu -- forward convolution of a network's first layer, where the image has 3 channels: the ResNet stem
 * (3->64 7x7/2 pad 3), optionally with the 3x3/2 pad 1 max-pool after it fused in, and the 3x3/1 pad 1 first conv
 * of VGG and of the CIFAR ResNets. F16/BF16 activations, fp32 accumulation on the tensor cores (mma.sync
 * m16n8k16, sm_80+). The general kernels need C % 8 == 0 and reach these layers only through rewritten operands
 * (channels zero-padded to 8, or space-to-depth), multiplying 2.5x the useful products and reading and writing
 * the rewritten copies; this kernel reads the 3-channel image as it is.
 *
 * Shape constants are baked in (-D, src/cuda/conv2d_first.c): FC (channels), FR x FS (filter), FST (stride), FPD
 * (padding), the tile, POOL, WARPS, WN, MINB. K (output channels) is any multiple of 8, in blocks of 64 per CTA.
 *
 * A CTA loops over output tiles (persistent grid). Per tile:
 *   1. the input patch the tile reads (IH rows x IW pixels x FC channels, zero outside the image) goes into shared
 *      memory, each patch row PITCH elements long (even). Its global loads were issued into registers before the
 *      previous tile's multiply (all at once: a loop of dependent 2-byte loads would cost a memory latency each),
 *      so the multiply hides them;
 *   2. implicit GEMM straight from the patch. The reduction runs over filter rows r and, within a row, over u <
 *      FS*FC (the row's taps and channels, contiguous in the patch) in groups of 8, the last group zero-padded:
 *      k' = (r*NG + grp)*8 + u8. A k16 step of mma.m16n8k16 is two groups, and lane t4 of each group holds the
 *      pair u8 = 2*t4, 2*t4+1, so the pair of pixel m sits at patch[row_base(m) + 2*t4 + r*PITCH + grp*8]: a
 *      per-thread base plus a compile-time offset, no index arithmetic in the loop. Pairs past the filter row are
 *      masked to zero in A as well as in B, so a non-finite input never leaks into a neighbour. Each thread keeps
 *      its B fragments (the filter) and epilogue vectors in registers for the whole kernel;
 *   3. epilogue: y = relu?(acc * scale + shift) rounded to act_t (two per cvt), into a shared-memory tile of the
 *      conv's output (rows of 64 channels + 8 of padding: conflict-free);
 *   4. out: 16-byte stores of 8 channels per thread; or, with POOL, the 3x3/2 pad 1 max of that tile in packed
 *      pairs (max.NaN: NaN propagates, as in PyTorch); the conv tile covers the pool tile's windows, (2*PP+1) x
 *      (2*PQ+1) conv pixels from (2*pp0-1, 2*pq0-1), and conv pixels outside the conv output count as -inf,
 *      PyTorch's max-pool padding.
 */
#include "common.cuh"
#include "params.cuh"

#if !defined(ACT) || ACT == ACT_F32
#error "conv2d_first.cu multiplies F16/BF16 operands (m16n8k16)"
#endif
#if !defined(FC) || !defined(FR) || !defined(FS) || !defined(FST) || !defined(FPD) || !defined(WARPS) || !defined(WN)
#error "conv2d_first.cu needs -DFC -DFR -DFS -DFST -DFPD -DWARPS -DWN and a tile"
#endif
#ifndef MINB
#define MINB 1
#endif
#ifndef POOL
#define POOL 0
#endif
#if POOL
#if !defined(PP) || !defined(PQ)
#error "POOL needs the pool tile -DPP -DPQ"
#endif
#define TP (2 * PP + 1) /* conv rows of the tile */
#define TQ (2 * PQ + 1)
#else
#if !defined(TP) || !defined(TQ)
#error "conv2d_first.cu needs the conv tile -DTP -DTQ"
#endif
#endif

#define NTHREADS (32 * WARPS)
#define NW (64 / WN)             /* output channels per warp */
#define NB8 (NW / 8)             /* its n8 tiles */
#define SC (FS * FC)              /* reduction elements of one filter row */
#define NG ((SC + 7) / 8)         /* its groups of 8 */
#define KGP (FR * NG * 8)         /* the padded reduction */
#define K16 ((KGP + 15) / 16)     /* its k16 steps (the last may hold a group past the filter: zero) */
#define MROWS (TP * TQ)          /* conv pixels of a tile */
#define MT16 ((MROWS + 15) / 16) /* m16 tiles */
#define IH ((TP - 1) * FST + FR) /* the patch */
#define IW ((TQ - 1) * FST + FS)
#define PITCH ((IW * FC + 1) & ~1)
#define PATCH_EL ((IH * PITCH + 16 + 7) & ~7) /* + what the last group of the last row reads past it */
#define OSTR 72                               /* act_t per conv pixel in the output tile */
#define SMEM_BYTES ((PATCH_EL + MROWS * OSTR) * 2)
#define COLS (IW * FC)              /* elements of a patch row */
#define RG (NTHREADS / COLS)         /* patch rows loaded side by side */
#define PITER ((IH + RG - 1) / RG)   /* patch elements per thread */
#define PAIR32 ((FST * FC) % 2 == 0) /* every pair 4-byte aligned (the stride-2 stem): one load per pair */
#if ACT == ACT_BF16
#define NEG_INF2 0xff80ff80u /* two -inf */
#else
#define NEG_INF2 0xfc00fc00u
#endif
static_assert(WARPS % WN == 0 && 64 % WN == 0 && NB8 >= 1, "warps split the 64 channels of a block evenly");
static_assert(SMEM_BYTES <= 227 * 1024, "shared memory of one CTA");
static_assert(COLS <= NTHREADS, "a patch row is loaded by one pass of the threads");

__device__ __forceinline__ unsigned ld_pair(const act_t *p) {
#if PAIR32
    return *(const unsigned *)p;
#else
    return (unsigned)p[0] | ((unsigned)p[1] << 16);
#endif
}

/* patch offset of conv pixel m of the tile (rows past the tile read pixel 0; their results are dropped) */
__device__ __forceinline__ int row_base(int m) {
    if (m >= MROWS) return 0;
    const int pl = m / TQ, ql = m - pl * TQ;
    return pl * FST * PITCH + ql * FST * FC;
}

extern "C" __global__ void __launch_bounds__(NTHREADS, MINB) conv2d_fprop_first(const conv_args a) {
    pdl_enter();
#ifdef __CUDA_ARCH__
    extern __shared__ __align__(16) unsigned char smem_raw[];
#else
    __shared__ __align__(16) unsigned char smem_raw[SMEM_BYTES]; /* the emulator: static is per block */
#endif
    act_t *patch = (act_t *)smem_raw;
    act_t *otile = patch + PATCH_EL;
    const act_t *x = (const act_t *)a.x, *w = (const act_t *)a.wt;
    act_t *y = (act_t *)a.out;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t4 = lane & 3;
    const int wn = warp % WN, wm = warp / WN;

    /* the mask of this lane's pair in a row's last group (all ones where the group is full) */
    const int ulast = (NG - 1) * 8 + 2 * t4;
    const unsigned mlast = (ulast < SC ? 0x0000ffffu : 0u) | (ulast + 1 < SC ? 0xffff0000u : 0u);

    /* tiles: spatial tiles of one image, images, then 64-channel blocks slowest (a CTA rarely changes block) */
#if POOL
    const int OP = a.p2, OQ = a.q2, TPO = PP, TQO = PQ; /* the pool's output and its tile */
#else
    const int OP = a.p, OQ = a.q, TPO = TP, TQO = TQ;
#endif
    const int tiles_q = (OQ + TQO - 1) / TQO, tiles_p = (OP + TPO - 1) / TPO;
    const int per_block = tiles_p * tiles_q * a.n, kblocks = (a.gn + 63) / 64;
    const int total = per_block * kblocks; /* the launcher checks it fits an int */
    struct tile_pos {
        int kb, img, tp, tq, p0, q0; /* p0, q0: the conv pixel of the tile's (0, 0) */
    };
    auto decode = [&](int t) {
        tile_pos d;
        d.kb = t / per_block;
        int rest = t - d.kb * per_block;
        d.img = rest / (tiles_p * tiles_q);
        rest -= d.img * tiles_p * tiles_q;
        d.tp = rest / tiles_q, d.tq = rest - d.tp * tiles_q;
#if POOL
        d.p0 = 2 * d.tp * PP - 1, d.q0 = 2 * d.tq * PQ - 1;
#else
        d.p0 = d.tp * TP, d.q0 = d.tq * TQ;
#endif
        return d;
    };
    /* a tile's patch: thread (rs, col) = (tid / COLS, tid % COLS) loads element col of patch rows rs, rs + RG, ...
     * (PITER of them), zero outside the image; all the loads are issued before any is used, into registers
     * that the previous tile's multiply then hides. The pitch padding and the tail stay zero from the start. */
    act_t pv[PITER];
    const int rs = tid / COLS, col = tid - rs * COLS;
    const int in_h = a.h, in_w = a.w;
    const long long rstride = (long long)RG * in_w * FC; /* elements between the rows a thread loads */
    auto patch_load = [&](int t) {
        const tile_pos d = decode(t);
        const int h0 = d.p0 * FST - FPD + rs, w0 = d.q0 * FST - FPD, ww = w0 + col / FC;
        const bool cin = rs < RG && (unsigned)ww < (unsigned)in_w;
        const act_t *xr = x + (((long long)d.img * in_h + h0) * in_w + w0) * FC + col;
#pragma unroll
        for (int i = 0; i < PITER; i++) {
            const bool ok = cin && rs + i * RG < IH && (unsigned)(h0 + i * RG) < (unsigned)in_h;
            pv[i] = ok ? *xr : (act_t)0;
            xr += rstride;
        }
    };
    for (int e = tid; e < PATCH_EL; e += NTHREADS) patch[e] = 0;
    __syncthreads(); /* before any thread stores its first patch elements */

    unsigned bfrag[K16][NB8][2];
    float esc[NB8][2], esh[NB8][2];
    int cur_kb = -1;
    if ((int)blockIdx.x < total) patch_load(blockIdx.x);
    for (int t = blockIdx.x; t < total; t += gridDim.x) {
        const tile_pos d = decode(t);
        const int kb = d.kb, img = d.img, p0 = d.p0, q0 = d.q0;
        if (kb != cur_kb) { /* the filter's B fragments, b[e] = B[k'][n] for this lane's pair of group 2j + e and
                             * column n; the scale and shift of its accumulator columns */
            cur_kb = kb;
#pragma unroll
            for (int jn = 0; jn < NB8; jn++) {
                const int n = kb * 64 + wn * NW + jn * 8 + g;
#pragma unroll
                for (int j = 0; j < K16; j++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const int G = 2 * j + e, r = G / NG, u = (G % NG) * 8 + 2 * t4;
                        unsigned lo = 0, hi = 0;
                        const long long o = (long long)n * FR * SC + r * SC + u;
                        if (n < a.gn && r < FR && u < SC) lo = w[o];
                        if (n < a.gn && r < FR && u + 1 < SC) hi = w[o + 1];
                        bfrag[j][jn][e] = lo | (hi << 16);
                    }
                const int nc = kb * 64 + wn * NW + jn * 8 + 2 * t4; /* K % 8 == 0: both columns or neither */
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    esc[jn][c] = nc < a.gn && a.scale ? a.scale[nc + c] : 1.0f;
                    esh[jn][c] = nc < a.gn && a.shift ? a.shift[nc + c] : 0.0f;
                }
            }
        }

        /* 1. the patch (loaded during the previous tile), and the next tile's loads issued */
#pragma unroll
        for (int i = 0; i < PITER; i++)
            if (rs < RG && rs + i * RG < IH) patch[(rs + i * RG) * PITCH + col] = pv[i];
        __syncthreads();
        if (t + (int)gridDim.x < total) patch_load(t + gridDim.x);

        /* 2.-3. the warp's m16 tiles, all K16 steps each, then the epilogue into the output tile */
        for (int mt = wm; mt < MT16; mt += WARPS / WN) {
            float acc[NB8][4];
#pragma unroll
            for (int jn = 0; jn < NB8; jn++) acc[jn][0] = acc[jn][1] = acc[jn][2] = acc[jn][3] = 0.0f;
            const act_t *pa = patch + row_base(mt * 16 + g) + 2 * t4, *pb = patch + row_base(mt * 16 + g + 8) + 2 * t4;
#pragma unroll
            for (int j = 0; j < K16; j++) {
                unsigned af[4];
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int G = 2 * j + e, r = G / NG, grp = G % NG, off = r * PITCH + grp * 8;
                    if (r >= FR) { /* past the filter (compile time): zero */
                        af[2 * e] = af[2 * e + 1] = 0u;
                    } else if (grp == NG - 1 && SC % 8 != 0) {
                        af[2 * e] = ld_pair(pa + off) & mlast;
                        af[2 * e + 1] = ld_pair(pb + off) & mlast;
                    } else {
                        af[2 * e] = ld_pair(pa + off);
                        af[2 * e + 1] = ld_pair(pb + off);
                    }
                }
#pragma unroll
                for (int jn = 0; jn < NB8; jn++) mma_m16n8k16(acc[jn], af, bfrag[j][jn]);
            }
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int m = mt * 16 + g + 8 * h;
                if (m >= MROWS) continue;
#if POOL
                const int pl = m / TQ, ql = m - pl * TQ;
                const bool inside = p0 + pl >= 0 && p0 + pl < a.p && q0 + ql >= 0 && q0 + ql < a.q;
#endif
#pragma unroll
                for (int jn = 0; jn < NB8; jn++) {
                    float v0 = acc[jn][2 * h] * esc[jn][0] + esh[jn][0], v1 = acc[jn][2 * h + 1] * esc[jn][1] + esh[jn][1];
                    if (a.relu) v0 = fmaxf(v0, 0.0f), v1 = fmaxf(v1, 0.0f);
                    unsigned pk = act2_pack(v0, v1);
#if POOL
                    if (!inside) pk = NEG_INF2;
#endif
                    *(unsigned *)(otile + m * OSTR + wn * NW + jn * 8 + 2 * t4) = pk;
                }
            }
        }
        __syncthreads();

        /* 4. out, 8 channels (16 bytes) per thread and step */
#if POOL
        for (int e = tid; e < PP * PQ * 8; e += NTHREADS) {
            const int c8 = e & 7, px = e >> 3, pl = px / PQ, ql = px - pl * PQ;
            const int pp = d.tp * PP + pl, pq = d.tq * PQ + ql, n = kb * 64 + c8 * 8;
            if (pp >= OP || pq >= OQ || n >= a.gn) continue;
            uint4 best = *(const uint4 *)(otile + (2 * pl * TQ + 2 * ql) * OSTR + c8 * 8);
#pragma unroll
            for (int dr = 0; dr < 3; dr++)
#pragma unroll
                for (int dc = 0; dc < 3; dc++) {
                    if (dr == 0 && dc == 0) continue;
                    const uint4 v = *(const uint4 *)(otile + ((2 * pl + dr) * TQ + 2 * ql + dc) * OSTR + c8 * 8);
                    best.x = act2_max_nan(best.x, v.x), best.y = act2_max_nan(best.y, v.y);
                    best.z = act2_max_nan(best.z, v.z), best.w = act2_max_nan(best.w, v.w);
                }
            *(uint4 *)(y + (((long long)img * OP + pp) * OQ + pq) * a.gn + n) = best;
        }
#else
        for (int e = tid; e < MROWS * 8; e += NTHREADS) {
            const int c8 = e & 7, m = e >> 3, pl = m / TQ, ql = m - pl * TQ;
            const int p = p0 + pl, q = q0 + ql, n = kb * 64 + c8 * 8;
            if (p >= OP || q >= OQ || n >= a.gn) continue;
            *(uint4 *)(y + (((long long)img * OP + p) * OQ + q) * a.gn + n) = *(const uint4 *)(otile + m * OSTR + c8 * 8);
        }
#endif
        /* no barrier needed here: every warp finished reading the patch before the barrier above, so the next
         * iteration may store into it; the output tile is written again only after the next patch barrier,
         * which a thread reaches after its stores from it */
    }
}
