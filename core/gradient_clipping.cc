#include "core/gradient_clipping.h"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "core/error.h"

namespace traind {
namespace {

// Below this many elements a variable is summed on the calling thread: a
// parallel region costs more than it saves.
constexpr int64_t kParallelElements = 1 << 16;

}  // namespace

double clipByGlobalNorm(float* gradients, const float* parameters, const VariableLayout& layout,
                        float clip_norm, float weight_decay, int64_t global_step) {
  // Squares summed in double: millions of float squares would lose the
  // small ones.
  double sum = 0.0;
  for (const VariableView& v : layout.views()) {
    if (!v.trainable) continue;
    const float decay = weightDecayOf(v, weight_decay);
    const float* g = gradients + v.offset;
    const float* p = parameters + v.offset;
#pragma omp parallel for simd reduction(+ : sum) if (v.size >= kParallelElements)
    for (int64_t i = 0; i < v.size; ++i) {
      const float x = g[i] + decay * p[i];
      sum += double(x) * double(x);
    }
  }
  const double norm = std::sqrt(sum);
  if (!std::isfinite(norm))
    throw Diverged(fmt::format(
        "step {}: the gradient's global norm is {}; lower the learning rate or check the data",
        global_step, norm));
  if (norm <= clip_norm) return norm;

  const float scale = float(double(clip_norm) / norm);
  for (const VariableView& v : layout.views()) {
    if (!v.trainable) continue;
    const float decay_share = (scale - 1.0f) * weightDecayOf(v, weight_decay);
    float* g = gradients + v.offset;
    const float* p = parameters + v.offset;
#pragma omp parallel for simd if (v.size >= kParallelElements)
    for (int64_t i = 0; i < v.size; ++i) g[i] = scale * g[i] + decay_share * p[i];
  }
  return norm;
}

}  // namespace traind
