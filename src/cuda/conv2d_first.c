/* conv2d_first.c -- launcher of kernels/conv2d_first.cu: the first layer of a network over a 3-channel image (the
 * ResNet stem 3->64 7x7/2 pad 3, alone or with its 3x3/2 pad 1 max-pool fused; the 3x3/1 pad 1 first conv of VGG
 * and the CIFAR ResNets), F16/BF16 on sm_80+, reading the image as it is instead of through the rewritten
 * operands of conv2d_rewrite.c. Each config (first_configs, conv2d_configs.c) bakes one shape class and one tile
 * into a program; conv2d_choose.c picks one (tuned under key "first ...", else the first of the class).
 */
#include "cuda/conv2d.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static bool is_stem_pool(const cnn_conv2d *cv, const cnn_pool2d *pl) {
    return pl->kind == CNN_POOL_MAX && pl->r == 3 && pl->s == 3 && pl->stride_h == 2 && pl->stride_w == 2 &&
           pl->pad_h == 1 && pl->pad_w == 1 && pl->n == cv->n && pl->c == cv->k && pl->h == cv->p && pl->w == cv->q;
}

bool cuda_first_takes(const cuda_be *cb, const cnn_conv2d *cv, bool residual, const cnn_pool2d *pl, const void *y) {
    cnn_dtype dt = cb->pub.act_dtype;
    if ((dt != CNN_DTYPE_F16 && dt != CNN_DTYPE_BF16) || cb->cc_major < 8) return false;
    if (cb->conv_force_cfg >= 0) return false; /* a test forcing a conv2d.c config means that path */
    if (cv->k % 8 != 0 || residual || ((uintptr_t)y & 15) != 0) return false;
    if (pl && !is_stem_pool(cv, pl)) return false;
    for (int i = 0; i < first_n_configs(); i++)
        if (first_config_runs(cb, i, cv, pl != NULL)) return true;
    return false;
}

bool cuda_first_eligible(const cuda_be *cb, const cnn_conv2d *cv, const cnn_epilogue *ep, const cnn_pool2d *pl,
                         const void *y) {
    return cuda_first_takes(cb, cv, ep && ep->residual, pl, y);
}

static cnn_status first_launch(cuda_be *cb, const cnn_conv2d *cv, const cnn_epilogue *ep, const cnn_pool2d *pl,
                               const void *x, const void *w, void *y, int cfg) {
    const first_config *c = &first_configs[cfg];
    CNN_ASSERT(first_config_fits(c, cv, pl != NULL));
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

static cnn_status first_timed(const conv_operands *op, conv_cand c, void *y) {
    return first_launch(cuda_impl(op->be), op->cv, op->ep, op->pl, op->x, op->w, y, c.row);
}

cnn_status cuda_first_fprop(cnn_backend *be, const cnn_conv2d *cv, const cnn_epilogue *ep, const cnn_pool2d *pl,
                            const void *x, const void *w, void *y) {
    cuda_be *cb = cuda_impl(be);
    CNN_ASSERT(cuda_first_eligible(cb, cv, ep, pl, y));
    if ((int64_t)cv->n * cv->h * cv->w * cv->c > INT32_MAX || (int64_t)cv->n * cv->p * cv->q > INT32_MAX)
        return cnn_fail(CNN_E_UNSUPPORTED, "first-layer convolution too large for 32-bit indices (batch %d)", cv->n);
    const conv_operands op = {.be = be, .cv = cv, .ep = ep, .pl = pl, .x = x, .w = w};
    int cfg;
    CNN_TRY(conv_choose_first(&op, first_timed, &cfg));
    return first_launch(cb, cv, ep, pl, x, w, y, cfg);
}
