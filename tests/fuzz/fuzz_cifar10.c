/* fuzz_cifar10.c — the CIFAR-10 batch parser (parsers.h) on any bytes: the record count is the input's length
 * in whole records (at least 1), so both the size check and the per-record label check are reached. */
#include "core/parsers.h"
#include "fuzz.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int records = size >= 3073 ? (int)(size / 3073) : 1;
    if (records > 64) records = 64;
    int take = records / 2 + (size & 1);
    uint8_t *pix = malloc((size_t)take * 3072 + 1);
    int32_t *labels = malloc((size_t)take * sizeof *labels + 1);
    REQUIRE(pix && labels);
    cnn_error_clear();
    cnn_status st = cnn_cifar10_parse(data, size, "batch.bin", records, take, pix, labels);
    fuzz_check_status(st);
    if (st == CNN_OK) {
        REQUIRE(size == (size_t)records * 3073);
        for (int i = 0; i < take; i++) REQUIRE(labels[i] >= 0 && labels[i] <= 9 && labels[i] == data[(size_t)i * 3073]);
    }
    free(pix);
    free(labels);
    return 0;
}
