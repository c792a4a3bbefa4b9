/* test_cpu_ops.c — every op of the CPU backend against float64 references written here (independent of
 * src/), gradients against central finite differences of those references, plus the fast convolution
 * against src/cpu's plain reference, every GEMM micro-kernel this machine runs, and determinism (same call
 * twice, 1 vs 2 threads: bitwise equal).
 *
 * Method:
 *   - inputs are fresh Philox uniforms per case (never zeros); every output is poisoned with NaN first, and
 *     NaN never passes (rel_l2 returns infinity);
 *   - forward: fp32 output vs the fp64 reference fed the same fp32 inputs, rel-L2 <= 1e-5;
 *   - backward: the fp32 analytic gradient of L = sum(y * r), r random, vs central differences of the fp64
 *     reference (h = 1e-6), rel-L2 <= 1e-4;
 *   - odd shapes: batch 1 and 3, H != W, odd sizes, stride 1/2, padding 0/1/3, kernels 1/3/7, channels 3/5/13.
 * CNN_TEST_QUICK=1 (the ASan+UBSan run) skips the larger shapes.
 */
#include "test.h"

#include "cpu/cpu.h"

static cnn_backend *be;   /* 2 threads */
static cnn_backend *be1;  /* 1 thread, for the thread-count invariance checks */
static bool quick;
static uint64_t seed_counter = 1;

#define FWD_TOL 1e-5
#define GRAD_TOL 1e-4

/* ---- helpers ---------------------------------------------------------------------------------------------- */

static uint64_t next_seed(void) { return 0x9e3779b97f4a7c15ULL * ++seed_counter; }

static float *frand(int64_t n, float lo, float hi) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    fill_uniform(p, n, next_seed(), lo, hi);
    return p;
}
static float *fnan(int64_t n) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    poison(p, n);
    return p;
}
static float *fcopy(const float *x, int64_t n) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    memcpy(p, x, (size_t)n * sizeof(float));
    return p;
}
static double *to64(const float *x, int64_t n) {
    double *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) p[i] = x[i];
    return p;
}
static double *d_alloc(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(double)); }
static double dot64(const double *a, const double *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}
static void check_rel(const char *name, const float *got, const double *want, int64_t n, double tol) {
    double e = rel_l2(got, want, n);
    check(e <= tol, name, "rel-L2 %.2e (tol %.0e)", e, tol);
}
/* Gradients: rel-L2 <= GRAD_TOL, or (for an ill-conditioned, nearly cancelling gradient) gradcheck's
 * elementwise |got - want| <= 1e-5 + 1e-3 |want| everywhere. NaN fails both. */
static void check_grad(const char *name, const float *got, const double *want, int64_t n) {
    double e = rel_l2(got, want, n), worst = 0;
    bool elementwise = true;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]), lim = 1e-5 + 1e-3 * fabs(want[i]);
        if (!(d <= lim)) elementwise = false;
        if (!(d / lim <= worst)) worst = d / lim;
    }
    check(e <= GRAD_TOL || elementwise, name, "rel-L2 %.2e (tol %.0e), worst |err|/(atol+rtol|ref|) %.2f", e, GRAD_TOL, worst);
}
static bool same_bits(const float *a, const float *b, int64_t n) { return memcmp(a, b, (size_t)n * sizeof(float)) == 0; }
static void ok(cnn_status st, const char *what) {
    if (st != CNN_OK) {
        printf("FAIL %s: status %s: %s\n", what, cnn_status_str(st), cnn_error_msg());
        test_failed++;
    }
}

/* Central differences of L(in) = sum(f(in) * r) with respect to in[which] (h = 1e-6, in float64). */
typedef void (*fwd64_fn)(const void *ctx, double *const *in, double *out);
static double *fd_grad(fwd64_fn f, const void *ctx, double *const *in, int which, int64_t n_in, const double *r,
                       int64_t n_out) {
    const double h = 1e-6;
    double *g = d_alloc(n_in), *out = d_alloc(n_out);
    for (int64_t i = 0; i < n_in; i++) {
        double s = in[which][i];
        in[which][i] = s + h;
        f(ctx, in, out);
        double lp = dot64(out, r, n_out);
        in[which][i] = s - h;
        f(ctx, in, out);
        double lm = dot64(out, r, n_out);
        in[which][i] = s;
        g[i] = (lp - lm) / (2 * h);
    }
    free(out);
    return g;
}

/* ---- problem descriptors ------------------------------------------------------------------------------- */

static void test_problems(void) {
    cnn_conv2d cv;
    bool a = cnn_conv2d_init(&cv, 2, 3, 224, 224, 64, 7, 7, 2, 3);
    check(a && cv.p == 112 && cv.q == 112, "problem.conv_stem", "p %d q %d", cv.p, cv.q);
    a = cnn_conv2d_init(&cv, 1, 3, 7, 9, 4, 3, 3, 2, 0);
    check(a && cv.p == 3 && cv.q == 4, "problem.conv_floor", "p %d q %d", cv.p, cv.q);
    check(!cnn_conv2d_init(&cv, 1, 3, 2, 2, 4, 5, 5, 1, 1) && cv.p <= 0, "problem.conv_empty", NULL);
    check(!cnn_conv2d_init(&cv, 1, 3, 8, 8, 4, 3, 3, 0, 1), "problem.conv_stride0", NULL);
    check(!cnn_conv2d_init(&cv, 1, 3, 8, 8, 4, 3, 3, 1, -1), "problem.conv_negpad", NULL);
    cnn_pool2d pl;
    a = cnn_pool2d_init(&pl, CNN_POOL_MAX, 2, 64, 112, 112, 3, 2, 1);
    check(a && pl.p == 56 && pl.q == 56 && pl.s == 3, "problem.pool_resnet", "p %d", pl.p);
    check(!cnn_pool2d_init(&pl, CNN_POOL_MAX, 1, 3, 8, 8, 3, 1, 2), "problem.pool_pad_gt_half", NULL);
    check(cnn_pool2d_init(&pl, CNN_POOL_AVG, 1, 3, 8, 8, 2, 2, 1) && pl.p == 5, "problem.pool_pad_eq_half", NULL);
    check(!cnn_pool2d_init(&pl, CNN_POOL_AVG, 1, 3, 2, 2, 3, 1, 0), "problem.pool_empty", NULL);
    check(cnn_pool2d_init_adaptive(&pl, 1, 3, 2, 2, 7, 7) && pl.p == 7 && pl.kind == CNN_POOL_ADAPTIVE_AVG,
          "problem.adaptive", NULL);
    check(!cnn_pool2d_init_adaptive(&pl, 1, 3, 2, 2, 0, 7), "problem.adaptive_empty", NULL);
}

/* ---- memory, copies, timing ------------------------------------------------------------------------------ */

static void test_memory(void) {
    check(strncmp(be->device_name, "CPU: ", 5) == 0 && be->act_dtype == CNN_DTYPE_F32 && strcmp(be->name, "cpu") == 0,
          "backend.identity", "%s", be->device_name);
    size_t peak0 = be->peak_bytes(be);
    void *a, *b, *c;
    ok(be->alloc(be, 1000, "a", &a), "alloc");
    ok(be->alloc(be, 3, "b", &b), "alloc");
    ok(be->alloc(be, 0, "c", &c), "alloc");
    bool aligned = ((uintptr_t)a % 64 == 0) && ((uintptr_t)b % 64 == 0) && ((uintptr_t)c % 64 == 0);
    check(aligned, "backend.alloc_aligned64", NULL);
    size_t peak1 = be->peak_bytes(be);
    check(peak1 >= peak0 + 1003, "backend.peak_bytes", "%zu -> %zu", peak0, peak1);
    float *h = frand(250, -1, 1), *back = fnan(250);
    void *d;
    ok(be->alloc(be, 1000, "d", &d), "alloc");
    ok(be->upload(be, a, h, 1000), "upload");
    ok(be->copy(be, d, a, 1000), "copy");
    ok(be->download(be, back, d, 1000), "download");
    bool rt = same_bits(h, back, 250);
    be->free(be, d);
    ok(be->zero(be, a, 1000), "zero");
    ok(be->download(be, back, a, 1000), "download");
    bool zeroed = true;
    for (int i = 0; i < 250; i++) zeroed &= back[i] == 0.0f;
    float *act = fnan(250);
    ok(be->to_act(be, 250, h, act), "to_act");
    poison(back, 250);
    ok(be->from_act(be, 250, act, back), "from_act");
    check(rt && zeroed && same_bits(h, back, 250), "backend.copies", NULL);
    be->free(be, a);
    be->free(be, b);
    be->free(be, c);
    be->free(be, NULL);
    ok(be->alloc(be, 10, "e", &a), "alloc");
    check(be->peak_bytes(be) == peak1 + 1000, "backend.peak_after_free", "%zu", be->peak_bytes(be));
    be->free(be, a);
    double ms = -1;
    ok(be->time_begin(be), "time_begin");
    ok(be->sync(be), "sync");
    ok(be->time_end(be, &ms), "time_end");
    check(ms >= 0 && ms < 1e4, "backend.timer", "%.3f ms", ms);
    check(!be->graph_begin && !be->graph_end && !be->graph_launch && !be->graph_free, "backend.no_graphs", NULL);
    free(h), free(back), free(act);
}

/* ---- convolution ------------------------------------------------------------------------------------------ */

static void conv_fwd64(const void *ctx, double *const *in, double *out) {
    const cnn_conv2d *cv = ctx;
    const double *x = in[0], *w = in[1];
    for (int n = 0; n < cv->n; n++)
        for (int p = 0; p < cv->p; p++)
            for (int q = 0; q < cv->q; q++)
                for (int k = 0; k < cv->k; k++) {
                    double acc = 0;
                    for (int r = 0; r < cv->r; r++)
                        for (int s = 0; s < cv->s; s++) {
                            int h = p * cv->stride_h - cv->pad_h + r, ww = q * cv->stride_w - cv->pad_w + s;
                            if (h < 0 || h >= cv->h || ww < 0 || ww >= cv->w) continue;
                            for (int c = 0; c < cv->c; c++)
                                acc += x[(((int64_t)n * cv->h + h) * cv->w + ww) * cv->c + c] *
                                       w[(((int64_t)k * cv->r + r) * cv->s + s) * cv->c + c];
                        }
                    out[(((int64_t)n * cv->p + p) * cv->q + q) * cv->k + k] = acc;
                }
}

typedef struct conv_case {
    int n, c, h, w, k, r, s, stride, pad;
} conv_case;

static void conv_name(char *buf, size_t cap, const char *what, const conv_case *cc) {
    snprintf(buf, cap, "conv.%s[n%dc%dh%dw%dk%dr%ds%du%dp%d]", what, cc->n, cc->c, cc->h, cc->w, cc->k, cc->r, cc->s,
             cc->stride, cc->pad);
}

/* Forward with and without the epilogue vs fp64; dgrad/wgrad (fast and reference) vs finite differences. */
static void test_conv_case(const conv_case *cc) {
    cnn_conv2d cv;
    char name[160];
    if (!cnn_conv2d_init(&cv, cc->n, cc->c, cc->h, cc->w, cc->k, cc->r, cc->s, cc->stride, cc->pad)) {
        conv_name(name, sizeof name, "init", cc);
        check(false, name, "descriptor rejected");
        return;
    }
    int64_t nx = (int64_t)cv.n * cv.h * cv.w * cv.c, nw = (int64_t)cv.k * cv.r * cv.s * cv.c;
    int64_t ny = (int64_t)cv.n * cv.p * cv.q * cv.k;
    float *x = frand(nx, -1, 1), *w = frand(nw, -1, 1), *r = frand(ny, -1, 1), *res = frand(ny, -1, 1);
    float *scale = frand(cv.k, 0.5f, 1.5f), *shift = frand(cv.k, -0.5f, 0.5f);
    double *x64 = to64(x, nx), *w64 = to64(w, nw), *r64 = to64(r, ny), *y64 = d_alloc(ny), *e64 = d_alloc(ny);
    double *in[2] = {x64, w64};
    conv_fwd64(&cv, in, y64);
    for (int64_t i = 0; i < ny; i++) {
        double v = y64[i] * scale[i % cv.k] + shift[i % cv.k] + res[i];
        e64[i] = v < 0 ? 0 : v;
    }
    float *y = fnan(ny);
    cnn_epilogue none = {0};
    ok(be->conv2d_fprop(be, &cv, &none, x, w, y), "conv2d_fprop");
    conv_name(name, sizeof name, "fprop", cc);
    check_rel(name, y, y64, ny, FWD_TOL);
    poison(y, ny);
    ok(be->conv2d_fprop(be, &cv, NULL, x, w, y), "conv2d_fprop");
    conv_name(name, sizeof name, "fprop_null_epilogue", cc);
    check_rel(name, y, y64, ny, FWD_TOL);

    cnn_epilogue ep = {.scale = scale, .shift = shift, .residual = res, .relu = true};
    poison(y, ny);
    ok(be->conv2d_fprop(be, &cv, &ep, x, w, y), "conv2d_fprop");
    conv_name(name, sizeof name, "fprop_epilogue", cc);
    check_rel(name, y, e64, ny, FWD_TOL);
    float *yr = fnan(ny);
    cnn_cpu_conv2d_fprop_ref(2, &cv, &ep, x, w, yr);
    conv_name(name, sizeof name, "fprop_ref", cc);
    check_rel(name, yr, e64, ny, FWD_TOL);

    /* dgrad: dL/dx with dy = r; overwrite and accumulate, fast and reference */
    double *gx = fd_grad(conv_fwd64, &cv, in, 0, nx, r64, ny);
    float *dx = fnan(nx);
    ok(be->conv2d_dgrad(be, &cv, r, w, dx, false), "conv2d_dgrad");
    conv_name(name, sizeof name, "dgrad", cc);
    check_grad(name, dx, gx, nx);
    poison(dx, nx);
    cnn_cpu_conv2d_dgrad_ref(2, &cv, r, w, dx, false);
    conv_name(name, sizeof name, "dgrad_ref", cc);
    check_grad(name, dx, gx, nx);
    float *base = frand(nx, -1, 1);
    double *want = d_alloc(nx);
    for (int64_t i = 0; i < nx; i++) want[i] = base[i] + gx[i];
    memcpy(dx, base, (size_t)nx * sizeof(float));
    ok(be->conv2d_dgrad(be, &cv, r, w, dx, true), "conv2d_dgrad");
    conv_name(name, sizeof name, "dgrad_accumulate", cc);
    check_grad(name, dx, want, nx);
    /* with the ReLU before the conv taken in: the gradient passes where that ReLU's output (base, exact zeros
     * included) is > 0 */
    for (int64_t i = 0; i < nx; i += 5) base[i] = 0.0f;
    for (int64_t i = 0; i < nx; i++) want[i] = base[i] > 0 ? gx[i] : 0.0;
    poison(dx, nx);
    float *dxs = fnan(cv.c);
    double *dxs64 = d_alloc(cv.c);
    for (int64_t i = 0; i < nx; i++) dxs64[i % cv.c] += want[i];
    ok(be->conv2d_dgrad_relu(be, &cv, r, w, base, dx, dxs), "conv2d_dgrad_relu");
    conv_name(name, sizeof name, "dgrad_relu", cc);
    check_grad(name, dx, want, nx);
    conv_name(name, sizeof name, "dgrad_relu_sum", cc); /* dx's channel sums (the bias gradient before the ReLU) */
    check_grad(name, dxs, dxs64, cv.c);
    poison(dx, nx);
    ok(be->conv2d_dgrad_relu(be, &cv, r, w, base, dx, NULL), "conv2d_dgrad_relu");
    conv_name(name, sizeof name, "dgrad_relu_nosum", cc);
    check_grad(name, dx, want, nx);
    free(dxs), free(dxs64);

    /* wgrad */
    double *gw = fd_grad(conv_fwd64, &cv, in, 1, nw, r64, ny);
    float *dw = fnan(nw);
    ok(be->conv2d_wgrad(be, &cv, x, r, dw), "conv2d_wgrad");
    conv_name(name, sizeof name, "wgrad", cc);
    check_grad(name, dw, gw, nw);
    poison(dw, nw);
    cnn_cpu_conv2d_wgrad_ref(2, &cv, x, r, dw);
    conv_name(name, sizeof name, "wgrad_ref", cc);
    check_grad(name, dw, gw, nw);

    /* bias gradient: channel_sum of dy */
    float *db = fnan(cv.k);
    double *db64 = d_alloc(cv.k);
    for (int64_t i = 0; i < ny; i++) db64[i % cv.k] += r[i];
    ok(be->channel_sum(be, ny / cv.k, cv.k, r, db), "channel_sum");
    conv_name(name, sizeof name, "channel_sum", cc);
    check_rel(name, db, db64, cv.k, FWD_TOL);

    free(x), free(w), free(r), free(res), free(scale), free(shift), free(x64), free(w64), free(r64), free(y64);
    free(e64), free(y), free(yr), free(gx), free(dx), free(base), free(want), free(gw), free(dw), free(db), free(db64);
}

static void test_conv(void) {
    static const conv_case cases[] = {
        {1, 3, 7, 9, 5, 3, 3, 1, 1},    /* batch 1, H != W, C = 3                    */
        {3, 5, 9, 6, 13, 3, 3, 2, 1},   /* batch 3, stride 2, K = 13                 */
        {1, 3, 11, 13, 4, 7, 7, 2, 3},  /* the 7x7/2 stem, pad 3                     */
        {3, 13, 5, 7, 6, 1, 1, 1, 0},   /* 1x1 stride 1: the pointwise path          */
        {2, 5, 8, 7, 7, 1, 1, 2, 0},    /* 1x1 stride 2: dgrad phases without taps   */
        {1, 13, 6, 5, 3, 3, 3, 1, 0},   /* pad 0                                     */
        {2, 4, 9, 8, 5, 3, 3, 2, 0},    /* stride 2, pad 0, odd H                    */
        {1, 3, 9, 8, 5, 7, 7, 1, 3},    /* 7x7 stride 1                              */
        {1, 5, 8, 9, 3, 3, 1, 1, 1},    /* R != S                                    */
        {1, 3, 4, 5, 2, 3, 3, 3, 1},    /* stride 3 > pad: uneven phases             */
    };
    int ncase = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < ncase; i++) test_conv_case(&cases[i]);
}

/* Fast convolution vs src/cpu's reference on shapes that exercise the GEMM's blocking (several K blocks,
 * N edges, the large-M path), for every micro-kernel this machine can run; then determinism. */
static void conv_fast_vs_ref(const conv_case *cc, const char *isa) {
    cnn_conv2d cv;
    CNN_ASSERT(cnn_conv2d_init(&cv, cc->n, cc->c, cc->h, cc->w, cc->k, cc->r, cc->s, cc->stride, cc->pad));
    int64_t nx = (int64_t)cv.n * cv.h * cv.w * cv.c, nw = (int64_t)cv.k * cv.r * cv.s * cv.c;
    int64_t ny = (int64_t)cv.n * cv.p * cv.q * cv.k;
    float *x = frand(nx, -1, 1), *w = frand(nw, -1, 1), *dy = frand(ny, -1, 1), *res = frand(ny, -1, 1);
    float *scale = frand(cv.k, 0.5f, 1.5f), *shift = frand(cv.k, -0.5f, 0.5f), *base = frand(nx, -1, 1);
    float *a = fnan(ny > nx ? (ny > nw ? ny : nw) : (nx > nw ? nx : nw)), *b = fnan(ny > nx ? (ny > nw ? ny : nw) : (nx > nw ? nx : nw));
    cnn_epilogue ep = {.scale = scale, .shift = shift, .residual = res, .relu = true};
    char name[200], tag[64];
    snprintf(tag, sizeof tag, "%s", isa);
    double e;

    ok(cnn_cpu_conv2d_fprop(2, &cv, &ep, x, w, a), "fprop");
    cnn_cpu_conv2d_fprop_ref(2, &cv, &ep, x, w, b);
    conv_name(name, sizeof name, "fast_vs_ref.fprop", cc);
    strcat(name, tag);
    e = rel_l2_f(a, b, ny);
    check(e <= FWD_TOL, name, "rel-L2 %.2e", e);

    memcpy(a, base, (size_t)nx * sizeof(float));
    memcpy(b, base, (size_t)nx * sizeof(float));
    ok(cnn_cpu_conv2d_dgrad(2, &cv, dy, w, a, true), "dgrad");
    cnn_cpu_conv2d_dgrad_ref(2, &cv, dy, w, b, true);
    conv_name(name, sizeof name, "fast_vs_ref.dgrad_acc", cc);
    strcat(name, tag);
    e = rel_l2_f(a, b, nx);
    check(e <= FWD_TOL, name, "rel-L2 %.2e", e);
    poison(a, nx), poison(b, nx);
    ok(cnn_cpu_conv2d_dgrad(2, &cv, dy, w, a, false), "dgrad");
    cnn_cpu_conv2d_dgrad_ref(2, &cv, dy, w, b, false);
    conv_name(name, sizeof name, "fast_vs_ref.dgrad", cc);
    strcat(name, tag);
    e = rel_l2_f(a, b, nx);
    check(e <= FWD_TOL, name, "rel-L2 %.2e", e);

    poison(a, nw), poison(b, nw);
    ok(cnn_cpu_conv2d_wgrad(2, &cv, x, dy, a), "wgrad");
    cnn_cpu_conv2d_wgrad_ref(2, &cv, x, dy, b);
    conv_name(name, sizeof name, "fast_vs_ref.wgrad", cc);
    strcat(name, tag);
    e = rel_l2_f(a, b, nw);
    check(e <= FWD_TOL, name, "rel-L2 %.2e", e);
    free(x), free(w), free(dy), free(res), free(scale), free(shift), free(base), free(a), free(b);
}

static void conv_determinism(const conv_case *cc) {
    cnn_conv2d cv;
    CNN_ASSERT(cnn_conv2d_init(&cv, cc->n, cc->c, cc->h, cc->w, cc->k, cc->r, cc->s, cc->stride, cc->pad));
    int64_t nx = (int64_t)cv.n * cv.h * cv.w * cv.c, nw = (int64_t)cv.k * cv.r * cv.s * cv.c;
    int64_t ny = (int64_t)cv.n * cv.p * cv.q * cv.k;
    float *x = frand(nx, -1, 1), *w = frand(nw, -1, 1), *dy = frand(ny, -1, 1), *shift = frand(cv.k, -1, 1);
    float *y[3], *dx[3], *dw[3];
    cnn_epilogue ep = {.shift = shift, .relu = true};
    for (int t = 0; t < 3; t++) {
        cnn_backend *b = t < 2 ? be : be1;
        y[t] = fnan(ny), dx[t] = fnan(nx), dw[t] = fnan(nw);
        ok(b->conv2d_fprop(b, &cv, &ep, x, w, y[t]), "fprop");
        ok(b->conv2d_dgrad(b, &cv, dy, w, dx[t], false), "dgrad");
        ok(b->conv2d_wgrad(b, &cv, x, dy, dw[t]), "wgrad");
    }
    char name[160];
    conv_name(name, sizeof name, "deterministic_repeat", cc);
    check(same_bits(y[0], y[1], ny) && same_bits(dx[0], dx[1], nx) && same_bits(dw[0], dw[1], nw), name, NULL);
    conv_name(name, sizeof name, "deterministic_1_vs_2_threads", cc);
    check(same_bits(y[0], y[2], ny) && same_bits(dx[0], dx[2], nx) && same_bits(dw[0], dw[2], nw), name, NULL);
    for (int t = 0; t < 3; t++) free(y[t]), free(dx[t]), free(dw[t]);
    free(x), free(w), free(dy), free(shift);
}

static void test_conv_fast(void) {
    static const conv_case small[] = {
        {4, 70, 20, 22, 33, 3, 3, 1, 1}, /* M = 1760 > the small-M limit, RSC = 630: 3 K blocks, N edge */
        {2, 37, 19, 17, 45, 3, 3, 2, 1}, /* small-M path, stride 2                                      */
        {3, 3, 23, 21, 17, 7, 7, 2, 3},  /* stem-like                                                   */
        {2, 40, 9, 11, 300, 1, 1, 1, 0}, /* pointwise, K = 300                                          */
        {2, 19, 9, 11, 21, 1, 1, 2, 0},  /* 1x1 stride 2                                                */
    };
    static const conv_case big[] = {
        {2, 64, 14, 14, 64, 3, 3, 1, 1},   /* ResNet basic block       */
        {2, 3, 32, 32, 64, 7, 7, 2, 3},    /* ResNet stem              */
        {2, 64, 14, 14, 128, 1, 1, 2, 0},  /* downsample projection    */
        {2, 128, 8, 8, 256, 3, 3, 2, 1},   /* stage transition         */
        {1, 256, 7, 7, 600, 1, 1, 1, 0},   /* K > the N block (512)    */
    };
    static const cnn_cpu_isa isas[] = {CNN_CPU_ISA_C, CNN_CPU_ISA_AVX2, CNN_CPU_ISA_AVX512};
    for (int i = 0; i < 3; i++) {
        char tag[80];
        snprintf(tag, sizeof tag, ".%s", cnn_cpu_isa_name(isas[i]));
        if (!cnn_cpu_gemm_set_isa(isas[i])) {
            char nm[128];
            snprintf(nm, sizeof nm, "conv.fast_vs_ref%s", tag);
            skip(nm, "instruction set not supported on this machine");
            continue;
        }
        int ns = quick ? 2 : (int)(sizeof small / sizeof small[0]);
        for (int j = 0; j < ns; j++) conv_fast_vs_ref(&small[j], tag);
        if (!quick)
            for (int j = 0; j < (int)(sizeof big / sizeof big[0]); j++) conv_fast_vs_ref(&big[j], tag);
    }
    cnn_cpu_gemm_set_isa(CNN_CPU_ISA_AUTO);
    conv_determinism(&small[0]);
    conv_determinism(&small[1]);
    if (!quick) conv_determinism(&big[1]);
}

/* A pair (backend.h, conv2d_fprop_pair: y = relu?(conv(x, w) + conv(x2, w2) + shift)) against the reference
 * convolutions added in double: a basic block's 3x3 + its 1x1/2 downsample and a bottleneck's 1x1 + 1x1/2, with
 * and without the ReLU, through the backend table (which the eval plan calls) and its fusability answer. */
static void test_conv_pair(void) {
    static const conv_case pairs[][2] = {
        {{2, 40, 9, 7, 48, 3, 3, 1, 1}, {2, 24, 17, 13, 48, 1, 1, 2, 0}},
        {{3, 64, 5, 6, 300, 1, 1, 1, 0}, {3, 96, 10, 12, 300, 1, 1, 2, 0}},
    };
    for (int i = 0; i < 2; i++) {
        cnn_conv2d a, b;
        CNN_ASSERT(cnn_conv2d_init(&a, pairs[i][0].n, pairs[i][0].c, pairs[i][0].h, pairs[i][0].w, pairs[i][0].k,
                                   pairs[i][0].r, pairs[i][0].s, pairs[i][0].stride, pairs[i][0].pad));
        CNN_ASSERT(cnn_conv2d_init(&b, pairs[i][1].n, pairs[i][1].c, pairs[i][1].h, pairs[i][1].w, pairs[i][1].k,
                                   pairs[i][1].r, pairs[i][1].s, pairs[i][1].stride, pairs[i][1].pad));
        CNN_ASSERT(a.p == b.p && a.q == b.q);
        int64_t ny = (int64_t)a.n * a.p * a.q * a.k;
        float *x1 = frand((int64_t)a.n * a.h * a.w * a.c, -1, 1), *w1 = frand((int64_t)a.k * a.r * a.s * a.c, -1, 1);
        float *x2 = frand((int64_t)b.n * b.h * b.w * b.c, -1, 1), *w2 = frand((int64_t)b.k * b.r * b.s * b.c, -1, 1);
        float *shift = frand(a.k, -1, 1), *y = fnan(ny), *r1 = fnan(ny), *r2 = fnan(ny);
        double *want = calloc((size_t)ny, sizeof *want);
        cnn_epilogue e0 = {0}, es = {.shift = shift};
        cnn_cpu_conv2d_fprop_ref(2, &a, &e0, x1, w1, r1);
        cnn_cpu_conv2d_fprop_ref(2, &b, &es, x2, w2, r2);
        for (int relu = 0; relu < 2; relu++) {
            for (int64_t j = 0; j < ny; j++) {
                double v = (double)r1[j] + r2[j];
                want[j] = relu && v < 0 ? 0 : v;
            }
            poison(y, ny);
            cnn_epilogue ep = {.shift = shift, .relu = relu};
            ok(be->conv2d_fprop_pair(be, &a, &b, &ep, x1, w1, x2, w2, y), "conv2d_fprop_pair");
            char name[96];
            snprintf(name, sizeof name, "conv.pair%d%s", i, relu ? ".relu" : "");
            check_rel(name, y, want, ny, FWD_TOL);
        }
        check(be->conv2d_pair_fusable(be, &a, &b), "conv.pair_fusable", NULL);
        cnn_conv2d c = b;
        c.k = b.k + 8;
        check(!be->conv2d_pair_fusable(be, &a, &c), "conv.pair_not_fusable_k", "outputs of different K");
        free(x1), free(w1), free(x2), free(w2), free(shift), free(y), free(r1), free(r2), free(want);
    }
}

/* ---- batch norm -------------------------------------------------------------------------------------------- */

typedef struct bn_ctx {
    int64_t m;
    int c;
    double eps;
    bool residual, relu; /* what follows the BN, fused: y = relu?(bn(x) + residual) */
} bn_ctx;

/* in: x (M, C), gamma (C), beta (C), residual (M, C) when b->residual; out: y (M, C) */
static void bn_fwd64(const void *ctx, double *const *in, double *out) {
    const bn_ctx *b = ctx;
    for (int j = 0; j < b->c; j++) {
        double mean = 0, var = 0;
        for (int64_t i = 0; i < b->m; i++) mean += in[0][i * b->c + j];
        mean /= (double)b->m;
        for (int64_t i = 0; i < b->m; i++) var += (in[0][i * b->c + j] - mean) * (in[0][i * b->c + j] - mean);
        var /= (double)b->m;
        double invstd = 1 / sqrt(var + b->eps);
        for (int64_t i = 0; i < b->m; i++) {
            double v = (in[0][i * b->c + j] - mean) * invstd * in[1][j] + in[2][j] + (b->residual ? in[3][i * b->c + j] : 0);
            out[i * b->c + j] = b->relu && v < 0 ? 0 : v;
        }
    }
}

/* the fused forms: y = relu?(bn(x) + residual), forward against float64 and backward (dx, dgamma, dbeta and the
 * residual's gradient, from y's ReLU mask) against finite differences of the float64 forward */
static void test_bn_fused_case(int64_t m, int c, bool residual, bool relu) {
    bn_ctx bc = {m, c, 1e-5, residual, relu};
    cnn_bn bn = {.m = m, .c = c, .eps = 1e-5f, .momentum = 0.1f};
    int64_t n = m * c;
    float *x = frand(n, -1, 1), *gamma = frand(c, 0.5f, 1.5f), *beta = frand(c, -0.5f, 0.5f), *res = frand(n, -1, 1);
    float *dy = frand(n, -1, 1), *rm = frand(c, -0.5f, 0.5f), *rv = frand(c, 0.5f, 1.5f);
    float *sm = fnan(c), *si = fnan(c), *y = fnan(n);
    double *x64 = to64(x, n), *g64 = to64(gamma, c), *b64 = to64(beta, c), *res64 = to64(res, n), *dy64 = to64(dy, n);
    double *y64 = d_alloc(n), *in[4] = {x64, g64, b64, res64};
    bn_fwd64(&bc, in, y64);
    char name[120], tag[40];
    snprintf(tag, sizeof tag, "m%lld,c%d%s%s", (long long)m, c, residual ? ",residual" : "", relu ? ",relu" : "");
    ok(be->bn_forward_train(be, &bn, x, gamma, beta, rm, rv, sm, si, residual ? res : NULL, relu, y), "bn_forward_train");
    snprintf(name, sizeof name, "bn.fused_forward[%s]", tag);
    check_rel(name, y, y64, n, FWD_TOL);
    double *gx = fd_grad(bn_fwd64, &bc, in, 0, n, dy64, n), *gg = fd_grad(bn_fwd64, &bc, in, 1, c, dy64, n);
    double *gb = fd_grad(bn_fwd64, &bc, in, 2, c, dy64, n);
    double *gr = residual ? fd_grad(bn_fwd64, &bc, in, 3, n, dy64, n) : NULL;
    float *dx = fnan(n), *dg = fnan(c), *db = fnan(c), *dres = residual ? frand(n, -1, 1) : NULL;
    float *dres0 = residual ? fcopy(dres, n) : NULL;
    ok(be->bn_backward(be, &bn, x, y, dy, gamma, sm, si, relu, dx, false, dres, true, dg, db), "bn_backward");
    snprintf(name, sizeof name, "bn.fused_backward_dx[%s]", tag);
    check_grad(name, dx, gx, n);
    snprintf(name, sizeof name, "bn.fused_backward_dgamma_dbeta[%s]", tag);
    check(rel_l2(dg, gg, c) <= GRAD_TOL && rel_l2(db, gb, c) <= GRAD_TOL, name, "dgamma %.1e dbeta %.1e",
          rel_l2(dg, gg, c), rel_l2(db, gb, c));
    if (residual) { /* accumulated onto what was there */
        for (int64_t i = 0; i < n; i++) gr[i] += dres0[i];
        snprintf(name, sizeof name, "bn.fused_backward_dres_accumulate[%s]", tag);
        check_grad(name, dres, gr, n);
    }
    free(x), free(gamma), free(beta), free(res), free(dy), free(rm), free(rv), free(sm), free(si), free(y);
    free(x64), free(g64), free(b64), free(res64), free(dy64), free(y64), free(gx), free(gg), free(gb), free(gr);
    free(dx), free(dg), free(db), free(dres), free(dres0);
}

static void test_bn_case(int64_t m, int c, float offset, bool fd) {
    bn_ctx bc = {m, c, 1e-5, false, false};
    cnn_bn bn = {.m = m, .c = c, .eps = 1e-5f, .momentum = 0.1f};
    int64_t n = m * c;
    float *x = frand(n, -1, 1), *gamma = frand(c, 0.5f, 1.5f), *beta = frand(c, -0.5f, 0.5f), *r = frand(n, -1, 1);
    for (int64_t i = 0; i < n; i++) x[i] += offset + (float)(i % c); /* per-channel offsets */
    float *rm = frand(c, -0.5f, 0.5f), *rv = frand(c, 0.5f, 1.5f), *rm0 = fcopy(rm, c), *rv0 = fcopy(rv, c);
    float *sm = fnan(c), *si = fnan(c), *y = fnan(n);
    double *x64 = to64(x, n), *g64 = to64(gamma, c), *b64 = to64(beta, c), *r64 = to64(r, n), *y64 = d_alloc(n);
    double *in[3] = {x64, g64, b64};
    bn_fwd64(&bc, in, y64);
    char name[120];
    ok(be->bn_forward_train(be, &bn, x, gamma, beta, rm, rv, sm, si, NULL, false, y), "bn_forward_train");
    snprintf(name, sizeof name, "bn.forward[m%lld,c%d,off%g]", (long long)m, c, (double)offset);
    check_rel(name, y, y64, n, FWD_TOL);
    double *mean = d_alloc(c), *inv = d_alloc(c), *erm = d_alloc(c), *erv = d_alloc(c);
    for (int j = 0; j < c; j++) {
        double s = 0, v = 0;
        for (int64_t i = 0; i < m; i++) s += x64[i * c + j];
        s /= (double)m;
        for (int64_t i = 0; i < m; i++) v += (x64[i * c + j] - s) * (x64[i * c + j] - s);
        v /= (double)m;
        mean[j] = s;
        inv[j] = 1 / sqrt(v + 1e-5);
        erm[j] = 0.9 * rm0[j] + 0.1 * s;
        erv[j] = 0.9 * rv0[j] + 0.1 * v * (double)m / (double)(m - 1);
    }
    snprintf(name, sizeof name, "bn.saved_stats[m%lld,c%d]", (long long)m, c);
    check(rel_l2(sm, mean, c) <= FWD_TOL && rel_l2(si, inv, c) <= FWD_TOL, name, "mean %.1e invstd %.1e",
          rel_l2(sm, mean, c), rel_l2(si, inv, c));
    snprintf(name, sizeof name, "bn.running_stats[m%lld,c%d]", (long long)m, c);
    check(rel_l2(rm, erm, c) <= FWD_TOL && rel_l2(rv, erv, c) <= FWD_TOL, name, "mean %.1e var %.1e",
          rel_l2(rm, erm, c), rel_l2(rv, erv, c));

    if (fd) {
        double *gx = fd_grad(bn_fwd64, &bc, in, 0, n, r64, n);
        double *gg = fd_grad(bn_fwd64, &bc, in, 1, c, r64, n);
        double *gb = fd_grad(bn_fwd64, &bc, in, 2, c, r64, n);
        float *dx = fnan(n), *dg = fnan(c), *db = fnan(c);
        ok(be->bn_backward(be, &bn, x, NULL, r, gamma, sm, si, false, dx, false, NULL, false, dg, db), "bn_backward");
        snprintf(name, sizeof name, "bn.backward_dx[m%lld,c%d]", (long long)m, c);
        check_grad(name, dx, gx, n);
        snprintf(name, sizeof name, "bn.backward_dgamma_dbeta[m%lld,c%d]", (long long)m, c);
        check(rel_l2(dg, gg, c) <= GRAD_TOL && rel_l2(db, gb, c) <= GRAD_TOL, name, "dgamma %.1e dbeta %.1e",
              rel_l2(dg, gg, c), rel_l2(db, gb, c));
        float *base = frand(n, -1, 1);
        memcpy(dx, base, (size_t)n * sizeof(float));
        poison(dg, c), poison(db, c);
        ok(be->bn_backward(be, &bn, x, NULL, r, gamma, sm, si, false, dx, true, NULL, false, dg, db), "bn_backward");
        for (int64_t i = 0; i < n; i++) gx[i] += base[i];
        snprintf(name, sizeof name, "bn.backward_accumulate[m%lld,c%d]", (long long)m, c);
        check(rel_l2(dx, gx, n) <= GRAD_TOL && rel_l2(db, gb, c) <= GRAD_TOL, name, "dx %.1e", rel_l2(dx, gx, n));
        free(gx), free(gg), free(gb), free(dx), free(dg), free(db), free(base);
    }
    free(x), free(gamma), free(beta), free(r), free(rm), free(rv), free(rm0), free(rv0), free(sm), free(si), free(y);
    free(x64), free(g64), free(b64), free(r64), free(y64), free(mean), free(inv), free(erm), free(erv);
}

static void test_bn(void) {
    test_bn_case(15, 3, 0, true);
    test_bn_case(3, 5, 0, true);     /* tiny M (M = 2 is degenerate: xhat = +-1 whatever x is, dx ~ 0) */
    test_bn_case(105, 13, 0, true);
    test_bn_case(600, 7, 0, true);   /* several reduction chunks */
    test_bn_case(quick ? 3000 : 30000, 37, 0, false);
    test_bn_case(2000, 5, 1000, false); /* large mean: the two-pass variance keeps its precision */
    for (int k = 0; k < 3; k++) test_bn_fused_case(k == 1 ? 7 : 21, k == 1 ? 5 : 6, k != 0, k != 2);
    /* M = 1 is an error, not a NaN */
    cnn_bn bn = {.m = 1, .c = 3, .eps = 1e-5f, .momentum = 0.1f};
    float x[3] = {1, 2, 3}, g[3] = {1, 1, 1}, b[3] = {0}, rm[3] = {0}, rv[3] = {1, 1, 1}, sm[3], si[3], y[3];
    cnn_status st = be->bn_forward_train(be, &bn, x, g, b, rm, rv, sm, si, NULL, false, y);
    check(st == CNN_E_INVALID && cnn_error_msg()[0], "bn.m1_invalid", "%s", cnn_error_msg());
    /* determinism over threads, many chunks */
    int64_t m = quick ? 5000 : 50000;
    int c = 19;
    cnn_bn bb = {.m = m, .c = c, .eps = 1e-5f, .momentum = 0.1f};
    float *xx = frand(m * c, -2, 3), *gg = frand(c, 0.5f, 1.5f), *be_ = frand(c, -1, 1), *dy = frand(m * c, -1, 1);
    float *out[2], *dx[2], *st4[2];
    for (int t = 0; t < 2; t++) {
        cnn_backend *bk = t ? be1 : be;
        out[t] = fnan(m * c), dx[t] = fnan(m * c), st4[t] = calloc(6 * (size_t)c, sizeof(float));
        float *s = st4[t];
        ok(bk->bn_forward_train(bk, &bb, xx, gg, be_, s, s + c, s + 2 * c, s + 3 * c, NULL, true, out[t]), "bn fwd");
        ok(bk->bn_backward(bk, &bb, xx, out[t], dy, gg, s + 2 * c, s + 3 * c, true, dx[t], false, NULL, false, s + 4 * c,
                           s + 5 * c), "bn bwd");
    }
    check(same_bits(out[0], out[1], m * c) && same_bits(dx[0], dx[1], m * c) && same_bits(st4[0], st4[1], 6 * c),
          "bn.deterministic_1_vs_2_threads", NULL);
    for (int t = 0; t < 2; t++) free(out[t]), free(dx[t]), free(st4[t]);
    free(xx), free(gg), free(be_), free(dy);
}

static void test_scale_shift(void) {
    const int64_t m = 37;
    const int c = 13;
    float *x = frand(m * c, -1, 1), *sc = frand(c, -1.5f, 1.5f), *sh = frand(c, -1, 1), *res = frand(m * c, -1, 1);
    for (int variant = 0; variant < 4; variant++) {
        const float *s = variant & 1 ? sc : NULL, *t = variant & 2 ? sh : NULL;
        for (int withres = 0; withres < 2; withres++)
            for (int relu = 0; relu < 2; relu++) {
                double *want = d_alloc(m * c);
                for (int64_t i = 0; i < m * c; i++) {
                    double v = (double)x[i] * (s ? s[i % c] : 1) + (t ? t[i % c] : 0) + (withres ? res[i] : 0);
                    want[i] = relu && v < 0 ? 0 : v;
                }
                float *y = fnan(m * c);
                ok(be->scale_shift(be, m, c, x, s, t, withres ? res : NULL, relu, y), "scale_shift");
                char name[96];
                snprintf(name, sizeof name, "scale_shift[scale%d,shift%d,res%d,relu%d]", variant & 1, variant >> 1, withres,
                         relu);
                check_rel(name, y, want, m * c, FWD_TOL);
                free(want), free(y);
            }
    }
    free(x), free(sc), free(sh), free(res);
}

/* ---- pointwise ------------------------------------------------------------------------------------------- */

static void relu64(const void *ctx, double *const *in, double *out) {
    int64_t n = *(const int64_t *)ctx;
    for (int64_t i = 0; i < n; i++) out[i] = in[0][i] > 0 ? in[0][i] : 0;
}

static void test_pointwise(void) {
    int64_t n = 1003;
    float *x = frand(n, -1, 1), *b = frand(n, -1, 1), *r = frand(n, -1, 1), *base = frand(n, -1, 1);
    double *x64 = to64(x, n), *r64 = to64(r, n), *want = d_alloc(n);
    double *in[1] = {x64};
    float *y = fnan(n), *dx = fnan(n);
    /* relu */
    relu64(&n, in, want);
    ok(be->relu_forward(be, n, x, y), "relu_forward");
    check_rel("relu.forward", y, want, n, FWD_TOL);
    double *g = fd_grad(relu64, &n, in, 0, n, r64, n);
    ok(be->relu_backward(be, n, y, r, dx, false), "relu_backward");
    check_grad("relu.backward", dx, g, n);
    memcpy(dx, base, (size_t)n * sizeof(float));
    ok(be->relu_backward(be, n, y, r, dx, true), "relu_backward");
    for (int64_t i = 0; i < n; i++) g[i] += base[i];
    check_grad("relu.backward_accumulate", dx, g, n);
    float nanin[3] = {NAN, -1, 2}, nanout[3];
    ok(be->relu_forward(be, 3, nanin, nanout), "relu_forward");
    check(isnan(nanout[0]) && nanout[1] == 0 && nanout[2] == 2, "relu.nan_propagates", NULL);
    /* add and pass */
    for (int64_t i = 0; i < n; i++) want[i] = (double)x[i] + b[i];
    poison(y, n);
    ok(be->add_forward(be, n, x, b, y), "add_forward");
    check_rel("add.forward", y, want, n, FWD_TOL);
    poison(dx, n);
    ok(be->pass_backward(be, n, r, dx, false), "pass_backward");
    check(same_bits(dx, r, n), "add.pass_backward", NULL);
    memcpy(dx, base, (size_t)n * sizeof(float));
    ok(be->pass_backward(be, n, r, dx, true), "pass_backward");
    for (int64_t i = 0; i < n; i++) want[i] = (double)base[i] + r[i];
    check_rel("add.pass_backward_accumulate", dx, want, n, FWD_TOL);
    /* count_nonfinite */
    float *z = frand(n, -1, 1);
    z[3] = NAN, z[500] = INFINITY, z[1002] = -INFINITY;
    int64_t bad = -1;
    ok(be->count_nonfinite(be, n, z, &bad), "count_nonfinite");
    check(bad == 3, "count_nonfinite", "%lld", (long long)bad);
    free(x), free(b), free(r), free(base), free(x64), free(r64), free(want), free(y), free(dx), free(g), free(z);
}

static void test_dropout(void) {
    int64_t n = quick ? 20001 : 200001;
    float *x = frand(n, 0.5f, 1.5f), *y = fnan(n), *dy = frand(n, -1, 1), *dx = fnan(n), *base = frand(n, -1, 1);
    const float p = 0.3f;
    const uint64_t seed = 1234;
    ok(be->dropout_forward(be, n, p, seed, x, y), "dropout_forward");
    float scale = (float)(1.0 / (1.0 - p));
    int64_t kept = 0, bad = 0;
    for (int64_t i = 0; i < n; i++) {
        bool k = cnn_dropout_keep(seed, i, p);
        kept += k;
        if (y[i] != (k ? x[i] * scale : 0.0f)) bad++;
    }
    double frac = (double)kept / (double)n, sd = sqrt(p * (1 - p) / (double)n);
    check(bad == 0, "dropout.mask_is_cnn_dropout_keep", "%lld mismatches", (long long)bad);
    check(fabs(frac - (1 - p)) < 5 * sd, "dropout.keep_fraction", "%.4f (expect %.4f +- %.4f)", frac, 1 - p, 5 * sd);
    ok(be->dropout_backward(be, n, p, seed, dy, dx, false), "dropout_backward");
    bad = 0;
    for (int64_t i = 0; i < n; i++) bad += dx[i] != (cnn_dropout_keep(seed, i, p) ? dy[i] * scale : 0.0f);
    check(bad == 0, "dropout.backward_same_mask", "%lld mismatches", (long long)bad);
    memcpy(dx, base, (size_t)n * sizeof(float));
    ok(be->dropout_backward(be, n, p, seed, dy, dx, true), "dropout_backward");
    bad = 0;
    for (int64_t i = 0; i < n; i++) bad += dx[i] != base[i] + (cnn_dropout_keep(seed, i, p) ? dy[i] * scale : 0.0f);
    check(bad == 0, "dropout.backward_accumulate", "%lld mismatches", (long long)bad);
    poison(y, n);
    ok(be->dropout_forward(be, n, 0.0f, seed, x, y), "dropout_forward");
    check(same_bits(x, y, n), "dropout.p0_identity", NULL);
    float *y2 = fnan(n);
    ok(be1->dropout_forward(be1, n, p, seed, x, y2), "dropout_forward");
    poison(y, n);
    ok(be->dropout_forward(be, n, p, seed, x, y), "dropout_forward");
    check(same_bits(y, y2, n), "dropout.deterministic_1_vs_2_threads", NULL);
    ok(be->dropout_forward(be, n, p, seed + 1, x, y2), "dropout_forward");
    check(!same_bits(y, y2, n), "dropout.seed_changes_mask", NULL);
    cnn_status st = be->dropout_forward(be, n, 1.5f, seed, x, y);
    check(st == CNN_E_INVALID, "dropout.bad_p_invalid", "%s", cnn_error_msg());
    free(x), free(y), free(dy), free(dx), free(base), free(y2);
}

static void test_flatten(void) {
    cnn_shape s = {3, 5, 4, 7};
    int64_t n = cnn_shape_numel(s);
    float *x = frand(n, -1, 1), *y = fnan(n), *dx = fnan(n), *base = frand(n, -1, 1);
    ok(be->flatten_forward(be, s, x, y), "flatten_forward");
    bool good = true;
    for (int b = 0; b < s.n; b++)
        for (int c = 0; c < s.c; c++)
            for (int h = 0; h < s.h; h++)
                for (int w = 0; w < s.w; w++)
                    good &= y[(((int64_t)b * s.c + c) * s.h + h) * s.w + w] == x[(((int64_t)b * s.h + h) * s.w + w) * s.c + c];
    check(good, "flatten.forward_nchw_order", NULL);
    ok(be->flatten_backward(be, s, y, dx, false), "flatten_backward");
    check(same_bits(dx, x, n), "flatten.backward_inverse", NULL);
    memcpy(dx, base, (size_t)n * sizeof(float));
    ok(be->flatten_backward(be, s, y, dx, true), "flatten_backward");
    good = true;
    for (int64_t i = 0; i < n; i++) good &= dx[i] == base[i] + x[i];
    check(good, "flatten.backward_accumulate", NULL);
    free(x), free(y), free(dx), free(base);
}

/* ---- pooling ----------------------------------------------------------------------------------------------- */

static void pool_fwd64(const void *ctx, double *const *in, double *out) {
    const cnn_pool2d *pl = ctx;
    const double *x = in[0];
    for (int n = 0; n < pl->n; n++)
        for (int p = 0; p < pl->p; p++)
            for (int q = 0; q < pl->q; q++)
                for (int c = 0; c < pl->c; c++) {
                    int h0, h1, w0, w1;
                    double div;
                    if (pl->kind == CNN_POOL_ADAPTIVE_AVG) {
                        h0 = (int)floor((double)p * pl->h / pl->p), h1 = (int)ceil((double)(p + 1) * pl->h / pl->p);
                        w0 = (int)floor((double)q * pl->w / pl->q), w1 = (int)ceil((double)(q + 1) * pl->w / pl->q);
                        div = (double)(h1 - h0) * (w1 - w0);
                    } else {
                        h0 = p * pl->stride_h - pl->pad_h, h1 = h0 + pl->r;
                        w0 = q * pl->stride_w - pl->pad_w, w1 = w0 + pl->s;
                        div = (double)pl->r * pl->s;
                    }
                    double acc = pl->kind == CNN_POOL_MAX ? -INFINITY : 0;
                    for (int h = h0; h < h1; h++)
                        for (int w = w0; w < w1; w++) {
                            if (h < 0 || h >= pl->h || w < 0 || w >= pl->w) continue; /* padding */
                            double v = x[(((int64_t)n * pl->h + h) * pl->w + w) * pl->c + c];
                            if (pl->kind == CNN_POOL_MAX) acc = v > acc ? v : acc;
                            else acc += v;
                        }
                    out[(((int64_t)n * pl->p + p) * pl->q + q) * pl->c + c] = pl->kind == CNN_POOL_MAX ? acc : acc / div;
                }
}

static void test_pool_case(const cnn_pool2d *pl, const char *tag) {
    int64_t nx = (int64_t)pl->n * pl->h * pl->w * pl->c, ny = (int64_t)pl->n * pl->p * pl->q * pl->c;
    float *x = frand(nx, -1, 1), *r = frand(ny, -1, 1), *y = fnan(ny), *dx = fnan(nx), *base = frand(nx, -1, 1);
    double *x64 = to64(x, nx), *r64 = to64(r, ny), *y64 = d_alloc(ny);
    double *in[1] = {x64};
    pool_fwd64(pl, in, y64);
    char name[160];
    ok(be->pool2d_forward(be, pl, x, y), "pool2d_forward");
    snprintf(name, sizeof name, "pool.%s.forward", tag);
    check_rel(name, y, y64, ny, FWD_TOL);
    double *g = fd_grad(pool_fwd64, pl, in, 0, nx, r64, ny);
    ok(be->pool2d_backward(be, pl, x, y, r, dx, false), "pool2d_backward");
    snprintf(name, sizeof name, "pool.%s.backward", tag);
    check_grad(name, dx, g, nx);
    memcpy(dx, base, (size_t)nx * sizeof(float));
    ok(be->pool2d_backward(be, pl, x, y, r, dx, true), "pool2d_backward");
    for (int64_t i = 0; i < nx; i++) g[i] += base[i];
    snprintf(name, sizeof name, "pool.%s.backward_accumulate", tag);
    check_grad(name, dx, g, nx);
    float *dx1 = fcopy(base, nx);
    ok(be1->pool2d_backward(be1, pl, x, y, r, dx1, true), "pool2d_backward");
    snprintf(name, sizeof name, "pool.%s.deterministic_1_vs_2_threads", tag);
    check(same_bits(dx, dx1, nx), name, NULL);
    free(dx1);
    free(x), free(r), free(y), free(dx), free(base), free(x64), free(r64), free(y64), free(g);
}

static void test_pool(void) {
    static const struct {
        int n, c, h, w, r, stride, pad;
    } win[] = {
        {1, 3, 7, 9, 3, 2, 1},   /* ResNet's 3x3/2 pad 1 max pool, odd sizes */
        {3, 5, 8, 7, 2, 2, 0},   /* VGG's 2x2/2                               */
        {2, 13, 9, 10, 3, 1, 1}, /* stride 1: heavy overlap                  */
        {1, 17, 11, 6, 3, 2, 0}, /* C > one 16-channel block                 */
        {1, 5, 6, 8, 7, 3, 3},   /* 7x7, pad 3                               */
    };
    for (int i = 0; i < (int)(sizeof win / sizeof win[0]); i++) {
        for (int kind = 0; kind < 2; kind++) {
            cnn_pool2d pl;
            CNN_ASSERT(cnn_pool2d_init(&pl, kind ? CNN_POOL_AVG : CNN_POOL_MAX, win[i].n, win[i].c, win[i].h, win[i].w,
                                       win[i].r, win[i].stride, win[i].pad));
            char tag[96];
            snprintf(tag, sizeof tag, "%s[n%dc%dh%dw%dr%du%dp%d]", kind ? "avg" : "max", win[i].n, win[i].c, win[i].h,
                     win[i].w, win[i].r, win[i].stride, win[i].pad);
            test_pool_case(&pl, tag);
        }
    }
    static const struct {
        int n, c, h, w, p, q;
    } ad[] = {
        {1, 3, 7, 9, 3, 4},  /* not divisible        */
        {3, 5, 2, 2, 7, 7},  /* P > H: bins repeat   */
        {2, 13, 5, 6, 1, 1}, /* global average        */
        {1, 3, 6, 10, 4, 3},
    };
    for (int i = 0; i < (int)(sizeof ad / sizeof ad[0]); i++) {
        cnn_pool2d pl;
        CNN_ASSERT(cnn_pool2d_init_adaptive(&pl, ad[i].n, ad[i].c, ad[i].h, ad[i].w, ad[i].p, ad[i].q));
        char tag[96];
        snprintf(tag, sizeof tag, "adaptive[n%dc%dh%dw%d->%dx%d]", ad[i].n, ad[i].c, ad[i].h, ad[i].w, ad[i].p, ad[i].q);
        test_pool_case(&pl, tag);
    }

    /* ties: integer inputs in {0, 1, 2}; the first maximum in (r, s) scan order takes the gradient */
    cnn_pool2d pl;
    CNN_ASSERT(cnn_pool2d_init(&pl, CNN_POOL_MAX, 2, 3, 9, 8, 3, 1, 1));
    int64_t nx = 2 * 9 * 8 * 3, ny = 2 * (int64_t)pl.p * pl.q * 3;
    float *x = frand(nx, 0, 3), *dy = frand(ny, -1, 1), *y = fnan(ny), *dx = fnan(nx);
    for (int64_t i = 0; i < nx; i++) x[i] = floorf(x[i]);
    double *want = d_alloc(nx);
    for (int n = 0; n < 2; n++)
        for (int p = 0; p < pl.p; p++)
            for (int q = 0; q < pl.q; q++)
                for (int c = 0; c < 3; c++) {
                    float best = -INFINITY;
                    int64_t arg = -1;
                    for (int r = 0; r < 3; r++)
                        for (int s = 0; s < 3; s++) {
                            int h = p - 1 + r, w = q - 1 + s;
                            if (h < 0 || h >= 9 || w < 0 || w >= 8) continue;
                            int64_t idx = (((int64_t)n * 9 + h) * 8 + w) * 3 + c;
                            if (arg < 0 || x[idx] > best) best = x[idx], arg = idx;
                        }
                    int64_t o = (((int64_t)n * pl.p + p) * pl.q + q) * 3 + c;
                    want[arg] += dy[o];
                }
    ok(be->pool2d_forward(be, &pl, x, y), "pool2d_forward");
    ok(be->pool2d_backward(be, &pl, x, y, dy, dx, false), "pool2d_backward");
    check_rel("pool.max.ties_first_in_scan_order", dx, want, nx, 1e-6);
    /* NaN propagates and takes the gradient of its windows */
    float *xn = frand(nx, -1, 1);
    int64_t nanidx = (((int64_t)1 * 9 + 4) * 8 + 3) * 3 + 1; /* n 1, h 4, w 3, c 1 */
    xn[nanidx] = NAN;
    poison(y, ny);
    ok(be->pool2d_forward(be, &pl, xn, y), "pool2d_forward");
    int nan_out = 0, nan_expected = 0;
    for (int p = 0; p < pl.p; p++)
        for (int q = 0; q < pl.q; q++) {
            bool covers = p - 1 <= 4 && 4 <= p + 1 && q - 1 <= 3 && 3 <= q + 1;
            nan_expected += covers;
            for (int n = 0; n < 2; n++)
                for (int c = 0; c < 3; c++) {
                    bool isn = isnan(y[(((int64_t)n * pl.p + p) * pl.q + q) * 3 + c]);
                    nan_out += isn;
                    if (isn != (covers && n == 1 && c == 1)) nan_out += 1000;
                }
        }
    ok(be->pool2d_backward(be, &pl, xn, y, dy, dx, false), "pool2d_backward");
    double g = 0;
    for (int p = 3; p <= 5; p++)
        for (int q = 2; q <= 4; q++) g += dy[(((int64_t)1 * pl.p + p) * pl.q + q) * 3 + 1];
    check(nan_out == nan_expected && fabs(dx[nanidx] - g) < 1e-5, "pool.max.nan_propagates", "%d NaN outputs (want %d)",
          nan_out, nan_expected);
    free(x), free(dy), free(y), free(dx), free(want), free(xn);
}

/* ---- linear ---------------------------------------------------------------------------------------------- */

typedef struct lin_ctx {
    int n, in, out;
} lin_ctx;

static void linear64(const void *ctx, double *const *in, double *out) {
    const lin_ctx *l = ctx;
    for (int i = 0; i < l->n; i++)
        for (int o = 0; o < l->out; o++) {
            double acc = in[2][o];
            for (int k = 0; k < l->in; k++) acc += in[0][(int64_t)i * l->in + k] * in[1][(int64_t)o * l->in + k];
            out[(int64_t)i * l->out + o] = acc;
        }
}

static void test_linear_case(int n, int nin, int nout, bool fd) {
    lin_ctx lc = {n, nin, nout};
    cnn_linear ln = {.n = n, .in = nin, .out = nout};
    int64_t nx = (int64_t)n * nin, nw = (int64_t)nout * nin, ny = (int64_t)n * nout;
    float *x = frand(nx, -1, 1), *w = frand(nw, -1, 1), *b = frand(nout, -1, 1), *r = frand(ny, -1, 1);
    double *x64 = to64(x, nx), *w64 = to64(w, nw), *b64 = to64(b, nout), *r64 = to64(r, ny), *y64 = d_alloc(ny);
    double *zero = d_alloc(nout);
    double *in[3] = {x64, w64, b64};
    char name[120];
    float *y = fnan(ny);
    linear64(&lc, in, y64);
    ok(be->linear_forward(be, &ln, x, w, b, y), "linear_forward");
    snprintf(name, sizeof name, "linear.forward[n%d,in%d,out%d]", n, nin, nout);
    check_rel(name, y, y64, ny, FWD_TOL);
    double *in0[3] = {x64, w64, zero};
    linear64(&lc, in0, y64);
    poison(y, ny);
    ok(be->linear_forward(be, &ln, x, w, NULL, y), "linear_forward");
    snprintf(name, sizeof name, "linear.forward_nobias[n%d,in%d,out%d]", n, nin, nout);
    check_rel(name, y, y64, ny, FWD_TOL);

    double *gx, *gw, *gb;
    if (fd) {
        gx = fd_grad(linear64, &lc, in, 0, nx, r64, ny);
        gw = fd_grad(linear64, &lc, in, 1, nw, r64, ny);
        gb = fd_grad(linear64, &lc, in, 2, nout, r64, ny);
    } else { /* the adjoint in fp64, for shapes too large for finite differences */
        gx = d_alloc(nx), gw = d_alloc(nw), gb = d_alloc(nout);
        for (int i = 0; i < n; i++)
            for (int o = 0; o < nout; o++) {
                double ri = r64[(int64_t)i * nout + o];
                gb[o] += ri;
                for (int k = 0; k < nin; k++) {
                    gx[(int64_t)i * nin + k] += ri * w64[(int64_t)o * nin + k];
                    gw[(int64_t)o * nin + k] += ri * x64[(int64_t)i * nin + k];
                }
            }
    }
    float *dx = fnan(nx), *dw = fnan(nw), *db = fnan(nout), *base = frand(nx, -1, 1);
    ok(be->linear_backward(be, &ln, x, w, r, dx, false, dw, db), "linear_backward");
    snprintf(name, sizeof name, "linear.backward[n%d,in%d,out%d]", n, nin, nout);
    check(rel_l2(dx, gx, nx) <= GRAD_TOL && rel_l2(dw, gw, nw) <= GRAD_TOL && rel_l2(db, gb, nout) <= GRAD_TOL, name,
          "dx %.1e dw %.1e db %.1e", rel_l2(dx, gx, nx), rel_l2(dw, gw, nw), rel_l2(db, gb, nout));
    memcpy(dx, base, (size_t)nx * sizeof(float));
    ok(be->linear_backward(be, &ln, x, w, r, dx, true, NULL, NULL), "linear_backward");
    for (int64_t i = 0; i < nx; i++) gx[i] += base[i];
    snprintf(name, sizeof name, "linear.backward_accumulate_nullgrads[n%d,in%d,out%d]", n, nin, nout);
    check_grad(name, dx, gx, nx);
    poison(dw, nw);
    ok(be->linear_backward(be, &ln, x, w, r, NULL, false, dw, NULL), "linear_backward");
    snprintf(name, sizeof name, "linear.backward_null_dx[n%d,in%d,out%d]", n, nin, nout);
    check_grad(name, dw, gw, nw);
    free(x), free(w), free(b), free(r), free(x64), free(w64), free(b64), free(r64), free(y64), free(zero), free(y);
    free(gx), free(gw), free(gb), free(dx), free(dw), free(db), free(base);
}

static void test_linear(void) {
    test_linear_case(1, 5, 3, true);
    test_linear_case(3, 13, 7, true);
    test_linear_case(4, 37, 45, true);
    test_linear_case(33, 300, 100, false);
    if (!quick) test_linear_case(7, 2100, 1000, false); /* K > one K block, N > one N block */
}

/* ---- cross-entropy ----------------------------------------------------------------------------------------- */

typedef struct xent_ctx {
    int n, k;
    const int32_t *labels;
    double eps;
} xent_ctx;

static void xent64(const void *ctx, double *const *in, double *out) {
    const xent_ctx *xc = ctx;
    double total = 0;
    for (int i = 0; i < xc->n; i++) {
        const double *z = in[0] + (int64_t)i * xc->k;
        double mx = z[0];
        for (int j = 1; j < xc->k; j++) mx = z[j] > mx ? z[j] : mx;
        double se = 0;
        for (int j = 0; j < xc->k; j++) se += exp(z[j] - mx);
        double lse = mx + log(se);
        for (int j = 0; j < xc->k; j++) {
            double t = xc->eps / xc->k + (j == xc->labels[i] ? 1 - xc->eps : 0);
            total -= t * (z[j] - lse);
        }
    }
    out[0] = total / xc->n;
}

static void test_xent(void) {
    static const struct {
        int n, k;
        float eps, scale, range;
    } cases[] = {{1, 3, 0, 0, 2}, {3, 10, 0.1f, 0, 3}, {5, 7, 0.2f, 4, 2}, {4, 1000, 0.1f, 0, 5}, {2, 5, 0, 0, 800}};
    for (int ci = 0; ci < (int)(sizeof cases / sizeof cases[0]); ci++) {
        int n = cases[ci].n, k = cases[ci].k;
        float *z = frand((int64_t)n * k, -cases[ci].range, cases[ci].range);
        int32_t *lab = malloc((size_t)n * sizeof(int32_t));
        for (int i = 0; i < n; i++) lab[i] = (int32_t)(rnd_uniform(next_seed(), i, 0, 1) * k) % k;
        xent_ctx xc = {n, k, lab, cases[ci].eps};
        cnn_xent xe = {.n = n, .classes = k, .label_smoothing = cases[ci].eps, .grad_scale = cases[ci].scale};
        double *z64 = to64(z, (int64_t)n * k), loss64, one = 1;
        double *in[1] = {z64};
        xent64(&xc, in, &loss64);
        double *g = fd_grad(xent64, &xc, in, 0, (int64_t)n * k, &one, 1);
        double gs = cases[ci].scale != 0 ? cases[ci].scale : 1;
        for (int64_t i = 0; i < (int64_t)n * k; i++) g[i] *= gs;
        float loss = NAN, *dz = fnan((int64_t)n * k);
        ok(be->xent_forward_backward(be, &xe, z, lab, &loss, dz), "xent");
        char name[120];
        snprintf(name, sizeof name, "xent[n%d,k%d,eps%g,scale%g,range%g]", n, k, (double)cases[ci].eps,
                 (double)cases[ci].scale, (double)cases[ci].range);
        /* relative, but absolute below 1: logits 800 apart leave a loss that underflows to 0 (or a denormal) */
        double le = fabs(loss - loss64) / fmax(fabs(loss64), 1.0);
        check(isfinite(loss) && le <= FWD_TOL, name, "loss %.9g vs %.9g", (double)loss, loss64);
        strcat(name, ".dlogits");
        check_grad(name, dz, g, (int64_t)n * k);
        float loss2 = NAN;
        ok(be->xent_forward_backward(be, &xe, z, lab, &loss2, NULL), "xent");
        strcat(name, ".null_dlogits");
        check(loss2 == loss, name, NULL);
        free(z), free(lab), free(z64), free(g), free(dz);
    }
    float z[6] = {1, 2, 3, 4, 5, 6}, loss = NAN, dz[6];
    int32_t lab[2] = {1, 3};
    poison(dz, 6);
    cnn_xent xe = {.n = 2, .classes = 3};
    cnn_status st = be->xent_forward_backward(be, &xe, z, lab, &loss, dz);
    check(st == CNN_E_INVALID && strstr(cnn_error_msg(), "label") && isnan(loss) && isnan(dz[0]), "xent.bad_label_invalid",
          "%s", cnn_error_msg());
    lab[1] = -1;
    st = be->xent_forward_backward(be, &xe, z, lab, &loss, dz);
    check(st == CNN_E_INVALID, "xent.negative_label_invalid", NULL);
}

/* ---- image preparation ------------------------------------------------------------------------------------ */

static void test_prep(void) {
    const int n = 3, c = 3, h = 5, w = 7, pad = 2;
    uint8_t *src = malloc((size_t)n * c * h * w);
    for (int i = 0; i < n * c * h * w; i++) src[i] = (uint8_t)(rnd_uniform(77, i, 0, 256));
    /* samples: image, crop y, crop x, flip; images in another order than the batch, one twice */
    int32_t smp[12] = {2, 0, 4, 1, 0, 2, 2, 0, 2, 3, 1, 1};
    int32_t centre[12] = {0, pad, pad, 1, 1, pad, pad, 0, 2, pad, pad, 1};
    cnn_prep pp = {.n = n, .c = c, .h = h, .w = w, .pad = pad, .src_n = n, .out_c = c,
                   .mean = {0.4914f, 0.4822f, 0.4465f}, .std = {0.247f, 0.243f, 0.261f}};
    int64_t total = (int64_t)n * h * w * c;
    for (int variant = 0; variant < 3; variant++) {
        const int32_t *s = variant == 0 ? smp : variant == 1 ? centre : NULL;
        double *want = d_alloc(total);
        for (int i = 0; i < n; i++)
            for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++) {
                    /* crop the zero-padded image at (oy, ox), then flip the crop horizontally */
                    int img = s ? s[4 * i] : i, oy = s ? s[4 * i + 1] : pad, ox = s ? s[4 * i + 2] : pad;
                    int cx = s && s[4 * i + 3] ? w - 1 - x : x;
                    int py = y + oy, px = cx + ox; /* in the padded image */
                    int sy = py - pad, sx = px - pad;
                    for (int ch = 0; ch < c; ch++) {
                        double v = sy >= 0 && sy < h && sx >= 0 && sx < w ? src[((img * c + ch) * h + sy) * w + sx] : 0;
                        want[(((int64_t)i * h + y) * w + x) * c + ch] = (v / 255.0 - pp.mean[ch]) / pp.std[ch];
                    }
                }
        float *dst = fnan(total);
        ok(be->prep_images(be, &pp, src, s, dst), "prep_images");
        char name[64];
        snprintf(name, sizeof name, "prep.%s", variant == 0 ? "gather_crop_flip" : variant == 1 ? "center_flip" : "no_samples");
        check_rel(name, dst, want, total, 1e-6);
        free(want), free(dst);
    }
    /* one channel repeated into three (MNIST into a 3-channel model), each with its own mean/std */
    {
        cnn_prep p1 = {.n = 2, .c = 1, .h = h, .w = w, .pad = 0, .src_n = 2, .out_c = 3,
                       .mean = {0.1f, 0.2f, 0.3f}, .std = {0.5f, 0.25f, 0.125f}};
        float *dst = fnan(2 * h * w * 3);
        ok(be->prep_images(be, &p1, src, NULL, dst), "prep_images");
        double maxerr = 0;
        for (int i = 0; i < 2 * h * w; i++)
            for (int k = 0; k < 3; k++) {
                double e = fabs(dst[3 * i + k] - (src[i] / 255.0 - p1.mean[k]) / p1.std[k]);
                if (!(e <= maxerr)) maxerr = e;
            }
        check(maxerr < 1e-6, "prep.repeat_channel", "max err %.1e", maxerr);
        free(dst);
    }
    /* pad 0 and zero offsets: plain normalisation */
    cnn_prep p0 = pp;
    p0.pad = 0;
    int32_t zoff[12] = {0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0};
    float *dst = fnan(total);
    ok(be->prep_images(be, &p0, src, zoff, dst), "prep_images");
    double maxerr = 0;
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++)
            for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++) {
                    double v = (src[((i * c + ch) * h + y) * w + x] / 255.0 - pp.mean[ch]) / pp.std[ch];
                    double e = fabs(dst[(((int64_t)i * h + y) * w + x) * c + ch] - v);
                    if (!(e <= maxerr)) maxerr = e;
                }
    check(maxerr < 1e-6, "prep.identity_pad0", "max err %.1e", maxerr);
    int32_t bad[12] = {0, 5, 0, 0};
    cnn_status st = be->prep_images(be, &pp, src, bad, dst);
    check(st == CNN_E_INVALID, "prep.bad_offset_invalid", "%s", cnn_error_msg());
    int32_t bad_img[12] = {3, 0, 0, 0};
    st = be->prep_images(be, &pp, src, bad_img, dst);
    check(st == CNN_E_INVALID, "prep.bad_image_index_invalid", "%s", cnn_error_msg());
    free(src), free(dst);
}

/* ---- optimizers ------------------------------------------------------------------------------------------- */

static void test_sgd(void) {
    static const struct {
        float momentum, dampening, wd, scale;
        bool nesterov;
    } cases[] = {
        {0, 0, 0, 1, false}, {0, 0, 1e-2f, 0.5f, false}, {0.9f, 0, 5e-4f, 1, false},
        {0.9f, 0.1f, 1e-2f, 0.25f, false}, {0.9f, 0, 5e-4f, 1, true},
    };
    const int64_t n = 257;
    const int steps = 4;
    for (int ci = 0; ci < (int)(sizeof cases / sizeof cases[0]); ci++) {
        float *w = frand(n, -1, 1), *buf = fnan(n);
        double *w64 = to64(w, n), *b64 = d_alloc(n);
        double worst = 0;
        for (int t = 0; t < steps; t++) {
            float *g = frand(n, -1, 1);
            cnn_sgd o = {.lr = 0.1f, .momentum = cases[ci].momentum, .dampening = cases[ci].dampening,
                         .weight_decay = cases[ci].wd, .nesterov = cases[ci].nesterov, .first_step = t == 0};
            ok(be->sgd_update(be, &o, n, w, g, cases[ci].momentum != 0 ? buf : NULL, cases[ci].scale), "sgd_update");
            for (int64_t i = 0; i < n; i++) { /* torch.optim.SGD, written out */
                double gi = (double)g[i] * cases[ci].scale + (double)cases[ci].wd * w64[i];
                double d = gi;
                if (cases[ci].momentum != 0) {
                    b64[i] = t == 0 ? gi : cases[ci].momentum * b64[i] + (1 - (double)cases[ci].dampening) * gi;
                    d = cases[ci].nesterov ? gi + cases[ci].momentum * b64[i] : b64[i];
                }
                w64[i] -= 0.1 * d;
            }
            double e = rel_l2(w, w64, n);
            if (!(e <= worst)) worst = e;
            free(g);
        }
        char name[96];
        snprintf(name, sizeof name, "sgd[mom%g,damp%g,wd%g,scale%g,nesterov%d]", (double)cases[ci].momentum,
                 (double)cases[ci].dampening, (double)cases[ci].wd, (double)cases[ci].scale, cases[ci].nesterov);
        check(worst <= 1e-6, name, "%d steps, worst rel-L2 %.1e", steps, worst);
        free(w), free(buf), free(w64), free(b64);
    }
}

static void test_adamw(void) {
    static const struct {
        float lr, b1, b2, eps, wd, scale;
    } cases[] = {{1e-2f, 0.9f, 0.999f, 1e-8f, 0.05f, 1}, {3e-3f, 0.5f, 0.9f, 1e-6f, 0, 2}, {1e-3f, 0.3f, 0.99f, 1e-8f, 0.1f, 0.5f}};
    const int64_t n = 311;
    const int steps = 6;
    for (int ci = 0; ci < (int)(sizeof cases / sizeof cases[0]); ci++) {
        float *w = frand(n, -1, 1), *m = calloc((size_t)n, sizeof(float)), *v = calloc((size_t)n, sizeof(float));
        double *w64 = to64(w, n), *m64 = d_alloc(n), *v64 = d_alloc(n), worst = 0;
        for (int t = 1; t <= steps; t++) {
            float *g = frand(n, -1, 1);
            cnn_adamw o = {.lr = cases[ci].lr, .beta1 = cases[ci].b1, .beta2 = cases[ci].b2, .eps = cases[ci].eps,
                           .weight_decay = cases[ci].wd, .step = t};
            ok(be->adamw_update(be, &o, n, w, g, m, v, cases[ci].scale), "adamw_update");
            double b1 = cases[ci].b1, b2 = cases[ci].b2, lr = cases[ci].lr;
            for (int64_t i = 0; i < n; i++) { /* torch.optim.AdamW, written out */
                double gi = (double)g[i] * cases[ci].scale;
                w64[i] *= 1 - lr * cases[ci].wd;
                m64[i] = b1 * m64[i] + (1 - b1) * gi;
                v64[i] = b2 * v64[i] + (1 - b2) * gi * gi;
                double denom = sqrt(v64[i]) / sqrt(1 - pow(b2, t)) + cases[ci].eps;
                w64[i] -= lr / (1 - pow(b1, t)) * m64[i] / denom;
            }
            double e = rel_l2(w, w64, n);
            if (!(e <= worst)) worst = e;
            e = rel_l2(m, m64, n);
            if (!(e <= worst)) worst = e;
            e = rel_l2(v, v64, n);
            if (!(e <= worst)) worst = e;
            free(g);
        }
        char name[96];
        snprintf(name, sizeof name, "adamw[lr%g,b1 %g,b2 %g,wd%g,scale%g]", (double)cases[ci].lr, (double)cases[ci].b1,
                 (double)cases[ci].b2, (double)cases[ci].wd, (double)cases[ci].scale);
        check(worst <= 1e-5, name, "%d steps, worst rel-L2 %.1e", steps, worst);
        free(w), free(m), free(v), free(w64), free(m64), free(v64);
    }
    cnn_adamw o = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .step = 0};
    float w = 1, g = 1, m = 0, v = 0;
    check(be->adamw_update(be, &o, 1, &w, &g, &m, &v, 1) == CNN_E_INVALID, "adamw.step0_invalid", NULL);
}

/* ---- more determinism --------------------------------------------------------------------------------------- */

static void test_determinism_misc(void) {
    /* channel_sum over many chunks, linear layers, xent: 1 vs 2 threads bitwise */
    int64_t m = quick ? 4001 : 40001;
    int c = 23;
    float *v = frand(m * c, -1, 1), s1[23], s2[23];
    ok(be->channel_sum(be, m, c, v, s1), "channel_sum");
    ok(be1->channel_sum(be1, m, c, v, s2), "channel_sum");
    double *want = d_alloc(c);
    for (int64_t i = 0; i < m * c; i++) want[i % c] += v[i];
    check(same_bits(s1, s2, c) && rel_l2(s1, want, c) <= FWD_TOL, "channel_sum.many_chunks_deterministic", NULL);
    cnn_linear ln = {.n = 64, .in = 512, .out = 100};
    float *x = frand(64 * 512, -1, 1), *w = frand(100 * 512, -1, 1), *dy = frand(64 * 100, -1, 1);
    float *out[2][4];
    for (int t = 0; t < 2; t++) {
        cnn_backend *b = t ? be1 : be;
        out[t][0] = fnan(64 * 100), out[t][1] = fnan(64 * 512), out[t][2] = fnan(100 * 512), out[t][3] = fnan(100);
        ok(b->linear_forward(b, &ln, x, w, NULL, out[t][0]), "linear");
        ok(b->linear_backward(b, &ln, x, w, dy, out[t][1], false, out[t][2], out[t][3]), "linear");
    }
    check(same_bits(out[0][0], out[1][0], 6400) && same_bits(out[0][1], out[1][1], 64 * 512) &&
              same_bits(out[0][2], out[1][2], 51200) && same_bits(out[0][3], out[1][3], 100),
          "linear.deterministic_1_vs_2_threads", NULL);
    for (int t = 0; t < 2; t++)
        for (int j = 0; j < 4; j++) free(out[t][j]);
    free(v), free(want), free(x), free(w), free(dy);
}

/* cnn_conv2d.choose_n (--deterministic's one call over a batch of slices, core/shards.h): the call must give each
 * image the bits of its slice's own call. 3x3 over 512 channels at 8x8: a slice of 4 images is a small-M GEMM
 * whose K (4608) is cut into three chunks added at the end, the batch of 32 a large-M one adding K blocks in one
 * chain (gemm.c), so one GEMM over the batch differs; fprop (+ residual), dgrad (accumulating) and a pair. */
static void test_conv_choose_n(void) {
    const int S = 8, m = 4;
    cnn_conv2d one, all;
    if (!cnn_conv2d_init(&one, m, 512, 8, 8, 64, 3, 3, 1, 1) || !cnn_conv2d_init(&all, S * m, 512, 8, 8, 64, 3, 3, 1, 1))
        return check(false, "conv.choose_n.init", NULL);
    all.choose_n = one.choose_n = m;
    const int64_t xs = (int64_t)m * 8 * 8 * 512, ys = (int64_t)m * 8 * 8 * 64, nw = 64 * 9 * 512;
    float *x = frand(S * xs, -1, 1), *w = frand(nw, -0.1f, 0.1f), *res = frand(S * ys, -1, 1), *dy = frand(S * ys, -1, 1);
    float *y1 = fnan(S * ys), *y2 = fnan(S * ys), *dx1 = frand(S * xs, -1, 1), *dx2 = fcopy(dx1, S * xs);
    float *p1 = fnan(S * ys), *p2 = fnan(S * ys);
    cnn_epilogue ep = {.residual = res, .relu = true}, e = ep;
    ok(be->conv2d_fprop(be, &all, &ep, x, w, y1), "conv.choose_n.fprop");
    ok(be->conv2d_dgrad(be, &all, dy, w, dx1, true), "conv.choose_n.dgrad");
    ok(be->conv2d_fprop_pair(be, &all, &all, NULL, x, w, x, w, p1), "conv.choose_n.pair");
    for (int j = 0; j < S; j++) {
        e.residual = res + j * ys;
        ok(be->conv2d_fprop(be, &one, &e, x + j * xs, w, y2 + j * ys), "conv.choose_n.fprop");
        ok(be->conv2d_dgrad(be, &one, dy + j * ys, w, dx2 + j * xs, true), "conv.choose_n.dgrad");
        ok(be->conv2d_fprop_pair(be, &one, &one, NULL, x + j * xs, w, x + j * xs, w, p2 + j * ys), "conv.choose_n.pair");
    }
    cnn_conv2d plain = all;
    plain.choose_n = 0; /* the control: one GEMM over the batch */
    float *y3 = fnan(S * ys);
    ok(be->conv2d_fprop(be, &plain, &ep, x, w, y3), "conv.choose_n.fprop");
    check(same_bits(y1, y2, S * ys) && same_bits(dx1, dx2, S * xs) && same_bits(p1, p2, S * ys),
          "conv.choose_n.slices_bitwise", NULL);
    check(!same_bits(y3, y2, S * ys), "conv.choose_n.one_gemm_differs", "the check above can fail");
    free(x), free(w), free(res), free(dy), free(y1), free(y2), free(y3), free(dx1), free(dx2), free(p1), free(p2);
}

int main(void) {
    quick = getenv("CNN_TEST_QUICK") && atoi(getenv("CNN_TEST_QUICK")) != 0;
    if (cnn_cpu_backend_create(2, &be) != CNN_OK || cnn_cpu_backend_create(1, &be1) != CNN_OK) {
        printf("FAIL backend.create: %s\n", cnn_error_msg());
        return 1;
    }
    printf("# %s, GEMM kernels: %s%s\n", be->device_name, cnn_cpu_isa_name(cnn_cpu_gemm_isa()), quick ? " (quick)" : "");
    double t0 = cnn_now();
    test_problems();
    test_memory();
    test_conv();
    test_conv_fast();
    test_conv_pair();
    test_conv_choose_n();
    test_bn();
    test_scale_shift();
    test_pointwise();
    test_dropout();
    test_flatten();
    test_pool();
    test_linear();
    test_xent();
    test_prep();
    test_sgd();
    test_adamw();
    test_determinism_misc();
    printf("# %.1f s\n", cnn_now() - t0);
    be->destroy(be);
    be1->destroy(be1);
    return test_finish();
}
