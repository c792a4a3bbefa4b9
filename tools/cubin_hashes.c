/* cubin_hashes.c -- compile every program of the kernel registry with NVRTC (no GPU needed) and write each CUBIN
 * to a directory, one file per (program, arch); tools/cubin_hashes.sh hashes them. Used to show that a refactoring
 * leaves every kernel binary byte-identical. Programs compile exactly as the engine compiles them
 * (cnn_cuda_compile_program, -lineinfo included).
 *
 *     cubin_hashes OUT_DIR [--no-lineinfo] [--only SUBSTRING] [ARCH...]       (default archs: sm_90a sm_80)
 *
 * --only keeps the programs whose label contains SUBSTRING. --no-lineinfo compiles without -lineinfo: the line
 * table names the kernel file and every line number, so a comment added above a kernel or a file renamed changes
 * the engine's CUBIN without changing a single instruction; without it the CUBIN is the code alone.
 *
 * Prints one line per compiled program: "label<TAB>arch<TAB>file"; exit status 1 if any compilation failed.
 */
#include "cuda/hooks.h"
#ifdef CNN_HAVE_CUDA
#include "cuda/internal.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef CNN_HAVE_CUDA
int main(void) {
    fprintf(stderr, "cubin_hashes: built without CUDA headers\n");
    return 2;
}
#else

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s OUT_DIR [ARCH...]\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1], *only = NULL;
    bool lineinfo = true;
    int a0 = 2;
    if (argc > a0 && strcmp(argv[a0], "--no-lineinfo") == 0) lineinfo = false, a0++;
    if (argc > a0 + 1 && strcmp(argv[a0], "--only") == 0) only = argv[a0 + 1], a0 += 2;
    const char *def_archs[] = {"sm_90a", "sm_80"};
    const char **archs = argc > a0 ? (const char **)argv + a0 : def_archs;
    const int na = argc > a0 ? argc - a0 : 2;
    if (cnn_cuda_nvrtc_load(getenv("CUDA_HOME")) != CNN_OK) {
        fprintf(stderr, "cubin_hashes: %s\n", cnn_error_msg());
        return 2;
    }
    const int n = cnn_cuda_program_count();
    int failed = 0;
    char (*files)[400] = calloc((size_t)n * na, sizeof *files);
    int *ok = calloc((size_t)n * na, sizeof *ok);
    if (!files || !ok) return 2;
#pragma omp parallel for schedule(dynamic)
    for (int j = 0; j < n * na; j++) {
        cnn_cuda_program_info info;
        cnn_cuda_program_describe(j / na, &info);
        if (only && !strstr(info.label, only)) continue;
        char name[200];
        snprintf(name, sizeof name, "%s.%s", info.label, archs[j % na]);
        for (char *p = name; *p; p++)
            if (*p == ' ' || *p == '/' || *p == '[' || *p == ']') *p = '_';
        snprintf(files[j], sizeof files[j], "%s/%s.cubin", dir, name);
        void *img = NULL;
        size_t len = 0;
        char *log = NULL;
        char store[1024];
        const char *opts[40];
        int no = cuda_program_options(j / na, archs[j % na], store, sizeof store, opts, 40), k = 0;
        for (int i = 0; i < no; i++) /* the engine's options, less -lineinfo when asked */
            if (lineinfo || strcmp(opts[i], "-lineinfo") != 0) opts[k++] = opts[i];
        if (cuda_nvrtc_compile(info.label, info.file, opts, k, false, &img, &len, &log) == CNN_OK) {
            FILE *f = fopen(files[j], "wb");
            ok[j] = f && fwrite(img, 1, len, f) == len;
            if (f && fclose(f) != 0) ok[j] = 0;
        }
        free(img);
        free(log);
    }
    for (int j = 0; j < n * na; j++) {
        cnn_cuda_program_info info;
        cnn_cuda_program_describe(j / na, &info);
        if (only && !strstr(info.label, only)) continue;
        if (!ok[j]) {
            fprintf(stderr, "cubin_hashes: %s for %s failed\n", info.label, archs[j % na]);
            failed = 1;
            continue;
        }
        printf("%s\t%s\t%s\n", info.label, archs[j % na], files[j]);
    }
    free(files);
    free(ok);
    return failed;
}
#endif
