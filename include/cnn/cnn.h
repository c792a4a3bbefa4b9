/* cnn.h — the engine's base: version, status codes, error context and the abort funnel.
 *
 * Two tiers of errors:
 *   - what can fail at run time (a file, a shape from a file, memory, a device, a compiler) returns a
 *     cnn_status and records a one-line message with its context:
 *         if (n > cap) return cnn_fail(CNN_E_FORMAT, "%s: header length %llu past end of file", path, n);
 *     the caller may add context in front with cnn_error_prefix(); the CLI prints cnn_error_msg().
 *   - a broken invariant (a bug) goes through CNN_ASSERT / cnn_abort, which print file:line and abort.
 *
 * Every other public header includes this one.
 */
#ifndef CNN_CNN_H
#define CNN_CNN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CNN_VERSION "0.1.0"

typedef enum cnn_status {
    CNN_OK = 0,
    CNN_E_INVALID,     /* a bad argument or value (usage error at the CLI)            */
    CNN_E_IO,          /* open/read/write/fsync/rename failed                          */
    CNN_E_FORMAT,      /* a file is corrupt, truncated or not what it claims           */
    CNN_E_MISMATCH,    /* a file is well formed but does not fit (name, shape, dtype)   */
    CNN_E_OOM,         /* host or device memory exhausted                              */
    CNN_E_UNSUPPORTED, /* valid request this build or device cannot do                 */
    CNN_E_DEVICE,      /* a CUDA driver error                                           */
    CNN_E_COMPILE,     /* NVRTC could not compile a kernel                              */
    CNN_E_NONFINITE,   /* NaN or Inf where a finite value is required                  */
    CNN_E_INTERRUPTED, /* stopped by a signal (SIGINT/SIGTERM) after saving its state      */
    CNN_E_DIST,        /* a peer process of a multi-GPU run failed, stalled or never came   */
    CNN_E_COUNT
} cnn_status;

const char *cnn_status_str(cnn_status s);

/* Record a formatted message for status s (thread-local) and return s. The message is kept on one line and
 * harmless to print: control characters (C0, DEL, C1 as UTF-8) that a file put into it, through a tensor name
 * say, are written as \xHH, so no newline or terminal escape sequence reaches stderr. */
cnn_status cnn_fail(cnn_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Put "prefix: " in front of the current message (e.g. the file or layer being handled); returns s. */
cnn_status cnn_error_prefix(cnn_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The last message recorded on this thread ("" when none). */
const char *cnn_error_msg(void);
void cnn_error_clear(void);

/* Propagate a failing status unchanged. */
#define CNN_TRY(expr)                                                                          \
    do {                                                                                       \
        cnn_status cnn_try_s_ = (expr);                                                        \
        if (cnn_try_s_ != CNN_OK) return cnn_try_s_;                                           \
    } while (0)

/* The abort funnel: every broken invariant ends here. */
_Noreturn void cnn_abort(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define CNN_ASSERT(expr)                                                                       \
    do {                                                                                       \
        if (!(expr)) cnn_abort(__FILE__, __LINE__, "assertion failed: %s", #expr);             \
    } while (0)

/* Logging to stderr. Level 0 = errors only, 1 = notices (default), 2 = verbose. */
void cnn_log_set_level(int level);
int cnn_log_level(void);
void cnn_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The environment variables the library reads: here, once per process (src/core/env.c), and nowhere else;
 * docs/CLI.md lists each with its reason. Strings are "" where unset. */
typedef struct cnn_env {
    char cache_dir[1024];      /* CNN_CACHE_DIR: the GPU kernel and tuning cache (when --cache-dir is not given) */
    bool cache_dir_set;        /* CNN_CACHE_DIR is set (even to "": no disk cache)                               */
    char xdg_cache_home[1024]; /* XDG_CACHE_HOME, HOME: where the default cache directory is                     */
    char home[1024];
    char cuda_home[1024];      /* CUDA_HOME: where else to look for libnvrtc                                     */
    int compile_threads;       /* CNN_COMPILE_THREADS: compile worker processes (0: the default) */
    bool sync_debug;           /* CNN_SYNC_DEBUG: synchronise and check after every GPU launch                   */
    char conv_skip[128];       /* CNN_CONV_SKIP=a,b: the A/B mechanism, conv rows whose names contain a or b are
                                * left out of every choice                                                        */
    char cpu_isa[16];          /* CNN_CPU_ISA: the CPU GEMM micro-kernels (c, avx2, avx512)                      */
    /* torchrun's variables, as given (dist.c parses them): a worker of a multi-GPU run */
    char rank[16], world_size[16], local_rank[16], master_addr[256], master_port[16];
    bool agent_store;          /* TORCHELASTIC_USE_AGENT_STORE=True: torchrun's agent holds MASTER_PORT            */
    char cuda_visible[256];    /* CUDA_VISIBLE_DEVICES: `--gpus 0,2` maps its ordinals through it                */
} cnn_env;
const cnn_env *cnn_env_get(void);

/* Checked host allocation: returns NULL and records CNN_E_OOM with `what` on failure. */
void *cnn_malloc(size_t bytes, const char *what);
void *cnn_calloc(size_t count, size_t size, const char *what);

/* Overflow-checked size arithmetic: false when the result does not fit. */
static inline bool cnn_mul_ok(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool cnn_add_ok(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

/* Wall-clock seconds from a monotonic clock. */
double cnn_now(void);
/* Sleep the calling thread ms milliseconds (resumed after a signal until the time is up). */
void cnn_sleep_ms(int ms);

#endif
