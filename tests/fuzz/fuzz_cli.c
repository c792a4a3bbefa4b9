/* fuzz_cli.c — the command-line option parser (apps/cli.c) on any argument vector: the input's NUL-separated
 * pieces are argv of a table holding every option kind (the model and common options of every subcommand, and
 * one of each kind besides). Parsing gives "continue", exit 0 (help) or 2 (usage error); every value a parsed
 * option stores is in its declared range or one of its choices; the model options that follow parse or are a
 * usage error. */
#include "../../apps/cli.h"
#include "fuzz.h"

#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    int fd = open("/dev/null", O_WRONLY); /* help text is not the point (usage errors: cli.options) */
    if (fd >= 0) {
        dup2(fd, 1);
        close(fd);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int init;
    if (!init++) LLVMFuzzerInitialize(NULL, NULL);
    char *buf = malloc(size + 1);
    REQUIRE(buf);
    memcpy(buf, data, size);
    buf[size] = 0;
    char *argv[65];
    int argc = 0;
    argv[argc++] = "train";
    for (size_t i = 0; i < size && argc < 64;) {
        argv[argc++] = buf + i;
        i += strlen(buf + i) + 1;
    }
    argv[argc] = NULL;
    cli_table t = {0};
    cli_common c = {0};
    cli_model mm = {0};
    int n = 0;
    int64_t s = 0;
    float x = 0;
    const char *str = NULL, *choice = "a";
    bool flag = false;
    cli_add_model(&t, &mm, true);
    cli_add(&t, (cli_opt){"n", 'n', CLI_INT, "N", &n, -5, 5, NULL, "int"});
    cli_add(&t, (cli_opt){"s", 0, CLI_I64, "S", &s, 0, 1e12, NULL, "i64"});
    cli_add(&t, (cli_opt){"x", 'x', CLI_FLOAT, "X", &x, -1, 1e3, NULL, "float"});
    cli_add(&t, (cli_opt){"str", 0, CLI_STR, "S", &str, 0, 0, NULL, "string"});
    cli_add(&t, (cli_opt){"choice", 0, CLI_CHOICE, NULL, &choice, 0, 0, "a|bb|ccc", "choice"});
    cli_add(&t, (cli_opt){"flag", 'f', CLI_FLAG, NULL, &flag, 0, 0, NULL, "flag"});
    cli_add_common(&t, &c);
    int rc = cli_parse(&t, "fuzz", "[options]", "fuzz target", argc, argv);
    REQUIRE(rc == -1 || rc == CLI_EXIT_OK || rc == CLI_EXIT_USAGE);
    if (rc == -1) {
        REQUIRE(n >= -5 && n <= 5 && s >= 0 && s <= 1000000000000LL && isfinite(x) && x >= -1 && x <= 1e3);
        REQUIRE(!strcmp(choice, "a") || !strcmp(choice, "bb") || !strcmp(choice, "ccc"));
        REQUIRE(mm.num_classes >= 1 && mm.num_classes <= 1000000 && mm.seed >= 0 && mm.dropout >= 0 && mm.dropout <= 0.99f);
        REQUIRE(c.threads >= 0 && c.threads <= 4096);
        cnn_model_opts mo;
        int h = 0, w = 0;
        rc = cli_model_opts("fuzz", &t, &mm, 10, &mo, &h, &w);
        REQUIRE(rc == -1 || rc == CLI_EXIT_USAGE);
        if (rc == -1) REQUIRE(h >= 1 && h <= 8192 && w >= 1 && w <= 8192 && mo.num_classes >= 1);
    }
    free(buf);
    return 0;
}
