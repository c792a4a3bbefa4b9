/* gemm.c — the CPU backend's SGEMM: a plain reference, and a packed, cache-blocked fast path.
 *
 *     C (M, N) (+)= A (M, K) · B (K, N), then a per-column epilogue (cpu.h, cnn_cpu_out)
 *
 * Fast path (Goto/BLIS structure): A in MR-row panels (row-major: a row pointer each, into A itself where the
 * row's K block is contiguous there, else into a packed copy; column-major when A is stored transposed, e.g.
 * dY^T), B packed into NR-column panels (kc x NR); a register-blocked micro-kernel (gemm_kernels.c) computes an
 * MR x NR tile per K block (<= CNN_CPU_KC) and merges it into C.
 * Two schedules:
 *   large M (convolutions):  per N block, pack B's whole K extent once (shared; the one barrier); then
 *                            tasks = A panels, dynamic: each takes its panel's rows per K block (an im2col
 *                            row read in place inside the image, gathered at its borders) and sweeps the B
 *                            panels, its C tiles staying in L1;
 *   small M (wgrad, linear): K is cut into fixed chunks; tasks = (K chunk, N range), fully independent with
 *                            private packing, each chunk into its own partial; partials summed in order.
 * The K blocking and chunking depend on the problem only, never on the thread count, and each C element is
 * one fixed chain of FMAs whichever thread computes it: results are bitwise identical for any thread count.
 *
 * Operands may be implicit im2col matrices (cnn_cpu_im2col): an A row is read from the NHWC source where its
 * K block is one run of it, and gathered while packing elsewhere (B rows always), so a convolution never
 * materialises its im2col matrix; scratch is the packing buffers only.
 */
#include "cpu/cpu.h"

#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define NC_MAX 512                  /* columns per N block: a 256 x 512 B block (512 KB) sits in L2      */
#define SMALL_M 1536                /* up to this many rows the small-M schedule (K split) is used        */
#define KSPLIT (8 * CNN_CPU_KC)     /* small M: K chunk summed into its own partial, chunks summed in order */

/* ---- the reference ------------------------------------------------------------------------------------- */

void cnn_cpu_sgemm_ref(int64_t m, int64_t n, int64_t k, const float *a, int64_t rsa, int64_t csa, const float *b,
                       int64_t rsb, int64_t csb, float *c, int64_t ldc, bool accumulate) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            double acc = 0;
            for (int64_t l = 0; l < k; l++) acc += (double)a[i * rsa + l * csa] * (double)b[l * rsb + j * csb];
            c[i * ldc + j] = accumulate ? (float)((double)c[i * ldc + j] + acc) : (float)acc;
        }
    }
}

/* ---- the portable micro-kernel --------------------------------------------------------------------------- */

#define MRC 4
#define MR_MAX (CNN_CPU_AVX512_MR > MRC ? CNN_CPU_AVX512_MR : MRC) /* rows of any kernel's tile */
#define NRC 16

void cnn_cpu_tile_store(const float *acc, int ld, int mr, const cnn_cpu_tile *t) {
    for (int i = 0; i < mr; i++) {
        float *cp = t->crow[i];
        for (int j = 0; j < t->nr; j++) {
            float v = acc[i * ld + j];
            if (t->beta) v = cp[j] + v;
            if (t->last) {
                if (t->scale) v = v * t->scale[j];
                if (t->shift) v = v + t->shift[j];
                if (t->rrow) v = v + t->rrow[i][j];
                if (t->relu) v = v < 0 ? 0.0f : v;  /* NaN stays NaN, as max(0, x) in the vector kernels */
            }
            cp[j] = v;
        }
    }
}

static void ukr_c(int mr, bool acol, int64_t kc, const float *const *a, const float *b, const cnn_cpu_tile *t) {
    float acc[MRC * NRC] = {0};
    for (int64_t k = 0; k < kc; k++)
        for (int i = 0; i < mr; i++) {
            float ai = acol ? a[0][k * MRC + i] : a[i][k];
            for (int j = 0; j < NRC; j++) acc[i * NRC + j] += ai * b[k * NRC + j];
        }
    cnn_cpu_tile_store(acc, NRC, mr, t);
}
#define UKRC(M)                                                                                                     \
    static void ukr_c##M(int64_t kc, const float *const *a, const float *b, const cnn_cpu_tile *t) {                \
        ukr_c(M, false, kc, a, b, t);                                                                               \
    }                                                                                                               \
    static void ukr_cc##M(int64_t kc, const float *const *a, const float *b, const cnn_cpu_tile *t) {               \
        ukr_c(M, true, kc, a, b, t);                                                                                \
    }
UKRC(1) UKRC(2) UKRC(3) UKRC(4)
static const cnn_cpu_ukr ukr_c_tab[2][MRC + 1] = {{NULL, ukr_c1, ukr_c2, ukr_c3, ukr_c4},
                                                  {NULL, ukr_cc1, ukr_cc2, ukr_cc3, ukr_cc4}};

/* ---- instruction set selection --------------------------------------------------------------------------- */

typedef struct kernel_set {
    int mr, nr;
    const cnn_cpu_ukr *ukr[2]; /* [A layout: row-major, column-major][mr] */
} kernel_set;

static int isa_selected; /* cnn_cpu_isa; 0 until first use */

static bool isa_supported(cnn_cpu_isa isa) {
    switch (isa) {
    case CNN_CPU_ISA_C: return true;
#if defined(__x86_64__) || defined(__i386__)
    case CNN_CPU_ISA_AVX2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case CNN_CPU_ISA_AVX512: return __builtin_cpu_supports("avx512f");
#endif
    default: return false;
    }
}

bool cnn_cpu_gemm_set_isa(cnn_cpu_isa isa) {
    if (isa == CNN_CPU_ISA_AUTO)
        isa = isa_supported(CNN_CPU_ISA_AVX512) ? CNN_CPU_ISA_AVX512
              : isa_supported(CNN_CPU_ISA_AVX2) ? CNN_CPU_ISA_AVX2
                                                : CNN_CPU_ISA_C;
    if (!isa_supported(isa)) return false;
    __atomic_store_n(&isa_selected, (int)isa, __ATOMIC_RELAXED);
    return true;
}

cnn_cpu_isa cnn_cpu_gemm_isa(void) {
    int isa = __atomic_load_n(&isa_selected, __ATOMIC_RELAXED);
    if (isa == 0) {
        /* CNN_CPU_ISA=c|avx2|avx512 picks the micro-kernels (when this CPU has them): for comparing paths */
        const char *env = cnn_env_get()->cpu_isa;
        cnn_cpu_isa want = CNN_CPU_ISA_AUTO;
        if (strcmp(env, "c") == 0) want = CNN_CPU_ISA_C;
        else if (strcmp(env, "avx2") == 0) want = CNN_CPU_ISA_AVX2;
        else if (strcmp(env, "avx512") == 0) want = CNN_CPU_ISA_AVX512;
        if (want == CNN_CPU_ISA_AUTO || !cnn_cpu_gemm_set_isa(want)) cnn_cpu_gemm_set_isa(CNN_CPU_ISA_AUTO);
        isa = __atomic_load_n(&isa_selected, __ATOMIC_RELAXED);
    }
    return (cnn_cpu_isa)isa;
}

const char *cnn_cpu_isa_name(cnn_cpu_isa isa) {
    switch (isa) {
    case CNN_CPU_ISA_C: return "c";
    case CNN_CPU_ISA_AVX2: return "avx2";
    case CNN_CPU_ISA_AVX512: return "avx512";
    default: return "auto";
    }
}

static kernel_set kernels(void) {
    switch (cnn_cpu_gemm_isa()) {
    case CNN_CPU_ISA_AVX512:
        return (kernel_set){CNN_CPU_AVX512_MR, CNN_CPU_AVX512_NR, {cnn_cpu_ukr_avx512[0], cnn_cpu_ukr_avx512[1]}};
    case CNN_CPU_ISA_AVX2: return (kernel_set){CNN_CPU_AVX2_MR, CNN_CPU_AVX2_NR, {cnn_cpu_ukr_avx2[0], cnn_cpu_ukr_avx2[1]}};
    default: return (kernel_set){MRC, NRC, {ukr_c_tab[0], ukr_c_tab[1]}};
    }
}

/* ---- packing ---------------------------------------------------------------------------------------------- */

/* n floats from s to d: libc for long runs; the rest (B's NR-column segments, a row's run of taps: up to 2 KB) inline
 * in 64-byte moves (gather_row's clones), where a call per copy cost more than the copy (perf-log step 70) */
static inline __attribute__((always_inline)) void copy_floats(float *d, const float *s, int64_t n) {
    if (n >= 512) {
        memcpy(d, s, (size_t)n * sizeof(float));
        return;
    }
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) memcpy(d + i, s + i, 16 * sizeof(float));
    for (; i < n; i++) d[i] = s[i];
}

/* Copy (src != NULL) or zero `run` logical columns starting at column `pos` of a destination cut into
 * segments of `seg` columns placed `seg_stride` floats apart (B panels: seg = NR, seg_stride = kc * NR). */
static inline void put_run(float *dst, int64_t seg, int64_t seg_stride, int64_t pos, const float *src, int64_t run) {
    int64_t si = 0, off = pos; /* segment and column in it; an A row is one segment: no division */
    if (pos + run > seg) si = pos / seg, off = pos - si * seg;
    while (run > 0) {
        const int64_t n = run < seg - off ? run : seg - off;
        float *d = dst + si * seg_stride + off;
        if (src) copy_floats(d, src, n), src += n;
        else memset(d, 0, (size_t)n * sizeof(float));
        run -= n;
        si++, off = 0;
    }
}

/* Where row m's im2col columns from k0 start: the image's first element, the row's place (gi, gj) in the output
 * grid and its first source pixel (ih0, iw0), the tap (ti, tj) and the channel. */
typedef struct im2col_at {
    const float *xn;
    int gi, gj, ih0, iw0, ti, tj;
    int64_t ch;
} im2col_at;
static inline __attribute__((always_inline)) im2col_at im2col_locate(const cnn_cpu_im2col *g, int64_t m, int64_t k0) {
    const int64_t grid = (int64_t)g->gh * g->gw;
    const int64_t n = m / grid, rem = m - n * grid;
    const int i = (int)(rem / g->gw), j = (int)(rem - (int64_t)i * g->gw);
    const int64_t tap = k0 / g->cs;
    const int ti = (int)(tap / g->tw);
    return (im2col_at){.xn = g->x + n * (int64_t)g->hs * g->ws * g->cs, .gi = i, .gj = j, .ih0 = i * g->ah + g->oh,
                       .iw0 = j * g->aw + g->ow, .ti = ti, .tj = (int)(tap - (int64_t)ti * g->tw),
                       .ch = k0 - tap * g->cs};
}
/* `at` moved on to the next row (m + 1) at the same columns: no division */
static inline __attribute__((always_inline)) void im2col_next_row(const cnn_cpu_im2col *g, im2col_at *at) {
    at->iw0 += g->aw;
    if (++at->gj < g->gw) return;
    at->gj = 0, at->iw0 = g->ow, at->ih0 += g->ah;
    if (++at->gi < g->gh) return;
    at->gi = 0, at->ih0 = g->oh, at->xn += (int64_t)g->hs * g->ws * g->cs;
}
/* The run of columns at `at`, at most `limit` long: its source, or NULL where it is padding. Taps along a source
 * row are contiguous pixels, so a run extends across them. */
static inline __attribute__((always_inline)) const float *im2col_run(const cnn_cpu_im2col *g, const im2col_at *at,
                                                                      int64_t limit, int64_t *run) {
    const int ih = at->ih0 + at->ti * g->bh, iw = at->iw0 + at->tj * g->bw;
    int64_t r = g->cs - at->ch;
    const float *src = NULL;
    if (ih >= 0 && ih < g->hs && iw >= 0 && iw < g->ws) {
        if (g->bw == 1)
            for (int t2 = at->tj + 1; t2 < g->tw && iw + (t2 - at->tj) < g->ws && r < limit; t2++) r += g->cs;
        src = at->xn + ((int64_t)ih * g->ws + iw) * g->cs + at->ch;
    }
    *run = r < limit ? r : limit;
    return src;
}

/* Row m, columns [k0, k0 + len) of the im2col matrix of g, into dst (segmented as in put_run). The column's tap
 * (ti, tj) and channel advance with each run instead of being divided out of it: integer divisions were most of
 * this function's time (perf-log step 70). */
__attribute__((target_clones("avx512f", "avx2", "default"))) /* the short copies in 64- or 32-byte moves */
static void gather_row(const cnn_cpu_im2col *g, int64_t m, int64_t k0, int64_t len, float *dst, int64_t seg,
                       int64_t seg_stride) {
    if (len <= 0) return; /* e.g. a dgrad phase without taps (tw = 0) */
    im2col_at at = im2col_locate(g, m, k0);
    for (int64_t pos = 0; pos < len;) {
        int64_t run;
        const float *src = im2col_run(g, &at, len - pos, &run);
        put_run(dst, seg, seg_stride, pos, src, run);
        pos += run;
        for (at.ch += run; at.ch >= g->cs; at.ch -= g->cs)
            if (++at.tj == g->tw) at.tj = 0, at.ti++;
    }
}

/* An operand stored transposed (a column of A contiguous) packs column-major; everything else row-major. */
static inline bool a_colmajor(const cnn_cpu_mat *a) { return !a->g && a->rs == 1 && a->cs != 1; }

/* A panel: rows [m0, m0 + mr), columns [k0, k0 + kc), as the kernels read it. Column-major (a_colmajor(a)):
 * packed into ap[kk * MR + i], rows[0] = ap. Row-major: rows[i] points at row i's kc floats, in the operand itself
 * where they are contiguous there (a dense A; an im2col row inside the image), else packed into ap + i * KC. */
static void a_rows(const cnn_cpu_mat *a, int MR, int64_t m0, int mr, int64_t k0, int64_t kc, float *ap,
                   const float **rows) {
    if (a_colmajor(a)) {
        const float *src = a->p + k0 * a->cs + m0;
        /* constant-size copies inline to a few vector moves; a libc call per 12 floats would dominate */
        if (mr == 12 && MR == 12)
            for (int64_t kk = 0; kk < kc; kk++) memcpy(ap + kk * 12, src + kk * a->cs, 12 * sizeof(float));
        else if (mr == 6 && MR == 6)
            for (int64_t kk = 0; kk < kc; kk++) memcpy(ap + kk * 6, src + kk * a->cs, 6 * sizeof(float));
        else
            for (int64_t kk = 0; kk < kc; kk++)
                for (int i = 0; i < mr; i++) ap[kk * MR + i] = src[kk * a->cs + i];
        rows[0] = ap;
        return;
    }
    const cnn_cpu_im2col *g = a->g;
    im2col_at at = g && kc > 0 ? im2col_locate(g, m0, k0) : (im2col_at){0};
    for (int i = 0; i < mr; i++) {
        float *dst = ap + (int64_t)i * CNN_CPU_KC;
        const float *in_place = NULL;
        if (g && kc > 0) { /* one run of the source (inside the image, the taps side by side) */
            int64_t run;
            const float *src = im2col_run(g, &at, kc, &run);
            if (run == kc) in_place = src;
            im2col_next_row(g, &at);
        } else if (!g && a->cs == 1) {
            in_place = a->p + (m0 + i) * a->rs + k0;
        }
        if (in_place) {
            rows[i] = in_place;
            continue;
        }
        if (g) gather_row(g, m0 + i, k0, kc, dst, kc > 0 ? kc : 1, 0);
        else
            for (int64_t kk = 0; kk < kc; kk++) dst[kk] = a->p[(m0 + i) * a->rs + (k0 + kk) * a->cs];
        rows[i] = dst;
    }
}

/* Rows [kk0, kk1) of a B block (rows [k0, k0 + kc), columns [jc, jc + nc)) into its NR-column panels:
 * panel jp holds bp[jp * kc * NR + kk * NR + j], zero-padded past column N. Row at a time, so an im2col
 * row is decoded once for all panels. */
static void pack_b_rows(const cnn_cpu_mat *b, int64_t k0, int64_t kc, int64_t jc, int64_t nc, int NR, float *bp,
                        int64_t kk0, int64_t kk1) {
    float row[NC_MAX + 64];
    int64_t jpanels = (nc + NR - 1) / NR;
    for (int64_t kk = kk0; kk < kk1; kk++) {
        const float *src;
        if (b->g) { /* straight into the panels */
            gather_row(b->g, k0 + kk, jc, nc, bp + kk * NR, NR, kc * NR);
            if (nc % NR) memset(bp + ((jpanels - 1) * kc + kk) * NR + nc % NR, 0, (size_t)(NR - nc % NR) * sizeof(float));
            continue;
        } else if (b->cs == 1) {
            src = b->p + (k0 + kk) * b->rs + jc;
        } else {
            for (int64_t j = 0; j < nc; j++) row[j] = b->p[(k0 + kk) * b->rs + (jc + j) * b->cs];
            src = row;
        }
        for (int64_t jp = 0; jp < jpanels; jp++) {
            float *dst = bp + (jp * kc + kk) * NR;
            int64_t nr = nc - jp * NR < NR ? nc - jp * NR : NR;
            memcpy(dst, src + jp * NR, (size_t)nr * sizeof(float));
            if (nr < NR) memset(dst + nr, 0, (size_t)(NR - nr) * sizeof(float));
        }
    }
}

/* Ask for rows [m0, m0 + mr), columns [k0, k0 + kc) of a dense row-major A ahead of packing them, so the
 * memory traffic of the next panel overlaps this panel's arithmetic (large-M GEMMs stream A from DRAM). */
static void prefetch_a(const cnn_cpu_mat *a, int64_t m0, int mr, int64_t k0, int64_t kc) {
    if (a->g || a->cs != 1) return;
    for (int i = 0; i < mr; i++) {
        const char *row = (const char *)(a->p + (m0 + i) * a->rs + k0);
        for (int64_t off = 0; off < kc * (int64_t)sizeof(float); off += 64) __builtin_prefetch(row + off, 0, 3);
    }
}

static inline int64_t out_row_offset(const cnn_cpu_out *c, int64_t m) {
    int64_t grid = (int64_t)c->gh * c->gw;
    int64_t n = m / grid, rem = m % grid;
    return n * c->sn + (rem / c->gw) * c->si + (rem % c->gw) * c->sj;
}

/* ---- the driver -------------------------------------------------------------------------------------------- */

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static inline int thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* K blocks of a range of length len: balanced, at most CNN_CPU_KC each; a function of len only. */
static void k_blocking(int64_t len, int64_t *nkb, int64_t *kc_max) {
    *nkb = len > 0 ? ceil_div(len, CNN_CPU_KC) : 1;
    *kc_max = len > 0 ? ceil_div(len, *nkb) : 0;
}

/* The tiles of one A panel (rows m0 .. m0+mr, as a_rows gives them) against B panels [jp0, jp1) of a packed B
 * block whose first column is jc, for one K block. */
static void run_tile_row(const kernel_set *ks, bool acol, const cnn_cpu_out *C, int64_t N, int64_t m0, int mr,
                         int64_t jc, int64_t jp0, int64_t jp1, int64_t kc, const float *const *arows,
                         const float *bblk, bool beta, bool last) {
    float *crow[MR_MAX];
    const float *rrow[MR_MAX];
    int64_t rowoff[MR_MAX];
    const int NR = ks->nr;
    for (int i = 0; i < mr; i++) rowoff[i] = out_row_offset(C, m0 + i);
    for (int64_t jp = jp0; jp < jp1; jp++) {
        int64_t j0 = jc + jp * NR;
        for (int i = 0; i < mr; i++) {
            crow[i] = C->p + rowoff[i] + j0;
            if (C->residual) rrow[i] = C->residual + rowoff[i] + j0;
        }
        cnn_cpu_tile t = {
            .crow = crow,
            .rrow = C->residual ? rrow : NULL,
            .scale = C->scale ? C->scale + j0 : NULL,
            .shift = C->shift ? C->shift + j0 : NULL,
            .nr = (int)(N - j0 < NR ? N - j0 : NR),
            .beta = beta,
            .last = last,
            .relu = C->relu,
        };
        ks->ukr[acol][mr](kc, arows, bblk + (size_t)jp * kc * NR, &t);
    }
}

/* Small-M schedule, one task on one thread: out[:, j0:j1) (+)= A[:, k0:k1) · B[k0:k1, j0:j1), all packing
 * private (ap: every A panel of one K block; bp: one K x NC_MAX block). `beta0` adds the first K block into
 * out; `final` applies the epilogue after the last. */
static void gemm_task_small(const kernel_set *ks, int64_t M, int64_t N, const cnn_cpu_mat *A, const cnn_cpu_mat *B,
                            const cnn_cpu_out *out, bool beta0, bool final, int64_t j0, int64_t j1, int64_t k0,
                            int64_t k1, float *ap, float *bp) {
    const int MR = ks->mr, NR = ks->nr;
    int64_t nkb, kc_max;
    k_blocking(k1 - k0, &nkb, &kc_max);
    int64_t mpanels = ceil_div(M, MR);
    const float *rows[SMALL_M + MR_MAX]; /* every panel's rows (a_rows) for one K block */
    CNN_ASSERT(mpanels * MR <= SMALL_M + MR_MAX);
    for (int64_t jc = j0; jc < j1; jc += NC_MAX) {
        int64_t nc = j1 - jc < NC_MAX ? j1 - jc : NC_MAX, jpanels = ceil_div(nc, NR);
        for (int64_t kb = 0; kb < nkb; kb++) {
            int64_t pc = k0 + kb * kc_max, kc = k1 - pc < kc_max ? k1 - pc : kc_max;
            for (int64_t ip = 0; ip < mpanels; ip++)
                a_rows(A, MR, ip * MR, (int)(M - ip * MR < MR ? M - ip * MR : MR), pc, kc, ap + (size_t)ip * MR * CNN_CPU_KC,
                       rows + ip * MR);
            pack_b_rows(B, pc, kc, jc, nc, NR, bp, 0, kc);
            for (int64_t ip = 0; ip < mpanels; ip++)
                run_tile_row(ks, a_colmajor(A), out, N, ip * MR, (int)(M - ip * MR < MR ? M - ip * MR : MR), jc, 0, jpanels, kc,
                             rows + ip * MR, bp, beta0 || kb > 0, final && kb == nkb - 1);
        }
    }
}

/* Small M (weight gradients, linear layers): K is cut into fixed chunks of KSPLIT (a function of the problem
 * only); tasks = (K chunk, range of N panels) run independently with private packing, each K chunk into its
 * own partial buffer; the partials are then summed in chunk order with the epilogue. No barrier between
 * tasks, so a thread that is descheduled on a shared machine delays nobody. */
static cnn_status gemm_small_m(int threads, const kernel_set *ks, int64_t M, int64_t N, int64_t K,
                               const cnn_cpu_mat *A, const cnn_cpu_mat *B, const cnn_cpu_out *C) {
    const int MR = ks->mr, NR = ks->nr;
    int64_t ks_len = KSPLIT, nks = K > 0 ? ceil_div(K, ks_len) : 1;
    while (nks > 1 && nks * M * N > ((int64_t)16 << 20)) { /* partials stay under 64 MB */
        ks_len *= 2;
        nks = ceil_div(K, ks_len);
    }
    int64_t jpanels = ceil_div(N, NR), want = 4 * (int64_t)threads;
    int64_t nch = nks >= want ? 1 : ceil_div(want, nks);
    if (nch > jpanels) nch = jpanels;
    int64_t per = ceil_div(jpanels, nch);
    nch = ceil_div(jpanels, per);
    if (nks * nch < threads) threads = (int)(nks * nch);

    size_t ap_floats = (size_t)ceil_div(M, MR) * MR * CNN_CPU_KC, bp_floats = (size_t)CNN_CPU_KC * NC_MAX;
    size_t per_thread = (ap_floats + bp_floats + (size_t)N + 15) / 16 * 16; /* keeps every buffer 64-byte aligned */
    float *work = aligned_alloc(64, ((size_t)threads * per_thread * sizeof(float) + 63) / 64 * 64);
    float *part = nks > 1 ? aligned_alloc(64, ((size_t)(nks * M * N) * sizeof(float) + 63) / 64 * 64) : NULL;
    if (!work || (nks > 1 && !part)) {
        free(work);
        free(part);
        return cnn_fail(CNN_E_OOM, "out of host memory for GEMM buffers (%lld x %lld, %lld K chunks)", (long long)M,
                        (long long)N, (long long)nks);
    }
#pragma omp parallel num_threads(threads)
    {
        float *ap = work + (size_t)thread_id() * per_thread, *bp = ap + ap_floats, *row = bp + bp_floats;
        CNN_ASSERT(((uintptr_t)ap | (uintptr_t)bp) % 64 == 0); /* the kernels load B panels aligned */
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < nks * nch; task++) {
            int64_t kq = task / nch, ch = task % nch;
            int64_t k0 = kq * ks_len, k1 = k0 + ks_len < K ? k0 + ks_len : K;
            int64_t j0 = ch * per * NR, j1 = (ch + 1) * per * NR < N ? (ch + 1) * per * NR : N;
            if (nks == 1) {
                gemm_task_small(ks, M, N, A, B, C, C->accumulate, true, j0, j1, k0, k1, ap, bp);
            } else {
                cnn_cpu_out P = {.p = part + (size_t)kq * M * N, .gh = 1, .gw = 1, .sn = N};
                gemm_task_small(ks, M, N, A, B, &P, false, false, j0, j1, k0, k1, ap, bp);
            }
        }
        if (nks > 1) {
            /* C = (C +) sum of the partials in chunk order, then the epilogue: one row per iteration */
#pragma omp for schedule(static)
            for (int64_t i = 0; i < M; i++) {
                for (int64_t j = 0; j < N; j++) row[j] = part[i * N + j];
                for (int64_t kq = 1; kq < nks; kq++) {
                    const float *pp = part + (size_t)kq * M * N + i * N;
                    for (int64_t j = 0; j < N; j++) row[j] += pp[j];
                }
                int64_t off = out_row_offset(C, i);
                float *crow = C->p + off;
                const float *rrow = C->residual ? C->residual + off : NULL;
                cnn_cpu_tile t = {.crow = &crow, .rrow = C->residual ? &rrow : NULL, .scale = C->scale, .shift = C->shift,
                                  .nr = (int)N, .beta = C->accumulate, .last = true, .relu = C->relu};
                cnn_cpu_tile_store(row, (int)N, 1, &t);
            }
        }
    }
    free(work);
    free(part);
    return CNN_OK;
}

/* Large M (convolutions): per N block, B's whole K extent is packed once, shared (the only barrier); then
 * tasks of A panels run independently (dynamic), each streaming its panel through every K block so its C
 * tiles stay in L1. */
static cnn_status gemm_large_m(int threads, const kernel_set *ks, int64_t M, int64_t N, int64_t K,
                               const cnn_cpu_mat *A, const cnn_cpu_mat *B, const cnn_cpu_out *C) {
    const int MR = ks->mr, NR = ks->nr;
    int64_t nkb, kc_max;
    k_blocking(K, &nkb, &kc_max);
    int64_t nc_cap = NC_MAX;
    while (nc_cap > NR && (K > 0 ? K : 1) * nc_cap > ((int64_t)8 << 20)) nc_cap /= 2; /* B block <= 32 MB */
    int64_t njb = ceil_div(N, nc_cap);
    int64_t nc_max = ceil_div(ceil_div(N, njb), NR) * NR;
    int64_t mpanels = ceil_div(M, MR);
    size_t bp_floats = (size_t)(nkb * kc_max) * (size_t)nc_max + 16;
    size_t ap_floats = (size_t)threads * MR * CNN_CPU_KC;
    float *bp = aligned_alloc(64, (bp_floats * sizeof(float) + 63) / 64 * 64);
    float *ap = aligned_alloc(64, (ap_floats * sizeof(float) + 63) / 64 * 64);
    if (!bp || !ap) {
        free(bp);
        free(ap);
        return cnn_fail(CNN_E_OOM, "out of host memory for GEMM packing buffers (%zu + %zu floats)", bp_floats, ap_floats);
    }
#pragma omp parallel num_threads(threads)
    {
        float *ap_own = ap + (size_t)thread_id() * MR * CNN_CPU_KC;
        const float *rows[MR_MAX];
        for (int64_t jc = 0; jc < N; jc += nc_max) {
            int64_t nc = N - jc < nc_max ? N - jc : nc_max, jpanels = ceil_div(nc, NR);
            /* B block kb lives at bp + kb * kc_max * nc_max, its panels kc apart */
            int64_t chunks_per_block = ceil_div(kc_max, 16);
#pragma omp for schedule(static)
            for (int64_t t = 0; t < nkb * chunks_per_block; t++) {
                int64_t kb = t / chunks_per_block, pc = kb * kc_max, kc = pc + kc_max <= K ? kc_max : K - pc;
                int64_t r0 = t % chunks_per_block * 16;
                if (r0 < kc)
                    pack_b_rows(B, pc, kc, jc, nc, NR, bp + (size_t)kb * kc_max * nc_max, r0, r0 + 16 < kc ? r0 + 16 : kc);
            }
#pragma omp for schedule(dynamic, 4)
            for (int64_t ip = 0; ip < mpanels; ip++) {
                int64_t m0 = ip * MR;
                int mr = (int)(M - m0 < MR ? M - m0 : MR);
                for (int64_t kb = 0; kb < nkb; kb++) {
                    int64_t pc = kb * kc_max, kc = K - pc < kc_max ? K - pc : kc_max;
                    a_rows(A, MR, m0, mr, pc, kc, ap_own, rows);
                    if (ip + 1 < mpanels) prefetch_a(A, m0 + MR, (int)(M - m0 - MR < MR ? M - m0 - MR : MR), pc, kc);
                    run_tile_row(ks, a_colmajor(A), C, N, m0, mr, jc, 0, jpanels, kc, rows, bp + (size_t)kb * kc_max * nc_max,
                                 C->accumulate || kb > 0, kb == nkb - 1);
                }
            }
        }
    }
    free(bp);
    free(ap);
    return CNN_OK;
}

cnn_status cnn_cpu_gemm(int threads, int64_t M, int64_t N, int64_t K, const cnn_cpu_mat *A, const cnn_cpu_mat *B,
                        const cnn_cpu_out *C) {
    CNN_ASSERT(M >= 0 && N >= 0 && K >= 0 && threads >= 1);
    if (M == 0 || N == 0) return CNN_OK;
    const kernel_set ks = kernels();
    if (2.0 * (double)M * (double)N * (double)K < 2e5) threads = 1;
    return M <= SMALL_M ? gemm_small_m(threads, &ks, M, N, K, A, B, C) : gemm_large_m(threads, &ks, M, N, K, A, B, C);
}

cnn_status cnn_cpu_sgemm(int threads, int64_t m, int64_t n, int64_t k, const float *a, int64_t rsa, int64_t csa,
                         const float *b, int64_t rsb, int64_t csb, float *c, int64_t ldc, bool accumulate) {
    cnn_cpu_mat A = {.p = a, .rs = rsa, .cs = csa}, B = {.p = b, .rs = rsb, .cs = csb};
    cnn_cpu_out C = {.p = c, .gh = 1, .gw = 1, .sn = ldc, .accumulate = accumulate};
    return cnn_cpu_gemm(threads, m, n, k, &A, &B, &C);
}
