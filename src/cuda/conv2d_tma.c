/* conv2d_tma.c -- the tensor maps of the TMA rows (kernels/conv2d_warpspec.cu with TMA=1): whether a problem fits them,
 * and their encoding per launch (cuTensorMapEncodeIm2col / cuTensorMapEncodeTiled, the driver's; the maps travel
 * as __grid_constant__ parameters beside the problem, conv_tma_args of kernels/params.cuh).
 */
#include "cuda/conv2d.h"

#include <stdio.h>
#include <string.h>

/* whether a TMA-store row's y map describes the output: (N*P*Q, K) rows 16-byte aligned (K % 8 == 0, y aligned), at
 * most 2^32 of them (cuTensorMapEncodeTiled) */
bool conv_ost_fits(int64_t gm, int64_t gn, const void *y) {
    return gn % 8 == 0 && ((uintptr_t)y & 15) == 0 && gm <= ((int64_t)1 << 32);
}
/* whether the TMA rows' tensor maps describe a forward problem: x (N, H, W, C) in im2col mode, 64 channels of one
 * filter tap per slice (C % 64 == 0), the bounding box's corners and the tap offsets within what a 4-D im2col map
 * encodes (corners in [-128, 127], offsets in [0, 255]), traversal strides of at most 8, the filter's rows whole
 * 16-byte multiples (cuTensorMapEncodeIm2col / cuTensorMapEncodeTiled) */
static void tma_corners(const cnn_conv2d *cv, int lo[2], int hi[2]) {
    lo[0] = -cv->pad_w, lo[1] = -cv->pad_h; /* the first output pixel's filter base */
    hi[0] = (cv->q - 1) * cv->stride_w - cv->pad_w - (cv->w - 1); /* the last one's, from the far edge */
    hi[1] = (cv->p - 1) * cv->stride_h - cv->pad_h - (cv->h - 1);
}
bool conv_tma_fits(const cnn_conv2d *cv) {
    int lo[2], hi[2];
    tma_corners(cv, lo, hi);
    for (int i = 0; i < 2; i++)
        if (lo[i] < -128 || lo[i] > 127 || hi[i] < -128 || hi[i] > 127) return false;
    return cv->c % 64 == 0 && cv->r <= 256 && cv->s <= 256 && cv->stride_h <= 8 && cv->stride_w <= 8;
}

static CUtensorMapDataType tma_dtype(const cuda_be *cb) {
    return cb->pub.act_dtype == CNN_DTYPE_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
}

/* x as an NHWC tensor in im2col mode (conv_tma_fits holds), `pixels` output pixels x 64 channels per copy, traversal
 * strides the conv's, the bounding box the filter bases of the output pixels, in the 128-byte swizzle that wgmma's
 * descriptors read (wgmma.cuh), zeros outside. A 1x1 conv over 256 channels or more reads each pixel's row (512
 * bytes or more) in 128-byte pieces, one per slice of the same tile: its copies promote to 256 bytes of L2, so the
 * next slice's piece comes from L2 and DRAM sees 256-byte reads (the memory-bound 1x1 convs faster; promoting every
 * map was not: perf-log step 56) */
cnn_status conv_tma_encode_x(cuda_be *cb, const cnn_conv2d *cv, const void *x, int pixels, conv_tma_map *map) {
    _Static_assert(sizeof(conv_tma_map) == sizeof(CUtensorMap) && _Alignof(conv_tma_map) >= 64, "a CUtensorMap");
    const cuuint64_t e = 2, xdim[4] = {(cuuint64_t)cv->c, (cuuint64_t)cv->w, (cuuint64_t)cv->h, (cuuint64_t)cv->n};
    const cuuint64_t xstride[3] = {xdim[0] * e, xdim[0] * xdim[1] * e, xdim[0] * xdim[1] * xdim[2] * e};
    const cuuint32_t xtrav[4] = {1, (cuuint32_t)cv->stride_w, (cuuint32_t)cv->stride_h, 1};
    int lo[2], hi[2];
    tma_corners(cv, lo, hi);
    const CUtensorMapL2promotion xprom =
        cv->r == 1 && cv->s == 1 && cv->c >= 256 ? CU_TENSOR_MAP_L2_PROMOTION_L2_256B : CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
    CU_TRY(cu.TensorMapEncodeIm2col((CUtensorMap *)map, tma_dtype(cb), 4, (void *)x, xdim, xstride, lo, hi, 64,
                                    (cuuint32_t)pixels, xtrav, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                    xprom, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
           "cuTensorMapEncodeIm2col (the input of a TMA conv)");
    return CNN_OK;
}

/* a tiled map of `rank` dimensions (innermost first) of 16-bit elements in boxes whose rows are 64 elements, in the
 * 128-byte swizzle, zeros outside; `what` names it in errors */
static cnn_status encode_tiled(cuda_be *cb, const void *p, unsigned rank, const cuuint64_t *dim,
                               const cuuint64_t *stride, const cuuint32_t *box, const char *what, conv_tma_map *map) {
    const cuuint32_t trav[4] = {1, 1, 1, 1};
    char msg[96];
    snprintf(msg, sizeof msg, "cuTensorMapEncodeTiled (%s)", what);
    CU_TRY(cu.TensorMapEncodeTiled((CUtensorMap *)map, tma_dtype(cb), rank, (void *)p, dim, stride, box, trav,
                                   CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
           msg);
    return CNN_OK;
}

/* a row-major matrix (rows x cols, cols % 8 == 0) in boxes of box_rows rows x 64 columns */
cnn_status conv_tma_encode_rows(cuda_be *cb, const void *p, int64_t rows, int64_t cols, int box_rows, const char *what,
                                conv_tma_map *map) {
    const cuuint64_t dim[2] = {(cuuint64_t)cols, (cuuint64_t)rows}, stride[1] = {(cuuint64_t)cols * 2};
    const cuuint32_t box[2] = {64, (cuuint32_t)box_rows};
    return encode_tiled(cb, p, 2, dim, stride, box, what, map);
}

/* an NHWC tensor (n, h, w, c; c % 8 == 0) in boxes of 64 channels x box_w pixels x box_h rows of one image (the halo
 * wgrad's dy and x) */
cnn_status conv_tma_encode_nhwc(cuda_be *cb, const void *p, int n, int h, int w, int c, int box_w, int box_h,
                                const char *what, conv_tma_map *map) {
    const cuuint64_t dim[4] = {(cuuint64_t)c, (cuuint64_t)w, (cuuint64_t)h, (cuuint64_t)n};
    const cuuint64_t stride[3] = {dim[0] * 2, dim[0] * dim[1] * 2, dim[0] * dim[1] * dim[2] * 2};
    const cuuint32_t box[4] = {64, (cuuint32_t)box_w, (cuuint32_t)box_h, 1};
    return encode_tiled(cb, p, 4, dim, stride, box, what, map);
}

/* the tensor maps of a TMA row's launch (conv_tma_fits holds): x in im2col mode, BM pixels per copy, and the filter
 * as a K x R*S*C matrix, BN rows per copy */
cnn_status conv_tma_encode(cuda_be *cb, const conv_row *c, const cnn_conv2d *cv, const void *x, const void *w,
                           conv_tma_map *a_map, conv_tma_map *b_map) {
    CNN_ASSERT(c->bk == 64);
    CNN_TRY(conv_tma_encode_x(cb, cv, x, c->bm, a_map));
    return conv_tma_encode_rows(cb, w, cv->k, (int64_t)cv->r * cv->s * cv->c, c->bn, "the filter of a TMA conv", b_map);
}

cnn_status conv_tma_encode_ft(cuda_be *cb, const conv_row *c, const cnn_conv2d *cv, const void *dy, const void *w,
                              const conv_ft *ft, conv_tma_map *a_map, conv_tma_map *b_map) {
    CNN_ASSERT(c->bk == 64 && cv->k % 8 == 0);
    CNN_TRY(conv_tma_encode_x(cb, cv, dy, c->bm, a_map));
    const cuuint64_t dim[3] = {(cuuint64_t)cv->k, (cuuint64_t)ft->taps, (cuuint64_t)cv->c};
    const cuuint64_t stride[2] = {dim[0] * 2, dim[0] * dim[1] * 2};
    const cuuint32_t box[3] = {64, 1, 64};
    return encode_tiled(cb, w, 3, dim, stride, box, "the filter of a dgrad read transposed", b_map);
}

/* a TMA-store row's map of the output y (gm x gn, row-major): 16 channels x bm/CONV_OST_PIECES pixels per store (a piece
 * of a consumer warp's part of the transposed tile), no swizzle (tile_epilogue_cols_tma writes its box pixel-major,
 * 32 bytes per pixel) */
cnn_status conv_ost_encode(cuda_be *cb, const conv_row *c, int64_t gm, int64_t gn, void *y, conv_tma_map *y_map) {
    const CUtensorMapDataType dt = tma_dtype(cb);
    const cuuint64_t dim[2] = {(cuuint64_t)gn, (cuuint64_t)gm}, stride[1] = {(cuuint64_t)gn * 2};
    CNN_ASSERT(c->bm % CONV_OST_PIECES == 0);
    const cuuint32_t box[2] = {16, (cuuint32_t)(c->bm / CONV_OST_PIECES)}, trav[2] = {1, 1};
    CU_TRY(cu.TensorMapEncodeTiled((CUtensorMap *)y_map, dt, 2, y, dim, stride, box, trav, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                   CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
           "cuTensorMapEncodeTiled (the output of a TMA-store conv)");
    return CNN_OK;
}
