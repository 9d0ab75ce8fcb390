// The optimizer's update of one step as a ParameterUpdate, for
// Replica::trainStepAndUpdate:
//
//   OptimizerUpdate update(state.optimizer(), state.parameters(), gradients,
//                          learningRateAt(spec.learning_rate, step), step + 1);
//   replica->trainStepAndUpdate(batch, state.parameters().data(), gradients.data(), step, update);
#pragma once

#include "core/optimizer.h"
#include "devices/device.h"

namespace traind {

class OptimizerUpdate final : public ParameterUpdate {
 public:
  // `update` is the update's 1-based number (Optimizer::apply).
  OptimizerUpdate(Optimizer& optimizer, FlatBuffer& parameters, const FlatBuffer& gradients,
                  float learning_rate, int64_t update)
      : optimizer_(optimizer),
        parameters_(parameters),
        gradients_(gradients),
        learning_rate_(learning_rate),
        update_(update) {}

  void applyAll() override {
    optimizer_.apply(parameters_, gradients_, learning_rate_, update_);
  }
  void applyRange(size_t variable, int64_t offset, int64_t count) override {
    optimizer_.applyRange(parameters_.data() + offset, variable, offset, count,
                          gradients_.data() + offset, learning_rate_, update_);
  }

 private:
  Optimizer& optimizer_;
  FlatBuffer& parameters_;
  const FlatBuffer& gradients_;
  float learning_rate_;
  int64_t update_;
};

}  // namespace traind
