/* hooks.h -- the CUDA backend's entry points beyond struct cnn_backend, for tests (tests/unit/test_nvrtc.c,
 * tests/gpu/test_gpu_ops.c) and the autotuner to come. No CUDA types here: it compiles without CUDA headers'
 * types leaking into its users. Everything in it exists only when CNN_HAVE_CUDA is defined.
 */
#ifndef CNN_CUDA_HOOKS_H
#define CNN_CUDA_HOOKS_H

#include "cnn/backend.h"

/* ---- NVRTC, without a GPU ----------------------------------------------------------------------------- */

/* Load libnvrtc (once per process). cuda_home: where to look after the default library path (NULL:
 * /usr/local/cuda). On failure returns CNN_E_DEVICE with the reason. */
cnn_status cnn_cuda_nvrtc_load(const char *cuda_home);
/* NVRTC's version, after a successful load. */
void cnn_cuda_nvrtc_version(int *major, int *minor);

/* ---- the kernel registry: every program (kernel file x dtype x config) the engine can compile ---------- */

typedef struct cnn_cuda_program_info {
    const char *family;       /* "conv2d_fprop" */
    const char *file;         /* "conv2d.cu" */
    char label[96];           /* "conv2d_fprop[bf16 128x128x8/8x8]" */
    char defines[256];        /* "-DACT=2 -DPASS=0 -DBM=128 ..." */
    const char *const *entries; /* kernel names of the family */
    int n_entries;
    uint64_t held;            /* bit e: the program holds entries[e] (a family may split them over its configs) */
    bool sm90a;               /* built for sm_90a alone (wgmma): no other arch runs it */
} cnn_cuda_program_info;

int cnn_cuda_program_count(void);
void cnn_cuda_program_describe(int id, cnn_cuda_program_info *out);

/* Compile program `id` for `arch` ("sm_90a", "sm_80", or "compute_XY" for PTX) exactly as the engine does
 * (plus `extra_option` when not NULL, e.g. "--ptxas-options=-v"). On success *image (malloc'd) holds the CUBIN
 * (or PTX), and *log (malloc'd, may be NULL) the compiler log. On failure CNN_E_COMPILE with the log. */
cnn_status cnn_cuda_compile_program(int id, const char *arch, const char *extra_option, void **image, size_t *len,
                                    char **log);

/* ---- the on-disk kernel cache ------------------------------------------------------------------------- */

typedef enum cnn_cuda_cache_result {
    CNN_CUDA_CACHE_HIT = 0,
    CNN_CUDA_CACHE_MISS,     /* no entry */
    CNN_CUDA_CACHE_REJECTED, /* an entry exists but fails a check (corrupt, truncated, stale): rebuild it */
} cnn_cuda_cache_result;

/* Entry for the descriptor text `desc` (everything the binary depends on) in directory dir. On a hit *data
 * (malloc'd) and *len hold the payload; on a rejection `why` says which check failed. */
cnn_cuda_cache_result cnn_cuda_cache_load(const char *dir, const char *desc, void **data, size_t *len, char *why,
                                          size_t why_cap);
/* The same checks on an entry's bytes in memory (path labels `why`; the fuzz target of tests/fuzz). */
cnn_cuda_cache_result cnn_cuda_cache_parse(const unsigned char *buf, size_t size, const char *desc, const char *path,
                                           void **data, size_t *len, char *why, size_t why_cap);
/* Write atomically (temp file + rename; dir created if missing). */
cnn_status cnn_cuda_cache_store(const char *dir, const char *desc, const void *data, size_t len);
/* The path of desc's entry. */
void cnn_cuda_cache_path(const char *dir, const char *desc, char *buf, size_t cap);
/* FNV-1a 64 of bytes, continuing from h (start with CNN_FNV_OFFSET). */
#define CNN_FNV_OFFSET 0xcbf29ce484222325ULL
uint64_t cnn_fnv1a64(uint64_t h, const void *data, size_t len);

/* ---- the tuning cache (tune.c) ------------------------------------------------------------------------- */

/* One line "key|cfg|splits|ms" (len bytes, no newline): false unless the key is 1..key_cap-1 printable bytes,
 * cfg >= 0, splits >= 1 and ms a finite number >= 0, with nothing after it. */
bool cnn_cuda_tune_parse_line(const char *line, size_t len, char *key, size_t key_cap, int *cfg, int *splits,
                              float *ms);
/* Every complete line of a cache file's text: put() for each valid one; returns their number, *bad the others. */
int cnn_cuda_tune_parse(const char *text, size_t len,
                        void (*put)(void *ctx, const char *key, int cfg, int splits, float ms), void *ctx, int *bad);

/* ---- a live backend ------------------------------------------------------------------------------------ */

typedef struct cnn_cuda_stats {
    long compiles;       /* NVRTC compilations */
    long lazy_compiles;  /* of them, ones made alone when a kernel was first launched (not side by side in a batch:
                          * a tuner's candidates, or what a dry run noted) */
    long disk_hits;      /* modules loaded from the disk cache */
    long disk_rejects;   /* cache entries found corrupt or stale (and rebuilt) */
    long disk_stores;    /* entries written */
    long module_loads;   /* cuModuleLoadData calls */
    long launches;
    long tma_launches;   /* of them, convolutions whose operands came by TMA (the warp-specialised TMA rows) */
    long ost_launches;   /* of those, convolutions whose output went by TMA too (the store-tma rows) */
    long pair_launches;  /* of them, two convolutions summed in one kernel (cuda_conv2d_fprop_pair, fused) */
    long wgrad_wgmma_launches; /* of them, filter gradients on wgmma (conv2d_wgrad.c) */
    long wgrad_few_launches; /* filter gradients over few channels on mma.sync (conv2d_wgrad.c) */
    long pool_quad_launches; /* max pooling backwards of 3x3/2 windows a 2x2 block of inputs per thread (pool.c) */
    long pool_tile_launches; /* max pooling backwards of windows tiling the input, a window per thread (pool.c) */
    long pool_tile_sum_launches; /* of them, ones summing dx per channel in the same kernel (cnn_pool2d.dx_sum) */
    long dgrad_fast_launches; /* dgrads run on the forward tensor-core kernels (conv2d_dgrad.c), each counted once */
    long dgrad_grouped_launches; /* of them, a strided one's phases in one grouped launch */
    long dgrad_ft_launches; /* of them, stride-1 ones reading the forward's filter transposed (no rewrite: FILT_T) */
    long dgrad_gate_launches; /* of those, ones gating dx by the ReLU before the conv in the epilogue (FT_GATE) */
    long dgrad_sum_launches;  /* of those, ones also summing dx's channels (conv2d_dgrad_relu's dx_sum) */
    long bn_fused_launches; /* BatchNorm passes in one cooperative launch (batchnorm.c) */
    long bn_pool_launches;  /* BatchNorm backwards that took in the max-pool after them (batchnorm.c) */
    long conv_stats_launches; /* convolutions that summed their output's channels for a BatchNorm (conv2d_fast.c) */
    long bn_stats_folds;    /* BatchNorm forwards that took those sums instead of reading x (batchnorm.c) */
} cnn_cuda_stats;

void cnn_cuda_stats_get(cnn_backend *be, cnn_cuda_stats *out);
/* Free and total device memory (cuMemGetInfo). */
cnn_status cnn_cuda_mem_info(cnn_backend *be, size_t *free_bytes, size_t *total_bytes);
/* The arch the backend compiles for ("sm_90a") and the cache directory ("" = no disk cache). */
const char *cnn_cuda_arch(cnn_backend *be);
const char *cnn_cuda_cache_dir(cnn_backend *be);

/* Convolution configs (the rows of src/cuda/conv2d_table.c): how many, their names (derived from their flags),
 * their flags, whether one can run on this backend (tensor cores need F16/BF16 and sm_80+), and forcing one
 * (-1 = the heuristic) for every following conv2d_fprop/dgrad/wgrad and linear call on this backend. */
int cnn_cuda_conv_config_count(void);
const char *cnn_cuda_conv_config_name(int v);
/* What a config is: exactly one kind bit (its kernel), the passes it runs, and its row's options. Tests select
 * configs by these bits, never by name. */
enum {
    CNN_CUDA_CONV_SIMT = 1u << 0,      /* conv2d.cu, fp32-FMA tiles: every pass and dtype                        */
    CNN_CUDA_CONV_MMA = 1u << 1,       /* conv2d.cu, mma.sync tiles: every pass, F16/BF16, sm_80+                  */
    CNN_CUDA_CONV_PIPELINED = 1u << 2, /* the cp.async-pipelined mma.sync forward kernel (F32: TF32 or fp32 FMA) */
    CNN_CUDA_CONV_WGMMA = 1u << 3,     /* the wgmma forward kernel, one warpgroup role (sm_90a, F16/BF16)        */
    CNN_CUDA_CONV_WARPSPEC = 1u << 4,  /* wgmma, warp-specialised: a producer warpgroup feeds two consumers     */
    CNN_CUDA_CONV_KINDS = 0x1fu,
    CNN_CUDA_CONV_FPROP = 1u << 8,
    CNN_CUDA_CONV_DGRAD = 1u << 9,
    CNN_CUDA_CONV_WGRAD = 1u << 10,
    CNN_CUDA_CONV_PERSISTENT = 1u << 16,      /* wgmma: its twin's program on a grid of as many CTAs as fit, each
                                               * looping over tiles (warp-specialised rows always are)           */
    CNN_CUDA_CONV_FILTER_RESIDENT = 1u << 17, /* the filter's column block stays in shared memory (short reductions) */
    CNN_CUDA_CONV_TMA = 1u << 18,             /* operands copied by the tensor-memory accelerator (C % 64 == 0)  */
    CNN_CUDA_CONV_COOPERATIVE = 1u << 19,     /* both consumers on one tile, half its rows each (else: ping-pong)  */
    CNN_CUDA_CONV_RESIDUAL_SMEM = 1u << 20,   /* the residual staged in shared memory during the mainloop          */
    CNN_CUDA_CONV_TRANSPOSED = 1u << 21,      /* the transposed tile: filter rows as wgmma's m64 operand            */
    CNN_CUDA_CONV_TMA_STORE = 1u << 22,       /* the output stored by TMA from shared memory                        */
};
unsigned cnn_cuda_conv_config_flags(int v);
bool cnn_cuda_conv_config_usable(cnn_backend *be, int v);
void cnn_cuda_conv_force_config(cnn_backend *be, int v);
/* Split-K of the tensor-core forward kernels: -1 = the heuristic (splits when the output has too few tiles to
 * fill the GPU), 0 = never, s > 0 = s splits whenever the reduction has at least s slices. */
void cnn_cuda_conv_force_splitk(cnn_backend *be, int splits);
/* A strided dgrad's phases on the forward kernels (conv2d_dgrad.c): -1 = tuned (or the heuristic), 0 = each into a
 * block then the interleave kernel, 1 = each written into dx in place, 2 + i = all in one launch of the i-th group
 * row (cnn_cuda_dgrad_group_rows; a problem that cannot run so takes the heuristic's way). */
void cnn_cuda_dgrad_force_way(cnn_backend *be, int way);
/* the rows whose grouped program runs a strided dgrad's phases in one launch: how many, and the i-th's row index */
int cnn_cuda_dgrad_group_rows(void);
int cnn_cuda_dgrad_group_row(int i);
/* BatchNorm's training passes (batchnorm.c) in one cooperative launch each: -1 = where the heuristic says, 0 = never
 * (three launches), 1 = wherever they can (the vector path, one rank's statistics, cooperative launches). */
void cnn_cuda_bn_force_fused(cnn_backend *be, int mode);
/* whether this backend has cooperative launches (the fused BatchNorm kernels need them) */
bool cnn_cuda_coop_ok(cnn_backend *be);
/* the GPU's multiprocessors (what a cooperative grid can hold at once scales with them) */
int cnn_cuda_sm_count(cnn_backend *be);
/* wgrad on wgmma (conv2d_wgrad.c, sm_90a): its tile configs, whether one runs on this backend, and forcing one
 * (-1 = tuned or heuristic) with `splits` reduction splits (0 = the heuristic's) for every following conv2d_wgrad
 * call the kernel takes. */
int cnn_cuda_wgrad_config_count(void);
const char *cnn_cuda_wgrad_config_name(int cfg);
bool cnn_cuda_wgrad_config_usable(cnn_backend *be, int cfg);
bool cnn_cuda_wgrad_config_takes(int cfg, const cnn_conv2d *cv); /* the halo configs take 3x3 stride-1 convs only */
void cnn_cuda_wgrad_force(cnn_backend *be, int cfg, int splits);
/* Winograd F(2x2,3x3) for F32 3x3/1 convolutions (winograd.c): -1 the heuristic (default), 0 never, 1 wherever it
 * applies. */
void cnn_cuda_conv_force_winograd(cnn_backend *be, int mode);
/* The persistent rows (CNN_CUDA_CONV_PERSISTENT and the warp-specialised ones) launch as many CTAs as fit on the
 * GPU, each looping over output tiles; ctas > 0 caps that grid (a test makes each CTA take several tiles), 0
 * restores it. */
void cnn_cuda_conv_force_grid(cnn_backend *be, int ctas);
/* First-layer kernels (conv2d_first.cu: 3-channel images, the stem with or without its max-pool, 3x3/1): how many
 * configs, their names, and forcing one (-1 = tuned or the heuristic) for every problem of its shape class; a
 * problem of another class keeps its own choice. The grid cap above applies to them too (they are persistent). */
int cnn_cuda_first_config_count(void);
const char *cnn_cuda_first_config_name(int cfg);
void cnn_cuda_first_force_config(cnn_backend *be, int cfg);

#endif
