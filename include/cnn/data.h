/* data.h — datasets and batches.
 *
 * Sources (a string, as on the command line):
 *   "synthetic"            built-in, deterministic, CIFAR-shaped (3x32x32 uint8), 10 learnable classes
 *   "cifar10:DIR"          DIR/data_batch_{1..5}.bin (train) and DIR/test_batch.bin (test), 3073-byte records
 *   "cifar100:DIR"         DIR/train.bin and DIR/test.bin, 3074-byte records (coarse label, fine label, pixels):
 *                          the 100 fine labels, or the 20 coarse ones with opts.coarse
 *   "mnist:DIR"            DIR/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] (IDX files, 1x28x28)
 *   "fashion-mnist[:DIR]"  the same layout; without DIR, Debian's dataset-fashion-mnist package
 *   "folder:DIR"           torchvision's ImageFolder: DIR/train and DIR/val (or DIR/test) when DIR/train exists,
 *                          else DIR itself split by opts.holdout; class = position of its folder name in the
 *                          sorted list; JPEG and PNG files decoded per batch (datasets_folder.c)
 *   "tensors:FILE"         a safetensors file with float32 "images" (N, 3, H, W) and int64 "labels" (N,); the
 *                          same data serves both splits and is never augmented
 *
 * Small uint8 datasets stay whole on the backend and are augmented there (random crop with zero padding + flip,
 * then normalisation) by one prep_images call per batch. Folder datasets are decoded by a pool of threads into
 * a ring of staging buffers (pipeline.c): RandomResizedCrop + flip for training, Resize + CenterCrop for
 * evaluation, both as torchvision does them with PIL. All randomness (epoch order, crops, flips) is a pure
 * function of (seed, epoch, position) — resuming needs only the step counter.
 */
#ifndef CNN_DATA_H
#define CNN_DATA_H

#include "cnn/net.h"

typedef enum cnn_split { CNN_SPLIT_TRAIN = 0, CNN_SPLIT_TEST } cnn_split;

typedef enum cnn_bad_image { CNN_BAD_IMAGE_FAIL = 0, CNN_BAD_IMAGE_SKIP } cnn_bad_image;

/* Where folder datasets decode their JPEGs: always the CPU, or the device or an error (the backend's jpeg_create,
 * e.g. nvJPEG on CUDA), or the device and the decode threads sharing each batch (mixed: the threads take the share
 * of its JPEGs that has both finish it together, measured as the run goes, so which decoder an image meets follows
 * timing; else as gpu). auto: mixed where the backend has a device decoder and fewer than 16 decode threads run,
 * else the CPU; auto_fixed the same with gpu for mixed (--deterministic: no timing in the pixels). */
typedef enum cnn_decode {
    CNN_DECODE_AUTO = 0,
    CNN_DECODE_CPU,
    CNN_DECODE_GPU,
    CNN_DECODE_MIXED,
    CNN_DECODE_AUTO_FIXED
} cnn_decode;

typedef struct cnn_file_list cnn_file_list; /* a folder dataset's files (datasets_folder.c) */

typedef struct cnn_dataset {
    char source[64];        /* "synthetic", "cifar10", "cifar100", "mnist", "fashion-mnist", "folder", "tensors" */
    int n;                  /* samples */
    int c, h, w;            /* folder data: 3 and the size batches are cropped to */
    int classes;
    uint8_t *pix;           /* (n, c, h, w) uint8, or NULL */
    float *fpix;            /* (n, c, h, w) float32, or NULL */
    cnn_file_list *files;   /* image files decoded per batch, or NULL */
    int32_t *labels;        /* (n) */
    float mean[3], std[3];  /* normalisation of uint8 data (one channel: [0] repeated) */
    int pad;                /* pad-crop augmentation of uint8 data: zero padding on each side */
    char **class_names;     /* (classes) folder names, or NULL */
} cnn_dataset;

typedef struct cnn_data_opts {
    const char *source;
    cnn_split split;
    int limit;              /* use at most this many samples (0 = all); synthetic: how many to generate */
    uint64_t seed;          /* synthetic generation; folder holdout */
    int num_classes;        /* > 0: every label must be below it; 0: inferred (tensors: at most
                             * CNN_MAX_INFERRED_CLASSES, above which the count must be given) */
    bool coarse;            /* cifar100: the 20 coarse labels */
    float holdout;          /* folder without train/: fraction of each class held out as the test split */
    int image_h, image_w;   /* folder: the size images are cropped to (default 224) */
    int resize;             /* folder, test split: Resize(resize) before the centre crop (0 = 256/224 of it) */
    float scale_lo;         /* folder, train split: RandomResizedCrop's smallest area fraction (0 = 0.08) */
    cnn_bad_image on_bad;   /* folder: what an undecodable image does */
    int threads;            /* folder: decode threads (0 = the CPUs online) */
    cnn_decode decode;      /* folder: where JPEGs are decoded */
} cnn_data_opts;

#define CNN_MAX_INFERRED_CLASSES 1000

cnn_status cnn_dataset_load(const cnn_data_opts *o, cnn_dataset *out);
void cnn_dataset_free(cnn_dataset *d);
/* Parse "a" or "a,b,c" (finite; std > 0) into the dataset's mean or std (--mean/--std). */
cnn_status cnn_dataset_set_norm(cnn_dataset *d, const char *mean, const char *std);

/* Loaders of the other sources (datasets_small.c, datasets_folder.c); d is zeroed and owned by the caller. */
cnn_status cnn_load_idx(const char *dir, const char *what, const cnn_data_opts *o, cnn_dataset *d);
cnn_status cnn_load_cifar100(const char *dir, const cnn_data_opts *o, cnn_dataset *d);
cnn_status cnn_load_folder(const char *dir, const cnn_data_opts *o, cnn_dataset *d);
void cnn_file_list_free(cnn_file_list *f);
/* Every file with an image extension under root (symlinks followed, loops skipped or an error as on_bad says),
 * in ImageFolder's order; *paths and each path are malloc'd. */
cnn_status cnn_list_images(const char *root, cnn_bad_image on_bad, char ***paths, int *count);
/* Parse an IDX file image (magic 0x0000080D, D dims big-endian): dims and a pointer to the payload. */
cnn_status cnn_idx_parse(const uint8_t *buf, size_t len, const char *name, int want_ndim, int64_t dims[3],
                         const uint8_t **payload);
/* Read a file, inflating it when it is gzip (needs zlib), up to max_bytes of content. */
cnn_status cnn_read_maybe_gz(const char *path, size_t max_bytes, uint8_t **out, size_t *len);
/* Inflate a gzip stream held in memory (at most max_bytes out; *out malloc'd with a NUL after *len bytes). */
cnn_status cnn_gunzip(const uint8_t *buf, size_t n, const char *name, size_t max_bytes, uint8_t **out, size_t *len);
/* Parse a CIFAR-100 binary file image of `records` 3074-byte records into d (o: split, limit, coarse). */
cnn_status cnn_cifar100_parse(const uint8_t *buf, size_t len, const char *name, int records, const cnn_data_opts *o,
                              cnn_dataset *d);

/* ImageNet-1k's class names in torchvision's order (imagenet_classes.c). */
extern const char *const cnn_imagenet_classes[1000];

/* The dataset order of an epoch: Fisher-Yates with Philox draws keyed by (seed, epoch), or 0..n-1. */
void cnn_epoch_order(uint64_t seed, int64_t epoch, bool shuffle, int n, int32_t *order);

/* Generate one synthetic sample (3x32x32 uint8 planes) and its label: a pure function of (seed, split, i). */
int cnn_synthetic_sample(uint64_t seed, cnn_split split, int64_t i, uint8_t *pix);

typedef struct cnn_pipeline cnn_pipeline;

/* Feeds batches of a dataset to a model on its backend. uint8 datasets are uploaded whole once (or, where
 * that does not fit, batch by batch) and each batch is one prep_images call gathering its samples; folder
 * datasets come through the decode threads of a cnn_pipeline. */
typedef struct cnn_loader {
    const cnn_dataset *ds;
    cnn_backend *be;
    int max_batch;
    bool augment, shuffle;
    uint64_t seed;
    int32_t *perm;          /* current epoch's order */
    int64_t perm_epoch;
    int32_t *host_samples;  /* (max_batch, 4): image, crop y, crop x, flip */
    uint8_t *host_pix;      /* (max_batch, c, h, w) when the dataset is not whole on the backend */
    float *host_f;          /* float batches */
    void *dev_all;          /* the whole uint8 dataset on the backend, or NULL */
    void *dev_pix, *dev_samples;
    cnn_pipeline *pipe;     /* folder datasets */
    double wait_s;          /* seconds spent preparing or waiting for batches (host side) */
    int64_t images;         /* images delivered */
} cnn_loader;

cnn_status cnn_loader_init(cnn_loader *l, const cnn_dataset *ds, cnn_backend *be, int max_batch, bool augment,
                           bool shuffle, uint64_t seed);
void cnn_loader_free(cnn_loader *l);
/* Put batch `index` of epoch `epoch` (n images starting at position index*batch of the epoch's order) into the
 * model's input buffer; labels (host, n) receive the labels. */
cnn_status cnn_loader_batch(cnn_loader *l, cnn_model *m, int64_t epoch, int64_t start, int n, int64_t *labels);
/* Undecodable images skipped so far (folder datasets with on_bad = skip). */
int64_t cnn_loader_skipped(cnn_loader *l);

#endif
