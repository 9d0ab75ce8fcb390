#include "test/test_models.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <utility>

#include "core/random.h"
#include "devices/cpu/cpu_device.h"
#include "devices/device_list.h"

namespace traind {

LayerSpec dense(int64_t units, Activation activation) {
  LayerSpec l;
  l.kind = LayerKind::Dense;
  l.units = units;
  l.activation = activation;
  return l;
}

LayerSpec conv2d(int64_t filters, int64_t window, int64_t stride, Padding padding,
                 Activation activation) {
  LayerSpec l;
  l.kind = LayerKind::Conv2D;
  l.filters = filters;
  l.window = {window, window};
  l.stride = {stride, stride};
  l.padding = padding;
  l.activation = activation;
  return l;
}

LayerSpec pooling(LayerKind kind, int64_t window, int64_t stride, Padding padding) {
  LayerSpec l;
  l.kind = kind;
  l.window = {window, window};
  l.stride = {stride, stride};
  l.padding = padding;
  return l;
}

LayerSpec flatten() {
  LayerSpec l;
  l.kind = LayerKind::Flatten;
  return l;
}

LayerSpec dropout(float rate) {
  LayerSpec l;
  l.kind = LayerKind::Dropout;
  l.rate = rate;
  return l;
}

LayerSpec activation(Activation activation) {
  LayerSpec l;
  l.kind = LayerKind::Activation;
  l.activation = activation;
  return l;
}

LayerSpec frozen(LayerSpec l) {
  l.trainable = false;
  return l;
}

LayerSpec withoutBias(LayerSpec l) {
  l.use_bias = false;
  return l;
}

ModelSpec modelSpec(Shape input, std::vector<LayerSpec> layers, LossKind loss) {
  ModelSpec spec;
  spec.name = "test";
  spec.seed = 5;
  spec.input = std::move(input);
  spec.loss = loss;
  for (size_t i = 0; i < layers.size(); ++i) layers[i].name = "layer" + std::to_string(i);
  spec.layers = std::move(layers);
  return spec;
}

Device& cpuDevice() {
  static const std::unique_ptr<Device> device = createCpuDevice(2);
  return *device;
}

std::vector<std::unique_ptr<Device>> cpuDevices(int n) {
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i) names.push_back("cpu:" + std::to_string(i));
  return createDevices(names, n);  // one thread each
}

Model::Model(const ModelSpec& spec)
    : graph(buildLayerGraph(spec)), layout(graph.variables), parameters(layout.totalSize()) {
  initializeVariables(graph, layout, spec.seed, parameters);
  Rng rng(17);
  for (int64_t i = 0; i < parameters.size(); ++i)
    parameters.data()[i] += float(0.2 * (rng.uniform() - 0.5));
}

TestBatch::TestBatch(const LayerGraph& graph, int64_t size, uint64_t seed) {
  Rng rng(seed);
  inputs.resize(size_t(size * numElements(graph.input_shape)));
  for (float& x : inputs) x = float(2.0 * rng.uniform() - 1.0);
  const int64_t outputs = numElements(graph.output_shape);
  for (int64_t i = 0; i < size; ++i) labels.push_back(int32_t(rng.below(uint64_t(outputs))));
  targets.resize(size_t(size * outputs));
  for (float& t : targets) t = float(2.0 * rng.uniform() - 1.0);
}

Batch TestBatch::slice(const LayerGraph& graph, int64_t begin, int64_t size) const {
  return {size, inputs.data() + begin * numElements(graph.input_shape), labels.data() + begin,
          targets.data() + begin * numElements(graph.output_shape)};
}

FlatBuffer untouchedGradients(const VariableLayout& layout) {
  FlatBuffer gradients(layout.totalSize());
  std::fill_n(gradients.data(), gradients.size(), std::numeric_limits<float>::quiet_NaN());
  return gradients;
}

void checkSameGradients(const VariableLayout& layout, const FlatBuffer& expected,
                        const FlatBuffer& actual) {
  for (const VariableView& v : layout.views()) {
    INFO("variable " << v.name);
    const std::span<const float> e = expected.view(v), a = actual.view(v);
    if (!v.trainable) {
      CHECK(std::all_of(a.begin(), a.end(), [](float g) { return std::isnan(g); }));
      continue;
    }
    for (size_t i = 0; i < e.size(); ++i) {
      INFO("element " << i);
      REQUIRE(std::isfinite(a[i]));
      REQUIRE(a[i] == Approx(e[i]).margin(2e-6).epsilon(1e-4));
    }
  }
}

}  // namespace traind
