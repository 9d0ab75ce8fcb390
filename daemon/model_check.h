// `traind check`: what a model or cluster spec that passed every check describes.
#pragma once

#include <string>

#include "core/cluster_spec.h"
#include "core/layer_graph.h"

namespace traind {

// One row per layer (name, type, output shape, parameter count) and the
// total, as printed by `traind check --model m.yaml`.
std::string layerTable(const ModelSpec& spec, const LayerGraph& graph);

// One line per task, "ps 0 127.0.0.1:2221", as printed by `traind check
// --cluster c.yaml` (scripts/run-local-cluster reads it).
std::string taskTable(const ClusterSpec& cluster);

}  // namespace traind
