/* datasets_small.c — the small-image datasets held whole in memory: MNIST-format IDX files (MNIST, Fashion-MNIST;
 * gzipped or not) and the CIFAR-100 binaries. Every count and size comes from the file and is checked before it
 * is used: a wrong magic, a truncated payload or counts whose product overflows are one-line errors. */
#include "cnn/data.h"
#include "cnn/io.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef CNN_HAVE_ZLIB
#include <zlib.h>
#endif

/* ---- gzip --------------------------------------------------------------------------------------------------- */

cnn_status cnn_read_maybe_gz(const char *path, size_t max_bytes, uint8_t **out, size_t *len) {
    *out = NULL;
    *len = 0;
    uint8_t *buf;
    size_t n;
    /* a compressed file is smaller than what it holds; the inflated size is capped below */
    CNN_TRY(cnn_read_file(path, max_bytes, &buf, &n));
    if (n < 2 || buf[0] != 0x1f || buf[1] != 0x8b) {
        *out = buf;
        *len = n;
        return CNN_OK;
    }
    cnn_status st = cnn_gunzip(buf, n, path, max_bytes, out, len);
    free(buf);
    return st;
}

cnn_status cnn_gunzip(const uint8_t *buf, size_t n, const char *path, size_t max_bytes, uint8_t **out, size_t *len) {
    *out = NULL;
    *len = 0;
#ifdef CNN_HAVE_ZLIB
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return cnn_fail(CNN_E_OOM, "%s: cannot start zlib", path);
    size_t cap = n * 4 + 1024, used = 0;
    uint8_t *dst = NULL;
    cnn_status st = CNN_OK;
    z.next_in = (Bytef *)buf;
    z.avail_in = (uInt)(n > 0xffffffffu ? 0xffffffffu : n);
    for (;;) {
        if (cap > max_bytes + 1) cap = max_bytes + 1;
        uint8_t *t = realloc(dst, cap + 1);
        if (!t) {
            st = cnn_fail(CNN_E_OOM, "%s: out of memory inflating", path);
            break;
        }
        dst = t;
        z.next_out = dst + used;
        z.avail_out = (uInt)(cap - used);
        int rc = inflate(&z, Z_NO_FLUSH);
        used = cap - z.avail_out;
        if (rc == Z_STREAM_END) break;
        if (rc != Z_OK && !(rc == Z_BUF_ERROR && z.avail_out == 0)) {
            st = cnn_fail(CNN_E_FORMAT, "%s: corrupt or truncated gzip data (%s)", path,
                          rc == Z_BUF_ERROR ? "unexpected end of file" : z.msg ? z.msg : "zlib error");
            break;
        }
        if (used > max_bytes) {
            st = cnn_fail(CNN_E_FORMAT, "%s: inflates to more than %zu bytes", path, max_bytes);
            break;
        }
        if (z.avail_out == 0) cap *= 2;
    }
    inflateEnd(&z);
    if (st != CNN_OK) {
        free(dst);
        return st;
    }
    dst[used] = 0;
    *out = dst;
    *len = used;
    return CNN_OK;
#else
    (void)buf;
    (void)n;
    (void)max_bytes;
    return cnn_fail(CNN_E_UNSUPPORTED, "%s: gzip support was not built (install zlib1g-dev and rebuild, or gunzip it)",
                    path);
#endif
}

/* ---- IDX ---------------------------------------------------------------------------------------------------- */

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

cnn_status cnn_idx_parse(const uint8_t *buf, size_t len, const char *name, int want_ndim, int64_t dims[3],
                         const uint8_t **payload) {
    if (len < 4) return cnn_fail(CNN_E_FORMAT, "%s: %zu bytes, too short for an IDX file", name, len);
    if (buf[0] != 0 || buf[1] != 0 || buf[2] != 0x08)
        return cnn_fail(CNN_E_FORMAT, "%s: not an IDX file of unsigned bytes (magic %02x %02x %02x %02x, expected 00 00 08 %02x)",
                        name, buf[0], buf[1], buf[2], buf[3], want_ndim);
    if (buf[3] != want_ndim)
        return cnn_fail(CNN_E_FORMAT, "%s: IDX file of %d dimensions, expected %d", name, buf[3], want_ndim);
    size_t head = 4 + 4 * (size_t)want_ndim;
    if (len < head) return cnn_fail(CNN_E_FORMAT, "%s: truncated IDX header", name);
    uint64_t count = 1;
    for (int d = 0; d < want_ndim; d++) {
        uint32_t v = be32(buf + 4 + 4 * d);
        if (v == 0 || v > INT32_MAX)
            return cnn_fail(CNN_E_FORMAT, "%s: IDX dimension %d is %u", name, d, v);
        if (!cnn_mul_ok(count, v, &count))
            return cnn_fail(CNN_E_FORMAT, "%s: IDX dimensions overflow", name);
        dims[d] = v;
    }
    if (count > len - head)
        return cnn_fail(CNN_E_FORMAT, "%s: truncated: the header promises %llu bytes of data, the file holds %zu", name,
                        (unsigned long long)count, len - head);
    if (count < len - head)
        return cnn_fail(CNN_E_FORMAT, "%s: %zu bytes after the %llu the header promises", name, len - head - count,
                        (unsigned long long)count);
    *payload = buf + head;
    return CNN_OK;
}

/* DIR/<stem> or DIR/<stem>.gz */
static cnn_status idx_path(const char *dir, const char *stem, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", dir, stem);
    if (access(path, F_OK) == 0) return CNN_OK;
    snprintf(path, cap, "%s/%s.gz", dir, stem);
    if (access(path, F_OK) == 0) return CNN_OK;
    return cnn_fail(CNN_E_IO, "%s/%s: no such file (nor with .gz)", dir, stem);
}

#define IDX_MAX_BYTES ((size_t)1 << 31)

cnn_status cnn_load_idx(const char *dir, const char *what, const cnn_data_opts *o, cnn_dataset *d) {
    const char *pre = o->split == CNN_SPLIT_TRAIN ? "train" : "t10k";
    char ipath[4096], lpath[4096], stem[64];
    snprintf(stem, sizeof stem, "%s-images-idx3-ubyte", pre);
    CNN_TRY(idx_path(dir, stem, ipath, sizeof ipath));
    snprintf(stem, sizeof stem, "%s-labels-idx1-ubyte", pre);
    CNN_TRY(idx_path(dir, stem, lpath, sizeof lpath));
    uint8_t *ib = NULL, *lb = NULL;
    size_t il = 0, ll = 0;
    cnn_status st = cnn_read_maybe_gz(ipath, IDX_MAX_BYTES, &ib, &il);
    if (st == CNN_OK) st = cnn_read_maybe_gz(lpath, IDX_MAX_BYTES, &lb, &ll);
    int64_t idims[3] = {0}, ldims[3] = {0};
    const uint8_t *ipix = NULL, *lab = NULL;
    if (st == CNN_OK) st = cnn_idx_parse(ib, il, ipath, 3, idims, &ipix);
    if (st == CNN_OK) st = cnn_idx_parse(lb, ll, lpath, 1, ldims, &lab);
    if (st == CNN_OK && idims[0] != ldims[0])
        st = cnn_fail(CNN_E_FORMAT, "%s holds %lld images but %s %lld labels", ipath, (long long)idims[0], lpath,
                      (long long)ldims[0]);
    if (st == CNN_OK && (idims[1] > 4096 || idims[2] > 4096))
        st = cnn_fail(CNN_E_FORMAT, "%s: images of %lldx%lld pixels (at most 4096x4096)", ipath, (long long)idims[2],
                      (long long)idims[1]);
    int total = (int)idims[0];
    for (int i = 0; st == CNN_OK && i < total; i++)
        if (lab[i] > 9) st = cnn_fail(CNN_E_FORMAT, "%s: label %d of image %d is outside 0..9", lpath, lab[i], i);
    if (st == CNN_OK) {
        int n = o->limit > 0 && o->limit < total ? o->limit : total;
        d->n = n;
        d->c = 1;
        d->h = (int)idims[1];
        d->w = (int)idims[2];
        d->classes = 10;
        size_t per = (size_t)d->h * d->w;
        d->pix = cnn_malloc((size_t)n * per, what);
        d->labels = cnn_malloc((size_t)n * sizeof *d->labels, "labels");
        if (!d->pix || !d->labels) st = CNN_E_OOM;
        if (st == CNN_OK) {
            memcpy(d->pix, ipix, (size_t)n * per);
            for (int i = 0; i < n; i++) d->labels[i] = lab[i];
        }
    }
    free(ib);
    free(lb);
    return st;
}

/* ---- CIFAR-100 ---------------------------------------------------------------------------------------------- */

#define C100_RECORD 3074

cnn_status cnn_load_cifar100(const char *dir, const cnn_data_opts *o, cnn_dataset *d) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.bin", dir, o->split == CNN_SPLIT_TRAIN ? "train" : "test");
    int total = o->split == CNN_SPLIT_TRAIN ? 50000 : 10000;
    uint8_t *buf;
    size_t len;
    CNN_TRY(cnn_read_file(path, (size_t)C100_RECORD * total + 1, &buf, &len));
    cnn_status st = cnn_cifar100_parse(buf, len, path, total, o, d);
    free(buf);
    return st;
}

cnn_status cnn_cifar100_parse(const uint8_t *buf, size_t len, const char *path, int total, const cnn_data_opts *o,
                              cnn_dataset *d) {
    if (len != (size_t)C100_RECORD * total)
        return cnn_fail(CNN_E_FORMAT, "%s: %zu bytes, a CIFAR-100 %s file has exactly %d (%d records of 3074)", path,
                        len, o->split == CNN_SPLIT_TRAIN ? "train" : "test", C100_RECORD * total, total);
    int n = o->limit > 0 && o->limit < total ? o->limit : total;
    d->n = n;
    d->c = 3;
    d->h = d->w = 32;
    d->classes = o->coarse ? 20 : 100;
    d->pix = cnn_malloc((size_t)n * 3072, "CIFAR-100 images");
    d->labels = cnn_malloc((size_t)n * sizeof *d->labels, "CIFAR-100 labels");
    cnn_status st = d->pix && d->labels ? CNN_OK : CNN_E_OOM;
    for (int r = 0; st == CNN_OK && r < n; r++) {
        const uint8_t *rec = buf + (size_t)r * C100_RECORD;
        if (rec[0] > 19 || rec[1] > 99)
            st = cnn_fail(CNN_E_FORMAT, "%s: record %d has coarse label %d and fine label %d (CIFAR-100: 0..19, 0..99)",
                          path, r, rec[0], rec[1]);
        d->labels[r] = o->coarse ? rec[0] : rec[1];
        memcpy(d->pix + (size_t)r * 3072, rec + 2, 3072);
    }
    return st;
}
