#include "devices/cpu/losses.h"

#include <cmath>
#include <string>

#include "core/error.h"

namespace traind {

StepResult softmaxCrossEntropy(const float* logits, int64_t n, int64_t k, const int32_t* labels,
                               float label_smoothing, float* grad) {
  for (int64_t i = 0; i < n; ++i)
    if (labels[i] < 0 || labels[i] >= k)
      throw InputError("softmax_cross_entropy: label " + std::to_string(labels[i]) +
                       " of example " + std::to_string(i) + " of the batch is outside [0, " +
                       std::to_string(k) + ")");
  double loss = 0.0;
  int64_t correct = 0;
  const float inv_n = 1.0f / float(n);
  // Each target: off_target, and the label's on_target (TensorFlow's
  // onehot * (1 - s) + s / k).
  const float off_target = label_smoothing / float(k);
  const float on_target = 1.0f - label_smoothing + off_target;
#pragma omp parallel for schedule(static) reduction(+ : loss, correct)
  for (int64_t i = 0; i < n; ++i) {
    const float* row = logits + i * k;
    int64_t arg_max = 0;
    for (int64_t j = 1; j < k; ++j)
      if (row[j] > row[arg_max]) arg_max = j;
    const float max = row[arg_max];
    double sum = 0.0;
    for (int64_t j = 0; j < k; ++j) sum += std::exp(double(row[j] - max));
    const int64_t label = labels[i];
    if (label_smoothing == 0.0f) {
      loss += std::log(sum) - double(row[label] - max);
    } else {
      // The targets sum to 1: the loss is log sum - sum_j t_j (row_j - max).
      double shifted_sum = 0.0;
      for (int64_t j = 0; j < k; ++j) shifted_sum += double(row[j] - max);
      loss += std::log(sum) - double(on_target - off_target) * double(row[label] - max) -
              double(off_target) * shifted_sum;
    }
    correct += arg_max == label;
    if (grad) {
      float* g = grad + i * k;
      const double inv_sum = 1.0 / sum;
      for (int64_t j = 0; j < k; ++j)
        g[j] = (float(std::exp(double(row[j] - max)) * inv_sum) -
                (j == label ? on_target : off_target)) *
               inv_n;
    }
  }
  return {loss / double(n), correct};
}

StepResult meanSquaredError(const float* outputs, int64_t n, int64_t k, const float* targets,
                            float* grad) {
  const int64_t count = n * k;
  const float scale = 2.0f / float(count);
  double loss = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : loss)
  for (int64_t i = 0; i < count; ++i) {
    const float diff = outputs[i] - targets[i];
    loss += double(diff) * double(diff);
    if (grad) grad[i] = scale * diff;
  }
  return {loss / double(count), 0};
}

}  // namespace traind
