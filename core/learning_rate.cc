#include "core/learning_rate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

namespace traind {
namespace {

// A rate as the optimizers take it. exponential_decay with a decay_rate
// above 1 grows without bound, and a double beyond float's range does not
// convert.
float asRate(double rate) {
  return float(std::min(rate, double(std::numeric_limits<float>::max())));
}

}  // namespace

float learningRateAt(const LearningRateSpec& spec, int64_t global_step) {
  using Kind = LearningRateSpec::Kind;
  const double step = double(global_step), initial = double(spec.initial);
  // The decays' p: how far along decay_steps the step is.
  const auto along = [&](double decay_steps, bool floored) {
    const double p = step / decay_steps;
    return floored ? std::floor(p) : p;
  };
  switch (spec.kind) {
    case Kind::Constant:
      return spec.initial;
    case Kind::ExponentialDecay:
      return asRate(initial * std::pow(double(spec.decay_rate),
                                       along(double(spec.decay_steps), spec.staircase)));
    case Kind::InverseTimeDecay:
      return asRate(initial / (1.0 + double(spec.decay_rate) *
                                         along(double(spec.decay_steps), spec.staircase)));
    case Kind::PiecewiseConstant: {
      // The first boundary at or past the step holds the step's value.
      const auto past =
          std::lower_bound(spec.boundaries.begin(), spec.boundaries.end(), global_step);
      return spec.values[size_t(past - spec.boundaries.begin())];
    }
    case Kind::PolynomialDecay: {
      double decay_steps = double(spec.decay_steps);
      // Cycling, decay_steps stretches to its first multiple at or past the
      // step, so the rate rises again after each multiple; step 0 is in the
      // first cycle, as in TensorFlow.
      if (spec.cycle) decay_steps *= std::max(1.0, std::ceil(step / decay_steps));
      const double p = std::min(along(decay_steps, false), 1.0);
      const double end = double(spec.end_learning_rate);
      return asRate((initial - end) * std::pow(1.0 - p, double(spec.power)) + end);
    }
    case Kind::CosineDecay: {
      const double p = std::min(along(double(spec.decay_steps), false), 1.0);
      const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * p));
      const double alpha = double(spec.alpha);
      return asRate(initial * ((1.0 - alpha) * cosine + alpha));
    }
  }
  return spec.initial;
}

std::string describeLearningRate(const LearningRateSpec& lr) {
  using Kind = LearningRateSpec::Kind;
  const char* staircase = lr.staircase ? " (staircase)" : "";
  switch (lr.kind) {
    case Kind::Constant:
      break;
    case Kind::ExponentialDecay:
      return fmt::format("{} decayed by {} every {} steps{}", lr.initial, lr.decay_rate,
                         lr.decay_steps, staircase);
    case Kind::InverseTimeDecay:
      return fmt::format("{} / (1 + {} x step / {}){}", lr.initial, lr.decay_rate, lr.decay_steps,
                         staircase);
    case Kind::PiecewiseConstant: {
      std::string text = fmt::format("{}", lr.values[0]);
      for (size_t i = 0; i < lr.boundaries.size(); ++i)
        text += fmt::format(", {} after step {}", lr.values[i + 1], lr.boundaries[i]);
      return text;
    }
    case Kind::PolynomialDecay:
      return fmt::format("{} to {} over {} steps (power {}{})", lr.initial, lr.end_learning_rate,
                         lr.decay_steps, lr.power, lr.cycle ? ", cycling" : "");
    case Kind::CosineDecay:
      return fmt::format("{} cosine-decayed over {} steps (alpha {})", lr.initial, lr.decay_steps,
                         lr.alpha);
  }
  return fmt::format("{}", lr.initial);
}

}  // namespace traind
