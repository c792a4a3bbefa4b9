/* data.h — datasets and batches.
 *
 * Sources (a string, as on the command line):
 *   "synthetic"            built-in, deterministic, CIFAR-shaped (3x32x32 uint8), 10 learnable classes
 *   "cifar10:DIR"          DIR/data_batch_{1..5}.bin (train) and DIR/test_batch.bin (test), 3073-byte records
 *   "tensors:FILE"         a safetensors file with float32 "images" (N, 3, H, W) and int64 "labels" (N,); the
 *                          same data serves both splits and is never augmented
 *
 * uint8 datasets are augmented on the backend (random crop with zero padding 4 + horizontal flip, then
 * normalisation) by one prep_images call per batch. All randomness (epoch order, crops, flips) is a pure
 * function of (seed, epoch, position) — resuming needs only the step counter.
 */
#ifndef CNN_DATA_H
#define CNN_DATA_H

#include "cnn/net.h"

typedef enum cnn_split { CNN_SPLIT_TRAIN = 0, CNN_SPLIT_TEST } cnn_split;

typedef struct cnn_dataset {
    char source[64];        /* "synthetic", "cifar10", "tensors" */
    int n;                  /* samples */
    int c, h, w;
    int classes;
    uint8_t *pix;           /* (n, c, h, w) uint8, or NULL */
    float *fpix;            /* (n, c, h, w) float32, or NULL */
    int32_t *labels;        /* (n) */
    float mean[3], std[3];  /* normalisation of uint8 data */
} cnn_dataset;

typedef struct cnn_data_opts {
    const char *source;
    cnn_split split;
    int limit;              /* use at most this many samples (0 = all); synthetic: how many to generate */
    uint64_t seed;          /* synthetic generation */
    int num_classes;        /* > 0: every label must be below it; 0: inferred (tensors: at most
                             * CNN_MAX_INFERRED_CLASSES, above which the count must be given) */
} cnn_data_opts;

#define CNN_MAX_INFERRED_CLASSES 1000

cnn_status cnn_dataset_load(const cnn_data_opts *o, cnn_dataset *out);
void cnn_dataset_free(cnn_dataset *d);

/* Generate one synthetic sample (3x32x32 uint8 planes) and its label: a pure function of (seed, split, i). */
int cnn_synthetic_sample(uint64_t seed, cnn_split split, int64_t i, uint8_t *pix);

/* Feeds batches of a dataset to a model on its backend. */
typedef struct cnn_loader {
    const cnn_dataset *ds;
    cnn_backend *be;
    int max_batch;
    bool augment, shuffle;
    uint64_t seed;
    int32_t *perm;          /* current epoch's order */
    int64_t perm_epoch;
    uint8_t *host_pix;      /* (max_batch, c, h, w) */
    int32_t *host_off;      /* (max_batch, 2) */
    uint8_t *host_flip;     /* (max_batch) */
    float *host_f;          /* float batches */
    void *dev_pix, *dev_off, *dev_flip;
} cnn_loader;

cnn_status cnn_loader_init(cnn_loader *l, const cnn_dataset *ds, cnn_backend *be, int max_batch, bool augment,
                           bool shuffle, uint64_t seed);
void cnn_loader_free(cnn_loader *l);
/* Put batch `index` of epoch `epoch` (n images starting at position index*batch of the epoch's order) into the
 * model's input buffer; labels (host, n) receive the labels. */
cnn_status cnn_loader_batch(cnn_loader *l, cnn_model *m, int64_t epoch, int64_t start, int n, int64_t *labels);

#endif
