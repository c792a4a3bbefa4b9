/* linear.c -- fully connected layers as 1x1 convolutions: x (N, IN) is an NHWC tensor with H = W = 1 and
 * C = IN, w (OUT, IN) is a KRSC filter with R = S = 1. So forward is conv fprop with the bias as the epilogue's
 * shift, dx is conv dgrad, dw is conv wgrad (the reduction over the batch, split and deterministic), and dbias
 * is channel_sum over the rows of dy. Same kernels, same tile configs, same tests. choose_n and choice_n pass to
 * the convolution's (backend.h): one launch over a batch of slices, and a wgrad's row of sums per slice; dbias's
 * rows in one channel_sum_rows.
 */
#include "cuda/internal.h"

static cnn_conv2d as_conv(const cnn_linear *ln) {
    CNN_ASSERT(ln->n > 0 && ln->in > 0 && ln->out > 0);
    cnn_conv2d cv = {.n = ln->n, .c = ln->in, .h = 1, .w = 1, .k = ln->out, .r = 1, .s = 1, .stride_h = 1,
                     .stride_w = 1, .pad_h = 0, .pad_w = 0, .p = 1, .q = 1, .choose_n = ln->choose_n,
                     .choice_n = ln->choice_n};
    return cv;
}

cnn_status cuda_linear_forward(cnn_backend *be, const cnn_linear *ln, const void *x, const void *w,
                               const float *bias, void *y) {
    cnn_conv2d cv = as_conv(ln);
    cnn_epilogue ep = {.shift = bias};
    return cuda_conv2d_fprop(be, &cv, &ep, x, w, y);
}

cnn_status cuda_linear_backward(cnn_backend *be, const cnn_linear *ln, const void *x, const void *w, const void *dy,
                                void *dx, bool accumulate, float *dw, float *dbias) {
    cnn_conv2d cv = as_conv(ln);
    if (dw) CNN_TRY(cuda_conv2d_wgrad(be, &cv, x, dy, dw));
    if (dbias) {
        const int per = ln->choose_n > 0 && ln->choose_n < ln->n ? ln->choose_n : ln->n;
        CNN_ASSERT(ln->n % per == 0);
        CNN_TRY(cuda_channel_sum_rows(be, ln->n / per, ln->n, ln->out, dy, dbias, cnn_sum_rows(ln->out)));
    }
    if (dx) CNN_TRY(cuda_conv2d_dgrad(be, &cv, dy, w, dx, accumulate));
    return CNN_OK;
}
