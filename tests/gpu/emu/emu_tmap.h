/* emu_tmap.h -- the emulator's tensor maps: what its cuTensorMapEncodeTiled / cuTensorMapEncodeIm2col
 * (emu_cuda.cc) write into a CUtensorMap's 128 bytes, and the copy a TMA load instruction makes from one
 * (emu_tma_load, called by kernels/common.cuh's tma_load_* when compiled for the emulator, through emu.h), and the
 * copy a TMA store makes to one (emu_tma_store, tma_store_tile_2d).
 * Only what the engine encodes is modelled: 2-byte or 4-byte elements, rank 2 or 3 (tiled) or 4 (im2col, NHWC),
 * no interleave, no swizzle or the 128-byte swizzle with 128-byte box rows, zeros outside the tensor.
 * Test infrastructure only. */
#ifndef CNN_EMU_TMAP_H
#define CNN_EMU_TMAP_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { EMU_TMAP_TILED = 1, EMU_TMAP_IM2COL = 2 };

typedef struct emu_tensor_map {
    uint8_t kind, rank, elem, swizzle128; /* EMU_TMAP_*, dimensions, bytes per element, 128-byte swizzle */
    uint16_t cpp, ppc;                    /* im2col: channels per pixel, pixels per column */
    const unsigned char *base;
    uint32_t dim[4];                      /* innermost first */
    uint64_t stride[3];                   /* bytes between consecutive indices of dims 1..3 */
    uint32_t box[4];                      /* tiled: the box (innermost first) */
    uint32_t estride[4];                  /* traversal strides */
    int32_t lower[2], upper[2];           /* im2col: the bounding box corners (W, H) */
} emu_tensor_map;
static_assert(sizeof(emu_tensor_map) <= 128, "a CUtensorMap is 128 bytes");

/* byte offset of byte b of box row `row` in shared memory */
static inline size_t emu_tmap_dst(const emu_tensor_map *m, size_t row_bytes, uint32_t row, size_t b) {
    if (!m->swizzle128) return row * row_bytes + b;
    return row * 128 + (((b >> 4) ^ (row & 7)) << 4) + (b & 15);
}

/* the copy of one load at coordinates coord (innermost first; im2col: c, w, h, n plus the offsets); returns the
 * bytes it delivers (the whole box, zeros included) */
static inline unsigned emu_tma_load(const emu_tensor_map *m, unsigned char *dst, const int *coord, int off_w, int off_h) {
    const size_t e = m->elem;
    if (m->kind == EMU_TMAP_TILED) {
        /* box rows in order: dimension 1 fastest, then dimension 2 (rank 3, 4), then 3 (rank 4) */
        const size_t row_bytes = m->box[0] * e;
        const uint32_t box2 = m->rank >= 3 ? m->box[2] : 1, box3 = m->rank == 4 ? m->box[3] : 1;
        for (uint32_t i3 = 0; i3 < box3; i3++)
            for (uint32_t i2 = 0; i2 < box2; i2++)
                for (uint32_t i = 0; i < m->box[1]; i++)
                    for (uint32_t j = 0; j < m->box[0]; j++) {
                        const int64_t x0 = (int64_t)coord[0] + j, x1 = (int64_t)coord[1] + i, x2 = (int64_t)coord[2] + i2,
                                      x3 = (int64_t)coord[3] + i3;
                        const bool in = x0 >= 0 && x0 < m->dim[0] && x1 >= 0 && x1 < m->dim[1] &&
                                        (m->rank < 3 || (x2 >= 0 && x2 < m->dim[2])) &&
                                        (m->rank < 4 || (x3 >= 0 && x3 < m->dim[3]));
                        unsigned char *d = dst + emu_tmap_dst(m, row_bytes, (i3 * box2 + i2) * m->box[1] + i, j * e);
                        const size_t off = (size_t)x1 * m->stride[0] + (m->rank >= 3 ? (size_t)x2 * m->stride[1] : 0) +
                                           (m->rank == 4 ? (size_t)x3 * m->stride[2] : 0);
                        if (in) memcpy(d, m->base + off + (size_t)x0 * e, e);
                        else memset(d, 0, e);
                    }
        return (unsigned)(m->box[0] * m->box[1] * box2 * box3 * e);
    }
    /* im2col: pixel positions of the bounding box in W, H (traversal strides), then images */
    const int64_t sw = m->estride[1], sh = m->estride[2];
    const int64_t nq = ((int64_t)m->dim[1] - 1 + m->upper[0] - m->lower[0]) / sw + 1;
    const int64_t np = ((int64_t)m->dim[2] - 1 + m->upper[1] - m->lower[1]) / sh + 1;
    const int64_t q0 = (coord[1] - m->lower[0]) / sw, p0 = (coord[2] - m->lower[1]) / sh;
    if (coord[1] < m->lower[0] || (coord[1] - m->lower[0]) % sw || q0 >= nq || coord[2] < m->lower[1] ||
        (coord[2] - m->lower[1]) % sh || p0 >= np || coord[3] < 0) {
        fprintf(stderr, "emu: im2col load with its filter base (%d, %d) off the bounding box's pixels\n", coord[1], coord[2]);
        abort();
    }
    const int64_t first = ((int64_t)coord[3] * np + p0) * nq + q0;
    const size_t row_bytes = m->cpp * e;
    for (uint32_t i = 0; i < m->ppc; i++) {
        const int64_t lin = first + i, n = lin / (np * nq), pq = lin % (np * nq);
        const int64_t w = m->lower[0] + (pq % nq) * sw + off_w, h = m->lower[1] + (pq / nq) * sh + off_h;
        for (uint32_t j = 0; j < m->cpp; j++) {
            const int64_t c = (int64_t)coord[0] + j;
            const bool in = c >= 0 && c < m->dim[0] && w >= 0 && w < m->dim[1] && h >= 0 && h < m->dim[2] && n < m->dim[3];
            unsigned char *d = dst + emu_tmap_dst(m, row_bytes, i, j * e);
            if (in) memcpy(d, m->base + (size_t)n * m->stride[2] + (size_t)h * m->stride[1] + (size_t)w * m->stride[0] + (size_t)c * e, e);
            else memset(d, 0, e);
        }
    }
    return (unsigned)(m->ppc * m->cpp * e);
}

/* the copy of one store of a tiled map's box from shared memory (src) at coordinates coord: the elements inside
 * the tensor, and nothing outside it */
static inline void emu_tma_store(const emu_tensor_map *m, const unsigned char *src, const int *coord) {
    if (m->kind != EMU_TMAP_TILED) {
        fputs("emu: a TMA store through an im2col map\n", stderr);
        abort();
    }
    const size_t e = m->elem, row_bytes = m->box[0] * e;
    for (uint32_t i = 0; i < m->box[1]; i++)
        for (uint32_t j = 0; j < m->box[0]; j++) {
            const int64_t x0 = (int64_t)coord[0] + j, x1 = (int64_t)coord[1] + i;
            if (x0 >= 0 && x0 < m->dim[0] && x1 >= 0 && x1 < m->dim[1])
                memcpy((unsigned char *)m->base + (size_t)x1 * m->stride[0] + (size_t)x0 * e,
                       src + emu_tmap_dst(m, row_bytes, i, j * e), e);
        }
}

#endif
