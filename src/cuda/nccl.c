/* nccl.c — the CUDA backend's collectives (backend.h comm_*), NCCL's, loaded at run time: dlopen("libnccl.so.2")
 * as driver.c does libcuda; nothing is linked and no NCCL header is needed. The few types below are NCCL's stable
 * ABI (nccl.h since 2.0; ncclBfloat16 since 2.10, which is the oldest version accepted).
 *
 * Streams: a collective with side = false runs on the backend's stream; with side = true on the communicator's
 * own stream, forked from the backend's by an event and joined back by comm_join, so that gradient buckets are
 * summed while the backward goes on. Both record into CUDA graphs (NCCL >= 2.9 supports capture; the first
 * backward runs eagerly, which sets NCCL's connections up outside any capture).
 */
#include "cuda/internal.h"
#include "cnn/dist.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { char internal[CNN_DIST_ID_BYTES]; } nccl_unique_id;
typedef struct nccl_comm_s *nccl_comm_t;
typedef int nccl_result_t; /* ncclResult_t: 0 = ncclSuccess, 7 = ncclInProgress */
enum { NCCL_SUCCESS = 0, NCCL_IN_PROGRESS = 7 };
enum { NCCL_UINT32 = 3, NCCL_FLOAT32 = 7, NCCL_FLOAT64 = 8, NCCL_BFLOAT16 = 9 }; /* ncclDataType_t */
enum { NCCL_SUM = 0, NCCL_MAX = 2 };                                                /* ncclRedOp_t */
#define NCCL_MIN_VERSION 21000 /* 2.10.0: bf16 */

/* X(field, symbol, return type, parameters) */
#define NCCL_SYMBOLS(X)                                                                                       \
    X(GetVersion, ncclGetVersion, nccl_result_t, (int *))                                                     \
    X(GetUniqueId, ncclGetUniqueId, nccl_result_t, (nccl_unique_id *))                                        \
    X(CommInitRank, ncclCommInitRank, nccl_result_t, (nccl_comm_t *, int, nccl_unique_id, int))              \
    X(AllReduce, ncclAllReduce, nccl_result_t, (const void *, void *, size_t, int, int, nccl_comm_t, CUstream)) \
    X(Broadcast, ncclBroadcast, nccl_result_t, (const void *, void *, size_t, int, int, nccl_comm_t, CUstream)) \
    X(CommAbort, ncclCommAbort, nccl_result_t, (nccl_comm_t))                                                 \
    X(CommDestroy, ncclCommDestroy, nccl_result_t, (nccl_comm_t))                                             \
    X(CommGetAsyncError, ncclCommGetAsyncError, nccl_result_t, (nccl_comm_t, nccl_result_t *))                \
    X(GetErrorString, ncclGetErrorString, const char *, (nccl_result_t))                                      \
    X(Send, ncclSend, nccl_result_t, (const void *, size_t, int, int, nccl_comm_t, CUstream))                 \
    X(Recv, ncclRecv, nccl_result_t, (void *, size_t, int, int, nccl_comm_t, CUstream))                       \
    X(GroupStart, ncclGroupStart, nccl_result_t, (void))                                                      \
    X(GroupEnd, ncclGroupEnd, nccl_result_t, (void))

static struct {
#define NCCL_FIELD(field, sym, ret, args) ret(*field) args;
    NCCL_SYMBOLS(NCCL_FIELD)
#undef NCCL_FIELD
    int version;
} nc;

static pthread_once_t nccl_once = PTHREAD_ONCE_INIT;
static char nccl_error[512] = "NCCL not loaded";
static bool nccl_ok;

static void nccl_load(void) {
    const char *names[] = {"libnccl.so.2", "libnccl.so"};
    void *lib = NULL;
    char first[256] = "";
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !lib; i++) {
        lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!lib && i == 0) snprintf(first, sizeof first, "%s", dlerror());
    }
    if (!lib) { /* where the toolkit keeps it, as NVRTC is looked for */
        const cnn_env *env = cnn_env_get();
        char path[1100];
        snprintf(path, sizeof path, "%s/lib64/libnccl.so.2", env->cuda_home[0] ? env->cuda_home : "/usr/local/cuda");
        lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    }
    if (!lib) {
        snprintf(nccl_error, sizeof nccl_error, "NCCL is not installed (multi-GPU training needs libnccl.so.2): %s",
                 first);
        return;
    }
    void *p;
#define NCCL_RESOLVE(field, sym, ret, args)                                                                   \
    p = dlsym(lib, #sym);                                                                                     \
    if (!p) {                                                                                                 \
        snprintf(nccl_error, sizeof nccl_error, "libnccl.so.2 lacks %s: NCCL 2.10 or newer is needed", #sym); \
        return;                                                                                               \
    }                                                                                                         \
    memcpy(&nc.field, &p, sizeof p);
    NCCL_SYMBOLS(NCCL_RESOLVE)
#undef NCCL_RESOLVE
    if (nc.GetVersion(&nc.version) != NCCL_SUCCESS || nc.version < NCCL_MIN_VERSION) {
        snprintf(nccl_error, sizeof nccl_error, "NCCL %d is too old: 2.10 or newer is needed", nc.version);
        return;
    }
    nccl_ok = true;
}

static cnn_status nccl_require(void) {
    pthread_once(&nccl_once, nccl_load);
    return nccl_ok ? CNN_OK : cnn_fail(CNN_E_UNSUPPORTED, "%s", nccl_error);
}

static cnn_status nccl_fail(nccl_result_t r, const char *what) {
    return cnn_fail(CNN_E_DIST, "%s: NCCL error %d (%s)", what, r, nc.GetErrorString ? nc.GetErrorString(r) : "?");
}

#define NCCL_TRY(call, what)                                                                                  \
    do {                                                                                                      \
        nccl_result_t nccl_try_r_ = (call);                                                                   \
        if (nccl_try_r_ != NCCL_SUCCESS) return nccl_fail(nccl_try_r_, (what));                              \
    } while (0)

cnn_status cnn_cuda_dist_probe(int *gpus) {
    *gpus = 0;
    CNN_TRY(cuda_driver_load());
    CUresult r = cu.Init(0);
    if (r != CUDA_SUCCESS) {
        char buf[200];
        return cnn_fail(CNN_E_UNSUPPORTED, "no usable GPU: cuInit failed with %s", cuda_error_text(r, buf, sizeof buf));
    }
    CU_TRY(cu.DeviceGetCount(gpus), "cuDeviceGetCount");
    return nccl_require();
}

typedef struct nccl_comm {
    cuda_be *cb;
    nccl_comm_t c;
    CUstream side;
    CUevent fork, join;
    int rank, world;
    CUdeviceptr tree[2]; /* tree_allreduce's two halves (this rank's partial sum, its peer's) per stream: */
    size_t tree_bytes[2]; /* [0] the compute stream's, [1] the side stream's, which may run at the same time */
} nccl_comm;

static cnn_status comm_id(cnn_backend *be, uint8_t *id) {
    (void)be;
    CNN_TRY(nccl_require());
    nccl_unique_id u;
    NCCL_TRY(nc.GetUniqueId(&u), "ncclGetUniqueId");
    memcpy(id, u.internal, CNN_DIST_ID_BYTES);
    return CNN_OK;
}

static void comm_destroy(cnn_backend *be, void *comm);

static cnn_status comm_init(cnn_backend *be, const uint8_t *id, int rank, int world, void **out) {
    *out = NULL;
    CNN_TRY(nccl_require());
    cuda_be *cb = cuda_impl(be);
    cuda_bind(cb);
    nccl_comm *c = cnn_calloc(1, sizeof *c, "NCCL communicator");
    if (!c) return CNN_E_OOM;
    c->cb = cb;
    c->rank = rank;
    c->world = world;
    cnn_status st = CNN_OK;
    CUresult r = cu.StreamCreate(&c->side, CU_STREAM_NON_BLOCKING);
    if (r == CUDA_SUCCESS) r = cu.EventCreate(&c->fork, CU_EVENT_DISABLE_TIMING);
    if (r == CUDA_SUCCESS) r = cu.EventCreate(&c->join, CU_EVENT_DISABLE_TIMING);
    if (r != CUDA_SUCCESS) st = cuda_fail(r, "creating the communicator's stream");
    nccl_unique_id u;
    memcpy(u.internal, id, CNN_DIST_ID_BYTES);
    nccl_result_t nr = st == CNN_OK ? nc.CommInitRank(&c->c, world, u, rank) : NCCL_SUCCESS;
    if (st == CNN_OK && nr != NCCL_SUCCESS) {
        c->c = NULL;
        st = nccl_fail(nr, "ncclCommInitRank");
    }
    if (st != CNN_OK) {
        comm_destroy(be, c);
        return st;
    }
    cnn_log(2, "cnn: rank %d of %d: NCCL %d.%d.%d communicator on %s", rank, world, nc.version / 10000,
            nc.version / 100 % 100, nc.version % 100, be->device_name);
    *out = c;
    return CNN_OK;
}

/* A float sum over more than two ranks under --deterministic (cnn_backend.batch_shards): the pairwise tree over the
 * ranks in rank order, one level per bit of the rank. At level l each rank swaps its partial sum with rank ^ 2^l
 * (ncclSend/ncclRecv) and adds the two: one addition, the same on both sides, so that rank r's block of the
 * batch's slices goes up the tree of core/shards.h as a subtree ((r0 + r1) + (r2 + r3) over four). NCCL's own
 * all-reduce adds in ring order, which is not that tree. The halves grow outside graph capture: every step issues
 * the same sums, and the first step runs eagerly. */
static cnn_status tree_allreduce(nccl_comm *c, void *x, int64_t count, bool f64, CUstream s) {
    cuda_be *cb = c->cb;
    const size_t bytes = (size_t)count * (f64 ? 8 : 4);
    const int k = s == c->side;
    if (c->tree_bytes[k] < 2 * bytes) {
        if (cb->capturing)
            return cnn_fail(CNN_E_UNSUPPORTED, "a tree sum over the ranks of %lld values first met in a graph capture",
                            (long long)count);
        CU_TRY(cu.StreamSynchronize(cb->stream), "cuStreamSynchronize (the ranks' tree sum)");
        CU_TRY(cu.StreamSynchronize(c->side), "cuStreamSynchronize (the ranks' tree sum)");
        if (c->tree[k]) cu.MemFree(c->tree[k]);
        c->tree[k] = 0, c->tree_bytes[k] = 0;
        CNN_TRY(cuda_dev_alloc(cb, 2 * bytes, "the ranks' tree sum", &c->tree[k]));
        c->tree_bytes[k] = 2 * bytes;
    }
    const CUdeviceptr t = c->tree[k];
    CUfunction f;
    pw_args pa = {.count = count, .a = (const void *)(uintptr_t)t, .out = x, .n = 2, .stride = count};
    CNN_TRY(cuda_kernel(cb, &cuda_family_pointwise, cb->pub.act_dtype, PW_CFG_SCALAR,
                        f64 ? PW_TREE_SUM_F64 : PW_TREE_SUM, &f));
    const int dt = f64 ? NCCL_FLOAT64 : NCCL_FLOAT32;
    for (int bit = 1; bit < c->world; bit <<= 1) {
        const int peer = c->rank ^ bit;
        CU_TRY(cu.MemcpyDtoDAsync(t, (CUdeviceptr)(uintptr_t)x, bytes, s), "cuMemcpyDtoDAsync (tree sum)");
        NCCL_TRY(nc.GroupStart(), "ncclGroupStart");
        nccl_result_t r1 = nc.Send(x, (size_t)count, dt, peer, c->c, s);
        nccl_result_t r2 = nc.Recv((void *)(uintptr_t)(t + bytes), (size_t)count, dt, peer, c->c, s);
        NCCL_TRY(nc.GroupEnd(), "ncclGroupEnd");
        NCCL_TRY(r1, "ncclSend (tree sum)");
        NCCL_TRY(r2, "ncclRecv (tree sum)");
        CNN_TRY(cuda_launch_on(cb, s, f, "the ranks' tree sum", cuda_grid_1d(cb, count, 256), 256, &pa));
    }
    return CNN_OK;
}

static cnn_status comm_allreduce(cnn_backend *be, void *comm, void *x, int64_t count, cnn_comm_op op, bool side) {
    nccl_comm *c = comm;
    cuda_be *cb = cuda_impl(be);
    cuda_bind(cb);
    int dt = NCCL_FLOAT32, red = NCCL_SUM;
    switch (op) {
    case CNN_COMM_SUM_F32: break;
    case CNN_COMM_SUM_F64: dt = NCCL_FLOAT64; break;
    case CNN_COMM_MAX_U32: dt = NCCL_UINT32, red = NCCL_MAX; break;
    }
    if (cb->dry_run) return CNN_OK; /* every rank's dry run skips the same collectives */
    CUstream s = cb->stream;
    if (side) {
        CU_TRY(cu.EventRecord(c->fork, cb->stream), "cuEventRecord (gradient bucket)");
        CU_TRY(cu.StreamWaitEvent(c->side, c->fork, 0), "cuStreamWaitEvent (gradient bucket)");
        s = c->side;
    }
    if (be->batch_shards > 0 && c->world > 2 && (c->world & (c->world - 1)) == 0 && op != CNN_COMM_MAX_U32)
        return tree_allreduce(c, x, count, op == CNN_COMM_SUM_F64, s);
    NCCL_TRY(nc.AllReduce(x, x, (size_t)count, dt, red, c->c, s), "ncclAllReduce");
    return CNN_OK;
}

/* x (count float32) rounded to bfloat16 into scratch, or widened back (to_act / from_act of the bf16 pointwise
 * kernels, whatever the backend's own dtype), on stream s */
static cnn_status bf16_convert(cuda_be *cb, CUstream s, bool narrow, float *x, void *scratch, int64_t count) {
    const bool vec = ((uintptr_t)x & 15) == 0 && ((uintptr_t)scratch & 15) == 0;
    CUfunction f;
    CNN_TRY(cuda_kernel(cb, &cuda_family_pointwise, CNN_DTYPE_BF16, vec ? PW_CFG_VEC16 : PW_CFG_SCALAR,
                        narrow ? PW_TO_ACT : PW_FROM_ACT, &f));
    pw_args a = {.count = count, .a = narrow ? (const void *)x : scratch, .out = narrow ? scratch : (void *)x};
    const int per = vec ? 8 : 1;
    return cuda_launch_on(cb, s, f, narrow ? "gradient sum: float32 -> bf16" : "gradient sum: bf16 -> float32",
                          cuda_grid_1d(cb, (count + per - 1) / per, 256), 256, &a);
}

/* bfloat16 sums: half the bytes on the wire; the rounding and widening run on the collective's stream */
static cnn_status comm_allreduce_bf16(cnn_backend *be, void *comm, float *x, void *scratch, int64_t count,
                                      bool side) {
    nccl_comm *c = comm;
    cuda_be *cb = cuda_impl(be);
    cuda_bind(cb);
    if (count == 0) return CNN_OK;
    CUstream s = cb->stream;
    if (side) {
        CU_TRY(cu.EventRecord(c->fork, cb->stream), "cuEventRecord (gradient bucket)");
        CU_TRY(cu.StreamWaitEvent(c->side, c->fork, 0), "cuStreamWaitEvent (gradient bucket)");
        s = c->side;
    }
    CNN_TRY(bf16_convert(cb, s, true, x, scratch, count));
    if (!cb->dry_run) /* (its conversions only note their program) */
        NCCL_TRY(nc.AllReduce(scratch, scratch, (size_t)count, NCCL_BFLOAT16, NCCL_SUM, c->c, s), "ncclAllReduce (bf16)");
    return bf16_convert(cb, s, false, x, scratch, count);
}

static cnn_status comm_join(cnn_backend *be, void *comm) {
    nccl_comm *c = comm;
    cuda_be *cb = cuda_impl(be);
    cuda_bind(cb);
    CU_TRY(cu.EventRecord(c->join, c->side), "cuEventRecord (gradient join)");
    CU_TRY(cu.StreamWaitEvent(cb->stream, c->join, 0), "cuStreamWaitEvent (gradient join)");
    return CNN_OK;
}

static cnn_status comm_broadcast(cnn_backend *be, void *comm, void *x, size_t bytes, int root) {
    nccl_comm *c = comm;
    cuda_be *cb = cuda_impl(be);
    cuda_bind(cb);
    NCCL_TRY(nc.Broadcast(x, x, bytes, 1 /* ncclUint8 */, root, c->c, cb->stream), "ncclBroadcast");
    return CNN_OK;
}

static cnn_status comm_check(void *comm) {
    nccl_comm *c = comm;
    nccl_result_t async = NCCL_SUCCESS;
    nccl_result_t r = nc.CommGetAsyncError(c->c, &async);
    if (r != NCCL_SUCCESS) return nccl_fail(r, "ncclCommGetAsyncError");
    if (async != NCCL_SUCCESS && async != NCCL_IN_PROGRESS) return nccl_fail(async, "NCCL (asynchronous)");
    return CNN_OK;
}

static void comm_abort(void *comm) {
    nccl_comm *c = comm;
    if (c && c->c) nc.CommAbort(c->c);
}

static void comm_destroy(cnn_backend *be, void *comm) {
    nccl_comm *c = comm;
    if (!c) return;
    cuda_bind(cuda_impl(be));
    if (c->c) nc.CommDestroy(c->c);
    if (c->fork) cu.EventDestroy(c->fork);
    if (c->join) cu.EventDestroy(c->join);
    if (c->side) cu.StreamDestroy(c->side);
    for (int k = 0; k < 2; k++)
        if (c->tree[k]) cu.MemFree(c->tree[k]);
    free(c);
}

void cuda_comm_install(cnn_backend *be) {
    be->comm_id = comm_id;
    be->comm_init = comm_init;
    be->comm_allreduce = comm_allreduce;
    be->comm_allreduce_bf16 = comm_allreduce_bf16;
    be->comm_join = comm_join;
    be->comm_broadcast = comm_broadcast;
    be->comm_check = comm_check;
    be->comm_abort = comm_abort;
    be->comm_destroy = comm_destroy;
}
