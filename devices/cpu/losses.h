// The losses, on a batch of output vectors [n, k] in row-major order. Each
// returns the mean loss over the batch and, when `grad` is not null, writes
// the gradient of that mean with respect to the outputs.
#pragma once

#include <cstdint>

#include "devices/device.h"

namespace traind {

// -sum_j t_j log softmax(logits)_j with targets t = (1 - smoothing)
// one_hot(label) + smoothing / k (smoothing 0: -log softmax(logits)[label]),
// computed through log-sum-exp so that large logits cannot overflow. correct
// counts rows whose first arg-max is the label. Throws InputError for a
// label outside [0, k).
StepResult softmaxCrossEntropy(const float* logits, int64_t n, int64_t k, const int32_t* labels,
                               float label_smoothing, float* grad);

// TensorFlow's mean squared error: the mean of (output - target)^2 over the
// batch and the outputs. correct is 0.
StepResult meanSquaredError(const float* outputs, int64_t n, int64_t k, const float* targets,
                            float* grad);

}  // namespace traind
