/* model.h — the runtime model's internals, shared by src/core files: model.c (creation, the executor),
 * weights.c (initialisation, parameter access, safetensors load/save) and train.c (checkpoints need the raw
 * state). The plans it runs are plan.h's. */
#ifndef CNN_MODEL_H
#define CNN_MODEL_H

#include "cnn/net.h"
#include "cnn/safetensors.h"
#include "plan.h"

enum { CNN_GRAPH_EVAL = 0, CNN_GRAPH_TRAIN_FWD, CNN_GRAPH_BACKWARD };
#define CNN_MAX_GRAPHS 16

typedef struct cnn_graph_entry {
    int kind, n;
    float eps, scale;
    int runs;
    void *graph;
} cnn_graph_entry;

/* Called after each step of a train-mode forward with its value (node: the step's last node; count act_dtype
 * elements on the device); a status other than CNN_OK stops the forward. While set, forwards run eagerly (no
 * recorded graph): only the diagnosis of a non-finite step (guard.c) sets it (cnn_model_set_node_check; fn NULL
 * removes it). */
typedef cnn_status (*cnn_node_check_fn)(void *ctx, cnn_model *m, int node, const void *value, int64_t count);

/* Arenas (one device allocation per lifetime class):
 *   params   float32 trainable parameters, KRSC for conv filters        (n_trainable)
 *   grads    float32 gradients, same layout                            (n_trainable; training only)
 *   buffers  float32 BN running statistics                             (n_buffer)
 *   wact     act_dtype copies of conv/linear weights (absent for F32: the executor points into params)
 *   bn       per BN node: save_mean, save_invstd (training) and the folded scale, shift (eval)
 *   pairw    per pair step (eval): both convs' filters scaled by their BN scales (act_dtype), the summed shift
 *   arena    activations and their gradients, placed by lifetime (plan.c); the eval plan reuses the memory
 *   masks    per BN -> ReLU and max-pool train step: what its backward reads instead of its output (GPU backends) */
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
    unsigned char *masks;    /* train, where the backend keeps them (cnn_backend.keeps_masks): the ReLU bits of the train
                              * plan's BN -> ReLU steps (a bit per element), the argmax bytes of its max-pools (a
                              * byte per output element), for max_batch images */
    int64_t *mask_off;       /* per node: byte offset of its block in `masks`, or -1 */
    cnn_plan plan;           /* both plans: steps and arena offsets                   */
    int64_t *counters;       /* per param: num_batches_tracked (host)                     */
    bool fold_valid;
    uint64_t dropout_seed;
    int last_n;
    cnn_mode last_mode;
    size_t device_bytes;
    float *host;             /* host scratch */
    size_t host_elems;
    bool use_graphs, has_dropout;
    bool profile;            /* cnn_model_profile_train: a timing mark after every step */
    float loss_scale;        /* multiplies the loss gradient (fp16 training); 1 otherwise */
    cnn_graph_entry graphs[CNN_MAX_GRAPHS];
    int n_graphs;
    struct { int kind, n; } dry[CNN_MAX_GRAPHS]; /* passes whose programs a dry run has compiled (model.c) */
    int n_dry;
    cnn_status (*dry_step)(void *ctx); /* the rest of a training step, run in its forward's dry run (model.c) */
    void *dry_step_ctx;
    int dry_eval[2], n_dry_eval; /* cnn_model_set_dry_eval */
    /* the train forward's conv whose output only the next step's BatchNorm reads: its epilogue's sums of y for that
     * BatchNorm (cnn_conv_stats), and the conv's node (-1: none pending) */
    cnn_conv_stats conv_sums;
    int conv_sums_node;
    cnn_node_check_fn node_check; /* called after each step of an eager train-mode forward (guard.c) */
    void *node_check_ctx;
    bool allow_nonfinite;    /* load weights holding NaN/Inf or negative variances */
    /* data parallel (cnn_model_set_comm): the communicator and the gradient buckets, in the order the backward
     * completes them; bucket b is summed right after backward train step buckets[b].step */
    void *comm;
    cnn_dp_opts dp;          /* world, sync_bn, bf16_sums as set */
    void *sum_scratch;       /* bf16_sums: (n_trainable) bf16 device memory the sums run in */
    cnn_grad_bucket *buckets;
    int n_buckets;
};

/* Host scratch of at least elems floats, owned by the model (NULL + a recorded CNN_E_OOM). */
float *cnn_model_host_scratch(cnn_model *m, size_t elems);

/* Parameter or buffer pi's float32 values on the device (model.c, fold.c). */
static inline const float *pf(const cnn_model *m, int pi) {
    const cnn_param *p = &m->net->params[pi];
    return (p->kind == CNN_PARAM_TRAINABLE ? m->params : m->buffers) + p->offset;
}

/* fold.c: the eval plan's folded BN scales and shifts and its pairs' folded filters, from the current parameters
 * (sets fold_valid). */
cnn_status cnn_model_refresh_fold(cnn_model *m);

/* weights.c: every parameter from its initialiser (torchvision's), seeded. */
cnn_status cnn_model_init_weights(cnn_model *m, uint64_t seed);

/* Strict load from an opened safetensors file; tensors whose names start with ignore_prefix (may be NULL)
 * are left for the caller (optimizer state in checkpoints). Error messages start with path. */
cnn_status cnn_model_load_st(cnn_model *m, const cnn_st_file *f, const char *path, const char *ignore_prefix);

/* A model's state on the host as its device holds it: the trainable arena, then the buffer arena (filters KRSC),
 * then `extra` floats the caller fills (a checkpoint's optimizer state); and the counters, per param. A training
 * run allocates one, page-locked where the backend can, and takes every checkpoint into it in one download per
 * arena, so that a checkpoint holds the training thread only that long (perf-log step 106); cnn_state_items turns
 * it into torchvision's layout on whichever thread writes it. */
typedef struct cnn_state {
    const cnn_net *net;
    float *arena;      /* net->n_trainable + net->n_buffer + extra */
    int64_t *counters; /* net->n_params */
    cnn_backend *host_be; /* arena from host_be->host_alloc (page-locked); NULL: malloc */
} cnn_state;
cnn_status cnn_state_alloc(cnn_model *m, int64_t extra, bool pinned, cnn_state *out); /* *out zeroed on failure */
cnn_status cnn_model_state_take(cnn_model *m, cnn_state *s);
void cnn_state_free(cnn_state *s);
/* One item per parameter (net->params order, torchvision names and layouts) into items (net->n_params entries):
 * the filters converted into *conv (the caller frees it), the rest pointing into s. */
cnn_status cnn_state_items(const cnn_state *s, cnn_st_item *items, float **conv);
/* The weights file of s (its parameters, as cnn_model_save writes a model's), checked and written atomically. */
cnn_status cnn_state_save(const cnn_state *s, const char *path);

/* The device float that receives the loss of cnn_model_backward / cnn_model_loss. */
float *cnn_model_loss_buffer(cnn_model *m);

void cnn_model_set_node_check(cnn_model *m, cnn_node_check_fn fn, void *ctx);

/* What a training step runs besides the model's passes (the loop's guard and optimizer, train.c): fn is called in
 * the dry run of the first train forward, after its backward's, so that its programs compile in the same batch
 * (perf-log step 107; every launch of a dry run is skipped, so fn changes nothing). fn NULL removes it. */
static inline void cnn_model_set_dry_step(cnn_model *m, cnn_status (*fn)(void *ctx), void *ctx) {
    m->dry_step = fn, m->dry_step_ctx = ctx;
}
struct cnn_dist_ctx;
/* evaluate.c: the batch sizes (at most 2, their count returned) cnn_evaluate_dist(m, a set of ds_n images, n,
 * batch, dist) runs */
int cnn_eval_batch_sizes(const cnn_model *m, int64_t ds_n, int n, int batch, const struct cnn_dist_ctx *dist,
                         int out[2]);
/* The eval batch sizes the loop will run (its batch and the test set's remainder; count 0: none): their eval
 * passes are dry-run with the first train forward's, so that they compile in its batch and not alone at the
 * first evaluation (perf-log step 109). */
static inline void cnn_model_set_dry_eval(cnn_model *m, const int *ns, int count) {
    m->n_dry_eval = 0;
    for (int i = 0; i < count && m->n_dry_eval < 2; i++)
        if (ns[i] > 0 && ns[i] <= m->max_batch) m->dry_eval[m->n_dry_eval++] = ns[i];
}

#endif
