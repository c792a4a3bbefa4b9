/* net.h — networks: the layer graph, the parameter table, the model zoo and the runtime model.
 *
 *   cnn_net    a symbolic graph (nodes in topological order, shapes per image) and its parameter table
 *              (torchvision names and shapes). No memory beyond the description. Built by the zoo.
 *   cnn_model  a net bound to a backend for a maximum batch: device arenas for parameters, gradients,
 *              optimizer state and activations, planned once, plus the executor.
 *
 * Example (inference on the CPU):
 *     cnn_backend *be;  cnn_cpu_backend_create(0, &be);
 *     cnn_model_opts mo = cnn_model_opts_default();  mo.arch = "resnet18";
 *     cnn_model *m;     CNN_TRY(cnn_model_create(&mo, be, 224, 224, 32, false, &m));
 *     CNN_TRY(cnn_model_load(m, "resnet18.safetensors"));
 *     CNN_TRY(cnn_model_upload_input(m, nchw_float_images, 32));
 *     CNN_TRY(cnn_model_forward(m, 32, CNN_MODE_EVAL));
 *     CNN_TRY(cnn_model_download_logits(m, 32, logits));   // (32, 1000)
 */
#ifndef CNN_NET_H
#define CNN_NET_H

#include "cnn/backend.h"

typedef enum cnn_op {
    CNN_OP_CONV = 0,
    CNN_OP_BN,
    CNN_OP_RELU,
    CNN_OP_MAXPOOL,
    CNN_OP_AVGPOOL,
    CNN_OP_ADAPTIVE_AVGPOOL,
    CNN_OP_LINEAR,
    CNN_OP_DROPOUT,
    CNN_OP_FLATTEN,
    CNN_OP_ADD,
    CNN_OP_COUNT
} cnn_op;

const char *cnn_op_name(cnn_op op);

#define CNN_NAME_MAX 96

/* One layer. Output shape is per image (the batch is a run-time value). */
typedef struct cnn_node {
    cnn_op op;
    char name[CNN_NAME_MAX]; /* torchvision module path: "layer1.0.conv1", "features.3", "fc"     */
    int in[2];               /* producer nodes; -1 = the network input; in[1] only for ADD        */
    int c, h, w;             /* output (C, H, W)                                                  */
    int k, r, s, stride, pad;/* conv (k = out channels) and window pools                           */
    int out_h, out_w;        /* adaptive pool target                                               */
    float drop_p;            /* dropout probability                                                */
    int param[5];            /* parameter indices (-1 none): conv/linear {weight, bias};
                                bn {weight, bias, running_mean, running_var, num_batches_tracked} */
} cnn_node;

typedef enum cnn_param_kind {
    CNN_PARAM_TRAINABLE = 0, /* float32, in the trainable arena (gradients, optimizer state) */
    CNN_PARAM_BUFFER,        /* float32 running statistics, in the buffer arena              */
    CNN_PARAM_COUNTER,       /* int64 num_batches_tracked, kept on the host                  */
} cnn_param_kind;

typedef enum cnn_init {
    CNN_INIT_ZEROS = 0,
    CNN_INIT_ONES,
    CNN_INIT_KAIMING_FAN_OUT, /* normal(0, sqrt(2 / fan_out)), fan_out = K*R*S (torchvision's convs) */
    CNN_INIT_UNIFORM_FAN_IN,  /* uniform(+-1/sqrt(fan_in)): nn.Linear's default for weight and bias */
    CNN_INIT_NORMAL_001,      /* normal(0, 0.01): VGG's Linear weights                             */
} cnn_init;

typedef struct cnn_param {
    char name[CNN_NAME_MAX]; /* "layer1.0.conv1.weight" */
    int ndim;
    int64_t shape[4];        /* torchvision shape (OIHW for conv weights); ndim 0 = scalar         */
    bool krsc;               /* stored KRSC inside, OIHW outside                                   */
    bool act_copy;           /* conv/linear weight: the backend also keeps an act_dtype copy, at the
                              * same offset of an arena laid out as the trainable one             */
    cnn_param_kind kind;
    cnn_init init;
    int64_t fan_in;          /* for CNN_INIT_UNIFORM_FAN_IN / KAIMING                               */
    int64_t fan_out;
    int64_t count;           /* elements                                                           */
    int64_t offset;          /* element offset into its arena (trainable or buffer)                */
} cnn_param;

typedef enum cnn_stem { CNN_STEM_IMAGENET = 0, CNN_STEM_CIFAR } cnn_stem;

typedef struct cnn_model_opts {
    const char *arch;        /* "resnet18" ... "resnet152", "vgg11" ... "vgg19", "vgg11_bn" ... */
    int num_classes;         /* default 1000 */
    cnn_stem stem;           /* ResNets only */
    float dropout;           /* VGG classifier dropout; default 0.5 */
    uint64_t seed;           /* weight initialisation */
    int in_channels;         /* image channels of the first conv; 0 = 3 */
} cnn_model_opts;

cnn_model_opts cnn_model_opts_default(void);

typedef struct cnn_net {
    char arch[32];
    int num_classes;
    cnn_stem stem;
    int in_c, in_h, in_w;
    cnn_node *nodes;
    int n_nodes, cap_nodes;
    cnn_param *params;
    int n_params, cap_params;
    int64_t n_trainable;     /* float32 elements in the trainable arena */
    int64_t n_buffer;        /* float32 elements in the buffer arena    */
    int output;              /* node producing the logits               */
} cnn_net;

/* The zoo: the torchvision architecture named by o->arch for (3, in_h, in_w) inputs. Unknown names and inputs
 * too small for the network are CNN_E_INVALID with a message. */
cnn_status cnn_zoo_build(const cnn_model_opts *o, int in_h, int in_w, cnn_net **out);
/* A space-separated list of the architectures the zoo knows. */
const char *cnn_zoo_names(void);
void cnn_net_free(cnn_net *net);

/* Graph building blocks (used by the zoo and by tests). Each returns the new node's index. */
int cnn_net_conv(cnn_net *net, const char *name, int in, int k, int r, int stride, int pad, bool bias);
int cnn_net_bn(cnn_net *net, const char *name, int in);
int cnn_net_relu(cnn_net *net, const char *name, int in);
int cnn_net_maxpool(cnn_net *net, const char *name, int in, int r, int stride, int pad);
int cnn_net_avgpool(cnn_net *net, const char *name, int in, int r, int stride, int pad);
int cnn_net_adaptive_avgpool(cnn_net *net, const char *name, int in, int out_h, int out_w);
int cnn_net_linear(cnn_net *net, const char *name, int in, int out, cnn_init winit, cnn_init binit);
int cnn_net_dropout(cnn_net *net, const char *name, int in, float p);
int cnn_net_flatten(cnn_net *net, const char *name, int in);
int cnn_net_add(cnn_net *net, const char *name, int a, int b);
/* After building: false (with a message) if any node's output is empty. */
cnn_status cnn_net_check(const cnn_net *net);
int64_t cnn_node_flops(const cnn_net *net, int i);      /* forward FLOPs per image */
int64_t cnn_node_params(const cnn_net *net, int i);     /* trainable parameter count */
const cnn_param *cnn_net_find_param(const cnn_net *net, const char *name);

/* ---- runtime model ------------------------------------------------------------------------------------ */

typedef enum cnn_mode { CNN_MODE_EVAL = 0, CNN_MODE_TRAIN } cnn_mode;

typedef struct cnn_model cnn_model;

/* Build the net, plan and allocate arenas for batches up to max_batch, initialise weights from opts->seed.
 * train = also gradients and optimizer state (n_opt_slots float32 arrays the size of the parameters). */
cnn_status cnn_model_create(const cnn_model_opts *opts, cnn_backend *be, int in_h, int in_w, int max_batch,
                            bool train, cnn_model **out);
void cnn_model_free(cnn_model *m);
const cnn_net *cnn_model_net(const cnn_model *m);
cnn_backend *cnn_model_backend(const cnn_model *m);
int cnn_model_max_batch(const cnn_model *m);
/* Device bytes held by the model's arenas. */
size_t cnn_model_device_bytes(const cnn_model *m);

/* Weights: safetensors with torchvision names and shapes. Load is strict: every tensor present, no extra,
 * shapes equal, dtype F32/F16/BF16 (I64 for num_batches_tracked). Save is atomic. `extra` (may be NULL)
 * adds tensors (optimizer state) and metadata for checkpoints. */
cnn_status cnn_model_load(cnn_model *m, const char *path);
/* Weights holding a NaN/Inf or a negative running variance are refused by load (CNN_E_NONFINITE naming the
 * tensor) unless allowed here (`--allow-nonfinite`). */
void cnn_model_set_allow_nonfinite(cnn_model *m, bool allow);
cnn_status cnn_model_save(cnn_model *m, const char *path);

/* Host access to one parameter in torchvision layout (float32; num_batches_tracked as a float count). Setting a
 * weight also writes its act_dtype copy (rounded on the host, as the device rounds). */
cnn_status cnn_model_get_param(cnn_model *m, int index, float *out);
cnn_status cnn_model_set_param(cnn_model *m, int index, const float *in);
/* Gradient of a trainable parameter after cnn_model_backward, in torchvision layout. */
cnn_status cnn_model_get_grad(cnn_model *m, int index, float *out);
int64_t cnn_model_num_batches_tracked(const cnn_model *m);
void cnn_model_set_num_batches_tracked(cnn_model *m, int64_t v);

/* Input: float32 NCHW host images -> the device input buffer (NHWC act_dtype). */
cnn_status cnn_model_upload_input(cnn_model *m, const float *nchw, int n);
/* Input already on the device in NHWC act_dtype layout (from prep_images): where to put it. */
void *cnn_model_input_buffer(cnn_model *m);
/* Run the forward pass for n images. Train mode uses batch statistics, updates running stats and applies
 * dropout with masks from dropout_seed. Eval mode uses the fused, BN-folded plan. */
cnn_status cnn_model_forward(cnn_model *m, int n, cnn_mode mode, uint64_t dropout_seed);
cnn_status cnn_model_download_logits(cnn_model *m, int n, float *out);
/* The same n x num_classes logits as float32 into device memory dst (backend memory), queued: no host wait. */
cnn_status cnn_model_copy_logits(cnn_model *m, int n, float *dst);

/* The eval plan, step by step (per-layer timing: `cnn bench --layers`). Each step runs one op node; a conv
 * (or an unfused BN) may carry a folded BN, a residual add and a ReLU in its epilogue, so one step can stand
 * for several nodes. Dropout and trivial flattens are no steps. */
typedef struct cnn_eval_step {
    int node;          /* the op executed: conv, bn, add, relu, a pool, linear or flatten */
    int bn;            /* BN node folded into the epilogue, or -1                          */
    bool has_residual; /* a residual tensor is added in the epilogue                       */
    int residual;      /* its producer node (-1 = the network input)                       */
    bool relu;         /* ReLU applied in the epilogue                                      */
    int pool;          /* max-pool node fused after the epilogue (the step's value is its output), or -1 */
    int pair;          /* a second conv summed in the same kernel (backend.h, conv2d_fprop_pair: a ResNet block's
                        * last conv, with its BN, beside the downsample conv `node`), or -1 */
    int pair_bn;       /* its BN node                                                         */
} cnn_eval_step;
int cnn_model_eval_steps(const cnn_model *m);
cnn_eval_step cnn_model_eval_step(const cnn_model *m, int s); /* s in [0, cnn_model_eval_steps) */
/* Run eval steps [first, first + count) for n images, eagerly (never a recorded graph). Each step reads what
 * earlier steps wrote, so run them in order; after all of them the logits are those of
 * cnn_model_forward(m, n, CNN_MODE_EVAL, 0). */
cnn_status cnn_model_forward_eval_steps(cnn_model *m, int n, int first, int count);
/* One training step (forward, loss, backward) for n images run eagerly with a timing mark after every step of
 * the train plan, for a breakdown by op (`cnn bench --mode train --layers`): times[k] for the forward of train
 * step k (k < cnn_model_train_steps), then the loss with its gradient (k = S), then the backward of step S - 1 - j
 * at k = S + 1 + j. node[k] the step's op node (-1 for the loss). Arrays of 2 * S + 1; S <= (CNN_TIME_MARKS - 2) / 2.
 * The step's results are those of cnn_model_forward + cnn_model_backward. */
int cnn_model_train_steps(const cnn_model *m);
cnn_status cnn_model_profile_train(cnn_model *m, int n, const int64_t *labels, double *times, int *node);
/* After a train-mode forward: loss (mean over n) and all parameter gradients. labels are host int64. loss_out
 * NULL: the loss stays on the device (no wait for it; the training loop reads it through its guard). */
cnn_status cnn_model_backward(cnn_model *m, int n, const int64_t *labels, float label_smoothing,
                              float *loss_out);
/* Loss only (eval), from the logits of the last forward. */
cnn_status cnn_model_loss(cnn_model *m, int n, const int64_t *labels, float label_smoothing, float *loss_out);

/* Multiply the loss gradient by scale in later backward passes (fp16 dynamic loss scaling); default 1. The
 * parameter gradients come out scaled: the optimizer divides them back (grad_scale = 1/scale). */
void cnn_model_set_loss_scale(cnn_model *m, float scale);

/* Record device work into backend graphs and replay it (default on where the backend has graphs). */
void cnn_model_set_graphs(cnn_model *m, bool on);

/* --deterministic's training step (cnn_train_opts.deterministic): m's backend runs every pass that sums over the
 * batch by the global batch's slices, the same on any number of ranks (src/core/shards.h), for a step of `batch`
 * images on each of `world` ranks. *slices: this rank's, or 0 where world does not divide the global batch's
 * (nothing changes then). Graphs recorded before are dropped. cnn_model_end_slices undoes it, before m is freed. */
cnn_status cnn_model_begin_slices(cnn_model *m, int batch, int world, int *slices);
void cnn_model_end_slices(cnn_model *m);

/* Data-parallel training (dist.h): later cnn_model_backward calls sum the gradient arena over the ranks of comm
 * (the backend's communicator, comm_init), in buckets of about bucket_bytes, each issued on the communicator's
 * stream as soon as the backward has written all of its gradients (in graph replays too); bucket_bytes 0: one
 * sum of the whole arena on the compute stream after the backward. The sum is not divided: the optimizer's
 * grad_scale does it. comm NULL: off (o is not read). */
typedef struct cnn_dp_opts {
    size_t bucket_bytes;
    int world;       /* the ranks of comm */
    bool sync_bn;    /* BatchNorm's batch statistics over all the ranks (PyTorch's SyncBatchNorm) */
    bool bf16_sums;  /* gradients summed in bfloat16 (half the bytes; each rank's rounded first) */
} cnn_dp_opts;
cnn_status cnn_model_set_comm(cnn_model *m, void *comm, const cnn_dp_opts *o);

/* Device arenas, for the optimizer and checkpoints. */
float *cnn_model_params(cnn_model *m);      /* (n_trainable) */
float *cnn_model_grads(cnn_model *m);       /* (n_trainable) */
float *cnn_model_buffers(cnn_model *m);     /* (n_buffer)    */
/* After the master weights changed on the device: refresh act_dtype copies and invalidate folded BN. */
cnn_status cnn_model_params_changed(cnn_model *m);
/* The act_dtype copies of the weights, laid out as the trainable arena (n_trainable elements; cnn_param.act_copy
 * says which slices are read), or NULL when the backend reads the float32 masters. An optimizer that writes them
 * with its update (cnn_sgd.act_copy) then calls cnn_model_params_updated instead of cnn_model_params_changed. */
void *cnn_model_act_weights(cnn_model *m);
void cnn_model_params_updated(cnn_model *m);

#endif
