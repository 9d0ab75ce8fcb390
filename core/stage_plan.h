// Where each layer of a model runs: the model cut into stages of consecutive
// layers, each stage on one device (model parallelism, docs/devices.md).
//
//   layers:                                  stages: [{name: features, device: cpu:0,
//     - {name: conv1, ..., device: cpu:0}                  layers: [conv1, pool1]}]
//     - {name: pool1, ...}        # follows conv1
//     - {name: fc1, ..., device: cpu:1}
//
//   StagePlan plan = planStages(spec, graph, spec.training.devices);
//   // plan.stages: conv1..pool1 on cpu:0, fc1.. on cpu:1
//
// A spec that places no layer is unplaced: the whole model runs on each of
// the run's devices (towers), and the plan is one stage with no device.
#pragma once

#include <string>
#include <vector>

#include "core/layer_graph.h"
#include "core/model_spec.h"

namespace traind {

struct PipelineStage {
  std::string name;    // the spec's stage names it holds ("a+b"; past three
                       // "a+b+...+z (26 named stages)"), or "stage_<k>"
  std::string device;  // "" in an unplaced plan
  int first_layer = 0;
  int end_layer = 0;   // one past the last
};

struct StagePlan {
  // False when no layer or stage names a device.
  bool placed = false;
  // Consecutive, covering every layer once, in model order.
  std::vector<PipelineStage> stages;

  // The stage layer `layer` belongs to.
  int stageOf(int layer) const;
};

// Whether the spec places a layer on a device (a stage, or a layer's
// `device`): its devices then run one pipeline; else they are towers.
bool isPlaced(const ModelSpec& spec);

// Unplaced layers follow the previous layer; layers before the first placed
// one go to devices[0]. A new stage starts where the device changes, and
// takes the names of the spec's stages in it. Throws InputError at the
// layer's (or stage's) position in the spec, naming it and the device, when
// it names a device that is not one of `devices` (training.devices, or
// traind's --devices).
StagePlan planStages(const ModelSpec& spec, const LayerGraph& graph,
                     const std::vector<std::string>& devices);

}  // namespace traind
