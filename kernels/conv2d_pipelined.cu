/* conv2d_pipelined.cu -- forward convolution on tensor cores for the shapes that make up almost all of a ResNet or a
 * VGG: F16/BF16 NHWC activations with C % 8 == 0, or F32 ones with C % 4 == 0 multiplied in TF32 (--dtype tf32)
 * or, with FFMA=1, in fp32 FMA (--dtype fp32: true fp32, no tensor cores); K % 8 == 0, every kernel size, stride
 * and padding.
 * Implicit GEMM y[NPQ][K] = x_im2col[NPQ][RSC] * w[K][RSC]^T, no im2col in memory:
 *   - a reduction slice is a row of BK*2 bytes (BK = 32 or 64): BK/8 16-byte chunks of 8 F16/BF16 or 4 F32
 *     channels; C % (channels per chunk) == 0 keeps each chunk inside one filter tap (r, s), so every chunk is
 *     one cp.async copy, zero-filled outside the image and past R*S*C.
 *     Each thread loads the same chunk position of its rows in every slice and steps its tap (r, s, c) along
 *     incrementally: no division in the main loop;
 *   - STAGES shared-memory stages in flight (cp.async groups), one __syncthreads per slice; dynamic shared
 *     memory, so a stage set may exceed 48 KB (the launcher raises the function's limit);
 *   - rows of BK*2 bytes with the 16-byte chunks XOR-swizzled (by (row/2)%4 for 64-byte rows, row%8 for 128-byte
 *     rows), so ldmatrix.x4 reads and cp.async writes are free of bank conflicts;
 *   - mma.sync.m16n8k16 with fp32 accumulators, warp tile (BM/WM) x (BN/WN); for F32, mma.sync.m16n8k8 .tf32
 *     on the same shared-memory layout (a k8 step of 4-byte elements is the 32 bytes a k16 step of 2-byte ones
 *     is, and ldmatrix delivers its fragments), each operand rounded to TF32 (to nearest, ties away, as
 *     cvt.rna) in registers first; or, with FFMA=1 (F32 without TF32: true fp32), fp32 FMA from the same
 *     stages into the same accumulator layout, 16-byte shared-memory reads of four reduction elements;
 *   - fused epilogue: per-output-channel scale and shift (folded BatchNorm or bias), residual add, ReLU, one
 *     rounding to the activation type; each warp turns its accumulators into 8 channels per lane (16-byte
 *     stores, F32 32) through 1 KB of the then idle stages (conv2d_epilogue.cuh, tile_epilogue_smem). The
 *     residual tile is prefetched into L2 when the CTA starts, and the next 32 columns' residual vectors load
 *     while this 32's are stored;
 *   - split-K for small outputs (batch 1): gridDim.z splits of the reduction each write an fp32 partial tile to
 *     a.ws, and conv2d_pipelined_splitk_epilogue adds them in split order (deterministic) and applies the epilogue.
 * Narrow first layers run here too: the stem (C <= 4, stride 2, e.g. 3->64 7x7/2) as a space-to-depth problem
 * (conv2d_s2d_input and conv2d_s2d_filter rewrite x and w so that the same convolution becomes a stride-1 one
 * over 16 channels; src/cuda/conv2d.c, narrow_fprop, has the algebra), any other C < 8 (VGG's 3->64 3x3/1) with
 * its channels zero-padded to 8 by conv2d_pad_channels.
 * Specialisation (-D, src/cuda/conv2d.c): BM BN BK (CTA tile), WM WN (warps), STAGES, MINB (CTAs per SM the
 * registers must allow), ACT (F16, BF16, or F32), FFMA (F32 only: 1 multiplies in fp32 FMA, 0 in TF32), OUT_PHASE
 * (conv2d_epilogue.cuh).
 * The launcher checks the preconditions (C % 8, F32 C % 4; K % 8; 16-byte aligned pointers) and otherwise uses the
 * generic kernels of conv2d.cu.
 */
#include "common.cuh"
#include "params.cuh"
#include "conv2d_epilogue.cuh"
#include "conv2d_loader.cuh"

#if !defined(BM) || !defined(BN) || !defined(WM) || !defined(WN) || !defined(STAGES)
#error "conv2d_pipelined.cu needs -DBM -DBN -DWM -DWN -DSTAGES"
#endif
#ifndef BK
#define BK 32
#endif
#define NT (32 * WM * WN)
#define WTM (BM / WM)
#define WTN (BN / WN)
#define MT (WTM / 16)
#define NT8 (WTN / 8)
#define SE (BK * 2 / (int)sizeof(act_t)) /* act_t per shared-memory row */
#define KS SE                            /* reduction elements per slice */
#define SMEM_BYTES ((BM + BN) * BK * 2 * STAGES)
static_assert(WTM % 16 == 0 && WTN % 32 == 0, "warp tile: m16 rows, groups of four n8 columns");
static_assert(BK == 32 || BK == 64, "slice rows of 64 or 128 bytes");
static_assert(STAGES >= 2, "at least double buffering");
static_assert(SMEM_BYTES <= 227 * 1024, "shared memory of one CTA (sm_90; the launcher checks the GPU's limit)");
static_assert((BM + BN) * BK * 2 >= NT / 32 * 1024, "one stage holds every warp's 1 KB of epilogue scratch");

__device__ __forceinline__ int swz(int row, int ch) { return conv_at<BK>(row, ch); }

#ifndef FFMA
#define FFMA 0 /* 1: the multiply-adds in fp32 FMA instead of mma.sync (F32 only): --dtype fp32 */
#endif
static_assert(!FFMA || ACT == ACT_F32, "the FFMA core takes F32 operands");
#ifndef MINB
#define MINB 1 /* CTAs per SM the register allocation must leave room for */
#endif
#if ACT == ACT_F32 && MINB > 1
#undef MINB
#define MINB 1 /* TF32: the epilogue holds twice the residual bytes; 128 registers a thread would spill */
#endif
extern "C" __global__ void __launch_bounds__(NT, MINB) conv2d_fprop_pipelined(const conv_args a) {
    pdl_enter();
#ifdef __CUDA_ARCH__
    extern __shared__ __align__(128) unsigned char smem_raw[];
#else
    __shared__ __align__(128) unsigned char smem_raw[SMEM_BYTES]; /* the emulator: static is per block */
#endif
    /* stage s = its A tile then its B tile, so a launch with fewer slices than STAGES may pass less shared memory:
     * As[s] and Bs[s] step by a whole stage */
    act_t(*As)[(BM + BN) * SE] = reinterpret_cast<act_t(*)[(BM + BN) * SE]>(smem_raw);
    act_t(*Bs)[(BM + BN) * SE] = reinterpret_cast<act_t(*)[(BM + BN) * SE]>(smem_raw + (size_t)BM * BK * 2);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    /* tile order: the N tiles of one row block are consecutive CTAs, so they run together and its A rows come
     * from DRAM once (then L2) instead of once per N tile */
    const int n_tiles = (a.gn + BN - 1) / BN;
    const int m0 = (int)(blockIdx.x / n_tiles) * BM, n0 = (int)(blockIdx.x % n_tiles) * BN;
    const int kt_begin = blockIdx.z * a.ktiles_per_split;
    const int kt_end = min((a.gk + KS - 1) / KS, kt_begin + a.ktiles_per_split);
    const int ktiles = kt_end - kt_begin; /* this split's slices */
    conv_tile_loader<BM, BN, BK, NT> ld;
    ld.init(a, m0, n0, tid, kt_begin);
    auto load_slice = [&](int stage) { ld.load(a, As[stage], Bs[stage]); };

    const int wm0 = (warp / WN) * WTM, wn0 = (warp % WN) * WTN;
#pragma unroll
    for (int i = 0; i < MT; i++) tile_prefetch_residual<NT8>(a, m0 + wm0 + i * 16, n0 + wn0, lane);
    float acc[MT][NT8][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < NT8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

#if FFMA
    /* true fp32: each lane computes exactly the accumulator elements an m16n8 fragment would give it (rows g and
     * g + 8 of each m16 block, columns 2*t4 and 2*t4 + 1 of each n8 block), so the epilogue is the same. Per
     * 16-byte chunk (4 reduction elements) of a slice row: B's 2*NT8 columns as float4s, then A's rows one float4
     * at a time, 16 FFMA each. In a warp a chunk read touches 8 A rows or 4 B columns of one swizzled chunk
     * position: distinct 16-byte bank groups, one wavefront.
     * Addresses: the rows a lane reads differ by multiples of 8, which leave the swizzle term (conv_swz_term)
     * unchanged, so one chunk offset per chunk serves all of A's rows
     * (and one per column parity all of B's) and every row's offset is a compile-time immediate. */
    const int g = lane >> 2, t4 = lane & 3;
    const int a_row = wm0 + g, b_row = wn0 + 2 * t4;
    const int a_sw = conv_swz_term<BK>(a_row), b_sw0 = conv_swz_term<BK>(b_row), b_sw1 = conv_swz_term<BK>(b_row + 1);
    auto compute_slice = [&](int stage) {
        const float *Ar = As[stage] + a_row * SE;
        const float *Br = Bs[stage] + b_row * SE;
#pragma unroll 1 /* one chunk's operands live at a time: unrolled, the loads of every chunk are hoisted and spill */
        for (int kc = 0; kc < BK / 8; kc++) {
            const int oa = (kc ^ a_sw) << 2, ob0 = (kc ^ b_sw0) << 2, ob1 = SE + ((kc ^ b_sw1) << 2);
            float4 bv[NT8][2];
#pragma unroll
            for (int j = 0; j < NT8; j++) {
                bv[j][0] = *(const float4 *)&Br[j * 8 * SE + ob0];
                bv[j][1] = *(const float4 *)&Br[j * 8 * SE + ob1];
            }
#pragma unroll
            for (int i = 0; i < MT; i++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const float4 av = *(const float4 *)&Ar[(i * 16 + h * 8) * SE + oa];
#pragma unroll
                    for (int j = 0; j < NT8; j++)
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            float &c = acc[i][j][2 * h + e];
                            c = fmaf(av.x, bv[j][e].x, c);
                            c = fmaf(av.y, bv[j][e].y, c);
                            c = fmaf(av.z, bv[j][e].z, c);
                            c = fmaf(av.w, bv[j][e].w, c);
                        }
                }
        }
    };
#else
    auto compute_slice = [&](int stage) {
        const act_t *As_ = As[stage];
        const act_t *Bs_ = Bs[stage];
#pragma unroll
        for (int k16 = 0; k16 < BK / 16; k16++) {
            unsigned af[MT][4], bf[NT8][2];
#pragma unroll
            for (int i = 0; i < MT; i++)
                ldmatrix_x4(af[i], &As_[swz(wm0 + i * 16 + (lane & 15), k16 * 2 + (lane >> 4))]);
#pragma unroll
            for (int j = 0; j < NT8; j += 2) {
                unsigned t[4];
                ldmatrix_x4(t, &Bs_[swz(wn0 + j * 8 + (lane & 7) + ((lane >> 4) << 3), k16 * 2 + ((lane >> 3) & 1))]);
                bf[j][0] = t[0];
                bf[j][1] = t[1];
                bf[j + 1][0] = t[2];
                bf[j + 1][1] = t[3];
            }
#if ACT == ACT_F32
#pragma unroll
            for (int i = 0; i < MT; i++)
#pragma unroll
                for (int e = 0; e < 4; e++) af[i][e] = tf32_rna(af[i][e]);
#pragma unroll
            for (int j = 0; j < NT8; j++) bf[j][0] = tf32_rna(bf[j][0]), bf[j][1] = tf32_rna(bf[j][1]);
#pragma unroll
            for (int i = 0; i < MT; i++)
#pragma unroll
                for (int j = 0; j < NT8; j++) mma_m16n8k8_tf32(acc[i][j], af[i], bf[j]);
#else
#pragma unroll
            for (int i = 0; i < MT; i++)
#pragma unroll
                for (int j = 0; j < NT8; j++) mma_m16n8k16(acc[i][j], af[i], bf[j]);
#endif
        }
    };
#endif /* FFMA */

    /* ---- the pipeline: STAGES-1 slices in flight while one is multiplied ---- */
#pragma unroll
    for (int st = 0; st < STAGES - 1; st++) {
        if (st < ktiles) load_slice(st);
        cp_async_commit();
    }
    for (int kt = 0; kt < ktiles; kt++) {
        cp_async_wait<STAGES - 2>();
        __syncthreads(); /* slice kt landed for every thread; every warp is done with slice kt-1's stage */
        const int pf = kt + STAGES - 1;
        if (pf < ktiles) load_slice(pf % STAGES);
        cp_async_commit();
        compute_slice(kt % STAGES);
    }
    cp_async_wait<0>();
    __syncthreads(); /* every warp is done with the stages: 1 KB of them per warp becomes the epilogue's scratch */

    /* ---- epilogue (conv2d_epilogue.cuh), one m16 row block of the warp tile at a time ---- */
    float *scr = (float *)(smem_raw + (size_t)warp * 1024); /* a launch has at least one stage: >= 1 KB per warp */
    const int em0 = (int)(ctaid_x() / n_tiles) * BM; /* m0 again: not held over the mainloop (the 128x256 F32 tile
                                                       * is at 255 registers) */
#pragma unroll
    for (int i = 0; i < MT; i++) {
        if (a.splits > 1) tile_partials<NT8>(a, acc[i], em0 + wm0 + i * 16, n0 + wn0, lane);
        else tile_epilogue_smem<NT8>(a, acc[i], em0 + wm0 + i * 16, n0 + wn0, lane, scr);
    }
}

/* y = epilogue(sum over the splits of ws, in split order): grid-stride over (m, n) pairs of channels. */
extern "C" __global__ void conv2d_pipelined_splitk_epilogue(const conv_args a) {
    pdl_enter();
    const long long pairs = (long long)a.gm * a.gn / 2;
    act_t *y = (act_t *)a.out;
    const act_t *res = (const act_t *)a.residual;
    const long long plane = (long long)a.gm * a.gn;
    for (long long i = GRID_TID; i < pairs; i += GRID_STRIDE) {
        const long long o = 2 * i;
#if OUT_PHASE /* where row m goes: a dgrad phase's pixel of dx, or nowhere */
        const int m = (int)(o / a.gn), n = (int)(o - (long long)m * a.gn);
        if (!out_ok(a, m)) continue;
        const long long oy = out_at(a, m) + n;
#else
        const int n = (int)(o % a.gn);
        const long long oy = o;
#endif
        float v0 = 0.0f, v1 = 0.0f;
        for (int z = 0; z < a.splits; z++) {
            const float2 p = *(const float2 *)(a.ws + z * plane + o);
            v0 += p.x;
            v1 += p.y;
        }
        v0 = v0 * (a.scale ? a.scale[n] : 1.0f) + (a.shift ? a.shift[n] : 0.0f);
        v1 = v1 * (a.scale ? a.scale[n + 1] : 1.0f) + (a.shift ? a.shift[n + 1] : 0.0f);
        if (res) {
            v0 += act_to_f32(res[oy]);
            v1 += act_to_f32(res[oy + 1]);
        }
        if (a.relu) {
            v0 = v0 > 0.0f ? v0 : 0.0f;
            v1 = v1 > 0.0f ? v1 : 0.0f;
        }
#if ACT == ACT_F32
        *(float2 *)(y + oy) = make_float2(v0, v1);
#else
        *(unsigned *)(y + oy) = (unsigned)f32_to_act(v0) | ((unsigned)f32_to_act(v1) << 16);
#endif
    }
}

/* ---- the stem as space-to-depth (C <= 4, stride 2): see stem_fprop in src/cuda/conv2d.c ----
 * conv2d_s2d_input: x (N, H, W, C) -> out (N, ceil(H/2), ceil(W/2), 16), channel (bh*2 + bw)*4 + c holding
 * x[n][2i+bh][2j+bw][c]; zero outside the image and for c >= C. One thread per output pixel (two 16-byte stores).
 * Fields: n c h w (x's), x, out. */
extern "C" __global__ void conv2d_s2d_input(const conv_args a) {
    pdl_enter();
    const act_t *x = (const act_t *)a.x;
    act_t *out = (act_t *)a.out;
    const int h2 = (a.h + 1) / 2, w2 = (a.w + 1) / 2;
    const long long total = (long long)a.n * h2 * w2;
    for (long long o = GRID_TID; o < total; o += GRID_STRIDE) {
        const int j = (int)(o % w2);
        const long long t = o / w2;
        const int i = (int)(t % h2);
        const long long img = t / h2;
        float v[16];
#pragma unroll
        for (int e = 0; e < 16; e++) {
            const int bh = e >> 3, bw = (e >> 2) & 1, c = e & 3, hh = 2 * i + bh, ww = 2 * j + bw;
            v[e] = c < a.c && hh < a.h && ww < a.w ? act_to_f32(x[((img * a.h + hh) * a.w + ww) * a.c + c]) : 0.0f;
        }
        act8_store(out + o * 16, v); /* exact: the values are act_t already */
        act8_store(out + o * 16 + 8, v + 8);
    }
}

/* conv2d_s2d_filter: w (K, R, S, C) -> out (K, R2, S2, 16), R2 = (R - 1 + pad_h % 2) / 2 + 1 (S2 likewise):
 * out[k][ah][aw][(bh*2 + bw)*4 + c] = w[k][2ah + bh - pad_h % 2][2aw + bw - pad_w % 2][c], zero where that tap or
 * channel does not exist. One thread per output element. Fields: k r s c pad_h pad_w (w's), wt, out. */
extern "C" __global__ void conv2d_s2d_filter(const conv_args a) {
    pdl_enter();
    const act_t *w = (const act_t *)a.wt;
    act_t *out = (act_t *)a.out;
    const int oh = a.pad_h & 1, ow = a.pad_w & 1;
    const int r2 = (a.r - 1 + oh) / 2 + 1, s2 = (a.s - 1 + ow) / 2 + 1;
    const long long total = (long long)a.k * r2 * s2 * 16;
    for (long long o = GRID_TID; o < total; o += GRID_STRIDE) {
        const int e = (int)(o % 16);
        const long long t = o / 16;
        const int aw = (int)(t % s2), ah = (int)(t / s2 % r2);
        const long long k = t / s2 / r2;
        const int r = 2 * ah + (e >> 3) - oh, s = 2 * aw + ((e >> 2) & 1) - ow, c = e & 3;
        float v = 0.0f;
        if (c < a.c && r >= 0 && r < a.r && s >= 0 && s < a.s) v = act_to_f32(w[((k * a.r + r) * a.s + s) * a.c + c]);
        act_store(out, o, v);
    }
}

/* conv2d_pad_channels: rows of C elements -> rows of 8 (C < 8), zero in the new channels: x (N,H,W,C) with
 * rows = N*H*W, or w (K,R,S,C) with rows = K*R*S. One thread per row, one 16-byte store. Fields: n*h*w = rows,
 * c, x (source), out. */
extern "C" __global__ void conv2d_pad_channels(const conv_args a) {
    pdl_enter();
    const act_t *x = (const act_t *)a.x;
    act_t *out = (act_t *)a.out;
    const long long rows = (long long)a.n * a.h * a.w;
    for (long long o = GRID_TID; o < rows; o += GRID_STRIDE) {
        float v[8];
#pragma unroll
        for (int e = 0; e < 8; e++) v[e] = e < a.c ? act_to_f32(x[o * a.c + e]) : 0.0f;
        act8_store(out + o * 8, v); /* exact: the values are act_t already */
    }
}

/* conv2d_dgrad_filter: dgrad's filters, every phase in one launch (src/cuda/conv2d_dgrad.c): tap (r, s) of
 * w (K, R, S, C) belongs to the phase (a, b) with r = a + pad_h (mod sh) and s = b + pad_w (mod sw), whose filter
 * out[a * sw + b] (C, RT, ST, K; RT = the phase's taps r0, r0 + sh, ... < R) holds the taps reversed:
 *     out[c][RT-1 - r / sh][ST-1 - s / sw][k] = w[k][r][s][c]
 * (a stride-1 convolution: one phase, the filter flipped and transposed). Per tap a K x C transpose, 32 x 32 at a
 * time through shared memory, so that the reads (along C) and the writes (along K) are both coalesced. Grid
 * (cdiv(C, 32), cdiv(K, 32), R * S), block 32 x 8; out[phase] NULL: a phase whose filter is not wanted. */
extern "C" __global__ void __launch_bounds__(256) conv2d_dgrad_filter(const dgrad_filter_args a) {
    pdl_enter();
    __shared__ act_t tile[32][33];
    const int r = blockIdx.z / a.s, s = blockIdx.z - r * a.s;
    const int r0 = r % a.stride_h, s0 = s % a.stride_w;
    const int pa = ((r0 - a.pad_h) % a.stride_h + a.stride_h) % a.stride_h;
    const int pb = ((s0 - a.pad_w) % a.stride_w + a.stride_w) % a.stride_w;
    act_t *out = (act_t *)a.out[pa * a.stride_w + pb];
    if (!out) return; /* the whole block */
    const int rt = (a.r - r0 + a.stride_h - 1) / a.stride_h, st = (a.s - s0 + a.stride_w - 1) / a.stride_w;
    const int t = rt - 1 - r / a.stride_h, u = st - 1 - s / a.stride_w;
    const int c0 = blockIdx.x * 32, k0 = blockIdx.y * 32;
    const act_t *w = (const act_t *)a.w;
    for (int i = threadIdx.y; i < 32; i += 8) {
        const int k = k0 + i, c = c0 + threadIdx.x;
        if (k < a.k && c < a.c) tile[i][threadIdx.x] = w[((k * a.r + r) * a.s + s) * a.c + c];
    }
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += 8) {
        const int c = c0 + i, k = k0 + threadIdx.x;
        if (k < a.k && c < a.c) out[((c * rt + t) * st + u) * a.k + k] = tile[threadIdx.x][i];
    }
}

/* conv2d_dgrad_interleave: dx (N, H, W, C) (+)= the phases' outputs: dx[n][h][w] from phase (h % sh, w % sw)'s
 * block (N, PP, PQ, C) at row h / sh + off_h, column w / sw + off_w, or 0 where no filter tap reaches the phase
 * (its pointer NULL). One block per dx row (blockIdx.x = n * H + h), its threads over the row's 8-channel groups,
 * pixels counted in 32 bits (the host checks N * H * W < 2^31), elements in 64; C % 8 == 0 and 16-byte aligned
 * blocks (checked by the host). */
extern "C" __global__ void conv2d_dgrad_interleave(const dgrad_phase_args a) {
    pdl_enter();
    const int n = blockIdx.x / a.h, h = blockIdx.x - n * a.h;
    const int i = h / a.stride_h, pa = h - i * a.stride_h;
    const int c8 = a.c / 8, groups = a.w * c8;
    act_t *d = (act_t *)a.dx + (long long)blockIdx.x * a.w * a.c;
    for (int g = threadIdx.x; g < groups; g += blockDim.x) {
        const int w = g / c8, c = (g - w * c8) * 8;
        const int j = w / a.stride_w, ph = pa * a.stride_w + (w - j * a.stride_w);
        float val[8], old[8];
        const act8 blk =
            a.block[ph] ? act8_load((const act_t *)a.block[ph] +
                                    ((long long)(n * a.pp[ph] + i + a.off_h[ph]) * a.pq[ph] + j + a.off_w[ph]) * a.c + c)
                        : act8_zero();
        act8_unpack(blk, val);
        if (a.accumulate) {
            act8_unpack(act8_load(d + g * 8), old);
#pragma unroll
            for (int e = 0; e < 8; e++) val[e] += old[e];
        }
        act8_store(d + g * 8, val);
    }
}

/* conv2d_dgrad_zero: dx's pixels (h, w) of the phases (h % sh, w % sw) in a.zero_mask, zeroed: those no filter
 * tap reaches (the odd rows and columns of a 1x1/2), when dx is not accumulated; the other phases' convolutions
 * wrote theirs in place. One block per dx row as the interleave; a row none of whose phases is zeroed returns.
 * C % 8 == 0 and a 16-byte aligned dx (checked by the host). */
extern "C" __global__ void conv2d_dgrad_zero(const dgrad_phase_args a) {
    pdl_enter();
    const int h = blockIdx.x % a.h, pa = h % a.stride_h;
    const int row_mask = (a.zero_mask >> (pa * a.stride_w)) & ((1 << a.stride_w) - 1);
    if (!row_mask) return;
    const int c8 = a.c / 8, groups = a.w * c8;
    act_t *d = (act_t *)a.dx + (long long)blockIdx.x * a.w * a.c;
    for (int g = threadIdx.x; g < groups; g += blockDim.x) {
        const int w = g / c8;
        if ((row_mask >> (w % a.stride_w)) & 1) act8_store_packed(d + g * 8, act8_zero());
    }
}
