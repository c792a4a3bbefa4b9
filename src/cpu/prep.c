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

/* ---- resample_images: the oracle of kernels/prep.cu's resample_images (the same float32 operations in the same
 * order; the device may contract a multiply and an add into one FMA, so the two can differ by one level) ---- */

/* PIL's coefficient window of output index o along one axis: source taps [*lo, *hi) of a region of `in` pixels
 * resized to `out`, each weighted tri((k - center + 0.5) / fs) (PIL's BILINEAR filter stretched by fs). */
static void resample_window(int o, int in, int out, int *lo, int *hi, float *center, float *ss) {
    float scale = (float)in / (float)out;
    float fs = scale > 1.0f ? scale : 1.0f;
    *center = ((float)o + 0.5f) * scale;
    *ss = 1.0f / fs;
    int a = (int)(*center - fs + 0.5f), b = (int)(*center + fs + 0.5f);
    *lo = a < 0 ? 0 : a;
    *hi = b > in ? in : b;
}

static float tri_weight(int k, float center, float ss) {
    float x = ((float)k - center + 0.5f) * ss;
    x = x < 0 ? -x : x;
    return x < 1.0f ? 1.0f - x : 0.0f;
}

cnn_status cnn_cpu_op_resample_images(cnn_backend *be, const cnn_resample_batch *rb, const cnn_resample_job *jobs,
                                      const uint8_t *src, uint8_t *dst) {
    const int N = rb->n, CH = rb->ch, CW = rb->cw;
    CNN_ASSERT(N >= 0 && CH > 0 && CW > 0);
    for (int i = 0; i < N; i++) {
        const cnn_resample_job *j = &jobs[i];
        if (j->out_h == 0) continue;
        if (j->src < 0 || j->h < 1 || j->w < 1 || j->pitch < 3 * j->w || j->y0 < 0 || j->x0 < 0 || j->rh < 1 ||
            j->rw < 1 || j->y0 + j->rh > j->h || j->x0 + j->rw > j->w || j->out_h < 1 || j->out_w < 1 ||
            (j->flip != 0 && j->flip != 1))
            return cnn_fail(CNN_E_INVALID, "resample_images: job %d (image %dx%d, region %d,%d %dx%d -> %dx%d) is "
                            "invalid", i, j->h, j->w, j->y0, j->x0, j->rh, j->rw, j->out_h, j->out_w);
    }
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const cnn_resample_job *j = &jobs[i];
        if (j->out_h == 0) continue; /* an image placed by other means: its planes are left alone */
        const uint8_t *img = src + j->src;
        for (int yy = 0; yy < CH; yy++)
            for (int xx = 0; xx < CW; xx++) {
                int oy = j->wy + yy, ox = j->wx + (j->flip ? CW - 1 - xx : xx);
                float v[3] = {0, 0, 0};
                if (oy >= 0 && oy < j->out_h && ox >= 0 && ox < j->out_w) {
                    int ylo, yhi, xlo, xhi;
                    float yc, yss, xc, xss;
                    resample_window(oy, j->rh, j->out_h, &ylo, &yhi, &yc, &yss);
                    resample_window(ox, j->rw, j->out_w, &xlo, &xhi, &xc, &xss);
                    float acc[3] = {0, 0, 0}, wsum_y = 0, wsum_x = 0;
                    for (int kx = xlo; kx < xhi; kx++) wsum_x += tri_weight(kx, xc, xss);
                    for (int ky = ylo; ky < yhi; ky++) {
                        float wy = tri_weight(ky, yc, yss);
                        wsum_y += wy;
                        const uint8_t *row = img + (int64_t)(j->y0 + ky) * j->pitch + 3 * (int64_t)j->x0;
                        float r[3] = {0, 0, 0};
                        for (int kx = xlo; kx < xhi; kx++) {
                            float wx = tri_weight(kx, xc, xss);
                            for (int c = 0; c < 3; c++) r[c] += wx * (float)row[3 * kx + c];
                        }
                        for (int c = 0; c < 3; c++) acc[c] += wy * r[c];
                    }
                    float norm = 1.0f / (wsum_y * wsum_x);
                    for (int c = 0; c < 3; c++) v[c] = acc[c] * norm;
                }
                for (int c = 0; c < 3; c++) {
                    float r = floorf(v[c] + 0.5f);
                    dst[(((int64_t)i * 3 + c) * CH + yy) * CW + xx] = (uint8_t)(r < 0 ? 0 : r > 255 ? 255 : r);
                }
            }
    }
    return CNN_OK;
}
