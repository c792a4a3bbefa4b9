/* test_dist.c — the backend-neutral parts of multi-GPU training (dist.h) between real processes: torchrun's
 * environment, batch arithmetic and sharding (also across a resume on another number of GPUs), the rendezvous
 * message parser, the tcp:// and file:// exchanges of the unique id (with timeouts and garbage), the liveness
 * links, and the launcher's teardown of a group whose worker fails. No GPU, no NCCL. */
#include "test.h"
#include "cnn/dist.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static int free_port(void) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = -1;
    if (s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(s, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (s >= 0) close(s);
    return port;
}

static void test_env(void) {
    cnn_dist_env e;
    cnn_status st0 = cnn_dist_env_parse(NULL, NULL, NULL, NULL, NULL, &e);
    check(st0 == CNN_OK && !e.set && e.world == 1 && e.rank == 0 && e.port == 29500 &&
              strcmp(e.addr, "127.0.0.1") == 0,
          "env_unset", "world %d rank %d", e.world, e.rank);
    check(cnn_dist_env_parse("3", "4", "1", "10.0.0.7", "1234", &e) == CNN_OK && e.set && e.rank == 3 &&
              e.world == 4 && e.local_rank == 1 && e.port == 1234 && strcmp(e.addr, "10.0.0.7") == 0,
          "env_full", NULL);
    check(cnn_dist_env_parse("2", "4", "", "", "", &e) == CNN_OK && e.local_rank == 2, "env_local_default", NULL);
    static const struct {
        const char *rank, *world, *local, *port, *what;
    } bad[] = {
        {"1", NULL, NULL, NULL, "RANK"},  {NULL, "2", NULL, NULL, "RANK"},   {"2", "2", NULL, NULL, "RANK=2"},
        {"-1", "2", NULL, NULL, "RANK"},  {"0", "0", NULL, NULL, "WORLD"},   {"0", "x", NULL, NULL, "WORLD"},
        {"0", "2 ", NULL, NULL, "WORLD"}, {"0", "99999999999", NULL, NULL, "WORLD"},
        {"0", "2", "1024", NULL, "LOCAL"}, {"0", "2", "a", NULL, "LOCAL"},   {"0", "2", NULL, "0", "MASTER_PORT"},
        {"0", "2", NULL, "65536", "MASTER_PORT"}, {"+1", "2", NULL, NULL, "RANK"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cnn_status st = cnn_dist_env_parse(bad[i].rank, bad[i].world, bad[i].local, NULL, bad[i].port, &e);
        char name[64];
        snprintf(name, sizeof name, "env_invalid_%zu", i);
        check(st == CNN_E_INVALID && strstr(cnn_error_msg(), bad[i].what), name, "%s", cnn_error_msg());
    }
    cnn_env fake = {0};
    snprintf(fake.rank, sizeof fake.rank, "1");
    snprintf(fake.world_size, sizeof fake.world_size, "2");
    snprintf(fake.master_port, sizeof fake.master_port, "4000");
    bool plain = cnn_dist_env_from(&fake, &e) == CNN_OK && e.rdv_port == 4000;
    fake.agent_store = true;
    check(plain && cnn_dist_env_from(&fake, &e) == CNN_OK && e.rdv_port == 4001 && e.port == 4000,
          "env_torchrun_agent_store", "rendezvous on MASTER_PORT + 1");
    char longaddr[300];
    memset(longaddr, 'a', sizeof longaddr - 1);
    longaddr[sizeof longaddr - 1] = 0;
    check(cnn_dist_env_parse("0", "2", NULL, longaddr, NULL, &e) == CNN_E_INVALID, "env_addr_too_long", NULL);
}

static void test_sharding(void) {
    int l, g;
    check(cnn_dist_batch(64, 0, 4, &l, &g) == CNN_OK && l == 64 && g == 256, "batch_per_gpu", NULL);
    check(cnn_dist_batch(64, 256, 4, &l, &g) == CNN_OK && l == 64 && g == 256, "batch_global", NULL);
    check(cnn_dist_batch(64, 250, 4, &l, &g) == CNN_E_INVALID, "batch_global_not_multiple", "%s", cnn_error_msg());
    check(cnn_dist_batch(1 << 30, 0, 8, &l, &g) == CNN_E_INVALID, "batch_overflow", NULL);

    /* shards of every step: disjoint, in the global range, covering it exactly */
    const int64_t spe = 5;
    const int B = 24;
    bool ok = true;
    for (int world = 1; world <= 8 && ok; world *= 2) {
        if (B % world) continue;
        for (int64_t step = 1; step <= 3 * spe && ok; step++) {
            unsigned char seen[24] = {0};
            int64_t epoch = (step - 1) / spe, base = (step - 1) % spe * B;
            for (int r = 0; r < world; r++) {
                cnn_dist_shard sh = cnn_dist_step_shard(step, spe, B, r, world);
                ok &= sh.epoch == epoch && sh.count == B / world && sh.start >= base && sh.start + sh.count <= base + B;
                for (int i = 0; ok && i < sh.count; i++) ok &= seen[sh.start + i - base]++ == 0;
            }
            for (int i = 0; i < B; i++) ok &= seen[i] == 1;
        }
    }
    check(ok, "shard_disjoint_cover", "worlds 1..8, 3 epochs");
    /* a resume on another number of GPUs: step s reads the same global positions whatever the world */
    ok = true;
    for (int64_t step = 7; step <= 9; step++) {
        cnn_dist_shard a = cnn_dist_step_shard(step, spe, B, 0, 1);
        cnn_dist_shard b0 = cnn_dist_step_shard(step, spe, B, 0, 4), b3 = cnn_dist_step_shard(step, spe, B, 3, 4);
        ok &= a.epoch == b0.epoch && a.start == b0.start && b3.start + b3.count == a.start + a.count;
    }
    check(ok, "shard_resume_other_world", NULL);
    int64_t total = 0, next = 0;
    ok = true;
    for (int r = 0; r < 3; r++) {
        int64_t s, c;
        cnn_dist_split(10, r, 3, &s, &c);
        ok &= s == next && (c == 3 || c == 4);
        next = s + c;
        total += c;
    }
    check(ok && total == 10, "eval_split", NULL);
}

static void test_messages(void) {
    uint8_t buf[CNN_DIST_MSG_MAX];
    cnn_dist_msg m = {.type = CNN_DIST_MSG_ID, .world = 3}, out;
    for (int i = 0; i < CNN_DIST_ID_BYTES; i++) m.id[i] = (uint8_t)(i * 7);
    size_t n = cnn_dist_msg_encode(&m, buf);
    bool ok = cnn_dist_msg_decode(buf, n, &out) == (int)n && out.type == m.type && out.world == 3 &&
              memcmp(out.id, m.id, CNN_DIST_ID_BYTES) == 0;
    for (size_t k = 0; k < n && ok; k++) ok &= cnn_dist_msg_decode(buf, k, &out) == 0; /* every prefix: read more */
    check(ok, "msg_roundtrip_prefixes", "%zu bytes", n);
    uint8_t bad[CNN_DIST_MSG_MAX];
    struct {
        int at;
        uint8_t v;
        const char *name;
    } flips[] = {{0, 'X', "msg_bad_magic"}, {4, 9, "msg_bad_version"}, {8, 77, "msg_bad_type"},
                 {12, 200, "msg_bad_length"}, {16, 0, "msg_bad_world"}};
    for (size_t i = 0; i < sizeof flips / sizeof flips[0]; i++) {
        memcpy(bad, buf, n);
        bad[flips[i].at] = flips[i].v;
        check(cnn_dist_msg_decode(bad, n, &out) == -1, flips[i].name, "%s", cnn_error_msg());
    }
    cnn_dist_msg h = {.type = CNN_DIST_MSG_HELLO, .rank = 5, .world = 4};
    n = cnn_dist_msg_encode(&h, buf);
    check(cnn_dist_msg_decode(buf, n, &out) == -1, "msg_rank_past_world", NULL);
    /* garbage is refused from its first bytes, without waiting for more */
    check(cnn_dist_msg_decode((const uint8_t *)"GET / HTTP/1.1", 3, &out) == -1, "msg_garbage_early", NULL);
}

/* rank r of world in a child process: rendezvous, then report the id's first byte in the exit status */
static pid_t spawn_rank(const char *init, int rank, int world, double timeout, int linger_ms) {
    fflush(stdout);
    pid_t p = fork();
    if (p != 0) return p;
    uint8_t id[CNN_DIST_ID_BYTES] = {0};
    if (rank == 0)
        for (int i = 0; i < CNN_DIST_ID_BYTES; i++) id[i] = (uint8_t)(100 + i);
    cnn_dist_links l;
    cnn_status st = cnn_dist_rendezvous(init, rank, world, timeout, id, &l);
    if (st != CNN_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, cnn_error_msg());
        _exit(st == CNN_E_DIST ? 3 : 4);
    }
    bool good = true;
    for (int i = 0; i < CNN_DIST_ID_BYTES; i++) good &= id[i] == (uint8_t)(100 + i);
    if (linger_ms) cnn_sleep_ms(linger_ms);
    cnn_dist_links_close(&l, true);
    _exit(good ? 0 : 5);
}

static int wait_status(pid_t p) {
    int st = 0;
    waitpid(p, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void test_tcp(void) {
    char init[64];
    snprintf(init, sizeof init, "tcp://127.0.0.1:%d", free_port());
    /* the others start first: they retry until rank 0 listens */
    pid_t p2 = spawn_rank(init, 2, 3, 20, 0), p1 = spawn_rank(init, 1, 3, 20, 0);
    cnn_sleep_ms(300);
    pid_t p0 = spawn_rank(init, 0, 3, 20, 0);
    int s0 = wait_status(p0), s1 = wait_status(p1), s2 = wait_status(p2);
    check(s0 == 0 && s1 == 0 && s2 == 0, "tcp_three_ranks", "exit %d %d %d", s0, s1, s2);

    /* a missing rank: rank 0 times out naming it; a rank without rank 0 times out */
    snprintf(init, sizeof init, "tcp://127.0.0.1:%d", free_port());
    p0 = spawn_rank(init, 0, 3, 1.0, 0);
    p1 = spawn_rank(init, 1, 3, 5, 0);
    s0 = wait_status(p0);
    s1 = wait_status(p1);
    check(s0 == 3, "tcp_timeout_missing_rank", "rank 0 exit %d", s0);
    snprintf(init, sizeof init, "tcp://127.0.0.1:%d", free_port());
    s1 = wait_status(spawn_rank(init, 1, 2, 0.5, 0));
    check(s1 == 3, "tcp_timeout_no_rank0", "exit %d", s1);

    /* garbage and silence are dropped; the real peer still gets in */
    int port = free_port();
    snprintf(init, sizeof init, "tcp://127.0.0.1:%d", port);
    p0 = spawn_rank(init, 0, 2, 20, 0);
    bool sent = false;
    for (int tries = 0; tries < 100 && !sent; tries++) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        if (connect(s, (struct sockaddr *)&a, sizeof a) == 0) {
            static const char junk[] = "CNND\xff\xff\xff\xff garbage garbage garbage";
            sent = send(s, junk, sizeof junk, MSG_NOSIGNAL) > 0;
            cnn_sleep_ms(50);
        } else {
            cnn_sleep_ms(50);
        }
        close(s);
    }
    p1 = spawn_rank(init, 1, 2, 20, 0);
    s0 = wait_status(p0);
    s1 = wait_status(p1);
    check(sent && s0 == 0 && s1 == 0, "tcp_garbage_dropped", "sent %d exit %d %d", sent, s0, s1);

    /* a peer of another world size is a mismatch on rank 0 */
    snprintf(init, sizeof init, "tcp://127.0.0.1:%d", free_port());
    p0 = spawn_rank(init, 0, 2, 20, 0);
    p1 = spawn_rank(init, 1, 3, 3, 0);
    s0 = wait_status(p0);
    s1 = wait_status(p1);
    check(s0 == 4 && s1 != 0, "tcp_world_mismatch", "exit %d %d", s0, s1);

    cnn_dist_links l;
    uint8_t id[CNN_DIST_ID_BYTES] = {0};
    static const char *const inits[] = {"tcp://host", "tcp://:12", "tcp://h:0", "tcp://h:70000", "tcp://h:1x",
                                        "udp://h:1", "tcp://[::1:5"};
    bool all = true;
    for (size_t i = 0; i < sizeof inits / sizeof inits[0]; i++)
        all &= cnn_dist_rendezvous(inits[i], 1, 2, 1, id, &l) == CNN_E_INVALID;
    check(all, "init_malformed", NULL);
}

static void test_file(void) {
    char path[128];
    snprintf(path, sizeof path, "/tmp/cnn_test_dist_%d.id", (int)getpid());
    unlink(path);
    char init[160];
    snprintf(init, sizeof init, "file://%s", path);
    pid_t p1 = spawn_rank(init, 1, 2, 20, 0);
    cnn_sleep_ms(200);
    pid_t p0 = spawn_rank(init, 0, 2, 20, 0);
    int s0 = wait_status(p0), s1 = wait_status(p1);
    check(s0 == 0 && s1 == 0, "file_exchange", "exit %d %d", s0, s1);
    /* the file of an earlier run is refused by rank 0 */
    s0 = wait_status(spawn_rank(init, 0, 2, 2, 0));
    check(s0 == 4, "file_exists_refused", "exit %d", s0);
    /* a torn or garbage file is an error, not a crash */
    FILE *f = fopen(path, "wb");
    fputs("CNND\x01\x00\x00\x00garbage", f);
    fclose(f);
    s1 = wait_status(spawn_rank(init, 1, 2, 2, 0));
    check(s1 == 4, "file_garbage", "exit %d", s1);
    unlink(path);
    s1 = wait_status(spawn_rank(init, 1, 2, 0.3, 0));
    check(s1 == 3, "file_timeout", "exit %d", s1);
}

/* rank 0 here, rank 1 in a child that is killed: the links name it at once */
static void test_links(void) {
    char init[64];
    snprintf(init, sizeof init, "tcp://127.0.0.1:%d", free_port());
    pid_t p1 = spawn_rank(init, 1, 2, 20, 60000);
    uint8_t id[CNN_DIST_ID_BYTES];
    for (int i = 0; i < CNN_DIST_ID_BYTES; i++) id[i] = (uint8_t)(100 + i);
    cnn_dist_links l;
    cnn_status st = cnn_dist_rendezvous(init, 0, 2, 20, id, &l);
    int peer = -2;
    bool quiet = st == CNN_OK && cnn_dist_links_poll(&l, &peer) == CNN_OK && peer == -1;
    kill(p1, SIGKILL);
    wait_status(p1);
    cnn_status ps = CNN_OK;
    for (int i = 0; i < 100 && ps == CNN_OK; i++) {
        ps = cnn_dist_links_poll(&l, &peer);
        if (ps == CNN_OK) cnn_sleep_ms(20);
    }
    check(quiet && ps == CNN_E_DIST && peer == 1 && strstr(cnn_error_msg(), "rank 1"), "links_peer_death", "%s",
          cnn_error_msg());
    if (st == CNN_OK) cnn_dist_links_close(&l, false);

    /* a goodbye is not a death */
    snprintf(init, sizeof init, "tcp://127.0.0.1:%d", free_port());
    p1 = spawn_rank(init, 1, 2, 20, 0);
    st = cnn_dist_rendezvous(init, 0, 2, 20, id, &l);
    wait_status(p1);
    ps = CNN_OK;
    for (int i = 0; i < 10 && ps == CNN_OK; i++) ps = cnn_dist_links_poll(&l, &peer), cnn_sleep_ms(10);
    check(st == CNN_OK && ps == CNN_OK, "links_goodbye", NULL);
    if (st == CNN_OK) cnn_dist_links_close(&l, true);
}

static void test_launcher(void) {
    int gpus[16];
    check(cnn_dist_parse_gpus("4", gpus, 16) == 4 && gpus[3] == 3, "gpus_count", NULL);
    check(cnn_dist_parse_gpus("0,2,3", gpus, 16) == 3 && gpus[1] == 2, "gpus_list", NULL);
    static const char *const bad[] = {"", "0", "x", "1,1", "1,", ",1", "2,a", "1024,1", "17", "-1", "1 "};
    bool all = true;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) all &= cnn_dist_parse_gpus(bad[i], gpus, 16) == -1;
    check(all, "gpus_invalid", NULL);

    /* every worker sees its place in the environment */
    char *ok_argv[] = {"/bin/sh", "-c",
                       "[ \"$WORLD_SIZE\" = 3 ] && [ \"$LOCAL_RANK\" = \"$RANK\" ] && [ -n \"$MASTER_PORT\" ] && "
                       "[ \"$MASTER_ADDR\" = 127.0.0.1 ] && [ \"$CUDA_VISIBLE_DEVICES\" = 4,6,7 ] && "
                       "[ \"$NCCL_NVLS_ENABLE\" = 0 ]",
                       NULL};
    cnn_dist_launch l = {.argv = ok_argv, .world = 3, .addr = "127.0.0.1", .visible = "4,6,7", .grace_s = 1};
    check(cnn_dist_launch_run(&l) == 0, "launch_env", NULL);

    /* rank 1 fails at once; the others would run for a minute: they are stopped (SIGTERM after the grace time)
     * and the launcher reports rank 1's status */
    char *fail_argv[] = {"/bin/sh", "-c", "if [ \"$RANK\" = 1 ]; then exit 7; fi; sleep 60; exit 0", NULL};
    l = (cnn_dist_launch){.argv = fail_argv, .world = 3, .addr = "127.0.0.1", .grace_s = 0.5};
    double t0 = cnn_now();
    int rc = cnn_dist_launch_run(&l);
    double dt = cnn_now() - t0;
    check(rc == 7 && dt < 30, "launch_teardown", "rc %d after %.1f s", rc, dt);

    /* a worker that ignores SIGTERM is killed */
    char *stubborn[] = {"/bin/sh", "-c", "if [ \"$RANK\" = 0 ]; then kill -9 $$; fi; trap '' TERM; sleep 60; exit 0", NULL};
    l = (cnn_dist_launch){.argv = stubborn, .world = 2, .addr = "127.0.0.1", .grace_s = 0.5};
    t0 = cnn_now();
    rc = cnn_dist_launch_run(&l);
    dt = cnn_now() - t0;
    check(rc == 128 + SIGKILL && dt < 30, "launch_sigkill", "rc %d after %.1f s", rc, dt);

    char *missing[] = {"/nonexistent/cnn-worker", NULL};
    l = (cnn_dist_launch){.argv = missing, .world = 2, .addr = "127.0.0.1", .grace_s = 0.5};
    check(cnn_dist_launch_run(&l) == 127, "launch_missing_program", NULL);
}

int main(void) {
    cnn_log_set_level(0);
    test_env();
    test_sharding();
    test_messages();
    test_tcp();
    test_file();
    test_links();
    test_launcher();
    return test_finish();
}
