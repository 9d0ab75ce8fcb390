// The data a model spec names, loaded and checked against the model before
// anything trains: example shape, label range, regression targets.
#pragma once

#include <optional>

#include "core/dataset.h"
#include "core/layer_graph.h"

namespace traind {

struct TrainingData {
  Dataset train;
  std::optional<Dataset> test;
};

// InputError (naming the data field and both shapes) when the data cannot
// feed the model: another example size, labels beyond the logits, class
// labels for an mse model or regression targets for a softmax one.
TrainingData loadTrainingData(const ModelSpec& spec, const LayerGraph& graph);

}  // namespace traind
