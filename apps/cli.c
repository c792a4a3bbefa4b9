/* cli.c — option parsing and --help from one table, shared options, error reporting. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cli_add(cli_table *t, cli_opt o) {
    CNN_ASSERT(t->n < CLI_MAX_OPTS);
    t->opts[t->n++] = o;
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "cnn %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see 'cnn %s --help')\n", cmd);
    return CLI_EXIT_USAGE;
}

int cli_fail(cnn_status st) {
    const char *msg = cnn_error_msg();
    fprintf(stderr, "cnn: %s\n", msg[0] ? msg : cnn_status_str(st));
    return st == CNN_E_INVALID ? CLI_EXIT_USAGE : CLI_EXIT_RUNTIME;
}

static bool in_choices(const char *choices, const char *v) {
    size_t n = strlen(v);
    for (const char *p = choices; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, v, n) == 0) return true;
        if (!bar) break;
        p = bar + 1;
    }
    return false;
}

static void print_help(const cli_table *t, const char *cmd, const char *synopsis, const char *description) {
    printf("usage: cnn %s %s\n\n%s\n\noptions:\n", cmd, synopsis, description);
    for (int i = 0; i < t->n; i++) {
        const cli_opt *o = &t->opts[i];
        char left[96];
        int k = 0;
        if (o->short_name) k += snprintf(left + k, sizeof left - (size_t)k, "-%c, ", o->short_name);
        k += snprintf(left + k, sizeof left - (size_t)k, "--%s", o->name);
        if (o->kind != CLI_FLAG)
            snprintf(left + k, sizeof left - (size_t)k, " %s",
                     o->kind == CLI_CHOICE ? o->choices : (o->metavar ? o->metavar : "V"));
        printf("  %-34s %s", left, o->help);
        switch (o->kind) {
        case CLI_INT: printf(" (default %d)", *(int *)o->dst); break;
        case CLI_I64: printf(" (default %lld)", (long long)*(int64_t *)o->dst); break;
        case CLI_FLOAT: printf(" (default %g)", (double)*(float *)o->dst); break;
        case CLI_STR:
        case CLI_CHOICE:
            if (*(const char **)o->dst) printf(" (default %s)", *(const char **)o->dst);
            break;
        default: break;
        }
        printf("\n");
    }
    printf("  %-34s %s\n", "-h, --help", "show this help");
}

static int set_value(cli_opt *o, const char *cmd, const char *v) {
    char *end = NULL;
    errno = 0;
    switch (o->kind) {
    case CLI_FLAG: *(bool *)o->dst = true; return -1;
    case CLI_INT:
    case CLI_I64: {
        long long x = strtoll(v, &end, 10);
        if (!*v || *end || errno) return cli_usage_error(cmd, "--%s expects an integer, got '%s'", o->name, v);
        if ((double)x < o->lo || (double)x > o->hi)
            return cli_usage_error(cmd, "--%s %lld out of range [%.0f, %.0f]", o->name, x, o->lo, o->hi);
        if (o->kind == CLI_INT) *(int *)o->dst = (int)x;
        else *(int64_t *)o->dst = (int64_t)x;
        return -1;
    }
    case CLI_FLOAT: {
        double x = strtod(v, &end);
        if (!*v || *end || errno || !isfinite(x))
            return cli_usage_error(cmd, "--%s expects a number, got '%s'", o->name, v);
        if (x < o->lo || x > o->hi) return cli_usage_error(cmd, "--%s %g out of range [%g, %g]", o->name, x, o->lo, o->hi);
        *(float *)o->dst = (float)x;
        return -1;
    }
    case CLI_STR:
        if (!*v) return cli_usage_error(cmd, "--%s expects a value", o->name);
        *(const char **)o->dst = v;
        return -1;
    case CLI_CHOICE:
        if (!in_choices(o->choices, v))
            return cli_usage_error(cmd, "--%s: '%s' is not one of %s", o->name, v, o->choices);
        *(const char **)o->dst = v;
        return -1;
    }
    return -1;
}

int cli_parse(cli_table *t, const char *cmd, const char *synopsis, const char *description, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            print_help(t, cmd, synopsis, description);
            return CLI_EXIT_OK;
        }
        cli_opt *o = NULL;
        const char *inline_val = NULL;
        if (a[0] == '-' && a[1] == '-' && a[2]) {
            const char *name = a + 2, *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            for (int j = 0; j < t->n; j++)
                if (strlen(t->opts[j].name) == len && strncmp(t->opts[j].name, name, len) == 0) o = &t->opts[j];
            if (eq) inline_val = eq + 1;
        } else if (a[0] == '-' && a[1] && !a[2]) {
            for (int j = 0; j < t->n; j++)
                if (t->opts[j].short_name == a[1]) o = &t->opts[j];
        } else {
            return cli_usage_error(cmd, "unexpected argument '%s'", a);
        }
        if (!o) return cli_usage_error(cmd, "unknown option '%s'", a);
        if (t->seen[o - t->opts]) return cli_usage_error(cmd, "--%s given twice", o->name);
        t->seen[o - t->opts] = true;
        if (o->kind == CLI_FLAG) {
            if (inline_val) return cli_usage_error(cmd, "--%s takes no value", o->name);
            *(bool *)o->dst = true;
            continue;
        }
        const char *v = inline_val;
        if (!v) {
            if (i + 1 >= argc) return cli_usage_error(cmd, "--%s needs a value", o->name);
            v = argv[++i];
        }
        int rc = set_value(o, cmd, v);
        if (rc >= 0) return rc;
    }
    return -1;
}

bool cli_seen(const cli_table *t, const char *name) {
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->opts[i].name, name) == 0) return t->seen[i];
    return false;
}

void cli_add_common(cli_table *t, cli_common *c) {
    c->device = "auto";
    c->threads = 0;
    c->dtype = "fp32";
    c->cache_dir = NULL;
    c->tune = "fast";
    cli_add(t, (cli_opt){"device", 0, CLI_CHOICE, NULL, &c->device, 0, 0, "cpu|cuda|auto", "where to compute"});
    cli_add(t, (cli_opt){"threads", 0, CLI_INT, "N", &c->threads, 0, 4096, NULL, "CPU threads (0 = all cores)"});
    cli_add(t, (cli_opt){"dtype", 0, CLI_CHOICE, NULL, &c->dtype, 0, 0, "fp32|tf32|bf16|fp16", "compute precision"});
    cli_add(t, (cli_opt){"deterministic", 0, CLI_FLAG, NULL, &c->deterministic, 0, 0, NULL,
                         "bitwise-reproducible kernels"});
    cli_add(t, (cli_opt){"cache-dir", 0, CLI_STR, "DIR", &c->cache_dir, 0, 0, NULL,
                         "GPU kernel cache (default $CNN_CACHE_DIR or ~/.cache/cnn)"});
    cli_add(t, (cli_opt){"tune", 0, CLI_CHOICE, NULL, &c->tune, 0, 0, "none|fast|full",
                         "GPU kernel autotuning: none = heuristic; fast = a few candidates per layer, timed once and "
                         "cached; full = all candidates"});
    cli_add(t, (cli_opt){"quiet", 'q', CLI_FLAG, NULL, &c->quiet, 0, 0, NULL, "errors only on stderr"});
    cli_add(t, (cli_opt){"verbose", 'v', CLI_FLAG, NULL, &c->verbose, 0, 0, NULL, "more messages on stderr"});
}

void cli_add_model(cli_table *t, cli_model *m, bool weights) {
    m->model = NULL;
    m->num_classes = 1000;
    m->stem = "imagenet";
    m->input_size = NULL;
    m->weights = NULL;
    m->seed = 0;
    m->dropout = 0.5f;
    m->allow_nonfinite = false;
    cli_add(t, (cli_opt){"model", 0, CLI_STR, "M", &m->model, 0, 0, NULL,
                         "resnet18|34|50|101|152, vgg11|13|16|19[_bn]"});
    cli_add(t, (cli_opt){"num-classes", 0, CLI_INT, "N", &m->num_classes, 1, 1000000, NULL,
                         "classifier outputs (default 1000; 10 for CIFAR-shaped data)"});
    cli_add(t, (cli_opt){"stem", 0, CLI_CHOICE, NULL, &m->stem, 0, 0, "imagenet|cifar",
                         "ResNet stem; cifar = conv1 3x3/1, no max-pool"});
    cli_add(t, (cli_opt){"input-size", 0, CLI_STR, "H[xW]", &m->input_size, 0, 0, NULL,
                         "input resolution (default 224; 32 with --stem cifar)"});
    if (weights) {
        cli_add(t, (cli_opt){"weights", 0, CLI_STR, "W.safetensors", &m->weights, 0, 0, NULL,
                             "torchvision state_dict as safetensors (default: fresh initialisation)"});
        cli_add(t, (cli_opt){"allow-nonfinite", 0, CLI_FLAG, NULL, &m->allow_nonfinite, 0, 0, NULL,
                             "load weights holding NaN/Inf or negative running variances (refused by default)"});
    }
    cli_add(t, (cli_opt){"seed", 0, CLI_I64, "S", &m->seed, 0, 9.2e18, NULL, "weight initialisation seed"});
    cli_add(t, (cli_opt){"dropout", 0, CLI_FLOAT, "P", &m->dropout, 0, 0.99, NULL, "VGG classifier dropout"});
    m->in_channels = 3;
    cli_add(t, (cli_opt){"in-channels", 0, CLI_INT, "C", &m->in_channels, 1, 3, NULL,
                         "image channels of the first conv (1: grayscale data as is; 3: its channel repeated)"});
}

int cli_backend(const cli_common *c, cnn_backend **be) {
    cnn_log_set_level(c->quiet ? 0 : c->verbose ? 2 : 1);
    cnn_backend_opts o = {.device = c->device, .threads = c->threads, .act_dtype = CNN_DTYPE_F32,
                          .allow_tf32 = false, .deterministic = c->deterministic, .cache_dir = c->cache_dir,
                          .gpu_index = c->gpu_index};
    if (strcmp(c->dtype, "bf16") == 0) o.act_dtype = CNN_DTYPE_BF16;
    else if (strcmp(c->dtype, "fp16") == 0) o.act_dtype = CNN_DTYPE_F16;
    else if (strcmp(c->dtype, "tf32") == 0) o.allow_tf32 = true;
    o.tune = strcmp(c->tune, "none") == 0 ? CNN_TUNE_NONE : strcmp(c->tune, "full") == 0 ? CNN_TUNE_FULL : CNN_TUNE_FAST;
    cnn_status st = cnn_backend_create(&o, be);
    if (st != CNN_OK) return cli_fail(st);
    cnn_log(2, "cnn: backend %s: %s", (*be)->name, (*be)->device_name);
    return -1;
}

int cli_model_opts(const char *cmd, const cli_table *t, const cli_model *m, int default_classes, cnn_model_opts *mo,
                   int *h, int *w) {
    *mo = cnn_model_opts_default();
    if (!m->model) return cli_usage_error(cmd, "--model is required");
    mo->arch = m->model;
    mo->stem = strcmp(m->stem, "cifar") == 0 ? CNN_STEM_CIFAR : CNN_STEM_IMAGENET;
    mo->num_classes = cli_seen(t, "num-classes") ? m->num_classes : default_classes;
    mo->seed = (uint64_t)m->seed;
    mo->dropout = m->dropout;
    mo->in_channels = m->in_channels;
    int d = mo->stem == CNN_STEM_CIFAR ? 32 : 224;
    *h = *w = d;
    if (m->input_size) {
        char *end;
        errno = 0;
        long a = strtol(m->input_size, &end, 10), b = a;
        if (*end == 'x') b = strtol(end + 1, &end, 10);
        if (*end || errno || a < 1 || b < 1 || a > 8192 || b > 8192)
            return cli_usage_error(cmd, "--input-size '%s' is not H or HxW with sizes in [1, 8192]", m->input_size);
        *h = (int)a;
        *w = (int)b;
    }
    return -1;
}

float *cli_random_images(size_t count, uint64_t key, uint64_t stream) {
    float *x = cnn_malloc(count * sizeof *x, "random images");
    for (size_t i = 0; x && i < count; i++) {
        uint32_t q[4];
        cnn_philox(key, stream, i, q);
        x[i] = 2.0f * cnn_u01(q[0]) - 1.0f;
    }
    return x;
}

/* s as the inside of a JSON string (quotes and backslashes escaped, control characters as spaces). */
const char *cli_json_esc(const char *s, char *buf, size_t cap) {
    size_t b = 0;
    for (; *s && b + 3 < cap; s++) {
        if (*s == '"' || *s == '\\') buf[b++] = '\\';
        buf[b++] = (unsigned char)*s < 32 ? ' ' : *s;
    }
    buf[b] = 0;
    return buf;
}

/* s as a quoted CSV field (inner quotes doubled). */
const char *cli_csv_esc(const char *s, char *buf, size_t cap) {
    size_t b = 0;
    buf[b++] = '"';
    for (; *s && b + 4 < cap; s++) {
        if (*s == '"') buf[b++] = '"';
        buf[b++] = (unsigned char)*s < 32 ? ' ' : *s;
    }
    buf[b++] = '"';
    buf[b] = 0;
    return buf;
}
