// A pipeline stage: a replica of consecutive layers [first_layer, end_layer)
// of a LayerGraph on one device, for micro-batches of a fixed size. A
// Pipeline (devices/pipeline.h) chains stages, one per device of a placed
// model; Device::createStage makes them.
//
//   std::unique_ptr<StageReplica> stage =
//       device.createStage(graph, layout, {.first_layer = 2, .end_layer = 4}, 25, 2, seed);
//   stage->forward(slot, previous->output(previous_slot),
//                  previous->outputGradient(previous_slot), parameters, step);
//   // ... the next stage's forward and backward of the micro-batch ...
//   stage->backward(slot, gradients, accumulate);
//
// Slots: a stage holds the activations of `slots` micro-batches at once,
// each in its own slot, from a micro-batch's forward to its backward, so
// that a 1F1B schedule can forward micro-batch m + 1 before m comes back.
//
// Boundaries: activations and their gradients cross from stage to stage in
// host memory, in the graph's canonical layout (row-major, images NHWC), so
// that any two devices can be chained. A stage reads its input in place and
// writes its input gradient in place: the caller keeps the previous stage's
// output of a micro-batch unchanged, and its output gradient buffer reserved,
// until this stage's backward of that micro-batch has returned. A device
// whose memory is not host memory copies at the boundary.
//
// Like a Replica, a stage allocates nothing per call, and is used by one
// thread at a time.
#pragma once

#include <cstdint>
#include <optional>

#include "devices/device.h"

namespace traind {

struct StageRange {
  int first_layer = 0;
  int end_layer = 0;  // one past the last
};

class StageReplica {
 public:
  virtual ~StageReplica() = default;

  virtual int64_t microBatchSize() const = 0;
  virtual int slots() const = 0;
  // backward() has work: this stage or an earlier one has trainable variables.
  virtual bool hasBackward() const = 0;
  // backward() writes the gradient with respect to the input: an earlier
  // stage has trainable variables.
  virtual bool propagates() const = 0;

  // The micro-batch's forward pass into `slot`. input: [n, input...] of the
  // first layer, canonical; the batch's inputs for the first stage, the
  // previous stage's output() otherwise. input_gradient: where the slot's
  // backward writes the gradient with respect to input when propagates()
  // (the previous stage's outputGradient()), else null. training_step seeds
  // dropout as Replica::trainStep's step does; nullopt evaluates (no
  // dropout, and no backward follows).
  virtual void forward(int slot, const float* input, float* input_gradient, const float* parameters,
                       std::optional<uint64_t> training_step) = 0;

  // The slot's output [n, output...], canonical, from its last forward until
  // its next one. Not for the last stage, whose output goes to loss().
  virtual const float* output(int slot) = 0;

  // The last stage: the mean loss of the slot's micro-batch (labels or
  // targets as in Batch, for its n examples). With gradient_scale set, the
  // gradient of gradient_scale * loss with respect to the output is where
  // backward(slot) starts.
  virtual StepResult loss(int slot, const int32_t* labels, const float* targets,
                          std::optional<float> gradient_scale) = 0;

  // Where the next stage writes the gradient with respect to output(slot)
  // before backward(slot), canonical. Not for the last stage.
  virtual float* outputGradient(int slot) = 0;

  // The slot's backward pass: the gradients of the stage's trainable
  // variables written into `gradients` (the caller's flat buffer of the whole
  // layout; other variables are left untouched), or added to what is there
  // when `accumulate` is set; and, when propagates(), the gradient with
  // respect to the slot's input into the forward's input_gradient.
  virtual void backward(int slot, float* gradients, bool accumulate) = 0;
};

}  // namespace traind
