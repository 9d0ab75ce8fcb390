// The CUDA layers other than convolution: dense (cuBLAS SGEMM), pooling,
// flatten, dropout and activation (own kernels).
#include <stdexcept>

#include "devices/cuda/cuda_check.h"
#include "devices/cuda/cuda_layer.h"

namespace traind {
namespace {

// Dense: y = x K + b, then the activation. Row-major [n, in] x [in, out] is,
// in cuBLAS's column-major terms, y^T = K^T x^T with both matrices used as
// they lie in memory, so no transposes are ever materialised.
class DenseLayer : public CudaLayer {
 public:
  explicit DenseLayer(const CudaLayerContext& c)
      : context_(c.context),
        activation_(c.node.spec.activation),
        batch_(int(c.batch_size)),
        in_(int(numElements(c.node.input_shape))),
        out_(int(c.node.output_shape[0])),
        input_(c.input),
        kernel_(c.parameter(0)),
        bias_(c.node.variables.size() > 1 ? c.parameter(1) : nullptr) {
    output_.value = c.memory.floats(int64_t(batch_) * out_);
    if (!c.backward) return;
    output_.grad = c.memory.floats(int64_t(batch_) * out_);
    kernel_grad_ = c.gradient(0);
    if (bias_) bias_grad_ = c.gradient(1);
    if (bias_grad_) bias_workspace_ = c.memory.floats(biasGradientWorkspace(batch_, out_));
    propagate_ = c.propagate;
  }

  const CudaTensor& output() const override { return output_; }

  void forward(bool) override {
    const float one = 1.0f, zero = 0.0f;
    checkCublas(cublasSgemm(context_.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, out_, batch_, in_, &one,
                            kernel_, out_, input_.value, in_, &zero, output_.value, out_),
                "cublasSgemm (dense forward)");
    biasActivationForward(context_.stream(), output_.value, bias_, batch_, out_, activation_);
  }

  void backward() override {
    const float one = 1.0f, zero = 0.0f;
    // The activation's derivative in place, fused with the bias gradient.
    biasGradient(context_.stream(), output_.value, output_.grad, bias_grad_, bias_workspace_,
                 batch_, out_, activation_);
    if (kernel_grad_)  // dK^T (out x in) = dy^T (out x n) * x (n x in)
      checkCublas(cublasSgemm(context_.cublas(), CUBLAS_OP_N, CUBLAS_OP_T, out_, in_, batch_, &one,
                              output_.grad, out_, input_.value, in_, &zero, kernel_grad_, out_),
                  "cublasSgemm (dense kernel gradient)");
    if (propagate_)  // dx^T (in x n) = K (in x out) * dy^T (out x n)
      checkCublas(cublasSgemm(context_.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, in_, batch_, out_, &one,
                              kernel_, out_, output_.grad, out_, &zero, input_.grad, in_),
                  "cublasSgemm (dense input gradient)");
  }

 private:
  CudaContext& context_;
  Activation activation_;
  int batch_, in_, out_;
  CudaTensor input_;
  CudaTensor output_;
  const float* kernel_;
  const float* bias_;
  float* kernel_grad_ = nullptr;
  float* bias_grad_ = nullptr;
  float* bias_workspace_ = nullptr;
  bool propagate_ = false;
};

// Max and average pooling with TensorFlow's SAME padding (the odd pixel at
// the bottom/right): own kernels, the backward a gather (deterministic).
class PoolingLayer : public CudaLayer {
 public:
  explicit PoolingLayer(const CudaLayerContext& c) : context_(c.context), input_(c.input) {
    static_cast<WindowShape&>(shape_) = windowShape(c.node);
    shape_.n = int(c.batch_size);
    shape_.max = c.node.spec.kind == LayerKind::MaxPool;
    const int64_t outputs = c.batch_size * numElements(c.node.output_shape);
    output_.value = c.memory.floats(outputs);
    if (shape_.max)
      argmax_ = static_cast<int32_t*>(c.memory.bytes(size_t(outputs) * sizeof(int32_t)));
    if (c.propagate) output_.grad = c.memory.floats(outputs);
  }

  const CudaTensor& output() const override { return output_; }

  void forward(bool) override {
    poolForward(context_.stream(), shape_, input_.value, output_.value, argmax_);
  }

  void backward() override {
    poolBackward(context_.stream(), shape_, output_.grad, input_.grad, argmax_);
  }

 private:
  CudaContext& context_;
  CudaTensor input_;
  CudaTensor output_;
  PoolShape shape_;
  int32_t* argmax_ = nullptr;
};

// Flatten: NHWC is already TensorFlow's (h, w, c) order; the output is the
// input re-described.
class FlattenLayer : public CudaLayer {
 public:
  explicit FlattenLayer(const CudaLayerContext& c) : output_(c.input) {}
  const CudaTensor& output() const override { return output_; }
  void forward(bool) override {}
  void backward() override {}

 private:
  CudaTensor output_;
};

// Dropout with the CPU back end's mask (cuda_kernels.h); the backward pass
// recomputes the mask rather than storing it.
class DropoutLayer : public CudaLayer {
 public:
  explicit DropoutLayer(const CudaLayerContext& c)
      : context_(c.context),
        input_(c.input),
        elements_(c.batch_size * numElements(c.node.input_shape)),
        rate_(c.node.spec.rate),
        keep_(rate_ < 1.0f ? 1.0f / (1.0f - rate_) : 0.0f),
        seed_(c.seed),
        layer_(uint64_t(c.index)),
        scalars_(c.scalars) {
    output_.value = c.memory.floats(elements_);
    if (c.propagate) output_.grad = c.memory.floats(elements_);
  }

  const CudaTensor& output() const override { return output_; }

  void forward(bool training) override {
    if (training) {
      dropoutForward(context_.stream(), input_.value, output_.value, elements_, rate_, keep_, seed_,
                     layer_, scalars_);
    } else {
      checkCuda(cudaMemcpyAsync(output_.value, input_.value, size_t(elements_) * sizeof(float),
                                cudaMemcpyDeviceToDevice, context_.stream()),
                "cudaMemcpyAsync (dropout, evaluation)");
    }
  }

  void backward() override {
    dropoutBackward(context_.stream(), output_.grad, input_.grad, elements_, rate_, keep_, seed_,
                    layer_, scalars_);
  }

 private:
  CudaContext& context_;
  CudaTensor input_;
  CudaTensor output_;
  int64_t elements_;
  float rate_;
  float keep_;
  uint64_t seed_;
  uint64_t layer_;
  const StepScalars* scalars_;
};

// The Activation layer; linear is the identity and shares its input.
class ActivationLayer : public CudaLayer {
 public:
  explicit ActivationLayer(const CudaLayerContext& c)
      : context_(c.context),
        input_(c.input),
        activation_(c.node.spec.activation),
        elements_(c.batch_size * numElements(c.node.input_shape)) {
    if (activation_ == Activation::Linear) {
      output_ = c.input;
      return;
    }
    output_.value = c.memory.floats(elements_);
    if (c.propagate) output_.grad = c.memory.floats(elements_);
  }

  const CudaTensor& output() const override { return output_; }

  void forward(bool) override {
    if (activation_ != Activation::Linear)
      activationForward(context_.stream(), input_.value, output_.value, elements_, activation_);
  }

  void backward() override {
    if (activation_ != Activation::Linear)
      activationBackward(context_.stream(), output_.value, output_.grad, input_.grad, elements_,
                         activation_);
  }

 private:
  CudaContext& context_;
  CudaTensor input_;
  Activation activation_;
  int64_t elements_;
  CudaTensor output_;
};

}  // namespace

WindowShape windowShape(const LayerNode& node) {
  return {.h = int(node.input_shape[0]),
          .w = int(node.input_shape[1]),
          .c = int(node.input_shape[2]),
          .oh = int(node.output_shape[0]),
          .ow = int(node.output_shape[1]),
          .kh = int(node.spec.window[0]),
          .kw = int(node.spec.window[1]),
          .sh = int(node.spec.stride[0]),
          .sw = int(node.spec.stride[1]),
          .pad_top = int(node.pad_begin[0]),
          .pad_left = int(node.pad_begin[1])};
}

std::unique_ptr<CudaLayer> makeCudaDenseLayer(const CudaLayerContext& context) {
  return std::make_unique<DenseLayer>(context);
}

std::unique_ptr<CudaLayer> makeCudaPoolingLayer(const CudaLayerContext& context) {
  return std::make_unique<PoolingLayer>(context);
}

std::unique_ptr<CudaLayer> makeCudaFlattenLayer(const CudaLayerContext& context) {
  return std::make_unique<FlattenLayer>(context);
}

std::unique_ptr<CudaLayer> makeCudaDropoutLayer(const CudaLayerContext& context) {
  return std::make_unique<DropoutLayer>(context);
}

std::unique_ptr<CudaLayer> makeCudaActivationLayer(const CudaLayerContext& context) {
  return std::make_unique<ActivationLayer>(context);
}

}  // namespace traind
