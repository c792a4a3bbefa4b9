/* cli_data.c — the data options `cnn train` and `cnn eval` share: the source, its normalisation and
 * augmentation, and how folder datasets are decoded. */
#include "cli.h"

#include <string.h>

void cli_add_data(cli_table *t, cli_data *d, bool train) {
    memset(d, 0, sizeof *d);
    d->data = "synthetic";
    d->on_bad = "fail";
    d->decode = "auto";
    d->pad = -1;
    cli_add(t, (cli_opt){"data", 0, CLI_STR, "D", &d->data, 0, 0, NULL,
                         "synthetic | cifar10:DIR | cifar100:DIR | mnist:DIR | fashion-mnist[:DIR] | folder:DIR | "
                         "tensors:FILE.safetensors"});
    cli_add(t, (cli_opt){"mean", 0, CLI_STR, "M[,M,M]", &d->mean, 0, 0, NULL,
                         "normalisation mean per channel (default: the dataset's)"});
    cli_add(t, (cli_opt){"std", 0, CLI_STR, "S[,S,S]", &d->std, 0, 0, NULL,
                         "normalisation std per channel (default: the dataset's)"});
    cli_add(t, (cli_opt){"coarse-labels", 0, CLI_FLAG, NULL, &d->coarse, 0, 0, NULL, "cifar100: the 20 coarse classes"});
    cli_add(t, (cli_opt){"holdout", 0, CLI_FLOAT, "F", &d->holdout, 0, 0.99, NULL,
                         "folder:DIR without train/ and val/: the fraction of each class used as the test split "
                         "(0: every image in both)"});
    cli_add(t, (cli_opt){"resize", 0, CLI_INT, "N", &d->resize, 0, 65536, NULL,
                         "folder evaluation: Resize(N) before CenterCrop(input size) (0 = input size * 256/224)"});
    if (train) {
        cli_add(t, (cli_opt){"crop-scale", 0, CLI_FLOAT, "S", &d->crop_scale, 0, 1, NULL,
                             "folder training: RandomResizedCrop's smallest area fraction (0 = 0.08)"});
        cli_add(t, (cli_opt){"pad", 0, CLI_INT, "P", &d->pad, -1, 64, NULL,
                             "small images: random-crop padding (-1 = the dataset's: 4 CIFAR, 2 MNIST)"});
    }
    cli_add(t, (cli_opt){"on-bad-image", 0, CLI_CHOICE, NULL, &d->on_bad, 0, 0, "fail|skip",
                         "folder data: an undecodable image stops the run, or is replaced by the next good one and "
                         "counted"});
    cli_add(t, (cli_opt){"workers", 0, CLI_INT, "N", &d->workers, 0, 256, NULL,
                         "folder data: decode threads (0 = one per CPU)"});
    cli_add(t, (cli_opt){"decode", 0, CLI_CHOICE, NULL, &d->decode, 0, 0, "auto|cpu|gpu|mixed",
                         "folder data: JPEGs decoded in batches on the GPU (nvJPEG, loaded at run time), on the CPU, "
                         "by both (mixed: the decode threads take the share that keeps both busy), or by both when "
                         "nvJPEG loads and fewer than 16 decode threads run, else on the CPU (auto; with "
                         "--deterministic the GPU takes every JPEG it can)"});
}

cnn_status cli_load_data(const cli_data *d, cnn_split split, int limit, uint64_t seed, int classes, int h, int w,
                         cnn_dataset *ds) {
    cnn_data_opts o = {.source = d->data, .split = split, .limit = limit, .seed = seed, .num_classes = classes,
                       .coarse = d->coarse,
                       .holdout = d->holdout, .image_h = h, .image_w = w, .resize = d->resize,
                       .scale_lo = d->crop_scale, .on_bad = strcmp(d->on_bad, "skip") == 0 ? CNN_BAD_IMAGE_SKIP
                                                                                         : CNN_BAD_IMAGE_FAIL,
                       .threads = d->workers,
                       .decode = strcmp(d->decode, "cpu") == 0     ? CNN_DECODE_CPU
                                 : strcmp(d->decode, "gpu") == 0   ? CNN_DECODE_GPU
                                 : strcmp(d->decode, "mixed") == 0 ? CNN_DECODE_MIXED
                                 : d->deterministic                ? CNN_DECODE_AUTO_FIXED
                                                                   : CNN_DECODE_AUTO};
    CNN_TRY(cnn_dataset_load(&o, ds));
    cnn_status st = cnn_dataset_set_norm(ds, d->mean, d->std);
    if (st == CNN_OK && d->pad >= 0) ds->pad = d->pad;
    if (st != CNN_OK) cnn_dataset_free(ds);
    return st;
}
