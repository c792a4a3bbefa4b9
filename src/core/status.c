/* status.c — status strings, the thread-local error message, the abort funnel, logging, checked malloc. */
#include "cnn/cnn.h"

#include <errno.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Thread_local char err_msg[1024];
static int log_level = 1;

const char *cnn_status_str(cnn_status s) {
    switch (s) {
    case CNN_OK: return "ok";
    case CNN_E_INVALID: return "invalid argument";
    case CNN_E_IO: return "i/o error";
    case CNN_E_FORMAT: return "corrupt or malformed file";
    case CNN_E_MISMATCH: return "does not match the model";
    case CNN_E_OOM: return "out of memory";
    case CNN_E_UNSUPPORTED: return "unsupported";
    case CNN_E_DEVICE: return "device error";
    case CNN_E_COMPILE: return "kernel compilation failed";
    case CNN_E_NONFINITE: return "non-finite value";
    case CNN_E_INTERRUPTED: return "interrupted";
    case CNN_E_DIST: return "distributed peer failure";
    default: return "unknown status";
    }
}

/* Rewrite msg in place so that it holds no control character: C0 (including newline), DEL and the C1 range
 * encoded as UTF-8 (0xC2 0x80..0x9F) become "\xHH" (cut at the buffer's end, never mid-escape). */
static void sanitize(char *msg, size_t cap) {
    char out[sizeof err_msg];
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)msg; *p && o + 1 < sizeof out; p++) {
        bool c1 = p[0] == 0xC2 && p[1] >= 0x80 && p[1] <= 0x9F;
        if (*p < 0x20 || *p == 0x7F || c1) {
            if (o + 4 >= sizeof out) break;
            unsigned v = c1 ? p[1] : *p;
            snprintf(out + o, 5, "\\x%02X", v);
            o += 4;
            if (c1) p++;
        } else {
            out[o++] = (char)*p;
        }
    }
    out[o] = 0;
    snprintf(msg, cap, "%s", out);
}

cnn_status cnn_fail(cnn_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_msg, sizeof err_msg, fmt, ap);
    va_end(ap);
    sanitize(err_msg, sizeof err_msg);
    return s;
}

cnn_status cnn_error_prefix(cnn_status s, const char *fmt, ...) {
    char msg[2 * sizeof err_msg];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof err_msg, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof err_msg) n = (int)sizeof err_msg - 1;
    snprintf(msg + n, sizeof msg - (size_t)n, ": %s", err_msg[0] ? err_msg : cnn_status_str(s));
    size_t len = strlen(msg);
    if (len >= sizeof err_msg) len = sizeof err_msg - 1;
    memcpy(err_msg, msg, len);
    err_msg[len] = 0;
    sanitize(err_msg, sizeof err_msg);
    return s;
}

const char *cnn_error_msg(void) { return err_msg; }
void cnn_error_clear(void) { err_msg[0] = 0; }

void cnn_abort(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "cnn: internal error at %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    abort();
}

void cnn_log_set_level(int level) { log_level = level; }
int cnn_log_level(void) { return log_level; }

void cnn_log(int level, const char *fmt, ...) {
    if (level > log_level) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

void *cnn_malloc(size_t bytes, const char *what) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) cnn_fail(CNN_E_OOM, "out of host memory allocating %zu bytes for %s", bytes, what);
    return p;
}

void *cnn_calloc(size_t count, size_t size, const char *what) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) cnn_fail(CNN_E_OOM, "out of host memory allocating %zu x %zu bytes for %s", count, size, what);
    return p;
}

double cnn_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void cnn_sleep_ms(int ms) {
    struct timespec left = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (ms > 0 && nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
}
