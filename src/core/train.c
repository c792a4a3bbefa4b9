/* train.c — the training loop: batches, forward/backward, the non-finite guard, optimizer, schedules,
 * evaluation (evaluate.c's), metrics, progress and checkpoints (atomic; exact resume; never one holding a NaN). */
#include "cnn/train.h"
#include "cnn/io.h"
#include "cnn/safetensors.h"
#include "checkpoint.h"
#include "guard.h"
#include "shards.h"
#include "model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

cnn_train_opts cnn_train_opts_default(void) {
    cnn_train_opts o = {
        .batch = 64, .epochs = 1, .steps = 0, .optim = CNN_OPTIM_SGD, .lr = 0.05f, .momentum = 0.9f,
        .weight_decay = 5e-4f, .nesterov = false, .beta1 = 0.9f, .beta2 = 0.999f, .adam_eps = 1e-8f,
        .sched = CNN_SCHED_COSINE, .warmup = 0, .step_size = 30, .gamma = 0.1f, .label_smoothing = 0.0f,
        .augment = true, .shuffle = true, .seed = 0, .out_dir = "runs/last", .checkpoint_every = 0,
        .stop_after = 0, .resume = false, .resume_path = NULL, .log_every = 0, .eval_size = 0, .progress = true,
        .on_nonfinite = CNN_NONFINITE_STOP, .max_skipped = 10, .interrupt = NULL,
    };
    return o;
}

float cnn_lr_at(const cnn_train_opts *o, int64_t s, int64_t total, int64_t steps_per_epoch) {
    if (o->warmup > 0 && s <= o->warmup) return o->lr * (float)s / (float)o->warmup;
    switch (o->sched) {
    case CNN_SCHED_CONSTANT: return o->lr;
    case CNN_SCHED_STEP: {
        int64_t every = (int64_t)o->step_size * steps_per_epoch;
        int64_t k = every > 0 ? (s - 1) / every : 0;
        return o->lr * powf(o->gamma, (float)k);
    }
    case CNN_SCHED_COSINE: {
        int64_t span = total - o->warmup;
        if (span <= 1) return o->lr;
        double t = (double)(s - 1 - o->warmup) / (double)(span - 1);
        return (float)(0.5 * o->lr * (1.0 + cos(3.14159265358979323846 * t)));
    }
    }
    return o->lr;
}

/* ---- checkpoints -------------------------------------------------------------------------------------- */

/* Everything that must be equal for a resumed run to continue the original exactly. The batch is the global one:
 * a checkpoint resumes on any number of GPUs that keeps it. */
static void options_string(const cnn_model *m, const cnn_train_opts *o, const cnn_dataset *ds, int64_t total,
                           char *buf, size_t cap) {
    const cnn_net *net = cnn_model_net(m);
    snprintf(buf, cap,
             "arch=%s classes=%d stem=%d input=%dx%d data=%s:%d batch=%d steps=%lld optim=%d lr=%.9g momentum=%.9g "
             "wd=%.9g nesterov=%d betas=%.9g,%.9g eps=%.9g sched=%d warmup=%lld step_size=%d gamma=%.9g ls=%.9g "
             "augment=%d shuffle=%d seed=%llu dtype=%s",
             net->arch, net->num_classes, (int)net->stem, net->in_h, net->in_w, ds->source, ds->n,
             o->batch * (o->dist ? o->dist->world : 1),
             (long long)total, (int)o->optim, (double)o->lr, (double)o->momentum, (double)o->weight_decay,
             (int)o->nesterov, (double)o->beta1, (double)o->beta2, (double)o->adam_eps, (int)o->sched,
             (long long)o->warmup, o->step_size, (double)o->gamma, (double)o->label_smoothing, (int)o->augment,
             (int)o->shuffle, (unsigned long long)o->seed, cnn_dtype_name(cnn_model_backend((cnn_model *)m)->act_dtype));
}

/* fp16 dynamic loss scaling (as torch.cuda.amp.GradScaler): start at 2^16, halve and skip the step when a
 * gradient overflows, double after 2000 clean steps. */
#define SCALE_INIT 65536.0f
#define SCALE_GROWTH_INTERVAL 2000

typedef struct train_state {
    cnn_model *m;
    float loss_scale;   /* 1 unless fp16 */
    int64_t good_steps; /* clean steps since the last change of the scale */
    float *opt[2];      /* device optimizer state (momentum; or exp_avg, exp_avg_sq) */
    int n_opt;
    int64_t n_trainable;
    cnn_guard_state *guard;  /* device: the non-finite guard's counters and verdict */
    float *stats_backup;     /* device: the BN running statistics after the last good step */
    cnn_ckpt_writer writer;  /* the checkpoint being written behind the steps, if any */
    cnn_state state;         /* the host's copy of the state for checkpoints (lent to writer while it writes) */
} train_state;

/* behind: written by ts->writer while the next steps run (checkpoint.h); else here, after any write in flight.
 * The training thread only takes the state into ts->state (page-locked, kept for the run: one download per arena)
 * and has the device count its non-finite values; the filters' conversion and the write are the writer's (perf-log
 * step 106). */
static cnn_status save_checkpoint(train_state *ts, const char *path, int64_t step, const char *options, bool behind) {
    CNN_TRY(cnn_ckpt_wait(&ts->writer)); /* ts->state is free again */
    cnn_model *m = ts->m;
    cnn_backend *be = cnn_model_backend(m);
    cnn_state *s = &ts->state;
    if (!s->arena) CNN_TRY(cnn_state_alloc(m, (int64_t)ts->n_opt * ts->n_trainable, true, s));
    cnn_status st = cnn_model_state_take(m, s);
    for (int k = 0; k < ts->n_opt && st == CNN_OK; k++)
        st = be->download(be, cnn_ckpt_opt_data(s, k), ts->opt[k], (size_t)ts->n_trainable * sizeof(float));
    if (st == CNN_OK) st = cnn_state_check(m, ts->opt, ts->n_opt, s, path); /* a checkpoint never holds a NaN */
    char stepbuf[32], scalebuf[48];
    snprintf(stepbuf, sizeof stepbuf, "%lld", (long long)step);
    snprintf(scalebuf, sizeof scalebuf, "%.9g %lld", (double)ts->loss_scale, (long long)ts->good_steps);
    cnn_st_kv meta[] = {{"format", CNN_CKPT_FORMAT}, {"step", stepbuf}, {"options", options}, {"loss_scale", scalebuf}};
    if (st == CNN_OK && behind) return cnn_ckpt_write_behind(&ts->writer, path, s, ts->n_opt, meta, 4);
    if (st == CNN_OK) st = cnn_ckpt_write(path, s, ts->n_opt, meta, 4);
    return st;
}

static cnn_status load_checkpoint(train_state *ts, const char *path, const char *options, bool allow_nonfinite,
                                  int64_t *step) {
    cnn_st_file f;
    CNN_TRY(cnn_st_open(path, &f));
    cnn_ckpt_meta meta;
    cnn_status st = cnn_ckpt_meta_parse(&f, path, &meta);
    if (st == CNN_OK && strcmp(meta.options, options) != 0)
        st = cnn_fail(CNN_E_MISMATCH, "%s: written by a run with other options; checkpoint: [%s] now: [%s]", path,
                      meta.options, options);
    if (st == CNN_OK) st = cnn_ckpt_check_tensors(&f, path, cnn_model_net(ts->m), ts->n_opt);
    if (st == CNN_OK) st = cnn_model_load_st(ts->m, &f, path, "optimizer.");
    cnn_backend *be = cnn_model_backend(ts->m);
    float *tmp = ts->n_opt ? malloc((size_t)ts->n_trainable * sizeof *tmp) : NULL;
    if (st == CNN_OK && ts->n_opt && !tmp) st = cnn_fail(CNN_E_OOM, "out of host memory reading optimizer state");
    for (int k = 0; k < ts->n_opt && st == CNN_OK; k++) {
        const char *name = cnn_ckpt_opt_name(ts->n_opt, k);
        const cnn_st_entry *e = cnn_st_find(&f, name); /* present, F32 and of the right shape: checked above */
        memcpy(tmp, cnn_st_tensor_data(&f, e), (size_t)ts->n_trainable * sizeof(float));
        int64_t bad = allow_nonfinite ? -1 : cnn_first_nonfinite(tmp, ts->n_trainable);
        if (bad >= 0)
            st = cnn_fail(CNN_E_NONFINITE, "%s: tensor \"%s\" holds a non-finite value (%g at index %lld)", path, name,
                          (double)tmp[bad], (long long)bad);
        else
            st = be->upload(be, ts->opt[k], tmp, (size_t)ts->n_trainable * sizeof(float));
    }
    free(tmp);
    if (st == CNN_OK) {
        ts->loss_scale = meta.loss_scale;
        ts->good_steps = meta.good_steps;
        *step = meta.step;
    }
    cnn_st_free(&f);
    return st;
}

/* Keep only the metrics records of steps <= step (a resumed run rewrites what came after its checkpoint). */
static cnn_status truncate_metrics(const char *path, int64_t step) {
    uint8_t *buf;
    size_t len;
    if (access(path, F_OK) != 0) return CNN_OK;
    CNN_TRY(cnn_read_file(path, (size_t)1 << 30, &buf, &len));
    cnn_afile af;
    cnn_status st = cnn_afile_open(&af, path);
    size_t pos = 0;
    while (st == CNN_OK && pos < len) {
        size_t e = pos;
        while (e < len && buf[e] != '\n') e++;
        long long s = -1;
        char head[48] = {0};
        memcpy(head, buf + pos, e - pos < sizeof head - 1 ? e - pos : sizeof head - 1);
        if (e < len && sscanf(head, "{\"step\":%lld", &s) == 1 && s <= step) /* drop a torn last line */
            st = cnn_afile_write(&af, buf + pos, e < len ? e - pos + 1 : e - pos);
        pos = e + 1;
    }
    free(buf);
    if (st == CNN_OK) return cnn_afile_commit(&af);
    cnn_afile_discard(&af);
    return st;
}

/* ---- metrics ------------------------------------------------------------------------------------------ */

/* A number for a JSON record: JSON has no NaN or Infinity, so those are null (and the record says "nonfinite"). */
static const char *json_num(char *buf, size_t cap, double v, const char *fmt, bool *nonfinite) {
    if (!isfinite(v)) {
        *nonfinite = true;
        return "null";
    }
    snprintf(buf, cap, fmt, v);
    return buf;
}

/* One record line, written through and flushed: a failure (a full disk) ends the run. */
static cnn_status metrics_write(FILE *f, const char *path, const char *line) {
    errno = 0;
    if (fputs(line, f) < 0 || fflush(f) != 0)
        return cnn_fail(CNN_E_IO, "%s: write failed: %s", path, strerror(errno ? errno : EIO));
    return CNN_OK;
}

/* ---- the loop ----------------------------------------------------------------------------------------- */

/* The bar on stderr: also images/s and the share of the time spent preparing or waiting for data. */
static void progress(const cnn_train_opts *o, int64_t step, int64_t total, double elapsed, float loss, int64_t done,
                     double data_s) {
    if (!o->progress || !isatty(STDERR_FILENO)) return;
    int width = 30, fill = (int)(width * step / (total ? total : 1));
    double eta = done ? elapsed / done * (double)(total - step) : 0;
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
    bar[width] = 0;
    fprintf(stderr, "\r[%s] %3d%% step %lld/%lld loss %.4f %.0f img/s data %.0f%% ETA %d:%02d ", bar,
            (int)(100 * step / (total ? total : 1)), (long long)step, (long long)total, (double)loss,
            elapsed > 0 ? done * o->batch * (o->dist ? o->dist->world : 1) / elapsed : 0.0, elapsed > 0 ? 100 * data_s / elapsed : 0.0, (int)eta / 60,
            (int)eta % 60);
    if (step == total) fputc('\n', stderr);
    fflush(stderr);
}

static cnn_status optimizer_step(train_state *ts, const cnn_train_opts *o, int64_t step, float lr, float grad_scale) {
    cnn_backend *be = cnn_model_backend(ts->m);
    float *w = cnn_model_params(ts->m), *g = cnn_model_grads(ts->m);
    void *wact = cnn_model_act_weights(ts->m); /* the working copies, written in the same pass */
    if (o->optim == CNN_OPTIM_SGD) {
        cnn_sgd s = {.lr = lr, .momentum = o->momentum, .dampening = 0.0f, .weight_decay = o->weight_decay,
                     .nesterov = o->nesterov, .first_step = step == 1, .skip = &ts->guard->skip, .act_copy = wact};
        CNN_TRY(be->sgd_update(be, &s, ts->n_trainable, w, g, ts->n_opt ? ts->opt[0] : NULL, grad_scale));
    } else {
        cnn_adamw a = {.lr = lr, .beta1 = o->beta1, .beta2 = o->beta2, .eps = o->adam_eps,
                       .weight_decay = o->weight_decay, .step = step, .skip = &ts->guard->skip, .act_copy = wact};
        CNN_TRY(be->adamw_update(be, &a, ts->n_trainable, w, g, ts->opt[0], ts->opt[1], grad_scale));
    }
    cnn_model_params_updated(ts->m);
    return CNN_OK;
}

/* The loop's own kernels of a step (its guard and the optimizer), run in the first train forward's dry run so that
 * they compile in the batch of the model's passes (model.h cnn_model_set_dry_step; perf-log step 107). */
typedef struct dry_step_ctx {
    train_state *ts;
    const cnn_train_opts *o;
    const cnn_guard *guard;
} dry_step_ctx;

static cnn_status dry_step(void *arg) {
    const dry_step_ctx *d = arg;
    cnn_backend *be = cnn_model_backend(d->ts->m);
    CNN_TRY(be->guard_step(be, d->guard, d->ts->guard));
    return optimizer_step(d->ts, d->o, 1, 0.0f, 1.0f);
}

static void join_path(char *buf, size_t cap, const char *dir, const char *file) {
    snprintf(buf, cap, "%s/%s", dir, file);
}

/* at most this many steps' results wait on the device before the host reads them (cnn_train) */
#define RESULTS_RING 16

/* a step launched whose results are not read yet */
typedef struct pending_step {
    int64_t step, epoch;
    float lr;
    bool skip_step; /* fp16: skipped for non-finite gradients (known at launch) */
} pending_step;

typedef struct run_ctx {
    cnn_model *m;
    const cnn_train_opts *o;
    cnn_loader *loader;
    int64_t spe;         /* steps per epoch */
    int64_t *labels;     /* (batch) host */
} run_ctx;

/* Load the batch of 1-based step `step` into the model's input buffer (and its labels). */
static cnn_status load_step_batch(run_ctx *c, int64_t step) {
    const cnn_dist_ctx *d = c->o->dist;
    int world = d ? d->world : 1;
    cnn_dist_shard sh = cnn_dist_step_shard(step, c->spe, c->o->batch * world, d ? d->rank : 0, world);
    return cnn_loader_batch(c->loader, c->m, sh.epoch, sh.start, sh.count, c->labels);
}

static uint64_t dropout_seed(const cnn_train_opts *o, int64_t step) { return o->seed * 1000003ULL + (uint64_t)step; }

/* The guard found step `step` bad (STOP, or SKIP past its cap): name the step, what was bad and the first
 * non-finite layer of a rerun of its forward. The weights are still those before the step (the device skipped
 * its update and everything after it), so the rerun sees what the step saw. */
static cnn_status nonfinite_failure(run_ctx *c, const cnn_guard_state *gs, int64_t step, float lr, const char *why) {
    char where[256] = "unknown (the diagnosis failed)";
    cnn_status st = load_step_batch(c, step);
    if (st == CNN_OK) st = cnn_guard_diagnose(c->m, c->o->batch, dropout_seed(c->o, step), where, sizeof where);
    if (st != CNN_OK) cnn_error_clear();
    const char *what = gs->first_what & CNN_GUARD_LOSS
                           ? (gs->first_what & CNN_GUARD_STATS ? "the loss and BatchNorm running statistics"
                                                              : "the loss")
                           : "BatchNorm running statistics";
    return cnn_fail(CNN_E_NONFINITE, "step %lld (lr %g): %s non-finite (loss %g); first non-finite value: %s; %s",
                    (long long)step, (double)lr, what, (double)gs->first_loss, where, why);
}

/* At the end of a run: the model must give finite logits in eval mode on the last step's batch (running
 * statistics can be finite and still make the eval forward overflow), then it is written atomically, from `taken`
 * where the last checkpoint took the state after this step (an eval forward changes none of it), else from the
 * device. */
static cnn_status write_final_model(run_ctx *c, int64_t step, const char *path, const cnn_state *taken) {
    int n = c->o->batch;
    const cnn_net *net = cnn_model_net(c->m);
    float *logits = cnn_malloc((size_t)n * net->num_classes * sizeof *logits, "final logits");
    if (!logits) return CNN_E_OOM;
    cnn_status st = load_step_batch(c, step);
    if (st == CNN_OK) st = cnn_model_forward(c->m, n, CNN_MODE_EVAL, 0);
    if (st == CNN_OK) st = cnn_model_download_logits(c->m, n, logits);
    int64_t bad = st == CNN_OK ? cnn_first_nonfinite(logits, (int64_t)n * net->num_classes) : -1;
    free(logits);
    CNN_TRY(st);
    if (bad >= 0)
        return cnn_fail(CNN_E_NONFINITE, "%s not written: the model gives non-finite logits in eval mode (image %lld of "
                        "step %lld's batch): training diverged", path, (long long)(bad / net->num_classes),
                        (long long)step);
    return taken ? cnn_state_save(taken, path) : cnn_model_save(c->m, path);
}

cnn_status cnn_train(cnn_model *m, const cnn_model_opts *mo, const cnn_dataset *train, const cnn_dataset *test,
                     const cnn_train_opts *o) {
    (void)mo;
    cnn_backend *be = cnn_model_backend(m);
    const cnn_net *net = cnn_model_net(m);
    if (o->batch < 1 || o->batch > cnn_model_max_batch(m))
        return cnn_fail(CNN_E_INVALID, "batch %d out of range [1, %d]", o->batch, cnn_model_max_batch(m));
    if (train->classes > net->num_classes)
        return cnn_fail(CNN_E_MISMATCH, "the data has %d classes but the model only %d (--num-classes)", train->classes,
                        net->num_classes);
    cnn_dist_ctx *dist = o->dist && o->dist->world > 1 ? o->dist : NULL;
    const int world = dist ? dist->world : 1, global_batch = o->batch * world;
    const bool lead = !dist || dist->rank == 0; /* prints, writes metrics, checkpoints and the model */
    int64_t spe = train->n / global_batch; /* full batches only */
    if (spe < 1)
        return cnn_fail(CNN_E_INVALID, "the training set (%d images) is smaller than one batch (%d)", train->n,
                        global_batch);
    int64_t total = o->steps > 0 ? o->steps : (int64_t)o->epochs * spe;
    if (total < 1) return cnn_fail(CNN_E_INVALID, "nothing to train: 0 steps");
    if (total > CNN_MAX_STEPS) return cnn_fail(CNN_E_INVALID, "%lld steps: at most %lld", (long long)total, CNN_MAX_STEPS);

    char options[1024], ckpt[4096], model_path[4096], metrics_path[4096];
    options_string(m, o, train, total, options, sizeof options);
    int lock = -1;
    if (lead) CNN_TRY(cnn_mkdir_p(o->out_dir));
    if (lead) CNN_TRY(cnn_dir_lock(o->out_dir, &lock));
    int stale = lead ? cnn_remove_stale_tmp(o->out_dir) : 0;
    if (stale) cnn_log(1, "cnn: removed %d temporary file%s left in %s by runs that died", stale, stale > 1 ? "s" : "",
                       o->out_dir);
    join_path(ckpt, sizeof ckpt, o->out_dir, "checkpoint.safetensors");
    join_path(model_path, sizeof model_path, o->out_dir, "model.safetensors");
    join_path(metrics_path, sizeof metrics_path, o->out_dir, "metrics.jsonl");

    bool fp16 = be->act_dtype == CNN_DTYPE_F16;
    train_state ts = {.m = m, .n_trainable = net->n_trainable, .loss_scale = fp16 ? SCALE_INIT : 1.0f};
    ts.n_opt = o->optim == CNN_OPTIM_ADAMW ? 2 : (o->momentum != 0.0f ? 1 : 0);
    cnn_status st = CNN_OK;
    for (int k = 0; k < ts.n_opt && st == CNN_OK; k++) {
        st = be->alloc(be, (size_t)ts.n_trainable * sizeof(float), "optimizer state", (void **)&ts.opt[k]);
        if (st == CNN_OK) st = be->zero(be, ts.opt[k], (size_t)ts.n_trainable * sizeof(float));
    }
    size_t stats_bytes = (size_t)(net->n_buffer ? net->n_buffer : 1) * sizeof(float);
    if (st == CNN_OK) st = be->alloc(be, sizeof(cnn_guard_state), "non-finite guard", (void **)&ts.guard);
    if (st == CNN_OK) st = be->zero(be, ts.guard, sizeof(cnn_guard_state));
    if (st == CNN_OK) st = be->alloc(be, stats_bytes, "running statistics backup", (void **)&ts.stats_backup);
    int64_t start_step = 0;
    if (st == CNN_OK && o->resume) {
        const char *rp = o->resume_path ? o->resume_path : ckpt;
        st = load_checkpoint(&ts, rp, options, false, &start_step);
        if (st == CNN_OK && start_step > total)
            st = cnn_fail(CNN_E_MISMATCH, "%s: at step %lld, past the run's %lld steps", rp, (long long)start_step,
                          (long long)total);
        if (st == CNN_OK && lead) st = truncate_metrics(metrics_path, start_step);
        if (st == CNN_OK && lead) cnn_log(1, "cnn: resumed from %s at step %lld of %lld", rp, (long long)start_step, (long long)total);
    } else if (st == CNN_OK && lead) {
        /* a fresh run starts a fresh metrics file */
        FILE *f = fopen(metrics_path, "w");
        if (!f) st = cnn_fail(CNN_E_IO, "%s: %s", metrics_path, strerror(errno));
        else if (fclose(f) != 0) st = cnn_fail(CNN_E_IO, "%s: %s", metrics_path, strerror(errno));
    }
    /* every rank starts from rank 0's weights, statistics and optimizer state (a fresh run's initialisation is
     * seeded alike, a resumed one read the same file: this makes it so whatever happened) */
    for (int k = 0; k < ts.n_opt && st == CNN_OK && dist; k++)
        st = be->comm_broadcast(be, dist->comm, ts.opt[k], (size_t)ts.n_trainable * sizeof(float), 0);
    if (st == CNN_OK) st = cnn_dist_broadcast_model(dist, m, NULL, 0);
    if (st == CNN_OK) st = be->copy(be, ts.stats_backup, cnn_model_buffers(m), stats_bytes);
    cnn_loader loader;
    memset(&loader, 0, sizeof loader);
    if (st == CNN_OK) st = cnn_loader_init(&loader, train, be, o->batch, o->augment, o->shuffle, o->seed);
    FILE *metrics = st == CNN_OK && lead ? fopen(metrics_path, "a") : NULL;
    if (st == CNN_OK && lead && !metrics) st = cnn_fail(CNN_E_IO, "%s: %s", metrics_path, strerror(errno));
    int classes = net->num_classes;
    int64_t *labels = malloc((size_t)o->batch * sizeof *labels);
    if (st == CNN_OK && !labels) st = cnn_fail(CNN_E_OOM, "out of host memory for a batch");
    run_ctx rc = {.m = m, .o = o, .loader = &loader, .spe = spe, .labels = labels};
    cnn_guard guard = {.loss = cnn_model_loss_buffer(m), .stats = cnn_model_buffers(m), .backup = ts.stats_backup,
                       .n_stats = net->n_buffer, .halt_on_bad = o->on_nonfinite == CNN_NONFINITE_STOP};
    dry_step_ctx dry = {.ts = &ts, .o = o, .guard = &guard};
    cnn_model_set_dry_step(m, dry_step, &dry);
    int ev_n[2], n_ev = test && o->eval_size > 0 ? cnn_eval_batch_sizes(m, test->n, o->eval_size, o->batch, dist, ev_n) : 0;
    cnn_model_set_dry_eval(m, ev_n, n_ev);

    /* --deterministic: every sum over the batch by slices in a tree (shards.h), the same on any number of ranks;
     * graphs recorded before (or during) the slicing hold the other ops, so they go (again at the end) */
    int shards = 0;
    if (st == CNN_OK && o->deterministic) st = cnn_model_begin_slices(m, o->batch, world, &shards);
    if (st == CNN_OK && o->deterministic && shards == 0 && lead)
        cnn_log(1, "cnn: --deterministic: %d ranks do not divide the global batch's %d slices; the run is "
                   "deterministic, but its trajectory differs from that of another number of ranks",
                world, cnn_shards_global(global_batch));

    /* A step's results (its logits as float32 and the guard's state after it) are copied on the device into a ring
     * of `ring` slots and read back in one download when the ring is full or a step ends an epoch, checkpoints,
     * stops or ends the run, so a step never waits for the device (fp16's loss scaling, which reads a count of
     * non-finite gradients per step, excepted). The guard acts on the device at once; the host learns of a bad step
     * at the next read and stops there, and the steps after a stopped one have been skipped on the device. */
    const size_t batch_logits = (size_t)o->batch * classes;
    int ring = (int)(((size_t)32 << 20) / (batch_logits * sizeof(float)));
    ring = ring < 1 ? 1 : ring > RESULTS_RING ? RESULTS_RING : ring;
    if (dist) ring = 1; /* the ranks agree on every step's verdict before the next (cnn_dist_sum) */
    float *ring_logits_dev = NULL, *ring_logits = malloc((size_t)ring * batch_logits * sizeof *ring_logits);
    cnn_guard_state *ring_gs_dev = NULL, *ring_gs = malloc((size_t)ring * sizeof *ring_gs);
    int64_t *ring_labels = malloc((size_t)ring * o->batch * sizeof *ring_labels);
    pending_step *pend = malloc((size_t)ring * sizeof *pend);
    if (st == CNN_OK && (!ring_logits || !ring_gs || !ring_labels || !pend))
        st = cnn_fail(CNN_E_OOM, "out of host memory for the step results");
    if (st == CNN_OK)
        st = be->alloc(be, (size_t)ring * batch_logits * sizeof(float), "step results (logits)", (void **)&ring_logits_dev);
    if (st == CNN_OK)
        st = be->alloc(be, (size_t)ring * sizeof(cnn_guard_state), "step results (guard)", (void **)&ring_gs_dev);
    int n_pend = 0;

    double t0 = cnn_now(), t_epoch = t0, loss_epoch = 0, data_epoch = 0;
    int64_t correct_epoch = 0, seen_epoch = 0, skipped = 0, finite_epoch = 0;
    uint64_t bad_seen = 0;
    float loss = 0;
    char line[512], b1[32], b2[32];
    bool finished = start_step >= total && st == CNN_OK;
    for (int64_t step = start_step + 1; step <= total && st == CNN_OK; step++) {
        int64_t epoch = (step - 1) / spe, pos = (step - 1) % spe;
        float lr = cnn_lr_at(o, step, total, spe);
        st = load_step_batch(&rc, step);
        float used_scale = ts.loss_scale;
        cnn_model_set_loss_scale(m, used_scale);
        if (st == CNN_OK) st = cnn_model_forward(m, o->batch, CNN_MODE_TRAIN, dropout_seed(o, step));
        if (st == CNN_OK) st = cnn_model_backward(m, o->batch, labels, o->label_smoothing, NULL);
        /* every rank must take the guard's verdict of the whole step: the loss is summed before it judges (a NaN
         * anywhere is a NaN everywhere), and its skip word is or'ed after (a rank's own BN statistics) */
        if (st == CNN_OK && dist)
            st = be->comm_allreduce(be, dist->comm, cnn_model_loss_buffer(m), 1, CNN_COMM_SUM_F32, false);
        if (st == CNN_OK) st = be->guard_step(be, &guard, ts.guard);
        if (st == CNN_OK && dist)
            st = be->comm_allreduce(be, dist->comm, &ts.guard->skip, 1, CNN_COMM_MAX_U32, false);
        bool skip_step = false;
        if (st == CNN_OK && fp16) {
            int64_t bad = 0;
            st = be->count_nonfinite(be, ts.n_trainable, cnn_model_grads(m), &bad);
            if (bad > 0) {
                skip_step = true;
                cnn_log(2, "cnn: step %lld: %lld non-finite gradients at loss scale %g; skipping the update and halving",
                        (long long)step, (long long)bad, (double)ts.loss_scale);
                ts.loss_scale *= 0.5f;
                ts.good_steps = 0;
            } else if (++ts.good_steps == SCALE_GROWTH_INTERVAL) {
                ts.loss_scale *= 2.0f;
                ts.good_steps = 0;
            }
        }
        /* the gradients are summed over the ranks: dividing by world makes them the global batch's mean */
        if (st == CNN_OK && !skip_step) st = optimizer_step(&ts, o, step, lr, 1.0f / (used_scale * (float)world));
        if (st == CNN_OK) st = cnn_model_copy_logits(m, o->batch, ring_logits_dev + (size_t)n_pend * batch_logits);
        if (st == CNN_OK) st = be->copy(be, ring_gs_dev + n_pend, ts.guard, sizeof(cnn_guard_state));
        if (st != CNN_OK) break;
        memcpy(ring_labels + (size_t)n_pend * o->batch, labels, (size_t)o->batch * sizeof *labels);
        pend[n_pend++] = (pending_step){.step = step, .epoch = epoch, .lr = lr, .skip_step = skip_step};

        bool epoch_end = pos == spe - 1 || step == total;
        bool ckpt_now = step == total || epoch_end || (o->checkpoint_every > 0 && step % o->checkpoint_every == 0) ||
                        step == o->stop_after;
        bool interrupted = o->interrupt && *o->interrupt;
        if (n_pend < ring && !ckpt_now && !interrupted) continue; /* (several ranks: ring 1, every step read) */

        /* read the pending steps' results (the one wait for the device) and account for them in order */
        st = be->download(be, ring_logits, ring_logits_dev, (size_t)n_pend * batch_logits * sizeof(float));
        if (st == CNN_OK && dist) st = cnn_dist_check();
        if (st == CNN_OK) st = be->download(be, ring_gs, ring_gs_dev, (size_t)n_pend * sizeof(cnn_guard_state));
        for (int i = 0; i < n_pend && st == CNN_OK; i++) {
            const pending_step *ps = &pend[i];
            const cnn_guard_state *gs = &ring_gs[i];
            const float *logits_i = ring_logits + (size_t)i * batch_logits;
            const int64_t *labels_i = ring_labels + (size_t)i * o->batch;
            cnn_guard_state g = *gs;
            loss = g.loss / (float)world;
            bool bad_now = g.bad_steps > bad_seen;
            int correct = 0;
            for (int j = 0; j < o->batch; j++) {
                const float *z = logits_i + (size_t)j * classes;
                int best = 0;
                for (int c = 1; c < classes; c++)
                    if (z[c] > z[best]) best = c;
                correct += best == labels_i[j];
            }
            if (dist) { /* the ranks agree on what the host does next: a bad step, an interrupt anywhere */
                double agree[3] = {bad_now, interrupted, correct};
                st = cnn_dist_sum(dist, agree, 3);
                if (st != CNN_OK) break;
                if (agree[0] > 0 && !bad_now && !g.first_bad) /* bad on another rank: name this step */
                    g.first_bad = (uint64_t)(ps->step - start_step);
                bad_now = agree[0] > 0;
                interrupted = agree[1] > 0;
                correct = (int)agree[2];
            }
            cnn_watchdog_beat(dist ? dist->watchdog : NULL, ps->step);
            if (bad_now) {
                bad_seen = g.bad_steps;
                if (o->on_nonfinite == CNN_NONFINITE_STOP) {
                    st = nonfinite_failure(&rc, &g, start_step + (int64_t)g.first_bad, ps->lr,
                                           "stopped before its update (--on-nonfinite skip would skip such steps); no checkpoint holds it");
                    break;
                }
                skipped++;
                cnn_log(1, "cnn: step %lld: loss %g or BatchNorm statistics non-finite: step skipped (%lld of at most %lld)",
                        (long long)ps->step, (double)loss, (long long)skipped, (long long)o->max_skipped);
                if (skipped > o->max_skipped) {
                    st = nonfinite_failure(&rc, &g, ps->step, ps->lr, "more steps skipped than --max-skipped allows");
                    break;
                }
                correct = 0;
            }
            correct_epoch += correct;
            seen_epoch += global_batch;
            if (!bad_now) {
                loss_epoch += loss;
                finite_epoch++;
            }
            double now = cnn_now();
            bool nf = false;
            snprintf(line, sizeof line,
                     "{\"step\":%lld,\"epoch\":%lld,\"loss\":%s,\"lr\":%.9g,\"acc\":%.6f,\"time_s\":%.3f%s%s}\n",
                     (long long)ps->step, (long long)ps->epoch + 1, json_num(b1, sizeof b1, loss, "%.9g", &nf),
                     (double)ps->lr, (double)correct / global_batch, now - t0,
                     ps->skip_step || bad_now ? ",\"skipped\":true" : "", nf || bad_now ? ",\"nonfinite\":true" : "");
            if (lead) st = metrics_write(metrics, metrics_path, line);
            if (st != CNN_OK) break;
            if (lead && o->log_every > 0 && ps->step % o->log_every == 0)
                printf("step %lld/%lld  epoch %lld  loss %.4f  acc %5.1f%%  lr %.5f  %.0f img/s\n", (long long)ps->step,
                       (long long)total, (long long)ps->epoch + 1, (double)loss, 100.0 * correct / global_batch,
                       (double)ps->lr, (double)(ps->step - start_step) * global_batch / (now - t0));
            if (lead) progress(o, ps->step, total, now - t0, loss, ps->step - start_step, loader.wait_s);
        }
        n_pend = 0;
        if (st != CNN_OK) break;
        double now = cnn_now();
        bool nf = false;
        bool saved = false;
        if (epoch_end) {
            /* the epoch's images/s and data share cover its steps only: the evaluation and the checkpoint after
             * them are timed and stated apart (with short epochs a checkpoint can cost as much as the steps) */
            double dt = now - t_epoch;
            if (lead && o->progress && isatty(STDERR_FILENO)) fputc('\n', stderr);
            if (lead) printf("epoch %lld  step %lld/%lld  loss %.4f  acc %5.1f%%  lr %.5f  %.0f img/s  data %.1f%%",
                   (long long)epoch + 1, (long long)step, (long long)total, loss_epoch / (finite_epoch ? finite_epoch : 1),
                   100.0 * correct_epoch / (seen_epoch ? seen_epoch : 1), (double)lr, seen_epoch / (dt > 0 ? dt : 1),
                   dt > 0 ? 100 * (loader.wait_s - data_epoch) / dt : 0.0);
            data_epoch = loader.wait_s;
            if (lead && cnn_loader_skipped(&loader)) printf("  skipped %lld bad images", (long long)cnn_loader_skipped(&loader));
            if (test && o->eval_size > 0 && !interrupted) {
                cnn_eval_result ev;
                double te = cnn_now();
                /* every rank evaluates with rank 0's BatchNorm statistics (as DDP's broadcast_buffers keeps them),
                 * the ones rank 0's checkpoint and model hold */
                if (dist) st = cnn_dist_broadcast_model(dist, m, NULL, 0);
                if (st == CNN_OK && dist) st = be->copy(be, ts.stats_backup, cnn_model_buffers(m), stats_bytes);
                if (st == CNN_OK) st = cnn_evaluate_dist(m, test, o->eval_size, o->batch, dist, &ev);
                if (st != CNN_OK) break;
                if (lead)
                    printf("  | eval loss %.4f  top1 %5.1f%%  top5 %5.1f%% (%.1f s)", ev.loss, 100 * ev.top1,
                           100 * ev.top5, cnn_now() - te);
                if (lead && ev.nonfinite) printf("  (%d of %d non-finite)", ev.nonfinite, ev.n);
                nf = false;
                snprintf(line, sizeof line,
                         "{\"step\":%lld,\"epoch\":%lld,\"eval_loss\":%s,\"eval_top1\":%.6f,\"eval_top5\":%.6f,"
                         "\"eval_nonfinite\":%d%s}\n",
                         (long long)step, (long long)epoch + 1, json_num(b2, sizeof b2, ev.loss, "%.9g", &nf), ev.top1,
                         ev.top5, ev.nonfinite, nf || ev.nonfinite ? ",\"nonfinite\":true" : "");
                if (lead) st = metrics_write(metrics, metrics_path, line);
                if (st == CNN_OK && ev.nonfinite && o->on_nonfinite == CNN_NONFINITE_STOP)
                    st = cnn_fail(CNN_E_NONFINITE, "evaluation after step %lld: %d of %d images give non-finite logits "
                                  "(the model diverged); stopped, no checkpoint of it is written", (long long)step,
                                  ev.nonfinite, ev.n);
                if (st != CNN_OK) break;
            }
            if (ckpt_now || interrupted) {
                double tc = cnn_now();
                /* written behind the next steps, but the last and an interrupted run's (the run ends on them) */
                if (lead && (st = cnn_dist_check()) == CNN_OK)
                    st = save_checkpoint(&ts, ckpt, step, options, step < total && !interrupted);
                saved = true;
                if (st == CNN_OK && lead) printf("  | checkpoint %.2f s", cnn_now() - tc);
            }
            if (lead) printf("\n");
            fflush(stdout);
            t_epoch = cnn_now();
            loss_epoch = 0;
            correct_epoch = seen_epoch = finite_epoch = 0;
        }
        /* the last step ends the run: the model is written even when --stop-after names that step */
        if (st == CNN_OK && dist) st = cnn_dist_check();
        if (st == CNN_OK && lead && (ckpt_now || interrupted) && !saved)
            st = save_checkpoint(&ts, ckpt, step, options, false);
        if (st == CNN_OK && step == total && lead) {
            st = cnn_ckpt_wait(&ts.writer);
            /* the last step always checkpoints (ckpt_now): ts.state holds the state after it */
            if (st == CNN_OK) st = write_final_model(&rc, step, model_path, &ts.state);
        }
        if (st == CNN_OK && interrupted && step < total) {
            st = cnn_fail(CNN_E_INTERRUPTED, "interrupted after step %lld of %lld; %s written: continue with --resume",
                          (long long)step, (long long)total, ckpt);
            break;
        }
        if (st == CNN_OK && o->stop_after > 0 && step == o->stop_after && step < total) {
            if (lead) cnn_log(1, "cnn: stopping after step %lld (--stop-after); resume with --resume", (long long)step);
            break;
        }
    }
    if (finished && st == CNN_OK && lead) {
        /* resumed at the end: the run died between its last checkpoint and the model (or the model was deleted) */
        struct stat sb;
        if (stat(model_path, &sb) == 0 && S_ISREG(sb.st_mode)) {
            cnn_log(1, "cnn: checkpoint is already at step %lld of %lld; %s exists", (long long)start_step,
                    (long long)total, model_path);
        } else {
            st = write_final_model(&rc, total, model_path, NULL);
            if (st == CNN_OK)
                cnn_log(1, "cnn: checkpoint is already at step %lld of %lld; wrote the missing %s", (long long)start_step,
                        (long long)total, model_path);
        }
    }
    if (st == CNN_OK) { /* a run that stopped early: its last checkpoint whole before it returns */
        st = cnn_ckpt_wait(&ts.writer);
    } else if (ts.writer.busy) { /* the first error stands */
        char first[1024];
        snprintf(first, sizeof first, "%s", cnn_error_msg());
        cnn_ckpt_wait(&ts.writer);
        cnn_fail(st, "%s", first);
    }
    if (metrics && fclose(metrics) != 0 && st == CNN_OK)
        st = cnn_fail(CNN_E_IO, "%s: write failed: %s", metrics_path, strerror(errno));
    free(labels);
    free(ring_logits);
    free(ring_gs);
    free(ring_labels);
    free(pend);
    if (ring_logits_dev) be->free(be, ring_logits_dev);
    if (ring_gs_dev) be->free(be, ring_gs_dev);
    cnn_loader_free(&loader);
    cnn_model_set_dry_step(m, NULL, NULL);
    cnn_model_set_dry_eval(m, NULL, 0);
    cnn_model_end_slices(m);
    cnn_state_free(&ts.state); /* the writer is done with it (waited above) */
    for (int k = 0; k < ts.n_opt; k++)
        if (ts.opt[k]) be->free(be, ts.opt[k]);
    if (ts.guard) be->free(be, ts.guard);
    if (ts.stats_backup) be->free(be, ts.stats_backup);
    cnn_dir_unlock(lock);
    return st;
}
