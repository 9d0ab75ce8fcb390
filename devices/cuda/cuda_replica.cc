#include "devices/cuda/cuda_replica.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "devices/cuda/cuda_check.h"

namespace traind {

CudaReplica::CudaReplica(int device, const LayerGraph& graph, const VariableLayout& layout,
                         int64_t batch_size, uint64_t seed)
    : device_(device),
      parameter_count_(layout.totalSize()),
      context_(device),
      parameters_(size_t(layout.totalSize())),
      gradients_(size_t(layout.totalSize())),
      scalars_(1) {
  for (const VariableView& v : layout.views())
    if (v.trainable) trainable_.emplace_back(v.offset, v.size);
  network_ =
      std::make_unique<CudaNetwork>(context_, graph, layout, batch_size, seed, parameters_.data(),
                                    gradients_.data(), scalars_.data(), batch_size);
  staged_parameters_ = PinnedArray<float>(size_t(parameter_count_));
  staged_gradients_ = PinnedArray<float>(size_t(parameter_count_));
  staged_inputs_ = PinnedArray<float>(size_t(network_->inputElements()));
  staged_labels_ = PinnedArray<int32_t>(size_t(batch_size));
  if (network_->targets())
    staged_targets_ = PinnedArray<float>(size_t(batch_size * network_->outputs()));
  staged_scalars_ = PinnedArray<StepScalars>(1);
  staged_sums_ = PinnedArray<LossSums>(1);
}

void CudaReplica::stage(const Batch& batch, const float* parameters, uint64_t step) {
  const int64_t n = network_->batchSize();
  if (batch.size != n)
    throw std::invalid_argument("CUDA device: replica built for batches of " + std::to_string(n) +
                                ", got " + std::to_string(batch.size));
  if (network_->loss() == LossKind::SoftmaxCrossEntropy) {
    if (!batch.labels) throw std::invalid_argument("softmax_cross_entropy: batch has no labels");
    checkLabels(batch.labels, n, network_->outputs());
    std::memcpy(staged_labels_.data(), batch.labels, size_t(n) * sizeof(int32_t));
  } else {
    if (!batch.targets) throw std::invalid_argument("mean_squared_error: batch has no targets");
    std::memcpy(staged_targets_.data(), batch.targets,
                size_t(n * network_->outputs()) * sizeof(float));
  }
  std::memcpy(staged_inputs_.data(), batch.inputs,
              size_t(network_->inputElements()) * sizeof(float));
  std::memcpy(staged_parameters_.data(), parameters, size_t(parameter_count_) * sizeof(float));
  staged_scalars_[0].step = step;
  checkCuda(cudaSetDevice(device_), "cudaSetDevice");
}

void CudaReplica::enqueueUploads() {
  cudaStream_t stream = context_.stream();
  auto upload = [stream](void* to, const void* from, size_t bytes, const char* what) {
    checkCuda(cudaMemcpyAsync(to, from, bytes, cudaMemcpyHostToDevice, stream), what);
  };
  upload(parameters_.data(), staged_parameters_.data(), size_t(parameter_count_) * sizeof(float),
         "cudaMemcpyAsync (parameters to the GPU)");
  upload(network_->input(), staged_inputs_.data(), staged_inputs_.size() * sizeof(float),
         "cudaMemcpyAsync (inputs to the GPU)");
  if (network_->loss() == LossKind::SoftmaxCrossEntropy)
    upload(network_->labels(), staged_labels_.data(), staged_labels_.size() * sizeof(int32_t),
           "cudaMemcpyAsync (labels to the GPU)");
  else
    upload(network_->targets(), staged_targets_.data(), staged_targets_.size() * sizeof(float),
           "cudaMemcpyAsync (targets to the GPU)");
  upload(scalars_.data(), staged_scalars_.data(), sizeof(StepScalars),
         "cudaMemcpyAsync (step to the GPU)");
}

StepResult CudaReplica::trainStep(const Batch& batch, const float* parameters, float* gradients,
                                  uint64_t step) {
  stage(batch, parameters, step);
  cudaStream_t stream = context_.stream();
  train_step_.run(stream, [&] {
    enqueueUploads();
    network_->enqueueTrainStep();
    checkCuda(
        cudaMemcpyAsync(staged_gradients_.data(), gradients_.data(),
                        size_t(parameter_count_) * sizeof(float), cudaMemcpyDeviceToHost, stream),
        "cudaMemcpyAsync (gradients from the GPU)");
    checkCuda(cudaMemcpyAsync(staged_sums_.data(), network_->sums(), sizeof(LossSums),
                              cudaMemcpyDeviceToHost, stream),
              "cudaMemcpyAsync (loss from the GPU)");
  });
  checkCuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize (train step)");
  for (const auto& [offset, size] : trainable_)
    std::memcpy(gradients + offset, staged_gradients_.data() + offset,
                size_t(size) * sizeof(float));
  return network_->result(staged_sums_[0]);
}

StepResult CudaReplica::evaluate(const Batch& batch, const float* parameters) {
  stage(batch, parameters, 0);
  cudaStream_t stream = context_.stream();
  evaluation_.run(stream, [&] {
    enqueueUploads();
    network_->enqueueEvaluate();
    checkCuda(cudaMemcpyAsync(staged_sums_.data(), network_->sums(), sizeof(LossSums),
                              cudaMemcpyDeviceToHost, stream),
              "cudaMemcpyAsync (loss from the GPU)");
  });
  checkCuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize (evaluation)");
  return network_->result(staged_sums_[0]);
}

}  // namespace traind
