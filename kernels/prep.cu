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
