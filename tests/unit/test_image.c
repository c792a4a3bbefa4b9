/* test_image.c — the picture path below the CLI: torchvision's transform arithmetic (Resize's output size,
 * CenterCrop's rounding and padding, RandomResizedCrop's sampling bounds), the resampler on exact cases, header
 * checks, IDX and gzip parsing, and the input pipeline's determinism (1 vs 3 decode threads, prefetch restarts),
 * also with a device JPEG decoder (a CPU stand-in that refuses some images: the fallback path).
 * PIL parity of the pixels themselves is tests/golden/test_image_parity.py; the bad-file battery is
 * tests/cli/test_data.sh. */
#include "test.h"

#include "cnn/backend.h"
#include "cnn/data.h"
#include "cnn/image.h"
#include "core/pipeline.h"

#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef CNN_HAVE_JPEG
#include <turbojpeg.h>
#endif
#ifdef CNN_HAVE_ZLIB
#include <zlib.h>
#endif

static void test_eval_plan(void) {
    /* 500x375 (W x H) -> Resize(256): 341x256; CenterCrop(224): left round(58.5) = 58 (half to even), top 16 */
    cnn_resample r = cnn_resample_eval(375, 500, 256, 224, 224);
    check(r.out_w == 341 && r.out_h == 256 && r.wx == 58 && r.wy == 16 && r.rh == 375 && r.rw == 500,
          "plan.eval_500x375", "out %dx%d window at (%d, %d)", r.out_w, r.out_h, r.wx, r.wy);
    /* portrait 375x500: 256x341, top 58 */
    r = cnn_resample_eval(500, 375, 256, 224, 224);
    check(r.out_w == 256 && r.out_h == 341 && r.wx == 16 && r.wy == 58, "plan.eval_portrait", "out %dx%d at (%d, %d)",
          r.out_w, r.out_h, r.wx, r.wy);
    /* round(59.5) = 60: half to even the other way */
    r = cnn_resample_eval(256, 343, 256, 224, 224);
    check(r.out_w == 343 && r.wx == 60, "plan.eval_half_even_up", "out %d at %d", r.out_w, r.wx);
    /* a crop larger than the resized image is zero-padded: left (crop - size) // 2 */
    r = cnn_resample_eval(10, 12, 0, 15, 20);
    check(r.out_h == 10 && r.out_w == 12 && r.wy == -2 && r.wx == -4, "plan.eval_pad", "window at (%d, %d)", r.wy, r.wx);
}

static void test_random_plan(void) {
    int bad = 0, flips = 0, small = 0;
    const int n = 4000;
    for (int i = 0; i < n; i++) {
        int h = 20 + i % 300, w = 30 + (i * 7) % 500;
        cnn_resample r = cnn_resample_random(h, w, 224, 224, 0.08f, 0.5f, 99, (uint64_t)i);
        double frac = (double)r.rh * r.rw / ((double)h * w), ar = (double)r.rw / r.rh;
        if (r.y0 < 0 || r.x0 < 0 || r.y0 + r.rh > h || r.x0 + r.rw > w || r.rh < 1 || r.rw < 1) bad++;
        /* sampled crops keep area in [0.08, 1] and ratio in [3/4, 4/3] up to rounding; the fallback may not */
        if (frac < 0.06 || ar < 0.7 || ar > 1.45) small++;
        flips += r.flip;
        if (r.out_h != 224 || r.ch != 224 || r.wy != 0) bad++;
    }
    check(bad == 0, "plan.random_inside", "%d of %d crops outside the image", bad, n);
    check(small < n / 50, "plan.random_bounds", "%d of %d outside scale/ratio (fallback crops)", small, n);
    check(flips > n * 0.45 && flips < n * 0.55, "plan.random_flip_half", "%d of %d flipped", flips, n);
    cnn_resample a = cnn_resample_random(300, 400, 224, 224, 0.08f, 0.5f, 5, 17),
                 b = cnn_resample_random(300, 400, 224, 224, 0.08f, 0.5f, 5, 17);
    /* field by field: the struct's padding after `flip` is not part of its value */
    check(a.y0 == b.y0 && a.x0 == b.x0 && a.rh == b.rh && a.rw == b.rw && a.out_h == b.out_h && a.out_w == b.out_w &&
              a.wy == b.wy && a.wx == b.wx && a.ch == b.ch && a.cw == b.cw && a.flip == b.flip,
          "plan.random_pure", NULL);
}

static void test_resample(void) {
    cnn_image im = {.h = 3, .w = 4, .pix = malloc(36)};
    for (int i = 0; i < 36; i++) im.pix[i] = (uint8_t)(i * 7);
    /* same size, whole window, flipped: a copy mirrored left-right, as planes */
    cnn_resample r = {.rh = 3, .rw = 4, .out_h = 3, .out_w = 4, .ch = 3, .cw = 4, .flip = true};
    uint8_t out[36], want[36];
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < 3; y++)
            for (int x = 0; x < 4; x++) want[(c * 3 + y) * 4 + x] = im.pix[(y * 4 + (3 - x)) * 3 + c];
    check(cnn_image_resample(&im, &r, out) == CNN_OK && memcmp(out, want, 36) == 0, "resample.identity_flip", NULL);
    /* a constant image stays constant at any scale (weights sum to 1 in fixed point) */
    cnn_image k = {.h = 37, .w = 53, .pix = malloc(37 * 53 * 3)};
    memset(k.pix, 200, 37 * 53 * 3);
    static uint8_t big[3 * 97 * 61];
    cnn_resample up = {.rh = 37, .rw = 53, .out_h = 97, .out_w = 61, .ch = 97, .cw = 61};
    cnn_resample dn = {.y0 = 3, .x0 = 5, .rh = 30, .rw = 41, .out_h = 7, .out_w = 9, .ch = 7, .cw = 9};
    int off = 0;
    bool ok = cnn_image_resample(&k, &up, big) == CNN_OK;
    for (int i = 0; i < 3 * 97 * 61; i++) off += big[i] != 200;
    ok = ok && cnn_image_resample(&k, &dn, big) == CNN_OK;
    for (int i = 0; i < 3 * 7 * 9; i++) off += big[i] != 200;
    check(ok && off == 0, "resample.constant", "%d values off", off);
    /* a 2:1 horizontal shrink of a 2-wide image is the rounded mean of its pixels */
    cnn_image two = {.h = 1, .w = 2, .pix = (uint8_t[]){10, 20, 30, 11, 21, 34}};
    cnn_resample half = {.rh = 1, .rw = 2, .out_h = 1, .out_w = 1, .ch = 1, .cw = 1};
    uint8_t m[3] = {0};
    cnn_status st = cnn_image_resample(&two, &half, m);
    check(st == CNN_OK && m[0] == 11 && m[1] == 21 && m[2] == 32, "resample.mean", "%d %d %d", m[0], m[1], m[2]);
    cnn_resample outside = {.y0 = 1, .rh = 3, .rw = 4, .out_h = 3, .out_w = 4, .ch = 3, .cw = 4};
    check(cnn_image_resample(&im, &outside, out) == CNN_E_INVALID, "resample.region_outside", "%s", cnn_error_msg());
    free(im.pix);
    free(k.pix);
}

static void test_headers(void) {
    cnn_image_info info;
    cnn_image im;
    check(cnn_image_probe((const uint8_t *)"", 0, "e.jpg", CNN_IMAGE_MAX_PIXELS, &info) == CNN_E_FORMAT &&
              strstr(cnn_error_msg(), "empty file"), "header.empty", "%s", cnn_error_msg());
    check(cnn_image_decode((const uint8_t *)"GIF89a....", 10, "a.gif", CNN_IMAGE_MAX_PIXELS, 1, &im) == CNN_E_UNSUPPORTED &&
              !im.pix && strstr(cnn_error_msg(), "GIF"), "header.gif", "%s", cnn_error_msg());
    check(cnn_image_decode((const uint8_t *)"\xff\xd8\xff", 3, "t.jpg", CNN_IMAGE_MAX_PIXELS, 3, &im) == CNN_E_INVALID,
          "header.bad_scale", "%s", cnn_error_msg());
    /* a PNG header of 65535 x 65535 is refused by the pixel cap, before any pixel memory */
    static const uint8_t png_huge[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R',
                                       0, 0, 0xff, 0xff, 0, 0, 0xff, 0xff, 8, 2, 0, 0, 0, 0x39, 0x67, 0x4e, 0x07};
    cnn_status st = cnn_image_probe(png_huge, sizeof png_huge, "huge.png", CNN_IMAGE_MAX_PIXELS, &info);
#ifdef CNN_HAVE_PNG
    check(st == CNN_E_FORMAT && strstr(cnn_error_msg(), "over the limit"), "header.png_huge", "%s", cnn_error_msg());
#else
    check(st == CNN_E_UNSUPPORTED, "header.png_not_built", "%s", cnn_error_msg());
#endif
}

static void test_idx(void) {
    uint8_t b[4 + 12 + 24];
    memset(b, 0, sizeof b);
    b[2] = 8, b[3] = 3, b[7] = 2, b[11] = 3, b[15] = 4;
    int64_t d[3];
    const uint8_t *p;
    check(cnn_idx_parse(b, sizeof b, "ok", 3, d, &p) == CNN_OK && d[0] == 2 && d[1] == 3 && d[2] == 4 && p == b + 16,
          "idx.ok", NULL);
    check(cnn_idx_parse(b, sizeof b - 1, "short", 3, d, &p) == CNN_E_FORMAT && strstr(cnn_error_msg(), "truncated"),
          "idx.truncated", "%s", cnn_error_msg());
    uint8_t extra[sizeof b + 1];
    memcpy(extra, b, sizeof b);
    check(cnn_idx_parse(extra, sizeof extra, "long", 3, d, &p) == CNN_E_FORMAT, "idx.trailing", "%s", cnn_error_msg());
    b[2] = 0x0d;
    check(cnn_idx_parse(b, sizeof b, "float", 3, d, &p) == CNN_E_FORMAT && strstr(cnn_error_msg(), "magic"),
          "idx.magic", "%s", cnn_error_msg());
    b[2] = 8;
    for (int i = 4; i < 16; i++) b[i] = i % 4 == 0 ? 0x7f : 0xff;
    check(cnn_idx_parse(b, sizeof b, "big", 3, d, &p) == CNN_E_FORMAT && strstr(cnn_error_msg(), "overflow"),
          "idx.overflow", "%s", cnn_error_msg());
#ifdef CNN_HAVE_ZLIB
    uint8_t gz[256], *out = NULL;
    z_stream z;
    memset(&z, 0, sizeof z);
    deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
    z.next_in = extra;
    z.avail_in = sizeof extra;
    z.next_out = gz;
    z.avail_out = sizeof gz;
    deflate(&z, Z_FINISH);
    size_t gl = sizeof gz - z.avail_out, n = 0;
    deflateEnd(&z);
    check(cnn_gunzip(gz, gl, "x.gz", 1 << 20, &out, &n) == CNN_OK && n == sizeof extra && memcmp(out, extra, n) == 0,
          "gzip.ok", NULL);
    free(out);
    check(cnn_gunzip(gz, gl - 9, "x.gz", 1 << 20, &out, &n) == CNN_E_FORMAT && !out, "gzip.truncated", "%s",
          cnn_error_msg());
    check(cnn_gunzip(gz, gl, "x.gz", 8, &out, &n) == CNN_E_FORMAT && !out, "gzip.cap", "%s", cnn_error_msg());
#else
    skip("gzip", "built without zlib");
#endif
}

#ifdef CNN_HAVE_JPEG
/* a folder dataset of JPEGs of assorted sizes; the pipeline must give the same bytes with 1 and 3 threads */
static void write_jpeg(const char *path, int w, int h, int seed) {
    uint8_t *px = malloc((size_t)w * h * 3), *buf = NULL;
    for (int i = 0; i < w * h * 3; i++) px[i] = (uint8_t)(i * 13 + seed * 31 + i / (w * 3) * 5);
    unsigned long n = 0;
    tjhandle tj = tjInitCompress();
    CNN_ASSERT(tj && tjCompress2(tj, px, w, 0, h, TJPF_RGB, &buf, &n, TJSAMP_420, 90, 0) == 0);
    FILE *f = fopen(path, "wb");
    CNN_ASSERT(f && fwrite(buf, 1, n, f) == n);
    fclose(f);
    tjFree(buf);
    tjDestroy(tj);
    free(px);
}

static uint64_t run_pipeline(const cnn_dataset *ds, int threads, bool train, bool restart) {
    ds->files->threads = threads;
    cnn_pipeline *p;
    cnn_pipeline_opts po = {.ds = ds, .max_batch = 4, .depth = 3, .train = train, .shuffle = train, .seed = 7};
    CNN_ASSERT(cnn_pipeline_create(&po, &p) == CNN_OK);
    uint64_t hsh = 1469598103934665603ULL;
    int spe = ds->n / 4;
    for (int kk = 0; kk < 3 * spe; kk++) {
        if (restart && kk == spe + 1) continue; /* a jump: the ring is dropped and refilled */
        const uint8_t *pix;
        const int32_t *idx;
        int n = train ? 4 : (ds->n - (kk % spe) * 4 < 4 ? ds->n - (kk % spe) * 4 : 4);
        CNN_ASSERT(cnn_pipeline_get(p, train ? kk / spe : 0, (kk % spe) * 4, n, &pix, &idx, NULL) == CNN_OK);
        for (size_t i = 0; i < (size_t)n * 3 * ds->h * ds->w; i++) hsh = (hsh ^ pix[i]) * 1099511628211ULL;
        for (int i = 0; i < n; i++) hsh = (hsh ^ (uint64_t)idx[i]) * 1099511628211ULL;
    }
    cnn_pipeline_free(p);
    return hsh;
}

/* A stand-in for a device JPEG decoder on the CPU backend ("device" memory is host memory there): it decodes at full
 * size with libjpeg-turbo and resamples with resample_images, refuses every image whose file length is odd (the
 * pipeline must then decode it on the CPU and pass it back as planes), and checks that it is called by one
 * thread at a time. */
typedef struct fake_dec {
    int busy, calls, refused, fences, slots, decoded, planes; /* planes: images handed over decoded by the CPU */
} fake_dec;

static cnn_status fake_create(cnn_backend *be, int max_batch, int slots, void **dec) {
    fake_dec *d = calloc(1, sizeof *d);
    d->slots = slots;
    *dec = d;
    return CNN_OK;
}

static cnn_status fake_decode(cnn_backend *be, void *decv, int slot, const cnn_resample_batch *b,
                              const cnn_jpeg_image *im, uint8_t *dst, uint8_t *ok) {
    fake_dec *d = decv;
    CNN_ASSERT(__atomic_exchange_n(&d->busy, 1, __ATOMIC_SEQ_CST) == 0 && slot >= 0 && slot < d->slots);
    d->calls++;
    size_t per = (size_t)3 * b->ch * b->cw;
    for (int i = 0; i < b->n; i++) {
        ok[i] = 0;
        if (!im[i].data) {
            if (im[i].planes) memcpy(dst + i * per, im[i].planes, per), ok[i] = 1, d->planes++;
            continue;
        }
        if (im[i].len % 2) {
            d->refused++;
            continue;
        }
        cnn_image x;
        CNN_ASSERT(cnn_image_decode(im[i].data, im[i].len, "fake", CNN_IMAGE_MAX_PIXELS, 1, &x) == CNN_OK);
        cnn_resample_job j = im[i].job;
        CNN_ASSERT(j.h == x.h && j.w == x.w);
        j.src = 0;
        j.pitch = 3 * x.w;
        cnn_resample_batch one = {.n = 1, .ch = b->ch, .cw = b->cw};
        CNN_ASSERT(be->resample_images(be, &one, &j, x.pix, dst + i * per) == CNN_OK);
        cnn_image_free(&x);
        ok[i] = 1;
        d->decoded++;
    }
    __atomic_store_n(&d->busy, 0, __ATOMIC_SEQ_CST);
    return CNN_OK;
}

static cnn_status fake_fence(cnn_backend *be, void *decv, int slot) {
    ((fake_dec *)decv)->fences++;
    return CNN_OK;
}

static fake_dec fake_last;
static void fake_free(cnn_backend *be, void *decv) {
    fake_last = *(fake_dec *)decv;
    free(decv);
}

/* the batches of an epoch (eval: in order; train: epoch 1's), hashed; into all (n, 3, H, W) when given */
static uint64_t device_epoch(const cnn_dataset *ds, cnn_backend *be, int threads, bool train, uint8_t *all,
                             int32_t *all_idx) {
    ds->files->threads = threads;
    cnn_pipeline *p;
    cnn_pipeline_opts po = {.ds = ds, .be = be, .max_batch = 4, .depth = 3, .train = train, .shuffle = train, .seed = 7};
    CNN_ASSERT(cnn_pipeline_create(&po, &p) == CNN_OK);
    size_t per = (size_t)3 * ds->h * ds->w;
    uint64_t hsh = 1469598103934665603ULL;
    for (int start = 0; start < ds->n; start += 4) {
        int n = ds->n - start < 4 ? ds->n - start : 4;
        const uint8_t *pix;
        const int32_t *idx;
        CNN_ASSERT(cnn_pipeline_get(p, train, start, n, &pix, &idx, NULL) == CNN_OK);
        for (size_t i = 0; i < (size_t)n * per; i++) hsh = (hsh ^ pix[i]) * 1099511628211ULL;
        if (all) memcpy(all + (size_t)start * per, pix, (size_t)n * per);
        if (all_idx) memcpy(all_idx + start, idx, sizeof *idx * (size_t)n);
    }
    check(cnn_pipeline_on_device(p), "pipeline.device.on_device", "batches in device memory: %s",
          cnn_pipeline_on_device(p) ? "yes" : "no");
    cnn_pipeline_free(p);
    return hsh;
}

static void test_device_pipeline(const cnn_dataset *ds) {
    cnn_backend *be;
    CNN_ASSERT(cnn_cpu_backend_create(1, &be) == CNN_OK);
    be->jpeg_create = fake_create;
    be->jpeg_decode = fake_decode;
    be->jpeg_fence = fake_fence;
    be->jpeg_free = fake_free;
    size_t per = (size_t)3 * ds->h * ds->w;
    uint8_t *dev = malloc(per * (size_t)ds->n), *cpu = malloc(per * (size_t)ds->n);
    int32_t *dev_idx = malloc(sizeof(int32_t) * (size_t)ds->n);
    ds->files->decode = CNN_DECODE_GPU;
    uint64_t a = device_epoch(ds, be, 1, false, dev, dev_idx), b = device_epoch(ds, be, 3, false, NULL, NULL);
    check(a == b, "pipeline.device.threads_eval", "hash %016llx vs %016llx", (unsigned long long)a,
          (unsigned long long)b);
    check(fake_last.refused > 0 && fake_last.calls > fake_last.refused / 4 && fake_last.fences > 0 &&
              fake_last.planes == fake_last.refused,
          "pipeline.device.fallback", "%d decode calls, %d images refused (decoded on the CPU), %d fences, %d planes",
          fake_last.calls, fake_last.refused, fake_last.fences, fake_last.planes);
    a = device_epoch(ds, be, 1, true, NULL, NULL), b = device_epoch(ds, be, 3, true, NULL, NULL);
    check(a == b, "pipeline.device.threads_train", "hash %016llx vs %016llx", (unsigned long long)a,
          (unsigned long long)b);
    /* against the CPU path's evaluation transform (PIL's fixed-point resampler): the float resampler of the device
     * path differs by rounding only */
    int maxd = 0, same_idx = 1;
    for (int i = 0; i < ds->n; i++) {
        CNN_ASSERT(cnn_folder_image(ds->files, i, false, 7, 0, i, cpu + (size_t)i * per) == CNN_OK);
        same_idx &= dev_idx[i] == i;
    }
    double sum = 0;
    for (size_t k = 0; k < per * (size_t)ds->n; k++) {
        int d = abs((int)dev[k] - (int)cpu[k]);
        maxd = d > maxd ? d : maxd;
        sum += d;
    }
    check(maxd <= 2 && same_idx, "pipeline.device.eval_vs_cpu", "max |device - cpu| %d levels, mean %.4f, indices %s",
          maxd, sum / ((double)per * ds->n), same_idx ? "equal" : "DIFFER");
    /* --decode mixed: the threads decode a share of each batch themselves (a quarter before both sides are timed),
     * the device the rest: every image is the CPU path's exactly or the device's (within its rounding), and both
     * decoded some */
    ds->files->decode = CNN_DECODE_MIXED;
    device_epoch(ds, be, 2, false, dev, dev_idx);
    int exact = 0;
    maxd = 0, same_idx = 1;
    for (int i = 0; i < ds->n; i++) {
        int di = 0;
        for (size_t k = 0; k < per; k++) {
            int d = abs((int)dev[(size_t)i * per + k] - (int)cpu[(size_t)i * per + k]);
            di = d > di ? d : di;
        }
        exact += di == 0;
        maxd = di > maxd ? di : maxd;
        same_idx &= dev_idx[i] == i;
    }
    const int by_threads = fake_last.planes - fake_last.refused; /* JPEGs the device was not offered */
    check(maxd <= 2 && same_idx && fake_last.decoded > 0 && by_threads > 0 &&
              fake_last.decoded + fake_last.planes == ds->n && exact >= by_threads,
          "pipeline.device.mixed", "%d of %d images decoded by the device, %d by the threads unoffered, %d refused; %d "
          "exactly the CPU path's, max |d| %d, indices %s", fake_last.decoded, ds->n, by_threads, fake_last.refused,
          exact, maxd, same_idx ? "equal" : "DIFFER");
    /* auto below 16 decode threads: mixed; under --deterministic (auto_fixed) every JPEG the device takes is its */
    ds->files->decode = CNN_DECODE_AUTO;
    device_epoch(ds, be, 2, false, NULL, NULL);
    check(fake_last.planes > fake_last.refused, "pipeline.device.auto_mixed", "%d planes from the threads, %d refused",
          fake_last.planes, fake_last.refused);
    ds->files->decode = CNN_DECODE_AUTO_FIXED;
    device_epoch(ds, be, 2, false, NULL, NULL);
    check(fake_last.planes == fake_last.refused && fake_last.decoded > 0, "pipeline.device.auto_fixed",
          "%d planes from the threads, %d refused, %d decoded by the device", fake_last.planes, fake_last.refused,
          fake_last.decoded);
    /* --decode mixed and gpu without a decoder are clear errors; auto falls back to the CPU */
    cnn_backend *plain;
    CNN_ASSERT(cnn_cpu_backend_create(1, &plain) == CNN_OK);
    cnn_pipeline *p = NULL;
    cnn_pipeline_opts po = {.ds = ds, .be = plain, .max_batch = 4, .depth = 3};
    ds->files->decode = CNN_DECODE_MIXED;
    cnn_status st = cnn_pipeline_create(&po, &p);
    check(st == CNN_E_UNSUPPORTED && strstr(cnn_error_msg(), "--decode mixed") && !p, "pipeline.device.mixed_required",
          "%s: %s", cnn_status_str(st), cnn_error_msg());
    cnn_error_clear();
    ds->files->decode = CNN_DECODE_GPU;
    st = cnn_pipeline_create(&po, &p);
    check(st == CNN_E_UNSUPPORTED && strstr(cnn_error_msg(), "--decode gpu") && !p, "pipeline.device.gpu_required",
          "%s: %s", cnn_status_str(st), cnn_error_msg());
    cnn_error_clear();
    ds->files->decode = CNN_DECODE_AUTO;
    st = cnn_pipeline_create(&po, &p);
    check(st == CNN_OK && !cnn_pipeline_on_device(p), "pipeline.device.auto_without", "%s", cnn_status_str(st));
    cnn_pipeline_free(p);
    cnn_backend_destroy(plain);
    cnn_backend_destroy(be);
    free(dev), free(cpu), free(dev_idx);
}

static void test_pipeline(void) {
    char root[] = "/tmp/cnn-test-image.XXXXXX";
    CNN_ASSERT(mkdtemp(root));
    char path[256];
    for (int c = 0; c < 2; c++) {
        snprintf(path, sizeof path, "%s/class%d", root, c);
        mkdir(path, 0755);
        for (int i = 0; i < 6; i++) {
            snprintf(path, sizeof path, "%s/class%d/img%d.JPG", root, c, i);
            write_jpeg(path, 40 + 17 * i, 90 - 9 * i + c, c * 10 + i);
        }
    }
    char src[300];
    snprintf(src, sizeof src, "folder:%s", root);
    cnn_data_opts o = {.source = src, .split = CNN_SPLIT_TRAIN, .image_h = 24, .image_w = 20};
    cnn_dataset ds;
    CNN_ASSERT(cnn_dataset_load(&o, &ds) == CNN_OK);
    check(ds.n == 12 && ds.classes == 2 && ds.labels[0] == 0 && ds.labels[11] == 1 && strstr(ds.files->paths[6], "class1/img0"),
          "folder.listing", "%d images, %d classes, [6] = %s", ds.n, ds.classes, ds.files->paths[6]);
    for (int train = 0; train < 2; train++) {
        uint64_t a = run_pipeline(&ds, 1, train, false), b = run_pipeline(&ds, 3, train, false);
        check(a == b, train ? "pipeline.threads_train" : "pipeline.threads_eval", "hash %016llx vs %016llx",
              (unsigned long long)a, (unsigned long long)b);
    }
    /* a request that is not the predicted batch restarts the ring; the batches stay the same */
    uint64_t a = run_pipeline(&ds, 2, true, true), b = run_pipeline(&ds, 1, true, true);
    check(a == b, "pipeline.restart", "hash %016llx vs %016llx", (unsigned long long)a, (unsigned long long)b);
    test_device_pipeline(&ds);
    cnn_dataset_free(&ds);
    for (int c = 0; c < 2; c++) {
        for (int i = 0; i < 6; i++) {
            snprintf(path, sizeof path, "%s/class%d/img%d.JPG", root, c, i);
            unlink(path);
        }
        snprintf(path, sizeof path, "%s/class%d", root, c);
        rmdir(path);
    }
    rmdir(root);
}
#endif

int main(void) {
    test_eval_plan();
    test_random_plan();
    test_resample();
    test_headers();
    test_idx();
#ifdef CNN_HAVE_JPEG
    test_pipeline();
#else
    skip("pipeline", "built without libturbojpeg");
#endif
    return test_finish();
}
