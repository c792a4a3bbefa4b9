/* fuse.c — the steps of both plans: which nodes of the graph run as one backend call.
 *
 * Train (cnn_fuse_train), visiting the nodes an add's shallower branch first (visit): a BN takes in the residual add
 * that alone reads it (where the add's other input is already computed) and the ReLU that alone reads what it ends
 * with: one bn_forward_train and one bn_backward, whose value is the ReLU's (or the add's) and whose backward sends
 * the residual its gradient. The BN's own output and the add's are never stored. A conv that only a ReLU reads (VGG
 * without BN) applies it in its epilogue and stores only the ReLU's output, from which its backward takes the mask.
 * Every other node is a step of its own (a conv's output that a BN reads stays: the BN backward reads it).
 *
 * Eval (cnn_fuse_eval):
 * Walking the nodes in order, a step starts at each node not yet absorbed and takes in what follows it alone:
 *   conv -> BN -> residual add -> ReLU   one conv with an epilogue (BN folded into scale/shift; the add's other
 *                                        input already computed, or the network input)
 *   ... -> max-pool                      a conv whose output only a max-pool reads, where the backend says
 *                                        conv2d_pool_fusable (the ResNet stem on the GPU)
 *   two conv -> BN branches summed       the other branch's step (emitted just before) and this one become one
 *                                        conv2d_fprop_pair, where the backend says conv2d_pair_fusable
 * Dropout and trivial flattens alias their input (value_of). Where each step's value lives is plan.c's.
 */
#include "plan.h"

#include <stdlib.h>

static int n_inputs(const cnn_node *nd) { return nd->op == CNN_OP_ADD ? 2 : 1; }

static int resolve(const cnn_plan *p, int node) { return node < 0 ? -1 : p->value_of[node]; }

int cnn_sole_consumer(const cnn_net *net, int i) {
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

static size_t align_bytes(size_t b) { return (b + CNN_ARENA_ALIGN - 1) / CNN_ARENA_ALIGN * CNN_ARENA_ALIGN; }

cnn_pair_layout cnn_pair_layout_of(const cnn_net *net, size_t esz, const cnn_step *sp) {
    const cnn_node *a = &net->nodes[sp->pair], *b = &net->nodes[sp->node];
    int ca, cb, h, w;
    cnn_node_in_chw(net, a->in[0], &ca, &h, &w);
    cnn_node_in_chw(net, b->in[0], &cb, &h, &w);
    cnn_pair_layout l = {.w1 = (int64_t)a->c * a->r * a->s * ca, .w2 = (int64_t)b->c * b->r * b->s * cb, .k = b->c};
    l.o2 = align_bytes((size_t)l.w1 * esz);
    l.os = l.o2 + align_bytes((size_t)l.w2 * esz);
    l.bytes = l.os + align_bytes((size_t)l.k * 4);
    return l;
}

/* Whether the conv -> BN chain of step st (not yet emitted), whose BN feeds the add node `add`, and the other
 * input of that add, `other`, form a pair the backend runs in one kernel: `other` is the BN ending the last
 * emitted step, a conv -> BN step with nothing else fused, read by this add alone. */
static bool pair_with_last(const cnn_net *net, cnn_backend *be, int max_batch, const cnn_plan *p, const cnn_step *st,
                           int other, int add) {
    if (!be->conv2d_fprop_pair || !be->conv2d_pair_fusable || other < 0 || p->n_steps == 0) return false;
    const cnn_step *last = &p->steps[p->n_steps - 1];
    if (net->nodes[st->node].op != CNN_OP_CONV || st->bn < 0 || net->nodes[last->node].op != CNN_OP_CONV ||
        last->bn != other || last->has_residual || last->relu || last->pool >= 0 || last->pair >= 0 ||
        cnn_sole_consumer(net, other) != add)
        return false;
    cnn_conv2d first, second;
    cnn_node_conv2d(net, &net->nodes[last->node], max_batch, &first);
    cnn_node_conv2d(net, &net->nodes[st->node], max_batch, &second);
    return be->conv2d_pair_fusable(be, &first, &second);
}

void cnn_train_step_inputs(const cnn_net *net, const cnn_step *sp, int in[2]) {
    const cnn_node *nd = &net->nodes[sp->node];
    in[0] = nd->in[0];
    in[1] = sp->has_residual ? sp->residual : nd->op == CNN_OP_ADD ? nd->in[1] : -2;
}

/* The order the train plan visits the nodes: a topological order (each node after its inputs) in which the two
 * branches of an add come shallower first: a ResNet block's downsample conv and BN before its main branch. The
 * backward runs the steps in reverse, and the first writer of a gradient overwrites it (plan.c): so the main
 * branch's strided conv writes the block input's gradient whole and the downsample's 1x1/2, last, adds only the
 * pixels its stride reaches (conv2d_dgrad.c in place), instead of the 1x1/2 zeroing three quarters of it and the
 * main branch reading it back (perf-log step 77). Depth = the longest path from the network input. */
static void visit(const cnn_net *net, const int *depth, int i, bool *seen, int *order, int *n) {
    if (i < 0 || seen[i]) return;
    seen[i] = true;
    const cnn_node *nd = &net->nodes[i];
    if (n_inputs(nd) == 2) {
        const int a = nd->in[0], b = nd->in[1];
        const int da = a < 0 ? 0 : depth[a], db = b < 0 ? 0 : depth[b];
        visit(net, depth, db < da ? b : a, seen, order, n);
        visit(net, depth, db < da ? a : b, seen, order, n);
    } else {
        visit(net, depth, nd->in[0], seen, order, n);
    }
    order[(*n)++] = i;
}

cnn_status cnn_fuse_train(const cnn_net *net, cnn_plan *p) {
    const int n = net->n_nodes;
    bool *done = calloc((size_t)n, sizeof *done), *seen = calloc((size_t)n, sizeof *seen);
    int *depth = calloc((size_t)n, sizeof *depth), *order = calloc((size_t)n, sizeof *order);
    if (!done || !seen || !depth || !order) {
        free(done), free(seen), free(depth), free(order);
        return cnn_fail(CNN_E_OOM, "out of host memory planning");
    }
    for (int i = 0; i < n; i++) /* node indices are topological: inputs come first */
        for (int s = 0; s < n_inputs(&net->nodes[i]); s++) {
            const int in = net->nodes[i].in[s], d = in < 0 ? 1 : depth[in] + 1;
            if (d > depth[i]) depth[i] = d;
        }
    int nv = 0;
    visit(net, depth, net->output, seen, order, &nv);
    for (int i = 0; i < n; i++) visit(net, depth, i, seen, order, &nv); /* nodes the output does not read */
    CNN_ASSERT(nv == n);
    p->n_train_steps = 0;
    for (int v = 0; v < n; v++) {
        const int i = order[v];
        if (done[i]) continue;
        cnn_step st = cnn_step_alone(i);
        if (net->nodes[i].op == CNN_OP_BN) {
            int j = cnn_sole_consumer(net, i);
            if (j >= 0 && net->nodes[j].op == CNN_OP_ADD) {
                const int other = net->nodes[j].in[0] == i ? net->nodes[j].in[1] : net->nodes[j].in[0];
                if (other < 0 || done[other]) { /* computed by an earlier step (the visit order is topological) */
                    st.has_residual = true, st.residual = other, st.out = j;
                    done[j] = true;
                }
            }
            j = cnn_sole_consumer(net, st.out);
            if (j >= 0 && net->nodes[j].op == CNN_OP_RELU) st.relu = true, st.out = j, done[j] = true;
        } else if (net->nodes[i].op == CNN_OP_CONV) {
            const int j = cnn_sole_consumer(net, i);
            if (j >= 0 && net->nodes[j].op == CNN_OP_RELU) st.relu = true, st.out = j, done[j] = true;
        }
        done[i] = true;
        p->train_steps[p->n_train_steps++] = st;
    }
    free(done), free(seen), free(depth), free(order);
    return CNN_OK;
}

cnn_status cnn_fuse_eval(const cnn_net *net, cnn_backend *be, int max_batch, cnn_plan *p) {
    int n = net->n_nodes;
    bool *done = calloc((size_t)n, sizeof *done);   /* absorbed into a step or aliased */
    bool *emitted = calloc((size_t)n, sizeof *emitted); /* value available */
    if (!done || !emitted) {
        free(done), free(emitted);
        return cnn_fail(CNN_E_OOM, "out of host memory planning");
    }
    p->n_steps = 0;
    for (int i = 0; i < n; i++) {
        if (done[i]) continue;
        const cnn_node *nd = &net->nodes[i];
        int in = resolve(p, nd->in[0]);
        if (nd->op == CNN_OP_DROPOUT ||
            (nd->op == CNN_OP_FLATTEN && nd->in[0] >= 0 && net->nodes[nd->in[0]].h == 1 &&
             net->nodes[nd->in[0]].w == 1)) {
            p->value_of[i] = in; /* identity in eval */
            done[i] = true;
            continue;
        }
        cnn_step st = cnn_step_alone(i);
        int cur = i;
        bool chain = nd->op == CNN_OP_CONV || nd->op == CNN_OP_BN || nd->op == CNN_OP_ADD;
        if (nd->op == CNN_OP_BN) st.bn = i;
        if (chain && nd->op == CNN_OP_CONV) {
            int j = cnn_sole_consumer(net, cur);
            if (j >= 0 && net->nodes[j].op == CNN_OP_BN) {
                st.bn = j;
                done[j] = true;
                cur = j;
            }
        }
        if (chain && nd->op != CNN_OP_ADD) {
            int j = cnn_sole_consumer(net, cur);
            if (j >= 0 && net->nodes[j].op == CNN_OP_ADD) {
                int other = net->nodes[j].in[0] == cur ? net->nodes[j].in[1] : net->nodes[j].in[0];
                int ov = resolve(p, other);
                if (pair_with_last(net, be, max_batch, p, &st, other, j)) { /* the other branch's step becomes part of this one */
                    p->n_steps--;
                    emitted[ov] = false;
                    p->value_of[ov] = p->value_of[other] = CNN_NOT_KEPT;
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
            int j = cnn_sole_consumer(net, cur);
            if (j >= 0 && net->nodes[j].op == CNN_OP_RELU) {
                st.relu = true;
                done[j] = true;
                cur = j;
            }
        }
        /* a conv whose output only a max-pool reads (the ResNet stem): one kernel, where the backend has it */
        if (nd->op == CNN_OP_CONV && be->conv2d_fprop_pool && be->conv2d_pool_fusable) {
            int j = cnn_sole_consumer(net, cur);
            if (j >= 0 && net->nodes[j].op == CNN_OP_MAXPOOL) {
                cnn_conv2d cv;
                cnn_pool2d pl;
                cnn_node_conv2d(net, nd, max_batch, &cv);
                cnn_node_pool2d(net, &net->nodes[j], max_batch, &pl);
                if (be->conv2d_pool_fusable(be, &cv, &pl, st.has_residual)) {
                    st.pool = j;
                    done[j] = true;
                    cur = j;
                }
            }
        }
        st.out = i;
        /* every node absorbed into this step takes the step's value */
        p->value_of[i] = i;
        for (int j = i + 1; j <= cur; j++)
            if (done[j] && p->value_of[j] == -2) p->value_of[j] = i;
        emitted[i] = true;
        done[i] = true;
        p->steps[p->n_steps++] = st;
    }
    free(done);
    free(emitted);
    return CNN_OK;
}

/* ---- the train plan's backward: what a step's backward takes in from the step before ---------------------- */

bool cnn_train_relu_reader(const cnn_net *net, const cnn_plan *p, int s, cnn_op reader, cnn_op op) {
    if (s < 1 || s >= p->n_train_steps) return false;
    const cnn_step *sp = &p->train_steps[s], *sb = &p->train_steps[s - 1];
    return net->nodes[sp->node].op == reader && net->nodes[sb->node].op == op && sb->relu &&
           net->nodes[sp->node].in[0] == sb->out && cnn_sole_consumer(net, sb->out) == sp->node;
}

/* a max-pool after a conv step ending in a ReLU (VGG): the pool's backward applies that ReLU's (cnn_pool2d.relu), and
 * the conv step leaves its output's gradient as the pool wrote it, saving the ReLU's pass (perf-log step 96) */
bool cnn_train_pool_applies_relu(const cnn_net *net, const cnn_plan *p, int s) {
    return cnn_train_relu_reader(net, p, s, CNN_OP_MAXPOOL, CNN_OP_CONV);
}

/* such a pool, overwriting its input's gradient, also sums it per channel into the conv's bias gradient
 * (cnn_pool2d.dx_sum), and the conv step skips its channel_sum over the same gradient (perf-log step 100) */
bool cnn_train_pool_sums_bias(const cnn_net *net, const cnn_plan *p, int s) {
    return cnn_train_pool_applies_relu(net, p, s) && !p->grad_acc[2 * s] &&
           net->nodes[p->train_steps[s - 1].node].param[1] >= 0;
}
