// The CUDA back end against the CPU one and against numbers: every layer
// kind and both losses through a numeric gradient check on the GPU; the
// forward pass against a naive NHWC reference; CPU-vs-CUDA agreement of the
// loss and every gradient (dropout included: the masks are the same), of
// every optimizer update, and of the device-resident trainer's steps; two
// towers on one GPU against one tower with the whole batch.
//
// Without a usable GPU the binary prints why and exits 77, which ctest
// reports as skipped (test/CMakeLists.txt).
#define CATCH_CONFIG_RUNNER
#include <cuda_runtime_api.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/layer_graph.h"
#include "core/optimizer.h"
#include "core/random.h"
#include "core/variable_layout.h"
#include "devices/cpu/cpu_device.h"
#include "devices/cuda/cuda_device.h"
#include "devices/cuda/cuda_memory.h"
#include "devices/cuda/cuda_optimizer.h"
#include "devices/cuda/cuda_trainer.h"
#include "devices/device_list.h"
#include "devices/towers.h"
#include "test/test_models.h"

namespace traind {
namespace {

// ---- models built in code (test/test_models.h), on both devices ----

Device& gpuDevice() {
  static const std::unique_ptr<Device> device = createCudaDevice(0, "cuda:0");
  return *device;
}

// A Model and a replica of it on each device.
struct TestModel : Model {
  ModelSpec spec;
  std::unique_ptr<Replica> gpu;
  std::unique_ptr<Replica> cpu;

  TestModel(ModelSpec model_spec, int64_t batch_size)
      : Model(model_spec), spec(std::move(model_spec)) {
    gpu = gpuDevice().createReplica(graph, layout, batch_size, kReplicaSeed);
    cpu = cpuDevice().createReplica(graph, layout, batch_size, kReplicaSeed);
  }
};

// max |a - b| / max |b| over a span: the relative error of a tensor (an
// element-wise ratio is meaningless where the values are near zero).
double relativeError(std::span<const float> a, std::span<const float> b) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return scale > 0.0 ? diff / scale : diff;
}

constexpr double kAgreement = 1e-4;

// ---- the numeric gradient check (test/test_models.h), on the GPU ----

void checkGradients(TestModel& model, const GradientCheck& check = {}) {
  checkReplicaGradients(*model.gpu, model, check);
}

// ---- CPU against CUDA ----

// Several train steps (each a fresh batch and step number, so the captured
// graph must read each step's own values) and an evaluation: the loss, the
// hits and every trainable variable's gradient agree; frozen ones untouched.
void checkAgainstCpu(TestModel& model, int steps = 4) {
  const int64_t n = model.gpu->batchSize();
  FlatBuffer cpu_grads(model.layout.totalSize()), gpu_grads(model.layout.totalSize());
  for (int s = 0; s < steps; ++s) {
    const TestBatch data(model.graph, n, 100 + uint64_t(s));
    std::fill_n(gpu_grads.data(), gpu_grads.size(), std::numeric_limits<float>::quiet_NaN());
    const StepResult c =
        model.cpu->trainStep(data.batch(), model.parameters.data(), cpu_grads.data(), uint64_t(s));
    const StepResult g =
        model.gpu->trainStep(data.batch(), model.parameters.data(), gpu_grads.data(), uint64_t(s));
    INFO("step " << s);
    CHECK(g.loss == Approx(c.loss).epsilon(kAgreement));
    CHECK(g.correct == c.correct);
    for (const VariableView& v : model.layout.views()) {
      INFO(v.name);
      const std::span<const float> gv = std::as_const(gpu_grads).view(v);
      if (!v.trainable) {
        CHECK(std::all_of(gv.begin(), gv.end(), [](float x) { return std::isnan(x); }));
        continue;
      }
      CHECK(relativeError(gv, std::as_const(cpu_grads).view(v)) <= kAgreement);
    }
    const StepResult ce = model.cpu->evaluate(data.batch(), model.parameters.data());
    const StepResult ge = model.gpu->evaluate(data.batch(), model.parameters.data());
    CHECK(ge.loss == Approx(ce.loss).epsilon(kAgreement));
    CHECK(ge.correct == ce.correct);
  }
}

// ---- a naive NHWC reference of the forward pass, in double ----

// evaluate on the GPU with the reference's outputs as mean-squared-error
// targets: ~0, and positive for any element computed differently.
void checkAgainstReference(TestModel& model) {
  REQUIRE(model.spec.loss == LossKind::MeanSquaredError);
  const int64_t batch_size = model.gpu->batchSize();
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
  const double loss = model.gpu->evaluate(data.batch(), model.parameters.data()).loss;
  INFO("mean squared difference from the reference " << loss);
  CHECK(scale > 0.0);
  CHECK(loss <= 1e-10 * (1.0 + scale / double(batch_size * out)));
}

// Every layer kind, both losses, frozen layers, SAME padding with the odd
// pixel (explicitly padded convolutions) and without.
std::vector<std::pair<std::string, TestModel*>> layerModels() {
  static std::vector<std::unique_ptr<TestModel>> models;
  static std::vector<std::pair<std::string, TestModel*>> named;
  if (!named.empty()) return named;
  auto add = [&](std::string name, ModelSpec spec, int64_t batch) {
    models.push_back(std::make_unique<TestModel>(std::move(spec), batch));
    named.emplace_back(std::move(name), models.back().get());
  };
  add("dense, fused activations",
      modelSpec({6}, {dense(7, Activation::Tanh), dense(5, Activation::Sigmoid),
                      dense(5, Activation::Relu), dense(4)}),
      3);
  ModelSpec smoothed = modelSpec({6}, {dense(5, Activation::Tanh), dense(4)});
  smoothed.label_smoothing = 0.2f;
  add("softmax cross-entropy with label smoothing", std::move(smoothed), 3);
  add("dense without bias, mse",
      modelSpec({5}, {withoutBias(dense(6, Activation::Tanh)), dense(3)},
                LossKind::MeanSquaredError),
      4);
  for (Padding padding : {Padding::Same, Padding::Valid})
    for (int64_t stride : {1, 2})
      add(std::string("conv ") + (padding == Padding::Same ? "same" : "valid") + " stride " +
              std::to_string(stride),
          modelSpec({7, 5, 2},
                    {conv2d(3, 3, 1, padding), conv2d(17, 3, stride, padding, Activation::Sigmoid),
                     flatten(), dense(3)}),
          2);
  add("conv without bias, odd SAME pixel, mse",
      modelSpec({5, 6, 3}, {withoutBias(conv2d(4, 2, 2, Padding::Same)), flatten(), dense(2)},
                LossKind::MeanSquaredError),
      3);
  for (LayerKind kind : {LayerKind::MaxPool, LayerKind::AvgPool})
    for (Padding padding : {Padding::Same, Padding::Valid})
      for (int64_t stride : {1, 2})
        add(std::string(kind == LayerKind::MaxPool ? "max" : "avg") +
                (padding == Padding::Same ? " same" : " valid") + " stride " +
                std::to_string(stride),
            modelSpec({7, 5, 2}, {conv2d(5, 3, 1, Padding::Same, Activation::Linear),
                                  pooling(kind, 3, stride, padding), flatten(), dense(3)}),
            2);
  add("activation layers",
      modelSpec({6},
                {dense(6), activation(Activation::Tanh), dense(5), activation(Activation::Sigmoid),
                 dense(5), activation(Activation::Relu), activation(Activation::Linear), dense(3)}),
      3);
  add("activation on images",
      modelSpec({5, 4, 2}, {conv2d(6, 3, 1, Padding::Same, Activation::Linear),
                            activation(Activation::Sigmoid), flatten(), dense(3)}),
      2);
  add("dropout on vectors", modelSpec({6}, {dense(12, Activation::Tanh), dropout(0.5f), dense(3)}),
      3);
  add("dropout on images",
      modelSpec({4, 3, 2}, {conv2d(17, 3, 1, Padding::Same), dropout(0.3f), flatten(), dense(3)}),
      2);
  add("frozen prefix",
      modelSpec({5, 5, 2}, {frozen(conv2d(4, 3, 1, Padding::Same)),
                            pooling(LayerKind::MaxPool, 2, 2, Padding::Same), flatten(), dense(3)}),
      2);
  add("frozen middle",
      modelSpec({6}, {dense(5, Activation::Tanh), frozen(dense(5, Activation::Tanh)), dense(3)}),
      3);
  add("everything frozen", modelSpec({4}, {frozen(dense(3))}), 2);
  return named;
}

bool hasDropout(const TestModel& model) {
  return std::any_of(model.spec.layers.begin(), model.spec.layers.end(),
                     [](const LayerSpec& l) { return l.kind == LayerKind::Dropout; });
}

}  // namespace

TEST_CASE("CUDA: numeric gradients of every layer and loss") {
  for (auto& [name, model] : layerModels()) {
    DYNAMIC_SECTION(name) {
      GradientCheck check;
      check.through_train_step = hasDropout(*model);
      if (name.find("max") == 0 || name.find("avg") == 0) {
        check.epsilons = {2e-3, 5e-4, 2e-4};
        check.abs_tolerance = 1e-3;
      }
      checkGradients(*model, check);
    }
  }
}

TEST_CASE("CUDA: every layer's forward and backward agree with the CPU's") {
  for (auto& [name, model] : layerModels()) {
    DYNAMIC_SECTION(name) { checkAgainstCpu(*model); }
  }
}

TEST_CASE("CUDA: a batch whose patches exceed one product's agrees with the CPU's") {
  // conv2's patches are 3.3M floats an image: its products take 5 images
  // and then 2 (kMaxPatchFloats), and its input gradient gathers over 40
  // channels, more than a warp's lanes. Four steps: the last two replay
  // the captured graph.
  TestModel model(modelSpec({96, 96, 3}, {conv2d(40, 3, 1, Padding::Same),
                                          conv2d(8, 3, 1, Padding::Same), flatten(), dense(3)}),
                  7);
  checkAgainstCpu(model);
}

TEST_CASE("CUDA: the forward pass matches a naive NHWC reference") {
  SECTION("convolutions, flatten in (h, w, c) order") {
    TestModel model(modelSpec({5, 4, 3},
                              {conv2d(20, 3, 2, Padding::Same),
                               conv2d(9, 2, 1, Padding::Valid, Activation::Relu), flatten(),
                               dense(4, Activation::Sigmoid), dense(3)},
                              LossKind::MeanSquaredError),
                    3);
    checkAgainstReference(model);
  }
  SECTION("pooling, activation and dropout layers, the odd SAME pixel") {
    TestModel model(
        modelSpec(
            {7, 6, 2},
            {conv2d(16, 3, 2, Padding::Same, Activation::Linear),
             pooling(LayerKind::MaxPool, 3, 2, Padding::Same), activation(Activation::Tanh),
             pooling(LayerKind::AvgPool, 2, 1, Padding::Same), dropout(0.5f), flatten(), dense(3)},
            LossKind::MeanSquaredError),
        2);
    checkAgainstReference(model);
  }
}

TEST_CASE("CUDA: SAME padding puts the odd pixel at the bottom and the right") {
  checkSamePaddingAfter(gpuDevice());
}

TEST_CASE("CUDA: dropout masks are the CPU's, element for element") {
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
  const auto replica = gpuDevice().createReplica(graph, layout, batch_size, kReplicaSeed);
  const TestBatch data(graph, batch_size, 5);
  const std::vector<float> zeros(data.targets.size(), 0.0f);
  const Batch batch{batch_size, data.inputs.data(), nullptr, zeros.data()};
  const uint64_t step = 12;
  const uint64_t stream = hashCombine(kReplicaSeed, hashCombine(step, 1));
  double expected = 0.0;
  for (size_t i = 0; i < data.inputs.size(); ++i) {
    const double y = uniformFloat(stream, i) < rate ? 0.0 : double(data.inputs[i]) / (1.0 - rate);
    expected += y * y;
  }
  expected /= double(data.inputs.size());
  for (int repeat = 0; repeat < 4; ++repeat)  // eager, then the captured graph
    CHECK(replica->trainStep(batch, parameters.data(), gradients.data(), step).loss ==
          Approx(expected).epsilon(1e-5));
}

TEST_CASE("CUDA: labels outside the classes are an input error") {
  ModelSpec spec = modelSpec({3}, {frozen(dense(3))});
  const LayerGraph graph = buildLayerGraph(spec);
  const VariableLayout layout(graph.variables);
  FlatBuffer parameters(layout.totalSize());
  const auto replica = gpuDevice().createReplica(graph, layout, 2, kReplicaSeed);
  const std::vector<float> logits(6, 0.0f);
  const std::vector<int32_t> bad_labels{0, 3};
  CHECK_THROWS_AS(
      replica->evaluate({2, logits.data(), bad_labels.data(), nullptr}, parameters.data()),
      InputError);
}

TEST_CASE("CUDA: a step's progress names only final gradients, copied back layer by layer") {
  // As on the CPU (cpu_layers_test.cc), through the eager steps, the
  // capture and a replay of the streamed step's graph.
  TestModel model(progressModel(), 5);
  const TestBatch data(model.graph, 5, 12);
  checkGradientProgress(*model.gpu, model, data.batch(), {6, 4, 2, 0}, 4);
}

TEST_CASE("CUDA: every optimizer update agrees with the CPU's") {
  // A kernel with weight decay, a bias without, a frozen layer.
  const ModelSpec spec =
      modelSpec({300}, {dense(40, Activation::Tanh), frozen(dense(7)), dense(5)});
  const LayerGraph graph = buildLayerGraph(spec);
  const VariableLayout layout(graph.variables);
  struct Case {
    std::string name;
    OptimizerSpec spec;
  };
  std::vector<Case> cases;
  auto add = [&](std::string name, OptimizerSpec::Kind kind, bool nesterov = false) {
    OptimizerSpec s;
    s.kind = kind;
    s.nesterov = nesterov;
    s.weight_decay = 0.01f;
    cases.push_back({std::move(name), s});
  };
  add("sgd", OptimizerSpec::Kind::Sgd);
  add("momentum", OptimizerSpec::Kind::Momentum);
  add("nesterov", OptimizerSpec::Kind::Momentum, true);
  add("adagrad", OptimizerSpec::Kind::Adagrad);
  add("adam", OptimizerSpec::Kind::Adam);
  add("rmsprop with momentum", OptimizerSpec::Kind::RmsProp);
  add("centered rmsprop", OptimizerSpec::Kind::RmsProp);
  cases.back().spec.centered = true;
  cases.back().spec.momentum = 0.0f;
  cases.back().spec.epsilon = 1e-10f;
  add("adam with a moving average", OptimizerSpec::Kind::Adam);
  cases.back().spec.moving_average = MovingAverageSpec{0.99f, true};
  add("momentum with a moving average of fixed decay", OptimizerSpec::Kind::Momentum);
  cases.back().spec.moving_average = MovingAverageSpec{0.9f, false};
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.name) {
      FlatBuffer cpu_params(layout.totalSize()), gradients(layout.totalSize()),
          gpu_params(layout.totalSize()), slot(layout.totalSize());
      initializeVariables(graph, layout, 3, cpu_params);
      Optimizer cpu(c.spec, layout);
      REQUIRE(cudaSetDevice(0) == cudaSuccess);
      CudaOptimizer gpu(c.spec, layout);
      REQUIRE(gpu.slotCount() == cpu.slotNames().size());
      DeviceArray<float> d_params(size_t(layout.totalSize())), d_grads(size_t(layout.totalSize()));
      DeviceArray<StepScalars> d_scalars(1);
      const size_t bytes = size_t(layout.totalSize()) * sizeof(float);
      REQUIRE(cudaMemcpy(d_params.data(), cpu_params.data(), bytes, cudaMemcpyHostToDevice) ==
              cudaSuccess);
      if (c.spec.moving_average) {  // the averages start at the parameters, on both
        cpu.startMovingAverage(cpu_params);
        REQUIRE(cudaMemcpy(gpu.slot(gpu.slotCount() - 1), cpu_params.data(), bytes,
                           cudaMemcpyHostToDevice) == cudaSuccess);
      }
      Rng rng(77);
      for (int64_t update = 1; update <= 3; ++update) {
        for (int64_t i = 0; i < gradients.size(); ++i)
          gradients.data()[i] = float(rng.uniform() - 0.5);
        const float lr = 0.05f / float(update);
        cpu.apply(cpu_params, gradients, lr, update);
        StepScalars scalars;
        setStepScalars(scalars, c.spec, lr, update);
        REQUIRE(cudaMemcpy(d_grads.data(), gradients.data(), bytes, cudaMemcpyHostToDevice) ==
                cudaSuccess);
        REQUIRE(cudaMemcpy(d_scalars.data(), &scalars, sizeof scalars, cudaMemcpyHostToDevice) ==
                cudaSuccess);
        gpu.enqueue(nullptr, d_params.data(), d_grads.data(), d_scalars.data());
        REQUIRE(cudaMemcpy(gpu_params.data(), d_params.data(), bytes, cudaMemcpyDeviceToHost) ==
                cudaSuccess);
        for (const VariableView& v : layout.views()) {
          INFO("update " << update << ", " << v.name);
          CHECK(relativeError(std::as_const(gpu_params).view(v),
                              std::as_const(cpu_params).view(v)) <= kAgreement);
          for (size_t s = 0; s < gpu.slotCount(); ++s) {
            REQUIRE(cudaMemcpy(slot.data(), gpu.slot(s), bytes, cudaMemcpyDeviceToHost) ==
                    cudaSuccess);
            INFO("slot " << cpu.slotNames()[s]);
            CHECK(relativeError(std::as_const(slot).view(v), std::as_const(cpu.slot(s)).view(v)) <=
                  kAgreement);
          }
        }
      }
    }
  }
}

namespace {

// Training steps on the CPU (replica, then Optimizer::apply) against the
// device-resident trainer: parameters after every step and the losses.
void checkTrainer(const ModelSpec& spec, const std::vector<int>& gpus, int64_t batch_size,
                  int steps, CudaTrainerOptions options) {
  const LayerGraph graph = buildLayerGraph(spec);
  const VariableLayout layout(graph.variables);
  FlatBuffer params(layout.totalSize()), gradients(layout.totalSize()),
      gpu_params(layout.totalSize());
  initializeVariables(graph, layout, spec.seed, params);
  const auto cpu = cpuDevice().createReplica(graph, layout, batch_size, kReplicaSeed);
  Optimizer optimizer(spec.optimizer, layout);
  CudaTrainer trainer(gpus, graph, layout, spec.optimizer, batch_size, kReplicaSeed, options);
  trainer.setParameters(params.data());
  std::vector<TestBatch> batches;
  for (int s = 0; s < steps; ++s) batches.emplace_back(graph, batch_size, 500 + uint64_t(s));
  std::vector<double> cpu_losses;
  for (int s = 0; s < steps; ++s) {
    cpu_losses.push_back(
        cpu->trainStep(batches[size_t(s)].batch(), params.data(), gradients.data(), uint64_t(s))
            .loss);
    optimizer.apply(params, gradients, 0.05f, s + 1);
  }
  // One step in flight while the next batch is submitted.
  std::vector<double> gpu_losses;
  for (int s = 0; s < steps; ++s) {
    trainer.submit(batches[size_t(s)].batch(), 0.05f, uint64_t(s));
    if (s > 0) gpu_losses.push_back(trainer.collect().loss);
  }
  gpu_losses.push_back(trainer.collect().loss);
  trainer.getParameters(gpu_params.data());
  for (int s = 0; s < steps; ++s) {
    INFO("step " << s);
    CHECK(gpu_losses[size_t(s)] == Approx(cpu_losses[size_t(s)]).epsilon(kAgreement));
  }
  for (const VariableView& v : layout.views()) {
    INFO(v.name);
    CHECK(relativeError(std::as_const(gpu_params).view(v), std::as_const(params).view(v)) <=
          kAgreement);
  }
}

ModelSpec smallCnn(OptimizerSpec::Kind kind) {
  ModelSpec spec = modelSpec({12, 12, 1}, {conv2d(8, 3, 1, Padding::Same, Activation::Relu),
                                           conv2d(16, 3, 2, Padding::Same, Activation::Relu),
                                           pooling(LayerKind::MaxPool, 2, 2, Padding::Valid),
                                           flatten(), dense(32, Activation::Relu), dense(10)});
  spec.optimizer.kind = kind;
  return spec;
}

}  // namespace

TEST_CASE("CUDA: the device-resident trainer trains as the CPU does") {
  SECTION("mlp, sgd, eager") {
    ModelSpec spec = modelSpec({64}, {dense(32, Activation::Relu), dense(10)});
    checkTrainer(spec, {0}, 20, 3, {.graph = false});
  }
  // (Adam's update is checked above on equal gradients: its m / sqrt(v)
  // turns gradients at rounding level into full steps, so two runs that
  // differ in rounding drift apart element by element.)
  SECTION("cnn, adagrad, captured after two steps") {
    checkTrainer(smallCnn(OptimizerSpec::Kind::Adagrad), {0}, 16, 6, {});
  }
  SECTION("cnn, momentum, two towers on one GPU, odd batch") {
    checkTrainer(smallCnn(OptimizerSpec::Kind::Momentum), {0, 0}, 17, 5, {});
  }
}

TEST_CASE("CUDA: two towers on one GPU compute the whole batch's gradient") {
  // cuda:0 named twice: two towers on GPU 0, through createTowers.
  const ModelSpec spec = smallCnn(OptimizerSpec::Kind::Sgd);
  const LayerGraph graph = buildLayerGraph(spec);
  const VariableLayout layout(graph.variables);
  FlatBuffer params(layout.totalSize()), whole(layout.totalSize()), split(layout.totalSize());
  initializeVariables(graph, layout, spec.seed, params);
  const auto devices = createDevices({"cuda:0", "cuda:0"}, 0);
  REQUIRE(deviceNames(devices) == "cuda:0, cuda:0");
  const auto towers = createTowers(devicePointers(devices), graph, layout, 15, kReplicaSeed);
  const auto one = gpuDevice().createReplica(graph, layout, 15, kReplicaSeed);
  for (int s = 0; s < 4; ++s) {
    const TestBatch data(graph, 15, 900 + uint64_t(s));
    const StepResult a = one->trainStep(data.batch(), params.data(), whole.data(), uint64_t(s));
    const StepResult b = towers->trainStep(data.batch(), params.data(), split.data(), uint64_t(s));
    CHECK(b.loss == Approx(a.loss).epsilon(kAgreement));
    CHECK(b.correct == a.correct);
    for (const VariableView& v : layout.views()) {
      INFO(v.name);
      CHECK(relativeError(std::as_const(split).view(v), std::as_const(whole).view(v)) <=
            kAgreement);
    }
  }
}

TEST_CASE("CUDA: a GPU that is not there is an input error naming it") {
  CHECK_THROWS_WITH(createDevices({"cuda:1023"}, 0), Catch::StartsWith("cuda:1023: no such GPU"));
}

}  // namespace traind

int main(int argc, char** argv) {
  const std::string reason = traind::cudaUnavailableReason();
  if (!reason.empty()) {
    std::printf("skipped: %s\n", reason.c_str());
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
