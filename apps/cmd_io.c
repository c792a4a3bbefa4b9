/* cmd_io.c — `cnn infer` and `cnn grad`: the scriptable, file-in/file-out interface tests rely on.
 *
 *   infer: X.safetensors {"input": F32 (N, 3, H, W)} -> Y.safetensors {"logits": F32 (N, classes)}   (eval mode)
 *   grad:  X + L.safetensors {"labels": I64 (N,)}    -> G.safetensors {"loss": F32 [], <param>: F32 ...}
 * Outputs are written atomically: on any error no output file appears.
 */
#include "cli.h"
#include "cnn/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Read the float images of X (any float dtype) into a float32 NCHW array. */
static cnn_status read_input(const char *path, float **out, int *n, int *h, int *w) {
    cnn_st_file f;
    CNN_TRY(cnn_st_open(path, &f));
    const cnn_st_entry *e = cnn_st_find(&f, "input");
    char b[96];
    cnn_status st = CNN_OK;
    if (!e) st = cnn_fail(CNN_E_MISMATCH, "%s: no tensor named \"input\"", path);
    else if (e->ndim != 4 || e->shape[1] != 3 || e->shape[0] < 1 || e->shape[2] < 1 || e->shape[3] < 1 ||
             e->shape[0] > (1 << 24) || e->shape[2] > 8192 || e->shape[3] > 8192)
        st = cnn_fail(CNN_E_MISMATCH, "%s: \"input\" has shape %s, expected (N, 3, H, W)", path,
                      cnn_shape_str(e->shape, e->ndim, b, sizeof b));
    else if (e->dtype != CNN_DTYPE_F32 && e->dtype != CNN_DTYPE_F16 && e->dtype != CNN_DTYPE_BF16)
        st = cnn_fail(CNN_E_MISMATCH, "%s: \"input\" has dtype %s, expected F32", path, cnn_dtype_name(e->dtype));
    if (st == CNN_OK) {
        size_t count = (size_t)e->shape[0] * 3 * e->shape[2] * e->shape[3];
        *out = cnn_malloc(count * sizeof(float), "input images");
        if (!*out) st = CNN_E_OOM;
        else cnn_convert_to_f32(*out, cnn_st_tensor_data(&f, e), e->dtype, count);
        *n = (int)e->shape[0];
        *h = (int)e->shape[2];
        *w = (int)e->shape[3];
    }
    cnn_st_free(&f);
    return st;
}

static cnn_status read_labels(const char *path, int n, int64_t **out) {
    cnn_st_file f;
    CNN_TRY(cnn_st_open(path, &f));
    const cnn_st_entry *e = cnn_st_find(&f, "labels");
    char b[96];
    cnn_status st = CNN_OK;
    if (!e) st = cnn_fail(CNN_E_MISMATCH, "%s: no tensor named \"labels\"", path);
    else if (e->dtype != CNN_DTYPE_I64 || e->ndim != 1 || e->shape[0] != n)
        st = cnn_fail(CNN_E_MISMATCH, "%s: \"labels\" is %s %s, expected I64 (%d,)", path, cnn_dtype_name(e->dtype),
                      cnn_shape_str(e->shape, e->ndim, b, sizeof b), n);
    if (st == CNN_OK) {
        *out = cnn_malloc((size_t)n * sizeof(int64_t), "labels");
        if (!*out) st = CNN_E_OOM;
        else memcpy(*out, cnn_st_tensor_data(&f, e), (size_t)n * sizeof(int64_t));
    }
    cnn_st_free(&f);
    return st;
}

int cmd_infer(int argc, char **argv) {
    cli_table t = {0};
    cli_common c = {0};
    cli_model mm = {0};
    const char *input = NULL, *output = NULL;
    int batch = 64;
    cli_pictures pic = {.format = "text", .on_bad = "fail"};
    cli_add_model(&t, &mm, true);
    cli_add(&t, (cli_opt){"input", 0, CLI_STR, "X", &input, 0, 0, NULL,
                          "X.safetensors with float32 \"input\" (N, 3, H, W), or JPEG/PNG files and folders "
                          "(comma-separated)"});
    cli_add(&t, (cli_opt){"output", 0, CLI_STR, "Y.safetensors", &output, 0, 0, NULL, "receives float32 \"logits\" (N, classes)"});
    cli_add(&t, (cli_opt){"batch", 0, CLI_INT, "B", &batch, 1, 65536, NULL, "images per forward pass"});
    cli_add(&t, (cli_opt){"format", 'o', CLI_CHOICE, NULL, &pic.format, 0, 0, "text|json|csv",
                          "pictures: how the top-5 classes per image are printed"});
    cli_add(&t, (cli_opt){"classes", 0, CLI_STR, "FILE", &pic.classes, 0, 0, NULL,
                          "pictures: class names, one per line (default: ImageNet's for 1000 classes)"});
    cli_add(&t, (cli_opt){"resize", 0, CLI_INT, "N", &pic.resize, 0, 65536, NULL,
                          "pictures: Resize(N) before CenterCrop(input size) (0 = input size * 256/224)"});
    cli_add(&t, (cli_opt){"mean", 0, CLI_STR, "M[,M,M]", &pic.mean, 0, 0, NULL, "pictures: normalisation mean (default ImageNet's)"});
    cli_add(&t, (cli_opt){"std", 0, CLI_STR, "S[,S,S]", &pic.std, 0, 0, NULL, "pictures: normalisation std (default ImageNet's)"});
    cli_add(&t, (cli_opt){"save-input", 0, CLI_STR, "X.safetensors", &pic.save_input, 0, 0, NULL,
                          "pictures: also write the prepared input tensor (what the model saw)"});
    cli_add(&t, (cli_opt){"on-bad-image", 0, CLI_CHOICE, NULL, &pic.on_bad, 0, 0, "fail|skip",
                          "pictures: an undecodable image stops the run, or is reported and skipped"});
    cli_add_common(&t, &c);
    int rc = cli_parse(&t, "infer", "--model M [--weights W] --input X.safetensors --output Y.safetensors | --input PICTURES",
                       "Run the model in eval mode (BatchNorm running statistics, no dropout) on the images of X and "
                       "write their logits to Y; or on pictures (JPEG, PNG; folders searched recursively), prepared as "
                       "torchvision's Resize + CenterCrop + ToTensor + Normalize, and print each one's top-5 classes.",
                       argc, argv);
    if (rc >= 0) return rc;
    if (!input) return cli_usage_error("infer", "--input is required");
    cnn_model_opts mo;
    int h, w;
    if ((rc = cli_model_opts("infer", &t, &mm, 1000, &mo, &h, &w)) >= 0) return rc;
    if (cli_is_pictures(input)) {
        pic.input = input;
        pic.output = output;
        pic.weights = mm.weights;
        pic.batch = batch;
        pic.h = h;
        pic.w = w;
        pic.mo = &mo;
        pic.common = &c;
        return cli_infer_pictures(&pic);
    }
    if (!output) return cli_usage_error("infer", "--output is required with a safetensors --input");

    float *x = NULL, *logits = NULL;
    int n = 0;
    cnn_backend *be = NULL;
    cnn_model *m = NULL;
    cnn_status st = read_input(input, &x, &n, &h, &w);
    if (st == CNN_OK && cli_seen(&t, "input-size")) {
        int hh, ww;
        cli_model_opts("infer", &t, &mm, 1000, &mo, &hh, &ww);
        if (hh != h || ww != w)
            st = cnn_fail(CNN_E_INVALID, "--input-size %dx%d disagrees with %s (%dx%d)", hh, ww, input, h, w);
    }
    if (st != CNN_OK) {
        free(x);
        return cli_fail(st);
    }
    double t_start = cnn_now();
    if ((rc = cli_backend(&c, &be)) >= 0) {
        free(x);
        return rc;
    }
    double t_backend = cnn_now();
    int b = n < batch ? n : batch;
    st = cnn_model_create(&mo, be, h, w, b, false, &m);
    if (st == CNN_OK) cnn_model_set_allow_nonfinite(m, mm.allow_nonfinite);
    if (st == CNN_OK && mm.weights) st = cnn_model_load(m, mm.weights);
    double t_model = cnn_now(), t_first = 0;
    int classes = mo.num_classes;
    if (st == CNN_OK) {
        logits = cnn_malloc((size_t)n * classes * sizeof(float), "logits");
        if (!logits) st = CNN_E_OOM;
    }
    for (int s = 0; s < n && st == CNN_OK; s += b) {
        int k = n - s < b ? n - s : b;
        st = cnn_model_upload_input(m, x + (size_t)s * 3 * h * w, k);
        if (st == CNN_OK) st = cnn_model_forward(m, k, CNN_MODE_EVAL, 0);
        if (st == CNN_OK) st = cnn_model_download_logits(m, k, logits + (size_t)s * classes);
        if (s == 0) t_first = cnn_now();
    }
    if (st == CNN_OK)
        cnn_log(2, "cnn: infer: backend %.3f s, model %.3f s, first batch (kernel compilation or cache "
                "loads included) %.3f s, all %d images %.3f s", t_backend - t_start, t_model - t_backend,
                t_first - t_model, n, cnn_now() - t_start);
    if (st == CNN_OK) {
        cnn_st_item it = {.name = "logits", .dtype = CNN_DTYPE_F32, .ndim = 2, .shape = {n, classes}, .data = logits};
        st = cnn_st_write(output, &it, 1, NULL, 0);
    }
    rc = st == CNN_OK ? CLI_EXIT_OK : cli_fail(st);
    cnn_model_free(m);
    cnn_backend_destroy(be);
    free(x);
    free(logits);
    return rc;
}

int cmd_grad(int argc, char **argv) {
    cli_table t = {0};
    cli_common c = {0};
    cli_model mm = {0};
    const char *input = NULL, *labels_path = NULL, *output = NULL;
    float smoothing = 0.0f;
    cli_add_model(&t, &mm, true);
    cli_add(&t, (cli_opt){"input", 0, CLI_STR, "X.safetensors", &input, 0, 0, NULL, "float32 \"input\" (N, 3, H, W)"});
    cli_add(&t, (cli_opt){"labels", 0, CLI_STR, "L.safetensors", &labels_path, 0, 0, NULL, "int64 \"labels\" (N,)"});
    cli_add(&t, (cli_opt){"output", 0, CLI_STR, "G.safetensors", &output, 0, 0, NULL,
                          "receives \"loss\" and every parameter's gradient"});
    cli_add(&t, (cli_opt){"label-smoothing", 0, CLI_FLOAT, "E", &smoothing, 0, 1, NULL, "cross-entropy label smoothing"});
    cli_add_common(&t, &c);
    int rc = cli_parse(&t, "grad", "--model M [--weights W] --input X --labels L --output G",
                       "One training-mode forward (batch statistics; dropout with --dropout, seed from --seed) and "
                       "backward with softmax cross-entropy; writes the mean loss and the gradient of every "
                       "trainable parameter under its torchvision name and shape.",
                       argc, argv);
    if (rc >= 0) return rc;
    if (!input || !labels_path || !output) return cli_usage_error("grad", "--input, --labels and --output are required");
    cnn_model_opts mo;
    int h, w, n = 0;
    if ((rc = cli_model_opts("grad", &t, &mm, 1000, &mo, &h, &w)) >= 0) return rc;
    float *x = NULL, *host = NULL;
    int64_t *labels = NULL;
    cnn_st_item *items = NULL;
    cnn_backend *be = NULL;
    cnn_model *m = NULL;
    cnn_status st = read_input(input, &x, &n, &h, &w);
    if (st == CNN_OK) st = read_labels(labels_path, n, &labels);
    if (st != CNN_OK) {
        free(x);
        free(labels);
        return cli_fail(st);
    }
    if ((rc = cli_backend(&c, &be)) >= 0) {
        free(x);
        free(labels);
        return rc;
    }
    st = cnn_model_create(&mo, be, h, w, n, true, &m);
    if (st == CNN_OK) cnn_model_set_allow_nonfinite(m, mm.allow_nonfinite);
    if (st == CNN_OK && mm.weights) st = cnn_model_load(m, mm.weights);
    if (st == CNN_OK) st = cnn_model_upload_input(m, x, n);
    if (st == CNN_OK) st = cnn_model_forward(m, n, CNN_MODE_TRAIN, (uint64_t)mm.seed);
    float loss = 0;
    if (st == CNN_OK) st = cnn_model_backward(m, n, labels, smoothing, &loss);
    const cnn_net *net = st == CNN_OK ? cnn_model_net(m) : NULL;
    int n_items = 0;
    if (net) {
        items = calloc((size_t)net->n_params + 1, sizeof *items);
        host = malloc(((size_t)net->n_trainable + 1) * sizeof(float));
        if (!items || !host) st = cnn_fail(CNN_E_OOM, "out of host memory for gradients");
    }
    if (st == CNN_OK) {
        host[0] = loss;
        items[n_items++] = (cnn_st_item){.name = "loss", .dtype = CNN_DTYPE_F32, .ndim = 0, .data = host};
        size_t off = 1;
        for (int i = 0; i < net->n_params && st == CNN_OK; i++) {
            const cnn_param *p = &net->params[i];
            if (p->kind != CNN_PARAM_TRAINABLE) continue;
            st = cnn_model_get_grad(m, i, host + off);
            cnn_st_item *it = &items[n_items++];
            it->name = p->name;
            it->dtype = CNN_DTYPE_F32;
            it->ndim = p->ndim;
            for (int d = 0; d < p->ndim; d++) it->shape[d] = p->shape[d];
            it->data = host + off;
            off += (size_t)p->count;
        }
    }
    if (st == CNN_OK) st = cnn_st_write(output, items, n_items, NULL, 0);
    rc = st == CNN_OK ? CLI_EXIT_OK : cli_fail(st);
    cnn_model_free(m);
    cnn_backend_destroy(be);
    free(x);
    free(labels);
    free(items);
    free(host);
    return rc;
}
