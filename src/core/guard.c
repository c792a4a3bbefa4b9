/* guard.c — non-finite checks of host arrays and the diagnosis of a bad training step (guard.h). */
#include "guard.h"
#include "checkpoint.h"
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t cnn_first_nonfinite(const float *x, int64_t count) {
    for (int64_t i = 0; i < count; i++)
        if (!isfinite(x[i])) return i;
    return -1;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The first value of a tensor called name that no model may hold: NaN/Inf anywhere, a negative running
 * variance. Returns its index or -1; *why says which. */
static int64_t first_bad_value(const char *name, const float *v, int64_t count, const char **why) {
    int64_t i = cnn_first_nonfinite(v, count);
    *why = "a non-finite value";
    if (i >= 0) return i;
    if (ends_with(name, ".running_var"))
        for (int64_t k = 0; k < count; k++)
            if (v[k] < 0.0f) {
                *why = "a negative variance";
                return k;
            }
    return -1;
}

cnn_status cnn_param_values_check(const cnn_param *p, const float *v, const char *path) {
    if (p->kind == CNN_PARAM_COUNTER) return CNN_OK;
    const char *why;
    int64_t i = first_bad_value(p->name, v, p->count, &why);
    if (i < 0) return CNN_OK;
    return cnn_fail(CNN_E_NONFINITE, "%s: tensor \"%s\" holds %s (%g at index %lld); --allow-nonfinite loads it anyway",
                    path, p->name, why, (double)v[i], (long long)i);
}

cnn_status cnn_items_check(const cnn_st_item *items, int n, const char *path) {
    for (int k = 0; k < n; k++) {
        const cnn_st_item *it = &items[k];
        if (it->dtype != CNN_DTYPE_F32 || !it->data) continue;
        int64_t count = 1;
        for (int d = 0; d < it->ndim; d++) count *= it->shape[d];
        const char *why;
        int64_t i = first_bad_value(it->name, it->data, count, &why);
        if (i >= 0)
            return cnn_fail(CNN_E_NONFINITE, "%s not written: tensor \"%s\" holds %s (%g at index %lld)", path, it->name,
                            why, (double)((const float *)it->data)[i], (long long)i);
    }
    return CNN_OK;
}

cnn_status cnn_state_check(cnn_model *m, float *const *opt, int n_opt, const cnn_state *s, const char *path) {
    const cnn_net *net = s->net;
    cnn_backend *be = cnn_model_backend(m);
    const float *arrays[4] = {cnn_model_params(m), cnn_model_buffers(m)};
    int64_t counts[4] = {net->n_trainable, net->n_buffer}, bad = 0;
    for (int k = 0; k < n_opt; k++) arrays[2 + k] = opt[k], counts[2 + k] = net->n_trainable;
    for (int a = 0; a < 2 + n_opt; a++) {
        int64_t n = 0;
        if (counts[a]) CNN_TRY(be->count_nonfinite(be, counts[a], arrays[a], &n));
        bad += n;
    }
    for (int i = 0; i < net->n_params && !bad; i++) {
        const cnn_param *p = &net->params[i];
        const float *v = s->arena + net->n_trainable + p->offset;
        if (p->kind == CNN_PARAM_BUFFER && ends_with(p->name, ".running_var"))
            for (int64_t k = 0; k < p->count && !bad; k++) bad = v[k] < 0.0f;
    }
    if (!bad) return CNN_OK;
    cnn_st_item *items = calloc((size_t)(net->n_params + n_opt), sizeof *items);
    float *conv = NULL;
    cnn_status st = items ? cnn_ckpt_items(s, n_opt, items, &conv)
                          : cnn_fail(CNN_E_OOM, "out of host memory checking %s", path);
    if (st == CNN_OK) st = cnn_items_check(items, net->n_params + n_opt, path);
    if (st == CNN_OK) /* the device counted what the host's scan of the same values did not find */
        st = cnn_fail(CNN_E_NONFINITE, "%s not written: the device counted %lld non-finite values in the state", path,
                      (long long)bad);
    free(conv);
    free(items);
    return st;
}

/* ---- diagnosis ------------------------------------------------------------------------------------------ */

typedef struct diag {
    char *where;
    size_t cap;
    bool found;
} diag;

/* count act_dtype elements of device memory, as float32 on the host: the index of the first non-finite one */
static cnn_status device_first_bad(cnn_model *m, const void *x, int64_t count, int64_t *bad) {
    cnn_backend *be = cnn_model_backend(m);
    size_t esz = cnn_dtype_size(be->act_dtype);
    void *raw = cnn_malloc((size_t)count * esz, "a layer's output (diagnosis)");
    float *f = be->act_dtype == CNN_DTYPE_F32 ? raw : cnn_malloc((size_t)count * sizeof(float), "its float32 copy");
    cnn_status st = raw && f ? CNN_OK : CNN_E_OOM;
    if (st == CNN_OK) st = be->download(be, raw, x, (size_t)count * esz);
    if (st == CNN_OK && f != raw) cnn_convert_to_f32(f, raw, be->act_dtype, (size_t)count);
    if (st == CNN_OK) *bad = cnn_first_nonfinite(f, count);
    if (f != raw) free(f);
    free(raw);
    return st;
}

/* The first BatchNorm layer, in node order, whose running statistics hold a non-finite value. */
static cnn_status check_running_stats(cnn_model *m, diag *d) {
    const cnn_net *net = cnn_model_net(m);
    for (int node = 0; node < net->n_nodes && !d->found; node++) {
        const cnn_node *nd = &net->nodes[node];
        if (nd->op != CNN_OP_BN) continue;
        for (int k = 2; k <= 3; k++) { /* running_mean, running_var */
            const cnn_param *p = &net->params[nd->param[k]];
            float *v = cnn_malloc((size_t)p->count * sizeof *v, "running statistics (diagnosis)");
            if (!v) return CNN_E_OOM;
            cnn_status st = cnn_model_get_param(m, nd->param[k], v);
            int64_t i = st == CNN_OK ? cnn_first_nonfinite(v, p->count) : -1;
            free(v);
            CNN_TRY(st);
            if (i >= 0) {
                snprintf(d->where, d->cap, "layer %s (bn) %s, channel %lld", nd->name,
                         k == 2 ? "running_mean" : "running_var", (long long)i);
                d->found = true;
                break;
            }
        }
    }
    return CNN_OK;
}

/* Called per executed step of the train plan with the step's output (a fused step reports its last node). */
static cnn_status check_node(void *ctx, cnn_model *m, int node, const void *value, int64_t count) {
    diag *d = ctx;
    if (d->found) return CNN_OK;
    const cnn_net *net = cnn_model_net(m);
    const cnn_node *nd = &net->nodes[node];
    int64_t bad;
    CNN_TRY(device_first_bad(m, value, count, &bad));
    if (bad >= 0) {
        snprintf(d->where, d->cap, "layer %s (%s) output, element %lld", nd->name, cnn_op_name(nd->op), (long long)bad);
        d->found = true;
        return CNN_OK;
    }
    return CNN_OK;
}

cnn_status cnn_guard_diagnose(cnn_model *m, int n, uint64_t dropout_seed, char *where, size_t cap) {
    const cnn_net *net = cnn_model_net(m);
    diag d = {.where = where, .cap = cap};
    int64_t bad;
    CNN_TRY(device_first_bad(m, cnn_model_input_buffer(m), (int64_t)n * net->in_c * net->in_h * net->in_w, &bad));
    if (bad >= 0) {
        snprintf(where, cap, "the input batch, element %lld", (long long)bad);
        return CNN_OK;
    }
    cnn_model_set_node_check(m, check_node, &d);
    cnn_status st = cnn_model_forward(m, n, CNN_MODE_TRAIN, dropout_seed);
    cnn_model_set_node_check(m, NULL, NULL);
    CNN_TRY(st);
    /* every output finite: the statistics this forward folded into the running averages may still overflow */
    if (!d.found) CNN_TRY(check_running_stats(m, &d));
    if (!d.found) snprintf(where, cap, "no layer: the forward is finite (the loss or the labels)");
    return CNN_OK;
}
