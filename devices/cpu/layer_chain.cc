#include "devices/cpu/layer_chain.h"

#include <algorithm>
#include <stdexcept>

namespace traind {
namespace {

// The one table from layer kinds to their CPU implementations.
std::unique_ptr<CpuLayer> buildLayer(const LayerBuildContext& context) {
  switch (context.node.spec.kind) {
    case LayerKind::Dense:
      return makeDenseLayer(context);
    case LayerKind::Conv2D:
      return makeConvLayer(context);
    case LayerKind::MaxPool:
    case LayerKind::AvgPool:
      return makePoolingLayer(context);
    case LayerKind::Flatten:
      return makeFlattenLayer(context);
    case LayerKind::Dropout:
      return makeDropoutLayer(context);
    case LayerKind::Activation:
      return makeActivationLayer(context);
  }
  throw std::logic_error("CPU device: unknown layer kind of " + context.node.spec.name);
}

}  // namespace

int firstTrainableLayer(const LayerGraph& graph) {
  for (size_t i = 0; i < graph.layers.size(); ++i)
    for (int v : graph.layers[i].variables)
      if (graph.variables[size_t(v)].trainable) return int(i);
  return int(graph.layers.size());
}

LayerChain::LayerChain(const LayerGraph& graph, int first, int end, const VariableLayout& layout,
                       int64_t batch_size, uint64_t seed, const CpuTensor& input,
                       PrimitiveSet& primitives, BoundMemory& memory) {
  if (first < 0 || first >= end || end > int(graph.layers.size()))
    throw std::logic_error("CPU device: no layers [" + std::to_string(first) + ", " +
                           std::to_string(end) + ") in a graph of " +
                           std::to_string(graph.layers.size()));
  const int first_backward = firstTrainableLayer(graph);
  first_backward_ = size_t(std::clamp(first_backward, first, end) - first);
  const CpuTensor* layer_input = &input;
  for (int i = first; i < end; ++i) {
    const LayerBuildContext context{.node = graph.layers[size_t(i)],
                                    .index = i,
                                    .layout = layout,
                                    .batch_size = batch_size,
                                    .seed = seed,
                                    .input = *layer_input,
                                    .backward = i >= first_backward,
                                    .propagate = i > first_backward,
                                    .primitives = primitives,
                                    .memory = memory};
    layers_.push_back(buildLayer(context));
    const std::vector<int>& variables = graph.layers[size_t(i)].variables;
    first_variable_.push_back(variables.empty()
                                  ? -1
                                  : *std::min_element(variables.begin(), variables.end()));
    layer_input = &layers_.back()->output();
  }
}

void LayerChain::backward(dnnl::stream& stream, GradientProgress* progress) {
  for (size_t i = layers_.size(); i > first_backward_; --i) {
    layers_[i - 1]->backward(stream);
    if (progress && first_variable_[i - 1] >= 0) {
      stream.wait();
      progress->finalFrom(size_t(first_variable_[i - 1]));
    }
  }
}

}  // namespace traind
