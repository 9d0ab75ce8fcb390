#include "daemon/concurrent_steps.h"

#include <algorithm>
#include <cstring>

#include "core/shape.h"
#include "core/stage_plan.h"
#include "devices/device_list.h"
#include "devices/model_replica.h"

namespace traind {

int threadsPerStep(int threads, int concurrent_steps) {
  if (concurrent_steps <= 1) return threads;
  const int total = threads > 0 ? threads : defaultCpuThreads();
  return std::max(1, total / concurrent_steps);
}

const Batch& StepSlot::take(InputPipeline& input) {
  const Batch& next = input.next();
  if (inputs.empty()) return next;
  // Every batch of a pipeline has the same size and kind: the buffers were
  // sized for it once.
  std::memcpy(inputs.data(), next.inputs, inputs.size() * sizeof(float));
  if (next.labels) std::memcpy(labels.data(), next.labels, labels.size() * sizeof(int32_t));
  if (next.targets) std::memcpy(targets.data(), next.targets, targets.size() * sizeof(float));
  batch.size = next.size;
  batch.labels = next.labels ? labels.data() : nullptr;
  batch.targets = next.targets ? targets.data() : nullptr;
  return batch;
}

std::vector<std::unique_ptr<StepSlot>> createStepSlots(const ModelSpec& spec,
                                                       const LayerGraph& graph,
                                                       const VariableLayout& layout) {
  const int k = spec.training.concurrent_steps;
  const int64_t batch_size = spec.data.batch_size;
  const StagePlan plan = planStages(spec, graph, spec.training.devices);
  checkModelReplica(spec, plan);
  std::vector<std::unique_ptr<StepSlot>> slots;
  for (int i = 0; i < k; ++i) {
    auto slot = std::make_unique<StepSlot>();
    slot->devices = createDevices(spec.training.devices, threadsPerStep(spec.training.threads, k),
                                  spec.training.devices_location);
    slot->replica = createModelReplica(devicePointers(slot->devices), graph, plan, layout,
                                       batch_size, spec.training.micro_batches, spec.seed);
    if (k > 1) {
      slot->inputs.resize(size_t(batch_size * numElements(graph.input_shape)));
      slot->labels.resize(size_t(batch_size));
      slot->targets.resize(size_t(batch_size * numElements(graph.output_shape)));
      slot->batch.inputs = slot->inputs.data();
    }
    slots.push_back(std::move(slot));
  }
  return slots;
}

}  // namespace traind
