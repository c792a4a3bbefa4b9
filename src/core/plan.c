/* plan.c — where each value lives: the lifetimes of a plan's values (and, in training, gradients) and the arena
 * packer that places buffers with disjoint lifetimes in the same memory. Greedy: the largest buffers first,
 * each at the lowest aligned offset that does not collide with an already-placed buffer alive at the same time.
 * O(n^2) in the number of buffers (hundreds). Which nodes form a step is fuse.c's. Also the data-parallel
 * gradient buckets: which gradients are complete after each backward step. */
#include "plan.h"

#include "cnn/cnn.h"
#include "model.h"

#include <stdlib.h>

static size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

static int by_size_desc(const void *pa, const void *pb, void *ctx) {
    const cnn_interval *iv = ctx;
    const cnn_interval *a = &iv[*(const int *)pa], *b = &iv[*(const int *)pb];
    if (a->bytes != b->bytes) return a->bytes > b->bytes ? -1 : 1;
    return *(const int *)pa - *(const int *)pb;
}

/* insertion sort keeps this free of qsort_r portability questions; n is small */
static void sort_order(int *order, int n, cnn_interval *iv) {
    for (int i = 1; i < n; i++) {
        int v = order[i], j = i - 1;
        while (j >= 0 && by_size_desc(&order[j], &v, iv) > 0) {
            order[j + 1] = order[j];
            j--;
        }
        order[j + 1] = v;
    }
}

size_t cnn_plan_arena(cnn_interval *iv, int n, size_t align) {
    int *order = malloc((size_t)(n ? n : 1) * sizeof *order);
    int *placed = malloc((size_t)(n ? n : 1) * sizeof *placed);
    if (!order || !placed) {
        free(order);
        free(placed);
        cnn_fail(CNN_E_OOM, "out of host memory planning an arena of %d buffers", n);
        return CNN_PLAN_OOM;
    }
    for (int i = 0; i < n; i++) order[i] = i;
    sort_order(order, n, iv);
    size_t total = 0;
    int n_placed = 0;
    for (int oi = 0; oi < n; oi++) {
        cnn_interval *a = &iv[order[oi]];
        size_t size = align_up(a->bytes ? a->bytes : 1, align);
        size_t off = 0;
        /* Repeat: bump past any conflicting placed buffer until a full pass finds none. */
        for (bool moved = true; moved;) {
            moved = false;
            for (int pj = 0; pj < n_placed; pj++) {
                const cnn_interval *b = &iv[placed[pj]];
                if (b->last < a->first || a->last < b->first) continue; /* disjoint in time */
                size_t bsize = align_up(b->bytes ? b->bytes : 1, align);
                if (off < b->offset + bsize && b->offset < off + size) {
                    off = align_up(b->offset + bsize, align);
                    moved = true;
                }
            }
        }
        a->offset = off;
        placed[n_placed++] = order[oi];
        if (off + size > total) total = off + size;
    }
    free(order);
    free(placed);
    return total;
}

/* ---- node shapes ---------------------------------------------------------------------------------------- */

void cnn_node_in_chw(const cnn_net *net, int in, int *c, int *h, int *w) {
    if (in < 0) {
        *c = net->in_c; *h = net->in_h; *w = net->in_w;
    } else {
        *c = net->nodes[in].c; *h = net->nodes[in].h; *w = net->nodes[in].w;
    }
}

void cnn_node_conv2d(const cnn_net *net, const cnn_node *nd, int n, cnn_conv2d *cv) {
    int c, h, w;
    cnn_node_in_chw(net, nd->in[0], &c, &h, &w);
    bool ok = cnn_conv2d_init(cv, n, c, h, w, nd->k, nd->r, nd->s, nd->stride, nd->pad);
    CNN_ASSERT(ok && cv->p == nd->h && cv->q == nd->w);
}

void cnn_node_pool2d(const cnn_net *net, const cnn_node *nd, int n, cnn_pool2d *pl) {
    int c, h, w;
    cnn_node_in_chw(net, nd->in[0], &c, &h, &w);
    bool ok = nd->op == CNN_OP_ADAPTIVE_AVGPOOL
                  ? cnn_pool2d_init_adaptive(pl, n, c, h, w, nd->out_h, nd->out_w)
                  : cnn_pool2d_init(pl, nd->op == CNN_OP_MAXPOOL ? CNN_POOL_MAX : CNN_POOL_AVG, n, c, h, w, nd->r,
                                    nd->stride, nd->pad);
    CNN_ASSERT(ok && pl->p == nd->h && pl->q == nd->w);
}

static size_t node_bytes(const cnn_net *net, int i, int n, size_t esz) {
    const cnn_node *nd = &net->nodes[i];
    return (size_t)n * nd->c * nd->h * nd->w * esz;
}

static int resolve(const cnn_plan *p, int node) { return node < 0 ? -1 : p->value_of[node]; }

/* ---- train: values and gradients -------------------------------------------------------------------------- */

/* what a train step's backward reads besides its output's gradient: its inputs (conv, BN, pooling, linear) and its
 * own output (ReLU, pooling, a BN or conv step ending in a ReLU: the mask) */
static bool bwd_reads_input(cnn_op op) {
    return op == CNN_OP_CONV || op == CNN_OP_BN || op == CNN_OP_MAXPOOL || op == CNN_OP_AVGPOOL ||
           op == CNN_OP_ADAPTIVE_AVGPOOL || op == CNN_OP_LINEAR;
}
static bool bwd_reads_output(const cnn_step *sp, cnn_op op) {
    return op == CNN_OP_RELU || op == CNN_OP_MAXPOOL || op == CNN_OP_AVGPOOL || op == CNN_OP_ADAPTIVE_AVGPOOL ||
           ((op == CNN_OP_BN || op == CNN_OP_CONV) && sp->relu);
}

/* Train timeline over the S steps: forward of step s at time s, the loss at S, backward of step s at 2S - s.
 * Values and gradients (one each per step, at its `out` node) share one arena. */
size_t cnn_plan_train(const cnn_net *net, int max_batch, size_t esz, cnn_plan *p) {
    const int S = p->n_train_steps, T = 2 * S;
    int *step_of = malloc((size_t)net->n_nodes * sizeof *step_of); /* out node -> its step */
    cnn_interval *iv = calloc((size_t)2 * (S ? S : 1), sizeof *iv);
    if (!step_of || !iv) {
        free(step_of), free(iv);
        return cnn_fail(CNN_E_OOM, "out of host memory planning"), CNN_PLAN_OOM;
    }
    for (int i = 0; i < net->n_nodes; i++) step_of[i] = -1;
    for (int s = 0; s < S; s++) {
        const cnn_step *sp = &p->train_steps[s];
        step_of[sp->out] = s;
        cnn_interval *a = &iv[s], *g = &iv[S + s];
        a->bytes = g->bytes = node_bytes(net, sp->out, max_batch, esz);
        a->first = s;
        a->last = sp->out == net->output ? T + 1 : s; /* logits stay readable after the step */
        if (bwd_reads_output(sp, net->nodes[sp->node].op)) a->last = T - s;
        /* the gradient: from its latest reader's backward (or the loss) to this step's backward */
        g->first = sp->out == net->output ? S : T;
        g->last = T - s;
    }
    for (int s = 0; s < S; s++) {
        const cnn_step *sp = &p->train_steps[s];
        int in[2];
        cnn_train_step_inputs(net, sp, in);
        for (int k = 0; k < 2; k++) {
            if (in[k] < 0) continue;
            const int t = step_of[in[k]];
            CNN_ASSERT(t >= 0 && t < s); /* an input is an earlier step's output */
            if (iv[t].last < s) iv[t].last = s;
            if (k == 0 && bwd_reads_input(net->nodes[sp->node].op) && iv[t].last < T - s) iv[t].last = T - s;
            if (iv[S + t].first > T - s) iv[S + t].first = T - s;
        }
    }
    size_t total = cnn_plan_arena(iv, 2 * S, CNN_ARENA_ALIGN);
    /* accumulate flags: in backward order the first writer of a gradient overwrites */
    bool *written = total == CNN_PLAN_OOM ? NULL : calloc((size_t)net->n_nodes, sizeof *written);
    if (!written) {
        free(iv), free(step_of);
        return total == CNN_PLAN_OOM ? total : (cnn_fail(CNN_E_OOM, "out of host memory planning"), CNN_PLAN_OOM);
    }
    for (int s = 0; s < S; s++) {
        p->train_off[p->train_steps[s].out] = iv[s].offset;
        p->grad_off[p->train_steps[s].out] = iv[S + s].offset;
    }
    for (int s = S - 1; s >= 0; s--) {
        int in[2];
        cnn_train_step_inputs(net, &p->train_steps[s], in);
        for (int k = 0; k < 2; k++) {
            if (in[k] < 0) continue;
            p->grad_acc[2 * s + k] = written[in[k]];
            written[in[k]] = true;
        }
    }
    free(written);
    free(iv);
    free(step_of);
    return total;
}

/* ---- eval: the steps' values -------------------------------------------------------------------------- */

/* Eval: step s stores its value at time s; it lives until the last step that reads it (the logits: past the
 * end). */
size_t cnn_plan_eval(const cnn_net *net, int max_batch, size_t esz, cnn_plan *p) {
    int n = net->n_nodes;
    /* lifetimes over step indices */
    cnn_interval *iv = calloc((size_t)(p->n_steps ? p->n_steps : 1), sizeof *iv);
    int *step_of = malloc((size_t)n * sizeof *step_of);
    if (!iv || !step_of) {
        free(iv), free(step_of);
        return cnn_fail(CNN_E_OOM, "out of host memory planning"), CNN_PLAN_OOM;
    }
    for (int i = 0; i < n; i++) step_of[i] = -1;
    for (int s = 0; s < p->n_steps; s++) {
        step_of[p->steps[s].node] = s;
        const cnn_step *sp = &p->steps[s]; /* a fused pool's output is what the step stores */
        iv[s].bytes = node_bytes(net, sp->pool >= 0 ? sp->pool : sp->node, max_batch, esz);
        iv[s].first = iv[s].last = s;
    }
    for (int s = 0; s < p->n_steps; s++) {
        const cnn_step *st = &p->steps[s];
        const cnn_node *nd = &net->nodes[st->node];
        int reads[4] = {resolve(p, nd->in[0]), nd->op == CNN_OP_ADD ? resolve(p, nd->in[1]) : -1,
                        st->has_residual ? resolve(p, st->residual) : -1,
                        st->pair >= 0 ? resolve(p, net->nodes[st->pair].in[0]) : -1};
        for (int r = 0; r < 4; r++) {
            if (reads[r] < 0) continue;
            int ps = step_of[reads[r]];
            CNN_ASSERT(ps >= 0 && ps < s);
            if (iv[ps].last < s) iv[ps].last = s;
        }
    }
    int out_step = step_of[resolve(p, net->output)];
    CNN_ASSERT(out_step >= 0);
    iv[out_step].last = p->n_steps;
    size_t total = cnn_plan_arena(iv, p->n_steps, CNN_ARENA_ALIGN);
    for (int s = 0; s < p->n_steps && total != CNN_PLAN_OOM; s++) p->eval_off[p->steps[s].node] = iv[s].offset;
    free(iv);
    free(step_of);
    return total;
}

/* ---- data-parallel gradient buckets -------------------------------------------------------------------- */

/* The parameters whose gradients backward train step s writes: conv, BN and linear nodes' trainable ones. */
static int step_params(const cnn_net *net, const cnn_plan *p, int s, int out[2]) {
    const cnn_node *nd = &net->nodes[p->train_steps[s].node];
    int k = 0;
    if (nd->op != CNN_OP_CONV && nd->op != CNN_OP_BN && nd->op != CNN_OP_LINEAR) return 0;
    for (int j = 0; j < 2; j++)
        if (nd->param[j] >= 0 && net->params[nd->param[j]].kind == CNN_PARAM_TRAINABLE) out[k++] = nd->param[j];
    return k;
}

/* Buckets by simulating the backward: after each step, the gradients at and above `frontier` (an arena offset)
 * are all written; a bucket is cut whenever that complete suffix has grown by bucket_bytes since the last cut,
 * and at the end. Every rank computes the same list, so they issue the same sums in the same order. */
int cnn_plan_buckets(const cnn_net *net, const cnn_plan *p, size_t bucket_bytes, cnn_grad_bucket *out) {
    const int64_t per = (int64_t)(bucket_bytes / sizeof(float)) > 0 ? (int64_t)(bucket_bytes / sizeof(float)) : 1;
    bool *done = cnn_calloc((size_t)net->n_params, 1, "bucket plan");
    if (!done) return -1;
    int n = 0;
    int64_t cut = net->n_trainable; /* [frontier, cut): complete, not yet issued */
    for (int s = p->n_train_steps - 1; s >= 0; s--) {
        int ps[2], k = step_params(net, p, s, ps);
        for (int j = 0; j < k; j++) done[ps[j]] = true;
        /* the lowest offset with every trainable gradient at or above it written */
        int64_t frontier = 0;
        for (int i = 0; i < net->n_params; i++) {
            const cnn_param *q = &net->params[i];
            if (q->kind == CNN_PARAM_TRAINABLE && !done[i] && q->offset + q->count > frontier)
                frontier = q->offset + q->count;
        }
        const bool last = s == 0;
        if (last) frontier = 0;
        if (frontier < cut && (cut - frontier >= per || last)) {
            out[n++] = (cnn_grad_bucket){.step = s, .lo = frontier, .hi = cut};
            cut = frontier;
        }
    }
    free(done);
    return n;
}

/* The model's gradient buckets (cnn_plan_buckets) and communicator. */
cnn_status cnn_model_set_comm(cnn_model *m, void *comm, const cnn_dp_opts *o) {
    free(m->buckets);
    m->buckets = NULL;
    m->n_buckets = 0;
    m->comm = NULL;
    m->dp = (cnn_dp_opts){.world = 1};
    if (m->sum_scratch) m->be->free(m->be, m->sum_scratch);
    m->sum_scratch = NULL;
    cnn_model_set_graphs(m, m->use_graphs); /* recorded passes hold the sums or not: record them again */
    if (!comm) return CNN_OK;
    if (!m->train) return cnn_fail(CNN_E_INVALID, "data-parallel gradients on a model created for inference");
    if (!m->be->comm_allreduce) return cnn_fail(CNN_E_UNSUPPORTED, "the %s backend has no collectives", m->be->name);
    if (o->world < 1) return cnn_fail(CNN_E_INVALID, "data parallel over %d ranks", o->world);
    if (o->bf16_sums && !m->be->comm_allreduce_bf16)
        return cnn_fail(CNN_E_UNSUPPORTED, "the %s backend has no bfloat16 gradient sums", m->be->name);
    if (o->bf16_sums)
        CNN_TRY(m->be->alloc(m->be, (size_t)(m->net->n_trainable > 0 ? m->net->n_trainable : 1) * 2,
                             "bf16 gradient sums", &m->sum_scratch));
    m->comm = comm;
    m->dp = *o;
    if (o->bucket_bytes == 0) return CNN_OK;
    m->buckets = cnn_calloc((size_t)m->net->n_params + 1, sizeof *m->buckets, "bucket plan");
    m->n_buckets = m->buckets ? cnn_plan_buckets(m->net, &m->plan, o->bucket_bytes, m->buckets) : -1;
    if (m->n_buckets < 0) {
        free(m->buckets);
        m->buckets = NULL, m->n_buckets = 0, m->comm = NULL;
        return CNN_E_OOM;
    }
    return CNN_OK;
}
