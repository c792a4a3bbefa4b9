/* problem.c — filling the typed problem descriptors of backend.h and deriving their output sizes.
 *
 * Output size (floor mode, as PyTorch):  P = (H + 2*pad - R) / stride + 1.
 * Each init returns false, with p = q = 0, when the parameters are invalid or the output would be empty;
 * pooling also refuses pad > window/2 (PyTorch's rule). */
#include "cnn/backend.h"

#include <string.h>

static int out_size(int in, int window, int stride, int pad) {
    int span = in + 2 * pad - window;
    if (span < 0) return 0;
    return span / stride + 1;
}

bool cnn_conv2d_init(cnn_conv2d *cv, int n, int c, int h, int w, int k, int r, int s, int stride, int pad) {
    memset(cv, 0, sizeof *cv);
    cv->n = n, cv->c = c, cv->h = h, cv->w = w;
    cv->k = k, cv->r = r, cv->s = s;
    cv->stride_h = cv->stride_w = stride;
    cv->pad_h = cv->pad_w = pad;
    if (n <= 0 || c <= 0 || h <= 0 || w <= 0 || k <= 0 || r <= 0 || s <= 0 || stride <= 0 || pad < 0) return false;
    cv->p = out_size(h, r, stride, pad);
    cv->q = out_size(w, s, stride, pad);
    if (cv->p <= 0 || cv->q <= 0) {
        cv->p = cv->q = 0;
        return false;
    }
    return true;
}

bool cnn_pool2d_init(cnn_pool2d *pl, cnn_pool_kind kind, int n, int c, int h, int w, int r, int stride, int pad) {
    memset(pl, 0, sizeof *pl);
    pl->kind = kind;
    pl->n = n, pl->c = c, pl->h = h, pl->w = w;
    pl->r = pl->s = r;
    pl->stride_h = pl->stride_w = stride;
    pl->pad_h = pl->pad_w = pad;
    if (kind != CNN_POOL_MAX && kind != CNN_POOL_AVG) return false;
    if (n <= 0 || c <= 0 || h <= 0 || w <= 0 || r <= 0 || stride <= 0 || pad < 0 || pad > r / 2) return false;
    pl->p = out_size(h, r, stride, pad);
    pl->q = out_size(w, r, stride, pad);
    if (pl->p <= 0 || pl->q <= 0) {
        pl->p = pl->q = 0;
        return false;
    }
    return true;
}

bool cnn_pool2d_init_adaptive(cnn_pool2d *pl, int n, int c, int h, int w, int p, int q) {
    memset(pl, 0, sizeof *pl);
    pl->kind = CNN_POOL_ADAPTIVE_AVG;
    pl->n = n, pl->c = c, pl->h = h, pl->w = w;
    pl->stride_h = pl->stride_w = 1;
    if (n <= 0 || c <= 0 || h <= 0 || w <= 0 || p <= 0 || q <= 0) return false;
    pl->p = p;
    pl->q = q;
    return true;
}
