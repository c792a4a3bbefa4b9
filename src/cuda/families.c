/* families.c -- the kernel families of every op but the convolution's (whose rows and families are
 * conv2d_table.c's, conv2d_programs.c's and conv2d_configs.c's): each kernel file's entry points, in the order of the entry enums of internal.h, and its
 * specialisation defines. Data only: the registry lists these, the launchers ask for their kernels. */
#include "cuda/internal.h"
#include "cuda/conv2d.h"

#include <stdio.h>

static void no_defines(int cfg, char *buf, size_t cap) {
    (void)cfg;
    if (cap) buf[0] = 0;
}

/* pointwise.cu: two configs per dtype, 0 scalar (any alignment), 1 16-byte vectors */
static const char *const pointwise_entries[PW_N] = {"relu_forward",    "relu_backward",    "add_forward", "pass_backward",
                                                    "dropout_forward", "dropout_backward", "to_act",      "from_act",
                                                    "flatten_forward", "flatten_backward", "tree_sum",        "tree_sum_f64"};
static void pointwise_defines(int cfg, char *buf, size_t cap) {
    snprintf(buf, cap, cfg == PW_CFG_VEC16 ? "-DVEC=ACT_VEC" : "-DVEC=1");
}
static const char *pointwise_config_name(int cfg) { return cfg == PW_CFG_VEC16 ? "vec16" : "scalar"; }
const cuda_family cuda_family_pointwise = {.name = "pointwise", .file = "pointwise.cu", .entries = pointwise_entries,
                                           .n_entries = PW_N, .dtypes = CUDA_DT_ALL, .n_configs = PW_N_CFG,
                                           .defines = pointwise_defines, .config_name = pointwise_config_name};

static const char *const batchnorm_entries[BN_N] = {"chan_partial",     "chan_sum_finalize", "bn_mean_finalize",
                                                    "bn_var_finalize",  "bn_bwd_finalize",   "bn_apply",
                                                    "bn_bwd_apply",     "scale_shift",       "bn_partial_vec",
                                                    "bn_stats_finalize", "bn_apply_vec",     "bn_bwd_apply_vec",
                                                    "bn_chunk_totals",  "bn_mask_of_y",
                                                    "bn_bwd_partial_vec", "bn_fused_vec",    "bn_bwd_fused_vec",
                                                    "bn_fold_stats",    "bn_bwd_pool_partial_vec",
                                                    "bn_bwd_pool_apply_vec", "pool_bwd_tile_sum_vec", "bn_shard_tree"};
static void batchnorm_defines(int cfg, char *buf, size_t cap) { snprintf(buf, cap, "-DBN_PART=%d", cfg); }
/* the backward's kernels in one program, the rest (forward, channel_sum, eval) in the other (batchnorm.cu) */
static int batchnorm_entry_config(int entry) {
    static const unsigned char cfg[BN_N] = {
        [BN_BWD_FIN] = BN_CFG_BACKWARD,         [BN_BWD_APPLY] = BN_CFG_BACKWARD,
        [BN_BWD_APPLY_VEC] = BN_CFG_BACKWARD,   [BN_BWD_PARTIAL_VEC] = BN_CFG_BACKWARD,
        [BN_BWD_FUSED_VEC] = BN_CFG_BACKWARD,   [BN_BWD_POOL_PARTIAL_VEC] = BN_CFG_BACKWARD,
        [BN_BWD_POOL_APPLY_VEC] = BN_CFG_BACKWARD, [POOL_BWD_TILE_SUM_VEC] = BN_CFG_BACKWARD,
    }; /* the others BN_CFG_FORWARD (0) */
    return cfg[entry];
}
static const char *batchnorm_config_name(int cfg) { return cfg == BN_CFG_BACKWARD ? "backward" : "forward"; }
const cuda_family cuda_family_batchnorm = {.name = "batchnorm", .file = "batchnorm.cu", .entries = batchnorm_entries,
                                           .n_entries = BN_N, .dtypes = CUDA_DT_ALL, .n_configs = BN_N_CFG,
                                           .defines = batchnorm_defines, .config_name = batchnorm_config_name,
                                           .entry_config = batchnorm_entry_config};

/* the filter gradient over few input channels (conv2d_wgrad.c): WGRAD_MAIN, WGRAD_REDUCE; a config per width of
 * dW's tile (cuda_wgrad_few_cols) */
static const char *const wgrad_few_entries[] = {"conv2d_wgrad_few", "conv2d_wgrad_few_reduce"};
#define WGRAD_FEW_COLS(X) X(32) X(160) /* the widths; each config's name derived from its width */
#define FEW_WIDTH(c) c,
#define FEW_NAME(c) "cols" #c,
const int cuda_wgrad_few_cols[WGRAD_FEW_N_CFG] = {WGRAD_FEW_COLS(FEW_WIDTH)};
static const char *const wgrad_few_names[WGRAD_FEW_N_CFG] = {WGRAD_FEW_COLS(FEW_NAME)};
static void wgrad_few_defines(int cfg, char *buf, size_t cap) {
    snprintf(buf, cap, "-DFEW_COLS=%d", cuda_wgrad_few_cols[cfg]);
}
static const char *wgrad_few_config_name(int cfg) { return wgrad_few_names[cfg]; }
const cuda_family cuda_family_conv2d_wgrad_few = {.name = "conv2d_wgrad_few", .file = "conv2d_wgrad_few.cu",
                                                  .entries = wgrad_few_entries, .n_entries = 2,
                                                  .dtypes = CUDA_DT_HALF, .n_configs = WGRAD_FEW_N_CFG,
                                                  .defines = wgrad_few_defines,
                                                  .config_name = wgrad_few_config_name};

static const char *const pool_entries[POOL_N] = {"pool_forward",       "pool_backward",      "pool_forward_vec",
                                                 "pool_backward_vec",  "pool_backward_quad", "pool_backward_tile"};
const cuda_family cuda_family_pool = {.name = "pool", .file = "pool.cu", .entries = pool_entries, .n_entries = POOL_N,
                                      .dtypes = CUDA_DT_ALL, .n_configs = 1, .defines = no_defines};

static const char *const loss_entries[XENT_N] = {"xent_rows", "xent_mean"};
const cuda_family cuda_family_loss = {.name = "loss", .file = "loss.cu", .entries = loss_entries, .n_entries = XENT_N,
                                      .dtypes = CUDA_DT_ALL, .n_configs = 1, .defines = no_defines};

static const char *const prep_entries[PREP_N] = {"prep_images", "resample_images"};
const cuda_family cuda_family_prep = {.name = "prep", .file = "prep.cu", .entries = prep_entries, .n_entries = PREP_N,
                                      .dtypes = CUDA_DT_ALL, .n_configs = 1, .defines = no_defines};

/* optim.cu: float32 state whatever the activations; per activation dtype for the weight copies the updates write */
static const char *const optim_entries[OPT_N] = {"sgd_update", "adamw_update", "count_nonfinite", "guard_step"};
const cuda_family cuda_family_optim = {.name = "optim", .file = "optim.cu", .entries = optim_entries,
                                       .n_entries = OPT_N, .dtypes = CUDA_DT_ALL, .n_configs = 1, .defines = no_defines};
