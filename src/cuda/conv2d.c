/* conv2d.c -- launchers of the convolution passes (kernels/conv2d.cu) and their search space.
 *
 * Every pass is an implicit GEMM (views in kernels/params.cuh). The variants below are the candidates of all
 * three passes: SIMT tiles (fp32 FMA, every dtype) and tensor-core tiles (mma.sync on F16/BF16 operands, sm_80
 * and newer). A variant is valid for every shape (edges are masked), so choosing one is only about speed:
 *     cuda_conv_candidates()  the variants usable for a problem on this backend (dtype, GPU)
 *     cuda_conv_pick()        the heuristic choice among them (or the variant forced by cnn_cuda_conv_force_config)
 * The forward pass of F16/BF16 convolutions with C % 8 == 0 and K % 8 == 0 (and of F32 ones with C % 4 == 0 on
 * the mma.sync configs: multiplied in TF32 with allow_tf32, else in fp32 FMA by the same programs compiled with
 * FFMA=1, family conv2d_fprop_ffma) goes instead to the fast kernels of
 * conv2d_tc.cu (tc_configs, numbered after the generic variants), whose tile config and split-K are chosen per
 * layer shape by the autotuner (--tune, winners cached by tune.c) or, with --tune none, by a heuristic; so does
 * narrow first layers (C < 8) after a rewrite of their operands (narrow_fprop: space-to-depth for the stride-2
 * stem, channel padding otherwise).
 *
 * Variants are numbered across both kinds: 0 .. N_SIMT-1 are SIMT configs, N_SIMT .. are tensor-core configs;
 * each kind is its own kernel family per pass (conv2d_fprop, conv2d_fprop_mma, ...), compiled from conv2d.cu
 * with -DMMA=0/1.
 *
 * wgrad reduces over N*P*Q, usually far longer than the output is wide, so it splits the reduction over
 * gridDim.z; each split writes a partial tile to the workspace and conv2d_wgrad_reduce adds them in split order:
 * deterministic. The number of splits depends only on the shape and the GPU's SM count.
 */
#include "cuda/internal.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct conv_config {
    const char *name;
    bool mma;         /* tensor cores: F16/BF16 only, sm_80+ */
    int bm, bn, bk;   /* CTA tile of the GEMM view */
    int tm, tn;       /* SIMT: per-thread sub-tile; MMA: warps along rows (WM) and columns (WN) */
    float speed;      /* relative throughput of a full tile, for the heuristic */
} conv_config;

static const conv_config configs[] = {
    /* SIMT */
    {"128x128x8/8x8", false, 128, 128, 8, 8, 8, 1.00f},
    {"128x64x8/8x4", false, 128, 64, 8, 8, 4, 0.90f},
    {"64x128x8/4x8", false, 64, 128, 8, 4, 8, 0.90f},
    {"64x64x16/4x4", false, 64, 64, 16, 4, 4, 0.75f},
    {"32x64x16/2x4", false, 32, 64, 16, 2, 4, 0.55f},
    /* tensor cores */
    {"mma128x128x32/w2x4", true, 128, 128, 32, 2, 4, 8.0f},
    {"mma128x64x32/w2x2", true, 128, 64, 32, 2, 2, 7.0f},
    {"mma64x128x32/w2x2", true, 64, 128, 32, 2, 2, 7.0f},
    {"mma64x64x32/w2x2", true, 64, 64, 32, 2, 2, 5.5f},
};
#define N_VARIANTS ((int)(sizeof configs / sizeof configs[0]))
#define N_SIMT 5 /* the first N_SIMT are SIMT */

/* The fast forward kernels of conv2d_tc.cu (cp.async pipeline, ldmatrix, mma.sync, fused epilogue): F16/BF16,
 * sm_80+, C % 8 == 0, K % 8 == 0, 16-byte aligned tensors. Numbered after the generic variants. Configs whose
 * shared memory exceeds what this GPU lets one block opt in to are never candidates. */
typedef struct tc_config {
    const char *name;
    int bm, bn, bk, wm, wn, stages;
    int minb;    /* CTAs per SM the registers must allow (__launch_bounds__) */
    float speed; /* relative throughput of a full tile, for the heuristic */
    bool wg;     /* conv2d_wg.cu (wgmma, sm_90a only; wm = warpgroups, BK 64, no split-K) */
    bool persist; /* wgmma: the program of the row without /p (same defines), launched on a persistent grid */
    bool ws;      /* conv2d_ws.cu (sm_90a): a producer warpgroup and wm = 2 consumer warpgroups, each multiplying
                   * its own bm x bn tile (BK 64, persistent grid, no split-K) */
    bool bres;    /* ws with the filter's column block resident in shared memory (BRES=1): only where all its
                   * slices fit (bres_fits), otherwise its twin without /b runs */
    bool tma;     /* ws whose producer is one thread issuing TMA copies (TMA=1, the /t rows): only where the
                   * problem fits the tensor maps (tma_fits: C % 64 == 0 among others), otherwise its twin
                   * without /t runs */
    bool coop;    /* ws TMA row whose two consumers share each bm x bn tile, half its rows each (COOP=1, the /c
                   * rows), where the others alternate over tiles; its fallback where the maps do not apply is
                   * the persistent wgmma row of the same tile */
    bool rsm;     /* ws TMA row staging a residual in shared memory (RSM=1, the /r rows: each consumer warp copies
                   * its tile's residual while the tile is multiplied), with fewer ring stages to make the room;
                   * tuned only where the conv adds a residual */
    bool swap;    /* ws TMA row multiplying the transposed tile (SWAP=1, the /x rows: the filter slice is wgmma's
                   * m64 operand, the bm pixels its n operand); no residual and no pair (swap_twin runs those) */
    bool ost;     /* transposed-tile row storing its output through TMA (OST=1, the /o rows: each consumer warp's
                   * 16 channels x bm pixels rounded into a box of shared memory, one TMA store each), a ring stage
                   * shorter than its twin without /o (ost_twin), which runs what its y map cannot describe */
} tc_config;
static const tc_config tc_configs[] = {
    {"tc128x128/w2x4/s3", 128, 128, 32, 2, 4, 3, 2, 1.00f, false, false, false, false, false, false, false, false, false},
    {"tc128x64/w2x2/s4", 128, 64, 32, 2, 2, 4, 1, 0.85f, false, false, false, false, false, false, false, false, false},
    {"tc64x128/w2x2/s4", 64, 128, 32, 2, 2, 4, 1, 0.85f, false, false, false, false, false, false, false, false, false},
    {"tc64x64/w2x2/s4", 64, 64, 32, 2, 2, 4, 1, 0.70f, false, false, false, false, false, false, false, false, false},
    {"tc128x128/w2x2/s3", 128, 128, 32, 2, 2, 3, 1, 0.95f, false, false, false, false, false, false, false, false, false}, /* 64x64 warp tiles */
    {"tc256x128/w4x2/s2", 256, 128, 32, 4, 2, 2, 1, 0.90f, false, false, false, false, false, false, false, false, false},
    {"tc128x256/w2x4/s2", 128, 256, 32, 2, 4, 2, 1, 0.90f, false, false, false, false, false, false, false, false, false},
    /* 64-channel slices: half the barriers per multiply-add, twice the bytes in flight per stage; over 48 KB of
     * shared memory, so dynamic */
    {"tc128x128k64/w2x4/s3", 128, 128, 64, 2, 4, 3, 1, 1.05f, false, false, false, false, false, false, false, false, false},
    {"tc128x256k64/w2x4/s3", 128, 256, 64, 2, 4, 3, 1, 1.02f, false, false, false, false, false, false, false, false, false},
    {"tc128x64k64/w2x2/s4", 128, 64, 64, 2, 2, 4, 1, 0.88f, false, false, false, false, false, false, false, false, false},
    /* wgmma (conv2d_wg.cu), after every mma.sync config: two warpgroups of 64 rows each */
    {"tc128x128wg/g2/s6", 128, 128, 64, 2, 1, 6, 1, 2.00f, true, false, false, false, false, false, false, false, false},
    {"tc128x256wg/g2/s4", 128, 256, 64, 2, 1, 4, 1, 1.95f, true, false, false, false, false, false, false, false, false},
    {"tc128x64wg/g2/s4", 128, 64, 64, 2, 1, 4, 1, 1.80f, true, false, false, false, false, false, false, false, false},
    {"tc64x128wg/g1/s4", 64, 128, 64, 1, 1, 4, 1, 1.70f, true, false, false, false, false, false, false, false, false}, /* one warpgroup: many CTAs per SM */
    {"tc256x128wg/g2/s4", 256, 128, 64, 2, 1, 4, 1, 1.90f, true, false, false, false, false, false, false, false, false}, /* two m64 blocks per warpgroup */
    /* the same programs on a persistent grid (as many CTAs as fit, each looping over tiles, so the next tile's
     * first slices load during this one's epilogue): the memory-bound short reductions. Last, after every row
     * that has its own program */
    {"tc128x128wg/g2/s6/p", 128, 128, 64, 2, 1, 6, 1, 2.00f, true, true, false, false, false, false, false, false, false},
    {"tc128x256wg/g2/s4/p", 128, 256, 64, 2, 1, 4, 1, 1.95f, true, true, false, false, false, false, false, false, false},
    {"tc128x64wg/g2/s4/p", 128, 64, 64, 2, 1, 4, 1, 1.80f, true, true, false, false, false, false, false, false, false},
    {"tc64x128wg/g1/s4/p", 64, 128, 64, 1, 1, 4, 1, 1.70f, true, true, false, false, false, false, false, false, false},
    {"tc256x128wg/g2/s4/p", 256, 128, 64, 2, 1, 4, 1, 1.90f, true, true, false, false, false, false, false, false, false},
    /* warp-specialised (conv2d_ws.cu): the tile is each consumer warpgroup's; a CTA works on two at once, one
     * multiplying while the other runs its epilogue. Last: N_TC_WS rows, each its own program */
    {"tc64x256ws/s5", 64, 256, 64, 2, 1, 5, 1, 1.95f, false, false, true, false, false, false, false, false, false},
    {"tc128x128ws/s6", 128, 128, 64, 2, 1, 6, 1, 1.95f, false, false, true, false, false, false, false, false, false},
    {"tc64x128ws/s8", 64, 128, 64, 2, 1, 8, 1, 1.80f, false, false, true, false, false, false, false, false, false},
    {"tc64x256ws/s8/b", 64, 256, 64, 2, 1, 8, 1, 1.95f, false, false, true, true, false, false, false, false, false},
    {"tc128x128ws/s6/b", 128, 128, 64, 2, 1, 6, 1, 1.95f, false, false, true, true, false, false, false, false, false},
    /* the same with TMA copies (the producer one thread, the consumers with more registers) */
    {"tc128x128ws/s6/t", 128, 128, 64, 2, 1, 6, 1, 1.95f, false, false, true, false, true, false, false, false, false},
    {"tc64x256ws/s5/t", 64, 256, 64, 2, 1, 5, 1, 1.95f, false, false, true, false, true, false, false, false, false},
    {"tc64x256ws/s8/b/t", 64, 256, 64, 2, 1, 8, 1, 1.95f, false, false, true, true, true, false, false, false, false},
    {"tc128x128ws/s6/b/t", 128, 128, 64, 2, 1, 6, 1, 1.95f, false, false, true, true, true, false, false, false, false},
    /* K = 64 (ResNet's 64-channel convs): 64 columns, where a 128- or 256-wide tile would be half empty; without
     * a cp.async twin (its fallback is the persistent wgmma row of the same tile) */
    {"tc128x64ws/s8/t", 128, 64, 64, 2, 1, 8, 1, 1.80f, false, false, true, false, true, false, false, false, false},
    /* cooperative (both consumers on one tile, m64n256 or 2 x m64n128 each): per stage one B slice for twice
     * the rows of a consumer's tile; the tuner takes them for most of ResNet-50's long reductions, by small
     * margins (VGG-16 b256 8% faster, perf-log step 30) */
    {"tc128x256ws/s4/c/t", 128, 256, 64, 2, 1, 4, 1, 1.95f, false, false, true, false, true, true, false, false, false},
    {"tc256x128ws/s4/c/t", 256, 128, 64, 2, 1, 4, 1, 1.95f, false, false, true, false, true, true, false, false, false},
    /* m64n128 each: half the tile of the two above, for long reductions over few output tiles, where those
     * leave the last round of tiles half the SMs (ResNet-50's 7x7 layers at b256: 196 tiles of 128x256 on 132
     * SMs, 392 of 128x128) */
    {"tc128x128ws/s6/c/t", 128, 128, 64, 2, 1, 6, 1, 1.95f, false, false, true, false, true, true, false, false, false},
    /* the residual staged in shared memory, 64 KB for the two consumers' tiles, the ring shortened to make the
     * room: ResNet-50's 256->1024 and 512->2048 convs with a residual 6% faster (perf-log step 43). The same with
     * 64x256 tiles (3 stages, with and without /b) and with the cooperative 128x256 and 128x128 tiles was slower
     * than the rows above on every residual conv of ResNet-50: not kept */
    {"tc128x128ws/s4/t/r", 128, 128, 64, 2, 1, 4, 1, 1.95f, false, false, true, false, true, false, true, false, false},
    /* the transposed tile for 64 output channels (the filter slice as wgmma's m64 operand, 256 pixels as its n):
     * one m64n256 per k16 step reads 10 KB of shared memory where the 128x64 row's two m64n64 read 8 KB for half
     * the multiply-adds */
    {"tc256x64ws/s5/t/x", 256, 64, 64, 2, 1, 5, 1, 1.80f, false, false, true, false, true, false, false, true, false},
    /* and cooperative: 256 pixels x 128 channels, each consumer m64n256 over its 64 channels, where the
     * pixel-major 256x128 tile's consumers issue two m64n128 each */
    {"tc256x128ws/s4/c/t/x", 256, 128, 64, 2, 1, 4, 1, 1.95f, false, false, true, false, true, true, false, true, false},
    /* 192 pixels (m64n192 per consumer): ResNet-50's 7x7 layers at b256 (12544 pixels x 512 channels) make 264
     * tiles of 192x128, two full rounds on 132 SMs, where 196 of 256x128 leave half the second round idle and the
     * 128x128 tiles move more shared-memory bytes per multiply-add: at the tensor cores' rate 53 bytes per clock
     * of copies landing and 85 of wgmma operand reads, against 64 and 96 */
    {"tc192x128ws/s5/c/t/x", 192, 128, 64, 2, 1, 5, 1, 1.95f, false, false, true, false, true, true, false, true, false},
    /* the cooperative transposed tiles with their stores handed to the copy engine (/o), in pieces spread over the
     * next tile's mainloop: both consumers' epilogues stall the tensor cores only while they round into shared
     * memory, and the CTAs' outputs are not written in one burst; their boxes (48 and 64 KB) cost a ring stage
     * (two for 256x128). The tuner's winner on four of ResNet-50's layers, by up to 6% (128->128 28x28 3x3),
     * elsewhere within 1% or slower than the rows above (docs/perf-log.md steps 50 and 52) */
    {"tc192x128ws/s4/c/t/x/o", 192, 128, 64, 2, 1, 4, 1, 1.95f, false, false, true, false, true, true, false, true, true},
    {"tc256x128ws/s3/c/t/x/o", 256, 128, 64, 2, 1, 3, 1, 1.95f, false, false, true, false, true, true, false, true, true},
};
#define N_TC ((int)(sizeof tc_configs / sizeof tc_configs[0]))
#define N_TC_MMA 10 /* the first N_TC_MMA are conv2d_tc.cu's, the rest conv2d_wg.cu's */
#define N_TC_WG 5   /* conv2d_wg.cu programs; the rows after them are their persistent twins */
#define N_TC_WS 19  /* conv2d_ws.cu programs: the last rows */
#define FIRST_WS (N_TC - N_TC_WS)

enum { PASS_FPROP = 0, PASS_DGRAD = 1, PASS_WGRAD = 2 };

static int threads_of(const conv_config *c) {
    return c->mma ? 32 * c->tm * c->tn : (c->bm / c->tm) * (c->bn / c->tn);
}

/* The static_asserts of conv2d.cu, checked on the host before a launch can fail for them. */
static void check_config(const conv_config *c) {
    int nt = threads_of(c);
    if (c->mma)
        CNN_ASSERT((c->bm / c->tm) % 16 == 0 && (c->bn / c->tn) % 8 == 0 && c->bk % 16 == 0);
    else
        CNN_ASSERT(c->bm % c->tm == 0 && c->bn % c->tn == 0);
    CNN_ASSERT(nt % 32 == 0 && nt <= 1024);
    CNN_ASSERT((c->bm * c->bk) % nt == 0 && (c->bk * c->bn) % nt == 0);
    CNN_ASSERT(nt % c->bk == 0 && nt % c->bm == 0 && nt % c->bn == 0);
}

int cnn_cuda_conv_config_count(void) { return N_VARIANTS + N_TC; }
const char *cnn_cuda_conv_config_name(int v) {
    CNN_ASSERT(v >= 0 && v < N_VARIANTS + N_TC);
    return v < N_VARIANTS ? configs[v].name : tc_configs[v - N_VARIANTS].name;
}

/* ---- the kernel families: per pass, one SIMT and one tensor-core family; config index within the kind ---- */

static const char *simt_name(int cfg) { return configs[cfg].name; }
static const char *mma_name(int cfg) { return configs[N_SIMT + cfg].name; }

static void defines_pass(int pass, const conv_config *c, char *buf, size_t cap) {
    if (c->mma)
        snprintf(buf, cap, "-DPASS=%d -DMMA=1 -DBM=%d -DBN=%d -DBK=%d -DWM=%d -DWN=%d", pass, c->bm, c->bn, c->bk, c->tm,
                 c->tn);
    else
        snprintf(buf, cap, "-DPASS=%d -DMMA=0 -DBM=%d -DBN=%d -DBK=%d -DTM=%d -DTN=%d", pass, c->bm, c->bn, c->bk, c->tm,
                 c->tn);
}
static void def_fprop(int cfg, char *buf, size_t cap) { defines_pass(PASS_FPROP, &configs[cfg], buf, cap); }
static void def_dgrad(int cfg, char *buf, size_t cap) { defines_pass(PASS_DGRAD, &configs[cfg], buf, cap); }
static void def_wgrad(int cfg, char *buf, size_t cap) { defines_pass(PASS_WGRAD, &configs[cfg], buf, cap); }
static void def_fprop_mma(int cfg, char *buf, size_t cap) { defines_pass(PASS_FPROP, &configs[N_SIMT + cfg], buf, cap); }
static void def_dgrad_mma(int cfg, char *buf, size_t cap) { defines_pass(PASS_DGRAD, &configs[N_SIMT + cfg], buf, cap); }
static void def_wgrad_mma(int cfg, char *buf, size_t cap) { defines_pass(PASS_WGRAD, &configs[N_SIMT + cfg], buf, cap); }

static const char *const fprop_entries[] = {"conv2d_fprop"};
static const char *const dgrad_entries[] = {"conv2d_dgrad"};
static const char *const wgrad_entries[] = {"conv2d_wgrad", "conv2d_wgrad_reduce"};
enum { WGRAD_MAIN = 0, WGRAD_REDUCE = 1 };
#define HALF_DTS (CUDA_DT_F16 | CUDA_DT_BF16)

const cuda_family cuda_family_conv2d_fprop = {"conv2d_fprop", "conv2d.cu", fprop_entries, 1, CUDA_DT_ALL, N_SIMT,
                                              def_fprop, simt_name};
const cuda_family cuda_family_conv2d_dgrad = {"conv2d_dgrad", "conv2d.cu", dgrad_entries, 1, CUDA_DT_ALL, N_SIMT,
                                              def_dgrad, simt_name};
const cuda_family cuda_family_conv2d_wgrad = {"conv2d_wgrad", "conv2d.cu", wgrad_entries, 2, CUDA_DT_ALL, N_SIMT,
                                              def_wgrad, simt_name};
const cuda_family cuda_family_conv2d_fprop_mma = {"conv2d_fprop_mma", "conv2d.cu", fprop_entries, 1, HALF_DTS,
                                                  N_VARIANTS - N_SIMT, def_fprop_mma, mma_name};
const cuda_family cuda_family_conv2d_dgrad_mma = {"conv2d_dgrad_mma", "conv2d.cu", dgrad_entries, 1, HALF_DTS,
                                                  N_VARIANTS - N_SIMT, def_dgrad_mma, mma_name};
const cuda_family cuda_family_conv2d_wgrad_mma = {"conv2d_wgrad_mma", "conv2d.cu", wgrad_entries, 2, HALF_DTS,
                                                  N_VARIANTS - N_SIMT, def_wgrad_mma, mma_name};

static void def_fprop_wg(int cfg, char *buf, size_t cap) {
    const tc_config *c = &tc_configs[N_TC_MMA + cfg];
    CNN_ASSERT(c->wg && c->bk == 64);
    snprintf(buf, cap, "-DBM=%d -DBN=%d -DWGS=%d -DSTAGES=%d -DMINB=%d", c->bm, c->bn, c->wm, c->stages, c->minb);
}
static const char *wg_name(int cfg) { return tc_configs[N_TC_MMA + cfg].name; }
static const char *const fprop_wg_entries[] = {"conv2d_fprop_wg"};
const cuda_family cuda_family_conv2d_fprop_wg = {"conv2d_fprop_wg", "conv2d_wg.cu", fprop_wg_entries, 1, HALF_DTS,
                                                 N_TC_WG, def_fprop_wg, wg_name};

/* the conv2d_wg.cu program a wgmma row launches: its own, or for a persistent row its twin's */
static int wg_program(int tv) {
    const tc_config *c = &tc_configs[tv];
    CNN_ASSERT(c->wg && (tv < N_TC_MMA + N_TC_WG) == !c->persist); /* N_TC_WG counts the rows with a program */
    if (!c->persist) return tv - N_TC_MMA;
    for (int i = N_TC_MMA; i < N_TC_MMA + N_TC_WG; i++) {
        const tc_config *o = &tc_configs[i];
        if (o->bm == c->bm && o->bn == c->bn && o->wm == c->wm && o->stages == c->stages && o->minb == c->minb)
            return i - N_TC_MMA;
    }
    CNN_ASSERT(!"a persistent wgmma row without a twin");
    return -1;
}
/* the persistent twin of a wgmma row, -1 if none */
static int wg_persistent_twin(int tv) {
    for (int i = N_TC_MMA + N_TC_WG; i < FIRST_WS; i++)
        if (wg_program(i) == tv - N_TC_MMA) return i;
    return -1;
}

static void def_fprop_ws(int cfg, char *buf, size_t cap) {
    const tc_config *c = &tc_configs[FIRST_WS + cfg];
    CNN_ASSERT(c->ws && c->bk == 64 && c->wm == 2);
    snprintf(buf, cap, "-DBM=%d -DBN=%d -DSTAGES=%d -DBRES=%d -DTMA=%d -DCOOP=%d -DRSM=%d -DSWAP=%d -DOST=%d", c->bm,
             c->bn, c->stages, c->bres ? 1 : 0, c->tma ? 1 : 0, c->coop ? 1 : 0, c->rsm ? 1 : 0, c->swap ? 1 : 0,
             c->ost ? 1 : 0);
}
static const char *ws_name(int cfg) { return tc_configs[FIRST_WS + cfg].name; }
static const char *const fprop_ws_entries[] = {"conv2d_fprop_ws"};
const cuda_family cuda_family_conv2d_fprop_ws = {"conv2d_fprop_ws", "conv2d_ws.cu", fprop_ws_entries, 1, HALF_DTS,
                                                 N_TC_WS, def_fprop_ws, ws_name};

static void def_fprop_tc(int cfg, char *buf, size_t cap) {
    const tc_config *c = &tc_configs[cfg];
    CNN_ASSERT(!c->wg); /* N_TC_MMA counts the mma.sync configs */
    snprintf(buf, cap, "-DBM=%d -DBN=%d -DBK=%d -DWM=%d -DWN=%d -DSTAGES=%d -DMINB=%d", c->bm, c->bn, c->bk, c->wm,
             c->wn, c->stages, c->minb);
}
static const char *tc_name(int cfg) { return tc_configs[cfg].name; }
static const char *const fprop_tc_entries[] = {"conv2d_fprop_tc",   "conv2d_tc_splitk_epilogue", "conv2d_s2d_input",
                                               "conv2d_s2d_filter", "conv2d_pad_channels",       "conv2d_dgrad_filter",
                                               "conv2d_dgrad_interleave"};
enum {
    TC_MAIN = 0, TC_SPLITK_EPILOGUE = 1, TC_S2D_INPUT = 2, TC_S2D_FILTER = 3, TC_PAD_CHANNELS = 4, TC_DGRAD_FILTER = 5,
    TC_DGRAD_INTERLEAVE = 6
};
const cuda_family cuda_family_conv2d_fprop_tc = {"conv2d_fprop_tc", "conv2d_tc.cu", fprop_tc_entries, 7, CUDA_DT_ALL,
                                                 N_TC_MMA, def_fprop_tc, tc_name};
/* the same programs with the multiply-adds in fp32 FMA (FFMA=1): F32 without allow_tf32 (true fp32) */
static void def_fprop_ffma(int cfg, char *buf, size_t cap) {
    def_fprop_tc(cfg, buf, cap);
    size_t len = strlen(buf);
    snprintf(buf + len, cap - len, " -DFFMA=1");
}
const cuda_family cuda_family_conv2d_fprop_ffma = {"conv2d_fprop_ffma", "conv2d_tc.cu", fprop_tc_entries, 7,
                                                   CUDA_DT_F32, N_TC_MMA, def_fprop_ffma, tc_name};

static const cuda_family *family_of(int pass, int v) {
    static const cuda_family *const fams[2][3] = {
        {&cuda_family_conv2d_fprop, &cuda_family_conv2d_dgrad, &cuda_family_conv2d_wgrad},
        {&cuda_family_conv2d_fprop_mma, &cuda_family_conv2d_dgrad_mma, &cuda_family_conv2d_wgrad_mma}};
    return fams[configs[v].mma][pass];
}
static int family_cfg(int v) { return configs[v].mma ? v - N_SIMT : v; }

/* ---- choosing a variant ---------------------------------------------------------------------------------- */

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* a wgmma row (conv2d_wg.cu or conv2d_ws.cu): sm_90a, F16/BF16, no split-K, stages aligned to 1024 bytes */
static bool tc_hopper(const tc_config *c) { return c->wg || c->ws; }

/* shared memory of a launch with `stages` ring stages over a reduction of gk elements; a B-resident row's ring
 * holds only A slices, and every B slice of the reduction follows it */
static int64_t tc_launch_smem(const tc_config *c, int stages, int64_t gk) {
    const int64_t align = tc_hopper(c) ? 1024 : 0;
    /* conv2d_ws.cu's epilogue scratch (EPI_BYTES: 1 KB per consumer warp, or its box of 16 channels x bm pixels)
     * and staged residual (RSM_BYTES: the two consumers' rows) */
    const int64_t epi = (c->ws ? 8 * (c->ost ? 32 * (int64_t)c->bm : 1024) : 0) + (c->rsm ? 2 * (int64_t)(c->coop ? c->bm / 2 : c->bm) * c->bn * 2 : 0);
    if (c->bres) return epi + (int64_t)c->bm * c->bk * 2 * stages + cdiv(gk, c->bk) * c->bn * c->bk * 2 + align;
    return epi + (int64_t)(c->bm + c->bn) * c->bk * 2 * stages + align;
}
/* the least a config needs (a B-resident one: with a single B slice) */
static int64_t tc_smem(const tc_config *c) { return tc_launch_smem(c, c->stages, c->bk); }

/* whether CNN_CONV_SKIP (comma-separated parts of row names) names this row */
static bool tc_skipped(const cuda_be *cb, const tc_config *c) {
    for (const char *p = cb->conv_skip; *p;) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        char part[sizeof cb->conv_skip];
        memcpy(part, p, len);
        part[len] = 0;
        if (len && strstr(c->name, part)) return true;
        p += len + (e ? 1 : 0);
    }
    return false;
}

/* a tensor-core config on this backend: wgmma needs exactly sm_90a and F16/BF16, every config its shared memory */
static bool tc_usable(const cuda_be *cb, const tc_config *c) {
    const bool hopper = tc_hopper(c);
    if (tc_skipped(cb, c)) return false;
    if (c->ws && cb->no_ws) return false;
    if (c->tma && cb->no_tma) return false;
    if (c->coop && cb->no_coop) return false;
    if (c->swap && cb->no_swap) return false;
    if (hopper && (cb->cc_major != 9 || cb->cc_minor != 0 || strcmp(cb->arch, "sm_90a") != 0)) return false;
    if (hopper && cb->pub.act_dtype == CNN_DTYPE_F32) return false; /* TF32 and FFMA run on conv2d_tc.cu only */
    return tc_smem(c) <= cb->smem_optin;
}

bool cnn_cuda_conv_config_usable(cnn_backend *be, int v) {
    CNN_ASSERT(v >= 0 && v < N_VARIANTS + N_TC);
    const cuda_be *cb = cuda_impl(be);
    if (v < N_VARIANTS && !configs[v].mma) return true;
    if (cb->cc_major < 8 || cb->no_mma) return false;
    if (v < N_VARIANTS) return be->act_dtype != CNN_DTYPE_F32; /* conv2d.cu's mma variants: F16/BF16 */
    const tc_config *c = &tc_configs[v - N_VARIANTS];
    if (!tc_usable(cb, c)) return false;
    /* F32 activations: conv2d_tc.cu, in TF32 when asked for (--dtype tf32), else with fp32 FMA (FFMA=1); wgmma is
     * F16/BF16 here */
    return be->act_dtype != CNN_DTYPE_F32 || !tc_hopper(c);
}

/* the conv2d_tc.cu family a launch takes: F32 without allow_tf32 multiplies in fp32 FMA */
static const cuda_family *tc_family(const cuda_be *cb) {
    return cb->pub.act_dtype == CNN_DTYPE_F32 && !cb->allow_tf32 ? &cuda_family_conv2d_fprop_ffma
                                                                 : &cuda_family_conv2d_fprop_tc;
}

/* bytes of one activation element, and reduction elements per slice of a tensor-core config (a slice row is
 * bk*2 bytes: bk F16/BF16 elements, bk/2 F32 ones) */
static int act_size(const cuda_be *cb) { return (int)cnn_dtype_size(cb->pub.act_dtype); }
static int tc_ks(const cuda_be *cb, const tc_config *c) { return c->bk * 2 / act_size(cb); }
/* the dtype as the tensor-core kernels compute it: "tf32" for F32 activations in TF32, "f32ffma" in fp32 FMA */
static const char *tc_dtype_str(const cuda_be *cb) {
    if (cb->pub.act_dtype == CNN_DTYPE_F32) return cb->allow_tf32 ? "tf32" : "f32ffma";
    return cuda_dtype_str(cb->pub.act_dtype);
}

/* GEMM view of a pass, in 64 bits (callers check the int range) */
static void gemm_dims(const cnn_conv2d *cv, int pass, int64_t *gm, int64_t *gn, int64_t *gk) {
    int64_t npq = (int64_t)cv->n * cv->p * cv->q, rsc = (int64_t)cv->r * cv->s * cv->c;
    switch (pass) {
    case PASS_FPROP: *gm = npq, *gn = cv->k, *gk = rsc; break;
    case PASS_DGRAD: *gm = (int64_t)cv->n * cv->h * cv->w, *gn = cv->c, *gk = (int64_t)cv->r * cv->s * cv->k; break;
    default: *gm = cv->k, *gn = rsc, *gk = npq; break;
    }
}

/* a B-resident row runs a problem when its shared memory fits (within the 227 KB conv2d_ws.cu's emulator build
 * reserves, too) and every column block gets at least one SM */
static bool bres_fits(const cuda_be *cb, const tc_config *c, int64_t gn, int64_t gk) {
    const int64_t smem = tc_launch_smem(c, c->stages, gk);
    return smem <= cb->smem_optin && smem <= 227 * 1024 && cdiv(gn, c->bn) <= cb->sm_count;
}
/* the ws row of the same tile with (bres, tma) as given: a B-resident row's twin without /b runs what it cannot,
 * a TMA row's twin without /t likewise; a TMA row without such a twin falls back to the persistent wgmma row of
 * its tile (conv2d_wg.cu) */
static int ws_twin(int tv, bool bres, bool tma) {
    for (int i = FIRST_WS; i < N_TC; i++)
        if (!tc_configs[i].swap && tc_configs[i].bres == bres && tc_configs[i].tma == tma &&
            tc_configs[i].coop == tc_configs[tv].coop &&
            tc_configs[i].rsm == (tma && tc_configs[tv].rsm) && tc_configs[i].bm == tc_configs[tv].bm &&
            tc_configs[i].bn == tc_configs[tv].bn)
            return i;
    for (int i = N_TC_MMA + N_TC_WG; i < FIRST_WS && !tma; i++)
        if (tc_configs[i].persist && tc_configs[i].bm == tc_configs[tv].bm && tc_configs[i].bn == tc_configs[tv].bn)
            return i;
    CNN_ASSERT(!"a warp-specialised row without its twin");
    return -1;
}

/* the row a transposed-tile row (/x) hands what it does not run to (a residual, a pair, a problem off its tensor
 * maps): the pixel-major TMA row of its width and kind (ping-pong or cooperative), of its height if there is one */
static int swap_twin(int tv) {
    const tc_config *x = &tc_configs[tv];
    int found = -1;
    for (int i = FIRST_WS; i < N_TC; i++) {
        const tc_config *c = &tc_configs[i];
        if (c->swap || !c->tma || c->bres || c->rsm || c->coop != x->coop || c->bn != x->bn) continue;
        if (c->bm == x->bm) return i;
        if (found < 0) found = i;
    }
    CNN_ASSERT(found >= 0 && "a transposed-tile row without its twin");
    return found;
}

/* whether a /o row's y map describes the output: (N*P*Q, K) rows 16-byte aligned (K % 8 == 0, y aligned), at
 * most 2^32 of them (cuTensorMapEncodeTiled) */
static bool ost_fits(int64_t gm, int64_t gn, const void *y) {
    return gn % 8 == 0 && ((uintptr_t)y & 15) == 0 && gm <= ((int64_t)1 << 32);
}
/* the transposed-tile row without /o of a /o row's tile: what its y map cannot describe */
static int ost_twin(int tv) {
    const tc_config *x = &tc_configs[tv];
    for (int i = FIRST_WS; i < N_TC; i++) {
        const tc_config *c = &tc_configs[i];
        if (c->swap && !c->ost && c->coop == x->coop && c->bm == x->bm && c->bn == x->bn) return i;
    }
    CNN_ASSERT(!"a /o row without its twin");
    return -1;
}

/* whether the TMA rows' tensor maps describe a forward problem: x (N, H, W, C) in im2col mode, 64 channels of one
 * filter tap per slice (C % 64 == 0), the bounding box's corners and the tap offsets within what a 4-D im2col map
 * encodes (corners in [-128, 127], offsets in [0, 255]), traversal strides of at most 8, the filter's rows whole
 * 16-byte multiples (cuTensorMapEncodeIm2col / cuTensorMapEncodeTiled) */
static void tma_corners(const cnn_conv2d *cv, int lo[2], int hi[2]) {
    lo[0] = -cv->pad_w, lo[1] = -cv->pad_h; /* the first output pixel's filter base */
    hi[0] = (cv->q - 1) * cv->stride_w - cv->pad_w - (cv->w - 1); /* the last one's, from the far edge */
    hi[1] = (cv->p - 1) * cv->stride_h - cv->pad_h - (cv->h - 1);
}
static bool tma_fits(const cnn_conv2d *cv) {
    int lo[2], hi[2];
    tma_corners(cv, lo, hi);
    for (int i = 0; i < 2; i++)
        if (lo[i] < -128 || lo[i] > 127 || hi[i] < -128 || hi[i] > 127) return false;
    return cv->c % 64 == 0 && cv->r <= 256 && cv->s <= 256 && cv->stride_h <= 8 && cv->stride_w <= 8;
}

int cuda_conv_candidates(const cuda_be *cb, const cnn_conv2d *cv, int pass, int *out, int cap) {
    (void)cv;
    (void)pass;
    int n = 0;
    for (int v = 0; v < N_VARIANTS && n < cap; v++)
        if (cnn_cuda_conv_config_usable((cnn_backend *)&cb->pub, v)) out[n++] = v;
    return n;
}

int cuda_conv_pick(const cuda_be *cb, const cnn_conv2d *cv, int pass) {
    if (cb->conv_force_cfg >= 0 && cb->conv_force_cfg < N_VARIANTS) return cb->conv_force_cfg;
    int64_t gm, gn, gk;
    gemm_dims(cv, pass, &gm, &gn, &gk);
    int cand[N_VARIANTS];
    int nc = cuda_conv_candidates(cb, cv, pass, cand, N_VARIANTS);
    CNN_ASSERT(nc > 0);
    int best = cand[0];
    double best_score = -1;
    for (int i = 0; i < nc; i++) {
        const conv_config *c = &configs[cand[i]];
        int64_t tiles = cdiv(gm, c->bm) * cdiv(gn, c->bn);
        double util = (double)gm * gn / ((double)tiles * c->bm * c->bn); /* edge waste */
        /* enough CTAs to fill the GPU twice over; wgrad fills it with reduction splits instead */
        double par = pass == PASS_WGRAD ? 1.0 : (double)tiles / (2.0 * cb->sm_count);
        if (par > 1.0) par = 1.0;
        double score = c->speed * util * par;
        if (score > best_score + 1e-9) {
            best_score = score;
            best = cand[i];
        }
    }
    return best;
}

/* ---- launching ---------------------------------------------------------------------------------------- */

static cnn_status check_problem(const cnn_conv2d *cv, int pass) {
    CNN_ASSERT(cv->n > 0 && cv->c > 0 && cv->h > 0 && cv->w > 0 && cv->k > 0 && cv->r > 0 && cv->s > 0);
    CNN_ASSERT(cv->stride_h > 0 && cv->stride_w > 0 && cv->pad_h >= 0 && cv->pad_w >= 0);
    CNN_ASSERT(cv->p == (cv->h + 2 * cv->pad_h - cv->r) / cv->stride_h + 1 && cv->p > 0);
    CNN_ASSERT(cv->q == (cv->w + 2 * cv->pad_w - cv->s) / cv->stride_w + 1 && cv->q > 0);
    int64_t gm, gn, gk;
    gemm_dims(cv, pass, &gm, &gn, &gk);
    if (gm > INT_MAX - 256 || gn > INT_MAX - 256 || gk > INT_MAX - 256 || (int64_t)cv->n * cv->h * cv->w > INT_MAX)
        return cnn_fail(CNN_E_UNSUPPORTED, "convolution too large for 32-bit GEMM indices (%lld x %lld x %lld)",
                        (long long)gm, (long long)gn, (long long)gk);
    if (cdiv(gn, 32) > 65535) return cnn_fail(CNN_E_UNSUPPORTED, "convolution output width %lld too large", (long long)gn);
    return CNN_OK;
}

/* the problem's fields and GEMM view; one split of BK-wide reduction slices */
static conv_args make_args(const cnn_conv2d *cv, int pass, int bk) {
    conv_args a = {0};
    a.n = cv->n, a.c = cv->c, a.h = cv->h, a.w = cv->w;
    a.k = cv->k, a.r = cv->r, a.s = cv->s, a.p = cv->p, a.q = cv->q;
    a.stride_h = cv->stride_h, a.stride_w = cv->stride_w, a.pad_h = cv->pad_h, a.pad_w = cv->pad_w;
    int64_t gm, gn, gk;
    gemm_dims(cv, pass, &gm, &gn, &gk);
    a.gm = (int)gm, a.gn = (int)gn, a.gk = (int)gk;
    a.ktiles_per_split = (int)cdiv(gk, bk);
    a.splits = 1;
    return a;
}

static void label(char *buf, size_t cap, const char *pass, cnn_dtype dt, int v, const cnn_conv2d *cv) {
    snprintf(buf, cap, "conv2d_%s[%s %s] n%d c%d h%d w%d k%d r%d s%d stride %dx%d pad %dx%d", pass, cuda_dtype_str(dt),
             configs[v].name, cv->n, cv->c, cv->h, cv->w, cv->k, cv->r, cv->s, cv->stride_h, cv->stride_w, cv->pad_h,
             cv->pad_w);
}

/* variant and kernel of a pass */
static cnn_status prepare(cnn_backend *be, const cnn_conv2d *cv, int pass, int entry, int *v_out, CUfunction *f) {
    cuda_be *cb = cuda_impl(be);
    CNN_TRY(check_problem(cv, pass));
    int v = cuda_conv_pick(cb, cv, pass);
    if (!cnn_cuda_conv_config_usable(be, v))
        return cnn_fail(CNN_E_UNSUPPORTED, "conv variant %s cannot run %s activations on sm_%d%d", configs[v].name,
                        cuda_dtype_str(be->act_dtype), cb->cc_major, cb->cc_minor);
    check_config(&configs[v]);
    *v_out = v;
    return cuda_kernel(cb, family_of(pass, v), be->act_dtype, family_cfg(v), entry, f);
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* Whether the tensor-core kernels can run this forward problem (F16/BF16 on sm_80+ with C % 8, or F32 in TF32
 * with C % 4; K % 8, 16-byte aligned tensors) and no generic variant is forced. */
static bool tc_eligible(const cuda_be *cb, const cnn_conv2d *cv, const cnn_epilogue *ep, const void *x, const void *w,
                        const void *y) {
    if (!cnn_cuda_conv_config_usable((cnn_backend *)&cb->pub, N_VARIANTS)) return false;
    if (cb->conv_force_cfg >= 0 && cb->conv_force_cfg < N_VARIANTS) return false;
    if (cv->c % (16 / act_size(cb)) != 0 || cv->k % 8 != 0) return false;
    return aligned16(x) && aligned16(w) && aligned16(y) && !(ep && ep->residual && !aligned16(ep->residual));
}

/* heuristic score of a config: tile efficiency x edge utilisation x how well the tiles fill the GPU */
static double tc_score(const cuda_be *cb, const tc_config *c, int64_t gm, int64_t gn) {
    int64_t tiles = cdiv(gm, c->bm) * cdiv(gn, c->bn);
    double util = (double)gm * gn / ((double)tiles * c->bm * c->bn);
    double par = (double)tiles / (double)cb->sm_count; /* at least one CTA per SM */
    if (par > 1.0) par = 1.0;
    return c->speed * util * par;
}

/* split-K when the output tiles cannot fill the GPU: about one CTA per SM, at least 4 slices a split */
static int tc_splits(const cuda_be *cb, const tc_config *c, int64_t gm, int64_t gn, int64_t gk) {
    if (tc_hopper(c)) return 1;
    int64_t ktiles = cdiv(gk, tc_ks(cb, c)), tiles = cdiv(gm, c->bm) * cdiv(gn, c->bn), splits = 1;
    if (cb->conv_force_splitk > 0) splits = cb->conv_force_splitk;
    else if (cb->conv_force_splitk < 0 && tiles < cb->sm_count && ktiles >= 8) {
        splits = cdiv(cb->sm_count, tiles);
        if (splits > ktiles / 4) splits = ktiles / 4;
        if (splits > 32) splits = 32;
        if (splits * gm * gn * 4 > ((int64_t)64 << 20)) splits = 1;
    }
    if (splits > ktiles) splits = ktiles;
    return splits < 1 ? 1 : (int)splits;
}

/* the tensor maps of a TMA row's launch (tma_fits holds): x as an NHWC tensor in im2col mode, BM pixels x 64
 * channels per copy, traversal strides the conv's, the bounding box the filter bases of the output pixels; the
 * filter as a K x R*S*C matrix, BN rows x 64 per copy; both in the 128-byte swizzle that wgmma's descriptors read
 * (conv2d_wgmma.cuh), zeros outside. A 1x1 conv over 256 channels or more reads each pixel's row (512 bytes or
 * more) in 128-byte pieces, one per slice of the same tile: its copies promote to 256 bytes of L2, so the next
 * slice's piece comes from L2 and DRAM sees 256-byte reads (ResNet-50's memory-bound 256->64, 256->128, 512->128
 * and 512->256 1x1 convs 3, 1.5, 2.3 and 0.6% faster, the other convs within 0.5%; promoting every map made the
 * 3x3 and 64-channel convs 0-1% slower: docs/perf-log.md step 56) */
static cnn_status tma_encode(cuda_be *cb, const tc_config *c, const cnn_conv2d *cv, const void *x, const void *w,
                             conv_tma_map *a_map, conv_tma_map *b_map) {
    _Static_assert(sizeof(conv_tma_map) == sizeof(CUtensorMap) && _Alignof(conv_tma_map) >= 64, "a CUtensorMap");
    const CUtensorMapDataType dt =
        cb->pub.act_dtype == CNN_DTYPE_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    const cuuint64_t e = 2, xdim[4] = {(cuuint64_t)cv->c, (cuuint64_t)cv->w, (cuuint64_t)cv->h, (cuuint64_t)cv->n};
    const cuuint64_t xstride[3] = {xdim[0] * e, xdim[0] * xdim[1] * e, xdim[0] * xdim[1] * xdim[2] * e};
    const cuuint32_t xtrav[4] = {1, (cuuint32_t)cv->stride_w, (cuuint32_t)cv->stride_h, 1};
    int lo[2], hi[2];
    tma_corners(cv, lo, hi);
    const CUtensorMapL2promotion xprom =
        cv->r == 1 && cv->s == 1 && cv->c >= 256 ? CU_TENSOR_MAP_L2_PROMOTION_L2_256B : CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
    CU_TRY(cu.TensorMapEncodeIm2col((CUtensorMap *)a_map, dt, 4, (void *)x, xdim, xstride, lo, hi, (cuuint32_t)c->bk,
                                    (cuuint32_t)c->bm, xtrav, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                    xprom, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
           "cuTensorMapEncodeIm2col (the input of a TMA conv)");
    const cuuint64_t gk = (cuuint64_t)cv->r * cv->s * cv->c, wdim[2] = {gk, (cuuint64_t)cv->k}, wstride[1] = {gk * e};
    const cuuint32_t box[2] = {(cuuint32_t)c->bk, (cuuint32_t)c->bn}, wtrav[2] = {1, 1};
    CU_TRY(cu.TensorMapEncodeTiled((CUtensorMap *)b_map, dt, 2, (void *)w, wdim, wstride, box, wtrav,
                                   CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
           "cuTensorMapEncodeTiled (the filter of a TMA conv)");
    return CNN_OK;
}

/* a /o row's map of the output y (gm x gn, row-major): 16 channels x bm/CONV_OST_PIECES pixels per store (a piece
 * of a consumer warp's part of the transposed tile), no swizzle (tile_epilogue_cols_tma writes its box pixel-major,
 * 32 bytes per pixel) */
static cnn_status ost_encode(cuda_be *cb, const tc_config *c, int64_t gm, int64_t gn, void *y, conv_tma_map *y_map) {
    const CUtensorMapDataType dt =
        cb->pub.act_dtype == CNN_DTYPE_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    const cuuint64_t dim[2] = {(cuuint64_t)gn, (cuuint64_t)gm}, stride[1] = {(cuuint64_t)gn * 2};
    CNN_ASSERT(c->bm % CONV_OST_PIECES == 0);
    const cuuint32_t box[2] = {16, (cuuint32_t)(c->bm / CONV_OST_PIECES)}, trav[2] = {1, 1};
    CU_TRY(cu.TensorMapEncodeTiled((CUtensorMap *)y_map, dt, 2, y, dim, stride, box, trav, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                   CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
           "cuTensorMapEncodeTiled (the output of a TMA-store conv)");
    return CNN_OK;
}

/* The second convolution of a pair (cuda_conv2d_fprop_pair): summed into the same output by the TMA rows. */
typedef struct conv_pair {
    const cnn_conv2d *cv;
    const void *x, *w;
} conv_pair;

/* the reduction a launch runs: one convolution's R*S*C, or both of a pair's */
static int64_t launch_gk(const cnn_conv2d *cv, const conv_pair *pr) {
    int64_t gm, gn, gk;
    gemm_dims(cv, PASS_FPROP, &gm, &gn, &gk);
    return pr ? gk + (int64_t)pr->cv->r * pr->cv->s * pr->cv->c : gk;
}

static cnn_status tc_launch(cnn_backend *be, const cnn_conv2d *cv, const cnn_epilogue *ep, const void *x,
                            const void *w, void *y, int tv, int splits, const conv_pair *pr) {
    cuda_be *cb = cuda_impl(be);
    const tc_config *c = &tc_configs[tv];
    CUfunction f, fe = NULL;
    if (c->swap && ((ep && ep->residual) || pr || !tma_fits(cv))) c = &tc_configs[tv = swap_twin(tv)];
    if (c->ost) {
        int64_t gm0, gn0, gk0;
        gemm_dims(cv, PASS_FPROP, &gm0, &gn0, &gk0);
        if (!ost_fits(gm0, gn0, y)) c = &tc_configs[tv = ost_twin(tv)];
    }
    if (c->bres) {
        int64_t gm0, gn0, gk0;
        gemm_dims(cv, PASS_FPROP, &gm0, &gn0, &gk0);
        if (!bres_fits(cb, c, gn0, launch_gk(cv, pr))) c = &tc_configs[tv = ws_twin(tv, false, c->tma)];
    }
    if (c->tma && !tma_fits(cv)) c = &tc_configs[tv = ws_twin(tv, c->bres, false)];
    CNN_ASSERT(!pr || (c->tma && splits == 1)); /* pairs: the TMA rows only (pair_candidates, pair_fusable) */
    if (c->ws) {
        CNN_ASSERT(splits == 1);
        CNN_TRY(cuda_kernel(cb, &cuda_family_conv2d_fprop_ws, be->act_dtype, tv - FIRST_WS, 0, &f));
    } else if (c->wg) {
        CNN_ASSERT(splits == 1);
        CNN_TRY(cuda_kernel(cb, &cuda_family_conv2d_fprop_wg, be->act_dtype, wg_program(tv), 0, &f));
    } else {
        CNN_TRY(cuda_kernel(cb, tc_family(cb), be->act_dtype, tv, TC_MAIN, &f));
    }
    conv_args a = make_args(cv, PASS_FPROP, tc_ks(cb, c));
    if (pr) { /* the second convolution's slices follow the first's (both C % 64 == 0: whole slices) */
        const cnn_conv2d *c2 = pr->cv;
        a.pair_ktiles = a.ktiles_per_split;
        a.gk = (int)launch_gk(cv, pr);
        a.ktiles_per_split = (int)cdiv(a.gk, tc_ks(cb, c));
        a.c2 = c2->c, a.h2 = c2->h, a.w2 = c2->w, a.r2 = c2->r, a.s2 = c2->s;
        a.stride2_h = c2->stride_h, a.stride2_w = c2->stride_w, a.pad2_h = c2->pad_h, a.pad2_w = c2->pad_w;
        a.x2 = pr->x, a.wt2 = pr->w;
    }
    int64_t gm = a.gm, gn = a.gn, ktiles = a.ktiles_per_split, kps = cdiv(ktiles, splits);
    splits = (int)cdiv(ktiles, kps); /* no empty split */
    a.ktiles_per_split = (int)kps;
    a.splits = splits;
    a.x = x, a.wt = w, a.out = y;
    if (ep) a.scale = ep->scale, a.shift = ep->shift, a.residual = ep->residual, a.relu = ep->relu;
    if (splits > 1) {
        CNN_TRY(cuda_kernel(cb, tc_family(cb), be->act_dtype, tv, TC_SPLITK_EPILOGUE, &fe));
        void *ws;
        CNN_TRY(cuda_workspace(cb, (size_t)((int64_t)splits * gm * gn) * sizeof(float), &ws));
        a.ws = ws;
    }
    char what[200];
    snprintf(what, sizeof what, "conv2d_fprop_tc[%s %s] n%d c%d h%d w%d k%d r%d s%d stride %dx%d pad %dx%d",
             tc_dtype_str(cb), c->name, cv->n, cv->c, cv->h, cv->w, cv->k, cv->r, cv->s, cv->stride_h,
             cv->stride_w, cv->pad_h, cv->pad_w);
    if (pr)
        snprintf(what + strlen(what), sizeof what - strlen(what), " + c%d h%d w%d r%d s%d stride %dx%d pad %dx%d",
                 pr->cv->c, pr->cv->h, pr->cv->w, pr->cv->r, pr->cv->s, pr->cv->stride_h, pr->cv->stride_w,
                 pr->cv->pad_h, pr->cv->pad_w);
    /* shared memory for the stages this launch can use: a short reduction (a 1x1 conv over 64 channels is one
     * slice) takes less, so more CTAs fit on an SM; a persistent CTA cycles through all its stages over its
     * tiles (conv2d_wg.cu traps when given too few) */
    const bool persistent = c->persist || c->ws;
    int stages = c->stages < kps || persistent ? c->stages : (int)kps;
    if (cdiv(gm, c->bm) * cdiv(gn, c->bn) > INT_MAX)
        return cnn_fail(CNN_E_UNSUPPORTED, "%s: %lld output tiles, more than one launch takes", what,
                        (long long)(cdiv(gm, c->bm) * cdiv(gn, c->bn)));
    unsigned smem = (unsigned)tc_launch_smem(c, stages, a.gk);
    unsigned threads = (unsigned)(c->ws ? 128 * (1 + c->wm) : c->wg ? 128 * c->wm : 32 * c->wm * c->wn);
    int64_t tiles = cdiv(gm, c->bm) * cdiv(gn, c->bn), grid = tiles;
    if (persistent) { /* as many CTAs as fit at once (or as a test forces), each looping over tiles */
        int per_sm = 1;
        CNN_TRY(cuda_blocks_per_sm(cb, f, what, threads, smem, &per_sm));
        grid = cb->conv_force_grid > 0 ? cb->conv_force_grid : (int64_t)per_sm * cb->sm_count;
        if (grid > tiles) grid = tiles;
        if (c->bres) { /* whole column blocks: CTA b keeps column b % n_tiles (conv2d_ws.cu) */
            int64_t nt = cdiv(gn, c->bn), rows = grid / nt;
            if (rows < 1) rows = 1;
            if (rows > cdiv(gm, c->bm)) rows = cdiv(gm, c->bm);
            grid = rows * nt;
        }
        if (cdiv(tiles, grid) * ktiles > INT_MAX) grid = tiles; /* the kernel counts its slices in an int */
        snprintf(what + strlen(what), sizeof what - strlen(what), " persistent grid %lld", (long long)grid);
    }
    if (c->tma) {
        conv_tma_args t;
        memset(&t, 0, sizeof t);
        CNN_TRY(tma_encode(cb, c, cv, x, w, &t.a_map, &t.b_map));
        if (pr) CNN_TRY(tma_encode(cb, c, pr->cv, pr->x, pr->w, &t.a2_map, &t.b2_map));
        if (c->ost) CNN_TRY(ost_encode(cb, c, gm, gn, y, &t.y_map));
        t.a = a;
        CNN_TRY(cuda_launch_smem(cb, f, what, (unsigned)grid, 1, 1, threads, 1, smem, &t));
        cb->stats.tma_launches++;
        if (c->ost) cb->stats.ost_launches++;
    } else {
        CNN_TRY(cuda_launch_smem(cb, f, what, (unsigned)grid, 1, (unsigned)splits, threads, 1, smem, &a));
    }
    if (splits > 1) {
        size_t len = strlen(what);
        snprintf(what + len, sizeof what - len, " split-K epilogue of %d splits", splits);
        CNN_TRY(cuda_launch(cb, fe, what, cuda_grid_1d(cb, gm * gn / 2, 256), 1, 1, 256, 1, &a));
    }
    return CNN_OK;
}

/* ---- autotuning (tensor-core forward) ----------------------------------------------------------------------
 * Once per distinct (dtype, shape), outside graph capture: time the candidates on the real inputs into a
 * scratch output (the real one may alias nothing, but a scratch is certain), each launched once to warm up and
 * then 3 times with the L2 flushed (a 64 MiB memset) before each, CUDA events, median; the fastest wins and is
 * remembered in process and on disk (tune.c, which also does the timing: cuda_tune_time). fast = the 4 best by
 * the heuristic's score and the best small tile, plus the persistent twin of each wgmma one where the output has
 * more tiles than the GPU has SMs; full = every config, each with its heuristic split-K and, when that splits,
 * also unsplit. */
typedef struct tc_cand {
    int cfg, splits;
} tc_cand;

static int tc_candidates(const cuda_be *cb, const cnn_conv2d *cv, bool res, tc_cand *out) {
    int64_t gm, gn, gk;
    gemm_dims(cv, PASS_FPROP, &gm, &gn, &gk);
    int order[N_TC];
    double score[N_TC];
    /* configs this GPU cannot run (wgmma off sm_90a, shared memory) score -1; so do the persistent rows except
     * in a full search: the fast one adds the twin of each wgmma candidate below (no compilation: same program) */
    for (int i = 0; i < N_TC; i++)
        order[i] = i, score[i] = !tc_usable(cb, &tc_configs[i]) ? -1.0
                               : (tc_configs[i].persist || tc_configs[i].ws) && cb->tune != CNN_TUNE_FULL ? -1.0
                               : tc_configs[i].bres && !bres_fits(cb, &tc_configs[i], gn, gk) ? -1.0
                               : tc_configs[i].tma && !tma_fits(cv) ? -1.0
                               : tc_configs[i].rsm && !res ? -1.0
                               : tc_configs[i].swap && res ? -1.0
                               : tc_configs[i].ost && gn % 8 ? -1.0
                               : tc_score(cb, &tc_configs[i], gm, gn);
    for (int i = 1; i < N_TC; i++) /* insertion sort, best first */
        for (int j = i; j > 0 && score[order[j]] > score[order[j - 1]] + 1e-9; j--) {
            int t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
    int keep = cb->tune == CNN_TUNE_FULL ? N_TC : (N_TC < 4 ? N_TC : 4), n = 0;
    for (int i = 0; i < keep && score[order[i]] >= 0.0; i++) {
        int sp = tc_splits(cb, &tc_configs[order[i]], gm, gn, gk);
        out[n++] = (tc_cand){order[i], sp};
        if (cb->tune == CNN_TUNE_FULL && sp > 1) out[n++] = (tc_cand){order[i], 1};
    }
    /* fast: also the best small tile (at most 64x128), which the score underrates where the layer is memory-bound
     * (short reductions): more CTAs per SM keep more bytes in flight */
    for (int i = keep; i < N_TC && cb->tune == CNN_TUNE_FAST && score[order[i]] >= 0.0; i++) {
        const tc_config *c = &tc_configs[order[i]];
        if (c->bm * c->bn > 64 * 128) continue;
        out[n++] = (tc_cand){order[i], tc_splits(cb, c, gm, gn, gk)};
        break;
    }
    if (cb->tune == CNN_TUNE_FAST)
        for (int i = 0, n0 = n; i < n0; i++) {
            int twin = tc_configs[out[i].cfg].wg ? wg_persistent_twin(out[i].cfg) : -1;
            if (twin >= 0 && tc_usable(cb, &tc_configs[twin]) && cdiv(gm, tc_configs[twin].bm) * cdiv(gn, tc_configs[twin].bn) > cb->sm_count)
                out[n++] = (tc_cand){twin, 1};
        }
    /* fast: every warp-specialised row too (its own programs; the heuristic has no measured speed for them), the
     * B-resident ones where the filter's column block fits, the TMA ones where the problem fits their tensor maps
     * (elsewhere each would run its twin again); only where the output has two tiles per SM at
     * least (a CTA's two consumers alternate over its tiles: on fewer, one of them idles), one for the
     * cooperative rows (both consumers on each tile); the rows staging a residual only where there is one, the
     * transposed-tile rows only where there is none */
    for (int i = FIRST_WS; i < N_TC && cb->tune == CNN_TUNE_FAST; i++)
        if (tc_usable(cb, &tc_configs[i]) && (!tc_configs[i].bres || bres_fits(cb, &tc_configs[i], gn, gk)) &&
            (!tc_configs[i].tma || tma_fits(cv)) && (!tc_configs[i].rsm || res) && (!tc_configs[i].swap || !res) &&
            (!tc_configs[i].ost || gn % 8 == 0) &&
            cdiv(gm, tc_configs[i].bm) * cdiv(gn, tc_configs[i].bn) >= (tc_configs[i].coop ? 1LL : 2LL) * cb->sm_count)
            out[n++] = (tc_cand){i, 1};
    return n;
}

/* a pair's candidate that runs the two convolutions apart (pair_unfused): the tuner decides whether fusing pays */
#define PAIR_UNFUSED (-1)

/* A pair's candidates: the TMA rows (the only ones with a second operand stream) but those staging a residual
 * (a pair adds none), those that fit the summed reduction; in a fast search only where the output has two tiles
 * per SM (one for the cooperative rows), as above, unless none has. Best first by the heuristic's score; when
 * tuning, then PAIR_UNFUSED. */
static int pair_candidates(const cuda_be *cb, const cnn_conv2d *cv, const conv_pair *pr, tc_cand *out) {
    int64_t gm, gn, gk0;
    gemm_dims(cv, PASS_FPROP, &gm, &gn, &gk0);
    const int64_t gk = launch_gk(cv, pr);
    int n = 0;
    for (int pass = 0; pass < 2 && n == 0; pass++)
        for (int i = FIRST_WS; i < N_TC; i++) {
            const tc_config *c = &tc_configs[i];
            if (!c->tma || c->rsm || c->swap || !tc_usable(cb, c) || (c->bres && !bres_fits(cb, c, gn, gk))) continue;
            if (pass == 0 && cb->tune == CNN_TUNE_FAST &&
                cdiv(gm, c->bm) * cdiv(gn, c->bn) < (c->coop ? 1LL : 2LL) * cb->sm_count)
                continue;
            out[n++] = (tc_cand){i, 1};
        }
    for (int i = 1; i < n; i++) /* insertion sort by score, best first */
        for (int j = i; j > 0 && tc_score(cb, &tc_configs[out[j].cfg], gm, gn) >
                                     tc_score(cb, &tc_configs[out[j - 1].cfg], gm, gn) + 1e-9; j--) {
            tc_cand t = out[j];
            out[j] = out[j - 1], out[j - 1] = t;
        }
    if (cb->tune != CNN_TUNE_NONE) out[n++] = (tc_cand){PAIR_UNFUSED, 1}; /* fusing must pay to be chosen */
    return n;
}

typedef struct tc_tune_ctx {
    cnn_backend *be;
    const cnn_conv2d *cv;
    const cnn_epilogue *ep;
    const void *x, *w;
    const tc_cand *cand;
    const conv_pair *pair;
} tc_tune_ctx;

static cnn_status pair_unfused(cnn_backend *be, const cnn_conv2d *cv, const conv_pair *pr, const cnn_epilogue *ep,
                               const void *x, const void *w, void *y);

static cnn_status tc_tune_launch(void *ctx, int i, void *y) {
    tc_tune_ctx *t = ctx;
    if (t->cand[i].cfg == PAIR_UNFUSED) return pair_unfused(t->be, t->cv, t->pair, t->ep, t->x, t->w, y);
    return tc_launch(t->be, t->cv, t->ep, t->x, t->w, y, t->cand[i].cfg, t->cand[i].splits, t->pair);
}

static cnn_status tc_tune(cnn_backend *be, const cnn_conv2d *cv, const cnn_epilogue *ep, const void *x, const void *w,
                          const conv_pair *pr, const char *key, int *cfg_out, int *splits_out) {
    cuda_be *cb = cuda_impl(be);
    double t0 = cnn_now();
    tc_cand cand[3 * N_TC + 1];
    int nc = pr ? pair_candidates(cb, cv, pr, cand) : tc_candidates(cb, cv, ep && ep->residual, cand);
    CNN_ASSERT(nc > 0);
    *cfg_out = cand[0].cfg, *splits_out = cand[0].splits;
    if (nc == 1) return CNN_OK;
    size_t ybytes = (size_t)cv->n * cv->p * cv->q * cv->k * (be->act_dtype == CNN_DTYPE_F32 ? 4 : 2);
    int ids[3 * N_TC + 1]; /* the candidates' programs, compiled side by side before any is timed */
    int nids = 0;
    for (int i = 0; i < nc; i++) {
        if (cand[i].cfg == PAIR_UNFUSED) continue; /* its convolutions were tuned and compiled by pair_choose */
        const tc_config *c = &tc_configs[cand[i].cfg];
        ids[nids++] = c->ws   ? cuda_program_id(&cuda_family_conv2d_fprop_ws, be->act_dtype, cand[i].cfg - FIRST_WS)
                      : c->wg ? cuda_program_id(&cuda_family_conv2d_fprop_wg, be->act_dtype, wg_program(cand[i].cfg))
                              : cuda_program_id(tc_family(cb), be->act_dtype, cand[i].cfg);
    }
    cuda_prepare_programs(cb, ids, nids);
    tc_tune_ctx t = {be, cv, ep, x, w, cand, pr};
    int best;
    float ms, all[3 * N_TC + 1];
    cnn_status st = cuda_tune_time(cb, key, nc, ybytes, tc_tune_launch, &t, &best, &ms, all);
    if (st == CNN_OK && best >= 0) {
        *cfg_out = cand[best].cfg, *splits_out = cand[best].splits;
        cuda_tune_put(cb, key, *cfg_out, *splits_out, ms);
        cb->pub.n_tuned++;
        char times[(3 * N_TC + 1) * 40] = ""; /* every candidate's time, for -v: which rows came close */
        for (int i = 0, len = 0; i < nc && len < (int)sizeof times - 40; i++)
            len += snprintf(times + len, sizeof times - (size_t)len, "%s%s/%d %.4f", i ? ", " : "",
                            cand[i].cfg == PAIR_UNFUSED ? "unfused" : tc_configs[cand[i].cfg].name, cand[i].splits,
                            all[i]);
        cnn_log(2, "cnn: tuned %s: %s splits %d, %.4f ms (%d candidates, %.0f ms: %s)", key,
                *cfg_out == PAIR_UNFUSED ? "unfused" : tc_configs[*cfg_out].name, *splits_out, ms, nc,
                (cnn_now() - t0) * 1e3, times);
    }
    cb->pub.tune_seconds += cnn_now() - t0;
    return st;
}

/* (config, splits) for a forward problem the tensor-core kernels can run: forced, tuned (cached) or heuristic */
static cnn_status tc_choose(cnn_backend *be, const cnn_conv2d *cv, const cnn_epilogue *ep, const void *x,
                            const void *w, int *tv, int *splits) {
    cuda_be *cb = cuda_impl(be);
    int64_t gm, gn, gk;
    gemm_dims(cv, PASS_FPROP, &gm, &gn, &gk);
    if (cb->conv_force_cfg >= N_VARIANTS) {
        *tv = cb->conv_force_cfg - N_VARIANTS;
        *splits = tc_splits(cb, &tc_configs[*tv], gm, gn, gk);
        return CNN_OK;
    }
    char key[200];
    /* a residual doubles the epilogue's traffic, which moves the best tile of a memory-bound conv: its own key */
    snprintf(key, sizeof key, "fprop_tc %s n%d c%d h%d w%d k%d r%d s%d st%dx%d pad%dx%d%s", tc_dtype_str(cb),
             cv->n, cv->c, cv->h, cv->w, cv->k, cv->r, cv->s, cv->stride_h, cv->stride_w, cv->pad_h, cv->pad_w,
             ep && ep->residual ? " res" : "");
    if (cb->tune != CNN_TUNE_NONE && cb->conv_force_splitk < 0) {
        if (cuda_tune_get(cb, key, tv, splits) && *tv >= 0 && *tv < N_TC && tc_usable(cb, &tc_configs[*tv]) &&
            *splits >= 1 && (*splits == 1 || !tc_hopper(&tc_configs[*tv])))
            return CNN_OK;
        if (!cb->capturing) return tc_tune(be, cv, ep, x, w, NULL, key, tv, splits);
    }
    tc_cand cand[3 * N_TC]; /* best first: the heuristic's choice */
    tc_candidates(cb, cv, ep && ep->residual, cand);
    *tv = cand[0].cfg, *splits = cand[0].splits;
    return CNN_OK;
}

/* ---- pairs: two convolutions summed in one kernel ---------------------------------------------------------
 * y = relu?(conv(x, w) + conv(x2, w2) + shift): a ResNet block's last conv and its downsample conv, their BN
 * scales folded into the filters by the eval plan (src/core/model.c), so the block's output is written once and
 * neither branch's output is stored or read back. The TMA rows of conv2d_ws.cu run it: the producer copies the
 * first convolution's slices of a tile, then the second's (its own pair of tensor maps), into the same ring, and
 * the consumers multiply them into the same accumulators. Tuned under its own key (fprop_pair): the TMA rows and
 * PAIR_UNFUSED, the two convolutions apart through a workspace, so fusing is used only where it is timed faster;
 * with --tune none the heuristic's TMA row. */
bool cuda_conv2d_pair_fusable(cnn_backend *be, const cnn_conv2d *cv, const cnn_conv2d *cv2) {
    cuda_be *cb = cuda_impl(be);
    if (cb->no_pair || (cb->conv_force_cfg >= 0 && cb->conv_force_cfg < N_VARIANTS)) return false;
    if (cv->n != cv2->n || cv->k != cv2->k || cv->p != cv2->p || cv->q != cv2->q || cv->k % 8 != 0) return false;
    if (!tma_fits(cv) || !tma_fits(cv2) || check_problem(cv, PASS_FPROP) != CNN_OK ||
        check_problem(cv2, PASS_FPROP) != CNN_OK)
        return false;
    const conv_pair pr = {cv2, NULL, NULL};
    if (launch_gk(cv, &pr) > INT_MAX - 256) return false;
    for (int i = FIRST_WS; i < N_TC; i++)
        if (tc_configs[i].tma && tc_usable(cb, &tc_configs[i])) return true;
    return false;
}

/* the two convolutions apart, the first into a workspace that the second adds (rounded to act_dtype on the way) */
static cnn_status pair_unfused(cnn_backend *be, const cnn_conv2d *cv, const conv_pair *pr, const cnn_epilogue *ep,
                               const void *x, const void *w, void *y) {
    cuda_be *cb = cuda_impl(be);
    void *t;
    CNN_TRY(cuda_workspace_slot(cb, CUDA_WS_STAGED, (size_t)cv->n * cv->p * cv->q * cv->k * act_size(cb), &t));
    CNN_TRY(cuda_conv2d_fprop(be, cv, NULL, x, w, t));
    const cnn_epilogue e2 = {.shift = ep ? ep->shift : NULL, .residual = t, .relu = ep && ep->relu};
    return cuda_conv2d_fprop(be, pr->cv, &e2, pr->x, pr->w, y);
}

/* a pair's launch: a TMA row, forced, tuned (cached) or the heuristic's; or PAIR_UNFUSED where the tuner timed
 * the two convolutions apart faster (small problems, where a split reduction fills the GPU and a pair cannot) */
static cnn_status pair_choose(cnn_backend *be, const cnn_conv2d *cv, const conv_pair *pr, const cnn_epilogue *ep,
                              const void *x, const void *w, void *y, int *tv) {
    cuda_be *cb = cuda_impl(be);
    int splits;
    if (cb->conv_force_cfg >= N_VARIANTS && tc_configs[cb->conv_force_cfg - N_VARIANTS].tma) {
        *tv = cb->conv_force_cfg - N_VARIANTS;
        return CNN_OK;
    }
    const cnn_conv2d *c2 = pr->cv;
    char key[240];
    snprintf(key, sizeof key, "fprop_pair %s n%d c%d h%d w%d k%d r%d s%d st%dx%d pad%dx%d + c%d h%d w%d r%d s%d st%dx%d "
             "pad%dx%d", tc_dtype_str(cb), cv->n, cv->c, cv->h, cv->w, cv->k, cv->r, cv->s, cv->stride_h, cv->stride_w,
             cv->pad_h, cv->pad_w, c2->c, c2->h, c2->w, c2->r, c2->s, c2->stride_h, c2->stride_w, c2->pad_h, c2->pad_w);
    if (cb->tune != CNN_TUNE_NONE && cb->conv_force_cfg < 0) {
        if (cuda_tune_get(cb, key, tv, &splits) && splits == 1 &&
            (*tv == PAIR_UNFUSED || (*tv >= FIRST_WS && *tv < N_TC && tc_configs[*tv].tma && tc_usable(cb, &tc_configs[*tv]))))
            return CNN_OK;
        if (!cb->capturing) { /* the unfused candidate's convolutions tune (and compile) first, outside the timing */
            CNN_TRY(pair_unfused(be, cv, pr, ep, x, w, y));
            return tc_tune(be, cv, ep, x, w, pr, key, tv, &splits);
        }
    }
    tc_cand cand[N_TC + 1];
    CNN_ASSERT(pair_candidates(cb, cv, pr, cand) > 0);
    *tv = cand[0].cfg;
    return CNN_OK;
}

cnn_status cuda_conv2d_fprop_pair(cnn_backend *be, const cnn_conv2d *cv, const cnn_conv2d *cv2,
                                  const cnn_epilogue *ep, const void *x, const void *w, const void *x2,
                                  const void *w2, void *y) {
    cuda_be *cb = cuda_impl(be);
    cuda_bind(cb);
    CNN_ASSERT(x && w && x2 && w2 && y && (!ep || (!ep->scale && !ep->residual)));
    CNN_ASSERT(cv->n == cv2->n && cv->k == cv2->k && cv->p == cv2->p && cv->q == cv2->q);
    CNN_TRY(check_problem(cv, PASS_FPROP));
    CNN_TRY(check_problem(cv2, PASS_FPROP));
    const conv_pair pr = {cv2, x2, w2};
    if (cuda_conv2d_pair_fusable(be, cv, cv2) && aligned16(x) && aligned16(w) && aligned16(x2) && aligned16(w2) &&
        aligned16(y)) {
        int tv;
        CNN_TRY(pair_choose(be, cv, &pr, ep, x, w, y, &tv));
        if (tv != PAIR_UNFUSED) {
            cb->stats.pair_launches++;
            return tc_launch(be, cv, ep, x, w, y, tv, 1, &pr);
        }
    }
    return pair_unfused(be, cv, &pr, ep, x, w, y);
}

cnn_status cuda_conv_tc_fprop(cnn_backend *be, const cnn_conv2d *cv, const cnn_epilogue *ep, const void *x,
                              const void *w, void *y) {
    cuda_be *cb = cuda_impl(be);
    CNN_ASSERT(tc_eligible(cb, cv, ep, x, w, y));
    CNN_TRY(check_problem(cv, PASS_FPROP));
    int tv, splits;
    CNN_TRY(tc_choose(be, cv, ep, x, w, &tv, &splits));
    return tc_launch(be, cv, ep, x, w, y, tv, splits, NULL);
}

/* ---- narrow first layers (C < 8) on the tensor-core kernel, through rewritten operands ------------------------
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
enum { NARROW_NONE = 0, NARROW_S2D = 1, NARROW_PAD = 2 };

static int narrow_kind(const cuda_be *cb, const cnn_conv2d *cv, const cnn_epilogue *ep, const void *y) {
    if (cv->c >= 8 || cv->k % 8 != 0) return NARROW_NONE;
    if (!cnn_cuda_conv_config_usable((cnn_backend *)&cb->pub, N_VARIANTS)) return NARROW_NONE;
    if (cb->conv_force_cfg >= 0 && cb->conv_force_cfg < N_VARIANTS) return NARROW_NONE;
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

static cnn_status narrow_fprop(cnn_backend *be, const cnn_conv2d *cv, const cnn_epilogue *ep, const void *x,
                               const void *w, void *y, int kind) {
    cuda_be *cb = cuda_impl(be);
    CNN_TRY(check_problem(cv, PASS_FPROP));
    cnn_conv2d s = narrow_problem(cv, kind);
    size_t xb = (size_t)s.n * s.h * s.w * s.c * act_size(cb), wb = (size_t)s.k * s.r * s.s * s.c * act_size(cb);
    xb = (xb + 255) & ~(size_t)255;
    void *buf;
    CNN_TRY(cuda_workspace_slot(cb, CUDA_WS_OPERANDS, xb + wb, &buf));
    void *xs = buf, *ws = (char *)buf + xb;
    char what[200];
    if (kind == NARROW_S2D) {
        CUfunction fx, fw;
        CNN_TRY(cuda_kernel(cb, tc_family(cb), be->act_dtype, 0, TC_S2D_INPUT, &fx));
        CNN_TRY(cuda_kernel(cb, tc_family(cb), be->act_dtype, 0, TC_S2D_FILTER, &fw));
        conv_args a = make_args(cv, PASS_FPROP, 32);
        a.x = x, a.wt = w, a.out = xs;
        snprintf(what, sizeof what, "conv2d_s2d_input n%d c%d h%d w%d", cv->n, cv->c, cv->h, cv->w);
        CNN_TRY(cuda_launch(cb, fx, what, cuda_grid_1d(cb, (long long)s.n * s.h * s.w, 256), 1, 1, 256, 1, &a));
        a.out = ws;
        snprintf(what, sizeof what, "conv2d_s2d_filter k%d c%d r%d s%d", cv->k, cv->c, cv->r, cv->s);
        CNN_TRY(cuda_launch(cb, fw, what, cuda_grid_1d(cb, (long long)s.k * s.r * s.s * 16, 256), 1, 1, 256, 1, &a));
    } else {
        CUfunction fp;
        CNN_TRY(cuda_kernel(cb, tc_family(cb), be->act_dtype, 0, TC_PAD_CHANNELS, &fp));
        conv_args a = {0};
        a.n = cv->n, a.h = cv->h, a.w = cv->w, a.c = cv->c, a.x = x, a.out = xs; /* rows = N*H*W */
        snprintf(what, sizeof what, "conv2d_pad_channels input n%d c%d h%d w%d", cv->n, cv->c, cv->h, cv->w);
        CNN_TRY(cuda_launch(cb, fp, what, cuda_grid_1d(cb, (long long)cv->n * cv->h * cv->w, 256), 1, 1, 256, 1, &a));
        a.n = cv->k, a.h = cv->r, a.w = cv->s, a.x = w, a.out = ws; /* rows = K*R*S */
        snprintf(what, sizeof what, "conv2d_pad_channels filter k%d c%d r%d s%d", cv->k, cv->c, cv->r, cv->s);
        CNN_TRY(cuda_launch(cb, fp, what, cuda_grid_1d(cb, (long long)cv->k * cv->r * cv->s, 256), 1, 1, 256, 1, &a));
    }
    int tv, splits;
    CNN_TRY(tc_choose(be, &s, ep, xs, ws, &tv, &splits));
    return tc_launch(be, &s, ep, xs, ws, y, tv, splits, NULL);
}

cnn_status cuda_conv2d_fprop(cnn_backend *be, const cnn_conv2d *cv, const cnn_epilogue *ep, const void *x,
                             const void *w, void *y) {
    cuda_be *cb = cuda_impl(be);
    cuda_bind(cb);
    CNN_ASSERT(x && w && y);
    int v;
    CUfunction f;
    if (cuda_first_eligible(cb, cv, ep, NULL, y)) { /* a first layer over a 3-channel image: conv2d_first.c */
        CNN_TRY(check_problem(cv, PASS_FPROP));
        return cuda_first_fprop(be, cv, ep, NULL, x, w, y);
    }
    int narrow = narrow_kind(cb, cv, ep, y);
    if (narrow != NARROW_NONE) return narrow_fprop(be, cv, ep, x, w, y, narrow);
    if (tc_eligible(cb, cv, ep, x, w, y)) {
        CNN_TRY(check_problem(cv, PASS_FPROP));
        bool wino; /* F32 3x3/1: Winograd where chosen (winograd.c), which runs its GEMMs on the same kernels */
        CNN_TRY(cuda_winograd_choose(be, cv, ep, x, w, &wino));
        if (wino) return cuda_winograd_fprop(be, cv, ep, x, w, y);
        int tv, splits;
        CNN_TRY(tc_choose(be, cv, ep, x, w, &tv, &splits));
        return tc_launch(be, cv, ep, x, w, y, tv, splits, NULL);
    }
    CNN_TRY(prepare(be, cv, PASS_FPROP, 0, &v, &f));
    const conv_config *c = &configs[v];
    conv_args a = make_args(cv, PASS_FPROP, c->bk);
    a.x = x, a.wt = w, a.out = y;
    if (ep) {
        a.scale = ep->scale, a.shift = ep->shift, a.residual = ep->residual;
        a.relu = ep->relu;
    }
    char what[200];
    label(what, sizeof what, "fprop", be->act_dtype, v, cv);
    return cuda_launch(cb, f, what, (unsigned)cdiv(a.gm, c->bm), (unsigned)cdiv(a.gn, c->bn), 1,
                       (unsigned)threads_of(c), 1, &a);
}

/* ---- dgrad: on the forward tensor-core kernels where conv2d_dgrad.c takes the problem, else the generic ones ---- */

bool cuda_conv_tc_takes(const cuda_be *cb, const cnn_conv2d *cv, const cnn_epilogue *ep, const void *x, const void *w,
                        const void *y) {
    return tc_eligible(cb, cv, ep, x, w, y);
}

cnn_status cuda_conv_tc_kernel(cuda_be *cb, int entry, CUfunction *f) {
    CNN_ASSERT(entry == CUDA_TC_DGRAD_FILTER || entry == CUDA_TC_DGRAD_INTERLEAVE);
    return cuda_kernel(cb, tc_family(cb), cb->pub.act_dtype, 0, entry == CUDA_TC_DGRAD_FILTER ? TC_DGRAD_FILTER : TC_DGRAD_INTERLEAVE, f);
}

cnn_status cuda_conv2d_dgrad(cnn_backend *be, const cnn_conv2d *cv, const void *dy, const void *w, void *dx,
                             bool accumulate) {
    cuda_be *cb = cuda_impl(be);
    cuda_bind(cb);
    CNN_ASSERT(dy && w && dx);
    if (!cb->no_dgrad_tc && cuda_dgrad_tc_fits(cb, cv, dy, dx, accumulate)) return cuda_dgrad_tc(be, cv, dy, w, dx, accumulate);
    int v;
    CUfunction f;
    CNN_TRY(prepare(be, cv, PASS_DGRAD, 0, &v, &f));
    const conv_config *c = &configs[v];
    conv_args a = make_args(cv, PASS_DGRAD, c->bk);
    a.dy = dy, a.wt = w, a.out = dx;
    a.accumulate = accumulate;
    char what[200];
    label(what, sizeof what, "dgrad", be->act_dtype, v, cv);
    return cuda_launch(cb, f, what, (unsigned)cdiv(a.gm, c->bm), (unsigned)cdiv(a.gn, c->bn), 1,
                       (unsigned)threads_of(c), 1, &a);
}

#define WGRAD_WS_CAP ((int64_t)256 << 20) /* bytes of split partials at most */

cnn_status cuda_conv2d_wgrad(cnn_backend *be, const cnn_conv2d *cv, const void *x, const void *dy, float *dw) {
    cuda_be *cb = cuda_impl(be);
    cuda_bind(cb);
    CNN_ASSERT(x && dy && dw);
    const bool generic_forced = cb->conv_force_cfg >= 0 && cb->conv_force_cfg < N_VARIANTS;
    if (!generic_forced && cuda_wgrad_wgmma_fits(cb, cv, x, dy)) return cuda_wgrad_wgmma(be, cv, x, dy, dw);
    int v;
    CUfunction f, fr = NULL;
    CNN_TRY(prepare(be, cv, PASS_WGRAD, WGRAD_MAIN, &v, &f));
    const conv_config *c = &configs[v];
    conv_args a = make_args(cv, PASS_WGRAD, c->bk);
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
        CNN_TRY(cuda_kernel(cb, family_of(PASS_WGRAD, v), be->act_dtype, family_cfg(v), WGRAD_REDUCE, &fr));
        void *ws;
        CNN_TRY(cuda_workspace(cb, (size_t)(splits * out_bytes), &ws));
        a.ws = ws;
    }
    char what[220];
    label(what, sizeof what, "wgrad", be->act_dtype, v, cv);
    CNN_TRY(cuda_launch(cb, f, what, (unsigned)cdiv(a.gm, c->bm), (unsigned)cdiv(a.gn, c->bn), (unsigned)splits,
                        (unsigned)threads_of(c), 1, &a));
    if (splits > 1) {
        size_t n = strlen(what);
        snprintf(what + n, sizeof what - n, " reduce of %lld splits", (long long)splits);
        CNN_TRY(cuda_launch(cb, fr, what, cuda_grid_1d(cb, (long long)a.gm * a.gn, 256), 1, 1, 256, 1, &a));
    }
    return CNN_OK;
}
