/* checkpoint.c — a checkpoint's metadata and tensor list, checked before anything of it is used; the writer
 * behind the training steps (checkpoint.h). */
#include "checkpoint.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A decimal integer of at most 18 digits (no sign, no spaces, no leading '+') within [0, max]. */
static bool parse_count(const char *s, int64_t max, int64_t *out) {
    int64_t v = 0;
    int digits = 0;
    for (; *s; s++, digits++) {
        if (*s < '0' || *s > '9' || digits == 18) return false;
        v = v * 10 + (*s - '0');
    }
    if (digits == 0 || v > max) return false;
    *out = v;
    return true;
}

cnn_status cnn_ckpt_meta_parse(const cnn_st_file *f, const char *path, cnn_ckpt_meta *out) {
    memset(out, 0, sizeof *out);
    const char *fmt = cnn_st_meta_get(f, "format"), *step = cnn_st_meta_get(f, "step");
    const char *opts = cnn_st_meta_get(f, "options"), *scale = cnn_st_meta_get(f, "loss_scale");
    if (!fmt || strcmp(fmt, CNN_CKPT_FORMAT) != 0)
        return cnn_fail(CNN_E_FORMAT, "%s: not a cnn checkpoint (metadata \"format\" is not %s)", path, CNN_CKPT_FORMAT);
    if (!step || !parse_count(step, CNN_MAX_STEPS, &out->step))
        return cnn_fail(CNN_E_FORMAT, "%s: not a cnn checkpoint: metadata \"step\" is not a count in [0, %lld]", path,
                        (long long)CNN_MAX_STEPS);
    if (!opts) return cnn_fail(CNN_E_FORMAT, "%s: not a cnn checkpoint: no metadata \"options\"", path);
    out->options = opts;
    /* "<scale> <good steps>": the scale as %.9g writes it, one space, the count */
    const char *sp = scale ? strchr(scale, ' ') : NULL;
    char num[64];
    double ls = 0;
    char *end = NULL;
    if (sp && (size_t)(sp - scale) < sizeof num && sp > scale) {
        memcpy(num, scale, (size_t)(sp - scale));
        num[sp - scale] = 0;
        ls = strtod(num, &end);
    }
    if (!sp || !end || *end || !(ls > 0) || !isfinite(ls) || ls > 18446744073709551616.0 ||
        !parse_count(sp + 1, 1000000000, &out->good_steps))
        return cnn_fail(CNN_E_FORMAT, "%s: not a cnn checkpoint: metadata \"loss_scale\" is not \"<scale> <steps>\" "
                        "with a scale in (0, 2^64] and steps in [0, 10^9]", path);
    out->loss_scale = (float)ls;
    return CNN_OK;
}

const char *cnn_ckpt_opt_name(int n_opt, int k) {
    static const char *const names[2][2] = {{"optimizer.momentum_buffer", NULL},
                                            {"optimizer.exp_avg", "optimizer.exp_avg_sq"}};
    CNN_ASSERT(n_opt >= 1 && n_opt <= 2 && k >= 0 && k < n_opt);
    return names[n_opt - 1][k];
}

cnn_status cnn_ckpt_check_tensors(const cnn_st_file *f, const char *path, const cnn_net *net, int n_opt) {
    for (int e = 0; e < f->n_entries; e++) {
        const char *name = f->entries[e].name;
        if (cnn_net_find_param(net, name)) continue;
        bool known = false;
        for (int k = 0; k < n_opt && !known; k++) known = strcmp(name, cnn_ckpt_opt_name(n_opt, k)) == 0;
        if (!known)
            return cnn_fail(CNN_E_MISMATCH, "%s: unexpected tensor \"%s\" (neither a parameter of %s nor optimizer state "
                            "of this run)", path, name, net->arch);
    }
    for (int k = 0; k < n_opt; k++) {
        const cnn_st_entry *e = cnn_st_find(f, cnn_ckpt_opt_name(n_opt, k));
        if (!e || e->dtype != CNN_DTYPE_F32 || e->ndim != 1 || e->shape[0] != net->n_trainable)
            return cnn_fail(CNN_E_MISMATCH, "%s: optimizer state \"%s\" missing or not F32 (%lld,)", path,
                            cnn_ckpt_opt_name(n_opt, k), (long long)net->n_trainable);
    }
    return CNN_OK;
}

/* ---- writing ------------------------------------------------------------------------------------------------ */

cnn_status cnn_ckpt_items(const cnn_state *s, int n_opt, cnn_st_item *items, float **conv) {
    const cnn_net *net = s->net;
    CNN_TRY(cnn_state_items(s, items, conv));
    for (int k = 0; k < n_opt; k++) {
        cnn_st_item *it = &items[net->n_params + k];
        memset(it, 0, sizeof *it);
        it->name = cnn_ckpt_opt_name(n_opt, k);
        it->dtype = CNN_DTYPE_F32;
        it->ndim = 1;
        it->shape[0] = net->n_trainable;
        it->data = cnn_ckpt_opt_data(s, k);
    }
    return CNN_OK;
}

cnn_status cnn_ckpt_write(const char *path, const cnn_state *s, int n_opt, const cnn_st_kv *meta, int n_meta) {
    cnn_st_item *items = calloc((size_t)(s->net->n_params + n_opt + 1), sizeof *items);
    float *conv = NULL;
    cnn_status st = items ? cnn_ckpt_items(s, n_opt, items, &conv)
                          : cnn_fail(CNN_E_OOM, "out of host memory writing %s", path);
    if (st == CNN_OK) st = cnn_st_write(path, items, s->net->n_params + n_opt, meta, n_meta);
    free(conv);
    free(items);
    return st;
}

/* ---- the writer behind the steps ------------------------------------------------------------------------------ */

static void writer_release(cnn_ckpt_writer *w) {
    free(w->path);
    for (int i = 0; i < w->n_meta; i++) free(w->meta_values[i]);
    w->path = NULL, w->state = NULL, w->n_meta = 0;
}

static void *writer_main(void *arg) {
    cnn_ckpt_writer *w = arg;
    w->st = cnn_ckpt_write(w->path, w->state, w->n_opt, w->meta, w->n_meta);
    if (w->st != CNN_OK) snprintf(w->err, sizeof w->err, "%s", cnn_error_msg());
    return NULL;
}

cnn_status cnn_ckpt_wait(cnn_ckpt_writer *w) {
    if (!w->busy) return CNN_OK;
    pthread_join(w->thread, NULL);
    w->busy = false;
    writer_release(w);
    return w->st == CNN_OK ? CNN_OK : cnn_fail(w->st, "%s", w->err);
}

cnn_status cnn_ckpt_write_behind(cnn_ckpt_writer *w, const char *path, const cnn_state *s, int n_opt,
                                 const cnn_st_kv *meta, int n_meta) {
    cnn_status st = cnn_ckpt_wait(w);
    CNN_ASSERT(n_meta <= CNN_CKPT_META);
    w->path = strdup(path), w->state = s, w->n_opt = n_opt;
    bool ok = w->path != NULL;
    for (int i = 0; i < n_meta; i++) {
        w->meta_values[i] = strdup(meta[i].value);
        w->meta[i] = (cnn_st_kv){meta[i].key, w->meta_values[i]};
        w->n_meta = i + 1;
        ok = ok && w->meta_values[i];
    }
    if (st == CNN_OK && !ok) st = cnn_fail(CNN_E_OOM, "out of host memory writing %s", path);
    if (st == CNN_OK && pthread_create(&w->thread, NULL, writer_main, w) == 0) {
        w->busy = true;
        return CNN_OK;
    }
    if (st == CNN_OK) st = cnn_ckpt_write(path, s, n_opt, meta, n_meta); /* no thread: written here */
    writer_release(w);
    return st;
}
