#include "devices/towers.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>

#include "core/shape.h"
#include "devices/thread_crew.h"

namespace traind {
namespace {

// A run of floats of a flat buffer, inside one variable.
struct FloatRange {
  size_t variable = 0;  // index into the layout's views
  int64_t offset = 0;
  int64_t size = 0;
};

// The trainable variables' floats cut into `parts` pieces of nearly equal
// size; piece t is what tower t's thread averages. Frozen variables are left
// out: the caller's gradients of them stay untouched, as Replica promises.
std::vector<std::vector<FloatRange>> averagingPieces(const VariableLayout& layout, int parts) {
  int64_t total = 0;
  for (const VariableView& v : layout.views())
    if (v.trainable) total += v.size;
  std::vector<std::vector<FloatRange>> pieces(static_cast<size_t>(parts));
  int part = 0;
  int64_t part_end = total / parts;  // piece t spans [total * t / parts, total * (t + 1) / parts)
  int64_t at = 0;                    // trainable floats before v + i
  for (size_t variable = 0; variable < layout.views().size(); ++variable) {
    const VariableView& v = layout.views()[variable];
    if (!v.trainable) continue;
    for (int64_t i = 0; i < v.size;) {
      while (at >= part_end) part_end = total * (++part + 1) / parts;
      const int64_t n = std::min(v.size - i, part_end - at);
      pieces[size_t(part)].push_back({variable, v.offset + i, n});
      i += n;
      at += n;
    }
  }
  return pieces;
}

class Towers : public Replica {
 public:
  Towers(const std::vector<Device*>& devices, const LayerGraph& graph, const VariableLayout& layout,
         int64_t batch_size, uint64_t seed);

  int64_t batchSize() const override { return batch_size_; }
  StepResult trainStep(const Batch& batch, const float* parameters, float* gradients,
                       uint64_t step) override;
  StepResult trainStepAndUpdate(const Batch& batch, const float* parameters, float* gradients,
                                uint64_t step, ParameterUpdate& update) override;
  StepResult evaluate(const Batch& batch, const float* parameters) override;

 private:
  enum class Work { Train, Evaluate };

  struct Tower {
    int64_t begin = 0;  // its share: examples [begin, begin + size) of every batch
    int64_t size = 0;
    float weight = 0.0f;  // size / batch size
    std::unique_ptr<Replica> replica;
    // The batch-mean gradient of its share; empty for tower 0, which writes
    // into the caller's buffer and is averaged in place there.
    FlatBuffer gradients;
    // The ranges of the caller's gradients this tower's thread averages.
    std::vector<FloatRange> averaging;
    StepResult result;
    std::exception_ptr error;
  };

  void runShare(Tower& tower, uint64_t tower_index, Work work);
  Batch share(const Tower& tower) const;
  float* gradientsOf(Tower& tower) {
    return tower.gradients.size() ? tower.gradients.data() : gradients_;
  }
  void average(const Tower& tower) const;
  // Posts `work` to every tower and waits until all have done it.
  void runTowers(Work work);
  void checkBatch(const Batch& batch) const;
  void rethrowFirstError() const;
  // The towers' results as one: the loss weighted by share, correct summed.
  StepResult combinedResult() const;

  int64_t batch_size_;
  int64_t input_floats_;       // per example
  int64_t output_floats_;      // per example
  std::vector<Tower> towers_;  // sized once: the threads hold references into it

  // Towers whose gradient of this step is written: every one is before any
  // tower averages.
  std::atomic<int> written_{0};
  // The current posting's arguments, written before it is posted.
  Batch batch_;
  const float* parameters_ = nullptr;
  float* gradients_ = nullptr;
  uint64_t step_ = 0;
  ParameterUpdate* update_ = nullptr;  // applied by each tower after its averaging, if set
  std::atomic<bool> failed_{false};  // a tower threw during this posting
  // Tower t runs on thread t. Last, so that its threads stop before what
  // they use goes.
  std::optional<ThreadCrew> crew_;
};

Towers::Towers(const std::vector<Device*>& devices, const LayerGraph& graph,
               const VariableLayout& layout, int64_t batch_size, uint64_t seed)
    : batch_size_(batch_size),
      input_floats_(numElements(graph.input_shape)),
      output_floats_(numElements(graph.output_shape)),
      towers_(devices.size()) {
  const int n = int(devices.size());
  const std::vector<int64_t> shares = splitBatch(batch_size, n);
  if (shares.back() == 0)  // createModelReplica says which field to change
    throw std::invalid_argument("Towers: a batch of " + std::to_string(batch_size) + " for " +
                                std::to_string(n) + " towers");
  std::vector<std::vector<FloatRange>> pieces = averagingPieces(layout, n);
  int64_t begin = 0;
  for (int t = 0; t < n; ++t) {
    Tower& tower = towers_[size_t(t)];
    tower.begin = begin;
    tower.size = shares[size_t(t)];
    tower.weight = float(double(tower.size) / double(batch_size));
    if (t > 0) tower.gradients = FlatBuffer(layout.totalSize());
    tower.averaging = std::move(pieces[size_t(t)]);
    begin += tower.size;
  }

  // The replica of each tower is built on the thread that runs it.
  crew_.emplace(n, [&](size_t t) {
    Tower& tower = towers_[t];
    try {
      tower.replica = devices[t]->createReplica(graph, layout, tower.size, seed);
    } catch (...) {
      tower.error = std::current_exception();
    }
  });
  rethrowFirstError();  // crew_ stops its threads as the members go
}

void Towers::runShare(Tower& tower, uint64_t tower_index, Work work) {
  try {
    if (work == Work::Train) {
      const uint64_t step = step_ * towers_.size() + tower_index;
      tower.result = tower.replica->trainStep(share(tower), parameters_, gradientsOf(tower), step);
    } else {
      tower.result = tower.replica->evaluate(share(tower), parameters_);
    }
  } catch (...) {
    tower.error = std::current_exception();
    failed_.store(true);
  }
  if (work != Work::Train) return;
  if (written_.fetch_add(1, std::memory_order_acq_rel) + 1 == int(towers_.size()))
    crew_->notifyAll();
  crew_->pollThenWait(
      [this] { return written_.load(std::memory_order_acquire) == int(towers_.size()); });
  if (!failed_.load()) average(tower);
}

Batch Towers::share(const Tower& tower) const {
  Batch b;
  b.size = tower.size;
  if (batch_.inputs) b.inputs = batch_.inputs + tower.begin * input_floats_;
  if (batch_.labels) b.labels = batch_.labels + tower.begin;
  if (batch_.targets) b.targets = batch_.targets + tower.begin * output_floats_;
  return b;
}

void Towers::average(const Tower& tower) const {
  // Block by block, so that the caller's block stays in L1 while every
  // tower's gradient is added to it and the update reads it: one pass over
  // memory.
  constexpr int64_t kBlock = 2048;
  const float first_weight = towers_.front().weight;
  for (const FloatRange& range : tower.averaging) {
    for (int64_t begin = range.offset; begin < range.offset + range.size; begin += kBlock) {
      const int64_t n = std::min(kBlock, range.offset + range.size - begin);
      float* out = gradients_ + begin;
      for (int64_t i = 0; i < n; ++i) out[i] *= first_weight;
      for (size_t t = 1; t < towers_.size(); ++t) {
        const float weight = towers_[t].weight;
        const float* in = towers_[t].gradients.data() + begin;
        for (int64_t i = 0; i < n; ++i) out[i] += weight * in[i];
      }
      if (update_) update_->applyRange(range.variable, begin, n);
    }
  }
}

void Towers::runTowers(Work work) {
  failed_.store(false);
  written_.store(0, std::memory_order_relaxed);
  for (Tower& tower : towers_) tower.error = nullptr;
  auto run_share = [this, work](size_t t) { runShare(towers_[t], uint64_t(t), work); };
  crew_->run(run_share);
}

void Towers::checkBatch(const Batch& batch) const {
  if (batch.size != batch_size_)
    throw std::invalid_argument("towers: built for batches of " + std::to_string(batch_size_) +
                                ", got " + std::to_string(batch.size));
}

void Towers::rethrowFirstError() const {
  for (const Tower& tower : towers_)
    if (tower.error) std::rethrow_exception(tower.error);
}

StepResult Towers::trainStep(const Batch& batch, const float* parameters, float* gradients,
                             uint64_t step) {
  checkBatch(batch);
  batch_ = batch;
  parameters_ = parameters;
  gradients_ = gradients;
  step_ = step;
  update_ = nullptr;
  runTowers(Work::Train);
  return combinedResult();
}

StepResult Towers::trainStepAndUpdate(const Batch& batch, const float* parameters,
                                      float* gradients, uint64_t step, ParameterUpdate& update) {
  checkBatch(batch);
  batch_ = batch;
  parameters_ = parameters;
  gradients_ = gradients;
  step_ = step;
  // A tower averages its pieces only after every tower has written its
  // gradient, so no tower reads the parameters while they are updated.
  update_ = &update;
  runTowers(Work::Train);
  update_ = nullptr;
  return combinedResult();
}

StepResult Towers::evaluate(const Batch& batch, const float* parameters) {
  checkBatch(batch);
  batch_ = batch;
  parameters_ = parameters;
  gradients_ = nullptr;
  runTowers(Work::Evaluate);
  return combinedResult();
}

StepResult Towers::combinedResult() const {
  rethrowFirstError();
  StepResult result;
  for (const Tower& tower : towers_) {
    result.loss += tower.result.loss * double(tower.size) / double(batch_size_);
    result.correct += tower.result.correct;
  }
  return result;
}

}  // namespace

std::vector<int64_t> splitBatch(int64_t batch_size, int towers) {
  if (towers <= 0) throw std::invalid_argument("splitBatch: no towers");
  std::vector<int64_t> shares(size_t(towers), batch_size / towers);
  for (int64_t t = 0; t < batch_size % towers; ++t) ++shares[size_t(t)];
  return shares;
}

std::unique_ptr<Replica> createTowers(std::vector<Device*> devices, const LayerGraph& graph,
                                      const VariableLayout& layout, int64_t batch_size,
                                      uint64_t seed) {
  if (devices.empty()) throw std::invalid_argument("createTowers: no devices");
  if (devices.size() == 1) return devices.front()->createReplica(graph, layout, batch_size, seed);
  return std::make_unique<Towers>(devices, graph, layout, batch_size, seed);
}

}  // namespace traind
