// Towers and device lists on the CPU: N towers (one thread each) compute the
// loss and gradients one device computes with the whole batch, for a
// multi-layer perceptron and a small CNN, even and odd splits; dropout masks
// per tower; errors in a tower reach the caller; and every way a device list
// or training.devices can be wrong.
#include "devices/towers.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/layer_graph.h"
#include "core/model_spec.h"
#include "core/random.h"
#include "core/variable_layout.h"
#include "devices/device_list.h"
#include "devices/model_replica.h"
#include "devices/optimizer_update.h"
#include "test/temp_dir.h"
#include "test/test_models.h"

namespace traind {
namespace {

// ---- models built in code (test/test_models.h) ----

// fashion_mlp's shape, smaller: flatten, two relu layers, logits.
ModelSpec mlp() {
  return modelSpec({12, 12, 1}, {flatten(), dense(40, Activation::Relu),
                                 dense(20, Activation::Relu), dense(10)});
}

// fashion_cnn's shape, smaller: two 3x3 convolutions (the second strided),
// max pooling, a hidden layer and logits.
ModelSpec cnn() {
  return modelSpec({12, 12, 1}, {conv2d(4, 3, 1, Padding::Same, Activation::Relu),
                                 conv2d(8, 3, 2, Padding::Same, Activation::Relu),
                                 pooling(LayerKind::MaxPool, 2, 2, Padding::Valid), flatten(),
                                 dense(16, Activation::Relu), dense(10)});
}

// Towers over `towers` CPU devices against one CPU device with the whole
// batch: the same loss, correct count and gradients, step after step, and
// the same evaluation.
void checkTowersMatchOneDevice(const ModelSpec& spec, int towers, int64_t batch_size) {
  Model model(spec);
  const std::vector<std::unique_ptr<Device>> one = createDevices({"cpu"}, 2);
  const std::vector<std::unique_ptr<Device>> many = cpuDevices(towers);
  std::unique_ptr<Replica> whole =
      createTowers(devicePointers(one), model.graph, model.layout, batch_size, 3);
  std::unique_ptr<Replica> split =
      createTowers(devicePointers(many), model.graph, model.layout, batch_size, 3);
  checkSameTraining(*whole, *split, model, batch_size);
}

std::string inputErrorOf(const std::vector<std::string>& names) {
  try {
    createDevices(names, 2);
  } catch (const InputError& e) {
    return e.what();
  }
  FAIL("createDevices did not throw InputError");
  return {};
}

// ---- the tests ----

TEST_CASE("a batch splits into shares as equal as possible", "[towers]") {
  CHECK(splitBatch(8, 2) == std::vector<int64_t>{4, 4});
  CHECK(splitBatch(7, 2) == std::vector<int64_t>{4, 3});
  CHECK(splitBatch(10, 4) == std::vector<int64_t>{3, 3, 2, 2});
  CHECK(splitBatch(5, 1) == std::vector<int64_t>{5});
}

TEST_CASE("two towers train an MLP as one device with the whole batch", "[towers]") {
  checkTowersMatchOneDevice(mlp(), 2, 8);
}

TEST_CASE("two towers train a CNN as one device with the whole batch", "[towers]") {
  checkTowersMatchOneDevice(cnn(), 2, 8);
}

TEST_CASE("an odd batch splits unevenly and still averages to the whole batch", "[towers]") {
  SECTION("7 over 2") { checkTowersMatchOneDevice(mlp(), 2, 7); }
  SECTION("7 over 3, CNN") { checkTowersMatchOneDevice(cnn(), 3, 7); }
  SECTION("10 over 4: more towers than cores") { checkTowersMatchOneDevice(mlp(), 4, 10); }
}

TEST_CASE("frozen variables' gradients stay untouched", "[towers]") {
  checkTowersMatchOneDevice(
      modelSpec({6}, {frozen(dense(8, Activation::Relu)), dense(5, Activation::Relu), dense(3)}), 2,
      6);
}

TEST_CASE("towers that apply the update as they average equal a step and then the update",
          "[towers]") {
  ModelSpec spec =
      modelSpec({6}, {frozen(dense(8, Activation::Relu)), dense(700, Activation::Relu), dense(3)});
  spec.optimizer.kind = OptimizerSpec::Kind::Adam;
  spec.optimizer.weight_decay = 0.01f;
  Model separate(spec), fused(spec);
  Optimizer separate_optimizer(spec.optimizer, separate.layout);
  Optimizer fused_optimizer(spec.optimizer, fused.layout);
  const std::vector<std::unique_ptr<Device>> devices = cpuDevices(3);
  std::unique_ptr<Replica> replica =
      createTowers(devicePointers(devices), separate.graph, separate.layout, 9, 3);
  FlatBuffer gradients(separate.layout.totalSize());
  for (uint64_t step = 0; step < 3; ++step) {
    const TestBatch data(separate.graph, 9, 200 + step);
    replica->trainStep(data.batch(), separate.parameters.data(), gradients.data(), step);
    separate_optimizer.apply(separate.parameters, gradients, 0.01f, int64_t(step) + 1);
    OptimizerUpdate update(fused_optimizer, fused.parameters, gradients, 0.01f,
                           int64_t(step) + 1);
    replica->trainStepAndUpdate(data.batch(), fused.parameters.data(), gradients.data(), step,
                                update);
    for (int64_t i = 0; i < separate.parameters.size(); ++i) {
      INFO("step " << step << ", parameter " << i);
      REQUIRE(fused.parameters.data()[i] == Approx(separate.parameters.data()[i]).margin(1e-7));
    }
  }
}

TEST_CASE("one device is that device's own replica", "[towers]") {
  Model model(mlp());
  const std::vector<std::unique_ptr<Device>> devices = createDevices({"cpu:0"}, 1);
  std::unique_ptr<Replica> replica =
      createTowers(devicePointers(devices), model.graph, model.layout, 1, 3);
  CHECK(replica->batchSize() == 1);
}

TEST_CASE("each tower draws its own dropout mask: step * towers + tower", "[towers]") {
  // Tower t of 2 trains step s with a single replica's mask of step 2s + t on
  // its share; the towers' average is the average of those two.
  Model model(modelSpec({10}, {dense(16, Activation::Relu), dropout(0.5f), dense(4)}));
  const std::vector<std::unique_ptr<Device>> devices = cpuDevices(2);
  std::unique_ptr<Replica> towers =
      createTowers(devicePointers(devices), model.graph, model.layout, 6, 3);
  std::unique_ptr<Replica> share = devices[0]->createReplica(model.graph, model.layout, 3, 3);
  const TestBatch data(model.graph, 6, 41);
  const uint64_t step = 5;

  FlatBuffer actual = untouchedGradients(model.layout);
  const StepResult a =
      towers->trainStep(data.batch(), model.parameters.data(), actual.data(), step);
  FlatBuffer first = untouchedGradients(model.layout), second = untouchedGradients(model.layout);
  const StepResult r0 = share->trainStep(data.slice(model.graph, 0, 3), model.parameters.data(),
                                         first.data(), 2 * step);
  const StepResult r1 = share->trainStep(data.slice(model.graph, 3, 3), model.parameters.data(),
                                         second.data(), 2 * step + 1);
  CHECK(a.loss == Approx((r0.loss + r1.loss) / 2).epsilon(1e-6));
  FlatBuffer expected(model.layout.totalSize());
  for (int64_t i = 0; i < expected.size(); ++i)
    expected.data()[i] = 0.5f * first.data()[i] + 0.5f * second.data()[i];
  checkSameGradients(model.layout, expected, actual);

  // The same tower-0 share with the single-device step's mask differs.
  FlatBuffer unsplit = untouchedGradients(model.layout);
  const StepResult u = share->trainStep(data.slice(model.graph, 0, 3), model.parameters.data(),
                                        unsplit.data(), step);
  CHECK(u.loss != r0.loss);
}

TEST_CASE("an error in one tower reaches the caller and the towers go on", "[towers]") {
  Model model(mlp());
  const std::vector<std::unique_ptr<Device>> devices = cpuDevices(2);
  std::unique_ptr<Replica> towers =
      createTowers(devicePointers(devices), model.graph, model.layout, 4, 3);
  TestBatch data(model.graph, 4, 9);
  FlatBuffer gradients(model.layout.totalSize());
  data.labels[3] = 10;  // in the second tower's share; the model has 10 classes
  CHECK_THROWS_AS(towers->trainStep(data.batch(), model.parameters.data(), gradients.data(), 0),
                  InputError);
  CHECK_THROWS_AS(towers->evaluate(data.batch(), model.parameters.data()), InputError);
  data.labels[3] = 9;
  CHECK(std::isfinite(
      towers->trainStep(data.batch(), model.parameters.data(), gradients.data(), 1).loss));
  Batch wrong_size = data.batch();
  wrong_size.size = 3;
  CHECK_THROWS(towers->evaluate(wrong_size, model.parameters.data()));
}

TEST_CASE("a batch smaller than the number of devices is an input error", "[towers]") {
  Model model(mlp());
  const std::vector<std::unique_ptr<Device>> devices = cpuDevices(3);
  const StagePlan unplaced{.placed = false,
                           .stages = {{"model", "", 0, int(model.graph.layers.size())}}};
  try {
    createModelReplica(devicePointers(devices), model.graph, unplaced, model.layout, 2, 1, 3);
    FAIL("no InputError");
  } catch (const InputError& e) {
    CHECK_THAT(e.what(), Catch::StartsWith("data.batch_size: a batch of 2") &&
                             Catch::Contains("cpu:0, cpu:1, cpu:2"));
  }
  // Towers alone take it for a caller's mistake.
  CHECK_THROWS_AS(createTowers(devicePointers(devices), model.graph, model.layout, 2, 3),
                  std::invalid_argument);
}

TEST_CASE("devices are made from their names", "[devices]") {
  std::vector<std::unique_ptr<Device>> devices = createDevices({"cpu"}, 0);
  REQUIRE(devices.size() == 1);
  CHECK(devices[0]->name() == "cpu");
  devices = createDevices({"cpu:1", "cpu:0", "cpu:7"}, 2);
  CHECK(deviceNames(devices) == "cpu:1, cpu:0, cpu:7");
  CHECK(splitDeviceList("cpu:0,cpu:1") == std::vector<std::string>{"cpu:0", "cpu:1"});
  CHECK(splitDeviceList("cpu") == std::vector<std::string>{"cpu"});
}

TEST_CASE("a wrong device name is an input error naming it", "[devices]") {
#ifdef TRAIND_HAVE_CUDA
  // A GPU that is not there (with or without GPUs in the machine) is named.
  CHECK_THAT(inputErrorOf({"cpu:0", "cuda:1023"}), Catch::StartsWith("cuda:1023: "));
#else
  CHECK(inputErrorOf({"cuda:0"}) == "cuda:0: this traind was built without CUDA");
  CHECK(inputErrorOf({"cpu:0", "cuda:1"}) == "cuda:1: this traind was built without CUDA");
#endif
  CHECK_THAT(inputErrorOf({"tpu"}), Catch::Contains("'tpu'") && Catch::Contains("cpu:N"));
  CHECK_THAT(inputErrorOf({"cpu:x"}), Catch::Contains("'cpu:x'"));
  CHECK_THAT(inputErrorOf({"cpu:-1"}), Catch::Contains("'cpu:-1'"));
  CHECK_THAT(inputErrorOf({"cpu:"}), Catch::Contains("'cpu:'"));
  CHECK_THAT(inputErrorOf({"cpu:99999999999"}), Catch::Contains("'cpu:99999999999'"));
  CHECK_THAT(inputErrorOf({""}), Catch::Contains("''"));
  CHECK(inputErrorOf({"cpu:0", "cpu:1", "cpu:0"}) == "device cpu:0 is listed twice");
  CHECK_THAT(inputErrorOf({"cpu", "cpu:1"}),
             Catch::Contains("cpu and cpu:1") && Catch::Contains("whole CPU"));
  CHECK_THAT(inputErrorOf({}), Catch::Contains("at least one device"));
  CHECK_THAT(inputErrorOf({"cpu:00"}), Catch::Contains("'cpu:00'"));  // one name a device
}

// ---- training.devices in a model spec ----

std::string specWithDevices(const TempDir& dir, const std::string& devices) {
  return dir.write("spec.yaml",
                   "input: [4]\n"
                   "layers:\n"
                   "  - {type: dense, units: 3}\n"
                   "optimizer: {type: sgd, learning_rate: 0.1}\n"
                   "data:\n"
                   "  synthetic: {type: regression}\n"
                   "training:\n"
                   "  max_steps: 10\n" +
                       (devices.empty() ? "" : "  devices: " + devices + "\n"));
}

std::string specError(const std::string& path) {
  try {
    loadModelSpec(path);
  } catch (const InputError& e) {
    return e.what();
  }
  FAIL("loading " << path << " did not throw InputError");
  return {};
}

TEST_CASE("training.devices is read from the model spec", "[devices]") {
  TempDir dir;
  CHECK(loadModelSpec(specWithDevices(dir, "")).training.devices ==
        std::vector<std::string>{"cpu"});
  CHECK(loadModelSpec(specWithDevices(dir, "[cpu:0, cpu:1]")).training.devices ==
        std::vector<std::string>{"cpu:0", "cpu:1"});
  // Valid in any build: whether CUDA is there is decided when devices are made.
  CHECK(loadModelSpec(specWithDevices(dir, "[cuda:0]")).training.devices ==
        std::vector<std::string>{"cuda:0"});
  // Two towers sharing one GPU.
  CHECK(loadModelSpec(specWithDevices(dir, "[cuda:0, cuda:0]")).training.devices ==
        std::vector<std::string>{"cuda:0", "cuda:0"});

  CHECK_THAT(specError(specWithDevices(dir, "[cpu:0, gpu]")),
             Catch::Contains("spec.yaml:9:20: training.devices[1]") &&
                 Catch::Contains("cpu, cpu:N or cuda:N") && Catch::Contains("gpu"));
  CHECK_THAT(specError(specWithDevices(dir, "[cpu:1, cpu:1]")),
             Catch::Contains("training.devices[1]") && Catch::Contains("listed twice"));
  CHECK_THAT(specError(specWithDevices(dir, "cpu")),
             Catch::Contains("training.devices") && Catch::Contains("a list of devices"));
  CHECK_THAT(specError(specWithDevices(dir, "[]")), Catch::Contains("non-empty list"));
}

}  // namespace
}  // namespace traind
