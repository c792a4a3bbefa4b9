/* conv2d.h -- what the convolution files of the CUDA backend share (private to src/cuda). Layered, each file
 * calling only those below it (tools/deps.py checks that no cycle forms):
 *
 *   conv2d.c          the backend table's conv ops (fprop, dgrad, wgrad, fprop_pool): which path runs a problem,
 *                     and the generic kernels' launches
 *   conv2d_pair.c     two convolutions summed in one kernel (fprop_pair)
 *   conv2d_wgrad.c    wgrad on wgmma (its tile configs, choice and launch)
 *   conv2d_dgrad.c    dgrad of every stride on the fast rows, by phases (each a forward conv of dy with flipped taps)
 *   conv2d_rewrite.c  narrow first layers (C < 8) on the fast rows after a rewrite of their operands
 *                     (space-to-depth, channel padding)
 *   conv2d_first.c    first layers over 3-channel images (conv2d_first.cu), with the stem's max-pool
 *   winograd.c        F32 3x3/1 forward convolutions as Winograd F(2x2, 3x3)
 *   conv2d_fast.c     the launch of a fast row (pipelined mma.sync, wgmma, warp-specialised wgmma), twins taken
 *                     where a row cannot run a problem
 *   conv2d_tma.c      the tensor maps of the TMA rows
 *   conv2d_choose.c   the choice policy of every conv path: candidates, heuristics, tuning keys and levels, what
 *                     gets timed (the launches come in as callbacks, so the policy calls no launcher)
 *   conv2d_table.c    the candidate table (rows with designated initialisers and flag words; names derived), the
 *                     twins, the problem geometry
 *   conv2d_programs.c the rows' kernel families: each family's programs and defines, derived from the rows, and
 *                     the family and program a row launches
 *   conv2d_configs.c  the config tables and families of the paths that are not rows: first layer, wgrad on wgmma,
 *                     Winograd's transforms
 */
#ifndef CNN_CUDA_CONV2D_H
#define CNN_CUDA_CONV2D_H

#include "cuda/internal.h"

#include <stdint.h>

enum { PASS_FPROP = 0, PASS_DGRAD = 1, PASS_WGRAD = 2 };

/* ---- the candidate table (conv2d_table.c) ---------------------------------------------------------------- */

/* One row: a tile config of one kernel (flags: exactly one CNN_CUDA_CONV_<kind> bit, the passes, the options of
 * hooks.h). Rows 0 .. conv_n_generic() - 1 are conv2d.cu's (SIMT, then mma.sync); the fast rows follow, each
 * kind's rows together, in program order. The tuning cache stores row indices: a change to the table bumps
 * CUDA_TUNE_VERSION (tune.c). */
typedef struct conv_row {
    unsigned flags;
    int bm, bn, bk;   /* CTA tile of the GEMM view (warp-specialised: each consumer's tile; cooperative: the CTA's) */
    int wm, wn;       /* SIMT: per-thread sub-tile rows x columns; mma.sync: warps along rows x columns; wgmma:
                       * warpgroups (wm); warp-specialised: consumer warpgroups (wm = 2)                        */
    int stages;       /* fast rows: shared-memory ring stages                                                    */
    int minb;         /* fast rows: CTAs per SM the registers must allow (__launch_bounds__)                     */
    float speed;      /* relative throughput of a full tile, for the heuristic                                  */
} conv_row;

#define CONV_MAX_ROWS 64 /* at least conv_n_rows(): the size of candidate lists */
extern const conv_row conv_rows[];
int conv_n_rows(void);
int conv_n_generic(void);                    /* conv2d.cu's rows: the first ones            */
static inline bool conv_is(const conv_row *r, unsigned bit) { return (r->flags & bit) != 0; }
/* a row's kind bit; rows of one kind are contiguous in the table, from conv_kind_first(kind) */
static inline unsigned conv_kind_of(const conv_row *r) { return r->flags & CNN_CUDA_CONV_KINDS; }
int conv_kind_first(unsigned kind);
/* wgmma (either kind): sm_90a, F16/BF16, no split-K, stages aligned to 1024 bytes */
static inline bool conv_hopper(const conv_row *r) {
    return (r->flags & (CNN_CUDA_CONV_WGMMA | CNN_CUDA_CONV_WARPSPEC)) != 0;
}
const char *conv_row_name(int v);
/* the program a row launches: its kind's family for pass `pass` (dtype-aware for the pipelined rows: F32 without
 * allow_tf32 takes the FFMA family) and the config index in it; a persistent wgmma row its twin's program. A fast
 * row's PASS_DGRAD program is its forward program writing one phase of a strided dgrad in place (conv2d_dgrad.c) */
const cuda_family *conv_row_family(const cuda_be *cb, int v, int pass, int *cfg);
int conv_program_of(int v); /* that config index: row v's program among its kind's, or its persistent twin's */
/* the CTA's threads */
int conv_row_threads(const conv_row *r);
/* shared memory of a launch with `stages` ring stages over a reduction of gk elements, and the least a row needs */
int64_t conv_row_smem(const conv_row *r, int stages, int64_t gk);
static inline int64_t conv_row_min_smem(const conv_row *r) { return conv_row_smem(r, r->stages, r->bk); }
/* a row on this backend: its kind on this GPU and dtype, its shared memory, not skipped by CNN_CONV_SKIP;
 * conv_fast_usable, for a fast row of a problem the fast path takes (sm_80+ with tensor cores on: the rest) */
bool conv_row_usable(const cuda_be *cb, int v);
bool conv_fast_usable(const cuda_be *cb, int v);
/* twins: the row that runs what row v cannot */
int conv_persistent_twin(int v);                 /* a wgmma row's persistent twin, -1 if none */
int conv_ws_twin(int v, bool bres, bool tma);    /* the warp-specialised row of v's tile with these options */
int conv_swap_twin(int v);                       /* a transposed row's pixel-major TMA row      */
int conv_ost_twin(int v);                        /* a TMA-store row's twin storing from registers */
int conv_phase_row(int v);                       /* the row a dgrad phase of v runs (OUT_PHASE): v or a twin */
int conv_stats_row(int v);                       /* the row whose STATS program runs for v, or -1 (no program) */
/* = kernels/conv2d_warpspec.cu's STATS_BYTES: each consumer's two exchange buffers of 4 warps x 128 float sums */
#define CONV_STATS_BYTES (2 * 2 * 4 * 128 * 4)
int64_t conv_stats_smem(const conv_row *c, int stages, int64_t gk); /* its stats program's shared memory */
/* the rows whose GROUPED program runs all of a strided dgrad's phases in one launch: how many, and the i-th */
int conv_n_group_rows(void);
int conv_group_row(int i);
/* row v's program in cuda_family_conv2d_ft_warpspec (a stride-1 dgrad reading the forward's filter transposed, FILT_T)
 * and in cuda_family_conv2d_ft_gate_warpspec (the same, gating by the ReLU before the conv), -1 where it has none (only
 * the TMA warp-specialised rows do) */
int conv_ft_program(int v);
/* a filter-resident row runs a problem of gn columns over gk when its smem fits and each column block gets an SM */
bool conv_bres_fits(const cuda_be *cb, const conv_row *r, int64_t gn, int64_t gk);
/* the pipelined rows' reduction elements per slice (a slice row is bk*2 bytes) */
int conv_row_ks(const cuda_be *cb, const conv_row *r);

/* the kernel families of conv2d.cu's rows, per pass, and of the fast rows (conv2d_programs.c) */
extern const cuda_family cuda_family_conv2d_fprop, cuda_family_conv2d_dgrad, cuda_family_conv2d_wgrad,
    cuda_family_conv2d_fprop_mma, cuda_family_conv2d_dgrad_mma, cuda_family_conv2d_wgrad_mma, cuda_family_conv2d_fprop_pipelined,
    cuda_family_conv2d_fprop_pipelined_ffma, cuda_family_conv2d_fprop_wgmma, cuda_family_conv2d_fprop_warpspec, cuda_family_conv2d_fprop_first,
    cuda_family_winograd, cuda_family_conv2d_phase_pipelined, cuda_family_conv2d_phase_pipelined_ffma,
    cuda_family_conv2d_phase_wgmma, cuda_family_conv2d_phase_warpspec, cuda_family_conv2d_group_warpspec,
    cuda_family_conv2d_stats_warpspec, cuda_family_conv2d_ft_warpspec, cuda_family_conv2d_ft_gate_warpspec;
enum { WGRAD_MAIN = 0, WGRAD_REDUCE = 1 };
/* conv2d_wgrad_few's configs: the width of dW's tile, R*S*C at most (families.c; the launcher takes the narrowest) */
enum { WGRAD_FEW_N_CFG = 2 };
extern const int cuda_wgrad_few_cols[WGRAD_FEW_N_CFG];
enum {
    PIPE_MAIN = 0, PIPE_SPLITK_EPILOGUE = 1, PIPE_S2D_INPUT = 2, PIPE_S2D_FILTER = 3, PIPE_PAD_CHANNELS = 4,
    PIPE_DGRAD_FILTER = 5, PIPE_DGRAD_INTERLEAVE = 6, PIPE_DGRAD_ZERO = 7
};
enum { WINO_FILTER = 0, WINO_INPUT = 1, WINO_OUTPUT = 2 };
/* the pipelined rows' family for this backend: F32 without allow_tf32 multiplies in fp32 FMA */
const cuda_family *conv_pipelined_family(const cuda_be *cb);

/* ---- wgrad on wgmma (conv2d_configs.c): tile configs, the kernel family -------------------------------------- */

typedef struct wgrad_config {
    int bm, bn;   /* tile: channels of dy x columns (r, s, c) of dW */
    int stages;   /* ring stages: (bm + bn) x 64 elements (im2col), or the halo slice's boxes */
    float eff;    /* relative tensor-core throughput of a full tile, for the heuristic */
    int qb, hb;   /* the halo kernel (3x3 stride 1; 0 = im2col): a slice of hb output rows x qb columns, x read once */
} wgrad_config;
#define WGRAD_BK 64           /* output pixels per reduction slice (the kernel's BK) */
#define WGRAD_MAX_CONFIGS 16  /* at least wgrad_n_configs(): the size of candidate lists */
extern const wgrad_config wgrad_configs[];
int wgrad_n_configs(void);
const char *wgrad_config_name(int cfg); /* derived: "wgrad128x256/s4", "wgrad_halo16x8/s2" */
int64_t wgrad_smem(const wgrad_config *c);
bool wgrad_config_usable(const cuda_be *cb, int cfg); /* its shared memory fits this GPU */
bool wgrad_config_takes(int cfg, const cnn_conv2d *cv);  /* the halo configs: 3x3 stride 1 only */
int64_t wgrad_slices(const wgrad_config *c, const cnn_conv2d *cv); /* reduction slices of a problem */
int64_t wgrad_tiles(const wgrad_config *c, const cnn_conv2d *cv);  /* output tiles (CTAs of one split) */
extern const cuda_family cuda_family_conv2d_wgrad_wgmma;
extern const cuda_family cuda_family_conv2d_wgrad_few; /* families.c: one program per dtype */

/* ---- first layers (conv2d_configs.c): one shape class and one tile per config ------------------------------- */

typedef struct first_config {
    const char *name;
    int c, r, s, stride, pad; /* the shape class */
    bool pool;                /* the 3x3/2 pad 1 max-pool fused */
    int tp, tq;               /* tile: conv rows x columns, or with pool the pool's */
    int warps, wn, minb;
} first_config;
extern const first_config first_configs[];
int first_n_configs(void);
unsigned first_smem(const first_config *c); /* conv2d_first.cu's SMEM_BYTES */
/* config cfg runs this problem (pool: with the fused max-pool) on this GPU: its shape class and shared memory */
bool first_config_runs(const cuda_be *cb, int cfg, const cnn_conv2d *cv, bool pool);
bool first_config_fits(const first_config *c, const cnn_conv2d *cv, bool pool);

/* ---- problem geometry (conv2d_table.c) ------------------------------------------------------------------ */

static inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static inline int act_size(const cuda_be *cb) { return (int)cnn_dtype_size(cb->pub.act_dtype); }
/* GEMM view of a pass, in 64 bits (callers check the int range) */
void conv_gemm_dims(const cnn_conv2d *cv, int pass, int64_t *gm, int64_t *gn, int64_t *gk);
/* the problem's invariants (asserted) and what 32-bit indices can address (CNN_E_UNSUPPORTED) */
cnn_status conv_check_problem(const cnn_conv2d *cv, int pass);
/* the dtype as the fast kernels compute it: "tf32" for F32 activations in TF32, "f32ffma" in fp32 FMA */
const char *conv_dtype_str(const cuda_be *cb);

/* ---- tensor maps (conv2d_tma.c) ------------------------------------------------------------------------- */

/* whether the TMA rows' maps describe a forward problem (C % 64 == 0 among others) */
bool conv_tma_fits(const cnn_conv2d *cv);
/* whether a TMA-store row's map describes the output (gm x gn, row-major, at y) */
bool conv_ost_fits(int64_t gm, int64_t gn, const void *y);
cnn_status conv_tma_encode(cuda_be *cb, const conv_row *r, const cnn_conv2d *cv, const void *x, const void *w,
                           conv_tma_map *a_map, conv_tma_map *b_map);
/* the maps it is made of: x in im2col mode (`pixels` output pixels x 64 channels per copy) and a row-major matrix
 * (rows x cols in boxes of box_rows x 64), both in the 128-byte swizzle; wgrad's too (conv2d_wgrad.c) */
cnn_status conv_tma_encode_x(cuda_be *cb, const cnn_conv2d *cv, const void *x, int pixels, conv_tma_map *map);
cnn_status conv_tma_encode_rows(cuda_be *cb, const void *p, int64_t rows, int64_t cols, int box_rows, const char *what,
                                conv_tma_map *map);
cnn_status conv_ost_encode(cuda_be *cb, const conv_row *r, int64_t gm, int64_t gn, void *y, conv_tma_map *y_map);
/* an NHWC tensor in boxes of 64 channels x box_w pixels x box_h rows of one image (the halo wgrad's dy and x) */
cnn_status conv_tma_encode_nhwc(cuda_be *cb, const void *p, int n, int h, int w, int c, int box_w, int box_h,
                                const char *what, conv_tma_map *map);
/* A stride-1 dgrad run as a forward convolution over dy that reads the forward's filter (K', R', S', C') as it is
 * (kernels/conv2d_warpspec.cu's FILT_T; conv2d_dgrad.c): the convolution's tap (tr, ts) is the forward's tap
 * base + tr * dr + ts * ds (r' * S' + s'); the convolution's C is K', its K is C'. */
typedef struct conv_ft {
    int taps;          /* R' * S' */
    int base, dr, ds;
    bool gate;         /* the epilogue's residual is the ReLU output before the forward conv, gating the result
                        * (the FT_GATE programs): the dgrad takes in that ReLU's backward */
} conv_ft;
/* the family of a FILT_T launch's programs: with the gate or without */
static inline const cuda_family *conv_ft_family(const conv_ft *ft) {
    return ft && ft->gate ? &cuda_family_conv2d_ft_gate_warpspec : &cuda_family_conv2d_ft_warpspec;
}
/* a TMA row's maps for such a dgrad: dy in im2col mode as conv_tma_encode's x, the filter as (C', R'*S', K')
 * innermost first in boxes of 64 x 1 x 64 */
cnn_status conv_tma_encode_ft(cuda_be *cb, const conv_row *r, const cnn_conv2d *cv, const void *dy, const void *w,
                              const conv_ft *ft, conv_tma_map *a_map, conv_tma_map *b_map);

/* ---- the choice policy (conv2d_choose.c) ---------------------------------------------------------------- */

/* The problem a choice is made for: cv, or where cv->choose_n is set, cv over cv->choice_n images (else choose_n),
 * whose heuristic choice (never timed: conv_tune_level) the launch over cv's images takes: this backend's kernels
 * give an image the same bits whatever the launch's batch, once the choice (tile, splits) is made. The sub-problems
 * a path builds (dgrad phases, rewrites, Winograd's GEMMs) pass both on. A wgrad on wgmma chooses for one slice
 * among the global batch's instead, each slice taking the splits (conv2d_choose_wgrad.c, choice_problem). */
static inline cnn_conv2d conv_choice_view(const cnn_conv2d *cv) {
    cnn_conv2d v = *cv;
    if (cv->choose_n > 0) v.n = cv->choice_n > 0 ? cv->choice_n : cv->choose_n;
    v.choose_n = v.choice_n = 0;
    return v;
}
/* With choose_n, the slices a launch over cv holds (cv->n / choose_n), and the slices of the global batch that share
 * the GPU with each (choice_n / choose_n: the same on every rank); 1 without */
static inline int conv_launch_slices(const cnn_conv2d *cv) {
    return cv->choose_n > 0 && cv->choose_n < cv->n ? cv->n / cv->choose_n : 1;
}
static inline int conv_choice_slices(const cnn_conv2d *cv) {
    return cv->choose_n > 0 && cv->choice_n > cv->choose_n ? cv->choice_n / cv->choose_n : 1;
}
static inline cnn_tune conv_tune_level(const cuda_be *cb, const cnn_conv2d *cv) {
    return cv->choose_n > 0 ? CNN_TUNE_NONE : cb->tune;
}

/* A candidate of a problem: a row (or CONV_PAIR_UNFUSED; a first_configs index for a first layer; 0 direct, 1
 * Winograd for conv_choose_winograd; a dgrad_way for conv_choose_dgrad_phases) and its split-K. */
typedef struct conv_cand {
    int row, splits;
} conv_cand;
#define CONV_PAIR_UNFUSED (-1) /* a pair's candidate that runs the two convolutions apart */

/* The second convolution of a pair (cuda_conv2d_fprop_pair): summed into the same output by the TMA rows. */
typedef struct conv_pair {
    const cnn_conv2d *cv;
    const void *x, *w;
} conv_pair;

/* where a forward launch writes one phase of a strided dgrad in place (conv2d_dgrad.c): its output pixel (n, i, j)
 * is dx's (n, sh * (i - off_h) + a, sw * (j - off_w) + b) for 0 <= i - off_h < rows, 0 <= j - off_w < cols (and
 * nowhere else); dx is (N, h, w, the launch's K) */
typedef struct conv_phase_out {
    int sh, sw, a, b, off_h, off_w, rows, cols, h, w;
} conv_phase_out;
/* A forward problem and its operands, as the policy hands them back to the launch it times. */
typedef struct conv_operands {
    cnn_backend *be;
    const cnn_conv2d *cv;
    const cnn_epilogue *ep; /* or NULL */
    const cnn_pool2d *pl;   /* a first layer's fused max-pool, or NULL */
    const conv_pair *pr;    /* a pair's second convolution, or NULL */
    const conv_phase_out *po; /* a strided dgrad's phase written in place (conv2d_dgrad.c), or NULL */
    const conv_ft *ft;      /* a stride-1 dgrad reading the forward's filter (conv2d_dgrad.c; w: it), or NULL */
    const void *x, *w;
    bool untimed;           /* the heuristic's choice (or a cached winner), never timed: a strided dgrad's phase
                             * under --tune fast (conv_fast_fprop_phase) */
} conv_operands;
/* The launch the tuner times: candidate c of the problem into the scratch output y. */
typedef cnn_status (*conv_launch_fn)(const conv_operands *op, conv_cand c, void *y);
/* a list of candidates as cuda_tune_time times them: conv_timed_launch(ctx = a conv_timed, i, y) runs cand[i] */
typedef struct conv_timed {
    conv_launch_fn launch;
    const conv_operands *op;
    const conv_cand *cand;
} conv_timed;
cnn_status conv_timed_launch(void *ctx, int i, void *y);
/* the reduction a launch runs: one convolution's R*S*C, or both of a pair's */
int64_t conv_launch_gk(const cnn_conv2d *cv, const conv_pair *pr);

/* generic (conv2d.cu): the rows usable for a pass, and the heuristic's choice (or the forced row) */
int cuda_conv_candidates(const cuda_be *cb, const cnn_conv2d *cv, int pass, int *out, int cap);
int cuda_conv_pick(const cuda_be *cb, const cnn_conv2d *cv, int pass);
/* Each choice: forced (tests), tuned (cached), or the heuristic's; `launch` runs a candidate when timing.
 * fast forward rows: (row, splits) */
cnn_status conv_choose_fast(const conv_operands *op, conv_launch_fn launch, conv_cand *out);
/* a pair: a TMA row or CONV_PAIR_UNFUSED; before timing, the unfused candidate runs once into y (its convolutions
 * tune and compile outside the pair's timing) */
cnn_status conv_choose_pair(const conv_operands *op, conv_launch_fn launch, void *y, int *row);
/* a first layer: a first_configs index (op->pl: with the fused max-pool) */
cnn_status conv_choose_first(const conv_operands *op, conv_launch_fn launch, int *cfg);
/* wgrad on wgmma (conv2d_choose_wgrad.c): a wgrad_configs index and its reduction splits (op: x in x, dy in w) */
cnn_status conv_choose_wgrad(const conv_operands *op, conv_launch_fn launch, conv_cand *out);
/* F32 3x3/1 on the fast path: Winograd (true) or the direct kernels */
cnn_status conv_choose_winograd(const conv_operands *op, conv_launch_fn launch, bool *use);
/* how a strided dgrad's phases run (conv2d_dgrad.c): each into its block then the interleave, each written into dx
 * in place, or all in one launch of group row i's GROUPED program (DGRAD_GROUPED + i) */
enum { DGRAD_BLOCKS = 0, DGRAD_IN_PLACE = 1, DGRAD_GROUPED = 2 };
/* a strided dgrad's phases (op: the convolution, dy in x; ep's residual set when accumulating): a way, the group rows
 * among the candidates when `groupable`; `heuristic` where nothing is timed */
cnn_status conv_choose_dgrad_phases(const conv_operands *op, int heuristic, bool groupable, conv_launch_fn launch,
                                    int *way);
/* a stride-1 dgrad (op: its forward convolution over dy, dy in x, the forward's filter in w, op->ft set; ep's residual
 * set when accumulating): a row whose FILT_T program reads the filter as it is, or CONV_DGRAD_REWRITE (the filter
 * rewritten, then the forward's choice) */
#define CONV_DGRAD_REWRITE (-1)
cnn_status conv_choose_dgrad_ft(const conv_operands *op, conv_launch_fn launch, int *row);
#define WINO_WS_CAP ((size_t)1 << 30) /* bytes of V, U and M at most (winograd.c slices the batch) */

/* ---- launches ------------------------------------------------------------------------------------------- */

/* conv2d_fast.c: whether the fast kernels can run this forward problem (C, K multiples, 16-byte aligned tensors,
 * no generic row forced); the problem's conv_args for a pass with bk-wide slices; a row's launch; and the tuned
 * choice + launch (what winograd.c runs its GEMMs with) */
bool conv_fast_eligible(const cuda_be *cb, const cnn_conv2d *cv, const cnn_epilogue *ep, const void *x, const void *w,
                        const void *y);
conv_args conv_make_args(const cnn_conv2d *cv, int pass, int bk);
/* a persistent launch's CTAs: as many of f as fit on the GPU at once (or as a test forces), at most `tiles` */
cnn_status conv_persistent_grid(cuda_be *cb, CUfunction f, const char *what, unsigned threads, unsigned smem,
                                int64_t tiles, int64_t *grid);
/* a's OUT_PHASE mapping (params.cuh's ph_* fields) for a launch of cv writing the phase po of dx */
void conv_args_phase(conv_args *a, const cnn_conv2d *cv, const conv_phase_out *po);
/* (pr: a pair's second convolution; po: a dgrad phase written in place; ft: a dgrad reading w as the forward's
 * filter; each or NULL) */
cnn_status conv_fast_launch(cnn_backend *be, const cnn_conv2d *cv, const cnn_epilogue *ep, const void *x,
                            const void *w, void *y, int row, int splits, const conv_pair *pr, const conv_phase_out *po,
                            const conv_ft *ft);
/* the tuned choice and launch of a problem the fast rows take (its checks made by the caller: a rewritten
 * problem's output size is the original's) */
cnn_status conv_fast_fprop(cnn_backend *be, const cnn_conv2d *cv, const cnn_epilogue *ep, const void *x, const void *w,
                           void *y);
/* the choice and launch of a forward problem whose output is one phase of a strided dgrad (conv_fast_eligible
 * holds): written into dx in place (po; its own OUT_PHASE programs, key "dgrad_phase ..."), or into its block (po
 * NULL; key "fprop ..."); tuned under --tune full only (conv2d_fast.c) */
cnn_status conv_fast_fprop_phase(cnn_backend *be, const cnn_conv2d *cv, const cnn_epilogue *ep, const void *x,
                                 const void *w, void *y, const conv_phase_out *po);
/* the same, checked: what winograd.c runs its GEMMs with */
cnn_status conv_fast_fprop_checked(cnn_backend *be, const cnn_conv2d *cv, const cnn_epilogue *ep, const void *x,
                              const void *w, void *y);
/* conv2d_first.c: first layers over 3-channel images; _takes with the residual and pool as flags */
bool cuda_first_takes(const cuda_be *cb, const cnn_conv2d *cv, bool residual, const cnn_pool2d *pl, const void *y);
bool cuda_first_eligible(const cuda_be *cb, const cnn_conv2d *cv, const cnn_epilogue *ep, const cnn_pool2d *pl,
                         const void *y);
cnn_status cuda_first_fprop(cnn_backend *be, const cnn_conv2d *cv, const cnn_epilogue *ep, const cnn_pool2d *pl,
                            const void *x, const void *w, void *y);
/* winograd.c: the Winograd launches of a problem conv_choose_winograd took */
cnn_status cuda_winograd_fprop(cnn_backend *be, const cnn_conv2d *cv, const cnn_epilogue *ep, const void *x,
                               const void *w, void *y);
/* conv2d_rewrite.c: a narrow first layer (C < 8) through rewritten operands (NARROW_NONE: not one) */
enum { NARROW_NONE = 0, NARROW_S2D = 1, NARROW_PAD = 2 };
int conv_narrow_kind(const cuda_be *cb, const cnn_conv2d *cv, const cnn_epilogue *ep, const void *y);
cnn_status conv_narrow_fprop(cnn_backend *be, const cnn_conv2d *cv, const cnn_epilogue *ep, const void *x,
                             const void *w, void *y, int kind);
/* conv2d_dgrad.c: dgrad by phases on the fast rows (every stride): whether it takes a problem, and the run of one
 * it takes */
bool cuda_dgrad_phases_fits(const cuda_be *cb, const cnn_conv2d *cv, const void *dy, const void *dx, bool accumulate);
cnn_status cuda_dgrad_phases(cnn_backend *be, const cnn_conv2d *cv, const void *dy, const void *w, void *dx,
                             bool accumulate);
/* the same, overwriting dx, with the backward of the ReLU whose output relu_y (dx's shape) is the conv's input: dx =
 * dgrad where relu_y > 0, else 0; and dx's channel sums into dx_sum (C) where set. A stride-1 dgrad on a FILT_T
 * program gates and sums in its epilogue; any other takes a pass over dx after it for each */
cnn_status cuda_dgrad_phases_relu(cnn_backend *be, const cnn_conv2d *cv, const void *dy, const void *w,
                                  const void *relu_y, void *dx, float *dx_sum);
/* conv2d_wgrad.c: wgrad on wgmma (sm_90a, F16/BF16): whether it takes a problem (C % 64 == 0, K % 8 == 0, the
 * tensor maps' limits, 16-byte aligned operands), and the tuned or heuristic launch of one it takes */
bool cuda_wgrad_wgmma_fits(const cuda_be *cb, const cnn_conv2d *cv, const void *x, const void *dy);
/* conv2d_wgrad.c: wgrad over few input channels on mma.sync (F16/BF16, sm_80+; kernels/conv2d_wgrad_few.cu):
 * whether it takes a problem (K <= 64, K % 8 == 0, R*S*C <= 160, C <= 4, dy 16-byte aligned, 32-bit indices,
 * CNN_CONV_SKIP not naming "wgrad_few"), and the launch (with choose_n: every slice's sum in one launch) */
bool cuda_wgrad_few_fits(const cuda_be *cb, const cnn_conv2d *cv, const void *dy);
cnn_status cuda_wgrad_few(cnn_backend *be, const cnn_conv2d *cv, const void *x, const void *dy, float *dw);
cnn_status cuda_wgrad_wgmma(cnn_backend *be, const cnn_conv2d *cv, const void *x, const void *dy, float *dw);

/* A wgrad over a batch of slices (cv->choose_n < cv->n) as one call of `wgrad` per slice, each on the slice's
 * images (choose_n = its n: the heuristic's choice, untimed) into its row, cnn_sum_rows(K * R * S * C) apart. */
typedef cnn_status (*conv_wgrad_fn)(cnn_backend *be, const cnn_conv2d *cv, const void *x, const void *dy, float *dw);
static inline cnn_status conv_wgrad_by_slices(cnn_backend *be, const cnn_conv2d *cv, const void *x, const void *dy,
                                              float *dw, conv_wgrad_fn wgrad) {
    CNN_ASSERT(cv->choose_n > 0 && cv->n % cv->choose_n == 0);
    cnn_conv2d one = *cv;
    one.n = cv->choose_n;
    const int64_t esz = act_size(cuda_impl(be)), xs = (int64_t)one.n * one.h * one.w * one.c * esz,
                  ys = (int64_t)one.n * one.p * one.q * one.k * esz,
                  rows = cnn_sum_rows((int64_t)cv->k * cv->r * cv->s * cv->c);
    for (int g = 0; g < cv->n / cv->choose_n; g++)
        CNN_TRY(wgrad(be, &one, (const char *)x + g * xs, (const char *)dy + g * ys, dw + g * rows));
    return CNN_OK;
}

#endif
