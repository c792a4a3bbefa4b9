/* registry.c -- every program the engine can compile: the list of kernel families, each (family, dtype, config)
 * numbered as one program id, and the NVRTC options and cache descriptor of a program. The launchers ask for
 * kernels by (family, dtype, config) and tests/unit/test_nvrtc.c walks the same ids, so the set that CI
 * compiles is exactly the set the engine can emit.
 *
 * Families are data, below every launcher: conv2d_programs.c declares the convolution's from conv2d_table.c's rows
 * (the search space), families.c every other op's. The cache descriptor of a program is nvrtc.c's.
 */
#include "cuda/conv2d.h"

#include <stdio.h>
#include <string.h>

static const cuda_family *const families[] = {
    &cuda_family_conv2d_fprop,     &cuda_family_conv2d_dgrad,     &cuda_family_conv2d_wgrad,
    &cuda_family_conv2d_fprop_mma, &cuda_family_conv2d_dgrad_mma, &cuda_family_conv2d_wgrad_mma,
    &cuda_family_conv2d_fprop_pipelined,  &cuda_family_conv2d_fprop_pipelined_ffma, &cuda_family_conv2d_fprop_wgmma,
    &cuda_family_conv2d_fprop_warpspec,  &cuda_family_conv2d_fprop_first, &cuda_family_winograd, &cuda_family_pointwise,
    &cuda_family_batchnorm,        &cuda_family_pool,             &cuda_family_loss,
    &cuda_family_prep,             &cuda_family_optim,            &cuda_family_conv2d_wgrad_wgmma,
    &cuda_family_conv2d_wgrad_few, &cuda_family_conv2d_phase_pipelined, &cuda_family_conv2d_phase_pipelined_ffma,
    &cuda_family_conv2d_phase_wgmma, &cuda_family_conv2d_phase_warpspec, &cuda_family_conv2d_group_warpspec,
    &cuda_family_conv2d_stats_warpspec, &cuda_family_conv2d_ft_warpspec, &cuda_family_conv2d_ft_gate_warpspec,
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

static int family_size(const cuda_family *f) { return n_dtypes(f) * cuda_family_configs(f); }

bool cuda_family_has_dtype(const cuda_family *fam, cnn_dtype dt) { return fam->dtypes == 0 || (fam->dtypes & dt_bit(dt)); }

/* the d-th dtype of a family's mask, in act_dtypes order */
static cnn_dtype nth_dtype(const cuda_family *f, int d) {
    for (int k = 0; k < N_ACT; k++)
        if ((f->dtypes & dt_bit(act_dtypes[k])) && d-- == 0) return act_dtypes[k];
    CNN_ASSERT(!"dtype index out of range");
    return CNN_DTYPE_F32;
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
            CNN_ASSERT(cfg >= 0 && cfg < cuda_family_configs(fam));
            int d = 0;
            if (fam->dtypes) {
                CNN_ASSERT(fam->dtypes & dt_bit(dt));
                for (int k = 0; k < N_ACT && act_dtypes[k] != dt; k++) d += (fam->dtypes & dt_bit(act_dtypes[k])) != 0;
            }
            return base + d * cuda_family_configs(fam) + cfg;
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
            *d = id / cuda_family_configs(families[i]);
            *cfg = id % cuda_family_configs(families[i]);
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
    CNN_ASSERT(f->n_entries <= 64);
    for (int e = 0; e < f->n_entries; e++)
        if (!f->entry_config || f->entry_config(e) == cfg) out->held |= 1ULL << e;
    out->sm90a = f->sm90a;
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
