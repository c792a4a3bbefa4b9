/* pipeline.h — the input pipeline of folder datasets: a pool of decode threads fills a bounded ring of staging
 * buffers (page-locked where the backend offers it) with whole batches, ahead of the training loop.
 *
 * The loader asks for batches in order with cnn_pipeline_get(epoch, start, n); while it computes on one, the
 * threads decode the next `depth - 1` batches (predicted: the next full batch of the epoch, then the next
 * epoch). A request that differs from the prediction (a resume, an evaluation subset) restarts the ring there.
 * Each image is a pure function of (seed, epoch, position), so the batches do not depend on the thread count or
 * on timing (but where the device and the threads share batches, --decode mixed or auto: timing picks which
 * decoder meets an image, and their pixels differ by rounding; its crop is the same). An image that cannot be
 * decoded is an error naming the file (on_bad = fail), or is replaced by the next decodable file of the dataset
 * listing and counted (on_bad = skip).
 */
#ifndef CNN_PIPELINE_H
#define CNN_PIPELINE_H

#include "cnn/data.h"

struct cnn_file_list {
    int n;
    char **paths;          /* (n) into arena */
    char *arena;
    uint8_t *bad;          /* (n) 1 = known undecodable (written by decode threads; a cache, not a result) */
    int loops;             /* symlink loops skipped while listing */
    cnn_bad_image on_bad;
    int out_h, out_w;      /* batch image size: the crop */
    int resize;            /* evaluation: Resize(resize) before CenterCrop */
    float scale_lo;        /* training: RandomResizedCrop scale=(scale_lo, 1) */
    int threads;           /* decode threads, 0 = CPUs online */
    cnn_decode decode;     /* JPEGs on the device (the backend's jpeg_create), on the CPU, or the device when it can */
};

typedef struct cnn_pipeline cnn_pipeline;

typedef struct cnn_pipeline_opts {
    const cnn_dataset *ds; /* with ds->files */
    cnn_backend *be;       /* host_alloc for the staging buffers (NULL or no host_alloc: malloc) */
    int max_batch;
    int depth;             /* staging buffers: batches decoded ahead + the one in use (>= 2) */
    bool train;            /* RandomResizedCrop + flip; else Resize + CenterCrop */
    bool shuffle;
    uint64_t seed;
} cnn_pipeline_opts;

cnn_status cnn_pipeline_create(const cnn_pipeline_opts *o, cnn_pipeline **out);
void cnn_pipeline_free(cnn_pipeline *p);
/* Batch of n images at position start of epoch's order: *pix = (n, 3, H, W) uint8 planes (host staging memory, or
 * the backend's device memory when cnn_pipeline_on_device) and *index = the dataset index each image came from
 * (after any skip), both valid until the next call. *wait_s += the seconds this call blocked. */
cnn_status cnn_pipeline_get(cnn_pipeline *p, int64_t epoch, int64_t start, int n, const uint8_t **pix,
                            const int32_t **index, double *wait_s);
/* Whether batches come as device planes decoded by the backend's JPEG decoder. */
bool cnn_pipeline_on_device(const cnn_pipeline *p);
/* Distinct undecodable images skipped so far. */
int64_t cnn_pipeline_skipped(cnn_pipeline *p);

/* Decode one image of a folder dataset as the pipeline does (train: RandomResizedCrop keyed by (seed, epoch,
 * pos) + flip; else Resize + CenterCrop) into (3, H, W) planes. */
cnn_status cnn_folder_image(const cnn_file_list *f, int32_t index, bool train, uint64_t seed, int64_t epoch,
                            int64_t pos, uint8_t *dst);

#endif
