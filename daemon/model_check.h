// `traind check`: the layer table of a model spec that passed every check.
#pragma once

#include <string>

#include "core/layer_graph.h"

namespace traind {

// One row per layer (name, type, output shape, parameter count) and the
// total, as printed by `traind check --model m.yaml`.
std::string layerTable(const ModelSpec& spec, const LayerGraph& graph);

}  // namespace traind
