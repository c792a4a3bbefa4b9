/* net.c — the layer graph and its parameter table: building blocks the zoo composes, shape inference,
 * per-layer FLOP and parameter counts. No memory is allocated for tensors here (see model.c). */
#include "cnn/net.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *op_names[CNN_OP_COUNT] = {
    [CNN_OP_CONV] = "conv",       [CNN_OP_BN] = "batchnorm",   [CNN_OP_RELU] = "relu",
    [CNN_OP_MAXPOOL] = "maxpool", [CNN_OP_AVGPOOL] = "avgpool", [CNN_OP_ADAPTIVE_AVGPOOL] = "adaptiveavgpool",
    [CNN_OP_LINEAR] = "linear",   [CNN_OP_DROPOUT] = "dropout", [CNN_OP_FLATTEN] = "flatten",
    [CNN_OP_ADD] = "add",
};

const char *cnn_op_name(cnn_op op) { return (unsigned)op < CNN_OP_COUNT ? op_names[op] : "?"; }

cnn_model_opts cnn_model_opts_default(void) {
    cnn_model_opts o = {.arch = "resnet18", .num_classes = 1000, .stem = CNN_STEM_IMAGENET, .dropout = 0.5f,
                        .seed = 0};
    return o;
}

void cnn_net_free(cnn_net *net) {
    if (!net) return;
    free(net->nodes);
    free(net->params);
    free(net);
}

/* Shape of a node's input: the producer's output, or the network input for -1. */
static void in_shape(const cnn_net *net, int in, int *c, int *h, int *w) {
    if (in < 0) {
        *c = net->in_c; *h = net->in_h; *w = net->in_w;
    } else {
        CNN_ASSERT(in < net->n_nodes);
        *c = net->nodes[in].c; *h = net->nodes[in].h; *w = net->nodes[in].w;
    }
}

/* Output extent of a window of size r, stride, padding: 0 when the window does not fit. */
static int out_dim(int in, int r, int stride, int pad) {
    return in + 2 * pad < r ? 0 : (in + 2 * pad - r) / stride + 1;
}

static cnn_node *push_node(cnn_net *net, cnn_op op, const char *name, int in) {
    if (net->n_nodes == net->cap_nodes) {
        int cap = net->cap_nodes ? 2 * net->cap_nodes : 64;
        cnn_node *nn = realloc(net->nodes, (size_t)cap * sizeof *nn);
        if (!nn) cnn_abort(__FILE__, __LINE__, "out of host memory building the network graph");
        net->nodes = nn;
        net->cap_nodes = cap;
    }
    CNN_ASSERT(strlen(name) < CNN_NAME_MAX);
    cnn_node *nd = &net->nodes[net->n_nodes++];
    memset(nd, 0, sizeof *nd);
    nd->op = op;
    snprintf(nd->name, sizeof nd->name, "%s", name);
    nd->in[0] = in;
    nd->in[1] = -1;
    for (int i = 0; i < 5; i++) nd->param[i] = -1;
    in_shape(net, in, &nd->c, &nd->h, &nd->w);
    return nd;
}

static int add_param(cnn_net *net, const char *module, const char *leaf, cnn_param_kind kind, cnn_init init,
                     int ndim, const int64_t *shape) {
    if (net->n_params == net->cap_params) {
        int cap = net->cap_params ? 2 * net->cap_params : 64;
        cnn_param *np = realloc(net->params, (size_t)cap * sizeof *np);
        if (!np) cnn_abort(__FILE__, __LINE__, "out of host memory building the parameter table");
        net->params = np;
        net->cap_params = cap;
    }
    cnn_param *p = &net->params[net->n_params];
    memset(p, 0, sizeof *p);
    int len = snprintf(p->name, sizeof p->name, "%s.%s", module, leaf);
    CNN_ASSERT(len > 0 && len < (int)sizeof p->name);
    p->kind = kind;
    p->init = init;
    p->ndim = ndim;
    p->count = 1;
    for (int i = 0; i < ndim; i++) {
        p->shape[i] = shape[i];
        p->count *= shape[i];
    }
    if (kind == CNN_PARAM_TRAINABLE) {
        p->offset = net->n_trainable;
        net->n_trainable += (p->count + 63) / 64 * 64; /* 256-byte aligned slices */
    } else if (kind == CNN_PARAM_BUFFER) {
        p->offset = net->n_buffer;
        net->n_buffer += (p->count + 63) / 64 * 64;
    }
    return net->n_params++;
}

static void mark_act_copy(cnn_net *net, int pi) { net->params[pi].act_copy = true; }

int cnn_net_conv(cnn_net *net, const char *name, int in, int k, int r, int stride, int pad, bool bias) {
    cnn_node *nd = push_node(net, CNN_OP_CONV, name, in);
    int c = nd->c;
    nd->k = k; nd->r = r; nd->s = r; nd->stride = stride; nd->pad = pad;
    nd->c = k;
    nd->h = out_dim(nd->h, r, stride, pad);
    nd->w = out_dim(nd->w, r, stride, pad);
    int idx = net->n_nodes - 1;
    int64_t wshape[4] = {k, c, r, r};
    int pw = add_param(net, name, "weight", CNN_PARAM_TRAINABLE, CNN_INIT_KAIMING_FAN_OUT, 4, wshape);
    net->params[pw].krsc = true;
    net->params[pw].fan_in = (int64_t)c * r * r;
    net->params[pw].fan_out = (int64_t)k * r * r;
    mark_act_copy(net, pw);
    net->nodes[idx].param[0] = pw;
    if (bias) {
        int64_t bshape[1] = {k};
        int pb = add_param(net, name, "bias", CNN_PARAM_TRAINABLE, CNN_INIT_ZEROS, 1, bshape);
        net->nodes[idx].param[1] = pb;
    }
    return idx;
}

int cnn_net_bn(cnn_net *net, const char *name, int in) {
    cnn_node *nd = push_node(net, CNN_OP_BN, name, in);
    int64_t cshape[1] = {nd->c};
    int idx = net->n_nodes - 1;
    int p0 = add_param(net, name, "weight", CNN_PARAM_TRAINABLE, CNN_INIT_ONES, 1, cshape);
    int p1 = add_param(net, name, "bias", CNN_PARAM_TRAINABLE, CNN_INIT_ZEROS, 1, cshape);
    int p2 = add_param(net, name, "running_mean", CNN_PARAM_BUFFER, CNN_INIT_ZEROS, 1, cshape);
    int p3 = add_param(net, name, "running_var", CNN_PARAM_BUFFER, CNN_INIT_ONES, 1, cshape);
    int p4 = add_param(net, name, "num_batches_tracked", CNN_PARAM_COUNTER, CNN_INIT_ZEROS, 0, NULL);
    cnn_node *n2 = &net->nodes[idx];
    n2->param[0] = p0; n2->param[1] = p1; n2->param[2] = p2; n2->param[3] = p3; n2->param[4] = p4;
    return idx;
}

int cnn_net_relu(cnn_net *net, const char *name, int in) {
    push_node(net, CNN_OP_RELU, name, in);
    return net->n_nodes - 1;
}

static int window_pool(cnn_net *net, cnn_op op, const char *name, int in, int r, int stride, int pad) {
    cnn_node *nd = push_node(net, op, name, in);
    nd->r = r; nd->s = r; nd->stride = stride; nd->pad = pad;
    nd->h = out_dim(nd->h, r, stride, pad);
    nd->w = out_dim(nd->w, r, stride, pad);
    return net->n_nodes - 1;
}

int cnn_net_maxpool(cnn_net *net, const char *name, int in, int r, int stride, int pad) {
    return window_pool(net, CNN_OP_MAXPOOL, name, in, r, stride, pad);
}

int cnn_net_avgpool(cnn_net *net, const char *name, int in, int r, int stride, int pad) {
    return window_pool(net, CNN_OP_AVGPOOL, name, in, r, stride, pad);
}

int cnn_net_adaptive_avgpool(cnn_net *net, const char *name, int in, int out_h, int out_w) {
    cnn_node *nd = push_node(net, CNN_OP_ADAPTIVE_AVGPOOL, name, in);
    nd->out_h = out_h; nd->out_w = out_w;
    nd->h = out_h; nd->w = out_w;
    return net->n_nodes - 1;
}

int cnn_net_linear(cnn_net *net, const char *name, int in, int out, cnn_init winit, cnn_init binit) {
    cnn_node *nd = push_node(net, CNN_OP_LINEAR, name, in);
    int64_t fan_in = (int64_t)nd->c * nd->h * nd->w;
    nd->k = out;
    nd->c = out; nd->h = 1; nd->w = 1;
    int idx = net->n_nodes - 1;
    int64_t wshape[2] = {out, fan_in}, bshape[1] = {out};
    int pw = add_param(net, name, "weight", CNN_PARAM_TRAINABLE, winit, 2, wshape);
    net->params[pw].fan_in = fan_in;
    net->params[pw].fan_out = out;
    mark_act_copy(net, pw);
    int pb = add_param(net, name, "bias", CNN_PARAM_TRAINABLE, binit, 1, bshape);
    net->params[pb].fan_in = fan_in;
    net->nodes[idx].param[0] = pw;
    net->nodes[idx].param[1] = pb;
    return idx;
}

int cnn_net_dropout(cnn_net *net, const char *name, int in, float p) {
    cnn_node *nd = push_node(net, CNN_OP_DROPOUT, name, in);
    nd->drop_p = p;
    return net->n_nodes - 1;
}

int cnn_net_flatten(cnn_net *net, const char *name, int in) {
    cnn_node *nd = push_node(net, CNN_OP_FLATTEN, name, in);
    nd->c = nd->c * nd->h * nd->w;
    nd->h = 1; nd->w = 1;
    return net->n_nodes - 1;
}

int cnn_net_add(cnn_net *net, const char *name, int a, int b) {
    cnn_node *nd = push_node(net, CNN_OP_ADD, name, a);
    nd->in[1] = b;
    int bc, bh, bw;
    in_shape(net, b, &bc, &bh, &bw);
    if (bc != nd->c || bh != nd->h || bw != nd->w)
        cnn_abort(__FILE__, __LINE__, "add %s: input shapes differ (%d,%d,%d) vs (%d,%d,%d)", name, nd->c, nd->h,
                  nd->w, bc, bh, bw);
    return net->n_nodes - 1;
}

cnn_status cnn_net_check(const cnn_net *net) {
    for (int i = 0; i < net->n_nodes; i++) {
        const cnn_node *nd = &net->nodes[i];
        if (nd->c <= 0 || nd->h <= 0 || nd->w <= 0)
            return cnn_fail(CNN_E_INVALID,
                            "input %dx%d is too small for %s: layer %s (%s) would have an empty output",
                            net->in_h, net->in_w, net->arch, nd->name, cnn_op_name(nd->op));
        if (nd->op == CNN_OP_MAXPOOL || nd->op == CNN_OP_AVGPOOL) {
            int c, h, w;
            in_shape(net, nd->in[0], &c, &h, &w);
            if (h + 2 * nd->pad < nd->r || w + 2 * nd->pad < nd->r)
                return cnn_fail(CNN_E_INVALID, "input %dx%d is too small for %s: layer %s window %d > input %dx%d",
                                net->in_h, net->in_w, net->arch, nd->name, nd->r, h, w);
        }
    }
    return CNN_OK;
}

int64_t cnn_node_flops(const cnn_net *net, int i) {
    const cnn_node *nd = &net->nodes[i];
    int c, h, w;
    in_shape(net, nd->in[0], &c, &h, &w);
    int64_t out = (int64_t)nd->c * nd->h * nd->w;
    switch (nd->op) {
    case CNN_OP_CONV: return 2 * out * c * nd->r * nd->s + (nd->param[1] >= 0 ? out : 0);
    case CNN_OP_LINEAR: return 2 * out * ((int64_t)c * h * w) + out;
    case CNN_OP_BN: return 2 * out;
    case CNN_OP_MAXPOOL:
    case CNN_OP_AVGPOOL: return out * nd->r * nd->s;
    case CNN_OP_ADAPTIVE_AVGPOOL: return (int64_t)c * h * w;
    case CNN_OP_RELU:
    case CNN_OP_ADD:
    case CNN_OP_DROPOUT: return out;
    default: return 0;
    }
}

int64_t cnn_node_params(const cnn_net *net, int i) {
    int64_t n = 0;
    for (int j = 0; j < 5; j++) {
        int p = net->nodes[i].param[j];
        if (p >= 0 && net->params[p].kind == CNN_PARAM_TRAINABLE) n += net->params[p].count;
    }
    return n;
}

const cnn_param *cnn_net_find_param(const cnn_net *net, const char *name) {
    for (int i = 0; i < net->n_params; i++)
        if (strcmp(net->params[i].name, name) == 0) return &net->params[i];
    return NULL;
}
