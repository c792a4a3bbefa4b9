/* fuzz_tune_cache.c — the autotuner's cache file (cuda/hooks.h, cnn_cuda_tune_parse) on any text: every entry
 * it returns has a printable key that fits the table and values in range; nothing else is returned. */
#include "cuda/hooks.h"
#include "fuzz.h"

#include <math.h>

static void put(void *ctx, const char *key, int cfg, int splits, float ms) {
    int *n = ctx;
    size_t len = strlen(key);
    REQUIRE(len >= 1 && len < 200 && !strchr(key, '|'));
    for (const char *p = key; *p; p++) REQUIRE((unsigned char)*p >= 0x20 && *p != 0x7f);
    REQUIRE(cfg >= 0 && splits >= 1 && ms >= 0 && isfinite(ms));
    (*n)++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int seen = 0, bad = 0;
    int n = cnn_cuda_tune_parse((const char *)data, size, put, &seen, &bad);
    REQUIRE(n == seen && bad >= 0);
    return 0;
}
