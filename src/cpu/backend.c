/* backend.c — the CPU backend's table: host memory, copies, timing, and the op entry points of the other
 * files in src/cpu.
 *
 * Memory is ordinary host memory, 64-byte aligned; "device" pointers are host pointers, so upload, download
 * and copy are memcpy and sync does nothing. Activations are float32 only (act_dtype F32). Every parallel
 * region uses the thread count fixed at creation; results never depend on it (see cpu.h). Graphs are not
 * supported (NULL entries).
 */
#ifdef _OPENMP
#define CNN_HAVE_OPENMP_STR "OpenMP"
#else
#define CNN_HAVE_OPENMP_STR "no OpenMP"
#endif
#include "cpu/cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Each allocation carries a 64-byte header holding its size, so free() can keep live/peak bytes. */
#define HDR 64

static cnn_status cpu_alloc(cnn_backend *be, size_t bytes, const char *what, void **out) {
    cnn_cpu *cpu = be->impl;
    *out = NULL;
    uint64_t total;
    if (!cnn_add_ok(bytes, HDR + 63, &total) || total > SIZE_MAX)
        return cnn_fail(CNN_E_OOM, "allocation of %zu bytes for %s is too large", bytes, what ? what : "?");
    total = total / 64 * 64;
    char *p = aligned_alloc(64, (size_t)total);
    if (!p) return cnn_fail(CNN_E_OOM, "out of host memory allocating %zu bytes for %s", bytes, what ? what : "?");
    memcpy(p, &bytes, sizeof bytes);
    size_t live = __atomic_add_fetch(&cpu->live_bytes, bytes, __ATOMIC_RELAXED);
    size_t peak = __atomic_load_n(&cpu->peak, __ATOMIC_RELAXED);
    while (live > peak && !__atomic_compare_exchange_n(&cpu->peak, &peak, live, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    *out = p + HDR;
    return CNN_OK;
}

static void cpu_free(cnn_backend *be, void *ptr) {
    if (!ptr) return;
    cnn_cpu *cpu = be->impl;
    char *p = (char *)ptr - HDR;
    size_t bytes;
    memcpy(&bytes, p, sizeof bytes);
    __atomic_sub_fetch(&cpu->live_bytes, bytes, __ATOMIC_RELAXED);
    free(p);
}

static size_t cpu_peak_bytes(cnn_backend *be) { return __atomic_load_n(&((cnn_cpu *)be->impl)->peak, __ATOMIC_RELAXED); }

static cnn_status cpu_memcpy(cnn_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes && dst != src) memmove(dst, src, bytes);
    return CNN_OK;
}

static cnn_status cpu_zero(cnn_backend *be, void *dst, size_t bytes) {
    (void)be;
    if (bytes) memset(dst, 0, bytes);
    return CNN_OK;
}

static cnn_status cpu_sync(cnn_backend *be) {
    (void)be;
    return CNN_OK;
}

static cnn_status cpu_to_act(cnn_backend *be, int64_t count, const float *src, void *dst) {
    CNN_ASSERT(count >= 0);
    return cpu_memcpy(be, dst, src, (size_t)count * sizeof(float));
}

static cnn_status cpu_from_act(cnn_backend *be, int64_t count, const void *src, float *dst) {
    CNN_ASSERT(count >= 0);
    return cpu_memcpy(be, dst, src, (size_t)count * sizeof(float));
}

static cnn_status cpu_time_begin(cnn_backend *be) {
    ((cnn_cpu *)be->impl)->t_begin = cnn_now();
    return CNN_OK;
}

static cnn_status cpu_time_end(cnn_backend *be, double *ms) {
    *ms = (cnn_now() - ((cnn_cpu *)be->impl)->t_begin) * 1e3;
    return CNN_OK;
}

static cnn_status cpu_time_mark(cnn_backend *be, int i) {
    cnn_cpu *c = be->impl;
    if (i < 0 || i >= CNN_TIME_MARKS) return cnn_fail(CNN_E_INVALID, "time mark %d outside 0..%d", i, CNN_TIME_MARKS - 1);
    if (!c->marks && !(c->marks = calloc(CNN_TIME_MARKS, sizeof *c->marks)))
        return cnn_fail(CNN_E_OOM, "out of host memory for the timing marks");
    c->marks[i] = cnn_now(); /* the work issued so far is done: this backend is synchronous */
    return CNN_OK;
}

static cnn_status cpu_time_between(cnn_backend *be, int i, int j, double *ms) {
    cnn_cpu *c = be->impl;
    *ms = 0;
    if (i < 0 || j < 0 || i >= CNN_TIME_MARKS || j >= CNN_TIME_MARKS || !c->marks)
        return cnn_fail(CNN_E_INVALID, "time_between(%d, %d): no such marks", i, j);
    *ms = (c->marks[j] - c->marks[i]) * 1e3;
    return CNN_OK;
}

static void cpu_destroy(cnn_backend *be) {
    if (!be) return;
    if (be->impl) free(((cnn_cpu *)be->impl)->marks);
    free(be->impl);
    free(be);
}

/* "AMD EPYC 7B13" from /proc/cpuinfo, or "unknown CPU". */
static void cpu_model(char *buf, size_t cap) {
    snprintf(buf, cap, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        char *v = strchr(line, ':');
        if (!v) break;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        size_t n = strcspn(v, "\n");
        while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t')) n--;
        if (n > 0) snprintf(buf, cap, "%.*s", (int)n, v);
        break;
    }
    fclose(f);
}

cnn_status cnn_cpu_backend_create(int threads, cnn_backend **out) {
    *out = NULL;
    if (threads < 0) return cnn_fail(CNN_E_INVALID, "CPU thread count %d is negative", threads);
#ifdef _OPENMP
    if (threads == 0) threads = omp_get_max_threads();
#else
    threads = 1;
#endif
    if (threads < 1) threads = 1;
    cnn_backend *be = cnn_calloc(1, sizeof *be, "the CPU backend");
    cnn_cpu *cpu = cnn_calloc(1, sizeof *cpu, "the CPU backend");
    if (!be || !cpu) {
        free(be);
        free(cpu);
        return CNN_E_OOM;
    }
    cpu->threads = threads;
    be->impl = cpu;
    be->name = "cpu";
    char model[80];
    cpu_model(model, sizeof model);
    snprintf(be->device_name, sizeof be->device_name, "CPU: %s (%d thread%s, %s kernels)", model, threads,
             threads == 1 ? "" : "s", cnn_cpu_isa_name(cnn_cpu_gemm_isa()));
    snprintf(be->runtime, sizeof be->runtime, "%s, %d thread%s", CNN_HAVE_OPENMP_STR, threads, threads == 1 ? "" : "s");
    be->act_dtype = CNN_DTYPE_F32;
    be->deterministic = true;

    be->destroy = cpu_destroy;
    be->alloc = cpu_alloc;
    be->free = cpu_free;
    be->upload = cpu_memcpy;
    be->download = cpu_memcpy;
    be->copy = cpu_memcpy;
    be->zero = cpu_zero;
    be->sync = cpu_sync;
    be->to_act = cpu_to_act;
    be->from_act = cpu_from_act;

    be->conv2d_fprop = cnn_cpu_op_conv2d_fprop;
    be->conv2d_fprop_pair = cnn_cpu_op_conv2d_fprop_pair;
    be->conv2d_pair_fusable = cnn_cpu_op_conv2d_pair_fusable;
    be->conv2d_dgrad = cnn_cpu_op_conv2d_dgrad;
    be->conv2d_dgrad_relu = cnn_cpu_op_conv2d_dgrad_relu;
    be->conv2d_wgrad = cnn_cpu_op_conv2d_wgrad;
    be->channel_sum = cnn_cpu_op_channel_sum;
    be->bn_forward_train = cnn_cpu_op_bn_forward_train;
    be->bn_backward = cnn_cpu_op_bn_backward;
    be->scale_shift = cnn_cpu_op_scale_shift;
    be->relu_forward = cnn_cpu_op_relu_forward;
    be->relu_backward = cnn_cpu_op_relu_backward;
    be->add_forward = cnn_cpu_op_add_forward;
    be->pass_backward = cnn_cpu_op_pass_backward;
    be->dropout_forward = cnn_cpu_op_dropout_forward;
    be->dropout_backward = cnn_cpu_op_dropout_backward;
    be->flatten_forward = cnn_cpu_op_flatten_forward;
    be->flatten_backward = cnn_cpu_op_flatten_backward;
    be->pool2d_forward = cnn_cpu_op_pool2d_forward;
    be->pool2d_backward = cnn_cpu_op_pool2d_backward;
    be->linear_forward = cnn_cpu_op_linear_forward;
    be->linear_backward = cnn_cpu_op_linear_backward;
    be->xent_forward_backward = cnn_cpu_op_xent_forward_backward;
    be->prep_images = cnn_cpu_op_prep_images;
    be->resample_images = cnn_cpu_op_resample_images;
    be->sgd_update = cnn_cpu_op_sgd_update;
    be->adamw_update = cnn_cpu_op_adamw_update;
    be->count_nonfinite = cnn_cpu_op_count_nonfinite;
    be->tree_sum = cnn_cpu_op_tree_sum;
    be->guard_step = cnn_cpu_op_guard_step;
    be->time_begin = cpu_time_begin;
    be->time_end = cpu_time_end;
    be->time_mark = cpu_time_mark;
    be->time_between = cpu_time_between;
    be->graph_begin = NULL;
    be->graph_end = NULL;
    be->graph_launch = NULL;
    be->graph_free = NULL;
    be->peak_bytes = cpu_peak_bytes;
    *out = be;
    return CNN_OK;
}
