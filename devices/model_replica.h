// The Replica a process (the standalone loop, a worker) trains with, chosen
// by the model's StagePlan (docs/devices.md):
//
//   unplaced (no layer names a device): towers, the whole model on each
//     device, each on its share of the batch (devices/towers.h); with
//     micro_batches M > 1 each tower runs its share as M micro-batches one
//     after the other and sums their gradients (gradient accumulation);
//   placed: a pipeline over the plan's stages, each on its device, the batch
//     cut into M micro-batches (devices/pipeline.h); M = 1 is plain model
//     parallelism.
//
//   StagePlan plan = planStages(spec, graph, spec.training.devices);
//   std::unique_ptr<Replica> replica =
//       createModelReplica(devicePointers(devices), graph, plan, layout,
//                          spec.data.batch_size, spec.training.micro_batches, spec.seed);
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/stage_plan.h"
#include "devices/device.h"

namespace traind {

// The InputErrors createModelReplica would throw for the spec's devices (by
// name), at the spec line of the field to change (training.devices, which
// --devices sets, training.micro_batches or data.batch_size), before anything
// is built: for `traind check` and a run's start.
void checkModelReplica(const ModelSpec& spec, const StagePlan& plan);

// devices: the run's devices (not owned; they must outlive the replica).
// Throws InputError when micro_batches does not divide the batch (or, with
// towers, a device's share of it), when the batch has fewer examples than
// there are towers, when a placed model leaves a device without layers (a
// pipeline per group of towers is not supported), and when a device cannot
// run micro-batches or stages.
std::unique_ptr<Replica> createModelReplica(const std::vector<Device*>& devices,
                                            const LayerGraph& graph, const StagePlan& plan,
                                            const VariableLayout& layout, int64_t batch_size,
                                            int micro_batches, uint64_t seed);

}  // namespace traind
