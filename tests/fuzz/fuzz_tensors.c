/* fuzz_tensors.c — a `tensors:` dataset (parsers.h) from any safetensors image, with the class count inferred
 * and given: a dataset comes out with every label inside its classes, or a one-line error. */
#include "core/parsers.h"
#include "fuzz.h"

static volatile float sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cnn_st_file f;
    cnn_error_clear();
    cnn_status st = cnn_st_parse(data, size, &f);
    fuzz_check_status(st);
    if (st != CNN_OK) return 0;
    static const int classes[] = {0, 10, 1000000};
    for (int c = 0; c < 3; c++) {
        cnn_dataset d = {0};
        cnn_data_opts o = {.source = "tensors:fuzz", .limit = size & 3 ? (int)(size & 3) : 0,
                           .num_classes = classes[c]};
        st = cnn_tensors_dataset(&f, "data", &o, &d);
        fuzz_check_status(st);
        if (st == CNN_OK) {
            REQUIRE(d.n >= 1 && d.c == 3 && d.h >= 1 && d.w >= 1 && d.fpix && d.labels);
            REQUIRE(d.classes >= 1 && (classes[c] == 0 ? d.classes <= CNN_MAX_INFERRED_CLASSES : d.classes == classes[c]));
            float sum = 0; /* every pixel is read: ASan checks the copy's extent */
            for (int64_t i = 0; i < (int64_t)d.n * 3 * d.h * d.w; i++) sum += d.fpix[i];
            sink = sum;
            for (int i = 0; i < d.n; i++) REQUIRE(d.labels[i] >= 0 && d.labels[i] < d.classes);
        }
        cnn_dataset_free(&d);
    }
    cnn_st_free(&f);
    return 0;
}
