#include "daemon/evaluation.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace traind {

Evaluator::Evaluator(Device& device, const LayerGraph& graph, const VariableLayout& layout,
                     const Dataset& data, int64_t batch_size, uint64_t seed)
    : data_(data) {
  const int64_t batch = std::min(batch_size, data.size);
  inputs_.resize(size_t(batch * numElements(data.inputShape())));
  full_ = device.createReplica(graph, layout, batch, seed);
  if (const int64_t rest = data.size % batch; rest != 0)
    tail_ = device.createReplica(graph, layout, rest, seed);
}

EvalResult Evaluator::evaluate(const float* parameters) {
  EvalResult result;
  double loss_sum = 0.0;
  int64_t correct = 0;
  for (int64_t begin = 0; begin < data_.size;) {
    Replica& replica = data_.size - begin >= full_->batchSize() ? *full_ : *tail_;
    const int64_t n = replica.batchSize();
    const StepResult r = replica.evaluate(sliceBatch(data_, begin, n, inputs_.data()), parameters);
    loss_sum += r.loss * double(n);
    correct += r.correct;
    begin += n;
  }
  result.examples = data_.size;
  result.loss = loss_sum / double(data_.size);
  result.accuracy = double(correct) / double(data_.size);
  return result;
}

void warnIfNothingToEvaluate(const ModelSpec& spec, bool has_test_set) {
  if (has_test_set || spec.training.eval_every <= 0) return;
  spdlog::warn(
      "training.eval_every (or --eval-every) is {}, but the spec names no test set (data.test): "
      "this run evaluates nothing",
      spec.training.eval_every);
}

}  // namespace traind
