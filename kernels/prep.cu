/* prep.cu -- batch preparation in one pass: uint8 planes (N, C, H, W) -> crop of the image zero-padded by `pad`
 * at offset (oy, ox) -> horizontal flip of the crop when flip[i] -> (v/255 - mean[c]) / std[c] -> NHWC act_t.
 *     out[n][y][x][c] = norm(padded[n][c][y + oy][x' + ox]),  x' = flip ? W-1-x : x,  padded = 0 outside the image
 * One thread per output element, c fastest (coalesced stores). Offsets outside [0, 2*pad] cannot read out of
 * bounds: every source index is checked against the image. Specialisation: ACT only.
 */
#include "common.cuh"
#include "params.cuh"

extern "C" __global__ void prep_images(const prep_args a) {
    pdl_enter();
    act_t *dst = (act_t *)a.dst;
    const long long total = (long long)a.n * a.h * a.w * a.c;
    for (long long o = GRID_TID; o < total; o += GRID_STRIDE) {
        int c = (int)(o % a.c);
        long long t = o / a.c;
        int xx = (int)(t % a.w);
        t /= a.w;
        int yy = (int)(t % a.h);
        long long n = t / a.h;
        int oy = a.offsets[2 * n], ox = a.offsets[2 * n + 1];
        int xs = a.flip[n] ? a.w - 1 - xx : xx;
        int hi = yy + oy - a.pad, wi = xs + ox - a.pad;
        float v = 0.0f;
        if ((unsigned)hi < (unsigned)a.h && (unsigned)wi < (unsigned)a.w)
            v = (float)a.src[((n * a.c + c) * a.h + hi) * a.w + wi];
        /* constant indices only: a run-time index into the argument struct would put it on the stack */
        float mu = a.mean[0], sd = a.std[0];
        if (c == 1) mu = a.mean[1], sd = a.std[1];
        if (c == 2) mu = a.mean[2], sd = a.std[2];
        if (c == 3) mu = a.mean[3], sd = a.std[3];
        act_store(dst, o, (v / 255.0f - mu) / sd);
    }
}
