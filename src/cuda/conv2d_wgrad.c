/* conv2d_wgrad.c -- the filter gradient on Hopper's tensor cores (kernels/conv2d_wgrad_wgmma.cu): its tile configs,
 * the problems it takes, the choice of tile and reduction splits (tuned or heuristic), and the launch.
 *
 * dW[K][R*S*C] = sum over the N*P*Q output pixels of dy^T x im2col(x): a GEMM of gm = K rows and gn = R*S*C
 * columns whose reduction is as long as the activations, split over gridDim.y so that the few output tiles of a
 * layer fill the GPU; the partials go to a workspace and a second kernel adds them in split order, so the result
 * depends only on (shape, config, splits), never on timing. Both operands arrive by TMA (dy tiled, x in im2col
 * mode) and are multiplied in wgmma's MN-major layout, so the kernel takes F16/BF16 on sm_90a with C % 64 == 0
 * (a column block of the tile is 64 channels of one filter tap) and K % 8 == 0 (dy's rows 16-byte multiples);
 * cuda_conv2d_wgrad (conv2d.c) runs everything else on the generic kernels.
 */
#include "cuda/hooks.h"
#include "cuda/internal.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct wgrad_config {
    int bm, bn;   /* tile: channels of dy x columns (r, s, c) of dW */
    int stages;   /* ring stages of (bm + bn) x 64 elements */
    float eff;    /* relative tensor-core throughput of a full tile, for the heuristic */
} wgrad_config;

static const wgrad_config wgrad_configs[] = {
    {.bm = 128, .bn = 256, .stages = 4, .eff = 1.00f},
    {.bm = 256, .bn = 128, .stages = 4, .eff = 1.00f},
    {.bm = 128, .bn = 128, .stages = 6, .eff = 0.90f},
    {.bm = 128, .bn = 192, .stages = 5, .eff = 0.95f}, /* 3x3 over 64k channels: R*S*C = 576k, whole tiles of 192 */
    {.bm = 64, .bn = 256, .stages = 5, .eff = 0.85f},
    {.bm = 128, .bn = 64, .stages = 8, .eff = 0.75f},
    {.bm = 64, .bn = 128, .stages = 8, .eff = 0.70f},
};
#define N_WGRAD ((int)(sizeof wgrad_configs / sizeof wgrad_configs[0]))
#define WGRAD_BK 64                           /* output pixels per reduction slice (the kernel's BK) */
#define WGRAD_WS_CAP ((int64_t)256 << 20)     /* bytes of split partials at most */
enum { WGRAD_MAIN = 0, WGRAD_REDUCE = 1 };

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static int64_t wgrad_smem(const wgrad_config *c) { return (int64_t)(c->bm + c->bn) * WGRAD_BK * 2 * c->stages + 1024; }

static const char *wgrad_name(int cfg) {
    static char names[N_WGRAD][32];
    const wgrad_config *c = &wgrad_configs[cfg];
    if (!names[cfg][0]) snprintf(names[cfg], sizeof names[cfg], "wgrad%dx%d/s%d", c->bm, c->bn, c->stages);
    return names[cfg];
}
static void wgrad_defines(int cfg, char *buf, size_t cap) {
    const wgrad_config *c = &wgrad_configs[cfg];
    snprintf(buf, cap, "-DBM=%d -DBN=%d -DSTAGES=%d", c->bm, c->bn, c->stages);
}
static const char *const wgrad_entries[] = {"conv2d_wgrad_wgmma", "conv2d_wgrad_wgmma_reduce"};
const cuda_family cuda_family_conv2d_wgrad_wgmma = {"conv2d_wgrad_wgmma", "conv2d_wgrad_wgmma.cu", wgrad_entries, 2,
                                                    CUDA_DT_F16 | CUDA_DT_BF16, N_WGRAD, wgrad_defines, wgrad_name};

/* the filter bases of the first and last output pixels, relative to the input's corners: the bounding box of a
 * 4-D im2col map, which encodes each in [-128, 127] */
static bool wgrad_corners_fit(const cnn_conv2d *cv) {
    const int lo[2] = {-cv->pad_w, -cv->pad_h};
    const int hi[2] = {(cv->q - 1) * cv->stride_w - cv->pad_w - (cv->w - 1), (cv->p - 1) * cv->stride_h - cv->pad_h - (cv->h - 1)};
    for (int i = 0; i < 2; i++)
        if (lo[i] < -128 || lo[i] > 127 || hi[i] < -128 || hi[i] > 127) return false;
    return true;
}

static bool wgrad_usable(const cuda_be *cb, const wgrad_config *c) { return wgrad_smem(c) <= cb->smem_optin; }

/* wgmma and TMA: sm_90a with the driver's tensor-map encoders, F16/BF16 activations */
static bool wgrad_backend_ok(const cuda_be *cb) {
    return cb->cc_major == 9 && cb->cc_minor == 0 && strcmp(cb->arch, "sm_90a") == 0 && !cb->no_tma &&
           (cb->pub.act_dtype == CNN_DTYPE_BF16 || cb->pub.act_dtype == CNN_DTYPE_F16);
}

bool cuda_wgrad_wgmma_fits(const cuda_be *cb, const cnn_conv2d *cv, const void *x, const void *dy) {
    if (!wgrad_backend_ok(cb)) return false;
    if (cv->c % 64 || cv->k % 8 || cv->r > 256 || cv->s > 256 || cv->stride_h > 8 || cv->stride_w > 8) return false;
    if (((uintptr_t)x & 15) || ((uintptr_t)dy & 15) || !wgrad_corners_fit(cv)) return false;
    const int64_t npq = (int64_t)cv->n * cv->p * cv->q, rsc = (int64_t)cv->r * cv->s * cv->c;
    return npq <= INT_MAX - WGRAD_BK && rsc * cv->k <= INT_MAX && (int64_t)cv->n * cv->h * cv->w <= INT_MAX;
}

/* Reduction splits of a config for `rounds` rounds of CTAs on the SMs (one CTA per SM fits): as many as fill them
 * without starting a partial round, at least 8 slices per split, the partials within WGRAD_WS_CAP; never an empty
 * split. */
static int wgrad_splits(const cuda_be *cb, const wgrad_config *c, const cnn_conv2d *cv, int rounds) {
    const int64_t tiles = cdiv(cv->k, c->bm) * cdiv((int64_t)cv->r * cv->s * cv->c, c->bn);
    const int64_t slices = cdiv((int64_t)cv->n * cv->p * cv->q, WGRAD_BK);
    const int64_t out_bytes = (int64_t)cv->k * cv->r * cv->s * cv->c * 4;
    int64_t splits = (int64_t)rounds * cb->sm_count / tiles;
    if (splits > slices / 8) splits = slices / 8;
    if (splits > WGRAD_WS_CAP / out_bytes) splits = WGRAD_WS_CAP / out_bytes;
    if (splits > 65535) splits = 65535;
    if (splits < 1) splits = 1;
    return (int)cdiv(slices, cdiv(slices, splits));
}

/* Estimated seconds of a (config, splits): rounds of one CTA per SM, each CTA's multiply-adds at the tile's share
 * of an SM's dense rate, plus the partials written and added. For the heuristic's order only. */
static double wgrad_estimate(const cuda_be *cb, const wgrad_config *c, const cnn_conv2d *cv, int splits) {
    const int64_t tiles = cdiv(cv->k, c->bm) * cdiv((int64_t)cv->r * cv->s * cv->c, c->bn);
    const int64_t slices = cdiv((int64_t)cv->n * cv->p * cv->q, WGRAD_BK), per = cdiv(slices, splits);
    const double sm_flops = 7.0e12 * c->eff; /* an H100 SM's dense bf16 rate */
    const double rounds = (double)cdiv(tiles * splits, cb->sm_count);
    const double mma = rounds * (double)per * c->bm * c->bn * WGRAD_BK * 2.0 / sm_flops;
    const double partial = splits > 1 ? 3.0 * splits * (double)cv->k * cv->r * cv->s * cv->c * 4.0 / 2.5e12 : 0.0;
    return mma + partial + 2e-6 * (double)per / 1000.0;
}

typedef struct wgrad_cand {
    int cfg, splits;
} wgrad_cand;

#define WGRAD_ROUNDS 3 /* split counts tried: for 1, 2 and 4 rounds of CTAs */

/* Candidates best first by the estimate: every config with the splits of 1, 2 and 4 rounds (duplicates dropped);
 * fast keeps the 4 best, full all of them. */
static int wgrad_candidates(const cuda_be *cb, const cnn_conv2d *cv, wgrad_cand *out) {
    int n = 0;
    double est[WGRAD_ROUNDS * N_WGRAD];
    for (int i = 0; i < N_WGRAD; i++) {
        if (!wgrad_usable(cb, &wgrad_configs[i])) continue;
        for (int r = 0; r < WGRAD_ROUNDS; r++) {
            const int sp = wgrad_splits(cb, &wgrad_configs[i], cv, 1 << r);
            if (r > 0 && sp == out[n - 1].splits) continue;
            out[n] = (wgrad_cand){i, sp}, est[n] = wgrad_estimate(cb, &wgrad_configs[i], cv, sp), n++;
        }
    }
    for (int i = 1; i < n; i++) /* insertion sort, fastest first */
        for (int j = i; j > 0 && est[j] < est[j - 1]; j--) {
            wgrad_cand t = out[j];
            double e = est[j];
            out[j] = out[j - 1], est[j] = est[j - 1], out[j - 1] = t, est[j - 1] = e;
        }
    return cb->tune == CNN_TUNE_FULL || n < 4 ? n : 4;
}

static cnn_status wgrad_encode(cuda_be *cb, const cnn_conv2d *cv, const void *x, const void *dy, conv_tma_map *x_map,
                               conv_tma_map *dy_map) {
    const CUtensorMapDataType dt =
        cb->pub.act_dtype == CNN_DTYPE_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    const cuuint64_t e = 2, xdim[4] = {(cuuint64_t)cv->c, (cuuint64_t)cv->w, (cuuint64_t)cv->h, (cuuint64_t)cv->n};
    const cuuint64_t xstride[3] = {xdim[0] * e, xdim[0] * xdim[1] * e, xdim[0] * xdim[1] * xdim[2] * e};
    const cuuint32_t xtrav[4] = {1, (cuuint32_t)cv->stride_w, (cuuint32_t)cv->stride_h, 1};
    int lo[2] = {-cv->pad_w, -cv->pad_h};
    int hi[2] = {(cv->q - 1) * cv->stride_w - cv->pad_w - (cv->w - 1), (cv->p - 1) * cv->stride_h - cv->pad_h - (cv->h - 1)};
    CU_TRY(cu.TensorMapEncodeIm2col((CUtensorMap *)x_map, dt, 4, (void *)x, xdim, xstride, lo, hi, 64, WGRAD_BK, xtrav,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
           "cuTensorMapEncodeIm2col (the input of a wgrad)");
    const cuuint64_t ddim[2] = {(cuuint64_t)cv->k, (cuuint64_t)cv->n * cv->p * cv->q}, dstride[1] = {(cuuint64_t)cv->k * e};
    const cuuint32_t box[2] = {64, WGRAD_BK}, dtrav[2] = {1, 1};
    CU_TRY(cu.TensorMapEncodeTiled((CUtensorMap *)dy_map, dt, 2, (void *)dy, ddim, dstride, box, dtrav,
                                   CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                   CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
           "cuTensorMapEncodeTiled (the output gradient of a wgrad)");
    return CNN_OK;
}

static cnn_status wgrad_launch(cnn_backend *be, const cnn_conv2d *cv, const void *x, const void *dy, float *dw,
                               int cfg, int splits) {
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
    const int64_t slices = cdiv(a->gk, WGRAD_BK), per = cdiv(slices, splits);
    splits = (int)cdiv(slices, per); /* no empty split */
    a->ktiles_per_split = (int)per, a->splits = splits;
    a->x = x, a->dy = dy, a->out = dw;
    if (splits > 1) {
        CNN_TRY(cuda_kernel(cb, &cuda_family_conv2d_wgrad_wgmma, be->act_dtype, cfg, WGRAD_REDUCE, &fr));
        void *ws;
        CNN_TRY(cuda_workspace(cb, (size_t)splits * (size_t)a->gm * (size_t)a->gn * sizeof(float), &ws));
        a->ws = ws;
    }
    CNN_TRY(wgrad_encode(cb, cv, x, dy, &t.a_map, &t.b_map));
    char what[200];
    snprintf(what, sizeof what, "conv2d_wgrad_wgmma[%s %s] n%d c%d h%d w%d k%d r%d s%d stride %dx%d pad %dx%d splits %d",
             cuda_dtype_str(be->act_dtype), wgrad_name(cfg), cv->n, cv->c, cv->h, cv->w, cv->k, cv->r, cv->s,
             cv->stride_h, cv->stride_w, cv->pad_h, cv->pad_w, splits);
    const int64_t tiles = cdiv(a->gm, c->bm) * cdiv(a->gn, c->bn);
    if (tiles > INT_MAX) return cnn_fail(CNN_E_UNSUPPORTED, "%s: %lld output tiles", what, (long long)tiles);
    CNN_TRY(cuda_launch_smem(cb, f, what, (unsigned)tiles, (unsigned)splits, 1, 384, 1, (unsigned)wgrad_smem(c), &t));
    if (splits > 1) {
        size_t n = strlen(what);
        snprintf(what + n, sizeof what - n, " reduce");
        CNN_TRY(cuda_launch(cb, fr, what, cuda_grid_1d(cb, (long long)a->gm * a->gn / 4, 256), 1, 1, 256, 1, a));
    }
    return CNN_OK;
}

typedef struct wgrad_tune_ctx {
    cnn_backend *be;
    const cnn_conv2d *cv;
    const void *x, *dy;
    const wgrad_cand *cand;
} wgrad_tune_ctx;

static cnn_status wgrad_tune_launch(void *ctx, int i, void *y) {
    wgrad_tune_ctx *t = ctx;
    return wgrad_launch(t->be, t->cv, t->x, t->dy, y, t->cand[i].cfg, t->cand[i].splits);
}

/* (config, splits): tuned once per shape and cached (tune.c), or the heuristic's first candidate (--tune none,
 * --deterministic, during graph capture before a shape was tuned, or a forced config) */
static cnn_status wgrad_choose(cnn_backend *be, const cnn_conv2d *cv, const void *x, const void *dy, int *cfg,
                               int *splits) {
    cuda_be *cb = cuda_impl(be);
    wgrad_cand cand[WGRAD_ROUNDS * N_WGRAD];
    const int nc = wgrad_candidates(cb, cv, cand);
    if (nc == 0) return cnn_fail(CNN_E_UNSUPPORTED, "no wgrad tile fits this GPU's shared memory");
    *cfg = cand[0].cfg, *splits = cand[0].splits;
    if (cb->tune == CNN_TUNE_NONE || nc == 1) return CNN_OK;
    char key[200];
    snprintf(key, sizeof key, "wgrad_wgmma %s n%d c%d h%d w%d k%d r%d s%d st%dx%d pad%dx%d",
             cuda_dtype_str(be->act_dtype), cv->n, cv->c, cv->h, cv->w, cv->k, cv->r, cv->s, cv->stride_h,
             cv->stride_w, cv->pad_h, cv->pad_w);
    int tc, ts;
    if (cuda_tune_get(cb, key, &tc, &ts) && tc >= 0 && tc < N_WGRAD && ts >= 1 && wgrad_usable(cb, &wgrad_configs[tc])) {
        *cfg = tc, *splits = ts;
        return CNN_OK;
    }
    if (cb->capturing) return CNN_OK;
    const double t0 = cnn_now();
    int ids[WGRAD_ROUNDS * N_WGRAD];
    for (int i = 0; i < nc; i++) ids[i] = cuda_program_id(&cuda_family_conv2d_wgrad_wgmma, be->act_dtype, cand[i].cfg);
    cuda_prepare_programs(cb, ids, nc);
    wgrad_tune_ctx t = {be, cv, x, dy, cand};
    int best;
    float ms;
    cnn_status st = cuda_tune_time(cb, key, nc, (size_t)cv->k * cv->r * cv->s * cv->c * sizeof(float),
                                   wgrad_tune_launch, &t, &best, &ms, NULL);
    if (st == CNN_OK && best >= 0) {
        *cfg = cand[best].cfg, *splits = cand[best].splits;
        cuda_tune_put(cb, key, *cfg, *splits, ms);
        cb->pub.n_tuned++;
        cnn_log(2, "cnn: tuned %s: %s splits %d, %.4f ms (%d candidates)", key, wgrad_name(*cfg), *splits, ms, nc);
    }
    cb->pub.tune_seconds += cnn_now() - t0;
    return st;
}

cnn_status cuda_wgrad_wgmma(cnn_backend *be, const cnn_conv2d *cv, const void *x, const void *dy, float *dw) {
    cuda_be *cb = cuda_impl(be);
    int cfg = cb->wgrad_force_cfg, splits = cb->wgrad_force_splits;
    if (cfg >= 0) {
        if (!wgrad_usable(cb, &wgrad_configs[cfg]))
            return cnn_fail(CNN_E_UNSUPPORTED, "wgrad config %s needs more shared memory than this GPU has", wgrad_name(cfg));
        if (splits <= 0) splits = wgrad_splits(cb, &wgrad_configs[cfg], cv, 2);
    } else {
        CNN_TRY(wgrad_choose(be, cv, x, dy, &cfg, &splits));
    }
    CNN_TRY(wgrad_launch(be, cv, x, dy, dw, cfg, splits));
    cb->stats.wgrad_tc_launches++;
    return CNN_OK;
}

int cnn_cuda_wgrad_config_count(void) { return N_WGRAD; }
const char *cnn_cuda_wgrad_config_name(int cfg) {
    CNN_ASSERT(cfg >= 0 && cfg < N_WGRAD);
    return wgrad_name(cfg);
}
bool cnn_cuda_wgrad_config_usable(cnn_backend *be, int cfg) {
    CNN_ASSERT(cfg >= 0 && cfg < N_WGRAD);
    const cuda_be *cb = cuda_impl(be);
    return wgrad_backend_ok(cb) && wgrad_usable(cb, &wgrad_configs[cfg]);
}
void cnn_cuda_wgrad_force(cnn_backend *be, int cfg, int splits) {
    CNN_ASSERT(cfg >= -1 && cfg < N_WGRAD);
    cuda_be *cb = cuda_impl(be);
    cb->wgrad_force_cfg = cfg, cb->wgrad_force_splits = splits;
}
