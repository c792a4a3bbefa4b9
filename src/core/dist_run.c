/* dist_run.c — a rank of a multi-GPU run (train.h, cnn_dist_ctx): joining it (rendezvous, communicator), the
 * sums and broadcasts the training loop needs, and the watchdog that keeps the rank from hanging. The watchdog's
 * thread polls every 100 ms: the peer links (a peer process that died closed them: dist.c), the communicator's
 * asynchronous error (comm_check) and the step heartbeat (no step finished for timeout_s). On any of them it
 * prints one line naming this rank and the peer where known, tells the others (rank 0 relays a peer's death),
 * aborts the communicator and ends the process with exit status 1 — from its own thread, since the main thread
 * may be blocked inside the device for good. An abort that itself hangs is cut short after 5 s. Before the
 * first step has finished (kernels compile and tune) the heartbeat allows at least 15 minutes. */
#include "cnn/dist.h"
#include "cnn/train.h"

#include <pthread.h>
#include <string.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct cnn_watchdog {
    cnn_backend *be;
    void *comm;
    cnn_dist_links *links;
    double timeout_s;
    int rank;
    _Atomic int64_t beat_ms;  /* cnn_now() in ms at the last heartbeat */
    _Atomic int64_t step;     /* the step of that heartbeat */
    atomic_bool stop;
    pthread_t thread;
};

static atomic_bool aborted;
static atomic_bool failing; /* a watchdog decided to end the process (cnn_dist_check) */

cnn_status cnn_dist_check(void) {
    if (!atomic_load(&failing)) return CNN_OK;
    return cnn_fail(CNN_E_DIST, "a peer of this multi-GPU run failed: nothing more is written");
}

static void *abort_thread(void *arg) {
    cnn_watchdog *w = arg;
    if (w->comm && w->be->comm_abort) w->be->comm_abort(w->comm);
    atomic_store(&aborted, true);
    return NULL;
}

static void fail(cnn_watchdog *w, const char *msg) {
    atomic_store(&failing, true);
    fprintf(stderr, "cnn: %s\n", msg);
    fflush(stderr);
    pthread_t t;
    if (pthread_create(&t, NULL, abort_thread, w) == 0) {
        pthread_detach(t);
        for (int i = 0; i < 50 && !atomic_load(&aborted); i++) cnn_sleep_ms(100); /* the abort's time, at most 5 s */
    }
    _exit(1);
}

static void *watch(void *arg) {
    cnn_watchdog *w = arg;
    char msg[1200];
    while (!atomic_load(&w->stop)) {
        cnn_sleep_ms(100);
        if (atomic_load(&w->stop)) break;
        int peer = -1;
        if (w->links && cnn_dist_links_poll(w->links, &peer) != CNN_OK) {
            snprintf(msg, sizeof msg, "%s; aborting (step %lld)", cnn_error_msg(), (long long)atomic_load(&w->step));
            if (w->rank == 0) cnn_dist_links_fail(w->links, peer);
            fail(w, msg);
        }
        if (w->comm && w->be->comm_check && w->be->comm_check(w->comm) != CNN_OK) {
            snprintf(msg, sizeof msg, "rank %d: %s; aborting (step %lld)", w->rank, cnn_error_msg(),
                     (long long)atomic_load(&w->step));
            fail(w, msg);
        }
        /* before the first step has finished, kernels are still being compiled and tuned: at least 15 minutes */
        double idle = cnn_now() - (double)atomic_load(&w->beat_ms) / 1000.0;
        double limit = atomic_load(&w->step) > 0 || w->timeout_s > 900 ? w->timeout_s : 900;
        if (idle > limit) {
            snprintf(msg, sizeof msg, "rank %d: no progress for %.0f s after step %lld (--dist-timeout %.0f): a peer "
                     "stalled or the interconnect failed; aborting", w->rank, idle, (long long)atomic_load(&w->step),
                     limit);
            fail(w, msg);
        }
    }
    return NULL;
}

cnn_status cnn_watchdog_start(cnn_backend *be, void *comm, cnn_dist_links *links, double timeout_s, int rank,
                              cnn_watchdog **out) {
    *out = NULL;
    cnn_watchdog *w = cnn_calloc(1, sizeof *w, "watchdog");
    if (!w) return CNN_E_OOM;
    *w = (cnn_watchdog){.be = be, .comm = comm, .links = links, .timeout_s = timeout_s, .rank = rank};
    atomic_store(&w->beat_ms, (int64_t)(cnn_now() * 1000));
    atomic_store(&w->step, 0);
    atomic_store(&w->stop, false);
    if (pthread_create(&w->thread, NULL, watch, w) != 0) {
        free(w);
        return cnn_fail(CNN_E_OOM, "cannot start the watchdog thread");
    }
    *out = w;
    return CNN_OK;
}

void cnn_watchdog_beat(cnn_watchdog *w, int64_t step) {
    if (!w) return;
    atomic_store(&w->step, step);
    atomic_store(&w->beat_ms, (int64_t)(cnn_now() * 1000));
}

void cnn_watchdog_stop(cnn_watchdog *w) {
    if (!w) return;
    atomic_store(&w->stop, true);
    pthread_join(w->thread, NULL);
    free(w);
}

/* ---- a rank's lifetime ---------------------------------------------------------------------------------- */

cnn_status cnn_dist_start(cnn_backend *be, const cnn_dist_env *e, const char *init, double timeout_s,
                          cnn_dist_ctx *d) {
    memset(d, 0, sizeof *d);
    d->rank = e->rank;
    d->world = e->world;
    d->be = be;
    if (e->world == 1) return CNN_OK;
    if (!be->comm_init)
        return cnn_fail(CNN_E_UNSUPPORTED, "the %s backend has no collectives: multi-GPU training needs --device cuda "
                        "and NCCL", be->name);
    char tcp[300];
    if (!init) {
        snprintf(tcp, sizeof tcp, strchr(e->addr, ':') ? "tcp://[%s]:%d" : "tcp://%s:%d", e->addr, e->rdv_port);
        init = tcp;
    }
    uint8_t id[CNN_DIST_ID_BYTES] = {0};
    if (e->rank == 0) CNN_TRY(be->comm_id(be, id));
    CNN_TRY(cnn_dist_rendezvous(init, e->rank, e->world, timeout_s, id, &d->links));
    /* from here a peer that dies or stalls ends this process too: the communicator's creation blocks until every
     * rank has joined */
    cnn_status st = cnn_watchdog_start(be, NULL, &d->links, timeout_s, e->rank, &d->watchdog);
    void *comm = NULL;
    if (st == CNN_OK) st = be->comm_init(be, id, e->rank, e->world, &comm);
    if (st == CNN_OK) {
        cnn_watchdog_stop(d->watchdog); /* again, now watching the communicator too */
        d->watchdog = NULL;
        d->comm = comm;
        st = cnn_watchdog_start(be, comm, &d->links, timeout_s, e->rank, &d->watchdog);
    }
    if (st == CNN_OK) st = be->alloc(be, 8 * sizeof(double), "collective scratch", (void **)&d->host_sum);
    if (st != CNN_OK) cnn_dist_finish(d, false);
    return st;
}

void cnn_dist_finish(cnn_dist_ctx *d, bool ok) {
    if (d->world <= 1) return;
    /* a normal end waits for every rank's (rank 0 writes the model last), so that no rank tears its communicator
     * down while another still works; a rank that failed instead leaves at once, which its peers see */
    double one = 1;
    if (ok && d->comm && cnn_dist_sum(d, &one, 1) != CNN_OK) {
        cnn_log(1, "cnn: rank %d: the final barrier failed: %s", d->rank, cnn_error_msg());
        ok = false;
    }
    cnn_watchdog_stop(d->watchdog);
    d->watchdog = NULL;
    cnn_dist_links_close(&d->links, ok);
    if (d->host_sum) d->be->free(d->be, d->host_sum);
    d->host_sum = NULL;
    if (d->comm) {
        if (!ok) d->be->comm_abort(d->comm);
        d->be->comm_destroy(d->be, d->comm);
    }
    d->comm = NULL;
}

cnn_status cnn_dist_sum(cnn_dist_ctx *d, double *v, int n) {
    if (!d || d->world <= 1) return CNN_OK;
    CNN_ASSERT(n >= 1 && n <= 8);
    cnn_backend *be = d->be;
    CNN_TRY(be->upload(be, d->host_sum, v, (size_t)n * sizeof *v));
    CNN_TRY(be->comm_allreduce(be, d->comm, d->host_sum, n, CNN_COMM_SUM_F64, false));
    return be->download(be, v, d->host_sum, (size_t)n * sizeof *v);
}

cnn_status cnn_dist_broadcast_model(cnn_dist_ctx *d, cnn_model *m, void *extra, size_t nbytes) {
    if (!d || d->world <= 1) return CNN_OK;
    cnn_backend *be = d->be;
    const cnn_net *net = cnn_model_net(m);
    CNN_TRY(be->comm_broadcast(be, d->comm, cnn_model_params(m), (size_t)net->n_trainable * sizeof(float), 0));
    if (net->n_buffer)
        CNN_TRY(be->comm_broadcast(be, d->comm, cnn_model_buffers(m), (size_t)net->n_buffer * sizeof(float), 0));
    if (extra && nbytes) CNN_TRY(be->comm_broadcast(be, d->comm, extra, nbytes, 0));
    return cnn_model_params_changed(m);
}
