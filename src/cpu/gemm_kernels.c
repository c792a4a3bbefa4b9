/* gemm_kernels.c — the SIMD micro-kernels of the packed SGEMM (gemm.c drives them).
 *
 * Contract (cpu.h, cnn_cpu_ukr): C tile (mr x NR) (+)= A panel times B panel (kc rows of NR floats), then the
 * epilogue on the last K block. The A panel is row-major (mr row pointers, each to kc contiguous floats: a row of
 * the operand itself where it is contiguous, else a row the driver gathered) or, in the `c` kernels,
 * column-major (kc columns of MR floats: what a transposed operand such as dY^T packs into with one short copy
 * per column). Accumulators live in registers for the whole K block; A values are broadcast (a row pointer
 * each, held in a register), B rows are vector loads; one explicit FMA per (i, j, k) in k order. Full tiles
 * merge with vectors; edge tiles (nr < NR) spill the accumulators and use the scalar merge, whose order of
 * operations is the same.
 *
 * Each function carries its own target attribute, so this file builds with plain flags and the driver
 * picks a kernel at run time with __builtin_cpu_supports. One kernel per mr (1..MR) is generated from an
 * always-inline body so the accumulator arrays unroll into registers.
 */
#include "cpu/cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

/* ---- AVX-512: 12 x 32 tile, 24 zmm accumulators -------------------------------------------------------- */

#define MR5 CNN_CPU_AVX512_MR
#define NR5 CNN_CPU_AVX512_NR

static inline __attribute__((always_inline, target("avx512f"))) void
ukr512_body(const int mr, const bool acol, int64_t kc, const float *const *a, const float *b, const cnn_cpu_tile *t) {
    __m512 c0[MR5], c1[MR5];
    const float *ar[MR5]; /* row-major: the rows, each in a register through the loop */
#pragma GCC unroll 12
    for (int i = 0; i < MR5; i++) {
        if (i < mr) c0[i] = _mm512_setzero_ps(), c1[i] = _mm512_setzero_ps(), ar[i] = acol ? a[0] : a[i];
    }
    for (int64_t k = 0; k < kc; k++) {
        __m512 b0 = _mm512_load_ps(b + NR5 * k), b1 = _mm512_load_ps(b + NR5 * k + 16);
#pragma GCC unroll 12
        for (int i = 0; i < MR5; i++) {
            if (i < mr) {
                __m512 ai = _mm512_set1_ps(acol ? ar[0][k * MR5 + i] : ar[i][k]);
                c0[i] = _mm512_fmadd_ps(ai, b0, c0[i]);
                c1[i] = _mm512_fmadd_ps(ai, b1, c1[i]);
            }
        }
    }
    if (t->nr == NR5) {
        const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 12
        for (int i = 0; i < MR5; i++) {
            if (i >= mr) continue;
            float *cp = t->crow[i];
            __m512 v0 = c0[i], v1 = c1[i];
            if (t->beta) v0 = _mm512_add_ps(_mm512_loadu_ps(cp), v0), v1 = _mm512_add_ps(_mm512_loadu_ps(cp + 16), v1);
            if (t->last) {
                if (t->scale)
                    v0 = _mm512_mul_ps(v0, _mm512_loadu_ps(t->scale)), v1 = _mm512_mul_ps(v1, _mm512_loadu_ps(t->scale + 16));
                if (t->shift)
                    v0 = _mm512_add_ps(v0, _mm512_loadu_ps(t->shift)), v1 = _mm512_add_ps(v1, _mm512_loadu_ps(t->shift + 16));
                if (t->rrow)
                    v0 = _mm512_add_ps(v0, _mm512_loadu_ps(t->rrow[i])),
                    v1 = _mm512_add_ps(v1, _mm512_loadu_ps(t->rrow[i] + 16));
                if (t->relu) v0 = _mm512_max_ps(zero, v0), v1 = _mm512_max_ps(zero, v1); /* max(0, NaN) = NaN */
            }
            _mm512_storeu_ps(cp, v0);
            _mm512_storeu_ps(cp + 16, v1);
        }
    } else {
        float tmp[MR5 * NR5] __attribute__((aligned(64)));
#pragma GCC unroll 12
        for (int i = 0; i < MR5; i++) {
            if (i < mr) _mm512_store_ps(tmp + i * NR5, c0[i]), _mm512_store_ps(tmp + i * NR5 + 16, c1[i]);
        }
        cnn_cpu_tile_store(tmp, NR5, mr, t);
    }
}

#define UKR512(M)                                                                                                   \
    static __attribute__((target("avx512f"))) void ukr512_##M(int64_t kc, const float *const *a,                    \
                                        const float *b, const cnn_cpu_tile *t) {                                    \
        ukr512_body(M, false, kc, a, b, t);                                                                         \
    }                                                                                                               \
    static __attribute__((target("avx512f"))) void ukr512c_##M(int64_t kc, const float *const *a,                   \
                                         const float *b, const cnn_cpu_tile *t) {                                   \
        ukr512_body(M, true, kc, a, b, t);                                                                          \
    }
UKR512(1) UKR512(2) UKR512(3) UKR512(4) UKR512(5) UKR512(6)
UKR512(7) UKR512(8) UKR512(9) UKR512(10) UKR512(11) UKR512(12)

const cnn_cpu_ukr cnn_cpu_ukr_avx512[2][MR5 + 1] = {
    {NULL, ukr512_1, ukr512_2, ukr512_3, ukr512_4, ukr512_5, ukr512_6, ukr512_7, ukr512_8, ukr512_9, ukr512_10, ukr512_11,
     ukr512_12},
    {NULL, ukr512c_1, ukr512c_2, ukr512c_3, ukr512c_4, ukr512c_5, ukr512c_6, ukr512c_7, ukr512c_8, ukr512c_9, ukr512c_10,
     ukr512c_11, ukr512c_12},
};

/* ---- AVX2 + FMA: 6 x 16 tile, 12 ymm accumulators ------------------------------------------------------ */

#define MR2 CNN_CPU_AVX2_MR
#define NR2 CNN_CPU_AVX2_NR

static inline __attribute__((always_inline, target("avx2,fma"))) void
ukr256_body(const int mr, const bool acol, int64_t kc, const float *const *a, const float *b, const cnn_cpu_tile *t) {
    __m256 c0[MR2], c1[MR2];
    const float *ar[MR2]; /* row-major: the rows */
#pragma GCC unroll 6
    for (int i = 0; i < MR2; i++) {
        if (i < mr) c0[i] = _mm256_setzero_ps(), c1[i] = _mm256_setzero_ps(), ar[i] = acol ? a[0] : a[i];
    }
    for (int64_t k = 0; k < kc; k++) {
        __m256 b0 = _mm256_load_ps(b + NR2 * k), b1 = _mm256_load_ps(b + NR2 * k + 8);
#pragma GCC unroll 6
        for (int i = 0; i < MR2; i++) {
            if (i < mr) {
                __m256 ai = _mm256_broadcast_ss(acol ? ar[0] + k * MR2 + i : ar[i] + k);
                c0[i] = _mm256_fmadd_ps(ai, b0, c0[i]);
                c1[i] = _mm256_fmadd_ps(ai, b1, c1[i]);
            }
        }
    }
    if (t->nr == NR2) {
        const __m256 zero = _mm256_setzero_ps();
#pragma GCC unroll 6
        for (int i = 0; i < MR2; i++) {
            if (i >= mr) continue;
            float *cp = t->crow[i];
            __m256 v0 = c0[i], v1 = c1[i];
            if (t->beta) v0 = _mm256_add_ps(_mm256_loadu_ps(cp), v0), v1 = _mm256_add_ps(_mm256_loadu_ps(cp + 8), v1);
            if (t->last) {
                if (t->scale)
                    v0 = _mm256_mul_ps(v0, _mm256_loadu_ps(t->scale)), v1 = _mm256_mul_ps(v1, _mm256_loadu_ps(t->scale + 8));
                if (t->shift)
                    v0 = _mm256_add_ps(v0, _mm256_loadu_ps(t->shift)), v1 = _mm256_add_ps(v1, _mm256_loadu_ps(t->shift + 8));
                if (t->rrow)
                    v0 = _mm256_add_ps(v0, _mm256_loadu_ps(t->rrow[i])),
                    v1 = _mm256_add_ps(v1, _mm256_loadu_ps(t->rrow[i] + 8));
                if (t->relu) v0 = _mm256_max_ps(zero, v0), v1 = _mm256_max_ps(zero, v1);
            }
            _mm256_storeu_ps(cp, v0);
            _mm256_storeu_ps(cp + 8, v1);
        }
    } else {
        float tmp[MR2 * NR2] __attribute__((aligned(32)));
#pragma GCC unroll 6
        for (int i = 0; i < MR2; i++) {
            if (i < mr) _mm256_store_ps(tmp + i * NR2, c0[i]), _mm256_store_ps(tmp + i * NR2 + 8, c1[i]);
        }
        cnn_cpu_tile_store(tmp, NR2, mr, t);
    }
}

#define UKR256(M)                                                                                                   \
    static __attribute__((target("avx2,fma"))) void ukr256_##M(int64_t kc, const float *const *a,                   \
                                        const float *b, const cnn_cpu_tile *t) {                                    \
        ukr256_body(M, false, kc, a, b, t);                                                                         \
    }                                                                                                               \
    static __attribute__((target("avx2,fma"))) void ukr256c_##M(int64_t kc, const float *const *a,                  \
                                         const float *b, const cnn_cpu_tile *t) {                                   \
        ukr256_body(M, true, kc, a, b, t);                                                                          \
    }
UKR256(1) UKR256(2) UKR256(3) UKR256(4) UKR256(5) UKR256(6)

const cnn_cpu_ukr cnn_cpu_ukr_avx2[2][MR2 + 1] = {
    {NULL, ukr256_1, ukr256_2, ukr256_3, ukr256_4, ukr256_5, ukr256_6},
    {NULL, ukr256c_1, ukr256c_2, ukr256c_3, ukr256c_4, ukr256c_5, ukr256c_6},
};

#else /* not x86: the driver falls back to the portable kernel */

const cnn_cpu_ukr cnn_cpu_ukr_avx512[2][CNN_CPU_AVX512_MR + 1];
const cnn_cpu_ukr cnn_cpu_ukr_avx2[2][CNN_CPU_AVX2_MR + 1];

#endif
