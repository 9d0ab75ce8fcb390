#include "devices/cpu/cpu_stage.h"

#include <omp.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "devices/cpu/losses.h"
#include "devices/cpu/memory_format.h"

namespace traind {

CpuStage::CpuStage(const dnnl::engine& engine, const LayerGraph& graph,
                   const VariableLayout& layout, StageRange range, int64_t micro_batch_size,
                   int slots, uint64_t seed, int threads)
    : loss_(graph.loss),
      label_smoothing_(graph.label_smoothing),
      micro_batch_size_(micro_batch_size),
      last_(range.end_layer == int(graph.layers.size())),
      threads_(threads),
      stream_(engine),
      primitives_(engine) {
  if (micro_batch_size <= 0 || slots <= 0)
    throw std::invalid_argument("CPU stage: micro-batch size and slots must be positive, got " +
                                std::to_string(micro_batch_size) + " and " + std::to_string(slots));
  if (range.first_layer < 0 || range.first_layer >= range.end_layer ||
      range.end_layer > int(graph.layers.size()))
    throw std::invalid_argument("CPU stage: no layers [" + std::to_string(range.first_layer) +
                                ", " + std::to_string(range.end_layer) + ") in a model of " +
                                std::to_string(graph.layers.size()));
  const int first_trainable = firstTrainableLayer(graph);
  has_backward_ = first_trainable < range.end_layer;
  propagates_ = first_trainable < range.first_layer;
  const Shape& input_shape = graph.layers[size_t(range.first_layer)].input_shape;
  const Shape& output_shape = graph.layers[size_t(range.end_layer - 1)].output_shape;
  outputs_ = numElements(output_shape);
  const dnnl::memory::desc input = canonicalDesc(batchDims(micro_batch_size, input_shape));
  const dnnl::memory::desc output = canonicalDesc(batchDims(micro_batch_size, output_shape));

  // oneDNN's jit kernels plan their work for the thread count at creation.
  setThreads();
  for (int s = 0; s < slots; ++s) {
    auto slot = std::make_unique<Slot>(engine);
    slot->input.value = slot->memory.external(input);
    if (propagates_) slot->input.grad = slot->memory.external(input);
    slot->layers.emplace(graph, range.first_layer, range.end_layer, layout, micro_batch_size, seed,
                         slot->input, primitives_, slot->memory);
    const CpuTensor& out = slot->layers->output();
    if (last_) {
      if (out.value.get_desc() != canonicalDesc({micro_batch_size, outputs_}))
        throw std::logic_error("CPU stage: the last layer's output is not a row-major matrix");
    } else if (!out.value.get_data_handle()) {
      // Layers that pass their input through (flatten, a linear activation)
      // leave the output over the stage's input, the previous stage's slot
      // buffer. The next stage would read that buffer, which the previous
      // stage refills as soon as this one is done with it, while the next
      // may still be reading: a copy of its own, then.
      slot->output.memory = slot->memory.allocate(output);
      slot->output.reorder = &primitives_.addReorder(out.value, slot->output.memory);
      if (has_backward_)
        slot->output_gradient = writeAs(primitives_, slot->memory, out.grad, output);
    } else {
      slot->output = readAs(primitives_, slot->memory, out.value, output);
      if (has_backward_)
        slot->output_gradient = writeAs(primitives_, slot->memory, out.grad, output);
    }
    slots_.push_back(std::move(slot));
  }
  primitives_.allocateScratchpad();

  int64_t span_end = 0;
  span_begin_ = layout.totalSize();
  for (int i = range.first_layer; i < range.end_layer; ++i)
    for (int v : graph.layers[size_t(i)].variables) {
      const VariableView& view = layout.views()[size_t(v)];
      if (!view.trainable) continue;
      trainable_.push_back({view.offset, view.size});
      span_begin_ = std::min(span_begin_, view.offset);
      span_end = std::max(span_end, view.offset + view.size);
    }
  if (!trainable_.empty()) accumulator_ = FlatBuffer(span_end - span_begin_);
}

CpuStage::Slot& CpuStage::at(int slot) {
  if (slot < 0 || slot >= int(slots_.size()))
    throw std::out_of_range("CPU stage: slot " + std::to_string(slot) + " of " +
                            std::to_string(slots_.size()));
  return *slots_[size_t(slot)];
}

void CpuStage::setThreads() const {
  if (threads_ > 0) omp_set_num_threads(threads_);
}

void CpuStage::forward(int slot, const float* input, float* input_gradient, const float* parameters,
                       std::optional<uint64_t> training_step) {
  Slot& s = at(slot);
  setThreads();
  // oneDNN never writes through a primitive's source: the const_cast only
  // satisfies its interface.
  s.input.value.set_data_handle(const_cast<float*>(input));
  if (propagates_) {
    if (training_step && !input_gradient)
      throw std::invalid_argument("CPU stage: a training forward needs the input gradient buffer");
    s.input.grad.set_data_handle(input_gradient);
  }
  s.parameters = parameters;
  s.memory.bind(nullptr, parameters, nullptr);
  s.layers->forward(stream_, training_step);
  s.output.run(stream_);
  stream_.wait();
}

const float* CpuStage::output(int slot) {
  if (last_) throw std::logic_error("CPU stage: the last stage's output goes to loss()");
  return static_cast<const float*>(at(slot).output.memory.get_data_handle());
}

StepResult CpuStage::loss(int slot, const int32_t* labels, const float* targets,
                          std::optional<float> gradient_scale) {
  if (!last_) throw std::logic_error("CPU stage: loss() on a stage that does not end the model");
  Slot& s = at(slot);
  setThreads();
  const CpuTensor& output = s.layers->output();
  const float* values = static_cast<const float*>(output.value.get_data_handle());
  float* grad = gradient_scale && has_backward_ ? static_cast<float*>(output.grad.get_data_handle())
                                                : nullptr;
  StepResult result;
  switch (loss_) {
    case LossKind::SoftmaxCrossEntropy:
      if (!labels) throw std::invalid_argument("softmax_cross_entropy: batch has no labels");
      result =
          softmaxCrossEntropy(values, micro_batch_size_, outputs_, labels, label_smoothing_, grad);
      break;
    case LossKind::MeanSquaredError:
      if (!targets) throw std::invalid_argument("mean_squared_error: batch has no targets");
      result = meanSquaredError(values, micro_batch_size_, outputs_, targets, grad);
      break;
  }
  if (grad && *gradient_scale != 1.0f) {
    const float scale = *gradient_scale;
    for (int64_t i = 0; i < micro_batch_size_ * outputs_; ++i) grad[i] *= scale;
  }
  return result;
}

float* CpuStage::outputGradient(int slot) {
  if (last_ || !has_backward_)
    throw std::logic_error("CPU stage: no output gradient on the last stage or without backward");
  return static_cast<float*>(at(slot).output_gradient.memory.get_data_handle());
}

void CpuStage::backward(int slot, float* gradients, bool accumulate) {
  if (!has_backward_) return;
  Slot& s = at(slot);
  setThreads();
  const bool into_accumulator = accumulate && !trainable_.empty();
  if (into_accumulator)
    s.memory.bind(nullptr, s.parameters, accumulator_.data(), span_begin_);
  else
    s.memory.bind(nullptr, s.parameters, gradients);
  s.output_gradient.run(stream_);
  s.layers->backward(stream_);
  stream_.wait();
  if (!into_accumulator) return;
  for (const FloatRange& range : trainable_) {
    float* out = gradients + range.offset;
    const float* in = accumulator_.data() + (range.offset - span_begin_);
    const int64_t n = range.size;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) out[i] += in[i];
  }
}

}  // namespace traind
