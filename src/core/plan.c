/* plan.c — arena planning for activations and gradients: buffers with disjoint lifetimes share memory.
 * Greedy: place the largest buffers first, each at the lowest aligned offset that does not collide with an
 * already-placed buffer alive at the same time. O(n^2) in the number of buffers (hundreds). */
#include "plan.h"

#include <stdlib.h>

static size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

static int by_size_desc(const void *pa, const void *pb, void *ctx) {
    const cnn_interval *iv = ctx;
    const cnn_interval *a = &iv[*(const int *)pa], *b = &iv[*(const int *)pb];
    if (a->bytes != b->bytes) return a->bytes > b->bytes ? -1 : 1;
    return *(const int *)pa - *(const int *)pb;
}

/* insertion sort keeps this free of qsort_r portability questions; n is small */
static void sort_order(int *order, int n, cnn_interval *iv) {
    for (int i = 1; i < n; i++) {
        int v = order[i], j = i - 1;
        while (j >= 0 && by_size_desc(&order[j], &v, iv) > 0) {
            order[j + 1] = order[j];
            j--;
        }
        order[j + 1] = v;
    }
}

size_t cnn_plan_arena(cnn_interval *iv, int n, size_t align) {
    int *order = malloc((size_t)(n ? n : 1) * sizeof *order);
    int *placed = malloc((size_t)(n ? n : 1) * sizeof *placed);
    if (!order || !placed) {
        free(order);
        free(placed);
        cnn_fail(CNN_E_OOM, "out of host memory planning an arena of %d buffers", n);
        return CNN_PLAN_OOM;
    }
    for (int i = 0; i < n; i++) order[i] = i;
    sort_order(order, n, iv);
    size_t total = 0;
    int n_placed = 0;
    for (int oi = 0; oi < n; oi++) {
        cnn_interval *a = &iv[order[oi]];
        size_t size = align_up(a->bytes ? a->bytes : 1, align);
        size_t off = 0;
        /* Repeat: bump past any conflicting placed buffer until a full pass finds none. */
        for (bool moved = true; moved;) {
            moved = false;
            for (int pj = 0; pj < n_placed; pj++) {
                const cnn_interval *b = &iv[placed[pj]];
                if (b->last < a->first || a->last < b->first) continue; /* disjoint in time */
                size_t bsize = align_up(b->bytes ? b->bytes : 1, align);
                if (off < b->offset + bsize && b->offset < off + size) {
                    off = align_up(b->offset + bsize, align);
                    moved = true;
                }
            }
        }
        a->offset = off;
        placed[n_placed++] = order[oi];
        if (off + size > total) total = off + size;
    }
    free(order);
    free(placed);
    return total;
}
