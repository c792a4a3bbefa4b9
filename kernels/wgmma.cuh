/* wgmma.cuh -- Hopper's warpgroup MMA (wgmma.mma_async, sm_90a) as the conv kernels use it: operands in shared memory
 * in the 128-byte swizzle, K-major (64-element slice rows, conv2d_loader.cuh's conv_swz<64>: the forward kernels
 * conv2d_wgmma.cu and conv2d_warpspec.cu) or MN-major (TMA boxes: the wgrad kernel, a dgrad's filter read as it is),
 * f32 accumulators in mma.sync's m16n8 layout per warp.
 *   wg_desc                the matrix descriptor of such an operand (wg_desc_mn: of an MN-major one: wgrad, dgrad)
 *   wgmma_n<N, TA, TB>     one m64 x N x k16 product, N = 64, 128, 192 or 256, either operand MN-major
 *   wg_multiply_slice      a warpgroup's products over one slice (the emulator computes them per thread)
 *   wg_multiply_mn         the same over K16 k16 steps of MN-major operands whose B chunks are any distance apart
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

/* Matrix descriptor of an MN-major operand in the 128-byte swizzle (wgmma's transposed operands, TA or TB = 1): rows
 * of 64 M (or N) elements, one row per reduction index, as a TMA box of 64 x 64 lands. The stride byte offset is
 * the distance between groups of 8 reduction rows (1024 bytes); the leading byte offset the distance between
 * consecutive 64-element chunks of M (N), here whole boxes of `chunk_bytes` (unused by an m64 operand). */
__device__ __forceinline__ unsigned long long wg_desc_mn(const void *p, unsigned chunk_bytes) {
    return (unsigned long long)((smem_u32(p) & 0x3FFFFu) >> 4) | ((unsigned long long)(chunk_bytes >> 4) << 16) |
           (64ull << 32) | (1ull << 62);
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

/* One m64 x N x k16 product, N = 64, 128, 192 or 256: d (N/2 accumulators of the thread) += A x B^T, or = with
 * accumulate 0. The asm operands: N/2 accumulators, then the two descriptors and the accumulate flag; WG_D32(i) is
 * accumulators i .. i + 31, WG_R32_k the template's names for the k-th 32 of them. */
#define WG_D8(i) "+f"(d[(i)]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3]), "+f"(d[(i) + 4]), "+f"(d[(i) + 5]), \
                 "+f"(d[(i) + 6]), "+f"(d[(i) + 7])
#define WG_D32(i) WG_D8(i), WG_D8((i) + 8), WG_D8((i) + 16), WG_D8((i) + 24)
#define WG_R32_0 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
#define WG_R32_1 "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47," \
                 "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
#define WG_R32_2 "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79," \
                 "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95"
#define WG_R32_3 "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111," \
                 "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"
/* N, the accumulators' names, the names of (descriptor a, descriptor b, accumulate), then the accumulators */
#define WG_MMA_ASM(N, REGS, DA, DB, P, TA_, TB_, ...)                                                                  \
    asm volatile("{ .reg .pred p; setp.ne.b32 p, " P ", 0;\n"                                                          \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." WG_AB "." WG_AB " {" REGS "}, " DA ", " DB          \
                 ", p, 1, 1, " TA_ ", " TB_ "; }\n"                                                                    \
                 : __VA_ARGS__                                                                                         \
                 : "l"(da), "l"(db), "r"(accumulate), "n"(TA), "n"(TB))
/* TA, TB = 1: that operand MN-major (wg_desc_mn); wgrad reads both so (kernels/conv2d_wgrad_wgmma.cu), a dgrad its
 * transposed filter (FILT_T) */
template <int N, int TA = 0, int TB = 0>
__device__ __forceinline__ void wgmma_n(float *d, unsigned long long da, unsigned long long db, int accumulate) {
    static_assert(N == 64 || N == 128 || N == 192 || N == 256, "wgmma n64, n128, n192 or n256");
    static_assert((TA == 0 || TA == 1) && (TB == 0 || TB == 1), "K-major or MN-major operands");
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    if constexpr (N == 64)
        WG_MMA_ASM(64, WG_R32_0, "%32", "%33", "%34", "%35", "%36", WG_D32(0));
    else if constexpr (N == 128)
        WG_MMA_ASM(128, WG_R32_0 "," WG_R32_1, "%64", "%65", "%66", "%67", "%68", WG_D32(0), WG_D32(32));
    else if constexpr (N == 192)
        WG_MMA_ASM(192, WG_R32_0 "," WG_R32_1 "," WG_R32_2, "%96", "%97", "%98", "%99", "%100", WG_D32(0), WG_D32(32),
                   WG_D32(64));
    else
        WG_MMA_ASM(256, WG_R32_0 "," WG_R32_1 "," WG_R32_2 "," WG_R32_3, "%128", "%129", "%130", "%131", "%132",
                   WG_D32(0), WG_D32(32), WG_D32(64), WG_D32(96));
#elif defined(__CUDA_ARCH__) /* sm_80 .. sm_90 without the a: never launched (src/cuda/conv2d.c, tc_usable) */
    (void)d, (void)da, (void)db, (void)accumulate;
    __trap();
#else
    (void)d, (void)da, (void)db, (void)accumulate;
#endif
}
#undef WG_MMA_ASM
#undef WG_D32
#undef WG_D8
#undef WG_R32_0
#undef WG_R32_1
#undef WG_R32_2
#undef WG_R32_3

/* One warpgroup's products of one 64-wide slice of the reduction: acc[b] += A_b x B^T over its 64 reduction indices,
 * for the m64 blocks b < MB_ of A and the BN_ columns of B, each operand in either layout of the 128-byte swizzle:
 *   K-major (TA / TB = 0): rows of 64 reduction elements, one per M (N) index, 8 rows per 1 KB group (a TMA box or
 *                          conv2d_loader.cuh's conv_swz<64> rows); m64 block b from row 64b
 *   MN-major (TA / TB = 1): boxes of 64 reduction rows x 64 M (N) elements (8 KB each, consecutive), as a TMA box of
 *                          a row-major matrix lands: block b (columns 64j ..) is box b (j)
 * Either way block b starts b x 4096 elements into A. A_wg: the warpgroup's block 0 (a multiple of 8 rows, or of
 * whole boxes, into its tile). On the GPU: wgmma.fence, then 4 k16 steps x MB_ m64 blocks issued asynchronously
 * (the caller commits and waits). In the emulator (no __CUDA_ARCH__) each thread computes its own accumulators, in
 * wgmma's m16n8 register layout (warp w of the warpgroup: rows 16w .. 16w + 15 of each block), synchronously.
 * The forward reads both K-major, wgrad both MN-major, dgrad's transposed filter (FILT_T) the filter MN-major. */
template <int MB_, int BN_, int TA = 0, int TB = 0>
__device__ __forceinline__ void wg_multiply_slice(float (&acc)[MB_][BN_ / 8][4], const act_t *A_wg, const act_t *Bs,
                                                  int warp_in_wg, int lane) {
    constexpr int BOX = 64 * 64; /* elements of a box, and of an m64 block of K-major rows */
#if defined(__CUDA_ARCH__)
    (void)warp_in_wg, (void)lane;
    wg_fence();
#pragma unroll
    for (int k16 = 0; k16 < 4; k16++) {
        const unsigned long long db = TB ? wg_desc_mn(Bs + k16 * 16 * 64, BOX * 2)
                                         : wg_desc(Bs) + (unsigned long long)(k16 * 2); /* +32 bytes */
#pragma unroll
        for (int b = 0; b < MB_; b++)
            wgmma_n<BN_, TA, TB>(&acc[b][0][0],
                                 TA ? wg_desc_mn(A_wg + b * BOX + k16 * 16 * 64, BOX * 2)
                                    : wg_desc(A_wg + b * BOX) + (unsigned long long)(k16 * 2),
                                 db, 1);
    }
#else
    /* element (i, k) of an operand: M (N) index i, reduction index k */
    auto at = [](const act_t *X, bool mn, int i, int k) {
        return mn ? X[(i >> 6) * BOX + conv_swz<64>(k, (i & 63) >> 3) + (i & 7)] : X[conv_swz<64>(i, k >> 3) + (k & 7)];
    };
    const int g = lane >> 2, t4 = lane & 3;
    for (int b = 0; b < MB_; b++)
        for (int j = 0; j < BN_ / 8; j++)
            for (int e = 0; e < 4; e++) {
                const int r = b * 64 + warp_in_wg * 16 + g + (e >> 1) * 8, c = j * 8 + 2 * t4 + (e & 1);
                float s = 0.0f;
                for (int k = 0; k < 64; k++) s += act_to_f32(at(A_wg, TA, r, k)) * act_to_f32(at(Bs, TB, c, k));
                acc[b][j][e] += s;
            }
#endif
}


/* One warpgroup's products over K16 k16 steps of two MN-major operands (wgrad, both read as TMA boxes land): acc +=
 * A x B^T, A one m64 block (rows of 64 M elements, one per reduction index), B N_ columns in 64-element chunks
 * `b_chunk` elements apart (any multiple of 512: a chunk starts on a 1 KB swizzle period). The halo wgrad's chunks are
 * one shifted x box's rows r * QB apart, one per filter row r (kernels/conv2d_wgrad_wgmma.cu). */
template <int N_, int K16>
__device__ __forceinline__ void wg_multiply_mn(float (&acc)[1][N_ / 8][4], const act_t *A, const act_t *B, int b_chunk,
                                               int warp_in_wg, int lane) {
#if defined(__CUDA_ARCH__)
    (void)warp_in_wg, (void)lane;
    wg_fence();
#pragma unroll
    for (int k16 = 0; k16 < K16; k16++)
        wgmma_n<N_, 1, 1>(&acc[0][0][0], wg_desc_mn(A + k16 * 16 * 64, 64 * 64 * 2),
                          wg_desc_mn(B + k16 * 16 * 64, (unsigned)b_chunk * 2u), 1);
#else
    const int g = lane >> 2, t4 = lane & 3;
    for (int j = 0; j < N_ / 8; j++)
        for (int e = 0; e < 4; e++) {
            const int r = warp_in_wg * 16 + g + (e >> 1) * 8, c = j * 8 + 2 * t4 + (e & 1);
            float s = 0.0f;
            for (int k = 0; k < 16 * K16; k++)
                s += act_to_f32(A[conv_swz<64>(k, r >> 3) + (r & 7)]) *
                     act_to_f32(B[(c >> 6) * b_chunk + conv_swz<64>(k, (c & 63) >> 3) + (c & 7)]);
            acc[0][j][e] += s;
        }
#endif
}

#endif
