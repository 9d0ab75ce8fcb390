// Learning-rate schedules, read off the global step (the job's clock).
#pragma once

#include <cstdint>
#include <string>

#include "core/model_spec.h"

namespace traind {

// The rate of the update that global_step's step makes (the step before it
// is counted), as TensorFlow 1's schedule of that name gives it, with p =
// step / decay_steps:
//   exponential_decay    initial * decay_rate^p               (staircase: p floored)
//   inverse_time_decay   initial / (1 + decay_rate * p)       (staircase: p floored)
//   piecewise_constant   values[i] for boundaries[i-1] < step <= boundaries[i]
//   polynomial_decay     (initial - end) * (1 - p)^power + end, p at most 1; with
//                        cycle decay_steps grows to the next multiple of itself
//   cosine_decay         initial * ((1 - alpha) * (1 + cos(pi * p)) / 2 + alpha), p at most 1
float learningRateAt(const LearningRateSpec& spec, int64_t global_step);

// The schedule in words, with every number in it: "0.1", "0.1 decayed by
// 0.96 every 1000 steps (staircase)", "0.1, 0.01 after step 100". Nodes
// compare it (in updateRule) to know they read one spec.
std::string describeLearningRate(const LearningRateSpec& spec);

}  // namespace traind
