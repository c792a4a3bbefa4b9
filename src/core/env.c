/* env.c — every environment variable the library reads, read once per process (the first cnn_env_get) into one
 * struct. Nothing else in src/ calls getenv: a new variable is a field here, a line in docs/CLI.md, and a user's or
 * an operator's need (an experiment is measured with CNN_CONV_SKIP or two trees, never with a switch of its own). */
#include "cnn/cnn.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cnn_env env;
static pthread_once_t env_once = PTHREAD_ONCE_INIT;

static void copy(char *dst, size_t cap, const char *name) {
    const char *v = getenv(name);
    snprintf(dst, cap, "%s", v ? v : "");
}

static void read_env(void) {
    env.cache_dir_set = getenv("CNN_CACHE_DIR") != NULL;
    copy(env.cache_dir, sizeof env.cache_dir, "CNN_CACHE_DIR");
    copy(env.xdg_cache_home, sizeof env.xdg_cache_home, "XDG_CACHE_HOME");
    copy(env.home, sizeof env.home, "HOME");
    copy(env.cuda_home, sizeof env.cuda_home, "CUDA_HOME");
    const char *t = getenv("CNN_COMPILE_THREADS");
    env.compile_threads = t && atoi(t) > 0 ? atoi(t) : 0;
    const char *d = getenv("CNN_SYNC_DEBUG");
    env.sync_debug = d && d[0] && strcmp(d, "0") != 0;
    copy(env.conv_skip, sizeof env.conv_skip, "CNN_CONV_SKIP");
    copy(env.cpu_isa, sizeof env.cpu_isa, "CNN_CPU_ISA");
    copy(env.rank, sizeof env.rank, "RANK");
    copy(env.world_size, sizeof env.world_size, "WORLD_SIZE");
    copy(env.local_rank, sizeof env.local_rank, "LOCAL_RANK");
    copy(env.master_addr, sizeof env.master_addr, "MASTER_ADDR");
    copy(env.master_port, sizeof env.master_port, "MASTER_PORT");
    copy(env.cuda_visible, sizeof env.cuda_visible, "CUDA_VISIBLE_DEVICES");
    const char *as = getenv("TORCHELASTIC_USE_AGENT_STORE");
    env.agent_store = as && (strcmp(as, "True") == 0 || strcmp(as, "true") == 0 || strcmp(as, "1") == 0);
}

const cnn_env *cnn_env_get(void) {
    pthread_once(&env_once, read_env);
    return &env;
}
