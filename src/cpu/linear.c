/* linear.c — fully connected layers through the packed GEMM.
 *
 *     forward   y (N, OUT) = x (N, IN) · w (OUT, IN)^T + bias          (bias NULL: none)
 *     backward  dx (N, IN) (+)= dy · w,   dw (OUT, IN) = dy^T · x,   dbias (OUT) = sum over n of dy
 * dx, dw and dbias may each be NULL (skipped). The bias rides the GEMM epilogue as a per-column shift.
 */
#include "cpu/cpu.h"

cnn_status cnn_cpu_op_linear_forward(cnn_backend *be, const cnn_linear *ln, const void *x, const void *w,
                                     const float *bias, void *y) {
    CNN_ASSERT(ln->n > 0 && ln->in > 0 && ln->out > 0);
    cnn_cpu_mat a = {.p = x, .rs = ln->in, .cs = 1};   /* (N, IN)             */
    cnn_cpu_mat b = {.p = w, .rs = 1, .cs = ln->in};   /* B(i, o) = w[o, i]   */
    cnn_cpu_out out = {.p = y, .gh = 1, .gw = 1, .sn = ln->out, .shift = bias};
    return cnn_cpu_gemm(cnn_cpu_threads(be), ln->n, ln->out, ln->in, &a, &b, &out);
}

cnn_status cnn_cpu_op_linear_backward(cnn_backend *be, const cnn_linear *ln, const void *x, const void *w,
                                      const void *dy, void *dx, bool accumulate, float *dw, float *dbias) {
    CNN_ASSERT(ln->n > 0 && ln->in > 0 && ln->out > 0);
    const int threads = cnn_cpu_threads(be);
    if (dx) {
        cnn_cpu_mat a = {.p = dy, .rs = ln->out, .cs = 1}; /* (N, OUT)  */
        cnn_cpu_mat b = {.p = w, .rs = ln->in, .cs = 1};   /* (OUT, IN) */
        cnn_cpu_out out = {.p = dx, .gh = 1, .gw = 1, .sn = ln->in, .accumulate = accumulate};
        CNN_TRY(cnn_cpu_gemm(threads, ln->n, ln->in, ln->out, &a, &b, &out));
    }
    if (dw) {
        cnn_cpu_mat a = {.p = dy, .rs = 1, .cs = ln->out}; /* A(o, n) = dy[n, o] */
        cnn_cpu_mat b = {.p = x, .rs = ln->in, .cs = 1};   /* (N, IN)            */
        cnn_cpu_out out = {.p = dw, .gh = 1, .gw = 1, .sn = ln->in};
        CNN_TRY(cnn_cpu_gemm(threads, ln->out, ln->in, ln->n, &a, &b, &out));
    }
    if (dbias) CNN_TRY(cnn_cpu_channel_sum(threads, ln->n, ln->out, dy, dbias));
    return CNN_OK;
}
