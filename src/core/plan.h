/* plan.h — memory planning: place buffers with known lifetimes into one arena (internal to src/core). */
#ifndef CNN_PLAN_H
#define CNN_PLAN_H

#include "cnn/cnn.h"

/* A buffer of `bytes` alive from step `first` to step `last` inclusive. */
typedef struct cnn_interval {
    size_t bytes;
    int first, last;
    size_t offset; /* out */
} cnn_interval;

/* Greedy best-fit by decreasing size: every interval gets an `align`-aligned offset such that no two
 * intervals overlapping in time overlap in memory. Returns the arena size. Deterministic. */
size_t cnn_plan_arena(cnn_interval *iv, int n, size_t align);
/* What cnn_plan_arena (and the model's planners) return when host memory ran out (CNN_E_OOM recorded). */
#define CNN_PLAN_OOM SIZE_MAX

#endif
