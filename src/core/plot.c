/* plot.c — training curves as an SVG: loss, accuracy and learning rate against the step, read from the
 * metrics.jsonl of one or more runs (train.c writes one record per step and one per evaluation), drawn side by
 * side in three panels, one colour per run. Per-step series are averaged into at most 600 bins per run. */
#include "cnn/io.h"
#include "cnn/train.h"
#include "json.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BINS 600
#define MAX_METRICS_BYTES ((size_t)1 << 30)

typedef struct series {
    double *x, *y;
    int n, cap;
} series;

typedef struct run {
    const char *dir;
    series loss, acc, lr, eval_loss, eval_top1;
} run;

static bool push(series *s, double x, double y) {
    if (!isfinite(x) || !isfinite(y)) return true;
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 256;
        double *nx = realloc(s->x, sizeof *nx * (size_t)cap);
        if (!nx) return false;
        s->x = nx;
        double *ny = realloc(s->y, sizeof *ny * (size_t)cap);
        if (!ny) return false;
        s->y = ny;
        s->cap = cap;
    }
    s->x[s->n] = x;
    s->y[s->n++] = y;
    return true;
}

static void series_free(series *s) {
    free(s->x);
    free(s->y);
}

static double num(const cnn_json *v) {
    if (!v) return NAN;
    if (v->type == CNN_JSON_INT) return v->neg ? -(double)v->u : (double)v->u;
    if (v->type == CNN_JSON_NUMBER) return strtod(v->str, NULL);
    return NAN;
}

/* Average consecutive points into at most MAX_BINS bins (the per-step series are noisy and long). */
static void bin(series *s) {
    if (s->n <= MAX_BINS) return;
    int per = (s->n + MAX_BINS - 1) / MAX_BINS, k = 0;
    for (int i = 0; i < s->n; i += per, k++) {
        double sx = 0, sy = 0;
        int m = 0;
        for (int j = i; j < s->n && j < i + per; j++, m++) sx += s->x[j], sy += s->y[j];
        s->x[k] = sx / m;
        s->y[k] = sy / m;
    }
    s->n = k;
}

static cnn_status read_run(run *r) {
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", r->dir);
    uint8_t *buf;
    size_t len;
    CNN_TRY(cnn_read_file(path, MAX_METRICS_BYTES, &buf, &len));
    cnn_status st = CNN_OK;
    size_t pos = 0;
    int line = 0, records = 0;
    while (pos < len && st == CNN_OK) {
        size_t e = pos;
        while (e < len && buf[e] != '\n') e++;
        line++;
        if (e > pos) {
            cnn_json *root;
            cnn_json_limits lim = {.max_depth = 4, .max_values = 256};
            if (cnn_json_parse((const char *)buf + pos, e - pos, &lim, &root) != CNN_OK) {
                /* a torn last line (a run killed while writing) is skipped; anything else is an error */
                if (e < len) st = cnn_error_prefix(CNN_E_FORMAT, "%s: line %d", path, line);
            } else {
                double step = num(cnn_json_get(root, "step"));
                bool ok = true;
                if (cnn_json_get(root, "loss")) {
                    ok = push(&r->loss, step, num(cnn_json_get(root, "loss"))) &&
                         push(&r->acc, step, 100 * num(cnn_json_get(root, "acc"))) &&
                         push(&r->lr, step, num(cnn_json_get(root, "lr")));
                    records++;
                }
                if (cnn_json_get(root, "eval_top1"))
                    ok = ok && push(&r->eval_loss, step, num(cnn_json_get(root, "eval_loss"))) &&
                         push(&r->eval_top1, step, 100 * num(cnn_json_get(root, "eval_top1")));
                cnn_json_free(root);
                if (!ok) st = cnn_fail(CNN_E_OOM, "out of memory reading %s", path);
            }
        }
        pos = e + 1;
    }
    free(buf);
    if (st == CNN_OK && records == 0) st = cnn_fail(CNN_E_FORMAT, "%s: no step records", path);
    bin(&r->loss);
    bin(&r->acc);
    bin(&r->lr);
    return st;
}

/* ---- SVG ---------------------------------------------------------------------------------------------------- */

typedef struct svg {
    char *buf;
    size_t len, cap;
    bool oom;
} svg;

static void out(svg *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out(svg *s, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(s->buf ? s->buf + s->len : NULL, s->buf ? s->cap - s->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) return;
        if (s->buf && s->len + (size_t)n < s->cap) {
            s->len += (size_t)n;
            return;
        }
        size_t cap = (s->cap + (size_t)n + 1) * 2;
        char *t = realloc(s->buf, cap);
        if (!t) {
            s->oom = true;
            return;
        }
        s->buf = t;
        s->cap = cap;
    }
}

static void xml_text(svg *s, const char *t) {
    for (; *t; t++) {
        if (*t == '<') out(s, "&lt;");
        else if (*t == '>') out(s, "&gt;");
        else if (*t == '&') out(s, "&amp;");
        else out(s, "%c", (unsigned char)*t < 32 ? ' ' : *t);
    }
}

static const char *const colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};

/* A step of 1, 2 or 5 times a power of ten giving about 5 ticks over [lo, hi]. */
static double tick_step(double lo, double hi) {
    double span = hi - lo, raw = span / 5, p = pow(10, floor(log10(raw)));
    double m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

typedef struct panel {
    double x0, y0, w, h;          /* pixel box of the plot area */
    double xlo, xhi, ylo, yhi;    /* data range */
} panel;

static double px(const panel *p, double x) { return p->x0 + (x - p->xlo) / (p->xhi - p->xlo) * p->w; }
static double py(const panel *p, double y) { return p->y0 + p->h - (y - p->ylo) / (p->yhi - p->ylo) * p->h; }

static void range(const series *const *ss, int n, double *lo, double *hi) {
    *lo = INFINITY;
    *hi = -INFINITY;
    for (int k = 0; k < n; k++)
        for (int i = 0; i < ss[k]->n; i++) {
            *lo = fmin(*lo, ss[k]->y[i]);
            *hi = fmax(*hi, ss[k]->y[i]);
        }
    if (!isfinite(*lo)) *lo = 0, *hi = 1;
    if (*hi - *lo < 1e-12) *hi = *lo + (fabs(*lo) > 0 ? fabs(*lo) * 0.1 : 1);
}

static void axes(svg *s, const panel *p, const char *title) {
    out(s, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='none' stroke='#999'/>\n", p->x0, p->y0, p->w, p->h);
    out(s, "<text x='%.1f' y='%.1f' text-anchor='middle' font-weight='bold'>%s</text>\n", p->x0 + p->w / 2, p->y0 - 8,
        title);
    double st = tick_step(p->ylo, p->yhi);
    for (double v = ceil(p->ylo / st) * st; v <= p->yhi + st * 1e-9; v += st) {
        out(s, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#eee'/>\n", p->x0, py(p, v), p->x0 + p->w, py(p, v));
        out(s, "<text x='%.1f' y='%.1f' text-anchor='end' font-size='11'>%g</text>\n", p->x0 - 4, py(p, v) + 4,
            fabs(v) < st * 1e-6 ? 0.0 : v);
    }
    double sx = tick_step(p->xlo, p->xhi);
    for (double v = ceil(p->xlo / sx) * sx; v <= p->xhi + sx * 1e-9; v += sx)
        out(s, "<text x='%.1f' y='%.1f' text-anchor='middle' font-size='11'>%g</text>\n", px(p, v), p->y0 + p->h + 15, v);
    out(s, "<text x='%.1f' y='%.1f' text-anchor='middle' font-size='11'>step</text>\n", p->x0 + p->w / 2,
        p->y0 + p->h + 30);
}

static void line(svg *s, const panel *p, const series *se, const char *colour, const char *extra) {
    if (se->n == 0) return;
    out(s, "<polyline fill='none' stroke='%s' stroke-width='1.5' %s points='", colour, extra);
    for (int i = 0; i < se->n; i++) out(s, "%.1f,%.1f ", px(p, se->x[i]), py(p, se->y[i]));
    out(s, "'/>\n");
}

static void dots(svg *s, const panel *p, const series *se, const char *colour) {
    for (int i = 0; i < se->n; i++)
        out(s, "<circle cx='%.1f' cy='%.1f' r='3' fill='%s'/>\n", px(p, se->x[i]), py(p, se->y[i]), colour);
}

cnn_status cnn_plot_runs(const char *const *dirs, int n, const char *out_path) {
    if (n < 1) return cnn_fail(CNN_E_INVALID, "no run to plot");
    run *runs = calloc((size_t)n, sizeof *runs);
    if (!runs) return cnn_fail(CNN_E_OOM, "out of memory");
    cnn_status st = CNN_OK;
    for (int i = 0; i < n && st == CNN_OK; i++) {
        runs[i].dir = dirs[i];
        st = read_run(&runs[i]);
    }
    svg s = {0};
    if (st == CNN_OK) {
        const double W = 1260, H = 330 + 18.0 * n, pw = 340, ph = 220, top = 40, left = 60, gap = 80;
        out(&s, "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%.0f' font-family='sans-serif' "
                "font-size='13'>\n<rect width='100%%' height='100%%' fill='white'/>\n", W, H);
        const char *titles[3] = {"loss (train: line; eval: dots)", "accuracy % (train: line; eval top-1: dots)",
                                 "learning rate"};
        for (int k = 0; k < 3; k++) {
            const series **ys = calloc((size_t)n * 2, sizeof *ys);
            if (!ys) {
                st = cnn_fail(CNN_E_OOM, "out of memory");
                break;
            }
            int m = 0;
            double xlo = INFINITY, xhi = -INFINITY;
            for (int i = 0; i < n; i++) {
                run *r = &runs[i];
                const series *a = k == 0 ? &r->loss : k == 1 ? &r->acc : &r->lr;
                const series *b = k == 0 ? &r->eval_loss : k == 1 ? &r->eval_top1 : NULL;
                ys[m++] = a;
                if (b) ys[m++] = b;
                for (int j = 0; j < a->n; j++) xlo = fmin(xlo, a->x[j]), xhi = fmax(xhi, a->x[j]);
            }
            panel p = {.x0 = left + k * (pw + gap), .y0 = top, .w = pw, .h = ph, .xlo = xlo, .xhi = xhi};
            if (!(p.xhi > p.xlo)) p.xhi = p.xlo + 1;
            range(ys, m, &p.ylo, &p.yhi);
            if (k == 1) p.ylo = fmax(0, p.ylo), p.yhi = fmin(100, fmax(p.yhi, p.ylo + 1));
            if (k != 1) p.ylo = fmin(p.ylo, 0);
            axes(&s, &p, titles[k]);
            for (int i = 0; i < n; i++) {
                const char *c = colours[i % (sizeof colours / sizeof colours[0])];
                run *r = &runs[i];
                line(&s, &p, k == 0 ? &r->loss : k == 1 ? &r->acc : &r->lr, c, k < 2 ? "stroke-opacity='0.8'" : "");
                if (k == 0) dots(&s, &p, &r->eval_loss, c);
                if (k == 1) dots(&s, &p, &r->eval_top1, c);
            }
            free(ys);
        }
        for (int i = 0; i < n; i++) {
            run *r = &runs[i];
            double y = top + ph + 60 + 18.0 * i;
            out(&s, "<rect x='%.0f' y='%.0f' width='14' height='10' fill='%s'/>\n<text x='%.0f' y='%.0f'>", left, y - 9,
                colours[i % (sizeof colours / sizeof colours[0])], left + 20, y);
            xml_text(&s, r->dir);
            if (r->eval_top1.n)
                out(&s, " — last eval top-1 %.2f%% at step %.0f", r->eval_top1.y[r->eval_top1.n - 1],
                    r->eval_top1.x[r->eval_top1.n - 1]);
            out(&s, " — final train loss %.4f</text>\n", r->loss.n ? r->loss.y[r->loss.n - 1] : NAN);
        }
        out(&s, "</svg>\n");
        if (s.oom && st == CNN_OK) st = cnn_fail(CNN_E_OOM, "out of memory writing %s", out_path);
    }
    if (st == CNN_OK) {
        cnn_afile f;
        st = cnn_afile_open(&f, out_path);
        if (st == CNN_OK) st = cnn_afile_write(&f, s.buf, s.len);
        if (st == CNN_OK) st = cnn_afile_commit(&f);
        else cnn_afile_discard(&f);
    }
    free(s.buf);
    for (int i = 0; i < n; i++) {
        series_free(&runs[i].loss);
        series_free(&runs[i].acc);
        series_free(&runs[i].lr);
        series_free(&runs[i].eval_loss);
        series_free(&runs[i].eval_top1);
    }
    free(runs);
    return st;
}
