// MaxPool and AvgPool: oneDNN pooling on the input's own format. TensorFlow's
// semantics: SAME padding never wins a max, and an average counts only the
// real pixels of its window (pooling_avg_exclude_padding).
#include "devices/cpu/cpu_layer.h"
#include "devices/cpu/memory_format.h"

namespace traind {
namespace {

using dnnl::memory;

class PoolingLayer : public CpuLayer {
 public:
  explicit PoolingLayer(const LayerBuildContext& c) {
    const LayerSpec& spec = c.node.spec;
    const dnnl::algorithm alg = spec.kind == LayerKind::MaxPool
                                    ? dnnl::algorithm::pooling_max
                                    : dnnl::algorithm::pooling_avg_exclude_padding;
    const memory::desc src = c.input.value.get_desc();
    const memory::desc dst_any(batchDims(c.batch_size, c.node.output_shape), memory::data_type::f32,
                               memory::format_tag::any);
    const memory::dims strides{spec.stride[0], spec.stride[1]};
    const memory::dims kernel{spec.window[0], spec.window[1]};
    const memory::dims pad_l{c.node.pad_begin[0], c.node.pad_begin[1]};
    const memory::dims pad_r{c.node.pad_end[0], c.node.pad_end[1]};
    const dnnl::engine& engine = c.primitives.engine();

    using Forward = dnnl::pooling_forward;
    const Forward::primitive_desc forward_pd(
        Forward::desc(dnnl::prop_kind::forward_training, alg, src, dst_any, strides, kernel, pad_l,
                      pad_r),
        PrimitiveSet::attributes(), engine);
    output_.value = c.memory.allocate(forward_pd.dst_desc());
    PrimitiveArguments forward_args{{DNNL_ARG_SRC, c.input.value}, {DNNL_ARG_DST, output_.value}};
    // Max pooling records where each maximum came from, for its backward.
    const memory::desc workspace_desc = forward_pd.workspace_desc();
    memory workspace;
    if (workspace_desc.get_size() > 0) {
      workspace = c.memory.allocate(workspace_desc);
      forward_args[DNNL_ARG_WORKSPACE] = workspace;
    }
    forward_ = &c.primitives.add<Forward>(forward_pd, std::move(forward_args));

    if (!c.propagate) return;  // no variables: the backward pass is only for the input
    output_.grad = c.memory.allocate(forward_pd.dst_desc());
    using Backward = dnnl::pooling_backward;
    const Backward::primitive_desc pd(
        Backward::desc(alg, src, forward_pd.dst_desc(), strides, kernel, pad_l, pad_r),
        PrimitiveSet::attributes(), engine, forward_pd);
    PrimitiveArguments args{{DNNL_ARG_DIFF_DST, output_.grad}, {DNNL_ARG_DIFF_SRC, c.input.grad}};
    if (workspace) args[DNNL_ARG_WORKSPACE] = workspace;
    backward_ = &c.primitives.add<Backward>(pd, std::move(args));
  }

  const CpuTensor& output() const override { return output_; }

  void forward(dnnl::stream& stream, std::optional<uint64_t>) override { forward_->run(stream); }

  void backward(dnnl::stream& stream) override { backward_->run(stream); }

 private:
  CpuTensor output_;
  const PrimitiveCall* forward_ = nullptr;
  const PrimitiveCall* backward_ = nullptr;
};

}  // namespace

std::unique_ptr<CpuLayer> makePoolingLayer(const LayerBuildContext& context) {
  return std::make_unique<PoolingLayer>(context);
}

}  // namespace traind
