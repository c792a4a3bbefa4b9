/* internal.h -- the CUDA backend's private interface: the driver and NVRTC function tables (loaded with dlopen,
 * nothing is linked), the backend state, the kernel registry and the launch helpers shared by the launcher
 * files (one per op family: conv2d.c linear.c batchnorm.c pointwise.c pool.c loss.c prep.c optim.c).
 *
 * Errors: anything the driver or NVRTC can refuse at run time returns a cnn_status (cuda_fail names the call
 * and the driver's error name); a broken shape contract is a CNN_ASSERT. Kernel arguments are the structs of
 * kernels/params.cuh, shared with the device code.
 */
#ifndef CNN_CUDA_INTERNAL_H
#define CNN_CUDA_INTERNAL_H

#include "cnn/backend.h"
#include "cuda/hooks.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <nvrtc.h>
#include <stdint.h>

#include "../../kernels/params.cuh"

/* ---- the driver API (driver.c) ------------------------------------------------------------------------ */

/* X(field, symbol, version, newer_version, exported_name): resolved with cuGetProcAddress(symbol, newer_version
 * first when non-zero, then version); the pointer type is PFN_<symbol>_v<version> from cudaTypedefs.h, whose
 * signature every variant listed shares. exported_name is the dlsym fallback for drivers without
 * cuGetProcAddress. Pinning the version keeps the ABI of the CUDA 12.0+ headers we were built with, whatever
 * the driver's own version. */
#define CUDA_DRIVER_SYMBOLS(X)                                                                                \
    X(Init, cuInit, 2000, 0, "cuInit")                                                                        \
    X(DriverGetVersion, cuDriverGetVersion, 2020, 0, "cuDriverGetVersion")                                    \
    X(GetErrorName, cuGetErrorName, 6000, 0, "cuGetErrorName")                                                \
    X(GetErrorString, cuGetErrorString, 6000, 0, "cuGetErrorString")                                          \
    X(DeviceGetCount, cuDeviceGetCount, 2000, 0, "cuDeviceGetCount")                                          \
    X(DeviceGet, cuDeviceGet, 2000, 0, "cuDeviceGet")                                                         \
    X(DeviceGetName, cuDeviceGetName, 2000, 0, "cuDeviceGetName")                                             \
    X(DeviceGetAttribute, cuDeviceGetAttribute, 2000, 0, "cuDeviceGetAttribute")                              \
    X(DeviceTotalMem, cuDeviceTotalMem, 3020, 0, "cuDeviceTotalMem_v2")                                       \
    X(DevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000, 0, "cuDevicePrimaryCtxRetain")                  \
    X(DevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease, 11000, 0, "cuDevicePrimaryCtxRelease_v2")           \
    X(CtxSetCurrent, cuCtxSetCurrent, 4000, 0, "cuCtxSetCurrent")                                             \
    X(CtxGetCurrent, cuCtxGetCurrent, 4000, 0, "cuCtxGetCurrent")                                             \
    X(MemAlloc, cuMemAlloc, 3020, 0, "cuMemAlloc_v2")                                                         \
    X(MemFree, cuMemFree, 3020, 0, "cuMemFree_v2")                                                            \
    X(MemGetInfo, cuMemGetInfo, 3020, 0, "cuMemGetInfo_v2")                                                   \
    X(MemcpyHtoDAsync, cuMemcpyHtoDAsync, 3020, 0, "cuMemcpyHtoDAsync_v2")                                    \
    X(MemcpyDtoHAsync, cuMemcpyDtoHAsync, 3020, 0, "cuMemcpyDtoHAsync_v2")                                    \
    X(MemcpyDtoDAsync, cuMemcpyDtoDAsync, 3020, 0, "cuMemcpyDtoDAsync_v2")                                    \
    X(MemsetD8Async, cuMemsetD8Async, 3020, 0, "cuMemsetD8Async")                                             \
    X(StreamCreate, cuStreamCreate, 2000, 0, "cuStreamCreate")                                                \
    X(StreamDestroy, cuStreamDestroy, 4000, 0, "cuStreamDestroy_v2")                                          \
    X(StreamSynchronize, cuStreamSynchronize, 2000, 0, "cuStreamSynchronize")                                 \
    X(EventCreate, cuEventCreate, 2000, 0, "cuEventCreate")                                                   \
    X(EventDestroy, cuEventDestroy, 4000, 0, "cuEventDestroy_v2")                                             \
    X(EventRecord, cuEventRecord, 2000, 0, "cuEventRecord")                                                   \
    X(EventSynchronize, cuEventSynchronize, 2000, 0, "cuEventSynchronize")                                    \
    X(StreamWaitEvent, cuStreamWaitEvent, 3020, 0, "cuStreamWaitEvent")                                      \
    X(EventElapsedTime, cuEventElapsedTime, 2000, 12080, "cuEventElapsedTime")                                \
    X(ModuleLoadData, cuModuleLoadData, 2000, 0, "cuModuleLoadData")                                          \
    X(ModuleUnload, cuModuleUnload, 2000, 0, "cuModuleUnload")                                                \
    X(ModuleGetFunction, cuModuleGetFunction, 2000, 0, "cuModuleGetFunction")                                 \
    X(FuncGetAttribute, cuFuncGetAttribute, 2020, 0, "cuFuncGetAttribute")                                    \
    X(FuncSetAttribute, cuFuncSetAttribute, 9000, 0, "cuFuncSetAttribute")                                    \
    X(LaunchKernel, cuLaunchKernel, 4000, 0, "cuLaunchKernel")                                                \
    X(StreamBeginCapture, cuStreamBeginCapture, 10010, 0, "cuStreamBeginCapture_v2")                          \
    X(StreamEndCapture, cuStreamEndCapture, 10000, 0, "cuStreamEndCapture")                                   \
    X(StreamIsCapturing, cuStreamIsCapturing, 10000, 0, "cuStreamIsCapturing")                                \
    X(GraphInstantiateWithFlags, cuGraphInstantiateWithFlags, 11040, 0, "cuGraphInstantiateWithFlags")        \
    X(GraphLaunch, cuGraphLaunch, 10000, 0, "cuGraphLaunch")                                                  \
    X(GraphExecDestroy, cuGraphExecDestroy, 10000, 0, "cuGraphExecDestroy")                                  \
    X(GraphDestroy, cuGraphDestroy, 10000, 0, "cuGraphDestroy")                                              \
    X(OccupancyMaxActiveBlocksPerMultiprocessor, cuOccupancyMaxActiveBlocksPerMultiprocessor, 6050, 0,         \
      "cuOccupancyMaxActiveBlocksPerMultiprocessor")

/* The same for symbols a driver may lack: NULL there, and what needs them is not used (the TMA rows of the conv
 * forward, which need a CUDA 12.0 driver; page-locked host memory, where plain malloc does instead). */
#define CUDA_DRIVER_OPTIONAL(X)                                                                               \
    X(MemHostAlloc, cuMemHostAlloc, 2020, 0, "cuMemHostAlloc")                                                \
    X(MemFreeHost, cuMemFreeHost, 2000, 0, "cuMemFreeHost")                                                   \
    X(TensorMapEncodeTiled, cuTensorMapEncodeTiled, 12000, 0, "cuTensorMapEncodeTiled")                       \
    X(TensorMapEncodeIm2col, cuTensorMapEncodeIm2col, 12000, 0, "cuTensorMapEncodeIm2col")                   \
    X(LaunchKernelEx, cuLaunchKernelEx, 11060, 0, "cuLaunchKernelEx")

typedef struct cuda_driver {
#define CUDA_DRIVER_FIELD(field, sym, ver, newer, exported) PFN_##sym##_v##ver field;
    CUDA_DRIVER_SYMBOLS(CUDA_DRIVER_FIELD)
    CUDA_DRIVER_OPTIONAL(CUDA_DRIVER_FIELD)
#undef CUDA_DRIVER_FIELD
} cuda_driver;

/* The process-wide table, valid after cuda_driver_load() returned CNN_OK. */
extern cuda_driver cu;

/* dlopen libcuda.so.1 and resolve every symbol (once per process; later calls return the first result). */
cnn_status cuda_driver_load(void);
/* "CUDA_ERROR_OUT_OF_MEMORY (out of memory)" */
const char *cuda_error_text(CUresult r, char *buf, size_t cap);
/* Record a failure of driver call `what`: CNN_E_OOM for CUDA_ERROR_OUT_OF_MEMORY, CNN_E_DEVICE otherwise. */
cnn_status cuda_fail(CUresult r, const char *what);

#define CU_TRY(call, what)                                                                                     \
    do {                                                                                                       \
        CUresult cu_try_r_ = (call);                                                                           \
        if (cu_try_r_ != CUDA_SUCCESS) return cuda_fail(cu_try_r_, (what));                                   \
    } while (0)

/* For calls that must not fail unless the process is broken (style rule 5). */
#define CNN_CHECK_CUDA(call)                                                                                   \
    do {                                                                                                       \
        CUresult cu_chk_r_ = (call);                                                                           \
        if (cu_chk_r_ != CUDA_SUCCESS) {                                                                       \
            char cu_chk_b_[160];                                                                               \
            cnn_abort(__FILE__, __LINE__, "%s: %s", #call, cuda_error_text(cu_chk_r_, cu_chk_b_, sizeof cu_chk_b_)); \
        }                                                                                                      \
    } while (0)

/* ---- NVRTC (nvrtc.c) ---------------------------------------------------------------------------------- */

typedef struct cuda_nvrtc {
    __typeof__(&nvrtcVersion) Version;
    __typeof__(&nvrtcGetErrorString) GetErrorString;
    __typeof__(&nvrtcGetNumSupportedArchs) GetNumSupportedArchs;
    __typeof__(&nvrtcGetSupportedArchs) GetSupportedArchs;
    __typeof__(&nvrtcCreateProgram) CreateProgram;
    __typeof__(&nvrtcDestroyProgram) DestroyProgram;
    __typeof__(&nvrtcCompileProgram) CompileProgram;
    __typeof__(&nvrtcGetProgramLogSize) GetProgramLogSize;
    __typeof__(&nvrtcGetProgramLog) GetProgramLog;
    __typeof__(&nvrtcGetCUBINSize) GetCUBINSize;
    __typeof__(&nvrtcGetCUBIN) GetCUBIN;
    __typeof__(&nvrtcGetPTXSize) GetPTXSize;
    __typeof__(&nvrtcGetPTX) GetPTX;
    int major, minor;
} cuda_nvrtc;

extern cuda_nvrtc nvrtc;

/* For NVRTC calls that cannot fail on valid arguments. */
#define CNN_CHECK_NVRTC(call)                                                                                  \
    do {                                                                                                       \
        nvrtcResult nv_chk_r_ = (call);                                                                        \
        if (nv_chk_r_ != NVRTC_SUCCESS)                                                                        \
            cnn_abort(__FILE__, __LINE__, "%s: %s", #call, nvrtc.GetErrorString(nv_chk_r_));                   \
    } while (0)

/* The architecture option for a device of compute capability major.minor: "sm_90a" on Hopper, "sm_XY"
 * elsewhere, "compute_XY" (PTX, JIT-compiled by the driver) for a GPU newer than this NVRTC knows. */
cnn_status cuda_pick_arch(int major, int minor, char *arch, size_t cap);

/* ---- the kernel registry (registry.c) ------------------------------------------------------------------- */

#define CUDA_MAX_ENTRIES 24
#define CUDA_MAX_BEHIND 4 /* programs compiling in the background at once (cuda_compile_behind) */

/* A family: one kernel file compiled with one set of -D defines per (dtype, config). The configs (the
 * search space) are declared next to their launcher; `defines` writes config cfg's options. */
#define CUDA_DT_F32 1u
#define CUDA_DT_F16 2u
#define CUDA_DT_BF16 4u
#define CUDA_DT_HALF (CUDA_DT_F16 | CUDA_DT_BF16) /* the tensor-core families' dtypes */
#define CUDA_DT_ALL 7u
typedef struct cuda_family {
    const char *name;             /* "conv2d_fprop" */
    const char *file;             /* "conv2d.cu" */
    const char *const *entries;   /* kernel names, index = the family's entry enum */
    int n_entries;
    unsigned dtypes;              /* CUDA_DT_* mask: one program per activation dtype in it; 0 = dtype-free */
    int n_configs;                /* configs, when count is NULL                                          */
    int (*count)(void);           /* or: configs counted from a table (the conv rows: conv2d_table.c)      */
    void (*defines)(int cfg, char *buf, size_t cap);
    const char *(*config_name)(int cfg);
    bool sm90a;                   /* wgmma programs: built for sm_90a alone (the only arch their rows run on) */
    int (*entry_config)(int entry); /* the config whose program holds the entry, where each holds a part of them
                                     * (batchnorm.cu's BN_PART); NULL: every program holds every entry */
} cuda_family;

/* The families of the ops but the convolution's (families.c; the convolution's are conv2d.h's), and each one's
 * entry points in the order of its `entries`. */
extern const cuda_family cuda_family_pointwise, cuda_family_batchnorm, cuda_family_pool, cuda_family_loss,
    cuda_family_prep, cuda_family_optim;
enum {
    PW_RELU_FWD, PW_RELU_BWD, PW_ADD, PW_PASS_BWD, PW_DROP_FWD, PW_DROP_BWD, PW_TO_ACT, PW_FROM_ACT,
    PW_FLAT_FWD, PW_FLAT_BWD, PW_TREE_SUM, PW_TREE_SUM_F64, PW_N
};
enum { PW_CFG_SCALAR = 0, PW_CFG_VEC16 = 1, PW_N_CFG };
enum {
    BN_PARTIAL, BN_SUM_FIN, BN_MEAN_FIN, BN_VAR_FIN, BN_BWD_FIN, BN_APPLY, BN_BWD_APPLY, BN_SCALE_SHIFT,
    BN_PARTIAL_VEC, BN_STATS_FIN, BN_APPLY_VEC, BN_BWD_APPLY_VEC, BN_CHUNK_TOTALS, BN_MASK_OF_Y, BN_BWD_PARTIAL_VEC,
    BN_FUSED_VEC, BN_BWD_FUSED_VEC, BN_FOLD_STATS, BN_BWD_POOL_PARTIAL_VEC, BN_BWD_POOL_APPLY_VEC,
    POOL_BWD_TILE_SUM_VEC, BN_SHARD_TREE, BN_N
};
/* batchnorm.cu's two programs (BN_PART): the forward's, channel_sum's and eval's kernels, and the backward's */
enum { BN_CFG_FORWARD = 0, BN_CFG_BACKWARD = 1, BN_N_CFG };
enum { POOL_FWD, POOL_BWD, POOL_FWD_VEC, POOL_BWD_VEC, POOL_BWD_QUAD, POOL_BWD_TILE, POOL_N };
enum { XENT_ROWS, XENT_MEAN, XENT_N };
enum { PREP_IMAGES, PREP_RESAMPLE, PREP_N };
enum { OPT_SGD, OPT_ADAMW, OPT_NONFINITE, OPT_GUARD, OPT_N };

/* Configs of a family. */
static inline int cuda_family_configs(const cuda_family *fam) { return fam->count ? fam->count() : fam->n_configs; }
/* Whether a family has programs for activation dtype dt. */
bool cuda_family_has_dtype(const cuda_family *fam, cnn_dtype dt);
/* Program id of (family, dtype, cfg); total number of programs. */
int cuda_program_id(const cuda_family *fam, cnn_dtype dt, int cfg);
int cuda_program_total(void);
/* Assemble the NVRTC option list of program id for arch into opts (pointers into `store`); returns count. */
int cuda_program_options(int id, const char *arch, char *store, size_t store_cap, const char **opts, int max);
/* The kernel source (NUL-terminated) of a file, or NULL. */
const char *cuda_kernel_source(const char *file, size_t *len);
/* Compile source file `file` with options; on success *image and *len (malloc'd). name labels messages. */
cnn_status cuda_nvrtc_compile(const char *name, const char *file, const char **opts, int nopts, bool ptx,
                              void **image, size_t *len, char **log);
/* The cache descriptor of program id for arch under driver version drv: every input of the binary. */
void cuda_program_descriptor(int id, const char *arch, int driver_version, char *buf, size_t cap);

/* ---- the backend ------------------------------------------------------------------------------------- */

typedef struct cuda_module {
    CUmodule mod;
    CUfunction fn[CUDA_MAX_ENTRIES];
} cuda_module;

typedef struct cuda_alloc {
    CUdeviceptr ptr;
    size_t bytes;
} cuda_alloc;

typedef struct cuda_tune_entry {
    char key[200];
    int cfg, splits;
    float ms;
} cuda_tune_entry;

enum { CUDA_WS_SCRATCH = 0, CUDA_WS_OPERANDS = 1, CUDA_WS_STAGED = 2, CUDA_WS_STATS = 3, CUDA_WS_SLOTS = 4 };
enum { CUDA_UPLOAD_SLOTS = 32, CUDA_UPLOAD_SLOT_BYTES = 64 << 10 };
enum { CUDA_GRID_BARRIER = 128 }; /* byte offset of the grid barrier word in cuda_be.scratch */

typedef struct cuda_be {
    cnn_backend pub;
    CUdevice dev;
    CUcontext ctx;
    CUstream stream;
    CUevent ev_begin, ev_end;
    CUevent *marks;           /* time_mark's events (CNN_TIME_MARKS), each created on first use */
    int cc_major, cc_minor, sm_count;
    int smem_optin; /* shared memory one block may opt in to (bytes) */
    int driver_version;
    char arch[24];
    char cache_dir[1024];     /* "" = no disk cache */
    bool sync_debug;          /* CNN_SYNC_DEBUG: synchronise and check after every launch */
    bool no_tma;              /* the driver has no tensor-map encoders (CUDA < 12.0): no TMA conv rows */
    char conv_skip[128];      /* CNN_CONV_SKIP=a,b: nor the fast conv rows (or paths: "wgrad_few") whose names
                               * contain a or b (A/B timing) */
    bool pdl;                 /* kernels launched with programmatic stream serialization (sm_90+ and a driver with
                               * cuLaunchKernelEx): each may be placed while the one before it finishes
                               * (kernels/common.cuh, pdl_enter) */
    int first_force_cfg;      /* -1 = tuned or heuristic; c = conv2d_first.cu config c where it applies (tests) */
    bool allow_tf32;
    bool capturing;
    int graphs_live;          /* instantiated graphs not yet freed */
    int conv_force_cfg;       /* -1 = heuristic */
    int conv_force_splitk;    /* -1 = heuristic, 0 = off, s = s splits (tensor-core fprop) */
    int dgrad_way;            /* strided dgrad's phases: -1 tuned or heuristic, else a way of conv2d.h's DGRAD_*
                               * (cnn_cuda_dgrad_force_way, tests) */
    int winograd;             /* F32 3x3/1 convs as Winograd F(2x2,3x3): -1 tuned or heuristic, 0 never, 1 wherever it
                               * applies (cnn_cuda_conv_force_winograd, tests) */
    int conv_force_grid;      /* 0 = as many CTAs as fit; g > 0 = at most g CTAs (persistent wgmma rows; tests) */
    int wgrad_force_cfg;      /* -1 = tuned or heuristic; c = conv2d_wgrad.c's config c (tests) */
    int wgrad_force_splits;   /* with a forced config: its reduction splits (0 = the heuristic's) */
    bool timing;              /* between time_begin and time_end */
    cnn_tune tune;            /* autotuning level (NONE, FAST or FULL) */
    cuda_tune_entry *tune_tab; /* winners (tune.c) */
    int n_tune, cap_tune;
    bool tune_loaded;
    /* memory */
    cuda_alloc *allocs;
    int n_allocs, cap_allocs;
    size_t cur_bytes, peak;
    /* workspace: grows, never shrinks; an outgrown one may still be referenced by a recorded graph, so it is
     * kept (retired) until destroy */
    CUdeviceptr ws[CUDA_WS_SLOTS];
    size_t ws_bytes[CUDA_WS_SLOTS];
    CUdeviceptr *retired;
    int n_retired;
    CUdeviceptr scratch;      /* 256 bytes: count_nonfinite's counter at 0; at CUDA_GRID_BARRIER, the cooperative
                               * kernels' grid barrier word (zero from the start; kernels/common.cuh, grid_sync) */
    int l2_bytes;             /* the L2 cache's size */
    bool coop;                /* cooperative launches (a driver with cuLaunchKernelEx and a GPU that has them) */
    int bn_fused;             /* BatchNorm passes in one cooperative launch: -1 where the heuristic says, 0 never,
                               * 1 wherever they can (cnn_cuda_bn_force_fused, tests) */
    /* small uploads queued without a host wait (backend.c): a ring of staging slots, each reusable once its
     * event has passed */
    uint8_t *up_ring;
    bool up_pinned;           /* up_ring from cuMemHostAlloc (else malloc: the CPU emulator) */
    CUevent up_ev[CUDA_UPLOAD_SLOTS];
    bool up_used[CUDA_UPLOAD_SLOTS];
    int up_next;
    /* compiled programs, by program id */
    cuda_module *mods;
    int n_mods;
    /* a dry run (backend.h dry_run_begin): launches, collectives and timings do nothing; the programs they and the
     * tuners' candidates would use are noted in dry_ids, compiled at dry_run_end. The calling thread's: the JPEG
     * decoder's thread, which may run meanwhile, launches through cuda_resample_launch, which does not look */
    bool dry_run;
    int *dry_ids;
    int n_dry, cap_dry;
    /* programs compiling behind on worker processes (nvrtc.c cuda_compile_behind): collected when first needed */
    struct { int id, fd, pid; } behind[CUDA_MAX_BEHIND];
    int n_behind;
    cnn_cuda_stats dry_stats; /* stats at dry_run_begin, restored at its end */
    cnn_cuda_stats stats;
} cuda_be;

static inline cuda_be *cuda_impl(cnn_backend *be) { return (cuda_be *)be->impl; }
/* the vector kernels' precondition on an operand (NULL passes) */
static inline bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* tune.c: the winning (config, splits) of a problem key, in process and in the disk cache. */
bool cuda_tune_get(cuda_be *cb, const char *key, int *cfg, int *splits);
void cuda_tune_put(cuda_be *cb, const char *key, int cfg, int splits, float ms);
void cuda_tune_free(cuda_be *cb);
/* Time n candidates of one problem (key names it in messages): launch(ctx, i, y) launches candidate i writing
 * into y, a scratch output of ybytes; each is launched once to warm up, then 3 times with the L2 flushed (a 64 MiB
 * memset) before each, CUDA events, median. *best = the fastest (its median
 * in *best_ms), or -1 when there was no memory for the scratch buffers (the caller's heuristic stands: tuning is
 * an optimisation). all_ms (NULL or n floats): every candidate's median, -1 for those not timed. Outside capture.
 * In a dry run each candidate is launched once (which launches nothing: its programs, and those of what it tunes in
 * turn, are noted) and *best is -1. */
typedef cnn_status (*cuda_tune_launch_fn)(void *ctx, int i, void *y);
cnn_status cuda_tune_time(cuda_be *cb, const char *key, int n, size_t ybytes, cuda_tune_launch_fn launch, void *ctx,
                          int *best, float *best_ms, float *all_ms);

/* The CUfunction of entry `entry` of (family, dtype, cfg): compiled (or loaded from the disk cache) on first
 * use, then served from the in-process table. */
cnn_status cuda_kernel(cuda_be *cb, const cuda_family *fam, cnn_dtype dt, int cfg, int entry, CUfunction *out);
/* Build the programs ids (cuda_program_id) that are neither loaded nor in the disk cache on worker processes side
 * by side and load them all, so a tuner about to try n candidates waits for one compilation instead of n. Best
 * effort: a program that fails here is compiled again (and its error reported) by cuda_kernel. CNN_COMPILE_THREADS
 * caps the workers (1: off). In a dry run the ids are only noted (cuda_dry_run_end builds them). */
void cuda_prepare_programs(cuda_be *cb, const int *ids, int n);
/* Start compiling the programs ids (at most CUDA_MAX_BEHIND, those neither loaded nor in the disk cache) on worker
 * processes and return: cuda_kernel collects one when it is first needed, cuda_prepare_programs and the backend's
 * end whatever remains. For the programs nearly every run launches first, started before the backend's context is
 * created (backend.c), whose creation then hides their compilation. */
void cuda_compile_behind(cuda_be *cb, const int *ids, int n);
/* collect every program compiling behind (loaded, or left to compile when first needed); abandon: kill them */
void cuda_collect_behind(cuda_be *cb, bool abandon);
/* backend.h dry_run_begin/end: end builds the noted programs (cuda_prepare_programs) */
cnn_status cuda_dry_run_begin(cnn_backend *be);
cnn_status cuda_dry_run_end(cnn_backend *be);
/* ---- launch.c: below every launcher ------------------------------------------------------------------- */

/* Make the backend's context current on this thread (cheap when it already is). */
/* nccl.c: the comm_* entries of the backend table (NCCL, loaded on first use). */
void cuda_comm_install(cnn_backend *be);
void cuda_bind(cuda_be *cb);
/* cuMemAlloc of bytes for `what` (named in the OOM error, with the free memory) */
cnn_status cuda_dev_alloc(cuda_be *cb, size_t bytes, const char *what, CUdeviceptr *out);
/* Launch f with one argument struct on the backend's stream; `what` names it in errors. Checks the launch,
 * and with CNN_SYNC_DEBUG synchronises and checks its execution. */
cnn_status cuda_launch(cuda_be *cb, CUfunction f, const char *what, unsigned gx, unsigned gy, unsigned gz,
                       unsigned bx, unsigned by, void *args);
/* The same with `smem` bytes of dynamic shared memory; over 48 KB it raises the function's limit first and
 * fails cleanly (CNN_E_UNSUPPORTED) where the GPU has less per block. */
cnn_status cuda_launch_smem(cuda_be *cb, CUfunction f, const char *what, unsigned gx, unsigned gy, unsigned gz,
                            unsigned bx, unsigned by, unsigned smem, void *args);
/* whether CNN_CONV_SKIP (comma-separated parts of names; the A/B mechanism) names a conv row or a path ("wgrad_few",
 * "wgrad_x_rows", "bn_fused"): launch.c */
bool cuda_conv_skipped(const cuda_be *cb, const char *name);
/* A cooperative launch (every CTA resident at once; kernels/common.cuh, grid_sync), without programmatic
 * serialization: the grid must fit the GPU, as cuda_blocks_per_sm says. Only where cb->coop. */
cnn_status cuda_launch_cooperative(cuda_be *cb, CUfunction f, const char *what, unsigned gx, unsigned gy, unsigned bx,
                                   void *args);
/* A 1-D launch on another stream than the backend's (the communicator's), without PDL. */
cnn_status cuda_launch_on(cuda_be *cb, CUstream stream, CUfunction f, const char *what, unsigned gx, unsigned bx,
                          void *args);
/* How many blocks of f (`threads` threads, `smem` bytes of dynamic shared memory) fit on one SM at once, at
 * least 1 (the driver's occupancy calculator, after raising f's shared-memory limit as a launch would). */
cnn_status cuda_blocks_per_sm(cuda_be *cb, CUfunction f, const char *what, unsigned threads, unsigned smem, int *out);
/* Device workspace of at least `bytes` (valid until the next call for the same slot; never shrinks). Slot
 * CUDA_WS_SCRATCH serves one kernel's temporaries (split-K partials, reduction chunks); CUDA_WS_OPERANDS holds
 * rewritten operands that a following kernel reads (the stem's space-to-depth input and filter), so taking
 * scratch in between cannot move them; CUDA_WS_STAGED a conv's output that a pool then reads (the unfused path of
 * cuda_conv2d_fprop_pool); CUDA_WS_STATS the sums a conv's epilogue writes for the BatchNorm after it
 * (cnn_conv_stats). */
cnn_status cuda_workspace_slot(cuda_be *cb, int slot, size_t bytes, void **out);
static inline cnn_status cuda_workspace(cuda_be *cb, size_t bytes, void **out) {
    return cuda_workspace_slot(cb, CUDA_WS_SCRATCH, bytes, out);
}
/* Grid size for a grid-stride loop over `work` items with `threads` per block. */
unsigned cuda_grid_1d(const cuda_be *cb, long long work, int threads);
/* (mul, shr) for kernels/common.cuh's div_by(x, d, mul, shr) = x / d, 0 <= x < 2^31, 1 <= d < 2^31: with
 * l = ceil(log2 d), mul = ceil(2^(31+l) / d) and shr = l - 1 (unused for d == 1) */
void cuda_fast_divisor(int d, int *mul, int *shr);
/* act dtype names, "f32" "f16" "bf16" */
static inline const char *cuda_dtype_str(cnn_dtype dt) {
    return dt == CNN_DTYPE_F32 ? "f32" : dt == CNN_DTYPE_F16 ? "f16" : dt == CNN_DTYPE_BF16 ? "bf16" : "?";
}

/* ---- launchers (the table's ops), one file per family ------------------------------------------------ */

/* conv2d.c */
cnn_status cuda_conv2d_fprop(cnn_backend *be, const cnn_conv2d *cv, const cnn_epilogue *ep, const void *x,
                             const void *w, void *y);
cnn_status cuda_conv2d_dgrad(cnn_backend *be, const cnn_conv2d *cv, const void *dy, const void *w, void *dx,
                             bool accumulate);
cnn_status cuda_conv2d_dgrad_relu(cnn_backend *be, const cnn_conv2d *cv, const void *dy, const void *w,
                                  const void *relu_y, void *dx, float *dx_sum);
cnn_status cuda_conv2d_wgrad(cnn_backend *be, const cnn_conv2d *cv, const void *x, const void *dy, float *dw);
/* conv2d_pair.c: two convolutions summed in one kernel (the backend table's conv2d_fprop_pair) */
bool cuda_conv2d_pair_fusable(cnn_backend *be, const cnn_conv2d *cv, const cnn_conv2d *cv2);
cnn_status cuda_conv2d_fprop_pair(cnn_backend *be, const cnn_conv2d *cv, const cnn_conv2d *cv2,
                                  const cnn_epilogue *ep, const void *x, const void *w, const void *x2,
                                  const void *w2, void *y);
/* conv2d.c: conv + max-pool */
bool cuda_conv2d_pool_fusable(cnn_backend *be, const cnn_conv2d *cv, const cnn_pool2d *pl, bool residual);
cnn_status cuda_conv2d_fprop_pool(cnn_backend *be, const cnn_conv2d *cv, const cnn_epilogue *ep, const cnn_pool2d *pl,
                                  const void *x, const void *w, void *y);
/* linear.c */
cnn_status cuda_linear_forward(cnn_backend *be, const cnn_linear *ln, const void *x, const void *w,
                               const float *bias, void *y);
cnn_status cuda_linear_backward(cnn_backend *be, const cnn_linear *ln, const void *x, const void *w, const void *dy,
                                void *dx, bool accumulate, float *dw, float *dbias);
/* batchnorm.c */
/* whether a BatchNorm forward of this rank's statistics over an (m, c) tensor reads x in one cooperative launch
 * (the vector path where the heuristic's size rule or a force says so): x then comes from L2, and a conv's channel
 * sums (cnn_conv_stats) would save nothing (conv2d_fast.c asks) */
bool cuda_bn_forward_one_launch(const cuda_be *cb, int64_t m, int c);
cnn_status cuda_channel_sum(cnn_backend *be, int64_t m, int c, const void *dy, float *out);
cnn_status cuda_channel_sum_rows(cnn_backend *be, int slices, int64_t m, int c, const void *dy, float *out,
                                 int64_t stride);
/* channel_sum of a tensor from the sums a conv's epilogue wrote of it (s: the first of its arrays, a gating dgrad's
 * in conv2d_dgrad.c) instead of a pass over it: out (s->c) = the sum of s's chunks */
cnn_status cuda_channel_sum_partials(cnn_backend *be, const cnn_conv_stats *s, float *out);
cnn_status cuda_bn_forward_train(cnn_backend *be, const cnn_bn *bn, const void *x, const float *gamma,
                                 const float *beta, float *running_mean, float *running_var, float *save_mean,
                                 float *save_invstd, const void *residual, bool relu, void *y);
cnn_status cuda_bn_backward(cnn_backend *be, const cnn_bn *bn, const void *x, const void *y, const void *dy,
                            const float *gamma, const float *save_mean, const float *save_invstd, bool relu, void *dx,
                            bool accumulate, void *dres, bool dres_accumulate, float *dgamma, float *dbeta);
bool cuda_bn_pool_fusable(cnn_backend *be, const cnn_bn *bn, const cnn_pool2d *pl);
cnn_status cuda_bn_backward_pool(cnn_backend *be, const cnn_bn *bn, const cnn_pool2d *pl, const void *x,
                                 const void *dy, const float *gamma, const float *save_mean, const float *save_invstd,
                                 void *dx, bool accumulate, float *dgamma, float *dbeta);
cnn_status cuda_scale_shift(cnn_backend *be, int64_t m, int c, const void *x, const float *scale,
                            const float *shift, const void *residual, bool relu, void *y);
/* pointwise.c */
cnn_status cuda_to_act(cnn_backend *be, int64_t count, const float *src, void *dst);
cnn_status cuda_from_act(cnn_backend *be, int64_t count, const void *src, float *dst);
cnn_status cuda_relu_forward(cnn_backend *be, int64_t count, const void *x, void *y);
/* batchnorm.c: VGG's max-pool backward (windows tiling the input) with the sums of dx (cnn_pool2d.dx_sum) */
bool cuda_pool_tile_sum_fits(cnn_backend *be, const cnn_pool2d *pl, const void *y, const void *dy, const void *dx,
                             bool accumulate);
cnn_status cuda_pool_tile_backward_sum(cnn_backend *be, const cnn_pool2d *pl, const void *y, const void *dy,
                                       void *dx);
cnn_status cuda_relu_backward(cnn_backend *be, int64_t count, const void *y, const void *dy, void *dx,
                              bool accumulate);
cnn_status cuda_add_forward(cnn_backend *be, int64_t count, const void *a, const void *b, void *y);
cnn_status cuda_pass_backward(cnn_backend *be, int64_t count, const void *dy, void *dx, bool accumulate);
cnn_status cuda_dropout_forward(cnn_backend *be, int64_t count, float p, uint64_t seed, const void *x, void *y);
cnn_status cuda_dropout_backward(cnn_backend *be, int64_t count, float p, uint64_t seed, const void *dy, void *dx,
                                 bool accumulate);
cnn_status cuda_flatten_forward(cnn_backend *be, cnn_shape s, const void *x, void *y);
cnn_status cuda_flatten_backward(cnn_backend *be, cnn_shape s, const void *dy, void *dx, bool accumulate);
/* pool.c */
cnn_status cuda_pool2d_forward(cnn_backend *be, const cnn_pool2d *pl, const void *x, void *y);
cnn_status cuda_pool2d_backward(cnn_backend *be, const cnn_pool2d *pl, const void *x, const void *y,
                                const void *dy, void *dx, bool accumulate);
/* loss.c */
cnn_status cuda_xent_forward_backward(cnn_backend *be, const cnn_xent *xe, const void *logits,
                                      const int32_t *labels, float *loss, void *dlogits);
/* prep.c */
cnn_status cuda_prep_images(cnn_backend *be, const cnn_prep *pp, const uint8_t *src, const int32_t *samples,
                            void *dst);
cnn_status cuda_resample_images(cnn_backend *be, const cnn_resample_batch *rb, const cnn_resample_job *jobs,
                                const uint8_t *src, uint8_t *dst);
/* resample_images on a stream of the caller's (the JPEG decoder's), without programmatic serialization */
cnn_status cuda_resample_launch(cuda_be *cb, CUfunction f, CUstream stream, const cnn_resample_batch *rb,
                                const cnn_resample_job *jobs, const uint8_t *src, uint8_t *dst);

/* nvjpeg.c: batched JPEG decoding (nvJPEG loaded at run time) */
cnn_status cuda_jpeg_create(cnn_backend *be, int max_batch, int slots, void **dec);
cnn_status cuda_jpeg_decode(cnn_backend *be, void *dec, int slot, const cnn_resample_batch *b, const cnn_jpeg_image *im,
                            uint8_t *dst, uint8_t *ok);
cnn_status cuda_jpeg_fence(cnn_backend *be, void *dec, int slot);
void cuda_jpeg_free(cnn_backend *be, void *dec);
/* optim.c */
cnn_status cuda_sgd_update(cnn_backend *be, const cnn_sgd *o, int64_t count, float *w, const float *g,
                           float *momentum_buf, float grad_scale);
cnn_status cuda_adamw_update(cnn_backend *be, const cnn_adamw *o, int64_t count, float *w, const float *g,
                             float *m, float *v, float grad_scale);
cnn_status cuda_count_nonfinite(cnn_backend *be, int64_t count, const float *x, int64_t *out);
cnn_status cuda_tree_sum(cnn_backend *be, int shards, int64_t count, const float *parts, int64_t stride, float *out);
cnn_status cuda_guard_step(cnn_backend *be, const cnn_guard *g, cnn_guard_state *state);

#endif
