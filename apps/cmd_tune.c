/* cmd_tune.c — `cnn tune`: compile and autotune a model's GPU kernels ahead of time.
 *
 * For every batch size in the list: build the model in eval mode on the chosen backend and run one forward on
 * random images. That first forward compiles every kernel the model needs (or loads it from the disk cache) and,
 * with --tune fast|full, times the candidate configurations of each distinct conv shape once and stores the
 * winners in the tuning cache, so a later `cnn infer` / `cnn bench` with the same model, batch, dtype and cache
 * directory starts warm and tunes nothing. With --mode train the model is built for training instead and runs one
 * training step (forward, loss, backward): the forward convolutions without their folded epilogues, dgrad and
 * wgrad are compiled and tuned as `cnn train` and `cnn bench --mode train` will run them. On the CPU backend there is
 * nothing to compile or tune.
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cmd_tune(int argc, char **argv) {
    cli_table t = {0};
    cli_common c = {0};
    cli_model mm = {0};
    const char *batches = "1,64,256", *mode = "infer";
    cli_add_model(&t, &mm, false);
    cli_add(&t, (cli_opt){"batch", 0, CLI_STR, "B[,B...]", &batches, 0, 0, NULL, "batch sizes to prepare"});
    cli_add(&t, (cli_opt){"mode", 0, CLI_CHOICE, NULL, &mode, 0, 0, "infer|train",
                          "prepare inference (the fused eval forward) or a training step (forward, dgrad, wgrad)"});
    cli_add_common(&t, &c);
    int rc = cli_parse(&t, "tune", "--model M [--batch B[,B...]] [--mode infer|train] [--dtype D] [--tune fast|full]",
                       "Compile the model's GPU kernels and autotune its layers for these batch sizes, filling the "
                       "kernel and tuning caches (--cache-dir) so later runs start warm. One line per batch on stdout.",
                       argc, argv);
    if (rc >= 0) return rc;
    cnn_model_opts mo;
    int h, w;
    if ((rc = cli_model_opts("tune", &t, &mm, 1000, &mo, &h, &w)) >= 0) return rc;
    int bl[32], nb = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", batches);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        char *end;
        long v = strtol(tok, &end, 10);
        if (*end || v < 1 || v > 65536 || nb == 32)
            return cli_usage_error("tune", "--batch '%s': expected up to 32 sizes in 1..65536, comma separated", batches);
        bl[nb++] = (int)v;
    }
    if (nb == 0) return cli_usage_error("tune", "--batch is empty");
    const bool train = strcmp(mode, "train") == 0;

    cnn_backend *be = NULL;
    if ((rc = cli_backend(&c, &be)) >= 0) return rc;
    if (strcmp(be->name, "cuda") != 0)
        fprintf(stderr, "cnn: tune: the %s backend has no kernels to compile or tune; running the forwards anyway\n",
                be->name);
    cnn_status st = CNN_OK;
    for (int i = 0; i < nb && st == CNN_OK; i++) {
        double t0 = cnn_now();
        int tuned0 = be->n_tuned;
        double ts0 = be->tune_seconds;
        cnn_model *m = NULL;
        float *x = cli_random_images((size_t)bl[i] * 3 * h * w, 11, 2);
        if (!x) st = CNN_E_OOM;
        int64_t *labels = calloc((size_t)bl[i], sizeof *labels); /* class 0: the labels do not move the kernels */
        if (!labels) st = CNN_E_OOM;
        if (st == CNN_OK) st = cnn_model_create(&mo, be, h, w, bl[i], train, &m);
        if (st == CNN_OK) st = cnn_model_upload_input(m, x, bl[i]);
        if (st == CNN_OK) st = cnn_model_forward(m, bl[i], train ? CNN_MODE_TRAIN : CNN_MODE_EVAL, 0);
        float loss;
        if (st == CNN_OK && train) st = cnn_model_backward(m, bl[i], labels, 0.0f, &loss);
        if (st == CNN_OK) st = be->sync(be);
        if (st == CNN_OK)
            printf("%s%s %dx%d batch %d %s %s: %d layer shapes tuned (%.2f s of timing), %.2f s in all\n", mo.arch,
                   mo.stem == CNN_STEM_CIFAR ? "-cifar" : "", h, w, bl[i], c.dtype, mode, be->n_tuned - tuned0,
                   be->tune_seconds - ts0, cnn_now() - t0);
        cnn_model_free(m);
        free(x);
        free(labels);
    }
    rc = st == CNN_OK ? CLI_EXIT_OK : cli_fail(st);
    cnn_backend_destroy(be);
    return rc;
}
