/* train.h — the training loop, learning-rate schedules, evaluation and checkpoints.
 *
 * A run is a pure function of its options and seed: batch order, augmentation and dropout derive from
 * (seed, step) through Philox, and every kernel is deterministic, so `--resume` from a checkpoint continues
 * bit for bit as if the run had never stopped. Checkpoints are one safetensors file (weights under
 * torchvision names, optimizer state under "optimizer.*", the position and options in __metadata__), written
 * atomically.
 */
#ifndef CNN_TRAIN_H
#define CNN_TRAIN_H

#include "cnn/data.h"
#include "cnn/dist.h"

#include <signal.h>

typedef enum cnn_optim { CNN_OPTIM_SGD = 0, CNN_OPTIM_ADAMW } cnn_optim;
/* What a training step whose loss or BatchNorm statistics come out NaN/Inf does (the device guard, backend.h):
 * STOP: the run ends with CNN_E_NONFINITE naming the step and the first non-finite layer; nothing of the bad
 *       step is kept and no checkpoint is written after it.
 * SKIP: the step is undone (no update, statistics restored), counted and recorded; more than max_skipped such
 *       steps end the run as STOP would. */
typedef enum cnn_nonfinite { CNN_NONFINITE_STOP = 0, CNN_NONFINITE_SKIP } cnn_nonfinite;
typedef enum cnn_sched { CNN_SCHED_CONSTANT = 0, CNN_SCHED_STEP, CNN_SCHED_COSINE } cnn_sched;

/* A rank of a multi-GPU run (dist.h): cnn_dist_start makes it, cnn_dist_finish ends it. */
typedef struct cnn_watchdog cnn_watchdog;
typedef struct cnn_dist_ctx {
    int rank, world;
    void *comm;              /* the backend's communicator (backend.h comm_*); NULL when world == 1 */
    cnn_backend *be;
    cnn_dist_links links;
    cnn_watchdog *watchdog;  /* NULL when world == 1 */
    double *host_sum;        /* device: (8) float64 scratch of cnn_dist_sum */
} cnn_dist_ctx;

/* Join the run of e (rank, world) through init (dist.h's rendezvous; NULL = tcp://MASTER_ADDR:MASTER_PORT) within
 * timeout_s, make the communicator and start the watchdog (dist_run.c). world 1: nothing to join. */
cnn_status cnn_dist_start(cnn_backend *be, const cnn_dist_env *e, const char *init, double timeout_s, cnn_dist_ctx *out);
/* End it: ok = a normal end (a barrier with every rank, then goodbye), else the peers see this rank fail. */
void cnn_dist_finish(cnn_dist_ctx *d, bool ok);
/* Sum n (<= 8) host doubles over the ranks, in place (a no-op for one rank). */
cnn_status cnn_dist_sum(cnn_dist_ctx *d, double *v, int n);
/* Broadcast rank 0's parameters, BatchNorm statistics and nbytes of extra device memory (may be NULL). */
cnn_status cnn_dist_broadcast_model(cnn_dist_ctx *d, cnn_model *m, void *extra, size_t nbytes);

cnn_status cnn_watchdog_start(cnn_backend *be, void *comm, cnn_dist_links *links, double timeout_s, int rank,
                              cnn_watchdog **out);
void cnn_watchdog_beat(cnn_watchdog *w, int64_t step); /* a step finished */
void cnn_watchdog_stop(cnn_watchdog *w);
/* CNN_E_DIST once a watchdog has found a peer dead or stalled: this process ends within seconds, and until then the
 * training loop writes no checkpoint, model or metrics record (it would hold a step taken without the peer) */
cnn_status cnn_dist_check(void);

typedef struct cnn_train_opts {
    int batch;                /* images per step on this rank (the global batch is batch x world) */
    int epochs;               /* used when steps == 0 */
    int64_t steps;            /* total optimizer steps; 0 = epochs * steps_per_epoch */
    cnn_optim optim;
    float lr, momentum, weight_decay;
    bool nesterov;
    float beta1, beta2, adam_eps;
    cnn_sched sched;
    int64_t warmup;           /* linear warm-up steps */
    int step_size;            /* step schedule: epochs between decays */
    float gamma;              /* step schedule: decay factor */
    float label_smoothing;
    bool augment, shuffle;
    uint64_t seed;
    const char *out_dir;      /* model.safetensors, checkpoint.safetensors, metrics.jsonl */
    int64_t checkpoint_every; /* steps; 0 = at the end of each epoch only */
    int64_t stop_after;       /* stop (as if killed) after this step's checkpoint; 0 = never */
    bool resume;
    const char *resume_path;  /* NULL = out_dir/checkpoint.safetensors */
    int64_t log_every;        /* step lines on stdout; 0 = epoch lines only */
    int eval_size;            /* test-split images evaluated after each epoch; 0 = none */
    bool progress;            /* progress bar on stderr */
    cnn_nonfinite on_nonfinite;
    int64_t max_skipped;      /* SKIP: steps that may be skipped in a run (a resumed run counts afresh) */
    /* Set asynchronously (a signal handler) to a nonzero value: the run finishes the step in flight, writes a
     * checkpoint and returns CNN_E_INTERRUPTED. NULL = never. */
    const volatile sig_atomic_t *interrupt;
    cnn_dist_ctx *dist;       /* a rank of a multi-GPU run; NULL = one process. Only rank 0 prints and writes. */
    /* --deterministic: every sum over the batch by slices in a fixed tree (src/core/shards.h), so that 1, 2, 4 or 8
     * ranks sharing a global batch (a multiple of 8; of fewer slices otherwise) train bit for bit alike */
    bool deterministic;
} cnn_train_opts;

cnn_train_opts cnn_train_opts_default(void);

/* Learning rate at 1-based step s of total. */
float cnn_lr_at(const cnn_train_opts *o, int64_t s, int64_t total, int64_t steps_per_epoch);

typedef struct cnn_eval_result {
    double loss, top1, top5;  /* mean loss (NaN when any image's is); accuracies in [0, 1] */
    int n;
    int nonfinite;            /* images with a NaN/Inf logit: counted as wrong in top1 and top5 */
    int64_t skipped;          /* undecodable images replaced (folder data, on_bad = skip) */
} cnn_eval_result;

/* Evaluate a model (eval mode) on the first n images of a dataset (0 = all), batch by batch. With dist (NULL =
 * one process) each rank evaluates its part of them and the sums are reduced: every rank gets the result. */
cnn_status cnn_evaluate(cnn_model *m, const cnn_dataset *ds, int n, int batch, cnn_eval_result *out);
cnn_status cnn_evaluate_dist(cnn_model *m, const cnn_dataset *ds, int n, int batch, cnn_dist_ctx *dist,
                             cnn_eval_result *out);

/* Train m on train (and evaluate on test after each epoch when test != NULL and eval_size > 0). The output
 * directory is locked for the run (io.h, cnn_dir_lock) and cleared of temporary files that dead processes
 * left. A resumed run that is already complete writes OUT/model.safetensors if it is missing. Every write
 * that fails (metrics, checkpoint, model) ends the run with CNN_E_IO; a model or checkpoint that would hold a
 * NaN/Inf is never written (CNN_E_NONFINITE). */
cnn_status cnn_train(cnn_model *m, const cnn_model_opts *mo, const cnn_dataset *train, const cnn_dataset *test,
                     const cnn_train_opts *o);

/* Training curves of runs (their DIR/metrics.jsonl) as one SVG, written atomically: loss, accuracy and learning
 * rate against the step, one colour per run (plot.c). */
cnn_status cnn_plot_runs(const char *const *dirs, int n, const char *out_path);

#endif
