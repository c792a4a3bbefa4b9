/* main.c — `cnn`: the command-line front end. Dispatches to one function per subcommand (cmd_*.c). */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *summary;
} commands[] = {
    {"train", cmd_train, "train a model (synthetic, CIFAR, MNIST-format or image-folder data) with checkpoints"},
    {"eval", cmd_eval, "evaluate weights on a dataset: loss, top-1, top-5"},
    {"infer", cmd_infer, "classify pictures (JPEG/PNG: top-5 classes), or logits for tensors (safetensors)"},
    {"grad", cmd_grad, "one training-mode forward + backward: loss and every parameter gradient"},
    {"bench", cmd_bench, "throughput and latency (median of N timed runs)"},
    {"tune", cmd_tune, "compile and autotune a model's GPU kernels ahead of time (fills the caches)"},
    {"info", cmd_info, "per-layer table: output shapes, parameters, FLOPs, memory"},
    {"plot", cmd_plot, "training curves (loss, accuracy, learning rate) of runs as an SVG"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: cnn <command> [options]   (cnn <command> --help for its options)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-6s  %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nmodels: %s\n", cnn_zoo_names());
    fprintf(f, "exit status: 0 ok, 1 runtime error, 2 usage error\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return CLI_EXIT_USAGE;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return CLI_EXIT_OK;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("cnn %s (commit %s)\n", CNN_VERSION, CNN_COMMIT);
        return CLI_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "cnn: unknown command '%s' (commands:", argv[1]);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) fprintf(stderr, " %s", commands[i].name);
    fprintf(stderr, "; cnn --help for more)\n");
    return CLI_EXIT_USAGE;
}
