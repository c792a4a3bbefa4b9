/* image.h — pictures in: JPEG and PNG decoded to 8-bit RGB, and torchvision's PIL-side transforms on them.
 *
 * Decoding gives what PIL's Image.open(f).convert('RGB') gives: grayscale is repeated into three channels,
 * palettes are looked up (transparency ignored), alpha is dropped (not composited), 16-bit samples keep their
 * high byte except 16-bit grayscale PNGs, which PIL opens as 32-bit integers and clips to 255 on conversion, and
 * CMYK JPEGs (Adobe-inverted, as PIL assumes) become r = (255-k) - (255-k)*c/255 in PIL's rounding. JPEG goes
 * through libjpeg-turbo's TurboJPEG API (accurate DCT, fancy upsampling: PIL's settings), PNG through libpng;
 * either may be missing from a build, and then decoding that format says so (CNN_E_UNSUPPORTED).
 *
 * Hostile files (testing.md G1, B3, B6): the size in the header is checked against max_pixels before any pixel
 * memory is allocated, a truncated JPEG is an error (as in PIL, not a grey bottom), progressive JPEGs with an
 * unreasonable number of scans are refused, and every failure is one line naming the file:
 *     photos/cat.jpg: truncated JPEG (Premature end of JPEG file)
 *
 * Resampling is PIL's BILINEAR Image.resize (a triangle filter widened by the scale factor when shrinking, so
 * it antialiases; coefficients in 22-bit fixed point; a horizontal pass rounded to uint8, then a vertical one),
 * which is what torchvision's Resize, CenterCrop and RandomResizedCrop do to a PIL image. A cnn_resample says
 * which region of the source is resized to which size and which window of the result is kept, so a
 * Resize(256) + CenterCrop(224) computes only the 224x224 pixels it keeps, each equal to PIL's.
 *
 *     cnn_image im;
 *     CNN_TRY(cnn_image_load("cat.jpg", CNN_IMAGE_MAX_PIXELS, &im));
 *     cnn_resample r = cnn_resample_eval(im.h, im.w, 256, 224, 224);      // Resize(256) + CenterCrop(224)
 *     uint8_t planes[3 * 224 * 224];
 *     CNN_TRY(cnn_image_resample(&im, &r, planes));                       // (3, 224, 224)
 *     cnn_image_free(&im);
 */
#ifndef CNN_IMAGE_H
#define CNN_IMAGE_H

#include "cnn/cnn.h"

/* PIL's DecompressionBombError threshold (2 x Image.MAX_IMAGE_PIXELS): larger images are refused. */
#define CNN_IMAGE_MAX_PIXELS 178956970ULL
/* Files larger than this are not read as images. */
#define CNN_IMAGE_MAX_BYTES ((size_t)1 << 30)

typedef enum cnn_image_format { CNN_IMAGE_UNKNOWN = 0, CNN_IMAGE_JPEG, CNN_IMAGE_PNG } cnn_image_format;

typedef struct cnn_image {
    int h, w;
    uint8_t *pix; /* (H, W, 3) RGB rows, malloc'd */
} cnn_image;

typedef struct cnn_image_info {
    cnn_image_format format;
    int h, w;
} cnn_image_info;

/* Whether this build decodes the format. */
bool cnn_image_format_built(cnn_image_format f);
const char *cnn_image_format_name(cnn_image_format f);
/* The format from the first bytes (magic numbers), CNN_IMAGE_UNKNOWN when neither. */
cnn_image_format cnn_image_sniff(const uint8_t *buf, size_t len);

/* Format and size from the header; no pixel memory is allocated. name is used in messages. */
cnn_status cnn_image_probe(const uint8_t *buf, size_t len, const char *name, uint64_t max_pixels, cnn_image_info *out);
/* Decode to RGB. scale (1, 2, 4 or 8) shrinks a JPEG in the DCT domain to ceil(H/scale) x ceil(W/scale) (faster;
 * not PIL's pixels); PNGs ignore it. On failure *out is zeroed. */
cnn_status cnn_image_decode(const uint8_t *buf, size_t len, const char *name, uint64_t max_pixels, int scale,
                            cnn_image *out);
/* Read an image file's bytes: a regular file (symlinks followed) of at most CNN_IMAGE_MAX_BYTES; a FIFO, device
 * or directory is refused before it is opened (opening a FIFO would block). */
cnn_status cnn_image_read(const char *path, uint8_t **buf, size_t *len);
/* Read a file (cnn_image_read) and decode it at full size. */
cnn_status cnn_image_load(const char *path, uint64_t max_pixels, cnn_image *out);
void cnn_image_free(cnn_image *im);

/* A resize of the region (y0, x0, rh, rw) of an image to out_h x out_w, of which the window of ch x cw pixels
 * at (wy, wx) is kept (pixels of the window outside the resized image are 0, as torchvision's CenterCrop pads),
 * flipped left-right when flip. */
typedef struct cnn_resample {
    int y0, x0, rh, rw; /* source region: PIL's crop before the resize */
    int out_h, out_w;   /* the size the region is resized to */
    int wy, wx, ch, cw; /* the window of the resized image that is kept */
    bool flip;
} cnn_resample;

/* torchvision's Resize(resize) + CenterCrop((crop_h, crop_w)) of an h x w image (the shorter side becomes
 * resize, the longer int(resize * long / short); resize 0 = no resize). */
cnn_resample cnn_resample_eval(int h, int w, int resize, int crop_h, int crop_w);
/* torchvision's RandomResizedCrop((out_h, out_w), scale=(scale_lo, 1), ratio=(3/4, 4/3)) and, when
 * flip_p > 0, RandomHorizontalFlip(flip_p): the same sampling procedure (10 tries, then the centre crop at the
 * nearest allowed ratio) with uniform draws from Philox(key, counter) instead of torch's generator. */
cnn_resample cnn_resample_random(int h, int w, int out_h, int out_w, float scale_lo, float flip_p, uint64_t key,
                                 uint64_t counter);
/* Run a resample: dst receives (3, ch, cw) uint8 planes. CNN_E_INVALID when the region is not inside the image
 * or a size is not positive; CNN_E_OOM. */
cnn_status cnn_image_resample(const cnn_image *src, const cnn_resample *r, uint8_t *dst);

#endif
