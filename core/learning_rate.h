// Learning-rate schedules, read off the global step (the job's clock).
#pragma once

#include <cstdint>

#include "core/model_spec.h"

namespace traind {

// TensorFlow's tf.train.exponential_decay: initial * decay_rate^(step / decay_steps),
// the exponent floored when staircase.
float learningRateAt(const LearningRateSpec& spec, int64_t global_step);

}  // namespace traind
