/* winograd.cu -- true fp32 3x3 stride-1 convolution as Winograd F(2x2, 3x3): each 2x2 block of outputs from the
 * 4x4 block of inputs under it with 16 multiplies per (input channel, output channel) instead of 36, the 16
 * products summed over C as 16 GEMMs. The three kernels around those GEMMs (src/cuda/winograd.c runs the GEMMs on
 * conv2d_pipelined.cu's FFMA programs, as 1x1 convolutions):
 *     winograd_filter  w (K, 3, 3, C)  -> U[16][K][C]   U = G g G^T per (k, c)
 *     winograd_input   x (N, H, W, C)  -> V[16][T][C]   V = B^T d B per (tile, c), d the tile's 4x4 inputs
 *     winograd_output  M[16][T][K]     -> y (N, P, Q, K) y = A^T m A per (tile, k), then the epilogue
 * with G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1], B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],
 * A^T = [1 1 1 0; 0 1 -1 -1], element e = 4*i + j of a 4x4 transform in slab e, and T = N * TP * TQ tiles
 * (TP = ceil(P/2), TQ = ceil(Q/2)), tile t = (n*TP + tp)*TQ + tq covering outputs (2tp.., 2tq..) and inputs from
 * (2tp - pad_h, 2tq - pad_w); inputs outside the image are zero, outputs past P or Q are not written.
 * Every thread handles 4 consecutive channels as float4s (C % 4 == 0, K % 4 == 0, 16-byte aligned tensors; the
 * launcher checks). F32 only: every transform entry (0, +-1, +-1/2) is exact in binary; the sums they form round
 * like any fp32 addition.
 * Fields (conv_args): n c h w k p q pad_h pad_w of the convolution; filter: wt -> out; input: x -> out; output:
 * x = M, out = y, scale shift residual relu as in conv2d_epilogue.cuh.
 */
#include "common.cuh"
#include "params.cuh"

#if ACT != ACT_F32
#error "winograd.cu is the fp32 path"
#endif

__device__ __forceinline__ float4 f4add(float4 a, float4 b) { return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }
__device__ __forceinline__ float4 f4sub(float4 a, float4 b) { return make_float4(a.x - b.x, a.y - b.y, a.z - b.z, a.w - b.w); }

/* U[e][k][c] = (G g G^T)[e], one thread per (k, c) */
extern "C" __global__ void winograd_filter(const conv_args a) {
    pdl_enter();
    const float *w = (const float *)a.wt;
    float *u = (float *)a.out;
    const long long kc = (long long)a.k * a.c;
    for (long long i = GRID_TID; i < kc; i += GRID_STRIDE) {
        const long long k = i / a.c;
        const int c = (int)(i - k * a.c);
        float g[3][3], t[4][3];
#pragma unroll
        for (int r = 0; r < 3; r++)
#pragma unroll
            for (int s = 0; s < 3; s++) g[r][s] = w[((k * 3 + r) * 3 + s) * a.c + c];
#pragma unroll
        for (int s = 0; s < 3; s++) { /* G g */
            t[0][s] = g[0][s];
            t[1][s] = 0.5f * (g[0][s] + g[1][s] + g[2][s]);
            t[2][s] = 0.5f * (g[0][s] - g[1][s] + g[2][s]);
            t[3][s] = g[2][s];
        }
#pragma unroll
        for (int r = 0; r < 4; r++) { /* (G g) G^T */
            const float v[4] = {t[r][0], 0.5f * (t[r][0] + t[r][1] + t[r][2]), 0.5f * (t[r][0] - t[r][1] + t[r][2]),
                                t[r][2]};
#pragma unroll
            for (int j = 0; j < 4; j++) u[(long long)(r * 4 + j) * kc + i] = v[j];
        }
    }
}

/* V[e][t][c..c+3] = (B^T d B)[e], one thread per (tile, group of 4 channels) */
extern "C" __global__ void winograd_input(const conv_args a) {
    pdl_enter();
    const float *x = (const float *)a.x;
    float *v = (float *)a.out;
    const int tpn = (a.p + 1) / 2, tqn = (a.q + 1) / 2, c4 = a.c / 4;
    const long long tiles = (long long)a.n * tpn * tqn, slab = tiles * a.c;
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (long long i = GRID_TID; i < tiles * c4; i += GRID_STRIDE) {
        const int cg = (int)(i % c4);
        const long long t = i / c4;
        const int tq = (int)(t % tqn), tp = (int)(t / tqn % tpn);
        const long long n = t / tqn / tpn;
        const int h0 = 2 * tp - a.pad_h, w0 = 2 * tq - a.pad_w;
        float4 d[4][4];
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int s = 0; s < 4; s++) {
                const int hi = h0 + r, wi = w0 + s;
                d[r][s] = (unsigned)hi < (unsigned)a.h && (unsigned)wi < (unsigned)a.w
                              ? *(const float4 *)(x + ((n * a.h + hi) * a.w + wi) * a.c + cg * 4)
                              : zero;
            }
        float4 b[4][4];
#pragma unroll
        for (int s = 0; s < 4; s++) { /* B^T d */
            b[0][s] = f4sub(d[0][s], d[2][s]);
            b[1][s] = f4add(d[1][s], d[2][s]);
            b[2][s] = f4sub(d[2][s], d[1][s]);
            b[3][s] = f4sub(d[1][s], d[3][s]);
        }
        float4 *o = (float4 *)(v + t * a.c + cg * 4);
        const long long step = slab / 4; /* one slab, in float4s */
#pragma unroll
        for (int r = 0; r < 4; r++) { /* (B^T d) B */
            o[(r * 4 + 0) * step] = f4sub(b[r][0], b[r][2]);
            o[(r * 4 + 1) * step] = f4add(b[r][1], b[r][2]);
            o[(r * 4 + 2) * step] = f4sub(b[r][2], b[r][1]);
            o[(r * 4 + 3) * step] = f4sub(b[r][1], b[r][3]);
        }
    }
}

/* y = epilogue(A^T m A), one thread per (tile, group of 4 output channels) */
extern "C" __global__ void winograd_output(const conv_args a) {
    pdl_enter();
    const float *m = (const float *)a.x;
    float *y = (float *)a.out;
    const float *res = (const float *)a.residual;
    const int tpn = (a.p + 1) / 2, tqn = (a.q + 1) / 2, k4 = a.k / 4;
    const long long tiles = (long long)a.n * tpn * tqn, step = tiles * a.k / 4;
    for (long long i = GRID_TID; i < tiles * k4; i += GRID_STRIDE) {
        const int kg = (int)(i % k4);
        const long long t = i / k4;
        const int tq = (int)(t % tqn), tp = (int)(t / tqn % tpn);
        const long long n = t / tqn / tpn;
        const float4 *src = (const float4 *)(m + t * a.k + kg * 4);
        float4 r[2][4];
#pragma unroll
        for (int j = 0; j < 4; j++) { /* A^T m */
            const float4 m0 = src[(0 + j) * step], m1 = src[(4 + j) * step], m2 = src[(8 + j) * step],
                         m3 = src[(12 + j) * step];
            r[0][j] = f4add(f4add(m0, m1), m2);
            r[1][j] = f4sub(f4sub(m1, m2), m3);
        }
        float sc[4], sh[4];
#pragma unroll
        for (int e = 0; e < 4; e++) {
            sc[e] = a.scale ? a.scale[kg * 4 + e] : 1.0f;
            sh[e] = a.shift ? a.shift[kg * 4 + e] : 0.0f;
        }
#pragma unroll
        for (int ii = 0; ii < 2; ii++)
#pragma unroll
            for (int jj = 0; jj < 2; jj++) { /* (A^T m) A */
                const int pp = 2 * tp + ii, qq = 2 * tq + jj;
                if (pp >= a.p || qq >= a.q) continue;
                const float4 o = jj == 0 ? f4add(f4add(r[ii][0], r[ii][1]), r[ii][2])
                                         : f4sub(f4sub(r[ii][1], r[ii][2]), r[ii][3]);
                float v[4] = {o.x, o.y, o.z, o.w};
                const long long at = ((n * a.p + pp) * a.q + qq) * a.k + kg * 4;
                float4 rv = res ? *(const float4 *)(res + at) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                const float rr[4] = {rv.x, rv.y, rv.z, rv.w};
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    v[e] = v[e] * sc[e] + sh[e] + rr[e];
                    if (a.relu) v[e] = v[e] > 0.0f ? v[e] : 0.0f;
                }
                *(float4 *)(y + at) = make_float4(v[0], v[1], v[2], v[3]);
            }
    }
}
