/* driver.c -- run-time loading of the CUDA driver API: dlopen("libcuda.so.1"), then every symbol of
 * CUDA_DRIVER_SYMBOLS (internal.h) through cuGetProcAddress with a pinned ABI version, falling back to dlsym of
 * the exported versioned name (and of CUDA_DRIVER_OPTIONAL, left NULL where the driver lacks them). Nothing is
 * linked, so a binary built with CUDA 13 headers runs (on the CPU) on a machine without a driver and uses any
 * driver recent enough to provide these ABIs (CUDA 11.4+).
 */
#include "cuda/internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

cuda_driver cu;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static cnn_status load_status = CNN_E_DEVICE;
static char load_error[512];

typedef CUresult (*get_proc_v2_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult (*get_proc_v1_fn)(const char *, void **, int, cuuint64_t);

static void *resolve(void *lib, get_proc_v2_fn gp2, get_proc_v1_fn gp1, const char *sym, int ver, int newer,
                     const char *exported) {
    int versions[2] = {newer, ver};
    for (int i = 0; i < 2; i++) {
        if (versions[i] == 0) continue;
        void *p = NULL;
        CUresult r = CUDA_ERROR_NOT_FOUND;
        if (gp2) {
            CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
            r = gp2(sym, &p, versions[i], CU_GET_PROC_ADDRESS_LEGACY_STREAM, &q);
            if (q != CU_GET_PROC_ADDRESS_SUCCESS) p = NULL;
        } else if (gp1) {
            r = gp1(sym, &p, versions[i], CU_GET_PROC_ADDRESS_LEGACY_STREAM);
        }
        if (r == CUDA_SUCCESS && p) return p;
    }
    return dlsym(lib, exported);
}

static void load(void) {
    const char *names[] = {"libcuda.so.1", "libcuda.so"};
    void *lib = NULL;
    char first_err[256] = "";
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !lib; i++) {
        lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!lib && i == 0) snprintf(first_err, sizeof first_err, "%s", dlerror());
    }
    if (!lib) {
        snprintf(load_error, sizeof load_error, "cannot load the CUDA driver: %s", first_err);
        return;
    }
    get_proc_v2_fn gp2 = (get_proc_v2_fn)dlsym(lib, "cuGetProcAddress_v2");
    get_proc_v1_fn gp1 = gp2 ? NULL : (get_proc_v1_fn)dlsym(lib, "cuGetProcAddress");
    void *p;
#define CUDA_DRIVER_RESOLVE(field, sym, ver, newer, exported)                                                 \
    p = resolve(lib, gp2, gp1, #sym, ver, newer, exported);                                                   \
    if (!p) {                                                                                                 \
        snprintf(load_error, sizeof load_error,                                                               \
                 "the CUDA driver lacks %s (ABI of CUDA %d.%d); a newer driver is needed", #sym, (ver) / 1000, \
                 (ver) % 1000 / 10);                                                                          \
        return;                                                                                               \
    }                                                                                                         \
    memcpy(&cu.field, &p, sizeof p);
    CUDA_DRIVER_SYMBOLS(CUDA_DRIVER_RESOLVE)
#undef CUDA_DRIVER_RESOLVE
#define CUDA_DRIVER_RESOLVE_OPTIONAL(field, sym, ver, newer, exported)                                        \
    p = resolve(lib, gp2, gp1, #sym, ver, newer, exported);                                                   \
    memcpy(&cu.field, &p, sizeof p);
    CUDA_DRIVER_OPTIONAL(CUDA_DRIVER_RESOLVE_OPTIONAL)
#undef CUDA_DRIVER_RESOLVE_OPTIONAL
    /* the library stays loaded for the life of the process */
    load_status = CNN_OK;
}

cnn_status cuda_driver_load(void) {
    pthread_once(&load_once, load);
    if (load_status != CNN_OK) return cnn_fail(load_status, "%s", load_error);
    return CNN_OK;
}

const char *cuda_error_text(CUresult r, char *buf, size_t cap) {
    const char *name = NULL, *str = NULL;
    if (cu.GetErrorName) cu.GetErrorName(r, &name);
    if (cu.GetErrorString) cu.GetErrorString(r, &str);
    if (name && str)
        snprintf(buf, cap, "%s (%s)", name, str);
    else
        snprintf(buf, cap, "CUresult %d", (int)r);
    return buf;
}

cnn_status cuda_fail(CUresult r, const char *what) {
    char buf[256];
    cuda_error_text(r, buf, sizeof buf);
    return cnn_fail(r == CUDA_ERROR_OUT_OF_MEMORY ? CNN_E_OOM : CNN_E_DEVICE, "%s: %s", what, buf);
}
