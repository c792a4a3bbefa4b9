/* conv2d_wgrad_few.cu -- the filter gradient of a convolution over few input channels (the first layer: an image's
 * 3 channels, the ResNet stem's 7x7/2 among them) on the tensor cores, mma.sync m16n8k16, F16/BF16, sm_80+.
 *
 *     dW[k][col] = sum over the N*P*Q output pixels of dy[pixel][k] * x_im2col[pixel][col],  col = (r*S + s)*C + c
 *
 * A GEMM of K <= 64 rows and R*S*C <= FEW_COLS columns whose reduction is the whole batch. The wgmma kernel takes 64
 * channels per filter tap and the generic kernels waste most of their tile on 3 channels (perf-log step 69), so here
 * each CTA keeps the whole dW (64 x FEW_COLS) in registers and walks its own contiguous range of 64-pixel blocks:
 *   1. dy's 64 x K block (contiguous in dy) copied by cp.async into dys[pixel][k] as it lies, two buffers: block
 *      b + 1's copies fly during block b's products, and ldmatrix.trans reads the fragments (perf-log step 102);
 *   2. the block's im2col columns gathered into xT[col][pixel] (zero outside the image and past the last pixel):
 *      warp w takes columns w, w + 8, ... (a per-CTA table gives each column's tap and offset, one 8-byte read shared
 *      by the warp) and lane l pixels 2l and 2l + 1, stored as one 32-bit pair;
 *   3. four k16 steps of mma over the 64 pixels: warp w takes rows 16*(w % 4) of dW and half of the column tiles.
 *      Rows of xT are FEW_PITCH elements apart, so the fragments' 32-bit loads hit 32 different banks; dys's rows
 *      are 144 bytes apart, so the 8 rows of an ldmatrix hit distinct banks.
 *   The gathers of step 2 are issued for the next block before step 3, their stores made after it.
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
#define FEW_PITCH (FEW_PIX + 8)        /* xT's elements per row: 36 words, so rows g = 0..7 start 4 banks apart */
#define FEW_DY_PITCH 72                /* dys's elements per row: 64 channels + 8, 144 bytes (16-byte aligned) */
#define FEW_THREADS 256
#define FEW_WARPS (FEW_THREADS / 32)
#define FEW_CPT (FEW_COLS / FEW_WARPS) /* im2col columns a thread gathers per block (for two pixels) */
#define FEW_CTAS (FEW_COLS <= 32 ? 4 : 2) /* per SM: the registers of dW's tile and of a block's loads in flight */
static_assert(FEW_PIX == 2 * 32, "a lane's two pixels of a block");

/* a zero in global memory: where a column's tap is outside the image (or past the last pixel) the load reads this
 * instead of x, so the gather needs no select (nor registers for its predicates) after the loads */
__device__ const act_t few_zero[1] = {0};

/* the window of one pixel: its corner (h0, w0) and the offset of that corner in x (may be < 0; N*H*W*C < 2^31,
 * the host checks); live: a real pixel */
struct few_pixel {
    int h0, w0, corner;
    bool live;
};
__device__ __forceinline__ few_pixel few_pixel_at(const conv_args &a, int n, int p, int q, bool live) {
    few_pixel px;
    px.h0 = p * a.stride_h - a.pad_h, px.w0 = q * a.stride_w - a.pad_w, px.live = live;
    px.corner = ((n * a.h + px.h0) * a.w + px.w0) * a.c;
    return px;
}

/* an im2col column: its tap, (r << 16) | s (-1 past the last column), and its offset from a window's corner in x,
 * (r*W + s)*C + c; one 8-byte read */
struct __align__(8) few_col {
    int rs, off;
};

/* The X im2col columns warp, warp + 8, ... of two pixels into v[0][0..X) and v[1][0..X): unconditional loads, one
 * after the other, none waited for here (perf-log step 93). */
template <int X>
__device__ __forceinline__ void gather_cols(const conv_args &a, const act_t *x, const few_col *tab, int warp,
                                           const few_pixel (&px)[2], act_t (&v)[2][FEW_CPT]) {
#pragma unroll
    for (int i = 0; i < X; i++) {
        const few_col t = tab[warp + i * FEW_WARPS];
        const int dr = t.rs >> 16, ds = t.rs & 0xffff;
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int h = px[e].h0 + dr, w = px[e].w0 + ds;
            const bool ok = px[e].live && t.rs >= 0 && (unsigned)h < (unsigned)a.h && (unsigned)w < (unsigned)a.w;
            v[e][i] = __ldg(ok ? x + px[e].corner + t.off : few_zero);
        }
    }
}

extern "C" __global__ void __launch_bounds__(FEW_THREADS, FEW_CTAS) conv2d_wgrad_few(const conv_args a) {
    pdl_enter();
    __shared__ __align__(16) act_t dys[2][FEW_PIX][FEW_DY_PITCH];
    __shared__ __align__(16) act_t xT[FEW_COLS][FEW_PITCH];
    __shared__ few_col col_tab[FEW_COLS];
    const act_t *x = (const act_t *)a.x, *dy = (const act_t *)a.dy;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t4 = lane & 3;
    const int ncols = a.gn, nt = (ncols + 7) / 8, pq = a.p * a.q;
    for (int col = tid; col < FEW_COLS; col += FEW_THREADS) {
        const int c = col % a.c, rs = col / a.c, s = rs % a.s, r = rs / a.s;
        col_tab[col] = few_col{col < ncols ? (r << 16) | s : -1, (r * a.w + s) * a.c + c};
    }
    const int mt = warp & 3, nt0 = (warp >> 2) * FEW_NT_WARP; /* this warp's rows and first column tile */
    const bool rows_live = 16 * mt < a.k;
    float acc[FEW_NT_WARP][4];
#pragma unroll
    for (int j = 0; j < FEW_NT_WARP; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    const int ncols8 = 8 * nt;
    const int nblocks = (a.gk + FEW_PIX - 1) / FEW_PIX;
    const int b0 = blockIdx.x * a.ktiles_per_split;
    const int b1 = min(b0 + a.ktiles_per_split, nblocks);
    const int vecs = FEW_PIX * a.k / 8; /* dy's 16-byte vectors per block (K % 8 == 0) */
    /* Block b's dy by cp.async into dys[b & 1] (zeros past the last pixel), its im2col values into registers, both
     * while block b - 1 is multiplied; the values are stored to shared memory after it: behind a branch and used at
     * once, each gathered load waited for the one before it (perf-log step 93). */
    act_t xv[2][FEW_CPT]; /* [pixel 2 * lane + e][column warp + 8i] */
    auto load_block = [&](int b) {
        const long long first = (long long)b * FEW_PIX;
        for (int j = tid; j < vecs; j += FEW_THREADS) {
            const int px = j / (a.k / 8), k0 = (j - px * (a.k / 8)) * 8;
            const bool live = first + px < a.gk;
            cp_async16(&dys[b & 1][px][k0], dy + (live ? (first + px) * a.k + k0 : 0), live);
        }
        cp_async_commit();
        /* pixels gp and gp + 1 of image n: output rows p (and the next when q + 1 == Q) */
        const int gp = (int)first + 2 * lane;
        int n = 0, p = 0, q = 0;
        if (gp < a.gk) {
            n = gp / pq;
            const int rem = gp - n * pq;
            p = rem / a.q, q = rem - p * a.q;
        }
        few_pixel px[2];
        px[0] = few_pixel_at(a, n, p, q, gp < a.gk);
        if (++q == a.q) {
            q = 0;
            if (++p == a.p) p = 0, n++;
        }
        px[1] = few_pixel_at(a, n, p, q, gp + 1 < a.gk);
#if FEW_CPT > 8
        /* as many columns per thread as the filter has (a warp-uniform choice), so a smaller filter loads no padding */
        if (ncols8 <= 64) gather_cols<8>(a, x, col_tab, warp, px, xv);
        else if (ncols8 <= 96) gather_cols<12>(a, x, col_tab, warp, px, xv);
        else if (ncols8 <= 128) gather_cols<16>(a, x, col_tab, warp, px, xv);
        else gather_cols<FEW_CPT>(a, x, col_tab, warp, px, xv);
#else
        gather_cols<FEW_CPT>(a, x, col_tab, warp, px, xv);
#endif
    };
    __syncthreads();
    if (b0 < b1) load_block(b0);
    for (int b = b0; b < b1; b++) {
        /* 1. the im2col columns into xT[col][pixel], a lane's two pixels as one word; then dy's block landed */
#pragma unroll
        for (int i = 0; i < FEW_CPT; i++) {
            const int col = warp + i * FEW_WARPS;
            if (col < ncols8) *(unsigned *)&xT[col][2 * lane] = (unsigned)xv[0][i] | (unsigned)xv[1][i] << 16;
        }
        cp_async_wait<0>();
        __syncthreads();
        /* 2. the next block's copies and loads in flight during this block's products (its dys buffer was last read
         * by block b - 1's products, before the barrier ending that iteration) */
        if (b + 1 < b1) load_block(b + 1);
        /* 3. dW[16*mt .., 8*(nt0 + j) ..] += dys[64 pixels][rows]^T * xT[cols][64 pixels]^T */
        if (rows_live) {
            const act_t(*d)[FEW_DY_PITCH] = dys[b & 1];
#pragma unroll
            for (int ks = 0; ks < FEW_PIX / 16; ks++) {
                const int kk = 16 * ks + 2 * t4;
                /* matrix j: pixels 16ks + 8*(j >> 1) + (0..7), channels 16mt + 8*(j & 1) + (0..7): transposed, the
                 * fragment's a[j] = A[g + 8*(j & 1)][2t4 + 8*(j >> 1) + (0, 1)] with A[k][pixel] */
                unsigned af[4];
                const int j = lane >> 3;
                ldmatrix_x4_trans(af, &d[16 * ks + 8 * (j >> 1) + (lane & 7)][16 * mt + 8 * (j & 1)]);
#pragma unroll
                for (int jt = 0; jt < FEW_NT_WARP; jt++) {
                    if (nt0 + jt >= nt) break;
                    unsigned bf[2];
                    bf[0] = *(const unsigned *)&xT[8 * (nt0 + jt) + g][kk];
                    bf[1] = *(const unsigned *)&xT[8 * (nt0 + jt) + g][kk + 8];
                    mma_m16n8k16(acc[jt], af, bf);
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
