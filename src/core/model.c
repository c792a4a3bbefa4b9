/* model.c — a network bound to a backend: creation (arenas sized by the plans, plan.h), input and output, the BN
 * fold of the eval plan, and the executor: one op dispatch (forward_step) for the steps of both plans, the
 * backward pass, and graph capture/replay of each (the eval plan's BN fold is fold.c's). Parameters and their files are weights.c's; the struct and
 * its arenas are described in model.h.
 *
 * Two plans over the same graph (plan.h; fuse.c and plan.c build them):
 *   train  every node runs as itself (batch statistics, dropout); gradients flow back node by node, an
 *          activation gradient that two consumers write is accumulated by the second writer.
 *   eval   BatchNorm folded into scale/shift, conv -> BN -> residual add -> ReLU chains fused into the conv's
 *          epilogue, a max-pool after such a chain too where the backend has a kernel for it, and two conv ->
 *          BN branches summed in one conv2d_fprop_pair (both BN scales folded into the filters). Its steps can
 *          also be run one at a time, eagerly (cnn_model_forward_eval_steps), for per-layer timing.
 */
#include "cnn/net.h"
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    CNN_TRY(m->be->alloc(m->be, bytes ? bytes : CNN_ARENA_ALIGN, what, out));
    m->device_bytes += bytes;
    return CNN_OK;
}

float *cnn_model_host_scratch(cnn_model *m, size_t elems) {
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

/* The weight a conv/linear reads: the act_dtype copy, or the float32 master when act_dtype is F32. */
static const void *weight(const cnn_model *m, int pi) {
    const cnn_param *p = &m->net->params[pi];
    if (!m->wact) return m->params + p->offset;
    return (const char *)m->wact + (size_t)p->offset * m->esz;
}

static float *gradp(const cnn_model *m, int pi) { return m->grads + m->net->params[pi].offset; }

static uint64_t node_seed(uint64_t seed, int node) {
    return seed * 0x9E3779B97F4A7C15ULL + (uint64_t)node * 0xBF58476D1CE4E5B9ULL + 1;
}

/* ---- creation ----------------------------------------------------------------------------------------- */

void cnn_model_free(cnn_model *m) {
    if (!m) return;
    cnn_backend *be = m->be;
    cnn_model_set_graphs(m, false);
    void *dev[] = {m->params, m->grads, m->buffers, m->bn, m->wact, m->pairw, m->arena, m->input, m->staging,
                   m->labels_dev, m->loss_dev, m->sum_scratch, m->masks};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        if (dev[i]) be->free(be, dev[i]);
    free(m->bn_off);
    free(m->mask_off);
    free(m->plan.train_off);
    free(m->plan.grad_off);
    free(m->plan.grad_acc);
    free(m->plan.train_steps);
    free(m->plan.steps);
    free(m->plan.value_of);
    free(m->plan.eval_off);
    free(m->counters);
    free(m->buckets);
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
    m->mask_off = malloc((size_t)n * sizeof *m->mask_off);
    m->plan.train_off = calloc((size_t)n, sizeof *m->plan.train_off);
    m->plan.grad_off = calloc((size_t)n, sizeof *m->plan.grad_off);
    m->plan.grad_acc = calloc((size_t)2 * n, sizeof *m->plan.grad_acc);
    m->plan.steps = calloc((size_t)n, sizeof *m->plan.steps);
    m->plan.train_steps = calloc((size_t)n, sizeof *m->plan.train_steps);
    m->plan.value_of = malloc((size_t)n * sizeof *m->plan.value_of);
    m->plan.eval_off = calloc((size_t)n, sizeof *m->plan.eval_off);
    m->counters = calloc((size_t)net->n_params, sizeof *m->counters);
    if (!m->bn_off || !m->mask_off || !m->plan.train_off || !m->plan.grad_off || !m->plan.grad_acc || !m->plan.steps ||
        !m->plan.train_steps || !m->plan.value_of || !m->plan.eval_off || !m->counters) {
        cnn_model_free(m);
        return cnn_fail(CNN_E_OOM, "out of host memory for the model plan");
    }
    for (int i = 0; i < n; i++) m->plan.value_of[i] = -2;
    int64_t bn_floats = 0;
    for (int i = 0; i < n; i++) {
        m->bn_off[i] = -1;
        if (net->nodes[i].op == CNN_OP_BN) {
            m->bn_off[i] = bn_floats;
            bn_floats += (4 * net->nodes[i].c + 63) / 64 * 64;
        }
    }
    cnn_status st = cnn_fuse_eval(net, be, max_batch, &m->plan);
    size_t eval_bytes = st == CNN_OK ? cnn_plan_eval(net, max_batch, m->esz, &m->plan) : CNN_PLAN_OOM;
    for (int s = 0; s < m->plan.n_steps && eval_bytes != CNN_PLAN_OOM; s++) { /* each pair's folded filters and shift (cnn_model_refresh_fold, fold.c, writes them) */
        cnn_step *sp = &m->plan.steps[s];
        if (sp->pair < 0) continue;
        sp->pair_off = m->pairw_bytes;
        m->pairw_bytes += cnn_pair_layout_of(net, m->esz, sp).bytes;
    }
    if (train && eval_bytes != CNN_PLAN_OOM) st = cnn_fuse_train(net, &m->plan);
    size_t train_bytes = !train ? 0 : st == CNN_OK ? cnn_plan_train(net, max_batch, m->esz, &m->plan) : CNN_PLAN_OOM;
    if (eval_bytes == CNN_PLAN_OOM || train_bytes == CNN_PLAN_OOM) { /* host memory ran out: recorded */
        cnn_model_free(m);
        return CNN_E_OOM;
    }
    m->arena_bytes = eval_bytes > train_bytes ? eval_bytes : train_bytes;
    size_t mask_bytes = 0; /* the train plan's BN -> ReLU bits and max-pool argmax bytes, 16-byte aligned each */
    for (int i = 0; i < n; i++) m->mask_off[i] = -1;
    for (int s = 0; train && be->keeps_masks && s < m->plan.n_train_steps; s++) {
        const cnn_step *sp = &m->plan.train_steps[s];
        const cnn_node *nd = &net->nodes[sp->node];
        const size_t elems = (size_t)max_batch * nd->h * nd->w * nd->c; /* the step's output */
        if (nd->op == CNN_OP_BN && sp->relu) {
            m->mask_off[sp->node] = (int64_t)mask_bytes;
            mask_bytes += (elems + 127) / 128 * 16;
        } else if (nd->op == CNN_OP_MAXPOOL) {
            m->mask_off[sp->node] = (int64_t)mask_bytes;
            mask_bytes += (elems + 15) / 16 * 16;
        }
    }

#define ALLOC(ptr, bytes, what)                                                                                \
    if (st == CNN_OK) st = dev_alloc(m, (bytes), (what), (void **)&(ptr))
    ALLOC(m->params, (size_t)net->n_trainable * 4, "parameters");
    if (train) ALLOC(m->grads, (size_t)net->n_trainable * 4, "gradients");
    ALLOC(m->buffers, (size_t)(net->n_buffer ? net->n_buffer : 1) * 4, "BatchNorm running statistics");
    ALLOC(m->bn, (size_t)(bn_floats ? bn_floats : 1) * 4, "BatchNorm batch statistics");
    if (be->act_dtype != CNN_DTYPE_F32) ALLOC(m->wact, (size_t)net->n_trainable * m->esz, "weight copies");
    if (m->pairw_bytes) ALLOC(m->pairw, m->pairw_bytes, "folded filters of fused conv pairs");
    ALLOC(m->arena, m->arena_bytes, "activations");
    if (mask_bytes) ALLOC(m->masks, mask_bytes, "ReLU masks and max-pool positions");
    ALLOC(m->input, (size_t)max_batch * 3 * in_h * in_w * m->esz, "input batch");
    m->staging_elems = (size_t)max_batch * 3 * in_h * in_w;
    if ((size_t)max_batch * net->num_classes > m->staging_elems)
        m->staging_elems = (size_t)max_batch * net->num_classes;
    if (be->act_dtype != CNN_DTYPE_F32) ALLOC(m->staging, m->staging_elems * 4, "conversion staging");
    ALLOC(m->labels_dev, (size_t)max_batch * 4, "labels");
    ALLOC(m->loss_dev, 4, "loss");
#undef ALLOC
    /* the arenas' alignment gaps belong to no tensor, yet the optimizer sweeps them: zero, they stay zero (and
     * compute-sanitizer's initcheck finds no read of memory never written) */
    if (st == CNN_OK) st = be->zero(be, m->params, (size_t)net->n_trainable * 4);
    if (st == CNN_OK && train) st = be->zero(be, m->grads, (size_t)net->n_trainable * 4);
    if (st == CNN_OK) st = cnn_model_init_weights(m, opts->seed);
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
    float *nhwc = cnn_model_host_scratch(m, count);
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
    if (mode == CNN_MODE_TRAIN) return (char *)m->arena + m->plan.train_off[node];
    int v = m->plan.value_of[node];
    CNN_ASSERT(v != CNN_NOT_KEPT);
    if (v < 0) return m->input;
    return (char *)m->arena + m->plan.eval_off[v];
}

static void *grad_ptr(cnn_model *m, int node) { return (char *)m->arena + m->plan.grad_off[node]; }

cnn_status cnn_model_download_logits(cnn_model *m, int n, float *out) {
    if (n != m->last_n) return cnn_fail(CNN_E_INVALID, "logits requested for %d images after a forward of %d", n, m->last_n);
    const void *logits = value_ptr(m, m->net->output, m->last_mode);
    size_t count = (size_t)n * m->net->num_classes;
    if (!m->staging) return m->be->download(m->be, out, logits, count * 4);
    CNN_TRY(m->be->from_act(m->be, (int64_t)count, logits, m->staging));
    return m->be->download(m->be, out, m->staging, count * 4);
}

cnn_status cnn_model_copy_logits(cnn_model *m, int n, float *dst) {
    if (n != m->last_n) return cnn_fail(CNN_E_INVALID, "logits requested for %d images after a forward of %d", n, m->last_n);
    const void *logits = value_ptr(m, m->net->output, m->last_mode);
    size_t count = (size_t)n * m->net->num_classes;
    if (!m->staging) return m->be->copy(m->be, dst, logits, count * 4);
    return m->be->from_act(m->be, (int64_t)count, logits, dst);
}

/* ---- forward ------------------------------------------------------------------------------------------ */

static cnn_linear linear_problem(const cnn_model *m, const cnn_node *nd, int n) {
    int c, h, w;
    cnn_node_in_chw(m->net, nd->in[0], &c, &h, &w);
    cnn_linear ln = {.n = n, .in = c * h * w, .out = nd->k};
    return ln;
}

/* The BatchNorm problem of node nd at batch n: over all the ranks' rows with --sync-bn (cnn_dp_opts). Not while
 * a node check runs (a diagnosis, guard.c): it may stop each rank's forward at another layer, and a collective that
 * one rank never reaches would hang the others. */
static cnn_bn bn_problem(const cnn_model *m, const cnn_node *nd, int n) {
    const bool sync = m->comm && m->dp.sync_bn && !m->node_check;
    return (cnn_bn){.m = (int64_t)n * nd->h * nd->w, .c = nd->c, .eps = 1e-5f, .momentum = 0.1f,
                    .comm = sync ? m->comm : NULL, .world = sync ? m->dp.world : 1};
}

/* Gradient elements [lo, hi) summed over the ranks, in float32 or bfloat16 (cnn_dp_opts); side as comm_allreduce. */
static cnn_status grad_sum(cnn_model *m, int64_t lo, int64_t hi, bool side) {
    cnn_backend *be = m->be;
    if (m->dp.bf16_sums)
        return be->comm_allreduce_bf16(be, m->comm, m->grads + lo, (char *)m->sum_scratch + 2 * lo, hi - lo, side);
    return be->comm_allreduce(be, m->comm, m->grads + lo, hi - lo, CNN_COMM_SUM_F32, side);
}

/* One step of either plan for n images: the op dispatch the train forward and the eval plan share. The modes
 * differ only where a node means something else: BN normalises by the batch's statistics in training and is its
 * folded scale/shift in eval; an add is add_forward in training and scale_shift (the add with a fused ReLU) in
 * eval; dropout runs only in training (the eval plan aliases it). A train step fuses nothing (cnn_step_alone). */
static cnn_status forward_step(cnn_model *m, int n, cnn_mode mode, const cnn_step *sp) {
    const cnn_net *net = m->net;
    cnn_backend *be = m->be;
    const int i = sp->node;
    const cnn_node *nd = &net->nodes[i];
    const void *x = value_ptr(m, nd->in[0], mode);
    void *y = value_ptr(m, sp->out, mode);
    const int64_t count = (int64_t)n * nd->c * nd->h * nd->w;
    const float *scale = NULL, *shift = NULL; /* a folded BN (eval) */
    if (sp->bn >= 0) {
        scale = m->bn + m->bn_off[sp->bn] + 2 * net->nodes[sp->bn].c;
        shift = scale + net->nodes[sp->bn].c;
    }
    const void *res = sp->has_residual ? value_ptr(m, sp->residual, mode) : NULL;
    cnn_status st = CNN_OK;
    switch (nd->op) {
    case CNN_OP_CONV: {
        cnn_conv2d cv;
        cnn_node_conv2d(net, nd, n, &cv);
        if (sp->pair >= 0) { /* the first conv's operands, then this one's; the folded filters of fold_pair */
            const cnn_node *pn = &net->nodes[sp->pair];
            cnn_conv2d cv1;
            cnn_node_conv2d(net, pn, n, &cv1);
            const cnn_pair_layout l = cnn_pair_layout_of(net, m->esz, sp);
            const char *base = (const char *)m->pairw + sp->pair_off;
            cnn_epilogue ep = {.shift = (const float *)(base + l.os), .relu = sp->relu};
            st = be->conv2d_fprop_pair(be, &cv1, &cv, &ep, value_ptr(m, pn->in[0], mode), base, x, base + l.o2, y);
            break;
        }
        if (sp->bn < 0 && nd->param[1] >= 0) shift = pf(m, nd->param[1]); /* the conv's own bias */
        cnn_epilogue ep = {.scale = scale, .shift = shift, .residual = res, .relu = sp->relu};
        /* forward_train marked it: the next step is a BatchNorm over y alone (the step's epilogue is empty) */
        if (mode == CNN_MODE_TRAIN && m->conv_sums_node == i && !scale && !shift && !res && !sp->relu && sp->pool < 0)
            ep.stats = &m->conv_sums;
        else if (mode == CNN_MODE_TRAIN)
            m->conv_sums_node = -1;
        if (sp->pool >= 0) {
            cnn_pool2d pl;
            cnn_node_pool2d(net, &net->nodes[sp->pool], n, &pl);
            st = be->conv2d_fprop_pool(be, &cv, &ep, &pl, x, weight(m, nd->param[0]), y);
        } else {
            st = be->conv2d_fprop(be, &cv, &ep, x, weight(m, nd->param[0]), y);
        }
        break;
    }
    case CNN_OP_BN:
        if (mode == CNN_MODE_TRAIN) {
            cnn_bn bn = bn_problem(m, nd, n);
            float *stats = m->bn + m->bn_off[i];
            if (sp->relu && m->mask_off[i] >= 0) bn.relu_mask = m->masks + m->mask_off[i];
            if (m->conv_sums_node >= 0 && m->conv_sums_node == nd->in[0]) bn.stats = &m->conv_sums;
            st = be->bn_forward_train(be, &bn, x, pf(m, nd->param[0]), pf(m, nd->param[1]),
                                      (float *)pf(m, nd->param[2]), (float *)pf(m, nd->param[3]), stats,
                                      stats + nd->c, res, sp->relu, y);
        } else {
            st = be->scale_shift(be, (int64_t)n * nd->h * nd->w, nd->c, x, scale, shift, res, sp->relu, y);
        }
        break;
    case CNN_OP_ADD:
        if (mode == CNN_MODE_TRAIN)
            st = be->add_forward(be, count, x, value_ptr(m, nd->in[1], mode), y);
        else
            st = be->scale_shift(be, (int64_t)n * nd->h * nd->w, nd->c, x, NULL, NULL, value_ptr(m, nd->in[1], mode),
                                 sp->relu, y);
        break;
    case CNN_OP_RELU: st = be->relu_forward(be, count, x, y); break;
    case CNN_OP_MAXPOOL:
    case CNN_OP_AVGPOOL:
    case CNN_OP_ADAPTIVE_AVGPOOL: {
        cnn_pool2d pl;
        cnn_node_pool2d(net, nd, n, &pl);
        if (mode == CNN_MODE_TRAIN && m->mask_off[i] >= 0) pl.argmax = m->masks + m->mask_off[i];
        st = be->pool2d_forward(be, &pl, x, y);
        break;
    }
    case CNN_OP_LINEAR: {
        cnn_linear ln = linear_problem(m, nd, n);
        st = be->linear_forward(be, &ln, x, weight(m, nd->param[0]), pf(m, nd->param[1]), y);
        break;
    }
    case CNN_OP_DROPOUT:
        CNN_ASSERT(mode == CNN_MODE_TRAIN);
        if (nd->drop_p > 0) st = be->dropout_forward(be, count, nd->drop_p, node_seed(m->dropout_seed, i), x, y);
        else st = be->copy(be, y, x, (size_t)count * m->esz);
        break;
    case CNN_OP_FLATTEN: {
        const cnn_node *src = &net->nodes[nd->in[0]];
        cnn_shape sh = {n, src->c, src->h, src->w};
        st = be->flatten_forward(be, sh, x, y);
        break;
    }
    default: CNN_ASSERT(!"unknown op");
    }
    if (st != CNN_OK) return cnn_error_prefix(st, "layer %s (%s)", nd->name, cnn_op_name(nd->op));
    return CNN_OK;
}

/* m->profile: a timing mark after each step (cnn_model_profile_train), mark k + 1 after the k-th op of the step */
static cnn_status profile_mark(cnn_model *m, int *k) {
    return m->profile ? m->be->time_mark(m->be, ++*k) : CNN_OK;
}

/* whether train step s is a conv whose output only step s + 1, a BatchNorm, reads (cnn_fuse_train keeps such a conv
 * a step of its own, right before its BatchNorm): the conv may sum y's channels for it (cnn_conv_stats) */
static bool feeds_next_bn(const cnn_model *m, int s) {
    const cnn_plan *p = &m->plan;
    if (s + 1 >= p->n_train_steps || m->node_check) return false; /* a node check reads between the steps */
    const cnn_net *net = m->net;
    const int i = p->train_steps[s].node, j = p->train_steps[s + 1].node;
    return net->nodes[i].op == CNN_OP_CONV && net->nodes[j].op == CNN_OP_BN && net->nodes[j].in[0] == i &&
           cnn_sole_consumer(net, i) == j;
}

static cnn_status forward_train(cnn_model *m, int n) {
    int k = 0;
    for (int s = 0; s < m->plan.n_train_steps; s++) {
        const cnn_step *sp = &m->plan.train_steps[s];
        if (m->net->nodes[sp->node].op != CNN_OP_BN) m->conv_sums_node = feeds_next_bn(m, s) ? sp->node : -1;
        CNN_TRY(forward_step(m, n, CNN_MODE_TRAIN, sp));
        CNN_TRY(profile_mark(m, &k));
        if (m->node_check) { /* the step's value: its last node's output */
            const cnn_node *o = &m->net->nodes[sp->out];
            CNN_TRY(m->node_check(m->node_check_ctx, m, sp->out, value_ptr(m, sp->out, CNN_MODE_TRAIN),
                                  (int64_t)n * o->c * o->h * o->w));
        }
    }
    return CNN_OK;
}

static cnn_status forward_eval(cnn_model *m, int n) {
    for (int s = 0; s < m->plan.n_steps; s++) CNN_TRY(forward_step(m, n, CNN_MODE_EVAL, &m->plan.steps[s]));
    return CNN_OK;
}

int cnn_model_eval_steps(const cnn_model *m) { return m->plan.n_steps; }

cnn_eval_step cnn_model_eval_step(const cnn_model *m, int s) {
    CNN_ASSERT(s >= 0 && s < m->plan.n_steps);
    const cnn_step *sp = &m->plan.steps[s];
    cnn_eval_step e = {.node = sp->node, .bn = sp->bn, .has_residual = sp->has_residual,
                       .residual = sp->residual, .relu = sp->relu, .pool = sp->pool, .pair = sp->pair,
                       .pair_bn = sp->pair_bn};
    return e;
}

cnn_status cnn_model_forward_eval_steps(cnn_model *m, int n, int first, int count) {
    if (n < 1 || n > m->max_batch) return cnn_fail(CNN_E_INVALID, "batch %d out of range [1, %d]", n, m->max_batch);
    if (first < 0 || count < 0 || first > m->plan.n_steps || count > m->plan.n_steps - first)
        return cnn_fail(CNN_E_INVALID, "eval steps [%d, %d) out of range [0, %d)", first, first + count, m->plan.n_steps);
    if (!m->fold_valid) CNN_TRY(cnn_model_refresh_fold(m));
    m->last_n = n;
    m->last_mode = CNN_MODE_EVAL;
    for (int s = first; s < first + count; s++) CNN_TRY(forward_step(m, n, CNN_MODE_EVAL, &m->plan.steps[s]));
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

/* ---- compiling ahead --------------------------------------------------------------------------------
 * Before a pass (kind, n) first runs, a dry run of it (backend.h dry_run_begin) notes every program it and its
 * autotuning will use, and the backend compiles them side by side: a cold start waits for one parallel batch, not
 * for a chain of compilations one launch or one tuned layer at a time (perf-log step 104). A train forward's dry
 * run takes in the backward and the eval passes the loop will run (cnn_model_set_dry_eval, step 109), so that all
 * compile in one batch. Best effort: where a dry run fails, the real pass compiles what is missing as it goes and
 * reports any error in context. */
static bool dry_done(const cnn_model *m, int kind, int n) {
    for (int i = 0; i < m->n_dry; i++)
        if (m->dry[i].kind == kind && m->dry[i].n == n) return true;
    return false;
}

static void dry_mark(cnn_model *m, int kind, int n) {
    if (m->n_dry < CNN_MAX_GRAPHS && !dry_done(m, kind, n)) {
        m->dry[m->n_dry].kind = kind, m->dry[m->n_dry].n = n;
        m->n_dry++;
    }
}

static void compile_ahead(cnn_model *m, int kind, int n, float eps) {
    cnn_backend *be = m->be;
    if (!be->dry_run_begin || m->node_check || m->n_dry == CNN_MAX_GRAPHS || dry_done(m, kind, n)) return;
    dry_mark(m, kind, n);
    const bool with_backward = kind == CNN_GRAPH_TRAIN_FWD && m->train && !dry_done(m, CNN_GRAPH_BACKWARD, n);
    if (with_backward) dry_mark(m, CNN_GRAPH_BACKWARD, n);
    cnn_status st = be->dry_run_begin(be);
    if (st == CNN_OK) {
        st = kind == CNN_GRAPH_EVAL ? forward_eval(m, n) : kind == CNN_GRAPH_TRAIN_FWD ? forward_train(m, n)
                                                                                     : backward_ops(m, n, eps);
        if (st == CNN_OK && with_backward) st = backward_ops(m, n, eps);
        if (st == CNN_OK && with_backward && m->dry_step) st = m->dry_step(m->dry_step_ctx);
        for (int i = 0; st == CNN_OK && with_backward && i < m->n_dry_eval; i++) /* no fold: nothing launches */
            if (!dry_done(m, CNN_GRAPH_EVAL, m->dry_eval[i]))
                dry_mark(m, CNN_GRAPH_EVAL, m->dry_eval[i]), st = forward_eval(m, m->dry_eval[i]);
        cnn_status end = be->dry_run_end(be); /* compiles what was noted, after a failure too */
        if (st == CNN_OK) st = end;
    }
    if (st != CNN_OK) {
        cnn_log(2, "cnn: dry run of a pass of batch %d failed (its programs compile as it runs): %s", n,
                cnn_error_msg());
        cnn_error_clear();
    }
}

static cnn_status run_graphed(cnn_model *m, int kind, int n, float eps, device_fn fn) {
    cnn_backend *be = m->be;
    compile_ahead(m, kind, n, eps);
    if (!m->use_graphs || !be->graph_begin || m->node_check) return fn(m, n, eps);
    cnn_graph_entry *e = NULL;
    for (int i = 0; i < m->n_graphs; i++)
        if (m->graphs[i].kind == kind && m->graphs[i].n == n && m->graphs[i].eps == eps &&
            m->graphs[i].scale == m->loss_scale)
            e = &m->graphs[i];
    if (!e) {
        if (m->n_graphs == CNN_MAX_GRAPHS) return fn(m, n, eps); /* many shapes: run eagerly */
        e = &m->graphs[m->n_graphs++];
        *e = (cnn_graph_entry){.kind = kind, .n = n, .eps = eps, .scale = m->loss_scale};
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
        if (!m->fold_valid) CNN_TRY(cnn_model_refresh_fold(m));
        return run_graphed(m, CNN_GRAPH_EVAL, n, 0.0f, fwd_eval_fn);
    }
    /* dropout masks depend on a per-step seed, which a recorded graph would freeze */
    if (m->has_dropout) compile_ahead(m, CNN_GRAPH_TRAIN_FWD, n, 0.0f);
    CNN_TRY(m->has_dropout ? forward_train(m, n) : run_graphed(m, CNN_GRAPH_TRAIN_FWD, n, 0.0f, fwd_train_fn));
    for (int i = 0; i < m->net->n_nodes; i++)
        if (m->net->nodes[i].op == CNN_OP_BN) m->counters[m->net->nodes[i].param[4]]++;
    m->fold_valid = false; /* running statistics moved */
    return CNN_OK;
}

/* ---- loss and backward -------------------------------------------------------------------------------- */

static cnn_status upload_labels(cnn_model *m, int n, const int64_t *labels) {
    int32_t *l32 = (int32_t *)cnn_model_host_scratch(m, (size_t)n);
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
    CNN_TRY(run_graphed(m, CNN_GRAPH_BACKWARD, n, label_smoothing, backward_ops));
    if (m->comm && m->n_buckets == 0) /* unbucketed: one sum after the backward, on the compute stream */
        CNN_TRY(grad_sum(m, 0, m->net->n_trainable, false));
    return loss_out ? m->be->download(m->be, loss_out, m->loss_dev, 4) : CNN_OK;
}

/* Whether train step s, a conv after a conv step ending in a ReLU (VGG), applies that ReLU's backward in its dgrad
 * (conv2d_dgrad_relu, overwriting: the gradient's only writer): the earlier step then leaves its output's gradient
 * as the dgrad wrote it. Saves the ReLU's pass over that gradient (perf-log step 98). */
static bool dgrad_applies_relu(const cnn_model *m, int s) {
    return m->be->conv2d_dgrad_relu && cnn_train_relu_reader(m->net, &m->plan, s, CNN_OP_CONV, CNN_OP_CONV) &&
           !m->plan.grad_acc[2 * s];
}

/* Where train step s applies that ReLU's backward, the bias gradient of step s - 1's conv that its dgrad sums
 * (conv2d_dgrad_relu's dx_sum; step s - 1 then skips its channel_sum), or NULL where that conv has no bias */
static float *dgrad_sums_bias(const cnn_model *m, int s) {
    if (s >= m->plan.n_train_steps || !dgrad_applies_relu(m, s)) return NULL;
    const int bias = m->net->nodes[m->plan.train_steps[s - 1].node].param[1];
    return bias >= 0 ? gradp(m, bias) : NULL;
}

/* Whether train step s, a max-pool, runs its backward inside that of step s - 1, a BN -> ReLU (bn_backward_pool):
 * the pool reads the ReLU's output alone, both keep their masks, and the backend fuses the pair (the ResNet stem on
 * the GPU). pl: the pool's problem, with its argmax. */
static bool pool_in_bn_backward(const cnn_model *m, int s, int n, cnn_pool2d *pl) {
    const cnn_net *net = m->net;
    if (!m->be->bn_backward_pool || !m->be->bn_pool_fusable ||
        !cnn_train_relu_reader(m->net, &m->plan, s, CNN_OP_MAXPOOL, CNN_OP_BN))
        return false;
    const cnn_step *sp = &m->plan.train_steps[s], *sb = &m->plan.train_steps[s - 1];
    const cnn_node *nd = &net->nodes[sp->node], *bnd = &net->nodes[sb->node];
    if (sb->has_residual || m->mask_off[sp->node] < 0 || m->mask_off[sb->node] < 0) return false;
    cnn_node_pool2d(net, nd, n, pl);
    pl->argmax = m->masks + m->mask_off[sp->node];
    cnn_bn bn = bn_problem(m, bnd, n);
    bn.relu_mask = m->masks + m->mask_off[sb->node];
    return m->be->bn_pool_fusable(m->be, &bn, pl);
}

/* The loss, its gradient and the backward pass: device work only. */
static cnn_status backward_ops(cnn_model *m, int n, float label_smoothing) {
    const cnn_net *net = m->net;
    cnn_backend *be = m->be;
    cnn_xent xe = {.n = n, .classes = net->num_classes, .label_smoothing = label_smoothing,
                   .grad_scale = m->loss_scale};
    CNN_TRY(be->xent_forward_backward(be, &xe, value_ptr(m, net->output, CNN_MODE_TRAIN), m->labels_dev, m->loss_dev,
                                      grad_ptr(m, net->output)));
    int mark = m->plan.n_train_steps, bucket = 0;
    CNN_TRY(profile_mark(m, &mark));
    for (int s = m->plan.n_train_steps - 1; s >= 0; s--) {
        const cnn_step *sp = &m->plan.train_steps[s];
        const int i = sp->node;
        const cnn_node *nd = &net->nodes[i];
        const void *dy = grad_ptr(m, sp->out);
        const void *x = value_ptr(m, nd->in[0], CNN_MODE_TRAIN);
        void *dx = nd->in[0] >= 0 ? grad_ptr(m, nd->in[0]) : NULL;
        bool acc = m->plan.grad_acc[2 * s];
        int64_t count = (int64_t)n * nd->c * nd->h * nd->w;
        cnn_status st = CNN_OK;
        switch (nd->op) {
        case CNN_OP_CONV: {
            cnn_conv2d cv;
            cnn_node_conv2d(net, nd, n, &cv);
            if (sp->relu && !cnn_train_pool_applies_relu(net, &m->plan, s + 1) && !dgrad_applies_relu(m, s + 1)) {
                /* the fused ReLU's mask from the step's output, into its gradient in place (its only reader) */
                const int64_t nout = (int64_t)n * net->nodes[sp->out].c * net->nodes[sp->out].h * net->nodes[sp->out].w;
                st = be->relu_backward(be, nout, value_ptr(m, sp->out, CNN_MODE_TRAIN), dy, (void *)dy, false);
                if (st != CNN_OK) break;
            }
            st = be->conv2d_wgrad(be, &cv, x, dy, gradp(m, nd->param[0]));
            if (st == CNN_OK && nd->param[1] >= 0 && !cnn_train_pool_sums_bias(net, &m->plan, s + 1) &&
                !dgrad_sums_bias(m, s + 1))
                st = be->channel_sum(be, (int64_t)n * cv.p * cv.q, cv.k, dy, gradp(m, nd->param[1]));
            if (st == CNN_OK && dx)
                st = dgrad_applies_relu(m, s) ? be->conv2d_dgrad_relu(be, &cv, dy, weight(m, nd->param[0]), x, dx,
                                                                      dgrad_sums_bias(m, s))
                                              : be->conv2d_dgrad(be, &cv, dy, weight(m, nd->param[0]), dx, acc);
            break;
        }
        case CNN_OP_BN: { /* with what its step fused: the ReLU's mask from the step's output, the residual's gradient */
            CNN_ASSERT(dx);
            cnn_bn bn = bn_problem(m, nd, n);
            const float *stats = m->bn + m->bn_off[i];
            void *dres = sp->has_residual && sp->residual >= 0 ? grad_ptr(m, sp->residual) : NULL;
            if (sp->relu && m->mask_off[i] >= 0) bn.relu_mask = m->masks + m->mask_off[i];
            cnn_pool2d pl;
            if (pool_in_bn_backward(m, s + 1, n, &pl)) { /* from the pool's output gradient */
                st = be->bn_backward_pool(be, &bn, &pl, x, grad_ptr(m, m->plan.train_steps[s + 1].out),
                                          pf(m, nd->param[0]), stats, stats + nd->c, dx, acc,
                                          gradp(m, nd->param[0]), gradp(m, nd->param[1]));
                break;
            }
            st = be->bn_backward(be, &bn, x, sp->relu ? value_ptr(m, sp->out, CNN_MODE_TRAIN) : NULL, dy,
                                 pf(m, nd->param[0]), stats, stats + nd->c, sp->relu, dx, acc, dres,
                                 m->plan.grad_acc[2 * s + 1], gradp(m, nd->param[0]), gradp(m, nd->param[1]));
            break;
        }
        case CNN_OP_RELU:
            if (dx) st = be->relu_backward(be, count, value_ptr(m, sp->out, CNN_MODE_TRAIN), dy, dx, acc);
            break;
        case CNN_OP_MAXPOOL:
        case CNN_OP_AVGPOOL:
        case CNN_OP_ADAPTIVE_AVGPOOL: {
            cnn_pool2d pl;
            if (!dx || pool_in_bn_backward(m, s, n, &pl)) break; /* the BN's backward takes it in */
            cnn_node_pool2d(net, nd, n, &pl);
            if (m->mask_off[i] >= 0) pl.argmax = m->masks + m->mask_off[i];
            pl.relu = cnn_train_pool_applies_relu(net, &m->plan, s);
            if (cnn_train_pool_sums_bias(net, &m->plan, s))
                pl.dx_sum = gradp(m, net->nodes[m->plan.train_steps[s - 1].node].param[1]);
            st = be->pool2d_backward(be, &pl, x, value_ptr(m, sp->out, CNN_MODE_TRAIN), dy, dx, acc);
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
            cnn_shape sh = {n, src->c, src->h, src->w};
            st = be->flatten_backward(be, sh, dy, dx, acc);
            break;
        }
        case CNN_OP_ADD:
            if (dx) st = be->pass_backward(be, count, dy, dx, acc);
            if (st == CNN_OK && nd->in[1] >= 0)
                st = be->pass_backward(be, count, dy, grad_ptr(m, nd->in[1]), m->plan.grad_acc[2 * s + 1]);
            break;
        default: CNN_ASSERT(!"unknown op");
        }
        if (st != CNN_OK) return cnn_error_prefix(st, "backward of layer %s (%s)", nd->name, cnn_op_name(nd->op));
        CNN_TRY(profile_mark(m, &mark));
        for (; m->comm && bucket < m->n_buckets && m->buckets[bucket].step == s; bucket++) {
            const cnn_grad_bucket *b = &m->buckets[bucket];
            CNN_TRY(grad_sum(m, b->lo, b->hi, true));
        }
    }
    if (m->comm && m->n_buckets > 0) CNN_TRY(be->comm_join(be, m->comm));
    return CNN_OK;
}

int cnn_model_train_steps(const cnn_model *m) { return m->plan.n_train_steps; }

cnn_status cnn_model_profile_train(cnn_model *m, int n, const int64_t *labels, double *times, int *node) {
    const int S = m->plan.n_train_steps;
    if (!m->train) return cnn_fail(CNN_E_INVALID, "profiling a training step of a model created for inference");
    if (n < 1 || n > m->max_batch) return cnn_fail(CNN_E_INVALID, "batch %d out of range [1, %d]", n, m->max_batch);
    if (2 * S + 2 > CNN_TIME_MARKS) return cnn_fail(CNN_E_UNSUPPORTED, "%d train steps: too many to time", S);
    cnn_backend *be = m->be;
    CNN_TRY(upload_labels(m, n, labels));
    m->profile = true;
    m->last_n = n, m->last_mode = CNN_MODE_TRAIN;
    cnn_status st = be->time_mark(be, 0);
    if (st == CNN_OK) st = forward_train(m, n);
    if (st == CNN_OK) st = backward_ops(m, n, 0.0f);
    m->profile = false;
    for (int k = 0; st == CNN_OK && k < 2 * S + 1; k++) {
        st = be->time_between(be, k, k + 1, &times[k]);
        node[k] = k < S ? m->plan.train_steps[k].node : k == S ? -1 : m->plan.train_steps[2 * S - k].node;
    }
    for (int i = 0; st == CNN_OK && i < m->net->n_nodes; i++) /* the forward moved the running statistics */
        if (m->net->nodes[i].op == CNN_OP_BN) m->counters[m->net->nodes[i].param[4]]++;
    m->fold_valid = false;
    return st;
}

