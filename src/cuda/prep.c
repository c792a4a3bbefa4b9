/* prep.c -- launcher of kernels/prep.cu: uint8 planes (a batch, or samples gathered from a whole dataset on the
 * device) -> crop of the zero-padded image, flip, normalise -> NHWC act dtype, in one kernel. */
#include "cuda/internal.h"

#include <stdio.h>

cnn_status cuda_prep_images(cnn_backend *be, const cnn_prep *pp, const uint8_t *src, const int32_t *samples,
                            void *dst) {
    cuda_be *cb = cuda_impl(be);
    cuda_bind(cb);
    int out_c = pp->out_c ? pp->out_c : pp->c;
    CNN_ASSERT(pp->n > 0 && pp->c > 0 && pp->c <= 4 && pp->h > 0 && pp->w > 0 && pp->pad >= 0 && pp->src_n > 0);
    CNN_ASSERT(out_c == pp->c || (pp->c == 1 && out_c <= 4));
    CNN_ASSERT(src && dst && (samples || pp->src_n >= pp->n));
    prep_args a = {.n = pp->n, .c = pp->c, .h = pp->h, .w = pp->w, .pad = pp->pad, .src_n = pp->src_n,
                   .out_c = out_c, .src = src, .samples = samples, .dst = dst};
    for (int i = 0; i < 4; i++) {
        a.mean[i] = pp->mean[i];
        a.std[i] = pp->std[i];
    }
    for (int i = 0; i < out_c; i++)
        if (!(pp->std[i] != 0.0f)) return cnn_fail(CNN_E_INVALID, "prep_images: std[%d] is %g", i, (double)pp->std[i]);
    CUfunction f;
    CNN_TRY(cuda_kernel(cb, &cuda_family_prep, be->act_dtype, 0, PREP_IMAGES, &f));
    char what[112];
    snprintf(what, sizeof what, "prep_images[%s] n%d c%d->%d h%d w%d pad %d of %d", cuda_dtype_str(be->act_dtype),
             pp->n, pp->c, out_c, pp->h, pp->w, pp->pad, pp->src_n);
    return cuda_launch(cb, f, what, cuda_grid_1d(cb, (long long)pp->n * out_c * pp->h * pp->w, 256), 1, 1, 256, 1, &a);
}

_Static_assert(sizeof(cnn_resample_job) == sizeof(resample_job), "cnn_resample_job and params.cuh's resample_job");

cnn_status cuda_resample_launch(cuda_be *cb, CUfunction f, CUstream stream, const cnn_resample_batch *rb,
                                const cnn_resample_job *jobs, const uint8_t *src, uint8_t *dst) {
    CNN_ASSERT(rb->n > 0 && rb->ch > 0 && rb->cw > 0 && jobs && src && dst);
    resample_args a = {.n = rb->n, .ch = rb->ch, .cw = rb->cw, .jobs = (const resample_job *)jobs, .src = src,
                       .dst = dst};
    void *params[1] = {&a};
    CU_TRY(cu.LaunchKernel(f, cuda_grid_1d(cb, (long long)rb->n * rb->ch * rb->cw, 256), 1, 1, 256, 1, 1, 0, stream,
                           params, NULL),
           "resample_images (cuLaunchKernel)");
    return CNN_OK;
}

cnn_status cuda_resample_images(cnn_backend *be, const cnn_resample_batch *rb, const cnn_resample_job *jobs,
                                const uint8_t *src, uint8_t *dst) {
    cuda_be *cb = cuda_impl(be);
    cuda_bind(cb);
    CNN_ASSERT(rb->n > 0 && rb->ch > 0 && rb->cw > 0 && jobs && src && dst);
    CUfunction f;
    CNN_TRY(cuda_kernel(cb, &cuda_family_prep, be->act_dtype, 0, PREP_RESAMPLE, &f));
    resample_args a = {.n = rb->n, .ch = rb->ch, .cw = rb->cw, .jobs = (const resample_job *)jobs, .src = src,
                       .dst = dst};
    char what[96];
    snprintf(what, sizeof what, "resample_images n%d %dx%d", rb->n, rb->ch, rb->cw);
    return cuda_launch(cb, f, what, cuda_grid_1d(cb, (long long)rb->n * rb->ch * rb->cw, 256), 1, 1, 256, 1, &a);
}
