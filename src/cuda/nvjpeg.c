/* nvjpeg.c -- batched JPEG decoding on the GPU: nvJPEG loaded at run time (dlopen of libnvjpeg.so.13 or .12,
 * nothing linked), then prep.cu's resample_images cuts each image's crop out of the decoded RGB pixels into uint8
 * planes (backend.h: jpeg_create / jpeg_decode / jpeg_fence / jpeg_free).
 *
 * A decoder has its own stream, so decoding overlaps the training step on the backend's stream. It tries nvJPEG's
 * hardware backend (the JPEG engines of A100/H100-class GPUs; baseline JPEGs only) and keeps the GPU-assisted
 * backend (else the default one) beside it: a batch the first refuses goes to the second, and images both refuse
 * come back as ok = 0 for the CPU decoder. Before a batch is handed to nvJPEG each image's header is checked
 * (nvjpegGetImageInfo: 3 components, a known subsampling, the size the CPU probe saw); a failing image never
 * reaches the batch call, so one bad file does not cost the batch its GPU decode.
 *
 * Only the few declarations used are written here, from nvJPEG's documented API (nvjpeg.h of CUDA 12/13).
 */
#include "cuda/internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- nvJPEG's API, as declared by nvjpeg.h ---------------------------------------------------------------- */

typedef int nvjpegStatus_t;          /* NVJPEG_STATUS_SUCCESS = 0 */
typedef int nvjpegChromaSubsampling_t; /* NVJPEG_CSS_UNKNOWN = -1 */
typedef int nvjpegOutputFormat_t;
typedef int nvjpegBackend_t;
typedef struct nvjpegHandle *nvjpegHandle_t;
typedef struct nvjpegJpegState *nvjpegJpegState_t;
typedef struct {
    unsigned char *channel[4];
    size_t pitch[4];
} nvjpegImage_t;

enum {
    NJ_SUCCESS = 0,
    NJ_CSS_UNKNOWN = -1,
    NJ_OUTPUT_RGBI = 5,
    NJ_BACKEND_DEFAULT = 0,
    NJ_BACKEND_GPU_HYBRID = 2,
    NJ_BACKEND_HARDWARE = 3
};

typedef struct nvjpeg_api {
    nvjpegStatus_t (*GetProperty)(int type, int *value);
    nvjpegStatus_t (*CreateEx)(nvjpegBackend_t backend, void *dev_allocator, void *pinned_allocator, unsigned flags,
                               nvjpegHandle_t *handle);
    nvjpegStatus_t (*Destroy)(nvjpegHandle_t handle);
    nvjpegStatus_t (*JpegStateCreate)(nvjpegHandle_t handle, nvjpegJpegState_t *state);
    nvjpegStatus_t (*JpegStateDestroy)(nvjpegJpegState_t state);
    nvjpegStatus_t (*GetImageInfo)(nvjpegHandle_t handle, const unsigned char *data, size_t length, int *n_components,
                                   nvjpegChromaSubsampling_t *subsampling, int *widths, int *heights);
    nvjpegStatus_t (*DecodeBatchedInitialize)(nvjpegHandle_t handle, nvjpegJpegState_t state, int batch_size,
                                              int max_cpu_threads, nvjpegOutputFormat_t output_format);
    nvjpegStatus_t (*DecodeBatched)(nvjpegHandle_t handle, nvjpegJpegState_t state, const unsigned char *const *data,
                                    const size_t *lengths, nvjpegImage_t *destinations, CUstream stream);
    int major, minor;
} nvjpeg_api;

static nvjpeg_api nj;
static pthread_once_t nj_once = PTHREAD_ONCE_INIT;
static char nj_error[512];
static bool nj_ok;

static void nj_load(void) {
    const char *home = cnn_env_get()->cuda_home;
    char home_lib[400];
    snprintf(home_lib, sizeof home_lib, "%.360s/lib64/libnvjpeg.so", home && home[0] ? home : "/usr/local/cuda");
    const char *names[] = {"libnvjpeg.so.13", "libnvjpeg.so.12", "libnvjpeg.so", home_lib};
    void *lib = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !lib; i++) lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(nj_error, sizeof nj_error, "nvJPEG not found (tried libnvjpeg.so.13, .so.12, .so and %s)", home_lib);
        return;
    }
    const char *missing = NULL;
#define NJ_SYM(field, name)                                                                                    \
    do {                                                                                                       \
        void *p_ = dlsym(lib, name);                                                                           \
        if (!p_ && !missing) missing = name;                                                                   \
        memcpy(&nj.field, &p_, sizeof p_);                                                                     \
    } while (0)
    NJ_SYM(GetProperty, "nvjpegGetProperty");
    NJ_SYM(CreateEx, "nvjpegCreateEx");
    NJ_SYM(Destroy, "nvjpegDestroy");
    NJ_SYM(JpegStateCreate, "nvjpegJpegStateCreate");
    NJ_SYM(JpegStateDestroy, "nvjpegJpegStateDestroy");
    NJ_SYM(GetImageInfo, "nvjpegGetImageInfo");
    NJ_SYM(DecodeBatchedInitialize, "nvjpegDecodeBatchedInitialize");
    NJ_SYM(DecodeBatched, "nvjpegDecodeBatched");
#undef NJ_SYM
    if (missing) {
        snprintf(nj_error, sizeof nj_error, "the nvJPEG library found lacks %s", missing);
        return;
    }
    /* libraryPropertyType: MAJOR_VERSION 0, MINOR_VERSION 1; nvjpegImage_t's pitch is size_t from CUDA 12 on */
    if (nj.GetProperty(0, &nj.major) != NJ_SUCCESS || nj.GetProperty(1, &nj.minor) != NJ_SUCCESS || nj.major < 12) {
        snprintf(nj_error, sizeof nj_error, "nvJPEG %d.%d found; version 12 or newer is needed", nj.major, nj.minor);
        return;
    }
    nj_ok = true; /* the library stays loaded for the life of the process */
}

/* ---- the decoder ------------------------------------------------------------------------------------------ */

#define MAX_DECODED_BYTES ((size_t)1 << 30) /* decoded pixels per nvJPEG call: a larger batch goes in chunks */

typedef struct nj_engine {
    nvjpegHandle_t h;
    nvjpegJpegState_t st;
    int batch;                /* the batch size the state is initialised for; 0 = none */
    const char *name;
} nj_engine;

typedef struct jpeg_dec {
    cuda_be *cb;
    CUstream stream;
    CUfunction resample;
    nj_engine eng[2];         /* [0] hardware, [1] GPU-assisted (else default); h NULL when absent */
    int n_eng;
    int max_batch, slots;
    CUevent *fence;           /* (slots) */
    CUdeviceptr pix;          /* decoded RGB images of one chunk */
    size_t pix_cap;
    CUdeviceptr jobs;         /* (max_batch) cnn_resample_job */
    cnn_resample_job *hjobs;  /* (max_batch) */
    int *pick;                /* (max_batch) images of the current chunk */
    const unsigned char **data;
    size_t *len;
    nvjpegImage_t *dst;
    bool warned;
} jpeg_dec;

static void engine_free(nj_engine *e) {
    if (e->st) nj.JpegStateDestroy(e->st);
    if (e->h) nj.Destroy(e->h);
    memset(e, 0, sizeof *e);
}

static bool engine_init(nj_engine *e, nvjpegBackend_t backend, const char *name) {
    memset(e, 0, sizeof *e);
    e->name = name;
    if (nj.CreateEx(backend, NULL, NULL, 0, &e->h) != NJ_SUCCESS) {
        e->h = NULL;
        return false;
    }
    if (nj.JpegStateCreate(e->h, &e->st) != NJ_SUCCESS) {
        e->st = NULL;
        engine_free(e);
        return false;
    }
    return true;
}

void cuda_jpeg_free(cnn_backend *be, void *decv) {
    jpeg_dec *d = decv;
    if (!d) return;
    cuda_bind(d->cb);
    if (d->stream) cu.StreamSynchronize(d->stream);
    for (int i = 0; i < 2; i++) engine_free(&d->eng[i]);
    for (int i = 0; d->fence && i < d->slots; i++)
        if (d->fence[i]) cu.EventDestroy(d->fence[i]);
    if (d->pix) cu.MemFree(d->pix);
    if (d->jobs) cu.MemFree(d->jobs);
    if (d->stream) cu.StreamDestroy(d->stream);
    free(d->fence);
    free(d->hjobs);
    free(d->pick);
    free(d->data);
    free(d->len);
    free(d->dst);
    free(d);
}

cnn_status cuda_jpeg_create(cnn_backend *be, int max_batch, int slots, void **out) {
    *out = NULL;
    cuda_be *cb = cuda_impl(be);
    CNN_ASSERT(max_batch > 0 && slots > 0);
    pthread_once(&nj_once, nj_load);
    if (!nj_ok) return cnn_fail(CNN_E_UNSUPPORTED, "%s", nj_error);
    cuda_bind(cb);
    CUfunction f;
    CNN_TRY(cuda_kernel(cb, &cuda_family_prep, be->act_dtype, 0, PREP_RESAMPLE, &f));
    jpeg_dec *d = calloc(1, sizeof *d);
    if (!d) return cnn_fail(CNN_E_OOM, "out of memory for the JPEG decoder");
    d->cb = cb;
    d->resample = f;
    d->max_batch = max_batch;
    d->slots = slots;
    d->fence = calloc((size_t)slots, sizeof *d->fence);
    d->hjobs = calloc((size_t)max_batch, sizeof *d->hjobs);
    d->pick = calloc((size_t)max_batch, sizeof *d->pick);
    d->data = calloc((size_t)max_batch, sizeof *d->data);
    d->len = calloc((size_t)max_batch, sizeof *d->len);
    d->dst = calloc((size_t)max_batch, sizeof *d->dst);
    cnn_status st = CNN_OK;
    if (!d->fence || !d->hjobs || !d->pick || !d->data || !d->len || !d->dst)
        st = cnn_fail(CNN_E_OOM, "out of memory for the JPEG decoder");
    CUresult r = CUDA_SUCCESS;
    if (st == CNN_OK && (r = cu.StreamCreate(&d->stream, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS)
        st = cuda_fail(r, "JPEG decoder stream (cuStreamCreate)");
    for (int i = 0; st == CNN_OK && i < slots; i++)
        if ((r = cu.EventCreate(&d->fence[i], CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS)
            st = cuda_fail(r, "JPEG decoder fence (cuEventCreate)");
    if (st == CNN_OK && (r = cu.MemAlloc(&d->jobs, (size_t)max_batch * sizeof(cnn_resample_job))) != CUDA_SUCCESS)
        st = cuda_fail(r, "JPEG decoder resample jobs (cuMemAlloc)");
    if (st == CNN_OK) {
        /* GPU_HYBRID does the Huffman decoding of baseline JPEGs on the GPU in large batches; the default backend
         * (Huffman on the CPU) where it is refused */
        bool hw = engine_init(&d->eng[0], NJ_BACKEND_HARDWARE, "hardware decoder");
        bool sw = engine_init(&d->eng[1], NJ_BACKEND_GPU_HYBRID, "GPU-assisted backend") ||
                  engine_init(&d->eng[1], NJ_BACKEND_DEFAULT, "default backend");
        d->n_eng = hw + sw;
        if (!sw && !hw) st = cnn_fail(CNN_E_UNSUPPORTED, "nvJPEG %d.%d refuses this GPU (nvjpegCreateEx failed)",
                                      nj.major, nj.minor);
        else
            cnn_log(2, "cnn: nvJPEG %d.%d: %s%s%s", nj.major, nj.minor, hw ? d->eng[0].name : "", hw && sw ? ", then " : "",
                    sw ? d->eng[1].name : "");
    }
    if (st != CNN_OK) {
        cuda_jpeg_free(be, d);
        return st;
    }
    *out = d;
    return CNN_OK;
}

cnn_status cuda_jpeg_fence(cnn_backend *be, void *decv, int slot) {
    jpeg_dec *d = decv;
    cuda_be *cb = cuda_impl(be);
    CNN_ASSERT(slot >= 0 && slot < d->slots);
    cuda_bind(cb);
    CU_TRY(cu.EventRecord(d->fence[slot], cb->stream), "JPEG decoder fence (cuEventRecord)");
    return CNN_OK;
}

/* Decode the JPEGs d->pick[0..m) of im with engine e into d->pix; false when nvJPEG refuses the batch. */
static bool decode_chunk(jpeg_dec *d, nj_engine *e, int m) {
    if (e->batch != m) {
        if (nj.DecodeBatchedInitialize(e->h, e->st, m, 1, NJ_OUTPUT_RGBI) != NJ_SUCCESS) {
            e->batch = 0;
            return false;
        }
        e->batch = m;
    }
    if (nj.DecodeBatched(e->h, e->st, d->data, d->len, d->dst, d->stream) != NJ_SUCCESS) {
        e->batch = 0; /* a failed batch leaves the state to be initialised again */
        return false;
    }
    return true;
}

cnn_status cuda_jpeg_decode(cnn_backend *be, void *decv, int slot, const cnn_resample_batch *b,
                            const cnn_jpeg_image *im, uint8_t *dst, uint8_t *ok) {
    jpeg_dec *d = decv;
    cuda_be *cb = d->cb;
    CNN_ASSERT(b->n > 0 && b->n <= d->max_batch && b->ch > 0 && b->cw > 0 && slot >= 0 && slot < d->slots);
    cuda_bind(cb);
    size_t per = (size_t)3 * b->ch * b->cw;
    CU_TRY(cu.StreamWaitEvent(d->stream, d->fence[slot], 0), "JPEG decoder (cuStreamWaitEvent)");
    /* which JPEGs nvJPEG may take: three components, a known subsampling, the size the CPU probe saw */
    int m = 0;
    for (int i = 0; i < b->n; i++) {
        ok[i] = 0;
        if (!im[i].data) continue;
        int nc = 0, w[4] = {0}, h[4] = {0};
        nvjpegChromaSubsampling_t css = NJ_CSS_UNKNOWN;
        if (nj.GetImageInfo(d->eng[1].h ? d->eng[1].h : d->eng[0].h, im[i].data, im[i].len, &nc, &css, w, h) !=
                NJ_SUCCESS ||
            nc != 3 || css == NJ_CSS_UNKNOWN || w[0] != im[i].job.w || h[0] != im[i].job.h)
            continue;
        d->pick[m++] = i;
    }
    /* chunks of at most MAX_DECODED_BYTES of decoded pixels */
    for (int c0 = 0; c0 < m;) {
        size_t bytes = 0;
        int c1 = c0;
        while (c1 < m) {
            const cnn_resample_job *j = &im[d->pick[c1]].job;
            size_t sz = ((size_t)3 * j->w + 255) / 256 * 256 * (size_t)j->h;
            if (c1 > c0 && bytes + sz > MAX_DECODED_BYTES) break;
            bytes += sz;
            c1++;
        }
        if (bytes > d->pix_cap) {
            if (d->pix) {
                CU_TRY(cu.StreamSynchronize(d->stream), "JPEG decoder (cuStreamSynchronize)");
                cu.MemFree(d->pix);
                d->pix = 0;
                d->pix_cap = 0;
            }
            CU_TRY(cu.MemAlloc(&d->pix, bytes), "JPEG decoder image buffer (cuMemAlloc)");
            d->pix_cap = bytes;
        }
        int k = c1 - c0;
        size_t off = 0;
        for (int t = 0; t < k; t++) {
            const cnn_jpeg_image *x = &im[d->pick[c0 + t]];
            size_t pitch = ((size_t)3 * x->job.w + 255) / 256 * 256;
            d->data[t] = x->data;
            d->len[t] = x->len;
            memset(&d->dst[t], 0, sizeof d->dst[t]);
            d->dst[t].channel[0] = (unsigned char *)(uintptr_t)(d->pix + off);
            d->dst[t].pitch[0] = pitch;
            off += pitch * (size_t)x->job.h;
        }
        bool done = false;
        for (int e = 0; e < 2 && !done; e++)
            if (d->eng[e].h) done = decode_chunk(d, &d->eng[e], k);
        if (done) {
            /* the chunk's images get their jobs; the others out_h 0, which leaves their planes alone */
            for (int i = 0; i < b->n; i++) d->hjobs[i] = (cnn_resample_job){.out_h = 0};
            off = 0;
            for (int t = 0; t < k; t++) {
                int i = d->pick[c0 + t];
                d->hjobs[i] = im[i].job;
                d->hjobs[i].src = (int64_t)off;
                d->hjobs[i].pitch = (int32_t)d->dst[t].pitch[0];
                off += d->dst[t].pitch[0] * (size_t)im[i].job.h;
            }
            CU_TRY(cu.MemcpyHtoDAsync(d->jobs, d->hjobs, (size_t)b->n * sizeof *d->hjobs, d->stream),
                   "JPEG decoder jobs (cuMemcpyHtoDAsync)");
            for (int t = 0; t < k; t++) ok[d->pick[c0 + t]] = 1;
            cnn_resample_batch rb = *b;
            CNN_TRY(cuda_resample_launch(cb, d->resample, d->stream, &rb, (const cnn_resample_job *)(uintptr_t)d->jobs,
                                         (const uint8_t *)(uintptr_t)d->pix, dst));
            /* the host jobs array is rewritten by the next chunk: this one's copy must have happened */
            CU_TRY(cu.StreamSynchronize(d->stream), "JPEG decoder (cuStreamSynchronize)");
        } else if (!d->warned) {
            d->warned = true;
            cnn_log(1, "cnn: nvJPEG refused a batch of %d images; they are decoded on the CPU", k);
        }
        c0 = c1;
    }
    for (int i = 0; i < b->n; i++)
        if (!im[i].data && im[i].planes) {
            CU_TRY(cu.MemcpyHtoDAsync((CUdeviceptr)(uintptr_t)(dst + (size_t)i * per), im[i].planes, per, d->stream),
                   "JPEG decoder planes (cuMemcpyHtoDAsync)");
            ok[i] = 1;
        }
    CU_TRY(cu.StreamSynchronize(d->stream), "JPEG decoder (cuStreamSynchronize)");
    return CNN_OK;
}
