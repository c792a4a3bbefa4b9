/* test_gpu_ops.c -- every op of the CUDA backend against the CPU backend (the oracle, fed the same rounded
 * inputs) and against a float64 reference computed here, for act dtypes F32, BF16 and F16; plus graph capture
 * and replay, determinism, the OOM path, kernel-cache corruption, timing and misuse.
 *
 * One line per check (tests/unit/test.h): PASS, FAIL with op, shape, dtype, config, rel-L2 against float64 and
 * against the CPU backend, max |error| with its coordinates and both values, the NaN count, guard-band damage
 * and whether an input was modified; SKIP with a reason when there is no GPU or no CPU backend.
 * Gates per dtype (rel-L2): f32 1e-5, bf16 1e-2, f16 2e-3; 0 NaN (outputs are pre-poisoned with NaN bytes); 0
 * bytes written outside an output (256-byte guard bands around every buffer); inputs unchanged.
 *
 * Each group runs in a forked child (the parent never touches CUDA), so a crash or a sticky device error in one
 * group is reported as that group's failure and the others still run.
 *     gpu_test_ops [--no-fork] [--dtype f32|bf16|f16|tf32] [group...]   (tf32: the conv_fast group with F32
 *     activations and TF32 convolutions; its fprop reference rounds the operands as the kernel does; f32: the
 *     same kernels multiplying in fp32 FMA, checked against the unrounded operands)
 * Groups: convert pointwise dropout flatten channel_sum bn scale_shift pool bn_pool bn_conv_sums conv conv_configs
 * conv_fast conv_first conv_pair conv_wgrad conv_wgrad_few conv_dgrad dgrad_relu linear xent prep resample jpeg
 * optim nonfinite guard graph determinism choose_n bn_ranks oom cache dry_run misc.
 * CNN_TEST_QUICK=1 runs fewer shapes (for the sanitizers).
 * CNN_TEST_CONV_ROW=text: conv_fast runs only the tensor-core configs whose name contains it (a sanitizer run on
 * one kernel family).
 */
#include "test.h"

#include "cnn/image.h"
#include "cuda/hooks.h"

#include <dirent.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <errno.h>
#include <strings.h>
#include <unistd.h>

static bool quick;
static bool no_cpu_warned;

/* ---- context ------------------------------------------------------------------------------------------- */

typedef struct ctx {
    cnn_backend *gpu; /* act dtype dt */
    cnn_backend *cpu; /* float32 oracle, or NULL when this build has none */
    cnn_dtype dt;
    const char *dts;
    double tol;
    bool tf32;       /* F32 activations, convolutions in TF32 (allow_tf32): the tensor-core forward */
    double tol_cpu;  /* bound against the CPU backend when it differs from tol (0: tol) */
    const char *tag; /* appended to conv test names (a path forced on), or NULL */
    bool once;       /* conv_one checks a pass that no forced fast row can change once per case (conv_fast) */
} ctx;

static const char *dt_str(cnn_dtype dt) {
    return dt == CNN_DTYPE_F32 ? "f32" : dt == CNN_DTYPE_BF16 ? "bf16" : dt == CNN_DTYPE_F16 ? "f16" : "?";
}
static double tol_of(cnn_dtype dt) { return dt == CNN_DTYPE_F32 ? 1e-5 : dt == CNN_DTYPE_BF16 ? 1e-2 : 2e-3; }

static _Noreturn void fatal(const char *what) {
    printf("FAIL %s: %s\n", what, cnn_error_msg());
    fflush(stdout);
    exit(3);
}

static float rnd(cnn_dtype dt, float v) {
    if (dt == CNN_DTYPE_BF16) return cnn_bf16_to_f32(cnn_f32_to_bf16(v));
    if (dt == CNN_DTYPE_F16) return cnn_f16_to_f32(cnn_f32_to_f16(v));
    return v;
}

static size_t esize(cnn_dtype dt) { return cnn_dtype_size(dt); }

static void to_bytes(cnn_dtype dt, const float *src, int64_t n, void *dst) {
    if (dt == CNN_DTYPE_F32) {
        memcpy(dst, src, (size_t)n * 4);
        return;
    }
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = dt == CNN_DTYPE_BF16 ? cnn_f32_to_bf16(src[i]) : cnn_f32_to_f16(src[i]);
}

static void from_bytes(cnn_dtype dt, const void *src, int64_t n, float *dst) {
    if (dt == CNN_DTYPE_F32) {
        memcpy(dst, src, (size_t)n * 4);
        return;
    }
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = dt == CNN_DTYPE_BF16 ? cnn_bf16_to_f32(s[i]) : cnn_f16_to_f32(s[i]);
}

static size_t count_of(int64_t n) { return n > 0 ? (size_t)n : 1; }

/* ---- device buffers with guard bands --------------------------------------------------------------------- */

#define GUARD 256
#define GUARD_BYTE 0xA5

typedef struct dbuf {
    cnn_backend *be;
    char *base;
    void *p;
    size_t bytes, off, total;
    unsigned char *shadow; /* what the body should hold if nobody writes it (inputs) */
} dbuf;

static dbuf buf_new(cnn_backend *be, size_t bytes, size_t misalign) {
    dbuf b = {.be = be, .bytes = bytes, .off = GUARD + misalign};
    b.total = bytes + 2 * GUARD + misalign;
    void *base;
    if (be->alloc(be, b.total, "test buffer", &base) != CNN_OK) fatal("alloc of a test buffer");
    b.base = base;
    b.p = b.base + b.off;
    unsigned char *h = malloc(b.total);
    memset(h, GUARD_BYTE, b.total);
    memset(h + b.off, 0xFF, bytes); /* NaN in f32, bf16 and f16 */
    if (be->upload(be, b.base, h, b.total) != CNN_OK) fatal("upload of a test buffer");
    free(h);
    return b;
}

static void buf_put(dbuf *b, const void *src) {
    if (b->be->upload(b->be, b->p, src, b->bytes) != CNN_OK) fatal("upload");
    free(b->shadow);
    b->shadow = malloc(b->bytes ? b->bytes : 1);
    memcpy(b->shadow, src, b->bytes);
}

static void buf_get(dbuf *b, void *dst) {
    if (b->be->download(b->be, dst, b->p, b->bytes) != CNN_OK) fatal("download");
}

/* bytes of the guard bands that no longer hold GUARD_BYTE */
static long buf_guard_damage(dbuf *b) {
    unsigned char *h = malloc(b->total);
    if (b->be->download(b->be, h, b->base, b->total) != CNN_OK) fatal("download of guard bands");
    long bad = 0;
    for (size_t i = 0; i < b->total; i++)
        if ((i < b->off || i >= b->off + b->bytes) && h[i] != GUARD_BYTE) bad++;
    free(h);
    return bad;
}

static bool buf_unchanged(dbuf *b) {
    if (!b->shadow) return true;
    unsigned char *h = malloc(b->bytes ? b->bytes : 1);
    buf_get(b, h);
    bool same = memcmp(h, b->shadow, b->bytes) == 0;
    free(h);
    return same;
}

static void buf_free(dbuf *b) {
    if (b->base) b->be->free(b->be, b->base);
    free(b->shadow);
    memset(b, 0, sizeof *b);
}

/* ---- arrays: host values + the GPU copy (act dtype or f32) + the CPU backend copy (f32) ---------------------- */

typedef struct arr {
    float *h;      /* host values (rounded to the act dtype when act) */
    int64_t n;
    bool act;
    dbuf g;
    void *c;       /* CPU backend buffer or NULL */
} arr;

static void fill(float *x, int64_t n, uint64_t seed, float lo, float hi) {
    for (int64_t i = 0; i < n; i++) x[i] = rnd_uniform(seed, i, lo, hi);
}

static arr arr_make(ctx *t, int64_t n, bool act, size_t misalign) {
    arr a = {.n = n, .act = act};
    a.h = calloc(count_of(n), sizeof(float));
    a.g = buf_new(t->gpu, (size_t)n * (act ? esize(t->dt) : 4), misalign);
    if (t->cpu && t->cpu->alloc(t->cpu, count_of(n) * 4, "cpu test buffer", &a.c) != CNN_OK)
        fatal("cpu alloc");
    return a;
}

/* upload a.h (after rounding it to the dtype) to both backends */
static void arr_sync_in(ctx *t, arr *a) {
    if (a->act)
        for (int64_t i = 0; i < a->n; i++) a->h[i] = rnd(t->dt, a->h[i]);
    void *bytes = malloc(count_of(a->n) * 4);
    if (a->act)
        to_bytes(t->dt, a->h, a->n, bytes);
    else
        memcpy(bytes, a->h, (size_t)a->n * 4);
    buf_put(&a->g, bytes);
    free(bytes);
    if (a->c && t->cpu->upload(t->cpu, a->c, a->h, (size_t)a->n * 4) != CNN_OK) fatal("cpu upload");
}

static arr arr_in(ctx *t, int64_t n, bool act, uint64_t seed, float lo, float hi, size_t misalign) {
    arr a = arr_make(t, n, act, misalign);
    fill(a.h, n, seed, lo, hi);
    arr_sync_in(t, &a);
    return a;
}

/* an output: NaN-poisoned on the GPU */
static arr arr_out(ctx *t, int64_t n, bool act, size_t misalign) { return arr_make(t, n, act, misalign); }

static float *arr_gpu(ctx *t, arr *a) {
    float *out = malloc(count_of(a->n) * 4);
    void *bytes = malloc(count_of(a->n) * 4);
    buf_get(&a->g, bytes);
    if (a->act)
        from_bytes(t->dt, bytes, a->n, out);
    else
        memcpy(out, bytes, (size_t)a->n * 4);
    free(bytes);
    return out;
}

static float *arr_cpu(ctx *t, arr *a) {
    if (!a->c) return NULL;
    float *out = malloc(count_of(a->n) * 4);
    if (t->cpu->download(t->cpu, out, a->c, (size_t)a->n * 4) != CNN_OK) fatal("cpu download");
    return out;
}

static void arr_free(ctx *t, arr *a) {
    buf_free(&a->g);
    if (a->c) t->cpu->free(t->cpu, a->c);
    free(a->h);
    memset(a, 0, sizeof *a);
}

/* raw device bytes (labels, pixels) on both backends */
typedef struct rawbuf {
    dbuf g;
    void *c;
} rawbuf;

static rawbuf raw_in(ctx *t, const void *data, size_t bytes) {
    rawbuf r = {.g = buf_new(t->gpu, bytes, 0)};
    buf_put(&r.g, data);
    if (t->cpu) {
        if (t->cpu->alloc(t->cpu, bytes ? bytes : 1, "cpu raw", &r.c) != CNN_OK) fatal("cpu alloc");
        if (t->cpu->upload(t->cpu, r.c, data, bytes) != CNN_OK) fatal("cpu upload");
    }
    return r;
}

static void raw_free(ctx *t, rawbuf *r) {
    buf_free(&r->g);
    if (r->c) t->cpu->free(t->cpu, r->c);
}

/* ---- comparison and report ---------------------------------------------------------------------------- */

typedef struct layout {
    const char *names; /* one letter per dim, outermost first: "NPQK" */
    int64_t dims[6];
} layout;

static void coords(const layout *l, int64_t i, char *buf, size_t cap) {
    int nd = l && l->names ? (int)strlen(l->names) : 0;
    if (nd == 0) {
        snprintf(buf, cap, "[%lld]", (long long)i);
        return;
    }
    int64_t c[6];
    for (int d = nd - 1; d >= 0; d--) {
        c[d] = i % l->dims[d];
        i /= l->dims[d];
    }
    size_t o = (size_t)snprintf(buf, cap, "(");
    for (int d = 0; d < nd && o < cap; d++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%c=%lld", d ? "," : "", l->names[d], (long long)c[d]);
    if (o < cap) snprintf(buf + o, cap - o, ")");
}

static double rel_err(const float *a, const double *ref, int64_t n, long *nonfinite) {
    double num = 0, den = 0;
    long bad = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) {
            bad++;
            continue;
        }
        double d = (double)a[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    if (nonfinite) *nonfinite = bad;
    if (bad) return INFINITY;
    if (den == 0) return num == 0 ? 0 : sqrt(num);
    return sqrt(num / den);
}

/* Check one output: gpu against ref (float64) and against cpu (the CPU backend, may be NULL). */
static bool report(const char *name, const float *gpu, const double *ref, const float *cpu, int64_t n, double tol,
                   double tol_cpu, const layout *l, long guard_damage, bool inputs_ok) {
    long nan_g = 0, nan_c = 0;
    double e_ref = rel_err(gpu, ref, n, &nan_g);
    double e_cpu = -1, e_cpu_ref = -1;
    double *cd = NULL;
    if (cpu) {
        cd = malloc(count_of(n) * sizeof *cd);
        for (int64_t i = 0; i < n; i++) cd[i] = cpu[i];
        e_cpu = rel_err(gpu, cd, n, NULL);
        e_cpu_ref = rel_err(cpu, ref, n, &nan_c);
    }
    /* worst element and first NaN */
    int64_t worst = -1, first_nan = -1;
    double wd = -1;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(gpu[i])) {
            if (first_nan < 0) first_nan = i;
            continue;
        }
        double d = fabs((double)gpu[i] - ref[i]);
        if (d > wd) wd = d, worst = i;
    }
    bool ok = nan_g == 0 && guard_damage == 0 && inputs_ok && e_ref <= tol && (!cpu || e_cpu <= tol_cpu);
    char detail[700], at[96];
    size_t o = (size_t)snprintf(detail, sizeof detail, "rel_l2 %.2e vs f64", e_ref);
    if (cpu)
        o += (size_t)snprintf(detail + o, sizeof detail - o, ", %.2e vs cpu (cpu vs f64 %.2e%s)", e_cpu, e_cpu_ref,
                              nan_c ? ", CPU HAS NaN" : "");
    else
        o += (size_t)snprintf(detail + o, sizeof detail - o, ", no cpu backend");
    if (tol_cpu != tol)
        o += (size_t)snprintf(detail + o, sizeof detail - o, ", bound %.0e (vs cpu %.0e), n %lld", tol, tol_cpu, (long long)n);
    else
        o += (size_t)snprintf(detail + o, sizeof detail - o, ", bound %.0e, n %lld", tol, (long long)n);
    if (worst >= 0) {
        coords(l, worst, at, sizeof at);
        o += (size_t)snprintf(detail + o, sizeof detail - o, "; max|d| %.3g at %s gpu %.7g f64 %.7g%s", wd, at,
                              gpu[worst], ref[worst], cpu ? "" : "");
        if (cpu && o < sizeof detail) o += (size_t)snprintf(detail + o, sizeof detail - o, " cpu %.7g", cpu[worst]);
    }
    if (nan_g && o < sizeof detail) {
        coords(l, first_nan, at, sizeof at);
        o += (size_t)snprintf(detail + o, sizeof detail - o, "; %ld NON-FINITE, first at %s", nan_g, at);
    }
    if (guard_damage && o < sizeof detail)
        o += (size_t)snprintf(detail + o, sizeof detail - o, "; %ld GUARD BYTES OVERWRITTEN", guard_damage);
    if (!inputs_ok && o < sizeof detail) snprintf(detail + o, sizeof detail - o, "; AN INPUT WAS MODIFIED");
    check(ok, name, "%s", detail);
    free(cd);
    return ok;
}

/* check an output array against ref; inputs listed must be unchanged */
/* verify with explicit bounds against float64 and against the CPU backend */
static bool verify_bounds(ctx *t, const char *name, arr *out, const double *ref, const layout *l, arr **inputs,
                          int n_in, double tol, double tol_cpu) {
    float *g = arr_gpu(t, out);
    float *c = arr_cpu(t, out);
    long dmg = buf_guard_damage(&out->g);
    bool in_ok = true;
    for (int i = 0; i < n_in; i++)
        if (inputs[i]) {
            in_ok &= buf_unchanged(&inputs[i]->g);
            dmg += buf_guard_damage(&inputs[i]->g);
        }
    bool ok = report(name, g, ref, c, out->n, tol, tol_cpu, l, dmg, in_ok);
    free(g);
    free(c);
    return ok;
}

static bool verify(ctx *t, const char *name, arr *out, const double *ref, const layout *l, arr **inputs, int n_in) {
    const double tol = out->act ? t->tol : 1e-5;
    return verify_bounds(t, name, out, ref, l, inputs, n_in, tol, t->tol_cpu > 0 ? t->tol_cpu : tol);
}

static void expect_ok(cnn_status st, const char *what) {
    if (st != CNN_OK) {
        printf("FAIL %s: returned %s: %s\n", what, cnn_status_str(st), cnn_error_msg());
        fflush(stdout);
        test_failed++;
    }
}

static bool cpu_ok(ctx *t, cnn_status st, const char *what) {
    if (st == CNN_OK) return true;
    printf("# %s: the CPU backend returned %s (%s); comparing against float64 only\n", what, cnn_status_str(st),
           cnn_error_msg());
    cnn_error_clear();
    (void)t;
    return false;
}

static double *dalloc(int64_t n) { return calloc(count_of(n), sizeof(double)); }

/* ---- convert -------------------------------------------------------------------------------------------- */

static void g_convert(ctx *t) {
    if (t->dt == CNN_DTYPE_F32) {
        /* a plain copy */
        arr src = arr_in(t, 1001, false, 11, -3, 3, 0), dst = arr_out(t, 1001, true, 0);
        expect_ok(t->gpu->to_act(t->gpu, 1001, src.g.p, dst.g.p), "convert.to_act.f32");
        if (t->cpu) cpu_ok(t, t->cpu->to_act(t->cpu, 1001, src.c, dst.c), "convert.to_act.f32");
        double *ref = dalloc(1001);
        for (int i = 0; i < 1001; i++) ref[i] = src.h[i];
        arr *in[] = {&src};
        verify(t, "convert.to_act.f32", &dst, ref, NULL, in, 1);
        free(ref);
        arr_free(t, &src);
        arr_free(t, &dst);
        return;
    }
    /* bitwise against the host conversions, incl. ties, subnormals, overflow, -0 */
    const int64_t n = 4099;
    for (int mis = 0; mis < 2; mis++) {
        arr src = arr_make(t, n, false, mis ? 4 : 0);
        for (int64_t i = 0; i < n; i++) {
            float v = rnd_uniform(71, i, -4, 4);
            switch (i % 8) {
            case 1: v *= 1e-6f; break;   /* f16 subnormal range */
            case 2: v *= 3e4f; break;    /* f16 overflow */
            case 3: v = -0.0f; break;
            case 4: v = 1.0f + (float)(i % 3) / 256.0f; break; /* bf16 ties */
            case 5: v = 1.0f + (float)(i % 3) / 2048.0f; break; /* f16 ties */
            default: break;
            }
            src.h[i] = v;
        }
        arr_sync_in(t, &src);
        dbuf dst = buf_new(t->gpu, (size_t)n * 2, mis ? 2 : 0);
        char name[64];
        snprintf(name, sizeof name, "convert.to_act.%s%s", t->dts, mis ? ".misaligned" : "");
        expect_ok(t->gpu->to_act(t->gpu, n, src.g.p, dst.p), name);
        uint16_t *got = malloc((size_t)n * 2);
        buf_get(&dst, got);
        int64_t bad = 0, first = -1;
        for (int64_t i = 0; i < n; i++) {
            uint16_t want = t->dt == CNN_DTYPE_BF16 ? cnn_f32_to_bf16(src.h[i]) : cnn_f32_to_f16(src.h[i]);
            if (got[i] != want) {
                bad++;
                if (first < 0) first = i;
            }
        }
        long dmg = buf_guard_damage(&dst);
        check(bad == 0 && dmg == 0, name, "%lld of %lld differ from the host conversion%s%s (first [%lld]: %g -> %04x, host %04x); guard damage %ld",
              (long long)bad, (long long)n, "", "", (long long)first, first >= 0 ? src.h[first] : 0.0,
              first >= 0 ? got[first] : 0,
              first >= 0 ? (t->dt == CNN_DTYPE_BF16 ? cnn_f32_to_bf16(src.h[first]) : cnn_f32_to_f16(src.h[first])) : 0,
              dmg);
        /* and back */
        dbuf back = buf_new(t->gpu, (size_t)n * 4, mis ? 4 : 0);
        snprintf(name, sizeof name, "convert.from_act.%s%s", t->dts, mis ? ".misaligned" : "");
        expect_ok(t->gpu->from_act(t->gpu, n, dst.p, back.p), name);
        float *f = malloc((size_t)n * 4);
        buf_get(&back, f);
        bad = 0;
        first = -1;
        for (int64_t i = 0; i < n; i++) {
            float want = t->dt == CNN_DTYPE_BF16 ? cnn_bf16_to_f32(got[i]) : cnn_f16_to_f32(got[i]);
            if (memcmp(&want, &f[i], 4) != 0) {
                bad++;
                if (first < 0) first = i;
            }
        }
        dmg = buf_guard_damage(&back);
        check(bad == 0 && dmg == 0, name, "%lld of %lld differ (first [%lld]); guard damage %ld", (long long)bad,
              (long long)n, (long long)first, dmg);
        free(f);
        free(got);
        buf_free(&dst);
        buf_free(&back);
        arr_free(t, &src);
    }
}

/* ---- pointwise ------------------------------------------------------------------------------------------ */

static void g_pointwise(ctx *t) {
    const int64_t counts[] = {1, 7, 1000, 100003};
    int ncount = quick ? 2 : 4;
    size_t mis_act = esize(t->dt); /* one element off: forces the scalar config */
    for (int ci = 0; ci < ncount; ci++) {
        for (int mis = 0; mis < 2; mis++) {
            int64_t n = counts[ci];
            size_t m = mis ? mis_act : 0;
            char name[96];
            layout l = {0};
            /* relu forward */
            arr x = arr_in(t, n, true, 100 + ci, -2, 2, m), y = arr_out(t, n, true, m);
            double *ref = dalloc(n);
            for (int64_t i = 0; i < n; i++) ref[i] = x.h[i] > 0 ? x.h[i] : 0;
            snprintf(name, sizeof name, "relu_forward.%s.n%lld%s", t->dts, (long long)n, mis ? ".misaligned" : "");
            expect_ok(t->gpu->relu_forward(t->gpu, n, x.g.p, y.g.p), name);
            if (t->cpu) cpu_ok(t, t->cpu->relu_forward(t->cpu, n, x.c, y.c), name);
            arr *in1[] = {&x};
            verify(t, name, &y, ref, &l, in1, 1);
            /* relu backward, both accumulate modes; y from the forward */
            for (int acc = 0; acc < 2; acc++) {
                arr yy = arr_in(t, n, true, 200 + ci, -1, 1, m);
                for (int64_t i = 0; i < n; i++)
                    if (i % 5 == 0) yy.h[i] = 0.0f; /* exact zeros: dx must be 0 there */
                arr_sync_in(t, &yy);
                arr dy = arr_in(t, n, true, 300 + ci, -1, 1, m);
                arr dx = acc ? arr_in(t, n, true, 400 + ci, -1, 1, m) : arr_out(t, n, true, m);
                for (int64_t i = 0; i < n; i++) ref[i] = (acc ? dx.h[i] : 0.0) + (yy.h[i] > 0 ? dy.h[i] : 0.0);
                snprintf(name, sizeof name, "relu_backward.%s.n%lld%s%s", t->dts, (long long)n, acc ? ".acc" : "",
                         mis ? ".misaligned" : "");
                expect_ok(t->gpu->relu_backward(t->gpu, n, yy.g.p, dy.g.p, dx.g.p, acc), name);
                if (t->cpu) cpu_ok(t, t->cpu->relu_backward(t->cpu, n, yy.c, dy.c, dx.c, acc), name);
                arr *in2[] = {&yy, &dy};
                verify(t, name, &dx, ref, &l, in2, 2);
                arr_free(t, &yy);
                arr_free(t, &dy);
                arr_free(t, &dx);
            }
            /* add */
            arr b = arr_in(t, n, true, 500 + ci, -2, 2, m), s = arr_out(t, n, true, m);
            for (int64_t i = 0; i < n; i++) ref[i] = (double)x.h[i] + b.h[i];
            snprintf(name, sizeof name, "add_forward.%s.n%lld%s", t->dts, (long long)n, mis ? ".misaligned" : "");
            expect_ok(t->gpu->add_forward(t->gpu, n, x.g.p, b.g.p, s.g.p), name);
            if (t->cpu) cpu_ok(t, t->cpu->add_forward(t->cpu, n, x.c, b.c, s.c), name);
            arr *in3[] = {&x, &b};
            verify(t, name, &s, ref, &l, in3, 2);
            /* pass backward */
            for (int acc = 0; acc < 2; acc++) {
                arr dx = acc ? arr_in(t, n, true, 600 + ci, -1, 1, m) : arr_out(t, n, true, m);
                for (int64_t i = 0; i < n; i++) ref[i] = (acc ? dx.h[i] : 0.0) + b.h[i];
                snprintf(name, sizeof name, "pass_backward.%s.n%lld%s%s", t->dts, (long long)n, acc ? ".acc" : "",
                         mis ? ".misaligned" : "");
                expect_ok(t->gpu->pass_backward(t->gpu, n, b.g.p, dx.g.p, acc), name);
                if (t->cpu) cpu_ok(t, t->cpu->pass_backward(t->cpu, n, b.c, dx.c, acc), name);
                arr *in4[] = {&b};
                verify(t, name, &dx, ref, &l, in4, 1);
                arr_free(t, &dx);
            }
            free(ref);
            arr_free(t, &x);
            arr_free(t, &y);
            arr_free(t, &b);
            arr_free(t, &s);
        }
    }
}

/* ---- dropout -------------------------------------------------------------------------------------------- */

static void g_dropout(ctx *t) {
    const float ps[] = {0.0f, 0.1f, 0.5f, 0.9f};
    const int64_t counts[] = {1, 13, 100003};
    for (int pi = 0; pi < 4; pi++) {
        for (int ci = 0; ci < (quick ? 2 : 3); ci++) {
            for (int mis = 0; mis < 2; mis++) {
                int64_t n = counts[ci];
                float p = ps[pi];
                uint64_t seed = 0x1234567890ULL + (uint64_t)pi * 77 + (uint64_t)ci;
                size_t m = mis ? esize(t->dt) : 0;
                char name[96];
                arr x = arr_in(t, n, true, 700 + ci, 0.5f, 2, m); /* nonzero: 0 out <=> dropped */
                arr y = arr_out(t, n, true, m);
                double *ref = dalloc(n);
                float scale = 1.0f / (1.0f - p);
                for (int64_t i = 0; i < n; i++) ref[i] = cnn_dropout_keep(seed, i, p) ? (double)x.h[i] * scale : 0.0;
                snprintf(name, sizeof name, "dropout_forward.%s.p%.1f.n%lld%s", t->dts, (double)p, (long long)n,
                         mis ? ".misaligned" : "");
                expect_ok(t->gpu->dropout_forward(t->gpu, n, p, seed, x.g.p, y.g.p), name);
                if (t->cpu) cpu_ok(t, t->cpu->dropout_forward(t->cpu, n, p, seed, x.c, y.c), name);
                arr *in1[] = {&x};
                verify(t, name, &y, ref, NULL, in1, 1);
                /* the mask, bitwise */
                float *g = arr_gpu(t, &y);
                int64_t wrong = 0, first = -1;
                for (int64_t i = 0; i < n; i++)
                    if ((g[i] != 0.0f) != cnn_dropout_keep(seed, i, p)) {
                        wrong++;
                        if (first < 0) first = i;
                    }
                snprintf(name, sizeof name, "dropout_mask.%s.p%.1f.n%lld%s", t->dts, (double)p, (long long)n,
                         mis ? ".misaligned" : "");
                check(wrong == 0, name, "%lld of %lld mask bits differ from cnn_dropout_keep (first [%lld])",
                      (long long)wrong, (long long)n, (long long)first);
                free(g);
                for (int acc = 0; acc < 2; acc++) {
                    arr dy = arr_in(t, n, true, 800 + ci, -1, 1, m);
                    arr dx = acc ? arr_in(t, n, true, 900 + ci, -1, 1, m) : arr_out(t, n, true, m);
                    for (int64_t i = 0; i < n; i++)
                        ref[i] = (acc ? dx.h[i] : 0.0) + (cnn_dropout_keep(seed, i, p) ? (double)dy.h[i] * scale : 0.0);
                    snprintf(name, sizeof name, "dropout_backward.%s.p%.1f.n%lld%s%s", t->dts, (double)p, (long long)n,
                             acc ? ".acc" : "", mis ? ".misaligned" : "");
                    expect_ok(t->gpu->dropout_backward(t->gpu, n, p, seed, dy.g.p, dx.g.p, acc), name);
                    if (t->cpu) cpu_ok(t, t->cpu->dropout_backward(t->cpu, n, p, seed, dy.c, dx.c, acc), name);
                    arr *in2[] = {&dy};
                    verify(t, name, &dx, ref, NULL, in2, 1);
                    arr_free(t, &dy);
                    arr_free(t, &dx);
                }
                free(ref);
                arr_free(t, &x);
                arr_free(t, &y);
            }
        }
    }
}

/* ---- flatten -------------------------------------------------------------------------------------------- */

static void g_flatten(ctx *t) {
    const cnn_shape shapes[] = {{2, 5, 3, 7}, {1, 512, 7, 7}, {3, 1, 4, 4}, {2, 6, 1, 1}, {1, 3, 2, 1}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        cnn_shape s = shapes[si];
        int64_t n = cnn_shape_numel(s), hw = (int64_t)s.h * s.w;
        char name[96];
        arr x = arr_in(t, n, true, 1000 + si, -2, 2, 0), y = arr_out(t, n, true, 0);
        double *ref = dalloc(n);
        for (int in = 0; in < s.n; in++)
            for (int c = 0; c < s.c; c++)
                for (int64_t p = 0; p < hw; p++) ref[(int64_t)in * s.c * hw + c * hw + p] = x.h[((int64_t)in * hw + p) * s.c + c];
        layout l = {"NF", {s.n, (int64_t)s.c * hw}};
        snprintf(name, sizeof name, "flatten_forward.%s.n%d_c%d_h%d_w%d", t->dts, s.n, s.c, s.h, s.w);
        expect_ok(t->gpu->flatten_forward(t->gpu, s, x.g.p, y.g.p), name);
        if (t->cpu) cpu_ok(t, t->cpu->flatten_forward(t->cpu, s, x.c, y.c), name);
        arr *in1[] = {&x};
        verify(t, name, &y, ref, &l, in1, 1);
        for (int acc = 0; acc < 2; acc++) {
            arr dx = acc ? arr_in(t, n, true, 1100 + si, -1, 1, 0) : arr_out(t, n, true, 0);
            for (int in = 0; in < s.n; in++)
                for (int c = 0; c < s.c; c++)
                    for (int64_t p = 0; p < hw; p++) {
                        int64_t o = ((int64_t)in * hw + p) * s.c + c;
                        ref[o] = (acc ? dx.h[o] : 0.0) + x.h[(int64_t)in * s.c * hw + c * hw + p];
                    }
            layout l2 = {"NHWC", {s.n, s.h, s.w, s.c}};
            snprintf(name, sizeof name, "flatten_backward.%s.n%d_c%d_h%d_w%d%s", t->dts, s.n, s.c, s.h, s.w,
                     acc ? ".acc" : "");
            expect_ok(t->gpu->flatten_backward(t->gpu, s, x.g.p, dx.g.p, acc), name);
            if (t->cpu) cpu_ok(t, t->cpu->flatten_backward(t->cpu, s, x.c, dx.c, acc), name);
            verify(t, name, &dx, ref, &l2, in1, 1);
            arr_free(t, &dx);
        }
        free(ref);
        arr_free(t, &x);
        arr_free(t, &y);
    }
}

/* ---- channel_sum ---------------------------------------------------------------------------------------- */

static void g_channel_sum(ctx *t) {
    const struct {
        int64_t m;
        int c;
    } cases[] = {{1, 3}, {777, 17}, {5000, 64}, {3, 130}, {20000, 5}, {100, 2048},
                 /* C % 8 == 0: one row, a few rows, 200 channels over many rows */
                 {1, 8}, {7, 24}, {40000, 200}};
    for (size_t k = 0; k < (quick ? 3 : sizeof cases / sizeof cases[0]); k++) {
        int64_t m = cases[k].m;
        int c = cases[k].c;
        arr dy = arr_in(t, m * c, true, 1200 + k, -1, 1.5f, 0);
        arr out = arr_out(t, c, false, 0);
        double *ref = dalloc(c);
        for (int64_t r = 0; r < m; r++)
            for (int j = 0; j < c; j++) ref[j] += dy.h[r * c + j];
        char name[96];
        snprintf(name, sizeof name, "channel_sum.%s.m%lld_c%d", t->dts, (long long)m, c);
        expect_ok(t->gpu->channel_sum(t->gpu, m, c, dy.g.p, out.g.p), name);
        if (t->cpu) cpu_ok(t, t->cpu->channel_sum(t->cpu, m, c, dy.c, out.c), name);
        layout l = {"C", {c}};
        arr *in[] = {&dy};
        /* float32 output, but the inputs carry the dtype's rounding only: fp32 accuracy expected */
        verify(t, name, &out, ref, &l, in, 1);
        free(ref);
        arr_free(t, &dy);
        arr_free(t, &out);
    }
    /* channel_sum_rows (--deterministic's bias gradients by slices): each row bit for bit channel_sum over its slice
     * alone, in one call; rows cnn_sum_rows(C) apart, NaN-poisoned, the floats between them left so; a slice's rows
     * odd and, for 17 channels, more than one chunk (the partial pass's chunks restart at each slice) */
    static const struct {
        int slices;
        int64_t rows;
        int c;
    } rcases[] = {{8, 64, 10} /* the CIFAR classifier's dbias at b512 */, {4, 777, 17}, {2, 3, 130}, {8, 5, 8}};
    for (size_t k = 0; k < sizeof rcases / sizeof rcases[0]; k++) {
        const int S = rcases[k].slices, c = rcases[k].c;
        const int64_t rows = rcases[k].rows, m = S * rows, stride = cnn_sum_rows(c);
        arr dy = arr_in(t, m * c, true, 1230 + k, -1, 1.5f, 0);
        arr whole = arr_out(t, S * stride, false, 0), one = arr_out(t, S * stride, false, 0);
        char name[96];
        snprintf(name, sizeof name, "channel_sum_rows.%s.%dx%lld_c%d", t->dts, S, (long long)rows, c);
        expect_ok(t->gpu->channel_sum_rows(t->gpu, S, m, c, dy.g.p, (float *)whole.g.p, stride), name);
        for (int j = 0; j < S; j++)
            expect_ok(t->gpu->channel_sum(t->gpu, rows, c, (const char *)dy.g.p + j * rows * c * esize(t->dt),
                                          (float *)one.g.p + j * stride),
                      name);
        float *a = arr_gpu(t, &whole), *o = arr_gpu(t, &one);
        int64_t differ = 0, nan = 0, gaps = 0;
        for (int64_t i = 0; i < S * stride; i++) {
            if (i % stride >= c) { /* between the rows: nobody's */
                gaps += !isnan(a[i]);
                continue;
            }
            nan += isnan(a[i]) || isnan(o[i]);
            differ += memcmp(&a[i], &o[i], 4) != 0;
        }
        check(differ == 0 && nan == 0 && gaps == 0, name, "one call against %d channel_sums: %lld of %lld differ, %lld "
              "NaN, %lld floats between the rows written", S, (long long)differ, (long long)(S * c), (long long)nan,
              (long long)gaps);
        free(a), free(o);
        arr_free(t, &dy), arr_free(t, &whole), arr_free(t, &one);
    }
}

/* ---- batch norm ----------------------------------------------------------------------------------------- */

/* Synchronised BatchNorm's collective, as SYNC_WORLD ranks holding the same rows would sum: each float64 sum
 * times SYNC_WORLD. The statistics and dx then equal one rank's; the running variance takes the group's count
 * (M * SYNC_WORLD - 1); dgamma and dbeta stay this rank's. Every call is counted. */
#define SYNC_WORLD 2
static int64_t replica_sums;
static cnn_status replica_allreduce(cnn_backend *be, void *comm, void *x, int64_t count, cnn_comm_op op, bool side) {
    CNN_ASSERT(op == CNN_COMM_SUM_F64 && !side && count > 0);
    double *h = malloc((size_t)count * sizeof *h);
    if (!h) return CNN_E_OOM;
    cnn_status st = be->download(be, h, x, (size_t)count * sizeof *h);
    for (int64_t i = 0; i < count; i++) h[i] *= SYNC_WORLD;
    if (st == CNN_OK) st = be->upload(be, x, h, (size_t)count * sizeof *h);
    free(h);
    replica_sums++;
    return st;
}

/* both backends' collectives replaced by replica_allreduce, and put back */
typedef struct replica_hooks {
    cnn_status (*gpu)(cnn_backend *, void *, void *, int64_t, cnn_comm_op, bool);
    cnn_status (*cpu)(cnn_backend *, void *, void *, int64_t, cnn_comm_op, bool);
} replica_hooks;
static replica_hooks replica_install(ctx *t) {
    replica_hooks h = {t->gpu->comm_allreduce, t->cpu ? t->cpu->comm_allreduce : NULL};
    t->gpu->comm_allreduce = replica_allreduce;
    if (t->cpu) t->cpu->comm_allreduce = replica_allreduce;
    return h;
}
static void replica_restore(ctx *t, replica_hooks h) {
    t->gpu->comm_allreduce = h.gpu;
    if (t->cpu) t->cpu->comm_allreduce = h.cpu;
}

/* BatchNorm in training, alone and with what follows it fused (y = relu?(bn(x) + residual)), forward and backward
 * (from y's ReLU mask, the residual's gradient accumulated onto what was there), against float64 and the CPU
 * backend; C % 8 == 0 runs the vector kernels (16-byte aligned operands), other C the scalar ones. A vector case
 * runs each pass in one cooperative launch (the fused kernels, counted) unless `three` forces the three launches.
 * The sync cases synchronise over SYNC_WORLD replicas (replica_allreduce): the sums must go through the
 * collective. */
/* The float64 reference of a training BatchNorm forward over x (M, C), y = relu?(xhat * gamma + beta + res) (res
 * NULL: none): the saved statistics, the running ones updated with momentum 0.1 (the unbiased variance over mm
 * rows: all the ranks'), and y. */
typedef struct bn_ref {
    double *mean, *var, *inv, *rm, *rv, *y;
} bn_ref;
static bn_ref bn_forward_ref(const float *x, const float *res, bool relu, int64_t m, int c, int64_t mm,
                             const arr *gamma, const arr *beta, const arr *rm, const arr *rv) {
    bn_ref r = {dalloc(c), dalloc(c), dalloc(c), dalloc(c), dalloc(c), dalloc(m * c)};
    for (int j = 0; j < c; j++) {
        double s = 0;
        for (int64_t i = 0; i < m; i++) s += x[i * c + j];
        r.mean[j] = s / m;
        double v = 0;
        for (int64_t i = 0; i < m; i++) v += (x[i * c + j] - r.mean[j]) * (x[i * c + j] - r.mean[j]);
        r.var[j] = v / m;
        r.inv[j] = 1.0 / sqrt(r.var[j] + 1e-5);
        r.rm[j] = 0.9 * rm->h[j] + 0.1 * r.mean[j];
        r.rv[j] = 0.9 * rv->h[j] + 0.1 * (mm > 1 ? r.var[j] * mm / (mm - 1) : r.var[j]);
        for (int64_t i = 0; i < m; i++) {
            const double v2 = (x[i * c + j] - r.mean[j]) * r.inv[j] * gamma->h[j] + beta->h[j] + (res ? res[i * c + j] : 0);
            r.y[i * c + j] = relu && v2 < 0 ? 0 : v2;
        }
    }
    return r;
}
static void bn_ref_free(bn_ref *r) { free(r->mean), free(r->var), free(r->inv), free(r->rm), free(r->rv), free(r->y); }

/* a training BatchNorm forward's outputs against its reference: y (inputs `in` unchanged), the saved statistics, the
 * running ones */
static void verify_bn_forward(ctx *t, const char *name, const bn_ref *r, arr *y, arr *sm, arr *si, arr *rm, arr *rv,
                              int64_t m, int c, arr **in, int n_in) {
    layout l = {"MC", {m, c}}, lc = {"C", {c}};
    char nm[240];
    snprintf(nm, sizeof nm, "%s.y", name);
    verify(t, nm, y, r->y, &l, in, n_in);
    snprintf(nm, sizeof nm, "%s.save_mean", name);
    verify(t, nm, sm, r->mean, &lc, in, 0);
    snprintf(nm, sizeof nm, "%s.save_invstd", name);
    verify(t, nm, si, r->inv, &lc, in, 0);
    snprintf(nm, sizeof nm, "%s.running_mean", name);
    verify(t, nm, rm, r->rm, &lc, in, 0);
    snprintf(nm, sizeof nm, "%s.running_var", name);
    verify(t, nm, rv, r->rv, &lc, in, 0);
}

static void g_bn(ctx *t) {
    const struct {
        int64_t m;
        int c;
        float offset;
        bool sync, three;
        int shards; /* cnn_backend.batch_shards: --deterministic's slices (core/shards.h) */
    } cases[] = {{8 * 4 * 3, 24, 0.5f, false, false, 4},
                 {4 * 5 * 6, 16, 1.0f, true, false, 2},
                 {3 * 5 * 7, 13, 0, false, false, 0},
                 {2, 3, 0, false, false, 0} /* M = 2: dx cancels almost completely */,
                 {2 * 16 * 16, 64, 0.5f, false, false, 0},
                 {2 * 16 * 16, 64, 0.5f, false, true, 0},
                 {5 * 6, 24, 1.0f, true, false, 0},
                 {4096, 7, 10.0f, false, false, 0},
                 {1 * 7 * 7, 136, -3, false, false, 0},
                 {1 * 7 * 7, 136, -3, false, true, 0},
                 {9 * 11, 2056, 0.25f, false, false, 0} /* two groups of vectors */,
                 {3 * 5 * 7, 13, 0, true, false, 0},
                 {4 * 5 * 7, 13, 0, false, false, 4} /* slices, scalar kernels */};
    const replica_hooks saved = replica_install(t);
    /* mask: the GPU keeps the ReLU's bits (cnn_bn.relu_mask, poisoned to all ones before the forward); they must be
     * y > 0 of the forward's y, and the backward must read them: its y is a poison that would mask every gradient */
    static const struct {
        bool residual, relu, mask;
        const char *tag;
    } fused[] = {{false, false, false, ""},          {false, true, true, ".relu.mask"},
                 {true, true, false, ".residual_relu"}, {false, true, false, ".relu"},
                 {true, false, false, ".residual"},  {true, true, true, ".residual_relu.mask"}};
    static int sync_token; /* the communicator replica_allreduce is handed */
    for (size_t k = 0; k < (quick ? 7 : sizeof cases / sizeof cases[0]); k++)
        for (size_t f = 0; f < (quick ? 3 : sizeof fused / sizeof fused[0]); f++) {
            const bool use_res = fused[f].residual, relu = fused[f].relu, sync = cases[k].sync, masked = fused[f].mask;
            int64_t m = cases[k].m;
            int c = cases[k].c;
            t->gpu->batch_shards = cases[k].shards;
            if (t->cpu) t->cpu->batch_shards = cases[k].shards;
            /* one launch per pass: the vector path (every operand of the arenas is 16-byte aligned), one rank; with
             * slices where a cooperative grid holds them: surely with 8 SMs or more (a slice's chunks at most its
             * eighth of the grid: batchnorm.c, plan_slices), perhaps with fewer (either count passes then) */
            const long one_launch = c % 8 == 0 && !sync && !cases[k].three && cnn_cuda_coop_ok(t->gpu) ? 1 : 0;
            const bool surely = !cases[k].shards || cnn_cuda_sm_count(t->gpu) >= 8;
            cnn_cuda_bn_force_fused(t->gpu, cases[k].three ? 0 : -1);
            cnn_cuda_stats st0, st1;
            const int64_t mm = sync ? m * SYNC_WORLD : m; /* the running variance's count */
            cnn_bn bn = {.m = m, .c = c, .eps = 1e-5f, .momentum = 0.1f, .comm = sync ? &sync_token : NULL,
                         .world = sync ? SYNC_WORLD : 1};
            const size_t mask_bytes = (size_t)(m * c + 7) / 8;
            dbuf mask = {0};
            if (masked) mask = buf_new(t->gpu, mask_bytes, 0), bn.relu_mask = mask.p;
            cnn_bn cbn = bn;
            cbn.relu_mask = NULL; /* device memory; the CPU backend keeps no mask */
            char name[128], nm_mask[160];
            arr x = arr_in(t, m * c, true, 1300 + k, cases[k].offset - 1.5f, cases[k].offset + 2.0f, 0);
            arr gamma = arr_in(t, c, false, 1310 + k, 0.5f, 1.5f, 0), beta = arr_in(t, c, false, 1320 + k, -0.5f, 0.5f, 0);
            arr rm = arr_in(t, c, false, 1330 + k, -0.2f, 0.2f, 0), rv = arr_in(t, c, false, 1340 + k, 0.5f, 1.5f, 0);
            arr res = arr_in(t, m * c, true, 1370 + k, -1, 1, 0);
            arr sm = arr_out(t, c, false, 0), si = arr_out(t, c, false, 0), y = arr_out(t, m * c, true, 0);
            bn_ref ref = bn_forward_ref(x.h, use_res ? res.h : NULL, relu, m, c, mm, &gamma, &beta, &rm, &rv);
            double *mean = ref.mean, *inv = ref.inv, *ry = ref.y;
            snprintf(name, sizeof name, "bn_forward_train.%s.m%lld_c%d_offset%g%s%s%s%s", t->dts, (long long)m, c,
                     (double)cases[k].offset, fused[f].tag, sync ? ".sync" : "", cases[k].three ? ".three_launches" : "",
                     cases[k].shards ? (cases[k].shards == 4 ? ".slices4" : ".slices2") : "");
            int64_t sums0 = replica_sums;
            cnn_cuda_stats_get(t->gpu, &st0);
            expect_ok(t->gpu->bn_forward_train(t->gpu, &bn, x.g.p, gamma.g.p, beta.g.p, rm.g.p, rv.g.p, sm.g.p, si.g.p,
                                               use_res ? res.g.p : NULL, relu, y.g.p),
                      name);
            cnn_cuda_stats_get(t->gpu, &st1);
            check(st1.bn_fused_launches - st0.bn_fused_launches == one_launch ||
                      (!surely && st1.bn_fused_launches - st0.bn_fused_launches < one_launch),
                  name, "%ld passes in one cooperative launch, expected %ld", st1.bn_fused_launches - st0.bn_fused_launches,
                  one_launch);
            if (sync) /* the vector kernels sum x and x^2 in one pass; the scalar ones the mean, then the variance */
                check(replica_sums - sums0 == (c % 8 == 0 ? 1 : 2), name, "%lld collective sums",
                      (long long)(replica_sums - sums0));
            if (t->cpu)
                cpu_ok(t, t->cpu->bn_forward_train(t->cpu, &cbn, x.c, gamma.c, beta.c, rm.c, rv.c, sm.c, si.c,
                                                   use_res ? res.c : NULL, relu, y.c), name);
            if (masked) { /* bit e % 8 of byte e / 8 = the stored y[e] > 0, no other byte written */
                float *yg = arr_gpu(t, &y);
                unsigned char *mh = malloc(mask_bytes);
                if (t->gpu->download(t->gpu, mh, mask.p, mask_bytes) != CNN_OK) fatal("download of the mask");
                int64_t wrong = 0, first = -1;
                for (int64_t e = 0; e < m * c; e++)
                    if (((mh[e / 8] >> (e % 8)) & 1) != (yg[e] > 0.0f) && wrong++ == 0) first = e;
                snprintf(nm_mask, sizeof nm_mask, "%s.mask", name);
                const long dmg = buf_guard_damage(&mask);
                check(wrong == 0 && dmg == 0, nm_mask,
                      "%lld of %lld bits differ from y > 0 (first [%lld]); %ld guard bytes overwritten", (long long)wrong,
                      (long long)(m * c), (long long)first, dmg);
                free(mh), free(yg);
            }
            layout l = {"MC", {m, c}}, lc = {"C", {c}};
            arr *in[] = {&x, &gamma, &beta, &res};
            char nm[160];
            verify_bn_forward(t, name, &ref, &y, &sm, &si, &rm, &rv, m, c, in, 4);

            /* backward from the reference statistics (uploaded as the saved ones) and the reference output (its ReLU
             * mask), rounded to the dtype as the kernels see them */
            for (int acc = 0; acc < 2; acc++) {
                arr smean = arr_make(t, c, false, 0), sinv = arr_make(t, c, false, 0), yin = arr_make(t, m * c, true, 0);
                for (int j = 0; j < c; j++) smean.h[j] = (float)mean[j], sinv.h[j] = (float)inv[j];
                for (int64_t i = 0; i < m * c; i++) yin.h[i] = (float)ry[i];
                arr_sync_in(t, &smean);
                arr_sync_in(t, &sinv);
                arr_sync_in(t, &yin);
                arr dy = arr_in(t, m * c, true, 1350 + k, -1, 1, 0);
                arr dx = acc ? arr_in(t, m * c, true, 1360 + k, -1, 1, 0) : arr_out(t, m * c, true, 0);
                arr dres = arr_in(t, m * c, true, 1380 + k, -1, 1, 0); /* accumulated onto */
                arr dg = arr_out(t, c, false, 0), db = arr_out(t, c, false, 0);
                double *rdx = dalloc(m * c), *rdg = dalloc(c), *rdb = dalloc(c), *rdres = dalloc(m * c);
                for (int j = 0; j < c; j++) {
                    double sdy = 0, sdyx = 0;
                    for (int64_t r = 0; r < m; r++) {
                        double xh = (x.h[r * c + j] - (double)smean.h[j]) * sinv.h[j];
                        double g = relu && !(yin.h[r * c + j] > 0) ? 0.0 : dy.h[r * c + j];
                        sdy += g;
                        sdyx += g * xh;
                        rdres[r * c + j] = dres.h[r * c + j] + g;
                    }
                    rdg[j] = sdyx;
                    rdb[j] = sdy;
                    for (int64_t r = 0; r < m; r++) {
                        double xh = (x.h[r * c + j] - (double)smean.h[j]) * sinv.h[j];
                        double g = relu && !(yin.h[r * c + j] > 0) ? 0.0 : dy.h[r * c + j];
                        rdx[r * c + j] = (acc ? dx.h[r * c + j] : 0.0) + gamma.h[j] * (double)sinv.h[j] / m * (m * g - sdy - xh * sdyx);
                    }
                }
                snprintf(name, sizeof name, "bn_backward.%s.m%lld_c%d%s%s%s%s", t->dts, (long long)m, c, fused[f].tag,
                         acc ? ".acc" : "", sync ? ".sync" : "", cases[k].three ? ".three_launches" : "");
                sums0 = replica_sums;
                arr ypoison = arr_in(t, m * c, true, 1390 + k, -2, -1, 0);
                cnn_cuda_stats_get(t->gpu, &st0);
                expect_ok(t->gpu->bn_backward(t->gpu, &bn, x.g.p, masked ? ypoison.g.p : yin.g.p, dy.g.p, gamma.g.p,
                                              smean.g.p, sinv.g.p, relu, dx.g.p, acc, use_res ? dres.g.p : NULL, true,
                                              dg.g.p, db.g.p),
                          name);
                cnn_cuda_stats_get(t->gpu, &st1);
                check(st1.bn_fused_launches - st0.bn_fused_launches == one_launch ||
                          (!surely && st1.bn_fused_launches - st0.bn_fused_launches < one_launch),
                      name, "%ld passes in one cooperative launch, expected %ld",
                      st1.bn_fused_launches - st0.bn_fused_launches, one_launch);
                if (sync) check(replica_sums - sums0 == 1, name, "%lld collective sums", (long long)(replica_sums - sums0));
                if (t->cpu)
                    cpu_ok(t, t->cpu->bn_backward(t->cpu, &cbn, x.c, yin.c, dy.c, gamma.c, smean.c, sinv.c, relu, dx.c, acc,
                                                  use_res ? dres.c : NULL, true, dg.c, db.c),
                           name);
                arr *in2[] = {&x, &dy, &gamma, &smean, &sinv, &yin};
                snprintf(nm, sizeof nm, "%s.dx", name);
                verify(t, nm, &dx, rdx, &l, in2, 6);
                /* dgamma sums dy*xhat: cancellation makes its relative error larger than the dtype's rounding of dy */
                snprintf(nm, sizeof nm, "%s.dgamma", name);
                verify(t, nm, &dg, rdg, &lc, in2, 0);
                snprintf(nm, sizeof nm, "%s.dbeta", name);
                verify(t, nm, &db, rdb, &lc, in2, 0);
                if (use_res) {
                    snprintf(nm, sizeof nm, "%s.dres", name);
                    verify(t, nm, &dres, rdres, &l, in2, 6);
                }
                free(rdx), free(rdg), free(rdb), free(rdres);
                arr_free(t, &smean), arr_free(t, &sinv), arr_free(t, &yin), arr_free(t, &dy), arr_free(t, &dx);
                arr_free(t, &dres), arr_free(t, &dg), arr_free(t, &db), arr_free(t, &ypoison);
            }
            if (masked) buf_free(&mask);
            bn_ref_free(&ref);
            arr_free(t, &x), arr_free(t, &gamma), arr_free(t, &beta), arr_free(t, &rm), arr_free(t, &rv);
            arr_free(t, &res), arr_free(t, &sm), arr_free(t, &si), arr_free(t, &y);
            t->gpu->batch_shards = 0;
            if (t->cpu) t->cpu->batch_shards = 0;
        }
    cnn_cuda_bn_force_fused(t->gpu, -1);
    replica_restore(t, saved);
    /* tree_sum: the same additions in the same order as the pairwise tree on the host (and the CPU backend's), so
     * bitwise equal (8 slices of an odd count at a stride past it) */
    enum { TS = 8, TN = 1003, TSTRIDE = 1011 };
    arr parts = arr_in(t, TS * TSTRIDE, false, 1399, -2.0f, 2.0f, 0), out = arr_out(t, TN, false, 0);
    expect_ok(t->gpu->tree_sum(t->gpu, TS, TN, parts.g.p, TSTRIDE, out.g.p), "tree_sum");
    float *gpu_out = arr_gpu(t, &out), *cpu_out = malloc(TN * sizeof *cpu_out);
    if (t->cpu) cpu_ok(t, t->cpu->tree_sum(t->cpu, TS, TN, parts.c, TSTRIDE, cpu_out), "tree_sum");
    int64_t differ = 0, differ_cpu = 0;
    for (int i = 0; i < TN; i++) {
        float v[TS];
        for (int j = 0; j < TS; j++) v[j] = parts.h[j * TSTRIDE + i];
        for (int step = 1; step < TS; step *= 2)
            for (int j = 0; j + step < TS; j += 2 * step) v[j] += v[j + step];
        differ += memcmp(&v[0], &gpu_out[i], sizeof(float)) != 0;
        differ_cpu += t->cpu && memcmp(&v[0], &cpu_out[i], sizeof(float)) != 0;
    }
    check(differ == 0 && differ_cpu == 0, "tree_sum.s8", "%lld of %d sums differ from the host's tree bitwise (%lld of the "
          "CPU backend's)", (long long)differ, TN, (long long)differ_cpu);
    free(cpu_out);
    arr_free(t, &parts), arr_free(t, &out);
}

/* ---- scale_shift ---------------------------------------------------------------------------------------- */

static void g_scale_shift(ctx *t) {
    const int64_t m = 3 * 5 * 7;
    const int c = 19;
    for (int v = 0; v < 8; v++) {
        bool has_scale = v & 1, has_shift = v & 2, has_res = v & 4;
        for (int relu = 0; relu < 2; relu++) {
            arr x = arr_in(t, m * c, true, 1400 + v, -2, 2, 0), y = arr_out(t, m * c, true, 0);
            arr sc = arr_in(t, c, false, 1410, 0.5f, 1.5f, 0), sh = arr_in(t, c, false, 1420, -1, 1, 0);
            arr res = arr_in(t, m * c, true, 1430, -1, 1, 0);
            double *ref = dalloc(m * c);
            for (int64_t r = 0; r < m; r++)
                for (int j = 0; j < c; j++) {
                    double u = x.h[r * c + j];
                    if (has_scale) u *= sc.h[j];
                    if (has_shift) u += sh.h[j];
                    if (has_res) u += res.h[r * c + j];
                    if (relu && u < 0) u = 0;
                    ref[r * c + j] = u;
                }
            char name[96];
            snprintf(name, sizeof name, "scale_shift.%s%s%s%s%s", t->dts, has_scale ? ".scale" : "", has_shift ? ".shift" : "",
                     has_res ? ".residual" : "", relu ? ".relu" : "");
            expect_ok(t->gpu->scale_shift(t->gpu, m, c, x.g.p, has_scale ? sc.g.p : NULL, has_shift ? sh.g.p : NULL,
                                          has_res ? res.g.p : NULL, relu, y.g.p),
                      name);
            if (t->cpu)
                cpu_ok(t, t->cpu->scale_shift(t->cpu, m, c, x.c, has_scale ? sc.c : NULL, has_shift ? sh.c : NULL,
                                              has_res ? res.c : NULL, relu, y.c),
                       name);
            layout l = {"MC", {m, c}};
            arr *in[] = {&x, &sc, &sh, &res};
            verify(t, name, &y, ref, &l, in, 4);
            free(ref);
            arr_free(t, &x), arr_free(t, &y), arr_free(t, &sc), arr_free(t, &sh), arr_free(t, &res);
        }
    }
}

/* ---- pooling -------------------------------------------------------------------------------------------- */

/* x in float64: the rounded inputs of an op test, or the float64 reference output of a conv (the fused stem) */
static void pool_ref_fwd(const cnn_pool2d *pl, const double *x, double *y) {
    for (int n = 0; n < pl->n; n++)
        for (int p = 0; p < pl->p; p++)
            for (int q = 0; q < pl->q; q++)
                for (int c = 0; c < pl->c; c++) {
                    double v;
                    if (pl->kind == CNN_POOL_ADAPTIVE_AVG) {
                        int hs = p * pl->h / pl->p, he = ((p + 1) * pl->h + pl->p - 1) / pl->p;
                        int ws = q * pl->w / pl->q, we = ((q + 1) * pl->w + pl->q - 1) / pl->q;
                        double s = 0;
                        for (int h = hs; h < he; h++)
                            for (int w = ws; w < we; w++) s += x[(((int64_t)n * pl->h + h) * pl->w + w) * pl->c + c];
                        v = s / ((he - hs) * (we - ws));
                    } else {
                        double best = -INFINITY, s = 0;
                        for (int r = 0; r < pl->r; r++)
                            for (int t2 = 0; t2 < pl->s; t2++) {
                                int h = p * pl->stride_h - pl->pad_h + r, w = q * pl->stride_w - pl->pad_w + t2;
                                if (h < 0 || h >= pl->h || w < 0 || w >= pl->w) continue;
                                double e = x[(((int64_t)n * pl->h + h) * pl->w + w) * pl->c + c];
                                if (e > best) best = e;
                                s += e;
                            }
                        v = pl->kind == CNN_POOL_MAX ? best : s / (pl->r * pl->s);
                    }
                    y[(((int64_t)n * pl->p + p) * pl->q + q) * pl->c + c] = v;
                }
}

/* scatter form (the opposite of the kernel's gather), first max in scan order */
static void pool_ref_bwd(const cnn_pool2d *pl, const float *x, const float *dy, double *dx) {
    for (int n = 0; n < pl->n; n++)
        for (int p = 0; p < pl->p; p++)
            for (int q = 0; q < pl->q; q++)
                for (int c = 0; c < pl->c; c++) {
                    double g = dy[(((int64_t)n * pl->p + p) * pl->q + q) * pl->c + c];
                    if (pl->kind == CNN_POOL_ADAPTIVE_AVG) {
                        int hs = p * pl->h / pl->p, he = ((p + 1) * pl->h + pl->p - 1) / pl->p;
                        int ws = q * pl->w / pl->q, we = ((q + 1) * pl->w + pl->q - 1) / pl->q;
                        for (int h = hs; h < he; h++)
                            for (int w = ws; w < we; w++)
                                dx[(((int64_t)n * pl->h + h) * pl->w + w) * pl->c + c] += g / ((he - hs) * (we - ws));
                        continue;
                    }
                    double best = -INFINITY;
                    int64_t arg = -1;
                    for (int r = 0; r < pl->r; r++)
                        for (int s = 0; s < pl->s; s++) {
                            int h = p * pl->stride_h - pl->pad_h + r, w = q * pl->stride_w - pl->pad_w + s;
                            if (h < 0 || h >= pl->h || w < 0 || w >= pl->w) continue;
                            int64_t i = (((int64_t)n * pl->h + h) * pl->w + w) * pl->c + c;
                            if (pl->kind == CNN_POOL_AVG)
                                dx[i] += g / (pl->r * pl->s);
                            else if (x[i] > best)
                                best = x[i], arg = i;
                        }
                    if (pl->kind == CNN_POOL_MAX && arg >= 0 && (!pl->relu || best > 0)) dx[arg] += g;
                }
}

/* Max pooling with its maxima's positions kept (cnn_pool2d.argmax, poisoned to 255 = "no maximum" first): the
 * forward's y and bytes against the reference's first maximum in scan order, then the backward from those bytes,
 * handed an x and a y of constants that would send every window's gradient to its first element if it read them. */
static void pool_argmax_case(ctx *t, const cnn_pool2d *pl0, const arr *x, const double *ry, size_t k) {
    cnn_pool2d pl = *pl0;
    const int64_t nx = (int64_t)pl.n * pl.h * pl.w * pl.c, ny = (int64_t)pl.n * pl.p * pl.q * pl.c;
    dbuf am = buf_new(t->gpu, (size_t)ny, 0);
    pl.argmax = am.p;
    char name[160], nm[176];
    snprintf(name, sizeof name, "pool2d_forward.%s.max.n%d_c%d_%dx%d_w%dx%d_s%dx%d_p%dx%d.argmax", t->dts, pl.n, pl.c,
             pl.h, pl.w, pl.r, pl.s, pl.stride_h, pl.stride_w, pl.pad_h, pl.pad_w);
    arr y = arr_out(t, ny, true, 0);
    expect_ok(t->gpu->pool2d_forward(t->gpu, &pl, x->g.p, y.g.p), name);
    cnn_pool2d plc = pl;
    plc.argmax = NULL; /* device memory; the CPU backend keeps none */
    if (t->cpu) cpu_ok(t, t->cpu->pool2d_forward(t->cpu, &plc, x->c, y.c), name);
    layout ly = {"NPQC", {pl.n, pl.p, pl.q, pl.c}}, lx = {"NHWC", {pl.n, pl.h, pl.w, pl.c}};
    arr *in[] = {(arr *)x};
    snprintf(nm, sizeof nm, "%s.y", name);
    verify(t, nm, &y, ry, &ly, in, 1);
    unsigned char *got = malloc((size_t)ny);
    if (t->gpu->download(t->gpu, got, am.p, (size_t)ny) != CNN_OK) fatal("download of the argmax bytes");
    int64_t wrong = 0, first = -1;
    for (int n = 0; n < pl.n; n++)
        for (int p = 0; p < pl.p; p++)
            for (int q = 0; q < pl.q; q++)
                for (int c = 0; c < pl.c; c++) {
                    float best = -INFINITY;
                    int arg = 255;
                    for (int r = 0; r < pl.r; r++)
                        for (int s2 = 0; s2 < pl.s; s2++) {
                            const int h = p * pl.stride_h - pl.pad_h + r, w = q * pl.stride_w - pl.pad_w + s2;
                            if (h < 0 || h >= pl.h || w < 0 || w >= pl.w) continue;
                            const float e = x->h[(((int64_t)n * pl.h + h) * pl.w + w) * pl.c + c];
                            if (e > best) best = e, arg = r * pl.s + s2;
                        }
                    const int64_t o = (((int64_t)n * pl.p + p) * pl.q + q) * pl.c + c;
                    if (got[o] != arg && wrong++ == 0) first = o;
                }
    const long dmg = buf_guard_damage(&am);
    snprintf(nm, sizeof nm, "%s.positions", name);
    check(wrong == 0 && dmg == 0, nm, "%lld of %lld positions differ from the first maximum (first [%lld]); %ld guard "
          "bytes overwritten", (long long)wrong, (long long)ny, (long long)first, dmg);
    free(got);
    arr xc = arr_in(t, nx, true, 1590 + k, 1, 1, 0), yc = arr_in(t, ny, true, 1591 + k, 1, 1, 0); /* constants */
    /* with relu (the ReLU's backward taken in) the kernels read the forward's y, still not x; v 4 also sums dx per
     * channel (cnn_pool2d.dx_sum: the tile path in its own kernel, any other after it), where windows do not overlap
     * (each input a copy of one window's gradient or 0, so dx's sums are those of float64's to float accuracy; the
     * overlapping pools' sums are channel_sum's over dx, its own group's) */
    const bool apart = pl.stride_h >= pl.r && pl.stride_w >= pl.s;
    for (int v = 0; v < (apart ? 5 : 4); v++) {
        const bool acc = v & 1 && v < 4, sum = v == 4;
        pl.relu = plc.relu = v >= 2;
        arr dsum = arr_out(t, sum ? pl.c : 1, false, 0);
        pl.dx_sum = sum ? dsum.g.p : NULL;
        plc.dx_sum = sum && t->cpu ? dsum.c : NULL;
        arr dy = arr_in(t, ny, true, 1570 + k, -1, 1, 0);
        arr dx = acc ? arr_in(t, nx, true, 1580 + k, -1, 1, 0) : arr_out(t, nx, true, 0);
        double *rdx = dalloc(nx);
        for (int64_t i = 0; i < nx; i++) rdx[i] = acc ? dx.h[i] : 0.0;
        pool_ref_bwd(&pl, x->h, dy.h, rdx);
        snprintf(name, sizeof name, "pool2d_backward.%s.max.n%d_c%d_%dx%d_w%dx%d_s%dx%d_p%dx%d.argmax%s%s", t->dts, pl.n,
                 pl.c, pl.h, pl.w, pl.r, pl.s, pl.stride_h, pl.stride_w, pl.pad_h, pl.pad_w, acc ? ".acc" : "",
                 pl.relu ? (sum ? ".relu.dx_sum" : ".relu") : "");
        cnn_cuda_stats st0, st1;
        cnn_cuda_stats_get(t->gpu, &st0);
        expect_ok(t->gpu->pool2d_backward(t->gpu, &pl, xc.g.p, pl.relu ? y.g.p : yc.g.p, dy.g.p, dx.g.p, acc), name);
        cnn_cuda_stats_get(t->gpu, &st1);
        if (t->cpu) cpu_ok(t, t->cpu->pool2d_backward(t->cpu, &plc, x->c, y.c, dy.c, dx.c, acc), name);
        /* ResNet's 3x3/2 pad 1 with whole vectors of channels: a thread per 2x2 inputs (pool_backward_quad) */
        const bool quad = pl.r == 3 && pl.s == 3 && pl.stride_h == 2 && pl.stride_w == 2 && pl.pad_h == 1 &&
                          pl.pad_w == 1 && pl.c % (t->dt == CNN_DTYPE_F32 ? 4 : 8) == 0;
        /* windows tiling the input exactly (VGG's 2x2/2 on even sizes): a thread per window (pool_backward_tile) */
        const bool tile = pl.stride_h == pl.r && pl.stride_w == pl.s && pl.pad_h == 0 && pl.pad_w == 0 &&
                          pl.h == pl.p * pl.r && pl.w == pl.q * pl.s && pl.c % (t->dt == CNN_DTYPE_F32 ? 4 : 8) == 0;
        /* the tile kernel sums dx itself where C % 8 == 0 (pool_bwd_tile_sum_vec) */
        const bool tile_sum = sum && tile && pl.c % 8 == 0;
        snprintf(nm, sizeof nm, "%s.path", name);
        check(st1.pool_quad_launches - st0.pool_quad_launches == (quad ? 1 : 0) &&
                  st1.pool_tile_launches - st0.pool_tile_launches == (tile ? 1 : 0) &&
                  st1.pool_tile_sum_launches - st0.pool_tile_sum_launches == (tile_sum ? 1 : 0),
              nm, "%ld quad, %ld tile and %ld tile-sum launches, %d, %d and %d expected",
              st1.pool_quad_launches - st0.pool_quad_launches, st1.pool_tile_launches - st0.pool_tile_launches,
              st1.pool_tile_sum_launches - st0.pool_tile_sum_launches, quad ? 1 : 0, tile ? 1 : 0, tile_sum ? 1 : 0);
        arr *in2[] = {&dy, &y};
        verify(t, name, &dx, rdx, &lx, in2, 2);
        if (sum) { /* float32 sums of the dtype's values: fp32 accuracy expected */
            double *rs = dalloc(pl.c);
            for (int64_t i = 0; i < nx; i++) rs[i % pl.c] += rdx[i];
            layout lc = {"C", {pl.c}};
            snprintf(nm, sizeof nm, "%s.sums", name);
            verify(t, nm, &dsum, rs, &lc, in2, 2);
            free(rs);
        }
        free(rdx);
        arr_free(t, &dy), arr_free(t, &dx), arr_free(t, &dsum);
    }
    arr_free(t, &xc), arr_free(t, &yc), arr_free(t, &y);
    buf_free(&am);
}

static void g_pool(ctx *t) {
    typedef struct {
        cnn_pool_kind kind;
        int n, c, h, w, r, s, sh, sw, ph, pw, p, q; /* p, q only for adaptive */
        bool ties;
        bool neg; /* x mostly negative: many windows whose maximum a ReLU before the pool would stop */
    } pcase;
    const pcase cases[] = {
        {CNN_POOL_MAX, 2, 5, 9, 7, 3, 3, 2, 2, 1, 1, 0, 0, true, false},  /* ResNet's 3x3/2 pad 1, tie-rich integers */
        {CNN_POOL_MAX, 1, 3, 7, 9, 2, 2, 2, 2, 0, 0, 0, 0, false, false}, /* VGG's 2x2/2 on odd sizes */
        /* VGG's 2x2/2 tiling the input, C % 8 == 0: the tile kernels, and with dx's sums over many chunks of rows
         * (pool_bwd_tile_sum_vec); one of the three quick mode runs */
        {CNN_POOL_MAX, 3, 72, 24, 20, 2, 2, 2, 2, 0, 0, 0, 0, false, true},
        {CNN_POOL_MAX, 3, 17, 6, 5, 3, 2, 1, 2, 1, 0, 0, 0, true, false},
        {CNN_POOL_AVG, 2, 6, 5, 5, 3, 3, 1, 1, 1, 1, 0, 0, false, false},
        {CNN_POOL_AVG, 1, 9, 8, 6, 2, 2, 2, 2, 0, 0, 0, 0, false, false},
        {CNN_POOL_ADAPTIVE_AVG, 3, 4, 7, 9, 0, 0, 0, 0, 0, 0, 3, 2, false, false},
        {CNN_POOL_ADAPTIVE_AVG, 2, 8, 5, 5, 0, 0, 0, 0, 0, 0, 1, 1, false, false},
        {CNN_POOL_ADAPTIVE_AVG, 1, 3, 1, 1, 0, 0, 0, 0, 0, 0, 7, 7, false, false}, /* VGG head on a 1x1 map */
        {CNN_POOL_ADAPTIVE_AVG, 2, 5, 2, 3, 0, 0, 0, 0, 0, 0, 7, 7, false, false},
        {CNN_POOL_ADAPTIVE_AVG, 1, 6, 14, 14, 0, 0, 0, 0, 0, 0, 7, 7, false, false},
        /* C % 8 == 0: the 16-byte-vector kernel (pool_forward_vec) */
        {CNN_POOL_MAX, 2, 16, 9, 11, 3, 3, 2, 2, 1, 1, 0, 0, true, false},
        {CNN_POOL_MAX, 1, 24, 10, 12, 3, 3, 2, 2, 1, 1, 0, 0, true, false}, /* the stem's, even sizes: pool_backward_quad */
        {CNN_POOL_MAX, 3, 12, 8, 5, 3, 3, 2, 2, 1, 1, 0, 0, false, false},  /* C % 8 = 4: the vector kernel of 4 in F32 only */
        {CNN_POOL_MAX, 1, 24, 7, 6, 2, 2, 2, 2, 0, 0, 0, 0, false, false},
        {CNN_POOL_AVG, 3, 8, 5, 7, 3, 3, 2, 1, 1, 1, 0, 0, false, false},
        /* the adaptive backward's vector kernel: overlapping bins, and more bins than pixels */
        {CNN_POOL_ADAPTIVE_AVG, 2, 16, 5, 7, 0, 0, 0, 0, 0, 0, 3, 2, false, false},
        {CNN_POOL_ADAPTIVE_AVG, 1, 8, 2, 3, 0, 0, 0, 0, 0, 0, 7, 7, false, false},
        /* the ReLU's backward taken in (cnn_pool2d.relu): VGG's 2x2/2 and the stem's 3x3/2 */
        {CNN_POOL_MAX, 2, 16, 8, 10, 2, 2, 2, 2, 0, 0, 0, 0, false, true},
        {CNN_POOL_MAX, 2, 16, 10, 12, 3, 3, 2, 2, 1, 1, 0, 0, false, true},
        {CNN_POOL_MAX, 1, 8, 9, 6, 3, 3, 3, 3, 0, 0, 0, 0, true, false}, /* 3x3/3 tiling 9x6: pool_backward_tile */
        /* the tile kernel with dx's sums over two CTAs' channel groups (C / 8 > 256) */
        {CNN_POOL_MAX, 1, 2056, 4, 6, 2, 2, 2, 2, 0, 0, 0, 0, false, true},
    };
    static const char *kn[] = {"max", "avg", "adaptive"};
    for (size_t k = 0; k < (quick ? 3 : sizeof cases / sizeof cases[0]); k++) {
        const pcase *pc = &cases[k];
        cnn_pool2d pl = {.kind = pc->kind, .n = pc->n, .c = pc->c, .h = pc->h, .w = pc->w, .r = pc->r, .s = pc->s,
                         .stride_h = pc->sh, .stride_w = pc->sw, .pad_h = pc->ph, .pad_w = pc->pw};
        if (pc->kind == CNN_POOL_ADAPTIVE_AVG) {
            pl.p = pc->p, pl.q = pc->q;
        } else {
            pl.p = (pc->h + 2 * pc->ph - pc->r) / pc->sh + 1;
            pl.q = (pc->w + 2 * pc->pw - pc->s) / pc->sw + 1;
        }
        int64_t nx = (int64_t)pl.n * pl.h * pl.w * pl.c, ny = (int64_t)pl.n * pl.p * pl.q * pl.c;
        arr x = arr_make(t, nx, true, 0);
        for (int64_t i = 0; i < nx; i++)
            x.h[i] = pc->ties ? (float)((int)(rnd_uniform(1500 + k, i, 0, 4)))
                              : rnd_uniform(1500 + k, i, pc->neg ? -3 : -2, pc->neg ? 1 : 2);
        arr_sync_in(t, &x);
        arr y = arr_out(t, ny, true, 0);
        double *ry = dalloc(ny), *xd = dalloc(nx);
        for (int64_t i = 0; i < nx; i++) xd[i] = x.h[i];
        pool_ref_fwd(&pl, xd, ry);
        free(xd);
        if (pc->neg) { /* the relu cases prove something only where the ReLU stops a fair share of the windows */
            int64_t stopped = 0;
            for (int64_t i = 0; i < ny; i++) stopped += !(ry[i] > 0);
            check(stopped * 20 >= ny, "pool.relu_cases", "%lld of %lld maxima <= 0 (5 %% needed)", (long long)stopped,
                  (long long)ny);
        }
        char name[128];
        snprintf(name, sizeof name, "pool2d_forward.%s.%s.n%d_c%d_%dx%d_w%dx%d_s%dx%d_p%dx%d_to%dx%d", t->dts,
                 kn[pc->kind], pl.n, pl.c, pl.h, pl.w, pl.r, pl.s, pl.stride_h, pl.stride_w, pl.pad_h, pl.pad_w, pl.p,
                 pl.q);
        expect_ok(t->gpu->pool2d_forward(t->gpu, &pl, x.g.p, y.g.p), name);
        if (t->cpu) cpu_ok(t, t->cpu->pool2d_forward(t->cpu, &pl, x.c, y.c), name);
        layout ly = {"NPQC", {pl.n, pl.p, pl.q, pl.c}}, lx = {"NHWC", {pl.n, pl.h, pl.w, pl.c}};
        arr *in[] = {&x};
        verify(t, name, &y, ry, &ly, in, 1);
        /* backward: y from the reference forward (rounded to the dtype), so both backends see the same y */
        arr yin = arr_make(t, ny, true, 0);
        for (int64_t i = 0; i < ny; i++) yin.h[i] = (float)ry[i];
        arr_sync_in(t, &yin);
        for (int v = 0; v < (pc->kind == CNN_POOL_MAX ? 4 : 2); v++) { /* max pooling also with the ReLU's backward */
            const bool acc = v & 1;
            pl.relu = v >= 2;
            arr dy = arr_in(t, ny, true, 1550 + k, -1, 1, 0);
            arr dx = acc ? arr_in(t, nx, true, 1560 + k, -1, 1, 0) : arr_out(t, nx, true, 0);
            double *rdx = dalloc(nx);
            for (int64_t i = 0; i < nx; i++) rdx[i] = acc ? dx.h[i] : 0.0;
            pool_ref_bwd(&pl, x.h, dy.h, rdx);
            snprintf(name, sizeof name, "pool2d_backward.%s.%s.n%d_c%d_%dx%d_w%dx%d_s%dx%d_p%dx%d_to%dx%d%s%s", t->dts,
                     kn[pc->kind], pl.n, pl.c, pl.h, pl.w, pl.r, pl.s, pl.stride_h, pl.stride_w, pl.pad_h, pl.pad_w,
                     pl.p, pl.q, acc ? ".acc" : "", pl.relu ? ".relu" : "");
            expect_ok(t->gpu->pool2d_backward(t->gpu, &pl, x.g.p, yin.g.p, dy.g.p, dx.g.p, acc), name);
            if (t->cpu) cpu_ok(t, t->cpu->pool2d_backward(t->cpu, &pl, x.c, yin.c, dy.c, dx.c, acc), name);
            arr *in2[] = {&x, &yin, &dy};
            verify(t, name, &dx, rdx, &lx, in2, 3);
            free(rdx);
            arr_free(t, &dy);
            arr_free(t, &dx);
        }
        pl.relu = false;
        if (pc->kind == CNN_POOL_MAX) pool_argmax_case(t, &pl, &x, ry, k);
        free(ry);
        arr_free(t, &x), arr_free(t, &y), arr_free(t, &yin);
    }
}

/* BatchNorm -> ReLU -> 3x3/2 pad-1 max-pool, backward in one call (bn_backward_pool: the ResNet stem's), against
 * float64 (the pool's backward to its first maximum, then the BN's) and the CPU backend's pool2d_backward then
 * bn_backward. The pool's input is the ReLU's output yin (zero where the ReLU did not pass, so ties among zeros give
 * nothing); the GPU reads the mask of yin > 0 and the argmax its own pool2d_forward wrote. The CPU stores the ReLU
 * output's gradient in the activation dtype between its two calls, the fused kernel keeps it in float: dgamma and
 * dbeta are held to float accuracy against float64, to the dtype's bound against the CPU. Odd and unequal H, W,
 * batch 1, C / 8 odd, a synchronised case; and what bn_pool_fusable refuses. */
static void g_bn_pool(ctx *t) {
    if (!t->gpu->bn_backward_pool || !t->gpu->bn_pool_fusable) {
        check(false, "bn_pool", "the CUDA backend has no bn_backward_pool");
        return;
    }
    const struct {
        int n, h, w, c;
        bool sync;
    } cases[] = {{2, 16, 16, 64, false}, {1, 7, 9, 16, false}, {3, 10, 6, 24, false},
                 {4, 56, 56, 64, false}, {2, 5, 5, 8, false},  {2, 9, 8, 16, true}};
    const replica_hooks saved = replica_install(t);
    static int sync_token;
    for (size_t k = 0; k < (quick ? 2 : sizeof cases / sizeof cases[0]); k++) {
        const int c = cases[k].c;
        cnn_pool2d pl;
        if (!cnn_pool2d_init(&pl, CNN_POOL_MAX, cases[k].n, c, cases[k].h, cases[k].w, 3, 2, 1)) fatal("pool problem");
        const int64_t m = (int64_t)pl.n * pl.h * pl.w, np = (int64_t)pl.n * pl.p * pl.q * c;
        const bool sync = cases[k].sync;
        cnn_bn bn = {.m = m, .c = c, .eps = 1e-5f, .momentum = 0.1f, .comm = sync ? &sync_token : NULL,
                     .world = sync ? SYNC_WORLD : 1};
        char name[128], nm[160];
        snprintf(name, sizeof name, "bn_backward_pool.%s.n%d_%dx%d_c%d%s", t->dts, pl.n, pl.h, pl.w, c,
                 sync ? ".sync" : "");
        arr x = arr_in(t, m * c, true, 1700 + k, -1.0f, 2.5f, 0);
        arr yin = arr_make(t, m * c, true, 0); /* the ReLU's output: about a third zero */
        for (int64_t i = 0; i < m * c; i++) {
            const float v = rnd_uniform(1710 + k, i, -1.0f, 2.0f);
            yin.h[i] = v > 0 ? v : 0.0f;
        }
        arr_sync_in(t, &yin);
        const size_t mask_bytes = (size_t)(m * c + 7) / 8;
        unsigned char *mh = calloc(mask_bytes, 1);
        for (int64_t e = 0; e < m * c; e++) mh[e / 8] |= (unsigned char)((yin.h[e] > 0.0f) << (e % 8));
        dbuf mask = buf_new(t->gpu, mask_bytes, 0), am = buf_new(t->gpu, (size_t)np, 0);
        buf_put(&mask, mh);
        free(mh);
        bn.relu_mask = mask.p;
        cnn_bn cbn = bn;
        cbn.relu_mask = NULL;
        /* the pool's forward on both backends: its output (the CPU's backward reads it), the GPU's argmax */
        arr ypool = arr_out(t, np, true, 0);
        cnn_pool2d plg = pl, plc = pl;
        plg.argmax = am.p;
        expect_ok(t->gpu->pool2d_forward(t->gpu, &plg, yin.g.p, ypool.g.p), name);
        if (t->cpu) cpu_ok(t, t->cpu->pool2d_forward(t->cpu, &plc, yin.c, ypool.c), name);
        check(t->gpu->bn_pool_fusable(t->gpu, &bn, &plg), name, "bn_pool_fusable takes the stem's problem");
        arr gamma = arr_in(t, c, false, 1720 + k, 0.5f, 1.5f, 0);
        arr smean = arr_in(t, c, false, 1730 + k, 0.0f, 1.0f, 0), sinv = arr_in(t, c, false, 1740 + k, 0.5f, 1.5f, 0);
        for (int acc = 0; acc < 2; acc++) {
            arr dyp = arr_in(t, np, true, 1750 + k, -1, 1, 0);
            arr dx = acc ? arr_in(t, m * c, true, 1760 + k, -1, 1, 0) : arr_out(t, m * c, true, 0);
            arr g = arr_out(t, m * c, true, 0); /* the CPU's pool output gradient */
            arr dg = arr_out(t, c, false, 0), db = arr_out(t, c, false, 0);
            double *g64 = dalloc(m * c), *rdx = dalloc(m * c), *rdg = dalloc(c), *rdb = dalloc(c);
            pool_ref_bwd(&pl, yin.h, dyp.h, g64);
            for (int64_t e = 0; e < m * c; e++)
                if (!(yin.h[e] > 0.0f)) g64[e] = 0.0;
            for (int j = 0; j < c; j++) {
                double sdy = 0, sdyx = 0;
                for (int64_t r = 0; r < m; r++) {
                    sdy += g64[r * c + j];
                    sdyx += g64[r * c + j] * (x.h[r * c + j] - (double)smean.h[j]) * sinv.h[j];
                }
                rdg[j] = sdyx, rdb[j] = sdy;
                for (int64_t r = 0; r < m; r++) {
                    const double xh = (x.h[r * c + j] - (double)smean.h[j]) * sinv.h[j];
                    rdx[r * c + j] = (acc ? dx.h[r * c + j] : 0.0) +
                                     gamma.h[j] * (double)sinv.h[j] / m * (m * g64[r * c + j] - sdy - xh * sdyx);
                }
            }
            snprintf(nm, sizeof nm, "%s%s", name, acc ? ".acc" : "");
            cnn_cuda_stats st0, st1;
            int64_t sums0 = replica_sums;
            cnn_cuda_stats_get(t->gpu, &st0);
            expect_ok(t->gpu->bn_backward_pool(t->gpu, &bn, &plg, x.g.p, dyp.g.p, gamma.g.p, smean.g.p, sinv.g.p,
                                               dx.g.p, acc, dg.g.p, db.g.p),
                      nm);
            cnn_cuda_stats_get(t->gpu, &st1);
            check(st1.bn_pool_launches - st0.bn_pool_launches == 1, nm, "%ld fused pool launches, expected 1",
                  st1.bn_pool_launches - st0.bn_pool_launches);
            if (sync) check(replica_sums - sums0 == 1, nm, "%lld collective sums", (long long)(replica_sums - sums0));
            if (t->cpu && cpu_ok(t, t->cpu->pool2d_backward(t->cpu, &plc, yin.c, ypool.c, dyp.c, g.c, false), nm))
                cpu_ok(t, t->cpu->bn_backward(t->cpu, &cbn, x.c, yin.c, g.c, gamma.c, smean.c, sinv.c, true, dx.c, acc,
                                              NULL, false, dg.c, db.c),
                       nm);
            layout l = {"NHWC", {pl.n, pl.h, pl.w, c}}, lc = {"C", {c}};
            arr *in[] = {&x, &dyp, &gamma, &smean, &sinv, &yin};
            char nm2[200];
            snprintf(nm2, sizeof nm2, "%s.dx", nm);
            verify(t, nm2, &dx, rdx, &l, in, 6);
            snprintf(nm2, sizeof nm2, "%s.dgamma", nm);
            verify_bounds(t, nm2, &dg, rdg, &lc, in, 0, 1e-5, t->tol);
            snprintf(nm2, sizeof nm2, "%s.dbeta", nm);
            verify_bounds(t, nm2, &db, rdb, &lc, in, 0, 1e-5, t->tol);
            free(g64), free(rdx), free(rdg), free(rdb);
            arr_free(t, &dyp), arr_free(t, &dx), arr_free(t, &g), arr_free(t, &dg), arr_free(t, &db);
        }
        const long dmg = buf_guard_damage(&mask) + buf_guard_damage(&am);
        check(dmg == 0, name, "%ld guard bytes of the mask or the argmax overwritten", dmg);
        buf_free(&mask), buf_free(&am);
        arr_free(t, &x), arr_free(t, &yin), arr_free(t, &ypool), arr_free(t, &gamma), arr_free(t, &smean);
        arr_free(t, &sinv);
    }
    /* what it refuses: channels not in vectors of 8, another window, no argmax, no mask */
    cnn_pool2d p12, p2;
    cnn_pool2d_init(&p12, CNN_POOL_MAX, 2, 12, 8, 8, 3, 2, 1);
    cnn_pool2d_init(&p2, CNN_POOL_MAX, 2, 16, 8, 8, 2, 2, 0);
    char fake[16];
    p12.argmax = p2.argmax = fake;
    cnn_bn b12 = {.m = 128, .c = 12, .relu_mask = fake}, b16 = {.m = 128, .c = 16, .relu_mask = fake};
    cnn_pool2d p3;
    cnn_pool2d_init(&p3, CNN_POOL_MAX, 2, 16, 8, 8, 3, 2, 1);
    cnn_pool2d p3n = p3;
    p3.argmax = fake;
    cnn_bn b16n = b16;
    b16n.relu_mask = NULL;
    check(!t->gpu->bn_pool_fusable(t->gpu, &b12, &p12) && !t->gpu->bn_pool_fusable(t->gpu, &b16, &p2) &&
              !t->gpu->bn_pool_fusable(t->gpu, &b16, &p3n) && !t->gpu->bn_pool_fusable(t->gpu, &b16n, &p3) &&
              t->gpu->bn_pool_fusable(t->gpu, &b16, &p3),
          "bn_pool.fusable", "C %% 8 != 0, a 2x2 window, no argmax or no mask must be refused, the stem's kept");
    replica_restore(t, saved);
}

/* ---- convolution ---------------------------------------------------------------------------------------- */

typedef struct conv_case {
    int n, c, h, w, k, r, s, sh, sw, ph, pw;
} conv_case;

static const conv_case conv_cases[] = {
    {1, 3, 7, 9, 5, 3, 3, 1, 1, 1, 1},      /* batch 1, C = 3, H != W */
    {3, 5, 11, 8, 7, 3, 3, 2, 2, 1, 1},     /* batch 3, stride 2 */
    {3, 3, 15, 13, 8, 7, 7, 2, 2, 3, 3},    /* 7x7/2 pad 3: the stem */
    {1, 16, 6, 5, 24, 1, 1, 1, 1, 0, 0},    /* 1x1 */
    {3, 13, 9, 9, 17, 1, 1, 2, 2, 0, 0},    /* 1x1/2: the downsample */
    {2, 64, 8, 8, 64, 3, 3, 1, 1, 1, 1},    /* several tiles of M */
    {1, 9, 5, 12, 130, 3, 1, 1, 2, 1, 0},   /* R != S, stride_h != stride_w, K > 128 */
    {2, 33, 14, 14, 40, 3, 3, 1, 1, 0, 0},  /* pad 0, odd C */
    {3, 7, 4, 4, 6, 5, 5, 1, 1, 2, 2},      /* window larger than half the map */
    {1, 1, 5, 5, 1, 3, 3, 2, 2, 1, 1},      /* C = K = 1 */
};
#define N_CONV_CASES ((int)(sizeof conv_cases / sizeof conv_cases[0]))

static cnn_conv2d conv_of(const conv_case *k) {
    cnn_conv2d cv = {.n = k->n, .c = k->c, .h = k->h, .w = k->w, .k = k->k, .r = k->r, .s = k->s, .stride_h = k->sh,
                     .stride_w = k->sw, .pad_h = k->ph, .pad_w = k->pw};
    cv.p = (k->h + 2 * k->ph - k->r) / k->sh + 1;
    cv.q = (k->w + 2 * k->pw - k->s) / k->sw + 1;
    return cv;
}

/* a copy of x with every value rounded to TF32 (10 mantissa bits) to nearest, ties away from zero: what
 * conv2d_pipelined.cu's tf32_rna does to its operands */
static float *tf32_copy(const float *x, int64_t n) {
    float *r = malloc(count_of(n) * sizeof *r);
    for (int64_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &x[i], 4);
        b = (b + 0x1000u) & 0xffffe000u;
        memcpy(&r[i], &b, 4);
    }
    return r;
}

static void conv_ref_fprop(const cnn_conv2d *cv, const float *x, const float *w, const float *scale, const float *shift,
                           const float *res, bool relu, double *y) {
    for (int n = 0; n < cv->n; n++)
        for (int p = 0; p < cv->p; p++)
            for (int q = 0; q < cv->q; q++)
                for (int k = 0; k < cv->k; k++) {
                    double acc = 0;
                    for (int r = 0; r < cv->r; r++) {
                        int h = p * cv->stride_h - cv->pad_h + r;
                        if (h < 0 || h >= cv->h) continue;
                        for (int s = 0; s < cv->s; s++) {
                            int wi = q * cv->stride_w - cv->pad_w + s;
                            if (wi < 0 || wi >= cv->w) continue;
                            const float *xp = x + (((int64_t)n * cv->h + h) * cv->w + wi) * cv->c;
                            const float *wp = w + (((int64_t)k * cv->r + r) * cv->s + s) * cv->c;
                            for (int c = 0; c < cv->c; c++) acc += (double)xp[c] * wp[c];
                        }
                    }
                    int64_t o = (((int64_t)n * cv->p + p) * cv->q + q) * cv->k + k;
                    double v = acc * (scale ? scale[k] : 1.0) + (shift ? shift[k] : 0.0) + (res ? res[o] : 0.0);
                    y[o] = relu && v < 0 ? 0 : v;
                }
}

static void conv_ref_dgrad(const cnn_conv2d *cv, const float *dy, const float *w, double *dx) {
    for (int n = 0; n < cv->n; n++)
        for (int p = 0; p < cv->p; p++)
            for (int q = 0; q < cv->q; q++)
                for (int k = 0; k < cv->k; k++) {
                    double g = dy[(((int64_t)n * cv->p + p) * cv->q + q) * cv->k + k];
                    for (int r = 0; r < cv->r; r++) {
                        int h = p * cv->stride_h - cv->pad_h + r;
                        if (h < 0 || h >= cv->h) continue;
                        for (int s = 0; s < cv->s; s++) {
                            int wi = q * cv->stride_w - cv->pad_w + s;
                            if (wi < 0 || wi >= cv->w) continue;
                            double *xp = dx + (((int64_t)n * cv->h + h) * cv->w + wi) * cv->c;
                            const float *wp = w + (((int64_t)k * cv->r + r) * cv->s + s) * cv->c;
                            for (int c = 0; c < cv->c; c++) xp[c] += g * wp[c];
                        }
                    }
                }
}

static void conv_ref_wgrad(const cnn_conv2d *cv, const float *x, const float *dy, double *dw) {
    for (int n = 0; n < cv->n; n++)
        for (int p = 0; p < cv->p; p++)
            for (int q = 0; q < cv->q; q++)
                for (int k = 0; k < cv->k; k++) {
                    double g = dy[(((int64_t)n * cv->p + p) * cv->q + q) * cv->k + k];
                    for (int r = 0; r < cv->r; r++) {
                        int h = p * cv->stride_h - cv->pad_h + r;
                        if (h < 0 || h >= cv->h) continue;
                        for (int s = 0; s < cv->s; s++) {
                            int wi = q * cv->stride_w - cv->pad_w + s;
                            if (wi < 0 || wi >= cv->w) continue;
                            const float *xp = x + (((int64_t)n * cv->h + h) * cv->w + wi) * cv->c;
                            double *wp = dw + (((int64_t)k * cv->r + r) * cv->s + s) * cv->c;
                            for (int c = 0; c < cv->c; c++) wp[c] += g * xp[c];
                        }
                    }
                }
}

static void conv_name(char *buf, size_t cap, const char *pass, ctx *t, const cnn_conv2d *cv, int cfg, const char *extra) {
    snprintf(buf, cap, "conv2d_%s.%s.n%d_c%d_h%d_w%d_k%d_r%d_s%d_st%dx%d_pad%dx%d.%s%s%s", pass, t->dts, cv->n, cv->c,
             cv->h, cv->w, cv->k, cv->r, cv->s, cv->stride_h, cv->stride_w, cv->pad_h, cv->pad_w,
             cfg < 0 ? "heuristic" : cnn_cuda_conv_config_name(cfg), extra, t->tag ? t->tag : "");
    for (char *p = buf; *p; p++)
        if (*p == '/') *p = '-';
}

/* Passes that forcing a fast row cannot change: the wgrad (conv2d.c reads a forced row only where it is a generic
 * one) and a dgrad that the phases do not take (the generic kernels then run, whichever fast row is forced: the
 * phases' eligibility reads no forced fast row). conv_fast forces each of its rows on the same cases, and those
 * repeats were a third of its time on the emulator; under t->once such a pass is checked once per case (and
 * accumulate flag) in a group, with the first row that reaches it. */
enum { SEEN_WGRAD, SEEN_DGRAD_GENERIC, SEEN_DGRAD_GENERIC_ACC };
#define SEEN_MAX 512
static struct {
    conv_case cc;
    int what;
} seen_pass[SEEN_MAX];
static int n_seen; /* reset by run_group */

static bool seen_before(const conv_case *cc, int what) {
    for (int i = 0; i < n_seen; i++)
        if (seen_pass[i].what == what && memcmp(&seen_pass[i].cc, cc, sizeof *cc) == 0) return true;
    return false;
}
static void seen_add(const conv_case *cc, int what) {
    if (n_seen < SEEN_MAX && !seen_before(cc, what)) seen_pass[n_seen].cc = *cc, seen_pass[n_seen].what = what, n_seen++;
}

static int first_fast_row(void);

/* fprop, dgrad and wgrad of one case with one config (-1: the heuristic); variant picks the epilogue / accumulate */
static void conv_one(ctx *t, const conv_case *cc, int cfg, int variant, uint64_t seed) {
    cnn_conv2d cv = conv_of(cc);
    const bool once = t->once && (cfg < 0 || cfg >= first_fast_row()); /* no generic row forced */
    cnn_cuda_conv_force_config(t->gpu, cfg);
    int64_t nx = (int64_t)cv.n * cv.h * cv.w * cv.c, nw = (int64_t)cv.k * cv.r * cv.s * cv.c,
            ny = (int64_t)cv.n * cv.p * cv.q * cv.k;
    char name[200];
    arr x = arr_in(t, nx, true, seed, -1, 1, 0), w = arr_in(t, nw, true, seed + 1, -0.5f, 0.5f, 0);
    arr scale = arr_in(t, cv.k, false, seed + 2, 0.5f, 1.5f, 0), shift = arr_in(t, cv.k, false, seed + 3, -0.5f, 0.5f, 0);
    arr res = arr_in(t, ny, true, seed + 4, -1, 1, 0);
    layout ly = {"NPQK", {cv.n, cv.p, cv.q, cv.k}}, lx = {"NHWC", {cv.n, cv.h, cv.w, cv.c}},
           lw = {"KRSC", {cv.k, cv.r, cv.s, cv.c}};

    /* fprop with epilogue variant: none, shift (bias), scale+shift (folded BN), everything */
    int ev = variant % 4;
    cnn_epilogue eg = {0}, ec = {0};
    static const char *evn[] = {"", ".ep_shift", ".ep_scale_shift", ".ep_scale_shift_res_relu"};
    if (ev >= 1) eg.shift = shift.g.p, ec.shift = shift.c;
    if (ev >= 2) eg.scale = scale.g.p, ec.scale = scale.c;
    if (ev >= 3) eg.residual = res.g.p, ec.residual = res.c, eg.relu = ec.relu = true;
    arr y = arr_out(t, ny, true, 0);
    double *ry = dalloc(ny);
    /* TF32: the reference multiplies the operands rounded as the kernel rounds them (to nearest, ties away), so
     * only fp32 accumulation separates them (the f32 bound); against the CPU backend's exact fp32, the TF32
     * bound of docs/testing (1e-3). Truncating instead of rounding would be ~5e-4 off the reference: caught. */
    float *xr = t->tf32 ? tf32_copy(x.h, nx) : x.h, *wr = t->tf32 ? tf32_copy(w.h, nw) : w.h;
    conv_ref_fprop(&cv, xr, wr, ev >= 2 ? scale.h : NULL, ev >= 1 ? shift.h : NULL, ev >= 3 ? res.h : NULL, ev >= 3, ry);
    if (t->tf32) free(xr), free(wr);
    conv_name(name, sizeof name, "fprop", t, &cv, cfg, evn[ev]);
    expect_ok(t->gpu->conv2d_fprop(t->gpu, &cv, &eg, x.g.p, w.g.p, y.g.p), name);
    if (t->cpu) cpu_ok(t, t->cpu->conv2d_fprop(t->cpu, &cv, &ec, x.c, w.c, y.c), name);
    arr *in1[] = {&x, &w, &scale, &shift, &res};
    if (t->tf32) t->tol_cpu = 1e-3;
    verify(t, name, &y, ry, &ly, in1, 5);
    t->tol_cpu = 0;

    /* dgrad */
    bool acc = variant & 1;
    arr dy = arr_in(t, ny, true, seed + 5, -1, 1, 0);
    const int generic_dgrad = acc ? SEEN_DGRAD_GENERIC_ACC : SEEN_DGRAD_GENERIC;
    double *rdx = NULL;
    arr dx = {0};
    if (!(once && seen_before(cc, generic_dgrad))) {
        dx = acc ? arr_in(t, nx, true, seed + 6, -1, 1, 0) : arr_out(t, nx, true, 0);
        rdx = dalloc(nx);
        for (int64_t i = 0; i < nx; i++) rdx[i] = acc ? dx.h[i] : 0.0;
        conv_ref_dgrad(&cv, dy.h, w.h, rdx);
        conv_name(name, sizeof name, "dgrad", t, &cv, cfg, acc ? ".acc" : "");
        cnn_cuda_stats st0, st1;
        cnn_cuda_stats_get(t->gpu, &st0);
        expect_ok(t->gpu->conv2d_dgrad(t->gpu, &cv, dy.g.p, w.g.p, dx.g.p, acc), name);
        cnn_cuda_stats_get(t->gpu, &st1);
        if (once && st1.dgrad_fast_launches == st0.dgrad_fast_launches) seen_add(cc, generic_dgrad);
        if (t->cpu) cpu_ok(t, t->cpu->conv2d_dgrad(t->cpu, &cv, dy.c, w.c, dx.c, acc), name);
        arr *in2[] = {&dy, &w};
        verify(t, name, &dx, rdx, &lx, in2, 2);
    }

    /* wgrad (float32 output; its inputs carry the dtype's rounding) */
    double *rdw = NULL;
    arr dw = {0};
    if (!(once && seen_before(cc, SEEN_WGRAD))) {
        if (once) seen_add(cc, SEEN_WGRAD);
        dw = arr_out(t, nw, false, 0);
        rdw = dalloc(nw);
        conv_ref_wgrad(&cv, x.h, dy.h, rdw);
        conv_name(name, sizeof name, "wgrad", t, &cv, cfg, "");
        expect_ok(t->gpu->conv2d_wgrad(t->gpu, &cv, x.g.p, dy.g.p, dw.g.p), name);
        if (t->cpu) cpu_ok(t, t->cpu->conv2d_wgrad(t->cpu, &cv, x.c, dy.c, dw.c), name);
        arr *in3[] = {&x, &dy};
        verify(t, name, &dw, rdw, &lw, in3, 2);
    }

    cnn_cuda_conv_force_config(t->gpu, -1);
    free(ry), free(rdx), free(rdw);
    arr_free(t, &x), arr_free(t, &w), arr_free(t, &scale), arr_free(t, &shift), arr_free(t, &res);
    arr_free(t, &y), arr_free(t, &dy), arr_free(t, &dx), arr_free(t, &dw);
}

/* every case with the heuristic's config, every epilogue variant */
static void g_conv(ctx *t) {
    for (int i = 0; i < (quick ? 3 : N_CONV_CASES); i++)
        for (int v = 0; v < (quick ? 1 : 4); v++) conv_one(t, &conv_cases[i], -1, v + i, 2000 + 10 * i + v);
}

/* every tile config on a few cases, so no config ships untested */
static void g_conv_configs(ctx *t) {
    const int pick[] = {1, 5, 6, 0};
    for (int cfg = 0; cfg < cnn_cuda_conv_config_count(); cfg++) {
        if (!cnn_cuda_conv_config_usable(t->gpu, cfg)) continue; /* tensor cores: F16/BF16, sm_80+ */
        for (int j = 0; j < (quick ? 1 : 4); j++)
            conv_one(t, &conv_cases[pick[j]], cfg, 3 + j, 3000 + 10 * cfg + j);
    }
    /* a wgrad with many reduction splits: N*P*Q = 4*28*28 over a small output */
    conv_case big = {4, 8, 28, 28, 16, 3, 3, 1, 1, 1, 1};
    if (!quick) conv_one(t, &big, -1, 2, 3900);
}

/* the tensor-core forward kernels (conv2d_pipelined.cu: F16/BF16 with C % 8 == 0, F32 with C % 4 == 0 in fp32 FMA or,
 * as "tf32", in TF32; K % 8 == 0; and the stem, C <= 4 at
 * stride 2, through its space-to-depth rewrite; other C < 8 with the channels padded), each config forced and the heuristic, on odd shapes within their
 * preconditions; the dgrad/wgrad of these cases use the generic kernels. The first three run in quick mode. */
static const conv_case conv_fast_cases[] = {
    {1, 32, 7, 9, 8, 3, 3, 1, 1, 1, 1},      /* batch 1, H != W, K = 8 */
    {2, 3, 15, 13, 64, 7, 7, 2, 2, 3, 3},    /* the stem: 7x7/2 pad 3 over 3 channels, odd H and W */
    {2, 64, 19, 21, 136, 1, 1, 1, 1, 0, 0},  /* 1x1 over one slice, 798 x 136: many tiles, ragged in M and N */
    {1, 24, 7, 6, 32, 7, 7, 2, 2, 3, 3},     /* C = 24: R*S*C = 1176, the last slice partly past the end */
    {3, 64, 11, 9, 40, 3, 3, 2, 2, 1, 1},    /* batch 3, stride 2, K not a multiple of the tile */
    {2, 32, 15, 13, 72, 7, 7, 2, 2, 3, 3},   /* 7x7/2 pad 3 */
    {1, 96, 6, 5, 136, 1, 1, 1, 1, 0, 0},    /* 1x1, K > 128 */
    {3, 64, 9, 9, 24, 1, 1, 2, 2, 0, 0},     /* 1x1/2: the downsample */
    {2, 128, 10, 10, 128, 3, 3, 1, 1, 1, 1}, /* several tiles of M, 36 reduction slices */
    {1, 32, 5, 12, 16, 3, 1, 1, 2, 1, 0},    /* R != S, stride_h != stride_w */
    {2, 8, 9, 7, 16, 3, 3, 1, 1, 1, 1},      /* C = 8: four taps per slice */
    {2, 40, 5, 6, 24, 3, 3, 1, 1, 1, 1},     /* C = 40: slices straddle taps */
    {1, 1, 9, 10, 8, 3, 3, 2, 2, 1, 1},      /* stem path, C = 1 */
    {2, 4, 8, 11, 16, 4, 4, 2, 2, 0, 0},     /* stem path, C = 4, even filter, pad 0 */
    {1, 3, 12, 9, 24, 5, 5, 2, 2, 2, 2},     /* stem path, even pad */
    {2, 3, 9, 11, 16, 3, 3, 1, 1, 1, 1},     /* C = 3 at stride 1 (VGG's first layer): channels padded to 8 */
    {1, 5, 7, 6, 8, 1, 1, 1, 1, 0, 0},       /* C = 5, 1x1: padded */
    {1, 3, 10, 10, 24, 3, 3, 2, 1, 1, 1},    /* C = 3, stride 2x1: padded, not space-to-depth */
};

/* Winograd F(2x2, 3x3) (winograd.c, F32 without TF32), forced on: 3x3 stride-1 shapes with odd and even P and Q
 * (a last tile half outside the output), padding 0, 1 and 2, batch 1, C = 8 and K = 8, every epilogue variant,
 * with the heuristic's GEMM config and two forced ones; plus a shape whose batch is split into slices is left to
 * the GPU run (it needs over 1 GB of workspace). */
static const conv_case wino_cases[] = {
    {1, 32, 7, 9, 8, 3, 3, 1, 1, 1, 1},     /* batch 1, H != W, odd P and Q, K = 8 */
    {2, 8, 9, 7, 16, 3, 3, 1, 1, 1, 1},     /* C = 8 */
    {2, 40, 6, 5, 24, 3, 3, 1, 1, 0, 0},    /* pad 0: P = 4, Q = 3 */
    {3, 64, 5, 6, 72, 3, 3, 1, 1, 2, 2},    /* pad 2: P = 7, Q = 8 */
    {2, 128, 10, 10, 128, 3, 3, 1, 1, 1, 1}, /* several GEMM tiles along C and K */
};
static void g_conv_algo(ctx *t);
/* dgrad of stride-1 convolutions on the forward tensor-core kernels (conv2d.c, dgrad_tc: the filter flipped and
 * transposed, padding R-1-pad): padding 0 (a padding of R-1 in the rewritten problem), R-1 (none) and between,
 * 5x5, H != W, batch 1, with and without accumulation, the tuned choice and one forced config; a strided conv
 * beside them stays on the generic kernels. */
static const char *row_only; /* CNN_TEST_CONV_ROW */
static bool row_selected(int cfg) { return !row_only || strstr(cnn_cuda_conv_config_name(cfg), row_only) != NULL; }
/* a conv config's flag bit (hooks.h: its kernel kind, passes and options) */
static bool row_has(int cfg, unsigned bit) { return (cnn_cuda_conv_config_flags(cfg) & bit) != 0; }
/* the first fast forward row (the pipelined mma.sync kernel's); the rows after it are the fast kinds' */
static int first_fast_row(void) {
    for (int cfg = 0; cfg < cnn_cuda_conv_config_count(); cfg++)
        if (row_has(cfg, CNN_CUDA_CONV_PIPELINED)) return cfg;
    fatal("no pipelined conv row");
    return -1;
}

/* A conv whose output only a training BatchNorm reads sums that output's channels in its epilogue (cnn_conv_stats:
 * the warp-specialised rows' STATS programs, sm_90a F16/BF16) and bn_forward_train takes the sums instead of reading
 * x (perf-log step 87). The conv's y against the float64 conv; the BatchNorm's statistics, y and running statistics
 * against a float64 BatchNorm over that y as stored (and the CPU backend's over the same values), for the
 * heuristic's row and every warp-specialised row forced (a transposed row runs its pixel-major twin's program).
 * A forced row that runs must have written the sums and the BatchNorm must have taken them; where no row wrote
 * them (other dtypes and GPUs) the BatchNorm sums x itself, to the same results. Shapes: GEMM rows that no tile
 * divides (a partial last chunk), K not a multiple of 64 (a partial column chunk), batch 1, a strided conv, and
 * enough rows for several chunks per fold CTA. These tensors are small enough for the BatchNorm's one-launch pass,
 * which the conv leaves to read x (no sums: checked on the last case with the pass forced on), so the others force
 * it off. */
static void g_bn_conv_sums(ctx *t) {
    static const conv_case cases[] = {
        {2, 64, 9, 11, 72, 3, 3, 1, 1, 1, 1}, {1, 64, 7, 5, 136, 1, 1, 1, 1, 0, 0},
        {3, 64, 12, 10, 64, 3, 3, 2, 2, 1, 1}, {8, 128, 16, 16, 256, 1, 1, 1, 1, 0, 0}};
    int rows[64], n_rows = 0, seen = 0; /* quick: every fourth of them */
    rows[n_rows++] = -1;
    for (int cfg = 0; cfg < cnn_cuda_conv_config_count() && n_rows < 64; cfg++)
        if (row_has(cfg, CNN_CUDA_CONV_WARPSPEC) && cnn_cuda_conv_config_usable(t->gpu, cfg) && (!quick || seen++ % 4 == 0))
            rows[n_rows++] = cfg;
    const size_t n_cases = sizeof cases / sizeof cases[0];
    for (size_t k = 0; k <= n_cases; k++)
        for (int ri = 0; ri < (k < n_cases || n_rows < 2 ? n_rows : 2); ri++) {
            const bool one_launch = k == n_cases; /* the last case again, the BatchNorm's one-launch pass forced on */
            const int cfg = rows[ri];
            const cnn_conv2d cv = conv_of(&cases[one_launch ? n_cases - 1 : k]);
            cnn_cuda_bn_force_fused(t->gpu, one_launch ? 1 : 0);
            const int64_t nx = (int64_t)cv.n * cv.h * cv.w * cv.c, nw = (int64_t)cv.k * cv.r * cv.s * cv.c;
            const int64_t m = (int64_t)cv.n * cv.p * cv.q, ny = m * cv.k;
            const int c = cv.k;
            const uint64_t seed = 2400 + 10 * k;
            char name[200];
            conv_name(name, sizeof name, "fprop", t, &cv, cfg, one_launch ? ".channel_sums.bn_one_launch" : ".channel_sums");
            arr x = arr_in(t, nx, true, seed, -1, 1, 0), w = arr_in(t, nw, true, seed + 1, -0.5f, 0.5f, 0);
            arr y = arr_out(t, ny, true, 0);
            cnn_cuda_stats st0, st1, st2;
            cnn_cuda_stats_get(t->gpu, &st0);
            cnn_conv_stats sums = {.chunks = -1};
            cnn_epilogue ep = {.stats = &sums};
            cnn_cuda_conv_force_config(t->gpu, cfg);
            expect_ok(t->gpu->conv2d_fprop(t->gpu, &cv, &ep, x.g.p, w.g.p, y.g.p), name);
            cnn_cuda_conv_force_config(t->gpu, -1);
            cnn_cuda_stats_get(t->gpu, &st1);
            const long wrote = st1.conv_stats_launches - st0.conv_stats_launches;
            check(sums.chunks >= 0 && wrote == (sums.chunks > 0) && (sums.chunks == 0 || sums.y == y.g.p), name,
                  "channel sums: %lld chunks, %ld stats launches", (long long)sums.chunks, wrote);
            if (cfg >= 0 && (t->dt == CNN_DTYPE_BF16 || t->dt == CNN_DTYPE_F16) && !one_launch)
                check(sums.chunks > 0, name, "the forced warp-specialised row wrote no channel sums");
            if (one_launch && cnn_cuda_coop_ok(t->gpu))
                check(sums.chunks == 0, name, "%lld chunks of sums for a BatchNorm that reads x in one launch",
                      (long long)sums.chunks);
            cnn_conv_stats csums = {.chunks = -1};
            cnn_epilogue cep = {.stats = &csums};
            if (t->cpu && cpu_ok(t, t->cpu->conv2d_fprop(t->cpu, &cv, &cep, x.c, w.c, y.c), name))
                check(csums.chunks == 0, name, "the CPU backend claims %lld chunks of sums", (long long)csums.chunks);
            double *ry = dalloc(ny);
            conv_ref_fprop(&cv, x.h, w.h, NULL, NULL, NULL, false, ry);
            arr *in0[] = {&x, &w};
            layout ly = {"NPQK", {cv.n, cv.p, cv.q, cv.k}};
            verify(t, name, &y, ry, &ly, in0, 2);

            /* the BatchNorm over y as stored: the same values on the CPU backend */
            float *yg = arr_gpu(t, &y);
            memcpy(y.h, yg, (size_t)ny * sizeof(float));
            free(yg);
            if (y.c && t->cpu->upload(t->cpu, y.c, y.h, (size_t)ny * 4) != CNN_OK) fatal("cpu upload");
            cnn_bn bn = {.m = m, .c = c, .eps = 1e-5f, .momentum = 0.1f, .world = 1, .stats = &sums};
            cnn_bn cbn = bn;
            arr gamma = arr_in(t, c, false, seed + 2, 0.5f, 1.5f, 0), beta = arr_in(t, c, false, seed + 3, -0.5f, 0.5f, 0);
            arr rm = arr_in(t, c, false, seed + 4, -0.2f, 0.2f, 0), rv = arr_in(t, c, false, seed + 5, 0.5f, 1.5f, 0);
            arr sm = arr_out(t, c, false, 0), si = arr_out(t, c, false, 0), yb = arr_out(t, ny, true, 0);
            bn_ref ref = bn_forward_ref(y.h, NULL, false, m, c, m, &gamma, &beta, &rm, &rv);
            snprintf(name, sizeof name, "bn_forward_train.%s.conv_sums.m%lld_c%d.%s%s", t->dts, (long long)m, c,
                     cfg < 0 ? "heuristic" : cnn_cuda_conv_config_name(cfg), one_launch ? ".one_launch" : "");
            for (char *p = name; *p; p++)
                if (*p == '/') *p = '-';
            expect_ok(t->gpu->bn_forward_train(t->gpu, &bn, y.g.p, gamma.g.p, beta.g.p, rm.g.p, rv.g.p, sm.g.p, si.g.p,
                                               NULL, false, yb.g.p),
                      name);
            cnn_cuda_stats_get(t->gpu, &st2);
            check(st2.bn_stats_folds - st1.bn_stats_folds == (sums.chunks > 0), name,
                  "%ld folds of the conv's sums, %lld chunks written", st2.bn_stats_folds - st1.bn_stats_folds,
                  (long long)sums.chunks);
            if (t->cpu)
                cpu_ok(t, t->cpu->bn_forward_train(t->cpu, &cbn, y.c, gamma.c, beta.c, rm.c, rv.c, sm.c, si.c, NULL,
                                                   false, yb.c), name);
            arr *in[] = {&y, &gamma, &beta};
            verify_bn_forward(t, name, &ref, &yb, &sm, &si, &rm, &rv, m, c, in, 3);
            free(ry);
            bn_ref_free(&ref);
            arr_free(t, &x), arr_free(t, &w), arr_free(t, &y), arr_free(t, &gamma), arr_free(t, &beta);
            arr_free(t, &rm), arr_free(t, &rv), arr_free(t, &sm), arr_free(t, &si), arr_free(t, &yb);
        }
    cnn_cuda_bn_force_fused(t->gpu, -1);
}

static const conv_case dgrad_fast_cases[] = {
    {1, 16, 9, 7, 24, 3, 3, 1, 1, 0, 0},  /* pad 0: the rewritten problem pads by 2 */
    {2, 24, 6, 5, 16, 5, 5, 1, 1, 2, 2},  /* 5x5 pad 2 */
    {2, 16, 5, 8, 32, 3, 3, 1, 1, 2, 2},  /* pad 2 = R - 1: the rewritten problem has none */
    {3, 40, 7, 7, 8, 1, 1, 1, 1, 0, 0},   /* 1x1, K = 8 becomes the reduction */
};
/* strided dgrad by phases (conv2d_dgrad.c): each phase a forward convolution into its block, then the interleave;
 * with and without accumulation, the tuned choice and one forced config. on_fast: whether the fast rows must
 * have run it (the backend counts those dgrads); where a phase's first row would need negative padding, the
 * generic kernels. */
typedef struct dgrad_stride_case {
    conv_case cc;
    bool on_fast;
} dgrad_stride_case;
static const dgrad_stride_case dgrad_stride_cases[] = {
    {.cc = {2, 16, 9, 9, 24, 3, 3, 2, 2, 1, 1}, .on_fast = true},   /* 3x3/2 pad 1, odd H: a block row more */
    {.cc = {2, 16, 8, 10, 24, 3, 3, 2, 2, 1, 1}, .on_fast = true},  /* even H and W */
    {.cc = {3, 24, 9, 7, 16, 1, 1, 2, 2, 0, 0}, .on_fast = true},   /* 1x1/2: three phases no tap reaches */
    {.cc = {2, 48, 7, 9, 40, 3, 3, 2, 2, 1, 1}, .on_fast = true},   /* C, K over 32, not multiples: partial filter tiles */
    {.cc = {1, 16, 15, 13, 8, 7, 7, 2, 2, 3, 3}, .on_fast = true},  /* 7x7/2 pad 3, batch 1, H != W */
    {.cc = {2, 8, 9, 10, 16, 3, 3, 2, 1, 1, 1}, .on_fast = true},   /* stride 2x1 */
    {.cc = {1, 16, 11, 11, 16, 3, 3, 3, 3, 0, 0}, .on_fast = true}, /* stride 3, pad 0: 9 phases */
    {.cc = {2, 16, 7, 9, 8, 2, 2, 2, 2, 0, 0}, .on_fast = true},    /* 2x2/2: one tap per phase */
    {.cc = {2, 8, 7, 7, 8, 1, 1, 2, 2, 1, 1}, .on_fast = false},    /* 1x1/2 pad 1: negative padding, generic */
};
/* dgrad_phase_rows with the phases written one way (in_place: into dx; else through the blocks); seeds apart */
static void dgrad_phase_rows_by(ctx *t, int in_place) {
    static const conv_case odd = {2, 16, 9, 7, 24, 3, 3, 2, 2, 1, 1}, one = {3, 24, 9, 7, 16, 1, 1, 2, 2, 0, 0};
    unsigned seen[64];
    int ns = 0;
    for (int cfg = first_fast_row(); cfg < cnn_cuda_conv_config_count(); cfg++) {
        const unsigned fl = cnn_cuda_conv_config_flags(cfg);
        bool dup = false;
        for (int i = 0; i < ns; i++) dup |= seen[i] == fl;
        if (dup || ns == 64 || !cnn_cuda_conv_config_usable(t->gpu, cfg) || !row_selected(cfg)) continue;
        seen[ns++] = fl;
        conv_one(t, &odd, cfg, 3, 7900 + 10 * cfg + 5000 * in_place); /* scale/shift/residual/ReLU fprop; dgrad accumulating */
        conv_one(t, &one, cfg, 0, 7901 + 10 * cfg + 5000 * in_place); /* plain fprop; dgrad overwriting */
        if (row_has(cfg, CNN_CUDA_CONV_PIPELINED)) {
            cnn_cuda_conv_force_splitk(t->gpu, 3);
            conv_one(t, &odd, cfg, 1, 7902 + 10 * cfg + 5000 * in_place); /* split-K: partials and the epilogue kernel */
            cnn_cuda_conv_force_splitk(t->gpu, -1);
        }
    }
}

/* all phases in one grouped launch (conv2d_warpspec.cu, GROUPED) on each group row the GPU runs, forced: K % 64
 * (the TMA maps' channel slices), C over 8 but not a multiple of 64 (partial column tiles), odd and unequal sizes,
 * batch 1, accumulating and overwriting (then zeros at the phases no tap reaches), one and two slices per tap, and
 * with one CTA looping over every phase's tiles; each must have run grouped (the backend counts those launches) */
static const conv_case dgrad_grouped_cases[] = {
    {2, 16, 9, 7, 64, 3, 3, 2, 2, 1, 1},    /* 3x3/2, odd H and W: block rows beyond the phases */
    {3, 24, 9, 7, 64, 1, 1, 2, 2, 0, 0},    /* 1x1/2: one phase with taps, three of zeros */
    {1, 40, 15, 12, 128, 3, 3, 2, 2, 1, 1}, /* batch 1, H != W, two slices per tap */
    {2, 8, 13, 11, 64, 7, 7, 2, 2, 3, 3},   /* 7x7/2: phases of 16, 12, 12 and 9 taps */
};
static void dgrad_grouped(ctx *t) {
    const int n = (int)(sizeof dgrad_grouped_cases / sizeof dgrad_grouped_cases[0]);
    for (int g = 0; g < cnn_cuda_dgrad_group_rows(); g++) {
        const int row = cnn_cuda_dgrad_group_row(g);
        if (!cnn_cuda_conv_config_usable(t->gpu, row) || !row_selected(row)) continue;
        cnn_cuda_dgrad_force_way(t->gpu, 2 + g);
        char tag[80];
        snprintf(tag, sizeof tag, ".grouped_%s", cnn_cuda_conv_config_name(row));
        t->tag = tag;
        for (int i = 0; i < (quick ? 2 : n); i++)
            for (int grid = 0; grid < 2; grid++) {
                cnn_cuda_conv_force_grid(t->gpu, grid ? 1 : 0);
                cnn_cuda_stats st0, st1;
                cnn_cuda_stats_get(t->gpu, &st0);
                conv_one(t, &dgrad_grouped_cases[i], -1, i % 2 ? 0 : 3, 8300 + 100 * g + 10 * i + grid);
                cnn_cuda_stats_get(t->gpu, &st1);
                char name[160];
                snprintf(name, sizeof name, "dgrad_grouped.%s.%s.case%d%s.ran_grouped", t->dts,
                         cnn_cuda_conv_config_name(row), i, grid ? ".one_cta" : "");
                check(st1.dgrad_grouped_launches == st0.dgrad_grouped_launches + 1, name, "%ld grouped launches",
                      st1.dgrad_grouped_launches - st0.dgrad_grouped_launches);
            }
        cnn_cuda_conv_force_grid(t->gpu, 0);
    }
    t->tag = NULL;
    cnn_cuda_dgrad_force_way(t->gpu, -1);
}

/* every kind of fast row running a strided dgrad's phases (and the forward and wgrad of the same cases): the first
 * row of each distinct flag set, forced, on a 3x3/2 with odd sizes accumulating (a block row more than the phase)
 * and a 1x1/2 overwriting (three phases no tap reaches), each phase written into dx in place (the row's OUT_PHASE
 * program) and through the blocks and the interleave; the pipelined row also with 3 split-K slices; then the
 * grouped launches */
static void dgrad_phase_rows(ctx *t) {
    for (int in_place = 1; in_place >= 0; in_place--) {
        cnn_cuda_dgrad_force_way(t->gpu, in_place);
        t->tag = in_place ? ".in_place" : ".blocks";
        dgrad_phase_rows_by(t, in_place);
    }
    t->tag = NULL;
    cnn_cuda_dgrad_force_way(t->gpu, -1);
    if (t->dt != CNN_DTYPE_F32) dgrad_grouped(t);
}

/* stride-1 dgrads reading the forward's filter as it is (conv2d_warpspec.cu's FILT_T: its slices TMA boxes of the
 * filter's K x C, multiplied MN-major): every TMA row forced (boxes per slice 1, 2 or 4; the transposed tiles, where
 * the filter is wgmma's m64 operand; filter-resident; cooperative), C not a multiple of 64 (the last box partly past
 * the filter, zeros), C = 8, 1x1 over two slices, 3x3 and 5x5 with every padding (the flipped taps), batch 1, H != W,
 * accumulating and overwriting; each must have run so (the backend counts those launches). A filter-resident row
 * keeps every slice of its column block in shared memory: it runs the 1x1 case only (two slices; the others'
 * filters do not fit, and the row's twin would run them); a transposed row overwrites (it hands a residual to its
 * twin). */
static const conv_case dgrad_ft_cases[] = {
    {2, 16, 9, 7, 64, 3, 3, 1, 1, 1, 1},   /* 3x3 pad 1, odd sizes, 16 output channels of a 64-wide box */
    {1, 72, 6, 11, 128, 1, 1, 1, 1, 0, 0}, /* 1x1, batch 1, H != W, two slices, C = 72: a second box mostly zeros */
    {2, 136, 7, 5, 64, 3, 3, 1, 1, 0, 0},  /* pad 0 (the dgrad pads 2), C = 136: three boxes */
    {2, 8, 6, 6, 64, 5, 5, 1, 1, 2, 2},    /* 5x5 pad 2, C = 8 */
};
static void dgrad_ft(ctx *t) {
    const int n = (int)(sizeof dgrad_ft_cases / sizeof dgrad_ft_cases[0]);
    for (int cfg = first_fast_row(); cfg < cnn_cuda_conv_config_count(); cfg++) {
        if (!row_has(cfg, CNN_CUDA_CONV_WARPSPEC) || !row_has(cfg, CNN_CUDA_CONV_TMA) ||
            !cnn_cuda_conv_config_usable(t->gpu, cfg) || !row_selected(cfg))
            continue;
        t->tag = ".filter_t";
        const bool bres = row_has(cfg, CNN_CUDA_CONV_FILTER_RESIDENT);
        for (int i = bres ? 1 : 0; i < (bres ? 2 : quick ? 1 : n); i++) {
            cnn_cuda_stats st0, st1;
            cnn_cuda_stats_get(t->gpu, &st0);
            /* variant 3: accumulating (a transposed row hands that to its pixel-major twin: overwriting there) */
            const int variant = row_has(cfg, CNN_CUDA_CONV_TRANSPOSED) || (i + cfg) % 2 ? 0 : 3;
            conv_one(t, &dgrad_ft_cases[i], cfg, variant, 8700 + 10 * cfg + i);
            cnn_cuda_stats_get(t->gpu, &st1);
            char name[160];
            snprintf(name, sizeof name, "dgrad_ft.%s.%s.case%d.ran_filter_t", t->dts, cnn_cuda_conv_config_name(cfg),
                     i);
            check(st1.dgrad_ft_launches == st0.dgrad_ft_launches + 1, name,
                  "%ld launches reading the filter transposed", st1.dgrad_ft_launches - st0.dgrad_ft_launches);
        }
    }
    t->tag = NULL;
}

/* conv2d_dgrad_relu (a dgrad with the backward of the ReLU whose output is the conv's input, VGG's convs): dx =
 * relu_y > 0 ? dgrad : 0 against float64 and the CPU backend, relu_y with a third of its values <= 0 and exact zeros
 * (which stop the gradient); with sum, dx's channel sums (dx_sum) against the float64 sums of dx as the GPU stored
 * it (float32 accumulation: 1e-5) and the CPU backend's sums of its own dx (the dtype's bound). cfg >= 0 forces that
 * row; gated: the launch must have gated in the epilogue (a FILT_T program: conv2d_dgrad.c) rather than in a pass of
 * its own, and with sum summed there too. */
static void dgrad_relu_one(ctx *t, const conv_case *cc, int cfg, bool gated, bool sum, uint64_t seed) {
    cnn_conv2d cv = conv_of(cc);
    cnn_cuda_conv_force_config(t->gpu, cfg);
    const int64_t nx = (int64_t)cv.n * cv.h * cv.w * cv.c, nw = (int64_t)cv.k * cv.r * cv.s * cv.c,
                  ny = (int64_t)cv.n * cv.p * cv.q * cv.k;
    arr dy = arr_in(t, ny, true, seed, -1, 1, 0), w = arr_in(t, nw, true, seed + 1, -0.5f, 0.5f, 0);
    arr ry = arr_in(t, nx, true, seed + 2, -0.5f, 1, 0), dx = arr_out(t, nx, true, 0);
    arr dsum = arr_out(t, sum ? cv.c : 1, false, 0);
    for (int64_t i = 0; i < nx; i += 7) ry.h[i] = 0.0f; /* exact zeros: dx must be 0 there */
    arr_sync_in(t, &ry);
    double *ref = dalloc(nx);
    conv_ref_dgrad(&cv, dy.h, w.h, ref);
    for (int64_t i = 0; i < nx; i++)
        if (!(ry.h[i] > 0)) ref[i] = 0.0;
    char name[200];
    conv_name(name, sizeof name, "dgrad_relu", t, &cv, cfg, sum ? ".dx_sum" : "");
    cnn_cuda_stats st0, st1;
    cnn_cuda_stats_get(t->gpu, &st0);
    expect_ok(t->gpu->conv2d_dgrad_relu(t->gpu, &cv, dy.g.p, w.g.p, ry.g.p, dx.g.p, sum ? dsum.g.p : NULL), name);
    cnn_cuda_stats_get(t->gpu, &st1);
    if (t->cpu)
        cpu_ok(t, t->cpu->conv2d_dgrad_relu(t->cpu, &cv, dy.c, w.c, ry.c, dx.c, sum ? dsum.c : NULL), name);
    layout lx = {"NHWC", {cv.n, cv.h, cv.w, cv.c}};
    arr *in[] = {&dy, &w, &ry};
    verify(t, name, &dx, ref, &lx, in, 3);
    char nm[240];
    if (sum) {
        float *got = arr_gpu(t, &dx);
        double *rs = dalloc(cv.c);
        for (int64_t i = 0; i < nx; i++) rs[i % cv.c] += got[i];
        layout lc = {"C", {cv.c}};
        snprintf(nm, sizeof nm, "%s.sums", name);
        verify_bounds(t, nm, &dsum, rs, &lc, in, 3, 1e-5, t->tol);
        free(rs), free(got);
    }
    if (gated) {
        snprintf(nm, sizeof nm, "%s.gated_in_epilogue", name);
        check(st1.dgrad_gate_launches == st0.dgrad_gate_launches + 1 &&
                  st1.dgrad_sum_launches == st0.dgrad_sum_launches + (sum ? 1 : 0),
              nm, "%ld gated launches, %ld summing (%d expected)", st1.dgrad_gate_launches - st0.dgrad_gate_launches,
              st1.dgrad_sum_launches - st0.dgrad_sum_launches, sum ? 1 : 0);
    }
    cnn_cuda_conv_force_config(t->gpu, -1);
    free(ref);
    arr_free(t, &dy), arr_free(t, &w), arr_free(t, &ry), arr_free(t, &dx), arr_free(t, &dsum);
}

/* every FILT_T row forced on dgrad_ft_cases (gated in its epilogue: GATE_AHEAD, a transposed row's pixel-major
 * twin, the filter-resident rows on the 1x1 case; summing dx but on case 1 of the others, whose program then stores
 * no sums), then the
 * heuristic's choice (the rewrite and the ReLU's pass, then channel_sum's) on stride-1, strided and C % 8 != 0
 * problems (the generic dgrad and the passes) */
static void g_dgrad_relu(ctx *t) {
    const int n = (int)(sizeof dgrad_ft_cases / sizeof dgrad_ft_cases[0]);
    for (int cfg = first_fast_row(); t->dt != CNN_DTYPE_F32 && cfg < cnn_cuda_conv_config_count(); cfg++) {
        if (!row_has(cfg, CNN_CUDA_CONV_WARPSPEC) || !row_has(cfg, CNN_CUDA_CONV_TMA) ||
            !cnn_cuda_conv_config_usable(t->gpu, cfg) || !row_selected(cfg))
            continue;
        const bool bres = row_has(cfg, CNN_CUDA_CONV_FILTER_RESIDENT);
        for (int i = bres ? 1 : 0; i < (bres ? 2 : quick ? 1 : n); i++)
            dgrad_relu_one(t, &dgrad_ft_cases[i], cfg, true, i != 1 || bres, 9100 + 10 * cfg + i);
    }
    static const conv_case other[] = {
        {2, 16, 9, 7, 64, 3, 3, 1, 1, 1, 1},  /* VGG's 3x3/1 pad 1, odd sizes */
        {1, 16, 9, 7, 24, 3, 3, 1, 1, 0, 0},  /* pad 0 */
        {3, 40, 7, 7, 8, 1, 1, 1, 1, 0, 0},   /* 1x1 */
        {2, 16, 11, 9, 32, 3, 3, 2, 2, 1, 1}, /* stride 2: phases, then the pass */
        {2, 12, 7, 9, 16, 3, 3, 1, 1, 1, 1},  /* C = 12: the generic dgrad, then the pass */
    };
    for (int i = 0; i < (quick ? 2 : (int)(sizeof other / sizeof other[0])); i++)
        dgrad_relu_one(t, &other[i], -1, false, i != 1, 9900 + 10 * i);
}

static void g_dgrad_fast(ctx *t) {
    const int first_tc = first_fast_row();
    if (!t->tf32 && cnn_cuda_conv_config_usable(t->gpu, first_tc)) dgrad_phase_rows(t);
    if (t->dt != CNN_DTYPE_F32) dgrad_ft(t);
    const int n = (int)(sizeof dgrad_fast_cases / sizeof dgrad_fast_cases[0]);
    for (int i = 0; i < n; i++)
        for (int f = 0; f < 2; f++) /* the tuned choice, then the first tensor-core config forced */
            conv_one(t, &dgrad_fast_cases[i], f ? first_tc : -1, 2 * i + f, 7600 + 10 * i + f);
    const int ns = (int)(sizeof dgrad_stride_cases / sizeof dgrad_stride_cases[0]);
    for (int i = 0; i < (quick ? 4 : ns); i++)
        for (int f = 0; f < 2; f++) {
            cnn_cuda_stats st0, st1;
            cnn_cuda_stats_get(t->gpu, &st0);
            conv_one(t, &dgrad_stride_cases[i].cc, f ? first_tc : -1, 2 * i + f, 7700 + 10 * i + f);
            cnn_cuda_stats_get(t->gpu, &st1);
            const bool tc = cnn_cuda_conv_config_usable(t->gpu, first_tc) && !t->tf32;
            char name[160];
            snprintf(name, sizeof name, "dgrad_fast.%s.case%d.%s.on_fast", t->dts, i, f ? "forced" : "chosen");
            check((st1.dgrad_fast_launches > st0.dgrad_fast_launches) == (tc && dgrad_stride_cases[i].on_fast), name,
                  "tensor-core dgrads %ld before, %ld after (expected %s)", st0.dgrad_fast_launches, st1.dgrad_fast_launches,
                  tc && dgrad_stride_cases[i].on_fast ? "one" : "none");
        }
}
static void g_conv_winograd(ctx *t) {
    cnn_cuda_conv_force_winograd(t->gpu, 1);
    t->tag = ".winograd";
    const int n = (int)(sizeof wino_cases / sizeof wino_cases[0]);
    const int forced[] = {-1, 0, 3}; /* the heuristic, then tensor-core configs 0 and 3 (by index among them) */
    const int first_tc = first_fast_row();
    for (int i = 0; i < (quick ? 3 : n); i++)
        for (int f = 0; f < 3; f++) {
            int cfg = forced[f] < 0 ? -1 : first_tc + forced[f];
            conv_one(t, &wino_cases[i], cfg, i + f, 7000 + 10 * i + f);
        }
    t->tag = NULL;
    cnn_cuda_conv_force_winograd(t->gpu, -1);
}

/* wgrad on wgmma (conv2d_wgrad.c: F16/BF16 on sm_90a, C % 64 == 0, K % 8 == 0): every config forced, with its
 * heuristic splits, one split (the kernel writes dW itself) and three, then the tuned or heuristic choice, on odd
 * shapes within those preconditions: batch 1, H != W, R != S, strides 2 and 2x1, pads 0 to 3, K a multiple of 8 but
 * not of 64 (rows past K read dy's zeros and are not stored), C over several 64-channel blocks per tap, the last
 * slice past the last pixel, 1x1 stride-1 unpadded convs (x read by its rows' tiled map); the halo configs on every
 * 3x3 stride-1 case (partial row and column blocks, padded or not). Each must have run on wgmma (the backend counts
 * those launches). Quick: 3 cases. */
static const conv_case wgrad_cases[] = {
    {1, 64, 7, 9, 8, 3, 3, 1, 1, 1, 1},      /* batch 1, H != W, K = 8 */
    {2, 64, 9, 7, 72, 1, 1, 1, 1, 0, 0},     /* 1x1 (x by rows), 126 pixels (2 slices, the last partial) */
    {3, 128, 11, 9, 64, 3, 3, 2, 2, 1, 1},   /* stride 2, odd sizes, 2 channel blocks per tap */
    {4, 64, 20, 20, 72, 3, 3, 1, 1, 1, 1},   /* 25 slices: 3 splits of 9, 9 and 7; K = 72 */
    {1, 128, 5, 3, 16, 1, 1, 1, 1, 0, 0},    /* 1x1 (x by rows) over 2 channel blocks, 15 pixels: one partial slice */
    {2, 64, 15, 13, 64, 7, 7, 2, 2, 3, 3},   /* the 7x7/2 pad 3 */
    {1, 64, 5, 12, 136, 3, 1, 1, 2, 1, 0},   /* R != S, stride 1x2, K = 136 */
    {3, 192, 9, 9, 24, 1, 1, 2, 2, 0, 0},    /* 1x1/2, C = 192 */
    /* the halo configs' (3x3 stride 1): several column and row blocks per image, the last ones partial */
    {2, 128, 13, 37, 64, 3, 3, 1, 1, 1, 1},  /* 2 channel blocks of x; Q = 37: 5 blocks of 8, 2 of 32 */
    {3, 64, 17, 10, 16, 3, 3, 1, 1, 0, 0},   /* unpadded: P = 15, Q = 8, K = 16 */
};

static void wgrad_one(ctx *t, const conv_case *cc, int cfg, int splits, uint64_t seed) {
    cnn_conv2d cv = conv_of(cc);
    const int64_t nx = (int64_t)cv.n * cv.h * cv.w * cv.c, nw = (int64_t)cv.k * cv.r * cv.s * cv.c,
                  ny = (int64_t)cv.n * cv.p * cv.q * cv.k;
    arr x = arr_in(t, nx, true, seed, -1, 1, 0), dy = arr_in(t, ny, true, seed + 1, -1, 1, 0);
    arr dw = arr_out(t, nw, false, 0);
    double *rdw = dalloc(nw);
    conv_ref_wgrad(&cv, x.h, dy.h, rdw);
    char name[200], extra[64];
    snprintf(extra, sizeof extra, ".%s.splits%d", cfg < 0 ? "chosen" : cnn_cuda_wgrad_config_name(cfg), splits);
    conv_name(name, sizeof name, "wgrad_wgmma", t, &cv, -1, extra);
    cnn_cuda_wgrad_force(t->gpu, cfg, splits);
    cnn_cuda_stats st0, st1;
    cnn_cuda_stats_get(t->gpu, &st0);
    expect_ok(t->gpu->conv2d_wgrad(t->gpu, &cv, x.g.p, dy.g.p, dw.g.p), name);
    cnn_cuda_stats_get(t->gpu, &st1);
    cnn_cuda_wgrad_force(t->gpu, -1, 0);
    if (t->cpu) cpu_ok(t, t->cpu->conv2d_wgrad(t->cpu, &cv, x.c, dy.c, dw.c), name);
    layout lw = {"KRSC", {cv.k, cv.r, cv.s, cv.c}};
    arr *in[] = {&x, &dy};
    verify(t, name, &dw, rdw, &lw, in, 2);
    char lname[220];
    snprintf(lname, sizeof lname, "%s.on_wgmma", name);
    check(st1.wgrad_wgmma_launches == st0.wgrad_wgmma_launches + 1, lname, "wgmma wgrad launches %ld before, %ld after",
          st0.wgrad_wgmma_launches, st1.wgrad_wgmma_launches);
    free(rdw);
    arr_free(t, &x), arr_free(t, &dy), arr_free(t, &dw);
}

static void g_conv_wgrad(ctx *t) {
    if (t->dt == CNN_DTYPE_F32) {
        printf("# conv_wgrad.%s: wgrad on wgmma takes F16/BF16; F32 runs on the generic kernels (group conv)\n", t->dts);
        return;
    }
    bool any = false;
    for (int cfg = 0; cfg < cnn_cuda_wgrad_config_count(); cfg++) any |= cnn_cuda_wgrad_config_usable(t->gpu, cfg);
    if (!any) {
        printf("SKIP conv_wgrad.%s: wgrad on wgmma needs sm_90a and the driver's tensor-map encoders\n", t->dts);
        return;
    }
    const int ncase = quick ? 3 : (int)(sizeof wgrad_cases / sizeof wgrad_cases[0]);
    for (int i = 0; i < ncase; i++) {
        const cnn_conv2d cv = conv_of(&wgrad_cases[i]);
        for (int cfg = 0; cfg < cnn_cuda_wgrad_config_count(); cfg++) {
            if (!cnn_cuda_wgrad_config_usable(t->gpu, cfg) || !cnn_cuda_wgrad_config_takes(cfg, &cv)) continue;
            for (int sp = 0; sp < 3; sp++) /* the heuristic's splits, one, three */
                wgrad_one(t, &wgrad_cases[i], cfg, sp == 2 ? 3 : sp, 7000 + 100 * i + 10 * cfg + sp);
        }
        wgrad_one(t, &wgrad_cases[i], -1, 0, 7090 + 100 * i);
    }
}

/* wgrad over few input channels (conv2d_wgrad_few.cu, F16/BF16 on sm_80+): the first layers' shapes and their
 * odd neighbours (batch 1, H != W, fewer than 64 pixels, a last block partly past the pixels, K not a multiple of
 * 16, 1 to 4 channels, R != S, R*S*C up to 147, pad 0), against float64 and the CPU backend, taken by that path, and
 * bitwise the same on a second run */
static const conv_case wgrad_few_cases[] = {
    {2, 3, 40, 36, 64, 7, 7, 2, 2, 3, 3},  /* the stem, 720 pixels: several blocks per CTA */
    {1, 3, 9, 11, 8, 3, 3, 1, 1, 1, 1},    /* batch 1, the CIFAR stem's shape, 99 pixels */
    {3, 1, 12, 10, 24, 5, 5, 1, 1, 2, 2},  /* grayscale 5x5, K = 24 */
    {2, 4, 13, 17, 16, 3, 3, 2, 2, 1, 1},  /* C = 4, stride 2, odd sizes */
    {1, 2, 5, 4, 40, 7, 7, 1, 1, 3, 3},    /* 20 pixels, R*S*C = 98 */
    {1, 3, 23, 19, 56, 3, 5, 2, 1, 1, 2},  /* R != S, stride 2x1, pad 1x2 */
    {2, 1, 9, 9, 8, 11, 11, 1, 1, 5, 5},   /* R*S*C = 121 */
    {1, 3, 30, 26, 16, 3, 3, 1, 1, 0, 0},  /* pad 0: every window inside the image (no tap checked), 672 pixels */
    {2, 3, 15, 13, 32, 4, 4, 3, 3, 0, 0},  /* pad 0, stride 3, R*S*C = 48, 32 pixels: one block mostly past them */
};

static void g_conv_wgrad_few(ctx *t) {
    if (t->dt == CNN_DTYPE_F32) {
        printf("# conv_wgrad_few.%s: the few-channel wgrad multiplies F16/BF16; F32 runs on the generic kernels\n", t->dts);
        return;
    }
    const int ncase = quick ? 3 : (int)(sizeof wgrad_few_cases / sizeof wgrad_few_cases[0]);
    for (int i = 0; i < ncase; i++) {
        cnn_conv2d cv = conv_of(&wgrad_few_cases[i]);
        const int64_t nx = (int64_t)cv.n * cv.h * cv.w * cv.c, nw = (int64_t)cv.k * cv.r * cv.s * cv.c,
                      ny = (int64_t)cv.n * cv.p * cv.q * cv.k;
        arr x = arr_in(t, nx, true, 7500 + 10 * i, -1, 1, 0), dy = arr_in(t, ny, true, 7501 + 10 * i, -1, 1, 0);
        arr dw = arr_out(t, nw, false, 0);
        double *rdw = dalloc(nw);
        conv_ref_wgrad(&cv, x.h, dy.h, rdw);
        char name[200], nm[240];
        conv_name(name, sizeof name, "wgrad_few", t, &cv, -1, "");
        cnn_cuda_stats st0, st1;
        cnn_cuda_stats_get(t->gpu, &st0);
        expect_ok(t->gpu->conv2d_wgrad(t->gpu, &cv, x.g.p, dy.g.p, dw.g.p), name);
        cnn_cuda_stats_get(t->gpu, &st1);
        if (t->cpu) cpu_ok(t, t->cpu->conv2d_wgrad(t->cpu, &cv, x.c, dy.c, dw.c), name);
        layout lw = {"KRSC", {cv.k, cv.r, cv.s, cv.c}};
        arr *in[] = {&x, &dy};
        verify(t, name, &dw, rdw, &lw, in, 2);
        snprintf(nm, sizeof nm, "%s.on_few", name);
        check(st1.wgrad_few_launches == st0.wgrad_few_launches + 1, nm, "few-channel wgrad launches %ld before, %ld after",
              st0.wgrad_few_launches, st1.wgrad_few_launches);
        float *first = arr_gpu(t, &dw);
        expect_ok(t->gpu->conv2d_wgrad(t->gpu, &cv, x.g.p, dy.g.p, dw.g.p), name);
        float *second = arr_gpu(t, &dw);
        snprintf(nm, sizeof nm, "%s.repeat", name);
        const bool same = memcmp(first, second, (size_t)nw * sizeof(float)) == 0;
        check(same, nm, "%s", same ? "bitwise equal to the first run" : "differs from the first run");
        free(first), free(second), free(rdw);
        arr_free(t, &x), arr_free(t, &dy), arr_free(t, &dw);
    }
}

static void g_conv_fast(ctx *t) {
    const int first_tc = first_fast_row();
    if (!cnn_cuda_conv_config_usable(t->gpu, first_tc)) {
        printf("SKIP conv_fast.%s: the conv2d_pipelined.cu kernels need sm_80+\n", t->dts);
        return;
    }
    for (int cfg = first_tc; cfg < cnn_cuda_conv_config_count(); cfg++)
        if (t->dt == CNN_DTYPE_F32 && row_has(cfg, CNN_CUDA_CONV_WGMMA | CNN_CUDA_CONV_WARPSPEC)) /* by design */
            printf("# conv_fast.%s: %s is a wgmma config; F32 (TF32 or fp32 FMA) runs on the mma.sync ones\n", t->dts,
                   cnn_cuda_conv_config_name(cfg));
        else if (!cnn_cuda_conv_config_usable(t->gpu, cfg)) {
            char name[160];
            snprintf(name, sizeof name, "conv_fast.%s.%s", t->dts, cnn_cuda_conv_config_name(cfg));
            skip(name, "needs more shared memory per block than this GPU has, wgmma off sm_90a, TMA without the "
                       "driver's tensor-map encoder, or CNN_CONV_SKIP names it");
        }
    int ncase = (int)(sizeof conv_fast_cases / sizeof conv_fast_cases[0]);
    t->once = true; /* each row's fprop, and its dgrad where the phases take it; the other passes once a case */
    /* split-K: the heuristic (splits the small outputs of these cases), off, and 3 forced splits; the persistent
     * rows (no split-K) at the same time: a CTA per tile (these outputs have fewer tiles than the GPU has SMs; 2
     * SMs in the emulator), then one CTA and three CTAs looping over all the tiles */
    const int splitk[] = {-1, 0, 3}, grid[] = {0, 1, 3};
    for (int i = 0; i < (quick ? 3 : ncase); i++)
        for (int sk = 0; sk < 3; sk++) {
            cnn_cuda_conv_force_splitk(t->gpu, splitk[sk]);
            cnn_cuda_conv_force_grid(t->gpu, grid[sk]);
            if (!row_only) conv_one(t, &conv_fast_cases[i], -1, 3 - ((i + sk) % 4), 5000 + 10 * i + sk);
            for (int cfg = first_tc; cfg < cnn_cuda_conv_config_count(); cfg++)
                if (cnn_cuda_conv_config_usable(t->gpu, cfg) && row_selected(cfg))
                    conv_one(t, &conv_fast_cases[i], cfg, i + cfg + sk, 5100 + 100 * i + 10 * sk + cfg);
        }
    cnn_cuda_conv_force_splitk(t->gpu, -1);
    /* the warp-specialised rows (conv2d_warpspec.cu), quick mode too, one CTA (B-resident rows: one per column block)
     * and a few looping over several tiles, every epilogue variant: a reduction of 18 slices (longer
     * than any ring of stages, so the consumers take turns and each wraps the ring inside a tile; too long for
     * the B-resident rows, which run their twins), and a 1x1 over 256 channels (4 slices: the B-resident rows
     * keep them all) with 264 outputs, ragged in both directions */
    const conv_case bres_case = {4, 256, 9, 7, 264, 1, 1, 1, 1, 0, 0};
    for (int cfg = first_tc; cfg < cnn_cuda_conv_config_count(); cfg++)
        if (row_has(cfg, CNN_CUDA_CONV_WARPSPEC) && cnn_cuda_conv_config_usable(t->gpu, cfg) && row_selected(cfg))
            for (int gi = 0; gi < 2; gi++) {
                cnn_cuda_conv_force_grid(t->gpu, gi == 0 ? 1 : 3);
                conv_one(t, &conv_fast_cases[8], cfg, cfg + 2 * gi, 5950 + 2 * cfg + gi);
                cnn_cuda_conv_force_grid(t->gpu, gi == 0 ? 1 : 6); /* B-resident: 3 or 2 CTAs per column block */
                conv_one(t, &bres_case, cfg, cfg + 2 * gi + 1, 6050 + 2 * cfg + gi);
            }
    /* the TMA rows (with or without the options after it: residual in shared memory, transposed, TMA stores) where
     * their tensor maps apply (C % 64
     * == 0), quick mode too: the im2col map's bounding box, traversal strides and filter-tap offsets over batch 1,
     * H != W, R != S, strides 2x1 and 2, pads 0 to 3, a 7x7/2, rows past the last image (the map's zeros) and K
     * ragged; one CTA, then three looping over the tiles. Each must have run by TMA (the backend counts those
     * launches), not through its twin; a store-tma row's output too, where the epilogue adds no residual. */
    static const conv_case tma_cases[] = {
        {1, 64, 9, 13, 72, 5, 3, 2, 1, 2, 1},   /* batch 1, H != W, 5x3, stride 2x1, pad 2x1 */
        {3, 64, 7, 7, 40, 7, 7, 2, 2, 3, 3},    /* 7x7/2 pad 3: tap offsets to 6, the box wider than the image */
        {2, 128, 6, 11, 136, 3, 3, 1, 1, 0, 0}, /* pad 0: the box inside the image; K ragged past 128 */
        {2, 64, 13, 11, 64, 1, 1, 2, 2, 0, 0},  /* 1x1/2 over odd sizes */
    };
    for (int cfg = first_tc; cfg < cnn_cuda_conv_config_count(); cfg++) {
        const char *nm = cnn_cuda_conv_config_name(cfg);
        if (!row_has(cfg, CNN_CUDA_CONV_TMA) || !cnn_cuda_conv_config_usable(t->gpu, cfg) || !row_selected(cfg)) continue;
        for (int i = 0; i < (int)(sizeof tma_cases / sizeof tma_cases[0]); i++) {
            cnn_cuda_conv_force_grid(t->gpu, i % 2 ? 3 : 1);
            cnn_cuda_stats st0, st1;
            cnn_cuda_stats_get(t->gpu, &st0);
            conv_one(t, &tma_cases[i], cfg, cfg + i, 6500 + 10 * cfg + i);
            cnn_cuda_stats_get(t->gpu, &st1);
            char name[160];
            snprintf(name, sizeof name, "conv_fast.%s.tma_launched.%s.case%d", t->dts, nm, i);
            check(st1.tma_launches > st0.tma_launches, name, "TMA launches %ld before, %ld after (equal: its twin ran)",
                  st0.tma_launches, st1.tma_launches);
            if (row_has(cfg, CNN_CUDA_CONV_TMA_STORE) && (cfg + i) % 4 != 3 /* conv_one's variant 3 adds a residual: the twin */) {
                snprintf(name, sizeof name, "conv_fast.%s.tma_store_launched.%s.case%d", t->dts, nm, i);
                check(st1.ost_launches > st0.ost_launches, name,
                      "TMA-store launches %ld before, %ld after (equal: its twin ran)", st0.ost_launches, st1.ost_launches);
            }
        }
    }
    cnn_cuda_conv_force_grid(t->gpu, 0);
    t->once = false;
    if (t->dt == CNN_DTYPE_F32 && !t->tf32) g_conv_winograd(t), g_conv_algo(t);
}

/* ---- conv pairs (conv2d_fprop_pair): two convolutions summed in one kernel ---------------------------------
 * y = relu?(conv(x, w) + conv(x2, w2) + shift) against float64 and the CPU backend's pair, on the pairs the eval
 * plan fuses (a bottleneck's 1x1 + its 1x1/2 downsample, a basic block's 3x3 + its 1x1/2) and two stride-1 1x1
 * convs over different C; batch 1, H != W, K ragged past a tile, C2 != C. Every TMA row forced (the only rows
 * that take a pair), with one CTA and with three looping over the tiles, then the tuned choice; each must have
 * run fused (the backend counts pair launches). Then the unfused path (a generic config forced: the first
 * convolution through a workspace), which must count none. Quick mode runs them all. */
typedef struct pair_case {
    conv_case a, b;
} pair_case;
static const pair_case pair_cases[] = {
    {{2, 64, 7, 9, 72, 1, 1, 1, 1, 0, 0}, {2, 128, 13, 17, 72, 1, 1, 2, 2, 0, 0}}, /* 1x1 + 1x1/2, H != W, K = 72 */
    {{1, 64, 6, 5, 64, 3, 3, 1, 1, 1, 1}, {1, 64, 11, 9, 64, 1, 1, 2, 2, 0, 0}},   /* 3x3 + 1x1/2, batch 1 */
    {{3, 128, 5, 5, 136, 1, 1, 1, 1, 0, 0}, {3, 64, 5, 5, 136, 1, 1, 1, 1, 0, 0}}, /* K past 128, C2 < C */
};

/* fused: 1 the pair must have run in one kernel, 0 apart, -1 either (the tuner's choice: printed, not a check) */
static void pair_one(ctx *t, const pair_case *pc, int cfg, bool relu, int fused, uint64_t seed) {
    cnn_conv2d ca = conv_of(&pc->a), cb = conv_of(&pc->b);
    if (ca.p != cb.p || ca.q != cb.q || ca.k != cb.k || ca.n != cb.n) fatal("pair case: the two outputs differ");
    cnn_cuda_conv_force_config(t->gpu, cfg);
    int64_t nx1 = (int64_t)ca.n * ca.h * ca.w * ca.c, nw1 = (int64_t)ca.k * ca.r * ca.s * ca.c;
    int64_t nx2 = (int64_t)cb.n * cb.h * cb.w * cb.c, nw2 = (int64_t)cb.k * cb.r * cb.s * cb.c;
    int64_t ny = (int64_t)ca.n * ca.p * ca.q * ca.k;
    arr x1 = arr_in(t, nx1, true, seed, -1, 1, 0), w1 = arr_in(t, nw1, true, seed + 1, -0.5f, 0.5f, 0);
    arr x2 = arr_in(t, nx2, true, seed + 2, -1, 1, 0), w2 = arr_in(t, nw2, true, seed + 3, -0.5f, 0.5f, 0);
    arr shift = arr_in(t, ca.k, false, seed + 4, -0.5f, 0.5f, 0);
    arr y = arr_out(t, ny, true, 0);
    double *r1 = dalloc(ny), *ry = dalloc(ny);
    conv_ref_fprop(&ca, x1.h, w1.h, NULL, NULL, NULL, false, r1);
    conv_ref_fprop(&cb, x2.h, w2.h, NULL, shift.h, NULL, false, ry);
    for (int64_t i = 0; i < ny; i++) {
        double v = ry[i] + r1[i];
        ry[i] = relu && v < 0 ? 0 : v;
    }
    char name[240], extra[64];
    snprintf(extra, sizeof extra, ".pair_c%d_h%d_w%d_r%d_st%d%s", cb.c, cb.h, cb.w, cb.r, cb.stride_h, relu ? ".relu" : "");
    conv_name(name, sizeof name, "fprop_pair", t, &ca, cfg, extra);
    cnn_cuda_stats st0, st1;
    cnn_cuda_stats_get(t->gpu, &st0);
    cnn_epilogue eg = {.shift = shift.g.p, .relu = relu}, ec = {.shift = shift.c, .relu = relu};
    expect_ok(t->gpu->conv2d_fprop_pair(t->gpu, &ca, &cb, &eg, x1.g.p, w1.g.p, x2.g.p, w2.g.p, y.g.p), name);
    cnn_cuda_stats_get(t->gpu, &st1);
    if (t->cpu) cpu_ok(t, t->cpu->conv2d_fprop_pair(t->cpu, &ca, &cb, &ec, x1.c, w1.c, x2.c, w2.c, y.c), name);
    layout ly = {"NPQK", {ca.n, ca.p, ca.q, ca.k}};
    arr *in[] = {&x1, &w1, &x2, &w2, &shift};
    verify(t, name, &y, ry, &ly, in, 5);
    char nm2[260];
    snprintf(nm2, sizeof nm2, "%s.launch", name);
    if (fused < 0) /* the tuner's choice: reported, not judged */
        printf("# %s: %s\n", nm2, st1.pair_launches > st0.pair_launches ? "fused" : "unfused");
    else
        check((st1.pair_launches > st0.pair_launches) == (fused == 1), nm2, "pair launches %ld before, %ld after (fused %s)",
              st0.pair_launches, st1.pair_launches, fused ? "expected" : "not expected");
    cnn_cuda_conv_force_config(t->gpu, -1);
    free(r1), free(ry);
    arr_free(t, &x1), arr_free(t, &w1), arr_free(t, &x2), arr_free(t, &w2), arr_free(t, &shift), arr_free(t, &y);
}

static void g_conv_pair(ctx *t) {
    const int n = (int)(sizeof pair_cases / sizeof pair_cases[0]);
    cnn_conv2d a0 = conv_of(&pair_cases[0].a), b0 = conv_of(&pair_cases[0].b);
    if (t->dt == CNN_DTYPE_F32 || !t->gpu->conv2d_pair_fusable(t->gpu, &a0, &b0)) { /* the unfused path only */
        printf("# conv_pair.%s: no fused pairs here (F32, or no TMA rows: wgmma needs sm_90a); the unfused path\n", t->dts);
        for (int i = 0; i < n; i++) pair_one(t, &pair_cases[i], -1, i % 2 == 0, 0, 8000 + 10 * i);
        return;
    }
    for (int cfg = 0; cfg < cnn_cuda_conv_config_count(); cfg++) {
        if (!row_has(cfg, CNN_CUDA_CONV_TMA) || !cnn_cuda_conv_config_usable(t->gpu, cfg) || !row_selected(cfg)) continue;
        for (int i = 0; i < n; i++) {
            cnn_cuda_conv_force_grid(t->gpu, (i + cfg) % 2 ? 3 : 1);
            pair_one(t, &pair_cases[i], cfg, (i + cfg) % 2 == 0, 1, 8100 + 100 * i + cfg);
        }
    }
    cnn_cuda_conv_force_grid(t->gpu, 0);
    for (int i = 0; i < n; i++) pair_one(t, &pair_cases[i], -1, i % 2 == 1, -1, 8050 + 10 * i); /* tuned */
    pair_one(t, &pair_cases[0], 0, true, 0, 8090); /* a generic config forced: unfused */
}

/* ---- first layers (conv2d_first.cu) and the conv + max-pool op ---------------------------------------------
 * Each config forced on the shapes of its class (odd sizes, H != W, K below, at and above one 64-channel block)
 * with the persistent grid natural and capped at 1 and 3 CTAs, every epilogue variant; the stem with its
 * max-pool fused (conv2d_fprop_pool) against conv then pool in float64 and the CPU backend's conv then pool; and
 * the op's unfused path (a forced generic config, a pool the kernel does not fuse, F32). */
static const conv_case first_cases[] = {
    {2, 3, 15, 13, 64, 7, 7, 2, 2, 3, 3},  /* the stem, odd H and W */
    {1, 3, 37, 19, 64, 3, 3, 1, 1, 1, 1},  /* 3x3/1 pad 1 (VGG's first layer): several tiles, ragged both ways */
    {1, 3, 40, 23, 72, 7, 7, 2, 2, 3, 3},  /* batch 1, H != W, two channel blocks, the second 8 wide */
    {2, 3, 9, 11, 16, 3, 3, 1, 1, 1, 1},   /* K = 16 */
    {3, 3, 9, 30, 16, 7, 7, 2, 2, 3, 3},   /* K = 16: one block, mostly masked */
    {2, 3, 12, 70, 136, 3, 3, 1, 1, 1, 1}, /* three channel blocks */
};

static void first_one(ctx *t, const conv_case *cc, int cfg, bool pool, int variant, uint64_t seed) {
    cnn_conv2d cv = conv_of(cc);
    cnn_pool2d pl = {0};
    if (pool && !cnn_pool2d_init(&pl, CNN_POOL_MAX, cv.n, cv.k, cv.p, cv.q, 3, 2, 1)) fatal("pool init");
    if (pool && variant >= 4) /* a pool the fused kernel does not take: 2x2/2 */
        if (!cnn_pool2d_init(&pl, CNN_POOL_MAX, cv.n, cv.k, cv.p, cv.q, 2, 2, 0)) fatal("pool init");
    int64_t nx = (int64_t)cv.n * cv.h * cv.w * cv.c, nw = (int64_t)cv.k * cv.r * cv.s * cv.c,
            ny = (int64_t)cv.n * cv.p * cv.q * cv.k, no = pool ? (int64_t)pl.n * pl.p * pl.q * pl.c : ny;
    arr x = arr_in(t, nx, true, seed, -1, 1, 0), w = arr_in(t, nw, true, seed + 1, -0.5f, 0.5f, 0);
    arr scale = arr_in(t, cv.k, false, seed + 2, 0.5f, 1.5f, 0), shift = arr_in(t, cv.k, false, seed + 3, -0.5f, 0.5f, 0);
    int ev = variant % 4;
    cnn_epilogue eg = {0}, ec = {0};
    static const char *evn[] = {"", ".ep_shift", ".ep_scale_shift", ".ep_scale_shift_relu"};
    if (ev >= 1) eg.shift = shift.g.p, ec.shift = shift.c;
    if (ev >= 2) eg.scale = scale.g.p, ec.scale = scale.c;
    if (ev >= 3) eg.relu = ec.relu = true;
    double *ry = dalloc(ny), *ro = ry;
    conv_ref_fprop(&cv, x.h, w.h, ev >= 2 ? scale.h : NULL, ev >= 1 ? shift.h : NULL, NULL, ev >= 3, ry);
    if (pool) { /* max over the float64 conv outputs: rounding is monotonic, so this is the kernel's max rounded */
        ro = dalloc(no);
        pool_ref_fwd(&pl, ry, ro);
    }
    arr y = arr_out(t, no, true, 0);
    char name[220], extra[96];
    snprintf(extra, sizeof extra, "%s%s", pool ? (variant >= 4 ? ".maxpool2x2s2" : ".maxpool3x3s2p1") : "", evn[ev]);
    snprintf(name, sizeof name, "conv2d_first.%s.n%d_c%d_h%d_w%d_k%d_r%d_s%d_st%d_pad%d.%s%s", t->dts, cv.n, cv.c, cv.h,
             cv.w, cv.k, cv.r, cv.s, cv.stride_h, cv.pad_h, cfg >= 0 ? cnn_cuda_first_config_name(cfg) : "heuristic", extra);
    for (char *p = name; *p; p++)
        if (*p == '/') *p = '-';
    cnn_cuda_first_force_config(t->gpu, cfg);
    if (pool) {
        expect_ok(t->gpu->conv2d_fprop_pool(t->gpu, &cv, &eg, &pl, x.g.p, w.g.p, y.g.p), name);
        if (t->cpu) {
            void *tmp = NULL;
            cpu_ok(t, t->cpu->alloc(t->cpu, (size_t)ny * 4, "conv output", &tmp), name);
            cpu_ok(t, t->cpu->conv2d_fprop(t->cpu, &cv, &ec, x.c, w.c, tmp), name);
            cpu_ok(t, t->cpu->pool2d_forward(t->cpu, &pl, tmp, y.c), name);
            t->cpu->free(t->cpu, tmp);
        }
    } else {
        expect_ok(t->gpu->conv2d_fprop(t->gpu, &cv, &eg, x.g.p, w.g.p, y.g.p), name);
        if (t->cpu) cpu_ok(t, t->cpu->conv2d_fprop(t->cpu, &cv, &ec, x.c, w.c, y.c), name);
    }
    layout ly = {"NPQK", {cv.n, pool ? pl.p : cv.p, pool ? pl.q : cv.q, cv.k}};
    arr *in[] = {&x, &w, &scale, &shift};
    verify(t, name, &y, ro, &ly, in, 4);
    cnn_cuda_first_force_config(t->gpu, -1);
    if (ro != ry) free(ro);
    free(ry);
    arr_free(t, &x), arr_free(t, &w), arr_free(t, &scale), arr_free(t, &shift), arr_free(t, &y);
}

static void g_conv_first(ctx *t) {
    int ncase = (int)(sizeof first_cases / sizeof first_cases[0]);
    bool fast_path = t->dt != CNN_DTYPE_F32;
    if (!fast_path) printf("# conv_first.%s: the first-layer kernels take F16/BF16; F32 checks the op's unfused path\n", t->dts);
    const int grid[] = {0, 1, 3};
    for (int i = 0; i < (quick ? 2 : ncase); i++) {
        const conv_case *cc = &first_cases[i];
        bool stem = cc->r == 7;
        for (int gi = 0; gi < 3; gi++) {
            cnn_cuda_conv_force_grid(t->gpu, grid[gi]);
            first_one(t, cc, -1, false, i + gi, 7000 + 10 * i + gi);
            if (stem) first_one(t, cc, -1, true, 3 - (i + gi) % 4, 7300 + 10 * i + gi);
            for (int cfg = 0; fast_path && cfg < cnn_cuda_first_config_count(); cfg++) {
                const char *nm = cnn_cuda_first_config_name(cfg);
                bool cls_stem = strncmp(nm, "stem", 4) == 0, cls_pool = strstr(nm, "+pool") != NULL;
                if (cls_stem != stem) continue;
                first_one(t, cc, cfg, cls_pool, (i + cfg + gi) % 4, 7500 + 100 * i + 10 * gi + cfg);
            }
        }
    }
    cnn_cuda_conv_force_grid(t->gpu, 0);
    /* whether the plan may fuse: the stem and its 3x3/2 pool on F16/BF16 (sm_80+), not a 2x2 pool, not F32 */
    cnn_conv2d cv = conv_of(&first_cases[0]);
    cnn_pool2d p3, p2;
    if (!cnn_pool2d_init(&p3, CNN_POOL_MAX, cv.n, cv.k, cv.p, cv.q, 3, 2, 1) ||
        !cnn_pool2d_init(&p2, CNN_POOL_MAX, cv.n, cv.k, cv.p, cv.q, 2, 2, 0))
        fatal("pool init");
    bool f3 = t->gpu->conv2d_pool_fusable(t->gpu, &cv, &p3, false), f2 = t->gpu->conv2d_pool_fusable(t->gpu, &cv, &p2, false);
    bool fr = t->gpu->conv2d_pool_fusable(t->gpu, &cv, &p3, true);
    const int first_tc = first_fast_row(); /* the first pipelined mma.sync row: usable = tensor cores here */
    bool mma = cnn_cuda_conv_config_usable(t->gpu, first_tc);
    char name[96];
    snprintf(name, sizeof name, "conv2d_first.%s.fusable", t->dts);
    check(f3 == (fast_path && mma) && !f2 && !fr, name, "stem + 3x3/2 pool %d, + 2x2/2 pool %d, with a residual %d", f3, f2, fr);
    /* the unfused path of the op: a 2x2 pool, and the fused pool with a generic conv config forced */
    first_one(t, &first_cases[0], -1, true, 5, 7900);
    cnn_cuda_conv_force_config(t->gpu, 0);
    first_one(t, &first_cases[2], -1, true, 3, 7910);
    cnn_cuda_conv_force_config(t->gpu, -1);
}

/* ---- linear --------------------------------------------------------------------------------------------- */

static void g_linear(ctx *t) {
    const struct {
        int n, in, out;
        bool bias;
    } cases[] = {{1, 37, 10, true}, {3, 300, 65, true}, {5, 9, 1024, false}, {64, 512, 10, true}, {2, 2048, 3, true}};
    for (size_t k = 0; k < (quick ? 2 : sizeof cases / sizeof cases[0]); k++) {
        cnn_linear ln = {.n = cases[k].n, .in = cases[k].in, .out = cases[k].out};
        int64_t nx = (int64_t)ln.n * ln.in, nw = (int64_t)ln.out * ln.in, ny = (int64_t)ln.n * ln.out;
        arr x = arr_in(t, nx, true, 4000 + k, -1, 1, 0), w = arr_in(t, nw, true, 4010 + k, -0.3f, 0.3f, 0);
        arr b = arr_in(t, ln.out, false, 4020 + k, -1, 1, 0), y = arr_out(t, ny, true, 0);
        double *ry = dalloc(ny);
        for (int i = 0; i < ln.n; i++)
            for (int o = 0; o < ln.out; o++) {
                double s = cases[k].bias ? b.h[o] : 0.0;
                for (int j = 0; j < ln.in; j++) s += (double)x.h[(int64_t)i * ln.in + j] * w.h[(int64_t)o * ln.in + j];
                ry[(int64_t)i * ln.out + o] = s;
            }
        char name[128];
        snprintf(name, sizeof name, "linear_forward.%s.n%d_in%d_out%d%s", t->dts, ln.n, ln.in, ln.out,
                 cases[k].bias ? "" : ".nobias");
        expect_ok(t->gpu->linear_forward(t->gpu, &ln, x.g.p, w.g.p, cases[k].bias ? b.g.p : NULL, y.g.p), name);
        if (t->cpu) cpu_ok(t, t->cpu->linear_forward(t->cpu, &ln, x.c, w.c, cases[k].bias ? b.c : NULL, y.c), name);
        layout ly = {"NO", {ln.n, ln.out}}, lx = {"NI", {ln.n, ln.in}}, lw = {"OI", {ln.out, ln.in}}, lb = {"O", {ln.out}};
        arr *in[] = {&x, &w, &b};
        verify(t, name, &y, ry, &ly, in, 3);
        for (int acc = 0; acc < 2; acc++) {
            arr dy = arr_in(t, ny, true, 4030 + k, -1, 1, 0);
            arr dx = acc ? arr_in(t, nx, true, 4040 + k, -1, 1, 0) : arr_out(t, nx, true, 0);
            arr dw = arr_out(t, nw, false, 0), db = arr_out(t, ln.out, false, 0);
            double *rdx = dalloc(nx), *rdw = dalloc(nw), *rdb = dalloc(ln.out);
            for (int i = 0; i < ln.n; i++)
                for (int j = 0; j < ln.in; j++) {
                    double s = acc ? dx.h[(int64_t)i * ln.in + j] : 0.0;
                    for (int o = 0; o < ln.out; o++) s += (double)dy.h[(int64_t)i * ln.out + o] * w.h[(int64_t)o * ln.in + j];
                    rdx[(int64_t)i * ln.in + j] = s;
                }
            for (int o = 0; o < ln.out; o++) {
                for (int j = 0; j < ln.in; j++) {
                    double s = 0;
                    for (int i = 0; i < ln.n; i++) s += (double)dy.h[(int64_t)i * ln.out + o] * x.h[(int64_t)i * ln.in + j];
                    rdw[(int64_t)o * ln.in + j] = s;
                }
                for (int i = 0; i < ln.n; i++) rdb[o] += dy.h[(int64_t)i * ln.out + o];
            }
            bool with_dx = !(k == 0 && acc == 0); /* the first layer of a net has no dx */
            snprintf(name, sizeof name, "linear_backward.%s.n%d_in%d_out%d%s%s", t->dts, ln.n, ln.in, ln.out,
                     acc ? ".acc" : "", with_dx ? "" : ".no_dx");
            expect_ok(t->gpu->linear_backward(t->gpu, &ln, x.g.p, w.g.p, dy.g.p, with_dx ? dx.g.p : NULL, acc, dw.g.p,
                                              db.g.p),
                      name);
            if (t->cpu)
                cpu_ok(t, t->cpu->linear_backward(t->cpu, &ln, x.c, w.c, dy.c, with_dx ? dx.c : NULL, acc, dw.c, db.c), name);
            arr *in2[] = {&x, &w, &dy};
            char nm[160];
            if (with_dx) {
                snprintf(nm, sizeof nm, "%s.dx", name);
                verify(t, nm, &dx, rdx, &lx, in2, 3);
            } else {
                /* dx untouched: still all poison bytes */
                unsigned char *raw = malloc(dx.g.bytes);
                buf_get(&dx.g, raw);
                size_t touched = 0;
                for (size_t i = 0; i < dx.g.bytes; i++) touched += raw[i] != 0xFF;
                free(raw);
                snprintf(nm, sizeof nm, "%s.dx_untouched", name);
                check(touched == 0, nm, "%zu bytes written to the buffer of a dx passed as NULL", touched);
            }
            snprintf(nm, sizeof nm, "%s.dw", name);
            verify(t, nm, &dw, rdw, &lw, in2, 3);
            snprintf(nm, sizeof nm, "%s.dbias", name);
            verify(t, nm, &db, rdb, &lb, in2, 3);
            free(rdx), free(rdw), free(rdb);
            arr_free(t, &dy), arr_free(t, &dx), arr_free(t, &dw), arr_free(t, &db);
        }
        free(ry);
        arr_free(t, &x), arr_free(t, &w), arr_free(t, &b), arr_free(t, &y);
    }
}

/* ---- cross-entropy -------------------------------------------------------------------------------------- */

static void g_xent(ctx *t) {
    const struct {
        int n, classes;
        float eps, gs;
        bool dlogits;
    } cases[] = {{1, 10, 0, 0, true}, {3, 10, 0.1f, 0, true}, {64, 1000, 0.1f, 0, true}, {5, 3, 0, 128.0f, true},
                 {7, 100, 0.2f, 0, false}, {300, 10, 0.0f, 1.0f, true}};
    for (size_t k = 0; k < (quick ? 2 : sizeof cases / sizeof cases[0]); k++) {
        int n = cases[k].n, C = cases[k].classes;
        cnn_xent xe = {.n = n, .classes = C, .label_smoothing = cases[k].eps, .grad_scale = cases[k].gs};
        arr lg = arr_in(t, (int64_t)n * C, true, 5000 + k, -4, 4, 0);
        int32_t *lab = malloc((size_t)n * 4);
        for (int i = 0; i < n; i++) lab[i] = (int32_t)(rnd_uniform(5010 + k, i, 0, (float)C)) % C;
        rawbuf labels = raw_in(t, lab, (size_t)n * 4);
        arr loss = arr_out(t, 1, false, 0), dl = arr_out(t, (int64_t)n * C, true, 0);
        double rl = 0, *rdl = dalloc((int64_t)n * C), gs = cases[k].gs == 0 ? 1.0 : cases[k].gs;
        for (int i = 0; i < n; i++) {
            const float *row = lg.h + (int64_t)i * C;
            double mx = -INFINITY, se = 0;
            for (int j = 0; j < C; j++) mx = fmax(mx, row[j]);
            for (int j = 0; j < C; j++) se += exp(row[j] - mx);
            double lse = mx + log(se);
            for (int j = 0; j < C; j++) {
                double tj = (j == lab[i] ? 1.0 - cases[k].eps : 0.0) + cases[k].eps / C;
                rl -= tj * (row[j] - lse);
                rdl[(int64_t)i * C + j] = (exp(row[j] - mx) / se - tj) / n * gs;
            }
        }
        rl /= n;
        char name[128];
        snprintf(name, sizeof name, "xent.%s.n%d_classes%d_eps%.1f_gs%g%s", t->dts, n, C, (double)cases[k].eps,
                 (double)cases[k].gs, cases[k].dlogits ? "" : ".no_dlogits");
        expect_ok(t->gpu->xent_forward_backward(t->gpu, &xe, lg.g.p, labels.g.p, loss.g.p, cases[k].dlogits ? dl.g.p : NULL),
                  name);
        if (t->cpu)
            cpu_ok(t, t->cpu->xent_forward_backward(t->cpu, &xe, lg.c, labels.c, loss.c, cases[k].dlogits ? dl.c : NULL),
                   name);
        char nm[160];
        arr *in[] = {&lg};
        snprintf(nm, sizeof nm, "%s.loss", name);
        verify(t, nm, &loss, &rl, NULL, in, 1);
        if (cases[k].dlogits) {
            layout l = {"NC", {n, C}};
            snprintf(nm, sizeof nm, "%s.dlogits", name);
            verify(t, nm, &dl, rdl, &l, in, 1);
        }
        free(rdl);
        free(lab);
        raw_free(t, &labels);
        arr_free(t, &lg), arr_free(t, &loss), arr_free(t, &dl);
    }
    /* invalid labels: no crash, no out-of-bounds read, NaN loss, zero dlogits row */
    {
        int n = 4, C = 5;
        cnn_xent xe = {.n = n, .classes = C};
        arr lg = arr_in(t, n * C, true, 5100, -1, 1, 0);
        int32_t lab[4] = {1, 5, -1, 2147483647};
        rawbuf labels = raw_in(t, lab, sizeof lab);
        arr loss = arr_out(t, 1, false, 0), dl = arr_out(t, n * C, true, 0);
        cnn_status st = t->gpu->xent_forward_backward(t->gpu, &xe, lg.g.p, labels.g.p, loss.g.p, dl.g.p);
        cnn_status st2 = t->gpu->sync(t->gpu);
        float *l = arr_gpu(t, &loss), *d = arr_gpu(t, &dl);
        int nonzero_bad = 0, nan_ok = 0;
        for (int j = 0; j < C; j++) nonzero_bad += d[1 * C + j] != 0.0f || d[2 * C + j] != 0.0f || d[3 * C + j] != 0.0f;
        for (int j = 0; j < C; j++) nan_ok += isfinite(d[j]);
        char name[64];
        snprintf(name, sizeof name, "xent.%s.invalid_labels", t->dts);
        check(st == CNN_OK && st2 == CNN_OK && isnan(l[0]) && nonzero_bad == 0 && nan_ok == C &&
                  buf_guard_damage(&dl.g) == 0,
              name, "status %s/%s, loss %g (want NaN), %d nonzero dlogits in invalid rows, %d finite in the valid row",
              cnn_status_str(st), cnn_status_str(st2), l[0], nonzero_bad, nan_ok);
        free(l), free(d);
        raw_free(t, &labels);
        arr_free(t, &lg), arr_free(t, &loss), arr_free(t, &dl);
    }
}

/* ---- prep_images ---------------------------------------------------------------------------------------- */

static void g_prep(ctx *t) {
    /* src_n > n with samples: a batch gathered from a whole dataset on the device; out_c 3 from c 1: the channel
     * repeated; gather 0: no samples (image i, centre, no flip) */
    const struct {
        int n, c, h, w, pad, src_n, out_c, gather;
    } cases[] = {{3, 3, 32, 32, 4, 3, 3, 1},  {2, 1, 28, 20, 2, 2, 1, 1}, {1, 3, 5, 7, 0, 1, 3, 1},
                 {5, 4, 9, 6, 3, 5, 4, 1},    {6, 3, 8, 8, 4, 11, 3, 1}, {4, 1, 28, 28, 4, 9, 3, 1},
                 {3, 3, 6, 5, 2, 3, 3, 0}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        cnn_prep pp = {.n = cases[k].n, .c = cases[k].c, .h = cases[k].h, .w = cases[k].w, .pad = cases[k].pad,
                       .src_n = cases[k].src_n, .out_c = cases[k].out_c,
                       .mean = {0.4914f, 0.4822f, 0.4465f, 0.5f}, .std = {0.2470f, 0.2435f, 0.2616f, 0.25f}};
        int K = pp.out_c;
        int64_t nsrc = (int64_t)pp.src_n * pp.c * pp.h * pp.w, nout = (int64_t)pp.n * K * pp.h * pp.w;
        uint8_t *src = malloc((size_t)nsrc);
        int32_t *smp = malloc((size_t)pp.n * 16);
        for (int64_t i = 0; i < nsrc; i++) src[i] = (uint8_t)(rnd_uniform(6000 + k, i, 0, 256));
        for (int i = 0; i < pp.n; i++) {
            smp[4 * i] = cases[k].gather ? (int32_t)rnd_uniform(6030 + k, i, 0, pp.src_n) : i;
            smp[4 * i + 1] = cases[k].gather ? (int32_t)rnd_uniform(6010 + k, i, 0, 2 * pp.pad + 1) : pp.pad;
            smp[4 * i + 2] = cases[k].gather ? (int32_t)rnd_uniform(6020 + k, i, 0, 2 * pp.pad + 1) : pp.pad;
            smp[4 * i + 3] = cases[k].gather ? i % 2 : 0;
        }
        rawbuf rs = raw_in(t, src, (size_t)nsrc), rm = raw_in(t, smp, (size_t)pp.n * 16);
        arr dst = arr_out(t, nout, true, 0);
        double *ref = dalloc(nout);
        for (int n = 0; n < pp.n; n++)
            for (int y = 0; y < pp.h; y++)
                for (int x = 0; x < pp.w; x++)
                    for (int c = 0; c < K; c++) {
                        const int32_t *q = smp + 4 * n;
                        int xs = q[3] ? pp.w - 1 - x : x;
                        int hi = y + q[1] - pp.pad, wi = xs + q[2] - pp.pad;
                        double v = 0;
                        if (hi >= 0 && hi < pp.h && wi >= 0 && wi < pp.w)
                            v = src[(((int64_t)q[0] * pp.c + (pp.c == 1 ? 0 : c)) * pp.h + hi) * pp.w + wi];
                        ref[(((int64_t)n * pp.h + y) * pp.w + x) * K + c] = (v / 255.0 - pp.mean[c]) / pp.std[c];
                    }
        char name[112];
        snprintf(name, sizeof name, "prep_images.%s.n%d_c%d-%d_h%d_w%d_pad%d_of%d%s", t->dts, pp.n, pp.c, K, pp.h, pp.w,
                 pp.pad, pp.src_n, cases[k].gather ? "" : "_nosamples");
        const int32_t *gs = cases[k].gather ? rm.g.p : NULL, *cs = cases[k].gather ? rm.c : NULL;
        expect_ok(t->gpu->prep_images(t->gpu, &pp, rs.g.p, gs, dst.g.p), name);
        if (t->cpu) cpu_ok(t, t->cpu->prep_images(t->cpu, &pp, rs.c, cs, dst.c), name);
        layout l = {"NHWC", {pp.n, pp.h, pp.w, K}};
        long dmg = buf_guard_damage(&rs.g) + buf_guard_damage(&rm.g);
        bool in_ok = buf_unchanged(&rs.g) && buf_unchanged(&rm.g);
        float *g = arr_gpu(t, &dst), *c = arr_cpu(t, &dst);
        report(name, g, ref, c, nout, t->tol, t->tol, &l, dmg + buf_guard_damage(&dst.g), in_ok);
        free(g), free(c), free(ref), free(src), free(smp);
        raw_free(t, &rs), raw_free(t, &rm);
        arr_free(t, &dst);
    }
}

/* ---- resample_images: the GPU JPEG path's crop + resize of decoded RGB images ------------------------------ */

/* PIL's BILINEAR coefficient window in float64 (the reference): taps [lo, hi) of `in` pixels resized to `out` */
static double rs_ref_axis(int o, int in, int out, const double *line, int stride) {
    double scale = (double)in / out, fs = scale > 1 ? scale : 1, center = (o + 0.5) * scale;
    int lo = (int)(center - fs + 0.5), hi = (int)(center + fs + 0.5);
    lo = lo < 0 ? 0 : lo;
    hi = hi > in ? in : hi;
    double acc = 0, ws = 0;
    for (int k = lo; k < hi; k++) {
        double x = fabs((k - center + 0.5) / fs), w = x < 1 ? 1 - x : 0;
        acc += w * line[(int64_t)k * stride];
        ws += w;
    }
    return acc / ws;
}

static void g_resample(ctx *t) {
    /* images of several sizes in one buffer (rows padded past 3*W); jobs: an eval-like shrink with a centre window,
     * a RandomResizedCrop-like enlargement of a small region, flipped, a window larger than the resized image at a
     * negative origin (zeros around it, as CenterCrop pads), a strong shrink (wide windows), and out_h 0 (planes left alone) */
    const int CH = 12, CW = 10, N = 6;
    const struct {
        int h, w, y0, x0, rh, rw, out_h, out_w, wy, wx, flip;
    } jb[] = {{45, 60, 0, 0, 45, 60, 16, 21, 2, 5, 0},   {37, 29, 5, 3, 9, 7, 12, 10, 0, 0, 1},
              {20, 24, 0, 0, 20, 24, 8, 9, -2, -1, 0},   {37, 29, 0, 0, 37, 29, 12, 10, 0, 0, 0},
              {90, 70, 10, 4, 77, 61, 12, 10, 0, 0, 1}, {20, 24, 0, 0, 20, 24, 0, 0, 0, 0, 0}};
    cnn_resample_job jobs[6];
    int64_t off = 0;
    for (int i = 0; i < N; i++) {
        int pitch = 3 * jb[i].w + 5 * (i % 3);
        jobs[i] = (cnn_resample_job){.src = off, .h = jb[i].h, .w = jb[i].w, .pitch = pitch, .y0 = jb[i].y0,
                                     .x0 = jb[i].x0, .rh = jb[i].rh, .rw = jb[i].rw, .out_h = jb[i].out_h,
                                     .out_w = jb[i].out_w, .wy = jb[i].wy, .wx = jb[i].wx, .flip = jb[i].flip};
        off += (int64_t)pitch * jb[i].h;
    }
    uint8_t *src = malloc((size_t)off);
    for (int64_t i = 0; i < off; i++) src[i] = (uint8_t)rnd_uniform(6100, i, 0, 256);
    size_t per = (size_t)3 * CH * CW, nout = per * N;
    rawbuf rs = raw_in(t, src, (size_t)off), rj = raw_in(t, jobs, sizeof jobs);
    uint8_t *init = malloc(nout);
    memset(init, 0xAB, nout); /* what the out_h 0 image must keep */
    rawbuf dst = raw_in(t, init, nout);
    cnn_resample_batch rb = {.n = N, .ch = CH, .cw = CW};
    const char *name = "resample_images.n6_12x10";
    expect_ok(t->gpu->resample_images(t->gpu, &rb, rj.g.p, rs.g.p, dst.g.p), name);
    uint8_t *g = malloc(nout), *c = malloc(nout);
    buf_get(&dst.g, g);
    bool have_cpu = t->cpu && cpu_ok(t, t->cpu->resample_images(t->cpu, &rb, rj.c, rs.c, dst.c), name);
    if (have_cpu && t->cpu->download(t->cpu, c, dst.c, nout) != CNN_OK) fatal("cpu download");
    /* float64 reference: the separable filter, vertical pass over horizontally filtered rows */
    int max_ref = 0, max_cpu = 0, diff_cpu = 0;
    for (int i = 0; i < N; i++) {
        const cnn_resample_job *j = &jobs[i];
        double *rowbuf = malloc(sizeof(double) * (size_t)j->rw * 3), *col = malloc(sizeof(double) * (size_t)j->rh);
        for (int c3 = 0; c3 < 3; c3++)
            for (int y = 0; y < CH; y++)
                for (int x = 0; x < CW; x++) {
                    size_t o = ((size_t)i * 3 + c3) * CH * CW + (size_t)y * CW + x;
                    int ref;
                    if (j->out_h == 0) {
                        ref = 0xAB;
                    } else {
                        int oy = j->wy + y, ox = j->wx + (j->flip ? CW - 1 - x : x);
                        double v = 0;
                        if (oy >= 0 && oy < j->out_h && ox >= 0 && ox < j->out_w) {
                            for (int ky = 0; ky < j->rh; ky++) {
                                const uint8_t *row = src + j->src + (int64_t)(j->y0 + ky) * j->pitch + 3 * j->x0;
                                for (int kx = 0; kx < j->rw; kx++) rowbuf[kx] = row[3 * kx + c3];
                                col[ky] = rs_ref_axis(ox, j->rw, j->out_w, rowbuf, 1);
                            }
                            v = rs_ref_axis(oy, j->rh, j->out_h, col, 1);
                        }
                        ref = (int)floor(v + 0.5);
                    }
                    int dg = abs((int)g[o] - ref);
                    if (dg > max_ref) max_ref = dg;
                    if (have_cpu) {
                        int dc = abs((int)g[o] - (int)c[o]);
                        max_cpu = dc > max_cpu ? dc : max_cpu;
                        diff_cpu += dc != 0;
                    }
                }
        free(rowbuf), free(col);
    }
    long dmg = buf_guard_damage(&rs.g) + buf_guard_damage(&rj.g) + buf_guard_damage(&dst.g);
    bool in_ok = buf_unchanged(&rs.g) && buf_unchanged(&rj.g);
    /* uint8 outputs: rounding of values within float32 error of .5 may go either way (1 level); the device may
     * fuse multiply-adds that the CPU rounds twice */
    check(max_ref <= 1 && max_cpu <= 1 && diff_cpu * 100 <= (int)nout && dmg == 0 && in_ok, name,
          "max |gpu - float64 ref| %d, max |gpu - cpu| %d (%d of %zu differ), guard damage %ld, inputs %s", max_ref,
          max_cpu, diff_cpu, nout, dmg, in_ok ? "unchanged" : "MODIFIED");
    /* the oracle refuses a region outside its image */
    if (t->cpu) {
        cnn_resample_job bad = jobs[0];
        bad.rh = bad.h + 1;
        rawbuf rb2 = raw_in(t, &bad, sizeof bad);
        cnn_resample_batch one = {.n = 1, .ch = CH, .cw = CW};
        cnn_status st = t->cpu->resample_images(t->cpu, &one, rb2.c, rs.c, dst.c);
        check(st == CNN_E_INVALID, "resample_images.cpu_rejects_bad_region", "returned %s", cnn_status_str(st));
        cnn_error_clear();
        raw_free(t, &rb2);
    }
    free(g), free(c), free(init), free(src);
    raw_free(t, &rs), raw_free(t, &rj), raw_free(t, &dst);
}

/* ---- jpeg: nvJPEG decode + resample against the CPU path (GPU only: the emulator has no nvJPEG) ----------- */

/* Real photos: the tree's data/photos (a copy of scikit-image's), else scikit-image's own folder. */
static const char *photo_dir(void) {
    static const char *dirs[] = {"data/photos", "/usr/lib/python3/dist-packages/skimage/data"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        struct stat sb;
        if (stat(dirs[i], &sb) == 0 && S_ISDIR(sb.st_mode)) return dirs[i];
    }
    return NULL;
}

typedef struct photo {
    char name[128];
    uint8_t *data;
    size_t len;
    bool jpeg;
    cnn_resample_job job;
    uint8_t *cpu; /* (3, 224, 224): the CPU path's Resize(256) + CenterCrop(224) */
} photo;

static void g_jpeg(ctx *t) {
    const int CH = 224, CW = 224;
    const size_t per = (size_t)3 * CH * CW;
    const char *dir = photo_dir();
    void *dec = NULL;
    if (!dir) {
        skip("jpeg", "no photos (data/photos or scikit-image's data folder)");
        return;
    }
    cnn_status st = t->gpu->jpeg_create ? t->gpu->jpeg_create(t->gpu, 256, 2, &dec) : CNN_E_UNSUPPORTED;
    if (st != CNN_OK) {
        char why[300];
        snprintf(why, sizeof why, "no device JPEG decoder: %s", cnn_error_msg());
        skip("jpeg", why);
        cnn_error_clear();
        return;
    }
    /* every JPEG and PNG of the folder the CPU decoder reads, with the evaluation transform planned on it */
    photo *ph = calloc(256, sizeof *ph);
    int n = 0;
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d)) && n < 256) {
        const char *e = strrchr(de->d_name, '.');
        if (!e || (strcasecmp(e, ".jpg") && strcasecmp(e, ".jpeg") && strcasecmp(e, ".png"))) continue;
        photo *p = &ph[n];
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        snprintf(p->name, sizeof p->name, "%.100s", de->d_name);
        cnn_image_info info;
        cnn_image im = {0};
        if (cnn_image_read(path, &p->data, &p->len) != CNN_OK ||
            cnn_image_probe(p->data, p->len, path, CNN_IMAGE_MAX_PIXELS, &info) != CNN_OK ||
            cnn_image_decode(p->data, p->len, path, CNN_IMAGE_MAX_PIXELS, 1, &im) != CNN_OK) {
            cnn_error_clear();
            free(p->data);
            continue;
        }
        cnn_resample r = cnn_resample_eval(info.h, info.w, 256, CH, CW);
        p->jpeg = info.format == CNN_IMAGE_JPEG;
        p->job = (cnn_resample_job){.h = info.h, .w = info.w, .y0 = r.y0, .x0 = r.x0, .rh = r.rh, .rw = r.rw,
                                    .out_h = r.out_h, .out_w = r.out_w, .wy = r.wy, .wx = r.wx, .flip = r.flip};
        p->cpu = malloc(per);
        if (cnn_image_resample(&im, &r, p->cpu) != CNN_OK) fatal("cnn_image_resample");
        cnn_image_free(&im);
        n++;
    }
    if (d) closedir(d);
    /* one batch: JPEGs as file bytes, PNGs as the CPU's planes (uploaded beside them) */
    const size_t nn = n > 0 ? (size_t)n : 1; /* n >= 0; at least one slot (gcc 13 checks the bound) */
    cnn_jpeg_image *ji = calloc(nn, sizeof *ji);
    for (int i = 0; i < n; i++)
        ji[i] = ph[i].jpeg ? (cnn_jpeg_image){.data = ph[i].data, .len = ph[i].len, .job = ph[i].job}
                           : (cnn_jpeg_image){.planes = ph[i].cpu};
    void *dst;
    if (t->gpu->alloc(t->gpu, per * nn, "jpeg test", &dst) != CNN_OK) fatal("alloc");
    uint8_t *ok = calloc(nn, 1), *g = malloc(per * nn);
    cnn_resample_batch rb = {.n = n, .ch = CH, .cw = CW};
    if (n > 0) {
        expect_ok(t->gpu->jpeg_decode(t->gpu, dec, 0, &rb, ji, dst, ok), "jpeg_decode.photos");
        if (t->gpu->download(t->gpu, g, dst, per * (size_t)n) != CNN_OK) fatal("download");
    }
    int jpegs = 0, decoded = 0, png_exact = 0, pngs = 0, maxd = 0;
    double sum = 0;
    for (int i = 0; i < n; i++) {
        if (!ph[i].jpeg) {
            pngs++;
            png_exact += ok[i] && memcmp(g + (size_t)i * per, ph[i].cpu, per) == 0;
            continue;
        }
        jpegs++;
        if (!ok[i]) {
            printf("# %s: refused by nvJPEG (the pipeline decodes it on the CPU)\n", ph[i].name);
            continue;
        }
        decoded++;
        int mx = 0;
        double sm = 0;
        for (size_t k = 0; k < per; k++) {
            int dd = abs((int)g[(size_t)i * per + k] - (int)ph[i].cpu[k]);
            mx = dd > mx ? dd : mx;
            sm += dd;
        }
        printf("# %s %dx%d: |nvJPEG + resample_images - libjpeg-turbo + PIL resample| max %d, mean %.3f levels\n",
               ph[i].name, ph[i].job.w, ph[i].job.h, mx, sm / (double)per);
        maxd = mx > maxd ? mx : maxd;
        sum += sm;
    }
    double mean = decoded ? sum / ((double)per * decoded) : 0;
    /* different IDCTs and chroma upsampling (libjpeg-turbo's fancy upsampling vs nvJPEG's), then a float
     * resampler against PIL's fixed point: a few levels on average, more at sharp colour edges */
    check(jpegs > 0 && decoded * 2 >= jpegs && mean <= 3.0, "jpeg_decode.parity_eval_224",
          "%d of %d JPEGs decoded on the GPU; vs the CPU path: mean |diff| %.3f levels, max %d (gate: mean <= 3)",
          decoded, jpegs, mean, maxd);
    check(png_exact == pngs, "jpeg_decode.planes_uploaded", "%d of %d PNG planes placed exactly", png_exact, pngs);
    /* a JPEG whose header is sound and whose data is not: refused or decoded, never a device error */
    for (int i = 0; i < n; i++)
        if (ph[i].jpeg && ph[i].len > 2048) {
            uint8_t *bad = malloc(ph[i].len);
            memcpy(bad, ph[i].data, ph[i].len);
            for (size_t k = ph[i].len / 2; k < ph[i].len - 2; k++) bad[k] = (uint8_t)(k * 131u);
            cnn_jpeg_image one = {.data = bad, .len = ph[i].len, .job = ph[i].job};
            cnn_resample_batch rb1 = {.n = 1, .ch = CH, .cw = CW};
            uint8_t ok1 = 0;
            st = t->gpu->jpeg_decode(t->gpu, dec, 1, &rb1, &one, dst, &ok1);
            check(st == CNN_OK, "jpeg_decode.corrupt_data", "%s (%s): %s", cnn_status_str(st), ok1 ? "decoded" : "refused",
                  st == CNN_OK ? "" : cnn_error_msg());
            free(bad);
            break;
        }
    /* throughput of decode + resample alone: batches of 256 JPEGs cycled from the photos (not under the sanitizers) */
    int nj = 0;
    for (int i = 0; i < n; i++) nj += ph[i].jpeg && ok[i];
    if (nj > 0 && !quick) {
        void *big;
        cnn_jpeg_image *bj = calloc(256, sizeof *bj);
        uint8_t *bok = calloc(256, 1);
        for (int i = 0, k = 0; i < 256; k = (k + 1) % n)
            if (ph[k].jpeg && ok[k]) bj[i++] = ji[k];
        if (t->gpu->alloc(t->gpu, per * 256, "jpeg bench", &big) != CNN_OK) fatal("alloc");
        cnn_resample_batch r256 = {.n = 256, .ch = CH, .cw = CW};
        expect_ok(t->gpu->jpeg_decode(t->gpu, dec, 0, &r256, bj, big, bok), "jpeg_decode.warmup");
        double t0 = cnn_now();
        for (int rep = 0; rep < 5; rep++) expect_ok(t->gpu->jpeg_decode(t->gpu, dec, rep & 1, &r256, bj, big, bok), "jpeg_decode.bench");
        double dt = cnn_now() - t0;
        printf("# jpeg_decode: %.0f images/s (batches of 256 photos of the folder, decode + resample to 224x224)\n",
               5 * 256 / dt);
        t->gpu->free(t->gpu, big);
        free(bj), free(bok);
    }
    t->gpu->jpeg_free(t->gpu, dec);
    t->gpu->free(t->gpu, dst);
    for (int i = 0; i < n; i++) free(ph[i].data), free(ph[i].cpu);
    free(ph), free(ji), free(ok), free(g);
}

/* ---- optimizers ----------------------------------------------------------------------------------------- */

/* SGD and AdamW against float64, and the act_dtype copy of the weights they write with the update where asked
 * (cnn_sgd.act_copy): the cases with a copy expect it to be the updated weights in the dtype. n = 1001: 125 vectors of
 * 8 elements, then one alone. */
static void check_act_copy(ctx *t, const char *name, arr *copy, const double *rw) {
    char nm[160];
    snprintf(nm, sizeof nm, "%s.act_copy", name);
    verify(t, nm, copy, rw, NULL, NULL, 0);
}
static void g_optim(ctx *t) {
    const int64_t n = 1001;
    const cnn_sgd sgds[] = {
        {.lr = 0.1f, .momentum = 0, .dampening = 0, .weight_decay = 0},
        {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 5e-4f, .first_step = true},
        {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 5e-4f},
        {.lr = 0.01f, .momentum = 0.8f, .dampening = 0.1f, .weight_decay = 1e-3f, .nesterov = true},
    };
    const float gscale[] = {1.0f, 0.5f, 1.0f, 0.25f};
    for (int k = 0; k < 4; k++) {
        const cnn_sgd *o = &sgds[k];
        /* case 3's w 4 bytes off 16: one element per thread throughout */
        arr w = arr_in(t, n, false, 7000 + k, -1, 1, k == 3 ? 4 : 0), g = arr_in(t, n, false, 7010 + k, -1, 1, 0);
        arr mbuf = arr_in(t, n, false, 7020 + k, -0.5f, 0.5f, 0);
        double *rw = dalloc(n), *rb = dalloc(n);
        for (int64_t i = 0; i < n; i++) {
            double gg = (double)g.h[i] * gscale[k] + (double)o->weight_decay * w.h[i], d = gg;
            rb[i] = mbuf.h[i];
            if (o->momentum != 0) {
                rb[i] = o->first_step ? gg : o->momentum * (double)mbuf.h[i] + (1.0 - o->dampening) * gg;
                d = o->nesterov ? gg + o->momentum * rb[i] : rb[i];
            }
            rw[i] = w.h[i] - (double)o->lr * d;
        }
        char name[96];
        snprintf(name, sizeof name, "sgd_update.%s.case%d%s%s", t->dts, k, o->nesterov ? ".nesterov" : "",
                 o->first_step ? ".first" : "");
        float *mb = o->momentum != 0 ? mbuf.g.p : NULL;
        cnn_sgd og = *o;
        arr copy = arr_out(t, n, true, 0);
        if (k % 2) og.act_copy = copy.g.p;
        expect_ok(t->gpu->sgd_update(t->gpu, &og, n, w.g.p, g.g.p, mb, gscale[k]), name);
        if (k % 2) og.act_copy = copy.c; /* the CPU backend's copies are float32 */
        if (t->cpu) cpu_ok(t, t->cpu->sgd_update(t->cpu, &og, n, w.c, g.c, o->momentum != 0 ? mbuf.c : NULL, gscale[k]), name);
        if (k % 2) check_act_copy(t, name, &copy, rw);
        arr_free(t, &copy);
        char nm[128];
        arr *in[] = {&g};
        snprintf(nm, sizeof nm, "%s.w", name);
        verify(t, nm, &w, rw, NULL, in, 1);
        snprintf(nm, sizeof nm, "%s.momentum_buf", name);
        verify(t, nm, &mbuf, rb, NULL, in, 1);
        free(rw), free(rb);
        arr_free(t, &w), arr_free(t, &g), arr_free(t, &mbuf);
    }
    const cnn_adamw adams[] = {{.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f, .step = 1},
                               {.lr = 3e-4f, .beta1 = 0.8f, .beta2 = 0.99f, .eps = 1e-6f, .weight_decay = 0, .step = 10}};
    for (int k = 0; k < 2; k++) {
        const cnn_adamw *o = &adams[k];
        float gsc = k ? 0.5f : 1.0f;
        arr w = arr_in(t, n, false, 7100 + k, -1, 1, 0), g = arr_in(t, n, false, 7110 + k, -1, 1, 0);
        arr m = arr_in(t, n, false, 7120 + k, -0.1f, 0.1f, 0), v = arr_in(t, n, false, 7130 + k, 0, 0.01f, 0);
        double *rw = dalloc(n), *rm = dalloc(n), *rv = dalloc(n);
        double bc1 = 1 - pow(o->beta1, (double)o->step), bc2 = 1 - pow(o->beta2, (double)o->step);
        for (int64_t i = 0; i < n; i++) {
            double ww = w.h[i] * (1.0 - (double)o->lr * o->weight_decay), gg = (double)g.h[i] * gsc;
            rm[i] = o->beta1 * (double)m.h[i] + (1.0 - o->beta1) * gg;
            rv[i] = o->beta2 * (double)v.h[i] + (1.0 - o->beta2) * gg * gg;
            rw[i] = ww - (double)o->lr / bc1 * rm[i] / (sqrt(rv[i]) / sqrt(bc2) + o->eps);
        }
        char name[64], nm[96];
        snprintf(name, sizeof name, "adamw_update.%s.step%lld", t->dts, (long long)o->step);
        cnn_adamw og = *o;
        arr copy = arr_out(t, n, true, 0);
        if (k % 2 == 0) og.act_copy = copy.g.p;
        expect_ok(t->gpu->adamw_update(t->gpu, &og, n, w.g.p, g.g.p, m.g.p, v.g.p, gsc), name);
        if (k % 2 == 0) og.act_copy = copy.c;
        if (t->cpu) cpu_ok(t, t->cpu->adamw_update(t->cpu, &og, n, w.c, g.c, m.c, v.c, gsc), name);
        if (k % 2 == 0) check_act_copy(t, name, &copy, rw);
        arr_free(t, &copy);
        arr *in[] = {&g};
        snprintf(nm, sizeof nm, "%s.w", name);
        verify(t, nm, &w, rw, NULL, in, 1);
        snprintf(nm, sizeof nm, "%s.m", name);
        verify(t, nm, &m, rm, NULL, in, 1);
        snprintf(nm, sizeof nm, "%s.v", name);
        verify(t, nm, &v, rv, NULL, in, 1);
        free(rw), free(rm), free(rv);
        arr_free(t, &w), arr_free(t, &g), arr_free(t, &m), arr_free(t, &v);
    }
}

/* ---- count_nonfinite ------------------------------------------------------------------------------------ */

static void g_nonfinite(ctx *t) {
    const int64_t counts[] = {0, 1, 1000, 300007};
    for (int k = 0; k < 4; k++) {
        int64_t n = counts[k], want = 0;
        arr x = arr_make(t, n, false, 0);
        fill(x.h, n, 7500 + k, -1e30f, 1e30f);
        for (int64_t i = 0; i < n; i += 997) {
            x.h[i] = (i / 997) % 3 == 0 ? NAN : (i / 997) % 3 == 1 ? INFINITY : -INFINITY;
            want++;
        }
        arr_sync_in(t, &x);
        int64_t got = -1, got2 = -1;
        char name[64];
        snprintf(name, sizeof name, "count_nonfinite.n%lld", (long long)n);
        cnn_status st = t->gpu->count_nonfinite(t->gpu, n, x.g.p, &got);
        cnn_status st2 = t->gpu->count_nonfinite(t->gpu, n, x.g.p, &got2);
        check(st == CNN_OK && st2 == CNN_OK && got == want && got2 == want && buf_unchanged(&x.g), name,
              "got %lld then %lld, want %lld (%s)", (long long)got, (long long)got2, (long long)want,
              st == CNN_OK ? "ok" : cnn_error_msg());
        arr_free(t, &x);
    }
}

/* ---- the training step's non-finite guard --------------------------------------------------------------- */

/* One guard_step on backend be over (loss, stats, backup) from the host; the state, stats and backup after it
 * come back into the same host arrays. */
static cnn_status guard_once(cnn_backend *be, float loss, float *stats, float *backup, int64_t n, bool halt,
                             cnn_guard_state *gs) {
    void *dl = NULL, *ds = NULL, *db = NULL, *dg = NULL;
    size_t sb = (size_t)(n ? n : 1) * 4;
    cnn_status st = be->alloc(be, 4, "loss", &dl);
    if (st == CNN_OK) st = be->alloc(be, sb, "stats", &ds);
    if (st == CNN_OK) st = be->alloc(be, sb, "backup", &db);
    if (st == CNN_OK) st = be->alloc(be, sizeof *gs, "guard", &dg);
    if (st == CNN_OK) st = be->upload(be, dl, &loss, 4);
    if (st == CNN_OK && n) st = be->upload(be, ds, stats, (size_t)n * 4);
    if (st == CNN_OK && n) st = be->upload(be, db, backup, (size_t)n * 4);
    if (st == CNN_OK) st = be->upload(be, dg, gs, sizeof *gs);
    cnn_guard g = {.loss = dl, .stats = ds, .backup = db, .n_stats = n, .halt_on_bad = halt};
    if (st == CNN_OK) st = be->guard_step(be, &g, dg);
    if (st == CNN_OK) st = be->download(be, gs, dg, sizeof *gs);
    if (st == CNN_OK && n) st = be->download(be, stats, ds, (size_t)n * 4);
    if (st == CNN_OK && n) st = be->download(be, backup, db, (size_t)n * 4);
    void *all[] = {dl, ds, db, dg};
    for (int i = 0; i < 4; i++)
        if (all[i]) be->free(be, all[i]);
    return st;
}

/* guard_step on the GPU against the CPU backend's, step after step, through every verdict: a finite step
 * refreshes the backup, a NaN loss or an Inf statistic restores the statistics and skips, halt mode keeps
 * skipping; and the optimizers leave everything alone when the verdict word says skip. */
static void g_guard(ctx *t) {
    const int64_t n = 3000; /* more than one block's threads: every thread's share is checked */
    float *st_g = malloc(n * 4), *bk_g = malloc(n * 4), *st_c = malloc(n * 4), *bk_c = malloc(n * 4);
    for (int halt = 0; halt <= 1; halt++) {
        cnn_guard_state gg = {0}, gc = {0};
        fill(bk_g, n, 4100, 0.5f, 1.5f);
        memcpy(bk_c, bk_g, n * 4);
        /* per step: loss, index of a poisoned statistic (-1 none), the value put there */
        static const struct { float loss; int64_t at; float v; } seq[] = {
            {2.5f, -1, 0}, {NAN, -1, 0}, {1.0f, 2999, INFINITY}, {1.5f, -1, 0}, {INFINITY, 17, NAN}, {0.5f, -1, 0}};
        for (int k = 0; k < 6; k++) {
            fill(st_g, n, 4200 + k, 0.5f, 1.5f);
            if (seq[k].at >= 0) st_g[seq[k].at] = seq[k].v;
            memcpy(st_c, st_g, n * 4);
            float *before = malloc(n * 4);
            memcpy(before, bk_g, n * 4);
            cnn_status s1 = guard_once(t->gpu, seq[k].loss, st_g, bk_g, n, halt, &gg);
            cnn_status s2 = t->cpu ? guard_once(t->cpu, seq[k].loss, st_c, bk_c, n, halt, &gc) : CNN_OK;
            bool bad = !isfinite(seq[k].loss) || seq[k].at >= 0;
            bool skip = bad || (halt && k >= 1);
            bool same_cpu = !t->cpu || (memcmp(&gg, &gc, offsetof(cnn_guard_state, first_loss)) == 0 &&
                                        memcmp(st_g, st_c, n * 4) == 0 && memcmp(bk_g, bk_c, n * 4) == 0);
            bool restored = skip ? memcmp(st_g, before, n * 4) == 0 : memcmp(bk_g, st_g, n * 4) == 0;
            char name[64];
            snprintf(name, sizeof name, "guard.%s.step%d", halt ? "halt" : "skip", k + 1);
            check(s1 == CNN_OK && s2 == CNN_OK && gg.steps == (uint64_t)k + 1 && gg.skip == (uint32_t)skip &&
                      gg.first_bad == (k >= 1 ? 2u : 0u) && (k < 1 || gg.first_what == CNN_GUARD_LOSS) &&
                      gg.bad_steps == (uint64_t)(k >= 4 ? 3 : k >= 2 ? 2 : k) && restored && same_cpu &&
                      (isnan(seq[k].loss) ? isnan(gg.loss) : gg.loss == seq[k].loss),
                  name, "%s; steps %llu bad %llu first %llu what %u skip %u (want %d) restored/refreshed %d, as the CPU %d",
                  s1 == CNN_OK ? "ok" : cnn_error_msg(), (unsigned long long)gg.steps, (unsigned long long)gg.bad_steps,
                  (unsigned long long)gg.first_bad, gg.first_what, gg.skip, skip, restored, same_cpu);
            free(before);
        }
    }
    /* the optimizers honour the verdict word */
    const int64_t m = 1000;
    arr w = arr_in(t, m, false, 4300, -1, 1, 0), g = arr_in(t, m, false, 4301, -1, 1, 0);
    arr b1 = arr_in(t, m, false, 4302, -1, 1, 0), b2 = arr_in(t, m, false, 4303, 0, 1, 0);
    void *word = NULL;
    uint32_t one = 1;
    expect_ok(t->gpu->alloc(t->gpu, 4, "skip word", &word), "guard.alloc");
    expect_ok(t->gpu->upload(t->gpu, word, &one, 4), "guard.upload");
    cnn_sgd sg = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 1e-4f, .skip = word};
    cnn_adamw aw = {.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f, .step = 3,
                    .skip = word};
    expect_ok(t->gpu->sgd_update(t->gpu, &sg, m, w.g.p, g.g.p, b1.g.p, 1.0f), "guard.sgd");
    expect_ok(t->gpu->adamw_update(t->gpu, &aw, m, w.g.p, g.g.p, b1.g.p, b2.g.p, 1.0f), "guard.adamw");
    expect_ok(t->gpu->sync(t->gpu), "guard.sync");
    check(buf_unchanged(&w.g) && buf_unchanged(&b1.g) && buf_unchanged(&b2.g), "guard.optimizers_skip", NULL);
    uint32_t zero = 0;
    expect_ok(t->gpu->upload(t->gpu, word, &zero, 4), "guard.upload");
    expect_ok(t->gpu->sgd_update(t->gpu, &sg, m, w.g.p, g.g.p, b1.g.p, 1.0f), "guard.sgd");
    expect_ok(t->gpu->sync(t->gpu), "guard.sync");
    check(!buf_unchanged(&w.g), "guard.optimizers_update_when_clear", NULL);
    t->gpu->free(t->gpu, word);
    arr_free(t, &w), arr_free(t, &g), arr_free(t, &b1), arr_free(t, &b2);
    free(st_g), free(bk_g), free(st_c), free(bk_c);
}

/* ---- graphs, determinism -------------------------------------------------------------------------------- */

/* A small training step through the backend: conv -> bn -> relu -> maxpool -> flatten -> linear -> xent and back,
 * then SGD. All buffers in one struct so it can be run eagerly and recorded. */
typedef struct step {
    cnn_conv2d cv;
    cnn_bn bn;
    cnn_pool2d pl;
    cnn_linear ln;
    cnn_xent xe;
    cnn_shape fs;
    void *x, *w, *y, *z, *a, *pool, *logits, *dlogits, *dpool, *da, *dz, *dx, *wl, *wl_act;
    float *gamma, *beta, *rm, *rv, *smean, *sinv, *bl, *dw, *dg, *db, *dwl, *dbl, *loss, *mom;
    int32_t *labels;
} step;

static void *step_alloc(cnn_backend *be, size_t bytes) {
    void *p;
    if (be->alloc(be, bytes, "graph test", &p) != CNN_OK) fatal("alloc");
    return p;
}

#define STEP_NWL (10 * 16 * 36) /* the linear layer's weights: 10 classes x the 16 x 6 x 6 pooled features */

static void step_init(ctx *t, step *s) {
    cnn_backend *be = t->gpu;
    size_t e = esize(t->dt);
    s->cv = conv_of(&(conv_case){2, 5, 12, 12, 16, 3, 3, 1, 1, 1, 1});
    int64_t M = (int64_t)s->cv.n * s->cv.p * s->cv.q;
    s->bn = (cnn_bn){.m = M, .c = 16, .eps = 1e-5f, .momentum = 0.1f};
    s->pl = (cnn_pool2d){.kind = CNN_POOL_MAX, .n = 2, .c = 16, .h = 12, .w = 12, .r = 3, .s = 3, .stride_h = 2,
                         .stride_w = 2, .pad_h = 1, .pad_w = 1, .p = 6, .q = 6};
    s->fs = (cnn_shape){2, 16, 6, 6};
    s->ln = (cnn_linear){.n = 2, .in = 16 * 36, .out = 10};
    s->xe = (cnn_xent){.n = 2, .classes = 10, .label_smoothing = 0.1f};
    int64_t nx = 2 * 12 * 12 * 5, nw = 16 * 9 * 5, ny = M * 16, np = 2 * 36 * 16, nwl = STEP_NWL;
    s->x = step_alloc(be, nx * e), s->w = step_alloc(be, nw * e), s->y = step_alloc(be, ny * e);
    s->z = step_alloc(be, ny * e), s->a = step_alloc(be, ny * e), s->pool = step_alloc(be, np * e);
    s->logits = step_alloc(be, 20 * e), s->dlogits = step_alloc(be, 20 * e), s->dpool = step_alloc(be, np * e);
    s->da = step_alloc(be, ny * e), s->dz = step_alloc(be, ny * e), s->dx = step_alloc(be, nx * e);
    s->wl = step_alloc(be, nwl * 4), s->wl_act = step_alloc(be, nwl * e);
    s->gamma = step_alloc(be, 64), s->beta = step_alloc(be, 64), s->rm = step_alloc(be, 64), s->rv = step_alloc(be, 64);
    s->smean = step_alloc(be, 64), s->sinv = step_alloc(be, 64), s->bl = step_alloc(be, 40), s->dw = step_alloc(be, nw * 4);
    s->dg = step_alloc(be, 64), s->db = step_alloc(be, 64), s->dwl = step_alloc(be, nwl * 4), s->dbl = step_alloc(be, 40);
    s->loss = step_alloc(be, 4), s->mom = step_alloc(be, nwl * 4), s->labels = step_alloc(be, 8);
}

/* the conv's input and filter elements */
static int64_t step_nx(const step *s) { return (int64_t)s->cv.n * s->cv.h * s->cv.w * s->cv.c; }
static int64_t step_nw(const step *s) { return (int64_t)s->cv.k * s->cv.r * s->cv.s * s->cv.c; }

/* (re)load every input and state buffer with fixed values */
static void step_load(ctx *t, step *s) {
    cnn_backend *be = t->gpu;
    /* all of every input: uploads of half of x (720 of 1440 values) and of the linear weights and their momentum
     * (2880 of 5760) left the rest never written, which compute-sanitizer's initcheck found read (RELIABILITY.md) */
    const int64_t nx = step_nx(s), nw = step_nw(s);
    float tmp[STEP_NWL];
    unsigned char bytes[STEP_NWL * 4];
    struct {
        void *p;
        int64_t n;
        bool act;
        uint64_t seed;
        float lo, hi;
    } ins[] = {{s->x, nx, true, 1, -1, 1},         {s->w, nw, true, 2, -0.3f, 0.3f},  {s->wl, STEP_NWL, false, 3, -0.1f, 0.1f},
               {s->gamma, 16, false, 4, 0.5f, 1.5f}, {s->beta, 16, false, 5, -0.5f, 0.5f}, {s->rm, 16, false, 6, 0, 0},
               {s->rv, 16, false, 7, 1, 1},          {s->bl, 10, false, 8, -0.1f, 0.1f},  {s->mom, STEP_NWL, false, 9, 0, 0}};
    for (size_t i = 0; i < sizeof ins / sizeof ins[0]; i++) {
        CNN_ASSERT(ins[i].n <= STEP_NWL);
        fill(tmp, ins[i].n, ins[i].seed, ins[i].lo, ins[i].hi);
        if (ins[i].act) {
            to_bytes(t->dt, tmp, ins[i].n, bytes);
            if (be->upload(be, ins[i].p, bytes, (size_t)ins[i].n * esize(t->dt)) != CNN_OK) fatal("upload");
        } else if (be->upload(be, ins[i].p, tmp, (size_t)ins[i].n * 4) != CNN_OK) {
            fatal("upload");
        }
    }
    int32_t lab[2] = {3, 7};
    if (be->upload(be, s->labels, lab, 8) != CNN_OK) fatal("upload");
}

static cnn_status step_run(ctx *t, step *s) {
    cnn_backend *be = t->gpu;
    int64_t ny = s->bn.m * 16;
    cnn_epilogue ep = {0};
    CNN_TRY(be->to_act(be, STEP_NWL, s->wl, s->wl_act));
    CNN_TRY(be->conv2d_fprop(be, &s->cv, &ep, s->x, s->w, s->y));
    CNN_TRY(be->bn_forward_train(be, &s->bn, s->y, s->gamma, s->beta, s->rm, s->rv, s->smean, s->sinv, NULL, false, s->z));
    CNN_TRY(be->relu_forward(be, ny, s->z, s->a));
    CNN_TRY(be->pool2d_forward(be, &s->pl, s->a, s->pool));
    /* flatten into the logits' input: reuse dpool as the flattened buffer */
    CNN_TRY(be->flatten_forward(be, s->fs, s->pool, s->dpool));
    CNN_TRY(be->linear_forward(be, &s->ln, s->dpool, s->wl_act, s->bl, s->logits));
    CNN_TRY(be->xent_forward_backward(be, &s->xe, s->logits, s->labels, s->loss, s->dlogits));
    CNN_TRY(be->linear_backward(be, &s->ln, s->dpool, s->wl_act, s->dlogits, s->pool, false, s->dwl, s->dbl));
    CNN_TRY(be->flatten_backward(be, s->fs, s->pool, s->dpool, false));
    CNN_TRY(be->pool2d_backward(be, &s->pl, s->a, s->pool, s->dpool, s->da, false));
    CNN_TRY(be->relu_backward(be, ny, s->a, s->da, s->dz, false));
    CNN_TRY(be->bn_backward(be, &s->bn, s->y, NULL, s->dz, s->gamma, s->smean, s->sinv, false, s->da, false, NULL, false,
                            s->dg, s->db));
    CNN_TRY(be->conv2d_wgrad(be, &s->cv, s->x, s->da, s->dw));
    CNN_TRY(be->conv2d_dgrad(be, &s->cv, s->da, s->w, s->dx, false));
    cnn_sgd o = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 1e-4f};
    CNN_TRY(be->sgd_update(be, &o, STEP_NWL, s->wl, s->dwl, s->mom, 1.0f));
    return CNN_OK;
}

/* every output of the step, as raw bytes */
static unsigned char *step_snapshot(ctx *t, step *s, size_t *len) {
    size_t e = esize(t->dt);
    size_t ny = (size_t)s->bn.m * 16 * e;
    struct {
        void *p;
        size_t bytes;
    } outs[] = {{s->y, ny},   {s->loss, 4}, {s->dlogits, 20 * e}, {s->dw, step_nw(s) * 4}, {s->dx, step_nx(s) * e},
                {s->dg, 64},  {s->db, 64},  {s->rm, 64},          {s->rv, 64},        {s->wl, STEP_NWL * 4},
                {s->mom, STEP_NWL * 4}, {s->dbl, 40}, {s->da, ny}};
    size_t total = 0;
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++) total += outs[i].bytes;
    unsigned char *snap = malloc(total), *p = snap;
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++) {
        if (t->gpu->download(t->gpu, p, outs[i].p, outs[i].bytes) != CNN_OK) fatal("download");
        p += outs[i].bytes;
    }
    *len = total;
    return snap;
}

static void step_free(ctx *t, step *s) {
    void *ptrs[] = {s->x,   s->w,   s->y,    s->z,     s->a,    s->pool,  s->logits, s->dlogits, s->dpool, s->da,
                    s->dz,  s->dx,  s->wl,   s->wl_act, s->gamma, s->beta, s->rm,     s->rv,      s->smean,  s->sinv,
                    s->bl,  s->dw,  s->dg,   s->db,    s->dwl,  s->dbl,   s->loss,   s->mom,     s->labels};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) t->gpu->free(t->gpu, ptrs[i]);
}

static void g_graph(ctx *t) {
    cnn_backend *be = t->gpu;
    step s;
    step_init(t, &s);
    char name[64];
    snprintf(name, sizeof name, "graph.%s", t->dts);
    step_load(t, &s);
    cnn_status st = step_run(t, &s); /* eager: compiles, sizes the workspace */
    if (st != CNN_OK) {
        check(false, name, "eager step failed: %s", cnn_error_msg());
        step_free(t, &s);
        return;
    }
    size_t len1, len2, len3;
    unsigned char *eager = step_snapshot(t, &s, &len1);
    float loss_eager;
    memcpy(&loss_eager, eager + (size_t)s.bn.m * 16 * esize(t->dt), 4);

    step_load(t, &s);
    void *g = NULL;
    st = be->graph_begin(be);
    cnn_status st_run = st == CNN_OK ? step_run(t, &s) : st;
    cnn_status st_end = st == CNN_OK ? be->graph_end(be, &g) : st;
    check(st == CNN_OK && st_run == CNN_OK && st_end == CNN_OK && g, "graph.record", "%s: begin %s, ops %s, end %s: %s",
          t->dts, cnn_status_str(st), cnn_status_str(st_run), cnn_status_str(st_end), cnn_error_msg());
    if (!g) {
        free(eager);
        step_free(t, &s);
        return;
    }
    /* the state was reloaded before recording (recording runs nothing): one replay must reproduce eager bit for bit */
    expect_ok(be->graph_launch(be, g), "graph.launch");
    unsigned char *rep = step_snapshot(t, &s, &len2);
    size_t diff = 0;
    for (size_t i = 0; i < len1 && i < len2; i++) diff += eager[i] != rep[i];
    snprintf(name, sizeof name, "graph.replay_equals_eager.%s", t->dts);
    check(len1 == len2 && diff == 0, name, "%zu of %zu bytes differ (loss eager %g)", diff, len1, (double)loss_eager);
    /* a second replay from the same state gives the same bits again */
    step_load(t, &s);
    expect_ok(be->graph_launch(be, g), "graph.launch2");
    unsigned char *rep2 = step_snapshot(t, &s, &len3);
    diff = 0;
    for (size_t i = 0; i < len1 && i < len3; i++) diff += eager[i] != rep2[i];
    snprintf(name, sizeof name, "graph.second_replay.%s", t->dts);
    check(len1 == len3 && diff == 0, name, "%zu of %zu bytes differ", diff, len1);
    /* host round trips are refused while recording, and the backend is usable afterwards */
    expect_ok(be->graph_begin(be), "graph.begin2");
    float f = 0;
    cnn_status up = be->upload(be, s.loss, &f, 4);
    int64_t cnt;
    cnn_status nf = be->count_nonfinite(be, 1, s.loss, &cnt);
    void *g2 = NULL;
    cnn_status end2 = be->graph_end(be, &g2);
    snprintf(name, sizeof name, "graph.host_ops_refused_while_recording.%s", t->dts);
    check(up == CNN_E_INVALID && nf == CNN_E_INVALID && end2 == CNN_OK, name, "upload %s, count_nonfinite %s, end %s",
          cnn_status_str(up), cnn_status_str(nf), cnn_status_str(end2));
    if (g2) be->graph_free(be, g2);
    be->graph_free(be, g);
    expect_ok(be->sync(be), "graph.sync_after");
    free(eager), free(rep), free(rep2);
    step_free(t, &s);
}

static void g_determinism(ctx *t) {
    step s;
    step_init(t, &s);
    size_t len1 = 0, len2 = 0;
    unsigned char *a = NULL, *b = NULL;
    int runs = quick ? 2 : 5, differ = 0;
    for (int r = 0; r < runs; r++) {
        step_load(t, &s);
        expect_ok(step_run(t, &s), "determinism.step");
        if (r == 0) {
            a = step_snapshot(t, &s, &len1);
        } else {
            b = step_snapshot(t, &s, &len2);
            differ += len1 != len2 || memcmp(a, b, len1) != 0;
            free(b);
        }
    }
    char name[64];
    snprintf(name, sizeof name, "determinism.step_bitwise.%s", t->dts);
    check(differ == 0, name, "%d of %d repeated runs differ from the first", differ, runs - 1);
    free(a);
    step_free(t, &s);
    /* a big split-K wgrad and a long BN reduction, twice each */
    cnn_conv2d cv = conv_of(&(conv_case){8, 16, 32, 32, 32, 3, 3, 1, 1, 1, 1});
    int64_t nx = (int64_t)cv.n * cv.h * cv.w * cv.c, ny = (int64_t)cv.n * cv.p * cv.q * cv.k, nw = (int64_t)cv.k * 9 * cv.c;
    arr x = arr_in(t, nx, true, 8000, -1, 1, 0), dy = arr_in(t, ny, true, 8001, -1, 1, 0);
    arr dw1 = arr_out(t, nw, false, 0), dw2 = arr_out(t, nw, false, 0);
    expect_ok(t->gpu->conv2d_wgrad(t->gpu, &cv, x.g.p, dy.g.p, dw1.g.p), "determinism.wgrad");
    expect_ok(t->gpu->conv2d_wgrad(t->gpu, &cv, x.g.p, dy.g.p, dw2.g.p), "determinism.wgrad");
    float *p1 = arr_gpu(t, &dw1), *p2 = arr_gpu(t, &dw2);
    snprintf(name, sizeof name, "determinism.wgrad_bitwise.%s", t->dts);
    check(memcmp(p1, p2, (size_t)nw * 4) == 0, name, "n*p*q = %d reduction", cv.n * cv.p * cv.q);
    free(p1), free(p2);
    arr s1 = arr_out(t, cv.k, false, 0), s2 = arr_out(t, cv.k, false, 0);
    expect_ok(t->gpu->channel_sum(t->gpu, ny / cv.k, cv.k, dy.g.p, s1.g.p), "determinism.channel_sum");
    expect_ok(t->gpu->channel_sum(t->gpu, ny / cv.k, cv.k, dy.g.p, s2.g.p), "determinism.channel_sum");
    p1 = arr_gpu(t, &s1), p2 = arr_gpu(t, &s2);
    snprintf(name, sizeof name, "determinism.channel_sum_bitwise.%s", t->dts);
    check(memcmp(p1, p2, (size_t)cv.k * 4) == 0, name, NULL);
    free(p1), free(p2);
    arr_free(t, &x), arr_free(t, &dy), arr_free(t, &dw1), arr_free(t, &dw2), arr_free(t, &s1), arr_free(t, &s2);
}

/* ---- BatchNorm's slices on any number of ranks (--deterministic, core/shards.h) ------------------------------
 * One rank of 4 slices against two ranks of 2 slices each, with --sync-bn's collective: the two ranks run one after
 * the other here, each collective summing rank 0's values and rank 1's as a pairwise tree of two ranks does (the
 * peer's values recorded in its previous pass: two passes whose outputs are thrown away make every record right). Every output must be the one
 * rank's bit for bit: each rank's rows of y, dx and the residual's gradient, the statistics and running statistics,
 * and dgamma/dbeta as the ranks' float sums added. A slice's sums that depended on how many slices a rank holds
 * would fail it. The vector path (C % 8 == 0: one collective a pass); every dtype; the outputs NaN-poisoned. */
#define PEER_CALLS 2
typedef struct peer_log {
    double *v[PEER_CALLS];
    int64_t n[PEER_CALLS];
    int count;
} peer_log;
static peer_log peer_mine, peer_theirs; /* this pass's collectives' inputs; the peer's (count 0: none yet) */

static void peer_clear(peer_log *l) {
    for (int i = 0; i < l->count; i++) free(l->v[i]);
    memset(l, 0, sizeof *l);
}

static cnn_status peer_allreduce(cnn_backend *be, void *comm, void *x, int64_t count, cnn_comm_op op, bool side) {
    CNN_ASSERT(op == CNN_COMM_SUM_F64 && !side && count > 0 && peer_mine.count < PEER_CALLS);
    const int i = peer_mine.count++;
    double *h = malloc((size_t)count * sizeof *h);
    if (!h) return CNN_E_OOM;
    CNN_TRY(be->download(be, h, x, (size_t)count * sizeof *h));
    peer_mine.v[i] = h, peer_mine.n[i] = count;
    if (peer_theirs.count == 0) return CNN_OK; /* the first pass: the record alone */
    CNN_ASSERT(i < peer_theirs.count && peer_theirs.n[i] == count);
    double *sum = malloc((size_t)count * sizeof *sum);
    if (!sum) return CNN_E_OOM;
    for (int64_t e = 0; e < count; e++) sum[e] = h[e] + peer_theirs.v[i][e]; /* x0 + x1 = x1 + x0 */
    cnn_status st = be->upload(be, x, sum, (size_t)count * sizeof *sum);
    free(sum);
    return st;
}

/* one rank's BatchNorm step over m rows of c: forward (+ residual, ReLU) then backward (its residual's gradient
 * accumulated); its outputs into o[]: y, save_mean, save_invstd, running_mean, running_var, dx, dres, dgamma, dbeta,
 * and the BatchNorm's input as stored.
 * With cv (the rank's images), x is a conv's input and the BatchNorm's the conv's output, whose sums it takes where
 * the conv wrote them (n->folds counts the BatchNorms that did; n->fused the passes run in one cooperative launch). */
enum { BR_Y, BR_MEAN, BR_INV, BR_RM, BR_RV, BR_DX, BR_DRES, BR_DG, BR_DB, BR_X, BR_OUTS };
typedef struct bn_rank_in {
    const float *x, *res, *dy, *dres, *gamma, *beta, *rm, *rv; /* this rank's rows (x: its images with a conv) */
    const cnn_conv2d *cv;                                       /* NULL: none */
    const float *w;                                             /* the conv's filter */
} bn_rank_in;
typedef struct bn_rank_counts {
    long folds, fused;
} bn_rank_counts;
static void bn_rank_step(ctx *t, const cnn_bn *bn0, int shards, const bn_rank_in *in, float *o[BR_OUTS],
                         bn_rank_counts *n, const char *name) {
    cnn_bn bn = *bn0;
    const int64_t mc = bn.m * bn.c, nx = in->cv ? (int64_t)in->cv->n * in->cv->h * in->cv->w * in->cv->c : mc;
    const int64_t nw = in->cv ? (int64_t)in->cv->k * in->cv->r * in->cv->s * in->cv->c : 1;
    const int c = bn.c;
    arr ax = arr_make(t, nx, true, 0), ar = arr_make(t, mc, true, 0), ady = arr_make(t, mc, true, 0);
    arr adr = arr_make(t, mc, true, 0), ag = arr_make(t, c, false, 0), ab = arr_make(t, c, false, 0);
    arr arm = arr_make(t, c, false, 0), arv = arr_make(t, c, false, 0), aw = arr_make(t, nw, true, 0);
    const struct { arr *a; const float *v; } ins[] = {{&ax, in->x}, {&ar, in->res}, {&ady, in->dy}, {&adr, in->dres},
                                                      {&ag, in->gamma}, {&ab, in->beta}, {&arm, in->rm},
                                                      {&arv, in->rv}, {&aw, in->w}};
    for (size_t i = 0; i < sizeof ins / sizeof ins[0]; i++) {
        if (!ins[i].v) continue;
        memcpy(ins[i].a->h, ins[i].v, (size_t)ins[i].a->n * sizeof(float));
        arr_sync_in(t, ins[i].a);
    }
    arr y = arr_out(t, mc, true, 0), sm = arr_out(t, c, false, 0), si = arr_out(t, c, false, 0);
    arr dx = arr_out(t, mc, true, 0), dg = arr_out(t, c, false, 0), db = arr_out(t, c, false, 0);
    arr xc = arr_out(t, in->cv ? mc : 1, true, 0); /* the conv's output */
    const void *xb = ax.g.p;
    cnn_conv_stats sums = {.chunks = -1};
    t->gpu->batch_shards = shards;
    if (in->cv) {
        cnn_conv2d cv = *in->cv;
        cv.choose_n = cv.n / shards, cv.choice_n = 4 * cv.choose_n; /* the one rank's four slices */
        cnn_epilogue ep = {.stats = &sums};
        int ws = -1; /* the first warp-specialised row (a stats program where the dtype has one) */
        for (int cfg = 0; cfg < cnn_cuda_conv_config_count() && ws < 0; cfg++)
            if (row_has(cfg, CNN_CUDA_CONV_WARPSPEC) && !row_has(cfg, CNN_CUDA_CONV_TRANSPOSED) &&
                cnn_cuda_conv_config_usable(t->gpu, cfg))
                ws = cfg;
        cnn_cuda_conv_force_config(t->gpu, ws);
        expect_ok(t->gpu->conv2d_fprop(t->gpu, &cv, &ep, ax.g.p, aw.g.p, xc.g.p), name);
        cnn_cuda_conv_force_config(t->gpu, -1);
        xb = xc.g.p, bn.stats = &sums;
    }
    cnn_cuda_stats st0, st1;
    cnn_cuda_stats_get(t->gpu, &st0);
    expect_ok(t->gpu->bn_forward_train(t->gpu, &bn, xb, ag.g.p, ab.g.p, arm.g.p, arv.g.p, sm.g.p, si.g.p, ar.g.p,
                                       true, y.g.p),
              name);
    cnn_cuda_stats_get(t->gpu, &st1);
    n->folds += st1.bn_stats_folds - st0.bn_stats_folds;
    expect_ok(t->gpu->bn_backward(t->gpu, &bn, xb, y.g.p, ady.g.p, ag.g.p, sm.g.p, si.g.p, true, dx.g.p, false,
                                  adr.g.p, true, dg.g.p, db.g.p),
              name);
    cnn_cuda_stats_get(t->gpu, &st1);
    n->fused += st1.bn_fused_launches - st0.bn_fused_launches;
    t->gpu->batch_shards = 0;
    arr *outs[BR_OUTS] = {&y, &sm, &si, &arm, &arv, &dx, &adr, &dg, &db, in->cv ? &xc : &ax};
    for (int i = 0; i < BR_OUTS; i++) o[i] = arr_gpu(t, outs[i]);
    arr *all[] = {&ax, &ar, &ady, &adr, &ag, &ab, &arm, &arv, &aw, &y, &sm, &si, &dx, &dg, &db, &xc};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) arr_free(t, all[i]);
}

/* a rank's rows of in (rank r of 2: the second half of every per-row input) */
static bn_rank_in bn_rank_half(const bn_rank_in *in, int r, int64_t half, int64_t half_x, const cnn_conv2d *cv) {
    bn_rank_in h = *in;
    h.x = in->x + r * half_x, h.res = in->res + r * half, h.dy = in->dy + r * half, h.dres = in->dres + r * half;
    h.cv = cv;
    return h;
}

static void g_bn_ranks(ctx *t) {
    static const struct {
        int64_t m; /* rows of the one rank: 4 slices */
        int c;
        conv_case conv; /* n > 0: the BatchNorm's input a conv's output (4 slices of n images), with its sums */
    } cases[] = {{4 * 3 * 5 * 7, 24, {0}},
                 {4 * 8 * 32 * 32, 64, {0}} /* 132 SMs: 8 slices small for the L2, a slice's chunks a cooperative
                                              * grid's share (batchnorm.c, plan_slices) */,
                 {4 * 9 * 11, 136, {0}},
                 {0, 0, {2, 64, 16, 16, 64, 3, 3, 1, 1, 1, 1}} /* slices of 512 rows: whole tiles */,
                 {0, 0, {2, 64, 32, 32, 256, 1, 1, 1, 1, 0, 0}} /* 2048 rows x 256: a fold adds several chunks */,
                 {0, 0, {1, 64, 12, 10, 72, 1, 1, 1, 1, 0, 0}} /* 120 rows: the partial pass */};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        cnn_conv2d cv = {0}, cv_rank = {0};
        if (cases[k].conv.n > 0) {
            conv_case cc = cases[k].conv;
            cc.n *= 2, cv_rank = conv_of(&cc); /* a rank's two slices */
            cc.n *= 2, cv = conv_of(&cc);
        }
        const bool conv = cv.n > 0;
        const int64_t m = conv ? (int64_t)cv.n * cv.p * cv.q : cases[k].m;
        const int c = conv ? cv.k : cases[k].c;
        const int64_t mc = m * c, half = mc / 2, nx = conv ? (int64_t)cv.n * cv.h * cv.w * cv.c : mc;
        const int64_t nw = conv ? (int64_t)cv.k * cv.r * cv.s * cv.c : 1;
        char name[128];
        snprintf(name, sizeof name, "bn_ranks.%s.m%lld_c%d%s.4_slices_vs_2x2", t->dts, (long long)m, c,
                 conv ? ".conv_sums" : "");
        float *x = malloc((size_t)nx * 4), *res = malloc((size_t)mc * 4), *dy = malloc((size_t)mc * 4);
        float *dres = malloc((size_t)mc * 4), *gamma = malloc((size_t)c * 4), *beta = malloc((size_t)c * 4);
        float *rm = malloc((size_t)c * 4), *rv = malloc((size_t)c * 4), *w = malloc((size_t)nw * 4);
        fill(x, nx, 9700 + k, -1.0f, 2.5f), fill(res, mc, 9710 + k, -1, 1), fill(dy, mc, 9720 + k, -1, 1);
        fill(dres, mc, 9730 + k, -1, 1), fill(gamma, c, 9740 + k, 0.5f, 1.5f), fill(beta, c, 9750 + k, -0.5f, 0.5f);
        fill(rm, c, 9760 + k, -0.2f, 0.2f), fill(rv, c, 9770 + k, 0.5f, 1.5f), fill(w, nw, 9780 + k, -0.1f, 0.1f);
        const bn_rank_in all = {x, res, dy, dres, gamma, beta, rm, rv, conv ? &cv : NULL, w};
        float *ones[2][BR_OUTS], *r0[BR_OUTS], *r1[BR_OUTS];
        bn_rank_counts n_one[2] = {{0}}, n_ranks = {0};
        cnn_bn bn = {.m = m, .c = c, .eps = 1e-5f, .momentum = 0.1f, .world = 1};
        for (int fz = 0; fz < 2; fz++) { /* the one rank's passes in one cooperative launch (forced), or not */
            cnn_cuda_bn_force_fused(t->gpu, fz);
            bn_rank_step(t, &bn, 4, &all, ones[fz], &n_one[fz], name);
        }
        cnn_cuda_bn_force_fused(t->gpu, -1);
        float **one = ones[1];
        static int token;
        cnn_status (*saved)(cnn_backend *, void *, void *, int64_t, cnn_comm_op, bool) = t->gpu->comm_allreduce;
        t->gpu->comm_allreduce = peer_allreduce;
        cnn_bn rank = bn;
        rank.m = m / 2, rank.comm = &token, rank.world = 2;
        /* rank 1 alone: its forward's sums right; rank 0 with them: its forward's and so its backward's right; rank 1
         * with rank 0's: all of rank 1's right; rank 0 again with those */
        float **outs[4] = {NULL, NULL, r1, r0};
        for (int pass = 0; pass < 4; pass++) {
            const int r = pass % 2 ? 0 : 1;
            const bn_rank_in h = bn_rank_half(&all, r, half, nx / 2, conv ? &cv_rank : NULL);
            float *tmp[BR_OUTS];
            bn_rank_counts f = {0};
            bn_rank_step(t, &rank, 2, &h, pass < 2 ? tmp : outs[pass], &f, name);
            if (pass >= 2) n_ranks.folds += f.folds, n_ranks.fused += f.fused;
            if (pass < 2)
                for (int i = 0; i < BR_OUTS; i++) free(tmp[i]);
            peer_clear(&peer_theirs), peer_theirs = peer_mine, memset(&peer_mine, 0, sizeof peer_mine);
        }
        peer_clear(&peer_theirs);
        t->gpu->comm_allreduce = saved;
        static const char *out_name[BR_OUTS] = {"y", "mean", "invstd", "running_mean", "running_var", "dx", "dres",
                                                "dgamma", "dbeta", "x"};
        char bad[200] = "";
        int64_t differ = 0, nan = 0;
        for (int i = 0; i < BR_OUTS; i++) {
            int64_t d = 0; /* the one rank's two paths */
            for (int64_t e = 0; e < (i == BR_Y || i == BR_DX || i == BR_DRES || i == BR_X ? mc : c); e++)
                d += memcmp(&ones[0][i][e], &ones[1][i][e], 4) != 0;
            if (d && !differ) snprintf(bad, sizeof bad, "; first: %s, %lld differ between the one rank's paths",
                                       out_name[i], (long long)d);
            differ += d;
        }
        for (int i = 0; i < BR_OUTS; i++) {
            const bool rows = i == BR_Y || i == BR_DX || i == BR_DRES || i == BR_X, summed = i == BR_DG || i == BR_DB;
            const int64_t n = rows ? mc : c;
            int64_t d = 0;
            for (int64_t e = 0; e < n; e++) {
                float v = rows ? (e < half ? r0[i][e] : r1[i][e - half]) : r0[i][e];
                if (summed) v = r0[i][e] + r1[i][e]; /* the gradient buckets' sum of two ranks */
                else if (!rows && memcmp(&r0[i][e], &r1[i][e], 4) != 0) d++; /* the ranks agree */
                nan += isnan(v) || isnan(one[i][e]);
                d += memcmp(&v, &one[i][e], 4) != 0;
            }
            if (d && !differ) snprintf(bad, sizeof bad, "; first: %s, %lld of %lld differ", out_name[i], (long long)d,
                                       (long long)n);
            differ += d;
        }
        check(differ == 0 && nan == 0, name, "%lld values differ, %lld NaN%s; the conv's sums taken by %ld and %ld "
              "BatchNorms", (long long)differ, (long long)nan, bad, n_one[1].folds, n_ranks.folds);
        /* forced on, every pass of the one rank that reads its rows runs in one launch (the forward too, where it
         * does not take the conv's sums); forced off, none; the two ranks' never (their collective rules it out) */
        snprintf(name, sizeof name, "bn_ranks.%s.m%lld_c%d%s.one_launch", t->dts, (long long)m, c,
                 conv ? ".conv_sums" : "");
        const long want_fused = cnn_cuda_coop_ok(t->gpu) ? 2 - n_one[1].folds : 0;
        const bool surely = cnn_cuda_sm_count(t->gpu) >= 8 * ((c / 8 + 255) / 256); /* as in g_bn */
        check((n_one[1].fused == want_fused || (!surely && n_one[1].fused < want_fused)) && n_one[0].fused == 0 &&
                  n_ranks.fused == 0,
              name,
              "passes in one launch: %ld forced (want %ld), %ld forced off, %ld of the two ranks", n_one[1].fused,
              want_fused, n_one[0].fused, n_ranks.fused);
        if (conv) { /* the sums of a slice of whole tiles are taken on any rank, where a stats program wrote them */
            const bool whole = (int64_t)cases[k].conv.n * cv.p * cv.q % 256 == 0;
            snprintf(name, sizeof name, "bn_ranks.%s.m%lld_c%d.conv_sums.taken", t->dts, (long long)m, c);
            check(n_one[1].folds == n_ranks.folds / 2 && n_one[0].folds == n_one[1].folds &&
                      (!whole || t->dt == CNN_DTYPE_F32 || n_one[1].folds == 1),
                  name, "the one rank's BatchNorm took the conv's sums %ld times, the two ranks' %ld (slices of %s tiles)",
                  n_one[1].folds, n_ranks.folds, whole ? "whole" : "partial");
        }
        { /* and the one rank's sums are the rows' (both runs could drop the same chunk): the mean, and dbeta = the
           * sum of dy where the ReLU passed */
            double worst = 0;
            for (int j = 0; j < c; j++) {
                double sx = 0, sdy = 0;
                for (int64_t r = 0; r < m; r++) {
                    sx += one[BR_X][r * c + j];
                    sdy += one[BR_Y][r * c + j] > 0 ? rnd(t->dt, dy[r * c + j]) : 0.0;
                }
                worst = fmax(worst, fabs(one[BR_MEAN][j] - sx / m) / (fabs(sx / m) + 1));
                worst = fmax(worst, fabs(one[BR_DB][j] - sdy) / (fabs(sdy) + 1));
            }
            snprintf(name, sizeof name, "bn_ranks.%s.m%lld_c%d.sums", t->dts, (long long)m, c);
            check(worst <= 1e-5, name, "the mean's and dbeta's worst relative error %.2e against float64 (<= 1e-5)",
                  worst);
        }
        for (int i = 0; i < BR_OUTS; i++) free(ones[0][i]), free(ones[1][i]), free(r0[i]), free(r1[i]);
        free(x), free(res), free(dy), free(dres), free(gamma), free(beta), free(rm), free(rv), free(w);
    }
}

/* ---- one launch over a batch of slices (cnn_conv2d.choose_n) ------------------------------------------------
 * --deterministic runs each forward and dgrad pass over its S slices of m images in one launch with choose_n = m
 * (core/shards.h). Every image's output must be bit for bit what the slice's own launch of m images writes (that
 * launch with choose_n = m too: the heuristic's untimed choice, as a rank of one slice takes under
 * --deterministic). The outputs start NaN-poisoned: an image one launch leaves unwritten fails. ".global": the
 * choice made for the whole batch of S * m instead (choice_n, as every rank makes it): the slices' launches against
 * the heuristic's launch over the batch (choose_n = S * m); where a slice's choice differs from the batch's (the
 * case that splits K for a slice), a backend that ignored choice_n fails it. A wgrad's: its one launch over the
 * slices against S launches, each slice taking the splits chosen for one slice among the batch's S. */
enum { CH_FPROP, CH_FPROP_POOL, CH_DGRAD, CH_DGRAD_ACC, CH_DGRAD_RELU, CH_PAIR, CH_WGRAD };
typedef struct choose_case {
    int pass;
    conv_case cv, cv2; /* one slice's problem (n = m); CH_PAIR: and its second convolution's */
    int slices;
    bool f32_only; /* Winograd's case: true fp32 alone, and not in a quick run */
} choose_case;
static const choose_case choose_cases[] = {
    {.pass = CH_FPROP, .cv = {2, 64, 12, 10, 64, 3, 3, 1, 1, 1, 1}, .slices = 4},   /* 3x3/1, epilogue: BN, res, ReLU */
    {.pass = CH_FPROP, .cv = {3, 64, 14, 14, 128, 1, 1, 2, 2, 0, 0}, .slices = 4},  /* 1x1/2, 3 images a slice */
    {.pass = CH_FPROP, .cv = {2, 3, 32, 30, 64, 7, 7, 2, 2, 3, 3}, .slices = 4},    /* the stem */
    {.pass = CH_FPROP, .cv = {2, 12, 9, 11, 24, 3, 3, 1, 1, 1, 1}, .slices = 4},    /* C = 12, K = 24 */
    {.pass = CH_FPROP, .cv = {4, 256, 8, 8, 128, 3, 3, 1, 1, 1, 1}, .slices = 4},   /* a slice splits K, the batch not */
    {.pass = CH_FPROP, .cv = {8, 64, 28, 28, 64, 3, 3, 1, 1, 1, 1}, .slices = 2, .f32_only = true}, /* Winograd */
    {.pass = CH_FPROP_POOL, .cv = {2, 3, 32, 32, 64, 7, 7, 2, 2, 3, 3}, .slices = 4}, /* the stem + max-pool */
    {.pass = CH_DGRAD, .cv = {2, 64, 12, 10, 64, 3, 3, 1, 1, 1, 1}, .slices = 4},   /* stride 1: one phase */
    {.pass = CH_DGRAD, .cv = {3, 64, 14, 14, 128, 3, 3, 2, 2, 1, 1}, .slices = 4},  /* 3x3/2: four phases */
    {.pass = CH_DGRAD, .cv = {4, 128, 8, 8, 256, 3, 3, 1, 1, 1, 1}, .slices = 4},   /* split K as above */
    {.pass = CH_DGRAD_ACC, .cv = {2, 64, 14, 14, 128, 1, 1, 2, 2, 0, 0}, .slices = 4}, /* 1x1/2 adding into dx */
    {.pass = CH_DGRAD_RELU, .cv = {2, 64, 12, 10, 64, 3, 3, 1, 1, 1, 1}, .slices = 4}, /* gated by a ReLU's output */
    {.pass = CH_PAIR, .cv = {2, 64, 7, 9, 72, 1, 1, 1, 1, 0, 0}, .cv2 = {2, 128, 13, 17, 72, 1, 1, 2, 2, 0, 0},
     .slices = 4}, /* a block's last conv and its downsample conv */
    /* wgrad: every slice's sum in one call, into rows cnn_sum_rows apart */
    {.pass = CH_WGRAD, .cv = {2, 64, 8, 8, 64, 3, 3, 1, 1, 1, 1}, .slices = 4},    /* 3x3/1: the halo configs */
    {.pass = CH_WGRAD, .cv = {2, 64, 8, 8, 128, 1, 1, 1, 1, 0, 0}, .slices = 4},   /* 1x1: x's rows tiled */
    {.pass = CH_WGRAD, .cv = {4, 128, 8, 8, 256, 3, 3, 2, 2, 1, 1}, .slices = 4},  /* im2col, 64 pixels a slice */
    {.pass = CH_WGRAD, .cv = {3, 128, 8, 8, 256, 3, 3, 2, 2, 1, 1}, .slices = 4},  /* 48 pixels: a launch per slice */
    {.pass = CH_WGRAD, .cv = {2, 3, 16, 14, 64, 7, 7, 2, 2, 3, 3}, .slices = 4},   /* the stem: few channels */
    {.pass = CH_WGRAD, .cv = {3, 3, 9, 11, 24, 3, 3, 1, 1, 1, 1}, .slices = 2},    /* a 3x3 stem's narrow tile, K 24 */
    {.pass = CH_WGRAD, .cv = {4, 64, 16, 16, 64, 1, 1, 1, 1, 0, 0}, .slices = 4},  /* a slice's splits reduced */
    {.pass = CH_WGRAD, .cv = {4, 64, 16, 16, 64, 3, 3, 1, 1, 1, 1}, .slices = 4},  /* the same, halo */
};

static void *slice_at(void *p, int64_t elems, cnn_dtype dt) { return p ? (char *)p + elems * (int64_t)esize(dt) : NULL; }

/* one pass of cc over the whole batch (whole = true) or slice by slice, into out */
static cnn_status choose_run(ctx *t, const choose_case *cc, bool whole, bool global, arr *in, arr *w, arr *in2,
                             arr *w2, const cnn_epilogue *ep, arr *relu_y, arr *out) {
    cnn_backend *be = t->gpu;
    const int S = cc->slices, runs = whole ? 1 : S;
    cnn_conv2d c = conv_of(&cc->cv), c2 = cc->pass == CH_PAIR ? conv_of(&cc->cv2) : c;
    c.choose_n = c.n, c2.choose_n = c2.n;
    if (global) c.choice_n = S * c.n, c2.choice_n = S * c2.n; /* a slice's bits, the batch's choice */
    if (whole) c.n *= S, c2.n *= S;
    if (global && whole && cc->pass != CH_WGRAD) /* the heuristic's launch over the batch (a wgrad's stays sliced) */
        c.choose_n = c.n, c.choice_n = 0, c2.choose_n = c2.n, c2.choice_n = 0;
    const bool dgrad = cc->pass >= CH_DGRAD && cc->pass <= CH_DGRAD_RELU;
    const int64_t xs = (int64_t)c.n * c.h * c.w * c.c, ys = (int64_t)c.n * c.p * c.q * c.k;
    const int64_t x2s = (int64_t)c2.n * c2.h * c2.w * c2.c;
    cnn_pool2d pl = {0};
    if (cc->pass == CH_FPROP_POOL && !cnn_pool2d_init(&pl, CNN_POOL_MAX, c.n, c.k, c.p, c.q, 3, 2, 1)) fatal("pool");
    const int64_t os = cc->pass == CH_FPROP_POOL ? (int64_t)pl.n * pl.p * pl.q * pl.c : dgrad ? xs : ys;
    cnn_status st = CNN_OK;
    for (int j = 0; j < runs && st == CNN_OK; j++) {
        cnn_epilogue e = ep ? *ep : (cnn_epilogue){0};
        e.residual = slice_at((void *)(ep ? ep->residual : NULL), j * ys, t->dt);
        void *o = slice_at(out->g.p, j * os, t->dt);
        switch (cc->pass) {
        case CH_FPROP: st = be->conv2d_fprop(be, &c, ep ? &e : NULL, slice_at(in->g.p, j * xs, t->dt), w->g.p, o); break;
        case CH_FPROP_POOL:
            st = be->conv2d_fprop_pool(be, &c, ep ? &e : NULL, &pl, slice_at(in->g.p, j * xs, t->dt), w->g.p, o);
            break;
        case CH_DGRAD:
        case CH_DGRAD_ACC:
            st = be->conv2d_dgrad(be, &c, slice_at(in->g.p, j * ys, t->dt), w->g.p, o, cc->pass == CH_DGRAD_ACC);
            break;
        case CH_DGRAD_RELU:
            st = be->conv2d_dgrad_relu(be, &c, slice_at(in->g.p, j * ys, t->dt), w->g.p,
                                       slice_at(relu_y->g.p, j * xs, t->dt), o, NULL);
            break;
        case CH_WGRAD: /* x in `in`, dy in `in2`; the slices' sums rows of out */
            st = be->conv2d_wgrad(be, &c, slice_at(in->g.p, j * xs, t->dt), slice_at(in2->g.p, j * ys, t->dt),
                                  (float *)out->g.p + j * cnn_sum_rows((int64_t)c.k * c.r * c.s * c.c));
            break;
        default:
            st = be->conv2d_fprop_pair(be, &c, &c2, ep, slice_at(in->g.p, j * xs, t->dt), w->g.p,
                                       slice_at(in2->g.p, j * x2s, t->dt), w2->g.p, o);
        }
    }
    return st;
}

static void choose_one(ctx *t, const choose_case *cc, bool global, uint64_t seed) {
    static const char *pass_name[] = {"fprop", "fprop_pool", "dgrad", "dgrad_acc", "dgrad_relu", "fprop_pair", "wgrad"};
    const int S = cc->slices;
    cnn_conv2d c = conv_of(&cc->cv), c2 = cc->pass == CH_PAIR ? conv_of(&cc->cv2) : c;
    c.n *= S, c2.n *= S; /* the whole batch */
    const bool dgrad = cc->pass >= CH_DGRAD && cc->pass <= CH_DGRAD_RELU, pair = cc->pass == CH_PAIR;
    const bool wgrad = cc->pass == CH_WGRAD;
    const int64_t nx = (int64_t)c.n * c.h * c.w * c.c, ny = (int64_t)c.n * c.p * c.q * c.k;
    const int64_t nw = (int64_t)c.k * c.r * c.s * c.c, nx2 = pair ? (int64_t)c2.n * c2.h * c2.w * c2.c : wgrad ? ny : 1;
    const int64_t nw2 = pair ? (int64_t)c2.k * c2.r * c2.s * c2.c : 1, rows = cnn_sum_rows(nw);
    const int64_t no = cc->pass == CH_FPROP_POOL ? (int64_t)c.n * ((c.p - 1) / 2 + 1) * ((c.q - 1) / 2 + 1) * c.k
                       : dgrad                   ? nx
                       : wgrad                   ? S * rows
                                                 : ny;
    arr in = arr_in(t, dgrad ? ny : nx, true, seed, -1, 1, 0), w = arr_in(t, nw, true, seed + 1, -0.5f, 0.5f, 0);
    arr in2 = arr_in(t, nx2, true, seed + 2, -1, 1, 0), w2 = arr_in(t, nw2, true, seed + 3, -0.5f, 0.5f, 0);
    arr scale = arr_in(t, c.k, false, seed + 4, 0.5f, 1.5f, 0), shift = arr_in(t, c.k, false, seed + 5, -0.5f, 0.5f, 0);
    arr res = arr_in(t, ny, true, seed + 6, -1, 1, 0), ry = arr_in(t, dgrad ? nx : 1, true, seed + 7, -1, 1, 0);
    for (int64_t i = 0; i < ry.n; i++) ry.h[i] = ry.h[i] > 0 ? ry.h[i] : 0; /* a ReLU's output: half of it zero */
    arr_sync_in(t, &ry);
    /* accumulating: both outputs start as the same dx; else NaN-poisoned */
    arr yw = cc->pass == CH_DGRAD_ACC ? arr_in(t, no, true, seed + 8, -1, 1, 0) : arr_out(t, no, !wgrad, 0);
    arr ys = cc->pass == CH_DGRAD_ACC ? arr_in(t, no, true, seed + 8, -1, 1, 0) : arr_out(t, no, !wgrad, 0);
    /* the forward's epilogue: BatchNorm folded, a residual where the kernels add one (not a first layer), ReLU */
    const bool with_res = cc->pass == CH_FPROP && c.c >= 8;
    cnn_epilogue ep = {.scale = pair ? NULL : scale.g.p, .shift = shift.g.p, .residual = with_res ? res.g.p : NULL,
                       .relu = true};
    char name[200];
    snprintf(name, sizeof name, "choose_n.%s.%s.n%dx%d_c%d_h%d_w%d_k%d_r%d_s%d_st%d%s", pass_name[cc->pass], t->dts, S,
             cc->cv.n, c.c, c.h, c.w, c.k, c.r, c.s, c.stride_h, global ? ".global" : "");
    expect_ok(choose_run(t, cc, true, global, &in, &w, &in2, &w2, dgrad ? NULL : &ep, &ry, &yw), name);
    expect_ok(choose_run(t, cc, false, global, &in, &w, &in2, &w2, dgrad ? NULL : &ep, &ry, &ys), name);
    float *a = arr_gpu(t, &yw), *b = arr_gpu(t, &ys);
    int64_t differ = 0, nan = 0, first = -1;
    for (int64_t i = 0; i < no; i++) {
        if (wgrad && i % rows >= nw) continue; /* between the rows: nobody's */
        nan += isnan(a[i]) || isnan(b[i]);
        if (memcmp(&a[i], &b[i], 4) != 0 && differ++ == 0) first = i;
    }
    check(differ == 0 && nan == 0, name, "one launch against %d: %lld of %lld elements differ (first at %lld: %g vs %g), "
          "%lld NaN", S, (long long)differ, (long long)no, (long long)first, first >= 0 ? a[first] : 0.0,
          first >= 0 ? b[first] : 0.0, (long long)nan);
    free(a), free(b);
    arr_free(t, &in), arr_free(t, &w), arr_free(t, &in2), arr_free(t, &w2), arr_free(t, &scale), arr_free(t, &shift);
    arr_free(t, &res), arr_free(t, &ry), arr_free(t, &yw), arr_free(t, &ys);
}

/* the linear layer (cnn_linear.choose_n, as the convolutions'): forward and backward in one call over S slices of m
 * rows against S calls of one slice, y and dx bitwise, and the backward's rows of dw and dbias each its slice's own;
 * ".global" as above (the forward's one call the heuristic's over the batch) */
static void choose_linear(ctx *t, int S, int m, int in, int out, bool global, uint64_t seed) {
    cnn_backend *be = t->gpu;
    const int64_t nx = (int64_t)S * m * in, ny = (int64_t)S * m * out, nw = (int64_t)out * in;
    const int64_t wrows = cnn_sum_rows(nw), brows = cnn_sum_rows(out);
    arr x = arr_in(t, nx, true, seed, -1, 1, 0), w = arr_in(t, nw, true, seed + 1, -0.5f, 0.5f, 0);
    arr b = arr_in(t, out, false, seed + 2, -0.5f, 0.5f, 0), dy = arr_in(t, ny, true, seed + 3, -1, 1, 0);
    arr y[2], dx[2], dw[2], db[2];
    for (int v = 0; v < 2; v++) {
        y[v] = arr_out(t, ny, true, 0), dx[v] = arr_out(t, nx, true, 0);
        dw[v] = arr_out(t, S * wrows, false, 0), db[v] = arr_out(t, S * brows, false, 0);
    }
    char name[160];
    snprintf(name, sizeof name, "choose_n.linear.%s.n%dx%d_in%d_out%d%s", t->dts, S, m, in, out, global ? ".global" : "");
    const int choice = global ? S * m : 0;
    cnn_linear whole = {.n = S * m, .in = in, .out = out, .choose_n = m, .choice_n = choice}, fwd = whole;
    if (global) fwd.choose_n = S * m, fwd.choice_n = 0; /* the heuristic's launch over the batch */
    expect_ok(be->linear_forward(be, &fwd, x.g.p, w.g.p, b.g.p, y[0].g.p), name);
    expect_ok(be->linear_backward(be, &whole, x.g.p, w.g.p, dy.g.p, dx[0].g.p, false, dw[0].g.p, db[0].g.p), name);
    const int64_t es = esize(t->dt);
    for (int j = 0; j < S; j++) {
        cnn_linear one = {.n = m, .in = in, .out = out, .choose_n = m, .choice_n = choice};
        const int64_t xo = (int64_t)j * m * in * es, yo = (int64_t)j * m * out * es;
        expect_ok(be->linear_forward(be, &one, (char *)x.g.p + xo, w.g.p, b.g.p, (char *)y[1].g.p + yo), name);
        expect_ok(be->linear_backward(be, &one, (char *)x.g.p + xo, w.g.p, (char *)dy.g.p + yo, (char *)dx[1].g.p + xo,
                                      false, (float *)dw[1].g.p + j * wrows, (float *)db[1].g.p + j * brows),
                  name);
    }
    int64_t differ = 0, nan = 0;
    arr *pairs[4][2] = {{&y[0], &y[1]}, {&dx[0], &dx[1]}, {&dw[0], &dw[1]}, {&db[0], &db[1]}};
    for (int k = 0; k < 4; k++) {
        float *p0 = arr_gpu(t, pairs[k][0]), *p1 = arr_gpu(t, pairs[k][1]);
        const int64_t rows = k == 2 ? wrows : k == 3 ? brows : 0, used = k == 2 ? nw : out;
        for (int64_t i = 0; i < pairs[k][0]->n; i++) {
            if (rows && i % rows >= used) continue; /* between the rows: nobody's */
            nan += isnan(p0[i]) || isnan(p1[i]);
            differ += memcmp(&p0[i], &p1[i], 4) != 0;
        }
        free(p0), free(p1);
    }
    check(differ == 0 && nan == 0, name, "one call against %d: %lld values of y, dx, dw and dbias differ, %lld NaN", S,
          (long long)differ, (long long)nan);
    arr_free(t, &x), arr_free(t, &w), arr_free(t, &b), arr_free(t, &dy);
    for (int v = 0; v < 2; v++) arr_free(t, &y[v]), arr_free(t, &dx[v]), arr_free(t, &dw[v]), arr_free(t, &db[v]);
}

static void g_choose_n(ctx *t) {
    static const struct {
        int slices, m, in, out;
    } linear_cases[] = {{4, 16, 512, 10} /* the CIFAR classifier */, {4, 3, 256, 64}, {2, 64, 128, 128},
                       {8, 64, 2048, 256} /* f32: a slice's choice splits K, the batch's not */};
    for (size_t i = 0; i < sizeof linear_cases / sizeof linear_cases[0]; i++)
        for (int global = 0; global < 2; global++)
            choose_linear(t, linear_cases[i].slices, linear_cases[i].m, linear_cases[i].in, linear_cases[i].out,
                          global, 9900 + 8 * i);
    for (size_t i = 0; i < sizeof choose_cases / sizeof choose_cases[0]; i++) {
        const choose_case *cc = &choose_cases[i];
        if (cc->f32_only && (t->dt != CNN_DTYPE_F32 || t->tf32 || quick)) continue;
        choose_one(t, cc, false, 9500 + 16 * i);
        choose_one(t, cc, true, 9500 + 16 * i);
    }
}

/* ---- OOM, cache, misc ----------------------------------------------------------------------------------- */

static void g_oom(ctx *t) {
    cnn_backend *be = t->gpu;
    size_t f0 = 0, tot = 0, f1 = 0, f2 = 0;
    expect_ok(be->sync(be), "oom.sync");
    expect_ok(cnn_cuda_mem_info(be, &f0, &tot), "oom.mem_info");
    void *p = (void *)1;
    cnn_status st = be->alloc(be, (size_t)1 << 50, "an absurd test buffer", &p);
    const char *msg = cnn_error_msg();
    check(st == CNN_E_OOM && p == NULL && strstr(msg, "an absurd test buffer") && strstr(msg, "1125899906842624"),
          "oom.absurd_allocation", "status %s, message: %s", cnn_status_str(st), msg);
    cnn_error_clear();
    expect_ok(cnn_cuda_mem_info(be, &f1, &tot), "oom.mem_info");
    double mib = 1024.0 * 1024.0;
    check(fabs((double)f1 - (double)f0) <= 2 * mib, "oom.memory_back_after_failure", "free %.1f MiB before, %.1f after",
          f0 / mib, f1 / mib);
    /* a real allocation is given back */
    size_t big = f1 / 4;
    void *q = NULL;
    st = be->alloc(be, big, "a quarter of free memory", &q);
    expect_ok(st, "oom.quarter_alloc");
    if (q) {
        expect_ok(be->zero(be, q, big), "oom.touch");
        expect_ok(be->sync(be), "oom.sync2");
        be->free(be, q);
    }
    expect_ok(cnn_cuda_mem_info(be, &f2, &tot), "oom.mem_info");
    check(fabs((double)f2 - (double)f0) <= 2 * mib, "oom.memory_back_after_free", "free %.1f MiB before, %.1f after",
          f0 / mib, f2 / mib);
    check(be->peak_bytes(be) >= big, "oom.peak_bytes", "peak %zu, allocated %zu", be->peak_bytes(be), big);
    /* and the backend still works */
    arr x = arr_in(t, 100, true, 9000, -1, 1, 0), y = arr_out(t, 100, true, 0);
    double ref[100];
    for (int i = 0; i < 100; i++) ref[i] = x.h[i] > 0 ? x.h[i] : 0;
    expect_ok(be->relu_forward(be, 100, x.g.p, y.g.p), "oom.relu_after");
    if (t->cpu) cpu_ok(t, t->cpu->relu_forward(t->cpu, 100, x.c, y.c), "oom.relu_after");
    arr *in[] = {&x};
    verify(t, "oom.backend_usable_after", &y, ref, NULL, in, 1);
    arr_free(t, &x), arr_free(t, &y);
}

static int corrupt_cache_files(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strstr(e->d_name, ".cubin") || strstr(e->d_name, ".tmp.")) continue;
        char p[1200];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        FILE *f = fopen(p, "r+b");
        if (!f) continue;
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        fseek(f, size - 1, SEEK_SET); /* the payload's last byte */
        int c = fgetc(f);
        fseek(f, size - 1, SEEK_SET);
        fputc(c ^ 0x5a, f);
        fclose(f);
        n++;
    }
    closedir(d);
    return n;
}

static void rm_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2]))) continue;
        char p[1200];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static bool relu_works(ctx *t, cnn_backend *be, const char *name) {
    cnn_backend *saved = t->gpu;
    t->gpu = be;
    cnn_backend *saved_cpu = t->cpu;
    t->cpu = NULL;
    arr x = arr_in(t, 1000, true, 9100, -1, 1, 0), y = arr_out(t, 1000, true, 0);
    double ref[1000];
    for (int i = 0; i < 1000; i++) ref[i] = x.h[i] > 0 ? x.h[i] : 0;
    expect_ok(be->relu_forward(be, 1000, x.g.p, y.g.p), name);
    arr *in[] = {&x};
    bool ok = verify(t, name, &y, ref, NULL, in, 1);
    arr_free(t, &x), arr_free(t, &y);
    t->gpu = saved;
    t->cpu = saved_cpu;
    return ok;
}

/* ---- the tuned choice between Winograd and the direct kernels (winograd.c, F32) -----------------------------
 * A 3x3/1 layer Winograd could take is timed both ways once and the winner cached under its "fprop_algo" key
 * (cfg 0 direct, 1 Winograd); a cached choice is obeyed with nothing tuned: 19 launches for Winograd (filter,
 * input, 16 GEMMs, output), at most 2 for the direct kernels. Every run is checked against float64. */
static const conv_case algo_case = {16, 32, 16, 16, 32, 3, 3, 1, 1, 1, 1}; /* 1024 tiles: timed */
#define ALGO_KEY "fprop_algo f32 n16 c32 h16 w16 k32 pad1x1 res|"

static bool tune_file(const char *dir, char *path, size_t cap) {
    DIR *d = opendir(dir);
    if (!d) return false;
    struct dirent *e;
    bool found = false;
    while (!found && (e = readdir(d)))
        if (strncmp(e->d_name, "tune-v", 6) == 0) snprintf(path, cap, "%s/%s", dir, e->d_name), found = true;
    closedir(d);
    return found;
}

/* one fprop of algo_case (scale, shift, residual, ReLU) on a backend over cache dir `dir`: verified; its
 * launches and the shapes it tuned */
static void algo_run(ctx *t, const char *dir, const char *name, long *launches, int *tuned) {
    cnn_backend_opts o = {.device = "cuda", .act_dtype = CNN_DTYPE_F32, .cache_dir = dir};
    cnn_backend *be = NULL, *saved = t->gpu;
    if (cnn_cuda_backend_create(&o, &be) != CNN_OK) fatal("algo: create");
    t->gpu = be;
    cnn_conv2d cv = conv_of(&algo_case);
    int64_t nx = (int64_t)cv.n * cv.h * cv.w * cv.c, nw = (int64_t)cv.k * 9 * cv.c, ny = (int64_t)cv.n * cv.p * cv.q * cv.k;
    arr x = arr_in(t, nx, true, 7400, -1, 1, 0), w = arr_in(t, nw, true, 7401, -0.5f, 0.5f, 0);
    arr scale = arr_in(t, cv.k, false, 7402, 0.5f, 1.5f, 0), shift = arr_in(t, cv.k, false, 7403, -0.5f, 0.5f, 0);
    arr res = arr_in(t, ny, true, 7404, -1, 1, 0), y = arr_out(t, ny, true, 0);
    double *ry = dalloc(ny);
    conv_ref_fprop(&cv, x.h, w.h, scale.h, shift.h, res.h, true, ry);
    cnn_epilogue eg = {.scale = scale.g.p, .shift = shift.g.p, .residual = res.g.p, .relu = true};
    cnn_cuda_stats s0, s1;
    cnn_cuda_stats_get(be, &s0);
    expect_ok(be->conv2d_fprop(be, &cv, &eg, x.g.p, w.g.p, y.g.p), name);
    cnn_cuda_stats_get(be, &s1);
    *launches = s1.launches - s0.launches, *tuned = be->n_tuned;
    if (t->cpu) {
        cnn_epilogue ec = {.scale = scale.c, .shift = shift.c, .residual = res.c, .relu = true};
        cpu_ok(t, t->cpu->conv2d_fprop(t->cpu, &cv, &ec, x.c, w.c, y.c), name);
    }
    layout ly = {"NPQK", {cv.n, cv.p, cv.q, cv.k}};
    arr *in[] = {&x, &w, &scale, &shift, &res};
    verify(t, name, &y, ry, &ly, in, 5);
    free(ry);
    arr_free(t, &x), arr_free(t, &w), arr_free(t, &scale), arr_free(t, &shift), arr_free(t, &res), arr_free(t, &y);
    cnn_backend_destroy(be);
    t->gpu = saved;
}

/* the cache of dir `from` with the algo line set to cfg appended, in a new directory `to` */
static bool algo_cache_with(const char *from, const char *to, int cfg) {
    char src[1200], dst[1200], line[512];
    if (!tune_file(from, src, sizeof src)) return false;
    snprintf(dst, sizeof dst, "%s/%s", to, strrchr(src, '/') + 1);
    FILE *f = fopen(src, "r"), *g = fopen(dst, "w");
    bool ok = f && g;
    while (ok && fgets(line, sizeof line, f)) fputs(line, g);
    if (ok) fprintf(g, ALGO_KEY "%d|1|0.01000\n", cfg);
    if (f) fclose(f);
    if (g) ok = fclose(g) == 0 && ok;
    return ok;
}

static void g_conv_algo(ctx *t) {
    char d1[] = "/tmp/cnn-algo-XXXXXX", d2[] = "/tmp/cnn-algo-XXXXXX", d3[] = "/tmp/cnn-algo-XXXXXX";
    if (!mkdtemp(d1) || !mkdtemp(d2) || !mkdtemp(d3)) {
        check(false, "conv_algo.mkdtemp", "%s", strerror(errno));
        return;
    }
    long launches;
    int tuned;
    /* empty cache: the choice is timed (with each side's own config) and stored */
    algo_run(t, d1, "conv_algo.tuned.f32", &launches, &tuned);
    char path[1200], line[512];
    int cfg = -1;
    FILE *f = tune_file(d1, path, sizeof path) ? fopen(path, "r") : NULL;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, ALGO_KEY, strlen(ALGO_KEY)) == 0) cfg = atoi(line + strlen(ALGO_KEY));
    if (f) fclose(f);
    check(tuned >= 2 && (cfg == 0 || cfg == 1), "conv_algo.timed_and_cached",
          "%d shapes tuned, cached choice %d (%s)", tuned, cfg, f ? path : "no tuning file");
    /* a cached choice, either way, is obeyed and nothing is tuned */
    for (int c = 0; c < 2; c++) {
        const char *dir = c ? d3 : d2;
        char name[64];
        snprintf(name, sizeof name, "conv_algo.cached_%s.f32", c ? "winograd" : "direct");
        if (!algo_cache_with(d1, dir, c)) {
            check(false, name, "cannot write the tuning cache in %s", dir);
            continue;
        }
        algo_run(t, dir, name, &launches, &tuned);
        snprintf(name, sizeof name, "conv_algo.cached_%s_obeyed", c ? "winograd" : "direct");
        check(tuned == 0 && (c ? launches == 19 : launches >= 1 && launches <= 2), name, "%ld launches, %d tuned",
              launches, tuned);
    }
    rm_dir(d1), rm_dir(d2), rm_dir(d3);
}

static void g_cache(ctx *t) {
    char dir[] = "/tmp/cnn-gpu-cache-XXXXXX";
    if (!mkdtemp(dir)) {
        check(false, "cache.mkdtemp", "%s", strerror(errno));
        return;
    }
    cnn_backend_opts o = {.device = "cuda", .act_dtype = t->dt, .cache_dir = dir};
    cnn_backend *be = NULL;
    cnn_cuda_stats s1, s2, s3;
    /* cold: compiles and stores */
    if (cnn_cuda_backend_create(&o, &be) != CNN_OK) fatal("cache: create");
    relu_works(t, be, "cache.cold_run");
    cnn_cuda_stats_get(be, &s1);
    cnn_backend_destroy(be);
    check(s1.compiles >= 1 && s1.disk_stores >= 1 && s1.disk_hits == 0, "cache.cold_compiles_and_stores",
          "compiles %ld, stores %ld, hits %ld", s1.compiles, s1.disk_stores, s1.disk_hits);
    /* warm: loads, compiles nothing */
    if (cnn_cuda_backend_create(&o, &be) != CNN_OK) fatal("cache: create");
    relu_works(t, be, "cache.warm_run");
    cnn_cuda_stats_get(be, &s2);
    cnn_backend_destroy(be);
    check(s2.compiles == 0 && s2.disk_hits >= 1 && s2.disk_rejects == 0, "cache.warm_hits",
          "compiles %ld, hits %ld, rejects %ld", s2.compiles, s2.disk_hits, s2.disk_rejects);
    /* corrupt: detected, rebuilt, rewritten */
    int n = corrupt_cache_files(dir);
    if (cnn_cuda_backend_create(&o, &be) != CNN_OK) fatal("cache: create");
    relu_works(t, be, "cache.run_after_corruption");
    cnn_cuda_stats_get(be, &s3);
    cnn_backend_destroy(be);
    check(n >= 1 && s3.disk_rejects >= 1 && s3.compiles >= 1 && s3.disk_stores >= 1, "cache.corruption_detected_and_rebuilt",
          "%d files corrupted; rejects %ld, compiles %ld, stores %ld", n, s3.disk_rejects, s3.compiles, s3.disk_stores);
    if (cnn_cuda_backend_create(&o, &be) != CNN_OK) fatal("cache: create");
    relu_works(t, be, "cache.run_after_rebuild");
    cnn_cuda_stats_get(be, &s2);
    cnn_backend_destroy(be);
    check(s2.compiles == 0 && s2.disk_rejects == 0, "cache.rebuilt_entry_valid", "compiles %ld, rejects %ld", s2.compiles,
          s2.disk_rejects);
    /* no disk cache at all */
    o.cache_dir = "";
    if (cnn_cuda_backend_create(&o, &be) != CNN_OK) fatal("cache: create");
    relu_works(t, be, "cache.disabled_run");
    cnn_cuda_stats_get(be, &s2);
    cnn_backend_destroy(be);
    check(s2.disk_hits == 0 && s2.disk_stores == 0, "cache.disabled", "hits %ld, stores %ld", s2.disk_hits, s2.disk_stores);
    rm_dir(dir);
}

/* the tuning cache's keys in dir that start with prefix (tune.c: one line per tuned shape, its key first) */
static int tune_keys(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, "tune-", 5) != 0) continue;
        char p[1200], line[512];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        FILE *f = fopen(p, "r");
        while (f && fgets(line, sizeof line, f)) n += strncmp(line, prefix, strlen(prefix)) == 0;
        if (f) fclose(f);
    }
    if (d) closedir(d);
    return n;
}

/* Under --tune fast a strided dgrad times its ways (the phases in place, through blocks, grouped) with each phase
 * on the heuristic's tile: the phases' own tuning compiled a third of a cold start's programs (perf-log step 109).
 * The ways' key is tuned, no phase's ("dgrad_phase ..." in place, "fprop ..." of a phase's shape through blocks),
 * and dx matches float64. */
static void dry_run_strided_dgrad(ctx *t, cnn_backend *be, const char *dir) {
    const conv_case cc = {3, 32, 11, 9, 64, 3, 3, 2, 2, 1, 1};
    cnn_conv2d cv = conv_of(&cc);
    int64_t nx = (int64_t)cv.n * cv.h * cv.w * cv.c, nw = (int64_t)cv.k * 9 * cv.c, ny = (int64_t)cv.n * cv.p * cv.q * cv.k;
    arr dy = arr_in(t, ny, true, 7510, -1, 1, 0), w = arr_in(t, nw, true, 7511, -0.5f, 0.5f, 0);
    arr dx = arr_in(t, nx, true, 7512, -1, 1, 0);
    double *rdx = dalloc(nx);
    for (int64_t i = 0; i < nx; i++) rdx[i] = dx.h[i];
    conv_ref_dgrad(&cv, dy.h, w.h, rdx);
    const int fprop0 = tune_keys(dir, "fprop "), ways0 = tune_keys(dir, "dgrad_phases ");
    char name[96];
    snprintf(name, sizeof name, "dry_run.strided_dgrad.%s", t->dts);
    expect_ok(be->conv2d_dgrad(be, &cv, dy.g.p, w.g.p, dx.g.p, true), name);
    if (t->cpu) cpu_ok(t, t->cpu->conv2d_dgrad(t->cpu, &cv, dy.c, w.c, dx.c, true), name);
    const int fprop1 = tune_keys(dir, "fprop "), ways1 = tune_keys(dir, "dgrad_phases "),
              phase1 = tune_keys(dir, "dgrad_phase ");
    snprintf(name, sizeof name, "dry_run.strided_dgrad.ways_tuned_not_phases.%s", t->dts);
    check(ways1 == ways0 + 1 && phase1 == 0 && fprop1 == fprop0, name,
          "%d ways keys tuned, %d phase keys, %d forward keys", ways1 - ways0, phase1, fprop1 - fprop0);
    layout ly = {"NHWC", {cv.n, cv.h, cv.w, cv.c}};
    arr *in[] = {&dy, &w};
    snprintf(name, sizeof name, "dry_run.strided_dgrad.dx.%s", t->dts);
    verify(t, name, &dx, rdx, &ly, in, 2);
    free(rdx);
    arr_free(t, &dy), arr_free(t, &w), arr_free(t, &dx);
}

/* ---- dry runs (backend.h dry_run_begin, nvrtc.c) -----------------------------------------------------------
 * On an empty kernel cache, a tuned conv (the fast rows; residual and ReLU) and a ReLU issued in a dry run leave
 * their outputs poisoned and count no launch, and the dry run's end compiles their programs, the tuning's
 * candidates included, in one batch; the same calls then run for real, compile nothing more, tune the conv, and
 * match float64. */
static void g_dry_run(ctx *t) {
    char dir[] = "/tmp/cnn-dry-XXXXXX";
    if (!mkdtemp(dir)) {
        check(false, "dry_run.mkdtemp", "%s", strerror(errno));
        return;
    }
    cnn_backend_opts o = {.device = "cuda", .act_dtype = t->dt, .allow_tf32 = t->tf32, .cache_dir = dir,
                          .tune = CNN_TUNE_FAST};
    cnn_backend *be = NULL, *saved = t->gpu;
    if (cnn_cuda_backend_create(&o, &be) != CNN_OK) fatal("dry_run: create");
    t->gpu = be;
    const conv_case cc = {3, 32, 11, 9, 64, 3, 3, 1, 1, 1, 1};
    cnn_conv2d cv = conv_of(&cc);
    int64_t nx = (int64_t)cv.n * cv.h * cv.w * cv.c, nw = (int64_t)cv.k * 9 * cv.c, ny = (int64_t)cv.n * cv.p * cv.q * cv.k;
    arr x = arr_in(t, nx, true, 7500, -1, 1, 0), w = arr_in(t, nw, true, 7501, -0.5f, 0.5f, 0);
    arr res = arr_in(t, ny, true, 7502, -1, 1, 0), y = arr_out(t, ny, true, 0), r = arr_out(t, nx, true, 0);
    double *ry = dalloc(ny), *rr = dalloc(nx);
    conv_ref_fprop(&cv, x.h, w.h, NULL, NULL, res.h, true, ry);
    for (int64_t i = 0; i < nx; i++) rr[i] = x.h[i] > 0 ? x.h[i] : 0;
    cnn_epilogue eg = {.residual = res.g.p, .relu = true};
    char name[96];
    snprintf(name, sizeof name, "dry_run.%s", t->dts);
    cnn_cuda_stats s0, s1, s2;
    cnn_cuda_stats_get(be, &s0);
    expect_ok(be->dry_run_begin(be), name);
    expect_ok(be->conv2d_fprop(be, &cv, &eg, x.g.p, w.g.p, y.g.p), name);
    expect_ok(be->relu_forward(be, nx, x.g.p, r.g.p), name);
    expect_ok(be->dry_run_end(be), name);
    cnn_cuda_stats_get(be, &s1);
    float *gy = arr_gpu(t, &y), *gr = arr_gpu(t, &r);
    int64_t written = 0;
    for (int64_t i = 0; i < ny; i++) written += !isnan(gy[i]);
    for (int64_t i = 0; i < nx; i++) written += !isnan(gr[i]);
    free(gy), free(gr);
    check(written == 0 && s1.launches == s0.launches, "dry_run.launches_nothing",
          "%s: %lld output values written, %ld launches", t->dts, (long long)written, s1.launches - s0.launches);
    check(s1.compiles - s0.compiles >= 3 && s1.lazy_compiles == s0.lazy_compiles && be->n_tuned == 0,
          "dry_run.compiles_in_one_batch", "%s: %ld compiled at the end, %ld of them alone, %d shapes tuned", t->dts,
          s1.compiles - s0.compiles, s1.lazy_compiles - s0.lazy_compiles, be->n_tuned);
    expect_ok(be->conv2d_fprop(be, &cv, &eg, x.g.p, w.g.p, y.g.p), name);
    expect_ok(be->relu_forward(be, nx, x.g.p, r.g.p), name);
    cnn_cuda_stats_get(be, &s2);
    check(s2.compiles == s1.compiles && s2.launches > s1.launches && be->n_tuned == 1, "dry_run.then_nothing_to_compile",
          "%s: %ld compiled in the real run, %ld launches, %d shapes tuned", t->dts, s2.compiles - s1.compiles,
          s2.launches - s1.launches, be->n_tuned);
    if (t->cpu) {
        cnn_epilogue ec = {.residual = res.c, .relu = true};
        cpu_ok(t, t->cpu->conv2d_fprop(t->cpu, &cv, &ec, x.c, w.c, y.c), name);
        cpu_ok(t, t->cpu->relu_forward(t->cpu, nx, x.c, r.c), name);
    }
    layout ly = {"NPQK", {cv.n, cv.p, cv.q, cv.k}};
    arr *in[] = {&x, &w, &res};
    snprintf(name, sizeof name, "dry_run.conv_after.%s", t->dts);
    verify(t, name, &y, ry, &ly, in, 3);
    snprintf(name, sizeof name, "dry_run.relu_after.%s", t->dts);
    verify(t, name, &r, rr, NULL, in, 1);
    free(ry), free(rr);
    arr_free(t, &x), arr_free(t, &w), arr_free(t, &res), arr_free(t, &y), arr_free(t, &r);
    dry_run_strided_dgrad(t, be, dir);
    cnn_backend_destroy(be);
    t->gpu = saved;
    rm_dir(dir);
}

static void g_misc(ctx *t) {
    cnn_backend *be = t->gpu;
    char name[64];
    /* timing */
    arr x = arr_in(t, 1 << 20, true, 9200, -1, 1, 0), y = arr_out(t, 1 << 20, true, 0);
    expect_ok(be->relu_forward(be, 1 << 20, x.g.p, y.g.p), "misc.warmup");
    double ms = -1;
    cnn_status st = be->time_begin(be);
    for (int i = 0; i < 10 && st == CNN_OK; i++) st = be->relu_forward(be, 1 << 20, x.g.p, y.g.p);
    cnn_status st2 = be->time_end(be, &ms);
    snprintf(name, sizeof name, "misc.timing.%s", t->dts);
    check(st == CNN_OK && st2 == CNN_OK && ms > 0 && ms < 10000, name, "10 relu of 1M elements: %.3f ms", ms);
    /* time_end without time_begin */
    check(be->time_end(be, &ms) == CNN_E_INVALID, "misc.time_end_alone", NULL);
    cnn_error_clear();
    /* zero, copy, free(NULL) */
    be->free(be, NULL);
    expect_ok(be->zero(be, y.g.p, y.g.bytes), "misc.zero");
    float *g = arr_gpu(t, &y);
    int nz = 0;
    for (int i = 0; i < 1 << 20; i++) nz += g[i] != 0.0f;
    free(g);
    check(nz == 0 && buf_guard_damage(&y.g) == 0, "misc.zero", "%d nonzero", nz);
    expect_ok(be->copy(be, y.g.p, x.g.p, x.g.bytes), "misc.copy");
    unsigned char *bx = malloc(x.g.bytes), *by = malloc(y.g.bytes);
    buf_get(&x.g, bx);
    buf_get(&y.g, by);
    check(memcmp(bx, by, x.g.bytes) == 0 && buf_guard_damage(&y.g) == 0, "misc.copy", NULL);
    free(bx), free(by);
    check(be->peak_bytes(be) > 0, "misc.peak_bytes", "%zu", be->peak_bytes(be));
    snprintf(name, sizeof name, "misc.device.%s", t->dts);
    check(strcmp(be->name, "cuda") == 0 && be->device_name[0] && be->act_dtype == t->dt && be->deterministic, name,
          "%s on %s (%s), cache %s", be->name, be->device_name, cnn_cuda_arch(be), cnn_cuda_cache_dir(be));
    arr_free(t, &x), arr_free(t, &y);
    /* an unsupported dtype is refused cleanly */
    cnn_backend_opts o = {.device = "cuda", .act_dtype = CNN_DTYPE_F64};
    cnn_backend *bad = NULL;
    check(cnn_cuda_backend_create(&o, &bad) == CNN_E_UNSUPPORTED && bad == NULL, "misc.f64_refused", "%s", cnn_error_msg());
    cnn_error_clear();
    o.act_dtype = CNN_DTYPE_F32;
    o.gpu_index = 1000;
    check(cnn_cuda_backend_create(&o, &bad) == CNN_E_DEVICE && bad == NULL, "misc.bad_gpu_index", "%s", cnn_error_msg());
    cnn_error_clear();
}

/* ---- driver --------------------------------------------------------------------------------------------- */

typedef struct group {
    const char *name;
    void (*fn)(ctx *t);
    bool per_dtype; /* else: once, with F32 */
    bool tf32;      /* per_dtype, and also with F32 in TF32 */
} group;

static const group groups[] = {
    {"convert", g_convert, true, false},   {"pointwise", g_pointwise, true, false},
    {"dropout", g_dropout, true, false},   {"flatten", g_flatten, true, false},
    {"channel_sum", g_channel_sum, true, false}, {"bn", g_bn, true, false},
    {"scale_shift", g_scale_shift, true, false}, {"pool", g_pool, true, false},
    {"bn_pool", g_bn_pool, true, false},
    {"bn_conv_sums", g_bn_conv_sums, true, false},
    {"conv", g_conv, true, false},         {"conv_configs", g_conv_configs, true, false},
    {"conv_fast", g_conv_fast, true, true},    {"conv_first", g_conv_first, true, false},
    {"conv_pair", g_conv_pair, true, false},   {"conv_wgrad", g_conv_wgrad, true, false},
    {"conv_wgrad_few", g_conv_wgrad_few, true, false},
    {"conv_dgrad", g_dgrad_fast, true, true},
    {"dgrad_relu", g_dgrad_relu, true, true},
    {"linear", g_linear, true, false},     {"xent", g_xent, true, false},
    {"prep", g_prep, true, false},         {"resample", g_resample, false, false},
    {"jpeg", g_jpeg, false, false},
    {"optim", g_optim, true, false},
    {"nonfinite", g_nonfinite, false, false}, {"guard", g_guard, false, false},
    {"graph", g_graph, true, false},
    {"determinism", g_determinism, true, false}, {"choose_n", g_choose_n, true, true},
    {"bn_ranks", g_bn_ranks, true, false},
    {"oom", g_oom, false, false},
    {"cache", g_cache, true, false},       {"dry_run", g_dry_run, true, false},
    {"misc", g_misc, true, false},
};
#define N_GROUPS ((int)(sizeof groups / sizeof groups[0]))

static const cnn_dtype all_dtypes[] = {CNN_DTYPE_F32, CNN_DTYPE_BF16, CNN_DTYPE_F16, CNN_DTYPE_F32};
static const char *only_dtype;

static void run_group(const group *g) {
    for (int d = 0; d < (g->per_dtype ? 4 : 1); d++) {
        cnn_dtype dt = all_dtypes[d];
        bool tf32 = d == 3; /* the fourth: F32 with TF32 convolutions */
        if (tf32 && !g->tf32) continue;
        const char *dts = tf32 ? "tf32" : dt_str(dt);
        if (only_dtype && g->per_dtype && strcmp(only_dtype, dts) != 0) continue;
        ctx t = {.dt = dt, .dts = dts, .tol = tol_of(dt), .tf32 = tf32};
        n_seen = 0;
        cnn_backend_opts o = {.device = "cuda", .act_dtype = dt, .allow_tf32 = tf32};
        char name[64];
        snprintf(name, sizeof name, "%s.%s", g->name, t.dts);
        cnn_status st = cnn_cuda_backend_create(&o, &t.gpu);
        if (st != CNN_OK) {
            if (st == CNN_E_DEVICE || st == CNN_E_UNSUPPORTED)
                skip(name, cnn_error_msg());
            else
                check(false, name, "cnn_cuda_backend_create: %s", cnn_error_msg());
            cnn_error_clear();
            return;
        }
        st = cnn_cpu_backend_create(1, &t.cpu);
        if (st != CNN_OK) {
            if (!no_cpu_warned) printf("# no CPU backend (%s): comparing against float64 only\n", cnn_error_msg());
            no_cpu_warned = true;
            t.cpu = NULL;
            cnn_error_clear();
        }
        printf("# %s on %s (%s)\n", name, t.gpu->device_name, cnn_cuda_arch(t.gpu));
        fflush(stdout);
        g->fn(&t);
        cnn_status sy = t.gpu->sync(t.gpu);
        if (sy != CNN_OK) check(false, name, "the device is in an error state after the group: %s", cnn_error_msg());
        cnn_cuda_stats s;
        cnn_cuda_stats_get(t.gpu, &s);
        printf("# %s: %ld launches, %ld compiles, %ld cache hits, %ld rejected, peak %zu bytes\n", name, s.launches,
               s.compiles, s.disk_hits, s.disk_rejects, t.gpu->peak_bytes(t.gpu));
        cnn_backend_destroy(t.gpu);
        if (t.cpu) cnn_backend_destroy(t.cpu);
    }
}

int main(int argc, char **argv) {
    bool fork_groups = true;
    const char *sel[64];
    int nsel = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--no-fork") == 0)
            fork_groups = false;
        else if (strcmp(argv[i], "--dtype") == 0 && i + 1 < argc)
            only_dtype = argv[++i];
        else if (strcmp(argv[i], "--list-conv") == 0) { /* the conv rows: index, flag word, name (no GPU needed) */
            for (int v = 0; v < cnn_cuda_conv_config_count(); v++)
                printf("%2d  0x%06x  %s\n", v, cnn_cuda_conv_config_flags(v), cnn_cuda_conv_config_name(v));
            return 0;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: %s [--no-fork] [--dtype f32|bf16|f16|tf32] [--list-conv] [group...]\n", argv[0]);
            return 2;
        } else if (nsel < 64)
            sel[nsel++] = argv[i];
    }
    for (int i = 0; i < nsel; i++) {
        bool known = false;
        for (int g = 0; g < N_GROUPS; g++) known |= strcmp(sel[i], groups[g].name) == 0;
        if (!known) {
            fprintf(stderr, "unknown group '%s'\n", sel[i]);
            return 2;
        }
    }
    const char *q = getenv("CNN_TEST_QUICK");
    quick = q && q[0] && strcmp(q, "0") != 0;
    row_only = getenv("CNN_TEST_CONV_ROW");
    const char *to = getenv("CNN_TEST_TIMEOUT");
    int timeout = to ? atoi(to) : 900;
    /* counters shared with the children */
    int *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) return 1;
    for (int gi = 0; gi < N_GROUPS; gi++) {
        const group *g = &groups[gi];
        bool want = nsel == 0;
        for (int i = 0; i < nsel; i++) want |= strcmp(sel[i], g->name) == 0;
        if (!want) continue;
        if (!fork_groups) {
            run_group(g);
            continue;
        }
        fflush(stdout);
        double t0 = cnn_now();
        pid_t pid = fork();
        if (pid == 0) {
            /* a hung group is stopped by its CPU seconds (SIGXCPU), which a busy machine does not inflate; the wall
             * clock only far beyond them (a GPU hang that sleeps in the driver) */
            struct rlimit rl = {.rlim_cur = (rlim_t)timeout, .rlim_max = (rlim_t)timeout + 5};
            setrlimit(RLIMIT_CPU, &rl);
            alarm((unsigned)timeout * 10);
            test_passed = test_failed = test_skipped = 0;
            run_group(g);
            fflush(stdout);
            __atomic_add_fetch(&shared[0], test_passed, __ATOMIC_SEQ_CST);
            __atomic_add_fetch(&shared[1], test_failed, __ATOMIC_SEQ_CST);
            __atomic_add_fetch(&shared[2], test_skipped, __ATOMIC_SEQ_CST);
            _exit(0);
        }
        int status = 0;
        if (pid < 0 || waitpid(pid, &status, 0) < 0) {
            check(false, g->name, "fork/wait failed");
            continue;
        }
        if (WIFSIGNALED(status))
            check(false, g->name, "the group's process died of signal %d (%s)%s", WTERMSIG(status), strsignal(WTERMSIG(status)),
                  WTERMSIG(status) == SIGALRM || WTERMSIG(status) == SIGXCPU ? " -- timed out" : "");
        else if (WEXITSTATUS(status) != 0)
            check(false, g->name, "the group's process exited with status %d", WEXITSTATUS(status));
        printf("# group %s: %.1f s\n", g->name, cnn_now() - t0);
    }
    test_passed += shared[0];
    test_failed += shared[1];
    test_skipped += shared[2];
    return test_finish();
}
