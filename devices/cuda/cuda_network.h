// A model's forward pass, loss and backward pass on one GPU, over device
// buffers: the core that the CUDA Replica (host buffers, cuda_replica.h) and
// the device-resident trainer (cuda_trainer.h) share. It only enqueues work
// on its context's stream; the callers copy, synchronise and capture.
//
//   CudaContext context(0);
//   CudaNetwork network(context, graph, layout, 100, seed, d_params, d_grads, d_scalars, 100);
//   // ... copy a batch to network.input() and network.labels(), the step to *d_scalars
//   network.enqueueTrainStep();  // d_grads: the batch-mean gradient; sums(): the loss
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "devices/cuda/cuda_layer.h"
#include "devices/device.h"

namespace traind {

class CudaNetwork {
 public:
  // parameters, gradients: device flat buffers of `layout` (owned by the
  // caller); scalars: the device StepScalars the dropout layers read.
  // gradient_batch: the examples the gradient is a mean over: batch_size,
  // or the whole batch when towers sum their gradients.
  CudaNetwork(CudaContext& context, const LayerGraph& graph, const VariableLayout& layout,
              int64_t batch_size, uint64_t seed, const float* parameters, float* gradients,
              const StepScalars* scalars, int64_t gradient_batch);

  int64_t batchSize() const { return batch_size_; }
  int64_t inputElements() const { return input_elements_; }  // of the whole batch
  int64_t outputs() const { return outputs_; }               // per example
  LossKind loss() const { return loss_; }

  // Where a batch goes on the device: [batch, input...], labels [batch]
  // (classification) or targets [batch, outputs] (regression).
  float* input() const { return input_.value; }
  int32_t* labels() const { return labels_; }
  float* targets() const { return targets_; }
  // The loss kernels' sums (device), lossSumsBytes() long.
  const LossSums* sums() const { return sums_; }

  // Forward with dropout, the loss and its gradient, backward: the batch's
  // gradients into `gradients` (frozen variables untouched). After each
  // layer's backward work is enqueued, after_backward(its index) when given:
  // work it enqueues follows that layer's gradient.
  void enqueueTrainStep(const std::function<void(size_t layer)>& after_backward = {});
  // Forward without dropout and the loss.
  void enqueueEvaluate();

  // The step's result from the sums copied back to the host.
  StepResult result(const LossSums& sums) const;

 private:
  void enqueueForwardAndLoss(bool training);

  CudaContext& context_;
  CudaArena memory_;
  LossKind loss_;
  float label_smoothing_;
  int64_t batch_size_;
  int64_t input_elements_;
  int64_t outputs_;
  float grad_scale_;
  CudaTensor input_;
  int32_t* labels_ = nullptr;
  float* targets_ = nullptr;
  LossSums* sums_ = nullptr;
  std::vector<std::unique_ptr<CudaLayer>> layers_;
  size_t first_backward_;  // as CpuReplica's
};

// The labels of a batch checked on the host, with the CPU back end's
// message: the device kernels trust them.
void checkLabels(const int32_t* labels, int64_t n, int64_t k);

}  // namespace traind
