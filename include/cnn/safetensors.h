/* safetensors.h — read and write safetensors files, the engine's only weight and checkpoint
 * format: no code, no paths, nothing but named typed arrays and string metadata.
 *
 * Layout: little-endian u64 N, N bytes of UTF-8 JSON (first byte '{', may be space-padded at the end), then
 * the data buffer. Each JSON member is a tensor
 *     "conv1.weight": {"dtype": "F32", "shape": [64, 3, 7, 7], "data_offsets": [b, e]}
 * with offsets relative to the data buffer (e exclusive), plus an optional "__metadata__" string->string map.
 *
 * The reader accepts exactly what the reference reader accepts, with a few caps, and
 * fails on anything else with CNN_E_FORMAT and a one-line message; it never reads out of bounds and never
 * allocates more than a bound tied to the header size. Checks:
 *   - the file is at least 8 bytes; N <= 100,000,000 and 8 + N <= file size;
 *   - the header is valid UTF-8 JSON (json.h: strict, no duplicate keys), starts with '{', is an object;
 *   - each tensor is an object with exactly dtype, shape and data_offsets; dtype is a known name; shape is an
 *     array of at most CNN_MAX_DIMS integers in [0, 2^63); data_offsets is two integers b <= e;
 *   - e - b == prod(shape) * dtype size, computed with overflow checks;
 *   - sorted by offsets, the tensors tile the data buffer exactly: from 0, no gaps, no overlaps, and the last
 *     end is the buffer size (no trailing bytes);
 *   - "__metadata__", if present, is an object of strings;
 *   - caps: names of at most CNN_ST_MAX_NAME bytes without NUL bytes, at most CNN_ST_MAX_VALUES JSON values in
 *     the header (8 per rank-2 tensor: ~60,000 tensors; ResNet-152 has ~900), JSON nesting at most 8 deep.
 *     Memory beyond the file itself (cnn_st_open reads it whole): at most ~30 bytes per header byte and at
 *     most ~35 MB + the header size, whatever the header holds.
 * Tensor data is not checked (NaN payloads load; callers check finiteness where they need it). Tensor data is
 * not guaranteed to be aligned: copy it out with memcpy or cnn_convert_to_f32.
 *
 *     cnn_st_file f;
 *     CNN_TRY(cnn_st_open("model.safetensors", &f));
 *     const cnn_st_entry *e = cnn_st_find(&f, "conv1.weight");
 *     if (e && e->dtype == CNN_DTYPE_F32) memcpy(w, cnn_st_tensor_data(&f, e), e->end - e->begin);
 *     cnn_st_free(&f);
 *
 * The writer produces the reference writer's bytes: tensors in the given order at contiguous offsets, entries
 * written as {"dtype":..,"shape":[..],"data_offsets":[b,e]}, "__metadata__" first, the header padded with
 * spaces to a multiple of 8 (so data stays 8-byte aligned), written atomically (io.h). Host byte order must be
 * little-endian (checked at compile time).
 */
#ifndef CNN_SAFETENSORS_H
#define CNN_SAFETENSORS_H

#include "cnn/tensor.h"

#define CNN_ST_MAX_HEADER 100000000u /* bytes, as the reference reader       */
#define CNN_ST_MAX_NAME   1024       /* bytes of a tensor name                */
#define CNN_ST_MAX_VALUES (1u << 19) /* JSON values in a header (~60,000 tensors) */

typedef struct cnn_st_entry {
    const char *name; /* NUL-terminated, owned by the file object */
    cnn_dtype dtype;
    int ndim; /* 0 = scalar */
    int64_t shape[CNN_MAX_DIMS];
    uint64_t begin, end; /* byte offsets into the data buffer, end exclusive */
} cnn_st_entry;

typedef struct cnn_st_kv {
    const char *key, *value;
} cnn_st_kv;

typedef struct cnn_st_file {
    uint8_t *bytes; /* owned copy of the whole file when opened from a path (NULL for cnn_st_parse) */
    size_t size;
    const uint8_t *data; /* the data buffer after the header */
    uint64_t data_size;
    cnn_st_entry *entries; /* sorted by begin (then end, then name) */
    int n_entries;
    cnn_st_kv *meta; /* "__metadata__" (string -> string only), in file order */
    int n_meta;
    void *store; /* private allocations */
} cnn_st_file;

/* Parse a file image in memory without copying it: buf must outlive out. On failure *out is zeroed. */
cnn_status cnn_st_parse(const uint8_t *buf, size_t len, cnn_st_file *out);
/* Read the file at path and parse it; every message starts with "<path>: ". Only regular files: a device, pipe
 * or socket (/dev/zero, which never ends) is refused before a byte is read. On failure *out is zeroed. */
cnn_status cnn_st_open(const char *path, cnn_st_file *out);
/* Release everything; safe on a zeroed, failed or already freed struct. */
void cnn_st_free(cnn_st_file *f);

/* The tensor called name, or NULL. O(log n). */
const cnn_st_entry *cnn_st_find(const cnn_st_file *f, const char *name);
/* e->end - e->begin bytes of e's data (maybe unaligned). */
const void *cnn_st_tensor_data(const cnn_st_file *f, const cnn_st_entry *e);
/* The metadata value for key, or NULL. */
const char *cnn_st_meta_get(const cnn_st_file *f, const char *key);

typedef struct cnn_st_item {
    const char *name;
    cnn_dtype dtype;
    int ndim;
    int64_t shape[CNN_MAX_DIMS];
    const void *data; /* prod(shape) * dtype size bytes, C order, little-endian; may be NULL when that is 0 */
} cnn_st_item;

/* Write items (in this order, contiguous offsets) and metadata to path atomically (io.h). Rejects with
 * CNN_E_INVALID, before writing anything: an empty, NULL, over-long, non-UTF-8 or duplicate name, the name
 * "__metadata__", a bad dtype, ndim outside 0..CNN_MAX_DIMS, a negative dimension, a size past 2^64, missing
 * data; NULL or non-UTF-8 metadata, duplicate metadata keys. I/O failures are CNN_E_IO. Every message starts
 * with "<path>: ". */
cnn_status cnn_st_write(const char *path, const cnn_st_item *items, int n_items, const cnn_st_kv *meta, int n_meta);

#endif
