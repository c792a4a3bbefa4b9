/* conv2d_choose_wgrad.c -- the choice policy of the wgrad on wgmma (conv2d_wgrad.c): its tile configs and
 * reduction splits, by an estimate, tuned or not, and --deterministic's slices' splits (choice_problem). The rest
 * of the convolution policy is conv2d_choose.c's, whose header lists every path.
 */
#include "cuda/conv2d.h"

#include <stdio.h>
#include <string.h>

/* ---- wgrad on wgmma: tile configs and reduction splits --------------------------------------------------------
 * Candidates: every im2col config whose shared memory fits, each with the splits of 1, 2 and 4 whole rounds of CTAs
 * (duplicates dropped), ordered by an estimate of rounds x the tile's multiply-adds at its share of an SM's rate
 * plus the partials' traffic; then, for a 3x3 stride-1 conv, the halo configs by an estimate that also counts
 * their copies (what they save). fast times the 4 best im2col candidates and the 2 best halo ones, full all of
 * them (key "wgrad_wgmma ..."); --tune none takes the first (wgrad_candidates). CNN_CONV_SKIP=wgrad_halo leaves
 * the halo configs out (the A/B). */
#define WGRAD_WS_CAP ((int64_t)256 << 20) /* bytes of split partials at most */

/* Reduction splits of a config for `rounds` rounds of CTAs on the SMs (one CTA per SM fits), cv being one of
 * `groups` slices that share the GPU (--deterministic's, each with these splits; 1 without): as many as fill them
 * without starting a partial round, at least 8 slices per split (2 for the halo's larger slices), the partials
 * within WGRAD_WS_CAP; never an empty split. */
static int wgrad_splits(const cuda_be *cb, const wgrad_config *c, const cnn_conv2d *cv, int rounds, int groups) {
    const int64_t tiles = wgrad_tiles(c, cv), slices = wgrad_slices(c, cv);
    const int64_t out_bytes = (int64_t)cv->k * cv->r * cv->s * cv->c * 4 * groups;
    int64_t splits = (int64_t)rounds * cb->sm_count / (tiles * groups);
    if (splits > slices / (c->qb ? 2 : 8)) splits = slices / (c->qb ? 2 : 8);
    if (splits > WGRAD_WS_CAP / out_bytes) splits = WGRAD_WS_CAP / out_bytes;
    if (splits > 65535) splits = 65535;
    if (splits < 1) splits = 1;
    return (int)cdiv(slices, cdiv(slices, splits));
}

/* Estimated seconds of a (config, splits) for cv, one of `groups` slices as wgrad_splits: rounds of one CTA per SM,
 * each CTA's multiply-adds at the tile's share of an SM's dense rate, plus the partials written and added; a halo
 * config's slice at the slower of its products and its copies from L2, or with a ring of two stages their sum (the
 * copies no longer hidden: those configs ran 1.4-1.7x slower than the four-stage ones over the same pixels, perf-log
 * step 121, where the estimate had ranked 16x8/s2 first for --deterministic's slices of 32x32 images). Slices
 * whose reduction is not whole slices of an im2col config run a launch each (conv2d_wgrad.c), their rounds one
 * after another. For the heuristic's order only. */
static double wgrad_estimate(const cuda_be *cb, const wgrad_config *c, const cnn_conv2d *cv, int splits, int groups) {
    const int64_t tiles = wgrad_tiles(c, cv), slices = wgrad_slices(c, cv), per = cdiv(slices, splits);
    const double sm_flops = 7.0e12 * c->eff; /* an H100 SM's dense bf16 rate */
    const bool apart = groups > 1 && !c->qb && (int64_t)cv->n * cv->p * cv->q % WGRAD_BK != 0;
    const double rounds = apart ? (double)groups * cdiv(tiles * splits, cb->sm_count)
                                : (double)cdiv(tiles * splits * groups, cb->sm_count);
    double slice;
    if (c->qb) {
        const double l2_per_sm = 40e9; /* bytes/s an SM draws from L2, about */
        const double mma = (double)c->bm * c->bn * c->qb * c->hb * 2.0 / sm_flops;
        const double copy = ((double)c->qb * c->hb + 3.0 * (c->hb + 2) * c->qb) * 128.0 / l2_per_sm;
        slice = c->stages > 2 ? (mma > copy ? mma : copy) : mma + copy;
    } else
        slice = (double)c->bm * c->bn * WGRAD_BK * 2.0 / sm_flops;
    const double partial =
        splits > 1 ? 3.0 * splits * groups * (double)cv->k * cv->r * cv->s * cv->c * 4.0 / 2.5e12 : 0.0;
    return rounds * (double)per * slice + partial + 2e-6 * (double)per / 1000.0;
}

#define WGRAD_ROUNDS 3 /* split counts tried: for 1, 2 and 4 rounds of CTAs */

/* one family of candidates (halo or not) into out, best first by the estimate; returns how many */
static int wgrad_candidates_of(const cuda_be *cb, const cnn_conv2d *cv, int groups, bool halo, conv_cand *out) {
    int n = 0;
    double est[WGRAD_ROUNDS * WGRAD_MAX_CONFIGS];
    for (int i = 0; i < wgrad_n_configs(); i++) {
        if (!wgrad_config_usable(cb, i) || (wgrad_configs[i].qb != 0) != halo || !wgrad_config_takes(i, cv)) continue;
        for (int r = 0; r < WGRAD_ROUNDS; r++) {
            const int sp = wgrad_splits(cb, &wgrad_configs[i], cv, 1 << r, groups);
            if (r > 0 && sp == out[n - 1].splits) continue;
            out[n] = (conv_cand){i, sp}, est[n] = wgrad_estimate(cb, &wgrad_configs[i], cv, sp, groups), n++;
        }
    }
    for (int i = 1; i < n; i++) /* insertion sort, fastest first */
        for (int j = i; j > 0 && est[j] < est[j - 1]; j--) {
            conv_cand t = out[j];
            double e = est[j];
            out[j] = out[j - 1], est[j] = est[j - 1], out[j - 1] = t, est[j - 1] = e;
        }
    return n;
}

/* Candidates: the im2col ones best first, then the halo ones; fast keeps 4 and 2 of them, full all. Over 64 input
 * channels with at most 128 output channels (one or two tiles of an im2col config, many slices) the halo ones go
 * first, so that --tune none and --deterministic take them too: they won every such shape of the zoo when timed
 * (perf-log step 89). */
static int wgrad_candidates(const cuda_be *cb, const cnn_conv2d *cv, int groups, cnn_tune tune, conv_cand *out) {
    const bool full = tune == CNN_TUNE_FULL;
    conv_cand im[WGRAD_ROUNDS * WGRAD_MAX_CONFIGS], halo[WGRAD_ROUNDS * WGRAD_MAX_CONFIGS];
    int ni = wgrad_candidates_of(cb, cv, groups, false, im), nh = 0;
    if (!full && ni > 4) ni = 4;
    if (!cuda_conv_skipped(cb, "wgrad_halo")) nh = wgrad_candidates_of(cb, cv, groups, true, halo); /* the A/B */
    if (!full && nh > 2) nh = 2;
    const bool halo_first = cv->c == 64 && cv->k <= 128;
    memcpy(out + (halo_first ? nh : 0), im, (size_t)ni * sizeof *im);
    memcpy(out + (halo_first ? 0 : ni), halo, (size_t)nh * sizeof *halo);
    return ni + nh;
}

/* The problem a wgrad's choice is made for: conv_choice_view's, or with choose_n and a larger choice_n (a batch of
 * slices, --deterministic) one slice of choose_n images among the *groups = choice_n / choose_n slices of the global
 * batch, which share the GPU and each take the splits chosen (the same choice on every rank; a slice's splits cannot
 * cross into the next slice, so the global batch's own choice, shared out, left SMs idle or started a second round:
 * perf-log step 121) */
static cnn_conv2d choice_problem(const cnn_conv2d *cv, int *groups) {
    cnn_conv2d v = conv_choice_view(cv);
    *groups = conv_choice_slices(cv);
    if (*groups > 1) v.n = cv->choose_n;
    return v;
}

/* (config, splits) of a wgrad on wgmma (op: x in x, dy in w) for choice_problem's problem: forced (tests: a forced
 * split count stays as forced), tuned once per shape and cached, or the estimate's best (--tune none,
 * --deterministic, inside a graph capture before the shape was tuned). With choose_n the splits are each slice's. */
cnn_status conv_choose_wgrad(const conv_operands *op, conv_launch_fn launch, conv_cand *out) {
    int groups;
    const cnn_conv2d view = choice_problem(op->cv, &groups), *cv = &view;
    cuda_be *cb = cuda_impl(op->be);
    const cnn_tune tune = conv_tune_level(cb, op->cv);
    if (cb->wgrad_force_cfg >= 0) {
        const int cfg = cb->wgrad_force_cfg;
        if (!wgrad_config_usable(cb, cfg))
            return cnn_fail(CNN_E_UNSUPPORTED, "wgrad config %s needs more shared memory than this GPU has",
                            wgrad_config_name(cfg));
        *out = (conv_cand){cfg, cb->wgrad_force_splits > 0 ? cb->wgrad_force_splits
                                                           : wgrad_splits(cb, &wgrad_configs[cfg], cv, 2, groups)};
        return CNN_OK;
    }
    conv_cand cand[2 * WGRAD_ROUNDS * WGRAD_MAX_CONFIGS];
    const int nc = wgrad_candidates(cb, cv, groups, tune, cand);
    if (nc == 0) return cnn_fail(CNN_E_UNSUPPORTED, "no wgrad tile fits this GPU's shared memory");
    *out = cand[0];
    if (tune == CNN_TUNE_NONE || nc == 1) return CNN_OK;
    CNN_ASSERT(groups == 1); /* choose_n's choices are untimed (conv_tune_level) */
    char key[200];
    snprintf(key, sizeof key, "wgrad_wgmma %s n%d c%d h%d w%d k%d r%d s%d st%dx%d pad%dx%d",
             cuda_dtype_str(cb->pub.act_dtype), cv->n, cv->c, cv->h, cv->w, cv->k, cv->r, cv->s, cv->stride_h,
             cv->stride_w, cv->pad_h, cv->pad_w);
    int row, splits;
    if (cuda_tune_get(cb, key, &row, &splits) && row >= 0 && row < wgrad_n_configs() && splits >= 1 &&
        wgrad_config_usable(cb, row) && wgrad_config_takes(row, cv) &&
        !(wgrad_configs[row].qb && cuda_conv_skipped(cb, "wgrad_halo"))) {
        *out = (conv_cand){row, splits};
        return CNN_OK;
    }
    if (cb->capturing) return CNN_OK;
    const double t0 = cnn_now();
    int ids[2 * WGRAD_ROUNDS * WGRAD_MAX_CONFIGS];
    for (int i = 0; i < nc; i++) ids[i] = cuda_program_id(&cuda_family_conv2d_wgrad_wgmma, cb->pub.act_dtype, cand[i].row);
    cuda_prepare_programs(cb, ids, nc);
    conv_timed t = {launch, op, cand};
    int best;
    float ms;
    cnn_status st = cuda_tune_time(cb, key, nc, (size_t)cv->k * cv->r * cv->s * cv->c * sizeof(float), conv_timed_launch,
                                   &t, &best, &ms, NULL);
    if (st == CNN_OK && best >= 0) {
        *out = cand[best];
        cuda_tune_put(cb, key, out->row, out->splits, ms);
        cb->pub.n_tuned++;
        cnn_log(2, "cnn: tuned %s: %s splits %d, %.4f ms (%d candidates)", key, wgrad_config_name(out->row), out->splits,
                ms, nc);
    }
    cb->pub.tune_seconds += cnn_now() - t0;
    return st;
}
