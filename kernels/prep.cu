/* prep.cu -- batch preparation in one pass: sample n is image samples[4n] of the uint8 planes src (src_n, C, H, W)
 * -> crop of the image zero-padded by `pad` at offset (oy, ox) = (samples[4n+1], samples[4n+2]) -> horizontal flip
 * of the crop when samples[4n+3] -> (v/255 - mean[k]) / std[k] -> NHWC act_t with out_c channels (a single source
 * channel repeated when C = 1):
 *     out[n][y][x][k] = norm(padded[img][k % C][y + oy][x' + ox]),  x' = flip ? W-1-x : x,  padded = 0 outside
 * samples NULL: image n, offset (pad, pad), no flip. One thread per output element, k fastest (coalesced stores).
 * Neither an image index outside [0, src_n) (its sample becomes zeros) nor offsets outside [0, 2*pad] can read out
 * of bounds: every source index is checked. Specialisation: ACT only.
 */
#include "common.cuh"
#include "params.cuh"

extern "C" __global__ void prep_images(const prep_args a) {
    pdl_enter();
    act_t *dst = (act_t *)a.dst;
    const long long total = (long long)a.n * a.h * a.w * a.out_c;
    for (long long o = GRID_TID; o < total; o += GRID_STRIDE) {
        int k = (int)(o % a.out_c);
        long long t = o / a.out_c;
        int xx = (int)(t % a.w);
        t /= a.w;
        int yy = (int)(t % a.h);
        long long n = t / a.h;
        long long img = n;
        int oy = a.pad, ox = a.pad, fl = 0;
        if (a.samples) {
            img = a.samples[4 * n];
            oy = a.samples[4 * n + 1];
            ox = a.samples[4 * n + 2];
            fl = a.samples[4 * n + 3];
        }
        int c = a.c == 1 ? 0 : k;
        int xs = fl ? a.w - 1 - xx : xx;
        int hi = yy + oy - a.pad, wi = xs + ox - a.pad;
        float v = 0.0f;
        if ((unsigned long long)img < (unsigned long long)a.src_n && (unsigned)hi < (unsigned)a.h &&
            (unsigned)wi < (unsigned)a.w)
            v = (float)a.src[((img * a.c + c) * a.h + hi) * a.w + wi];
        /* constant indices only: a run-time index into the argument struct would put it on the stack */
        float mu = a.mean[0], sd = a.std[0];
        if (k == 1) mu = a.mean[1], sd = a.std[1];
        if (k == 2) mu = a.mean[2], sd = a.std[2];
        if (k == 3) mu = a.mean[3], sd = a.std[3];
        act_store(dst, o, (v / 255.0f - mu) / sd);
    }
}

/* resample_images: window pixel (y, x) of image n, all three channels, per thread:
 *     out[n][c][y][x] = round(sum_ky sum_kx wy(ky) wx(kx) img[y0 + ky][x0 + kx][c] / (sum wy * sum wx))
 * over the taps of PIL's BILINEAR coefficient window of (wy + y, wx + x') in the region resized to out_h x out_w
 * (x' = flip ? CW-1-x : x; 0 outside the resized image); a job with out_h 0 writes nothing. src/cpu/prep.c's resample_images is the oracle: the same
 * float32 operations in the same order. */
__device__ static void rs_window(int o, int in, int out, int *lo, int *hi, float *center, float *ss) {
    float scale = (float)in / (float)out;
    float fs = scale > 1.0f ? scale : 1.0f;
    *center = ((float)o + 0.5f) * scale;
    *ss = 1.0f / fs;
    int a = (int)(*center - fs + 0.5f), b = (int)(*center + fs + 0.5f);
    *lo = a < 0 ? 0 : a;
    *hi = b > in ? in : b;
}

__device__ static float rs_weight(int k, float center, float ss) {
    float x = fabsf(((float)k - center + 0.5f) * ss);
    return x < 1.0f ? 1.0f - x : 0.0f;
}

extern "C" __global__ void resample_images(const resample_args a) {
    pdl_enter();
    const long long plane = (long long)a.ch * a.cw, total = (long long)a.n * plane;
    for (long long o = GRID_TID; o < total; o += GRID_STRIDE) {
        long long n = o / plane;
        int yy = (int)(o % plane / a.cw), xx = (int)(o % a.cw);
        const resample_job j = a.jobs[n];
        if (j.out_h == 0) continue; /* an image placed by other means: its planes are left alone */
        int oy = j.wy + yy, ox = j.wx + (j.flip ? a.cw - 1 - xx : xx);
        float v0 = 0.0f, v1 = 0.0f, v2 = 0.0f;
        if (oy >= 0 && oy < j.out_h && ox >= 0 && ox < j.out_w) {
            int ylo, yhi, xlo, xhi;
            float yc, yss, xc, xss;
            rs_window(oy, j.rh, j.out_h, &ylo, &yhi, &yc, &yss);
            rs_window(ox, j.rw, j.out_w, &xlo, &xhi, &xc, &xss);
            float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, wsum_y = 0.0f, wsum_x = 0.0f;
            for (int kx = xlo; kx < xhi; kx++) wsum_x += rs_weight(kx, xc, xss);
            for (int ky = ylo; ky < yhi; ky++) {
                float wy = rs_weight(ky, yc, yss);
                wsum_y += wy;
                const unsigned char *row = a.src + j.src + (long long)(j.y0 + ky) * j.pitch + 3LL * j.x0;
                float r0 = 0.0f, r1 = 0.0f, r2 = 0.0f;
                for (int kx = xlo; kx < xhi; kx++) {
                    float wx = rs_weight(kx, xc, xss);
                    r0 += wx * (float)row[3 * kx];
                    r1 += wx * (float)row[3 * kx + 1];
                    r2 += wx * (float)row[3 * kx + 2];
                }
                a0 += wy * r0;
                a1 += wy * r1;
                a2 += wy * r2;
            }
            float norm = 1.0f / (wsum_y * wsum_x);
            v0 = a0 * norm;
            v1 = a1 * norm;
            v2 = a2 * norm;
        }
        unsigned char *d = a.dst + n * 3 * plane + (long long)yy * a.cw + xx;
        d[0] = (unsigned char)fminf(fmaxf(floorf(v0 + 0.5f), 0.0f), 255.0f);
        d[plane] = (unsigned char)fminf(fmaxf(floorf(v1 + 0.5f), 0.0f), 255.0f);
        d[2 * plane] = (unsigned char)fminf(fmaxf(floorf(v2 + 0.5f), 0.0f), 255.0f);
    }
}
