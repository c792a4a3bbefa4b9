/* bench_passes.c — the per-pass part of `cnn bench --mode train --layers`: every distinct convolution of a model,
 * its fprop, dgrad and wgrad each timed alone through the backend, as bench/train_passes.py times cuDNN's three
 * passes for the same shapes.
 *
 * A pass runs `warmup` times untimed (kernel compilation and tuning happen there), then `repeat` times back to back
 * with a timing mark after each; its time is the median gap. Operands hold random values (never zeros: the
 * tensor cores' speed can depend on the data) in buffers sized once for the largest problem. fprop runs with no
 * epilogue and dgrad overwrites dx, as the training step's first writer does. A shape whose every convolution reads
 * the images has no dgrad in a training step (the input needs no gradient): its dgrad is not timed (ms 0).
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the convolution of node nd for a batch (its input's C, H, W: the previous node's output or the image) */
static void conv_of_node(const cnn_net *net, const cnn_node *nd, int batch, cnn_conv2d *cv) {
    int c = net->in_c, h = net->in_h, w = net->in_w;
    if (nd->in[0] >= 0) c = net->nodes[nd->in[0]].c, h = net->nodes[nd->in[0]].h, w = net->nodes[nd->in[0]].w;
    bool ok = cnn_conv2d_init(cv, batch, c, h, w, nd->k, nd->r, nd->s, nd->stride, nd->pad);
    CNN_ASSERT(ok);
}

static bool same_conv(const cnn_conv2d *a, const cnn_conv2d *b) {
    return a->c == b->c && a->h == b->h && a->w == b->w && a->k == b->k && a->r == b->r && a->s == b->s &&
           a->stride_h == b->stride_h && a->pad_h == b->pad_h;
}

typedef struct pass_bufs {
    void *x, *w, *y, *dx;
    float *dw;
} pass_bufs;

static cnn_status run_pass(cnn_backend *be, const bench_pass *p, int pass, const pass_bufs *b) {
    switch (pass) {
    case 0: return be->conv2d_fprop(be, &p->cv, NULL, b->x, b->w, b->y);
    case 1: return be->conv2d_dgrad(be, &p->cv, b->y, b->w, b->dx, false);
    default: return be->conv2d_wgrad(be, &p->cv, b->x, b->y, b->dw);
    }
}

/* median of `repeat` back-to-back runs of one pass, after `warmup` untimed ones */
static cnn_status time_pass(cnn_backend *be, const bench_pass *p, int pass, const pass_bufs *b, int warmup,
                            int repeat, double *ms_out) {
    double *ms = calloc((size_t)repeat, sizeof *ms);
    if (!ms) return cnn_fail(CNN_E_OOM, "out of host memory for pass times");
    cnn_status st = CNN_OK;
    for (int it = 0; st == CNN_OK && it < warmup; it++) st = run_pass(be, p, pass, b);
    if (st == CNN_OK) st = be->sync(be);
    for (int base = 0; st == CNN_OK && base < repeat; base += CNN_TIME_MARKS - 1) {
        int chunk = repeat - base < CNN_TIME_MARKS - 1 ? repeat - base : CNN_TIME_MARKS - 1;
        st = be->time_mark(be, 0);
        for (int it = 0; st == CNN_OK && it < chunk; it++) {
            st = run_pass(be, p, pass, b);
            if (st == CNN_OK) st = be->time_mark(be, it + 1);
        }
        for (int it = 0; st == CNN_OK && it < chunk; it++) st = be->time_between(be, it, it + 1, &ms[base + it]);
    }
    if (st == CNN_OK) *ms_out = bench_median(ms, repeat);
    free(ms);
    return st;
}

/* random values in [-1, 1) into count act_dtype elements at dst, through a float32 staging buffer */
static cnn_status fill_random(cnn_backend *be, void *dst, int64_t count, float *stage_dev, float *host, uint64_t seed) {
    for (int64_t i = 0; i < count; i++) {
        uint32_t r[4];
        cnn_philox(seed, 0, (uint64_t)i, r);
        host[i] = 2.0f * cnn_u01(r[0]) - 1.0f;
    }
    CNN_TRY(be->upload(be, stage_dev, host, (size_t)count * 4));
    return be->to_act(be, count, stage_dev, dst);
}

cnn_status bench_conv_passes(cnn_backend *be, const cnn_net *net, int batch, int warmup, int repeat,
                             bench_pass **out, int *n_out) {
    *out = NULL, *n_out = 0;
    bench_pass *ps = calloc((size_t)net->n_nodes, sizeof *ps);
    if (!ps) return cnn_fail(CNN_E_OOM, "out of host memory for the conv passes");
    int np = 0;
    int64_t mx = 0, mw = 0, my = 0;
    for (int i = 0; i < net->n_nodes; i++) {
        if (net->nodes[i].op != CNN_OP_CONV) continue;
        cnn_conv2d cv;
        conv_of_node(net, &net->nodes[i], batch, &cv);
        int j = 0;
        while (j < np && !same_conv(&ps[j].cv, &cv)) j++;
        if (j == np) {
            ps[np++] = (bench_pass){.cv = cv, .dgrad_needed = false};
            int64_t x = (int64_t)cv.n * cv.h * cv.w * cv.c, w = (int64_t)cv.k * cv.r * cv.s * cv.c,
                    y = (int64_t)cv.n * cv.p * cv.q * cv.k;
            mx = x > mx ? x : mx, mw = w > mw ? w : mw, my = y > my ? y : my;
        }
        ps[j].count++;
        ps[j].dgrad_needed |= net->nodes[i].in[0] >= 0;
    }
    const size_t esz = cnn_dtype_size(be->act_dtype);
    int64_t mall = mx > my ? mx : my;
    mall = mw > mall ? mw : mall;
    pass_bufs b = {0};
    float *stage = NULL, *host = malloc((size_t)mall * 4);
    cnn_status st = host ? CNN_OK : cnn_fail(CNN_E_OOM, "out of host memory for the conv passes' operands");
    if (st == CNN_OK) st = be->alloc(be, (size_t)mall * 4, "bench staging", (void **)&stage);
    if (st == CNN_OK) st = be->alloc(be, (size_t)mx * esz, "bench x", &b.x);
    if (st == CNN_OK) st = be->alloc(be, (size_t)mw * esz, "bench w", &b.w);
    if (st == CNN_OK) st = be->alloc(be, (size_t)my * esz, "bench dy", &b.y);
    if (st == CNN_OK) st = be->alloc(be, (size_t)mx * esz, "bench dx", &b.dx);
    if (st == CNN_OK) st = be->alloc(be, (size_t)mw * 4, "bench dw", (void **)&b.dw);
    if (st == CNN_OK) st = fill_random(be, b.x, mx, stage, host, 11);
    if (st == CNN_OK) st = fill_random(be, b.w, mw, stage, host, 12);
    if (st == CNN_OK) st = fill_random(be, b.y, my, stage, host, 13);
    for (int i = 0; st == CNN_OK && i < np; i++) {
        const cnn_conv2d *cv = &ps[i].cv;
        snprintf(ps[i].layer, sizeof ps[i].layer, "%d->%d %dx%d %dx%d/%d", cv->c, cv->k, cv->h, cv->w, cv->r, cv->s,
                 cv->stride_h);
        ps[i].gflop = (double)cnn_conv2d_flops(cv) / 1e9;
        for (int pass = 0; st == CNN_OK && pass < 3; pass++)
            if (pass != 1 || ps[i].dgrad_needed) st = time_pass(be, &ps[i], pass, &b, warmup, repeat, &ps[i].ms[pass]);
        if (st != CNN_OK) st = cnn_error_prefix(st, "conv %s", ps[i].layer);
    }
    void *bufs[] = {stage, b.x, b.w, b.y, b.dx, b.dw};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) be->free(be, bufs[i]);
    free(host);
    if (st != CNN_OK) {
        free(ps);
        return st;
    }
    *out = ps, *n_out = np;
    return CNN_OK;
}

/* the kind of a train step: its op (a BN step's time includes the residual add and ReLU the plan fused into it) */
static void op_kind(const cnn_net *net, int node, char *buf, size_t cap) {
    snprintf(buf, cap, "%s", node < 0 ? "loss" : cnn_op_name(net->nodes[node].op));
}

static void add_op(bench_op_time *ops, int *n, const char *what, bool backward, double ms) {
    int i = 0;
    while (i < *n && !(strcmp(ops[i].what, what) == 0 && ops[i].backward == backward)) i++;
    if (i == *n) {
        if (*n == BENCH_OP_KINDS) return;
        ops[i] = (bench_op_time){.backward = backward};
        snprintf(ops[i].what, sizeof ops[i].what, "%s", what);
        (*n)++;
    }
    ops[i].count++;
    ops[i].ms += ms;
}

cnn_status bench_train_ops(cnn_backend *be, cnn_model *m, int batch, const int64_t *labels, float *mom, int repeat,
                           bench_op_time *ops, int *n_ops) {
    const cnn_net *net = cnn_model_net(m);
    const int S = cnn_model_train_steps(m), K = 2 * S + 1;
    double *t = calloc((size_t)K * repeat, sizeof *t), *col = calloc((size_t)repeat, sizeof *col);
    double *opt = calloc((size_t)repeat, sizeof *opt);
    int *node = calloc((size_t)K, sizeof *node);
    cnn_status st = t && col && opt && node ? CNN_OK : cnn_fail(CNN_E_OOM, "out of host memory for the profile");
    /* the update as cnn_train runs it: the weights' working copies written in the same pass */
    cnn_sgd sgd = {.lr = 1e-4f, .momentum = 0.9f, .weight_decay = 5e-4f, .act_copy = cnn_model_act_weights(m)};
    for (int r = 0; st == CNN_OK && r < repeat; r++) {
        st = cnn_model_profile_train(m, batch, labels, t + (size_t)r * K, node);
        if (st == CNN_OK) st = be->time_mark(be, 0);
        if (st == CNN_OK) st = be->sgd_update(be, &sgd, net->n_trainable, cnn_model_params(m), cnn_model_grads(m), mom, 1.0f);
        if (st == CNN_OK) cnn_model_params_updated(m);
        if (st == CNN_OK) st = be->time_mark(be, 1);
        if (st == CNN_OK) st = be->time_between(be, 0, 1, &opt[r]);
    }
    *n_ops = 0;
    for (int k = 0; st == CNN_OK && k < K; k++) {
        for (int r = 0; r < repeat; r++) col[r] = t[(size_t)r * K + k];
        char what[24];
        op_kind(net, node[k], what, sizeof what);
        const double ms = bench_median(col, repeat);
        add_op(ops, n_ops, what, k > S, ms);
        if (node[k] >= 0) { /* -v: each step, where the sums above come from */
            const cnn_node *nd = &net->nodes[node[k]];
            cnn_log(2, "cnn: train step %s %s (%s, %dx%dx%d): %.4f ms", k > S ? "backward" : "forward", nd->name, what,
                    nd->c, nd->h, nd->w, ms);
        }
    }
    if (st == CNN_OK) add_op(ops, n_ops, "optimizer", true, bench_median(opt, repeat));
    free(t), free(col), free(opt), free(node);
    return st;
}
