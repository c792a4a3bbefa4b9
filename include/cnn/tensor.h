/* tensor.h — element types, shapes and host tensors.
 *
 * Layout vocabulary (CUTLASS's): activations are (N, C, H, W) logically; the engine stores them NHWC
 * (channels innermost). Filters are (K, C, R, S) logically (torchvision's OIHW); the engine stores them
 * KRSC. Outputs of a convolution are (N, K, P, Q). At the API edge (files, the CLI) tensors are NCHW / OIHW,
 * exactly as PyTorch has them.
 */
#ifndef CNN_TENSOR_H
#define CNN_TENSOR_H

#include "cnn/cnn.h"

typedef enum cnn_dtype {
    CNN_DTYPE_F32 = 0,
    CNN_DTYPE_F16,
    CNN_DTYPE_BF16,
    CNN_DTYPE_F64,
    CNN_DTYPE_I64,
    CNN_DTYPE_I32,
    CNN_DTYPE_I16,
    CNN_DTYPE_I8,
    CNN_DTYPE_U8,
    CNN_DTYPE_U16,
    CNN_DTYPE_U32,
    CNN_DTYPE_U64,
    CNN_DTYPE_BOOL,
    CNN_DTYPE_F8_E4M3,
    CNN_DTYPE_F8_E5M2,
    CNN_DTYPE_COUNT
} cnn_dtype;

size_t cnn_dtype_size(cnn_dtype t);
/* safetensors spelling: "F32", "BF16", "I64", ... */
const char *cnn_dtype_name(cnn_dtype t);
/* Parse a safetensors dtype name; false when unknown. */
bool cnn_dtype_parse(const char *name, size_t len, cnn_dtype *out);

/* Scalar conversions (round to nearest even; NaN stays NaN). */
float cnn_bf16_to_f32(uint16_t h);
uint16_t cnn_f32_to_bf16(float f);
float cnn_f16_to_f32(uint16_t h);
uint16_t cnn_f32_to_f16(float f);

#define CNN_MAX_DIMS 8

/* A host tensor: a typed view of contiguous C-order memory. Owns nothing. */
typedef struct cnn_tensor {
    cnn_dtype dtype;
    int ndim;
    int64_t shape[CNN_MAX_DIMS];
    void *data;
} cnn_tensor;

/* Element count (product of the shape; 1 for a scalar). */
int64_t cnn_tensor_numel(const cnn_tensor *t);
/* "[64, 3, 7, 7]" into buf; returns buf. */
char *cnn_shape_str(const int64_t *shape, int ndim, char *buf, size_t cap);

/* Convert n elements of src (dtype st) to float32; false if st is not a float type. */
bool cnn_convert_to_f32(float *dst, const void *src, cnn_dtype st, size_t n);

/* The activation shape the engine passes between layers: logical (N, C, H, W), stored NHWC. */
typedef struct cnn_shape {
    int n, c, h, w;
} cnn_shape;

static inline int64_t cnn_shape_numel(cnn_shape s) { return (int64_t)s.n * s.c * s.h * s.w; }

#endif
