// What a model spec must agree with in the cluster spec it trains under.
#pragma once

#include "core/cluster_spec.h"
#include "core/model_spec.h"

namespace traind {

// The InputErrors of a model spec that the cluster spec's training section
// refutes (steps in flight in sync mode), naming both files: checked by every
// node as it starts, and by `traind check --cluster c.yaml --model m.yaml`.
void checkModelFitsCluster(const ModelSpec& spec, const ClusterSpec& cluster);

}  // namespace traind
