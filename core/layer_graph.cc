#include "core/layer_graph.h"

#include <algorithm>
#include <string>

namespace traind {
namespace {

[[noreturn]] void shapeError(const LayerSpec& layer, const Shape& input, const std::string& what) {
  throwInputError(layer.location, "layer '" + layer.name + "' (" + layerKindName(layer.kind) + ")",
                  what + "; its input shape is " + shapeToString(input));
}

// A variable of `shape` for `layer`, within kMaxTensorFloats and, with those
// before it (`parameters` so far, updated), kMaxParameterFloats.
void checkVariableSize(const LayerSpec& layer, const Shape& input, const char* kind,
                       const Shape& shape, int64_t& parameters) {
  const int64_t floats = numElementsSaturated(shape);
  if (floats > kMaxTensorFloats)
    shapeError(layer, input,
               std::string("its ") + kind + " " + shapeToString(shape) +
                   " would hold more than the 2^31 floats a variable may hold");
  parameters += floats;
  if (parameters > kMaxParameterFloats)
    shapeError(layer, input,
               std::string("with its ") + kind + " " + shapeToString(shape) +
                   " the model would hold more than the 2^32 parameters a model may hold");
}

// One spatial dimension of a window op, TensorFlow's rules. Same: out =
// ceil(in / stride), total padding max((out - 1) * stride + window - in, 0),
// the smaller half before and the odd pixel after.
struct WindowDim {
  int64_t out, pad_begin, pad_end;
};

WindowDim windowDim(int64_t in, int64_t window, int64_t stride, Padding padding) {
  if (padding == Padding::Valid) return {(in - window) / stride + 1, 0, 0};
  const int64_t out = (in + stride - 1) / stride;
  const int64_t total = std::max<int64_t>((out - 1) * stride + window - in, 0);
  return {out, total / 2, total - total / 2};
}

VariableSpec variable(const LayerSpec& layer, int layer_index, const char* kind, Shape shape,
                      const InitializerSpec& init, int64_t fan_in, int64_t fan_out) {
  VariableSpec v;
  v.name = layer.name + "/" + kind;
  v.shape = std::move(shape);
  v.initializer = init;
  v.fan_in = fan_in;
  v.fan_out = fan_out;
  v.trainable = layer.trainable;
  v.is_kernel = std::string(kind) == "kernel";
  if (v.is_kernel) v.weight_decay = layer.weight_decay;
  v.layer = layer_index;
  return v;
}

}  // namespace

const char* layerKindName(LayerKind kind) {
  switch (kind) {
    case LayerKind::Dense: return "dense";
    case LayerKind::Conv2D: return "conv2d";
    case LayerKind::MaxPool: return "max_pool";
    case LayerKind::AvgPool: return "avg_pool";
    case LayerKind::Flatten: return "flatten";
    case LayerKind::Dropout: return "dropout";
    case LayerKind::Activation: return "activation";
  }
  return "?";
}

int64_t LayerGraph::parameterCount() const {
  int64_t n = 0;
  for (const VariableSpec& v : variables) n += numElements(v.shape);
  return n;
}

LayerGraph buildLayerGraph(const ModelSpec& spec) {
  LayerGraph graph;
  graph.input_shape = spec.input;
  graph.loss = spec.loss;
  graph.label_smoothing = spec.label_smoothing;
  Shape shape = spec.input;
  // What one device may hold: the whole batch. Towers split a training
  // batch, but the evaluation runs whole batches on the first device, and a
  // placed model's stages each run the whole batch (or a micro-batch).
  const int64_t batch = std::max<int64_t>(1, spec.data.batch_size);
  if (numElementsSaturated(shape) > kMaxTensorFloats / batch)
    throwInputError(spec.data.batch_size_location, "data.batch_size",
                    "a batch of " + std::to_string(batch) + " examples of the input " +
                        shapeToString(shape) +
                        " would hold more than 2^31 floats: expected a smaller batch");
  int64_t parameters = 0;

  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerSpec& layer = spec.layers[i];
    LayerNode node;
    node.spec = layer;
    node.input_shape = shape;
    const int index = int(i);

    switch (layer.kind) {
      case LayerKind::Dense: {
        if (shape.size() != 1)
          shapeError(layer, shape,
                     "dense expects a vector per example (put a flatten layer before it)");
        const int64_t in = shape[0];
        const Shape kernel{in, layer.units};
        checkVariableSize(layer, shape, "kernel", kernel, parameters);
        if (layer.use_bias) checkVariableSize(layer, shape, "bias", {layer.units}, parameters);
        node.variables.push_back(int(graph.variables.size()));
        graph.variables.push_back(
            variable(layer, index, "kernel", kernel, layer.kernel_initializer, in, layer.units));
        if (layer.use_bias) {
          node.variables.push_back(int(graph.variables.size()));
          graph.variables.push_back(variable(layer, index, "bias", {layer.units},
                                             layer.bias_initializer, in, layer.units));
        }
        shape = {layer.units};
        break;
      }
      case LayerKind::Conv2D:
      case LayerKind::MaxPool:
      case LayerKind::AvgPool: {
        if (shape.size() != 3)
          shapeError(layer, shape,
                     "expected an image per example, shape [height, width, channels]");
        Shape out(3);
        for (int d = 0; d < 2; ++d) {
          // With padding: same too: most of such a window would be padding,
          // and oneDNN 2.6's avx512 convolution wrote past its buffers on
          // kernels about twice the input's size.
          if (layer.window[d] > shape[d])
            shapeError(layer, shape,
                       "its window " + std::to_string(layer.window[0]) + "x" +
                           std::to_string(layer.window[1]) + " does not fit in the input" +
                           (layer.padding == Padding::Valid ? " with padding: valid"
                                                            : " (padding: same would make most "
                                                              "of it padding)"));
          const WindowDim w = windowDim(shape[d], layer.window[d], layer.stride[d], layer.padding);
          out[d] = w.out;
          node.pad_begin[d] = w.pad_begin;
          node.pad_end[d] = w.pad_end;
        }
        out[2] = shape[2];
        if (layer.kind == LayerKind::Conv2D) {
          const int64_t in_c = shape[2];
          const Shape kernel{layer.window[0], layer.window[1], in_c, layer.filters};
          // Checked first: the fans below multiply what it bounds.
          checkVariableSize(layer, shape, "kernel", kernel, parameters);
          if (layer.use_bias) checkVariableSize(layer, shape, "bias", {layer.filters}, parameters);
          const int64_t area = layer.window[0] * layer.window[1];
          out[2] = layer.filters;
          node.variables.push_back(int(graph.variables.size()));
          graph.variables.push_back(variable(layer, index, "kernel", kernel,
                                             layer.kernel_initializer, area * in_c,
                                             area * layer.filters));
          if (layer.use_bias) {
            node.variables.push_back(int(graph.variables.size()));
            graph.variables.push_back(variable(layer, index, "bias", {layer.filters},
                                               layer.bias_initializer, area * in_c,
                                               area * layer.filters));
          }
        }
        shape = out;
        break;
      }
      case LayerKind::Flatten:
        shape = {numElements(shape)};
        break;
      case LayerKind::Dropout:
      case LayerKind::Activation:
        break;
    }
    if (numElementsSaturated(shape) > kMaxTensorFloats / batch)
      shapeError(layer, node.input_shape,
                 "its output " + shapeToString(shape) + " for a batch of " + std::to_string(batch) +
                     " would hold more than 2^31 floats");
    node.output_shape = shape;
    graph.layers.push_back(std::move(node));
  }

  if (spec.layers.empty())
    throwInputError(SourceLocation{spec.path}, "layers", "expected at least one layer");
  const LayerSpec& last = spec.layers.back();
  if (shape.size() != 1)
    shapeError(last, graph.layers.back().input_shape,
               "the last layer must give a vector per example for the loss, but gives " +
                   shapeToString(shape));
  if (spec.loss == LossKind::SoftmaxCrossEntropy && shape[0] < 2)
    shapeError(last, graph.layers.back().input_shape,
               "softmax_cross_entropy needs at least 2 outputs (one per class), got " +
                   shapeToString(shape));
  graph.output_shape = shape;
  return graph;
}

}  // namespace traind
