#include "core/stage_plan.h"

#include <algorithm>
#include <stdexcept>
#include <string_view>

#include "core/error.h"

namespace traind {
namespace {

std::string listed(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

void checkDevice(const std::vector<std::string>& devices, const std::string& device,
                 const SourceLocation& where, const std::string& field, const std::string& what) {
  if (std::find(devices.begin(), devices.end(), device) != devices.end()) return;
  throwInputError(where, field,
                  what + " is placed on " + device + ", which this run does not have: expected one "
                  "of its devices (" + listed(devices) +
                  "; training.devices or --devices)");
}

// The name of one run of layers on one device: its named stages joined,
// "front+back"; past three, the first two and the last, "s0+s1+...+s99
// (100 named stages)", as the name goes into every row of traind check's
// table and chart; "stage_<k>" for a run with none.
std::string runName(const std::vector<std::string_view>& names, size_t k) {
  if (names.empty()) return "stage_" + std::to_string(k);
  if (names.size() > 3)
    return std::string(names[0]) + "+" + std::string(names[1]) + "+...+" +
           std::string(names.back()) + " (" + std::to_string(names.size()) + " named stages)";
  std::string name;
  for (std::string_view part : names) name += (name.empty() ? "" : "+") + std::string(part);
  return name;
}

}  // namespace

int StagePlan::stageOf(int layer) const {
  for (size_t s = 0; s < stages.size(); ++s)
    if (layer >= stages[s].first_layer && layer < stages[s].end_layer) return int(s);
  throw std::out_of_range("StagePlan: no stage holds layer " + std::to_string(layer));
}

bool isPlaced(const ModelSpec& spec) {
  return !spec.stages.empty() ||
         std::any_of(spec.layers.begin(), spec.layers.end(),
                     [](const LayerSpec& layer) { return !layer.device.empty(); });
}

StagePlan planStages(const ModelSpec& spec, const LayerGraph& graph,
                     const std::vector<std::string>& devices) {
  const int layers = int(graph.layers.size());
  // Each layer's named stage (-1: none) and its own or its stage's device.
  std::vector<int> named(layers, -1);
  std::vector<std::string> device(layers);
  for (size_t s = 0; s < spec.stages.size(); ++s) {
    const StageSpec& stage = spec.stages[s];
    checkDevice(devices, stage.device, stage.location, "stages[" + std::to_string(s) + "].device",
                "stage '" + stage.name + "'");
    for (int i = 0; i < layers; ++i)
      if (std::find(stage.layers.begin(), stage.layers.end(), graph.layers[i].spec.name) !=
          stage.layers.end()) {
        named[i] = int(s);
        device[i] = stage.device;
      }
  }
  for (int i = 0; i < layers; ++i) {
    const LayerSpec& layer = graph.layers[i].spec;
    if (layer.device.empty()) continue;
    checkDevice(devices, layer.device, layer.location, "layers[" + std::to_string(i) + "].device",
                "layer '" + layer.name + "'");
    device[i] = layer.device;
  }

  StagePlan plan;
  plan.placed = isPlaced(spec);
  if (!plan.placed) {
    plan.stages.push_back({.name = "model", .device = "", .first_layer = 0, .end_layer = layers});
    return plan;
  }
  // Stages break where the device changes: two stages on one device would
  // only compete for it. A run takes the names of the spec's stages in it.
  std::string current = devices.front();
  std::vector<std::vector<std::string_view>> names;  // each run's named stages
  for (int i = 0; i < layers; ++i) {
    if (!device[i].empty()) current = device[i];
    if (i == 0 || current != plan.stages.back().device) {
      plan.stages.push_back({.name = "", .device = current, .first_layer = i, .end_layer = i});
      names.emplace_back();
    }
    PipelineStage& stage = plan.stages.back();
    stage.end_layer = i + 1;
    if (named[i] >= 0 && (i == stage.first_layer || named[i] != named[i - 1]))
      names.back().push_back(spec.stages[named[i]].name);
  }
  for (size_t s = 0; s < plan.stages.size(); ++s) plan.stages[s].name = runName(names[s], s);
  return plan;
}

}  // namespace traind
