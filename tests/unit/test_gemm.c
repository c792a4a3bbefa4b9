/* test_gemm.c — the CPU backend's packed SGEMM (src/cpu/gemm.c) against a float64 triple loop written here
 * and against src/cpu's reference GEMM, for every micro-kernel this machine runs (portable C, AVX2, AVX-512):
 * awkward sizes around the tile and block edges, all four operand layouts, accumulate, the epilogue
 * (scale/shift/residual/relu), an output scattered over a row grid, K = 0, an im2col operand read in place
 * (bitwise the packed result), and determinism across thread counts. Outputs are poisoned with NaN; fp32 vs
 * fp64 rel-L2 <= 1e-5. CNN_TEST_QUICK=1 trims the sizes.
 */
#include "test.h"

#include "cpu/cpu.h"

static bool quick;
static uint64_t seed_counter = 1;

static float *frand(int64_t n, uint64_t *seed) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    fill_uniform(p, n, ++*seed, -1, 1);
    return p;
}

/* C = A·B (+ C0) in double; A(i,l) = a[i*rsa + l*csa], B(l,j) = b[l*rsb + j*csb] */
static void gemm64(int64_t m, int64_t n, int64_t k, const float *a, int64_t rsa, int64_t csa, const float *b,
                   int64_t rsb, int64_t csb, const float *c0, double *c) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double acc = c0 ? c0[i * n + j] : 0;
            for (int64_t l = 0; l < k; l++) acc += (double)a[i * rsa + l * csa] * b[l * rsb + j * csb];
            c[i * n + j] = acc;
        }
}

static void test_shape(int64_t m, int64_t n, int64_t k, int layout, bool acc, const char *isa) {
    bool at = layout & 1, bt = layout & 2;
    int64_t rsa = at ? 1 : k, csa = at ? m : 1, rsb = bt ? 1 : n, csb = bt ? k : 1;
    float *a = frand(m * k, &seed_counter), *b = frand(k * n, &seed_counter), *c0 = frand(m * n, &seed_counter);
    float *c = malloc((size_t)(m * n > 0 ? m * n : 1) * sizeof(float)), *cr = malloc((size_t)(m * n > 0 ? m * n : 1) * sizeof(float));
    double *want = malloc((size_t)(m * n > 0 ? m * n : 1) * sizeof(double));
    gemm64(m, n, k, a, rsa, csa, b, rsb, csb, acc ? c0 : NULL, want);
    if (acc) memcpy(c, c0, (size_t)(m * n) * sizeof(float)), memcpy(cr, c0, (size_t)(m * n) * sizeof(float));
    else poison(c, m * n), poison(cr, m * n);
    cnn_status st = cnn_cpu_sgemm(2, m, n, k, a, rsa, csa, b, rsb, csb, c, n, acc);
    cnn_cpu_sgemm_ref(m, n, k, a, rsa, csa, b, rsb, csb, cr, n, acc);
    double e = rel_l2(c, want, m * n), er = rel_l2(cr, want, m * n);
    char name[128];
    snprintf(name, sizeof name, "gemm.%s[%lldx%lldx%lld,%c%c%s]", isa, (long long)m, (long long)n, (long long)k,
             at ? 'T' : 'N', bt ? 'T' : 'N', acc ? ",acc" : "");
    check(st == CNN_OK && e <= 1e-5 && er <= 1e-5, name, "rel-L2 %.2e (reference %.2e)", e, er);
    free(a), free(b), free(c0), free(c), free(cr), free(want);
}

/* The epilogue and a scattered output: rows m = (n, i, j) of a (2, 3, 5) grid written into a larger padded
 * buffer; everything outside the grid must stay untouched. */
static void test_epilogue(const char *isa) {
    const int64_t N = 37, K = 70, M = 2 * 3 * 5;
    const int64_t ld = N + 3, si = 7 * ld, sj = ld, sn = 5 * si; /* a (2, 5, 7, ld) buffer */
    int64_t total = 2 * sn;
    float *a = frand(M * K, &seed_counter), *b = frand(K * N, &seed_counter), *scale = frand(N, &seed_counter);
    float *shift = frand(N, &seed_counter), *res = frand(total, &seed_counter), *c = malloc((size_t)total * sizeof(float));
    float *guard = frand(total, &seed_counter);
    double *prod = malloc((size_t)(M * N) * sizeof(double));
    gemm64(M, N, K, a, K, 1, b, N, 1, NULL, prod);
    for (int relu = 0; relu < 2; relu++) {
        memcpy(c, guard, (size_t)total * sizeof(float));
        for (int64_t m = 0; m < M; m++) { /* poison the rows the GEMM owns */
            int64_t off = (m / 15) * sn + (m % 15 / 5) * si + (m % 5) * sj;
            for (int64_t j = 0; j < N; j++) c[off + j] = NAN;
        }
        cnn_cpu_mat A = {.p = a, .rs = K, .cs = 1}, B = {.p = b, .rs = N, .cs = 1};
        cnn_cpu_out C = {.p = c, .gh = 3, .gw = 5, .sn = sn, .si = si, .sj = sj, .scale = scale, .shift = shift,
                         .residual = res, .relu = relu};
        cnn_status st = cnn_cpu_gemm(2, M, N, K, &A, &B, &C);
        double *want = malloc((size_t)total * sizeof(double));
        for (int64_t i = 0; i < total; i++) want[i] = guard[i];
        for (int64_t m = 0; m < M; m++) {
            int64_t off = (m / 15) * sn + (m % 15 / 5) * si + (m % 5) * sj;
            for (int64_t j = 0; j < N; j++) {
                double v = prod[m * N + j] * scale[j] + shift[j] + res[off + j];
                want[off + j] = relu && v < 0 ? 0 : v;
            }
        }
        char name[96];
        snprintf(name, sizeof name, "gemm.%s.epilogue_grid_output%s", isa, relu ? "_relu" : "");
        double e = rel_l2(c, want, total);
        check(st == CNN_OK && e <= 1e-5, name, "rel-L2 %.2e", e);
        free(want);
    }
    free(a), free(b), free(scale), free(shift), free(res), free(c), free(guard), free(prod);
}

static void test_k0(const char *isa) {
    float a[1] = {1}, b[1] = {1}, c[6], sh[3] = {1, -2, 3};
    poison(c, 6);
    cnn_cpu_mat A = {.p = a, .rs = 0, .cs = 1}, B = {.p = b, .rs = 3, .cs = 1};
    cnn_cpu_out C = {.p = c, .gh = 1, .gw = 1, .sn = 3, .shift = sh, .relu = true};
    cnn_status st = cnn_cpu_gemm(1, 2, 3, 0, &A, &B, &C);
    bool good = st == CNN_OK && c[0] == 1 && c[1] == 0 && c[2] == 3 && c[3] == 1 && c[4] == 0 && c[5] == 3;
    float d[6] = {1, 2, 3, 4, 5, 6};
    cnn_cpu_out D = {.p = d, .gh = 1, .gw = 1, .sn = 3, .accumulate = true};
    st = cnn_cpu_gemm(1, 2, 3, 0, &A, &B, &D);
    good &= st == CNN_OK && d[0] == 1 && d[5] == 6;
    char name[64];
    snprintf(name, sizeof name, "gemm.%s.k0", isa);
    check(good, name, NULL);
}

/* An im2col A (a 3x3 conv's forward, pad 1), whose rows the driver reads in place from x where a row's K block is
 * one run of it (perf-log step 111) and gathers elsewhere, against the same matrix materialised column-major
 * (always packed): bitwise equal, each element being one chain of FMAs in k order wherever its row was read
 * from; and against float64. Shapes: the large-M path with K blocks on kernel-row boundaries (C = 64: every
 * inner row in place) and some across them (C = 128), the small-M path with stride 2, and K blocks all across
 * kernel rows (C = 50: every row gathered). */
static void test_im2col_in_place(const char *isa) {
    static const int shapes[][5] = {/* N, H, W, C, stride */ {4, 20, 20, 64, 1}, {4, 21, 19, 128, 1}, {2, 9, 13, 64, 2},
                                    {1, 9, 13, 50, 1}};
    for (int si = 0; si < (int)(sizeof shapes / sizeof shapes[0]); si++) {
        if (quick && si > 0) break;
        const int N = shapes[si][0], H = shapes[si][1], W = shapes[si][2], C = shapes[si][3], st = shapes[si][4];
        const int P = (H + 2 - 3) / st + 1, Q = (W + 2 - 3) / st + 1;
        const int64_t m = (int64_t)N * P * Q, k = 9 * (int64_t)C, n = 40;
        float *x = frand((int64_t)N * H * W * C, &seed_counter), *b = frand(k * n, &seed_counter);
        float *acm = malloc((size_t)(m * k) * sizeof(float)); /* the im2col matrix, column-major: (i, l) at l*m + i */
        for (int64_t i = 0; i < m; i++) {
            const int64_t img = i / ((int64_t)P * Q), pq = i % ((int64_t)P * Q);
            const int p0 = (int)(pq / Q) * st - 1, q0 = (int)(pq % Q) * st - 1;
            for (int64_t l = 0; l < k; l++) {
                const int r = (int)(l / (3 * C)), s = (int)(l / C % 3), c = (int)(l % C), h = p0 + r, w = q0 + s;
                acm[l * m + i] = h < 0 || h >= H || w < 0 || w >= W ? 0.0f : x[((img * H + h) * W + w) * C + c];
            }
        }
        const cnn_cpu_im2col g = {.x = x, .hs = H, .ws = W, .cs = C, .gh = P, .gw = Q, .th = 3, .tw = 3,
                                  .ah = st, .bh = 1, .oh = -1, .aw = st, .bw = 1, .ow = -1};
        const cnn_cpu_mat A = {.g = &g}, Acm = {.p = acm, .rs = 1, .cs = m}, B = {.p = b, .rs = n, .cs = 1};
        float *c = malloc((size_t)(m * n) * sizeof(float)), *ccm = malloc((size_t)(m * n) * sizeof(float));
        double *want = malloc((size_t)(m * n) * sizeof(double));
        poison(c, m * n), poison(ccm, m * n);
        const cnn_cpu_out O = {.p = c, .gh = 1, .gw = 1, .sn = n}, Ocm = {.p = ccm, .gh = 1, .gw = 1, .sn = n};
        cnn_status st1 = cnn_cpu_gemm(2, m, n, k, &A, &B, &O), st2 = cnn_cpu_gemm(2, m, n, k, &Acm, &B, &Ocm);
        gemm64(m, n, k, acm, 1, m, b, n, 1, NULL, want);
        double e = rel_l2(c, want, m * n);
        char name[128];
        snprintf(name, sizeof name, "gemm.%s.im2col_in_place[%dx%dx%dx%d/%d]", isa, N, H, W, C, st);
        check(st1 == CNN_OK && st2 == CNN_OK && !memcmp(c, ccm, (size_t)(m * n) * sizeof(float)) && e <= 1e-5, name,
              "bitwise %s, rel-L2 %.2e", memcmp(c, ccm, (size_t)(m * n) * sizeof(float)) ? "differs" : "equal", e);
        free(x), free(b), free(acm), free(c), free(ccm), free(want);
    }
}

static void test_determinism(void) {
    const int64_t m = 700, n = 300, k = 900;
    float *a = frand(m * k, &seed_counter), *b = frand(k * n, &seed_counter);
    float *c[3];
    for (int t = 0; t < 3; t++) {
        c[t] = malloc((size_t)(m * n) * sizeof(float));
        poison(c[t], m * n);
        cnn_cpu_sgemm(t == 2 ? 1 : 2, m, n, k, a, k, 1, b, n, 1, c[t], n, false);
    }
    check(!memcmp(c[0], c[1], (size_t)(m * n) * 4), "gemm.deterministic_repeat", NULL);
    check(!memcmp(c[0], c[2], (size_t)(m * n) * 4), "gemm.deterministic_1_vs_2_threads", NULL);
    for (int t = 0; t < 3; t++) free(c[t]);
    free(a), free(b);
}

int main(void) {
    quick = getenv("CNN_TEST_QUICK") && atoi(getenv("CNN_TEST_QUICK")) != 0;
    static const int64_t sizes[][3] = {
        {1, 1, 1},     {1, 17, 5},    {5, 1, 13},   {13, 31, 1},  {12, 32, 256}, {11, 33, 257},
        {25, 47, 300}, {6, 16, 513},  {37, 600, 19}, {100, 64, 576},
    };
    static const int64_t big[][3] = {
        {1600, 45, 300}, /* the large-M path with an N edge and 2 K blocks */
        {64, 576, 3000}, /* weight-gradient shaped                           */
        {200, 1100, 70}, /* several N blocks                                 */
    };
    static const cnn_cpu_isa isas[] = {CNN_CPU_ISA_C, CNN_CPU_ISA_AVX2, CNN_CPU_ISA_AVX512};
    for (int ii = 0; ii < 3; ii++) {
        const char *isa = cnn_cpu_isa_name(isas[ii]);
        if (!cnn_cpu_gemm_set_isa(isas[ii])) {
            char name[64];
            snprintf(name, sizeof name, "gemm.%s", isa);
            skip(name, "instruction set not supported on this machine");
            continue;
        }
        for (int s = 0; s < (int)(sizeof sizes / sizeof sizes[0]); s++)
            for (int layout = 0; layout < 4; layout++)
                test_shape(sizes[s][0], sizes[s][1], sizes[s][2], layout, (s + layout) % 2 == 1, isa);
        for (int s = 0; s < (int)(sizeof big / sizeof big[0]); s++) {
            if (quick && s > 0) break;
            test_shape(big[s][0], big[s][1], big[s][2], s, s == 1, isa);
        }
        test_epilogue(isa);
        test_k0(isa);
        test_im2col_in_place(isa);
    }
    cnn_cpu_gemm_set_isa(CNN_CPU_ISA_AUTO);
    test_determinism();
    return test_finish();
}
