/* plan.h — what the executor runs and where each value lives (internal to src/core).
 *
 *   fuse.c  the steps of both plans: which nodes run as one backend call (eval: conv -> BN -> add -> ReLU, conv +
 *           max-pool, two convs summed; train: BN -> add -> ReLU)
 *   plan.c  lifetimes and arena offsets of the values (and, in training, gradients) of either plan, and the
 *           greedy packer that places buffers with disjoint lifetimes in the same memory
 *
 * Both planners read the graph, the batch size and the backend's `_fusable` answers; neither runs anything.
 */
#ifndef CNN_PLAN_H
#define CNN_PLAN_H

#include "cnn/backend.h"
#include "cnn/net.h"

#define CNN_ARENA_ALIGN 256 /* every buffer of an arena starts on this many bytes */

/* A buffer of `bytes` alive from step `first` to step `last` inclusive. */
typedef struct cnn_interval {
    size_t bytes;
    int first, last;
    size_t offset; /* out */
} cnn_interval;

/* Greedy best-fit by decreasing size: every interval gets an `align`-aligned offset such that no two
 * intervals overlapping in time overlap in memory. Returns the arena size. Deterministic. */
size_t cnn_plan_arena(cnn_interval *iv, int n, size_t align);
/* What cnn_plan_arena (and the model's planners) return when host memory ran out (CNN_E_OOM recorded). */
#define CNN_PLAN_OOM SIZE_MAX

/* One backend call of a plan: node `node` with what is fused into it. A step of the train plan is a node alone or
 * a BN with the residual add and ReLU after it (bn, pool, pair -1: the conv output stays stored, the BN backward
 * reads it). */
typedef struct cnn_step {
    int node;     /* the op executed                                   */
    int bn;       /* BN node folded into the epilogue (-1)              */
    bool has_residual;
    int residual; /* node whose value is added before the ReLU (-1 = the network input) */
    bool relu;
    int pool;     /* max-pool node fused after the epilogue (-1)        */
    int out;      /* the node whose buffer holds the step's value (eval: `node`, which absorbed nodes alias; train:
                   * the chain's last node, which its consumers read)    */
    int pair;     /* conv node summed with `node` in one kernel (-1): its step was absorbed, and `residual` is none */
    int pair_bn;  /* that conv's BN node                                 */
    size_t pair_off; /* byte offset in the model's `pairw` arena of the pair's folded filters and shift */
} cnn_step;

/* Node `node` as a step of its own, nothing fused: every step of the train plan, and where the eval plan starts. */
static inline cnn_step cnn_step_alone(int node) {
    return (cnn_step){.node = node, .bn = -1, .residual = -1, .pool = -1, .out = node, .pair = -1, .pair_bn = -1};
}

#define CNN_NOT_KEPT (-3) /* value_of: a node whose value no eval step stores (the inner nodes of a pair) */

/* Both plans of a model for batches up to max_batch. Arrays of n_nodes entries (grad_acc: 2 per node). */
typedef struct cnn_plan {
    /* train: the steps forward in order, backward in reverse; the values and gradients of the steps' `out` nodes */
    cnn_step *train_steps;
    int n_train_steps;
    size_t *train_off;  /* byte offset of each step's output, by its `out` node              */
    size_t *grad_off;   /* byte offset of the gradient of that output, likewise               */
    bool *grad_acc;     /* step x input (0: the node's first input, 1: the add's second or the chain's residual):
                         * the backward accumulates into that input's gradient             */
    /* eval */
    cnn_step *steps;
    int n_steps;
    int *value_of;      /* node -> node whose buffer holds its value (-1 = input, CNN_NOT_KEPT) */
    size_t *eval_off;   /* byte offset per node (valid where value_of[i] == i)            */
} cnn_plan;

/* The problem of node nd for n images (its input's shape from the graph). */
void cnn_node_conv2d(const cnn_net *net, const cnn_node *nd, int n, cnn_conv2d *cv);
void cnn_node_pool2d(const cnn_net *net, const cnn_node *nd, int n, cnn_pool2d *pl);
/* C x H x W of node `in` (-1: the network input) */
void cnn_node_in_chw(const cnn_net *net, int in, int *c, int *h, int *w);

/* fuse.c: the eval steps (p->steps, p->n_steps, p->value_of, which starts all -2) of net for batches of
 * max_batch on backend be; the train steps (p->train_steps, p->n_train_steps). CNN_E_OOM: host memory ran out. */
cnn_status cnn_fuse_eval(const cnn_net *net, cnn_backend *be, int max_batch, cnn_plan *p);
cnn_status cnn_fuse_train(const cnn_net *net, cnn_plan *p);
/* The only consumer of node i, or -1 when it has none or several (or is the output). */
int cnn_sole_consumer(const cnn_net *net, int i);
/* The train plan's backward (fuse.c; model.c runs it): whether train step s, whose op is `reader`, alone reads the
 * output of step s - 1, whose op is `op` with a ReLU fused; whether step s, a max-pool, applies the ReLU's backward
 * of the conv step before it; and whether it also sums its input's gradient into that conv's bias gradient. */
bool cnn_train_relu_reader(const cnn_net *net, const cnn_plan *p, int s, cnn_op reader, cnn_op op);
bool cnn_train_pool_applies_relu(const cnn_net *net, const cnn_plan *p, int s);
bool cnn_train_pool_sums_bias(const cnn_net *net, const cnn_plan *p, int s);
/* The inputs of train step sp whose gradients its backward writes: in[0] the node's first input (a chain's BN
 * input), in[1] an add's second input or a chain's residual, -2 where there is none (-1: the network input). */
void cnn_train_step_inputs(const cnn_net *net, const cnn_step *sp, int in[2]);

/* A pair step's block in `pairw` (from its pair_off): the first conv's folded filter (w1 act elements) at 0,
 * `node`'s (w2) at o2, the summed shift (k floats) at os; bytes in all. esz: bytes per activation element. */
typedef struct cnn_pair_layout {
    int64_t w1, w2, k;
    size_t o2, os, bytes;
} cnn_pair_layout;
cnn_pair_layout cnn_pair_layout_of(const cnn_net *net, size_t esz, const cnn_step *sp);

/* plan.c: arena offsets. Train: values and gradients of the train steps' outputs (p->train_off, grad_off,
 * grad_acc); eval: the values of the steps cnn_fuse_eval made (p->eval_off). Each returns the arena bytes it needs,
 * or CNN_PLAN_OOM (CNN_E_OOM recorded). */
size_t cnn_plan_train(const cnn_net *net, int max_batch, size_t esz, cnn_plan *p);
size_t cnn_plan_eval(const cnn_net *net, int max_batch, size_t esz, cnn_plan *p);

/* Gradient elements [lo, hi) of the arena, complete once the backward has run train step `step`. */
typedef struct cnn_grad_bucket {
    int step;
    int64_t lo, hi;
} cnn_grad_bucket;
/* plan.c: the data-parallel gradient sums of train plan p in buckets of about bucket_bytes, in the order the
 * backward completes them, into out (room for net->n_params + 1); how many, or -1 (CNN_E_OOM recorded). */
int cnn_plan_buckets(const cnn_net *net, const cnn_plan *p, size_t bucket_bytes, cnn_grad_bucket *out);

#endif
