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
 * depend on the thread count.
 */
#include "cpu/cpu.h"

#include <math.h>
#include <stdlib.h>

#define CHUNK CNN_CPU_REDUCE_CHUNK

static int64_t n_chunks(int64_t m) { return (m + CHUNK - 1) / CHUNK; }

/* total[c] = sum over chunks (in order) of part[chunk][c] */
static void reduce_chunks(int threads, const double *part, int64_t nch, int c, double *total) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int j = 0; j < c; j++) {
        double t = 0;
        for (int64_t ch = 0; ch < nch; ch++) t += part[ch * c + j];
        total[j] = t;
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
    int64_t nch = n_chunks(M);
    double *part = malloc((size_t)nch * C * sizeof(double));
    double *stat = malloc((size_t)4 * C * sizeof(double));
    double *coef = malloc((size_t)2 * C * sizeof(double));
    if (!part || !stat || !coef) {
        free(part), free(stat), free(coef);
        return cnn_fail(CNN_E_OOM, "out of host memory for batch norm statistics (%lld x %d)", (long long)nch, C);
    }
    double *mean = stat, *var = stat + C;
    /* pass 1: mean */
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t ch = 0; ch < nch; ch++) {
        double *pp = part + ch * C;
        for (int j = 0; j < C; j++) pp[j] = 0;
        int64_t r1 = (ch + 1) * CHUNK < M ? (ch + 1) * CHUNK : M;
        for (int64_t r = ch * CHUNK; r < r1; r++)
            for (int j = 0; j < C; j++) pp[j] += x[r * C + j];
    }
    reduce_chunks(threads, part, nch, C, mean);
    for (int j = 0; j < C; j++) mean[j] /= (double)M;
    /* pass 2: biased variance around the mean */
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t ch = 0; ch < nch; ch++) {
        double *pp = part + ch * C;
        for (int j = 0; j < C; j++) pp[j] = 0;
        int64_t r1 = (ch + 1) * CHUNK < M ? (ch + 1) * CHUNK : M;
        for (int64_t r = ch * CHUNK; r < r1; r++)
            for (int j = 0; j < C; j++) {
                double d = (double)x[r * C + j] - mean[j];
                pp[j] += d * d;
            }
    }
    reduce_chunks(threads, part, nch, C, var);
    double *a = coef, *b = coef + C;
    const double mom = bn->momentum;
    for (int j = 0; j < C; j++) {
        var[j] /= (double)M;
        double invstd = 1.0 / sqrt(var[j] + (double)bn->eps);
        save_mean[j] = (float)mean[j];
        save_invstd[j] = (float)invstd;
        running_mean[j] = (float)(mom * mean[j] + (1.0 - mom) * running_mean[j]);
        running_var[j] = (float)(mom * var[j] * (double)M / (double)(M - 1) + (1.0 - mom) * running_var[j]);
        /* y = (x - mean) * a + b with a = invstd * gamma, in double: a large mean cancels exactly */
        a[j] = invstd * (gamma ? gamma[j] : 1.0);
        b[j] = beta ? beta[j] : 0.0;
    }
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < M; r++)
        for (int j = 0; j < C; j++) {
            double v = ((double)x[r * C + j] - mean[j]) * a[j] + b[j] + (res ? (double)res[r * C + j] : 0.0);
            y[r * C + j] = relu && v < 0 ? 0.0f : (float)v;
        }
    free(part), free(stat), free(coef);
    return CNN_OK;
}

/* what the backward reads to mask the ReLU: y, or without it x and the saved statistics (the pre-activation) */
typedef struct bn_mask {
    bool relu;
    const float *y, *x, *mean, *invstd, *gamma, *beta;
    int c;
} bn_mask;

/* the gradient reaching the BN's output: dy, where the ReLU after it passed */
static inline double bn_grad(const float *dy, const bn_mask *mk, int64_t e) {
    if (!mk->relu) return dy[e];
    if (mk->y) return mk->y[e] > 0.0f ? (double)dy[e] : 0.0;
    const int j = (int)(e % mk->c);
    const double pre = ((double)mk->x[e] - mk->mean[j]) * mk->invstd[j] * (mk->gamma ? mk->gamma[j] : 1.0) +
                       (mk->beta ? mk->beta[j] : 0.0);
    return pre > 0.0 ? (double)dy[e] : 0.0;
}

cnn_status cnn_cpu_op_bn_backward(cnn_backend *be, const cnn_bn *bn, const void *xv, const void *yv, const void *dyv,
                                  const float *gamma, const float *beta, const float *save_mean,
                                  const float *save_invstd, bool relu, void *dxv, bool accumulate, void *dresv,
                                  bool dres_accumulate, float *dgamma, float *dbeta) {
    const int threads = cnn_cpu_threads(be);
    const int64_t M = bn->m;
    const int C = bn->c;
    const float *x = xv, *dy = dyv; /* (M, C) */
    float *dx = dxv, *dres = dresv; /* (M, C) */
    CNN_ASSERT(M > 0 && C > 0);
    const bn_mask mk = {.relu = relu, .y = yv, .x = x, .mean = save_mean, .invstd = save_invstd, .gamma = gamma,
                        .beta = beta, .c = C};
    int64_t nch = n_chunks(M);
    double *part = malloc((size_t)nch * 2 * C * sizeof(double));
    double *stat = malloc((size_t)4 * C * sizeof(double));
    if (!part || !stat) {
        free(part), free(stat);
        return cnn_fail(CNN_E_OOM, "out of host memory for batch norm backward (%lld x %d)", (long long)nch, C);
    }
    double *sum_dy = stat, *sum_dyx = stat + C, *k_scale = stat + 2 * C, *k_proj = stat + 3 * C;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t ch = 0; ch < nch; ch++) {
        double *p0 = part + ch * 2 * C, *p1 = p0 + C;
        for (int j = 0; j < C; j++) p0[j] = p1[j] = 0;
        int64_t r1 = (ch + 1) * CHUNK < M ? (ch + 1) * CHUNK : M;
        for (int64_t r = ch * CHUNK; r < r1; r++)
            for (int j = 0; j < C; j++) {
                double g = bn_grad(dy, &mk, r * C + j);
                p0[j] += g;
                p1[j] += g * (((double)x[r * C + j] - save_mean[j]) * save_invstd[j]);
            }
    }
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int j = 0; j < C; j++) {
        double t0 = 0, t1 = 0;
        for (int64_t ch = 0; ch < nch; ch++) t0 += part[ch * 2 * C + j], t1 += part[ch * 2 * C + C + j];
        sum_dy[j] = t0;
        sum_dyx[j] = t1;
    }
    for (int j = 0; j < C; j++) {
        if (dbeta) dbeta[j] = (float)sum_dy[j];
        if (dgamma) dgamma[j] = (float)sum_dyx[j];
        k_scale[j] = (gamma ? gamma[j] : 1.0) * save_invstd[j];
        k_proj[j] = sum_dyx[j] / (double)M;
        sum_dy[j] /= (double)M; /* now the mean of dy */
    }
    if (dx) {
        /* dx = gamma*invstd * (dy - mean(dy) - xhat * mean(dy*xhat)) */
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int64_t r = 0; r < M; r++)
            for (int j = 0; j < C; j++) {
                double xhat = ((double)x[r * C + j] - save_mean[j]) * save_invstd[j];
                double g = k_scale[j] * (bn_grad(dy, &mk, r * C + j) - sum_dy[j] - xhat * k_proj[j]);
                dx[r * C + j] = accumulate ? (float)((double)dx[r * C + j] + g) : (float)g;
            }
    }
    if (dres) {
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int64_t r = 0; r < M; r++)
            for (int j = 0; j < C; j++) {
                double g = bn_grad(dy, &mk, r * C + j);
                dres[r * C + j] = dres_accumulate ? (float)((double)dres[r * C + j] + g) : (float)g;
            }
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
