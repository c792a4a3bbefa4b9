/* parsers.h — the engine's readers of untrusted bytes, as functions over memory: what the libFuzzer targets of
 * tests/fuzz call (one target per entry here; a new file format adds its parser here and a target there). The
 * engine's own callers read the file and hand its bytes to these. Every failure is a status with a one-line
 * message starting with `path`. Other such readers live with their subsystems: cnn_st_parse (safetensors.h),
 * cnn_json_parse (json.h), cnn_ckpt_meta_parse (checkpoint.h), cnn_cuda_cache_parse and cnn_cuda_tune_parse
 * (cuda/hooks.h).
 */
#ifndef CNN_CORE_PARSERS_H
#define CNN_CORE_PARSERS_H

#include "cnn/data.h"
#include "cnn/safetensors.h"

/* One CIFAR-10 batch file image: exactly `records` records of 3073 bytes (label 0..9, then 3072 pixel bytes);
 * the first `take` go to pix (take, 3, 32, 32) and labels (take). */
cnn_status cnn_cifar10_parse(const uint8_t *buf, size_t len, const char *path, int records, int take, uint8_t *pix,
                             int32_t *labels);

/* A `tensors:` dataset from an opened safetensors file: "images" F32 (N, 3, H, W), "labels" I64 (N,), labels in
 * [0, o->num_classes) when given, else inferred (below CNN_MAX_INFERRED_CLASSES). Only o->limit and
 * o->num_classes are used. On failure d may hold allocations: cnn_dataset_free it. */
cnn_status cnn_tensors_dataset(const cnn_st_file *f, const char *path, const cnn_data_opts *o, cnn_dataset *d);

#endif
