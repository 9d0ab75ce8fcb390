// Consecutive layers [first, end) of a LayerGraph as CpuLayers, each built on
// the output of the one before it: the whole model of a CpuReplica, or the
// layers of one slot of a CpuStage (a pipeline stage).
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "devices/cpu/cpu_layer.h"
#include "devices/device.h"

namespace traind {

// The first layer that has trainable variables, or graph.layers.size(): no
// layer before it has backward work.
int firstTrainableLayer(const LayerGraph& graph);

class LayerChain {
 public:
  // input: the first layer's input, in any format; its grad must exist when
  // a layer before `first` has trainable variables (the chain propagates
  // into it). Primitives and buffers go to `primitives` and `memory`.
  LayerChain(const LayerGraph& graph, int first, int end, const VariableLayout& layout,
             int64_t batch_size, uint64_t seed, const CpuTensor& input, PrimitiveSet& primitives,
             BoundMemory& memory);

  const CpuTensor& output() const { return layers_.back()->output(); }
  // A layer of the chain or one before it has trainable variables.
  bool hasBackward() const { return first_backward_ < layers_.size(); }

  void forward(dnnl::stream& stream, std::optional<uint64_t> training_step) {
    for (auto& layer : layers_) layer->forward(stream, training_step);
  }
  // From output().grad back, through the layers that have backward work;
  // after each layer with variables, tells `progress` (when given) that its
  // variables and those after them are final.
  void backward(dnnl::stream& stream, GradientProgress* progress = nullptr);

 private:
  std::vector<std::unique_ptr<CpuLayer>> layers_;
  // Layers before this index (of layers_) have no backward work: neither
  // they nor any layer before them has trainable variables.
  size_t first_backward_;
  // Per layer of the chain: the index of its first variable, or -1.
  std::vector<int> first_variable_;
};

}  // namespace traind
