/* batchnorm_pool.cuh -- batchnorm.cu's kernels that take in a max-pool's backward: the ResNet stem's BatchNorm
 * backward with its 3x3/2 pool's (bn_bwd_pool_*), and VGG's tiling max-pool backward with the sums of what it writes
 * (pool_bwd_tile_sum_vec). Part of batchnorm.cu, included where this text stood (the family's one program, its
 * red_args partials and finalize kernels): not a header of its own. */
#ifndef CNN_KERNELS_BATCHNORM_POOL_CUH
#define CNN_KERNELS_BATCHNORM_POOL_CUH

/* ---- the backward of a BatchNorm -> ReLU whose output only a 3x3/2 pad-1 max-pool reads (the ResNet stem) ------
 * g, the gradient of the ReLU's output, is the pool's backward (pool.cu's pool_backward_quad), made where the two
 * passes use it instead of stored between them: a thread takes 8 channels of the 2x2 inputs (2k .. 2k+1, 2j .. 2j+1),
 * which windows (k, j), (k, j+1), (k+1, j), (k+1, j+1) alone cover (row 2k lies in window k only, row 2k+1 in k and
 * k+1; columns alike), loading each window's dy and argmax once. The pool's write of g and the BatchNorm's two reads
 * of it go; dy and the argmax bytes, a quarter of g's elements, are read twice instead (perf-log step 95). The same
 * sums in another order (by quad, not by row), and g in float where the pool stored it in the activation dtype. */

/* 8 values from 16-byte aligned shared memory in 16-byte loads (one at a time took 2-way conflicts per value) */
__device__ __forceinline__ void sh_load8(const float *src, float dst[8]) {
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const float4 v = reinterpret_cast<const float4 *>(src)[i];
        dst[4 * i] = v.x, dst[4 * i + 1] = v.y, dst[4 * i + 2] = v.z, dst[4 * i + 3] = v.w;
    }
}
__device__ __forceinline__ void sh_load8(const double *src, double dst[8]) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const double2 v = reinterpret_cast<const double2 *>(src)[i];
        dst[2 * i] = v.x, dst[2 * i + 1] = v.y;
    }
}
/* quad t's windows for the channels 8 cv .. 8 cv + 7: dy's raw vectors and the argmax bytes (zero and no position
 * past the pool's output), and the quad's 4 inputs (2k + i / 2, 2j + i % 2) as rows of x (-1: past the image's last
 * row or column). 32-bit indices (the launcher checks M < 2^31) and dy packed until used: with 64-bit divisions and
 * the 4 windows unpacked the partial kernel spilled. */
__device__ __forceinline__ void pool_quad_load(const red_args &a, int t, int cv, act8 dv[4],
                                               unsigned long long args[4], int rows[4]) {
    const int hq = (a.pool_h + 1) / 2, wq = (a.pool_w + 1) / 2;
    const int j = t % wq;
    t /= wq;
    const int k = t % hq, n = t / hq;
    const act_t *dy = (const act_t *)a.dy;
#pragma unroll
    for (int wdw = 0; wdw < 4; wdw++) { /* window (k + wdw / 2, j + wdw % 2) */
        const int pp = k + wdw / 2, qq = j + wdw % 2;
        args[wdw] = ~0ull; /* POOL_NO_ARG in every byte: matches no position */
        dv[wdw] = act8_zero();
        if (pp < a.pool_p && qq < a.pool_q) {
            const long long o = (long long)((n * a.pool_p + pp) * a.pool_q + qq) * a.c + cv * 8;
            dv[wdw] = act8_load(dy + o);
            args[wdw] = *(const unsigned long long *)(a.argmax + o);
        }
    }
#pragma unroll
    for (int in = 0; in < 4; in++) {
        const int hi = 2 * k + in / 2, wi = 2 * j + in % 2;
        rows[in] = hi < a.pool_h && wi < a.pool_w ? (n * a.pool_h + hi) * a.pool_w + wi : -1;
    }
}

/* g of the quad's input `in` (a compile-time index): the windows whose maximum it is */
__device__ __forceinline__ void pool_quad_g(int in, const act8 dv[4], const unsigned long long args[4], float g[8]) {
#pragma unroll
    for (int e = 0; e < 8; e++) g[e] = 0.0f;
#pragma unroll
    for (int wdw = 0; wdw < 4; wdw++) {
        const int me = quad_window_pos(in, wdw);
        if (me < 0) continue;
        float v[8];
        act8_unpack(dv[wdw], v);
#pragma unroll
        for (int e = 0; e < 8; e++) g[e] += ((args[wdw] >> (8 * e)) & 0xffu) == (unsigned)me ? v[e] : 0.0f;
    }
}

/* x's vectors and the ReLU's pass bits of a quad's inputs (zero where outside) */
__device__ __forceinline__ void pool_quad_x(const red_args &a, int cv, const int rows[4], act8 rx[4],
                                            unsigned pass[4]) {
    const act_t *x = (const act_t *)a.x;
    const int cvs = a.c / 8;
#pragma unroll
    for (int in = 0; in < 4; in++) {
        rx[in] = rows[in] >= 0 ? act8_load(x + (long long)rows[in] * a.c + cv * 8) : act8_zero();
        pass[in] = rows[in] >= 0 ? relu_pass8(a, (long long)rows[in] * cvs + cv) : 0u;
    }
}

/* CTAs per SM the pool kernels are built for: f32's 32-byte vectors spilled at 2 (the stem trains in bf16/f16) */
#define POOL_CTAS (ACT == ACT_F32 ? 1 : 2)

/* partial_vec's MODE 2 sums over chunks of quads: P0 = sum g, P1 = sum g * xhat */
extern "C" __global__ void __launch_bounds__(VEC_T, POOL_CTAS) bn_bwd_pool_partial_vec(const red_args a) {
    pdl_enter();
    const int cvt = vec_cvt(a.c), rt = VEC_T / cvt, tid = threadIdx.x;
    const int lane_r = tid / cvt, cv = blockIdx.y * cvt + tid % cvt;
    const bool active = lane_r < rt && cv < a.c / 8;
    const long long chunk = vec_chunk(a), q0 = chunk * a.rows_per_chunk;
    const long long q1 = q0 + a.rows_per_chunk < a.quads ? q0 + a.rows_per_chunk : a.quads;
    /* the double sums in the thread's own shared slots and the statistics in shared memory, not in registers: with
     * them in registers it spilled */
    __shared__ double sh[2][PARTIAL_SLOTS];
    __shared__ __align__(16) float sh_mu[VEC_T * 8], sh_is[VEC_T * 8]; /* the CTA's channels */
#pragma unroll
    for (int e = 0; e < 8; e++) *partials_slot(sh, 0, e) = *partials_slot(sh, 1, e) = 0.0;
    for (int i = tid; i < cvt * 8; i += VEC_T) {
        const int c = blockIdx.y * cvt * 8 + i;
        sh_mu[i] = c < a.c ? a.mean[c] : 0.0f;
        sh_is[i] = c < a.c ? a.invstd[c] : 0.0f;
    }
    __syncthreads();
    if (active) {
        const int cl = (tid % cvt) * 8;
        for (int t = (int)q0 + lane_r; t < (int)q1; t += rt) {
            act8 dv[4], rx[4];
            unsigned long long args[4];
            int rows[4];
            unsigned pass[4];
            pool_quad_load(a, t, cv, dv, args, rows);
            pool_quad_x(a, cv, rows, rx, pass);
            float t0[8] = {0}, t1[8] = {0}, xv[8], g[8], st[8]; /* sum g, sum g * (x - mean) */
            sh_load8(&sh_mu[cl], st);
#pragma unroll
            for (int in = 0; in < 4; in++) {
                pool_quad_g(in, dv, args, g);
                act8_unpack(rx[in], xv);
#pragma unroll
                for (int e = 0; e < 8; e++) {
                    const float gm = (pass[in] >> e) & 1 ? g[e] : 0.0f;
                    t0[e] += gm;
                    t1[e] += gm * (xv[e] - st[e]);
                }
            }
            sh_load8(&sh_is[cl], st);
#pragma unroll
            for (int e = 0; e < 8; e++) *partials_slot(sh, 0, e) += t0[e], *partials_slot(sh, 1, e) += t1[e] * st[e];
        }
    }
    partials_reduce(a, sh, chunk);
}

/* bn_bwd_apply_vec over quads: thread o takes quad o / (C / 8) and channel vector o % (C / 8) (quads * C / 8 < 2^31:
 * the launcher checks). dx's coefficients of every channel in shared memory, a thread's 8 read as each input needs
 * them (C <= BN_POOL_APPLY_C: the launcher checks): kept in registers across the quad they spilled. */
extern "C" __global__ void __launch_bounds__(VEC_T, POOL_CTAS) bn_bwd_pool_apply_vec(const red_args a) {
    pdl_enter();
    __shared__ __align__(16) bwd_t sh_k[3][BN_POOL_APPLY_C];
    __shared__ __align__(16) float sh_mu[BN_POOL_APPLY_C];
    for (int c = threadIdx.x; c < a.c; c += blockDim.x) {
        sh_k[0][c] = (bwd_t)a.coef[c], sh_k[1][c] = (bwd_t)a.coef[a.c + c];
        sh_k[2][c] = (bwd_t)(a.coef[2 * a.c + c] * (double)a.invstd[c]), sh_mu[c] = a.mean[c];
    }
    __syncthreads();
    const int cvs = a.c / 8, total = (int)a.quads * cvs;
    for (int o = blockIdx.x * blockDim.x + threadIdx.x; o < total; o += gridDim.x * blockDim.x) {
        const int cv = o % cvs;
        act8 dv[4], rx[4];
        unsigned long long args[4];
        int rows[4];
        unsigned pass[4];
        pool_quad_load(a, o / cvs, cv, dv, args, rows);
        pool_quad_x(a, cv, rows, rx, pass);
#pragma unroll
        for (int in = 0; in < 4; in++) {
            if (rows[in] < 0) continue;
            float g[8];
            pool_quad_g(in, dv, args, g);
            bn_bwd8 p;
            sh_load8(&sh_k[0][cv * 8], p.k0), sh_load8(&sh_k[1][cv * 8], p.k1), sh_load8(&sh_k[2][cv * 8], p.k2);
            sh_load8(&sh_mu[cv * 8], p.mu);
            bwd_apply8f(a, p, g, rx[in], pass[in], (long long)rows[in] * cvs + cv);
        }
    }
}

/* VGG's max-pool backward where the windows tile the input (pool.cu's pool_backward_tile: each input lies in one
 * window and takes that window's gradient where it is the window's first maximum, else 0; R x S = H/P x W/Q), the
 * ReLU before the pool taken in (a.relu: a window passes where the pool's output y > 0), with the per-channel sums
 * of what it writes: P0 = sum dx over chunks of the pool's output pixels (a.m = N*P*Q rows, P1 zeros), which
 * chan_sum_finalize adds into the bias gradient of the conv before the pool without reading dx again (perf-log step
 * 100). dy, y and argmax (N, P, Q, C); out dx (N, H, W, C), overwritten. Each sum in float per pool pixel, then double
 * in pixel order within a thread, its CTA's lanes and the chunks in order: deterministic. */
extern "C" __global__ void __launch_bounds__(VEC_T) pool_bwd_tile_sum_vec(const red_args a) {
    pdl_enter();
    const int cvt = vec_cvt(a.c), rt = VEC_T / cvt, tid = threadIdx.x;
    const int lane_r = tid / cvt, cv = blockIdx.y * cvt + tid % cvt;
    const bool active = lane_r < rt && cv < a.c / 8;
    const long long chunk = vec_chunk(a), r0 = chunk * a.rows_per_chunk;
    const long long r1 = r0 + a.rows_per_chunk < a.m ? r0 + a.rows_per_chunk : a.m;
    const int wr = a.pool_h / a.pool_p, ws = a.pool_w / a.pool_q; /* the window */
    double s0[8];
#pragma unroll
    for (int e = 0; e < 8; e++) s0[e] = 0.0;
    if (active) {
        const act_t *dy = (const act_t *)a.dy, *y = (const act_t *)a.y;
        act_t *dx = (act_t *)a.out;
        for (long long r = r0 + lane_r; r < r1; r += rt) {
            const long long o = r * a.c + cv * 8;
            float dv[8];
            act8_unpack(act8_load(dy + o), dv);
            const unsigned long long args = *(const unsigned long long *)(a.argmax + o);
            if (a.relu) {
                float yv[8];
                act8_unpack(act8_load(y + o), yv);
#pragma unroll
                for (int e = 0; e < 8; e++) dv[e] = yv[e] > 0.0f ? dv[e] : 0.0f;
            }
            const long long t = r / a.pool_q, qq = r - t * a.pool_q, n = t / a.pool_p, pp = t - n * a.pool_p;
            act_t *base = dx + ((n * a.pool_h + pp * wr) * a.pool_w + qq * ws) * a.c + cv * 8;
            float t0[8] = {0};
            for (int i = 0; i < wr; i++)
                for (int j = 0; j < ws; j++) {
                    const unsigned me = (unsigned)(i * ws + j);
                    float g[8];
#pragma unroll
                    for (int e = 0; e < 8; e++) {
                        g[e] = ((args >> (8 * e)) & 0xffu) == me ? dv[e] : 0.0f;
                        t0[e] += g[e];
                    }
                    act8_store(base + ((long long)i * a.pool_w + j) * a.c, g);
                }
#pragma unroll
            for (int e = 0; e < 8; e++) s0[e] += t0[e];
        }
    }
    __shared__ double sh[2][PARTIAL_SLOTS];
#pragma unroll
    for (int e = 0; e < 8; e++) {
        *partials_slot(sh, 0, e) = s0[e];
        *partials_slot(sh, 1, e) = 0.0;
    }
    partials_reduce(a, sh, chunk);
}

#endif
