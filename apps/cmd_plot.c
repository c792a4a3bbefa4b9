/* cmd_plot.c — `cnn plot RUN_DIR [RUN_DIR...]`: training curves of runs as one SVG (src/core/plot.c). */
#include "cli.h"
#include "cnn/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RUNS 64

int cmd_plot(int argc, char **argv) {
    cli_table t = {0};
    const char *out = NULL;
    cli_add(&t, (cli_opt){"out", 0, CLI_STR, "FILE.svg", &out, 0, 0, NULL,
                          "where the SVG goes (default: RUN_DIR/curves.svg of the first run)"});
    /* run directories are the arguments that are neither options nor their values */
    const char *dirs[MAX_RUNS];
    char *opts[2 * CLI_MAX_OPTS + 2];
    int nd = 0, no = 0;
    for (int i = 0; i < argc; i++) {
        bool value = i > 0 && strcmp(argv[i - 1], "--out") == 0;
        if (i == 0 || argv[i][0] == '-' || value) {
            if (no == (int)(sizeof opts / sizeof opts[0])) return cli_usage_error("plot", "too many arguments");
            opts[no++] = argv[i];
        } else if (nd == MAX_RUNS) {
            return cli_usage_error("plot", "at most %d runs", MAX_RUNS);
        } else {
            dirs[nd++] = argv[i];
        }
    }
    int rc = cli_parse(&t, "plot", "RUN_DIR [RUN_DIR...] [--out FILE.svg]",
                       "Draw loss, accuracy (train per step; eval top-1 per epoch) and learning rate against the step, "
                       "from each run's metrics.jsonl (written by cnn train), one colour per run, into one SVG.",
                       no, opts);
    if (rc >= 0) return rc;
    if (nd == 0) return cli_usage_error("plot", "give at least one RUN_DIR");
    char def[4096];
    if (!out) {
        snprintf(def, sizeof def, "%s/curves.svg", dirs[0]);
        out = def;
    }
    cnn_status st = cnn_plot_runs(dirs, nd, out);
    if (st != CNN_OK) return cli_fail(st);
    fprintf(stderr, "cnn: wrote %s (%d run%s)\n", out, nd, nd == 1 ? "" : "s");
    return CLI_EXIT_OK;
}
