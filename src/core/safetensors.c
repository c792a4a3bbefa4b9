/* safetensors.c — the safetensors reader (strict, bounded; every check of include/cnn/safetensors.h) and the
 * atomic writer. The header is parsed by json.c into one allocation that the file object keeps: entry names
 * and metadata strings point into it. */
#include "cnn/safetensors.h"

#include "cnn/io.h"
#include "json.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host (the format is little-endian)"
#endif

typedef struct st_store {
    cnn_json *doc;                /* the parsed header; names and metadata point into it */
    const cnn_st_entry **by_name; /* n_entries pointers, sorted by name, for cnn_st_find */
} st_store;

#define ST_MAX_DEPTH 8 /* top object -> tensor object -> shape array is 3 deep */

static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* A tensor name (or any header string) fit for a one-line message. */
#define QUOTE(buf, s, n) cnn_json_quote(buf, sizeof buf, s, n)

static bool key_is(const cnn_json *m, const char *key) {
    size_t n = strlen(key);
    return m->key_len == n && memcmp(m->key, key, n) == 0;
}

/* Order by (begin, end), ties (zero-size or aliased tensors) in header order: the names were stored in header
 * order in one arena, so their addresses compare that way. */
static int cmp_offsets(const void *a, const void *b) {
    const cnn_st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->name < y->name ? -1 : x->name > y->name;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp((*(const cnn_st_entry *const *)a)->name, (*(const cnn_st_entry *const *)b)->name);
}

/* One tensor member m of the header -> e, checked against a data buffer of data_size bytes. */
static cnn_status parse_entry(const cnn_json *m, uint64_t data_size, cnn_st_entry *e) {
    char q[96], q2[96], shp[256];
#define NAME QUOTE(q, m->key, m->key_len) /* quoted only when a message needs it */
    if (m->key_len > CNN_ST_MAX_NAME)
        return cnn_fail(CNN_E_FORMAT, "tensor name \"%s\" is %u bytes, more than the limit of %d", NAME,
                        (unsigned)m->key_len, CNN_ST_MAX_NAME);
    if (memchr(m->key, 0, m->key_len)) return cnn_fail(CNN_E_FORMAT, "tensor name \"%s\" contains a NUL byte", NAME);
    e->name = m->key;
    if (m->type != CNN_JSON_OBJECT)
        return cnn_fail(CNN_E_FORMAT, "tensor \"%s\": expected an object with dtype, shape and data_offsets", NAME);

    const cnn_json *dt = NULL, *sh = NULL, *off = NULL;
    for (const cnn_json *f = cnn_json_first(m); f; f = f->next) {
        if (key_is(f, "dtype"))
            dt = f;
        else if (key_is(f, "shape"))
            sh = f;
        else if (key_is(f, "data_offsets"))
            off = f;
        else
            return cnn_fail(CNN_E_FORMAT, "tensor \"%s\": unexpected field \"%s\"", NAME,
                            QUOTE(q2, f->key, f->key_len));
    }
    const char *missing = !dt ? "dtype" : !sh ? "shape" : !off ? "data_offsets" : NULL;
    if (missing) return cnn_fail(CNN_E_FORMAT, "tensor \"%s\": missing \"%s\"", NAME, missing);

    if (dt->type != CNN_JSON_STRING) return cnn_fail(CNN_E_FORMAT, "tensor \"%s\": dtype is not a string", NAME);
    if (!cnn_dtype_parse(dt->str, dt->len, &e->dtype))
        return cnn_fail(CNN_E_FORMAT, "unknown dtype \"%s\" for tensor \"%s\"", QUOTE(q2, dt->str, dt->len), NAME);

    if (sh->type != CNN_JSON_ARRAY) return cnn_fail(CNN_E_FORMAT, "tensor \"%s\": shape is not an array", NAME);
    if (sh->len > CNN_MAX_DIMS)
        return cnn_fail(CNN_E_FORMAT, "tensor \"%s\": rank %u is more than the maximum of %d", NAME, (unsigned)sh->len,
                        CNN_MAX_DIMS);
    uint64_t numel = 1, nbytes;
    bool overflow = false;
    e->ndim = 0;
    for (const cnn_json *d = cnn_json_first(sh); d; d = d->next) {
        uint64_t v;
        if (!cnn_json_u64(d, &v))
            return cnn_fail(CNN_E_FORMAT, "tensor \"%s\": shape[%d] is not a non-negative integer", NAME, e->ndim);
        if (v > (uint64_t)INT64_MAX)
            return cnn_fail(CNN_E_FORMAT, "tensor \"%s\": shape[%d] = %llu is more than 2^63 - 1", NAME, e->ndim,
                            (unsigned long long)v);
        e->shape[e->ndim++] = (int64_t)v;
        /* As the reference reader: an overflowing prefix fails even when a later dimension is 0. */
        if (!cnn_mul_ok(numel, v, &numel)) overflow = true;
    }
    if (overflow || !cnn_mul_ok(numel, cnn_dtype_size(e->dtype), &nbytes))
        return cnn_fail(CNN_E_FORMAT, "tensor \"%s\": shape %s of %s is more than 2^64 bytes", NAME,
                        cnn_shape_str(e->shape, e->ndim, shp, sizeof shp), cnn_dtype_name(e->dtype));

    uint64_t b, end;
    if (off->type != CNN_JSON_ARRAY || off->len != 2 || !cnn_json_u64(cnn_json_first(off), &b) ||
        !cnn_json_u64(cnn_json_first(off)->next, &end))
        return cnn_fail(CNN_E_FORMAT, "tensor \"%s\": data_offsets must be [begin, end], two non-negative integers",
                        NAME);
    if (b > end)
        return cnn_fail(CNN_E_FORMAT, "tensor \"%s\": data_offsets [%llu, %llu] are reversed", NAME,
                        (unsigned long long)b, (unsigned long long)end);
    if (end > data_size)
        return cnn_fail(CNN_E_FORMAT,
                        "tensor \"%s\": data_offsets [%llu, %llu] run past the end of the %llu-byte data buffer", NAME,
                        (unsigned long long)b, (unsigned long long)end, (unsigned long long)data_size);
    if (end - b != nbytes)
        return cnn_fail(
            CNN_E_FORMAT, "tensor \"%s\": shape %s of %s needs %llu bytes but data_offsets [%llu, %llu] hold %llu",
            NAME, cnn_shape_str(e->shape, e->ndim, shp, sizeof shp), cnn_dtype_name(e->dtype),
            (unsigned long long)nbytes, (unsigned long long)b, (unsigned long long)end, (unsigned long long)(end - b));
    e->begin = b;
    e->end = end;
    return CNN_OK;
#undef NAME
}

static cnn_status parse_metadata(const cnn_json *md, cnn_st_file *out) {
    char q[96];
    if (md->type != CNN_JSON_OBJECT) return cnn_fail(CNN_E_FORMAT, "__metadata__ is not an object");
    out->meta = cnn_calloc(md->len, sizeof *out->meta, "safetensors metadata");
    if (!out->meta) return CNN_E_OOM;
    for (const cnn_json *m = cnn_json_first(md); m; m = m->next) {
        if (m->type != CNN_JSON_STRING)
            return cnn_fail(CNN_E_FORMAT, "__metadata__ value of \"%s\" is not a string", QUOTE(q, m->key, m->key_len));
        if (memchr(m->key, 0, m->key_len) || memchr(m->str, 0, m->len))
            return cnn_fail(CNN_E_FORMAT, "__metadata__ entry \"%s\" contains a NUL byte",
                            QUOTE(q, m->key, m->key_len));
        out->meta[out->n_meta++] = (cnn_st_kv){m->key, m->str};
    }
    return CNN_OK;
}

/* The header length n against a file of len >= 8 bytes. */
static cnn_status check_length(uint64_t n, uint64_t len) {
    if (n > CNN_ST_MAX_HEADER)
        return cnn_fail(CNN_E_FORMAT, "header length %llu is more than the limit of %u bytes", (unsigned long long)n,
                        CNN_ST_MAX_HEADER);
    if (n > len - 8)
        return cnn_fail(CNN_E_FORMAT, "header length %llu runs past the end of the file (%llu bytes after the length)",
                        (unsigned long long)n, (unsigned long long)(len - 8));
    return CNN_OK;
}

static cnn_status parse(const uint8_t *buf, size_t len, cnn_st_file *out) {
    if (len < 8) return cnn_fail(CNN_E_FORMAT, "file is %zu bytes, too short for the 8-byte header length", len);
    uint64_t n = le64(buf);
    CNN_TRY(check_length(n, len));
    if (n == 0 || buf[8] != '{') return cnn_fail(CNN_E_FORMAT, "header does not start with '{'");

    st_store *s = cnn_calloc(1, sizeof *s, "safetensors header");
    if (!s) return CNN_E_OOM;
    out->store = s;
    cnn_json_limits lim = {ST_MAX_DEPTH, CNN_ST_MAX_VALUES};
    cnn_status st = cnn_json_parse((const char *)buf + 8, (size_t)n, &lim, &s->doc);
    if (st != CNN_OK) return cnn_error_prefix(st, "header");
    const cnn_json *root = s->doc;
    CNN_ASSERT(root->type == CNN_JSON_OBJECT); /* the text starts with '{' and is one value */
    out->data = buf + 8 + n;
    out->data_size = len - 8 - n;

    const cnn_json *md = NULL;
    size_t n_entries = 0;
    for (const cnn_json *m = cnn_json_first(root); m; m = m->next) {
        if (key_is(m, "__metadata__"))
            md = m;
        else
            n_entries++;
    }
    if (md) CNN_TRY(parse_metadata(md, out));

    /* n_entries < CNN_ST_MAX_VALUES, so the int and the allocation are bounded by the header size */
    out->entries = cnn_calloc(n_entries, sizeof *out->entries, "safetensors entries");
    s->by_name = cnn_calloc(n_entries, sizeof *s->by_name, "safetensors index");
    if (!out->entries || !s->by_name) return CNN_E_OOM;
    for (const cnn_json *m = cnn_json_first(root); m; m = m->next) {
        if (m == md) continue;
        CNN_TRY(parse_entry(m, out->data_size, &out->entries[out->n_entries]));
        out->n_entries++;
    }

    /* Sorted by offsets, the tensors must tile [0, data_size) exactly. */
    bool sorted = true; /* as every writer emits them: skip the sort */
    for (size_t i = 1; i < n_entries && sorted; i++)
        sorted = cmp_offsets(&out->entries[i - 1], &out->entries[i]) < 0;
    if (!sorted) qsort(out->entries, n_entries, sizeof *out->entries, cmp_offsets);
    uint64_t pos = 0;
    const cnn_st_entry *prev = NULL;
    char q[96], q2[96];
    for (int i = 0; i < out->n_entries; i++) {
        const cnn_st_entry *e = &out->entries[i];
        if (e->begin > pos)
            return cnn_fail(CNN_E_FORMAT,
                            "gap in the data buffer: bytes [%llu, %llu) before tensor \"%s\" belong to no tensor",
                            (unsigned long long)pos, (unsigned long long)e->begin, QUOTE(q, e->name, strlen(e->name)));
        if (e->begin < pos)
            return cnn_fail(CNN_E_FORMAT,
                            "tensor \"%s\" (bytes [%llu, %llu)) overlaps tensor \"%s\" (bytes [%llu, %llu))",
                            QUOTE(q, e->name, strlen(e->name)), (unsigned long long)e->begin,
                            (unsigned long long)e->end, QUOTE(q2, prev->name, strlen(prev->name)),
                            (unsigned long long)prev->begin, (unsigned long long)prev->end);
        pos = e->end;
        prev = e;
    }
    if (pos != out->data_size)
        return cnn_fail(CNN_E_FORMAT,
                        "the data buffer has %llu bytes but the tensors cover %llu (the rest is not a tensor)",
                        (unsigned long long)out->data_size, (unsigned long long)pos);

    for (int i = 0; i < out->n_entries; i++)
        s->by_name[i] = &out->entries[i];
    qsort(s->by_name, n_entries, sizeof *s->by_name, cmp_names);
    return CNN_OK;
}

cnn_status cnn_st_parse(const uint8_t *buf, size_t len, cnn_st_file *out) {
    CNN_ASSERT(out && (buf || len == 0));
    memset(out, 0, sizeof *out);
    cnn_status st = parse(buf, len, out);
    if (st != CNN_OK) cnn_st_free(out);
    return st;
}

/* Before reading a whole file: reject a bad header length from its first 8 bytes and its size, so that a
 * hostile length never costs a read of a large file. Anything unusual is left to the full read. */
static cnn_status precheck(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO without a writer must not block here */
    if (fd < 0) return CNN_OK;
    struct stat sb;
    uint8_t len8[8];
    cnn_status st = CNN_OK;
    /* A device, pipe or socket has no size to check the header against, and /dev/zero never ends: only regular
     * files are read (a directory is left to cnn_read_file's message). */
    if (fstat(fd, &sb) == 0 && !S_ISREG(sb.st_mode) && !S_ISDIR(sb.st_mode))
        st = cnn_fail(CNN_E_IO, "not a regular file (a device, pipe or socket); safetensors files are read whole");
    else if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size >= 8 && pread(fd, len8, 8, 0) == 8)
        st = check_length(le64(len8), (uint64_t)sb.st_size);
    close(fd);
    return st;
}

cnn_status cnn_st_open(const char *path, cnn_st_file *out) {
    CNN_ASSERT(path && out);
    memset(out, 0, sizeof *out);
    cnn_status pre = precheck(path);
    if (pre != CNN_OK) return cnn_error_prefix(pre, "%s", path);
    uint8_t *bytes;
    size_t size;
    CNN_TRY(cnn_read_file(path, SIZE_MAX, &bytes, &size)); /* its messages start with the path */
    cnn_status st = cnn_st_parse(bytes, size, out);
    if (st != CNN_OK) {
        free(bytes);
        return cnn_error_prefix(st, "%s", path);
    }
    out->bytes = bytes;
    out->size = size;
    return CNN_OK;
}

void cnn_st_free(cnn_st_file *f) {
    if (!f) return;
    st_store *s = f->store;
    if (s) {
        cnn_json_free(s->doc);
        free(s->by_name);
        free(s);
    }
    free(f->entries);
    free(f->meta);
    free(f->bytes);
    memset(f, 0, sizeof *f);
}

const cnn_st_entry *cnn_st_find(const cnn_st_file *f, const char *name) {
    const st_store *s = f->store;
    if (!s || !name) return NULL;
    size_t lo = 0, hi = (size_t)f->n_entries;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(s->by_name[mid]->name, name);
        if (c == 0) return s->by_name[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const void *cnn_st_tensor_data(const cnn_st_file *f, const cnn_st_entry *e) {
    CNN_ASSERT(f && e && e->begin <= e->end && e->end <= f->data_size);
    return f->data + e->begin;
}

const char *cnn_st_meta_get(const cnn_st_file *f, const char *key) {
    for (int i = 0; key && i < f->n_meta; i++)
        if (strcmp(f->meta[i].key, key) == 0) return f->meta[i].value;
    return NULL;
}

/* ---- writer ------------------------------------------------------------------------------------------- */

/* A growing byte buffer; `oom` sticks once an allocation fails. */
typedef struct sbuf {
    char *buf;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (n > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < n) {
            if (cap > SIZE_MAX / 2) {
                b->oom = true;
                return;
            }
            cap *= 2;
        }
        char *nb = realloc(b->buf, cap);
        if (!nb) {
            b->oom = true;
            return;
        }
        b->buf = nb;
        b->cap = cap;
    }
    memcpy(b->buf + b->len, s, n);
    b->len += n;
}

static void sb_puts(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_u64(sbuf *b, uint64_t v) {
    char t[24];
    int n = snprintf(t, sizeof t, "%llu", (unsigned long long)v);
    sb_put(b, t, (size_t)n);
}

/* s as a JSON string literal, escaped as serde_json does. s is valid UTF-8 (checked by the caller). */
static void sb_json_str(sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            sb_put(b, esc, 2);
        } else if (c < 0x20) {
            const char *short_form = c == '\b'   ? "\\b"
                                     : c == '\f' ? "\\f"
                                     : c == '\n' ? "\\n"
                                     : c == '\r' ? "\\r"
                                     : c == '\t' ? "\\t"
                                                 : NULL;
            if (short_form) {
                sb_puts(b, short_form);
            } else {
                snprintf(esc, sizeof esc, "\\u%04x", c);
                sb_put(b, esc, 6);
            }
        } else {
            sb_put(b, p, 1);
        }
    }
    sb_put(b, "\"", 1);
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Fail with the first string that appears twice in strs (sorted in place). */
static cnn_status check_unique(const char *path, const char **strs, int n, const char *what) {
    qsort(strs, (size_t)n, sizeof *strs, cmp_str_ptr);
    for (int i = 1; i < n; i++) {
        if (strcmp(strs[i - 1], strs[i]) == 0) {
            char q[96];
            return cnn_fail(CNN_E_INVALID, "%s: duplicate %s \"%s\"", path, what, QUOTE(q, strs[i], strlen(strs[i])));
        }
    }
    return CNN_OK;
}

/* Everything cnn_st_write rejects before touching the disk; sizes[i] = bytes of item i. */
static cnn_status check_items(const char *path, const cnn_st_item *items, int n_items, const cnn_st_kv *meta,
                              int n_meta, uint64_t *sizes) {
    char q[96];
    uint64_t total = 0;
    for (int i = 0; i < n_items; i++) {
        const cnn_st_item *it = &items[i];
        if (!it->name || !it->name[0]) return cnn_fail(CNN_E_INVALID, "%s: tensor %d has an empty name", path, i);
        size_t nlen = strlen(it->name);
        const char *name = QUOTE(q, it->name, nlen);
        if (nlen > CNN_ST_MAX_NAME)
            return cnn_fail(CNN_E_INVALID, "%s: tensor name \"%s\" is %zu bytes, more than the limit of %d", path, name,
                            nlen, CNN_ST_MAX_NAME);
        if (!cnn_utf8_valid(it->name, nlen))
            return cnn_fail(CNN_E_INVALID, "%s: tensor name \"%s\" is not valid UTF-8", path, name);
        if (strcmp(it->name, "__metadata__") == 0)
            return cnn_fail(CNN_E_INVALID, "%s: \"__metadata__\" cannot be a tensor name", path);
        if ((unsigned)it->dtype >= CNN_DTYPE_COUNT)
            return cnn_fail(CNN_E_INVALID, "%s: tensor \"%s\" has an invalid dtype %d", path, name, (int)it->dtype);
        if (it->ndim < 0 || it->ndim > CNN_MAX_DIMS)
            return cnn_fail(CNN_E_INVALID, "%s: tensor \"%s\" has rank %d, outside 0..%d", path, name, it->ndim,
                            CNN_MAX_DIMS);
        uint64_t numel = 1;
        bool overflow = false;
        for (int d = 0; d < it->ndim; d++) {
            if (it->shape[d] < 0)
                return cnn_fail(CNN_E_INVALID, "%s: tensor \"%s\" has a negative dimension shape[%d] = %lld", path,
                                name, d, (long long)it->shape[d]);
            if (!cnn_mul_ok(numel, (uint64_t)it->shape[d], &numel)) overflow = true;
        }
        if (overflow || !cnn_mul_ok(numel, cnn_dtype_size(it->dtype), &sizes[i]) ||
            !cnn_add_ok(total, sizes[i], &total) || total > SIZE_MAX)
            return cnn_fail(CNN_E_INVALID, "%s: tensor \"%s\" is too large (byte count overflows)", path, name);
        if (sizes[i] > 0 && !it->data) return cnn_fail(CNN_E_INVALID, "%s: tensor \"%s\" has no data", path, name);
    }
    for (int i = 0; i < n_meta; i++) {
        if (!meta[i].key || !meta[i].value) return cnn_fail(CNN_E_INVALID, "%s: metadata entry %d is NULL", path, i);
        if (!cnn_utf8_valid(meta[i].key, strlen(meta[i].key)) || !cnn_utf8_valid(meta[i].value, strlen(meta[i].value)))
            return cnn_fail(CNN_E_INVALID, "%s: metadata entry \"%s\" is not valid UTF-8", path,
                            QUOTE(q, meta[i].key, strlen(meta[i].key)));
    }
    /* The reader's value cap: per tensor 1 object + dtype + shape array + ndim + offsets array + 2 */
    uint64_t values = 1 + (n_meta > 0 ? 1 + (uint64_t)n_meta : 0);
    for (int i = 0; i < n_items; i++)
        values += 6 + (uint64_t)items[i].ndim;
    if (values > CNN_ST_MAX_VALUES)
        return cnn_fail(CNN_E_INVALID, "%s: %d tensors are more than one file can hold (%llu JSON values, limit %u)",
                        path, n_items, (unsigned long long)values, CNN_ST_MAX_VALUES);

    int n = n_items > n_meta ? n_items : n_meta;
    const char **names = cnn_calloc((size_t)n, sizeof *names, "name check");
    if (!names) return CNN_E_OOM;
    for (int i = 0; i < n_items; i++)
        names[i] = items[i].name;
    cnn_status st = check_unique(path, names, n_items, "tensor name");
    for (int i = 0; i < n_meta && st == CNN_OK; i++)
        names[i] = meta[i].key;
    if (st == CNN_OK) st = check_unique(path, names, n_meta, "metadata key");
    free(names);
    return st;
}

cnn_status cnn_st_write(const char *path, const cnn_st_item *items, int n_items, const cnn_st_kv *meta, int n_meta) {
    CNN_ASSERT(path && n_items >= 0 && n_meta >= 0 && (items || n_items == 0) && (meta || n_meta == 0));
    uint64_t *sizes = cnn_calloc((size_t)n_items, sizeof *sizes, "tensor sizes");
    if (!sizes) return CNN_E_OOM;
    cnn_status st = check_items(path, items, n_items, meta, n_meta, sizes);
    if (st != CNN_OK) {
        free(sizes);
        return st;
    }

    /* {"__metadata__":{"k":"v"},"name":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},...} + spaces */
    sbuf h = {0};
    sb_puts(&h, "{");
    if (n_meta > 0) {
        sb_puts(&h, "\"__metadata__\":{");
        for (int i = 0; i < n_meta; i++) {
            if (i) sb_puts(&h, ",");
            sb_json_str(&h, meta[i].key);
            sb_puts(&h, ":");
            sb_json_str(&h, meta[i].value);
        }
        sb_puts(&h, "}");
    }
    uint64_t off = 0;
    for (int i = 0; i < n_items; i++) {
        const cnn_st_item *it = &items[i];
        if (i || n_meta > 0) sb_puts(&h, ",");
        sb_json_str(&h, it->name);
        sb_puts(&h, ":{\"dtype\":\"");
        sb_puts(&h, cnn_dtype_name(it->dtype));
        sb_puts(&h, "\",\"shape\":[");
        for (int d = 0; d < it->ndim; d++) {
            if (d) sb_puts(&h, ",");
            sb_u64(&h, (uint64_t)it->shape[d]);
        }
        sb_puts(&h, "],\"data_offsets\":[");
        sb_u64(&h, off);
        sb_puts(&h, ",");
        sb_u64(&h, off + sizes[i]); /* no overflow: check_items summed these */
        sb_puts(&h, "]}");
        off += sizes[i];
    }
    sb_puts(&h, "}");
    while (!h.oom && h.len % 8 != 0)
        sb_puts(&h, " ");
    if (h.oom) {
        free(h.buf);
        free(sizes);
        return cnn_fail(CNN_E_OOM, "%s: out of host memory building the header", path);
    }
    if (h.len > CNN_ST_MAX_HEADER) {
        free(h.buf);
        free(sizes);
        return cnn_fail(CNN_E_INVALID, "%s: header would be %zu bytes, more than the limit of %u", path, h.len,
                        CNN_ST_MAX_HEADER);
    }

    uint8_t len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)((uint64_t)h.len >> (8 * i));
    cnn_afile f;
    st = cnn_afile_open(&f, path);
    if (st == CNN_OK) st = cnn_afile_write(&f, len8, sizeof len8);
    if (st == CNN_OK) st = cnn_afile_write(&f, h.buf, h.len);
    for (int i = 0; i < n_items && st == CNN_OK; i++)
        if (sizes[i]) st = cnn_afile_write(&f, items[i].data, (size_t)sizes[i]);
    if (st == CNN_OK)
        st = cnn_afile_commit(&f);
    else
        cnn_afile_discard(&f);
    free(h.buf);
    free(sizes);
    return st;
}
