/* cmd_bench.c — `cnn bench`: throughput and latency of inference or a training step, llama-bench style.
 *
 * For every (model, batch, dtype) in the lists: build the model, warm up (kernel compilation, tuning, graph
 * capture happen here and are reported as setup time), then time `repeat` runs with the backend's timer
 * (CUDA events on a GPU, a synchronised monotonic clock on the CPU) and report the median and spread.
 * Output: a markdown table (default), or csv / json (one array) / jsonl (one object per line); the JSON
 * schema is documented in docs/BENCH.md.
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct bench_row {
    char model[32], dtype[8], mode[8], input[24];
    int batch, repeat, warmup;
    double ms_median, ms_min, ms_max, ms_p10, ms_p90, setup_s, images_per_s, gflop, tflops;
    double mem_mib;
    cnn_status st;
    char error[256];
} bench_row;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Split "a,b,c" into at most cap entries (modifies s). */
static int split_list(char *s, char **out, int cap) {
    int n = 0;
    for (char *tok = strtok(s, ","); tok && n < cap; tok = strtok(NULL, ",")) out[n++] = tok;
    return n;
}

static cnn_status run_one(cnn_backend *be, const cnn_model_opts *mo, int h, int w, int batch, bool train, int warmup,
                          int repeat, bench_row *r) {
    double t0 = cnn_now();
    cnn_model *m = NULL;
    cnn_status st = cnn_model_create(mo, be, h, w, batch, train, &m);
    float *x = NULL, *wbuf = NULL, *gbuf = NULL;
    int64_t *labels = NULL;
    double *ms = calloc((size_t)repeat, sizeof *ms);
    if (st == CNN_OK) {
        size_t count = (size_t)batch * 3 * h * w;
        x = malloc(count * sizeof *x);
        labels = malloc((size_t)batch * sizeof *labels);
        if (!x || !labels || !ms) st = cnn_fail(CNN_E_OOM, "out of host memory for the benchmark input");
        for (size_t i = 0; st == CNN_OK && i < count; i++) {
            uint32_t q[4];
            cnn_philox(7, 1, i, q);
            x[i] = 2.0f * cnn_u01(q[0]) - 1.0f;
        }
        for (int i = 0; st == CNN_OK && i < batch; i++) labels[i] = i % mo->num_classes;
    }
    if (st == CNN_OK) st = cnn_model_upload_input(m, x, batch);
    cnn_sgd sgd = {.lr = 1e-4f, .momentum = 0.9f, .weight_decay = 5e-4f, .first_step = true};
    float *mom = NULL;
    const cnn_net *net = m ? cnn_model_net(m) : NULL;
    if (st == CNN_OK && train) {
        st = be->alloc(be, (size_t)net->n_trainable * 4, "momentum", (void **)&mom);
        if (st == CNN_OK) st = be->zero(be, mom, (size_t)net->n_trainable * 4);
    }
    for (int it = 0; st == CNN_OK && it < warmup + repeat; it++) {
        if (it >= warmup) st = be->time_begin(be);
        if (st != CNN_OK) break;
        if (train) {
            float loss;
            st = cnn_model_forward(m, batch, CNN_MODE_TRAIN, (uint64_t)it);
            if (st == CNN_OK) st = cnn_model_backward(m, batch, labels, 0.0f, &loss);
            if (st == CNN_OK) st = be->sgd_update(be, &sgd, net->n_trainable, cnn_model_params(m), cnn_model_grads(m), mom, 1.0f);
            if (st == CNN_OK) st = cnn_model_params_changed(m);
            sgd.first_step = false;
        } else {
            st = cnn_model_forward(m, batch, CNN_MODE_EVAL, 0);
        }
        if (st == CNN_OK) st = be->sync(be);
        if (st == CNN_OK && it >= warmup) st = be->time_end(be, &ms[it - warmup]);
        if (it == warmup - 1 || (warmup == 0 && it == 0)) r->setup_s = cnn_now() - t0;
    }
    if (st == CNN_OK) {
        qsort(ms, (size_t)repeat, sizeof *ms, cmp_double);
        r->ms_median = repeat % 2 ? ms[repeat / 2] : 0.5 * (ms[repeat / 2 - 1] + ms[repeat / 2]);
        r->ms_min = ms[0];
        r->ms_max = ms[repeat - 1];
        r->ms_p10 = ms[(repeat - 1) / 10];
        r->ms_p90 = ms[(repeat - 1) - (repeat - 1) / 10];
        int64_t flops = 0;
        for (int i = 0; i < net->n_nodes; i++) flops += cnn_node_flops(net, i);
        r->gflop = (double)flops * batch * (train ? 3.0 : 1.0) / 1e9;
        r->images_per_s = batch / (r->ms_median / 1e3);
        r->tflops = r->gflop / r->ms_median;  /* GFLOP per ms = TFLOP/s */
        r->mem_mib = (double)(be->peak_bytes ? be->peak_bytes(be) : cnn_model_device_bytes(m)) / 1048576.0;
    }
    if (mom) be->free(be, mom);
    free(x);
    free(wbuf);
    free(gbuf);
    free(labels);
    free(ms);
    cnn_model_free(m);
    return st;
}

int cmd_bench(int argc, char **argv) {
    cli_table t = {0};
    cli_common c = {0};
    cli_model mm = {0};
    const char *batches = "32", *mode = "infer", *format = "md", *dtypes = NULL;
    int repeat = 10, warmup = 2;
    cli_add_model(&t, &mm, false);
    cli_add(&t, (cli_opt){"batch", 0, CLI_STR, "B[,B...]", &batches, 0, 0, NULL, "batch sizes"});
    cli_add(&t, (cli_opt){"mode", 0, CLI_CHOICE, NULL, &mode, 0, 0, "infer|train",
                          "inference (eval, fused) or a training step (forward, backward, SGD)"});
    cli_add(&t, (cli_opt){"repeat", 0, CLI_INT, "N", &repeat, 1, 100000, NULL, "timed runs (median reported)"});
    cli_add(&t, (cli_opt){"warmup", 0, CLI_INT, "N", &warmup, 0, 100000, NULL, "untimed runs first"});
    cli_add(&t, (cli_opt){"output", 'o', CLI_CHOICE, NULL, &format, 0, 0, "md|csv|json|jsonl", "output format"});
    cli_add(&t, (cli_opt){"dtypes", 0, CLI_STR, "D[,D...]", &dtypes, 0, 0, NULL, "several of fp32,tf32,bf16,fp16 (overrides --dtype)"});
    cli_add_common(&t, &c);
    int rc = cli_parse(&t, "bench", "--model M[,M...] --batch B[,B...] [--mode infer|train] [-o md|csv|json|jsonl]",
                       "Time the model: median (and min, p10, p90, max) of --repeat runs after --warmup runs; "
                       "images/s, ms per batch, achieved TFLOP/s, peak memory and setup time.",
                       argc, argv);
    if (rc >= 0) return rc;
    if (!mm.model) return cli_usage_error("bench", "--model is required");
    char model_buf[512], batch_buf[256], dtype_buf[128];
    snprintf(model_buf, sizeof model_buf, "%s", mm.model);
    snprintf(batch_buf, sizeof batch_buf, "%s", batches);
    snprintf(dtype_buf, sizeof dtype_buf, "%s", dtypes ? dtypes : c.dtype);
    char *models[32], *bl[32], *dl[8];
    int nm = split_list(model_buf, models, 32), nb = split_list(batch_buf, bl, 32), nd = split_list(dtype_buf, dl, 8);
    int bvals[32];
    for (int i = 0; i < nb; i++) {
        char *end;
        long v = strtol(bl[i], &end, 10);
        if (*end || v < 1 || v > 65536) return cli_usage_error("bench", "--batch '%s' is not a list of sizes in [1, 65536]", batches);
        bvals[i] = (int)v;
    }
    for (int i = 0; i < nd; i++)
        if (strcmp(dl[i], "fp32") && strcmp(dl[i], "tf32") && strcmp(dl[i], "bf16") && strcmp(dl[i], "fp16"))
            return cli_usage_error("bench", "dtype '%s' is not one of fp32, tf32, bf16, fp16", dl[i]);
    bool train = strcmp(mode, "train") == 0;
    int nrows = nm * nb * nd, nr = 0;
    bench_row *rows = calloc((size_t)nrows, sizeof *rows);
    if (!rows) return cli_fail(cnn_fail(CNN_E_OOM, "out of host memory"));
    char device_name[160] = "", backend_name[16] = "";
    int failures = 0;
    for (int di = 0; di < nd; di++) {
        cli_common cc = c;
        cc.dtype = dl[di];
        cnn_backend *be = NULL;
        if ((rc = cli_backend(&cc, &be)) >= 0) {
            free(rows);
            return rc;
        }
        snprintf(device_name, sizeof device_name, "%s", be->device_name);
        snprintf(backend_name, sizeof backend_name, "%s", be->name);
        for (int mi = 0; mi < nm; mi++) {
            cli_model m2 = mm;
            m2.model = models[mi];
            cnn_model_opts mo;
            int h, w;
            if ((rc = cli_model_opts("bench", &t, &m2, 1000, &mo, &h, &w)) >= 0) {
                cnn_backend_destroy(be);
                free(rows);
                return rc;
            }
            for (int bi = 0; bi < nb; bi++) {
                bench_row *r = &rows[nr++];
                snprintf(r->model, sizeof r->model, "%s%s", mo.arch, mo.stem == CNN_STEM_CIFAR ? "-cifar" : "");
                snprintf(r->dtype, sizeof r->dtype, "%s", dl[di]);
                snprintf(r->mode, sizeof r->mode, "%s", mode);
                snprintf(r->input, sizeof r->input, "%dx%d", h, w);
                r->batch = bvals[bi];
                r->repeat = repeat;
                r->warmup = warmup;
                r->st = run_one(be, &mo, h, w, bvals[bi], train, warmup, repeat, r);
                if (r->st != CNN_OK) {
                    snprintf(r->error, sizeof r->error, "%s", cnn_error_msg());
                    fprintf(stderr, "cnn: %s batch %d %s: %s\n", r->model, r->batch, r->dtype, r->error);
                    failures++;
                }
            }
        }
        cnn_backend_destroy(be);
    }
    char date[32];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    if (strcmp(format, "md") == 0) {
        printf("device: %s (%s), cnn %s commit %s, %s\n\n", device_name, backend_name, CNN_VERSION, CNN_COMMIT, date);
        printf("| model | input | batch | dtype | mode | ms (median) | min..max | images/s | TFLOP/s | peak MiB | setup s |\n");
        printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
        for (int i = 0; i < nr; i++) {
            bench_row *r = &rows[i];
            if (r->st != CNN_OK) {
                printf("| %s | %s | %d | %s | %s | error: %s |||||\n", r->model, r->input, r->batch, r->dtype, r->mode, r->error);
                continue;
            }
            printf("| %s | %s | %d | %s | %s | %.3f | %.3f..%.3f | %.1f | %.3f | %.0f | %.2f |\n", r->model, r->input,
                   r->batch, r->dtype, r->mode, r->ms_median, r->ms_min, r->ms_max, r->images_per_s, r->tflops,
                   r->mem_mib, r->setup_s);
        }
    } else if (strcmp(format, "csv") == 0) {
        printf("impl,model,input,batch,dtype,mode,device,backend,ms_median,ms_min,ms_p10,ms_p90,ms_max,images_per_s,tflops,"
               "peak_mib,setup_s,repeat,warmup,commit,date,error\n");
        for (int i = 0; i < nr; i++) {
            bench_row *r = &rows[i];
            printf("cnn,%s,%s,%d,%s,%s,\"%s\",%s,%.4f,%.4f,%.4f,%.4f,%.4f,%.2f,%.4f,%.1f,%.3f,%d,%d,%s,%s,\"%s\"\n",
                   r->model, r->input, r->batch, r->dtype, r->mode, device_name, backend_name, r->ms_median, r->ms_min,
                   r->ms_p10, r->ms_p90, r->ms_max, r->images_per_s, r->tflops, r->mem_mib, r->setup_s, r->repeat,
                   r->warmup, CNN_COMMIT, date, r->error);
        }
    } else {
        bool lines = strcmp(format, "jsonl") == 0;
        if (!lines) printf("[\n");
        for (int i = 0; i < nr; i++) {
            bench_row *r = &rows[i];
            char err[300] = "";
            for (size_t a = 0, b = 0; r->error[a] && b + 2 < sizeof err; a++) {
                if (r->error[a] == '"' || r->error[a] == '\\') err[b++] = '\\';
                err[b++] = (char)(r->error[a] < 32 ? ' ' : r->error[a]);
                err[b] = 0;
            }
            printf("%s{\"impl\":\"cnn\",\"model\":\"%s\",\"input\":\"%s\",\"batch\":%d,\"dtype\":\"%s\",\"mode\":\"%s\","
                   "\"device\":\"%s\",\"backend\":\"%s\",\"ok\":%s,\"ms_median\":%.4f,\"ms_min\":%.4f,\"ms_p10\":%.4f,"
                   "\"ms_p90\":%.4f,\"ms_max\":%.4f,\"images_per_s\":%.2f,\"tflops\":%.4f,\"gflop_per_batch\":%.4f,"
                   "\"peak_mib\":%.1f,\"setup_s\":%.3f,\"repeat\":%d,\"warmup\":%d,\"version\":\"%s\",\"commit\":\"%s\","
                   "\"date\":\"%s\",\"error\":\"%s\"}%s\n",
                   lines ? "" : "  ", r->model, r->input, r->batch, r->dtype, r->mode, device_name, backend_name,
                   r->st == CNN_OK ? "true" : "false", r->ms_median, r->ms_min, r->ms_p10, r->ms_p90, r->ms_max,
                   r->images_per_s, r->tflops, r->gflop, r->mem_mib, r->setup_s, r->repeat, r->warmup, CNN_VERSION,
                   CNN_COMMIT, date, err, !lines && i + 1 < nr ? "," : "");
        }
        if (!lines) printf("]\n");
    }
    free(rows);
    return failures ? CLI_EXIT_RUNTIME : CLI_EXIT_OK;
}
