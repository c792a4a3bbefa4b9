/* shim.c — an LD_PRELOAD library for the reliability battery (docs/RELIABILITY.md): it kills the process, or
 * fails a call, at a chosen point, so that every such point of a short run can be tried in turn.
 *
 *   SHIM_MATCH=text            files whose path contains text count for the byte and fsync/rename points
 *   SHIM_KILL_AFTER_BYTES=n    write(): after n bytes in all to matching files (a write that crosses n writes
 *                              its part up to n), the process kills itself with SIGKILL (B15)
 *   SHIM_KILL_AT=call:k        SIGKILL just before the k-th `call` of a matching file: fsync (of the file),
 *                              rename (its target), dirfsync (an fsync of any directory): the phases after the data
 *   SHIM_ENOSPC_AFTER_BYTES=n  as SHIM_KILL_AFTER_BYTES, but the write fails with ENOSPC instead (a full disk)
 *   SHIM_FAIL_MALLOC=n         the n-th malloc/calloc/realloc/aligned allocation returns NULL with ENOMEM (B19)
 *   SHIM_FAIL_OPEN=n           the n-th open/openat/fopen fails with EIO (B19)
 *   SHIM_COUNT=path            at exit, append "malloc <calls> open <calls>" to path
 * Counting starts when the library loads. Built with -DSHIM_NO_MALLOC it leaves allocation alone (for an ASan
 * build: preload it with ASAN_OPTIONS=verify_asan_link_order=0). Test infrastructure only (Linux, glibc). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static const char *match, *count_path;
static long long kill_after = -1, enospc_after = -1, fail_malloc = -1, fail_open = -1;
static atomic_llong written, n_malloc, n_open, n_fsync, n_rename, n_dirfsync;
static char kill_call[16];
static long long kill_k = -1;

static long long env_ll(const char *name) {
    const char *v = getenv(name);
    return v && *v ? atoll(v) : -1;
}

static void report(void) {
    FILE *(*real_fopen)(const char *, const char *) = dlsym(RTLD_NEXT, "fopen");
    FILE *f = count_path && real_fopen ? real_fopen(count_path, "a") : NULL;
    if (!f) return;
    fprintf(f, "malloc %lld open %lld\n", (long long)n_malloc, (long long)n_open);
    fclose(f);
}

__attribute__((constructor)) static void init(void) {
    match = getenv("SHIM_MATCH");
    count_path = getenv("SHIM_COUNT");
    kill_after = env_ll("SHIM_KILL_AFTER_BYTES");
    enospc_after = env_ll("SHIM_ENOSPC_AFTER_BYTES");
    fail_malloc = env_ll("SHIM_FAIL_MALLOC");
    fail_open = env_ll("SHIM_FAIL_OPEN");
    const char *k = getenv("SHIM_KILL_AT");
    if (k && strchr(k, ':')) {
        snprintf(kill_call, sizeof kill_call, "%.*s", (int)(strchr(k, ':') - k), k);
        kill_k = atoll(strchr(k, ':') + 1);
    }
    if (count_path) atexit(report);
}

static void die(void) { kill(getpid(), SIGKILL); }

static int fail_now(atomic_llong *counter, long long at) {
    long long n = atomic_fetch_add(counter, 1) + 1;
    return at > 0 && n == at;
}

/* ---- allocation (left out with -DSHIM_NO_MALLOC, for programs built with ASan, which owns malloc) ----------- */
#ifndef SHIM_NO_MALLOC

void *malloc(size_t n) {
    if (fail_now(&n_malloc, fail_malloc)) return errno = ENOMEM, NULL;
    return __libc_malloc(n);
}
void *calloc(size_t a, size_t b) {
    if (fail_now(&n_malloc, fail_malloc)) return errno = ENOMEM, NULL;
    return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n) {
    if (fail_now(&n_malloc, fail_malloc)) return errno = ENOMEM, NULL;
    return __libc_realloc(p, n);
}
void *aligned_alloc(size_t al, size_t n) {
    if (fail_now(&n_malloc, fail_malloc)) return errno = ENOMEM, NULL;
    return __libc_memalign(al, n);
}
int posix_memalign(void **out, size_t al, size_t n) {
    if (fail_now(&n_malloc, fail_malloc)) return ENOMEM;
    void *p = __libc_memalign(al, n);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}

#endif

/* ---- opening files ----------------------------------------------------------------------------------------- */

#define REAL(name) ((__typeof__(&name))dlsym(RTLD_NEXT, #name))

static int open_common(const char *name, int dirfd, const char *path, int flags, va_list ap) {
    mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
    if (fail_now(&n_open, fail_open)) return errno = EIO, -1;
    if (dirfd == -100000) return ((int (*)(const char *, int, ...))dlsym(RTLD_NEXT, name))(path, flags, mode);
    return ((int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, name))(dirfd, path, flags, mode);
}
int open(const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    int r = open_common("open", -100000, path, flags, ap);
    va_end(ap);
    return r;
}
int open64(const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    int r = open_common("open64", -100000, path, flags, ap);
    va_end(ap);
    return r;
}
int openat(int dirfd, const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    int r = open_common("openat", dirfd, path, flags, ap);
    va_end(ap);
    return r;
}
FILE *fopen(const char *path, const char *mode) {
    if (fail_now(&n_open, fail_open)) return errno = EIO, NULL;
    return REAL(fopen)(path, mode);
}
FILE *fopen64(const char *path, const char *mode) {
    if (fail_now(&n_open, fail_open)) return errno = EIO, NULL;
    return ((FILE * (*)(const char *, const char *)) dlsym(RTLD_NEXT, "fopen64"))(path, mode);
}

/* ---- writes and what follows them --------------------------------------------------------------------------- */

static int fd_matches(int fd, bool *is_dir) {
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n < 0) return 0;
    path[n] = 0;
    if (is_dir) {
        struct stat sb;
        *is_dir = fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode);
    }
    return match && strstr(path, match) != NULL;
}

ssize_t write(int fd, const void *buf, size_t count) {
    ssize_t (*real)(int, const void *, size_t) = REAL(write);
    long long limit = kill_after >= 0 ? kill_after : enospc_after;
    if (limit < 0 || count == 0 || !fd_matches(fd, NULL)) return real(fd, buf, count);
    long long before = atomic_fetch_add(&written, (long long)count);
    if (before + (long long)count <= limit) return real(fd, buf, count);
    long long part = limit - before; /* the bytes of this call still allowed */
    if (part > 0) {
        ssize_t w = real(fd, buf, (size_t)part);
        if (kill_after < 0) return w; /* ENOSPC: a short write now, the error on the next call */
    }
    if (kill_after >= 0) die();
    errno = ENOSPC;
    return -1;
}

int fsync(int fd) {
    bool dir = false;
    int m = fd_matches(fd, &dir);
    if (dir && strcmp(kill_call, "dirfsync") == 0 && atomic_fetch_add(&n_dirfsync, 1) + 1 == kill_k) die();
    if (!dir && m && strcmp(kill_call, "fsync") == 0 && atomic_fetch_add(&n_fsync, 1) + 1 == kill_k) die();
    return REAL(fsync)(fd);
}

int rename(const char *from, const char *to) {
    if (match && strstr(to, match) && strcmp(kill_call, "rename") == 0 && atomic_fetch_add(&n_rename, 1) + 1 == kill_k)
        die();
    return REAL(rename)(from, to);
}
