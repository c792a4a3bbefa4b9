/* winograd.c -- launcher of kernels/winograd.cu: true fp32 3x3 stride-1 forward convolutions as Winograd
 * F(2x2, 3x3). The filter, input and output transforms are that file's kernels; the 16 products summed over C
 * are 16 GEMMs M[e] (T x K) = V[e] (T x C) * U[e]^T, each run as a 1x1 convolution over T "images" of one pixel
 * on the pipelined rows' FFMA programs (conv_fast_fprop_checked: tuned and cached like any layer). 2.25x fewer
 * multiplies than the direct convolution, for 4x the input and the output in memory (V and M) and a little
 * rounding (every transform entry is 0, +-1 or +-1/2). Where it runs instead of the direct kernels is
 * conv2d_choose.c's (conv_choose_winograd). The batch is processed in chunks so that V, U and M stay under
 * WINO_WS_CAP bytes of workspace.
 */
#include "cuda/conv2d.h"

#include <stdio.h>
#include <string.h>

cnn_status cuda_winograd_fprop(cnn_backend *be, const cnn_conv2d *cv, const cnn_epilogue *ep, const void *x,
                               const void *w, void *y) {
    cuda_be *cb = cuda_impl(be);
    const int tpn = (cv->p + 1) / 2, tqn = (cv->q + 1) / 2;
    const size_t ubytes = 16 * (size_t)cv->k * cv->c * 4, per_image = 16 * (size_t)tpn * tqn * (cv->c + cv->k) * 4;
    const int nb0 = (int)((WINO_WS_CAP - ubytes) / per_image); /* images per chunk */
    int nb = nb0 > cv->n ? cv->n : nb0;
    CNN_ASSERT(nb >= 1); /* conv_choose_winograd checked that one image fits */
    const size_t vbytes = 16 * (size_t)nb * tpn * tqn * cv->c * 4;
    void *buf;
    CNN_TRY(cuda_workspace_slot(cb, CUDA_WS_OPERANDS, ubytes + nb * per_image, &buf));
    float *u = buf, *v = (float *)((char *)buf + ubytes), *m = (float *)((char *)buf + ubytes + vbytes);
    CUfunction ff, fi, fo;
    CNN_TRY(cuda_kernel(cb, &cuda_family_winograd, be->act_dtype, 0, WINO_FILTER, &ff));
    CNN_TRY(cuda_kernel(cb, &cuda_family_winograd, be->act_dtype, 0, WINO_INPUT, &fi));
    CNN_TRY(cuda_kernel(cb, &cuda_family_winograd, be->act_dtype, 0, WINO_OUTPUT, &fo));
    char what[160];
    conv_args a = {0};
    a.n = cv->n, a.c = cv->c, a.h = cv->h, a.w = cv->w, a.k = cv->k, a.r = 3, a.s = 3, a.p = cv->p, a.q = cv->q;
    a.stride_h = a.stride_w = 1, a.pad_h = cv->pad_h, a.pad_w = cv->pad_w, a.splits = 1;
    a.wt = w, a.out = u;
    snprintf(what, sizeof what, "winograd_filter k%d c%d", cv->k, cv->c);
    CNN_TRY(cuda_launch(cb, ff, what, cuda_grid_1d(cb, (long long)cv->k * cv->c, 256), 1, 1, 256, 1, &a));
    const size_t xs = (size_t)cv->h * cv->w * cv->c, ys = (size_t)cv->p * cv->q * cv->k; /* per image */
    for (int n0 = 0; n0 < cv->n; n0 += nb) {
        const int n = cv->n - n0 < nb ? cv->n - n0 : nb;
        const long long tiles = (long long)n * tpn * tqn;
        conv_args s = a;
        s.n = n, s.x = (const float *)x + n0 * xs, s.out = v;
        snprintf(what, sizeof what, "winograd_input n%d c%d h%d w%d pad %dx%d", n, cv->c, cv->h, cv->w, cv->pad_h,
                 cv->pad_w);
        CNN_TRY(cuda_launch(cb, fi, what, cuda_grid_1d(cb, tiles * (cv->c / 4), 256), 1, 1, 256, 1, &s));
        /* the 16 GEMMs: a 1x1 convolution over `tiles` one-pixel images, no epilogue */
        cnn_conv2d g = {.n = (int)tiles, .c = cv->c, .h = 1, .w = 1, .k = cv->k, .r = 1, .s = 1, .stride_h = 1,
                        .stride_w = 1, .pad_h = 0, .pad_w = 0, .p = 1, .q = 1};
        if (cv->choose_n > 0) { /* the GEMM chosen for conv_choice_view's images, chunked as this loop chunks them */
            const int cn = conv_choice_view(cv).n;
            g.choose_n = (cn < nb0 ? cn : nb0) * tpn * tqn;
        }
        for (int e = 0; e < 16; e++)
            CNN_TRY(conv_fast_fprop_checked(be, &g, NULL, v + (size_t)e * tiles * cv->c, u + (size_t)e * cv->k * cv->c,
                                       m + (size_t)e * tiles * cv->k));
        s.x = m, s.out = (float *)y + n0 * ys;
        s.scale = ep ? ep->scale : NULL, s.shift = ep ? ep->shift : NULL, s.relu = ep && ep->relu;
        s.residual = ep && ep->residual ? (const float *)ep->residual + n0 * ys : NULL;
        snprintf(what, sizeof what, "winograd_output n%d k%d p%d q%d", n, cv->k, cv->p, cv->q);
        CNN_TRY(cuda_launch(cb, fo, what, cuda_grid_1d(cb, tiles * (cv->k / 4), 256), 1, 1, 256, 1, &s));
    }
    return CNN_OK;
}
