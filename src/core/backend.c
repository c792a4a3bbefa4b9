/* backend.c — choosing a backend: "cpu", "cuda", or "auto" (the GPU when usable, else the CPU). */
#include "cnn/backend.h"

#include <string.h>

#ifndef CNN_HAVE_CUDA
cnn_status cnn_cuda_backend_create(const cnn_backend_opts *opts, cnn_backend **out) {
    (void)opts;
    *out = NULL;
    return cnn_fail(CNN_E_UNSUPPORTED, "this build has no CUDA backend (CUDA headers were not found at build time)");
}

cnn_status cnn_cuda_dist_probe(int *gpus) {
    *gpus = 0;
    return cnn_fail(CNN_E_UNSUPPORTED, "this build has no CUDA backend (CUDA headers were not found at build time): "
                    "multi-GPU training needs it and NCCL");
}
#endif

static cnn_status create_cpu(const cnn_backend_opts *o, cnn_backend **out) {
    if (o->act_dtype != CNN_DTYPE_F32)
        return cnn_fail(CNN_E_UNSUPPORTED, "the CPU backend computes in fp32 only (asked for --dtype %s)",
                        o->act_dtype == CNN_DTYPE_BF16 ? "bf16" : "fp16");
    if (o->allow_tf32) return cnn_fail(CNN_E_UNSUPPORTED, "the CPU backend computes in fp32 only (asked for --dtype tf32)");
    return cnn_cpu_backend_create(o->threads, out);
}

cnn_status cnn_backend_create(const cnn_backend_opts *o, cnn_backend **out) {
    *out = NULL;
    const char *dev = o->device ? o->device : "auto";
    cnn_status st;
    if (strcmp(dev, "cpu") == 0) {
        st = create_cpu(o, out);
    } else if (strcmp(dev, "cuda") == 0) {
        st = cnn_cuda_backend_create(o, out);
        if (st != CNN_OK) return cnn_error_prefix(st, "--device cuda");
    } else if (strcmp(dev, "auto") == 0) {
        st = cnn_cuda_backend_create(o, out);
        if (st != CNN_OK) {
            cnn_log(1, "cnn: no usable GPU (%s); using the CPU", cnn_error_msg());
            cnn_error_clear();
            st = create_cpu(o, out);
        }
    } else {
        return cnn_fail(CNN_E_INVALID, "unknown device '%s' (expected cpu, cuda or auto)", dev);
    }
    if (st == CNN_OK) (*out)->deterministic = o->deterministic || (*out)->deterministic;
    return st;
}

void cnn_backend_destroy(cnn_backend *be) {
    if (be) be->destroy(be);
}
