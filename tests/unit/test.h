/* test.h — the tiny test harness every C test program uses.
 *
 * A test program calls check()/check_rel() for each case; each prints one line
 *     PASS <name> [detail]     FAIL <name>: <detail>     SKIP <name>: <reason>
 * and test_finish() prints "N passed, N failed, N skipped" and returns the exit status (1 if any failed).
 * tests/run.sh counts these lines across all programs. Random inputs come from Philox with a per-case seed:
 * fresh, never zeros, reproducible.
 */
#ifndef CNN_TEST_H
#define CNN_TEST_H

#include "cnn/backend.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_passed, test_failed, test_skipped;

static void check(bool ok, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4), unused));
static void check(bool ok, const char *name, const char *fmt, ...) {
    char detail[512] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(detail, sizeof detail, fmt, ap);
        va_end(ap);
    }
    if (ok) {
        test_passed++;
        printf("PASS %s%s%s\n", name, detail[0] ? " " : "", detail);
    } else {
        test_failed++;
        printf("FAIL %s: %s\n", name, detail[0] ? detail : "check failed");
    }
    fflush(stdout);
}

static void skip(const char *name, const char *reason) __attribute__((unused));
static void skip(const char *name, const char *reason) {
    test_skipped++;
    printf("SKIP %s: %s\n", name, reason);
    fflush(stdout);
}

static int test_finish(void) __attribute__((unused));
static int test_finish(void) {
    printf("%d passed, %d failed, %d skipped\n", test_passed, test_failed, test_skipped);
    return test_failed ? 1 : 0;
}

/* ||a - b|| / ||b|| in double; returns INFINITY if any element of a or b is NaN/Inf. */
static double rel_l2(const float *a, const double *b, int64_t n) __attribute__((unused));
static double rel_l2(const float *a, const double *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) return INFINITY;
        double d = (double)a[i] - b[i];
        num += d * d;
        den += b[i] * b[i];
    }
    if (den == 0) return num == 0 ? 0 : INFINITY;
    return sqrt(num / den);
}

static double rel_l2_f(const float *a, const float *b, int64_t n) __attribute__((unused));
static double rel_l2_f(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) return INFINITY;
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    if (den == 0) return num == 0 ? 0 : INFINITY;
    return sqrt(num / den);
}

/* Uniform in [lo, hi) from (seed, i). */
static float rnd_uniform(uint64_t seed, int64_t i, float lo, float hi) __attribute__((unused));
static float rnd_uniform(uint64_t seed, int64_t i, float lo, float hi) {
    uint32_t r[4];
    cnn_philox(seed, 0x74657374ULL, (uint64_t)i, r);
    return lo + (hi - lo) * cnn_u01(r[0]);
}

static void fill_uniform(float *x, int64_t n, uint64_t seed, float lo, float hi) __attribute__((unused));
static void fill_uniform(float *x, int64_t n, uint64_t seed, float lo, float hi) {
    for (int64_t i = 0; i < n; i++) x[i] = rnd_uniform(seed, i, lo, hi);
}

static void poison(float *x, int64_t n) __attribute__((unused));
static void poison(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = NAN;
}

#endif
