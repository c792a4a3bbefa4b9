/* winograd.c -- launcher of kernels/winograd.cu: true fp32 3x3 stride-1 forward convolutions as Winograd
 * F(2x2, 3x3). The filter, input and output transforms are that file's kernels; the 16 products summed over C
 * are 16 GEMMs M[e] (T x K) = V[e] (T x C) * U[e]^T, each run as a 1x1 convolution over T "images" of one pixel
 * on conv2d_tc.cu's FFMA programs (cuda_conv_tc_fprop: tuned and cached like any layer). 2.25x fewer multiplies
 * than the direct convolution, for 4x the input and the output in memory (V and M) and a little rounding
 * (every transform entry is 0, +-1 or +-1/2).
 *
 * Where: F32 activations without TF32, 3x3, stride 1, where conv2d_tc.cu takes the problem (C % 4 == 0,
 * K % 8 == 0, 16-byte aligned tensors, no generic config forced). Whether a layer runs here or on the direct
 * kernels is a tuned choice: with tuning on (fast or full, not while a graph is being captured) both are timed,
 * each with its own tuned GEMM / tile config, and the winner is cached under the layer's "fprop_algo" key like
 * any tile config, for layers with C, K >= 32, an output of 4x4 or more and 1024 2x2 tiles or more in the batch
 * (below that the transforms' waste and the 16 small launches cannot pay). Without tuning (--tune none,
 * deterministic, a capture before the layer was seen) the heuristic decides: outputs 8x8 to 28x28, C, K >= 64 (where cuDNN's fp32 rows run faster
 * than a direct convolution can, perf-log step 23) and at least 1024 tiles in the batch (device call 56: at
 * batch 1 the 16 small GEMMs lost up to 2x). CNN_CONV_WINOGRAD=1 takes Winograd for every such shape, =0
 * never (cnn_cuda_conv_force_winograd for tests). The batch is processed in slices so that V, U and M stay
 * under WINO_WS_CAP bytes of workspace.
 */
#include "cuda/internal.h"

#include <stdio.h>
#include <string.h>

static const char *const entries[] = {"winograd_filter", "winograd_input", "winograd_output"};
enum { WINO_FILTER = 0, WINO_INPUT = 1, WINO_OUTPUT = 2 };

static void defines(int cfg, char *buf, size_t cap) {
    (void)cfg;
    if (cap) buf[0] = 0;
}

const cuda_family cuda_family_winograd = {"winograd", "winograd.cu", entries, 3, CUDA_DT_F32, 1, defines, NULL};

#define WINO_WS_CAP ((size_t)1 << 30)

/* what Winograd needs of a problem, whatever the choice; the caller (conv2d.c) asks only for problems its
 * tensor-core path takes (F32: C % 4, K % 8, aligned tensors, no generic config forced), which holds for the
 * GEMMs over V, U and M too: their slabs start at multiples of 16 bytes */
static bool applicable(const cuda_be *cb, const cnn_conv2d *cv) {
    if (cb->pub.act_dtype != CNN_DTYPE_F32 || cb->allow_tf32 || cb->winograd == 0) return false;
    if (cv->r != 3 || cv->s != 3 || cv->stride_h != 1 || cv->stride_w != 1) return false;
    /* one image's V and M must fit the cap, or no slice of the batch would */
    const size_t tiles1 = (size_t)((cv->p + 1) / 2) * ((cv->q + 1) / 2);
    return 16 * tiles1 * (size_t)(cv->c + cv->k) * 4 + 16 * (size_t)cv->k * cv->c * 4 <= WINO_WS_CAP;
}

static bool heuristic(const cnn_conv2d *cv) {
    const long long tiles = (long long)cv->n * ((cv->p + 1) / 2) * ((cv->q + 1) / 2);
    return cv->p >= 8 && cv->q >= 8 && cv->p <= 28 && cv->q <= 28 && cv->c >= 64 && cv->k >= 64 && tiles >= 1024;
}

/* below 1024 tiles the direct kernels won every layer timed (device call 57: all of batch 1, and 512->512 7x7 at
 * batch 64), so no time is spent asking */
static bool worth_timing(const cnn_conv2d *cv) {
    const long long tiles = (long long)cv->n * ((cv->p + 1) / 2) * ((cv->q + 1) / 2);
    return cv->c >= 32 && cv->k >= 32 && cv->p >= 4 && cv->q >= 4 && tiles >= 1024;
}

typedef struct algo_ctx {
    cnn_backend *be;
    const cnn_conv2d *cv;
    const cnn_epilogue *ep;
    const void *x, *w;
} algo_ctx;

static cnn_status algo_launch(void *ctx, int i, void *y) { /* candidate 0: the direct kernels, 1: Winograd */
    algo_ctx *t = ctx;
    return i == 0 ? cuda_conv_tc_fprop(t->be, t->cv, t->ep, t->x, t->w, y)
                  : cuda_winograd_fprop(t->be, t->cv, t->ep, t->x, t->w, y);
}

cnn_status cuda_winograd_choose(cnn_backend *be, const cnn_conv2d *cv, const cnn_epilogue *ep, const void *x,
                                const void *w, bool *use) {
    cuda_be *cb = cuda_impl(be);
    *use = false;
    if (!applicable(cb, cv)) return CNN_OK;
    if (cb->winograd == 1) return *use = true, CNN_OK;
    *use = heuristic(cv);
    /* a forced tile config or split (tests) is there to run the direct kernels: no timing against them */
    if (cb->tune == CNN_TUNE_NONE || cb->conv_force_cfg >= 0 || cb->conv_force_splitk >= 0 || !worth_timing(cv))
        return CNN_OK;
    char key[200];
    snprintf(key, sizeof key, "fprop_algo f32 n%d c%d h%d w%d k%d pad%dx%d%s", cv->n, cv->c, cv->h, cv->w, cv->k,
             cv->pad_h, cv->pad_w, ep && ep->residual ? " res" : "");
    int cfg, splits;
    if (cuda_tune_get(cb, key, &cfg, &splits) && (cfg == 0 || cfg == 1)) return *use = cfg == 1, CNN_OK;
    if (cb->capturing) return CNN_OK;
    /* each candidate's first (warm-up) run tunes its own configs, which counts as their tuning, not this one's */
    const double t0 = cnn_now(), inner0 = cb->pub.tune_seconds;
    algo_ctx t = {be, cv, ep, x, w};
    int best;
    float ms;
    const size_t ybytes = (size_t)cv->n * cv->p * cv->q * cv->k * 4;
    CNN_TRY(cuda_tune_time(cb, key, 2, ybytes, algo_launch, &t, &best, &ms, NULL));
    if (best >= 0) {
        *use = best == 1;
        cuda_tune_put(cb, key, best, 1, ms);
        cb->pub.n_tuned++;
        cnn_log(2, "cnn: tuned %s: %s, %.4f ms", key, best ? "winograd" : "direct", ms);
    }
    cb->pub.tune_seconds = inner0 + (cnn_now() - t0);
    return CNN_OK;
}

cnn_status cuda_winograd_fprop(cnn_backend *be, const cnn_conv2d *cv, const cnn_epilogue *ep, const void *x,
                               const void *w, void *y) {
    cuda_be *cb = cuda_impl(be);
    const int tpn = (cv->p + 1) / 2, tqn = (cv->q + 1) / 2;
    const size_t ubytes = 16 * (size_t)cv->k * cv->c * 4, per_image = 16 * (size_t)tpn * tqn * (cv->c + cv->k) * 4;
    int nb = (int)((WINO_WS_CAP - ubytes) / per_image); /* images per slice */
    if (nb > cv->n) nb = cv->n;
    CNN_ASSERT(nb >= 1); /* applicable() checked that one image fits */
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
        for (int e = 0; e < 16; e++)
            CNN_TRY(cuda_conv_tc_fprop(be, &g, NULL, v + (size_t)e * tiles * cv->c, u + (size_t)e * cv->k * cv->c,
                                       m + (size_t)e * tiles * cv->k));
        s.x = m, s.out = (float *)y + n0 * ys;
        s.scale = ep ? ep->scale : NULL, s.shift = ep ? ep->shift : NULL, s.relu = ep && ep->relu;
        s.residual = ep && ep->residual ? (const float *)ep->residual + n0 * ys : NULL;
        snprintf(what, sizeof what, "winograd_output n%d k%d p%d q%d", n, cv->k, cv->p, cv->q);
        CNN_TRY(cuda_launch(cb, fo, what, cuda_grid_1d(cb, tiles * (cv->k / 4), 256), 1, 1, 256, 1, &s));
    }
    return CNN_OK;
}
