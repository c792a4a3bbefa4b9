/* conv2d_epilogue.cuh -- the fused epilogue of the tensor-core forward kernels (conv2d_tc.cu, mma.sync, and
 * conv2d_wg.cu, wgmma), one warp's m16 x (NT8*8) accumulator tile at a time. Both instructions leave a warp's
 * accumulators in the same layout: for n8 tile j, acc[j][2h + e] is row mrow + g + 8h, column nbase + 8j + 2*t4
 * + e (g = lane/4, t4 = lane%4). Needs ACT (common.cuh) and conv_args (params.cuh).
 *   tile_epilogue          y = relu?(acc * scale + shift + residual), rounded once to act_t, 16-byte stores
 *   tile_partials          split-K: the raw fp32 sums into a.ws (slice blockIdx.z); conv2d_tc_splitk_epilogue
 *                          finishes them
 *   tile_prefetch_residual the residual this tile will add, into L2 (a hint, issued when the CTA starts)
 */
#ifndef CNN_KERNELS_CONV2D_EPILOGUE_CUH
#define CNN_KERNELS_CONV2D_EPILOGUE_CUH

template <int NT8>
__device__ __forceinline__ void tile_prefetch_residual(const conv_args &a, int mrow, int nbase, int lane) {
    const act_t *res = (const act_t *)a.residual;
    if (!res || a.splits != 1 || (lane & 3) != 0) return;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int m = mrow + (lane >> 2) + h * 8;
#pragma unroll
        for (int jb = 0; jb < NT8; jb += 4) {
            const int n = nbase + jb * 8;
            if (m < a.gm && n < a.gn) prefetch_l2(res + (long long)m * a.gn + n);
        }
    }
}

template <int NT8>
__device__ __forceinline__ void tile_partials(const conv_args &a, const float (*acc)[4], int mrow, int nbase, int lane) {
    float *ws = a.ws + (long long)blockIdx.z * a.gm * a.gn;
    const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int j = 0; j < NT8; j++) {
        const int n = nbase + j * 8 + 2 * t4;
        if (n >= a.gn) continue;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int m = mrow + g + h * 8;
            if (m < a.gm) *(float2 *)(ws + (long long)m * a.gn + n) = make_float2(acc[j][2 * h], acc[j][2 * h + 1]);
        }
    }
}

/* Four lanes of a row (t4 = 0..3) trade the column pairs of four consecutive n8 tiles -- a 4x4 transpose by XOR
 * shuffles: in round r lane t4 sends its pair of tile t4^r and receives its partner's pair of tile t4 -- so each
 * lane owns 8 consecutive channels: 16-byte residual loads and stores (two of each for F32), 64 (F32: 128)
 * contiguous bytes per row per warp instruction. The residual vectors of both rows (one row for 256-wide tiles)
 * are all loaded before the first store, so they are in flight together (y may alias the residual: each thread
 * reads exactly the vectors it later writes). */
template <int NT8>
__device__ __forceinline__ void tile_epilogue(const conv_args &a, const float (*acc)[4], int mrow, int nbase, int lane) {
    static_assert(NT8 % 4 == 0, "groups of four n8 tiles");
    /* rows g and g+8 together, except in the 256-wide tiles, whose 128 accumulators leave no room for the
     * residual vectors of both rows at once (the persistent wgmma kernel also keeps its loader live here) */
    constexpr int HG = NT8 >= 32 ? 1 : 2;
    act_t *y = (act_t *)a.out;
    const act_t *res = (const act_t *)a.residual;
    const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int h0 = 0; h0 < 2; h0 += HG) {
        act8 rv[HG][NT8 / 4];
#pragma unroll
        for (int hh = 0; hh < HG; hh++)
#pragma unroll
            for (int jb = 0; jb < NT8; jb += 4) {
                const int m = mrow + g + (h0 + hh) * 8, n = nbase + (jb + t4) * 8;
                rv[hh][jb / 4] = act8_zero();
                if (res && m < a.gm && n < a.gn) rv[hh][jb / 4] = act8_load(res + (long long)m * a.gn + n);
            }
#pragma unroll
        for (int hh = 0; hh < HG; hh++) {
            const int h = h0 + hh, m = mrow + g + h * 8;
#pragma unroll
            for (int jb = 0; jb < NT8; jb += 4) {
                float gx[4], gy[4];
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const int q = t4 ^ r;
                    const float sx = q == 0 ? acc[jb][2 * h] : q == 1 ? acc[jb + 1][2 * h]
                                   : q == 2 ? acc[jb + 2][2 * h] : acc[jb + 3][2 * h];
                    const float sy = q == 0 ? acc[jb][2 * h + 1] : q == 1 ? acc[jb + 1][2 * h + 1]
                                   : q == 2 ? acc[jb + 2][2 * h + 1] : acc[jb + 3][2 * h + 1];
                    gx[r] = __shfl_xor_sync(0xffffffffu, sx, r);
                    gy[r] = __shfl_xor_sync(0xffffffffu, sy, r);
                }
                /* gx/gy[r] = columns 2*(t4^r), +1 of tile jb + t4 */
                float v[8];
#pragma unroll
                for (int sp = 0; sp < 4; sp++) {
                    const int r = t4 ^ sp;
                    v[2 * sp] = r == 0 ? gx[0] : r == 1 ? gx[1] : r == 2 ? gx[2] : gx[3];
                    v[2 * sp + 1] = r == 0 ? gy[0] : r == 1 ? gy[1] : r == 2 ? gy[2] : gy[3];
                }
                const int n = nbase + (jb + t4) * 8;
                if (m >= a.gm || n >= a.gn) continue; /* K % 8 == 0: all 8 channels or none */
                const long long o = (long long)m * a.gn + n;
#pragma unroll
                for (int k = 0; k < 8; k++) v[k] = v[k] * (a.scale ? a.scale[n + k] : 1.0f) + (a.shift ? a.shift[n + k] : 0.0f);
                if (res) {
                    float r8[8];
                    act8_unpack(rv[hh][jb / 4], r8);
#pragma unroll
                    for (int k = 0; k < 8; k++) v[k] += r8[k];
                }
                if (a.relu) {
#pragma unroll
                    for (int k = 0; k < 8; k++) v[k] = v[k] > 0.0f ? v[k] : 0.0f;
                }
                act8_store(y + o, v);
            }
        }
    }
}

#endif
