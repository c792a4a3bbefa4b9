/* fuzz_kernel_cache.c — a kernel cache entry (cuda/hooks.h, cnn_cuda_cache_parse) on any bytes, checked against
 * a fixed descriptor: a hit returns exactly the payload the header's lengths and checksum describe; anything
 * else is a rejection with a reason. */
#include "cuda/hooks.h"
#include "fuzz.h"

#include <stdlib.h>

#define DESC "conv2d.cu 0123456789abcdef -arch=sm_90a -DACT=2 nvrtc 13.0 driver 13000"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    void *payload = NULL;
    size_t len = 0;
    char why[256];
    cnn_cuda_cache_result r = cnn_cuda_cache_parse(data, size, DESC, "entry.cubin", &payload, &len, why, sizeof why);
    if (r == CNN_CUDA_CACHE_HIT) {
        REQUIRE(payload && len > 0 && 40 + strlen(DESC) + len == size);
        REQUIRE(memcmp(payload, data + 40 + strlen(DESC), len) == 0);
        REQUIRE(cnn_fnv1a64(CNN_FNV_OFFSET, payload, len) == cnn_fnv1a64(CNN_FNV_OFFSET, data + 40 + strlen(DESC), len));
    } else {
        REQUIRE(r == CNN_CUDA_CACHE_REJECTED && !payload && len == 0 && why[0]);
    }
    free(payload);
    return 0;
}
