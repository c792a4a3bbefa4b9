/* linear.c — fully connected layers through the packed GEMM.
 *
 *     forward   y (N, OUT) = x (N, IN) · w (OUT, IN)^T + bias          (bias NULL: none)
 *     backward  dx (N, IN) (+)= dy · w,   dw (OUT, IN) = dy^T · x,   dbias (OUT) = sum over n of dy
 * dx, dw and dbias may each be NULL (skipped). The bias rides the GEMM epilogue as a per-column shift.
 */
#include "cpu/cpu.h"

/* With choose_n (backend.h), launches of choose_n rows: the GEMM's schedule depends on its row count (gemm.c), as
 * the convolutions' (conv2d.c, launches_of). Returns the launches; *one is each one's problem. */
static int launches_of(const cnn_linear *ln, cnn_linear *one) {
    CNN_ASSERT(ln->n > 0 && ln->in > 0 && ln->out > 0);
    *one = *ln;
    one->choose_n = one->choice_n = 0;
    if (ln->choose_n <= 0 || ln->choose_n >= ln->n) return 1;
    CNN_ASSERT(ln->n % ln->choose_n == 0);
    one->n = ln->choose_n;
    return ln->n / ln->choose_n;
}

static cnn_status linear_forward(cnn_backend *be, const cnn_linear *ln, const float *x, const void *w,
                                 const float *bias, float *y) {
    cnn_cpu_mat a = {.p = x, .rs = ln->in, .cs = 1};   /* (N, IN)             */
    cnn_cpu_mat b = {.p = w, .rs = 1, .cs = ln->in};   /* B(i, o) = w[o, i]   */
    cnn_cpu_out out = {.p = y, .gh = 1, .gw = 1, .sn = ln->out, .shift = bias};
    return cnn_cpu_gemm(cnn_cpu_threads(be), ln->n, ln->out, ln->in, &a, &b, &out);
}

static cnn_status linear_backward(cnn_backend *be, const cnn_linear *ln, const float *x, const void *w,
                                  const float *dy, float *dx, bool accumulate, float *dw, float *dbias) {
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

cnn_status cnn_cpu_op_linear_forward(cnn_backend *be, const cnn_linear *ln, const void *x, const void *w,
                                     const float *bias, void *y) {
    cnn_linear one;
    const int runs = launches_of(ln, &one);
    for (int j = 0; j < runs; j++)
        CNN_TRY(linear_forward(be, &one, (const float *)x + (int64_t)j * one.n * one.in, w, bias,
                               (float *)y + (int64_t)j * one.n * one.out));
    return CNN_OK;
}

/* with choose_n, each slice's dw at dw + j * cnn_sum_rows(OUT * IN) and dbias at dbias + j * cnn_sum_rows(OUT) */
cnn_status cnn_cpu_op_linear_backward(cnn_backend *be, const cnn_linear *ln, const void *x, const void *w,
                                      const void *dy, void *dx, bool accumulate, float *dw, float *dbias) {
    cnn_linear one;
    const int runs = launches_of(ln, &one);
    const int64_t wrows = cnn_sum_rows((int64_t)one.out * one.in), brows = cnn_sum_rows(one.out);
    const int64_t xs = (int64_t)one.n * one.in, ys = (int64_t)one.n * one.out;
    for (int j = 0; j < runs; j++)
        CNN_TRY(linear_backward(be, &one, (const float *)x + j * xs, w, (const float *)dy + j * ys,
                                dx ? (float *)dx + j * xs : NULL, accumulate, dw ? dw + j * wrows : NULL,
                                dbias ? dbias + j * brows : NULL));
    return CNN_OK;
}
