/* checkpoint.h — what a checkpoint's file must hold besides the weights: its metadata, parsed and range-checked,
 * and the list of its tensors; and the writer that writes one behind the training steps. Internal to src/core
 * (train.c writes and reads checkpoints; tests/fuzz runs the parser on arbitrary files).
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
#include "model.h"

#include <pthread.h>

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

/* Where optimizer array k of a checkpoint's state lies: after its arenas, n_trainable floats each. */
static inline float *cnn_ckpt_opt_data(const cnn_state *s, int k) {
    return s->arena + s->net->n_trainable + s->net->n_buffer + (int64_t)k * s->net->n_trainable;
}

/* A checkpoint's items: the parameters of s (cnn_state_items: filters converted into *conv, which the caller frees),
 * then its n_opt optimizer arrays, each n_trainable floats of s's extra part. items holds n_params + n_opt. */
cnn_status cnn_ckpt_items(const cnn_state *s, int n_opt, cnn_st_item *items, float **conv);

/* Write the checkpoint of s (checked already: a checkpoint never holds a NaN, train.c) atomically, as cnn_st_write
 * does. */
cnn_status cnn_ckpt_write(const char *path, const cnn_state *s, int n_opt, const cnn_st_kv *meta, int n_meta);

/* A checkpoint written behind the training steps: the training thread takes the state to the host and checks it,
 * then cnn_ckpt_write_behind hands it to a thread of the writer's own, which converts and writes it as
 * cnn_ckpt_write does (the previous file stays whole until the new one is complete) while training goes on. The
 * state is lent: the caller leaves it as it is until cnn_ckpt_wait, which waits for the write in flight, if any, and
 * returns its status with its error recorded on the calling thread. At most one write is in flight: write_behind
 * waits for the previous one first (and returns its error). */
#define CNN_CKPT_META 4
typedef struct cnn_ckpt_writer {
    pthread_t thread;
    bool busy;
    char *path;
    const cnn_state *state;
    int n_opt;
    cnn_st_kv meta[CNN_CKPT_META];
    char *meta_values[CNN_CKPT_META];
    int n_meta;
    cnn_status st;
    char err[1024];
} cnn_ckpt_writer;
cnn_status cnn_ckpt_write_behind(cnn_ckpt_writer *w, const char *path, const cnn_state *s, int n_opt,
                                 const cnn_st_kv *meta, int n_meta);
cnn_status cnn_ckpt_wait(cnn_ckpt_writer *w);

#endif
