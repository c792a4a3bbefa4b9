/* guard.h — non-finite values, from the training loop's side: checks of host arrays (weights as they load,
 * states before they are written) and the diagnosis of a training step that the device guard (backend.h,
 * cnn_guard) found bad. Every failure is CNN_E_NONFINITE with a message naming the tensor or the layer. */
#ifndef CNN_CORE_GUARD_H
#define CNN_CORE_GUARD_H

#include "cnn/net.h"
#include "cnn/safetensors.h"
#include "model.h"

/* Index of the first NaN/Inf among count floats, or -1. */
int64_t cnn_first_nonfinite(const float *x, int64_t count);

/* A parameter's values (torchvision layout, float32) as read from path: an error naming the tensor, the index
 * and the value when one is NaN/Inf or when a running variance is negative. */
cnn_status cnn_param_values_check(const cnn_param *p, const float *v, const char *path);

/* The F32 items about to be written to path (a model or a checkpoint), checked as above; nothing is written
 * when this fails: "<path> not written: tensor \"layer1.0.bn1.running_var\" holds inf at index 3". */
cnn_status cnn_items_check(const cnn_st_item *items, int n, const char *path);

/* The state taken from m's device (model.h) with the n_opt optimizer arrays `opt` (device, n_trainable floats
 * each) in its extra part, about to be written to path as a checkpoint, checked as cnn_items_check does without a
 * scan on the host while all is well: the device counts the non-finite values of its arenas (unchanged since the
 * state was taken) and only the running variances' signs are read on the host; when one is bad, the host's scan
 * names it. */
cnn_status cnn_state_check(cnn_model *m, float *const *opt, int n_opt, const cnn_state *s, const char *path);

/* The model's input buffer holds the n images of a training step that went bad. Rerun that step's forward
 * eagerly (dropout masks from dropout_seed, as the step had them) with a check of the input, of each layer's
 * output and of each BatchNorm layer's running statistics, and write the first non-finite one into `where`
 * ("the input batch", "layer layer1.0.bn1 (bn) output", "layer layer1.0.bn1 (bn) running_var"); when all are
 * finite, "no layer: the forward is finite (the loss or the labels)". Only after a failure: it is slow. */
cnn_status cnn_guard_diagnose(cnn_model *m, int n, uint64_t dropout_seed, char *where, size_t cap);

#endif
