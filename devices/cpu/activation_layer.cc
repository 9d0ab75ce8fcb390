// The Activation layer: an eltwise primitive on the input's own format.
// Linear is the identity and shares its input's memory.
#include "devices/cpu/activation_functions.h"
#include "devices/cpu/cpu_layer.h"

namespace traind {
namespace {

class ActivationLayer : public CpuLayer {
 public:
  explicit ActivationLayer(const LayerBuildContext& c) {
    const Activation activation = c.node.spec.activation;
    if (activation == Activation::Linear) {
      output_ = c.input;
      return;
    }
    const dnnl::memory::desc format = c.input.value.get_desc();
    using Forward = dnnl::eltwise_forward;
    const Forward::primitive_desc pd(
        Forward::desc(dnnl::prop_kind::forward_training, eltwiseAlgorithm(activation), format),
        PrimitiveSet::attributes(), c.primitives.engine());
    output_.value = c.memory.allocate(format);
    forward_ = &c.primitives.add<Forward>(
        pd, {{DNNL_ARG_SRC, c.input.value}, {DNNL_ARG_DST, output_.value}});
    if (!c.propagate) return;
    output_.grad = c.memory.allocate(format);
    backward_ =
        &addActivationBackward(c.primitives, activation, output_.value, output_.grad, c.input.grad);
  }

  const CpuTensor& output() const override { return output_; }

  void forward(dnnl::stream& stream, std::optional<uint64_t>) override {
    if (forward_) forward_->run(stream);
  }

  void backward(dnnl::stream& stream) override {
    if (backward_) backward_->run(stream);
  }

 private:
  CpuTensor output_;
  const PrimitiveCall* forward_ = nullptr;   // null for linear
  const PrimitiveCall* backward_ = nullptr;  // null for linear
};

}  // namespace

std::unique_ptr<CpuLayer> makeActivationLayer(const LayerBuildContext& context) {
  return std::make_unique<ActivationLayer>(context);
}

}  // namespace traind
