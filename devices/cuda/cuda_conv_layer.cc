// Conv2D: cuDNN's convolutions on NHWC activations, float32 with FMA math
// only (no TF32), each direction's algorithm chosen once by timing
// (cudnnFind*), deterministic ones only for the backward passes.
//
// cuDNN's NHWC filters are KRSC (out, h, w, in); the canonical HWIO kernel
// is transposed into that every step and the kernel gradient back (small).
// TensorFlow's SAME padding puts the odd pixel at the bottom/right, which
// cuDNN's symmetric padding cannot express: such a layer copies its input
// into a zero-bordered buffer and convolves that with no padding, and crops
// the input gradient back out of the padded one.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "devices/cuda/cuda_check.h"
#include "devices/cuda/cuda_layer.h"

namespace traind {
namespace {

bool usesTensorCores(cudnnMathType_t math) {
  return math == CUDNN_TENSOR_OP_MATH || math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

// FFT convolutions round to about 1e-5 of the largest value, far from
// float32's direct sums, and need large workspaces: never used.
bool isFft(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING;
}
bool isFft(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING;
}
bool isFft(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING;
}

// The fastest of cudnnFind*'s timed results that ran, is no FFT, uses no
// tensor cores and (when asked) is deterministic.
template <typename Perf>
const Perf& pickAlgorithm(const Perf* results, int count, bool deterministic,
                          const std::string& what) {
  for (int i = 0; i < count; ++i) {
    const Perf& r = results[i];
    if (r.status != CUDNN_STATUS_SUCCESS || usesTensorCores(r.mathType) || isFft(r.algo)) continue;
    if (deterministic && r.determinism != CUDNN_DETERMINISTIC) continue;
    return r;
  }
  throw std::runtime_error(what + ": cuDNN offers no float32 algorithm for this convolution");
}

class ConvLayer : public CudaLayer {
 public:
  explicit ConvLayer(const CudaLayerContext& c)
      : context_(c.context),
        name_(c.node.spec.name),
        activation_(c.node.spec.activation),
        input_(c.input),
        kernel_(c.parameter(0)),
        bias_(c.node.variables.size() > 1 ? c.parameter(1) : nullptr) {
    const LayerSpec& spec = c.node.spec;
    n_ = int(c.batch_size);
    h_ = int(c.node.input_shape[0]);
    w_ = int(c.node.input_shape[1]);
    in_ = int(c.node.input_shape[2]);
    oh_ = int(c.node.output_shape[0]);
    ow_ = int(c.node.output_shape[1]);
    out_ = int(c.node.output_shape[2]);
    kh_ = int(spec.window[0]);
    kw_ = int(spec.window[1]);
    top_ = int(c.node.pad_begin[0]);
    left_ = int(c.node.pad_begin[1]);
    padded_ = c.node.pad_begin != c.node.pad_end;
    ph_ = h_ + (padded_ ? top_ + int(c.node.pad_end[0]) : 0);
    pw_ = w_ + (padded_ ? left_ + int(c.node.pad_end[1]) : 0);
    const int pad_h = padded_ ? 0 : top_, pad_w = padded_ ? 0 : left_;

    checkCudnn(cudnnCreateTensorDescriptor(&x_desc_), "cudnnCreateTensorDescriptor");
    checkCudnn(cudnnCreateTensorDescriptor(&y_desc_), "cudnnCreateTensorDescriptor");
    checkCudnn(cudnnCreateFilterDescriptor(&w_desc_), "cudnnCreateFilterDescriptor");
    checkCudnn(cudnnCreateConvolutionDescriptor(&conv_desc_), "cudnnCreateConvolutionDescriptor");
    checkCudnn(
        cudnnSetTensor4dDescriptor(x_desc_, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, n_, in_, ph_, pw_),
        "cudnnSetTensor4dDescriptor (conv input)");
    checkCudnn(cudnnSetTensor4dDescriptor(y_desc_, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, n_, out_,
                                          oh_, ow_),
               "cudnnSetTensor4dDescriptor (conv output)");
    checkCudnn(cudnnSetFilter4dDescriptor(w_desc_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, out_, in_,
                                          kh_, kw_),
               "cudnnSetFilter4dDescriptor");
    checkCudnn(cudnnSetConvolution2dDescriptor(conv_desc_, pad_h, pad_w, int(spec.stride[0]),
                                               int(spec.stride[1]), 1, 1, CUDNN_CROSS_CORRELATION,
                                               CUDNN_DATA_FLOAT),
               "cudnnSetConvolution2dDescriptor");
    checkCudnn(cudnnSetConvolutionMathType(conv_desc_, CUDNN_FMA_MATH),
               "cudnnSetConvolutionMathType");
    int dims[4];
    checkCudnn(cudnnGetConvolution2dForwardOutputDim(conv_desc_, x_desc_, w_desc_, &dims[0],
                                                     &dims[1], &dims[2], &dims[3]),
               "cudnnGetConvolution2dForwardOutputDim");
    if (dims[0] != n_ || dims[1] != out_ || dims[2] != oh_ || dims[3] != ow_)
      throw std::logic_error("conv layer " + name_ +
                             ": cuDNN's output shape differs from the graph's");

    const int64_t kernel_elements = int64_t(kh_) * kw_ * in_ * out_;
    krsc_ = c.memory.floats(kernel_elements);
    output_.value = c.memory.floats(int64_t(n_) * oh_ * ow_ * out_);
    if (padded_) padded_input_ = c.memory.floats(int64_t(n_) * ph_ * pw_ * in_);

    cudnnHandle_t cudnn = context_.cudnn();
    cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int found = 0;
    checkCudnn(cudnnFindConvolutionForwardAlgorithm(cudnn, x_desc_, w_desc_, conv_desc_, y_desc_,
                                                    CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, fwd),
               "cudnnFindConvolutionForwardAlgorithm");
    const auto& f = pickAlgorithm(fwd, found, false, "conv layer " + name_ + " forward");
    forward_algo_ = f.algo;
    size_t workspace = f.memory;

    if (c.backward) {
      output_.grad = c.memory.floats(int64_t(n_) * oh_ * ow_ * out_);
      kernel_grad_ = c.gradient(0);
      if (bias_) bias_grad_ = c.gradient(1);
      if (bias_grad_)
        bias_workspace_ = c.memory.floats(biasGradientWorkspace(int64_t(n_) * oh_ * ow_, out_));
      if (kernel_grad_) {
        krsc_grad_ = c.memory.floats(kernel_elements);
        cudnnConvolutionBwdFilterAlgoPerf_t bwd[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        checkCudnn(cudnnFindConvolutionBackwardFilterAlgorithm(
                       cudnn, x_desc_, y_desc_, conv_desc_, w_desc_,
                       CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &found, bwd),
                   "cudnnFindConvolutionBackwardFilterAlgorithm");
        const auto& b = pickAlgorithm(bwd, found, true, "conv layer " + name_ + " kernel gradient");
        filter_algo_ = b.algo;
        workspace = std::max(workspace, b.memory);
      }
      if (c.propagate) {
        if (padded_) padded_grad_ = c.memory.floats(int64_t(n_) * ph_ * pw_ * in_);
        cudnnConvolutionBwdDataAlgoPerf_t bwd[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        checkCudnn(cudnnFindConvolutionBackwardDataAlgorithm(
                       cudnn, w_desc_, y_desc_, conv_desc_, x_desc_,
                       CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &found, bwd),
                   "cudnnFindConvolutionBackwardDataAlgorithm");
        const auto& b = pickAlgorithm(bwd, found, true, "conv layer " + name_ + " input gradient");
        data_algo_ = b.algo;
        workspace = std::max(workspace, b.memory);
        propagate_ = true;
      }
    }
    context_.reserveWorkspace(workspace);
  }

  ~ConvLayer() override {
    cudnnDestroyConvolutionDescriptor(conv_desc_);
    cudnnDestroyFilterDescriptor(w_desc_);
    cudnnDestroyTensorDescriptor(y_desc_);
    cudnnDestroyTensorDescriptor(x_desc_);
  }

  const CudaTensor& output() const override { return output_; }

  void forward(bool) override {
    cudaStream_t stream = context_.stream();
    const float* x = input_.value;
    if (padded_) {
      padImage(stream, input_.value, padded_input_, n_, h_, w_, in_, ph_, pw_, top_, left_);
      x = padded_input_;
    }
    // HWIO [kh * kw * in, out] -> KRSC [out, kh * kw * in]
    transpose(stream, kernel_, krsc_, int64_t(kh_) * kw_ * in_, out_);
    const float one = 1.0f, zero = 0.0f;
    checkCudnn(cudnnConvolutionForward(context_.cudnn(), &one, x_desc_, x, w_desc_, krsc_,
                                       conv_desc_, forward_algo_, context_.workspace(),
                                       context_.workspaceBytes(), &zero, y_desc_, output_.value),
               "cudnnConvolutionForward");
    biasActivationForward(stream, output_.value, bias_, int64_t(n_) * oh_ * ow_, out_, activation_);
  }

  void backward() override {
    cudaStream_t stream = context_.stream();
    biasGradient(stream, output_.value, output_.grad, bias_grad_, bias_workspace_,
                 int64_t(n_) * oh_ * ow_, out_, activation_);
    const float one = 1.0f, zero = 0.0f;
    if (kernel_grad_) {
      const float* x = padded_ ? padded_input_ : input_.value;
      checkCudnn(
          cudnnConvolutionBackwardFilter(context_.cudnn(), &one, x_desc_, x, y_desc_, output_.grad,
                                         conv_desc_, filter_algo_, context_.workspace(),
                                         context_.workspaceBytes(), &zero, w_desc_, krsc_grad_),
          "cudnnConvolutionBackwardFilter");
      transpose(stream, krsc_grad_, kernel_grad_, out_, int64_t(kh_) * kw_ * in_);
    }
    if (propagate_) {
      float* dx = padded_ ? padded_grad_ : input_.grad;
      checkCudnn(
          cudnnConvolutionBackwardData(context_.cudnn(), &one, w_desc_, krsc_, y_desc_,
                                       output_.grad, conv_desc_, data_algo_, context_.workspace(),
                                       context_.workspaceBytes(), &zero, x_desc_, dx),
          "cudnnConvolutionBackwardData");
      if (padded_)
        cropImage(stream, padded_grad_, input_.grad, n_, h_, w_, in_, ph_, pw_, top_, left_);
    }
  }

 private:
  CudaContext& context_;
  std::string name_;
  Activation activation_;
  CudaTensor input_;
  CudaTensor output_;
  const float* kernel_;
  const float* bias_;
  int n_, h_, w_, in_, oh_, ow_, out_, kh_, kw_, top_, left_, ph_, pw_;
  bool padded_;
  bool propagate_ = false;
  float* krsc_ = nullptr;
  float* krsc_grad_ = nullptr;
  float* kernel_grad_ = nullptr;
  float* bias_grad_ = nullptr;
  float* bias_workspace_ = nullptr;
  float* padded_input_ = nullptr;
  float* padded_grad_ = nullptr;
  cudnnTensorDescriptor_t x_desc_ = nullptr, y_desc_ = nullptr;
  cudnnFilterDescriptor_t w_desc_ = nullptr;
  cudnnConvolutionDescriptor_t conv_desc_ = nullptr;
  cudnnConvolutionFwdAlgo_t forward_algo_{};
  cudnnConvolutionBwdFilterAlgo_t filter_algo_{};
  cudnnConvolutionBwdDataAlgo_t data_algo_{};
};

}  // namespace

std::unique_ptr<CudaLayer> makeCudaConvLayer(const CudaLayerContext& context) {
  return std::make_unique<ConvLayer>(context);
}

}  // namespace traind
