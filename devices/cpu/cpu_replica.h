// A model replica on the CPU: the layer graph as one LayerChain, all oneDNN
// primitives and buffers made in the constructor. A step binds the caller's
// buffers, runs every layer forward, the loss, and the layers that have
// backward work in reverse. (A pipeline stage of some of the layers is a
// CpuStage, devices/cpu/cpu_stage.h.)
#pragma once

#include <oneapi/dnnl/dnnl.hpp>
#include <optional>

#include "devices/cpu/bound_memory.h"
#include "devices/cpu/cpu_layer.h"
#include "devices/cpu/layer_chain.h"
#include "devices/cpu/primitive_set.h"
#include "devices/device.h"

namespace traind {

class CpuReplica : public Replica {
 public:
  // threads > 0 sets OpenMP's thread count for building and for every step
  // (OpenMP keeps it per calling thread, and steps may run on another thread
  // than the one that built the replica).
  CpuReplica(const dnnl::engine& engine, const LayerGraph& graph, const VariableLayout& layout,
             int64_t batch_size, uint64_t seed, int threads);

  int64_t batchSize() const override { return batch_size_; }
  StepResult trainStep(const Batch& batch, const float* parameters, float* gradients,
                       uint64_t step) override;
  // After each layer's backward: that layer's variables and every later
  // layer's are final.
  StepResult trainStepWithProgress(const Batch& batch, const float* parameters, float* gradients,
                                   uint64_t step, GradientProgress& progress) override;
  StepResult evaluate(const Batch& batch, const float* parameters) override;

 private:
  // Forward and loss; the loss gradient goes to the last output's grad when
  // `training_step` is set and a backward pass follows.
  StepResult forwardAndLoss(const Batch& batch, const float* parameters, float* gradients,
                            std::optional<uint64_t> training_step);

  LossKind loss_;
  float label_smoothing_;
  int64_t batch_size_;
  int64_t outputs_;  // per example
  int threads_;
  dnnl::stream stream_;
  PrimitiveSet primitives_;
  BoundMemory memory_;
  CpuTensor input_;
  std::optional<LayerChain> layers_;  // built in the constructor's body, after input_
};

}  // namespace traind
