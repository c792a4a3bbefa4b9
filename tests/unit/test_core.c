/* test_core.c — backend-independent core: Philox known answers, half-precision conversions, the arena
 * planner, the model zoo's structure against torchvision's (key counts, parameter counts, shapes), the
 * synthetic dataset, and batch invariance of the eval plan. */
#include "test.h"

#include "cnn/data.h"
#include "cnn/net.h"
#include "cnn/train.h"
#include "core/checkpoint.h"
#include "core/guard.h"
#include "core/model.h"
#include "core/plan.h"

static void test_philox(void) {
    /* Random123 known-answer vectors for philox4x32_10 */
    static const struct {
        uint32_t ctr[4], key[2], out[4];
    } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
         {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
         {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (int i = 0; i < 3; i++) {
        uint32_t out[4];
        uint64_t lo = kat[i].ctr[0] | (uint64_t)kat[i].ctr[1] << 32, hi = kat[i].ctr[2] | (uint64_t)kat[i].ctr[3] << 32;
        cnn_philox(kat[i].key[0] | (uint64_t)kat[i].key[1] << 32, hi, lo, out);
        char name[64];
        snprintf(name, sizeof name, "philox.kat%d", i);
        check(memcmp(out, kat[i].out, sizeof out) == 0, name, "got %08x %08x %08x %08x", out[0], out[1], out[2], out[3]);
    }
}

static void test_half(void) {
    /* exhaustive round trip of every finite half / bfloat16 value through float */
    int bad16 = 0, badbf = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = cnn_f16_to_f32((uint16_t)h);
        if (isnan(f)) continue;
        if (cnn_f32_to_f16(f) != h) bad16++;
        float g = cnn_bf16_to_f32((uint16_t)h);
        if (isnan(g)) continue;
        if (cnn_f32_to_bf16(g) != h) badbf++;
    }
    check(bad16 == 0, "half.f16_roundtrip", "%d mismatches", bad16);
    check(badbf == 0, "half.bf16_roundtrip", "%d mismatches", badbf);
    /* rounding to nearest even, overflow, subnormals */
    check(cnn_f32_to_f16(1.0f + 1.0f / 2048.0f) == 0x3c00, "half.f16_tie_even_down", NULL);
    check(cnn_f32_to_f16(1.0f + 3.0f / 2048.0f) == 0x3c02, "half.f16_tie_even_up", NULL);
    check(cnn_f32_to_f16(65520.0f) == 0x7c00 && cnn_f32_to_f16(65519.0f) == 0x7bff, "half.f16_overflow", NULL);
    check(cnn_f32_to_f16(5.9604645e-08f) == 0x0001 && cnn_f32_to_f16(2.9802322e-08f) == 0, "half.f16_subnormal", NULL);
    check(cnn_f32_to_bf16(1.0f + 1.0f / 256.0f) == 0x3f80 && cnn_f32_to_bf16(1.0f + 3.0f / 256.0f) == 0x3f82,
          "half.bf16_tie_even", NULL);
    check(isnan(cnn_bf16_to_f32(cnn_f32_to_bf16(NAN))) && isnan(cnn_f16_to_f32(cnn_f32_to_f16(NAN))), "half.nan_stays_nan",
          NULL);
}

static void test_plan(void) {
    /* random intervals: no two live-at-once buffers may overlap, and the arena is no larger than the sum */
    int fails = 0;
    for (int trial = 0; trial < 50; trial++) {
        cnn_interval iv[40];
        size_t sum = 0;
        for (int i = 0; i < 40; i++) {
            uint32_t r[4];
            cnn_philox(99, (uint64_t)trial, (uint64_t)i, r);
            iv[i].bytes = 1 + r[0] % 5000;
            iv[i].first = (int)(r[1] % 60);
            iv[i].last = iv[i].first + (int)(r[2] % 20);
            sum += (iv[i].bytes + 255) / 256 * 256;
        }
        size_t total = cnn_plan_arena(iv, 40, 256);
        if (total > sum) fails++;
        for (int a = 0; a < 40; a++) {
            if (iv[a].offset % 256 || iv[a].offset + iv[a].bytes > total) fails++;
            for (int b = a + 1; b < 40; b++) {
                bool time = !(iv[a].last < iv[b].first || iv[b].last < iv[a].first);
                bool mem = iv[a].offset < iv[b].offset + iv[b].bytes && iv[b].offset < iv[a].offset + iv[a].bytes;
                if (time && mem) fails++;
            }
        }
    }
    check(fails == 0, "plan.no_overlap", "%d violations", fails);
}

/* torchvision's numbers: len(state_dict()), sum of parameter numel (num_classes 1000, 224x224) */
static void test_zoo(void) {
    static const struct {
        const char *arch;
        int keys;
        int64_t params;
    } ref[] = {
        {"resnet18", 122, 11689512},   {"resnet34", 218, 21797672},   {"resnet50", 320, 25557032},
        {"resnet101", 626, 44549160},  {"resnet152", 932, 60192808},  {"vgg11", 22, 132863336},
        {"vgg13", 26, 133047848},      {"vgg16", 32, 138357544},      {"vgg19", 38, 143667240},
        {"vgg11_bn", 62, 132868840},   {"vgg13_bn", 76, 133053736},   {"vgg16_bn", 97, 138365992},
        {"vgg19_bn", 118, 143678248},
    };
    for (size_t i = 0; i < sizeof ref / sizeof ref[0]; i++) {
        cnn_model_opts o = cnn_model_opts_default();
        o.arch = ref[i].arch;
        cnn_net *net;
        cnn_status st = cnn_zoo_build(&o, 224, 224, &net);
        char name[64];
        snprintf(name, sizeof name, "zoo.%s", ref[i].arch);
        if (st != CNN_OK) {
            check(false, name, "build failed: %s", cnn_error_msg());
            continue;
        }
        int64_t params = 0;
        for (int p = 0; p < net->n_params; p++)
            if (net->params[p].kind == CNN_PARAM_TRAINABLE) params += net->params[p].count;
        const cnn_node *out = &net->nodes[net->output];
        check(net->n_params == ref[i].keys && params == ref[i].params && out->c == 1000, name,
              "%d keys (torchvision %d), %lld parameters (torchvision %lld)", net->n_params, ref[i].keys,
              (long long)params, (long long)ref[i].params);
        cnn_net_free(net);
    }
    /* names and shapes spot checks */
    cnn_model_opts o = cnn_model_opts_default();
    o.arch = "resnet50";
    cnn_net *net;
    if (cnn_zoo_build(&o, 224, 224, &net) == CNN_OK) {
        const cnn_param *a = cnn_net_find_param(net, "layer2.0.downsample.0.weight");
        const cnn_param *b = cnn_net_find_param(net, "layer4.2.bn3.num_batches_tracked");
        const cnn_param *c = cnn_net_find_param(net, "fc.weight");
        check(a && a->shape[0] == 512 && a->shape[1] == 256 && a->shape[2] == 1 && b && b->ndim == 0 && c &&
                  c->shape[1] == 2048 && strcmp(net->params[0].name, "conv1.weight") == 0,
              "zoo.resnet50_names", NULL);
        cnn_net_free(net);
    }
    o.arch = "vgg16_bn";
    if (cnn_zoo_build(&o, 224, 224, &net) == CNN_OK) {
        const cnn_param *a = cnn_net_find_param(net, "features.1.running_var");
        const cnn_param *b = cnn_net_find_param(net, "features.41.bias");
        const cnn_param *c = cnn_net_find_param(net, "classifier.0.weight");
        check(a && a->shape[0] == 64 && b && b->shape[0] == 512 && c && c->shape[1] == 25088, "zoo.vgg16_bn_names", NULL);
        cnn_net_free(net);
    }
    /* errors */
    o.arch = "resnet19";
    check(cnn_zoo_build(&o, 224, 224, &net) == CNN_E_INVALID && strstr(cnn_error_msg(), "resnet19"), "zoo.unknown_model",
          "%s", cnn_error_msg());
    o.arch = "vgg11";
    check(cnn_zoo_build(&o, 16, 16, &net) == CNN_E_INVALID, "zoo.input_too_small", "%s", cnn_error_msg());
    o.arch = "resnet18";
    o.stem = CNN_STEM_CIFAR;
    o.num_classes = 10;
    cnn_status st = cnn_zoo_build(&o, 32, 32, &net);
    check(st == CNN_OK && net->nodes[net->output].c == 10 && cnn_net_find_param(net, "conv1.weight")->shape[2] == 3,
          "zoo.cifar_stem", NULL);
    if (st == CNN_OK) {
        bool maxpool = false;
        for (int i = 0; i < net->n_nodes; i++) maxpool |= net->nodes[i].op == CNN_OP_MAXPOOL;
        check(!maxpool, "zoo.cifar_stem_no_maxpool", NULL);
        cnn_net_free(net);
    }
}

/* Eval mode (the fused plan) is per-image: the logits of a batch equal those of its images run one at a time.
 * (Agreement of the fused plan with PyTorch is tests/golden/test_zoo_infer.py.) */
static void test_eval_batch_invariance(cnn_backend *be) {
    cnn_model_opts o = cnn_model_opts_default();
    o.arch = "resnet18";
    o.num_classes = 7;
    cnn_model *m;
    cnn_status st = cnn_model_create(&o, be, 40, 36, 3, false, &m);
    if (st != CNN_OK) {
        check(false, "model.eval_batch_invariance", "create: %s", cnn_error_msg());
        return;
    }
    float x[3 * 3 * 40 * 36], all[21], one[7];
    fill_uniform(x, 3 * 3 * 40 * 36, 5, -2, 2);
    double err = 0;
    st = cnn_model_upload_input(m, x, 3);
    if (st == CNN_OK) st = cnn_model_forward(m, 3, CNN_MODE_EVAL, 0);
    if (st == CNN_OK) st = cnn_model_download_logits(m, 3, all);
    for (int i = 0; i < 3 && st == CNN_OK; i++) {
        st = cnn_model_upload_input(m, x + i * 3 * 40 * 36, 1);
        if (st == CNN_OK) st = cnn_model_forward(m, 1, CNN_MODE_EVAL, 0);
        if (st == CNN_OK) st = cnn_model_download_logits(m, 1, one);
        double d = rel_l2_f(one, all + 7 * i, 7);
        if (d > err) err = d;
    }
    check(st == CNN_OK && err < 1e-6, "model.eval_batch_invariance", "max rel-L2 %.3g %s", err,
          st == CNN_OK ? "" : cnn_error_msg());
    cnn_model_free(m);
}

/* A checkpoint's state (perf-log step 106): taken in one download per arena and converted on the writer's side, its
 * items equal the parameters as cnn_model_get_param gives them (OIHW filters); cnn_state_check passes a finite
 * state, and names the tensor and its torchvision index of a NaN in a filter, and of a negative running variance. */
static void test_state_check(cnn_backend *be) {
    cnn_model_opts o = cnn_model_opts_default();
    o.arch = "resnet18";
    o.num_classes = 5;
    cnn_model *m;
    if (cnn_model_create(&o, be, 20, 18, 3, false, &m) != CNN_OK) {
        check(false, "checkpoint.state_items", "create: %s", cnn_error_msg());
        return;
    }
    const cnn_net *net = cnn_model_net(m);
    int conv = -1, var = -1;
    for (int i = 0; i < net->n_params; i++) {
        const cnn_param *p = &net->params[i];
        if (conv < 0 && p->krsc && p->shape[1] > 1 && p->shape[2] > 1) conv = i;
        if (var < 0 && p->kind == CNN_PARAM_BUFFER && strstr(p->name, "running_var")) var = i;
    }
    cnn_st_item *items = calloc((size_t)(unsigned)net->n_params + 1, sizeof *items);
    float *got = malloc((size_t)net->n_trainable * sizeof *got), *conv_buf = NULL;
    cnn_state s;
    cnn_status st = conv >= 0 && var >= 0 ? cnn_state_alloc(m, 0, true, &s) : CNN_E_INVALID;
    if (st == CNN_OK) st = cnn_model_state_take(m, &s);
    if (st == CNN_OK) st = cnn_state_items(&s, items, &conv_buf);
    int mismatched = 0;
    for (int i = 0; i < net->n_params && st == CNN_OK; i++) {
        const cnn_param *p = &net->params[i];
        if (p->kind == CNN_PARAM_COUNTER) continue;
        st = cnn_model_get_param(m, i, got);
        mismatched += st == CNN_OK && memcmp(got, items[i].data, (size_t)p->count * sizeof(float)) != 0;
    }
    check(st == CNN_OK && mismatched == 0, "checkpoint.state_items", "%d of %d parameters differ%s%s", mismatched,
          net->n_params, st == CNN_OK ? "" : ": ", st == CNN_OK ? "" : cnn_error_msg());
    cnn_status ok = st == CNN_OK ? cnn_state_check(m, NULL, 0, &s, "ck") : st;
    check(ok == CNN_OK, "checkpoint.state_check_finite", "%s", ok == CNN_OK ? "" : cnn_error_msg());
    free(conv_buf);
    /* a NaN at OIHW index j of the filter, then a negative variance at index 2: each named, nothing else */
    const cnn_param *pc = &net->params[conv];
    int64_t j = pc->shape[2] * pc->shape[3] + 1; /* (0, 1, 0, 1): a different place in KRSC */
    struct { int param; int64_t index; float value; const char *name, *want; } cases[] = {
        {conv, j, NAN, "checkpoint.state_check_nan", "a non-finite value"},
        {var, 2, -0.5f, "checkpoint.state_check_negative_var", "a negative variance"},
    };
    for (int c = 0; c < 2 && st == CNN_OK; c++) {
        const cnn_param *p = &net->params[cases[c].param];
        st = cnn_model_get_param(m, cases[c].param, got);
        float keep = got[cases[c].index];
        got[cases[c].index] = cases[c].value;
        if (st == CNN_OK) st = cnn_model_set_param(m, cases[c].param, got);
        if (st == CNN_OK) st = cnn_model_state_take(m, &s); /* the same buffer again, as a training run does */
        cnn_status bad = st == CNN_OK ? cnn_state_check(m, NULL, 0, &s, "ck") : st;
        char want[256];
        snprintf(want, sizeof want, "ck not written: tensor \"%s\" holds %s", p->name, cases[c].want);
        char at[64];
        snprintf(at, sizeof at, "at index %lld)", (long long)cases[c].index);
        check(st == CNN_OK && bad == CNN_E_NONFINITE && strstr(cnn_error_msg(), want) && strstr(cnn_error_msg(), at),
              cases[c].name, "%s", cnn_error_msg());
        got[cases[c].index] = keep;
        if (st == CNN_OK) st = cnn_model_set_param(m, cases[c].param, got);
    }
    cnn_state_free(&s);
    free(got);
    free(items);
    cnn_model_free(m);
}

/* Synthetic data: deterministic, balanced-ish, all ten classes present. */
static void test_synthetic(void) {
    uint8_t a[3072], b[3072];
    int la = cnn_synthetic_sample(1, CNN_SPLIT_TRAIN, 17, a), lb = cnn_synthetic_sample(1, CNN_SPLIT_TRAIN, 17, b);
    check(la == lb && memcmp(a, b, sizeof a) == 0, "data.synthetic_deterministic", NULL);
    int counts[10] = {0};
    for (int i = 0; i < 2000; i++) counts[cnn_synthetic_sample(3, CNN_SPLIT_TEST, i, a)]++;
    int lo = 2000, hi = 0;
    for (int c = 0; c < 10; c++) {
        lo = counts[c] < lo ? counts[c] : lo;
        hi = counts[c] > hi ? counts[c] : hi;
    }
    check(lo > 120 && hi < 280, "data.synthetic_balanced", "class counts between %d and %d of 2000", lo, hi);
    int va = cnn_synthetic_sample(1, CNN_SPLIT_TRAIN, 18, b);
    (void)va;
    check(memcmp(a, b, sizeof a) != 0, "data.synthetic_varies", NULL);
}

/* Error messages stay one line whatever a file put in them (issue 30: tensor names with a newline or a terminal
 * escape reached stderr raw), also through cnn_error_prefix; long ones are cut, never mid-escape. */
static void test_messages(void) {
    cnn_fail(CNN_E_FORMAT, "name \"%s\"", "a\nb\x1b[31mc\x7f\xc2\x9b\xc3\xa9");
    check(strcmp(cnn_error_msg(), "name \"a\\x0Ab\\x1B[31mc\\x7F\\x9B\xc3\xa9\"") == 0, "status.message_escaped", "%s",
          cnn_error_msg());
    cnn_error_prefix(CNN_E_FORMAT, "file\rx");
    check(strncmp(cnn_error_msg(), "file\\x0Dx: name", 15) == 0, "status.prefix_escaped", "%s", cnn_error_msg());
    char big[3000];
    memset(big, '\n', sizeof big - 1);
    big[sizeof big - 1] = 0;
    cnn_fail(CNN_E_FORMAT, "%s", big);
    size_t n = strlen(cnn_error_msg());
    check(n > 0 && n < 1024 && n % 4 == 0 && !strchr(cnn_error_msg(), '\n'), "status.long_message_cut", "%zu bytes", n);
    cnn_error_clear();
}

/* The eval batch sizes the training loop compiles ahead (cnn_eval_batch_sizes, perf-log step 109) are those
 * cnn_evaluate_dist runs: the batch (clipped to the model's) and the remainder of this rank's share, none twice. */
static void test_eval_batch_sizes(cnn_backend *be) {
    cnn_model_opts o = cnn_model_opts_default();
    o.arch = "resnet18";
    o.num_classes = 5;
    cnn_model *m;
    if (cnn_model_create(&o, be, 20, 18, 512, false, &m) != CNN_OK) {
        check(false, "eval_batch_sizes", "create: %s", cnn_error_msg());
        return;
    }
    const struct {
        int64_t ds_n;
        int n, batch, world, rank, k, b0, b1;
    } cases[] = {
        {10000, 0, 512, 1, 0, 2, 512, 272}, /* Fashion-MNIST's test set at batch 512: 19 x 512 + 272 */
        {10000, 0, 1000, 1, 0, 2, 512, 272}, /* the batch clipped to the model's 512 */
        {1024, 0, 512, 1, 0, 1, 512, 0},    /* no remainder */
        {100, 0, 512, 1, 0, 1, 100, 0},     /* fewer images than a batch */
        {300, 200, 32, 1, 0, 2, 32, 8},     /* --eval-size 200 of 300 */
        {10000, 0, 512, 4, 3, 2, 512, 452}, /* rank 3 of 4: 2500 images, 4 x 512 + 452 */
        {2, 0, 8, 4, 3, 0, 0, 0},           /* rank 3 of 4 has none of 2 images */
        {100, 0, 0, 1, 0, 0, 0, 0},         /* no batch: none */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cnn_dist_ctx d = {.rank = cases[i].rank, .world = cases[i].world};
        int out[2] = {-1, -1};
        int k = cnn_eval_batch_sizes(m, cases[i].ds_n, cases[i].n, cases[i].batch, cases[i].world > 1 ? &d : NULL, out);
        check(k == cases[i].k && (k < 1 || out[0] == cases[i].b0) && (k < 2 || out[1] == cases[i].b1),
              "eval_batch_sizes", "case %zu: %d sizes %d %d, expected %d: %d %d", i, k, out[0], out[1], cases[i].k,
              cases[i].b0, cases[i].b1);
    }
    cnn_model_free(m);
}

int main(void) {
    test_messages();
    test_philox();
    test_half();
    test_plan();
    test_zoo();
    test_synthetic();
    cnn_backend *be;
    if (cnn_cpu_backend_create(2, &be) == CNN_OK) {
        test_eval_batch_invariance(be);
        test_state_check(be);
        test_eval_batch_sizes(be);
        cnn_backend_destroy(be);
    } else {
        check(false, "cpu_backend.create", "%s", cnn_error_msg());
    }
    return test_finish();
}
