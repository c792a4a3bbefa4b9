/* conv2d_loader.cuh -- the operand loads of the tensor-core forward kernels (conv2d_pipelined.cu, mma.sync, and
 * conv2d_wgmma.cu, wgmma). A slice row is BK*2 bytes (64 or 128): BK/8 16-byte chunks of CH = 16/sizeof(act_t)
 * channels (8 of f16/bf16, 4 of f32 for TF32), so a slice spans KS = BK*2/sizeof(act_t) reduction elements.
 * Thread tid copies chunk tid % (BK/8) of rows tid / (BK/8) + i * NT / (BK/8) of the A tile (the im2col rows of
 * x, one per output pixel) and of the B tile (the rows of w, one per output channel), by cp.async, zero-filled
 * outside the image and past R*S*C. C % CH == 0 keeps a chunk inside one filter tap, and the thread steps its
 * tap (r, s, c) along from slice to slice: no division in the main loop. Shared memory: row `row`, chunk `ch` of
 * a stage at byte 2 * conv_swz<BK>(row, ch) (conv_at gives the act_t index), 16-byte chunks XOR-swizzled -- by
 * (row/2)%4 for 64-byte rows, row%8 for 128-byte rows (the 128-byte swizzle wgmma's descriptors read) -- so
 * cp.async writes and ldmatrix reads are conflict-free. Needs ACT (common.cuh) and conv_args (params.cuh).
 */
#ifndef CNN_KERNELS_CONV2D_LOADER_CUH
#define CNN_KERNELS_CONV2D_LOADER_CUH

/* the chunk XOR of a row: (row/2)%4 for 64-byte rows, row%8 for 128-byte rows (the same every 8 rows) */
template <int BK_>
__device__ __forceinline__ int conv_swz_term(int row) {
    static_assert(BK_ == 32 || BK_ == 64, "slice rows of 64 or 128 bytes");
    return BK_ == 32 ? (row >> 1) & 3 : row & 7;
}
template <int BK_>
__device__ __forceinline__ int conv_swz(int row, int ch) {
    return row * BK_ + ((ch ^ conv_swz_term<BK_>(row)) << 3);
}

/* act_t index of row `row`, chunk `ch` of a stage whose rows are BK_*2 bytes */
template <int BK_>
__device__ __forceinline__ int conv_at(int row, int ch) {
    return conv_swz<BK_>(row, ch) / (int)(sizeof(act_t) / 2);
}

template <int BM_, int BN_, int BK_, int NT_>
struct conv_tile_loader {
    static constexpr int CH = 16 / (int)sizeof(act_t);  /* channels per chunk */
    static constexpr int KS = BK_ * 2 / (int)sizeof(act_t); /* reduction elements per slice */
    static constexpr int CPR_ = BK_ / 8;           /* chunks per row */
    static constexpr int A_N = BM_ * CPR_ / NT_;   /* A chunks per thread per slice */
    static constexpr int B_N = BN_ * CPR_ / NT_;
    static constexpr int STEP = NT_ / CPR_;        /* rows between a thread's consecutive A (or B) rows */
    static_assert((BM_ * CPR_) % NT_ == 0 && (BN_ * CPR_) % NT_ == 0, "slice loads must divide over the threads");
    /* the swizzle repeats every 8 rows, so a thread's rows sit at one byte offset plus multiples of STEP rows */
    static_assert(STEP % 8 == 0, "a thread's rows share their swizzle");
    static constexpr int A_OUT = -(1 << 30); /* a row origin no filter tap brings into the image */

    const act_t *a_org[A_N]; /* x + element offset of (img, hb, wb, channel 0): each A row's window origin (it
                              * may point outside x; it is read only at taps inside the image) */
    int a_hb[A_N], a_wb[A_N]; /* a_hb = A_OUT for rows past N*P*Q: no tap of them is inside the image */
    const act_t *b_src;       /* wt + (first B row) * gk + kc: this thread's chunk of its first B row */
    int b_n;                  /* output channel of this thread's first B row; row j is b_n + j * STEP */
    int kc, tc, tr, ts;       /* this thread's chunk of the next slice: reduction index kc, tap (tr, ts), channel tc */
    int tap;                  /* (tr * w + ts) * c + tc: that chunk's element offset from a row's window origin */

    /* the tile at (m0, n0), its reduction starting at slice kt0 */
    __device__ __forceinline__ void init(const conv_args &a, int m0, int n0, int tid, int kt0) {
        const act_t *x = (const act_t *)a.x;
        const int row0 = tid / CPR_, ch = tid % CPR_;
#pragma unroll
        for (int i = 0; i < A_N; i++) {
            const int m = m0 + row0 + i * STEP;
            const int mm = m < a.gm ? m : 0;
            const int img = mm / (a.p * a.q), pq = mm - img * (a.p * a.q);
            const int p = pq / a.q, q = pq - p * a.q;
            a_hb[i] = p * a.stride_h - a.pad_h;
            a_wb[i] = q * a.stride_w - a.pad_w;
            a_org[i] = x + (((long long)img * a.h + a_hb[i]) * a.w + a_wb[i]) * a.c;
            if (m >= a.gm) a_hb[i] = A_OUT;
        }
        b_n = n0 + row0;
        kc = kt0 * KS + ch * CH;
        tc = kc % a.c, tr = (kc / a.c) / a.s, ts = (kc / a.c) % a.s;
        tap = (tr * a.w + ts) * a.c + tc;
        b_src = (const act_t *)a.wt + (long long)b_n * a.gk + kc;
    }

    /* this thread's destination in a stage: row row0, chunk ch, in bytes from the stage base */
    static __device__ __forceinline__ int dst_offset(void) {
        return 2 * conv_swz<BK_>((int)threadIdx.x / CPR_, (int)threadIdx.x % CPR_);
    }
    /* the cp.async copies of this slice's A rows into As (load_a) or its B rows into Bs (load_b) */
    __device__ __forceinline__ void load_a(const conv_args &a, act_t *As) const {
        const smem_addr d = smem_addr_of(As) + dst_offset();
        const bool kin = kc < a.gk;
#pragma unroll
        for (int i = 0; i < A_N; i++) {
            const int hi = a_hb[i] + tr, wi = a_wb[i] + ts;
            const bool ok = kin && (unsigned)hi < (unsigned)a.h && (unsigned)wi < (unsigned)a.w;
            cp_async16_to(d + i * STEP * BK_ * 2, ok ? a_org[i] + tap : (const act_t *)a.x, ok);
        }
    }
    __device__ __forceinline__ void load_b(const conv_args &a, act_t *Bs) const {
        const smem_addr d = smem_addr_of(Bs) + dst_offset();
        const bool kin = kc < a.gk;
        const act_t *src = b_src;
#pragma unroll
        for (int j = 0; j < B_N; j++, src += (long long)STEP * a.gk) {
            const bool ok = kin && b_n + j * STEP < a.gn;
            cp_async16_to(d + j * STEP * BK_ * 2, ok ? src : (const act_t *)a.wt, ok);
        }
    }
    /* step to the next slice: the chunk moves KS reduction elements on, which is KS elements on in a row's
     * window too, plus (w - s) * c each time the tap wraps to the next filter row */
    __device__ __forceinline__ void next(const conv_args &a) {
        kc += KS; /* at most BK/8 channel wraps (C >= CH) */
        tc += KS;
        tap += KS;
        b_src += KS;
        while (tc >= a.c) {
            tc -= a.c;
            if (++ts == a.s) ts = 0, tr++, tap += (a.w - a.s) * a.c;
        }
    }
    /* issue the cp.async copies of the next slice into stage (As, Bs), then step to the slice after it */
    __device__ __forceinline__ void load(const conv_args &a, act_t *As, act_t *Bs) {
        load_a(a, As);
        load_b(a, Bs);
        next(a);
    }
};

#endif
