/* batchnorm.cu -- per-channel reductions over an (M, C) view of an NHWC tensor and the kernels built on them:
 * channel_sum (bias gradients), BatchNorm training forward and backward with the residual add and ReLU that may
 * follow it fused (y = relu?(bn(x) + residual); backward from dy masked by the ReLU's pass bits, the residual's
 * gradient written beside dx), and the per-channel scale/shift (+ residual, + ReLU) of eval-mode BN.
 *
 * The ReLU's mask: with red_args.mask the forward writes one bit per element (y > 0) and the backward reads those
 * instead of y, a sixteenth of y's bytes in each of the backward's two passes (perf-log step 68); without it the
 * backward reads y.
 *
 * Reductions are deterministic two-level sums in double, no atomics: a partial kernel sums a fixed chunk of rows
 * per block in a fixed order into partial[chunk][c]; a finalize kernel (one thread per channel) adds the chunks in
 * order. Double as the CPU backend: BN backward over few rows per channel cancels almost completely, and a float32
 * sum would lose the result's leading digits. Two paths (src/cuda/batchnorm.c picks):
 *   - vector (C % 8 == 0, 16-byte aligned tensors): each thread loads 8 channels at once (act8); one pass of
 *     sums of x and x^2 (the variance from them in double), one apply pass; the ResNet/VGG case. For a small
 *     tensor the partial sums, the finalize and the apply run as one cooperative kernel (the fused kernels below);
 *   - scalar (any C): 32 channels x 8 rows per block; mean, then the centred variance, then apply.
 * The stem's backward (a BN -> ReLU that only a 3x3/2 max-pool reads) takes in the pool's: bn_bwd_pool_*, and VGG's
 * tiling max-pool backward sums the bias gradient it writes (pool_bwd_tile_sum_vec): both in batchnorm_pool.cuh.
 * Specialisation: ACT, and BN_PART: 0 the forward's, channel_sum's and eval's kernels, 1 the backward's (two
 * programs that compile side by side, the one program the longest compilation of a cold start: perf-log step 109).
 */
#include "common.cuh"
#include "params.cuh"

#if !defined(BN_PART) || (BN_PART != 0 && BN_PART != 1)
#error "batchnorm.cu needs -DBN_PART=0 or 1"
#endif

#define RED_TX 32 /* channels per block */
#define RED_TY 8  /* row lanes per block */

/* whether the ReLU after the BN passed element e: its bit, or y > 0 */
__device__ __forceinline__ bool relu_passed(const red_args &a, long long e) {
    if (!a.relu) return true;
    if (a.mask) return (a.mask[e >> 3] >> (e & 7)) & 1;
    return act_load((const act_t *)a.y, e) > 0.0f;
}

/* The rows [r0, r1) of a partial pass's chunk: rows_per_chunk from chunk * rows_per_chunk; with slices
 * (slice_chunks > 0, --deterministic), chunk k of slice j starts at j * slice_rows + k * rows_per_chunk and ends at
 * the slice's end at the latest, as in a batch of that slice alone. */
__device__ __forceinline__ void chunk_rows(const red_args &a, long long chunk, long long *r0, long long *r1) {
    long long lo = chunk * a.rows_per_chunk, end = a.m;
    if (a.slice_chunks > 0) {
        const long long j = chunk / a.slice_chunks;
        lo = j * a.slice_rows + (chunk - j * a.slice_chunks) * a.rows_per_chunk;
        end = (j + 1) * a.slice_rows;
    }
    *r0 = lo;
    *r1 = lo + a.rows_per_chunk < end ? lo + a.rows_per_chunk : end;
}

/* mode 0: P0 = sum x;  mode 1: P0 = sum (x - mean)^2;  mode 2: P0 = sum dy, P1 = sum dy * (x - mean) * invstd */
#if BN_PART == 0
extern "C" __global__ void chan_partial(const red_args a) {
    pdl_enter();
    __shared__ double sh0[RED_TY][RED_TX + 1], sh1[RED_TY][RED_TX + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c = blockIdx.x * RED_TX + tx;
    long long r0, r1;
    chunk_rows(a, blockIdx.y, &r0, &r1);
    const act_t *x = (const act_t *)a.x, *dy = (const act_t *)a.dy;
    double s0 = 0.0, s1 = 0.0;
    if (c < a.c) {
        if (a.mode == 0) {
            for (long long r = r0 + ty; r < r1; r += RED_TY) s0 += (double)act_load(x, r * a.c + c);
        } else if (a.mode == 1) {
            const double mu = a.mean[c];
            for (long long r = r0 + ty; r < r1; r += RED_TY) {
                double d = (double)act_load(x, r * a.c + c) - mu;
                s0 += d * d;
            }
        } else {
            const double mu = a.mean[c], is = a.invstd[c];
            for (long long r = r0 + ty; r < r1; r += RED_TY) {
                double g = relu_passed(a, r * a.c + c) ? act_load(dy, r * a.c + c) : 0.0;
                double xh = ((double)act_load(x, r * a.c + c) - mu) * is;
                s0 += g;
                s1 += g * xh;
            }
        }
    }
    sh0[ty][tx] = s0;
    sh1[ty][tx] = s1;
    __syncthreads();
    if (ty == 0 && c < a.c) {
        double t0 = 0.0, t1 = 0.0;
#pragma unroll
        for (int i = 0; i < RED_TY; i++) {
            t0 += sh0[i][tx];
            t1 += sh1[i][tx];
        }
        a.partial[(long long)blockIdx.y * a.c + c] = t0;
        if (a.mode == 2) a.partial[((long long)a.chunks + blockIdx.y) * a.c + c] = t1;
    }
}
#endif

/* The finalize kernels: blocks of RED_TX channels x FIN_TY lanes (grid C / RED_TX). chunk_sums adds channel c's
 * partial sums over the chunks for W arrays at once (first, first + 1, ..): lane ty takes chunks ty, ty + FIN_TY,
 * ... in order, the arrays' loads in flight together, then lane 0 adds the lanes in order (deterministic); every
 * thread of the block calls it (it synchronises), lane 0 gets the totals. A channel's chunks summed one after another
 * by one thread were a chain of dependent loads (ResNet-50's BN layers spent most of their time there); with 8 lanes
 * and one array after the other, a finalize over 500 chunks still waited some 20 us on them (perf-log step 90). */
#define FIN_TY 32
#define FIN_THREADS (RED_TX * FIN_TY)
template <int W> __device__ void chunk_sums(const red_args &a, int first, int c, double (&out)[W]) {
    __shared__ double sh[W][FIN_TY][RED_TX + 1];
    double t[W];
#pragma unroll
    for (int w = 0; w < W; w++) t[w] = 0.0;
    if (c < a.c) {
        const long long plane = (long long)a.chunks * a.c;
        const double *p = a.partial + first * plane + c;
#pragma unroll 2
        for (int k = threadIdx.y; k < a.chunks; k += FIN_TY)
#pragma unroll
            for (int w = 0; w < W; w++) t[w] += p[w * plane + (long long)k * a.c];
    }
#pragma unroll
    for (int w = 0; w < W; w++) sh[w][threadIdx.y][threadIdx.x] = t[w];
    __syncthreads();
#pragma unroll
    for (int w = 0; w < W; w++) {
        out[w] = 0.0;
        if (threadIdx.y == 0)
            for (int i = 0; i < FIN_TY; i++) out[w] += sh[w][i][threadIdx.x];
    }
    __syncthreads();
}
__device__ __forceinline__ double chunk_sum(const red_args &a, int which, int c) {
    double t[1];
    chunk_sums<1>(a, which, c, t);
    return t[0];
}
#define FIN_CHANNEL (blockIdx.x * RED_TX + threadIdx.x)
#define FIN_WRITES(c) (threadIdx.y == 0 && (c) < a.c)

/* channel_sum: fout[c] = sum of the chunks (mode 0 partials); by slices, a.chunks a slice's, slice blockIdx.y's
 * into its row of fout */
#if BN_PART == 0
extern "C" __global__ void __launch_bounds__(FIN_THREADS) chan_sum_finalize(const red_args a) {
    pdl_enter();
    const int c = FIN_CHANNEL;
    const double t = chunk_sum(a, blockIdx.y, c);
    if (FIN_WRITES(c)) a.fout[blockIdx.y * a.fout_stride + c] = (float)t;
}
#endif

/* Synchronised BatchNorm: totals[w][c] = the sum of array w's chunks (w < sums). The launcher sums them over the
 * group's ranks, then a finalize kernel reads them as one chunk of all the ranks' rows. */
#if BN_PART == 0
extern "C" __global__ void __launch_bounds__(FIN_THREADS) bn_chunk_totals(const red_args a) {
    pdl_enter();
    const int c = FIN_CHANNEL;
    for (int w = 0; w < a.sums; w++) {
        const double t = chunk_sum(a, w, c);
        if (FIN_WRITES(c)) a.totals[(long long)w * a.c + c] = t;
    }
}
#endif

/* --deterministic across rank counts (core/shards.h): a slice's sum of its a.slice_chunks chunks, partial[w][j][k][c]
 * (pair p = w * a.shards + j), is TREE_LANES lane sums, lane l adding chunks k = l, l + TREE_LANES, .. in order, then
 * the lanes added in order (slice_lanes); the a.shards slices' sums (a power of two <= 8) go up a pairwise tree, in
 * double and, rounded to float first, in float (slice_tree: the backward's dbeta and dgamma, as the ranks holding the
 * slices make their gradients and sum them). A slice's sum depends on its own chunks alone, so a rank holding fewer
 * slices makes the same. bn_shard_tree and the fused kernels' sliced finalize (fused_slice_finalize) both add in
 * exactly this order, so a rank that takes one agrees with a rank that takes the other (perf-log steps 116, 118). */
#define TREE_LANES 4
#define TREE_GROUPS 8 /* lane groups of TREE_LANES: a warp's (fused_slice_finalize), FIN_TY's (bn_shard_tree) */
#define TREE_PAIRS 16 /* sums x slices at most */
__device__ __forceinline__ double slice_lanes(const double (&l)[TREE_LANES]) {
    double v = l[0];
#pragma unroll
    for (int i = 1; i < TREE_LANES; i++) v += l[i];
    return v;
}
/* u[j], j < shards: the slices' sums; u[0] and f[0] their trees */
__device__ __forceinline__ void slice_tree(double (&u)[8], float (&f)[8], int shards) {
#pragma unroll
    for (int j = 0; j < 8; j++) f[j] = (float)u[j];
#pragma unroll
    for (int step = 1; step < 8; step *= 2)
#pragma unroll
        for (int j = 0; j + step < 8; j += 2 * step)
            if (j + step < shards) u[j] += u[j + step], f[j] += f[j + step]; /* adds only: none to contract */
}

/* totals[w][c] = the tree of the slices' sums (w < a.sums <= 2), and with dbeta and dgamma (w = 0 and 1) their float
 * trees. Every (sum, slice) pair's lanes load at once: the block's FIN_TY lanes split into TREE_GROUPS groups of
 * TREE_LANES, each taking pairs group, group + TREE_GROUPS (one pair after another, each a chain of loads and
 * barriers, the kernel took some 10 us per BatchNorm: perf-log step 116). Blocks as the finalize kernels'. */
#if BN_PART == 0
extern "C" __global__ void __launch_bounds__(FIN_THREADS) bn_shard_tree(const red_args a) {
    pdl_enter();
    static_assert(FIN_TY == TREE_GROUPS * TREE_LANES, "the block's lanes: TREE_GROUPS groups of TREE_LANES");
    constexpr int PER = (TREE_PAIRS + TREE_GROUPS - 1) / TREE_GROUPS;
    __shared__ double lanes[TREE_PAIRS][TREE_LANES][RED_TX + 1], slice[TREE_PAIRS][RED_TX + 1];
    const int c = FIN_CHANNEL, tx = threadIdx.x, ty = threadIdx.y;
    const int pairs = a.sums * a.shards, lane = ty % TREE_LANES, group = ty / TREE_LANES;
    double t[PER];
#pragma unroll
    for (int i = 0; i < PER; i++) t[i] = 0.0;
    if (c < a.c) {
        const long long plane = (long long)a.slice_chunks * a.c; /* one pair's chunks */
        const double *p = a.partial + c;
#pragma unroll 4
        for (int k = lane; k < a.slice_chunks; k += TREE_LANES)
#pragma unroll
            for (int i = 0; i < PER; i++)
                if (group + i * TREE_GROUPS < pairs) t[i] += p[(group + i * TREE_GROUPS) * plane + (long long)k * a.c];
    }
#pragma unroll
    for (int i = 0; i < PER; i++)
        if (group + i * TREE_GROUPS < pairs) lanes[group + i * TREE_GROUPS][lane][tx] = t[i];
    __syncthreads();
    if (ty < pairs) {
        double l[TREE_LANES];
#pragma unroll
        for (int q = 0; q < TREE_LANES; q++) l[q] = lanes[ty][q][tx];
        slice[ty][tx] = slice_lanes(l);
    }
    __syncthreads();
    if (ty >= a.sums || c >= a.c) return;
    const int w = ty;
    double u[8];
    float f[8];
#pragma unroll
    for (int j = 0; j < 8; j++) u[j] = j < a.shards ? slice[w * a.shards + j][tx] : 0.0;
    slice_tree(u, f, a.shards);
    a.totals[(long long)w * a.c + c] = u[0];
    if (w == 0 && a.dbeta) a.dbeta[c] = f[0];
    if (w == 1 && a.dgamma) a.dgamma[c] = f[0];
}
#endif

/* mean[c] = sum x / M (mode 0 partials) */
#if BN_PART == 0
extern "C" __global__ void __launch_bounds__(FIN_THREADS) bn_mean_finalize(const red_args a) {
    pdl_enter();
    const int c = FIN_CHANNEL;
    const double t = chunk_sum(a, 0, c);
    if (FIN_WRITES(c)) a.mean[c] = (float)(t / (double)a.m);
}
#endif

/* From the mode 1 partials: biased variance for normalisation, invstd = 1/sqrt(var + eps); running statistics
 * (1-momentum)*old + momentum*batch with the unbiased variance var*M/(M-1). */
#if BN_PART == 0
extern "C" __global__ void __launch_bounds__(FIN_THREADS) bn_var_finalize(const red_args a) {
    pdl_enter();
    const int c = FIN_CHANNEL;
    const double t = chunk_sum(a, 0, c);
    if (!FIN_WRITES(c)) return;
    double var = t / (double)a.m, mom = a.momentum;
    a.invstd[c] = (float)(1.0 / sqrt(var + (double)a.eps));
    double unbiased = var * (double)a.m / (double)(a.m - 1); /* the launcher ensures M >= 2 */
    a.running_mean[c] = (float)(mom * (double)a.mean[c] + (1.0 - mom) * (double)a.running_mean[c]);
    a.running_var[c] = (float)(mom * unbiased + (1.0 - mom) * (double)a.running_var[c]);
}
#endif

/* From the mode 2 sums of channel c: dbeta = sum dy, dgamma = sum dy*xhat, and the coefficients of dx in double. */
__device__ __forceinline__ void bwd_coef_only(const red_args &a, int c, double sdy, double sdyx) {
    a.coef[c] = (double)a.gamma[c] * (double)a.invstd[c];
    a.coef[a.c + c] = sdy / (double)a.m;
    a.coef[2 * a.c + c] = sdyx / (double)a.m;
}
__device__ __forceinline__ void bwd_coef_store(const red_args &a, int c, double sdy, double sdyx) {
    bwd_coef_only(a, c, sdy, sdyx);
    if (a.dbeta) a.dbeta[c] = (float)sdy;
    if (a.dgamma) a.dgamma[c] = (float)sdyx;
}
#if BN_PART == 1
extern "C" __global__ void __launch_bounds__(FIN_THREADS) bn_bwd_finalize(const red_args a) {
    pdl_enter();
    const int c = FIN_CHANNEL;
    double t[2]; /* sum dy, sum dy * xhat */
    chunk_sums<2>(a, 0, c, t);
    if (FIN_WRITES(c)) bwd_coef_store(a, c, t[0], t[1]);
}
#endif

/* Elementwise over (M, C): each thread takes 4 consecutive elements per grid-stride step, channel = i % C. */
#define FOR_MC(a, i, c)                                                                                      \
    for (long long i = GRID_TID * 4, total_ = (a).m * (a).c; i < total_; i += GRID_STRIDE * 4)               \
        for (int j_ = 0, c = (int)(i % (a).c); j_ < 4 && i + j_ < total_; j_++, c = c + 1 == (a).c ? 0 : c + 1)

/* y = relu?((x - mean) * invstd * gamma + beta + residual) */
#if BN_PART == 0
extern "C" __global__ void bn_apply(const red_args a) {
    pdl_enter();
    const act_t *x = (const act_t *)a.x, *res = (const act_t *)a.residual;
    act_t *y = (act_t *)a.out;
    FOR_MC(a, i, c) {
        long long e = i + j_;
        float v = (act_load(x, e) - a.mean[c]) * a.invstd[c] * a.gamma[c] + a.beta[c];
        if (res) v += act_load(res, e);
        if (a.relu) v = v > 0.0f ? v : 0.0f;
        act_store(y, e, v);
    }
}
#endif

/* The scalar path's mask: byte b of mask = the bits of y[8b .. 8b+7] > 0, from the output bn_apply wrote (its
 * threads take 4 elements each, half a byte). */
#if BN_PART == 0
extern "C" __global__ void bn_mask_of_y(const red_args a) {
    pdl_enter();
    const act_t *y = (const act_t *)a.out;
    const long long total = a.m * a.c;
    for (long long b = GRID_TID; b * 8 < total; b += GRID_STRIDE) {
        unsigned bits = 0;
        for (int e = 0; e < 8 && b * 8 + e < total; e++) bits |= (act_load(y, b * 8 + e) > 0.0f ? 1u : 0u) << e;
        a.mask[b] = (unsigned char)bits;
    }
}
#endif

/* dx (+)= gamma*invstd * (g - mean g - xhat * mean g*xhat), in double: for small M the bracket cancels almost
 * completely and float32 would lose the result's leading digits (the CPU backend computes the same way); dres (+)= g.
 * g = dy, or 0 where the ReLU after the BN did not pass (y <= 0). dx or dres may be NULL. */
#if BN_PART == 1
extern "C" __global__ void bn_bwd_apply(const red_args a) {
    pdl_enter();
    const act_t *x = (const act_t *)a.x, *dy = (const act_t *)a.dy;
    act_t *dx = (act_t *)a.out, *dres = (act_t *)a.dres;
    FOR_MC(a, i, c) {
        long long e = i + j_;
        double g = relu_passed(a, e) ? (double)act_load(dy, e) : 0.0;
        if (dx) {
            double xh = ((double)act_load(x, e) - (double)a.mean[c]) * (double)a.invstd[c];
            double v = a.coef[c] * (g - a.coef[a.c + c] - xh * a.coef[2 * a.c + c]);
            if (a.accumulate) v += (double)act_load(dx, e);
            act_store(dx, e, (float)v);
        }
        if (dres) act_store(dres, e, (float)(a.dres_accumulate ? g + (double)act_load(dres, e) : g));
    }
}
#endif

/* ---- the vector path (C % 8 == 0, 16-byte aligned tensors) ---------------------------------------------------
 * A block of 256 threads: CVT = min(C/8, 256) channel vectors of 8 x RT = 256 / CVT row lanes; blockIdx.x counts the
 * chunks of rows from the last (vec_chunk), blockIdx.y is the group of CVT channel vectors. */
#define VEC_T 256
#define VEC_ROWS 4 /* rows a thread of bn_partial_vec loads at once */
/* bn_bwd_partial_vec's: two tensors' rows at once, f32's 32-byte rows half as many (the same bytes in flight) */
#define BWD_ROWS (ACT == ACT_F32 ? 2 : VEC_ROWS)
__device__ __forceinline__ int vec_cvt(int c) { return c / 8 < VEC_T ? c / 8 : VEC_T; }
/* the chunk of rows a partial CTA sums: the CTAs placed first take the tensor's end, which the kernel that wrote it
 * (the conv before the forward, the dgrad before the backward) wrote last and L2 may still hold; the start they read
 * last is where the apply pass then begins. The sums' order is by chunk, unchanged. */
__device__ __forceinline__ long long vec_chunk(const red_args &a) { return (long long)a.chunks - 1 - blockIdx.x; }

/* the ReLU's pass bits of vector v (elements 8v .. 8v+7): the mask's byte, or y > 0; all set without a ReLU */
__device__ __forceinline__ unsigned relu_pass8(const red_args &a, long long v) {
    if (!a.relu) return 0xffu;
    if (a.mask) return a.mask[v];
    float yv[8];
    act8_unpack(act8_load((const act_t *)a.y + v * 8), yv);
    unsigned bits = 0;
#pragma unroll
    for (int e = 0; e < 8; e++) bits |= (yv[e] > 0.0f ? 1u : 0u) << e;
    return bits;
}

/* MODE 0 (bn_partial_vec): P0 = sum x, P1 = sum x^2;  MODE 2 (bn_bwd_partial_vec): P0 = sum g, P1 = sum g * xhat
 * (g as in bn_bwd_apply). Two kernels, each with its own registers: in one kernel the backward's loads raised the
 * forward's registers and halved its occupancy (perf-log step 68). */
/* A partial CTA's sums: thread tid = row lane * CVT + channel vector owns the 16 doubles partials_slot(which, e) of
 * its 8 channels, [sum][e][tid]: a warp's accesses to one slot are consecutive doubles (bn_bwd_pool_partial_vec adds
 * into them once per quad; with a thread's 8 side by side they were 16-way bank conflicts). partials_reduce adds the
 * row lanes' slots in lane order into partial[which][chunk][c]. */
#define PARTIAL_SLOTS (VEC_T * 8) /* 32 KB in all */
__device__ __forceinline__ double *partials_slot(double sh[2][PARTIAL_SLOTS], int which, int e) {
    return &sh[which][e * VEC_T + threadIdx.x];
}
__device__ __forceinline__ void partials_reduce(const red_args &a, double sh[2][PARTIAL_SLOTS], long long chunk) {
    const int cvt = vec_cvt(a.c), rt = VEC_T / cvt, width = cvt * 8;
    __syncthreads();
    for (int v = threadIdx.x; v < 2 * width; v += VEC_T) {
        const int which = v / width, ch = v % width, c = blockIdx.y * width + ch;
        if (c >= a.c) continue;
        const double *slot = &sh[which][(ch % 8) * VEC_T + ch / 8]; /* lane l's: slot[l * cvt]; once per CTA */
        double t = 0.0;
        for (int l = 0; l < rt; l++) t += slot[l * cvt];
        a.partial[((long long)which * a.chunks + chunk) * a.c + c] = t;
    }
}

template <int MODE> __device__ __forceinline__ void partial_vec(const red_args &a) {
    const int cvt = vec_cvt(a.c), rt = VEC_T / cvt, tid = threadIdx.x;
    const int lane_r = tid / cvt, cv = blockIdx.y * cvt + tid % cvt;
    const bool active = lane_r < rt && cv < a.c / 8;
    const long long chunk = vec_chunk(a);
    long long r0, r1;
    chunk_rows(a, chunk, &r0, &r1);
    /* VEC_ROWS (BWD_ROWS) rows per step, their loads issued together; their sums in float, added to the double
     * totals once per step. With 16-bit activations a square is exact in float and a few of them add nearly exactly;
     * F32 squares go to double at once (x^2 rounded to float would move E[x^2] - mean^2 when |mean| >> std). */
    double s0[8], s1[8];
#pragma unroll
    for (int e = 0; e < 8; e++) s0[e] = s1[e] = 0.0;
    if (active) {
        const act_t *x = (const act_t *)a.x + cv * 8;
        const long long step = (long long)rt * a.c;
        long long r = r0 + lane_r;
        if (MODE == 0) {
            for (; r < r1; r += VEC_ROWS * rt) {
                act8 raw[VEC_ROWS];
#pragma unroll
                for (int k = 0; k < VEC_ROWS; k++) raw[k] = r + k * rt < r1 ? act8_load(x + r * a.c + k * step) : act8_zero();
                float t0[8] = {0}, v[8];
#pragma unroll
                for (int k = 0; k < VEC_ROWS; k++) {
                    act8_unpack(raw[k], v);
#pragma unroll
                    for (int e = 0; e < 8; e++) {
                        t0[e] += v[e];
#if ACT == ACT_F32
                        s1[e] += (double)v[e] * v[e];
#else
                        s1[e] += (double)(v[e] * v[e]);
#endif
                    }
                }
#pragma unroll
                for (int e = 0; e < 8; e++) s0[e] += t0[e];
            }
        } else {
            const act_t *dy = (const act_t *)a.dy + cv * 8;
            const int cvs = a.c / 8;
            float mu[8], is[8];
#pragma unroll
            for (int e = 0; e < 8; e++) mu[e] = a.mean[cv * 8 + e], is[e] = a.invstd[cv * 8 + e];
            for (; r < r1; r += BWD_ROWS * rt) {
                act8 rx[BWD_ROWS], rg[BWD_ROWS];
                unsigned pass[BWD_ROWS];
#pragma unroll
                for (int k = 0; k < BWD_ROWS; k++) {
                    const bool in = r + k * rt < r1;
                    const long long o = r * a.c + k * step;
                    rx[k] = in ? act8_load(x + o) : act8_zero();
                    rg[k] = in ? act8_load(dy + o) : act8_zero();
                    pass[k] = in ? relu_pass8(a, (r + k * rt) * cvs + cv) : 0u;
                }
                float t0[8] = {0}, t1[8] = {0}, xv[8], g[8];
#pragma unroll
                for (int k = 0; k < BWD_ROWS; k++) {
                    act8_unpack(rx[k], xv);
                    act8_unpack(rg[k], g);
#pragma unroll
                    for (int e = 0; e < 8; e++) {
                        const float gm = (pass[k] >> e) & 1 ? g[e] : 0.0f;
                        t0[e] += gm;
                        t1[e] += gm * ((xv[e] - mu[e]) * is[e]);
                    }
                }
#pragma unroll
                for (int e = 0; e < 8; e++) s0[e] += t0[e], s1[e] += t1[e];
            }
        }
    }
    __shared__ double sh[2][PARTIAL_SLOTS];
#pragma unroll
    for (int e = 0; e < 8; e++) {
        *partials_slot(sh, 0, e) = active ? s0[e] : 0.0;
        *partials_slot(sh, 1, e) = active ? s1[e] : 0.0;
    }
    partials_reduce(a, sh, chunk);
}
#if BN_PART == 0
extern "C" __global__ void __launch_bounds__(VEC_T) bn_partial_vec(const red_args a) {
    pdl_enter();
    partial_vec<0>(a);
}
#endif
#if BN_PART == 1
extern "C" __global__ void __launch_bounds__(VEC_T, 2) bn_bwd_partial_vec(const red_args a) {
    pdl_enter();
    partial_vec<2>(a);
}
#endif

/* From the vector path's sums of channel c, sum x and sum x^2: the mean, the biased variance E[x^2] - mean^2 in
 * double (normalises), invstd; running statistics as bn_var_finalize. */
__device__ __forceinline__ void stats_store(const red_args &a, int c, double sx, double sxx) {
    const double mean = sx / (double)a.m, ex2 = sxx / (double)a.m;
    double var = ex2 - mean * mean, mom = a.momentum;
    if (var < 0.0) var = 0.0;
    a.mean[c] = (float)mean;
    a.invstd[c] = (float)(1.0 / sqrt(var + (double)a.eps));
    double unbiased = var * (double)a.m / (double)(a.m - 1);
    a.running_mean[c] = (float)(mom * mean + (1.0 - mom) * (double)a.running_mean[c]);
    a.running_var[c] = (float)(mom * unbiased + (1.0 - mom) * (double)a.running_var[c]);
}
/* bn_fold_stats: the sums a conv's epilogue wrote for this BatchNorm (fpartial: (2, fchunks, C) float, a chunk per
 * tile's consumer rows, conv2d_epilogue.cuh's stats_flush) into the forward pass's double partials (2, chunks, C)
 * that bn_stats_finalize adds (a.sums = 2; a.sums = 1: the first arrays alone, a gating dgrad's sums of dx for
 * chan_sum_finalize): CTA (x, y) adds fchunks [x * rows_per_chunk, ..) of channels RED_TX * y .., lane ty
 * of RED_TY taking fchunks ty, ty + RED_TY, .. of both arrays in order, the lanes then added in order. Replaces
 * bn_partial_vec's read of x (perf-log step 87). Lanes, not one thread per channel of 256 as before step 90: no
 * faster by itself (the fold's time is its launch, or the conv's partials read), but every thread has work at C = 64.
 * With slices (slice_chunks > 0, --deterministic): a CTA's fchunks restart at each slice's, a.slice_rows of them a
 * slice, as chunk_rows cuts rows, so that bn_shard_tree can add each slice's own (perf-log step 117). */
#if BN_PART == 0
extern "C" __global__ void __launch_bounds__(RED_TX * RED_TY) bn_fold_stats(const red_args a) {
    pdl_enter();
    __shared__ double sh[2][RED_TY][RED_TX + 1];
    const int tx = threadIdx.x, ty = threadIdx.y, c = (int)blockIdx.y * RED_TX + tx;
    long long j0 = (long long)blockIdx.x * a.rows_per_chunk, j1 = j0 + a.rows_per_chunk;
    if (a.slice_chunks > 0) chunk_rows(a, blockIdx.x, &j0, &j1); /* slices of a.slice_rows fchunks */
    if (j1 > a.fchunks) j1 = a.fchunks;
    double t0 = 0.0, t1 = 0.0;
    if (c < a.c) {
        const long long plane = a.fchunks * a.c;
        const float *p = a.fpartial + c;
#pragma unroll 2
        for (long long j = j0 + ty; j < j1; j += RED_TY) {
            t0 += (double)p[j * a.c];
            if (a.sums > 1) t1 += (double)p[plane + j * a.c];
        }
    }
    sh[0][ty][tx] = t0, sh[1][ty][tx] = t1;
    __syncthreads();
    if (ty < a.sums && c < a.c) { /* lane 0 adds the sums of x, lane 1 those of x^2 */
        double t = 0.0;
        for (int i = 0; i < RED_TY; i++) t += sh[ty][i][tx];
        a.partial[((long long)ty * a.chunks + blockIdx.x) * a.c + c] = t;
    }
}
#endif

#if BN_PART == 0
extern "C" __global__ void __launch_bounds__(FIN_THREADS) bn_stats_finalize(const red_args a) {
    pdl_enter();
    const int c = FIN_CHANNEL;
    double t[2]; /* sum x, sum x^2 */
    chunk_sums<2>(a, 0, c, t);
    if (FIN_WRITES(c)) stats_store(a, c, t[0], t[1]);
}
#endif

/* the per-channel factors of a thread's 8 channels, reloaded only when its channel group changes: with a grid
 * whose thread count is a multiple of C / 8 (the launcher's, where C / 8 divides 256) never after the first */
struct bn_chan8 {
    int c;
    float mean[8], k[8], beta[8]; /* y = (x - mean) * k + beta, k = invstd * gamma */
};
__device__ __forceinline__ void bn_chan8_at(const red_args &a, int c, bn_chan8 &p) {
    if (c == p.c) return;
    p.c = c;
#pragma unroll
    for (int e = 0; e < 8; e++) p.mean[e] = a.mean[c + e], p.k[e] = a.invstd[c + e] * a.gamma[c + e], p.beta[e] = a.beta[c + e];
}

/* vector v of y (and of the mask) from x's and the residual's raw vectors */
__device__ __forceinline__ void apply8(const red_args &a, const bn_chan8 &p, const act8 &rx, const act8 &rr,
                                       long long v) {
    float xv[8], rv[8];
    act8_unpack(rx, xv);
    if (a.residual) act8_unpack(rr, rv);
#pragma unroll
    for (int e = 0; e < 8; e++) {
        float t = (xv[e] - p.mean[e]) * p.k[e] + p.beta[e];
        if (a.residual) t += rv[e];
        xv[e] = a.relu && !(t > 0.0f) ? 0.0f : t;
    }
    const act8 out = act8_pack(xv);
    act8_store_packed((act_t *)a.out + v * 8, out);
    if (a.mask) a.mask[v] = (unsigned char)act8_positive_bits(out); /* y as stored > 0: a tiny t may round to 0 */
}
/* bn_apply over 8 channels per thread and step: vectors v, v + stride, ... With a mask, byte v of it gets the ReLU's
 * pass bits of vector v. U vectors at a time, their loads issued together, where every one a thread takes is of the
 * same channel group (stride a multiple of C / 8): the fused kernel's one wave of CTAs needs the loads in flight that
 * the standalone kernel (U = 1) gets from its occupancy (perf-log step 79; for the standalone kernel, loading the next
 * step's x before this step's stores did not pay: step 68). */
template <int U> __device__ __forceinline__ void apply_vec(const red_args &a, long long v, long long stride) {
    const int cvs = a.c / 8;
    const act_t *x = (const act_t *)a.x, *res = (const act_t *)a.residual;
    const long long n = a.m * cvs;
    bn_chan8 p;
    p.c = -1;
    int cg = (int)(v % cvs);
    const int cstep = (int)(stride % cvs);
    if (U > 1 && cstep == 0) {
        bn_chan8_at(a, cg * 8, p);
        for (; v + (U - 1) * stride < n; v += U * stride) {
            act8 rx[U], rr[U];
#pragma unroll
            for (int k = 0; k < U; k++) {
                rx[k] = act8_load(x + (v + k * stride) * 8);
                rr[k] = res ? act8_load(res + (v + k * stride) * 8) : act8_zero();
            }
#pragma unroll
            for (int k = 0; k < U; k++) apply8(a, p, rx[k], rr[k], v + k * stride);
        }
    }
    for (; v < n; v += stride) {
        bn_chan8_at(a, cg * 8, p);
        apply8(a, p, act8_load(x + v * 8), res ? act8_load(res + v * 8) : act8_zero(), v);
        cg += cstep;
        if (cg >= cvs) cg -= cvs;
    }
}
#if BN_PART == 0
extern "C" __global__ void bn_apply_vec(const red_args a) {
    pdl_enter();
    apply_vec<1>(a, GRID_TID, GRID_STRIDE);
}
#endif

/* bn_bwd_apply over 8 channels per thread and step. With 16-bit activations the arithmetic is float (the result is
 * rounded to 8 bits of mantissa; float's error is 2^-24 of g); f32 keeps double as bn_bwd_apply. */
#if ACT == ACT_F32
typedef double bwd_t;
#else
typedef float bwd_t;
#endif
/* the coefficients of a thread's 8 channels (k2: times invstd), reloaded only when its channel group changes */
struct bn_bwd8 {
    int c;
    bwd_t k0[8], k1[8], k2[8];
    float mu[8]; /* the saved mean is float: exact in bwd_t */
};
__device__ __forceinline__ void bn_bwd8_at(const red_args &a, int c, bn_bwd8 &p) {
    if (c == p.c) return;
    p.c = c;
#pragma unroll
    for (int e = 0; e < 8; e++)
        p.k0[e] = (bwd_t)a.coef[c + e], p.k1[e] = (bwd_t)a.coef[a.c + c + e],
        p.k2[e] = (bwd_t)(a.coef[2 * a.c + c + e] * (double)a.invstd[c + e]), p.mu[e] = a.mean[c + e];
}
/* vector v of dx (and of dres) from dy's values g (the ReLU's input gradient before its mask), x's raw vector and the
 * ReLU's pass bits */
__device__ __forceinline__ void bwd_apply8f(const red_args &a, const bn_bwd8 &p, float g[8], const act8 &rx,
                                            unsigned pass, long long v) {
    act_t *dx = (act_t *)a.out, *dres = (act_t *)a.dres;
    float t[8];
#pragma unroll
    for (int e = 0; e < 8; e++) g[e] = (pass >> e) & 1 ? g[e] : 0.0f;
    if (dx) {
        float xv[8], o[8];
        act8_unpack(rx, xv);
        if (a.accumulate) act8_unpack(act8_load(dx + v * 8), o);
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const bwd_t d = p.k0[e] * ((bwd_t)g[e] - p.k1[e] - ((bwd_t)xv[e] - (bwd_t)p.mu[e]) * p.k2[e]);
            t[e] = (float)(a.accumulate ? d + (bwd_t)o[e] : d);
        }
        act8_store(dx + v * 8, t);
    }
    if (dres) {
        if (a.dres_accumulate) {
            act8_unpack(act8_load(dres + v * 8), t);
#pragma unroll
            for (int e = 0; e < 8; e++) g[e] += t[e];
        }
        act8_store(dres + v * 8, g);
    }
}
/* the same from dy's raw vector */
__device__ __forceinline__ void bwd_apply8(const red_args &a, const bn_bwd8 &p, const act8 &rg, const act8 &rx,
                                           unsigned pass, long long v) {
    float g[8];
    act8_unpack(rg, g);
    bwd_apply8f(a, p, g, rx, pass, v);
}
/* Vectors v, v + stride, ... U at a time, their loads issued together, where every one a thread takes is of the same
 * channel group (stride a multiple of C / 8): the fused kernel's one wave of CTAs (U = BWD_U) needs the loads in
 * flight the standalone kernel's occupancy gives it (perf-log step 91, as step 79 found for the forward). The rest,
 * and the standalone kernel (U = 1): the next step's dy, x and pass bits loaded before this step's stores. */
#define BWD_U (ACT == ACT_F32 ? 1 : 4) /* F32's vectors and double arithmetic spill at 4 */
template <int U> __device__ __forceinline__ void bwd_apply_vec(const red_args &a, long long v, const long long stride) {
    const int cvs = a.c / 8;
    const act_t *x = (const act_t *)a.x, *dy = (const act_t *)a.dy;
    const bool need_x = a.out != NULL;
    const long long n = a.m * cvs;
    int cg = (int)(v % cvs);
    const int cstep = (int)(stride % cvs);
    bn_bwd8 p;
    p.c = -1;
    if (U > 1 && cstep == 0) {
        bn_bwd8_at(a, cg * 8, p);
        for (; v + (U - 1) * stride < n; v += U * stride) {
            act8 rg[U], rx[U];
            unsigned pass[U];
#pragma unroll
            for (int k = 0; k < U; k++) {
                const long long w = v + k * stride;
                rg[k] = act8_load(dy + w * 8);
                rx[k] = need_x ? act8_load(x + w * 8) : act8_zero();
                pass[k] = relu_pass8(a, w);
            }
#pragma unroll
            for (int k = 0; k < U; k++) bwd_apply8(a, p, rg[k], rx[k], pass[k], v + k * stride);
        }
    }
    act8 ng, nx = act8_zero();
    unsigned nb = 0;
    if (v < n) {
        ng = act8_load(dy + v * 8);
        if (need_x) nx = act8_load(x + v * 8);
        nb = relu_pass8(a, v);
    }
    for (; v < n; v += stride, cg = cg + cstep >= cvs ? cg + cstep - cvs : cg + cstep) {
        const act8 rg = ng, rx = nx;
        const unsigned pass = nb;
        if (v + stride < n) {
            const long long vn = v + stride;
            ng = act8_load(dy + vn * 8);
            if (need_x) nx = act8_load(x + vn * 8);
            nb = relu_pass8(a, vn);
        }
        bn_bwd8_at(a, cg * 8, p);
        bwd_apply8(a, p, rg, rx, pass, v);
    }
}
#if BN_PART == 1
extern "C" __global__ void bn_bwd_apply_vec(const red_args a) {
    pdl_enter();
    bwd_apply_vec<1>(a, GRID_TID, GRID_STRIDE);
}
#endif

/* the kernels that take in a max-pool's backward (the stem's BatchNorm, VGG's tiling pool with its sums) */
#if BN_PART == 1
#include "batchnorm_pool.cuh"
#endif

/* ---- the fused kernels: a whole BatchNorm pass in one cooperative launch -------------------------------------
 * The vector path's three kernels (partial sums, finalize, apply) as the phases of one kernel whose CTAs are all
 * resident (src/cuda/batchnorm.c sizes the grid to fit and launches it cooperatively), separated by grid barriers:
 * for a small tensor the three launches' ramps and gaps were most of the pass (perf-log step 79). The sums are
 * the same two-level deterministic sums: partial_vec's chunks (the grid is chunks x channel groups), then one warp
 * per channel adds that channel's chunks, lane l taking chunks l, l + 32, ... in order and the lanes combining by a
 * fixed butterfly. Shared memory carries nothing across a barrier (the emulator runs the blocks of a phase one at a
 * time over one copy of it). */
__device__ __forceinline__ unsigned cta_rank(void) { return blockIdx.y * gridDim.x + blockIdx.x; }
__device__ __forceinline__ unsigned cta_count(void) { return gridDim.x * gridDim.y; }
/* the sum over the chunks of channel c of partial array `which`, in every lane of the calling warp */
__device__ __forceinline__ double warp_chunk_sum(const red_args &a, int which, int c, int lane) {
    const double *p = a.partial + (long long)which * a.chunks * a.c + c;
    double t = 0.0;
    for (int k = lane; k < a.chunks; k += 32) t += p[(long long)k * a.c];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    return t;
}
/* The finalize phase over slices (a.slice_chunks > 0, --deterministic, this rank's statistics alone): the additions
 * of bn_shard_tree and then of the finalize kernel over its one chunk (chunk_sums: 0.0 + (0.0 + t), which is t + 0.0),
 * a warp per channel: lane group g (of TREE_GROUPS) takes pairs g and g + TREE_GROUPS, its TREE_LANES lanes their
 * chunks; the pairs' lane sums then reach every lane by shuffles, in lane order. */
template <int MODE> __device__ __forceinline__ void fused_slice_finalize(const red_args &a) {
    const int lane = threadIdx.x % 32, warps = (int)(cta_count() * (VEC_T / 32));
    const int sub = lane % TREE_LANES, group = lane / TREE_LANES, pairs = 2 * a.shards;
    const long long plane = (long long)a.slice_chunks * a.c; /* one pair's chunks */
    for (int c = (int)(cta_rank() * (VEC_T / 32) + threadIdx.x / 32); c < a.c; c += warps) {
        double t[2] = {0.0, 0.0};
        for (int k = sub; k < a.slice_chunks; k += TREE_LANES)
#pragma unroll
            for (int i = 0; i < 2; i++)
                if (group + i * TREE_GROUPS < pairs)
                    t[i] += a.partial[(group + i * TREE_GROUPS) * plane + (long long)k * a.c + c];
        double tot[2];
        float fl[2];
#pragma unroll
        for (int w = 0; w < 2; w++) {
            double uw[8]; /* in registers: every index fixed at compile time */
            float fw[8];
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const int p = w * a.shards + j; /* the pair: lane group p % TREE_GROUPS, register p / TREE_GROUPS */
                double l[TREE_LANES];
#pragma unroll
                for (int q = 0; q < TREE_LANES; q++)
                    l[q] = __shfl_sync(0xffffffffu, p < TREE_GROUPS ? t[0] : t[1], (p % TREE_GROUPS) * TREE_LANES + q);
                uw[j] = j < a.shards ? slice_lanes(l) : 0.0;
            }
            slice_tree(uw, fw, a.shards);
            tot[w] = uw[0] + 0.0, fl[w] = fw[0];
        }
        if (lane != 0) continue;
        if (MODE == 0) stats_store(a, c, tot[0], tot[1]);
        if (MODE == 2) {
            bwd_coef_only(a, c, tot[0], tot[1]);
            if (a.dbeta) a.dbeta[c] = fl[0];
            if (a.dgamma) a.dgamma[c] = fl[1];
        }
    }
}

/* MODE 0 the forward (statistics, running statistics, y), MODE 2 the backward (dgamma, dbeta, dx's coefficients, dx
 * and dres); the finalize phase: warp w of the grid takes channels w, w + warps, ... (over slices: as bn_shard_tree) */
template <int MODE> __device__ __forceinline__ void fused_vec(const red_args &a) {
    partial_vec<MODE>(a);
    grid_sync(a.barrier);
    const int lane = threadIdx.x % 32, warps = (int)(cta_count() * (VEC_T / 32));
    if (a.slice_chunks > 0) fused_slice_finalize<MODE>(a);
    for (int c = (int)(cta_rank() * (VEC_T / 32) + threadIdx.x / 32); c < a.c && a.slice_chunks == 0; c += warps) {
        const double s0 = warp_chunk_sum(a, 0, c, lane), s1 = warp_chunk_sum(a, 1, c, lane);
        if (lane == 0 && MODE == 0) stats_store(a, c, s0, s1);
        if (lane == 0 && MODE == 2) bwd_coef_store(a, c, s0, s1);
    }
    if (MODE == 2 && !a.out && !a.dres) return;
    grid_sync(a.barrier);
    const long long v = (long long)cta_rank() * VEC_T + threadIdx.x, stride = (long long)cta_count() * VEC_T;
    if (MODE == 0) apply_vec<4>(a, v, stride);
    else bwd_apply_vec<BWD_U>(a, v, stride);
}
#if BN_PART == 0
extern "C" __global__ void __launch_bounds__(VEC_T) bn_fused_vec(const red_args a) {
    pdl_enter();
    fused_vec<0>(a);
}
#endif
#if BN_PART == 1
extern "C" __global__ void __launch_bounds__(VEC_T, 2) bn_bwd_fused_vec(const red_args a) {
    pdl_enter();
    fused_vec<2>(a);
}
#endif

/* y = relu?(x * scale + shift + residual); scale NULL = 1, shift NULL = 0, residual NULL = none */
#if BN_PART == 0
extern "C" __global__ void scale_shift(const red_args a) {
    pdl_enter();
    const act_t *x = (const act_t *)a.x, *res = (const act_t *)a.residual;
    act_t *y = (act_t *)a.out;
    FOR_MC(a, i, c) {
        long long e = i + j_;
        float v = act_load(x, e);
        if (a.scale) v *= a.scale[c];
        if (a.shift) v += a.shift[c];
        if (res) v += act_load(res, e);
        if (a.relu) v = v > 0.0f ? v : 0.0f;
        act_store(y, e, v);
    }
}
#endif
