/* conv2d.cu -- convolution as a tiled implicit GEMM with fp32 accumulation, for the three passes, with two
 * compute cores sharing one set of operand loaders:
 *     MMA=0  SIMT: fp32 FMA on operands converted to float in shared memory (every dtype; exact fp32 for F32)
 *     MMA=1  tensor cores: mma.sync.m16n8k16 on f16/bf16 operands kept in their storage type (F16, BF16 only)
 * Specialisation (-D, written by src/cuda/conv2d.c):
 *     PASS   0 fprop, 1 dgrad, 2 wgrad
 *     BM BN BK  CTA tile of the GEMM view (rows, cols, reduction slice)
 *     TM TN     SIMT: per-thread sub-tile; threads = (BM/TM)*(BN/TN)
 *     WM WN     MMA: warps along rows and columns; threads = 32*WM*WN, warp tile (BM/WM) x (BN/WN)
 *     ACT       activation dtype (common.cuh)
 * The GEMM views are in params.cuh. Every shape is valid: rows, columns and the reduction are masked at the
 * edges, C need not be a multiple of anything, any stride, padding and kernel size. Operands are gathered with
 * scalar loads, so no alignment is assumed.
 *
 * Loads are arranged for coalescing along the contiguous NHWC/KRSC dimension of each operand:
 *     fprop  A = x gathered along (r, s, c): c contiguous -> "k-fast"    B = w [K][RSC]: k-fast
 *     dgrad  A = dy gathered along (r, s, k): k contiguous -> k-fast     B = w[k][rs][c]: c contiguous -> "n-fast"
 *     wgrad  A = dy [NPQ][K]: K contiguous -> "m-fast"                   B = im2col(x) along (r, s, c): n-fast
 * k-fast: each thread owns one reduction column of the slice (kcol) and several rows; n-fast / m-fast: one output
 * column / row and several reduction rows. Index decompositions are mixed-radix counters advanced by addition.
 * Pipeline: the next BK-slice is loaded from global memory into registers while the current one is multiplied
 * out of shared memory (one shared buffer, two barriers per slice).
 * wgrad splits the reduction over gridDim.z; with splits > 1 each split writes its partial tile to ws and
 * conv2d_wgrad_reduce adds the splits in order (deterministic, no atomics).
 */
#include "common.cuh"
#include "params.cuh"

#if !defined(PASS) || !defined(MMA) || !defined(BM) || !defined(BN) || !defined(BK)
#error "conv2d.cu needs -DPASS -DMMA -DBM -DBN -DBK (and -DTM -DTN or -DWM -DWN)"
#endif

#if MMA
#if ACT == ACT_F32
#error "the tensor-core core takes F16 or BF16 operands"
#endif
#define NT (32 * WM * WN)
#define WTM (BM / WM) /* warp tile */
#define WTN (BN / WN)
#define MT (WTM / 16) /* m16 tiles per warp */
#define NT8 (WTN / 8) /* n8 tiles per warp */
static_assert(WTM % 16 == 0 && WTN % 8 == 0 && BK % 16 == 0, "mma tile shapes");
#else
#define NT ((BM / TM) * (BN / TN))
static_assert(BM % TM == 0 && BN % TN == 0, "tile must divide into thread sub-tiles");
#endif

#define A_PER (BM * BK / NT) /* A elements each thread loads per slice */
#define B_PER (BK * BN / NT) /* B elements each thread loads per slice */
static_assert(NT % 32 == 0 && NT <= 1024, "threads per block");
static_assert((BM * BK) % NT == 0 && (BK * BN) % NT == 0, "tile loads must divide over the threads");
static_assert(NT % BK == 0, "k-fast loads need NT % BK == 0");
static_assert(PASS != 2 || NT % BM == 0, "wgrad m-fast loads need NT % BM == 0");
static_assert(PASS == 0 || NT % BN == 0, "n-fast loads need NT % BN == 0");

#if PASS == 0
#define CONV_ENTRY conv2d_fprop
#elif PASS == 1
#define CONV_ENTRY conv2d_dgrad
#elif PASS == 2
#define CONV_ENTRY conv2d_wgrad
#else
#error "PASS must be 0, 1 or 2"
#endif

/* v = ((hi * MID) + mid) * LO + lo, advanced by small steps without division */
struct mixed_radix {
    int lo, mid, hi;
};
__device__ __forceinline__ mixed_radix mr_make(int v, int lo_n, int mid_n) {
    mixed_radix r;
    r.lo = v % lo_n;
    int t = v / lo_n;
    r.mid = t % mid_n;
    r.hi = t / mid_n;
    return r;
}
__device__ __forceinline__ void mr_add(mixed_radix &r, int step, int lo_n, int mid_n) {
    r.lo += step;
    while (r.lo >= lo_n) {
        r.lo -= lo_n;
        if (++r.mid == mid_n) {
            r.mid = 0;
            r.hi++;
        }
    }
}

/* the per-row part of A's address for fprop (input window origin) and dgrad (output pixel + padding) */
struct arow {
    int img, hb, wb; /* img < 0: row past the GEMM's edge */
};

__device__ __forceinline__ arow make_arow(const conv_args &a, int m) {
    arow ro;
    ro.img = -1;
    ro.hb = 0;
    ro.wb = 0;
    if (m < a.gm) {
#if PASS == 0
        int pq = a.p * a.q;
        int n = m / pq, rem = m - n * pq;
        int pp = rem / a.q, qq = rem - pp * a.q;
        ro.img = n;
        ro.hb = pp * a.stride_h - a.pad_h;
        ro.wb = qq * a.stride_w - a.pad_w;
#elif PASS == 1
        int hw = a.h * a.w;
        int n = m / hw, rem = m - n * hw;
        int hh = rem / a.w, ww = rem - hh * a.w;
        ro.img = n;
        ro.hb = hh + a.pad_h;
        ro.wb = ww + a.pad_w;
#endif
    }
    return ro;
}

extern "C" __global__ void __launch_bounds__(NT) CONV_ENTRY(const conv_args a) {
    pdl_enter();
#if MMA
    __shared__ __align__(16) act_t As[BM][BK + 8]; /* [m][k]: A fragments are k-pairs of a row */
    __shared__ __align__(16) act_t Bs[BN][BK + 8]; /* [n][k]: B ("col") fragments are k-pairs of a column */
#else
    __shared__ float As[BK][BM + 4]; /* [k][m] */
    __shared__ float Bs[BK][BN + 4]; /* [k][n] */
#endif
#if PASS != 2
    __shared__ arow rows[BM];
#endif

    const int tid = threadIdx.x;
    const int m0 = blockIdx.x * BM;
    const int n0 = blockIdx.y * BN;
    const int ktiles = (a.gk + BK - 1) / BK;
    const int kt_begin = blockIdx.z * a.ktiles_per_split;
    const int kt_end = min(ktiles, kt_begin + a.ktiles_per_split);

#if PASS != 1
    const act_t *x = (const act_t *)a.x;
#endif
#if PASS != 2
    const act_t *wt = (const act_t *)a.wt;
#endif
#if PASS != 0
    const act_t *dy = (const act_t *)a.dy;
#endif

    act_t ra[A_PER], rb[B_PER];

    /* ---- per-thread and per-tile constants of the loaders ---- */
#if PASS != 2
    for (int i = tid; i < BM; i += NT) rows[i] = make_arow(a, m0 + i);
    /* A k-fast: reduction column kcol of the slice, rows arow0 + i*(NT/BK) */
    const int kcol = tid % BK;
    const int arow0 = tid / BK;
    /* kk = kt*BK + kcol decomposed: fprop (r, s, c) = (hi, mid, lo) with lo radix C; dgrad (r, s, k), lo radix K */
    const int a_lo_n = PASS == 0 ? a.c : a.k;
    mixed_radix akk = mr_make(kt_begin * BK + kcol, a_lo_n, a.s);
#else
    /* A m-fast (wgrad): column mcol of dy's K, reduction rows arow0 + i*(NT/BM) */
    const int mcol = tid % BM;
    const int arow0 = tid / BM;
    const bool a_mok = m0 + mcol < a.gm;
#endif
#if PASS == 0
    /* B k-fast: reduction column kcol (shared with A), filter rows brow0 + j*(NT/BK) */
    const int brow0 = tid / BK;
#else
    /* B n-fast: output column ncol, reduction rows brow0 + j*(NT/BN) */
    const int ncol = tid % BN;
    const int brow0 = tid / BN;
    const int b_nn = n0 + ncol;
    const bool b_nok = b_nn < a.gn;
#if PASS == 2
    /* wgrad: this thread's filter column (r, s, c) */
    int b_c = 0, b_r = 0, b_s = 0;
    if (b_nok) {
        b_c = b_nn % a.c;
        int rs = b_nn / a.c;
        b_r = rs / a.s;
        b_s = rs - b_r * a.s;
    }
#endif
#endif
#if PASS != 2
    __syncthreads(); /* rows[] */
#endif

    /* ---- global -> registers for reduction slice kt (called for kt_begin, kt_begin+1, ... in order) ---- */
    auto load_slice = [&](int kt) {
        const int kbase = kt * BK;
        const act_t zero = (act_t)0;
#if PASS == 0 || PASS == 1
        {
            const int kk = kbase + kcol;
            const bool kok = kk < a.gk;
            const int r = akk.hi, s = akk.mid, ch = akk.lo; /* ch: c (fprop) or k (dgrad) */
#pragma unroll
            for (int i = 0; i < A_PER; i++) {
                const arow ro = rows[arow0 + i * (NT / BK)];
                act_t v = zero;
#if PASS == 0
                int hi = ro.hb + r, wi = ro.wb + s;
                if (kok && ro.img >= 0 && (unsigned)hi < (unsigned)a.h && (unsigned)wi < (unsigned)a.w)
                    v = x[(((long long)ro.img * a.h + hi) * a.w + wi) * a.c + ch];
#else
                int ph = ro.hb - r, pw = ro.wb - s;
                if (kok && ro.img >= 0 && ph >= 0 && pw >= 0) {
                    int pp = ph / a.stride_h, qq = pw / a.stride_w;
                    if (pp * a.stride_h == ph && qq * a.stride_w == pw && pp < a.p && qq < a.q)
                        v = dy[(((long long)ro.img * a.p + pp) * a.q + qq) * a.k + ch];
                }
#endif
                ra[i] = v;
            }
            mr_add(akk, BK, a_lo_n, a.s); /* next slice */
#if PASS == 0
#pragma unroll
            for (int j = 0; j < B_PER; j++) {
                int nn = n0 + brow0 + j * (NT / BK);
                rb[j] = kok && nn < a.gn ? wt[(long long)nn * a.gk + kk] : zero;
            }
#else
            /* dgrad B: w[kf][rs][c] with kk = rs*K + kf, c = this thread's column */
            const int rsc = a.r * a.s * a.c;
            int kk0 = kbase + brow0;
            mixed_radix bk = mr_make(kk0 < a.gk ? kk0 : 0, a.k, a.r * a.s);
#pragma unroll
            for (int j = 0; j < B_PER; j++) {
                int kb = kk0 + j * (NT / BN);
                rb[j] = kb < a.gk && b_nok ? wt[(long long)bk.lo * rsc + (long long)bk.mid * a.c + b_nn] : zero;
                if (j + 1 < B_PER) mr_add(bk, NT / BN, a.k, a.r * a.s);
            }
#endif
        }
#else
        {
#pragma unroll
            for (int i = 0; i < A_PER; i++) {
                int kk = kbase + arow0 + i * (NT / BM);
                ra[i] = a_mok && kk < a.gk ? dy[(long long)kk * a.k + (m0 + mcol)] : zero;
            }
            /* wgrad B: x at output pixel (n, p, q) = kk (q fastest) through filter tap (r, s), channel c */
            int kk0 = kbase + brow0;
            mixed_radix bq = mr_make(kk0 < a.gk ? kk0 : 0, a.q, a.p);
#pragma unroll
            for (int j = 0; j < B_PER; j++) {
                int kk = kk0 + j * (NT / BN);
                act_t v = zero;
                if (b_nok && kk < a.gk) {
                    int hi = bq.mid * a.stride_h - a.pad_h + b_r, wi = bq.lo * a.stride_w - a.pad_w + b_s;
                    if ((unsigned)hi < (unsigned)a.h && (unsigned)wi < (unsigned)a.w)
                        v = x[(((long long)bq.hi * a.h + hi) * a.w + wi) * a.c + b_c];
                }
                rb[j] = v;
                if (j + 1 < B_PER) mr_add(bq, NT / BN, a.q, a.p);
            }
        }
#endif
    };

    /* ---- registers -> shared: element (row, k) of A and (k, col) of B ---- */
    auto store_slice = [&]() {
#pragma unroll
        for (int i = 0; i < A_PER; i++) {
#if PASS != 2
            const int am = arow0 + i * (NT / BK), ak = kcol;
#else
            const int am = mcol, ak = arow0 + i * (NT / BM);
#endif
#if MMA
            As[am][ak] = ra[i];
#else
            As[ak][am] = act_to_f32(ra[i]);
#endif
        }
#pragma unroll
        for (int j = 0; j < B_PER; j++) {
#if PASS == 0
            const int bn = brow0 + j * (NT / BK), bk = kcol;
#else
            const int bn = ncol, bk = brow0 + j * (NT / BN);
#endif
#if MMA
            Bs[bn][bk] = rb[j];
#else
            Bs[bk][bn] = act_to_f32(rb[j]);
#endif
        }
    };

    /* ---- the compute core: accumulators and one slice's worth of multiply-adds ---- */
#if MMA
    const int warp = tid >> 5, lane = tid & 31;
    const int wm0 = (warp / WN) * WTM, wn0 = (warp % WN) * WTN;
    const int g = lane >> 2, t4 = lane & 3;
    float acc[MT][NT8][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < NT8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;
    auto compute_slice = [&]() {
#pragma unroll
        for (int k0 = 0; k0 < BK; k0 += 16) {
            unsigned af[MT][4], bf[NT8][2];
#pragma unroll
            for (int i = 0; i < MT; i++) {
                const int r = wm0 + i * 16 + g;
                af[i][0] = *(const unsigned *)&As[r][k0 + 2 * t4];
                af[i][1] = *(const unsigned *)&As[r + 8][k0 + 2 * t4];
                af[i][2] = *(const unsigned *)&As[r][k0 + 2 * t4 + 8];
                af[i][3] = *(const unsigned *)&As[r + 8][k0 + 2 * t4 + 8];
            }
#pragma unroll
            for (int j = 0; j < NT8; j++) {
                const int c = wn0 + j * 8 + g;
                bf[j][0] = *(const unsigned *)&Bs[c][k0 + 2 * t4];
                bf[j][1] = *(const unsigned *)&Bs[c][k0 + 2 * t4 + 8];
            }
#pragma unroll
            for (int i = 0; i < MT; i++)
#pragma unroll
                for (int j = 0; j < NT8; j++) mma_m16n8k16(acc[i][j], af[i], bf[j]);
        }
    };
#else
    const int ty = tid / (BN / TN), tx = tid % (BN / TN);
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++) acc[i][j] = 0.0f;
    auto compute_slice = [&]() {
#pragma unroll
        for (int kk = 0; kk < BK; kk++) {
            float av[TM], bv[TN];
#pragma unroll
            for (int i = 0; i < TM; i++) av[i] = As[kk][ty * TM + i];
#pragma unroll
            for (int j = 0; j < TN; j++) bv[j] = Bs[kk][tx * TN + j];
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int j = 0; j < TN; j++) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }
    };
#endif

    if (kt_begin < kt_end) { /* uniform over the block */
        load_slice(kt_begin);
        store_slice();
        __syncthreads();
        for (int kt = kt_begin; kt < kt_end; kt++) {
            const bool more = kt + 1 < kt_end;
            if (more) load_slice(kt + 1);
            compute_slice();
            __syncthreads();
            if (more) {
                store_slice();
                __syncthreads();
            }
        }
    }

    /* ---- epilogue: one output element (m, nn) of the GEMM at a time ---- */
#if PASS == 0
    act_t *y = (act_t *)a.out;
    const act_t *res = (const act_t *)a.residual;
    auto emit = [&](int m, int nn, float v) {
        if (m >= a.gm || nn >= a.gn) return;
        long long o = (long long)m * a.gn + nn;
        v = v * (a.scale ? a.scale[nn] : 1.0f) + (a.shift ? a.shift[nn] : 0.0f);
        if (res) v += act_load(res, o);
        if (a.relu) v = v > 0.0f ? v : 0.0f;
        act_store(y, o, v);
    };
#elif PASS == 1
    act_t *dx = (act_t *)a.out;
    auto emit = [&](int m, int nn, float v) {
        if (m >= a.gm || nn >= a.gn) return;
        long long o = (long long)m * a.gn + nn;
        if (a.accumulate) v += act_load(dx, o);
        act_store(dx, o, v);
    };
#else
    float *dst = a.splits > 1 ? a.ws + (long long)blockIdx.z * a.gm * a.gn : (float *)a.out;
    auto emit = [&](int m, int nn, float v) {
        if (m < a.gm && nn < a.gn) dst[(long long)m * a.gn + nn] = v;
    };
#endif
#if MMA
    /* accumulator element e of tile (i, j): row g (+8 for e >= 2), column 2*t4 + (e & 1) */
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < NT8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                emit(m0 + wm0 + i * 16 + g + (e >= 2 ? 8 : 0), n0 + wn0 + j * 8 + 2 * t4 + (e & 1), acc[i][j][e]);
#else
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++) emit(m0 + ty * TM + i, n0 + tx * TN + j, acc[i][j]);
#endif
}

#if PASS == 2
/* dw = sum over the splits of ws, in split order. */
extern "C" __global__ void conv2d_wgrad_reduce(const conv_args a) {
    pdl_enter();
    const long long total = (long long)a.gm * a.gn;
    float *dw = (float *)a.out;
    for (long long i = GRID_TID; i < total; i += GRID_STRIDE) {
        float s = 0.0f;
        for (int z = 0; z < a.splits; z++) s += a.ws[z * total + i];
        dw[i] = s;
    }
}
#endif
