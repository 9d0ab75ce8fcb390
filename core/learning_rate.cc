#include "core/learning_rate.h"

#include <cmath>

namespace traind {

float learningRateAt(const LearningRateSpec& spec, int64_t global_step) {
  switch (spec.kind) {
    case LearningRateSpec::Kind::Constant:
      return spec.initial;
    case LearningRateSpec::Kind::ExponentialDecay: {
      double exponent = double(global_step) / double(spec.decay_steps);
      if (spec.staircase) exponent = std::floor(exponent);
      return float(spec.initial * std::pow(double(spec.decay_rate), exponent));
    }
  }
  return spec.initial;
}

}  // namespace traind
