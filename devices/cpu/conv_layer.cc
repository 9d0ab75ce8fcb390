// Conv2D: oneDNN direct convolution with every format left to oneDNN
// (`any`), which picks the blocked layouts its jit kernels run fastest
// (nChw8c with AVX2, nChw16c with AVX-512). The canonical HWIO kernel is
// reordered into the primitives' formats every step and the kernel gradient
// back; both are small. TensorFlow's SAME padding is the node's asymmetric
// pad_begin/pad_end.
#include "devices/cpu/activation_functions.h"
#include "devices/cpu/cpu_layer.h"
#include "devices/cpu/format_bridge.h"
#include "devices/cpu/memory_format.h"

namespace traind {
namespace {

using dnnl::memory;

class ConvLayer : public CpuLayer {
 public:
  explicit ConvLayer(const LayerBuildContext& c) : activation_(c.node.spec.activation) {
    const LayerSpec& spec = c.node.spec;
    const memory::dims src_dims = batchDims(c.batch_size, c.node.input_shape);
    const memory::dims dst_dims = batchDims(c.batch_size, c.node.output_shape);
    const memory::dims weights_dims{dst_dims[1], src_dims[1], spec.window[0], spec.window[1]};
    const memory::dims strides{spec.stride[0], spec.stride[1]};
    const memory::dims pad_l{c.node.pad_begin[0], c.node.pad_begin[1]};
    const memory::dims pad_r{c.node.pad_end[0], c.node.pad_end[1]};
    const auto f32 = memory::data_type::f32;
    const auto any = memory::format_tag::any;
    const memory::desc canonical_weights(weights_dims, f32, memory::format_tag::hwio);
    const memory::desc bias({dst_dims[1]}, f32, memory::format_tag::x);
    const bool use_bias = c.node.variables.size() > 1;
    const dnnl::engine& engine = c.primitives.engine();
    const auto direct = dnnl::algorithm::convolution_direct;

    using Forward = dnnl::convolution_forward;
    const memory::desc src_any(src_dims, f32, any), weights_any(weights_dims, f32, any),
        dst_any(dst_dims, f32, any);
    const auto forward_desc =
        use_bias ? Forward::desc(dnnl::prop_kind::forward_training, direct, src_any, weights_any,
                                 bias, dst_any, strides, pad_l, pad_r)
                 : Forward::desc(dnnl::prop_kind::forward_training, direct, src_any, weights_any,
                                 dst_any, strides, pad_l, pad_r);
    const Forward::primitive_desc forward_pd(
        forward_desc, PrimitiveSet::attributes(activationPostOps(activation_)), engine);

    const memory kernel = c.memory.parameter(canonical_weights, c.variable(0));
    src_ = readAs(c.primitives, c.memory, c.input.value, forward_pd.src_desc());
    weights_ = readAs(c.primitives, c.memory, kernel, forward_pd.weights_desc());
    output_.value = c.memory.allocate(forward_pd.dst_desc());
    PrimitiveArguments forward_args{{DNNL_ARG_SRC, src_.memory},
                                    {DNNL_ARG_WEIGHTS, weights_.memory},
                                    {DNNL_ARG_DST, output_.value}};
    if (use_bias) forward_args[DNNL_ARG_BIAS] = c.memory.parameter(bias, c.variable(1));
    forward_ = &c.primitives.add<Forward>(forward_pd, std::move(forward_args));

    if (!c.backward) return;
    output_.grad = c.memory.allocate(forward_pd.dst_desc());
    if (activation_ != Activation::Linear)
      activation_backward_ = &addActivationBackward(c.primitives, activation_, output_.value,
                                                    output_.grad, output_.grad);
    if (c.variable(0).trainable) {
      using Weights = dnnl::convolution_backward_weights;
      auto weightsPd = [&](memory::format_tag tag) {
        const memory::desc src_format(src_dims, f32, tag), diff_dst_format(dst_dims, f32, tag);
        const auto desc = use_bias ? Weights::desc(direct, src_format, weights_any, bias,
                                                   diff_dst_format, strides, pad_l, pad_r)
                                   : Weights::desc(direct, src_format, weights_any, diff_dst_format,
                                                   strides, pad_l, pad_r);
        return Weights::primitive_desc(desc, PrimitiveSet::attributes(), engine, forward_pd);
      };
      Weights::primitive_desc pd = weightsPd(any);
      // A plain source has few channels (an image input). Where oneDNN pads
      // it to channel blocks for the weight gradient (AVX2), reading it and
      // the output gradient as nhwc is 2-3x faster, reorder included; where
      // it reads the plain source (AVX-512), that is fastest.
      if (isPlain(forward_pd.src_desc()) && !isPlain(pd.src_desc()))
        pd = weightsPd(memory::format_tag::nhwc);
      weights_src_ = readAs(c.primitives, c.memory, src_.memory, pd.src_desc());
      weights_diff_dst_ = readAs(c.primitives, c.memory, output_.grad, pd.diff_dst_desc());
      diff_weights_ =
          writeAs(c.primitives, c.memory, c.memory.gradient(canonical_weights, c.variable(0)),
                  pd.diff_weights_desc());
      PrimitiveArguments args{{DNNL_ARG_SRC, weights_src_.memory},
                              {DNNL_ARG_DIFF_DST, weights_diff_dst_.memory},
                              {DNNL_ARG_DIFF_WEIGHTS, diff_weights_.memory}};
      if (use_bias) args[DNNL_ARG_DIFF_BIAS] = c.memory.gradient(bias, c.variable(1));
      backward_weights_ = &c.primitives.add<Weights>(pd, std::move(args));
    }
    if (c.propagate) {
      using Data = dnnl::convolution_backward_data;
      const Data::primitive_desc pd(
          Data::desc(direct, src_any, weights_any, output_.value.get_desc(), strides, pad_l, pad_r),
          PrimitiveSet::attributes(), engine, forward_pd);
      data_weights_ = readAs(c.primitives, c.memory, kernel, pd.weights_desc());
      diff_src_ = writeAs(c.primitives, c.memory, c.input.grad, pd.diff_src_desc());
      backward_data_ = &c.primitives.add<Data>(pd, {{DNNL_ARG_DIFF_DST, output_.grad},
                                                    {DNNL_ARG_WEIGHTS, data_weights_.memory},
                                                    {DNNL_ARG_DIFF_SRC, diff_src_.memory}});
    }
  }

  const CpuTensor& output() const override { return output_; }

  void forward(dnnl::stream& stream, std::optional<uint64_t>) override {
    src_.run(stream);
    weights_.run(stream);
    forward_->run(stream);
  }

  void backward(dnnl::stream& stream) override {
    if (activation_backward_) activation_backward_->run(stream);
    if (backward_weights_) {
      weights_src_.run(stream);
      weights_diff_dst_.run(stream);
      backward_weights_->run(stream);
      diff_weights_.run(stream);
    }
    if (backward_data_) {
      data_weights_.run(stream);
      backward_data_->run(stream);
      diff_src_.run(stream);
    }
  }

 private:
  Activation activation_;
  CpuTensor output_;
  FormatBridge src_, weights_;                                  // forward
  FormatBridge weights_src_, weights_diff_dst_, diff_weights_;  // weight gradient
  FormatBridge data_weights_, diff_src_;                        // input gradient
  const PrimitiveCall* forward_ = nullptr;
  const PrimitiveCall* activation_backward_ = nullptr;
  const PrimitiveCall* backward_weights_ = nullptr;
  const PrimitiveCall* backward_data_ = nullptr;
};

}  // namespace

std::unique_ptr<CpuLayer> makeConvLayer(const LayerBuildContext& context) {
  return std::make_unique<ConvLayer>(context);
}

}  // namespace traind
