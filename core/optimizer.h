// Optimizers over flat buffers. The update rules are TensorFlow's (which of
// its optimizers of a name, where they differ: docs/model-spec.md, "Which
// TensorFlow optimizer"):
//   sgd       p -= lr * g
//   momentum  a = m * a + g;  p -= lr * a            (nesterov: p -= lr * (g + m * a))
//   adagrad   a += g^2;       p -= lr * g / (sqrt(a) + eps)   (a starts at initial_accumulator)
//   adam      m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//             p -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)
//   rmsprop   r += (g^2 - r) (1 - rho);  a = momentum * a + lr * g / sqrt(r + eps);  p -= a
//             (r starts at initial_rms; centered: c += (g - c) (1 - rho), and
//             the root is of r - c^2 + eps)
// with g += weight_decay * p first for kernels (L2; a layer's own decay in
// place of the optimizer's: weightDecayOf). Frozen variables are
// never touched. A parameter server applies the same rules to its shard.
// With a moving average (MovingAverageSpec) each update also moves the
// slot "ExponentialMovingAverage" towards the updated values.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/model_spec.h"
#include "core/variable_layout.h"

namespace traind {

// Where Optimizer::applyRange copies the new values to, if anywhere, and how.
struct UpdateCopyOut {
  float* values = nullptr;
  bool around_caches = false;
};

// ExponentialMovingAverage's decay at update `update` (1-based; with
// num_updates, min(decay, (1 + t) / (10 + t)), TensorFlow's rule).
float movingAverageDecay(const MovingAverageSpec& spec, int64_t update);

class Optimizer {
 public:
  Optimizer(const OptimizerSpec& spec, const VariableLayout& layout);

  // Slot names as they appear in checkpoints, "<variable>/<slot>":
  // momentum: "momentum"; adagrad: "accumulator"; adam: "m", "v"; rmsprop:
  // "rms", "momentum" and, centered, "mg" (TensorFlow 1's names); sgd: none;
  // then "ExponentialMovingAverage" (kMovingAverageSlot) with a moving average.
  const std::vector<std::string>& slotNames() const { return slot_names_; }
  // The same, for a spec, before any optimizer holds them.
  static std::vector<std::string> slotNamesOf(const OptimizerSpec& spec);
  // Whether a slot holds sums of squares ("accumulator", "v", "rms"): never below
  // 0, and a square root of one that is would be NaN.
  static bool slotIsSumOfSquares(const std::string& name);
  // For slot values read from a file: InputError naming the file and the
  // tensor when slot `name` is a sum of squares and holds a value below 0.
  // No run writes one (the file is corrupt), and a resumed run would take
  // its square root and diverge a few steps later, blaming the learning rate.
  static void checkReadSlot(const std::string& name, std::span<const float> values,
                            const std::string& file, const std::string& tensor);
  FlatBuffer& slot(size_t i) { return slots_[i]; }
  const FlatBuffer& slot(size_t i) const { return slots_[i]; }

  static constexpr const char* kMovingAverageSlot = "ExponentialMovingAverage";
  // The moving averages (the last slot), or null without a moving average.
  const FlatBuffer* movingAverage() const;
  // The averages start at the variables' values (as TensorFlow's do); for
  // the given variables only, or all.
  void startMovingAverage(const FlatBuffer& parameters);
  void startMovingAverage(const FlatBuffer& parameters, const VariableView& variable);

  // One update of every trainable variable. `update` is this update's
  // 1-based number (Adam's t); in standalone training it is global_step + 1.
  void apply(FlatBuffer& parameters, const FlatBuffer& gradients, float learning_rate,
             int64_t update);

  // The same update on elements [offset, offset + count) of the slots, all
  // inside variable `variable` of the layout, from `gradients` (count floats),
  // to `parameters`: those count elements' values, wherever they live. A
  // parameter server applies each gradient chunk this way, on one thread, to
  // the chunk's copy-on-write values. `copy_out.values`, when not null,
  // receives the count new values as well (a worker's shared memory region):
  //   - in the same pass over memory as the update, so that the copy costs
  //     no second read of the parameters;
  //   - or, with `around_caches`, 1 KiB at a time right after they are
  //     computed, with stores that go around this core's caches
  //     (core/streaming_store.h): for a shard too big to stay in them,
  //     where the region's lines would only push the parameters out.
  // Either way they are visible to other threads and processes on return.
  void applyRange(float* parameters, size_t variable, int64_t offset, int64_t count,
                  const float* gradients, float learning_rate, int64_t update,
                  UpdateCopyOut copy_out = {});

 private:
  OptimizerSpec spec_;
  const VariableLayout& layout_;
  std::vector<std::string> slot_names_;
  std::vector<FlatBuffer> slots_;
  size_t rule_slots_ = 0;  // the update rule's slots, before the moving average
};

}  // namespace traind
