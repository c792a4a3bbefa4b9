/* prep.c -- launcher of kernels/prep.cu: uint8 planes -> crop of the zero-padded image, flip, normalise ->
 * NHWC act dtype, in one kernel. */
#include "cuda/internal.h"

#include <stdio.h>

cnn_status cuda_prep_images(cnn_backend *be, const cnn_prep *pp, const uint8_t *src, const int32_t *offsets,
                            const uint8_t *flip, void *dst) {
    cuda_be *cb = cuda_impl(be);
    cuda_bind(cb);
    CNN_ASSERT(pp->n > 0 && pp->c > 0 && pp->c <= 4 && pp->h > 0 && pp->w > 0 && pp->pad >= 0);
    CNN_ASSERT(src && offsets && flip && dst);
    prep_args a = {.n = pp->n, .c = pp->c, .h = pp->h, .w = pp->w, .pad = pp->pad, .src = src, .offsets = offsets,
                   .flip = flip, .dst = dst};
    for (int i = 0; i < 4; i++) {
        a.mean[i] = pp->mean[i];
        a.std[i] = pp->std[i];
    }
    for (int i = 0; i < pp->c; i++)
        if (!(pp->std[i] != 0.0f)) return cnn_fail(CNN_E_INVALID, "prep_images: std[%d] is %g", i, (double)pp->std[i]);
    CUfunction f;
    CNN_TRY(cuda_kernel(cb, &cuda_family_prep, be->act_dtype, 0, 0, &f));
    char what[96];
    snprintf(what, sizeof what, "prep_images[%s] n%d c%d h%d w%d pad %d", cuda_dtype_str(be->act_dtype), pp->n, pp->c,
             pp->h, pp->w, pp->pad);
    return cuda_launch(cb, f, what, cuda_grid_1d(cb, (long long)pp->n * pp->c * pp->h * pp->w, 256), 1, 1, 256, 1, &a);
}
