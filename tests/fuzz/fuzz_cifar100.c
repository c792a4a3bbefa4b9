/* fuzz_cifar100.c — libFuzzer target of testing.md B2 for the CIFAR-100 binary format: any byte string is parsed
 * by cnn_cifar100_parse as a file of 1 to 3 records (fine and coarse labels). A parse that succeeds must give
 * labels in range and exactly the record pixels; a failure leaves a message and nothing allocated. A broken
 * promise traps. With -DFUZZ_MAKE_SEEDS: writes valid 1- and 2-record files and a bad-label one. */
#include "cnn/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REQUIRE(cond)                                                                                                  \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "fuzz_cifar100: broken promise at line %d: %s\n", __LINE__, #cond);                        \
            __builtin_trap();                                                                                          \
        }                                                                                                              \
    } while (0)

#ifndef FUZZ_MAKE_SEEDS
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    for (int records = 1; records <= 3; records++)
        for (int coarse = 0; coarse < 2; coarse++) {
            cnn_data_opts o = {.split = CNN_SPLIT_TEST, .coarse = coarse, .limit = records == 3 ? 2 : 0};
            cnn_dataset d;
            memset(&d, 0, sizeof d);
            cnn_error_clear();
            cnn_status st = cnn_cifar100_parse(data, size, "fuzz", records, &o, &d);
            if (st == CNN_OK) {
                REQUIRE(size == (size_t)3074 * records && d.n == (o.limit ? o.limit : records));
                REQUIRE(d.c == 3 && d.h == 32 && d.w == 32 && d.classes == (coarse ? 20 : 100));
                for (int i = 0; i < d.n; i++) {
                    REQUIRE(d.labels[i] >= 0 && d.labels[i] < d.classes);
                    REQUIRE(memcmp(d.pix + (size_t)i * 3072, data + (size_t)i * 3074 + 2, 3072) == 0);
                }
            } else {
                REQUIRE(cnn_error_msg()[0] != 0);
            }
            free(d.pix); /* what cnn_dataset_free would free here; data.c is not linked */
            free(d.labels);
        }
    return 0;
}
#else
int main(int argc, char **argv) {
    if (argc != 2) return 2;
    static uint8_t b[3 * 3074];
    for (size_t i = 0; i < sizeof b; i++) b[i] = (uint8_t)(i * 13);
    for (int r = 0; r < 3; r++) b[r * 3074] = (uint8_t)(r * 7 % 20), b[r * 3074 + 1] = (uint8_t)(r * 41 % 100);
    const struct {
        const char *name;
        size_t n;
    } files[] = {{"one", 3074}, {"two", 2 * 3074}, {"three", 3 * 3074}};
    for (int k = 0; k < 3; k++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", argv[1], files[k].name);
        FILE *f = fopen(p, "wb");
        if (!f || fwrite(b, 1, files[k].n, f) != files[k].n) return 1;
        fclose(f);
    }
    b[1] = 100; /* a fine label out of range */
    char p[4096];
    snprintf(p, sizeof p, "%s/bad_label", argv[1]);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(b, 1, 3074, f) != 3074) return 1;
    fclose(f);
    return 0;
}
#endif
