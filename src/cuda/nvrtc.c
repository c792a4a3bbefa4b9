/* nvrtc.c -- kernels from source to CUfunction: NVRTC loading (dlopen), compilation of embedded kernel sources,
 * the on-disk CUBIN cache, and the per-backend table of loaded modules.
 *
 * Disk cache. An entry is one file <dir>/<key>.cubin, key = FNV-1a 64 (hex) of a descriptor text that names
 * everything the binary depends on (kernel file + hash of its source, hash of all headers, the full option list
 * with the arch, NVRTC version, driver version; cuda_program_descriptor). File layout (little-endian):
 *     0   char[8]  magic "CNNKBIN1"
 *     8   u32      format version (1)
 *     12  u32      descriptor length D
 *     16  u64      key
 *     24  u64      payload length L
 *     32  u64      FNV-1a 64 of the payload
 *     40  D bytes  descriptor text (compared byte for byte: a key collision is a miss, not a wrong binary)
 *     40+D L bytes payload (CUBIN, or PTX for a GPU newer than NVRTC)
 * Every field is checked on load and the file size must be exactly 40+D+L; anything else is "rejected" and the
 * kernel is recompiled and the entry rewritten. Writes go to a unique temp file in the same directory, then
 * rename(2), so processes sharing the directory never see a partial entry.
 */
#include "cuda/internal.h"
#include "cuda/embed.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

cuda_nvrtc nvrtc;

/* ---- loading ------------------------------------------------------------------------------------------ */

static pthread_mutex_t nv_lock = PTHREAD_MUTEX_INITIALIZER;
static bool nv_loaded;
static char nv_error[512];

cnn_status cnn_cuda_nvrtc_load(const char *cuda_home) {
    pthread_mutex_lock(&nv_lock);
    if (nv_loaded) {
        pthread_mutex_unlock(&nv_lock);
        return CNN_OK;
    }
    char home_lib[1024];
    snprintf(home_lib, sizeof home_lib, "%s/lib64/libnvrtc.so", cuda_home && cuda_home[0] ? cuda_home : "/usr/local/cuda");
    const char *names[] = {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", home_lib};
    void *lib = NULL;
    char tried[512] = "";
    size_t off = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !lib; i++) {
        lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!lib && off < sizeof tried)
            off += (size_t)snprintf(tried + off, sizeof tried - off, "%s%s", i ? ", " : "", names[i]);
    }
    if (!lib) {
        snprintf(nv_error, sizeof nv_error, "cannot load NVRTC (tried %.460s)", tried);
        pthread_mutex_unlock(&nv_lock);
        return cnn_fail(CNN_E_DEVICE, "%s", nv_error);
    }
    cuda_nvrtc t;
    memset(&t, 0, sizeof t);
    const char *missing = NULL;
#define NV_SYM(field, name)                                                                                    \
    do {                                                                                                       \
        void *p_ = dlsym(lib, name);                                                                           \
        if (!p_ && !missing) missing = name;                                                                   \
        memcpy(&t.field, &p_, sizeof p_);                                                                      \
    } while (0)
    NV_SYM(Version, "nvrtcVersion");
    NV_SYM(GetErrorString, "nvrtcGetErrorString");
    NV_SYM(GetNumSupportedArchs, "nvrtcGetNumSupportedArchs");
    NV_SYM(GetSupportedArchs, "nvrtcGetSupportedArchs");
    NV_SYM(CreateProgram, "nvrtcCreateProgram");
    NV_SYM(DestroyProgram, "nvrtcDestroyProgram");
    NV_SYM(CompileProgram, "nvrtcCompileProgram");
    NV_SYM(GetProgramLogSize, "nvrtcGetProgramLogSize");
    NV_SYM(GetProgramLog, "nvrtcGetProgramLog");
    NV_SYM(GetCUBINSize, "nvrtcGetCUBINSize");
    NV_SYM(GetCUBIN, "nvrtcGetCUBIN");
    NV_SYM(GetPTXSize, "nvrtcGetPTXSize");
    NV_SYM(GetPTX, "nvrtcGetPTX");
#undef NV_SYM
    if (missing) {
        pthread_mutex_unlock(&nv_lock);
        return cnn_fail(CNN_E_DEVICE, "the NVRTC library found lacks %s (NVRTC 11.2 or newer is needed)", missing);
    }
    if (t.Version(&t.major, &t.minor) != NVRTC_SUCCESS) {
        pthread_mutex_unlock(&nv_lock);
        return cnn_fail(CNN_E_DEVICE, "nvrtcVersion failed");
    }
    nvrtc = t;
    nv_loaded = true;
    pthread_mutex_unlock(&nv_lock);
    return CNN_OK;
}

void cnn_cuda_nvrtc_version(int *major, int *minor) {
    *major = nvrtc.major;
    *minor = nvrtc.minor;
}

cnn_status cuda_pick_arch(int major, int minor, char *arch, size_t cap) {
    int n = 0;
    nvrtcResult r = nvrtc.GetNumSupportedArchs(&n); /* a library that fails here is broken, not the process */
    if (r != NVRTC_SUCCESS) return cnn_fail(CNN_E_DEVICE, "nvrtcGetNumSupportedArchs: %s", nvrtc.GetErrorString(r));
    if (n <= 0 || n > 256) return cnn_fail(CNN_E_DEVICE, "NVRTC reports %d supported architectures", n);
    int archs[256];
    r = nvrtc.GetSupportedArchs(archs);
    if (r != NVRTC_SUCCESS) return cnn_fail(CNN_E_DEVICE, "nvrtcGetSupportedArchs: %s", nvrtc.GetErrorString(r));
    int want = major * 10 + minor, best = -1;
    bool exact = false;
    for (int i = 0; i < n; i++) {
        if (archs[i] == want) exact = true;
        if (archs[i] <= want && archs[i] > best) best = archs[i];
    }
    if (exact) {
        /* Hopper gets the arch-specific target (wgmma, setmaxnreg) */
        snprintf(arch, cap, "sm_%d%s", want, want == 90 ? "a" : "");
        return CNN_OK;
    }
    if (best < 0)
        return cnn_fail(CNN_E_UNSUPPORTED, "GPU sm_%d is older than NVRTC %d.%d supports (oldest sm_%d)", want,
                        nvrtc.major, nvrtc.minor, archs[0]);
    /* a GPU newer than this NVRTC: PTX for the newest arch it knows, compiled by the driver */
    snprintf(arch, cap, "compute_%d", best);
    return CNN_OK;
}

/* ---- compilation ------------------------------------------------------------------------------------- */

const char *cuda_kernel_source(const char *file, size_t *len) {
    for (int i = 0; i < cnn_kernel_file_count; i++)
        if (strcmp(cnn_kernel_files[i].name, file) == 0) {
            if (len) *len = cnn_kernel_files[i].len;
            return (const char *)cnn_kernel_files[i].data;
        }
    return NULL;
}

static bool is_header(const char *name) {
    size_t n = strlen(name);
    return n > 4 && strcmp(name + n - 4, ".cuh") == 0;
}

cnn_status cuda_nvrtc_compile(const char *name, const char *file, const char **opts, int nopts, bool ptx,
                              void **image, size_t *len, char **log) {
    *image = NULL;
    *len = 0;
    if (log) *log = NULL;
    const char *src = cuda_kernel_source(file, NULL);
    if (!src) return cnn_fail(CNN_E_COMPILE, "%s: kernel file %s is not embedded in this binary", name, file);
    const char *hdr_src[16], *hdr_name[16];
    int nh = 0;
    for (int i = 0; i < cnn_kernel_file_count; i++)
        if (is_header(cnn_kernel_files[i].name)) {
            CNN_ASSERT(nh < 16);
            hdr_src[nh] = (const char *)cnn_kernel_files[i].data;
            hdr_name[nh] = cnn_kernel_files[i].name;
            nh++;
        }
    nvrtcProgram prog;
    nvrtcResult r = nvrtc.CreateProgram(&prog, src, file, nh, hdr_src, hdr_name);
    if (r != NVRTC_SUCCESS) return cnn_fail(CNN_E_COMPILE, "%s: nvrtcCreateProgram: %s", name, nvrtc.GetErrorString(r));
    nvrtcResult cr = nvrtc.CompileProgram(prog, nopts, opts);
    size_t log_size = 0;
    char *text = NULL;
    if (nvrtc.GetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS && log_size > 1) {
        text = malloc(log_size);
        if (text && nvrtc.GetProgramLog(prog, text) != NVRTC_SUCCESS) text[0] = 0;
    }
    if (cr != NVRTC_SUCCESS) {
        /* the whole log to stderr, its first lines in the message */
        char opt_line[1024];
        size_t o = 0;
        opt_line[0] = 0;
        for (int i = 0; i < nopts && o < sizeof opt_line; i++)
            o += (size_t)snprintf(opt_line + o, sizeof opt_line - o, "%s%s", i ? " " : "", opts[i]);
        cnn_log(0, "cnn: NVRTC failed on kernels/%s (%s), options: %s\n%s", file, name, opt_line, text ? text : "(no log)");
        cnn_status st = cnn_fail(CNN_E_COMPILE, "NVRTC could not compile kernels/%s for %s (%s): %.700s", file, name,
                                 nvrtc.GetErrorString(cr), text ? text : "(no log)");
        free(text);
        nvrtc.DestroyProgram(&prog);
        return st;
    }
    size_t n = 0;
    r = ptx ? nvrtc.GetPTXSize(prog, &n) : nvrtc.GetCUBINSize(prog, &n);
    void *buf = r == NVRTC_SUCCESS && n > 0 ? malloc(n) : NULL;
    if (buf) r = ptx ? nvrtc.GetPTX(prog, buf) : nvrtc.GetCUBIN(prog, buf);
    nvrtc.DestroyProgram(&prog);
    if (!buf || r != NVRTC_SUCCESS) {
        free(buf);
        free(text);
        return cnn_fail(r != NVRTC_SUCCESS ? CNN_E_COMPILE : CNN_E_OOM, "%s: cannot retrieve the compiled %s (%zu bytes)",
                        name, ptx ? "PTX" : "CUBIN", n);
    }
    *image = buf;
    *len = n;
    if (log)
        *log = text;
    else
        free(text);
    return CNN_OK;
}

cnn_status cnn_cuda_compile_program(int id, const char *arch, const char *extra_option, void **image, size_t *len,
                                    char **log) {
    CNN_ASSERT(id >= 0 && id < cuda_program_total());
    char store[1024];
    const char *opts[40];
    int n = cuda_program_options(id, arch, store, sizeof store, opts, 39);
    if (extra_option) opts[n++] = extra_option;
    cnn_cuda_program_info info;
    cnn_cuda_program_describe(id, &info);
    return cuda_nvrtc_compile(info.label, info.file, opts, n, strncmp(arch, "compute_", 8) == 0, image, len, log);
}

/* ---- the disk cache ------------------------------------------------------------------------------------ */

#define CACHE_MAGIC "CNNKBIN1"
#define CACHE_VERSION 1u
#define CACHE_HEADER 40
#define CACHE_MAX_FILE (256u << 20)

uint64_t cnn_fnv1a64(uint64_t h, const void *data, size_t len) {
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

void cnn_cuda_cache_path(const char *dir, const char *desc, char *buf, size_t cap) {
    uint64_t key = cnn_fnv1a64(CNN_FNV_OFFSET, desc, strlen(desc));
    snprintf(buf, cap, "%s/%016llx.cubin", dir, (unsigned long long)key);
}

cnn_cuda_cache_result cnn_cuda_cache_parse(const unsigned char *buf, size_t size, const char *desc, const char *path,
                                           void **data, size_t *len, char *why, size_t why_cap) {
    *data = NULL;
    *len = 0;
    if (why_cap) why[0] = 0;
    size_t dlen = strlen(desc);
    if (size < CACHE_HEADER || size > CACHE_MAX_FILE) {
        snprintf(why, why_cap, "%s: size %zu out of range", path, size);
        return CNN_CUDA_CACHE_REJECTED;
    }
    uint64_t key = cnn_fnv1a64(CNN_FNV_OFFSET, desc, dlen);
    uint32_t ver = get_u32(buf + 8), hd = get_u32(buf + 12);
    uint64_t fkey = get_u64(buf + 16), plen = get_u64(buf + 24), psum = get_u64(buf + 32);
    if (memcmp(buf, CACHE_MAGIC, 8) != 0) {
        snprintf(why, why_cap, "%s: bad magic", path);
        return CNN_CUDA_CACHE_REJECTED;
    }
    if (ver != CACHE_VERSION) {
        snprintf(why, why_cap, "%s: format version %u, expected %u", path, ver, CACHE_VERSION);
        return CNN_CUDA_CACHE_REJECTED;
    }
    if (fkey != key) {
        snprintf(why, why_cap, "%s: key %016llx does not match its name", path, (unsigned long long)fkey);
        return CNN_CUDA_CACHE_REJECTED;
    }
    /* plen <= size was checked first: the sum cannot wrap */
    if (hd != dlen || plen == 0 || plen > size || (uint64_t)CACHE_HEADER + hd + plen != (uint64_t)size) {
        snprintf(why, why_cap, "%s: lengths (descriptor %u, payload %llu) do not match the file size %zu", path, hd,
                 (unsigned long long)plen, size);
        return CNN_CUDA_CACHE_REJECTED;
    }
    if (memcmp(buf + CACHE_HEADER, desc, dlen) != 0) {
        snprintf(why, why_cap, "%s: descriptor differs (stale entry or key collision)", path);
        return CNN_CUDA_CACHE_REJECTED;
    }
    const unsigned char *payload = buf + CACHE_HEADER + dlen;
    if (cnn_fnv1a64(CNN_FNV_OFFSET, payload, (size_t)plen) != psum) {
        snprintf(why, why_cap, "%s: payload checksum mismatch (corrupt)", path);
        return CNN_CUDA_CACHE_REJECTED;
    }
    *data = malloc((size_t)plen);
    if (!*data) {
        snprintf(why, why_cap, "%s: no memory", path);
        return CNN_CUDA_CACHE_REJECTED;
    }
    memcpy(*data, payload, (size_t)plen);
    *len = (size_t)plen;
    return CNN_CUDA_CACHE_HIT;
}

cnn_cuda_cache_result cnn_cuda_cache_load(const char *dir, const char *desc, void **data, size_t *len, char *why,
                                          size_t why_cap) {
    *data = NULL;
    *len = 0;
    if (why_cap) why[0] = 0;
    char path[1200];
    cnn_cuda_cache_path(dir, desc, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return CNN_CUDA_CACHE_MISS;
    struct stat st;
    unsigned char *buf = NULL;
    cnn_cuda_cache_result res = CNN_CUDA_CACHE_REJECTED;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(why, why_cap, "%s: not a regular file", path);
        goto out;
    }
    if (st.st_size < CACHE_HEADER || (uint64_t)st.st_size > CACHE_MAX_FILE) {
        snprintf(why, why_cap, "%s: size %lld out of range", path, (long long)st.st_size);
        goto out;
    }
    size_t size = (size_t)st.st_size;
    buf = malloc(size);
    if (!buf) {
        snprintf(why, why_cap, "%s: no memory to read %zu bytes", path, size);
        goto out;
    }
    size_t got = 0;
    while (got < size) {
        ssize_t k = read(fd, buf + got, size - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
    if (got != size) {
        snprintf(why, why_cap, "%s: short read (%zu of %zu bytes)", path, got, size);
        goto out;
    }
    res = cnn_cuda_cache_parse(buf, size, desc, path, data, len, why, why_cap);
out:
    free(buf);
    close(fd);
    return res;
}

static int mkdir_p(const char *dir) {
    char tmp[1024];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof tmp) return -1;
    memcpy(tmp, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (tmp[i] == '/' || tmp[i] == 0) {
            char c = tmp[i];
            tmp[i] = 0;
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
            tmp[i] = c;
        }
    }
    return 0;
}

cnn_status cnn_cuda_cache_store(const char *dir, const char *desc, const void *data, size_t len) {
    static unsigned counter;
    if (mkdir_p(dir) != 0) return cnn_fail(CNN_E_IO, "kernel cache: cannot create %s: %s", dir, strerror(errno));
    char path[1200], tmp[1300];
    cnn_cuda_cache_path(dir, desc, path, sizeof path);
    unsigned k = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%u", path, (long)getpid(), k);
    size_t dlen = strlen(desc);
    unsigned char hdr[CACHE_HEADER];
    memcpy(hdr, CACHE_MAGIC, 8);
    put_u32(hdr + 8, CACHE_VERSION);
    put_u32(hdr + 12, (uint32_t)dlen);
    put_u64(hdr + 16, cnn_fnv1a64(CNN_FNV_OFFSET, desc, dlen));
    put_u64(hdr + 24, len);
    put_u64(hdr + 32, cnn_fnv1a64(CNN_FNV_OFFSET, data, len));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return cnn_fail(CNN_E_IO, "kernel cache: cannot create %s: %s", tmp, strerror(errno));
    const void *parts[3] = {hdr, desc, data};
    size_t sizes[3] = {CACHE_HEADER, dlen, len};
    bool ok = true;
    for (int i = 0; i < 3 && ok; i++) {
        const unsigned char *p = parts[i];
        size_t left = sizes[i];
        while (left > 0) {
            ssize_t w = write(fd, p, left);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) {
                ok = false;
                break;
            }
            p += w;
            left -= (size_t)w;
        }
    }
    int saved = errno;
    if (close(fd) != 0) ok = false;
    if (!ok || rename(tmp, path) != 0) {
        if (ok) saved = errno;
        unlink(tmp);
        return cnn_fail(CNN_E_IO, "kernel cache: cannot write %s: %s", path, strerror(saved));
    }
    return CNN_OK;
}

/* ---- the per-backend module table ------------------------------------------------------------------------ */

/* the disk cache's entry for program id, if there is a valid one (*image NULL otherwise) */
static void disk_lookup(cuda_be *cb, int id, void **image, size_t *len) {
    *image = NULL, *len = 0;
    if (!cb->cache_dir[0]) return;
    char desc[2048], why[512];
    cuda_program_descriptor(id, cb->arch, cb->driver_version, desc, sizeof desc);
    cnn_cuda_cache_result r = cnn_cuda_cache_load(cb->cache_dir, desc, image, len, why, sizeof why);
    if (r == CNN_CUDA_CACHE_HIT) {
        cb->stats.disk_hits++;
    } else if (r == CNN_CUDA_CACHE_REJECTED) {
        cb->stats.disk_rejects++;
        cnn_log(1, "cnn: kernel cache entry rejected, rebuilding: %s", why);
    }
}

/* a freshly compiled image into the disk cache (best effort) */
static void disk_store(cuda_be *cb, int id, const void *image, size_t len) {
    if (!cb->cache_dir[0]) return;
    char desc[2048];
    cuda_program_descriptor(id, cb->arch, cb->driver_version, desc, sizeof desc);
    if (cnn_cuda_cache_store(cb->cache_dir, desc, image, len) == CNN_OK) {
        cb->stats.disk_stores++;
    } else {
        cnn_log(2, "cnn: %s (continuing without caching this kernel)", cnn_error_msg());
        cnn_error_clear();
    }
}

/* load an image (freed here) as program id's module */
static cnn_status install_module(cuda_be *cb, int id, cuda_module *m, void *image, bool from_disk) {
    CUresult r = cu.ModuleLoadData(&m->mod, image);
    free(image);
    if (r != CUDA_SUCCESS) {
        m->mod = NULL;
        cnn_cuda_program_info info;
        cnn_cuda_program_describe(id, &info);
        char what[256];
        snprintf(what, sizeof what, "cuModuleLoadData(%s for %s%s)", info.label, cb->arch, from_disk ? ", from the disk cache" : "");
        return cuda_fail(r, what);
    }
    cb->stats.module_loads++;
    return CNN_OK;
}

/* a program compiled in this run (here, on a batch's worker or behind): counted, logged with its compile time and
 * `how` it was compiled, stored in the disk cache and loaded; image freed */
static cnn_status keep_compiled(cuda_be *cb, int id, void *image, size_t len, int ms, const char *how) {
    cb->stats.compiles++;
    cnn_cuda_program_info info;
    cnn_cuda_program_describe(id, &info);
    cnn_log(2, "cnn: compiled %s for %s in %d ms%s", info.label, cb->arch, ms, how);
    disk_store(cb, id, image, len);
    return install_module(cb, id, &cb->mods[id], image, false);
}

static cnn_status compile_one(const char *arch, int id, void **image, size_t *len) {
    cnn_cuda_program_info info;
    cnn_cuda_program_describe(id, &info);
    char store[1024];
    const char *opts[40];
    int n = cuda_program_options(id, arch, store, sizeof store, opts, 40);
    return cuda_nvrtc_compile(info.label, info.file, opts, n, strncmp(arch, "compute_", 8) == 0, image, len, NULL);
}

static void collect_if_behind(cuda_be *cb, int id);

static cnn_status load_module(cuda_be *cb, int id, cuda_module *m) {
    collect_if_behind(cb, id);
    if (m->mod) return CNN_OK;
    void *image;
    size_t len;
    disk_lookup(cb, id, &image, &len);
    if (image) return install_module(cb, id, m, image, true);
    double t0 = cnn_now();
    CNN_TRY(compile_one(cb->arch, id, &image, &len));
    cb->stats.lazy_compiles++;
    return keep_compiled(cb, id, image, len, (int)((cnn_now() - t0) * 1e3), "");
}

/* ---- compiling several programs at once (a dry run's batch, the autotuner's candidates) -------------------
 * Each program on a worker process forked for the batch, its image sent back on the worker's pipe; this process
 * loads the modules. Processes, not threads: NVRTC in the threads of one process stopped scaling at 4 threads on
 * the 16-core H200 machine, where processes kept scaling (perf-log step 109). A worker makes no CUDA call (the
 * driver does not survive fork; NVRTC needs none), only compiles, writes and _exits; it dies with this process
 * (PR_SET_PDEATHSIG). A program whose worker failed, died or stalled is compiled again by cuda_kernel when
 * first launched, which reports any error in context. */

typedef struct prep_job {
    int id;
    void *image;
    size_t len;
    int ms; /* its compilation's wall time on its worker */
    int kernels; /* the kernels the program holds: the batch's order */
} prep_job;

/* a program for a dry run's batch (each once) */
static void dry_note(cuda_be *cb, int id) {
    for (int i = 0; i < cb->n_dry; i++)
        if (cb->dry_ids[i] == id) return;
    if (cb->n_dry == cb->cap_dry) {
        int cap = cb->cap_dry ? 2 * cb->cap_dry : 128;
        int *t = realloc(cb->dry_ids, (size_t)cap * sizeof *t);
        if (!t) return; /* not noted: compiled when first launched, which is only slower */
        cb->dry_ids = t, cb->cap_dry = cap;
    }
    cb->dry_ids[cb->n_dry++] = id;
}

static int program_entries(int id) {
    cnn_cuda_program_info info;
    cnn_cuda_program_describe(id, &info);
    return __builtin_popcountll(info.held);
}

/* a record on a worker's pipe: the job, then len bytes of image (len 0: the compilation failed) */
typedef struct prep_record {
    int32_t job;
    int32_t ms;
    uint64_t len;
} prep_record;

/* a worker's end of its pipe, as this process reads it */
typedef struct prep_reader {
    pid_t pid;
    int fd;
    prep_record rec;
    size_t got;         /* bytes of the record, then of its image, read so far */
    unsigned char *buf; /* the image being read */
} prep_reader;

/* no byte from any worker for this long: a worker hangs (fork of a process whose other threads held a lock NVRTC
 * takes); the workers are killed and what they did not send compiles when first launched */
#define PREP_STALL_MS (300 * 1000)
#define PREP_MAX_WORKERS 32

static bool write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        c += w, n -= (size_t)w;
    }
    return true;
}

/* a worker: the jobs it claims (*next counts them out across the workers) compiled and written to fd */
static _Noreturn void prep_worker(const char *arch, const prep_job *jobs, int n, atomic_int *next, int fd,
                                  pid_t parent) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1); /* the parent died before prctl */
    for (int i; (i = atomic_fetch_add(next, 1)) < n;) {
        void *image = NULL;
        size_t len = 0;
        const double t0 = cnn_now();
        if (compile_one(arch, jobs[i].id, &image, &len) != CNN_OK) len = 0;
        prep_record r = {.job = i, .ms = (int32_t)((cnn_now() - t0) * 1e3), .len = image ? len : 0};
        if (!write_all(fd, &r, sizeof r) || (r.len && !write_all(fd, image, len))) _exit(1);
        free(image);
    }
    _exit(0);
}

/* read what is there on reader rd; false when its worker is done (end of file, or an error) */
static bool prep_read(prep_reader *rd, prep_job *jobs, int n) {
    const bool in_header = rd->got < sizeof rd->rec;
    void *dst = in_header ? (void *)((char *)&rd->rec + rd->got) : (void *)(rd->buf + (rd->got - sizeof rd->rec));
    size_t want = in_header ? sizeof rd->rec - rd->got : rd->rec.len - (rd->got - sizeof rd->rec);
    ssize_t r = read(rd->fd, dst, want);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) return true;
    if (r <= 0) return false;
    rd->got += (size_t)r;
    if (rd->got == sizeof rd->rec) { /* a header: check it, then the image (if any) */
        if (rd->rec.job < 0 || rd->rec.job >= n || rd->rec.len > ((uint64_t)1 << 31)) return false;
        if (rd->rec.len && !(rd->buf = malloc(rd->rec.len))) return false;
    }
    if (rd->got == sizeof rd->rec + rd->rec.len) { /* a whole record */
        prep_job *j = &jobs[rd->rec.job];
        if (rd->rec.len) j->image = rd->buf, j->len = rd->rec.len, j->ms = rd->rec.ms;
        rd->buf = NULL, rd->got = 0;
    }
    return true;
}

/* fork a worker that compiles the jobs it claims through *next onto a pipe, *rd its read end; false where it could
 * not be started */
static bool spawn_worker(const char *arch, const prep_job *jobs, int n, atomic_int *next, prep_reader *rd) {
    int p[2];
    if (pipe(p) != 0) return false;
    const pid_t self = getpid();
    fflush(NULL); /* nothing buffered is written twice */
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        prep_worker(arch, jobs, n, next, p[1], self);
    }
    close(p[1]);
    if (pid < 0) {
        close(p[0]);
        return false;
    }
    *rd = (prep_reader){.pid = pid, .fd = p[0]};
    return true;
}

/* compile the jobs on nw workers; false where none could be started (nothing compiled) */
static bool prep_run(const char *arch, prep_job *jobs, int n, int nw) {
    atomic_int *next = mmap(NULL, sizeof *next, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (next == MAP_FAILED) return false;
    atomic_init(next, 0);
    prep_reader rd[PREP_MAX_WORKERS];
    int started = 0;
    while (started < nw && spawn_worker(arch, jobs, n, next, &rd[started])) started++;
    struct pollfd pf[PREP_MAX_WORKERS];
    int open_n = started;
    while (open_n > 0) {
        int k = 0;
        for (int w = 0; w < started; w++)
            if (rd[w].fd >= 0) pf[k++] = (struct pollfd){.fd = rd[w].fd, .events = POLLIN};
        int r = poll(pf, (nfds_t)k, PREP_STALL_MS);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) { /* stalled (or poll failed): stop the workers */
            cnn_log(1, "cnn: kernel compile workers sent nothing for %d s: stopped (the rest compile when first "
                       "launched)", PREP_STALL_MS / 1000);
            for (int w = 0; w < started; w++)
                if (rd[w].fd >= 0) kill(rd[w].pid, SIGKILL);
            break;
        }
        for (int i = 0, w = 0; i < k; i++) {
            while (rd[w].fd != pf[i].fd) w++;
            if (pf[i].revents && !prep_read(&rd[w], jobs, n)) {
                close(rd[w].fd);
                rd[w].fd = -1, open_n--;
                free(rd[w].buf), rd[w].buf = NULL;
            }
        }
    }
    for (int w = 0; w < started; w++) {
        if (rd[w].fd >= 0) close(rd[w].fd), free(rd[w].buf);
        int status;
        while (waitpid(rd[w].pid, &status, 0) < 0 && errno == EINTR) {
        }
    }
    munmap(next, sizeof *next);
    return started > 0;
}

/* ---- compiling behind ------------------------------------------------------------------------------------ */

void cuda_compile_behind(cuda_be *cb, const int *ids, int n) {
    if (cnn_env_get()->compile_threads == 1) return; /* each compiled when first launched */
    for (int i = 0; i < n && cb->n_behind < CUDA_MAX_BEHIND; i++) {
        void *image;
        size_t len;
        disk_lookup(cb, ids[i], &image, &len);
        if (image) { /* built already: loaded when first needed */
            free(image);
            continue;
        }
        prep_job job = {.id = ids[i]}; /* the worker's copies of job and next are its own */
        atomic_int next;
        atomic_init(&next, 0);
        prep_reader rd;
        if (!spawn_worker(cb->arch, &job, 1, &next, &rd)) return;
        cb->behind[cb->n_behind].id = ids[i], cb->behind[cb->n_behind].fd = rd.fd, cb->behind[cb->n_behind].pid = rd.pid;
        cb->n_behind++;
    }
}

/* behind[k]'s image read (blocking) and loaded; its worker reaped */
static void collect_one(cuda_be *cb, int k, bool abandon) {
    const int id = cb->behind[k].id;
    prep_job job = {.id = id};
    prep_reader rd = {.pid = cb->behind[k].pid, .fd = cb->behind[k].fd};
    if (abandon) kill(rd.pid, SIGKILL);
    while (!abandon && prep_read(&rd, &job, 1)) {
    }
    close(rd.fd);
    free(rd.buf);
    int status;
    while (waitpid(rd.pid, &status, 0) < 0 && errno == EINTR) {
    }
    cb->behind[k] = cb->behind[--cb->n_behind];
    if (!job.image) return; /* failed or abandoned: compiled when first needed, which reports an error in context */
    if (keep_compiled(cb, id, job.image, job.len, job.ms, " (behind)") != CNN_OK) cnn_error_clear(); /* retried later */
}

void cuda_collect_behind(cuda_be *cb, bool abandon) {
    while (cb->n_behind) collect_one(cb, cb->n_behind - 1, abandon);
}

/* the program id if it compiles behind: collected (loaded where it compiled) */
static void collect_if_behind(cuda_be *cb, int id) {
    for (int k = 0; k < cb->n_behind; k++)
        if (cb->behind[k].id == id) return collect_one(cb, k, false);
}

/* compile workers: CNN_COMPILE_THREADS (1 = compile each when first launched), else one per CPU online, at most
 * PREP_MAX_WORKERS (each NVRTC compilation holds a few hundred MB at its peak) */
void cuda_prepare_programs(cuda_be *cb, const int *ids, int n) {
    if (cb->dry_run) {
        for (int i = 0; i < n; i++)
            if (!cb->mods[ids[i]].mod) dry_note(cb, ids[i]);
        return;
    }
    cuda_collect_behind(cb, false); /* their workers' CPUs free, and none compiled twice */
    prep_job *jobs = malloc((size_t)(n > 0 ? n : 1) * sizeof *jobs);
    if (!jobs) return; /* each compiled when first launched */
    int nj = 0;
    for (int i = 0; i < n; i++) {
        int id = ids[i];
        CNN_ASSERT(id >= 0 && id < cb->n_mods);
        bool dup = false;
        for (int j = 0; j < i; j++) dup |= ids[j] == id;
        if (dup || cb->mods[id].mod) continue;
        void *image;
        size_t len;
        disk_lookup(cb, id, &image, &len);
        if (image) { /* already built: load it now */
            if (install_module(cb, id, &cb->mods[id], image, true) != CNN_OK) cnn_error_clear(); /* retried later */
            continue;
        }
        jobs[nj++] = (prep_job){.id = id, .kernels = program_entries(id)};
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    const int want = cnn_env_get()->compile_threads;
    int nw = want > 0 ? want : cpus > 0 ? (int)cpus : 1;
    if (nw > PREP_MAX_WORKERS) nw = PREP_MAX_WORKERS;
    if (nw > nj) nw = nj;
    if (nj < 2 || nw < 2) { /* nothing to overlap: cuda_kernel compiles each when asked */
        free(jobs);
        return;
    }
    /* the programs of many kernels first (BatchNorm's, the pool's): the longest compilations, which should not be
     * left to run alone at the end (a stable sort: otherwise in the order noted) */
    for (int i = 1; i < nj; i++)
        for (int j = i; j > 0 && jobs[j].kernels > jobs[j - 1].kernels; j--) {
            prep_job t = jobs[j];
            jobs[j] = jobs[j - 1], jobs[j - 1] = t;
        }
    double t0 = cnn_now();
    if (!prep_run(cb->arch, jobs, nj, nw)) nw = 0;
    int built = 0;
    char how[32];
    snprintf(how, sizeof how, " (%d at once)", nj);
    for (int i = 0; i < nj; i++) {
        if (!jobs[i].image) continue;
        built++;
        if (keep_compiled(cb, jobs[i].id, jobs[i].image, jobs[i].len, jobs[i].ms, how) != CNN_OK) cnn_error_clear();
    }
    cnn_log(2, "cnn: %d of %d programs compiled on %d worker processes in %.0f ms", built, nj, nw,
            (cnn_now() - t0) * 1e3);
    free(jobs);
}

cnn_status cuda_dry_run_begin(cnn_backend *be) {
    cuda_be *cb = cuda_impl(be);
    if (cb->capturing || cb->dry_run) return cnn_fail(CNN_E_INVALID, "dry_run_begin while %s",
                                                      cb->capturing ? "a graph is being recorded" : "in a dry run");
    cb->dry_run = true;
    cb->n_dry = 0;
    cb->dry_stats = cb->stats;
    return CNN_OK;
}

cnn_status cuda_dry_run_end(cnn_backend *be) {
    cuda_be *cb = cuda_impl(be);
    if (!cb->dry_run) return cnn_fail(CNN_E_INVALID, "dry_run_end without dry_run_begin");
    cb->dry_run = false;
    cb->stats = cb->dry_stats; /* the launches it counted were not made */
    cuda_bind(cb);
    cuda_prepare_programs(cb, cb->dry_ids, cb->n_dry);
    cb->n_dry = 0;
    return CNN_OK;
}

cnn_status cuda_kernel(cuda_be *cb, const cuda_family *fam, cnn_dtype dt, int cfg, int entry, CUfunction *out) {
    CNN_ASSERT(entry >= 0 && entry < fam->n_entries && entry < CUDA_MAX_ENTRIES);
    CNN_ASSERT(cfg >= 0 && cfg < cuda_family_configs(fam) && cuda_family_has_dtype(fam, dt));
    CNN_ASSERT(!fam->entry_config || fam->entry_config(entry) == cfg);
    int id = cuda_program_id(fam, dt, cfg);
    CNN_ASSERT(id >= 0 && id < cb->n_mods);
    cuda_module *m = &cb->mods[id];
    if (m->fn[entry]) {
        *out = m->fn[entry];
        return CNN_OK;
    }
    if (!m->mod && cb->dry_run) { /* noted for the batch; nothing is launched */
        dry_note(cb, id);
        *out = NULL;
        return CNN_OK;
    }
    if (!m->mod) CNN_TRY(load_module(cb, id, m));
    CUresult r = cu.ModuleGetFunction(&m->fn[entry], m->mod, fam->entries[entry]);
    if (r != CUDA_SUCCESS) {
        m->fn[entry] = NULL;
        char what[200];
        snprintf(what, sizeof what, "cuModuleGetFunction(%s in %s)", fam->entries[entry], fam->file);
        return cuda_fail(r, what);
    }
    *out = m->fn[entry];
    return CNN_OK;
}

/* ---- the cache descriptor of a program -------------------------------------------------------------------- */

static uint64_t headers_hash(void) {
    uint64_t h = CNN_FNV_OFFSET;
    for (int i = 0; i < cnn_kernel_file_count; i++) {
        size_t n = strlen(cnn_kernel_files[i].name);
        if (n > 4 && strcmp(cnn_kernel_files[i].name + n - 4, ".cuh") == 0) {
            h = cnn_fnv1a64(h, cnn_kernel_files[i].name, n + 1);
            h = cnn_fnv1a64(h, cnn_kernel_files[i].data, cnn_kernel_files[i].len);
        }
    }
    return h;
}

void cuda_program_descriptor(int id, const char *arch, int driver_version, char *buf, size_t cap) {
    cnn_cuda_program_info info;
    cnn_cuda_program_describe(id, &info);
    size_t len = 0;
    const char *src = cuda_kernel_source(info.file, &len);
    uint64_t sh = src ? cnn_fnv1a64(CNN_FNV_OFFSET, src, len) : 0;
    char store[1024];
    const char *opts[40];
    int n = cuda_program_options(id, arch, store, sizeof store, opts, 40);
    size_t o = (size_t)snprintf(buf, cap, "cnn.c kernel cache v1\nfile %s %016llx\nheaders %016llx\noptions", info.file,
                                (unsigned long long)sh, (unsigned long long)headers_hash());
    for (int i = 0; i < n && o < cap; i++) o += (size_t)snprintf(buf + o, cap - o, " %s", opts[i]);
    if (o < cap)
        snprintf(buf + o, cap - o, "\nnvrtc %d.%d\ndriver %d\n", nvrtc.major, nvrtc.minor, driver_version);
}
