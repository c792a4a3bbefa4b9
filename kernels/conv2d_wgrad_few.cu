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
 *   2. the block's im2col values gathered into xs[pixel][col] (zero outside the image and past the last pixel):
 *      warp w takes pixels 8w .. 8w + 7, lane l their columns l, l + 32, ..., so a warp's load reads 32 adjacent
 *      columns of one window (runs of S*C elements of x) and its store 32 adjacent elements of xs; the lane's taps
 *      offsets computed once; each pixel's window is computed by lane p and shuffled, and a window inside the image
 *      loads without bounds checks (perf-log step 103);
 *   3. four k16 steps of mma over the 64 pixels: warp w takes rows 16*(w % 4) of dW and half of the column tiles,
 *      both operands by ldmatrix.trans (xs's rows FEW_PITCH elements apart, dys's 144 bytes: the 8 rows of a load
 *      hit distinct banks).
 *   The gathers of step 2 are issued for the next block before step 3, their stores made after it.
 * Each CTA writes its partial dW to ws[blockIdx.x] and conv2d_wgrad_few_reduce adds the CTAs' partials in CTA order:
 * the result depends on the grid only, never on timing (--deterministic holds). With one CTA it writes dW itself.
 * A batch of slices (gridDim.y = a.wg_groups > 1, cnn_conv2d.choose_n): blockIdx.y is the slice, whose a.gk pixels
 * start at its first image, whose CTAs' partials are its own and whose sum goes to out + y * a.wg_out_stride: each
 * slice's bits those of a launch over it alone.
 * Fields of conv_args: the problem, gk = a slice's N*P*Q (the batch's without slices), gn = R*S*C, ktiles_per_split
 * = pixel blocks per CTA, splits = a slice's CTAs, x, dy, out (dW, float KRSC), ws, wg_groups, wg_out_stride.
 * Specialisation: ACT (F16/BF16), FEW_COLS (32 or 160: the 3x3 stems' tile of dW takes a quarter of the registers,
 * so twice the CTAs fit).
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
#define FEW_NT_WARP (FEW_NT / 2)       /* column tiles per warp, read two at a time */
#define FEW_PITCH (FEW_COLS + 8)       /* xs's elements per row: an odd number of 16-byte units, so the 8 rows of an
                                        * ldmatrix hit distinct banks */
#define FEW_DY_PITCH 72                /* dys's elements per row: 64 channels + 8, 144 bytes (16-byte aligned) */
#define FEW_THREADS 256
#define FEW_WARPS (FEW_THREADS / 32)
#define FEW_WPIX (FEW_PIX / FEW_WARPS) /* pixels a warp gathers per block */
#define FEW_SLOTS (FEW_COLS / 32)      /* a lane's columns per pixel: lane, lane + 32, ... */
#define FEW_CTAS (FEW_COLS <= 32 ? 4 : 2) /* per SM: the registers of dW's tile and of a block's loads in flight */
static_assert(FEW_WPIX == 8 && FEW_COLS % 32 == 0 && FEW_NT_WARP % 2 == 0, "the gather's and the B loads' shapes");

/* a zero in global memory: where a column's tap is outside the image (or past the last pixel) the load reads this
 * instead of x, so the gather needs no select (nor registers for its predicates) after the loads */
__device__ const act_t few_zero[1] = {0};

/* the window of one pixel: its corner (h0, w0), the offset of that corner in x (may be < 0; N*H*W*C < 2^31, the
 * host checks), and whether the whole window lies in the image (then no tap needs a bounds check); a pixel past
 * the last has h0 = FEW_DEAD, outside every image, so its taps all read few_zero */
#define FEW_DEAD (-(1 << 28))
struct few_pixel {
    int h0, w0, corner, inner;
};

/* an im2col column: its tap, (r << 16) | s (-1 past the last column), and its offset from a window's corner in x,
 * (r*W + s)*C + c; one 8-byte read */
struct __align__(8) few_col {
    int rs, off;
};

/* The im2col values of the warp's 8 pixels, X slots of 32 columns each: v[p][k] = column lane + 32k of pixel p.
 * Pixel p's window comes from lane p (`mine`), so each branch below is taken by the whole warp. A window inside
 * the image loads at corner + off[k] (the lane's columns' offsets; 0 past the last column, whose products land in
 * columns of dW never written); one at the border checks each tap against the image, its tap from the CTA's table.
 * Unconditional loads, one after the other, none waited for here (perf-log step 93). */
template <int X>
__device__ __forceinline__ void gather_cols(const conv_args &a, const act_t *x, const few_pixel &mine,
                                           const few_col *tab, int lane, const int (&off)[FEW_SLOTS],
                                           act_t (&v)[FEW_WPIX][FEW_SLOTS]) {
#pragma unroll
    for (int p = 0; p < FEW_WPIX; p++) {
        const int corner = __shfl_sync(0xffffffffu, mine.corner, p);
        if (__shfl_sync(0xffffffffu, mine.inner, p)) {
#pragma unroll
            for (int k = 0; k < X; k++) v[p][k] = __ldg(x + (corner + off[k]));
        } else {
            const int h0 = __shfl_sync(0xffffffffu, mine.h0, p), w0 = __shfl_sync(0xffffffffu, mine.w0, p);
#pragma unroll
            for (int k = 0; k < X; k++) {
                const few_col t = tab[lane + 32 * k];
                const int h = h0 + (t.rs >> 16), w = w0 + (t.rs & 0xffff);
                const bool ok = t.rs >= 0 && (unsigned)h < (unsigned)a.h && (unsigned)w < (unsigned)a.w;
                v[p][k] = __ldg(ok ? x + corner + t.off : few_zero);
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(FEW_THREADS, FEW_CTAS) conv2d_wgrad_few(const conv_args a) {
    pdl_enter();
    __shared__ __align__(16) act_t dys[2][FEW_PIX][FEW_DY_PITCH];
    __shared__ __align__(16) act_t xs[FEW_PIX][FEW_PITCH];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t4 = lane & 3;
    const int ncols = a.gn, nt = (ncols + 7) / 8, ncols8 = 8 * nt, pq = a.p * a.q;
    /* slice blockIdx.y's images (a.gk / pq of them) and output gradient */
    const act_t *x = (const act_t *)a.x + (long long)blockIdx.y * (a.gk / pq) * a.h * a.w * a.c;
    const act_t *dy = (const act_t *)a.dy + (long long)blockIdx.y * a.gk * a.k;
    __shared__ few_col col_tab[FEW_COLS];
    for (int col = tid; col < FEW_COLS; col += FEW_THREADS) {
        const int c = col % a.c, rs = col / a.c, s = rs % a.s, r = rs / a.s;
        col_tab[col] = few_col{col < ncols ? (r << 16) | s : -1, col < ncols ? (r * a.w + s) * a.c + c : 0};
    }
    int off[FEW_SLOTS]; /* the lane's columns' offsets from a window's corner, for inner windows (after the barrier:
                         * the table's) */
    const int mt = warp & 3, nt0 = (warp >> 2) * FEW_NT_WARP; /* this warp's rows and first column tile */
    const bool rows_live = 16 * mt < a.k;
    float acc[FEW_NT_WARP][4];
#pragma unroll
    for (int j = 0; j < FEW_NT_WARP; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    const int nblocks = (a.gk + FEW_PIX - 1) / FEW_PIX;
    const int b0 = blockIdx.x * a.ktiles_per_split;
    const int b1 = min(b0 + a.ktiles_per_split, nblocks);
    const int vecs = FEW_PIX * a.k / 8; /* dy's 16-byte vectors per block (K % 8 == 0) */
    /* Block b's dy by cp.async into dys[b & 1] (zeros past the last pixel), its im2col values into registers, both
     * while block b - 1 is multiplied; the values are stored to shared memory after it: behind a branch and used at
     * once, each gathered load waited for the one before it (perf-log step 93). */
    act_t xv[FEW_WPIX][FEW_SLOTS]; /* [pixel FEW_WPIX * warp + p][column lane + 32k] */
    auto load_block = [&](int b) {
        const long long first = (long long)b * FEW_PIX;
        for (int j = tid; j < vecs; j += FEW_THREADS) {
            const int px = j / (a.k / 8), k0 = (j - px * (a.k / 8)) * 8;
            const bool live = first + px < a.gk;
            cp_async16(&dys[b & 1][px][k0], dy + (live ? (first + px) * a.k + k0 : 0), live);
        }
        cp_async_commit();
        /* lane p < 8: the window of the warp's pixel p (the other lanes compute one they do not give) */
        const int gp = (int)first + FEW_WPIX * warp + (lane & (FEW_WPIX - 1));
        few_pixel mine = {FEW_DEAD, 0, 0, 0};
        if (gp < a.gk) {
            const int n = gp / pq, rem = gp - n * pq, p = rem / a.q, q = rem - p * a.q;
            mine.h0 = p * a.stride_h - a.pad_h, mine.w0 = q * a.stride_w - a.pad_w;
            mine.corner = ((n * a.h + mine.h0) * a.w + mine.w0) * a.c;
            mine.inner = mine.h0 >= 0 && mine.h0 + a.r <= a.h && mine.w0 >= 0 && mine.w0 + a.s <= a.w;
        }
#if FEW_SLOTS > 2
        /* as many slots as the filter's columns need (a warp-uniform choice), so a smaller filter loads no padding */
        if (ncols8 <= 64) gather_cols<2>(a, x, mine, col_tab, lane, off, xv);
        else if (ncols8 <= 96) gather_cols<3>(a, x, mine, col_tab, lane, off, xv);
        else if (ncols8 <= 128) gather_cols<4>(a, x, mine, col_tab, lane, off, xv);
        else gather_cols<FEW_SLOTS>(a, x, mine, col_tab, lane, off, xv);
#else
        gather_cols<FEW_SLOTS>(a, x, mine, col_tab, lane, off, xv);
#endif
    };
    __syncthreads();
#pragma unroll
    for (int k = 0; k < FEW_SLOTS; k++) off[k] = col_tab[lane + 32 * k].off;
    if (b0 < b1) load_block(b0);
    for (int b = b0; b < b1; b++) {
        /* 1. the warp's pixels' im2col values into xs[pixel][col] (a warp's store: 32 adjacent columns); then dy's
         * block landed */
#pragma unroll
        for (int p = 0; p < FEW_WPIX; p++)
#pragma unroll
            for (int k = 0; k < FEW_SLOTS; k++)
                if (lane + 32 * k < ncols8) xs[FEW_WPIX * warp + p][lane + 32 * k] = xv[p][k];
        cp_async_wait<0>();
        __syncthreads();
        /* 2. the next block's copies and loads in flight during this block's products (its dys buffer was last read
         * by block b - 1's products, before the barrier ending that iteration) */
        if (b + 1 < b1) load_block(b + 1);
        /* 3. dW[16*mt .., 8*(nt0 + j) ..] += dys[64 pixels][rows]^T * xs[64 pixels][cols] */
        if (rows_live) {
            const act_t(*d)[FEW_DY_PITCH] = dys[b & 1];
            const int j = lane >> 3;
#pragma unroll
            for (int ks = 0; ks < FEW_PIX / 16; ks++) {
                /* A, matrix j: pixels 16ks + 8*(j >> 1) + (0..7), channels 16mt + 8*(j & 1) + (0..7): transposed, the
                 * fragment's a[j] = A[g + 8*(j & 1)][2t4 + 8*(j >> 1) + (0, 1)] with A[k][pixel] */
                unsigned af[4];
                ldmatrix_x4_trans(af, &d[16 * ks + 8 * (j >> 1) + (lane & 7)][16 * mt + 8 * (j & 1)]);
                /* B of two column tiles, matrix j: pixels 16ks + 8*(j & 1) + (0..7), columns 8*(tile + (j >> 1)) +
                 * (0..7): transposed, b[0..1] of the first tile and b[2..3] of the second */
#pragma unroll
                for (int jt = 0; jt < FEW_NT_WARP; jt += 2) {
                    if (nt0 + jt >= nt) break;
                    unsigned bf[4];
                    ldmatrix_x4_trans(bf, &xs[16 * ks + 8 * (j & 1) + (lane & 7)][8 * (nt0 + jt + (j >> 1))]);
                    mma_m16n8k16(acc[jt], af, bf);
                    if (nt0 + jt + 1 < nt) mma_m16n8k16(acc[jt + 1], af, bf + 2);
                }
            }
        }
        __syncthreads();
    }
    /* the partial (or, alone, the result): D[g][2t..2t+1] and D[g+8][2t..2t+1] of each tile */
    if (!rows_live) return;
    float *out = a.splits > 1 ? a.ws + ((long long)blockIdx.y * a.splits + blockIdx.x) * a.k * ncols
                              : (float *)a.out + blockIdx.y * a.wg_out_stride;
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
 * CTAs' partials was a chain of loads (perf-log step 92). blockIdx.y: the slice whose CTAs this block adds. */
#define RED_LANES 8
extern "C" __global__ void __launch_bounds__(32 * RED_LANES) conv2d_wgrad_few_reduce(const conv_args a) {
    pdl_enter();
    __shared__ float sh[RED_LANES][32];
    const long long total = (long long)a.k * a.gn;
    const int tx = threadIdx.x & 31, ly = threadIdx.x >> 5;
    const float *ws = a.ws + (long long)blockIdx.y * a.splits * total;
    float *out = (float *)a.out + blockIdx.y * a.wg_out_stride;
    for (long long base = (long long)blockIdx.x * 32; base < total; base += (long long)gridDim.x * 32) {
        const long long i = base + tx;
        float s = 0.0f;
        if (i < total)
#pragma unroll 4
            for (int c = ly; c < a.splits; c += RED_LANES) s += ws[c * total + i];
        sh[ly][tx] = s;
        __syncthreads();
        if (ly == 0 && i < total) {
            float t = sh[0][tx];
            for (int l = 1; l < RED_LANES; l++) t += sh[l][tx];
            out[i] = t;
        }
        __syncthreads();
    }
}
