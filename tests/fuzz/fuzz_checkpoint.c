/* fuzz_checkpoint.c — a checkpoint's metadata and tensor list (checkpoint.h) from any safetensors image: the
 * parse either gives values in their documented ranges or a one-line error; the tensor check runs against a tiny
 * net whose optimizer arrays fit in a corpus file, so complete valid checkpoints are reachable. */
#include "core/checkpoint.h"
#include "fuzz.h"

#include <stdlib.h>

static cnn_net *net;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    /* conv 3->2 1x1 (with bias), bn, relu, global pool, flatten, linear 2->3: 8 + 4 + 9 = 21 trainable floats */
    net = calloc(1, sizeof *net);
    snprintf(net->arch, sizeof net->arch, "tiny");
    net->num_classes = 3, net->in_c = 3, net->in_h = 4, net->in_w = 4;
    int x = cnn_net_conv(net, "conv", -1, 2, 1, 1, 0, true);
    x = cnn_net_bn(net, "bn", x);
    x = cnn_net_relu(net, "relu", x);
    x = cnn_net_adaptive_avgpool(net, "pool", x, 1, 1);
    x = cnn_net_flatten(net, "flat", x);
    net->output = cnn_net_linear(net, "fc", x, 3, CNN_INIT_UNIFORM_FAN_IN, CNN_INIT_UNIFORM_FAN_IN);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!net) LLVMFuzzerInitialize(NULL, NULL);
    cnn_st_file f;
    cnn_error_clear();
    cnn_status st = cnn_st_parse(data, size, &f);
    fuzz_check_status(st);
    if (st != CNN_OK) return 0;
    cnn_ckpt_meta meta;
    st = cnn_ckpt_meta_parse(&f, "ckpt", &meta);
    fuzz_check_status(st);
    if (st == CNN_OK) {
        REQUIRE(meta.step >= 0 && meta.step <= CNN_MAX_STEPS);
        REQUIRE(meta.loss_scale > 0 && meta.good_steps >= 0 && meta.good_steps <= 1000000000);
        REQUIRE(meta.options != NULL);
    }
    for (int n_opt = 0; n_opt <= 2; n_opt++) {
        st = cnn_ckpt_check_tensors(&f, "ckpt", net, n_opt);
        fuzz_check_status(st);
        if (st != CNN_OK) continue;
        for (int k = 0; k < n_opt; k++) {
            const cnn_st_entry *e = cnn_st_find(&f, cnn_ckpt_opt_name(n_opt, k));
            REQUIRE(e && e->dtype == CNN_DTYPE_F32 && e->ndim == 1 && e->shape[0] == net->n_trainable);
        }
        for (int e = 0; e < f.n_entries; e++)
            REQUIRE(cnn_net_find_param(net, f.entries[e].name) || strncmp(f.entries[e].name, "optimizer.", 10) == 0);
    }
    cnn_st_free(&f);
    return 0;
}
