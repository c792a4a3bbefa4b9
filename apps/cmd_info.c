/* cmd_info.c — `cnn info`: the per-layer table (name, op, output shape, parameters, FLOPs) and totals. */
#include "cli.h"

#include <stdio.h>

int cmd_info(int argc, char **argv) {
    cli_table t = {0};
    cli_common c = {0};
    cli_model mm = {0};
    int batch = 0;
    bool train = false;
    cli_add_model(&t, &mm, false);
    cli_add(&t, (cli_opt){"batch", 0, CLI_INT, "N", &batch, 0, 65536, NULL,
                          "also plan memory for this batch on --device (0 = skip)"});
    cli_add(&t, (cli_opt){"train", 0, CLI_FLAG, NULL, &train, 0, 0, NULL, "plan memory for training (with --batch)"});
    cli_add_common(&t, &c);
    int rc = cli_parse(&t, "info", "--model M [--num-classes N] [--stem imagenet|cifar] [--input-size H[xW]] [--batch N]",
                       "Print every layer with its output shape (C x H x W per image), trainable parameters and "
                       "forward FLOPs per image, then the totals.",
                       argc, argv);
    if (rc >= 0) return rc;
    cnn_model_opts mo;
    int h, w;
    if ((rc = cli_model_opts("info", &t, &mm, 1000, &mo, &h, &w)) >= 0) return rc;
    cnn_net *net;
    cnn_status st = cnn_zoo_build(&mo, h, w, &net);
    if (st != CNN_OK) return cli_fail(st);
    printf("%-4s %-28s %-16s %-18s %12s %12s\n", "#", "layer", "op", "output (CxHxW)", "params", "MFLOPs");
    int64_t params = 0, flops = 0;
    for (int i = 0; i < net->n_nodes; i++) {
        const cnn_node *nd = &net->nodes[i];
        char shape[48];
        snprintf(shape, sizeof shape, "%dx%dx%d", nd->c, nd->h, nd->w);
        int64_t p = cnn_node_params(net, i), f = cnn_node_flops(net, i);
        params += p;
        flops += f;
        printf("%-4d %-28s %-16s %-18s %12lld %12.2f\n", i, nd->name, cnn_op_name(nd->op), shape, (long long)p,
               (double)f / 1e6);
    }
    int64_t buffers = 0;
    for (int i = 0; i < net->n_params; i++)
        if (net->params[i].kind == CNN_PARAM_BUFFER) buffers += net->params[i].count;
    printf("\n%s: %d layers, %d state_dict tensors, %lld trainable parameters, %lld buffer values, %.3f GFLOPs per "
           "%dx%d image (forward)\n",
           net->arch, net->n_nodes, net->n_params, (long long)params, (long long)buffers, (double)flops / 1e9, h, w);
    cnn_net_free(net);
    if (batch > 0) {
        cnn_backend *be = NULL;
        cnn_model *m = NULL;
        if ((rc = cli_backend(&c, &be)) >= 0) return rc;
        st = cnn_model_create(&mo, be, h, w, batch, train, &m);
        if (st == CNN_OK)
            printf("memory on %s for batch %d (%s): %.1f MiB planned (parameters, %sactivations, workspace)\n",
                   be->name, batch, train ? "training" : "inference", cnn_model_device_bytes(m) / 1048576.0,
                   train ? "gradients, " : "");
        rc = st == CNN_OK ? CLI_EXIT_OK : cli_fail(st);
        cnn_model_free(m);
        cnn_backend_destroy(be);
        return rc;
    }
    return CLI_EXIT_OK;
}
