/* pipeline.c — decode threads and the ring of staging buffers of folder datasets (pipeline.h has the contract).
 *
 * The ring holds `depth` slots; slots head, head+1, ... (count of them) are queued batches in order, each FILL
 * (images being claimed and decoded, one image per claim, so every thread works on the oldest batch first) or
 * READY. The slot handed to the caller stays untouched until the next get, which frees it and queues the next
 * predicted batch in it. One mutex guards the ring; the decoding itself runs outside it.
 *
 * With a device JPEG decoder (the backend's jpeg_create; --decode gpu|auto) the threads only read each JPEG and
 * plan its crop, and decode the other files (PNG, unreadable headers) themselves into the host staging buffer; a
 * full slot goes DECODE, and one more thread hands its JPEGs to the device decoder, which writes the batch into
 * the slot's device buffer (uploading the CPU-decoded images beside them); JPEGs the device refuses are decoded on
 * the CPU by that thread and uploaded after. The caller then gets device planes. The crops are the same
 * draws as the CPU path's, planned in the full-size image.
 *
 * --decode mixed: the threads also decode the first n_cpu JPEGs of each batch themselves, uploaded beside the
 * device's, n_cpu chosen when the batch is queued so that the threads and the device finish it together: with T
 * threads, t_dec the seconds one thread takes to decode an image, t_read to only read one, and t_dev the device
 * stage's seconds per image it decodes (running averages), the threads' (n_cpu t_dec + (n - n_cpu) t_read) / T
 * equals the device's (n - n_cpu) t_dev.
 */
#include "pipeline.h"

#include "cnn/image.h"
#include "cnn/io.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_THREADS 256
/* --decode auto decodes on the CPU from this many decode threads up (pipeline_open) */
#define AUTO_CPU_DECODERS 16

typedef enum slot_state { SLOT_FREE = 0, SLOT_FILL, SLOT_DECODE, SLOT_READY } slot_state;

typedef struct slot {
    slot_state state;
    int64_t epoch, start;
    int n;
    int next, done;       /* images claimed, images finished */
    uint64_t gen;         /* bumped when the slot is (re)assigned: late results of an old job are dropped */
    int32_t *index;       /* (max_batch) */
    uint8_t *pix;         /* (max_batch, 3, H, W) */
    cnn_status err;
    char msg[512];
    /* device decoding: */
    uint8_t *dev;         /* (max_batch, 3, H, W) device planes */
    cnn_jpeg_image *im;   /* (max_batch) file bytes (owned: malloc'd) and crop, or host planes in pix */
    uint8_t *ok;          /* (max_batch) */
    bool busy;            /* the device thread works on it */
    int n_cpu;            /* --decode mixed: its first n_cpu images decoded by the threads */
} slot;

struct cnn_pipeline {
    cnn_pipeline_opts o;
    cnn_file_list *f;
    size_t per;           /* bytes per image */
    int nthreads;
    pthread_t threads[MAX_THREADS];
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    slot *slots;
    int depth, head, count, in_use;
    bool have_next;       /* the prediction of the batch after the last queued one */
    int64_t next_epoch, next_start;
    int next_n;
    bool stop;
    int in_flight;        /* images being decoded outside the lock */
    int32_t *order[2];    /* epoch orders, cached */
    int64_t order_epoch[2];
    int order_lru;
    int64_t skipped;
    void *dec;            /* device JPEG decoder, or NULL */
    pthread_t dev_thread;
    bool dev_started;
    bool mixed;           /* --decode mixed with a device decoder */
    double t_dec, t_read, t_dev; /* seconds (running averages; 0: none yet): a thread decoding an image, reading one
                                  * JPEG for the device; the device stage per image it decoded */
    int64_t queued, queued_cpu;  /* images queued, of them assigned to the threads */
};

/* ---- one image ---------------------------------------------------------------------------------------------- */

/* The crop of an image in its full-size coordinates: a pure function of (seed, epoch, pos) when training. */
static cnn_resample plan_resample(const cnn_file_list *f, const cnn_image_info *info, bool train, uint64_t seed,
                                  int64_t epoch, int64_t pos) {
    if (train)
        return cnn_resample_random(info->h, info->w, f->out_h, f->out_w, f->scale_lo, 0.5f, seed ^ 0x5252432b464c4950ULL,
                                   ((uint64_t)epoch << 32) ^ (uint64_t)pos);
    return cnn_resample_eval(info->h, info->w, f->resize, f->out_h, f->out_w);
}

cnn_status cnn_folder_image(const cnn_file_list *f, int32_t index, bool train, uint64_t seed, int64_t epoch,
                            int64_t pos, uint8_t *dst) {
    const char *path = f->paths[index];
    uint8_t *buf;
    size_t len;
    CNN_TRY(cnn_image_read(path, &buf, &len));
    cnn_image_info info;
    cnn_status st = cnn_image_probe(buf, len, path, CNN_IMAGE_MAX_PIXELS, &info);
    cnn_resample r;
    int scale = 1;
    if (st == CNN_OK) {
        r = plan_resample(f, &info, train, seed, epoch, pos);
        /* training: decode a JPEG at 1/2, 1/4 or 1/8 in the DCT domain where the crop still covers the output size */
        for (int s = 8; s > 1 && train && info.format == CNN_IMAGE_JPEG; s /= 2)
            if (r.rw / s >= f->out_w && r.rh / s >= f->out_h) {
                scale = s;
                break;
            }
    }
    cnn_image im = {0};
    if (st == CNN_OK) st = cnn_image_decode(buf, len, path, CNN_IMAGE_MAX_PIXELS, scale, &im);
    free(buf);
    if (st == CNN_OK && scale > 1) {
        /* the crop in the scaled image: the smallest region of it covering the full-size one */
        int y1 = (r.y0 + r.rh + scale - 1) / scale, x1 = (r.x0 + r.rw + scale - 1) / scale;
        r.y0 /= scale;
        r.x0 /= scale;
        r.rh = (y1 < im.h ? y1 : im.h) - r.y0;
        r.rw = (x1 < im.w ? x1 : im.w) - r.x0;
    }
    if (st == CNN_OK) st = cnn_image_resample(&im, &r, dst);
    cnn_image_free(&im);
    return st;
}

/* ---- the ring ------------------------------------------------------------------------------------------------ */

static const int32_t *epoch_order(cnn_pipeline *p, int64_t epoch) {
    for (int k = 0; k < 2; k++)
        if (p->order[k] && p->order_epoch[k] == epoch) return p->order[k];
    int k = p->order_lru;
    p->order_lru ^= 1;
    cnn_epoch_order(p->o.seed, epoch, p->o.shuffle, p->f->n, p->order[k]);
    p->order_epoch[k] = epoch;
    return p->order[k];
}

/* the batch after (epoch, start, n): the next full one of the epoch, then the next epoch (training); the rest
 * of the dataset in batches of n (evaluation) */
static bool predict(cnn_pipeline *p, int64_t epoch, int64_t start, int n) {
    int64_t N = p->f->n, s = start + n;
    if (p->o.train) {
        p->next_epoch = s + n > N ? epoch + 1 : epoch;
        p->next_start = s + n > N ? 0 : s;
        p->next_n = n;
        return true;
    }
    if (s >= N) return false;
    p->next_epoch = epoch;
    p->next_start = s;
    p->next_n = (int)(N - s < n ? N - s : n);
    return true;
}

/* free the file bytes a slot still holds (lock held; nobody works on the slot) */
static void drop_bytes(cnn_pipeline *p, slot *s) {
    for (int i = 0; s->im && i < p->o.max_batch; i++) {
        free((void *)s->im[i].data);
        s->im[i] = (cnn_jpeg_image){0};
    }
}

/* --decode mixed: how many of a batch of n the threads decode (lock held; the file comment has the balance); a
 * quarter until both sides have been timed */
static int cpu_share(const cnn_pipeline *p, int n) {
    if (!p->mixed) return 0;
    if (p->t_dec <= 0 || p->t_dev <= 0) return n / 4;
    const double T = p->nthreads > 0 ? p->nthreads : 1;
    const double f = (p->t_dev - p->t_read / T) / ((p->t_dec - p->t_read) / T + p->t_dev);
    return f <= 0 ? 0 : f >= 1 ? n : (int)(f * n + 0.5);
}

/* a running average: the first sample, then a step of `rate` toward each new one */
static void average(double *v, double x, double rate) { *v = *v > 0 ? *v + rate * (x - *v) : x; }

/* queue predicted batches into the free slots (lock held) */
static void fill(cnn_pipeline *p) {
    while (p->count < p->depth && p->have_next) {
        slot *s = &p->slots[(p->head + p->count) % p->depth];
        CNN_ASSERT(s->state == SLOT_FREE && !s->busy);
        drop_bytes(p, s);
        s->epoch = p->next_epoch;
        s->start = p->next_start;
        s->n = p->next_n;
        s->next = s->done = 0;
        s->gen++;
        s->err = CNN_OK;
        s->msg[0] = 0;
        const int32_t *ord = epoch_order(p, s->epoch);
        for (int i = 0; i < s->n; i++) s->index[i] = ord[s->start + i];
        s->n_cpu = cpu_share(p, s->n);
        p->queued += s->n, p->queued_cpu += s->n_cpu;
        s->state = SLOT_FILL;
        p->count++;
        p->have_next = predict(p, s->epoch, s->start, s->n);
    }
    pthread_cond_broadcast(&p->work);
}

/* decode the image at position pos of slot s, skipping undecodable files when asked; *index in/out */
static cnn_status decode_with_skips(cnn_pipeline *p, int64_t epoch, int64_t pos, int32_t *index, uint8_t *dst,
                                    bool *counted) {
    cnn_file_list *f = p->f;
    int32_t first = *index;
    cnn_status st = CNN_OK;
    for (int k = 0; k < f->n; k++) {
        int32_t j = (int32_t)((first + (int64_t)k) % f->n);
        if (__atomic_load_n(&f->bad[j], __ATOMIC_RELAXED)) continue;
        st = cnn_folder_image(f, j, p->o.train, p->o.seed, epoch, pos, dst);
        if (st == CNN_OK) {
            *index = j;
            return CNN_OK;
        }
        if (f->on_bad == CNN_BAD_IMAGE_FAIL) return st;
        if (__atomic_exchange_n(&f->bad[j], 1, __ATOMIC_RELAXED) == 0) {
            *counted = true;
            cnn_log(1, "cnn: skipping a bad image: %s", cnn_error_msg());
        }
    }
    return cnn_fail(CNN_E_FORMAT, "not one image of the dataset (%d files) could be decoded", f->n);
}

/* Device decoding: read the JPEG at dataset index `index` and plan its crop into *ji (the bytes are the caller's
 * to free); anything but a readable JPEG header is CNN_E_UNSUPPORTED, for the CPU path to decode or refuse. */
static cnn_status read_jpeg(cnn_pipeline *p, int64_t epoch, int64_t pos, int32_t index, cnn_jpeg_image *ji) {
    const cnn_file_list *f = p->f;
    if (__atomic_load_n(&f->bad[index], __ATOMIC_RELAXED)) return CNN_E_UNSUPPORTED;
    uint8_t *buf;
    size_t len;
    if (cnn_image_read(f->paths[index], &buf, &len) != CNN_OK) return CNN_E_UNSUPPORTED;
    /* a JPEG without its end marker near the end is likely truncated: the CPU decoder says so (the device one
     * may decode what is there without complaint) */
    bool eoi = false;
    for (size_t k = len > 16 ? len - 16 : 0; k + 1 < len && !eoi; k++) eoi = buf[k] == 0xFF && buf[k + 1] == 0xD9;
    cnn_image_info info;
    if (!eoi || cnn_image_sniff(buf, len) != CNN_IMAGE_JPEG ||
        cnn_image_probe(buf, len, f->paths[index], CNN_IMAGE_MAX_PIXELS, &info) != CNN_OK) {
        free(buf);
        return CNN_E_UNSUPPORTED;
    }
    cnn_resample r = plan_resample(f, &info, p->o.train, p->o.seed, epoch, pos);
    CNN_ASSERT(r.ch == f->out_h && r.cw == f->out_w);
    *ji = (cnn_jpeg_image){.data = buf, .len = len,
                           .job = {.h = info.h, .w = info.w, .y0 = r.y0, .x0 = r.x0, .rh = r.rh, .rw = r.rw,
                                   .out_h = r.out_h, .out_w = r.out_w, .wy = r.wy, .wx = r.wx, .flip = r.flip}};
    return CNN_OK;
}

static void *worker(void *arg) {
    cnn_pipeline *p = arg;
    pthread_mutex_lock(&p->mu);
    while (!p->stop) {
        slot *s = NULL;
        for (int k = 0; k < p->count && !s; k++) {
            slot *c = &p->slots[(p->head + k) % p->depth];
            if (c->state == SLOT_FILL && c->next < c->n) s = c;
        }
        if (!s) {
            pthread_cond_wait(&p->work, &p->mu);
            continue;
        }
        int i = s->next++;
        uint64_t gen = s->gen;
        int64_t epoch = s->epoch, pos = s->start + i;
        int32_t index = s->index[i];
        uint8_t *dst = s->pix + (size_t)i * p->per;
        const bool read_only = p->dec && i >= s->n_cpu;
        p->in_flight++;
        pthread_mutex_unlock(&p->mu);
        bool counted = false;
        /* with a device decoder a JPEG is only read here (but the first n_cpu of a mixed batch); anything else is
         * decoded here as on the CPU path */
        const double t0 = cnn_now();
        cnn_jpeg_image ji = {0};
        cnn_status st = read_only ? read_jpeg(p, epoch, pos, index, &ji) : CNN_E_UNSUPPORTED;
        const bool read = st == CNN_OK;
        if (!read) {
            ji = (cnn_jpeg_image){.planes = dst};
            st = decode_with_skips(p, epoch, pos, &index, dst, &counted);
        }
        const double dt = cnn_now() - t0;
        char msg[512] = "";
        if (st != CNN_OK) snprintf(msg, sizeof msg, "%s", cnn_error_msg());
        pthread_mutex_lock(&p->mu);
        p->in_flight--;
        p->skipped += counted;
        if (p->mixed && st == CNN_OK && !counted && (read || !read_only)) /* a read, or a decode it was given */
            average(read ? &p->t_read : &p->t_dec, dt, 0.05);
        if (s->gen == gen && s->state == SLOT_FILL) {
            s->index[i] = index;
            if (s->im) s->im[i] = ji;
            if (st != CNN_OK && s->err == CNN_OK) {
                s->err = st;
                memcpy(s->msg, msg, sizeof s->msg);
            }
            if (++s->done == s->n) {
                s->state = p->dec && s->err == CNN_OK ? SLOT_DECODE : SLOT_READY;
                if (s->state == SLOT_DECODE) pthread_cond_broadcast(&p->work);
            }
        } else {
            free((void *)ji.data);
        }
        pthread_cond_broadcast(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* The device stage of slot s (number si; the device thread, outside the lock, the slot busy): its JPEGs decoded by
 * the device into s->dev beside the CPU-decoded images, then the JPEGs the device refused decoded on the CPU and
 * uploaded. *counted: a bad image was skipped. */
static cnn_status device_batch(cnn_pipeline *p, slot *s, int si, bool *counted) {
    cnn_backend *be = p->o.be;
    cnn_resample_batch rb = {.n = s->n, .ch = p->f->out_h, .cw = p->f->out_w};
    CNN_TRY(be->jpeg_decode(be, p->dec, si, &rb, s->im, s->dev, s->ok));
    int again = 0;
    for (int i = 0; i < s->n; i++) {
        cnn_jpeg_image *ji = &s->im[i];
        bool refused = !s->ok[i];
        free((void *)ji->data);
        *ji = (cnn_jpeg_image){0};
        if (!refused) continue;
        uint8_t *dst = s->pix + (size_t)i * p->per;
        int32_t index = s->index[i];
        CNN_TRY(decode_with_skips(p, s->epoch, s->start + i, &index, dst, counted));
        s->index[i] = index;
        ji->planes = dst;
        again++;
    }
    if (again) CNN_TRY(be->jpeg_decode(be, p->dec, si, &rb, s->im, s->dev, s->ok));
    return CNN_OK;
}

static void *device_worker(void *arg) {
    cnn_pipeline *p = arg;
    pthread_mutex_lock(&p->mu);
    while (!p->stop) {
        slot *s = NULL;
        int si = -1;
        for (int k = 0; k < p->count && !s; k++) {
            int j = (p->head + k) % p->depth;
            if (p->slots[j].state == SLOT_DECODE && !p->slots[j].busy) s = &p->slots[j], si = j;
        }
        if (!s) {
            pthread_cond_wait(&p->work, &p->mu);
            continue;
        }
        s->busy = true;
        uint64_t gen = s->gen;
        const int on_device = s->n - s->n_cpu;
        p->in_flight++;
        pthread_mutex_unlock(&p->mu);
        bool counted = false;
        const double t0 = cnn_now();
        cnn_status st = device_batch(p, s, si, &counted);
        const double dt = cnn_now() - t0;
        char msg[512] = "";
        if (st != CNN_OK) snprintf(msg, sizeof msg, "%s", cnn_error_msg());
        pthread_mutex_lock(&p->mu);
        p->in_flight--;
        p->skipped += counted;
        if (p->mixed && st == CNN_OK && on_device > 0) average(&p->t_dev, dt / on_device, 0.3);
        s->busy = false;
        drop_bytes(p, s);
        if (s->gen == gen && s->state == SLOT_DECODE) {
            if (st != CNN_OK && s->err == CNN_OK) {
                s->err = st;
                memcpy(s->msg, msg, sizeof s->msg);
            }
            s->state = SLOT_READY;
        }
        pthread_cond_broadcast(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void free_slots(cnn_pipeline *p) {
    for (int i = 0; p->slots && i < p->depth; i++) {
        if (p->slots[i].pix) {
            if (p->o.be && p->o.be->host_free) p->o.be->host_free(p->o.be, p->slots[i].pix);
            else free(p->slots[i].pix);
        }
        free(p->slots[i].index);
        drop_bytes(p, &p->slots[i]);
        free(p->slots[i].im);
        free(p->slots[i].ok);
        if (p->slots[i].dev) p->o.be->free(p->o.be, p->slots[i].dev);
    }
    free(p->slots);
}

void cnn_pipeline_free(cnn_pipeline *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nthreads; i++) pthread_join(p->threads[i], NULL);
    if (p->dev_started) pthread_join(p->dev_thread, NULL);
    if (p->mixed)
        cnn_log(2, "cnn: --decode mixed: the threads took %lld of %lld images queued (%d threads; last averages: decode "
                   "%.3f ms, read %.3f ms a thread, device %.3f ms an image)",
                (long long)p->queued_cpu, (long long)p->queued, p->nthreads, 1e3 * p->t_dec, 1e3 * p->t_read,
                1e3 * p->t_dev);
    if (p->dec) p->o.be->jpeg_free(p->o.be, p->dec);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->done);
    free_slots(p);
    free(p->order[0]);
    free(p->order[1]);
    free(p);
}

cnn_status cnn_pipeline_create(const cnn_pipeline_opts *o, cnn_pipeline **out) {
    *out = NULL;
    CNN_ASSERT(o->ds && o->ds->files && o->max_batch > 0 && o->depth >= 2);
    cnn_pipeline *p = calloc(1, sizeof *p);
    if (!p) return cnn_fail(CNN_E_OOM, "out of memory for the input pipeline");
    p->o = *o;
    p->f = o->ds->files;
    p->per = (size_t)3 * p->f->out_h * p->f->out_w;
    p->depth = o->depth;
    p->in_use = -1;
    p->order_epoch[0] = p->order_epoch[1] = -1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    cnn_status st = CNN_OK;
    p->slots = calloc((size_t)p->depth, sizeof *p->slots);
    p->order[0] = malloc(sizeof(int32_t) * (size_t)p->f->n);
    p->order[1] = malloc(sizeof(int32_t) * (size_t)p->f->n);
    if (!p->slots || !p->order[0] || !p->order[1]) st = cnn_fail(CNN_E_OOM, "out of memory for the input pipeline");
    for (int i = 0; st == CNN_OK && i < p->depth; i++) {
        slot *s = &p->slots[i];
        size_t bytes = p->per * (size_t)o->max_batch;
        s->index = malloc(sizeof(int32_t) * (size_t)o->max_batch);
        if (o->be && o->be->host_alloc) st = o->be->host_alloc(o->be, bytes, "staging buffer", (void **)&s->pix);
        else if (!(s->pix = malloc(bytes))) st = cnn_fail(CNN_E_OOM, "out of memory for a %zu-byte staging buffer", bytes);
        if (st == CNN_OK && !s->index) st = cnn_fail(CNN_E_OOM, "out of memory for the input pipeline");
    }
    /* the device decoder: --decode gpu and mixed must have it; auto takes it, mixed, where the backend offers one
     * and the host has fewer than AUTO_CPU_DECODERS decode threads (with 16, CPU decoding fed ResNet-50 bf16 b256 on
     * an H100 at 0.88-0.96 of its speed on data already on the GPU, mixed at 0.91-0.92; with 4 and 8 threads mixed
     * matched or beat gpu: perf-log step 83) */
    cnn_backend *be = o->be;
    cnn_decode mode = p->f->decode;
    int want = p->f->threads > 0 ? p->f->threads : (int)sysconf(_SC_NPROCESSORS_ONLN); /* decode threads */
    const bool autom = mode == CNN_DECODE_AUTO || mode == CNN_DECODE_AUTO_FIXED;
    if (autom && want >= AUTO_CPU_DECODERS) mode = CNN_DECODE_CPU;
    if (st == CNN_OK && mode != CNN_DECODE_CPU && be && be->jpeg_create) {
        cnn_status sd = be->jpeg_create(be, o->max_batch, p->depth, &p->dec);
        if (sd != CNN_OK && (mode == CNN_DECODE_GPU || mode == CNN_DECODE_MIXED)) {
            st = cnn_error_prefix(sd, mode == CNN_DECODE_GPU ? "--decode gpu" : "--decode mixed");
        } else if (sd != CNN_OK) {
            cnn_log(1, "cnn: JPEGs are decoded on the CPU: %s", cnn_error_msg());
            cnn_error_clear();
            p->dec = NULL;
        }
    } else if (st == CNN_OK && (mode == CNN_DECODE_GPU || mode == CNN_DECODE_MIXED)) {
        st = cnn_fail(CNN_E_UNSUPPORTED, "--decode %s: the %s backend has no device JPEG decoder",
                      mode == CNN_DECODE_GPU ? "gpu" : "mixed", be ? be->name : "host");
    }
    p->mixed = p->dec && (mode == CNN_DECODE_MIXED || mode == CNN_DECODE_AUTO);
    for (int i = 0; st == CNN_OK && p->dec && i < p->depth; i++) {
        slot *s = &p->slots[i];
        s->im = calloc((size_t)o->max_batch, sizeof *s->im);
        s->ok = calloc((size_t)o->max_batch, 1);
        if (!s->im || !s->ok) st = cnn_fail(CNN_E_OOM, "out of memory for the input pipeline");
        if (st == CNN_OK) st = be->alloc(be, p->per * (size_t)o->max_batch, "device staging buffer", (void **)&s->dev);
    }
    if (st == CNN_OK && p->dec) {
        if (pthread_create(&p->dev_thread, NULL, device_worker, p) != 0)
            st = cnn_fail(CNN_E_OOM, "cannot start the device decode thread");
        else
            p->dev_started = true;
    }
    want = want < 1 ? 1 : want > MAX_THREADS ? MAX_THREADS : want;
    for (int i = 0; st == CNN_OK && i < want; i++) {
        if (pthread_create(&p->threads[i], NULL, worker, p) != 0) {
            st = cnn_fail(CNN_E_OOM, "cannot start decode thread %d", i);
            break;
        }
        p->nthreads++;
    }
    if (st != CNN_OK) {
        cnn_pipeline_free(p);
        return st;
    }
    *out = p;
    return CNN_OK;
}

cnn_status cnn_pipeline_get(cnn_pipeline *p, int64_t epoch, int64_t start, int n, const uint8_t **pix,
                            const int32_t **index, double *wait_s) {
    CNN_ASSERT(n >= 1 && n <= p->o.max_batch && start >= 0 && start + n <= p->f->n);
    pthread_mutex_lock(&p->mu);
    cnn_status fence = CNN_OK;
    if (p->in_use >= 0) {
        /* the work issued so far may still read that slot's device planes: the next decode into it waits for it */
        if (p->dec) fence = p->o.be->jpeg_fence(p->o.be, p->dec, p->in_use);
        p->slots[p->in_use].state = SLOT_FREE;
    }
    p->in_use = -1;
    if (fence != CNN_OK) {
        pthread_mutex_unlock(&p->mu);
        return fence;
    }
    slot *h = p->count ? &p->slots[p->head] : NULL;
    if (h && (h->epoch != epoch || h->start != start || h->n != n)) {
        /* not the predicted batch: drop the queue, and wait until no thread writes into its buffers */
        for (int k = 0; k < p->count; k++) {
            slot *s = &p->slots[(p->head + k) % p->depth];
            s->state = SLOT_FREE;
            s->gen++;
        }
        p->count = 0;
        while (p->in_flight > 0) pthread_cond_wait(&p->done, &p->mu);
    }
    if (p->count == 0) {
        p->have_next = true;
        p->next_epoch = epoch;
        p->next_start = start;
        p->next_n = n;
    }
    fill(p);
    h = &p->slots[p->head];
    double t0 = cnn_now();
    while (h->state != SLOT_READY) pthread_cond_wait(&p->done, &p->mu);
    if (wait_s) *wait_s += cnn_now() - t0;
    p->in_use = p->head;
    p->head = (p->head + 1) % p->depth;
    p->count--;
    cnn_status st = h->err;
    char msg[512];
    memcpy(msg, h->msg, sizeof msg);
    *pix = p->dec ? h->dev : h->pix;
    *index = h->index;
    pthread_mutex_unlock(&p->mu);
    if (st != CNN_OK) return cnn_fail(st, "%s", msg);
    return CNN_OK;
}

bool cnn_pipeline_on_device(const cnn_pipeline *p) { return p->dec != NULL; }

int64_t cnn_pipeline_skipped(cnn_pipeline *p) {
    pthread_mutex_lock(&p->mu);
    int64_t n = p->skipped;
    pthread_mutex_unlock(&p->mu);
    return n;
}
