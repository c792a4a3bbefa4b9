/* emu_fault.h — fault injection shared by the emulator's libraries (tests/reliability/b19_faults.sh). Include once,
 * after defining EMU_LIB (the library's name in the count file) and EMU_FAIL_ENV (the variable naming the call
 * that fails):
 *   EMU_FAIL_ENV=n: the n-th call into this library's API fails (its error code, nothing done);
 *   CNN_EMU_COUNT=path: the number of calls is appended to path at exit ("<EMU_LIB> <calls>"). */
#ifndef CNN_EMU_FAULT_H
#define CNN_EMU_FAULT_H

#include <stdio.h>
#include <stdlib.h>

static long long emu_calls, emu_fail_at = -2;
static const char *emu_count_path;
static void emu_count_report(void) {
    FILE *f = fopen(emu_count_path, "a");
    if (f) fprintf(f, EMU_LIB " %lld\n", (long long)__atomic_load_n(&emu_calls, __ATOMIC_SEQ_CST)), fclose(f);
}
static bool emu_fault(void) {
    if (__atomic_load_n(&emu_fail_at, __ATOMIC_SEQ_CST) == -2) {
        const char *v = getenv(EMU_FAIL_ENV);
        emu_count_path = getenv("CNN_EMU_COUNT");
        if (emu_count_path && __atomic_exchange_n(&emu_fail_at, v ? atoll(v) : -1, __ATOMIC_SEQ_CST) == -2)
            atexit(emu_count_report);
        else __atomic_store_n(&emu_fail_at, v ? atoll(v) : -1, __ATOMIC_SEQ_CST);
    }
    return __atomic_add_fetch(&emu_calls, 1, __ATOMIC_SEQ_CST) == emu_fail_at;
}
#define FAULT(err)                                                                                            \
    do {                                                                                                      \
        if (emu_fault()) return (err);                                                                        \
    } while (0)

#endif
