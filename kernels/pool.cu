/* pool.cu -- 2-D pooling over NHWC act_t tensors, forward and backward, for the three kinds of cnn_pool_kind:
 *     0 max       padding is -inf; ties go to the first element in (r, s) scan order (strict >)
 *     1 avg       count_include_pad: divisor R*S (with floor-mode output sizes and pad <= window/2 a window
 *                 never reaches past the padded border, so this is PyTorch's divisor)
 *     2 adaptive  PyTorch's bins [floor(i*H/P), ceil((i+1)*H/P)), divisor = bin area
 * Forward: one thread per output element (n, p, q, c), c fastest (coalesced).
 * Backward is a gather, not a scatter: one thread per input element (n, h, w, c) visits the output windows that
 * cover it and adds their contributions in (p, q) order -- no atomics, deterministic (ResNet's 3x3/2 max-pool: a
 * thread per 2x2 block of inputs, the same sums; pool_backward_quad). Max pooling's window gives its
 * gradient to its first maximum: with pool_args.argmax the forward writes that position (r * S + s, 255 where the
 * window holds no value > -inf) as one byte per output element and the backward compares it with its own, reading
 * neither x nor y (perf-log step 68); without it the backward finds the maximum again from x (and y).
 * Specialisation: ACT only.
 */
#include "common.cuh"
#include "params.cuh"

#define POOL_MAX 0
#define POOL_AVG 1
#define POOL_ADAPTIVE 2

#define POOL_NO_ARG 255 /* argmax: the window held no value > -inf */

__device__ __forceinline__ int floor_div(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

/* Adaptive pooling's bins, mapping index i of an extent of `from` onto one of `to`: [bin_lo, bin_hi) =
 * [floor(i*to/from), ceil((i+1)*to/from)). Output bin pp covers input rows [bin_lo(pp, P, H), bin_hi(pp, P, H)); input
 * row hi lies in the bins [bin_lo(hi, H, P), bin_hi(hi, H, P) - 1] (each re-checked, as the bins overlap). */
__device__ __forceinline__ int bin_lo(int i, int from, int to) { return (i * to) / from; }
__device__ __forceinline__ int bin_hi(int i, int from, int to) { return ((i + 1) * to + from - 1) / from; }

/* the position r * S + s of input (hi, wi) in window (pp, qq): what the argmax bytes hold */
__device__ __forceinline__ int window_pos(const pool_args &a, int hi, int wi, int pp, int qq) {
    return (hi - (pp * a.stride_h - a.pad_h)) * a.s + wi - (qq * a.stride_w - a.pad_w);
}

/* a.relu: whether window element wo of y (the pool's output: the maximum, the ReLU's output where the gradient goes)
 * lets the ReLU before the pool pass its gradient; always without a.relu */
__device__ __forceinline__ bool relu_passes(const pool_args &a, const act_t *y, long long wo) {
    return !a.relu || act_load(y, wo) > 0.0f;
}

extern "C" __global__ void pool_forward(const pool_args a) {
    pdl_enter();
    const act_t *x = (const act_t *)a.x;
    act_t *y = (act_t *)a.out;
    const long long total = (long long)a.n * a.p * a.q * a.c;
    for (long long o = GRID_TID; o < total; o += GRID_STRIDE) {
        int c = (int)(o % a.c);
        long long t = o / a.c;
        int qq = (int)(t % a.q);
        t /= a.q;
        int pp = (int)(t % a.p);
        long long n = t / a.p;
        const act_t *xi = x + n * a.h * a.w * a.c + c;
        float v;
        if (a.kind == POOL_MAX) {
            int h0 = pp * a.stride_h - a.pad_h, w0 = qq * a.stride_w - a.pad_w;
            float best = -CNN_INF;
            int arg = POOL_NO_ARG;
            for (int r = 0; r < a.r; r++) {
                int hi = h0 + r;
                if ((unsigned)hi >= (unsigned)a.h) continue;
                for (int s = 0; s < a.s; s++) {
                    int wi = w0 + s;
                    if ((unsigned)wi >= (unsigned)a.w) continue;
                    float e = act_load(xi, ((long long)hi * a.w + wi) * a.c);
                    if (e > best) best = e, arg = r * a.s + s;
                }
            }
            v = best;
            if (a.argmax) a.argmax[o] = (unsigned char)arg;
        } else if (a.kind == POOL_AVG) {
            int h0 = pp * a.stride_h - a.pad_h, w0 = qq * a.stride_w - a.pad_w;
            float sum = 0.0f;
            for (int r = 0; r < a.r; r++) {
                int hi = h0 + r;
                if ((unsigned)hi >= (unsigned)a.h) continue;
                for (int s = 0; s < a.s; s++) {
                    int wi = w0 + s;
                    if ((unsigned)wi >= (unsigned)a.w) continue;
                    sum += act_load(xi, ((long long)hi * a.w + wi) * a.c);
                }
            }
            v = sum / (float)(a.r * a.s);
        } else {
            int hs = bin_lo(pp, a.p, a.h), he = bin_hi(pp, a.p, a.h);
            int ws = bin_lo(qq, a.q, a.w), we = bin_hi(qq, a.q, a.w);
            float sum = 0.0f;
            for (int hi = hs; hi < he; hi++)
                for (int wi = ws; wi < we; wi++) sum += act_load(xi, ((long long)hi * a.w + wi) * a.c);
            v = sum / (float)((he - hs) * (we - ws));
        }
        act_store(y, o, v);
    }
}

/* ACT_VEC argmax bytes at p (ACT_VEC-aligned) in one store, and back */
__device__ __forceinline__ void store_args(unsigned char *p, const unsigned char *arg) {
    unsigned long long u = 0;
#pragma unroll
    for (int k = 0; k < ACT_VEC; k++) u |= (unsigned long long)arg[k] << (8 * k);
    if (ACT_VEC == 8) *(unsigned long long *)p = u;
    else *(unsigned *)p = (unsigned)u;
}
__device__ __forceinline__ unsigned long long load_args(const unsigned char *p) {
    return ACT_VEC == 8 ? *(const unsigned long long *)p : (unsigned long long)*(const unsigned *)p;
}

/* output vector o of (N, P, Q, C / ACT_VEC): its image, row, column and channel group (32-bit math) */
struct out_vec {
    int n, pp, qq, cg;
};
__device__ __forceinline__ out_vec out_vec_of(const pool_args &a, int o, int cv) {
    out_vec v;
    int t = o / cv;
    v.cg = o - t * cv;
    v.qq = t % a.q;
    t /= a.q;
    v.pp = t % a.p;
    v.n = t / a.p;
    return v;
}

/* Max and average forward, 16 bytes of channels per thread (C % ACT_VEC == 0, 16-byte aligned tensors, fewer
 * than 2^31 vectors: the launcher checks): the same arithmetic per element as pool_forward, in 32-bit index
 * math, with one 16-byte load per window tap and one 16-byte store. */
extern "C" __global__ void pool_forward_vec(const pool_args a) {
    pdl_enter();
    const act_t *x = (const act_t *)a.x;
    act_t *y = (act_t *)a.out;
    const int cv = a.c / ACT_VEC;
    const int total = a.n * a.p * a.q * cv;
    for (int o = blockIdx.x * blockDim.x + threadIdx.x; o < total; o += gridDim.x * blockDim.x) {
        const out_vec ov = out_vec_of(a, o, cv);
        const int n = ov.n, pp = ov.pp, qq = ov.qq, cg = ov.cg;
        const act_t *xi = x + (long long)n * a.h * a.w * a.c + cg * ACT_VEC;
        const int h0 = pp * a.stride_h - a.pad_h, w0 = qq * a.stride_w - a.pad_w;
        const bool mx = a.kind == POOL_MAX;
        float acc[ACT_VEC], e[ACT_VEC];
        unsigned char arg[ACT_VEC];
#pragma unroll
        for (int k = 0; k < ACT_VEC; k++) acc[k] = mx ? -CNN_INF : 0.0f, arg[k] = POOL_NO_ARG;
        for (int r = 0; r < a.r; r++) {
            const int hi = h0 + r;
            if ((unsigned)hi >= (unsigned)a.h) continue;
            for (int s = 0; s < a.s; s++) {
                const int wi = w0 + s;
                if ((unsigned)wi >= (unsigned)a.w) continue;
                act_load_vec(xi + ((long long)hi * a.w + wi) * a.c, e);
#pragma unroll
                for (int k = 0; k < ACT_VEC; k++) {
                    if (mx) {
                        if (e[k] > acc[k]) acc[k] = e[k], arg[k] = (unsigned char)(r * a.s + s);
                    } else {
                        acc[k] += e[k];
                    }
                }
            }
        }
        if (!mx) {
            const float d = (float)(a.r * a.s);
#pragma unroll
            for (int k = 0; k < ACT_VEC; k++) acc[k] = acc[k] / d;
        }
        act_store_vec(y + (long long)o * ACT_VEC, acc);
        if (mx && a.argmax) store_args(a.argmax + (long long)o * ACT_VEC, arg);
    }
}

/* Position (hi*W + wi) of the first maximum of window (pp, qq) of channel plane xi; -1 if the window is empty
 * or holds no value > -inf (then the forward wrote -inf and no input receives a gradient). */
__device__ __forceinline__ int max_argmax(const pool_args &a, const act_t *xi, int pp, int qq) {
    int h0 = pp * a.stride_h - a.pad_h, w0 = qq * a.stride_w - a.pad_w;
    float best = -CNN_INF;
    int arg = -1;
    for (int r = 0; r < a.r; r++) {
        int hi = h0 + r;
        if ((unsigned)hi >= (unsigned)a.h) continue;
        for (int s = 0; s < a.s; s++) {
            int wi = w0 + s;
            if ((unsigned)wi >= (unsigned)a.w) continue;
            float e = act_load(xi, ((long long)hi * a.w + wi) * a.c);
            if (e > best) {
                best = e;
                arg = hi * a.w + wi;
            }
        }
    }
    return arg;
}

extern "C" __global__ void pool_backward(const pool_args a) {
    pdl_enter();
    const act_t *x = (const act_t *)a.x, *dy = (const act_t *)a.dy;
    act_t *dx = (act_t *)a.out;
    const long long total = (long long)a.n * a.h * a.w * a.c;
    for (long long o = GRID_TID; o < total; o += GRID_STRIDE) {
        int c = (int)(o % a.c);
        long long t = o / a.c;
        int wi = (int)(t % a.w);
        t /= a.w;
        int hi = (int)(t % a.h);
        long long n = t / a.h;
        const act_t *dyi = dy + n * a.p * a.q * a.c + c;
        const act_t *yi = a.relu ? (const act_t *)a.y + n * a.p * a.q * a.c + c : NULL; /* y is NULL without relu */
        float g = 0.0f;
        if (a.kind == POOL_ADAPTIVE) {
            /* bins containing hi: p in [floor(hi*P/H), ceil((hi+1)*P/H) - 1], re-checked exactly */
            int p0 = bin_lo(hi, a.h, a.p), p1 = bin_hi(hi, a.h, a.p) - 1;
            int q0 = bin_lo(wi, a.w, a.q), q1 = bin_hi(wi, a.w, a.q) - 1;
            if (p0 < 0) p0 = 0;
            if (q0 < 0) q0 = 0;
            if (p1 > a.p - 1) p1 = a.p - 1;
            if (q1 > a.q - 1) q1 = a.q - 1;
            for (int pp = p0; pp <= p1; pp++) {
                int hs = bin_lo(pp, a.p, a.h), he = bin_hi(pp, a.p, a.h);
                if (hi < hs || hi >= he) continue;
                for (int qq = q0; qq <= q1; qq++) {
                    int ws = bin_lo(qq, a.q, a.w), we = bin_hi(qq, a.q, a.w);
                    if (wi < ws || wi >= we) continue;
                    g += act_load(dyi, ((long long)pp * a.q + qq) * a.c) / (float)((he - hs) * (we - ws));
                }
            }
        } else {
            /* windows with pp*stride - pad <= hi <= pp*stride - pad + R - 1 */
            int p0 = floor_div(hi + a.pad_h - a.r, a.stride_h) + 1, p1 = floor_div(hi + a.pad_h, a.stride_h);
            int q0 = floor_div(wi + a.pad_w - a.s, a.stride_w) + 1, q1 = floor_div(wi + a.pad_w, a.stride_w);
            if (p0 < 0) p0 = 0;
            if (q0 < 0) q0 = 0;
            if (p1 > a.p - 1) p1 = a.p - 1;
            if (q1 > a.q - 1) q1 = a.q - 1;
            if (a.kind == POOL_MAX && a.argmax) {
                const unsigned char *ai = a.argmax + n * a.p * a.q * a.c + c;
                for (int pp = p0; pp <= p1; pp++)
                    for (int qq = q0; qq <= q1; qq++) {
                        const long long wo = ((long long)pp * a.q + qq) * a.c;
                        if (ai[wo] == window_pos(a, hi, wi, pp, qq) && relu_passes(a, yi, wo)) g += act_load(dyi, wo);
                    }
            } else if (a.kind == POOL_MAX) {
                const act_t *xi = x + n * a.h * a.w * a.c + c;
                const int me = hi * a.w + wi;
                for (int pp = p0; pp <= p1; pp++)
                    for (int qq = q0; qq <= q1; qq++)
                        if (max_argmax(a, xi, pp, qq) == me && relu_passes(a, yi, ((long long)pp * a.q + qq) * a.c))
                            g += act_load(dyi, ((long long)pp * a.q + qq) * a.c);
            } else {
                const float inv = (float)(a.r * a.s);
                for (int pp = p0; pp <= p1; pp++)
                    for (int qq = q0; qq <= q1; qq++) g += act_load(dyi, ((long long)pp * a.q + qq) * a.c) / inv;
            }
        }
        if (a.accumulate) g += act_load(dx, o);
        act_store(dx, o, g);
    }
}

/* a window's gradient vector dv, zero where the pool's output y there is not > 0 (a.relu: the ReLU before the pool) */
__device__ __forceinline__ void relu_mask_vec(const act_t *y, float *dv) {
    float yv[ACT_VEC];
    act_load_vec(y, yv);
#pragma unroll
    for (int k = 0; k < ACT_VEC; k++) dv[k] = yv[k] > 0.0f ? dv[k] : 0.0f;
}

/* a vector of input gradients stored, added to what dx holds when the op accumulates */
__device__ __forceinline__ void store_dx_vec(act_t *d, float *g, bool accumulate) {
    if (accumulate) {
        float e[ACT_VEC];
        act_load_vec(d, e);
#pragma unroll
        for (int k = 0; k < ACT_VEC; k++) g[k] += e[k];
    }
    act_store_vec(d, g);
}

/* Max, average and adaptive-average backward, 16 bytes of channels per thread (the preconditions of pool_forward_vec
 * but the kind): a gather like pool_backward, with its arithmetic per element. Max pooling compares the forward's
 * argmax bytes where it kept them; otherwise it reads the forward's output y: an input element receives a window's
 * gradient when it equals the window's maximum (> -inf) and no earlier element of the window in (r, s) scan order
 * does (the first maximum, as the forward chose it); those earlier elements are read only where an element equals
 * the maximum. */
extern "C" __global__ void pool_backward_vec(const pool_args a) {
    pdl_enter();
    const act_t *x = (const act_t *)a.x, *y = (const act_t *)a.y, *dy = (const act_t *)a.dy;
    act_t *dx = (act_t *)a.out;
    const int cv = a.c / ACT_VEC;
    const int total = a.n * a.h * a.w * cv;
    const bool mx = a.kind == POOL_MAX;
    for (int o = blockIdx.x * blockDim.x + threadIdx.x; o < total; o += gridDim.x * blockDim.x) {
        int t = o / cv;
        const int cg = o - t * cv;
        const int wi = t % a.w;
        t /= a.w;
        const int hi = t % a.h;
        const int n = t / a.h;
        const long long img = (long long)n * a.h * a.w * a.c + cg * ACT_VEC, oimg = (long long)n * a.p * a.q * a.c + cg * ACT_VEC;
        float g[ACT_VEC], xv[ACT_VEC], yv[ACT_VEC], dv[ACT_VEC], e[ACT_VEC];
#pragma unroll
        for (int k = 0; k < ACT_VEC; k++) g[k] = 0.0f;
        if (mx && !a.argmax) act_load_vec(x + img + ((long long)hi * a.w + wi) * a.c, xv);
        const bool adaptive = a.kind == POOL_ADAPTIVE;
        int p0, p1, q0, q1;
        if (adaptive) { /* bins containing (hi, wi), as pool_backward */
            p0 = bin_lo(hi, a.h, a.p), p1 = bin_hi(hi, a.h, a.p) - 1;
            q0 = bin_lo(wi, a.w, a.q), q1 = bin_hi(wi, a.w, a.q) - 1;
        } else {
            p0 = floor_div(hi + a.pad_h - a.r, a.stride_h) + 1, p1 = floor_div(hi + a.pad_h, a.stride_h);
            q0 = floor_div(wi + a.pad_w - a.s, a.stride_w) + 1, q1 = floor_div(wi + a.pad_w, a.stride_w);
        }
        p0 = p0 < 0 ? 0 : p0, q0 = q0 < 0 ? 0 : q0;
        p1 = p1 > a.p - 1 ? a.p - 1 : p1, q1 = q1 > a.q - 1 ? a.q - 1 : q1;
        for (int pp = p0; pp <= p1; pp++)
            for (int qq = q0; qq <= q1; qq++) {
                const long long wo = oimg + ((long long)pp * a.q + qq) * a.c;
                if (adaptive) {
                    const int hs = bin_lo(pp, a.p, a.h), he = bin_hi(pp, a.p, a.h);
                    const int ws = bin_lo(qq, a.q, a.w), we = bin_hi(qq, a.q, a.w);
                    if (hi < hs || hi >= he || wi < ws || wi >= we) continue;
                    act_load_vec(dy + wo, dv);
                    const float area = (float)((he - hs) * (we - ws));
#pragma unroll
                    for (int k = 0; k < ACT_VEC; k++) g[k] += dv[k] / area;
                    continue;
                }
                act_load_vec(dy + wo, dv);
                if (!mx) {
#pragma unroll
                    for (int k = 0; k < ACT_VEC; k++) g[k] += dv[k] / (float)(a.r * a.s);
                    continue;
                }
                if (a.relu) relu_mask_vec(y + wo, dv);
                if (a.argmax) { /* this element's position in the window against the forward's choice */
                    const unsigned long long args = load_args(a.argmax + wo);
                    const unsigned me = (unsigned)window_pos(a, hi, wi, pp, qq);
#pragma unroll
                    for (int k = 0; k < ACT_VEC; k++) g[k] += ((args >> (8 * k)) & 0xffu) == me ? dv[k] : 0.0f;
                    continue;
                }
                act_load_vec(y + wo, yv);
                bool hit[ACT_VEC], any = false;
#pragma unroll
                for (int k = 0; k < ACT_VEC; k++) hit[k] = xv[k] == yv[k] && yv[k] > -CNN_INF, any |= hit[k];
                if (!any) continue;
                /* an earlier element of the window equal to the maximum takes the gradient instead */
                const int h0 = pp * a.stride_h - a.pad_h, w0 = qq * a.stride_w - a.pad_w;
                for (int r = 0; r < a.r && any; r++) {
                    const int h = h0 + r;
                    if ((unsigned)h >= (unsigned)a.h || h > hi) continue;
                    for (int s2 = 0; s2 < a.s; s2++) {
                        const int w = w0 + s2;
                        if ((unsigned)w >= (unsigned)a.w) continue;
                        if (h == hi && w >= wi) break; /* reached this element */
                        act_load_vec(x + img + ((long long)h * a.w + w) * a.c, e);
#pragma unroll
                        for (int k = 0; k < ACT_VEC; k++) hit[k] = hit[k] && !(e[k] == yv[k]);
                    }
                }
#pragma unroll
                for (int k = 0; k < ACT_VEC; k++) g[k] += hit[k] ? dv[k] : 0.0f;
            }
        store_dx_vec(dx + img + ((long long)hi * a.w + wi) * a.c, g, a.accumulate);
    }
}

/* Max pooling's backward over 3x3 windows at stride 2, pad 1 (ResNet's stem) from the argmax bytes, 16 bytes of
 * channels per thread: a thread per 2x2 block of inputs (rows 2k, 2k + 1, columns 2j, 2j + 1), whose windows are
 * (k, j), (k, j + 1), (k + 1, j) and (k + 1, j + 1) (common.cuh's quad_window_pos): each read once, all loads issued
 * before the sums. The sums run in pool_backward's (p, q) order over the same windows, so the result is its bit for bit. pool_backward_vec
 * gave each input its own thread: threads of a warp took 1, 2 or 4 windows and read each window up to 9 times
 * (perf-log step 94). Preconditions (the launcher's): those of pool_backward_vec, argmax present, P = (H - 1)/2 + 1. */
extern "C" __global__ void pool_backward_quad(const pool_args a) {
    pdl_enter();
    const act_t *dy = (const act_t *)a.dy;
    act_t *dx = (act_t *)a.out;
    const int cv = a.c / ACT_VEC, hq = (a.h + 1) / 2, wq = (a.w + 1) / 2;
    const int total = a.n * hq * wq * cv;
    for (int o = blockIdx.x * blockDim.x + threadIdx.x; o < total; o += gridDim.x * blockDim.x) {
        int t = o / cv;
        const int cg = o - t * cv;
        const int j = t % wq;
        t /= wq;
        const int k = t % hq;
        const int n = t / hq;
        const long long img = (long long)n * a.h * a.w * a.c + cg * ACT_VEC, oimg = (long long)n * a.p * a.q * a.c + cg * ACT_VEC;
        float dv[4][ACT_VEC];
        unsigned long long args[4];
#pragma unroll
        for (int wdw = 0; wdw < 4; wdw++) { /* window (k + wdw / 2, j + wdw % 2) */
            const int pp = k + wdw / 2, qq = j + wdw % 2;
            args[wdw] = ~0ull; /* POOL_NO_ARG in every byte: matches no position */
#pragma unroll
            for (int e = 0; e < ACT_VEC; e++) dv[wdw][e] = 0.0f;
            if (pp < a.p && qq < a.q) {
                const long long wo = oimg + ((long long)pp * a.q + qq) * a.c;
                act_load_vec(dy + wo, dv[wdw]);
                args[wdw] = load_args(a.argmax + wo);
                if (a.relu) relu_mask_vec((const act_t *)a.y + wo, dv[wdw]);
            }
        }
#pragma unroll
        for (int in = 0; in < 4; in++) { /* input (2k + dh, 2j + dw) */
            const int dh = in / 2, dw = in % 2, hi = 2 * k + dh, wi = 2 * j + dw;
            if (hi >= a.h || wi >= a.w) continue;
            float g[ACT_VEC];
#pragma unroll
            for (int e = 0; e < ACT_VEC; e++) g[e] = 0.0f;
#pragma unroll
            for (int wdw = 0; wdw < 4; wdw++) {
                const int me = quad_window_pos(in, wdw);
                if (me < 0) continue;
#pragma unroll
                for (int e = 0; e < ACT_VEC; e++)
                    g[e] += ((args[wdw] >> (8 * e)) & 0xffu) == (unsigned)me ? dv[wdw][e] : 0.0f;
            }
            store_dx_vec(dx + img + ((long long)hi * a.w + wi) * a.c, g, a.accumulate);
        }
    }
}

/* Max pooling's backward where the windows tile the input exactly (stride = window, no padding, H = P * R, W = Q * S:
 * VGG's 2x2/2 on even sizes) from the argmax bytes, 16 bytes of channels per thread: a thread per window, which
 * scatters its gradient to the R * S inputs it alone covers, each stored once (no sums: every input takes one
 * window's value or zero, bit for bit pool_backward_vec's). pool_backward_vec's thread per input read each window's
 * dy and argmax R * S times (perf-log step 97). Preconditions (the launcher's): those of pool_backward_vec, argmax
 * present, the tiling, R * S <= 16. */
extern "C" __global__ void pool_backward_tile(const pool_args a) {
    pdl_enter();
    const act_t *dy = (const act_t *)a.dy;
    act_t *dx = (act_t *)a.out;
    const int cv = a.c / ACT_VEC;
    const int total = a.n * a.p * a.q * cv;
    for (int o = blockIdx.x * blockDim.x + threadIdx.x; o < total; o += gridDim.x * blockDim.x) {
        const out_vec ov = out_vec_of(a, o, cv);
        const int n = ov.n, pp = ov.pp, qq = ov.qq, cg = ov.cg;
        const long long img = (long long)n * a.h * a.w * a.c + cg * ACT_VEC;
        const long long wo = (long long)n * a.p * a.q * a.c + ((long long)pp * a.q + qq) * a.c + cg * ACT_VEC;
        float dv[ACT_VEC];
        act_load_vec(dy + wo, dv);
        const unsigned long long args = load_args(a.argmax + wo);
        if (a.relu) relu_mask_vec((const act_t *)a.y + wo, dv);
        for (int r = 0; r < a.r; r++)
            for (int s = 0; s < a.s; s++) {
                const unsigned me = (unsigned)(r * a.s + s);
                float g[ACT_VEC];
#pragma unroll
                for (int e = 0; e < ACT_VEC; e++) g[e] = ((args >> (8 * e)) & 0xffu) == me ? dv[e] : 0.0f;
                store_dx_vec(dx + img + ((long long)(pp * a.r + r) * a.w + qq * a.s + s) * a.c, g, a.accumulate);
            }
    }
}
