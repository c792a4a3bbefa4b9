/* pointwise.cu -- elementwise and layout ops over act_t tensors: relu forward/backward, add, the identity
 * backward, dropout forward/backward, float32 <-> act_t conversion, flatten (NHWC <-> NCHW-order rows).
 * Specialisation: ACT, and VEC = 1 (scalar, any alignment) or ACT_VEC (16-byte vectors: the launcher picks it
 * only when every pointer is 16-byte aligned). Each thread handles one group of VEC consecutive elements per
 * grid-stride step; a partial last group falls back to scalar accesses.
 * Semantics are those of backend.h; the dropout mask is cnn_dropout_keep exactly (Philox of (seed, i>>2),
 * word i&3, kept when u01 >= p).
 */
#include "common.cuh"
#include "params.cuh"

#ifndef VEC
#error "pointwise.cu needs -DVEC"
#endif
#if VEC != 1 && VEC != ACT_VEC
#error "VEC must be 1 or ACT_VEC"
#endif

/* Load VEC elements starting at i (a multiple of VEC); elements past count read as 0. */
__device__ __forceinline__ void ld_group(const act_t *p, long long i, long long count, float *v) {
#if VEC > 1
    if (i + VEC <= count) {
        act_load_vec(p + i, v);
        return;
    }
#endif
#pragma unroll
    for (int j = 0; j < VEC; j++) v[j] = i + j < count ? act_load(p, i + j) : 0.0f;
}

__device__ __forceinline__ void st_group(act_t *p, long long i, long long count, const float *v) {
#if VEC > 1
    if (i + VEC <= count) {
        act_store_vec(p + i, v);
        return;
    }
#endif
#pragma unroll
    for (int j = 0; j < VEC; j++)
        if (i + j < count) act_store(p, i + j, v[j]);
}

/* The same for float32 arrays (VEC floats = VEC/4 16-byte vectors when vectorised). */
__device__ __forceinline__ void ld_group_f32(const float *p, long long i, long long count, float *v) {
#if VEC > 1
    if (i + VEC <= count) {
#pragma unroll
        for (int k = 0; k < VEC / 4; k++) {
            float4 t = *(const float4 *)(p + i + 4 * k);
            v[4 * k] = t.x; v[4 * k + 1] = t.y; v[4 * k + 2] = t.z; v[4 * k + 3] = t.w;
        }
        return;
    }
#endif
#pragma unroll
    for (int j = 0; j < VEC; j++) v[j] = i + j < count ? p[i + j] : 0.0f;
}

__device__ __forceinline__ void st_group_f32(float *p, long long i, long long count, const float *v) {
#if VEC > 1
    if (i + VEC <= count) {
#pragma unroll
        for (int k = 0; k < VEC / 4; k++)
            *(float4 *)(p + i + 4 * k) = make_float4(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]);
        return;
    }
#endif
#pragma unroll
    for (int j = 0; j < VEC; j++)
        if (i + j < count) p[i + j] = v[j];
}

#define FOR_GROUPS(a, i)                                                                                     \
    for (long long g_ = GRID_TID, ng_ = ((a).count + VEC - 1) / VEC, i = g_ * VEC; g_ < ng_;                \
         g_ += GRID_STRIDE, i = g_ * VEC)

/* y = max(x, 0) (NaN -> 0, as x > 0 ? x : 0) */
extern "C" __global__ void relu_forward(const pw_args a) {
    pdl_enter();
    const act_t *x = (const act_t *)a.a;
    act_t *y = (act_t *)a.out;
    FOR_GROUPS(a, i) {
        float v[VEC];
        ld_group(x, i, a.count, v);
#pragma unroll
        for (int j = 0; j < VEC; j++) v[j] = v[j] > 0.0f ? v[j] : 0.0f;
        st_group(y, i, a.count, v);
    }
}

/* dx (+)= y > 0 ? dy : 0 */
extern "C" __global__ void relu_backward(const pw_args a) {
    pdl_enter();
    const act_t *y = (const act_t *)a.a, *dy = (const act_t *)a.b;
    act_t *dx = (act_t *)a.out;
    FOR_GROUPS(a, i) {
        float yv[VEC], g[VEC], o[VEC];
        ld_group(y, i, a.count, yv);
        ld_group(dy, i, a.count, g);
        if (a.accumulate) ld_group(dx, i, a.count, o);
#pragma unroll
        for (int j = 0; j < VEC; j++) {
            float d = yv[j] > 0.0f ? g[j] : 0.0f;
            o[j] = a.accumulate ? o[j] + d : d;
        }
        st_group(dx, i, a.count, o);
    }
}

/* y = a + b */
extern "C" __global__ void add_forward(const pw_args a) {
    pdl_enter();
    const act_t *x0 = (const act_t *)a.a, *x1 = (const act_t *)a.b;
    act_t *y = (act_t *)a.out;
    FOR_GROUPS(a, i) {
        float u[VEC], v[VEC];
        ld_group(x0, i, a.count, u);
        ld_group(x1, i, a.count, v);
#pragma unroll
        for (int j = 0; j < VEC; j++) u[j] += v[j];
        st_group(y, i, a.count, u);
    }
}

/* dx (+)= dy */
extern "C" __global__ void pass_backward(const pw_args a) {
    pdl_enter();
    const act_t *dy = (const act_t *)a.b;
    act_t *dx = (act_t *)a.out;
    FOR_GROUPS(a, i) {
        float g[VEC], o[VEC];
        ld_group(dy, i, a.count, g);
        if (a.accumulate) {
            ld_group(dx, i, a.count, o);
#pragma unroll
            for (int j = 0; j < VEC; j++) g[j] += o[j];
        }
        st_group(dx, i, a.count, g);
    }
}

/* keep[j] for the VEC elements at i (a multiple of VEC, so of 4 when VEC > 1): one Philox call per 4. */
__device__ __forceinline__ void dropout_keep(unsigned long long seed, long long i, float p, bool *keep) {
#if VEC > 1
#pragma unroll
    for (int k = 0; k < VEC / 4; k++) {
        unsigned int r[4];
        philox4x32_10(seed, 0x64726f70ULL, (unsigned long long)(i + 4 * k) >> 2, r);
#pragma unroll
        for (int j = 0; j < 4; j++) keep[4 * k + j] = u01(r[j]) >= p;
    }
#else
    unsigned int r[4];
    philox4x32_10(seed, 0x64726f70ULL, (unsigned long long)i >> 2, r);
    unsigned int w = r[0];
    int sel = (int)(i & 3);
    if (sel == 1) w = r[1];
    if (sel == 2) w = r[2];
    if (sel == 3) w = r[3];
    keep[0] = u01(w) >= p;
#endif
}

/* y = keep ? x * scale : 0 */
extern "C" __global__ void dropout_forward(const pw_args a) {
    pdl_enter();
    const act_t *x = (const act_t *)a.a;
    act_t *y = (act_t *)a.out;
    FOR_GROUPS(a, i) {
        float v[VEC];
        bool keep[VEC];
        ld_group(x, i, a.count, v);
        dropout_keep(a.seed, i, a.p, keep);
#pragma unroll
        for (int j = 0; j < VEC; j++) v[j] = keep[j] ? v[j] * a.scale : 0.0f;
        st_group(y, i, a.count, v);
    }
}

/* dx (+)= keep ? dy * scale : 0 */
extern "C" __global__ void dropout_backward(const pw_args a) {
    pdl_enter();
    const act_t *dy = (const act_t *)a.b;
    act_t *dx = (act_t *)a.out;
    FOR_GROUPS(a, i) {
        float g[VEC], o[VEC];
        bool keep[VEC];
        ld_group(dy, i, a.count, g);
        if (a.accumulate) ld_group(dx, i, a.count, o);
        dropout_keep(a.seed, i, a.p, keep);
#pragma unroll
        for (int j = 0; j < VEC; j++) {
            float d = keep[j] ? g[j] * a.scale : 0.0f;
            o[j] = a.accumulate ? o[j] + d : d;
        }
        st_group(dx, i, a.count, o);
    }
}

/* float32 -> act_t */
extern "C" __global__ void to_act(const pw_args a) {
    pdl_enter();
    const float *src = (const float *)a.a;
    act_t *dst = (act_t *)a.out;
    FOR_GROUPS(a, i) {
        float v[VEC];
        ld_group_f32(src, i, a.count, v);
        st_group(dst, i, a.count, v);
    }
}

/* act_t -> float32 */
extern "C" __global__ void from_act(const pw_args a) {
    pdl_enter();
    const act_t *src = (const act_t *)a.a;
    float *dst = (float *)a.out;
    FOR_GROUPS(a, i) {
        float v[VEC];
        ld_group(src, i, a.count, v);
        st_group_f32(dst, i, a.count, v);
    }
}

/* y[n][c*HW + hw] = x[n][hw][c]: one thread per output element (coalesced writes). count = N*C*HW. */
extern "C" __global__ void flatten_forward(const pw_args a) {
    pdl_enter();
    const act_t *x = (const act_t *)a.a;
    act_t *y = (act_t *)a.out;
    const long long chw = (long long)a.c * a.hw;
    for (long long o = GRID_TID; o < a.count; o += GRID_STRIDE) {
        long long n = o / chw;
        int rem = (int)(o - n * chw);
        int c = rem / a.hw, hw = rem - c * a.hw;
        y[o] = x[(n * a.hw + hw) * a.c + c];
    }
}

/* dx[n][hw][c] (+)= dy[n][c*HW + hw]: one thread per dx element. */
extern "C" __global__ void flatten_backward(const pw_args a) {
    pdl_enter();
    const act_t *dy = (const act_t *)a.b;
    act_t *dx = (act_t *)a.out;
    const long long hwc = (long long)a.hw * a.c;
    for (long long o = GRID_TID; o < a.count; o += GRID_STRIDE) {
        long long n = o / hwc;
        int rem = (int)(o - n * hwc);
        int hw = rem / a.c, c = rem - hw * a.c;
        long long src = n * hwc + (long long)c * a.hw + hw;
        if (a.accumulate)
            act_store(dx, o, act_load(dx, o) + act_load(dy, src));
        else
            dx[o] = dy[src];
    }
}

/* out[i] = the pairwise tree over the a.n slices (a power of two <= 8) of a[j * stride + i], in float32
 * (tree_sum: the sums of a batch's slices, core/shards.h) or float64 (tree_sum_f64: the ranks' tree of BatchNorm's
 * sums, nccl.c), whatever VEC */
template <typename T> __device__ __forceinline__ void tree_sum_of(const pw_args &a) {
    const T *p = (const T *)a.a;
    T *out = (T *)a.out;
    for (long long i = GRID_TID; i < a.count; i += GRID_STRIDE) {
        T t[8];
#pragma unroll
        for (int j = 0; j < 8; j++) t[j] = j < a.n ? p[j * a.stride + i] : (T)0;
#pragma unroll
        for (int step = 1; step < 8; step *= 2)
#pragma unroll
            for (int j = 0; j + step < 8; j += 2 * step)
                if (j + step < a.n) t[j] += t[j + step]; /* adds only: nothing to contract */
        out[i] = t[0];
    }
}
extern "C" __global__ void tree_sum(const pw_args a) {
    pdl_enter();
    tree_sum_of<float>(a);
}
extern "C" __global__ void tree_sum_f64(const pw_args a) {
    pdl_enter();
    tree_sum_of<double>(a);
}
