/* conv2d_tc.cu -- forward convolution on tensor cores for the shapes that make up almost all of a ResNet or a
 * VGG: F16/BF16 NHWC activations with C % 32 == 0 and K % 8 == 0, every kernel size, stride and padding.
 * Implicit GEMM y[NPQ][K] = x_im2col[NPQ][RSC] * w[K][RSC]^T, no im2col in memory:
 *   - a BK=32 reduction slice lies inside one filter tap (r, s) because C % 32 == 0, so each GEMM row of the
 *     slice is 64 contiguous bytes of x: four 16-byte cp.async copies, zero-filled outside the image;
 *   - STAGES shared-memory stages in flight (cp.async groups), one __syncthreads per slice;
 *   - rows of 64 bytes with the 16-byte chunks XOR-swizzled by (row/2)%4, so ldmatrix.x4 reads and cp.async
 *     writes are free of bank conflicts;
 *   - mma.sync.m16n8k16 with fp32 accumulators, warp tile (BM/WM) x (BN/WN);
 *   - fused epilogue: per-output-channel scale and shift (folded BatchNorm or bias), residual add, ReLU, one
 *     rounding to the activation type; lanes trade accumulators so each stores 8 channels (16 bytes);
 *   - split-K for small outputs (batch 1): gridDim.z splits of the reduction each write an fp32 partial tile to
 *     a.ws, and conv2d_tc_splitk_epilogue adds them in split order (deterministic) and applies the epilogue.
 * Specialisation (-D, src/cuda/conv2d.c): BM BN (CTA tile), WM WN (warps), STAGES, ACT (F16 or BF16).
 * The launcher checks the preconditions (C % 32, K % 8, 16-byte aligned pointers) and otherwise uses the
 * generic kernels of conv2d.cu.
 */
#include "common.cuh"
#include "params.cuh"

#if !defined(BM) || !defined(BN) || !defined(WM) || !defined(WN) || !defined(STAGES)
#error "conv2d_tc.cu needs -DBM -DBN -DWM -DWN -DSTAGES"
#endif
#if ACT == ACT_F32
#error "conv2d_tc.cu takes F16 or BF16 activations"
#endif

#define BK 32
#define NT (32 * WM * WN)
#define WTM (BM / WM)
#define WTN (BN / WN)
#define MT (WTM / 16)
#define NT8 (WTN / 8)
#define A_PER (BM * 4 / NT) /* 16-byte chunks of A per thread per slice */
#define B_PER (BN * 4 / NT)
static_assert(WTM % 16 == 0 && WTN % 32 == 0, "warp tile: m16 rows, groups of four n8 columns");
static_assert((BM * 4) % NT == 0 && (BN * 4) % NT == 0, "slice loads must divide over the threads");
static_assert(STAGES >= 2, "at least double buffering");
static_assert((BM + BN) * BK * 2 * STAGES <= 48 * 1024, "static shared memory");

/* element offset of chunk `ch` (0..3, 8 elements each) of row `row` in a [rows][32] stage */
__device__ __forceinline__ int swz(int row, int ch) { return row * BK + ((ch ^ ((row >> 1) & 3)) << 3); }

__device__ __forceinline__ unsigned pack2(float lo, float hi) {
    return (unsigned)f32_to_act(lo) | ((unsigned)f32_to_act(hi) << 16);
}

extern "C" __global__ void __launch_bounds__(NT) conv2d_fprop_tc(const conv_args a) {
    __shared__ __align__(128) act_t As[STAGES][BM * BK];
    __shared__ __align__(128) act_t Bs[STAGES][BN * BK];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const act_t *x = (const act_t *)a.x;
    const act_t *wt = (const act_t *)a.wt;
    const int kt_begin = blockIdx.z * a.ktiles_per_split;
    const int kt_end = min(a.gk / BK, kt_begin + a.ktiles_per_split);
    const int ktiles = kt_end - kt_begin; /* this split's slices */
    const int ch = tid & 3; /* this thread's 16-byte chunk of every row it loads */

    /* A rows of this thread: output pixel (img, p, q) -> input window origin */
    long long a_img[A_PER];
    int a_hb[A_PER], a_wb[A_PER];
    bool a_ok[A_PER];
#pragma unroll
    for (int i = 0; i < A_PER; i++) {
        int m = m0 + (tid >> 2) + i * (NT / 4);
        a_ok[i] = m < a.gm;
        int mm = a_ok[i] ? m : 0;
        int img = mm / (a.p * a.q), pq = mm - img * (a.p * a.q);
        int p = pq / a.q, q = pq - p * a.q;
        a_img[i] = (long long)img * a.h * a.w * a.c;
        a_hb[i] = p * a.stride_h - a.pad_h;
        a_wb[i] = q * a.stride_w - a.pad_w;
    }
    const act_t *b_src[B_PER];
    bool b_ok[B_PER];
#pragma unroll
    for (int j = 0; j < B_PER; j++) {
        int n = n0 + (tid >> 2) + j * (NT / 4);
        b_ok[j] = n < a.gn;
        b_src[j] = wt + (long long)(b_ok[j] ? n : 0) * a.gk + ch * 8;
    }

    auto load_slice = [&](int stage, int kt) {
        const int kk = (kt_begin + kt) * BK;
        const int rs = kk / a.c, c0 = kk - rs * a.c;
        const int r = rs / a.s, s = rs - r * a.s;
#pragma unroll
        for (int i = 0; i < A_PER; i++) {
            const int row = (tid >> 2) + i * (NT / 4);
            const int hi = a_hb[i] + r, wi = a_wb[i] + s;
            const bool ok = a_ok[i] && (unsigned)hi < (unsigned)a.h && (unsigned)wi < (unsigned)a.w;
            const act_t *src = ok ? x + a_img[i] + ((long long)hi * a.w + wi) * a.c + c0 + ch * 8 : x;
            cp_async16(&As[stage][swz(row, ch)], src, ok);
        }
#pragma unroll
        for (int j = 0; j < B_PER; j++) {
            const int row = (tid >> 2) + j * (NT / 4);
            cp_async16(&Bs[stage][swz(row, ch)], b_ok[j] ? b_src[j] + kk : wt, b_ok[j]);
        }
    };

    const int wm0 = (warp / WN) * WTM, wn0 = (warp % WN) * WTN;
    float acc[MT][NT8][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < NT8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

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
#pragma unroll
            for (int i = 0; i < MT; i++)
#pragma unroll
                for (int j = 0; j < NT8; j++) mma_m16n8k16(acc[i][j], af[i], bf[j]);
        }
    };

    /* ---- the pipeline: STAGES-1 slices in flight while one is multiplied ---- */
#pragma unroll
    for (int st = 0; st < STAGES - 1; st++) {
        if (st < ktiles) load_slice(st, st);
        cp_async_commit();
    }
    for (int kt = 0; kt < ktiles; kt++) {
        cp_async_wait<STAGES - 2>();
        __syncthreads(); /* slice kt landed for every thread; every warp is done with slice kt-1's stage */
        const int pf = kt + STAGES - 1;
        if (pf < ktiles) load_slice(pf % STAGES, pf);
        cp_async_commit();
        compute_slice(kt % STAGES);
    }
    cp_async_wait<0>();

    /* ---- epilogue: accumulator (i, j, e) is row g (+8 for e >= 2), columns 2*t4 and 2*t4 + 1 ---- */
    act_t *y = (act_t *)a.out;
    const act_t *res = (const act_t *)a.residual;
    const int g = lane >> 2, t4 = lane & 3;
    if (a.splits > 1) { /* partial sums of this split, the epilogue comes after all of them */
        float *ws = a.ws + (long long)blockIdx.z * a.gm * a.gn;
#pragma unroll
        for (int j = 0; j < NT8; j++) {
            const int n = n0 + wn0 + j * 8 + 2 * t4;
            if (n >= a.gn) continue;
#pragma unroll
            for (int i = 0; i < MT; i++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int m = m0 + wm0 + i * 16 + g + h * 8;
                    if (m < a.gm) *(float2 *)(ws + (long long)m * a.gn + n) = make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
                }
        }
        return;
    }
    /* Four lanes of a row (t4 = 0..3) trade the column pairs of four consecutive n8 tiles -- a 4x4 transpose by
     * XOR shuffles: in round r lane t4 sends its pair of tile t4^r and receives its partner's pair of tile t4 --
     * so each lane owns 8 consecutive channels: 16-byte residual loads and stores, 64 contiguous bytes per row
     * per warp instruction. */
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int m = m0 + wm0 + i * 16 + g + h * 8;
#pragma unroll
            for (int jb = 0; jb < NT8; jb += 4) {
                float gx[4], gy[4];
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const int q = t4 ^ r;
                    const float sx = q == 0 ? acc[i][jb][2 * h] : q == 1 ? acc[i][jb + 1][2 * h]
                                   : q == 2 ? acc[i][jb + 2][2 * h] : acc[i][jb + 3][2 * h];
                    const float sy = q == 0 ? acc[i][jb][2 * h + 1] : q == 1 ? acc[i][jb + 1][2 * h + 1]
                                   : q == 2 ? acc[i][jb + 2][2 * h + 1] : acc[i][jb + 3][2 * h + 1];
                    gx[r] = __shfl_xor_sync(0xffffffffu, sx, r);
                    gy[r] = __shfl_xor_sync(0xffffffffu, sy, r);
                }
                /* gx/gy[r] = columns 2*(t4^r), +1 of tile jb + t4 */
                float v[8];
#pragma unroll
                for (int sp = 0; sp < 4; sp++) {
                    const int r = t4 ^ sp;
                    v[2 * sp] = r == 0 ? gx[0] : r == 1 ? gx[1] : r == 2 ? gx[2] : gx[3];
                    v[2 * sp + 1] = r == 0 ? gy[0] : r == 1 ? gy[1] : r == 2 ? gy[2] : gy[3];
                }
                const int n = n0 + wn0 + (jb + t4) * 8;
                if (m >= a.gm || n >= a.gn) continue; /* K % 8 == 0: all 8 channels or none */
                const long long o = (long long)m * a.gn + n;
#pragma unroll
                for (int k = 0; k < 8; k++) v[k] = v[k] * (a.scale ? a.scale[n + k] : 1.0f) + (a.shift ? a.shift[n + k] : 0.0f);
                if (res) {
                    float rv[8];
                    act_load_vec(res + o, rv);
#pragma unroll
                    for (int k = 0; k < 8; k++) v[k] += rv[k];
                }
                if (a.relu) {
#pragma unroll
                    for (int k = 0; k < 8; k++) v[k] = v[k] > 0.0f ? v[k] : 0.0f;
                }
                act_store_vec(y + o, v);
            }
        }
}

/* y = epilogue(sum over the splits of ws, in split order): grid-stride over (m, n) pairs of channels. */
extern "C" __global__ void conv2d_tc_splitk_epilogue(const conv_args a) {
    const long long pairs = (long long)a.gm * a.gn / 2;
    act_t *y = (act_t *)a.out;
    const act_t *res = (const act_t *)a.residual;
    const long long plane = (long long)a.gm * a.gn;
    for (long long i = GRID_TID; i < pairs; i += GRID_STRIDE) {
        const long long o = 2 * i;
        const int n = (int)(o % a.gn);
        float v0 = 0.0f, v1 = 0.0f;
        for (int z = 0; z < a.splits; z++) {
            const float2 p = *(const float2 *)(a.ws + z * plane + o);
            v0 += p.x;
            v1 += p.y;
        }
        v0 = v0 * (a.scale ? a.scale[n] : 1.0f) + (a.shift ? a.shift[n] : 0.0f);
        v1 = v1 * (a.scale ? a.scale[n + 1] : 1.0f) + (a.shift ? a.shift[n + 1] : 0.0f);
        if (res) {
            v0 += act_to_f32(res[o]);
            v1 += act_to_f32(res[o + 1]);
        }
        if (a.relu) {
            v0 = v0 > 0.0f ? v0 : 0.0f;
            v1 = v1 > 0.0f ? v1 : 0.0f;
        }
        *(unsigned *)(y + o) = pack2(v0, v1);
    }
}
