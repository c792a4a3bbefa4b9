/* b18_oom.c — testing.md B18, device out of memory: on the CUDA backend, models of batch 1, 2, 4, ... are built
 * and run (one eval forward, or with --train one forward and backward) until one fails. That failure must be
 * CNN_E_OOM (no abort, no other status), the device's free memory after the model is freed must be back to its
 * level before the attempt (within 2 MiB), and the next smaller batch must then run in the same process and give
 * the bits a fresh process gives (--only B prints them for the comparison, b18_oom.sh).
 *
 *   b18_oom [--model M] [--input S] [--train] [--max-batch B] [--only B]
 * On the CPU emulator, CNN_EMU_MEM_MB sets the device's size. Prints PASS/FAIL lines (tests/unit/test.h), the
 * figure line and "bits B <hex>" for the batch run after the failure. */
#include "test.h"

#include "cnn/net.h"
#include "cuda/hooks.h"

static uint64_t run_batch(cnn_backend *be, const cnn_model_opts *mo, int s, int b, bool train, cnn_status *st) {
    cnn_model *m = NULL;
    uint64_t h = 0xcbf29ce484222325ULL;
    int classes = mo->num_classes;
    float *x = malloc((size_t)b * 3 * s * s * sizeof *x), *logits = malloc((size_t)b * classes * sizeof *logits);
    int64_t *labels = malloc((size_t)b * sizeof *labels);
    for (int64_t i = 0; i < (int64_t)b * 3 * s * s; i++) x[i] = (float)((i * 7919) % 255) / 255.0f - 0.5f;
    for (int i = 0; i < b; i++) labels[i] = i % classes;
    *st = cnn_model_create(mo, be, s, s, b, train, &m);
    if (*st == CNN_OK) *st = cnn_model_upload_input(m, x, b);
    if (*st == CNN_OK) *st = cnn_model_forward(m, b, train ? CNN_MODE_TRAIN : CNN_MODE_EVAL, 1);
    float loss = 0;
    if (*st == CNN_OK && train) *st = cnn_model_backward(m, b, labels, 0.0f, &loss);
    if (*st == CNN_OK) *st = cnn_model_download_logits(m, b, logits);
    if (*st == CNN_OK) *st = be->sync(be);
    if (*st == CNN_OK) h = cnn_fnv1a64(h, logits, (size_t)b * classes * sizeof *logits);
    if (*st == CNN_OK && train) h = cnn_fnv1a64(h, &loss, sizeof loss);
    cnn_model_free(m);
    free(x), free(logits), free(labels);
    return h;
}

int main(int argc, char **argv) {
    cnn_model_opts mo = cnn_model_opts_default();
    mo.arch = "resnet18";
    mo.stem = CNN_STEM_CIFAR;
    mo.num_classes = 10;
    int s = 32, max_batch = 1 << 16, only = 0;
    bool train = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) mo.arch = argv[++i];
        else if (!strcmp(argv[i], "--input") && i + 1 < argc) s = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--max-batch") && i + 1 < argc) max_batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--train")) train = true;
        else return fprintf(stderr, "usage: %s [--model M] [--input S] [--train] [--max-batch B] [--only B]\n", argv[0]), 2;
    }
    if (strcmp(mo.arch, "resnet18") && strcmp(mo.arch, "resnet34")) mo.stem = CNN_STEM_IMAGENET, mo.num_classes = 1000;
    cnn_backend *be = NULL;
    cnn_backend_opts bo = {.device = "cuda", .act_dtype = CNN_DTYPE_F32, .tune = CNN_TUNE_NONE};
    cnn_status st = cnn_cuda_backend_create(&bo, &be);
    if (st != CNN_OK) {
        skip("b18.cuda", cnn_error_msg());
        return test_finish();
    }
    if (only > 0) {
        uint64_t h = run_batch(be, &mo, s, only, train, &st);
        check(st == CNN_OK, "b18.fresh_process", "batch %d: %s", only, st == CNN_OK ? "ok" : cnn_error_msg());
        printf("bits %d %016llx\n", only, (unsigned long long)h);
        cnn_backend_destroy(be);
        return test_finish();
    }
    const double mib = 1024.0 * 1024.0;
    size_t f0 = 0, f1 = 0, tot = 0;
    int b_fail = 0, b_ok = 0;
    for (int b = 1; b <= max_batch; b *= 2) {
        st = be->sync(be);
        if (st == CNN_OK) st = cnn_cuda_mem_info(be, &f0, &tot);
        if (st == CNN_OK) run_batch(be, &mo, s, b, train, &st);
        if (st == CNN_OK) {
            b_ok = b;
            continue;
        }
        cnn_status fst = st;
        char msg[512];
        snprintf(msg, sizeof msg, "%s", cnn_error_msg());
        cnn_error_clear();
        check(fst == CNN_E_OOM, "b18.status_is_oom", "batch %d: %s: %s", b, cnn_status_str(fst), msg);
        st = be->sync(be);
        if (st == CNN_OK) st = cnn_cuda_mem_info(be, &f1, &tot);
        check(st == CNN_OK && fabs((double)f1 - (double)f0) <= 2 * mib, "b18.memory_back",
              "free %.1f MiB before batch %d, %.1f MiB after its failure (device %.0f MiB)", f0 / mib, b, f1 / mib,
              tot / mib);
        b_fail = b;
        break;
    }
    if (!b_fail) {
        skip("b18.oom", "no batch up to --max-batch ran out of memory");
        cnn_backend_destroy(be);
        return test_finish();
    }
    uint64_t h = run_batch(be, &mo, s, b_ok, train, &st);
    check(st == CNN_OK, "b18.smaller_batch_runs", "batch %d after batch %d failed: %s", b_ok, b_fail,
          st == CNN_OK ? "ok" : cnn_error_msg());
    printf("bits %d %016llx\n", b_ok, (unsigned long long)h);
    printf("FIGURE B18: %s %dx%d %s: batch %d -> CNN_E_OOM; free device memory %.1f MiB before, %.1f MiB after (%+.2f "
           "MiB); batch %d then ran in the same process\n", mo.arch, s, s, train ? "train step" : "inference", b_fail,
           f0 / mib, f1 / mib, ((double)f1 - (double)f0) / mib, b_ok);
    cnn_backend_destroy(be);
    return test_finish();
}
