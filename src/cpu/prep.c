/* prep.c — image preparation: uint8 planes -> normalised NHWC floats, with crop and flip augmentation.
 *
 * src holds src_n images of (C, H, W) uint8; dst is (N, H, W, out_c) float. Sample i is image
 * img = samples[4i] (i when samples is NULL), zero-padded by `pad`, of which a window of H x W at offset
 * (oy, ox) = (samples[4i+1], samples[4i+2]) in [0, 2*pad] is cropped and flipped horizontally when
 * samples[4i+3] is 1 (NULL: offset (pad, pad), no flip):
 *     dst[i, y, x, k] = (v / 255 - mean[k]) / std[k],   v = src[img, k % C, y + oy - pad, x' + ox - pad] (0 outside)
 *     x' = flip ? W - 1 - x : x
 * With C = 1 and out_c = 3 the one channel is repeated. An image index outside [0, src_n), offsets outside
 * [0, 2*pad] or a flip other than 0/1 are CNN_E_INVALID.
 */
#include "cpu/cpu.h"

#include <math.h>

cnn_status cnn_cpu_op_prep_images(cnn_backend *be, const cnn_prep *pp, const uint8_t *src, const int32_t *samples,
                                  void *dstv) {
    const int N = pp->n, C = pp->c, H = pp->h, W = pp->w, pad = pp->pad, K = pp->out_c ? pp->out_c : pp->c;
    float *dst = dstv; /* (N, H, W, K) */
    CNN_ASSERT(N >= 0 && C >= 1 && C <= 4 && H > 0 && W > 0 && pad >= 0 && pp->src_n > 0);
    CNN_ASSERT(K == C || (C == 1 && K <= 4));
    CNN_ASSERT(samples || pp->src_n >= N);
    for (int k = 0; k < K; k++)
        if (!(pp->std[k] != 0) || !isfinite(pp->std[k]) || !isfinite(pp->mean[k]))
            return cnn_fail(CNN_E_INVALID, "image normalisation of channel %d: mean %g, std %g", k, (double)pp->mean[k],
                            (double)pp->std[k]);
    if (samples)
        for (int i = 0; i < N; i++) {
            const int32_t *s = samples + 4 * i;
            if (s[0] < 0 || s[0] >= pp->src_n || s[1] < 0 || s[1] > 2 * pad || s[2] < 0 || s[2] > 2 * pad ||
                (s[3] != 0 && s[3] != 1))
                return cnn_fail(CNN_E_INVALID, "sample %d: image %d of %d, crop offset (%d, %d) outside [0, %d], flip %d",
                                i, (int)s[0], pp->src_n, (int)s[1], (int)s[2], 2 * pad, (int)s[3]);
        }
#pragma omp parallel for num_threads(cnn_cpu_threads(be)) schedule(static)
    for (int64_t ny = 0; ny < (int64_t)N * H; ny++) {
        int64_t i = ny / H;
        int y = (int)(ny % H);
        const int32_t *s = samples ? samples + 4 * i : NULL;
        int64_t img = s ? s[0] : i;
        int oy = s ? s[1] : pad, ox = s ? s[2] : pad;
        bool fl = s && s[3];
        int sy = y + oy - pad;
        for (int x = 0; x < W; x++) {
            int sx = (fl ? W - 1 - x : x) + ox - pad;
            bool inside = sy >= 0 && sy < H && sx >= 0 && sx < W;
            float *o = dst + ((i * H + y) * W + x) * K;
            for (int k = 0; k < K; k++) {
                int c = C == 1 ? 0 : k;
                float v = inside ? (float)src[((img * C + c) * H + sy) * W + sx] : 0.0f;
                o[k] = (v / 255.0f - pp->mean[k]) / pp->std[k];
            }
        }
    }
    return CNN_OK;
}
