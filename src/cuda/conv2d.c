/* conv2d.c -- the convolution ops of the backend table: which path runs a problem, and the generic kernels.
 *
 * cuda_conv2d_fprop routes a forward problem, first match wins:
 *   a first layer over a 3-channel image      conv2d_first.c (F16/BF16, sm_80+)
 *   a narrow first layer (C < 8)              conv2d_rewrite.c, then the fast rows
 *   what the fast rows take (C, K multiples   F32 3x3/1: Winograd or direct (conv2d_choose.c), winograd.c;
 *     of 8, 16-byte aligned tensors)          otherwise conv2d_fast.c, the row chosen by conv2d_choose.c
 *   anything else                             kernels/conv2d.cu, the generic implicit GEMM (below)
 * dgrad takes the fast rows by phases (conv2d_dgrad.c) wherever they take each phase, the generic kernels
 * elsewhere; wgrad runs on wgmma (conv2d_wgrad.c) where it takes the problem, else on the generic kernels. Also here: conv + max-pool (fused by conv2d_first.c where it applies, else the conv into
 * a staging buffer and the pool kernel after it, so the op is correct for every problem).
 *
 * wgrad reduces over N*P*Q, usually far longer than the output is wide, so it splits the reduction over
 * gridDim.z; each split writes a partial tile to the workspace and conv2d_wgrad_reduce adds them in split order:
 * deterministic. The number of splits depends only on the shape and the GPU's SM count.
 */
#include "cuda/conv2d.h"

#include <stdio.h>
#include <string.h>

/* The static_asserts of conv2d.cu, checked on the host before a launch can fail for them. */
static void check_config(const conv_row *c) {
    int nt = conv_row_threads(c);
    if (conv_is(c, CNN_CUDA_CONV_MMA))
        CNN_ASSERT((c->bm / c->wm) % 16 == 0 && (c->bn / c->wn) % 8 == 0 && c->bk % 16 == 0);
    else
        CNN_ASSERT(c->bm % c->wm == 0 && c->bn % c->wn == 0);
    CNN_ASSERT(nt % 32 == 0 && nt <= 1024);
    CNN_ASSERT((c->bm * c->bk) % nt == 0 && (c->bk * c->bn) % nt == 0);
    CNN_ASSERT(nt % c->bk == 0 && nt % c->bm == 0 && nt % c->bn == 0);
}

static void label(char *buf, size_t cap, const char *pass, cnn_dtype dt, int v, const cnn_conv2d *cv) {
    snprintf(buf, cap, "conv2d_%s[%s %s] n%d c%d h%d w%d k%d r%d s%d stride %dx%d pad %dx%d", pass, cuda_dtype_str(dt),
             conv_row_name(v), cv->n, cv->c, cv->h, cv->w, cv->k, cv->r, cv->s, cv->stride_h, cv->stride_w, cv->pad_h,
             cv->pad_w);
}

/* variant and kernel of a pass */
static cnn_status prepare(cnn_backend *be, const cnn_conv2d *cv, int pass, int entry, int *v_out, CUfunction *f) {
    cuda_be *cb = cuda_impl(be);
    CNN_TRY(conv_check_problem(cv, pass));
    int v = cuda_conv_pick(cb, cv, pass);
    if (!conv_row_usable(cb, v))
        return cnn_fail(CNN_E_UNSUPPORTED, "conv variant %s cannot run %s activations on sm_%d%d", conv_row_name(v),
                        cuda_dtype_str(be->act_dtype), cb->cc_major, cb->cc_minor);
    check_config(&conv_rows[v]);
    *v_out = v;
    int cfg;
    const cuda_family *fam = conv_row_family(cb, v, pass, &cfg);
    return cuda_kernel(cb, fam, be->act_dtype, cfg, entry, f);
}

/* Winograd's candidates as conv2d_choose.c times them: 0 the direct kernels, 1 Winograd */
static cnn_status algo_timed(const conv_operands *op, conv_cand c, void *y) {
    return c.row == 0 ? conv_fast_fprop_checked(op->be, op->cv, op->ep, op->x, op->w, y)
                      : cuda_winograd_fprop(op->be, op->cv, op->ep, op->x, op->w, y);
}

cnn_status cuda_conv2d_fprop(cnn_backend *be, const cnn_conv2d *cv, const cnn_epilogue *ep, const void *x,
                             const void *w, void *y) {
    cuda_be *cb = cuda_impl(be);
    cuda_bind(cb);
    CNN_ASSERT(x && w && y);
    CNN_ASSERT(!ep || !ep->stats || (!ep->scale && !ep->shift && !ep->residual && !ep->relu));
    if (ep && ep->stats) ep->stats->chunks = 0; /* until a stats program writes them (conv2d_fast.c) */
    int v;
    CUfunction f;
    if (cuda_first_eligible(cb, cv, ep, NULL, y)) { /* a first layer over a 3-channel image: conv2d_first.c */
        CNN_TRY(conv_check_problem(cv, PASS_FPROP));
        return cuda_first_fprop(be, cv, ep, NULL, x, w, y);
    }
    int narrow = conv_narrow_kind(cb, cv, ep, y);
    if (narrow != NARROW_NONE) return conv_narrow_fprop(be, cv, ep, x, w, y, narrow);
    if (conv_fast_eligible(cb, cv, ep, x, w, y)) {
        CNN_TRY(conv_check_problem(cv, PASS_FPROP));
        bool wino; /* F32 3x3/1: Winograd where chosen (winograd.c), which runs its GEMMs on the same kernels */
        const conv_operands op = {.be = be, .cv = cv, .ep = ep, .x = x, .w = w};
        CNN_TRY(conv_choose_winograd(&op, algo_timed, &wino));
        if (wino) return cuda_winograd_fprop(be, cv, ep, x, w, y);
        return conv_fast_fprop(be, cv, ep, x, w, y);
    }
    CNN_TRY(prepare(be, cv, PASS_FPROP, 0, &v, &f));
    const conv_row *c = &conv_rows[v];
    conv_args a = conv_make_args(cv, PASS_FPROP, c->bk);
    a.x = x, a.wt = w, a.out = y;
    if (ep) {
        a.scale = ep->scale, a.shift = ep->shift, a.residual = ep->residual;
        a.relu = ep->relu;
    }
    char what[200];
    label(what, sizeof what, "fprop", be->act_dtype, v, cv);
    return cuda_launch(cb, f, what, (unsigned)cdiv(a.gm, c->bm), (unsigned)cdiv(a.gn, c->bn), 1,
                       (unsigned)conv_row_threads(c), 1, &a);
}

cnn_status cuda_conv2d_dgrad(cnn_backend *be, const cnn_conv2d *cv, const void *dy, const void *w, void *dx,
                             bool accumulate) {
    cuda_be *cb = cuda_impl(be);
    cuda_bind(cb);
    CNN_ASSERT(dy && w && dx);
    if (cuda_dgrad_phases_fits(cb, cv, dy, dx, accumulate)) return cuda_dgrad_phases(be, cv, dy, w, dx, accumulate);
    int v;
    CUfunction f;
    CNN_TRY(prepare(be, cv, PASS_DGRAD, 0, &v, &f));
    const conv_row *c = &conv_rows[v];
    conv_args a = conv_make_args(cv, PASS_DGRAD, c->bk);
    a.dy = dy, a.wt = w, a.out = dx;
    a.accumulate = accumulate;
    char what[200];
    label(what, sizeof what, "dgrad", be->act_dtype, v, cv);
    return cuda_launch(cb, f, what, (unsigned)cdiv(a.gm, c->bm), (unsigned)cdiv(a.gn, c->bn), 1,
                       (unsigned)conv_row_threads(c), 1, &a);
}

/* dgrad, overwriting, then the backward of the ReLU whose output relu_y is the conv's input, then dx's sums where
 * dx_sum is set (the backend table's conv2d_dgrad_relu): in the dgrad's epilogue where conv2d_dgrad.c can
 * (cuda_dgrad_phases_relu), else a pass over dx for each; CNN_CONV_SKIP=dgrad_relu always takes the passes (the
 * A/B) */
cnn_status cuda_conv2d_dgrad_relu(cnn_backend *be, const cnn_conv2d *cv, const void *dy, const void *w,
                                  const void *relu_y, void *dx, float *dx_sum) {
    cuda_be *cb = cuda_impl(be);
    cuda_bind(cb);
    CNN_ASSERT(relu_y);
    if (!cuda_conv_skipped(cb, "dgrad_relu") && cuda_dgrad_phases_fits(cb, cv, dy, dx, false))
        return cuda_dgrad_phases_relu(be, cv, dy, w, relu_y, dx, dx_sum);
    const int64_t m = (int64_t)cv->n * cv->h * cv->w;
    CNN_TRY(cuda_conv2d_dgrad(be, cv, dy, w, dx, false));
    CNN_TRY(cuda_relu_backward(be, m * cv->c, relu_y, dx, dx, false));
    return dx_sum ? cuda_channel_sum(be, m, cv->c, dx, dx_sum) : CNN_OK;
}

#define WGRAD_WS_CAP ((int64_t)256 << 20) /* bytes of split partials at most */

cnn_status cuda_conv2d_wgrad(cnn_backend *be, const cnn_conv2d *cv, const void *x, const void *dy, float *dw) {
    cuda_be *cb = cuda_impl(be);
    cuda_bind(cb);
    CNN_ASSERT(x && dy && dw);
    const bool generic_forced = cb->conv_force_cfg >= 0 && cb->conv_force_cfg < conv_n_generic();
    if (!generic_forced && cuda_wgrad_wgmma_fits(cb, cv, x, dy)) return cuda_wgrad_wgmma(be, cv, x, dy, dw);
    if (!generic_forced && cuda_wgrad_few_fits(cb, cv, dy)) return cuda_wgrad_few(be, cv, x, dy, dw);
    if (cv->choose_n > 0 && cv->choose_n < cv->n) /* a batch of slices (cnn_conv2d): each slice's sum alone */
        return conv_wgrad_by_slices(be, cv, x, dy, dw, cuda_conv2d_wgrad);
    int v;
    CUfunction f, fr = NULL;
    CNN_TRY(prepare(be, cv, PASS_WGRAD, WGRAD_MAIN, &v, &f));
    const conv_row *c = &conv_rows[v];
    conv_args a = conv_make_args(cv, PASS_WGRAD, c->bk);
    a.x = x, a.dy = dy, a.out = dw;

    /* reduction splits: about 4 CTAs per SM, at least 4 BK-slices per split, partials within WGRAD_WS_CAP */
    int64_t ktiles = cdiv(a.gk, c->bk), tiles = cdiv(a.gm, c->bm) * cdiv(a.gn, c->bn);
    int64_t splits = cdiv(4LL * cb->sm_count, tiles);
    int64_t out_bytes = (int64_t)a.gm * a.gn * (int64_t)sizeof(float);
    if (splits > ktiles / 4) splits = ktiles / 4;
    if (splits > WGRAD_WS_CAP / out_bytes) splits = WGRAD_WS_CAP / out_bytes;
    if (splits > 65535) splits = 65535;
    if (splits < 1) splits = 1;
    int64_t kps = cdiv(ktiles, splits);
    splits = cdiv(ktiles, kps); /* no empty split */
    a.ktiles_per_split = (int)kps;
    a.splits = (int)splits;
    if (splits > 1) {
        int cfg;
        const cuda_family *fam = conv_row_family(cb, v, PASS_WGRAD, &cfg);
        CNN_TRY(cuda_kernel(cb, fam, be->act_dtype, cfg, WGRAD_REDUCE, &fr));
        void *ws;
        CNN_TRY(cuda_workspace(cb, (size_t)(splits * out_bytes), &ws));
        a.ws = ws;
    }
    char what[220];
    label(what, sizeof what, "wgrad", be->act_dtype, v, cv);
    CNN_TRY(cuda_launch(cb, f, what, (unsigned)cdiv(a.gm, c->bm), (unsigned)cdiv(a.gn, c->bn), (unsigned)splits,
                        (unsigned)conv_row_threads(c), 1, &a));
    if (splits > 1) {
        size_t n = strlen(what);
        snprintf(what + n, sizeof what - n, " reduce of %lld splits", (long long)splits);
        CNN_TRY(cuda_launch(cb, fr, what, cuda_grid_1d(cb, (long long)a.gm * a.gn, 256), 1, 1, 256, 1, &a));
    }
    return CNN_OK;
}

/* ---- conv + max-pool (the backend table's conv2d_fprop_pool) ---------------------------------------------- */

bool cuda_conv2d_pool_fusable(cnn_backend *be, const cnn_conv2d *cv, const cnn_pool2d *pl, bool residual) {
    return cuda_first_takes(cuda_impl(be), cv, residual, pl, NULL); /* y: the arena's buffers are aligned */
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
