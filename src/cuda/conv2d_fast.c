/* conv2d_fast.c -- the launch of a fast forward row (conv2d_table.c): the pipelined mma.sync kernel
 * (kernels/conv2d_pipelined.cu, split-K over gridDim.z and its epilogue kernel), wgmma (kernels/conv2d_wgmma.cu, one CTA
 * per tile or a persistent grid) and warp-specialised wgmma (kernels/conv2d_warpspec.cu, persistent; TMA rows get their
 * tensor maps from conv2d_tma.c). A row that cannot run a problem hands it to its twin (conv2d_table.c) here, at
 * launch: a transposed row with a residual or a pair, a TMA-store row whose output map does not apply, a
 * filter-resident row whose filter block does not fit, a TMA row off its maps. A launch writing one phase of a
 * strided dgrad into dx (conv_phase_out) runs its row's OUT_PHASE program (conv_phase_row, PASS_DGRAD's family).
 */
#include "cuda/conv2d.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

/* the problem's fields and GEMM view; one split of BK-wide reduction slices */
conv_args conv_make_args(const cnn_conv2d *cv, int pass, int bk) {
    conv_args a = {0};
    a.n = cv->n, a.c = cv->c, a.h = cv->h, a.w = cv->w;
    a.k = cv->k, a.r = cv->r, a.s = cv->s, a.p = cv->p, a.q = cv->q;
    a.stride_h = cv->stride_h, a.stride_w = cv->stride_w, a.pad_h = cv->pad_h, a.pad_w = cv->pad_w;
    int64_t gm, gn, gk;
    conv_gemm_dims(cv, pass, &gm, &gn, &gk);
    a.gm = (int)gm, a.gn = (int)gn, a.gk = (int)gk;
    a.ktiles_per_split = (int)cdiv(gk, bk);
    a.splits = 1;
    return a;
}

/* Whether the tensor-core kernels can run this forward problem (F16/BF16 on sm_80+ with C % 8, or F32 in TF32
 * with C % 4; K % 8, 16-byte aligned tensors) and no generic variant is forced. */
void conv_args_phase(conv_args *a, const cnn_conv2d *cv, const conv_phase_out *po) {
    /* out_at numbers dx's pixels in int */
    CNN_ASSERT(po->sh >= 1 && po->sw >= 1 && (int64_t)cv->n * po->h * po->w < INT_MAX);
    a->ph_sh = po->sh, a->ph_sw = po->sw, a->ph_a = po->a, a->ph_b = po->b, a->ph_off_h = po->off_h;
    a->ph_off_w = po->off_w, a->ph_rows = po->rows, a->ph_cols = po->cols, a->ph_h = po->h, a->ph_w = po->w;
    cuda_fast_divisor(a->q, &a->ph_q_mul, &a->ph_q_shr);
    cuda_fast_divisor(a->p, &a->ph_p_mul, &a->ph_p_shr);
}

cnn_status conv_persistent_grid(cuda_be *cb, CUfunction f, const char *what, unsigned threads, unsigned smem,
                                int64_t tiles, int64_t *grid) {
    int per_sm = 1;
    CNN_TRY(cuda_blocks_per_sm(cb, f, what, threads, smem, &per_sm));
    *grid = cb->conv_force_grid > 0 ? cb->conv_force_grid : (int64_t)per_sm * cb->sm_count;
    if (*grid > tiles) *grid = tiles;
    return CNN_OK;
}

bool conv_fast_eligible(const cuda_be *cb, const cnn_conv2d *cv, const cnn_epilogue *ep, const void *x, const void *w,
                        const void *y) {
    if (!conv_row_usable(cb, conv_n_generic())) return false; /* the first pipelined row: sm_80+, tensor cores on */
    if (cb->conv_force_cfg >= 0 && cb->conv_force_cfg < conv_n_generic()) return false;
    if (cv->c % (16 / act_size(cb)) != 0 || cv->k % 8 != 0) return false;
    return aligned16(x) && aligned16(w) && aligned16(y) && !(ep && ep->residual && !aligned16(ep->residual));
}

cnn_status conv_fast_launch(cnn_backend *be, const cnn_conv2d *cv, const cnn_epilogue *ep, const void *x,
                            const void *w, void *y, int row, int splits, const conv_pair *pr, const conv_phase_out *po,
                            const conv_ft *ft) {
    cuda_be *cb = cuda_impl(be);
    if (po) row = conv_phase_row(row); /* the rows with an OUT_PHASE program of their own */
    /* sums for the training BatchNorm that reads y (cnn_conv_stats): the row's stats program, where it has one and
     * the BatchNorm would read y from DRAM (not in its one-launch pass over a tensor the L2 holds: there the sums
     * cost the epilogue more than they save, perf-log step 87; a batch of slices, choose_n, has no such pass, and
     * whether the sums are there must not depend on how many slices a launch holds: step 116) */
    cnn_conv_stats *want = ep && ep->stats && !pr && !po && !ft && splits == 1 && conv_stats_row(row) >= 0 &&
                                   !cuda_conv_skipped(cb, "bn_stats") &&
                                   (cv->choose_n > 0 ||
                                    !cuda_bn_forward_one_launch(cb, (int64_t)cv->n * cv->p * cv->q, cv->k))
                               ? ep->stats
                               : NULL;
    if (want) row = conv_stats_row(row);
    const conv_row *c = &conv_rows[row];
    CUfunction f, fe = NULL;
    if (conv_is(c, CNN_CUDA_CONV_TRANSPOSED) && ((ep && ep->residual) || pr || !conv_tma_fits(cv)))
        c = &conv_rows[row = conv_swap_twin(row)];
    int64_t gm0, gn0, gk0;
    conv_gemm_dims(cv, PASS_FPROP, &gm0, &gn0, &gk0);
    if (conv_is(c, CNN_CUDA_CONV_TMA_STORE) && !conv_ost_fits(gm0, gn0, y)) c = &conv_rows[row = conv_ost_twin(row)];
    if (conv_is(c, CNN_CUDA_CONV_FILTER_RESIDENT) && !conv_bres_fits(cb, c, gn0, conv_launch_gk(cv, pr)))
        c = &conv_rows[row = conv_ws_twin(row, false, conv_is(c, CNN_CUDA_CONV_TMA))];
    if (conv_is(c, CNN_CUDA_CONV_TMA) && !conv_tma_fits(cv))
        c = &conv_rows[row = conv_ws_twin(row, conv_is(c, CNN_CUDA_CONV_FILTER_RESIDENT), false)];
    const bool warpspec = conv_is(c, CNN_CUDA_CONV_WARPSPEC), tma = conv_is(c, CNN_CUDA_CONV_TMA);
    CNN_ASSERT(!pr || (tma && splits == 1)); /* pairs: the TMA rows only (pair_candidates, pair_fusable) */
    CNN_ASSERT(!ft || (tma && !pr && !po && splits == 1)); /* its caller checked conv_tma_fits */
    CNN_ASSERT(splits == 1 || !conv_hopper(c));
    int cfg;
    const cuda_family *fam = conv_row_family(cb, row, po ? PASS_DGRAD : PASS_FPROP, &cfg); /* po: OUT_PHASE's program */
    if (want && (!warpspec || conv_is(c, CNN_CUDA_CONV_TRANSPOSED) ||
                 conv_stats_smem(c, c->stages, conv_launch_gk(cv, pr)) > cb->smem_optin))
        want = NULL; /* a twin without a stats program: the BatchNorm sums y itself */
    if (want) fam = &cuda_family_conv2d_stats_warpspec;
    if (ft) fam = conv_ft_family(ft), cfg = conv_ft_program(row);
    /* a gating dgrad's program is a stats program (FT_GATE): its sums of dx where ep->stats asks (step 101) */
    const bool gate = ft && ft->gate, stats_smem = want || gate;
    cnn_conv_stats *sums = want ? want : gate ? ep->stats : NULL;
    CNN_TRY(cuda_kernel(cb, fam, be->act_dtype, cfg, PIPE_MAIN, &f));
    conv_args a = conv_make_args(cv, PASS_FPROP, conv_row_ks(cb, c));
    if (pr) { /* the second convolution's slices follow the first's (both C % 64 == 0: whole slices) */
        const cnn_conv2d *c2 = pr->cv;
        a.pair_ktiles = a.ktiles_per_split;
        a.gk = (int)conv_launch_gk(cv, pr);
        a.ktiles_per_split = (int)cdiv(a.gk, conv_row_ks(cb, c));
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
    if (po) {
        CNN_ASSERT(!pr);
        conv_args_phase(&a, cv, po);
    }
    if (ft) a.ft_base = ft->base, a.ft_dr = ft->dr, a.ft_ds = ft->ds;
    CNN_ASSERT(!ft || !ft->gate || a.residual); /* the gate is the residual operand */
    if (sums) { /* a chunk per tile and consumer: (2, chunks, K) floats, a gating dgrad's (1, chunks, K) */
        a.stats_chunks = (int)(cdiv(gm, c->bm) * (conv_is(c, CNN_CUDA_CONV_COOPERATIVE) ? 2 : 1));
        void *ws;
        CNN_TRY(cuda_workspace_slot(cb, CUDA_WS_STATS, (size_t)(want ? 2 : 1) * a.stats_chunks * (size_t)gn * sizeof(float),
                                    &ws));
        a.stats = ws;
    }
    if (splits > 1) {
        CNN_TRY(cuda_kernel(cb, fam, be->act_dtype, cfg, PIPE_SPLITK_EPILOGUE, &fe));
        void *ws;
        CNN_TRY(cuda_workspace(cb, (size_t)((int64_t)splits * gm * gn) * sizeof(float), &ws));
        a.ws = ws;
    }
    char what[200];
    snprintf(what, sizeof what, "conv2d_fprop_pipelined[%s %s] n%d c%d h%d w%d k%d r%d s%d stride %dx%d pad %dx%d%s",
             conv_dtype_str(cb), conv_row_name(row), cv->n, cv->c, cv->h, cv->w, cv->k, cv->r, cv->s, cv->stride_h,
             cv->stride_w, cv->pad_h, cv->pad_w,
             want                ? " + channel sums"
             : gate && sums      ? " (a dgrad, the filter read transposed, ReLU-gated, + channel sums)"
             : gate              ? " (a dgrad, the filter read transposed, ReLU-gated)"
             : ft                ? " (a dgrad, the filter read transposed)"
                                 : "");
    if (pr)
        snprintf(what + strlen(what), sizeof what - strlen(what), " + c%d h%d w%d r%d s%d stride %dx%d pad %dx%d",
                 pr->cv->c, pr->cv->h, pr->cv->w, pr->cv->r, pr->cv->s, pr->cv->stride_h, pr->cv->stride_w,
                 pr->cv->pad_h, pr->cv->pad_w);
    /* shared memory for the stages this launch can use: a short reduction (a 1x1 conv over 64 channels is one
     * slice) takes less, so more CTAs fit on an SM; a persistent CTA cycles through all its stages over its
     * tiles (conv2d_wgmma.cu traps when given too few) */
    const bool persistent = conv_is(c, CNN_CUDA_CONV_PERSISTENT) || warpspec;
    int stages = c->stages < kps || persistent ? c->stages : (int)kps;
    if (cdiv(gm, c->bm) * cdiv(gn, c->bn) > INT_MAX)
        return cnn_fail(CNN_E_UNSUPPORTED, "%s: %lld output tiles, more than one launch takes", what,
                        (long long)(cdiv(gm, c->bm) * cdiv(gn, c->bn)));
    unsigned smem = (unsigned)(stats_smem ? conv_stats_smem(c, stages, a.gk) : conv_row_smem(c, stages, a.gk));
    unsigned threads = (unsigned)conv_row_threads(c);
    int64_t tiles = cdiv(gm, c->bm) * cdiv(gn, c->bn), grid = tiles;
    if (persistent) {
        CNN_TRY(conv_persistent_grid(cb, f, what, threads, smem, tiles, &grid));
        if (conv_is(c, CNN_CUDA_CONV_FILTER_RESIDENT)) { /* whole column blocks: CTA b keeps column b % n_tiles (conv2d_warpspec.cu) */
            int64_t nt = cdiv(gn, c->bn), rows = grid / nt;
            if (rows < 1) rows = 1;
            if (rows > cdiv(gm, c->bm)) rows = cdiv(gm, c->bm);
            grid = rows * nt;
        }
        if (cdiv(tiles, grid) * ktiles > INT_MAX) grid = tiles; /* the kernel counts its slices in an int */
        snprintf(what + strlen(what), sizeof what - strlen(what), " persistent grid %lld", (long long)grid);
    }
    if (tma) {
        conv_tma_args t;
        memset(&t, 0, sizeof t);
        if (ft) CNN_TRY(conv_tma_encode_ft(cb, c, cv, x, w, ft, &t.a_map, &t.b_map));
        else CNN_TRY(conv_tma_encode(cb, c, cv, x, w, &t.a_map, &t.b_map));
        if (pr) CNN_TRY(conv_tma_encode(cb, c, pr->cv, pr->x, pr->w, &t.a2_map, &t.b2_map));
        if (conv_is(c, CNN_CUDA_CONV_TMA_STORE)) CNN_TRY(conv_ost_encode(cb, c, gm, gn, y, &t.y_map));
        t.a = a;
        CNN_TRY(cuda_launch_smem(cb, f, what, (unsigned)grid, 1, 1, threads, 1, smem, &t));
        cb->stats.tma_launches++;
        if (conv_is(c, CNN_CUDA_CONV_TMA_STORE)) cb->stats.ost_launches++;
        if (ft) cb->stats.dgrad_ft_launches++, cb->stats.dgrad_gate_launches += ft->gate;
    } else {
        CNN_TRY(cuda_launch_smem(cb, f, what, (unsigned)grid, 1, (unsigned)splits, threads, 1, smem, &a));
    }
    if (splits > 1) {
        size_t len = strlen(what);
        snprintf(what + len, sizeof what - len, " split-K epilogue of %d splits", splits);
        CNN_TRY(cuda_launch(cb, fe, what, cuda_grid_1d(cb, gm * gn / 2, 256), 1, 1, 256, 1, &a));
    }
    if (sums) {
        *sums = (cnn_conv_stats){.partial = a.stats, .chunks = a.stats_chunks, .y = y, .c = (int)gn,
                                 .chunk_rows = c->bm / (conv_is(c, CNN_CUDA_CONV_COOPERATIVE) ? 2 : 1),
                                 .tile_rows = c->bm};
        if (want) cb->stats.conv_stats_launches++;
        else cb->stats.dgrad_sum_launches++;
    }
    return CNN_OK;
}

static cnn_status fast_timed(const conv_operands *op, conv_cand c, void *y) {
    return conv_fast_launch(op->be, op->cv, op->ep, op->x, op->w, y, c.row, c.splits, NULL, op->po, NULL);
}

cnn_status conv_fast_fprop(cnn_backend *be, const cnn_conv2d *cv, const cnn_epilogue *ep, const void *x, const void *w,
                           void *y) {
    /* the candidates are timed as the forward's (its tuned choice, and no stats program compiled but the winner's) */
    cnn_epilogue plain;
    if (ep && ep->stats) plain = *ep, plain.stats = NULL;
    const conv_operands op = {.be = be, .cv = cv, .ep = ep && ep->stats ? &plain : ep, .x = x, .w = w};
    conv_cand c;
    CNN_TRY(conv_choose_fast(&op, fast_timed, &c));
    return conv_fast_launch(be, cv, ep, x, w, y, c.row, c.splits, NULL, NULL, NULL);
}

/* a strided dgrad's phase (conv2d_dgrad.c): written into dx in place (po), or into its block of the staging
 * workspace (po NULL: a plain forward program). Untimed under --tune fast, on the heuristic's tile: tuning each
 * phase's tile compiled a third of a cold start's programs, for the two ways the grouped launch mostly beats, and
 * the ways are still timed against each other (conv_choose_dgrad_phases; perf-log step 109) */
cnn_status conv_fast_fprop_phase(cnn_backend *be, const cnn_conv2d *cv, const cnn_epilogue *ep, const void *x,
                                 const void *w, void *y, const conv_phase_out *po) {
    CNN_ASSERT(conv_fast_eligible(cuda_impl(be), cv, ep, x, w, y));
    CNN_TRY(conv_check_problem(cv, PASS_FPROP));
    /* in place, the candidates are the phase programs themselves, timed into the tuner's scratch shaped as dx (the
     * residual, when accumulating, read from dx itself) */
    const conv_operands op = {.be = be, .cv = cv, .ep = ep, .x = x, .w = w, .po = po,
                              .untimed = cuda_impl(be)->tune == CNN_TUNE_FAST};
    conv_cand c;
    CNN_TRY(conv_choose_fast(&op, fast_timed, &c));
    return conv_fast_launch(be, cv, ep, x, w, y, c.row, c.splits, NULL, po, NULL);
}

cnn_status conv_fast_fprop_checked(cnn_backend *be, const cnn_conv2d *cv, const cnn_epilogue *ep, const void *x,
                              const void *w, void *y) {
    CNN_ASSERT(conv_fast_eligible(cuda_impl(be), cv, ep, x, w, y));
    CNN_TRY(conv_check_problem(cv, PASS_FPROP));
    return conv_fast_fprop(be, cv, ep, x, w, y);
}
