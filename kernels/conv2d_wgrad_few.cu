/* conv2d_wgrad_few.cu -- the filter gradient of a convolution over few input channels (the first layer: an image's
 * 3 channels, the ResNet stem's 7x7/2 among them) on the tensor cores, mma.sync m16n8k16, F16/BF16, sm_80+.
 *
 *     dW[k][col] = sum over the N*P*Q output pixels of dy[pixel][k] * x_im2col[pixel][col],  col = (r*S + s)*C + c
 *
 * A GEMM of K <= 64 rows and R*S*C <= FEW_COLS columns whose reduction is the whole batch. The wgmma kernel takes 64
 * channels per filter tap and the generic kernels waste most of their tile on 3 channels (perf-log step 69), so here
 * each CTA keeps the whole dW (64 x FEW_COLS) in registers and walks its own contiguous range of 64-pixel blocks:
 *   1. dy's 64 x K block, transposed into shared memory as dyT[k][pixel] (16-byte loads, a pixel per thread);
 *   2. the block's im2col columns gathered into xT[col][pixel] (zero outside the image and past the last pixel);
 *      every thread keeps one pixel, so its coordinates are computed once per block, and a per-CTA table gives each
 *      column's tap and offset;
 *   3. four k16 steps of mma over the 64 pixels: warp w takes rows 16*(w % 4) of dW and half of the column tiles.
 *      Rows of both tiles are FEW_PITCH elements apart, so the fragments' 32-bit loads hit 32 different banks.
 *   The loads of steps 1 and 2 are issued for the next block before step 3, their stores made after it.
 * Each CTA writes its partial dW to ws[blockIdx.x] and conv2d_wgrad_few_reduce adds the CTAs' partials in CTA order:
 * the result depends on the grid only, never on timing (--deterministic holds). With one CTA it writes dW itself.
 * Fields of conv_args: the problem, gk = N*P*Q, gn = R*S*C, ktiles_per_split = pixel blocks per CTA, splits = CTAs,
 * x, dy, out (dW, float KRSC), ws. Specialisation: ACT (F16/BF16), FEW_COLS (32 or 160: the 3x3 stems' tile of dW
 * takes a quarter of the registers, so twice the CTAs fit).
 */
#include "common.cuh"
#include "params.cuh"

#if !defined(ACT) || ACT == ACT_F32
#error "conv2d_wgrad_few.cu multiplies F16/BF16 operands (m16n8k16)"
#endif

#define FEW_PIX 64                     /* pixels per block: four k16 steps */
#ifndef FEW_COLS
#define FEW_COLS 160                   /* R*S*C at most: 20 column tiles of 8 (config cols160), or 4 (cols32) */
#endif
#define FEW_NT (FEW_COLS / 8)
#define FEW_NT_WARP (FEW_NT / 2)       /* column tiles per warp */
#define FEW_PITCH (FEW_PIX + 8)        /* elements per shared row: 36 words, so rows g = 0..7 start 4 banks apart */
#define FEW_THREADS 256
#define FEW_XPT (FEW_COLS / (FEW_THREADS / FEW_PIX)) /* im2col columns a thread loads per block */
#define FEW_CTAS (FEW_COLS <= 32 ? 4 : 2) /* per SM: the registers of dW's tile and of a block's loads in flight */

/* a zero in global memory: where a column's tap is outside the image (or past the last pixel) the load reads this
 * instead of x, so the gather needs no select (nor registers for its predicates) after the loads */
__device__ const act_t few_zero[1] = {0};

/* The X im2col columns part, part + 4, ... of one pixel (window corner h0, w0; corner its offset in x) into v[0..X):
 * unconditional loads, one after the other, none waited for here (perf-log step 93). */
template <int X>
__device__ __forceinline__ void gather_cols(const conv_args &a, const act_t *x, const int *col_rs, const int *col_off,
                                           int part, bool live, int h0, int w0, long long corner, act_t *v) {
#pragma unroll
    for (int i = 0; i < X; i++) {
        const int col = part + i * (FEW_THREADS / FEW_PIX), rs = col_rs[col];
        const int h = h0 + (rs >> 16), w = w0 + (rs & 0xffff);
        const bool ok = live && rs >= 0 && (unsigned)h < (unsigned)a.h && (unsigned)w < (unsigned)a.w;
        v[i] = __ldg(ok ? x + corner + col_off[col] : few_zero);
    }
}

extern "C" __global__ void __launch_bounds__(FEW_THREADS, FEW_CTAS) conv2d_wgrad_few(const conv_args a) {
    pdl_enter();
    __shared__ __align__(16) act_t dyT[64][FEW_PITCH];
    __shared__ __align__(16) act_t xT[FEW_COLS][FEW_PITCH];
    __shared__ int col_rs[FEW_COLS]; /* (r << 16) | s of column col */
    __shared__ int col_off[FEW_COLS]; /* (r*W + s)*C + c: its offset from the window's corner in x */
    const act_t *x = (const act_t *)a.x, *dy = (const act_t *)a.dy;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t4 = lane & 3;
    const int ncols = a.gn, nt = (ncols + 7) / 8, pq = a.p * a.q;
    for (int col = tid; col < FEW_COLS; col += FEW_THREADS) {
        const int c = col % a.c, rs = col / a.c, s = rs % a.s, r = rs / a.s;
        col_rs[col] = col < ncols ? (r << 16) | s : -1;
        col_off[col] = (r * a.w + s) * a.c + c;
    }
    const int mt = warp & 3, nt0 = (warp >> 2) * FEW_NT_WARP; /* this warp's rows and first column tile */
    const bool rows_live = 16 * mt < a.k;
    float acc[FEW_NT_WARP][4];
#pragma unroll
    for (int j = 0; j < FEW_NT_WARP; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    const int pix = tid % FEW_PIX, part = tid / FEW_PIX; /* this thread's pixel of each block; its 16 channels of dy */
    const int ncols8 = 8 * nt;
    const int nblocks = (a.gk + FEW_PIX - 1) / FEW_PIX;
    const int b0 = blockIdx.x * a.ktiles_per_split;
    const int b1 = min(b0 + a.ktiles_per_split, nblocks);
    /* Block b's operands are loaded into registers while block b - 1 is multiplied, and stored to shared memory
     * after it: behind a branch and used at once, each gathered load waited for the one before it (perf-log step
     * 93). */
    uint4 dyv[2];
    act_t xv[FEW_XPT]; /* column part + 4i of this thread's pixel */
    auto load_block = [&](int b) {
        const int gp = b * FEW_PIX + pix;
        const bool live = gp < a.gk;
        /* dy: channels 16*part .. 16*part + 15 of pixel gp, two 16-byte vectors (K % 8 == 0) */
#pragma unroll
        for (int v = 0; v < 2; v++) {
            const int k0 = 16 * part + 8 * v;
            dyv[v] = uint4{0u, 0u, 0u, 0u};
            if (live && k0 < a.k) dyv[v] = __ldg((const uint4 *)(dy + (long long)gp * a.k + k0));
        }
        /* the im2col columns part, part + 4, ... of pixel gp: window corner (h0, w0) of image n */
        int n = 0, h0 = 0, w0 = 0;
        if (live) {
            n = gp / pq;
            const int rem = gp - n * pq, p = rem / a.q, q = rem - p * a.q;
            h0 = p * a.stride_h - a.pad_h, w0 = q * a.stride_w - a.pad_w;
        }
        const long long corner = (long long)n * a.h * a.w * a.c + ((long long)h0 * a.w + w0) * a.c; /* may be < 0 */
#if FEW_XPT > 8
        /* as many columns per thread as the filter has (a warp-uniform choice), so a smaller filter loads no padding */
        if (ncols8 <= 64) gather_cols<16>(a, x, col_rs, col_off, part, live, h0, w0, corner, xv);
        else if (ncols8 <= 96) gather_cols<24>(a, x, col_rs, col_off, part, live, h0, w0, corner, xv);
        else if (ncols8 <= 128) gather_cols<32>(a, x, col_rs, col_off, part, live, h0, w0, corner, xv);
        else gather_cols<FEW_XPT>(a, x, col_rs, col_off, part, live, h0, w0, corner, xv);
#else
        gather_cols<FEW_XPT>(a, x, col_rs, col_off, part, live, h0, w0, corner, xv);
#endif
    };
    __syncthreads();
    if (b0 < b1) load_block(b0);
    for (int b = b0; b < b1; b++) {
        /* 1. dy's block transposed into dyT[k][pixel], the im2col columns into xT[col][pixel] */
#pragma unroll
        for (int v = 0; v < 2; v++) {
            const int k0 = 16 * part + 8 * v;
            const unsigned w[4] = {dyv[v].x, dyv[v].y, dyv[v].z, dyv[v].w};
#pragma unroll
            for (int e = 0; e < 4; e++) {
                dyT[k0 + 2 * e][pix] = (act_t)(w[e] & 0xffffu);
                dyT[k0 + 2 * e + 1][pix] = (act_t)(w[e] >> 16);
            }
        }
#pragma unroll
        for (int i = 0; i < FEW_XPT; i++) {
            const int col = part + i * (FEW_THREADS / FEW_PIX);
            if (col < ncols8) xT[col][pix] = xv[i];
        }
        __syncthreads();
        /* 2. the next block's loads in flight during this block's products */
        if (b + 1 < b1) load_block(b + 1);
        /* 3. dW[16*mt .., 8*(nt0 + j) ..] += dyT[rows][64 pixels] * xT[cols][64 pixels]^T */
        if (rows_live) {
#pragma unroll
            for (int ks = 0; ks < FEW_PIX / 16; ks++) {
                const int kk = 16 * ks + 2 * t4;
                unsigned af[4];
                af[0] = *(const unsigned *)&dyT[16 * mt + g][kk];
                af[1] = *(const unsigned *)&dyT[16 * mt + g + 8][kk];
                af[2] = *(const unsigned *)&dyT[16 * mt + g][kk + 8];
                af[3] = *(const unsigned *)&dyT[16 * mt + g + 8][kk + 8];
#pragma unroll
                for (int j = 0; j < FEW_NT_WARP; j++) {
                    if (nt0 + j >= nt) break;
                    unsigned bf[2];
                    bf[0] = *(const unsigned *)&xT[8 * (nt0 + j) + g][kk];
                    bf[1] = *(const unsigned *)&xT[8 * (nt0 + j) + g][kk + 8];
                    mma_m16n8k16(acc[j], af, bf);
                }
            }
        }
        __syncthreads();
    }
    /* the partial (or, alone, the result): D[g][2t..2t+1] and D[g+8][2t..2t+1] of each tile */
    if (!rows_live) return;
    float *out = a.splits > 1 ? a.ws + (long long)blockIdx.x * a.k * ncols : (float *)a.out;
#pragma unroll
    for (int j = 0; j < FEW_NT_WARP; j++) {
        const int col = 8 * (nt0 + j) + 2 * t4;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int k = 16 * mt + g + 8 * h;
            if (k >= a.k) continue;
            if (col < ncols) out[(long long)k * ncols + col] = acc[j][2 * h];
            if (col + 1 < ncols) out[(long long)k * ncols + col + 1] = acc[j][2 * h + 1];
        }
    }
}

/* dW = the CTAs' partials added in CTA order: blocks of 32 elements x RED_LANES lanes, lane l adding CTAs l, l +
 * RED_LANES, ... in order, then lane 0 adding the lanes in order (deterministic). One thread walking hundreds of
 * CTAs' partials was a chain of loads (perf-log step 92). */
#define RED_LANES 8
extern "C" __global__ void __launch_bounds__(32 * RED_LANES) conv2d_wgrad_few_reduce(const conv_args a) {
    pdl_enter();
    __shared__ float sh[RED_LANES][32];
    const long long total = (long long)a.k * a.gn;
    const int tx = threadIdx.x & 31, ly = threadIdx.x >> 5;
    for (long long base = (long long)blockIdx.x * 32; base < total; base += (long long)gridDim.x * 32) {
        const long long i = base + tx;
        float s = 0.0f;
        if (i < total)
#pragma unroll 4
            for (int c = ly; c < a.splits; c += RED_LANES) s += a.ws[c * total + i];
        sh[ly][tx] = s;
        __syncthreads();
        if (ly == 0 && i < total) {
            float t = sh[0][tx];
            for (int l = 1; l < RED_LANES; l++) t += sh[l][tx];
            ((float *)a.out)[i] = t;
        }
        __syncthreads();
    }
}
