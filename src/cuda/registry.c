/* registry.c -- every program the engine can compile: the list of kernel families, each (family, dtype, config)
 * numbered as one program id, and the NVRTC options and cache descriptor of a program. The launchers ask for
 * kernels by (family, dtype, config) and tests/unit/test_nvrtc.c walks the same ids, so the set that CI
 * compiles is exactly the set the engine can emit.
 *
 * Families are declared next to their launchers (the search space beside the kernel): conv2d.c declares the
 * three conv passes and their tile configs, pointwise.c its scalar/vector variants, and so on.
 */
#include "cuda/internal.h"
#include "cuda/embed.h"

#include <stdio.h>
#include <string.h>

static const cuda_family *const families[] = {
    &cuda_family_conv2d_fprop,     &cuda_family_conv2d_dgrad,     &cuda_family_conv2d_wgrad,
    &cuda_family_conv2d_fprop_mma, &cuda_family_conv2d_dgrad_mma, &cuda_family_conv2d_wgrad_mma,
    &cuda_family_conv2d_fprop_tc,  &cuda_family_conv2d_fprop_ffma, &cuda_family_conv2d_fprop_wg,
    &cuda_family_conv2d_fprop_ws,  &cuda_family_conv2d_fprop_first, &cuda_family_winograd, &cuda_family_pointwise,
    &cuda_family_batchnorm,        &cuda_family_pool,             &cuda_family_loss,
    &cuda_family_prep,             &cuda_family_optim,            &cuda_family_conv2d_wgrad_wgmma,
};
#define N_FAMILIES ((int)(sizeof families / sizeof families[0]))

/* activation dtypes in program order */
static const cnn_dtype act_dtypes[] = {CNN_DTYPE_F32, CNN_DTYPE_F16, CNN_DTYPE_BF16};
#define N_ACT 3

static unsigned dt_bit(cnn_dtype dt) {
    return dt == CNN_DTYPE_F32 ? CUDA_DT_F32 : dt == CNN_DTYPE_F16 ? CUDA_DT_F16 : dt == CNN_DTYPE_BF16 ? CUDA_DT_BF16 : 0;
}

static int n_dtypes(const cuda_family *f) {
    int n = 0;
    for (int k = 0; k < N_ACT; k++) n += (f->dtypes & dt_bit(act_dtypes[k])) != 0;
    return f->dtypes ? n : 1;
}

static int family_size(const cuda_family *f) { return n_dtypes(f) * f->n_configs; }

bool cuda_family_has_dtype(const cuda_family *fam, cnn_dtype dt) { return fam->dtypes == 0 || (fam->dtypes & dt_bit(dt)); }

/* the d-th dtype of a family's mask, in act_dtypes order */
static cnn_dtype nth_dtype(const cuda_family *f, int d) {
    for (int k = 0; k < N_ACT; k++)
        if ((f->dtypes & dt_bit(act_dtypes[k])) && d-- == 0) return act_dtypes[k];
    CNN_ASSERT(!"dtype index out of range");
    return CNN_DTYPE_F32;
}

const char *cuda_dtype_str(cnn_dtype dt) {
    switch (dt) {
    case CNN_DTYPE_F32: return "f32";
    case CNN_DTYPE_F16: return "f16";
    case CNN_DTYPE_BF16: return "bf16";
    default: return "?";
    }
}

/* kernels/common.cuh's ACT values */
static int act_define(cnn_dtype dt) {
    switch (dt) {
    case CNN_DTYPE_F32: return 0;
    case CNN_DTYPE_F16: return 1;
    case CNN_DTYPE_BF16: return 2;
    default: CNN_ASSERT(!"not an activation dtype"); return -1;
    }
}

int cuda_program_total(void) {
    int t = 0;
    for (int i = 0; i < N_FAMILIES; i++) t += family_size(families[i]);
    return t;
}

int cnn_cuda_program_count(void) { return cuda_program_total(); }

int cuda_program_id(const cuda_family *fam, cnn_dtype dt, int cfg) {
    int base = 0;
    for (int i = 0; i < N_FAMILIES; i++) {
        if (families[i] == fam) {
            CNN_ASSERT(cfg >= 0 && cfg < fam->n_configs);
            int d = 0;
            if (fam->dtypes) {
                CNN_ASSERT(fam->dtypes & dt_bit(dt));
                for (int k = 0; k < N_ACT && act_dtypes[k] != dt; k++) d += (fam->dtypes & dt_bit(act_dtypes[k])) != 0;
            }
            return base + d * fam->n_configs + cfg;
        }
        base += family_size(families[i]);
    }
    CNN_ASSERT(!"family not in the registry");
    return -1;
}

/* id -> (family, dtype index, cfg) */
static const cuda_family *decode(int id, int *d, int *cfg) {
    CNN_ASSERT(id >= 0);
    for (int i = 0; i < N_FAMILIES; i++) {
        int n = family_size(families[i]);
        if (id < n) {
            *d = id / families[i]->n_configs;
            *cfg = id % families[i]->n_configs;
            return families[i];
        }
        id -= n;
    }
    CNN_ASSERT(!"program id out of range");
    return NULL;
}

void cnn_cuda_program_describe(int id, cnn_cuda_program_info *out) {
    int d, cfg;
    const cuda_family *f = decode(id, &d, &cfg);
    memset(out, 0, sizeof *out);
    out->family = f->name;
    out->file = f->file;
    out->entries = f->entries;
    out->n_entries = f->n_entries;
    char defs[200];
    f->defines(cfg, defs, sizeof defs);
    const char *cname = f->config_name ? f->config_name(cfg) : "";
    if (f->dtypes) {
        cnn_dtype dt = nth_dtype(f, d);
        snprintf(out->defines, sizeof out->defines, "-DACT=%d%s%s", act_define(dt), defs[0] ? " " : "", defs);
        snprintf(out->label, sizeof out->label, "%s[%s%s%s]", f->name, cuda_dtype_str(dt), cname[0] ? " " : "", cname);
    } else {
        snprintf(out->defines, sizeof out->defines, "%s", defs);
        snprintf(out->label, sizeof out->label, "%s[%s]", f->name, cname[0] ? cname : "-");
    }
}

int cuda_program_options(int id, const char *arch, char *store, size_t store_cap, const char **opts, int max) {
    cnn_cuda_program_info info;
    cnn_cuda_program_describe(id, &info);
    int n = snprintf(store, store_cap, "--gpu-architecture=%s --std=c++17 -lineinfo %s", arch, info.defines);
    CNN_ASSERT(n > 0 && (size_t)n < store_cap);
    int count = 0;
    char *save = NULL;
    for (char *tok = strtok_r(store, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        CNN_ASSERT(count < max);
        opts[count++] = tok;
    }
    return count;
}

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
