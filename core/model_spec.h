// The model spec: what is trained, as read from a user's YAML file.
// docs/model-spec.md is the reference of the file format; this header is its
// in-memory form. loadModelSpec checks every field before anything runs.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/image_resize.h"
#include "core/learning_rate.h"
#include "core/shape.h"

namespace traind {

enum class LayerKind { Dense, Conv2D, MaxPool, AvgPool, Flatten, Dropout, Activation };
enum class Activation { Linear, Relu, Tanh, Sigmoid };
enum class Padding { Valid, Same };  // Same follows TensorFlow: out = ceil(in / stride)

struct InitializerSpec {
  enum class Kind {
    GlorotUniform,
    GlorotNormal,
    HeUniform,
    HeNormal,
    Zeros,
    Constant,
    TruncatedNormal,
    RandomNormal,
  };
  Kind kind = Kind::Zeros;
  float value = 0.0f;  // Constant: the value; TruncatedNormal, RandomNormal: the standard deviation
};

struct LayerSpec {
  LayerKind kind = LayerKind::Dense;
  std::string name;          // unique; defaults to "<kind>_<n>" (dense_1, conv2d_2, ...)
  SourceLocation location;   // where the layer's entry starts in the spec
  int64_t units = 0;         // Dense
  int64_t filters = 0;       // Conv2D
  std::array<int64_t, 2> window{0, 0};  // Conv2D kernel or pooling size, [height, width]
  std::array<int64_t, 2> stride{1, 1};  // Conv2D and pooling; pooling defaults to its size
  Padding padding = Padding::Valid;
  Activation activation = Activation::Linear;  // fused into Dense/Conv2D, or the Activation layer
  float rate = 0.0f;         // Dropout: fraction of units dropped while training
  bool use_bias = true;
  bool trainable = true;     // false freezes the layer's variables
  InitializerSpec kernel_initializer{InitializerSpec::Kind::GlorotUniform, 0.0f};
  InitializerSpec bias_initializer{InitializerSpec::Kind::Zeros, 0.0f};
  // Dense, Conv2D: the kernel's own L2 decay, in place of the optimizer's
  // weight_decay (Keras' kernel_regularizer=l2(λ) is 2λ).
  std::optional<float> weight_decay;
  // Model parallelism: the device this layer runs on ("cpu:1", "cuda:0");
  // empty follows the previous layer (core/stage_plan.h).
  std::string device;
};

// A named stage: consecutive layers placed on one device together.
struct StageSpec {
  std::string name;
  std::string device;
  std::vector<std::string> layers;  // consecutive, in model order
  SourceLocation location;
};

enum class LossKind { SoftmaxCrossEntropy, MeanSquaredError };

// tf.train.ExponentialMovingAverage of the trainable variables, updated
// with every update: average = d * average + (1 - d) * variable, where d is
// `decay`, or with num_updates min(decay, (1 + t) / (10 + t)) at update t.
struct MovingAverageSpec {
  float decay = 0.999f;
  bool num_updates = true;
};

struct OptimizerSpec {
  enum class Kind { Sgd, Momentum, Adagrad, Adam, RmsProp };
  Kind kind = Kind::Sgd;
  float momentum = 0.9f;               // Momentum; RmsProp (its default there: 0)
  bool nesterov = false;               // Momentum
  float initial_accumulator = 0.1f;    // Adagrad
  float beta1 = 0.9f;                  // Adam
  float beta2 = 0.999f;                // Adam
  float rho = 0.9f;                    // RmsProp: the mean square's decay
  bool centered = false;               // RmsProp: divide by the variance's root
  float initial_rms = 1.0f;            // RmsProp (TensorFlow 1's; Keras' is 0)
  // Adagrad and Adam: 1e-7, TensorFlow's default; RmsProp: 1e-10, TensorFlow
  // 1's (readOptimizer sets it with the kind).
  float epsilon = 1e-7f;
  float weight_decay = 0.0f;           // L2 on kernels: grad += weight_decay * kernel
  // Each step's gradient clipped to this global norm before its update
  // (core/gradient_clipping.h), by whoever holds the whole gradient, not by
  // the update rule; 0: not clipped.
  float clip_global_norm = 0.0f;
  // The spec's top-level moving_average section. It lives here because it
  // is applied with each update, wherever the update runs (a ps applies it
  // to its shard).
  std::optional<MovingAverageSpec> moving_average;
};

// A data set read from files: a pair of MNIST-format IDX files, or
// TFRecord files of tf.train.Example messages; either gzip-compressed or raw.
struct DataFiles {
  enum class Format { Idx, TfRecord };
  Format format = Format::Idx;
  std::string images;  // Idx
  std::string labels;  // Idx
  // TfRecord: the files, in the order their examples are taken (each glob
  // pattern of the spec expanded, its matches sorted), each once
  std::vector<std::string> records;
  std::string image_feature = "image_raw";  // TfRecord: raw pixels, PNG, JPEG (bytes) or floats
  std::string label_feature = "label";      // TfRecord: a class (int64) or a target (float)
  // TfRecord: encoded images of any size resized to the model's input as
  // TensorFlow 2 (Bilinear) or 1 (LegacyBilinear) resizes them
  // (core/image_resize.h); None takes images of the input's size only
  enum class Resize { None, Bilinear, LegacyBilinear };
  Resize resize = Resize::None;
  // The height and width images are resized to instead of the input's: the
  // images a crop's window (Augmentation::crop_height) is taken from, as
  // the ImageNet pipelines resize to 256 and take 224; 0 = the input's
  int64_t resize_height = 0;
  int64_t resize_width = 0;
  // Or, for a test set, the side the shorter of each image's height and
  // width is resized to, the other kept in proportion (slim's VGG
  // evaluation), before the centre window of the model's input is taken of
  // it; 0 = none
  int64_t resize_shorter_side = 0;
  // How each side of that resize becomes a whole number of pixels: to the
  // nearest as slim (VGG), or down as the official ResNet's evaluation
  SideRounding resize_rounding = SideRounding::Nearest;
  // Or, for a test set, the fraction of each image's height and width kept
  // about its centre (tf.image.central_crop: Inception's evaluation)
  // before it is resized to the model's input; 0 = none
  double resize_central_fraction = 0.0;
  // TfRecord, training: each image keeps its own size, decoded again from
  // its file as a batch gathers it, for a random crop drawn on it
  // (Augmentation::scales, or boxes with a resize that has no size)
  bool own_sizes = false;
  int64_t limit = 0;  // use only the first `limit` examples; 0 = all
  // TfRecord: false leaves the examples in their files, each read and
  // decoded as a batch gathers it (Dataset::files), for sets larger than
  // memory; the files must be uncompressed, to be read at a record's offset
  bool in_memory = true;
  SourceLocation location;  // its entry in the spec, for what its files' contents refute
};

// n points, x uniform in [x_min, x_max], y = x^2 + N(0, noise_stddev^2).
struct SyntheticRegressionSpec {
  int64_t points = 1000;
  float x_min = -1.0f;
  float x_max = 1.0f;
  float noise_stddev = 0.05f;
};

// Random distortions of each training image as its batch is gathered
// (core/augmentation.h), in this order, as TensorFlow 1's image input
// pipelines made them (cifar10_input.py, the official ResNet's CIFAR-10
// input, slim's inception preprocessing); the test set is seen as it is,
// but for a crop's size, which it takes from the image's centre. Values are
// in the input's units (pixel / 255 for images).
struct Augmentation {
  // Zero-pad this many pixels on every side (resize_image_with_crop_or_pad
  // to h + 2p, w + 2p); 0 = none
  int64_t crop_padding = 0;
  SourceLocation crop_padding_location;  // data.augment.random_crop.padding
  // then take a window of this size at a uniform offset (random_crop); 0 =
  // the image's own size. Evaluation takes the window from the image's
  // centre (resize_image_with_crop_or_pad to it), and the model's input is
  // the window.
  int64_t crop_height = 0;
  int64_t crop_width = 0;
  SourceLocation crop_size_location;  // data.augment.random_crop.size
  // Or, in place of a window at a random offset, a box of the image of
  // random area (a fraction of the image's, in [box_area_lower,
  // box_area_upper]) and aspect ratio (width over height, in
  // [box_aspect_lower, box_aspect_upper]), resized to the window
  // (tf.image.sample_distorted_bounding_box, then tf.image.resize:
  // Inception's training crop); box_area_upper 0 = none. No padding then.
  // A box is of the image as the set keeps it: as decoded where the
  // training set's resize has no size (DataFiles::own_sizes).
  float box_area_lower = 0.0f;
  float box_area_upper = 0.0f;
  float box_aspect_lower = 0.0f;
  float box_aspect_upper = 0.0f;
  // Or a window at a uniform offset of each training image as decoded,
  // resized in proportion so that its shorter side is a length uniform in
  // [scale_lower, scale_upper], whole pixels (slim's vgg_preprocessing
  // for training: VGG's and ResNet's scale augmentation); 0 = none. The
  // training images then keep their own sizes, each decoded from its file
  // as it is gathered (DataFiles::own_sizes). No padding then.
  int64_t scale_lower = 0;
  int64_t scale_upper = 0;
  bool flip_left_right = false;  // mirrored with probability 1/2 (random_flip_left_right)
  // delta uniform in [-brightness, brightness), added to every value
  // (random_brightness); 0 = none
  float brightness = 0.0f;
  // factor uniform in [saturation_lower, saturation_upper) scaling each
  // pixel's HSV saturation, clipped to [0, 1] (random_saturation); both 0 =
  // none. RGB images only.
  float saturation_lower = 0.0f;
  float saturation_upper = 0.0f;
  // delta uniform in [-hue, hue) added to each pixel's HSV hue, in turns
  // (random_hue); 0 = none. RGB images only.
  float hue = 0.0f;
  // factor uniform in [contrast_lower, contrast_upper); each channel's
  // values moved from their mean by it (random_contrast); both 0 = none
  float contrast_lower = 0.0f;
  float contrast_upper = 0.0f;
  SourceLocation location;  // data.augment, for a data set whose examples are not images
  // data.augment.saturation, or hue where it has no saturation: for images
  // that are not RGB
  SourceLocation colours_location;

  bool crops() const { return crop_padding > 0 || crop_height > 0; }
  bool boxes() const { return box_area_upper > 0.0f; }
  bool scales() const { return scale_upper > 0; }
  bool colours() const { return saturation_upper > 0.0f || hue > 0.0f; }
  bool any() const {
    return crops() || flip_left_right || brightness > 0.0f || colours() || contrast_upper > 0.0f;
  }
};

// How a shuffled training set is drawn when not as one permutation of the
// whole set: as tf.data's
//   list_files(shuffle=shuffle_files).interleave(TFRecordDataset,
//       cycle_length=interleave).shuffle(size)
// draws it. Each epoch goes through the set's files, in the spec's order or
// in one drawn anew, `interleave` at a time, one example from each in turn
// (a file that ends gives its place to the next); each draw takes one of
// the next `size` examples of that stream at random. So a set left in its
// files is read nearly in order, a few files at a time.
struct ShuffleBuffer {
  int64_t size = 0;            // examples; 0: a permutation of the whole set
  int64_t interleave = 1;      // files read at once (cycle_length)
  bool shuffle_files = false;  // the files' order drawn anew every epoch
};

struct DataSpec {
  enum class Kind { Files, SyntheticRegression };
  Kind kind = Kind::Files;
  SourceLocation location;              // the data section, for what it lacks
  DataFiles train;                      // Files
  std::optional<DataFiles> test;        // Files, optional
  SyntheticRegressionSpec synthetic;    // SyntheticRegression (its test set: points / 5)
  SourceLocation synthetic_location;
  int64_t batch_size = 32;
  SourceLocation batch_size_location;   // the field, or the data section without one
  bool shuffle = true;                  // reshuffled every epoch from (seed, epoch)
  // With shuffle: data.shuffle_buffer, data.interleave and
  // data.shuffle_files; by default a permutation of the whole set
  ShuffleBuffer shuffle_buffer;
  Augmentation augment;                 // of the training set's images
  // data.standardize: per_image: every example of the training and test
  // sets, after any augmentation, as tf.image.per_image_standardization
  // (Dataset::per_image_standardization)
  bool standardize_per_image = false;
  // Each worker of a cluster keeps only its share of the training set
  // (DataShare: every workers-th example) and shuffles it alone, rather than
  // holding it whole and taking its turn of the job's batches.
  bool shard_by_worker = false;
  // Batches read ahead on the input thread; unset is `auto`
  // (readAheadBatches, daemon/training_data.h).
  std::optional<int> prefetch_batches;
};

// The largest global step a node takes from a file or a peer (a checkpoint's
// manifest, the chief, a ps's reply): 2^53, the largest integer a JSON
// number holds exactly. Far beyond any run, and far from the int64 overflow
// that a step from a lying file or peer would otherwise bring within reach.
constexpr int64_t kMaxGlobalStep = int64_t(1) << 53;
// The largest max_steps: half of kMaxGlobalStep, so that an async job, which
// runs a few steps past its end, stays far below it.
constexpr int64_t kMaxSteps = kMaxGlobalStep / 2;
// So that epochs times an epoch's steps (at most 2^31) stays below kMaxSteps.
constexpr int64_t kMaxEpochs = 1'000'000;
// The most compute threads a spec or --threads asks for.
constexpr int64_t kMaxThreads = 1024;

struct TrainingSpec {
  int64_t max_steps = 0;   // 0: from epochs
  int64_t epochs = 0;      // 0: from max_steps; one of the two is set
  int64_t log_every = 100;
  // TensorBoard's scalars (loss, accuracy, ...) every this many steps, over
  // the steps since the last (a TensorFlow 1 job's save_summaries_steps);
  // unset: log_every's, with each log line.
  std::optional<int64_t> summary_every;
  int64_t eval_every = 0;  // 0: evaluate at the end only
  // TensorBoard histograms of every variable every this many steps (a
  // TensorFlow 1 job's tf.summary.histogram of its variables); 0: none.
  int64_t histogram_every = 0;
  int threads = 0;         // compute threads; 0: one per core
  // Where each step runs: one tower per device, the batch split between them
  // (docs/devices.md): "cpu", "cpu:N", "cuda:N".
  std::vector<std::string> devices{"cpu"};
  // The field, the training section without one, or "--devices" (set by
  // traind's flag): for errors about devices that need the model and the batch.
  SourceLocation devices_location;
  // Steps in flight at once on the same devices, each on its own batch
  // (docs/devices.md, "Concurrent steps").
  int concurrent_steps = 1;
  SourceLocation concurrent_steps_location;  // for errors that involve other files
  // Each batch split into this many micro-batches that flow through the
  // model's stages in a pipeline; divides data.batch_size.
  int micro_batches = 1;
  SourceLocation micro_batches_location;  // the field, or the training section without one
  // When a worker with one step in flight sends the step's gradient
  // (docs/distributed.md, "Gradients sent during backward"): chunk by chunk
  // as the backward pass finishes them, or once the step is done. Auto:
  // during backward in sync mode and on GPUs, after the step otherwise,
  // and always after the step when optimizer.clip_global_norm needs the
  // whole gradient first.
  enum class GradientPush { Auto, DuringBackward, AfterStep };
  GradientPush gradient_push = GradientPush::Auto;
  SourceLocation gradient_push_location;
  // Where the chief writes TensorBoard event files; empty: <checkpoint.dir>/summaries,
  // or none without a checkpoint directory (summaryDirectory says which).
  std::string summary_dir;
  SourceLocation summary_dir_location;  // the field or --summary-dir; unknown when unset
};

// A checkpoint's default cadence when neither every_steps nor every_seconds
// is given: a crash loses at most ten minutes.
constexpr double kDefaultCheckpointSeconds = 600.0;

struct CheckpointSpec {
  std::string dir;             // empty: no checkpoints
  SourceLocation dir_location;  // the field (a model or cluster spec's) or --checkpoint-dir
  int64_t every_steps = 0;     // 0: not by steps
  // 0: not by time. TensorFlow 1's default (MonitoredTrainingSession's
  // save_checkpoint_secs), unless the section gives every_steps alone.
  double every_seconds = kDefaultCheckpointSeconds;
  int keep = 5;                // newest kept; older ones deleted
};

// One layer init_from copies, and where its variables are in the checkpoint.
struct InitFromLayer {
  std::string name;  // a layer of this spec with variables
  // Where its variables are in the checkpoint: "<source>/kernel",
  // "<source>/bias". The layer's `from`, else the section's `scope` and the
  // layer's name ("net/hidden1"), else its name.
  std::string source;
  SourceLocation location;  // its item in the list, where a refusal points
  // Spelled out: nvcc compiles this header as C++17 (the location is no
  // part of what the layer is).
  bool operator==(const InitFromLayer& other) const {
    return name == other.name && source == other.source;
  }
};

// Fine-tuning: copy the named layers' variables from another checkpoint.
struct InitFromSpec {
  // A traind checkpoint, or a directory of them (its latest); or a
  // TensorFlow checkpoint: its prefix, or a directory with TensorFlow's
  // `checkpoint` file (core/tensorflow_checkpoint.h).
  std::string checkpoint;
  std::vector<InitFromLayer> layers;
  SourceLocation location;             // the section's
  SourceLocation checkpoint_location;  // its checkpoint field's
};

struct ModelSpec {
  std::string path;     // the file it was read from
  std::string name;     // defaults to the file's stem
  uint64_t seed = 0;    // initialisers, shuffling and dropout derive from it
  Shape input;          // per example: [features] or [height, width, channels]
  std::vector<LayerSpec> layers;
  std::vector<StageSpec> stages;  // optional named stages of layers
  LossKind loss = LossKind::SoftmaxCrossEntropy;
  // softmax_cross_entropy's targets (1 - s) one_hot + s / classes, as
  // tf.losses.softmax_cross_entropy(label_smoothing=s); 0: one-hot.
  float label_smoothing = 0.0f;
  OptimizerSpec optimizer;
  LearningRateSpec learning_rate;
  DataSpec data;
  TrainingSpec training;
  CheckpointSpec checkpoint;
  std::optional<InitFromSpec> init_from;
};

// Whether a layer of this kind has variables (a kernel and a bias): dense, conv2d.
bool hasVariables(LayerKind kind);

// Whether no layer of `spec` trains: every dense and conv2d layer frozen
// (trainable: false), or none there. A run of it trains nothing, which it
// says (a model imported only to be evaluated may mean it).
bool trainsNothing(const ModelSpec& spec);

// Whether `prefix` can name a TensorFlow variable scope, or where a layer's
// variables are in a checkpoint: not empty, no '/' first or last, none
// doubled (TensorFlow's names have no empty scope: "net//a" is none of them).
bool isVariablePrefix(std::string_view prefix);

// Where layer `layer`'s variables are in a checkpoint, without a prefix of
// their own: under `scope` ("net/hidden1"), or by the layer's name alone.
std::string scopedVariablePrefix(const std::string& scope, const std::string& layer);

// Which of a spec's data files must be there as it is read: all of them (a
// run, `traind check`), or the test set's alone (`trainctl eval`, on a
// machine that may hold no training set: data.train's paths are then kept
// as written, resolved, a glob pattern unexpanded).
enum class SpecFiles { All, TestSetOnly };

// Reads and checks a spec. Relative data and checkpoint paths are resolved
// against the spec file's directory. Throws InputError naming
// file:line:column, the field and what was expected.
ModelSpec loadModelSpec(const std::string& path, SpecFiles files = SpecFiles::All);

// A stable hash of everything that decides the variables' names and shapes
// (input, layers, loss), as hex; checkpoints record it.
std::string architectureHash(const ModelSpec& spec);

// The optimizer's name in a spec's `type` field ("rmsprop").
std::string_view optimizerName(OptimizerSpec::Kind kind);

// What a worker computes from the parameters that the architecture hash
// leaves out (checkpoints outlive a change of them): each layer's
// activation and dropout rate, as one line ("hidden1 relu, dropout_2 rate
// 0.5, logits linear"). Workers computing other forward passes would push
// gradients of different models into one job; nodes compare it at hello.
std::string forwardRule(const ModelSpec& spec);

// The update rule a ps applies, from its own spec: the optimizer with its
// hyperparameters (clip_global_norm too, which workers apply), the learning
// rate schedule, the moving average, the frozen layers and the loss's
// label_smoothing (which workers compute), as one line ("adam (beta1 0.9,
// beta2 0.999, epsilon 1e-07), learning rate 0.001, frozen hidden1"), the
// same for the same values. Nodes compare it at hello: a release that words it otherwise
// bumps kWireVersion (rpc/shard_server.h).
std::string updateRule(const ModelSpec& spec);

// data.augment as one line: "random_crop 4 flip_left_right brightness 0.25
// contrast [0.2, 1.8]" (what is set, in the order it is made), or "none".
std::string augmentationText(const Augmentation& augment);

// A shuffle buffer as words: "through a buffer of 1000 from 8 files at a
// time, the files shuffled every epoch" (the last two where set).
std::string shuffleBufferText(const ShuffleBuffer& buffer);

// How a worker reads its share of the training data, as one line
// ("batch_size 100, seed 1, shuffled", then the shuffle buffer,
// shard_by_worker, the training set's limit, augment, training images of
// their own sizes and their resize method, and standardize where set):
// every worker takes every n-th batch of one epoch order, or its share of
// the examples, which these decide, distorts each image from (seed, epoch,
// position) and standardizes it.
std::string dataRule(const ModelSpec& spec);

// What every node of a job must agree on: a ps refuses a worker whose spec
// differs in any (rpc/shard_service.h); and, from the chief, where it
// checkpoints the job (absolute, through no link, without a trailing
// separator: one spelling of the directory; empty: nowhere), by which a ps tells a
// chief of another job on its ports from its own; and, from a worker, its
// training set as it read it (contentText of core/dataset.h, added once
// loaded; empty from specIdentity), which a ps takes from the chief that
// initialises it and holds every worker to: the spec names files, and
// another host's files of those names may hold other examples.
struct SpecIdentity {
  std::string architecture_hash;
  std::string forward_rule;
  std::string update_rule;
  std::string data_rule;
  std::string checkpoint_dir;
  std::string training_set;
};
SpecIdentity specIdentity(const ModelSpec& spec);

// What a run's log says of its checkpoints as it starts: "checkpoints in
// /srv/ckpt every 600 steps and at the end, keeping the newest 5", or that
// there are none
// (an empty checkpoint.dir, as --checkpoint-dir '' gives).
std::string describeCheckpoints(const CheckpointSpec& checkpoint);

// Where a run's TensorBoard summaries go: training.summary_dir, else
// <checkpoint.dir>/summaries, else "" (none). Read after flags and the cluster
// spec have set the checkpoint directory.
std::string summaryDirectory(const ModelSpec& spec);

}  // namespace traind
