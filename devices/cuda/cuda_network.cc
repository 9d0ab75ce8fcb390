#include "devices/cuda/cuda_network.h"

#include <stdexcept>
#include <string>

#include "core/error.h"
#include "devices/cuda/cuda_check.h"

namespace traind {
namespace {

// cuBLAS's workspace, given to it so that it allocates nothing while a step
// is captured (32 MiB: NVIDIA's advice for Hopper).
constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;

std::unique_ptr<CudaLayer> buildLayer(const CudaLayerContext& context) {
  switch (context.node.spec.kind) {
    case LayerKind::Dense:
      return makeCudaDenseLayer(context);
    case LayerKind::Conv2D:
      return makeCudaConvLayer(context);
    case LayerKind::MaxPool:
    case LayerKind::AvgPool:
      return makeCudaPoolingLayer(context);
    case LayerKind::Flatten:
      return makeCudaFlattenLayer(context);
    case LayerKind::Dropout:
      return makeCudaDropoutLayer(context);
    case LayerKind::Activation:
      return makeCudaActivationLayer(context);
  }
  throw std::logic_error("CUDA device: unknown layer kind of " + context.node.spec.name);
}

size_t firstTrainableLayer(const LayerGraph& graph) {
  for (size_t i = 0; i < graph.layers.size(); ++i)
    for (int v : graph.layers[i].variables)
      if (graph.variables[v].trainable) return i;
  return graph.layers.size();
}

}  // namespace

CudaContext::CudaContext(int device) : device_(device) {
  checkCuda(cudaSetDevice(device), "cudaSetDevice");
  checkCuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  checkCublas(cublasCreate(&cublas_), "cublasCreate");
  checkCublas(cublasSetStream(cublas_, stream_), "cublasSetStream");
  // float32 as written: no TF32 tensor cores (CUBLAS_DEFAULT_MATH only
  // allows them when asked for per call, which we never do).
  checkCublas(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  cublas_workspace_ = DeviceArray<char>(kCublasWorkspaceBytes);
  checkCublas(cublasSetWorkspace(cublas_, cublas_workspace_.data(), kCublasWorkspaceBytes),
              "cublasSetWorkspace");
}

CudaContext::~CudaContext() {
  if (cublas_) cublasDestroy(cublas_);
  if (stream_) cudaStreamDestroy(stream_);
}

CudaNetwork::CudaNetwork(CudaContext& context, const LayerGraph& graph,
                         const VariableLayout& layout, int64_t batch_size, uint64_t seed,
                         const float* parameters, float* gradients, const StepScalars* scalars,
                         int64_t gradient_batch)
    : context_(context),
      loss_(graph.loss),
      label_smoothing_(graph.label_smoothing),
      batch_size_(batch_size),
      input_elements_(batch_size * numElements(graph.input_shape)),
      outputs_(numElements(graph.output_shape)),
      first_backward_(firstTrainableLayer(graph)) {
  if (batch_size <= 0)
    throw std::invalid_argument("CUDA device: batch size must be positive, got " +
                                std::to_string(batch_size));
  checkCuda(cudaSetDevice(context.device()), "cudaSetDevice");
  // Softmax cross-entropy's gradient is per example, mean squared error's
  // per output element (TensorFlow's means).
  grad_scale_ = loss_ == LossKind::SoftmaxCrossEntropy ? 1.0f / float(gradient_batch)
                                                       : 1.0f / float(gradient_batch * outputs_);
  input_.value = memory_.floats(input_elements_);
  labels_ = static_cast<int32_t*>(memory_.bytes(size_t(batch_size) * sizeof(int32_t)));
  if (loss_ == LossKind::MeanSquaredError) targets_ = memory_.floats(batch_size * outputs_);
  sums_ = static_cast<LossSums*>(memory_.bytes(lossSumsBytes()));
  const CudaTensor* input = &input_;
  for (size_t i = 0; i < graph.layers.size(); ++i) {
    const CudaLayerContext layer_context{.node = graph.layers[i],
                                         .index = int(i),
                                         .layout = layout,
                                         .batch_size = batch_size,
                                         .seed = seed,
                                         .input = *input,
                                         .backward = i >= first_backward_,
                                         .propagate = i > first_backward_,
                                         .parameters = parameters,
                                         .gradients = gradients,
                                         .scalars = scalars,
                                         .context = context,
                                         .memory = memory_};
    layers_.push_back(buildLayer(layer_context));
    input = &layers_.back()->output();
  }
  checkCuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (after building the network)");
}

void CudaNetwork::enqueueForwardAndLoss(bool training) {
  for (auto& layer : layers_) layer->forward(training);
  const CudaTensor& output = layers_.back()->output();
  float* grad = training && first_backward_ < layers_.size() ? output.grad : nullptr;
  cudaStream_t stream = context_.stream();
  switch (loss_) {
    case LossKind::SoftmaxCrossEntropy:
      softmaxCrossEntropy(stream, output.value, batch_size_, outputs_, labels_, label_smoothing_,
                          grad, grad_scale_, sums_);
      return;
    case LossKind::MeanSquaredError:
      meanSquaredError(stream, output.value, batch_size_, outputs_, targets_, grad, grad_scale_,
                       sums_);
      return;
  }
  throw std::logic_error("CUDA device: unknown loss");
}

void CudaNetwork::enqueueTrainStep(const std::function<void(size_t layer)>& after_backward) {
  enqueueForwardAndLoss(true);
  for (size_t i = layers_.size(); i > first_backward_; --i) {
    layers_[i - 1]->backward();
    if (after_backward) after_backward(i - 1);
  }
}

void CudaNetwork::enqueueEvaluate() { enqueueForwardAndLoss(false); }

StepResult CudaNetwork::result(const LossSums& sums) const {
  const double count =
      loss_ == LossKind::SoftmaxCrossEntropy ? double(batch_size_) : double(batch_size_ * outputs_);
  return {sums.loss / count, int64_t(sums.correct)};
}

void checkLabels(const int32_t* labels, int64_t n, int64_t k) {
  for (int64_t i = 0; i < n; ++i)
    if (labels[i] < 0 || labels[i] >= k)
      throw InputError("softmax_cross_entropy: label " + std::to_string(labels[i]) +
                       " of example " + std::to_string(i) + " of the batch is outside [0, " +
                       std::to_string(k) + ")");
}

}  // namespace traind
