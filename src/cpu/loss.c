/* loss.c — softmax cross-entropy with label smoothing, forward and backward in one pass.
 *
 * For logits z (N, CLASSES), labels y and smoothing eps, target t = (1 - eps) * onehot(y) + eps / CLASSES:
 *     loss   = mean over n of  -sum_j t_j * log_softmax(z)_j  =  lse - (1 - eps) * z_y - eps/CLASSES * sum_j z_j
 *     dlogits = (softmax(z) - t) / N * grad_scale               (grad_scale 0 means 1; the loss is unscaled)
 * with lse = max + log(sum exp(z - max)) in double. Per-sample losses are summed in sample order. A label
 * outside [0, CLASSES) is CNN_E_INVALID and nothing is written.
 */
#include "cpu/cpu.h"

#include <math.h>
#include <stdlib.h>

cnn_status cnn_cpu_op_xent_forward_backward(cnn_backend *be, const cnn_xent *xe, const void *logits,
                                            const int32_t *labels, float *loss, void *dlogits) {
    const int N = xe->n, K = xe->classes;
    const float *z = logits; /* (N, CLASSES) */
    float *dz = dlogits;     /* (N, CLASSES) or NULL */
    CNN_ASSERT(N > 0 && K > 0);
    for (int i = 0; i < N; i++)
        if (labels[i] < 0 || labels[i] >= K)
            return cnn_fail(CNN_E_INVALID, "label %d of sample %d is outside [0, %d)", (int)labels[i], i, K);
    double *per = malloc((size_t)N * sizeof(double));
    if (!per) return cnn_fail(CNN_E_OOM, "out of host memory for %d per-sample losses", N);
    const double eps = xe->label_smoothing, scale = (xe->grad_scale != 0 ? xe->grad_scale : 1.0) / N;
#pragma omp parallel for num_threads(cnn_cpu_threads(be)) schedule(static)
    for (int i = 0; i < N; i++) {
        const float *zi = z + (int64_t)i * K;
        double mx = -INFINITY, sz = 0;
        for (int j = 0; j < K; j++) {
            if (zi[j] > mx) mx = zi[j];
            sz += zi[j];
        }
        double se = 0;
        for (int j = 0; j < K; j++) se += exp((double)zi[j] - mx);
        double lse = mx + log(se);
        per[i] = lse - (1.0 - eps) * zi[labels[i]] - eps / K * sz;
        if (dz) {
            for (int j = 0; j < K; j++) {
                double t = eps / K + (j == labels[i] ? 1.0 - eps : 0.0);
                dz[(int64_t)i * K + j] = (float)((exp((double)zi[j] - lse) - t) * scale);
            }
        }
    }
    double total = 0;
    for (int i = 0; i < N; i++) total += per[i];
    *loss = (float)(total / N);
    free(per);
    return CNN_OK;
}
