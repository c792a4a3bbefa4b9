/* cmd_bench_data.c — `cnn bench --mode data --data folder:DIR`: the input pipeline of folder datasets alone (read,
 * decode, resize, crop into the staging buffers; no model, no device), with the training transform
 * (RandomResizedCrop + flip, JPEGs shrunk in the DCT domain where the crop allows) and the evaluation transform
 * (Resize + CenterCrop, full-size decode: torchvision's pixels). Reports images/s of wall time and images per
 * CPU-second of the whole process (user + system), which is what one core delivers and does not depend on how
 * busy the machine is. */
#include "cli.h"
#include "core/pipeline.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int cli_bench_data(const char *data, int workers, int batch, int repeat, int warmup, int h, int w) {
    if (strncmp(data, "folder:", 7) != 0) return cli_usage_error("bench", "--mode data measures folder:DIR data");
    if (batch < 1) return cli_usage_error("bench", "--batch must be a size >= 1");
    cnn_dataset ds;
    cnn_data_opts o = {.source = data, .split = CNN_SPLIT_TRAIN, .image_h = h, .image_w = w, .threads = workers};
    cnn_status st = cnn_dataset_load(&o, &ds);
    if (st != CNN_OK) return cli_fail(st);
    if (batch > ds.n) batch = ds.n;
    int threads = workers > 0 ? workers : (int)sysconf(_SC_NPROCESSORS_ONLN);
    printf("input pipeline on %s: %d images, batches of %d, output %dx%d, %d decode thread%s\n", data, ds.n, batch, h, w,
           threads, threads == 1 ? "" : "s");
    for (int train = 1; train >= 0 && st == CNN_OK; train--) {
        cnn_pipeline *p;
        cnn_pipeline_opts po = {.ds = &ds, .max_batch = batch, .depth = 4, .train = train, .shuffle = true, .seed = 1};
        if ((st = cnn_pipeline_create(&po, &p)) != CNN_OK) break;
        int64_t spe = ds.n / batch, k = 0;
        double t0 = 0, c0 = 0, wait = 0;
        for (; k < warmup + repeat && st == CNN_OK; k++) {
            if (k == warmup) t0 = cnn_now(), c0 = cpu_seconds();
            const uint8_t *pix;
            const int32_t *index;
            st = cnn_pipeline_get(p, k / spe, (k % spe) * batch, batch, &pix, &index, &wait);
        }
        double dt = cnn_now() - t0, dc = cpu_seconds() - c0;
        int64_t n = (int64_t)repeat * batch;
        if (st == CNN_OK)
            printf("  %-5s %s: %8.1f images/s, %7.1f images per CPU-second (%.3f ms of CPU per image)\n",
                   train ? "train" : "eval",
                   train ? "RandomResizedCrop + flip" : "Resize + CenterCrop     ", n / dt, n / dc, 1e3 * dc / n);
        cnn_pipeline_free(p);
    }
    cnn_dataset_free(&ds);
    return st == CNN_OK ? CLI_EXIT_OK : cli_fail(st);
}
