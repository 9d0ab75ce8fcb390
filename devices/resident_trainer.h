// Training that keeps the parameters, the gradients and the optimizer's
// slots on the devices: the host sends batches and reads losses, and reads
// the model back only for evaluations and checkpoints. A standalone run on
// a GPU trains this way (daemon/standalone.h says when); the Replica path
// (devices/device.h), whose parameters and update stay on the host, is what
// workers and concurrent steps use. The CUDA back end's
// CudaTrainer (devices/cuda/cuda_trainer.h) implements it; the tests have a
// host-side stand-in (test/resident_loop_test.cc).
//
//   std::unique_ptr<ResidentTrainer> trainer = createResidentTrainer(...);  // device_list.h
//   trainer->setParameters(state.parameters().data());
//   for (size_t i = 0; i < trainer->slotCount(); ++i)   // the moving averages too
//     trainer->setSlot(i, state.optimizer().slot(i).data());
//   trainer->submit(first_batch, learningRateAt(spec.learning_rate, step), step);
//   ... submit the next step, then collect() the one before: one step computing
//   while the host prepares the next
//   trainer->getParameters(state.parameters().data());  // waits for the steps in flight
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/batch.h"
#include "devices/device.h"

namespace traind {

// Header-only (no key function): libtraind_cuda.so, which implements it,
// and traind, which calls it, each emit its vtable, as for Replica.
class ResidentTrainer {
 public:
  virtual ~ResidentTrainer() = default;

  // Host flat buffers of the layout, to every device / from the first; and
  // the optimizer's slots, in Optimizer::slotNames()' order (the moving
  // averages last), which start at zero until set: set them all, as
  // Optimizer's start the averages at the parameters. Each waits for the
  // steps in flight.
  virtual void setParameters(const float* host) = 0;
  virtual void getParameters(float* host) = 0;
  virtual size_t slotCount() const = 0;
  virtual void setSlot(size_t i, const float* host) = 0;
  virtual void getSlot(size_t i, float* host) = 0;

  // Queues one training step of `batch` with `learning_rate`, as update
  // step + 1 (Adam's t); `step` also seeds dropout (tower t of N draws the
  // mask of step * N + t). The batch is copied before this returns. At most
  // two steps are in flight: a third waits for the oldest (whose result is
  // dropped unless collected).
  virtual void submit(const Batch& batch, float learning_rate, uint64_t step) = 0;
  // The result of the oldest step not collected yet, waiting for it.
  virtual StepResult collect() = 0;
};

}  // namespace traind
