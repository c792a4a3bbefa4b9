/* cmd_train.c — `cnn train` and `cnn eval`. */
#include "cli.h"
#include "cnn/train.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The model's input size before the data is loaded (folder images are cropped to it); -1 or an exit code. */
static int input_size(const char *cmd, const cli_table *t, const cli_model *mm, int *h, int *w) {
    cnn_model_opts mo;
    return cli_model_opts(cmd, t, mm, 1000, &mo, h, w);
}

/* Classes the model gets by default: the data's (folder, tensors), at least 10 for the small-image sets. */
static int default_classes(const cnn_dataset *ds) {
    if (ds->files || ds->fpix) return ds->classes;
    return ds->classes < 10 ? 10 : ds->classes;
}

/* SIGINT/SIGTERM during training: the first one asks the loop to finish its step and checkpoint (exit 128 +
 * signal); a second one ends the process at once, as the default action would (an atomic checkpoint write
 * cut short leaves the previous checkpoint whole). */
static volatile sig_atomic_t interrupted;

static void on_signal(int sig) {
    if (interrupted) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    interrupted = sig;
}

static void catch_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int cmd_train(int argc, char **argv) {
    cli_table t = {0};
    cli_common c = {0};
    cli_model mm = {0};
    cli_data cd;
    cli_dist cdist;
    int batch_global = 0;
    cnn_train_opts o = cnn_train_opts_default();
    const char *optim = "sgd", *sched = "cosine", *resume_from = NULL;
    int train_size = 0, epochs = 1;
    int64_t steps = 0, warmup = 0, ckpt_every = 0, stop_after = 0, log_every = 0;
    int eval_size = -1;
    const char *on_nonfinite = "stop";
    bool no_augment = false, no_shuffle = false, no_progress = false, resume = false;
    cli_add_model(&t, &mm, true);
    cli_add_data(&t, &cd, true);
    cli_add(&t, (cli_opt){"batch", 0, CLI_INT, "B", &o.batch, 1, 65536, NULL, "images per step"});
    cli_add(&t, (cli_opt){"batch-global", 0, CLI_INT, "B", &batch_global, 0, 1 << 24, NULL,
                          "images per step over all GPUs (instead of --batch per GPU; a multiple of the GPUs)"});
    cli_add(&t, (cli_opt){"epochs", 0, CLI_INT, "E", &epochs, 1, 100000, NULL, "passes over the training set"});
    cli_add(&t, (cli_opt){"steps", 0, CLI_I64, "S", &steps, 0, 1e12, NULL, "total steps (overrides --epochs; 0 = off)"});
    cli_add(&t, (cli_opt){"train-size", 0, CLI_INT, "N", &train_size, 0, 1 << 30, NULL,
                          "use the first N training images (synthetic: generate N; 0 = all)"});
    cli_add(&t, (cli_opt){"eval-size", 0, CLI_INT, "N", &eval_size, 0, 1 << 30, NULL,
                          "test images evaluated after each epoch (default: all; tensors data: 0)"});
    cli_add(&t, (cli_opt){"optimizer", 0, CLI_CHOICE, NULL, &optim, 0, 0, "sgd|adamw", "optimizer"});
    cli_add(&t, (cli_opt){"lr", 0, CLI_FLOAT, "LR", &o.lr, 0, 1e3, NULL, "peak learning rate"});
    cli_add(&t, (cli_opt){"momentum", 0, CLI_FLOAT, "M", &o.momentum, 0, 0.9999, NULL, "SGD momentum"});
    cli_add(&t, (cli_opt){"nesterov", 0, CLI_FLAG, NULL, &o.nesterov, 0, 0, NULL, "Nesterov momentum"});
    cli_add(&t, (cli_opt){"weight-decay", 0, CLI_FLOAT, "WD", &o.weight_decay, 0, 10, NULL,
                          "weight decay (SGD: L2 in the gradient; AdamW: decoupled)"});
    cli_add(&t, (cli_opt){"beta1", 0, CLI_FLOAT, "B1", &o.beta1, 0, 0.99999, NULL, "AdamW beta1"});
    cli_add(&t, (cli_opt){"beta2", 0, CLI_FLOAT, "B2", &o.beta2, 0, 0.99999999, NULL, "AdamW beta2"});
    cli_add(&t, (cli_opt){"schedule", 0, CLI_CHOICE, NULL, &sched, 0, 0, "constant|step|cosine", "learning-rate schedule"});
    cli_add(&t, (cli_opt){"warmup", 0, CLI_I64, "S", &warmup, 0, 1e12, NULL, "linear warm-up steps"});
    cli_add(&t, (cli_opt){"step-size", 0, CLI_INT, "E", &o.step_size, 1, 100000, NULL, "step schedule: epochs per decay"});
    cli_add(&t, (cli_opt){"gamma", 0, CLI_FLOAT, "G", &o.gamma, 0, 1, NULL, "step schedule: decay factor"});
    cli_add(&t, (cli_opt){"label-smoothing", 0, CLI_FLOAT, "E", &o.label_smoothing, 0, 1, NULL, "cross-entropy label smoothing"});
    cli_add(&t, (cli_opt){"no-augment", 0, CLI_FLAG, NULL, &no_augment, 0, 0, NULL, "no random crop/flip"});
    cli_add(&t, (cli_opt){"no-shuffle", 0, CLI_FLAG, NULL, &no_shuffle, 0, 0, NULL, "keep the data order"});
    cli_add(&t, (cli_opt){"out", 0, CLI_STR, "DIR", &o.out_dir, 0, 0, NULL, "model, checkpoint and metrics directory"});
    cli_add(&t, (cli_opt){"checkpoint-every", 0, CLI_I64, "S", &ckpt_every, 0, 1e12, NULL,
                          "also checkpoint every S steps (always at each epoch end)"});
    cli_add(&t, (cli_opt){"resume", 0, CLI_FLAG, NULL, &resume, 0, 0, NULL, "continue from OUT/checkpoint.safetensors"});
    cli_add(&t, (cli_opt){"resume-from", 0, CLI_STR, "CKPT", &resume_from, 0, 0, NULL, "continue from this checkpoint"});
    cli_add(&t, (cli_opt){"stop-after", 0, CLI_I64, "S", &stop_after, 0, 1e12, NULL,
                          "stop after step S's checkpoint, as if interrupted"});
    cli_add(&t, (cli_opt){"log-every", 0, CLI_I64, "S", &log_every, 0, 1e12, NULL, "a progress line every S steps"});
    cli_add(&t, (cli_opt){"no-progress", 0, CLI_FLAG, NULL, &no_progress, 0, 0, NULL, "no progress bar on stderr"});
    cli_add(&t, (cli_opt){"on-nonfinite", 0, CLI_CHOICE, NULL, &on_nonfinite, 0, 0, "stop|skip",
                          "a step whose loss or BN statistics are NaN/Inf: stop (exit 1, naming step and layer) or "
                          "skip it (undone, counted)"});
    cli_add(&t, (cli_opt){"max-skipped", 0, CLI_I64, "N", &o.max_skipped, 0, 1e12, NULL,
                          "--on-nonfinite skip: stop when more than N steps were skipped"});
    cli_add_dist(&t, &cdist);
    cli_add_common(&t, &c);
    int rc = cli_parse(&t, "train", "--model M --data D [options]",
                       "Train with softmax cross-entropy. Writes OUT/model.safetensors (torchvision names), "
                       "OUT/checkpoint.safetensors (weights + optimizer state + position, atomic) and "
                       "OUT/metrics.jsonl (one record per step). One line per epoch on stdout.",
                       argc, argv);
    if (rc >= 0) return rc;
    if ((rc = cli_dist_prepare("train", &cdist, &c, argc, argv)) >= 0) return rc;
    const cnn_dist_env *de = &cdist.env_out[0];
    int global_batch;
    if (cli_seen(&t, "batch-global") && cli_seen(&t, "batch"))
        return cli_usage_error("train", "--batch (per GPU) and --batch-global: give one");
    if (cnn_dist_batch(o.batch, batch_global, de->world, &o.batch, &global_batch) != CNN_OK)
        return cli_usage_error("train", "%s", cnn_error_msg());
    o.optim = strcmp(optim, "adamw") == 0 ? CNN_OPTIM_ADAMW : CNN_OPTIM_SGD;
    o.sched = strcmp(sched, "constant") == 0 ? CNN_SCHED_CONSTANT
              : strcmp(sched, "step") == 0   ? CNN_SCHED_STEP
                                             : CNN_SCHED_COSINE;
    o.epochs = epochs;
    o.steps = steps;
    o.warmup = warmup;
    o.checkpoint_every = ckpt_every;
    o.stop_after = stop_after;
    o.log_every = log_every;
    o.augment = !no_augment;
    o.shuffle = !no_shuffle;
    o.progress = !no_progress;
    o.resume = resume || resume_from;
    o.resume_path = resume_from;
    o.seed = (uint64_t)mm.seed;
    o.on_nonfinite = strcmp(on_nonfinite, "skip") == 0 ? CNN_NONFINITE_SKIP : CNN_NONFINITE_STOP;
    o.interrupt = &interrupted;
    o.deterministic = c.deterministic;
    int classes = cli_seen(&t, "num-classes") ? mm.num_classes : 0;
    if (o.optim == CNN_OPTIM_ADAMW && !cli_seen(&t, "weight-decay")) o.weight_decay = 0.01f;
    if (o.optim == CNN_OPTIM_ADAMW && !cli_seen(&t, "lr")) o.lr = 1e-3f;
    const char *data = cd.data;
    bool tensors = strncmp(data, "tensors:", 8) == 0;
    int h, w;
    if ((rc = input_size("train", &t, &mm, &h, &w)) >= 0) return rc;

    cnn_dataset train = {0}, test = {0};
    cd.deterministic = c.deterministic;
    cnn_status st = cli_load_data(&cd, CNN_SPLIT_TRAIN, train_size, o.seed, classes, h, w, &train);
    if (st != CNN_OK) return cli_fail(st);
    if (eval_size < 0) eval_size = tensors ? 0 : 1 << 30;
    if (eval_size > 0) {
        st = cli_load_data(&cd, CNN_SPLIT_TEST, eval_size == 1 << 30 ? 0 : eval_size, o.seed, classes, h, w, &test);
        if (st != CNN_OK) {
            cnn_dataset_free(&train);
            return cli_fail(st);
        }
    }
    o.eval_size = eval_size > 0 ? test.n : 0;
    cnn_model_opts mo;
    if ((rc = cli_model_opts("train", &t, &mm, default_classes(&train), &mo, &h, &w)) >= 0) goto out;
    if (!cli_seen(&t, "input-size")) {
        h = train.h;
        w = train.w;
    }
    if (!cli_seen(&t, "num-classes") && tensors) mo.num_classes = train.classes;
    cnn_backend *be = NULL;
    if ((rc = cli_backend(&c, &be)) >= 0) goto out;
    cnn_dist_ctx dctx;
    if (de->world > 1 && !be->comm_init) {
        rc = cli_usage_error("train", "rank %d of %d: the %s backend has no multi-GPU collectives (--device cuda "
                             "and NCCL are needed)", de->rank, de->world, be->name);
        cnn_backend_destroy(be);
        goto out;
    }
    st = cnn_dist_start(be, de, cdist.init, cdist.timeout_s, &dctx);
    if (st != CNN_OK) {
        rc = cli_fail(st);
        cnn_backend_destroy(be);
        goto out;
    }
    o.dist = &dctx;
    cnn_model *m = NULL;
    st = cnn_model_create(&mo, be, h, w, o.batch, true, &m);
    cnn_dp_opts dp = cli_dist_dp_opts(&cdist, de->world);
    if (st == CNN_OK) st = cnn_model_set_comm(m, dctx.comm, &dp);
    if (st == CNN_OK) cnn_model_set_allow_nonfinite(m, mm.allow_nonfinite);
    if (st == CNN_OK && mm.weights && !o.resume) st = cnn_model_load(m, mm.weights);
    if (st == CNN_OK) {
        if (!c.quiet)
            fprintf(stderr, "cnn: training %s (%s stem, %d classes) on %s: %d images of %dx%d, batch %d%s, %s, %s\n",
                    mo.arch, mo.stem == CNN_STEM_CIFAR ? "cifar" : "imagenet", mo.num_classes, data, train.n, h, w,
                    global_batch, de->world > 1 ? " (over all GPUs)" : "", be->name, be->device_name);
        catch_signals();
        st = cnn_train(m, &mo, &train, eval_size > 0 ? &test : NULL, &o);
    }
    /* the model first: its recorded graphs hold the gradient sums, and NCCL waits for such graphs to go before it
     * lets its communicator go (cnn train --gpus 2 hung at its end otherwise; cnn bench frees each model first too) */
    cnn_model_free(m);
    m = NULL;
    cnn_dist_finish(&dctx, st == CNN_OK || st == CNN_E_INTERRUPTED);
    if (st == CNN_OK && de->rank == 0) { /* the curves as a picture; a run that trained is not failed by its plot */
        char svg[4096];
        snprintf(svg, sizeof svg, "%s/curves.svg", o.out_dir);
        if (cnn_plot_runs(&o.out_dir, 1, svg) != CNN_OK) cnn_log(1, "cnn: no curves.svg: %s", cnn_error_msg());
    }
    rc = st == CNN_OK ? CLI_EXIT_OK : cli_fail(st);
    if (st == CNN_E_INTERRUPTED) rc = 128 + (int)interrupted; /* 130 SIGINT, 143 SIGTERM, as the shell reports */
    cnn_backend_destroy(be);
out:
    cnn_dataset_free(&train);
    cnn_dataset_free(&test);
    return rc;
}

int cmd_eval(int argc, char **argv) {
    cli_table t = {0};
    cli_common c = {0};
    cli_model mm = {0};
    cli_data cd;
    int eval_size = 0, batch = 128;
    cli_add_model(&t, &mm, true);
    cli_add_data(&t, &cd, false);
    cli_add(&t, (cli_opt){"eval-size", 0, CLI_INT, "N", &eval_size, 0, 1 << 30, NULL, "evaluate the first N images (0 = all)"});
    cli_add(&t, (cli_opt){"batch", 0, CLI_INT, "B", &batch, 1, 65536, NULL, "images per forward pass"});
    cli_add_common(&t, &c);
    int rc = cli_parse(&t, "eval", "--model M --weights W --data D",
                       "Evaluate on the test split (eval mode): mean cross-entropy, top-1 and top-5 accuracy.", argc, argv);
    if (rc >= 0) return rc;
    if (!mm.weights) return cli_usage_error("eval", "--weights is required");
    const char *data = cd.data;
    int h, w;
    if ((rc = input_size("eval", &t, &mm, &h, &w)) >= 0) return rc;
    cnn_dataset ds = {0};
    cd.deterministic = c.deterministic;
    cnn_status st = cli_load_data(&cd, CNN_SPLIT_TEST, eval_size, (uint64_t)mm.seed,
                                   cli_seen(&t, "num-classes") ? mm.num_classes : 0, h, w, &ds);
    if (st != CNN_OK) return cli_fail(st);
    cnn_model_opts mo;
    cnn_backend *be = NULL;
    cnn_model *m = NULL;
    if ((rc = cli_model_opts("eval", &t, &mm, default_classes(&ds), &mo, &h, &w)) >= 0) goto out;
    if (!cli_seen(&t, "input-size")) {
        h = ds.h;
        w = ds.w;
    }
    if ((rc = cli_backend(&c, &be)) >= 0) goto out;
    st = cnn_model_create(&mo, be, h, w, batch < ds.n ? batch : ds.n, false, &m);
    if (st == CNN_OK) cnn_model_set_allow_nonfinite(m, mm.allow_nonfinite);
    if (st == CNN_OK) st = cnn_model_load(m, mm.weights);
    cnn_eval_result r;
    if (st == CNN_OK) st = cnn_evaluate(m, &ds, eval_size, batch, &r);
    if (st == CNN_OK) {
        printf("eval %s on %s: %d images  loss %.4f  top1 %.2f%%  top5 %.2f%%  non-finite %d", mo.arch, data, r.n,
               r.loss, 100 * r.top1, 100 * r.top5, r.nonfinite);
        if (r.skipped) printf("  (%lld bad images skipped)", (long long)r.skipped);
        printf("\n");
        if (r.nonfinite)
            fprintf(stderr, "cnn: %d of %d images give NaN/Inf logits (counted as wrong)\n", r.nonfinite, r.n);
        rc = CLI_EXIT_OK;
    } else {
        rc = cli_fail(st);
    }
out:
    cnn_model_free(m);
    cnn_backend_destroy(be);
    cnn_dataset_free(&ds);
    return rc;
}
