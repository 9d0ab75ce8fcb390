// Device-resident training on GPUs (devices/resident_trainer.h):
// parameters, gradients and optimizer slots live on the GPU, the host only
// sends batches and reads losses. What a standalone run on GPUs trains with
// (daemon/standalone.cc), and the CUDA bench (bench/cuda_step.cc); the
// Replica path (cuda_replica.h) is what workers and concurrent steps use.
//
//   CudaTrainer trainer({0}, graph, layout, spec.optimizer, 100, spec.seed);
//   trainer.setParameters(state.parameters().data());  // and every slot: resident_trainer.h
//   for (int64_t step = 0; step < steps; ++step) {
//     trainer.submit(next_batch(), learningRateAt(spec.learning_rate, step), step);
//     if (step > 0) log(trainer.collect());  // the step before: one step in flight
//   }
//   log(trainer.collect());
//   trainer.getParameters(state.parameters().data());
//
// A step is: the batch's upload (pinned buffers, on a copy stream, while the
// step before computes), each tower's forward, loss and backward, the
// towers' gradients summed, and one optimizer kernel. On one GPU the whole
// step, the tower reduction included, is captured as a CUDA graph after two
// warm-up steps: one launch per step.
//
// Towers: gpus names the GPU of each tower; [0, 0] is two towers on GPU 0,
// [0, 1] one on each of two GPUs. The batch is split as towers.h splits it
// (consecutive shares, the first B % N one larger), tower t of N > 1 draws
// the dropout mask of step s * N + t, and each tower's loss gradient is
// scaled by 1 / B rather than 1 / share, so the towers' gradients sum to the
// whole batch's mean gradient: towers on one GPU are summed by a kernel,
// GPUs by NCCL's all-reduce (then every GPU applies the same update to its
// own copy of the parameters). With several GPUs the step runs eagerly, not
// as a graph.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "core/layer_graph.h"
#include "core/model_spec.h"
#include "core/variable_layout.h"
#include "devices/device.h"
#include "devices/resident_trainer.h"

namespace traind {

struct CudaTrainerOptions {
  bool graph = true;  // capture the step after `warmup` eager steps (one GPU only)
  int warmup = 2;
};

class CudaTrainer final : public ResidentTrainer {
 public:
  CudaTrainer(std::vector<int> gpus, const LayerGraph& graph, const VariableLayout& layout,
              const OptimizerSpec& optimizer, int64_t batch_size, uint64_t seed,
              CudaTrainerOptions options = {});
  ~CudaTrainer() override;
  CudaTrainer(const CudaTrainer&) = delete;
  CudaTrainer& operator=(const CudaTrainer&) = delete;

  int64_t batchSize() const { return batch_size_; }

  // ResidentTrainer's (devices/resident_trainer.h).
  void setParameters(const float* host) override;
  void getParameters(float* host) override;
  size_t slotCount() const override;
  void setSlot(size_t i, const float* host) override;
  void getSlot(size_t i, float* host) override;
  void submit(const Batch& batch, float learning_rate, uint64_t step) override;
  StepResult collect() override;

 private:
  // Waits for every step in flight.
  void synchronize();
  struct Gpu;
  struct Tower;

  void enqueueStep(Gpu& gpu, int slot);

  int64_t batch_size_;
  int64_t input_elements_;  // per example
  int64_t outputs_;         // per example
  LossKind loss_;
  OptimizerSpec optimizer_spec_;
  int64_t parameter_count_;
  CudaTrainerOptions options_;
  std::vector<std::unique_ptr<Gpu>> gpus_;
  std::vector<std::unique_ptr<Tower>> towers_;
  struct Slot;
  std::vector<std::unique_ptr<Slot>> slots_;  // two: the step computing and the next
  int next_slot_ = 0;
  std::deque<int> pending_;  // slots submitted, not collected
};

}  // namespace traind
