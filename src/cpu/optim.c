/* optim.c — optimizer steps over flat float32 arrays, in PyTorch's order of operations.
 *
 * SGD (torch.optim.SGD), g' = g * grad_scale + weight_decay * w:
 *     momentum != 0:  buf = first_step ? g' : momentum * buf + (1 - dampening) * g'
 *                     d   = nesterov ? g' + momentum * buf : buf
 *     else            d   = g'
 *     w -= lr * d
 * AdamW (torch.optim.AdamW, amsgrad off), g' = g * grad_scale, t = step (1-based):
 *     w *= 1 - lr * weight_decay
 *     m  = lerp(m, g', 1 - beta1)            (= beta1 * m + (1 - beta1) * g', computed as torch's lerp_)
 *     v  = beta2 * v + (1 - beta2) * g'^2
 *     w -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 * Scalars that PyTorch computes in Python (double) are computed in double and rounded once to float.
 * Either does nothing when o->skip points to a nonzero word (the non-finite guard's verdict, below).
 */
#include "cpu/cpu.h"

#include <math.h>
#include <string.h>

cnn_status cnn_cpu_op_sgd_update(cnn_backend *be, const cnn_sgd *o, int64_t count, float *w, const float *g,
                                 float *buf, float grad_scale) {
    CNN_ASSERT(count >= 0);
    const float lr = o->lr, mom = o->momentum, wd = o->weight_decay, damp1 = (float)(1.0 - (double)o->dampening);
    if (mom != 0 && !buf) return cnn_fail(CNN_E_INVALID, "SGD with momentum %g needs a momentum buffer", (double)mom);
    if (o->skip && *o->skip) return CNN_OK; /* the guard's verdict: this step does not happen */
#pragma omp parallel for num_threads(cnn_cpu_threads(be)) schedule(static)
    for (int64_t i = 0; i < count; i++) {
        float gi = g[i] * grad_scale;
        if (wd != 0) gi = gi + wd * w[i];
        float d = gi;
        if (mom != 0) {
            float b = o->first_step ? gi : mom * buf[i] + damp1 * gi;
            buf[i] = b;
            d = o->nesterov ? gi + mom * b : b;
        }
        w[i] = w[i] - lr * d;
    }
    if (o->act_copy) memcpy(o->act_copy, w, (size_t)count * sizeof *w); /* act_dtype is float32 here */
    return CNN_OK;
}

cnn_status cnn_cpu_op_adamw_update(cnn_backend *be, const cnn_adamw *o, int64_t count, float *w, const float *g,
                                   float *m, float *v, float grad_scale) {
    CNN_ASSERT(count >= 0);
    if (o->step < 1) return cnn_fail(CNN_E_INVALID, "AdamW step %lld: steps count from 1", (long long)o->step);
    if (o->skip && *o->skip) return CNN_OK;
    const double bc1 = 1.0 - pow((double)o->beta1, (double)o->step);
    const double bc2 = 1.0 - pow((double)o->beta2, (double)o->step);
    const float decay = (float)(1.0 - (double)o->lr * (double)o->weight_decay);
    const float step_size = (float)((double)o->lr / bc1);
    const float bc2_sqrt = (float)sqrt(bc2);
    const float w1 = (float)(1.0 - (double)o->beta1); /* lerp weight */
    const float b2 = o->beta2, one_b2 = (float)(1.0 - (double)o->beta2), eps = o->eps;
#pragma omp parallel for num_threads(cnn_cpu_threads(be)) schedule(static)
    for (int64_t i = 0; i < count; i++) {
        float gi = g[i] * grad_scale;
        float wi = w[i] * decay;
        float mi = m[i];
        mi = w1 < 0.5f ? mi + w1 * (gi - mi) : gi - (gi - mi) * (1.0f - w1); /* torch's lerp */
        float vi = v[i] * b2 + one_b2 * gi * gi;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        w[i] = wi + (-step_size * mi) / denom; /* torch's addcdiv: self + (value * t1) / t2 */
        m[i] = mi;
        v[i] = vi;
    }
    if (o->act_copy) memcpy(o->act_copy, w, (size_t)count * sizeof *w);
    return CNN_OK;
}

/* backend.h, cnn_guard: the same decisions as optim.cu's guard_step. */
cnn_status cnn_cpu_op_guard_step(cnn_backend *be, const cnn_guard *g, cnn_guard_state *s) {
    CNN_ASSERT(g->loss && s && g->n_stats >= 0 && (g->n_stats == 0 || (g->stats && g->backup)));
    int64_t bad = 0;
#pragma omp parallel for num_threads(cnn_cpu_threads(be)) schedule(static) reduction(+ : bad)
    for (int64_t i = 0; i < g->n_stats; i++) bad += !isfinite(g->stats[i]);
    float loss = g->loss[0];
    uint32_t what = (isfinite(loss) ? 0u : CNN_GUARD_LOSS) | (bad ? CNN_GUARD_STATS : 0u);
    s->steps++;
    s->loss = loss;
    if (what) {
        s->bad_steps++;
        if (s->first_bad == 0) {
            s->first_bad = s->steps;
            s->first_what = what;
            s->first_loss = loss;
        }
        if (g->halt_on_bad) s->halted = 1;
    }
    s->skip = what || s->halted;
    if (s->skip) memcpy(g->stats, g->backup, (size_t)g->n_stats * sizeof(float));
    else memcpy(g->backup, g->stats, (size_t)g->n_stats * sizeof(float));
    return CNN_OK;
}
