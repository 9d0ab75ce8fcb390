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

ModelSpec progressModel() {
  return modelSpec({6, 6, 2}, {frozen(conv2d(3, 3, 1, Padding::Same)),
                               conv2d(4, 3, 2, Padding::Same, Activation::Relu),
                               pooling(LayerKind::MaxPool, 2, 2, Padding::Same), flatten(),
                               dense(6, Activation::Tanh), dropout(0.3f), dense(4)});
}

namespace {

// Records each progress call: the gradients from its variable on as they
// are then, and NaN written over those variables' parameters.
struct ProgressRecorder : GradientProgress {
  const VariableLayout& layout;
  float* parameters;
  const float* gradients;
  std::vector<size_t> calls;
  std::vector<std::vector<float>> seen;

  ProgressRecorder(const VariableLayout& l, float* p, const float* g)
      : layout(l), parameters(p), gradients(g) {}

  int64_t offsetOf(size_t variable) const {
    return variable < layout.views().size() ? layout.views()[variable].offset
                                            : layout.totalSize();
  }
  void finalFrom(size_t first_variable) override {
    calls.push_back(first_variable);
    const int64_t begin = offsetOf(first_variable);
    seen.emplace_back(gradients + begin, gradients + layout.totalSize());
    std::fill(parameters + begin, parameters + layout.totalSize(),
              std::numeric_limits<float>::quiet_NaN());
  }
};

}  // namespace

void checkGradientProgress(Replica& replica, const Model& model, const Batch& batch,
                           const std::vector<size_t>& expected_calls, int steps) {
  FlatBuffer expected = untouchedGradients(model.layout);
  replica.trainStep(batch, model.parameters.data(), expected.data(), 7);
  for (int s = 0; s < steps; ++s) {
    INFO("step " << s);
    FlatBuffer parameters(model.layout.totalSize());
    std::copy_n(model.parameters.data(), parameters.size(), parameters.data());
    FlatBuffer gradients = untouchedGradients(model.layout);
    ProgressRecorder progress(model.layout, parameters.data(), gradients.data());
    replica.trainStepWithProgress(batch, parameters.data(), gradients.data(), 7, progress);
    CHECK(progress.calls == expected_calls);
    checkSameGradients(model.layout, expected, gradients);
    for (size_t k = 0; k < progress.calls.size(); ++k) {
      INFO("call " << k << ", from variable " << progress.calls[k]);
      CHECK(std::equal(progress.seen[k].begin(), progress.seen[k].end(),
                       gradients.data() + progress.offsetOf(progress.calls[k]),
                       [](float a, float b) {
                         return a == b || (std::isnan(a) && std::isnan(b));
                       }));
    }
  }
}

void checkSameTraining(Replica& whole, Replica& split, Model& model, int64_t batch_size) {
  REQUIRE(split.batchSize() == batch_size);
  for (uint64_t step = 0; step < 3; ++step) {
    INFO("step " << step);
    const TestBatch data(model.graph, batch_size, 100 + step);
    FlatBuffer expected = untouchedGradients(model.layout);
    FlatBuffer actual = untouchedGradients(model.layout);
    const StepResult e =
        whole.trainStep(data.batch(), model.parameters.data(), expected.data(), step);
    const StepResult a =
        split.trainStep(data.batch(), model.parameters.data(), actual.data(), step);
    CHECK(a.loss == Approx(e.loss).epsilon(1e-5));
    CHECK(a.correct == e.correct);
    checkSameGradients(model.layout, expected, actual);

    const StepResult ee = whole.evaluate(data.batch(), model.parameters.data());
    const StepResult ea = split.evaluate(data.batch(), model.parameters.data());
    CHECK(ea.loss == Approx(ee.loss).epsilon(1e-5));
    CHECK(ea.correct == ee.correct);
    for (int64_t i = 0; i < model.parameters.size(); ++i)
      if (!std::isnan(expected.data()[i])) model.parameters.data()[i] -= 0.1f * expected.data()[i];
  }
}

void checkSamePaddingAfter(Device& device) {
  ModelSpec spec =
      modelSpec({4, 4, 1}, {conv2d(1, 3, 2, Padding::Same, Activation::Linear), flatten()},
                LossKind::MeanSquaredError);
  spec.layers[0].kernel_initializer = {InitializerSpec::Kind::Constant, 1.0f};
  const LayerGraph graph = buildLayerGraph(spec);
  const VariableLayout layout(graph.variables);
  FlatBuffer parameters(layout.totalSize());
  initializeVariables(graph, layout, 1, parameters);
  const auto replica = device.createReplica(graph, layout, 1, kReplicaSeed);
  const std::vector<float> ones(16, 1.0f);
  const std::vector<float> expected{9, 6, 6, 4};
  CHECK(replica->evaluate({1, ones.data(), nullptr, expected.data()}, parameters.data()).loss ==
        Approx(0.0).margin(1e-12));
  const std::vector<float> padded_before{4, 6, 6, 9};
  CHECK(
      replica->evaluate({1, ones.data(), nullptr, padded_before.data()}, parameters.data()).loss ==
      Approx(12.5));
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

namespace {

struct Image {
  int64_t h = 0, w = 0, c = 0;
  std::vector<double> v;  // [h, w, c] row-major; a vector is h = w = 1
  double& at(int64_t y, int64_t x, int64_t k) { return v[size_t((y * w + x) * c + k)]; }
};

double activate(Activation a, double x) {
  switch (a) {
    case Activation::Linear:
      return x;
    case Activation::Relu:
      return x > 0 ? x : 0;
    case Activation::Tanh:
      return std::tanh(x);
    case Activation::Sigmoid:
      return 1.0 / (1.0 + std::exp(-x));
  }
  return x;
}

// TensorFlow: SAME gives ceil(in / stride) outputs and pads
// max((out - 1) * stride + window - in, 0), the smaller half first.
void outputAndPad(int64_t in, int64_t window, int64_t stride, Padding padding, int64_t& out,
                  int64_t& pad_begin) {
  if (padding == Padding::Valid) {
    out = (in - window) / stride + 1;
    pad_begin = 0;
    return;
  }
  out = (in + stride - 1) / stride;
  pad_begin = std::max<int64_t>((out - 1) * stride + window - in, 0) / 2;
}

}  // namespace

std::vector<double> referenceForward(const ModelSpec& spec, const VariableLayout& layout,
                                     const float* parameters, const float* example) {
  const Shape& in_shape = spec.input;
  Image x;
  if (in_shape.size() == 3) {
    x = {in_shape[0], in_shape[1], in_shape[2], {}};
  } else {
    x = {1, 1, in_shape[0], {}};
  }
  x.v.assign(example, example + x.h * x.w * x.c);
  const float* p = parameters;
  for (const LayerSpec& l : spec.layers) {
    const VariableView* kernel = layout.find(l.name + "/kernel");
    const VariableView* bias = layout.find(l.name + "/bias");
    Image y;
    switch (l.kind) {
      case LayerKind::Conv2D:
      case LayerKind::MaxPool:
      case LayerKind::AvgPool: {
        int64_t pad_top, pad_left;
        outputAndPad(x.h, l.window[0], l.stride[0], l.padding, y.h, pad_top);
        outputAndPad(x.w, l.window[1], l.stride[1], l.padding, y.w, pad_left);
        y.c = l.kind == LayerKind::Conv2D ? l.filters : x.c;
        y.v.assign(size_t(y.h * y.w * y.c), 0.0);
        for (int64_t oy = 0; oy < y.h; ++oy)
          for (int64_t ox = 0; ox < y.w; ++ox)
            for (int64_t o = 0; o < y.c; ++o) {
              double sum = 0, max = -1e300;
              int64_t count = 0;
              for (int64_t ky = 0; ky < l.window[0]; ++ky)
                for (int64_t kx = 0; kx < l.window[1]; ++kx) {
                  const int64_t iy = oy * l.stride[0] + ky - pad_top;
                  const int64_t ix = ox * l.stride[1] + kx - pad_left;
                  if (iy < 0 || iy >= x.h || ix < 0 || ix >= x.w) continue;
                  ++count;
                  if (l.kind == LayerKind::Conv2D) {
                    for (int64_t i = 0; i < x.c; ++i)
                      sum += x.at(iy, ix, i) *
                             p[kernel->offset + ((ky * l.window[1] + kx) * x.c + i) * y.c + o];
                  } else {
                    sum += x.at(iy, ix, o);
                    max = std::max(max, x.at(iy, ix, o));
                  }
                }
              double& out = y.at(oy, ox, o);
              if (l.kind == LayerKind::Conv2D)
                out = activate(l.activation, sum + (bias ? p[bias->offset + o] : 0.0));
              else
                out = l.kind == LayerKind::MaxPool ? max : sum / double(count);
            }
        break;
      }
      case LayerKind::Dense: {
        y = {1, 1, l.units, std::vector<double>(size_t(l.units))};
        const int64_t in = x.h * x.w * x.c;
        for (int64_t o = 0; o < l.units; ++o) {
          double sum = bias ? p[bias->offset + o] : 0.0;
          for (int64_t i = 0; i < in; ++i)
            sum += x.v[size_t(i)] * p[kernel->offset + i * l.units + o];
          y.v[size_t(o)] = activate(l.activation, sum);
        }
        break;
      }
      case LayerKind::Flatten:
        y = {1, 1, x.h * x.w * x.c, x.v};
        break;
      case LayerKind::Dropout:
        y = x;
        break;  // evaluation
      case LayerKind::Activation:
        y = x;
        for (double& e : y.v) e = activate(l.activation, e);
        break;
    }
    x = std::move(y);
  }
  return x.v;
}

void checkReplicaGradients(Replica& replica, Model& model, const GradientCheck& check) {
  const TestBatch data(model.graph, replica.batchSize(), 23);
  const Batch batch = data.batch();
  const float untouched = std::numeric_limits<float>::quiet_NaN();
  FlatBuffer gradients(model.layout.totalSize());
  std::fill_n(gradients.data(), gradients.size(), untouched);
  replica.trainStep(batch, model.parameters.data(), gradients.data(), check.step);

  FlatBuffer scratch(model.layout.totalSize());
  auto loss = [&] {
    return check.through_train_step
               ? replica.trainStep(batch, model.parameters.data(), scratch.data(), check.step).loss
               : replica.evaluate(batch, model.parameters.data()).loss;
  };
  Rng rng(31);
  for (const VariableView& v : model.layout.views()) {
    const std::span<const float> grad = std::as_const(gradients).view(v);
    if (!v.trainable) {
      INFO("frozen variable " << v.name);
      CHECK(std::all_of(grad.begin(), grad.end(), [](float g) { return std::isnan(g); }));
      continue;
    }
    std::vector<int64_t> indices;
    if (v.size <= check.samples_per_variable) {
      for (int64_t i = 0; i < v.size; ++i) indices.push_back(i);
    } else {
      for (int k = 0; k < check.samples_per_variable; ++k)
        indices.push_back(int64_t(rng.below(uint64_t(v.size))));
    }
    for (int64_t i : indices) {
      float& p = model.parameters.data()[v.offset + i];
      const float saved = p;
      const double analytic = grad[size_t(i)];
      double numeric = 0.0;
      bool agrees = false;
      for (double epsilon : check.epsilons) {
        p = saved + float(epsilon);
        const double plus = loss();
        p = saved - float(epsilon);
        const double minus = loss();
        p = saved;
        numeric = (plus - minus) / (2.0 * epsilon);
        agrees = std::abs(analytic - numeric) <=
                 check.abs_tolerance + check.rel_tolerance * std::abs(numeric);
        if (agrees) break;
      }
      INFO(v.name << "[" << i << "]: trainStep " << analytic << ", numeric " << numeric);
      CHECK(agrees);
    }
  }
}

}  // namespace traind
