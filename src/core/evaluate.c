/* evaluate.c — evaluation: top-1/top-5 and the mean loss over a test set in eval mode, split across ranks and
 * reduced (cnn_evaluate_dist), and the batch sizes it runs, which the loop compiles ahead (cnn_eval_batch_sizes). */
#include "cnn/train.h"
#include "guard.h"
#include "model.h"

#include <stdlib.h>
#include <string.h>

/* the images evaluated (*n, clipped to the set), the batch (*batch, clipped to the model's) and this rank's share
 * of the images: [*first, *first + *mine) */
static void eval_share(const cnn_model *m, int64_t ds_n, int *n, int *batch, const cnn_dist_ctx *dist, int64_t *first,
                       int64_t *mine) {
    if (*n <= 0 || *n > ds_n) *n = (int)ds_n;
    *first = 0, *mine = *n;
    if (dist) cnn_dist_split(*n, dist->rank, dist->world, first, mine);
    if (*batch > cnn_model_max_batch(m)) *batch = cnn_model_max_batch(m);
}

int cnn_eval_batch_sizes(const cnn_model *m, int64_t ds_n, int n, int batch, const struct cnn_dist_ctx *dist,
                         int out[2]) {
    int64_t first, mine;
    if (batch < 1) return 0;
    eval_share(m, ds_n, &n, &batch, dist, &first, &mine);
    int k = 0;
    if (mine >= batch) out[k++] = batch;
    if (mine % batch) out[k++] = (int)(mine % batch);
    return k;
}

cnn_status cnn_evaluate(cnn_model *m, const cnn_dataset *ds, int n, int batch, cnn_eval_result *out) {
    return cnn_evaluate_dist(m, ds, n, batch, NULL, out);
}

cnn_status cnn_evaluate_dist(cnn_model *m, const cnn_dataset *ds, int n, int batch, cnn_dist_ctx *dist,
                             cnn_eval_result *out) {
    memset(out, 0, sizeof *out);
    int64_t first, mine;
    eval_share(m, ds->n, &n, &batch, dist, &first, &mine);
    int classes = cnn_model_net(m)->num_classes;
    cnn_loader l;
    CNN_TRY(cnn_loader_init(&l, ds, cnn_model_backend(m), batch, false, false, 0));
    float *logits = malloc((size_t)batch * classes * sizeof *logits);
    int64_t *labels = malloc((size_t)batch * sizeof *labels);
    cnn_status st = logits && labels ? CNN_OK : cnn_fail(CNN_E_OOM, "out of host memory evaluating");
    double loss_sum = 0;
    int64_t c1 = 0, c5 = 0, bad = 0;
    for (int64_t start = first; start < first + mine && st == CNN_OK; start += batch) {
        int b = first + mine - start < batch ? (int)(first + mine - start) : batch;
        float loss;
        st = cnn_loader_batch(&l, m, 0, start, b, labels);
        if (st == CNN_OK) st = cnn_model_forward(m, b, CNN_MODE_EVAL, 0);
        if (st == CNN_OK) st = cnn_model_loss(m, b, labels, 0.0f, &loss);
        if (st == CNN_OK) st = cnn_model_download_logits(m, b, logits);
        if (st != CNN_OK) break;
        loss_sum += (double)loss * b;
        for (int i = 0; i < b; i++) {
            const float *z = logits + (size_t)i * classes;
            /* a NaN compares false with everything: such a row would rank its label first. It is wrong. */
            if (cnn_first_nonfinite(z, classes) >= 0) {
                bad++;
                continue;
            }
            float t = z[labels[i]];
            int above = 0;
            for (int j = 0; j < classes; j++) above += z[j] > t || (z[j] == t && j < labels[i]);
            c1 += above < 1;
            c5 += above < 5;
        }
    }
    free(logits);
    free(labels);
    out->skipped = cnn_loader_skipped(&l);
    cnn_loader_free(&l);
    CNN_TRY(st);
    double sums[5] = {loss_sum, (double)c1, (double)c5, (double)bad, (double)out->skipped};
    CNN_TRY(cnn_dist_sum(dist, sums, 5));
    loss_sum = sums[0], c1 = (int64_t)sums[1], c5 = (int64_t)sums[2], bad = (int64_t)sums[3];
    out->skipped = (int64_t)sums[4];
    out->n = n;
    out->loss = loss_sum / n;
    out->top1 = (double)c1 / n;
    out->top5 = (double)c5 / n;
    out->nonfinite = (int)bad;
    return CNN_OK;
}
