/* conv2d_rewrite.c -- narrow first layers (C < 8) on the fast forward rows after a rewrite of their operands, each
 * rewrite a small kernel of the pipelined family (kernels/conv2d_pipelined.cu) writing into the operands workspace on
 * every call (the filter may be training): space-to-depth for a stride-2 one, zero-padded channels otherwise. (dgrad's
 * filter rewrite is conv2d_dgrad.c's.)
 */
#include "cuda/conv2d.h"

#include <stdio.h>

/* ---- narrow first layers (C < 8) on the fast kernels, through rewritten operands --------------------------------
 * The tensor-core kernel needs C % 8 == 0. Two rewrites make a first layer fit, both small kernels writing into
 * the operands workspace on every call (the filter may be training):
 *   space-to-depth, for C <= 4 at stride 2x2 (3->64 7x7/2 pad 3 in every ResNet). Folding each 2x2 block of
 *     input pixels into channels turns it into a stride-1 convolution: with o = pad % 2 and A = (pad + 1) / 2,
 *     write the filter row r = 2a + b - o (b = 0, 1); then the input row 2p - pad + r = 2(p + a - A) + b, so
 *         y[p][q] = sum over a, a', (b, b', c) of x2[p + a - A][q + a' - A'][(b, b', c)] * w2[a][a'][(b, b', c)]
 *     with x2[i][j][(b*2 + b')*4 + c] = x[2i + b][2j + b'][c] (H2 = ceil(H/2)), w2[a][a'][...] = w[2a + b - o]
 *     [...] (zero where no such tap or channel), filter R2 = (R - 1 + o) / 2 + 1: stride 1, padding A on the
 *     top/left, the bottom/right edge masked by the kernel's bounds check, the same P x Q output. For 7x7/2 pad 3:
 *     4x4 over 16 channels, a reduction of 256 (147 useful) instead of 392 with the channels padded to 8;
 *   channel padding, for any other C < 8 (VGG's 3->64 3x3/1): x and w with their channels zero-padded to 8. */
int conv_narrow_kind(const cuda_be *cb, const cnn_conv2d *cv, const cnn_epilogue *ep, const void *y) {
    if (cv->c >= 8 || cv->k % 8 != 0) return NARROW_NONE;
    if (!conv_row_usable(cb, conv_n_generic())) return NARROW_NONE; /* the pipelined rows: sm_80+, tensor cores on */
    if (cb->conv_force_cfg >= 0 && cb->conv_force_cfg < conv_n_generic()) return NARROW_NONE;
    if (!aligned16(y) || (ep && ep->residual && !aligned16(ep->residual))) return NARROW_NONE;
    return cv->c <= 4 && cv->stride_h == 2 && cv->stride_w == 2 ? NARROW_S2D : NARROW_PAD;
}

/* the problem the tensor-core kernel runs instead */
static cnn_conv2d narrow_problem(const cnn_conv2d *cv, int kind) {
    cnn_conv2d s = *cv;
    if (kind == NARROW_PAD) {
        s.c = 8;
        return s;
    }
    s.c = 16, s.h = (cv->h + 1) / 2, s.w = (cv->w + 1) / 2;
    s.r = (cv->r - 1 + cv->pad_h % 2) / 2 + 1, s.s = (cv->s - 1 + cv->pad_w % 2) / 2 + 1;
    s.stride_h = s.stride_w = 1;
    s.pad_h = (cv->pad_h + 1) / 2, s.pad_w = (cv->pad_w + 1) / 2;
    return s; /* p, q: the original's (not (h + 2 pad - r) + 1: the bottom/right padding is smaller) */
}

cnn_status conv_narrow_fprop(cnn_backend *be, const cnn_conv2d *cv, const cnn_epilogue *ep, const void *x,
                               const void *w, void *y, int kind) {
    cuda_be *cb = cuda_impl(be);
    CNN_TRY(conv_check_problem(cv, PASS_FPROP));
    cnn_conv2d s = narrow_problem(cv, kind);
    size_t xb = (size_t)s.n * s.h * s.w * s.c * act_size(cb), wb = (size_t)s.k * s.r * s.s * s.c * act_size(cb);
    xb = (xb + 255) & ~(size_t)255;
    void *buf;
    CNN_TRY(cuda_workspace_slot(cb, CUDA_WS_OPERANDS, xb + wb, &buf));
    void *xs = buf, *ws = (char *)buf + xb;
    char what[200];
    if (kind == NARROW_S2D) {
        CUfunction fx, fw;
        CNN_TRY(cuda_kernel(cb, conv_pipelined_family(cb), be->act_dtype, 0, PIPE_S2D_INPUT, &fx));
        CNN_TRY(cuda_kernel(cb, conv_pipelined_family(cb), be->act_dtype, 0, PIPE_S2D_FILTER, &fw));
        conv_args a = conv_make_args(cv, PASS_FPROP, 32);
        a.x = x, a.wt = w, a.out = xs;
        snprintf(what, sizeof what, "conv2d_s2d_input n%d c%d h%d w%d", cv->n, cv->c, cv->h, cv->w);
        CNN_TRY(cuda_launch(cb, fx, what, cuda_grid_1d(cb, (long long)s.n * s.h * s.w, 256), 1, 1, 256, 1, &a));
        a.out = ws;
        snprintf(what, sizeof what, "conv2d_s2d_filter k%d c%d r%d s%d", cv->k, cv->c, cv->r, cv->s);
        CNN_TRY(cuda_launch(cb, fw, what, cuda_grid_1d(cb, (long long)s.k * s.r * s.s * 16, 256), 1, 1, 256, 1, &a));
    } else {
        CUfunction fp;
        CNN_TRY(cuda_kernel(cb, conv_pipelined_family(cb), be->act_dtype, 0, PIPE_PAD_CHANNELS, &fp));
        conv_args a = {0};
        a.n = cv->n, a.h = cv->h, a.w = cv->w, a.c = cv->c, a.x = x, a.out = xs; /* rows = N*H*W */
        snprintf(what, sizeof what, "conv2d_pad_channels input n%d c%d h%d w%d", cv->n, cv->c, cv->h, cv->w);
        CNN_TRY(cuda_launch(cb, fp, what, cuda_grid_1d(cb, (long long)cv->n * cv->h * cv->w, 256), 1, 1, 256, 1, &a));
        a.n = cv->k, a.h = cv->r, a.w = cv->s, a.x = w, a.out = ws; /* rows = K*R*S */
        snprintf(what, sizeof what, "conv2d_pad_channels filter k%d c%d r%d s%d", cv->k, cv->c, cv->r, cv->s);
        CNN_TRY(cuda_launch(cb, fp, what, cuda_grid_1d(cb, (long long)cv->k * cv->r * cv->s, 256), 1, 1, 256, 1, &a));
    }
    return conv_fast_fprop(be, &s, ep, xs, ws, y);
}
