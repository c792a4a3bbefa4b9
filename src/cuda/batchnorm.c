/* batchnorm.c -- launchers of kernels/batchnorm.cu: channel_sum, BatchNorm training forward/backward and
 * scale_shift, over (M, C) views of NHWC tensors.
 *
 * Reductions are two-level, deterministic and in double: a partial kernel sums `rows_per_chunk` rows per CTA into
 * partial[chunk][c] (fixed order inside the CTA), then one thread per channel adds the chunks in order. The
 * chunking depends only on (M, C) and the SM count. Where C % 8 == 0 and the tensors are 16-byte aligned (every
 * BN of the zoo) the vector kernels run: one pass of sums of x and x^2 (the variance from them in double, exact
 * enough for |mean| / std up to ~1e6), one apply pass, each thread 8 channels; elsewhere the scalar ones: the
 * mean, then the centred variance, then apply (and the ReLU's mask from its output). A small tensor's vector pass
 * runs as one cooperative launch (plan_fused: its size rule; the same sums, finalized by warps). With
 * cnn_bn.relu_mask both paths write the mask in the forward and read it in the backward, whichever path each of the
 * two takes.
 * Synchronised BatchNorm (cnn_bn.comm) adds each sum's chunks into per-channel totals, sums those over the ranks,
 * and finalizes from them.
 * Where the conv producing x summed its channels in its epilogue (cnn_bn.stats: float sums over each tile's
 * consumer rows, at most 128 of them, conv2d_epilogue.cuh's stats_flush), bn_fold_stats adds those chunks into the
 * double partials instead of bn_partial_vec reading x (perf-log step 87); the sums of x^2 then carry float rounding
 * of ~1e-7 relative, so the variance stays exact to ~1e-7 * (1 + mean^2 / var).
 * bn_backward_pool (the stem's BN -> ReLU -> 3x3/2 max-pool, cuda_bn_pool_fusable) runs the vector backward over 2x2
 * blocks of pixels, making the ReLU output's gradient from the pool's where it is used (perf-log step 95).
 * Under --deterministic (cnn_backend.batch_shards) both passes sum the batch by slices instead (bn_*_sliced below,
 * perf-log step 108; the forward from the conv's sums by slices, step 117; a small tensor's pass in one launch,
 * steps 118-119).
 */
#include "cuda/internal.h"

#include <stdint.h>
#include <stdio.h>

#define RED_TX 32 /* = kernels/batchnorm.cu */
#define RED_TY 8
#define FIN_TY 32 /* = kernels/batchnorm.cu: lanes per channel of the finalize kernels */
#define VEC_T 256 /* = kernels/batchnorm.cu: threads of bn_partial_vec */

static cnn_status kern(cuda_be *cb, int entry, CUfunction *f) {
    return cuda_kernel(cb, &cuda_family_batchnorm, cb->pub.act_dtype, cuda_family_batchnorm.entry_config(entry), entry,
                       f);
}

/* the vector kernels' CTAs across the channels: groups of up to VEC_T channel vectors */
static long long vec_groups(int c) {
    const long long cvt = c / 8 < VEC_T ? c / 8 : VEC_T;
    return (c / 8 + cvt - 1) / cvt;
}

/* a fused kernel (BN_FUSED_VEC, BN_BWD_FUSED_VEC) and the CTAs of it that are resident at once: a cooperative grid's
 * most */
static cnn_status fused_slots(cuda_be *cb, int entry, CUfunction *f, long long *slots) {
    CNN_TRY(kern(cb, entry, f));
    int per_sm = 1;
    CNN_TRY(cuda_blocks_per_sm(cb, *f, cuda_family_batchnorm.entries[entry], VEC_T, 0, &per_sm));
    *slots = (long long)per_sm * cb->sm_count;
    return CNN_OK;
}

/* chunks of rows for the partial pass: ~8 CTAs per SM in all, at least 64 rows per chunk */
static void plan_chunks(const cuda_be *cb, red_args *a) {
    long long colblocks = (a->c + RED_TX - 1) / RED_TX;
    long long chunks = 8LL * cb->sm_count / colblocks;
    long long max_chunks = (a->m + 63) / 64;
    if (chunks > max_chunks) chunks = max_chunks;
    if (chunks < 1) chunks = 1;
    a->rows_per_chunk = (a->m + chunks - 1) / chunks;
    a->chunks = (int)((a->m + a->rows_per_chunk - 1) / a->rows_per_chunk);
}

/* the vector kernels' preconditions: 8 channels per 16-byte vector */
static bool vec_ok(const red_args *a) {
    const void *p[] = {a->x, a->dy, a->y, a->residual, a->out, a->dres};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        if (!aligned16(p[i])) return false;
    return a->c % 8 == 0;
}

/* the vector partial pass's kernel (forward sums: mode 0, backward: mode 2) and its chunks of rows: whole waves of
 * CTAs, the most that keep to ~4 CTAs per SM in all (each CTA covers up to 256 channel vectors), at least 64 rows
 * per chunk. A partial wave ran the end at a third of the occupancy: 528 CTAs at 3 per SM are 1.33 waves (perf-log
 * step 72). The count depends on (M, C), the GPU and the compiled kernel only, so the sums' order does too. */
/* `rows`: x's rows, or the quads of 2x2 pixels the pool's kernel takes, or the pool output pixels of
 * pool_bwd_tile_sum_vec (at least 16 per chunk: each stands for several rows) */
static cnn_status plan_chunks_vec(cuda_be *cb, red_args *a, int entry, long long rows, CUfunction *f) {
    CNN_TRY(kern(cb, entry, f));
    int per_sm = 1;
    CNN_TRY(cuda_blocks_per_sm(cb, *f, cuda_family_batchnorm.entries[entry], VEC_T, 0, &per_sm));
    const long long groups = vec_groups(a->c);
    const long long waves = per_sm < 4 ? 4 / per_sm : 1;
    const long long least = entry == BN_BWD_POOL_PARTIAL_VEC || entry == POOL_BWD_TILE_SUM_VEC ? 16 : 64;
    long long chunks = waves * per_sm * cb->sm_count / groups;
    const long long max_chunks = (rows + least - 1) / least;
    if (chunks > max_chunks) chunks = max_chunks;
    if (chunks < 1) chunks = 1;
    a->rows_per_chunk = (rows + chunks - 1) / chunks;
    a->chunks = (int)((rows + a->rows_per_chunk - 1) / a->rows_per_chunk);
    return CNN_OK;
}

/* the size rule of the fused passes (plan_fused): x (the backward's x and dy) against the L2 */
static bool small_for_l2(const cuda_be *cb, int64_t m, int c, bool forward) {
    const double bytes = (double)m * c * cnn_dtype_size(cb->pub.act_dtype) * (forward ? 1 : 2);
    return bytes <= (forward ? cb->l2_bytes / 2.0 : 3.0 * cb->l2_bytes);
}
static bool fused_by_size(const cuda_be *cb, int64_t m, int c, bool forward) {
    if (!cb->coop || cb->bn_fused == 0 || cuda_conv_skipped(cb, "bn_fused")) return false;
    return cb->bn_fused > 0 || small_for_l2(cb, m, c, forward);
}

bool cuda_bn_forward_one_launch(const cuda_be *cb, int64_t m, int c) { return c % 8 == 0 && fused_by_size(cb, m, c, true); }

/* The fused kernels (one cooperative launch for a whole pass: kernels/batchnorm.cu) where they can run (the vector
 * path, this rank's statistics alone, cooperative launches, not left out by CNN_CONV_SKIP=bn_fused nor forced off)
 * and, unless forced on, pay: where the tensors the first phase reads (x; the backward's x and dy) are small against
 * the L2, half of it forward and three times it backward. Above that the three launches, which programmatic
 * serialization overlaps and a cooperative launch cannot, ran the training steps faster (perf-log step 79).
 * The grid, chunks x channel groups CTAs, must be resident at once: chunks = the CTAs that fit (per SM x SMs) over
 * the groups, at least 64 rows each as plan_chunks_vec. False (the three launches) when not even one chunk per
 * group fits. The count depends on (M, C), the GPU and the compiled kernel only, so the sums' order does too. */
static cnn_status plan_fused(cuda_be *cb, const cnn_bn *bn, red_args *a, bool vec, int entry, CUfunction *f, bool *ok) {
    *ok = false;
    if (!vec || bn->comm || !fused_by_size(cb, a->m, a->c, entry == BN_FUSED_VEC)) return CNN_OK;
    long long slots;
    CNN_TRY(fused_slots(cb, entry, f, &slots));
    const long long groups = vec_groups(a->c);
    long long chunks = slots / groups;
    const long long max_chunks = (a->m + 63) / 64;
    if (chunks > max_chunks) chunks = max_chunks;
    if (chunks < 1 || groups > 65535) return CNN_OK;
    a->rows_per_chunk = (a->m + chunks - 1) / chunks;
    a->chunks = (int)((a->m + a->rows_per_chunk - 1) / a->rows_per_chunk);
    a->barrier = (unsigned *)(uintptr_t)(cb->scratch + CUDA_GRID_BARRIER);
    *ok = true;
    return CNN_OK;
}

/* the conv's sums (cnn_bn.stats) where this forward can take them: written for x, over its C channels; the vector
 * path (the sums' apply pass); CNN_CONV_SKIP=bn_stats leaves them out (the A/B, as conv2d_fast.c does) */
static const cnn_conv_stats *conv_sums(cuda_be *cb, const cnn_bn *bn, const void *x, bool vec) {
    const cnn_conv_stats *s = bn->stats;
    if (!s || s->chunks <= 0 || s->y != x || s->c != bn->c || !vec || cuda_conv_skipped(cb, "bn_stats")) return NULL;
    return s;
}

/* bn_fold_stats's chunks of the conv's chunks (its first `sums` arrays): about 4 CTAs per SM in all over the channel
 * groups of RED_TX */
static void plan_fold(const cuda_be *cb, const cnn_conv_stats *s, int sums, red_args *a) {
    a->sums = sums;
    const long long groups = (a->c + RED_TX - 1) / RED_TX;
    long long chunks = 4LL * cb->sm_count / groups;
    if (chunks > s->chunks) chunks = s->chunks;
    if (chunks < 1) chunks = 1;
    a->fpartial = s->partial, a->fchunks = s->chunks;
    a->rows_per_chunk = (s->chunks + chunks - 1) / chunks;
    a->chunks = (int)((s->chunks + a->rows_per_chunk - 1) / a->rows_per_chunk);
}

static cnn_status run_fused(cuda_be *cb, CUfunction f, red_args *a, int mode, const char *what) {
    a->mode = mode;
    cb->stats.bn_fused_launches++;
    return cuda_launch_cooperative(cb, f, what, (unsigned)a->chunks, (unsigned)vec_groups(a->c), VEC_T, a);
}

static cnn_status run_partial_vec(cuda_be *cb, CUfunction f, red_args *a, int mode, const char *what) {
    a->mode = mode;
    return cuda_launch(cb, f, what, (unsigned)a->chunks, (unsigned)vec_groups(a->c), 1, VEC_T, 1, a);
}

/* bn_fold_stats over a's plan (plan_fold, or by slices): the conv's float chunks into a's double partials */
static cnn_status run_fold(cuda_be *cb, red_args *a, const char *what) {
    CUfunction f;
    CNN_TRY(kern(cb, BN_FOLD_STATS, &f));
    return cuda_launch(cb, f, what, (unsigned)a->chunks, (unsigned)((a->c + RED_TX - 1) / RED_TX), 1, RED_TX, RED_TY, a);
}

static cnn_status run_partial(cuda_be *cb, red_args *a, int mode, const char *what) {
    CUfunction f;
    CNN_TRY(kern(cb, BN_PARTIAL, &f));
    a->mode = mode;
    return cuda_launch(cb, f, what, (unsigned)((a->c + RED_TX - 1) / RED_TX), (unsigned)a->chunks, 1, RED_TX, RED_TY, a);
}

/* the finalize kernels: RED_TX channels x FIN_TY lanes adding the chunks (kernels/batchnorm.cu, chunk_sums) */
static cnn_status run_per_channel(cuda_be *cb, red_args *a, int entry, const char *what) {
    CUfunction f;
    CNN_TRY(kern(cb, entry, &f));
    return cuda_launch(cb, f, what, (unsigned)((a->c + RED_TX - 1) / RED_TX), 1, 1, RED_TX, FIN_TY, a);
}

static cnn_status run_elementwise(cuda_be *cb, red_args *a, int entry, const char *what) {
    CUfunction f;
    CNN_TRY(kern(cb, entry, &f));
    /* 4 elements per thread per step; the vector kernels and the mask's 8 */
    const int per = entry == BN_APPLY_VEC || entry == BN_BWD_APPLY_VEC || entry == BN_MASK_OF_Y ? 8 : 4;
    return cuda_launch(cb, f, what, cuda_grid_1d(cb, (a->m * a->c + per - 1) / per, 256), 1, 1, 256, 1, a);
}

/* Synchronised BatchNorm: the first `sums` arrays of a's partials added over the chunks into a->totals, then over
 * the ranks of bn->comm (on the compute stream, in order: recorded graphs hold the sum). */
static cnn_status group_totals(cnn_backend *be, const cnn_bn *bn, red_args *a, int sums, const char *what) {
    a->sums = sums;
    CNN_TRY(run_per_channel(cuda_impl(be), a, BN_CHUNK_TOTALS, what));
    CNN_TRY(be->comm_allreduce(be, bn->comm, a->totals, (int64_t)sums * a->c, CNN_COMM_SUM_F64, false));
    return CNN_OK;
}

/* a's finalize over the group's totals: one chunk of the rows of all the ranks */
static red_args group_view(const red_args *a, const cnn_bn *bn) {
    red_args g = *a;
    g.partial = a->totals;
    g.chunks = 1;
    g.m = a->m * bn->world;
    return g;
}

static void check_group(cnn_backend *be, const cnn_bn *bn) {
    CNN_ASSERT(!bn->comm || (bn->world >= 1 && be->comm_allreduce));
}

static void check_mc(int64_t m, int c) {
    CNN_ASSERT(m > 0 && c > 0);
    CNN_ASSERT(m <= INT64_MAX / c);
}

/* channel_sum of each of `slices` equal slices of the m rows (1: of the whole) into out's rows, `stride` floats
 * apart: one partial pass over every slice's chunks, each slice's planned as a launch over that slice alone plans
 * them, and one finalize with a slice per blockIdx.y, so each row has the bits of channel_sum over its slice */
cnn_status cuda_channel_sum_rows(cnn_backend *be, int slices, int64_t m, int c, const void *dy, float *out,
                                 int64_t stride) {
    cuda_be *cb = cuda_impl(be);
    cuda_bind(cb);
    check_mc(m, c);
    CNN_ASSERT(dy && out && slices >= 1 && slices <= 65535 && m % slices == 0 && (slices == 1 || stride >= c));
    red_args a = {0};
    a.m = m / slices, a.c = c, a.x = dy, a.fout = out, a.fout_stride = stride;
    plan_chunks(cb, &a);
    if (slices > 1) a.slice_chunks = a.chunks, a.slice_rows = a.m, a.m = m, a.chunks *= slices;
    CNN_ASSERT(a.chunks <= 65535); /* the partial pass's grid.y: 8 slices of at most 8 x SMs chunks */
    void *ws;
    CNN_TRY(cuda_workspace(cb, (size_t)a.chunks * c * sizeof(double), &ws));
    a.partial = ws;
    char what[112];
    snprintf(what, sizeof what, "channel_sum[%s] m%lld c%d in %d slices", cuda_dtype_str(be->act_dtype), (long long)m,
             c, slices);
    CNN_TRY(run_partial(cb, &a, 0, what));
    a.chunks /= slices; /* the finalize's: a slice's */
    CUfunction f;
    CNN_TRY(kern(cb, BN_SUM_FIN, &f));
    return cuda_launch(cb, f, what, (unsigned)((c + RED_TX - 1) / RED_TX), (unsigned)slices, 1, RED_TX, FIN_TY, &a);
}

cnn_status cuda_channel_sum(cnn_backend *be, int64_t m, int c, const void *dy, float *out) {
    return cuda_channel_sum_rows(be, 1, m, c, dy, out, c);
}

cnn_status cuda_channel_sum_partials(cnn_backend *be, const cnn_conv_stats *s, float *out) {
    cuda_be *cb = cuda_impl(be);
    cuda_bind(cb);
    CNN_ASSERT(s && s->partial && s->chunks > 0 && s->c > 0 && out);
    red_args a = {0};
    a.c = s->c, a.fout = out;
    plan_fold(cb, s, 1, &a);
    void *ws;
    CNN_TRY(cuda_workspace(cb, (size_t)a.chunks * a.c * sizeof(double), &ws));
    a.partial = ws;
    char what[96];
    snprintf(what, sizeof what, "channel_sum[%s] of %lld chunks c%d", cuda_dtype_str(be->act_dtype),
             (long long)s->chunks, a.c);
    CNN_TRY(run_fold(cb, &a, what));
    return run_per_channel(cb, &a, BN_SUM_FIN, what);
}

/* Whether pool2d_backward's tile path (pool.c: windows tiling the input) can sum dx in its own kernel
 * (pool_bwd_tile_sum_vec): max pooling with its argmax, C % 8 == 0, 16-byte aligned tensors, overwriting;
 * CNN_CONV_SKIP=pool_sum leaves it out (the A/B: the tile kernel, then channel_sum over dx) */
bool cuda_pool_tile_sum_fits(cnn_backend *be, const cnn_pool2d *pl, const void *y, const void *dy, const void *dx,
                             bool accumulate) {
    return pl->dx_sum && !accumulate && pl->kind == CNN_POOL_MAX && pl->argmax && pl->c % 8 == 0 &&
           aligned16(pl->argmax) && aligned16(dy) && aligned16(dx) && (!pl->relu || aligned16(y)) &&
           !cuda_conv_skipped(cuda_impl(be), "pool_sum");
}

/* the tile path's backward with dx's sums (cuda_pool_tile_sum_fits said yes): partials by chunks of the pool's
 * output pixels, then chan_sum_finalize into pl->dx_sum */
cnn_status cuda_pool_tile_backward_sum(cnn_backend *be, const cnn_pool2d *pl, const void *y, const void *dy,
                                       void *dx) {
    cuda_be *cb = cuda_impl(be);
    red_args a = {0};
    a.m = (long long)pl->n * pl->p * pl->q, a.c = pl->c;
    a.y = y, a.dy = dy, a.out = dx, a.relu = pl->relu, a.argmax = pl->argmax, a.fout = pl->dx_sum;
    a.pool_h = pl->h, a.pool_w = pl->w, a.pool_p = pl->p, a.pool_q = pl->q;
    check_mc(a.m, a.c);
    CUfunction f;
    CNN_TRY(plan_chunks_vec(cb, &a, POOL_BWD_TILE_SUM_VEC, a.m, &f));
    void *ws;
    CNN_TRY(cuda_workspace(cb, (size_t)2 * a.chunks * a.c * sizeof(double), &ws));
    a.partial = ws;
    char what[128];
    snprintf(what, sizeof what, "pool_bwd_tile_sum[%s] n%d c%d %dx%d window %dx%d%s", cuda_dtype_str(be->act_dtype),
             pl->n, pl->c, pl->h, pl->w, pl->r, pl->s, pl->relu ? " relu" : "");
    CNN_TRY(run_partial_vec(cb, f, &a, 0, what));
    return run_per_channel(cb, &a, BN_SUM_FIN, what);
}

/* --deterministic across rank counts (cnn_backend.batch_shards, core/shards.h): the rows as S slices of a->m / S,
 * each summed as a batch of it alone is: one partial launch whose chunks restart at each slice's first row (planned
 * on a slice's rows), then bn_shard_tree adds each slice's chunks in order and the slices in a pairwise tree into
 * `group`, [sums][C], which comm_allreduce continues over the ranks and the finalize kernels read as one chunk. The
 * forward takes the conv's epilogue sums instead where their chunks fall in whole slices; a small tensor's pass runs
 * in one cooperative launch that adds the same sums in the same order (plan_fused_slices). */
#define SLICES_MAX 8 /* = CNN_SHARDS_MAX (core/shards.h) */
static int slices_of(const cnn_backend *be, const red_args *a) {
    const int s = be->batch_shards;
    return s > 1 && a->m % s == 0 ? s : 1;
}

/* a's partial pass planned by slices (entry_vec: the vector kernel, when a takes it) and a workspace of its partials,
 * the group's [2][C] totals and `extra` doubles after them (*rest; rest may be NULL) */
static cnn_status plan_slices(cnn_backend *be, red_args *a, int S, int entry_vec, size_t extra, CUfunction *fvec,
                              double **group, double **rest) {
    cuda_be *cb = cuda_impl(be);
    red_args s = *a, b = *a;
    s.m = a->m / S;
    /* a slice's share of the chunks of 8 slices planned as one batch, so that 8 slices fill the GPU as one batch
     * does (a slice planned alone was held to 64 rows a chunk before the share: 2-4 chunks a slice at 4x4 and 7x7,
     * perf-log step 120); where 8 slices are small for the L2 (the size rule of the one-launch pass), at most its
     * share of a resident cooperative grid, so that the pass can run in one launch (plan_fused_slices: the slices'
     * CTAs were more than fit, step 119): a function of the slice's rows only (the same on a rank holding fewer
     * slices), whether the pass is forced or not */
    b.m = s.m * SLICES_MAX;
    *fvec = NULL;
    if (vec_ok(a)) CNN_TRY(plan_chunks_vec(cb, &b, entry_vec, b.m, fvec));
    else plan_chunks(cb, &b);
    long long per = (b.chunks + SLICES_MAX - 1) / SLICES_MAX;
    const bool forward = entry_vec == BN_PARTIAL_VEC;
    if (*fvec && small_for_l2(cb, b.m, a->c, forward)) {
        CUfunction ff;
        long long slots;
        CNN_TRY(fused_slots(cb, forward ? BN_FUSED_VEC : BN_BWD_FUSED_VEC, &ff, &slots));
        const long long share = slots / vec_groups(a->c) / SLICES_MAX;
        if (share >= 1 && per > share) per = share;
    }
    s.rows_per_chunk = (s.m + per - 1) / per;
    s.chunks = (int)((s.m + s.rows_per_chunk - 1) / s.rows_per_chunk);
    a->slice_chunks = s.chunks, a->slice_rows = s.m, a->rows_per_chunk = s.rows_per_chunk;
    a->chunks = s.chunks * S, a->shards = S;
    const size_t part = (size_t)2 * a->chunks * a->c;
    void *w;
    CNN_TRY(cuda_workspace(cb, (part + 2 * (size_t)a->c + extra) * sizeof(double), &w));
    a->partial = w;
    *group = (double *)w + part;
    if (rest) *rest = *group + 2 * (size_t)a->c;
    return CNN_OK;
}

/* The sliced pass in one cooperative launch (kernels/batchnorm.cu, fused_slice_finalize: bn_shard_tree's additions
 * and the finalize's, in the same order) where plan_fused's size rule takes the tensor, there is no collective
 * (this rank's statistics alone) and plan_slices's CTAs are all resident at once. Which path a rank takes then
 * changes no bit of its results (perf-log step 118). */
static cnn_status plan_fused_slices(cuda_be *cb, const cnn_bn *bn, red_args *a, CUfunction fvec, int entry,
                                    CUfunction *f, bool *ok) {
    *ok = false;
    if (!fvec || bn->comm || !fused_by_size(cb, a->m, a->c, entry == BN_FUSED_VEC)) return CNN_OK;
    long long slots;
    CNN_TRY(fused_slots(cb, entry, f, &slots));
    const long long groups = vec_groups(a->c);
    if ((long long)a->chunks * groups > slots || groups > 65535) return CNN_OK;
    a->barrier = (unsigned *)(uintptr_t)(cb->scratch + CUDA_GRID_BARRIER);
    *ok = true;
    return CNN_OK;
}

/* a's slices' chunks (partial, by slices) in their tree into group (with a's dgamma/dbeta: the backward's floats),
 * then the ranks' sum */
static cnn_status slice_tree(cnn_backend *be, const cnn_bn *bn, const red_args *a, int sums, double *group,
                             const char *what) {
    CNN_ASSERT(sums >= 1 && sums <= 2 && a->shards <= SLICES_MAX); /* bn_shard_tree's pairs: 16 at most */
    red_args t = *a;
    t.totals = group, t.sums = sums;
    CNN_TRY(run_per_channel(cuda_impl(be), &t, BN_SHARD_TREE, what));
    if (bn->comm) CNN_TRY(be->comm_allreduce(be, bn->comm, group, (int64_t)sums * a->c, CNN_COMM_SUM_F64, false));
    return CNN_OK;
}

/* the partial pass in `mode` over all slices, then slice_tree */
static cnn_status slice_totals(cnn_backend *be, const cnn_bn *bn, red_args *a, CUfunction fvec, int mode, int sums,
                               double *group, const char *what) {
    cuda_be *cb = cuda_impl(be);
    CNN_TRY(fvec ? run_partial_vec(cb, fvec, a, mode, what) : run_partial(cb, a, mode, what));
    return slice_tree(be, bn, a, sums, group, what);
}

/* The conv's sums (conv_sums) by slices: where a slice's rows are whole tiles of the conv's, its chunks are those a
 * launch over that slice alone writes, whatever slices a launch holds (cnn_conv_stats.tile_rows; the conv's choice
 * is the global batch's on every rank): folded by slices, then added by bn_shard_tree (perf-log step 117). */
static bool slice_sums_fit(const cnn_conv_stats *s, const red_args *a, int S) {
    const int64_t rows = a->m / S;
    return s->tile_rows > 0 && s->chunk_rows > 0 && s->tile_rows % s->chunk_rows == 0 && rows % s->tile_rows == 0 &&
           s->chunks == a->m / s->chunk_rows;
}

static cnn_status bn_forward_sliced(cnn_backend *be, const cnn_bn *bn, red_args *a, const char *what) {
    cuda_be *cb = cuda_impl(be);
    const int S = slices_of(be, a);
    const cnn_conv_stats *sums = conv_sums(cb, bn, a->x, vec_ok(a));
    if (sums && slice_sums_fit(sums, a, S)) {
        /* bn_fold_stats by slices: a slice's share of plan_fold's CTAs over its conv chunks, so that 8 slices fill
         * the GPU as one batch's fold does (a function of the slice alone), then bn_shard_tree over the folds */
        const long long per_slice = a->m / S / sums->chunk_rows, groups = (a->c + RED_TX - 1) / RED_TX;
        long long folds = (4LL * cb->sm_count / groups + SLICES_MAX - 1) / SLICES_MAX;
        if (folds > per_slice) folds = per_slice;
        if (folds < 1) folds = 1;
        a->rows_per_chunk = (per_slice + folds - 1) / folds;
        a->slice_chunks = (int)((per_slice + a->rows_per_chunk - 1) / a->rows_per_chunk);
        a->slice_rows = per_slice, a->shards = S, a->chunks = a->slice_chunks * S, a->sums = 2;
        a->fpartial = sums->partial, a->fchunks = sums->chunks;
        const size_t part = (size_t)2 * a->chunks * a->c;
        void *w;
        CNN_TRY(cuda_workspace(cb, (part + 2 * (size_t)a->c) * sizeof(double), &w));
        a->partial = w;
        double *group = (double *)w + part;
        CNN_TRY(run_fold(cb, a, what));
        cb->stats.bn_stats_folds++;
        CNN_TRY(slice_tree(be, bn, a, 2, group, what));
        red_args g = *a;
        g.partial = group, g.chunks = 1, g.m = a->m * (bn->comm ? bn->world : 1);
        CNN_TRY(run_per_channel(cb, &g, BN_STATS_FIN, what));
        return run_elementwise(cb, a, BN_APPLY_VEC, what);
    }
    CUfunction fvec, ffused;
    double *group;
    bool fused;
    CNN_TRY(plan_slices(be, a, S, BN_PARTIAL_VEC, 0, &fvec, &group, NULL));
    CNN_TRY(plan_fused_slices(cb, bn, a, fvec, BN_FUSED_VEC, &ffused, &fused));
    if (fused) return run_fused(cb, ffused, a, 0, what);
    red_args g = *a;
    g.partial = group, g.chunks = 1, g.m = a->m * (bn->comm ? bn->world : 1);
    if (fvec) {
        CNN_TRY(slice_totals(be, bn, a, fvec, 0, 2, group, what));
        CNN_TRY(run_per_channel(cb, &g, BN_STATS_FIN, what));
        return run_elementwise(cb, a, BN_APPLY_VEC, what);
    }
    CNN_TRY(slice_totals(be, bn, a, NULL, 0, 1, group, what));
    CNN_TRY(run_per_channel(cb, &g, BN_MEAN_FIN, what));
    CNN_TRY(slice_totals(be, bn, a, NULL, 1, 1, group, what));
    CNN_TRY(run_per_channel(cb, &g, BN_VAR_FIN, what));
    CNN_TRY(run_elementwise(cb, a, BN_APPLY, what));
    return a->mask ? run_elementwise(cb, a, BN_MASK_OF_Y, what) : CNN_OK;
}

/* dgamma, dbeta from bn_shard_tree (each slice's sum as a float, in a float tree); dx's coefficients from the
 * group's double totals */
static cnn_status bn_backward_sliced(cnn_backend *be, const cnn_bn *bn, red_args *a, const char *what) {
    cuda_be *cb = cuda_impl(be);
    CUfunction fvec, ffused;
    double *group;
    bool fused;
    CNN_TRY(plan_slices(be, a, slices_of(be, a), BN_BWD_PARTIAL_VEC, (size_t)3 * a->c, &fvec, &group, &a->coef));
    CNN_TRY(plan_fused_slices(cb, bn, a, fvec, BN_BWD_FUSED_VEC, &ffused, &fused));
    if (fused) return run_fused(cb, ffused, a, 2, what);
    CNN_TRY(slice_totals(be, bn, a, fvec, 2, 2, group, what));
    red_args g = *a;
    g.partial = group, g.chunks = 1, g.m = a->m * (bn->comm ? bn->world : 1);
    g.dgamma = g.dbeta = NULL;
    CNN_TRY(run_per_channel(cb, &g, BN_BWD_FIN, what));
    if (!a->out && !a->dres) return CNN_OK;
    return run_elementwise(cb, a, fvec ? BN_BWD_APPLY_VEC : BN_BWD_APPLY, what);
}

cnn_status cuda_bn_forward_train(cnn_backend *be, const cnn_bn *bn, const void *x, const float *gamma,
                                 const float *beta, float *running_mean, float *running_var, float *save_mean,
                                 float *save_invstd, const void *residual, bool relu, void *y) {
    cuda_be *cb = cuda_impl(be);
    cuda_bind(cb);
    check_mc(bn->m, bn->c);
    CNN_ASSERT(x && gamma && beta && running_mean && running_var && save_mean && save_invstd && y);
    if (bn->m < 2)
        return cnn_fail(CNN_E_INVALID, "batch norm in training needs more than 1 value per channel (M = %lld)",
                        (long long)bn->m);
    red_args a = {0};
    a.m = bn->m, a.c = bn->c, a.eps = bn->eps, a.momentum = bn->momentum;
    a.x = x, a.out = y, a.gamma = gamma, a.beta = beta, a.residual = residual, a.relu = relu;
    a.mean = save_mean, a.invstd = save_invstd, a.running_mean = running_mean, a.running_var = running_var;
    a.mask = relu ? bn->relu_mask : NULL;
    check_group(be, bn);
    if (be->batch_shards > 0) {
        char w[112];
        snprintf(w, sizeof w, "bn_forward_train[%s] m%lld c%d sliced", cuda_dtype_str(be->act_dtype), (long long)a.m, a.c);
        return bn_forward_sliced(be, bn, &a, w);
    }
    const bool vec = vec_ok(&a);
    const cnn_conv_stats *sums = conv_sums(cb, bn, x, vec);
    CUfunction fpart = NULL;
    bool fused = false;
    if (sums) {
        plan_fold(cb, sums, 2, &a);
    } else {
        CNN_TRY(plan_fused(cb, bn, &a, vec, BN_FUSED_VEC, &fpart, &fused));
        if (!fused && vec) CNN_TRY(plan_chunks_vec(cb, &a, BN_PARTIAL_VEC, a.m, &fpart));
        if (!fused && !vec) plan_chunks(cb, &a);
    }
    void *ws;
    const size_t part = (size_t)2 * a.chunks * a.c;
    CNN_TRY(cuda_workspace(cb, (part + (bn->comm ? 2 * (size_t)a.c : 0)) * sizeof(double), &ws));
    a.partial = ws;
    a.totals = (double *)ws + part;
    char what[112];
    snprintf(what, sizeof what, "bn_forward_train[%s] m%lld c%d%s%s%s%s", cuda_dtype_str(be->act_dtype),
             (long long)a.m, a.c, residual ? " +residual" : "", relu ? " relu" : "", bn->comm ? " sync" : "",
             sums ? " (the conv's sums)" : "");
    /* synchronised: each finalize reads the group's totals instead of this rank's chunks */
    red_args g, *fin = &a;
    if (bn->comm) g = group_view(&a, bn), fin = &g;
    if (fused) return run_fused(cb, fpart, &a, 0, what);
    if (vec) {
        if (sums) {
            CNN_TRY(run_fold(cb, &a, what));
            cb->stats.bn_stats_folds++;
        } else {
            CNN_TRY(run_partial_vec(cb, fpart, &a, 0, what));
        }
        if (bn->comm) CNN_TRY(group_totals(be, bn, &a, 2, what));
        CNN_TRY(run_per_channel(cb, fin, BN_STATS_FIN, what));
        return run_elementwise(cb, &a, BN_APPLY_VEC, what);
    }
    CNN_TRY(run_partial(cb, &a, 0, what));
    if (bn->comm) CNN_TRY(group_totals(be, bn, &a, 1, what));
    CNN_TRY(run_per_channel(cb, fin, BN_MEAN_FIN, what));
    CNN_TRY(run_partial(cb, &a, 1, what));
    if (bn->comm) CNN_TRY(group_totals(be, bn, &a, 1, what));
    CNN_TRY(run_per_channel(cb, fin, BN_VAR_FIN, what));
    CNN_TRY(run_elementwise(cb, &a, BN_APPLY, what));
    return a.mask ? run_elementwise(cb, &a, BN_MASK_OF_Y, what) : CNN_OK;
}

/* The 3x3/2 pad-1 max-pool after a BatchNorm's ReLU whose backward bn_backward_pool takes in (its argmax kept, the
 * ReLU's mask kept, no residual): the vector kernels' channels, at most BN_POOL_APPLY_C of them; the output ceil(H/2) x
 * ceil(W/2), so that a 2x2 block of inputs lies in the four windows from its own (kernels/batchnorm.cu,
 * pool_quad_load); 32-bit indices (M and the quads' channel vectors below 2^31). CNN_CONV_SKIP=bn_pool leaves it out
 * (the A/B, as conv2d_fast.c does). */
bool cuda_bn_pool_fusable(cnn_backend *be, const cnn_bn *bn, const cnn_pool2d *pl) {
    cuda_be *cb = cuda_impl(be);
    const int64_t quads = (int64_t)pl->n * ((pl->h + 1) / 2) * ((pl->w + 1) / 2);
    return pl->kind == CNN_POOL_MAX && pl->argmax && bn->relu_mask && pl->r == 3 && pl->s == 3 && pl->stride_h == 2 &&
           pl->stride_w == 2 && pl->pad_h == 1 && pl->pad_w == 1 && pl->p == (pl->h + 1) / 2 &&
           pl->q == (pl->w + 1) / 2 && pl->c == bn->c && bn->c % 8 == 0 && bn->c <= BN_POOL_APPLY_C &&
           (int64_t)pl->n * pl->h * pl->w == bn->m && bn->m < INT32_MAX && quads * (bn->c / 8) < INT32_MAX &&
           !cuda_conv_skipped(cb, "bn_pool");
}

/* bn_backward, and with pl the backward of the max-pool after its ReLU (bn_backward_pool: dy is the pool's) */
static cnn_status bn_backward_run(cnn_backend *be, const cnn_bn *bn, const cnn_pool2d *pl, const void *x,
                                  const void *y, const void *dy, const float *gamma, const float *save_mean,
                                  const float *save_invstd, bool relu, void *dx, bool accumulate, void *dres,
                                  bool dres_accumulate, float *dgamma, float *dbeta) {
    cuda_be *cb = cuda_impl(be);
    cuda_bind(cb);
    check_mc(bn->m, bn->c);
    CNN_ASSERT(x && dy && gamma && save_mean && save_invstd && (!relu || y || pl));
    red_args a = {0};
    a.m = bn->m, a.c = bn->c;
    a.x = x, a.y = y, a.dy = dy, a.out = dx, a.dres = dres, a.gamma = gamma, a.relu = relu;
    a.mean = (float *)save_mean, a.invstd = (float *)save_invstd; /* read only in these kernels */
    a.dgamma = dgamma, a.dbeta = dbeta;
    a.accumulate = accumulate, a.dres_accumulate = dres_accumulate;
    a.mask = relu ? bn->relu_mask : NULL; /* bn_forward_train wrote it */
    check_group(be, bn);
    if (be->batch_shards > 0 && !pl) {
        char w[112];
        snprintf(w, sizeof w, "bn_backward[%s] m%lld c%d sliced", cuda_dtype_str(be->act_dtype), (long long)a.m, a.c);
        return bn_backward_sliced(be, bn, &a, w);
    }
    const bool vec = vec_ok(&a);
    CUfunction fpart = NULL;
    bool fused = false;
    if (pl) {
        if (!vec || !aligned16(pl->argmax) || !cuda_bn_pool_fusable(be, bn, pl))
            return cnn_fail(CNN_E_UNSUPPORTED, "bn_backward_pool: a problem bn_pool_fusable refuses (m%lld c%d, pool "
                            "%dx%d/%d pad %d of %dx%d)", (long long)bn->m, bn->c, pl->r, pl->s, pl->stride_h,
                            pl->pad_h, pl->h, pl->w);
        a.argmax = pl->argmax;
        a.pool_h = pl->h, a.pool_w = pl->w, a.pool_p = pl->p, a.pool_q = pl->q;
        a.quads = (long long)pl->n * ((pl->h + 1) / 2) * ((pl->w + 1) / 2);
        CNN_TRY(plan_chunks_vec(cb, &a, BN_BWD_POOL_PARTIAL_VEC, a.quads, &fpart));
    } else {
        CNN_TRY(plan_fused(cb, bn, &a, vec, BN_BWD_FUSED_VEC, &fpart, &fused));
        if (!fused && vec) CNN_TRY(plan_chunks_vec(cb, &a, BN_BWD_PARTIAL_VEC, a.m, &fpart));
        if (!fused && !vec) plan_chunks(cb, &a);
    }
    void *ws;
    size_t part = (size_t)2 * a.chunks * a.c;
    CNN_TRY(cuda_workspace(cb, (part + 5 * (size_t)a.c) * sizeof(double), &ws));
    a.partial = ws;
    a.coef = (double *)ws + part;
    a.totals = a.coef + 3 * (size_t)a.c;
    char what[112];
    snprintf(what, sizeof what, "bn_backward[%s] m%lld c%d%s%s%s%s", cuda_dtype_str(be->act_dtype), (long long)a.m,
             a.c, relu ? " relu" : "", pl ? " +max-pool" : "", dres ? " +residual" : "", bn->comm ? " sync" : "");
    if (fused) return run_fused(cb, fpart, &a, 2, what);
    CNN_TRY(vec ? run_partial_vec(cb, fpart, &a, 2, what) : run_partial(cb, &a, 2, what));
    CNN_TRY(run_per_channel(cb, &a, BN_BWD_FIN, what)); /* dgamma, dbeta: this rank's sums */
    if (bn->comm) { /* dx's coefficients from the group's sums */
        CNN_TRY(group_totals(be, bn, &a, 2, what));
        red_args g = group_view(&a, bn);
        g.dgamma = g.dbeta = NULL;
        CNN_TRY(run_per_channel(cb, &g, BN_BWD_FIN, what));
    }
    if (!dx && !dres) return CNN_OK;
    if (pl) {
        CUfunction f;
        CNN_TRY(kern(cb, BN_BWD_POOL_APPLY_VEC, &f));
        cb->stats.bn_pool_launches++;
        return cuda_launch(cb, f, what, cuda_grid_1d(cb, a.quads * (a.c / 8), 256), 1, 1, 256, 1, &a);
    }
    return run_elementwise(cb, &a, vec ? BN_BWD_APPLY_VEC : BN_BWD_APPLY, what);
}

cnn_status cuda_bn_backward(cnn_backend *be, const cnn_bn *bn, const void *x, const void *y, const void *dy,
                            const float *gamma, const float *save_mean, const float *save_invstd, bool relu, void *dx,
                            bool accumulate, void *dres, bool dres_accumulate, float *dgamma, float *dbeta) {
    return bn_backward_run(be, bn, NULL, x, y, dy, gamma, save_mean, save_invstd, relu, dx, accumulate, dres,
                           dres_accumulate, dgamma, dbeta);
}

cnn_status cuda_bn_backward_pool(cnn_backend *be, const cnn_bn *bn, const cnn_pool2d *pl, const void *x,
                                 const void *dy, const float *gamma, const float *save_mean, const float *save_invstd,
                                 void *dx, bool accumulate, float *dgamma, float *dbeta) {
    CNN_ASSERT(pl);
    return bn_backward_run(be, bn, pl, x, NULL, dy, gamma, save_mean, save_invstd, true, dx, accumulate, NULL, false,
                           dgamma, dbeta);
}

cnn_status cuda_scale_shift(cnn_backend *be, int64_t m, int c, const void *x, const float *scale,
                            const float *shift, const void *residual, bool relu, void *y) {
    cuda_be *cb = cuda_impl(be);
    cuda_bind(cb);
    check_mc(m, c);
    CNN_ASSERT(x && y);
    red_args a = {0};
    a.m = m, a.c = c, a.x = x, a.out = y, a.scale = scale, a.shift = shift, a.residual = residual;
    a.relu = relu;
    char what[96];
    snprintf(what, sizeof what, "scale_shift[%s] m%lld c%d", cuda_dtype_str(be->act_dtype), (long long)m, c);
    return run_elementwise(cb, &a, BN_SCALE_SHIFT, what);
}
