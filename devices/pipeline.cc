#include "devices/pipeline.h"

#include <atomic>
#include <chrono>
#include <exception>
#include <optional>
#include <stdexcept>

#include "core/error.h"
#include "core/shape.h"
#include "devices/pipeline_schedule.h"
#include "devices/stage.h"
#include "devices/thread_crew.h"

namespace traind {
namespace {

using Clock = std::chrono::steady_clock;

// Thrown inside a stage's thread when another stage failed during the step:
// what it waits for will never come. The other stage's error is reported.
struct StepAbandoned {};

class StagedPipeline final : public Pipeline {
 public:
  StagedPipeline(const std::vector<Device*>& devices, const StagePlan& plan,
                 const LayerGraph& graph, const VariableLayout& layout, int64_t batch_size,
                 int micro_batches, uint64_t seed);

  int64_t batchSize() const override { return batch_size_; }
  StepResult trainStep(const Batch& batch, const float* parameters, float* gradients,
                       uint64_t step) override;
  StepResult trainStepAndUpdate(const Batch& batch, const float* parameters, float* gradients,
                                uint64_t step, ParameterUpdate& update) override;
  StepResult evaluate(const Batch& batch, const float* parameters) override;
  std::vector<StageTime> stageTimes() const override;
  double trainSeconds() const override { return train_seconds_; }

 private:
  enum class Work { Train, Evaluate };

  struct Stage {
    PipelineStage plan;
    Device* device = nullptr;
    int slots = 1;
    std::unique_ptr<StageReplica> replica;
    std::vector<PipelineOp> training;  // 1F1B, without backward passes when it has none
    std::vector<int> trainable;        // its trainable variables (indices into the layout)
    // Micro-batches of the current posting through its forward and its
    // backward pass; reset by the caller before each posting.
    std::atomic<int> forwards{0};
    std::atomic<int> backwards{0};
    double loss_sum = 0.0;  // the last stage: the micro-batches' mean losses
    int64_t correct = 0;
    double busy_seconds = 0.0;
    std::exception_ptr error;
  };

  void build(Stage& stage, const LayerGraph& graph, const VariableLayout& layout, uint64_t seed);
  // One posting's work on stage s.
  void run(size_t s, Work work);
  void forward(size_t s, int micro_batch, bool training);
  void backward(size_t s, int micro_batch);
  // Waits until `ready` or another stage failed (then throws StepAbandoned).
  template <class Ready>
  void await(Ready ready);
  void notifyStages();
  // Runs `work` on every stage and waits until all are done.
  void runStages(Work work);
  StepResult result() const;

  int64_t batch_size_;
  int micro_batches_;
  int64_t micro_batch_size_;
  int64_t input_floats_;   // per example
  int64_t output_floats_;  // per example
  const VariableLayout& layout_;
  std::vector<Stage> stages_;  // sized once: the threads hold references into it
  std::atomic<bool> failed_{false};
  // The current posting, written before it is posted.
  Batch batch_;
  const float* parameters_ = nullptr;
  float* gradients_ = nullptr;
  uint64_t step_ = 0;
  ParameterUpdate* update_ = nullptr;
  double train_seconds_ = 0.0;
  // Stage s runs on thread s; none when one stage runs on the caller's
  // thread. Last, so that its threads stop before what they use goes.
  std::optional<ThreadCrew> crew_;
};

StagedPipeline::StagedPipeline(const std::vector<Device*>& devices, const StagePlan& plan,
                               const LayerGraph& graph, const VariableLayout& layout,
                               int64_t batch_size, int micro_batches, uint64_t seed)
    : batch_size_(batch_size),
      micro_batches_(micro_batches),
      micro_batch_size_(micro_batches > 0 ? batch_size / micro_batches : 0),
      input_floats_(numElements(graph.input_shape)),
      output_floats_(numElements(graph.output_shape)),
      layout_(layout),
      stages_(plan.stages.size()) {
  if (micro_batches <= 0 || batch_size % micro_batches != 0)
    throw InputError("training.micro_batches: " + std::to_string(micro_batches) +
                     " micro-batches do not divide the batch of " + std::to_string(batch_size) +
                     " examples evenly");
  if (plan.stages.empty() || devices.size() != plan.stages.size())
    throw std::invalid_argument("pipeline: " + std::to_string(plan.stages.size()) + " stages on " +
                                std::to_string(devices.size()) + " devices");
  const int n = int(stages_.size());
  for (int s = 0; s < n; ++s) {
    Stage& stage = stages_[size_t(s)];
    stage.plan = plan.stages[size_t(s)];
    stage.device = devices[size_t(s)];
    stage.slots = stageSlots(s, n, micro_batches);
    for (int i = stage.plan.first_layer; i < stage.plan.end_layer; ++i)
      for (int v : graph.layers[size_t(i)].variables)
        if (graph.variables[size_t(v)].trainable) stage.trainable.push_back(v);
  }

  if (n == 1) {
    build(stages_.front(), graph, layout, seed);
    return;
  }
  crew_.emplace(n, [&](size_t s) {
    try {
      build(stages_[s], graph, layout, seed);
    } catch (...) {
      stages_[s].error = std::current_exception();
    }
  });
  for (const Stage& stage : stages_)
    if (stage.error) std::rethrow_exception(stage.error);  // crew_ stops as the members go
}

void StagedPipeline::build(Stage& stage, const LayerGraph& graph, const VariableLayout& layout,
                           uint64_t seed) {
  const size_t s = size_t(&stage - stages_.data());
  stage.replica = stage.device->createStage(
      graph, layout, {.first_layer = stage.plan.first_layer, .end_layer = stage.plan.end_layer},
      micro_batch_size_, stage.slots, seed);
  for (const PipelineOp& op : oneForwardOneBackward(int(s), int(stages_.size()), micro_batches_))
    if (op.kind == PipelineOp::Kind::Forward || stage.replica->hasBackward())
      stage.training.push_back(op);
}

void StagedPipeline::run(size_t s, Work work) {
  Stage& stage = stages_[s];
  try {
    if (work == Work::Train) {
      for (const PipelineOp& op : stage.training) {
        if (op.kind == PipelineOp::Kind::Forward)
          forward(s, op.micro_batch, true);
        else
          backward(s, op.micro_batch);
      }
      // Only this stage reads its variables: their update need not wait
      // for the stages still at work.
      if (update_)
        for (int v : stage.trainable) {
          const VariableView& view = layout_.views()[size_t(v)];
          update_->applyRange(size_t(v), view.offset, view.size);
        }
    } else {
      for (int m = 0; m < micro_batches_; ++m) forward(s, m, false);
    }
  } catch (const StepAbandoned&) {
  } catch (...) {
    stage.error = std::current_exception();
    failed_.store(true, std::memory_order_release);
    notifyStages();
  }
}

void StagedPipeline::forward(size_t s, int m, bool training) {
  Stage& stage = stages_[s];
  const int slot = m % stage.slots;
  const bool last = s + 1 == stages_.size();
  if (s > 0) {
    const Stage& before = stages_[s - 1];
    await([&] { return before.forwards.load(std::memory_order_acquire) > m; });
  }
  // The slot's previous micro-batch must be done with on the next stage,
  // which reads this stage's output in place (in its backward too). Under
  // 1F1B that holds already when this stage has a backward pass.
  if (!last && m >= stage.slots) {
    const Stage& after = stages_[s + 1];
    const bool read_in_backward = training && after.replica->hasBackward();
    const std::atomic<int>& done = read_in_backward ? after.backwards : after.forwards;
    await([&] { return done.load(std::memory_order_acquire) > m - stage.slots; });
  }

  const auto start = Clock::now();
  const float* input;
  float* input_gradient = nullptr;
  if (s == 0) {
    input = batch_.inputs + m * micro_batch_size_ * input_floats_;
  } else {
    StageReplica& before = *stages_[s - 1].replica;
    const int before_slot = m % stages_[s - 1].slots;
    input = before.output(before_slot);
    if (training && stage.replica->propagates())
      input_gradient = before.outputGradient(before_slot);
  }
  std::optional<uint64_t> step;
  if (training) step = micro_batches_ == 1 ? step_ : step_ * uint64_t(micro_batches_) + uint64_t(m);
  stage.replica->forward(slot, input, input_gradient, parameters_, step);
  if (last) {
    const int64_t first = m * micro_batch_size_;
    std::optional<float> gradient_scale;
    if (training) gradient_scale = 1.0f / float(micro_batches_);
    const StepResult r = stage.replica->loss(
        slot, batch_.labels ? batch_.labels + first : nullptr,
        batch_.targets ? batch_.targets + first * output_floats_ : nullptr, gradient_scale);
    stage.loss_sum += r.loss;
    stage.correct += r.correct;
  }
  stage.busy_seconds += std::chrono::duration<double>(Clock::now() - start).count();
  stage.forwards.store(m + 1, std::memory_order_release);
  notifyStages();
}

void StagedPipeline::backward(size_t s, int m) {
  Stage& stage = stages_[s];
  if (s + 1 < stages_.size()) {
    const Stage& after = stages_[s + 1];
    await([&] { return after.backwards.load(std::memory_order_acquire) > m; });
  }
  const auto start = Clock::now();
  stage.replica->backward(m % stage.slots, gradients_, m > 0);
  stage.busy_seconds += std::chrono::duration<double>(Clock::now() - start).count();
  stage.backwards.store(m + 1, std::memory_order_release);
  notifyStages();
}

template <class Ready>
void StagedPipeline::await(Ready ready) {
  crew_->pollThenWait([&] { return ready() || failed_.load(std::memory_order_acquire); });
  if (!ready()) throw StepAbandoned{};
}

void StagedPipeline::notifyStages() {
  if (crew_) crew_->notifyAll();  // one stage on the caller's thread: no one waits
}

void StagedPipeline::runStages(Work work) {
  failed_.store(false);
  for (Stage& stage : stages_) {
    stage.forwards.store(0, std::memory_order_relaxed);
    stage.backwards.store(0, std::memory_order_relaxed);
    stage.loss_sum = 0.0;
    stage.correct = 0;
    stage.error = nullptr;
  }
  if (!crew_) {
    run(0, work);
  } else {
    auto run_stage = [this, work](size_t s) { run(s, work); };
    crew_->run(run_stage);
  }
  for (const Stage& stage : stages_)
    if (stage.error) std::rethrow_exception(stage.error);
}

StepResult StagedPipeline::result() const {
  const Stage& last = stages_.back();
  return {.loss = last.loss_sum / double(micro_batches_), .correct = last.correct};
}

StepResult StagedPipeline::trainStep(const Batch& batch, const float* parameters, float* gradients,
                                     uint64_t step) {
  struct NoUpdate : ParameterUpdate {
    void applyAll() override {}
    void applyRange(size_t, int64_t, int64_t) override {}
  };
  NoUpdate none;
  return trainStepAndUpdate(batch, parameters, gradients, step, none);
}

StepResult StagedPipeline::trainStepAndUpdate(const Batch& batch, const float* parameters,
                                              float* gradients, uint64_t step,
                                              ParameterUpdate& update) {
  if (batch.size != batch_size_)
    throw std::invalid_argument("pipeline: built for batches of " + std::to_string(batch_size_) +
                                ", got " + std::to_string(batch.size));
  const auto start = Clock::now();
  batch_ = batch;
  parameters_ = parameters;
  gradients_ = gradients;
  step_ = step;
  update_ = &update;
  runStages(Work::Train);
  train_seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
  return result();
}

StepResult StagedPipeline::evaluate(const Batch& batch, const float* parameters) {
  if (batch.size != batch_size_)
    throw std::invalid_argument("pipeline: built for batches of " + std::to_string(batch_size_) +
                                ", got " + std::to_string(batch.size));
  batch_ = batch;
  parameters_ = parameters;
  gradients_ = nullptr;
  update_ = nullptr;
  runStages(Work::Evaluate);
  return result();
}

std::vector<Pipeline::StageTime> StagedPipeline::stageTimes() const {
  std::vector<StageTime> times;
  for (const Stage& stage : stages_)
    times.push_back({stage.plan.name, stage.device->name(), stage.busy_seconds});
  return times;
}

}  // namespace

std::unique_ptr<Pipeline> createPipeline(const std::vector<Device*>& stage_devices,
                                         const StagePlan& plan, const LayerGraph& graph,
                                         const VariableLayout& layout, int64_t batch_size,
                                         int micro_batches, uint64_t seed) {
  return std::make_unique<StagedPipeline>(stage_devices, plan, graph, layout, batch_size,
                                          micro_batches, seed);
}

}  // namespace traind
