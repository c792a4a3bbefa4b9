/* optim.c -- launchers of kernels/optim.cu: SGD (momentum, dampening, Nesterov, weight decay) and AdamW over flat
 * float32 arrays, and the non-finite count (into host memory, so it synchronises and cannot be recorded into a
 * graph), and the training step's non-finite guard (one block; recordable). */
#include "cuda/internal.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>

/* the host's view of the guard state is the device's */
_Static_assert(sizeof(cnn_guard_state) == sizeof(guard_state), "guard state layout");
_Static_assert(offsetof(cnn_guard_state, skip) == offsetof(guard_state, skip), "guard state layout");
_Static_assert(offsetof(cnn_guard_state, loss) == offsetof(guard_state, loss), "guard state layout");

/* the kernels' program: the activation dtype's (the type of the weight copies the updates write) */
static cnn_status run(cnn_backend *be, int entry, optim_args *a) {
    cuda_be *cb = cuda_impl(be);
    cuda_bind(cb);
    CNN_ASSERT(a->count >= 0);
    if (a->count == 0) return CNN_OK;
    a->vec = aligned16(a->w) && aligned16(a->g) && aligned16(a->buf) && aligned16(a->v) && aligned16(a->wact);
    CUfunction f;
    CNN_TRY(cuda_kernel(cb, &cuda_family_optim, cb->pub.act_dtype, 0, entry, &f));
    char what[64];
    snprintf(what, sizeof what, "%s count %lld", cuda_family_optim.entries[entry], a->count);
    return cuda_launch(cb, f, what, cuda_grid_1d(cb, a->count, 256), 1, 1, 256, 1, a);
}

cnn_status cuda_sgd_update(cnn_backend *be, const cnn_sgd *o, int64_t count, float *w, const float *g,
                           float *momentum_buf, float grad_scale) {
    CNN_ASSERT(w && g);
    CNN_ASSERT(o->momentum == 0.0f || momentum_buf);
    optim_args a = {.count = count, .w = w, .g = g, .buf = momentum_buf, .grad_scale = grad_scale, .lr = o->lr,
                    .momentum = o->momentum, .dampening = o->dampening, .weight_decay = o->weight_decay,
                    .nesterov = o->nesterov, .first_step = o->first_step, .skip = o->skip, .wact = o->act_copy};
    return run(be, OPT_SGD, &a);
}

cnn_status cuda_adamw_update(cnn_backend *be, const cnn_adamw *o, int64_t count, float *w, const float *g, float *m,
                             float *v, float grad_scale) {
    CNN_ASSERT(w && g && m && v);
    if (o->step < 1) return cnn_fail(CNN_E_INVALID, "adamw step %lld: steps count from 1", (long long)o->step);
    double bc1 = 1.0 - pow((double)o->beta1, (double)o->step), bc2 = 1.0 - pow((double)o->beta2, (double)o->step);
    optim_args a = {.count = count, .w = w, .g = g, .buf = m, .v = v, .grad_scale = grad_scale, .lr = o->lr,
                    .weight_decay = o->weight_decay, .beta1 = o->beta1, .beta2 = o->beta2, .eps = o->eps,
                    .step_size = (float)(o->lr / bc1), .bc2_sqrt = (float)sqrt(bc2), .skip = o->skip,
                    .wact = o->act_copy};
    return run(be, OPT_ADAMW, &a);
}

cnn_status cuda_count_nonfinite(cnn_backend *be, int64_t count, const float *x, int64_t *out) {
    cuda_be *cb = cuda_impl(be);
    cuda_bind(cb);
    *out = 0;
    if (cb->capturing)
        return cnn_fail(CNN_E_INVALID, "count_nonfinite returns to the host and cannot be recorded into a graph");
    CNN_TRY(be->zero(be, (void *)(uintptr_t)cb->scratch, sizeof(unsigned long long)));
    optim_args a = {.count = count, .x = x, .counter = (unsigned long long *)(uintptr_t)cb->scratch};
    CNN_TRY(run(be, OPT_NONFINITE, &a));
    unsigned long long n = 0;
    CNN_TRY(be->download(be, &n, (const void *)(uintptr_t)cb->scratch, sizeof n));
    *out = (int64_t)n;
    return CNN_OK;
}

cnn_status cuda_guard_step(cnn_backend *be, const cnn_guard *g, cnn_guard_state *state) {
    cuda_be *cb = cuda_impl(be);
    cuda_bind(cb);
    CNN_ASSERT(g->loss && state && g->n_stats >= 0 && (g->n_stats == 0 || (g->stats && g->backup)));
    guard_args a = {.loss = g->loss, .stats = g->stats, .backup = g->backup, .n_stats = g->n_stats,
                    .halt_on_bad = g->halt_on_bad, .state = (guard_state *)state};
    CUfunction f;
    CNN_TRY(cuda_kernel(cb, &cuda_family_optim, cb->pub.act_dtype, 0, OPT_GUARD, &f));
    return cuda_launch(cb, f, "guard_step", 1, 1, 1, 256, 1, &a);
}
