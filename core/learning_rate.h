// Learning-rate schedules, read off the global step (the job's clock).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace traind {

// A learning rate, constant or one of TensorFlow 1's decays of the global
// step (learningRateAt has the formulas).
struct LearningRateSpec {
  enum class Kind {
    Constant,
    ExponentialDecay,
    InverseTimeDecay,
    PiecewiseConstant,
    PolynomialDecay,
    CosineDecay,
  };
  Kind kind = Kind::Constant;
  float initial = 0.01f;              // the rate at step 0 (PiecewiseConstant: values[0])
  int64_t decay_steps = 0;            // ExponentialDecay, InverseTimeDecay, Polynomial, Cosine
  float decay_rate = 1.0f;            // ExponentialDecay, InverseTimeDecay
  bool staircase = false;             // ExponentialDecay, InverseTimeDecay
  std::vector<int64_t> boundaries;    // PiecewiseConstant: steps, increasing
  std::vector<float> values;          // PiecewiseConstant: one more than boundaries
  float end_learning_rate = 0.0001f;  // PolynomialDecay
  float power = 1.0f;                 // PolynomialDecay
  bool cycle = false;                 // PolynomialDecay
  float alpha = 0.0f;                 // CosineDecay: the last rate, a fraction of initial
};

// The rate of the update that global_step's step makes (the step before it
// is counted), as TensorFlow 1's schedule of that name gives it, with p =
// step / decay_steps:
//   exponential_decay    initial * decay_rate^p               (staircase: p floored)
//   inverse_time_decay   initial / (1 + decay_rate * p)       (staircase: p floored)
//   piecewise_constant   values[i] for boundaries[i-1] < step <= boundaries[i]
//   polynomial_decay     (initial - end) * (1 - p)^power + end, p at most 1; with
//                        cycle decay_steps stretches to its first multiple at or
//                        past the step
//   cosine_decay         initial * ((1 - alpha) * (1 + cos(pi * p)) / 2 + alpha), p at most 1
float learningRateAt(const LearningRateSpec& spec, int64_t global_step);

// The schedule in words, with every number in it: "0.1", "0.1 decayed by
// 0.96 every 1000 steps (staircase)", "0.1, 0.01 after step 100". Nodes
// compare it (in updateRule) to know they read one spec.
std::string describeLearningRate(const LearningRateSpec& spec);

}  // namespace traind
