/* fold.c — the eval plan's BatchNorm fold (model.c runs it before an eval forward whose fold is stale): each folded
 * BN's scale and shift, with its conv's bias, into the BN arena; each pair step's filters times their BN scales, in
 * act_dtype, and the two shifts summed (plan.h's pair layout). Host arithmetic in double over downloaded values.
 */
#include "cnn/net.h"
#include "model.h"

#include <math.h>

/* BN node bn folded to a per-channel scale and shift (host arrays of C), with the conv's bias where the node
 * before it, `conv`, has one; tmp: 5*C floats. */
static cnn_status bn_fold_host(cnn_model *m, int bn_node, int conv, float *tmp, float *scale, float *shift) {
    const cnn_net *net = m->net;
    const cnn_node *bn = &net->nodes[bn_node];
    int C = bn->c;
    float *g = tmp, *b = tmp + C, *rm = tmp + 2 * C, *rv = tmp + 3 * C, *cb = tmp + 4 * C;
    CNN_TRY(m->be->download(m->be, g, pf(m, bn->param[0]), (size_t)C * 4));
    CNN_TRY(m->be->download(m->be, b, pf(m, bn->param[1]), (size_t)C * 4));
    CNN_TRY(m->be->download(m->be, rm, pf(m, bn->param[2]), (size_t)C * 4));
    CNN_TRY(m->be->download(m->be, rv, pf(m, bn->param[3]), (size_t)C * 4));
    bool bias = conv >= 0 && net->nodes[conv].op == CNN_OP_CONV && net->nodes[conv].param[1] >= 0;
    if (bias) CNN_TRY(m->be->download(m->be, cb, pf(m, net->nodes[conv].param[1]), (size_t)C * 4));
    for (int c = 0; c < C; c++) scale[c] = (float)((double)g[c] / sqrt((double)rv[c] + 1e-5));
    for (int c = 0; c < C; c++)
        shift[c] = (float)((double)b[c] + ((bias ? (double)cb[c] : 0.0) - (double)rm[c]) * (double)scale[c]);
    return CNN_OK;
}

/* count float32 host values into act_dtype device memory at dst (through the staging buffer when act_dtype is
 * narrower: uploads and conversions run in stream order, so the staging buffer is reused chunk by chunk) */
static cnn_status upload_act(cnn_model *m, void *dst, const float *src, int64_t count) {
    if (!m->staging) return m->be->upload(m->be, dst, src, (size_t)count * 4);
    for (int64_t off = 0; off < count;) {
        int64_t c = count - off < (int64_t)m->staging_elems ? count - off : (int64_t)m->staging_elems;
        CNN_TRY(m->be->upload(m->be, m->staging, src + off, (size_t)c * 4));
        CNN_TRY(m->be->to_act(m->be, c, m->staging, (char *)dst + (size_t)off * m->esz));
        off += c;
    }
    return CNN_OK;
}

/* A pair step's operands: each conv's float32 filter times its BN's scale per output channel, in act_dtype
 * (the conv then adds scale * conv exactly as the unfused epilogue would, up to rounding), and the two BN
 * shifts summed. */
static cnn_status fold_pair(cnn_model *m, const cnn_step *sp) {
    const cnn_net *net = m->net;
    const cnn_pair_layout l = cnn_pair_layout_of(m->net, m->esz, sp);
    const int64_t K = l.k, wmax = l.w1 > l.w2 ? l.w1 : l.w2;
    float *h = cnn_model_host_scratch(m, (size_t)(wmax + 8 * K));
    if (!h) return CNN_E_OOM;
    float *wt = h, *scale = h + wmax, *shift = scale + K, *sum = shift + K, *tmp = sum + K;
    const int convs[2] = {sp->pair, sp->node}, bns[2] = {sp->pair_bn, sp->bn};
    const int64_t counts[2] = {l.w1, l.w2};
    const size_t offs[2] = {0, l.o2};
    char *base = (char *)m->pairw + sp->pair_off;
    for (int part = 0; part < 2; part++) {
        const cnn_node *cv = &net->nodes[convs[part]];
        CNN_ASSERT(cv->op == CNN_OP_CONV && net->nodes[bns[part]].c == K && cv->c == K);
        CNN_TRY(bn_fold_host(m, bns[part], convs[part], tmp, scale, shift));
        CNN_TRY(m->be->download(m->be, wt, m->params + net->params[cv->param[0]].offset, (size_t)counts[part] * 4));
        int64_t g = counts[part] / K; /* R*S*C per output channel (KRSC) */
        for (int64_t k = 0; k < K; k++)
            for (int64_t i = 0; i < g; i++) wt[k * g + i] *= scale[k];
        CNN_TRY(upload_act(m, base + offs[part], wt, counts[part]));
        for (int64_t k = 0; k < K; k++) sum[k] = part ? sum[k] + shift[k] : shift[k];
    }
    return m->be->upload(m->be, base + l.os, sum, (size_t)K * 4);
}

cnn_status cnn_model_refresh_fold(cnn_model *m) {
    const cnn_net *net = m->net;
    for (int s = 0; s < m->plan.n_steps; s++) {
        const cnn_step *st = &m->plan.steps[s];
        if (st->pair >= 0) {
            CNN_TRY(fold_pair(m, st));
            continue;
        }
        if (st->bn < 0) continue;
        int C = net->nodes[st->bn].c;
        float *h = cnn_model_host_scratch(m, (size_t)7 * C);
        if (!h) return CNN_E_OOM;
        CNN_TRY(bn_fold_host(m, st->bn, st->node, h + 2 * C, h, h + C));
        CNN_TRY(m->be->upload(m->be, m->bn + m->bn_off[st->bn] + 2 * C, h, (size_t)2 * C * 4)); /* scale, shift */
    }
    m->fold_valid = true;
    return CNN_OK;
}
