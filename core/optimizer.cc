#include "core/optimizer.h"

#include <cmath>

namespace traind {

Optimizer::Optimizer(const OptimizerSpec& spec, const VariableLayout& layout)
    : spec_(spec), layout_(layout) {
  switch (spec.kind) {
    case OptimizerSpec::Kind::Sgd: break;
    case OptimizerSpec::Kind::Momentum: slot_names_ = {"momentum"}; break;
    case OptimizerSpec::Kind::Adagrad: slot_names_ = {"accumulator"}; break;
    case OptimizerSpec::Kind::Adam: slot_names_ = {"m", "v"}; break;
  }
  for (size_t i = 0; i < slot_names_.size(); ++i) slots_.emplace_back(layout.totalSize());
  if (spec.kind == OptimizerSpec::Kind::Adagrad) {
    float* a = slots_[0].data();
    for (int64_t i = 0; i < layout.totalSize(); ++i) a[i] = spec.initial_accumulator;
  }
}

void Optimizer::apply(FlatBuffer& parameters, const FlatBuffer& gradients, float learning_rate,
                      int64_t update) {
  const OptimizerSpec s = spec_;
  const float lr = learning_rate;
  // Adam's bias correction folded into the step size, as TensorFlow does.
  const float adam_lr = float(lr * std::sqrt(1.0 - std::pow(double(s.beta2), double(update))) /
                              (1.0 - std::pow(double(s.beta1), double(update))));
  float* slot0 = slots_.size() > 0 ? slots_[0].data() : nullptr;
  float* slot1 = slots_.size() > 1 ? slots_[1].data() : nullptr;

  // One parallel region for the whole buffer: variables are split over the
  // threads in turn, with no barrier between them.
#pragma omp parallel
  for (const VariableView& v : layout_.views()) {
    if (!v.trainable) continue;
    float* p = parameters.data() + v.offset;
    const float* g = gradients.data() + v.offset;
    float* a = slot0 ? slot0 + v.offset : nullptr;
    float* b = slot1 ? slot1 + v.offset : nullptr;
    const float wd = v.is_kernel ? s.weight_decay : 0.0f;
    const int64_t n = v.size;
    switch (s.kind) {
      case OptimizerSpec::Kind::Sgd:
#pragma omp for simd schedule(static) nowait
        for (int64_t i = 0; i < n; ++i) p[i] -= lr * (g[i] + wd * p[i]);
        break;
      case OptimizerSpec::Kind::Momentum:
#pragma omp for simd schedule(static) nowait
        for (int64_t i = 0; i < n; ++i) {
          const float gi = g[i] + wd * p[i];
          a[i] = s.momentum * a[i] + gi;
          p[i] -= s.nesterov ? lr * (gi + s.momentum * a[i]) : lr * a[i];
        }
        break;
      case OptimizerSpec::Kind::Adagrad:
#pragma omp for simd schedule(static) nowait
        for (int64_t i = 0; i < n; ++i) {
          const float gi = g[i] + wd * p[i];
          a[i] += gi * gi;
          p[i] -= lr * gi / (std::sqrt(a[i]) + s.epsilon);
        }
        break;
      case OptimizerSpec::Kind::Adam:
#pragma omp for simd schedule(static) nowait
        for (int64_t i = 0; i < n; ++i) {
          const float gi = g[i] + wd * p[i];
          a[i] = s.beta1 * a[i] + (1.0f - s.beta1) * gi;
          b[i] = s.beta2 * b[i] + (1.0f - s.beta2) * gi * gi;
          p[i] -= adam_lr * a[i] / (std::sqrt(b[i]) + s.epsilon);
        }
        break;
    }
  }
}

}  // namespace traind
