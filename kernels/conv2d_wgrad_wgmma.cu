/* conv2d_wgrad_wgmma.cu -- the filter gradient on Hopper's wgmma (sm_90a): dW[K][R*S*C] = dy^T x im2col(x), the
 * reduction running over the N*P*Q output pixels (params.cuh's wgrad view: gm = K, gn = R*S*C, gk = N*P*Q).
 *
 * Operands, one reduction slice = 64 output pixels:
 *   A  dy rows of the slice's pixels, BM channels from m0: BM/64 boxes of 64 pixels x 64 channels, copied by TMA
 *      from dy as an (N*P*Q, K) matrix (tiled map, targs.b_map);
 *   B  the same pixels' input rows at each of the tile's column blocks: a column block is 64 channels of one filter
 *      tap (C % 64 == 0, so column n = (r*S + s)*C + c and a block never straddles a tap), copied by TMA from x in
 *      im2col mode (targs.a_map: 64 pixels per copy from the slice's first pixel at tap (r, s); zeros where the tap
 *      falls in the padding or past the last image); a 1x1 stride-1 unpadded conv's x by the tiled map of its
 *      (N*H*W, C) rows instead (a.x_rows: the im2col copies of small images were the slower, perf-log step 72).
 * Both land in the 128-byte swizzle with the reduction along the rows, which is wgmma's MN-major (transposed)
 * layout for both operands (wgmma.cuh's wg_multiply_slice with TA = TB = 1): nothing is rearranged on the way.
 * Pixels past N*P*Q in the last slice read zero rows of dy (the tiled map's out-of-bounds fill), so they add 0.
 *
 * Roles: a producer warp whose one thread issues the copies into a ring of STAGES stages (full[s] completes on the
 * copies' byte count, empty[s] on the 8 consumer warps' releases), and two consumer warpgroups sharing each tile:
 * with BM >= 128 consumer i multiplies m64 blocks [i*MB, (i+1)*MB) against all BN columns; with BM = 64 the one m64
 * block against columns [i*BN/2, (i+1)*BN/2).
 * Grid: x = output tiles (BM x BN, column blocks of a row block adjacent), y = reduction splits of
 * a.ktiles_per_split slices each (wg_split_of: or a batch of slices' splits). With one split a CTA writes its tile of
 * dW (float32, overwritten); otherwise its partial into a.ws[split] and conv2d_wgrad_wgmma_reduce adds the splits in
 * order (deterministic, no atomics).
 * Specialisation (-D, src/cuda/conv2d_wgrad.c): BM (64, 128, 256), BN (64 .. 256), STAGES, ACT (F16/BF16).
 *
 * The halo kernel (-DHALO_QB, HALO_HB: the 3x3 stride-1 convs, perf-log step 89) reads x once per slice instead of
 * once per tap: a slice is a block of HB output rows x QB output columns of one image, its reduction index k =
 * (row, column) of the block. dy arrives as that box (QB*HB rows of 64 channels; zeros past P and Q); x as three
 * boxes of HB + 2 rows x QB columns, box s shifted by tap column s, so that tap (r, s) of index k is row k + r*QB of
 * box s. A consumer warpgroup per tap column s multiplies dy (m64) against the three taps (0..2, s) at once: n192,
 * chunks QB rows apart (QB % 8 == 0 keeps every chunk on the swizzle's 1 KB period). The CTA holds all nine taps of
 * one 64-channel block of x against 64 channels of dy; per slice it brings (HB + 3 (HB + 2)) QB rows for 576 x
 * QB*HB products where the im2col kernel brings (1 + taps) x 64 rows per 64 x 64 taps.
 */
#include "common.cuh"
#include "params.cuh"
#include "conv2d_loader.cuh"
#include "wgmma.cuh"

#if ACT == ACT_F32
#error "conv2d_wgrad_wgmma.cu takes F16 or BF16 activations"
#endif

#ifndef HALO_QB /* the im2col kernel */
#if !defined(BM) || !defined(BN) || !defined(STAGES)
#error "conv2d_wgrad_wgmma.cu needs -DBM -DBN -DSTAGES (or -DHALO_QB -DHALO_HB -DSTAGES)"
#endif

#define BK 64                     /* output pixels per slice */
#define BOX (64 * BK)             /* elements of one 64 x 64 box */
#define NT 384                    /* producer warpgroup + two consumer warpgroups */
#define CM (BM == 64 ? 64 : BM / 2) /* a consumer's rows (channels of dy) */
#define CN (BM == 64 ? BN / 2 : BN) /* and columns */
#define MB (CM / 64)
#define STAGE_ELEMS ((BM + BN) * BK)
#define SMEM_BYTES (STAGE_ELEMS * 2 * STAGES + 1024) /* + slack to align the ring to 1 KB */
#define ENTRY_REGS 168
#define PRODUCER_REGS 40
#define CONSUMER_REGS ((ENTRY_REGS + (ENTRY_REGS - PRODUCER_REGS) / 2) & ~7)
static_assert(128 * PRODUCER_REGS + 256 * CONSUMER_REGS <= NT * ENTRY_REGS, "registers handed back cover those taken");
static_assert(BM == 64 || BM == 128 || BM == 256, "BM: 64, 128 or 256 channels of dy");
static_assert(BN % 64 == 0 && (CN == 64 || CN == 128 || CN == 192 || CN == 256), "a consumer's columns: a wgmma n");
static_assert(MB * CN / 2 <= 128, "accumulators of a consumer thread");
static_assert(STAGES >= 2 && SMEM_BYTES <= 227 * 1024, "shared memory of one CTA");
#else /* the halo kernel: 3x3, stride 1 */
#if !defined(HALO_HB) || !defined(STAGES)
#error "the halo wgrad needs -DHALO_QB -DHALO_HB -DSTAGES"
#endif
#define QB HALO_QB
#define HB HALO_HB
#define KR (QB * HB)                 /* reduction rows (output pixels of the block) per slice */
#define XR ((HB + 2) * QB)           /* rows of one shifted x box */
#define NT 512                       /* producer warpgroup + one consumer warpgroup per tap column */
#define STAGE_ELEMS ((KR + 3 * XR) * 64)
#define SMEM_BYTES (STAGE_ELEMS * 2 * STAGES + 1024)
#define ENTRY_REGS 128
#define PRODUCER_REGS 40
#define CONSUMER_REGS 152
static_assert(128 * PRODUCER_REGS + 384 * CONSUMER_REGS <= NT * ENTRY_REGS, "registers handed back cover those taken");
static_assert(QB % 8 == 0 && QB <= 256 && HB + 2 <= 256, "box columns a whole swizzle period, boxes of 256 at most");
static_assert(KR % 16 == 0, "a slice of whole k16 steps");
static_assert(STAGES >= 2 && SMEM_BYTES <= 227 * 1024, "shared memory of one CTA");
#endif

__device__ __forceinline__ void wgrad_regs_lower(void) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGS));
#endif
}
__device__ __forceinline__ void wgrad_regs_raise(void) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGS));
#endif
}

/* the kernel's dynamic shared memory, and the ring in it from the first 1 KB boundary (the 128-byte swizzle's period:
 * SMEM_BYTES has the slack) */
#ifdef __CUDA_ARCH__
#define WGRAD_SMEM extern __shared__ __align__(128) unsigned char smem_raw[]
#else
#define WGRAD_SMEM __shared__ __align__(128) unsigned char smem_raw[SMEM_BYTES]
#endif
__device__ __forceinline__ act_t (*ring_at(unsigned char *raw))[STAGE_ELEMS] {
    return reinterpret_cast<act_t(*)[STAGE_ELEMS]>(raw + ((1024u - (smem_u32(raw) & 1023u)) & 1023u));
}

/* the ring's barriers: full[s] completes on the producer's arrival and its copies' bytes, empty[s] on the arrivals of
 * the `consumer_warps` consumer warps; then the whole CTA synchronises */
__device__ __forceinline__ void ring_init(unsigned long long *full, unsigned long long *empty, unsigned consumer_warps) {
    if (threadIdx.x == 0)
        for (int s = 0; s < STAGES; s++) mbar_init(&full[s], 1u), mbar_init(&empty[s], consumer_warps);
    __syncthreads();
}

/* a consumer warpgroup's loop over its `total` slices: wait for stage g % STAGES, multiply (mul(stage)), and once
 * slice g - 1's batch has retired release its stage; the accumulators are final on return */
template <class ACC, class MUL>
__device__ __forceinline__ void consume(int total, unsigned long long *full, unsigned long long *empty, int lane, ACC &acc,
                                        MUL mul) {
    acc_zero(acc);
    for (int g = 0; g < total; g++) {
        const int s = g % STAGES;
        mbar_wait(&full[s], (unsigned)(g / STAGES) & 1u);
        mul(s);
        wg_commit_and_wait_prev(); /* slice g - 1's batch has retired: its stage is free */
        acc_fence_all(acc);
        if (g > 0 && lane == 0) mbar_arrive(&empty[(g - 1) % STAGES]);
    }
    wg_wait_all();
    acc_fence_all(acc);
}

/* This CTA's split: its reduction slices [g0, g0 + total) and where its sum goes. blockIdx.y = split; over a batch of
 * slices (a.wg_groups > 1, cnn_conv2d.choose_n) split y is split y % sp of slice y / sp, sp = splits / wg_groups, and
 * the slice's splits cut its own wg_group_slices as its own launch cuts them: the same sums, bit for bit. One split
 * (per slice) writes dW (the slice's row); more write partials for conv2d_wgrad_wgmma_reduce. slices: all of them. */
struct wg_split {
    long long g0;
    int total;
    float *out;
};
/* a slice's splits: all of them without slices */
__device__ __forceinline__ int wg_slice_splits(const conv_args &a) {
    return a.wg_groups > 1 ? a.splits / a.wg_groups : a.splits;
}
__device__ __forceinline__ wg_split wg_split_of(const conv_args &a, long long slices) {
    const int groups = a.wg_groups > 1 ? a.wg_groups : 1, sp = wg_slice_splits(a);
    const int grp = (int)blockIdx.y / sp, j = (int)blockIdx.y % sp;
    const long long own = groups > 1 ? a.wg_group_slices : slices, first = (long long)j * a.ktiles_per_split;
    wg_split r;
    r.g0 = grp * own + first;
    r.total = (int)min(own - first, (long long)a.ktiles_per_split); /* the host makes no split empty */
    r.out = sp > 1 ? a.ws + (long long)blockIdx.y * a.gm * a.gn : (float *)a.out + grp * a.wg_out_stride;
    return r;
}

#ifndef HALO_QB /* ================================ the im2col kernel ================================ */
/* the producer's copies, slice by slice: dy's BM channels, then each column block's x (ROWS: the tiled map of x's
 * rows, a 1x1 stride-1 unpadded conv; otherwise im2col at the block's tap) */
template <bool ROWS>
__device__ __forceinline__ void produce(const conv_tma_args &targs, act_t (*ring)[STAGE_ELEMS], unsigned long long *full,
                                        unsigned long long *empty, int m0, int n0, int g0, int total) {
    const conv_args &a = targs.a;
    const int nb = min(BN, a.gn - n0) / 64; /* the tile's column blocks inside dW (gn % 64 == 0) */
    const unsigned bytes = (unsigned)((BM + nb * 64) * BK * 2);
    /* the column blocks' taps and channels, and the slice's pixel (img, p, q), are worked out once and then
     * advanced by BK pixels a slice with carries: this one thread issues every copy, and the divisions per slice
     * and block it did before held the wgmmas back (perf-log step 73) */
    int c0[BN / 64], tr[BN / 64], ts[BN / 64];
    const int cblocks = a.c / 64;
#pragma unroll
    for (int j = 0; j < BN / 64; j++) {
        const int cb = n0 / 64 + j, tap = cb / cblocks;
        c0[j] = (cb - tap * cblocks) * 64, tr[j] = tap / a.s, ts[j] = tap - tr[j] * a.s;
    }
    const int pq = a.p * a.q, pix0 = g0 * BK;
    int img = pix0 / pq, p = (pix0 - img * pq) / a.q, q = pix0 - img * pq - p * a.q;
    const int dimg = BK / pq, dp = (BK - dimg * pq) / a.q, dq = BK - dimg * pq - dp * a.q;
    for (int g = 0; g < total; g++) {
        const int s = g % STAGES;
        if (g >= STAGES) mbar_wait(&empty[s], (unsigned)(g / STAGES - 1) & 1u); /* slice g - STAGES released */
        const int pix = (g0 + g) * BK; /* the slice's first output pixel: (img, p, q) */
        mbar_arrive_expect_tx(&full[s], bytes);
#pragma unroll
        for (int i = 0; i < BM / 64; i++) tma_load_tile_2d(&targs.b_map, ring[s] + i * BOX, &full[s], m0 + 64 * i, pix);
        if (ROWS) { /* pixel pix of dy is row pix of x */
            for (int j = 0; j < nb; j++) tma_load_tile_2d(&targs.a_map, ring[s] + BM * BK + j * BOX, &full[s], n0 + 64 * j, pix);
            continue;
        }
        const int hb = p * a.stride_h - a.pad_h, wb = q * a.stride_w - a.pad_w;
#pragma unroll
        for (int j = 0; j < BN / 64; j++)
            if (j < nb)
                tma_load_im2col_4d(&targs.a_map, ring[s] + BM * BK + j * BOX, &full[s], c0[j], wb, hb, img,
                                   (unsigned short)ts[j], (unsigned short)tr[j]);
        q += dq; /* (img, p, q) += BK pixels */
        if (q >= a.q) q -= a.q, p++;
        p += dp;
        if (p >= a.p) p -= a.p, img++;
        img += dimg;
    }
}

extern "C" __global__ void __launch_bounds__(NT, 1) conv2d_wgrad_wgmma(const __grid_constant__ conv_tma_args targs) {
    pdl_enter();
    const conv_args &a = targs.a;
    WGRAD_SMEM;
    __shared__ unsigned long long full[STAGES], empty[STAGES];
    act_t(*ring)[STAGE_ELEMS] = ring_at(smem_raw); /* stage s: A boxes, then B boxes */

    const int tid = threadIdx.x, lane = tid & 31, warp = (tid >> 5) & 3, role = tid >> 7;
    const int n_tiles = (a.gn + BN - 1) / BN;
    const int m0 = ((int)blockIdx.x / n_tiles) * BM, n0 = ((int)blockIdx.x % n_tiles) * BN;
    const wg_split sp = wg_split_of(a, (a.gk + BK - 1) / BK);
    const int g0 = (int)sp.g0, total = sp.total;
    if (total <= 0 || dynamic_smem_bytes() < (unsigned)SMEM_BYTES) __trap();

    ring_init(full, empty, 8u);

    if (role == 0) { /* ---- the producer: thread 0 issues every copy ---- */
        wgrad_regs_lower();
        if (tid != 0) return;
        tma_prefetch_map(&targs.a_map);
        tma_prefetch_map(&targs.b_map);
        /* two loops, not a test per copy: the test inside the im2col loop slowed the 3x3 wgrads (perf-log step 72) */
        if (a.x_rows) produce<true>(targs, ring, full, empty, m0, n0, g0, total);
        else produce<false>(targs, ring, full, empty, m0, n0, g0, total);
        return;
    }

    /* ---- a consumer: its m64 blocks (BM >= 128) or its half of the columns (BM = 64) of the tile ---- */
    wgrad_regs_raise();
    const int me = role - 1;
    const int row_off = BM == 64 ? 0 : me * CM, col_off = BM == 64 ? me * CN : 0;
    float acc[MB][CN / 8][4];
    consume(total, full, empty, lane, acc, [&](int s) {
        wg_multiply_slice<MB, CN, 1, 1>(acc, ring[s] + (row_off / 64) * BOX, ring[s] + BM * BK + (col_off / 64) * BOX,
                                        warp, lane);
    });

    /* epilogue: warp w of the consumer holds rows 16w + g (+ 8) of each m64 block, columns 8j + 2t .. + 1 */
    float *out = sp.out;
    const int g8 = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int b = 0; b < MB; b++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = m0 + row_off + b * 64 + warp * 16 + g8 + h * 8;
            if (row >= a.gm) continue;
            float *orow = out + (long long)row * a.gn;
#pragma unroll
            for (int j = 0; j < CN / 8; j++) {
                const int col = n0 + col_off + j * 8 + 2 * t4;
                if (col < a.gn) *(float2 *)(orow + col) = make_float2(acc[b][j][2 * h], acc[b][j][2 * h + 1]);
            }
        }
}

#else /* ================================ the halo kernel (3x3, stride 1) ================================ */
/* Grid: x = (64-channel block of dy) x (64-channel block of x), y = splits of a.ktiles_per_split slices; slice g is
 * column block g % qbn of row block (g / qbn) % pbn of image g / (qbn * pbn). targs.b_map: dy (K, Q, P, N) in boxes
 * of 64 x QB x HB; targs.a_map: x (C, W, H, N) in boxes of 64 x QB x (HB + 2). */
extern "C" __global__ void __launch_bounds__(NT, 1) conv2d_wgrad_wgmma(const __grid_constant__ conv_tma_args targs) {
    pdl_enter();
    const conv_args &a = targs.a;
    WGRAD_SMEM;
    __shared__ unsigned long long full[STAGES], empty[STAGES];
    act_t(*ring)[STAGE_ELEMS] = ring_at(smem_raw); /* stage: dy box, x boxes s = 0, 1, 2 */

    const int tid = threadIdx.x, lane = tid & 31, warp = (tid >> 5) & 3, role = tid >> 7;
    const int cblocks = a.c / 64;
    const int m0 = ((int)blockIdx.x / cblocks) * 64, c0 = ((int)blockIdx.x % cblocks) * 64;
    const int qbn = (a.q + QB - 1) / QB, pbn = (a.p + HB - 1) / HB;
    const wg_split sp = wg_split_of(a, (long long)a.n * pbn * qbn);
    const long long g0 = sp.g0;
    const int total = sp.total;
    if (total <= 0 || dynamic_smem_bytes() < (unsigned)SMEM_BYTES) __trap();

    ring_init(full, empty, 12u);

    if (role == 0) { /* ---- the producer: thread 0 issues every copy ---- */
        wgrad_regs_lower();
        if (tid != 0) return;
        tma_prefetch_map(&targs.a_map);
        tma_prefetch_map(&targs.b_map);
        const unsigned bytes = (unsigned)((KR + 3 * XR) * 64 * 2);
        int qi = (int)(g0 % qbn), pi = (int)((g0 / qbn) % pbn), img = (int)(g0 / ((long long)qbn * pbn));
        for (int g = 0; g < total; g++) {
            const int s = g % STAGES;
            if (g >= STAGES) mbar_wait(&empty[s], (unsigned)(g / STAGES - 1) & 1u); /* slice g - STAGES released */
            const int q0 = qi * QB, p0 = pi * HB;
            mbar_arrive_expect_tx(&full[s], bytes);
            tma_load_tile_4d(&targs.b_map, ring[s], &full[s], m0, q0, p0, img);
#pragma unroll
            for (int sx = 0; sx < 3; sx++)
                tma_load_tile_4d(&targs.a_map, ring[s] + (KR + sx * XR) * 64, &full[s], c0, q0 + sx - a.pad_w,
                                 p0 - a.pad_h, img);
            if (++qi == qbn) { /* the next slice: column block, row block, image */
                qi = 0;
                if (++pi == pbn) pi = 0, img++;
            }
        }
        return;
    }

    /* ---- consumer sx = role - 1: taps (0..2, sx) = dW columns (r*3 + sx)*C + c0 .. + 63 for r = 0, 1, 2 ---- */
    wgrad_regs_raise();
    const int sx = role - 1;
    float acc[1][192 / 8][4];
    consume(total, full, empty, lane, acc, [&](int s) {
        wg_multiply_mn<192, KR / 16>(acc, ring[s], ring[s] + (KR + sx * XR) * 64, QB * 64, warp, lane);
    });

    /* epilogue: warp w holds rows 16w + g (+ 8), columns 8j + 2t .. + 1 of the n192 = taps r = j / 8 */
    float *out = sp.out;
    const int g8 = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int row = m0 + warp * 16 + g8 + h * 8;
        if (row >= a.gm) continue;
        float *orow = out + (long long)row * a.gn;
#pragma unroll
        for (int j = 0; j < 192 / 8; j++) {
            const int r = j >> 3, col = (r * 3 + sx) * a.c + c0 + (j & 7) * 8 + 2 * t4;
            *(float2 *)(orow + col) = make_float2(acc[0][j][2 * h], acc[0][j][2 * h + 1]);
        }
    }
}
#endif

/* dW = the splits' partials added in split order (a.ws: (splits, gm*gn) float32), four elements per thread where
 * gm*gn % 4 == 0 (the host launches it only then: gn = R*S*C, C % 64 == 0). Blocks of 32 float4s x RED_LANES lanes:
 * lane l adds splits l, l + RED_LANES, ... in order, then lane 0 adds the lanes in order (deterministic; with at
 * most RED_LANES splits the same sums as one thread walking them). One thread walking a hundred splits, as the halo
 * configs have, was a chain of loads (perf-log step 92). */
#define RED_LANES 8
extern "C" __global__ void __launch_bounds__(32 * RED_LANES) conv2d_wgrad_wgmma_reduce(const conv_args a) {
    pdl_enter();
    __shared__ float4 sh[RED_LANES][32];
    const long long n4 = (long long)a.gm * a.gn / 4;
    /* blockIdx.y: the slice whose splits this block adds (wg_split_of) */
    const int splits = wg_slice_splits(a);
    const float4 *ws = (const float4 *)a.ws + (long long)blockIdx.y * splits * n4;
    float4 *out = (float4 *)((float *)a.out + (long long)blockIdx.y * a.wg_out_stride);
    const int tx = threadIdx.x & 31, ly = threadIdx.x >> 5;
    for (long long base = (long long)blockIdx.x * 32; base < n4; base += (long long)gridDim.x * 32) {
        const long long i = base + tx;
        float4 s = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (i < n4)
#pragma unroll 4
            for (int k = ly; k < splits; k += RED_LANES) {
                const float4 v = ws[(long long)k * n4 + i];
                s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
            }
        sh[ly][tx] = s;
        __syncthreads();
        if (ly == 0 && i < n4) {
            float4 t = sh[0][tx];
            for (int l = 1; l < RED_LANES; l++) {
                const float4 v = sh[l][tx];
                t.x += v.x, t.y += v.y, t.z += v.z, t.w += v.w;
            }
            out[i] = t;
        }
        __syncthreads();
    }
}
