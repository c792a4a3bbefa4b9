/* json.c — the strict JSON parser of json.h: one pass of recursive descent over a bounded buffer.
 *
 * The arena is sized before parsing from bounds that hold for any text of len bytes, valid or not.
 * Values: a complete value owns its last byte (never '[', ',' or ':') and, unless it is the root, the '[', ','
 * or ':' before it, so at most (len + 1) / 2 values are complete; at any moment at most max_depth + 1
 * containers are open or one scalar is being read, so slots <= len / 2 + max_depth + 2, capped by max_values.
 * (The fuzzer found the open containers of "[[[[o[[[" when the bound was len / 2 + 1.)
 * Strings: at most len + slots bytes with their NULs: decoding never grows a string and its quotes pay for
 * the NUL; a non-integer number's text is copied with one NUL more.
 * Pages of the arena that the text does not need are never touched. Each object is checked for duplicate keys
 * when it closes. Every read of the text is guarded by `pos < len`; recursion is bounded by max_depth <= 1024.
 */
#include "json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct parser {
    const uint8_t *s;
    size_t len, pos;
    int depth, max_depth;
    size_t max_values;
    cnn_json *nodes; /* cap_values slots */
    size_t n_values, cap_values;
    char *strs; /* decoded strings, each NUL-terminated; at most len bytes */
    size_t str_bytes;
    const cnn_json **scratch; /* the duplicate-key check's sort buffer, grown as needed */
    size_t scratch_cap;
} parser;

static cnn_status bad(const parser *p, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static cnn_status bad(const parser *p, size_t at, const char *fmt, ...) {
    (void)p;
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return cnn_fail(CNN_E_FORMAT, "invalid JSON at byte %zu: %s", at, what);
}

/* "'x'" for a printable byte, "byte 0xNN" otherwise, for messages. */
static const char *describe(uint8_t c, char buf[16]) {
    if (c >= 0x20 && c < 0x7f)
        snprintf(buf, 16, "'%c'", c);
    else
        snprintf(buf, 16, "byte 0x%02x", c);
    return buf;
}

static bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

static inline void skip_ws(parser *p) {
    while (p->pos < p->len) {
        uint8_t c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return;
        p->pos++;
    }
}

size_t cnn_utf8_seq(const uint8_t *s, size_t avail) {
    if (avail == 0) return 0;
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    size_t n;
    uint8_t lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        if (c == 0xe0)
            lo = 0xa0; /* no overlong 3-byte forms */
        else if (c == 0xed)
            hi = 0x9f; /* no UTF-16 surrogates D800..DFFF */
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        if (c == 0xf0)
            lo = 0x90; /* no overlong 4-byte forms */
        else if (c == 0xf4)
            hi = 0x8f; /* nothing past U+10FFFF */
    } else {
        return 0; /* a continuation byte, C0/C1 (overlong) or F5..FF */
    }
    if (avail < n || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < n; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    return n;
}

bool cnn_utf8_valid(const char *s, size_t len) {
    const uint8_t *u = (const uint8_t *)s;
    for (size_t i = 0; i < len;) {
        size_t k = cnn_utf8_seq(u + i, len - i);
        if (!k) return false;
        i += k;
    }
    return true;
}

const char *cnn_json_quote(char *buf, size_t cap, const char *s, size_t len) {
    CNN_ASSERT(buf && cap >= 8);
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        uint8_t c = (uint8_t)s[i];
        bool plain = c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
        if (o + (plain ? 1 : 4) + 4 > cap) { /* keep room for "..." and the NUL */
            memcpy(buf + o, "...", 4);
            return buf;
        }
        if (plain) {
            buf[o++] = (char)c;
        } else {
            snprintf(buf + o, 5, "\\x%02x", c);
            o += 4;
        }
    }
    buf[o] = 0;
    return buf;
}

/* ---- strings ------------------------------------------------------------------------------------------ */

static int hex4(const uint8_t *h) {
    int v = 0;
    for (int i = 0; i < 4; i++) {
        uint8_t c = h[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* One escape at p->pos (a backslash) -> 1..4 UTF-8 bytes in enc. */
static cnn_status parse_escape(parser *p, uint8_t enc[4], size_t *k) {
    size_t at = p->pos;
    if (p->len - p->pos < 2) return bad(p, at, "truncated escape sequence");
    uint8_t e = p->s[p->pos + 1];
    p->pos += 2;
    *k = 1;
    switch (e) {
    case '"': enc[0] = '"'; return CNN_OK;
    case '\\': enc[0] = '\\'; return CNN_OK;
    case '/': enc[0] = '/'; return CNN_OK;
    case 'b': enc[0] = '\b'; return CNN_OK;
    case 'f': enc[0] = '\f'; return CNN_OK;
    case 'n': enc[0] = '\n'; return CNN_OK;
    case 'r': enc[0] = '\r'; return CNN_OK;
    case 't': enc[0] = '\t'; return CNN_OK;
    case 'u': break;
    default: {
        char d[16];
        return bad(p, at, "invalid escape: backslash followed by %s", describe(e, d));
    }
    }
    int cp = p->len - p->pos >= 4 ? hex4(p->s + p->pos) : -1;
    if (cp < 0) return bad(p, at, "\\u must be followed by 4 hex digits");
    p->pos += 4;
    if (cp >= 0xdc00 && cp <= 0xdfff) return bad(p, at, "\\u%04X is a lone low surrogate", (unsigned)cp);
    if (cp >= 0xd800 && cp <= 0xdbff) {
        int lo = p->len - p->pos >= 6 && p->s[p->pos] == '\\' && p->s[p->pos + 1] == 'u' ? hex4(p->s + p->pos + 2) : -1;
        if (lo < 0xdc00 || lo > 0xdfff)
            return bad(p, at, "\\u%04X is a high surrogate without a low surrogate after it", (unsigned)cp);
        p->pos += 6;
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
    }
    if (cp < 0x80) {
        enc[0] = (uint8_t)cp;
    } else if (cp < 0x800) {
        enc[0] = (uint8_t)(0xc0 | cp >> 6);
        enc[1] = (uint8_t)(0x80 | (cp & 0x3f));
        *k = 2;
    } else if (cp < 0x10000) {
        enc[0] = (uint8_t)(0xe0 | cp >> 12);
        enc[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
        enc[2] = (uint8_t)(0x80 | (cp & 0x3f));
        *k = 3;
    } else {
        enc[0] = (uint8_t)(0xf0 | cp >> 18);
        enc[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3f));
        enc[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
        enc[3] = (uint8_t)(0x80 | (cp & 0x3f));
        *k = 4;
    }
    return CNN_OK;
}

/* The string at p->pos (a '"'), stored decoded and NUL-terminated in p->strs. Decoding never grows a string (an
 * escape of n bytes gives at most n - 2), and the two quotes pay for the NUL. */
static cnn_status parse_string(parser *p, const char **out, uint32_t *out_len) {
    size_t start = p->pos++;
    char *dst = p->strs + p->str_bytes;
    size_t n = 0;
    for (;;) {
        /* the common case first: a run of printable ASCII, copied at once */
        size_t run = p->pos;
        while (p->pos < p->len) {
            uint8_t b = p->s[p->pos];
            if (b == '"' || b == '\\' || b < 0x20 || b >= 0x80) break;
            p->pos++;
        }
        memcpy(dst + n, p->s + run, p->pos - run);
        n += p->pos - run;
        if (p->pos >= p->len) return bad(p, start, "unterminated string");
        uint8_t c = p->s[p->pos];
        if (c == '"') {
            p->pos++;
            break;
        }
        if (c < 0x20) return bad(p, p->pos, "raw control character 0x%02x in a string (must be escaped)", c);
        if (c == '\\') {
            uint8_t enc[4];
            size_t k;
            CNN_TRY(parse_escape(p, enc, &k));
            memcpy(dst + n, enc, k);
            n += k;
            continue;
        }
        size_t k = cnn_utf8_seq(p->s + p->pos, p->len - p->pos);
        if (!k) return bad(p, p->pos, "invalid UTF-8 in a string");
        memcpy(dst + n, p->s + p->pos, k);
        n += k;
        p->pos += k;
    }
    dst[n] = 0;
    p->str_bytes += n + 1;
    *out = dst;
    *out_len = (uint32_t)n; /* n < len <= UINT32_MAX */
    return CNN_OK;
}

/* ---- numbers, literals, containers -------------------------------------------------------------------- */

static cnn_status parse_number(parser *p, cnn_json *v) {
    size_t start = p->pos;
    bool neg = false, is_int = true, overflow = false;
    uint64_t mag = 0;
    if (p->s[p->pos] == '-') {
        neg = true;
        p->pos++;
    }
    if (p->pos >= p->len || !is_digit(p->s[p->pos])) return bad(p, start, "'-' must be followed by digits");
    if (p->s[p->pos] == '0') {
        p->pos++;
        if (p->pos < p->len && is_digit(p->s[p->pos])) return bad(p, start, "numbers may not have leading zeros");
    } else {
        while (p->pos < p->len && is_digit(p->s[p->pos])) {
            uint64_t d = (uint64_t)(p->s[p->pos++] - '0');
            if (mag > (UINT64_MAX - d) / 10)
                overflow = true;
            else
                mag = mag * 10 + d;
        }
    }
    if (p->pos < p->len && p->s[p->pos] == '.') {
        is_int = false;
        p->pos++;
        if (p->pos >= p->len || !is_digit(p->s[p->pos])) return bad(p, start, "digits must follow the '.' of a number");
        while (p->pos < p->len && is_digit(p->s[p->pos]))
            p->pos++;
    }
    if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        is_int = false;
        p->pos++;
        if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) p->pos++;
        if (p->pos >= p->len || !is_digit(p->s[p->pos]))
            return bad(p, start, "digits must follow the exponent of a number");
        while (p->pos < p->len && is_digit(p->s[p->pos]))
            p->pos++;
    }
    if (is_int && (overflow || (neg && mag > (uint64_t)1 << 63)))
        return bad(p, start, "integer out of the 64-bit range (%s)", neg ? "below -2^63" : "above 2^64 - 1");
    if (is_int) {
        v->type = CNN_JSON_INT;
        v->u = mag;
        v->neg = neg;
    } else { /* keep the text, NUL-terminated, so the tree does not point into the caller's buffer */
        size_t n = p->pos - start;
        char *dst = p->strs + p->str_bytes;
        memcpy(dst, p->s + start, n);
        dst[n] = 0;
        p->str_bytes += n + 1;
        v->type = CNN_JSON_NUMBER;
        v->str = dst;
        v->len = (uint32_t)n;
    }
    return CNN_OK;
}

static bool match(parser *p, const char *lit) {
    size_t n = strlen(lit);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, lit, n) != 0) return false;
    p->pos += n;
    return true;
}

static int key_cmp(const void *a, const void *b) {
    const cnn_json *x = *(const cnn_json *const *)a, *y = *(const cnn_json *const *)b;
    if (x->key_len != y->key_len) return x->key_len < y->key_len ? -1 : 1;
    return memcmp(x->key, y->key, x->key_len);
}

/* Fail if two members of obj (which starts at byte `at`) have the same key. */
static cnn_status check_duplicates(parser *p, const cnn_json *obj, size_t at) {
    uint32_t m = obj->len;
    if (m < 2) return CNN_OK;
    if (m > p->scratch_cap) {
        size_t cap = m > 2 * p->scratch_cap ? m : 2 * p->scratch_cap; /* m <= values: no overflow */
        const cnn_json **a = realloc(p->scratch, cap * sizeof *a);
        if (!a) return cnn_fail(CNN_E_OOM, "out of host memory checking a JSON object of %u members", (unsigned)m);
        p->scratch = a;
        p->scratch_cap = cap;
    }
    const cnn_json **a = p->scratch;
    size_t i = 0;
    for (const cnn_json *c = obj + 1; c; c = c->next)
        a[i++] = c;
    CNN_ASSERT(i == m);
    const cnn_json *dup = NULL;
    if (m <= 8) {
        for (uint32_t x = 0; x < m && !dup; x++)
            for (uint32_t y = x + 1; y < m && !dup; y++)
                if (key_cmp(&a[x], &a[y]) == 0) dup = a[y];
    } else {
        qsort(a, m, sizeof *a, key_cmp);
        for (uint32_t x = 1; x < m && !dup; x++)
            if (key_cmp(&a[x - 1], &a[x]) == 0) dup = a[x];
    }
    if (!dup) return CNN_OK;
    char q[128];
    return cnn_fail(CNN_E_FORMAT, "invalid JSON: duplicate key \"%s\" in the object at byte %zu",
                    cnn_json_quote(q, sizeof q, dup->key, dup->key_len), at);
}

static cnn_status parse_value(parser *p);

static cnn_status parse_container(parser *p, cnn_json *v, bool is_obj) {
    size_t start = p->pos++;
    if (++p->depth > p->max_depth) return bad(p, start, "nesting deeper than %d levels", p->max_depth);
    const char close = is_obj ? '}' : ']';
    uint32_t count = 0;
    cnn_json *prev = NULL;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == close) {
        p->pos++;
    } else {
        for (;;) {
            const char *key = NULL;
            uint32_t key_len = 0;
            if (is_obj) {
                if (p->pos >= p->len || p->s[p->pos] != '"') {
                    char d[16];
                    if (p->pos >= p->len) return bad(p, start, "unterminated object");
                    return bad(p, p->pos, "expected a string key, found %s", describe(p->s[p->pos], d));
                }
                CNN_TRY(parse_string(p, &key, &key_len));
                skip_ws(p);
                if (p->pos >= p->len || p->s[p->pos] != ':') return bad(p, p->pos, "expected ':' after an object key");
                p->pos++;
                skip_ws(p);
            }
            size_t idx = p->n_values;
            CNN_TRY(parse_value(p));
            count++;
            cnn_json *child = &p->nodes[idx];
            child->key = key;
            child->key_len = key_len;
            if (prev) prev->next = child;
            prev = child;
            skip_ws(p);
            if (p->pos >= p->len) return bad(p, start, "unterminated %s", is_obj ? "object" : "array");
            uint8_t c = p->s[p->pos++];
            if (c == (uint8_t)close) break;
            if (c != ',') {
                char d[16];
                return bad(p, p->pos - 1, "expected ',' or '%c', found %s", close, describe(c, d));
            }
            skip_ws(p);
        }
    }
    p->depth--;
    v->type = is_obj ? CNN_JSON_OBJECT : CNN_JSON_ARRAY;
    v->len = count;
    return is_obj ? check_duplicates(p, v, start) : CNN_OK;
}

static cnn_status parse_value(parser *p) {
    if (p->pos >= p->len) return bad(p, p->pos, "unexpected end of text, expected a value");
    if (p->n_values >= p->max_values) return bad(p, p->pos, "more than %zu values", p->max_values);
    CNN_ASSERT(p->n_values < p->cap_values); /* the bound at the top of the file */
    cnn_json *v = &p->nodes[p->n_values++];
    memset(v, 0, sizeof *v);
    uint8_t c = p->s[p->pos];
    switch (c) {
    case '{': return parse_container(p, v, true);
    case '[': return parse_container(p, v, false);
    case '"': {
        const char *s;
        uint32_t n;
        CNN_TRY(parse_string(p, &s, &n));
        v->type = CNN_JSON_STRING;
        v->str = s;
        v->len = n;
        return CNN_OK;
    }
    case 't':
    case 'f':
    case 'n': {
        cnn_json_type t = c == 't' ? CNN_JSON_TRUE : c == 'f' ? CNN_JSON_FALSE : CNN_JSON_NULL;
        if (!match(p, c == 't' ? "true" : c == 'f' ? "false" : "null")) break;
        v->type = (uint8_t)t;
        return CNN_OK;
    }
    default:
        if (c == '-' || is_digit(c)) return parse_number(p, v);
        break;
    }
    char d[16];
    return bad(p, p->pos, "unexpected %s, expected a value", describe(c, d));
}

static cnn_status parse_document(parser *p) {
    skip_ws(p);
    if (p->pos >= p->len) return bad(p, p->pos, "empty text, expected a value");
    CNN_TRY(parse_value(p));
    skip_ws(p);
    if (p->pos != p->len) {
        char d[16];
        return bad(p, p->pos, "unexpected %s after the end of the value", describe(p->s[p->pos], d));
    }
    return CNN_OK;
}

/* ---- the public entry points -------------------------------------------------------------------------- */

cnn_status cnn_json_parse(const char *text, size_t len, const cnn_json_limits *limits, cnn_json **root) {
    CNN_ASSERT(root && (text || len == 0));
    *root = NULL;
    int max_depth = limits ? limits->max_depth : 64;
    size_t max_values = limits ? limits->max_values : SIZE_MAX;
    CNN_ASSERT(max_depth >= 1 && max_depth <= 1024);
    if (len > UINT32_MAX) return cnn_fail(CNN_E_FORMAT, "JSON text of %zu bytes is larger than the 4 GiB limit", len);

    /* the arena: values, then strings (see the top of the file for why these bounds hold) */
    size_t cap_values = len / 2 + (size_t)max_depth + 2;
    if (cap_values > max_values) cap_values = max_values == 0 ? 1 : max_values;
    uint64_t node_bytes, total;
    if (!cnn_mul_ok(cap_values, sizeof(cnn_json), &node_bytes) || !cnn_add_ok(node_bytes, len + cap_values, &total) ||
        total > SIZE_MAX)
        return cnn_fail(CNN_E_OOM, "JSON text of %zu bytes is too large for this host", len);
    cnn_json *nodes = cnn_malloc((size_t)total, "JSON document");
    if (!nodes) return CNN_E_OOM;
    parser p = {.s = (const uint8_t *)text,
                .len = len,
                .max_depth = max_depth,
                .max_values = max_values,
                .nodes = nodes,
                .cap_values = cap_values,
                .strs = (char *)(nodes + cap_values)};
    cnn_status st = parse_document(&p);
    free(p.scratch);
    CNN_ASSERT(p.str_bytes <= len + p.n_values);
    if (st != CNN_OK) {
        free(nodes);
        return st;
    }
    *root = nodes;
    return CNN_OK;
}

void cnn_json_free(cnn_json *root) { free(root); }

const cnn_json *cnn_json_get(const cnn_json *obj, const char *key) {
    if (obj->type != CNN_JSON_OBJECT) return NULL;
    size_t n = strlen(key);
    for (const cnn_json *m = cnn_json_first(obj); m; m = m->next)
        if (m->key_len == n && memcmp(m->key, key, n) == 0) return m;
    return NULL;
}

bool cnn_json_u64(const cnn_json *v, uint64_t *out) {
    if (v->type != CNN_JSON_INT || (v->neg && v->u != 0)) return false;
    *out = v->u;
    return true;
}

bool cnn_json_i64(const cnn_json *v, int64_t *out) {
    if (v->type != CNN_JSON_INT) return false;
    if (v->neg) {
        if (v->u > (uint64_t)1 << 63) return false;
        *out = v->u == (uint64_t)1 << 63 ? INT64_MIN : -(int64_t)v->u;
    } else {
        if (v->u > (uint64_t)INT64_MAX) return false;
        *out = (int64_t)v->u;
    }
    return true;
}
