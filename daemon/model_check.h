// `traind check`: what a model or cluster spec that passed every check describes.
#pragma once

#include <string>

#include "core/cluster_spec.h"
#include "core/layer_graph.h"

namespace traind {

// One row per layer (name, type, output shape, parameter count), the total
// and the optimizer, as printed by `traind check --model m.yaml`.
std::string layerTable(const ModelSpec& spec, const LayerGraph& graph);

// Where the model runs, as printed by `traind check --model m.yaml` after the
// devices: each layer's device and stage and the schedule of a step when the
// spec places layers (training.devices' names stand for the run's devices);
// what towers and micro-batches do otherwise; and the steps in flight
// (training.concurrent_steps) when there are several; on GPUs, whether a
// standalone run keeps the model there. Throws the InputErrors a run
// of the spec would (a device the run does not have, micro-batches that do
// not divide the batch, a placed model with towers).
std::string placementReport(const ModelSpec& spec, const LayerGraph& graph);

// The spec's init_from, as printed by `traind check --model m.yaml`: its
// layers and where they come from, read only as a run starts (the base
// model may still be training); and a warning line when that checkpoint is
// not there or is no checkpoint now. A spec whose checkpoint.dir holds a
// checkpoint resumes from it, and reads no init_from: said instead. Empty
// without init_from.
std::string initFromReport(const ModelSpec& spec);

// Where a run of the spec starts, as printed by `traind check --model
// m.yaml`: "resumes: from <checkpoint> at global step N" when checkpoint.dir
// holds one, with a warning line when the run would refuse it (another
// architecture, naming what differs; an optimizer whose state it lacks; a
// damaged directory), read now as a run would read it as it starts; only
// a warning when the run could not create the directory or write in it (a
// file in its place, a read-only mount). Empty without checkpoint.dir.
std::string resumeReport(const ModelSpec& spec, const LayerGraph& graph);

// Where a run of the spec writes TensorBoard summaries, as printed by
// `traind check --model m.yaml`, or a warning line when it could not create
// that directory or write in it. Empty when it writes none.
std::string summaryReport(const ModelSpec& spec);

// One line per task, "ps 0 127.0.0.1:2221", as printed by `traind check
// --cluster c.yaml` (scripts/run-local-cluster reads it).
std::string taskTable(const ClusterSpec& cluster);

}  // namespace traind
