/* fuzz_model.c — loading weights into a model (cnn_model_load_st: names, shapes, dtypes, values) from any
 * safetensors image, into a CIFAR-stem ResNet-18 on the CPU backend created once. A load either succeeds with
 * finite weights or fails with a one-line message; a non-finite value never loads (the default). */
#include "cnn/net.h"
#include "core/model.h"
#include "fuzz.h"

#include <stdlib.h>

static cnn_model *model;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    cnn_backend *be;
    if (cnn_cpu_backend_create(1, &be) != CNN_OK) abort();
    cnn_model_opts o = cnn_model_opts_default();
    o.arch = "resnet18";
    o.stem = CNN_STEM_CIFAR;
    o.num_classes = 10;
    if (cnn_model_create(&o, be, 32, 32, 1, false, &model) != CNN_OK) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!model) LLVMFuzzerInitialize(NULL, NULL);
    cnn_st_file f;
    cnn_error_clear();
    cnn_status st = cnn_st_parse(data, size, &f);
    fuzz_check_status(st);
    if (st != CNN_OK) return 0;
    st = cnn_model_load_st(model, &f, "weights", NULL);
    fuzz_check_status(st);
    cnn_st_free(&f);
    return 0;
}
