/* cli.h — the command line's option tables, parsing and the options every subcommand shares.
 *
 * Each subcommand declares a table of cli_opt; the same table parses argv, validates values (numbers fully
 * parsed and range-checked, choices from a fixed list) and prints --help, so help and parser cannot
 * disagree. Exit codes: 0 ok, 1 runtime error, 2 usage error.
 */
#ifndef CNN_CLI_H
#define CNN_CLI_H

#include "cnn/data.h"
#include "cnn/dist.h"

#define CLI_EXIT_OK 0
#define CLI_EXIT_RUNTIME 1
#define CLI_EXIT_USAGE 2

typedef enum cli_kind {
    CLI_FLAG = 0, /* bool, no value           */
    CLI_INT,      /* int, range [lo, hi]      */
    CLI_I64,      /* int64_t, range [lo, hi]  */
    CLI_FLOAT,    /* float, finite, [lo, hi]  */
    CLI_STR,      /* const char *             */
    CLI_CHOICE,   /* const char *, one of `choices` ("a|b|c") */
} cli_kind;

typedef struct cli_opt {
    const char *name;    /* long name without dashes */
    char short_name;     /* 0 = none */
    cli_kind kind;
    const char *metavar;
    void *dst;
    double lo, hi;
    const char *choices;
    const char *help;
} cli_opt;

#define CLI_MAX_OPTS 96

typedef struct cli_table {
    cli_opt opts[CLI_MAX_OPTS];
    bool seen[CLI_MAX_OPTS]; /* set by the parser: the option was given */
    int n;
} cli_table;

void cli_add(cli_table *t, cli_opt o);
/* Parse argv (argv[0] is the subcommand). Returns -1 to continue, or an exit code (0 after --help). */
int cli_parse(cli_table *t, const char *cmd, const char *synopsis, const char *description, int argc, char **argv);
bool cli_seen(const cli_table *t, const char *name);
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Print the recorded error ("cnn: <message>") and map the status to an exit code. */
int cli_fail(cnn_status st);

/* Options every subcommand takes. */
typedef struct cli_common {
    const char *device;
    int threads;
    const char *dtype;
    bool deterministic;
    bool quiet, verbose;
    const char *cache_dir;
    const char *tune;
    int gpu_index;      /* not an option: a worker's GPU (cli_dist_prepare) */
} cli_common;

/* Options every subcommand with a model takes. */
typedef struct cli_model {
    const char *model;
    int num_classes;
    const char *stem;
    const char *input_size;
    const char *weights;
    int64_t seed;
    float dropout;
    bool allow_nonfinite;
    int in_channels;
} cli_model;

void cli_add_common(cli_table *t, cli_common *c);
void cli_add_model(cli_table *t, cli_model *m, bool weights);
/* Apply verbosity, create the backend; prints the error and returns an exit code on failure, else -1. */
int cli_backend(const cli_common *c, cnn_backend **be);
/* Model options and input size. default_classes is used when --num-classes is absent. Returns -1 or an exit code. */
int cli_model_opts(const char *cmd, const cli_table *t, const cli_model *m, int default_classes, cnn_model_opts *mo,
                   int *h, int *w);

/* Multi-GPU options of train and bench (cli_dist.c). */
typedef struct cli_dist {
    const char *gpus, *init, *allreduce;
    float timeout_s, bucket_mb;
    bool sync_bn;
    cnn_dist_env env_out[1]; /* this process's place, set by cli_dist_prepare */
} cli_dist;
void cli_add_dist(cli_table *t, cli_dist *d);
/* The model's data-parallel options from them, for `world` ranks (cnn_model_set_comm). */
cnn_dp_opts cli_dist_dp_opts(const cli_dist *d, int world);
/* After parsing: -1 to go on in this process (one process, or a worker: d->env_out says which; c->gpu_index is
 * its GPU), or an exit code: a usage error (--gpus on a machine without NCCL or with too few GPUs), or the
 * launcher's result once its workers are done. argv: the subcommand's (argv[0] its name). */
int cli_dist_prepare(const char *cmd, cli_dist *d, cli_common *c, int argc, char **argv);

/* Data options of train and eval (cli_data.c). */
typedef struct cli_data {
    const char *data, *mean, *std, *on_bad, *decode;
    bool coarse;
    float holdout, crop_scale;
    int resize, pad, workers;
    bool deterministic; /* not an option: --deterministic (auto decoding keeps timing out of the pixels) */
} cli_data;

void cli_add_data(cli_table *t, cli_data *d, bool train);
/* Load one split; classes: --num-classes when given (every label must be below it), else 0; h, w: the size
 * folder images are cropped to. For `tensors:` data the same file serves both splits. */
cnn_status cli_load_data(const cli_data *d, cnn_split split, int limit, uint64_t seed, int classes, int h, int w,
                         cnn_dataset *ds);

/* s as the inside of a JSON string / as a quoted CSV field, into buf (cut to fit); returns buf */
const char *cli_json_esc(const char *s, char *buf, size_t cap);
const char *cli_csv_esc(const char *s, char *buf, size_t cap);

/* `cnn infer` on pictures (cmd_pictures.c) */
typedef struct cli_pictures {
    const char *input;      /* files and folders, comma-separated */
    const char *output;     /* logits as safetensors, or NULL */
    const char *save_input; /* the prepared input tensor as safetensors, or NULL */
    const char *classes;    /* one class name per line, or NULL */
    const char *format;     /* text | json | csv */
    const char *mean, *std, *on_bad, *weights;
    int resize, batch, h, w;
    const cnn_model_opts *mo;
    const cli_common *common;
} cli_pictures;

/* Whether --input names pictures (a folder, a comma list, an image extension or image bytes). */
bool cli_is_pictures(const char *input);
int cli_infer_pictures(const cli_pictures *a);

/* Subcommands */
/* count uniform floats in [-1, 1) from Philox(key, stream): reproducible benchmark / tuning input; NULL on OOM */
float *cli_random_images(size_t count, uint64_t key, uint64_t stream);

int cmd_info(int argc, char **argv);
int cmd_infer(int argc, char **argv);
int cmd_grad(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_tune(int argc, char **argv);
int cmd_plot(int argc, char **argv);
/* `cnn bench --mode data` (cmd_bench_data.c) */
int cli_bench_data(const char *data, int workers, int batch, int repeat, int warmup, int h, int w);

#endif
