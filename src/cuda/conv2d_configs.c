/* conv2d_configs.c -- the config tables and kernel families of the convolution paths that are not rows of
 * conv2d_table.c: the first layer's (kernels/conv2d_first.cu: one shape class and one tile per config), wgrad on
 * wgmma's (kernels/conv2d_wgrad_wgmma.cu: tile and ring depth) and Winograd's transforms (kernels/winograd.cu, one
 * program). Data only, below every launcher (conv2d_first.c, conv2d_wgrad.c and winograd.c choose and launch).
 */
#include "cuda/conv2d.h"

#include <pthread.h>
#include <stdio.h>

/* ---- first layers (conv2d_first.cu) ------------------------------------------------------------------------ */

/* Tuned winners are stored by index in this table (tune.c): changing a row or its order needs CUDA_TUNE_VERSION
 * bumped. */
const first_config first_configs[] = {
    /* the ResNet stem with its max-pool: a pool tile of 8x8 (a conv tile of 17x17) or 4x8 (9x17); a warp takes
     * 32 output channels, or 16 (fewer registers: more CTAs per SM, each patch pair loaded twice as often) */
    {"stem7x7s2+pool/p8x8", .c = 3, .r = 7, .s = 7, .stride = 2, .pad = 3, .pool = true, .tp = 8, .tq = 8, .warps = 4, .wn = 2, .minb = 2},
    {"stem7x7s2+pool/p8x8/n16", .c = 3, .r = 7, .s = 7, .stride = 2, .pad = 3, .pool = true, .tp = 8, .tq = 8, .warps = 4, .wn = 4, .minb = 3},
    {"stem7x7s2+pool/p4x8", .c = 3, .r = 7, .s = 7, .stride = 2, .pad = 3, .pool = true, .tp = 4, .tq = 8, .warps = 4, .wn = 2, .minb = 2},
    /* the stem alone */
    {"stem7x7s2/t8x16", .c = 3, .r = 7, .s = 7, .stride = 2, .pad = 3, .pool = false, .tp = 8, .tq = 16, .warps = 4, .wn = 2, .minb = 2},
    /* 3x3/1 pad 1 over 3 channels */
    {"c3r3s1/t8x32", .c = 3, .r = 3, .s = 3, .stride = 1, .pad = 1, .pool = false, .tp = 8, .tq = 32, .warps = 4, .wn = 1, .minb = 2},
    {"c3r3s1/t16x16", .c = 3, .r = 3, .s = 3, .stride = 1, .pad = 1, .pool = false, .tp = 16, .tq = 16, .warps = 4, .wn = 1, .minb = 2},
    {"c3r3s1/t4x32", .c = 3, .r = 3, .s = 3, .stride = 1, .pad = 1, .pool = false, .tp = 4, .tq = 32, .warps = 4, .wn = 1, .minb = 3},
};
#define N_FIRST ((int)(sizeof first_configs / sizeof first_configs[0]))

int first_n_configs(void) { return N_FIRST; }
static int first_count(void) { return N_FIRST; }
static const char *first_name(int cfg) {
    CNN_ASSERT(cfg >= 0 && cfg < N_FIRST);
    return first_configs[cfg].name;
}
int cnn_cuda_first_config_count(void) { return N_FIRST; }
const char *cnn_cuda_first_config_name(int cfg) { return first_name(cfg); }

static void def_first(int cfg, char *buf, size_t cap) {
    const first_config *c = &first_configs[cfg];
    snprintf(buf, cap, "-DFC=%d -DFR=%d -DFS=%d -DFST=%d -DFPD=%d -DPOOL=%d -D%s=%d -D%s=%d -DWARPS=%d -DWN=%d -DMINB=%d",
             c->c, c->r, c->s, c->stride, c->pad, c->pool, c->pool ? "PP" : "TP", c->tp, c->pool ? "PQ" : "TQ", c->tq,
             c->warps, c->wn, c->minb);
}
static const char *const first_entries[] = {"conv2d_fprop_first"};
const cuda_family cuda_family_conv2d_fprop_first = {.name = "conv2d_fprop_first", .file = "conv2d_first.cu",
                                                    .entries = first_entries, .n_entries = 1, .dtypes = CUDA_DT_HALF,
                                                    .count = first_count, .defines = def_first,
                                                    .config_name = first_name};

/* ---- wgrad on wgmma (kernels/conv2d_wgrad_wgmma.cu; conv2d_wgrad.c chooses and launches) --------------------- */

const wgrad_config wgrad_configs[] = {
    {.bm = 128, .bn = 256, .stages = 4, .eff = 1.00f},
    {.bm = 256, .bn = 128, .stages = 4, .eff = 1.00f},
    {.bm = 128, .bn = 128, .stages = 6, .eff = 0.90f},
    {.bm = 128, .bn = 192, .stages = 5, .eff = 0.95f}, /* 3x3 over 64k channels: R*S*C = 576k, whole tiles of 192 */
    {.bm = 64, .bn = 256, .stages = 5, .eff = 0.85f},
    {.bm = 128, .bn = 64, .stages = 8, .eff = 0.75f},
    {.bm = 64, .bn = 128, .stages = 8, .eff = 0.70f},
    /* the halo kernel (3x3 stride 1): 64 channels of dy x all nine taps of 64 channels of x; a slice of hb x qb
     * output pixels whose x is read once, not once per tap (perf-log step 89). Columns qb a multiple of 8 (the
     * swizzle's period), so 8 for 7x7 and 14x14 outputs, 16 and 32 for 28x28 to 224x224, 64 for 56x56. bm x bn is
     * the kernel's CTA, fixed: 64 channels of dy x the nine taps of 64 channels of x. */
    {.bm = 64, .bn = 576, .stages = 4, .eff = 0.95f, .qb = 8, .hb = 8},
    {.bm = 64, .bn = 576, .stages = 4, .eff = 0.95f, .qb = 16, .hb = 4},
    {.bm = 64, .bn = 576, .stages = 2, .eff = 0.95f, .qb = 16, .hb = 8},
    {.bm = 64, .bn = 576, .stages = 3, .eff = 0.95f, .qb = 32, .hb = 2},
    {.bm = 64, .bn = 576, .stages = 2, .eff = 0.95f, .qb = 32, .hb = 4},
    {.bm = 64, .bn = 576, .stages = 2, .eff = 0.95f, .qb = 64, .hb = 2},
};
#define N_WGRAD ((int)(sizeof wgrad_configs / sizeof wgrad_configs[0]))
_Static_assert(N_WGRAD <= WGRAD_MAX_CONFIGS, "WGRAD_MAX_CONFIGS covers the table");
int wgrad_n_configs(void) { return N_WGRAD; }
int64_t wgrad_smem(const wgrad_config *c) {
    if (c->qb) /* dy's box of hb x qb pixels, three x boxes of (hb + 2) x qb, 64 channels each */
        return ((int64_t)c->qb * c->hb + 3 * (int64_t)(c->hb + 2) * c->qb) * 64 * 2 * c->stages + 1024;
    return (int64_t)(c->bm + c->bn) * WGRAD_BK * 2 * c->stages + 1024;
}
bool wgrad_config_takes(int cfg, const cnn_conv2d *cv) {
    CNN_ASSERT(cfg >= 0 && cfg < N_WGRAD);
    if (!wgrad_configs[cfg].qb) return true;
    return cv->r == 3 && cv->s == 3 && cv->stride_h == 1 && cv->stride_w == 1;
}
int64_t wgrad_slices(const wgrad_config *c, const cnn_conv2d *cv) {
    if (c->qb) return (int64_t)cv->n * cdiv(cv->p, c->hb) * cdiv(cv->q, c->qb);
    return cdiv((int64_t)cv->n * cv->p * cv->q, WGRAD_BK);
}
int64_t wgrad_tiles(const wgrad_config *c, const cnn_conv2d *cv) {
    if (c->qb) return cdiv(cv->k, c->bm) * (cv->c / 64); /* a CTA: bm channels of dy x all taps of 64 of x */
    return cdiv(cv->k, c->bm) * cdiv((int64_t)cv->r * cv->s * cv->c, c->bn);
}
bool wgrad_config_usable(const cuda_be *cb, int cfg) {
    CNN_ASSERT(cfg >= 0 && cfg < N_WGRAD);
    return wgrad_smem(&wgrad_configs[cfg]) <= cb->smem_optin;
}

static char wgrad_names[N_WGRAD][32];
static pthread_once_t wgrad_names_once = PTHREAD_ONCE_INIT;
static void make_wgrad_names(void) {
    for (int i = 0; i < N_WGRAD; i++) {
        const wgrad_config *c = &wgrad_configs[i];
        if (c->qb) snprintf(wgrad_names[i], sizeof wgrad_names[i], "wgrad_halo%dx%d/s%d", c->qb, c->hb, c->stages);
        else snprintf(wgrad_names[i], sizeof wgrad_names[i], "wgrad%dx%d/s%d", c->bm, c->bn, c->stages);
    }
}
const char *wgrad_config_name(int cfg) {
    CNN_ASSERT(cfg >= 0 && cfg < N_WGRAD);
    pthread_once(&wgrad_names_once, make_wgrad_names);
    return wgrad_names[cfg];
}
static void wgrad_defines(int cfg, char *buf, size_t cap) {
    const wgrad_config *c = &wgrad_configs[cfg];
    if (c->qb) snprintf(buf, cap, "-DHALO_QB=%d -DHALO_HB=%d -DSTAGES=%d", c->qb, c->hb, c->stages);
    else snprintf(buf, cap, "-DBM=%d -DBN=%d -DSTAGES=%d", c->bm, c->bn, c->stages);
}
static const char *const wgrad_wgmma_entries[] = {"conv2d_wgrad_wgmma", "conv2d_wgrad_wgmma_reduce"};
const cuda_family cuda_family_conv2d_wgrad_wgmma = {
    .name = "conv2d_wgrad_wgmma", .file = "conv2d_wgrad_wgmma.cu", .entries = wgrad_wgmma_entries, .n_entries = 2,
    .dtypes = CUDA_DT_HALF, .count = wgrad_n_configs, .defines = wgrad_defines, .config_name = wgrad_config_name,
    .sm90a = true};

unsigned first_smem(const first_config *c) {
    int tp = c->pool ? 2 * c->tp + 1 : c->tp, tq = c->pool ? 2 * c->tq + 1 : c->tq;
    int ih = (tp - 1) * c->stride + c->r, iw = (tq - 1) * c->stride + c->s;
    int pitch = (iw * c->c + 1) & ~1, patch = (ih * pitch + 16 + 7) & ~7;
    return (unsigned)((patch + tp * tq * 72) * 2);
}

bool first_config_fits(const first_config *c, const cnn_conv2d *cv, bool pool) {
    return c->pool == pool && cv->c == c->c && cv->r == c->r && cv->s == c->s && cv->stride_h == c->stride &&
           cv->stride_w == c->stride && cv->pad_h == c->pad && cv->pad_w == c->pad;
}

bool first_config_runs(const cuda_be *cb, int cfg, const cnn_conv2d *cv, bool pool) {
    return first_config_fits(&first_configs[cfg], cv, pool) && first_smem(&first_configs[cfg]) <= (unsigned)cb->smem_optin;
}

/* ---- Winograd (winograd.cu): the three transforms; the GEMMs run on the pipelined rows ---------------------- */

static const char *const wino_entries[] = {"winograd_filter", "winograd_input", "winograd_output"};
static void def_none(int cfg, char *buf, size_t cap) {
    (void)cfg;
    if (cap) buf[0] = 0;
}
const cuda_family cuda_family_winograd = {.name = "winograd", .file = "winograd.cu", .entries = wino_entries,
                                          .n_entries = 3, .dtypes = CUDA_DT_F32, .n_configs = 1, .defines = def_none};
