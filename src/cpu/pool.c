/* pool.c — 2-D pooling over NHWC tensors: max, average, adaptive average (PyTorch's semantics).
 *
 * Windows (floor mode): output (p, q) covers rows [p*sh - ph, p*sh - ph + R) clipped to the input; the
 * padding never wins a max and counts in the average's divisor:
 *     max       the first maximum in (r, s) scan order; a NaN wins and propagates (PyTorch's
 *               `val > max || isnan(val)`, so the last NaN is the argmax)
 *     avg       sum / (R*S)   (count_include_pad = true; in floor mode a window never passes the padding)
 *     adaptive  bins [floor(p*H/P), ceil((p+1)*H/P)), divisor = the bin's size
 * Backward scatters dy into dx: max to the argmax (recomputed from x), averages spread dy / divisor over the
 * window. Overlapping windows accumulate in (p, q) order. Work is split over (n, 16-channel blocks), which
 * own disjoint parts of dx, so results do not depend on the thread count.
 */
#include "cpu/cpu.h"

#include <math.h>
#include <string.h>

#define CB 16 /* channels per block */

typedef struct window {
    int h0, h1, w0, w1; /* clipped to the input */
    float divisor;
} window;

static window pool_window(const cnn_pool2d *pl, int p, int q) {
    window wd;
    if (pl->kind == CNN_POOL_ADAPTIVE_AVG) {
        wd.h0 = (int)((int64_t)p * pl->h / pl->p);
        wd.h1 = (int)(((int64_t)(p + 1) * pl->h + pl->p - 1) / pl->p);
        wd.w0 = (int)((int64_t)q * pl->w / pl->q);
        wd.w1 = (int)(((int64_t)(q + 1) * pl->w + pl->q - 1) / pl->q);
        wd.divisor = (float)((wd.h1 - wd.h0) * (wd.w1 - wd.w0));
        return wd;
    }
    int hs = p * pl->stride_h - pl->pad_h, ws = q * pl->stride_w - pl->pad_w;
    wd.h0 = hs < 0 ? 0 : hs;
    wd.h1 = hs + pl->r < pl->h ? hs + pl->r : pl->h;
    wd.w0 = ws < 0 ? 0 : ws;
    wd.w1 = ws + pl->s < pl->w ? ws + pl->s : pl->w;
    wd.divisor = (float)(pl->r * pl->s);
    return wd;
}

static void check_pool(const cnn_pool2d *pl) {
    CNN_ASSERT(pl->n > 0 && pl->c > 0 && pl->h > 0 && pl->w > 0 && pl->p > 0 && pl->q > 0);
    if (pl->kind == CNN_POOL_ADAPTIVE_AVG) return;
    CNN_ASSERT(pl->kind == CNN_POOL_MAX || pl->kind == CNN_POOL_AVG);
    CNN_ASSERT(pl->r > 0 && pl->s > 0 && pl->stride_h > 0 && pl->stride_w > 0);
    CNN_ASSERT(pl->pad_h >= 0 && pl->pad_h <= pl->r / 2 && pl->pad_w >= 0 && pl->pad_w <= pl->s / 2);
    CNN_ASSERT(pl->p == (pl->h + 2 * pl->pad_h - pl->r) / pl->stride_h + 1);
    CNN_ASSERT(pl->q == (pl->w + 2 * pl->pad_w - pl->s) / pl->stride_w + 1);
}

cnn_status cnn_cpu_op_pool2d_forward(cnn_backend *be, const cnn_pool2d *pl, const void *xv, void *yv) {
    check_pool(pl);
    const float *x = xv; /* (N, H, W, C) */
    float *y = yv;       /* (N, P, Q, C) */
    const int C = pl->c, H = pl->h, W = pl->w, P = pl->p, Q = pl->q;
#pragma omp parallel for num_threads(cnn_cpu_threads(be)) schedule(static)
    for (int64_t np = 0; np < (int64_t)pl->n * P; np++) {
        int64_t n = np / P;
        int p = (int)(np % P);
        for (int q = 0; q < Q; q++) {
            window wd = pool_window(pl, p, q);
            float *yp = y + ((n * P + p) * Q + q) * C;
            for (int c0 = 0; c0 < C; c0 += CB) {
                int cb = C - c0 < CB ? C - c0 : CB;
                if (pl->kind == CNN_POOL_MAX) {
                    float mx[CB];
                    for (int c = 0; c < cb; c++) mx[c] = -INFINITY;
                    for (int h = wd.h0; h < wd.h1; h++)
                        for (int w = wd.w0; w < wd.w1; w++) {
                            const float *xp = x + ((n * H + h) * W + w) * C + c0;
                            /* a select, not a branch (x != x is NaN), with a constant trip count when the block is
                             * full: the compiler vectorises it */
                            if (cb == CB)
                                for (int c = 0; c < CB; c++) mx[c] = ((xp[c] > mx[c]) | (xp[c] != xp[c])) ? xp[c] : mx[c];
                            else
                                for (int c = 0; c < cb; c++) mx[c] = ((xp[c] > mx[c]) | (xp[c] != xp[c])) ? xp[c] : mx[c];
                        }
                    for (int c = 0; c < cb; c++) yp[c0 + c] = mx[c];
                } else {
                    double sum[CB] = {0};
                    for (int h = wd.h0; h < wd.h1; h++)
                        for (int w = wd.w0; w < wd.w1; w++) {
                            const float *xp = x + ((n * H + h) * W + w) * C + c0;
                            for (int c = 0; c < cb; c++) sum[c] += xp[c];
                        }
                    for (int c = 0; c < cb; c++) yp[c0 + c] = (float)(sum[c] / wd.divisor);
                }
            }
        }
    }
    return CNN_OK;
}

cnn_status cnn_cpu_op_pool2d_backward(cnn_backend *be, const cnn_pool2d *pl, const void *xv, const void *yv,
                                      const void *dyv, void *dxv, bool accumulate) {
    check_pool(pl);
    CNN_ASSERT(!pl->relu || pl->kind == CNN_POOL_MAX);
    const float *x = xv, *dy = dyv; /* x (N, H, W, C), dy (N, P, Q, C) */
    float *dx = dxv;                /* (N, H, W, C) */
    const int C = pl->c, H = pl->h, W = pl->w, P = pl->p, Q = pl->q;
    const int nblk = (C + CB - 1) / CB;
#pragma omp parallel for num_threads(cnn_cpu_threads(be)) schedule(static)
    for (int64_t task = 0; task < (int64_t)pl->n * nblk; task++) {
        int64_t n = task / nblk;
        int c0 = (int)(task % nblk) * CB, cb = C - c0 < CB ? C - c0 : CB;
        if (!accumulate)
            for (int64_t pix = 0; pix < (int64_t)H * W; pix++) memset(dx + (n * H * W + pix) * C + c0, 0, (size_t)cb * sizeof(float));
        for (int p = 0; p < P; p++) {
            for (int q = 0; q < Q; q++) {
                window wd = pool_window(pl, p, q);
                const float *g = dy + ((n * P + p) * Q + q) * C + c0;
                if (pl->kind == CNN_POOL_MAX) {
                    float mx[CB];
                    int64_t arg[CB];
                    for (int c = 0; c < cb; c++) mx[c] = -INFINITY, arg[c] = ((n * H + wd.h0) * W + wd.w0) * C + c0 + c;
                    for (int h = wd.h0; h < wd.h1; h++)
                        for (int w = wd.w0; w < wd.w1; w++) {
                            int64_t base = ((n * H + h) * W + w) * C + c0;
                            for (int c = 0; c < cb; c++)
                                if (x[base + c] > mx[c] || isnan(x[base + c])) mx[c] = x[base + c], arg[c] = base + c;
                        }
                    for (int c = 0; c < cb; c++) /* the ReLU before the pool: its output here is the maximum */
                        if (!pl->relu || mx[c] > 0.0f) dx[arg[c]] += g[c];
                } else {
                    for (int h = wd.h0; h < wd.h1; h++)
                        for (int w = wd.w0; w < wd.w1; w++) {
                            float *dp = dx + ((n * H + h) * W + w) * C + c0;
                            for (int c = 0; c < cb; c++) dp[c] += g[c] / wd.divisor;
                        }
                }
            }
        }
    }
    CNN_ASSERT(!pl->dx_sum || !accumulate);
    return pl->dx_sum ? cnn_cpu_op_channel_sum(be, (int64_t)pl->n * H * W, C, dx, pl->dx_sum) : CNN_OK;
}
