/* checkpoint.h — what a checkpoint's file must hold besides the weights: its metadata, parsed and range-checked,
 * and the list of its tensors. Internal to src/core (train.c writes and reads checkpoints; tests/fuzz runs the
 * parser on arbitrary files).
 *
 * A checkpoint is a safetensors file: every parameter under its torchvision name, the optimizer state under
 * "optimizer.*" (flat float32 arrays over the trainable parameters) and the metadata
 *     format      "cnn.checkpoint.v1"
 *     step        decimal digits, the optimizer steps done: 0 .. CNN_MAX_STEPS
 *     options     the run's options (train.c: a resumed run must have the same)
 *     loss_scale  "<scale> <good steps>": fp16 loss scaling, scale a finite float in (0, 2^64], good steps
 *                 0 .. 10^9
 */
#ifndef CNN_CORE_CHECKPOINT_H
#define CNN_CORE_CHECKPOINT_H

#include "cnn/net.h"
#include "cnn/safetensors.h"

#define CNN_CKPT_FORMAT "cnn.checkpoint.v1"
#define CNN_MAX_STEPS 1000000000000LL /* the CLI's --steps cap: a step count always fits with room to spare */

typedef struct cnn_ckpt_meta {
    int64_t step;
    float loss_scale;
    int64_t good_steps;
    const char *options; /* points into the file's metadata */
} cnn_ckpt_meta;

/* Parse the metadata of an opened checkpoint; CNN_E_FORMAT "<path>: not a cnn checkpoint: ..." naming the field. */
cnn_status cnn_ckpt_meta_parse(const cnn_st_file *f, const char *path, cnn_ckpt_meta *out);

/* The name of optimizer array k of a run that keeps n_opt of them: 1 = SGD's momentum buffer, 2 = AdamW's two
 * moments (0: SGD without momentum keeps none). */
const char *cnn_ckpt_opt_name(int n_opt, int k);

/* Every tensor of f is a parameter of net or one of the n_opt optimizer arrays, each of which is present as F32
 * (n_trainable,); CNN_E_MISMATCH naming the first that is not (an unknown "optimizer.*" included). */
cnn_status cnn_ckpt_check_tensors(const cnn_st_file *f, const char *path, const cnn_net *net, int n_opt);

#endif
