/* fuzz.h — what every libFuzzer target of tests/fuzz shares: REQUIRE (a broken promise traps, which libFuzzer
 * and the replay driver report as a crash) and the check that a failure left a one-line message.
 *
 * A target is tests/fuzz/fuzz_<name>.c defining LLVMFuzzerTestOneInput (and, if it needs set-up,
 * LLVMFuzzerInitialize); its stored corpus is tests/fuzz/corpus/<name>/ and its optional dictionary
 * tests/fuzz/<name>.dict. build.sh (libFuzzer, clang) and replay.sh (the corpus under ASan/UBSan, `make test`)
 * find targets by that naming alone: a new parser's target joins by adding those files. */
#ifndef CNN_FUZZ_H
#define CNN_FUZZ_H

#include "cnn/cnn.h"

#include <stdio.h>
#include <string.h>

#define REQUIRE(cond)                                                                                                  \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "%s: broken promise at line %d: %s\n", __FILE__, __LINE__, #cond);                        \
            __builtin_trap();                                                                                          \
        }                                                                                                              \
    } while (0)

/* After a call that returned st: OK, or a failure with a non-empty message without control characters. */
static inline void fuzz_check_status(cnn_status st) {
    if (st == CNN_OK) return;
    const char *msg = cnn_error_msg();
    REQUIRE(st > CNN_OK && st < CNN_E_COUNT);
    REQUIRE(msg[0] != 0);
    for (const unsigned char *p = (const unsigned char *)msg; *p; p++) REQUIRE(*p >= 0x20 && *p != 0x7f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#endif
