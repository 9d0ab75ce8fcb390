// A model replica on one GPU behind the Replica interface: parameters come
// from, and gradients go to, the caller's host buffers, through pinned
// staging buffers copied asynchronously on the replica's stream. The whole
// step (copies, forward, loss, backward, copies back) is one CUDA graph after
// two warm-up steps. For training that keeps everything on the GPU, see
// cuda_trainer.h.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "devices/cuda/cuda_graph.h"
#include "devices/cuda/cuda_network.h"
#include "devices/device.h"

namespace traind {

class CudaReplica : public Replica {
 public:
  CudaReplica(int device, const LayerGraph& graph, const VariableLayout& layout, int64_t batch_size,
              uint64_t seed);

  int64_t batchSize() const override { return network_->batchSize(); }
  StepResult trainStep(const Batch& batch, const float* parameters, float* gradients,
                       uint64_t step) override;
  StepResult evaluate(const Batch& batch, const float* parameters) override;

 private:
  // Checks the batch and copies it and the parameters into the staging buffers.
  void stage(const Batch& batch, const float* parameters, uint64_t step);
  // The staged inputs to the device (enqueued).
  void enqueueUploads();

  int device_;
  int64_t parameter_count_;
  // The trainable variables' [offset, offset + size): what trainStep writes.
  std::vector<std::pair<int64_t, int64_t>> trainable_;
  CudaContext context_;
  DeviceArray<float> parameters_;
  DeviceArray<float> gradients_;
  DeviceArray<StepScalars> scalars_;
  std::unique_ptr<CudaNetwork> network_;
  PinnedArray<float> staged_parameters_;
  PinnedArray<float> staged_gradients_;
  PinnedArray<float> staged_inputs_;
  PinnedArray<int32_t> staged_labels_;
  PinnedArray<float> staged_targets_;
  PinnedArray<StepScalars> staged_scalars_;
  PinnedArray<LossSums> staged_sums_;
  CapturedWork train_step_{2};
  CapturedWork evaluation_{2};
};

}  // namespace traind
