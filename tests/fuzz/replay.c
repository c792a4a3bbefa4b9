/* replay.c — runs a fuzz target's LLVMFuzzerTestOneInput over files, without libFuzzer: each argument is a file
 * or a directory of files (not recursive). Linked with any compiler and the sanitizers, it is how `make test`
 * replays the stored corpora (replay.sh). Prints one line with the count; a broken promise or a sanitizer
 * report ends the process (the replay fails). */
#include "fuzz.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>

__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);

static long run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    if (!buf || (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n)) {
        fprintf(stderr, "%s: cannot read\n", path);
        exit(2);
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, (size_t)n);
    free(buf);
    return 1;
}

int main(int argc, char **argv) {
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    long files = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) {
            perror(argv[i]);
            return 2;
        }
        if (!S_ISDIR(sb.st_mode)) {
            files += run_file(argv[i]);
            continue;
        }
        DIR *d = opendir(argv[i]);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
            if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) files += run_file(path);
        }
        if (d) closedir(d);
    }
    printf("replayed %ld inputs\n", files);
    return 0;
}
