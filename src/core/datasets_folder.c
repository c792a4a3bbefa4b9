/* datasets_folder.c — torchvision's ImageFolder: DIR/<class>/.../<image>, classes in sorted order of their folder
 * names, files with an image extension (case-insensitive) in the order of sorted(os.walk(class_dir,
 * followlinks=True)) and sorted names within a folder. The images themselves are decoded per batch
 * (pipeline.c); listing reads no file. Symlinks are followed; a directory that is its own ancestor (a symlink
 * loop) is skipped and counted, or an error with on_bad = fail; a class without images is an error, as in
 * torchvision. */
#include "pipeline.h"

#include "cnn/backend.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#define MAX_DEPTH 64
#define MAX_FILES (1 << 28)

/* torchvision.datasets.folder.IMG_EXTENSIONS; only JPEG and PNG decode, the others are bad images */
static const char *const exts[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"};

static bool image_name(const char *name) {
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof exts / sizeof exts[0]; i++) {
        size_t e = strlen(exts[i]);
        if (n >= e && strcasecmp(name + n - e, exts[i]) == 0) return true;
    }
    return false;
}

typedef struct entry {
    char *dir, *name; /* the folder (os.walk's root) and the file name */
    int label;
} entry;

typedef struct lister {
    entry *e;
    int n, cap;
    int loops;          /* symlink loops skipped */
    cnn_bad_image on_bad;
    dev_t stack_dev[MAX_DEPTH];
    ino_t stack_ino[MAX_DEPTH];
} lister;

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static cnn_status add_entry(lister *l, const char *dir, const char *name, int label) {
    if (l->n == MAX_FILES) return cnn_fail(CNN_E_INVALID, "%s: more than %d images", dir, MAX_FILES);
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 1024;
        entry *t = realloc(l->e, sizeof *t * (size_t)cap);
        if (!t) return cnn_fail(CNN_E_OOM, "out of memory listing %s", dir);
        l->e = t;
        l->cap = cap;
    }
    entry *e = &l->e[l->n];
    e->dir = strdup(dir);
    e->name = strdup(name);
    e->label = label;
    if (!e->dir || !e->name) {
        free(e->dir);
        free(e->name);
        return cnn_fail(CNN_E_OOM, "out of memory listing %s", dir);
    }
    l->n++;
    return CNN_OK;
}

/* The names in dir (without . and ..), sorted; *is_dir[i] says whether entry i is a directory (symlinks
 * followed, as os.walk(followlinks=True) does). */
static cnn_status read_dir(const char *dir, char ***names, bool **is_dir, int *count) {
    *names = NULL;
    *is_dir = NULL;
    *count = 0;
    DIR *d = opendir(dir);
    if (!d) return cnn_fail(CNN_E_IO, "%s: cannot open the folder: %s", dir, strerror(errno));
    char **v = NULL;
    int n = 0, cap = 0;
    cnn_status st = CNN_OK;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **t = realloc(v, sizeof *t * (size_t)cap);
            if (!t) {
                st = cnn_fail(CNN_E_OOM, "out of memory listing %s", dir);
                break;
            }
            v = t;
        }
        if (!(v[n] = strdup(de->d_name))) {
            st = cnn_fail(CNN_E_OOM, "out of memory listing %s", dir);
            break;
        }
        n++;
    }
    closedir(d);
    bool *isd = st == CNN_OK ? calloc((size_t)(n ? n : 1), sizeof *isd) : NULL;
    if (st == CNN_OK && !isd) st = cnn_fail(CNN_E_OOM, "out of memory listing %s", dir);
    if (st == CNN_OK) {
        if (n > 1) qsort(v, (size_t)n, sizeof *v, cmp_str);
        for (int i = 0; i < n; i++) {
            char path[4096];
            struct stat sb;
            if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, v[i]) >= sizeof path) {
                st = cnn_fail(CNN_E_INVALID, "%s/%s: path too long", dir, v[i]);
                break;
            }
            isd[i] = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
        }
    }
    if (st != CNN_OK) {
        for (int i = 0; i < n; i++) free(v[i]);
        free(v);
        free(isd);
        return st;
    }
    *names = v;
    *is_dir = isd;
    *count = n;
    return CNN_OK;
}

static void free_names(char **v, bool *isd, int n) {
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
    free(isd);
}

static cnn_status walk(lister *l, const char *dir, int label, int depth) {
    struct stat sb;
    if (stat(dir, &sb) != 0) return cnn_fail(CNN_E_IO, "%s: %s", dir, strerror(errno));
    for (int i = 0; i < depth; i++)
        if (l->stack_dev[i] == sb.st_dev && l->stack_ino[i] == sb.st_ino) {
            if (l->on_bad == CNN_BAD_IMAGE_FAIL)
                return cnn_fail(CNN_E_FORMAT, "%s: a symlink loop (the folder is its own ancestor); "
                                "--on-bad-image skip skips it", dir);
            l->loops++;
            return CNN_OK;
        }
    if (depth >= MAX_DEPTH) return cnn_fail(CNN_E_INVALID, "%s: folders nested deeper than %d", dir, MAX_DEPTH);
    l->stack_dev[depth] = sb.st_dev;
    l->stack_ino[depth] = sb.st_ino;
    char **names;
    bool *isd;
    int n;
    CNN_TRY(read_dir(dir, &names, &isd, &n));
    cnn_status st = CNN_OK;
    for (int i = 0; i < n && st == CNN_OK; i++)
        if (!isd[i] && image_name(names[i])) st = add_entry(l, dir, names[i], label);
    for (int i = 0; i < n && st == CNN_OK; i++) {
        if (!isd[i]) continue;
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/%s", dir, names[i]);
        st = walk(l, sub, label, depth + 1);
    }
    free_names(names, isd, n);
    return st;
}

/* os.walk's order sorted by folder path, then names */
static int cmp_entry(const void *a, const void *b) {
    const entry *x = a, *y = b;
    int c = strcmp(x->dir, y->dir);
    return c ? c : strcmp(x->name, y->name);
}

void cnn_file_list_free(cnn_file_list *f) {
    if (!f) return;
    free(f->arena);
    free(f->paths);
    free(f->bad);
    free(f);
}

static cnn_status list_split(const char *root, cnn_bad_image on_bad, char ***classes_io, int *n_classes_io,
                             lister *l) {
    char **names;
    bool *isd;
    int n;
    CNN_TRY(read_dir(root, &names, &isd, &n));
    char **classes = calloc((size_t)(n ? n : 1), sizeof *classes);
    int nc = 0;
    cnn_status st = classes ? CNN_OK : cnn_fail(CNN_E_OOM, "out of memory listing %s", root);
    for (int i = 0; i < n && st == CNN_OK; i++)
        if (isd[i]) classes[nc++] = names[i];
    if (st == CNN_OK && nc == 0) st = cnn_fail(CNN_E_FORMAT, "%s: no class folders (expected DIR/<class>/<image>)", root);
    if (st == CNN_OK && *classes_io) {
        /* the test split must have the training split's classes, in the same order */
        bool same = nc == *n_classes_io;
        for (int i = 0; same && i < nc; i++) same = strcmp(classes[i], (*classes_io)[i]) == 0;
        if (!same)
            st = cnn_fail(CNN_E_MISMATCH, "%s: its %d class folders differ from the training split's %d", root, nc,
                          *n_classes_io);
    }
    l->on_bad = on_bad;
    for (int c = 0; c < nc && st == CNN_OK; c++) {
        char dir[4096];
        if ((size_t)snprintf(dir, sizeof dir, "%s/%s", root, classes[c]) >= sizeof dir) {
            st = cnn_fail(CNN_E_INVALID, "%s/%s: path too long", root, classes[c]);
            break;
        }
        int before = l->n;
        st = walk(l, dir, c, 0);
        if (st == CNN_OK && l->n == before)
            st = cnn_fail(CNN_E_FORMAT, "%s: class '%s' has no image files (.jpg .jpeg .png ...); torchvision's "
                          "ImageFolder refuses an empty class too", dir, classes[c]);
        if (st == CNN_OK && l->n - before > 1) qsort(l->e + before, (size_t)(l->n - before), sizeof *l->e, cmp_entry);
    }
    if (st == CNN_OK && !*classes_io) {
        char **keep = calloc(nc > 0 ? (size_t)nc : 1, sizeof *keep); /* nc >= 0; the bound tells gcc 13 so */
        if (!keep) st = cnn_fail(CNN_E_OOM, "out of memory listing %s", root);
        for (int i = 0; st == CNN_OK && i < nc; i++)
            if (!(keep[i] = strdup(classes[i]))) st = cnn_fail(CNN_E_OOM, "out of memory listing %s", root);
        if (st == CNN_OK) {
            *classes_io = keep;
            *n_classes_io = nc;
        } else if (keep) {
            for (int i = 0; i < nc; i++) free(keep[i]);
            free(keep);
        }
    }
    free(classes);
    free_names(names, isd, n);
    return st;
}

static bool is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

cnn_status cnn_load_folder(const char *dir, const cnn_data_opts *o, cnn_dataset *d) {
    char train_dir[4096], test_dir[4096];
    snprintf(train_dir, sizeof train_dir, "%s/train", dir);
    bool split_dirs = is_dir(train_dir);
    if (split_dirs) {
        snprintf(test_dir, sizeof test_dir, "%s/val", dir);
        if (!is_dir(test_dir)) snprintf(test_dir, sizeof test_dir, "%s/test", dir);
        if (o->split == CNN_SPLIT_TEST && !is_dir(test_dir))
            return cnn_fail(CNN_E_IO, "%s has train/ but neither val/ nor test/", dir);
    } else if (!is_dir(dir)) {
        return cnn_fail(CNN_E_IO, "%s: not a folder", dir);
    }
    if (o->holdout < 0 || o->holdout >= 1)
        return cnn_fail(CNN_E_INVALID, "holdout fraction %g outside [0, 1)", (double)o->holdout);
    lister l = {0};
    char **classes = NULL;
    int nc = 0;
    /* the class list comes from the training folder in both splits */
    cnn_status st = list_split(split_dirs ? train_dir : dir, o->on_bad, &classes, &nc, &l);
    if (st == CNN_OK && split_dirs && o->split == CNN_SPLIT_TEST) {
        for (int i = 0; i < l.n; i++) free(l.e[i].dir), free(l.e[i].name);
        l.n = 0;
        st = list_split(test_dir, o->on_bad, &classes, &nc, &l);
    }
    /* without train/ and val/: a fixed pseudo-random fraction of each class is the test split */
    int keep = 0;
    for (int i = 0; st == CNN_OK && i < l.n; i++) {
        bool held = false;
        if (!split_dirs && o->holdout > 0) {
            uint32_t q[4];
            cnn_philox(0x686f6c646f7574ULL, (uint64_t)l.e[i].label, (uint64_t)i, q);
            held = cnn_u01(q[0]) < o->holdout;
        }
        bool want = split_dirs || o->holdout == 0 || held == (o->split == CNN_SPLIT_TEST);
        if (want) l.e[keep++] = l.e[i];
        else free(l.e[i].dir), free(l.e[i].name);
    }
    if (st == CNN_OK) l.n = keep;
    if (st == CNN_OK && l.n == 0) st = cnn_fail(CNN_E_FORMAT, "%s: no images in the %s split", dir,
                                                o->split == CNN_SPLIT_TRAIN ? "training" : "test");
    int n = st == CNN_OK ? (o->limit > 0 && o->limit < l.n ? o->limit : l.n) : 0;
    cnn_file_list *f = st == CNN_OK ? calloc(1, sizeof *f) : NULL;
    if (st == CNN_OK && !f) st = cnn_fail(CNN_E_OOM, "out of memory for the file list");
    size_t bytes = 0;
    for (int i = 0; st == CNN_OK && i < n; i++) bytes += strlen(l.e[i].dir) + strlen(l.e[i].name) + 2;
    if (st == CNN_OK) {
        f->arena = malloc(bytes ? bytes : 1);
        f->paths = malloc(sizeof *f->paths * (size_t)n);
        f->bad = calloc((size_t)n, 1);
        d->labels = malloc(sizeof *d->labels * (size_t)n);
        if (!f->arena || !f->paths || !f->bad || !d->labels) st = cnn_fail(CNN_E_OOM, "out of memory for the file list");
    }
    if (st == CNN_OK) {
        size_t pos = 0;
        for (int i = 0; i < n; i++) {
            f->paths[i] = f->arena + pos;
            pos += (size_t)sprintf(f->arena + pos, "%s/%s", l.e[i].dir, l.e[i].name) + 1;
            d->labels[i] = l.e[i].label;
        }
        f->n = n;
        f->loops = l.loops;
        f->on_bad = o->on_bad;
        f->out_h = o->image_h > 0 ? o->image_h : 224;
        f->out_w = o->image_w > 0 ? o->image_w : f->out_h;
        int short_side = f->out_h < f->out_w ? f->out_h : f->out_w;
        f->resize = o->resize > 0 ? o->resize : (int)(short_side * 256.0 / 224.0 + 0.5);
        f->scale_lo = o->scale_lo > 0 ? o->scale_lo : 0.08f;
        f->threads = o->threads;
        f->decode = o->decode;
        d->files = f;
        d->n = n;
        d->c = 3;
        d->h = f->out_h;
        d->w = f->out_w;
        d->classes = nc;
        d->class_names = classes;
        classes = NULL;
        f = NULL;
        if (l.loops) cnn_log(1, "cnn: %s: skipped %d symlink loop%s", dir, l.loops, l.loops == 1 ? "" : "s");
    }
    for (int i = 0; i < l.n; i++) free(l.e[i].dir), free(l.e[i].name);
    free(l.e);
    if (classes) {
        for (int i = 0; i < nc; i++) free(classes[i]);
        free(classes);
    }
    cnn_file_list_free(f);
    return st;
}

cnn_status cnn_list_images(const char *root, cnn_bad_image on_bad, char ***paths, int *count) {
    *paths = NULL;
    *count = 0;
    lister l = {.on_bad = on_bad};
    cnn_status st = walk(&l, root, 0, 0);
    if (st == CNN_OK && l.n > 1) qsort(l.e, (size_t)l.n, sizeof *l.e, cmp_entry);
    char **v = st == CNN_OK ? calloc((size_t)(l.n ? l.n : 1), sizeof *v) : NULL;
    if (st == CNN_OK && !v) st = cnn_fail(CNN_E_OOM, "out of memory listing %s", root);
    for (int i = 0; st == CNN_OK && i < l.n; i++) {
        size_t len = strlen(l.e[i].dir) + strlen(l.e[i].name) + 2;
        if (!(v[i] = malloc(len))) st = cnn_fail(CNN_E_OOM, "out of memory listing %s", root);
        else snprintf(v[i], len, "%s/%s", l.e[i].dir, l.e[i].name);
    }
    if (st == CNN_OK) {
        *paths = v;
        *count = l.n;
    } else if (v) {
        for (int i = 0; i < l.n; i++) free(v[i]);
        free(v);
    }
    for (int i = 0; i < l.n; i++) free(l.e[i].dir), free(l.e[i].name);
    free(l.e);
    return st;
}
