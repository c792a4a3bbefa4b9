/* cmd_pictures.c — `cnn infer --input` on pictures: JPEG/PNG files and folders of them, prepared as
 * torchvision's eval transform (Resize + CenterCrop + ToTensor + Normalize), classified in batches; the top
 * classes of each image with their names and softmax probabilities as text, JSON or CSV. */
#include "cli.h"
#include "cnn/image.h"
#include "cnn/io.h"
#include "cnn/safetensors.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#define MAX_CLASS_FILE ((size_t)64 << 20)

bool cli_is_pictures(const char *input) {
    if (strchr(input, ',')) return true;
    struct stat sb;
    if (stat(input, &sb) == 0 && S_ISDIR(sb.st_mode)) return true;
    size_t n = strlen(input);
    /* torchvision's image extensions: the ones we do not decode then get a clear "only JPEG and PNG" */
    static const char *const exts[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"};
    for (size_t i = 0; i < sizeof exts / sizeof exts[0]; i++) {
        size_t e = strlen(exts[i]);
        if (n >= e && strcasecmp(input + n - e, exts[i]) == 0) return true;
    }
    FILE *f = fopen(input, "rb");
    uint8_t head[8] = {0};
    size_t got = f ? fread(head, 1, sizeof head, f) : 0;
    if (f) fclose(f);
    return cnn_image_sniff(head, got) != CNN_IMAGE_UNKNOWN;
}

/* The comma-separated list of files and folders, folders expanded in ImageFolder's order. */
static cnn_status expand_inputs(const char *input, cnn_bad_image on_bad, char ***out, int *count) {
    char **all = NULL;
    int n = 0, cap = 0;
    cnn_status st = CNN_OK;
    char *copy = strdup(input);
    if (!copy) return cnn_fail(CNN_E_OOM, "out of memory");
    for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok && st == CNN_OK; tok = strtok_r(NULL, ",", &save)) {
        struct stat sb;
        char **list = NULL;
        int k = 0;
        if (stat(tok, &sb) == 0 && S_ISDIR(sb.st_mode)) {
            st = cnn_list_images(tok, on_bad, &list, &k);
            if (st == CNN_OK && k == 0) st = cnn_fail(CNN_E_IO, "%s: no image files (.jpg .jpeg .png ...) in this folder", tok);
        } else {
            list = malloc(sizeof *list);
            if (list && (list[0] = strdup(tok))) k = 1;
            else st = cnn_fail(CNN_E_OOM, "out of memory");
        }
        if (st == CNN_OK && n + k > cap) {
            cap = (n + k) * 2;
            char **t = realloc(all, sizeof *t * (size_t)cap);
            if (!t) st = cnn_fail(CNN_E_OOM, "out of memory");
            else all = t;
        }
        for (int i = 0; i < k; i++) {
            if (st == CNN_OK) all[n++] = list[i];
            else free(list[i]);
        }
        free(list);
    }
    free(copy);
    if (st == CNN_OK && n == 0) st = cnn_fail(CNN_E_INVALID, "--input '%s' names no image", input);
    if (st != CNN_OK) {
        for (int i = 0; i < n; i++) free(all[i]);
        free(all);
        return st;
    }
    *out = all;
    *count = n;
    return CNN_OK;
}

/* One name per line (trailing CR and blank last line ignored); at least `need` lines. */
static cnn_status read_classes(const char *path, int need, char **text, char ***names) {
    uint8_t *buf;
    size_t len;
    CNN_TRY(cnn_read_file(path, MAX_CLASS_FILE, &buf, &len));
    int n = 0;
    for (size_t i = 0; i < len; i++) n += buf[i] == '\n';
    char **v = calloc((size_t)n + 1, sizeof *v);
    if (!v) {
        free(buf);
        return cnn_fail(CNN_E_OOM, "out of memory reading %s", path);
    }
    int k = 0;
    for (char *p = (char *)buf; p < (char *)buf + len && k <= n;) {
        char *e = strchr(p, '\n');
        if (e) *e = 0;
        size_t l = strlen(p);
        if (l && p[l - 1] == '\r') p[l - 1] = 0;
        v[k++] = p;
        if (!e) break;
        p = e + 1;
    }
    while (k > 0 && !v[k - 1][0]) k--;
    if (k < need) {
        free(buf);
        free(v);
        return cnn_fail(CNN_E_MISMATCH, "%s: %d class names, the model has %d classes", path, k, need);
    }
    *text = (char *)buf;
    *names = v;
    return CNN_OK;
}

typedef struct pic_result {
    bool ok;
    char err[320];
    int top[5];
    float prob[5];
} pic_result;

static void top_k(const float *z, int classes, int k, pic_result *r) {
    float mx = z[0];
    for (int j = 1; j < classes; j++) mx = z[j] > mx ? z[j] : mx;
    double sum = 0;
    for (int j = 0; j < classes; j++) sum += exp((double)z[j] - mx);
    for (int t = 0; t < k; t++) {
        int best = -1;
        for (int j = 0; j < classes; j++) {
            bool used = false;
            for (int u = 0; u < t; u++) used |= r->top[u] == j;
            if (!used && (best < 0 || z[j] > z[best])) best = j;
        }
        r->top[t] = best;
        r->prob[t] = (float)(exp((double)z[best] - mx) / sum);
    }
}

int cli_infer_pictures(const cli_pictures *a) {
    cnn_bad_image on_bad = strcmp(a->on_bad, "skip") == 0 ? CNN_BAD_IMAGE_SKIP : CNN_BAD_IMAGE_FAIL;
    char **paths = NULL, *class_text = NULL, **class_names = NULL;
    int n = 0, rc;
    cnn_status st = expand_inputs(a->input, on_bad, &paths, &n);
    if (st != CNN_OK) return cli_fail(st);
    const cnn_model_opts *mo = a->mo;
    int h = a->h, w = a->w, classes = mo->num_classes, k = classes < 5 ? classes : 5;
    if (a->classes) st = read_classes(a->classes, classes, &class_text, &class_names);
    cnn_dataset norm = {.mean = {0.485f, 0.456f, 0.406f}, .std = {0.229f, 0.224f, 0.225f}};
    if (st == CNN_OK) st = cnn_dataset_set_norm(&norm, a->mean, a->std);
    int resize = a->resize > 0 ? a->resize : (int)((h < w ? h : w) * 256.0 / 224.0 + 0.5);
    size_t per = (size_t)3 * h * w;
    int b = n < a->batch ? n : a->batch;
    float *x = NULL, *logits = NULL, *all_x = NULL;
    uint8_t *planes = NULL;
    int *idx = NULL;
    pic_result *res = NULL;
    if (st == CNN_OK) {
        x = cnn_malloc((size_t)b * per * sizeof(float), "input batch");
        logits = cnn_calloc((size_t)n * classes, sizeof(float), "logits");
        idx = cnn_malloc((size_t)b * sizeof *idx, "batch");
        planes = cnn_malloc(per, "image");
        res = cnn_calloc((size_t)n, sizeof *res, "results");
        if (a->save_input) all_x = cnn_malloc((size_t)n * per * sizeof(float), "prepared images");
        if (!x || !logits || !idx || !planes || !res || (a->save_input && !all_x)) st = CNN_E_OOM;
    }
    cnn_backend *be = NULL;
    cnn_model *m = NULL;
    if (st != CNN_OK) {
        rc = cli_fail(st);
        goto out;
    }
    if ((rc = cli_backend(a->common, &be)) >= 0) goto out;
    st = cnn_model_create(mo, be, h, w, b, false, &m);
    if (st == CNN_OK && a->weights) st = cnn_model_load(m, a->weights);
    int skipped = 0;
    for (int s = 0; s < n && st == CNN_OK; s += b) {
        int cnt = n - s < b ? n - s : b, good = 0;
        for (int i = 0; i < cnt && st == CNN_OK; i++) {
            pic_result *r = &res[s + i];
            cnn_image im;
            cnn_status ist = cnn_image_load(paths[s + i], CNN_IMAGE_MAX_PIXELS, &im);
            if (ist == CNN_OK) {
                cnn_resample rs = cnn_resample_eval(im.h, im.w, resize, h, w);
                ist = cnn_image_resample(&im, &rs, planes);
                cnn_image_free(&im);
            }
            if (ist != CNN_OK) {
                if (on_bad == CNN_BAD_IMAGE_FAIL) {
                    st = ist;
                    break;
                }
                snprintf(r->err, sizeof r->err, "%s", cnn_error_msg());
                cnn_log(1, "cnn: skipping a bad image: %s", r->err);
                skipped++;
                continue;
            }
            /* ToTensor + Normalize in float32, as torchvision computes them */
            float *dst = x + (size_t)good * per;
            for (int c = 0; c < 3; c++)
                for (size_t p = 0; p < (size_t)h * w; p++)
                    dst[c * (size_t)h * w + p] = ((float)planes[c * (size_t)h * w + p] / 255.0f - norm.mean[c]) / norm.std[c];
            r->ok = true;
            idx[good++] = s + i;
        }
        if (st != CNN_OK || good == 0) continue;
        float *z = logits + (size_t)s * classes;
        st = cnn_model_upload_input(m, x, good);
        if (st == CNN_OK) st = cnn_model_forward(m, good, CNN_MODE_EVAL, 0);
        if (st == CNN_OK) st = cnn_model_download_logits(m, good, z);
        /* spread the good images' rows to their positions (in place, last first) */
        for (int g = good - 1; st == CNN_OK && g >= 0; g--) {
            if (idx[g] != s + g) {
                memcpy(logits + (size_t)idx[g] * classes, z + (size_t)g * classes, classes * sizeof(float));
                memset(z + (size_t)g * classes, 0, classes * sizeof(float));
            }
            top_k(logits + (size_t)idx[g] * classes, classes, k, &res[idx[g]]);
            if (all_x) memcpy(all_x + (size_t)idx[g] * per, x + (size_t)g * per, per * sizeof(float));
        }
    }
    if (st == CNN_OK && a->output) {
        cnn_st_item it = {.name = "logits", .dtype = CNN_DTYPE_F32, .ndim = 2, .shape = {n, classes}, .data = logits};
        st = cnn_st_write(a->output, &it, 1, NULL, 0);
    }
    if (st == CNN_OK && all_x) {
        cnn_st_item it = {.name = "input", .dtype = CNN_DTYPE_F32, .ndim = 4, .shape = {n, 3, h, w}, .data = all_x};
        st = cnn_st_write(a->save_input, &it, 1, NULL, 0);
    }
    if (st != CNN_OK) {
        rc = cli_fail(st);
        goto out;
    }
    bool json = strcmp(a->format, "json") == 0, csv = strcmp(a->format, "csv") == 0;
    char e1[4096 + 64], e2[512], unnamed[32];
    if (json) printf("[\n");
    if (csv) printf("file,rank,class,name,probability\n");
    for (int i = 0; i < n; i++) {
        const pic_result *r = &res[i];
        if (json) {
            printf("  {\"file\": \"%s\", ", cli_json_esc(paths[i], e1, sizeof e1));
            if (!r->ok) printf("\"error\": \"%s\"}", cli_json_esc(r->err, e2, sizeof e2));
            else printf("\"top\": [");
        } else if (!csv) {
            printf("%s:", paths[i]);
            if (!r->ok) printf(" skipped (%s)", r->err);
        } else if (!r->ok) {
            printf("%s,,,,\n", cli_csv_esc(paths[i], e1, sizeof e1));
        }
        for (int t = 0; r->ok && t < k; t++) {
            int c = r->top[t];
            const char *name = class_names ? class_names[c] : classes == 1000 ? cnn_imagenet_classes[c] : NULL;
            if (!name) {
                snprintf(unnamed, sizeof unnamed, "class %d", c);
                name = unnamed;
            }
            if (json)
                printf("%s{\"class\": %d, \"name\": \"%s\", \"probability\": %.6f}", t ? ", " : "", c,
                       cli_json_esc(name, e2, sizeof e2), (double)r->prob[t]);
            else if (csv)
                printf("%s,%d,%d,%s,%.6f\n", cli_csv_esc(paths[i], e1, sizeof e1), t + 1, c,
                       cli_csv_esc(name, e2, sizeof e2), (double)r->prob[t]);
            else
                printf("%s %d %s (%.3f)", t ? " |" : "", c, name, (double)r->prob[t]);
        }
        if (json) printf("%s%s\n", r->ok ? "]}" : "", i + 1 < n ? "," : "");
        else if (!csv) printf("\n");
    }
    if (json) printf("]\n");
    if (skipped) cnn_log(1, "cnn: %d of %d images skipped (--on-bad-image skip)", skipped, n);
    rc = CLI_EXIT_OK;
out:
    cnn_model_free(m);
    cnn_backend_destroy(be);
    for (int i = 0; i < n; i++) free(paths[i]);
    free(paths);
    free(class_text);
    free(class_names);
    free(x);
    free(logits);
    free(all_x);
    free(planes);
    free(idx);
    free(res);
    return rc;
}
