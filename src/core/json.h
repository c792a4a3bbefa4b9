/* json.h — a small strict JSON parser (RFC 8259), internal to the engine: safetensors headers and small
 * metadata files.
 *
 * cnn_json_parse() turns `len` bytes of text into a tree that lives in ONE allocation (freed by
 * cnn_json_free on the root). It never reads text[len] or beyond, needs no NUL terminator, and fails with
 * CNN_E_FORMAT and a message "invalid JSON at byte N: <what>" on anything RFC 8259 does not allow, plus:
 *   - a key repeated within one object ("duplicate key"),
 *   - an integer (a number with no fraction or exponent) outside [-2^63, 2^64 - 1],
 *   - strings that are not valid UTF-8 (overlong forms, surrogates, > U+10FFFF) or hold raw control characters;
 *     a \u escape of a lone surrogate,
 *   - nesting deeper than limits->max_depth, or more than limits->max_values values.
 * Memory: one allocation of v * sizeof(cnn_json) + len + v bytes, v = min(max_values, len / 2 + max_depth + 2), before
 * the single pass (a bound on what any text of len bytes can need); only the pages the text uses are touched.
 * The tree does not point into `text`, which may be freed after the call.
 *
 *     cnn_json *root;
 *     CNN_TRY(cnn_json_parse(text, len, NULL, &root));
 *     for (const cnn_json *m = cnn_json_first(root); m; m = m->next)   // members of an object / array items
 *         printf("%s\n", m->key);
 *     cnn_json_free(root);
 */
#ifndef CNN_JSON_H
#define CNN_JSON_H

#include "cnn/cnn.h"

typedef enum cnn_json_type {
    CNN_JSON_NULL = 0,
    CNN_JSON_FALSE,
    CNN_JSON_TRUE,
    CNN_JSON_INT,    /* a number written without fraction or exponent: value in u (magnitude) and neg */
    CNN_JSON_NUMBER, /* any other number: its source text in str/len, NUL-terminated (strtod can read it) */
    CNN_JSON_STRING, /* decoded UTF-8 in str/len, NUL-terminated (may also hold NULs from \u0000) */
    CNN_JSON_ARRAY,  /* len items */
    CNN_JSON_OBJECT, /* len members, in source order, each with its key */
} cnn_json_type;

/* One value. The values of a document are stored in pre-order: a container's first child follows it. */
typedef struct cnn_json cnn_json;
struct cnn_json {
    const char *key;      /* member of an object: its decoded key, NUL-terminated; otherwise NULL */
    const cnn_json *next; /* the next item/member of the same container; NULL after the last */
    union {
        const char *str; /* STRING, NUMBER */
        uint64_t u;      /* INT: the magnitude (|value|) */
    };
    uint32_t len;     /* STRING, NUMBER: bytes; ARRAY, OBJECT: children */
    uint32_t key_len; /* bytes of key */
    uint8_t type;     /* cnn_json_type */
    bool neg;         /* INT: the literal had a '-' (so "-0" is neg with u == 0) */
};

typedef struct cnn_json_limits {
    int max_depth;     /* nested arrays/objects; the root container is depth 1. 1..1024 */
    size_t max_values; /* values in the document (keys do not count) */
} cnn_json_limits;

/* limits NULL = {64, no limit beyond what len allows}. Texts longer than UINT32_MAX bytes are refused. */
cnn_status cnn_json_parse(const char *text, size_t len, const cnn_json_limits *limits, cnn_json **root);
void cnn_json_free(cnn_json *root);

/* First child of an array/object (NULL when empty or not a container). */
static inline const cnn_json *cnn_json_first(const cnn_json *v) {
    return (v->type == CNN_JSON_ARRAY || v->type == CNN_JSON_OBJECT) && v->len ? v + 1 : NULL;
}
/* The member of obj named key (a C string), or NULL. Linear in the member count. */
const cnn_json *cnn_json_get(const cnn_json *obj, const char *key);
/* INT values that fit: false for anything else (non-INT, negative for u64, out of range for i64). */
bool cnn_json_u64(const cnn_json *v, uint64_t *out);
bool cnn_json_i64(const cnn_json *v, int64_t *out);

/* Length of the valid UTF-8 sequence starting at s (1..4), or 0 when s[0..avail) does not start with one. */
size_t cnn_utf8_seq(const uint8_t *s, size_t avail);
bool cnn_utf8_valid(const char *s, size_t len);

/* s[0..len) as printable ASCII for an error message: bytes outside 0x20..0x7e and '"', '\' as \xNN, cut at about
 * cap - 4 with "...". Returns buf. */
const char *cnn_json_quote(char *buf, size_t cap, const char *s, size_t len);

#endif
