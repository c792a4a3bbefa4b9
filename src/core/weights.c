/* weights.c — a model's parameters: torchvision's initialisers (seeded Philox, so a run is a function of its
 * seed), single-parameter access in torchvision's layout (OIHW filters; KRSC on the device), the act_dtype weight
 * copies, and strict safetensors load/save under torchvision's names. */
#include "cnn/net.h"
#include "cnn/safetensors.h"
#include "guard.h"
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- initialisation ----------------------------------------------------------------------------------- */

static double normal01(uint64_t seed, int pi, int64_t i) {
    uint32_t r[4];
    cnn_philox(seed, 0x696e6974ULL + ((uint64_t)pi << 32), (uint64_t)i, r);
    double u1 = ((double)r[0] + 1.0) / 4294967296.0, u2 = (double)r[1] / 4294967296.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static double uniform01(uint64_t seed, int pi, int64_t i) {
    uint32_t r[4];
    cnn_philox(seed, 0x696e6974ULL + ((uint64_t)pi << 32), (uint64_t)i, r);
    return (double)r[0] / 4294967296.0;
}

/* Fill a parameter (torchvision layout) according to its init rule. Each value depends on (seed, parameter,
 * index) alone, so the loop runs in parallel and gives the same values on any number of threads. */
static void init_values(const cnn_param *p, int pi, uint64_t seed, float *out) {
#pragma omp parallel for schedule(static) if (p->count > 65536)
    for (int64_t i = 0; i < p->count; i++) {
        double v = 0;
        switch (p->init) {
        case CNN_INIT_ZEROS: v = 0; break;
        case CNN_INIT_ONES: v = 1; break;
        case CNN_INIT_KAIMING_FAN_OUT: v = normal01(seed, pi, i) * sqrt(2.0 / (double)p->fan_out); break;
        case CNN_INIT_UNIFORM_FAN_IN: {
            double bound = 1.0 / sqrt((double)p->fan_in);
            v = (2.0 * uniform01(seed, pi, i) - 1.0) * bound;
            break;
        }
        case CNN_INIT_NORMAL_001: v = normal01(seed, pi, i) * 0.01; break;
        }
        out[i] = (float)v;
    }
}

/* OIHW <-> KRSC: the element of (k, c, r, s) in either layout */
static void oihw_krsc(const cnn_param *p, const float *src, float *dst, bool to_krsc) {
    int64_t K = p->shape[0], C = p->shape[1], R = p->shape[2], S = p->shape[3];
    for (int64_t k = 0; k < K; k++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t r = 0; r < R; r++)
                for (int64_t s = 0; s < S; s++) {
                    const int64_t oihw = ((k * C + c) * R + r) * S + s, krsc = ((k * R + r) * S + s) * C + c;
                    if (to_krsc) dst[krsc] = src[oihw];
                    else dst[oihw] = src[krsc];
                }
}

/* count floats at device src into out, in torchvision's layout */
static cnn_status download_param(cnn_model *m, const cnn_param *p, const float *src, float *out) {
    if (!p->krsc) return m->be->download(m->be, out, src, (size_t)p->count * sizeof(float));
    float *tmp = cnn_model_host_scratch(m, (size_t)p->count);
    if (!tmp) return CNN_E_OOM;
    CNN_TRY(m->be->download(m->be, tmp, src, (size_t)p->count * sizeof(float)));
    oihw_krsc(p, tmp, out, false);
    return CNN_OK;
}

/* a weight's working copy in the activation dtype, rounded here as the device's to_act rounds (to nearest even):
 * a model's creation then launches no conversion, whose program a cold start would wait for (perf-log step 109) */
static cnn_status upload_act_copy(cnn_model *m, const cnn_param *p, const float *src) {
    const cnn_dtype dt = m->be->act_dtype;
    CNN_ASSERT(m->esz == 2 && (dt == CNN_DTYPE_BF16 || dt == CNN_DTYPE_F16));
    uint16_t *h = malloc((size_t)p->count * sizeof *h);
    if (!h) return cnn_fail(CNN_E_OOM, "out of host memory for the working copy of %s", p->name);
    for (int64_t i = 0; i < p->count; i++) h[i] = dt == CNN_DTYPE_BF16 ? cnn_f32_to_bf16(src[i]) : cnn_f32_to_f16(src[i]);
    cnn_status st = m->be->upload(m->be, (char *)m->wact + (size_t)p->offset * m->esz, h, (size_t)p->count * m->esz);
    free(h);
    return st;
}

cnn_status cnn_model_set_param(cnn_model *m, int index, const float *in) {
    const cnn_param *p = &m->net->params[index];
    if (p->kind == CNN_PARAM_COUNTER) {
        m->counters[index] = (int64_t)in[0];
        return CNN_OK;
    }
    float *dst = p->kind == CNN_PARAM_TRAINABLE ? m->params : m->buffers;
    const float *src = in;
    if (p->krsc) {
        float *tmp = cnn_model_host_scratch(m, (size_t)p->count);
        if (!tmp) return CNN_E_OOM;
        oihw_krsc(p, in, tmp, true);
        src = tmp;
    }
    m->fold_valid = false;
    CNN_TRY(m->be->upload(m->be, dst + p->offset, src, (size_t)p->count * sizeof(float)));
    return m->wact && p->act_copy ? upload_act_copy(m, p, src) : CNN_OK;
}

cnn_status cnn_model_get_param(cnn_model *m, int index, float *out) {
    const cnn_param *p = &m->net->params[index];
    if (p->kind == CNN_PARAM_COUNTER) {
        out[0] = (float)m->counters[index];
        return CNN_OK;
    }
    return download_param(m, p, (p->kind == CNN_PARAM_TRAINABLE ? m->params : m->buffers) + p->offset, out);
}

cnn_status cnn_model_get_grad(cnn_model *m, int index, float *out) {
    const cnn_param *p = &m->net->params[index];
    if (p->kind != CNN_PARAM_TRAINABLE || !m->grads)
        return cnn_fail(CNN_E_INVALID, "%s has no gradient", p->name);
    return download_param(m, p, m->grads + p->offset, out);
}

int64_t cnn_model_num_batches_tracked(const cnn_model *m) {
    for (int i = 0; i < m->net->n_params; i++)
        if (m->net->params[i].kind == CNN_PARAM_COUNTER) return m->counters[i];
    return 0;
}

void cnn_model_set_num_batches_tracked(cnn_model *m, int64_t v) {
    for (int i = 0; i < m->net->n_params; i++)
        if (m->net->params[i].kind == CNN_PARAM_COUNTER) m->counters[i] = v;
}

cnn_status cnn_model_params_changed(cnn_model *m) {
    m->fold_valid = false;
    if (!m->wact) return CNN_OK;
    for (int i = 0; i < m->net->n_params; i++) {
        const cnn_param *p = &m->net->params[i];
        if (!p->act_copy) continue;
        CNN_TRY(m->be->to_act(m->be, p->count, m->params + p->offset, (char *)m->wact + (size_t)p->offset * m->esz));
    }
    return CNN_OK;
}
void *cnn_model_act_weights(cnn_model *m) { return m->wact; }
void cnn_model_params_updated(cnn_model *m) { m->fold_valid = false; }

cnn_status cnn_model_init_weights(cnn_model *m, uint64_t seed) {
    const cnn_net *net = m->net;
    int64_t maxc = 1;
    for (int i = 0; i < net->n_params; i++)
        if (net->params[i].count > maxc) maxc = net->params[i].count;
    float *vals = malloc((size_t)maxc * sizeof *vals);
    if (!vals) return cnn_fail(CNN_E_OOM, "out of host memory initialising weights");
    cnn_status st = CNN_OK;
    for (int i = 0; i < net->n_params && st == CNN_OK; i++) {
        init_values(&net->params[i], i, seed, vals);
        st = cnn_model_set_param(m, i, vals);
    }
    free(vals);
    return st; /* cnn_model_set_param wrote the working copies */
}
/* ---- weights I/O ---------------------------------------------------------------------------------------- */

static bool is_float_dtype(cnn_dtype t) {
    return t == CNN_DTYPE_F32 || t == CNN_DTYPE_F16 || t == CNN_DTYPE_BF16;
}

cnn_status cnn_model_load_st(cnn_model *m, const cnn_st_file *f, const char *path, const char *ignore_prefix) {
    const cnn_net *net = m->net;
    char b1[128], b2[128];
    /* every tensor in the file must be a parameter (or carry ignore_prefix) */
    for (int e = 0; e < f->n_entries; e++) {
        const char *name = f->entries[e].name;
        if (ignore_prefix && strncmp(name, ignore_prefix, strlen(ignore_prefix)) == 0) continue;
        if (!cnn_net_find_param(net, name))
            return cnn_fail(CNN_E_MISMATCH, "%s: unexpected tensor \"%s\" (not a parameter of %s)", path, name,
                            net->arch);
    }
    for (int i = 0; i < net->n_params; i++) {
        const cnn_param *p = &net->params[i];
        const cnn_st_entry *e = cnn_st_find(f, p->name);
        if (!e) return cnn_fail(CNN_E_MISMATCH, "%s: missing tensor \"%s\" for %s", path, p->name, net->arch);
        bool same = e->ndim == p->ndim;
        for (int d = 0; same && d < p->ndim; d++) same = e->shape[d] == p->shape[d];
        if (!same)
            return cnn_fail(CNN_E_MISMATCH, "%s: tensor \"%s\" has shape %s, %s expects %s", path, p->name,
                            cnn_shape_str(e->shape, e->ndim, b1, sizeof b1), net->arch,
                            cnn_shape_str(p->shape, p->ndim, b2, sizeof b2));
        if (p->kind == CNN_PARAM_COUNTER) {
            if (e->dtype != CNN_DTYPE_I64)
                return cnn_fail(CNN_E_MISMATCH, "%s: tensor \"%s\" has dtype %s, expected I64", path, p->name,
                                cnn_dtype_name(e->dtype));
            int64_t v;
            memcpy(&v, cnn_st_tensor_data(f, e), 8);
            m->counters[i] = v;
            continue;
        }
        if (!is_float_dtype(e->dtype))
            return cnn_fail(CNN_E_MISMATCH, "%s: tensor \"%s\" has dtype %s, expected F32, F16 or BF16", path,
                            p->name, cnn_dtype_name(e->dtype));
        float *vals = malloc((size_t)p->count * sizeof *vals);
        if (!vals) return cnn_fail(CNN_E_OOM, "out of host memory loading %s", p->name);
        cnn_convert_to_f32(vals, cnn_st_tensor_data(f, e), e->dtype, (size_t)p->count);
        cnn_status st = m->allow_nonfinite ? CNN_OK : cnn_param_values_check(p, vals, path);
        if (st == CNN_OK) st = cnn_model_set_param(m, i, vals);
        free(vals);
        CNN_TRY(st);
    }
    return CNN_OK; /* cnn_model_set_param wrote the working copies */
}

cnn_status cnn_model_load(cnn_model *m, const char *path) {
    cnn_st_file f;
    CNN_TRY(cnn_st_open(path, &f));
    cnn_status st = cnn_model_load_st(m, &f, path, NULL);
    cnn_st_free(&f);
    return st;
}

cnn_status cnn_state_alloc(cnn_model *m, int64_t extra, bool pinned, cnn_state *out) {
    const cnn_net *net = m->net;
    memset(out, 0, sizeof *out);
    out->net = net;
    const size_t bytes = (size_t)(net->n_trainable + net->n_buffer + extra + 1) * sizeof(float);
    cnn_status st = CNN_OK;
    if (pinned && m->be->host_alloc) {
        st = m->be->host_alloc(m->be, bytes, "checkpoint state", (void **)&out->arena);
        out->host_be = st == CNN_OK ? m->be : NULL;
    } else {
        out->arena = malloc(bytes);
    }
    out->counters = malloc((size_t)(net->n_params + 1) * sizeof(int64_t));
    if (st == CNN_OK && (!out->arena || !out->counters))
        st = cnn_fail(CNN_E_OOM, "out of host memory (%zu bytes) for the model's state", bytes);
    if (st != CNN_OK) cnn_state_free(out);
    return st;
}

cnn_status cnn_model_state_take(cnn_model *m, cnn_state *s) {
    const cnn_net *net = m->net;
    CNN_ASSERT(s->net == net && s->arena && s->counters);
    memcpy(s->counters, m->counters, (size_t)net->n_params * sizeof(int64_t));
    CNN_TRY(m->be->download(m->be, s->arena, m->params, (size_t)net->n_trainable * sizeof(float)));
    if (net->n_buffer)
        CNN_TRY(m->be->download(m->be, s->arena + net->n_trainable, m->buffers, (size_t)net->n_buffer * sizeof(float)));
    return CNN_OK;
}

void cnn_state_free(cnn_state *s) {
    if (s->host_be && s->arena) s->host_be->host_free(s->host_be, s->arena);
    else free(s->arena);
    free(s->counters);
    s->arena = NULL, s->counters = NULL, s->host_be = NULL;
}

cnn_status cnn_state_items(const cnn_state *s, cnn_st_item *items, float **conv_out) {
    const cnn_net *net = s->net;
    int64_t n_conv = 0;
    for (int i = 0; i < net->n_params; i++) n_conv += net->params[i].krsc ? net->params[i].count : 0;
    float *conv = malloc((size_t)(n_conv + 1) * sizeof *conv);
    if (!conv) return cnn_fail(CNN_E_OOM, "out of host memory (%lld floats) converting filters", (long long)n_conv);
    int64_t off = 0;
    for (int i = 0; i < net->n_params; i++) {
        const cnn_param *p = &net->params[i];
        cnn_st_item *it = &items[i];
        memset(it, 0, sizeof *it);
        it->name = p->name;
        it->ndim = p->ndim;
        for (int d = 0; d < p->ndim; d++) it->shape[d] = p->shape[d];
        it->dtype = p->kind == CNN_PARAM_COUNTER ? CNN_DTYPE_I64 : CNN_DTYPE_F32;
        const float *raw = s->arena + (p->kind == CNN_PARAM_TRAINABLE ? 0 : net->n_trainable) + p->offset;
        if (p->kind == CNN_PARAM_COUNTER) {
            it->data = &s->counters[i];
        } else if (p->krsc) {
            oihw_krsc(p, raw, conv + off, false);
            it->data = conv + off;
            off += p->count;
        } else {
            it->data = raw;
        }
    }
    *conv_out = conv;
    return CNN_OK;
}

cnn_status cnn_state_save(const cnn_state *s, const char *path) {
    const cnn_net *net = s->net;
    cnn_st_item *items = calloc((size_t)(unsigned)net->n_params + 1, sizeof *items);
    if (!items) return cnn_fail(CNN_E_OOM, "out of host memory saving weights");
    float *conv = NULL;
    cnn_status st = cnn_state_items(s, items, &conv);
    if (st == CNN_OK) st = cnn_items_check(items, net->n_params, path); /* never a model full of NaN */
    if (st == CNN_OK) st = cnn_st_write(path, items, net->n_params, NULL, 0);
    free(conv);
    free(items);
    return st;
}

cnn_status cnn_model_save(cnn_model *m, const char *path) {
    cnn_state s;
    cnn_status st = cnn_state_alloc(m, 0, false, &s);
    if (st == CNN_OK) st = cnn_model_state_take(m, &s);
    if (st == CNN_OK) st = cnn_state_save(&s, path);
    cnn_state_free(&s);
    return st;
}
