/* tensor.c — element types (names and sizes as safetensors spells them), half-precision conversions,
 * shape printing. */
#include "cnn/tensor.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;
} dtype_info[CNN_DTYPE_COUNT] = {
    [CNN_DTYPE_F32] = {"F32", 4},   [CNN_DTYPE_F16] = {"F16", 2},         [CNN_DTYPE_BF16] = {"BF16", 2},
    [CNN_DTYPE_F64] = {"F64", 8},   [CNN_DTYPE_I64] = {"I64", 8},         [CNN_DTYPE_I32] = {"I32", 4},
    [CNN_DTYPE_I16] = {"I16", 2},   [CNN_DTYPE_I8] = {"I8", 1},           [CNN_DTYPE_U8] = {"U8", 1},
    [CNN_DTYPE_U16] = {"U16", 2},   [CNN_DTYPE_U32] = {"U32", 4},         [CNN_DTYPE_U64] = {"U64", 8},
    [CNN_DTYPE_BOOL] = {"BOOL", 1}, [CNN_DTYPE_F8_E4M3] = {"F8_E4M3", 1}, [CNN_DTYPE_F8_E5M2] = {"F8_E5M2", 1},
};

size_t cnn_dtype_size(cnn_dtype t) { return (unsigned)t < CNN_DTYPE_COUNT ? dtype_info[t].size : 0; }
const char *cnn_dtype_name(cnn_dtype t) { return (unsigned)t < CNN_DTYPE_COUNT ? dtype_info[t].name : "?"; }

bool cnn_dtype_parse(const char *name, size_t len, cnn_dtype *out) {
    for (int i = 0; i < CNN_DTYPE_COUNT; i++) {
        if (strlen(dtype_info[i].name) == len && memcmp(dtype_info[i].name, name, len) == 0) {
            *out = (cnn_dtype)i;
            return true;
        }
    }
    return false;
}

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float cnn_bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

uint16_t cnn_f32_to_bf16(float f) {
    uint32_t u = f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);                                          /* round to nearest even */
    return (uint16_t)(u >> 16);
}

float cnn_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0) { /* zero or subnormal: man * 2^-24 */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    if (exp == 31) return u2f(sign | 0x7f800000u | (man << 13));
    return u2f(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t cnn_f32_to_f16(float f) {
    uint32_t u = f2u(f), sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);      /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);     /* rounds to >= 65520: Inf */
    if (a < 0x38800000u) {                                       /* below the smallest normal 2^-14 */
        float v = u2f(a) * 16777216.0f;                          /* in units of 2^-24 */
        return (uint16_t)(sign | (uint32_t)lrintf(v));           /* rint: round to nearest even */
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u);                  /* round mantissa to 10 bits, even */
    return (uint16_t)(sign | (((r >> 23) - 112u) << 10) | ((r >> 13) & 0x3ffu));
}

int64_t cnn_tensor_numel(const cnn_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

char *cnn_shape_str(const int64_t *shape, int ndim, char *buf, size_t cap) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, cap - o, "[");
    for (int i = 0; i < ndim && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
    return buf;
}

bool cnn_convert_to_f32(float *dst, const void *src, cnn_dtype st, size_t n) {
    switch (st) {
    case CNN_DTYPE_F32: memcpy(dst, src, n * 4); return true;
    case CNN_DTYPE_F64:
        for (size_t i = 0; i < n; i++) { double d; memcpy(&d, (const char *)src + 8 * i, 8); dst[i] = (float)d; }
        return true;
    case CNN_DTYPE_F16:
        for (size_t i = 0; i < n; i++) { uint16_t h; memcpy(&h, (const char *)src + 2 * i, 2); dst[i] = cnn_f16_to_f32(h); }
        return true;
    case CNN_DTYPE_BF16:
        for (size_t i = 0; i < n; i++) { uint16_t h; memcpy(&h, (const char *)src + 2 * i, 2); dst[i] = cnn_bf16_to_f32(h); }
        return true;
    default: return false;
    }
}
