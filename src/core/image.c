/* image.c — JPEG/PNG decoding to RGB as PIL's convert('RGB') makes it, and PIL's BILINEAR resample with
 * torchvision's Resize/CenterCrop/RandomResizedCrop on top (image.h has the contract). */
#include "cnn/image.h"
#include "cnn/backend.h"
#include "cnn/io.h"

#include <errno.h>
#include <limits.h>
#include <sys/stat.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef CNN_HAVE_JPEG
#include <turbojpeg.h>
#endif
#ifdef CNN_HAVE_PNG
#include <png.h>
#endif

static const uint8_t png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

bool cnn_image_format_built(cnn_image_format f) {
    switch (f) {
#ifdef CNN_HAVE_JPEG
    case CNN_IMAGE_JPEG: return true;
#endif
#ifdef CNN_HAVE_PNG
    case CNN_IMAGE_PNG: return true;
#endif
    default: return false;
    }
}

const char *cnn_image_format_name(cnn_image_format f) {
    return f == CNN_IMAGE_JPEG ? "JPEG" : f == CNN_IMAGE_PNG ? "PNG" : "unknown";
}

cnn_image_format cnn_image_sniff(const uint8_t *buf, size_t len) {
    if (len >= 3 && buf[0] == 0xff && buf[1] == 0xd8 && buf[2] == 0xff) return CNN_IMAGE_JPEG;
    if (len >= 8 && memcmp(buf, png_magic, 8) == 0) return CNN_IMAGE_PNG;
    return CNN_IMAGE_UNKNOWN;
}

/* A one-line reason for a file that is neither JPEG nor PNG. */
static cnn_status not_an_image(const uint8_t *buf, size_t len, const char *name) {
    if (len == 0) return cnn_fail(CNN_E_FORMAT, "%s: empty file (0 bytes), not an image", name);
    static const struct {
        const char *magic;
        size_t n;
        const char *what;
    } known[] = {
        {"GIF8", 4, "GIF"}, {"BM", 2, "BMP"}, {"II*\0", 4, "TIFF"}, {"MM\0*", 4, "TIFF"}, {"P6", 2, "PPM"},
        {"P5", 2, "PGM"},   {"RIFF", 4, "RIFF (WebP?)"},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (len >= known[i].n && memcmp(buf, known[i].magic, known[i].n) == 0)
            return cnn_fail(CNN_E_UNSUPPORTED, "%s: a %s image; only JPEG and PNG are decoded", name, known[i].what);
    return cnn_fail(CNN_E_FORMAT, "%s: not a JPEG or PNG image (first bytes %02x %02x %02x %02x)", name, buf[0],
                    len > 1 ? buf[1] : 0, len > 2 ? buf[2] : 0, len > 3 ? buf[3] : 0);
}

#if defined(CNN_HAVE_JPEG) || defined(CNN_HAVE_PNG)
static cnn_status check_size(const char *name, const char *fmt, uint64_t h, uint64_t w, uint64_t max_pixels) {
    uint64_t px;
    if (h < 1 || w < 1) return cnn_fail(CNN_E_FORMAT, "%s: %s header says %llux%llu pixels", name, fmt,
                                        (unsigned long long)w, (unsigned long long)h);
    if (!cnn_mul_ok(h, w, &px) || px > max_pixels || h > INT32_MAX / 4 || w > INT32_MAX / 4)
        return cnn_fail(CNN_E_FORMAT, "%s: %s of %llux%llu pixels is over the limit of %llu pixels", name, fmt,
                        (unsigned long long)w, (unsigned long long)h, (unsigned long long)max_pixels);
    return CNN_OK;
}

#endif

void cnn_image_free(cnn_image *im) {
    if (!im) return;
    free(im->pix);
    memset(im, 0, sizeof *im);
}

/* ---- JPEG ------------------------------------------------------------------------------------------------- */

#ifdef CNN_HAVE_JPEG
static cnn_status jpeg_error(tjhandle tj, const char *name, const char *what) {
    const char *msg = tjGetErrorStr2(tj);
    if (msg && strstr(msg, "Premature end")) return cnn_fail(CNN_E_FORMAT, "%s: truncated JPEG (%s)", name, msg);
    return cnn_fail(CNN_E_FORMAT, "%s: %s: %s", name, what, msg ? msg : "unknown libjpeg-turbo error");
}

/* PIL's CMYK -> RGB on Adobe-inverted samples (PIL reads every CMYK JPEG as "CMYK;I"): with c, k the inverted
 * samples, nk = 255 - k, out = nk - nk*c/255 rounded as PIL's MULDIV255. libjpeg's raw samples s are 255 - c. */
static uint8_t cmyk_channel(uint8_t raw_c, uint8_t raw_k) {
    int c = 255 - raw_c, nk = raw_k;
    int t = c * nk + 128;
    int v = nk - (((t >> 8) + t) >> 8);
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

static cnn_status jpeg_header(tjhandle tj, const uint8_t *buf, size_t len, const char *name, uint64_t max_pixels,
                              int *h, int *w, int *cs) {
    int sub = 0;
    if (len > (size_t)ULONG_MAX) return cnn_fail(CNN_E_FORMAT, "%s: JPEG too large", name);
    if (tjDecompressHeader3(tj, buf, (unsigned long)len, w, h, &sub, cs) != 0)
        return jpeg_error(tj, name, "bad JPEG header");
    return check_size(name, "JPEG", (uint64_t)*h, (uint64_t)*w, max_pixels);
}

static cnn_status jpeg_decode(const uint8_t *buf, size_t len, const char *name, uint64_t max_pixels, int scale,
                              cnn_image *out) {
    tjhandle tj = tjInitDecompress();
    if (!tj) return cnn_fail(CNN_E_OOM, "%s: cannot create a JPEG decompressor", name);
    int h = 0, w = 0, cs = 0;
    cnn_status st = jpeg_header(tj, buf, len, name, max_pixels, &h, &w, &cs);
    uint8_t *cmyk = NULL;
    if (st == CNN_OK) {
        int sh = h, sw = w;
        if (scale > 1) {
            tjscalingfactor sf = {1, scale};
            sh = TJSCALED(h, sf);
            sw = TJSCALED(w, sf);
        }
        bool four = cs == TJCS_CMYK || cs == TJCS_YCCK;
        size_t npix = (size_t)sh * (size_t)sw;
        out->pix = cnn_malloc(npix * 3, "decoded image");
        if (four) cmyk = cnn_malloc(npix * 4, "decoded CMYK image");
        if (!out->pix || (four && !cmyk)) st = CNN_E_OOM;
        /* TJFLAG_LIMITSCANS: progressive JPEGs of more than 500 scans are refused (a known decode-time bomb) */
        int flags = TJFLAG_LIMITSCANS | TJFLAG_STOPONWARNING;
        if (st == CNN_OK &&
            tjDecompress2(tj, buf, (unsigned long)len, four ? cmyk : out->pix, sw, 0, sh, four ? TJPF_CMYK : TJPF_RGB,
                          flags) != 0) {
            /* warnings (e.g. extraneous bytes between markers) are what PIL accepts too; only a premature end
             * is an error there; decode again without stopping so the whole image is produced */
            const char *msg = tjGetErrorStr2(tj);
            bool warning = tjGetErrorCode(tj) == TJERR_WARNING && msg && !strstr(msg, "Premature end");
            if (!warning || (tjDecompress2(tj, buf, (unsigned long)len, four ? cmyk : out->pix, sw, 0, sh,
                                           four ? TJPF_CMYK : TJPF_RGB, TJFLAG_LIMITSCANS) != 0 &&
                             tjGetErrorCode(tj) != TJERR_WARNING))
                st = jpeg_error(tj, name, "corrupt JPEG");
        }
        if (st == CNN_OK && four)
            for (size_t i = 0; i < npix; i++)
                for (int c = 0; c < 3; c++) out->pix[3 * i + c] = cmyk_channel(cmyk[4 * i + c], cmyk[4 * i + 3]);
        out->h = sh;
        out->w = sw;
    }
    free(cmyk);
    tjDestroy(tj);
    return st;
}
#endif

/* ---- PNG -------------------------------------------------------------------------------------------------- */

#ifdef CNN_HAVE_PNG
typedef struct png_src {
    const uint8_t *buf;
    size_t len, pos;
    const char *name;
    char msg[160];
} png_src;

static void png_on_error(png_structp png, png_const_charp msg) {
    png_src *s = png_get_error_ptr(png);
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg) {
    (void)png;
    (void)msg; /* ancillary-chunk problems: PIL decodes such files too */
}

static void png_read(png_structp png, png_bytep data, png_size_t n) {
    png_src *s = png_get_io_ptr(png);
    if (n > s->len - s->pos) png_error(png, "truncated PNG (file ends early)");
    memcpy(data, s->buf + s->pos, n);
    s->pos += n;
}

/* One decode (or, with out == NULL, a header read). Locals that change after setjmp are volatile. */
static cnn_status png_decode(const uint8_t *buf, size_t len, const char *name, uint64_t max_pixels, cnn_image *out,
                             cnn_image_info *info) {
    /* the size from IHDR (the first chunk) before libpng reads on to the first IDAT */
    if (len >= 24 && memcmp(buf + 12, "IHDR", 4) == 0) {
        uint64_t w = (uint64_t)buf[16] << 24 | (uint64_t)buf[17] << 16 | (uint64_t)buf[18] << 8 | buf[19];
        uint64_t h = (uint64_t)buf[20] << 24 | (uint64_t)buf[21] << 16 | (uint64_t)buf[22] << 8 | buf[23];
        CNN_TRY(check_size(name, "PNG", h, w, max_pixels));
    }
    png_src src = {.buf = buf, .len = len, .name = name};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_on_error, png_on_warning);
    png_infop pi = png ? png_create_info_struct(png) : NULL;
    if (!pi) {
        png_destroy_read_struct(png ? &png : NULL, NULL, NULL);
        return cnn_fail(CNN_E_OOM, "%s: cannot create a PNG decoder", name);
    }
    uint8_t *volatile raw = NULL;
    png_bytep *volatile rows = NULL;
    volatile cnn_status st = CNN_OK;
    if (setjmp(png_jmpbuf(png))) {
        if (st == CNN_OK) st = cnn_fail(CNN_E_FORMAT, "%s: corrupt PNG: %s", name, src.msg);
        goto done;
    }
    /* bound what libpng allocates for ancillary chunks, and the pixel count before any row memory */
    png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
    png_set_chunk_cache_max(png, 1000);
    png_set_chunk_malloc_max(png, (png_alloc_size_t)64 << 20);
    png_set_read_fn(png, &src, png_read);
    png_read_info(png, pi);
    png_uint_32 w = 0, h = 0;
    int depth = 0, ctype = 0, interlace = 0;
    png_get_IHDR(png, pi, &w, &h, &depth, &ctype, &interlace, NULL, NULL);
    if ((st = check_size(name, "PNG", h, w, max_pixels)) != CNN_OK) goto done;
    if (info) {
        info->format = CNN_IMAGE_PNG;
        info->h = (int)h;
        info->w = (int)w;
    }
    if (!out) goto done;
    /* PIL opens 16-bit grayscale as 32-bit integers ("I") and convert('RGB') clips them at 255; every other
     * 16-bit layout keeps the high byte. Read that one case at 16 bits and clip it here. */
    bool gray16 = ctype == PNG_COLOR_TYPE_GRAY && depth == 16;
    if (ctype == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (ctype == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (depth == 16 && !gray16) png_set_strip_16(png);
    /* alpha (and a tRNS chunk, which the palette expansion turns into alpha) is dropped, not composited */
    if ((ctype & PNG_COLOR_MASK_ALPHA) || png_get_valid(png, pi, PNG_INFO_tRNS)) png_set_strip_alpha(png);
    if (gray16) png_set_swap(png); /* host-order uint16 on little-endian machines; checked below */
    if (interlace != PNG_INTERLACE_NONE) png_set_interlace_handling(png);
    png_read_update_info(png, pi);
    int channels = png_get_channels(png, pi);
    size_t rowbytes = png_get_rowbytes(png, pi);
    size_t want = (size_t)w * (size_t)channels * (gray16 ? 2 : 1);
    if (rowbytes != want || (channels != 1 && channels != 3)) {
        st = cnn_fail(CNN_E_FORMAT, "%s: PNG of colour type %d, depth %d gives %d channels per pixel", name, ctype,
                      depth, channels);
        goto done;
    }
    raw = cnn_malloc(rowbytes * h, "decoded PNG");
    rows = cnn_malloc(sizeof(png_bytep) * h, "PNG rows");
    out->pix = cnn_malloc((size_t)w * h * 3, "decoded image");
    if (!raw || !rows || !out->pix) {
        st = CNN_E_OOM;
        goto done;
    }
    for (png_uint_32 y = 0; y < h; y++) rows[y] = raw + (size_t)y * rowbytes;
    png_read_image(png, rows);
    png_read_end(png, NULL);
    size_t npix = (size_t)w * h;
    if (channels == 3) {
        memcpy(out->pix, raw, npix * 3);
    } else {
        for (size_t i = 0; i < npix; i++) {
            uint8_t v;
            if (gray16) {
                uint16_t s;
                memcpy(&s, raw + 2 * i, 2);
                v = (uint8_t)(s > 255 ? 255 : s);
            } else {
                v = raw[i];
            }
            out->pix[3 * i] = out->pix[3 * i + 1] = out->pix[3 * i + 2] = v;
        }
    }
    out->h = (int)h;
    out->w = (int)w;
done:
    png_destroy_read_struct(&png, &pi, NULL);
    free(raw);
    free(rows);
    return st;
}
#endif

/* ---- entry points ----------------------------------------------------------------------------------------- */

static cnn_status unsupported(cnn_image_format f, const char *name) {
    return cnn_fail(CNN_E_UNSUPPORTED, "%s: %s support was not built (install %s and rebuild)", name,
                    cnn_image_format_name(f), f == CNN_IMAGE_JPEG ? "libturbojpeg0-dev" : "libpng-dev");
}

cnn_status cnn_image_probe(const uint8_t *buf, size_t len, const char *name, uint64_t max_pixels, cnn_image_info *out) {
    memset(out, 0, sizeof *out);
    cnn_image_format f = cnn_image_sniff(buf, len);
    if (f == CNN_IMAGE_UNKNOWN) return not_an_image(buf, len, name);
    if (!cnn_image_format_built(f)) return unsupported(f, name);
#ifdef CNN_HAVE_JPEG
    if (f == CNN_IMAGE_JPEG) {
        tjhandle tj = tjInitDecompress();
        if (!tj) return cnn_fail(CNN_E_OOM, "%s: cannot create a JPEG decompressor", name);
        int cs = 0;
        cnn_status st = jpeg_header(tj, buf, len, name, max_pixels, &out->h, &out->w, &cs);
        tjDestroy(tj);
        out->format = CNN_IMAGE_JPEG;
        return st;
    }
#endif
#ifdef CNN_HAVE_PNG
    if (f == CNN_IMAGE_PNG) return png_decode(buf, len, name, max_pixels, NULL, out);
#endif
    (void)max_pixels;
    return unsupported(f, name);
}

cnn_status cnn_image_decode(const uint8_t *buf, size_t len, const char *name, uint64_t max_pixels, int scale,
                            cnn_image *out) {
    memset(out, 0, sizeof *out);
    if (scale != 1 && scale != 2 && scale != 4 && scale != 8)
        return cnn_fail(CNN_E_INVALID, "%s: decode scale 1/%d (expected 1, 2, 4 or 8)", name, scale);
    cnn_image_format f = cnn_image_sniff(buf, len);
    if (f == CNN_IMAGE_UNKNOWN) return not_an_image(buf, len, name);
    if (!cnn_image_format_built(f)) return unsupported(f, name);
    cnn_status st = CNN_E_UNSUPPORTED;
#ifdef CNN_HAVE_JPEG
    if (f == CNN_IMAGE_JPEG) st = jpeg_decode(buf, len, name, max_pixels, scale, out);
#endif
#ifdef CNN_HAVE_PNG
    if (f == CNN_IMAGE_PNG) st = png_decode(buf, len, name, max_pixels, out, NULL);
#endif
    (void)max_pixels;
    if (st != CNN_OK) cnn_image_free(out);
    return st;
}

cnn_status cnn_image_read(const char *path, uint8_t **buf, size_t *len) {
    struct stat sb;
    if (stat(path, &sb) != 0) return cnn_fail(CNN_E_IO, "%s: cannot open: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) return cnn_fail(CNN_E_IO, "%s: not a regular file", path);
    return cnn_read_file(path, CNN_IMAGE_MAX_BYTES, buf, len);
}

cnn_status cnn_image_load(const char *path, uint64_t max_pixels, cnn_image *out) {
    memset(out, 0, sizeof *out);
    uint8_t *buf;
    size_t len;
    CNN_TRY(cnn_image_read(path, &buf, &len));
    cnn_status st = cnn_image_decode(buf, len, path, max_pixels, 1, out);
    free(buf);
    return st;
}

/* ---- PIL's BILINEAR resample ------------------------------------------------------------------------------ */

#define PREC_BITS 22 /* PIL's PRECISION_BITS for 8-bit images: 32 - 8 - 2 */

/* Triangle filter of support 1 (PIL's bilinear_filter). */
static double tri(double x) {
    if (x < 0) x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* PIL's precompute_coeffs for outputs [first, first + count) of a resize of [0, in_size) to out_size: for each
 * output, the first input it reads (bounds[2i]), how many (bounds[2i+1]) and their fixed-point weights
 * (kk[i * ksize + j]). Returns ksize. */
static int coeffs(int in_size, int out_size, int first, int count, int *bounds, int32_t *kk) {
    double scale = (double)in_size / out_size, filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 1.0 * filterscale;
    int ksize = (int)ceil(support) * 2 + 1;
    double *k = malloc(sizeof *k * (size_t)ksize);
    CNN_ASSERT(k);
    for (int i = 0; i < count; i++) {
        int xx = first + i;
        double center = (xx + 0.5) * scale, ww = 0.0, ss = 1.0 / filterscale;
        int xmin = (int)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int xmax = (int)(center + support + 0.5);
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        int x = 0;
        for (; x < xmax; x++) {
            double w = tri((x + xmin - center + 0.5) * ss);
            k[x] = w;
            ww += w;
        }
        for (x = 0; x < xmax; x++)
            if (ww != 0.0) k[x] /= ww;
        for (; x < ksize; x++) k[x] = 0;
        for (x = 0; x < ksize; x++)
            kk[(size_t)i * ksize + x] = (int32_t)(k[x] < 0 ? -0.5 + k[x] * (1 << PREC_BITS) : 0.5 + k[x] * (1 << PREC_BITS));
        bounds[2 * i] = xmin;
        bounds[2 * i + 1] = xmax;
    }
    free(k);
    return ksize;
}

static uint8_t clip8(int32_t v) {
    v >>= PREC_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

cnn_resample cnn_resample_eval(int h, int w, int resize, int crop_h, int crop_w) {
    cnn_resample r = {.y0 = 0, .x0 = 0, .rh = h, .rw = w, .out_h = h, .out_w = w, .ch = crop_h, .cw = crop_w};
    if (resize > 0) {
        int sh = w <= h ? w : h, lg = w <= h ? h : w;
        int nl = (int)((double)resize * lg / sh);
        r.out_w = w <= h ? resize : nl;
        r.out_h = w <= h ? nl : resize;
    }
    /* CenterCrop: zero padding where the crop is larger, else round((size - crop) / 2) half to even */
    r.wy = crop_h > r.out_h ? -((crop_h - r.out_h) / 2) : (int)rint((r.out_h - crop_h) / 2.0);
    r.wx = crop_w > r.out_w ? -((crop_w - r.out_w) / 2) : (int)rint((r.out_w - crop_w) / 2.0);
    return r;
}

cnn_resample cnn_resample_random(int h, int w, int out_h, int out_w, float scale_lo, float flip_p, uint64_t key,
                                 uint64_t counter) {
    cnn_resample r = {.out_h = out_h, .out_w = out_w, .ch = out_h, .cw = out_w};
    double area = (double)h * w, lr0 = log(3.0 / 4.0), lr1 = log(4.0 / 3.0);
    bool found = false;
    for (int t = 0; t < 10 && !found; t++) {
        uint32_t q[4];
        cnn_philox(key, counter, (uint64_t)t, q);
        double target = area * (scale_lo + (1.0 - scale_lo) * cnn_u01(q[0]));
        double ar = exp(lr0 + (lr1 - lr0) * cnn_u01(q[1]));
        int cw = (int)rint(sqrt(target * ar)), ch = (int)rint(sqrt(target / ar));
        if (cw > 0 && cw <= w && ch > 0 && ch <= h) {
            r.y0 = (int)(q[2] % (uint32_t)(h - ch + 1));
            r.x0 = (int)(q[3] % (uint32_t)(w - cw + 1));
            r.rh = ch;
            r.rw = cw;
            found = true;
        }
    }
    if (!found) {
        double in_ratio = (double)w / h;
        int cw = w, ch = h;
        if (in_ratio < 3.0 / 4.0) ch = (int)rint(w / (3.0 / 4.0));
        else if (in_ratio > 4.0 / 3.0) cw = (int)rint(h * (4.0 / 3.0));
        r.rh = ch < 1 ? 1 : ch;
        r.rw = cw < 1 ? 1 : cw;
        r.y0 = (h - r.rh) / 2;
        r.x0 = (w - r.rw) / 2;
    }
    if (flip_p > 0) {
        uint32_t q[4];
        cnn_philox(key, counter, 10, q);
        r.flip = cnn_u01(q[0]) < flip_p;
    }
    return r;
}

cnn_status cnn_image_resample(const cnn_image *src, const cnn_resample *r, uint8_t *dst) {
    if (r->rh < 1 || r->rw < 1 || r->out_h < 1 || r->out_w < 1 || r->ch < 1 || r->cw < 1 || r->y0 < 0 || r->x0 < 0 ||
        r->y0 > src->h - r->rh || r->x0 > src->w - r->rw)
        return cnn_fail(CNN_E_INVALID, "resample of region %dx%d at (%d, %d) of a %dx%d image to %dx%d, window %dx%d",
                        r->rw, r->rh, r->x0, r->y0, src->w, src->h, r->out_w, r->out_h, r->cw, r->ch);
    /* the part of the window inside the resized image; the rest is padding (0) */
    int ya = r->wy < 0 ? 0 : r->wy, yb = r->wy + r->ch > r->out_h ? r->out_h : r->wy + r->ch;
    int xa = r->wx < 0 ? 0 : r->wx, xb = r->wx + r->cw > r->out_w ? r->out_w : r->wx + r->cw;
    size_t plane = (size_t)r->ch * r->cw;
    if (ya >= yb || xa >= xb || ya != r->wy || xa != r->wx || yb != r->wy + r->ch || xb != r->wx + r->cw)
        memset(dst, 0, plane * 3);
    if (ya >= yb || xa >= xb) return CNN_OK;
    int ny = yb - ya, nx = xb - xa;
    bool need_h = r->out_w != r->rw, need_v = r->out_h != r->rh;
    int ksx = (int)ceil((double)r->rw / r->out_w < 1 ? 1 : (double)r->rw / r->out_w) * 2 + 1;
    int ksy = (int)ceil((double)r->rh / r->out_h < 1 ? 1 : (double)r->rh / r->out_h) * 2 + 1;
    int *bx = malloc(sizeof(int) * 2 * (size_t)nx), *by = malloc(sizeof(int) * 2 * (size_t)ny);
    int32_t *kx = malloc(sizeof(int32_t) * (size_t)nx * ksx), *ky = malloc(sizeof(int32_t) * (size_t)ny * ksy);
    uint8_t *tmp = NULL;
    cnn_status st = bx && by && kx && ky ? CNN_OK : cnn_fail(CNN_E_OOM, "out of memory resampling an image");
    if (st == CNN_OK) {
        if (need_h) CNN_ASSERT(coeffs(r->rw, r->out_w, xa, nx, bx, kx) == ksx);
        if (need_v) CNN_ASSERT(coeffs(r->rh, r->out_h, ya, ny, by, ky) == ksy);
        /* rows of the region the vertical pass reads */
        int r0 = need_v ? by[0] : ya, r1 = need_v ? by[2 * (ny - 1)] + by[2 * (ny - 1) + 1] : yb;
        size_t stride = (size_t)src->w * 3;
        const uint8_t *base = src->pix + (size_t)r->y0 * stride + (size_t)r->x0 * 3;
        tmp = malloc((size_t)(r1 - r0) * nx * 3);
        if (!tmp) st = cnn_fail(CNN_E_OOM, "out of memory resampling an image");
        for (int y = r0; st == CNN_OK && y < r1; y++) {
            const uint8_t *row = base + (size_t)y * stride;
            uint8_t *o = tmp + (size_t)(y - r0) * nx * 3;
            for (int i = 0; i < nx; i++) {
                if (!need_h) {
                    memcpy(o + 3 * i, row + (size_t)(xa + i) * 3, 3);
                    continue;
                }
                const int32_t *k = kx + (size_t)i * ksx;
                const uint8_t *p = row + (size_t)bx[2 * i] * 3;
                int32_t s0 = 1 << (PREC_BITS - 1), s1 = s0, s2 = s0;
                for (int j = 0; j < bx[2 * i + 1]; j++) {
                    s0 += p[3 * j] * k[j];
                    s1 += p[3 * j + 1] * k[j];
                    s2 += p[3 * j + 2] * k[j];
                }
                o[3 * i] = clip8(s0);
                o[3 * i + 1] = clip8(s1);
                o[3 * i + 2] = clip8(s2);
            }
        }
        for (int j = 0; st == CNN_OK && j < ny; j++) {
            int oy = ya + j - r->wy;
            for (int i = 0; i < nx; i++) {
                int ox = xa + i - r->wx, dx = r->flip ? r->cw - 1 - ox : ox;
                uint8_t v[3];
                if (!need_v) {
                    memcpy(v, tmp + ((size_t)(ya + j - r0) * nx + i) * 3, 3);
                } else {
                    const int32_t *k = ky + (size_t)j * ksy;
                    const uint8_t *p = tmp + ((size_t)(by[2 * j] - r0) * nx + i) * 3;
                    int32_t s0 = 1 << (PREC_BITS - 1), s1 = s0, s2 = s0;
                    for (int t = 0; t < by[2 * j + 1]; t++) {
                        const uint8_t *q = p + (size_t)t * nx * 3;
                        s0 += q[0] * k[t];
                        s1 += q[1] * k[t];
                        s2 += q[2] * k[t];
                    }
                    v[0] = clip8(s0);
                    v[1] = clip8(s1);
                    v[2] = clip8(s2);
                }
                for (int c = 0; c < 3; c++) dst[c * plane + (size_t)oy * r->cw + dx] = v[c];
            }
        }
    }
    free(bx);
    free(by);
    free(kx);
    free(ky);
    free(tmp);
    return st;
}
