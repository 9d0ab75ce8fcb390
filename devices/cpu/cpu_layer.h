// The contract of a layer on the CPU back end, and one builder per layer
// kind (each in its own file; cpu_replica.cc maps LayerKind to them).
//
// A layer is built once per replica from its LayerNode and the tensor the
// layer before it produces, in whatever memory format that layer chose. It
// picks its own output format (oneDNN's blocked formats where they are
// faster), allocates its output and, when the backward pass reaches it, the
// output's gradient in the same format. Every primitive and buffer it needs is
// made while building.
#pragma once

#include <cstdint>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>

#include "core/layer_graph.h"
#include "core/variable_layout.h"
#include "devices/cpu/bound_memory.h"
#include "devices/cpu/primitive_set.h"

namespace traind {

// A batch of activations between two layers.
struct CpuTensor {
  dnnl::memory value;
  dnnl::memory grad;  // same format as value; empty when no backward pass reaches it
};

struct LayerBuildContext {
  const LayerNode& node;
  int index;  // position in LayerGraph::layers; dropout masks are keyed on it
  const VariableLayout& layout;
  int64_t batch_size;
  uint64_t seed;  // the replica's seed
  const CpuTensor& input;
  // backward(): this layer or one before it has trainable variables.
  bool backward;
  // backward() writes input.grad: a layer before this one has trainable
  // variables. When false input.grad is empty.
  bool propagate;
  PrimitiveSet& primitives;
  BoundMemory& memory;

  // The layer's variables as laid out in the flat buffers: kernel, then bias.
  const VariableView& variable(size_t k) const { return layout.views()[node.variables[k]]; }
};

class CpuLayer {
 public:
  virtual ~CpuLayer() = default;

  virtual const CpuTensor& output() const = 0;

  // training_step: the step being trained (it seeds dropout), or nullopt
  // when evaluating.
  virtual void forward(dnnl::stream& stream, std::optional<uint64_t> training_step) = 0;

  // From output().grad: the gradients of the layer's trainable variables and,
  // when propagating, input.grad. Runs after a training forward.
  virtual void backward(dnnl::stream& stream) = 0;
};

std::unique_ptr<CpuLayer> makeDenseLayer(const LayerBuildContext& context);
std::unique_ptr<CpuLayer> makeConvLayer(const LayerBuildContext& context);
std::unique_ptr<CpuLayer> makePoolingLayer(const LayerBuildContext& context);  // max and avg
std::unique_ptr<CpuLayer> makeFlattenLayer(const LayerBuildContext& context);
std::unique_ptr<CpuLayer> makeDropoutLayer(const LayerBuildContext& context);
std::unique_ptr<CpuLayer> makeActivationLayer(const LayerBuildContext& context);

}  // namespace traind
