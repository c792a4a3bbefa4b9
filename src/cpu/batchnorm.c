/* batchnorm.c — batch normalisation over an (M, C) view of an NHWC tensor (M = N*H*W), and the per-channel
 * scale/shift used for eval-mode BN and unfused epilogues.
 *
 * Training forward (PyTorch's semantics), with the residual add and ReLU that may follow it fused:
 *     mean = sum x / M,   var = sum (x - mean)^2 / M   (biased, normalises),   invstd = 1 / sqrt(var + eps)
 *     y = relu?((x - mean) * invstd * gamma + beta + residual)
 *     running_mean = (1 - momentum) * running_mean + momentum * mean
 *     running_var  = (1 - momentum) * running_var  + momentum * var * M / (M - 1)   (unbiased)
 * Backward through the same, with xhat = (x - mean) * invstd and g = dy where y > 0 (or everywhere without ReLU):
 *     dbeta = sum g,   dgamma = sum g * xhat,   dx (+)= gamma * invstd / M * (M * g - dbeta - xhat * dgamma),
 *     dres (+)= g (the residual's gradient)
 * Statistics are two-pass sums in double over fixed row chunks reduced in chunk order, so results do not
 * depend on the thread count; with cnn_backend.batch_shards, each slice's chunks in order and the slices in a
 * pairwise tree (core/shards.h). Synchronised BatchNorm (cnn_bn.comm): each per-channel sum is summed over the ranks
 * (comm_allreduce) and M is all the ranks' rows.
 */
#include "cpu/cpu.h"

#include <math.h>
#include <stdlib.h>

#define CHUNK CNN_CPU_REDUCE_CHUNK

static int64_t n_chunks(int64_t m) { return (m + CHUNK - 1) / CHUNK; }

/* The chunks of M rows: `shards` slices of M / shards rows (cnn_backend.batch_shards; one slice without), each cut
 * into chunks of CHUNK rows from its own first row, so that a slice's chunks are those of a batch of it alone. */
typedef struct chunking {
    int64_t slice, per; /* rows of a slice, chunks of a slice */
    int shards;
} chunking;

static chunking chunking_of(const cnn_backend *be, int64_t M) {
    const int s = be->batch_shards > 1 && M % be->batch_shards == 0 ? be->batch_shards : 1;
    CNN_ASSERT(s <= 8);
    return (chunking){.slice = M / s, .per = n_chunks(M / s), .shards = s};
}
static int64_t chunk_count(const chunking *k) { return k->per * k->shards; }
static int64_t chunk_lo(const chunking *k, int64_t ch) { return ch / k->per * k->slice + ch % k->per * CHUNK; }
static int64_t chunk_hi(const chunking *k, int64_t ch) {
    const int64_t end = (ch / k->per + 1) * k->slice, hi = chunk_lo(k, ch) + CHUNK;
    return hi < end ? hi : end;
}

/* slice s's sum of part[ch * ld + j] over its chunks, in order */
static double slice_sum(const double *part, int64_t ld, const chunking *k, int s, int j) {
    double t = 0;
    for (int64_t ch = s * k->per; ch < (s + 1) * k->per; ch++) t += part[ch * ld + j];
    return t;
}

/* total[j] = the slices' sums of part[chunk][j] added in a pairwise tree (in chunk order for one slice) */
static void reduce_chunks(int threads, const double *part, const chunking *k, int c, double *total) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int j = 0; j < c; j++) {
        double t[8] = {0};
        for (int s = 0; s < k->shards; s++) t[s] = slice_sum(part, c, k, s, j);
        total[j] = cnn_cpu_tree_d(t, k->shards);
    }
}

/* Synchronised BatchNorm (cnn_bn.comm): n per-channel sums summed over the ranks, in place. */
static cnn_status group_sum(cnn_backend *be, const cnn_bn *bn, double *v, int n) {
    if (!bn->comm) return CNN_OK;
    CNN_ASSERT(bn->world >= 1 && be->comm_allreduce);
    return be->comm_allreduce(be, bn->comm, v, n, CNN_COMM_SUM_F64, false);
}

/* The row loops below run over rows [r0, r1) of an (M, C) view with channels innermost, so the compiler turns
 * each into vector code over channels (one clone per ISA, chosen at load time). Every element goes through the
 * same double-precision operations in the same order as a scalar loop (ISO C: no contraction into FMAs), and each
 * channel's sum still adds its rows in order: the results are bit for bit those of the plain loops. */
#define CNN_ROWS_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

/* pp[j] = sum over the rows of x[r, j] */
CNN_ROWS_CLONES static void rows_sum(const float *x, int C, int64_t r0, int64_t r1, double *pp) {
    for (int j = 0; j < C; j++) pp[j] = 0;
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * C;
#pragma omp simd
        for (int j = 0; j < C; j++) pp[j] += xr[j];
    }
}

/* pp[j] = sum over the rows of (x[r, j] - mean[j])^2 */
CNN_ROWS_CLONES static void rows_sqdev(const float *x, const double *mean, int C, int64_t r0, int64_t r1,
                                       double *pp) {
    for (int j = 0; j < C; j++) pp[j] = 0;
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * C;
#pragma omp simd
        for (int j = 0; j < C; j++) {
            double d = (double)xr[j] - mean[j];
            pp[j] += d * d;
        }
    }
}

/* y = relu?((x - mean) * a + b + res) for one row; relu and res known at each call site, so the loop has no
 * branch left (a select keeps NaN: NaN < 0 is false). The select must become a vector blend, not a branch per
 * element (which mispredicts on real signs: perf-log step 67): both of its sides are computed first, and the
 * Makefile's -fno-trapping-math lets gcc if-convert it. */
static inline __attribute__((always_inline)) void row_apply(const float *xr, const float *rr, const double *mean,
                                                            const double *a, const double *b, bool relu, int C,
                                                            float *yr) {
#pragma omp simd
    for (int j = 0; j < C; j++) {
        double v = ((double)xr[j] - mean[j]) * a[j] + b[j] + (rr ? (double)rr[j] : 0.0);
        float f = (float)v;
        yr[j] = relu && v < 0 ? 0.0f : f;
    }
}

CNN_ROWS_CLONES static void rows_apply(const float *x, const float *res, const double *mean, const double *a,
                                       const double *b, bool relu, int C, int64_t r0, int64_t r1, float *y) {
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * C;
        float *yr = y + r * C;
        if (res && relu) row_apply(xr, res + r * C, mean, a, b, true, C, yr);
        else if (res) row_apply(xr, res + r * C, mean, a, b, false, C, yr);
        else if (relu) row_apply(xr, NULL, mean, a, b, true, C, yr);
        else row_apply(xr, NULL, mean, a, b, false, C, yr);
    }
}

cnn_status cnn_cpu_op_bn_forward_train(cnn_backend *be, const cnn_bn *bn, const void *xv, const float *gamma,
                                       const float *beta, float *running_mean, float *running_var, float *save_mean,
                                       float *save_invstd, const void *residual, bool relu, void *yv) {
    const int threads = cnn_cpu_threads(be);
    const int64_t M = bn->m;
    const int C = bn->c;
    const float *x = xv, *res = residual; /* (M, C) */
    float *y = yv;                        /* (M, C) */
    CNN_ASSERT(M >= 0 && C > 0);
    if (M < 2) return cnn_fail(CNN_E_INVALID, "batch norm in training needs more than 1 value per channel (M = %lld)", (long long)M);
    const chunking k = chunking_of(be, M);
    const int64_t nch = chunk_count(&k);
    double *part = malloc((size_t)nch * C * sizeof(double));
    double *stat = malloc((size_t)4 * C * sizeof(double));
    double *coef = malloc((size_t)2 * C * sizeof(double));
    if (!part || !stat || !coef) {
        free(part), free(stat), free(coef);
        return cnn_fail(CNN_E_OOM, "out of host memory for batch norm statistics (%lld x %d)", (long long)nch, C);
    }
    double *mean = stat, *var = stat + C;
    const double rows = (double)M * (bn->comm ? bn->world : 1); /* the statistics' rows: the group's when synchronised */
    /* pass 1: mean */
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t ch = 0; ch < nch; ch++)
        rows_sum(x, C, chunk_lo(&k, ch), chunk_hi(&k, ch), part + ch * C);
    reduce_chunks(threads, part, &k, C, mean);
    cnn_status st = group_sum(be, bn, mean, C);
    for (int j = 0; j < C; j++) mean[j] /= rows;
    /* pass 2: biased variance around the mean */
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t ch = 0; ch < nch; ch++)
        rows_sqdev(x, mean, C, chunk_lo(&k, ch), chunk_hi(&k, ch), part + ch * C);
    reduce_chunks(threads, part, &k, C, var);
    if (st == CNN_OK) st = group_sum(be, bn, var, C);
    if (st != CNN_OK) {
        free(part), free(stat), free(coef);
        return st;
    }
    double *a = coef, *b = coef + C;
    const double mom = bn->momentum;
    for (int j = 0; j < C; j++) {
        var[j] /= rows;
        double invstd = 1.0 / sqrt(var[j] + (double)bn->eps);
        save_mean[j] = (float)mean[j];
        save_invstd[j] = (float)invstd;
        running_mean[j] = (float)(mom * mean[j] + (1.0 - mom) * running_mean[j]);
        running_var[j] = (float)(mom * var[j] * rows / (rows - 1.0) + (1.0 - mom) * running_var[j]);
        /* y = (x - mean) * a + b with a = invstd * gamma, in double: a large mean cancels exactly */
        a[j] = invstd * (gamma ? gamma[j] : 1.0);
        b[j] = beta ? beta[j] : 0.0;
    }
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t ch = 0; ch < nch; ch++)
        rows_apply(x, res, mean, a, b, relu, C, chunk_lo(&k, ch), chunk_hi(&k, ch), y);
    free(part), free(stat), free(coef);
    return CNN_OK;
}

/* The backward's per-channel constants in double: the saved statistics and gamma (1 when absent). */
typedef struct bn_consts {
    double *mean, *invstd, *gamma;
} bn_consts;

/* How the backward masks the ReLU: not at all, or by y > 0 */
enum { MASK_NONE, MASK_Y };

/* the gradient reaching the BN's output at row element j: dy, where the ReLU after it passed */
static inline __attribute__((always_inline)) double bn_grad(int mask, const float *dyr, const float *yr, int j) {
    const double d = dyr[j]; /* both sides ready: a vector blend (row_apply) */
    if (mask == MASK_NONE) return d;
    return yr[j] > 0.0f ? d : 0.0;
}

/* p0[j] = sum of g, p1[j] = sum of g * xhat over the rows (mask fixed at each call site: no branch in the loop) */
static inline __attribute__((always_inline)) void rows_gsums_m(int mask, const float *x, const float *y,
                                                               const float *dy, const bn_consts *k, int C, int64_t r0,
                                                               int64_t r1, double *p0, double *p1) {
    const double *mean = k->mean, *invstd = k->invstd; /* locals: loads through k would not vectorize */
    for (int j = 0; j < C; j++) p0[j] = p1[j] = 0;
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * C, *yr = y ? y + r * C : NULL, *dyr = dy + r * C;
#pragma omp simd
        for (int j = 0; j < C; j++) {
            double g = bn_grad(mask, dyr, yr, j);
            p0[j] += g;
            p1[j] += g * (((double)xr[j] - mean[j]) * invstd[j]);
        }
    }
}

CNN_ROWS_CLONES static void rows_gsums(int mask, const float *x, const float *y, const float *dy, const bn_consts *k,
                                       int C, int64_t r0, int64_t r1, double *p0, double *p1) {
    if (mask == MASK_NONE) rows_gsums_m(MASK_NONE, x, y, dy, k, C, r0, r1, p0, p1);
    else rows_gsums_m(MASK_Y, x, y, dy, k, C, r0, r1, p0, p1);
}

/* dx (+)= k_scale * (g - mean_g - xhat * k_proj) and dres (+)= g over the rows, either output optional */
static inline __attribute__((always_inline)) void rows_dx_m(int mask, const float *x, const float *y, const float *dy,
                                                            const bn_consts *k, const double *k_scale,
                                                            const double *mean_g, const double *k_proj, int C,
                                                            int64_t r0, int64_t r1, float *dx, bool accumulate,
                                                            float *dres, bool dres_accumulate) {
    const double *mean = k->mean, *invstd = k->invstd; /* locals: loads through k would not vectorize */
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * C, *yr = y ? y + r * C : NULL, *dyr = dy + r * C;
        float *dxr = dx ? dx + r * C : NULL, *dresr = dres ? dres + r * C : NULL;
        /* one loop per case: a select on `accumulate` would read dx even where it is overwritten */
#define DX_TERM(j) (k_scale[j] * (bn_grad(mask, dyr, yr, j) - mean_g[j] - ((double)xr[j] - mean[j]) * invstd[j] * k_proj[j]))
        if (dxr && accumulate) {
#pragma omp simd
            for (int j = 0; j < C; j++) dxr[j] = (float)((double)dxr[j] + DX_TERM(j));
        } else if (dxr) {
#pragma omp simd
            for (int j = 0; j < C; j++) dxr[j] = (float)DX_TERM(j);
        }
#undef DX_TERM
        if (dresr && dres_accumulate) {
#pragma omp simd
            for (int j = 0; j < C; j++) dresr[j] = (float)((double)dresr[j] + bn_grad(mask, dyr, yr, j));
        } else if (dresr) {
#pragma omp simd
            for (int j = 0; j < C; j++) dresr[j] = (float)bn_grad(mask, dyr, yr, j);
        }
    }
}

CNN_ROWS_CLONES static void rows_dx(int mask, const float *x, const float *y, const float *dy, const bn_consts *k,
                                    const double *k_scale, const double *mean_g, const double *k_proj, int C,
                                    int64_t r0, int64_t r1, float *dx, bool accumulate, float *dres,
                                    bool dres_accumulate) {
    if (mask == MASK_NONE)
        rows_dx_m(MASK_NONE, x, y, dy, k, k_scale, mean_g, k_proj, C, r0, r1, dx, accumulate, dres, dres_accumulate);
    else
        rows_dx_m(MASK_Y, x, y, dy, k, k_scale, mean_g, k_proj, C, r0, r1, dx, accumulate, dres, dres_accumulate);
}

cnn_status cnn_cpu_op_bn_backward(cnn_backend *be, const cnn_bn *bn, const void *xv, const void *yv, const void *dyv,
                                  const float *gamma, const float *save_mean, const float *save_invstd, bool relu,
                                  void *dxv, bool accumulate, void *dresv, bool dres_accumulate, float *dgamma,
                                  float *dbeta) {
    const int threads = cnn_cpu_threads(be);
    const int64_t M = bn->m;
    const int C = bn->c;
    const float *x = xv, *y = yv, *dy = dyv; /* (M, C) */
    float *dx = dxv, *dres = dresv;          /* (M, C) */
    CNN_ASSERT(M > 0 && C > 0);
    CNN_ASSERT(!relu || y);
    const int mask = relu ? MASK_Y : MASK_NONE;
    const chunking kc = chunking_of(be, M);
    const int64_t nch = chunk_count(&kc);
    double *part = malloc((size_t)nch * 2 * C * sizeof(double));
    double *stat = malloc((size_t)7 * C * sizeof(double));
    if (!part || !stat) {
        free(part), free(stat);
        return cnn_fail(CNN_E_OOM, "out of host memory for batch norm backward (%lld x %d)", (long long)nch, C);
    }
    double *sum_dy = stat, *sum_dyx = stat + C, *k_scale = stat + 2 * C, *k_proj = stat + 3 * C;
    const bn_consts k = {.mean = stat + 4 * C, .invstd = stat + 5 * C, .gamma = stat + 6 * C};
    for (int j = 0; j < C; j++) {
        k.mean[j] = save_mean[j];
        k.invstd[j] = save_invstd[j];
        k.gamma[j] = gamma ? gamma[j] : 1.0;
    }
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t ch = 0; ch < nch; ch++)
        rows_gsums(mask, x, y, dy, &k, C, chunk_lo(&kc, ch), chunk_hi(&kc, ch), part + ch * 2 * C,
                   part + ch * 2 * C + C);
    /* the slices' sums in double, and dgamma, dbeta as the float sums of the slices' (so that ranks holding the
     * slices, whose gradients are summed in float, get these: cnn_backend.batch_shards) */
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int j = 0; j < C; j++) {
        double t0[8] = {0}, t1[8] = {0};
        float f0[8] = {0}, f1[8] = {0};
        for (int sl = 0; sl < kc.shards; sl++) {
            t0[sl] = slice_sum(part, 2 * C, &kc, sl, j), t1[sl] = slice_sum(part, 2 * C, &kc, sl, C + j);
            f0[sl] = (float)t0[sl], f1[sl] = (float)t1[sl];
        }
        sum_dy[j] = cnn_cpu_tree_d(t0, kc.shards);
        sum_dyx[j] = cnn_cpu_tree_d(t1, kc.shards);
        if (dbeta) dbeta[j] = cnn_cpu_tree_f(f0, kc.shards);
        if (dgamma) dgamma[j] = cnn_cpu_tree_f(f1, kc.shards);
    }
    /* dgamma, dbeta are this rank's sums; dx takes the group's (sum_dy and sum_dyx are adjacent) */
    cnn_status st = group_sum(be, bn, sum_dy, 2 * C);
    if (st != CNN_OK) {
        free(part), free(stat);
        return st;
    }
    const double rows = (double)M * (bn->comm ? bn->world : 1);
    for (int j = 0; j < C; j++) {
        k_scale[j] = k.gamma[j] * save_invstd[j];
        k_proj[j] = sum_dyx[j] / rows;
        sum_dy[j] /= rows; /* now the mean of g */
    }
    /* dx = gamma*invstd * (g - mean(g) - xhat * mean(g*xhat)); dres = g */
    if (dx || dres) {
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int64_t ch = 0; ch < nch; ch++)
            rows_dx(mask, x, y, dy, &k, k_scale, sum_dy, k_proj, C, chunk_lo(&kc, ch), chunk_hi(&kc, ch), dx,
                    accumulate, dres, dres_accumulate);
    }
    free(part), free(stat);
    return CNN_OK;
}

cnn_status cnn_cpu_op_scale_shift(cnn_backend *be, int64_t m, int c, const void *xv, const float *scale,
                                  const float *shift, const void *residual, bool relu, void *yv) {
    const float *x = xv, *res = residual; /* (M, C) */
    float *y = yv;                        /* (M, C) */
    CNN_ASSERT(m >= 0 && c > 0);
#pragma omp parallel for num_threads(cnn_cpu_threads(be)) schedule(static)
    for (int64_t r = 0; r < m; r++)
        for (int j = 0; j < c; j++) {
            float v = x[r * c + j];
            if (scale) v = v * scale[j];
            if (shift) v = v + shift[j];
            if (res) v = v + res[r * c + j];
            if (relu) v = v < 0 ? 0.0f : v;
            y[r * c + j] = v;
        }
    return CNN_OK;
}
