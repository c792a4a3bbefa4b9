/* launch.c — the launcher of `cnn train --gpus N` (dist.h): one worker process per GPU with torchrun's
 * environment, and the group torn down when one fails (SIGTERM, then SIGKILL). The workers are in a process
 * group of their own, so a Ctrl-C reaches them once, forwarded by the launcher, and die with it (PDEATHSIG). */
#include "cnn/dist.h"

#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

int cnn_dist_parse_gpus(const char *spec, int *gpus, int cap) {
    if (!spec || !*spec) {
        cnn_fail(CNN_E_INVALID, "--gpus: expected N or a list such as 0,2,3");
        return -1;
    }
    bool list = strchr(spec, ',') != NULL;
    int n = 0;
    const char *p = spec;
    while (*p) {
        long v = 0;
        int digits = 0;
        while (*p >= '0' && *p <= '9' && digits < 6) v = v * 10 + (*p++ - '0'), digits++;
        if (digits == 0 || digits == 6 || (*p && *p != ',') || (*p == ',' && !p[1])) {
            cnn_fail(CNN_E_INVALID, "--gpus %s: expected N or a comma-separated list of GPU indices", spec);
            return -1;
        }
        if (*p == ',') p++;
        if (!list) { /* a count */
            if (v < 1 || v > cap) {
                cnn_fail(CNN_E_INVALID, "--gpus %s: the count must be in [1, %d]", spec, cap);
                return -1;
            }
            for (int i = 0; i < v; i++) gpus[i] = i;
            return (int)v;
        }
        if (v > 1023 || n == cap) {
            cnn_fail(CNN_E_INVALID, "--gpus %s: GPU indices must be below 1024, at most %d of them", spec, cap);
            return -1;
        }
        for (int i = 0; i < n; i++)
            if (gpus[i] == v) {
                cnn_fail(CNN_E_INVALID, "--gpus %s: GPU %ld is named twice", spec, v);
                return -1;
            }
        gpus[n++] = (int)v;
    }
    return n;
}

/* A TCP port free on this machine now (the workers bind it moments later, as torchrun does). */
static int free_port(void) {
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK), .sin_port = 0};
    socklen_t len = sizeof a;
    int port = -1;
    if (bind(s, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(s, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(s);
    return port;
}

static const char *const OURS[] = {"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=", "MASTER_ADDR=",
                                   "MASTER_PORT=", "CUDA_VISIBLE_DEVICES=", "NCCL_NVLS_ENABLE="};
enum { N_OURS = sizeof OURS / sizeof OURS[0] };

/* environ without our variables, then ours: (n_env + N_OURS + 1) pointers into vars (N_OURS x 320 bytes).
 * NCCL_NVLS_ENABLE=0 unless the user set it: NCCL's NVLink SHARP (multicast objects) stays off by default, since
 * a data-parallel gradient sum gains little from it and some machines forbid multicast memory. */
static char **worker_env(const cnn_dist_launch *l, int rank, char *vars) {
    size_t n = 0;
    while (environ[n]) n++;
    char **env = malloc((n + N_OURS + 1) * sizeof *env);
    if (!env) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        bool ours = false;
        for (int j = 0; j < N_OURS; j++) ours |= strncmp(environ[i], OURS[j], strlen(OURS[j])) == 0;
        if (!ours) env[k++] = environ[i];
    }
    const size_t cap = 320;
    snprintf(vars + 0 * cap, cap, "RANK=%d", rank);
    snprintf(vars + 1 * cap, cap, "WORLD_SIZE=%d", l->world);
    snprintf(vars + 2 * cap, cap, "LOCAL_RANK=%d", rank);
    snprintf(vars + 3 * cap, cap, "LOCAL_WORLD_SIZE=%d", l->world);
    snprintf(vars + 4 * cap, cap, "MASTER_ADDR=%.255s", l->addr ? l->addr : "127.0.0.1");
    snprintf(vars + 5 * cap, cap, "MASTER_PORT=%d", l->port);
    snprintf(vars + 6 * cap, cap, "CUDA_VISIBLE_DEVICES=%.255s", l->visible ? l->visible : "");
    const char *nvls = getenv("NCCL_NVLS_ENABLE");
    snprintf(vars + 7 * cap, cap, "NCCL_NVLS_ENABLE=%.255s", nvls ? nvls : "0");
    for (int j = 0; j < N_OURS; j++) {
        if (j == 6 && !l->visible) { /* leave CUDA_VISIBLE_DEVICES as it was */
            const char *v = getenv("CUDA_VISIBLE_DEVICES");
            if (v) snprintf(vars + 6 * cap, cap, "CUDA_VISIBLE_DEVICES=%.255s", v);
            else continue;
        }
        env[k++] = vars + j * cap;
    }
    env[k] = NULL;
    return env;
}

static volatile sig_atomic_t forwarded;
static void on_signal(int sig) { forwarded = sig; }

static void describe(int status, char *buf, size_t cap) {
    if (WIFSIGNALED(status))
        snprintf(buf, cap, "was killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(buf, cap, "exited with status %d", WEXITSTATUS(status));
}

static int exit_code(int status) { return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status); }

int cnn_dist_launch_run(const cnn_dist_launch *lin) {
    cnn_dist_launch l = *lin;
    if (l.world < 1 || l.world > CNN_DIST_MAX_WORLD) {
        fprintf(stderr, "cnn: launcher: %d workers out of range\n", l.world);
        return 2;
    }
    if (l.port == 0 && (l.port = free_port()) <= 0) {
        fprintf(stderr, "cnn: launcher: no free TCP port for the rendezvous: %s\n", strerror(errno));
        return 1;
    }
    pid_t *pid = calloc((size_t)l.world, sizeof *pid);
    int *status = calloc((size_t)l.world, sizeof *status);
    char *vars = malloc(N_OURS * 320);
    if (!pid || !status || !vars) {
        fprintf(stderr, "cnn: launcher: out of host memory\n");
        free(pid), free(status), free(vars);
        return 1;
    }
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    pid_t self = getpid();
    int started = 0, rc = 0, alive = 0;
    for (int r = 0; r < l.world; r++) {
        char **env = worker_env(&l, r, vars);
        if (!env) {
            fprintf(stderr, "cnn: launcher: out of host memory\n");
            rc = 1;
            break;
        }
        fflush(stdout);
        fflush(stderr);
        pid_t p = fork();
        if (p == 0) {
            setpgid(0, 0);
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != self) _exit(1); /* the launcher is already gone */
            signal(SIGINT, SIG_DFL);
            signal(SIGTERM, SIG_DFL);
            environ = env;
            execvp(l.argv[0], l.argv);
            fprintf(stderr, "cnn: launcher: cannot start %s: %s\n", l.argv[0], strerror(errno));
            _exit(127);
        }
        free(env);
        if (p < 0) {
            fprintf(stderr, "cnn: launcher: fork: %s\n", strerror(errno));
            rc = 1;
            break;
        }
        pid[r] = p;
        started++;
        alive++;
        cnn_log(2, "cnn: rank %d: pid %d", r, (int)p);
    }
    /* wait; after the first failure give the others grace_s to notice (their watchdogs name the peer), then
     * SIGTERM, then after grace_s more SIGKILL */
    int failed = rc ? -1 : l.world; /* a start failure counts as a failure of the group */
    double t_fail = rc ? cnn_now() : 0;
    int phase = 0;                  /* 0 running, 1 waiting for the rest, 2 SIGTERM sent, 3 SIGKILL sent */
    if (rc) phase = 1;
    int fwd_done = 0;
    while (alive > 0) {
        int st;
        pid_t p = waitpid(-1, &st, WNOHANG);
        if (p > 0) {
            for (int r = 0; r < started; r++) {
                if (pid[r] != p) continue;
                pid[r] = 0;
                status[r] = st;
                alive--;
                bool bad = !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
                if (bad && phase == 0 && !forwarded) {
                    char why[128];
                    describe(st, why, sizeof why);
                    fprintf(stderr, "cnn: launcher: rank %d (pid %d) %s; stopping the other rank%s\n", r, (int)p, why,
                            l.world > 2 ? "s" : "");
                    failed = r;
                    rc = exit_code(st);
                    phase = 1;
                    t_fail = cnn_now();
                }
            }
            continue;
        }
        if (p < 0 && errno != EINTR) break;
        if (forwarded && fwd_done != forwarded) { /* a signal to the launcher goes to every worker, once */
            fwd_done = forwarded;
            for (int r = 0; r < started; r++)
                if (pid[r] > 0) kill(pid[r], forwarded);
        }
        if (phase >= 1) {
            double waited = cnn_now() - t_fail;
            int want = waited > 2 * l.grace_s ? 3 : waited > l.grace_s ? 2 : 1;
            for (; phase < want; phase++)
                for (int r = 0; r < started; r++) /* the worker's whole process group: its children too */
                    if (pid[r] > 0) kill(-pid[r], phase + 1 == 2 ? SIGTERM : SIGKILL);
        }
        cnn_sleep_ms(20);
    }
    if (rc == 0) { /* no failure seen while running: the exit statuses (e.g. all interrupted) */
        for (int r = 0; r < started && rc == 0; r++)
            if (!(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0)) rc = exit_code(status[r]), failed = r;
    }
    if (rc != 0 && failed >= 0 && failed < l.world)
        fprintf(stderr, "cnn: launcher: the run failed: rank %d exited first with %d\n", failed, rc);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    free(pid);
    free(status);
    free(vars);
    return rc;
}
