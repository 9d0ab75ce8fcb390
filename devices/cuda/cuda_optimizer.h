// core/optimizer.h's update rules over device flat buffers: one kernel
// launch updates every trainable variable (kernels with weight decay,
// frozen variables untouched) and moves the moving averages, its slots on
// the device. The learning rate, Adam's step size and the averages' decay
// are read from device StepScalars, so that the update can sit inside a
// captured CUDA graph.
//
//   CudaOptimizer optimizer(spec.optimizer, layout);
//   setStepScalars(host_scalars, spec.optimizer, learning_rate, update);  // copied to d_scalars
//   optimizer.enqueue(stream, d_params, d_grads, d_scalars);
#pragma once

#include <cstdint>
#include <vector>

#include "core/model_spec.h"
#include "core/variable_layout.h"
#include "devices/cuda/cuda_kernels.h"
#include "devices/cuda/cuda_memory.h"

namespace traind {

class CudaOptimizer {
 public:
  // On the current CUDA device; slots as Optimizer's (Adagrad's at
  // initial_accumulator, RMSProp's "rms" at initial_rms, the others zero:
  // the moving averages start where the caller sets them, as
  // Optimizer::startMovingAverage's).
  CudaOptimizer(const OptimizerSpec& spec, const VariableLayout& layout);

  // Optimizer::slotNames()' order: momentum / accumulator / m, v / rms,
  // momentum(, mg); then the moving averages.
  size_t slotCount() const { return slots_.size(); }
  float* slot(size_t i) const { return slots_[i].data(); }

  void enqueue(cudaStream_t stream, float* parameters, const float* gradients,
               const StepScalars* scalars) const;

 private:
  OptimizerSpec spec_;
  std::vector<DeviceArray<float>> slots_;
  DeviceArray<UpdateChunk> chunks_;
  int64_t chunk_count_ = 0;
};

// Fills the learning rate, Adam's bias-corrected step size and the moving
// average's decay for update number `update` (1-based), as Optimizer::apply
// computes them.
void setStepScalars(StepScalars& scalars, const OptimizerSpec& spec, float learning_rate,
                    int64_t update);

}  // namespace traind
