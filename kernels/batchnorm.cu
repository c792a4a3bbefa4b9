/* batchnorm.cu -- per-channel reductions over an (M, C) view of an NHWC tensor and the kernels built on them:
 * channel_sum (bias gradients), BatchNorm training forward (two-pass mean then centred variance) and backward,
 * and the per-channel scale/shift (+ residual, + ReLU) of eval-mode BN.
 *
 * Reductions are deterministic two-level sums in double, no atomics: chan_partial (grid C/32 x chunks, block
 * 32 x 8) sums a fixed chunk of rows per block in a fixed order into partial[chunk][c]; a finalize kernel (one
 * thread per channel) adds the chunks in order. Double as the CPU backend: BN backward over few rows per channel
 * cancels almost completely, and a float32 sum would lose the result's leading digits. Specialisation: ACT.
 */
#include "common.cuh"
#include "params.cuh"

#define RED_TX 32 /* channels per block */
#define RED_TY 8  /* row lanes per block */

/* mode 0: P0 = sum x;  mode 1: P0 = sum (x - mean)^2;  mode 2: P0 = sum dy, P1 = sum dy * (x - mean) * invstd */
extern "C" __global__ void chan_partial(const red_args a) {
    pdl_enter();
    __shared__ double sh0[RED_TY][RED_TX + 1], sh1[RED_TY][RED_TX + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c = blockIdx.x * RED_TX + tx;
    const long long r0 = (long long)blockIdx.y * a.rows_per_chunk;
    long long r1 = r0 + a.rows_per_chunk;
    if (r1 > a.m) r1 = a.m;
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
                double g = act_load(dy, r * a.c + c);
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

__device__ __forceinline__ double chunk_sum(const red_args &a, int which, int c) {
    double t = 0.0;
    const double *p = a.partial + (long long)which * a.chunks * a.c;
    for (int k = 0; k < a.chunks; k++) t += p[(long long)k * a.c + c];
    return t;
}

/* channel_sum: fout[c] = sum of the chunks (mode 0 partials) */
extern "C" __global__ void chan_sum_finalize(const red_args a) {
    pdl_enter();
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < a.c) a.fout[c] = (float)chunk_sum(a, 0, c);
}

/* mean[c] = sum x / M (mode 0 partials) */
extern "C" __global__ void bn_mean_finalize(const red_args a) {
    pdl_enter();
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < a.c) a.mean[c] = (float)(chunk_sum(a, 0, c) / (double)a.m);
}

/* From the mode 1 partials: biased variance for normalisation, invstd = 1/sqrt(var + eps); running statistics
 * (1-momentum)*old + momentum*batch with the unbiased variance var*M/(M-1). */
extern "C" __global__ void bn_var_finalize(const red_args a) {
    pdl_enter();
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= a.c) return;
    double var = chunk_sum(a, 0, c) / (double)a.m, mom = a.momentum;
    a.invstd[c] = (float)(1.0 / sqrt(var + (double)a.eps));
    double unbiased = var * (double)a.m / (double)(a.m - 1); /* the launcher ensures M >= 2 */
    a.running_mean[c] = (float)(mom * (double)a.mean[c] + (1.0 - mom) * (double)a.running_mean[c]);
    a.running_var[c] = (float)(mom * unbiased + (1.0 - mom) * (double)a.running_var[c]);
}

/* From the mode 2 partials: dbeta = sum dy, dgamma = sum dy*xhat, and the coefficients of dx in double. */
extern "C" __global__ void bn_bwd_finalize(const red_args a) {
    pdl_enter();
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= a.c) return;
    double sdy = chunk_sum(a, 0, c), sdyx = chunk_sum(a, 1, c);
    a.coef[c] = (double)a.gamma[c] * (double)a.invstd[c];
    a.coef[a.c + c] = sdy / (double)a.m;
    a.coef[2 * a.c + c] = sdyx / (double)a.m;
    if (a.dbeta) a.dbeta[c] = (float)sdy;
    if (a.dgamma) a.dgamma[c] = (float)sdyx;
}

/* Elementwise over (M, C): each thread takes 4 consecutive elements per grid-stride step, channel = i % C. */
#define FOR_MC(a, i, c)                                                                                      \
    for (long long i = GRID_TID * 4, total_ = (a).m * (a).c; i < total_; i += GRID_STRIDE * 4)               \
        for (int j_ = 0, c = (int)(i % (a).c); j_ < 4 && i + j_ < total_; j_++, c = c + 1 == (a).c ? 0 : c + 1)

/* y = (x - mean) * invstd * gamma + beta */
extern "C" __global__ void bn_apply(const red_args a) {
    pdl_enter();
    const act_t *x = (const act_t *)a.x;
    act_t *y = (act_t *)a.out;
    FOR_MC(a, i, c) {
        long long e = i + j_;
        float v = (act_load(x, e) - a.mean[c]) * a.invstd[c] * a.gamma[c] + a.beta[c];
        act_store(y, e, v);
    }
}

/* dx (+)= gamma*invstd * (dy - mean dy - xhat * mean dy*xhat), in double: for small M the bracket cancels
 * almost completely and float32 would lose the result's leading digits (the CPU backend computes the same way) */
extern "C" __global__ void bn_bwd_apply(const red_args a) {
    pdl_enter();
    const act_t *x = (const act_t *)a.x, *dy = (const act_t *)a.dy;
    act_t *dx = (act_t *)a.out;
    FOR_MC(a, i, c) {
        long long e = i + j_;
        double xh = ((double)act_load(x, e) - (double)a.mean[c]) * (double)a.invstd[c];
        double v = a.coef[c] * ((double)act_load(dy, e) - a.coef[a.c + c] - xh * a.coef[2 * a.c + c]);
        if (a.accumulate) v += (double)act_load(dx, e);
        act_store(dx, e, (float)v);
    }
}

/* y = relu?(x * scale + shift + residual); scale NULL = 1, shift NULL = 0, residual NULL = none */
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
