/* launch.c -- what every launcher of the CUDA backend uses, below all of them: binding the context, launching a
 * kernel (checked; with programmatic stream serialization on sm_90+; synchronised and checked again under
 * CNN_SYNC_DEBUG; nothing in a dry run), the occupancy of a kernel, device allocation with named OOM errors, and
 * the workspace slots.
 */
#include "cuda/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MiB (1024.0 * 1024.0)

/* A failure here (a broken context) surfaces as the error of the next driver call, with its name. */
void cuda_bind(cuda_be *cb) {
    CUcontext cur = NULL;
    if (cu.CtxGetCurrent(&cur) != CUDA_SUCCESS || cur != cb->ctx) cu.CtxSetCurrent(cb->ctx);
}

unsigned cuda_grid_1d(const cuda_be *cb, long long work, int threads) {
    long long blocks = (work + threads - 1) / threads;
    long long cap = (long long)cb->sm_count * 16;
    if (blocks > cap) blocks = cap;
    return blocks < 1 ? 1u : (unsigned)blocks;
}

void cuda_fast_divisor(int d, int *mul, int *shr) {
    CNN_ASSERT(d >= 1);
    int l = 0;
    while ((1LL << l) < d) l++;
    *mul = d == 1 ? 0 : (int)(unsigned)(((1ULL << (31 + l)) + (unsigned long long)d - 1) / (unsigned long long)d);
    *shr = d == 1 ? 0 : l - 1;
}

cnn_status cuda_launch(cuda_be *cb, CUfunction f, const char *what, unsigned gx, unsigned gy, unsigned gz,
                       unsigned bx, unsigned by, void *args) {
    return cuda_launch_smem(cb, f, what, gx, gy, gz, bx, by, 0, args);
}

/* over 48 KB of dynamic shared memory a function must opt in first */
static cnn_status smem_opt_in(cuda_be *cb, CUfunction f, const char *what, unsigned smem) {
    if (smem <= 48u * 1024u) return CNN_OK;
    if (smem > (unsigned)cb->smem_optin)
        return cnn_fail(CNN_E_UNSUPPORTED, "%s needs %u bytes of shared memory per block; this GPU allows %d", what,
                        smem, cb->smem_optin);
    CUresult ra = cu.FuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem);
    if (ra != CUDA_SUCCESS) {
        char msg[256];
        snprintf(msg, sizeof msg, "cuFuncSetAttribute(%u bytes of dynamic shared memory) for %s", smem, what);
        return cuda_fail(ra, msg);
    }
    return CNN_OK;
}

cnn_status cuda_blocks_per_sm(cuda_be *cb, CUfunction f, const char *what, unsigned threads, unsigned smem, int *out) {
    if (!f && cb->dry_run) return *out = 1, CNN_OK; /* not compiled yet: a grid the dry run does not launch */
    CNN_TRY(smem_opt_in(cb, f, what, smem));
    int n = 0;
    CUresult r = cu.OccupancyMaxActiveBlocksPerMultiprocessor(&n, f, (int)threads, (size_t)smem);
    if (r != CUDA_SUCCESS) {
        char msg[256];
        snprintf(msg, sizeof msg, "cuOccupancyMaxActiveBlocksPerMultiprocessor for %s", what);
        return cuda_fail(r, msg);
    }
    *out = n > 0 ? n : 1;
    return CNN_OK;
}

/* cuLaunchKernelEx on the backend's stream with one launch attribute */
static CUresult launch_with(cuda_be *cb, CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                            unsigned smem, CUlaunchAttribute attr, void **params) {
    CUlaunchConfig lc;
    memset(&lc, 0, sizeof lc);
    lc.gridDimX = gx, lc.gridDimY = gy, lc.gridDimZ = gz, lc.blockDimX = bx, lc.blockDimY = by, lc.blockDimZ = 1;
    lc.sharedMemBytes = smem, lc.hStream = cb->stream, lc.attrs = &attr, lc.numAttrs = 1;
    return cu.LaunchKernelEx(&lc, f, params, NULL);
}

cnn_status cuda_launch_smem(cuda_be *cb, CUfunction f, const char *what, unsigned gx, unsigned gy, unsigned gz,
                            unsigned bx, unsigned by, unsigned smem, void *args) {
    CNN_ASSERT(gx >= 1 && gx <= 0x7fffffffu && gy >= 1 && gy <= 65535 && gz >= 1 && gz <= 65535);
    CNN_ASSERT(bx >= 1 && by >= 1 && bx * by <= 1024);
    if (cb->dry_run) return CNN_OK;
    CNN_TRY(smem_opt_in(cb, f, what, smem));
    void *params[1] = {args};
    CUresult r;
    if (cb->pdl) { /* every kernel starts with pdl_enter(): it reads nothing before the previous one has finished */
        CUlaunchAttribute attr;
        memset(&attr, 0, sizeof attr);
        attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        r = launch_with(cb, f, gx, gy, gz, bx, by, smem, attr, params);
    } else {
        r = cu.LaunchKernel(f, gx, gy, gz, bx, by, 1, smem, cb->stream, params, NULL);
    }
    if (r != CUDA_SUCCESS) {
        char msg[256];
        snprintf(msg, sizeof msg, "launch of %s (grid %u x %u x %u, block %u x %u)", what, gx, gy, gz, bx, by);
        return cuda_fail(r, msg);
    }
    cb->stats.launches++;
    if (cb->sync_debug && !cb->capturing) {
        r = cu.StreamSynchronize(cb->stream);
        if (r != CUDA_SUCCESS) {
            char msg[256];
            snprintf(msg, sizeof msg, "kernel %s (grid %u x %u x %u, block %u x %u) failed", what, gx, gy, gz, bx, by);
            return cuda_fail(r, msg);
        }
    }
    return CNN_OK;
}

cnn_status cuda_launch_cooperative(cuda_be *cb, CUfunction f, const char *what, unsigned gx, unsigned gy, unsigned bx,
                                   void *args) {
    CNN_ASSERT(cb->coop && gx >= 1 && gy >= 1 && gy <= 65535 && bx >= 1 && bx <= 1024);
    if (cb->dry_run) return CNN_OK;
    void *params[1] = {args};
    CUlaunchAttribute attr;
    memset(&attr, 0, sizeof attr);
    attr.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attr.value.cooperative = 1;
    CUresult r = launch_with(cb, f, gx, gy, 1, bx, 1, 0, attr, params);
    if (r == CUDA_SUCCESS) cb->stats.launches++;
    if (r == CUDA_SUCCESS && cb->sync_debug && !cb->capturing) r = cu.StreamSynchronize(cb->stream);
    if (r != CUDA_SUCCESS) {
        char msg[256];
        snprintf(msg, sizeof msg, "cooperative kernel %s (grid %u x %u, block %u)", what, gx, gy, bx);
        return cuda_fail(r, msg);
    }
    return CNN_OK;
}

cnn_status cuda_launch_on(cuda_be *cb, CUstream stream, CUfunction f, const char *what, unsigned gx, unsigned bx,
                          void *args) {
    CNN_ASSERT(gx >= 1 && gx <= 0x7fffffffu && bx >= 1 && bx <= 1024);
    if (cb->dry_run) return CNN_OK;
    void *params[1] = {args};
    CUresult r = cu.LaunchKernel(f, gx, 1, 1, bx, 1, 1, 0, stream, params, NULL);
    if (r == CUDA_SUCCESS) cb->stats.launches++;
    if (r == CUDA_SUCCESS && cb->sync_debug && !cb->capturing) r = cu.StreamSynchronize(stream);
    if (r != CUDA_SUCCESS) {
        char msg[256];
        snprintf(msg, sizeof msg, "kernel %s (grid %u, block %u, on a side stream)", what, gx, bx);
        return cuda_fail(r, msg);
    }
    return CNN_OK;
}

bool cuda_conv_skipped(const cuda_be *cb, const char *name) {
    for (const char *p = cb->conv_skip; *p;) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        char part[sizeof cb->conv_skip];
        memcpy(part, p, len);
        part[len] = 0;
        if (len && strstr(name, part)) return true;
        p += len + (e ? 1 : 0);
    }
    return false;
}

/* ---- memory ------------------------------------------------------------------------------------------- */

static cnn_status oom(cuda_be *cb, size_t bytes, const char *what) {
    size_t fr = 0, tot = 0;
    cu.MemGetInfo(&fr, &tot);
    return cnn_fail(CNN_E_OOM, "out of GPU memory allocating %s: %zu bytes (%.1f MiB); %.1f MiB free of %.1f MiB",
                    what ? what : "a buffer", bytes, bytes / MiB, fr / MiB, tot / MiB);
}

cnn_status cuda_dev_alloc(cuda_be *cb, size_t bytes, const char *what, CUdeviceptr *out) {
    *out = 0;
    size_t fr = 0, tot = 0;
    CU_TRY(cu.MemGetInfo(&fr, &tot), "cuMemGetInfo");
    if (bytes > tot) return oom(cb, bytes, what);
    CUresult r = cu.MemAlloc(out, bytes);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) return oom(cb, bytes, what);
    if (r != CUDA_SUCCESS) {
        char msg[200];
        snprintf(msg, sizeof msg, "cuMemAlloc(%zu bytes for %s)", bytes, what ? what : "a buffer");
        return cuda_fail(r, msg);
    }
    return CNN_OK;
}

cnn_status cuda_workspace_slot(cuda_be *cb, int slot, size_t bytes, void **out) {
    CNN_ASSERT(slot >= 0 && slot < CUDA_WS_SLOTS);
    if (bytes <= cb->ws_bytes[slot]) {
        *out = (void *)(uintptr_t)cb->ws[slot];
        return CNN_OK;
    }
    if (cb->capturing)
        cnn_log(2, "cnn: workspace grows to %zu bytes during graph capture (the first eager run should have sized it)",
                bytes);
    size_t want = bytes + (bytes >> 1);
    want = (want + (1u << 20) - 1) & ~(size_t)((1u << 20) - 1);
    CUdeviceptr p;
    CNN_TRY(cuda_dev_alloc(cb, want, "workspace", &p));
    if (cb->ws[slot] && cb->graphs_live == 0 && !cb->capturing) {
        /* queued kernels may still use the old buffer */
        CUresult r = cu.StreamSynchronize(cb->stream);
        if (r != CUDA_SUCCESS) {
            cu.MemFree(p);
            return cuda_fail(r, "cuStreamSynchronize (before replacing the workspace; an earlier kernel failed)");
        }
        cu.MemFree(cb->ws[slot]);
    } else if (cb->ws[slot]) {
        /* a recorded graph may still point at the old buffer: keep it until destroy */
        CUdeviceptr *r = realloc(cb->retired, (size_t)(cb->n_retired + 1) * sizeof *r);
        if (!r) {
            cu.MemFree(p);
            return cnn_fail(CNN_E_OOM, "out of host memory");
        }
        cb->retired = r;
        cb->retired[cb->n_retired++] = cb->ws[slot];
    }
    cb->ws[slot] = p;
    cb->ws_bytes[slot] = want;
    *out = (void *)(uintptr_t)p;
    return CNN_OK;
}
