/* dist.c — the backend-neutral side of multi-GPU training (dist.h): torchrun's environment, the batch
 * arithmetic and sharding, the rendezvous that hands NCCL's unique id from rank 0 to the others (tcp:// or
 * file://, every byte read bounds-checked) and the liveness links it leaves behind. The launcher is launch.c. */
#include "cnn/dist.h"
#include "cnn/io.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the environment ------------------------------------------------------------------------------------ */

/* A whole decimal number in [lo, hi]; false for anything else (signs, spaces, overflow, trailing bytes). */
static bool parse_int(const char *s, long lo, long hi, int *out) {
    if (!s || !*s || strlen(s) > 10) return false;
    long v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return false;
        v = v * 10 + (*p - '0');
    }
    if (v < lo || v > hi) return false;
    *out = (int)v;
    return true;
}

static bool given(const char *s) { return s && *s; }

cnn_status cnn_dist_env_parse(const char *rank, const char *world, const char *local_rank, const char *addr,
                              const char *port, cnn_dist_env *out) {
    *out = (cnn_dist_env){.rank = 0, .world = 1, .local_rank = 0, .port = 29500, .rdv_port = 29500};
    snprintf(out->addr, sizeof out->addr, "127.0.0.1");
    if (given(rank) != given(world))
        return cnn_fail(CNN_E_INVALID, "RANK and WORLD_SIZE must be set together (RANK=%s WORLD_SIZE=%s)",
                        given(rank) ? rank : "(unset)", given(world) ? world : "(unset)");
    if (given(world)) {
        if (!parse_int(world, 1, CNN_DIST_MAX_WORLD, &out->world))
            return cnn_fail(CNN_E_INVALID, "WORLD_SIZE=%s: expected a whole number in [1, %d]", world, CNN_DIST_MAX_WORLD);
        if (!parse_int(rank, 0, out->world - 1, &out->rank))
            return cnn_fail(CNN_E_INVALID, "RANK=%s: expected a whole number in [0, %d] (WORLD_SIZE=%d)", rank,
                            out->world - 1, out->world);
        out->set = true;
    }
    out->local_rank = out->rank;
    if (given(local_rank) && !parse_int(local_rank, 0, 1023, &out->local_rank))
        return cnn_fail(CNN_E_INVALID, "LOCAL_RANK=%s: expected a whole number in [0, 1023]", local_rank);
    if (given(addr)) {
        if (strlen(addr) >= sizeof out->addr - 1)
            return cnn_fail(CNN_E_INVALID, "MASTER_ADDR is longer than %zu bytes", sizeof out->addr - 2);
        snprintf(out->addr, sizeof out->addr, "%s", addr);
    }
    if (given(port) && !parse_int(port, 1, 65535, &out->port))
        return cnn_fail(CNN_E_INVALID, "MASTER_PORT=%s: expected a port number in [1, 65535]", port);
    out->rdv_port = out->port;
    return CNN_OK;
}

cnn_status cnn_dist_env_from(const cnn_env *e, cnn_dist_env *out) {
    CNN_TRY(cnn_dist_env_parse(e->rank, e->world_size, e->local_rank, e->master_addr, e->master_port, out));
    /* torchrun's agent may serve its own store on MASTER_PORT: our rendezvous takes the next port */
    if (e->agent_store) {
        if (out->port == 65535) return cnn_fail(CNN_E_INVALID, "MASTER_PORT=65535 is torchrun's: give --dist-init");
        out->rdv_port = out->port + 1;
    }
    return CNN_OK;
}

/* ---- sharding ------------------------------------------------------------------------------------------ */

cnn_status cnn_dist_batch(int batch, int batch_global, int world, int *local, int *global) {
    if (world < 1 || world > CNN_DIST_MAX_WORLD) return cnn_fail(CNN_E_INVALID, "world size %d out of range", world);
    if (batch_global > 0) {
        if (batch_global % world != 0)
            return cnn_fail(CNN_E_INVALID, "--batch-global %d is not a multiple of the %d GPUs", batch_global, world);
        *local = batch_global / world;
        *global = batch_global;
        return CNN_OK;
    }
    if (batch < 1) return cnn_fail(CNN_E_INVALID, "--batch %d: at least 1", batch);
    if ((int64_t)batch * world > INT_MAX / 2)
        return cnn_fail(CNN_E_INVALID, "--batch %d x %d GPUs is too large", batch, world);
    *local = batch;
    *global = batch * world;
    return CNN_OK;
}

cnn_dist_shard cnn_dist_step_shard(int64_t step, int64_t spe, int global_batch, int rank, int world) {
    CNN_ASSERT(step >= 1 && spe >= 1 && world >= 1 && rank >= 0 && rank < world && global_batch % world == 0);
    int local = global_batch / world;
    int64_t pos = (step - 1) % spe;
    return (cnn_dist_shard){.epoch = (step - 1) / spe, .start = pos * global_batch + (int64_t)rank * local,
                            .count = local};
}

void cnn_dist_split(int64_t n, int rank, int world, int64_t *start, int64_t *count) {
    CNN_ASSERT(n >= 0 && world >= 1 && rank >= 0 && rank < world);
    int64_t q = n / world, r = n % world;
    *count = q + (rank < r ? 1 : 0);
    *start = rank * q + (rank < r ? rank : r);
}

/* ---- messages --------------------------------------------------------------------------------------------- */

#define MSG_VERSION 1u

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* the payload length of each type; 0 = no such type */
static uint32_t payload_len(uint32_t type) {
    switch (type) {
    case CNN_DIST_MSG_HELLO: return 8;                      /* rank, world */
    case CNN_DIST_MSG_ID: return 4 + CNN_DIST_ID_BYTES;     /* world, id */
    case CNN_DIST_MSG_BYE: return 4;                        /* rank */
    case CNN_DIST_MSG_FAIL: return 4;                       /* rank */
    default: return 0;
    }
}

size_t cnn_dist_msg_encode(const cnn_dist_msg *m, uint8_t *buf) {
    uint32_t n = payload_len(m->type);
    CNN_ASSERT(n > 0);
    memcpy(buf, "CNND", 4);
    put32(buf + 4, MSG_VERSION);
    put32(buf + 8, m->type);
    put32(buf + 12, n);
    uint8_t *p = buf + CNN_DIST_MSG_HEADER;
    switch (m->type) {
    case CNN_DIST_MSG_HELLO: put32(p, (uint32_t)m->rank); put32(p + 4, (uint32_t)m->world); break;
    case CNN_DIST_MSG_ID: put32(p, (uint32_t)m->world); memcpy(p + 4, m->id, CNN_DIST_ID_BYTES); break;
    default: put32(p, (uint32_t)m->rank); break;
    }
    return CNN_DIST_MSG_HEADER + n;
}

int cnn_dist_msg_decode(const uint8_t *buf, size_t len, cnn_dist_msg *out) {
    memset(out, 0, sizeof *out);
    /* check each header field as soon as it has arrived, so garbage is refused without waiting for more */
    if (memcmp(buf, "CNND", len < 4 ? len : 4) != 0) {
        cnn_fail(CNN_E_FORMAT, "rendezvous: not a cnn message (bad magic)");
        return -1;
    }
    if (len >= 8 && get32(buf + 4) != MSG_VERSION) {
        cnn_fail(CNN_E_FORMAT, "rendezvous: message version %u, expected %u", get32(buf + 4), MSG_VERSION);
        return -1;
    }
    uint32_t n = len >= 12 ? payload_len(get32(buf + 8)) : 0;
    if (len >= 12 && n == 0) {
        cnn_fail(CNN_E_FORMAT, "rendezvous: unknown message type %u", get32(buf + 8));
        return -1;
    }
    if (len >= 16 && get32(buf + 12) != n) {
        cnn_fail(CNN_E_FORMAT, "rendezvous: message of type %u with %u payload bytes, expected %u", get32(buf + 8),
                 get32(buf + 12), n);
        return -1;
    }
    if (len < CNN_DIST_MSG_HEADER || len < CNN_DIST_MSG_HEADER + n) return 0;
    out->type = get32(buf + 8);
    const uint8_t *p = buf + CNN_DIST_MSG_HEADER;
    uint32_t rank = 0, world = 1;
    switch (out->type) {
    case CNN_DIST_MSG_HELLO: rank = get32(p); world = get32(p + 4); break;
    case CNN_DIST_MSG_ID: world = get32(p); memcpy(out->id, p + 4, CNN_DIST_ID_BYTES); break;
    default: rank = get32(p); world = CNN_DIST_MAX_WORLD; break;
    }
    if (world < 1 || world > CNN_DIST_MAX_WORLD || rank >= world) {
        cnn_fail(CNN_E_FORMAT, "rendezvous: rank %u / world size %u out of range", rank, world);
        return -1;
    }
    out->rank = (int32_t)rank;
    out->world = out->type == CNN_DIST_MSG_HELLO || out->type == CNN_DIST_MSG_ID ? (int32_t)world : 0;
    return (int)(CNN_DIST_MSG_HEADER + n);
}

/* ---- sockets ------------------------------------------------------------------------------------------- */

static int remaining_ms(double deadline) {
    double left = deadline - cnn_now();
    return left <= 0 ? 0 : left > 1e6 ? 1000000000 : (int)(left * 1000) + 1;
}

/* Read one whole message from fd by the deadline. CNN_OK; CNN_E_FORMAT (garbage); CNN_E_DIST (timeout or the
 * peer closed); CNN_E_IO. */
static cnn_status read_msg(int fd, double deadline, cnn_dist_msg *m, const char *who) {
    uint8_t buf[CNN_DIST_MSG_MAX];
    size_t have = 0;
    for (;;) {
        int r = cnn_dist_msg_decode(buf, have, m);
        if (r > 0) return CNN_OK;
        if (r < 0) return cnn_error_prefix(CNN_E_FORMAT, "%s", who);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int ms = remaining_ms(deadline);
        int k = ms > 0 ? poll(&p, 1, ms) : 0;
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return cnn_fail(CNN_E_IO, "%s: poll: %s", who, strerror(errno));
        if (k == 0) return cnn_fail(CNN_E_DIST, "%s: no message before the deadline", who);
        /* read no further than this message: the header, then exactly its payload (decode checked its length) */
        size_t want = have < CNN_DIST_MSG_HEADER ? CNN_DIST_MSG_HEADER - have
                                                 : CNN_DIST_MSG_HEADER + get32(buf + 12) - have;
        ssize_t got = recv(fd, buf + have, want, 0);
        if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (got < 0) return cnn_fail(CNN_E_DIST, "%s: %s", who, strerror(errno));
        if (got == 0) return cnn_fail(CNN_E_DIST, "%s: connection closed", who);
        have += (size_t)got;
    }
}

static cnn_status send_msg(int fd, const cnn_dist_msg *m, const char *who) {
    uint8_t buf[CNN_DIST_MSG_MAX];
    size_t n = cnn_dist_msg_encode(m, buf), off = 0;
    while (off < n) {
        ssize_t w = send(fd, buf + off, n - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return cnn_fail(CNN_E_DIST, "%s: send: %s", who, strerror(errno));
        off += (size_t)w;
    }
    return CNN_OK;
}

/* "tcp://HOST:PORT" (HOST may be [v6]) into host, port */
static cnn_status parse_tcp(const char *init, char *host, size_t cap, char *port, size_t pcap) {
    const char *s = init + 6, *colon;
    if (*s == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':') return cnn_fail(CNN_E_INVALID, "--dist-init %s: expected tcp://[ADDR]:PORT", init);
        if ((size_t)(close - s - 1) >= cap) return cnn_fail(CNN_E_INVALID, "--dist-init %s: host too long", init);
        snprintf(host, cap, "%.*s", (int)(close - s - 1), s + 1);
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon || colon == s) return cnn_fail(CNN_E_INVALID, "--dist-init %s: expected tcp://HOST:PORT", init);
        if ((size_t)(colon - s) >= cap) return cnn_fail(CNN_E_INVALID, "--dist-init %s: host too long", init);
        snprintf(host, cap, "%.*s", (int)(colon - s), s);
    }
    int p;
    if (!parse_int(colon + 1, 1, 65535, &p))
        return cnn_fail(CNN_E_INVALID, "--dist-init %s: the port must be a number in [1, 65535]", init);
    snprintf(port, pcap, "%d", p);
    return CNN_OK;
}

static void set_nodelay(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static cnn_status tcp_server(cnn_dist_links *l, const char *host, const char *port, double deadline,
                             const uint8_t id[CNN_DIST_ID_BYTES]) {
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *res = NULL;
    /* listen on every address of HOST's family: HOST names this machine as the others reach it */
    struct addrinfo *hres = NULL;
    if (getaddrinfo(host, port, &(struct addrinfo){.ai_socktype = SOCK_STREAM}, &hres) == 0 && hres) {
        hints.ai_family = hres->ai_family;
        freeaddrinfo(hres);
    }
    int gr = getaddrinfo(NULL, port, &hints, &res);
    if (gr != 0) return cnn_fail(CNN_E_IO, "rendezvous: port %s: %s", port, gai_strerror(gr));
    int ls = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (ls >= 0) setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ls < 0 || bind(ls, res->ai_addr, res->ai_addrlen) != 0 || listen(ls, 128) != 0) {
        int e = errno;
        freeaddrinfo(res);
        if (ls >= 0) close(ls);
        return cnn_fail(CNN_E_IO, "rendezvous: rank 0 cannot listen on port %s: %s%s", port, strerror(e),
                        e == EADDRINUSE ? " (give a free one: --dist-init tcp://HOST:PORT)" : "");
    }
    freeaddrinfo(res);
    cnn_status st = CNN_OK;
    int joined = 1;
    while (joined < l->world && st == CNN_OK) {
        struct pollfd p = {.fd = ls, .events = POLLIN};
        int ms = remaining_ms(deadline);
        int k = ms > 0 ? poll(&p, 1, ms) : 0;
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            char missing[256] = "";
            size_t o = 0;
            for (int r = 1; r < l->world && o + 12 < sizeof missing; r++)
                if (l->peer[r] < 0) o += (size_t)snprintf(missing + o, sizeof missing - o, "%s%d", o ? "," : "", r);
            st = cnn_fail(CNN_E_DIST, "rendezvous on port %s: rank%s %s did not connect before the deadline "
                          "(--dist-timeout)", port, strchr(missing, ',') ? "s" : "", missing);
            break;
        }
        int fd = accept(ls, NULL, NULL);
        if (fd < 0) continue;
        set_nodelay(fd);
        cnn_dist_msg m;
        /* a stray connection (garbage, silence) is dropped; the real peers may still come */
        double hello_deadline = cnn_now() + 5.0 < deadline ? cnn_now() + 5.0 : deadline;
        if (read_msg(fd, hello_deadline, &m, "rendezvous: a connection to rank 0") != CNN_OK ||
            m.type != CNN_DIST_MSG_HELLO) {
            cnn_log(1, "cnn: rendezvous: dropped a connection that did not greet as a rank: %s", cnn_error_msg());
            cnn_error_clear();
            close(fd);
            continue;
        }
        if (m.world != l->world || m.rank == 0 || l->peer[m.rank] >= 0) {
            st = cnn_fail(CNN_E_MISMATCH, "rendezvous: a peer says it is rank %d of %d, this run has %d rank%s%s",
                          m.rank, m.world, l->world, l->world > 1 ? "s" : "",
                          m.world == l->world && m.rank != 0 ? " and that rank is already here" : "");
            close(fd);
            break;
        }
        l->peer[m.rank] = fd;
        joined++;
    }
    close(ls);
    cnn_dist_msg idm = {.type = CNN_DIST_MSG_ID, .world = l->world};
    memcpy(idm.id, id, CNN_DIST_ID_BYTES);
    for (int r = 1; r < l->world && st == CNN_OK; r++) st = send_msg(l->peer[r], &idm, "rendezvous: sending the id");
    return st;
}

static cnn_status tcp_client(cnn_dist_links *l, const char *host, const char *port, double deadline,
                             uint8_t id[CNN_DIST_ID_BYTES]) {
    char last[256] = "no attempt";
    int fd = -1;
    while (fd < 0) {
        struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
        int gr = getaddrinfo(host, port, &hints, &res);
        if (gr != 0) {
            snprintf(last, sizeof last, "%s", gai_strerror(gr));
        } else {
            for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
                int s = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (s < 0) continue;
                if (connect(s, a->ai_addr, a->ai_addrlen) == 0) {
                    fd = s;
                } else {
                    snprintf(last, sizeof last, "%s", strerror(errno));
                    close(s);
                }
            }
            freeaddrinfo(res);
        }
        if (fd >= 0) break;
        if (remaining_ms(deadline) == 0)
            return cnn_fail(CNN_E_DIST, "rendezvous: rank %d could not reach rank 0 at %s:%s before the deadline "
                            "(--dist-timeout): %s", l->rank, host, port, last);
        cnn_sleep_ms(100);
    }
    set_nodelay(fd);
    l->peer[0] = fd;
    cnn_dist_msg hello = {.type = CNN_DIST_MSG_HELLO, .rank = l->rank, .world = l->world}, m;
    char who[96];
    snprintf(who, sizeof who, "rendezvous: rank %d waiting for rank 0's id", l->rank);
    CNN_TRY(send_msg(fd, &hello, who));
    CNN_TRY(read_msg(fd, deadline, &m, who));
    if (m.type != CNN_DIST_MSG_ID || m.world != l->world)
        return cnn_fail(CNN_E_MISMATCH, "%s: got message type %u for world size %d (this rank: %d)", who, m.type,
                        m.world, l->world);
    memcpy(id, m.id, CNN_DIST_ID_BYTES);
    return CNN_OK;
}

static cnn_status file_exchange(const char *path, int rank, int world, double deadline,
                                uint8_t id[CNN_DIST_ID_BYTES]) {
    if (!*path) return cnn_fail(CNN_E_INVALID, "--dist-init file://: a path is needed");
    if (rank == 0) {
        struct stat sb;
        if (stat(path, &sb) == 0)
            return cnn_fail(CNN_E_INVALID, "--dist-init file://%s: the file exists (an earlier run's?); remove it "
                            "or name a new one", path);
        uint8_t buf[CNN_DIST_MSG_MAX];
        cnn_dist_msg m = {.type = CNN_DIST_MSG_ID, .world = world};
        memcpy(m.id, id, CNN_DIST_ID_BYTES);
        size_t n = cnn_dist_msg_encode(&m, buf);
        cnn_afile f;
        CNN_TRY(cnn_afile_open(&f, path));
        cnn_status st = cnn_afile_write(&f, buf, n);
        if (st == CNN_OK) return cnn_afile_commit(&f);
        cnn_afile_discard(&f);
        return st;
    }
    for (;;) {
        uint8_t *buf = NULL;
        size_t len = 0;
        if (access(path, F_OK) == 0 && cnn_read_file(path, CNN_DIST_MSG_MAX, &buf, &len) == CNN_OK) {
            cnn_dist_msg m;
            int r = cnn_dist_msg_decode(buf, len, &m);
            free(buf);
            if (r <= 0 || (size_t)r != len || m.type != CNN_DIST_MSG_ID)
                return r < 0 ? cnn_error_prefix(CNN_E_FORMAT, "--dist-init file://%s", path)
                             : cnn_fail(CNN_E_FORMAT, "--dist-init file://%s: not a rendezvous id file", path);
            if (m.world != world)
                return cnn_fail(CNN_E_MISMATCH, "--dist-init file://%s: written for %d ranks, this run has %d", path,
                                m.world, world);
            memcpy(id, m.id, CNN_DIST_ID_BYTES);
            return CNN_OK;
        }
        cnn_error_clear();
        if (remaining_ms(deadline) == 0)
            return cnn_fail(CNN_E_DIST, "--dist-init file://%s: rank 0 did not write it before the deadline "
                            "(--dist-timeout)", path);
        cnn_sleep_ms(50);
    }
}

cnn_status cnn_dist_rendezvous(const char *init, int rank, int world, double timeout_s, uint8_t id[CNN_DIST_ID_BYTES],
                               cnn_dist_links *l) {
    memset(l, 0, sizeof *l);
    if (world < 1 || world > CNN_DIST_MAX_WORLD || rank < 0 || rank >= world)
        return cnn_fail(CNN_E_INVALID, "rank %d of world size %d", rank, world);
    l->rank = rank;
    l->world = world;
    l->peer = malloc((size_t)world * sizeof *l->peer);
    l->bye = calloc((size_t)world, sizeof *l->bye);
    if (!l->peer || !l->bye) {
        cnn_dist_links_close(l, false);
        return cnn_fail(CNN_E_OOM, "out of host memory for %d peer links", world);
    }
    for (int r = 0; r < world; r++) l->peer[r] = -1;
    double deadline = cnn_now() + (timeout_s > 0 ? timeout_s : 0);
    cnn_status st;
    if (world == 1) {
        st = CNN_OK;
    } else if (strncmp(init, "tcp://", 6) == 0) {
        char host[256], port[16];
        st = parse_tcp(init, host, sizeof host, port, sizeof port);
        if (st == CNN_OK) st = rank == 0 ? tcp_server(l, host, port, deadline, id) : tcp_client(l, host, port, deadline, id);
    } else if (strncmp(init, "file://", 7) == 0) {
        st = file_exchange(init + 7, rank, world, deadline, id);
    } else {
        st = cnn_fail(CNN_E_INVALID, "--dist-init %s: expected tcp://HOST:PORT or file://PATH", init);
    }
    if (st != CNN_OK) cnn_dist_links_close(l, false);
    return st;
}

cnn_status cnn_dist_links_poll(cnn_dist_links *l, int *peer) {
    *peer = -1;
    for (int r = 0; r < l->world; r++) {
        int fd = l->peer ? l->peer[r] : -1;
        if (fd < 0) continue;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 0) <= 0) continue;
        cnn_dist_msg m;
        /* a message is whole when it is readable (they are small and sent in one piece) */
        cnn_status st = read_msg(fd, cnn_now() + 1.0, &m, "peer link");
        if (st == CNN_OK && m.type == CNN_DIST_MSG_BYE) {
            l->bye[r] = true;
            close(fd);
            l->peer[r] = -1;
            continue;
        }
        close(fd);
        l->peer[r] = -1;
        if (l->bye[r]) continue;
        cnn_error_clear();
        if (st == CNN_OK && m.type == CNN_DIST_MSG_FAIL) {
            *peer = m.rank;
            return cnn_fail(CNN_E_DIST, "rank %d: peer rank %d failed (reported by rank 0)", l->rank, m.rank);
        }
        *peer = r;
        return cnn_fail(CNN_E_DIST, "rank %d: peer rank %d died (its connection closed without a goodbye)", l->rank, r);
    }
    return CNN_OK;
}

void cnn_dist_links_fail(cnn_dist_links *l, int failed) {
    if (l->rank != 0 || !l->peer) return;
    cnn_dist_msg m = {.type = CNN_DIST_MSG_FAIL, .rank = failed};
    for (int r = 1; r < l->world; r++)
        if (l->peer[r] >= 0 && send_msg(l->peer[r], &m, "peer link") != CNN_OK) cnn_error_clear();
}

void cnn_dist_links_close(cnn_dist_links *l, bool bye) {
    for (int r = 0; l->peer && r < l->world; r++) {
        if (l->peer[r] < 0) continue;
        cnn_dist_msg m = {.type = CNN_DIST_MSG_BYE, .rank = l->rank};
        if (bye && send_msg(l->peer[r], &m, "peer link") != CNN_OK) cnn_error_clear();
        close(l->peer[r]);
    }
    free(l->peer);
    free(l->bye);
    l->peer = NULL;
    l->bye = NULL;
}
