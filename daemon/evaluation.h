// Evaluation of the current parameters on a whole data set, in order.
#pragma once

#include <memory>
#include <vector>

#include "core/dataset.h"
#include "core/model_spec.h"
#include "devices/device.h"

namespace traind {

struct EvalResult {
  double loss = 0.0;      // mean over the examples
  double accuracy = 0.0;  // classification only
  int64_t examples = 0;
};

class Evaluator {
 public:
  // Replicas for full batches and for the last partial one are made here,
  // once; evaluate() allocates nothing.
  Evaluator(Device& device, const LayerGraph& graph, const VariableLayout& layout,
            const Dataset& data, int64_t batch_size, uint64_t seed);

  EvalResult evaluate(const float* parameters);

 private:
  const Dataset& data_;
  std::vector<float> inputs_;  // a full batch's, as floats
  std::unique_ptr<Replica> full_;
  std::unique_ptr<Replica> tail_;  // null when the batch size divides the data set
};

// Warns that nothing is evaluated before the end when training.eval_every
// (or --eval-every) asks for evaluations and the spec names no test set
// (data.test): the run evaluates nothing at all then, which the field's
// silence would hide.
void warnIfNothingToEvaluate(const ModelSpec& spec, bool has_test_set);

}  // namespace traind
