/* loss.cu -- softmax cross-entropy with label smoothing, forward and backward in one pass.
 *     t_j = (1 - eps) [j == label] + eps / classes
 *     row loss = logsumexp(x) - sum_j t_j x_j          (= -sum_j t_j log_softmax_j, since sum_j t_j = 1)
 *     loss = mean over rows;  dlogits_j = (softmax_j - t_j) * grad_scale / n   (dscale = grad_scale / n)
 * xent_rows: one block per row, fixed-order block reductions; xent_mean: one block adds the row losses in
 * order (double). A label outside [0, classes) is never used as an index: its row loss is NaN (so the mean
 * loss flags it) and its dlogits row is 0. Specialisation: ACT only.
 */
#include "common.cuh"
#include "params.cuh"

extern "C" __global__ void xent_rows(const xent_args a) {
    pdl_enter();
    __shared__ float sh[32];
    const int row = blockIdx.x;
    const act_t *x = (const act_t *)a.logits + (long long)row * a.classes;
    const int label = a.labels[row];
    const bool valid = label >= 0 && label < a.classes;

    float mx = -CNN_INF;
    for (int j = threadIdx.x; j < a.classes; j += blockDim.x) mx = fmaxf(mx, act_load(x, j));
    mx = block_max(mx, sh);

    float se = 0.0f, sx = 0.0f;
    for (int j = threadIdx.x; j < a.classes; j += blockDim.x) {
        float v = act_load(x, j);
        se += expf(v - mx);
        sx += v;
    }
    se = block_sum(se, sh);
    sx = block_sum(sx, sh);
    const float lse = mx + logf(se);
    const float off = a.smoothing / (float)a.classes;
    const float on = 1.0f - a.smoothing;

    if (threadIdx.x == 0) {
        float xl = valid ? act_load(x, label) : 0.0f;
        a.row_loss[row] = valid ? lse - (on * xl + off * sx) : __int_as_float(0x7fc00000);
    }
    if (a.dlogits) {
        act_t *d = (act_t *)a.dlogits + (long long)row * a.classes;
        for (int j = threadIdx.x; j < a.classes; j += blockDim.x) {
            float g = 0.0f;
            if (valid) {
                float sm = expf(act_load(x, j) - mx) / se;
                float t = (j == label ? on : 0.0f) + off;
                g = (sm - t) * a.dscale;
            }
            act_store(d, j, g);
        }
    }
}

extern "C" __global__ void xent_mean(const xent_args a) {
    pdl_enter();
    __shared__ double sh[32];
    double s = 0.0;
    for (int i = threadIdx.x; i < a.n; i += blockDim.x) s += (double)a.row_loss[i];
    s = block_sum_d(s, sh);
    if (threadIdx.x == 0) a.loss[0] = (float)(s / (double)a.n);
}
