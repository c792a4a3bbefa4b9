/* pointwise.c — elementwise ops over flat arrays of `count` floats, and flatten.
 *
 *     relu     y = max(x, 0) (NaN stays NaN);  backward dx (+)= y > 0 ? dy : 0 (PyTorch's threshold_backward
 *              on the output)
 *     add      y = a + b;                      pass_backward dx (+)= dy
 *     dropout  y = keep(i) ? x * 1/(1-p) : 0 with keep(i) = cnn_dropout_keep(seed, i, p) (backend.h), so the
 *              mask is a pure function of (seed, index), identical on every backend; backward reuses it
 *     flatten  NHWC (N, H, W, C) -> rows of C*H*W in NCHW order (index c*H*W + h*W + w), PyTorch's flatten
 * Every output element is written by one thread; the parallel loops are over elements or rows.
 */
#include "cpu/cpu.h"

#include <math.h>

cnn_status cnn_cpu_op_relu_forward(cnn_backend *be, int64_t count, const void *xv, void *yv) {
    CNN_ASSERT(count >= 0);
    const float *x = xv;
    float *y = yv;
#pragma omp parallel for num_threads(cnn_cpu_threads(be)) schedule(static)
    for (int64_t i = 0; i < count; i++) y[i] = x[i] < 0 ? 0.0f : x[i];
    return CNN_OK;
}

cnn_status cnn_cpu_op_relu_backward(cnn_backend *be, int64_t count, const void *yv, const void *dyv, void *dxv,
                                    bool accumulate) {
    CNN_ASSERT(count >= 0);
    const float *y = yv, *dy = dyv;
    float *dx = dxv;
    if (accumulate) {
#pragma omp parallel for num_threads(cnn_cpu_threads(be)) schedule(static)
        for (int64_t i = 0; i < count; i++) dx[i] = dx[i] + (y[i] > 0 ? dy[i] : 0.0f);
    } else {
#pragma omp parallel for num_threads(cnn_cpu_threads(be)) schedule(static)
        for (int64_t i = 0; i < count; i++) dx[i] = y[i] > 0 ? dy[i] : 0.0f;
    }
    return CNN_OK;
}

cnn_status cnn_cpu_op_add_forward(cnn_backend *be, int64_t count, const void *av, const void *bv, void *yv) {
    CNN_ASSERT(count >= 0);
    const float *a = av, *b = bv;
    float *y = yv;
#pragma omp parallel for num_threads(cnn_cpu_threads(be)) schedule(static)
    for (int64_t i = 0; i < count; i++) y[i] = a[i] + b[i];
    return CNN_OK;
}

cnn_status cnn_cpu_op_pass_backward(cnn_backend *be, int64_t count, const void *dyv, void *dxv, bool accumulate) {
    CNN_ASSERT(count >= 0);
    const float *dy = dyv;
    float *dx = dxv;
    if (accumulate) {
#pragma omp parallel for num_threads(cnn_cpu_threads(be)) schedule(static)
        for (int64_t i = 0; i < count; i++) dx[i] = dx[i] + dy[i];
    } else if (dx != dy) {
#pragma omp parallel for num_threads(cnn_cpu_threads(be)) schedule(static)
        for (int64_t i = 0; i < count; i++) dx[i] = dy[i];
    }
    return CNN_OK;
}

/* ---- dropout --------------------------------------------------------------------------------------------- */

/* dst[i] (+)= keep(i) ? src[i] * scale : 0. One Philox call serves 4 consecutive elements, exactly as
 * cnn_dropout_keep draws them (word i & 3 of counter i >> 2). */
static cnn_status dropout_apply(cnn_backend *be, int64_t count, float p, uint64_t seed, const float *src, float *dst,
                                bool accumulate) {
    CNN_ASSERT(count >= 0);
    if (!(p >= 0.0f && p <= 1.0f)) return cnn_fail(CNN_E_INVALID, "dropout probability %g is not in [0, 1]", (double)p);
    const float scale = p < 1.0f ? (float)(1.0 / (1.0 - (double)p)) : 0.0f;
    int64_t groups = (count + 3) / 4;
#pragma omp parallel for num_threads(cnn_cpu_threads(be)) schedule(static)
    for (int64_t g = 0; g < groups; g++) {
        uint32_t r[4];
        cnn_philox(seed, 0x64726f70ULL, (uint64_t)g, r);
        for (int t = 0; t < 4; t++) {
            int64_t i = 4 * g + t;
            if (i >= count) break;
            float v = cnn_u01(r[t]) >= p ? src[i] * scale : 0.0f;
            dst[i] = accumulate ? dst[i] + v : v;
        }
    }
    return CNN_OK;
}

cnn_status cnn_cpu_op_dropout_forward(cnn_backend *be, int64_t count, float p, uint64_t seed, const void *x, void *y) {
    return dropout_apply(be, count, p, seed, x, y, false);
}

cnn_status cnn_cpu_op_dropout_backward(cnn_backend *be, int64_t count, float p, uint64_t seed, const void *dy,
                                       void *dx, bool accumulate) {
    return dropout_apply(be, count, p, seed, dy, dx, accumulate);
}

/* ---- flatten --------------------------------------------------------------------------------------------- */

cnn_status cnn_cpu_op_flatten_forward(cnn_backend *be, cnn_shape s, const void *xv, void *yv) {
    const float *x = xv; /* (N, H, W, C) */
    float *y = yv;       /* (N, C*H*W) in (c, h, w) order */
    CNN_ASSERT(s.n >= 0 && s.c >= 0 && s.h >= 0 && s.w >= 0);
    const int64_t hw = (int64_t)s.h * s.w, chw = hw * s.c;
#pragma omp parallel for num_threads(cnn_cpu_threads(be)) schedule(static)
    for (int64_t n = 0; n < s.n; n++)
        for (int64_t pix = 0; pix < hw; pix++)
            for (int c = 0; c < s.c; c++) y[n * chw + c * hw + pix] = x[(n * hw + pix) * s.c + c];
    return CNN_OK;
}

cnn_status cnn_cpu_op_flatten_backward(cnn_backend *be, cnn_shape s, const void *dyv, void *dxv, bool accumulate) {
    const float *dy = dyv; /* (N, C*H*W) */
    float *dx = dxv;       /* (N, H, W, C) */
    const int64_t hw = (int64_t)s.h * s.w, chw = hw * s.c;
#pragma omp parallel for num_threads(cnn_cpu_threads(be)) schedule(static)
    for (int64_t n = 0; n < s.n; n++)
        for (int64_t pix = 0; pix < hw; pix++)
            for (int c = 0; c < s.c; c++) {
                float g = dy[n * chw + c * hw + pix];
                float *o = dx + (n * hw + pix) * s.c + c;
                *o = accumulate ? *o + g : g;
            }
    return CNN_OK;
}

/* ---- checks ---------------------------------------------------------------------------------------------- */

cnn_status cnn_cpu_op_count_nonfinite(cnn_backend *be, int64_t count, const float *x, int64_t *out) {
    CNN_ASSERT(count >= 0);
    int64_t bad = 0;
#pragma omp parallel for num_threads(cnn_cpu_threads(be)) schedule(static) reduction(+ : bad)
    for (int64_t i = 0; i < count; i++) bad += !isfinite(x[i]);
    *out = bad;
    return CNN_OK;
}

cnn_status cnn_cpu_op_tree_sum(cnn_backend *be, int shards, int64_t count, const float *parts, int64_t stride,
                               float *out) {
    CNN_ASSERT(shards >= 1 && shards <= 8 && (shards & (shards - 1)) == 0 && count >= 0 && stride >= count);
#pragma omp parallel for num_threads(cnn_cpu_threads(be)) schedule(static)
    for (int64_t i = 0; i < count; i++) {
        float t[8] = {0};
        for (int j = 0; j < shards; j++) t[j] = parts[j * stride + i];
        out[i] = cnn_cpu_tree_f(t, shards);
    }
    return CNN_OK;
}
