#include "devices/cpu/activation_functions.h"

#include <stdexcept>

namespace traind {

using dnnl::algorithm;

dnnl::post_ops activationPostOps(Activation activation) {
  dnnl::post_ops ops;
  switch (activation) {
    case Activation::Linear:
      break;
    case Activation::Relu:
      ops.append_eltwise(1.0f, algorithm::eltwise_relu, 0.0f, 0.0f);
      break;
    case Activation::Tanh:
      ops.append_eltwise(1.0f, algorithm::eltwise_tanh, 0.0f, 0.0f);
      break;
    case Activation::Sigmoid:
      ops.append_eltwise(1.0f, algorithm::eltwise_logistic, 0.0f, 0.0f);
      break;
  }
  return ops;
}

algorithm eltwiseAlgorithm(Activation activation) {
  switch (activation) {
    case Activation::Relu:
      return algorithm::eltwise_relu_use_dst_for_bwd;
    case Activation::Tanh:
      return algorithm::eltwise_tanh_use_dst_for_bwd;
    case Activation::Sigmoid:
      return algorithm::eltwise_logistic_use_dst_for_bwd;
    case Activation::Linear:
      break;
  }
  throw std::logic_error("eltwiseAlgorithm: linear is no eltwise operation");
}

const PrimitiveCall& addActivationBackward(PrimitiveSet& primitives, Activation activation,
                                           const dnnl::memory& dst, const dnnl::memory& diff_dst,
                                           const dnnl::memory& diff_src) {
  const algorithm alg = eltwiseAlgorithm(activation);
  const dnnl::memory::desc format = dst.get_desc();
  const dnnl::primitive_attr attr = PrimitiveSet::attributes();
  dnnl::eltwise_forward::primitive_desc hint(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, alg, format), attr,
      primitives.engine());
  dnnl::eltwise_backward::primitive_desc pd(dnnl::eltwise_backward::desc(alg, format, format), attr,
                                            primitives.engine(), hint);
  return primitives.add<dnnl::eltwise_backward>(
      pd, {{DNNL_ARG_DST, dst}, {DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_DIFF_SRC, diff_src}});
}

}  // namespace traind
