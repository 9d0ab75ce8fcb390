// Dense: oneDNN inner product (gemm), and a matmul for the input's
// gradient. The canonical kernel [in, out] is oneDNN's `io` format, the one
// its gemm implementation picks when left to choose, so the kernel and its
// gradient are used in place in the caller's flat buffers: no reorders at
// all.
#include <stdexcept>

#include "devices/cpu/activation_functions.h"
#include "devices/cpu/cpu_layer.h"

namespace traind {
namespace {

using dnnl::memory;

class DenseLayer : public CpuLayer {
 public:
  explicit DenseLayer(const LayerBuildContext& c) : activation_(c.node.spec.activation) {
    const memory::desc src = c.input.value.get_desc();
    if (src.data.ndims != 2)
      throw std::logic_error("dense layer " + c.node.spec.name + ": expected a vector input");
    const int64_t in = src.data.dims[1];
    const int64_t out = c.node.output_shape[0];
    const memory::desc weights({out, in}, memory::data_type::f32, memory::format_tag::io);
    const memory::desc bias({out}, memory::data_type::f32, memory::format_tag::x);
    const memory::desc dst({c.batch_size, out}, memory::data_type::f32, memory::format_tag::nc);
    const bool use_bias = c.node.variables.size() > 1;
    const dnnl::engine& engine = c.primitives.engine();

    using Forward = dnnl::inner_product_forward;
    const auto forward_desc =
        use_bias ? Forward::desc(dnnl::prop_kind::forward_training, src, weights, bias, dst)
                 : Forward::desc(dnnl::prop_kind::forward_training, src, weights, dst);
    const Forward::primitive_desc forward_pd(
        forward_desc, PrimitiveSet::attributes(activationPostOps(activation_)), engine);

    const memory kernel = c.memory.parameter(weights, c.variable(0));
    output_.value = c.memory.allocate(dst);
    PrimitiveArguments forward_args{
        {DNNL_ARG_SRC, c.input.value}, {DNNL_ARG_WEIGHTS, kernel}, {DNNL_ARG_DST, output_.value}};
    if (use_bias) forward_args[DNNL_ARG_BIAS] = c.memory.parameter(bias, c.variable(1));
    forward_ = &c.primitives.add<Forward>(forward_pd, std::move(forward_args));

    if (!c.backward) return;
    output_.grad = c.memory.allocate(dst);
    if (activation_ != Activation::Linear)
      activation_backward_ = &addActivationBackward(c.primitives, activation_, output_.value,
                                                    output_.grad, output_.grad);
    if (c.variable(0).trainable) {
      using Weights = dnnl::inner_product_backward_weights;
      const auto desc =
          use_bias ? Weights::desc(src, weights, bias, dst) : Weights::desc(src, weights, dst);
      const Weights::primitive_desc pd(desc, PrimitiveSet::attributes(), engine, forward_pd);
      PrimitiveArguments args{{DNNL_ARG_SRC, c.input.value},
                              {DNNL_ARG_DIFF_DST, output_.grad},
                              {DNNL_ARG_DIFF_WEIGHTS, c.memory.gradient(weights, c.variable(0))}};
      if (use_bias) args[DNNL_ARG_DIFF_BIAS] = c.memory.gradient(bias, c.variable(1));
      backward_weights_ = &c.primitives.add<Weights>(pd, std::move(args));
    }
    if (c.propagate) {
      // The input's gradient, output gradient x kernel, as a matmul rather
      // than inner_product_backward_data: the kernel, [in, out] in memory,
      // is that product's transposed right-hand side, on which oneDNN 2.6's
      // AVX-512 gemm is slow. The matmul's brgemm took 15% and 20% less
      // time on the wide MLP's 1200-400 and fashion_cnn's 3136-64 layers
      // at batch 100 (docs/benchmarks.md, the 2026-11-24 01:07 block).
      // Without AVX-512 the matmul runs the same gemm as the inner product.
      const memory::desc kernel_as_rhs({out, in}, memory::data_type::f32, memory::format_tag::ba);
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(dst, kernel_as_rhs, src),
                                            PrimitiveSet::attributes(), engine);
      backward_data_ = &c.primitives.add<dnnl::matmul>(
          pd, {{DNNL_ARG_SRC, output_.grad},
               {DNNL_ARG_WEIGHTS, c.memory.alias(kernel, kernel_as_rhs)},
               {DNNL_ARG_DST, c.input.grad}});
    }
  }

  const CpuTensor& output() const override { return output_; }

  void forward(dnnl::stream& stream, std::optional<uint64_t>) override { forward_->run(stream); }

  void backward(dnnl::stream& stream) override {
    if (activation_backward_) activation_backward_->run(stream);
    if (backward_weights_) backward_weights_->run(stream);
    if (backward_data_) backward_data_->run(stream);
  }

 private:
  Activation activation_;
  CpuTensor output_;
  const PrimitiveCall* forward_ = nullptr;
  const PrimitiveCall* activation_backward_ = nullptr;
  const PrimitiveCall* backward_weights_ = nullptr;
  const PrimitiveCall* backward_data_ = nullptr;
};

}  // namespace

std::unique_ptr<CpuLayer> makeDenseLayer(const LayerBuildContext& context) {
  return std::make_unique<DenseLayer>(context);
}

}  // namespace traind
