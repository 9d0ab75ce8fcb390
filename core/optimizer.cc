#include "core/optimizer.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/printable.h"
#include "core/streaming_store.h"

namespace traind {

std::vector<std::string> Optimizer::slotNamesOf(const OptimizerSpec& spec) {
  std::vector<std::string> names;
  switch (spec.kind) {
    case OptimizerSpec::Kind::Sgd: break;
    case OptimizerSpec::Kind::Momentum:
      names = {"momentum"};
      break;
    case OptimizerSpec::Kind::Adagrad:
      names = {"accumulator"};
      break;
    case OptimizerSpec::Kind::Adam:
      names = {"m", "v"};
      break;
    case OptimizerSpec::Kind::RmsProp:
      names = {"rms", "momentum"};
      if (spec.centered) names.push_back("mg");
      break;
  }
  if (spec.moving_average) names.push_back(kMovingAverageSlot);
  return names;
}

bool Optimizer::slotIsSumOfSquares(const std::string& name) {
  return name == "accumulator" || name == "v" || name == "rms";
}

void Optimizer::checkReadSlot(const std::string& name, std::span<const float> values,
                              const std::string& file, const std::string& tensor) {
  if (!slotIsSumOfSquares(name)) return;
  const auto negative = std::find_if(values.begin(), values.end(), [](float x) { return x < 0; });
  if (negative != values.end())
    throw InputError(fmt::format(
        "{}: tensor {}: element {} is {}: expected values >= 0 (a sum of squares; the file is "
        "corrupt)",
        file, quotedPrintable(tensor), negative - values.begin(), *negative));
}

Optimizer::Optimizer(const OptimizerSpec& spec, const VariableLayout& layout)
    : spec_(spec), layout_(layout), slot_names_(slotNamesOf(spec)) {
  rule_slots_ = slot_names_.size() - (spec.moving_average ? 1 : 0);
  for (size_t i = 0; i < slot_names_.size(); ++i) slots_.emplace_back(layout.totalSize());
  if (spec.kind == OptimizerSpec::Kind::Adagrad)
    std::fill_n(slots_[0].data(), layout.totalSize(), spec.initial_accumulator);
  if (spec.kind == OptimizerSpec::Kind::RmsProp)
    std::fill_n(slots_[0].data(), layout.totalSize(), spec.initial_rms);
}

namespace {

// Adam's bias correction folded into the step size, as TensorFlow does.
float adamStepSize(const OptimizerSpec& s, float lr, int64_t update) {
  return float(lr * std::sqrt(1.0 - std::pow(double(s.beta2), double(update))) /
               (1.0 - std::pow(double(s.beta1), double(update))));
}

// applyRange streams its copy out in blocks of this many floats (1 KiB).
// Small blocks keep the non-temporal stores interleaved with the update's
// loads: a ps's push of the wide MLP (bench/ps_update_load, alone) took
// 0.41-0.57 ms with blocks of 256 floats, 0.43-0.72 with 128, 0.54-0.99
// with 2048, and 0.47-0.73 with ordinary stores in one pass.
constexpr int64_t kStreamingBlock = 256;

// The update rule's slots (before the moving average), from the same
// element on; null where the rule has fewer.
struct RuleSlots {
  float* a = nullptr;
  float* b = nullptr;
  float* c = nullptr;

  RuleSlots at(int64_t offset) const {
    return {a ? a + offset : nullptr, b ? b + offset : nullptr, c ? c + offset : nullptr};
  }
};

// The first `count` slots of an optimizer's, as RuleSlots.
RuleSlots ruleSlots(std::vector<FlatBuffer>& slots, size_t count) {
  return {count > 0 ? slots[0].data() : nullptr, count > 1 ? slots[1].data() : nullptr,
          count > 2 ? slots[2].data() : nullptr};
}

// The update rule on n elements.
// With kCopyOut each new value also goes to out[i] in the same pass, so a
// copy of the result costs no second read of p. A template argument, not a
// test of out in the loop: the loops without a copy stay as they were.
template <bool kCopyOut>
void updateElements(const OptimizerSpec& s, float* p, const float* g, RuleSlots slots, float* out,
                    int64_t n, float lr, float adam_lr, float wd) {
  // The rule's constants in locals: read through `s` in the loops, each
  // store to the arrays could change them as far as the compiler knows, and
  // some loops stayed scalar.
  const float momentum = s.momentum, beta1 = s.beta1, beta2 = s.beta2, epsilon = s.epsilon;
  const float one_minus_rho = 1.0f - s.rho;
  const bool nesterov = s.nesterov;
  float* const a = slots.a;
  float* const b = slots.b;
  float* const c = slots.c;
  switch (s.kind) {
    case OptimizerSpec::Kind::Sgd:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        const float v = p[i] - lr * (g[i] + wd * p[i]);
        p[i] = v;
        if constexpr (kCopyOut) out[i] = v;
      }
      break;
    case OptimizerSpec::Kind::Momentum:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        const float gi = g[i] + wd * p[i];
        const float ai = momentum * a[i] + gi;
        a[i] = ai;
        const float v = p[i] - (nesterov ? lr * (gi + momentum * ai) : lr * ai);
        p[i] = v;
        if constexpr (kCopyOut) out[i] = v;
      }
      break;
    case OptimizerSpec::Kind::Adagrad:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        const float gi = g[i] + wd * p[i];
        const float ai = a[i] + gi * gi;
        a[i] = ai;
        const float v = p[i] - lr * gi / (std::sqrt(ai) + epsilon);
        p[i] = v;
        if constexpr (kCopyOut) out[i] = v;
      }
      break;
    case OptimizerSpec::Kind::Adam:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        const float gi = g[i] + wd * p[i];
        const float ai = beta1 * a[i] + (1.0f - beta1) * gi;
        const float bi = beta2 * b[i] + (1.0f - beta2) * gi * gi;
        a[i] = ai;
        b[i] = bi;
        const float v = p[i] - adam_lr * ai / (std::sqrt(bi) + epsilon);
        p[i] = v;
        if constexpr (kCopyOut) out[i] = v;
      }
      break;
    // TensorFlow's ApplyRMSProp and ApplyCenteredRMSProp, in their order of
    // operations: r + (g^2 - r)(1 - rho), not rho r + (1 - rho) g^2.
    case OptimizerSpec::Kind::RmsProp:
      if (!c) {
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) {
          const float gi = g[i] + wd * p[i];
          const float ri = a[i] + (gi * gi - a[i]) * one_minus_rho;
          const float bi = momentum * b[i] + lr * gi / std::sqrt(ri + epsilon);
          a[i] = ri;
          b[i] = bi;
          const float v = p[i] - bi;
          p[i] = v;
          if constexpr (kCopyOut) out[i] = v;
        }
      } else {
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) {
          const float gi = g[i] + wd * p[i];
          const float ri = a[i] + (gi * gi - a[i]) * one_minus_rho;
          const float ci = c[i] + (gi - c[i]) * one_minus_rho;
          const float bi = momentum * b[i] + lr * gi / std::sqrt(ri - ci * ci + epsilon);
          a[i] = ri;
          b[i] = bi;
          c[i] = ci;
          const float v = p[i] - bi;
          p[i] = v;
          if constexpr (kCopyOut) out[i] = v;
        }
      }
      break;
  }
}

// The moving averages of n values just updated.
void averageElements(float* average, const float* p, int64_t n, float decay) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) average[i] = decay * average[i] + (1.0f - decay) * p[i];
}

}  // namespace

float movingAverageDecay(const MovingAverageSpec& m, int64_t update) {
  if (!m.num_updates) return m.decay;
  return std::min(m.decay, float(1 + update) / float(10 + update));
}

const FlatBuffer* Optimizer::movingAverage() const {
  return spec_.moving_average ? &slots_.back() : nullptr;
}

void Optimizer::startMovingAverage(const FlatBuffer& parameters) {
  for (const VariableView& v : layout_.views()) startMovingAverage(parameters, v);
}

void Optimizer::startMovingAverage(const FlatBuffer& parameters, const VariableView& variable) {
  if (!spec_.moving_average) return;
  std::copy_n(parameters.data() + variable.offset, variable.size,
              slots_.back().data() + variable.offset);
}

void Optimizer::apply(FlatBuffer& parameters, const FlatBuffer& gradients, float learning_rate,
                      int64_t update) {
  const float adam_lr = adamStepSize(spec_, learning_rate, update);
  const RuleSlots rule = ruleSlots(slots_, rule_slots_);
  float* average = spec_.moving_average ? slots_.back().data() : nullptr;
  const float decay = average ? movingAverageDecay(*spec_.moving_average, update) : 0.0f;
  // One parallel region for the whole buffer, each variable split evenly
  // over the threads, no barrier between variables.
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), thread = omp_get_thread_num();
    for (const VariableView& v : layout_.views()) {
      if (!v.trainable) continue;
      const int64_t begin = v.offset + v.size * thread / threads;
      const int64_t end = v.offset + v.size * (thread + 1) / threads;
      updateElements<false>(spec_, parameters.data() + begin, gradients.data() + begin,
                            rule.at(begin), nullptr, end - begin, learning_rate, adam_lr,
                            weightDecayOf(v, spec_.weight_decay));
      if (average)
        averageElements(average + begin, parameters.data() + begin, end - begin, decay);
    }
  }
}

void Optimizer::applyRange(float* parameters, size_t variable, int64_t offset, int64_t count,
                           const float* gradients, float learning_rate, int64_t update,
                           UpdateCopyOut copy_out) {
  const VariableView& v = layout_.views()[variable];
  float* out = copy_out.values;
  if (!v.trainable) {
    if (!out) return;
    if (copy_out.around_caches) {
      streamingCopy(out, parameters, count);
      streamingStoreFence();
    } else {
      std::copy_n(parameters, count, out);
    }
    return;
  }
  const RuleSlots rule = ruleSlots(slots_, rule_slots_).at(offset);
  const float adam_lr = adamStepSize(spec_, learning_rate, update);
  const float decay = weightDecayOf(v, spec_.weight_decay);
  if (!out) {
    updateElements<false>(spec_, parameters, gradients, rule, nullptr, count, learning_rate,
                          adam_lr, decay);
  } else if (!copy_out.around_caches) {
    updateElements<true>(spec_, parameters, gradients, rule, out, count, learning_rate, adam_lr,
                         decay);
  } else {
    // A block at a time, each streamed out while it is still in L1: the
    // compiler writes no non-temporal stores of its own, and a second pass
    // over the whole range would read it all again.
    for (int64_t at = 0; at < count; at += kStreamingBlock) {
      const int64_t n = std::min(kStreamingBlock, count - at);
      updateElements<false>(spec_, parameters + at, gradients + at, rule.at(at), nullptr, n,
                            learning_rate, adam_lr, decay);
      streamingCopy(out + at, parameters + at, n);
    }
    streamingStoreFence();
  }
  if (spec_.moving_average)
    averageElements(slots_.back().data() + offset, parameters, count,
                    movingAverageDecay(*spec_.moving_average, update));
}

}  // namespace traind
