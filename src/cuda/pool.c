/* pool.c -- launchers of kernels/pool.cu: max / average (count_include_pad) / adaptive-average pooling over NHWC,
 * forward (one thread per output) and backward (a gather: one thread per input, or per 2x2 inputs for ResNet's
 * 3x3/2 max-pool; no atomics). Max pooling keeps its maxima's window positions in cnn_pool2d.argmax when given one
 * (windows of fewer than 255 positions); forward and backward decide that from the problem alone, so the backward
 * reads what the forward wrote whichever kernels (vector or scalar) each runs. */
#include "cuda/internal.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>

static const char *kind_name(cnn_pool_kind k) {
    return k == CNN_POOL_MAX ? "max" : k == CNN_POOL_AVG ? "avg" : "adaptive_avg";
}

static pool_args make_args(const cnn_pool2d *pl) {
    CNN_ASSERT(pl->n > 0 && pl->c > 0 && pl->h > 0 && pl->w > 0 && pl->p > 0 && pl->q > 0);
    CNN_ASSERT(pl->kind == CNN_POOL_MAX || pl->kind == CNN_POOL_AVG || pl->kind == CNN_POOL_ADAPTIVE_AVG);
    if (pl->kind != CNN_POOL_ADAPTIVE_AVG) {
        CNN_ASSERT(pl->r > 0 && pl->s > 0 && pl->stride_h > 0 && pl->stride_w > 0 && pl->pad_h >= 0 && pl->pad_w >= 0);
        CNN_ASSERT(pl->p == (pl->h + 2 * pl->pad_h - pl->r) / pl->stride_h + 1);
        CNN_ASSERT(pl->q == (pl->w + 2 * pl->pad_w - pl->s) / pl->stride_w + 1);
    }
    pool_args a = {0};
    a.kind = (int)pl->kind;
    a.argmax = pl->kind == CNN_POOL_MAX && pl->r * pl->s < 255 ? pl->argmax : NULL;
    a.n = pl->n, a.c = pl->c, a.h = pl->h, a.w = pl->w;
    a.r = pl->r, a.s = pl->s, a.stride_h = pl->stride_h, a.stride_w = pl->stride_w, a.pad_h = pl->pad_h, a.pad_w = pl->pad_w;
    a.p = pl->p, a.q = pl->q;
    return a;
}

static cnn_status run(cnn_backend *be, int entry, pool_args *a, long long work, const cnn_pool2d *pl) {
    cuda_be *cb = cuda_impl(be);
    cuda_bind(cb);
    CUfunction f;
    CNN_TRY(cuda_kernel(cb, &cuda_family_pool, be->act_dtype, 0, entry, &f));
    char what[160];
    snprintf(what, sizeof what, "%s[%s %s] n%d c%d h%d w%d -> p%d q%d window %dx%d stride %dx%d pad %dx%d",
             cuda_family_pool.entries[entry], cuda_dtype_str(be->act_dtype), kind_name(pl->kind), pl->n, pl->c, pl->h, pl->w, pl->p,
             pl->q, pl->r, pl->s, pl->stride_h, pl->stride_w, pl->pad_h, pl->pad_w);
    return cuda_launch(cb, f, what, cuda_grid_1d(cb, work, 256), 1, 1, 256, 1, a);
}

/* 16 bytes of channels per thread where the layout allows (every ResNet/VGG pool; the classifier's adaptive one
 * in the backward only): C a multiple of the vector, 16-byte aligned tensors, 32-bit element indices */
static bool vec_ok(cnn_backend *be, const cnn_pool2d *pl, const void *const *ptrs, int n, bool adaptive_ok) {
    const int vec = be->act_dtype == CNN_DTYPE_F32 ? 4 : 8;
    for (int i = 0; i < n; i++)
        if ((uintptr_t)ptrs[i] & 15) return false;
    return (adaptive_ok || pl->kind != CNN_POOL_ADAPTIVE_AVG) && pl->c % vec == 0 &&
           (long long)pl->n * (pl->h > pl->p ? pl->h : pl->p) * (pl->w > pl->q ? pl->w : pl->q) * pl->c < INT_MAX;
}

cnn_status cuda_pool2d_forward(cnn_backend *be, const cnn_pool2d *pl, const void *x, void *y) {
    CNN_ASSERT(x && y);
    pool_args a = make_args(pl);
    a.x = x, a.out = y;
    const void *ptrs[] = {x, y, a.argmax};
    const int vec = be->act_dtype == CNN_DTYPE_F32 ? 4 : 8;
    if (vec_ok(be, pl, ptrs, 3, false)) return run(be, POOL_FWD_VEC, &a, (long long)pl->n * pl->p * pl->q * (pl->c / vec), pl);
    return run(be, POOL_FWD, &a, (long long)pl->n * pl->p * pl->q * pl->c, pl);
}

/* the backward's kernels, by the first way that takes the problem; *summed: whether that kernel also wrote
 * pl->dx_sum (else the caller sums dx) */
static cnn_status backward_run(cnn_backend *be, const cnn_pool2d *pl, const void *x, const void *y, const void *dy,
                               void *dx, bool accumulate, bool *summed) {
    *summed = false;
    CNN_ASSERT(!pl->relu || (pl->kind == CNN_POOL_MAX && y));
    pool_args a = make_args(pl);
    a.x = x, a.y = y, a.dy = dy, a.out = dx, a.accumulate = accumulate, a.relu = pl->relu;
    /* without the argmax bytes the vector kernel finds max pooling's first maximum through y, the scalar one from x */
    const void *ptrs[] = {x, y, dy, dx, a.argmax};
    const int vec = be->act_dtype == CNN_DTYPE_F32 ? 4 : 8;
    const bool stem = a.argmax && pl->r == 3 && pl->s == 3 && pl->stride_h == 2 && pl->stride_w == 2 &&
                      pl->pad_h == 1 && pl->pad_w == 1; /* ResNet's: a thread per 2x2 inputs (perf-log step 94) */
    if (stem && vec_ok(be, pl, ptrs, 5, false)) {
        const long long quads = (long long)pl->n * ((pl->h + 1) / 2) * ((pl->w + 1) / 2);
        CNN_TRY(run(be, POOL_BWD_QUAD, &a, quads * (pl->c / vec), pl));
        cuda_impl(be)->stats.pool_quad_launches++;
        return CNN_OK;
    }
    /* windows that tile the input exactly (VGG's): a thread per window (perf-log step 97); CNN_CONV_SKIP=pool_tile
     * leaves it out (the A/B) */
    const bool tile = a.argmax && pl->stride_h == pl->r && pl->stride_w == pl->s && pl->pad_h == 0 && pl->pad_w == 0 &&
                      pl->h == pl->p * pl->r && pl->w == pl->q * pl->s && pl->r * pl->s <= 16 &&
                      !cuda_conv_skipped(cuda_impl(be), "pool_tile");
    if (tile && vec_ok(be, pl, ptrs, 5, false)) {
        if (cuda_pool_tile_sum_fits(be, pl, y, dy, dx, accumulate)) { /* dx's sums in the same kernel */
            CNN_TRY(cuda_pool_tile_backward_sum(be, pl, y, dy, dx));
            cuda_impl(be)->stats.pool_tile_sum_launches++;
            *summed = true;
        } else {
            CNN_TRY(run(be, POOL_BWD_TILE, &a, (long long)pl->n * pl->p * pl->q * (pl->c / vec), pl));
        }
        cuda_impl(be)->stats.pool_tile_launches++;
        return CNN_OK;
    }
    if ((y || pl->kind != CNN_POOL_MAX || a.argmax) && vec_ok(be, pl, ptrs, 5, true))
        return run(be, POOL_BWD_VEC, &a, (long long)pl->n * pl->h * pl->w * (pl->c / vec), pl);
    return run(be, POOL_BWD, &a, (long long)pl->n * pl->h * pl->w * pl->c, pl);
}

cnn_status cuda_pool2d_backward(cnn_backend *be, const cnn_pool2d *pl, const void *x, const void *y, const void *dy,
                                void *dx, bool accumulate) {
    CNN_ASSERT(x && dy && dx && (!pl->dx_sum || !accumulate));
    bool summed;
    CNN_TRY(backward_run(be, pl, x, y, dy, dx, accumulate, &summed));
    if (!pl->dx_sum || summed) return CNN_OK;
    return cuda_channel_sum(be, (int64_t)pl->n * pl->h * pl->w, pl->c, dx, pl->dx_sum); /* a pass over dx */
}
