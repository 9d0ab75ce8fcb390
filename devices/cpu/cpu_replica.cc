#include "devices/cpu/cpu_replica.h"

#include <omp.h>

#include <stdexcept>
#include <string>

#include "devices/cpu/losses.h"
#include "devices/cpu/memory_format.h"

namespace traind {

CpuReplica::CpuReplica(const dnnl::engine& engine, const LayerGraph& graph,
                       const VariableLayout& layout, int64_t batch_size, uint64_t seed, int threads)
    : loss_(graph.loss),
      label_smoothing_(graph.label_smoothing),
      batch_size_(batch_size),
      outputs_(numElements(graph.output_shape)),
      threads_(threads),
      stream_(engine),
      primitives_(engine),
      memory_(engine) {
  if (batch_size <= 0)
    throw std::invalid_argument("CPU device: batch size must be positive, got " +
                                std::to_string(batch_size));
  // oneDNN's jit kernels plan their work for the thread count at creation.
  if (threads_ > 0) omp_set_num_threads(threads_);
  input_.value = memory_.input(canonicalDesc(batchDims(batch_size, graph.input_shape)));
  layers_.emplace(graph, 0, int(graph.layers.size()), layout, batch_size, seed, input_, primitives_,
                  memory_);
  const dnnl::memory::desc output_format = layers_->output().value.get_desc();
  if (output_format != canonicalDesc({batch_size, outputs_}))
    throw std::logic_error("CPU device: the last layer's output is not a row-major matrix");
  primitives_.allocateScratchpad();
}

StepResult CpuReplica::forwardAndLoss(const Batch& batch, const float* parameters, float* gradients,
                                      std::optional<uint64_t> training_step) {
  if (batch.size != batch_size_)
    throw std::invalid_argument("CPU device: replica built for batches of " +
                                std::to_string(batch_size_) + ", got " +
                                std::to_string(batch.size));
  if (threads_ > 0) omp_set_num_threads(threads_);
  memory_.bind(batch.inputs, parameters, gradients);
  layers_->forward(stream_, training_step);
  stream_.wait();

  const CpuTensor& output = layers_->output();
  const float* values = static_cast<const float*>(output.value.get_data_handle());
  float* grad = training_step && layers_->hasBackward()
                    ? static_cast<float*>(output.grad.get_data_handle())
                    : nullptr;
  switch (loss_) {
    case LossKind::SoftmaxCrossEntropy:
      if (!batch.labels) throw std::invalid_argument("softmax_cross_entropy: batch has no labels");
      return softmaxCrossEntropy(values, batch_size_, outputs_, batch.labels, label_smoothing_,
                                 grad);
    case LossKind::MeanSquaredError:
      if (!batch.targets) throw std::invalid_argument("mean_squared_error: batch has no targets");
      return meanSquaredError(values, batch_size_, outputs_, batch.targets, grad);
  }
  throw std::logic_error("CPU device: unknown loss");
}

StepResult CpuReplica::trainStep(const Batch& batch, const float* parameters, float* gradients,
                                 uint64_t step) {
  const StepResult result = forwardAndLoss(batch, parameters, gradients, step);
  layers_->backward(stream_);
  stream_.wait();
  return result;
}

StepResult CpuReplica::trainStepWithProgress(const Batch& batch, const float* parameters,
                                             float* gradients, uint64_t step,
                                             GradientProgress& progress) {
  const StepResult result = forwardAndLoss(batch, parameters, gradients, step);
  progress.lossComputed(result);
  layers_->backward(stream_, &progress);
  stream_.wait();
  progress.finalFrom(0);  // the frozen layers before the first trainable one
  return result;
}

StepResult CpuReplica::evaluate(const Batch& batch, const float* parameters) {
  return forwardAndLoss(batch, parameters, nullptr, std::nullopt);
}

}  // namespace traind
