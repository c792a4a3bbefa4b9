/* cpu.h — internals of the CPU backend: the reference (oracle) entry points, the packed SGEMM, and the helpers
 * the op files share.
 *
 * Two tiers live here:
 *   - reference paths (`*_ref`): plain loops over the definition, accumulating in double, obviously correct;
 *     every fast path and every GPU kernel is checked against them;
 *   - the fast path the backend table uses: convolutions and linear layers are one packed, cache-blocked
 *     SGEMM (`cnn_cpu_gemm`) whose operands may be implicit im2col matrices gathered while packing, so no
 *     im2col buffer is ever materialised.
 *
 * Determinism: every output element is computed by one thread in a fixed order, and the GEMM's K blocking
 * depends only on the problem, so results are bitwise identical run to run and for any thread count.
 */
#ifndef CNN_CPU_H
#define CNN_CPU_H

#include "cnn/backend.h"

/* ---- the backend's private state ------------------------------------------------------------------------ */

typedef struct cnn_cpu {
    int threads;           /* OpenMP threads every parallel region uses */
    size_t live_bytes;     /* bytes allocated through alloc() and not yet freed */
    size_t peak;           /* high-water mark of live_bytes */
    double t_begin;        /* time_begin's clock reading, seconds */
    double *marks;         /* time_mark's clock readings (CNN_TIME_MARKS), seconds; NULL until the first */
} cnn_cpu;

static inline int cnn_cpu_threads(const cnn_backend *be) { return ((const cnn_cpu *)be->impl)->threads; }

/* t[0] = ((t0 + t1) + (t2 + t3)) + ...: the pairwise tree over n (a power of two <= 8) slices' values (backend.h,
 * tree_sum; core/shards.h) */
static inline float cnn_cpu_tree_f(float *t, int n) {
    for (int step = 1; step < n; step *= 2)
        for (int j = 0; j + step < n; j += 2 * step) t[j] += t[j + step];
    return t[0];
}
static inline double cnn_cpu_tree_d(double *t, int n) {
    for (int step = 1; step < n; step *= 2)
        for (int j = 0; j + step < n; j += 2 * step) t[j] += t[j + step];
    return t[0];
}

/* ---- the GEMM ------------------------------------------------------------------------------------------- */

/* An implicit im2col matrix over an NHWC source x (N, HS, WS, CS). Row m = (n, i, j) on a (gh, gw) grid;
 * column kk = (ti, tj, ch) over (th, tw, cs). Element (m, kk) is
 *     x[n, i*ah + ti*bh + oh, j*aw + tj*bw + ow, ch]     (0 outside the source)
 * Convolution fprop is ah = stride, bh = 1, oh = -pad; dgrad (per stride phase) is ah = 1, bh = -1. */
typedef struct cnn_cpu_im2col {
    const float *x;      /* (N, HS, WS, CS) */
    int hs, ws, cs;
    int gh, gw;
    int th, tw;
    int ah, bh, oh;
    int aw, bw, ow;
} cnn_cpu_im2col;

/* A GEMM operand: a dense strided matrix (element (i, j) at p[i*rs + j*cs]) or, when g is non-NULL, the im2col
 * matrix of g (rows = output pixels, columns = (tap, channel)); for B the rows are the reduction index. */
typedef struct cnn_cpu_mat {
    const float *p;
    int64_t rs, cs;
    const cnn_cpu_im2col *g;
} cnn_cpu_mat;

/* The GEMM output: row m = (n, i, j) on a (gh, gw) grid lives at p + n*sn + i*si + j*sj; columns are
 * contiguous. A plain row-major matrix with leading dimension ld is gh = gw = 1, sn = ld.
 * The epilogue is applied once per element after the full reduction:
 *     c = relu?( (accumulate ? c + acc : acc) * scale[j] + shift[j] + residual )
 * with scale/shift/residual optional (NULL); residual has c's layout (same offsets) and must not alias c
 * (c holds partial sums between K blocks). */
typedef struct cnn_cpu_out {
    float *p;
    int gh, gw;
    int64_t sn, si, sj;
    bool accumulate;
    const float *scale;     /* (N) or NULL */
    const float *shift;     /* (N) or NULL */
    const float *residual;  /* like p, or NULL */
    bool relu;
} cnn_cpu_out;

/* C (M, N) (+)= A (M, K) · B (K, N), then the epilogue. Parallel over output tiles with `threads` threads.
 * Returns CNN_E_OOM when its packing buffers cannot be allocated. */
cnn_status cnn_cpu_gemm(int threads, int64_t m, int64_t n, int64_t k, const cnn_cpu_mat *a, const cnn_cpu_mat *b,
                        const cnn_cpu_out *c);

/* Plain dense SGEMM through the fast path: C (M, N) (+)= A · B with A(i, l) = a[i*rsa + l*csa],
 * B(l, j) = b[l*rsb + j*csb], C row-major with leading dimension ldc. */
cnn_status cnn_cpu_sgemm(int threads, int64_t m, int64_t n, int64_t k, const float *a, int64_t rsa, int64_t csa,
                         const float *b, int64_t rsb, int64_t csb, float *c, int64_t ldc, bool accumulate);
/* The reference: the same contract as cnn_cpu_sgemm, a triple loop accumulating in double. */
void cnn_cpu_sgemm_ref(int64_t m, int64_t n, int64_t k, const float *a, int64_t rsa, int64_t csa, const float *b,
                       int64_t rsb, int64_t csb, float *c, int64_t ldc, bool accumulate);

/* Micro-kernel instruction sets. The best one is chosen at first use (__builtin_cpu_supports); tests force
 * each one available to check them all against the reference. */
typedef enum cnn_cpu_isa {
    CNN_CPU_ISA_AUTO = 0,
    CNN_CPU_ISA_C,       /* portable C, any machine                 */
    CNN_CPU_ISA_AVX2,    /* AVX2 + FMA, 6x16 tiles                   */
    CNN_CPU_ISA_AVX512,  /* AVX-512F, 12x32 tiles                    */
} cnn_cpu_isa;
/* Select the micro-kernel (AUTO = best supported); returns false (and changes nothing) if unsupported here. */
bool cnn_cpu_gemm_set_isa(cnn_cpu_isa isa);
cnn_cpu_isa cnn_cpu_gemm_isa(void);
const char *cnn_cpu_isa_name(cnn_cpu_isa isa);

/* GEMM internals shared by gemm.c and gemm_kernels.c. A micro-kernel computes an (mr x NR) tile of
 * A-panel times B-panel (kc x NR, row-major) and merges it into C through the tile descriptor; one kernel per
 * mr in 1..MR so edge rows cost nothing. The A panel is row-major (table index 0: a[i] points at row i's kc
 * contiguous floats, in the operand itself or in a packing buffer) or column-major (table index 1: a[0] is the
 * panel, column stride MR, for operands stored transposed). Every element is the same chain of fused
 * multiply-adds over k in order, whichever tile or thread computes it and wherever its row was read from. */
#define CNN_CPU_KC 256  /* reduction block: an A panel of 12 x 256 floats stays in L1 */

typedef struct cnn_cpu_tile {
    float *const *crow;             /* (mr) row pointers at the tile's first column */
    const float *const *rrow;       /* (mr) residual rows at the tile's first column, or NULL */
    const float *scale, *shift;     /* per column at the tile's first column, or NULL */
    int nr;                         /* valid columns, <= NR */
    bool beta;                      /* add the product into C (else overwrite) */
    bool last;                      /* the final K block: apply scale/shift/residual/relu */
    bool relu;
} cnn_cpu_tile;

typedef void (*cnn_cpu_ukr)(int64_t kc, const float *const *a, const float *b, const cnn_cpu_tile *t);

/* Merge an (mr x nr) accumulator tile (leading dimension ld) into C: the scalar path every kernel uses for
 * edge tiles, in exactly the vector path's order of operations. */
void cnn_cpu_tile_store(const float *acc, int ld, int mr, const cnn_cpu_tile *t);

/* gemm_kernels.c: the SIMD kernels, indexed by [A layout][mr] (entry 0 unused); NULL when not compiled. */
#define CNN_CPU_AVX2_MR 6
#define CNN_CPU_AVX2_NR 16
#define CNN_CPU_AVX512_MR 12
#define CNN_CPU_AVX512_NR 32
extern const cnn_cpu_ukr cnn_cpu_ukr_avx2[2][CNN_CPU_AVX2_MR + 1];
extern const cnn_cpu_ukr cnn_cpu_ukr_avx512[2][CNN_CPU_AVX512_MR + 1];

/* ---- convolution ---------------------------------------------------------------------------------------- */

/* Fast paths (the backend's entry points use these): implicit-im2col GEMM; dgrad by stride phases. */
cnn_status cnn_cpu_conv2d_fprop(int threads, const cnn_conv2d *cv, const cnn_epilogue *ep,
                                const float *x,  /* (N, H, W, C) */
                                const float *w,  /* (K, R, S, C) */
                                float *y);       /* (N, P, Q, K) */
/* y = relu?(conv(x, w) + conv(x2, w2) + ep->shift): backend.h's conv2d_fprop_pair */
cnn_status cnn_cpu_conv2d_fprop_pair(int threads, const cnn_conv2d *cv, const cnn_conv2d *cv2, const cnn_epilogue *ep,
                                     const float *x, const float *w, const float *x2, const float *w2, float *y);
cnn_status cnn_cpu_conv2d_dgrad(int threads, const cnn_conv2d *cv,
                                const float *dy, /* (N, P, Q, K) */
                                const float *w,  /* (K, R, S, C) */
                                float *dx,       /* (N, H, W, C) */
                                bool accumulate);
cnn_status cnn_cpu_conv2d_wgrad(int threads, const cnn_conv2d *cv,
                                const float *x,  /* (N, H, W, C) */
                                const float *dy, /* (N, P, Q, K) */
                                float *dw);      /* (K, R, S, C) */

/* References: direct loops over the definitions, double accumulation, parallel only over outputs. */
void cnn_cpu_conv2d_fprop_ref(int threads, const cnn_conv2d *cv, const cnn_epilogue *ep,
                              const float *x,    /* (N, H, W, C) */
                              const float *w,    /* (K, R, S, C) */
                              float *y);         /* (N, P, Q, K) */
void cnn_cpu_conv2d_dgrad_ref(int threads, const cnn_conv2d *cv,
                              const float *dy,   /* (N, P, Q, K) */
                              const float *w,    /* (K, R, S, C) */
                              float *dx,         /* (N, H, W, C) */
                              bool accumulate);
void cnn_cpu_conv2d_wgrad_ref(int threads, const cnn_conv2d *cv,
                              const float *x,    /* (N, H, W, C) */
                              const float *dy,   /* (N, P, Q, K) */
                              float *dw);        /* (K, R, S, C) */

/* out[c] = sum over m of v[m, c], in double, in a fixed order independent of the thread count. */
cnn_status cnn_cpu_channel_sum(int threads, int64_t m, int c,
                         const float *v,     /* (M, C) */
                         float *out);        /* (C) */

/* ---- the op table entries, one group per file ----------------------------------------------------------- */

/* conv2d.c */
cnn_status cnn_cpu_op_conv2d_fprop(cnn_backend *be, const cnn_conv2d *cv, const cnn_epilogue *ep, const void *x,
                                   const void *w, void *y);
cnn_status cnn_cpu_op_conv2d_fprop_pair(cnn_backend *be, const cnn_conv2d *cv, const cnn_conv2d *cv2,
                                        const cnn_epilogue *ep, const void *x, const void *w, const void *x2,
                                        const void *w2, void *y);
bool cnn_cpu_op_conv2d_pair_fusable(cnn_backend *be, const cnn_conv2d *cv, const cnn_conv2d *cv2);
cnn_status cnn_cpu_op_conv2d_dgrad_relu(cnn_backend *be, const cnn_conv2d *cv, const void *dy, const void *w,
                                        const void *relu_y, void *dx, float *dx_sum);
cnn_status cnn_cpu_op_conv2d_dgrad(cnn_backend *be, const cnn_conv2d *cv, const void *dy, const void *w, void *dx,
                                   bool accumulate);
cnn_status cnn_cpu_op_conv2d_wgrad(cnn_backend *be, const cnn_conv2d *cv, const void *x, const void *dy, float *dw);
cnn_status cnn_cpu_op_channel_sum(cnn_backend *be, int64_t m, int c, const void *dy, float *out);
/* batchnorm.c */
cnn_status cnn_cpu_op_bn_forward_train(cnn_backend *be, const cnn_bn *bn, const void *x, const float *gamma,
                                       const float *beta, float *running_mean, float *running_var, float *save_mean,
                                       float *save_invstd, const void *residual, bool relu, void *y);
cnn_status cnn_cpu_op_bn_backward(cnn_backend *be, const cnn_bn *bn, const void *x, const void *y, const void *dy,
                                  const float *gamma, const float *save_mean, const float *save_invstd, bool relu,
                                  void *dx, bool accumulate, void *dres, bool dres_accumulate, float *dgamma,
                                  float *dbeta);
cnn_status cnn_cpu_op_scale_shift(cnn_backend *be, int64_t m, int c, const void *x, const float *scale,
                                  const float *shift, const void *residual, bool relu, void *y);
/* pointwise.c */
cnn_status cnn_cpu_op_relu_forward(cnn_backend *be, int64_t count, const void *x, void *y);
cnn_status cnn_cpu_op_relu_backward(cnn_backend *be, int64_t count, const void *y, const void *dy, void *dx,
                                    bool accumulate);
cnn_status cnn_cpu_op_add_forward(cnn_backend *be, int64_t count, const void *a, const void *b, void *y);
cnn_status cnn_cpu_op_pass_backward(cnn_backend *be, int64_t count, const void *dy, void *dx, bool accumulate);
cnn_status cnn_cpu_op_dropout_forward(cnn_backend *be, int64_t count, float p, uint64_t seed, const void *x, void *y);
cnn_status cnn_cpu_op_dropout_backward(cnn_backend *be, int64_t count, float p, uint64_t seed, const void *dy,
                                       void *dx, bool accumulate);
cnn_status cnn_cpu_op_flatten_forward(cnn_backend *be, cnn_shape s, const void *x, void *y);
cnn_status cnn_cpu_op_flatten_backward(cnn_backend *be, cnn_shape s, const void *dy, void *dx, bool accumulate);
cnn_status cnn_cpu_op_count_nonfinite(cnn_backend *be, int64_t count, const float *x, int64_t *out);
cnn_status cnn_cpu_op_tree_sum(cnn_backend *be, int shards, int64_t count, const float *parts, int64_t stride,
                               float *out);
cnn_status cnn_cpu_op_guard_step(cnn_backend *be, const cnn_guard *g, cnn_guard_state *state);
/* pool.c */
cnn_status cnn_cpu_op_pool2d_forward(cnn_backend *be, const cnn_pool2d *pl, const void *x, void *y);
cnn_status cnn_cpu_op_pool2d_backward(cnn_backend *be, const cnn_pool2d *pl, const void *x, const void *y,
                                      const void *dy, void *dx, bool accumulate);
/* linear.c */
cnn_status cnn_cpu_op_linear_forward(cnn_backend *be, const cnn_linear *ln, const void *x, const void *w,
                                     const float *bias, void *y);
cnn_status cnn_cpu_op_linear_backward(cnn_backend *be, const cnn_linear *ln, const void *x, const void *w,
                                      const void *dy, void *dx, bool accumulate, float *dw, float *dbias);
/* loss.c */
cnn_status cnn_cpu_op_xent_forward_backward(cnn_backend *be, const cnn_xent *xe, const void *logits,
                                            const int32_t *labels, float *loss, void *dlogits);
/* prep.c */
cnn_status cnn_cpu_op_prep_images(cnn_backend *be, const cnn_prep *pp, const uint8_t *src, const int32_t *samples,
                                  void *dst);
cnn_status cnn_cpu_op_resample_images(cnn_backend *be, const cnn_resample_batch *rb, const cnn_resample_job *jobs,
                                      const uint8_t *src, uint8_t *dst);
/* optim.c */
cnn_status cnn_cpu_op_sgd_update(cnn_backend *be, const cnn_sgd *o, int64_t count, float *w, const float *g,
                                 float *momentum_buf, float grad_scale);
cnn_status cnn_cpu_op_adamw_update(cnn_backend *be, const cnn_adamw *o, int64_t count, float *w, const float *g,
                                   float *m, float *v, float grad_scale);

/* Fixed-size row chunks for reductions over M: partial sums per chunk, then the chunks in order, so the
 * result does not depend on how many threads ran. */
#define CNN_CPU_REDUCE_CHUNK 256

#endif
