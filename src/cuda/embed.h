/* embed.h -- the kernel sources carried inside the binary: the .cu and .cuh files of kernels/, turned into byte
 * arrays at build time by tools/embed.c ($(BUILD)/kernels_embed.c). */
#ifndef CNN_CUDA_EMBED_H
#define CNN_CUDA_EMBED_H

#include <stddef.h>

typedef struct cnn_embedded_file {
    const char *name;           /* base name: "conv2d.cu", "common.cuh" */
    const unsigned char *data;  /* len bytes followed by a NUL */
    size_t len;
} cnn_embedded_file;

extern const cnn_embedded_file cnn_kernel_files[];
extern const int cnn_kernel_file_count;

#endif
