#include "devices/cuda/cuda_replica.h"

#include <chrono>
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

  for (size_t i = graph.layers.size(); i-- > 0;) {
    GradientLayer layer;
    layer.layer = i;
    for (int v : graph.layers[i].variables) {
      const VariableView& view = layout.views()[size_t(v)];
      if (!view.trainable) continue;
      if (layer.trainable.empty()) {
        layer.first_variable = size_t(v);
        layer.offset = view.offset;
      }
      layer.size = view.offset + view.size - layer.offset;
      layer.trainable.emplace_back(view.offset, view.size);
    }
    if (layer.trainable.empty()) continue;
    checkCuda(cudaEventCreateWithFlags(&layer.backward_done, cudaEventDisableTiming),
              "cudaEventCreate");
    gradient_layers_.push_back(std::move(layer));
  }
  checkCuda(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  checkCuda(cudaEventCreateWithFlags(&copies_done_, cudaEventDisableTiming), "cudaEventCreate");
}

CudaReplica::~CudaReplica() {
  cudaSetDevice(device_);
  cudaStreamSynchronize(context_.stream());
  if (copy_stream_) cudaStreamSynchronize(copy_stream_);  // its callbacks name this replica
  for (GradientLayer& layer : gradient_layers_) cudaEventDestroy(layer.backward_done);
  if (copies_done_) cudaEventDestroy(copies_done_);
  if (copy_stream_) cudaStreamDestroy(copy_stream_);
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
  for (const GradientLayer& layer : gradient_layers_) unstageGradients(layer, gradients);
  return network_->result(staged_sums_[0]);
}

void CudaReplica::unstageGradients(const GradientLayer& layer, float* gradients) const {
  for (const auto& [offset, size] : layer.trainable)
    std::memcpy(gradients + offset, staged_gradients_.data() + offset,
                size_t(size) * sizeof(float));
}

void CUDART_CB CudaReplica::layerCopied(void* replica) {
  // A driver thread: no CUDA calls here.
  auto* self = static_cast<CudaReplica*>(replica);
  {
    std::lock_guard lock(self->copied_mutex_);
    ++self->copied_;
  }
  self->copied_wake_.notify_all();
}

void CudaReplica::waitForCopies(size_t count) {
  std::unique_lock lock(copied_mutex_);
  while (copied_ < count) {
    if (copied_wake_.wait_for(lock, std::chrono::milliseconds(20),
                              [&] { return copied_ >= count; }))
      return;
    // A step that failed on the GPU never reaches the callbacks.
    lock.unlock();
    const cudaError_t state = cudaStreamQuery(context_.stream());
    lock.lock();
    if (state == cudaErrorNotReady || copied_ >= count) continue;
    checkCuda(state, "the train step on the GPU");
    throw std::logic_error("CUDA device: the step finished with " + std::to_string(copied_) +
                           " of " + std::to_string(count) + " layers' gradients copied back");
  }
}

void CudaReplica::enqueueStreamedStep() {
  cudaStream_t stream = context_.stream();
  enqueueUploads();
  size_t next = 0;  // gradient_layers_ is in the order the hook sees the layers
  network_->enqueueTrainStep([&](size_t layer) {
    if (next == gradient_layers_.size() || gradient_layers_[next].layer != layer) return;
    const GradientLayer& l = gradient_layers_[next++];
    // The copy stream forks from the step's stream at each layer's end (so
    // that a capture follows it); the caller joins them again.
    checkCuda(cudaEventRecord(l.backward_done, stream), "cudaEventRecord");
    checkCuda(cudaStreamWaitEvent(copy_stream_, l.backward_done, 0), "cudaStreamWaitEvent");
    checkCuda(cudaMemcpyAsync(staged_gradients_.data() + l.offset, gradients_.data() + l.offset,
                              size_t(l.size) * sizeof(float), cudaMemcpyDeviceToHost,
                              copy_stream_),
              "cudaMemcpyAsync (a layer's gradient from the GPU)");
    checkCuda(cudaLaunchHostFunc(copy_stream_, &CudaReplica::layerCopied, this),
              "cudaLaunchHostFunc");
  });
  if (next != gradient_layers_.size())
    throw std::logic_error("CUDA device: backward passed " + std::to_string(next) + " of " +
                           std::to_string(gradient_layers_.size()) + " layers with gradients");
  checkCuda(cudaMemcpyAsync(staged_sums_.data(), network_->sums(), sizeof(LossSums),
                            cudaMemcpyDeviceToHost, stream),
            "cudaMemcpyAsync (loss from the GPU)");
}

StepResult CudaReplica::trainStepWithProgress(const Batch& batch, const float* parameters,
                                              float* gradients, uint64_t step,
                                              GradientProgress& progress) {
  stage(batch, parameters, step);  // the caller's parameters are not read after this
  cudaStream_t stream = context_.stream();
  {
    std::lock_guard lock(copied_mutex_);
    copied_ = 0;
  }
  // The copy stream joins the step's stream again however the enqueueing
  // ends: a capture must end joined, and the step's stream then waits for
  // every callback that names this replica.
  streamed_step_.run(stream, [&] {
    try {
      enqueueStreamedStep();
    } catch (...) {
      cudaEventRecord(copies_done_, copy_stream_);  // best effort: the step has failed
      cudaStreamWaitEvent(stream, copies_done_, 0);
      throw;
    }
    checkCuda(cudaEventRecord(copies_done_, copy_stream_), "cudaEventRecord");
    checkCuda(cudaStreamWaitEvent(stream, copies_done_, 0), "cudaStreamWaitEvent");
  });
  for (size_t k = 0; k < gradient_layers_.size(); ++k) {
    waitForCopies(k + 1);
    unstageGradients(gradient_layers_[k], gradients);
    progress.finalFrom(gradient_layers_[k].first_variable);
  }
  checkCuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize (train step)");
  progress.finalFrom(0);
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
