// The layer graph: a model spec with every shape worked out and every
// variable named. Devices build their replicas from it; the optimizer,
// checkpoints and (later) the parameter servers key everything on its
// variable names, "<layer>/kernel" and "<layer>/bias".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/model_spec.h"
#include "core/shape.h"

namespace traind {

// A variable in its canonical layout: row-major, dense kernels [in, out],
// conv kernels [kh, kw, in, out] (TensorFlow's HWIO), biases [out].
struct VariableSpec {
  std::string name;
  Shape shape;
  InitializerSpec initializer;
  int64_t fan_in = 0;   // for glorot/he
  int64_t fan_out = 0;
  bool trainable = true;
  bool is_kernel = false;  // weight decay applies to kernels only
  std::optional<float> weight_decay;  // a kernel's layer's own (LayerSpec::weight_decay)
  int layer = 0;           // index into LayerGraph::layers
};

struct LayerNode {
  LayerSpec spec;
  Shape input_shape;    // per example
  Shape output_shape;   // per example
  // For Conv2D and pooling with Same padding: TensorFlow's split, the odd
  // extra pixel at the bottom/right. [top, left] and [bottom, right].
  std::array<int64_t, 2> pad_begin{0, 0};
  std::array<int64_t, 2> pad_end{0, 0};
  std::vector<int> variables;  // indices into LayerGraph::variables: kernel, then bias
};

struct LayerGraph {
  Shape input_shape;
  std::vector<LayerNode> layers;
  std::vector<VariableSpec> variables;
  LossKind loss = LossKind::SoftmaxCrossEntropy;
  float label_smoothing = 0.0f;  // ModelSpec's
  Shape output_shape;  // per example, the last layer's

  int64_t parameterCount() const;
};

// The spec's name of a layer kind: "dense", "conv2d", "max_pool", ...
const char* layerKindName(LayerKind kind);

// The most a spec may describe, so that a slip (units: 2147483647) is an
// error naming its layer rather than an allocation of many GiB: a variable,
// or one layer's output for the whole batch (what one device holds at an
// evaluation, or as a pipeline's stage), holds at most 2^31 floats (8 GiB);
// all variables together at most 2^32 (16 GiB, before optimizer slots).
constexpr int64_t kMaxTensorFloats = int64_t(1) << 31;
constexpr int64_t kMaxParameterFloats = int64_t(1) << 32;

// Works out every layer's shapes and variables. Throws InputError naming the
// layer, its spec location and both shapes when the chain cannot work (for
// example a dense layer on an image without flatten, a window larger than its
// input, softmax_cross_entropy on an output that is not a vector), or when
// it describes more than the bounds above.
LayerGraph buildLayerGraph(const ModelSpec& spec);

}  // namespace traind
