/* conv2d_wgmma.cuh -- Hopper's warpgroup MMA (wgmma.mma_async, sm_90a) as the forward kernels conv2d_wg.cu and
 * conv2d_ws.cu use it: both operands K-major in shared memory, 64-element (128-byte) slice rows in the 128-byte
 * swizzle (conv2d_loader.cuh's conv_swz<64>), f32 accumulators in mma.sync's m16n8 layout per warp.
 *   wg_desc                the matrix descriptor of such an operand
 *   wgmma_n64/n128/n192/n256  one m64 x N x k16 product (wgmma_bn<N>::mma picks by N)
 *   wg_multiply_slice      a warpgroup's products over one slice (the emulator computes them per thread)
 *   wg_fence, wg_commit_and_wait_prev, wg_wait_all, acc_zero, acc_fence_all (fence_proxy_async: common.cuh)
 * Needs ACT (common.cuh) and conv2d_loader.cuh.
 */
#ifndef CNN_KERNELS_CONV2D_WGMMA_CUH
#define CNN_KERNELS_CONV2D_WGMMA_CUH

#if ACT == ACT_BF16
#define WG_AB "bf16"
#else
#define WG_AB "f16"
#endif

/* Matrix descriptor of a K-major operand in the 128-byte swizzle: start address / 16 (bits 0-13), leading byte
 * offset (bits 16-29; unused for this layout, 1 by convention), stride byte offset 1024 / 16 (bits 32-45: the
 * distance between groups of 8 rows), swizzle mode 1 = 128 bytes (bits 62-63). */
__device__ __forceinline__ unsigned long long wg_desc(const void *p) {
    return (unsigned long long)((smem_u32(p) & 0x3FFFFu) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}

__device__ __forceinline__ void wg_fence(void) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
/* closes the batch just issued and waits until at most that one is still running (the previous one retired) */
__device__ __forceinline__ void wg_commit_and_wait_prev(void) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wg_wait_all(void) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#endif
}
/* keeps the compiler from moving accumulator reads or writes across the asynchronous MMA */
__device__ __forceinline__ void acc_fence(float &x) {
#if defined(__CUDA_ARCH__)
    asm volatile("" : "+f"(x)::"memory");
#else
    (void)x;
#endif
}

/* every accumulator of a thread, in its register: zeroed; or fenced against the asynchronous MMA writing it */
template <int MB_, int NT8_> __device__ __forceinline__ void acc_zero(float (&acc)[MB_][NT8_][4]) {
#pragma unroll
    for (int b = 0; b < MB_; b++)
#pragma unroll
        for (int j = 0; j < NT8_; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[b][j][e] = 0.0f;
}
template <int MB_, int NT8_> __device__ __forceinline__ void acc_fence_all(float (&acc)[MB_][NT8_][4]) {
#pragma unroll
    for (int b = 0; b < MB_; b++)
#pragma unroll
        for (int j = 0; j < NT8_; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc_fence(acc[b][j][e]);
}

__device__ __forceinline__ void wgmma_n64(float *d, unsigned long long da, unsigned long long db, int accumulate) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." WG_AB "." WG_AB " "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
                 "%32, %33, p, 1, 1, 0, 0; }\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "r"(accumulate));
#elif defined(__CUDA_ARCH__) /* sm_80 .. sm_90 without the a: never launched (src/cuda/conv2d.c, tc_usable) */
    (void)d, (void)da, (void)db, (void)accumulate;
    __trap();
#else
    (void)d, (void)da, (void)db, (void)accumulate;
#endif
}
__device__ __forceinline__ void wgmma_n128(float *d, unsigned long long da, unsigned long long db, int accumulate) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." WG_AB "." WG_AB " "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
                 "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
                 "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
                 "%64, %65, p, 1, 1, 0, 0; }\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(accumulate));
#elif defined(__CUDA_ARCH__) /* sm_80 .. sm_90 without the a: never launched (src/cuda/conv2d.c, tc_usable) */
    (void)d, (void)da, (void)db, (void)accumulate;
    __trap();
#else
    (void)d, (void)da, (void)db, (void)accumulate;
#endif
}
__device__ __forceinline__ void wgmma_n192(float *d, unsigned long long da, unsigned long long db, int accumulate) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %98, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n192k16.f32." WG_AB "." WG_AB " "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
                 "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
                 "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"
                 "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"
                 "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95}, "
                 "%96, %97, p, 1, 1, 0, 0; }\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
                   "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
                   "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
                   "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
                   "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
                 : "l"(da), "l"(db), "r"(accumulate));
#elif defined(__CUDA_ARCH__) /* sm_80 .. sm_90 without the a: never launched (src/cuda/conv2d.c, tc_usable) */
    (void)d, (void)da, (void)db, (void)accumulate;
    __trap();
#else
    (void)d, (void)da, (void)db, (void)accumulate;
#endif
}
__device__ __forceinline__ void wgmma_n256(float *d, unsigned long long da, unsigned long long db, int accumulate) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32." WG_AB "." WG_AB " "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
                 "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
                 "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"
                 "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"
                 "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"
                 "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,"
                 "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, "
                 "%128, %129, p, 1, 1, 0, 0; }\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
                   "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
                   "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
                   "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
                   "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
                   "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
                   "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
                   "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
                   "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "l"(da), "l"(db), "r"(accumulate));
#elif defined(__CUDA_ARCH__) /* sm_80 .. sm_90 without the a: never launched (src/cuda/conv2d.c, tc_usable) */
    (void)d, (void)da, (void)db, (void)accumulate;
    __trap();
#else
    (void)d, (void)da, (void)db, (void)accumulate;
#endif
}

template <int BN_> struct wgmma_bn;
template <> struct wgmma_bn<64> {
    static __device__ __forceinline__ void mma(float *d, unsigned long long da, unsigned long long db) { wgmma_n64(d, da, db, 1); }
};
template <> struct wgmma_bn<128> {
    static __device__ __forceinline__ void mma(float *d, unsigned long long da, unsigned long long db) { wgmma_n128(d, da, db, 1); }
};
template <> struct wgmma_bn<192> {
    static __device__ __forceinline__ void mma(float *d, unsigned long long da, unsigned long long db) { wgmma_n192(d, da, db, 1); }
};
template <> struct wgmma_bn<256> {
    static __device__ __forceinline__ void mma(float *d, unsigned long long da, unsigned long long db) { wgmma_n256(d, da, db, 1); }
};

/* One warpgroup's products of one 64-wide slice: acc[b] += A rows [64b, 64b + 64) x B^T, A and B the slice's
 * tiles in the 128-byte swizzle (A_wg: the warpgroup's first row, a multiple of 8 rows into its tile; Bs: BN_
 * rows). On the GPU: wgmma.fence, then 4 k16 steps x MB_ m64 blocks issued asynchronously (the caller commits
 * and waits). In the emulator (no __CUDA_ARCH__) each thread computes its own accumulators, in wgmma's m16n8
 * register layout (warp w of the warpgroup: rows 16w .. 16w + 15 of each block), synchronously. */
template <int MB_, int BN_>
__device__ __forceinline__ void wg_multiply_slice(float (&acc)[MB_][BN_ / 8][4], const act_t *A_wg, const act_t *Bs,
                                                  int warp_in_wg, int lane) {
#if defined(__CUDA_ARCH__)
    (void)warp_in_wg, (void)lane;
    wg_fence();
#pragma unroll
    for (int k16 = 0; k16 < 4; k16++) {
        const unsigned long long db = wg_desc(Bs) + (unsigned long long)(k16 * 2); /* +32 bytes */
#pragma unroll
        for (int b = 0; b < MB_; b++)
            wgmma_bn<BN_>::mma(&acc[b][0][0], wg_desc(A_wg + b * 64 * 64) + (unsigned long long)(k16 * 2), db);
    }
#else
    const int g = lane >> 2, t4 = lane & 3;
    for (int b = 0; b < MB_; b++)
        for (int j = 0; j < BN_ / 8; j++)
            for (int e = 0; e < 4; e++) {
                const int r = b * 64 + warp_in_wg * 16 + g + (e >> 1) * 8, c = j * 8 + 2 * t4 + (e & 1);
                float s = 0.0f;
                for (int k = 0; k < 64; k++)
                    s += act_to_f32(A_wg[conv_swz<64>(r, k >> 3) + (k & 7)]) * act_to_f32(Bs[conv_swz<64>(c, k >> 3) + (k & 7)]);
                acc[b][j][e] += s;
            }
#endif
}

#endif
