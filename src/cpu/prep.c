/* prep.c — image preparation: uint8 planes -> normalised NHWC floats, with crop and flip augmentation.
 *
 * src is (N, C, H, W) uint8; dst is (N, H, W, C) float. For sample i the image is zero-padded by `pad`, a
 * window of H x W at offset (oy, ox) = (offsets[2i], offsets[2i+1]) in [0, 2*pad] is cropped, and the crop is
 * flipped horizontally when flip[i] is 1:
 *     dst[i, y, x, c] = (v / 255 - mean[c]) / std[c],   v = src[i, c, y + oy - pad, x' + ox - pad] (0 outside)
 *     x' = flip[i] ? W - 1 - x : x
 * offsets NULL means (pad, pad) (the centre crop) and flip NULL means no flip. Offsets outside [0, 2*pad] are
 * CNN_E_INVALID.
 */
#include "cpu/cpu.h"

#include <math.h>

cnn_status cnn_cpu_op_prep_images(cnn_backend *be, const cnn_prep *pp, const uint8_t *src, const int32_t *offsets,
                                  const uint8_t *flip, void *dstv) {
    const int N = pp->n, C = pp->c, H = pp->h, W = pp->w, pad = pp->pad;
    float *dst = dstv; /* (N, H, W, C) */
    CNN_ASSERT(N >= 0 && C >= 1 && C <= 4 && H > 0 && W > 0 && pad >= 0);
    for (int c = 0; c < C; c++)
        if (!(pp->std[c] != 0) || !isfinite(pp->std[c]) || !isfinite(pp->mean[c]))
            return cnn_fail(CNN_E_INVALID, "image normalisation of channel %d: mean %g, std %g", c, (double)pp->mean[c],
                            (double)pp->std[c]);
    if (offsets)
        for (int i = 0; i < 2 * N; i++)
            if (offsets[i] < 0 || offsets[i] > 2 * pad)
                return cnn_fail(CNN_E_INVALID, "crop offset %d of sample %d is outside [0, %d]", (int)offsets[i], i / 2,
                                2 * pad);
#pragma omp parallel for num_threads(cnn_cpu_threads(be)) schedule(static)
    for (int64_t ny = 0; ny < (int64_t)N * H; ny++) {
        int64_t i = ny / H;
        int y = (int)(ny % H);
        int oy = offsets ? offsets[2 * i] : pad, ox = offsets ? offsets[2 * i + 1] : pad;
        bool fl = flip && flip[i];
        int sy = y + oy - pad;
        for (int x = 0; x < W; x++) {
            int sx = (fl ? W - 1 - x : x) + ox - pad;
            bool inside = sy >= 0 && sy < H && sx >= 0 && sx < W;
            float *o = dst + ((i * H + y) * W + x) * C;
            for (int c = 0; c < C; c++) {
                float v = inside ? (float)src[((i * C + c) * H + sy) * W + sx] : 0.0f;
                o[c] = (v / 255.0f - pp->mean[c]) / pp->std[c];
            }
        }
    }
    return CNN_OK;
}
