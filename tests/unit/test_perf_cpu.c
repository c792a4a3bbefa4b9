/* test_perf_cpu.c — speed of the CPU backend's GEMM and convolutions, in GFLOP/s, on 1 and 2 threads.
 *
 * Measures: square and conv-shaped SGEMMs; fprop/dgrad/wgrad of three training-shaped ResNet convolutions
 * (batch 8); and every convolution of a ResNet-18 inference pass at batch 32, 224x224 (the figure to compare
 * with PyTorch's CPU backend on the same machine). FLOPs = 2*N*P*Q*K*C*R*S per pass (cnn_conv2d_flops).
 * Each timing is the median of several runs after a warm-up (`best` is printed too: the machine may be
 * shared). The program passes iff every result is correct: each output is checked on a random sample of
 * elements recomputed in float64 here (full references would take minutes); speed never fails it.
 * Not run under the sanitizers (tests/run.sh skips test_perf*). CNN_TEST_QUICK=1 shrinks the work.
 */
#include "test.h"

#include "cpu/cpu.h"

static bool quick;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef cnn_status (*run_fn)(void *ctx, int threads);

/* median and best seconds of `reps` runs after one warm-up */
static cnn_status time_it(run_fn f, void *ctx, int threads, int reps, double *median, double *best) {
    double t[16];
    if (reps > 16) reps = 16;
    CNN_TRY(f(ctx, threads));
    for (int i = 0; i < reps; i++) {
        double t0 = cnn_now();
        CNN_TRY(f(ctx, threads));
        t[i] = cnn_now() - t0;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_double);
    *median = t[reps / 2];
    *best = t[0];
    return CNN_OK;
}

static float *frand(int64_t n, uint64_t seed) {
    float *p = malloc((size_t)n * sizeof(float));
    fill_uniform(p, n, seed, -1, 1);
    return p;
}

/* ---- GEMM ------------------------------------------------------------------------------------------------ */

typedef struct gemm_ctx {
    int64_t m, n, k;
    float *a, *b, *c;
} gemm_ctx;

static cnn_status run_gemm(void *p, int threads) {
    gemm_ctx *g = p;
    return cnn_cpu_sgemm(threads, g->m, g->n, g->k, g->a, g->k, 1, g->b, g->n, 1, g->c, g->n, false);
}

static void perf_gemm(int64_t m, int64_t n, int64_t k) {
    gemm_ctx g = {m, n, k, frand(m * k, 1), frand(k * n, 2), malloc((size_t)(m * n) * sizeof(float))};
    poison(g.c, m * n);
    for (int threads = 1; threads <= 2; threads++) {
        double med = 0, best = 0;
        cnn_status st = time_it(run_gemm, &g, threads, quick ? 3 : 7, &med, &best);
        double fl = 2.0 * m * n * k;
        printf("perf gemm %lldx%lldx%lld threads %d: %6.1f GFLOP/s (median; best %.1f)\n", (long long)m, (long long)n,
               (long long)k, threads, fl / med * 1e-9, fl / best * 1e-9);
        /* a sample of outputs in double */
        double num = 0, den = 0;
        for (int s = 0; s < 500; s++) {
            int64_t i = (int64_t)(rnd_uniform(7, s, 0, 1) * m) % m, j = (int64_t)(rnd_uniform(8, s, 0, 1) * n) % n;
            double acc = 0;
            for (int64_t l = 0; l < k; l++) acc += (double)g.a[i * k + l] * g.b[l * n + j];
            num += (g.c[i * n + j] - acc) * (g.c[i * n + j] - acc);
            den += acc * acc;
        }
        double e = isfinite(num) ? sqrt(num / den) : INFINITY;
        char name[96];
        snprintf(name, sizeof name, "perf.gemm[%lldx%lldx%lld,t%d].correct", (long long)m, (long long)n, (long long)k, threads);
        check(st == CNN_OK && e <= 1e-5, name, "sampled rel-L2 %.1e", e);
    }
    free(g.a), free(g.b), free(g.c);
}

/* ---- convolutions ---------------------------------------------------------------------------------------- */

typedef enum { FPROP, DGRAD, WGRAD } pass;
static const char *pass_name[] = {"fprop", "dgrad", "wgrad"};

typedef struct conv_ctx {
    cnn_conv2d cv;
    pass ps;
    cnn_epilogue ep;
    float *x, *w, *y; /* x (N,H,W,C) or dx; w or dw; y or dy */
} conv_ctx;

static cnn_status run_conv(void *p, int threads) {
    conv_ctx *c = p;
    switch (c->ps) {
    case FPROP: return cnn_cpu_conv2d_fprop(threads, &c->cv, &c->ep, c->x, c->w, c->y);
    case DGRAD: return cnn_cpu_conv2d_dgrad(threads, &c->cv, c->y, c->w, c->x, false);
    default: return cnn_cpu_conv2d_wgrad(threads, &c->cv, c->x, c->y, c->w);
    }
}

/* Sampled check of the pass's output against float64 sums computed here. */
static double conv_sample_error(const conv_ctx *c, float *xin, float *win, float *yin, uint64_t seed) {
    const cnn_conv2d *cv = &c->cv;
    double num = 0, den = 0;
    for (int s = 0; s < 300; s++) {
        double u[4];
        for (int t = 0; t < 4; t++) u[t] = rnd_uniform(seed, 4 * s + t, 0, 1);
        double acc = 0, got;
        if (c->ps == FPROP) {
            int n = (int)(u[0] * cv->n), p = (int)(u[1] * cv->p), q = (int)(u[2] * cv->q), k = (int)(u[3] * cv->k);
            for (int r = 0; r < cv->r; r++)
                for (int ss = 0; ss < cv->s; ss++) {
                    int h = p * cv->stride_h - cv->pad_h + r, w = q * cv->stride_w - cv->pad_w + ss;
                    if (h < 0 || h >= cv->h || w < 0 || w >= cv->w) continue;
                    for (int ch = 0; ch < cv->c; ch++)
                        acc += (double)xin[(((int64_t)n * cv->h + h) * cv->w + w) * cv->c + ch] *
                               win[(((int64_t)k * cv->r + r) * cv->s + ss) * cv->c + ch];
                }
            if (c->ep.shift) acc += c->ep.shift[k];
            if (c->ep.relu && acc < 0) acc = 0;
            got = c->y[(((int64_t)n * cv->p + p) * cv->q + q) * cv->k + k];
        } else if (c->ps == DGRAD) {
            int n = (int)(u[0] * cv->n), h = (int)(u[1] * cv->h), w = (int)(u[2] * cv->w), ch = (int)(u[3] * cv->c);
            for (int r = 0; r < cv->r; r++)
                for (int ss = 0; ss < cv->s; ss++) {
                    int ph = h + cv->pad_h - r, qw = w + cv->pad_w - ss;
                    if (ph < 0 || qw < 0 || ph % cv->stride_h || qw % cv->stride_w) continue;
                    int p = ph / cv->stride_h, q = qw / cv->stride_w;
                    if (p >= cv->p || q >= cv->q) continue;
                    for (int k = 0; k < cv->k; k++)
                        acc += (double)yin[(((int64_t)n * cv->p + p) * cv->q + q) * cv->k + k] *
                               win[(((int64_t)k * cv->r + r) * cv->s + ss) * cv->c + ch];
                }
            got = c->x[(((int64_t)n * cv->h + h) * cv->w + w) * cv->c + ch];
        } else {
            int k = (int)(u[0] * cv->k), r = (int)(u[1] * cv->r), ss = (int)(u[2] * cv->s), ch = (int)(u[3] * cv->c);
            for (int n = 0; n < cv->n; n++)
                for (int p = 0; p < cv->p; p++)
                    for (int q = 0; q < cv->q; q++) {
                        int h = p * cv->stride_h - cv->pad_h + r, w = q * cv->stride_w - cv->pad_w + ss;
                        if (h < 0 || h >= cv->h || w < 0 || w >= cv->w) continue;
                        acc += (double)xin[(((int64_t)n * cv->h + h) * cv->w + w) * cv->c + ch] *
                               yin[(((int64_t)n * cv->p + p) * cv->q + q) * cv->k + k];
                    }
            got = c->w[(((int64_t)k * cv->r + r) * cv->s + ss) * cv->c + ch];
        }
        num += (got - acc) * (got - acc);
        den += acc * acc;
    }
    return isfinite(num) && den > 0 ? sqrt(num / den) : INFINITY;
}

/* One convolution pass: time on `threads` threads, check a sample; returns seconds (median). */
static double perf_conv_pass(const cnn_conv2d *cv, pass ps, int threads, int reps, const char *label, bool print,
                             double *best_out) {
    int64_t nx = (int64_t)cv->n * cv->h * cv->w * cv->c, nw = (int64_t)cv->k * cv->r * cv->s * cv->c;
    int64_t ny = (int64_t)cv->n * cv->p * cv->q * cv->k;
    float *x = frand(nx, 11), *w = frand(nw, 12), *y = frand(ny, 13), *shift = frand(cv->k, 14);
    conv_ctx c = {.cv = *cv, .ps = ps, .ep = {.shift = shift, .relu = true}, .x = x, .w = w, .y = y};
    float *xin = NULL, *win = NULL, *yin = NULL;
    /* the pass overwrites one of the three; keep pristine copies of the inputs for the check */
    if (ps == FPROP) xin = x, win = w, c.y = malloc((size_t)ny * sizeof(float)), poison(c.y, ny);
    if (ps == DGRAD) yin = y, win = w, c.x = malloc((size_t)nx * sizeof(float)), poison(c.x, nx);
    if (ps == WGRAD) xin = x, yin = y, c.w = malloc((size_t)nw * sizeof(float)), poison(c.w, nw);
    double med = 0, best = 0;
    cnn_status st = time_it(run_conv, &c, threads, reps, &med, &best);
    double e = conv_sample_error(&c, xin, win, yin, 99 + ps);
    double fl = (double)cnn_conv2d_flops(cv);
    if (print)
        printf("perf conv %-28s %s threads %d: %6.1f GFLOP/s (median; best %.1f)\n", label, pass_name[ps], threads,
               fl / med * 1e-9, fl / best * 1e-9);
    char name[160];
    snprintf(name, sizeof name, "perf.conv[%s].%s.t%d.correct", label, pass_name[ps], threads);
    check(st == CNN_OK && e <= 1e-5, name, "sampled rel-L2 %.1e", e);
    if (ps == FPROP) free(c.y);
    if (ps == DGRAD) free(c.x);
    if (ps == WGRAD) free(c.w);
    free(x), free(w), free(y), free(shift);
    if (best_out) *best_out = best;
    return med;
}

static void perf_resnet18(int batch) {
    static const struct {
        int c, h, k, r, stride, pad, count;
    } layers[] = {
        {3, 224, 64, 7, 2, 3, 1},                                                           /* conv1   */
        {64, 56, 64, 3, 1, 1, 4},                                                           /* layer1  */
        {64, 56, 128, 3, 2, 1, 1},  {128, 28, 128, 3, 1, 1, 3}, {64, 56, 128, 1, 2, 0, 1},  /* layer2  */
        {128, 28, 256, 3, 2, 1, 1}, {256, 14, 256, 3, 1, 1, 3}, {128, 28, 256, 1, 2, 0, 1}, /* layer3  */
        {256, 14, 512, 3, 2, 1, 1}, {512, 7, 512, 3, 1, 1, 3},  {256, 14, 512, 1, 2, 0, 1}, /* layer4  */
    };
    for (int threads = 1; threads <= 2; threads++) {
        double secs = 0, best = 0, flops = 0;
        for (int i = 0; i < (int)(sizeof layers / sizeof layers[0]); i++) {
            cnn_conv2d cv;
            CNN_ASSERT(cnn_conv2d_init(&cv, batch, layers[i].c, layers[i].h, layers[i].h, layers[i].k, layers[i].r,
                                       layers[i].r, layers[i].stride, layers[i].pad));
            char label[96];
            snprintf(label, sizeof label, "r18 %dx%d %d->%d %dx%d/%d", layers[i].h, layers[i].h, layers[i].c,
                     layers[i].k, layers[i].r, layers[i].r, layers[i].stride);
            double b;
            double t = perf_conv_pass(&cv, FPROP, threads, quick ? 1 : 2, label, false, &b);
            secs += t * layers[i].count;
            best += b * layers[i].count;
            flops += (double)cnn_conv2d_flops(&cv) * layers[i].count;
        }
        printf("perf resnet18 inference convs, batch %d, 224x224, threads %d: %.1f GFLOP in %.2f s = %6.1f GFLOP/s "
               "(median per layer; best %.1f)\n",
               batch, threads, flops * 1e-9, secs, flops / secs * 1e-9, flops / best * 1e-9);
    }
}

int main(void) {
    quick = getenv("CNN_TEST_QUICK") && atoi(getenv("CNN_TEST_QUICK")) != 0;
    printf("# CPU GEMM kernels: %s\n", cnn_cpu_isa_name(cnn_cpu_gemm_isa()));
    double t0 = cnn_now();
    perf_gemm(1024, 1024, 1024);
    perf_gemm(25088, 64, 576);  /* 3x3 64->64 at 56x56, batch 8, as a GEMM */
    perf_gemm(64, 576, 25088);  /* its weight gradient                      */
    static const struct {
        int n, c, h, k, r, stride, pad;
        const char *label;
    } shapes[] = {
        {8, 64, 56, 64, 3, 1, 1, "64->64 3x3 56x56 b8"},
        {8, 3, 224, 64, 7, 2, 3, "stem 3->64 7x7/2 224 b8"},
        {8, 256, 56, 64, 1, 1, 0, "256->64 1x1 56x56 b8"},
        {8, 128, 28, 256, 3, 2, 1, "128->256 3x3/2 28 b8"},
    };
    for (int i = 0; i < (int)(sizeof shapes / sizeof shapes[0]); i++) {
        cnn_conv2d cv;
        CNN_ASSERT(cnn_conv2d_init(&cv, quick ? 2 : shapes[i].n, shapes[i].c, shapes[i].h, shapes[i].h, shapes[i].k,
                                   shapes[i].r, shapes[i].r, shapes[i].stride, shapes[i].pad));
        for (int ps = 0; ps < 3; ps++)
            for (int threads = 1; threads <= 2; threads++)
                perf_conv_pass(&cv, (pass)ps, threads, quick ? 2 : 5, shapes[i].label, true, NULL);
    }
    perf_resnet18(quick ? 2 : 32);
    printf("# %.1f s\n", cnn_now() - t0);
    return test_finish();
}
