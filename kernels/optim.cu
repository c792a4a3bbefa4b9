/* optim.cu -- kernels over flat float32 arrays: SGD and AdamW updates (PyTorch's formulas, as the CPU backend)
 * and the non-finite count. Parameters, gradients and optimizer state are always float32; ACT is the type of the
 * weights' working copy the updates also write (a.wact: the model's act_dtype copies, laid out as the parameters),
 * so that no launch per tensor converts them afterwards (perf-log step 80).
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

/* The updates go 8 elements per thread and step where a.vec (every array 16-byte aligned: the arenas), loaded and
 * stored as 16-byte vectors; the last count % 8 (and everything otherwise) one per thread. An element's arithmetic
 * is the same either way (sgd_elem, adamw_elem). */
__device__ __forceinline__ void load8(const float *p, float *v) {
    const float4 a = ((const float4 *)p)[0], b = ((const float4 *)p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void store8(float *p, const float *v) {
    ((float4 *)p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    ((float4 *)p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}

/* SGD on one element: w and the momentum buffer b updated from the gradient g */
__device__ __forceinline__ void sgd_elem(const optim_args &a, float &w, float grad, float &b) {
    float g = grad * a.grad_scale + a.weight_decay * w;
    float d = g;
    if (a.momentum != 0.0f) {
        b = a.first_step ? g : a.momentum * b + (1.0f - a.dampening) * g;
        d = a.nesterov ? g + a.momentum * b : b;
    }
    w = w - a.lr * d;
}
extern "C" __global__ void sgd_update(const optim_args a) {
    pdl_enter();
    if (a.skip && *a.skip) return; /* the guard found this step's loss or statistics non-finite */
    const bool mom = a.momentum != 0.0f;
    const long long n8 = a.vec ? a.count / 8 : 0;
    for (long long v = GRID_TID; v < n8; v += GRID_STRIDE) {
        float w[8], g[8], b[8] = {0};
        load8(a.w + v * 8, w);
        load8(a.g + v * 8, g);
        if (mom) load8(a.buf + v * 8, b);
#pragma unroll
        for (int e = 0; e < 8; e++) sgd_elem(a, w[e], g[e], b[e]);
        store8(a.w + v * 8, w);
        if (mom) store8(a.buf + v * 8, b);
        if (a.wact) act8_store((act_t *)a.wact + v * 8, w);
    }
    for (long long i = n8 * 8 + GRID_TID; i < a.count; i += GRID_STRIDE) {
        float w = a.w[i], b = mom ? a.buf[i] : 0.0f;
        sgd_elem(a, w, a.g[i], b);
        a.w[i] = w;
        if (mom) a.buf[i] = b;
        if (a.wact) act_store((act_t *)a.wact, i, w);
    }
}

/* AdamW on one element: w, m and v updated from the gradient g */
__device__ __forceinline__ void adamw_elem(const optim_args &a, float &w, float grad, float &m, float &v) {
    w = w * (1.0f - a.lr * a.weight_decay);
    const float g = grad * a.grad_scale;
    m = a.beta1 * m + (1.0f - a.beta1) * g;
    v = a.beta2 * v + (1.0f - a.beta2) * g * g;
    w = w - a.step_size * (m / (sqrtf(v) / a.bc2_sqrt + a.eps));
}
extern "C" __global__ void adamw_update(const optim_args a) {
    pdl_enter();
    if (a.skip && *a.skip) return;
    const long long n8 = a.vec ? a.count / 8 : 0;
    for (long long i8 = GRID_TID; i8 < n8; i8 += GRID_STRIDE) {
        float w[8], g[8], m[8], v[8];
        load8(a.w + i8 * 8, w);
        load8(a.g + i8 * 8, g);
        load8(a.buf + i8 * 8, m);
        load8(a.v + i8 * 8, v);
#pragma unroll
        for (int e = 0; e < 8; e++) adamw_elem(a, w[e], g[e], m[e], v[e]);
        store8(a.w + i8 * 8, w);
        store8(a.buf + i8 * 8, m);
        store8(a.v + i8 * 8, v);
        if (a.wact) act8_store((act_t *)a.wact + i8 * 8, w);
    }
    for (long long i = n8 * 8 + GRID_TID; i < a.count; i += GRID_STRIDE) {
        float w = a.w[i], m = a.buf[i], v = a.v[i];
        adamw_elem(a, w, a.g[i], m, v);
        a.w[i] = w, a.buf[i] = m, a.v[i] = v;
        if (a.wact) act_store((act_t *)a.wact, i, w);
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
