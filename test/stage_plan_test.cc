#include "core/stage_plan.h"

#include <catch2/catch.hpp>
#include <string>

#include "core/layer_graph.h"
#include "test/temp_dir.h"

using namespace traind;

namespace {

// Four dense layers a, b, c, d, with `placement` appended to the spec (a
// stages section) and `devices` as each layer's device (empty: none).
ModelSpec fourLayers(const TempDir& dir, const std::array<std::string, 4>& devices,
                     const std::string& stages = "") {
  std::string text =
      "input: [6]\n"
      "layers:\n";
  const char* names[] = {"a", "b", "c", "d"};
  for (int i = 0; i < 4; ++i) {
    text += std::string("  - {type: dense, units: 5, name: ") + names[i];
    if (!devices[i].empty()) text += ", device: \"" + devices[i] + "\"";
    text += "}\n";
  }
  text += stages;
  text +=
      "optimizer: {type: sgd, learning_rate: 0.1}\n"
      "data: {synthetic: {type: regression}, batch_size: 8}\n"
      "loss: mse\n"
      "training: {max_steps: 10, devices: [cpu:0, cpu:1, cpu:2]}\n";
  return loadModelSpec(dir.write("spec.yaml", text));
}

std::string planError(const ModelSpec& spec, const std::vector<std::string>& devices) {
  try {
    planStages(spec, buildLayerGraph(spec), devices);
  } catch (const InputError& e) {
    return e.what();
  }
  FAIL("planStages did not throw InputError");
  return {};
}

}  // namespace

TEST_CASE("an unplaced model is one stage without a device", "[stage_plan]") {
  TempDir dir;
  const ModelSpec spec = fourLayers(dir, {"", "", "", ""});
  const StagePlan plan = planStages(spec, buildLayerGraph(spec), spec.training.devices);
  CHECK_FALSE(plan.placed);
  REQUIRE(plan.stages.size() == 1);
  CHECK(plan.stages[0].device.empty());
  CHECK(plan.stages[0].first_layer == 0);
  CHECK(plan.stages[0].end_layer == 4);
}

TEST_CASE("layers follow the previous one, stages break where the device changes",
          "[stage_plan]") {
  TempDir dir;
  const ModelSpec spec = fourLayers(dir, {"", "cpu:1", "", "cpu:0"});
  const StagePlan plan = planStages(spec, buildLayerGraph(spec), spec.training.devices);
  CHECK(plan.placed);
  REQUIRE(plan.stages.size() == 3);
  CHECK(plan.stages[0].device == "cpu:0");  // before the first placed layer: devices[0]
  CHECK(plan.stages[0].end_layer == 1);
  CHECK(plan.stages[1].device == "cpu:1");  // b and c
  CHECK(plan.stages[1].first_layer == 1);
  CHECK(plan.stages[1].end_layer == 3);
  CHECK(plan.stages[2].device == "cpu:0");
  CHECK(plan.stages[2].name == "stage_2");
  CHECK(plan.stageOf(2) == 1);
}

TEST_CASE("named stages place their layers and name the run", "[stage_plan]") {
  TempDir dir;
  const ModelSpec spec = fourLayers(dir, {"", "", "", ""},
                                    "stages:\n"
                                    "  - {name: front, device: cpu:1, layers: [a, b]}\n"
                                    "  - {name: back, device: cpu:2, layers: [c]}\n");
  const StagePlan plan = planStages(spec, buildLayerGraph(spec), spec.training.devices);
  REQUIRE(plan.stages.size() == 2);
  CHECK(plan.stages[0].name == "front");
  CHECK(plan.stages[0].device == "cpu:1");
  CHECK(plan.stages[1].name == "back");  // d follows c onto cpu:2
  CHECK(plan.stages[1].first_layer == 2);
  CHECK(plan.stages[1].end_layer == 4);
}

TEST_CASE("a run of many named stages on one device is named by its first and last",
          "[stage_plan]") {
  TempDir dir;
  std::string stages = "stages:\n";
  for (const char* name : {"a", "b", "c", "d"})
    stages += std::string("  - {name: s_") + name + ", device: cpu:1, layers: [" + name + "]}\n";
  const ModelSpec spec = fourLayers(dir, {"", "", "", ""}, stages);
  const StagePlan plan = planStages(spec, buildLayerGraph(spec), spec.training.devices);
  REQUIRE(plan.stages.size() == 1);
  CHECK(plan.stages[0].name == "s_a+s_b+...+s_d (4 named stages)");
  const ModelSpec three = fourLayers(dir, {"", "", "", "cpu:2"},
                                     "stages:\n  - {name: x, device: cpu:1, layers: [a]}\n"
                                     "  - {name: y, device: cpu:1, layers: [b]}\n"
                                     "  - {name: z, device: cpu:1, layers: [c]}\n");
  CHECK(planStages(three, buildLayerGraph(three), three.training.devices).stages[0].name ==
        "x+y+z");
}

TEST_CASE("a device the run does not have names the layer, its line and the devices",
          "[stage_plan]") {
  TempDir dir;
  const ModelSpec spec = fourLayers(dir, {"", "", "cpu:7", ""});
  const std::string error = planError(spec, spec.training.devices);
  CHECK_THAT(error, Catch::Contains("spec.yaml:5:"));
  CHECK_THAT(error, Catch::Contains("layers[2].device"));
  CHECK_THAT(error, Catch::Contains("layer 'c' is placed on cpu:7"));
  CHECK_THAT(error, Catch::Contains("cpu:0, cpu:1, cpu:2"));

  const ModelSpec staged = fourLayers(dir, {"", "", "", ""},
                                      "stages: [{name: front, device: cuda:0, layers: [a]}]\n");
  CHECK_THAT(planError(staged, {"cpu"}), Catch::Contains("stage 'front' is placed on cuda:0"));
}
