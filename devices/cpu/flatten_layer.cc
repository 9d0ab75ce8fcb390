// Flatten: images to vectors in TensorFlow's order (h, w, c), so a dense
// kernel after it means what it means in TensorFlow. An nhwc input is only
// re-described; a blocked one (nChw8c from a convolution) is reordered to
// nhwc, and the gradient back.
#include "devices/cpu/cpu_layer.h"
#include "devices/cpu/format_bridge.h"
#include "devices/cpu/memory_format.h"

namespace traind {
namespace {

using dnnl::memory;

class FlattenLayer : public CpuLayer {
 public:
  explicit FlattenLayer(const LayerBuildContext& c) {
    const memory::dims image_dims = batchDims(c.batch_size, c.node.input_shape);
    const memory::desc image = canonicalDesc(image_dims);
    const memory::desc vector = canonicalDesc(batchDims(c.batch_size, c.node.output_shape));
    if (image_dims.size() == 2) {  // already a vector
      output_ = c.input;
      return;
    }
    nhwc_value_ = readAs(c.primitives, c.memory, c.input.value, image);
    output_.value = c.memory.alias(nhwc_value_.memory, vector);
    if (!c.propagate) return;
    nhwc_grad_ = writeAs(c.primitives, c.memory, c.input.grad, image);
    output_.grad = c.memory.alias(nhwc_grad_.memory, vector);
  }

  const CpuTensor& output() const override { return output_; }

  void forward(dnnl::stream& stream, std::optional<uint64_t>) override { nhwc_value_.run(stream); }

  void backward(dnnl::stream& stream) override { nhwc_grad_.run(stream); }

 private:
  CpuTensor output_;
  FormatBridge nhwc_value_;
  FormatBridge nhwc_grad_;
};

}  // namespace

std::unique_ptr<CpuLayer> makeFlattenLayer(const LayerBuildContext& context) {
  return std::make_unique<FlattenLayer>(context);
}

}  // namespace traind
