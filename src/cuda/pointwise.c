/* pointwise.c -- launchers of kernels/pointwise.cu: relu, add, pass/dropout backward, dtype conversion,
 * flatten. Two configs per dtype: 0 scalar (any alignment), 1 16-byte vectors; pick_vec() takes the vector one
 * when every pointer of the call is 16-byte aligned (arena offsets are; views into the middle of a tensor may
 * not be). A partial last vector is handled inside the kernel, so the count need not be a multiple.
 */
#include "cuda/internal.h"

#include <stdio.h>

static int pick_vec(const void *a, const void *b, const void *c) {
    return aligned16(a) && aligned16(b) && aligned16(c) ? PW_CFG_VEC16 : PW_CFG_SCALAR;
}

/* elements per thread-step of config cfg */
static int vec_of(cnn_dtype dt, int cfg) { return cfg == PW_CFG_SCALAR ? 1 : (dt == CNN_DTYPE_F32 ? 4 : 8); }

static cnn_status run(cnn_backend *be, int entry, int cfg, pw_args *a, long long work) {
    cuda_be *cb = cuda_impl(be);
    cuda_bind(cb);
    if (a->count == 0) return CNN_OK;
    CUfunction f;
    CNN_TRY(cuda_kernel(cb, &cuda_family_pointwise, be->act_dtype, cfg, entry, &f));
    char what[96];
    snprintf(what, sizeof what, "%s[%s %s] count %lld", cuda_family_pointwise.entries[entry], cuda_dtype_str(be->act_dtype),
             cuda_family_pointwise.config_name(cfg), a->count);
    return cuda_launch(cb, f, what, cuda_grid_1d(cb, work, 256), 1, 1, 256, 1, a);
}

static cnn_status run_vec(cnn_backend *be, int entry, pw_args *a) {
    CNN_ASSERT(a->count >= 0);
    int cfg = pick_vec(a->a, a->b, a->out);
    int v = vec_of(be->act_dtype, cfg);
    return run(be, entry, cfg, a, (a->count + v - 1) / v);
}

cnn_status cuda_to_act(cnn_backend *be, int64_t count, const float *src, void *dst) {
    if (be->act_dtype == CNN_DTYPE_F32) return be->copy(be, dst, src, (size_t)count * sizeof(float));
    pw_args a = {.count = count, .a = src, .out = dst};
    return run_vec(be, PW_TO_ACT, &a);
}

cnn_status cuda_from_act(cnn_backend *be, int64_t count, const void *src, float *dst) {
    if (be->act_dtype == CNN_DTYPE_F32) return be->copy(be, dst, src, (size_t)count * sizeof(float));
    pw_args a = {.count = count, .a = src, .out = dst};
    return run_vec(be, PW_FROM_ACT, &a);
}

cnn_status cuda_relu_forward(cnn_backend *be, int64_t count, const void *x, void *y) {
    pw_args a = {.count = count, .a = x, .out = y};
    return run_vec(be, PW_RELU_FWD, &a);
}

cnn_status cuda_relu_backward(cnn_backend *be, int64_t count, const void *y, const void *dy, void *dx,
                              bool accumulate) {
    pw_args a = {.count = count, .a = y, .b = dy, .out = dx, .accumulate = accumulate};
    return run_vec(be, PW_RELU_BWD, &a);
}

cnn_status cuda_add_forward(cnn_backend *be, int64_t count, const void *x0, const void *x1, void *y) {
    pw_args a = {.count = count, .a = x0, .b = x1, .out = y};
    return run_vec(be, PW_ADD, &a);
}

cnn_status cuda_pass_backward(cnn_backend *be, int64_t count, const void *dy, void *dx, bool accumulate) {
    if (!accumulate) return be->copy(be, dx, dy, (size_t)count * cnn_dtype_size(be->act_dtype));
    pw_args a = {.count = count, .b = dy, .out = dx, .accumulate = 1};
    return run_vec(be, PW_PASS_BWD, &a);
}

static cnn_status check_p(float p) {
    if (!(p >= 0.0f && p <= 1.0f)) return cnn_fail(CNN_E_INVALID, "dropout probability %g outside [0, 1]", (double)p);
    return CNN_OK;
}

cnn_status cuda_dropout_forward(cnn_backend *be, int64_t count, float p, uint64_t seed, const void *x, void *y) {
    CNN_TRY(check_p(p));
    pw_args a = {.count = count, .a = x, .out = y, .p = p, .scale = 1.0f / (1.0f - p), .seed = seed};
    return run_vec(be, PW_DROP_FWD, &a);
}

cnn_status cuda_dropout_backward(cnn_backend *be, int64_t count, float p, uint64_t seed, const void *dy, void *dx,
                                 bool accumulate) {
    CNN_TRY(check_p(p));
    pw_args a = {.count = count, .b = dy, .out = dx, .accumulate = accumulate, .p = p, .scale = 1.0f / (1.0f - p),
                 .seed = seed};
    return run_vec(be, PW_DROP_BWD, &a);
}

cnn_status cuda_flatten_forward(cnn_backend *be, cnn_shape s, const void *x, void *y) {
    CNN_ASSERT(s.n > 0 && s.c > 0 && s.h > 0 && s.w > 0);
    pw_args a = {.count = cnn_shape_numel(s), .a = x, .out = y, .n = s.n, .c = s.c, .hw = s.h * s.w};
    if (s.h * s.w == 1 || s.c == 1) return be->copy(be, y, x, (size_t)a.count * cnn_dtype_size(be->act_dtype));
    return run(be, PW_FLAT_FWD, PW_CFG_SCALAR, &a, a.count);
}

cnn_status cuda_flatten_backward(cnn_backend *be, cnn_shape s, const void *dy, void *dx, bool accumulate) {
    CNN_ASSERT(s.n > 0 && s.c > 0 && s.h > 0 && s.w > 0);
    pw_args a = {.count = cnn_shape_numel(s), .b = dy, .out = dx, .accumulate = accumulate, .n = s.n, .c = s.c,
                 .hw = s.h * s.w};
    if ((s.h * s.w == 1 || s.c == 1) && !accumulate)
        return be->copy(be, dx, dy, (size_t)a.count * cnn_dtype_size(be->act_dtype));
    return run(be, PW_FLAT_BWD, PW_CFG_SCALAR, &a, a.count);
}

cnn_status cuda_tree_sum(cnn_backend *be, int shards, int64_t count, const float *parts, int64_t stride, float *out) {
    CNN_ASSERT(shards >= 1 && shards <= 8 && (shards & (shards - 1)) == 0 && count >= 0 && stride >= count);
    pw_args a = {.count = count, .a = parts, .out = out, .n = shards, .stride = stride};
    return run(be, PW_TREE_SUM, PW_CFG_SCALAR, &a, count);
}
