/* model.c — a network bound to a backend: arenas planned once, weight initialisation, and the executor.
 *
 * Arenas (one device allocation per lifetime class, style.md §1.7):
 *   params   float32 trainable parameters, KRSC for conv filters        (n_trainable)
 *   grads    float32 gradients, same layout                            (n_trainable; training only)
 *   buffers  float32 BN running statistics                             (n_buffer)
 *   wact     act_dtype copies of conv/linear weights (absent for F32: the executor points into params)
 *   bn       per BN node: save_mean, save_invstd (training) and the folded scale, shift (eval)
 *   pairw    per pair step (eval): both convs' filters scaled by their BN scales (act_dtype), the summed shift
 *   acts     activations and their gradients, placed by lifetime (plan.c); the eval plan reuses the memory
 *
 * Two plans over the same graph:
 *   train  every node runs as itself (batch statistics, dropout); gradients flow back node by node, an
 *          activation gradient that two consumers write is accumulated by the second writer.
 *   eval   BatchNorm folded into scale/shift, and conv -> BN -> residual add -> ReLU chains fused into the
 *          conv's epilogue, and the max-pool after such a chain too where the backend has a kernel for it
 *          (conv2d_fprop_pool: the ResNet stem on the GPU). Where a block adds two conv -> BN branches (a
 *          ResNet block's last conv and its downsample conv) and the backend runs the two convs summed in one
 *          kernel (conv2d_fprop_pair), they are one step: both BN scales folded into the filters, the shifts
 *          summed, neither branch stored. Dropout and trivial flattens alias their input.
 *          Its steps can also be run one at a time, eagerly (cnn_model_forward_eval_steps), for per-layer
 *          timing (`cnn bench --layers`).
 */
#include "cnn/net.h"
#include "cnn/safetensors.h"
#include "guard.h"
#include "model.h"
#include "plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ALIGN 256

typedef struct cnn_step {
    int node;     /* the op executed                                   */
    int bn;       /* BN node folded into the epilogue (-1)              */
    bool has_residual;
    int residual; /* node whose value is added before the ReLU (-1 = the network input) */
    bool relu;
    int pool;     /* max-pool node fused after the epilogue (-1)        */
    int out;      /* the node whose value this step produces            */
    int pair;     /* conv node summed with `node` in one kernel (-1): its step was absorbed, and `residual` is none */
    int pair_bn;  /* that conv's BN node                                 */
    size_t pair_off; /* byte offset in `pairw` of the pair's folded filters (first, then `node`'s) and shift */
} cnn_step;

#define NOT_KEPT (-3) /* value_of: a node whose value no eval step stores (the inner nodes of a pair) */

enum { GRAPH_EVAL = 0, GRAPH_TRAIN_FWD, GRAPH_BACKWARD };
#define MAX_GRAPHS 16

typedef struct graph_entry {
    int kind, n;
    float eps, scale;
    int runs;
    void *graph;
} graph_entry;

struct cnn_model {
    cnn_net *net;
    cnn_backend *be;
    int max_batch;
    bool train;
    size_t esz;              /* bytes per act_dtype element */
    float *params, *grads, *buffers, *bn;
    void *wact;
    void *pairw;
    size_t pairw_bytes;
    void *arena;
    size_t arena_bytes;
    void *input;             /* (max_batch, H, W, 3) act_dtype */
    float *staging;          /* float32 staging for conversions when act_dtype != F32 */
    size_t staging_elems;
    int32_t *labels_dev;
    float *loss_dev;
    int64_t *bn_off;         /* per node: float offset of its 4*C block in `bn`, or -1 */
    size_t *train_off;       /* per node: byte offset of its output (train plan)        */
    size_t *grad_off;        /* per node: byte offset of its gradient                    */
    bool *grad_acc;          /* per node x 2 inputs: accumulate into the input gradient  */
    cnn_step *steps;         /* eval plan                                                */
    int n_steps;
    int *value_of;           /* eval: node -> node whose buffer holds its value (-1 = input) */
    size_t *eval_off;        /* eval: per node byte offset (valid where value_of[i] == i)   */
    int64_t *counters;       /* per param: num_batches_tracked (host)                     */
    bool fold_valid;
    uint64_t dropout_seed;
    int last_n;
    cnn_mode last_mode;
    size_t device_bytes;
    float *host;             /* host scratch */
    size_t host_elems;
    bool use_graphs, has_dropout;
    float loss_scale;        /* multiplies the loss gradient (fp16 training); 1 otherwise */
    graph_entry graphs[MAX_GRAPHS];
    int n_graphs;
    cnn_node_check_fn node_check; /* called after each node of an eager train-mode forward (guard.c) */
    void *node_check_ctx;
    bool allow_nonfinite;    /* load weights holding NaN/Inf or negative variances */
};

const cnn_net *cnn_model_net(const cnn_model *m) { return m->net; }
cnn_backend *cnn_model_backend(const cnn_model *m) { return m->be; }
int cnn_model_max_batch(const cnn_model *m) { return m->max_batch; }
size_t cnn_model_device_bytes(const cnn_model *m) { return m->device_bytes; }
float *cnn_model_params(cnn_model *m) { return m->params; }
float *cnn_model_grads(cnn_model *m) { return m->grads; }
float *cnn_model_buffers(cnn_model *m) { return m->buffers; }
void *cnn_model_input_buffer(cnn_model *m) { return m->input; }
float *cnn_model_loss_buffer(cnn_model *m) { return m->loss_dev; }
void cnn_model_set_node_check(cnn_model *m, cnn_node_check_fn fn, void *ctx) {
    m->node_check = fn;
    m->node_check_ctx = ctx;
}
void cnn_model_set_allow_nonfinite(cnn_model *m, bool allow) { m->allow_nonfinite = allow; }

/* ---- helpers ------------------------------------------------------------------------------------------ */

static cnn_status dev_alloc(cnn_model *m, size_t bytes, const char *what, void **out) {
    CNN_TRY(m->be->alloc(m->be, bytes ? bytes : ALIGN, what, out));
    m->device_bytes += bytes;
    return CNN_OK;
}

static float *host_scratch(cnn_model *m, size_t elems) {
    if (elems > m->host_elems) {
        float *p = realloc(m->host, elems * sizeof(float));
        if (!p) {
            cnn_fail(CNN_E_OOM, "out of host memory (%zu bytes of scratch)", elems * sizeof(float));
            return NULL;
        }
        m->host = p;
        m->host_elems = elems;
    }
    return m->host;
}

static void in_chw(const cnn_net *net, int in, int *c, int *h, int *w) {
    if (in < 0) {
        *c = net->in_c; *h = net->in_h; *w = net->in_w;
    } else {
        *c = net->nodes[in].c; *h = net->nodes[in].h; *w = net->nodes[in].w;
    }
}

static size_t node_bytes(const cnn_model *m, int i, int n) {
    const cnn_node *nd = &m->net->nodes[i];
    return (size_t)n * nd->c * nd->h * nd->w * m->esz;
}

static const float *pf(const cnn_model *m, int pi) {
    const cnn_param *p = &m->net->params[pi];
    return (p->kind == CNN_PARAM_TRAINABLE ? m->params : m->buffers) + p->offset;
}

/* The weight a conv/linear reads: the act_dtype copy, or the float32 master when act_dtype is F32. */
static const void *weight(const cnn_model *m, int pi) {
    const cnn_param *p = &m->net->params[pi];
    if (!m->wact) return m->params + p->offset;
    return (const char *)m->wact + (size_t)p->act_offset * m->esz;
}

static float *gradp(const cnn_model *m, int pi) { return m->grads + m->net->params[pi].offset; }

static uint64_t node_seed(uint64_t seed, int node) {
    return seed * 0x9E3779B97F4A7C15ULL + (uint64_t)node * 0xBF58476D1CE4E5B9ULL + 1;
}

/* ---- planning ----------------------------------------------------------------------------------------- */

/* Which tensors a node's backward reads. */
static bool bwd_reads_input(cnn_op op) {
    return op == CNN_OP_CONV || op == CNN_OP_BN || op == CNN_OP_MAXPOOL || op == CNN_OP_AVGPOOL ||
           op == CNN_OP_ADAPTIVE_AVGPOOL || op == CNN_OP_LINEAR;
}
static bool bwd_reads_output(cnn_op op) {
    return op == CNN_OP_RELU || op == CNN_OP_MAXPOOL || op == CNN_OP_AVGPOOL || op == CNN_OP_ADAPTIVE_AVGPOOL;
}

static int n_inputs(const cnn_node *nd) { return nd->op == CNN_OP_ADD ? 2 : 1; }

/* Train timeline: forward of node i at time i, the loss at n, backward of node i at 2n - i. Activations and
 * gradients share one arena. */
static size_t plan_train(cnn_model *m) {
    const cnn_net *net = m->net;
    int n = net->n_nodes, B = m->max_batch;
    cnn_interval *iv = calloc((size_t)2 * n, sizeof *iv);
    if (!iv) return cnn_fail(CNN_E_OOM, "out of host memory planning"), CNN_PLAN_OOM;
    for (int i = 0; i < n; i++) {
        cnn_interval *a = &iv[i];
        a->bytes = node_bytes(m, i, B);
        a->first = i;
        a->last = i == net->output ? 2 * n + 1 : i; /* logits stay readable after the step */
        if (bwd_reads_output(net->nodes[i].op)) a->last = 2 * n - i;
        /* gradient of node i: from its latest consumer's backward (or the loss) to its own backward */
        cnn_interval *g = &iv[n + i];
        g->bytes = a->bytes;
        g->first = i == net->output ? n : 2 * n;
        g->last = 2 * n - i;
    }
    for (int j = 0; j < n; j++) {
        const cnn_node *nd = &net->nodes[j];
        for (int s = 0; s < n_inputs(nd); s++) {
            int i = nd->in[s];
            if (i < 0) continue;
            if (iv[i].last < j) iv[i].last = j;
            if (bwd_reads_input(nd->op) && iv[i].last < 2 * n - j) iv[i].last = 2 * n - j;
            if (iv[n + i].first > 2 * n - j) iv[n + i].first = 2 * n - j;
        }
    }
    size_t total = cnn_plan_arena(iv, 2 * n, ALIGN);
    for (int i = 0; i < n && total != CNN_PLAN_OOM; i++) {
        m->train_off[i] = iv[i].offset;
        m->grad_off[i] = iv[n + i].offset;
    }
    free(iv);
    /* accumulate flags: in backward order (descending node index) the first writer of a gradient overwrites */
    bool *written = total == CNN_PLAN_OOM ? NULL : calloc((size_t)n, sizeof *written);
    if (!written) return total == CNN_PLAN_OOM ? total : (cnn_fail(CNN_E_OOM, "out of host memory planning"), CNN_PLAN_OOM);
    for (int j = n - 1; j >= 0; j--) {
        const cnn_node *nd = &net->nodes[j];
        for (int s = 0; s < n_inputs(nd); s++) {
            int i = nd->in[s];
            if (i < 0) continue;
            m->grad_acc[2 * j + s] = written[i];
            written[i] = true;
        }
    }
    free(written);
    return total;
}

static int resolve(const cnn_model *m, int node) { return node < 0 ? -1 : m->value_of[node]; }

/* The only consumer of node i, or -1 when it has none or several (or is the output). */
static int sole_consumer(const cnn_net *net, int i) {
    if (i == net->output) return -1;
    int found = -1;
    for (int j = i + 1; j < net->n_nodes; j++) {
        const cnn_node *nd = &net->nodes[j];
        for (int s = 0; s < n_inputs(nd); s++) {
            if (nd->in[s] != i) continue;
            if (found >= 0) return -1;
            found = j;
        }
    }
    return found;
}

static void conv_problem(const cnn_model *m, const cnn_node *nd, int n, cnn_conv2d *cv);
static void pool_problem(const cnn_model *m, const cnn_node *nd, int n, cnn_pool2d *pl);

static size_t align_bytes(size_t b) { return (b + ALIGN - 1) / ALIGN * ALIGN; }

/* A pair step's block in `pairw` (from its pair_off): the first conv's folded filter (w1 act elements) at 0,
 * `node`'s (w2) at o2, the summed shift (k floats) at os; bytes in all. */
typedef struct pair_layout {
    int64_t w1, w2, k;
    size_t o2, os, bytes;
} pair_layout;

static pair_layout pair_layout_of(const cnn_model *m, const cnn_step *sp) {
    const cnn_node *a = &m->net->nodes[sp->pair], *b = &m->net->nodes[sp->node];
    int ca, cb, h, w;
    in_chw(m->net, a->in[0], &ca, &h, &w);
    in_chw(m->net, b->in[0], &cb, &h, &w);
    pair_layout l = {.w1 = (int64_t)a->c * a->r * a->s * ca, .w2 = (int64_t)b->c * b->r * b->s * cb, .k = b->c};
    l.o2 = align_bytes((size_t)l.w1 * m->esz);
    l.os = l.o2 + align_bytes((size_t)l.w2 * m->esz);
    l.bytes = l.os + align_bytes((size_t)l.k * 4);
    return l;
}

/* Whether the conv -> BN chain of step st (not yet emitted), whose BN feeds the add node `add`, and the other
 * input of that add, `other`, form a pair the backend runs in one kernel: `other` is the BN ending the last
 * emitted step, a conv -> BN step with nothing else fused, read by this add alone. */
static bool pair_with_last(const cnn_model *m, const cnn_step *st, int other, int add) {
    const cnn_net *net = m->net;
    if (!m->be->conv2d_fprop_pair || !m->be->conv2d_pair_fusable || other < 0 || m->n_steps == 0) return false;
    const cnn_step *last = &m->steps[m->n_steps - 1];
    if (net->nodes[st->node].op != CNN_OP_CONV || st->bn < 0 || net->nodes[last->node].op != CNN_OP_CONV ||
        last->bn != other || last->has_residual || last->relu || last->pool >= 0 || last->pair >= 0 ||
        sole_consumer(net, other) != add)
        return false;
    cnn_conv2d first, second;
    conv_problem(m, &net->nodes[last->node], m->max_batch, &first);
    conv_problem(m, &net->nodes[st->node], m->max_batch, &second);
    return m->be->conv2d_pair_fusable(m->be, &first, &second);
}

static size_t plan_eval(cnn_model *m) {
    const cnn_net *net = m->net;
    int n = net->n_nodes;
    bool *done = calloc((size_t)n, sizeof *done);   /* absorbed into a step or aliased */
    bool *emitted = calloc((size_t)n, sizeof *emitted); /* value available */
    if (!done || !emitted) {
        free(done);
        free(emitted);
        return cnn_fail(CNN_E_OOM, "out of host memory planning"), CNN_PLAN_OOM;
    }
    m->n_steps = 0;
    for (int i = 0; i < n; i++) {
        if (done[i]) continue;
        const cnn_node *nd = &net->nodes[i];
        int in = resolve(m, nd->in[0]);
        if (nd->op == CNN_OP_DROPOUT ||
            (nd->op == CNN_OP_FLATTEN && nd->in[0] >= 0 && net->nodes[nd->in[0]].h == 1 &&
             net->nodes[nd->in[0]].w == 1)) {
            m->value_of[i] = in; /* identity in eval */
            done[i] = true;
            continue;
        }
        cnn_step st = {.node = i, .bn = -1, .has_residual = false, .residual = -1, .relu = false, .pool = -1, .out = i,
                       .pair = -1, .pair_bn = -1};
        int cur = i;
        bool chain = nd->op == CNN_OP_CONV || nd->op == CNN_OP_BN || nd->op == CNN_OP_ADD;
        if (nd->op == CNN_OP_BN) st.bn = i;
        if (chain && nd->op == CNN_OP_CONV) {
            int j = sole_consumer(net, cur);
            if (j >= 0 && net->nodes[j].op == CNN_OP_BN) {
                st.bn = j;
                done[j] = true;
                cur = j;
            }
        }
        if (chain && nd->op != CNN_OP_ADD) {
            int j = sole_consumer(net, cur);
            if (j >= 0 && net->nodes[j].op == CNN_OP_ADD) {
                int other = net->nodes[j].in[0] == cur ? net->nodes[j].in[1] : net->nodes[j].in[0];
                int ov = resolve(m, other);
                if (pair_with_last(m, &st, other, j)) { /* the other branch's step becomes part of this one */
                    m->n_steps--;
                    emitted[ov] = false;
                    m->value_of[ov] = m->value_of[other] = NOT_KEPT;
                    st.pair = ov;
                    st.pair_bn = other;
                    done[j] = true;
                    cur = j;
                } else if (other < 0 || (ov >= 0 && emitted[ov])) {
                    st.has_residual = true;
                    st.residual = other;
                    done[j] = true;
                    cur = j;
                }
            }
        }
        if (chain) {
            int j = sole_consumer(net, cur);
            if (j >= 0 && net->nodes[j].op == CNN_OP_RELU) {
                st.relu = true;
                done[j] = true;
                cur = j;
            }
        }
        /* a conv whose output only a max-pool reads (the ResNet stem): one kernel, where the backend has it */
        if (nd->op == CNN_OP_CONV && m->be->conv2d_fprop_pool && m->be->conv2d_pool_fusable) {
            int j = sole_consumer(net, cur);
            if (j >= 0 && net->nodes[j].op == CNN_OP_MAXPOOL) {
                cnn_conv2d cv;
                cnn_pool2d pl;
                conv_problem(m, nd, m->max_batch, &cv);
                pool_problem(m, &net->nodes[j], m->max_batch, &pl);
                if (m->be->conv2d_pool_fusable(m->be, &cv, &pl, st.has_residual)) {
                    st.pool = j;
                    done[j] = true;
                    cur = j;
                }
            }
        }
        st.out = i;
        /* every node absorbed into this step takes the step's value */
        m->value_of[i] = i;
        for (int j = i + 1; j <= cur; j++)
            if (done[j] && m->value_of[j] == -2) m->value_of[j] = i;
        emitted[i] = true;
        done[i] = true;
        m->steps[m->n_steps++] = st;
    }
    free(done);
    free(emitted);

    /* lifetimes over step indices */
    cnn_interval *iv = calloc((size_t)(m->n_steps ? m->n_steps : 1), sizeof *iv);
    int *step_of = malloc((size_t)n * sizeof *step_of);
    if (!iv || !step_of) {
        free(iv);
        free(step_of);
        return cnn_fail(CNN_E_OOM, "out of host memory planning"), CNN_PLAN_OOM;
    }
    for (int i = 0; i < n; i++) step_of[i] = -1;
    for (int s = 0; s < m->n_steps; s++) {
        step_of[m->steps[s].node] = s;
        const cnn_step *sp = &m->steps[s]; /* a fused pool's output is what the step stores */
        iv[s].bytes = node_bytes(m, sp->pool >= 0 ? sp->pool : sp->node, m->max_batch);
        iv[s].first = iv[s].last = s;
    }
    for (int s = 0; s < m->n_steps; s++) {
        const cnn_step *st = &m->steps[s];
        const cnn_node *nd = &net->nodes[st->node];
        int reads[4] = {resolve(m, nd->in[0]), nd->op == CNN_OP_ADD ? resolve(m, nd->in[1]) : -1,
                        st->has_residual ? resolve(m, st->residual) : -1,
                        st->pair >= 0 ? resolve(m, net->nodes[st->pair].in[0]) : -1};
        for (int r = 0; r < 4; r++) {
            if (reads[r] < 0) continue;
            int ps = step_of[reads[r]];
            CNN_ASSERT(ps >= 0 && ps < s);
            if (iv[ps].last < s) iv[ps].last = s;
        }
    }
    int out_step = step_of[resolve(m, net->output)];
    CNN_ASSERT(out_step >= 0);
    iv[out_step].last = m->n_steps;
    size_t total = cnn_plan_arena(iv, m->n_steps, ALIGN);
    for (int s = 0; s < m->n_steps && total != CNN_PLAN_OOM; s++) m->eval_off[m->steps[s].node] = iv[s].offset;
    free(iv);
    free(step_of);
    return total;
}

/* ---- initialisation ----------------------------------------------------------------------------------- */

static double normal01(uint64_t seed, int pi, int64_t i) {
    uint32_t r[4];
    cnn_philox(seed, 0x696e6974ULL + ((uint64_t)pi << 32), (uint64_t)i, r);
    double u1 = ((double)r[0] + 1.0) / 4294967296.0, u2 = (double)r[1] / 4294967296.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static double uniform01(uint64_t seed, int pi, int64_t i) {
    uint32_t r[4];
    cnn_philox(seed, 0x696e6974ULL + ((uint64_t)pi << 32), (uint64_t)i, r);
    return (double)r[0] / 4294967296.0;
}

/* Fill a parameter (torchvision layout) according to its init rule. Each value depends on (seed, parameter,
 * index) alone, so the loop runs in parallel and gives the same values on any number of threads. */
static void init_values(const cnn_param *p, int pi, uint64_t seed, float *out) {
#pragma omp parallel for schedule(static) if (p->count > 65536)
    for (int64_t i = 0; i < p->count; i++) {
        double v = 0;
        switch (p->init) {
        case CNN_INIT_ZEROS: v = 0; break;
        case CNN_INIT_ONES: v = 1; break;
        case CNN_INIT_KAIMING_FAN_OUT: v = normal01(seed, pi, i) * sqrt(2.0 / (double)p->fan_out); break;
        case CNN_INIT_UNIFORM_FAN_IN: {
            double bound = 1.0 / sqrt((double)p->fan_in);
            v = (2.0 * uniform01(seed, pi, i) - 1.0) * bound;
            break;
        }
        case CNN_INIT_NORMAL_001: v = normal01(seed, pi, i) * 0.01; break;
        }
        out[i] = (float)v;
    }
}

/* OIHW <-> KRSC */
static void oihw_to_krsc(const cnn_param *p, const float *src, float *dst) {
    int64_t K = p->shape[0], C = p->shape[1], R = p->shape[2], S = p->shape[3];
    for (int64_t k = 0; k < K; k++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t r = 0; r < R; r++)
                for (int64_t s = 0; s < S; s++) dst[((k * R + r) * S + s) * C + c] = src[((k * C + c) * R + r) * S + s];
}

static void krsc_to_oihw(const cnn_param *p, const float *src, float *dst) {
    int64_t K = p->shape[0], C = p->shape[1], R = p->shape[2], S = p->shape[3];
    for (int64_t k = 0; k < K; k++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t r = 0; r < R; r++)
                for (int64_t s = 0; s < S; s++) dst[((k * C + c) * R + r) * S + s] = src[((k * R + r) * S + s) * C + c];
}

cnn_status cnn_model_set_param(cnn_model *m, int index, const float *in) {
    const cnn_param *p = &m->net->params[index];
    if (p->kind == CNN_PARAM_COUNTER) {
        m->counters[index] = (int64_t)in[0];
        return CNN_OK;
    }
    float *dst = p->kind == CNN_PARAM_TRAINABLE ? m->params : m->buffers;
    const float *src = in;
    if (p->krsc) {
        float *tmp = host_scratch(m, (size_t)p->count);
        if (!tmp) return CNN_E_OOM;
        oihw_to_krsc(p, in, tmp);
        src = tmp;
    }
    m->fold_valid = false;
    return m->be->upload(m->be, dst + p->offset, src, (size_t)p->count * sizeof(float));
}

cnn_status cnn_model_get_param(cnn_model *m, int index, float *out) {
    const cnn_param *p = &m->net->params[index];
    if (p->kind == CNN_PARAM_COUNTER) {
        out[0] = (float)m->counters[index];
        return CNN_OK;
    }
    const float *src = (p->kind == CNN_PARAM_TRAINABLE ? m->params : m->buffers) + p->offset;
    if (!p->krsc) return m->be->download(m->be, out, src, (size_t)p->count * sizeof(float));
    float *tmp = host_scratch(m, (size_t)p->count);
    if (!tmp) return CNN_E_OOM;
    CNN_TRY(m->be->download(m->be, tmp, src, (size_t)p->count * sizeof(float)));
    krsc_to_oihw(p, tmp, out);
    return CNN_OK;
}

cnn_status cnn_model_get_grad(cnn_model *m, int index, float *out) {
    const cnn_param *p = &m->net->params[index];
    if (p->kind != CNN_PARAM_TRAINABLE || !m->grads)
        return cnn_fail(CNN_E_INVALID, "%s has no gradient", p->name);
    const float *src = m->grads + p->offset;
    if (!p->krsc) return m->be->download(m->be, out, src, (size_t)p->count * sizeof(float));
    float *tmp = host_scratch(m, (size_t)p->count);
    if (!tmp) return CNN_E_OOM;
    CNN_TRY(m->be->download(m->be, tmp, src, (size_t)p->count * sizeof(float)));
    krsc_to_oihw(p, tmp, out);
    return CNN_OK;
}

int64_t cnn_model_num_batches_tracked(const cnn_model *m) {
    for (int i = 0; i < m->net->n_params; i++)
        if (m->net->params[i].kind == CNN_PARAM_COUNTER) return m->counters[i];
    return 0;
}

void cnn_model_set_num_batches_tracked(cnn_model *m, int64_t v) {
    for (int i = 0; i < m->net->n_params; i++)
        if (m->net->params[i].kind == CNN_PARAM_COUNTER) m->counters[i] = v;
}

cnn_status cnn_model_params_changed(cnn_model *m) {
    m->fold_valid = false;
    if (!m->wact) return CNN_OK;
    for (int i = 0; i < m->net->n_params; i++) {
        const cnn_param *p = &m->net->params[i];
        if (!p->act_copy) continue;
        CNN_TRY(m->be->to_act(m->be, p->count, m->params + p->offset,
                              (char *)m->wact + (size_t)p->act_offset * m->esz));
    }
    return CNN_OK;
}

static cnn_status init_weights(cnn_model *m, uint64_t seed) {
    const cnn_net *net = m->net;
    int64_t maxc = 1;
    for (int i = 0; i < net->n_params; i++)
        if (net->params[i].count > maxc) maxc = net->params[i].count;
    float *vals = malloc((size_t)maxc * sizeof *vals);
    if (!vals) return cnn_fail(CNN_E_OOM, "out of host memory initialising weights");
    cnn_status st = CNN_OK;
    for (int i = 0; i < net->n_params && st == CNN_OK; i++) {
        init_values(&net->params[i], i, seed, vals);
        st = cnn_model_set_param(m, i, vals);
    }
    free(vals);
    CNN_TRY(st);
    return cnn_model_params_changed(m);
}

/* ---- creation ----------------------------------------------------------------------------------------- */

void cnn_model_free(cnn_model *m) {
    if (!m) return;
    cnn_backend *be = m->be;
    cnn_model_set_graphs(m, false);
    void *dev[] = {m->params, m->grads, m->buffers, m->bn, m->wact, m->pairw, m->arena, m->input, m->staging,
                   m->labels_dev, m->loss_dev};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        if (dev[i]) be->free(be, dev[i]);
    free(m->bn_off);
    free(m->train_off);
    free(m->grad_off);
    free(m->grad_acc);
    free(m->steps);
    free(m->value_of);
    free(m->eval_off);
    free(m->counters);
    free(m->host);
    cnn_net_free(m->net);
    free(m);
}

cnn_status cnn_model_create(const cnn_model_opts *opts, cnn_backend *be, int in_h, int in_w, int max_batch,
                            bool train, cnn_model **out) {
    *out = NULL;
    if (max_batch < 1 || max_batch > 1 << 20)
        return cnn_fail(CNN_E_INVALID, "batch size %d out of range [1, 1048576]", max_batch);
    cnn_net *net;
    CNN_TRY(cnn_zoo_build(opts, in_h, in_w, &net));
    cnn_model *m = calloc(1, sizeof *m);
    if (!m) {
        cnn_net_free(net);
        return cnn_fail(CNN_E_OOM, "out of host memory for the model");
    }
    m->net = net;
    m->be = be;
    m->max_batch = max_batch;
    m->train = train;
    m->esz = cnn_dtype_size(be->act_dtype);
    m->use_graphs = be->graph_begin != NULL;
    m->loss_scale = 1.0f;
    int n = net->n_nodes;
    for (int i = 0; i < n; i++) m->has_dropout |= net->nodes[i].op == CNN_OP_DROPOUT && net->nodes[i].drop_p > 0;
    m->bn_off = malloc((size_t)n * sizeof *m->bn_off);
    m->train_off = calloc((size_t)n, sizeof *m->train_off);
    m->grad_off = calloc((size_t)n, sizeof *m->grad_off);
    m->grad_acc = calloc((size_t)2 * n, sizeof *m->grad_acc);
    m->steps = calloc((size_t)n, sizeof *m->steps);
    m->value_of = malloc((size_t)n * sizeof *m->value_of);
    m->eval_off = calloc((size_t)n, sizeof *m->eval_off);
    m->counters = calloc((size_t)net->n_params, sizeof *m->counters);
    if (!m->bn_off || !m->train_off || !m->grad_off || !m->grad_acc || !m->steps || !m->value_of || !m->eval_off ||
        !m->counters) {
        cnn_model_free(m);
        return cnn_fail(CNN_E_OOM, "out of host memory for the model plan");
    }
    for (int i = 0; i < n; i++) m->value_of[i] = -2;
    int64_t bn_floats = 0;
    for (int i = 0; i < n; i++) {
        m->bn_off[i] = -1;
        if (net->nodes[i].op == CNN_OP_BN) {
            m->bn_off[i] = bn_floats;
            bn_floats += (4 * net->nodes[i].c + 63) / 64 * 64;
        }
    }
    size_t eval_bytes = plan_eval(m);
    for (int s = 0; s < m->n_steps; s++) { /* each pair's folded filters and shift (refresh_fold writes them) */
        cnn_step *sp = &m->steps[s];
        if (sp->pair < 0) continue;
        sp->pair_off = m->pairw_bytes;
        m->pairw_bytes += pair_layout_of(m, sp).bytes;
    }
    size_t train_bytes = train && eval_bytes != CNN_PLAN_OOM ? plan_train(m) : 0;
    if (eval_bytes == CNN_PLAN_OOM || train_bytes == CNN_PLAN_OOM) { /* host memory ran out: recorded */
        cnn_model_free(m);
        return CNN_E_OOM;
    }
    m->arena_bytes = eval_bytes > train_bytes ? eval_bytes : train_bytes;

    cnn_status st = CNN_OK;
#define ALLOC(ptr, bytes, what)                                                                                \
    if (st == CNN_OK) st = dev_alloc(m, (bytes), (what), (void **)&(ptr))
    ALLOC(m->params, (size_t)net->n_trainable * 4, "parameters");
    if (train) ALLOC(m->grads, (size_t)net->n_trainable * 4, "gradients");
    ALLOC(m->buffers, (size_t)(net->n_buffer ? net->n_buffer : 1) * 4, "BatchNorm running statistics");
    ALLOC(m->bn, (size_t)(bn_floats ? bn_floats : 1) * 4, "BatchNorm batch statistics");
    if (be->act_dtype != CNN_DTYPE_F32) ALLOC(m->wact, (size_t)net->n_act_weights * m->esz, "weight copies");
    if (m->pairw_bytes) ALLOC(m->pairw, m->pairw_bytes, "folded filters of fused conv pairs");
    ALLOC(m->arena, m->arena_bytes, "activations");
    ALLOC(m->input, (size_t)max_batch * 3 * in_h * in_w * m->esz, "input batch");
    m->staging_elems = (size_t)max_batch * 3 * in_h * in_w;
    if ((size_t)max_batch * net->num_classes > m->staging_elems)
        m->staging_elems = (size_t)max_batch * net->num_classes;
    if (be->act_dtype != CNN_DTYPE_F32) ALLOC(m->staging, m->staging_elems * 4, "conversion staging");
    ALLOC(m->labels_dev, (size_t)max_batch * 4, "labels");
    ALLOC(m->loss_dev, 4, "loss");
#undef ALLOC
    if (st == CNN_OK) st = init_weights(m, opts->seed);
    if (st != CNN_OK) {
        cnn_model_free(m);
        return st;
    }
    *out = m;
    return CNN_OK;
}

/* ---- input / output ----------------------------------------------------------------------------------- */

cnn_status cnn_model_upload_input(cnn_model *m, const float *nchw, int n) {
    const cnn_net *net = m->net;
    if (n < 1 || n > m->max_batch) return cnn_fail(CNN_E_INVALID, "batch %d out of range [1, %d]", n, m->max_batch);
    int C = net->in_c, H = net->in_h, W = net->in_w;
    size_t count = (size_t)n * C * H * W;
    float *nhwc = host_scratch(m, count);
    if (!nhwc) return CNN_E_OOM;
    for (int b = 0; b < n; b++)
        for (int c = 0; c < C; c++)
            for (int y = 0; y < H; y++)
                for (int x = 0; x < W; x++)
                    nhwc[(((size_t)b * H + y) * W + x) * C + c] = nchw[(((size_t)b * C + c) * H + y) * W + x];
    if (!m->staging) return m->be->upload(m->be, m->input, nhwc, count * 4);
    CNN_TRY(m->be->upload(m->be, m->staging, nhwc, count * 4));
    return m->be->to_act(m->be, (int64_t)count, m->staging, m->input);
}

static void *value_ptr(cnn_model *m, int node, cnn_mode mode) {
    if (node < 0) return m->input;
    if (mode == CNN_MODE_TRAIN) return (char *)m->arena + m->train_off[node];
    int v = m->value_of[node];
    CNN_ASSERT(v != NOT_KEPT);
    if (v < 0) return m->input;
    return (char *)m->arena + m->eval_off[v];
}

static void *grad_ptr(cnn_model *m, int node) { return (char *)m->arena + m->grad_off[node]; }

cnn_status cnn_model_download_logits(cnn_model *m, int n, float *out) {
    if (n != m->last_n) return cnn_fail(CNN_E_INVALID, "logits requested for %d images after a forward of %d", n, m->last_n);
    const void *logits = value_ptr(m, m->net->output, m->last_mode);
    size_t count = (size_t)n * m->net->num_classes;
    if (!m->staging) return m->be->download(m->be, out, logits, count * 4);
    CNN_TRY(m->be->from_act(m->be, (int64_t)count, logits, m->staging));
    return m->be->download(m->be, out, m->staging, count * 4);
}

/* ---- BN folding for eval ------------------------------------------------------------------------------- */

/* BN node bn folded to a per-channel scale and shift (host arrays of C), with the conv's bias where the node
 * before it, `conv`, has one; tmp: 5*C floats. */
static cnn_status bn_fold_host(cnn_model *m, int bn_node, int conv, float *tmp, float *scale, float *shift) {
    const cnn_net *net = m->net;
    const cnn_node *bn = &net->nodes[bn_node];
    int C = bn->c;
    float *g = tmp, *b = tmp + C, *rm = tmp + 2 * C, *rv = tmp + 3 * C, *cb = tmp + 4 * C;
    CNN_TRY(m->be->download(m->be, g, pf(m, bn->param[0]), (size_t)C * 4));
    CNN_TRY(m->be->download(m->be, b, pf(m, bn->param[1]), (size_t)C * 4));
    CNN_TRY(m->be->download(m->be, rm, pf(m, bn->param[2]), (size_t)C * 4));
    CNN_TRY(m->be->download(m->be, rv, pf(m, bn->param[3]), (size_t)C * 4));
    bool bias = conv >= 0 && net->nodes[conv].op == CNN_OP_CONV && net->nodes[conv].param[1] >= 0;
    if (bias) CNN_TRY(m->be->download(m->be, cb, pf(m, net->nodes[conv].param[1]), (size_t)C * 4));
    for (int c = 0; c < C; c++) scale[c] = (float)((double)g[c] / sqrt((double)rv[c] + 1e-5));
    for (int c = 0; c < C; c++)
        shift[c] = (float)((double)b[c] + ((bias ? (double)cb[c] : 0.0) - (double)rm[c]) * (double)scale[c]);
    return CNN_OK;
}

/* count float32 host values into act_dtype device memory at dst (through the staging buffer when act_dtype is
 * narrower: uploads and conversions run in stream order, so the staging buffer is reused chunk by chunk) */
static cnn_status upload_act(cnn_model *m, void *dst, const float *src, int64_t count) {
    if (!m->staging) return m->be->upload(m->be, dst, src, (size_t)count * 4);
    for (int64_t off = 0; off < count;) {
        int64_t c = count - off < (int64_t)m->staging_elems ? count - off : (int64_t)m->staging_elems;
        CNN_TRY(m->be->upload(m->be, m->staging, src + off, (size_t)c * 4));
        CNN_TRY(m->be->to_act(m->be, c, m->staging, (char *)dst + (size_t)off * m->esz));
        off += c;
    }
    return CNN_OK;
}

/* A pair step's operands: each conv's float32 filter times its BN's scale per output channel, in act_dtype
 * (the conv then adds scale * conv exactly as the unfused epilogue would, up to rounding), and the two BN
 * shifts summed. */
static cnn_status fold_pair(cnn_model *m, const cnn_step *sp) {
    const cnn_net *net = m->net;
    const pair_layout l = pair_layout_of(m, sp);
    const int64_t K = l.k, wmax = l.w1 > l.w2 ? l.w1 : l.w2;
    float *h = host_scratch(m, (size_t)(wmax + 8 * K));
    if (!h) return CNN_E_OOM;
    float *wt = h, *scale = h + wmax, *shift = scale + K, *sum = shift + K, *tmp = sum + K;
    const int convs[2] = {sp->pair, sp->node}, bns[2] = {sp->pair_bn, sp->bn};
    const int64_t counts[2] = {l.w1, l.w2};
    const size_t offs[2] = {0, l.o2};
    char *base = (char *)m->pairw + sp->pair_off;
    for (int part = 0; part < 2; part++) {
        const cnn_node *cv = &net->nodes[convs[part]];
        CNN_ASSERT(cv->op == CNN_OP_CONV && net->nodes[bns[part]].c == K && cv->c == K);
        CNN_TRY(bn_fold_host(m, bns[part], convs[part], tmp, scale, shift));
        CNN_TRY(m->be->download(m->be, wt, m->params + net->params[cv->param[0]].offset, (size_t)counts[part] * 4));
        int64_t g = counts[part] / K; /* R*S*C per output channel (KRSC) */
        for (int64_t k = 0; k < K; k++)
            for (int64_t i = 0; i < g; i++) wt[k * g + i] *= scale[k];
        CNN_TRY(upload_act(m, base + offs[part], wt, counts[part]));
        for (int64_t k = 0; k < K; k++) sum[k] = part ? sum[k] + shift[k] : shift[k];
    }
    return m->be->upload(m->be, base + l.os, sum, (size_t)K * 4);
}

static cnn_status refresh_fold(cnn_model *m) {
    const cnn_net *net = m->net;
    for (int s = 0; s < m->n_steps; s++) {
        const cnn_step *st = &m->steps[s];
        if (st->pair >= 0) {
            CNN_TRY(fold_pair(m, st));
            continue;
        }
        if (st->bn < 0) continue;
        int C = net->nodes[st->bn].c;
        float *h = host_scratch(m, (size_t)7 * C);
        if (!h) return CNN_E_OOM;
        CNN_TRY(bn_fold_host(m, st->bn, st->node, h + 2 * C, h, h + C));
        CNN_TRY(m->be->upload(m->be, m->bn + m->bn_off[st->bn] + 2 * C, h, (size_t)2 * C * 4)); /* scale, shift */
    }
    m->fold_valid = true;
    return CNN_OK;
}

/* ---- forward ------------------------------------------------------------------------------------------ */

static void pool_problem(const cnn_model *m, const cnn_node *nd, int n, cnn_pool2d *pl) {
    int c, h, w;
    in_chw(m->net, nd->in[0], &c, &h, &w);
    bool ok = nd->op == CNN_OP_ADAPTIVE_AVGPOOL
                  ? cnn_pool2d_init_adaptive(pl, n, c, h, w, nd->out_h, nd->out_w)
                  : cnn_pool2d_init(pl, nd->op == CNN_OP_MAXPOOL ? CNN_POOL_MAX : CNN_POOL_AVG, n, c, h, w, nd->r,
                                    nd->stride, nd->pad);
    CNN_ASSERT(ok && pl->p == nd->h && pl->q == nd->w);
}

static cnn_status run_pool(cnn_model *m, const cnn_node *nd, int n, const void *x, void *y) {
    cnn_pool2d pl;
    pool_problem(m, nd, n, &pl);
    return m->be->pool2d_forward(m->be, &pl, x, y);
}

static void conv_problem(const cnn_model *m, const cnn_node *nd, int n, cnn_conv2d *cv) {
    int c, h, w;
    in_chw(m->net, nd->in[0], &c, &h, &w);
    bool ok = cnn_conv2d_init(cv, n, c, h, w, nd->k, nd->r, nd->s, nd->stride, nd->pad);
    CNN_ASSERT(ok && cv->p == nd->h && cv->q == nd->w);
}

static cnn_linear linear_problem(const cnn_model *m, const cnn_node *nd, int n) {
    int c, h, w;
    in_chw(m->net, nd->in[0], &c, &h, &w);
    cnn_linear ln = {.n = n, .in = c * h * w, .out = nd->k};
    return ln;
}

static cnn_status forward_train(cnn_model *m, int n) {
    const cnn_net *net = m->net;
    cnn_backend *be = m->be;
    for (int i = 0; i < net->n_nodes; i++) {
        const cnn_node *nd = &net->nodes[i];
        const void *x = value_ptr(m, nd->in[0], CNN_MODE_TRAIN);
        void *y = value_ptr(m, i, CNN_MODE_TRAIN);
        int64_t count = (int64_t)n * nd->c * nd->h * nd->w;
        cnn_status st = CNN_OK;
        switch (nd->op) {
        case CNN_OP_CONV: {
            cnn_conv2d cv;
            conv_problem(m, nd, n, &cv);
            cnn_epilogue ep = {.shift = nd->param[1] >= 0 ? pf(m, nd->param[1]) : NULL};
            st = be->conv2d_fprop(be, &cv, &ep, x, weight(m, nd->param[0]), y);
            break;
        }
        case CNN_OP_BN: {
            cnn_bn bn = {.m = (int64_t)n * nd->h * nd->w, .c = nd->c, .eps = 1e-5f, .momentum = 0.1f};
            float *stats = m->bn + m->bn_off[i];
            st = be->bn_forward_train(be, &bn, x, pf(m, nd->param[0]), pf(m, nd->param[1]),
                                      (float *)pf(m, nd->param[2]), (float *)pf(m, nd->param[3]), stats,
                                      stats + nd->c, y);
            break;
        }
        case CNN_OP_RELU: st = be->relu_forward(be, count, x, y); break;
        case CNN_OP_MAXPOOL:
        case CNN_OP_AVGPOOL:
        case CNN_OP_ADAPTIVE_AVGPOOL: st = run_pool(m, nd, n, x, y); break;
        case CNN_OP_LINEAR: {
            cnn_linear ln = linear_problem(m, nd, n);
            st = be->linear_forward(be, &ln, x, weight(m, nd->param[0]), pf(m, nd->param[1]), y);
            break;
        }
        case CNN_OP_DROPOUT:
            if (nd->drop_p > 0) st = be->dropout_forward(be, count, nd->drop_p, node_seed(m->dropout_seed, i), x, y);
            else st = be->copy(be, y, x, (size_t)count * m->esz);
            break;
        case CNN_OP_FLATTEN: {
            const cnn_node *src = &net->nodes[nd->in[0]];
            cnn_shape s = {n, src->c, src->h, src->w};
            st = be->flatten_forward(be, s, x, y);
            break;
        }
        case CNN_OP_ADD: st = be->add_forward(be, count, x, value_ptr(m, nd->in[1], CNN_MODE_TRAIN), y); break;
        default: CNN_ASSERT(!"unknown op");
        }
        if (st != CNN_OK) return cnn_error_prefix(st, "layer %s (%s)", nd->name, cnn_op_name(nd->op));
        if (m->node_check) CNN_TRY(m->node_check(m->node_check_ctx, m, i, y, count));
    }
    return CNN_OK;
}

/* One step of the eval plan for n images. */
static cnn_status eval_step(cnn_model *m, int n, int s) {
    const cnn_net *net = m->net;
    cnn_backend *be = m->be;
    const cnn_step *sp = &m->steps[s];
    const cnn_node *nd = &net->nodes[sp->node];
    const void *x = value_ptr(m, nd->in[0], CNN_MODE_EVAL);
    void *y = value_ptr(m, sp->node, CNN_MODE_EVAL);
    int64_t count = (int64_t)n * nd->c * nd->h * nd->w;
    const float *scale = NULL, *shift = NULL;
    if (sp->bn >= 0) {
        const float *f = m->bn + m->bn_off[sp->bn] + 2 * net->nodes[sp->bn].c;
        scale = f;
        shift = f + net->nodes[sp->bn].c;
    }
    const void *res = sp->has_residual ? value_ptr(m, sp->residual, CNN_MODE_EVAL) : NULL;
    cnn_status st = CNN_OK;
    switch (nd->op) {
    case CNN_OP_CONV: {
        cnn_conv2d cv;
        conv_problem(m, nd, n, &cv);
        if (sp->pair >= 0) { /* the first conv's operands, then this one's; the folded filters of fold_pair */
            const cnn_node *pn = &net->nodes[sp->pair];
            cnn_conv2d cv1;
            conv_problem(m, pn, n, &cv1);
            const pair_layout l = pair_layout_of(m, sp);
            const char *base = (const char *)m->pairw + sp->pair_off;
            cnn_epilogue ep = {.shift = (const float *)(base + l.os), .relu = sp->relu};
            st = be->conv2d_fprop_pair(be, &cv1, &cv, &ep, value_ptr(m, pn->in[0], CNN_MODE_EVAL), base, x, base + l.o2,
                                       y);
            break;
        }
        if (sp->bn < 0 && nd->param[1] >= 0) shift = pf(m, nd->param[1]);
        cnn_epilogue ep = {.scale = scale, .shift = shift, .residual = res, .relu = sp->relu};
        if (sp->pool >= 0) {
            cnn_pool2d pl;
            pool_problem(m, &net->nodes[sp->pool], n, &pl);
            st = be->conv2d_fprop_pool(be, &cv, &ep, &pl, x, weight(m, nd->param[0]), y);
        } else {
            st = be->conv2d_fprop(be, &cv, &ep, x, weight(m, nd->param[0]), y);
        }
        break;
    }
    case CNN_OP_BN:
        st = be->scale_shift(be, (int64_t)n * nd->h * nd->w, nd->c, x, scale, shift, res, sp->relu, y);
        break;
    case CNN_OP_ADD:
        st = be->scale_shift(be, (int64_t)n * nd->h * nd->w, nd->c, x, NULL, NULL,
                             value_ptr(m, nd->in[1], CNN_MODE_EVAL), sp->relu, y);
        break;
    case CNN_OP_RELU: st = be->relu_forward(be, count, x, y); break;
    case CNN_OP_MAXPOOL:
    case CNN_OP_AVGPOOL:
    case CNN_OP_ADAPTIVE_AVGPOOL: st = run_pool(m, nd, n, x, y); break;
    case CNN_OP_LINEAR: {
        cnn_linear ln = linear_problem(m, nd, n);
        st = be->linear_forward(be, &ln, x, weight(m, nd->param[0]), pf(m, nd->param[1]), y);
        break;
    }
    case CNN_OP_FLATTEN: {
        const cnn_node *src = &net->nodes[nd->in[0]];
        cnn_shape sh = {n, src->c, src->h, src->w};
        st = be->flatten_forward(be, sh, x, y);
        break;
    }
    default: CNN_ASSERT(!"op has no eval step");
    }
    if (st != CNN_OK) return cnn_error_prefix(st, "layer %s (%s)", nd->name, cnn_op_name(nd->op));
    return CNN_OK;
}

static cnn_status forward_eval(cnn_model *m, int n) {
    for (int s = 0; s < m->n_steps; s++) CNN_TRY(eval_step(m, n, s));
    return CNN_OK;
}

int cnn_model_eval_steps(const cnn_model *m) { return m->n_steps; }

cnn_eval_step cnn_model_eval_step(const cnn_model *m, int s) {
    CNN_ASSERT(s >= 0 && s < m->n_steps);
    const cnn_step *sp = &m->steps[s];
    cnn_eval_step e = {.node = sp->node, .bn = sp->bn, .has_residual = sp->has_residual,
                       .residual = sp->residual, .relu = sp->relu, .pool = sp->pool, .pair = sp->pair,
                       .pair_bn = sp->pair_bn};
    return e;
}

cnn_status cnn_model_forward_eval_steps(cnn_model *m, int n, int first, int count) {
    if (n < 1 || n > m->max_batch) return cnn_fail(CNN_E_INVALID, "batch %d out of range [1, %d]", n, m->max_batch);
    if (first < 0 || count < 0 || first > m->n_steps || count > m->n_steps - first)
        return cnn_fail(CNN_E_INVALID, "eval steps [%d, %d) out of range [0, %d)", first, first + count, m->n_steps);
    if (!m->fold_valid) CNN_TRY(refresh_fold(m));
    m->last_n = n;
    m->last_mode = CNN_MODE_EVAL;
    for (int s = first; s < first + count; s++) CNN_TRY(eval_step(m, n, s));
    return CNN_OK;
}

/* ---- graphs ------------------------------------------------------------------------------------------- */

/* Device work that depends only on (kind, n, eps) and on buffer addresses fixed at creation is recorded once
 * into a backend graph and replayed. The first call of a key runs eagerly (kernels compile and workspaces are
 * allocated outside any capture), the second captures, later ones replay. Host-side effects (BN counters,
 * label uploads, loss downloads) stay outside the recorded functions. */
typedef cnn_status (*device_fn)(cnn_model *m, int n, float eps);

static cnn_status fwd_train_fn(cnn_model *m, int n, float eps) { (void)eps; return forward_train(m, n); }
static cnn_status fwd_eval_fn(cnn_model *m, int n, float eps) { (void)eps; return forward_eval(m, n); }
static cnn_status backward_ops(cnn_model *m, int n, float eps);

static cnn_status run_graphed(cnn_model *m, int kind, int n, float eps, device_fn fn) {
    cnn_backend *be = m->be;
    if (!m->use_graphs || !be->graph_begin || m->node_check) return fn(m, n, eps);
    graph_entry *e = NULL;
    for (int i = 0; i < m->n_graphs; i++)
        if (m->graphs[i].kind == kind && m->graphs[i].n == n && m->graphs[i].eps == eps &&
            m->graphs[i].scale == m->loss_scale)
            e = &m->graphs[i];
    if (!e) {
        if (m->n_graphs == MAX_GRAPHS) return fn(m, n, eps); /* many shapes: run eagerly */
        e = &m->graphs[m->n_graphs++];
        *e = (graph_entry){.kind = kind, .n = n, .eps = eps, .scale = m->loss_scale};
    }
    if (e->graph) return be->graph_launch(be, e->graph);
    if (e->runs++ == 0) return fn(m, n, eps);
    CNN_TRY(be->graph_begin(be));
    cnn_status st = fn(m, n, eps);
    void *g = NULL;
    cnn_status st2 = be->graph_end(be, &g);
    if (st != CNN_OK) {
        if (g) be->graph_free(be, g);
        return st;
    }
    CNN_TRY(st2);
    e->graph = g;
    return be->graph_launch(be, g);
}

void cnn_model_set_loss_scale(cnn_model *m, float scale) { m->loss_scale = scale; }

void cnn_model_set_graphs(cnn_model *m, bool on) {
    m->use_graphs = on;
    for (int i = 0; i < m->n_graphs; i++)
        if (m->graphs[i].graph) m->be->graph_free(m->be, m->graphs[i].graph);
    m->n_graphs = 0;
}

cnn_status cnn_model_forward(cnn_model *m, int n, cnn_mode mode, uint64_t dropout_seed) {
    if (n < 1 || n > m->max_batch) return cnn_fail(CNN_E_INVALID, "batch %d out of range [1, %d]", n, m->max_batch);
    if (mode == CNN_MODE_TRAIN && !m->train)
        return cnn_fail(CNN_E_INVALID, "train-mode forward on a model created for inference");
    m->last_n = n;
    m->last_mode = mode;
    m->dropout_seed = dropout_seed;
    if (mode == CNN_MODE_EVAL) {
        if (!m->fold_valid) CNN_TRY(refresh_fold(m));
        return run_graphed(m, GRAPH_EVAL, n, 0.0f, fwd_eval_fn);
    }
    /* dropout masks depend on a per-step seed, which a recorded graph would freeze */
    CNN_TRY(m->has_dropout ? forward_train(m, n) : run_graphed(m, GRAPH_TRAIN_FWD, n, 0.0f, fwd_train_fn));
    for (int i = 0; i < m->net->n_nodes; i++)
        if (m->net->nodes[i].op == CNN_OP_BN) m->counters[m->net->nodes[i].param[4]]++;
    m->fold_valid = false; /* running statistics moved */
    return CNN_OK;
}

/* ---- loss and backward -------------------------------------------------------------------------------- */

static cnn_status upload_labels(cnn_model *m, int n, const int64_t *labels) {
    int32_t *l32 = (int32_t *)host_scratch(m, (size_t)n);
    if (!l32) return CNN_E_OOM;
    for (int i = 0; i < n; i++) {
        if (labels[i] < 0 || labels[i] >= m->net->num_classes)
            return cnn_fail(CNN_E_MISMATCH, "label %lld of image %d out of range [0, %d)", (long long)labels[i], i,
                            m->net->num_classes);
        l32[i] = (int32_t)labels[i];
    }
    return m->be->upload(m->be, m->labels_dev, l32, (size_t)n * 4);
}

static cnn_status check_loss_args(cnn_model *m, int n, float eps) {
    if (n != m->last_n) return cnn_fail(CNN_E_INVALID, "loss for %d images after a forward of %d", n, m->last_n);
    if (!(eps >= 0.0f && eps <= 1.0f)) return cnn_fail(CNN_E_INVALID, "label smoothing %g out of [0, 1]", (double)eps);
    return CNN_OK;
}

cnn_status cnn_model_loss(cnn_model *m, int n, const int64_t *labels, float label_smoothing, float *loss_out) {
    CNN_TRY(check_loss_args(m, n, label_smoothing));
    CNN_TRY(upload_labels(m, n, labels));
    cnn_xent xe = {.n = n, .classes = m->net->num_classes, .label_smoothing = label_smoothing};
    CNN_TRY(m->be->xent_forward_backward(m->be, &xe, value_ptr(m, m->net->output, m->last_mode), m->labels_dev,
                                         m->loss_dev, NULL));
    return m->be->download(m->be, loss_out, m->loss_dev, 4);
}

cnn_status cnn_model_backward(cnn_model *m, int n, const int64_t *labels, float label_smoothing, float *loss_out) {
    if (!m->train || m->last_mode != CNN_MODE_TRAIN)
        return cnn_fail(CNN_E_INVALID, "backward needs a train-mode forward first");
    CNN_TRY(check_loss_args(m, n, label_smoothing));
    CNN_TRY(upload_labels(m, n, labels));
    CNN_TRY(run_graphed(m, GRAPH_BACKWARD, n, label_smoothing, backward_ops));
    return loss_out ? m->be->download(m->be, loss_out, m->loss_dev, 4) : CNN_OK;
}

/* The loss, its gradient and the backward pass: device work only. */
static cnn_status backward_ops(cnn_model *m, int n, float label_smoothing) {
    const cnn_net *net = m->net;
    cnn_backend *be = m->be;
    cnn_xent xe = {.n = n, .classes = net->num_classes, .label_smoothing = label_smoothing,
                   .grad_scale = m->loss_scale};
    CNN_TRY(be->xent_forward_backward(be, &xe, value_ptr(m, net->output, CNN_MODE_TRAIN), m->labels_dev, m->loss_dev,
                                      grad_ptr(m, net->output)));
    for (int i = net->n_nodes - 1; i >= 0; i--) {
        const cnn_node *nd = &net->nodes[i];
        const void *dy = grad_ptr(m, i);
        const void *x = value_ptr(m, nd->in[0], CNN_MODE_TRAIN);
        void *dx = nd->in[0] >= 0 ? grad_ptr(m, nd->in[0]) : NULL;
        bool acc = m->grad_acc[2 * i];
        int64_t count = (int64_t)n * nd->c * nd->h * nd->w;
        cnn_status st = CNN_OK;
        switch (nd->op) {
        case CNN_OP_CONV: {
            cnn_conv2d cv;
            conv_problem(m, nd, n, &cv);
            st = be->conv2d_wgrad(be, &cv, x, dy, gradp(m, nd->param[0]));
            if (st == CNN_OK && nd->param[1] >= 0)
                st = be->channel_sum(be, (int64_t)n * cv.p * cv.q, cv.k, dy, gradp(m, nd->param[1]));
            if (st == CNN_OK && dx) st = be->conv2d_dgrad(be, &cv, dy, weight(m, nd->param[0]), dx, acc);
            break;
        }
        case CNN_OP_BN: {
            CNN_ASSERT(dx);
            cnn_bn bn = {.m = (int64_t)n * nd->h * nd->w, .c = nd->c, .eps = 1e-5f, .momentum = 0.1f};
            const float *stats = m->bn + m->bn_off[i];
            st = be->bn_backward(be, &bn, x, dy, pf(m, nd->param[0]), stats, stats + nd->c, dx, acc,
                                 gradp(m, nd->param[0]), gradp(m, nd->param[1]));
            break;
        }
        case CNN_OP_RELU:
            if (dx) st = be->relu_backward(be, count, value_ptr(m, i, CNN_MODE_TRAIN), dy, dx, acc);
            break;
        case CNN_OP_MAXPOOL:
        case CNN_OP_AVGPOOL:
        case CNN_OP_ADAPTIVE_AVGPOOL: {
            if (!dx) break;
            int c, h, w;
            in_chw(net, nd->in[0], &c, &h, &w);
            cnn_pool2d pl;
            bool ok = nd->op == CNN_OP_ADAPTIVE_AVGPOOL
                          ? cnn_pool2d_init_adaptive(&pl, n, c, h, w, nd->out_h, nd->out_w)
                          : cnn_pool2d_init(&pl, nd->op == CNN_OP_MAXPOOL ? CNN_POOL_MAX : CNN_POOL_AVG, n, c, h, w,
                                            nd->r, nd->stride, nd->pad);
            CNN_ASSERT(ok);
            st = be->pool2d_backward(be, &pl, x, value_ptr(m, i, CNN_MODE_TRAIN), dy, dx, acc);
            break;
        }
        case CNN_OP_LINEAR: {
            cnn_linear ln = linear_problem(m, nd, n);
            st = be->linear_backward(be, &ln, x, weight(m, nd->param[0]), dy, dx, acc, gradp(m, nd->param[0]),
                                     gradp(m, nd->param[1]));
            break;
        }
        case CNN_OP_DROPOUT:
            if (!dx) break;
            if (nd->drop_p > 0)
                st = be->dropout_backward(be, count, nd->drop_p, node_seed(m->dropout_seed, i), dy, dx, acc);
            else st = be->pass_backward(be, count, dy, dx, acc);
            break;
        case CNN_OP_FLATTEN: {
            if (!dx) break;
            const cnn_node *src = &net->nodes[nd->in[0]];
            cnn_shape s = {n, src->c, src->h, src->w};
            st = be->flatten_backward(be, s, dy, dx, acc);
            break;
        }
        case CNN_OP_ADD:
            if (dx) st = be->pass_backward(be, count, dy, dx, acc);
            if (st == CNN_OK && nd->in[1] >= 0)
                st = be->pass_backward(be, count, dy, grad_ptr(m, nd->in[1]), m->grad_acc[2 * i + 1]);
            break;
        default: CNN_ASSERT(!"unknown op");
        }
        if (st != CNN_OK) return cnn_error_prefix(st, "backward of layer %s (%s)", nd->name, cnn_op_name(nd->op));
    }
    return CNN_OK;
}

/* ---- weights I/O ---------------------------------------------------------------------------------------- */

static bool is_float_dtype(cnn_dtype t) {
    return t == CNN_DTYPE_F32 || t == CNN_DTYPE_F16 || t == CNN_DTYPE_BF16;
}

cnn_status cnn_model_load_st(cnn_model *m, const cnn_st_file *f, const char *path, const char *ignore_prefix) {
    const cnn_net *net = m->net;
    char b1[128], b2[128];
    /* every tensor in the file must be a parameter (or carry ignore_prefix) */
    for (int e = 0; e < f->n_entries; e++) {
        const char *name = f->entries[e].name;
        if (ignore_prefix && strncmp(name, ignore_prefix, strlen(ignore_prefix)) == 0) continue;
        if (!cnn_net_find_param(net, name))
            return cnn_fail(CNN_E_MISMATCH, "%s: unexpected tensor \"%s\" (not a parameter of %s)", path, name,
                            net->arch);
    }
    for (int i = 0; i < net->n_params; i++) {
        const cnn_param *p = &net->params[i];
        const cnn_st_entry *e = cnn_st_find(f, p->name);
        if (!e) return cnn_fail(CNN_E_MISMATCH, "%s: missing tensor \"%s\" for %s", path, p->name, net->arch);
        bool same = e->ndim == p->ndim;
        for (int d = 0; same && d < p->ndim; d++) same = e->shape[d] == p->shape[d];
        if (!same)
            return cnn_fail(CNN_E_MISMATCH, "%s: tensor \"%s\" has shape %s, %s expects %s", path, p->name,
                            cnn_shape_str(e->shape, e->ndim, b1, sizeof b1), net->arch,
                            cnn_shape_str(p->shape, p->ndim, b2, sizeof b2));
        if (p->kind == CNN_PARAM_COUNTER) {
            if (e->dtype != CNN_DTYPE_I64)
                return cnn_fail(CNN_E_MISMATCH, "%s: tensor \"%s\" has dtype %s, expected I64", path, p->name,
                                cnn_dtype_name(e->dtype));
            int64_t v;
            memcpy(&v, cnn_st_tensor_data(f, e), 8);
            m->counters[i] = v;
            continue;
        }
        if (!is_float_dtype(e->dtype))
            return cnn_fail(CNN_E_MISMATCH, "%s: tensor \"%s\" has dtype %s, expected F32, F16 or BF16", path,
                            p->name, cnn_dtype_name(e->dtype));
        float *vals = malloc((size_t)p->count * sizeof *vals);
        if (!vals) return cnn_fail(CNN_E_OOM, "out of host memory loading %s", p->name);
        cnn_convert_to_f32(vals, cnn_st_tensor_data(f, e), e->dtype, (size_t)p->count);
        cnn_status st = m->allow_nonfinite ? CNN_OK : cnn_param_values_check(p, vals, path);
        if (st == CNN_OK) st = cnn_model_set_param(m, i, vals);
        free(vals);
        CNN_TRY(st);
    }
    return cnn_model_params_changed(m);
}

cnn_status cnn_model_load(cnn_model *m, const char *path) {
    cnn_st_file f;
    CNN_TRY(cnn_st_open(path, &f));
    cnn_status st = cnn_model_load_st(m, &f, path, NULL);
    cnn_st_free(&f);
    return st;
}

cnn_status cnn_model_state_items(cnn_model *m, cnn_st_item *items, float **host_out) {
    const cnn_net *net = m->net;
    int64_t total = 0;
    for (int i = 0; i < net->n_params; i++) total += net->params[i].kind == CNN_PARAM_COUNTER ? 2 : net->params[i].count;
    float *host = malloc((size_t)(total ? total : 1) * sizeof *host);
    if (!host) return cnn_fail(CNN_E_OOM, "out of host memory (%lld floats) saving weights", (long long)total);
    int64_t off = 0;
    for (int i = 0; i < net->n_params; i++) {
        const cnn_param *p = &net->params[i];
        cnn_st_item *it = &items[i];
        memset(it, 0, sizeof *it);
        it->name = p->name;
        it->ndim = p->ndim;
        for (int d = 0; d < p->ndim; d++) it->shape[d] = p->shape[d];
        if (p->kind == CNN_PARAM_COUNTER) {
            it->dtype = CNN_DTYPE_I64;
            memcpy(host + off, &m->counters[i], 8);
            it->data = host + off;
            off += 2;
            continue;
        }
        it->dtype = CNN_DTYPE_F32;
        cnn_status st = cnn_model_get_param(m, i, host + off);
        if (st != CNN_OK) {
            free(host);
            return st;
        }
        it->data = host + off;
        off += p->count;
    }
    *host_out = host;
    return CNN_OK;
}

cnn_status cnn_model_save(cnn_model *m, const char *path) {
    const cnn_net *net = m->net;
    cnn_st_item *items = calloc((size_t)net->n_params, sizeof *items);
    if (!items) return cnn_fail(CNN_E_OOM, "out of host memory saving weights");
    float *host = NULL;
    cnn_status st = cnn_model_state_items(m, items, &host);
    if (st == CNN_OK) st = cnn_items_check(items, net->n_params, path); /* never a model full of NaN */
    if (st == CNN_OK) st = cnn_st_write(path, items, net->n_params, NULL, 0);
    free(host);
    free(items);
    return st;
}
