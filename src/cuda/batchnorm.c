/* batchnorm.c -- launchers of kernels/batchnorm.cu: channel_sum, BatchNorm training forward/backward and
 * scale_shift, over (M, C) views of NHWC tensors.
 *
 * Reductions are two-level, deterministic and in double: chan_partial sums `rows_per_chunk` rows of 32 channels
 * per CTA into partial[chunk][c] (fixed order inside the CTA), then one thread per channel adds the chunks in
 * order. The chunking depends only on (M, C) and the SM count. BN forward is two-pass (mean, then the centred
 * variance), which stays accurate when |mean| >> std.
 */
#include "cuda/internal.h"

#include <stdio.h>

#define RED_TX 32 /* = kernels/batchnorm.cu */
#define RED_TY 8

static cnn_status kern(cuda_be *cb, int entry, CUfunction *f) {
    return cuda_kernel(cb, &cuda_family_batchnorm, cb->pub.act_dtype, 0, entry, f);
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

static cnn_status run_partial(cuda_be *cb, red_args *a, int mode, const char *what) {
    CUfunction f;
    CNN_TRY(kern(cb, BN_PARTIAL, &f));
    a->mode = mode;
    return cuda_launch(cb, f, what, (unsigned)((a->c + RED_TX - 1) / RED_TX), (unsigned)a->chunks, 1, RED_TX, RED_TY, a);
}

static cnn_status run_per_channel(cuda_be *cb, red_args *a, int entry, const char *what) {
    CUfunction f;
    CNN_TRY(kern(cb, entry, &f));
    return cuda_launch(cb, f, what, (unsigned)((a->c + 255) / 256), 1, 1, 256, 1, a);
}

static cnn_status run_elementwise(cuda_be *cb, red_args *a, int entry, const char *what) {
    CUfunction f;
    CNN_TRY(kern(cb, entry, &f));
    /* 4 elements per thread per step */
    return cuda_launch(cb, f, what, cuda_grid_1d(cb, (a->m * a->c + 3) / 4, 256), 1, 1, 256, 1, a);
}

static void check_mc(int64_t m, int c) {
    CNN_ASSERT(m > 0 && c > 0);
    CNN_ASSERT(m <= INT64_MAX / c);
}

cnn_status cuda_channel_sum(cnn_backend *be, int64_t m, int c, const void *dy, float *out) {
    cuda_be *cb = cuda_impl(be);
    cuda_bind(cb);
    check_mc(m, c);
    CNN_ASSERT(dy && out);
    red_args a = {0};
    a.m = m, a.c = c, a.x = dy, a.fout = out;
    plan_chunks(cb, &a);
    void *ws;
    CNN_TRY(cuda_workspace(cb, (size_t)a.chunks * c * sizeof(double), &ws));
    a.partial = ws;
    char what[96];
    snprintf(what, sizeof what, "channel_sum[%s] m%lld c%d", cuda_dtype_str(be->act_dtype), (long long)m, c);
    CNN_TRY(run_partial(cb, &a, 0, what));
    return run_per_channel(cb, &a, BN_SUM_FIN, what);
}

cnn_status cuda_bn_forward_train(cnn_backend *be, const cnn_bn *bn, const void *x, const float *gamma,
                                 const float *beta, float *running_mean, float *running_var, float *save_mean,
                                 float *save_invstd, void *y) {
    cuda_be *cb = cuda_impl(be);
    cuda_bind(cb);
    check_mc(bn->m, bn->c);
    CNN_ASSERT(x && gamma && beta && running_mean && running_var && save_mean && save_invstd && y);
    if (bn->m < 2)
        return cnn_fail(CNN_E_INVALID, "batch norm in training needs more than 1 value per channel (M = %lld)",
                        (long long)bn->m);
    red_args a = {0};
    a.m = bn->m, a.c = bn->c, a.eps = bn->eps, a.momentum = bn->momentum;
    a.x = x, a.out = y, a.gamma = gamma, a.beta = beta;
    a.mean = save_mean, a.invstd = save_invstd, a.running_mean = running_mean, a.running_var = running_var;
    plan_chunks(cb, &a);
    void *ws;
    CNN_TRY(cuda_workspace(cb, (size_t)a.chunks * a.c * sizeof(double), &ws));
    a.partial = ws;
    char what[96];
    snprintf(what, sizeof what, "bn_forward_train[%s] m%lld c%d", cuda_dtype_str(be->act_dtype), (long long)a.m, a.c);
    CNN_TRY(run_partial(cb, &a, 0, what));
    CNN_TRY(run_per_channel(cb, &a, BN_MEAN_FIN, what));
    CNN_TRY(run_partial(cb, &a, 1, what));
    CNN_TRY(run_per_channel(cb, &a, BN_VAR_FIN, what));
    return run_elementwise(cb, &a, BN_APPLY, what);
}

cnn_status cuda_bn_backward(cnn_backend *be, const cnn_bn *bn, const void *x, const void *dy, const float *gamma,
                            const float *save_mean, const float *save_invstd, void *dx, bool accumulate,
                            float *dgamma, float *dbeta) {
    cuda_be *cb = cuda_impl(be);
    cuda_bind(cb);
    check_mc(bn->m, bn->c);
    CNN_ASSERT(x && dy && gamma && save_mean && save_invstd);
    red_args a = {0};
    a.m = bn->m, a.c = bn->c;
    a.x = x, a.dy = dy, a.out = dx, a.gamma = gamma;
    a.mean = (float *)save_mean, a.invstd = (float *)save_invstd; /* read only in these kernels */
    a.dgamma = dgamma, a.dbeta = dbeta;
    a.accumulate = accumulate;
    plan_chunks(cb, &a);
    void *ws;
    size_t part = (size_t)2 * a.chunks * a.c;
    CNN_TRY(cuda_workspace(cb, (part + 3 * (size_t)a.c) * sizeof(double), &ws));
    a.partial = ws;
    a.coef = (double *)ws + part;
    char what[96];
    snprintf(what, sizeof what, "bn_backward[%s] m%lld c%d", cuda_dtype_str(be->act_dtype), (long long)a.m, a.c);
    CNN_TRY(run_partial(cb, &a, 2, what));
    CNN_TRY(run_per_channel(cb, &a, BN_BWD_FIN, what));
    if (!dx) return CNN_OK;
    return run_elementwise(cb, &a, BN_BWD_APPLY, what);
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
