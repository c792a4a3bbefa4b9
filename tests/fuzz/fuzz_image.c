/* fuzz_image.c — libFuzzer target of testing.md B3: any byte string goes through the image path of folder datasets
 * and `cnn infer`: cnn_image_probe, cnn_image_decode at full size and at 1/2 (JPEG DCT scaling), then the eval
 * transform (Resize + CenterCrop) and a RandomResizedCrop + flip on the decoded image, with every output byte
 * touched. The pixel cap is lowered to 16 kpixel: no input can make it allocate or decode much, a header claiming
 * more takes the cap's refusal, and the decoders run the same code at any size (at 4 Mpixel, headers mutated to
 * large sizes had every execution decode megapixels: ~500 executions a second against ~5,800 here). A
 * decode must agree with the probe on format and size; failures leave a message and a zeroed image. A broken
 * promise traps. With -DFUZZ_MAKE_SEEDS: writes small JPEGs and PNGs (RGB, gray, palette, 16-bit, interlaced,
 * progressive, CMYK) made by libjpeg-turbo and libpng, plus a truncated copy of each. */
#include "cnn/image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REQUIRE(cond)                                                                                                  \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "fuzz_image: broken promise at line %d: %s\n", __LINE__, #cond);                           \
            __builtin_trap();                                                                                          \
        }                                                                                                              \
    } while (0)

#define CAP (1u << 14)

#ifndef FUZZ_MAKE_SEEDS
static void transforms(const cnn_image *im, uint32_t salt) {
    static uint8_t out[3 * 40 * 36];
    cnn_resample r[2] = {cnn_resample_eval(im->h, im->w, 1 + (int)(salt % 48), 40, 36),
                         cnn_resample_random(im->h, im->w, 40, 36, 0.08f, 0.5f, salt, 1)};
    for (int k = 0; k < 2; k++) {
        memset(out, 0xa5, sizeof out);
        REQUIRE(cnn_image_resample(im, &r[k], out) == CNN_OK);
        volatile uint8_t sink = 0;
        for (size_t i = 0; i < sizeof out; i++) sink ^= out[i];
        (void)sink;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cnn_image_info info;
    cnn_error_clear();
    cnn_status ps = cnn_image_probe(data, size, "fuzz", CAP, &info);
    if (ps != CNN_OK) REQUIRE(cnn_error_msg()[0] != 0);
    for (int scale = 1; scale <= 2; scale++) {
        cnn_image im;
        cnn_error_clear();
        cnn_status st = cnn_image_decode(data, size, "fuzz", CAP, scale, &im);
        if (st != CNN_OK) {
            REQUIRE(cnn_error_msg()[0] != 0 && !im.pix && im.h == 0 && im.w == 0);
            continue;
        }
        REQUIRE(ps == CNN_OK && im.pix && im.h >= 1 && im.w >= 1 && (uint64_t)im.h * im.w <= CAP);
        if (scale == 1 || info.format == CNN_IMAGE_PNG) REQUIRE(im.h == info.h && im.w == info.w);
        else REQUIRE(im.h == (info.h + 1) / 2 && im.w == (info.w + 1) / 2);
        volatile uint8_t sink = 0;
        for (size_t i = 0; i < (size_t)im.h * im.w * 3; i++) sink ^= im.pix[i];
        (void)sink;
        transforms(&im, (uint32_t)size * 2654435761u);
        cnn_image_free(&im);
    }
    return 0;
}
#else
#include <png.h>
#include <turbojpeg.h>

static const char *dir;

static void put(const char *name, const uint8_t *b, size_t n) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(b, 1, n, f) != n) exit(1);
    fclose(f);
    snprintf(p, sizeof p, "%s/%s.truncated", dir, name);
    f = fopen(p, "wb");
    if (!f || fwrite(b, 1, n * 2 / 3, f) != n * 2 / 3) exit(1);
    fclose(f);
}

static void jpeg(const char *name, int w, int h, int pf, int sub, int flags) {
    uint8_t *px = malloc((size_t)w * h * 4), *out = NULL;
    for (int i = 0; i < w * h * 4; i++) px[i] = (uint8_t)(i * 7 + i / 13);
    unsigned long n = 0;
    tjhandle tj = tjInitCompress();
    if (!tj || tjCompress2(tj, px, w, 0, h, pf, &out, &n, sub, 85, flags) != 0) exit(1);
    put(name, out, n);
    tjFree(out);
    tjDestroy(tj);
    free(px);
}

static void png(const char *name, int w, int h, int depth, int ctype, int interlace) {
    png_image unused;
    (void)unused;
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    png_structp s = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop i = png_create_info_struct(s);
    if (!f || !s || !i || setjmp(png_jmpbuf(s))) exit(1);
    png_init_io(s, f);
    png_set_IHDR(s, i, (png_uint_32)w, (png_uint_32)h, depth, ctype, interlace, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    if (ctype == PNG_COLOR_TYPE_PALETTE) {
        png_color pal[16];
        for (int k = 0; k < 16; k++) pal[k].red = (png_byte)(k * 16), pal[k].green = (png_byte)(255 - k * 9), pal[k].blue = 7;
        png_set_PLTE(s, i, pal, 16);
        png_byte tr[2] = {0, 128};
        png_set_tRNS(s, i, tr, 2, NULL);
    }
    png_write_info(s, i);
    int ch = ctype == PNG_COLOR_TYPE_RGB ? 3 : ctype == PNG_COLOR_TYPE_RGBA ? 4 : ctype == PNG_COLOR_TYPE_GRAY_ALPHA ? 2 : 1;
    size_t row = ((size_t)w * ch * depth + 7) / 8;
    png_bytep r = malloc(row);
    int passes = png_set_interlace_handling(s);
    for (int pass = 0; pass < passes; pass++)
        for (int y = 0; y < h; y++) {
            for (size_t k = 0; k < row; k++) r[k] = (png_byte)((k * 5 + (size_t)y * 3) & (ctype == PNG_COLOR_TYPE_PALETTE ? 0x77 : 0xff));
            png_write_row(s, r);
        }
    png_write_end(s, i);
    png_destroy_write_struct(&s, &i);
    fclose(f);
    free(r);
    uint8_t buf[1 << 16];
    f = fopen(p, "rb");
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    put(name, buf, n);
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    dir = argv[1];
    jpeg("rgb420.jpg", 19, 13, TJPF_RGB, TJSAMP_420, 0);
    jpeg("rgb444_prog.jpg", 9, 21, TJPF_RGB, TJSAMP_444, TJFLAG_PROGRESSIVE);
    jpeg("gray.jpg", 17, 5, TJPF_GRAY, TJSAMP_GRAY, 0);
    jpeg("cmyk.jpg", 8, 8, TJPF_CMYK, TJSAMP_444, 0);
    png("rgb8.png", 11, 7, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE);
    png("rgba16_interlaced.png", 9, 9, 16, PNG_COLOR_TYPE_RGBA, PNG_INTERLACE_ADAM7);
    png("gray16.png", 5, 6, 16, PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE);
    png("gray2.png", 13, 3, 2, PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE);
    png("palette4_trns.png", 7, 7, 4, PNG_COLOR_TYPE_PALETTE, PNG_INTERLACE_NONE);
    png("gray_alpha8.png", 3, 4, 8, PNG_COLOR_TYPE_GRAY_ALPHA, PNG_INTERLACE_NONE);
    return 0;
}
#endif
