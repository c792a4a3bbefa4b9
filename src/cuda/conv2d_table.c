/* conv2d_table.c -- the candidate table of the convolution kernels: every tile config a conv launch can take, as
 * rows of named fields and a flag word (hooks.h: the kernel kind, the passes, the row's options). A row's name and
 * each kernel family's programs (conv2d_programs.c) are derived from the rows, never kept by hand; tests read the
 * flags.
 *
 * Every row is valid for every shape its kind takes (edges are masked), so choosing one is only about speed
 * (conv2d_choose.c). Kinds, in table order:
 *   SIMT, MMA   kernels/conv2d.cu, the generic implicit GEMM of all three passes (views in kernels/params.cuh):
 *               fp32-FMA tiles for every dtype, mma.sync tiles for F16/BF16 on sm_80+; one family per (kind, pass)
 *   PIPELINED   kernels/conv2d_pipelined.cu: cp.async pipeline, ldmatrix, mma.sync, split-K for small outputs; F16/BF16
 *               and F32 (TF32 with allow_tf32, else the same program with FFMA=1: true fp32); sm_80+
 *   WGMMA       kernels/conv2d_wgmma.cu: wgmma from the 128-byte swizzle, sm_90a, F16/BF16; a /persistent row is
 *               the program of the row without it, launched on a persistent grid
 *   WARPSPEC    kernels/conv2d_warpspec.cu: a producer warpgroup and two consumer warpgroups (persistent grid), with the
 *               options of hooks.h's CNN_CUDA_CONV_* bits (TMA, cooperative, transposed, ...)
 * Also here: the problem geometry every conv file shares. The config tables of the paths that are not rows (the
 * first layer, wgrad on wgmma, Winograd's transforms) are conv2d_configs.c's.
 */
#include "cuda/conv2d.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define ALL_PASSES (CNN_CUDA_CONV_FPROP | CNN_CUDA_CONV_DGRAD | CNN_CUDA_CONV_WGRAD)
#define SIMT (CNN_CUDA_CONV_SIMT | ALL_PASSES)
#define MMA (CNN_CUDA_CONV_MMA | ALL_PASSES)
#define PIPE (CNN_CUDA_CONV_PIPELINED | CNN_CUDA_CONV_FPROP)
#define WGMMA (CNN_CUDA_CONV_WGMMA | CNN_CUDA_CONV_FPROP)
#define WS (CNN_CUDA_CONV_WARPSPEC | CNN_CUDA_CONV_FPROP)
#define PERSIST CNN_CUDA_CONV_PERSISTENT
#define BRES CNN_CUDA_CONV_FILTER_RESIDENT
#define TMA CNN_CUDA_CONV_TMA
#define COOP CNN_CUDA_CONV_COOPERATIVE
#define RSM CNN_CUDA_CONV_RESIDUAL_SMEM
#define SWAP CNN_CUDA_CONV_TRANSPOSED
#define OST CNN_CUDA_CONV_TMA_STORE

const conv_row conv_rows[] = {
    /* conv2d.cu, SIMT: per-thread sub-tile wm x wn */
    {.flags = SIMT, .bm = 128, .bn = 128, .bk = 8, .wm = 8, .wn = 8, .speed = 1.00f},
    {.flags = SIMT, .bm = 128, .bn = 64, .bk = 8, .wm = 8, .wn = 4, .speed = 0.90f},
    {.flags = SIMT, .bm = 64, .bn = 128, .bk = 8, .wm = 4, .wn = 8, .speed = 0.90f},
    {.flags = SIMT, .bm = 64, .bn = 64, .bk = 16, .wm = 4, .wn = 4, .speed = 0.75f},
    {.flags = SIMT, .bm = 32, .bn = 64, .bk = 16, .wm = 2, .wn = 4, .speed = 0.55f},
    /* conv2d.cu, mma.sync: warps wm x wn */
    {.flags = MMA, .bm = 128, .bn = 128, .bk = 32, .wm = 2, .wn = 4, .speed = 8.0f},
    {.flags = MMA, .bm = 128, .bn = 64, .bk = 32, .wm = 2, .wn = 2, .speed = 7.0f},
    {.flags = MMA, .bm = 64, .bn = 128, .bk = 32, .wm = 2, .wn = 2, .speed = 7.0f},
    {.flags = MMA, .bm = 64, .bn = 64, .bk = 32, .wm = 2, .wn = 2, .speed = 5.5f},
    /* the pipelined mma.sync forward kernel: F16/BF16 (and F32), sm_80+, C % 8 == 0 (F32: C % 4), K % 8 == 0,
     * 16-byte aligned tensors; rows whose shared memory exceeds what the GPU lets one block opt in to are never
     * candidates */
    {.flags = PIPE, .bm = 128, .bn = 128, .bk = 32, .wm = 2, .wn = 4, .stages = 3, .minb = 2, .speed = 1.00f},
    {.flags = PIPE, .bm = 128, .bn = 64, .bk = 32, .wm = 2, .wn = 2, .stages = 4, .minb = 1, .speed = 0.85f},
    {.flags = PIPE, .bm = 64, .bn = 128, .bk = 32, .wm = 2, .wn = 2, .stages = 4, .minb = 1, .speed = 0.85f},
    {.flags = PIPE, .bm = 64, .bn = 64, .bk = 32, .wm = 2, .wn = 2, .stages = 4, .minb = 1, .speed = 0.70f},
    {.flags = PIPE, .bm = 128, .bn = 128, .bk = 32, .wm = 2, .wn = 2, .stages = 3, .minb = 1, .speed = 0.95f}, /* 64x64 warp tiles */
    {.flags = PIPE, .bm = 256, .bn = 128, .bk = 32, .wm = 4, .wn = 2, .stages = 2, .minb = 1, .speed = 0.90f},
    {.flags = PIPE, .bm = 128, .bn = 256, .bk = 32, .wm = 2, .wn = 4, .stages = 2, .minb = 1, .speed = 0.90f},
    /* 64-channel slices: half the barriers per multiply-add, twice the bytes in flight per stage; over 48 KB of
     * shared memory, so dynamic */
    {.flags = PIPE, .bm = 128, .bn = 128, .bk = 64, .wm = 2, .wn = 4, .stages = 3, .minb = 1, .speed = 1.05f},
    {.flags = PIPE, .bm = 128, .bn = 256, .bk = 64, .wm = 2, .wn = 4, .stages = 3, .minb = 1, .speed = 1.02f},
    {.flags = PIPE, .bm = 128, .bn = 64, .bk = 64, .wm = 2, .wn = 2, .stages = 4, .minb = 1, .speed = 0.88f},
    /* wgmma: warpgroups of 64 rows each */
    {.flags = WGMMA, .bm = 128, .bn = 128, .bk = 64, .wm = 2, .wn = 1, .stages = 6, .minb = 1, .speed = 2.00f},
    {.flags = WGMMA, .bm = 128, .bn = 256, .bk = 64, .wm = 2, .wn = 1, .stages = 4, .minb = 1, .speed = 1.95f},
    {.flags = WGMMA, .bm = 128, .bn = 64, .bk = 64, .wm = 2, .wn = 1, .stages = 4, .minb = 1, .speed = 1.80f},
    {.flags = WGMMA, .bm = 64, .bn = 128, .bk = 64, .wm = 1, .wn = 1, .stages = 4, .minb = 1, .speed = 1.70f}, /* one warpgroup: many CTAs per SM */
    {.flags = WGMMA, .bm = 256, .bn = 128, .bk = 64, .wm = 2, .wn = 1, .stages = 4, .minb = 1, .speed = 1.90f}, /* two m64 blocks per warpgroup */
    /* the same programs on a persistent grid (as many CTAs as fit, each looping over tiles, so the next tile's
     * first slices load during this one's epilogue): the memory-bound short reductions */
    {.flags = WGMMA | PERSIST, .bm = 128, .bn = 128, .bk = 64, .wm = 2, .wn = 1, .stages = 6, .minb = 1, .speed = 2.00f},
    {.flags = WGMMA | PERSIST, .bm = 128, .bn = 256, .bk = 64, .wm = 2, .wn = 1, .stages = 4, .minb = 1, .speed = 1.95f},
    {.flags = WGMMA | PERSIST, .bm = 128, .bn = 64, .bk = 64, .wm = 2, .wn = 1, .stages = 4, .minb = 1, .speed = 1.80f},
    {.flags = WGMMA | PERSIST, .bm = 64, .bn = 128, .bk = 64, .wm = 1, .wn = 1, .stages = 4, .minb = 1, .speed = 1.70f},
    {.flags = WGMMA | PERSIST, .bm = 256, .bn = 128, .bk = 64, .wm = 2, .wn = 1, .stages = 4, .minb = 1, .speed = 1.90f},
    /* warp-specialised: the tile is each consumer warpgroup's; a CTA works on two at once ("ping-pong"), one
     * multiplying while the other runs its epilogue */
    {.flags = WS, .bm = 64, .bn = 256, .bk = 64, .wm = 2, .wn = 1, .stages = 5, .minb = 1, .speed = 1.95f},
    {.flags = WS, .bm = 128, .bn = 128, .bk = 64, .wm = 2, .wn = 1, .stages = 6, .minb = 1, .speed = 1.95f},
    {.flags = WS, .bm = 64, .bn = 128, .bk = 64, .wm = 2, .wn = 1, .stages = 8, .minb = 1, .speed = 1.80f},
    {.flags = WS | BRES, .bm = 64, .bn = 256, .bk = 64, .wm = 2, .wn = 1, .stages = 8, .minb = 1, .speed = 1.95f},
    {.flags = WS | BRES, .bm = 128, .bn = 128, .bk = 64, .wm = 2, .wn = 1, .stages = 6, .minb = 1, .speed = 1.95f},
    /* the same with TMA copies (the producer one thread, the consumers with more registers). The TMA rows' speeds
     * are perf-log step 114's fit to every candidate's time on four zoo models: 2.2 x (BM * BN / 128^2)^0.05, the
     * residual-smem row 5 % more; above every wgmma row's, which they beat wherever their consumers are busy */
    {.flags = WS | TMA, .bm = 128, .bn = 128, .bk = 64, .wm = 2, .wn = 1, .stages = 6, .minb = 1, .speed = 2.20f},
    {.flags = WS | TMA, .bm = 64, .bn = 256, .bk = 64, .wm = 2, .wn = 1, .stages = 5, .minb = 1, .speed = 2.20f},
    {.flags = WS | BRES | TMA, .bm = 64, .bn = 256, .bk = 64, .wm = 2, .wn = 1, .stages = 8, .minb = 1, .speed = 2.20f},
    {.flags = WS | BRES | TMA, .bm = 128, .bn = 128, .bk = 64, .wm = 2, .wn = 1, .stages = 6, .minb = 1, .speed = 2.20f},
    /* K = 64 (ResNet's 64-channel convs): 64 columns, where a 128- or 256-wide tile would be half empty; without
     * a cp.async twin (its fallback is the persistent wgmma row of the same tile) */
    {.flags = WS | TMA, .bm = 128, .bn = 64, .bk = 64, .wm = 2, .wn = 1, .stages = 8, .minb = 1, .speed = 2.12f},
    /* cooperative (both consumers on one tile, m64n256 or 2 x m64n128 each): per stage one B slice for twice the
     * rows of a consumer's tile; the tuner's choice for most of ResNet-50's long reductions (perf-log step 30) */
    {.flags = WS | COOP | TMA, .bm = 128, .bn = 256, .bk = 64, .wm = 2, .wn = 1, .stages = 4, .minb = 1, .speed = 2.28f},
    {.flags = WS | COOP | TMA, .bm = 256, .bn = 128, .bk = 64, .wm = 2, .wn = 1, .stages = 4, .minb = 1, .speed = 2.28f},
    /* m64n128 each: half the tile of the two above, for long reductions over few output tiles, where those
     * leave the last round of tiles half the SMs (ResNet-50's 7x7 layers at b256) */
    {.flags = WS | COOP | TMA, .bm = 128, .bn = 128, .bk = 64, .wm = 2, .wn = 1, .stages = 6, .minb = 1, .speed = 2.20f},
    /* the residual staged in shared memory, the ring shortened to make the room (perf-log step 43) */
    {.flags = WS | TMA | RSM, .bm = 128, .bn = 128, .bk = 64, .wm = 2, .wn = 1, .stages = 4, .minb = 1, .speed = 2.31f},
    /* the transposed tile for 64 output channels: the filter slice as wgmma's m64 operand, 256 pixels as its n
     * (perf-log step 47) */
    {.flags = WS | TMA | SWAP, .bm = 256, .bn = 64, .bk = 64, .wm = 2, .wn = 1, .stages = 5, .minb = 1, .speed = 2.20f},
    /* and cooperative: 256 pixels x 128 channels, each consumer m64n256 over its 64 channels */
    {.flags = WS | COOP | TMA | SWAP, .bm = 256, .bn = 128, .bk = 64, .wm = 2, .wn = 1, .stages = 4, .minb = 1, .speed = 2.28f},
    /* 192 pixels (m64n192 per consumer): whole rounds of tiles on 132 SMs for ResNet-50's 7x7 layers at b256 */
    {.flags = WS | COOP | TMA | SWAP, .bm = 192, .bn = 128, .bk = 64, .wm = 2, .wn = 1, .stages = 5, .minb = 1, .speed = 2.24f},
    /* the cooperative transposed tiles with their stores handed to the copy engine, in pieces spread over the next
     * tile's mainloop; their boxes cost a ring stage (two for 256x128) (perf-log steps 50 and 52) */
    {.flags = WS | COOP | TMA | SWAP | OST, .bm = 192, .bn = 128, .bk = 64, .wm = 2, .wn = 1, .stages = 4, .minb = 1, .speed = 2.24f},
    {.flags = WS | COOP | TMA | SWAP | OST, .bm = 256, .bn = 128, .bk = 64, .wm = 2, .wn = 1, .stages = 3, .minb = 1, .speed = 2.28f},
};
#define N_ROWS ((int)(sizeof conv_rows / sizeof conv_rows[0]))
_Static_assert(N_ROWS <= CONV_MAX_ROWS, "CONV_MAX_ROWS bounds the candidate lists");

int conv_n_rows(void) { return N_ROWS; }

/* rows of one kind are contiguous: the first */
int conv_kind_first(unsigned kind) {
    for (int v = 0; v < N_ROWS; v++)
        if (conv_kind_of(&conv_rows[v]) == kind) return v;
    CNN_ASSERT(!"no row of this kind");
    return -1;
}

int conv_n_generic(void) { return conv_kind_first(CNN_CUDA_CONV_PIPELINED); }

/* the index among its kind's programs of row v's program: its own, or for a persistent wgmma row its twin's */
int conv_program_of(int v) {
    const conv_row *c = &conv_rows[v];
    const unsigned kind = conv_kind_of(c);
    int cfg = 0;
    for (int i = conv_kind_first(kind); i < N_ROWS && conv_kind_of(&conv_rows[i]) == kind; i++) {
        const conv_row *o = &conv_rows[i];
        if (conv_is(o, PERSIST)) continue;
        if (i == v || (conv_is(c, PERSIST) && o->bm == c->bm && o->bn == c->bn && o->wm == c->wm &&
                       o->stages == c->stages && o->minb == c->minb))
            return cfg;
        cfg++;
    }
    CNN_ASSERT(!"a persistent wgmma row without a twin");
    return -1;
}

/* ---- names, derived from the flags ------------------------------------------------------------------------- */

static char row_names[N_ROWS][96];
static pthread_once_t names_once = PTHREAD_ONCE_INIT;

/* "<kind><BM>x<BN>..." then the row's options as words ("warpspec192x128/s4/cooperative/tma/transposed/store-tma"):
 * no option's word is a part of another's, so CNN_CONV_SKIP=/tma names the TMA rows and nothing else */
static void make_names(void) {
    for (int v = 0; v < N_ROWS; v++) {
        const conv_row *r = &conv_rows[v];
        char *b = row_names[v];
        const size_t cap = sizeof row_names[v];
        switch (conv_kind_of(r)) {
        case CNN_CUDA_CONV_SIMT: snprintf(b, cap, "simt%dx%dx%d/%dx%d", r->bm, r->bn, r->bk, r->wm, r->wn); break;
        case CNN_CUDA_CONV_MMA: snprintf(b, cap, "mma%dx%dx%d/w%dx%d", r->bm, r->bn, r->bk, r->wm, r->wn); break;
        case CNN_CUDA_CONV_PIPELINED:
            snprintf(b, cap, "pipelined%dx%d%s/w%dx%d/s%d", r->bm, r->bn, r->bk == 64 ? "k64" : "", r->wm, r->wn,
                     r->stages);
            break;
        case CNN_CUDA_CONV_WGMMA:
            snprintf(b, cap, "wgmma%dx%d/g%d/s%d%s", r->bm, r->bn, r->wm, r->stages,
                     conv_is(r, PERSIST) ? "/persistent" : "");
            break;
        default:
            CNN_ASSERT(conv_kind_of(r) == CNN_CUDA_CONV_WARPSPEC);
            snprintf(b, cap, "warpspec%dx%d/s%d%s%s%s%s%s%s", r->bm, r->bn, r->stages,
                     conv_is(r, BRES) ? "/filter-resident" : "", conv_is(r, COOP) ? "/cooperative" : "",
                     conv_is(r, TMA) ? "/tma" : "", conv_is(r, RSM) ? "/residual-smem" : "",
                     conv_is(r, SWAP) ? "/transposed" : "", conv_is(r, OST) ? "/store-tma" : "");
        }
    }
}

const char *conv_row_name(int v) {
    CNN_ASSERT(v >= 0 && v < N_ROWS);
    pthread_once(&names_once, make_names);
    return row_names[v];
}

int cnn_cuda_conv_config_count(void) { return N_ROWS; }
const char *cnn_cuda_conv_config_name(int v) { return conv_row_name(v); }
unsigned cnn_cuda_conv_config_flags(int v) {
    CNN_ASSERT(v >= 0 && v < N_ROWS);
    return conv_rows[v].flags;
}

/* ---- what a row needs --------------------------------------------------------------------------------------- */

int conv_row_threads(const conv_row *r) {
    switch (conv_kind_of(r)) {
    case CNN_CUDA_CONV_SIMT: return (r->bm / r->wm) * (r->bn / r->wn);
    case CNN_CUDA_CONV_WARPSPEC: return 128 * (1 + r->wm);
    case CNN_CUDA_CONV_WGMMA: return 128 * r->wm;
    default: return 32 * r->wm * r->wn;
    }
}

/* a filter-resident row's ring holds only A slices, and every B slice of the reduction follows it; a
 * warp-specialised row's epilogue scratch (EPI_BYTES: 1 KB per consumer warp, or its box of 16 channels x bm
 * pixels) and staged residual (RSM_BYTES: the two consumers' rows) come first */
int64_t conv_row_smem(const conv_row *c, int stages, int64_t gk) {
    const int64_t align = conv_hopper(c) ? 1024 : 0;
    const bool ws = conv_is(c, CNN_CUDA_CONV_WARPSPEC);
    const int64_t epi = (ws ? 8 * (conv_is(c, OST) ? 32 * (int64_t)c->bm : 1024) : 0) +
                        (conv_is(c, RSM) ? 2 * (int64_t)(conv_is(c, COOP) ? c->bm / 2 : c->bm) * c->bn * 2 : 0);
    if (conv_is(c, BRES)) return epi + (int64_t)c->bm * c->bk * 2 * stages + cdiv(gk, c->bk) * c->bn * c->bk * 2 + align;
    return epi + (int64_t)(c->bm + c->bn) * c->bk * 2 * stages + align;
}

static bool row_skipped(const cuda_be *cb, int v) { return cuda_conv_skipped(cb, conv_row_name(v)); }

/* a fast row on this backend: wgmma needs exactly sm_90a and F16/BF16, every row its shared memory */
bool conv_fast_usable(const cuda_be *cb, int v) {
    const conv_row *c = &conv_rows[v];
    const bool hopper = conv_hopper(c);
    if (row_skipped(cb, v)) return false;
    if (conv_is(c, TMA) && cb->no_tma) return false;
    if (hopper && (cb->cc_major != 9 || cb->cc_minor != 0 || strcmp(cb->arch, "sm_90a") != 0)) return false;
    if (hopper && cb->pub.act_dtype == CNN_DTYPE_F32) return false; /* TF32 and FFMA run on the pipelined rows only */
    return conv_row_min_smem(c) <= cb->smem_optin;
}

bool conv_row_usable(const cuda_be *cb, int v) {
    CNN_ASSERT(v >= 0 && v < N_ROWS);
    const conv_row *c = &conv_rows[v];
    if (conv_is(c, CNN_CUDA_CONV_SIMT)) return true;
    if (cb->cc_major < 8) return false;
    if (conv_is(c, CNN_CUDA_CONV_MMA)) return cb->pub.act_dtype != CNN_DTYPE_F32; /* conv2d.cu's mma: F16/BF16 */
    if (!conv_fast_usable(cb, v)) return false;
    /* F32 activations: the pipelined rows, in TF32 when asked for (--dtype tf32), else with fp32 FMA (FFMA=1);
     * wgmma is F16/BF16 here */
    return cb->pub.act_dtype != CNN_DTYPE_F32 || !conv_hopper(c);
}

bool cnn_cuda_conv_config_usable(cnn_backend *be, int v) { return conv_row_usable(cuda_impl(be), v); }

int conv_row_ks(const cuda_be *cb, const conv_row *r) { return r->bk * 2 / act_size(cb); }

bool conv_bres_fits(const cuda_be *cb, const conv_row *c, int64_t gn, int64_t gk) {
    /* within the 227 KB the warp-specialised kernel's emulator build reserves, too */
    const int64_t smem = conv_row_smem(c, c->stages, gk);
    return smem <= cb->smem_optin && smem <= 227 * 1024 && cdiv(gn, c->bn) <= cb->sm_count;
}

/* ---- twins ------------------------------------------------------------------------------------------------ */

int conv_persistent_twin(int v) {
    const int first = conv_kind_first(CNN_CUDA_CONV_WGMMA);
    for (int i = first; i < N_ROWS && conv_kind_of(&conv_rows[i]) == CNN_CUDA_CONV_WGMMA; i++)
        if (conv_is(&conv_rows[i], PERSIST) && conv_program_of(i) == conv_program_of(v)) return i;
    return -1;
}

/* a filter-resident row's twin without it runs what it cannot, a TMA row's twin without TMA likewise; a TMA row
 * without such a twin falls back to the persistent wgmma row of its tile */
int conv_ws_twin(int v, bool bres, bool tma) {
    const conv_row *t = &conv_rows[v];
    const int first = conv_kind_first(CNN_CUDA_CONV_WARPSPEC);
    for (int i = first; i < N_ROWS; i++) {
        const conv_row *c = &conv_rows[i];
        if (!conv_is(c, SWAP) && conv_is(c, BRES) == bres && conv_is(c, TMA) == tma && conv_is(c, COOP) == conv_is(t, COOP) &&
            conv_is(c, RSM) == (tma && conv_is(t, RSM)) && c->bm == t->bm && c->bn == t->bn)
            return i;
    }
    for (int i = conv_kind_first(CNN_CUDA_CONV_WGMMA); i < first && !tma; i++)
        if (conv_is(&conv_rows[i], PERSIST) && conv_rows[i].bm == t->bm && conv_rows[i].bn == t->bn) return i;
    CNN_ASSERT(!"a warp-specialised row without its twin");
    return -1;
}

/* a transposed row hands what it does not run (a residual, a pair, a problem off its tensor maps) to the
 * pixel-major TMA row of its width and kind (ping-pong or cooperative), of its height if there is one */
int conv_swap_twin(int v) {
    const conv_row *x = &conv_rows[v];
    int found = -1;
    for (int i = conv_kind_first(CNN_CUDA_CONV_WARPSPEC); i < N_ROWS; i++) {
        const conv_row *c = &conv_rows[i];
        if (conv_is(c, SWAP) || !conv_is(c, TMA) || conv_is(c, BRES) || conv_is(c, RSM) ||
            conv_is(c, COOP) != conv_is(x, COOP) || c->bn != x->bn)
            continue;
        if (c->bm == x->bm) return i;
        if (found < 0) found = i;
    }
    CNN_ASSERT(found >= 0 && "a transposed-tile row without its twin");
    return found;
}

/* the transposed row without TMA stores of a TMA-store row's tile: what its y map cannot describe */
int conv_ost_twin(int v) {
    const conv_row *x = &conv_rows[v];
    for (int i = conv_kind_first(CNN_CUDA_CONV_WARPSPEC); i < N_ROWS; i++) {
        const conv_row *c = &conv_rows[i];
        if (conv_is(c, SWAP) && !conv_is(c, OST) && conv_is(c, COOP) == conv_is(x, COOP) && c->bm == x->bm &&
            c->bn == x->bn)
            return i;
    }
    CNN_ASSERT(!"a TMA-store row without its twin");
    return -1;
}

/* the row a strided dgrad's phase runs for row v (its OUT_PHASE program): v, but a TMA-store row's twin storing
 * from registers (the phase's pixels are not y's rows) and a filter-resident row's twin without it (with the
 * mapping, the filter-resident TMA programs spilled: test_nvrtc) */
int conv_phase_row(int v) {
    if (conv_is(&conv_rows[v], OST)) v = conv_ost_twin(v);
    if (conv_is(&conv_rows[v], BRES)) v = conv_ws_twin(v, false, conv_is(&conv_rows[v], TMA));
    return v;
}

/* the row whose stats program (STATS) runs a conv a training BatchNorm reads in place of row v: v, but a transposed
 * row's pixel-major twin (the sums follow y's rows); -1 where v is not warp-specialised (no stats program) */
int conv_stats_row(int v) {
    if (conv_kind_of(&conv_rows[v]) != CNN_CUDA_CONV_WARPSPEC) return -1;
    return conv_is(&conv_rows[v], SWAP) ? conv_swap_twin(v) : v;
}

/* the shared memory of row c's stats program: no staged residual, the sums' exchange buffers instead */
int64_t conv_stats_smem(const conv_row *c, int stages, int64_t gk) {
    const int64_t rsm = conv_is(c, RSM) ? 2 * (int64_t)(conv_is(c, COOP) ? c->bm / 2 : c->bm) * c->bn * 2 : 0;
    return conv_row_smem(c, stages, gk) - rsm + CONV_STATS_BYTES;
}

/* ---- problem geometry ------------------------------------------------------------------------------------- */

void conv_gemm_dims(const cnn_conv2d *cv, int pass, int64_t *gm, int64_t *gn, int64_t *gk) {
    int64_t npq = (int64_t)cv->n * cv->p * cv->q, rsc = (int64_t)cv->r * cv->s * cv->c;
    switch (pass) {
    case PASS_FPROP: *gm = npq, *gn = cv->k, *gk = rsc; break;
    case PASS_DGRAD: *gm = (int64_t)cv->n * cv->h * cv->w, *gn = cv->c, *gk = (int64_t)cv->r * cv->s * cv->k; break;
    default: *gm = cv->k, *gn = rsc, *gk = npq; break;
    }
}

cnn_status conv_check_problem(const cnn_conv2d *cv, int pass) {
    CNN_ASSERT(cv->n > 0 && cv->c > 0 && cv->h > 0 && cv->w > 0 && cv->k > 0 && cv->r > 0 && cv->s > 0);
    CNN_ASSERT(cv->stride_h > 0 && cv->stride_w > 0 && cv->pad_h >= 0 && cv->pad_w >= 0);
    CNN_ASSERT(cv->p == (cv->h + 2 * cv->pad_h - cv->r) / cv->stride_h + 1 && cv->p > 0);
    CNN_ASSERT(cv->q == (cv->w + 2 * cv->pad_w - cv->s) / cv->stride_w + 1 && cv->q > 0);
    int64_t gm, gn, gk;
    conv_gemm_dims(cv, pass, &gm, &gn, &gk);
    if (gm > INT_MAX - 256 || gn > INT_MAX - 256 || gk > INT_MAX - 256 || (int64_t)cv->n * cv->h * cv->w > INT_MAX)
        return cnn_fail(CNN_E_UNSUPPORTED, "convolution too large for 32-bit GEMM indices (%lld x %lld x %lld)",
                        (long long)gm, (long long)gn, (long long)gk);
    if (cdiv(gn, 32) > 65535) return cnn_fail(CNN_E_UNSUPPORTED, "convolution output width %lld too large", (long long)gn);
    return CNN_OK;
}

const char *conv_dtype_str(const cuda_be *cb) {
    if (cb->pub.act_dtype == CNN_DTYPE_F32) return cb->allow_tf32 ? "tf32" : "f32ffma";
    return cuda_dtype_str(cb->pub.act_dtype);
}

int64_t conv_launch_gk(const cnn_conv2d *cv, const conv_pair *pr) {
    int64_t gm, gn, gk;
    conv_gemm_dims(cv, PASS_FPROP, &gm, &gn, &gk);
    return pr ? gk + (int64_t)pr->cv->r * pr->cv->s * pr->cv->c : gk;
}
