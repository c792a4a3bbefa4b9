/* conv2d_wgrad.c -- the filter gradient on Hopper's tensor cores (kernels/conv2d_wgrad_wgmma.cu): its tile configs,
 * the problems it takes and the launch (the choice of tile and reduction splits is conv2d_choose.c's).
 *
 * dW[K][R*S*C] = sum over the N*P*Q output pixels of dy^T x im2col(x): a GEMM of gm = K rows and gn = R*S*C
 * columns whose reduction is as long as the activations, split over gridDim.y so that the few output tiles of a
 * layer fill the GPU; the partials go to a workspace and a second kernel adds them in split order, so the result
 * depends only on (shape, config, splits), never on timing. Both operands arrive by TMA (dy tiled, x in im2col
 * mode) and are multiplied in wgmma's MN-major layout, so the kernel takes F16/BF16 on sm_90a with C % 64 == 0
 * (a column block of the tile is 64 channels of one filter tap) and K % 8 == 0 (dy's rows 16-byte multiples).
 * The halo configs (3x3 stride 1) launch the same file's halo kernel: dy and x as rank-4 boxes of a block of output
 * rows and columns, x read once per slice for all nine taps (perf-log step 89).
 * The first layer's few input channels (C <= 4) have their own kernel, kernels/conv2d_wgrad_few.cu (mma.sync,
 * sm_80+), launched at the end of this file; cuda_conv2d_wgrad (conv2d.c) runs everything else on the generic
 * kernels.
 */
#include "cuda/conv2d.h"
#include "cuda/hooks.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define WGRAD_RED_LANES 8 /* = RED_LANES of both reduce kernels: 32 outputs x 8 lanes over the splits per block */

/* wgmma and TMA: sm_90a with the driver's tensor-map encoders, F16/BF16 activations */
static bool wgrad_backend_ok(const cuda_be *cb) {
    return cb->cc_major == 9 && cb->cc_minor == 0 && strcmp(cb->arch, "sm_90a") == 0 && !cb->no_tma &&
           (cb->pub.act_dtype == CNN_DTYPE_BF16 || cb->pub.act_dtype == CNN_DTYPE_F16);
}

bool cuda_wgrad_wgmma_fits(const cuda_be *cb, const cnn_conv2d *cv, const void *x, const void *dy) {
    if (!wgrad_backend_ok(cb)) return false;
    if (!conv_tma_fits(cv) || cv->k % 8 || !aligned16(x) || !aligned16(dy)) return false;
    const int64_t npq = (int64_t)cv->n * cv->p * cv->q, rsc = (int64_t)cv->r * cv->s * cv->c;
    return npq <= INT_MAX - WGRAD_BK && rsc * cv->k <= INT_MAX && (int64_t)cv->n * cv->h * cv->w <= INT_MAX;
}

/* cv's wgrad on config cfg with `splits` reduction splits; with groups > 1, over a batch of that many slices of
 * cv->n / groups images (wg_split_of: each slice cut into splits as its own launch cuts it), slice g's sum at dw + g *
 * cnn_sum_rows(K * R * S * C) */
static cnn_status wgrad_launch(cnn_backend *be, const cnn_conv2d *cv, const void *x, const void *dy, float *dw,
                               int cfg, int splits, int groups) {
    cuda_be *cb = cuda_impl(be);
    const wgrad_config *c = &wgrad_configs[cfg];
    CUfunction f, fr = NULL;
    CNN_TRY(cuda_kernel(cb, &cuda_family_conv2d_wgrad_wgmma, be->act_dtype, cfg, WGRAD_MAIN, &f));
    conv_tma_args t;
    memset(&t, 0, sizeof t);
    conv_args *a = &t.a;
    a->n = cv->n, a->c = cv->c, a->h = cv->h, a->w = cv->w, a->k = cv->k, a->r = cv->r, a->s = cv->s;
    a->p = cv->p, a->q = cv->q, a->stride_h = cv->stride_h, a->stride_w = cv->stride_w;
    a->pad_h = cv->pad_h, a->pad_w = cv->pad_w;
    a->gm = cv->k, a->gn = cv->r * cv->s * cv->c, a->gk = cv->n * cv->p * cv->q;
    if (!wgrad_config_takes(cfg, cv))
        return cnn_fail(CNN_E_UNSUPPORTED, "wgrad config %s takes 3x3 stride-1 convs only", wgrad_config_name(cfg));
    cnn_conv2d one = *cv; /* a slice */
    one.n = cv->n / groups, one.choose_n = 0;
    const int64_t slices = wgrad_slices(c, &one), per = cdiv(slices, splits);
    splits = (int)cdiv(slices, per); /* no empty split */
    if ((int64_t)splits * groups > 65535)
        return cnn_fail(CNN_E_UNSUPPORTED, "wgrad: %d slices of %d reduction splits, more than a grid takes", groups,
                        splits);
    a->ktiles_per_split = (int)per, a->splits = splits * groups;
    a->wg_groups = groups, a->wg_group_slices = (int)slices, a->wg_out_stride = cnn_sum_rows((int64_t)a->gm * a->gn);
    a->x = x, a->dy = dy, a->out = dw;
    if (splits > 1) {
        CNN_TRY(cuda_kernel(cb, &cuda_family_conv2d_wgrad_wgmma, be->act_dtype, cfg, WGRAD_REDUCE, &fr));
        void *ws;
        CNN_TRY(cuda_workspace(cb, (size_t)a->splits * (size_t)a->gm * (size_t)a->gn * sizeof(float), &ws));
        a->ws = ws;
    }
    if (c->qb) { /* the halo kernel: dy in boxes of the slice's hb x qb pixels, x in boxes of (hb + 2) x qb */
        CNN_TRY(conv_tma_encode_nhwc(cb, dy, cv->n, cv->p, cv->q, cv->k, c->qb, c->hb, "the output gradient of a wgrad",
                                     &t.b_map));
        CNN_TRY(conv_tma_encode_nhwc(cb, x, cv->n, cv->h, cv->w, cv->c, c->qb, c->hb + 2, "the input of a wgrad", &t.a_map));
    } else {
        /* a 1x1 stride-1 unpadded conv's im2col is x itself: its rows by the tiled map (perf-log step 72) */
        a->x_rows = cv->r == 1 && cv->s == 1 && cv->stride_h == 1 && cv->stride_w == 1 && cv->pad_h == 0 &&
                    cv->pad_w == 0 && !cuda_conv_skipped(cb, "wgrad_x_rows");
        if (a->x_rows)
            CNN_TRY(conv_tma_encode_rows(cb, x, (int64_t)cv->n * cv->h * cv->w, cv->c, WGRAD_BK,
                                         "the input of a 1x1 wgrad", &t.a_map));
        else
            CNN_TRY(conv_tma_encode_x(cb, cv, x, WGRAD_BK, &t.a_map));
        CNN_TRY(conv_tma_encode_rows(cb, dy, a->gk, cv->k, WGRAD_BK, "the output gradient of a wgrad", &t.b_map));
    }
    char what[200];
    snprintf(what, sizeof what, "conv2d_wgrad_wgmma[%s %s] n%d c%d h%d w%d k%d r%d s%d stride %dx%d pad %dx%d splits %d",
             cuda_dtype_str(be->act_dtype), wgrad_config_name(cfg), cv->n, cv->c, cv->h, cv->w, cv->k, cv->r, cv->s,
             cv->stride_h, cv->stride_w, cv->pad_h, cv->pad_w, splits);
    if (groups > 1) snprintf(what + strlen(what), sizeof what - strlen(what), " per slice, %d slices", groups);
    const int64_t tiles = wgrad_tiles(c, cv);
    if (tiles > INT_MAX) return cnn_fail(CNN_E_UNSUPPORTED, "%s: %lld output tiles", what, (long long)tiles);
    CNN_TRY(cuda_launch_smem(cb, f, what, (unsigned)tiles, (unsigned)a->splits, 1, c->qb ? 512 : 384, 1,
                             (unsigned)wgrad_smem(c), &t));
    if (splits > 1) {
        size_t n = strlen(what);
        snprintf(what + n, sizeof what - n, " reduce");
        /* 32 float4s x WGRAD_RED_LANES lanes over the splits per block (the kernel's RED_LANES); y: the slice */
        CNN_TRY(cuda_launch(cb, fr, what, cuda_grid_1d(cb, (long long)a->gm * a->gn / 4 * WGRAD_RED_LANES, 256),
                            (unsigned)groups, 1, 256, 1, a));
    }
    return CNN_OK;
}

/* the tuner's launch of a candidate: x in op->x, dy in op->w, into the scratch dW y */
static cnn_status wgrad_candidate_launch(const conv_operands *op, conv_cand c, void *y) {
    return wgrad_launch(op->be, op->cv, op->x, op->w, y, c.row, c.splits, 1);
}

/* With cv->choose_n (a batch of slices, cnn_conv2d): every slice's sum, on the (config, splits) a slice gets, in one
 * launch where each slice's reduction is whole slices of the config's (the halo configs' are per image; im2col's 64
 * pixels), else one launch per slice. */
cnn_status cuda_wgrad_wgmma(cnn_backend *be, const cnn_conv2d *cv, const void *x, const void *dy, float *dw) {
    cuda_be *cb = cuda_impl(be);
    const conv_operands op = {.be = be, .cv = cv, .x = x, .w = dy};
    conv_cand c;
    CNN_TRY(conv_choose_wgrad(&op, wgrad_candidate_launch, &c));
    const int groups = conv_launch_slices(cv);
    CNN_ASSERT(cv->n % groups == 0 && cv->n / groups == (groups > 1 ? cv->choose_n : cv->n));
    if (groups > 1 && !wgrad_configs[c.row].qb && (int64_t)cv->choose_n * cv->p * cv->q % WGRAD_BK != 0)
        return conv_wgrad_by_slices(be, cv, x, dy, dw, cuda_wgrad_wgmma); /* each slice chooses c again */
    CNN_TRY(wgrad_launch(be, cv, x, dy, dw, c.row, c.splits, groups));
    cb->stats.wgrad_wgmma_launches++;
    return CNN_OK;
}

int cnn_cuda_wgrad_config_count(void) { return wgrad_n_configs(); }
const char *cnn_cuda_wgrad_config_name(int cfg) {
    CNN_ASSERT(cfg >= 0 && cfg < wgrad_n_configs());
    return wgrad_config_name(cfg);
}
bool cnn_cuda_wgrad_config_usable(cnn_backend *be, int cfg) {
    CNN_ASSERT(cfg >= 0 && cfg < wgrad_n_configs());
    const cuda_be *cb = cuda_impl(be);
    return wgrad_backend_ok(cb) && wgrad_config_usable(cb, cfg);
}
bool cnn_cuda_wgrad_config_takes(int cfg, const cnn_conv2d *cv) { return wgrad_config_takes(cfg, cv); }
void cnn_cuda_wgrad_force(cnn_backend *be, int cfg, int splits) {
    CNN_ASSERT(cfg >= -1 && cfg < wgrad_n_configs());
    cuda_be *cb = cuda_impl(be);
    cb->wgrad_force_cfg = cfg, cb->wgrad_force_splits = splits;
}

/* ---- few input channels (the first layer) on mma.sync: kernels/conv2d_wgrad_few.cu ----------------------------- */

#define FEW_PIX 64   /* = kernels/conv2d_wgrad_few.cu */
#define FEW_THREADS 256

bool cuda_wgrad_few_fits(const cuda_be *cb, const cnn_conv2d *cv, const void *dy) {
    const cnn_dtype dt = cb->pub.act_dtype;
    if ((dt != CNN_DTYPE_F16 && dt != CNN_DTYPE_BF16) || cb->cc_major < 8) return false;
    if (cuda_conv_skipped(cb, "wgrad_few")) return false;
    const int64_t cols = (int64_t)cv->r * cv->s * cv->c;
    if (cv->k > 64 || cv->k % 8 || cv->c > 4 || cols > cuda_wgrad_few_cols[WGRAD_FEW_N_CFG - 1]) return false;
    if (!aligned16(dy)) return false;
    return (int64_t)cv->n * cv->p * cv->q <= INT_MAX - FEW_PIX && (int64_t)cv->n * cv->h * cv->w * cv->c <= INT_MAX;
}

cnn_status cuda_wgrad_few(cnn_backend *be, const cnn_conv2d *cv, const void *x, const void *dy, float *dw) {
    cuda_be *cb = cuda_impl(be);
    CNN_ASSERT(cuda_wgrad_few_fits(cb, cv, dy));
    CUfunction f, fr;
    conv_args a = conv_make_args(cv, PASS_WGRAD, FEW_PIX); /* gm = K, gn = R*S*C */
    /* with choose_n, a batch of slices in one launch (gridDim.y), each slice's sum into its row */
    const int groups = conv_launch_slices(cv);
    CNN_ASSERT(cv->n % groups == 0 && groups <= 65535); /* gridDim.y */
    a.gk = cv->n / groups * cv->p * cv->q; /* a slice's pixels */
    a.wg_groups = groups, a.wg_out_stride = cnn_sum_rows((int64_t)a.gm * a.gn);
    int cfg = 0;
    while (cuda_wgrad_few_cols[cfg] < a.gn) cfg++; /* the narrowest tile: more CTAs per SM (perf-log step 93) */
    CNN_TRY(cuda_kernel(cb, &cuda_family_conv2d_wgrad_few, be->act_dtype, cfg, WGRAD_MAIN, &f));
    a.x = x, a.dy = dy, a.out = dw;
    char what[200];
    snprintf(what, sizeof what, "conv2d_wgrad_few[%s, cols%d] n%d c%d h%d w%d k%d r%d s%d stride %dx%d pad %dx%d",
             cuda_dtype_str(be->act_dtype), cuda_wgrad_few_cols[cfg], cv->n, cv->c, cv->h, cv->w, cv->k, cv->r, cv->s,
             cv->stride_h, cv->stride_w, cv->pad_h, cv->pad_w);
    if (groups > 1) snprintf(what + strlen(what), sizeof what - strlen(what), " per slice, %d slices", groups);
    /* as many CTAs as fit at once (each holds all of dW), each a contiguous range of 64-pixel blocks; with choice_n
     * a slice's share of them among the global batch's choice_n / choose_n slices (the same on every rank: one
     * launch over the slices, not one per slice, perf-log step 122). The CTA count depends on the GPU and those
     * counts only, so the reduction order does too. */
    int per_sm = 1;
    CNN_TRY(cuda_blocks_per_sm(cb, f, what, FEW_THREADS, 0, &per_sm));
    const int64_t blocks = cdiv(a.gk, FEW_PIX);
    int64_t ctas = (int64_t)per_sm * cb->sm_count / conv_choice_slices(cv);
    if (ctas > blocks) ctas = blocks;
    if (ctas < 1) ctas = 1;
    const int64_t per = cdiv(blocks, ctas);
    ctas = cdiv(blocks, per); /* no CTA without a block */
    a.ktiles_per_split = (int)per, a.splits = (int)ctas;
    if (ctas > 1) {
        CNN_TRY(cuda_kernel(cb, &cuda_family_conv2d_wgrad_few, be->act_dtype, cfg, WGRAD_REDUCE, &fr));
        void *ws;
        CNN_TRY(cuda_workspace(cb, (size_t)groups * (size_t)ctas * (size_t)a.gm * (size_t)a.gn * sizeof(float), &ws));
        a.ws = ws;
    }
    CNN_TRY(cuda_launch(cb, f, what, (unsigned)ctas, (unsigned)groups, 1, FEW_THREADS, 1, &a));
    if (ctas > 1) {
        size_t n = strlen(what);
        snprintf(what + n, sizeof what - n, " reduce of %lld CTAs", (long long)ctas);
        CNN_TRY(cuda_launch(cb, fr, what, cuda_grid_1d(cb, (long long)a.gm * a.gn * WGRAD_RED_LANES, 256),
                            (unsigned)groups, 1, 256, 1, &a));
    }
    cb->stats.wgrad_few_launches++;
    return CNN_OK;
}
