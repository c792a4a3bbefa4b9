/* model.h — model internals shared by src/core files (checkpoints need the raw state; see train.c). */
#ifndef CNN_MODEL_H
#define CNN_MODEL_H

#include "cnn/net.h"
#include "cnn/safetensors.h"

/* Strict load from an opened safetensors file; tensors whose names start with ignore_prefix (may be NULL)
 * are left for the caller (optimizer state in checkpoints). Error messages start with path. */
cnn_status cnn_model_load_st(cnn_model *m, const cnn_st_file *f, const char *path, const char *ignore_prefix);

/* One item per parameter (net->params order, torchvision names and layouts), data in a host buffer the caller
 * frees (*host_out). items must hold net->n_params entries. */
cnn_status cnn_model_state_items(cnn_model *m, cnn_st_item *items, float **host_out);

/* The device float that receives the loss of cnn_model_backward / cnn_model_loss. */
float *cnn_model_loss_buffer(cnn_model *m);

/* Called after each node of a train-mode forward with its output (count act_dtype elements on the device); a
 * status other than CNN_OK stops the forward. While set, forwards run eagerly (no recorded graph): only the
 * diagnosis of a non-finite step (guard.c) sets it. fn NULL removes it. */
typedef cnn_status (*cnn_node_check_fn)(void *ctx, cnn_model *m, int node, const void *value, int64_t count);
void cnn_model_set_node_check(cnn_model *m, cnn_node_check_fn fn, void *ctx);

#endif
