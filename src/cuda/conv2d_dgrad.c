/* conv2d_dgrad.c -- dgrad on the forward tensor-core kernels, for every stride, by phases.
 *
 *     dx[n][h][w][c] = sum over k and the taps (r, s) with h + pad_h - r = p * sh, w + pad_w - s = q * sw
 *                      (0 <= p < P, 0 <= q < Q) of dy[n][p][q][k] * w[k][r][s][c]
 * Split dx by phase (a, b) = (h mod sh, w mod sw). Only the taps r = r0 (mod sh), r0 = (a + pad_h) mod sh, reach
 * the rows h = sh * i + a, and for them p = i + (a + pad_h - r0) / sh - t where r = r0 + sh * t: phase (a, b) is a
 * stride-1 forward convolution of dy (N, P, Q, K) with its taps flipped and the filter transposed (C output channels
 * over K input channels; conv2d_pipelined.cu's conv2d_dgrad_filter writes it), output row i the block's row
 * i + off_h. Its padding is symmetric, as the forward kernels take it: the larger of what the first row needs above and
 * the last row below, so the block may have a row or column more than the phase (off_h, off_w skip it).
 * A stride-1 dgrad whose block is dx itself runs as a plain forward launch, adding dx through the epilogue's residual
 * when accumulating (every element read and then written by the same thread): either a TMA row's FILT_T program, which
 * reads the forward's filter as it is (tap (tr, ts) is the filter's (R-1-tr, S-1-ts), its K x C boxes multiplied
 * MN-major), or the filter rewritten, then the forward's choice; tuned per shape (conv2d_choose.c, "dgrad_ft";
 * perf-log step 88). Larger strides, one of three ways,
 * chosen per shape and accumulation by the tuner (conv2d_choose.c, "dgrad_phases"):
 *   - in place: each phase's convolution is its row's OUT_PHASE program (conv_phase_out: the epilogue maps its output
 *     row to dx's pixel and leaves out the block's extra rows and columns), adding dx as its residual when
 *     accumulating; conv2d_dgrad_zero writes zeros at the phases no tap reaches (the odd rows and columns of a 1x1/2),
 *     which keep dx when accumulating. Each phase tuned as its own problem ("dgrad_phase ...");
 *   - through blocks: each phase into its block of the staging workspace (a plain forward launch, tuned under its
 *     forward key), then conv2d_dgrad_interleave writes dx (adding dx when accumulating; zeros where no tap reaches);
 *   - grouped: every phase with taps in one persistent launch of a group row's GROUPED program (conv2d_warpspec.cu),
 *     written in place as above; the phases' tiles in one list, so the short phases fill the long one's tail; its
 *     program reads the forward's filter as it is (FILT_T, no rewrite: step 88).
 * In place writes dx once, but accumulating it reads dx in every phase's epilogue, where the interleave reads it
 * once (perf-log step 75).
 * Where the forward kernels do not take a phase (channel counts, alignment, a tap pattern whose first row would
 * need negative padding), cuda_conv2d_dgrad runs the generic kernels.
 */
#include "cuda/conv2d.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

typedef struct dgrad_phase {
    cnn_conv2d cv;    /* the phase's forward convolution over dy; cv.n == 0: no tap reaches the phase */
    int r0, s0;       /* its first filter tap */
    int off_h, off_w; /* dx row sh * i + a is the block's row i + off_h */
} dgrad_phase;

static int cdiv_i(int a, int b) { return (a + b - 1) / b; }

/* phase (a, b) of cv's dgrad; false where a forward convolution cannot express it */
static bool plan_phase(const cnn_conv2d *cv, int a, int b, dgrad_phase *ph) {
    memset(ph, 0, sizeof *ph);
    const int sh = cv->stride_h, sw = cv->stride_w;
    const int hp = cdiv_i(cv->h - a, sh), wp = cdiv_i(cv->w - b, sw); /* dx rows and columns of the phase */
    const int r0 = (a + cv->pad_h) % sh, s0 = (b + cv->pad_w) % sw;
    const int rt = r0 < cv->r ? cdiv_i(cv->r - r0, sh) : 0, st = s0 < cv->s ? cdiv_i(cv->s - s0, sw) : 0;
    ph->r0 = r0, ph->s0 = s0;
    if (rt == 0 || st == 0 || hp <= 0 || wp <= 0) return true; /* zeros */
    /* block row i' reads dy rows i' - pad + t; phase row i needs dy rows i + oh - (rt - 1) + t */
    const int top = rt - 1 - (a + cv->pad_h - r0) / sh, left = st - 1 - (b + cv->pad_w - s0) / sw;
    if (top < 0 || left < 0) return false;
    const int bottom = hp - 1 - top + rt - 1 - (cv->p - 1), right = wp - 1 - left + st - 1 - (cv->q - 1);
    const int pad_h = top > bottom ? top : bottom, pad_w = left > right ? left : right;
    ph->off_h = pad_h - top, ph->off_w = pad_w - left;
    ph->cv = (cnn_conv2d){.n = cv->n, .c = cv->k, .h = cv->p, .w = cv->q, .k = cv->c, .r = rt, .s = st, .stride_h = 1,
                          .stride_w = 1, .pad_h = pad_h, .pad_w = pad_w, .p = cv->p + 2 * pad_h - rt + 1,
                          .q = cv->q + 2 * pad_w - st + 1, .choose_n = cv->choose_n, .choice_n = cv->choice_n};
    return ph->cv.p >= hp + ph->off_h && ph->cv.q >= wp + ph->off_w;
}

/* every phase, or false where one cannot run on the forward tensor-core kernels (or stride_h * stride_w is more
 * than DGRAD_MAX_PHASES, or the glue kernels' 32-bit counts overflow); res: the epilogue's residual operand (dx
 * when accumulating, the gating ReLU output, or NULL); *direct: the single phase of a stride-1 dgrad whose block is
 * dx itself */
static bool plan(const cuda_be *cb, const cnn_conv2d *cv, const void *dy, const void *dx, const void *res,
                 dgrad_phase *ph, bool *direct) {
    const int np = cv->stride_h * cv->stride_w;
    if (np > DGRAD_MAX_PHASES || cb->allow_tf32) return false; /* TF32 forward kernels; dgrad stays true fp32 */
    /* the filter rewrite counts the filter's elements, the interleave and zero kernels dx's pixels, in 32 bits */
    if ((int64_t)cv->k * cv->r * cv->s * cv->c > INT32_MAX || (int64_t)cv->n * cv->h * cv->w > INT32_MAX) return false;
    for (int i = 0; i < np; i++) {
        if (!plan_phase(cv, i / cv->stride_w, i % cv->stride_w, &ph[i])) return false;
        if (ph[i].cv.n == 0) continue;
        const cnn_epilogue ep = {.residual = res};
        /* the rewritten filter lives in 256-byte aligned workspace: dy stands in for it */
        if (!conv_fast_eligible(cb, &ph[i].cv, &ep, dy, dy, dx)) return false;
    }
    *direct = np == 1 && ph[0].cv.n && ph[0].off_h == 0 && ph[0].off_w == 0 && ph[0].cv.p == cv->h && ph[0].cv.q == cv->w;
    return true;
}

bool cuda_dgrad_phases_fits(const cuda_be *cb, const cnn_conv2d *cv, const void *dy, const void *dx, bool accumulate) {
    dgrad_phase ph[DGRAD_MAX_PHASES];
    bool direct;
    return (cv->c % 8 == 0 || cv->stride_h * cv->stride_w == 1) &&
           plan(cb, cv, dy, dx, accumulate ? dx : NULL, ph, &direct);
}

/* where phase ph's taps are in the forward's filter (read as it is: FILT_T): its tap (t, u) is the filter's
 * (r0 + sh (RT - 1 - t), s0 + sw (ST - 1 - u)), as conv2d_dgrad_filter would have written it at (t, u) */
static conv_ft phase_ft(const cnn_conv2d *cv, const dgrad_phase *ph) {
    const int r_last = ph->r0 + cv->stride_h * (ph->cv.r - 1), s_last = ph->s0 + cv->stride_w * (ph->cv.s - 1);
    return (conv_ft){.taps = cv->r * cv->s, .base = r_last * cv->s + s_last, .dr = -cv->stride_h * cv->s,
                     .ds = -cv->stride_w};
}

static size_t align256(size_t b) { return (b + 255) / 256 * 256; }

/* every phase's filter, flipped and transposed (C, RT, ST, K), in one launch, into the workspace: *wt[i] phase i's,
 * NULL where no tap reaches it */
static cnn_status rewrite_filters(cuda_be *cb, const cnn_conv2d *cv, const dgrad_phase *ph, const void *w,
                                  void *wt[DGRAD_MAX_PHASES]) {
    const int np = cv->stride_h * cv->stride_w;
    const size_t esz = cnn_dtype_size(cb->pub.act_dtype);
    size_t off[DGRAD_MAX_PHASES], bytes = 0; /* each phase's filter at its offset in the workspace */
    for (int i = 0; i < np; i++) {
        off[i] = bytes;
        if (ph[i].cv.n) bytes += align256((size_t)cv->k * ph[i].cv.r * ph[i].cv.s * cv->c * esz);
    }
    void *ws;
    CNN_TRY(cuda_workspace_slot(cb, CUDA_WS_OPERANDS, bytes, &ws));
    dgrad_filter_args a = {.k = cv->k, .r = cv->r, .s = cv->s, .c = cv->c, .stride_h = cv->stride_h,
                           .stride_w = cv->stride_w, .pad_h = cv->pad_h, .pad_w = cv->pad_w, .w = w};
    for (int i = 0; i < np; i++) a.out[i] = wt[i] = ph[i].cv.n ? (char *)ws + off[i] : NULL;
    CUfunction f;
    CNN_TRY(cuda_kernel(cb, conv_pipelined_family(cb), cb->pub.act_dtype, 0, PIPE_DGRAD_FILTER, &f));
    char what[200];
    snprintf(what, sizeof what, "conv2d_dgrad_filter k%d c%d r%d s%d stride %dx%d pad %dx%d", cv->k, cv->c, cv->r,
             cv->s, cv->stride_h, cv->stride_w, cv->pad_h, cv->pad_w);
    return cuda_launch(cb, f, what, (unsigned)cdiv_i(cv->c, 32), (unsigned)cdiv_i(cv->k, 32), (unsigned)(cv->r * cv->s),
                       32, 8, &a);
}

/* conv2d_dgrad_zero (zero) or conv2d_dgrad_interleave over dx, one block per dx row */
static cnn_status launch_glue(cuda_be *cb, const cnn_conv2d *cv, dgrad_phase_args *a, bool zero) {
    CUfunction f;
    const int entry = zero ? PIPE_DGRAD_ZERO : PIPE_DGRAD_INTERLEAVE;
    CNN_TRY(cuda_kernel(cb, conv_pipelined_family(cb), cb->pub.act_dtype, 0, entry, &f));
    char what[200];
    snprintf(what, sizeof what, "conv2d_dgrad_%s[%s] n%d c%d h%d w%d stride %dx%d%s", zero ? "zero" : "interleave",
             cuda_dtype_str(cb->pub.act_dtype), cv->n, cv->c, cv->h, cv->w, cv->stride_h, cv->stride_w,
             a->accumulate ? " accumulate" : "");
    const int groups = cv->w * (cv->c / 8); /* a dx row's */
    const unsigned threads = groups >= 256 ? 256 : (unsigned)cdiv_i(groups, 32) * 32;
    return cuda_launch(cb, f, what, (unsigned)(cv->n * cv->h), 1, 1, threads, 1, a);
}

/* where phase i's convolution writes in dx when it writes in place */
static conv_phase_out phase_out(const cnn_conv2d *cv, const dgrad_phase *ph, int i) {
    const int pa = i / cv->stride_w, pb = i % cv->stride_w;
    return (conv_phase_out){.sh = cv->stride_h, .sw = cv->stride_w, .a = pa, .b = pb, .off_h = ph[i].off_h,
                            .off_w = ph[i].off_w, .rows = cdiv_i(cv->h - pa, cv->stride_h),
                            .cols = cdiv_i(cv->w - pb, cv->stride_w), .h = cv->h, .w = cv->w};
}

/* whether every phase with taps fits one grouped launch (conv2d_warpspec.cu, GROUPED): at most CONV_GROUP_MAX of
 * them, each a TMA problem (K % 64, its corners in the im2col map's range), F16/BF16; CNN_CONV_SKIP=dgrad_grouped
 * leaves the grouped launches out (the A/B) */
static bool groupable(const cuda_be *cb, const cnn_conv2d *cv, const dgrad_phase *ph) {
    if (cb->pub.act_dtype == CNN_DTYPE_F32 || cuda_conv_skipped(cb, "dgrad_grouped")) return false;
    int n = 0;
    for (int i = 0; i < cv->stride_h * cv->stride_w; i++) {
        if (!ph[i].cv.n) continue;
        if (++n > CONV_GROUP_MAX || !conv_tma_fits(&ph[i].cv)) return false;
    }
    return n > 0;
}

/* Every phase with taps in one persistent launch of group row gi's GROUPED program, the longest reduction's tiles
 * first, so that the short phases' tiles fill the tail (perf-log step 86); then zeros at the phases no tap reaches,
 * unless accumulating (those keep dx). */
static cnn_status run_grouped(cnn_backend *be, const cnn_conv2d *cv, const dgrad_phase *ph, const void *dy,
                              const void *w, void *dx, bool accumulate, int gi) {
    cuda_be *cb = cuda_impl(be);
    const int np = cv->stride_h * cv->stride_w, row = conv_group_row(gi);
    const conv_row *c = &conv_rows[row];
    int order[DGRAD_MAX_PHASES], n = 0; /* the phases with taps, most taps first */
    for (int i = 0; i < np; i++) {
        if (!ph[i].cv.n) continue;
        int j = n++;
        for (; j > 0 && ph[order[j - 1]].cv.r * ph[order[j - 1]].cv.s < ph[i].cv.r * ph[i].cv.s; j--) order[j] = order[j - 1];
        order[j] = i;
    }
    CNN_ASSERT(n >= 1 && n <= CONV_GROUP_MAX);
    conv_group_args g;
    memset(&g, 0, sizeof g);
    int64_t tiles = 0, ktiles = 0;
    for (int j = 0; j < n; j++) {
        const int i = order[j];
        const conv_phase_out po = phase_out(cv, ph, i);
        const conv_ft ft = phase_ft(cv, &ph[i]); /* the program reads w as it is (FILT_T) */
        conv_args a = conv_make_args(&ph[i].cv, PASS_FPROP, c->bk);
        a.x = dy, a.wt = w, a.out = dx, a.residual = accumulate ? dx : NULL;
        a.ft_base = ft.base, a.ft_dr = ft.dr, a.ft_ds = ft.ds;
        conv_args_phase(&a, &ph[i].cv, &po);
        CNN_TRY(conv_tma_encode_ft(cb, c, &ph[i].cv, dy, w, &ft, &g.a_map[j], &g.b_map[j]));
        g.a[j] = a;
        tiles += cdiv(a.gm, c->bm) * cdiv(a.gn, c->bn);
        if (a.ktiles_per_split > ktiles) ktiles = a.ktiles_per_split;
        if (tiles > INT_MAX) return cnn_fail(CNN_E_UNSUPPORTED, "grouped dgrad: %lld tiles", (long long)tiles);
        g.tile_end[j] = (int)tiles;
    }
    g.groups = n;
    CUfunction f;
    CNN_TRY(cuda_kernel(cb, &cuda_family_conv2d_group_warpspec, be->act_dtype, gi, PIPE_MAIN, &f));
    char what[200];
    snprintf(what, sizeof what, "conv2d_dgrad_grouped[%s %s] n%d c%d h%d w%d k%d r%d s%d stride %dx%d pad %dx%d%s",
             cuda_dtype_str(be->act_dtype), conv_row_name(row), cv->n, cv->c, cv->h, cv->w, cv->k, cv->r, cv->s,
             cv->stride_h, cv->stride_w, cv->pad_h, cv->pad_w, accumulate ? " accumulate" : "");
    const unsigned smem = (unsigned)conv_row_smem(c, c->stages, g.a[0].gk), threads = (unsigned)conv_row_threads(c);
    int64_t grid;
    CNN_TRY(conv_persistent_grid(cb, f, what, threads, smem, tiles, &grid));
    if (cdiv(tiles, grid) * ktiles > INT_MAX) grid = tiles; /* the kernel counts its slices in an int */
    CNN_TRY(cuda_launch_smem(cb, f, what, (unsigned)grid, 1, 1, threads, 1, smem, &g));
    cb->stats.tma_launches++, cb->stats.dgrad_grouped_launches++;
    if (accumulate || n == np) return CNN_OK;
    dgrad_phase_args z;
    memset(&z, 0, sizeof z);
    z.n = cv->n, z.h = cv->h, z.w = cv->w, z.c = cv->c, z.stride_h = cv->stride_h, z.stride_w = cv->stride_w, z.dx = dx;
    for (int i = 0; i < np; i++)
        if (!ph[i].cv.n) z.zero_mask |= 1 << i;
    return launch_glue(cb, cv, &z, true);
}

/* the phases of a strided dgrad (not direct): each into its block of the staging workspace then the interleave
 * (in_place false), or each written into dx then zeros for the phases no tap reaches (in_place) */
static cnn_status run_phases(cnn_backend *be, const cnn_conv2d *cv, const dgrad_phase *ph, const void *dy,
                             const void *w, void *dx, bool accumulate, bool in_place) {
    cuda_be *cb = cuda_impl(be);
    const int np = cv->stride_h * cv->stride_w;
    const size_t esz = cnn_dtype_size(be->act_dtype);
    size_t bbytes = 0;
    for (int i = 0; i < np; i++)
        if (ph[i].cv.n) bbytes += align256((size_t)cv->n * ph[i].cv.p * ph[i].cv.q * cv->c * esz);
    void *wt[DGRAD_MAX_PHASES], *blocks = NULL;
    CNN_TRY(rewrite_filters(cb, cv, ph, w, wt));
    if (!in_place && bbytes) CNN_TRY(cuda_workspace_slot(cb, CUDA_WS_STAGED, bbytes, &blocks));
    const cnn_epilogue ep = {.residual = accumulate ? dx : NULL};
    dgrad_phase_args a;
    memset(&a, 0, sizeof a);
    a.n = cv->n, a.h = cv->h, a.w = cv->w, a.c = cv->c, a.stride_h = cv->stride_h, a.stride_w = cv->stride_w;
    a.accumulate = accumulate, a.dx = dx;
    size_t off = 0;
    for (int i = 0; i < np; i++) {
        if (!ph[i].cv.n) {
            a.zero_mask |= 1 << i;
            continue;
        }
        if (in_place) {
            const conv_phase_out po = phase_out(cv, ph, i);
            CNN_TRY(conv_fast_fprop_phase(be, &ph[i].cv, accumulate ? &ep : NULL, dy, wt[i], dx, &po));
            continue;
        }
        void *blk = (char *)blocks + off;
        off += align256((size_t)cv->n * ph[i].cv.p * ph[i].cv.q * cv->c * esz);
        CNN_TRY(conv_fast_fprop_phase(be, &ph[i].cv, NULL, dy, wt[i], blk, NULL));
        a.block[i] = blk, a.pp[i] = ph[i].cv.p, a.pq[i] = ph[i].cv.q, a.off_h[i] = ph[i].off_h, a.off_w[i] = ph[i].off_w;
    }
    if (in_place && (!a.zero_mask || accumulate)) return CNN_OK; /* accumulating: those phases keep dx */
    return launch_glue(cb, cv, &a, in_place);
}

/* way (conv2d.h's DGRAD_*) of the phases of a strided dgrad */
static cnn_status run_way(cnn_backend *be, const cnn_conv2d *cv, const dgrad_phase *ph, const void *dy, const void *w,
                          void *dx, bool accumulate, int way) {
    if (way >= DGRAD_GROUPED) return run_grouped(be, cv, ph, dy, w, dx, accumulate, way - DGRAD_GROUPED);
    return run_phases(be, cv, ph, dy, w, dx, accumulate, way == DGRAD_IN_PLACE);
}

/* the direct dgrad's launch: phase convolution pc over dy into dx (ep: dx as its residual when accumulating, or with
 * ft->gate the gating ReLU output) on row's FILT_T program, or (CONV_DGRAD_REWRITE) the filter rewritten, then the
 * forward's choice (whose programs add a residual: a gate then takes a pass over dx of its own) */
static cnn_status run_direct(cnn_backend *be, const cnn_conv2d *pc, const cnn_epilogue *ep, const void *dy,
                             const void *w, void *dx, int row, const conv_ft *ft) {
    if (row != CONV_DGRAD_REWRITE) return conv_fast_launch(be, pc, ep, dy, w, dx, row, 1, NULL, NULL, ft);
    /* the forward convolution whose dgrad pc is (stride 1: pc reads dy (N, P, Q, K) with padding R - 1 - pad) */
    const cnn_conv2d cv = {.n = pc->n, .c = pc->k, .h = pc->p, .w = pc->q, .k = pc->c, .r = pc->r, .s = pc->s,
                           .stride_h = 1, .stride_w = 1, .pad_h = pc->r - 1 - pc->pad_h, .pad_w = pc->s - 1 - pc->pad_w,
                           .p = pc->h, .q = pc->w, .choose_n = pc->choose_n, .choice_n = pc->choice_n};
    dgrad_phase ph[DGRAD_MAX_PHASES];
    void *wt[DGRAD_MAX_PHASES];
    const bool ok = plan_phase(&cv, 0, 0, &ph[0]);
    CNN_ASSERT(ok && ph[0].cv.n);
    CNN_TRY(rewrite_filters(cuda_impl(be), &cv, ph, w, wt));
    if (!ft->gate) return conv_fast_fprop_checked(be, pc, ep, dy, wt[0], dx);
    CNN_TRY(conv_fast_fprop_checked(be, pc, NULL, dy, wt[0], dx));
    return cuda_relu_backward(be, (int64_t)pc->n * pc->p * pc->q * pc->k, ep->residual, dx, dx, false);
}

/* the direct dgrad's candidates into y, a scratch shaped as dx (itself the residual when accumulating, or the gate) */
static cnn_status direct_timed(const conv_operands *op, conv_cand c, void *y) {
    const cnn_epilogue ep = {.residual = y};
    return run_direct(op->be, op->cv, op->ep ? &ep : NULL, op->x, op->w, y, c.row, op->ft);
}

/* the choice's candidates, a way each, into y, a scratch shaped as dx (op->ep's residual when accumulating: y
 * itself) */
static cnn_status phases_timed(const conv_operands *op, conv_cand c, void *y) {
    dgrad_phase ph[DGRAD_MAX_PHASES];
    bool direct;
    const bool acc = op->ep != NULL, ok = plan(cuda_impl(op->be), op->cv, op->x, y, acc ? y : NULL, ph, &direct);
    CNN_ASSERT(ok && !direct);
    return run_way(op->be, op->cv, ph, op->x, op->w, y, acc, c.row);
}

cnn_status cuda_dgrad_phases(cnn_backend *be, const cnn_conv2d *cv, const void *dy, const void *w, void *dx,
                             bool accumulate) {
    cuda_be *cb = cuda_impl(be);
    dgrad_phase ph[DGRAD_MAX_PHASES];
    bool direct;
    const bool ok = plan(cb, cv, dy, dx, accumulate ? dx : NULL, ph, &direct);
    CNN_ASSERT(ok); /* the caller asked cuda_dgrad_phases_fits */
    cb->stats.dgrad_fast_launches++;
    const cnn_epilogue ep = {.residual = accumulate ? dx : NULL};
    if (direct) { /* the filter read as it is (FILT_T), or rewritten for the forward's choice: as tuned */
        const conv_ft ft = phase_ft(cv, &ph[0]); /* tap (tr, ts): the filter's (R - 1 - tr, S - 1 - ts) */
        const conv_operands op = {.be = be, .cv = &ph[0].cv, .ep = accumulate ? &ep : NULL, .x = dy, .w = w, .ft = &ft};
        int row;
        CNN_TRY(conv_choose_dgrad_ft(&op, direct_timed, &row));
        return run_direct(be, &ph[0].cv, op.ep, dy, w, dx, row, &ft);
    }
    /* the heuristic: in place (no block written and read back), except accumulating over several phases with taps,
     * whose epilogues would each read dx as a residual (perf-log step 75) */
    int with_taps = 0;
    for (int i = 0; i < cv->stride_h * cv->stride_w; i++) with_taps += ph[i].cv.n != 0;
    const conv_operands op = {.be = be, .cv = cv, .ep = accumulate ? &ep : NULL, .x = dy, .w = w};
    int way;
    CNN_TRY(conv_choose_dgrad_phases(&op, !accumulate || with_taps == 1 ? DGRAD_IN_PLACE : DGRAD_BLOCKS,
                                     groupable(cb, cv, ph), phases_timed, &way));
    return run_way(be, cv, ph, dy, w, dx, accumulate, way);
}

/* The ReLU's backward taken into a direct dgrad's epilogue (perf-log step 98): where the ReLU's output relu_y is
 * the conv's input, read by nothing else (VGG's convs), the gradient of that output is dx gated by relu_y > 0, and
 * the ReLU's own pass (relu_y and dx read, dx written) goes. The choice is tuned with the gate in ("dgrad_ft ...
 * relu": the rewrite's candidate times its gating pass too; no candidate times the sums); a strided dgrad, or the
 * gate unaligned, runs as cuda_dgrad_phases and then the pass. dx_sum (the bias gradient of the conv before the ReLU):
 * the FILT_T program's sums of dx as it stores them, folded (step 101); after the rewrite, or with
 * CNN_CONV_SKIP=dgrad_sum (the A/B: the same program, its sums not stored), channel_sum's pass over dx. */
cnn_status cuda_dgrad_phases_relu(cnn_backend *be, const cnn_conv2d *cv, const void *dy, const void *w,
                                  const void *relu_y, void *dx, float *dx_sum) {
    cuda_be *cb = cuda_impl(be);
    const int64_t m = (int64_t)cv->n * cv->h * cv->w;
    dgrad_phase ph[DGRAD_MAX_PHASES];
    bool direct;
    if (!plan(cb, cv, dy, dx, relu_y, ph, &direct) || !direct) {
        CNN_TRY(cuda_dgrad_phases(be, cv, dy, w, dx, false));
        CNN_TRY(cuda_relu_backward(be, m * cv->c, relu_y, dx, dx, false));
        return dx_sum ? cuda_channel_sum(be, m, cv->c, dx, dx_sum) : CNN_OK;
    }
    cb->stats.dgrad_fast_launches++;
    cnn_conv_stats sums = {0};
    const cnn_epilogue ep = {.residual = relu_y,
                             .stats = dx_sum && !cuda_conv_skipped(cb, "dgrad_sum") ? &sums : NULL};
    conv_ft ft = phase_ft(cv, &ph[0]);
    ft.gate = true;
    const conv_operands op = {.be = be, .cv = &ph[0].cv, .ep = &ep, .x = dy, .w = w, .ft = &ft};
    int row;
    CNN_TRY(conv_choose_dgrad_ft(&op, direct_timed, &row));
    CNN_TRY(run_direct(be, &ph[0].cv, &ep, dy, w, dx, row, &ft));
    if (!dx_sum) return CNN_OK;
    return sums.chunks > 0 ? cuda_channel_sum_partials(be, &sums, dx_sum) : cuda_channel_sum(be, m, cv->c, dx, dx_sum);
}
