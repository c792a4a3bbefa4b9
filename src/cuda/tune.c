/* tune.c -- the autotuner's memory: the winning kernel configuration per problem, in process and on disk.
 *
 * A problem key is a printable string that names everything the choice depends on besides the GPU (pass, dtype,
 * shape). Winners are kept in a per-backend table and appended to one text file per (GPU arch, SM count, driver,
 * NVRTC) in the kernel cache directory:
 *     <cache_dir>/tune-v<V>-<arch>-<SMs>sm-drv<driver>-nvrtc<major>.<minor>.txt    lines "key|cfg|splits|ms"
 * so a second run tunes nothing. Lines are appended with one write(2) on an O_APPEND descriptor (concurrent
 * processes interleave whole lines); the file is read once, at the first lookup, and a malformed line is
 * skipped (the problem is then tuned again). cuda_tune_time times a launcher's candidates (the candidates
 * themselves: conv2d_table.c and conv2d_programs.c, the policy: conv2d_choose.c). V is
 * CUDA_TUNE_VERSION: a config is stored by its index in the launcher's table and its speed depends on the kernel
 * source, so a change to either bumps V and old winners are ignored rather than misread.
 */
#include "cuda/hooks.h"
#include "cuda/internal.h"

#include "cnn/io.h"

#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CUDA_TUNE_VERSION 14 /* 2: wgmma pipeline with one batch in flight; tc_configs' wgmma rows changed; keys
                              * of convs with a residual end in " res". 3: warp-specialised rows (conv2d_warpspec.cu)
                              * join the fast search. 4: their TMA rows join it. 5: so do the 64-wide TMA row
                              * and the cooperative rows. 6: and the two transposed-tile rows. 7: and the
                              * 192-pixel one. 8: and the two storing through TMA (/o). 9: a fast conv winner is stored as its
                              * row index in conv2d_table.c's one table (the generic rows first), not as its index
                              * among the fast rows; their keys begin "fprop", not "fprop_tc". 10: the wgrad
                              * kernel's producer loop changed (perf-log steps 72-73): its winners timed again.
                              * 11: "dgrad_phases" keys also time the grouped launches (step 86). 12: the grouped
                              * launches read the filter without its rewrite (step 88): timed again. 13: the
                              * halo wgrad configs join the 3x3 stride-1 wgrads' search (step 89). 14: the gating
                              * dgrads' programs ("dgrad_ft ... relu") sum dx and stage no residual (step 101) */

static void tune_path(cuda_be *cb, char *buf, size_t cap) {
    int ma = 0, mi = 0;
    cnn_cuda_nvrtc_version(&ma, &mi);
    snprintf(buf, cap, "%s/tune-v%d-%s-%dsm-drv%d-nvrtc%d.%d.txt", cb->cache_dir, CUDA_TUNE_VERSION, cb->arch,
             cb->sm_count, cb->driver_version, ma, mi);
}

static void put_mem(cuda_be *cb, const char *key, int cfg, int splits, float ms) {
    for (int i = 0; i < cb->n_tune; i++)
        if (strcmp(cb->tune_tab[i].key, key) == 0) {
            cb->tune_tab[i].cfg = cfg, cb->tune_tab[i].splits = splits, cb->tune_tab[i].ms = ms;
            return;
        }
    if (cb->n_tune == cb->cap_tune) {
        int cap = cb->cap_tune ? 2 * cb->cap_tune : 64;
        cuda_tune_entry *t = realloc(cb->tune_tab, (size_t)cap * sizeof *t);
        if (!t) return; /* not remembered: tuned again next time, which is only slower */
        cb->tune_tab = t, cb->cap_tune = cap;
    }
    cuda_tune_entry *e = &cb->tune_tab[cb->n_tune++];
    snprintf(e->key, sizeof e->key, "%s", key);
    e->cfg = cfg, e->splits = splits, e->ms = ms;
}

bool cnn_cuda_tune_parse_line(const char *line, size_t len, char *key, size_t key_cap, int *cfg, int *splits,
                              float *ms) {
    const char *bar = memchr(line, '|', len);
    if (!bar || bar == line || (size_t)(bar - line) >= key_cap) return false;
    for (const char *p = line; p < bar; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) return false; /* keys are printable */
    char num[64];
    size_t rest = len - (size_t)(bar + 1 - line);
    if (rest == 0 || rest >= sizeof num) return false;
    memcpy(num, bar + 1, rest);
    num[rest] = 0;
    int a, b, used = 0;
    float t;
    if (sscanf(num, "%d|%d|%f%n", &a, &b, &t, &used) != 3 || num[used] != 0 || a < 0 || b < 1 || !(t >= 0.0f) ||
        !isfinite(t))
        return false;
    memcpy(key, line, (size_t)(bar - line));
    key[bar - line] = 0;
    *cfg = a, *splits = b, *ms = t;
    return true;
}

int cnn_cuda_tune_parse(const char *text, size_t len, void (*put)(void *ctx, const char *key, int cfg, int splits,
                                                                  float ms),
                        void *ctx, int *bad) {
    int n = 0;
    *bad = 0;
    char key[sizeof ((cuda_tune_entry *)0)->key];
    for (size_t pos = 0; pos < len;) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - text) : len; /* a last line without its newline is torn: skipped */
        int cfg, splits;
        float ms;
        if (nl && cnn_cuda_tune_parse_line(text + pos, end - pos, key, sizeof key, &cfg, &splits, &ms)) {
            put(ctx, key, cfg, splits, ms);
            n++;
        } else if (end > pos) {
            (*bad)++;
        }
        pos = end + 1;
    }
    return n;
}

static void put_cb(void *ctx, const char *key, int cfg, int splits, float ms) { put_mem(ctx, key, cfg, splits, ms); }

static void load_disk(cuda_be *cb) {
    cb->tune_loaded = true;
    if (!cb->cache_dir[0]) return;
    char path[1200];
    tune_path(cb, path, sizeof path);
    uint8_t *text;
    size_t len;
    if (access(path, F_OK) != 0) return;
    if (cnn_read_file(path, (size_t)64 << 20, &text, &len) != CNN_OK) {
        cnn_log(1, "cnn: tuning cache ignored: %s", cnn_error_msg());
        cnn_error_clear();
        return;
    }
    int bad = 0, n = cnn_cuda_tune_parse((const char *)text, len, put_cb, cb, &bad);
    free(text);
    cnn_log(2, "cnn: tuning cache %s: %d entries%s", path, n, bad ? " (malformed lines skipped)" : "");
}

bool cuda_tune_get(cuda_be *cb, const char *key, int *cfg, int *splits) {
    if (!cb->tune_loaded) load_disk(cb);
    for (int i = 0; i < cb->n_tune; i++)
        if (strcmp(cb->tune_tab[i].key, key) == 0) {
            *cfg = cb->tune_tab[i].cfg, *splits = cb->tune_tab[i].splits;
            return true;
        }
    return false;
}

void cuda_tune_put(cuda_be *cb, const char *key, int cfg, int splits, float ms) {
    put_mem(cb, key, cfg, splits, ms);
    if (!cb->cache_dir[0]) return;
    char path[1200], line[512];
    tune_path(cb, path, sizeof path);
    int len = snprintf(line, sizeof line, "%s|%d|%d|%.5f\n", key, cfg, splits, ms);
    if (len <= 0 || len >= (int)sizeof line) return;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        cnn_log(2, "cnn: cannot append to the tuning cache %s: %s", path, strerror(errno));
        return;
    }
    if (write(fd, line, (size_t)len) != len) cnn_log(2, "cnn: short write to the tuning cache %s", path);
    close(fd);
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

cnn_status cuda_tune_time(cuda_be *cb, const char *key, int n, size_t ybytes, cuda_tune_launch_fn launch, void *ctx,
                          int *best, float *best_ms, float *all_ms) {
    const size_t flush_bytes = (size_t)64 << 20;
    CUdeviceptr scratch = 0, flush = 0;
    CUevent e0 = NULL, e1 = NULL;
    cnn_status st = CNN_OK;
    *best = -1, *best_ms = 1e30f;
    for (int i = 0; all_ms && i < n; i++) all_ms[i] = -1.0f;
    if (cb->dry_run) { /* each candidate once, for what it would compile (and tune) */
        if (cu.MemAlloc(&scratch, ybytes) != CUDA_SUCCESS) goto done;
        for (int i = 0; i < n && st == CNN_OK; i++) st = launch(ctx, i, (void *)(uintptr_t)scratch);
        goto done;
    }
    if (cu.MemAlloc(&scratch, ybytes) != CUDA_SUCCESS || cu.MemAlloc(&flush, flush_bytes) != CUDA_SUCCESS ||
        cu.EventCreate(&e0, 0) != CUDA_SUCCESS || cu.EventCreate(&e1, 0) != CUDA_SUCCESS) {
        cnn_log(2, "cnn: tuning %s: no room for its scratch buffers; using the heuristic", key);
        goto done; /* tuning is an optimisation: without memory for it, the heuristic's choice stands */
    }
    for (int i = 0; i < n && st == CNN_OK; i++) {
        void *y = (void *)(uintptr_t)scratch;
        st = launch(ctx, i, y); /* warm-up (and compilation) */
        float ms[3];
        for (int r = 0; r < 3 && st == CNN_OK; r++) {
            if (cu.MemsetD8Async(flush, (unsigned char)r, flush_bytes, cb->stream) != CUDA_SUCCESS ||
                cu.EventRecord(e0, cb->stream) != CUDA_SUCCESS)
                st = cnn_fail(CNN_E_DEVICE, "tuning %s: memset/event failed", key);
            if (st == CNN_OK) st = launch(ctx, i, y);
            if (st == CNN_OK && (cu.EventRecord(e1, cb->stream) != CUDA_SUCCESS || cu.EventSynchronize(e1) != CUDA_SUCCESS ||
                                 cu.EventElapsedTime(&ms[r], e0, e1) != CUDA_SUCCESS))
                st = cnn_fail(CNN_E_DEVICE, "tuning %s: timing candidate %d failed", key, i);
        }
        if (st != CNN_OK) break;
        qsort(ms, 3, sizeof ms[0], cmp_float);
        cnn_log(3, "cnn: tune %s: candidate %d: %.4f ms", key, i, ms[1]);
        if (all_ms) all_ms[i] = ms[1];
        if (ms[1] < *best_ms) *best_ms = ms[1], *best = i;
    }
done:
    if (scratch) cu.MemFree(scratch);
    if (flush) cu.MemFree(flush);
    if (e0) cu.EventDestroy(e0);
    if (e1) cu.EventDestroy(e1);
    return st;
}

void cuda_tune_free(cuda_be *cb) {
    free(cb->tune_tab);
    cb->tune_tab = NULL;
    cb->n_tune = cb->cap_tune = 0;
}
