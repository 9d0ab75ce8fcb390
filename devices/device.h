// The device interface: where a model replica runs. core knows nothing of
// devices; a device builds a Replica from a LayerGraph for one batch size.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/batch.h"
#include "core/layer_graph.h"
#include "core/variable_layout.h"

namespace traind {

struct StepResult {
  double loss = 0.0;    // mean over the batch
  int64_t correct = 0;  // classification: examples whose arg-max is the label
  // With optimizer.clip_global_norm, the gradient's global norm before
  // clipping, set by whoever clips it (core/gradient_clipping.h).
  std::optional<double> gradient_norm = std::nullopt;
};

// What a training step does with its gradient once it is complete: the
// optimizer's update of the parameters, over the whole buffer or range by
// range from several threads at once (devices/optimizer_update.h).
class ParameterUpdate {
 public:
  virtual ~ParameterUpdate() = default;
  // Every trainable variable, with the calling thread's compute threads.
  virtual void applyAll() = 0;
  // Floats [offset, offset + count) of the flat buffers, all inside
  // variable `variable` (an index into the layout's views). Called from
  // several threads at once on disjoint ranges.
  virtual void applyRange(size_t variable, int64_t offset, int64_t count) = 0;
};

// What a training step says as its backward pass goes: which gradients are
// final. A worker sends those to the ps while the pass goes on, and writes
// the parameters it pulls back over those variables (docs/distributed.md,
// "Gradients sent during backward").
class GradientProgress {
 public:
  virtual ~GradientProgress() = default;
  // The step's loss is known, and no gradient is final yet: an exception
  // thrown here ends the step before any is sent. The CUDA replica, which
  // learns its loss only once its gradients are final, does not call it.
  virtual void lossComputed(const StepResult& result) { (void)result; }
  // Every variable with an index >= first_variable (into the layout's
  // views) has its final gradient in the step's buffer, and the step reads
  // none of their parameters again. Called from the step's thread with
  // decreasing values, the last time with 0.
  virtual void finalFrom(size_t first_variable) = 0;
};

// One copy of the model on one device, built for a fixed batch size. Every
// buffer and primitive is made in the constructor: a step allocates nothing.
//
// Parameters and gradients are flat buffers in the canonical layout of the
// VariableLayout the replica was built with, owned by the caller; the same
// pointers are passed every step, so a device may cache its own views of them.
// A replica is used by one thread at a time.
class Replica {
 public:
  virtual ~Replica() = default;

  virtual int64_t batchSize() const = 0;

  // Forward, loss, backward. Writes the batch-mean gradient of every
  // trainable variable into `gradients` (frozen ones are left untouched).
  // `step` seeds dropout: the same (parameters, batch, step) gives the same
  // result.
  virtual StepResult trainStep(const Batch& batch, const float* parameters, float* gradients,
                               uint64_t step) = 0;

  // trainStep, telling `progress` as gradients become final. A replica
  // that cannot tell earlier (towers of several devices, pipelines) says
  // so once, at the end.
  virtual StepResult trainStepWithProgress(const Batch& batch, const float* parameters,
                                           float* gradients, uint64_t step,
                                           GradientProgress& progress) {
    const StepResult result = trainStep(batch, parameters, gradients, step);
    progress.lossComputed(result);
    progress.finalFrom(0);
    return result;
  }

  // trainStep, then `update` once no part of the step reads the parameters
  // any more. Towers override it to apply the update from their threads,
  // each on the part of the gradient it has just averaged, while that part
  // is still in cache.
  virtual StepResult trainStepAndUpdate(const Batch& batch, const float* parameters,
                                        float* gradients, uint64_t step, ParameterUpdate& update) {
    const StepResult result = trainStep(batch, parameters, gradients, step);
    update.applyAll();
    return result;
  }

  // Forward and loss only, dropout off.
  virtual StepResult evaluate(const Batch& batch, const float* parameters) = 0;
};

class StageReplica;  // devices/stage.h
struct StageRange;

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;  // "cpu", "cuda:0"
  virtual std::unique_ptr<Replica> createReplica(const LayerGraph& graph,
                                                 const VariableLayout& layout, int64_t batch_size,
                                                 uint64_t seed) = 0;
  // A pipeline stage of some of the layers, for micro-batches, holding
  // `slots` of them at once (devices/stage.h). The default throws
  // InputError: the device cannot run placed layers or micro-batches.
  virtual std::unique_ptr<StageReplica> createStage(const LayerGraph& graph,
                                                    const VariableLayout& layout,
                                                    const StageRange& range,
                                                    int64_t micro_batch_size, int slots,
                                                    uint64_t seed);
};

}  // namespace traind
