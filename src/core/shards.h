/* shards.h — --deterministic training whose trajectory does not depend on the number of ranks (issue 29).
 *
 * fp32 training is chaotic: two runs whose sums differ only in the order of their additions part at the first
 * rounding and the difference grows about tenfold a step (perf-log step 66). So N ranks at global batch B follow
 * one rank at batch B only if every sum over the batch is computed bit for bit the same way. Under
 * --deterministic the global batch is SHARDS_MAX or fewer equal slices of images (cnn_shards_global); every sum
 * over the batch (filter and bias gradients, BatchNorm's statistics and sums) is each slice's own sum, computed
 * as a rank holding only that slice computes it, and the slices' sums are added in a pairwise tree over the
 * slices in batch order. A rank holds an aligned block of the slices, a subtree; its sums go on up the tree
 * through comm_allreduce (backend.h: a pairwise tree over the ranks). The ops that do not sum over the batch run
 * in one launch over the slices with the kernel a rank of one slice would get (cnn_conv2d.choose_n), so that each
 * image's outputs are those of a rank of that many images; every rank chooses that kernel for the global batch
 * where the backend's bits allow (choice_n). Not covered:
 * dropout, whose mask is drawn by each rank's own element index (VGG's classifier: --dropout 0 for equal runs).
 */
#ifndef CNN_CORE_SHARDS_H
#define CNN_CORE_SHARDS_H

#include "cnn/backend.h"
#include "cnn/net.h"

#define CNN_SHARDS_MAX 8

/* The slices of a global batch: the largest power of two <= CNN_SHARDS_MAX that divides it. */
int cnn_shards_global(int global_batch);

/* A rank's slices (cnn_backend.batch_shards) when world ranks share the global batch: cnn_shards_global / world,
 * or 0 when world does not divide it (the run is then deterministic but not independent of the rank count). */
int cnn_shards_local(int global_batch, int world);

/* Sets be->batch_shards = shards (>= 1) and wraps be's ops that take the batch: the convolutions and the linear
 * layer so that they run with a slice's bits (their choice the global batch's: world ranks of this batch) and,
 * with 2 slices or more, their sums over the batch and the other ops' as slices (through be->tree_sum over a scratch
 * of `shards` rows, each the largest sum of one of net's layers: its weight's gradient and its bias's).
 * cnn_shards_end undoes it; both are no-ops with shards < 1 or on a backend not wrapped. */
cnn_status cnn_shards_begin(cnn_backend *be, int shards, int world, const cnn_net *net);
void cnn_shards_end(cnn_backend *be);

#endif
