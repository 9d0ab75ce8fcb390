// Towers: data parallelism inside one process. One replica of the model per
// local device, each on its share of every batch, gradients averaged before
// they leave the replica, so the caller (the standalone loop, a worker) sees
// one Replica for the whole batch (docs/devices.md).
//
//   std::vector<std::unique_ptr<Device>> devices = createDevices({"cpu:0", "cpu:1"}, 2);
//   std::unique_ptr<Replica> replica =
//       createTowers({devices[0].get(), devices[1].get()}, graph, layout, 100, seed);
//   replica->trainStep(batch, parameters, gradients, step);  // examples 0-49 on cpu:0,
//                                                            // 50-99 on cpu:1
//
// With N devices a batch of B examples is cut into N consecutive shares of
// B / N examples, the first B % N of them one larger. Tower 0 runs on the
// caller's thread, tower t > 0 on a thread of its own, started once and
// kept (no thread is made per step; devices/thread_crew.h). Tower 0
// writes its gradient into the caller's buffer, every other tower into its
// own, allocated once; the caller's gradient becomes the towers' average
// weighted by share, which is the gradient of the mean loss over the whole
// batch: the same update as one device with the whole batch, up to float
// rounding. The towers' threads share that averaging between them, in one
// pass over memory; trainStepAndUpdate has each apply the optimizer to the
// part it has averaged in the same pass.
//
// Dropout: tower t of N trains step s with the mask of step s * N + t, so
// every tower draws its own mask and no two steps repeat one; the masks
// differ from those of a single-device run of the same step.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "devices/device.h"

namespace traind {

// The shares of a batch of batch_size examples over `towers` towers.
std::vector<int64_t> splitBatch(int64_t batch_size, int towers);

// A Replica over `devices` (not owned; they must outlive it) for batches of
// batch_size. With one device it is that device's own replica. Throws
// std::invalid_argument when batch_size is smaller than the number of
// devices (createModelReplica refuses that first, as an InputError). The
// replica of each tower is built on the thread that will run it (OpenMP
// keeps its thread count per thread).
std::unique_ptr<Replica> createTowers(std::vector<Device*> devices, const LayerGraph& graph,
                                      const VariableLayout& layout, int64_t batch_size,
                                      uint64_t seed);

}  // namespace traind
