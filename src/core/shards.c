/* shards.c — the ops of a backend wrapped for a batch of slices (shards.h says why).
 *
 * Every wrapped op takes (N, ...) tensors with images outermost, so slice j of a batch of N = S * n images is the
 * same op on n images at byte offset j * n * (one image's bytes) of each such tensor. The convolutions and the linear
 * layer run in one launch over every slice with the kernel of a slice (cnn_conv2d.choose_n, cnn_linear.choose_n),
 * chosen for the global batch where the backend's bits allow (choice_n), which gives each image the bits of its
 * slice's own launch on any rank, a rank of one slice included. A sum over the batch is each slice's own, in row j
 * of the scratch for slice j, and tree_sum adds the rows into its output: a wgrad and the linear layer's backward
 * write all the rows in one call (choose_n); channel_sum and dx's channel sums after a dgrad or a pool run by
 * slices (one channel_sum_rows call where the backend has it, else slice by slice). A call whose batch S does not
 * divide (an evaluation's last batch) runs whole: nothing of it is summed over the batch in a way the training step
 * reads. A wrapped op calls its backend's own functions, never the table, so no slice is sliced again. BatchNorm is
 * sliced by the backends themselves (cnn_backend.batch_shards): its sums are inside one op, or in the epilogue of
 * the conv before it (cnn_conv_stats), whose chunks the backend adds by slices where they fall in whole slices.
 */
#include "shards.h"

#include "cnn/tensor.h"
#include "model.h"

#include <stdlib.h>
#include <string.h>

typedef struct cnn_shards {
    cnn_backend saved; /* the table as it was: the wrappers call these */
    int n;             /* slices */
    int world;         /* ranks: a batch of n is the world's n * world images (the global batch) */
    float *scratch;    /* n rows of cap floats */
    int64_t cap;
} cnn_shards;

int cnn_shards_global(int global_batch) {
    int s = 1;
    while (global_batch >= 1 && s < CNN_SHARDS_MAX && global_batch % (2 * s) == 0) s *= 2;
    return s;
}

int cnn_shards_local(int global_batch, int world) {
    const int g = cnn_shards_global(global_batch);
    return world >= 1 && g % world == 0 ? g / world : 0;
}

static const void *at(const void *p, int64_t bytes) { return p ? (const char *)p + bytes : NULL; }

/* whether a call of batch n runs as called: a batch the slices do not divide */
static bool as_called(const cnn_shards *sh, int n) { return n % sh->n != 0; }

/* Rows of a sum of count floats in the scratch: 64 floats apart at least, so that every row is as aligned as the
 * gradient arena's tensors and every slice's op takes the same kernels as on a rank of one slice, which writes
 * straight into its arena. */
static int64_t stride(int64_t count) { return cnn_sum_rows(count); }
static float *row(cnn_shards *sh, int64_t count, int j) {
    CNN_ASSERT(count <= sh->cap);
    return sh->scratch + (int64_t)j * stride(count);
}
static cnn_status tree(cnn_backend *be, cnn_shards *sh, int64_t count, const float *rows, float *out) {
    return be->tree_sum(be, sh->n, count, rows, stride(count), out);
}

/* A pass that sums nothing over the batch runs in one launch over every slice, with the kernel the backend would
 * give one slice (cnn_conv2d.choose_n): each image's outputs are then those of that slice's own launch, bit for bit,
 * at one launch's cost instead of S (perf-log step 112). The backends whose bits allow it choose that kernel for
 * the global batch, the same on every rank (choice_n), rather than for a slice's few images (step 114). */
static cnn_conv2d conv_whole(const cnn_shards *sh, const cnn_conv2d *cv) {
    cnn_conv2d c = *cv;
    c.choose_n = cv->n / sh->n;
    c.choice_n = cv->n * sh->world;
    return c;
}

/* rows m of an (M, C) view summed by slices of m / S rows (M = N * H * W, images outermost) into out, through the
 * scratch's rows and the tree */
static cnn_status slice_sums(cnn_backend *be, cnn_shards *sh, int64_t m, int c, const void *x, float *out) {
    const int64_t rows = m / sh->n, bytes = rows * c * (int64_t)cnn_dtype_size(be->act_dtype);
    cnn_status st = CNN_OK;
    if (sh->saved.channel_sum_rows) st = sh->saved.channel_sum_rows(be, sh->n, m, c, x, row(sh, c, 0), stride(c));
    else
        for (int j = 0; j < sh->n && st == CNN_OK; j++)
            st = sh->saved.channel_sum(be, rows, c, at(x, j * bytes), row(sh, c, j));
    return st == CNN_OK ? tree(be, sh, c, sh->scratch, out) : st;
}

static cnn_status w_fprop(cnn_backend *be, const cnn_conv2d *cv, const cnn_epilogue *ep, const void *x, const void *w,
                          void *y) {
    cnn_shards *sh = be->shards;
    if (as_called(sh, cv->n)) return sh->saved.conv2d_fprop(be, cv, ep, x, w, y);
    const cnn_conv2d c = conv_whole(sh, cv);
    return sh->saved.conv2d_fprop(be, &c, ep, x, w, y);
}

static cnn_status w_fprop_pool(cnn_backend *be, const cnn_conv2d *cv, const cnn_epilogue *ep, const cnn_pool2d *pl,
                               const void *x, const void *w, void *y) {
    cnn_shards *sh = be->shards;
    if (as_called(sh, cv->n)) return sh->saved.conv2d_fprop_pool(be, cv, ep, pl, x, w, y);
    const cnn_conv2d c = conv_whole(sh, cv);
    return sh->saved.conv2d_fprop_pool(be, &c, ep, pl, x, w, y);
}

static cnn_status w_fprop_pair(cnn_backend *be, const cnn_conv2d *cv, const cnn_conv2d *cv2, const cnn_epilogue *ep,
                               const void *x, const void *w, const void *x2, const void *w2, void *y) {
    cnn_shards *sh = be->shards;
    if (as_called(sh, cv->n)) return sh->saved.conv2d_fprop_pair(be, cv, cv2, ep, x, w, x2, w2, y);
    const cnn_conv2d c = conv_whole(sh, cv), c2 = conv_whole(sh, cv2);
    return sh->saved.conv2d_fprop_pair(be, &c, &c2, ep, x, w, x2, w2, y);
}

static cnn_status w_dgrad(cnn_backend *be, const cnn_conv2d *cv, const void *dy, const void *w, void *dx,
                          bool accumulate) {
    cnn_shards *sh = be->shards;
    if (as_called(sh, cv->n)) return sh->saved.conv2d_dgrad(be, cv, dy, w, dx, accumulate);
    const cnn_conv2d c = conv_whole(sh, cv);
    return sh->saved.conv2d_dgrad(be, &c, dy, w, dx, accumulate);
}

/* dx's sums, where asked, by slices after the one launch (a pass over dx) */
static cnn_status w_dgrad_relu(cnn_backend *be, const cnn_conv2d *cv, const void *dy, const void *w,
                               const void *relu_y, void *dx, float *dx_sum) {
    cnn_shards *sh = be->shards;
    if (as_called(sh, cv->n)) return sh->saved.conv2d_dgrad_relu(be, cv, dy, w, relu_y, dx, dx_sum);
    const cnn_conv2d c = conv_whole(sh, cv);
    if (sh->n == 1) return sh->saved.conv2d_dgrad_relu(be, &c, dy, w, relu_y, dx, dx_sum); /* one slice's sums */
    cnn_status st = sh->saved.conv2d_dgrad_relu(be, &c, dy, w, relu_y, dx, NULL);
    return st == CNN_OK && dx_sum ? slice_sums(be, sh, (int64_t)cv->n * cv->h * cv->w, cv->c, dx, dx_sum) : st;
}

/* every slice's filter gradient in one call (choose_n: into the scratch's rows; the slices share the global batch's
 * split count: choice_n), added in the tree; a rank of one slice writes its sum, that slice's, straight into dw */
static cnn_status w_wgrad(cnn_backend *be, const cnn_conv2d *cv, const void *x, const void *dy, float *dw) {
    cnn_shards *sh = be->shards;
    if (as_called(sh, cv->n)) return sh->saved.conv2d_wgrad(be, cv, x, dy, dw);
    const cnn_conv2d c = conv_whole(sh, cv);
    if (sh->n == 1) return sh->saved.conv2d_wgrad(be, &c, x, dy, dw);
    const int64_t count = (int64_t)c.k * c.r * c.s * c.c;
    CNN_ASSERT(count <= sh->cap);
    cnn_status st = sh->saved.conv2d_wgrad(be, &c, x, dy, sh->scratch);
    return st == CNN_OK ? tree(be, sh, count, sh->scratch, dw) : st;
}

static cnn_status w_channel_sum(cnn_backend *be, int64_t m, int c, const void *dy, float *out) {
    cnn_shards *sh = be->shards;
    if (m % sh->n != 0) return sh->saved.channel_sum(be, m, c, dy, out);
    return slice_sums(be, sh, m, c, dy, out);
}

/* a pool computes each output from its own image's window: one launch over the batch gives every slice's bits;
 * dx's sums, where asked, by slices after it */
static cnn_status w_pool_backward(cnn_backend *be, const cnn_pool2d *pl, const void *x, const void *y,
                                  const void *dy, void *dx, bool accumulate) {
    cnn_shards *sh = be->shards;
    if (as_called(sh, pl->n) || !pl->dx_sum) return sh->saved.pool2d_backward(be, pl, x, y, dy, dx, accumulate);
    cnn_pool2d p = *pl;
    p.dx_sum = NULL;
    cnn_status st = sh->saved.pool2d_backward(be, &p, x, y, dy, dx, accumulate);
    return st == CNN_OK ? slice_sums(be, sh, (int64_t)pl->n * pl->h * pl->w, pl->c, dx, pl->dx_sum) : st;
}

/* the linear layer as the convolutions: one call over the slices (choose_n), chosen for the global batch */
static cnn_linear linear_whole(const cnn_shards *sh, const cnn_linear *ln) {
    cnn_linear l = *ln;
    l.choose_n = ln->n / sh->n;
    l.choice_n = ln->n * sh->world;
    return l;
}

static cnn_status w_linear_forward(cnn_backend *be, const cnn_linear *ln, const void *x, const void *w,
                                   const float *bias, void *y) {
    cnn_shards *sh = be->shards;
    if (as_called(sh, ln->n)) return sh->saved.linear_forward(be, ln, x, w, bias, y);
    const cnn_linear l = linear_whole(sh, ln);
    return sh->saved.linear_forward(be, &l, x, w, bias, y);
}

/* dx in the one call; dw's slices in rows of out * in floats, then dbias's in rows of out after all of them, added
 * in the tree (a rank of one slice: its sums straight into dw and dbias) */
static cnn_status w_linear_backward(cnn_backend *be, const cnn_linear *ln, const void *x, const void *w,
                                    const void *dy, void *dx, bool accumulate, float *dw, float *dbias) {
    cnn_shards *sh = be->shards;
    if (as_called(sh, ln->n)) return sh->saved.linear_backward(be, ln, x, w, dy, dx, accumulate, dw, dbias);
    const cnn_linear l = linear_whole(sh, ln);
    if (sh->n == 1) return sh->saved.linear_backward(be, &l, x, w, dy, dx, accumulate, dw, dbias);
    const int64_t nw = dw ? (int64_t)l.out * l.in : 0, nb = dbias ? l.out : 0;
    CNN_ASSERT(stride(nw) + stride(nb) <= sh->cap);
    float *bias_rows = sh->scratch + sh->n * stride(nw); /* rows of stride(nb) after dw's */
    cnn_status st = sh->saved.linear_backward(be, &l, x, w, dy, dx, accumulate, dw ? sh->scratch : NULL,
                                              dbias ? bias_rows : NULL);
    if (st == CNN_OK && dw) st = tree(be, sh, nw, sh->scratch, dw);
    if (st == CNN_OK && dbias) st = tree(be, sh, nb, bias_rows, dbias);
    return st;
}

/* the ops wrapped, each beside its wrapper (an optional op the backend lacks stays NULL): those whose kernel is
 * chosen for the global batch, on any number of slices, and those that run slice by slice, on 2 or more */
#define CHOSEN_OPS(X)                                                                                                  \
    X(conv2d_fprop, w_fprop) X(conv2d_fprop_pool, w_fprop_pool) X(conv2d_fprop_pair, w_fprop_pair)                     \
    X(conv2d_dgrad, w_dgrad) X(conv2d_dgrad_relu, w_dgrad_relu) X(conv2d_wgrad, w_wgrad)                               \
    X(linear_forward, w_linear_forward) X(linear_backward, w_linear_backward)
#define SLICED_OPS(X) X(channel_sum, w_channel_sum) X(pool2d_backward, w_pool_backward)

/* the stem's BatchNorm backward with its max-pool's inside (bn_backward_pool) sums over the pool's tiles: not
 * sliced by the backends, so the train plan keeps the two apart */
static bool w_bn_pool_fusable(cnn_backend *be, const cnn_bn *bn, const cnn_pool2d *pl) {
    (void)be, (void)bn, (void)pl;
    return false;
}

/* the floats of the largest sum one op makes: net's widest parameter (a filter or a linear weight) and its
 * widest vector (a bias) */
static int64_t widest_sum(const cnn_net *net) {
    int64_t widest = 0, widest_1d = 0;
    for (int i = 0; i < net->n_params; i++) {
        int64_t numel = 1;
        for (int d = 0; d < net->params[i].ndim; d++) numel *= net->params[i].shape[d];
        widest = numel > widest ? numel : widest;
        if (net->params[i].ndim == 1) widest_1d = numel > widest_1d ? numel : widest_1d;
    }
    return widest + widest_1d;
}

cnn_status cnn_shards_begin(cnn_backend *be, int shards, int world, const cnn_net *net) {
    CNN_ASSERT(!be->shards && shards >= 0 && shards <= CNN_SHARDS_MAX && (shards & (shards - 1)) == 0 && world >= 1);
    be->batch_shards = shards;
    if (shards < 1) return CNN_OK;
    if (shards > 1 && !be->tree_sum)
        return cnn_fail(CNN_E_UNSUPPORTED, "the %s backend cannot sum a batch by slices", be->name);
    cnn_shards *sh = calloc(1, sizeof *sh);
    if (!sh) return cnn_fail(CNN_E_OOM, "out of host memory for the batch's slices");
    sh->saved = *be;
    sh->n = shards, sh->world = world;
    sh->cap = shards > 1 ? stride(widest_sum(net)) + 128 : 0; /* a linear layer's two sums, in rows of their strides */
    cnn_status st = shards > 1 ? be->alloc(be, (size_t)shards * (size_t)sh->cap * sizeof(float),
                                           "the batch slices' sums", (void **)&sh->scratch)
                               : CNN_OK;
    if (st != CNN_OK) {
        free(sh);
        be->batch_shards = 0;
        return st;
    }
    be->shards = sh;
    if (be->bn_pool_fusable) be->bn_pool_fusable = w_bn_pool_fusable;
#define WRAP(op, fn) \
    if (be->op) be->op = fn;
    CHOSEN_OPS(WRAP)
    if (shards > 1) { SLICED_OPS(WRAP) } /* a rank of one slice sums its batch whole, as a slice */
#undef WRAP
    return CNN_OK;
}

void cnn_shards_end(cnn_backend *be) {
    cnn_shards *sh = be->shards;
    be->batch_shards = 0;
    if (!sh) return;
    const cnn_backend *o = &sh->saved; /* the ops begin replaced; the rest of the table has moved on (counters) */
#define UNWRAP(op, fn) be->op = o->op;
    CHOSEN_OPS(UNWRAP)
    SLICED_OPS(UNWRAP)
#undef UNWRAP
    be->bn_pool_fusable = o->bn_pool_fusable;
    be->shards = NULL;
    if (sh->scratch) be->free(be, sh->scratch);
    free(sh);
}

cnn_status cnn_model_begin_slices(cnn_model *m, int batch, int world, int *slices) {
    *slices = cnn_shards_local(batch * world, world);
    CNN_TRY(cnn_shards_begin(m->be, *slices, world, m->net));
    if (*slices > 0) cnn_model_set_graphs(m, m->use_graphs); /* graphs hold the ops as they were */
    return CNN_OK;
}

void cnn_model_end_slices(cnn_model *m) {
    if (m->be->shards) cnn_model_set_graphs(m, m->use_graphs);
    cnn_shards_end(m->be);
}
