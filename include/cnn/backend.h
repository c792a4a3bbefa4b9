/* backend.h — the op vocabulary and the table of function pointers every backend implements.
 *
 * A backend (CPU: src/cpu, the oracle; CUDA: src/cuda) owns memory and runs ops on it. The network executor in
 * src/core only calls through this table, so adding a backend touches nothing in core. Problem descriptors are
 * typed structs with CUTLASS's names:
 *
 *     input  x  (N, C, H, W)   stored NHWC
 *     filter w  (K, C, R, S)   stored KRSC
 *     output y  (N, K, P, Q)   stored NHWC
 *
 * Passes are named fprop / dgrad / wgrad for convolutions and forward / backward for everything else.
 *
 * Precision: every pointer that carries activations, activation gradients or conv/linear weights holds
 * elements of be->act_dtype (F32 on the CPU backend). BatchNorm parameters and statistics, the per-channel
 * epilogue vectors, parameter gradients, optimizer state and losses are always float32.
 *
 * Gradient flags: `accumulate` = add into the destination instead of overwriting it (an activation that feeds
 * two layers receives two gradients). Parameter gradients are always overwritten: each parameter is used once.
 *
 * Every op returns CNN_OK or a status with a message (cnn_fail); a shape contract violation is a bug and
 * aborts (CNN_ASSERT).
 */
#ifndef CNN_BACKEND_H
#define CNN_BACKEND_H

#include "cnn/tensor.h"

#define CNN_TIME_MARKS 4096 /* timing marks per backend (time_mark) */

/* ---- problem descriptors -------------------------------------------------------------------------------- */

typedef struct cnn_conv2d {
    int n, c, h, w;       /* input  (N, C, H, W)                  */
    int k, r, s;          /* filter (K, C, R, S)                  */
    int stride_h, stride_w;
    int pad_h, pad_w;
    int p, q;             /* output (N, K, P, Q); set by cnn_conv2d_init */
    int choose_n;         /* 0, or the batch whose kernel choice the backend takes (its heuristic's, untimed), so
                           * that the n images get the kernel, and so the bits, of a launch over choose_n of them:
                           * --deterministic runs a batch of slices in one launch (core/shards.h). A wgrad then
                           * writes n / choose_n filter gradients, each its slice's, cnn_sum_rows apart */
    int choice_n;         /* 0, or with choose_n: a larger batch (a multiple of choose_n that every rank agrees on:
                           * the global batch) whose choice a backend takes instead, where its kernels give an image
                           * the same bits in a launch over any number of images once the choice is made (the CUDA
                           * backend; a wgrad's slices then share the splits of that choice, each slice's sum still
                           * its own); a backend whose do not (the CPU's GEMM: its schedule depends on the row
                           * count) runs launches of choose_n images, as without it */
} cnn_conv2d;

/* floats between the rows of sums a call writes one per slice (conv2d_wgrad with choose_n): count rounded up to 64,
 * so that every row is as aligned as a tensor of the gradient arena */
static inline int64_t cnn_sum_rows(int64_t count) { return (count + 63) / 64 * 64; }

/* Fill a descriptor and derive P, Q. Returns false (and leaves p/q <= 0) when the output would be empty. */
bool cnn_conv2d_init(cnn_conv2d *cv, int n, int c, int h, int w, int k, int r, int s, int stride, int pad);
static inline int64_t cnn_conv2d_flops(const cnn_conv2d *cv) {
    return 2LL * cv->n * cv->p * cv->q * cv->k * cv->c * cv->r * cv->s;
}

/* Fused epilogue of a convolution or linear layer, applied per output element of channel k:
 *     y = relu?( acc * scale[k] + shift[k] + residual )
 * scale NULL means 1, shift NULL means 0, residual NULL means none. residual has y's shape and dtype. */
/* Per-channel sums of a conv's output, in the backend's own layout, that its epilogue writes for the training
 * BatchNorm reading that output: conv2d_fprop fills it where cnn_epilogue.stats asks and the backend can (chunks >
 * 0; the CUDA backend's warp-specialised rows), else sets chunks to 0; bn_forward_train then takes them through
 * cnn_bn.stats instead of reading x once more. Valid until the backend's next conv2d_fprop. */
typedef struct cnn_conv_stats {
    const float *partial; /* the backend's memory */
    int64_t chunks;       /* 0: none written */
    const void *y;        /* the output they sum */
    int c;                /* its channels */
    int chunk_rows;       /* rows of y (N * P * Q, in order) each chunk sums; the last chunk may have fewer */
    int tile_rows;        /* a multiple of chunk_rows: a launch's chunks at a multiple of it from its first row sum
                           * the same rows as any other launch's there, bit for bit (--deterministic's slices) */
} cnn_conv_stats;

typedef struct cnn_epilogue {
    const float *scale;    /* (K) */
    const float *shift;    /* (K) */
    const void *residual;  /* (N, K, P, Q) */
    bool relu;
    cnn_conv_stats *stats; /* optional (NULL: none), a conv without scale, shift, residual or ReLU */
} cnn_epilogue;

typedef enum cnn_pool_kind {
    CNN_POOL_MAX = 0,       /* padding is -inf; ties go to the first element in (r, s) scan order      */
    CNN_POOL_AVG,           /* count_include_pad = true (PyTorch's default)                            */
    CNN_POOL_ADAPTIVE_AVG,  /* PyTorch's bins: [floor(i*H/P), ceil((i+1)*H/P))                        */
} cnn_pool_kind;

typedef struct cnn_pool2d {
    cnn_pool_kind kind;
    int n, c, h, w;         /* input  (N, C, H, W) */
    int r, s;               /* window (unused for adaptive) */
    int stride_h, stride_w;
    int pad_h, pad_w;
    int p, q;               /* output (N, C, P, Q) */
    /* Optional, max pooling: n * p * q * c bytes (16-byte aligned) in which pool2d_forward may keep each output's
     * position of its maximum in the window, for pool2d_backward to read instead of finding it again; NULL: none.
     * As cnn_bn.relu_mask: a backend that writes it reads it (cnn_backend.keeps_masks). */
    void *argmax;
    /* Backward of max pooling only: the pool's input is a ReLU's output, whose backward pool2d_backward applies as
     * well: a window's gradient passes only where the pool's output y (the value of the input it goes to) is > 0.
     * y is then required. */
    bool relu;
    /* Backward, overwriting dx, optional (NULL: none): dx_sum[c] = the sum of dx over its N*H*W rows, the bias
     * gradient of the conv before the pool (float32, overwritten), as channel_sum would make it. */
    float *dx_sum;
} cnn_pool2d;

/* Window pooling: derive P, Q (floor mode). Returns false when the output would be empty or pad > window/2. */
bool cnn_pool2d_init(cnn_pool2d *pl, cnn_pool_kind kind, int n, int c, int h, int w, int r, int stride, int pad);
/* Adaptive average pooling to (p, q). */
bool cnn_pool2d_init_adaptive(cnn_pool2d *pl, int n, int c, int h, int w, int p, int q);

/* BatchNorm over a (M, C) view of an NHWC tensor, M = N*H*W. */
typedef struct cnn_bn {
    int64_t m;
    int c;
    float eps;        /* 1e-5 in torchvision      */
    float momentum;   /* 0.1: running = (1-momentum)*running + momentum*batch; the variance is unbiased */
    /* Synchronised BatchNorm (--sync-bn): the batch statistics and the backward's sums over the `world` ranks of
     * comm (the backend's communicator, comm_allreduce), each holding m rows; comm NULL = this rank's rows only.
     * dgamma and dbeta stay this rank's sums: the gradient sum over the ranks adds them, as PyTorch's
     * SyncBatchNorm under DDP does. */
    void *comm;
    int world;
    /* Optional: (m * c + 7) / 8 bytes this layer's bn_forward_train may keep the fused ReLU's mask in (a bit per
     * element) for its bn_backward to read instead of y; y stays valid and required. NULL: none. A backend that
     * writes the mask reads it (cnn_backend.keeps_masks); one that ignores it (the CPU's) reads y. */
    void *relu_mask;
    /* Optional: the sums of x the conv producing it wrote (cnn_conv_stats, y == x and chunks > 0), which the
     * backend that wrote them reads instead of summing x; NULL: none. */
    const cnn_conv_stats *stats;
} cnn_bn;

/* y (N, OUT) = x (N, IN) · w(OUT, IN)^T + b */
typedef struct cnn_linear {
    int n, in, out;
    int choose_n, choice_n; /* 0, or as cnn_conv2d's: the n rows as launches of choose_n, each with the bits of a
                             * call over choose_n of them; a backward then writes n / choose_n sums of dw and of
                             * dbias, each its slice's, cnn_sum_rows(OUT * IN) and cnn_sum_rows(OUT) apart */
} cnn_linear;

/* Softmax cross-entropy over logits (N, CLASSES) with integer labels and label smoothing eps:
 * target = (1-eps)*onehot + eps/CLASSES; loss = mean over the batch of -sum target*log_softmax. */
typedef struct cnn_xent {
    int n, classes;
    float label_smoothing;
    float grad_scale;  /* dlogits are multiplied by this (fp16 loss scaling); 0 means 1. The loss is not. */
} cnn_xent;

/* Image preparation of uint8 data: sample i of the batch is image samples[4i] of src (which holds src_n images of
 * (C, H, W) uint8 planes), zero-padded by `pad`, cropped back to H x W at offset (samples[4i+1], samples[4i+2])
 * in [0, 2*pad], flipped left-right when samples[4i+3] is 1, then (v/255 - mean[k]) / std[k] per output
 * channel k, written NHWC with out_c channels (C = 1, out_c = 3: the channel repeated; else out_c = C).
 * samples NULL = image i, offset (pad, pad), no flip. */
typedef struct cnn_prep {
    int n, c, h, w;        /* batch and source image size (C, H, W) */
    int pad;
    int src_n;             /* images in src */
    int out_c;             /* output channels: C, or 3 when C = 1 */
    float mean[4], std[4]; /* per output channel */
} cnn_prep;

/* Resampling of one decoded image (resample_images; the device side of GPU JPEG decoding): the region (y0, x0,
 * rh, rw) of an (H, W, 3) uint8 RGB image stored at byte offset src of the source buffer with `pitch` bytes per
 * row is resized to out_h x out_w with a triangle filter widened by the scale factor when shrinking (PIL's
 * BILINEAR weights, computed in float32 without PIL's rounding between the two passes), and the window of
 * ch x cw pixels at (wy, wx) of the result is kept (0 outside the resized image), flipped left-right when flip.
 * The fields are those of cnn_resample (image.h) in the full-size image; a job with out_h 0 leaves its image's
 * planes untouched. Layout shared with kernels/prep.cu. */
typedef struct cnn_resample_job {
    int64_t src;            /* byte offset of the image's first row */
    int32_t h, w, pitch;    /* image size; bytes per row (>= 3 * w) */
    int32_t y0, x0, rh, rw; /* region of the image */
    int32_t out_h, out_w;   /* size the region is resized to */
    int32_t wy, wx;         /* origin of the kept window in the resized image */
    int32_t flip;           /* 0 or 1 */
} cnn_resample_job;

/* A batch of decoded images resampled to windows of one size: dst (N, 3, ch, cw) uint8 planes. */
typedef struct cnn_resample_batch {
    int n, ch, cw;
} cnn_resample_batch;

/* One image of a device JPEG decode (jpeg_decode): its file bytes, or planes decoded elsewhere. */
typedef struct cnn_jpeg_image {
    const uint8_t *data;    /* the JPEG file's bytes (host), or NULL: upload `planes` instead */
    size_t len;
    const uint8_t *planes;  /* (3, ch, cw) uint8 host planes, used when data is NULL */
    cnn_resample_job job;   /* the resample of the decoded image (its src, pitch, h, w are the backend's to fill) */
} cnn_jpeg_image;

typedef struct cnn_sgd {
    float lr, momentum, dampening, weight_decay;
    bool nesterov;
    bool first_step;   /* PyTorch initialises the momentum buffer with the first gradient */
    const uint32_t *skip; /* device word (cnn_guard_state.skip) read by the update itself: nonzero = leave the
                           * weights and the state untouched; NULL = always update */
    void *act_copy;       /* the backend's act_dtype copy of w (count elements) written with the update, or NULL */
} cnn_sgd;

typedef struct cnn_adamw {
    float lr, beta1, beta2, eps, weight_decay;
    int64_t step;      /* 1-based, for bias correction */
    const uint32_t *skip; /* as cnn_sgd.skip */
    void *act_copy;       /* as cnn_sgd.act_copy */
} cnn_adamw;

/* The non-finite guard of a training step, run on the device between the loss and the optimizer so that no
 * step waits for the host because of it (guard_step):
 *     bad  = the loss, or one of the n_stats BatchNorm running statistics the step's forward updated, is NaN/Inf
 *     skip = bad, or halt_on_bad and an earlier step was bad
 *     skip ? stats <- backup (the step's statistics updates are undone) : backup <- stats
 * and the optimizers, given &state->skip, leave weights and optimizer state alone: a skipped step leaves no
 * trace but the counters. The host reads the state whenever it reads the loss (state->loss is a copy of it):
 * every few steps or every step, it learns how many steps were bad and which was the first. */
#define CNN_GUARD_LOSS 1u  /* first_what: the loss was not finite       */
#define CNN_GUARD_STATS 2u /* first_what: a running statistic was not */
typedef struct cnn_guard_state { /* device memory; zeroed at the start of a run; 48 bytes */
    uint64_t steps;      /* guard_step calls so far                                    */
    uint64_t bad_steps;  /* of them with a bad loss or statistic                       */
    uint64_t first_bad;  /* the 1-based call number of the first bad one; 0 = none yet  */
    uint32_t skip;       /* the latest call's verdict: its step's update must not happen */
    uint32_t halted;     /* halt_on_bad and a bad step happened: every later step skips */
    uint32_t first_what; /* CNN_GUARD_* bits of the first bad step                      */
    float first_loss;    /* its loss                                                    */
    float loss;          /* the latest step's loss                                      */
    uint32_t pad;
} cnn_guard_state;

typedef struct cnn_guard {
    const float *loss;   /* (1) the step's mean loss              */
    float *stats;        /* (n_stats) BN running statistics       */
    float *backup;       /* (n_stats) their last finite values     */
    int64_t n_stats;
    bool halt_on_bad;
} cnn_guard;

/* ---- the backend table ---------------------------------------------------------------------------------- */

typedef struct cnn_backend cnn_backend;

/* The element type and reduction of a collective (comm_allreduce). */
typedef enum cnn_comm_op {
    CNN_COMM_SUM_F32 = 0, /* float32 sum                                          */
    CNN_COMM_SUM_F64,     /* float64 sum (evaluation counts)                         */
    CNN_COMM_MAX_U32,     /* uint32 maximum (flags every rank must agree on)          */
} cnn_comm_op;

struct cnn_backend {
    const char *name;        /* "cpu", "cuda" */
    char device_name[128];   /* "AMD EPYC (2 threads)", "NVIDIA H100 80GB HBM3" */
    char runtime[96];        /* versions: "driver 13.0, NVRTC 13.0, sm_90a"; "OpenMP, 2 threads" */
    int n_tuned;             /* layer shapes autotuned by this backend so far (GPU; cached ones not counted) */
    double tune_seconds;     /* time spent timing their candidates */
    cnn_dtype act_dtype;     /* storage type of activations and conv/linear weights */
    bool deterministic;      /* no atomics-order nondeterminism */
    bool keeps_masks;        /* bn_forward_train and pool2d_forward keep cnn_bn.relu_mask and cnn_pool2d.argmax: a
                              * training model allocates them */
    /* --deterministic training (core/shards.h), 0 otherwise: the batch is this many equal slices of images, every
     * sum over the batch is each slice's own sum (as a batch of that slice alone would make it) added in a pairwise
     * tree, and comm_allreduce's sums continue that tree over the ranks, so a run's sums do not depend on how many
     * ranks share its global batch. bn_forward_train and bn_backward follow it; shards.c wraps the other ops. */
    int batch_shards;
    struct cnn_shards *shards; /* shards.c's state while it wraps this backend's ops; NULL otherwise */
    void *impl;              /* backend-private state */

    void (*destroy)(cnn_backend *be);

    /* memory */
    cnn_status (*alloc)(cnn_backend *be, size_t bytes, const char *what, void **out);
    void (*free)(cnn_backend *be, void *ptr);
    /* upload: src may be reused when it returns; work queued after it sees the bytes (it need not wait for the work
     * before it). download: returns when the bytes are on the host, after all work queued before it. copy: device
     * to device, in order with the work around it. */
    cnn_status (*upload)(cnn_backend *be, void *dst, const void *src, size_t bytes);
    cnn_status (*download)(cnn_backend *be, void *dst, const void *src, size_t bytes);
    cnn_status (*copy)(cnn_backend *be, void *dst, const void *src, size_t bytes);
    cnn_status (*zero)(cnn_backend *be, void *dst, size_t bytes);
    cnn_status (*sync)(cnn_backend *be);

    /* float32 <-> act_dtype over count elements (a plain copy when act_dtype is F32) */
    cnn_status (*to_act)(cnn_backend *be, int64_t count, const float *src, void *dst);
    cnn_status (*from_act)(cnn_backend *be, int64_t count, const void *src, float *dst);

    /* convolution */
    cnn_status (*conv2d_fprop)(cnn_backend *be, const cnn_conv2d *cv, const cnn_epilogue *ep,
                               const void *x,  /* (N, C, H, W) */
                               const void *w,  /* (K, C, R, S) */
                               void *y);       /* (N, K, P, Q) */
    /* Optional (NULL where a backend has no fused kernel): y = maxpool(conv epilogue), pl's input being the
     * conv's output; the eval plan fuses a conv with the max-pool that alone consumes it when conv2d_pool_fusable
     * says the fused kernel runs that problem. conv2d_fprop_pool is correct for any such pair (unfused inside
     * where it must). */
    cnn_status (*conv2d_fprop_pool)(cnn_backend *be, const cnn_conv2d *cv, const cnn_epilogue *ep,
                                    const cnn_pool2d *pl, const void *x, const void *w,
                                    void *y); /* (N, K, pl->p, pl->q) */
    bool (*conv2d_pool_fusable)(cnn_backend *be, const cnn_conv2d *cv, const cnn_pool2d *pl, bool residual);
    /* Optional (NULL where a backend has none): two convolutions with the same N, K, P, Q summed,
     *     y = relu?(conv(x, w) + conv(x2, w2) + ep->shift)      (ep: shift and relu only; may be NULL)
     * a ResNet block's last conv and its downsample conv, with their BN scales folded into w and w2 by the eval
     * plan, which fuses such a pair when conv2d_pair_fusable says this backend runs it in one kernel.
     * conv2d_fprop_pair is correct for any such pair (unfused inside where it must). */
    cnn_status (*conv2d_fprop_pair)(cnn_backend *be, const cnn_conv2d *cv, const cnn_conv2d *cv2,
                                    const cnn_epilogue *ep, const void *x, const void *w, /* (N,H,W,C) (K,R,S,C) */
                                    const void *x2, const void *w2, /* (N,H2,W2,C2) (K,R2,S2,C2) */
                                    void *y);                       /* (N, K, P, Q) */
    bool (*conv2d_pair_fusable)(cnn_backend *be, const cnn_conv2d *cv, const cnn_conv2d *cv2);
    cnn_status (*conv2d_dgrad)(cnn_backend *be, const cnn_conv2d *cv,
                               const void *dy, /* (N, K, P, Q) */
                               const void *w,  /* (K, C, R, S) */
                               void *dx,       /* (N, C, H, W) */
                               bool accumulate);
    /* Optional (NULL where a backend has none): conv2d_dgrad, overwriting, of a conv whose input relu_y (N, C, H, W)
     * is a ReLU's output, with that ReLU's backward: dx = relu_y > 0 ? dgrad : 0; and where dx_sum (C) is set,
     * channel_sum of that dx into it (the bias gradient of the conv before the ReLU). The train plan's backward calls
     * it where the conv alone reads the ReLU's output (VGG), instead of conv2d_dgrad, relu_backward and
     * channel_sum. */
    cnn_status (*conv2d_dgrad_relu)(cnn_backend *be, const cnn_conv2d *cv, const void *dy, const void *w,
                                    const void *relu_y, void *dx, float *dx_sum);
    cnn_status (*conv2d_wgrad)(cnn_backend *be, const cnn_conv2d *cv,
                               const void *x,  /* (N, C, H, W) */
                               const void *dy, /* (N, K, P, Q) */
                               float *dw);     /* (K, C, R, S) float32 */

    /* sum over the M rows of an (M, C) view: bias gradients */
    cnn_status (*channel_sum)(cnn_backend *be, int64_t m, int c, const void *dy, float *out);
    /* optional: channel_sum of each of `slices` equal slices of the M rows (images outermost) into out's rows,
     * `stride` floats apart, each row bit for bit channel_sum over its slice alone, in one call (--deterministic's
     * slices: core/shards.c calls channel_sum slice by slice where this is NULL) */
    cnn_status (*channel_sum_rows)(cnn_backend *be, int slices, int64_t m, int c, const void *dy, float *out,
                                   int64_t stride);

    /* batch norm in training, with the residual add and ReLU that may follow it fused:
     *     y = relu?((x - mean) * invstd * gamma + beta + residual)      (residual NULL = none)
     * batch statistics over the M rows (biased variance normalises; the running variance takes the unbiased one,
     * momentum as PyTorch); save_mean, save_invstd (C) are what the backward reads. */
    cnn_status (*bn_forward_train)(cnn_backend *be, const cnn_bn *bn, const void *x, /* (M, C) */
                                   const float *gamma, const float *beta,
                                   float *running_mean, float *running_var,  /* updated in place */
                                   float *save_mean, float *save_invstd,     /* (C) for backward   */
                                   const void *residual, bool relu,          /* (M, C) or NULL     */
                                   void *y);                                 /* (M, C)             */
    /* its backward: dy is the gradient of y; with relu only where y > 0 (y: the forward's output) passes,
     * g = relu ? dy * (y > 0) : dy. dgamma = sum g*xhat, dbeta = sum g (either may be NULL),
     * dx (+)= gamma*invstd*(g - mean g - xhat*mean(g*xhat)) (NULL: not computed), dres (+)= g, the residual's
     * gradient (NULL: none) */
    cnn_status (*bn_backward)(cnn_backend *be, const cnn_bn *bn, const void *x, const void *y, const void *dy,
                              const float *gamma, const float *save_mean, const float *save_invstd, bool relu,
                              void *dx, bool accumulate, void *dres, bool dres_accumulate, float *dgamma,
                              float *dbeta);
    /* Optional (NULL where a backend has none): bn_backward with relu and no residual, of a BN -> ReLU whose output
     * only the max-pool pl reads, taking in that pool's backward: dy is the gradient of the pool's output, the ReLU
     * output's gradient is never stored. Needs bn->relu_mask and pl->argmax as the forward wrote them. The train
     * plan's backward calls it where bn_pool_fusable says the backend runs that pair (the ResNet stem on the GPU);
     * a problem it refuses is CNN_E_UNSUPPORTED. */
    cnn_status (*bn_backward_pool)(cnn_backend *be, const cnn_bn *bn, const cnn_pool2d *pl, const void *x,
                                   const void *dy, const float *gamma, const float *save_mean,
                                   const float *save_invstd, void *dx, bool accumulate, float *dgamma, float *dbeta);
    bool (*bn_pool_fusable)(cnn_backend *be, const cnn_bn *bn, const cnn_pool2d *pl);
    /* y = relu?(x*scale[c] + shift[c] + residual): eval-mode BN and the unfused epilogue */
    cnn_status (*scale_shift)(cnn_backend *be, int64_t m, int c, const void *x, const float *scale,
                              const float *shift, const void *residual, bool relu, void *y);

    /* pointwise */
    cnn_status (*relu_forward)(cnn_backend *be, int64_t count, const void *x, void *y);
    /* dx (+)= dy where y > 0; dx may be dy itself (every element read, then written, at the same index) */
    cnn_status (*relu_backward)(cnn_backend *be, int64_t count, const void *y, const void *dy, void *dx,
                                bool accumulate);
    cnn_status (*add_forward)(cnn_backend *be, int64_t count, const void *a, const void *b, void *y);
    /* dx (+)= dy */
    cnn_status (*pass_backward)(cnn_backend *be, int64_t count, const void *dy, void *dx, bool accumulate);
    /* keep with probability 1-p (scaled by 1/(1-p)); the mask is a pure function of (seed, index) */
    cnn_status (*dropout_forward)(cnn_backend *be, int64_t count, float p, uint64_t seed, const void *x,
                                  void *y);
    cnn_status (*dropout_backward)(cnn_backend *be, int64_t count, float p, uint64_t seed, const void *dy,
                                   void *dx, bool accumulate);
    /* NHWC (N, H, W, C) -> rows of C*H*W in NCHW order, PyTorch's flatten */
    cnn_status (*flatten_forward)(cnn_backend *be, cnn_shape s, const void *x, void *y);
    cnn_status (*flatten_backward)(cnn_backend *be, cnn_shape s, const void *dy, void *dx, bool accumulate);

    /* pooling */
    cnn_status (*pool2d_forward)(cnn_backend *be, const cnn_pool2d *pl, const void *x, void *y);
    cnn_status (*pool2d_backward)(cnn_backend *be, const cnn_pool2d *pl, const void *x, const void *y,
                                  const void *dy, void *dx, bool accumulate);

    /* linear: w (OUT, IN) in act_dtype, bias float32 */
    cnn_status (*linear_forward)(cnn_backend *be, const cnn_linear *ln, const void *x, const void *w,
                                 const float *bias, void *y);
    cnn_status (*linear_backward)(cnn_backend *be, const cnn_linear *ln, const void *x, const void *w,
                                  const void *dy, void *dx, bool accumulate, float *dw, float *dbias);

    /* loss: mean loss into *loss (one float32 on the device); dlogits (may be NULL) = d(mean loss)/dlogits.
     * logits and dlogits are act_dtype; labels int32 in [0, classes). */
    cnn_status (*xent_forward_backward)(cnn_backend *be, const cnn_xent *xe, const void *logits,
                                        const int32_t *labels, float *loss, void *dlogits);

    /* data: uint8 planes -> normalised NHWC act_dtype (N, H, W, out_c); samples (N, 4) int32 or NULL */
    cnn_status (*prep_images)(cnn_backend *be, const cnn_prep *pp, const uint8_t *src, const int32_t *samples,
                              void *dst);

    /* The images of jobs (n, device memory) resampled out of the decoded RGB images in src (device bytes) into dst
     * (N, 3, ch, cw) uint8 planes (cnn_resample_job). The CPU backend's is the oracle of the device kernel. */
    cnn_status (*resample_images)(cnn_backend *be, const cnn_resample_batch *rb, const cnn_resample_job *jobs,
                                  const uint8_t *src, uint8_t *dst);

    /* Optional (NULL: not available): batched JPEG decoding on the device (nvJPEG on CUDA, loaded at run time).
     * jpeg_create makes a decoder with its own stream for batches of up to max_batch images written into `slots`
     * output buffers; CNN_E_UNSUPPORTED (with the reason) when the library is missing or refuses the device.
     * jpeg_decode (one thread at a time, any thread) decodes the images of b whose data is set, resamples each by
     * its job into dst + i * 3 * ch * cw (device memory), uploads the planes of the others, and returns when dst
     * holds them: ok[i] = 1 for each image written, 0 for each JPEG the library refused (dst untouched there: the
     * caller decodes it on the CPU and passes it again as planes). Before writing into a slot's buffer it waits
     * for the work that jpeg_fence(slot) saw issued on the backend's own stream (the caller's thread, between
     * steps: work issued so far may still read that slot's buffer). */
    cnn_status (*jpeg_create)(cnn_backend *be, int max_batch, int slots, void **dec);
    cnn_status (*jpeg_decode)(cnn_backend *be, void *dec, int slot, const cnn_resample_batch *b,
                              const cnn_jpeg_image *im, uint8_t *dst, uint8_t *ok);
    cnn_status (*jpeg_fence)(cnn_backend *be, void *dec, int slot);
    void (*jpeg_free)(cnn_backend *be, void *dec);

    /* Optional (NULL: use malloc/free): page-locked host memory, so uploads from it run at full speed. */
    cnn_status (*host_alloc)(cnn_backend *be, size_t bytes, const char *what, void **out);
    void (*host_free)(cnn_backend *be, void *ptr);

    /* optimizers over flat float32 arrays of count elements; grads are scaled by grad_scale first */
    cnn_status (*sgd_update)(cnn_backend *be, const cnn_sgd *o, int64_t count, float *w, const float *g,
                             float *momentum_buf, float grad_scale);
    cnn_status (*adamw_update)(cnn_backend *be, const cnn_adamw *o, int64_t count, float *w, const float *g,
                               float *m, float *v, float grad_scale);

    /* the training step's non-finite guard (cnn_guard above); state is device memory */
    cnn_status (*guard_step)(cnn_backend *be, const cnn_guard *g, cnn_guard_state *state);

    /* number of non-finite values among count float32s, into *out (host) */
    cnn_status (*count_nonfinite)(cnn_backend *be, int64_t count, const float *x, int64_t *out);

    /* out[i] = the pairwise tree over j < shards of parts[j * stride + i], i < count (float32; shards a power of
     * two <= 8): ((p0 + p1) + (p2 + p3)) + ..., whose every aligned block of slices is a subtree (batch_shards) */
    cnn_status (*tree_sum)(cnn_backend *be, int shards, int64_t count, const float *parts, int64_t stride,
                           float *out);

    /* Timing of the work issued between begin and end (device events on a GPU, a synchronised wall clock on
     * the CPU), in milliseconds. */
    cnn_status (*time_begin)(cnn_backend *be);
    cnn_status (*time_end)(cnn_backend *be, double *ms);
    /* Marks for timing back-to-back work without synchronising in between: time_mark(i) records mark i
     * (0 <= i < CNN_TIME_MARKS) after the work issued so far; time_between(i, j) waits for mark j and gives the
     * milliseconds from mark i to mark j. Calls issued back to back with a mark after each are timed as a
     * stream of work (the device never waits for the host between them), as torch.utils.benchmark does. */
    cnn_status (*time_mark)(cnn_backend *be, int i);
    cnn_status (*time_between)(cnn_backend *be, int i, int j, double *ms);

    /* Graphs: record the ops issued between begin and end, replay them later. NULL where unsupported. */
    cnn_status (*graph_begin)(cnn_backend *be);
    cnn_status (*graph_end)(cnn_backend *be, void **graph);
    cnn_status (*graph_launch)(cnn_backend *be, void *graph);
    void (*graph_free)(cnn_backend *be, void *graph);

    /* A dry run: between begin and end, calls run on the host only. Kernels are not launched and collectives not
     * made, and the autotuner times nothing: the programs those kernels and every candidate of a tuning would
     * use are noted. Allocations and copies happen as usual. end compiles the noted programs side by side (one
     * batch on the compile workers, where a real run would compile each when first launched or tuned) and
     * leaves the state as before begin but for them. Run ahead of a pass's first real run (model.c), it turns
     * a cold start's chain of compilations into one parallel batch. Outside graph recording only. NULL where
     * the backend compiles nothing. */
    cnn_status (*dry_run_begin)(cnn_backend *be);
    cnn_status (*dry_run_end)(cnn_backend *be);

    /* Peak bytes allocated through alloc() since creation. */
    size_t (*peak_bytes)(cnn_backend *be);

    /* ---- collectives across the processes of a multi-GPU run (dist.h); NULL where the backend has none ----
     * The CUDA backend's are NCCL's (loaded at run time). A communicator is opaque; every rank makes the same
     * calls in the same order. comm_id: rank 0's unique id (CNN_DIST_ID_BYTES), handed to the others by the
     * rendezvous; comm_init: join (blocks until every rank has joined). */
    cnn_status (*comm_id)(cnn_backend *be, uint8_t *id);
    cnn_status (*comm_init)(cnn_backend *be, const uint8_t *id, int rank, int world, void **comm);
    /* In place over all ranks, count elements of x (device). side = false: on the compute stream, in its order;
     * side = true: on the communicator's own stream, after the compute stream's work so far, while the compute
     * stream goes on (comm_join makes the compute stream wait for everything issued so). Either may be recorded
     * into a graph. With batch_shards > 0 and a world of a power of two, float sums are the pairwise tree over the
     * ranks in rank order, which continues batch_shards' tree (over two ranks, their one addition). */
    cnn_status (*comm_allreduce)(cnn_backend *be, void *comm, void *x, int64_t count, cnn_comm_op op, bool side);
    /* Optional: x (count float32, device) summed in bfloat16: rounded to nearest into scratch (count bf16 elements
     * of device memory), summed over the ranks there, widened back into x; side as comm_allreduce. */
    cnn_status (*comm_allreduce_bf16)(cnn_backend *be, void *comm, float *x, void *scratch, int64_t count, bool side);
    cnn_status (*comm_join)(cnn_backend *be, void *comm);
    cnn_status (*comm_broadcast)(cnn_backend *be, void *comm, void *x, size_t bytes, int root);
    /* From any thread, without blocking: CNN_OK, or the communicator's asynchronous error (recorded). */
    cnn_status (*comm_check)(void *comm);
    /* From any thread: abort every operation in flight on the communicator (the watchdog's last act). */
    void (*comm_abort)(void *comm);
    void (*comm_destroy)(cnn_backend *be, void *comm);
};

/* Backend selection. device: "cpu", "cuda" or "auto" (cuda when usable, else cpu with a notice). */
/* Autotuning of GPU kernels: none = a heuristic picks each layer's kernel configuration; fast = a few
 * candidates per distinct layer are timed once and the winner cached on disk; full = every candidate. */
typedef enum cnn_tune { CNN_TUNE_DEFAULT = 0, CNN_TUNE_NONE, CNN_TUNE_FAST, CNN_TUNE_FULL } cnn_tune;

typedef struct cnn_backend_opts {
    const char *device;
    int threads;          /* CPU threads; 0 = OpenMP's default */
    cnn_dtype act_dtype;  /* F32 unless the backend supports others */
    bool allow_tf32;
    bool deterministic;
    int gpu_index;
    const char *cache_dir; /* CUDA kernel cache directory; NULL = $CNN_CACHE_DIR, else ~/.cache/cnn; "" = none */
    cnn_tune tune;         /* GPU kernel autotuning level (CNN_TUNE_DEFAULT = fast; none when deterministic) */
} cnn_backend_opts;

cnn_status cnn_backend_create(const cnn_backend_opts *opts, cnn_backend **out);
void cnn_backend_destroy(cnn_backend *be);

/* The CPU backend, directly (tests use it as the oracle). */
cnn_status cnn_cpu_backend_create(int threads, cnn_backend **out);
/* The CUDA backend: CNN_E_UNSUPPORTED when built without CUDA headers, CNN_E_DEVICE (with the reason) when
 * libcuda/libnvrtc cannot be loaded or no usable GPU is present. */
cnn_status cnn_cuda_backend_create(const cnn_backend_opts *opts, cnn_backend **out);
/* Whether this machine can run a multi-GPU job: *gpus = the GPUs the CUDA driver sees; CNN_E_UNSUPPORTED (with
 * the reason) without CUDA headers at build time, a driver, a GPU, or NCCL (libnccl.so.2, 2.10+). */
cnn_status cnn_cuda_dist_probe(int *gpus);

/* Philox-4x32-10 counter-based generator: 4 words from (key, counter). Identical on every backend;
 * all engine randomness (init, augmentation, dropout, shuffling) derives from it, so state is a counter. */
void cnn_philox(uint64_t key, uint64_t counter_hi, uint64_t counter_lo, uint32_t out[4]);
/* Uniform float in [0, 1) with 24 random bits from a 32-bit word. */
static inline float cnn_u01(uint32_t r) { return (float)(r >> 8) * (1.0f / 16777216.0f); }
/* Dropout keep decision for element i — shared by all backends so masks agree bitwise. */
static inline bool cnn_dropout_keep(uint64_t seed, int64_t i, float p) {
    uint32_t r[4];
    cnn_philox(seed, 0x64726f70ULL, (uint64_t)i >> 2, r);
    return cnn_u01(r[i & 3]) >= p;
}

#endif
