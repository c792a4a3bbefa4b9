/* conv2d_first.c -- launcher of kernels/conv2d_first.cu: the first layer of a network over a 3-channel image (the
 * ResNet stem 3->64 7x7/2 pad 3, alone or with its 3x3/2 pad 1 max-pool fused; the 3x3/1 pad 1 first conv of VGG
 * and the CIFAR ResNets), F16/BF16 on sm_80+, reading the image as it is instead of through the rewritten
 * operands of conv2d.c's narrow path. Each config below bakes one shape class and one tile into a program; the
 * autotuner times the configs of a problem's class (key "first ..."), the heuristic takes the first.
 *
 * Also here: the conv + max-pool op of the backend table (cuda_conv2d_fprop_pool). The fused kernel runs it
 * where it applies (cuda_conv2d_pool_fusable says so, and the eval plan fuses only then); anything else runs the
 * conv into a staging buffer and the pool kernel after it, so the op is correct for every problem.
 */
#include "cuda/internal.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct first_config {
    const char *name;
    int c, r, s, stride, pad; /* the shape class */
    bool pool;                /* the 3x3/2 pad 1 max-pool fused */
    int tp, tq;               /* tile: conv rows x columns, or with pool the pool's */
    int warps, wn, minb;
} first_config;

/* Tuned winners are stored by index in this table (tune.c): changing a row or its order needs CUDA_TUNE_VERSION
 * bumped. */
static const first_config first_configs[] = {
    /* the ResNet stem with its max-pool: a pool tile of 8x8 (a conv tile of 17x17) or 4x8 (9x17); a warp takes
     * 32 output channels, or 16 (fewer registers: more CTAs per SM, each patch pair loaded twice as often) */
    {"stem7x7s2+pool/p8x8", 3, 7, 7, 2, 3, true, 8, 8, 4, 2, 2},
    {"stem7x7s2+pool/p8x8/n16", 3, 7, 7, 2, 3, true, 8, 8, 4, 4, 3},
    {"stem7x7s2+pool/p4x8", 3, 7, 7, 2, 3, true, 4, 8, 4, 2, 2},
    /* the stem alone */
    {"stem7x7s2/t8x16", 3, 7, 7, 2, 3, false, 8, 16, 4, 2, 2},
    /* 3x3/1 pad 1 over 3 channels */
    {"c3r3s1/t8x32", 3, 3, 3, 1, 1, false, 8, 32, 4, 1, 2},
    {"c3r3s1/t16x16", 3, 3, 3, 1, 1, false, 16, 16, 4, 1, 2},
    {"c3r3s1/t4x32", 3, 3, 3, 1, 1, false, 4, 32, 4, 1, 3},
};
#define N_FIRST ((int)(sizeof first_configs / sizeof first_configs[0]))

static void def_first(int cfg, char *buf, size_t cap) {
    const first_config *c = &first_configs[cfg];
    snprintf(buf, cap, "-DFC=%d -DFR=%d -DFS=%d -DFST=%d -DFPD=%d -DPOOL=%d -D%s=%d -D%s=%d -DWARPS=%d -DWN=%d -DMINB=%d",
             c->c, c->r, c->s, c->stride, c->pad, c->pool, c->pool ? "PP" : "TP", c->tp, c->pool ? "PQ" : "TQ", c->tq,
             c->warps, c->wn, c->minb);
}
static const char *first_name(int cfg) { return first_configs[cfg].name; }
static const char *const first_entries[] = {"conv2d_fprop_first"};
const cuda_family cuda_family_conv2d_fprop_first = {"conv2d_fprop_first", "conv2d_first.cu", first_entries, 1,
                                                    CUDA_DT_F16 | CUDA_DT_BF16, N_FIRST, def_first, first_name};

int cnn_cuda_first_config_count(void) { return N_FIRST; }
const char *cnn_cuda_first_config_name(int cfg) {
    CNN_ASSERT(cfg >= 0 && cfg < N_FIRST);
    return first_configs[cfg].name;
}

/* the kernel's shared memory (conv2d_first.cu's SMEM_BYTES) */
static unsigned first_smem(const first_config *c) {
    int tp = c->pool ? 2 * c->tp + 1 : c->tp, tq = c->pool ? 2 * c->tq + 1 : c->tq;
    int ih = (tp - 1) * c->stride + c->r, iw = (tq - 1) * c->stride + c->s;
    int pitch = (iw * c->c + 1) & ~1, patch = (ih * pitch + 16 + 7) & ~7;
    return (unsigned)((patch + tp * tq * 72) * 2);
}

static bool is_stem_pool(const cnn_conv2d *cv, const cnn_pool2d *pl) {
    return pl->kind == CNN_POOL_MAX && pl->r == 3 && pl->s == 3 && pl->stride_h == 2 && pl->stride_w == 2 &&
           pl->pad_h == 1 && pl->pad_w == 1 && pl->n == cv->n && pl->c == cv->k && pl->h == cv->p && pl->w == cv->q;
}

static bool config_fits(const first_config *c, const cnn_conv2d *cv, bool pool) {
    return c->pool == pool && cv->c == c->c && cv->r == c->r && cv->s == c->s && cv->stride_h == c->stride &&
           cv->stride_w == c->stride && cv->pad_h == c->pad && cv->pad_w == c->pad;
}

/* config cfg runs this problem on this GPU: its shape class, and its shared memory */
static bool config_runs(const cuda_be *cb, int cfg, const cnn_conv2d *cv, bool pool) {
    return config_fits(&first_configs[cfg], cv, pool) && first_smem(&first_configs[cfg]) <= (unsigned)cb->smem_optin;
}

static bool first_takes(const cuda_be *cb, const cnn_conv2d *cv, bool residual, const cnn_pool2d *pl, const void *y) {
    cnn_dtype dt = cb->pub.act_dtype;
    if ((dt != CNN_DTYPE_F16 && dt != CNN_DTYPE_BF16) || cb->cc_major < 8 || cb->no_mma || cb->no_first) return false;
    if (cb->conv_force_cfg >= 0) return false; /* a test forcing a conv2d.c config means that path */
    if (cv->k % 8 != 0 || residual || ((uintptr_t)y & 15) != 0) return false;
    if (pl && !is_stem_pool(cv, pl)) return false;
    for (int i = 0; i < N_FIRST; i++)
        if (config_runs(cb, i, cv, pl != NULL)) return true;
    return false;
}

bool cuda_first_eligible(const cuda_be *cb, const cnn_conv2d *cv, const cnn_epilogue *ep, const cnn_pool2d *pl,
                         const void *y) {
    return first_takes(cb, cv, ep && ep->residual, pl, y);
}

static cnn_status first_launch(cuda_be *cb, const cnn_conv2d *cv, const cnn_epilogue *ep, const cnn_pool2d *pl,
                               const void *x, const void *w, void *y, int cfg) {
    const first_config *c = &first_configs[cfg];
    CNN_ASSERT(config_fits(c, cv, pl != NULL));
    CUfunction f;
    CNN_TRY(cuda_kernel(cb, &cuda_family_conv2d_fprop_first, cb->pub.act_dtype, cfg, 0, &f));
    conv_args a = {0};
    a.n = cv->n, a.c = cv->c, a.h = cv->h, a.w = cv->w, a.k = cv->k, a.r = cv->r, a.s = cv->s, a.p = cv->p, a.q = cv->q;
    a.stride_h = cv->stride_h, a.stride_w = cv->stride_w, a.pad_h = cv->pad_h, a.pad_w = cv->pad_w;
    a.gm = cv->n * cv->p * cv->q, a.gn = cv->k, a.gk = cv->r * cv->s * cv->c;
    a.splits = 1;
    if (pl) a.p2 = pl->p, a.q2 = pl->q;
    a.x = x, a.wt = w, a.out = y;
    if (ep) a.scale = ep->scale, a.shift = ep->shift, a.relu = ep->relu;
    int op = pl ? pl->p : cv->p, oq = pl ? pl->q : cv->q;
    int64_t tiles = (int64_t)((op + c->tp - 1) / c->tp) * ((oq + c->tq - 1) / c->tq) * cv->n * ((cv->k + 63) / 64);
    char what[200];
    snprintf(what, sizeof what, "conv2d_fprop_first[%s %s] n%d c%d h%d w%d k%d r%d s%d stride %dx%d pad %dx%d%s",
             cuda_dtype_str(cb->pub.act_dtype), c->name, cv->n, cv->c, cv->h, cv->w, cv->k, cv->r, cv->s, cv->stride_h,
             cv->stride_w, cv->pad_h, cv->pad_w, pl ? " + max-pool 3x3/2 pad 1" : "");
    if (tiles > INT32_MAX) return cnn_fail(CNN_E_UNSUPPORTED, "%s: %lld tiles, more than the kernel counts", what, (long long)tiles);
    unsigned smem = first_smem(c), threads = (unsigned)(32 * c->warps);
    int per_sm = 1;
    CNN_TRY(cuda_blocks_per_sm(cb, f, what, threads, smem, &per_sm));
    int64_t grid = cb->conv_force_grid > 0 ? cb->conv_force_grid : (int64_t)per_sm * cb->sm_count;
    if (grid > tiles) grid = tiles;
    return cuda_launch_smem(cb, f, what, (unsigned)grid, 1, 1, threads, 1, smem, &a);
}

typedef struct first_tune_ctx {
    cuda_be *cb;
    const cnn_conv2d *cv;
    const cnn_epilogue *ep;
    const cnn_pool2d *pl;
    const void *x, *w;
    int cand[N_FIRST];
} first_tune_ctx;

static cnn_status first_tune_launch(void *ctx, int i, void *y) {
    first_tune_ctx *t = ctx;
    return first_launch(t->cb, t->cv, t->ep, t->pl, t->x, t->w, y, t->cand[i]);
}

/* the config: forced (tests), tuned (cached on disk), or the first of the class */
static cnn_status first_choose(cuda_be *cb, const cnn_conv2d *cv, const cnn_epilogue *ep, const cnn_pool2d *pl,
                               const void *x, const void *w, int *cfg) {
    first_tune_ctx t = {cb, cv, ep, pl, x, w, {0}};
    int n = 0;
    for (int i = 0; i < N_FIRST; i++)
        if (config_runs(cb, i, cv, pl != NULL)) t.cand[n++] = i;
    CNN_ASSERT(n > 0); /* cuda_first_eligible */
    if (cb->first_force_cfg >= 0 && config_runs(cb, cb->first_force_cfg, cv, pl != NULL)) {
        *cfg = cb->first_force_cfg; /* a test's choice, for the problems of its class */
        return CNN_OK;
    }
    *cfg = t.cand[0];
    if (cb->tune == CNN_TUNE_NONE || n == 1) return CNN_OK;
    char key[200];
    snprintf(key, sizeof key, "first %s n%d c%d h%d w%d k%d r%d s%d st%dx%d pad%dx%d%s", cuda_dtype_str(cb->pub.act_dtype),
             cv->n, cv->c, cv->h, cv->w, cv->k, cv->r, cv->s, cv->stride_h, cv->stride_w, cv->pad_h, cv->pad_w,
             pl ? " maxpool3s2p1" : "");
    int got, splits;
    if (cuda_tune_get(cb, key, &got, &splits) && got >= 0 && got < N_FIRST && config_runs(cb, got, cv, pl != NULL)) {
        *cfg = got;
        return CNN_OK;
    }
    if (cb->capturing) return CNN_OK; /* no timing inside a graph capture: the heuristic's */
    double t0 = cnn_now();
    int64_t op = pl ? pl->p : cv->p, oq = pl ? pl->q : cv->q;
    size_t ybytes = (size_t)((int64_t)cv->n * op * oq * cv->k * 2);
    int ids[N_FIRST]; /* the candidates' programs, compiled side by side before any is timed */
    for (int i = 0; i < n; i++) ids[i] = cuda_program_id(&cuda_family_conv2d_fprop_first, cb->pub.act_dtype, t.cand[i]);
    cuda_prepare_programs(cb, ids, n);
    int best;
    float ms;
    cnn_status st = cuda_tune_time(cb, key, n, ybytes, first_tune_launch, &t, &best, &ms, NULL);
    if (st == CNN_OK && best >= 0) {
        *cfg = t.cand[best];
        cuda_tune_put(cb, key, *cfg, 1, ms);
        cb->pub.n_tuned++;
        cnn_log(2, "cnn: tuned %s: %s, %.4f ms (%d candidates, %.0f ms)", key, first_configs[*cfg].name, ms, n,
                (cnn_now() - t0) * 1e3);
    }
    cb->pub.tune_seconds += cnn_now() - t0;
    return st;
}

cnn_status cuda_first_fprop(cnn_backend *be, const cnn_conv2d *cv, const cnn_epilogue *ep, const cnn_pool2d *pl,
                            const void *x, const void *w, void *y) {
    cuda_be *cb = cuda_impl(be);
    CNN_ASSERT(cuda_first_eligible(cb, cv, ep, pl, y));
    if ((int64_t)cv->n * cv->h * cv->w * cv->c > INT32_MAX || (int64_t)cv->n * cv->p * cv->q > INT32_MAX)
        return cnn_fail(CNN_E_UNSUPPORTED, "first-layer convolution too large for 32-bit indices (batch %d)", cv->n);
    int cfg;
    CNN_TRY(first_choose(cb, cv, ep, pl, x, w, &cfg));
    return first_launch(cb, cv, ep, pl, x, w, y, cfg);
}

/* ---- conv + max-pool (the backend table's conv2d_fprop_pool) ---------------------------------------------- */

bool cuda_conv2d_pool_fusable(cnn_backend *be, const cnn_conv2d *cv, const cnn_pool2d *pl, bool residual) {
    return first_takes(cuda_impl(be), cv, residual, pl, NULL); /* y: the arena's buffers are aligned */
}

cnn_status cuda_conv2d_fprop_pool(cnn_backend *be, const cnn_conv2d *cv, const cnn_epilogue *ep, const cnn_pool2d *pl,
                                  const void *x, const void *w, void *y) {
    cuda_be *cb = cuda_impl(be);
    cuda_bind(cb);
    CNN_ASSERT(x && w && y && pl->n == cv->n && pl->c == cv->k && pl->h == cv->p && pl->w == cv->q);
    if (cuda_first_eligible(cb, cv, ep, pl, y)) return cuda_first_fprop(be, cv, ep, pl, x, w, y);
    void *t;
    CNN_TRY(cuda_workspace_slot(cb, CUDA_WS_STAGED, (size_t)((int64_t)cv->n * cv->p * cv->q * cv->k) *
                                                        cnn_dtype_size(be->act_dtype), &t));
    CNN_TRY(cuda_conv2d_fprop(be, cv, ep, x, w, t));
    return cuda_pool2d_forward(be, pl, t, y);
}
