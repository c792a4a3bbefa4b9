/* fuzz_safetensors.c — the libFuzzer target: any byte string goes through cnn_st_parse (as a
 * file image) and through cnn_json_parse (as a JSON text). Neither may crash, leak, read out of bounds or hang;
 * a file that parses must satisfy every promise of safetensors.h (the entries tile the data buffer, sizes match
 * shapes, names are found by cnn_st_find) and every tensor byte is read, so ASan checks the ranges; a failure
 * must leave a one-line message and a zeroed struct. A broken promise traps, which libFuzzer reports as a crash.
 *
 * Built with -DFUZZ_MAKE_SEEDS it is instead a program that writes the seed corpus into the directory given as
 * its argument: files from cnn_st_write (every dtype, ranks 0-8, metadata) and hand-made edge cases. */
#include "cnn/safetensors.h"
#include "core/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REQUIRE(cond)                                                                                                  \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "fuzz_safetensors: broken promise at line %d: %s\n", __LINE__, #cond);                     \
            __builtin_trap();                                                                                          \
        }                                                                                                              \
    } while (0)

static void check_file(const cnn_st_file *f) {
    uint64_t pos = 0;
    volatile uint8_t sink = 0;
    for (int i = 0; i < f->n_entries; i++) {
        const cnn_st_entry *e = &f->entries[i];
        REQUIRE(e->begin == pos && e->begin <= e->end && e->end <= f->data_size);
        REQUIRE((unsigned)e->dtype < CNN_DTYPE_COUNT && e->ndim >= 0 && e->ndim <= CNN_MAX_DIMS);
        uint64_t n = cnn_dtype_size(e->dtype);
        for (int d = 0; d < e->ndim; d++) {
            REQUIRE(e->shape[d] >= 0);
            REQUIRE(cnn_mul_ok(n, (uint64_t)e->shape[d], &n));
        }
        REQUIRE(n == e->end - e->begin);
        REQUIRE(strlen(e->name) <= CNN_ST_MAX_NAME);
        REQUIRE(cnn_st_find(f, e->name) == e);
        const uint8_t *p = cnn_st_tensor_data(f, e);
        for (uint64_t k = 0; k < n; k++)
            sink ^= p[k];
        pos = e->end;
    }
    REQUIRE(pos == f->data_size);
    for (int i = 0; i < f->n_meta; i++) {
        REQUIRE(f->meta[i].key && f->meta[i].value);
        sink ^= (uint8_t)strlen(f->meta[i].value);
        REQUIRE(cnn_st_meta_get(f, f->meta[i].key) != NULL);
    }
    (void)sink;
}

/* Walk a JSON tree: counts agree with the links, strings have their NUL where len says. */
static size_t walk(const cnn_json *v, int depth) {
    REQUIRE(depth <= 17); /* scalars inside a container at the depth limit of 16 */
    size_t n = 1;
    if (v->type == CNN_JSON_STRING || v->type == CNN_JSON_NUMBER) REQUIRE(v->str[v->len] == 0);
    if (v->key) REQUIRE(v->key[v->key_len] == 0);
    uint32_t k = 0;
    for (const cnn_json *c = cnn_json_first(v); c; c = c->next, k++) {
        REQUIRE((v->type == CNN_JSON_OBJECT) == (c->key != NULL));
        n += walk(c, depth + 1);
    }
    REQUIRE(k == ((v->type == CNN_JSON_ARRAY || v->type == CNN_JSON_OBJECT) ? v->len : 0));
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cnn_st_file f;
    cnn_error_clear();
    if (cnn_st_parse(data, size, &f) == CNN_OK) {
        check_file(&f);
    } else {
        const char *msg = cnn_error_msg();
        REQUIRE(msg[0] && !strchr(msg, '\n'));
        REQUIRE(!f.entries && !f.meta && !f.store && f.n_entries == 0);
    }
    cnn_st_free(&f);

    cnn_json *root;
    cnn_json_limits lim = {16, 1u << 16};
    if (cnn_json_parse((const char *)data, size, &lim, &root) == CNN_OK) {
        REQUIRE(walk(root, 1) <= size / 2 + 1);
        cnn_json_free(root);
    } else {
        REQUIRE(root == NULL);
    }
    return 0;
}

#ifdef FUZZ_MAKE_SEEDS
static const char *dir;
static int n_seeds;

static void seed_raw(const char *hdr, size_t hlen, size_t payload) {
    char path[1024];
    snprintf(path, sizeof path, "%s/seed_%03d", dir, n_seeds++);
    FILE *fp = fopen(path, "wb");
    if (!fp) {
        perror(path);
        exit(1);
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    fwrite(len8, 1, 8, fp);
    fwrite(hdr, 1, hlen, fp);
    for (size_t i = 0; i < payload; i++)
        fputc((int)(i * 37 & 0xff), fp);
    fclose(fp);
}
#define SEED(lit, payload) seed_raw(lit, sizeof(lit) - 1, payload)

static void seed_written(const cnn_st_item *items, int n, const cnn_st_kv *meta, int n_meta) {
    char path[1024];
    snprintf(path, sizeof path, "%s/seed_%03d", dir, n_seeds++);
    if (cnn_st_write(path, items, n, meta, n_meta) != CNN_OK) {
        fprintf(stderr, "%s\n", cnn_error_msg());
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR (writes the seed corpus into DIR)\n", argv[0]);
        return 2;
    }
    dir = argv[1];
    static uint8_t buf[4096];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (uint8_t)(i * 131 + 7);
    /* every dtype, one tensor each, and all of them in one file */
    cnn_st_item all[CNN_DTYPE_COUNT];
    char names[CNN_DTYPE_COUNT][32];
    for (int d = 0; d < CNN_DTYPE_COUNT; d++) {
        snprintf(names[d], sizeof names[d], "t.%s", cnn_dtype_name((cnn_dtype)d));
        all[d] = (cnn_st_item){names[d], (cnn_dtype)d, 2, {2, 3}, buf};
        seed_written(&all[d], 1, NULL, 0);
    }
    cnn_st_kv meta[] = {{"format", "pt"}, {"step", "12"}, {"k\"\\\n", "v\xc3\xa9"}};
    seed_written(all, CNN_DTYPE_COUNT, meta, 3);
    /* a resnet-like weight file: ranks 0, 1, 2, 4, and an empty tensor */
    cnn_st_item rn[] = {
        {"conv1.weight", CNN_DTYPE_F32, 4, {4, 3, 3, 3}, buf},
        {"bn1.weight", CNN_DTYPE_F32, 1, {4}, buf},
        {"bn1.num_batches_tracked", CNN_DTYPE_I64, 0, {0}, buf},
        {"fc.weight", CNN_DTYPE_BF16, 2, {10, 4}, buf},
        {"empty", CNN_DTYPE_F32, 2, {0, 4}, NULL},
        {"rank8", CNN_DTYPE_U8, 8, {1, 2, 1, 2, 1, 2, 1, 2}, buf},
    };
    seed_written(rn, 6, meta, 2);
    seed_written(NULL, 0, NULL, 0);
    seed_written(NULL, 0, meta, 1);
    /* hand-made: valid edge cases and near-misses of the B4 vectors */
    SEED("{}\r \t\n", 0);
    SEED("{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},\"b\":{\"dtype\":\"U8\",\"shape\":[2],"
         "\"data_offsets\":[0,2]}}",
         2);
    SEED("{\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]},\"a\":{\"dtype\":\"U8\",\"shape\":[2],"
         "\"data_offsets\":[0,2]}}",
         4);
    SEED("{\"\\u00e9\\ud83d\\ude00\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1);
    SEED("{\"x\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,16]}}", 16);
    SEED("{\"x\":{\"dtype\":\"I32\",\"shape\":[2,18446744073709551615],\"data_offsets\":[0,16]}}", 16);
    SEED("{\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,0]}}", 1);
    SEED("{\"x\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},\"y\":{\"dtype\":\"U8\",\"shape\":[8],"
         "\"data_offsets\":[4,12]}}",
         12);
    SEED("{\"__metadata__\":{\"a\":\"1\",\"b\":\"\\u0041\\n\"},\"x\":{\"dtype\":\"F128\",\"shape\":[],\"data_offsets\":"
         "[0,16]}}",
         16);
    SEED("{\"x\":[1,-2,3.5e-7,true,false,null,\"s\",{\"k\":[[]]}]}", 0);
    return 0;
}
#endif
