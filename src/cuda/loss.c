/* loss.c -- launcher of kernels/loss.cu: softmax cross-entropy with label smoothing, the mean loss into one
 * device float and (optionally) dlogits = (softmax - target) * grad_scale / n. One CTA per row, then one CTA adds
 * the row losses in order (deterministic). Labels are read on the device; one outside [0, classes) makes the
 * loss NaN (flagged, never an out-of-bounds read) and zeroes its dlogits row. */
#include "cuda/internal.h"

#include <stdio.h>

cnn_status cuda_xent_forward_backward(cnn_backend *be, const cnn_xent *xe, const void *logits,
                                      const int32_t *labels, float *loss, void *dlogits) {
    cuda_be *cb = cuda_impl(be);
    cuda_bind(cb);
    CNN_ASSERT(xe->n > 0 && xe->classes > 0 && logits && labels && loss);
    float gs = xe->grad_scale == 0.0f ? 1.0f : xe->grad_scale;
    xent_args a = {.n = xe->n, .classes = xe->classes, .smoothing = xe->label_smoothing, .dscale = gs / (float)xe->n,
                   .logits = logits, .labels = labels, .loss = loss, .dlogits = dlogits};
    void *ws;
    CNN_TRY(cuda_workspace(cb, (size_t)xe->n * sizeof(float), &ws));
    a.row_loss = ws;
    CUfunction f_rows, f_mean;
    CNN_TRY(cuda_kernel(cb, &cuda_family_loss, be->act_dtype, 0, XENT_ROWS, &f_rows));
    CNN_TRY(cuda_kernel(cb, &cuda_family_loss, be->act_dtype, 0, XENT_MEAN, &f_mean));
    char what[96];
    snprintf(what, sizeof what, "xent[%s] n%d classes %d", cuda_dtype_str(be->act_dtype), xe->n, xe->classes);
    int threads = xe->classes >= 256 ? 256 : xe->classes > 64 ? 128 : 32;
    CNN_TRY(cuda_launch(cb, f_rows, what, (unsigned)xe->n, 1, 1, (unsigned)threads, 1, &a));
    return cuda_launch(cb, f_mean, what, 1, 1, 1, 256, 1, &a);
}
