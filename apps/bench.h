/* bench.h — what `cnn bench`'s files share (cmd_bench.c, bench_passes.c). */
#ifndef CNN_APPS_BENCH_H
#define CNN_APPS_BENCH_H

#include "cli.h"

/* One distinct convolution of a model and its three passes timed alone (--mode train --layers). */
typedef struct bench_pass {
    cnn_conv2d cv;      /* at the benchmark's batch */
    int count;          /* convolutions of the model with this shape */
    char layer[96];     /* "64->64 56x56 3x3/1" */
    double gflop;       /* of one pass (fprop, dgrad and wgrad are the same multiply-adds) */
    bool dgrad_needed;  /* some convolution of this shape reads a layer's output, not the images */
    double ms[3];       /* fprop, dgrad, wgrad: median of the timed runs (dgrad 0 when not needed) */
} bench_pass;

/* A training step by op (--mode train --layers): the train plan's steps timed one by one (eager), summed per op
 * kind and direction; the optimizer update and the weight copies' refresh after it. */
typedef struct bench_op_time {
    char what[24];      /* "conv", "bn+relu", "maxpool", ...; "loss", "optimizer" */
    bool backward;
    int count;          /* steps of that kind */
    double ms;          /* their summed medians */
} bench_op_time;
#define BENCH_OP_KINDS 32

/* Median of n > 0 times (sorts ms). */
double bench_median(double *ms, int n);
/* Every distinct convolution of net at `batch`, each pass run `warmup` times, then timed over `repeat` runs back to
 * back; *out (malloc'd) holds *n_out of them in the order of their first use. */
cnn_status bench_conv_passes(cnn_backend *be, const cnn_net *net, int batch, int warmup, int repeat,
                             bench_pass **out, int *n_out);
/* `repeat` profiled training steps of m (cnn_model_profile_train; labels host int64) and optimizer updates (SGD
 * with momentum into mom): the median of each step's time, summed per op kind into ops (*n_ops of them, at most
 * BENCH_OP_KINDS) in the order of first appearance. */
cnn_status bench_train_ops(cnn_backend *be, cnn_model *m, int batch, const int64_t *labels, float *mom, int repeat,
                           bench_op_time *ops, int *n_ops);

#endif
