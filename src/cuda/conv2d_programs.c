/* conv2d_programs.c -- the kernel families of the convolution rows (conv2d_table.c): each family's programs and
 * their defines, derived from the rows' fields and flags, and the family and program a row launches. Families:
 * conv2d.cu's SIMT and MMA rows per pass; the pipelined, wgmma and warp-specialised rows' forward programs; their
 * OUT_PHASE programs (a strided dgrad's phase in place); the warp-specialised rows' STATS programs (a BatchNorm's
 * sums in the epilogue); the GROUPED programs (all of a strided dgrad's phases in one launch); the FILT_T programs
 * (a stride-1 dgrad reading the forward's filter as it is) and their FT_GATE twins (the ReLU before the conv, and
 * its bias gradient, in the epilogue). The first layer's, wgrad's and Winograd's families are conv2d_configs.c's.
 */
#include "cuda/conv2d.h"

#include <stdio.h>
#include <string.h>

/* how many rows of a kind have a program of their own (a persistent wgmma row runs its twin's) */
static int kind_programs(unsigned kind) {
    int n = 0;
    for (int v = 0; v < conv_n_rows(); v++)
        n += conv_kind_of(&conv_rows[v]) == kind && !conv_is(&conv_rows[v], CNN_CUDA_CONV_PERSISTENT);
    return n;
}
/* the row of program cfg of a kind */
static const conv_row *program_row(unsigned kind, int cfg) {
    for (int v = conv_kind_first(kind); v < conv_n_rows() && conv_kind_of(&conv_rows[v]) == kind; v++)
        if (!conv_is(&conv_rows[v], CNN_CUDA_CONV_PERSISTENT) && cfg-- == 0) return &conv_rows[v];
    CNN_ASSERT(!"program index out of range");
    return NULL;
}

/* ---- kernel families: defines from the rows --------------------------------------------------------------- */

static void defines_generic(int pass, unsigned kind, int cfg, char *buf, size_t cap) {
    const conv_row *c = program_row(kind, cfg);
    if (kind == CNN_CUDA_CONV_MMA)
        snprintf(buf, cap, "-DPASS=%d -DMMA=1 -DBM=%d -DBN=%d -DBK=%d -DWM=%d -DWN=%d", pass, c->bm, c->bn, c->bk, c->wm,
                 c->wn);
    else
        snprintf(buf, cap, "-DPASS=%d -DMMA=0 -DBM=%d -DBN=%d -DBK=%d -DTM=%d -DTN=%d", pass, c->bm, c->bn, c->bk, c->wm,
                 c->wn);
}
static void def_fprop(int cfg, char *buf, size_t cap) { defines_generic(PASS_FPROP, CNN_CUDA_CONV_SIMT, cfg, buf, cap); }
static void def_dgrad(int cfg, char *buf, size_t cap) { defines_generic(PASS_DGRAD, CNN_CUDA_CONV_SIMT, cfg, buf, cap); }
static void def_wgrad(int cfg, char *buf, size_t cap) { defines_generic(PASS_WGRAD, CNN_CUDA_CONV_SIMT, cfg, buf, cap); }
static void def_fprop_mma(int cfg, char *buf, size_t cap) { defines_generic(PASS_FPROP, CNN_CUDA_CONV_MMA, cfg, buf, cap); }
static void def_dgrad_mma(int cfg, char *buf, size_t cap) { defines_generic(PASS_DGRAD, CNN_CUDA_CONV_MMA, cfg, buf, cap); }
static void def_wgrad_mma(int cfg, char *buf, size_t cap) { defines_generic(PASS_WGRAD, CNN_CUDA_CONV_MMA, cfg, buf, cap); }

static int n_simt(void) { return kind_programs(CNN_CUDA_CONV_SIMT); }
static int n_mma(void) { return kind_programs(CNN_CUDA_CONV_MMA); }
static int n_pipelined(void) { return kind_programs(CNN_CUDA_CONV_PIPELINED); }
static int n_wgmma(void) { return kind_programs(CNN_CUDA_CONV_WGMMA); }
static int n_warpspec(void) { return kind_programs(CNN_CUDA_CONV_WARPSPEC); }
static const char *program_name(unsigned kind, int cfg) {
    return conv_row_name((int)(program_row(kind, cfg) - conv_rows));
}
static const char *simt_name(int cfg) { return program_name(CNN_CUDA_CONV_SIMT, cfg); }
static const char *mma_name(int cfg) { return program_name(CNN_CUDA_CONV_MMA, cfg); }
static const char *pipelined_name(int cfg) { return program_name(CNN_CUDA_CONV_PIPELINED, cfg); }
static const char *wgmma_name(int cfg) { return program_name(CNN_CUDA_CONV_WGMMA, cfg); }
static const char *warpspec_name(int cfg) { return program_name(CNN_CUDA_CONV_WARPSPEC, cfg); }

static const char *const fprop_entries[] = {"conv2d_fprop"};
static const char *const dgrad_entries[] = {"conv2d_dgrad"};
static const char *const wgrad_entries[] = {"conv2d_wgrad", "conv2d_wgrad_reduce"};

const cuda_family cuda_family_conv2d_fprop = {.name = "conv2d_fprop", .file = "conv2d.cu", .entries = fprop_entries,
                                              .n_entries = 1, .dtypes = CUDA_DT_ALL, .count = n_simt,
                                              .defines = def_fprop, .config_name = simt_name};
const cuda_family cuda_family_conv2d_dgrad = {.name = "conv2d_dgrad", .file = "conv2d.cu", .entries = dgrad_entries,
                                              .n_entries = 1, .dtypes = CUDA_DT_ALL, .count = n_simt,
                                              .defines = def_dgrad, .config_name = simt_name};
const cuda_family cuda_family_conv2d_wgrad = {.name = "conv2d_wgrad", .file = "conv2d.cu", .entries = wgrad_entries,
                                              .n_entries = 2, .dtypes = CUDA_DT_ALL, .count = n_simt,
                                              .defines = def_wgrad, .config_name = simt_name};
const cuda_family cuda_family_conv2d_fprop_mma = {.name = "conv2d_fprop_mma", .file = "conv2d.cu",
                                                  .entries = fprop_entries, .n_entries = 1, .dtypes = CUDA_DT_HALF,
                                                  .count = n_mma, .defines = def_fprop_mma, .config_name = mma_name};
const cuda_family cuda_family_conv2d_dgrad_mma = {.name = "conv2d_dgrad_mma", .file = "conv2d.cu",
                                                  .entries = dgrad_entries, .n_entries = 1, .dtypes = CUDA_DT_HALF,
                                                  .count = n_mma, .defines = def_dgrad_mma, .config_name = mma_name};
const cuda_family cuda_family_conv2d_wgrad_mma = {.name = "conv2d_wgrad_mma", .file = "conv2d.cu",
                                                  .entries = wgrad_entries, .n_entries = 2, .dtypes = CUDA_DT_HALF,
                                                  .count = n_mma, .defines = def_wgrad_mma, .config_name = mma_name};

static void def_fprop_wgmma(int cfg, char *buf, size_t cap) {
    const conv_row *c = program_row(CNN_CUDA_CONV_WGMMA, cfg);
    CNN_ASSERT(c->bk == 64);
    snprintf(buf, cap, "-DBM=%d -DBN=%d -DWGS=%d -DSTAGES=%d -DMINB=%d", c->bm, c->bn, c->wm, c->stages, c->minb);
}
static const char *const fprop_wgmma_entries[] = {"conv2d_fprop_wgmma"};
const cuda_family cuda_family_conv2d_fprop_wgmma = {.name = "conv2d_fprop_wgmma", .file = "conv2d_wgmma.cu",
                                                 .entries = fprop_wgmma_entries, .n_entries = 1, .dtypes = CUDA_DT_HALF,
                                                 .count = n_wgmma, .defines = def_fprop_wgmma, .config_name = wgmma_name,
                                                 .sm90a = true};

/* phase: the program writing a strided dgrad's phase in place (OUT_PHASE, conv2d_epilogue.cuh): that of the row's
 * conv_phase_row */
/* stats: the program summing y's channels for a training BatchNorm (STATS, conv2d_epilogue.cuh's stats_flush):
 * that of the row's conv_stats_row, without the staged residual (none to stage) */
static void defines_warpspec(int cfg, bool phase, bool stats, char *buf, size_t cap) {
    const conv_row *c = program_row(CNN_CUDA_CONV_WARPSPEC, cfg);
    if (phase) c = &conv_rows[conv_phase_row((int)(c - conv_rows))];
    if (stats) c = &conv_rows[conv_stats_row((int)(c - conv_rows))];
    CNN_ASSERT(c->bk == 64 && c->wm == 2);
    snprintf(buf, cap, "-DBM=%d -DBN=%d -DSTAGES=%d -DBRES=%d -DTMA=%d -DCOOP=%d -DRSM=%d -DSWAP=%d -DOST=%d%s%s",
             c->bm, c->bn, c->stages, conv_is(c, CNN_CUDA_CONV_FILTER_RESIDENT), conv_is(c, CNN_CUDA_CONV_TMA),
             conv_is(c, CNN_CUDA_CONV_COOPERATIVE), conv_is(c, CNN_CUDA_CONV_RESIDUAL_SMEM) && !stats,
             conv_is(c, CNN_CUDA_CONV_TRANSPOSED), conv_is(c, CNN_CUDA_CONV_TMA_STORE), phase ? " -DOUT_PHASE=1" : "",
             stats ? " -DSTATS=1" : "");
}
static void def_fprop_warpspec(int cfg, char *buf, size_t cap) { defines_warpspec(cfg, false, false, buf, cap); }
static const char *const fprop_warpspec_entries[] = {"conv2d_fprop_warpspec"};
const cuda_family cuda_family_conv2d_fprop_warpspec = {.name = "conv2d_fprop_warpspec", .file = "conv2d_warpspec.cu",
                                                 .entries = fprop_warpspec_entries, .n_entries = 1, .dtypes = CUDA_DT_HALF,
                                                 .count = n_warpspec, .defines = def_fprop_warpspec,
                                                 .config_name = warpspec_name, .sm90a = true};

/* The stats programs (STATS=1): each warp-specialised row's forward program (its conv_stats_row's) that also sums
 * each channel of y for the training BatchNorm reading it (conv2d_fast.c, perf-log step 87) */
static void def_stats_warpspec(int cfg, char *buf, size_t cap) { defines_warpspec(cfg, false, true, buf, cap); }
const cuda_family cuda_family_conv2d_stats_warpspec = {.name = "conv2d_stats_warpspec", .file = "conv2d_warpspec.cu",
                                                 .entries = fprop_warpspec_entries, .n_entries = 1, .dtypes = CUDA_DT_HALF,
                                                 .count = n_warpspec, .defines = def_stats_warpspec,
                                                 .config_name = warpspec_name, .sm90a = true};

static void def_fprop_pipelined(int cfg, char *buf, size_t cap) {
    const conv_row *c = program_row(CNN_CUDA_CONV_PIPELINED, cfg);
    snprintf(buf, cap, "-DBM=%d -DBN=%d -DBK=%d -DWM=%d -DWN=%d -DSTAGES=%d -DMINB=%d", c->bm, c->bn, c->bk, c->wm,
             c->wn, c->stages, c->minb);
}
static const char *const fprop_pipelined_entries[] = {"conv2d_fprop_pipelined",   "conv2d_pipelined_splitk_epilogue", "conv2d_s2d_input",
                                               "conv2d_s2d_filter", "conv2d_pad_channels",       "conv2d_dgrad_filter",
                                               "conv2d_dgrad_interleave", "conv2d_dgrad_zero"};
const cuda_family cuda_family_conv2d_fprop_pipelined = {.name = "conv2d_fprop_pipelined", .file = "conv2d_pipelined.cu",
                                                 .entries = fprop_pipelined_entries, .n_entries = 8, .dtypes = CUDA_DT_ALL,
                                                 .count = n_pipelined, .defines = def_fprop_pipelined,
                                                 .config_name = pipelined_name};
/* the same programs with the multiply-adds in fp32 FMA (FFMA=1): F32 without allow_tf32 (true fp32) */
static void def_fprop_pipelined_ffma(int cfg, char *buf, size_t cap) {
    def_fprop_pipelined(cfg, buf, cap);
    size_t len = strlen(buf);
    snprintf(buf + len, cap - len, " -DFFMA=1");
}
const cuda_family cuda_family_conv2d_fprop_pipelined_ffma = {.name = "conv2d_fprop_pipelined_ffma", .file = "conv2d_pipelined.cu",
                                                   .entries = fprop_pipelined_entries, .n_entries = 8, .dtypes = CUDA_DT_F32,
                                                   .count = n_pipelined, .defines = def_fprop_pipelined_ffma,
                                                   .config_name = pipelined_name};

const cuda_family *conv_pipelined_family(const cuda_be *cb) {
    return cb->pub.act_dtype == CNN_DTYPE_F32 && !cb->allow_tf32 ? &cuda_family_conv2d_fprop_pipelined_ffma
                                                                 : &cuda_family_conv2d_fprop_pipelined;
}

/* The fast rows' dgrad programs: each forward program compiled with OUT_PHASE=1, writing one phase of a strided
 * dgrad into dx in place (conv2d_dgrad.c); the main kernel and, for the pipelined rows, the split-K epilogue. */
static void append_phase(char *buf, size_t cap) {
    const size_t len = strlen(buf);
    snprintf(buf + len, cap - len, " -DOUT_PHASE=1");
}
static void def_phase_pipelined(int cfg, char *buf, size_t cap) { def_fprop_pipelined(cfg, buf, cap), append_phase(buf, cap); }
static void def_phase_pipelined_ffma(int cfg, char *b, size_t n) { def_fprop_pipelined_ffma(cfg, b, n), append_phase(b, n); }
static void def_phase_wgmma(int cfg, char *buf, size_t cap) { def_fprop_wgmma(cfg, buf, cap), append_phase(buf, cap); }
static void def_phase_warpspec(int cfg, char *buf, size_t cap) { defines_warpspec(cfg, true, false, buf, cap); }
/* F32 phases multiply in fp32 FMA (conv2d_dgrad.c keeps dgrad off TF32) */
const cuda_family cuda_family_conv2d_phase_pipelined = {
    .name = "conv2d_phase_pipelined", .file = "conv2d_pipelined.cu", .entries = fprop_pipelined_entries,
    .n_entries = 2, .dtypes = CUDA_DT_HALF, .count = n_pipelined, .defines = def_phase_pipelined,
    .config_name = pipelined_name};
const cuda_family cuda_family_conv2d_phase_pipelined_ffma = {
    .name = "conv2d_phase_pipelined_ffma", .file = "conv2d_pipelined.cu", .entries = fprop_pipelined_entries,
    .n_entries = 2, .dtypes = CUDA_DT_F32, .count = n_pipelined, .defines = def_phase_pipelined_ffma,
    .config_name = pipelined_name};
const cuda_family cuda_family_conv2d_phase_wgmma = {
    .name = "conv2d_phase_wgmma", .file = "conv2d_wgmma.cu", .entries = fprop_wgmma_entries, .n_entries = 1,
    .dtypes = CUDA_DT_HALF, .count = n_wgmma, .defines = def_phase_wgmma, .config_name = wgmma_name, .sm90a = true};
const cuda_family cuda_family_conv2d_phase_warpspec = {
    .name = "conv2d_phase_warpspec", .file = "conv2d_warpspec.cu", .entries = fprop_warpspec_entries,
    .n_entries = 1, .dtypes = CUDA_DT_HALF, .count = n_warpspec, .defines = def_phase_warpspec,
    .config_name = warpspec_name, .sm90a = true};

/* The grouped phases (conv2d_warpspec.cu with GROUPED=1): every phase of a strided dgrad in one launch, on the rows
 * with TMA copies, pixel-major tiles of at most 128 channels, both operands in the ring and no staged residual,
 * reading the forward's filter as it is (FILT_T=1); group program i is the i-th such row's. */
static bool group_eligible(const conv_row *c) {
    return conv_kind_of(c) == CNN_CUDA_CONV_WARPSPEC && conv_is(c, CNN_CUDA_CONV_TMA) &&
           !conv_is(c, CNN_CUDA_CONV_FILTER_RESIDENT) && !conv_is(c, CNN_CUDA_CONV_TRANSPOSED) &&
           !conv_is(c, CNN_CUDA_CONV_TMA_STORE) && !conv_is(c, CNN_CUDA_CONV_RESIDUAL_SMEM) && c->bn <= 128;
}
/* the rows a family's programs are compiled for, by a predicate: how many, the i-th, and row v's place among them */
static int rows_where(bool (*pred)(const conv_row *)) {
    int n = 0;
    for (int v = 0; v < conv_n_rows(); v++) n += pred(&conv_rows[v]);
    return n;
}
static int row_where(bool (*pred)(const conv_row *), int i) {
    for (int v = 0; v < conv_n_rows(); v++)
        if (pred(&conv_rows[v]) && i-- == 0) return v;
    CNN_ASSERT(!"no such row");
    return -1;
}
static int index_where(bool (*pred)(const conv_row *), int v) {
    if (!pred(&conv_rows[v])) return -1;
    int i = 0;
    for (int u = 0; u < v; u++) i += pred(&conv_rows[u]);
    return i;
}
int conv_n_group_rows(void) { return rows_where(group_eligible); }
int conv_group_row(int i) { return row_where(group_eligible, i); }
int cnn_cuda_dgrad_group_rows(void) { return conv_n_group_rows(); } /* hooks.h: for the tests */
int cnn_cuda_dgrad_group_row(int i) { return conv_group_row(i); }
static void def_group_warpspec(int cfg, char *buf, size_t cap) {
    const conv_row *c = &conv_rows[conv_group_row(cfg)];
    snprintf(buf, cap, "-DBM=%d -DBN=%d -DSTAGES=%d -DBRES=0 -DTMA=1 -DCOOP=%d -DRSM=0 -DSWAP=0 -DOST=0 -DOUT_PHASE=1 "
             "-DGROUPED=1 -DFILT_T=1", c->bm, c->bn, c->stages, conv_is(c, CNN_CUDA_CONV_COOPERATIVE));
}
static const char *group_name(int cfg) { return conv_row_name(conv_group_row(cfg)); }
const cuda_family cuda_family_conv2d_group_warpspec = {
    .name = "conv2d_group_warpspec", .file = "conv2d_warpspec.cu", .entries = fprop_warpspec_entries,
    .n_entries = 1, .dtypes = CUDA_DT_HALF, .count = conv_n_group_rows, .defines = def_group_warpspec,
    .config_name = group_name, .sm90a = true};

/* The dgrads reading the forward's filter as it is (FILT_T=1; conv2d_dgrad.c, a stride-1 dgrad with no rewrite of
 * the filter): the forward program of each TMA warp-specialised row, its filter slices read transposed; program i is
 * the i-th such row's. */
static bool ft_eligible(const conv_row *c) {
    return conv_kind_of(c) == CNN_CUDA_CONV_WARPSPEC && conv_is(c, CNN_CUDA_CONV_TMA);
}
static int n_ft(void) { return rows_where(ft_eligible); }
int conv_ft_program(int v) { return index_where(ft_eligible, v); }
static int ft_row(int cfg) { return row_where(ft_eligible, cfg); }
static void def_ft_warpspec(int cfg, char *buf, size_t cap) {
    defines_warpspec(ft_row(cfg) - conv_kind_first(CNN_CUDA_CONV_WARPSPEC), false, false, buf, cap);
    const size_t len = strlen(buf);
    snprintf(buf + len, cap - len, " -DFILT_T=1");
}
static const char *ft_name(int cfg) { return conv_row_name(ft_row(cfg)); }
const cuda_family cuda_family_conv2d_ft_warpspec = {
    .name = "conv2d_dgrad_ft_warpspec", .file = "conv2d_warpspec.cu", .entries = fprop_warpspec_entries,
    .n_entries = 1, .dtypes = CUDA_DT_HALF, .count = n_ft, .defines = def_ft_warpspec, .config_name = ft_name,
    .sm90a = true};
/* the same programs with the gate (FT_GATE=1): the residual operand is the ReLU output before the forward conv, whose
 * backward the dgrad takes in (conv2d_dgrad.c, cuda_dgrad_phases_relu), and the gated dx's sums (STATS, no staged
 * residual: the bias gradient of the conv before that ReLU, step 101); program i is the i-th FILT_T row's */
static void def_ft_gate_warpspec(int cfg, char *buf, size_t cap) {
    defines_warpspec(ft_row(cfg) - conv_kind_first(CNN_CUDA_CONV_WARPSPEC), false, true, buf, cap);
    const size_t len = strlen(buf);
    snprintf(buf + len, cap - len, " -DFILT_T=1 -DFT_GATE=1");
}
const cuda_family cuda_family_conv2d_ft_gate_warpspec = {
    .name = "conv2d_dgrad_ft_gate_warpspec", .file = "conv2d_warpspec.cu", .entries = fprop_warpspec_entries,
    .n_entries = 1, .dtypes = CUDA_DT_HALF, .count = n_ft, .defines = def_ft_gate_warpspec, .config_name = ft_name,
    .sm90a = true};

const cuda_family *conv_row_family(const cuda_be *cb, int v, int pass, int *cfg) {
    CNN_ASSERT(v >= 0 && v < conv_n_rows());
    static const cuda_family *const generic[2][3] = {
        {&cuda_family_conv2d_fprop, &cuda_family_conv2d_dgrad, &cuda_family_conv2d_wgrad},
        {&cuda_family_conv2d_fprop_mma, &cuda_family_conv2d_dgrad_mma, &cuda_family_conv2d_wgrad_mma}};
    const conv_row *r = &conv_rows[v];
    *cfg = conv_program_of(v);
    switch (conv_kind_of(r)) {
    case CNN_CUDA_CONV_SIMT: return generic[0][pass];
    case CNN_CUDA_CONV_MMA: return generic[1][pass];
    default: break;
    }
    CNN_ASSERT(pass != PASS_WGRAD); /* the fast rows: forward, or (PASS_DGRAD) their OUT_PHASE programs */
    const bool fwd = pass == PASS_FPROP, ffma = cb->pub.act_dtype == CNN_DTYPE_F32 && !cb->allow_tf32;
    if (conv_kind_of(r) == CNN_CUDA_CONV_PIPELINED)
        return fwd ? conv_pipelined_family(cb)
                   : ffma ? &cuda_family_conv2d_phase_pipelined_ffma : &cuda_family_conv2d_phase_pipelined;
    if (conv_kind_of(r) == CNN_CUDA_CONV_WGMMA) return fwd ? &cuda_family_conv2d_fprop_wgmma : &cuda_family_conv2d_phase_wgmma;
    return fwd ? &cuda_family_conv2d_fprop_warpspec : &cuda_family_conv2d_phase_warpspec;
}

