// The CPU back end, layer by layer: every layer kind and both losses through
// a numeric gradient check (trainStep's gradients against central
// differences of the loss), and the forward pass against a naive NHWC
// reference written from TensorFlow's definitions (SAME padding, pooling,
// flatten order, dropout masks).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/layer_graph.h"
#include "core/random.h"
#include "core/variable_layout.h"
#include "devices/cpu/cpu_device.h"
#include "test/test_models.h"

namespace traind {
namespace {

// ---- a model with a replica ----

// A Model (test/test_models.h) and a replica of it for one batch size.
struct TestModel : Model {
  ModelSpec spec;
  std::unique_ptr<Replica> replica;

  TestModel(ModelSpec model_spec, int64_t batch_size)
      : Model(model_spec), spec(std::move(model_spec)) {
    replica = cpuDevice().createReplica(graph, layout, batch_size, kReplicaSeed);
  }

  const VariableView& variable(const std::string& name) const {
    const VariableView* v = layout.find(name);
    REQUIRE(v != nullptr);
    return *v;
  }
};

// ---- the numeric gradient check (test/test_models.h) ----

void checkGradients(TestModel& model, const GradientCheck& check = {}) {
  checkReplicaGradients(*model.replica, model, check);
}

// Checks evaluate's forward pass against the reference: with the
// reference's outputs as mean-squared-error targets the loss is ~0, and any
// element computed differently (order, padding, averaging) makes it positive.
void checkAgainstReference(TestModel& model, int64_t batch_size) {
  REQUIRE(model.spec.loss == LossKind::MeanSquaredError);
  TestBatch data(model.graph, batch_size, 41);
  const int64_t in = numElements(model.graph.input_shape);
  const int64_t out = numElements(model.graph.output_shape);
  double scale = 0.0;
  for (int64_t n = 0; n < batch_size; ++n) {
    const std::vector<double> y = referenceForward(
        model.spec, model.layout, model.parameters.data(), data.inputs.data() + n * in);
    REQUIRE(int64_t(y.size()) == out);
    for (int64_t k = 0; k < out; ++k) {
      data.targets[size_t(n * out + k)] = float(y[size_t(k)]);
      scale += y[size_t(k)] * y[size_t(k)];
    }
  }
  const double loss = model.replica->evaluate(data.batch(), model.parameters.data()).loss;
  INFO("mean squared difference from the reference " << loss << ", mean square "
                                                     << scale / double(batch_size * out));
  CHECK(scale > 0.0);
  CHECK(loss <= 1e-10 * (1.0 + scale / double(batch_size * out)));
}

}  // namespace

// ---- gradient checks, one layer kind at a time ----

TEST_CASE("dense with fused activations, softmax cross-entropy") {
  TestModel model(modelSpec({6}, {dense(7, Activation::Tanh), dense(5, Activation::Sigmoid),
                                  dense(5, Activation::Relu), dense(4)}),
                  3);
  checkGradients(model);
}

TEST_CASE("softmax cross-entropy with label smoothing") {
  ModelSpec spec = modelSpec({6}, {dense(5, Activation::Tanh), dense(4)});
  spec.label_smoothing = 0.2f;
  TestModel model(spec, 3);
  checkGradients(model);
}

TEST_CASE("dense without bias, mean squared error") {
  TestModel model(modelSpec({5}, {withoutBias(dense(6, Activation::Tanh)), dense(3)},
                            LossKind::MeanSquaredError),
                  4);
  checkGradients(model);
}

TEST_CASE("conv2d: same and valid padding, stride 1 and 2, odd sizes") {
  for (Padding padding : {Padding::Same, Padding::Valid}) {
    for (int64_t stride : {1, 2}) {
      DYNAMIC_SECTION((padding == Padding::Same ? "same" : "valid") << " stride " << stride) {
        // Two convolutions so that the first one's gradient goes through the
        // second's backward-data; 17 filters make blocked formats pad channels.
        TestModel model(modelSpec({7, 5, 2}, {conv2d(3, 3, 1, padding),
                                              conv2d(17, 3, stride, padding, Activation::Sigmoid),
                                              flatten(), dense(3)}),
                        2);
        checkGradients(model);
      }
    }
  }
}

TEST_CASE("conv2d without bias, mean squared error") {
  TestModel model(
      modelSpec({5, 6, 3}, {withoutBias(conv2d(4, 2, 2, Padding::Same)), flatten(), dense(2)},
                LossKind::MeanSquaredError),
      3);
  checkGradients(model);
}

TEST_CASE("pooling: max and average, same and valid padding, stride 1 and 2") {
  for (LayerKind kind : {LayerKind::MaxPool, LayerKind::AvgPool}) {
    for (Padding padding : {Padding::Same, Padding::Valid}) {
      for (int64_t stride : {1, 2}) {
        DYNAMIC_SECTION((kind == LayerKind::MaxPool ? "max" : "avg")
                        << (padding == Padding::Same ? " same" : " valid") << " stride "
                        << stride) {
          // The convolution before the pooling has its kernel gradient
          // checked through the pooling's backward.
          TestModel model(
              modelSpec({7, 5, 2}, {conv2d(5, 3, 1, Padding::Same, Activation::Linear),
                                    pooling(kind, 3, stride, padding), flatten(), dense(3)}),
              2);
          GradientCheck check;
          check.epsilons = {2e-3, 5e-4, 2e-4};
          check.abs_tolerance = 1e-3;
          checkGradients(model, check);
        }
      }
    }
  }
}

TEST_CASE("activation layers on vectors and images") {
  SECTION("vectors") {
    TestModel model(
        modelSpec({6}, {dense(6), activation(Activation::Tanh), dense(5),
                        activation(Activation::Sigmoid), dense(5), activation(Activation::Relu),
                        activation(Activation::Linear), dense(3)}),
        3);
    checkGradients(model);
  }
  SECTION("images") {
    TestModel model(modelSpec({5, 4, 2}, {conv2d(6, 3, 1, Padding::Same, Activation::Linear),
                                          activation(Activation::Sigmoid), flatten(), dense(3)}),
                    2);
    checkGradients(model);
  }
}

TEST_CASE("dropout: gradients through the mask of one step") {
  GradientCheck check;
  check.through_train_step = true;
  SECTION("vectors") {
    TestModel model(modelSpec({6}, {dense(12, Activation::Tanh), dropout(0.5f), dense(3)}), 3);
    checkGradients(model, check);
  }
  SECTION("images in a blocked format") {
    TestModel model(
        modelSpec({4, 3, 2}, {conv2d(17, 3, 1, Padding::Same), dropout(0.3f), flatten(), dense(3)}),
        2);
    checkGradients(model, check);
  }
}

TEST_CASE("frozen layers get no gradient and pass gradients through") {
  SECTION("a frozen prefix") {
    TestModel model(modelSpec({5, 5, 2}, {frozen(conv2d(4, 3, 1, Padding::Same)),
                                          pooling(LayerKind::MaxPool, 2, 2, Padding::Same),
                                          flatten(), dense(3)}),
                    2);
    checkGradients(model);
  }
  SECTION("a frozen layer in the middle") {
    TestModel model(
        modelSpec({6}, {dense(5, Activation::Tanh), frozen(dense(5, Activation::Tanh)), dense(3)}),
        3);
    checkGradients(model);
  }
  SECTION("everything frozen") {
    TestModel model(modelSpec({4}, {frozen(dense(3))}), 2);
    checkGradients(model);
  }
}

// ---- forward semantics ----

TEST_CASE("SAME padding puts the odd pixel at the bottom and the right") {
  checkSamePaddingAfter(cpuDevice());
}

TEST_CASE("SAME pooling: maxima and averages over the real pixels only") {
  // 3x3 input 1..9; 2x2 windows, stride 2: padding one row and column after.
  const std::vector<float> input{1, 2, 3, 4, 5, 6, 7, 8, 9};
  for (LayerKind kind : {LayerKind::MaxPool, LayerKind::AvgPool}) {
    const ModelSpec spec = modelSpec({3, 3, 1}, {pooling(kind, 2, 2, Padding::Same), flatten()},
                                     LossKind::MeanSquaredError);
    const LayerGraph graph = buildLayerGraph(spec);
    const VariableLayout layout(graph.variables);
    FlatBuffer parameters(layout.totalSize());
    const auto replica = cpuDevice().createReplica(graph, layout, 1, kReplicaSeed);
    const std::vector<float> expected = kind == LayerKind::MaxPool
                                            ? std::vector<float>{5, 6, 8, 9}
                                            : std::vector<float>{3, 4.5f, 7.5f, 9};
    CHECK(replica->evaluate({1, input.data(), nullptr, expected.data()}, parameters.data()).loss ==
          Approx(0.0).margin(1e-12));
  }
}

TEST_CASE("forward pass matches a naive NHWC reference") {
  SECTION("convolutions, blocked formats, flatten in (h, w, c) order") {
    TestModel model(modelSpec({5, 4, 3},
                              {conv2d(20, 3, 2, Padding::Same),
                               conv2d(9, 2, 1, Padding::Valid, Activation::Relu), flatten(),
                               dense(4, Activation::Sigmoid), dense(3)},
                              LossKind::MeanSquaredError),
                    3);
    checkAgainstReference(model, 3);
  }
  SECTION("flatten straight on the input") {
    TestModel model(modelSpec({4, 3, 2}, {flatten(), dense(5, Activation::Tanh), dense(2)},
                              LossKind::MeanSquaredError),
                    3);
    checkAgainstReference(model, 3);
    checkGradients(model);
  }
  SECTION("flatten of a vector") {
    TestModel model(modelSpec({6}, {dense(4, Activation::Tanh), flatten(), dense(3)},
                              LossKind::MeanSquaredError),
                    2);
    checkAgainstReference(model, 2);
    checkGradients(model);
  }
  SECTION("pooling and activation layers") {
    TestModel model(
        modelSpec(
            {7, 6, 2},
            {conv2d(16, 3, 1, Padding::Same, Activation::Linear),
             pooling(LayerKind::MaxPool, 3, 2, Padding::Same), activation(Activation::Tanh),
             pooling(LayerKind::AvgPool, 2, 1, Padding::Same), dropout(0.5f), flatten(), dense(3)},
            LossKind::MeanSquaredError),
        2);
    checkAgainstReference(model, 2);
  }
}

TEST_CASE("dropout masks follow the documented formula in canonical order") {
  // A 1x1 convolution with an identity kernel, then dropout as the last
  // layer: with zero targets the training loss is the mean of
  // (x[i] * mask[i])^2, i in NHWC order, which only the right mask gives.
  const int64_t batch_size = 2, h = 3, w = 2, c = 17;
  const float rate = 0.4f;
  ModelSpec spec = modelSpec(
      {h, w, c}, {conv2d(c, 1, 1, Padding::Valid, Activation::Linear), dropout(rate), flatten()},
      LossKind::MeanSquaredError);
  const LayerGraph graph = buildLayerGraph(spec);
  const VariableLayout layout(graph.variables);
  FlatBuffer parameters(layout.totalSize()), gradients(layout.totalSize());
  const VariableView& kernel = *layout.find("layer0/kernel");
  for (int64_t i = 0; i < c; ++i) parameters.data()[kernel.offset + i * c + i] = 1.0f;
  const auto replica = cpuDevice().createReplica(graph, layout, batch_size, kReplicaSeed);
  const TestBatch data(graph, batch_size, 5);
  const std::vector<float> zeros(data.targets.size(), 0.0f);
  const Batch batch{batch_size, data.inputs.data(), nullptr, zeros.data()};

  const uint64_t step = 12;
  const int dropout_layer = 1;
  const uint64_t stream = hashCombine(kReplicaSeed, hashCombine(step, dropout_layer));
  double expected = 0.0;
  int64_t dropped = 0;
  for (size_t i = 0; i < data.inputs.size(); ++i) {
    const bool drop = uniformFloat(stream, i) < rate;
    dropped += drop;
    const double y = drop ? 0.0 : double(data.inputs[i]) / (1.0 - rate);
    expected += y * y;
  }
  expected /= double(data.inputs.size());
  CHECK(dropped > 0);
  CHECK(dropped < int64_t(data.inputs.size()));
  CHECK(replica->trainStep(batch, parameters.data(), gradients.data(), step).loss ==
        Approx(expected).epsilon(1e-5));
  // The same step gives the same mask; evaluation applies none.
  CHECK(replica->trainStep(batch, parameters.data(), gradients.data(), step).loss ==
        Approx(expected).epsilon(1e-5));
  double no_dropout = 0.0;
  for (float x : data.inputs) no_dropout += double(x) * double(x);
  CHECK(replica->evaluate(batch, parameters.data()).loss ==
        Approx(no_dropout / double(data.inputs.size())).epsilon(1e-5));
}

// ---- the step contract ----

TEST_CASE("a train step is deterministic and agrees with evaluate") {
  TestModel model(
      modelSpec({6, 6, 1}, {conv2d(8, 3, 1, Padding::Same, Activation::Relu),
                            pooling(LayerKind::MaxPool, 2, 2, Padding::Valid), flatten(),
                            dense(10, Activation::Relu), dropout(0.2f), dense(4)}),
      5);
  const TestBatch data(model.graph, 5, 8);
  FlatBuffer first(model.layout.totalSize()), second(model.layout.totalSize());
  const StepResult a =
      model.replica->trainStep(data.batch(), model.parameters.data(), first.data(), 7);
  const StepResult b =
      model.replica->trainStep(data.batch(), model.parameters.data(), second.data(), 7);
  CHECK(a.loss == b.loss);
  CHECK(a.correct == b.correct);
  CHECK(std::equal(first.data(), first.data() + first.size(), second.data()));
  const StepResult other_step =
      model.replica->trainStep(data.batch(), model.parameters.data(), second.data(), 8);
  CHECK(other_step.loss != a.loss);  // another dropout mask

  // Without dropout the training loss is evaluate's.
  TestModel plain(modelSpec({5}, {dense(4, Activation::Tanh), dense(3)}), 4);
  const TestBatch plain_data(plain.graph, 4, 9);
  FlatBuffer gradients(plain.layout.totalSize());
  const StepResult trained =
      plain.replica->trainStep(plain_data.batch(), plain.parameters.data(), gradients.data(), 0);
  const StepResult evaluated = plain.replica->evaluate(plain_data.batch(), plain.parameters.data());
  CHECK(trained.loss == evaluated.loss);
  CHECK(trained.correct == evaluated.correct);
}

// What a worker relies on to send gradients during backward: when the step
// says variables from v on are final, their gradients are, and the
// parameters of those variables may be overwritten (by a pull) without
// changing the step. Once per layer with variables that backward reaches
// (the dense layers and the second convolution: variables 6, 4, 2), then,
// past the frozen first layer, 0.
TEST_CASE("a step's progress names only final gradients and parameters it no longer reads") {
  TestModel model(progressModel(), 5);
  const TestBatch data(model.graph, 5, 12);
  checkGradientProgress(*model.replica, model, data.batch(), {6, 4, 2, 0});
}

TEST_CASE("softmax cross-entropy: stable for large logits, counts arg-max hits") {
  // A frozen identity dense layer passes the inputs through as logits.
  ModelSpec spec = modelSpec({3}, {frozen(dense(3))});
  const LayerGraph graph = buildLayerGraph(spec);
  const VariableLayout layout(graph.variables);
  FlatBuffer parameters(layout.totalSize());
  const VariableView& kernel = *layout.find("layer0/kernel");
  for (int i = 0; i < 3; ++i) parameters.data()[kernel.offset + i * 3 + i] = 1.0f;
  const auto replica = cpuDevice().createReplica(graph, layout, 2, kReplicaSeed);
  const std::vector<float> logits{1000.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  const std::vector<int32_t> labels{0, 2};
  const StepResult r =
      replica->evaluate({2, logits.data(), labels.data(), nullptr}, parameters.data());
  // Example 0: log(1 + 2e-1000) ~ 0; example 1: log 3.
  CHECK(r.loss == Approx(std::log(3.0) / 2.0));
  CHECK(r.correct == 1);  // example 1's arg-max is its first element, 0, not 2

  // Smoothed by 0.3 over 3 classes: targets 0.8 on the label, 0.1 off it.
  // Example 0: log-sum-exp 1000, so 0.1 x 1000 twice; example 1: log 3.
  ModelSpec smoothed_spec = spec;
  smoothed_spec.label_smoothing = 0.3f;
  const LayerGraph smoothed_graph = buildLayerGraph(smoothed_spec);
  const auto smoothed = cpuDevice().createReplica(smoothed_graph, layout, 2, kReplicaSeed);
  const StepResult s =
      smoothed->evaluate({2, logits.data(), labels.data(), nullptr}, parameters.data());
  CHECK(s.loss == Approx((0.2 * 1000.0 + std::log(3.0)) / 2.0));
  CHECK(s.correct == 1);

  const std::vector<int32_t> bad_labels{0, 3};
  CHECK_THROWS_AS(
      replica->evaluate({2, logits.data(), bad_labels.data(), nullptr}, parameters.data()),
      InputError);
}

}  // namespace traind
