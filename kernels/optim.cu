/* optim.cu -- kernels over flat float32 arrays: SGD and AdamW updates (PyTorch's formulas, as the CPU backend)
 * and the non-finite count. No ACT: parameters, gradients and optimizer state are always float32.
 *
 * sgd:   g' = g*grad_scale + wd*w
 *        buf = first_step ? g' : momentum*buf + (1-dampening)*g'     (only when momentum != 0)
 *        d = momentum == 0 ? g' : nesterov ? g' + momentum*buf : buf
 *        w -= lr*d
 * adamw: w *= 1 - lr*wd;  g' = g*grad_scale;  m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'^2
 *        w -= step_size * m / (sqrt(v)/bc2_sqrt + eps)     step_size = lr/(1-b1^t), bc2_sqrt = sqrt(1-b2^t)
 * Both leave everything untouched when a.skip points to a nonzero word (the guard's verdict, guard_step below).
 */
#include "common.cuh"
#include "params.cuh"

extern "C" __global__ void sgd_update(const optim_args a) {
    pdl_enter();
    if (a.skip && *a.skip) return; /* the guard found this step's loss or statistics non-finite */
    for (long long i = GRID_TID; i < a.count; i += GRID_STRIDE) {
        float w = a.w[i];
        float g = a.g[i] * a.grad_scale + a.weight_decay * w;
        float d = g;
        if (a.momentum != 0.0f) {
            float b = a.first_step ? g : a.momentum * a.buf[i] + (1.0f - a.dampening) * g;
            a.buf[i] = b;
            d = a.nesterov ? g + a.momentum * b : b;
        }
        a.w[i] = w - a.lr * d;
    }
}

extern "C" __global__ void adamw_update(const optim_args a) {
    pdl_enter();
    if (a.skip && *a.skip) return;
    for (long long i = GRID_TID; i < a.count; i += GRID_STRIDE) {
        float w = a.w[i] * (1.0f - a.lr * a.weight_decay);
        float g = a.g[i] * a.grad_scale;
        float m = a.beta1 * a.buf[i] + (1.0f - a.beta1) * g;
        float v = a.beta2 * a.v[i] + (1.0f - a.beta2) * g * g;
        a.buf[i] = m;
        a.v[i] = v;
        a.w[i] = w - a.step_size * (m / (sqrtf(v) / a.bc2_sqrt + a.eps));
    }
}

/* *counter += number of NaN/Inf among x[0, count): per-block count, one integer atomic per block (integer
 * addition is order-independent, so the result is deterministic). */
extern "C" __global__ void count_nonfinite(const optim_args a) {
    pdl_enter();
    __shared__ unsigned int sh[32];
    unsigned int n = 0;
    for (long long i = GRID_TID; i < a.count; i += GRID_STRIDE) {
        unsigned int u = __float_as_uint(a.x[i]);
        n += (u & 0x7f800000u) == 0x7f800000u;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) n += __shfl_xor_sync(0xffffffffu, n, o);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) sh[warp] = n;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long t = 0;
        for (int k = 0; k < (int)(blockDim.x >> 5); k++) t += sh[k];
        if (t) atomicAdd(a.counter, t);
    }
}

/* The training step's non-finite guard (backend.h, cnn_guard): one block looks at the loss and every running
 * statistic, records the verdict in *a.state (for the optimizers and the host), and undoes the statistics
 * updates of a skipped step from the backup (or refreshes the backup). One block: the statistics are small
 * (ResNet-50: 53k floats) and the decision needs all of them before any copy. */
extern "C" __global__ void guard_step(const guard_args a) {
    pdl_enter();
    __shared__ unsigned int sh[32];
    __shared__ unsigned int verdict;
    unsigned int n = 0;
    for (long long i = threadIdx.x; i < a.n_stats; i += blockDim.x)
        n += (__float_as_uint(a.stats[i]) & 0x7f800000u) == 0x7f800000u;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) n += __shfl_xor_sync(0xffffffffu, n, o);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) sh[warp] = n;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned int t = 0;
        for (int k = 0; k < (int)(blockDim.x >> 5); k++) t += sh[k];
        guard_state *s = a.state;
        float loss = a.loss[0];
        unsigned int what = ((__float_as_uint(loss) & 0x7f800000u) == 0x7f800000u ? 1u : 0u) | (t ? 2u : 0u);
        s->steps += 1;
        s->loss = loss;
        if (what) {
            s->bad_steps += 1;
            if (s->first_bad == 0) {
                s->first_bad = s->steps;
                s->first_what = what;
                s->first_loss = loss;
            }
            if (a.halt_on_bad) s->halted = 1;
        }
        s->skip = what || s->halted ? 1u : 0u;
        verdict = s->skip;
    }
    __syncthreads();
    const bool restore = verdict != 0;
    for (long long i = threadIdx.x; i < a.n_stats; i += blockDim.x) {
        if (restore) a.stats[i] = a.backup[i];
        else a.backup[i] = a.stats[i];
    }
}
