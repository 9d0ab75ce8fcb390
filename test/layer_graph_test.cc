// Shape inference and variable naming, TensorFlow's padding rules included.
#include "core/layer_graph.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <span>
#include <utility>

#include "core/variable_layout.h"

using namespace traind;

namespace {

LayerSpec conv(const char* name, int64_t filters, int64_t k, int64_t s, Padding p) {
  LayerSpec l;
  l.kind = LayerKind::Conv2D;
  l.name = name;
  l.filters = filters;
  l.window = {k, k};
  l.stride = {s, s};
  l.padding = p;
  return l;
}

LayerSpec pool(const char* name, int64_t k, int64_t s, Padding p) {
  LayerSpec l;
  l.kind = LayerKind::MaxPool;
  l.name = name;
  l.window = {k, k};
  l.stride = {s, s};
  l.padding = p;
  return l;
}

LayerSpec dense(const char* name, int64_t units) {
  LayerSpec l;
  l.kind = LayerKind::Dense;
  l.name = name;
  l.units = units;
  return l;
}

LayerSpec flatten() {
  LayerSpec l;
  l.kind = LayerKind::Flatten;
  l.name = "flatten_1";
  return l;
}

ModelSpec fashionCnn() {
  ModelSpec spec;
  spec.path = "cnn.yaml";
  spec.input = {28, 28, 1};
  spec.layers = {conv("conv1", 32, 3, 1, Padding::Same), conv("conv2", 64, 3, 2, Padding::Same),
                 pool("pool", 2, 2, Padding::Valid), flatten(), dense("hidden", 64),
                 dense("logits", 10)};
  return spec;
}

}  // namespace

TEST_CASE("fashion_cnn shapes and parameter count") {
  const LayerGraph g = buildLayerGraph(fashionCnn());
  REQUIRE(g.layers.size() == 6);
  CHECK(g.layers[0].output_shape == Shape{28, 28, 32});
  CHECK(g.layers[1].output_shape == Shape{14, 14, 64});
  CHECK(g.layers[2].output_shape == Shape{7, 7, 64});
  CHECK(g.layers[3].output_shape == Shape{3136});
  CHECK(g.output_shape == Shape{10});
  // conv1 320, conv2 18496, hidden 200768, logits 650
  CHECK(g.parameterCount() == 320 + 18496 + 200768 + 650);
  CHECK(g.variables[0].name == "conv1/kernel");
  CHECK(g.variables[0].shape == Shape{3, 3, 1, 32});
  CHECK(g.variables[1].name == "conv1/bias");
  CHECK(g.variables[4].shape == Shape{3136, 64});
  CHECK(g.variables[0].fan_in == 9);
  CHECK(g.variables[0].fan_out == 9 * 32);
}

TEST_CASE("same padding follows TensorFlow: odd extra pixel at the bottom/right") {
  ModelSpec spec;
  spec.path = "p.yaml";
  spec.input = {28, 28, 32};
  spec.layers = {conv("c", 4, 3, 2, Padding::Same), flatten(), dense("d", 2)};
  LayerGraph g = buildLayerGraph(spec);
  // out = ceil(28 / 2) = 14; total pad = 13 * 2 + 3 - 28 = 1 -> 0 before, 1 after
  CHECK(g.layers[0].output_shape == Shape{14, 14, 4});
  CHECK(g.layers[0].pad_begin == std::array<int64_t, 2>{0, 0});
  CHECK(g.layers[0].pad_end == std::array<int64_t, 2>{1, 1});

  spec.input = {7, 5, 1};
  spec.layers[0] = conv("c", 4, 3, 1, Padding::Same);
  g = buildLayerGraph(spec);
  CHECK(g.layers[0].output_shape == Shape{7, 5, 4});
  CHECK(g.layers[0].pad_begin == std::array<int64_t, 2>{1, 1});
  CHECK(g.layers[0].pad_end == std::array<int64_t, 2>{1, 1});

  spec.layers[0] = conv("c", 4, 3, 2, Padding::Valid);
  g = buildLayerGraph(spec);
  CHECK(g.layers[0].output_shape == Shape{3, 2, 4});
}

TEST_CASE("a dense layer on an image names the layer, the fix and the shape") {
  ModelSpec spec = fashionCnn();
  spec.layers.erase(spec.layers.begin() + 3);  // no flatten
  spec.layers[3].location = {"cnn.yaml", 9, 5};
  try {
    buildLayerGraph(spec);
    FAIL("expected an InputError");
  } catch (const InputError& e) {
    const std::string m = e.what();
    CHECK_THAT(m, Catch::Contains("cnn.yaml:9:5"));
    CHECK_THAT(m, Catch::Contains("'hidden'"));
    CHECK_THAT(m, Catch::Contains("flatten"));
    CHECK_THAT(m, Catch::Contains("[7, 7, 64]"));
  }
}

TEST_CASE("a window larger than its input is refused, with either padding") {
  ModelSpec spec;
  spec.path = "p.yaml";
  spec.input = {2, 2, 1};
  spec.layers = {pool("p", 3, 1, Padding::Valid), flatten(), dense("d", 2)};
  CHECK_THROWS_WITH(buildLayerGraph(spec), Catch::Contains("does not fit in the input with "
                                                           "padding: valid"));
  // Same: oneDNN 2.6's avx512 convolution wrote past its buffers on a
  // kernel of 56 rows over 28.
  spec.input = {28, 28, 1};
  spec.layers = {pool("p", 29, 1, Padding::Same), flatten(), dense("d", 2)};
  CHECK_THROWS_WITH(buildLayerGraph(spec), Catch::Contains("its window 29x29 does not fit in the "
                                                           "input (padding: same would make"));
  spec.layers[0] = pool("p", 28, 1, Padding::Same);
  CHECK_NOTHROW(buildLayerGraph(spec));
}

TEST_CASE("softmax cross-entropy needs a vector of at least two") {
  ModelSpec spec;
  spec.path = "p.yaml";
  spec.input = {4};
  spec.layers = {dense("d", 1)};
  CHECK_THROWS_WITH(buildLayerGraph(spec), Catch::Contains("at least 2 outputs"));
  spec.loss = LossKind::MeanSquaredError;
  CHECK_NOTHROW(buildLayerGraph(spec));
}

TEST_CASE("a model beyond the size bounds is refused before anything wraps or allocates") {
  ModelSpec spec;
  spec.path = "big.yaml";
  spec.input = {1};
  spec.data.batch_size = 1;
  spec.layers = {dense("wide", 1), dense("logits", 2)};
  CHECK_NOTHROW(buildLayerGraph(spec));

  // A kernel just over 2^31 floats, and one whose size overflows int64.
  spec.layers[0].units = kMaxTensorFloats + 1;
  CHECK_THROWS_WITH(buildLayerGraph(spec),
                    Catch::Contains("'wide' (dense): its kernel [1, 2147483649] would hold more "
                                    "than the 2^31 floats a variable may hold"));
  ModelSpec image;
  image.path = "big.yaml";
  image.input = {28, 28, 1};
  image.layers = {conv("c", int64_t(1) << 30, 28, 1, Padding::Same), flatten(), dense("logits", 2)};
  CHECK_THROWS_WITH(buildLayerGraph(image), Catch::Contains("more than the 2^31 floats"));

  // Each variable within its bound, but not all of them together.
  spec.layers = {dense("a", kMaxTensorFloats), dense("b", 1), dense("c", kMaxTensorFloats),
                 dense("d", 1), dense("logits", 2)};
  spec.layers[0].use_bias = spec.layers[2].use_bias = false;
  CHECK_THROWS_WITH(buildLayerGraph(spec), Catch::Contains("the model would hold more than the "
                                                           "2^32 parameters"));

  // Activations: a layer's output for the whole batch.
  spec.layers = {dense("wide", 1 << 25), dense("logits", 2)};
  spec.data.batch_size = 128;
  CHECK_THROWS_WITH(buildLayerGraph(spec),
                    Catch::Contains("its output [33554432] for a batch of 128 would hold more "
                                    "than 2^31 floats"));
  spec.input = {1 << 30};
  CHECK_THROWS_WITH(buildLayerGraph(spec),
                    Catch::Contains("data.batch_size: a batch of 128 examples of "
                                    "the input [1073741824] would hold more than 2^31 floats: "
                                    "expected a smaller batch"));
  // Two towers split a training batch, but the evaluation runs whole
  // batches on the first, and a placed model's stages run the whole batch.
  spec.input = {1};
  spec.training.devices = {"cpu:0", "cpu:1"};
  CHECK_THROWS_WITH(buildLayerGraph(spec), Catch::Contains("its output [33554432] for a batch "
                                                           "of 128 would hold more"));
  spec.data.batch_size = 64;
  CHECK_NOTHROW(buildLayerGraph(spec));
}

TEST_CASE("variable layout aligns every variable and initialisers are seeded by name") {
  const ModelSpec spec = fashionCnn();
  const LayerGraph g = buildLayerGraph(spec);
  VariableLayout layout(g.variables);
  for (const VariableView& v : layout.views())
    CHECK(v.offset % VariableLayout::kVariableAlignment == 0);
  FlatBuffer a(layout.totalSize()), b(layout.totalSize());
  initializeVariables(g, layout, 7, a);
  initializeVariables(g, layout, 7, b);
  const VariableView& k = *layout.find("hidden/kernel");
  CHECK(std::equal(a.view(k).begin(), a.view(k).end(), b.view(k).begin()));
  // glorot uniform limit sqrt(6 / (3136 + 64))
  const float limit = std::sqrt(6.0f / 3200.0f);
  float lo = 0, hi = 0;
  for (float x : a.view(k)) lo = std::min(lo, x), hi = std::max(hi, x);
  CHECK(lo >= -limit);
  CHECK(hi <= limit);
  CHECK(hi > 0.9f * limit);
  for (float x : a.view(*layout.find("hidden/bias"))) CHECK(x == 0.0f);
}

TEST_CASE("glorot_normal and he_normal draw Keras' normal, truncated at two deviations") {
  ModelSpec spec;
  spec.path = "normal.yaml";
  spec.input = {400};
  LayerSpec glorot = dense("glorot", 600), he = dense("he", 500);
  glorot.kernel_initializer.kind = InitializerSpec::Kind::GlorotNormal;
  he.kernel_initializer.kind = InitializerSpec::Kind::HeNormal;
  spec.layers = {glorot, he};
  const LayerGraph g = buildLayerGraph(spec);
  const VariableLayout layout(g.variables);
  FlatBuffer parameters(layout.totalSize());
  initializeVariables(g, layout, 7, parameters);
  // Keras: stddev sqrt(scale), cut at 2 * sqrt(scale) / 0.8796...
  for (const auto& [name, scale] :
       {std::pair{"glorot/kernel", 2.0 / (400 + 600)}, std::pair{"he/kernel", 2.0 / 600}}) {
    INFO(name);
    const std::span<const float> values = parameters.view(*layout.find(name));
    const double bound = 2.0 * std::sqrt(scale) / 0.87962566103423978;
    double sum_squares = 0.0, largest = 0.0;
    for (float x : values) {
      sum_squares += double(x) * double(x);
      largest = std::max(largest, std::abs(double(x)));
    }
    CHECK(largest <= bound);
    CHECK(largest > 0.99 * bound);  // about 1 value in 450 lies in the last 1%
    CHECK(std::sqrt(sum_squares / double(values.size())) == Approx(std::sqrt(scale)).epsilon(0.01));
  }
}

TEST_CASE("truncated_normal and random_normal draw TensorFlow 1's normals of the given deviation") {
  ModelSpec spec;
  spec.path = "normal.yaml";
  spec.input = {400};
  LayerSpec truncated = dense("truncated", 600), plain = dense("plain", 500);
  truncated.kernel_initializer = {InitializerSpec::Kind::TruncatedNormal, 0.05f};
  plain.kernel_initializer = {InitializerSpec::Kind::RandomNormal, 0.1f};
  spec.layers = {truncated, plain};
  const LayerGraph g = buildLayerGraph(spec);
  const VariableLayout layout(g.variables);
  FlatBuffer parameters(layout.totalSize());
  initializeVariables(g, layout, 7, parameters);
  const auto deviationAndLargest = [&](const char* name) {
    double sum_squares = 0.0, largest = 0.0;
    const std::span<const float> values = parameters.view(*layout.find(name));
    for (float x : values) {
      sum_squares += double(x) * double(x);
      largest = std::max(largest, std::abs(double(x)));
    }
    return std::pair{std::sqrt(sum_squares / double(values.size())), largest};
  };
  // Truncated at two deviations and not widened: the values' deviation is
  // 0.8796 of the one given.
  const auto [truncated_deviation, truncated_largest] = deviationAndLargest("truncated/kernel");
  CHECK(truncated_deviation == Approx(0.05 * 0.87962566103423978).epsilon(0.01));
  CHECK(truncated_largest <= 0.1);
  const auto [plain_deviation, plain_largest] = deviationAndLargest("plain/kernel");
  CHECK(plain_deviation == Approx(0.1).epsilon(0.01));
  CHECK(plain_largest > 0.4);  // 300k draws: beyond 4 deviations about 10 times
}
