/* conv2d.c — 2-D convolution on the CPU: fprop / dgrad / wgrad, their plain references, and channel_sum.
 *
 * Layouts (backend.h): x (N, H, W, C), w (K, R, S, C), y (N, P, Q, K), all NHWC / KRSC.
 *     fprop:  y[n,p,q,k]  = sum_{r,s,c} x[n, p*sh - ph + r, q*sw - pw + s, c] * w[k,r,s,c], then the epilogue
 *     dgrad:  dx[n,h,w,c] = sum_{k,r,s : h = p*sh - ph + r, w = q*sw - pw + s} dy[n,p,q,k] * w[k,r,s,c]
 *     wgrad:  dw[k,r,s,c] = sum_{n,p,q} x[n, p*sh - ph + r, q*sw - pw + s, c] * dy[n,p,q,k]   (overwritten)
 *
 * Fast paths, all one packed GEMM (gemm.c) with implicit im2col operands:
 *     fprop  Y (NPQ, K)   = im2col(x) (NPQ, RSC) · W^T (RSC, K)    (1x1 stride-1 unpadded: x itself)
 *     dgrad  per stride phase (ph, pw): the dx pixels h = ph + i*sh, w = pw + j*sw see only the taps
 *            r = r0 + ti*sh with r0 = (ph + pad_h) mod sh, at p = i - ti + (ph + pad_h - r0)/sh; so each phase is
 *            a gather GEMM  dX_phase (N*gh*gw, C) = im2col'(dy) (.., th*tw*K) · W_phase (th*tw*K, C)
 *            and writes each dx element exactly once (no col2im scatter, no atomics, deterministic).
 *     wgrad  dW (K, RSC)  = dY^T (K, NPQ) · im2col(x) (NPQ, RSC)
 * A pair (two convolutions summed, backend.h) is the first GEMM into y and the second accumulated onto it.
 * References loop over the definitions with double accumulators, parallel over output elements only.
 */
#include "cpu/cpu.h"

#include <stdlib.h>
#include <string.h>

static void check_conv(const cnn_conv2d *cv) {
    CNN_ASSERT(cv->n > 0 && cv->c > 0 && cv->h > 0 && cv->w > 0 && cv->k > 0 && cv->r > 0 && cv->s > 0);
    CNN_ASSERT(cv->stride_h > 0 && cv->stride_w > 0 && cv->pad_h >= 0 && cv->pad_w >= 0);
    CNN_ASSERT(cv->h + 2 * cv->pad_h >= cv->r && cv->w + 2 * cv->pad_w >= cv->s);
    CNN_ASSERT(cv->p == (cv->h + 2 * cv->pad_h - cv->r) / cv->stride_h + 1);
    CNN_ASSERT(cv->q == (cv->w + 2 * cv->pad_w - cv->s) / cv->stride_w + 1);
    CNN_ASSERT(cv->p > 0 && cv->q > 0);
}

static bool is_pointwise(const cnn_conv2d *cv) {
    return cv->r == 1 && cv->s == 1 && cv->stride_h == 1 && cv->stride_w == 1 && cv->pad_h == 0 && cv->pad_w == 0;
}

/* The fprop im2col of x: rows (n, p, q), columns (r, s, c). */
static cnn_cpu_im2col fprop_im2col(const cnn_conv2d *cv, const float *x) {
    return (cnn_cpu_im2col){.x = x, .hs = cv->h, .ws = cv->w, .cs = cv->c, .gh = cv->p, .gw = cv->q,
                            .th = cv->r, .tw = cv->s, .ah = cv->stride_h, .bh = 1, .oh = -cv->pad_h,
                            .aw = cv->stride_w, .bw = 1, .ow = -cv->pad_w};
}

/* ---- fast paths ------------------------------------------------------------------------------------------ */

cnn_status cnn_cpu_conv2d_fprop(int threads, const cnn_conv2d *cv, const cnn_epilogue *ep, const float *x,
                                const float *w, float *y) {
    check_conv(cv);
    int64_t m = (int64_t)cv->n * cv->p * cv->q, rsc = (int64_t)cv->r * cv->s * cv->c;
    cnn_cpu_im2col g = fprop_im2col(cv, x);
    cnn_cpu_mat a = is_pointwise(cv) ? (cnn_cpu_mat){.p = x, .rs = cv->c, .cs = 1} : (cnn_cpu_mat){.g = &g};
    cnn_cpu_mat b = {.p = w, .rs = 1, .cs = rsc}; /* B(rsc, k) = w[k, rsc] */
    cnn_cpu_out out = {.p = y, .gh = 1, .gw = 1, .sn = cv->k};
    if (ep) {
        /* the residual is read only after the last K block, when y already holds partial sums */
        CNN_ASSERT(ep->residual != (const void *)y);
        out.scale = ep->scale;
        out.shift = ep->shift;
        out.residual = ep->residual;
        out.relu = ep->relu;
    }
    return cnn_cpu_gemm(threads, m, cv->k, rsc, &a, &b, &out);
}

/* Two convolutions with the same N, K, P, Q summed (backend.h, conv2d_fprop_pair): the first into y, the second
 * added to it by the GEMM's accumulate, with ep's shift and ReLU applied once after both. */
cnn_status cnn_cpu_conv2d_fprop_pair(int threads, const cnn_conv2d *cv, const cnn_conv2d *cv2, const cnn_epilogue *ep,
                                     const float *x, const float *w, const float *x2, const float *w2, float *y) {
    check_conv(cv);
    check_conv(cv2);
    CNN_ASSERT(cv->n == cv2->n && cv->k == cv2->k && cv->p == cv2->p && cv->q == cv2->q);
    CNN_ASSERT(!ep || (!ep->scale && !ep->residual));
    CNN_TRY(cnn_cpu_conv2d_fprop(threads, cv, NULL, x, w, y));
    int64_t m = (int64_t)cv2->n * cv2->p * cv2->q, rsc = (int64_t)cv2->r * cv2->s * cv2->c;
    cnn_cpu_im2col g = fprop_im2col(cv2, x2);
    cnn_cpu_mat a = is_pointwise(cv2) ? (cnn_cpu_mat){.p = x2, .rs = cv2->c, .cs = 1} : (cnn_cpu_mat){.g = &g};
    cnn_cpu_mat b = {.p = w2, .rs = 1, .cs = rsc};
    cnn_cpu_out out = {.p = y, .gh = 1, .gw = 1, .sn = cv2->k, .accumulate = true};
    if (ep) out.shift = ep->shift, out.relu = ep->relu;
    return cnn_cpu_gemm(threads, m, cv2->k, rsc, &a, &b, &out);
}

cnn_status cnn_cpu_conv2d_dgrad(int threads, const cnn_conv2d *cv, const float *dy, const float *w, float *dx,
                                bool accumulate) {
    check_conv(cv);
    const int N = cv->n, C = cv->c, H = cv->h, W = cv->w, K = cv->k, R = cv->r, S = cv->s;
    const int sh = cv->stride_h, sw = cv->stride_w;
    if (is_pointwise(cv)) {
        cnn_cpu_mat a = {.p = dy, .rs = K, .cs = 1}, b = {.p = w, .rs = C, .cs = 1};
        cnn_cpu_out out = {.p = dx, .gh = 1, .gw = 1, .sn = C, .accumulate = accumulate};
        return cnn_cpu_gemm(threads, (int64_t)N * H * W, C, K, &a, &b, &out);
    }
    /* the filter rearranged for one phase: rows (ti, tj, k), columns c; at most the size of w */
    float *wph = malloc((size_t)K * R * S * C * sizeof(float));
    if (!wph) return cnn_fail(CNN_E_OOM, "out of host memory for the dgrad filter (%d x %d x %d x %d)", K, R, S, C);
    cnn_status st = CNN_OK;
    for (int ph = 0; ph < sh && ph < H && st == CNN_OK; ph++) {
        for (int pw = 0; pw < sw && pw < W && st == CNN_OK; pw++) {
            int gh = (H - ph + sh - 1) / sh, gw = (W - pw + sw - 1) / sw;
            int r0 = (ph + cv->pad_h) % sh, s0 = (pw + cv->pad_w) % sw;
            int th = r0 < R ? (R - r0 + sh - 1) / sh : 0, tw = s0 < S ? (S - s0 + sw - 1) / sw : 0;
            for (int ti = 0; ti < th; ti++)
                for (int tj = 0; tj < tw; tj++)
                    for (int k = 0; k < K; k++)
                        memcpy(wph + (((int64_t)ti * tw + tj) * K + k) * C,
                               w + (((int64_t)k * R + r0 + ti * sh) * S + s0 + tj * sw) * C, (size_t)C * sizeof(float));
            cnn_cpu_im2col g = {.x = dy, .hs = cv->p, .ws = cv->q, .cs = K, .gh = gh, .gw = gw, .th = th, .tw = tw,
                                .ah = 1, .bh = -1, .oh = (ph + cv->pad_h - r0) / sh,
                                .aw = 1, .bw = -1, .ow = (pw + cv->pad_w - s0) / sw};
            cnn_cpu_mat a = {.g = &g}, b = {.p = wph, .rs = C, .cs = 1};
            cnn_cpu_out out = {.p = dx + ((int64_t)ph * W + pw) * C, .gh = gh, .gw = gw, .sn = (int64_t)H * W * C,
                               .si = (int64_t)sh * W * C, .sj = (int64_t)sw * C, .accumulate = accumulate};
            /* a phase without taps (e.g. 1x1 stride 2) gets K = 0: zeros, or unchanged when accumulating */
            st = cnn_cpu_gemm(threads, (int64_t)N * gh * gw, C, (int64_t)th * tw * K, &a, &b, &out);
        }
    }
    free(wph);
    return st;
}

cnn_status cnn_cpu_conv2d_wgrad(int threads, const cnn_conv2d *cv, const float *x, const float *dy, float *dw) {
    check_conv(cv);
    int64_t m = (int64_t)cv->n * cv->p * cv->q, rsc = (int64_t)cv->r * cv->s * cv->c;
    cnn_cpu_im2col g = fprop_im2col(cv, x);
    cnn_cpu_mat a = {.p = dy, .rs = 1, .cs = cv->k}; /* A(k, npq) = dy[npq, k] */
    cnn_cpu_mat b = is_pointwise(cv) ? (cnn_cpu_mat){.p = x, .rs = cv->c, .cs = 1} : (cnn_cpu_mat){.g = &g};
    cnn_cpu_out out = {.p = dw, .gh = 1, .gw = 1, .sn = rsc};
    return cnn_cpu_gemm(threads, cv->k, rsc, m, &a, &b, &out);
}

/* ---- references ------------------------------------------------------------------------------------------ */

void cnn_cpu_conv2d_fprop_ref(int threads, const cnn_conv2d *cv, const cnn_epilogue *ep, const float *x,
                              const float *w, float *y) {
    check_conv(cv);
    const int C = cv->c, H = cv->h, W = cv->w, K = cv->k, R = cv->r, S = cv->s, P = cv->p, Q = cv->q;
    const float *res = ep ? ep->residual : NULL;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t np = 0; np < (int64_t)cv->n * P; np++) {
        int64_t n = np / P;
        int p = (int)(np % P);
        for (int q = 0; q < Q; q++) {
            for (int k = 0; k < K; k++) {
                double acc = 0;
                for (int r = 0; r < R; r++) {
                    int h = p * cv->stride_h - cv->pad_h + r;
                    if (h < 0 || h >= H) continue;
                    for (int s = 0; s < S; s++) {
                        int x_w = q * cv->stride_w - cv->pad_w + s;
                        if (x_w < 0 || x_w >= W) continue;
                        const float *xp = x + ((n * H + h) * W + x_w) * C;
                        const float *wp = w + (((int64_t)k * R + r) * S + s) * C;
                        for (int c = 0; c < C; c++) acc += (double)xp[c] * wp[c];
                    }
                }
                int64_t o = ((n * P + p) * Q + q) * K + k;
                float v = (float)acc;
                if (ep) { /* the epilogue in the fast path's float order */
                    if (ep->scale) v = v * ep->scale[k];
                    if (ep->shift) v = v + ep->shift[k];
                    if (res) v = v + res[o];
                    if (ep->relu) v = v < 0 ? 0.0f : v;
                }
                y[o] = v;
            }
        }
    }
}

void cnn_cpu_conv2d_dgrad_ref(int threads, const cnn_conv2d *cv, const float *dy, const float *w, float *dx,
                              bool accumulate) {
    check_conv(cv);
    const int C = cv->c, H = cv->h, W = cv->w, K = cv->k, R = cv->r, S = cv->s, P = cv->p, Q = cv->q;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t nh = 0; nh < (int64_t)cv->n * H; nh++) {
        int64_t n = nh / H;
        int h = (int)(nh % H);
        for (int x_w = 0; x_w < W; x_w++) {
            for (int c = 0; c < C; c++) {
                double acc = 0;
                for (int r = 0; r < R; r++) {
                    int ph = h + cv->pad_h - r; /* = p * stride_h */
                    if (ph < 0 || ph % cv->stride_h) continue;
                    int p = ph / cv->stride_h;
                    if (p >= P) continue;
                    for (int s = 0; s < S; s++) {
                        int qw = x_w + cv->pad_w - s;
                        if (qw < 0 || qw % cv->stride_w) continue;
                        int q = qw / cv->stride_w;
                        if (q >= Q) continue;
                        const float *dyp = dy + ((n * P + p) * Q + q) * K;
                        for (int k = 0; k < K; k++) acc += (double)dyp[k] * w[(((int64_t)k * R + r) * S + s) * C + c];
                    }
                }
                float *o = dx + ((n * H + h) * W + x_w) * C + c;
                *o = accumulate ? (float)((double)*o + acc) : (float)acc;
            }
        }
    }
}

void cnn_cpu_conv2d_wgrad_ref(int threads, const cnn_conv2d *cv, const float *x, const float *dy, float *dw) {
    check_conv(cv);
    const int C = cv->c, H = cv->h, W = cv->w, K = cv->k, R = cv->r, S = cv->s, P = cv->p, Q = cv->q;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t kr = 0; kr < (int64_t)K * R; kr++) {
        int k = (int)(kr / R), r = (int)(kr % R);
        for (int s = 0; s < S; s++) {
            for (int c = 0; c < C; c++) {
                double acc = 0;
                for (int64_t n = 0; n < cv->n; n++) {
                    for (int p = 0; p < P; p++) {
                        int h = p * cv->stride_h - cv->pad_h + r;
                        if (h < 0 || h >= H) continue;
                        for (int q = 0; q < Q; q++) {
                            int x_w = q * cv->stride_w - cv->pad_w + s;
                            if (x_w < 0 || x_w >= W) continue;
                            acc += (double)x[((n * H + h) * W + x_w) * C + c] * dy[((n * P + p) * Q + q) * K + k];
                        }
                    }
                }
                dw[(((int64_t)k * R + r) * S + s) * C + c] = (float)acc;
            }
        }
    }
}

/* ---- channel sums ---------------------------------------------------------------------------------------- */

cnn_status cnn_cpu_channel_sum(int threads, int64_t m, int c, const float *v, float *out) {
    CNN_ASSERT(m >= 0 && c > 0);
    /* fixed chunks of rows, partial sums in double per chunk, then the chunks in order: the result does
     * not depend on the thread count. Partials for 64 chunks at a time live on the heap. */
    enum { GROUP = 64 };
    double *part = malloc((size_t)GROUP * c * sizeof(double));
    double *total = calloc((size_t)c, sizeof(double));
    if (!part || !total) {
        free(part);
        free(total);
        return cnn_fail(CNN_E_OOM, "out of host memory for a channel sum over %d channels", c);
    }
    int64_t nchunks = (m + CNN_CPU_REDUCE_CHUNK - 1) / CNN_CPU_REDUCE_CHUNK;
    for (int64_t g0 = 0; g0 < nchunks; g0 += GROUP) {
        int64_t g1 = g0 + GROUP < nchunks ? g0 + GROUP : nchunks;
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int64_t ch = g0; ch < g1; ch++) {
            double *pp = part + (ch - g0) * c;
            for (int j = 0; j < c; j++) pp[j] = 0;
            int64_t r1 = (ch + 1) * CNN_CPU_REDUCE_CHUNK < m ? (ch + 1) * CNN_CPU_REDUCE_CHUNK : m;
            for (int64_t r = ch * CNN_CPU_REDUCE_CHUNK; r < r1; r++)
                for (int j = 0; j < c; j++) pp[j] += v[r * c + j];
        }
        for (int64_t ch = g0; ch < g1; ch++)
            for (int j = 0; j < c; j++) total[j] += part[(ch - g0) * c + j];
    }
    for (int j = 0; j < c; j++) out[j] = (float)total[j];
    free(part);
    free(total);
    return CNN_OK;
}

/* ---- the table entries ----------------------------------------------------------------------------------- */

/* A problem with choose_n (backend.h) runs as launches of choose_n images each, the kernels of that many: the
 * GEMM's schedule depends on its row count (gemm.c: small M splits K), so one GEMM over the batch would not give
 * a slice's bits. Returns the launches; *one is each one's problem. */
static int launches_of(const cnn_conv2d *cv, cnn_conv2d *one) {
    *one = *cv;
    one->choose_n = one->choice_n = 0; /* choice_n: this backend's bits follow the launch's rows (backend.h) */
    if (cv->choose_n <= 0 || cv->choose_n >= cv->n) return 1;
    CNN_ASSERT(cv->n % cv->choose_n == 0);
    one->n = cv->choose_n;
    return cv->n / cv->choose_n;
}
/* floats of one launch's n images of (h, w, c) */
static int64_t imgs(const cnn_conv2d *one, int h, int w, int c) { return (int64_t)one->n * h * w * c; }

cnn_status cnn_cpu_op_conv2d_fprop(cnn_backend *be, const cnn_conv2d *cv, const cnn_epilogue *ep, const void *x,
                                   const void *w, void *y) {
    if (ep && ep->stats) ep->stats->chunks = 0; /* the oracle's BatchNorm sums x itself */
    cnn_conv2d one;
    const int runs = launches_of(cv, &one);
    const int64_t xs = imgs(&one, one.h, one.w, one.c), ys = imgs(&one, one.p, one.q, one.k);
    cnn_epilogue e = ep ? *ep : (cnn_epilogue){0};
    for (int j = 0; j < runs; j++) {
        if (ep && ep->residual) e.residual = (const float *)ep->residual + j * ys;
        CNN_TRY(cnn_cpu_conv2d_fprop(cnn_cpu_threads(be), &one, ep ? &e : NULL, (const float *)x + j * xs, w,
                                     (float *)y + j * ys));
    }
    return CNN_OK;
}

cnn_status cnn_cpu_op_conv2d_fprop_pair(cnn_backend *be, const cnn_conv2d *cv, const cnn_conv2d *cv2,
                                        const cnn_epilogue *ep, const void *x, const void *w, const void *x2,
                                        const void *w2, void *y) {
    cnn_conv2d one, one2;
    const int runs = launches_of(cv, &one);
    CNN_ASSERT(launches_of(cv2, &one2) == runs);
    const int64_t xs = imgs(&one, one.h, one.w, one.c), x2s = imgs(&one2, one2.h, one2.w, one2.c),
                  ys = imgs(&one, one.p, one.q, one.k);
    for (int j = 0; j < runs; j++)
        CNN_TRY(cnn_cpu_conv2d_fprop_pair(cnn_cpu_threads(be), &one, &one2, ep, (const float *)x + j * xs, w,
                                          (const float *)x2 + j * x2s, w2, (float *)y + j * ys));
    return CNN_OK;
}

bool cnn_cpu_op_conv2d_pair_fusable(cnn_backend *be, const cnn_conv2d *cv, const cnn_conv2d *cv2) {
    (void)be;
    return cv->n == cv2->n && cv->k == cv2->k && cv->p == cv2->p && cv->q == cv2->q;
}

cnn_status cnn_cpu_op_conv2d_dgrad(cnn_backend *be, const cnn_conv2d *cv, const void *dy, const void *w, void *dx,
                                   bool accumulate) {
    cnn_conv2d one;
    const int runs = launches_of(cv, &one);
    const int64_t xs = imgs(&one, one.h, one.w, one.c), ys = imgs(&one, one.p, one.q, one.k);
    for (int j = 0; j < runs; j++)
        CNN_TRY(cnn_cpu_conv2d_dgrad(cnn_cpu_threads(be), &one, (const float *)dy + j * ys, w, (float *)dx + j * xs,
                                     accumulate));
    return CNN_OK;
}

/* the dgrad, then the ReLU's mask in place, then dx's sums: the oracle of a fused kernel is the ops in order */
cnn_status cnn_cpu_op_conv2d_dgrad_relu(cnn_backend *be, const cnn_conv2d *cv, const void *dy, const void *w,
                                        const void *relu_y, void *dx, float *dx_sum) {
    const int64_t m = (int64_t)cv->n * cv->h * cv->w;
    CNN_TRY(cnn_cpu_op_conv2d_dgrad(be, cv, dy, w, dx, false));
    CNN_TRY(cnn_cpu_op_relu_backward(be, m * cv->c, relu_y, dx, dx, false));
    return dx_sum ? cnn_cpu_channel_sum(cnn_cpu_threads(be), m, cv->c, dx, dx_sum) : CNN_OK;
}

/* with choose_n, each slice's sum at dw + g * cnn_sum_rows(K * R * S * C) (backend.h) */
cnn_status cnn_cpu_op_conv2d_wgrad(cnn_backend *be, const cnn_conv2d *cv, const void *x, const void *dy, float *dw) {
    cnn_conv2d one;
    const int runs = launches_of(cv, &one);
    const int64_t xs = imgs(&one, one.h, one.w, one.c), ys = imgs(&one, one.p, one.q, one.k);
    const int64_t rows = cnn_sum_rows((int64_t)cv->k * cv->r * cv->s * cv->c);
    for (int j = 0; j < runs; j++)
        CNN_TRY(cnn_cpu_conv2d_wgrad(cnn_cpu_threads(be), &one, (const float *)x + j * xs, (const float *)dy + j * ys,
                                     dw + j * rows));
    return CNN_OK;
}

cnn_status cnn_cpu_op_channel_sum(cnn_backend *be, int64_t m, int c, const void *dy, float *out) {
    return cnn_cpu_channel_sum(cnn_cpu_threads(be), m, c, dy, out);
}
