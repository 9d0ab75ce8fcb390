// A model replica on one GPU behind the Replica interface: parameters come
// from, and gradients go to, the caller's host buffers, through pinned
// staging buffers copied asynchronously on the replica's stream. The whole
// step (copies, forward, loss, backward, copies back) is one CUDA graph after
// two warm-up steps. For training that keeps everything on the GPU, see
// cuda_trainer.h.
//
// trainStepWithProgress (a worker's step: docs/distributed.md, "Gradients
// sent during backward") copies each layer's gradient back on a copy
// stream of its own as soon as the layer's backward kernels are done, and a
// host callback after each copy wakes the calling thread, which hands that
// layer's gradient to the caller while the GPU computes the layers before
// it. It is a CUDA graph of its own, captured the same way.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
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
  StepResult trainStepWithProgress(const Batch& batch, const float* parameters, float* gradients,
                                   uint64_t step, GradientProgress& progress) override;
  StepResult evaluate(const Batch& batch, const float* parameters) override;
  ~CudaReplica() override;

 private:
  // A layer with trainable variables: what a step writes back to the
  // caller, and trainStepWithProgress copies back on its own.
  struct GradientLayer {
    size_t layer = 0;           // its index in the graph
    size_t first_variable = 0;  // its first trainable variable's index in the layout
    int64_t offset = 0;         // its variables' floats [offset, offset + size)
    int64_t size = 0;
    std::vector<std::pair<int64_t, int64_t>> trainable;  // each variable's [offset, +size)
    cudaEvent_t backward_done = nullptr;
  };
  // The layer's staged gradients into the caller's buffer.
  void unstageGradients(const GradientLayer& layer, float* gradients) const;

  // The uploads, the step, and each layer's gradient copied back on the
  // copy stream after its backward kernels, with a callback per copy; the
  // loss sums copied back. Leaves the copy stream forked.
  void enqueueStreamedStep();
  // Runs on a CUDA driver thread after each layer's copy: counts it.
  static void CUDART_CB layerCopied(void* replica);
  // Blocks until `count` layers have been copied back; throws the stream's
  // error if the step failed on the GPU instead.
  void waitForCopies(size_t count);

  // Checks the batch and copies it and the parameters into the staging buffers.
  void stage(const Batch& batch, const float* parameters, uint64_t step);
  // The staged inputs to the device (enqueued).
  void enqueueUploads();

  int device_;
  int64_t parameter_count_;
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

  std::vector<GradientLayer> gradient_layers_;  // last first: the order backward finishes them
  cudaStream_t copy_stream_ = nullptr;
  cudaEvent_t copies_done_ = nullptr;
  std::mutex copied_mutex_;
  std::condition_variable copied_wake_;
  size_t copied_ = 0;  // layers copied back this step; under copied_mutex_
  CapturedWork streamed_step_{2};
};

}  // namespace traind
