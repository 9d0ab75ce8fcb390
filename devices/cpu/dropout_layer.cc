// Dropout, inverted: while training, element i of the batch (in canonical
// NHWC order) is zeroed when uniformFloat(hashCombine(seed,
// hashCombine(step, layer)), i) < rate and scaled by 1 / (1 - rate)
// otherwise, so the mask is a pure function of (seed, step, layer, i) on any
// device. Evaluation passes the input through.
#include "core/random.h"
#include "devices/cpu/cpu_layer.h"
#include "devices/cpu/format_bridge.h"
#include "devices/cpu/memory_format.h"

namespace traind {
namespace {

using dnnl::memory;

class DropoutLayer : public CpuLayer {
 public:
  explicit DropoutLayer(const LayerBuildContext& c)
      : input_(c.input),
        rate_(c.node.spec.rate),
        seed_(c.seed),
        layer_(uint64_t(c.index)),
        elements_(paddedFloats(c.input.value.get_desc())) {
    const memory::desc format = c.input.value.get_desc();
    output_.value = c.memory.allocate(format);
    canonical_mask_ = c.memory.allocate(canonicalDesc(batchDims(c.batch_size, c.node.input_shape)));
    // The mask is drawn in canonical order and reordered to the input's
    // format, where it multiplies element by element (padding included).
    mask_ = readAs(c.primitives, c.memory, canonical_mask_, format);
    if (c.propagate) output_.grad = c.memory.allocate(format);
  }

  const CpuTensor& output() const override { return output_; }

  void forward(dnnl::stream& stream, std::optional<uint64_t> training_step) override {
    const float* in = static_cast<const float*>(input_.value.get_data_handle());
    float* out = static_cast<float*>(output_.value.get_data_handle());
    const int64_t n = elements_;
    if (!training_step) {
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i) out[i] = in[i];
      return;
    }
    drawMask(*training_step);
    mask_.run(stream);
    const float* mask = static_cast<const float*>(mask_.memory.get_data_handle());
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = in[i] * mask[i];
  }

  void backward(dnnl::stream&) override {
    const float* mask = static_cast<const float*>(mask_.memory.get_data_handle());
    const float* diff_dst = static_cast<const float*>(output_.grad.get_data_handle());
    float* diff_src = static_cast<float*>(input_.grad.get_data_handle());
    const int64_t n = elements_;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) diff_src[i] = diff_dst[i] * mask[i];
  }

 private:
  void drawMask(uint64_t step) {
    float* mask = static_cast<float*>(canonical_mask_.get_data_handle());
    const int64_t n = int64_t(canonical_mask_.get_desc().get_size() / sizeof(float));
    const uint64_t stream = hashCombine(seed_, hashCombine(step, layer_));
    const float rate = rate_;
    const float keep = rate < 1.0f ? 1.0f / (1.0f - rate) : 0.0f;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i)
      mask[i] = uniformFloat(stream, uint64_t(i)) < rate ? 0.0f : keep;
  }

  CpuTensor input_;
  CpuTensor output_;
  float rate_;
  uint64_t seed_;
  uint64_t layer_;
  int64_t elements_;  // of the input's format, padding included
  memory canonical_mask_;
  FormatBridge mask_;
};

}  // namespace

std::unique_ptr<CpuLayer> makeDropoutLayer(const LayerBuildContext& context) {
  return std::make_unique<DropoutLayer>(context);
}

}  // namespace traind
