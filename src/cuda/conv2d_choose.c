/* conv2d_choose.c -- the choice policy of every convolution path, in one place: which candidates a problem has,
 * the heuristic's pick among them, the tuning keys, what the tuning levels time, and the winners' cache.
 *
 *   generic (conv2d.cu, every pass)   the heuristic only: tile efficiency x edge use x how well the CTAs fill
 *                                      the GPU (or the row a test forces)
 *   fast forward rows                  key "fprop ...":    --tune fast times the heuristic's pick (the best
 *                                      score over every row), the 4 best by the score of the rows that are neither
 *                                      persistent nor warp-specialised, the best small tile, the persistent twin of
 *                                      each wgmma one, and every warp-specialised row that keeps its consumers busy;
 *                                      --tune full every row, each with its heuristic split-K and, when that splits,
 *                                      also unsplit; --tune none (and inside a graph capture) the heuristic's pick
 *   pairs                              key "fprop_pair ...": the TMA rows and CONV_PAIR_UNFUSED (fusing must be
 *                                      timed faster to be used); --tune none the best TMA row by the score
 *   first layers (conv2d_first.cu)     key "first ...": every config of the problem's shape class; else the first
 *   Winograd (F32 3x3/1)               key "fprop_algo ...": Winograd against the direct kernels, each with its own
 *                                      tuned tile, where the batch has 1024 2x2 tiles or more; else a heuristic
 *   strided dgrad (conv2d_dgrad.c)     key "dgrad_phases ...": the phases through blocks and the interleave, the
 *                                      phases written in place (each phase on the heuristic's tile; --tune full:
 *                                      its own tuned tile, keys "fprop ..." and "dgrad_phase ...", step 109), and
 *                                      all phases in one grouped launch on each group row (step 86); else in place
 *                                      unless accumulating over more than one phase with taps (perf-log step 75)
 *   stride-1 dgrad (conv2d_dgrad.c)    key "dgrad_ft ...": the filter rewritten, then the forward's choice,
 *                                      against every TMA row's FILT_T program reading the forward's filter as it is
 *                                      (fast: those that keep their consumers busy) (step 88); --tune none the
 *                                      heuristic's pick, as a FILT_T program where it is a TMA row (step 114)
 *   wgrad on wgmma (conv2d_wgrad.c)    key "wgrad_wgmma ...": tile config x reduction splits, the 4 best by an
 *                                      estimate (fast) or all (full); else the estimate's best: its own file,
 *                                      conv2d_choose_wgrad.c
 * Tuning happens once per distinct key, outside graph capture: each candidate is launched once to warm up, then 3
 * times with the L2 flushed before each (tune.c, cuda_tune_time), the median wins and is remembered in process
 * and on disk. The policy launches nothing itself: the caller hands it the launch of a candidate (conv_launch_fn),
 * so no launcher is below it.
 */
#include "cuda/conv2d.h"

#include <stdio.h>
#include <string.h>

/* ---- generic rows ----------------------------------------------------------------------------------------- */

int cuda_conv_candidates(const cuda_be *cb, const cnn_conv2d *cv, int pass, int *out, int cap) {
    (void)cv;
    (void)pass;
    int n = 0;
    for (int v = 0; v < conv_n_generic() && n < cap; v++)
        if (conv_row_usable(cb, v)) out[n++] = v;
    return n;
}

int cuda_conv_pick(const cuda_be *cb, const cnn_conv2d *cv_in, int pass) {
    if (cb->conv_force_cfg >= 0 && cb->conv_force_cfg < conv_n_generic()) return cb->conv_force_cfg;
    const cnn_conv2d view = conv_choice_view(cv_in), *cv = &view;
    int64_t gm, gn, gk;
    conv_gemm_dims(cv, pass, &gm, &gn, &gk);
    int cand[CONV_MAX_ROWS];
    int nc = cuda_conv_candidates(cb, cv, pass, cand, CONV_MAX_ROWS);
    CNN_ASSERT(nc > 0);
    int best = cand[0];
    double best_score = -1;
    for (int i = 0; i < nc; i++) {
        const conv_row *c = &conv_rows[cand[i]];
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

/* ---- fast rows: heuristic ------------------------------------------------------------------------------------ */

/* Heuristic score of a row: tile speed x edge utilisation x how well the tiles fill the GPU. The sm_90 rows
 * (wgmma, warp-specialised: one CTA per SM) fill it in whole waves of tiles, a warp-specialised row's two
 * consumers taking two tiles per SM unless cooperative; the last wave's idle slots count against it (perf-log step
 * 114: fitted to every candidate's time on 190 shapes of four zoo models, this picks tiles 5 % slower than the
 * tuner's, where the score without them picked tiles 72 % slower). The other rows need one CTA per SM. */
static double fast_score(const cuda_be *cb, const conv_row *c, int64_t gm, int64_t gn) {
    const int64_t tiles = cdiv(gm, c->bm) * cdiv(gn, c->bn);
    const double util = (double)gm * gn / ((double)tiles * c->bm * c->bn);
    double par;
    if (conv_hopper(c)) {
        const bool pairs = conv_kind_of(c) == CNN_CUDA_CONV_WARPSPEC && !conv_is(c, CNN_CUDA_CONV_COOPERATIVE);
        const int64_t slots = (int64_t)cb->sm_count * (pairs ? 2 : 1);
        par = (double)tiles / (double)(cdiv(tiles, slots) * slots);
    } else {
        par = (double)tiles / (double)cb->sm_count;
        if (par > 1.0) par = 1.0;
    }
    return c->speed * util * par;
}

/* split-K when the output tiles cannot fill the GPU: about one CTA per SM, at least 4 slices a split */
static int fast_splits(const cuda_be *cb, const conv_row *c, int64_t gm, int64_t gn, int64_t gk) {
    if (conv_hopper(c)) return 1;
    int64_t ktiles = cdiv(gk, conv_row_ks(cb, c)), tiles = cdiv(gm, c->bm) * cdiv(gn, c->bn), splits = 1;
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

/* whether a row can run this forward problem at all (res: it adds a residual) */
static bool fast_fits(const cuda_be *cb, int v, const cnn_conv2d *cv, bool res, int64_t gn, int64_t gk) {
    const conv_row *c = &conv_rows[v];
    return conv_fast_usable(cb, v) && (!conv_is(c, CNN_CUDA_CONV_FILTER_RESIDENT) || conv_bres_fits(cb, c, gn, gk)) &&
           (!conv_is(c, CNN_CUDA_CONV_TMA) || conv_tma_fits(cv)) && (!conv_is(c, CNN_CUDA_CONV_RESIDUAL_SMEM) || res) &&
           (!conv_is(c, CNN_CUDA_CONV_TRANSPOSED) || !res) && (!conv_is(c, CNN_CUDA_CONV_TMA_STORE) || gn % 8 == 0);
}

/* enough output tiles for a warp-specialised row's consumers: two per SM (they alternate over a CTA's tiles: on
 * fewer, one of them idles), one for the cooperative rows (both on each tile) */
static bool ws_busy(const cuda_be *cb, const conv_row *c, int64_t gm, int64_t gn) {
    return cdiv(gm, c->bm) * cdiv(gn, c->bn) >= (conv_is(c, CNN_CUDA_CONV_COOPERATIVE) ? 1LL : 2LL) * cb->sm_count;
}

/* the heuristic's row for a forward problem: the best score over every row that runs it (the first in table order
 * of equals), or -1 where none does */
static int fast_pick(const cuda_be *cb, const cnn_conv2d *cv, bool res) {
    int64_t gm, gn, gk;
    conv_gemm_dims(cv, PASS_FPROP, &gm, &gn, &gk);
    int pick = -1;
    double best = -1.0;
    for (int v = conv_n_generic(); v < conv_n_rows(); v++) {
        const double s = fast_fits(cb, v, cv, res, gn, gk) ? fast_score(cb, &conv_rows[v], gm, gn) : -1.0;
        if (s > best + 1e-9) best = s, pick = v;
    }
    return pick;
}

/* out[*n] = c, unless a candidate of that row and split is there already */
static void add_cand(conv_cand *out, int *n, conv_cand c) {
    for (int i = 0; i < *n; i++)
        if (out[i].row == c.row && out[i].splits == c.splits) return;
    out[(*n)++] = c;
}

/* The candidates of a forward problem: out[0] the heuristic's choice (fast_pick), then what the tuning level times
 * besides (none: nothing). */
static int fast_candidates(const cuda_be *cb, const cnn_conv2d *cv, bool res, cnn_tune tune, conv_cand *out) {
    const int g = conv_n_generic(), nt = conv_n_rows() - g;
    const bool full = tune == CNN_TUNE_FULL, fast = tune == CNN_TUNE_FAST;
    int64_t gm, gn, gk;
    conv_gemm_dims(cv, PASS_FPROP, &gm, &gn, &gk);
    const int pick = fast_pick(cb, cv, res);
    if (pick < 0) return 0;
    int n = 0;
    add_cand(out, &n, (conv_cand){pick, fast_splits(cb, &conv_rows[pick], gm, gn, gk)});
    if (tune == CNN_TUNE_NONE) return n;
    int order[CONV_MAX_ROWS];
    double score[CONV_MAX_ROWS];
    /* rows this problem cannot run score -1; so do the persistent and warp-specialised rows except in a full
     * search (a fast one adds them below) */
    for (int i = 0; i < nt; i++) {
        const conv_row *c = &conv_rows[g + i];
        const bool later = conv_is(c, CNN_CUDA_CONV_PERSISTENT) || conv_is(c, CNN_CUDA_CONV_WARPSPEC);
        order[i] = i, score[i] = !fast_fits(cb, g + i, cv, res, gn, gk) || (later && !full) ? -1.0
                                                                                           : fast_score(cb, c, gm, gn);
    }
    for (int i = 1; i < nt; i++) /* insertion sort, best first */
        for (int j = i; j > 0 && score[order[j]] > score[order[j - 1]] + 1e-9; j--) {
            int t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
    int keep = full ? nt : (nt < 4 ? nt : 4);
    for (int i = 0; i < keep && score[order[i]] >= 0.0; i++) {
        const int v = g + order[i], sp = fast_splits(cb, &conv_rows[v], gm, gn, gk);
        add_cand(out, &n, (conv_cand){v, sp});
        if (full && sp > 1) add_cand(out, &n, (conv_cand){v, 1});
    }
    /* fast: also the best small tile (at most 64x128), which the score underrates where the layer is memory-bound
     * (short reductions): more CTAs per SM keep more bytes in flight */
    for (int i = keep; i < nt && fast && score[order[i]] >= 0.0; i++) {
        const conv_row *c = &conv_rows[g + order[i]];
        if (c->bm * c->bn > 64 * 128) continue;
        add_cand(out, &n, (conv_cand){g + order[i], fast_splits(cb, c, gm, gn, gk)});
        break;
    }
    /* fast: the persistent twin of each wgmma candidate (no compilation: the same program), where the output has
     * more tiles than the GPU has SMs */
    for (int i = 0, n0 = n; fast && i < n0; i++) {
        const int twin = conv_is(&conv_rows[out[i].row], CNN_CUDA_CONV_WGMMA) ? conv_persistent_twin(out[i].row) : -1;
        if (twin >= 0 && conv_fast_usable(cb, twin) &&
            cdiv(gm, conv_rows[twin].bm) * cdiv(gn, conv_rows[twin].bn) > cb->sm_count)
            add_cand(out, &n, (conv_cand){twin, 1});
    }
    /* fast: every warp-specialised row that runs the problem itself (elsewhere it would run its twin again) and
     * keeps its consumers busy */
    for (int v = g; fast && v < conv_n_rows(); v++)
        if (conv_is(&conv_rows[v], CNN_CUDA_CONV_WARPSPEC) && fast_fits(cb, v, cv, res, gn, gk) &&
            ws_busy(cb, &conv_rows[v], gm, gn))
            add_cand(out, &n, (conv_cand){v, 1});
    return n;
}

/* A pair's candidates: the TMA rows (the only ones with a second operand stream) but those staging a residual
 * (a pair adds none) or transposing the tile, those that fit the summed reduction; in a fast search only where
 * their consumers are kept busy (ws_busy), unless none is. Best first by the heuristic's score; when tuning, then
 * CONV_PAIR_UNFUSED. */
static int pair_candidates(const cuda_be *cb, const cnn_conv2d *cv, const conv_pair *pr, cnn_tune tune,
                           conv_cand *out) {
    int64_t gm, gn, gk0;
    conv_gemm_dims(cv, PASS_FPROP, &gm, &gn, &gk0);
    const int64_t gk = conv_launch_gk(cv, pr);
    int n = 0;
    for (int pass = 0; pass < 2 && n == 0; pass++)
        for (int v = conv_n_generic(); v < conv_n_rows(); v++) {
            const conv_row *c = &conv_rows[v];
            if (!conv_is(c, CNN_CUDA_CONV_WARPSPEC) || !conv_is(c, CNN_CUDA_CONV_TMA) ||
                conv_is(c, CNN_CUDA_CONV_RESIDUAL_SMEM) || conv_is(c, CNN_CUDA_CONV_TRANSPOSED) ||
                !conv_fast_usable(cb, v) || (conv_is(c, CNN_CUDA_CONV_FILTER_RESIDENT) && !conv_bres_fits(cb, c, gn, gk)))
                continue;
            if (pass == 0 && tune == CNN_TUNE_FAST && !ws_busy(cb, c, gm, gn)) continue;
            out[n++] = (conv_cand){v, 1};
        }
    for (int i = 1; i < n; i++) /* insertion sort by score, best first */
        for (int j = i; j > 0 && fast_score(cb, &conv_rows[out[j].row], gm, gn) >
                                     fast_score(cb, &conv_rows[out[j - 1].row], gm, gn) + 1e-9; j--) {
            conv_cand t = out[j];
            out[j] = out[j - 1], out[j - 1] = t;
        }
    if (tune != CNN_TUNE_NONE) out[n++] = (conv_cand){CONV_PAIR_UNFUSED, 1}; /* fusing must pay to be chosen */
    return n;
}

/* ---- timing --------------------------------------------------------------------------------------------------- */

cnn_status conv_timed_launch(void *ctx, int i, void *y) {
    const conv_timed *t = ctx;
    return t->launch(t->op, t->cand[i], y);
}

static const char *cand_name(int row) { return row == CONV_PAIR_UNFUSED ? "unfused" : conv_row_name(row); }

/* Time the nc candidates of a problem whose output is ybytes (their programs compiled side by side first), and
 * remember the winner under key. *out stays the heuristic's (cand[0]) where nothing could be timed. */
static cnn_status time_candidates(const conv_operands *op, const char *key, const conv_cand *cand, int nc,
                                  size_t ybytes, conv_launch_fn launch, conv_cand *out) {
    cnn_backend *be = op->be;
    cuda_be *cb = cuda_impl(be);
    double t0 = cnn_now();
    *out = cand[0];
    int ids[3 * CONV_MAX_ROWS + 1];
    int nids = 0;
    for (int i = 0; i < nc; i++) {
        if (cand[i].row == CONV_PAIR_UNFUSED) continue; /* its convolutions were tuned and compiled first */
        int cfg;
        const cuda_family *fam = conv_row_family(cb, cand[i].row, op->po ? PASS_DGRAD : PASS_FPROP, &cfg);
        ids[nids++] = cuda_program_id(fam, be->act_dtype, cfg);
    }
    cuda_prepare_programs(cb, ids, nids);
    conv_timed t = {launch, op, cand};
    int best;
    float ms, all[3 * CONV_MAX_ROWS + 1];
    cnn_status st = cuda_tune_time(cb, key, nc, ybytes, conv_timed_launch, &t, &best, &ms, all);
    if (st == CNN_OK && best >= 0) {
        *out = cand[best];
        cuda_tune_put(cb, key, out->row, out->splits, ms);
        cb->pub.n_tuned++;
        char times[(3 * CONV_MAX_ROWS + 1) * 48] = ""; /* every candidate's time, for -v: which rows came close */
        for (int i = 0, len = 0; i < nc && len < (int)sizeof times - 48; i++)
            len += snprintf(times + len, sizeof times - (size_t)len, "%s%s/%d %.4f", i ? ", " : "", cand_name(cand[i].row),
                            cand[i].splits, all[i]);
        cnn_log(2, "cnn: tuned %s: %s splits %d, %.4f ms (%d candidates, %.0f ms: %s)", key, cand_name(out->row),
                out->splits, ms, nc, (cnn_now() - t0) * 1e3, times);
    }
    cb->pub.tune_seconds += cnn_now() - t0;
    return st;
}

/* The n algorithms of one problem (algos[i].row: their numbers, which the caller's launch understands), timed
 * (conv_choose_winograd, conv_choose_dgrad_phases) into a scratch of ybytes, the winner's number remembered under
 * key; *pick stays as it was where nothing could be timed. Each candidate's first (warm-up) run tunes what it nests,
 * which counts as their tuning, not this one's. */
static cnn_status time_algos(const conv_operands *op, const char *key, size_t ybytes, conv_launch_fn launch,
                             const conv_cand *algos, int n, const char *(*name)(int algo), int *pick) {
    cuda_be *cb = cuda_impl(op->be);
    const double t0 = cnn_now(), inner0 = cb->pub.tune_seconds;
    conv_timed t = {launch, op, algos};
    int best;
    float ms;
    CNN_TRY(cuda_tune_time(cb, key, n, ybytes, conv_timed_launch, &t, &best, &ms, NULL));
    if (best >= 0) {
        *pick = algos[best].row;
        cuda_tune_put(cb, key, *pick, 1, ms);
        cb->pub.n_tuned++;
        cnn_log(2, "cnn: tuned %s: %s, %.4f ms", key, name(*pick), ms);
    }
    cb->pub.tune_seconds = inner0 + (cnn_now() - t0);
    return CNN_OK;
}

/* ---- fast forward rows ------------------------------------------------------------------------------------- */

/* a dgrad phase's candidates without the rows whose phase runs a twin (conv_phase_row: storing through TMA,
 * filter-resident), timed already or not chosen for a reason; the heuristic's choice stays first */
static int phase_rows_only(conv_cand *cand, int nc) {
    int n = 0;
    for (int i = 0; i < nc; i++)
        if (conv_phase_row(cand[i].row) == cand[i].row) cand[n++] = cand[i];
    if (n == 0) cand[n++] = (conv_cand){conv_phase_row(cand[0].row), cand[0].splits};
    return n;
}

cnn_status conv_choose_fast(const conv_operands *op, conv_launch_fn launch, conv_cand *out) {
    const cnn_conv2d view = conv_choice_view(op->cv), *cv = &view;
    const cnn_epilogue *ep = op->ep;
    cuda_be *cb = cuda_impl(op->be);
    const cnn_tune tune = conv_tune_level(cb, op->cv);
    const int g = conv_n_generic();
    int64_t gm, gn, gk;
    conv_gemm_dims(cv, PASS_FPROP, &gm, &gn, &gk);
    if (cb->conv_force_cfg >= g) {
        *out = (conv_cand){cb->conv_force_cfg, fast_splits(cb, &conv_rows[cb->conv_force_cfg], gm, gn, gk)};
        return CNN_OK;
    }
    const bool res = ep && ep->residual;
    const conv_phase_out *po = op->po;
    char key[240];
    /* a residual doubles the epilogue's traffic, which moves the best tile of a memory-bound conv: its own key; a
     * dgrad phase runs its own programs (OUT_PHASE), storing scattered pixels of dx: its own key too */
    int kl = snprintf(key, sizeof key, "%s %s n%d c%d h%d w%d k%d r%d s%d st%dx%d pad%dx%d%s", po ? "dgrad_phase" : "fprop",
                      conv_dtype_str(cb), cv->n, cv->c, cv->h, cv->w, cv->k, cv->r, cv->s, cv->stride_h, cv->stride_w,
                      cv->pad_h, cv->pad_w, res ? " res" : "");
    if (po)
        snprintf(key + kl, sizeof key - kl, " of %dx%d by %dx%d", po->h, po->w, po->sh, po->sw);
    conv_cand cand[3 * CONV_MAX_ROWS];
    if (tune != CNN_TUNE_NONE && cb->conv_force_splitk < 0) {
        int v, sp;
        if (cuda_tune_get(cb, key, &v, &sp) && v >= g && v < conv_n_rows() && conv_fast_usable(cb, v) && sp >= 1 &&
            (sp == 1 || !conv_hopper(&conv_rows[v]))) {
            *out = (conv_cand){v, sp};
            return CNN_OK;
        }
        if (!cb->capturing) {
            int nc = fast_candidates(cb, cv, res, tune, cand);
            CNN_ASSERT(nc > 0);
            if (po) nc = phase_rows_only(cand, nc);
            *out = cand[0];
            if (nc == 1 || op->untimed) return CNN_OK;
            size_t ybytes = (size_t)cv->n * (po ? (size_t)po->h * po->w : (size_t)cv->p * cv->q) * cv->k * act_size(cb);
            return time_candidates(op, key, cand, nc, ybytes, launch, out);
        }
    }
    CNN_ASSERT(fast_candidates(cb, cv, res, tune, cand) > 0); /* best first: the heuristic's choice */
    *out = cand[0];
    return CNN_OK;
}

/* ---- pairs ------------------------------------------------------------------------------------------------- */

cnn_status conv_choose_pair(const conv_operands *op, conv_launch_fn launch, void *y, int *row) {
    const cnn_conv2d view = conv_choice_view(op->cv), *cv = &view;
    const conv_pair *pr = op->pr;
    cuda_be *cb = cuda_impl(op->be);
    const cnn_tune tune = conv_tune_level(cb, op->cv);
    if (cb->conv_force_cfg >= conv_n_generic() && conv_is(&conv_rows[cb->conv_force_cfg], CNN_CUDA_CONV_TMA)) {
        *row = cb->conv_force_cfg;
        return CNN_OK;
    }
    const cnn_conv2d *c2 = pr->cv;
    char key[240];
    snprintf(key, sizeof key, "fprop_pair %s n%d c%d h%d w%d k%d r%d s%d st%dx%d pad%dx%d + c%d h%d w%d r%d s%d st%dx%d "
             "pad%dx%d", conv_dtype_str(cb), cv->n, cv->c, cv->h, cv->w, cv->k, cv->r, cv->s, cv->stride_h, cv->stride_w,
             cv->pad_h, cv->pad_w, c2->c, c2->h, c2->w, c2->r, c2->s, c2->stride_h, c2->stride_w, c2->pad_h, c2->pad_w);
    conv_cand cand[CONV_MAX_ROWS + 1];
    if (tune != CNN_TUNE_NONE && cb->conv_force_cfg < 0) {
        int v, splits;
        if (cuda_tune_get(cb, key, &v, &splits) && splits == 1 &&
            (v == CONV_PAIR_UNFUSED || (v >= conv_n_generic() && v < conv_n_rows() &&
                                        conv_is(&conv_rows[v], CNN_CUDA_CONV_TMA) && conv_fast_usable(cb, v)))) {
            *row = v;
            return CNN_OK;
        }
        if (!cb->capturing) { /* the unfused candidate's convolutions tune (and compile) first, outside the timing */
            CNN_TRY(launch(op, (conv_cand){CONV_PAIR_UNFUSED, 1}, y));
            int nc = pair_candidates(cb, cv, pr, tune, cand);
            CNN_ASSERT(nc > 0);
            conv_cand best = cand[0];
            if (nc > 1) {
                size_t ybytes = (size_t)cv->n * cv->p * cv->q * cv->k * act_size(cb);
                CNN_TRY(time_candidates(op, key, cand, nc, ybytes, launch, &best));
            }
            *row = best.row;
            return CNN_OK;
        }
    }
    CNN_ASSERT(pair_candidates(cb, cv, pr, tune, cand) > 0);
    *row = cand[0].row;
    return CNN_OK;
}

/* ---- first layers ------------------------------------------------------------------------------------------ */

cnn_status conv_choose_first(const conv_operands *op, conv_launch_fn launch, int *cfg) {
    const cnn_conv2d view = conv_choice_view(op->cv), *cv = &view;
    const cnn_pool2d *pl = op->pl;
    cuda_be *cb = cuda_impl(op->be);
    conv_cand cand[CONV_MAX_ROWS];
    int n = 0;
    for (int i = 0; i < first_n_configs(); i++)
        if (first_config_runs(cb, i, cv, pl != NULL)) cand[n++] = (conv_cand){i, 1};
    CNN_ASSERT(n > 0); /* cuda_first_eligible */
    if (cb->first_force_cfg >= 0 && first_config_runs(cb, cb->first_force_cfg, cv, pl != NULL)) {
        *cfg = cb->first_force_cfg; /* a test's choice, for the problems of its class */
        return CNN_OK;
    }
    *cfg = cand[0].row;
    if (conv_tune_level(cb, op->cv) == CNN_TUNE_NONE || n == 1) return CNN_OK;
    char key[200];
    snprintf(key, sizeof key, "first %s n%d c%d h%d w%d k%d r%d s%d st%dx%d pad%dx%d%s", cuda_dtype_str(cb->pub.act_dtype),
             cv->n, cv->c, cv->h, cv->w, cv->k, cv->r, cv->s, cv->stride_h, cv->stride_w, cv->pad_h, cv->pad_w,
             pl ? " maxpool3s2p1" : "");
    int got, splits;
    if (cuda_tune_get(cb, key, &got, &splits) && got >= 0 && got < first_n_configs() &&
        first_config_runs(cb, got, cv, pl != NULL)) {
        *cfg = got;
        return CNN_OK;
    }
    if (cb->capturing) return CNN_OK; /* no timing inside a graph capture: the heuristic's */
    double t0 = cnn_now();
    int64_t out_p = pl ? pl->p : cv->p, out_q = pl ? pl->q : cv->q;
    size_t ybytes = (size_t)((int64_t)cv->n * out_p * out_q * cv->k * 2);
    int ids[CONV_MAX_ROWS]; /* the candidates' programs, compiled side by side before any is timed */
    for (int i = 0; i < n; i++) ids[i] = cuda_program_id(&cuda_family_conv2d_fprop_first, cb->pub.act_dtype, cand[i].row);
    cuda_prepare_programs(cb, ids, n);
    conv_timed t = {launch, op, cand};
    int best;
    float ms;
    cnn_status st = cuda_tune_time(cb, key, n, ybytes, conv_timed_launch, &t, &best, &ms, NULL);
    if (st == CNN_OK && best >= 0) {
        *cfg = cand[best].row;
        cuda_tune_put(cb, key, *cfg, 1, ms);
        cb->pub.n_tuned++;
        cnn_log(2, "cnn: tuned %s: %s, %.4f ms (%d candidates, %.0f ms)", key, first_configs[*cfg].name, ms, n,
                (cnn_now() - t0) * 1e3);
    }
    cb->pub.tune_seconds += cnn_now() - t0;
    return st;
}

/* ---- Winograd or direct (F32 3x3/1) ------------------------------------------------------------------------
 * Where: F32 activations without TF32, 3x3, stride 1, on the fast path (C % 4 == 0, K % 8 == 0, aligned tensors,
 * no generic row forced), V and M of one image under WINO_WS_CAP. With tuning on, both are timed (each with its
 * own tuned tile) for layers with C, K >= 32, an output of 4x4 or more and 1024 2x2 tiles or more in the batch
 * (below that the transforms' waste and the 16 small launches cannot pay: every such layer timed lost, perf-log
 * step 38); without, the heuristic: outputs 8x8 to 28x28, C, K >= 64 and at least 1024 tiles (perf-log step 23).
 * cnn_cuda_conv_force_winograd (tests) forces either way. */

static bool winograd_applies(const cuda_be *cb, const cnn_conv2d *cv) {
    if (cb->pub.act_dtype != CNN_DTYPE_F32 || cb->allow_tf32 || cb->winograd == 0) return false;
    if (cv->r != 3 || cv->s != 3 || cv->stride_h != 1 || cv->stride_w != 1) return false;
    /* one image's V and M must fit the cap, or no slice of the batch would */
    const size_t tiles1 = (size_t)((cv->p + 1) / 2) * ((cv->q + 1) / 2);
    return 16 * tiles1 * (size_t)(cv->c + cv->k) * 4 + 16 * (size_t)cv->k * cv->c * 4 <= WINO_WS_CAP;
}

static bool winograd_heuristic(const cnn_conv2d *cv) {
    const long long tiles = (long long)cv->n * ((cv->p + 1) / 2) * ((cv->q + 1) / 2);
    return cv->p >= 8 && cv->q >= 8 && cv->p <= 28 && cv->q <= 28 && cv->c >= 64 && cv->k >= 64 && tiles >= 1024;
}

static bool winograd_worth_timing(const cnn_conv2d *cv) {
    const long long tiles = (long long)cv->n * ((cv->p + 1) / 2) * ((cv->q + 1) / 2);
    return cv->c >= 32 && cv->k >= 32 && cv->p >= 4 && cv->q >= 4 && tiles >= 1024;
}

static const char *winograd_name(int algo) { return algo ? "winograd" : "direct"; }

cnn_status conv_choose_winograd(const conv_operands *op, conv_launch_fn launch, bool *use) {
    const cnn_conv2d view = conv_choice_view(op->cv), *cv = &view;
    const cnn_epilogue *ep = op->ep;
    cuda_be *cb = cuda_impl(op->be);
    *use = false;
    if (!winograd_applies(cb, cv)) return CNN_OK;
    if (cb->winograd == 1) return *use = true, CNN_OK;
    *use = winograd_heuristic(cv);
    /* a forced tile config or split (tests) is there to run the direct kernels: no timing against them */
    if (conv_tune_level(cb, op->cv) == CNN_TUNE_NONE || cb->conv_force_cfg >= 0 || cb->conv_force_splitk >= 0 ||
        !winograd_worth_timing(cv))
        return CNN_OK;
    char key[200];
    snprintf(key, sizeof key, "fprop_algo f32 n%d c%d h%d w%d k%d pad%dx%d%s", cv->n, cv->c, cv->h, cv->w, cv->k,
             cv->pad_h, cv->pad_w, ep && ep->residual ? " res" : "");
    int cfg, splits;
    if (cuda_tune_get(cb, key, &cfg, &splits) && (cfg == 0 || cfg == 1)) return *use = cfg == 1, CNN_OK;
    if (cb->capturing) return CNN_OK;
    static const conv_cand algos[2] = {{0, 1}, {1, 1}};
    int pick = *use;
    CNN_TRY(time_algos(op, key, (size_t)cv->n * cv->p * cv->q * cv->k * 4, launch, algos, 2, winograd_name, &pick));
    *use = pick == 1;
    return CNN_OK;
}

/* ---- strided dgrad: the phases in place or through blocks --------------------------------------------------- */

static const char *dgrad_way_name(int way) {
    return way == DGRAD_BLOCKS ? "blocks" : way == DGRAD_IN_PLACE ? "in place" : conv_row_name(conv_group_row(way - DGRAD_GROUPED));
}

cnn_status conv_choose_dgrad_phases(const conv_operands *op, int heuristic, bool groupable, conv_launch_fn launch,
                                    int *way) {
    cuda_be *cb = cuda_impl(op->be);
    const cnn_conv2d view = conv_choice_view(op->cv), *cv = &view;
    const bool acc = op->ep && op->ep->residual;
    /* the candidates: blocks, in place, and (groupable) every group row this backend runs */
    conv_cand algos[DGRAD_GROUPED + CONV_MAX_ROWS];
    int n = 0;
    algos[n++] = (conv_cand){DGRAD_BLOCKS, 1}, algos[n++] = (conv_cand){DGRAD_IN_PLACE, 1};
    for (int i = 0; groupable && i < conv_n_group_rows(); i++)
        if (conv_fast_usable(cb, conv_group_row(i))) algos[n++] = (conv_cand){DGRAD_GROUPED + i, 1};
    *way = heuristic;
    if (cb->dgrad_way >= 0) { /* forced (tests): a way the problem has, else the heuristic's */
        for (int i = 0; i < n; i++)
            if (algos[i].row == cb->dgrad_way) *way = cb->dgrad_way;
        return CNN_OK;
    }
    /* a forced tile config or split (tests) is there to run those: no timing */
    if (conv_tune_level(cb, op->cv) == CNN_TUNE_NONE || cb->conv_force_cfg >= 0 || cb->conv_force_splitk >= 0)
        return CNN_OK;
    char key[200];
    snprintf(key, sizeof key, "dgrad_phases %s n%d c%d h%d w%d k%d r%d s%d st%dx%d pad%dx%d%s", conv_dtype_str(cb), cv->n,
             cv->c, cv->h, cv->w, cv->k, cv->r, cv->s, cv->stride_h, cv->stride_w, cv->pad_h, cv->pad_w, acc ? " acc" : "");
    int v, splits;
    if (cuda_tune_get(cb, key, &v, &splits))
        for (int i = 0; i < n; i++)
            if (algos[i].row == v) return *way = v, CNN_OK;
    if (cb->capturing) return CNN_OK;
    return time_algos(op, key, (size_t)cv->n * cv->h * cv->w * cv->c * act_size(cb), launch, algos, n, dgrad_way_name,
                      way);
}

/* ---- stride-1 dgrad: the filter read transposed, or rewritten --------------------------------------------------- */

static const char *dgrad_ft_name(int row) { return row == CONV_DGRAD_REWRITE ? "rewrite" : conv_row_name(row); }

cnn_status conv_choose_dgrad_ft(const conv_operands *op, conv_launch_fn launch, int *row) {
    cuda_be *cb = cuda_impl(op->be);
    const cnn_conv2d view = conv_choice_view(op->cv), *cv = &view;
    const bool res = op->ep && op->ep->residual;
    int64_t gm, gn, gk;
    conv_gemm_dims(cv, PASS_FPROP, &gm, &gn, &gk);
    *row = CONV_DGRAD_REWRITE;
    if (!conv_tma_fits(cv) || cuda_conv_skipped(cb, "dgrad_ft")) return CNN_OK; /* CNN_CONV_SKIP=dgrad_ft: the A/B */
    if (cb->conv_force_cfg >= 0) { /* forced (tests): the row's FILT_T program where it has one (or its twin's, which
                                     * conv_fast_launch runs where the row cannot: a TMA row too, as the maps fit) */
        const int v = cb->conv_force_cfg;
        if (v >= conv_n_generic() && conv_ft_program(v) >= 0) *row = v;
        return CNN_OK;
    }
    const cnn_tune tune = conv_tune_level(cb, op->cv);
    if (cb->conv_force_splitk >= 0) return CNN_OK;
    if (tune == CNN_TUNE_NONE) { /* the heuristic's row, as a FILT_T program where it has one (the TMA rows, which
                                  * the tuner picked over the rewrite for 51 of 57 shapes: perf-log step 114) */
        const int pick = fast_pick(cb, cv, res);
        if (pick >= 0 && conv_ft_program(pick) >= 0) *row = pick;
        return CNN_OK;
    }
    char key[200];
    snprintf(key, sizeof key, "dgrad_ft %s n%d c%d h%d w%d k%d r%d s%d pad%dx%d%s", conv_dtype_str(cb), cv->n, cv->c,
             cv->h, cv->w, cv->k, cv->r, cv->s, cv->pad_h, cv->pad_w,
             op->ft && op->ft->gate ? " relu" : res ? " acc" : "");
    /* the candidates: the rewrite (first: the heuristic's), every TMA row that fits and keeps its consumers busy
     * (every one that fits in a full search) */
    conv_cand algos[CONV_MAX_ROWS + 1];
    int n = 0, ids[CONV_MAX_ROWS], nids = 0;
    algos[n++] = (conv_cand){CONV_DGRAD_REWRITE, 1};
    for (int v = conv_n_generic(); v < conv_n_rows(); v++)
        if (conv_ft_program(v) >= 0 && fast_fits(cb, v, cv, res, gn, gk) &&
            (tune == CNN_TUNE_FULL || ws_busy(cb, &conv_rows[v], gm, gn))) {
            algos[n++] = (conv_cand){v, 1};
            ids[nids++] = cuda_program_id(conv_ft_family(op->ft), op->be->act_dtype, conv_ft_program(v));
        }
    int v, splits;
    if (cuda_tune_get(cb, key, &v, &splits))
        for (int i = 0; i < n; i++)
            if (algos[i].row == v) return *row = v, CNN_OK;
    if (cb->capturing || n == 1) return CNN_OK;
    cuda_prepare_programs(cb, ids, nids); /* compiled side by side before the timing */
    return time_algos(op, key, (size_t)cv->n * cv->p * cv->q * cv->k * act_size(cb), launch, algos, n, dgrad_ft_name,
                      row);
}
