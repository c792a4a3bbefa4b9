/* data.c — dataset loaders (synthetic, CIFAR-10 binary, safetensors tensors; the others in datasets_*.c) and
 * the batch loader. */
#include "cnn/data.h"
#include "cnn/io.h"
#include "cnn/safetensors.h"
#include "parsers.h"
#include "pipeline.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CIFAR_RECORD 3073
#define CIFAR_FILE_RECORDS 10000

static const float cifar_mean[3] = {0.4914f, 0.4822f, 0.4465f};
static const float cifar_std[3] = {0.2470f, 0.2435f, 0.2616f};

/* Normalisation and pad-crop padding per source: the statistics torchvision's examples use. */
static const struct {
    const char *source;
    float mean[3], std[3];
    int pad;
} norms[] = {
    {.source = "cifar100", .mean = {0.5071f, 0.4865f, 0.4409f}, .std = {0.2673f, 0.2564f, 0.2762f}, .pad = 4},
    {.source = "mnist", .mean = {0.1307f, 0.1307f, 0.1307f}, .std = {0.3081f, 0.3081f, 0.3081f}, .pad = 2},
    {.source = "fashion-mnist", .mean = {0.2860f, 0.2860f, 0.2860f}, .std = {0.3530f, 0.3530f, 0.3530f}, .pad = 2},
    {.source = "folder", .mean = {0.485f, 0.456f, 0.406f}, .std = {0.229f, 0.224f, 0.225f}, .pad = 0},
};

#define FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

void cnn_dataset_free(cnn_dataset *d) {
    if (!d) return;
    free(d->pix);
    free(d->fpix);
    free(d->labels);
    cnn_file_list_free(d->files);
    for (int i = 0; d->class_names && i < d->classes; i++) free(d->class_names[i]);
    free(d->class_names);
    memset(d, 0, sizeof *d);
}

static cnn_status parse_floats(const char *s, const char *what, float out[3]) {
    float v[3];
    int n = 0;
    const char *p = s;
    while (n < 3) {
        char *end;
        errno = 0;
        double x = strtod(p, &end);
        if (end == p || errno || !isfinite(x)) break;
        v[n++] = (float)x;
        p = end;
        if (*p != ',') break;
        p++;
    }
    if (*p || (n != 1 && n != 3))
        return cnn_fail(CNN_E_INVALID, "--%s '%s': expected one number or three separated by commas", what, s);
    for (int i = 0; i < 3; i++) out[i] = v[n == 1 ? 0 : i];
    return CNN_OK;
}

cnn_status cnn_dataset_set_norm(cnn_dataset *d, const char *mean, const char *std) {
    float m[3], s[3];
    if (mean) {
        CNN_TRY(parse_floats(mean, "mean", m));
        memcpy(d->mean, m, sizeof m);
    }
    if (std) {
        CNN_TRY(parse_floats(std, "std", s));
        for (int i = 0; i < 3; i++)
            if (!(s[i] > 0)) return cnn_fail(CNN_E_INVALID, "--std '%s': every value must be > 0", std);
        memcpy(d->std, s, sizeof s);
    }
    return CNN_OK;
}

/* ---- synthetic ---------------------------------------------------------------------------------------- */

/* Ten classes told apart by the orientation of a coloured grating (18 degrees apart) and, less reliably, by a
 * colour cast; phase, frequency, contrast, brightness, a distracting blob and pixel noise vary per image. A
 * small CNN reaches high accuracy within a few hundred steps; a linear model on colour alone cannot. */
static const float palette[10][3] = {
    {1.0f, 0.3f, 0.3f}, {0.3f, 1.0f, 0.3f}, {0.3f, 0.3f, 1.0f}, {1.0f, 1.0f, 0.3f}, {1.0f, 0.3f, 1.0f},
    {0.3f, 1.0f, 1.0f}, {1.0f, 0.6f, 0.2f}, {0.6f, 0.2f, 1.0f}, {0.2f, 0.6f, 0.6f}, {0.8f, 0.8f, 0.8f},
};

int cnn_synthetic_sample(uint64_t seed, cnn_split split, int64_t i, uint8_t *pix) {
    uint32_t r[4], q[4];
    uint64_t key = seed * 0x2545F4914F6CDD1DULL + 0x73796e7468ULL + (uint64_t)split;
    cnn_philox(key, 0, (uint64_t)i, r);
    cnn_philox(key, 1, (uint64_t)i, q);
    int label = (int)(r[0] % 10u);
    const double pi = 3.14159265358979323846;
    double theta = label * pi / 10.0 + (cnn_u01(r[1]) - 0.5) * (pi / 30.0);
    double freq = 2.0 + 2.5 * cnn_u01(r[2]);
    double phase = 2.0 * pi * cnn_u01(r[3]);
    double amp = 45.0 + 45.0 * cnn_u01(q[0]);
    double bright = 100.0 + 60.0 * cnn_u01(q[1]);
    int bx = (int)(q[2] % 32u), by = (int)((q[2] >> 8) % 32u), brad = 3 + (int)((q[2] >> 16) % 5u);
    int bcol = (int)((q[2] >> 24) % 10u);
    int cast = (int)(q[3] % 10u) < 6 ? label : (int)((q[3] >> 8) % 10u); /* 60% the class colour */
    double ct = cos(theta), sn = sin(theta);
    for (int y = 0; y < 32; y++) {
        for (int x = 0; x < 32; x++) {
            double g = sin(2.0 * pi * freq * (x * ct + y * sn) / 32.0 + phase);
            bool blob = (x - bx) * (x - bx) + (y - by) * (y - by) <= brad * brad;
            uint32_t nz[4];
            cnn_philox(key, 2 + (uint64_t)i, (uint64_t)(y * 32 + x), nz);
            for (int c = 0; c < 3; c++) {
                double v = bright + amp * g * palette[label][c] + 25.0 * (palette[cast][c] - 0.6);
                if (blob) v = 0.5 * v + 110.0 * palette[bcol][c];
                v += 18.0 * (cnn_u01(nz[c]) - 0.5) * 2.0;
                v = v < 0 ? 0 : v > 255 ? 255 : v;
                pix[(c * 32 + y) * 32 + x] = (uint8_t)lrint(v);
            }
        }
    }
    return label;
}

static cnn_status load_synthetic(const cnn_data_opts *o, cnn_dataset *d) {
    int n = o->limit > 0 ? o->limit : (o->split == CNN_SPLIT_TRAIN ? 10000 : 2000);
    d->n = n; d->c = 3; d->h = 32; d->w = 32; d->classes = 10;
    d->pix = cnn_malloc((size_t)n * 3072, "synthetic images");
    d->labels = cnn_malloc((size_t)n * sizeof *d->labels, "synthetic labels");
    if (!d->pix || !d->labels) return CNN_E_OOM;
#pragma omp parallel for schedule(dynamic, 64)
    for (int i = 0; i < n; i++) d->labels[i] = cnn_synthetic_sample(o->seed, o->split, i, d->pix + (size_t)i * 3072);
    return CNN_OK;
}

/* ---- CIFAR-10 ----------------------------------------------------------------------------------------- */

cnn_status cnn_cifar10_parse(const uint8_t *buf, size_t len, const char *path, int records, int take, uint8_t *pix,
                             int32_t *labels) {
    if (len != (size_t)CIFAR_RECORD * (size_t)records)
        return cnn_fail(CNN_E_FORMAT, "%s: %zu bytes, a CIFAR-10 batch file has exactly %lld (%d records of %d)", path,
                        len, (long long)CIFAR_RECORD * records, records, CIFAR_RECORD);
    CNN_ASSERT(take >= 0 && take <= records);
    for (int r = 0; r < records; r++) { /* every label, also of records not taken: the file is whole or refused */
        const uint8_t *rec = buf + (size_t)r * CIFAR_RECORD;
        if (rec[0] > 9)
            return cnn_fail(CNN_E_FORMAT, "%s: record %d has label %d, CIFAR-10 labels are 0..9", path, r, rec[0]);
        if (r < take) {
            labels[r] = rec[0];
            memcpy(pix + (size_t)r * 3072, rec + 1, 3072);
        }
    }
    return CNN_OK;
}

static cnn_status load_cifar(const char *dir, const cnn_data_opts *o, cnn_dataset *d) {
    int nfiles = o->split == CNN_SPLIT_TRAIN ? 5 : 1;
    int total = nfiles * CIFAR_FILE_RECORDS;
    int n = o->limit > 0 && o->limit < total ? o->limit : total;
    d->n = n; d->c = 3; d->h = 32; d->w = 32; d->classes = 10;
    d->pix = cnn_malloc((size_t)n * 3072, "CIFAR-10 images");
    d->labels = cnn_malloc((size_t)n * sizeof *d->labels, "CIFAR-10 labels");
    if (!d->pix || !d->labels) return CNN_E_OOM;
    int filled = 0;
    for (int f = 0; f < nfiles && filled < n; f++) {
        char path[4096];
        if (o->split == CNN_SPLIT_TRAIN) snprintf(path, sizeof path, "%s/data_batch_%d.bin", dir, f + 1);
        else snprintf(path, sizeof path, "%s/test_batch.bin", dir);
        uint8_t *buf;
        size_t len;
        CNN_TRY(cnn_read_file(path, (size_t)CIFAR_RECORD * CIFAR_FILE_RECORDS + 1, &buf, &len));
        int take = n - filled < CIFAR_FILE_RECORDS ? n - filled : CIFAR_FILE_RECORDS;
        cnn_status st = cnn_cifar10_parse(buf, len, path, CIFAR_FILE_RECORDS, take, d->pix + (size_t)filled * 3072,
                                          d->labels + filled);
        free(buf);
        CNN_TRY(st);
        filled += take;
    }
    return CNN_OK;
}

/* ---- tensors ------------------------------------------------------------------------------------------ */

cnn_status cnn_tensors_dataset(const cnn_st_file *f, const char *path, const cnn_data_opts *o, cnn_dataset *d) {
    cnn_status st = CNN_OK;
    const cnn_st_entry *im = cnn_st_find(f, "images"), *lb = cnn_st_find(f, "labels");
    char b[96];
    if (!im || !lb) st = cnn_fail(CNN_E_MISMATCH, "%s: needs tensors \"images\" and \"labels\"", path);
    else if (im->dtype != CNN_DTYPE_F32 || im->ndim != 4 || im->shape[1] != 3)
        st = cnn_fail(CNN_E_MISMATCH, "%s: \"images\" must be F32 (N, 3, H, W), got %s %s", path,
                      cnn_dtype_name(im->dtype), cnn_shape_str(im->shape, im->ndim, b, sizeof b));
    else if (lb->dtype != CNN_DTYPE_I64 || lb->ndim != 1 || lb->shape[0] != im->shape[0])
        st = cnn_fail(CNN_E_MISMATCH, "%s: \"labels\" must be I64 (N,) with N = %lld", path, (long long)im->shape[0]);
    else if (im->shape[0] < 1 || im->shape[0] > (1 << 30) || im->shape[2] < 1 || im->shape[3] < 1 ||
             im->shape[2] > 8192 || im->shape[3] > 8192)
        st = cnn_fail(CNN_E_MISMATCH, "%s: \"images\" shape %s out of range", path,
                      cnn_shape_str(im->shape, im->ndim, b, sizeof b));
    CNN_TRY(st);
    int total = (int)im->shape[0];
    int n = o->limit > 0 && o->limit < total ? o->limit : total;
    /* every label is checked, also those of images past the limit: the file is sound or refused */
    const uint8_t *lbytes = cnn_st_tensor_data(f, lb);
    int64_t maxl = 0;
    for (int i = 0; i < total; i++) {
        int64_t v;
        memcpy(&v, lbytes + 8 * (size_t)i, 8);
        if (v < 0 || (o->num_classes > 0 && v >= o->num_classes))
            return cnn_fail(CNN_E_MISMATCH, "%s: label %lld of image %d is outside [0, %d)", path, (long long)v, i,
                            o->num_classes > 0 ? o->num_classes : CNN_MAX_INFERRED_CLASSES);
        if (v > maxl) maxl = v;
    }
    if (o->num_classes <= 0 && maxl >= CNN_MAX_INFERRED_CLASSES)
        return cnn_fail(CNN_E_MISMATCH, "%s: labels go up to %lld, which would make a %llu-class model; give "
                        "--num-classes to confirm (at most %d classes are inferred)", path, (long long)maxl,
                        (unsigned long long)maxl + 1, CNN_MAX_INFERRED_CLASSES); /* maxl may be INT64_MAX */
    d->n = n; d->c = 3; d->h = (int)im->shape[2]; d->w = (int)im->shape[3];
    d->classes = o->num_classes > 0 ? o->num_classes : (int)maxl + 1;
    size_t per = (size_t)3 * d->h * d->w;
    d->fpix = cnn_malloc((size_t)n * per * sizeof(float), "images");
    d->labels = cnn_malloc((size_t)n * sizeof *d->labels, "labels");
    if (!d->fpix || !d->labels) return CNN_E_OOM;
    memcpy(d->fpix, cnn_st_tensor_data(f, im), (size_t)n * per * sizeof(float));
    for (int i = 0; i < n; i++) {
        int64_t v;
        memcpy(&v, lbytes + 8 * (size_t)i, 8);
        d->labels[i] = (int32_t)v;
    }
    return CNN_OK;
}

static cnn_status load_tensors(const char *path, const cnn_data_opts *o, cnn_dataset *d) {
    cnn_st_file f;
    CNN_TRY(cnn_st_open(path, &f));
    cnn_status st = cnn_tensors_dataset(&f, path, o, d);
    cnn_st_free(&f);
    return st;
}

cnn_status cnn_dataset_load(const cnn_data_opts *o, cnn_dataset *d) {
    memset(d, 0, sizeof *d);
    memcpy(d->mean, cifar_mean, sizeof d->mean);
    memcpy(d->std, cifar_std, sizeof d->std);
    d->pad = 4;
    const char *s = o->source ? o->source : "";
    cnn_status st;
    if (strncmp(s, "cifar100:", 9) == 0 && s[9]) {
        snprintf(d->source, sizeof d->source, "cifar100");
        st = cnn_load_cifar100(s + 9, o, d);
    } else if (strncmp(s, "mnist:", 6) == 0 && s[6]) {
        snprintf(d->source, sizeof d->source, "mnist");
        st = cnn_load_idx(s + 6, "MNIST images", o, d);
    } else if (strcmp(s, "fashion-mnist") == 0 || (strncmp(s, "fashion-mnist:", 14) == 0 && s[14])) {
        snprintf(d->source, sizeof d->source, "fashion-mnist");
        st = cnn_load_idx(s[13] ? s + 14 : FASHION_MNIST_DIR, "Fashion-MNIST images", o, d);
        if (st == CNN_E_IO && !s[13])
            st = cnn_error_prefix(st, "fashion-mnist (apt-get install dataset-fashion-mnist, or fashion-mnist:DIR)");
    } else if (strncmp(s, "folder:", 7) == 0 && s[7]) {
        snprintf(d->source, sizeof d->source, "folder");
        st = cnn_load_folder(s + 7, o, d);
    } else if (strcmp(s, "synthetic") == 0) {
        snprintf(d->source, sizeof d->source, "synthetic");
        st = load_synthetic(o, d);
    } else if (strncmp(s, "cifar10:", 8) == 0 && s[8]) {
        snprintf(d->source, sizeof d->source, "cifar10");
        st = load_cifar(s + 8, o, d);
    } else if (strncmp(s, "tensors:", 8) == 0 && s[8]) {
        snprintf(d->source, sizeof d->source, "tensors");
        st = load_tensors(s + 8, o, d);
    } else {
        return cnn_fail(CNN_E_INVALID, "unknown data source '%s' (expected synthetic, cifar10:DIR, cifar100:DIR, mnist:DIR, "
                        "fashion-mnist[:DIR], folder:DIR or tensors:FILE)", s);
    }
    /* a label at or above the model's class count would index past its logits */
    for (int i = 0; st == CNN_OK && o->num_classes > 0 && i < d->n; i++)
        if (d->labels[i] >= o->num_classes)
            st = cnn_fail(CNN_E_MISMATCH, "%s data: label %d of image %d is not below --num-classes %d", d->source,
                          d->labels[i], i, o->num_classes);
    for (size_t i = 0; i < sizeof norms / sizeof norms[0]; i++)
        if (strcmp(d->source, norms[i].source) == 0) {
            memcpy(d->mean, norms[i].mean, sizeof d->mean);
            memcpy(d->std, norms[i].std, sizeof d->std);
            d->pad = norms[i].pad;
        }
    if (st != CNN_OK) cnn_dataset_free(d);
    return st;
}

/* ---- batches ------------------------------------------------------------------------------------------ */

void cnn_loader_free(cnn_loader *l) {
    if (!l) return;
    if (l->be) {
        if (l->dev_all) l->be->free(l->be, l->dev_all);
        if (l->dev_pix) l->be->free(l->be, l->dev_pix);
        if (l->dev_samples) l->be->free(l->be, l->dev_samples);
    }
    cnn_pipeline_free(l->pipe);
    free(l->perm);
    free(l->host_samples);
    free(l->host_pix);
    free(l->host_f);
    memset(l, 0, sizeof *l);
}

cnn_status cnn_loader_init(cnn_loader *l, const cnn_dataset *ds, cnn_backend *be, int max_batch, bool augment,
                           bool shuffle, uint64_t seed) {
    memset(l, 0, sizeof *l);
    l->ds = ds; l->be = be; l->max_batch = max_batch; l->augment = augment && (ds->pix || ds->files);
    l->shuffle = shuffle;
    l->seed = seed;
    l->perm_epoch = -1;
    size_t per = (size_t)ds->c * ds->h * ds->w;
    l->perm = cnn_malloc((size_t)ds->n * sizeof *l->perm, "epoch order");
    if (!l->perm) return CNN_E_OOM;
    cnn_status st = CNN_OK;
    if (ds->files) {
        cnn_pipeline_opts po = {.ds = ds, .be = be, .max_batch = max_batch, .depth = 4, .train = l->augment,
                                .shuffle = shuffle, .seed = seed};
        st = cnn_pipeline_create(&po, &l->pipe);
        if (st == CNN_OK && !cnn_pipeline_on_device(l->pipe))
            st = be->alloc(be, (size_t)max_batch * per, "batch pixels", &l->dev_pix);
    } else if (ds->pix) {
        l->host_samples = cnn_malloc((size_t)max_batch * 4 * sizeof(int32_t), "batch samples");
        if (!l->host_samples) st = CNN_E_OOM;
        if (st == CNN_OK) st = be->alloc(be, (size_t)max_batch * 16, "batch samples", &l->dev_samples);
        /* the whole dataset on the backend when it fits: a batch is then one small upload and one kernel */
        if (st == CNN_OK && be->alloc(be, (size_t)ds->n * per, "dataset", &l->dev_all) == CNN_OK) {
            st = be->upload(be, l->dev_all, ds->pix, (size_t)ds->n * per);
        } else if (st == CNN_OK) {
            cnn_log(1, "cnn: the dataset (%zu MB) does not fit on the device; copying it batch by batch",
                    (size_t)ds->n * per >> 20);
            l->dev_all = NULL;
            l->host_pix = cnn_malloc((size_t)max_batch * per, "batch pixels");
            if (!l->host_pix) st = CNN_E_OOM;
            if (st == CNN_OK) st = be->alloc(be, (size_t)max_batch * per, "batch pixels", &l->dev_pix);
        }
    } else {
        l->host_f = cnn_malloc((size_t)max_batch * per * sizeof(float), "batch images");
        if (!l->host_f) st = CNN_E_OOM;
    }
    if (st != CNN_OK) cnn_loader_free(l);
    return st;
}

void cnn_epoch_order(uint64_t seed, int64_t epoch, bool shuffle, int n, int32_t *order) {
    for (int i = 0; i < n; i++) order[i] = i;
    if (!shuffle) return;
    for (int i = n - 1; i > 0; i--) {
        uint32_t r[4];
        cnn_philox(seed ^ 0x5348554646ULL, (uint64_t)epoch, (uint64_t)i, r);
        uint64_t x = ((uint64_t)r[0] << 32) | r[1];
        int j = (int)(x % (uint64_t)(i + 1));
        int32_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

int64_t cnn_loader_skipped(cnn_loader *l) { return l->pipe ? cnn_pipeline_skipped(l->pipe) : 0; }

static void fill_prep(const cnn_loader *l, const cnn_net *net, int n, int pad, int src_n, cnn_prep *pp) {
    const cnn_dataset *ds = l->ds;
    *pp = (cnn_prep){.n = n, .c = ds->c, .h = ds->h, .w = ds->w, .pad = pad, .src_n = src_n, .out_c = net->in_c};
    for (int c = 0; c < 4; c++) {
        pp->mean[c] = ds->mean[c < 3 ? c : 2];
        pp->std[c] = ds->std[c < 3 ? c : 2];
    }
}

/* A batch's pixels to the device; the seconds it took go to *device_s. A large upload waits until the device has
 * finished the steps queued before it: that is the model's time, not the data's, and the data share leaves it out. */
static cnn_status upload_timed(cnn_backend *be, void *dst, const void *src, size_t bytes, double *device_s) {
    double t = cnn_now();
    cnn_status st = be->upload(be, dst, src, bytes);
    *device_s += cnn_now() - t;
    return st;
}

cnn_status cnn_loader_batch(cnn_loader *l, cnn_model *m, int64_t epoch, int64_t start, int n, int64_t *labels) {
    const cnn_dataset *ds = l->ds;
    const cnn_net *net = cnn_model_net(m);
    if (n < 1 || n > l->max_batch || start < 0 || start + n > ds->n)
        return cnn_fail(CNN_E_INVALID, "batch [%lld, %lld) outside the dataset of %d", (long long)start,
                        (long long)(start + n), ds->n);
    bool repeat = ds->c == 1 && net->in_c == 3 && (ds->pix || ds->files);
    if ((ds->c != net->in_c && !repeat) || ds->h != net->in_h || ds->w != net->in_w)
        return cnn_fail(CNN_E_MISMATCH, "data is %dx%dx%d but the model expects %dx%dx%d", ds->c, ds->h, ds->w,
                        net->in_c, net->in_h, net->in_w);
    double t0 = cnn_now(), device_s = 0;
    cnn_backend *be = l->be;
    size_t per = (size_t)ds->c * ds->h * ds->w;
    cnn_prep pp;
    cnn_status st;
    if (ds->files) {
        const uint8_t *pix;
        const int32_t *index;
        double wait = 0;
        st = cnn_pipeline_get(l->pipe, epoch, start, n, &pix, &index, &wait);
        bool on_device = cnn_pipeline_on_device(l->pipe);
        if (st == CNN_OK) {
            for (int i = 0; i < n; i++) labels[i] = ds->labels[index[i]];
            if (!on_device) st = upload_timed(be, l->dev_pix, pix, (size_t)n * per, &device_s);
        }
        fill_prep(l, net, n, 0, n, &pp);
        if (st == CNN_OK)
            st = be->prep_images(be, &pp, on_device ? pix : l->dev_pix, NULL, cnn_model_input_buffer(m));
    } else {
        if (l->perm_epoch != epoch) {
            cnn_epoch_order(l->seed, epoch, l->shuffle, ds->n, l->perm);
            l->perm_epoch = epoch;
        }
        for (int i = 0; i < n; i++) labels[i] = ds->labels[l->perm[start + i]];
        if (ds->fpix) {
            for (int i = 0; i < n; i++)
                memcpy(l->host_f + (size_t)i * per, ds->fpix + (size_t)l->perm[start + i] * per, per * sizeof(float));
            st = cnn_model_upload_input(m, l->host_f, n);
        } else {
            int pad = l->augment ? ds->pad : 0;
            for (int i = 0; i < n; i++) {
                uint32_t r[4];
                cnn_philox(l->seed ^ 0x4155474dULL, (uint64_t)epoch, (uint64_t)(start + i), r);
                int32_t *s = l->host_samples + 4 * i;
                s[0] = l->dev_all ? l->perm[start + i] : i;
                s[1] = l->augment ? (int32_t)(r[0] % (uint32_t)(2 * pad + 1)) : 0;
                s[2] = l->augment ? (int32_t)(r[1] % (uint32_t)(2 * pad + 1)) : 0;
                s[3] = l->augment ? (int32_t)(r[2] & 1u) : 0;
                if (!l->dev_all) memcpy(l->host_pix + (size_t)i * per, ds->pix + (size_t)l->perm[start + i] * per, per);
            }
            st = CNN_OK;
            if (!l->dev_all) st = upload_timed(be, l->dev_pix, l->host_pix, (size_t)n * per, &device_s);
            if (st == CNN_OK) st = be->upload(be, l->dev_samples, l->host_samples, (size_t)n * 16);
            fill_prep(l, net, n, pad, l->dev_all ? ds->n : n, &pp);
            if (st == CNN_OK)
                st = be->prep_images(be, &pp, l->dev_all ? l->dev_all : l->dev_pix, l->dev_samples,
                                     cnn_model_input_buffer(m));
        }
    }
    l->wait_s += cnn_now() - t0 - device_s;
    if (st == CNN_OK) l->images += n;
    return st;
}
