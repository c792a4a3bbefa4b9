/* test_nvrtc.c -- the CUDA backend's parts that need no GPU, run in CI:
 *   - NVRTC compiles every program of the kernel registry (every kernel file x activation dtype x config,
 *     the very list the launchers draw from) for sm_80 and sm_90a (a wgmma family's for sm_90a alone, the only
 *     arch the engine builds it for); each program's kernels must be in the CUBIN, and ptxas must report no
 *     local memory (no spills, no stack frame). One PASS line per (program, arch) with the compile time and
 *     registers. SKIP (counted) only when libnvrtc cannot be loaded.
 *   - every kernel's first statement is pdl_enter() (the backend's launches let a kernel be placed before the
 *     one ahead of it has finished: kernels/common.cuh), read in the embedded sources.
 *   - the on-disk kernel cache: round trip, corruption / truncation / stale descriptor detected, concurrent
 *     writers never expose a partial entry, no temp files left behind.
 * CNN_TEST_QUICK=1 (the sanitizer run) compiles one program per family for sm_90a only. A wgmma program that
 * ptxas had to serialise (it says so in its log) fails like a spill. For development only (make test sets
 * neither): CNN_TEST_NVRTC_ONLY=substring compiles the programs whose label contains it, CNN_TEST_NVRTC_LOG=1
 * prints each ptxas log.
 */
#include "test.h"

#ifndef CNN_HAVE_CUDA
int main(void) {
    skip("nvrtc", "built without CUDA headers: no CUDA backend in this build");
    return test_finish();
}
#else

#include "cuda/embed.h"
#include "cuda/hooks.h"
#include "cuda/internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the disk cache ----------------------------------------------------------------------------------- */

static char cache_dir[256];

static void rm_rf_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' && (e->d_name[1] == 0 || (e->d_name[1] == '.' && e->d_name[2] == 0))) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static int count_files(const char *dir, const char *substr) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) n += strstr(e->d_name, substr) != NULL;
    closedir(d);
    return n;
}

static bool patch_file(const char *path, long off, int whence, unsigned char x) {
    FILE *f = fopen(path, "r+b");
    if (!f) return false;
    bool ok = fseek(f, off, whence) == 0;
    int c = ok ? fgetc(f) : EOF;
    ok = ok && c != EOF && fseek(f, -1, SEEK_CUR) == 0 && fputc(c ^ x, f) != EOF;
    fclose(f);
    return ok;
}

static void test_cache(void) {
    snprintf(cache_dir, sizeof cache_dir, "/tmp/cnn-test-cache-%ld/sub/dir", (long)getpid());
    const char *desc = "test descriptor\noptions -DA=1\n", *desc2 = "test descriptor\noptions -DA=2\n";
    unsigned char payload[1000];
    for (int i = 0; i < 1000; i++) payload[i] = (unsigned char)(i * 7 + 3);
    void *data = NULL;
    size_t len = 0;
    char why[512], path[600];

    check(cnn_cuda_cache_load(cache_dir, desc, &data, &len, why, sizeof why) == CNN_CUDA_CACHE_MISS, "cache.miss_empty",
          NULL);
    cnn_status st = cnn_cuda_cache_store(cache_dir, desc, payload, sizeof payload);
    check(st == CNN_OK, "cache.store_mkdir", "%s", cnn_error_msg());
    cnn_cuda_cache_result r = cnn_cuda_cache_load(cache_dir, desc, &data, &len, why, sizeof why);
    check(r == CNN_CUDA_CACHE_HIT && len == sizeof payload && memcmp(data, payload, len) == 0, "cache.roundtrip",
          "result %d len %zu %s", r, len, why);
    free(data);
    check(cnn_cuda_cache_load(cache_dir, desc2, &data, &len, why, sizeof why) == CNN_CUDA_CACHE_MISS,
          "cache.other_descriptor_misses", NULL);

    cnn_cuda_cache_path(cache_dir, desc, path, sizeof path);
    /* a flipped payload byte: checksum */
    check(patch_file(path, -10, SEEK_END, 0x40), "cache.corrupt_write", NULL);
    r = cnn_cuda_cache_load(cache_dir, desc, &data, &len, why, sizeof why);
    check(r == CNN_CUDA_CACHE_REJECTED && data == NULL && strstr(why, "checksum"), "cache.corrupt_payload_rejected",
          "%s", why);
    /* rebuilt entry loads again */
    cnn_cuda_cache_store(cache_dir, desc, payload, sizeof payload);
    r = cnn_cuda_cache_load(cache_dir, desc, &data, &len, why, sizeof why);
    check(r == CNN_CUDA_CACHE_HIT, "cache.rewrite_after_corruption", "%s", why);
    free(data);
    /* truncation */
    check(truncate(path, 100) == 0, "cache.truncate", NULL);
    r = cnn_cuda_cache_load(cache_dir, desc, &data, &len, why, sizeof why);
    check(r == CNN_CUDA_CACHE_REJECTED, "cache.truncated_rejected", "%s", why);
    check(truncate(path, 0) == 0, "cache.truncate0", NULL);
    r = cnn_cuda_cache_load(cache_dir, desc, &data, &len, why, sizeof why);
    check(r == CNN_CUDA_CACHE_REJECTED, "cache.empty_file_rejected", "%s", why);
    /* bad magic, bad version, corrupt descriptor byte */
    const struct {
        long off;
        const char *name, *reason;
    } flips[] = {{0, "cache.bad_magic", "magic"},
                 {8, "cache.bad_version", "version"},
                 {16, "cache.bad_key", "key"},
                 {24, "cache.bad_length", "lengths"},
                 {45, "cache.descriptor_differs", "descriptor"}};
    for (size_t i = 0; i < sizeof flips / sizeof flips[0]; i++) {
        cnn_cuda_cache_store(cache_dir, desc, payload, sizeof payload);
        patch_file(path, flips[i].off, SEEK_SET, 0x01);
        r = cnn_cuda_cache_load(cache_dir, desc, &data, &len, why, sizeof why);
        check(r == CNN_CUDA_CACHE_REJECTED && strstr(why, flips[i].reason), flips[i].name, "%s", why);
    }

    /* a 40-byte entry whose payload length 2^64 - D makes header + descriptor + payload add up to its size modulo
     * 2^64: rejected before anything past its end is read (419bfde compared the descriptor beyond the buffer) */
    {
        unsigned char e[40] = "CNNKBIN1";
        uint64_t dlen = strlen(desc), key = cnn_fnv1a64(CNN_FNV_OFFSET, desc, dlen), plen = (uint64_t)0 - dlen;
        e[8] = 1;
        for (int i = 0; i < 4; i++) e[12 + i] = (unsigned char)(dlen >> (8 * i));
        for (int i = 0; i < 8; i++) e[16 + i] = (unsigned char)(key >> (8 * i)), e[24 + i] = (unsigned char)(plen >> (8 * i));
        FILE *f = fopen(path, "wb");
        bool w = f && fwrite(e, 1, sizeof e, f) == sizeof e;
        if (f) fclose(f);
        r = cnn_cuda_cache_load(cache_dir, desc, &data, &len, why, sizeof why);
        check(w && r == CNN_CUDA_CACHE_REJECTED && data == NULL && strstr(why, "lengths"), "cache.length_wraps_rejected",
              "%s", why);
    }

    /* concurrent writers of the same entry and a reader: the reader sees a complete entry or none, never a torn one */
    cnn_cuda_cache_store(cache_dir, desc, payload, sizeof payload);
    pid_t kids[4];
    for (int k = 0; k < 4; k++) {
        kids[k] = fork();
        if (kids[k] == 0) {
            for (int i = 0; i < 200; i++)
                if (cnn_cuda_cache_store(cache_dir, desc, payload, sizeof payload) != CNN_OK) _exit(1);
            _exit(0);
        }
    }
    int torn = 0, hits = 0;
    for (int i = 0; i < 400; i++) {
        r = cnn_cuda_cache_load(cache_dir, desc, &data, &len, why, sizeof why);
        if (r == CNN_CUDA_CACHE_HIT) {
            hits++;
            torn += len != sizeof payload || memcmp(data, payload, len) != 0;
            free(data);
        } else {
            torn++;
        }
    }
    int bad_kids = 0;
    for (int k = 0; k < 4; k++) {
        int status = 0;
        if (kids[k] < 0 || waitpid(kids[k], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) bad_kids++;
    }
    check(torn == 0 && bad_kids == 0, "cache.concurrent_writers", "%d/400 loads hit, %d torn, %d writers failed", hits,
          torn, bad_kids);
    check(count_files(cache_dir, ".tmp.") == 0, "cache.no_temp_files_left", "%d left", count_files(cache_dir, ".tmp."));
    rm_rf_dir(cache_dir);
    char parent[300];
    snprintf(parent, sizeof parent, "/tmp/cnn-test-cache-%ld/sub", (long)getpid());
    rmdir(parent);
    snprintf(parent, sizeof parent, "/tmp/cnn-test-cache-%ld", (long)getpid());
    rmdir(parent);
}

/* ---- NVRTC over the registry --------------------------------------------------------------------------- */

typedef struct result {
    cnn_status st;
    double ms;
    char *log;
    char msg[1024];
    int missing_entry;  /* index of an entry not found in the image, -1 if all present */
    long regs_max, stack_max, spill;
    bool wgmma_serialized; /* ptxas had to wait on every wgmma (accumulators touched while one was in flight) */
    bool skipped;          /* a (program, arch) the engine never builds: not compiled, no check */
} result;

/* max of the numbers N in "N <unit>" / "<unit> N" occurrences of the ptxas -v report */
static long scan_max(const char *log, const char *key, bool number_before) {
    long best = 0;
    if (!log) return 0;
    for (const char *p = strstr(log, key); p; p = strstr(p + 1, key)) {
        long v = 0;
        if (number_before) {
            const char *q = p;
            while (q > log && q[-1] == ' ') q--;
            const char *e = q;
            while (q > log && q[-1] >= '0' && q[-1] <= '9') q--;
            if (q < e) v = strtol(q, NULL, 10);
        } else {
            v = strtol(p + strlen(key), NULL, 10);
        }
        if (v > best) best = v;
    }
    return best;
}

static bool has_symbol(const unsigned char *img, size_t len, const char *name, bool ptx) {
    char pat[160];
    size_t n;
    if (ptx) {
        n = (size_t)snprintf(pat, sizeof pat, ".entry %s(", name);
    } else {
        pat[0] = 0;
        n = (size_t)snprintf(pat + 1, sizeof pat - 1, "%s", name) + 2; /* "\0name\0" */
    }
    if (n > len) return false;
    for (size_t i = 0; i + n <= len; i++)
        if (img[i] == (unsigned char)pat[0] && memcmp(img + i, pat, n) == 0) return true;
    return false;
}

static void compile_one(int id, const char *arch, result *res) {
    cnn_cuda_program_info info;
    cnn_cuda_program_describe(id, &info);
    void *img = NULL;
    size_t len = 0;
    double t0 = cnn_now();
    res->st = cnn_cuda_compile_program(id, arch, "--ptxas-options=-v", &img, &len, &res->log);
    res->ms = (cnn_now() - t0) * 1e3;
    res->missing_entry = -1;
    if (res->st != CNN_OK) {
        snprintf(res->msg, sizeof res->msg, "%s", cnn_error_msg());
        return;
    }
    bool ptx = strncmp(arch, "compute_", 8) == 0;
    for (int e = 0; e < info.n_entries; e++)
        if ((info.held >> e & 1) && !has_symbol(img, len, info.entries[e], ptx)) {
            res->missing_entry = e;
            break;
        }
    res->regs_max = scan_max(res->log, "Used ", false);
    res->stack_max = scan_max(res->log, "bytes stack frame", true);
    res->spill = scan_max(res->log, "bytes spill stores", true) + scan_max(res->log, "bytes spill loads", true);
    res->wgmma_serialized = res->log && strstr(res->log, "wgmma.mma_async instructions are serialized") != NULL;
    if (getenv("CNN_TEST_NVRTC_LOG") && res->log) fprintf(stderr, "---- %s %s\n%s\n", info.label, arch, res->log);
    free(img);
}

static void test_registry(bool quick) {
    const char *archs[] = {"sm_80", "sm_90a"};
    int n = cnn_cuda_program_count();
    check(n > 0, "registry.nonempty", "%d programs", n);
    /* every family's kernel file is embedded, and ids are dense and stable */
    int nfam = 0;
    const char *last = "";
    int *ids = malloc((size_t)n * sizeof *ids);
    int nsel = 0;
    const char *only = getenv("CNN_TEST_NVRTC_ONLY");
    for (int id = 0; id < n; id++) {
        cnn_cuda_program_info info;
        cnn_cuda_program_describe(id, &info);
        bool first_of_family = strcmp(info.family, last) != 0;
        if (first_of_family) nfam++;
        last = info.family;
        if (only && only[0] && !strstr(info.label, only)) continue; /* a developer's filter, never set by make test */
        if (!quick || first_of_family) ids[nsel++] = id;
    }
    printf("# %d programs in %d families; compiling %d for %s\n", n, nfam, nsel, quick ? "sm_90a (quick)" : "sm_80 and sm_90a");
    fflush(stdout);
    int na = quick ? 1 : 2;
    const char **as = quick ? archs + 1 : archs;
    int total = nsel * na;
    result *res = calloc((size_t)total, sizeof *res);
    double t0 = cnn_now();
    /* a wgmma family's programs only for sm_90a: the engine builds them for no other arch */
#pragma omp parallel for schedule(dynamic)
    for (int j = 0; j < total; j++) {
        cnn_cuda_program_info pi;
        cnn_cuda_program_describe(ids[j / na], &pi);
        if (pi.sm90a && strcmp(as[j % na], "sm_90a") != 0) res[j].skipped = true;
        else compile_one(ids[j / na], as[j % na], &res[j]);
    }
    double wall = cnn_now() - t0;
    double sum_ms = 0, max_ms = 0;
    int compiled = 0;
    for (int j = 0; j < total; j++) {
        cnn_cuda_program_info info;
        cnn_cuda_program_describe(ids[j / na], &info);
        char name[200];
        snprintf(name, sizeof name, "nvrtc.%s.%s", info.label, as[j % na]);
        for (char *p = name; *p; p++)
            if (*p == ' ') *p = '_';
        result *r = &res[j];
        if (r->skipped) continue;
        compiled++;
        sum_ms += r->ms;
        if (r->ms > max_ms) max_ms = r->ms;
        if (r->st != CNN_OK)
            check(false, name, "%s", r->msg);
        else if (r->missing_entry >= 0)
            check(false, name, "kernel %s not found in the compiled image", info.entries[r->missing_entry]);
        else if (r->spill > 0 || r->stack_max > 0)
            check(false, name, "local memory: ptxas reports %ld bytes of spills and a %ld-byte stack frame (%ld "
                  "registers); defines %s", r->spill, r->stack_max, r->regs_max, info.defines);
        else if (r->wgmma_serialized)
            check(false, name, "ptxas serialised the wgmma instructions (it waits on each one); defines %s",
                  info.defines);
        else
            check(true, name, "(%.0f ms, %d kernels, max %ld registers, %ld bytes stack)", r->ms, __builtin_popcountll(info.held),
                  r->regs_max, r->stack_max);
        free(r->log);
    }
    printf("# %d compilations: %.1f s of compile time (mean %.0f ms, max %.0f ms), %.1f s wall\n", compiled,
           sum_ms / 1e3, compiled ? sum_ms / compiled : 0.0, max_ms, wall);
    free(res);
    free(ids);
}

/* the autotuner's memory (src/cuda/tune.c): in process, then from the disk file by a new backend; malformed
 * lines are skipped; another SM count is another file */
static void test_tune_cache(void) {
    char dir[] = "/tmp/cnn-test-tune-XXXXXX";
    if (!mkdtemp(dir)) {
        check(false, "tune.mkdtemp", "%s", strerror(errno));
        return;
    }
    cuda_be a, b, c, d;
    memset(&a, 0, sizeof a);
    snprintf(a.cache_dir, sizeof a.cache_dir, "%s", dir);
    snprintf(a.arch, sizeof a.arch, "sm_90a");
    a.sm_count = 132, a.driver_version = 13000;
    b = c = d = a;
    int cfg = -1, sp = -1;
    cuda_tune_put(&a, "fprop bf16 n1 c64", 3, 2, 1.5f);
    cuda_tune_put(&a, "fprop bf16 n2 c64", 0, 1, 0.5f);
    bool got = cuda_tune_get(&a, "fprop bf16 n1 c64", &cfg, &sp);
    check(got && cfg == 3 && sp == 2, "tune.in_process", "cfg %d splits %d", cfg, sp);
    got = cuda_tune_get(&b, "fprop bf16 n2 c64", &cfg, &sp);
    check(got && cfg == 0 && sp == 1, "tune.from_disk", "cfg %d splits %d", cfg, sp);
    check(!cuda_tune_get(&b, "fprop bf16 n3 c64", &cfg, &sp), "tune.unknown_key", NULL);
    /* malformed lines appended by hand: skipped, the good ones still load */
    DIR *dd = opendir(dir);
    struct dirent *e;
    char path[1400] = "";
    while (dd && (e = readdir(dd)))
        if (strncmp(e->d_name, "tune-", 5) == 0) snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (dd) closedir(dd);
    FILE *f = path[0] ? fopen(path, "a") : NULL;
    check(f != NULL && strstr(path, "132sm") != NULL, "tune.file", "%s", path);
    if (f) {
        fputs("garbage without a bar\nfprop_tc bad|x|y|z\nfprop_tc neg|-1|1|2.0\nfprop_tc zero|1|0|2.0\n", f);
        fclose(f);
    }
    check(cuda_tune_get(&c, "fprop bf16 n1 c64", &cfg, &sp) && cfg == 3 && sp == 2 &&
              !cuda_tune_get(&c, "fprop bad", &cfg, &sp) && !cuda_tune_get(&c, "fprop neg", &cfg, &sp) &&
              !cuda_tune_get(&c, "fprop zero", &cfg, &sp),
          "tune.malformed_skipped", NULL);
    d.sm_count = 114; /* another GPU of the same arch: its own file */
    check(!cuda_tune_get(&d, "fprop bf16 n1 c64", &cfg, &sp), "tune.per_sm_count", NULL);
    cuda_tune_free(&a), cuda_tune_free(&b), cuda_tune_free(&c), cuda_tune_free(&d);
    if (path[0]) unlink(path);
    rmdir(dir);
}

/* ---- programmatic dependent launch: every kernel waits for the one before it first ------------------------ */

static int line_of(const char *src, const char *p) {
    int n = 1;
    for (; src < p; src++) n += *src == '\n';
    return n;
}

static void test_pdl_enter(void) {
    int kernels = 0;
    for (int i = 0; i < cnn_kernel_file_count; i++) {
        const char *src = (const char *)cnn_kernel_files[i].data, *p = src;
        while ((p = strstr(p, "extern \"C\" __global__")) != NULL) {
            const char *open = strchr(p, '{'), *semi = strchr(p, ';');
            if (!open || (semi && semi < open)) { /* a declaration, not a definition */
                p += 10;
                continue;
            }
            const char *body = open + 1;
            while (*body == ' ' || *body == '\n') body++;
            char name[160], fn[64];
            const char *paren = open; /* the last ( before the body: the parameters (not __launch_bounds__) */
            while (paren > p && *paren != '(') paren--;
            int nlen = 0;
            for (const char *q = paren; q > p && q[-1] != ' ' && nlen < 63; q--) nlen++;
            snprintf(fn, sizeof fn, "%.*s", nlen, paren - nlen);
            snprintf(name, sizeof name, "nvrtc.pdl_enter.%s.%s.line%d", cnn_kernel_files[i].name, fn,
                     line_of(src, p));
            check(strncmp(body, "pdl_enter();", 12) == 0, name, "the kernel's body begins \"%.12s\"", body);
            kernels++;
            p = body;
        }
    }
    check(kernels >= 40, "nvrtc.pdl_enter.found", "%d kernel definitions in the embedded sources", kernels);
}

/* cuda_fast_divisor: div_by's multiply-and-shift (kernels/common.cuh, the same arithmetic here) equals x / d for
 * every divisor up to 4096 and some large ones, over x near 0, near multiples of d and near 2^31 */
static unsigned div_by_host(int x, int d, int mul, int shr) {
    return d == 1 ? (unsigned)x : (unsigned)(((unsigned long long)(unsigned)x * (unsigned)mul) >> 32) >> shr;
}
static void test_fast_divisor(void) {
    static const int big[] = {4097, 12544, 50176, 65535, 65536, 65537, 1000003, 2147395600 /* 46340^2 */, 0x40000000,
                              0x7ffffffe, 0x7fffffff};
    long bad = 0, tried = 0;
    int first_d = 0, first_x = 0;
    for (int i = 0; i < 4096 + (int)(sizeof big / sizeof big[0]); i++) {
        const int d = i < 4096 ? i + 1 : big[i - 4096];
        int mul, shr;
        cuda_fast_divisor(d, &mul, &shr);
        long long xs[64];
        int nx = 0;
        for (int k = 0; k < 8; k++) xs[nx++] = k, xs[nx++] = 0x7fffffffLL - k;
        for (long long k = 1; k <= 12; k++)
            for (long long e = -1; e <= 1; e++) xs[nx++] = k * 0x7fffffffLL / 13 / d * d + e; /* near multiples of d */
        for (int k = 0; k < nx; k++) {
            const long long x = xs[k];
            if (x < 0 || x > 0x7fffffffLL) continue;
            tried++;
            if (div_by_host((int)x, d, mul, shr) != (unsigned)(x / d) && bad++ == 0) first_d = d, first_x = (int)x;
        }
    }
    check(bad == 0, "fast_divisor.exact", "%ld of %ld quotients wrong (first: %d / %d)", bad, tried, first_x, first_d);
}

int main(void) {
    const char *q = getenv("CNN_TEST_QUICK");
    bool quick = q && q[0] && strcmp(q, "0") != 0;
    test_pdl_enter();
    test_fast_divisor();
    test_cache();
    test_tune_cache();
    if (cnn_cuda_nvrtc_load(getenv("CUDA_HOME")) != CNN_OK) {
        skip("nvrtc.compile_all", cnn_error_msg());
        return test_finish();
    }
    int major, minor;
    cnn_cuda_nvrtc_version(&major, &minor);
    printf("# NVRTC %d.%d\n", major, minor);
    test_registry(quick);
    return test_finish();
}
#endif
