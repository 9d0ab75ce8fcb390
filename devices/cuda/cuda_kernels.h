// The CUDA back end's own kernels (cuda_kernels.cu, the one file nvcc
// compiles): activations, bias gradients, dropout, pooling, convolution
// patches, losses, the optimizer update and the tower reduction. Everything
// else is cuBLAS and NCCL. Each function only enqueues work on `stream` (no
// synchronising, no allocation), so a whole step can be captured as one
// CUDA graph, and checks the launch.
//
// Tensors are the canonical row-major layouts of the CPU back end: images
// NHWC, vectors [batch, features]. A per-channel bias of an image is a bias
// over the columns of the [batch * height * width, channels] matrix.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/model_spec.h"

namespace traind {

// Per-step values read by kernels from device memory, so that a captured
// graph sees each step's own (one copy from pinned memory per step).
struct StepScalars {
  uint64_t step = 0;            // seeds dropout
  float learning_rate = 0.0f;   // sgd, momentum, adagrad, rmsprop
  float adam_step_size = 0.0f;  // adam: lr with the bias correction folded in
  float average_decay = 0.0f;   // the moving average's decay at this update
};

// A loss kernel's sums over its rows: the loss (softmax cross-entropy: the
// sum of the examples' losses; mean squared error: of the squared
// differences) and the examples whose first arg-max is the label.
struct LossSums {
  double loss = 0.0;
  long long correct = 0;
};
// A loss kernel writes its LossSums at the start of a zeroed device
// allocation of lossSumsBytes(), the rest being its per-block sums (at most
// kMaxLossBlocks blocks of 256 rows) and a counter it leaves at zero.
constexpr int64_t kMaxLossBlocks = 1024;
size_t lossSumsBytes();

// y = activation(y + bias[column]) on a [rows, cols] matrix; bias may be null.
void biasActivationForward(cudaStream_t stream, float* y, const float* bias, int64_t rows,
                           int64_t cols, Activation activation);

// y = activation(x), elementwise; x == y allowed.
void activationForward(cudaStream_t stream, const float* x, float* y, int64_t n,
                       Activation activation);

// dx = dy * activation'(y), from the activation's output y; dx == dy allowed.
void activationBackward(cudaStream_t stream, const float* y, const float* dy, float* dx, int64_t n,
                        Activation activation);

// Floats of workspace biasGradient needs for a [rows, cols] matrix.
int64_t biasGradientWorkspace(int64_t rows, int64_t cols);

// dy = dy * activation'(y) in place (nothing for Linear), then, when db is
// not null, db[c] = the sum of column c of dy: a tree reduction over row
// blocks, then over the blocks' partial sums in `workspace`. Deterministic.
void biasGradient(cudaStream_t stream, const float* y, float* dy, float* db, float* workspace,
                  int64_t rows, int64_t cols, Activation activation);

// Inverted dropout with the CPU back end's mask: element i (canonical
// order) is dropped when uniformFloat(hashCombine(seed, hashCombine(step,
// layer)), i) < rate, else scaled by keep = 1 / (1 - rate). The step is
// read from scalars->step.
void dropoutForward(cudaStream_t stream, const float* x, float* y, int64_t n, float rate,
                    float keep, uint64_t seed, uint64_t layer, const StepScalars* scalars);
// dx = dy * mask, the mask of the same step recomputed.
void dropoutBackward(cudaStream_t stream, const float* dy, float* dx, int64_t n, float rate,
                     float keep, uint64_t seed, uint64_t layer, const StepScalars* scalars);

// A sliding window's geometry over NHWC images, a convolution's or a
// pooling's: one input image, its output grid, the window, the strides and
// the padding before the first row and column (TensorFlow's SAME: the odd
// pixel goes after the last).
struct WindowShape {
  int h = 0, w = 0, c = 0;  // one input image
  int oh = 0, ow = 0;       // its output grid
  int kh = 0, kw = 0, sh = 0, sw = 0;
  int pad_top = 0, pad_left = 0;
};

// An NHWC pooling with TensorFlow's semantics: padding never wins a max,
// an average counts the real pixels of its window only.
struct PoolShape : WindowShape {
  int n = 0;  // images
  bool max = true;
};
// argmax (max pooling only, else null): the input pixel (y * w + x) each
// output took its maximum from, for the backward pass.
void poolForward(cudaStream_t stream, const PoolShape& shape, const float* x, float* y,
                 int32_t* argmax);
// dx from dy, each input pixel gathering from the windows that hold it (no
// atomics: deterministic).
void poolBackward(cudaStream_t stream, const PoolShape& shape, const float* dy, float* dx,
                  const int32_t* argmax);

// The images' patches as the rows of a matrix (im2col): for `count` images
// from x ([count, h, w, c]), row (i * oh + oy) * ow + ox, column
// (ky * kw + kx) * c + ci holds x[i, oy * sh - pad_top + ky,
// ox * sw - pad_left + kx, ci], zero outside the image. The columns are in
// the order of the rows of the canonical HWIO kernel, so the kernel's
// gradient is patches^T x dy. At most 2^31 - 2^24 floats in `patches`
// (indices count in 32 bits).
void imagePatches(cudaStream_t stream, const WindowShape& shape, const float* x, int count,
                  float* patches);
// The reverse (col2im) for the input gradient: dx[i, y, x, ci] = the sum of
// the entries of `patches` that imagePatches would have read from that
// pixel, each pixel gathering in a fixed order (deterministic). At most
// 2^31 - 2^24 floats in `patches` and in dx's `count` images.
void patchesToImage(cudaStream_t stream, const WindowShape& shape, const float* patches, int count,
                    float* dx);

// Softmax cross-entropy over [n, k] logits, in double, through log-sum-exp,
// against targets (1 - label_smoothing) one_hot(label) + label_smoothing / k
// (devices/cpu/losses.h). grad (may be null) = (softmax - targets) *
// grad_scale. Labels must be in [0, k) (checked on the host). Writes *sums
// (one block: deterministic).
void softmaxCrossEntropy(cudaStream_t stream, const float* logits, int64_t n, int64_t k,
                         const int32_t* labels, float label_smoothing, float* grad,
                         float grad_scale, LossSums* sums);

// Mean squared error's sums over [n, k]; grad (may be null) =
// 2 * (output - target) * grad_scale.
void meanSquaredError(cudaStream_t stream, const float* outputs, int64_t n, int64_t k,
                      const float* targets, float* grad, float grad_scale, LossSums* sums);

// A slice of a flat buffer that one block of the optimizer kernel updates:
// inside one trainable variable, with that variable's weight decay.
struct UpdateChunk {
  int64_t begin = 0;
  int64_t end = 0;
  float weight_decay = 0.0f;
};

// core/optimizer.cc's update rules on every chunk, in one launch; lr and
// Adam's step size are read from *scalars. slot0-slot2 as Optimizer's slots
// (null past the rule's);
// `average`, when not null, the moving averages, moved towards the updated
// values with scalars->average_decay.
void optimizerUpdate(cudaStream_t stream, const OptimizerSpec& spec, float* parameters,
                     const float* gradients, float* slot0, float* slot1, float* slot2,
                     float* average, const UpdateChunk* chunks, int64_t chunk_count,
                     const StepScalars* scalars);

// dst[i] += src[i]: the gradients of towers that share a GPU, summed.
void addInto(cudaStream_t stream, float* dst, const float* src, int64_t n);

// x[i] = value.
void fill(cudaStream_t stream, float* x, int64_t n, float value);

}  // namespace traind
