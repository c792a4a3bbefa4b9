/* test_dist_train.c — the data-parallel training loop (train.c with a cnn_dist_ctx, model.c's gradient buckets) on
 * the CPU: two ranks as two threads, each with its own CPU backend whose comm_* entries are a test double (sums in
 * rank order through shared memory; the product's collectives are NCCL's, on the GPU). Checks: the bucket plan
 * covers the gradient arena once; the backward sums every gradient exactly once per step; after a run of two ranks
 * both hold the same weights bitwise, only rank 0 wrote the output directory, and its checkpoint resumes on one
 * rank at the same global batch. */
#include "test.h"
#include "cnn/train.h"
#include "core/model.h"
#include "core/shards.h"

#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the test double of the collectives: ranks are threads of this process ---- */
#define WORLD 2     /* the ranks of most runs here */
#define MAX_WORLD 4 /* the --deterministic runs' largest */
typedef struct shared {
    pthread_barrier_t bar;
    int world;          /* ranks of the run in progress (the barrier's count) */
    void *slot[MAX_WORLD];
    int64_t calls;              /* allreduce calls of rank 0, F32 */
    int64_t covered;            /* F32 elements rank 0 summed in its calls */
} shared;
typedef struct fake_comm {
    shared *sh;
    int rank;
} fake_comm;

static cnn_status fake_allreduce(cnn_backend *be, void *comm, void *x, int64_t count, cnn_comm_op op, bool side) {
    fake_comm *c = comm;
    shared *sh = c->sh;
    size_t esz = op == CNN_COMM_SUM_F64 ? 8 : 4;
    void *tmp = malloc((size_t)count * esz);
    CNN_ASSERT(tmp);
    sh->slot[c->rank] = x;
    pthread_barrier_wait(&sh->bar);
    const int w = sh->world;
    for (int64_t i = 0; i < count; i++) { /* the pairwise tree over the ranks in rank order (backend.h) */
        if (op == CNN_COMM_SUM_F32) {
            float t[MAX_WORLD];
            for (int r = 0; r < w; r++) t[r] = ((float *)sh->slot[r])[i];
            for (int step = 1; step < w; step *= 2)
                for (int r = 0; r + step < w; r += 2 * step) t[r] += t[r + step];
            ((float *)tmp)[i] = t[0];
        } else if (op == CNN_COMM_SUM_F64) {
            double t[MAX_WORLD];
            for (int r = 0; r < w; r++) t[r] = ((double *)sh->slot[r])[i];
            for (int step = 1; step < w; step *= 2)
                for (int r = 0; r + step < w; r += 2 * step) t[r] += t[r + step];
            ((double *)tmp)[i] = t[0];
        } else {
            uint32_t m = 0;
            for (int r = 0; r < w; r++) m = ((uint32_t *)sh->slot[r])[i] > m ? ((uint32_t *)sh->slot[r])[i] : m;
            ((uint32_t *)tmp)[i] = m;
        }
    }
    pthread_barrier_wait(&sh->bar);
    memcpy(x, tmp, (size_t)count * esz);
    free(tmp);
    if (c->rank == 0 && op == CNN_COMM_SUM_F32 && count > 1) sh->calls++, sh->covered += count;
    pthread_barrier_wait(&sh->bar);
    return CNN_OK;
}

static cnn_status fake_join(cnn_backend *be, void *comm) { return CNN_OK; }

static cnn_status fake_broadcast(cnn_backend *be, void *comm, void *x, size_t bytes, int root) {
    fake_comm *c = comm;
    c->sh->slot[c->rank] = x;
    pthread_barrier_wait(&c->sh->bar);
    if (c->rank != root) memcpy(x, c->sh->slot[root], bytes);
    pthread_barrier_wait(&c->sh->bar);
    return CNN_OK;
}

/* bfloat16 sums as NCCL does them: each rank's values rounded to bf16 (to nearest even), added in rank order with
 * each partial sum rounded to bf16, widened back */
static float bf16_round(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&v, &u, 4);
    return v;
}

static int64_t bf16_calls; /* rank 0's */

static cnn_status fake_allreduce_bf16(cnn_backend *be, void *comm, float *x, void *scratch, int64_t count, bool side) {
    fake_comm *c = comm;
    shared *sh = c->sh;
    float *tmp = malloc((size_t)count * sizeof *tmp);
    CNN_ASSERT(tmp && scratch);
    sh->slot[c->rank] = x;
    pthread_barrier_wait(&sh->bar);
    for (int64_t i = 0; i < count; i++) {
        float s = bf16_round(((float *)sh->slot[0])[i]);
        for (int r = 1; r < sh->world; r++) s = bf16_round(s + bf16_round(((float *)sh->slot[r])[i]));
        tmp[i] = s;
    }
    pthread_barrier_wait(&sh->bar);
    memcpy(x, tmp, (size_t)count * sizeof *tmp);
    free(tmp);
    if (c->rank == 0) bf16_calls++;
    pthread_barrier_wait(&sh->bar);
    return CNN_OK;
}

static void install(cnn_backend *be) {
    be->comm_allreduce = fake_allreduce;
    be->comm_allreduce_bf16 = fake_allreduce_bf16;
    be->comm_join = fake_join;
    be->comm_broadcast = fake_broadcast;
}

/* ---- the ranks ---- */
static shared sh;
static cnn_dataset train_ds, test_ds;
static char out_dir[256];

typedef struct rank_run {
    int rank, world, batch;
    int64_t steps, stop_after;
    bool resume;
    size_t bucket_bytes;
    bool sync_bn, bf16_sums, deterministic;
    float lr;           /* 0: the default */
    const char *dir;    /* the run's output directory; NULL: out_dir */
    cnn_status st;
    char err[512];
    float *params; /* (n_trainable) host copy after the run */
    int64_t n;
} rank_run;

/* the model every run here trains: CIFAR ResNet-18, 10 classes */
static cnn_model_opts r18_opts(void) {
    cnn_model_opts mo = cnn_model_opts_default();
    mo.arch = "resnet18";
    mo.stem = CNN_STEM_CIFAR;
    mo.num_classes = 10;
    return mo;
}

static void remove_dir(const char *dir) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

static void *run_rank(void *arg) {
    rank_run *r = arg;
    cnn_backend *be = NULL;
    cnn_model *m = NULL;
    fake_comm fc = {.sh = &sh, .rank = r->rank};
    cnn_dist_ctx d = {.rank = r->rank, .world = r->world, .comm = &fc};
    cnn_status st = cnn_cpu_backend_create(1, &be);
    if (st == CNN_OK) {
        install(be);
        d.be = be;
        st = be->alloc(be, 8 * sizeof(double), "scratch", (void **)&d.host_sum);
    }
    cnn_model_opts mo = r18_opts();
    mo.seed = 10 + (uint64_t)r->rank; /* unlike initial weights: the broadcast must make them equal */
    if (st == CNN_OK) st = cnn_model_create(&mo, be, 32, 32, r->batch, true, &m);
    cnn_dp_opts dp = {.bucket_bytes = r->bucket_bytes, .world = r->world, .sync_bn = r->sync_bn,
                      .bf16_sums = r->bf16_sums};
    if (st == CNN_OK && r->world > 1) st = cnn_model_set_comm(m, &fc, &dp);
    cnn_train_opts o = cnn_train_opts_default();
    o.batch = r->batch;
    o.steps = r->steps;
    o.out_dir = r->dir ? r->dir : out_dir;
    o.checkpoint_every = 2;
    o.eval_size = 16;
    o.progress = false;
    o.resume = r->resume;
    o.stop_after = r->stop_after;
    o.seed = 3;
    if (r->lr > 0) o.lr = r->lr;
    o.dist = r->world > 1 ? &d : NULL;
    o.deterministic = r->deterministic;
    if (st == CNN_OK) st = cnn_train(m, &mo, &train_ds, &test_ds, &o);
    r->st = st;
    snprintf(r->err, sizeof r->err, "%s", st == CNN_OK ? "" : cnn_error_msg());
    if (m) {
        r->n = cnn_model_net(m)->n_trainable;
        r->params = malloc((size_t)r->n * sizeof(float));
        memcpy(r->params, cnn_model_params(m), (size_t)r->n * sizeof(float)); /* CPU: host memory */
    }
    if (d.host_sum) be->free(be, d.host_sum);
    cnn_model_free(m);
    cnn_backend_destroy(be);
    return NULL;
}

static int count_lines(const char *path, const char *needle) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f)) n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

static void test_buckets(void) {
    cnn_backend *be = NULL;
    cnn_model *m = NULL;
    cnn_model_opts mo = r18_opts();
    fake_comm fc = {.sh = &sh, .rank = 0};
    bool ok = cnn_cpu_backend_create(1, &be) == CNN_OK && (install(be), cnn_model_create(&mo, be, 32, 32, 2, true, &m)) == CNN_OK;
    cnn_dp_opts dp = {.bucket_bytes = (size_t)1 << 20, .world = WORLD};
    ok = ok && cnn_model_set_comm(m, &fc, &dp) == CNN_OK;
    int64_t expect_hi = ok ? cnn_model_net(m)->n_trainable : 0;
    int prev_step = 1 << 30;
    for (int b = 0; ok && b < m->n_buckets; b++) { /* back to front, contiguous, in backward order */
        ok &= m->buckets[b].hi == expect_hi && m->buckets[b].lo < m->buckets[b].hi && m->buckets[b].step < prev_step;
        expect_hi = m->buckets[b].lo;
        prev_step = m->buckets[b].step;
    }
    check(ok && expect_hi == 0 && m->n_buckets > 3, "bucket_plan", "%d buckets of about 1 MiB over %lld gradients",
          m ? m->n_buckets : 0, m ? (long long)cnn_model_net(m)->n_trainable : 0LL);
    cnn_model_free(m);
    cnn_backend_destroy(be);
}

/* the per-step losses of a run's metrics.jsonl, in order; returns how many (at most cap) */
static int read_losses(const char *dir, double *loss, int cap) {
    char path[400], line[1024];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *f = fopen(path, "r");
    int n = 0;
    while (f && n < cap && fgets(line, sizeof line, f)) {
        const char *e = strstr(line, "\"loss\":");
        if (e) loss[n++] = atof(e + 7);
    }
    if (f) fclose(f);
    return n;
}

/* The runs' learning rate: a small one with a small batch, where the rounding differences between 1 and 2 ranks
 * stay rounding-sized for the test's few steps (they grow with steps and rate: --trajectory shows how). */
static float run_lr = 0.01f;

/* A run of `world` ranks (threads) of `batch` images each into dir; the ranks' statuses and errors joined; rank
 * 0's weights after it into *params when params is not NULL (the caller frees them). */
static cnn_status run_ranks_ex(int world, int batch, int64_t steps, bool sync_bn, bool bf16_sums, bool deterministic,
                               const char *dir, char *err, size_t cap, float **params, int64_t *n_params) {
    rank_run rr[MAX_WORLD];
    pthread_t th[MAX_WORLD];
    remove_dir(dir);
    CNN_ASSERT(world >= 1 && world <= MAX_WORLD);
    if (world > 1 && world != WORLD) { /* the barrier counts this run's ranks, then WORLD again */
        pthread_barrier_destroy(&sh.bar);
        pthread_barrier_init(&sh.bar, NULL, (unsigned)world);
    }
    sh.world = world > 1 ? world : WORLD;
    for (int r = 0; r < world; r++) {
        rr[r] = (rank_run){.rank = r, .world = world, .batch = batch, .steps = steps, .bucket_bytes = 256 << 10,
                           .sync_bn = sync_bn, .bf16_sums = bf16_sums, .deterministic = deterministic, .dir = dir,
                           .lr = run_lr};
        if (world > 1) pthread_create(&th[r], NULL, run_rank, &rr[r]);
        else run_rank(&rr[r]);
    }
    cnn_status st = CNN_OK;
    err[0] = 0;
    for (int r = 0; r < world; r++) {
        if (world > 1) pthread_join(th[r], NULL);
        if (rr[r].st != CNN_OK) st = rr[r].st, snprintf(err, cap, "rank %d: %s", r, rr[r].err);
        if (r == 0 && params) *params = rr[r].params, *n_params = rr[r].n;
        else free(rr[r].params);
    }
    if (world > 1 && world != WORLD) {
        pthread_barrier_destroy(&sh.bar);
        pthread_barrier_init(&sh.bar, NULL, WORLD);
    }
    sh.world = WORLD;
    return st;
}

static cnn_status run_ranks(int world, int batch, int64_t steps, bool sync_bn, bool bf16_sums, const char *dir,
                            char *err, size_t cap) {
    return run_ranks_ex(world, batch, steps, sync_bn, bf16_sums, false, dir, err, cap, NULL, NULL);
}

/* how many slices a global batch is cut into, and a rank's share */
static void test_shard_counts(void) {
    const struct {
        int batch, world, global, local;
    } c[] = {{64, 1, 8, 8}, {64, 2, 8, 4}, {64, 4, 8, 2}, {64, 8, 8, 1}, {64, 16, 8, 0}, {100, 1, 4, 4},
             {100, 4, 4, 1}, {100, 8, 4, 0}, {96, 3, 8, 0}, {7, 1, 1, 1}, {2, 2, 2, 1}, {1, 1, 1, 1}};
    int bad = 0;
    char first[160] = "";
    for (int i = 0; i < (int)(sizeof c / sizeof c[0]); i++) {
        const int g = cnn_shards_global(c[i].batch), l = cnn_shards_local(c[i].batch, c[i].world);
        if ((g != c[i].global || l != c[i].local) && bad++ == 0)
            snprintf(first, sizeof first, "; first: batch %d on %d ranks gave %d slices, %d a rank (want %d, %d)",
                     c[i].batch, c[i].world, g, l, c[i].global, c[i].local);
    }
    check(bad == 0, "shard_counts", "%d of %d cases wrong%s", bad, (int)(sizeof c / sizeof c[0]), first);
}

/* ---- --deterministic's ops choose for the global batch on any number of slices a rank holds ----
 * The CPU backend ignores choice_n (its GEMM's bits follow its row count), so the ranks' test below cannot see a
 * wrapper that leaves it out: here the table's ops record what they are called with. Every convolution pass and
 * the linear layer, forward and backward, must run as one call over the rank's slices of its batch (choose_n =
 * batch / slices) with the global batch's choice (choice_n = batch x world), a rank of one slice included (its
 * wgrads and linear layer once chose for its own images: 8 ranks of one slice took other kernels than 1 rank of 8). */
static cnn_backend saved_ops; /* the CPU backend's table before the recorders */
static int want_choose, want_choice, op_calls, op_wrong;
static void op_seen(int choose_n, int choice_n) {
    op_calls++;
    op_wrong += choose_n != want_choose || choice_n != want_choice;
}
static cnn_status rec_fprop(cnn_backend *be, const cnn_conv2d *cv, const cnn_epilogue *ep, const void *x,
                            const void *w, void *y) {
    op_seen(cv->choose_n, cv->choice_n);
    return saved_ops.conv2d_fprop(be, cv, ep, x, w, y);
}
static cnn_status rec_dgrad(cnn_backend *be, const cnn_conv2d *cv, const void *dy, const void *w, void *dx,
                            bool accumulate) {
    op_seen(cv->choose_n, cv->choice_n);
    return saved_ops.conv2d_dgrad(be, cv, dy, w, dx, accumulate);
}
static cnn_status rec_dgrad_relu(cnn_backend *be, const cnn_conv2d *cv, const void *dy, const void *w,
                                 const void *relu_y, void *dx, float *dx_sum) {
    op_seen(cv->choose_n, cv->choice_n);
    return saved_ops.conv2d_dgrad_relu(be, cv, dy, w, relu_y, dx, dx_sum);
}
static cnn_status rec_wgrad(cnn_backend *be, const cnn_conv2d *cv, const void *x, const void *dy, float *dw) {
    op_seen(cv->choose_n, cv->choice_n);
    return saved_ops.conv2d_wgrad(be, cv, x, dy, dw);
}
static cnn_status rec_linear_forward(cnn_backend *be, const cnn_linear *ln, const void *x, const void *w,
                                     const float *bias, void *y) {
    op_seen(ln->choose_n, ln->choice_n);
    return saved_ops.linear_forward(be, ln, x, w, bias, y);
}
static cnn_status rec_linear_backward(cnn_backend *be, const cnn_linear *ln, const void *x, const void *w,
                                      const void *dy, void *dx, bool accumulate, float *dw, float *dbias) {
    op_seen(ln->choose_n, ln->choice_n);
    return saved_ops.linear_backward(be, ln, x, w, dy, dx, accumulate, dw, dbias);
}

static void test_slices_choose_global(void) {
    enum { BATCH = 2 };
    cnn_backend *be = NULL;
    cnn_model *m = NULL;
    cnn_model_opts mo = r18_opts();
    bool ok = cnn_cpu_backend_create(1, &be) == CNN_OK;
    if (ok) {
        saved_ops = *be;
        be->conv2d_fprop = rec_fprop, be->conv2d_dgrad = rec_dgrad, be->conv2d_dgrad_relu = rec_dgrad_relu;
        be->conv2d_wgrad = rec_wgrad, be->linear_forward = rec_linear_forward;
        be->linear_backward = rec_linear_backward;
        ok = cnn_model_create(&mo, be, 32, 32, BATCH, true, &m) == CNN_OK;
    }
    cnn_model_set_graphs(m, false);
    const int worlds[] = {8, 4}; /* a global batch of 16: 8 slices, 1 and 2 a rank */
    const int64_t labels[BATCH] = {3, 7};
    for (int i = 0; i < 2 && ok; i++) {
        int slices = 0;
        ok = cnn_model_begin_slices(m, BATCH, worlds[i], &slices) == CNN_OK;
        want_choose = slices ? BATCH / slices : -1, want_choice = BATCH * worlds[i], op_calls = op_wrong = 0;
        cnn_status st = ok ? cnn_model_forward(m, BATCH, CNN_MODE_TRAIN, 1) : CNN_E_INVALID;
        if (st == CNN_OK) st = cnn_model_backward(m, BATCH, labels, 0.0f, NULL);
        cnn_model_end_slices(m);
        char name[64]; /* ResNet-18's calls: 20 convolutions' forward and wgrad, 19 dgrads (not the first layer's),
                        * the linear layer's two */
        snprintf(name, sizeof name, "slices_choose_global.%d_ranks_of_%d_slices", worlds[i], slices);
        check(ok && st == CNN_OK && slices == 8 / worlds[i] && op_calls >= 61 && op_wrong == 0, name,
              "%s%s%d of %d convolution and linear calls not one call of %d-image slices chosen for %d images",
              st == CNN_OK ? "" : cnn_error_msg(), st == CNN_OK ? "" : "; ", op_wrong, op_calls, want_choose, want_choice);
    }
    if (!ok) check(false, "slices_choose_global", "%s", cnn_error_msg());
    cnn_model_free(m);
    if (be) cnn_backend_destroy(be);
}

/* --deterministic (issue 29's equivalence): 2 ranks of 4 and 4 ranks of 2 images with --sync-bn train bit for bit
 * as 1 rank of 8 does: every weight after the run, and every step's logged loss to its rounding (the batch's 8 slices summed in one tree,
 * src/core/shards.h); without --deterministic the 2 ranks' weights differ from the 1's (so the check can fail). */
static void test_deterministic_ranks(void) {
    enum { STEPS = 4 };
    const float lr0 = run_lr;
    run_lr = 0.05f; /* a rate at which the orders' rounding grows fast (perf-log step 66) */
    char d[3][300], dn[300], e[4][512];
    float *p[3] = {0}, *pn = NULL;
    int64_t n[3] = {0}, nn = 0;
    const int worlds[3] = {1, 2, 4};
    cnn_status st[3];
    double l[3][STEPS];
    int nl[3];
    for (int i = 0; i < 3; i++) {
        snprintf(d[i], sizeof d[i], "%s_det%d", out_dir, worlds[i]);
        st[i] = run_ranks_ex(worlds[i], 8 / worlds[i], STEPS, true, false, true, d[i], e[i], sizeof e[i], &p[i], &n[i]);
        nl[i] = read_losses(d[i], l[i], STEPS);
    }
    snprintf(dn, sizeof dn, "%s_nodet2", out_dir);
    cnn_status sn = run_ranks_ex(2, 4, STEPS, true, false, false, dn, e[3], sizeof e[3], &pn, &nn);
    for (int i = 1; i < 3; i++) {
        int same_loss = 0; /* the logged loss: the ranks' means summed, so within float rounding of the 1's */
        for (int k = 0; k < STEPS && nl[0] == STEPS && nl[i] == STEPS; k++)
            same_loss += fabs(l[i][k] - l[0][k]) <= 1e-6 * fabs(l[0][k]);
        const bool same = p[0] && p[i] && n[0] == n[i] && memcmp(p[0], p[i], (size_t)n[0] * sizeof(float)) == 0;
        check(st[0] == CNN_OK && st[i] == CNN_OK && same_loss == STEPS && same, i == 1 ? "deterministic_2_ranks_bitwise"
                                                                                    : "deterministic_4_ranks_bitwise",
              "%s%s; %d ranks x %d: %d of %d step losses within 1e-6, weights %s", e[0], e[i], worlds[i], 8 / worlds[i],
              same_loss, STEPS, same ? "bitwise equal" : "differ");
    }
    const bool differ = p[0] && pn && n[0] == nn && memcmp(p[0], pn, (size_t)nn * sizeof(float)) != 0;
    check(sn == CNN_OK && differ, "nondeterministic_2_ranks_differ", "%s; without --deterministic the weights %s", e[3],
          differ ? "differ (the check above can fail)" : "are equal");
    for (int i = 0; i < 3; i++) free(p[i]), remove_dir(d[i]);
    free(pn);
    remove_dir(dn);
    run_lr = lr0;
}

/* --sync-bn: two ranks of 4 images follow one rank of 8 step for step (the BatchNorm statistics and the backward's
 * sums over both ranks; fp32, CPU); without it they do not (each rank's statistics over its own 4). And bf16
 * gradient sums train, close to the float32 ones but not equal to them. */
static void test_sync_bn_and_bf16(void) {
    enum { STEPS = 2 }; /* the second step's loss checks the first's gradients */
    char d1[300], dsync[300], dlocal[300], dbf[300], e1[512], e2[512], e3[512], e4[512];
    if (getenv("CNN_TEST_QUICK")) { /* under ASan (make test): the run that takes both paths, for memory errors */
        snprintf(dbf, sizeof dbf, "%s_bf16", out_dir);
        double lb[STEPS];
        cnn_status s = run_ranks(WORLD, 4, STEPS, true, true, dbf, e4, sizeof e4);
        int nb = read_losses(dbf, lb, STEPS);
        check(s == CNN_OK && nb == STEPS && isfinite(lb[STEPS - 1]), "sync_bn_bf16_sums_run", "%s; %d steps", e4, nb);
        remove_dir(dbf);
        return;
    }
    snprintf(d1, sizeof d1, "%s_one", out_dir);
    snprintf(dsync, sizeof dsync, "%s_sync", out_dir);
    snprintf(dlocal, sizeof dlocal, "%s_local", out_dir);
    snprintf(dbf, sizeof dbf, "%s_bf16", out_dir);
    cnn_status s1 = run_ranks(1, 8, STEPS, false, false, d1, e1, sizeof e1);
    cnn_status s2 = run_ranks(WORLD, 4, STEPS, true, false, dsync, e2, sizeof e2);
    cnn_status s3 = run_ranks(WORLD, 4, STEPS, false, false, dlocal, e3, sizeof e3);
    int64_t calls0 = bf16_calls;
    cnn_status s4 = run_ranks(WORLD, 4, STEPS, true, true, dbf, e4, sizeof e4);
    double l1[STEPS], ls[STEPS], ll[STEPS], lb[STEPS];
    int n1 = read_losses(d1, l1, STEPS), ns = read_losses(dsync, ls, STEPS), nl = read_losses(dlocal, ll, STEPS),
        nb = read_losses(dbf, lb, STEPS);
    double worst_sync = 0, worst_local = 0, worst_bf = 0;
    for (int i = 0; i < STEPS && n1 == STEPS && ns == STEPS && nl == STEPS && nb == STEPS; i++) {
        worst_sync = fmax(worst_sync, fabs(ls[i] - l1[i]) / fabs(l1[i]));
        worst_local = fmax(worst_local, fabs(ll[i] - l1[i]) / fabs(l1[i]));
        worst_bf = fmax(worst_bf, fabs(lb[i] - ls[i]) / fabs(ls[i]));
    }
    bool ran = s1 == CNN_OK && s2 == CNN_OK && s3 == CNN_OK && n1 == STEPS && ns == STEPS && nl == STEPS;
    check(ran && worst_sync <= 1e-5 && isfinite(l1[STEPS - 1]), "sync_bn_follows_one_rank",
          "%s%s%s; %d/%d/%d steps; worst relative loss difference %.2e over %d steps (<= 1e-5)", e1, e2, e3, n1, ns,
          nl, worst_sync, STEPS);
    check(ran && worst_local > 100 * worst_sync && worst_local > 1e-5, "per_rank_bn_differs",
          "without --sync-bn: %.2e", worst_local);
    check(s4 == CNN_OK && nb == STEPS && bf16_calls > calls0 && worst_bf > 0 && worst_bf < 0.05, "bf16_sums_train",
          "%s; %lld bf16 sums; loss differs from the float32 sums' by %.2e (0 < d < 0.05)", e4,
          (long long)(bf16_calls - calls0), worst_bf);
    const char *dirs[] = {d1, dsync, dlocal, dbf};
    for (int i = 0; i < 4; i++) remove_dir(dirs[i]);
}

/* build/test_dist_train --trajectory STEPS BATCH LR IMAGES: not a test (make test does not run it) but the
 * measurement behind the GPU equivalence check's reading: 2 ranks of BATCH/2 with --sync-bn against 1 rank of
 * BATCH over STEPS steps, each step's loss difference printed. On the CPU the two compute the same sums in another
 * order only, so the growth of the difference is fp32 rounding carried through training. */
static int trajectory(int steps, int batch, float lr, int images) {
    cnn_data_opts dopt = {.source = "synthetic", .split = CNN_SPLIT_TRAIN, .limit = images, .seed = 3};
    if (steps < 1 || steps > 1000 || batch < 2 || batch % WORLD || !(lr > 0) || images < batch ||
        cnn_dataset_load(&dopt, &train_ds) != CNN_OK)
        return fprintf(stderr, "usage: test_dist_train --trajectory STEPS BATCH LR IMAGES\n"), 2;
    dopt.split = CNN_SPLIT_TEST;
    dopt.limit = 16;
    if (cnn_dataset_load(&dopt, &test_ds) != CNN_OK) return 1;
    run_lr = lr;
    char d1[300], d2[300], e1[512], e2[512];
    snprintf(d1, sizeof d1, "%s_one", out_dir);
    snprintf(d2, sizeof d2, "%s_sync", out_dir);
    cnn_status s1 = run_ranks(1, batch, steps, false, false, d1, e1, sizeof e1);
    cnn_status s2 = run_ranks(WORLD, batch / WORLD, steps, true, false, d2, e2, sizeof e2);
    double *l1 = calloc((size_t)steps, sizeof *l1), *l2 = calloc((size_t)steps, sizeof *l2);
    int n1 = read_losses(d1, l1, steps), n2 = read_losses(d2, l2, steps);
    if (s1 != CNN_OK || s2 != CNN_OK || n1 != steps || n2 != steps)
        return fprintf(stderr, "runs failed: %s %s\n", e1, e2), 1;
    printf("step  1 rank x %d          %d ranks x %d --sync-bn  difference\n", batch, WORLD, batch / WORLD);
    for (int i = 0; i < steps; i++) printf("%4d  %.9f  %.9f  %+.2e\n", i + 1, l1[i], l2[i], l2[i] - l1[i]);
    free(l1), free(l2);
    remove_dir(d1);
    remove_dir(d2);
    return 0;
}

int main(int argc, char **argv) {
    cnn_log_set_level(0);
    pthread_barrier_init(&sh.bar, NULL, WORLD);
    sh.world = WORLD;
    snprintf(out_dir, sizeof out_dir, "/tmp/cnn_test_dist_train_%d", (int)getpid());
    if (argc == 6 && strcmp(argv[1], "--trajectory") == 0)
        return trajectory(atoi(argv[2]), atoi(argv[3]), (float)atof(argv[4]), atoi(argv[5]));
    test_buckets();
    test_shard_counts();
    test_slices_choose_global();
    cnn_data_opts dopt = {.source = "synthetic", .split = CNN_SPLIT_TRAIN, .limit = 64, .seed = 3};
    cnn_status st = cnn_dataset_load(&dopt, &train_ds);
    dopt.split = CNN_SPLIT_TEST;
    dopt.limit = 16;
    if (st == CNN_OK) st = cnn_dataset_load(&dopt, &test_ds);
    check(st == CNN_OK, "data", "%s", st == CNN_OK ? "" : cnn_error_msg());

    test_sync_bn_and_bf16();
    test_deterministic_ranks();
    sh.calls = sh.covered = 0; /* the runs above summed too */

    /* two ranks of 4 images each, small buckets: the sums happen during the backward */
    rank_run rr[WORLD];
    pthread_t th[WORLD];
    for (int r = 0; r < WORLD; r++) {
        rr[r] = (rank_run){.rank = r, .world = WORLD, .batch = 4, .steps = 4, .stop_after = 2, .bucket_bytes = 256 << 10};
        pthread_create(&th[r], NULL, run_rank, &rr[r]);
    }
    for (int r = 0; r < WORLD; r++) pthread_join(th[r], NULL);
    check(rr[0].st == CNN_OK && rr[1].st == CNN_OK, "dp_run", "%s %s", rr[0].err, rr[1].err);
    bool same = rr[0].params && rr[1].params && rr[0].n == rr[1].n &&
                memcmp(rr[0].params, rr[1].params, (size_t)rr[0].n * sizeof(float)) == 0;
    check(same, "dp_same_weights", "%lld parameters, bitwise", (long long)rr[0].n);
    /* every gradient summed once per step (plus the eval's and the step's scalar sums, which are not F32 arrays) */
    check(sh.covered == 2 * rr[0].n, "dp_each_gradient_once", "%lld elements in %lld calls over 2 steps",
          (long long)sh.covered, (long long)sh.calls);
    char path[400];
    snprintf(path, sizeof path, "%s/metrics.jsonl", out_dir);
    int steps = count_lines(path, "\"loss\"");
    check(steps == 2, "dp_rank0_metrics", "%d step records", steps);
    snprintf(path, sizeof path, "%s/checkpoint.safetensors", out_dir);
    struct stat sb;
    check(stat(path, &sb) == 0, "dp_checkpoint_written", NULL);

    /* the checkpoint of the 2-rank run (global batch 8) resumes on one rank at batch 8 and runs to the end,
     * with the epoch's evaluation */
    rank_run one = {.rank = 0, .world = 1, .batch = 8, .steps = 4, .resume = true};
    run_rank(&one);
    snprintf(path, sizeof path, "%s/metrics.jsonl", out_dir);
    steps = count_lines(path, "\"loss\"");
    int evals = count_lines(path, "eval_top1");
    snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
    check(one.st == CNN_OK && steps == 4 && evals == 1 && stat(path, &sb) == 0, "resume_one_rank",
          "%s; %d step records, %d eval", one.err, steps, evals);
    free(one.params);
    rank_run more = {.rank = 0, .world = 1, .batch = 8, .steps = 4, .resume = true};
    /* a different global batch does not resume */
    more.batch = 4;
    run_rank(&more);
    check(more.st == CNN_E_MISMATCH, "resume_other_global_batch_refused", "%s", more.err);
    free(more.params);
    for (int r = 0; r < WORLD; r++) free(rr[r].params);

    /* a 2-rank run to its end: the evaluation split over the ranks and summed equals one process's evaluation of
     * the model rank 0 wrote (rank 0's BatchNorm statistics on every rank) */
    remove_dir(out_dir);
    for (int r = 0; r < WORLD; r++) {
        rr[r] = (rank_run){.rank = r, .world = WORLD, .batch = 4, .steps = 3, .bucket_bytes = 0};
        pthread_create(&th[r], NULL, run_rank, &rr[r]);
    }
    for (int r = 0; r < WORLD; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < WORLD; r++) free(rr[r].params);
    double logged = NAN;
    snprintf(path, sizeof path, "%s/metrics.jsonl", out_dir);
    FILE *f = fopen(path, "r");
    char line[1024];
    while (f && fgets(line, sizeof line, f)) {
        const char *e = strstr(line, "\"eval_loss\":");
        if (e) logged = atof(e + 12);
    }
    if (f) fclose(f);
    cnn_backend *be = NULL;
    cnn_model *m = NULL;
    cnn_model_opts mo = r18_opts();
    cnn_eval_result ev = {0};
    snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
    st = cnn_cpu_backend_create(1, &be);
    if (st == CNN_OK) st = cnn_model_create(&mo, be, 32, 32, 4, false, &m);
    if (st == CNN_OK) st = cnn_model_load(m, path);
    if (st == CNN_OK) st = cnn_evaluate(m, &test_ds, 16, 4, &ev);
    check(rr[0].st == CNN_OK && rr[1].st == CNN_OK && st == CNN_OK && fabs(ev.loss - logged) <= 1e-5 * fabs(ev.loss),
          "dp_eval_split", "%s %s; logged %.7f, one process %.7f", rr[0].err, rr[1].err, logged, ev.loss);
    cnn_model_free(m);
    cnn_backend_destroy(be);
    cnn_dataset_free(&train_ds);
    cnn_dataset_free(&test_ds);
    remove_dir(out_dir);
    return test_finish();
}
