/* zoo.c — torchvision's ResNet and VGG families, built node by node with torchvision's module names, so the
 * parameter table is exactly the state_dict (names, shapes, order) of torchvision.models.<arch>().
 *
 * ResNet (He et al. 2015, torchvision's "v1.5": the stride sits on the 3x3 conv of a bottleneck):
 *   conv1 7x7/2 (or 3x3/1 with the CIFAR stem) - bn1 - relu - maxpool 3x3/2 (not with the CIFAR stem)
 *   layer1..4 of BasicBlocks (18, 34) or Bottlenecks (50, 101, 152), avgpool to 1x1, fc.
 * VGG (Simonyan & Zisserman 2014): features (conv3x3+bias [+bn] + relu, max-pools), adaptive avgpool 7x7,
 *   classifier = Linear 25088->4096, ReLU, Dropout, Linear 4096->4096, ReLU, Dropout, Linear 4096->classes.
 */
#include "cnn/net.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct resnet_cfg {
    const char *name;
    bool bottleneck;
    int blocks[4];
} resnet_cfg;

static const resnet_cfg resnets[] = {
    {"resnet18", false, {2, 2, 2, 2}},   {"resnet34", false, {3, 4, 6, 3}},  {"resnet50", true, {3, 4, 6, 3}},
    {"resnet101", true, {3, 4, 23, 3}}, {"resnet152", true, {3, 8, 36, 3}},
};

/* VGG feature configurations: channel counts, 0 = max-pool. */
typedef struct vgg_cfg {
    const char *name;
    int layers[21];
    int n;
} vgg_cfg;

static const vgg_cfg vggs[] = {
    {"vgg11", {64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0}, 13},
    {"vgg13", {64, 64, 0, 128, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0}, 15},
    {"vgg16", {64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0}, 18},
    {"vgg19", {64, 64, 0, 128, 128, 0, 256, 256, 256, 256, 0, 512, 512, 512, 512, 0, 512, 512, 512, 512, 0}, 21},
};

const char *cnn_zoo_names(void) {
    return "resnet18 resnet34 resnet50 resnet101 resnet152 vgg11 vgg13 vgg16 vgg19 vgg11_bn vgg13_bn vgg16_bn "
           "vgg19_bn";
}

#define NAME(buf, ...) (snprintf(buf, sizeof buf, __VA_ARGS__), buf)

/* conv (no bias) + bn [+ relu], returning the last node */
static int conv_bn(cnn_net *net, const char *prefix, const char *conv, const char *bn, int in, int k, int r,
                   int stride, int pad, const char *relu) {
    char nm[2 * CNN_NAME_MAX];
    int x = cnn_net_conv(net, NAME(nm, "%s%s", prefix, conv), in, k, r, stride, pad, false);
    x = cnn_net_bn(net, NAME(nm, "%s%s", prefix, bn), x);
    if (relu) x = cnn_net_relu(net, NAME(nm, "%s%s", prefix, relu), x);
    return x;
}

static int resnet_block(cnn_net *net, const resnet_cfg *cfg, int stage, int idx, int in, int planes, int stride) {
    char pre[CNN_NAME_MAX], nm[2 * CNN_NAME_MAX];
    snprintf(pre, sizeof pre, "layer%d.%d.", stage, idx);
    int in_c = in < 0 ? net->in_c : net->nodes[in].c;
    int expansion = cfg->bottleneck ? 4 : 1;
    int x;
    if (cfg->bottleneck) {
        x = conv_bn(net, pre, "conv1", "bn1", in, planes, 1, 1, 0, "relu1");
        x = conv_bn(net, pre, "conv2", "bn2", x, planes, 3, stride, 1, "relu2");
        x = conv_bn(net, pre, "conv3", "bn3", x, planes * 4, 1, 1, 0, NULL);
    } else {
        x = conv_bn(net, pre, "conv1", "bn1", in, planes, 3, stride, 1, "relu1");
        x = conv_bn(net, pre, "conv2", "bn2", x, planes, 3, 1, 1, NULL);
    }
    int identity = in;
    if (stride != 1 || in_c != planes * expansion)
        identity = conv_bn(net, pre, "downsample.0", "downsample.1", in, planes * expansion, 1, stride, 0, NULL);
    x = cnn_net_add(net, NAME(nm, "%sadd", pre), x, identity);
    return cnn_net_relu(net, NAME(nm, "%srelu", pre), x);
}

static void build_resnet(cnn_net *net, const resnet_cfg *cfg, const cnn_model_opts *o) {
    int x;
    if (o->stem == CNN_STEM_CIFAR) {
        x = conv_bn(net, "", "conv1", "bn1", -1, 64, 3, 1, 1, "relu");
    } else {
        x = conv_bn(net, "", "conv1", "bn1", -1, 64, 7, 2, 3, "relu");
        x = cnn_net_maxpool(net, "maxpool", x, 3, 2, 1);
    }
    static const int planes[4] = {64, 128, 256, 512};
    for (int s = 0; s < 4; s++)
        for (int b = 0; b < cfg->blocks[s]; b++)
            x = resnet_block(net, cfg, s + 1, b, x, planes[s], (s > 0 && b == 0) ? 2 : 1);
    x = cnn_net_adaptive_avgpool(net, "avgpool", x, 1, 1);
    x = cnn_net_flatten(net, "flatten", x);
    net->output = cnn_net_linear(net, "fc", x, o->num_classes, CNN_INIT_UNIFORM_FAN_IN, CNN_INIT_UNIFORM_FAN_IN);
}

static void build_vgg(cnn_net *net, const vgg_cfg *cfg, bool bn, const cnn_model_opts *o) {
    char nm[2 * CNN_NAME_MAX];
    int x = -1, i = 0;
    for (int l = 0; l < cfg->n; l++) {
        if (cfg->layers[l] == 0) {
            x = cnn_net_maxpool(net, NAME(nm, "features.%d", i++), x, 2, 2, 0);
            continue;
        }
        x = cnn_net_conv(net, NAME(nm, "features.%d", i++), x, cfg->layers[l], 3, 1, 1, true);
        if (bn) x = cnn_net_bn(net, NAME(nm, "features.%d", i++), x);
        x = cnn_net_relu(net, NAME(nm, "features.%d", i++), x);
    }
    x = cnn_net_adaptive_avgpool(net, "avgpool", x, 7, 7);
    x = cnn_net_flatten(net, "flatten", x);
    x = cnn_net_linear(net, "classifier.0", x, 4096, CNN_INIT_NORMAL_001, CNN_INIT_ZEROS);
    x = cnn_net_relu(net, "classifier.1", x);
    x = cnn_net_dropout(net, "classifier.2", x, o->dropout);
    x = cnn_net_linear(net, "classifier.3", x, 4096, CNN_INIT_NORMAL_001, CNN_INIT_ZEROS);
    x = cnn_net_relu(net, "classifier.4", x);
    x = cnn_net_dropout(net, "classifier.5", x, o->dropout);
    net->output = cnn_net_linear(net, "classifier.6", x, o->num_classes, CNN_INIT_NORMAL_001, CNN_INIT_ZEROS);
}

cnn_status cnn_zoo_build(const cnn_model_opts *o, int in_h, int in_w, cnn_net **out) {
    *out = NULL;
    if (!o->arch) return cnn_fail(CNN_E_INVALID, "no model named (--model); known: %s", cnn_zoo_names());
    if (o->num_classes < 1 || o->num_classes > 1000000)
        return cnn_fail(CNN_E_INVALID, "--num-classes %d out of range [1, 1000000]", o->num_classes);
    if (in_h < 1 || in_w < 1 || in_h > 8192 || in_w > 8192)
        return cnn_fail(CNN_E_INVALID, "input size %dx%d out of range [1, 8192]", in_h, in_w);
    if (!(o->dropout >= 0.0f && o->dropout < 1.0f))
        return cnn_fail(CNN_E_INVALID, "dropout %g out of range [0, 1)", (double)o->dropout);
    const resnet_cfg *rc = NULL;
    const vgg_cfg *vc = NULL;
    bool bn = false;
    for (size_t i = 0; i < sizeof resnets / sizeof resnets[0]; i++)
        if (strcmp(o->arch, resnets[i].name) == 0) rc = &resnets[i];
    for (size_t i = 0; i < sizeof vggs / sizeof vggs[0]; i++) {
        size_t n = strlen(vggs[i].name);
        if (strcmp(o->arch, vggs[i].name) == 0) vc = &vggs[i];
        if (strncmp(o->arch, vggs[i].name, n) == 0 && strcmp(o->arch + n, "_bn") == 0) vc = &vggs[i], bn = true;
    }
    if (!rc && !vc) return cnn_fail(CNN_E_INVALID, "unknown model '%s'; known: %s", o->arch, cnn_zoo_names());
    if (vc && o->stem == CNN_STEM_CIFAR)
        return cnn_fail(CNN_E_INVALID, "--stem cifar applies to ResNets only, not %s", o->arch);

    cnn_net *net = calloc(1, sizeof *net);
    if (!net) return cnn_fail(CNN_E_OOM, "out of host memory for the network");
    /* room for the largest network of the zoo (ResNet-152: 515 nodes, 932 tensors), so the builders never grow
     * these tables: a failure to grow them could only abort (net.c) */
    net->nodes = malloc(1024 * sizeof *net->nodes);
    net->params = malloc(1024 * sizeof *net->params);
    if (!net->nodes || !net->params) {
        cnn_net_free(net);
        return cnn_fail(CNN_E_OOM, "out of host memory for the network");
    }
    net->cap_nodes = net->cap_params = 1024;
    snprintf(net->arch, sizeof net->arch, "%s", o->arch);
    net->num_classes = o->num_classes;
    net->stem = o->stem;
    net->in_c = o->in_channels > 0 ? o->in_channels : 3;
    net->in_h = in_h;
    net->in_w = in_w;
    if (rc) build_resnet(net, rc, o);
    else build_vgg(net, vc, bn, o);
    cnn_status st = cnn_net_check(net);
    if (st != CNN_OK) {
        cnn_net_free(net);
        return st;
    }
    *out = net;
    return CNN_OK;
}
