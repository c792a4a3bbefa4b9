/* fuzz_idx.c — libFuzzer target of testing.md B2 for MNIST-format files: any byte string goes through
 * cnn_gunzip (when it starts with the gzip magic) and cnn_idx_parse as a 1-D (labels) and a 3-D (images) IDX file.
 * Nothing may crash, leak, read out of bounds or allocate past the cap; a parse that succeeds must describe exactly
 * the bytes after the header (every payload byte is read, so ASan checks the range); a failure must leave a
 * message. A broken promise traps, which libFuzzer reports as a crash.
 *
 * Built with -DFUZZ_MAKE_SEEDS it writes its seed corpus (valid files of both ranks, gzipped and not, and edge
 * cases) into the directory given as its argument. */
#include "cnn/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REQUIRE(cond)                                                                                                  \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "fuzz_idx: broken promise at line %d: %s\n", __LINE__, #cond);                             \
            __builtin_trap();                                                                                          \
        }                                                                                                              \
    } while (0)

#define MAX_INFLATED ((size_t)64 << 20)

#ifndef FUZZ_MAKE_SEEDS
static void parse(const uint8_t *buf, size_t len) {
    for (int nd = 1; nd <= 3; nd += 2) {
        int64_t dims[3] = {0};
        const uint8_t *payload = NULL;
        cnn_error_clear();
        cnn_status st = cnn_idx_parse(buf, len, "fuzz", nd, dims, &payload);
        if (st != CNN_OK) {
            REQUIRE(cnn_error_msg()[0] != 0);
            continue;
        }
        uint64_t count = 1;
        for (int d = 0; d < nd; d++) {
            REQUIRE(dims[d] > 0 && dims[d] <= INT32_MAX);
            REQUIRE(cnn_mul_ok(count, (uint64_t)dims[d], &count));
        }
        REQUIRE(payload == buf + 4 + 4 * nd && count == len - 4 - 4 * (size_t)nd);
        volatile uint8_t sink = 0;
        for (uint64_t i = 0; i < count; i++) sink ^= payload[i];
        (void)sink;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    parse(data, size);
    if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b) {
        uint8_t *out = NULL;
        size_t n = 0;
        cnn_error_clear();
        if (cnn_gunzip(data, size, "fuzz.gz", MAX_INFLATED, &out, &n) == CNN_OK) {
            REQUIRE(out && n <= MAX_INFLATED && out[n] == 0);
            parse(out, n);
        } else {
            REQUIRE(!out && cnn_error_msg()[0] != 0);
        }
        free(out);
    }
    return 0;
}
#else
#include <zlib.h>

static void put(const char *dir, const char *name, const uint8_t *b, size_t n) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(b, 1, n, f) != n) exit(1);
    fclose(f);
}

static size_t idx(uint8_t *b, int nd, const uint32_t *dims, size_t payload) {
    b[0] = b[1] = 0;
    b[2] = 8;
    b[3] = (uint8_t)nd;
    for (int d = 0; d < nd; d++)
        for (int k = 0; k < 4; k++) b[4 + 4 * d + k] = (uint8_t)(dims[d] >> (24 - 8 * k));
    for (size_t i = 0; i < payload; i++) b[4 + 4 * nd + i] = (uint8_t)(i * 37);
    return 4 + 4 * (size_t)nd + payload;
}

static void put_gz(const char *dir, const char *name, const uint8_t *b, size_t n) {
    uint8_t out[8192];
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) exit(1);
    z.next_in = (Bytef *)b;
    z.avail_in = (uInt)n;
    z.next_out = out;
    z.avail_out = sizeof out;
    if (deflate(&z, Z_FINISH) != Z_STREAM_END) exit(1);
    put(dir, name, out, sizeof out - z.avail_out);
    deflateEnd(&z);
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    uint8_t b[4096];
    uint32_t img[3] = {3, 4, 5}, lab[1] = {7}, big[3] = {0x7fffffff, 0x7fffffff, 0x7fffffff};
    size_t n = idx(b, 3, img, 60);
    put(argv[1], "images", b, n);
    put_gz(argv[1], "images.gz", b, n);
    put(argv[1], "images_truncated", b, n - 7);
    n = idx(b, 1, lab, 7);
    put(argv[1], "labels", b, n);
    put_gz(argv[1], "labels.gz", b, n);
    n = idx(b, 3, big, 0);
    put(argv[1], "overflow", b, n);
    return 0;
}
#endif
