/* cmd_bench.c — `cnn bench`: throughput and latency of inference or a training step, llama-bench style.
 *
 * For every (model, batch, dtype) in the lists: build the model, warm up (kernel compilation, tuning, graph
 * capture happen here and are reported as setup time), then time `repeat` runs with the backend's timer
 * (CUDA events on a GPU, a monotonic clock on the CPU) and report the median and spread. Inference runs are
 * issued back to back with a timing mark after each (no host synchronisation in between, as PyTorch's rows
 * and torch.utils.benchmark time them); a training step ends with its loss on the host, so each is timed alone.
 * With --layers (inference), the eval forward is then also run one plan step at a time (eager, no graph) and
 * each step is timed the same way: a per-layer breakdown whose sum can be set against the whole forward. With
 * --layers --mode train, every distinct convolution's fprop, dgrad and wgrad are timed alone instead
 * (bench_passes.c): their sum, weighted by how often each shape occurs, set against the whole step.
 * Output: a markdown table (default), or csv / json (one array) / jsonl (one object per line); the JSON
 * schema is documented in docs/BENCH.md.
 */
#include "bench.h"
#include "cnn/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One step of the eval plan, timed alone. gflop > 0 for conv and linear steps (TFLOP/s reported), else the
 * activation bytes the step reads and writes (GB/s reported). */
typedef struct bench_layer {
    int step;
    char name[2 * CNN_NAME_MAX + 4], kind[12], fused[32], layer[200];
    double ms_median, ms_min, ms_max, gflop, gbyte;
    int runs; /* timed runs (--repeat, or more under --layer-min-ms) */
    double est_ms; /* --layer-min-ms: the median of the 3 runs that set `runs` */
} bench_layer;

typedef struct bench_row {
    char model[32], dtype[8], mode[24], input[24];
    int batch, repeat, warmup;
    int gpus;                /* data-parallel ranks (--gpus): batch is per GPU, images/s and TFLOP/s are totals */
    double ms_median, ms_min, ms_max, ms_p10, ms_p90, setup_s, images_per_s, gflop, tflops;
    double mem_mib;
    bench_layer *layers;     /* --layers: one per eval step */
    int n_layers;
    double layers_ms_sum;    /* sum of the steps' medians */
    bench_pass *passes;      /* --layers --mode train: one per distinct convolution */
    int n_passes;
    double passes_ms[3];     /* sum over the model's convolutions of each pass's median */
    bench_op_time ops[BENCH_OP_KINDS]; /* --layers --mode train: the step by op kind */
    int n_ops;
    cnn_status st;
    char error[256];
} bench_row;

typedef struct bench_stats {
    double median, min, max, p10, p90;
} bench_stats;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median and spread of n > 0 times (sorts ms). */
static bench_stats summarize(double *ms, int n) {
    qsort(ms, (size_t)n, sizeof *ms, cmp_double);
    bench_stats s = {.median = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]),
                     .min = ms[0],
                     .max = ms[n - 1],
                     .p10 = ms[(n - 1) / 10],
                     .p90 = ms[(n - 1) - (n - 1) / 10]};
    return s;
}

double bench_median(double *ms, int n) { return summarize(ms, n).median; }

/* Split "a,b,c" into at most cap entries (modifies s). */
static int split_list(char *s, char **out, int cap) {
    int n = 0;
    for (char *tok = strtok(s, ","); tok && n < cap; tok = strtok(NULL, ",")) out[n++] = tok;
    return n;
}

/* Convolution and linear FLOPs (2 per multiply-add, no bias) of one image: the count PyTorch's side uses. */
static int64_t matmul_flops(const cnn_net *net) {
    int64_t f = 0;
    for (int i = 0; i < net->n_nodes; i++) {
        const cnn_node *nd = &net->nodes[i];
        int c = net->in_c, h = net->in_h, w = net->in_w;
        if (nd->in[0] >= 0) c = net->nodes[nd->in[0]].c, h = net->nodes[nd->in[0]].h, w = net->nodes[nd->in[0]].w;
        if (nd->op == CNN_OP_CONV) f += 2LL * nd->c * nd->h * nd->w * c * nd->r * nd->s;
        if (nd->op == CNN_OP_LINEAR) f += 2LL * nd->c * c * h * w;
    }
    return f;
}

/* Name, kind, shape string and work of eval step s for n images; esz = bytes per activation element. */
static void describe_step(const cnn_model *m, int s, int n, size_t esz, bench_layer *L) {
    const cnn_net *net = cnn_model_net(m);
    cnn_eval_step e = cnn_model_eval_step(m, s);
    const cnn_node *nd = &net->nodes[e.node];
    int c = net->in_c, h = net->in_h, w = net->in_w;
    if (nd->in[0] >= 0) c = net->nodes[nd->in[0]].c, h = net->nodes[nd->in[0]].h, w = net->nodes[nd->in[0]].w;
    double in_el = (double)n * c * h * w, out_el = (double)n * nd->c * nd->h * nd->w;
    memset(L, 0, sizeof *L);
    L->step = s;
    snprintf(L->name, sizeof L->name, "%s", nd->name);
    snprintf(L->fused, sizeof L->fused, "%s%s%s%s%s%s", e.bn >= 0 && e.bn != e.node ? "bn" : "",
             e.bn >= 0 && e.bn != e.node && (e.has_residual || e.relu) ? "+" : "", e.has_residual ? "add" : "",
             e.has_residual && e.relu ? "+" : "", e.relu ? "relu" : "",
             e.pool < 0 ? "" : e.bn >= 0 || e.has_residual || e.relu ? "+maxpool" : "maxpool");
    if (e.pair >= 0) { /* two convs summed (each with its BN), then the ReLU: named and counted as both */
        const cnn_node *pn = &net->nodes[e.pair];
        int pc = net->in_c, ph = net->in_h, pw = net->in_w;
        if (pn->in[0] >= 0) pc = net->nodes[pn->in[0]].c, ph = net->nodes[pn->in[0]].h, pw = net->nodes[pn->in[0]].w;
        snprintf(L->name, sizeof L->name, "%s+%s", pn->name, nd->name);
        snprintf(L->fused, sizeof L->fused, "pair+bn+add%s", e.relu ? "+relu" : "");
        snprintf(L->kind, sizeof L->kind, "conv");
        snprintf(L->layer, sizeof L->layer, "%d->%d %dx%d %dx%d/%d p%d + %d->%d %dx%d %dx%d/%d p%d", pc, pn->k, ph, pw,
                 pn->r, pn->s, pn->stride, pn->pad, c, nd->k, h, w, nd->r, nd->s, nd->stride, nd->pad);
        L->gflop = 2.0 * out_el * ((double)c * nd->r * nd->s + (double)pc * pn->r * pn->s) / 1e9;
        return;
    }
    const char *pool = nd->op == CNN_OP_MAXPOOL ? "max" : "avg";
    switch (nd->op) {
    case CNN_OP_CONV:
        snprintf(L->kind, sizeof L->kind, "conv");
        snprintf(L->layer, sizeof L->layer, "%d->%d %dx%d %dx%d/%d p%d", c, nd->k, h, w, nd->r, nd->s, nd->stride,
                 nd->pad);
        L->gflop = 2.0 * out_el * c * nd->r * nd->s / 1e9;
        break;
    case CNN_OP_LINEAR:
        snprintf(L->kind, sizeof L->kind, "linear");
        snprintf(L->layer, sizeof L->layer, "%d->%d", c * h * w, nd->c);
        L->gflop = 2.0 * out_el * c * h * w / 1e9;
        break;
    case CNN_OP_MAXPOOL:
    case CNN_OP_AVGPOOL:
        snprintf(L->kind, sizeof L->kind, "pool");
        snprintf(L->layer, sizeof L->layer, "%s %d %dx%d %dx%d/%d p%d", pool, c, h, w, nd->r, nd->s, nd->stride,
                 nd->pad);
        L->gbyte = (in_el + out_el) * (double)esz / 1e9;
        break;
    case CNN_OP_ADAPTIVE_AVGPOOL:
        snprintf(L->kind, sizeof L->kind, "pool");
        snprintf(L->layer, sizeof L->layer, "adaptive-avg %d %dx%d->%dx%d", c, h, w, nd->h, nd->w);
        L->gbyte = (in_el + out_el) * (double)esz / 1e9;
        break;
    default: /* pointwise: bn (scale/shift), add, relu, flatten; a residual is one more read */
        snprintf(L->kind, sizeof L->kind, "%s", nd->op == CNN_OP_BN ? "bn" : cnn_op_name(nd->op));
        if (nd->op == CNN_OP_FLATTEN) snprintf(L->layer, sizeof L->layer, "%d %dx%d->%d", c, h, w, nd->c);
        else snprintf(L->layer, sizeof L->layer, "%d %dx%d", nd->c, nd->h, nd->w);
        L->gbyte = (in_el + out_el * (1 + (nd->op == CNN_OP_ADD) + e.has_residual)) * (double)esz / 1e9;
        break;
    }
}

/* `repeat` eval runs issued back to back with a timing mark after each (the device never waits for the host
 * between them): ms[i] is the gap between the marks around run i. A run is plan step `step` alone, or the whole
 * forward (through its graph) when step < 0. The marks are reused in chunks of CNN_TIME_MARKS - 1 runs. */
static cnn_status time_back_to_back(cnn_backend *be, cnn_model *m, int batch, int step, int repeat, double *ms) {
    cnn_status st = CNN_OK;
    for (int base = 0; st == CNN_OK && base < repeat; base += CNN_TIME_MARKS - 1) {
        int chunk = repeat - base < CNN_TIME_MARKS - 1 ? repeat - base : CNN_TIME_MARKS - 1;
        st = be->time_mark(be, 0);
        for (int it = 0; st == CNN_OK && it < chunk; it++) {
            st = step < 0 ? cnn_model_forward(m, batch, CNN_MODE_EVAL, 0) : cnn_model_forward_eval_steps(m, batch, step, 1);
            if (st == CNN_OK) st = be->time_mark(be, it + 1);
        }
        for (int it = 0; st == CNN_OK && it < chunk; it++) st = be->time_between(be, it, it + 1, &ms[base + it]);
    }
    return st;
}

/* How each step of --layers is timed. rest_ms > 0: before a step, the device is drained and left idle rest_ms
 * milliseconds, then the step runs `warmup` times untimed, so every step starts from the same idle GPU (clocks and
 * power as after a pause) whatever ran before it. min_ms > 0: a step is timed over at least min_ms milliseconds
 * of runs (more than `repeat` where its runs are short, estimated from 3 timed runs first), so every step is timed
 * at the clocks a sustained load settles at. bench/pytorch_bench.py's --layer-rest-ms and --layer-min-ms time
 * cuDNN's convs by the same rules (docs/BENCH.md). */
typedef struct layer_protocol {
    int rest_ms, min_ms;
} layer_protocol;

#define LAYER_MAX_RUNS 20000

/* The eval forward step by step: warmup untimed passes, then each step run `repeat` times (or as lp says) back to
 * back with a timing mark after each (as the cuDNN rows of bench/pytorch_bench.py time each conv shape): a step's
 * time is the gap between its marks, with its inputs and weights as warm in L2 as repetition leaves them. Steps
 * that write in place (a ReLU, a residual add into its input) change the data from one repetition to the next,
 * not the work. */
static cnn_status time_layers(cnn_backend *be, cnn_model *m, int batch, int warmup, int repeat, layer_protocol lp,
                              bench_row *r) {
    int ns = cnn_model_eval_steps(m);
    int cap = lp.min_ms > 0 ? LAYER_MAX_RUNS : repeat;
    double *ms = calloc((size_t)(cap > 3 ? cap : 3), sizeof *ms);
    r->layers = calloc((size_t)(ns ? ns : 1), sizeof *r->layers);
    if (!ms || !r->layers) {
        free(ms);
        return cnn_fail(CNN_E_OOM, "out of host memory for the per-layer times");
    }
    r->n_layers = ns;
    for (int s = 0; s < ns; s++) describe_step(m, s, batch, cnn_dtype_size(be->act_dtype), &r->layers[s]);
    cnn_status st = CNN_OK;
    for (int it = 0; st == CNN_OK && it < warmup; it++) st = cnn_model_forward_eval_steps(m, batch, 0, ns);
    if (st == CNN_OK) st = be->sync(be);
    r->layers_ms_sum = 0;
    for (int s = 0; st == CNN_OK && s < ns; s++) {
        if (lp.rest_ms > 0) { /* an idle GPU, then this step's own warm-up */
            st = be->sync(be);
            if (st == CNN_OK) cnn_sleep_ms(lp.rest_ms);
            for (int it = 0; st == CNN_OK && it < warmup; it++) st = cnn_model_forward_eval_steps(m, batch, s, 1);
        }
        int runs = repeat;
        if (st == CNN_OK && lp.min_ms > 0) { /* enough runs to fill min_ms, from the median of 3 */
            st = time_back_to_back(be, m, batch, s, 3, ms);
            if (st == CNN_OK) {
                double per = summarize(ms, 3).median;
                double want = per > 0 ? (double)lp.min_ms / per + 1.0 : (double)LAYER_MAX_RUNS;
                runs = want > LAYER_MAX_RUNS ? LAYER_MAX_RUNS : want > repeat ? (int)want : repeat;
                r->layers[s].est_ms = per;
            }
        }
        if (st == CNN_OK) st = time_back_to_back(be, m, batch, s, runs, ms);
        if (st != CNN_OK) break;
        bench_stats t = summarize(ms, runs);
        r->layers[s].ms_median = t.median;
        r->layers[s].ms_min = t.min;
        r->layers[s].ms_max = t.max;
        r->layers[s].runs = runs;
        r->layers_ms_sum += t.median;
    }
    free(ms);
    return st == CNN_OK ? CNN_OK : cnn_error_prefix(st, "per-layer timing");
}

/* deterministic (--deterministic, train): the step `cnn train --deterministic` runs, its batch by slices */
static cnn_status run_one(cnn_backend *be, const cnn_model_opts *mo, int h, int w, int batch, bool train, bool layers,
                          bool deterministic, layer_protocol lp, int warmup, int repeat, const cnn_dist_ctx *dist,
                          const cnn_dp_opts *dp, bench_row *r) {
    double t0 = cnn_now();
    cnn_model *m = NULL;
    const int world = dist ? dist->world : 1;
    r->gpus = world;
    cnn_status st = cnn_model_create(mo, be, h, w, batch, train, &m);
    if (st == CNN_OK && world > 1) st = cnn_model_set_comm(m, dist->comm, dp);
    int slices = 0;
    if (st == CNN_OK && train && deterministic) st = cnn_model_begin_slices(m, batch, world, &slices);
    float *x = NULL;
    int64_t *labels = NULL;
    double *ms = calloc((size_t)repeat, sizeof *ms);
    if (st == CNN_OK) {
        x = cli_random_images((size_t)batch * 3 * h * w, 7, 1);
        labels = malloc((size_t)batch * sizeof *labels);
        if (!x || !labels || !ms) st = cnn_fail(CNN_E_OOM, "out of host memory for the benchmark input");
        for (int i = 0; st == CNN_OK && i < batch; i++) labels[i] = i % mo->num_classes;
    }
    if (st == CNN_OK) st = cnn_model_upload_input(m, x, batch);
    cnn_sgd sgd = {.lr = 1e-4f, .momentum = 0.9f, .weight_decay = 5e-4f, .first_step = true};
    float *mom = NULL;
    const cnn_net *net = m ? cnn_model_net(m) : NULL;
    if (st == CNN_OK && train) {
        st = be->alloc(be, (size_t)net->n_trainable * 4, "momentum", (void **)&mom);
        if (st == CNN_OK) st = be->zero(be, mom, (size_t)net->n_trainable * 4);
    }
    if (train && repeat > 0 && st == CNN_OK) { /* a step ends with the loss on the host: one sync per step */
        for (int it = 0; st == CNN_OK && it < warmup + repeat; it++) {
            if (it >= warmup) st = be->time_begin(be);
            if (st != CNN_OK) break;
            float loss;
            st = cnn_model_forward(m, batch, CNN_MODE_TRAIN, (uint64_t)it);
            if (st == CNN_OK) st = cnn_model_backward(m, batch, labels, 0.0f, &loss);
            if (st == CNN_OK) st = be->sgd_update(be, &sgd, net->n_trainable, cnn_model_params(m), cnn_model_grads(m), mom,
                                                    1.0f / (float)world);
            if (st == CNN_OK) st = cnn_model_params_changed(m);
            sgd.first_step = false;
            if (st == CNN_OK) st = be->sync(be);
            if (st == CNN_OK && it >= warmup) st = be->time_end(be, &ms[it - warmup]);
            if (it == warmup - 1 || (warmup == 0 && it == 0)) r->setup_s = cnn_now() - t0;
        }
    } else if (repeat > 0 && st == CNN_OK) {
        /* inference: warm-up passes (compilation, tuning, graph capture), then `repeat` passes back to back with a
         * mark after each -- the device never waits for the host between them, as in PyTorch's rows
         * (bench/pytorch_bench.py) and torch.utils.benchmark -- each pass's time the gap between its marks */
        for (int it = 0; st == CNN_OK && it < (warmup > 0 ? warmup : 1); it++) /* the first pass is never timed */
            st = cnn_model_forward(m, batch, CNN_MODE_EVAL, 0);
        if (st == CNN_OK) st = be->sync(be);
        r->setup_s = cnn_now() - t0;
        if (st == CNN_OK) st = time_back_to_back(be, m, batch, -1, repeat, ms);
    }
    if (st == CNN_OK) {
        bench_stats t = summarize(ms, repeat);
        r->ms_median = t.median;
        r->ms_min = t.min;
        r->ms_max = t.max;
        r->ms_p10 = t.p10;
        r->ms_p90 = t.p90;
        r->gflop = (double)matmul_flops(net) * batch * (train ? 3.0 : 1.0) / 1e9;
        r->images_per_s = (double)batch * world / (r->ms_median / 1e3);
        r->tflops = r->gflop * world / r->ms_median;  /* GFLOP per ms = TFLOP/s, over all GPUs */
        r->mem_mib = (double)(be->peak_bytes ? be->peak_bytes(be) : cnn_model_device_bytes(m)) / 1048576.0;
    }
    if (st == CNN_OK && layers && !train) st = time_layers(be, m, batch, warmup, repeat, lp, r);
    if (st == CNN_OK && layers && train) {
        st = bench_train_ops(be, m, batch, labels, mom, repeat, r->ops, &r->n_ops);
        if (st == CNN_OK) st = bench_conv_passes(be, net, batch, warmup, repeat, &r->passes, &r->n_passes);
        for (int i = 0; st == CNN_OK && i < r->n_passes; i++)
            for (int p = 0; p < 3; p++) r->passes_ms[p] += r->passes[i].count * r->passes[i].ms[p];
    }
    if (mom) be->free(be, mom);
    free(x);
    free(labels);
    free(ms);
    if (m) cnn_model_end_slices(m);
    cnn_model_free(m);
    return st;
}

/* ---- output --------------------------------------------------------------------------------------------- */

typedef struct bench_out {
    const char *device, *backend, *runtime, *date;
    bool layers;
    layer_protocol lp;
} bench_out;

/* TFLOP/s (GFLOP per ms) for conv and linear steps, GB/s for the others. */
static double layer_rate(const bench_layer *L) {
    return L->gflop > 0 ? L->gflop / L->ms_median : L->gbyte * 1e3 / L->ms_median;
}

static void print_passes_md(const bench_row *rows, int nr) {
    bool any = false;
    for (int i = 0; i < nr; i++) any |= rows[i].st == CNN_OK && rows[i].n_passes > 0;
    if (!any) return;
    printf("\nPer convolution: each distinct shape's three passes timed alone (fprop without epilogue, dgrad "
           "overwriting dx), median of the timed runs; TFLOP/s at 2 per multiply-add; the sums weight each shape by "
           "its count.\n\n");
    printf("| model | batch | dtype | conv | count | fprop ms | dgrad ms | wgrad ms | fprop TFLOP/s | dgrad TFLOP/s | "
           "wgrad TFLOP/s |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < nr; i++) {
        const bench_row *r = &rows[i];
        if (r->st != CNN_OK || !r->n_passes) continue;
        for (int j = 0; j < r->n_passes; j++) {
            const bench_pass *p = &r->passes[j];
            if (p->dgrad_needed)
                printf("| %s | %d | %s | %s | %d | %.4f | %.4f | %.4f | %.4g | %.4g | %.4g |\n", r->model, r->batch,
                       r->dtype, p->layer, p->count, p->ms[0], p->ms[1], p->ms[2], p->gflop / p->ms[0],
                       p->gflop / p->ms[1], p->gflop / p->ms[2]);
            else /* reads the images: the step runs no dgrad for it */
                printf("| %s | %d | %s | %s | %d | %.4f | - | %.4f | %.4g | - | %.4g |\n", r->model, r->batch, r->dtype,
                       p->layer, p->count, p->ms[0], p->ms[2], p->gflop / p->ms[0], p->gflop / p->ms[2]);
        }
        double prof = 0;
        for (int j = 0; j < r->n_ops; j++) prof += r->ops[j].ms;
        printf("\n%s b%d %s, the training step by op: each step of the train plan timed alone (eager), median; a "
               "batchnorm step includes the residual add and ReLU fused into it\n\n| op | pass | steps | ms |\n"
               "|---|---|---|---|\n", r->model, r->batch, r->dtype);
        for (int j = 0; j < r->n_ops; j++)
            printf("| %s | %s | %d | %.3f |\n", r->ops[j].what, r->ops[j].backward ? "backward" : "forward",
                   r->ops[j].count, r->ops[j].ms);
        printf("| **sum** | | | **%.3f** (the step through its graphs: %.3f) |\n\n", prof, r->ms_median);
        const double sum = r->passes_ms[0] + r->passes_ms[1] + r->passes_ms[2];
        printf("| %s | %d | %s | **sum** | | **%.3f** | **%.3f** | **%.3f** | all passes %.3f ms of the %.3f ms step; "
               "the rest %.3f ms | | |\n", r->model, r->batch, r->dtype, r->passes_ms[0], r->passes_ms[1],
               r->passes_ms[2], sum, r->ms_median, r->ms_median - sum);
    }
}

static void print_md(const bench_row *rows, int nr, const bench_out *o) {
    printf("device: %s (%s%s%s), cnn %s commit %s, %s\n\n", o->device, o->backend, o->runtime[0] ? "; " : "",
           o->runtime, CNN_VERSION, CNN_COMMIT, o->date);
    printf("| model | input | batch | dtype | mode | ms (median) | min..max | images/s | TFLOP/s | peak MiB | setup s |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < nr; i++) {
        const bench_row *r = &rows[i];
        if (r->st != CNN_OK) {
            printf("| %s | %s | %d | %s | %s | error: %s |||||\n", r->model, r->input, r->batch, r->dtype, r->mode, r->error);
            continue;
        }
        char mode[40];
        snprintf(mode, sizeof mode, r->gpus > 1 ? "%s x%d GPUs" : "%s", r->mode, r->gpus);
        printf("| %s | %s | %d | %s | %s | %.3f | %.3f..%.3f | %.1f | %.3f | %.0f | %.2f |\n", r->model, r->input,
               r->batch, r->dtype, mode, r->ms_median, r->ms_min, r->ms_max, r->images_per_s, r->tflops,
               r->mem_mib, r->setup_s);
    }
    if (!o->layers) return;
    print_passes_md(rows, nr);
    bool any_layers = false;
    for (int i = 0; i < nr; i++) any_layers |= rows[i].st == CNN_OK && rows[i].n_layers > 0;
    if (!any_layers) return;
    printf("\nPer layer: the eval forward one step at a time (eager, no graph), each step timed alone; median of the "
           "same runs. A conv step includes what is fused into it (BN, residual add, ReLU). TFLOP/s for conv and "
           "linear (2 per multiply-add), GB/s of activations read and written for the rest.");
    if (o->lp.rest_ms > 0) printf(" Before each step: the GPU idle %d ms, then --warmup runs of the step.", o->lp.rest_ms);
    if (o->lp.min_ms > 0) printf(" Each step timed over at least %d ms of runs.", o->lp.min_ms);
    printf("\n\n");
    printf("| model | batch | dtype | step | name | kind | fused | shape | ms (median) | TFLOP/s | GB/s |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < nr; i++) {
        const bench_row *r = &rows[i];
        if (r->st != CNN_OK || !r->n_layers) continue;
        for (int s = 0; s < r->n_layers; s++) {
            const bench_layer *L = &r->layers[s];
            char tf[24] = "", gb[24] = "";
            snprintf(L->gflop > 0 ? tf : gb, sizeof tf, "%.3f", layer_rate(L));
            printf("| %s | %d | %s | %d | %s | %s | %s | %s | %.4f | %s | %s |\n", r->model, r->batch, r->dtype, L->step,
                   L->name, L->kind, L->fused, L->layer, L->ms_median, tf, gb);
        }
        printf("| %s | %d | %s | | **sum of %d steps** | | | whole forward %.3f ms | **%.4f** | | |\n", r->model,
               r->batch, r->dtype, r->n_layers, r->ms_median, r->layers_ms_sum);
    }
}

static void print_csv(const bench_row *rows, int nr, const bench_out *o) {
    char dev[320], err[560], name[2 * CNN_NAME_MAX + 4];
    printf("impl,model,input,batch,dtype,mode,device,backend,ms_median,ms_min,ms_p10,ms_p90,ms_max,images_per_s,tflops,"
           "peak_mib,setup_s,repeat,warmup,commit,date,error%s\n",
           o->layers ? ",layer,name,kind,fused,gbps,layers_ms_sum" : "");
    cli_csv_esc(o->device, dev, sizeof dev);
    for (int i = 0; i < nr; i++) {
        const bench_row *r = &rows[i];
        printf("cnn,%s,%s,%d,%s,%s,%s,%s,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%d,%d,%s,%s,%s", r->model,
               r->input, r->batch, r->dtype, r->mode, dev, o->backend, r->ms_median, r->ms_min, r->ms_p10, r->ms_p90,
               r->ms_max, r->images_per_s, r->tflops, r->mem_mib, r->setup_s, r->repeat, r->warmup, CNN_COMMIT,
               o->date, cli_csv_esc(r->error, err, sizeof err));
        if (o->layers) printf(",,,,,,%.9g", r->layers_ms_sum);
        printf("\n");
        for (int s = 0; r->st == CNN_OK && s < r->n_layers; s++) {
            const bench_layer *L = &r->layers[s];
            char tf[24] = "", gb[24] = "";
            snprintf(L->gflop > 0 ? tf : gb, sizeof tf, "%.9g", layer_rate(L));
            printf("cnn,%s,%s,%d,%s,layer,%s,%s,%.9g,%.9g,,,%.9g,,%s,,,%d,%d,%s,%s,\"\",\"%s\",%s,%s,%s,%s,\n",
                   r->model, r->input, r->batch, r->dtype, dev, o->backend, L->ms_median, L->ms_min, L->ms_max, tf,
                   L->runs, r->warmup, CNN_COMMIT, o->date, L->layer, cli_csv_esc(L->name, name, sizeof name), L->kind,
                   L->fused, gb);
        }
    }
}

static void print_json(const bench_row *rows, int nr, const bench_out *o, bool lines) {
    char dev[320], err[520];
    cli_json_esc(o->device, dev, sizeof dev);
    const char *indent = lines ? "" : "  ";
    if (!lines) printf("[\n");
    for (int i = 0; i < nr; i++) {
        const bench_row *r = &rows[i];
        bool last_row = i + 1 == nr;
        int nl = r->st == CNN_OK ? r->n_layers : 0;
        printf("%s{\"impl\":\"cnn\",\"model\":\"%s\",\"input\":\"%s\",\"batch\":%d,\"dtype\":\"%s\",\"mode\":\"%s\","
               "\"device\":\"%s\",\"backend\":\"%s\",\"ok\":%s,\"ms_median\":%.9g,\"ms_min\":%.9g,\"ms_p10\":%.9g,"
               "\"ms_p90\":%.9g,\"ms_max\":%.9g,\"images_per_s\":%.9g,\"tflops\":%.9g,\"gflop_per_batch\":%.9g,"
               "\"peak_mib\":%.9g,\"setup_s\":%.9g,\"repeat\":%d,\"warmup\":%d,\"version\":\"%s\",\"commit\":\"%s\","
               "\"date\":\"%s\",\"error\":\"%s\"",
               indent, r->model, r->input, r->batch, r->dtype, r->mode, dev, o->backend,
               r->st == CNN_OK ? "true" : "false", r->ms_median, r->ms_min, r->ms_p10, r->ms_p90, r->ms_max,
               r->images_per_s, r->tflops, r->gflop, r->mem_mib, r->setup_s, r->repeat, r->warmup, CNN_VERSION,
               CNN_COMMIT, o->date, cli_json_esc(r->error, err, sizeof err));
        if (o->runtime[0]) printf(",\"runtime\":\"%s\"", cli_json_esc(o->runtime, err, sizeof err));
        printf(",\"gpus\":%d", r->gpus > 1 ? r->gpus : 1);
        if (nl) printf(",\"layer_steps\":%d,\"layers_ms_sum\":%.9g", nl, r->layers_ms_sum);
        if (nl && (o->lp.rest_ms > 0 || o->lp.min_ms > 0))
            printf(",\"layer_rest_ms\":%d,\"layer_min_ms\":%d", o->lp.rest_ms, o->lp.min_ms);
        const int npass = r->st == CNN_OK ? r->n_passes : 0;
        if (npass)
            printf(",\"conv_pass_shapes\":%d,\"fprop_ms_sum\":%.9g,\"dgrad_ms_sum\":%.9g,\"wgrad_ms_sum\":%.9g", npass,
                   r->passes_ms[0], r->passes_ms[1], r->passes_ms[2]);
        printf("}%s\n", !lines && !(last_row && nl == 0 && npass == 0) ? "," : "");
        for (int j = 0; j < npass; j++) {
            const bench_pass *p = &r->passes[j];
            const cnn_conv2d *cv = &p->cv;
            printf("%s{\"impl\":\"cnn\",\"model\":\"%s\",\"input\":\"%s\",\"batch\":%d,\"dtype\":\"%s\","
                   "\"mode\":\"conv_pass\",\"device\":\"%s\",\"backend\":\"%s\",\"ok\":true,\"layer\":\"%s\","
                   "\"c\":%d,\"h\":%d,\"w\":%d,\"k\":%d,\"r\":%d,\"s\":%d,\"stride\":%d,\"pad\":%d,\"count\":%d,"
                   "\"gflop_per_pass\":%.9g,\"fprop_ms\":%.9g,\"dgrad_ms\":%.9g,\"wgrad_ms\":%.9g,\"repeat\":%d,"
                   "\"warmup\":%d,\"version\":\"%s\",\"commit\":\"%s\",\"date\":\"%s\",\"error\":\"\"}%s\n",
                   indent, r->model, r->input, r->batch, r->dtype, dev, o->backend, p->layer, cv->c, cv->h, cv->w, cv->k,
                   cv->r, cv->s, cv->stride_h, cv->pad_h, p->count, p->gflop, p->ms[0], p->ms[1], p->ms[2], r->repeat,
                   r->warmup, CNN_VERSION, CNN_COMMIT, o->date, !lines && !(last_row && nl == 0 && j + 1 == npass) ? "," : "");
        }
        for (int s = 0; s < nl; s++) {
            const bench_layer *L = &r->layers[s];
            char name[4 * CNN_NAME_MAX + 8];
            printf("%s{\"impl\":\"cnn\",\"model\":\"%s\",\"input\":\"%s\",\"batch\":%d,\"dtype\":\"%s\",\"mode\":\"layer\","
                   "\"device\":\"%s\",\"backend\":\"%s\",\"ok\":true,\"step\":%d,\"name\":\"%s\",\"kind\":\"%s\","
                   "\"fused\":\"%s\",\"layer\":\"%s\",\"ms_median\":%.9g,\"ms_min\":%.9g,\"ms_max\":%.9g,",
                   indent, r->model, r->input, r->batch, r->dtype, dev, o->backend, L->step,
                   cli_json_esc(L->name, name, sizeof name), L->kind, L->fused, L->layer, L->ms_median, L->ms_min,
                   L->ms_max);
            if (L->gflop > 0) printf("\"gflop_per_batch\":%.9g,\"tflops\":%.9g,", L->gflop, layer_rate(L));
            else printf("\"gbyte_per_batch\":%.9g,\"gbps\":%.9g,", L->gbyte, layer_rate(L));
            if (o->lp.rest_ms > 0 || o->lp.min_ms > 0)
                printf("\"layer_rest_ms\":%d,\"layer_min_ms\":%d,", o->lp.rest_ms, o->lp.min_ms);
            if (o->lp.min_ms > 0) printf("\"layer_est_ms\":%.17g,", L->est_ms); /* exact: the test recomputes repeat */
            printf("\"repeat\":%d,\"warmup\":%d,\"version\":\"%s\",\"commit\":\"%s\",\"date\":\"%s\",\"error\":\"\"}%s\n",
                   L->runs, r->warmup, CNN_VERSION, CNN_COMMIT, o->date,
                   !lines && !(last_row && s + 1 == nl) ? "," : "");
        }
    }
    if (!lines) printf("]\n");
}

int cmd_bench(int argc, char **argv) {
    cli_table t = {0};
    cli_common c = {0};
    cli_model mm = {0};
    const char *batches = "32", *mode = "infer", *format = "md", *dtypes = NULL, *data = NULL;
    int repeat = 10, warmup = 2, workers = 0;
    bool layers = false;
    layer_protocol lp = {0, 0};
    cli_add_model(&t, &mm, false);
    cli_add(&t, (cli_opt){"batch", 0, CLI_STR, "B[,B...]", &batches, 0, 0, NULL, "batch sizes"});
    cli_add(&t, (cli_opt){"mode", 0, CLI_CHOICE, NULL, &mode, 0, 0, "infer|train|data",
                          "inference (eval, fused), a training step (forward, backward, SGD), or the input pipeline "
                          "alone (--data folder:DIR: decode + resize + crop, train and eval transforms)"});
    cli_add(&t, (cli_opt){"data", 0, CLI_STR, "folder:DIR", &data, 0, 0, NULL, "--mode data: the images"});
    cli_add(&t, (cli_opt){"workers", 0, CLI_INT, "N", &workers, 0, 256, NULL, "--mode data: decode threads (0 = one per CPU)"});
    cli_add(&t, (cli_opt){"repeat", 0, CLI_INT, "N", &repeat, 1, 100000, NULL, "timed runs (median reported)"});
    cli_add(&t, (cli_opt){"warmup", 0, CLI_INT, "N", &warmup, 0, 100000, NULL, "untimed runs first"});
    cli_add(&t, (cli_opt){"layers", 0, CLI_FLAG, NULL, &layers, 0, 0, NULL,
                          "then time each step of the eval forward alone (eager): a per-layer breakdown; with --mode "
                          "train, each distinct convolution's fprop, dgrad and wgrad alone"});
    cli_add(&t, (cli_opt){"layer-rest-ms", 0, CLI_INT, "MS", &lp.rest_ms, 0, 60000, NULL,
                          "--layers: leave the GPU idle MS ms before each step, then --warmup runs of it"});
    cli_add(&t, (cli_opt){"layer-min-ms", 0, CLI_INT, "MS", &lp.min_ms, 0, 600000, NULL,
                          "--layers: time each step over at least MS ms of runs, up to 20000 (0: --repeat runs)"});
    cli_add(&t, (cli_opt){"output", 'o', CLI_CHOICE, NULL, &format, 0, 0, "md|csv|json|jsonl", "output format"});
    cli_add(&t, (cli_opt){"dtypes", 0, CLI_STR, "D[,D...]", &dtypes, 0, 0, NULL, "several of fp32,tf32,bf16,fp16 (overrides --dtype)"});
    cli_dist cdist;
    cli_add_dist(&t, &cdist);
    cli_add_common(&t, &c);
    int rc = cli_parse(&t, "bench", "--model M[,M...] --batch B[,B...] [--mode infer|train] [--layers] [-o md|csv|json|jsonl]",
                       "Time the model: median (and min, p10, p90, max) of --repeat runs after --warmup runs; "
                       "images/s, ms per batch, achieved TFLOP/s, peak memory and setup time. --layers adds the time "
                       "of every layer (fused step) of the inference forward.",
                       argc, argv);
    if (rc >= 0) return rc;
    if (strcmp(mode, "data") == 0) {
        if (!data) return cli_usage_error("bench", "--mode data needs --data folder:DIR");
        int h, w;
        cnn_model_opts mo;
        mm.model = mm.model ? mm.model : "resnet50";
        if ((rc = cli_model_opts("bench", &t, &mm, 1000, &mo, &h, &w)) >= 0) return rc;
        return cli_bench_data(data, workers, atoi(batches), repeat, warmup, h, w);
    }
    if (!mm.model) return cli_usage_error("bench", "--model is required");
    bool train = strcmp(mode, "train") == 0;
    if (cli_seen(&t, "gpus") && (!train || layers || dtypes))
        return cli_usage_error("bench", "--gpus times the data-parallel training step: --mode train, one --dtype, "
                               "no --layers");
    if (train && (rc = cli_dist_prepare("bench", &cdist, &c, argc, argv)) >= 0) return rc;
    const cnn_dist_env *de = &cdist.env_out[0];
    cnn_dist_ctx dctx = {.world = 1};
    char model_buf[512], batch_buf[256], dtype_buf[128];
    snprintf(model_buf, sizeof model_buf, "%s", mm.model);
    snprintf(batch_buf, sizeof batch_buf, "%s", batches);
    snprintf(dtype_buf, sizeof dtype_buf, "%s", dtypes ? dtypes : c.dtype);
    char *models[32], *bl[32], *dl[8];
    int nm = split_list(model_buf, models, 32), nb = split_list(batch_buf, bl, 32), nd = split_list(dtype_buf, dl, 8);
    int bvals[32];
    for (int i = 0; i < nb; i++) {
        char *end;
        long v = strtol(bl[i], &end, 10);
        if (*end || v < 1 || v > 65536) return cli_usage_error("bench", "--batch '%s' is not a list of sizes in [1, 65536]", batches);
        bvals[i] = (int)v;
    }
    for (int i = 0; i < nd; i++)
        if (strcmp(dl[i], "fp32") && strcmp(dl[i], "tf32") && strcmp(dl[i], "bf16") && strcmp(dl[i], "fp16"))
            return cli_usage_error("bench", "dtype '%s' is not one of fp32, tf32, bf16, fp16", dl[i]);
    int nrows = nm * nb * nd, nr = 0;
    bench_row *rows = calloc((size_t)nrows, sizeof *rows);
    if (!rows) return cli_fail(cnn_fail(CNN_E_OOM, "out of host memory"));
    char device_name[160] = "", backend_name[16] = "", runtime[96] = "";
    int failures = 0;
    rc = -1;
    for (int di = 0; rc < 0 && di < nd; di++) {
        cli_common cc = c;
        cc.dtype = dl[di];
        cnn_backend *be = NULL;
        if ((rc = cli_backend(&cc, &be)) >= 0) break;
        if (train && de->world > 1) { /* the first (only) dtype's backend carries the communicator */
            cnn_status ds = be->comm_init ? cnn_dist_start(be, de, cdist.init, cdist.timeout_s, &dctx)
                                          : cnn_fail(CNN_E_UNSUPPORTED, "the %s backend has no collectives", be->name);
            if (ds != CNN_OK) {
                rc = cli_fail(ds);
                cnn_backend_destroy(be);
                break;
            }
        }
        snprintf(device_name, sizeof device_name, "%s", be->device_name);
        snprintf(backend_name, sizeof backend_name, "%s", be->name);
        snprintf(runtime, sizeof runtime, "%s", be->runtime);
        for (int mi = 0; rc < 0 && mi < nm; mi++) {
            cli_model m2 = mm;
            m2.model = models[mi];
            cnn_model_opts mo;
            int h, w;
            if ((rc = cli_model_opts("bench", &t, &m2, 1000, &mo, &h, &w)) >= 0) break;
            for (int bi = 0; bi < nb; bi++) {
                bench_row *r = &rows[nr++];
                snprintf(r->model, sizeof r->model, "%s%s", mo.arch, mo.stem == CNN_STEM_CIFAR ? "-cifar" : "");
                snprintf(r->dtype, sizeof r->dtype, "%s", dl[di]);
                snprintf(r->mode, sizeof r->mode, "%s%s", mode, train && c.deterministic ? "-deterministic" : "");
                snprintf(r->input, sizeof r->input, "%dx%d", h, w);
                r->batch = bvals[bi];
                r->repeat = repeat;
                r->warmup = warmup;
                cnn_dp_opts dp = cli_dist_dp_opts(&cdist, dctx.world);
                r->st = run_one(be, &mo, h, w, bvals[bi], train, layers, c.deterministic, lp, warmup, repeat, &dctx,
                                &dp, r);
                if (r->st != CNN_OK) {
                    snprintf(r->error, sizeof r->error, "%s", cnn_error_msg());
                    fprintf(stderr, "cnn: %s batch %d %s: %s\n", r->model, r->batch, r->dtype, r->error);
                    failures++;
                }
            }
        }
        cnn_dist_finish(&dctx, failures == 0);
        cnn_backend_destroy(be);
    }
    if (rc < 0 && dctx.rank != 0) { /* only rank 0 reports */
        rc = failures ? CLI_EXIT_RUNTIME : CLI_EXIT_OK;
    } else if (rc < 0) {
        char date[32];
        time_t now = time(NULL);
        strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
        bench_out o = {.device = device_name, .backend = backend_name, .runtime = runtime, .date = date, .layers = layers, .lp = lp};
        if (strcmp(format, "md") == 0) print_md(rows, nr, &o);
        else if (strcmp(format, "csv") == 0) print_csv(rows, nr, &o);
        else print_json(rows, nr, &o, strcmp(format, "jsonl") == 0);
        rc = failures ? CLI_EXIT_RUNTIME : CLI_EXIT_OK;
    }
    for (int i = 0; i < nr; i++) free(rows[i].layers), free(rows[i].passes);
    free(rows);
    return rc;
}
