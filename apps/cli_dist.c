/* cli_dist.c — the multi-GPU options of `train` and `bench --mode train` (dist.h): `--gpus` makes this process
 * the launcher of one worker per GPU; a worker (RANK set by that launcher, torchrun or Slurm) joins the run. */
#include "cli.h"
#include "cnn/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cli_add_dist(cli_table *t, cli_dist *d) {
    memset(d, 0, sizeof *d);
    d->timeout_s = 300;
    d->bucket_mb = 25;
    cli_add(t, (cli_opt){"gpus", 0, CLI_STR, "N|LIST", &d->gpus, 0, 0, NULL,
                         "data parallel on N GPUs (or the GPUs of LIST, e.g. 0,2,3): one worker process per GPU, "
                         "started here (needs NCCL)"});
    cli_add(t, (cli_opt){"dist-init", 0, CLI_STR, "URL", &d->init, 0, 0, NULL,
                         "how the workers meet: tcp://HOST:PORT (rank 0 listens) or file://PATH (a new file on a "
                         "shared file system); default tcp://$MASTER_ADDR:$MASTER_PORT"});
    cli_add(t, (cli_opt){"dist-timeout", 0, CLI_FLOAT, "S", &d->timeout_s, 1, 86400, NULL,
                         "a worker that waits this long for its peers (to meet, or for a step) stops the run"});
    cli_add(t, (cli_opt){"bucket-mb", 0, CLI_FLOAT, "MB", &d->bucket_mb, 0, 4096, NULL,
                         "gradients summed in buckets of MB while the backward runs (0 = all at once after it)"});
    d->allreduce = "fp32";
    cli_add(t, (cli_opt){"allreduce", 0, CLI_CHOICE, NULL, &d->allreduce, 0, 0, "fp32|bf16",
                         "the precision gradients are summed in across GPUs (bf16: half the bytes, each GPU's "
                         "gradients rounded to bfloat16 first)"});
    cli_add(t, (cli_opt){"sync-bn", 0, CLI_FLAG, NULL, &d->sync_bn, 0, 0, NULL,
                         "BatchNorm statistics over the whole global batch (all GPUs), as PyTorch's SyncBatchNorm; "
                         "default: per GPU, as DDP"});
}

cnn_dp_opts cli_dist_dp_opts(const cli_dist *d, int world) {
    return (cnn_dp_opts){.bucket_bytes = (size_t)((double)d->bucket_mb * (1 << 20)), .world = world,
                         .sync_bn = d->sync_bn, .bf16_sums = strcmp(d->allreduce, "bf16") == 0};
}

/* this program's path, for the workers */
static int self_path(char *buf, size_t cap) {
    ssize_t n = readlink("/proc/self/exe", buf, cap - 1);
    if (n <= 0) return -1;
    buf[n] = 0;
    return 0;
}

int cli_dist_prepare(const char *cmd, cli_dist *d, cli_common *c, int argc, char **argv) {
    const cnn_env *env = cnn_env_get();
    cnn_status st = cnn_dist_env_from(env, &d->env_out[0]);
    cnn_dist_env *e = &d->env_out[0];
    if (st != CNN_OK) return cli_usage_error(cmd, "%s", cnn_error_msg());
    if (e->set && d->gpus)
        return cli_usage_error(cmd, "--gpus in a worker (RANK is set: a launcher started this process already)");
    if (!d->gpus && e->world == 1) return -1; /* one process */
    if (strcmp(c->device, "cpu") == 0)
        return cli_usage_error(cmd, "%s needs --device cuda (or auto): the CPU backend has no multi-GPU collectives",
                               d->gpus ? "--gpus" : "a worker of a multi-GPU run");
    if (e->set) { /* a worker: its GPU is LOCAL_RANK, as torchrun's convention */
        c->gpu_index = e->local_rank;
        if (e->rank != 0) c->quiet = true; /* only rank 0 speaks; errors still go to stderr */
        return -1;
    }
    int gpus[CNN_DIST_MAX_WORLD];
    int n = cnn_dist_parse_gpus(d->gpus, gpus, CNN_DIST_MAX_WORLD);
    if (n < 0) return cli_usage_error(cmd, "%s", cnn_error_msg());
    int have = 0;
    if (cnn_cuda_dist_probe(&have) != CNN_OK)
        return cli_usage_error(cmd, "--gpus %s: this machine cannot run a multi-GPU job: %s", d->gpus, cnn_error_msg());
    int top = 0;
    for (int i = 0; i < n; i++) top = gpus[i] > top ? gpus[i] : top;
    if (top >= have)
        return cli_usage_error(cmd, "--gpus %s: asks for GPU %d, this machine has %d GPU%s", d->gpus, top, have,
                               have == 1 ? "" : "s");
    if (n == 1) { /* one GPU: run here */
        c->gpu_index = gpus[0];
        return -1;
    }
    /* the workers see the GPUs of the list as 0..n-1 (CUDA_VISIBLE_DEVICES, through any the user set) */
    char visible[256] = "", *vis = NULL;
    bool list = strchr(d->gpus, ',') != NULL;
    if (list) {
        const char *parent[CNN_DIST_MAX_WORLD];
        char pbuf[256];
        int np = 0;
        snprintf(pbuf, sizeof pbuf, "%s", env->cuda_visible);
        for (char *tok = strtok(pbuf, ","); tok && np < CNN_DIST_MAX_WORLD; tok = strtok(NULL, ",")) parent[np++] = tok;
        size_t o = 0;
        for (int i = 0; i < n; i++) {
            char one[16];
            snprintf(one, sizeof one, "%d", gpus[i]);
            const char *name = np ? (gpus[i] < np ? parent[gpus[i]] : NULL) : one;
            if (!name) return cli_usage_error(cmd, "--gpus %s: GPU %d is not in CUDA_VISIBLE_DEVICES=%s", d->gpus,
                                              gpus[i], env->cuda_visible);
            int k = snprintf(visible + o, sizeof visible - o, "%s%s", i ? "," : "", name);
            if (k < 0 || (size_t)k >= sizeof visible - o) return cli_usage_error(cmd, "--gpus %s: list too long", d->gpus);
            o += (size_t)k;
        }
        vis = visible;
    }
    char exe[4096];
    if (self_path(exe, sizeof exe) != 0) {
        fprintf(stderr, "cnn: %s: cannot find this program's path (/proc/self/exe)\n", cmd);
        return CLI_EXIT_RUNTIME;
    }
    /* the same command line without --gpus */
    char **wargv = calloc((size_t)argc + 2, sizeof *wargv);
    if (!wargv) return cli_fail(cnn_fail(CNN_E_OOM, "out of host memory"));
    int k = 0;
    wargv[k++] = exe;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--gpus") == 0) {
            i++;
            continue;
        }
        if (strncmp(argv[i], "--gpus=", 7) == 0) continue;
        wargv[k++] = argv[i];
    }
    wargv[k] = NULL;
    cnn_dist_launch l = {.argv = wargv, .world = n, .addr = "127.0.0.1", .port = 0, .visible = vis, .grace_s = 5};
    if (!c->quiet) fprintf(stderr, "cnn: %s on %d GPUs (%s): one worker each\n", cmd, n, d->gpus);
    int rc = cnn_dist_launch_run(&l);
    free(wargv);
    return rc;
}
