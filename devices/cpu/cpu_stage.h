// A pipeline stage on the CPU (devices/stage.h): one LayerChain per slot over
// the stage's layers, all sharing one PrimitiveSet (and so one scratchpad:
// the stage's thread runs one call at a time). A slot's input and input
// gradient are the previous stage's buffers, read and written in place; its
// output and output gradient cross the boundary in the canonical layout,
// through a reorder where the last layer's format is blocked (a convolution's
// nChw8c), as the whole-model CpuReplica does only at its flatten.
#pragma once

#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <vector>

#include "devices/cpu/bound_memory.h"
#include "devices/cpu/format_bridge.h"
#include "devices/cpu/layer_chain.h"
#include "devices/cpu/primitive_set.h"
#include "devices/stage.h"

namespace traind {

class CpuStage : public StageReplica {
 public:
  // threads > 0 sets OpenMP's thread count for building and for every call,
  // as CpuReplica does.
  CpuStage(const dnnl::engine& engine, const LayerGraph& graph, const VariableLayout& layout,
           StageRange range, int64_t micro_batch_size, int slots, uint64_t seed, int threads);

  int64_t microBatchSize() const override { return micro_batch_size_; }
  int slots() const override { return int(slots_.size()); }
  bool hasBackward() const override { return has_backward_; }
  bool propagates() const override { return propagates_; }

  void forward(int slot, const float* input, float* input_gradient, const float* parameters,
               std::optional<uint64_t> training_step) override;
  const float* output(int slot) override;
  StepResult loss(int slot, const int32_t* labels, const float* targets,
                  std::optional<float> gradient_scale) override;
  float* outputGradient(int slot) override;
  void backward(int slot, float* gradients, bool accumulate) override;

 private:
  struct Slot {
    explicit Slot(const dnnl::engine& engine) : memory(engine) {}
    BoundMemory memory;
    CpuTensor input;  // external: the previous stage's buffers, or the batch's inputs
    std::optional<LayerChain> layers;
    FormatBridge output;                // canonical; not on the last stage
    FormatBridge output_gradient;       // canonical, run() into layers->output().grad
    const float* parameters = nullptr;  // of the slot's forward
  };
  // A trainable variable's floats in the layout.
  struct FloatRange {
    int64_t offset = 0;
    int64_t size = 0;
  };

  Slot& at(int slot);
  void setThreads() const;

  LossKind loss_;
  float label_smoothing_;
  int64_t micro_batch_size_;
  int64_t outputs_;  // per example, of the stage's last layer
  bool last_;        // the stage ends the model: loss() is its
  bool has_backward_;
  bool propagates_;
  int threads_;
  dnnl::stream stream_;
  PrimitiveSet primitives_;
  std::vector<std::unique_ptr<Slot>> slots_;
  // The stage's trainable variables, and the span of the layout they lie in:
  // a backward that accumulates writes their gradients into accumulator_
  // (the span's floats) and adds them to the caller's, since oneDNN's
  // backward primitives overwrite their output.
  std::vector<FloatRange> trainable_;
  int64_t span_begin_ = 0;
  FlatBuffer accumulator_;
};

}  // namespace traind
