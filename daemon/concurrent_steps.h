// Concurrent steps (training.concurrent_steps: K, docs/devices.md): K
// training steps in flight at once on the same devices, each on its own
// batch. A StepSlot is what one of them owns: its devices (a K-th share of
// the compute threads), its replica, the parameters its step computes from,
// its gradients and, with K > 1, a copy of its batch (the input pipeline's
// batch is valid only until the next one is taken, by another slot).
//
//   std::vector<std::unique_ptr<StepSlot>> slots = createStepSlots(spec, graph, layout);
//   for (auto& slot : slots) slot->gradients = FlatBuffer(layout.totalSize());
//   // on slot i's thread, with the input's lock held when K > 1:
//   const Batch& batch = slots[i]->take(input);
//   slots[i]->replica->trainStep(batch, params, slots[i]->gradients.data(), step);
//
// The roles decide what the slots share and when an update is applied:
// daemon/standalone.cc and daemon/worker_role.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/input_pipeline.h"
#include "core/layer_graph.h"
#include "core/model_spec.h"
#include "core/variable_layout.h"
#include "devices/device.h"

namespace traind {

// The compute threads of each of `concurrent_steps` steps in flight: the
// process's `threads` (0: defaultCpuThreads(), OMP_NUM_THREADS or one per
// core) shared out, at least one each. With one step, `threads` itself (0
// keeps OpenMP's default).
int threadsPerStep(int threads, int concurrent_steps);

struct StepSlot {
  std::vector<std::unique_ptr<Device>> devices;
  std::unique_ptr<Replica> replica;
  // The parameters its step computes from, where the role keeps a copy per
  // step, and what its step computed: empty until the role allocates them
  // (standalone with K = 1 reads its model state's parameters; a worker may
  // compute in its shared memory region, rpc/sharded_client.h).
  FlatBuffer parameters;
  FlatBuffer gradients;

  // The next batch of `input`: with K = 1 the pipeline's own, with K > 1 a
  // copy into this slot's buffers (the same pointers every step, as a
  // replica expects), so that other slots may take theirs meanwhile. The
  // caller serialises calls on one pipeline.
  const Batch& take(InputPipeline& input);

  // Examples held with K > 1; empty with K = 1.
  std::vector<float> inputs;
  std::vector<int32_t> labels;
  std::vector<float> targets;
  Batch batch;
};

// spec.training.concurrent_steps slots, each with devices spec.training.devices
// of threadsPerStep threads and its replica (devices/model_replica.h: towers
// or a pipeline, by the spec's placement; built on this thread); the role
// gives each its gradient (and parameter) buffers.
std::vector<std::unique_ptr<StepSlot>> createStepSlots(const ModelSpec& spec,
                                                       const LayerGraph& graph,
                                                       const VariableLayout& layout);

}  // namespace traind
