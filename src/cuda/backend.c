/* backend.c -- the CUDA backend's table: creation (driver, device, NVRTC, one stream), memory (cuMemAlloc with
 * accounting and named OOM errors), copies, events, graphs (stream capture -> cuGraphInstantiate -> cuGraphLaunch),
 * the shared workspace and the launch helper. The ops themselves live in one launcher file per family.
 *
 * All device work goes to one non-blocking stream owned by the backend, in issue order; `sync` waits for it.
 * upload/download are synchronous for the host (the host buffer is free to reuse on return). Every kernel
 * reduces in a fixed order, so the backend is always deterministic.
 *
 * The environment it reads comes from cnn_env_get (src/core/env.c, docs/CLI.md): CNN_CACHE_DIR, HOME and
 * XDG_CACHE_HOME (the cache directory), CUDA_HOME (libnvrtc), CNN_SYNC_DEBUG, CNN_CONV_SKIP.
 */
#include "cuda/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MiB (1024.0 * 1024.0)

static cuda_be *enter(cnn_backend *be) {
    cuda_be *cb = cuda_impl(be);
    cuda_bind(cb);
    return cb;
}

/* ---- memory ------------------------------------------------------------------------------------------- */

static cnn_status be_alloc(cnn_backend *be, size_t bytes, const char *what, void **out) {
    cuda_be *cb = enter(be);
    *out = NULL;
    if (bytes == 0) bytes = 256;
    if (cb->n_allocs == cb->cap_allocs) {
        int cap = cb->cap_allocs ? 2 * cb->cap_allocs : 64;
        cuda_alloc *a = realloc(cb->allocs, (size_t)cap * sizeof *a);
        if (!a) return cnn_fail(CNN_E_OOM, "out of host memory for the allocation table");
        cb->allocs = a;
        cb->cap_allocs = cap;
    }
    CUdeviceptr p;
    CNN_TRY(cuda_dev_alloc(cb, bytes, what, &p));
    cb->allocs[cb->n_allocs++] = (cuda_alloc){p, bytes};
    cb->cur_bytes += bytes;
    if (cb->cur_bytes > cb->peak) cb->peak = cb->cur_bytes;
    *out = (void *)(uintptr_t)p;
    return CNN_OK;
}

static void be_free(cnn_backend *be, void *ptr) {
    if (!ptr) return;
    cuda_be *cb = enter(be);
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)ptr;
    for (int i = 0; i < cb->n_allocs; i++) {
        if (cb->allocs[i].ptr != p) continue;
        cb->cur_bytes -= cb->allocs[i].bytes;
        cb->allocs[i] = cb->allocs[--cb->n_allocs];
        CUresult r = cu.MemFree(p);
        if (r != CUDA_SUCCESS) {
            char buf[160];
            cnn_log(0, "cnn: cuMemFree: %s", cuda_error_text(r, buf, sizeof buf));
        }
        return;
    }
    cnn_abort(__FILE__, __LINE__, "cuda free of %p, which alloc() did not return (or was freed already)", ptr);
}

static size_t be_peak_bytes(cnn_backend *be) { return cuda_impl(be)->peak; }

/* Page-locked host memory for staging buffers (uploads from it need no bounce copy in the driver); malloc where
 * the driver lacks cuMemHostAlloc (the CPU emulator). host_free must know which: a small header says. */
#define HOST_HDR 64
static cnn_status be_host_alloc(cnn_backend *be, size_t bytes, const char *what, void **out) {
    cuda_be *cb = enter(be);
    (void)cb;
    void *p = NULL;
    bool pinned = cu.MemHostAlloc && cu.MemFreeHost && cu.MemHostAlloc(&p, bytes + HOST_HDR, 0) == CUDA_SUCCESS;
    if (!pinned && !(p = malloc(bytes + HOST_HDR)))
        return cnn_fail(CNN_E_OOM, "out of host memory for %s (%zu bytes)", what, bytes);
    *(bool *)p = pinned;
    *out = (uint8_t *)p + HOST_HDR;
    return CNN_OK;
}

static void be_host_free(cnn_backend *be, void *ptr) {
    if (!ptr) return;
    cuda_be *cb = enter(be);
    (void)cb;
    uint8_t *p = (uint8_t *)ptr - HOST_HDR;
    if (*(bool *)p) cu.MemFreeHost(p);
    else free(p);
}

/* ---- copies ------------------------------------------------------------------------------------------- */

static cnn_status not_while_capturing(cuda_be *cb, const char *op) {
    if (cb->capturing) return cnn_fail(CNN_E_INVALID, "%s is not allowed while a graph is being recorded", op);
    return CNN_OK;
}

static cnn_status upload_ring_init(cuda_be *cb) {
    const size_t bytes = (size_t)CUDA_UPLOAD_SLOTS * CUDA_UPLOAD_SLOT_BYTES;
    void *p = NULL;
    bool pinned = cu.MemHostAlloc && cu.MemFreeHost && cu.MemHostAlloc(&p, bytes, 0) == CUDA_SUCCESS;
    if (!pinned && !(p = malloc(bytes))) return cnn_fail(CNN_E_OOM, "out of host memory for upload staging");
    for (int i = 0; i < CUDA_UPLOAD_SLOTS; i++) {
        CUresult r = cb->up_ev[i] ? CUDA_SUCCESS : cu.EventCreate(&cb->up_ev[i], CU_EVENT_DISABLE_TIMING);
        if (r != CUDA_SUCCESS) {
            if (pinned) cu.MemFreeHost(p);
            else free(p);
            return cuda_fail(r, "cuEventCreate (upload staging)");
        }
    }
    cb->up_ring = p;
    cb->up_pinned = pinned;
    return CNN_OK;
}

/* An upload of at most one slot (a step's labels, its sample list) is copied into the next staging slot and
 * queued behind the work before it, without waiting for the stream: the caller may reuse src at once, kernels
 * queued after it see the bytes, and a training step needs no host wait. The slot is reused once its event has
 * passed. Larger uploads wait for their copy. */
static cnn_status be_upload(cnn_backend *be, void *dst, const void *src, size_t bytes) {
    cuda_be *cb = enter(be);
    CNN_TRY(not_while_capturing(cb, "upload"));
    if (bytes == 0) return CNN_OK;
    if (bytes <= CUDA_UPLOAD_SLOT_BYTES) {
        if (!cb->up_ring) CNN_TRY(upload_ring_init(cb));
        int s = cb->up_next;
        cb->up_next = (s + 1) % CUDA_UPLOAD_SLOTS;
        if (cb->up_used[s])
            CU_TRY(cu.EventSynchronize(cb->up_ev[s]), "upload (cuEventSynchronize: a kernel or copy before it failed)");
        uint8_t *slot = cb->up_ring + (size_t)s * CUDA_UPLOAD_SLOT_BYTES;
        memcpy(slot, src, bytes);
        CU_TRY(cu.MemcpyHtoDAsync((CUdeviceptr)(uintptr_t)dst, slot, bytes, cb->stream), "upload (cuMemcpyHtoDAsync)");
        CU_TRY(cu.EventRecord(cb->up_ev[s], cb->stream), "upload (cuEventRecord)");
        cb->up_used[s] = true;
        return CNN_OK;
    }
    CU_TRY(cu.MemcpyHtoDAsync((CUdeviceptr)(uintptr_t)dst, src, bytes, cb->stream), "upload (cuMemcpyHtoDAsync)");
    CU_TRY(cu.StreamSynchronize(cb->stream), "upload (cuStreamSynchronize)");
    return CNN_OK;
}

static cnn_status be_download(cnn_backend *be, void *dst, const void *src, size_t bytes) {
    cuda_be *cb = enter(be);
    CNN_TRY(not_while_capturing(cb, "download"));
    if (bytes == 0) return CNN_OK;
    CU_TRY(cu.MemcpyDtoHAsync(dst, (CUdeviceptr)(uintptr_t)src, bytes, cb->stream), "download (cuMemcpyDtoHAsync)");
    CU_TRY(cu.StreamSynchronize(cb->stream), "download (cuStreamSynchronize)");
    return CNN_OK;
}

static cnn_status be_copy(cnn_backend *be, void *dst, const void *src, size_t bytes) {
    cuda_be *cb = enter(be);
    if (bytes == 0 || dst == src) return CNN_OK;
    CU_TRY(cu.MemcpyDtoDAsync((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, bytes, cb->stream),
           "copy (cuMemcpyDtoDAsync)");
    return CNN_OK;
}

static cnn_status be_zero(cnn_backend *be, void *dst, size_t bytes) {
    cuda_be *cb = enter(be);
    if (bytes == 0) return CNN_OK;
    CU_TRY(cu.MemsetD8Async((CUdeviceptr)(uintptr_t)dst, 0, bytes, cb->stream), "zero (cuMemsetD8Async)");
    return CNN_OK;
}

static cnn_status be_sync(cnn_backend *be) {
    cuda_be *cb = enter(be);
    CNN_TRY(not_while_capturing(cb, "sync"));
    CU_TRY(cu.StreamSynchronize(cb->stream), "cuStreamSynchronize (a kernel issued earlier failed)");
    return CNN_OK;
}

/* ---- timing ------------------------------------------------------------------------------------------- */

static cnn_status be_time_begin(cnn_backend *be) {
    cuda_be *cb = enter(be);
    CNN_TRY(not_while_capturing(cb, "time_begin"));
    CU_TRY(cu.EventRecord(cb->ev_begin, cb->stream), "cuEventRecord");
    cb->timing = true;
    return CNN_OK;
}

static cnn_status be_time_end(cnn_backend *be, double *ms) {
    cuda_be *cb = enter(be);
    *ms = 0;
    CNN_TRY(not_while_capturing(cb, "time_end"));
    if (!cb->timing) return cnn_fail(CNN_E_INVALID, "time_end without time_begin");
    cb->timing = false;
    CU_TRY(cu.EventRecord(cb->ev_end, cb->stream), "cuEventRecord");
    CU_TRY(cu.EventSynchronize(cb->ev_end), "cuEventSynchronize (a kernel in the timed region failed)");
    float f = 0;
    CU_TRY(cu.EventElapsedTime(&f, cb->ev_begin, cb->ev_end), "cuEventElapsedTime");
    *ms = f;
    return CNN_OK;
}

static cnn_status be_time_mark(cnn_backend *be, int i) {
    cuda_be *cb = enter(be);
    CNN_TRY(not_while_capturing(cb, "time_mark"));
    if (i < 0 || i >= CNN_TIME_MARKS) return cnn_fail(CNN_E_INVALID, "time mark %d outside 0..%d", i, CNN_TIME_MARKS - 1);
    if (!cb->marks && !(cb->marks = calloc(CNN_TIME_MARKS, sizeof *cb->marks)))
        return cnn_fail(CNN_E_OOM, "out of host memory for the timing marks");
    if (!cb->marks[i]) CU_TRY(cu.EventCreate(&cb->marks[i], CU_EVENT_DEFAULT), "cuEventCreate (time mark)");
    CU_TRY(cu.EventRecord(cb->marks[i], cb->stream), "cuEventRecord (time mark)");
    return CNN_OK;
}

static cnn_status be_time_between(cnn_backend *be, int i, int j, double *ms) {
    cuda_be *cb = enter(be);
    *ms = 0;
    if (i < 0 || j < 0 || i >= CNN_TIME_MARKS || j >= CNN_TIME_MARKS || !cb->marks || !cb->marks[i] || !cb->marks[j])
        return cnn_fail(CNN_E_INVALID, "time_between(%d, %d): no such marks", i, j);
    CU_TRY(cu.EventSynchronize(cb->marks[j]), "cuEventSynchronize (a kernel in the timed region failed)");
    float f = 0;
    CU_TRY(cu.EventElapsedTime(&f, cb->marks[i], cb->marks[j]), "cuEventElapsedTime");
    *ms = f;
    return CNN_OK;
}

/* ---- graphs ------------------------------------------------------------------------------------------- */

static cnn_status be_graph_begin(cnn_backend *be) {
    cuda_be *cb = enter(be);
    if (cb->capturing) return cnn_fail(CNN_E_INVALID, "graph_begin while a graph is already being recorded");
    if (cb->dry_run) return cnn_fail(CNN_E_INVALID, "graph_begin in a dry run");
    /* relaxed: a kernel compiled or a workspace grown during capture is legal (the executor avoids both by
     * running each sequence eagerly once before recording it) */
    CU_TRY(cu.StreamBeginCapture(cb->stream, CU_STREAM_CAPTURE_MODE_RELAXED), "cuStreamBeginCapture");
    cb->capturing = true;
    return CNN_OK;
}

static cnn_status be_graph_end(cnn_backend *be, void **graph) {
    cuda_be *cb = enter(be);
    *graph = NULL;
    if (!cb->capturing) return cnn_fail(CNN_E_INVALID, "graph_end without graph_begin");
    CUgraph g = NULL;
    CUresult r = cu.StreamEndCapture(cb->stream, &g);
    cb->capturing = false;
    if (r != CUDA_SUCCESS) {
        if (g) cu.GraphDestroy(g);
        return cuda_fail(r, "cuStreamEndCapture (an operation in the recorded region was not capturable)");
    }
    CUgraphExec exec = NULL;
    r = cu.GraphInstantiateWithFlags(&exec, g, 0);
    cu.GraphDestroy(g);
    if (r != CUDA_SUCCESS) return cuda_fail(r, "cuGraphInstantiateWithFlags");
    *graph = exec;
    cb->graphs_live++;
    return CNN_OK;
}

static cnn_status be_graph_launch(cnn_backend *be, void *graph) {
    cuda_be *cb = enter(be);
    CNN_ASSERT(graph);
    CNN_TRY(not_while_capturing(cb, "graph_launch"));
    CU_TRY(cu.GraphLaunch((CUgraphExec)graph, cb->stream), "cuGraphLaunch");
    if (cb->sync_debug) CU_TRY(cu.StreamSynchronize(cb->stream), "graph replay failed");
    return CNN_OK;
}

static void be_graph_free(cnn_backend *be, void *graph) {
    if (!graph) return;
    cuda_be *cb = enter(be);
    cb->graphs_live--;
    CUresult r = cu.GraphExecDestroy((CUgraphExec)graph);
    if (r != CUDA_SUCCESS) {
        char buf[160];
        cnn_log(0, "cnn: cuGraphExecDestroy: %s", cuda_error_text(r, buf, sizeof buf));
    }
}

/* ---- hooks ------------------------------------------------------------------------------------------- */

void cnn_cuda_stats_get(cnn_backend *be, cnn_cuda_stats *out) { *out = cuda_impl(be)->stats; }

cnn_status cnn_cuda_mem_info(cnn_backend *be, size_t *free_bytes, size_t *total_bytes) {
    enter(be);
    CU_TRY(cu.MemGetInfo(free_bytes, total_bytes), "cuMemGetInfo");
    return CNN_OK;
}

const char *cnn_cuda_arch(cnn_backend *be) { return cuda_impl(be)->arch; }
const char *cnn_cuda_cache_dir(cnn_backend *be) { return cuda_impl(be)->cache_dir; }
void cnn_cuda_conv_force_config(cnn_backend *be, int cfg) {
    CNN_ASSERT(cfg >= -1 && cfg < cnn_cuda_conv_config_count());
    cuda_impl(be)->conv_force_cfg = cfg;
}
void cnn_cuda_conv_force_grid(cnn_backend *be, int ctas) {
    CNN_ASSERT(ctas >= 0);
    cuda_impl(be)->conv_force_grid = ctas;
}
void cnn_cuda_first_force_config(cnn_backend *be, int cfg) {
    CNN_ASSERT(cfg >= -1 && cfg < cnn_cuda_first_config_count());
    cuda_impl(be)->first_force_cfg = cfg;
}
void cnn_cuda_conv_force_splitk(cnn_backend *be, int splits) {
    CNN_ASSERT(splits >= -1);
    cuda_impl(be)->conv_force_splitk = splits;
}
void cnn_cuda_dgrad_force_way(cnn_backend *be, int way) {
    CNN_ASSERT(way >= -1);
    cuda_impl(be)->dgrad_way = way;
}
void cnn_cuda_bn_force_fused(cnn_backend *be, int mode) {
    CNN_ASSERT(mode >= -1 && mode <= 1);
    cuda_impl(be)->bn_fused = mode;
}
bool cnn_cuda_coop_ok(cnn_backend *be) { return cuda_impl(be)->coop; }
int cnn_cuda_sm_count(cnn_backend *be) { return cuda_impl(be)->sm_count; }
void cnn_cuda_conv_force_winograd(cnn_backend *be, int mode) {
    CNN_ASSERT(mode >= -1 && mode <= 1);
    cuda_impl(be)->winograd = mode;
}

/* ---- creation ----------------------------------------------------------------------------------------- */

static void be_destroy(cnn_backend *be) {
    if (!be) return;
    cuda_be *cb = cuda_impl(be);
    cuda_collect_behind(cb, true); /* what still compiles behind is not needed any more */
    if (cb->ctx) {
        cu.CtxSetCurrent(cb->ctx);
        if (cb->stream) {
            if (cb->capturing) {
                CUgraph g = NULL;
                if (cu.StreamEndCapture(cb->stream, &g) == CUDA_SUCCESS && g) cu.GraphDestroy(g);
            }
            cu.StreamSynchronize(cb->stream);
        }
        for (int i = 0; i < cb->n_mods; i++)
            if (cb->mods[i].mod) cu.ModuleUnload(cb->mods[i].mod);
        if (cb->n_allocs) cnn_log(2, "cnn: cuda backend destroyed with %d buffers still allocated; freeing them", cb->n_allocs);
        for (int i = 0; i < cb->n_allocs; i++) cu.MemFree(cb->allocs[i].ptr);
        for (int i = 0; i < cb->n_retired; i++) cu.MemFree(cb->retired[i]);
        for (int i = 0; i < CUDA_WS_SLOTS; i++)
            if (cb->ws[i]) cu.MemFree(cb->ws[i]);
        if (cb->scratch) cu.MemFree(cb->scratch);
        for (int i = 0; i < CUDA_UPLOAD_SLOTS; i++)
            if (cb->up_ev[i]) cu.EventDestroy(cb->up_ev[i]);
        if (cb->up_ring && cb->up_pinned) cu.MemFreeHost(cb->up_ring);
        else free(cb->up_ring);
        if (cb->ev_begin) cu.EventDestroy(cb->ev_begin);
        if (cb->ev_end) cu.EventDestroy(cb->ev_end);
        for (int i = 0; cb->marks && i < CNN_TIME_MARKS; i++)
            if (cb->marks[i]) cu.EventDestroy(cb->marks[i]);
        if (cb->stream) cu.StreamDestroy(cb->stream);
        cu.DevicePrimaryCtxRelease(cb->dev);
    }
    free(cb->marks);
    free(cb->allocs);
    free(cb->retired);
    free(cb->mods);
    free(cb->dry_ids);
    cuda_tune_free(cb);
    free(cb);
}

static void default_cache_dir(const cnn_env *env, char *buf, size_t cap) {
    if (env->cache_dir_set) {
        snprintf(buf, cap, "%s", env->cache_dir);
        return;
    }
    if (env->xdg_cache_home[0] == '/')
        snprintf(buf, cap, "%.1000s/cnn", env->xdg_cache_home);
    else if (env->home[0])
        snprintf(buf, cap, "%.1000s/.cache/cnn", env->home);
    else
        buf[0] = 0; /* nowhere sensible: no disk cache */
}

static cnn_status create(const cnn_backend_opts *opts, cuda_be *cb) {
    CNN_TRY(cuda_driver_load());
    CUresult r = cu.Init(0);
    if (r != CUDA_SUCCESS) {
        char buf[200];
        return cnn_fail(CNN_E_DEVICE, "no usable GPU: cuInit failed with %s", cuda_error_text(r, buf, sizeof buf));
    }
    CU_TRY(cu.DriverGetVersion(&cb->driver_version), "cuDriverGetVersion");
    int count = 0;
    CU_TRY(cu.DeviceGetCount(&count), "cuDeviceGetCount");
    if (count == 0) return cnn_fail(CNN_E_DEVICE, "no usable GPU: the CUDA driver sees no device");
    if (opts->gpu_index < 0 || opts->gpu_index >= count)
        return cnn_fail(CNN_E_DEVICE, "GPU index %d out of range (%d device%s)", opts->gpu_index, count, count == 1 ? "" : "s");
    CU_TRY(cu.DeviceGet(&cb->dev, opts->gpu_index), "cuDeviceGet");
    CU_TRY(cu.DeviceGetName(cb->pub.device_name, (int)sizeof cb->pub.device_name, cb->dev), "cuDeviceGetName");
    CU_TRY(cu.DeviceGetAttribute(&cb->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, cb->dev), "cuDeviceGetAttribute");
    CU_TRY(cu.DeviceGetAttribute(&cb->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, cb->dev), "cuDeviceGetAttribute");
    CU_TRY(cu.DeviceGetAttribute(&cb->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, cb->dev), "cuDeviceGetAttribute");
    CU_TRY(cu.DeviceGetAttribute(&cb->smem_optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, cb->dev),
           "cuDeviceGetAttribute");
    if (cb->smem_optin < 48 * 1024) cb->smem_optin = 48 * 1024;
    if (cb->cc_major < 7)
        return cnn_fail(CNN_E_UNSUPPORTED, "GPU %s (sm_%d%d) is too old: compute capability 7.0 or newer is needed",
                        cb->pub.device_name, cb->cc_major, cb->cc_minor);

    const cnn_env *env = cnn_env_get();
    CNN_TRY(cnn_cuda_nvrtc_load(env->cuda_home));
    CNN_TRY(cuda_pick_arch(cb->cc_major, cb->cc_minor, cb->arch, sizeof cb->arch));
    cb->n_mods = cuda_program_total();
    cb->mods = calloc((size_t)cb->n_mods, sizeof *cb->mods);
    if (!cb->mods) return cnn_fail(CNN_E_OOM, "out of host memory for the module table");

    if (opts->cache_dir)
        snprintf(cb->cache_dir, sizeof cb->cache_dir, "%s", opts->cache_dir);
    else
        default_cache_dir(env, cb->cache_dir, sizeof cb->cache_dir);
    /* the weights' conversion and the data preparation, which nearly every run launches first, compile behind
     * while the context is created (perf-log step 109) */
    const int first[] = {cuda_program_id(&cuda_family_pointwise, opts->act_dtype, PW_CFG_VEC16),
                         cuda_program_id(&cuda_family_prep, opts->act_dtype, 0)};
    cuda_compile_behind(cb, first, 2);

    CU_TRY(cu.DevicePrimaryCtxRetain(&cb->ctx, cb->dev), "cuDevicePrimaryCtxRetain");
    CU_TRY(cu.CtxSetCurrent(cb->ctx), "cuCtxSetCurrent");
    CU_TRY(cu.StreamCreate(&cb->stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    CU_TRY(cu.EventCreate(&cb->ev_begin, CU_EVENT_DEFAULT), "cuEventCreate");
    CU_TRY(cu.EventCreate(&cb->ev_end, CU_EVENT_DEFAULT), "cuEventCreate");
    CNN_TRY(cuda_dev_alloc(cb, 256, "backend scratch", &cb->scratch));
    CU_TRY(cu.MemsetD8Async(cb->scratch, 0, 256, cb->stream), "cuMemsetD8Async (backend scratch)");
    int coop = 0;
    CU_TRY(cu.DeviceGetAttribute(&coop, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, cb->dev), "cuDeviceGetAttribute");
    cb->coop = coop && cu.LaunchKernelEx;
    CU_TRY(cu.DeviceGetAttribute(&cb->l2_bytes, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, cb->dev), "cuDeviceGetAttribute");
    cb->bn_fused = -1;

    cb->sync_debug = env->sync_debug;
    snprintf(cb->conv_skip, sizeof cb->conv_skip, "%s", env->conv_skip);
    cb->no_tma = !cu.TensorMapEncodeTiled || !cu.TensorMapEncodeIm2col;
    cb->pdl = cu.LaunchKernelEx && cb->cc_major >= 9;
    cb->first_force_cfg = -1;
    cb->allow_tf32 = opts->allow_tf32;
    cb->conv_force_cfg = -1;
    cb->conv_force_splitk = -1;
    cb->dgrad_way = -1;
    cb->wgrad_force_cfg = -1;
    cb->winograd = -1;
    cb->tune = opts->deterministic ? CNN_TUNE_NONE : opts->tune == CNN_TUNE_DEFAULT ? CNN_TUNE_FAST : opts->tune;
    return CNN_OK;
}

cnn_status cnn_cuda_backend_create(const cnn_backend_opts *opts, cnn_backend **out) {
    *out = NULL;
    cnn_dtype dt = opts->act_dtype;
    if (dt != CNN_DTYPE_F32 && dt != CNN_DTYPE_BF16 && dt != CNN_DTYPE_F16)
        return cnn_fail(CNN_E_UNSUPPORTED, "the CUDA backend stores activations as F32, BF16 or F16, not %s",
                        cnn_dtype_name(dt));
    cuda_be *cb = calloc(1, sizeof *cb);
    if (!cb) return cnn_fail(CNN_E_OOM, "out of host memory for the CUDA backend");
    cnn_backend *be = &cb->pub;
    be->impl = cb;
    cnn_status st = create(opts, cb);
    if (st != CNN_OK) {
        be_destroy(be); /* releases whatever was acquired */
        return st;
    }
    be->name = "cuda";
    be->act_dtype = dt;
    be->deterministic = true; /* every reduction has a fixed order */
    be->keeps_masks = true;   /* BN's backward reads the ReLU's bits, max-pool's the argmax (perf-log step 68) */
    be->destroy = be_destroy;
    be->alloc = be_alloc;
    be->free = be_free;
    be->upload = be_upload;
    be->host_alloc = be_host_alloc;
    be->host_free = be_host_free;
    be->download = be_download;
    be->copy = be_copy;
    be->zero = be_zero;
    be->sync = be_sync;
    be->to_act = cuda_to_act;
    be->from_act = cuda_from_act;
    be->conv2d_fprop = cuda_conv2d_fprop;
    be->conv2d_dgrad = cuda_conv2d_dgrad;
    be->conv2d_dgrad_relu = cuda_conv2d_dgrad_relu;
    be->conv2d_wgrad = cuda_conv2d_wgrad;
    be->conv2d_fprop_pool = cuda_conv2d_fprop_pool;
    be->conv2d_pool_fusable = cuda_conv2d_pool_fusable;
    be->conv2d_fprop_pair = cuda_conv2d_fprop_pair;
    be->conv2d_pair_fusable = cuda_conv2d_pair_fusable;
    be->channel_sum = cuda_channel_sum;
    be->channel_sum_rows = cuda_channel_sum_rows;
    be->bn_forward_train = cuda_bn_forward_train;
    be->bn_backward = cuda_bn_backward;
    be->bn_backward_pool = cuda_bn_backward_pool;
    be->bn_pool_fusable = cuda_bn_pool_fusable;
    be->scale_shift = cuda_scale_shift;
    be->relu_forward = cuda_relu_forward;
    be->relu_backward = cuda_relu_backward;
    be->add_forward = cuda_add_forward;
    be->tree_sum = cuda_tree_sum;
    be->pass_backward = cuda_pass_backward;
    be->dropout_forward = cuda_dropout_forward;
    be->dropout_backward = cuda_dropout_backward;
    be->flatten_forward = cuda_flatten_forward;
    be->flatten_backward = cuda_flatten_backward;
    be->pool2d_forward = cuda_pool2d_forward;
    be->pool2d_backward = cuda_pool2d_backward;
    be->linear_forward = cuda_linear_forward;
    be->linear_backward = cuda_linear_backward;
    be->xent_forward_backward = cuda_xent_forward_backward;
    be->prep_images = cuda_prep_images;
    be->resample_images = cuda_resample_images;
    be->jpeg_create = cuda_jpeg_create;
    be->jpeg_decode = cuda_jpeg_decode;
    be->jpeg_fence = cuda_jpeg_fence;
    be->jpeg_free = cuda_jpeg_free;
    be->sgd_update = cuda_sgd_update;
    be->adamw_update = cuda_adamw_update;
    be->count_nonfinite = cuda_count_nonfinite;
    be->guard_step = cuda_guard_step;
    be->time_begin = be_time_begin;
    be->time_end = be_time_end;
    be->time_mark = be_time_mark;
    be->time_between = be_time_between;
    be->graph_begin = be_graph_begin;
    be->graph_end = be_graph_end;
    be->graph_launch = be_graph_launch;
    be->graph_free = be_graph_free;
    be->dry_run_begin = cuda_dry_run_begin;
    be->dry_run_end = cuda_dry_run_end;
    be->peak_bytes = be_peak_bytes;
    cuda_comm_install(be);
    int nv_major, nv_minor;
    cnn_cuda_nvrtc_version(&nv_major, &nv_minor);
    snprintf(be->runtime, sizeof be->runtime, "CUDA driver %d.%d, NVRTC %d.%d, %s, %d SMs", cb->driver_version / 1000,
             cb->driver_version % 1000 / 10, nv_major, nv_minor, cb->arch, cb->sm_count);
    cnn_log(2, "cnn: cuda backend on %s (%s, %d SMs), driver %d.%d, NVRTC %d.%d, %s activations, kernel cache %s%s",
            be->device_name, cb->arch, cb->sm_count, cb->driver_version / 1000, cb->driver_version % 1000 / 10, nv_major,
            nv_minor, cuda_dtype_str(dt), cb->cache_dir[0] ? cb->cache_dir : "off",
            cb->sync_debug ? ", CNN_SYNC_DEBUG on" : "");
    if (cb->no_tma && cb->cc_major == 9)
        cnn_log(1, "cnn: the driver has no tensor-map encoder: no TMA convolution kernels");
    if (cb->conv_skip[0]) cnn_log(1, "cnn: CNN_CONV_SKIP=%s: no convolution rows of those names", cb->conv_skip);
    if (!cb->pdl && cb->cc_major >= 9)
        cnn_log(1, "cnn: the driver has no cuLaunchKernelEx: kernels launched without programmatic serialization");
    if (cb->allow_tf32) cnn_log(2, "cnn: allow_tf32 set: forward convolutions in TF32 on the tensor cores (sm_80+, C %% 4 == 0, K %% 8 == 0); backward passes and linear layers in exact fp32");
    *out = be;
    return CNN_OK;
}
