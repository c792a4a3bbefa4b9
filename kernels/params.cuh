/* params.cuh -- the argument struct of every kernel, shared by the kernels (NVRTC, C++) and the launchers in
 * src/cuda (C11), so host and device can never disagree on an argument list: each kernel takes exactly one
 * of these structs by value and each launcher fills the same struct. Plain C only: int, long long, float and
 * pointers (8 bytes on both sides), no bool, no stdint. Pointers to activations hold act_t elements (see
 * common.cuh); `float *` ones are always float32.
 */
#ifndef CNN_KERNELS_PARAMS_CUH
#define CNN_KERNELS_PARAMS_CUH

/* Implicit-GEMM convolution (conv2d.cu). GEMM view C[gm][gn] = sum over gk of A[gm][gk] B[gk][gn]:
 *     fprop  gm = N*P*Q  gn = K  gk = R*S*C   A = im2col(x)        B = w^T          C = y
 *     dgrad  gm = N*H*W  gn = C  gk = R*S*K   A = col2im-gather(dy) B = w (rotated)  C = dx
 *     wgrad  gm = K      gn = R*S*C  gk = N*P*Q  A = dy^T          B = im2col(x)    C = dw (float32)
 */
typedef struct conv_args {
    int n, c, h, w;          /* input  (N, C, H, W) */
    int k, r, s;             /* filter (K, C, R, S) */
    int p, q;                /* output (N, K, P, Q) */
    int stride_h, stride_w, pad_h, pad_w;
    int gm, gn, gk;          /* the GEMM view above */
    int ktiles_per_split;    /* wgrad: BK-wide reduction tiles per blockIdx.z; others: all of them */
    int splits;              /* wgrad: number of reduction splits (gridDim.z) */
    int relu;                /* fprop epilogue */
    int accumulate;          /* dgrad: dx += result */
    int p2, q2;              /* conv2d_first.cu with a fused max-pool: the pool's output (N, K, P2, Q2) */
    int x_rows;              /* conv2d_wgrad_wgmma.cu: x's map is tiled over (N*H*W, C) rows (a 1x1 stride-1 unpadded
                              * conv, whose im2col is x itself), not im2col */
    int pad0;
    const void *x;           /* (N, H, W, C) act */
    const void *wt;          /* (K, R, S, C) act */
    const void *dy;          /* (N, P, Q, K) act */
    void *out;               /* fprop y (N,P,Q,K) act (with a fused pool (N,P2,Q2,K)); dgrad dx (N,H,W,C) act; wgrad dw (K,R,S,C) float */
    float *ws;               /* wgrad with splits > 1: (splits, K, R*S*C) float partial sums */
    const float *scale;      /* fprop epilogue (K) or NULL */
    const float *shift;      /* fprop epilogue (K) or NULL */
    const void *residual;    /* fprop epilogue (N,P,Q,K) act or NULL */
    /* fprop pair (conv2d_warpspec.cu's TMA rows only): a second convolution summed into the same accumulators, its
     * reduction slices after the first's: x2 (N, H2, W2, C2) with filter wt2 (K, R2, S2, C2), the same N, P, Q
     * and K; gk covers both reductions. pair_ktiles = the first convolution's BK slices, 0 without a pair */
    int pair_ktiles;
    int c2, h2, w2, r2, s2;
    int stride2_h, stride2_w, pad2_h, pad2_w;
    const void *x2;          /* (N, H2, W2, C2) act */
    const void *wt2;         /* (K, R2, S2, C2) act */
    /* a phase program (OUT_PHASE=1, conv2d_epilogue.cuh's out_row) writing one phase of a strided dgrad in place
     * (src/cuda/conv2d_dgrad.c): output row m = (n, i, j) of this convolution (N, P, Q) is pixel
     * (n, ph_sh * (i - ph_off_h) + ph_a, ph_sw * (j - ph_off_w) + ph_b) of dx (N, ph_h, ph_w, gn), and is not stored
     * where i - ph_off_h or j - ph_off_w falls outside the phase's ph_rows x ph_cols; the residual is read at the
     * same place. (ph_q_mul, ph_q_shr) and (ph_p_mul, ph_p_shr) divide by Q and P without a division instruction
     * (common.cuh's div_by; the host's cuda_fast_divisor). Last in the struct: the other programs' arguments keep
     * their offsets. */
    int ph_sh, ph_sw, ph_a, ph_b, ph_off_h, ph_off_w, ph_rows, ph_cols, ph_h, ph_w;
    int ph_q_mul, ph_q_shr, ph_p_mul, ph_p_shr;
    /* a STATS program (conv2d_warpspec.cu, STATS=1): per-channel sums of y as stored, for the BatchNorm that reads y
     * (src/core/model.c, cnn_conv_stats): stats[(s * stats_chunks + j) * gn + n] = the sum over chunk j's rows of
     * y[m][n] (s = 0) or y[m][n]^2 (s = 1), a chunk being one consumer's CBM rows of one tile (row m0 / CBM). An
     * FT_GATE program writes s = 0 alone (the sums of the gated dx), and none where stats is null. */
    float *stats;
    int stats_chunks;
    /* a dgrad reading the forward's filter (K', R', S', C') as it is (conv2d_warpspec.cu's FILT_T, src/cuda/
     * conv2d_dgrad.c): this convolution's tap (tr, ts) is the filter's tap ft_base + tr * ft_dr + ts * ft_ds (its
     * r' * S' + s'), this convolution's input channels its K', its output channels its C' */
    int ft_base, ft_dr, ft_ds;
    /* wgrad on wgmma over a batch of slices (cnn_conv2d.choose_n; conv2d_wgrad_wgmma.cu): wg_groups > 1 slices of
     * wg_group_slices reduction slices each, splits / wg_groups splits apiece; slice g's sum is written (or reduced)
     * to out + g * wg_out_stride floats. 0 or 1: one sum, as without. The few-channel wgrad
     * (conv2d_wgrad_few.cu) takes wg_groups slices of gk pixels apiece, splits CTAs each, its sums as these */
    int wg_groups, wg_group_slices;
    long long wg_out_stride;
} conv_args;

/* The TMA rows of conv2d_warpspec.cu (TMA=1) take the tensor maps of their operands beside the problem: CUtensorMap,
 * 128 opaque bytes aligned to 64, encoded on the host by the driver (cuTensorMapEncodeIm2col for x,
 * cuTensorMapEncodeTiled for the filter as a K x R*S*C matrix; src/cuda/conv2d.c) and read by the copy engine
 * from the kernel's parameter space (__grid_constant__). */
#ifdef __cplusplus
#define CNN_ALIGN64 alignas(64)
#else
#define CNN_ALIGN64 _Alignas(64)
#endif
typedef struct conv_tma_map {
    CNN_ALIGN64 unsigned long long v[16];
} conv_tma_map;
typedef struct conv_tma_args {
    conv_tma_map a_map;      /* x (N, H, W, C) in im2col mode: BM pixels x 64 channels per copy, 128-byte swizzle */
    conv_tma_map b_map;      /* wt (K, R*S*C) tiled: BN rows x 64 elements per copy, 128-byte swizzle (FILT_T: the
                              * forward's filter (C', R'*S', K') innermost first, boxes of 64 x 1 x 64) */
    conv_tma_map a2_map;     /* a pair's second convolution (a.pair_ktiles > 0): x2 and wt2 likewise */
    conv_tma_map b2_map;
    conv_tma_map y_map;      /* the output (N*P*Q, K) tiled, for the rows storing through TMA (OST=1): 16 channels x
                              * BM/CONV_OST_PIECES pixels per store, no swizzle */
    conv_args a;
} conv_tma_args;
/* The grouped phases of a strided dgrad (conv2d_warpspec.cu with GROUPED=1; src/cuda/conv2d_dgrad.c): up to
 * CONV_GROUP_MAX phase convolutions in one launch, phase p's tiles numbered tile_end[p - 1] .. tile_end[p] - 1 (0 ..
 * for p = 0) of the launch's list; each phase its own maps and problem (a stride-1 convolution over dy with
 * OUT_PHASE's ph_* mapping into dx). The maps lead: they need 64-byte alignment in the parameter space. */
#define CONV_GROUP_MAX 4
typedef struct conv_group_args {
    conv_tma_map a_map[CONV_GROUP_MAX]; /* dy in im2col mode for phase p's taps */
    conv_tma_map b_map[CONV_GROUP_MAX]; /* phase p's filter (C, RT*ST*K) tiled */
    conv_args a[CONV_GROUP_MAX];
    int groups;                         /* phases in the launch, 1 .. CONV_GROUP_MAX */
    int tile_end[CONV_GROUP_MAX];
} conv_group_args;

/* the pieces an OST row stores each consumer warp's part of a tile in (conv2d_epilogue.cuh's ost_store) */
#define CONV_OST_PIECES 8

/* dgrad by phases (src/cuda/conv2d_dgrad.c), phase (a, b) = index a * stride_w + b, in one of two ways:
 *   - conv2d_dgrad_interleave: dx (N, H, W, C) (+)= the phases' blocks, each written by its convolution;
 *   - in place: each phase's convolution writes its pixels of dx itself; conv2d_dgrad_zero writes zeros at the pixels
 *     of the phases no filter tap reaches (bit a * stride_w + b of zero_mask). */
#define DGRAD_MAX_PHASES 16
typedef struct dgrad_phase_args {
    int n, h, w, c;                 /* dx */
    int stride_h, stride_w;
    int accumulate;                 /* interleave: dx += the phases */
    int zero_mask;                  /* zero: the phases to zero */
    void *dx;                       /* (N, H, W, C) act */
    const void *block[DGRAD_MAX_PHASES]; /* interleave: (N, PP, PQ, C) act, or NULL: no tap reaches the phase (zeros) */
    int pp[DGRAD_MAX_PHASES], pq[DGRAD_MAX_PHASES];       /* the blocks' rows and columns */
    int off_h[DGRAD_MAX_PHASES], off_w[DGRAD_MAX_PHASES]; /* dx row h / stride_h is block row h / stride_h + off_h */
} dgrad_phase_args;
/* conv2d_dgrad_filter: w (K, R, S, C) act -> each phase's filter out[a * stride_w + b] (C, RT, ST, K) act, or NULL */
typedef struct dgrad_filter_args {
    int k, r, s, c;
    int stride_h, stride_w, pad_h, pad_w;
    const void *w;
    void *out[DGRAD_MAX_PHASES];
} dgrad_filter_args;

/* Elementwise and layout ops (pointwise.cu). */
typedef struct pw_args {
    long long count;         /* elements */
    const void *a;           /* first input  (x, y for relu backward, src of conversions) */
    const void *b;           /* second input (b of add, dy of backwards) */
    void *out;               /* y or dx */
    int accumulate;          /* dx += result */
    float p;                 /* dropout probability */
    float scale;             /* dropout 1/(1-p) */
    int pad0;
    unsigned long long seed; /* dropout */
    int n, c, hw, pad1;      /* flatten: (N, H*W, C) <-> (N, C*H*W); tree_sum: n = the slices */
    long long stride;        /* tree_sum: floats between the slices' rows of a */
} pw_args;

/* Per-channel reductions over an (M, C) view, BatchNorm and scale/shift (batchnorm.cu). Reductions are
 * two-level and fixed-order: chan_partial writes one partial sum per (row chunk, channel), a finalize kernel
 * adds the chunks in order. */
typedef struct red_args {
    long long m;             /* rows */
    int c;                   /* channels */
    int chunks;              /* row chunks of the partial pass (gridDim.y) */
    long long rows_per_chunk;
    int mode;                /* chan_partial: 0 sum x, 1 sum (x-mean)^2, 2 sum g and sum g*xhat; bn_partial_vec: 0 sum x and
                              * sum x^2, 2 as chan_partial (g: dy where the ReLU passed, y > 0, or everywhere) */
    int accumulate;          /* bn backward: dx += result */
    int relu;                /* scale_shift, bn forward (y = relu(...)) and backward (g = dy * (y > 0), or the mask) */
    int dres_accumulate;     /* bn backward: dres += g */
    int sums;                /* bn_chunk_totals, bn_shard_tree: how many of partial's arrays (1 or 2); bn_fold_stats: of
                              * fpartial's */
    int shards;              /* bn_shard_tree: the slices in partial, [sums][shards][slice_chunks][C] */
    int slice_chunks;        /* chunks of a slice (--deterministic's, core/shards.h); 0: the rows are not sliced */
    long long slice_rows;    /* rows of a slice: its chunks start at its own first row */
    float eps, momentum;
    int pad0;
    const void *x;           /* (M, C) act */
    const void *dy;          /* (M, C) act */
    const void *residual;    /* scale_shift and bn forward (M, C) act or NULL */
    const void *y;           /* bn backward with relu: the forward's output (M, C) act */
    void *out;               /* y / dx (M, C) act */
    void *dres;              /* bn backward: the residual's gradient (M, C) act or NULL */
    double *partial;         /* (2, chunks, C) workspace */
    double *coef;            /* (3, C) workspace of bn backward: gamma*invstd, mean dy, mean dy*xhat */
    float *fout;             /* channel_sum result (C); by slices, a row per slice (chan_sum_finalize's blockIdx.y) */
    long long fout_stride;   /* channel_sum by slices: floats between fout's rows */
    const float *gamma, *beta;
    const float *scale, *shift;      /* scale_shift (C) or NULL */
    float *mean, *invstd;            /* save_mean / save_invstd (C) */
    float *running_mean, *running_var;
    float *dgamma, *dbeta;           /* (C) or NULL */
    double *totals;                  /* bn_chunk_totals: (sums, C) workspace, summed over a sync group's ranks */
    unsigned char *mask;             /* bn with relu: the ReLU's pass bits, element e at bit e % 8 of byte e / 8 (the
                                      * forward writes them, the backward reads them instead of y), or NULL */
    unsigned *barrier;               /* the fused kernels' grid barrier word (common.cuh, grid_sync) */
    const float *fpartial;           /* bn_fold_stats: a conv's sums of x and x^2 per row chunk, (2, fchunks, C)
                                      * float (conv_args.stats), added into partial */
    long long fchunks;
    /* bn backward with the 3x3/2 pad-1 max-pool that alone reads its ReLU's output (bn_bwd_pool_*): dy is the pool's
     * (N, P, Q, C) output gradient and argmax its window positions (pool.cu); x's M rows are N x H x W pixels, taken
     * in quads = N * ceil(H/2) * ceil(W/2) blocks of 2x2 (rows_per_chunk then counts quads) */
    const unsigned char *argmax;
    int pool_h, pool_w, pool_p, pool_q;
    long long quads;
} red_args;
#define BN_POOL_APPLY_C 512 /* bn_bwd_pool_apply_vec's channels at most: its coefficients in shared memory */

/* Pooling (pool.cu). kind: 0 max, 1 avg (count_include_pad), 2 adaptive avg: the values of cnn_pool_kind. */
typedef struct pool_args {
    int kind;
    int n, c, h, w;
    int r, s, stride_h, stride_w, pad_h, pad_w;
    int p, q;
    int accumulate;
    int relu;                /* max backward: a window's gradient passes only where y > 0 (cnn_pool2d.relu) */
    int pad0;
    const void *x;           /* (N, H, W, C) act */
    const void *y;           /* backward: the forward's output (N, P, Q, C) act, or NULL */
    unsigned char *argmax;   /* max: (N, P, Q, C) window positions of the maxima (pool.cu), or NULL */
    const void *dy;          /* (N, P, Q, C) act */
    void *out;               /* forward y (N, P, Q, C); backward dx (N, H, W, C) */
} pool_args;

/* Softmax cross-entropy (loss.cu). */
typedef struct xent_args {
    int n, classes;
    float smoothing;
    float dscale;            /* dlogits multiplier: grad_scale / n */
    const void *logits;      /* (N, CLASSES) act */
    const int *labels;       /* (N) int32 */
    float *row_loss;         /* (N) float workspace */
    float *loss;             /* (1) float */
    void *dlogits;           /* (N, CLASSES) act or NULL */
} xent_args;

/* Image preparation (prep.cu): crop of the zero-padded image, optional horizontal flip, normalise. */
typedef struct prep_args {
    int n, c, h, w, pad, src_n, out_c, pad0;
    float mean[4], std[4];        /* per output channel */
    const unsigned char *src;     /* (src_n, C, H, W) uint8 planes */
    const int *samples;           /* (N, 4): image in src, crop offsets (y, x) in [0, 2*pad], flip 0/1; or NULL */
    void *dst;                    /* (N, H, W, out_c) act */
} prep_args;

/* Resampling of decoded RGB images into uint8 planes (prep.cu's resample_images). resample_job is
 * cnn_resample_job of include/cnn/backend.h, field for field (the host asserts the size). */
typedef struct resample_job {
    long long src;                /* byte offset of the image's first row */
    int h, w, pitch;
    int y0, x0, rh, rw;           /* region of the image */
    int out_h, out_w;             /* size the region is resized to */
    int wy, wx;                   /* kept window's origin */
    int flip;
} resample_job;

typedef struct resample_args {
    int n, ch, cw, pad0;
    const resample_job *jobs;     /* (N) */
    const unsigned char *src;     /* decoded (H, W, 3) images at jobs[i].src */
    unsigned char *dst;           /* (N, 3, CH, CW) uint8 planes */
} resample_args;

/* Optimizers and checks over flat float32 arrays (optim.cu). */
typedef struct optim_args {
    long long count;
    float *w;
    const float *g;
    float *buf;              /* sgd momentum buffer (or NULL when momentum == 0) / adamw m */
    float *v;                /* adamw v */
    float grad_scale;
    float lr, momentum, dampening, weight_decay;
    int nesterov, first_step;
    float beta1, beta2, eps;
    float step_size;         /* adamw: lr / (1 - beta1^t) */
    float bc2_sqrt;          /* adamw: sqrt(1 - beta2^t) */
    int pad0;
    const float *x;          /* count_nonfinite input */
    unsigned long long *counter;  /* count_nonfinite result (integer atomics: order-independent) */
    const unsigned int *skip;     /* sgd/adamw: the guard's verdict word (nonzero: no update) or NULL */
    void *wact;                   /* sgd/adamw: the act_t copy of w to write as well (count elements) or NULL */
    int vec;                      /* sgd/adamw: every array 16-byte aligned (8 elements per thread and step) */
    int pad1;
} optim_args;

/* The training step's non-finite guard (optim.cu guard_step); the host's cnn_guard_state (backend.h) has this
 * layout (checked in optim.c). */
typedef struct guard_state {
    unsigned long long steps, bad_steps, first_bad;
    unsigned int skip, halted, first_what;
    float first_loss, loss;
    unsigned int pad;
} guard_state;

typedef struct guard_args {
    const float *loss;       /* (1) */
    float *stats, *backup;   /* (n_stats) */
    long long n_stats;
    int halt_on_bad, pad0;
    guard_state *state;
} guard_args;

#endif
