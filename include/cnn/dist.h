/* dist.h — data-parallel training over several processes, one per GPU: who we are (torchrun's environment),
 * how the processes meet (a rendezvous that hands rank 0's NCCL unique id to the others), which images each rank
 * reads, and the launcher behind `cnn train --gpus N`.
 *
 * The collectives themselves are the backend's (backend.h: comm_*; the CUDA backend's are NCCL's, loaded at run
 * time). This file is backend-neutral and runs on any machine, so CI tests it without a GPU.
 *
 *     cnn_dist_env e;                                   // RANK, WORLD_SIZE, ... (all unset: world 1)
 *     CNN_TRY(cnn_dist_env_from(cnn_env_get(), &e));
 *     uint8_t id[CNN_DIST_ID_BYTES];                    // rank 0: from be->comm_id; the others receive it
 *     cnn_dist_links links;
 *     CNN_TRY(cnn_dist_rendezvous("tcp://10.0.0.1:29500", e.rank, e.world, 300, id, &links));
 *
 * Sharding: step s (1-based) of a run with global batch B reads positions [pos*B, pos*B + B) of its epoch's
 * permutation (pos = (s-1) mod steps_per_epoch); rank r of W reads the r-th of W equal slices of that range. The
 * position of a run is a global step, so a checkpoint resumes on any number of GPUs that divides B.
 */
#ifndef CNN_DIST_H
#define CNN_DIST_H

#include "cnn/cnn.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CNN_DIST_ID_BYTES 128 /* sizeof(ncclUniqueId) */
#define CNN_DIST_MAX_WORLD 4096

/* ---- who we are ------------------------------------------------------------------------------------------ */

typedef struct cnn_dist_env {
    bool set;          /* RANK or WORLD_SIZE was in the environment */
    int rank, world;   /* RANK, WORLD_SIZE (0, 1 when unset) */
    int local_rank;    /* LOCAL_RANK: the GPU of this process on its machine (default: rank) */
    char addr[256];    /* MASTER_ADDR (default 127.0.0.1) */
    int port;          /* MASTER_PORT (default 29500) */
    int rdv_port;      /* where rank 0's rendezvous listens: port, or port + 1 where torchrun's agent holds port
                        * (TORCHELASTIC_USE_AGENT_STORE) */
} cnn_dist_env;

/* Parse torchrun's variables (each NULL or "" = unset). Every value is a whole decimal number in range:
 * 0 <= RANK < WORLD_SIZE <= CNN_DIST_MAX_WORLD, 0 <= LOCAL_RANK < 1024, 1 <= MASTER_PORT <= 65535; RANK and
 * WORLD_SIZE come together. CNN_E_INVALID naming the variable otherwise. */
cnn_status cnn_dist_env_parse(const char *rank, const char *world, const char *local_rank, const char *addr,
                              const char *port, cnn_dist_env *out);
/* The same from the process environment (env.c). */
cnn_status cnn_dist_env_from(const cnn_env *env, cnn_dist_env *out);

/* ---- sharding ------------------------------------------------------------------------------------------ */

/* Per-GPU and global batch from --batch (per GPU) or --batch-global (0 = not given): the global one must be
 * a multiple of world. CNN_E_INVALID otherwise. */
cnn_status cnn_dist_batch(int batch, int batch_global, int world, int *local, int *global);

typedef struct cnn_dist_shard {
    int64_t epoch;   /* 0-based */
    int64_t start;   /* first position in the epoch's permutation */
    int count;       /* images */
} cnn_dist_shard;

/* Rank `rank`'s images of 1-based step `step`; spe = steps per epoch of the global batch. */
cnn_dist_shard cnn_dist_step_shard(int64_t step, int64_t spe, int global_batch, int rank, int world);
/* Rank `rank`'s contiguous part of n items split as evenly as possible (the first n % world ranks one more). */
void cnn_dist_split(int64_t n, int rank, int world, int64_t *start, int64_t *count);

/* ---- rendezvous ---------------------------------------------------------------------------------------- */

/* The wire/file format of the rendezvous: a 16-byte header "CNND", version, type, payload length (u32 little
 * endian each), then the payload. */
enum {
    CNN_DIST_MSG_HELLO = 1, /* rank -> rank 0: rank, world                          */
    CNN_DIST_MSG_ID = 2,    /* rank 0 -> rank (and the file): world, the unique id */
    CNN_DIST_MSG_BYE = 3,   /* either way: rank, finished normally               */
    CNN_DIST_MSG_FAIL = 4,  /* rank 0 -> the others: rank `rank` failed            */
};
#define CNN_DIST_MSG_HEADER 16
#define CNN_DIST_MSG_MAX (CNN_DIST_MSG_HEADER + 8 + CNN_DIST_ID_BYTES)

typedef struct cnn_dist_msg {
    uint32_t type;
    int32_t rank, world;              /* HELLO, BYE, FAIL: rank; HELLO, ID: world */
    uint8_t id[CNN_DIST_ID_BYTES];    /* ID */
} cnn_dist_msg;

/* Encode m into buf (at least CNN_DIST_MSG_MAX bytes); returns the length. */
size_t cnn_dist_msg_encode(const cnn_dist_msg *m, uint8_t *buf);
/* Decode one message from the first len bytes of untrusted buf: its length (> 0); 0 when buf holds a valid
 * prefix of a message (read more); -1 with a recorded CNN_E_FORMAT for anything else: a wrong magic or version,
 * an unknown type, a payload length that is not the type's, ranks or world out of range. */
int cnn_dist_msg_decode(const uint8_t *buf, size_t len, cnn_dist_msg *out);

/* What stays of a tcp:// rendezvous: rank 0 holds one connection per other rank (peer[r]), the others one to
 * rank 0 (peer[0]); -1 elsewhere and for file://. A process that dies closes its connections, which its peers
 * see at once (cnn_dist_links_poll): the liveness channel of the watchdog. */
typedef struct cnn_dist_links {
    int rank, world;
    int *peer;       /* (world) socket descriptors or -1 */
    bool *bye;       /* (world) the peer said goodbye */
} cnn_dist_links;

/* Meet the other ranks through init ("tcp://HOST:PORT": rank 0 listens on PORT, the others connect, retrying
 * until the deadline; "file://PATH": rank 0 writes PATH atomically, which must not exist before, the others
 * poll for it). Rank 0 passes the id; the others receive it. timeout_s bounds the whole exchange. Errors:
 * CNN_E_INVALID (a malformed init string), CNN_E_DIST (the deadline passed: naming the ranks missing), CNN_E_IO, CNN_E_MISMATCH
 * (a peer of another world size, a rank twice). */
cnn_status cnn_dist_rendezvous(const char *init, int rank, int world, double timeout_s, uint8_t id[CNN_DIST_ID_BYTES],
                               cnn_dist_links *links);
/* Check the links without blocking: CNN_OK, or CNN_E_DIST with *peer = the rank that failed (its connection closed
 * without a goodbye, or rank 0 relayed its failure) and a recorded message. */
cnn_status cnn_dist_links_poll(cnn_dist_links *l, int *peer);
/* Rank 0: tell the others that rank `failed` failed (best effort). */
void cnn_dist_links_fail(cnn_dist_links *l, int failed);
/* Say goodbye (a normal end) and close. */
void cnn_dist_links_close(cnn_dist_links *l, bool bye);

/* ---- the launcher ----------------------------------------------------------------------------------------- */

/* "N" (GPUs 0..N-1) or "0,2,3" into gpus[] (distinct, each < 1024); returns the count, or -1 with a recorded
 * CNN_E_INVALID. */
int cnn_dist_parse_gpus(const char *spec, int *gpus, int cap);

typedef struct cnn_dist_launch {
    char *const *argv;      /* the worker's command line (argv[0] is exec'd through PATH unless it has a '/') */
    int world;
    const char *addr;       /* MASTER_ADDR */
    int port;               /* MASTER_PORT; 0 = a free port found here */
    const char *visible;    /* CUDA_VISIBLE_DEVICES for every worker, or NULL to leave it */
    double grace_s;         /* after a failure: how long the others may take to exit on their own before SIGTERM
                             * (then as long again before SIGKILL) */
} cnn_dist_launch;

/* Start world workers with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT set, wait
 * for them, and tear the group down when one fails. Returns 0 when all exited 0; otherwise the first failing
 * rank's exit status (128 + signal when killed), with a message naming it on stderr. */
int cnn_dist_launch_run(const cnn_dist_launch *l);

#endif
