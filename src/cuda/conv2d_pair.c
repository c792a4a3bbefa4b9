/* conv2d_pair.c -- two convolutions summed in one kernel (the backend table's conv2d_fprop_pair):
 * y = relu?(conv(x, w) + conv(x2, w2) + shift), a ResNet block's last conv and its downsample conv, their BN scales
 * folded into the filters by the eval plan (src/core/fuse.c), so the block's output is written once and neither
 * branch's output is stored or read back. The warp-specialised TMA rows run it: the producer copies the first
 * convolution's slices of a tile, then the second's (its own pair of tensor maps), into the same ring, and the
 * consumers multiply them into the same accumulators. Whether to fuse is tuned (conv2d_choose.c): the two
 * convolutions apart through a workspace are a candidate too, so fusing is used only where it is timed faster.
 */
#include "cuda/conv2d.h"

#include <limits.h>

bool cuda_conv2d_pair_fusable(cnn_backend *be, const cnn_conv2d *cv, const cnn_conv2d *cv2) {
    cuda_be *cb = cuda_impl(be);
    if ((cb->conv_force_cfg >= 0 && cb->conv_force_cfg < conv_n_generic())) return false;
    if (cv->n != cv2->n || cv->k != cv2->k || cv->p != cv2->p || cv->q != cv2->q || cv->k % 8 != 0) return false;
    if (!conv_tma_fits(cv) || !conv_tma_fits(cv2) || conv_check_problem(cv, PASS_FPROP) != CNN_OK ||
        conv_check_problem(cv2, PASS_FPROP) != CNN_OK)
        return false;
    const conv_pair pr = {cv2, NULL, NULL};
    if (conv_launch_gk(cv, &pr) > INT_MAX - 256) return false;
    for (int v = conv_n_generic(); v < conv_n_rows(); v++)
        if (conv_is(&conv_rows[v], CNN_CUDA_CONV_TMA) && conv_fast_usable(cb, v)) return true;
    return false;
}

/* the two convolutions apart, the first into a workspace that the second adds (rounded to act_dtype on the way) */
static cnn_status pair_unfused(cnn_backend *be, const cnn_conv2d *cv, const conv_pair *pr, const cnn_epilogue *ep,
                               const void *x, const void *w, void *y) {
    cuda_be *cb = cuda_impl(be);
    void *t;
    CNN_TRY(cuda_workspace_slot(cb, CUDA_WS_STAGED, (size_t)cv->n * cv->p * cv->q * cv->k * act_size(cb), &t));
    CNN_TRY(cuda_conv2d_fprop(be, cv, NULL, x, w, t));
    const cnn_epilogue e2 = {.shift = ep ? ep->shift : NULL, .residual = t, .relu = ep && ep->relu};
    return cuda_conv2d_fprop(be, pr->cv, &e2, pr->x, pr->w, y);
}

static cnn_status pair_timed(const conv_operands *op, conv_cand c, void *y) {
    if (c.row == CONV_PAIR_UNFUSED) return pair_unfused(op->be, op->cv, op->pr, op->ep, op->x, op->w, y);
    return conv_fast_launch(op->be, op->cv, op->ep, op->x, op->w, y, c.row, c.splits, op->pr, NULL, NULL);
}

cnn_status cuda_conv2d_fprop_pair(cnn_backend *be, const cnn_conv2d *cv, const cnn_conv2d *cv2,
                                  const cnn_epilogue *ep, const void *x, const void *w, const void *x2,
                                  const void *w2, void *y) {
    cuda_be *cb = cuda_impl(be);
    cuda_bind(cb);
    CNN_ASSERT(x && w && x2 && w2 && y && (!ep || (!ep->scale && !ep->residual)));
    CNN_ASSERT(cv->n == cv2->n && cv->k == cv2->k && cv->p == cv2->p && cv->q == cv2->q);
    CNN_TRY(conv_check_problem(cv, PASS_FPROP));
    CNN_TRY(conv_check_problem(cv2, PASS_FPROP));
    const conv_pair pr = {cv2, x2, w2};
    if (cuda_conv2d_pair_fusable(be, cv, cv2) && aligned16(x) && aligned16(w) && aligned16(x2) && aligned16(w2) &&
        aligned16(y)) {
        const conv_operands op = {.be = be, .cv = cv, .ep = ep, .pr = &pr, .x = x, .w = w};
        int row;
        CNN_TRY(conv_choose_pair(&op, pair_timed, y, &row));
        if (row != CONV_PAIR_UNFUSED) {
            cb->stats.pair_launches++;
            return conv_fast_launch(be, cv, ep, x, w, y, row, 1, &pr, NULL, NULL);
        }
    }
    return pair_unfused(be, cv, &pr, ep, x, w, y);
}
