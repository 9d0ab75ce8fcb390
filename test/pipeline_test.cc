// Pipelines on the CPU: a model split into stages over CPU devices computes
// the loss and gradients one device computes with the whole batch, with one
// micro-batch (plain model parallelism) and with several (1F1B), for an MLP
// and a small CNN whose stage boundaries fall on blocked oneDNN formats; the
// schedule; gradient accumulation without placement; errors. The real binary
// trains a placed spec and refuses bad placements (exit 2).
#include "devices/pipeline.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/layer_graph.h"
#include "core/model_spec.h"
#include "core/random.h"
#include "core/stage_plan.h"
#include "core/variable_layout.h"
#include "devices/device_list.h"
#include "devices/model_replica.h"
#include "devices/pipeline_schedule.h"
#include "test/test_models.h"
#include "test/traind_process.h"

namespace traind {
namespace {

// ---- models built in code (test/test_models.h) ----

// fashion_mlp's shape with odd sizes: flatten, two relu layers, logits.
ModelSpec mlp() {
  return modelSpec(
      {9, 7, 1}, {flatten(), dense(37, Activation::Relu), dense(13, Activation::Relu), dense(10)});
}

// fashion_cnn's shape, smaller: two 3x3 convolutions (the second strided;
// their outputs are in oneDNN's blocked nChw8c), max pooling, a hidden layer
// and logits.
ModelSpec cnn() {
  return modelSpec({12, 12, 1}, {conv2d(4, 3, 1, Padding::Same, Activation::Relu),
                                 conv2d(8, 3, 2, Padding::Same, Activation::Relu),
                                 pooling(LayerKind::MaxPool, 2, 2, Padding::Valid), flatten(),
                                 dense(16, Activation::Relu), dense(10)});
}

// Stages that begin at `starts` (the first is 0), stage s on cpu:s.
StagePlan placedPlan(const LayerGraph& graph, const std::vector<int>& starts) {
  StagePlan plan;
  plan.placed = true;
  for (size_t s = 0; s < starts.size(); ++s)
    plan.stages.push_back(
        {.name = "stage_" + std::to_string(s),
         .device = "cpu:" + std::to_string(s),
         .first_layer = starts[s],
         .end_layer = s + 1 < starts.size() ? starts[s + 1] : int(graph.layers.size())});
  return plan;
}

// A pipeline of the stages beginning at `starts` against one CPU device with
// the whole batch: the same loss, correct count and gradients step after
// step, and the same evaluation.
void checkPipelineMatchesOneDevice(const ModelSpec& spec, const std::vector<int>& starts,
                                   int64_t batch_size, int micro_batches) {
  Model model(spec);
  const StagePlan plan = placedPlan(model.graph, starts);
  const std::vector<std::unique_ptr<Device>> one = createDevices({"cpu"}, 2);
  const std::vector<std::unique_ptr<Device>> many = cpuDevices(int(starts.size()));
  std::unique_ptr<Replica> whole = one[0]->createReplica(model.graph, model.layout, batch_size, 3);
  std::unique_ptr<Replica> split = createModelReplica(devicePointers(many), model.graph, plan,
                                                      model.layout, batch_size, micro_batches, 3);
  checkSameTraining(*whole, *split, model, batch_size);
}

std::string inputErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  FAIL("no InputError");
  return {};
}

// ---- the schedule ----

std::string opsText(const std::vector<PipelineOp>& ops) {
  std::string text;
  for (const PipelineOp& op : ops) {
    if (!text.empty()) text += ' ';
    text += op.kind == PipelineOp::Kind::Forward ? 'F' : 'B';
    text += std::to_string(op.micro_batch);
  }
  return text;
}

TEST_CASE("1F1B: warm-up forwards, then one forward and one backward", "[pipeline]") {
  CHECK(opsText(oneForwardOneBackward(0, 2, 4)) == "F0 F1 B0 F2 B1 F3 B2 B3");
  CHECK(opsText(oneForwardOneBackward(1, 2, 4)) == "F0 B0 F1 B1 F2 B2 F3 B3");
  CHECK(opsText(oneForwardOneBackward(0, 3, 2)) == "F0 F1 B0 B1");
  CHECK(opsText(oneForwardOneBackward(0, 1, 3)) == "F0 B0 F1 B1 F2 B2");
  CHECK(opsText(oneForwardOneBackward(0, 2, 1)) == "F0 B0");
  CHECK(stageSlots(0, 4, 8) == 4);
  CHECK(stageSlots(3, 4, 8) == 1);
  CHECK(stageSlots(0, 4, 2) == 2);

  // Every micro-batch once forward and once backward, in order, and never
  // more in flight than the stage's slots.
  for (int stages = 1; stages <= 4; ++stages)
    for (int micro = 1; micro <= 9; ++micro)
      for (int s = 0; s < stages; ++s) {
        INFO(stages << " stages, " << micro << " micro-batches, stage " << s);
        int forwards = 0, backwards = 0;
        for (const PipelineOp& op : oneForwardOneBackward(s, stages, micro)) {
          if (op.kind == PipelineOp::Kind::Forward) {
            REQUIRE(op.micro_batch == forwards++);
          } else {
            REQUIRE(op.micro_batch == backwards++);
          }
          REQUIRE(forwards - backwards <= stageSlots(s, stages, micro));
          REQUIRE(backwards <= forwards);
        }
        REQUIRE(forwards == micro);
        REQUIRE(backwards == micro);
      }
}

TEST_CASE("the schedule's picture", "[pipeline]") {
  CHECK(scheduleChart({"stage 0", "stage 1"}, 4) ==
        "stage 0 | F0 F1 .. B0 F2 B1 F3 B2 .. B3\n"
        "stage 1 | .. F0 B0 F1 B1 F2 B2 F3 B3 ..\n");
  CHECK(scheduleChart({"a", "b"}, 1) ==
        "a | F0 .. .. B0\n"
        "b | .. F0 B0 ..\n");
  CHECK(scheduleChart({"only"}, 2) == "only | F0 B0 F1 B1\n");
  // A frozen first stage skips its backward passes; a slot it reuses waits
  // for the next stage's backward pass of the micro-batch it held.
  CHECK(scheduleChart({"stage 0", "stage 1"}, 4, {false, true}) ==
        "stage 0 | F0 F1 .. F2 .. F3 .. .. ..\n"
        "stage 1 | .. F0 B0 F1 B1 F2 B2 F3 B3\n");
  // With no backward pass at all (every layer frozen) each waits for the next's forward.
  CHECK(scheduleChart({"a", "b", "c"}, 4, {false, false, false}) ==
        "a | F0 F1 F2 F3 .. ..\n"
        "b | .. F0 F1 F2 F3 ..\n"
        "c | .. .. F0 F1 F2 F3\n");
}

// ---- model parallelism and micro-batches ----

TEST_CASE("an MLP split over two CPU devices trains as one device", "[pipeline]") {
  SECTION("after flatten and the first hidden layer") {
    checkPipelineMatchesOneDevice(mlp(), {0, 2}, 8, 1);
  }
  SECTION("each layer a stage") { checkPipelineMatchesOneDevice(mlp(), {0, 1, 2, 3}, 8, 1); }
}

TEST_CASE("a CNN split at blocked formats trains as one device", "[pipeline]") {
  // conv1 | conv2 pool | flatten dense dense: both boundaries are nChw8c
  // inside a single replica.
  SECTION("three stages") { checkPipelineMatchesOneDevice(cnn(), {0, 1, 3}, 6, 1); }
  SECTION("after the pooling") { checkPipelineMatchesOneDevice(cnn(), {0, 3}, 6, 1); }
}

TEST_CASE("with M micro-batches the gradient is the whole batch's", "[pipeline]") {
  SECTION("MLP, 2 stages, M = 2") { checkPipelineMatchesOneDevice(mlp(), {0, 2}, 12, 2); }
  SECTION("MLP, 2 stages, M = 4") { checkPipelineMatchesOneDevice(mlp(), {0, 2}, 12, 4); }
  SECTION("MLP, 3 stages, M = 4, micro-batches of 3") {
    checkPipelineMatchesOneDevice(mlp(), {0, 2, 3}, 12, 4);
  }
  SECTION("MLP, 4 stages, M = 3: fewer micro-batches than stages") {
    checkPipelineMatchesOneDevice(mlp(), {0, 1, 2, 3}, 9, 3);
  }
  SECTION("CNN, 3 stages, M = 3") { checkPipelineMatchesOneDevice(cnn(), {0, 1, 3}, 9, 3); }
  SECTION("MLP, M = 12: micro-batches of one example") {
    checkPipelineMatchesOneDevice(mlp(), {0, 2}, 12, 12);
  }
}

TEST_CASE("frozen first stages have no backward pass", "[pipeline]") {
  const ModelSpec spec =
      modelSpec({6}, {frozen(dense(8, Activation::Relu)), frozen(dense(7, Activation::Relu)),
                      dense(5, Activation::Relu), dense(3)});
  checkPipelineMatchesOneDevice(spec, {0, 2}, 8, 4);
  checkPipelineMatchesOneDevice(spec, {0, 1, 3}, 8, 2);
}

TEST_CASE("a stage that passes its input through hands the next stage a copy", "[pipeline]") {
  // The flatten stage's output was the first stage's slot buffer, which the
  // first stage refilled while the third still read it: without a backward
  // pass of the flatten stage (a frozen first stage), or in an evaluation,
  // nothing held the first stage back. Wide layers give the third stage
  // time to be caught reading.
  const bool frozen_first = GENERATE(true, false);
  const LayerSpec first = dense(64, Activation::Relu);
  const ModelSpec spec =
      modelSpec({64}, {frozen_first ? frozen(first) : first, flatten(),
                       dense(1024, Activation::Relu), dense(1024, Activation::Relu), dense(10)});
  for (int round = 0; round < 3; ++round) {
    INFO("frozen first stage: " << frozen_first << ", round " << round);
    checkPipelineMatchesOneDevice(spec, {0, 1, 2}, 64, 8);
  }
}

TEST_CASE("micro-batches without placement accumulate the whole batch's gradient", "[pipeline]") {
  Model model(cnn());
  const StagePlan unplaced{.placed = false, .stages = {{"model", "", 0, 6}}};
  const std::vector<std::unique_ptr<Device>> one = createDevices({"cpu"}, 2);
  const std::vector<std::unique_ptr<Device>> two = cpuDevices(2);
  std::unique_ptr<Replica> whole = one[0]->createReplica(model.graph, model.layout, 12, 3);
  std::unique_ptr<Replica> accumulated =
      createModelReplica(devicePointers(one), model.graph, unplaced, model.layout, 12, 4, 3);
  std::unique_ptr<Replica> towers =
      createModelReplica(devicePointers(two), model.graph, unplaced, model.layout, 12, 3, 3);
  const TestBatch data(model.graph, 12, 5);
  FlatBuffer expected = untouchedGradients(model.layout);
  const StepResult e = whole->trainStep(data.batch(), model.parameters.data(), expected.data(), 0);
  for (Replica* replica : {accumulated.get(), towers.get()}) {
    FlatBuffer actual = untouchedGradients(model.layout);
    const StepResult a =
        replica->trainStep(data.batch(), model.parameters.data(), actual.data(), 0);
    CHECK(a.loss == Approx(e.loss).epsilon(1e-5));
    CHECK(a.correct == e.correct);
    checkSameGradients(model.layout, expected, actual);
  }
}

TEST_CASE("dropout: one micro-batch draws the single device's masks, M draw step * M + m",
          "[pipeline]") {
  Model model(modelSpec({10}, {dense(16, Activation::Relu), dropout(0.5f), dense(4)}));
  const std::vector<std::unique_ptr<Device>> devices = cpuDevices(2);
  std::unique_ptr<Replica> one = devices[0]->createReplica(model.graph, model.layout, 6, 3);
  std::unique_ptr<Replica> share = devices[0]->createReplica(model.graph, model.layout, 3, 3);
  const TestBatch data(model.graph, 6, 41);
  const uint64_t step = 5;

  // Plain model parallelism (the dropout on the second stage) is exact.
  std::unique_ptr<Replica> plain = createModelReplica(
      devicePointers(devices), model.graph, placedPlan(model.graph, {0, 1}), model.layout, 6, 1, 3);
  FlatBuffer expected = untouchedGradients(model.layout), actual = untouchedGradients(model.layout);
  const StepResult e = one->trainStep(data.batch(), model.parameters.data(), expected.data(), step);
  const StepResult a = plain->trainStep(data.batch(), model.parameters.data(), actual.data(), step);
  CHECK(a.loss == Approx(e.loss).epsilon(1e-6));
  checkSameGradients(model.layout, expected, actual);

  std::unique_ptr<Replica> piped = createModelReplica(
      devicePointers(devices), model.graph, placedPlan(model.graph, {0, 1}), model.layout, 6, 2, 3);
  actual = untouchedGradients(model.layout);
  const StepResult p = piped->trainStep(data.batch(), model.parameters.data(), actual.data(), step);
  FlatBuffer first = untouchedGradients(model.layout), second = untouchedGradients(model.layout);
  const StepResult r0 = share->trainStep(data.slice(model.graph, 0, 3), model.parameters.data(),
                                         first.data(), 2 * step);
  const StepResult r1 = share->trainStep(data.slice(model.graph, 3, 3), model.parameters.data(),
                                         second.data(), 2 * step + 1);
  CHECK(p.loss == Approx((r0.loss + r1.loss) / 2).epsilon(1e-6));
  for (int64_t i = 0; i < expected.size(); ++i)
    expected.data()[i] = 0.5f * first.data()[i] + 0.5f * second.data()[i];
  checkSameGradients(model.layout, expected, actual);
}

// Records the ranges a pipeline updates, and that each one's gradient was
// final when it did.
struct RecordingUpdate : ParameterUpdate {
  const FlatBuffer* final_gradients = nullptr;
  const float* gradients = nullptr;
  std::mutex mutex;
  std::set<size_t> variables;
  bool all = false;
  bool early = false;

  void applyAll() override { all = true; }
  void applyRange(size_t variable, int64_t offset, int64_t count) override {
    std::lock_guard lock(mutex);
    variables.insert(variable);
    for (int64_t i = offset; i < offset + count; ++i)
      if (gradients[i] != final_gradients->data()[i]) early = true;
  }
};

TEST_CASE("each stage updates its own variables once their gradient is complete", "[pipeline]") {
  Model model(modelSpec({6}, {frozen(dense(8, Activation::Relu)), dense(9, Activation::Relu),
                              dense(5, Activation::Relu), dense(3)}));
  const std::vector<std::unique_ptr<Device>> devices = cpuDevices(2);
  std::unique_ptr<Replica> pipeline = createModelReplica(
      devicePointers(devices), model.graph, placedPlan(model.graph, {0, 2}), model.layout, 8, 4, 3);
  const TestBatch data(model.graph, 8, 3);
  FlatBuffer final_gradients(model.layout.totalSize()), gradients(model.layout.totalSize());
  pipeline->trainStep(data.batch(), model.parameters.data(), final_gradients.data(), 0);
  RecordingUpdate update;
  update.final_gradients = &final_gradients;
  update.gradients = gradients.data();
  pipeline->trainStepAndUpdate(data.batch(), model.parameters.data(), gradients.data(), 0, update);
  CHECK_FALSE(update.all);
  CHECK_FALSE(update.early);
  std::set<size_t> trainable;
  for (size_t v = 0; v < model.layout.views().size(); ++v)
    if (model.layout.views()[v].trainable) trainable.insert(v);
  CHECK(update.variables == trainable);
}

TEST_CASE("each stage's busy time is recorded", "[pipeline]") {
  Model model(mlp());
  const std::vector<std::unique_ptr<Device>> devices = cpuDevices(2);
  std::unique_ptr<Pipeline> pipeline =
      createPipeline({devices[0].get(), devices[1].get()}, placedPlan(model.graph, {0, 2}),
                     model.graph, model.layout, 8, 4, 3);
  const TestBatch data(model.graph, 8, 3);
  FlatBuffer gradients(model.layout.totalSize());
  for (uint64_t step = 0; step < 3; ++step)
    pipeline->trainStep(data.batch(), model.parameters.data(), gradients.data(), step);
  const std::vector<Pipeline::StageTime> times = pipeline->stageTimes();
  REQUIRE(times.size() == 2);
  CHECK(times[0].device == "cpu:0");
  CHECK(times[1].name == "stage_1");
  for (const Pipeline::StageTime& t : times) {
    CHECK(t.busy_seconds > 0.0);
    CHECK(t.busy_seconds <= pipeline->trainSeconds());
  }
}

// ---- errors ----

TEST_CASE("an error in one stage reaches the caller and the pipeline goes on", "[pipeline]") {
  Model model(mlp());
  const std::vector<std::unique_ptr<Device>> devices = cpuDevices(2);
  std::unique_ptr<Replica> pipeline = createModelReplica(
      devicePointers(devices), model.graph, placedPlan(model.graph, {0, 2}), model.layout, 8, 4, 3);
  TestBatch data(model.graph, 8, 9);
  FlatBuffer gradients(model.layout.totalSize());
  data.labels[5] = 10;  // the third micro-batch; the model has 10 classes
  CHECK_THROWS_AS(pipeline->trainStep(data.batch(), model.parameters.data(), gradients.data(), 0),
                  InputError);
  CHECK_THROWS_AS(pipeline->evaluate(data.batch(), model.parameters.data()), InputError);
  data.labels[5] = 9;
  CHECK(std::isfinite(
      pipeline->trainStep(data.batch(), model.parameters.data(), gradients.data(), 1).loss));
  Batch wrong_size = data.batch();
  wrong_size.size = 4;
  CHECK_THROWS(pipeline->trainStep(wrong_size, model.parameters.data(), gradients.data(), 2));
}

TEST_CASE("micro-batches that do not divide the batch are an input error", "[pipeline]") {
  Model model(mlp());
  const std::vector<std::unique_ptr<Device>> devices = cpuDevices(3);
  const std::vector<Device*> two{devices[0].get(), devices[1].get()};
  CHECK_THAT(inputErrorOf([&] {
               createModelReplica(two, model.graph, placedPlan(model.graph, {0, 2}), model.layout,
                                  10, 4, 3);
             }),
             Catch::Contains("4 micro-batches") && Catch::Contains("batch of 10"));
  // Towers: each device's share must split too.
  const StagePlan unplaced{.placed = false, .stages = {{"model", "", 0, 4}}};
  CHECK_THAT(inputErrorOf([&] {
               createModelReplica(devicePointers(devices), model.graph, unplaced, model.layout, 12,
                                  3, 3);
             }),
             Catch::Contains("3 micro-batches") && Catch::Contains("share") &&
                 Catch::Contains("(4, 4, 4)"));
}

TEST_CASE("a placed model with devices beyond its stages is an input error", "[pipeline]") {
  Model model(mlp());
  const std::vector<std::unique_ptr<Device>> devices = cpuDevices(3);
  CHECK_THAT(inputErrorOf([&] {
               createModelReplica(devicePointers(devices), model.graph,
                                  placedPlan(model.graph, {0, 2}), model.layout, 8, 1, 3);
             }),
             Catch::Contains("cpu:2 holds no layer") && Catch::Contains("towers of pipelines"));
}

// ---- the real binary ----

using testing::ProcessResult;
using testing::runTraind;

TEST_CASE("traind trains a placed fashion_mlp pipeline", "[pipeline][integration]") {
  const ProcessResult r = runTraind(
      "--model configs/models/fashion_mlp_pipeline.yaml --max-steps 300 "
      "--log-every 100 --checkpoint-dir ''");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(testing::summaryValue(r.output, "test accuracy") > 0.70);

  const ProcessResult check = runTraind("check --model configs/models/fashion_mlp_pipeline.yaml");
  INFO(check.output);
  REQUIRE(check.exit_code == 0);
  CHECK_THAT(check.output, Catch::Contains("hidden1") && Catch::Contains("cpu:0") &&
                               Catch::Contains("cpu:1") && Catch::Contains("1F1B") &&
                               Catch::Contains("F0 F1 .. B0"));
  CHECK_THAT(check.output, Catch::Contains("placement: 2 stages (pipeline), 4 micro-batches"));

  // One stage is no pipeline: every layer on one device, micro-batches one after the other.
  const auto dir = testing::freshTempDir("one-stage");
  std::string one = testing::readFile(std::string(TRAIND_SOURCE_DIR) +
                                      "/configs/models/fashion_mlp_pipeline.yaml");
  one = testing::replaceAll(
      one,
      "  - {name: input, device: \"cpu:0\", layers: [flatten_1, hidden1]}\n"
      "  - {name: output, device: \"cpu:1\", layers: [hidden2, logits]}\n",
      "  - {name: all, device: \"cpu:0\", layers: [flatten_1, hidden1, hidden2, "
      "logits]}\n");
  one = testing::replaceAll(one, "devices: [cpu:0, cpu:1]", "devices: [cpu:0]");
  testing::writeFile(dir / "one.yaml", one);
  const ProcessResult single = runTraind("check --model " + (dir / "one.yaml").string());
  INFO(single.output);
  REQUIRE(single.exit_code == 0);
  CHECK_THAT(single.output,
             Catch::Contains("placement: 1 stage (every layer on one device), 4 micro-batches"));
}

TEST_CASE("traind refuses bad placements with exit 2", "[pipeline][integration]") {
  const auto dir = testing::freshTempDir("placement");
  const std::string spec = testing::readFile(std::string(TRAIND_SOURCE_DIR) +
                                             "/configs/models/fashion_mlp_pipeline.yaml");
  SECTION("a device the run does not have names the layer and the device") {
    const ProcessResult r = runTraind(
        "--model configs/models/fashion_mlp_pipeline.yaml --devices cpu:0 --max-steps 1 "
        "--checkpoint-dir ''");
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("cpu:1") && Catch::Contains("fashion_mlp_pipeline.yaml:"));
  }
  SECTION("micro-batches that do not divide the batch") {
    const auto path = dir / "spec.yaml";
    testing::writeFile(path, testing::replaceAll(spec, "micro_batches: 4", "micro_batches: 7"));
    const ProcessResult r = runTraind("--model " + path.string() + " --max-steps 1");
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("spec.yaml:34:18: training.micro_batches"));
  }
  SECTION("a placed model and towers") {
    const ProcessResult r = runTraind(
        "--model configs/models/fashion_mlp_pipeline.yaml --devices cpu:0,cpu:1,cpu:2 "
        "--max-steps 1 --checkpoint-dir ''");
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("--devices: training.devices: cpu:2 holds no layer"));
  }
  SECTION("the same in the spec names its line") {
    const auto path = dir / "spec.yaml";
    testing::writeFile(path, testing::replaceAll(spec, "devices: [cpu:0, cpu:1]",
                                                 "devices: [cpu:0, cpu:1, cpu:2]"));
    const ProcessResult r = runTraind("check --model " + path.string());
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output,
               Catch::Contains("spec.yaml:33:12: training.devices: cpu:2 holds no layer"));
  }
}

TEST_CASE("traind refuses towers the batch does not fit with exit 2", "[pipeline][integration]") {
  const auto dir = testing::freshTempDir("towers_misfit");
  const std::string spec =
      testing::readFile(std::string(TRAIND_SOURCE_DIR) + "/configs/models/fashion_mlp.yaml");
  const auto path = dir / "spec.yaml";
  SECTION("micro-batches that do not divide a device's share name their line") {
    testing::writeFile(path,
                       testing::replaceAll(spec, "training:\n", "training:\n  micro_batches: 5\n"));
    const ProcessResult r =
        runTraind("--model " + path.string() +
                  " --devices cpu:0,cpu:1,cpu:2 --max-steps 1 --checkpoint-dir ''");
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output,
               Catch::Contains("spec.yaml:24:18: training.micro_batches: 5 micro-batches") &&
                   Catch::Contains("(34, 33, 33)"));
  }
  SECTION("micro-batches on a GPU name their line: this build runs them on CPU devices only") {
    testing::writeFile(path, testing::replaceAll(spec, "training:\n",
                                                 "training:\n  micro_batches: 2\n"
                                                 "  devices: [cuda:0]\n"));
    const ProcessResult r = runTraind("check --model " + path.string());
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("spec.yaml:24:18: training.micro_batches: cuda:0 cannot "
                                         "run micro-batches: placed layers (device:, stages:) and "
                                         "micro_batches > 1 run on CPU devices only"));
  }
  SECTION("a batch smaller than the devices names data.batch_size's line") {
    testing::writeFile(path, testing::replaceAll(spec, "batch_size: 100", "batch_size: 2"));
    const ProcessResult r =
        runTraind("--model " + path.string() +
                  " --devices cpu:0,cpu:1,cpu:2 --max-steps 1 --checkpoint-dir ''");
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("spec.yaml:22:15: data.batch_size: a batch of 2 cannot be "
                                         "split over 3 devices"));
  }
}

}  // namespace
}  // namespace traind
